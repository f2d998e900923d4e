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

use crate::guard::Lease;
use crate::inner::Inner;
use crate::layout::KindKeys;

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
    lease.name == name
        && matches!(lease.keys.kind, KindKeys::Lock)
        && lease.locker.prefix == locker.prefix
        && lease.locker.backend.server() == locker.backend.server()
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
