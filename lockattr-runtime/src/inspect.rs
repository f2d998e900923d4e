//! For operators: who holds a lock or a read-write lock
//! ([`Locker::inspect`]), which are held ([`Locker::locks`]), and freeing
//! one (a read-write lock's writer) whatever its owner
//! ([`Locker::force_unlock`]).
//!
//! Every acquisition records its holder next to the lock, in the same key
//! and the same script call (no extra round trip): the host name, the
//! process id and the Locker's [label](crate::LockerBuilder::label), and
//! when it was taken (by the taking process's clock; by the Redis server's
//! when a release handed it to a waiter). It goes with the lock.
//! The owner token is never part of what these functions return.

use std::sync::Arc;
use std::time::Duration;

use crate::backend::Backend;
use crate::backend::inspect::{RwSeen, Seen};
use crate::holder::{Holder, parse_holder};
use crate::inner::Inner;
use crate::layout::{Found, Keys, holder_of};

use crate::listing::{Listing, foreign, glob_matches, scan_pattern};
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
    /// Callers queued for it, sets waiting for it among them; a waiter whose
    /// deadline has passed (a process that died while it waited) is not
    /// counted. Always 0 on a Redlock, whose waiters do not queue.
    pub waiters: usize,
    /// Who holds it; `None` when not recorded (a lock taken by an older
    /// version of this library), and for a read-write lock held by readers
    /// only.
    pub holder: Option<Holder>,
    /// What is held under the name: a lock, or a read-write lock (whose
    /// `ttl`, `fencing_token` and `holder` are then its writer's, and
    /// whose readers are in `readers`).
    pub kind: LockKind,
    /// Whether one holder has it to itself: always for a lock; for a
    /// read-write lock, while a writer holds it. False for a read-write
    /// lock held by readers only: `holder` is then `None`, `ttl` the time
    /// until the last reader's lease ends, and `fencing_token` the largest
    /// token its readers were granted (the last write's; no writer holds
    /// it, so [`Locker::force_unlock_if`] frees nothing with it).
    pub exclusive: bool,
    /// A read-write lock's readers (at most 1000), in no particular order;
    /// empty for a lock.
    pub readers: Vec<ReaderInfo>,
}

/// What is held under a name, as [`LockInfo::kind`] tells it. Semaphores
/// have calls of their own ([`Locker::inspect_semaphore`]).
///
/// ```no_run
/// # use lockattr_runtime::{LockKind, Locker};
/// # async fn run(locker: &Locker) -> Result<(), lockattr_runtime::LockError> {
/// for info in locker.locks("*", 100).await? {
///     match info.kind {
///         LockKind::ReadWrite => println!("{}: {} readers", info.name, info.readers.len()),
///         _ => println!("{}: locked", info.name),
///     }
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum LockKind {
    /// A lock ([`Locker::lock`]).
    Lock,
    /// A read-write lock ([`Locker::read_lock`], [`Locker::write_lock`]).
    ReadWrite,
}

/// One reader of a read-write lock, in [`LockInfo::readers`]: a hold of
/// its own, as a semaphore's [`PermitInfo`](crate::PermitInfo) is.
///
/// ```no_run
/// # use lockattr_runtime::Locker;
/// # async fn run(locker: &Locker) -> Result<(), lockattr_runtime::LockError> {
/// if let Some(info) = locker.inspect("catalog").await? {
///     for reader in &info.readers {
///         if let Some(holder) = &reader.holder {
///             println!("read by {holder} for {:?} more", reader.ttl);
///         }
///     }
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReaderInfo {
    /// Time left of the reader's lease.
    pub ttl: Duration,
    /// The fencing token the reader was granted: the last write's (0 when
    /// no write is known, or for a reader of an older version).
    pub fencing_token: u64,
    /// Who reads; `None` when not recorded.
    pub holder: Option<Holder>,
}

/// A hold as every kind reports it: time left, fencing token (0: not
/// recorded), holder.
pub(crate) fn hold(seen: &Seen) -> (Duration, u64, Option<Holder>) {
    (seen.ttl, seen.fence.unwrap_or(0), parse_holder(&seen.who))
}

/// A lock's info.
fn info(name: String, seen: Seen) -> LockInfo {
    let (ttl, fencing_token, holder) = hold(&seen);
    LockInfo {
        name,
        ttl,
        fencing_token,
        waiters: seen.waiters,
        holder,
        kind: LockKind::Lock,
        exclusive: true,
        readers: Vec::new(),
    }
}

/// A read-write lock's info: its writer's hold, or its readers'.
fn rw_info(name: String, seen: RwSeen) -> LockInfo {
    let readers: Vec<ReaderInfo> = seen
        .readers
        .iter()
        .map(|reader| {
            let (ttl, fencing_token, holder) = hold(reader);
            ReaderInfo {
                ttl,
                fencing_token,
                holder,
            }
        })
        .collect();
    let (ttl, fencing_token, holder) = match &seen.writer {
        Some(writer) => hold(writer),
        None => (
            readers.iter().map(|r| r.ttl).max().unwrap_or_default(),
            readers.iter().map(|r| r.fencing_token).max().unwrap_or(0),
            None,
        ),
    };
    LockInfo {
        name,
        ttl,
        fencing_token,
        waiters: seen.waiters,
        holder,
        kind: LockKind::ReadWrite,
        exclusive: seen.writer.is_some(),
        readers,
    }
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
    /// and how many callers wait for it; `None` when it is free. When no
    /// lock of that name is held, the read-write lock `name`
    /// ([`LockKind::ReadWrite`]: its writer, or its readers). One round
    /// trip for a held lock (to every node at once on a Redlock, which
    /// reports the owner a majority of nodes name, and has no read-write
    /// locks); two otherwise.
    ///
    /// A lock and a read-write lock of one name are apart (they do not
    /// exclude each other): while both are held, this reports the lock;
    /// [`locks`](Self::locks) reports both.
    ///
    /// ```no_run
    /// # use lockattr_runtime::Locker;
    /// # async fn run(locker: &Locker) -> Result<(), lockattr_runtime::LockError> {
    /// match locker.inspect("nightly-report").await? {
    ///     Some(info) => println!("{:?} held by {:?}, {:?} left", info.kind, info.holder, info.ttl),
    ///     None => println!("free"),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn inspect(&self, name: &str) -> Result<Option<LockInfo>, LockError> {
        io::run_here(self.inspect_task(name)?).await
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
        io::run_blocking(self.inspect_task(name)?)
    }

    fn inspect_task(
        &self,
        name: &str,
    ) -> Result<impl Future<Output = Result<Option<LockInfo>, LockError>> + use<>, LockError> {
        let keys = self.keys_of(name)?;
        let inner = self.inner.clone();
        let name = name.to_owned();
        Ok(async move {
            match inner.backend.inspect(&keys).await? {
                Some(seen) => Ok(Some(info(name, seen))),
                None => look_rw(&inner, &keys, name).await,
            }
        })
    }

    /// The held locks and read-write locks whose names match the glob
    /// `pattern` (`*` any text, `?` one character, `[abc]` one of, `[^abc]`
    /// none of, `[a-z]` a range, `\` escapes), at most `limit` of them, in
    /// name order (a lock before the read-write lock of the same name). The
    /// glob matches the name as given to [`lock`](Self::lock), whatever
    /// its key.
    ///
    /// Found with `SCAN` (on every master of a Cluster, on the nodes of a
    /// Redlock), never `KEYS`: safe on a production Redis with millions of
    /// keys, a thousand keys per request, over the keys of the names that
    /// start with the pattern's literal text (all of the prefix's for a
    /// pattern that starts with a wildcard); memory stays within `limit`
    /// locks. Each lock found is then [inspected](Self::inspect); a lock
    /// freed meanwhile is left out. A key under the prefix that lockattr
    /// did not write (a name that is not UTF-8, a hash at a lock key) is
    /// skipped and counted in [`Listing::skipped`](crate::Listing::skipped).
    ///
    /// ```no_run
    /// # use lockattr_runtime::Locker;
    /// # async fn run(locker: &Locker) -> Result<(), lockattr_runtime::LockError> {
    /// for info in locker.locks("order:*", 100).await? {
    ///     println!("{} {:?} {:?}", info.name, info.kind, info.ttl);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn locks(&self, pattern: &str, limit: usize) -> Result<Listing<LockInfo>, LockError> {
        io::run_here(list(self.inner.clone(), pattern.to_owned(), limit)).await
    }

    /// [`locks`](Self::locks) for synchronous code.
    ///
    /// ```no_run
    /// # use lockattr_runtime::Locker;
    /// # fn run(locker: &Locker) -> Result<(), lockattr_runtime::LockError> {
    /// let held = locker.locks_blocking("*", 1000)?;
    /// # Ok(()) }
    /// ```
    pub fn locks_blocking(
        &self,
        pattern: &str,
        limit: usize,
    ) -> Result<Listing<LockInfo>, LockError> {
        io::run_blocking(list(self.inner.clone(), pattern.to_owned(), limit))
    }

    /// Frees the lock `name` whoever holds it: an operator's tool for a
    /// lock whose holder is stuck. True when it was held. When no lock of
    /// that name is held, frees the writer of the read-write lock `name`
    /// instead (never its readers, whose leases run out by themselves).
    ///
    /// It is what the holder's release would have done: the oldest waiter
    /// is handed the lock (with a larger fencing token than the holder's),
    /// or the lock is deleted; a freed writer admits the waiters that may
    /// take the read-write lock now (the next writer, or the readers queued
    /// before it), as its release does. The holder is not told at once: its guard
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
        io::run_here(self.force_task(name, 0)?).await
    }

    /// [`force_unlock`](Self::force_unlock), only while the lock's holder is
    /// the one with `fencing_token` (from [`inspect`](Self::inspect)): an
    /// operator who looked at a holder frees that holder's lock, never the
    /// next one's. False when the lock is free or has changed hands. The
    /// writer of a read-write lock is freed the same way, by the token
    /// [`inspect`](Self::inspect) shows for it.
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
        io::run_here(self.force_task(name, fencing_token)?).await
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
        io::run_blocking(self.force_task(name, 0)?)
    }

    /// Frees the lock `name` (with `expected` as its fencing token, unless
    /// 0), else the writer of the read-write lock `name`.
    fn force_task(
        &self,
        name: &str,
        expected: u64,
    ) -> Result<impl Future<Output = Result<bool, LockError>> + use<>, LockError> {
        let keys = self.keys_of(name)?;
        let inner = self.inner.clone();
        let name = name.to_owned();
        Ok(async move {
            let (who, forced) = match inner.backend.force_unlock(&keys, expected).await? {
                Some(who) => (who, Forced::Lock),
                None => match inner
                    .backend
                    .force_unlock_writer(&keys.read_write(), expected)
                    .await?
                {
                    Some(who) => (who, Forced::Writer),
                    None => return Ok(false),
                },
            };
            forced_event(&inner, &name, &who, forced);
            Ok(true)
        })
    }
}

/// The read-write lock `name` (`keys` as [`Keys::new`] made them).
async fn look_rw(inner: &Inner, keys: &Keys, name: String) -> Result<Option<LockInfo>, LockError> {
    Ok(inner
        .backend
        .inspect_rw(&keys.read_write())
        .await?
        .map(|seen| rw_info(name, seen)))
}

async fn list(
    inner: Arc<Inner>,
    pattern: String,
    limit: usize,
) -> Result<Listing<LockInfo>, LockError> {
    let prefix = inner.prefix.clone();
    let redlock = matches!(*inner.backend, Backend::Redlock(_));
    // Lock keys and read-write keys, in one pass over the keyspace; the
    // names matched here, since a key spells some characters of its name
    // otherwise.
    let glob = pattern.clone();
    let keep = move |key: &str| {
        let (name, kind) = match holder_of(&prefix, key)? {
            (name, Found::Lock) => (name, LockKind::Lock),
            (name, Found::ReadWrite) if !redlock => (name, LockKind::ReadWrite),
            _ => return None,
        };
        glob_matches(&glob, &name).then_some((name, kind))
    };
    let scanned = inner
        .backend
        .scan(&scan_pattern(&inner.prefix, &pattern), limit, &keep)
        .await?;
    let mut skipped = scanned.unreadable.len();
    let mut out = Vec::with_capacity(scanned.found.len());
    for (name, kind) in scanned.found {
        let keys = Keys::new(&inner.prefix, &name, inner.fence_retention);
        let info = match kind {
            LockKind::ReadWrite => look_rw(&inner, &keys, name).await,
            LockKind::Lock => inner
                .backend
                .inspect(&keys)
                .await
                .map(|seen| seen.map(|s| info(name, s))),
        };
        match info {
            Ok(info) => out.extend(info),
            // A key lockattr did not write: skipped, counted.
            Err(e) if foreign(&e) => skipped += 1,
            Err(e) => return Err(e),
        }
    }
    Ok(Listing::new(out, skipped))
}

/// What a forced unlock freed (for its `warn` event).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Forced {
    /// A lock.
    Lock,
    /// A read-write lock's writer.
    Writer,
    /// A semaphore's permit, held with this fencing token.
    Permit(u64),
}

/// The `warn` event of a forced unlock of `forced` of the name `name`
/// taken from `who`.
pub(crate) fn forced_event(inner: &Inner, name: &str, who: &str, forced: Forced) {
    let from = parse_holder(who).map_or_else(|| "unknown".to_owned(), |h| h.to_string());
    let host = gethostname::gethostname();
    let host = host.to_string_lossy();
    match forced {
        Forced::Lock | Forced::Writer => tracing::warn!(
            target: "lockattr",
            lock = %name,
            holder = %from,
            forced_by = %inner.label,
            host = %host,
            pid = std::process::id(),
            "{}",
            if let Forced::Writer = forced {
                "read-write lock writer force-unlocked"
            } else {
                "lock force-unlocked"
            }
        ),
        Forced::Permit(fencing_token) => tracing::warn!(
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
    fn names_come_back_from_their_keys() {
        for name in ["order:7", "a}b", "back\\slash", "{x}", "naïve 名前"] {
            let keys = Keys::new("lockattr:", name, Duration::ZERO);
            assert_eq!(name_of("lockattr:", &keys.lock).as_deref(), Some(name));
        }
        assert_eq!(name_of("lockattr:", "lockattr:{a}:fence"), None);
        assert_eq!(name_of("lockattr:", "other:{a}"), None);
    }
}
