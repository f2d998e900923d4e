//! Which locks the current call chain holds, for reentrant annotated
//! functions.
//!
//! A synchronous call chain is a thread: nothing else runs on it while a
//! function is inside its body, so the locks held by the annotated functions
//! it is in are kept per thread.
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
//! Synchronous code called from an async body sees the body's locks too.

use std::cell::RefCell;
use std::sync::Arc;

use crate::guard::Lease;
use crate::inner::Inner;

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

thread_local! {
    static ON_THREAD: RefCell<Vec<Arc<Lease>>> = const { RefCell::new(Vec::new()) };
}

/// The same lock: same server, same key prefix, same name. Two Lockers on
/// one Redis with one prefix share locks, so they share reentry too.
fn same(lease: &Lease, locker: &Inner, name: &str) -> bool {
    lease.name == name
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

/// The lease of lock `name` held by this thread's call chain, or by the
/// async body this synchronous code was called from.
pub(crate) fn find_blocking(locker: &Inner, name: &str) -> Option<Arc<Lease>> {
    let here = ON_THREAD.with(|held| {
        held.borrow()
            .iter()
            .rev()
            .find(|lease| same(lease, locker, name))
            .cloned()
    });
    here.or_else(|| find_async(locker, name))
}

/// Runs `body` with `lease` added to the async call chain's locks.
pub(crate) async fn scope<F: Future>(lease: Arc<Lease>, body: F) -> F::Output {
    let outer = IN_TASK.try_with(Chain::clone).unwrap_or_default();
    let chain = Chain(Some(Arc::new(Link { lease, outer })));
    IN_TASK.scope(chain, body).await
}

/// `lease` is held by this thread's call chain until the returned value is
/// dropped.
pub(crate) fn enter_blocking(lease: Arc<Lease>) -> OnThread {
    ON_THREAD.with(|held| held.borrow_mut().push(lease));
    OnThread(std::marker::PhantomData)
}

/// Takes its lease off this thread's list when dropped.
#[derive(Debug)]
pub(crate) struct OnThread(std::marker::PhantomData<*const ()>);

impl Drop for OnThread {
    fn drop(&mut self) {
        // Scopes end in reverse order of entry (they are nested calls), so
        // the last entry is this one.
        ON_THREAD.with(|held| held.borrow_mut().pop());
    }
}
