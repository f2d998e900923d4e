//! For operators: who holds a lock ([`Locker::inspect`]), which locks are
//! held ([`Locker::locks`]), and freeing one whatever its owner
//! ([`Locker::force_unlock`]).
//!
//! Every acquisition records its holder next to the lock, in the same key
//! and the same script call (no extra round trip): the host name, the
//! process id and the Locker's [label](crate::LockerBuilder::label), and
//! when it was taken (by the taking process's clock; by the Redis server's
//! when a release handed it to a waiter). It goes with the lock.
//! The owner token is never part of what these functions return.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::backend::inspect::Seen;
use crate::layout::Keys;
use crate::{LockError, Locker, io};

/// A held lock, as [`Locker::inspect`] and [`Locker::locks`] see it.
///
/// ```no_run
/// # use lockattr_runtime::Locker;
/// # async fn run(locker: &Locker) -> Result<(), lockattr_runtime::LockError> {
/// if let Some(info) = locker.inspect("order:7").await? {
///     println!("held for {:?} more, fencing token {}", info.ttl, info.fencing_token);
///     if let Some(holder) = &info.holder {
///         println!("by {} (pid {}) on {}", holder.label, holder.pid, holder.host);
///     }
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockInfo {
    /// The lock's name.
    pub name: String,
    /// Time left of the holder's lease (on a Redlock: how long a majority
    /// still holds it).
    pub ttl: Duration,
    /// The holder's fencing token, as the holder's own stored value carries
    /// it (0 for a lock taken by an older version of this library, which
    /// did not store it).
    pub fencing_token: u64,
    /// Callers queued for it (always 0 on a Redlock, whose waiters do not
    /// queue).
    pub waiters: usize,
    /// Who holds it; `None` when not recorded (a lock taken by an older
    /// version of this library).
    pub holder: Option<Holder>,
}

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

fn info(name: String, seen: Seen) -> LockInfo {
    LockInfo {
        name,
        ttl: seen.ttl,
        fencing_token: seen.fence.unwrap_or(0),
        waiters: seen.waiters,
        holder: parse_holder(&seen.who),
    }
}

/// The `SCAN MATCH` pattern of the lock keys whose names match the glob
/// `pattern`: the prefix taken literally, the name as its key spells it.
pub(crate) fn key_pattern(prefix: &str, pattern: &str) -> String {
    let mut out = String::with_capacity(prefix.len() + pattern.len() + 2);
    for c in prefix.chars() {
        glob_literal(&mut out, c);
    }
    out.push('{');
    let mut chars = pattern.chars();
    let mut in_class = false;
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some(escaped) => name_literal(&mut out, escaped),
                None => name_literal(&mut out, '\\'),
            },
            '[' if !in_class => {
                in_class = true;
                out.push('[');
            }
            ']' if in_class => {
                in_class = false;
                out.push(']');
            }
            '*' | '?' if !in_class => out.push(c),
            c if in_class => out.push(c),
            c => name_literal(&mut out, c),
        }
    }
    if in_class {
        out.push(']');
    }
    out.push('}');
    out
}

/// Appends `c` of a lock name, as its key spells it (see `Keys::new`), as
/// a literal in a glob.
fn name_literal(out: &mut String, c: char) {
    match c {
        '\\' => out.push_str("\\\\\\\\"),
        '}' => out.push_str("\\\\x7d"),
        c => glob_literal(out, c),
    }
}

pub(crate) fn glob_literal(out: &mut String, c: char) {
    if matches!(c, '*' | '?' | '[' | ']' | '\\') {
        out.push('\\');
    }
    out.push(c);
}

pub(crate) use crate::layout::name_of;

impl Locker {
    pub(crate) fn keys_of(&self, name: &str) -> Result<Keys, LockError> {
        if name.is_empty() {
            return Err(LockError::invalid(
                "lock name",
                "it is empty; give every lock a non-empty name",
            ));
        }
        Ok(Keys::new(
            &self.inner.prefix,
            name,
            self.inner.fence_retention,
        ))
    }

    /// Who holds the lock `name`, for how long, with which fencing token,
    /// and how many callers wait for it; `None` when it is free. One round
    /// trip (to every node at once on a Redlock, which reports the owner a
    /// majority of nodes name).
    ///
    /// ```no_run
    /// # use lockattr_runtime::Locker;
    /// # async fn run(locker: &Locker) -> Result<(), lockattr_runtime::LockError> {
    /// match locker.inspect("nightly-report").await? {
    ///     Some(info) => println!("held by {:?}, {:?} left", info.holder, info.ttl),
    ///     None => println!("free"),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn inspect(&self, name: &str) -> Result<Option<LockInfo>, LockError> {
        let keys = self.keys_of(name)?;
        let inner = self.inner.clone();
        let name = name.to_owned();
        io::run_here(async move {
            Ok(inner
                .backend
                .inspect(&keys)
                .await?
                .map(|seen| info(name, seen)))
        })
        .await
    }

    /// [`inspect`](Self::inspect) for synchronous code.
    ///
    /// ```no_run
    /// # use lockattr_runtime::Locker;
    /// # fn run(locker: &Locker) -> Result<(), lockattr_runtime::LockError> {
    /// let held = locker.inspect_blocking("nightly-report")?.is_some();
    /// # Ok(()) }
    /// ```
    pub fn inspect_blocking(&self, name: &str) -> Result<Option<LockInfo>, LockError> {
        let keys = self.keys_of(name)?;
        let inner = self.inner.clone();
        let name = name.to_owned();
        io::run_blocking(async move {
            Ok(inner
                .backend
                .inspect(&keys)
                .await?
                .map(|seen| info(name, seen)))
        })
    }

    /// The held locks whose names match the glob `pattern` (`*` any text,
    /// `?` one character, `[abc]` one of, `\` escapes), at most `limit` of
    /// them, in name order.
    ///
    /// Found with `SCAN` (on every master of a Cluster, on the nodes of a
    /// Redlock), never `KEYS`: safe on a production Redis with millions of
    /// keys, a thousand keys per request; memory stays within `limit`
    /// locks. Each lock found is then [inspected](Self::inspect); a lock
    /// freed meanwhile is left out.
    ///
    /// ```no_run
    /// # use lockattr_runtime::Locker;
    /// # async fn run(locker: &Locker) -> Result<(), lockattr_runtime::LockError> {
    /// for info in locker.locks("order:*", 100).await? {
    ///     println!("{} {:?}", info.name, info.ttl);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn locks(&self, pattern: &str, limit: usize) -> Result<Vec<LockInfo>, LockError> {
        let inner = self.inner.clone();
        let pattern = pattern.to_owned();
        io::run_here(async move { list(&inner, &pattern, limit).await }).await
    }

    /// [`locks`](Self::locks) for synchronous code.
    ///
    /// ```no_run
    /// # use lockattr_runtime::Locker;
    /// # fn run(locker: &Locker) -> Result<(), lockattr_runtime::LockError> {
    /// let held = locker.locks_blocking("*", 1000)?;
    /// # Ok(()) }
    /// ```
    pub fn locks_blocking(&self, pattern: &str, limit: usize) -> Result<Vec<LockInfo>, LockError> {
        let inner = self.inner.clone();
        let pattern = pattern.to_owned();
        io::run_blocking(async move { list(&inner, &pattern, limit).await })
    }

    /// Frees the lock `name` whoever holds it: an operator's tool for a
    /// lock whose holder is stuck. True when it was held.
    ///
    /// It is what the holder's release would have done: the oldest waiter
    /// is handed the lock (with a larger fencing token than the holder's),
    /// or the lock is deleted. The holder is not told at once: its guard
    /// finds out at its next renewal (it turns lost), or its next `release`
    /// or `extend` ([`LockError::NotOwned`]). Until then it may still run,
    /// next to the new holder: make its writes conditional on the fencing
    /// token. A `warn` event (target `lockattr`) records the lock, the
    /// holder it was taken from and this Locker's label, host and process.
    ///
    /// Sent once: a request whose answer is lost is not sent again (a
    /// second run would free the next holder's lock); check with
    /// [`inspect`](Self::inspect).
    ///
    /// ```no_run
    /// # use lockattr_runtime::Locker;
    /// # async fn run(locker: &Locker) -> Result<(), lockattr_runtime::LockError> {
    /// if locker.force_unlock("nightly-report").await? {
    ///     println!("freed");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn force_unlock(&self, name: &str) -> Result<bool, LockError> {
        let keys = self.keys_of(name)?;
        let inner = self.inner.clone();
        let name = name.to_owned();
        io::run_here(async move { force(&inner, &keys, &name, 0).await }).await
    }

    /// [`force_unlock`](Self::force_unlock), only while the lock's holder is
    /// the one with `fencing_token` (from [`inspect`](Self::inspect)): an
    /// operator who looked at a holder frees that holder's lock, never the
    /// next one's. False when the lock is free or has changed hands.
    ///
    /// ```no_run
    /// # use lockattr_runtime::Locker;
    /// # async fn run(locker: &Locker) -> Result<(), lockattr_runtime::LockError> {
    /// if let Some(info) = locker.inspect("nightly-report").await? {
    ///     // ... an operator confirms ...
    ///     if !locker.force_unlock_if("nightly-report", info.fencing_token).await? {
    ///         println!("it changed hands meanwhile; look again");
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn force_unlock_if(&self, name: &str, fencing_token: u64) -> Result<bool, LockError> {
        if fencing_token == 0 {
            return Err(LockError::invalid(
                "fencing token",
                "0 is no holder's token; use `force_unlock` to free the lock whoever holds it",
            ));
        }
        let keys = self.keys_of(name)?;
        let inner = self.inner.clone();
        let name = name.to_owned();
        io::run_here(async move { force(&inner, &keys, &name, fencing_token).await }).await
    }

    /// [`force_unlock`](Self::force_unlock) for synchronous code.
    ///
    /// ```no_run
    /// # use lockattr_runtime::Locker;
    /// # fn run(locker: &Locker) -> Result<(), lockattr_runtime::LockError> {
    /// locker.force_unlock_blocking("nightly-report")?;
    /// # Ok(()) }
    /// ```
    pub fn force_unlock_blocking(&self, name: &str) -> Result<bool, LockError> {
        let keys = self.keys_of(name)?;
        let inner = self.inner.clone();
        let name = name.to_owned();
        io::run_blocking(async move { force(&inner, &keys, &name, 0).await })
    }
}

async fn list(
    inner: &Arc<crate::inner::Inner>,
    pattern: &str,
    limit: usize,
) -> Result<Vec<LockInfo>, LockError> {
    let keys: BTreeSet<String> = inner
        .backend
        .lock_keys(&key_pattern(&inner.prefix, pattern), limit)
        .await?;
    let mut out = Vec::with_capacity(keys.len());
    for key in keys {
        let Some(name) = name_of(&inner.prefix, &key) else {
            continue;
        };
        let keys = Keys::new(&inner.prefix, &name, inner.fence_retention);
        if let Some(seen) = inner.backend.inspect(&keys).await? {
            out.push(info(name, seen));
        }
    }
    Ok(out)
}

async fn force(
    inner: &Arc<crate::inner::Inner>,
    keys: &Keys,
    name: &str,
    expected: u64,
) -> Result<bool, LockError> {
    let Some(who) = inner.backend.force_unlock(keys, expected).await? else {
        return Ok(false);
    };
    forced_event(inner, name, &who, None);
    Ok(true)
}

/// The `warn` event of a forced unlock of lock `name` (or of the permit
/// with `fencing_token` of semaphore `name`) taken from `who`.
pub(crate) fn forced_event(
    inner: &crate::inner::Inner,
    name: &str,
    who: &str,
    permit: Option<u64>,
) {
    let from = parse_holder(who).map_or_else(|| "unknown".to_owned(), |h| h.to_string());
    let host = gethostname::gethostname();
    let host = host.to_string_lossy();
    match permit {
        None => tracing::warn!(
            target: "lockattr",
            lock = %name,
            holder = %from,
            forced_by = %inner.label,
            host = %host,
            pid = std::process::id(),
            "lock force-unlocked"
        ),
        Some(fencing_token) => tracing::warn!(
            target: "lockattr",
            lock = %name,
            fencing_token,
            holder = %from,
            forced_by = %inner.label,
            host = %host,
            pid = std::process::id(),
            "semaphore permit force-released"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn name_globs_become_key_globs() {
        assert_eq!(key_pattern("lockattr:", "*"), "lockattr:{*}");
        assert_eq!(key_pattern("lockattr:", "order:*"), "lockattr:{order:*}");
        assert_eq!(key_pattern("a*b:", "x?"), "a\\*b:{x?}");
        assert_eq!(key_pattern("p:", "[ab]c"), "p:{[ab]c}");
        // A literal `}` is spelled `\x7d` in keys; a literal `*` escaped.
        assert_eq!(key_pattern("p:", "a}b"), "p:{a\\\\x7db}");
        assert_eq!(key_pattern("p:", "a\\*"), "p:{a\\*}");
    }

    #[test]
    fn names_come_back_from_their_keys() {
        for name in ["order:7", "a}b", "back\\slash", "{x}", "naïve 名前"] {
            let keys = Keys::new("lockattr:", name, Duration::ZERO);
            assert_eq!(name_of("lockattr:", &keys.lock).as_deref(), Some(name));
        }
        assert_eq!(name_of("lockattr:", "lockattr:{a}:fence"), None);
        assert_eq!(name_of("lockattr:", "other:{a}"), None);
    }

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
