//! One acquisition of a deployment that queues its waiters in Redis, as a
//! value ([`Acquisition`]: its attempts, the tokens it owes a give-back,
//! its deadline and its next check), and the one loop that drives it
//! ([`waiting`]) through a small trait ([`Side`]).
//!
//! The value decides; the side does the I/O. The real side is the Locker's
//! deployment with the wake-ups of the caller's runtime (`super::OnRedis`);
//! the explorer's side (`super::tests`) is a scripted Redis whose answers
//! come, or are lost, in every order it chooses, on a clock of its own. So
//! the loop the explorer checks is the loop that runs.

use std::time::{Duration, Instant};

use crate::LockError;
use crate::backend::queue::{RECHECK, may_have_run, retryable, stopped_waiting};
use crate::backend::shared::{
    Attempt, Backoff, FALLBACK_PAUSE, RETRY_MAX, next_check, rearmed, soon_after,
};
use crate::backend::{Grant, Wake};
use crate::layout::{MAX_EXPIRE, new_token};

/// After Redis refused SUBSCRIBE, how long a waiter checks the name every
/// [`FALLBACK_PAUSE`] before it tries to subscribe again.
pub(crate) const RESUBSCRIBE_AFTER: Duration = Duration::from_secs(1);

/// An acquisition that succeeded.
#[derive(Debug)]
pub(crate) struct Won {
    /// The grant (of a set: with its first name's fencing token).
    pub(crate) grant: Grant,
    /// The index of the permit taken (0 for the other kinds).
    pub(crate) slot: usize,
    /// Each name of a set's fencing token, in the order of its keys (empty
    /// for one name).
    pub(crate) fencing_tokens: Vec<u64>,
}

impl Won {
    pub(crate) fn of(grant: Grant, slot: usize, fencing_tokens: Vec<u64>) -> Won {
        Won {
            grant,
            slot,
            fencing_tokens,
        }
    }
}

/// What ended a sleep of the loop.
#[derive(Debug)]
pub(crate) enum Woke {
    /// A notice on a name's channel.
    Notice(Wake),
    /// The time asked for came.
    Time,
    /// The caller is gone (the future is dropped, or the blocked thread's
    /// caller stopped waiting).
    Gone,
}

/// What the loop needs from a deployment that queues its waiters in Redis.
/// The backends implement it (`super::OnRedis`), and so does the explorer's
/// scripted Redis.
pub(crate) trait Side {
    /// The time now.
    fn now(&self) -> Instant;

    /// One attempt for `token`, waiting up to `left` in Redis's queue (zero:
    /// leave it); `queued`: an earlier attempt may have queued the token.
    async fn attempt(
        &mut self,
        token: &str,
        left: Duration,
        queued: bool,
    ) -> Result<Attempt, LockError>;

    /// Gives back whatever `token` holds or queued: releases what it owns
    /// (handing it to the next waiter), or leaves the queue.
    async fn give_back(&mut self, token: &str) -> Result<(), LockError>;

    /// Listens for release notices to `token` on every name; with `warm`,
    /// only when every name's channel is subscribed already (no pub/sub work
    /// for an attempt that may not wait). Whether it listens.
    fn listen(&mut self, token: &str, warm: bool) -> bool;

    /// Stops listening (a subscription broke, or the token changes).
    fn stop_listening(&mut self);

    /// Sleeps until `until`, a notice (when `notices`), or the caller is
    /// gone, whichever comes first.
    async fn sleep(&mut self, until: Instant, notices: bool) -> Woke;

    /// Gives back `tokens` in the background: the acquisition ended (or was
    /// dropped) owing them a give-back.
    fn give_back_later(&mut self, tokens: Vec<String>);

    /// Whether a release notice is the grant itself: a lock whose grants do
    /// not wait for replicas. Otherwise one more attempt says what was
    /// handed (see the module docs of `crate::wait`).
    fn notice_grants(&self) -> bool;

    /// Whether one name is waited for (not a set).
    fn one_name(&self) -> bool;

    /// The lease an attempt asks for: how long a grant it made may hold.
    fn lease(&self) -> Duration;

    /// Sees the acquisition before each await of its loop: nothing for the
    /// real sides; the explorer fingerprints the state there.
    fn before_await(&mut self, _acquisition: &Acquisition<'_>) {}
}

/// The state of one acquisition between two steps of its loop.
pub(crate) struct Acquisition<'a> {
    /// The name (the names joined, for a set), for errors.
    name: &'a str,
    /// The acquire time the caller gave.
    wait: Duration,
    /// When the acquire time ends.
    deadline: Instant,
    /// The token of the current attempt (empty once it is the caller's).
    current: String,
    /// Tokens of attempts whose answer was lost, given back (newest first)
    /// before the next attempt.
    stale: Vec<String>,
    /// An attempt may have queued `current`.
    queued: bool,
    /// `current`'s request is on its way, or ended in an error after which
    /// it may hold something.
    sending: bool,
    /// A hand-over was heard: the next answer is the grant.
    handed: bool,
    /// Release notices to `current` reach this acquisition.
    listening: bool,
    /// Redis refused SUBSCRIBE: check often until then.
    polling_until: Option<Instant>,
    /// Pauses after connection errors.
    retry: Backoff,
    /// When the last attempt was sent.
    sent: Instant,
    /// The latest next check of this wait: the deadline, or a second after
    /// the last attempt.
    recheck: Instant,
    /// When the loop asks Redis again.
    wake_at: Instant,
    /// The last grant of this acquisition that too few replicas
    /// acknowledged: what its acquire time ending with the name held is
    /// reported as (see [`timeout`](Self::timeout)).
    unacked: Option<LockError>,
}

/// What the loop does after an answer or a wake-up.
#[derive(Debug)]
pub(crate) enum Next {
    /// Asks Redis again at once.
    Ask,
    /// Sleeps until the time given (or a notice), then decides again.
    Sleep(Instant),
    /// Pauses (a connection error) until the time given, then asks again.
    Pause(Instant),
    /// Done: the grant.
    Won(Won),
}

impl<'a> Acquisition<'a> {
    /// An acquisition by `token` of `name`, from `now`, waiting up to
    /// `wait`; `queued`: a release may have queued `token` already (or
    /// handed it the name).
    pub(crate) fn new(
        name: &'a str,
        token: String,
        (now, wait): (Instant, Duration),
        queued: bool,
    ) -> Acquisition<'a> {
        let deadline = now.checked_add(wait).unwrap_or(now + MAX_EXPIRE);
        Acquisition {
            name,
            wait,
            deadline,
            current: token,
            stale: Vec::new(),
            queued,
            sending: false,
            handed: false,
            listening: false,
            polling_until: None,
            retry: Backoff::new(RETRY_MAX),
            sent: now,
            recheck: deadline,
            wake_at: deadline,
            unacked: None,
        }
    }

    /// The next stale token to give back before the next attempt.
    pub(crate) fn stale(&self) -> Option<&str> {
        self.stale.last().map(String::as_str)
    }

    /// The give-back of [`Acquisition::stale`] ran (or failed for good:
    /// the lease frees what it holds), or failed for lack of Redis.
    pub(crate) fn gave_back(
        &mut self,
        now: Instant,
        done: Result<(), LockError>,
    ) -> Result<Next, LockError> {
        match done {
            Ok(()) => {}
            Err(e) if retryable(&e) => return self.pause(now, e),
            Err(e) => {
                tracing::debug!(target: "lockattr", error = %e, "cannot give back an abandoned attempt");
            }
        }
        self.stale.pop();
        Ok(Next::Ask)
    }

    /// The current attempt's token, how long it may wait in Redis's queue,
    /// and whether an earlier attempt may have queued it: the attempt is
    /// on its way from now.
    pub(crate) fn send(&mut self, now: Instant) -> (&str, Duration, bool) {
        self.sent = now;
        self.sending = true;
        let left = self.deadline.saturating_duration_since(now);
        (&self.current, left, self.queued)
    }

    /// The answer of the attempt sent last, read at `now`.
    pub(crate) fn answered(
        &mut self,
        now: Instant,
        answer: Result<Attempt, LockError>,
    ) -> Result<Next, LockError> {
        self.sending = false;
        let first_end = match answer {
            Ok(Attempt::Taken {
                fencing_token,
                slot,
                of_set,
            }) => {
                return Ok(Next::Won(self.won(
                    fencing_token,
                    self.handed,
                    (slot, of_set),
                )));
            }
            Ok(Attempt::Busy(first_end)) => first_end,
            Ok(Attempt::Again) => return Ok(Next::Ask),
            // A token queued before is given back with what is owed.
            Ok(Attempt::Refused(e)) => return Err(e),
            Err(e) if retryable(&e) => {
                self.unacked = replicas_error(&e).or(self.unacked.take());
                // The request may have run: the token may be queued or even
                // hold the name. It is given back, and the next attempt
                // uses a new token, so that a late give-back can never
                // free the hold of a later attempt.
                let old = std::mem::replace(&mut self.current, new_token()?);
                if std::mem::take(&mut self.queued) || may_have_run(&e) {
                    self.stale.push(old);
                }
                self.listening = false;
                self.handed = false;
                return self.pause(now, e);
            }
            Err(e) => {
                self.sending = may_have_run(&e);
                return Err(e);
            }
        };
        self.retry.reset();
        self.handed = false;
        if self.sent >= self.deadline {
            // That attempt left the queue.
            self.queued = false;
            return Err(self.timeout());
        }
        self.queued = true;
        if self.polling_until.is_some_and(|until| now >= until) {
            self.polling_until = None;
        }
        // When to ask Redis again: at the deadline, when the holder's lease
        // ends, within a second in any case, and often while no release
        // notice can reach us.
        self.recheck = self.deadline.min(now + RECHECK);
        self.wake_at = next_check(now, self.recheck, first_end, self.polling_until.is_some());
        Ok(Next::Sleep(self.wake_at))
    }

    /// Whether to start listening for notices before the next sleep: the
    /// token is queued, and no notice reaches it yet (nor is Redis refusing
    /// SUBSCRIBE).
    pub(crate) fn should_listen(&self) -> bool {
        !self.listening && self.polling_until.is_none()
    }

    /// Listening for notices to the current token from now on (or not).
    pub(crate) fn listening(&mut self, listening: bool) {
        self.listening = listening;
    }

    /// The token whose notices to listen for.
    pub(crate) fn token(&self) -> &str {
        &self.current
    }

    /// Whether notices reach this acquisition.
    pub(crate) fn hears(&self) -> bool {
        self.listening
    }

    /// A sleep ended at `now` with `woke`; `side_says`: whether a notice is
    /// the grant itself, and whether one name is waited for.
    pub(crate) fn woke(
        &mut self,
        now: Instant,
        woke: Woke,
        (notice_grants, one_name): (bool, bool),
    ) -> Result<Next, LockError> {
        let wake = match woke {
            Woke::Time => return Ok(Next::Ask),
            Woke::Gone => return Err(stopped_waiting()),
            Woke::Notice(wake) => wake,
        };
        Ok(match wake {
            // The release that handed a lock over ran after the attempt was
            // sent: its notice carries the grant (unless grants wait for
            // replicas: the releaser's write may not have reached them, and
            // the next attempt confirms it with a write of this waiter's
            // and WAIT).
            Wake::Handed { fencing_token } if notice_grants => {
                Next::Won(self.won(fencing_token, true, (0, Vec::new())))
            }
            // Ours; asking once more says which key and tokens. The waiter
            // is no longer registered.
            Wake::Handed { .. } => {
                self.listening = false;
                self.handed = true;
                Next::Ask
            }
            // From now on no notice is missed; one may have come before:
            // ask again. Or a release left the name free and this waiter is
            // the oldest: take it, unless a newcomer was quicker.
            Wake::Subscribed | Wake::TryNow => Next::Ask,
            Wake::Recheck => {
                self.listening = false;
                Next::Ask
            }
            Wake::Refused => {
                self.listening = false;
                self.polling_until = Some(now + RESUBSCRIBE_AFTER);
                self.wake_at = self.wake_at.min(soon_after(now, FALLBACK_PAUSE));
                Next::Sleep(self.wake_at)
            }
            // Another waiter got the name: a crash of that holder is what
            // to watch for now (see the module docs of `crate::wait`).
            Wake::Rearm { lease } => {
                let polling = self.polling_until.is_some();
                self.wake_at = rearmed(now, self.wake_at, (self.recheck, lease), one_name, polling);
                Next::Sleep(self.wake_at)
            }
        })
    }

    /// After a connection error: a pause, cut at the deadline; the error
    /// itself once the deadline has passed.
    fn pause(&mut self, now: Instant, error: LockError) -> Result<Next, LockError> {
        if now >= self.deadline {
            return Err(error);
        }
        tracing::debug!(target: "lockattr", error = %error, "a waiter cannot reach Redis; trying again");
        Ok(Next::Pause(self.deadline.min(now + self.retry.next())))
    }

    /// The grant of the current token.
    fn won(&mut self, fencing_token: u64, handed: bool, (slot, of_set): (usize, Vec<u64>)) -> Won {
        self.queued = false;
        let grant = Grant {
            fencing_token,
            sent: self.sent,
            handed,
            token: std::mem::take(&mut self.current),
        };
        Won::of(grant, slot, of_set)
    }

    /// The error of an acquire time that ended with the name held: the
    /// replicas' error when one of its grants was not acknowledged (the
    /// name is then held by another contender's grant that the replicas
    /// do not acknowledge either, or one they did since; either way this
    /// caller was refused for want of replicas, not because another owner
    /// held the name all along).
    fn timeout(&mut self) -> LockError {
        if let Some(unacked) = self.unacked.take() {
            return unacked;
        }
        LockError::Timeout {
            name: self.name.to_owned(),
            waited: self.wait,
        }
    }

    /// Replays exactly: pauses without jitter (the explorer's).
    #[cfg(test)]
    pub(crate) fn without_jitter(mut self) -> Acquisition<'a> {
        self.retry = Backoff::new(RETRY_MAX).without_jitter();
        self
    }

    /// What decides the next steps, with each time as an offset from
    /// `start` and each token through `name` (the explorer's fingerprint).
    #[cfg(test)]
    pub(crate) fn fingerprint(&self, start: Instant, name: &mut impl FnMut(&str) -> usize) -> u64 {
        use std::hash::{Hash, Hasher};
        let at = |t: Instant| t.saturating_duration_since(start);
        let stale: Vec<usize> = self.stale.iter().map(|t| name(t)).collect();
        let mut h = std::hash::DefaultHasher::new();
        (
            (name(&self.current), stale, at(self.deadline), at(self.sent)),
            (self.queued, self.sending, self.handed, self.listening),
            (self.polling_until.map(at), self.retry.step()),
            self.unacked.is_some(),
            (at(self.recheck), at(self.wake_at)),
        )
            .hash(&mut h);
        h.finish()
    }

    /// Every token still owed a give-back becomes stale: given back now,
    /// one by one, through [`stale`](Self::stale) (see
    /// [`Running::give_back_now`]).
    fn owe_now(&mut self) {
        self.stale = self.owed();
    }

    /// The newest stale token was given back: it is owed nothing more.
    fn forget_stale(&mut self) {
        self.stale.pop();
    }

    /// The tokens this acquisition still owes a give-back (it ends, or is
    /// dropped): the stale ones, and the current one when it may be queued
    /// or its request may have run.
    pub(crate) fn owed(&mut self) -> Vec<String> {
        let mut tokens = std::mem::take(&mut self.stale);
        if (self.queued || self.sending) && !self.current.is_empty() {
            tokens.push(std::mem::take(&mut self.current));
        }
        tokens
    }
}

/// Drives `acquisition` through `side` until it wins or fails: the one
/// loop of the deployments that queue their waiters in Redis (see
/// `crate::wait`, "Waiting"). Dropped or ended with tokens still owed a
/// give-back, it hands them to [`Side::give_back_later`].
pub(crate) async fn waiting<S: Side>(
    side: &mut S,
    acquisition: Acquisition<'_>,
) -> Result<Won, LockError> {
    Running { side, acquisition }.run().await
}

/// An acquisition on its side; dropped, it gives back what it owes.
struct Running<'s, 'a, S: Side> {
    side: &'s mut S,
    acquisition: Acquisition<'a>,
}

/// How long an acquisition that failed with [`LockError::Replicas`] keeps
/// trying to give back what its attempts may hold on the master, before it
/// returns the error (never past the lease those attempts asked for).
pub(crate) const GIVE_BACK_WITHIN: Duration = Duration::from_secs(1);

impl<S: Side> Running<'_, '_, S> {
    /// The loop, then, when it failed because replicas did not acknowledge
    /// a grant, the give-back of what that grant holds on the master before
    /// the caller hears of it (see [`give_back_now`](Self::give_back_now)).
    async fn run(&mut self) -> Result<Won, LockError> {
        match self.rounds().await {
            Err(e) if e.is_replicas() => Err(self.give_back_now(e).await),
            outcome => outcome,
        }
    }

    /// Gives back every token still owed a give-back, now, before `error`
    /// is returned: a grant the replicas did not acknowledge holds on the
    /// master, and a caller that exits right after the error must not
    /// leave it held for its lease. Each give-back is retried (on a new
    /// connection once one broke) for up to [`GIVE_BACK_WITHIN`], never
    /// past the lease. What could not be given back stays owed: the drop of
    /// this loop hands it to [`Side::give_back_later`], the only path that
    /// gives it back from then on, and `error` says until when it may
    /// stay held. A token given back here is no longer owed, so it is never
    /// given back twice.
    async fn give_back_now(&mut self, error: LockError) -> LockError {
        let (side, acq) = (&mut *self.side, &mut self.acquisition);
        acq.owe_now();
        // The grant's answer was read by now, so its lease started before.
        let now = side.now();
        let held_until = soon_after(now, side.lease());
        let until = held_until.min(now + GIVE_BACK_WITHIN);
        let mut retry = Backoff::new(RETRY_MAX);
        while let Some(token) = acq.stale() {
            side.before_await(acq);
            let now = match side.give_back(token).await {
                Ok(()) => {
                    acq.forget_stale();
                    continue;
                }
                Err(e) if retryable(&e) => side.now(),
                Err(e) => {
                    tracing::debug!(target: "lockattr", error = %e, "cannot give back a grant the replicas did not acknowledge");
                    break;
                }
            };
            if now >= until {
                break;
            }
            side.before_await(acq);
            if let Woke::Gone = side.sleep(until.min(now + retry.next()), false).await {
                break;
            }
        }
        match (acq.stale(), error) {
            (
                Some(_),
                LockError::Replicas {
                    server,
                    acknowledged,
                    wanted,
                    waited,
                    ..
                },
            ) => LockError::Replicas {
                server,
                acknowledged,
                wanted,
                waited,
                held_until: Some(system_time(side.now(), held_until)),
            },
            (_, error) => error,
        }
    }

    /// The loop itself, until it wins or fails.
    async fn rounds(&mut self) -> Result<Won, LockError> {
        let (side, acq) = (&mut *self.side, &mut self.acquisition);
        // Uncontended: no pub/sub work at all, unless every channel is
        // already subscribed (names in demand): then waiting starts warm.
        let warm = side.listen(acq.token(), true);
        acq.listening(warm);
        let mut next = Next::Ask;
        loop {
            side.before_await(acq);
            next = match next {
                Next::Won(won) => return Ok(won),
                // Attempts whose answer was lost come first: their tokens
                // are given back before a new token tries.
                Next::Ask => match acq.stale() {
                    Some(token) => {
                        let done = side.give_back(token).await;
                        acq.gave_back(side.now(), done)?
                    }
                    None => {
                        let (token, left, queued) = acq.send(side.now());
                        let answer = side.attempt(token, left, queued).await;
                        acq.answered(side.now(), answer)?
                    }
                },
                Next::Pause(until) => match side.sleep(until, false).await {
                    Woke::Gone => return Err(stopped_waiting()),
                    Woke::Time | Woke::Notice(_) => Next::Ask,
                },
                Next::Sleep(until) => {
                    if acq.should_listen() {
                        // Subscribes in the background; `Wake::Subscribed`
                        // says when no notice can be missed any more.
                        let listening = side.listen(acq.token(), false);
                        acq.listening(listening);
                    }
                    let woke = side.sleep(until, acq.hears()).await;
                    acq.woke(side.now(), woke, (side.notice_grants(), side.one_name()))?
                }
            };
            if !acq.hears() {
                side.stop_listening();
            }
        }
    }
}

/// A copy of `e` when it is [`LockError::Replicas`].
fn replicas_error(e: &LockError) -> Option<LockError> {
    let LockError::Replicas {
        server,
        acknowledged,
        wanted,
        waited,
        held_until,
    } = e
    else {
        return None;
    };
    Some(LockError::Replicas {
        server: server.clone(),
        acknowledged: *acknowledged,
        wanted: *wanted,
        waited: *waited,
        held_until: *held_until,
    })
}

/// The wall-clock time of `at`, seen at `now`.
fn system_time(now: Instant, at: Instant) -> std::time::SystemTime {
    std::time::SystemTime::now() + at.saturating_duration_since(now)
}

impl<S: Side> Drop for Running<'_, '_, S> {
    fn drop(&mut self) {
        let tokens = self.acquisition.owed();
        if !tokens.is_empty() {
            self.side.give_back_later(tokens);
        }
    }
}
