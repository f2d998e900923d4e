//! The one waiting loop and the one give-back guard of every kind: a lock,
//! a side of a read-write lock, a semaphore's permit and a set of names, on
//! one server or a Cluster (whose locks queue their waiters in Redis); a
//! Redlock's votes are counted by `backend::redlock`, whose [`Retry`]
//! waits between its attempts.
//!
//! [`Retry`]: crate::backend::redlock::Retry
//!
//! # Waiting
//!
//! An attempt that finds the name held queues its owner token in Redis (in
//! the same script call) and sleeps until a release hands it the name and
//! says so on the name's channel (see `backend::wake::Wakeups`). The
//! message is the fast path, not the only one: the waiter also asks Redis
//! once a second ([`RECHECK`]), when the holder's lease would end, and at
//! its deadline. A waiter that was handed the name finds its own token on
//! it, which every acquire script counts as taken, so a hand-over whose
//! message was lost (a subscriber link that silently stopped passing
//! traffic) is noticed within about a second. That check is one short
//! script call per waiter per second, and only while waiting.
//!
//! # Outages
//!
//! Within its acquire time a waiter rides out a Redis restart, a dropped
//! connection or a server that answers too late: it tries again after a
//! pause that starts at a few milliseconds and doubles up to
//! [`RETRY_MAX`] (jittered, so that the waiters of many processes do not
//! come back in step), until its deadline; at the deadline it returns the
//! last connection error. A caller with an acquire time of zero asked for
//! one attempt and gets the error at once.
//!
//! An attempt whose answer was lost may still have run (queued the token,
//! or taken the name). So the next attempt uses a new owner token, and the
//! old one is given back first (its give-back frees whatever it got or
//! leaves the queue): a give-back that arrives late can only ever touch the
//! old token's hold, never the new attempt's. Tokens still owed a give-back
//! when the loop ends are given back in the background, retried while the
//! lease they might hold could still run; except when the loop fails with
//! [`LockError::Replicas`]: a grant the replicas did not acknowledge holds
//! on the master, so it is given back before the caller hears of the
//! failure (a process that exits right after the error leaves nothing
//! held), and only what could not be given back within a bounded time goes
//! to the background, the error saying until when it may stay held.
//!
//! # One owner token, one claimant
//!
//! A grant to a token (a hand-over to a named successor, an answer read
//! late, a give-back owed by a dropped future) is taken by exactly one path
//! or given back by exactly one path, never both:
//! - an attempt whose answer was lost is given back, and the next attempt
//!   uses a new token ([`Acquisition`]); so does each attempt of a Redlock
//!   (`backend::redlock::acquire`), whose late grants are given back with
//!   the token they were made for;
//! - a dropped acquisition gives back the tokens it still owes, in the
//!   background ([`Side::give_back_later`]), and nothing else uses them;
//! - an acquisition that fails with [`LockError::Replicas`] gives back what
//!   it owes itself before it returns; a token given back then is owed no
//!   more, and only those it could not give back go to the background;
//! - a task named by a release of its own process either claims what the
//!   release did or leaves it to the releaser to give back, decided once
//!   by a channel; one whose acquire time ends while the release is on its
//!   way waits for that release's answer (at most a release call) instead
//!   of trying its token again on its own (see [`crate::local`], which the
//!   explorer in `local::tests` checks in every order of those steps).
//!
//! The explorer in `tests` runs [`waiting`] itself, on a scripted Redis,
//! in every order of its requests, answers (lost, late), notices, deadlines
//! and drops, and checks this rule after every step.
//!
//! # One rule for every kind
//!
//! - A token is owed a give-back when it may be queued (an attempt found
//!   the name held) or may hold something: its request is on its way (the
//!   caller may stop waiting meanwhile), or ended in an error that does not
//!   show the request never left (see [`may_have_run`]).
//! - A release notice that names a waiter of one name is the grant itself
//!   for a lock (it carries the fencing token); a read-write lock, a
//!   semaphore and a set ask Redis once more, which says which key and
//!   which tokens. When grants wait for replicas, a lock asks once more
//!   too: the attempt restarts the lease it was handed (a write of its own,
//!   which `WAIT` then counts), so the body never starts on a grant that
//!   only the master holds.
//! - A notice that another waiter took the name ([`Wake::Rearm`]) moves the
//!   next check to the end of that holder's lease, later or earlier, for a
//!   contender of one name; a set waits on several names, so such a notice
//!   only ever moves its next check earlier.
//! - After Redis refused SUBSCRIBE, every kind checks every
//!   [`FALLBACK_PAUSE`] for [`RESUBSCRIBE_AFTER`] before it subscribes
//!   again.
//!
//! [`FALLBACK_PAUSE`]: crate::backend::shared::FALLBACK_PAUSE
//! [`RESUBSCRIBE_AFTER`]: acquisition::RESUBSCRIBE_AFTER

use std::borrow::Cow;
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

use crate::backend::lockset as set_side;
use crate::backend::queue::{GIVE_BACK_FOR, Queued, RECHECK, give_back_until};
use crate::backend::redlock::LockRequest;
use crate::backend::redlock::Redlock;
use crate::backend::redlock::set::SetOnNodes;
use crate::backend::rwlock as rw_side;
use crate::backend::semaphore as sem_side;
use crate::backend::shared::{Attempt, Owner};
use crate::backend::{Backend, Grant, Waiter};
use crate::layout::{Keys, KindKeys, MAX_EXPIRE, Permits, RwKeys};
use crate::lease::{Taken, Terms};
use crate::local::{Entered, How, Waited};
use crate::{LockError, io};

mod acquisition;
#[cfg(test)]
mod tests;

pub(crate) use acquisition::Won;
use acquisition::{Acquisition, Side, Woke, waiting};

/// How long a set waits before it joins the FIFO queue of a busy name.
const JOIN_QUEUE_AFTER: Duration = RECHECK;

/// What a caller waits for: the closed list of the kinds.
#[derive(Debug, Clone)]
pub(crate) enum Contender<'a> {
    /// One lock.
    Lock(Cow<'a, Keys>),
    /// One side of a read-write lock.
    Rw(Cow<'a, Keys>, Cow<'a, RwKeys>),
    /// A permit of a semaphore.
    Permit(Cow<'a, Keys>, Cow<'a, Permits>),
    /// Every name of a set, or none: the keys in their fixed order, and the
    /// indices of each group taken in one script call (one per Cluster
    /// slot).
    Set(Cow<'a, [Keys]>, Vec<Vec<usize>>),
}

/// What the loop remembers between the attempts of one acquisition.
#[derive(Default)]
struct Progress {
    /// A semaphore's last answer said to look at every permit.
    every: bool,
    /// Since when a set's attempts found a name held.
    busy_since: Option<Instant>,
}

impl Contender<'_> {
    /// The keys of the names waited for.
    fn keys(&self) -> &[Keys] {
        match self {
            Contender::Lock(keys) | Contender::Rw(keys, _) | Contender::Permit(keys, _) => {
                std::slice::from_ref(keys.as_ref())
            }
            Contender::Set(keys, _) => keys,
        }
    }

    /// One attempt for `token`; `queued`: an earlier attempt may have
    /// queued it. Each kind's backend file sends it and reads its answer.
    async fn attempt(
        &self,
        on: Queued<'_>,
        (name, token, expire, wait): (&str, &str, Duration, Duration),
        queued: bool,
        progress: &mut Progress,
    ) -> Result<Attempt, LockError> {
        let request = (token, expire, wait, queued);
        match self {
            Contender::Lock(keys) => {
                on.attempt(Owner { keys, token }, expire, (wait, queued))
                    .await
            }
            Contender::Rw(keys, rw) => rw_side::attempt(on, (keys, rw), name, request).await,
            Contender::Permit(keys, permits) => {
                // A semaphore that answered "look at every permit" is asked
                // again at once, looking at every permit.
                let every = std::mem::take(&mut progress.every);
                let attempt = sem_side::attempt(on, (keys, permits), name, request, every).await?;
                progress.every = matches!(attempt, Attempt::Again);
                Ok(attempt)
            }
            Contender::Set(keys, groups) => {
                let sent = Instant::now();
                // Waited long enough: join the FIFO queue of a busy name.
                let queue = progress
                    .busy_since
                    .is_some_and(|since| since.elapsed() >= JOIN_QUEUE_AFTER);
                let groups = by_group(keys, groups);
                let attempt = set_side::attempt(on, &groups, token, (expire, wait), queue).await?;
                if let Attempt::Busy(_) = attempt {
                    progress.busy_since.get_or_insert(sent);
                }
                Ok(attempt)
            }
        }
    }

    /// Gives back whatever `token` holds or queued: releases what it owns
    /// (handing it to the next waiter), or leaves the queue.
    async fn give_back(&self, on: Queued<'_>, token: &str) -> Result<(), LockError> {
        match self {
            Contender::Lock(keys) => on.give_back(Owner { keys, token }).await,
            Contender::Rw(keys, rw) => rw_side::give_back(on, (keys, rw), token).await,
            Contender::Permit(keys, permits) => {
                sem_side::give_back(on, (keys, permits), token).await
            }
            Contender::Set(keys, groups) => {
                set_side::give_back(on, &by_group(keys, groups), token).await
            }
        }
    }

    /// The same contender, owning its keys (for a give-back in the
    /// background).
    fn into_owned(self) -> Contender<'static> {
        let own = |keys: Cow<'_, Keys>| Cow::Owned(keys.into_owned());
        match self {
            Contender::Lock(keys) => Contender::Lock(own(keys)),
            Contender::Rw(keys, rw) => Contender::Rw(own(keys), Cow::Owned(rw.into_owned())),
            Contender::Permit(keys, permits) => {
                Contender::Permit(own(keys), Cow::Owned(permits.into_owned()))
            }
            Contender::Set(keys, groups) => Contender::Set(Cow::Owned(keys.into_owned()), groups),
        }
    }
}

/// The keys of each group.
fn by_group<'k>(keys: &'k [Keys], groups: &[Vec<usize>]) -> Vec<Vec<&'k Keys>> {
    groups
        .iter()
        .map(|members| members.iter().map(|&i| &keys[i]).collect())
        .collect()
}

/// One acquisition: who asks, for how long.
pub(crate) struct Request<'a> {
    /// How Redis is reached (kept for give-backs that outlive the loop).
    pub(crate) backend: &'a Arc<Backend>,
    /// The name (the names joined, for a set), for errors.
    pub(crate) name: &'a str,
    /// The owner token of the first attempt.
    pub(crate) token: String,
    /// The lease.
    pub(crate) expire: Duration,
    /// How long to wait while the name is held.
    pub(crate) wait: Duration,
    /// A release may have queued `token` already (or handed it the name).
    pub(crate) queued: bool,
}

impl<'a> Request<'a> {
    /// The request of `terms`, waiting up to `wait`.
    pub(crate) fn of(terms: &'a Terms, wait: Duration) -> Request<'a> {
        Request {
            backend: &terms.locker.backend,
            name: &terms.name,
            token: terms.token.clone(),
            expire: terms.expire,
            wait,
            queued: false,
        }
    }
}

/// Takes the lock of `terms` (one name, any kind), waiting up to `wait`:
/// the grant, with the key it holds (a reader's own key, the permit taken).
pub(crate) async fn take(
    terms: &Terms,
    wait: Duration,
    gone: io::CallerGone,
) -> Result<Taken, LockError> {
    match &terms.keys.kind {
        KindKeys::Lock => take_lock(terms, wait, gone).await,
        KindKeys::Rw(rw) => {
            let contender = Contender::Rw(Cow::Borrowed(&terms.keys), Cow::Borrowed(rw));
            let won = acquire(contender, Request::of(terms, wait), gone).await?;
            let mut keys = terms.keys.clone();
            keys.lock = rw.holder_key(&won.grant.token);
            Ok(Taken {
                keys: Some(keys),
                ..Taken::of(won.grant)
            })
        }
        KindKeys::Permit(count) => {
            // The permits' keys, made again from the name (the terms' keys
            // name the first permit).
            let (prefix, retention) = (&terms.locker.prefix, terms.keys.fence_retention);
            let mut keys = Keys::new(prefix, &terms.name, retention);
            keys.holder = terms.keys.holder.clone();
            let permits = Permits::make(&mut keys, *count);
            let contender = Contender::Permit(Cow::Borrowed(&keys), Cow::Borrowed(&permits));
            let won = acquire(contender, Request::of(terms, wait), gone).await?;
            if let Some(slot) = permits.slot(won.slot) {
                keys.lock = slot.to_owned();
            }
            Ok(Taken {
                keys: Some(keys),
                ..Taken::of(won.grant)
            })
        }
    }
}

/// Takes the lock of `terms`, waiting up to `wait`. On one server or a
/// Cluster, a task of this Locker whose lock another task of it holds or
/// waits for waits in this process (see [`crate::local`]) until the turn
/// comes to it; then the lease keeps the turn, and its release passes it on.
async fn take_lock(
    terms: &Terms,
    wait: Duration,
    mut gone: io::CallerGone,
) -> Result<Taken, LockError> {
    let contender = Contender::Lock(Cow::Borrowed(&terms.keys));
    let queues = Queued::of(&terms.locker.backend).is_some() && !wait.is_zero();
    if !queues {
        let won = acquire(contender, Request::of(terms, wait), gone).await?;
        return Ok(Taken::of(won.grant));
    }
    let now = Instant::now();
    let deadline = now.checked_add(wait).unwrap_or(now + MAX_EXPIRE);
    let local = terms.locker.local.clone();
    let mut request = Request::of(terms, wait);
    let (turn, how) = match local.enter(&terms.keys, &request.token, terms.expire, deadline) {
        Entered::Turn(turn) => (Some(turn), How::Ask { queued: false }),
        Entered::Wait(mut here) => match here.wait(&mut gone).await? {
            // Claimed: what the token got is this acquisition's to use or
            // to give back (see `crate::local`, one owner token, one
            // claimant).
            Waited::Handed(handed) => {
                let (turn, how) = handed.claim();
                if let How::Ask { .. } = how {
                    turn.asking(deadline);
                }
                (Some(turn), how)
            }
            // No release named the token: one last attempt with it, without
            // a turn, as a waiter in Redis makes at its deadline: `Timeout`
            // while the lock is held, or why Redis could not be asked.
            Waited::TimedOut => (None, How::Ask { queued: false }),
            // A release named the token, and its answer did not come in
            // time: the releaser gives the token back; never try it again.
            Waited::Abandoned => {
                return Err(LockError::Timeout {
                    name: terms.name.clone(),
                    waited: wait,
                });
            }
        },
    };
    let grant = match how {
        How::Granted {
            fencing_token,
            sent,
        } => Grant {
            fencing_token,
            sent,
            handed: true,
            token: std::mem::take(&mut request.token),
        },
        How::Ask { queued } => {
            request.queued = queued;
            request.wait = match turn {
                Some(_) => deadline.saturating_duration_since(Instant::now()),
                None => Duration::ZERO,
            };
            match acquire(contender, request, gone).await {
                Ok(won) => won.grant,
                // The acquire time the caller gave, not what was left of it.
                Err(LockError::Timeout { name, .. }) => {
                    return Err(LockError::Timeout { name, waited: wait });
                }
                Err(e) => return Err(e),
            }
        }
    };
    if let Some(turn) = &turn {
        turn.held(grant.sent, terms.expire);
    }
    Ok(Taken {
        turn,
        ..Taken::of(grant)
    })
}

/// Takes what `contender` waits for, with the loop of the Locker's
/// deployment: on the caller's runtime, or on the I/O thread.
///
/// Each attempt is one script call (one per group of a set on a Cluster).
/// When the name is held, the attempt also queues this request in Redis,
/// and the loop sleeps until the first of:
/// - a release hands it the name (a message on the name's channel: see
///   `backend::wake::Wakeups`);
/// - the channel is subscribed (the first time it waits, or after the
///   subscriber connection was replaced): one more attempt, since a
///   release may have come before;
/// - [`RECHECK`] has passed since the last attempt, in case a message was
///   lost;
/// - the holder's lease would end (a crashed holder's lock is taken a
///   millisecond after it expires);
/// - its acquire timeout ends: then one last attempt, which also leaves the
///   queue, so the wait ends within a round trip of the timeout;
/// - the caller is gone (this future dropped, or `gone` on the I/O thread):
///   it leaves the queue, passing the name on if it was just handed it.
///
/// Connection errors are retried until the deadline with a new token each
/// time (see the module docs).
pub(crate) async fn acquire(
    contender: Contender<'_>,
    request: Request<'_>,
    gone: io::CallerGone,
) -> Result<Won, LockError> {
    let on = match &**request.backend {
        Backend::Single(node) => Queued::Single(node),
        Backend::Cluster(nodes) => Queued::Cluster(nodes),
        Backend::Redlock(nodes) => return on_redlock(nodes, contender, request, gone).await,
    };
    let Request {
        backend,
        name,
        token,
        expire,
        wait,
        queued,
    } = request;
    let acquisition = Acquisition::new(name, token, (Instant::now(), wait), queued);
    let mut side = OnRedis {
        on,
        backend,
        contender,
        name,
        expire,
        progress: Progress::default(),
        waiters: Vec::new(),
        gone,
    };
    waiting(&mut side, acquisition).await
}

/// A Redlock counts votes instead of queueing: its own loop takes a lock
/// (`backend::redlock`) or a set (`backend::redlock::set`); the set's
/// abandoned attempts are given back by this module's guard.
async fn on_redlock(
    nodes: &Arc<Redlock>,
    contender: Contender<'_>,
    request: Request<'_>,
    gone: io::CallerGone,
) -> Result<Won, LockError> {
    let (name, expire, wait) = (request.name, request.expire, request.wait);
    match contender {
        Contender::Lock(keys) => {
            let lock = LockRequest {
                redlock: nodes,
                name,
                keys: &keys,
                token: request.token,
                expire,
                wait,
            };
            let grant = crate::backend::redlock::acquire(nodes, lock, gone).await?;
            Ok(Won::of(grant, 0, Vec::new()))
        }
        Contender::Set(..) => {
            let mut stale = Stale {
                backend: request.backend,
                contender,
                expire,
                tokens: Vec::new(),
            };
            let Stale {
                contender: Contender::Set(keys, _),
                tokens: stale,
                ..
            } = &mut stale
            else {
                unreachable!("matched as a set just above");
            };
            let set = SetOnNodes {
                keys,
                name,
                token: request.token,
                expire,
                wait,
            };
            let grant = crate::backend::redlock::set::acquire(nodes, set, stale, gone).await?;
            let first = grant.fencing_tokens.first().copied().unwrap_or(0);
            let one = Grant {
                fencing_token: first,
                sent: grant.sent,
                handed: false,
                token: grant.token,
            };
            Ok(Won::of(one, 0, grant.fencing_tokens))
        }
        Contender::Rw(..) | Contender::Permit(..) => Err(LockError::invalid(
            "lock kind",
            "read-write locks and semaphores need one server or a Redis Cluster, not a Redlock \
             Locker",
        )),
    }
}

/// The Locker's deployment, waiting on the caller's runtime: the [`Side`]
/// of the real acquisitions.
struct OnRedis<'a> {
    on: Queued<'a>,
    backend: &'a Arc<Backend>,
    contender: Contender<'a>,
    name: &'a str,
    expire: Duration,
    progress: Progress,
    /// Registered for release notices, one per name (none: not listening).
    waiters: Vec<Waiter>,
    gone: io::CallerGone,
}

impl Side for OnRedis<'_> {
    fn now(&self) -> Instant {
        Instant::now()
    }

    async fn attempt(
        &mut self,
        token: &str,
        left: Duration,
        queued: bool,
    ) -> Result<Attempt, LockError> {
        let attempt = (self.name, token, self.expire, left);
        let progress = &mut self.progress;
        self.contender
            .attempt(self.on, attempt, queued, progress)
            .await
    }

    async fn give_back(&mut self, token: &str) -> Result<(), LockError> {
        self.contender.give_back(self.on, token).await
    }

    fn listen(&mut self, token: &str, warm: bool) -> bool {
        let (wakeups, keys) = (self.on.wakeups(), self.contender.keys());
        self.waiters = if warm {
            keys.iter()
                .map(|k| wakeups.register_if_subscribed(&k.channel, token))
                .collect::<Option<_>>()
                .unwrap_or_default()
        } else {
            keys.iter()
                .map(|k| wakeups.watch(&k.channel, token))
                .collect()
        };
        !self.waiters.is_empty()
    }

    fn stop_listening(&mut self) {
        self.waiters.clear();
    }

    async fn sleep(&mut self, until: Instant, notices: bool) -> Woke {
        let waiters = &mut self.waiters;
        let woken = std::future::poll_fn(|cx| {
            for waiter in waiters.iter_mut().filter(|_| notices) {
                if let Poll::Ready(wake) = waiter.poll_wait(cx) {
                    return Poll::Ready(wake);
                }
            }
            Poll::Pending
        });
        tokio::select! {
            wake = woken => Woke::Notice(wake),
            () = tokio::time::sleep_until(until.into()) => Woke::Time,
            () = self.gone.wait() => Woke::Gone,
        }
    }

    fn give_back_later(&mut self, tokens: Vec<String>) {
        give_back_later(self.backend, &self.contender, self.expire, tokens);
    }

    fn notice_grants(&self) -> bool {
        matches!(self.contender, Contender::Lock(_)) && !self.on.waits_for_replicas()
    }

    fn one_name(&self) -> bool {
        !matches!(self.contender, Contender::Set(..))
    }

    fn lease(&self) -> Duration {
        self.expire
    }
}

/// Gives back `tokens` of `contender` in the background (a cancelled waiter
/// leaves the queue, passing the name on if it was just handed it),
/// retried while the lease they might hold could still run.
fn give_back_later(
    backend: &Arc<Backend>,
    contender: &Contender<'_>,
    expire: Duration,
    tokens: Vec<String>,
) {
    let backend = backend.clone();
    let contender = contender.clone().into_owned();
    let until = Instant::now() + expire.min(GIVE_BACK_FOR);
    let giving = io::spawn(async move {
        let Some(on) = Queued::of(&backend) else {
            // A set on a Redlock: given back on every node.
            if let (Backend::Redlock(nodes), Contender::Set(keys, _)) = (&*backend, &contender) {
                for token in tokens {
                    nodes
                        .give_back_set(keys, &token, expire, &nodes.every_node())
                        .await;
                }
            }
            return;
        };
        for token in tokens {
            give_back_until(until, || contender.give_back(on, &token)).await;
        }
    });
    if let Err(e) = giving {
        tracing::debug!(target: "lockattr", error = %e, "cannot leave a queue; the entry expires with the wait");
    }
}

/// The tokens of a Redlock set's abandoned attempts: dropped with any left,
/// it gives them back in the background.
struct Stale<'a> {
    backend: &'a Arc<Backend>,
    contender: Contender<'a>,
    expire: Duration,
    tokens: Vec<String>,
}

impl Drop for Stale<'_> {
    fn drop(&mut self) {
        let tokens = std::mem::take(&mut self.tokens);
        if !tokens.is_empty() {
            give_back_later(self.backend, &self.contender, self.expire, tokens);
        }
    }
}
