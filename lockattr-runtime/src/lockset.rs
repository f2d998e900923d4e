//! Several names at once: [`Locker::lock_all`] and [`LockSetBuilder`]; the
//! guard, [`LockSetGuard`], is in `lockset_guard.rs`. The Redis side is
//! `backend::lockset`.

use std::borrow::Cow;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use tracing::Instrument;

use crate::backend::Backend;
use crate::backend::Grant;
use crate::backend::lockset as set;
use crate::guard::LockGuard;
use crate::layout::{Keys, slot};
use crate::lease::{Lease, Taken, Terms};
use crate::locker::setters;
use crate::observe::{Acquiring, Kind};
use crate::wait::{self, Contender, Won};
use crate::{DEFAULT_ACQUIRE_TIMEOUT, DEFAULT_EXPIRE, LockError, LockSetGuard, Locker, io};

/// The most distinct names a lock set takes. One script takes a whole set
/// (a group of names per slot on a Cluster), and Redis runs nothing else
/// meanwhile: at this size that is a few tens of milliseconds, far below
/// Redis's busy-script limit (5 s), where every other client would get
/// `BUSY`.
///
/// ```
/// # use lockattr_runtime::{LockError, Locker, MAX_SET_NAMES};
/// let locker = Locker::new("redis://127.0.0.1/").unwrap();
/// let names: Vec<String> = (0..=MAX_SET_NAMES).map(|i| format!("item:{i}")).collect();
/// // Refused before anything is sent (no server is needed to see it).
/// let err = locker.lock_all(names).acquire_blocking().unwrap_err();
/// assert!(matches!(err, LockError::InvalidInput { .. }));
/// ```
pub const MAX_SET_NAMES: usize = 1_000;

impl Locker {
    /// A request for several locks at once, all or nothing: finish it with
    /// [`acquire`](LockSetBuilder::acquire) or
    /// [`acquire_blocking`](LockSetBuilder::acquire_blocking).
    ///
    /// The names are any iterator of strings; a name given twice is taken
    /// once; an empty set, or one of more than [`MAX_SET_NAMES`] distinct
    /// names, is refused with [`LockError::InvalidInput`] before anything is
    /// sent. The
    /// caller never holds some of the names while it waits for the others:
    /// on one server one script takes every name or none, so two callers
    /// locking `{a, b}` and `{b, a}` cannot deadlock. On a Redis Cluster the
    /// names are taken slot by slot in a fixed order, and what was taken is
    /// given back when a later slot is busy; a Locker whose
    /// [prefix](crate::LockerBuilder::prefix) carries a hash tag keeps all
    /// its names in one slot, taken by one script. On a Redlock each node
    /// takes every name or none in one script, and the set is held when a
    /// majority of the nodes took it (a split vote is given back and tried
    /// again, as for one name). See [`LockSetGuard`] for what the guard
    /// offers.
    ///
    /// On one server and a Cluster, a waiting set tries again at every
    /// release of one of its names (and once a second); after a second it also joins the FIFO queue of a
    /// busy name, and when that name is handed to it while another is
    /// still busy, it gives the name back at once and queues again. So a
    /// stream of single-name hand-overs delays a set but cannot keep it out
    /// for good, and the set never holds part of itself while it waits. A
    /// Redlock has no queues: a waiting set tries again at the first
    /// release notice of any of its names from any node.
    ///
    /// ```no_run
    /// # use lockattr_runtime::Locker;
    /// # use std::time::Duration;
    /// # async fn run(locker: &Locker) -> Result<(), lockattr_runtime::LockError> {
    /// let guard = locker
    ///     .lock_all(["account:1", "account:2"])
    ///     .expire(Duration::from_secs(30))
    ///     .acquire()
    ///     .await?;
    /// // ... move money between the two accounts ...
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn lock_all<I>(&self, names: I) -> LockSetBuilder<'_>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        LockSetBuilder {
            locker: self,
            names: names.into_iter().map(|n| n.as_ref().to_owned()).collect(),
            expire: DEFAULT_EXPIRE,
            acquire_timeout: DEFAULT_ACQUIRE_TIMEOUT,
            renew: None,
            renew_for: None,
            kind: None,
        }
    }
}

/// A request for several locks at once: made by [`Locker::lock_all`].
///
/// ```no_run
/// # use lockattr_runtime::Locker;
/// # use std::time::Duration;
/// # fn run(locker: &Locker) -> Result<(), lockattr_runtime::LockError> {
/// let guard = locker
///     .lock_all(["seat:5:12", "seat:5:13"])
///     .acquire_timeout(Duration::ZERO) // one attempt
///     .acquire_blocking()?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
#[must_use = "a lock request does nothing until `.acquire()` or `.acquire_blocking()`"]
pub struct LockSetBuilder<'a> {
    locker: &'a Locker,
    names: Vec<String>,
    expire: Duration,
    acquire_timeout: Duration,
    renew: Option<bool>,
    renew_for: Option<Duration>,
    kind: Option<Cow<'static, str>>,
}

impl LockSetBuilder<'_> {
    setters! {
        /// The lease of every name, as [`LockBuilder::expire`](crate::LockBuilder::expire).
        ///
        /// ```
        /// # use lockattr_runtime::Locker;
        /// # use std::time::Duration;
        /// # let locker = Locker::new("redis://127.0.0.1/").unwrap();
        /// let request = locker.lock_all(["a", "b"]).expire(Duration::from_secs(30));
        /// ```
        pub fn expire(expire: Duration) => expire = expire;

        /// How long to wait while any of the names is held, as
        /// [`LockBuilder::acquire_timeout`](crate::LockBuilder::acquire_timeout);
        /// zero makes one attempt.
        ///
        /// ```
        /// # use lockattr_runtime::Locker;
        /// # use std::time::Duration;
        /// # let locker = Locker::new("redis://127.0.0.1/").unwrap();
        /// let request = locker.lock_all(["a", "b"]).acquire_timeout(Duration::from_secs(2));
        /// ```
        pub fn acquire_timeout(timeout: Duration) => acquire_timeout = timeout;

        /// Renews every name's lease while the guard is held, as
        /// [`LockBuilder::renew`](crate::LockBuilder::renew). The set is lost
        /// when any of its names is.
        ///
        /// ```
        /// # use lockattr_runtime::Locker;
        /// # let locker = Locker::new("redis://127.0.0.1/").unwrap();
        /// let request = locker.lock_all(["a", "b"]).renew(true);
        /// ```
        pub fn renew(renew: bool) => renew = Some(renew);

        /// Caps renewal, as [`LockBuilder::renew_for`](crate::LockBuilder::renew_for).
        ///
        /// ```
        /// # use lockattr_runtime::Locker;
        /// # use std::time::Duration;
        /// # let locker = Locker::new("redis://127.0.0.1/").unwrap();
        /// let request = locker.lock_all(["a", "b"]).renew_for(Duration::from_secs(3600));
        /// ```
        pub fn renew_for(renew_for: Duration) => renew_for = Some(renew_for);

        /// The `lock` label of the set's metrics (the `metrics` feature), as
        /// [`LockBuilder::kind`](crate::LockBuilder::kind) is a lock's.
        ///
        /// A set has one label, for its acquisition (one wait, one
        /// acquisition, one timeout per call, not one per name) and for every
        /// name it holds (held locks, hold times, losses). By default it is the
        /// distinct kinds of its names (each name's part before its first
        /// `:`), sorted, in brackets: `[account]` for `account:1` and
        /// `account:2`, `[account, order]` for `order:7` and `account:1`. A
        /// set's wait is for all of its names at once, so it is a series of
        /// its own rather than a wait of each name's kind: counted per name,
        /// one caller's wait would count several times and skew the quantiles
        /// of the single locks of those kinds.
        ///
        /// ```
        /// # use lockattr_runtime::Locker;
        /// # let locker = Locker::new("redis://127.0.0.1/").unwrap();
        /// let request = locker.lock_all(["1", "2"]).kind("account");
        /// ```
        pub fn kind(kind: impl Into<Cow<'static, str>>) => kind = Some(kind.into());
    }

    /// Takes every name or none, waiting up to the acquire timeout while
    /// any is held.
    ///
    /// [`LockError::Timeout`] (its `name` lists the set) when some name
    /// stayed busy; [`LockError::InvalidInput`] for an empty set, an empty
    /// name, a bad lease or timeout (as [`LockBuilder::acquire`](crate::LockBuilder::acquire)).
    /// Connection errors are retried within the acquire timeout; on a
    /// Redlock, [`LockError::NoQuorum`] when a majority of the nodes could
    /// not be reached or do not vote yet. Dropping the future is safe: what an attempt took
    /// or registered is given back.
    ///
    /// ```no_run
    /// # async fn run(locker: &lockattr_runtime::Locker) -> Result<(), lockattr_runtime::LockError> {
    /// let guard = locker.lock_all(["a", "b"]).acquire().await?;
    /// # Ok(()) }
    /// ```
    pub async fn acquire(self) -> Result<LockSetGuard, LockError> {
        let (acquiring, prepared) = self.start();
        let outcome = match prepared {
            Ok((request, members)) => {
                let span = acquiring.span().clone();
                if io::can_run_here() {
                    take(request, members, io::CallerGone::never())
                        .instrument(span)
                        .await
                } else {
                    io::run_watched(|gone| take(request, members, gone).instrument(span)).await
                }
            }
            Err(e) => Err(e),
        };
        acquiring.finish_set(outcome)
    }

    /// [`acquire`](Self::acquire) for synchronous code: blocks the calling
    /// thread, needs no async runtime. Its guard releases every name before
    /// its Drop returns.
    ///
    /// ```no_run
    /// # fn run(locker: &lockattr_runtime::Locker) -> Result<(), lockattr_runtime::LockError> {
    /// let guard = locker.lock_all(["a", "b"]).acquire_blocking()?;
    /// # Ok(()) }
    /// ```
    pub fn acquire_blocking(self) -> Result<LockSetGuard, LockError> {
        let (acquiring, prepared) = self.start();
        let outcome = prepared.and_then(|(request, members)| {
            let span = acquiring.span().clone();
            io::run_blocking(take(request, members, io::CallerGone::never()).instrument(span))
        });
        let mut guard = acquiring.finish_set(outcome)?;
        for member in &mut guard.members {
            member.set_blocking();
        }
        Ok(guard)
    }

    /// Opens the set's `acquire` span (its `lock` lists the names in the
    /// order they are taken in, or as given when the request is refused)
    /// and checks the request; the set counts as waiting from here.
    fn start(mut self) -> (Acquiring, Result<(SetRequest, Vec<Terms>), LockError>) {
        let kind = Kind::of_set(self.kind.take(), &self.names);
        let given = self.names.clone();
        match self.prepare(kind.clone()) {
            Ok((request, members)) => (
                Acquiring::start(&request.names.join(", "), kind),
                Ok((request, members)),
            ),
            Err(e) => (Acquiring::start(&given.join(", "), kind), Err(e)),
        }
    }

    /// Checks the request: every name's terms (as a single lock's), in the
    /// order the names are taken in, and the request for the backend.
    fn prepare(self, kind: Kind) -> Result<(SetRequest, Vec<Terms>), LockError> {
        let LockSetBuilder {
            locker,
            names,
            expire,
            acquire_timeout,
            renew,
            renew_for,
            kind: _,
        } = self;
        if names.is_empty() {
            return Err(LockError::invalid(
                "lock set",
                "it names no lock; give `lock_all` at least one name",
            ));
        }
        let mut seen = HashSet::with_capacity(names.len());
        let unique: Vec<String> = names
            .into_iter()
            .filter(|name| seen.insert(name.clone()))
            .collect();
        if unique.len() > MAX_SET_NAMES {
            return Err(LockError::invalid(
                "lock set",
                format!(
                    "it names {} distinct locks; a set takes at most {MAX_SET_NAMES} (its \
                     script must stay far below Redis's busy limit): split the work, or lock a \
                     name that stands for the group",
                    unique.len()
                ),
            ));
        }
        let mut members = Vec::with_capacity(unique.len());
        let mut wait = Duration::ZERO;
        for name in &unique {
            let mut builder = locker
                .lock(name)
                .expire(expire)
                .acquire_timeout(acquire_timeout);
            if let Some(renew) = renew {
                builder = builder.renew(renew);
            }
            if let Some(renew_for) = renew_for {
                builder = builder.renew_for(renew_for);
            }
            let (terms, w) = builder.checked(kind.clone())?;
            wait = w;
            members.push(terms);
        }
        // The fixed order: by slot, then by key.
        members.sort_by(|a, b| {
            (slot(&a.keys.lock), &a.keys.lock).cmp(&(slot(&b.keys.lock), &b.keys.lock))
        });
        let request = SetRequest {
            backend: locker.inner.backend.clone(),
            names: members.iter().map(|l| l.name.clone()).collect(),
            token: crate::layout::new_token()?,
            expire,
            wait,
        };
        Ok((request, members))
    }
}

/// A set to take, its names in their fixed order.
struct SetRequest {
    backend: Arc<Backend>,
    names: Vec<String>,
    token: String,
    expire: Duration,
    wait: Duration,
}

/// Runs the acquisition and makes the guard in the same future, so that a
/// set taken for a caller who stopped waiting is released by the guard's
/// Drop.
async fn take(
    request: SetRequest,
    members: Vec<Terms>,
    gone: io::CallerGone,
) -> Result<LockSetGuard, LockError> {
    let keys: Vec<Keys> = members.iter().map(|l| l.keys.clone()).collect();
    let groups = set::groups(&request.backend, &keys);
    let contender = Contender::Set(Cow::Owned(keys), groups);
    let won = wait::acquire(
        contender,
        wait::Request {
            backend: &request.backend,
            name: &request.names.join(", "),
            token: request.token,
            expire: request.expire,
            wait: request.wait,
            queued: false,
        },
        gone,
    )
    .await?;
    let Won {
        grant: Grant { sent, token, .. },
        fencing_tokens,
        ..
    } = won;
    let members = members
        .into_iter()
        .zip(fencing_tokens)
        .map(|(terms, fencing_token)| {
            let grant = Grant {
                fencing_token,
                sent,
                handed: false,
                token: token.clone(),
            };
            LockGuard::new(Lease::from_grant(terms, Taken::of(grant)))
        })
        .collect();
    Ok(LockSetGuard { members })
}
