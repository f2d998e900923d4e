//! Wake-ups: how a waiter learns, within about half a round trip, that a
//! release handed it the lock.
//!
//! # Why pub/sub with a hand-over, and not polling or a signal list
//!
//! A waiter that sleeps and retries (redis-py, rslock, most peers) leaves a
//! released lock idle until its next try and loads Redis with tries that
//! fail. A list that a release pushes to and waiters pop with BLPOP wakes
//! one waiter at once, but every blocked waiter then holds a connection of
//! its own, and a signal popped by a waiter that has just given up is lost.
//!
//! Here waiters queue in Redis instead (see the acquire and release scripts):
//! a release gives the lock directly to the oldest waiter still within its
//! acquire time, with a new fencing token, and publishes
//! `<that waiter's token>:<fencing token>:<its lease in ms>` on the lock's
//! channel. The channel carries the lock's hash tag: on a Redis Cluster it
//! is a shard channel (SPUBLISH, SSUBSCRIBE on a RESP3 cluster connection;
//! see [`Link`]), so a notice stays on the lock's shard instead of crossing
//! the cluster bus to every node. Each tokio runtime where a Locker's
//! waiters wait has a subscriber connection of its own, opened on that
//! runtime: on one server a RESP3 multiplexed connection
//! ([`Link::Pushed`]), whose task reads a notice as a push and routes it by
//! token to the one waiting task, on the same runtime, which returns at
//! once: it already holds the lock. No subscriber thread and no
//! cross-thread wake-up sit between the release and the waiter. (A server
//! without RESP3, before Redis 6, gets a RESP2 SUBSCRIBE connection on that
//! runtime instead; a Cluster's is a RESP3 cluster connection whose pushes
//! a task of the same runtime routes.) The other waiters make no
//! request: they only move their expiry check to the end of the new
//! holder's lease (which is shorter than the old holder's when the new
//! holder asked for less), so there is no herd, and the queue serves
//! waiters in the order they came.
//!
//! # Registering never blocks a waiter
//!
//! [`Wakeups::watch`] enters a waiter under its owner token and returns at
//! once. The SUBSCRIBE runs in the background (on the subscriber
//! connection's runtime), one task per channel at a time (so eight waiters on one channel send one
//! SUBSCRIBE, not eight in a row), and each waiter of the channel hears
//! [`Wake::Subscribed`] when it is confirmed: from then on no notice is
//! missed, so the waiter asks Redis once more and sleeps. Until then, and
//! whatever happens to the subscription, the waiter keeps its own timers
//! (the holder's lease, its once-a-second check, its deadline): a slow or
//! dead subscriber link never holds a waiter past its acquire time.
//!
//! # A dead link is noticed and replaced
//!
//! While any channel is subscribed, the subscriber connection is sent a
//! `PING` every [`PING_EVERY`]; its socket also has TCP keepalive. A
//! connection that drops, or that does not answer a `PING`, a `SUBSCRIBE`
//! or an `UNSUBSCRIBE` within the response timeout (a half-open socket, a
//! proxy or a firewall that silently stopped passing traffic), is closed
//! once, by generation, whoever noticed first; every waiter on it is
//! then told to ask Redis ([`Wake::Recheck`]) and registers again on a new
//! connection. A connection that fails again and again is reopened after a
//! pause that doubles up to [`MAX_REOPEN_PAUSE`].
//!
//! Messages can be lost (pub/sub is fire-and-forget). Nothing depends on
//! them alone: every waiter also asks Redis at least once a second, when
//! the holder's lease would end, and when its acquire time ends, and Redis's
//! answer is the truth (a waiter that was handed the lock finds its own
//! token there, which the acquire script counts as taken). So a hand-over
//! whose message never arrives costs about a second, not a lease.
//!
//! A channel stays subscribed for [`LINGER`] after its last waiter left, so
//! a lock that is contended again and again does not pay a SUBSCRIBE each
//! time. A server that refuses SUBSCRIBE (an ACL) makes its waiters check
//! the lock often instead ([`Wake::Refused`]).
//!
//! # Files
//!
//! This file keeps the registry: the subscriber side of each runtime
//! ([`Wakeups`]) and the waiters registered on them ([`Waiter`]). Below it,
//! lowest first: `link` (the subscriber connection and its commands),
//! `channel` (the waiters of one channel and what a notice tells each), and
//! `subscriber` (one runtime's subscriber side: its connection, opened,
//! checked and replaced, and the tasks that subscribe, read and unsubscribe
//! its channels). None of them imports this file.
//!
//! [`Link`]: link::Link
//! [`Link::Pushed`]: link::Link::Pushed
//! [`PING_EVERY`]: subscriber::PING_EVERY
//! [`MAX_REOPEN_PAUSE`]: subscriber::MAX_REOPEN_PAUSE
//! [`LINGER`]: subscriber::LINGER

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Instant;

use redis::RedisError;
use tokio::sync::mpsc;

use super::source::Source;
use crate::layout::Notice as HandOver;

use super::shared::Timeouts;
use crate::io;
use crate::sync::lock;

mod channel;
mod link;
mod subscriber;

use channel::Entry;
pub(crate) use channel::Wake;
use link::timed_out;
pub(crate) use subscriber::ShardedClient;
use subscriber::{Shared, State, subscribe, unsubscribe_when_idle};

/// The wake-ups of one Redis server, or of a Redis Cluster, for one Locker.
pub(crate) struct Wakeups {
    /// The settings every subscriber side is made from, and the subscriber
    /// side on the I/O thread, for a waiter outside any tokio runtime
    /// (there is none today: waits run on a runtime, the I/O thread's when
    /// not on the caller's).
    io: Arc<Shared>,
    /// The subscriber side of each tokio runtime where waiters wait, on
    /// that runtime (see [`Link::Pushed`] and [`Link::Sharded`]).
    ///
    /// [`Link::Pushed`]: link::Link::Pushed
    /// [`Link::Sharded`]: link::Link::Sharded
    runtimes: Arc<Runtimes>,
}

/// The subscriber sides of one deployment, by the tokio runtime they run on.
type Runtimes = Mutex<HashMap<tokio::runtime::Id, Arc<Shared>>>;

impl std::fmt::Debug for Wakeups {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wakeups").finish_non_exhaustive()
    }
}

/// A task waiting for a lock: registered under its token until dropped.
pub(crate) struct Waiter {
    shared: Weak<Shared>,
    channel: String,
    token: String,
    serial: u64,
    wake: mpsc::UnboundedReceiver<Wake>,
}

impl Waiter {
    /// The next wake-up. After [`Wake::Handed`], [`Wake::Recheck`] or
    /// [`Wake::Refused`] the waiter is no longer registered: register again
    /// to keep waiting.
    pub(crate) async fn wait(&mut self) -> Wake {
        // A dropped sender means the registry let go of this waiter (the
        // subscription broke, or the Locker is going away): ask Redis.
        self.wake.recv().await.unwrap_or(Wake::Recheck)
    }

    /// [`wait`](Self::wait) as a poll, to wait on several nodes at once.
    pub(crate) fn poll_wait(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<Wake> {
        self.wake
            .poll_recv(cx)
            .map(|wake| wake.unwrap_or(Wake::Recheck))
    }

    /// Forgets the wake-ups heard so far; false when the registry let go of
    /// this waiter (register again).
    pub(crate) fn drain(&mut self) -> bool {
        loop {
            match self.wake.try_recv() {
                Ok(Wake::Recheck | Wake::Refused)
                | Err(mpsc::error::TryRecvError::Disconnected) => return false,
                Ok(_) => {}
                Err(mpsc::error::TryRecvError::Empty) => return true,
            }
        }
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        let Some(shared) = self.shared.upgrade() else {
            return;
        };
        let mut guard = lock(&shared.state);
        let Some(channel) = guard.channels.get_mut(&self.channel) else {
            return;
        };
        if channel
            .waiters
            .get(&self.token)
            .is_some_and(|e| e.serial == self.serial)
        {
            channel.waiters.remove(&self.token);
        }
        if channel.waiters.is_empty() {
            channel.idle_since = Some(Instant::now());
            if !channel.lingering {
                channel.lingering = true;
                let (weak, name) = (Arc::downgrade(&shared), self.channel.clone());
                drop(guard);
                // Fails only when the I/O thread cannot start (or, on a
                // runtime, never); then the channel stays subscribed,
                // which is harmless.
                let _ = shared.spawn(unsubscribe_when_idle(weak, name));
            }
        }
    }
}

impl Wakeups {
    /// The wake-ups of one server, reached through `source`: each runtime
    /// where waiters wait has its own subscriber connection (see
    /// [`Link::Pushed`]).
    ///
    /// [`Link::Pushed`]: link::Link::Pushed
    pub(crate) fn new(source: Source, timeouts: Timeouts) -> Wakeups {
        Wakeups {
            io: Arc::new(Shared::new(vec![source], timeouts)),
            runtimes: Arc::default(),
        }
    }

    /// The wake-ups of a Redis Cluster: on shard channels, through clients
    /// that `client` builds (see [`Shared::sharded`]), or with SUBSCRIBE on
    /// the first of `seeds` that answers; each runtime where waiters wait
    /// has its own.
    pub(crate) fn sharded(
        seeds: Vec<Source>,
        timeouts: Timeouts,
        client: ShardedClient,
    ) -> Wakeups {
        let mut shared = Shared::new(seeds, timeouts);
        shared.sharded = Some(client);
        Wakeups {
            io: Arc::new(shared),
            runtimes: Arc::default(),
        }
    }

    /// The subscriber side where the caller runs: its runtime's (opened on
    /// first use, forgotten when the runtime shuts down), or the I/O
    /// thread's.
    fn here(&self) -> Arc<Shared> {
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return self.io.clone();
        };
        let id = handle.id();
        let mut by_runtime = lock(&self.runtimes);
        if let Some(shared) = by_runtime.get(&id) {
            return shared.clone();
        }
        let shared = Arc::new(self.io.on(handle.clone()));
        by_runtime.insert(id, shared.clone());
        drop(by_runtime);
        io::when_runtime_ends(&handle, Arc::downgrade(&self.runtimes), move |runtimes| {
            lock(runtimes).remove(&id);
        });
        shared
    }

    /// Every subscriber side of this server: the I/O thread's and each
    /// runtime's.
    fn every(&self) -> Vec<Arc<Shared>> {
        let mut all = vec![self.io.clone()];
        all.extend(lock(&self.runtimes).values().cloned());
        all
    }

    /// Enters `token` among the waiters of `channel` of `shared`; `armed`:
    /// the channel is subscribed on the current connection.
    fn enter(
        shared: &Arc<Shared>,
        state: &mut State,
        channel: &str,
        token: &str,
        armed: bool,
    ) -> Waiter {
        let (tx, rx) = mpsc::unbounded_channel();
        state.serial += 1;
        let serial = state.serial;
        let entry = state.channels.entry(channel.to_owned()).or_default();
        entry.waiters.insert(
            token.to_owned(),
            Entry {
                wake: tx,
                armed,
                serial,
            },
        );
        entry.idle_since = None;
        Waiter {
            shared: Arc::downgrade(shared),
            channel: channel.to_owned(),
            token: token.to_owned(),
            serial,
            wake: rx,
        }
    }

    /// A release by this Locker handed the lock to a waiter, with `notice`
    /// (`<token>:<fencing token>:<lease ms>`, as published on `channel`):
    /// when that waiter is one of this Locker's, it hears it now, a thread
    /// hop and a trip through the subscriber connection earlier than the
    /// notice itself (which then finds nobody to wake). The other waiters
    /// hear of the new lease from the notice, as always.
    pub(crate) fn handed_here(&self, channel: &str, notice: &str) {
        let Some(handed) = HandOver::parse(notice) else {
            return;
        };
        for shared in self.every() {
            if let Some(channel) = lock(&shared.state).channels.get_mut(channel) {
                channel.hand_over(&handed);
            }
        }
    }

    /// Registers `token` as waiting on `channel`, if the channel is already
    /// subscribed: then the waiter hears every message published from now on.
    pub(crate) fn register_if_subscribed(&self, channel: &str, token: &str) -> Option<Waiter> {
        let shared = self.here();
        let mut state = lock(&shared.state);
        let current = state.current()?;
        let subscribed = state.channels.get(channel)?.subscribed;
        (subscribed == Some(current))
            .then(|| Self::enter(&shared, &mut state, channel, token, true))
    }

    /// Registers `token` as waiting on `channel` and returns at once; the
    /// channel is subscribed in the background if it is not yet. The waiter
    /// hears [`Wake::Subscribed`] once every notice published from then on
    /// reaches it (at once when the channel already is subscribed),
    /// [`Wake::Recheck`] if the connection breaks first, [`Wake::Refused`]
    /// if Redis refuses to subscribe. Never blocks on Redis.
    pub(crate) fn watch(&self, channel: &str, token: &str) -> Waiter {
        let shared = self.here();
        let mut state = lock(&shared.state);
        let current = state.current();
        let armed = current.is_some()
            && state
                .channels
                .get(channel)
                .is_some_and(|c| c.subscribed == current);
        let waiter = Self::enter(&shared, &mut state, channel, token, armed);
        let entry = state.channels.get_mut(channel).expect("entered just above");
        if armed {
            // Entered after the caller's last look at Redis: it asks once more.
            if let Some(e) = entry.waiters.get(token) {
                let _ = e.wake.send(Wake::Subscribed);
            }
            return waiter;
        }
        if entry.subscribing {
            return waiter;
        }
        entry.subscribing = true;
        drop(state);
        let task = subscribe(Arc::downgrade(&shared), channel.to_owned());
        if shared.spawn(task).is_err() {
            // No I/O thread: nothing can be subscribed; the waiter still
            // asks Redis on its own timers.
            if let Some(entry) = lock(&shared.state).channels.get_mut(channel) {
                entry.subscribing = false;
            }
        }
        waiter
    }

    /// Registers `token` as waiting on `channel` and waits until the channel
    /// is subscribed (at most a connect and a response timeout): the waiter
    /// hears every message published after this returns. An error when the
    /// subscription could not be made in that time.
    pub(crate) async fn register(&self, channel: &str, token: &str) -> Result<Waiter, RedisError> {
        let mut waiter = self.watch(channel, token);
        let limit = self.io.timeouts.connect + self.io.timeouts.response;
        let subscribed = async {
            loop {
                match waiter.wait().await {
                    Wake::Subscribed => return true,
                    Wake::Recheck | Wake::Refused => return false,
                    // Heard before the confirmation: the caller asks Redis
                    // after this returns anyway.
                    Wake::Handed { .. } | Wake::Rearm { .. } | Wake::TryNow => {}
                }
            }
        };
        match tokio::time::timeout(limit, subscribed).await {
            Ok(true) => Ok(waiter),
            Ok(false) => Err(RedisError::from(std::io::Error::other(
                "cannot subscribe to release notices",
            ))),
            Err(_) => Err(timed_out()),
        }
    }
}
