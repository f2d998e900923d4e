//! The I/O thread: where every Redis connection of the process lives.
//!
//! A tokio connection belongs to the runtime that created it and dies with
//! it. Callers come from anywhere: one `#[tokio::test]` runtime after another,
//! several runtimes at once, or plain threads with no runtime at all. So the
//! connections, their timers and every lock operation run on one small
//! current-thread runtime on a dedicated thread, started on first use.
//! Async callers await a oneshot channel (which works on any executor);
//! blocking callers wait on a std channel and need no tokio runtime at all.
//!
//! An operation keeps running when its caller goes away, which is what makes
//! cancellation safe: a guard that is acquired for a caller who stopped
//! waiting is dropped here, and its Drop releases the lock.

use std::future::Future;
use std::sync::mpsc;

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
