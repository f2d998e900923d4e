//! The Redis side's vocabulary, owned in one place: the limits every script
//! checks, and the owner tokens. Everything above it (backends, the waiting
//! core, the kinds) takes these from here; it imports nothing of theirs.

use std::time::Duration;

use crate::LockError;

/// The longest lease accepted: 30 days. Longer leases are almost always a
/// unit mistake, and a lock that outlives its owner that long is a stuck lock.
pub const MAX_EXPIRE: Duration = Duration::from_secs(30 * 24 * 3600);

/// 128 random bits from the operating system's CSPRNG, as 32 hex digits.
pub(crate) fn new_token() -> Result<String, LockError> {
    let mut bytes = [0_u8; 16];
    getrandom::fill(&mut bytes).map_err(|e| LockError::Runtime {
        reason: format!("the operating system's random number generator failed: {e}"),
    })?;
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut token = String::with_capacity(32);
    for b in bytes {
        token.push(char::from(HEX[usize::from(b >> 4)]));
        token.push(char::from(HEX[usize::from(b & 15)]));
    }
    Ok(token)
}
