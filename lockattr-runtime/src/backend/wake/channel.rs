//! The waiters of one channel ([`Channel`]), each under its owner token,
//! and what each hears of a release notice ([`Wake`]).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use crate::backend::shared::RECHECK;
use crate::layout::Notice as HandOver;

/// What a waiter hears.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Wake {
    /// A release handed this waiter the lock, with this fencing token.
    Handed { fencing_token: u64 },
    /// The lock's channel is subscribed: every notice published from now on
    /// reaches this waiter. One that was published before may have been
    /// missed: ask Redis once more.
    Subscribed,
    /// The subscription broke, so a message may have been missed: ask
    /// Redis. The waiter is no longer registered: register again to keep
    /// waiting.
    Recheck,
    /// Redis refused to subscribe (an ACL, a renamed command): no notice
    /// will come, so check the lock often. The waiter is no longer
    /// registered.
    Refused,
    /// A release handed the lock to another waiter, whose lease is this
    /// long: the time to check for a crashed holder moves to its end.
    Rearm { lease: Duration },
    /// A release left the lock free for newcomers (the Locker's
    /// [`Fairness`](crate::Fairness) let it), and this waiter, the oldest,
    /// may take it: ask Redis now. The waiter stays registered.
    TryNow,
}

#[derive(Default)]
pub(super) struct Channel {
    /// The waiting tasks, by owner token.
    pub(super) waiters: HashMap<String, Entry>,
    /// The generation of the connection this channel is subscribed on.
    pub(super) subscribed: Option<u64>,
    /// A background task is subscribing this channel.
    pub(super) subscribing: bool,
    /// Serializes SUBSCRIBE and UNSUBSCRIBE of this channel, so they reach
    /// Redis in the order the registry decided them.
    pub(super) changing: Arc<tokio::sync::Mutex<()>>,
    /// When the last waiter left (None while some wait).
    pub(super) idle_since: Option<Instant>,
    /// An unsubscribe is scheduled.
    pub(super) lingering: bool,
}

/// One registered waiter.
pub(super) struct Entry {
    pub(super) wake: mpsc::UnboundedSender<Wake>,
    /// Told [`Wake::Subscribed`] (or registered on a subscribed channel).
    pub(super) armed: bool,
    pub(super) serial: u64,
}

impl Channel {
    /// Tells the waiter that `handed` names, if it waits here, that it holds
    /// the lock, and forgets it.
    pub(super) fn hand_over(&mut self, handed: &HandOver<'_>) {
        if handed.is_try_now() {
            if let Some(waiter) = self.waiters.get(handed.token) {
                let _ = waiter.wake.send(Wake::TryNow);
            }
            return;
        }
        if let Some(waiter) = self.waiters.remove(handed.token) {
            // The waiter may have just given up; its exit asks Redis anyway.
            let _ = waiter.wake.send(Wake::Handed {
                fencing_token: handed.fencing_token,
            });
        }
    }

    /// Routes a notice. A notice that names no waiter (`-`: a Redlock's
    /// release, or a release within `hold_at_least`) reaches every waiter
    /// as [`Wake::Rearm`]. A hand-over wakes the waiter it names; the
    /// others hear of the new lease only when it is shorter than
    /// [`RECHECK`].
    ///
    /// Those others are queued waiters (only one server and a cluster hand
    /// over), which ask Redis again within `RECHECK` of their last request
    /// anyway: a longer lease cannot bring their next check forward; it
    /// could only move a check due at the end of the previous holder's
    /// (short) lease to later, sparing one script call. Not worth waking
    /// every waiting task of the process at every hand-over: with many
    /// processes contending, those wake-ups cost more than the lock.
    pub(super) fn route(&mut self, handed: &HandOver<'_>) {
        self.hand_over(handed);
        if handed.is_try_now() {
            // Nobody holds the lock: no lease to watch; the others keep
            // their place and their timers.
            return;
        }
        if handed.token == "-" || handed.lease < RECHECK {
            for waiter in self.waiters.values() {
                let _ = waiter.wake.send(Wake::Rearm {
                    lease: handed.lease,
                });
            }
        }
    }

    /// The channel is no longer subscribed: a notice may have been missed,
    /// so every waiter asks Redis, and registers again to keep waiting.
    pub(super) fn unsubscribed(&mut self) {
        self.subscribed = None;
        for (_, waiter) in self.waiters.drain() {
            let _ = waiter.wake.send(Wake::Recheck);
        }
    }

    /// Tells every waiter not yet armed that the channel is subscribed.
    pub(super) fn arm(&mut self) {
        for entry in self.waiters.values_mut().filter(|e| !e.armed) {
            entry.armed = true;
            let _ = entry.wake.send(Wake::Subscribed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A channel with two waiters, "a" and "b", and their wake-ups.
    fn two_waiters() -> (Channel, [mpsc::UnboundedReceiver<Wake>; 2]) {
        let mut channel = Channel::default();
        let mut receivers = Vec::new();
        for (serial, token) in ["a", "b"].into_iter().enumerate() {
            let (wake, rx) = mpsc::unbounded_channel();
            let serial = serial as u64;
            let armed = true;
            channel.waiters.insert(
                token.into(),
                Entry {
                    wake,
                    armed,
                    serial,
                },
            );
            receivers.push(rx);
        }
        (channel, receivers.try_into().ok().unwrap())
    }

    #[test]
    fn a_hand_over_wakes_the_others_only_for_a_lease_shorter_than_a_recheck() {
        // A long lease: "a" holds the lock; "b" is not woken at all.
        let (mut channel, [mut a, mut b]) = two_waiters();
        channel.route(&HandOver::parse("a:7:10000").unwrap());
        assert!(matches!(
            a.try_recv(),
            Ok(Wake::Handed { fencing_token: 7 })
        ));
        assert!(b.try_recv().is_err());
        assert!(!channel.waiters.contains_key("a"));
        // A short lease: "b" moves its next check to its end.
        let (mut channel, [mut a, mut b]) = two_waiters();
        channel.route(&HandOver::parse("a:8:300").unwrap());
        assert!(matches!(a.try_recv(), Ok(Wake::Handed { .. })));
        assert!(matches!(b.try_recv(), Ok(Wake::Rearm { lease }) if lease.as_millis() == 300));
        // A release that left the lock free for newcomers: only the oldest
        // waiter asks now, and stays registered.
        let (mut channel, [mut a, mut b]) = two_waiters();
        channel.route(&HandOver::parse("a:0:0").unwrap());
        assert!(matches!(a.try_recv(), Ok(Wake::TryNow)));
        assert!(b.try_recv().is_err());
        assert!(channel.waiters.contains_key("a"));
        // Notices naming nobody reach everyone, whatever the time: a
        // Redlock's release, and a release within `hold_at_least`.
        for (notice, ms) in [("-:0:0", 0), ("-:0:10000", 10_000)] {
            let (mut channel, [mut a, mut b]) = two_waiters();
            channel.route(&HandOver::parse(notice).unwrap());
            for rx in [&mut a, &mut b] {
                assert!(
                    matches!(rx.try_recv(), Ok(Wake::Rearm { lease }) if lease.as_millis() == ms)
                );
            }
        }
    }

    #[test]
    fn hand_over_notices_parse() {
        let handed = HandOver::parse("abc:42:1500").unwrap();
        assert_eq!(handed.token, "abc");
        assert_eq!(handed.fencing_token, 42);
        assert_eq!(handed.lease, Duration::from_millis(1500));
        assert!(HandOver::parse("abc:x:1").is_none());
    }
}
