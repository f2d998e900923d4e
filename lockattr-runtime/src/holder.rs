//! Who holds a lock: the record every acquisition writes next to what it
//! takes (host name, process id, the Locker's label), read back as a
//! [`Holder`] by the operators' calls, and the Locker's label itself.

use std::time::{Duration, SystemTime};

use crate::LockError;

/// Who holds a lock: recorded by the acquisition that took it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Holder {
    /// The holder's host name.
    pub host: String,
    /// The holder's process id.
    pub pid: u32,
    /// The holder's Locker label ([`LockerBuilder::label`](crate::LockerBuilder::label);
    /// by default the executable's name).
    pub label: String,
    /// When the lock was taken, by the clock of the process that took it;
    /// when a release handed it to a waiter, by the Redis server's clock at
    /// the hand-over.
    pub since: SystemTime,
}

impl std::fmt::Display for Holder {
    /// `label@host:pid`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}@{}:{}", self.label, self.host, self.pid)
    }
}

/// The longest label accepted.
const MAX_LABEL: usize = 100;

/// `<host>\n<pid>\n<label>`: how a Locker's acquisitions record their holder.
pub(crate) fn holder_record(label: &str) -> String {
    let host = gethostname::gethostname();
    let host: String = host
        .to_string_lossy()
        .chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect();
    format!("{host}\n{}\n{label}", std::process::id())
}

/// Checks a label given to the builder.
pub(crate) fn check_label(label: &str) -> Result<String, LockError> {
    if label.len() > MAX_LABEL {
        return Err(LockError::invalid(
            "Locker label",
            format!("it is {} bytes long; at most {MAX_LABEL}", label.len()),
        ));
    }
    if label.chars().any(char::is_control) {
        return Err(LockError::invalid(
            "Locker label",
            "it may not contain line breaks or other control characters",
        ));
    }
    Ok(label.to_owned())
}

/// The executable's name, as the default label.
pub(crate) fn default_label() -> String {
    let name = std::env::current_exe()
        .ok()
        .and_then(|path| path.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "unknown".to_owned());
    let name: String = name
        .chars()
        .filter(|c| !c.is_control())
        .take(MAX_LABEL)
        .collect();
    name
}

/// `<host>\n<pid>\n<label>\n<since ms>` to a [`Holder`] (what follows
/// another line break is ignored).
pub(crate) fn parse_holder(who: &str) -> Option<Holder> {
    let mut parts = who.split('\n');
    let host = parts.next()?.to_owned();
    let pid = parts.next()?.parse().ok()?;
    let label = parts.next()?.to_owned();
    let since_ms: u64 = parts.next()?.parse().ok()?;
    Some(Holder {
        host,
        pid,
        label,
        since: SystemTime::UNIX_EPOCH + Duration::from_millis(since_ms),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holders_are_parsed() {
        let holder = parse_holder("web-1\n4242\nbilling\n1700000000123").unwrap();
        assert_eq!(holder.to_string(), "billing@web-1:4242");
        assert_eq!(
            holder.since,
            SystemTime::UNIX_EPOCH + Duration::from_millis(1_700_000_000_123)
        );
        assert_eq!(parse_holder(""), None);
        // A permit's value adds its fencing token on a line of its own.
        let permit = parse_holder("web-1\n4242\nbilling\n1700000000123\n17").unwrap();
        assert_eq!(permit, holder);
        assert!(check_label("a\nb").is_err());
        assert!(check_label(&"x".repeat(101)).is_err());
        assert!(holder_record("l").ends_with(&format!("\n{}\nl", std::process::id())));
    }
}
