//! The watchdog: one task per Locker that keeps renewed leases alive.
//!
//! A guard acquired with `renew` is entered here; every `expire / 3` its
//! lease is raised back to `expire` by a token-checked script, so work may
//! take longer than the lease while a crashed owner's lock still frees
//! itself within one lease. There is no thread or timer per lock: the task
//! sleeps until the earliest renewal is due, then renews, in one script
//! call, every lease that is at least halfway to its own due time, so locks
//! taken around the same time share their round trips.
//!
//! The task runs on the library's I/O thread, so it serves the blocking path
//! and every runtime alike, and does not stop when a caller's runtime does.
//! It starts with the first renewed guard and ends when none is left.
//!
//! When grants wait for replicas (`min_replicas`), each renewal is followed
//! by `WAIT`, on a connection that only renewals use: a renewal never waits
//! behind the grants' `WAIT`s, however many callers (blocking ones on the
//! I/O thread included) are acquiring other names.
//!
//! What a renewal finds goes to the guard's [`LeaseState`]: a lease that
//! Redis still holds for the guard moves its `valid_until`; one deleted or
//! taken marks the guard lost at once and leaves the watch. A renewal that
//! fails (Redis down or slow) is retried soon; if none succeeds before
//! `valid_until`, the guard is lost by time.
//!
//! Renewal stops when the guard is released: the release removes the entry
//! before it sends the release, so no renewal starts afterwards. One already
//! on its way cannot revive the lock: the script only touches a key that
//! still holds the guard's token.
//!
//! A lease with a cap on renewal (`renew_for`) leaves the watch once the cap
//! has passed: its due time never goes past the cap, so the task wakes then,
//! sends no renewal, marks the lease capped (the INFO event), and lets it
//! run out. A renewal sent just before the cap raises the lease to `expire`
//! as usual, so the lock lasts at most one lease past the cap.
//!
//! The watch also takes one-off checks: a guard handed its lock by a release
//! only knows that its lease started after its last request to Redis, which
//! may be long before. One read of the lease's time left (no renewal) makes
//! `valid_until` exact.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use crate::backend::{Backend, Renewal, Renewed};
use crate::layout::Keys;
use crate::lost::LeaseState;
use crate::sync::lock;
use crate::{LockError, io};

/// What the watchdog renews (a guard's lease), seen through what renewal
/// needs of it.
pub(crate) trait Renewable: Send + Sync {
    /// The keys of the hold.
    fn keys(&self) -> &Keys;
    /// Its owner token.
    fn token(&self) -> &str;
    /// The lease a renewal restores.
    fn expire(&self) -> Duration;
    /// The cap on renewal (`renew_for`), if any.
    fn renew_for(&self) -> Option<Duration>;
    /// When that cap ends.
    fn renew_until(&self) -> Option<Instant>;
    /// Where what a renewal finds is recorded.
    fn state(&self) -> &LeaseState;
    /// A renewal sent at `sent` found `left` of the lease.
    fn confirmed(&self, sent: Instant, left: Duration);
}

/// The most leases renewed by one script call.
const BATCH: usize = 500;

/// The watch of one Locker.
#[derive(Debug, Default)]
pub(crate) struct Watchdog {
    shared: Arc<Shared>,
}

#[derive(Debug, Default)]
struct Shared {
    state: Mutex<State>,
    /// An entry was added: the task may have to wake earlier.
    added: Notify,
}

#[derive(Debug, Default)]
struct State {
    entries: HashMap<u64, Entry>,
    next_id: u64,
    running: bool,
    /// When the task will look again, if it is asleep: an entry due later
    /// needs no wake-up (most do: they are due a third of a lease away).
    asleep_until: Option<Instant>,
}

#[derive(Debug)]
struct Entry {
    lease: Weak<dyn Renewable>,
    /// The latest time of its next renewal: the task wakes then.
    due: Instant,
    /// The earliest: it joins any batch sent from then on.
    early: Instant,
    /// Renew every `period`; `None`: read the lease once, then leave.
    period: Option<Duration>,
    /// No renewal from then on: the lease's `renew_for` has passed.
    until: Option<Instant>,
}

impl Entry {
    /// Keeps the next renewal at or before the cap, so the task is awake
    /// when the cap passes.
    fn cap(&mut self) {
        if let Some(until) = self.until {
            self.due = self.due.min(until);
            self.early = self.early.min(until);
        }
    }

    fn capped(&self, now: Instant) -> bool {
        self.until.is_some_and(|until| until <= now)
    }
}

/// How often a renewed lease is renewed: a third of the lease, at least a
/// millisecond.
pub(crate) fn period(expire: Duration) -> Duration {
    (expire / 3).max(Duration::from_millis(1))
}

impl Watchdog {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        lock(&self.shared.state)
    }

    /// Watches `lease`: renews it every `period` from `due` on, or reads it
    /// once at `due` when `period` is `None`. Returns the entry's id.
    pub(crate) fn watch<L: Renewable + 'static>(
        &self,
        backend: &Arc<Backend>,
        lease: &Arc<L>,
        due: Instant,
        period: Option<Duration>,
    ) -> u64 {
        let mut state = self.state();
        state.next_id += 1;
        let id = state.next_id;
        let mut entry = Entry {
            lease: Arc::downgrade(lease) as Weak<dyn Renewable>,
            due,
            early: period.map_or(due, |p| due.checked_sub(p / 2).unwrap_or(due)),
            period,
            // A one-off read is no renewal: not capped.
            until: period.and(lease.renew_until()),
        };
        entry.cap();
        let due = entry.due;
        state.entries.insert(id, entry);
        let start = !state.running;
        state.running = true;
        let wake = state.asleep_until.is_some_and(|at| due < at);
        drop(state);
        if start {
            let shared = self.shared.clone();
            let backend = Arc::downgrade(backend);
            if let Err(e) = io::spawn(run(shared, backend)) {
                self.state().running = false;
                tracing::warn!(target: "lockattr", error = %e, "cannot start the lock renewal task; leases will not be renewed");
            }
        } else if wake {
            self.shared.added.notify_one();
        }
        id
    }

    /// Stops watching entry `id` (no effect when it already left).
    pub(crate) fn unwatch(&self, id: u64) {
        self.state().entries.remove(&id);
    }
}

/// The task: renews what is due, sleeps until the next, ends when nothing
/// is watched.
async fn run(shared: Arc<Shared>, backend: Weak<Backend>) {
    // Failing since the last success: warn once per outage, not per retry.
    let mut failing = false;
    loop {
        let now = Instant::now();
        let mut due = Vec::new();
        let mut capped = Vec::new();
        let mut next = None::<Instant>;
        {
            let mut state = lock(&shared.state);
            state.entries.retain(|_, e| {
                if e.lease.strong_count() == 0 {
                    return false;
                }
                // Past its cap: leaves without a renewal.
                if e.capped(now) {
                    capped.extend(e.lease.upgrade());
                    return false;
                }
                true
            });
            if state.entries.is_empty() && capped.is_empty() {
                state.running = false;
                return;
            }
            if state.entries.values().any(|e| e.due <= now) {
                for (&id, entry) in &state.entries {
                    if entry.early <= now
                        && let Some(lease) = entry.lease.upgrade()
                    {
                        due.push((id, lease, entry.period));
                    }
                }
            } else {
                next = state.entries.values().map(|e| e.due).min();
            }
            state.asleep_until = next;
        }
        for lease in capped.drain(..) {
            if let Some(renew_for) = lease.renew_for() {
                lease.state().renewal_capped(renew_for);
            }
        }
        if due.is_empty() {
            let Some(next) = next else { continue };
            tokio::select! {
                () = tokio::time::sleep_until(next.into()) => {}
                () = shared.added.notified() => {}
            }
            lock(&shared.state).asleep_until = None;
            continue;
        }
        let Some(backend) = backend.upgrade() else {
            return;
        };
        // A lease already lost by time is not renewed: the guard has said so.
        due.retain(|(id, lease, _)| {
            let lost = lease.state().standing().lost().is_some();
            if lost {
                lock(&shared.state).entries.remove(id);
            }
            !lost
        });
        for batch in due.chunks(BATCH) {
            match renew(&shared, &backend, batch).await {
                Ok(()) if failing => {
                    failing = false;
                    tracing::info!(target: "lockattr", "lock renewals reach Redis again");
                }
                Ok(()) => {}
                Err(e) if !failing => {
                    failing = true;
                    tracing::warn!(target: "lockattr", error = %e, leases = batch.len(), "could not renew locks; retrying");
                }
                Err(e) => {
                    tracing::debug!(target: "lockattr", error = %e, "could not renew locks; retrying")
                }
            }
        }
    }
}

/// Renews one batch and records what Redis said; the error when the
/// request failed (the batch is then retried soon).
async fn renew(
    shared: &Shared,
    backend: &Backend,
    batch: &[(u64, Arc<dyn Renewable>, Option<Duration>)],
) -> Result<(), LockError> {
    let renewals: Vec<Renewal<'_>> = batch
        .iter()
        .map(|(_, lease, period)| Renewal {
            keys: lease.keys(),
            token: lease.token(),
            lease: period.map(|_| lease.expire()),
            expire: lease.expire(),
        })
        .collect();
    let sent = Instant::now();
    let outcome = backend.renew(&renewals).await;
    let mut state = lock(&shared.state);
    match outcome {
        Ok(found) => {
            let mut unknown = 0;
            for ((id, lease, period), found) in batch.iter().zip(found) {
                // Released meanwhile: what the renewal found no longer matters.
                let Some(entry) = state.entries.get_mut(id) else {
                    continue;
                };
                match (found, period) {
                    (Renewed::Left(left), Some(period)) => {
                        lease.confirmed(sent, left);
                        entry.due = sent + *period;
                        entry.early = sent + *period / 2;
                        entry.cap();
                    }
                    (Renewed::Left(left), None) => {
                        lease.confirmed(sent, left);
                        state.entries.remove(id);
                    }
                    // Reported as lost by the lease state.
                    (Renewed::NotOwned, _) => {
                        lease.state().taken();
                        state.entries.remove(id);
                    }
                    // Its node did not answer (a cluster master down).
                    (Renewed::Unknown, period) => {
                        unknown += 1;
                        lease.state().report().renewal_failed(&LockError::Runtime {
                            reason: "the node that holds it did not answer".into(),
                        });
                        retry_soon(entry, *period);
                    }
                }
            }
            if unknown > 0 {
                return Err(LockError::Runtime {
                    reason: format!("{unknown} of the renewals got no answer from their node"),
                });
            }
        }
        Err(e) => {
            for (id, lease, period) in batch {
                if let Some(entry) = state.entries.get_mut(id) {
                    lease.state().report().renewal_failed(&e);
                    retry_soon(entry, *period);
                }
            }
            return Err(e);
        }
    }
    Ok(())
}

/// Schedules a renewal that failed again: soon, but not in a tight loop
/// against a dead server.
fn retry_soon(entry: &mut Entry, period: Option<Duration>) {
    let wait = period.map_or(Duration::from_millis(100), |p| p / 4);
    entry.due = Instant::now() + wait.max(Duration::from_millis(10));
    entry.early = entry.due;
    entry.cap();
}
