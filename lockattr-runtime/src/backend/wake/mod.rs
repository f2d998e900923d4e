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

use std::collections::HashMap;
use std::future::poll_fn;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use futures_core::Stream;
use redis::aio::PubSubStream;
use redis::cluster::ClusterClient;
use redis::{AsyncConnectionConfig, Client, PushInfo, PushKind, RedisError, RedisResult};
use tokio::sync::{mpsc, oneshot};

use super::source::Source;
use crate::layout::Notice as HandOver;

use super::shared::{FALLBACK_PAUSE, Timeouts};
use crate::io;
use crate::sync::lock;

mod channel;
mod link;

pub(crate) use channel::Wake;
use channel::{Channel, Entry};
use link::{Link, broken, timed_out, unsupported, with_keepalive, within};

/// How long a channel stays subscribed after its last waiter left.
const LINGER: Duration = Duration::from_secs(2);

/// How often the subscriber connection is checked with a `PING` while a
/// channel is subscribed on it.
const PING_EVERY: Duration = Duration::from_secs(1);

/// The longest pause before opening a subscriber connection again after
/// failures in a row (connections that could not be opened, or that were
/// closed for not answering).
const MAX_REOPEN_PAUSE: Duration = Duration::from_secs(2);

/// The wake-ups of one Redis server, or of a Redis Cluster, for one Locker.
pub(crate) struct Wakeups {
    /// The settings every subscriber side is made from, and the subscriber
    /// side on the I/O thread, for a waiter outside any tokio runtime
    /// (there is none today: waits run on a runtime, the I/O thread's when
    /// not on the caller's).
    io: Arc<Shared>,
    /// The subscriber side of each tokio runtime where waiters wait, on
    /// that runtime (see [`Link::Pushed`] and [`Link::Sharded`]).
    runtimes: Arc<Runtimes>,
}

/// The subscriber sides of one deployment, by the tokio runtime they run on.
type Runtimes = Mutex<HashMap<tokio::runtime::Id, Arc<Shared>>>;

/// Builds a Redis Cluster client on RESP3 whose pushes (the shard
/// messages, and the connections' losses) go to the sender given.
pub(crate) type ShardedClient =
    Arc<dyn Fn(mpsc::UnboundedSender<PushInfo>) -> RedisResult<ClusterClient> + Send + Sync>;

/// What the Wakeups share with their background tasks (which hold it weakly,
/// so that dropping the Wakeups stops them and closes the connection).
struct Shared {
    /// Where to subscribe: the first that answers (several seeds of a
    /// Redis Cluster, where a PUBLISH reaches every node).
    sources: Vec<Source>,
    /// A Redis Cluster's: channels are subscribed with SSUBSCRIBE on a
    /// cluster connection, each on the shard serving its slot, where the
    /// scripts publish with SPUBLISH. `None`, or a cluster that refuses
    /// RESP3 or SSUBSCRIBE: SUBSCRIBE on the first of `sources`.
    sharded: Option<ShardedClient>,
    timeouts: Timeouts,
    /// The runtime that runs the subscriber connection and its tasks, and
    /// where its waiters wait: its connection is a RESP3 one whose pushes
    /// wake them right there (see [`Link::Pushed`]). `None`: the I/O thread.
    home: Option<tokio::runtime::Handle>,
    state: Mutex<State>,
    /// Held while opening the subscriber connection.
    connecting: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for Wakeups {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wakeups").finish_non_exhaustive()
    }
}

#[derive(Default)]
struct State {
    /// The subscriber connection, if open, and its generation.
    sink: Option<(u64, Link)>,
    /// The server refused RESP3 (before Redis 6), or the cluster refused
    /// RESP3 or SSUBSCRIBE: subscribe with SUBSCRIBE on a connection of its
    /// own from now on (a cluster's scripts, refused SPUBLISH, publish with
    /// PUBLISH).
    published_only: bool,
    /// Generations of subscriber connections opened so far.
    generation: u64,
    channels: HashMap<String, Channel>,
    /// Dropped with the Wakeups, or when the connection is closed: stops
    /// the reader, which closes the connection.
    stop: Option<oneshot::Sender<()>>,
    /// Failures in a row: connections that could not be opened, or were
    /// closed for not answering. Reset by any answer on a connection.
    failures: u32,
    /// No new connection is opened before this.
    reopen_at: Option<Instant>,
    /// Numbers the registrations, so that a waiter's Drop removes its own
    /// entry and no later one under the same token.
    serial: u64,
}

impl State {
    fn current(&self) -> Option<u64> {
        self.sink.as_ref().map(|(generation, _)| *generation)
    }

    /// One more failure in a row: the next connection waits a little longer.
    fn failed(&mut self) {
        self.failures = self.failures.saturating_add(1);
        self.reopen_at = Some(Instant::now() + reopen_pause(self.failures));
    }

    /// The connection answered: the next one, if needed, opens at once.
    fn answered(&mut self) {
        self.failures = 0;
        self.reopen_at = None;
    }
}

/// The pause before opening a connection after `failures` failures in a
/// row: none after the first (a dead link is replaced at once), then
/// 100 ms doubling up to [`MAX_REOPEN_PAUSE`].
fn reopen_pause(failures: u32) -> Duration {
    if failures <= 1 {
        return Duration::ZERO;
    }
    let doublings = (failures - 2).min(8);
    (Duration::from_millis(100) * (1_u32 << doublings)).min(MAX_REOPEN_PAUSE)
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

impl Shared {
    /// The subscriber side on the I/O thread, subscribing through
    /// `sources`.
    fn new(sources: Vec<Source>, timeouts: Timeouts) -> Shared {
        Shared {
            sources: sources
                .into_iter()
                .map(|source| match source {
                    Source::Fixed(client) => Source::Fixed(Box::new(with_keepalive(*client))),
                    sentinel @ Source::Sentinel(_) => sentinel,
                })
                .collect(),
            sharded: None,
            timeouts,
            home: None,
            state: Mutex::default(),
            connecting: tokio::sync::Mutex::new(()),
        }
    }

    /// A subscriber side like this one, on the runtime of `home`.
    fn on(&self, home: tokio::runtime::Handle) -> Shared {
        Shared {
            sources: self.sources.clone(),
            sharded: self.sharded.clone(),
            timeouts: self.timeouts,
            home: Some(home),
            state: Mutex::default(),
            connecting: tokio::sync::Mutex::new(()),
        }
    }

    /// Runs `fut` where this subscriber side lives: its runtime, or the
    /// I/O thread.
    fn spawn<F>(&self, fut: F) -> Result<(), crate::LockError>
    where
        F: Future<Output = ()> + Send + 'static,
    {
        match &self.home {
            // On a runtime that has shut down, the task is dropped unrun:
            // its waiters went with the runtime.
            Some(home) => drop(home.spawn(fut)),
            None => io::spawn(fut)?,
        }
        Ok(())
    }

    /// The subscriber connection, opened if needed (after the pause that
    /// failures in a row call for). Runs where this side lives (see
    /// `home`): the connection's I/O task runs where it was opened.
    async fn connection(self: &Arc<Self>) -> Result<(u64, Link), RedisError> {
        if let Some(sink) = lock(&self.state).sink.clone() {
            return Ok(sink);
        }
        let _connecting = self.connecting.lock().await;
        let reopen_at = {
            let state = lock(&self.state);
            if let Some(sink) = state.sink.clone() {
                return Ok(sink);
            }
            state.reopen_at
        };
        if let Some(at) = reopen_at {
            tokio::time::sleep_until(at.into()).await;
        }
        let published_only = lock(&self.state).published_only;
        let resp3 = if published_only {
            None
        } else if let Some(client) = &self.sharded {
            Some(self.open_sharded(client).await)
        } else if self.home.is_some() {
            Some(self.open_pushed().await)
        } else {
            None
        };
        match resp3 {
            Some(Ok(link)) => return Ok(link),
            // No RESP3 (`HELLO`) before Redis 6: channels are subscribed
            // with SUBSCRIBE on a connection of their own.
            Some(Err(e)) if unsupported(&e) => self.publish_only(&e),
            Some(Err(e)) => {
                tracing::debug!(target: "lockattr", error = %e, "cannot open the subscriber connection");
                lock(&self.state).failed();
                return Err(e);
            }
            None => {}
        }
        let mut last = None;
        for source in &self.sources {
            let client = match source {
                Source::Fixed(client) => (**client).clone(),
                Source::Sentinel(_) => match source.client(self.timeouts.locate()).await {
                    Ok(client) => with_keepalive(client),
                    Err(e) => {
                        last = Some(e);
                        continue;
                    }
                },
            };
            match within(self.timeouts.connect, client.get_async_pubsub()).await {
                Ok(pubsub) => return Ok(self.install_published(pubsub)),
                Err(e) => last = Some(e),
            }
        }
        let e = last.unwrap_or_else(|| {
            RedisError::from(std::io::Error::other("no server to subscribe on"))
        });
        tracing::debug!(target: "lockattr", error = %e, "cannot open the subscriber connection");
        lock(&self.state).failed();
        Err(e)
    }

    /// Opens a Redis Cluster connection on RESP3 (see [`Link::Sharded`])
    /// and makes it the subscriber connection.
    async fn open_sharded(self: &Arc<Self>, client: &ShardedClient) -> RedisResult<(u64, Link)> {
        let (pushes, received) = mpsc::unbounded_channel();
        let client = client(pushes)?;
        let connection = within(self.timeouts.connect, client.get_async_connection()).await?;
        let link = Link::Sharded(connection);
        Ok(self.install(link, |weak, generation, stopped| {
            self.spawn(read_pushes(weak, generation, received, stopped))
        }))
    }

    /// Opens one server's multiplexed connection on RESP3 (see
    /// [`Link::Pushed`]) on this side's runtime, and makes it the
    /// subscriber connection.
    async fn open_pushed(self: &Arc<Self>) -> RedisResult<(u64, Link)> {
        let source = self
            .sources
            .first()
            .ok_or_else(|| RedisError::from(std::io::Error::other("no server to subscribe on")))?;
        let client = match source {
            Source::Fixed(client) => (**client).clone(),
            Source::Sentinel(_) => with_keepalive(source.client(self.timeouts.locate()).await?),
        };
        let info = client.get_connection_info().clone();
        let settings = info
            .redis_settings()
            .clone()
            .set_protocol(redis::ProtocolVersion::RESP3);
        let client = Client::open(info.set_redis_settings(settings))?;
        // Known once the connection is installed; a push before that (a
        // lost connection) finds no generation, and the first SUBSCRIBE
        // on it fails instead.
        let generation = Arc::new(AtomicU64::new(0));
        let pushes = {
            let (weak, generation) = (Arc::downgrade(self), generation.clone());
            move |push: PushInfo| -> Result<(), std::convert::Infallible> {
                if let Some(shared) = weak.upgrade() {
                    shared.pushed(generation.load(Ordering::Acquire), push);
                }
                Ok(())
            }
        };
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.timeouts.connect))
            .set_response_timeout(Some(self.timeouts.response))
            .set_push_sender(pushes);
        let connection = within(
            self.timeouts.connect,
            client.get_multiplexed_async_connection_with_config(&config),
        )
        .await?;
        Ok(self.install(Link::Pushed(connection), |_, installed, _| {
            generation.store(installed, Ordering::Release);
            Ok(())
        }))
    }

    /// The server refused RESP3, or the cluster refused RESP3 or
    /// SSUBSCRIBE, with `e`: channels are subscribed with SUBSCRIBE from
    /// now on.
    fn publish_only(&self, e: &RedisError) {
        tracing::debug!(target: "lockattr",
            error = %e,
            "Redis does not take subscriptions on RESP3 here; waiters subscribe with SUBSCRIBE on a connection of their own"
        );
        lock(&self.state).published_only = true;
    }

    /// Makes `pubsub` the subscriber connection, with its reader and its
    /// health check.
    fn install_published(self: &Arc<Self>, pubsub: redis::aio::PubSub) -> (u64, Link) {
        let (sink, stream) = pubsub.split();
        self.install(Link::Published(sink), |weak, generation, stopped| {
            self.spawn(read(weak, generation, stream, stopped))
        })
    }

    /// Makes `link` the subscriber connection, with its reader (which
    /// `reader` starts) and its health check.
    fn install(
        self: &Arc<Self>,
        link: Link,
        reader: impl FnOnce(Weak<Shared>, u64, oneshot::Receiver<()>) -> Result<(), crate::LockError>,
    ) -> (u64, Link) {
        let (stop, stopped) = oneshot::channel();
        let generation = {
            let mut state = lock(&self.state);
            state.generation += 1;
            state.sink = Some((state.generation, link.clone()));
            state.stop = Some(stop);
            state.generation
        };
        let weak = Arc::downgrade(self);
        let started = reader(weak.clone(), generation, stopped)
            .and_then(|()| self.spawn(check_health(weak, generation, link.clone())));
        if started.is_err() {
            self.lost(generation, true);
        }
        (generation, link)
    }

    /// Subscriber connection `generation` ended, or is closed now because
    /// it did not answer (`unanswered`): forget it and every subscription on
    /// it, and tell every waiter to ask Redis. Once per generation: later
    /// calls for it do nothing.
    fn lost(&self, generation: u64, unanswered: bool) {
        let mut state = lock(&self.state);
        if state.current() != Some(generation) {
            return;
        }
        if unanswered {
            tracing::debug!(target: "lockattr",
                "the subscriber connection stopped answering; replacing it and \
                 telling its waiters to check their locks"
            );
            state.failed();
        }
        state.sink = None;
        // The reader stops and drops its stream, which closes the socket.
        state.stop = None;
        for channel in state.channels.values_mut() {
            channel.unsubscribed();
        }
    }
}

/// Subscribes channel `name` until every waiter registered on it is armed
/// (or none is left): on the current connection, or on a new one when it
/// breaks or does not answer meanwhile. The one task of its channel at a
/// time (`Channel::subscribing`).
async fn subscribe(shared: Weak<Shared>, name: String) {
    let changing = {
        let Some(shared) = shared.upgrade() else {
            return;
        };
        let state = lock(&shared.state);
        let Some(channel) = state.channels.get(&name) else {
            return;
        };
        channel.changing.clone()
    };
    let _changing = changing.lock().await;
    loop {
        let Some(shared) = shared.upgrade() else {
            return;
        };
        {
            let mut state = lock(&shared.state);
            let current = state.current();
            let Some(channel) = state.channels.get_mut(&name) else {
                return;
            };
            if current.is_some() && channel.subscribed == current {
                channel.arm();
            }
            if channel.waiters.values().all(|e| e.armed) {
                channel.subscribing = false;
                // Nobody waits and nothing is subscribed or scheduled: an
                // entry left only by this task.
                if channel.waiters.is_empty() && channel.subscribed.is_none() && !channel.lingering
                {
                    state.channels.remove(&name);
                }
                return;
            }
        }
        // On failure, `connection` has counted it; the next try waits.
        let Ok((generation, mut sink)) = shared.connection().await else {
            continue;
        };
        let answer = within(shared.timeouts.response, sink.subscribe(&name)).await;
        let mut state = lock(&shared.state);
        match answer {
            Ok(()) => {
                state.answered();
                if state.current() == Some(generation)
                    && let Some(channel) = state.channels.get_mut(&name)
                {
                    channel.subscribed = Some(generation);
                    channel.arm();
                }
                // Otherwise the connection broke meanwhile: its waiters were
                // told to ask Redis; those registered since are subscribed
                // on the next one.
            }
            Err(e) if sink.is_sharded() && unsupported(&e) => {
                // A cluster without SSUBSCRIBE (before Redis 7, an ACL, a
                // renamed command): its waiters register again, and the
                // channel is subscribed with SUBSCRIBE.
                drop(state);
                shared.publish_only(&e);
                shared.lost(generation, false);
            }
            Err(e) if !broken(&e) => {
                // Redis's own answer: an ACL, a renamed command.
                tracing::debug!(target: "lockattr",
                    error = %e,
                    "cannot subscribe to release notices; waiters check their lock every {:?}",
                    FALLBACK_PAUSE
                );
                if let Some(channel) = state.channels.get_mut(&name) {
                    channel.waiters.retain(|_, entry| {
                        if !entry.armed {
                            let _ = entry.wake.send(Wake::Refused);
                        }
                        entry.armed
                    });
                }
            }
            Err(_) => {
                drop(state);
                shared.lost(generation, true);
            }
        }
    }
}

/// PINGs subscriber connection `generation` every [`PING_EVERY`] while a
/// channel is subscribed on it, and closes it when a PING is not answered
/// within the response timeout: a socket that stays open but passes nothing
/// would otherwise leave every waiter waiting for notices that never come.
async fn check_health(shared: Weak<Shared>, generation: u64, mut sink: Link) {
    loop {
        tokio::time::sleep(PING_EVERY).await;
        let Some(strong) = shared.upgrade() else {
            return;
        };
        let (limit, in_use) = {
            let state = lock(&strong.state);
            if state.current() != Some(generation) {
                return;
            }
            let in_use = state
                .channels
                .values()
                .any(|c| c.subscribed == Some(generation));
            (strong.timeouts.response, in_use)
        };
        drop(strong);
        if !in_use {
            continue;
        }
        let answer = within(limit, sink.ping()).await;
        let Some(strong) = shared.upgrade() else {
            return;
        };
        match answer {
            Ok(_) => lock(&strong.state).answered(),
            Err(_) => {
                strong.lost(generation, true);
                return;
            }
        }
    }
}

/// Routes the messages of subscriber connection `generation` to their
/// waiters until the connection ends or is closed.
async fn read(
    shared: Weak<Shared>,
    generation: u64,
    mut stream: PubSubStream,
    mut stopped: oneshot::Receiver<()>,
) {
    loop {
        let next = poll_fn(|cx| Pin::new(&mut stream).poll_next(cx));
        let message = tokio::select! {
            message = next => message,
            _ = &mut stopped => return,
        };
        let Some(shared) = shared.upgrade() else {
            return;
        };
        let Some(message) = message else {
            shared.lost(generation, false);
            return;
        };
        shared.deliver(&message);
    }
}

impl Shared {
    /// Handles push `push` of subscriber connection `generation` (a
    /// [`Link::Sharded`] or a [`Link::Pushed`]): a message goes to its
    /// waiters; a lost connection (a cluster's node connection may have
    /// carried a subscription: the cluster connection subscribes again on
    /// the new one, but a notice may have been missed) ends the connection,
    /// as a broken one, and false is returned; a shard channel unsubscribed
    /// by the server (its slot moved) makes its waiters register again.
    fn pushed(&self, generation: u64, push: PushInfo) -> bool {
        match push.kind {
            PushKind::Disconnection => {
                self.lost(generation, false);
                return false;
            }
            PushKind::SUnsubscribe => {
                let name = push.data.first().and_then(|name| match name {
                    redis::Value::BulkString(bytes) => std::str::from_utf8(bytes).ok(),
                    _ => None,
                });
                if let Some(name) = name {
                    self.unsubscribed(generation, name);
                }
            }
            PushKind::SMessage | PushKind::Message => {
                if let Some(message) = redis::Msg::from_push_info(push) {
                    self.deliver(&message);
                }
            }
            _ => {}
        }
        true
    }

    /// Routes release notice `message` to the waiters of its channel.
    fn deliver(&self, message: &redis::Msg) {
        let Some(handed) = std::str::from_utf8(message.get_payload_bytes())
            .ok()
            .and_then(HandOver::parse)
        else {
            return;
        };
        let mut guard = lock(&self.state);
        if let Some(channel) = guard.channels.get_mut(message.get_channel_name()) {
            channel.route(&handed);
        }
    }

    /// Shard channel `name` is no longer subscribed on connection
    /// `generation` (its slot moved to another shard): its waiters ask
    /// Redis, and register again, which subscribes it where it is now.
    fn unsubscribed(&self, generation: u64, name: &str) {
        let mut state = lock(&self.state);
        let Some(channel) = state.channels.get_mut(name) else {
            return;
        };
        if channel.subscribed != Some(generation) {
            // Unsubscribed by this Locker itself (`unsubscribe_when_idle`).
            return;
        }
        channel.unsubscribed();
    }
}

/// Routes the pushes of the sharded subscriber connection `generation`
/// (see [`Shared::pushed`]) until it ends or is closed.
async fn read_pushes(
    shared: Weak<Shared>,
    generation: u64,
    mut pushes: mpsc::UnboundedReceiver<PushInfo>,
    mut stopped: oneshot::Receiver<()>,
) {
    loop {
        let push = tokio::select! {
            push = pushes.recv() => push,
            _ = &mut stopped => return,
        };
        let Some(shared) = shared.upgrade() else {
            return;
        };
        let Some(push) = push else {
            shared.lost(generation, false);
            return;
        };
        if !shared.pushed(generation, push) {
            return;
        }
    }
}

/// Unsubscribes `name` once nobody has waited on it for [`LINGER`].
async fn unsubscribe_when_idle(shared: Weak<Shared>, name: String) {
    let mut pause = LINGER;
    let changing = loop {
        tokio::time::sleep(pause).await;
        let Some(shared) = shared.upgrade() else {
            return;
        };
        let mut guard = lock(&shared.state);
        let Some(channel) = guard.channels.get_mut(&name) else {
            return;
        };
        match channel.idle_since.map(|since| since.elapsed()) {
            // In use again: its next idle spell schedules a new unsubscribe.
            None => {
                channel.lingering = false;
                return;
            }
            Some(idle) if idle < LINGER => pause = LINGER - idle,
            Some(_) => break channel.changing.clone(),
        }
    };
    let _changing = changing.lock().await;
    let Some(shared) = shared.upgrade() else {
        return;
    };
    let unsubscribe = {
        let mut guard = lock(&shared.state);
        let current = guard.sink.clone();
        let Some(channel) = guard.channels.get_mut(&name) else {
            return;
        };
        channel.lingering = false;
        if !channel.waiters.is_empty() {
            return;
        }
        match (channel.subscribed.take(), current) {
            (Some(generation), Some((current, sink))) if generation == current => {
                Some((generation, sink))
            }
            _ => None,
        }
    };
    if let Some((generation, mut sink)) = unsubscribe {
        // A connection that does not answer is replaced; any other failure
        // only leaves a subscription that the next connection will not have.
        let answer = within(shared.timeouts.response, sink.unsubscribe(&name)).await;
        match answer {
            Ok(()) => lock(&shared.state).answered(),
            Err(e) if broken(&e) => shared.lost(generation, e.is_timeout()),
            Err(_) => {}
        }
    }
    let mut guard = lock(&shared.state);
    if guard.channels.get(&name).is_some_and(|c| {
        c.waiters.is_empty() && c.subscribed.is_none() && !c.lingering && !c.subscribing
    }) {
        guard.channels.remove(&name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reopening_waits_longer_after_each_failure_in_a_row() {
        assert_eq!(reopen_pause(0), Duration::ZERO);
        assert_eq!(reopen_pause(1), Duration::ZERO);
        assert_eq!(reopen_pause(2), Duration::from_millis(100));
        assert_eq!(reopen_pause(3), Duration::from_millis(200));
        assert_eq!(reopen_pause(6), Duration::from_millis(1600));
        assert_eq!(reopen_pause(7), MAX_REOPEN_PAUSE);
        assert_eq!(reopen_pause(u32::MAX), MAX_REOPEN_PAUSE);
    }
}
