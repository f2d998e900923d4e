//! Several names at once: the scripts and the attempts of
//! [`Locker::lock_all`](crate::Locker::lock_all).
//!
//! # All or nothing
//!
//! One script call takes every name of a group or none ([`ACQUIRE_SET`]):
//! it first reads every lock, and writes only when all are free (or
//! already this token's, for a request sent again). So a caller never holds
//! some names while it waits for the others, and two callers locking
//! `{a, b}` and `{b, a}` cannot deadlock: whichever script runs first gets
//! both, the other gets neither.
//!
//! On one server the whole set is one group. On a Redis Cluster a script may
//! only touch keys of one slot, so the names are grouped by slot and the
//! groups are taken one after another, in a fixed order (by slot, then by
//! key); when a group is busy, the groups already taken are given back in
//! the same attempt before it waits. Nothing is held while waiting, so this
//! stays deadlock-free too. (Every key of a name carries the whole name as
//! its hash tag, so two names share a slot only by chance, unless the
//! Locker's prefix carries a hash tag: then all its names share that slot
//! and a set is one group.)
//!
//! On a Redlock each node takes the whole set in one [`ACQUIRE_SET`] call,
//! and a majority of nodes holds it: see `redlock::set`. The waiting
//! described below is for one server and a Cluster.
//!
//! A held set is released the same way, one
//! [`RELEASE_SET`](super::scripts::RELEASE_SET) call per server, slot or
//! Redlock node, which releases each name as the lock's own release does
//! (with hand-over).
//!
//! # Waiting
//!
//! A set waiter enters its token in the waiters hash of each name
//! (`<prefix>{<name>}:waiters`, with the same expiry as a queued waiter's
//! entry), and puts the marker `-` at the end of each name's queue (one
//! marker shared by all sets; never a token). A release that frees the
//! lock pops the marker and publishes `-:0:0` on the lock's channel (see
//! [`RELEASE`](super::scripts::RELEASE)); a release that hands the
//! lock to a queued waiter puts it back at the end. A set waiter's entry
//! is in no queue, so no pop reaches it: the release that pops the marker
//! drops the entries whose deadline has passed (a set waiter that died
//! without giving back) before it decides, so the marker goes back only
//! while a live entry is left. The set waiter, subscribed to the channel of every name of the set, tries again at
//! once. A release with nobody waiting runs no extra command. It also tries again when the longest lease it saw ends, once a
//! second (`RECHECK`), and at its deadline, like a queued waiter.
//!
//! A release that hands a name to a queued single-name waiter does not
//! free it, so a name handed from waiter to waiter without a pause would
//! keep a set out for good. A set that has waited a while (`crate::wait`)
//! therefore also joins the FIFO queue of the first busy name (same token,
//! same waiters entry): when its turn comes, a release hands that name to
//! it, and it tries the whole set at once. If another name is busy then,
//! the script gives the name back at once (deleted, with a notice, so the
//! queued waiters try) and queues the set again at the end: it never holds
//! part of the set while it waits, and it gets a chance at every turn of
//! that queue. See docs/kinds.md, "Several names at once".

use std::time::{Duration, Instant};

use super::deployment::Backend;
use super::queue::Queued;
use super::scripts::{Invocation, Lua, packed, script};
use super::shared::{Attempt, whole_millis};
use crate::LockError;
use crate::layout::{Keys, slot};

/// Takes every name of a group or none, in one script call; or, busy,
/// enters the token as a waiter of each name (when it will wait).
///
/// KEYS: for each name, its lock, fence, queue and waiters keys (four per
/// name, at least one name). ARGV: token, `<lease ms>:<retention
/// ms>:<since ms>:<holder>` (as [`ACQUIRE`](super::scripts::ACQUIRE)'s),
/// how long the caller will still wait in ms (0: it will not, and leaves
/// the waiters hashes), `1` when the caller has waited long enough to join
/// the FIFO queue of the first busy name (`0` otherwise), then each name's
/// channel.
///
/// Returns `{1, fencing token of each name...}` when the token now holds
/// every name (each lock's value is `<token>\n<holder>\n<since>`, with the
/// lease; each name's counter incremented as a single acquisition does), or
/// `{0, longest time left of a busy name in ms}`.
///
/// A name already held under this token counts as taken, with its counter
/// as it is: a request sent again after its answer was lost takes nothing
/// twice, and a name a release handed to the token (it was queued) is
/// part of the set now. When another name is busy, a name the token holds
/// is given back at once (deleted, `-:0:0` published on its channel when
/// anyone waits), so the caller never holds part of the set while it
/// waits; with the queue flag it then queues again at the end.
///
/// Every name's fence counter is read before anything is written: a value
/// that no script writes there (not a whole number below 2^53) at any name
/// refuses the whole call, with the error [`ACQUIRE`](super::scripts::ACQUIRE)
/// gives for it (`ERR lockattr: the fence counter <key> holds a foreign
/// value`, a [`LockError::Redis`]); nothing is written, free or busy.
pub(crate) static ACQUIRE_SET: Lua = Lua::new(script!("set_acquire.lua"));

/// Gives back what a set token holds or waits for, name by name: deletes
/// each lock the token owns (publishing `-:0:0` on its channel when anyone
/// waits for it, so the waiters try at once) and takes the token out of
/// each waiters hash and queue. No hand-over: this undoes an attempt
/// (abandoned, cancelled, or a Cluster group taken before a busy one), it
/// is not the release of a held set
/// ([`RELEASE_SET`](super::scripts::RELEASE_SET) does that, with
/// hand-over). Safe to repeat.
///
/// KEYS: for each name, its lock, fence, queue and waiters keys. ARGV:
/// token, how long a fence counter outlives a lease in ms, then each
/// name's channel. Returns how many locks it deleted.
pub(crate) static GIVE_BACK_SET: Lua = Lua::new(script!("set_give_back.lua"));

/// An [`ACQUIRE_SET`] call for the names of `group`.
pub(crate) fn acquire_call(
    group: &[&Keys],
    token: &str,
    expire: Duration,
    wait: Duration,
    queue: bool,
) -> Invocation {
    let mut invocation = ACQUIRE_SET.with_keys(group.iter().flat_map(|keys| keys.queued()));
    let packed = group
        .first()
        .map_or_else(String::new, |keys| packed(keys, expire, None));
    invocation
        .arg(token)
        .arg(packed)
        .arg(whole_millis(wait))
        .arg(if queue { "1" } else { "0" });
    for keys in group {
        invocation.arg(&keys.channel);
    }
    invocation
}

/// A [`GIVE_BACK_SET`] call for the names of `group`.
fn give_back_set(group: &[&Keys], token: &str) -> Invocation {
    let mut call = GIVE_BACK_SET.with_keys(group.iter().flat_map(|keys| keys.queued()));
    let retention = group.first().map_or(Duration::ZERO, |k| k.fence_retention);
    call.arg(token).arg(whole_millis(retention));
    for keys in group {
        call.arg(&keys.channel);
    }
    call
}

/// A [`GIVE_BACK_SET`] call for the names of `group`.
pub(crate) fn give_back_call(group: &[&Keys], token: &str) -> Invocation {
    give_back_set(group, token)
}

/// [`give_back_call`] as an EVAL with the source (see
/// `scripts::give_back`): it may run on a server that never saw the script.
pub(crate) fn give_back_eval(group: &[&Keys], token: &str) -> redis::Cmd {
    give_back_set(group, token).eval()
}

/// A set taken.
pub(crate) struct SetGrant {
    /// Each name's fencing token, in the order of the request's keys.
    pub(crate) fencing_tokens: Vec<u64>,
    /// When the attempt that took the set started: every name's lease
    /// began after it.
    pub(crate) sent: Instant,
    pub(crate) token: String,
}

/// The groups of a set: one on a single server, one per slot on a
/// Cluster, in slot order (the keys are sorted by slot, then by key).
pub(crate) fn groups(backend: &Backend, keys: &[Keys]) -> Vec<Vec<usize>> {
    match backend {
        Backend::Single(_) | Backend::Redlock(_) => vec![(0..keys.len()).collect()],
        Backend::Cluster(_) => {
            let mut groups: Vec<(u16, Vec<usize>)> = Vec::new();
            for (i, k) in keys.iter().enumerate() {
                let s = slot(&k.lock);
                match groups.last_mut() {
                    Some((last, members)) if *last == s => members.push(i),
                    _ => groups.push((s, vec![i])),
                }
            }
            groups.into_iter().map(|(_, members)| members).collect()
        }
    }
}

/// One attempt at every group in order, giving back the groups taken when
/// a later one is busy: taken (every name's fencing token), or busy (the
/// longest time left seen).
pub(crate) async fn attempt(
    on: Queued<'_>,
    groups: &[Vec<&Keys>],
    token: &str,
    (expire, wait): (Duration, Duration),
    queue: bool,
) -> Result<Attempt, LockError> {
    let mut fences = Vec::new();
    for (taken, group) in groups.iter().enumerate() {
        let invocation = acquire_call(group, token, expire, wait, queue);
        let reply = on
            .run_or_give_back(&invocation, &|| give_back_eval(group, token))
            .await?;
        match answer(&reply, group.len(), on.server())? {
            Attempt::Taken { of_set, .. } => fences.extend(of_set),
            busy => {
                for group in &groups[..taken] {
                    let _: i64 = on.run(&give_back_call(group, token)).await?;
                }
                return Ok(busy);
            }
        }
    }
    Ok(Attempt::Taken {
        fencing_token: fences.first().copied().unwrap_or(0),
        slot: 0,
        of_set: fences,
    })
}

/// Gives back whatever `token` holds or queued in every group.
pub(crate) async fn give_back(
    on: Queued<'_>,
    groups: &[Vec<&Keys>],
    token: &str,
) -> Result<(), LockError> {
    for group in groups {
        let _: i64 = on.run(&give_back_call(group, token)).await?;
    }
    Ok(())
}

/// The answer of [`ACQUIRE_SET`] for a group of `names` names, from
/// `server`: taken with each name's fencing token, or busy.
pub(crate) fn answer(reply: &[i64], names: usize, server: &str) -> Result<Attempt, LockError> {
    match reply.first() {
        Some(1) if reply.len() == names + 1 => {
            let of_set: Vec<u64> = reply[1..]
                .iter()
                .map(|&f| u64::try_from(f).unwrap_or(0))
                .collect();
            Ok(Attempt::Taken {
                fencing_token: of_set.first().copied().unwrap_or(0),
                slot: 0,
                of_set,
            })
        }
        Some(0) if reply.len() == 2 => Ok(Attempt::Busy(Some(Duration::from_millis(
            u64::try_from(reply[1]).unwrap_or(0),
        )))),
        _ => Err(LockError::UnexpectedReply {
            server: server.to_owned(),
            reply: format!("a lock set attempt of {names} names with {reply:?}"),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reply_of_another_shape_names_the_server_and_what_came_back() {
        let Err(err) = answer(&[1, 7], 2, "127.0.0.1:6400/0") else {
            panic!("a reply of 2 values for 2 names was taken");
        };
        let LockError::UnexpectedReply { server, reply } = &err else {
            panic!("{err:?}");
        };
        assert_eq!(server, "127.0.0.1:6400/0");
        assert!(reply.contains("[1, 7]"), "{reply}");
        assert!(err.to_string().contains("same lockattr version"), "{err}");
        assert!(matches!(
            answer(&[1, 7, 8], 2, "s"),
            Ok(Attempt::Taken { fencing_token: 7, of_set, .. }) if of_set == [7, 8]
        ));
    }
}
