//! The key layout and the limits, owned in one place: every Redis key name
//! of every kind, how a lock name is spelled in a key (and read back), the
//! limits every script checks, and the owner tokens. Everything above it
//! (backends, the waiting core, the kinds, operator calls) takes these from
//! here; it imports nothing of theirs. `docs/protocol.md` has the table of
//! keys and stored formats.

use std::sync::Arc;
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

/// The most permits a semaphore may have (256): every acquisition looks at
/// each permit in one script call, so its cost grows with the count. For
/// more concurrent holders, split the work over several names.
///
/// ```
/// # use lockattr_runtime as lockattr; // the doctest builds without the facade
/// assert_eq!(lockattr::MAX_PERMITS, 256);
/// ```
pub const MAX_PERMITS: u32 = 256;

/// Which side of a read-write lock a request takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RwMode {
    /// A shared hold: any number of readers at once, no writer.
    Read,
    /// An exclusive hold: no reader and no other writer.
    Write,
}

/// The Redis keys of one lock, and how long its fencing counter outlives
/// a lease.
///
/// The lock key is `<prefix>{<name>}` and every other key of the lock is
/// `<prefix>{<name>}:<suffix>`, so that all of them hash to one Redis Cluster
/// slot (the part between the braces is the hash tag). A `}` inside the name
/// would end the hash tag early, so the name is escaped first: `\` becomes
/// `\\` and `}` becomes `\x7d`. The escape is reversible, so two different
/// names never share a key.
#[derive(Debug, Clone)]
pub(crate) struct Keys {
    /// `<prefix>{<escaped name>}`: holds the owner's token while locked.
    pub(crate) lock: String,
    /// `<prefix>{<escaped name>}:fence`: the lock's fencing counter. It
    /// expires [`fence_retention`](Self::fence_retention) after the lease it
    /// was last incremented for (or after the release); a new counter
    /// starts from the server's clock, so tokens keep increasing across
    /// its expiry (see `scripts::next_fence_lua`).
    pub(crate) fence: String,
    /// `<prefix>{<escaped name>}:queue`: the tokens of the waiters, oldest
    /// first. Redis deletes it when it is empty.
    pub(crate) queue: String,
    /// `<prefix>{<escaped name>}:waiters`: each queued token's deadline,
    /// lease, when it was queued and its holder record (`<deadline
    /// ms>:<lease ms>:<queued ms>:<holder>`). Redis deletes it when it is
    /// empty.
    pub(crate) waiters: String,
    /// `<prefix>{<escaped name>}:wake`: the pub/sub channel on which a
    /// release names the waiter it handed the lock to.
    pub(crate) channel: String,
    /// How long the fencing counter stays after a lease ended (the
    /// Locker's `fence_retention`): every script that writes the counter
    /// sets its expiry from this.
    pub(crate) fence_retention: Duration,
    /// Who takes the lock (`<host>\n<pid>\n<label>`), recorded with it.
    pub(crate) holder: Arc<str>,
    /// How long a release lets newcomers take the lock while the oldest
    /// waiter has waited less than that (the Locker's
    /// [`Fairness`](crate::Fairness)); zero: every release hands the lock to
    /// the oldest waiter.
    pub(crate) barge: Duration,
    /// The kind that holds under these keys, with what it adds to them.
    pub(crate) kind: KindKeys,
}

/// The closed list of what holds under a name's keys.
#[derive(Debug, Clone)]
pub(crate) enum KindKeys {
    /// A lock (also each name of a set).
    Lock,
    /// One side of a read-write lock: its `lock` is the key the holder
    /// holds (the writer's, or the reader's own).
    Rw(RwKeys),
    /// A permit of a semaphore of this many permits: its `lock` is the key
    /// of the permit held.
    Permit(u32),
}

impl Keys {
    /// The kind's index of its holders that a renewal of this hold updates
    /// (a read-write lock's readers, for a reader); the holder key itself
    /// when the kind keeps none.
    pub(crate) fn index(&self) -> &str {
        match &self.kind {
            KindKeys::Rw(rw) => rw.index().unwrap_or(&self.lock),
            KindKeys::Lock | KindKeys::Permit(_) => &self.lock,
        }
    }

    /// The keys of a name that queues its waiters, as the lock's and the
    /// sets' scripts take them: holder, fence counter, queue, waiters.
    pub(crate) fn queued(&self) -> [&str; 4] {
        [&self.lock, &self.fence, &self.queue, &self.waiters]
    }

    /// The keys a hold keeps alive, as renewals take them: holder, fence
    /// counter, the kind's index of holders (see [`index`](Self::index)).
    pub(crate) fn held(&self) -> [&str; 3] {
        [&self.lock, &self.fence, self.index()]
    }

    pub(crate) fn new(prefix: &str, name: &str, fence_retention: Duration) -> Keys {
        let mut lock = String::with_capacity(prefix.len() + name.len() + 2);
        lock.push_str(prefix);
        lock.push('{');
        spell_name(&mut lock, name);
        lock.push('}');
        let mut keys = Keys {
            fence: String::new(),
            queue: String::new(),
            waiters: String::new(),
            channel: String::new(),
            lock,
            fence_retention,
            holder: Arc::from(""),
            barge: Duration::ZERO,
            kind: KindKeys::Lock,
        };
        keys.place(&keys.lock.clone());
        keys
    }

    /// Puts the fence counter, the queue, the waiters and the channel under
    /// `base`.
    fn place(&mut self, base: &str) {
        self.fence = format!("{base}:fence");
        self.queue = format!("{base}:queue");
        self.waiters = format!("{base}:waiters");
        self.channel = format!("{base}:wake");
    }

    /// Moves the keys of a kind of its own (`rw`, `sem`) under
    /// `<lock>:<kind>`, returned; such a kind always hands over to the
    /// oldest waiters (no barging).
    fn rebase(&mut self, kind: &str) -> String {
        let base = format!("{}:{kind}", self.lock);
        self.place(&base);
        self.barge = Duration::ZERO;
        base
    }

    /// The keys of the read-write lock of the same name, as its writer
    /// uses them (what operator calls read and free); `self` as
    /// [`Keys::new`] made them.
    pub(crate) fn read_write(&self) -> Keys {
        let mut keys = self.clone();
        RwKeys::make(&mut keys, RwMode::Write);
        keys
    }
}

/// Appends `name` as a key spells it: `\\` becomes `\\\\` and `}` becomes
/// `\\x7d`, so that the name cannot end the hash tag early and two names
/// never share a key.
pub(crate) fn spell_name(out: &mut String, name: &str) {
    for c in name.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '}' => out.push_str("\\x7d"),
            c => out.push(c),
        }
    }
}

/// What follows the lock key `<prefix>{<name>}` in the key of a read-write
/// lock's writer (see [`RwKeys`]).
pub(crate) const RW_WRITE: &str = ":rw:write";
/// What follows the lock key in a read-write lock's index of readers.
pub(crate) const RW_READING: &str = ":rw:reading";
/// What follows the lock key in the plain set of readers that versions
/// before the index kept (read during a rolling deploy, never written).
pub(crate) const RW_LEGACY_READERS: &str = ":rw:readers";
/// What follows the lock key in a semaphore's permit key, before the
/// permit's index (see [`Permits`]).
pub(crate) const SEM_PERMIT: &str = ":sem:permit:";

/// A release notice, `<token>:<fencing token>:<lease ms>`: published on
/// the lock's channel and answered to the releaser.
pub(crate) struct Notice<'a> {
    /// The token of the waiter handed the lock (`-`: none).
    pub(crate) token: &'a str,
    /// Its fencing token (0: not handed; the waiter named may try).
    pub(crate) fencing_token: u64,
    /// Its lease.
    pub(crate) lease: Duration,
}

impl<'a> Notice<'a> {
    /// `<token>:0:0`: not a hand-over but a release that left the lock free
    /// and names the oldest waiter, which may take it.
    pub(crate) fn is_try_now(&self) -> bool {
        self.fencing_token == 0 && self.token != "-"
    }

    /// Reads a notice as a release publishes it.
    pub(crate) fn parse(payload: &'a str) -> Option<Notice<'a>> {
        let mut parts = payload.rsplitn(3, ':');
        let lease = Duration::from_millis(parts.next()?.parse().ok()?);
        let fencing_token = parts.next()?.parse().ok()?;
        let token = parts.next()?;
        Some(Notice {
            token,
            fencing_token,
            lease,
        })
    }
}

/// The kinds a key found by a scan shows held (see [`holder_of`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Found {
    /// A lock's key.
    Lock,
    /// A read-write lock's writer key or index of readers.
    ReadWrite,
    /// A semaphore's permit key, with the permit's index.
    Permit(u32),
}

/// The name, and what is held, of a key under `prefix` that shows a hold:
/// a lock key, a read-write lock's writer key or index of readers (or the
/// plain set of readers of older versions), a semaphore's permit key.
/// `None` for every other key (fence counters, queues, a reader's own key).
pub(crate) fn holder_of(prefix: &str, key: &str) -> Option<(String, Found)> {
    if let Some(name) = name_of(prefix, key) {
        return Some((name, Found::Lock));
    }
    for suffix in [RW_WRITE, RW_READING, RW_LEGACY_READERS] {
        if let Some(lock) = key.strip_suffix(suffix) {
            return Some((name_of(prefix, lock)?, Found::ReadWrite));
        }
    }
    let (lock, index) = permit_of(key)?;
    Some((name_of(prefix, lock)?, Found::Permit(index)))
}

/// The lock key and the permit index of a semaphore's permit key
/// (`<lock key>:sem:permit:<i>`); `None` for another key.
pub(crate) fn permit_of(key: &str) -> Option<(&str, u32)> {
    let (lock, index) = key.rsplit_once(SEM_PERMIT)?;
    Some((lock, index.parse().ok()?))
}

/// The lock name of a lock key under `prefix` (the reverse of
/// [`Keys::new`]); `None` for another key.
pub(crate) fn name_of(prefix: &str, key: &str) -> Option<String> {
    let spelled = key
        .strip_prefix(prefix)?
        .strip_prefix('{')?
        .strip_suffix('}')?;
    let mut name = String::with_capacity(spelled.len());
    let mut rest = spelled;
    while let Some(i) = rest.find('\\') {
        name.push_str(&rest[..i]);
        rest = &rest[i..];
        if let Some(after) = rest.strip_prefix("\\\\") {
            name.push('\\');
            rest = after;
        } else if let Some(after) = rest.strip_prefix("\\x7d") {
            name.push('}');
            rest = after;
        } else {
            return None;
        }
    }
    name.push_str(rest);
    Some(name)
}

/// The keys of one read-write lock beyond the lock-shaped [`Keys`] its
/// guard uses (whose `lock` is the writer's key or the reader's own).
#[derive(Debug, Clone)]
pub(crate) struct RwKeys {
    /// The side taken.
    pub(crate) mode: RwMode,
    /// `<base>:rw:write`.
    pub(crate) write: String,
    /// `<base>:rw:reading`.
    pub(crate) readers: String,
}

impl RwKeys {
    /// Turns `keys` (of the name, as [`Keys::new`] made them) into a
    /// read-write lock's, for `mode`, and returns them; a reader's `lock` is set when its
    /// token is known ([`RwKeys::holder_key`]).
    pub(crate) fn make(keys: &mut Keys, mode: RwMode) -> RwKeys {
        keys.rebase("rw");
        let rw = RwKeys {
            mode,
            write: format!("{}{RW_WRITE}", keys.lock),
            readers: format!("{}{RW_READING}", keys.lock),
        };
        keys.lock = rw.write.clone();
        keys.kind = KindKeys::Rw(rw.clone());
        rw
    }

    /// The keys of the read-write lock's scripts: write, readers, then
    /// `keys`' fence counter, queue and waiters.
    pub(crate) fn keys<'k>(&'k self, keys: &'k Keys) -> [&'k str; 5] {
        [
            &self.write,
            &self.readers,
            &keys.fence,
            &keys.queue,
            &keys.waiters,
        ]
    }

    /// The index of readers that a reader's renewal updates; `None` for a
    /// writer.
    pub(crate) fn index(&self) -> Option<&str> {
        match self.mode {
            RwMode::Write => None,
            RwMode::Read => Some(&self.readers),
        }
    }

    /// The key `token` holds on this side: the writer's, or its own reader
    /// key.
    pub(crate) fn holder_key(&self, token: &str) -> String {
        match self.mode {
            RwMode::Write => self.write.clone(),
            RwMode::Read => {
                let base = self.write.strip_suffix(":write").unwrap_or(&self.write);
                format!("{base}:read:{token}")
            }
        }
    }
}

/// The keys of one semaphore: its permits' keys and the record of their
/// number, next to the lock-shaped [`Keys`] its holders' guards use.
#[derive(Debug, Clone)]
pub(crate) struct Permits {
    /// `<base>:sem`, what every key of the semaphore starts with.
    pub(crate) base: String,
    /// `<base>:sem:permits`: the number of permits callers asked for.
    pub(crate) record: String,
    /// `<base>:sem:permit:<i>`, one per permit.
    pub(crate) slots: Vec<String>,
}

impl Permits {
    /// Turns `keys` (of the name, as [`Keys::new`] made them) into a
    /// semaphore's: `permits` must be checked (1 to [`MAX_PERMITS`]).
    pub(crate) fn make(keys: &mut Keys, permits: u32) -> Permits {
        let base = keys.rebase("sem");
        keys.kind = KindKeys::Permit(permits);
        let slots: Vec<String> = (0..permits)
            .map(|i| format!("{}{SEM_PERMIT}{i}", keys.lock))
            .collect();
        if let Some(first) = slots.first() {
            keys.lock = first.clone();
        }
        Permits {
            record: format!("{base}:permits"),
            base,
            slots,
        }
    }

    /// The number of permits.
    pub(crate) fn len(&self) -> usize {
        self.slots.len()
    }

    /// The key of permit `index`.
    pub(crate) fn slot(&self, index: usize) -> Option<&str> {
        self.slots.get(index).map(String::as_str)
    }
}

/// The Redis Cluster slot of `key` (CRC16 of its hash tag, modulo 16384).
pub(crate) fn slot(key: &str) -> u16 {
    let bytes = key.as_bytes();
    let mut tagged = bytes;
    if let Some(open) = bytes.iter().position(|&b| b == b'{')
        && let Some(len) = bytes[open + 1..].iter().position(|&b| b == b'}')
        && len > 0
    {
        tagged = &bytes[open + 1..open + 1 + len];
    }
    let mut crc: u16 = 0;
    for &b in tagged {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16384
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_match_redis_cluster() {
        // CLUSTER KEYSLOT values.
        assert_eq!(slot("foo"), 12182);
        assert_eq!(slot("bar"), 5061);
        assert_eq!(slot("{user1000}.following"), slot("{user1000}.followers"));
        assert_eq!(slot("{}x"), slot("{}x"));
        assert_eq!(slot("lockattr:{a}"), slot("a"));
    }

    /// The hash tag Redis Cluster uses for a key (the whole key when none).
    fn hash_tag(key: &str) -> &str {
        if let Some(open) = key.find('{')
            && let Some(len) = key[open + 1..].find('}')
            && len > 0
        {
            return &key[open + 1..open + 1 + len];
        }
        key
    }

    #[test]
    fn keys_of_one_lock_share_a_hash_tag() {
        for name in ["order:7", "}", "a}b", "{x}", "\\}", "naïve 名前", "a b\nc"] {
            let keys = Keys::new("lockattr:", name, Duration::ZERO);
            assert_eq!(hash_tag(&keys.lock), hash_tag(&keys.fence), "{name:?}");
            assert_ne!(hash_tag(&keys.lock), keys.lock, "{name:?} has no hash tag");
        }
    }

    #[test]
    fn escaping_keeps_names_apart() {
        let names = ["}", "\\x7d", "\\}", "\\\\x7d", "a", "a}", "a\\x7d"];
        let mut keys: Vec<String> = names
            .iter()
            .map(|n| Keys::new("p:", n, Duration::ZERO).lock)
            .collect();
        keys.sort();
        keys.dedup();
        assert_eq!(keys.len(), names.len());
    }

    #[test]
    fn holder_keys_name_their_kind() {
        let keys = Keys::new("p:", "a}b", Duration::ZERO);
        let rw_keys = keys.read_write();
        let KindKeys::Rw(rw) = &rw_keys.kind else {
            panic!("a read-write lock's keys")
        };
        let found = |key: &str| holder_of("p:", key);
        assert_eq!(found(&keys.lock), Some(("a}b".into(), Found::Lock)));
        assert_eq!(found(&rw.write), Some(("a}b".into(), Found::ReadWrite)));
        assert_eq!(found(&rw.readers), Some(("a}b".into(), Found::ReadWrite)));
        let mut sem = keys.clone();
        let permits = Permits::make(&mut sem, 3);
        assert_eq!(
            found(permits.slot(2).unwrap()),
            Some(("a}b".into(), Found::Permit(2)))
        );
        for other in [&keys.fence, &rw_keys.fence, &rw_keys.queue, &permits.record] {
            assert_eq!(found(other), None, "{other}");
        }
        assert_eq!(found("p:{a}:rw:read:0123"), None);
    }

    #[test]
    fn plain_names_are_readable() {
        assert_eq!(
            Keys::new("lockattr:", "order:7", Duration::ZERO).lock,
            "lockattr:{order:7}"
        );
        assert_eq!(
            Keys::new("lockattr:", "order:7", Duration::ZERO).fence,
            "lockattr:{order:7}:fence"
        );
    }
}
