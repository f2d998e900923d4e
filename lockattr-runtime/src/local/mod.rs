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
//! token and fencing counter.
//!
//! # One owner token, one claimant
//!
//! A release that names a waiting task may hand the lock to that task's
//! owner token, or queue it, in Redis. From the moment the release takes
//! the task out of this queue ([`Turn::pass`]) until the task claims the
//! turn ([`Handed::claim`]), what the token got belongs to exactly one of
//! two paths, and the [`oneshot`] channel between them decides which:
//!
//! - the task claims it: it uses what the release did (a grant, or an
//!   attempt with the same token that finds the lock its own), and its
//!   acquisition gives the token back if it fails from then on;
//! - or the release's answer finds the task gone (its channel closed: the
//!   future was dropped, or it gave up, below): the releaser gives the
//!   token back in the background ([`GiveBack`]), and the task never uses
//!   that token again.
//!
//! A task whose acquire time ends while it waits here gives up
//! ([`LocalWait::give_up`]) in one of two ways, decided under the queue's
//! lock against the release's [`Turn::pass`]:
//!
//! - **still queued** ([`GaveUp::Left`]): no release ever named it; its
//!   token is its own, and it makes one last attempt with it, as a waiter
//!   in Redis does at its deadline;
//! - **already named** ([`GaveUp::Named`]): the release is on its way. It
//!   waits for the answer, at most [`LocalQueues::settle`] (the longest a
//!   release call takes), and takes whatever it brings, even after its
//!   deadline. If no answer comes by then, it closes its channel: a turn
//!   sent before that is still its own; after it, the releaser's (the task
//!   returns [`LockError::Timeout`] and never tries that token).
//!
//! # Every turn has its own end
//!
//! A turn counts until its own time ([`Turn`]'s entry in the name): while
//! its task waits in Redis, until that task's deadline; while it holds,
//! until its lease ends (moved by renewals); while a release hands it to a
//! waiting task, for as long as the release and the claim take. The tasks
//! here wait only while some turn still counts: once every turn has ended
//! (a holder that never released, a task whose runtime is no longer
//! driven), the oldest of them takes a turn of its own and goes to Redis,
//! and a newcomer does too. A turn that ended is not passed on while
//! another one counts, so the process goes back to one entry in Redis.
//!
//! A try without waiting, a Redlock, and the other kinds (read-write locks,
//! semaphores, sets) do not use it.

#[cfg(test)]
mod tests;

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use crate::backend::queue::{GIVE_BACK_FOR, Queued, RECHECK, give_back_until};
use crate::backend::shared::{Owner, Successor};
use crate::backend::{Backend, Released};
use crate::layout::{Keys, Notice};
use crate::sync::lock;
use crate::{LockError, io};

/// A successor is only named with at least this much of its wait left: a
/// shorter wait could end before the release reaches Redis.
const LEAST_WAIT: Duration = Duration::from_millis(2);

/// What the local queue asks of Redis on its own: giving back a token that
/// a release named, when its task left before claiming it.
pub(crate) trait GiveBack: Send + Sync + 'static {
    /// Gives back, in the background, whatever `token` holds or queued for
    /// the lock of `keys` (asked for a lease of `lease`): a release if it
    /// holds it (handing it on), or leaving the queue.
    fn give_back(self: Arc<Self>, keys: Keys, token: String, lease: Duration);
}

impl GiveBack for Backend {
    fn give_back(self: Arc<Self>, keys: Keys, token: String, lease: Duration) {
        let backend = self;
        let until = Instant::now() + lease.min(GIVE_BACK_FOR);
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

/// Where the local queues read the time (the explorer's clock in its
/// tests).
pub(crate) type Clock = Arc<dyn Fn() -> Instant + Send + Sync>;

/// The local queues of one Locker, by lock key.
pub(crate) struct LocalQueues {
    names: Mutex<HashMap<Arc<str>, Name>>,
    next_id: AtomicU64,
    /// The longest a release call takes to answer (connect, response and
    /// replicas' timeouts, twice: a release whose answer was lost is sent
    /// again): how long a named task whose acquire time ended waits for
    /// the release's answer, and how long a turn in hand-over counts.
    settle: Duration,
    clock: Clock,
}

/// One name's queue in this process.
#[derive(Default)]
struct Name {
    /// The turns of tasks of this process, each with the time until which
    /// it counts.
    turns: Vec<TurnEnd>,
    /// The tasks waiting here, oldest first.
    waiters: VecDeque<Entry>,
}

/// A turn's entry: until when it counts.
struct TurnEnd {
    id: u64,
    until: Instant,
}

impl Name {
    /// Whether a turn other than `but` still counts at `now`.
    fn counts(&self, now: Instant, but: Option<u64>) -> bool {
        self.turns
            .iter()
            .any(|t| Some(t.id) != but && t.until > now)
    }

    /// When the last turn ends (`None`: no turn).
    fn last_end(&self) -> Option<Instant> {
        self.turns.iter().map(|t| t.until).max()
    }

    fn set_until(&mut self, id: u64, until: Instant) {
        if let Some(turn) = self.turns.iter_mut().find(|t| t.id == id) {
            turn.until = until;
        }
    }

    /// The oldest waiter that still waits at `now`, taken out of the queue
    /// (the others that left are dropped).
    fn next_waiter(&mut self, now: Instant) -> Option<Entry> {
        self.waiters.retain(|e| !e.tx.is_closed());
        let i = self.waiters.iter().position(|e| e.deadline > now)?;
        self.waiters.remove(i)
    }

    fn is_empty(&self) -> bool {
        self.turns.is_empty() && self.waiters.is_empty()
    }
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

/// A task's turn at a name: while a turn counts, the other tasks of the
/// process wait here. Dropped, it ends; when no other turn counts, the
/// oldest task waiting here gets one and goes to Redis itself.
pub(crate) struct Turn {
    queues: Arc<LocalQueues>,
    key: Arc<str>,
    id: u64,
}

/// What [`LocalQueues::enter`] gives a task.
pub(crate) enum Entered {
    /// Its turn: go to Redis.
    Turn(Turn),
    /// Wait here.
    Wait(LocalWait),
}

/// A task's place in a local queue. Dropped, it leaves (and a turn sent to
/// it meanwhile is the sender's to give back).
pub(crate) struct LocalWait {
    queues: Arc<LocalQueues>,
    key: Arc<str>,
    id: u64,
    deadline: Instant,
    rx: oneshot::Receiver<Handed>,
}

/// How a wait here ended.
pub(crate) enum Waited {
    /// The turn came (perhaps after the deadline, from a release that had
    /// named the task before it).
    Handed(Handed),
    /// The acquire time ran out before any release named the task: its
    /// token is its own, for one last attempt.
    TimedOut,
    /// The acquire time ran out after a release named the task, and the
    /// release's answer never came: the token is the releaser's to give
    /// back, and must not be used again.
    Abandoned,
}

/// How a task whose acquire time ended left the queue (see the module
/// docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GaveUp {
    /// It was still queued: no release named it.
    Left,
    /// A release had named it (or a turn was sent to it): its answer comes.
    Named,
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
    redis: Arc<dyn GiveBack>,
    keys: Keys,
    token: String,
    lease: Duration,
}

impl Drop for Unclaimed {
    fn drop(&mut self) {
        if self.token.is_empty() {
            return;
        }
        let token = std::mem::take(&mut self.token);
        self.redis
            .clone()
            .give_back(self.keys.clone(), token, self.lease);
    }
}

impl LocalQueues {
    /// The queues of a Locker whose release calls answer within `settle`
    /// (see the field).
    pub(crate) fn new(settle: Duration) -> LocalQueues {
        LocalQueues::with_clock(settle, Arc::new(Instant::now))
    }

    /// The same, reading the time from `clock`.
    pub(crate) fn with_clock(settle: Duration, clock: Clock) -> LocalQueues {
        LocalQueues {
            names: Mutex::default(),
            next_id: AtomicU64::new(0),
            settle,
            clock,
        }
    }

    fn now(&self) -> Instant {
        (self.clock)()
    }

    fn new_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// `token` (of a task of this Locker asking for the lock of `keys` for
    /// `lease`, until `deadline`) takes a turn at the name when no turn of
    /// the process counts, or waits here.
    pub(crate) fn enter(
        self: &Arc<Self>,
        keys: &Keys,
        token: &str,
        lease: Duration,
        deadline: Instant,
    ) -> Entered {
        let now = self.now();
        let mut names = lock(&self.names);
        let key = match names.get_key_value(keys.lock.as_str()) {
            Some((key, _)) => key.clone(),
            None => Arc::from(keys.lock.as_str()),
        };
        let name = names.entry(key.clone()).or_default();
        // Uncontended (no turn counts, nobody here still waits): its own
        // turn at once, with no entry and no channel.
        if !name.counts(now, None)
            && !name
                .waiters
                .iter()
                .any(|e| !e.tx.is_closed() && e.deadline > now)
        {
            let id = self.new_id();
            name.turns.push(TurnEnd {
                id,
                until: deadline + self.settle,
            });
            drop(names);
            return Entered::Turn(self.turn(&key, id));
        }
        let id = self.new_id();
        let (tx, rx) = oneshot::channel();
        name.waiters.push_back(Entry {
            id,
            token: token.to_owned(),
            holder: keys.holder.clone(),
            lease,
            deadline,
            tx,
        });
        // No turn counts, and older tasks wait here: the oldest is served.
        let served = self.serve(name, now);
        drop(names);
        self.send_turn(&key, served);
        Entered::Wait(LocalWait {
            queues: self.clone(),
            key,
            id,
            deadline,
            rx,
        })
    }

    /// When no turn of `name` counts at `now`: the oldest task waiting
    /// there that still waits, taken out of the queue, with the id of a
    /// new turn that counts while it claims it.
    fn serve(&self, name: &mut Name, now: Instant) -> Option<(Entry, u64)> {
        if name.counts(now, None) {
            return None;
        }
        let entry = name.next_waiter(now)?;
        let id = self.new_id();
        name.turns.push(TurnEnd {
            id,
            until: now + self.settle,
        });
        Some((entry, id))
    }

    /// Sends a served task its turn: it asks Redis. A task that left
    /// meanwhile drops this turn, which passes on.
    fn send_turn(self: &Arc<Self>, key: &Arc<str>, served: Option<(Entry, u64)>) {
        if let Some((entry, id)) = served {
            let _ = entry.tx.send(Handed {
                unclaimed: None,
                turn: self.turn(key, id),
                how: How::Ask { queued: false },
            });
        }
    }

    /// The turn `id`, of a task that asks Redis until `deadline`.
    fn asking(self: &Arc<Self>, key: &Arc<str>, id: u64, deadline: Instant) -> Turn {
        let turn = self.turn(key, id);
        turn.asking(deadline);
        turn
    }

    fn turn(self: &Arc<Self>, key: &Arc<str>, id: u64) -> Turn {
        Turn {
            queues: self.clone(),
            key: key.clone(),
            id,
        }
    }

    /// The turn `id` at `key` ended: when no other turn counts, the oldest
    /// task waiting here gets one and asks Redis.
    fn leave(self: &Arc<Self>, key: &Arc<str>, id: u64) {
        let now = self.now();
        let served = {
            let mut names = lock(&self.names);
            let Some(name) = names.get_mut(key) else {
                return;
            };
            name.turns.retain(|t| t.id != id);
            let served = self.serve(name, now);
            if name.is_empty() {
                names.remove(key);
            }
            served
        };
        self.send_turn(key, served);
    }
}

impl Turn {
    fn until(&self, until: Instant) {
        let mut names = lock(&self.queues.names);
        if let Some(name) = names.get_mut(&self.key) {
            name.set_until(self.id, until);
        }
    }

    /// Its task was granted the lock for `lease` from `sent` (or a renewal
    /// sent at `sent` confirmed `lease` more): the turn counts until then.
    pub(crate) fn held(&self, sent: Instant, lease: Duration) {
        self.until(sent + lease);
    }

    /// Its task asks Redis until `deadline`: the turn counts until then
    /// (and a release call after it).
    pub(crate) fn asking(&self, deadline: Instant) {
        self.until(deadline.max(self.queues.now()) + self.queues.settle);
    }

    /// The oldest task waiting here that can still take the lock, to name
    /// in the release; the turn back when none waits, or when another turn
    /// of the process counts (this one ended, and the other serves them).
    pub(crate) fn pass(self, redis: &Arc<dyn GiveBack>, keys: &Keys) -> Result<Passing, Turn> {
        let now = self.queues.now();
        let settle = self.queues.settle;
        let entry = {
            let mut names = lock(&self.queues.names);
            names.get_mut(&self.key).and_then(|name| {
                if name.counts(now, Some(self.id)) {
                    return None;
                }
                let i = name.waiters.iter().position(|e| e.can_take(now))?;
                // The release is on its way: the turn is the successor's.
                name.set_until(self.id, now + settle);
                name.waiters.remove(i)
            })
        };
        match entry {
            Some(entry) => Ok(Passing {
                entry: Some(entry),
                turn: Some(self),
                redis: redis.clone(),
                keys: keys.clone(),
            }),
            None => Err(self),
        }
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        self.queues.leave(&self.key, self.id);
    }
}

/// A successor taken from the queue, whose release is on its way. Dropped
/// before [`deliver`](Self::deliver) (the release's future was dropped), it
/// tells the successor to ask Redis, as after a release whose answer was
/// lost.
pub(crate) struct Passing {
    entry: Option<Entry>,
    turn: Option<Turn>,
    redis: Arc<dyn GiveBack>,
    keys: Keys,
}

impl Passing {
    /// The successor to name in the release sent at `now`.
    pub(crate) fn successor(&self, now: Instant) -> Option<Successor<'_>> {
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
    pub(crate) fn deliver(
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
        let Some(turn) = self.turn.take() else {
            return;
        };
        // Until the successor claims it: a granted turn counts for its
        // lease, one that asks Redis while it gets there.
        match how {
            How::Granted { sent, .. } => turn.held(sent, entry.lease),
            How::Ask { .. } => turn.until(turn.queues.now() + turn.queues.settle),
        }
        let unclaimed = (how != How::Ask { queued: false }).then(|| {
            Box::new(Unclaimed {
                redis: self.redis.clone(),
                keys: self.keys.clone(),
                token: entry.token.clone(),
                lease: entry.lease,
            })
        });
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
    let redis: Arc<dyn GiveBack> = backend.clone();
    let (passing, turn) = match turn.map(|turn| turn.pass(&redis, owner.keys)) {
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
    /// of the queue stops waiting once no turn of the process counts any
    /// more, and takes a turn of its own.
    pub(crate) async fn wait(&mut self, gone: &mut io::CallerGone) -> Result<Waited, LockError> {
        loop {
            let check = self.deadline.min(self.check_at());
            tokio::select! {
                handed = &mut self.rx => return Ok(received(handed)),
                () = tokio::time::sleep_until(check.into()) => {}
                () = gone.wait() => return Err(crate::backend::queue::stopped_waiting()),
            }
            let now = self.queues.now();
            if now >= self.deadline {
                return match self.give_up() {
                    GaveUp::Left => Ok(Waited::TimedOut),
                    GaveUp::Named => self.last_call(gone).await,
                };
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

    /// Named by a release after its acquire time ended: waits for the
    /// release's answer, at most [`LocalQueues::settle`], then gives up for
    /// good ([`abandon`](Self::abandon)).
    async fn last_call(&mut self, gone: &mut io::CallerGone) -> Result<Waited, LockError> {
        let until = self.queues.now() + self.queues.settle;
        tokio::select! {
            handed = &mut self.rx => return Ok(received(handed)),
            () = tokio::time::sleep_until(until.into()) => {}
            () = gone.wait() => return Err(crate::backend::queue::stopped_waiting()),
        }
        Ok(match self.abandon() {
            Some(handed) => Waited::Handed(handed),
            None => Waited::Abandoned,
        })
    }

    /// Its acquire time ended: leaves the queue, and says whether a release
    /// had named it first (decided under the queue's lock, against
    /// [`Turn::pass`] and the turn given by a turn that ended).
    pub(crate) fn give_up(&mut self) -> GaveUp {
        let mut names = lock(&self.queues.names);
        let Some(name) = names.get_mut(&self.key) else {
            return GaveUp::Named;
        };
        let Some(i) = name.waiters.iter().position(|e| e.id == self.id) else {
            return GaveUp::Named;
        };
        name.waiters.remove(i);
        if name.is_empty() {
            names.remove(&self.key);
        }
        GaveUp::Left
    }

    /// Gives up for good after a release named it: the turn if it was sent
    /// before this, else nothing, and whatever the release sends from now
    /// on is the releaser's to give back.
    pub(crate) fn abandon(&mut self) -> Option<Handed> {
        self.rx.close();
        self.rx.try_recv().ok()
    }

    /// When to look whether every turn ended: a millisecond after the last
    /// one's end, when this task is the first here that still waits;
    /// within [`RECHECK`] otherwise.
    fn check_at(&self) -> Instant {
        let now = self.queues.now();
        let names = lock(&self.queues.names);
        let name = names.get(&self.key);
        let first = name.is_some_and(|n| self.first(n, now));
        match name.and_then(Name::last_end) {
            Some(until) if first => until + Duration::from_millis(1),
            None if first => now,
            _ => now + RECHECK,
        }
    }

    /// Whether it is the oldest task here that still waits.
    fn first(&self, name: &Name, now: Instant) -> bool {
        name.waiters
            .iter()
            .find(|e| !e.tx.is_closed() && e.deadline > now)
            .is_some_and(|e| e.id == self.id)
    }

    /// Whether it is the first here and no turn counts any more.
    fn may_take_turn(&self, name: &Name, now: Instant) -> bool {
        !name.counts(now, None) && self.first(name, now)
    }

    /// A turn of its own, leaving the queue, when this task is the first
    /// here and no turn of the process counts any more.
    pub(crate) fn overdue(&self, now: Instant) -> Option<Turn> {
        let mut names = lock(&self.queues.names);
        let name = names.get_mut(&self.key)?;
        if !self.may_take_turn(name, now) {
            return None;
        }
        name.waiters.retain(|e| e.id != self.id);
        let id = self.queues.new_id();
        name.turns.push(TurnEnd { id, until: now });
        drop(names);
        Some(self.queues.asking(&self.key, id, self.deadline))
    }

    /// Leaves the queue; when no turn counts, the next task here is served.
    fn leave(&self) {
        let now = self.queues.now();
        let served = {
            let mut names = lock(&self.queues.names);
            let Some(name) = names.get_mut(&self.key) else {
                return;
            };
            name.waiters.retain(|e| e.id != self.id);
            let served = self.queues.serve(name, now);
            if name.is_empty() {
                names.remove(&self.key);
            }
            served
        };
        self.queues.send_turn(&self.key, served);
    }
}

/// What the channel gave: the turn, or nothing ever (the queue was dropped
/// without a word: the token is not used again).
fn received(handed: Result<Handed, oneshot::error::RecvError>) -> Waited {
    match handed {
        Ok(handed) => Waited::Handed(handed),
        Err(_) => Waited::Abandoned,
    }
}

impl Drop for LocalWait {
    fn drop(&mut self) {
        self.leave();
    }
}
