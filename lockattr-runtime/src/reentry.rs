//! Which locks the current call chain holds, for reentrant annotated
//! functions.
//!
//! An asynchronous call chain is not a thread. A task moves between worker
//! threads at every `.await`, and one thread runs many tasks in turns: two
//! unrelated tasks on a current-thread runtime share a thread, so a lock
//! held "by the thread" would let the second walk into the first's critical
//! section. Nor is it exactly a task: `join!` runs two branches in one task.
//! So the held locks travel with the body's future itself (a tokio task-local
//! scope around it): code awaited inside the body, however deep, sees them;
//! a task it spawns does not, and waits for the lock like anyone else.
//!
//! A synchronous call chain is not a thread either: a thread that waits in
//! a thread pool (rayon's `par_iter` or `join`) runs other jobs meanwhile,
//! and one of them for the same lock cannot be told from a nested call. So
//! synchronous functions re-enter only when they ask to (`reentrant =
//! true`), and then per thread, as parking_lot's `ReentrantMutex` does: a
//! thread-local list of the leases that sync bodies on this thread hold
//! that way, each with a count of the bodies inside it. The outermost body
//! counts one and each nested call one more; [`OnThread`] takes its count
//! back when the body ends, however it ends (a panic unwinds through it),
//! and the entry goes with the last count, before the outermost call
//! releases the lock. Another thread never sees the entry, and `OnThread`
//! cannot be sent to one. Sync code does not look at the async chain, nor
//! async code at the thread's (while a body is polled, anything that runs
//! on its thread could see it).

use std::cell::RefCell;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::backend::Extend;
use crate::inner::Inner;
use crate::layout::KindKeys;
use crate::lease::Lease;
use crate::lost::Standing;
use crate::{DEFAULT_EXPIRE, LockError, LockGuard, LostReason, io, watchdog};

/// What a nested call asks of the lease it re-enters: its own `expire`
/// (raises the lease when it has less left), `renew` (without `renew_for`:
/// keeps a lease that is not renewed renewed while the nested call runs)
/// and `hold_at_least`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Nested {
    pub(crate) expire: Option<Duration>,
    pub(crate) renew: bool,
    pub(crate) hold_at_least: Option<Duration>,
}

/// The locks held by an async call chain, innermost first.
#[derive(Clone, Default)]
pub(crate) struct Chain(Option<Arc<Link>>);

struct Link {
    lease: Arc<Lease>,
    outer: Chain,
}

tokio::task_local! {
    static IN_TASK: Chain;
}

/// The same lock: same server, same key prefix, same name. Two Lockers on
/// one Redis with one prefix share locks, so they share reentry too.
fn same(lease: &Lease, locker: &Inner, name: &str) -> bool {
    lease.name() == name
        && matches!(lease.keys().kind, KindKeys::Lock)
        && lease.locker().prefix == locker.prefix
        && lease.locker().backend.server() == locker.backend.server()
}

impl Chain {
    fn find(&self, locker: &Inner, name: &str) -> Option<Arc<Lease>> {
        let mut link = self.0.as_ref();
        while let Some(l) = link {
            if same(&l.lease, locker, name) {
                return Some(l.lease.clone());
            }
            link = l.outer.0.as_ref();
        }
        None
    }
}

/// The lease of lock `name` held by the async call chain being polled.
pub(crate) fn find_async(locker: &Inner, name: &str) -> Option<Arc<Lease>> {
    IN_TASK
        .try_with(|chain| chain.find(locker, name))
        .ok()
        .flatten()
}

/// Runs `body` with every lease of `leases` added to the async call chain's
/// locks (one lock's, or the names of a lock set).
pub(crate) async fn scope<F: Future>(leases: Vec<Arc<Lease>>, body: F) -> F::Output {
    let mut chain = IN_TASK.try_with(Chain::clone).unwrap_or_default();
    for lease in leases {
        chain = Chain(Some(Arc::new(Link {
            lease,
            outer: chain,
        })));
    }
    IN_TASK.scope(chain, body).await
}

thread_local! {
    /// The leases held by `reentrant = true` sync bodies on this thread.
    static ON_THREAD: RefCell<Counts<Lease>> = const { RefCell::new(Counts::new()) };
}

/// Leases, each with how many bodies are inside it: the outermost counts
/// one, each nested call one more.
struct Counts<T>(Vec<(Arc<T>, usize)>);

impl<T> Counts<T> {
    const fn new() -> Self {
        Counts(Vec::new())
    }

    /// The innermost lease `matches` accepts.
    fn find(&self, mut matches: impl FnMut(&T) -> bool) -> Option<Arc<T>> {
        self.0
            .iter()
            .rev()
            .find(|(lease, _)| matches(lease))
            .map(|(lease, _)| lease.clone())
    }

    /// One more body inside `lease` (the first one adds it).
    fn enter(&mut self, lease: &Arc<T>) {
        match self.0.iter_mut().find(|(l, _)| Arc::ptr_eq(l, lease)) {
            Some((_, count)) => *count = count.saturating_add(1),
            None => self.0.push((lease.clone(), 1)),
        }
    }

    /// One body fewer inside `lease`; the last one removes it.
    fn leave(&mut self, lease: &Arc<T>) {
        let Some(at) = self.0.iter().rposition(|(l, _)| Arc::ptr_eq(l, lease)) else {
            return;
        };
        let count = &mut self.0[at].1;
        *count = count.saturating_sub(1);
        if *count == 0 {
            self.0.remove(at);
        }
    }
}

/// The lease of lock `name` that a `reentrant = true` sync body on this
/// thread holds.
pub(crate) fn find_on_thread(locker: &Inner, name: &str) -> Option<Arc<Lease>> {
    ON_THREAD
        .try_with(|held| held.borrow().find(|lease| same(lease, locker, name)))
        .ok()
        .flatten()
}

/// A `reentrant = true` sync body on this thread, inside its leases (one,
/// or a set's names): each counts it until this is dropped, on this thread
/// (it is neither `Send` nor `Sync`).
pub(crate) struct OnThread {
    leases: Vec<Arc<Lease>>,
    _this_thread: PhantomData<*const ()>,
}

/// Counts a sync body on this thread inside each of `leases` (adding those
/// it is the first inside), until the returned value is dropped.
pub(crate) fn enter_on_thread(leases: Vec<Arc<Lease>>) -> OnThread {
    // Not counted at all when the thread is going away: nothing then
    // could find them.
    let _ = ON_THREAD.try_with(|held| {
        let mut held = held.borrow_mut();
        for lease in &leases {
            held.enter(lease);
        }
    });
    OnThread {
        leases,
        _this_thread: PhantomData,
    }
}

impl Drop for OnThread {
    fn drop(&mut self) {
        let _ = ON_THREAD.try_with(|held| {
            let mut held = held.borrow_mut();
            for lease in self.leases.iter().rev() {
                held.leave(lease);
            }
        });
    }
}

/// A nested call's `renew` on a lease its outer call does not renew: the
/// lease's own entry in its Locker's watchdog, left when this is dropped
/// (when the nested body ends, however it ends), so the lease is the outer
/// call's again afterwards.
pub(crate) struct Renewing {
    lease: Arc<Lease>,
    id: u64,
}

impl Renewing {
    /// Renews `lease`, held until at least `valid_until`, as if it had been
    /// taken with `renew`: to its `expire`, every `expire / 3`, the first
    /// time when no more than `expire - expire / 3` is left.
    fn start(lease: &Arc<Lease>, valid_until: Instant) -> Renewing {
        let period = watchdog::period(lease.expire());
        let now = Instant::now();
        let due = valid_until
            .checked_sub(lease.expire().saturating_sub(period))
            .map_or(now, |due| due.max(now));
        let locker = &lease.locker();
        let id = locker
            .watchdog
            .watch(&locker.backend, lease, due, Some(period));
        Renewing {
            lease: lease.clone(),
            id,
        }
    }
}

impl Drop for Renewing {
    fn drop(&mut self) {
        self.lease.locker().watchdog.unwatch(self.id);
    }
}

impl std::fmt::Debug for Renewing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Renewing")
            .field("name", &self.lease.name())
            .finish_non_exhaustive()
    }
}

/// A reentry: the caller holds `lease`, unless it was lost meanwhile.
/// The nested call's own `expire`, `renew` and `hold_at_least` still count,
/// as they would for a lock of its own:
/// - an `expire` written on the nested call, longer than the lease has
///   left, raises the lease to `expire`, in one round trip (none when
///   enough is left, or when the nested call sets no `expire`);
/// - `renew` on a lease that is not renewed keeps it renewed while the
///   nested call's guard lives, that is while its body runs;
/// - `hold_at_least` keeps the lock that long after the nested call
///   entered, when the outermost call releases it; the hold already there
///   is never shortened. It must fit in the nested call's `expire` (10 s
///   if not given), as for a lock of its own, and the lease is raised to it
///   when it has less left, so the hold lasts even if the process stops.
///
/// [`Reentry::start`] checks, [`Reentry::raise_to`] says whether the lease
/// must be raised first (async or blocking, by the caller), and
/// [`Reentry::finish`] makes the nested call's guard.
struct Reentry {
    lease: Arc<Lease>,
    options: Nested,
    entered: Instant,
    hold: Option<Duration>,
    valid_until: Instant,
}

impl Reentry {
    fn start(lease: Arc<Lease>, options: Nested) -> Result<Reentry, LockError> {
        let entered = Instant::now();
        let valid_until = match lease.state().standing() {
            Standing::Lost(reason) => return Err(lease.lost_error(reason)),
            Standing::Held { until } => until,
        };
        let hold = options.hold_at_least.filter(|hold| !hold.is_zero());
        if let Some(hold) = hold {
            crate::hold::check(hold, options.expire.unwrap_or(DEFAULT_EXPIRE))?;
        }
        Ok(Reentry {
            lease,
            options,
            entered,
            hold,
            valid_until,
        })
    }

    /// The lease to set first, checked, when it has less left than the
    /// nested call's `expire` (or hold) asks for.
    fn raise_to(&self) -> Result<Option<Duration>, LockError> {
        match self.options.expire.max(self.hold) {
            Some(expire) if self.valid_until.saturating_duration_since(Instant::now()) < expire => {
                check_expire(&self.lease, expire)?;
                Ok(Some(expire))
            }
            _ => Ok(None),
        }
    }

    /// The nested call's guard, and its renewal when it asked for one on a
    /// lease that is not renewed, once the lease is raised (`raised`).
    fn finish(mut self, raised: bool) -> Result<(LockGuard, Option<Renewing>), LockError> {
        if raised {
            self.valid_until = match self.lease.state().standing() {
                Standing::Lost(reason) => return Err(self.lease.lost_error(reason)),
                Standing::Held { until } => until,
            };
        }
        if let Some(hold) = self.hold {
            self.lease.hold().at_least_until(self.entered, hold);
        }
        let renewing = (self.options.renew && !self.lease.renews())
            .then(|| Renewing::start(&self.lease, self.valid_until));
        Ok((LockGuard::nested(self.lease), renewing))
    }
}

/// Re-enters `lease`, which the caller holds, as `options` ask: the nested
/// call's guard (it never releases), and its renewal, if any.
pub(crate) async fn reenter(
    lease: Arc<Lease>,
    options: Nested,
) -> Result<(LockGuard, Option<Renewing>), LockError> {
    let reentry = Reentry::start(lease, options)?;
    let raise_to = reentry.raise_to()?;
    if let Some(expire) = raise_to {
        raise(&reentry.lease, expire).await?;
    }
    reentry.finish(raise_to.is_some())
}

/// [`reenter`] for a sync call, on a lease its thread holds.
pub(crate) fn reenter_blocking(
    lease: Arc<Lease>,
    options: Nested,
) -> Result<(LockGuard, Option<Renewing>), LockError> {
    let reentry = Reentry::start(lease, options)?;
    let raise_to = reentry.raise_to()?;
    if let Some(expire) = raise_to {
        raise_blocking(&reentry.lease, expire)?;
    }
    reentry.finish(raise_to.is_some())
}

/// A nested call's `expire` is checked as a lock's own would be
/// (`LockBuilder`), though it only matters when it raises the lease.
fn check_expire(lease: &Lease, expire: Duration) -> Result<(), LockError> {
    let max_lease = lease.locker().max_lease;
    let reason = if expire.is_zero() {
        "a lease of zero would free the lock at once; use at least a millisecond".to_owned()
    } else if expire > max_lease {
        format!(
            "{expire:?} is longer than the Locker's max_lease ({max_lease:?}); is the unit right?"
        )
    } else {
        return Ok(());
    };
    Err(LockError::invalid("expire", reason))
}

/// Sets the time `lease` has left to `expire`. Only called when the guard
/// counts less than `expire` left: the guard's count is a lower bound, so
/// this can take off at most the little it does not count (how long the
/// request that set the lease took), never time the guard relies on. A lock
/// found no longer owned is reported as lost.
async fn raise(lease: &Arc<Lease>, expire: Duration) -> Result<(), LockError> {
    let raised = lease.clone();
    let outcome = io::run_here(async move { raised.extend(expire, Extend::Set).await }).await;
    raised_or_lost(lease, outcome)
}

/// [`raise`] for a sync call.
fn raise_blocking(lease: &Arc<Lease>, expire: Duration) -> Result<(), LockError> {
    let raised = lease.clone();
    let outcome = io::run_blocking(async move { raised.extend(expire, Extend::Set).await });
    raised_or_lost(lease, outcome)
}

fn raised_or_lost(lease: &Lease, outcome: Result<(), LockError>) -> Result<(), LockError> {
    match outcome {
        Err(LockError::NotOwned { .. }) => Err(lease.lost_error(LostReason::Taken)),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::Counts;
    use std::sync::Arc;

    /// Counts with one body entered into each of `leases`, in turn.
    fn entered<T>(leases: &[&Arc<T>]) -> Counts<T> {
        let mut counts = Counts::new();
        for lease in leases {
            counts.enter(lease);
        }
        counts
    }

    /// The innermost lease equal to `name`.
    fn find<T: PartialEq>(counts: &Counts<T>, name: T) -> Option<Arc<T>> {
        counts.find(|l| *l == name)
    }

    #[test]
    fn counts_bodies_and_forgets_a_lease_with_the_last() {
        let (a, b) = (Arc::new("a"), Arc::new("b"));
        let mut counts = entered(&[&a, &b, &a]);
        assert_eq!(find(&counts, "a").as_deref(), Some(&"a"));
        counts.leave(&a);
        assert!(find(&counts, "a").is_some(), "a nested exit freed it");
        counts.leave(&a);
        assert!(find(&counts, "a").is_none());
        assert!(find(&counts, "b").is_some());
        // Leaving what is not there changes nothing, and never goes below.
        counts.leave(&a);
        counts.leave(&b);
        counts.leave(&b);
        assert!(counts.0.is_empty());
    }

    #[test]
    fn tells_leases_of_one_name_apart_by_identity() {
        // Two leases that match alike (a lock released, then taken anew):
        // each body leaves the one it entered.
        let (old, new) = (Arc::new("a"), Arc::new("a"));
        let mut counts = entered(&[&old, &new]);
        assert!(Arc::ptr_eq(&find(&counts, "a").unwrap(), &new));
        counts.leave(&new);
        assert!(Arc::ptr_eq(&find(&counts, "a").unwrap(), &old));
        counts.leave(&old);
        assert!(counts.0.is_empty());
    }
}
