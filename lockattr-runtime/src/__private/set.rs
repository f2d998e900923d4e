//! What `#[redis_lock(name = [..])]` calls: the same functions as
//! [`super`]'s, for a [`LockSetGuard`]. The macro's expansion for a set is
//! the single lock's, with `__private::` read as `__private::set::`.
//! Not a public API.

use std::sync::Arc;

pub use super::{Options, call, default_locker, key_of, lock_failed, typed_body};
pub use crate::{LockError, LockKey, Locker};

use super::{Entered, in_hold, released_or_lost};
use crate::inner::Inner;
use crate::lease::Lease;
use crate::{DEFAULT_EXPIRE, LockSetGuard, reentry};

/// One name of a set written as a format string: a `&'static str` or a
/// `String` (a generic call, so that no conversion is written out in the
/// caller's code).
pub fn name_of<N: Into<String>>(name: N) -> String {
    name.into()
}

/// The guard type `guard = g` binds for a set.
pub type LockGuard = LockSetGuard;

/// The locks of an annotated function's call on a set.
#[derive(Debug)]
pub struct Held {
    guard: LockSetGuard,
    /// A sync call with `reentrant`: its body counts itself inside every
    /// name's lease on its thread ([`enter_hold`]).
    on_thread: bool,
}

impl Held {
    /// The guard (for `guard = g`).
    pub fn guard(&self) -> &LockSetGuard {
        &self.guard
    }

    fn hold_span(&self) -> tracing::Span {
        crate::observe::set_hold_span(self.guard.members())
    }
}

/// Each name once, in the order given.
fn unique(names: &[String]) -> Vec<&str> {
    let mut unique: Vec<&str> = Vec::with_capacity(names.len());
    for name in names {
        if !unique.contains(&name.as_str()) {
            unique.push(name);
        }
    }
    unique
}

/// Acquires for an async function. A nested call whose every name its
/// call chain holds goes straight in (nothing is taken or released; its
/// `expire` and `renew` leave the leases as they are). A nested call that
/// needs some names the chain holds and some it does not is refused with
/// [`LockError::InvalidInput`]: taking the missing names while the chain
/// holds the others is the hold-and-wait a set exists to avoid.
pub async fn acquire(
    locker: &Locker,
    names: &[String],
    options: Options,
) -> Result<Held, LockError> {
    let guard = match reenter(locker, names, options, reentry::find_async) {
        Some(reentry) => reentry?,
        None => builder(locker, names, options)?.acquire().await?,
    };
    Ok(Held {
        guard,
        on_thread: false,
    })
}

/// The reentry of a nested call on `names` with `reentrant`, when `held`
/// finds any of them held by its caller: a guard sharing the leases when it
/// finds them all, refused when it finds some (see [`acquire`]), `None`
/// when it finds none (or the call is not `reentrant`).
fn reenter(
    locker: &Locker,
    names: &[String],
    options: Options,
    held: fn(&Inner, &str) -> Option<Arc<Lease>>,
) -> Option<Result<LockSetGuard, LockError>> {
    if !options.reentrant {
        return None;
    }
    let names = unique(names);
    let found: Vec<(&str, Option<Arc<Lease>>)> =
        names.iter().map(|&n| (n, held(&locker.inner, n))).collect();
    let held = found.iter().filter(|(_, lease)| lease.is_some()).count();
    if held == 0 {
        return None;
    }
    if held == found.len() {
        let mut members = Vec::with_capacity(held);
        for (_, lease) in found {
            let Some(lease) = lease else { continue };
            if let Some(reason) = lease.state().standing().lost() {
                return Some(Err(lease.lost_error(reason)));
            }
            members.push(crate::LockGuard::nested(lease));
        }
        return Some(Ok(LockSetGuard::from_members(members)));
    }
    let missing: Vec<&str> = found
        .iter()
        .filter(|(_, lease)| lease.is_none())
        .map(|(n, _)| *n)
        .collect();
    let present: Vec<&str> = found
        .iter()
        .filter(|(_, lease)| lease.is_some())
        .map(|(n, _)| *n)
        .collect();
    Some(Err(LockError::invalid(
        "lock set",
        format!(
            "a nested call needs {missing:?}, which its caller does not hold, while \
             the caller holds {present:?} of the same set; taking the missing names while \
             holding the others could deadlock against another caller. Take every name \
             in the outermost call, or call with only the names the caller holds"
        ),
    )))
}

fn builder<'a>(
    locker: &'a Locker,
    names: &[String],
    options: Options,
) -> Result<crate::LockSetBuilder<'a>, LockError> {
    if options.hold_at_least.is_some_and(|h| !h.is_zero()) {
        return Err(LockError::invalid(
            "hold_at_least",
            "it is not supported on a lock set",
        ));
    }
    let builder = locker
        .lock_all(names)
        .expire(options.expire.unwrap_or(DEFAULT_EXPIRE))
        .acquire_timeout(options.wait)
        .renew(options.renew)
        .kind(options.kind);
    Ok(match options.renew_for {
        Some(renew_for) => builder.renew_for(renew_for),
        None => builder,
    })
}

/// Runs an async body in the set's `hold` span, with every name added to
/// its call chain's held locks.
pub async fn body<F: Future>(held: &Held, body: F) -> F::Output {
    let leases = held
        .guard
        .is_outermost()
        .then(|| held.guard.leases().cloned().collect());
    in_hold(held.hold_span(), leases, body).await
}

/// Enters the set's `hold` span around a sync body and, with `reentrant`,
/// counts the body inside every name on this thread; both are left when
/// the returned value is dropped.
pub fn enter_hold(held: &Held) -> Entered {
    let leases = held
        .on_thread
        .then(|| held.guard.leases().cloned().collect());
    Entered::new(leases, held.hold_span())
}

/// Runs an async body until it finishes or any name is lost.
pub async fn body_or_lost<F: Future>(held: &Held, body: F) -> Result<F::Output, LockError> {
    let body = self::body(held, body);
    tokio::select! {
        biased;
        output = body => Ok(output),
        lost = held.guard.lost() => Err(lost),
    }
}

/// Releases after an async body; a name no longer owned is a warning.
pub async fn release(held: Held) {
    held.guard.release_or_warn().await;
}

/// Releases after an async body (`on_lost = "error"`): the loss, if a name
/// was lost before the body finished.
pub async fn release_checked(held: Held) -> Option<LockError> {
    let (lost, taken) = (held.guard.lost_in_body(), held.guard.taken_at());
    released_or_lost(held.guard.release().await, lost, "locks", taken)
}

/// Acquires for a sync function. With `reentrant`, as [`acquire`] does for
/// an async call chain, on the names that sync bodies with `reentrant` hold
/// on this thread; the set taken otherwise is held that way in turn. Without
/// it, never a reentry.
pub fn acquire_blocking(
    locker: &Locker,
    names: &[String],
    options: Options,
) -> Result<Held, LockError> {
    let guard = match reenter(locker, names, options, reentry::find_on_thread) {
        Some(reentry) => reentry?,
        None => builder(locker, names, options)?.acquire_blocking()?,
    };
    // With `reentrant`, the set re-entered or taken counts the body on
    // this thread (`enter_hold`).
    Ok(Held {
        guard,
        on_thread: options.reentrant,
    })
}

/// Releases after a sync body (`on_lost = "error"`).
pub fn release_checked_blocking(held: Held) -> Option<LockError> {
    let (lost, taken) = (held.guard.lost_in_body(), held.guard.taken_at());
    released_or_lost(held.guard.release_blocking(), lost, "locks", taken)
}
