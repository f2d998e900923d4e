//! One queue per lock name in this process, so that a process keeps one
//! entry in Redis per name however many of its tasks want it.
//!
//! The tasks of one Locker that want the same lock (one server or a Redis
//! Cluster) take turns here first: one of them at a time has the *turn*
//! ([`Turn`]): it waits in Redis's queue, or holds the lock. The others wait
//! in this process, in the order they came, and make no request at all.
//! When the task with the turn releases the lock, its one release call also
//! names the oldest of them (see `scripts::RELEASE`): when nobody of another
//! process is queued in Redis, that task takes the lock in the same call,
//! with a new fencing token, and hears it from the releaser at once; when
//! someone is, it is queued last in Redis and the oldest waiter is served,
//! so the processes keep the order in which they asked.
//!
//! A hand-over inside the process is then one script call and no pub/sub
//! message round, and a lock contended by many tasks of one process costs
//! Redis one call per critical section instead of two (a queued attempt and
//! a release).
//!
//! Nothing here decides who holds the lock: Redis does, with the lock's own
//! token and fencing counter. A task that leaves this queue (its acquire
//! time ran out, or its future was dropped) makes no request; one whose
//! turn came while nobody listened any more is given back in the background,
//! as a waiter that gave up in Redis would be ([`Unclaimed`]). And a turn
//! that is never passed on cannot keep the others waiting past the lease of
//! the lock: once it has ended, the oldest waiter here goes to Redis itself.
//!
//! A try without waiting, a Redlock, and the other kinds (read-write locks,
//! semaphores, sets) do not use it.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use crate::backend::queue::{GIVE_BACK_FOR, Queued, RECHECK, give_back_until};
use crate::backend::shared::{Owner, Successor};
use crate::backend::{Backend, Released};
use crate::layout::{Keys, Notice};
use crate::{LockError, io};

/// A successor is only named with at least this much of its wait left: a
/// shorter wait could end before the release reaches Redis.
const LEAST_WAIT: Duration = Duration::from_millis(2);

/// The local queues of one Locker, by lock key.
#[derive(Default)]
pub(crate) struct LocalQueues {
    names: Mutex<HashMap<Arc<str>, Name>>,
    next_id: AtomicU64,
}

/// One name's queue in this process.
#[derive(Default)]
struct Name {
    /// Tasks of this process with a turn: waiting in Redis, or holding.
    turns: usize,
    /// When the lease of the task of this process that holds the lock ends
    /// (as it was granted; renewals are not followed).
    held_until: Option<Instant>,
    /// The tasks waiting here, oldest first.
    waiters: VecDeque<Entry>,
}

/// A task waiting here.
struct Entry {
    id: u64,
    token: String,
    holder: Arc<str>,
    lease: Duration,
    deadline: Instant,
    tx: oneshot::Sender<Handed>,
}

impl Entry {
    /// Whether its task still waits and can be named as a successor.
    fn can_take(&self, now: Instant) -> bool {
        !self.tx.is_closed() && self.deadline > now + LEAST_WAIT
    }
}

/// A task's turn at a name: while any task of the process has one, the
/// others wait here. Dropped, it passes to the oldest task waiting here,
/// which then goes to Redis itself.
pub(crate) struct Turn {
    queues: Arc<LocalQueues>,
    key: Arc<str>,
    /// Its task holds the lock (and set `held_until`).
    holds: bool,
}

/// What [`LocalQueues::enter`] gives a task.
pub(crate) enum Entered {
    /// Its turn: go to Redis.
    Turn(Turn),
    /// Wait here.
    Wait(LocalWait),
}

/// A task's place in a local queue. Dropped, it leaves.
pub(crate) struct LocalWait {
    queues: Arc<LocalQueues>,
    key: Arc<str>,
    id: u64,
    deadline: Instant,
    rx: oneshot::Receiver<Handed>,
}

/// How a wait here ended.
pub(crate) enum Waited {
    /// The turn came.
    Handed(Handed),
    /// The acquire time ran out first.
    TimedOut,
}

/// A task's turn, given to it by the task before it.
pub(crate) struct Handed {
    /// Given back in the background unless claimed.
    unclaimed: Option<Box<Unclaimed>>,
    turn: Turn,
    how: How,
}

/// What the task whose turn it is does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum How {
    /// Nothing: a release sent at `sent` handed it the lock with this
    /// fencing token (its lease started after `sent`).
    Granted { fencing_token: u64, sent: Instant },
    /// Ask Redis; `queued`: the release may have queued its token, or
    /// handed it the lock (the acquire script counts that as taken).
    Ask { queued: bool },
}

impl Handed {
    /// The turn and what to do with it; the token is the caller's to give
    /// back from now on.
    pub(crate) fn claim(self) -> (Turn, How) {
        let Handed {
            unclaimed,
            turn,
            how,
        } = self;
        if let Some(mut unclaimed) = unclaimed {
            unclaimed.token.clear();
        }
        (turn, how)
    }
}

/// A token that a release named as its successor, which may hold the lock
/// or be queued for it: given back in the background when dropped before
/// its task claimed it.
struct Unclaimed {
    backend: Arc<Backend>,
    keys: Keys,
    token: String,
    expire: Duration,
}

impl Drop for Unclaimed {
    fn drop(&mut self) {
        if self.token.is_empty() {
            return;
        }
        let (backend, keys) = (self.backend.clone(), self.keys.clone());
        let token = std::mem::take(&mut self.token);
        let until = Instant::now() + self.expire.min(GIVE_BACK_FOR);
        let giving = io::spawn(async move {
            if let Some(on) = Queued::of(&backend) {
                let owner = Owner {
                    keys: &keys,
                    token: &token,
                };
                give_back_until(until, || on.give_back(owner)).await;
            }
        });
        if let Err(e) = giving {
            tracing::debug!(target: "lockattr", error = %e, "cannot give back a lock handed to a waiter that left; it expires with its lease");
        }
    }
}

fn lock(names: &Mutex<HashMap<Arc<str>, Name>>) -> MutexGuard<'_, HashMap<Arc<str>, Name>> {
    names.lock().unwrap_or_else(|p| p.into_inner())
}

impl LocalQueues {
    /// `token` (of a task of this Locker asking for the lock of `keys` for
    /// `lease`, until `deadline`) takes the turn at the name when no task of
    /// the process has it, or waits here.
    pub(crate) fn enter(
        self: &Arc<Self>,
        keys: &Keys,
        token: &str,
        lease: Duration,
        deadline: Instant,
    ) -> Entered {
        let mut names = lock(&self.names);
        let (key, name) = match names.get_key_value(keys.lock.as_str()) {
            Some((key, _)) => {
                let key = key.clone();
                let name = names.get_mut(&key).expect("found just above");
                (key, name)
            }
            None => {
                let key: Arc<str> = Arc::from(keys.lock.as_str());
                (key.clone(), names.entry(key).or_default())
            }
        };
        if name.turns == 0 {
            name.turns = 1;
            return Entered::Turn(self.turn(&key));
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        name.waiters.push_back(Entry {
            id,
            token: token.to_owned(),
            holder: keys.holder.clone(),
            lease,
            deadline,
            tx,
        });
        Entered::Wait(LocalWait {
            queues: self.clone(),
            key,
            id,
            deadline,
            rx,
        })
    }

    fn turn(self: &Arc<Self>, key: &Arc<str>) -> Turn {
        Turn {
            queues: self.clone(),
            key: key.clone(),
            holds: false,
        }
    }

    /// A turn at `key` ended: when it was the last, the oldest task waiting
    /// here gets one and asks Redis.
    fn leave(self: &Arc<Self>, key: &Arc<str>, held: bool) {
        let next = {
            let mut names = lock(&self.names);
            let Some(name) = names.get_mut(key) else {
                return;
            };
            name.turns = name.turns.saturating_sub(1);
            if held {
                name.held_until = None;
            }
            let now = Instant::now();
            let next = if name.turns == 0 {
                name.waiters.retain(|e| !e.tx.is_closed());
                let next = name.waiters.iter().position(|e| e.deadline > now);
                next.and_then(|i| name.waiters.remove(i))
            } else {
                None
            };
            if next.is_some() {
                name.turns += 1;
            } else if name.turns == 0 && name.waiters.is_empty() {
                names.remove(key);
            }
            next
        };
        if let Some(entry) = next {
            // A task that left meanwhile drops this turn, which passes on.
            let _ = entry.tx.send(Handed {
                unclaimed: None,
                turn: self.turn(key),
                how: How::Ask { queued: false },
            });
        }
    }
}

impl Turn {
    /// Its task was granted the lock for `lease` from `sent`.
    pub(crate) fn held(&mut self, sent: Instant, lease: Duration) {
        self.holds = true;
        let mut names = lock(&self.queues.names);
        if let Some(name) = names.get_mut(&self.key) {
            name.held_until = Some(sent + lease);
        }
    }

    /// The oldest task waiting here that can still take the lock, to name
    /// in the release; the turn back when none waits.
    fn pass(mut self, backend: &Arc<Backend>, keys: &Keys) -> Result<Passing, Turn> {
        let now = Instant::now();
        let queues = self.queues.clone();
        let entry = {
            let mut names = lock(&queues.names);
            let name = names.get_mut(&self.key);
            let next = name.and_then(|name| {
                let i = name.waiters.iter().position(|e| e.can_take(now))?;
                if self.holds {
                    name.held_until = None;
                }
                name.waiters.remove(i)
            });
            if next.is_some() {
                self.holds = false;
            }
            next
        };
        match entry {
            Some(entry) => Ok(Passing {
                entry: Some(entry),
                turn: Some(self),
                backend: backend.clone(),
                keys: keys.clone(),
            }),
            None => Err(self),
        }
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        self.queues.leave(&self.key, self.holds);
    }
}

/// A successor taken from the queue, whose release is on its way. Dropped
/// before [`deliver`](Self::deliver) (the release's future was dropped), it
/// tells the successor to ask Redis, as after a release whose answer was
/// lost.
struct Passing {
    entry: Option<Entry>,
    turn: Option<Turn>,
    backend: Arc<Backend>,
    keys: Keys,
}

impl Passing {
    fn successor(&self, now: Instant) -> Option<Successor<'_>> {
        let entry = self.entry.as_ref()?;
        Some(Successor {
            token: &entry.token,
            lease: entry.lease,
            wait: entry.deadline.saturating_duration_since(now),
            holder: &entry.holder,
        })
    }

    /// Tells the successor what the release sent at `sent` did: the release
    /// and the notice of its hand-over, or `Err` when its answer is not
    /// known. `confirm`: a grant counts only once confirmed by an attempt.
    fn deliver(
        mut self,
        released: Result<(Released, Option<&str>), ()>,
        sent: Instant,
        confirm: bool,
    ) {
        let Some(entry) = self.entry.take() else {
            return;
        };
        let handed = |notice: &str| {
            Notice::parse(notice)
                .filter(|n| n.token == entry.token && n.fencing_token != 0)
                .map(|n| n.fencing_token)
        };
        let how = match released {
            // The release did not own the lock, and left the successor alone.
            Ok((Released::NotOwned, _)) => How::Ask { queued: false },
            Ok((Released::Done, Some(notice))) if !confirm && handed(notice).is_some() => {
                How::Granted {
                    fencing_token: handed(notice).unwrap_or(0),
                    sent,
                }
            }
            // Queued behind a waiter of another process, or handed the lock
            // by a release whose answer may have been lost: the next attempt
            // finds out.
            _ => How::Ask { queued: true },
        };
        self.send(entry, how);
    }

    /// Sends `entry` its turn and `how`; a successor that left meanwhile
    /// drops them: its token is given back (unless the release left it
    /// alone), and the turn passes on.
    fn send(&mut self, entry: Entry, how: How) {
        let unclaimed = (how != How::Ask { queued: false }).then(|| {
            Box::new(Unclaimed {
                backend: self.backend.clone(),
                keys: self.keys.clone(),
                token: entry.token.clone(),
                expire: entry.lease,
            })
        });
        let Some(turn) = self.turn.take() else {
            return;
        };
        let _ = entry.tx.send(Handed {
            unclaimed,
            turn,
            how,
        });
    }
}

impl Drop for Passing {
    fn drop(&mut self) {
        if let Some(entry) = self.entry.take() {
            self.send(entry, How::Ask { queued: true });
        }
    }
}

/// Releases `owner`'s lock on `backend` (granted `fencing_token`, for `name`
/// and `expire`), naming the oldest task of this process waiting here as its
/// successor when `turn` is the task's turn; the turn passes on.
/// `confirm`: grants count only once replicas have them, so a successor
/// handed the lock confirms it with an attempt of its own.
pub(crate) async fn release(
    backend: &Arc<Backend>,
    (owner, fencing_token): (Owner<'_>, u64),
    (name, expire): (&str, Duration),
    turn: Option<Turn>,
    confirm: bool,
) -> Result<Released, LockError> {
    let (passing, turn) = match turn.map(|turn| turn.pass(backend, owner.keys)) {
        Some(Ok(passing)) => (Some(passing), None),
        Some(Err(turn)) => (None, Some(turn)),
        None => (None, None),
    };
    let sent = Instant::now();
    let successor = passing.as_ref().and_then(|p| p.successor(sent));
    let released = backend
        .release_to(owner, fencing_token, (name, expire), successor.as_ref())
        .await;
    if let Some(passing) = passing {
        let seen = released
            .as_ref()
            .map(|(released, notice)| (*released, notice.as_deref()))
            .map_err(|_| ());
        passing.deliver(seen, sent, confirm);
    }
    // With no successor, the turn ends after the release: a task that came
    // meanwhile waited here, and now finds the lock free.
    drop(turn);
    released.map(|(released, _)| released)
}

impl LocalWait {
    /// Waits until its turn comes or `deadline` passes. A task at the head
    /// of the queue whose holder (of this process) should have released by
    /// now stops waiting for it, and takes a turn of its own.
    pub(crate) async fn wait(&mut self, gone: &mut io::CallerGone) -> Result<Waited, LockError> {
        loop {
            let check = self.deadline.min(self.holder_overdue_at());
            tokio::select! {
                handed = &mut self.rx => return Ok(match handed {
                    Ok(handed) => Waited::Handed(handed),
                    // Never sent: the queue was dropped with its Locker.
                    Err(_) => Waited::TimedOut,
                }),
                () = tokio::time::sleep_until(check.into()) => {}
                () = gone.wait() => return Err(crate::backend::queue::stopped_waiting()),
            }
            let now = Instant::now();
            if now >= self.deadline {
                // A successor whose release is on its way is given back by
                // the releaser's Unclaimed when it arrives.
                self.leave();
                return Ok(Waited::TimedOut);
            }
            if let Some(turn) = self.overdue(now) {
                return Ok(Waited::Handed(Handed {
                    unclaimed: None,
                    turn,
                    how: How::Ask { queued: false },
                }));
            }
        }
    }

    /// When to look whether the holder is overdue: a millisecond after its
    /// lease, when it is this process's and this task is first; within
    /// [`RECHECK`] otherwise.
    fn holder_overdue_at(&self) -> Instant {
        let names = lock(&self.queues.names);
        let name = names.get(&self.key);
        let first = name.and_then(|n| n.waiters.front()).map(|e| e.id) == Some(self.id);
        match name.and_then(|n| n.held_until) {
            Some(until) if first => until + Duration::from_millis(1),
            _ => Instant::now() + RECHECK,
        }
    }

    /// A turn of its own, leaving the queue, when this task is first and
    /// the holder of this process is past its lease.
    fn overdue(&self, now: Instant) -> Option<Turn> {
        let mut names = lock(&self.queues.names);
        let name = names.get_mut(&self.key)?;
        let first = name.waiters.front().map(|e| e.id) == Some(self.id);
        if !first || name.held_until.is_none_or(|until| until >= now) {
            return None;
        }
        name.waiters.pop_front();
        name.turns += 1;
        drop(names);
        Some(self.queues.turn(&self.key))
    }

    fn leave(&self) {
        let mut names = lock(&self.queues.names);
        if let Some(name) = names.get_mut(&self.key) {
            name.waiters.retain(|e| e.id != self.id);
            if name.turns == 0 && name.waiters.is_empty() {
                names.remove(&self.key);
            }
        }
    }
}

impl Drop for LocalWait {
    fn drop(&mut self) {
        self.leave();
    }
}
