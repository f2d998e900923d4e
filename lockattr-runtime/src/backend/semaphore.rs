//! Semaphores on one server and on a Redis Cluster: at most `permits`
//! holders of one name at once.
//!
//! # Keys
//!
//! A semaphore `gpu` with `permits = 3` under the prefix `lockattr:` is
//! made of these keys, all under one hash tag (one Cluster slot, one
//! script call):
//!
//! - `lockattr:{gpu}:sem:permit:0` .. `:permit:2`: the permits, each a lock
//!   key of its own, with its holder's lease. Its value is a lock holder's
//!   (`<owner token>\n<host>\n<pid>\n<label>\n<since ms>\n<fencing
//!   token>`, whoever wrote it: [`ACQUIRE`], a release's or [`ACQUIRE`]'s
//!   hand-over to a waiter) followed by `\n<permits>`, the number of
//!   permits of the semaphore. [`INSPECT`] reports the fencing token and the
//!   number from there, and [`FORCE_RELEASE`] checks the token there, since
//!   the fence counter is shared by all permits. A release's hand-over
//!   copies the lines after the fencing token into the value it writes, so
//!   every held permit carries the number for as long as it is held,
//!   however often it is renewed, extended or handed on;
//! - `lockattr:{gpu}:sem:fence`: the fencing counter, one for all permits,
//!   so tokens increase across the holders of the name;
//! - `lockattr:{gpu}:sem:queue` and `:sem:waiters`: the waiters, oldest
//!   first, as for a lock;
//! - `lockattr:{gpu}:sem:wake`: the channel hand-overs are told on;
//! - `lockattr:{gpu}:sem:permits`: the record of the number of permits,
//!   written when a permit is taken or a caller queues, for the longer of
//!   the caller's lease plus `fence_retention` and its wait (renewal does
//!   not keep it). It tells the number to a caller whose own permit keys
//!   do not (none held, or held only beyond its number), without looking
//!   at every permit.
//!
//! A caller asking for another number than the semaphore's is refused
//! ([`ACQUIRE`] answers `{-1, number}`) when a permit it looks at records
//! another number, or the record does. A caller asking for fewer permits
//! than a semaphore in use does not look at the permits beyond its number:
//! when none of its own permits records a number, the record is gone and
//! the fence counter is not (a permit may be held: every live permit keeps
//! the counter for its hold plus the retention), [`ACQUIRE`] answers
//! `{-2}` without writing anything, and the caller asks again with the
//! keys of all [`MAX_PERMITS`] permits: one request more only while
//! holders renewed past the record, never for a name nobody holds. A
//! permit held beyond the caller's number is then refused too.
//!
//! A plain lock's keys are `lockattr:{gpu}` and `lockattr:{gpu}:<fence,
//! queue, waiters, wake>`: a lock and a semaphore of the same name never
//! share a key, and do not exclude each other.
//!
//! # Protocol
//!
//! A permit is a lock key, so a holder's release, renewal, extension and
//! `hold_at_least` run the scripts of a lock unchanged on its permit key
//! (with the semaphore's fence, queue, waiters and channel): a release
//! hands the permit straight to the oldest waiter whose deadline has not
//! passed, with a new fencing token, and names it on the channel.
//!
//! Only taking a permit has scripts of its own ([`ACQUIRE`], and
//! [`GIVE_BACK`] for abandoned attempts). [`ACQUIRE`] looks at every permit:
//! a permit the caller's token holds counts as taken (a hand-over whose
//! notice is being read, or one whose notice was lost); free permits (a
//! holder's lease ran out) go to the queued waiters first, oldest first,
//! each told on the channel as by a release; a caller gets a free permit
//! only when nobody older waits. So a newcomer never passes a waiter, and
//! a permit is never free while a waiter is queued, except between a lease
//! running out and the next request.
//!
//! A waiter told of a hand-over asks once more to learn which permit it was
//! given: that answer carries the fencing token the hand-over wrote into
//! the permit's value (the one in the notice), so the operator and the
//! holder name the hold by one token from the moment it is written.

use std::time::Duration;

use super::deployment::Backend;
use super::queue::{Queued, queued_only, unauthenticated};
use super::scripts::{Invocation, Lua, packed};
use super::shared::{Attempt, Forced, whole_millis};
use crate::LockError;
use crate::layout::{Keys, MAX_PERMITS, Permits};

impl Permits {
    /// The keys of a call of its scripts: fence, queue, waiters, record,
    /// then one per permit.
    fn keys<'a>(&'a self, keys: &'a Keys) -> impl Iterator<Item = &'a str> {
        [&keys.fence, &keys.queue, &keys.waiters, &self.record]
            .into_iter()
            .chain(&self.slots)
            .map(String::as_str)
    }

    pub(super) fn invocation(&self, script: &'static Lua, keys: &Keys) -> Invocation {
        script.with_keys(self.keys(keys))
    }

    /// As [`invocation`](Self::invocation), followed by the keys of the
    /// permits beyond this number, up to [`MAX_PERMITS`]: for an
    /// [`ACQUIRE`] that looks at every permit.
    fn invocation_of_every(&self, script: &'static Lua, keys: &Keys) -> Invocation {
        let beyond: Vec<String> = (self.slots.len()..MAX_PERMITS as usize)
            .map(|i| format!("{}:permit:{i}", self.base))
            .collect();
        script.with_keys(self.keys(keys).chain(beyond.iter().map(String::as_str)))
    }
}

/// Checks a semaphore request and makes its keys (of the first permit:
/// the grant names the one taken).
pub(crate) fn check(keys: &mut Keys, permits: u32, backend: &Backend) -> Result<(), LockError> {
    if permits == 0 {
        return Err(LockError::invalid(
            "permits",
            "a semaphore of 0 permits could never be taken; use at least 1",
        ));
    }
    if permits > MAX_PERMITS {
        return Err(LockError::invalid(
            "permits",
            format!(
                "{permits} is more than {MAX_PERMITS}, the most a semaphore may have; split the \
                 work over several names"
            ),
        ));
    }
    let why = "count each permit by majority across independent masters";
    queued_only(backend, ("semaphore", "semaphores"), why)?;
    Permits::make(keys, permits);
    Ok(())
}

/// Takes a permit, or queues the caller.
///
/// KEYS: fence, queue, waiters, record, then one key per permit, or (when
/// asked to look at every permit) the keys of all [`MAX_PERMITS`] permits,
/// the caller's first. ARGV: token,
/// `<lease ms>:<retention ms>:<queued>:<since>:<holder>` (as
/// [`ACQUIRE`](super::scripts::ACQUIRE) of a lock), how long the caller
/// will wait in ms (0: it will not, and leaves the queue), the number of
/// permits, the channel, and `1` to look at every permit (`0` or none: the
/// caller's permits only).
///
/// Returns `{1, fencing token, permit index}` when the token holds a
/// permit, `{0, pttl of the permit that ends first or -1}` when it does
/// not, `{-1, the semaphore's number of permits or -1}` (nothing written)
/// when the semaphore is in use with another number of permits (a permit
/// looked at records another number, or the record does, or a permit
/// beyond the caller's number is held), and `{-2, 0}` (nothing written)
/// when none of the caller's permits records the number and the record is
/// gone: ask again looking at every permit.
pub(crate) static ACQUIRE: Lua = Lua::new(script!("sem_acquire.lua"));

/// Gives back whatever a token got: the permit it holds goes to the oldest
/// waiter (or is deleted), or the token leaves the queue. Safe to repeat.
///
/// KEYS: as [`ACQUIRE`]. ARGV: token, retention in ms, the number of
/// permits, the channel. Returns 1 when a permit was given back, 0 when
/// the token held none.
pub(crate) static GIVE_BACK: Lua = Lua::new(script!("sem_give_back.lua"));

/// What an operator sees of a semaphore ([`Locker::inspect_semaphore`](crate::Locker::inspect_semaphore)).
///
/// KEYS: as [`ACQUIRE`], with one key per permit the caller knows of (none
/// on a first call). Returns `{recorded permits or -1, waiters queued,
/// permits, oldest waiters}`: `permits` has one entry per permit key, 0
/// when free, else `{<holder>\n<since>, pttl, fencing token or -1, sha1 of
/// the owner token, the number of permits its value records or -1}` (as
/// the lock's `INSPECT`, the token and the number as the permit's value
/// carries them; the owner token itself never leaves Redis); `oldest
/// waiters` the first 100 of the queue, each `<holder>\n<queued at>`.
pub(crate) static INSPECT: Lua = Lua::new(script!("sem_inspect.lua"));

/// Frees the permit held with a fencing token, whoever holds it: an
/// operator's forced release ([`Locker::force_unlock_permit`](crate::Locker::force_unlock_permit)).
/// As a release does, the permit goes to the oldest waiter (with a new
/// fencing token) or is deleted; its holder's next renewal finds it gone.
///
/// KEYS: as [`ACQUIRE`]. ARGV: the fencing token (1 to 2^53 - 1, as the
/// permit's value carries it), retention in ms, the number of permits, the
/// channel. A waiter handed the permit gets the value's number of permits
/// with it. Returns `{1, <holder>\n<since>}` of the holder it was taken
/// from, or 0 when no permit is held with that token (freed, or handed on
/// meanwhile).
pub(crate) static FORCE_RELEASE: Lua = Lua::new(script!("sem_force_release.lua"));

/// One permit as [`INSPECT`] saw it.
#[derive(Debug, Clone)]
pub(crate) struct PermitSeen {
    /// The permit's index.
    pub(crate) index: u32,
    /// What a lock's inspection sees of it (`fence`: the permit's own
    /// fencing token, when recorded; `waiters`: always 0).
    pub(crate) seen: super::inspect::Seen,
    /// The number of permits the permit's value records, if any.
    pub(crate) permits: Option<u32>,
}

/// What [`INSPECT`] saw of a semaphore.
#[derive(Debug, Clone, Default)]
pub(crate) struct SemaphoreSeen {
    /// The permits callers asked for, when recorded.
    pub(crate) recorded: Option<u32>,
    /// Callers queued.
    pub(crate) waiters: usize,
    /// The permits held, by index.
    pub(crate) held: Vec<PermitSeen>,
    /// The oldest waiters, `<holder>\n<queued at>`.
    pub(crate) oldest: Vec<String>,
}

impl redis::FromRedisValue for SemaphoreSeen {
    fn from_redis_value(v: redis::Value) -> Result<Self, redis::ParsingError> {
        let (recorded, waiters, permits, oldest): (i64, i64, Vec<redis::Value>, Vec<String>) =
            redis::FromRedisValue::from_redis_value(v)?;
        let mut held = Vec::new();
        for (index, permit) in permits.into_iter().enumerate() {
            if let redis::Value::Int(0) = permit {
                continue;
            }
            let (who, ttl, fence, owner, recorded): (String, i64, String, String, i64) =
                redis::FromRedisValue::from_redis_value(permit)?;
            held.push(PermitSeen {
                index: u32::try_from(index).unwrap_or(u32::MAX),
                seen: super::inspect::Seen {
                    who,
                    ttl: Duration::from_millis(u64::try_from(ttl).unwrap_or(0)),
                    fence: fence.parse::<u64>().ok(),
                    waiters: 0,
                    owner,
                },
                permits: u32::try_from(recorded).ok().filter(|&n| n > 0),
            });
        }
        Ok(SemaphoreSeen {
            recorded: u32::try_from(recorded).ok().filter(|&n| n > 0),
            waiters: usize::try_from(waiters).unwrap_or(0),
            held,
            oldest,
        })
    }
}

/// Reads the semaphore whose name gave `keys` (as [`Keys::new`] made
/// them), with `permits` permit keys (0: only its record and queue).
pub(crate) async fn inspect(
    backend: &Backend,
    keys: &Keys,
    permits: u32,
) -> Result<SemaphoreSeen, LockError> {
    let mut keys = keys.clone();
    let permits = Permits::make(&mut keys, permits);
    let invocation = permits.invocation(&INSPECT, &keys);
    match backend {
        Backend::Single(node) => node.run_script(&invocation).await,
        Backend::Cluster(nodes) => nodes.run_script(&invocation).await,
        Backend::Redlock(_) => Ok(SemaphoreSeen::default()),
    }
    .map_err(unauthenticated)
}

/// Frees the permit held with `fencing_token` of the semaphore whose name
/// gave `keys`, which has `permits` permits; the holder it was taken from
/// (`<host>\n<pid>\n<label>\n<since>`), `None` when no permit is held
/// with that token. Sent once: a second run could free the next holder's
/// permit.
pub(crate) async fn force_release(
    backend: &Backend,
    keys: &Keys,
    permits: u32,
    fencing_token: u64,
) -> Result<Option<String>, LockError> {
    let mut keys = keys.clone();
    let permits = Permits::make(&mut keys, permits);
    let mut invocation = permits.invocation(&FORCE_RELEASE, &keys);
    invocation
        .arg(fencing_token)
        .arg(whole_millis(keys.fence_retention))
        .arg(permits.slots.len())
        .arg(&keys.channel);
    let released: Forced = match backend {
        Backend::Single(node) => node.run_once(&invocation).await,
        Backend::Cluster(nodes) => nodes.run_script(&invocation).await,
        Backend::Redlock(_) => return Ok(None),
    }
    .map_err(unauthenticated)?;
    Ok(released.0)
}

/// One attempt at a permit of the semaphore `name` for `token`, waiting up
/// to `wait` in its queue (`queued`: an earlier attempt may have queued
/// it); with `every`, looking at every permit. Taken (with the permit's
/// index), busy, `Again` (look at every permit: nothing was written), or
/// refused when the semaphore is in use with another number of permits. An
/// attempt whose answer is not read is given back on its connection.
pub(crate) async fn attempt(
    on: Queued<'_>,
    (keys, permits): (&Keys, &Permits),
    name: &str,
    request: (&str, Duration, Duration, bool),
    every: bool,
) -> Result<Attempt, LockError> {
    let invocation = acquire_invocation(permits, keys, request, every);
    let reply = on
        .run_or_give_back(&invocation, &|| give_back_eval(permits, keys, request.0))
        .await
        .map_err(unauthenticated)?;
    match *reply {
        [1, fence, slot, ..]
            if permits
                .slot(usize::try_from(slot).unwrap_or(usize::MAX))
                .is_some() =>
        {
            let slot = usize::try_from(slot).unwrap_or(0);
            Ok(Attempt::taken(u64::try_from(fence).unwrap_or(0), slot))
        }
        [0, left, ..] => Ok(Attempt::busy_ms(left)),
        [-1, recorded, ..] => Ok(Attempt::Refused(LockError::PermitsMismatch {
            name: name.to_owned(),
            permits: u32::try_from(permits.len()).unwrap_or(u32::MAX),
            recorded,
        })),
        [-2, ..] if !every => Ok(Attempt::Again),
        _ => Err(LockError::UnexpectedReply {
            server: on.server().to_owned(),
            reply: format!("an attempt at a permit of {name} with {reply:?}"),
        }),
    }
}

/// Gives back whatever `token` holds or queued at the semaphore.
pub(crate) async fn give_back(
    on: Queued<'_>,
    (keys, permits): (&Keys, &Permits),
    token: &str,
) -> Result<(), LockError> {
    on.run(&give_back_invocation(permits, keys, token))
        .await
        .map(|_: i64| ())
        .map_err(unauthenticated)
}

/// An [`ACQUIRE`] call; with `every`, looking at every permit.
pub(crate) fn acquire_invocation(
    permits: &Permits,
    keys: &Keys,
    (token, expire, wait, queued): (&str, Duration, Duration, bool),
    every: bool,
) -> Invocation {
    let mut invocation = if every {
        permits.invocation_of_every(&ACQUIRE, keys)
    } else {
        permits.invocation(&ACQUIRE, keys)
    };
    invocation
        .arg(token)
        .arg(packed(keys, expire, Some(queued)))
        .arg(whole_millis(wait))
        .arg(permits.slots.len())
        .arg(&keys.channel)
        .arg(u8::from(every));
    invocation
}

fn give_back_call(permits: &Permits, keys: &Keys, token: &str) -> Invocation {
    let mut call = GIVE_BACK.with_keys(permits.keys(keys));
    call.arg(token)
        .arg(whole_millis(keys.fence_retention))
        .arg(permits.slots.len())
        .arg(&keys.channel);
    call
}

pub(crate) fn give_back_invocation(permits: &Permits, keys: &Keys, token: &str) -> Invocation {
    give_back_call(permits, keys, token)
}

/// [`GIVE_BACK`] as EVAL with the source: runs even where the script
/// cache was emptied (sent after a request whose answer was lost).
pub(crate) fn give_back_eval(permits: &Permits, keys: &Keys, token: &str) -> redis::Cmd {
    give_back_call(permits, keys, token).eval()
}
