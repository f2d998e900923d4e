//! Which locks the current call chain holds, for reentrant annotated
//! functions. Only async functions re-enter.
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
//! synchronous functions never re-enter: nothing is kept per thread, and
//! synchronous code does not look at the async chain (while a body is
//! polled, anything that runs on its thread could see it).

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

/// The same lock: same server, same key prefix, same name. Two Lockers on
/// one Redis with one prefix share locks, so they share reentry too.
fn same(lease: &Lease, locker: &Inner, name: &str) -> bool {
    lease.name == name
        && lease.keys.permits == 0
        && lease.keys.rw.is_none()
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

/// Runs `body` with `lease` added to the async call chain's locks.
pub(crate) async fn scope<F: Future>(lease: Arc<Lease>, body: F) -> F::Output {
    let outer = IN_TASK.try_with(Chain::clone).unwrap_or_default();
    let chain = Chain(Some(Arc::new(Link { lease, outer })));
    IN_TASK.scope(chain, body).await
}

/// Runs `body` with every lease of `leases` added to the async call chain's
/// locks (the names of a lock set).
pub(crate) async fn scope_all<F: Future>(leases: Vec<Arc<Lease>>, body: F) -> F::Output {
    let mut chain = IN_TASK.try_with(Chain::clone).unwrap_or_default();
    for lease in leases {
        chain = Chain(Some(Arc::new(Link {
            lease,
            outer: chain,
        })));
    }
    IN_TASK.scope(chain, body).await
}
