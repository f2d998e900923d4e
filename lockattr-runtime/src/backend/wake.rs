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
//! channel. The channel
//! carries the lock's hash tag, so it can become a sharded channel on a
//! Redis Cluster. Each Locker has one subscriber connection for all its
//! waiters; the message is routed by token to the one waiting task, which
//! returns at once: it already holds the lock. The other waiters make no
//! request: they only move their expiry check to the end of the new
//! holder's lease (which is shorter than the old holder's when the new
//! holder asked for less), so there is no herd, and the queue serves
//! waiters in the order they came.
//!
//! Messages can be lost (pub/sub is fire-and-forget; a subscriber connection
//! may drop). Nothing depends on them alone: every waiter also wakes when the
//! holder's lease would end and when its acquire time ends, and then asks
//! Redis, whose answer is the truth (a waiter that was handed the lock finds
//! its own token there). When the subscriber connection drops, every waiter
//! of the Locker is told to ask again at once.
//!
//! A channel stays subscribed for [`LINGER`] after its last waiter left, so
//! a lock that is contended again and again does not pay a SUBSCRIBE each
//! time.

use std::collections::HashMap;
use std::future::poll_fn;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use futures_core::Stream;
use redis::aio::{PubSubSink, PubSubStream};
use redis::{Client, RedisError};
use tokio::sync::{mpsc, oneshot};

use super::Timeouts;
use crate::io;

/// How long a channel stays subscribed after its last waiter left.
const LINGER: Duration = Duration::from_secs(2);

/// What a waiter hears.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Wake {
    /// A release handed this waiter the lock, with this fencing token.
    Handed { fencing_token: u64 },
    /// The subscription broke, so a message may have been missed: ask Redis.
    Recheck,
    /// A release handed the lock to another waiter, whose lease is this
    /// long: the time to check for a crashed holder moves to its end.
    Rearm { lease: Duration },
}

/// The wake-ups of one Redis server, for one Locker.
pub(crate) struct Wakeups {
    /// Where to subscribe: the first that answers (several seeds of a
    /// Redis Cluster, where a PUBLISH reaches every node).
    clients: Vec<Client>,
    timeouts: Timeouts,
    state: Arc<Mutex<State>>,
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
    sink: Option<(u64, PubSubSink)>,
    /// Generations of subscriber connections opened so far.
    generation: u64,
    channels: HashMap<String, Channel>,
    /// Dropped with the Wakeups: stops the reader, which closes the connection.
    _stop: Option<oneshot::Sender<()>>,
}

#[derive(Default)]
struct Channel {
    /// The waiting tasks, by owner token.
    waiters: HashMap<String, mpsc::UnboundedSender<Wake>>,
    /// The generation of the connection this channel is subscribed on.
    subscribed: Option<u64>,
    /// Serializes SUBSCRIBE and UNSUBSCRIBE of this channel, so they reach
    /// Redis in the order the registry decided them.
    changing: Arc<tokio::sync::Mutex<()>>,
    /// When the last waiter left (None while some wait).
    idle_since: Option<Instant>,
    /// An unsubscribe is scheduled.
    lingering: bool,
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state.lock().unwrap_or_else(|p| p.into_inner())
}

/// A task waiting for a lock: registered under its token until dropped.
pub(crate) struct Waiter {
    state: Weak<Mutex<State>>,
    channel: String,
    token: String,
    wake: mpsc::UnboundedReceiver<Wake>,
}

impl Waiter {
    /// The next wake-up. After [`Wake::Handed`] or [`Wake::Recheck`] the
    /// waiter is no longer registered: register again to keep waiting.
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
                Ok(Wake::Recheck) | Err(mpsc::error::TryRecvError::Disconnected) => return false,
                Ok(_) => {}
                Err(mpsc::error::TryRecvError::Empty) => return true,
            }
        }
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        let Some(state) = self.state.upgrade() else {
            return;
        };
        let mut guard = lock(&state);
        let Some(channel) = guard.channels.get_mut(&self.channel) else {
            return;
        };
        channel.waiters.remove(&self.token);
        if channel.waiters.is_empty() {
            channel.idle_since = Some(Instant::now());
            if !channel.lingering {
                channel.lingering = true;
                let (weak, name) = (Arc::downgrade(&state), self.channel.clone());
                drop(guard);
                // Fails only when the I/O thread cannot start; then the
                // channel stays subscribed, which is harmless.
                let _ = io::spawn(unsubscribe_when_idle(weak, name));
            }
        }
    }
}

impl Wakeups {
    pub(crate) fn new(clients: Vec<Client>, timeouts: Timeouts) -> Wakeups {
        Wakeups {
            clients,
            timeouts,
            state: Arc::default(),
            connecting: tokio::sync::Mutex::new(()),
        }
    }

    fn waiter(&self, state: &mut State, channel: &str, token: &str) -> Waiter {
        let (tx, rx) = mpsc::unbounded_channel();
        let entry = state.channels.entry(channel.to_owned()).or_default();
        entry.waiters.insert(token.to_owned(), tx);
        entry.idle_since = None;
        Waiter {
            state: Arc::downgrade(&self.state),
            channel: channel.to_owned(),
            token: token.to_owned(),
            wake: rx,
        }
    }

    /// Registers `token` as waiting on `channel`, if the channel is already
    /// subscribed: then the waiter hears every message published from now on.
    pub(crate) fn register_if_subscribed(&self, channel: &str, token: &str) -> Option<Waiter> {
        let mut state = lock(&self.state);
        let current = state.sink.as_ref().map(|(generation, _)| *generation)?;
        let subscribed = state.channels.get(channel)?.subscribed;
        (subscribed == Some(current)).then(|| self.waiter(&mut state, channel, token))
    }

    /// Registers `token` as waiting on `channel` and makes sure the channel
    /// is subscribed: the waiter hears every message published after this
    /// returns.
    pub(crate) async fn register(&self, channel: &str, token: &str) -> Result<Waiter, RedisError> {
        // Registered before subscribing: no message after the subscription
        // can miss it.
        let (waiter, changing) = {
            let mut state = lock(&self.state);
            let waiter = self.waiter(&mut state, channel, token);
            let changing = state.channels[channel].changing.clone();
            (waiter, changing)
        };
        let _changing = changing.lock().await;
        let (generation, mut sink) = self.sink().await?;
        let subscribed = lock(&self.state)
            .channels
            .get(channel)
            .and_then(|c| c.subscribed);
        if subscribed == Some(generation) {
            return Ok(waiter);
        }
        within(self.timeouts.response, sink.subscribe(channel)).await?;
        let mut state = lock(&self.state);
        // If the connection broke meanwhile, the reader has told every
        // waiter to ask Redis; the channel stays unsubscribed.
        if state.sink.as_ref().map(|(g, _)| *g) == Some(generation)
            && let Some(entry) = state.channels.get_mut(channel)
        {
            entry.subscribed = Some(generation);
        }
        Ok(waiter)
    }

    /// The subscriber connection, opened if needed.
    async fn sink(&self) -> Result<(u64, PubSubSink), RedisError> {
        if let Some(sink) = lock(&self.state).sink.clone() {
            return Ok(sink);
        }
        let _connecting = self.connecting.lock().await;
        if let Some(sink) = lock(&self.state).sink.clone() {
            return Ok(sink);
        }
        // Opened on the I/O thread, whose runtime never stops: the
        // connection's I/O task runs where it was opened, and it serves the
        // waiters of every runtime.
        let (clients, limit) = (self.clients.clone(), self.timeouts.connect);
        let connect = async move {
            let mut last = None;
            for client in clients {
                match within(limit, async { client.get_async_pubsub().await }).await {
                    Ok(pubsub) => return Ok(pubsub),
                    Err(e) => last = Some(e),
                }
            }
            Err(last.unwrap_or_else(|| {
                RedisError::from(std::io::Error::other("no server to subscribe on"))
            }))
        };
        let (sink, stream) = io::run(async move { Ok(connect.await) })
            .await
            .map_err(|e| RedisError::from(std::io::Error::other(e.to_string())))??
            .split();
        let (stop, stopped) = oneshot::channel();
        let generation = {
            let mut state = lock(&self.state);
            state.generation += 1;
            state.sink = Some((state.generation, sink.clone()));
            state._stop = Some(stop);
            state.generation
        };
        let reader = read(Arc::downgrade(&self.state), generation, stream, stopped);
        if let Err(e) = io::spawn(reader) {
            lock(&self.state).sink = None;
            return Err(RedisError::from(std::io::Error::other(e.to_string())));
        }
        Ok((generation, sink))
    }
}

/// `fut`, or a timeout error after `limit`.
async fn within<T>(
    limit: Duration,
    fut: impl Future<Output = Result<T, RedisError>>,
) -> Result<T, RedisError> {
    tokio::time::timeout(limit, fut).await.unwrap_or_else(|_| {
        Err(RedisError::from(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "Redis did not answer in time on the subscriber connection",
        )))
    })
}

/// Routes the messages of subscriber connection `generation` to their
/// waiters until the connection ends or the Wakeups are dropped.
async fn read(
    state: Weak<Mutex<State>>,
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
        let Some(state) = state.upgrade() else {
            return;
        };
        let Some(message) = message else {
            lost(&state, generation);
            return;
        };
        let Some(handed) = std::str::from_utf8(message.get_payload_bytes())
            .ok()
            .and_then(HandOver::parse)
        else {
            continue;
        };
        let channel = std::str::from_utf8(message.get_channel_name().as_bytes()).ok();
        let mut guard = lock(&state);
        let Some(channel) = channel.and_then(|name| guard.channels.get_mut(name)) else {
            continue;
        };
        if let Some(waiter) = channel.waiters.remove(handed.token) {
            // The waiter may have just given up; its exit asks Redis anyway.
            let _ = waiter.send(Wake::Handed {
                fencing_token: handed.fencing_token,
            });
        }
        for waiter in channel.waiters.values() {
            let _ = waiter.send(Wake::Rearm {
                lease: handed.lease,
            });
        }
    }
}

/// A release notice: `<token>:<fencing token>:<lease ms>`.
struct HandOver<'a> {
    token: &'a str,
    fencing_token: u64,
    lease: Duration,
}

impl<'a> HandOver<'a> {
    fn parse(payload: &'a str) -> Option<HandOver<'a>> {
        let mut parts = payload.rsplitn(3, ':');
        let lease = Duration::from_millis(parts.next()?.parse().ok()?);
        let fencing_token = parts.next()?.parse().ok()?;
        let token = parts.next()?;
        Some(HandOver {
            token,
            fencing_token,
            lease,
        })
    }
}

/// The subscriber connection ended: forget it and every subscription on it,
/// and tell every waiter to ask Redis.
fn lost(state: &Mutex<State>, generation: u64) {
    let mut state = lock(state);
    if state.sink.as_ref().map(|(g, _)| *g) != Some(generation) {
        return;
    }
    state.sink = None;
    for channel in state.channels.values_mut() {
        channel.subscribed = None;
        for (_, waiter) in channel.waiters.drain() {
            let _ = waiter.send(Wake::Recheck);
        }
    }
}

/// Unsubscribes `name` once nobody has waited on it for [`LINGER`].
async fn unsubscribe_when_idle(state: Weak<Mutex<State>>, name: String) {
    let mut pause = LINGER;
    let changing = loop {
        tokio::time::sleep(pause).await;
        let Some(state) = state.upgrade() else {
            return;
        };
        let mut guard = lock(&state);
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
    let Some(state) = state.upgrade() else {
        return;
    };
    let unsubscribe = {
        let mut guard = lock(&state);
        let current = guard.sink.clone();
        let Some(channel) = guard.channels.get_mut(&name) else {
            return;
        };
        channel.lingering = false;
        if !channel.waiters.is_empty() {
            return;
        }
        match (channel.subscribed.take(), current) {
            (Some(generation), Some((current, sink))) if generation == current => Some(sink),
            _ => None,
        }
    };
    if let Some(mut sink) = unsubscribe {
        // Best effort: a failure here only leaves a subscription that the
        // next connection will not have.
        let _ = tokio::time::timeout(LINGER, sink.unsubscribe(&name)).await;
    }
    let mut guard = lock(&state);
    if guard
        .channels
        .get(&name)
        .is_some_and(|c| c.waiters.is_empty() && c.subscribed.is_none() && !c.lingering)
    {
        guard.channels.remove(&name);
    }
}
