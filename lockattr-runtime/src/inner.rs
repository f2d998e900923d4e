//! [`Inner`]: the state a [`Locker`](crate::Locker) and its clones share.
//!
//! It sits below the guard and the watchdog, which hold it (a lease keeps
//! its Locker alive; the renewal task reaches Redis through it) without
//! depending on the Locker's configuration and builder in `locker.rs`.

use crate::backend::Backend;
use crate::local::LocalQueues;
use crate::watchdog::Watchdog;

/// What every clone of a Locker shares.
pub(crate) struct Inner {
    /// How Redis is reached: one server, a Redlock, or a cluster.
    pub(crate) backend: std::sync::Arc<Backend>,
    /// The prefix of every key.
    pub(crate) prefix: String,
    /// The longest lease a lock may have (`LockerBuilder::max_lease`).
    pub(crate) max_lease: std::time::Duration,
    /// How long a fencing counter outlives a lease
    /// (`LockerBuilder::fence_retention`).
    pub(crate) fence_retention: std::time::Duration,
    /// [`Fairness::Bounded`](crate::Fairness::Bounded)'s time; zero for
    /// [`Fairness::Fifo`](crate::Fairness::Fifo).
    pub(crate) barge: std::time::Duration,
    /// Who this Locker's acquisitions are recorded as holding a lock:
    /// `<host>\n<pid>\n<label>`.
    pub(crate) holder: std::sync::Arc<str>,
    /// The label in `holder`.
    pub(crate) label: String,
    /// Renews the leases of guards acquired with `renew`.
    pub(crate) watchdog: Watchdog,
    /// Where this Locker's tasks that want a lock another of them holds or
    /// waits for wait (see [`crate::local`]).
    pub(crate) local: std::sync::Arc<LocalQueues>,
}
