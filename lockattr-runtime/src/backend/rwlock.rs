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
//! unchanged on them. Taking ([`ACQUIRE`]) and releasing (`scripts::RW_RELEASE`, also
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

use std::time::Duration;

use super::deployment::Backend;
use super::queue::{Queued, queued_only, unauthenticated};
use super::scripts::{Invocation, Lua, packed, rw_release_call};
use super::shared::{Attempt, whole_millis};
use crate::LockError;
use crate::layout::Keys;
use crate::layout::{RwKeys, RwMode};

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
pub(crate) static ACQUIRE: Lua = Lua::new(script!("rw_acquire.lua"));

/// [`RW_RELEASE`](super::scripts::RW_RELEASE) as EVAL with the
/// source, to give back an attempt whose answer was not read (see
/// `scripts::give_back`).
pub(crate) fn give_back_eval(keys: &Keys, rw: &RwKeys, token: &str) -> redis::Cmd {
    rw_release_call(keys, rw, token, 0).eval()
}

/// One attempt of `rw`'s side of the lock of `name` for `token`, waiting
/// up to `wait` in its queue (`queued`: an earlier attempt may have queued
/// it): taken with the fencing token, or busy. An attempt whose answer is
/// not read is given back on its connection.
pub(crate) async fn attempt(
    on: Queued<'_>,
    (keys, rw): (&Keys, &RwKeys),
    name: &str,
    request: (&str, Duration, Duration, bool),
) -> Result<Attempt, LockError> {
    let invocation = acquire_invocation(keys, rw, request);
    let reply = on
        .run_or_give_back(&invocation, &|| give_back_eval(keys, rw, request.0))
        .await
        .map_err(unauthenticated)?;
    match *reply {
        [1, fence, ..] => Ok(Attempt::taken(u64::try_from(fence).unwrap_or(0), 0)),
        [0, left, ..] => Ok(Attempt::busy_ms(left)),
        _ => Err(LockError::UnexpectedReply {
            server: on.server().to_owned(),
            reply: format!("an attempt of {name} with {reply:?}"),
        }),
    }
}

/// Gives back whatever `token` holds or queued on `rw`'s side.
pub(crate) async fn give_back(
    on: Queued<'_>,
    (keys, rw): (&Keys, &RwKeys),
    token: &str,
) -> Result<(), LockError> {
    on.run(&rw_release_call(keys, rw, token, 0))
        .await
        .map(|_: redis::Value| ())
}

/// An [`ACQUIRE`] call of `rw`'s side.
pub(crate) fn acquire_invocation(
    keys: &Keys,
    rw: &RwKeys,
    (token, expire, wait, queued): (&str, Duration, Duration, bool),
) -> Invocation {
    let side = match rw.mode {
        RwMode::Read => 'r',
        RwMode::Write => 'w',
    };
    let mut invocation = ACQUIRE.with_keys(rw.keys(keys));
    invocation
        .arg(token)
        .arg(format!("{side}:{}", packed(keys, expire, Some(queued))))
        .arg(whole_millis(wait));
    invocation
}

/// Checks a read-write request and makes its keys: refused on a Redlock.
pub(crate) fn check(keys: &mut Keys, mode: RwMode, backend: &Backend) -> Result<(), LockError> {
    let why = "count readers and hand the lock over by majority across independent masters";
    queued_only(backend, ("read-write lock", "read-write locks"), why)?;
    RwKeys::make(keys, mode);
    Ok(())
}
