//! One subscriber side ([`Shared`]): the subscriber connection of one
//! runtime (or of the I/O thread) and the channels subscribed on it, and
//! the tasks that open, check and replace the connection and subscribe,
//! read and unsubscribe its channels.

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

use super::channel::{Channel, Wake};
use super::link::{Link, broken, unsupported, with_keepalive, within};
use crate::backend::shared::{FALLBACK_PAUSE, Timeouts};
use crate::backend::source::Source;
use crate::io;
use crate::layout::Notice as HandOver;
use crate::sync::lock;

/// How long a channel stays subscribed after its last waiter left.
pub(super) const LINGER: Duration = Duration::from_secs(2);

/// How often the subscriber connection is checked with a `PING` while a
/// channel is subscribed on it.
pub(super) const PING_EVERY: Duration = Duration::from_secs(1);

/// The longest pause before opening a subscriber connection again after
/// failures in a row (connections that could not be opened, or that were
/// closed for not answering).
pub(super) const MAX_REOPEN_PAUSE: Duration = Duration::from_secs(2);

/// Builds a Redis Cluster client on RESP3 whose pushes (the shard
/// messages, and the connections' losses) go to the sender given.
pub(crate) type ShardedClient =
    Arc<dyn Fn(mpsc::UnboundedSender<PushInfo>) -> RedisResult<ClusterClient> + Send + Sync>;

/// What the Wakeups share with their background tasks (which hold it weakly,
/// so that dropping the Wakeups stops them and closes the connection).
pub(super) struct Shared {
    /// Where to subscribe: the first that answers (several seeds of a
    /// Redis Cluster, where a PUBLISH reaches every node).
    sources: Vec<Source>,
    /// A Redis Cluster's: channels are subscribed with SSUBSCRIBE on a
    /// cluster connection, each on the shard serving its slot, where the
    /// scripts publish with SPUBLISH. `None`, or a cluster that refuses
    /// RESP3 or SSUBSCRIBE: SUBSCRIBE on the first of `sources`.
    pub(super) sharded: Option<ShardedClient>,
    pub(super) timeouts: Timeouts,
    /// The runtime that runs the subscriber connection and its tasks, and
    /// where its waiters wait: its connection is a RESP3 one whose pushes
    /// wake them right there (see [`Link::Pushed`]). `None`: the I/O thread.
    home: Option<tokio::runtime::Handle>,
    pub(super) state: Mutex<State>,
    /// Held while opening the subscriber connection.
    connecting: tokio::sync::Mutex<()>,
}

#[derive(Default)]
pub(super) struct State {
    /// The subscriber connection, if open, and its generation.
    sink: Option<(u64, Link)>,
    /// The server refused RESP3 (before Redis 6), or the cluster refused
    /// RESP3 or SSUBSCRIBE: subscribe with SUBSCRIBE on a connection of its
    /// own from now on (a cluster's scripts, refused SPUBLISH, publish with
    /// PUBLISH).
    published_only: bool,
    /// Generations of subscriber connections opened so far.
    generation: u64,
    pub(super) channels: HashMap<String, Channel>,
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
    pub(super) serial: u64,
}

impl State {
    pub(super) fn current(&self) -> Option<u64> {
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

impl Shared {
    /// The subscriber side on the I/O thread, subscribing through
    /// `sources`.
    pub(super) fn new(sources: Vec<Source>, timeouts: Timeouts) -> Shared {
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
    pub(super) fn on(&self, home: tokio::runtime::Handle) -> Shared {
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
    pub(super) fn spawn<F>(&self, fut: F) -> Result<(), crate::LockError>
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
pub(super) async fn subscribe(shared: Weak<Shared>, name: String) {
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
pub(super) async fn unsubscribe_when_idle(shared: Weak<Shared>, name: String) {
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
