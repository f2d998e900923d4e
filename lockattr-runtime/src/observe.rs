//! What the library tells about its locks: tracing spans and events under
//! the target `lockattr`, and with the `metrics` feature, metrics labelled
//! by the lock's name template (see the crate docs for the list).
//!
//! Spans and events are built by tracing's macros, which do nothing (no
//! field is formatted) when no subscriber wants them. Fields carry lock
//! names, fencing tokens, durations and errors; never an owner token (a
//! capability: it can delete the lock) nor a server's password.
//!
//! Without the `metrics` feature every metric call here is an empty
//! function, and [`Kind`] holds nothing.

use std::borrow::Cow;
use std::time::{Duration, Instant};

use tracing::Span;
use tracing::field::Empty;

use crate::{LockError, LostReason};

/// What an acquisition's end reports of the guard it returns (the guard
/// types live above this file and implement it).
pub(crate) trait Granted {
    /// The lock's name.
    fn name(&self) -> &str;
    /// The fencing token it was granted.
    fn fencing_token(&self) -> u64;
}

/// The label of a lock's metrics: its name template (`"order:{order_id}"`),
/// a kind set with `LockBuilder::kind`, or the name's part before its first
/// `:`. Never the full name, which would make one series per lock.
#[derive(Debug, Clone)]
pub(crate) struct Kind {
    #[cfg(feature = "metrics")]
    label: metrics::SharedString,
}

impl Kind {
    /// The kind given, or the part of `name` before its first `:` (the
    /// whole name when it has none). A kind made at run time is shared, so
    /// every metric call clones a pointer, not the text.
    #[cfg(feature = "metrics")]
    pub(crate) fn of(given: Option<Cow<'static, str>>, name: &str) -> Kind {
        use std::sync::Arc;
        let label = match given {
            Some(Cow::Borrowed(kind)) => metrics::SharedString::const_str(kind),
            Some(Cow::Owned(kind)) => metrics::SharedString::from(Arc::<str>::from(kind)),
            None => {
                let before = name.split_once(':').map_or(name, |(kind, _)| kind);
                metrics::SharedString::from(Arc::<str>::from(before))
            }
        };
        Kind { label }
    }

    /// Nothing without the `metrics` feature.
    #[cfg(not(feature = "metrics"))]
    pub(crate) fn of(_given: Option<Cow<'static, str>>, _name: &str) -> Kind {
        Kind {}
    }

    /// The one kind of a lock set, for its acquisition and for every name
    /// it holds: the kind given (the attribute's `"[a:{x}, b:{y}]"`), or
    /// the distinct kinds of its names ([`of`](Self::of) without a given
    /// kind), sorted, in brackets: `[account]` for `account:1` and
    /// `account:2`, `[account, order]` for `order:7` and `account:1`.
    ///
    /// A set waits once for all its names, so its wait is one observation
    /// under one label, apart from the single locks' series (`account`):
    /// counted once per name, one caller's wait would count as several and
    /// a set's waits would skew the quantiles of the single locks. Sorted
    /// and without repeats, the label does not grow with the set's size or
    /// order, so the number of series stays bounded.
    #[cfg(feature = "metrics")]
    pub(crate) fn of_set(given: Option<Cow<'static, str>>, names: &[String]) -> Kind {
        if given.is_some() {
            return Kind::of(given, "");
        }
        Kind::of(Some(Cow::Owned(set_label(names))), "")
    }

    /// Nothing without the `metrics` feature.
    #[cfg(not(feature = "metrics"))]
    pub(crate) fn of_set(_given: Option<Cow<'static, str>>, _names: &[String]) -> Kind {
        Kind {}
    }
}

/// The label of a set without a given kind: its names' kinds (the part
/// before the first `:`), sorted, each once, in brackets.
#[cfg(feature = "metrics")]
fn set_label(names: &[String]) -> String {
    let mut kinds: Vec<&str> = names
        .iter()
        .map(|name| name.split_once(':').map_or(name.as_str(), |(kind, _)| kind))
        .collect();
    kinds.sort_unstable();
    kinds.dedup();
    format!("[{}]", kinds.join(", "))
}

/// One acquisition: its `acquire` span, and the wait it measures. Dropped
/// before [`finish`](Self::finish) (the caller stopped waiting), it ends
/// with the outcome `cancelled`.
pub(crate) struct Acquiring {
    span: Span,
    start: Instant,
    kind: Kind,
    done: bool,
}

impl Acquiring {
    /// Opens the `acquire` span of lock `name`; the caller counts as
    /// waiting until the acquisition ends.
    pub(crate) fn start(name: &str, kind: Kind) -> Acquiring {
        let span = tracing::debug_span!(
            target: "lockattr",
            "acquire",
            lock = %name,
            waited_ms = Empty,
            outcome = Empty,
        );
        metered::waiting(&kind, 1.0);
        Acquiring {
            span,
            start: Instant::now(),
            kind,
            done: false,
        }
    }

    /// The span, to instrument the acquisition with.
    pub(crate) fn span(&self) -> &Span {
        &self.span
    }

    /// The kind, for the lease.
    pub(crate) fn kind(&self) -> &Kind {
        &self.kind
    }

    /// Records how the acquisition ended (`handed`: a release handed the
    /// lock over while this caller waited) and returns its guard.
    pub(crate) fn finish<G: Granted>(
        mut self,
        outcome: Result<(G, bool), LockError>,
    ) -> Result<G, LockError> {
        let waited = self.conclude(outcome.as_ref().map(|(_, handed)| *handed));
        if let Ok((guard, true)) = &outcome {
            tracing::debug!(
                target: "lockattr",
                parent: &self.span,
                lock = %guard.name(),
                fencing_token = guard.fencing_token(),
                waited_ms = whole_ms(waited),
                "lock handed over by its releasing holder",
            );
        }
        outcome.map(|(guard, _)| guard)
    }

    /// [`finish`](Self::finish) for a lock set: its outcome is `acquired`
    /// (a set takes its names in one last attempt, never by a hand-over),
    /// `timeout` or `error`.
    pub(crate) fn finish_set<S>(mut self, outcome: Result<S, LockError>) -> Result<S, LockError> {
        self.conclude(outcome.as_ref().map(|_| false));
        outcome
    }

    /// Records the end of the wait and counts the acquisition, hand-over
    /// or timeout; how long it waited.
    fn conclude(&mut self, outcome: Result<bool, &LockError>) -> Duration {
        let waited = self.end(match outcome {
            Ok(true) => "handed_over",
            Ok(false) => "acquired",
            Err(LockError::Timeout { .. }) => "timeout",
            Err(_) => "error",
        });
        match outcome {
            Ok(handed) => {
                if handed {
                    metered::count(metered::HANDOVERS, &self.kind);
                }
                metered::count(metered::ACQUISITIONS, &self.kind);
            }
            Err(LockError::Timeout { .. }) => metered::count(metered::TIMEOUTS, &self.kind),
            Err(_) => {}
        }
        waited
    }

    /// Closes the wait with `outcome`; how long it took.
    fn end(&mut self, outcome: &'static str) -> Duration {
        self.done = true;
        let waited = self.start.elapsed();
        self.span.record("waited_ms", whole_ms(waited));
        self.span.record("outcome", outcome);
        metered::waiting(&self.kind, -1.0);
        metered::waited(&self.kind, outcome, waited);
        waited
    }
}

impl Drop for Acquiring {
    fn drop(&mut self) {
        if !self.done {
            self.end("cancelled");
        }
    }
}

/// The `hold` span of an annotated function's body.
pub(crate) fn hold_span(name: &str, fencing_token: u64) -> Span {
    tracing::debug_span!(target: "lockattr", "hold", lock = %name, fencing_token)
}

/// The `hold` span of the body of a function annotated with a set of
/// names: `lock` lists the names as the set's `acquire` span does (in the
/// order they were taken in), `fencing_tokens` their tokens in the same
/// order (`"12, 7"`). A field of its own rather than `fencing_token`, which
/// is a number: a log store that types its fields would refuse the text.
pub(crate) fn set_hold_span<'a>(members: impl Iterator<Item = (&'a str, u64)>) -> Span {
    let (names, tokens): (Vec<&str>, Vec<String>) = members
        .map(|(name, token)| (name, token.to_string()))
        .unzip();
    tracing::debug_span!(
        target: "lockattr",
        "hold",
        lock = %names.join(", "),
        fencing_tokens = %tokens.join(", "),
    )
}

/// Who holds a lease, for what is reported about it after the acquisition:
/// its loss, renewal failures, and (with `metrics`) how long it was held.
#[derive(Debug)]
pub(crate) struct Report {
    name: String,
    kind: Kind,
    #[cfg(feature = "metrics")]
    since: Option<Instant>,
}

impl Report {
    pub(crate) fn new(name: String, kind: Kind) -> Report {
        Report {
            name,
            kind,
            #[cfg(feature = "metrics")]
            since: None,
        }
    }

    /// The lock was granted now: it counts as held until
    /// [`released`](Self::released).
    pub(crate) fn granted(&mut self) {
        #[cfg(feature = "metrics")]
        {
            self.since = Some(Instant::now());
            metered::held(&self.kind, 1.0);
        }
    }

    /// Its guard released it (or was dropped): no longer held.
    pub(crate) fn released(&self) {
        #[cfg(feature = "metrics")]
        if let Some(since) = self.since {
            metered::held(&self.kind, -1.0);
            metered::hold(&self.kind, since.elapsed());
        }
    }

    /// The guard found its lock lost (once per lease).
    pub(crate) fn lost(&self, reason: LostReason) {
        tracing::warn!(
            target: "lockattr",
            lock = %self.name,
            reason = reason.code(),
            "lock lost: {reason}",
        );
        metered::lost(&self.kind, reason);
    }

    /// Renewal stopped at its `renew_for` cap, with `left` of the lease
    /// surely left (once per lease).
    pub(crate) fn renewal_capped(&self, renew_for: Duration, left: Duration) {
        tracing::info!(
            target: "lockattr",
            lock = %self.name,
            renew_for_ms = whole_ms(renew_for),
            left_ms = whole_ms(left),
            "lock renewal stopped: renew_for has passed since the lock was taken; the lease runs out unless released first",
        );
    }

    /// A renewal of the lease failed (it is retried while the lease lasts).
    pub(crate) fn renewal_failed(&self, error: &LockError) {
        tracing::debug!(
            target: "lockattr",
            lock = %self.name,
            error = %error,
            "could not renew the lock; retrying",
        );
        metered::count(metered::RENEWAL_FAILURES, &self.kind);
    }
}

/// Whole milliseconds, saturating.
fn whole_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The metrics, through the `metrics` facade.
#[cfg(feature = "metrics")]
mod metered {
    use std::sync::Once;
    use std::time::Duration;

    use metrics::Unit;

    use super::Kind;
    use crate::LostReason;

    pub(super) const ACQUISITIONS: &str = "lockattr_acquisitions_total";
    pub(super) const TIMEOUTS: &str = "lockattr_acquire_timeouts_total";
    pub(super) const LOSSES: &str = "lockattr_losses_total";
    pub(super) const HANDOVERS: &str = "lockattr_handovers_total";
    pub(super) const RENEWAL_FAILURES: &str = "lockattr_renewal_failures_total";
    const WAIT: &str = "lockattr_wait_seconds";
    const HOLD: &str = "lockattr_hold_seconds";
    const HELD: &str = "lockattr_held_locks";
    const WAITING: &str = "lockattr_waiting_tasks";

    /// Describes the metrics to the recorder, once (the first time a lock
    /// is taken).
    fn describe() {
        static DESCRIBED: Once = Once::new();
        DESCRIBED.call_once(|| {
            metrics::describe_counter!(ACQUISITIONS, Unit::Count, "Locks acquired");
            metrics::describe_counter!(
                TIMEOUTS,
                Unit::Count,
                "Acquisitions that gave up: the lock stayed held for the whole acquire timeout"
            );
            metrics::describe_counter!(LOSSES, Unit::Count, "Held locks found lost");
            metrics::describe_counter!(
                HANDOVERS,
                Unit::Count,
                "Locks handed over by a release to a waiter"
            );
            metrics::describe_counter!(
                RENEWAL_FAILURES,
                Unit::Count,
                "Renewals of a lease that failed (retried while the lease lasts)"
            );
            metrics::describe_histogram!(
                WAIT,
                Unit::Seconds,
                "Time spent acquiring a lock, by outcome"
            );
            metrics::describe_histogram!(
                HOLD,
                Unit::Seconds,
                "Time from acquiring a lock to releasing it"
            );
            metrics::describe_gauge!(HELD, Unit::Count, "Locks held now");
            metrics::describe_gauge!(WAITING, Unit::Count, "Callers acquiring a lock now");
        });
    }

    pub(super) fn count(name: &'static str, kind: &Kind) {
        metrics::counter!(name, "lock" => kind.label.clone()).increment(1);
    }

    pub(super) fn waiting(kind: &Kind, by: f64) {
        describe();
        metrics::gauge!(WAITING, "lock" => kind.label.clone()).increment(by);
    }

    pub(super) fn waited(kind: &Kind, outcome: &'static str, waited: Duration) {
        metrics::histogram!(WAIT, "lock" => kind.label.clone(), "outcome" => outcome)
            .record(waited.as_secs_f64());
    }

    pub(super) fn held(kind: &Kind, by: f64) {
        metrics::gauge!(HELD, "lock" => kind.label.clone()).increment(by);
    }

    pub(super) fn hold(kind: &Kind, held: Duration) {
        metrics::histogram!(HOLD, "lock" => kind.label.clone()).record(held.as_secs_f64());
    }

    pub(super) fn lost(kind: &Kind, reason: LostReason) {
        metrics::counter!(LOSSES, "lock" => kind.label.clone(), "reason" => reason.code())
            .increment(1);
    }
}

/// Without the `metrics` feature: nothing.
#[cfg(not(feature = "metrics"))]
mod metered {
    use std::time::Duration;

    use super::Kind;
    use crate::LostReason;

    pub(super) const ACQUISITIONS: &str = "";
    pub(super) const TIMEOUTS: &str = "";
    pub(super) const HANDOVERS: &str = "";
    pub(super) const RENEWAL_FAILURES: &str = "";

    pub(super) fn count(_name: &'static str, _kind: &Kind) {}
    pub(super) fn waiting(_kind: &Kind, _by: f64) {}
    pub(super) fn waited(_kind: &Kind, _outcome: &'static str, _waited: Duration) {}
    pub(super) fn lost(_kind: &Kind, _reason: LostReason) {}
}

#[cfg(all(test, feature = "metrics"))]
mod tests {
    use super::*;

    fn label(given: Option<Cow<'static, str>>, name: &str) -> String {
        (*Kind::of(given, name).label).to_owned()
    }

    #[test]
    fn a_kind_is_given_or_the_name_before_its_first_colon() {
        assert_eq!(label(None, "order:7"), "order");
        assert_eq!(label(None, "cart:42:items"), "cart");
        assert_eq!(label(None, "singleton"), "singleton");
        assert_eq!(label(Some("user".into()), "7"), "user");
        assert_eq!(label(Some(String::from("user").into()), "7"), "user");
    }

    fn set_label(given: Option<Cow<'static, str>>, names: &[&str]) -> String {
        let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        (*Kind::of_set(given, &names).label).to_owned()
    }

    #[test]
    fn a_set_is_one_label_of_its_kinds_sorted_without_repeats() {
        assert_eq!(set_label(None, &["account:1", "account:2"]), "[account]");
        assert_eq!(
            set_label(None, &["order:7", "account:1", "order:8"]),
            "[account, order]"
        );
        assert_eq!(set_label(None, &["b", "a"]), "[a, b]");
        assert_eq!(
            set_label(Some("[a:{x}, b:{y}]".into()), &["a:1", "b:2"]),
            "[a:{x}, b:{y}]"
        );
    }
}
