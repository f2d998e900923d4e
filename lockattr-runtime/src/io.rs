//! The I/O thread, and where each lock operation runs.
//!
//! A tokio connection belongs to the runtime that created it and dies with
//! it. An operation awaited on a tokio runtime (multi-thread, or
//! current-thread, in a task or in `block_on` itself) runs right there, on a
//! connection of that runtime (see `SingleNode`): no hop to another thread,
//! so acquire+release costs two round trips and little more. Work that must
//! go on after its caller (the release of a dropped guard, a give-back)
//! runs there too where tokio keeps running in the background (a
//! multi-thread runtime, a task of a current-thread one), but not from
//! `block_on`'s own future, which stops being polled when `block_on`
//! returns. That work, and everything else, runs on one small
//! current-thread runtime on a dedicated thread, started on first use: the
//! blocking path (plain threads need no runtime of their own; they wait on
//! a std channel), futures polled by other executors (they await a oneshot
//! channel), and the subscriber connection of each Locker.
//!
//! An operation handed to the I/O thread keeps running when its caller goes
//! away, which makes cancellation safe there: a guard acquired for a caller
//! who stopped waiting is dropped on that thread, and its Drop releases the
//! lock. Operations run on the caller's runtime make cancellation safe with
//! drop guards instead (a request in flight is given back on its own
//! connection). One case is left to the lease: a runtime that shuts down
//! while an acquisition is on the wire takes its connection with it, so the
//! give-back cannot be sent; the lock then frees itself at expiry, as after
//! a crash.

use std::future::Future;
use std::sync::{Weak, mpsc};

use once_cell::sync::OnceCell;
use tokio::runtime::Handle;

use crate::LockError;

static IO: OnceCell<Handle> = OnceCell::new();

fn handle() -> Result<&'static Handle, LockError> {
    IO.get_or_try_init(|| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .thread_name("lockattr-io")
            .build()
            .map_err(|e| LockError::Runtime {
                reason: format!("cannot build the I/O runtime: {e}"),
            })?;
        let handle = runtime.handle().clone();
        std::thread::Builder::new()
            .name("lockattr-io".into())
            .spawn(move || runtime.block_on(std::future::pending::<()>()))
            .map_err(|e| LockError::Runtime {
                reason: format!("cannot start the I/O thread: {e}"),
            })?;
        Ok(handle)
    })
}

fn stopped() -> LockError {
    LockError::Runtime {
        reason: "the operation was dropped before it finished".into(),
    }
}

/// Runs `fut` on the I/O thread without waiting for it.
pub(crate) fn spawn<F>(fut: F) -> Result<(), LockError>
where
    F: Future<Output = ()> + Send + 'static,
{
    handle()?.spawn(fut);
    Ok(())
}

/// Runs `fut` on the I/O thread and awaits its output from any executor.
pub(crate) async fn run<T, F>(fut: F) -> Result<T, LockError>
where
    F: Future<Output = Result<T, LockError>> + Send + 'static,
    T: Send + 'static,
{
    let (tx, rx) = tokio::sync::oneshot::channel();
    spawn(async move {
        // When the caller is gone the output is dropped here (a guard's Drop
        // then releases its lock).
        let _ = tx.send(fut.await);
    })?;
    rx.await.map_err(|_| stopped())?
}

/// True when lock operations awaited here can run right here, on the
/// current runtime and its connection, with no hop to the I/O thread: on
/// any tokio runtime, a current-thread one inside `block_on` included
/// (its connection is driven while the operation is awaited).
pub(crate) fn can_run_here() -> bool {
    Handle::try_current().is_ok()
}

/// True when work spawned here keeps running in the background: a
/// multi-thread runtime always does; a current-thread runtime does while
/// its tasks run, but not after the `block_on` that polls a future here
/// returns (a sync program that calls `rt.block_on(..)` now and then), so
/// what must go on after its caller (a dropped guard's release, a
/// give-back) goes to the I/O thread there.
pub(crate) fn runs_in_background_here() -> bool {
    use tokio::runtime::RuntimeFlavor;
    Handle::try_current().is_ok_and(|handle| {
        handle.runtime_flavor() == RuntimeFlavor::MultiThread || tokio::task::try_id().is_some()
    })
}

/// Starts `fut` as a task of the current runtime when work spawned here
/// keeps running (see [`runs_in_background_here`]): it uses the
/// connections this runtime has open. Otherwise on the I/O thread.
pub(crate) fn spawn_here<F>(fut: F) -> Result<(), LockError>
where
    F: Future<Output = ()> + Send + 'static,
{
    if runs_in_background_here() {
        drop(tokio::spawn(fut));
        Ok(())
    } else {
        spawn(fut)
    }
}

/// Runs `fut` right here when it can (see [`can_run_here`]), otherwise on
/// the I/O thread.
pub(crate) async fn run_here<T, F>(fut: F) -> Result<T, LockError>
where
    F: Future<Output = Result<T, LockError>> + Send + 'static,
    T: Send + 'static,
{
    if can_run_here() {
        fut.await
    } else {
        run(fut).await
    }
}

/// Calls `forget` with `owner` once the runtime of `handle` shuts down
/// (it drops its tasks, this one's with them), so that what `owner` keeps
/// for that runtime (its connections) goes with it. The task ends on its
/// own once `owner` is gone, so a long-lived runtime does not keep one idle
/// task per dropped Locker; `forget` is not called then.
pub(crate) fn when_runtime_ends<T>(
    handle: &Handle,
    owner: Weak<T>,
    forget: impl FnOnce(&T) + Send + 'static,
) where
    T: Send + Sync + 'static,
{
    /// Calls its function when dropped.
    struct OnDrop<F: FnOnce()>(Option<F>);
    impl<F: FnOnce()> Drop for OnDrop<F> {
        fn drop(&mut self) {
            if let Some(f) = self.0.take() {
                f();
            }
        }
    }
    let watched = owner.clone();
    let on_drop = OnDrop(Some(move || {
        if let Some(owner) = watched.upgrade() {
            forget(&owner);
        }
    }));
    handle.spawn(async move {
        let _on_drop = on_drop;
        while owner.strong_count() > 0 {
            tokio::time::sleep(std::time::Duration::from_secs(10)).await;
        }
    });
}

/// Sleeps until `deadline` on any executor: on the current tokio runtime's
/// timer when there is one, otherwise on the I/O thread's.
pub(crate) async fn sleep_until(deadline: std::time::Instant) {
    if Handle::try_current().is_ok() {
        return tokio::time::sleep_until(deadline.into()).await;
    }
    let (done, wait) = tokio::sync::oneshot::channel::<()>();
    let timer = spawn(async move {
        tokio::time::sleep_until(deadline.into()).await;
        let _ = done.send(());
    });
    match timer {
        Ok(()) => drop(wait.await),
        // No timer anywhere: never wake for time; callers wake on other events.
        Err(_) => std::future::pending().await,
    }
}

/// Tells a task on the I/O thread that its async caller stopped waiting
/// (the caller's future was dropped), so it can stop at a safe point.
pub(crate) struct CallerGone(Option<tokio::sync::oneshot::Receiver<()>>);

impl CallerGone {
    /// A caller that never goes away (a blocked thread).
    pub(crate) fn never() -> CallerGone {
        CallerGone(None)
    }

    /// Resolves once the caller is gone; never for [`CallerGone::never`].
    pub(crate) async fn wait(&mut self) {
        match &mut self.0 {
            // The sender is never used: only its drop is a signal.
            Some(alive) => drop(alive.await),
            None => std::future::pending().await,
        }
    }
}

/// [`run`] for a task that wants to know when its caller is gone.
pub(crate) async fn run_watched<T, F>(make: impl FnOnce(CallerGone) -> F) -> Result<T, LockError>
where
    F: Future<Output = Result<T, LockError>> + Send + 'static,
    T: Send + 'static,
{
    let (alive, watch) = tokio::sync::oneshot::channel::<()>();
    let output = run(make(CallerGone(Some(watch)))).await;
    drop(alive);
    output
}

/// Runs `fut` on the I/O thread and blocks the calling thread until it is done.
///
/// Needs no tokio runtime on the calling thread. Must not be called on the
/// I/O thread itself.
pub(crate) fn run_blocking<T, F>(fut: F) -> Result<T, LockError>
where
    F: Future<Output = Result<T, LockError>> + Send + 'static,
    T: Send + 'static,
{
    let (tx, rx) = mpsc::sync_channel(1);
    spawn(async move {
        let _ = tx.send(fut.await);
    })?;
    rx.recv().map_err(|_| stopped())?
}
