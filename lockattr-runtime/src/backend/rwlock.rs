//! Read-write locks on one server and on a Redis Cluster: many readers or
//! one writer of one name.
//!
//! # Keys
//!
//! A read-write lock `catalog` under the prefix `lockattr:` is made of
//! these keys, all under one hash tag (one Cluster slot, one script call):
//!
//! - `lockattr:{catalog}:rw:write`: the writer, a lock key
//!   (`<token>\n<holder>\n<since>\n<fencing token>`, with the writer's
//!   lease);
//! - `lockattr:{catalog}:rw:read:<token>`: one lock key per reader, with
//!   that reader's lease (its value as the writer's, with the fencing token
//!   it was granted);
//! - `lockattr:{catalog}:rw:reading`: the index of the readers, a sorted
//!   set of their tokens scored by the end of each one's lease (by the
//!   server's clock, never before its key's own end). Whatever extends a
//!   reader's lease (renewal, `extend`, `hold_at_least`) moves its score and
//!   keeps the index alive at least that long, so the index expires with
//!   its last reader, crashed or not; a member whose score has passed (a
//!   reader whose lease ran out) is dropped by the next script call. Each
//!   call counts the live readers and finds the first to end in O(log R),
//!   whatever their number. (Versions before it kept a plain set at
//!   `:rw:readers`, without a time to live; the scripts still count the
//!   readers in it while one exists, during a rolling deploy, and never
//!   write it. The older scripts do not read the index, so an older
//!   writer does not wait for newer readers: stop the older processes that
//!   take read-write locks before newer ones take them.)
//! - `lockattr:{catalog}:rw:fence`: the fencing counter, incremented by
//!   writers only; a reader is granted its current value (the last write's
//!   token, 0 when none is known) and keeps it for its lease plus the
//!   retention;
//! - `lockattr:{catalog}:rw:queue` and `:rw:waiters`: the waiters, oldest
//!   first; a waiter's entry is `<deadline>:<lease>:<queued>:<r|w>:<holder>`;
//! - `lockattr:{catalog}:rw:wake`: the channel hand-overs are told on.
//!
//! The reader keys are not passed to the scripts as KEYS: they are built
//! from the write key's name (`<base>:write` gives `<base>:read:<token>`),
//! so they share its hash tag and Cluster slot. A lock, a semaphore and a
//! read-write lock of the same name never share a key, and do not exclude
//! each other.
//!
//! # Protocol
//!
//! A writer's key and a reader's key are lock keys, so the guard's renewal,
//! extension, `hold_at_least` and lost signal run the scripts of a lock
//! unchanged on them. Taking ([`ACQUIRE`]) and releasing ([`RELEASE`], also
//! the give-back of abandoned attempts) have scripts of their own.
//!
//! Both first drop the dead readers and then *admit* from the head of the
//! queue (dead entries, whose deadline passed, are dropped): a writer at
//! the head is handed the lock when no writer and no reader holds it; while
//! no writer holds, every reader at the head up to the first writer is
//! handed a read key of its own. Each waiter handed the lock is named on
//! the channel (`<token>:<fencing token>:<lease>`; a reader's fencing token
//! may be 0, which its waiter hears as "ask now"), and asks once more to
//! learn its fencing token.
//!
//! A caller that was not handed the lock gets it only when the queue is
//! then empty (nobody older waits) and: for a reader, no writer holds; for
//! a writer, no writer and no reader holds. So a waiting writer blocks new
//! readers (writer-preferring), a writer's release admits every reader
//! waiting before the next writer at once, and the last reader's release
//! hands the lock to the waiting writer. A caller that waits is queued
//! and told how long until the first holder's lease ends, to ask again then
//! (a crashed holder).
//!
//! A call costs the same inside Redis whatever the number of readers (see
//! the index above); a waiter asks once a second, and at hand-overs.

use std::sync::Arc;
use std::time::{Duration, Instant};

use once_cell::sync::Lazy;
use redis::{Script, ScriptInvocation};

use super::queue::{self, Queued, RECHECK};
use super::scripts::Call;
use super::semaphore::{next_check, unauthenticated, whole_millis};
use super::{Backoff, FALLBACK_PAUSE, Grant, LockRequest, RETRY_MAX, Wake, millis, soon_after};
use crate::inner::Inner;
use crate::key::Keys;
use crate::rwlock::RwMode;
use crate::{LockError, io};

/// The keys of one read-write lock beyond the lock-shaped [`Keys`] its
/// guard uses (whose `lock` is the writer's key or the reader's own).
#[derive(Debug, Clone)]
pub(crate) struct RwKeys {
    /// The side taken.
    pub(crate) mode: RwMode,
    /// `<base>:rw:write`.
    pub(super) write: String,
    /// `<base>:rw:readers`.
    pub(super) readers: String,
}

impl RwKeys {
    /// Turns `keys` (of the name, as [`Keys::new`] made them) into a
    /// read-write lock's, for `mode`; a reader's `lock` is set when its
    /// token is known ([`RwKeys::holder_key`]).
    pub(crate) fn make(keys: &mut Keys, mode: RwMode) {
        let base = format!("{}:rw", keys.lock);
        keys.fence = format!("{base}:fence");
        keys.queue = format!("{base}:queue");
        keys.waiters = format!("{base}:waiters");
        keys.channel = format!("{base}:wake");
        // Always handed to the oldest waiters.
        keys.barge = Duration::ZERO;
        let rw = RwKeys {
            mode,
            write: format!("{base}:write"),
            readers: format!("{base}:reading"),
        };
        keys.lock = rw.write.clone();
        keys.rw = Some(rw);
    }

    /// The index of readers that a reader's renewal updates; `None` for a
    /// writer.
    pub(crate) fn index(&self) -> Option<&str> {
        match self.mode {
            RwMode::Write => None,
            RwMode::Read => Some(&self.readers),
        }
    }

    /// The key `token` holds on this side: the writer's, or its own reader
    /// key.
    pub(crate) fn holder_key(&self, token: &str) -> String {
        match self.mode {
            RwMode::Write => self.write.clone(),
            RwMode::Read => {
                let base = self.write.strip_suffix(":write").unwrap_or(&self.write);
                format!("{base}:read:{token}")
            }
        }
    }
}

/// Takes one side of the lock, or queues the caller.
///
/// KEYS: write, readers, fence, queue, waiters. ARGV: token, `<r or
/// w>:<lease ms>:<retention ms>:<queued>:<since>:<holder>` (as
/// [`ACQUIRE`](super::scripts::ACQUIRE) of a lock, with the side first),
/// how long the caller will wait in ms (0: it will not, and leaves the
/// queue). Ten words with EVALSHA (see the lock's script).
///
/// Returns `{1, fencing token}` when the token holds its side (a writer's
/// new token; for a reader, the last write's), `{0, pttl of the holder whose
/// lease ends first, or -1}` when not.
pub(crate) static ACQUIRE: Lazy<Script> = Lazy::new(|| {
    Script::new(lua!(
        "helpers.lua",
        "queue.lua",
        "rw_helpers.lua",
        "rw_acquire.lua"
    ))
});

/// Releases one side if the token holds it, then admits the waiters that
/// may take the lock now (see the module docs), each named on the channel;
/// a token that holds nothing leaves the queue instead. Safe to repeat; the
/// give-back of an abandoned attempt too.
///
/// KEYS: write, readers, fence, queue, waiters, then the key the token
/// holds (the write key, or its own reader key). ARGV as the lock's
/// [`RELEASE_LUA`](super::scripts::RELEASE_LUA): token, channel (unused:
/// it follows from the write key), notify (unused), retention in ms, the
/// fencing token the token was granted, barge (unused). Returns as the
/// lock's: the first notice published when the lock was handed on, 1 when
/// released, 0 when the token did not hold it, and 2 when it did not but
/// may have just released it: a writer whose fencing token is at most a
/// thousand behind the counter, or a reader (whose key nobody else takes).
pub(crate) const RELEASE_LUA: &str = lua!(
    "helpers.lua",
    "queue.lua",
    "rw_helpers.lua",
    "rw_release.lua"
);

/// [`RELEASE_LUA`] as a script.
pub(crate) static RELEASE: Lazy<Script> = Lazy::new(|| Script::new(RELEASE_LUA));

/// A [`RELEASE`] call for `token` (see `scripts::release`).
pub(crate) fn release_call(keys: &Keys, rw: &RwKeys, token: &str, fencing_token: u64) -> Call {
    let mut call = Call::new(RELEASE_LUA, &RELEASE);
    call.key(&rw.write)
        .key(&rw.readers)
        .key(&keys.fence)
        .key(&keys.queue)
        .key(&keys.waiters)
        .key(rw.holder_key(token))
        .arg(token)
        .arg(&keys.channel)
        .arg("0")
        .arg(whole_millis(keys.fence_retention))
        .arg(fencing_token)
        .arg(0);
    call
}

/// [`RELEASE_LUA`] as EVAL with the source, to give back an attempt whose
/// answer was not read (see `scripts::give_back`).
pub(crate) fn give_back_eval(keys: &Keys, rw: &RwKeys, token: &str) -> redis::Cmd {
    release_call(keys, rw, token, 0).eval()
}

pub(super) fn acquire_invocation<'a>(
    keys: &Keys,
    rw: &RwKeys,
    (token, expire, wait, queued): (&str, Duration, Duration, bool),
) -> ScriptInvocation<'a> {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, whole_millis);
    let side = match rw.mode {
        RwMode::Read => 'r',
        RwMode::Write => 'w',
    };
    let mut invocation = ACQUIRE.prepare_invoke();
    invocation
        .key(&rw.write)
        .key(&rw.readers)
        .key(&keys.fence)
        .key(&keys.queue)
        .key(&keys.waiters)
        .arg(token)
        .arg(format!(
            "{side}:{}:{}:{}:{since}:{}",
            millis(expire),
            whole_millis(keys.fence_retention),
            u8::from(queued),
            keys.holder
        ))
        .arg(whole_millis(wait));
    invocation
}

/// What one [`ACQUIRE`] call found.
#[derive(Debug, Clone, Copy)]
enum Answer {
    /// The token holds its side.
    Taken { fencing_token: u64 },
    /// Not taken; the first holder's lease ends in this much time.
    Busy { first_end: Option<Duration> },
}

impl Answer {
    fn from_reply(reply: &[i64]) -> Answer {
        match reply {
            [1, fence, ..] => Answer::Taken {
                fencing_token: u64::try_from(*fence).unwrap_or(0),
            },
            [_, left, ..] => Answer::Busy {
                first_end: u64::try_from(*left).ok().map(Duration::from_millis),
            },
            _ => Answer::Busy { first_end: None },
        }
    }
}

impl Queued<'_> {
    async fn try_rw(
        self,
        keys: &Keys,
        rw: &RwKeys,
        attempt: (&str, Duration, Duration, bool),
    ) -> Result<Answer, LockError> {
        let invocation = acquire_invocation(keys, rw, attempt);
        let reply: Result<Vec<i64>, LockError> = match self {
            Queued::Single(node) => {
                node.run_acquisition(&invocation, give_back_eval(keys, rw, attempt.0))
                    .await
            }
            Queued::Cluster(nodes) => nodes.run_script(&invocation).await,
        };
        Ok(Answer::from_reply(&reply.map_err(unauthenticated)?))
    }

    async fn give_back_rw(self, keys: &Keys, rw: &RwKeys, token: &str) -> Result<(), LockError> {
        let invocation = release_call(keys, rw, token, 0).invocation();
        let given: Result<redis::Value, LockError> = match self {
            Queued::Single(node) => node.run_script(&invocation).await,
            Queued::Cluster(nodes) => nodes.run_script(&invocation).await,
        };
        given.map(drop)
    }
}

/// The acquisition loop of a read-write lock on one server or a cluster:
/// as the semaphore's (queued in Redis, woken by the channel, asking again
/// at least every [`RECHECK`], when the first holder's lease ends and at
/// the deadline; connection errors retried with a new token until the
/// deadline).
pub(crate) async fn acquire(
    backend: Queued<'_>,
    request: LockRequest<'_>,
    rw: &RwKeys,
    mut gone: io::CallerGone,
) -> Result<Grant, LockError> {
    let LockRequest {
        locker,
        name,
        keys,
        mut token,
        expire,
        wait,
    } = request;
    let now = Instant::now();
    let deadline = now
        .checked_add(wait)
        .unwrap_or(now + crate::locker::MAX_EXPIRE);
    let wakeups = backend.wakeups();
    let mut waiter = wakeups.register_if_subscribed(&keys.channel, &token);
    let mut owed = Owed {
        locker,
        keys,
        rw,
        expire,
        stale: Vec::new(),
        queued: None,
        sending: None,
    };
    let mut retry = Backoff::new(RETRY_MAX);
    let mut polling_until: Option<Instant> = None;
    // A hand-over was heard: the next answer is the lock.
    let mut handed = false;
    loop {
        if let Err(e) = owed.settle(backend).await {
            retry.pause(e, deadline, &mut gone).await?;
            continue;
        }
        let sent = Instant::now();
        let left = deadline.saturating_duration_since(sent);
        let queued = owed.queued.as_deref() == Some(token.as_str());
        owed.sending = Some(token.clone());
        let attempt = backend
            .try_rw(keys, rw, (&token, expire, left, queued))
            .await;
        owed.sending = None;
        let first_end = match attempt {
            Ok(Answer::Taken { fencing_token }) => {
                owed.queued = None;
                return Ok(Grant {
                    fencing_token,
                    sent,
                    handed,
                    token,
                });
            }
            Ok(Answer::Busy { first_end }) => first_end,
            Err(e) if queue::retryable(&e) => {
                if owed.queued.take().is_some() || queue::may_have_run(&e) {
                    owed.stale.push(token);
                }
                token = crate::locker::new_token()?;
                waiter = None;
                handed = false;
                retry.pause(e, deadline, &mut gone).await?;
                continue;
            }
            Err(e) => {
                if owed.queued.take().is_some() || queue::may_have_run(&e) {
                    owed.stale.push(token);
                }
                return Err(e);
            }
        };
        retry.reset();
        handed = false;
        if left.is_zero() {
            owed.queued = None;
            return Err(LockError::Timeout {
                name: name.to_owned(),
                waited: wait,
            });
        }
        owed.queued = Some(token.clone());
        let now = Instant::now();
        if polling_until.is_some_and(|until| now >= until) {
            polling_until = None;
        }
        if waiter.is_none() && polling_until.is_none() {
            waiter = Some(wakeups.watch(&keys.channel, &token));
        }
        let recheck = deadline.min(now + RECHECK);
        let mut wake_at = next_check(recheck, first_end, polling_until.is_some());
        loop {
            let woken = async {
                match waiter.as_mut() {
                    Some(waiter) => waiter.wait().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                wake = woken => match wake {
                    // Ours; asking once more says with which fencing token.
                    Wake::Handed { .. } => {
                        waiter = None;
                        handed = true;
                        break;
                    }
                    Wake::Subscribed | Wake::TryNow => break,
                    Wake::Recheck => {
                        waiter = None;
                        break;
                    }
                    Wake::Refused => {
                        waiter = None;
                        polling_until = Some(Instant::now() + queue::RESUBSCRIBE_AFTER);
                        wake_at = wake_at.min(soon_after(FALLBACK_PAUSE));
                    }
                    Wake::Rearm { lease } => {
                        wake_at = next_check(recheck, Some(lease), polling_until.is_some());
                    }
                },
                () = tokio::time::sleep_until(wake_at.into()) => break,
                () = gone.wait() => return Err(queue::stopped_waiting()),
            }
        }
    }
}

/// How long a give-back in the background is tried at most.
const GIVE_BACK_FOR: Duration = Duration::from_secs(60);

/// The tokens of one acquisition to give back (see `queue::Owed`): dropped
/// with any left, or with a request on its way, it gives them back in the
/// background.
struct Owed<'a> {
    locker: &'a Arc<Inner>,
    keys: &'a Keys,
    rw: &'a RwKeys,
    expire: Duration,
    stale: Vec<String>,
    queued: Option<String>,
    /// The token of the request on its way: a caller that stops waiting
    /// while it is may leave a hold behind.
    sending: Option<String>,
}

impl Owed<'_> {
    async fn settle(&mut self, backend: Queued<'_>) -> Result<(), LockError> {
        while let Some(token) = self.stale.last() {
            match backend.give_back_rw(self.keys, self.rw, token).await {
                Ok(()) => {}
                Err(e) if queue::retryable(&e) => return Err(e),
                Err(e) => {
                    tracing::debug!(target: "lockattr", error = %e, "cannot give back an abandoned read-write lock attempt")
                }
            }
            self.stale.pop();
        }
        Ok(())
    }
}

impl Drop for Owed<'_> {
    fn drop(&mut self) {
        let mut tokens = std::mem::take(&mut self.stale);
        tokens.extend(self.queued.take());
        tokens.extend(self.sending.take());
        if tokens.is_empty() {
            return;
        }
        let (locker, keys, rw) = (self.locker.clone(), self.keys.clone(), self.rw.clone());
        let until = Instant::now() + self.expire.min(GIVE_BACK_FOR);
        let giving = io::spawn(async move {
            let backend = match &locker.backend {
                super::Backend::Single(node) => Queued::Single(node),
                super::Backend::Cluster(nodes) => Queued::Cluster(nodes),
                super::Backend::Redlock(_) => return,
            };
            let mut retry = Backoff::new(Duration::from_secs(1));
            for token in tokens {
                loop {
                    match backend.give_back_rw(&keys, &rw, &token).await {
                        Ok(()) => break,
                        Err(e) if queue::retryable(&e) && Instant::now() < until => {
                            tokio::time::sleep(retry.next()).await;
                        }
                        Err(e) => {
                            tracing::debug!(target: "lockattr", error = %e, "cannot give back a read-write lock attempt; it expires with its lease or wait");
                            break;
                        }
                    }
                }
            }
        });
        if let Err(e) = giving {
            tracing::debug!(target: "lockattr", error = %e, "cannot leave a read-write lock's queue; the entry expires with the wait");
        }
    }
}
