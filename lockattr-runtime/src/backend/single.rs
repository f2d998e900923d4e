//! One Redis server, reached through one multiplexed connection per tokio
//! runtime.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, FromRedisValue, RedisError};

use super::group_commit::{GroupCommit, Next, Turn};
use super::node_facts::NodeFacts;
use super::scripts;
use super::scripts::{Invocation, ReleaseReply, ScriptMode};
use super::shared::{Acked, Attempt, Extend, Owner, Released, Renewal, extended, left_of, millis};
use super::shared::{Replicas, Successor, Timeouts};
use super::source::{Sentinels, Source};
use super::wake::Wakeups;
use crate::address::{self, Address, TlsFiles};
use crate::error::WAIT_ON_A_REPLICA;
use crate::layout::Keys;
use crate::sync::lock;
use crate::{LockError, io};

/// A connection and its generation, so that a failure on an old connection
/// never discards a newer one.
struct Current {
    generation: u64,
    connection: MultiplexedConnection,
}

/// The connection of one tokio runtime.
///
/// Opening is serialized: while one caller connects, the others wait for
/// that attempt and share its outcome, so a thousand callers against a dead
/// server make one attempt, not a thousand, and none waits longer than about
/// two connect timeouts.
#[derive(Default)]
struct Slot {
    current: Mutex<Option<Current>>,
    /// Held while connecting; holds the last failure to connect.
    connecting: tokio::sync::Mutex<Option<RedisError>>,
    /// Finished attempts to connect (successful or not).
    attempts: AtomicU64,
    /// The WAITs of the runtime's grants, in the slot of [`Lane::Shared`]
    /// (see [`group_commit`](super::group_commit)).
    commit: OnceLock<Arc<GroupCommit>>,
}

/// Which of a runtime's connections a request goes on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Lane {
    /// Every request but the WAITs of grants and renewals, including the
    /// scripts of grants sent while another grant's WAIT is in flight.
    Shared,
    /// The WAITs of the grants that wait for replicas (see
    /// [`group_commit`](super::group_commit)), one at a time on each of
    /// these connections (`0..WAITS_IN_FLIGHT`), and the script of a grant
    /// that finds one idle, in the same pipeline: `WAIT` blocks the
    /// connection it is sent on until the replicas answered or its timeout
    /// passed, so it never goes on the connection that releases and every
    /// other lock of the runtime use.
    Replicated(usize),
    /// The watchdog's renewals when grants wait for replicas: their `WAIT`
    /// only ever waits for renewals, never behind a grant's, so a lease is
    /// renewed in time however many grants queue on
    /// [`Lane::Replicated`].
    Renewal,
}

/// Each runtime's connections, by runtime and lane.
type Slots = Mutex<HashMap<(tokio::runtime::Id, Lane), Arc<Slot>>>;

/// One Redis server.
///
/// Every lock operation made from one tokio runtime shares one multiplexed
/// connection, whose I/O task runs on that runtime: an operation awaited
/// there talks to Redis without a hop to another thread. The library's I/O
/// thread is one such runtime (the blocking path, other executors,
/// background releases). A connection is opened on first use and
/// opened again after it broke (a dropped connection, a Redis restart, an
/// answer that timed out); a runtime's connection is forgotten when the
/// runtime shuts down. When grants wait for replicas, their `WAIT`s go on
/// connections of their own ([`Lane::Replicated`]), which a `WAIT` blocks
/// while it waits, and renewals on another ([`Lane::Renewal`]).
pub(crate) struct SingleNode {
    source: Source,
    timeouts: Timeouts,
    config: AsyncConnectionConfig,
    /// The configuration of [`Lane::Replicated`]'s connections: an answer
    /// may take the replica timeout longer.
    replicated_config: AsyncConnectionConfig,
    server: String,
    slots: Arc<Slots>,
    /// The subscriber side: where waiters hear that they got the lock.
    wakeups: Wakeups,
    /// When tracked (a Redlock node): since when the server has kept its
    /// data, and which server it is, read on every new connection.
    facts: Option<NodeFacts>,
    /// The database of the URL.
    db: i64,
    /// How many replicas must hold a grant.
    replicas: Replicas,
    /// Whether the server takes FCALL or EVALSHA, found out again on each
    /// new connection.
    scripts: ScriptMode,
    /// The channel of the write before each grants' WAIT (see
    /// [`GroupCommit::beat`]).
    beat: String,
}

impl std::fmt::Debug for SingleNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SingleNode")
            .field("server", &self.server)
            .finish_non_exhaustive()
    }
}

/// The future that opens a connection, its type hidden (see
/// `SingleNode::connection`).
type Opening<'a> = std::pin::Pin<
    Box<
        dyn Future<Output = Result<(Arc<Slot>, u64, MultiplexedConnection), LockError>> + Send + 'a,
    >,
>;

impl SingleNode {
    /// The server at `address`; does not connect.
    pub(crate) fn new(
        address: &Address,
        tls: &TlsFiles,
        timeouts: Timeouts,
    ) -> Result<SingleNode, LockError> {
        let info = address.info(
            "redis://[[user]:password@]host[:port][/db], rediss://... or unix:///path/to/redis.sock",
        )?;
        let db = info.redis_settings().db();
        let server = address::server_name(&info);
        let client = address::client(info, tls)?;
        Ok(SingleNode::with_source(
            Source::Fixed(Box::new(client)),
            server,
            db,
            timeouts,
        ))
    }

    /// The server `client` reaches (a node of a cluster found by asking it).
    pub(crate) fn from_client(client: redis::Client, timeouts: Timeouts) -> SingleNode {
        let info = client.get_connection_info();
        let db = info.redis_settings().db();
        let server = address::server_name(info);
        SingleNode::with_source(Source::Fixed(Box::new(client)), server, db, timeouts)
    }

    /// The master of a Sentinel group, asked of the sentinels for every new
    /// connection; does not connect.
    pub(crate) fn sentinel(sentinels: Sentinels, timeouts: Timeouts) -> SingleNode {
        let server = sentinels.name().to_owned();
        SingleNode::with_source(Source::Sentinel(Arc::new(sentinels)), server, 0, timeouts)
    }

    fn with_source(source: Source, server: String, db: i64, timeouts: Timeouts) -> SingleNode {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(timeouts.connect))
            .set_response_timeout(Some(timeouts.response));
        SingleNode {
            replicated_config: config.clone(),
            wakeups: Wakeups::new(source.clone(), timeouts),
            source,
            timeouts,
            config,
            server,
            slots: Arc::default(),
            facts: None,
            db,
            replicas: Replicas::default(),
            scripts: ScriptMode::default(),
            beat: String::new(),
        }
    }

    /// Reads the server's restart time and identity each time a connection
    /// opens (see [`NodeFacts`]), with the marker key of a Locker whose keys
    /// start with `prefix`.
    pub(crate) fn track_restarts(mut self, prefix: &str) -> SingleNode {
        self.facts = Some(NodeFacts::new(prefix, self.db));
        self
    }

    /// Makes every grant wait for `replicas` (see [`Replicas`]), with the
    /// write before each WAIT on the channel `<prefix>replicated` of a
    /// Locker whose keys start with `prefix` (see [`GroupCommit::beat`]).
    pub(crate) fn with_replicas(mut self, replicas: Replicas, prefix: &str) -> Self {
        self.replicas = replicas;
        self.beat = format!("{prefix}replicated");
        self.replicated_config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.timeouts.connect))
            .set_response_timeout(Some(self.timeouts.response + replicas.timeout));
        self
    }

    /// How many replicas must hold a grant.
    pub(crate) fn replicas(&self) -> Replicas {
        self.replicas
    }

    /// What the latest connections told of the server, when tracked.
    pub(crate) fn facts(&self) -> Option<&NodeFacts> {
        self.facts.as_ref()
    }

    /// Opens the current runtime's connection if there is none (and reads
    /// the server's facts on it, when tracked).
    pub(crate) async fn connect(&self) -> Result<(), LockError> {
        self.connection(Lane::Shared).await.map(drop)
    }

    /// Whether the current runtime has a connection open (as far as known:
    /// a connection that broke while idle is found out on first use).
    pub(crate) fn is_connected(&self) -> bool {
        self.slot(Lane::Shared)
            .is_ok_and(|slot| slot.cached().is_some())
    }

    pub(crate) fn server(&self) -> &str {
        &self.server
    }

    pub(crate) fn wakeups(&self) -> &Wakeups {
        &self.wakeups
    }

    fn error(&self, e: RedisError) -> LockError {
        LockError::from_redis(&self.server, e)
    }

    /// The current runtime's slot, made on first use. Lock operations only
    /// run inside a tokio runtime (the caller's or the I/O thread's).
    fn slot(&self, lane: Lane) -> Result<Arc<Slot>, LockError> {
        let handle = tokio::runtime::Handle::try_current().map_err(|_| LockError::Runtime {
            reason: "a lock operation ran outside a tokio runtime".into(),
        })?;
        let runtime = (handle.id(), lane);
        let mut slots = lock(&self.slots);
        if let Some(slot) = slots.get(&runtime) {
            return Ok(slot.clone());
        }
        let slot = Arc::new(Slot::default());
        slots.insert(runtime, slot.clone());
        drop(slots);
        io::when_runtime_ends(&handle, Arc::downgrade(&self.slots), move |slots| {
            lock(slots).remove(&runtime);
        });
        Ok(slot)
    }

    /// The current runtime's connection of `lane`, opened if needed.
    async fn connection(
        &self,
        lane: Lane,
    ) -> Result<(Arc<Slot>, u64, MultiplexedConnection), LockError> {
        let slot = self.slot(lane)?;
        if let Some((generation, connection)) = slot.cached() {
            return Ok((slot, generation, connection));
        }
        // Boxed: the connecting future is deep (TLS, Sentinel, the socket),
        // and every future that awaits a request would otherwise carry its
        // type, which the compiler then proves `Send` through in the
        // caller's crate as well.
        let opening: Opening<'_> = Box::pin(self.opening(slot, lane));
        opening.await
    }

    /// Opens the connection of `lane` into `slot` (one caller at a time).
    async fn opening(
        &self,
        slot: Arc<Slot>,
        lane: Lane,
    ) -> Result<(Arc<Slot>, u64, MultiplexedConnection), LockError> {
        let seen = slot.attempts.load(Ordering::Acquire);
        let mut last_error = slot.connecting.lock().await;
        if let Some((generation, connection)) = slot.cached() {
            drop(last_error);
            return Ok((slot, generation, connection));
        }
        if slot.attempts.load(Ordering::Acquire) != seen
            && let Some(e) = last_error.as_ref()
        {
            // Someone tried while we waited, and failed: share that outcome.
            return Err(self.connect_error(e.clone()));
        }
        let config = match lane {
            Lane::Shared => &self.config,
            Lane::Replicated(_) | Lane::Renewal => &self.replicated_config,
        };
        let result = match self.source.client(self.timeouts.locate()).await {
            Ok(client) => {
                client
                    .get_multiplexed_async_connection_with_config(config)
                    .await
            }
            Err(e) => Err(e),
        };
        let generation = slot.attempts.fetch_add(1, Ordering::AcqRel) + 1;
        match result {
            Ok(mut connection) => {
                if let Some(facts) = &self.facts
                    && let Err(e) = facts.observe(&self.server, &mut connection).await
                {
                    // Not used: its facts are unknown.
                    *last_error = Some(e.clone());
                    return Err(self.connect_error(e));
                }
                *last_error = None;
                // Maybe another server (a failover), or the same one
                // restarted on another version.
                self.scripts.reset();
                *lock(&slot.current) = Some(Current {
                    generation,
                    connection: connection.clone(),
                });
                drop(last_error);
                Ok((slot, generation, connection))
            }
            Err(e) => {
                *last_error = Some(e.clone());
                Err(self.connect_error(e))
            }
        }
    }

    fn connect_error(&self, e: RedisError) -> LockError {
        LockError::from_connect(&self.server, e, self.source.is_tls())
    }

    /// Sends a request that is safe to repeat. A connection that broke
    /// while idle (Redis restarted) fails on first use; then the request is
    /// sent once more on a new one.
    ///
    /// When a request goes unanswered (its answer timed out, or the caller
    /// dropped this future while it was on its way), `unanswered` gets the
    /// connection it was sent on, before that connection is discarded.
    pub(super) async fn send<T: FromRedisValue>(
        &self,
        request: Request<'_>,
        unanswered: Option<&(dyn Fn(MultiplexedConnection) + Sync)>,
    ) -> Result<T, LockError> {
        let (value, _) = self.send_then(request, None, unanswered).await?;
        Ok(value)
    }

    /// [`send`](Self::send), and whether the answer is the re-send's. A
    /// dropped connection does not say whether the request ran: a request
    /// that is not safe to repeat as it is gives `again`, which makes the
    /// one to send instead (when it is needed, so it may count the time
    /// since the first try).
    async fn send_then<T: FromRedisValue>(
        &self,
        first: Request<'_>,
        again: Option<&(dyn Fn() -> Invocation + Sync)>,
        unanswered: Option<&(dyn Fn(MultiplexedConnection) + Sync)>,
    ) -> Result<(T, bool), LockError> {
        let mut instead: Option<Invocation> = None;
        let mut retried = false;
        loop {
            let request = match (instead.as_ref(), first) {
                (Some(script), Request::Replicated(_, replicas, beat, lane)) => {
                    Request::Replicated(script, replicas, beat, lane)
                }
                (Some(script), _) => Request::Script(script),
                (None, first) => first,
            };
            let (slot, generation, mut connection) = self.connection(request.lane()).await?;
            let pending = Unanswered {
                connection: unanswered.map(|_| connection.clone()),
                then: unanswered,
            };
            let e = match request.send(&self.scripts, &mut connection).await {
                Ok(value) => {
                    pending.disarm();
                    return Ok((value, retried));
                }
                Err(e) => e,
            };
            if e.is_timeout() {
                drop(pending);
            } else {
                pending.disarm();
            }
            if !broken(&e) {
                return Err(self.error(e));
            }
            slot.discard(generation);
            if retried || !e.is_connection_dropped() {
                return Err(self.error(e));
            }
            retried = true;
            instead = again.map(|make| make());
        }
    }

    /// Sends a script that grants time (see [`send_then`](Self::send_then)
    /// for `again` and `unanswered`). When grants wait for replicas, an
    /// answer that `granted` (time was granted) not acknowledged by enough
    /// replicas in time is [`LockError::Replicas`]: the grant may hold on
    /// the master, and the caller gives it back or does not count it. The
    /// grants of a runtime share their WAITs (see
    /// [`group_commit`](super::group_commit)): when a connection of WAITs
    /// is idle, the script goes with a WAIT on it ([`Lane::Replicated`]);
    /// otherwise it goes on [`Lane::Shared`], and then waits for the next
    /// WAIT.
    ///
    /// An acquisition (`acquiring`) refused while the replicas did not
    /// acknowledge the writes before its answer, as a WAIT that went with
    /// it says, is [`LockError::Replicas`] too: the name is held by a grant
    /// they did not acknowledge either, and the caller could not have been
    /// granted it. Its token may be queued; the caller gives it back.
    async fn grant<T: FromRedisValue>(
        &self,
        invocation: &Invocation,
        (granted, acquiring): (fn(&T) -> bool, bool),
        again: Option<&(dyn Fn() -> Invocation + Sync)>,
        unanswered: Option<&(dyn Fn(MultiplexedConnection) + Sync)>,
    ) -> Result<(T, bool), LockError> {
        if !self.replicas.wanted() {
            return self
                .send_then(Request::Script(invocation), again, unanswered)
                .await;
        }
        let slot = self.slot(Lane::Shared)?;
        let commit = self.commit(&slot);
        if let Some(turn) = commit.idle() {
            let covers = commit.covers();
            let beat = commit.beat();
            let request = Request::Replicated(invocation, self.replicas, beat, turn.index());
            let (Acked { reply, replicas }, resent) =
                self.send_then(request, again, unanswered).await?;
            commit.answered(turn, covers, Ok(replicas));
            if acquiring || granted(&reply) {
                self.replicas.enough(&self.server, replicas)?;
            }
            return Ok((reply, resent));
        }
        let (reply, resent) = self
            .send_then(Request::Script(invocation), again, unanswered)
            .await?;
        if granted(&reply) {
            let replicas = self.acknowledged(commit).await?;
            self.replicas.enough(&self.server, replicas)?;
        }
        Ok((reply, resent))
    }

    /// The group commit of the runtime whose [`Lane::Shared`] slot is
    /// `slot`.
    fn commit(&self, slot: &Slot) -> Arc<GroupCommit> {
        Arc::clone(
            slot.commit
                .get_or_init(|| Arc::new(GroupCommit::new(&self.beat))),
        )
    }

    /// How many replicas acknowledged a grant whose script was answered:
    /// the answer of the first WAIT sent after it, which this grant sends
    /// when it gets the turn. Waits at most the replica timeout, and then
    /// counts none.
    async fn acknowledged(&self, commit: Arc<GroupCommit>) -> Result<i64, LockError> {
        let ticket = commit.ticket();
        let waiting = async {
            loop {
                match commit.next(ticket).await {
                    Next::Covered(answer) => return answer.map_err(|e| self.error(e)),
                    Next::Turn(turn) => self.send_wait(&commit, turn).await?,
                }
            }
        };
        tokio::time::timeout(self.replicas.timeout, waiting)
            .await
            .unwrap_or(Ok(0))
    }

    /// Sends the runtime's next WAIT on the turn's [`Lane::Replicated`], after the
    /// write that makes it count every write before it (see
    /// [`GroupCommit::beat`]), and publishes its answer, in a task of its
    /// own: a grant that stops waiting never leaves the others without an
    /// answer. `turn` is held until then.
    async fn send_wait(&self, commit: &Arc<GroupCommit>, turn: Turn) -> Result<(), LockError> {
        let lane = Lane::Replicated(turn.index());
        let (slot, generation, mut connection) = self.connection(lane).await?;
        let mut pipeline = redis::pipe();
        pipeline.add_command(commit.beat().clone()).ignore();
        pipeline
            .cmd("WAIT")
            .arg(self.replicas.min)
            .arg(millis(self.replicas.timeout));
        let commit = Arc::clone(commit);
        drop(tokio::spawn(async move {
            let covers = commit.covers();
            let answer: redis::RedisResult<(i64,)> = pipeline.query_async(&mut connection).await;
            // Opened again next time, whatever the error: one a WAIT
            // answers without breaking the connection (sent to a master
            // that a failover demoted) would answer every WAIT after it.
            if answer.is_err() {
                slot.discard(generation);
            }
            commit.answered(turn, covers, answer.map(|(acked,)| acked));
        }));
        Ok(())
    }

    /// One attempt at the lock of `keys` for `token` (see
    /// [`Queued::attempt`](super::queue::Queued::attempt)).
    pub(crate) async fn attempt(
        &self,
        Owner { keys, token }: Owner<'_>,
        expire: Duration,
        (wait, queued): (Duration, bool),
    ) -> Result<Attempt, LockError> {
        let invocation = scripts::acquire(keys, token, expire, wait, queued);
        // An acquisition whose answer timed out may still run, later, when a
        // frozen or overloaded server catches up. Redis runs one client's
        // commands in order, so a release sent on the same connection runs
        // after it and gives the lock back; on any other connection it could
        // run first and miss.
        // Sent as EVAL (see `scripts::give_back`).
        let give_back = |connection: MultiplexedConnection| {
            give_back_in_order(connection, scripts::give_back(keys, token));
        };
        let (reply, _) = self
            .grant(
                &invocation,
                (Attempt::granted, true),
                None,
                Some(&give_back),
            )
            .await?;
        Ok(Attempt::from_reply(reply))
    }

    /// See `Backend::release`; `notify` publishes a release
    /// notice when nobody is queued (Redlock).
    ///
    /// A release is sent again after a dropped connection (a second run
    /// changes nothing of another owner's), but a re-send that finds the
    /// lock not owned cannot tell whether the first try released it or the
    /// lease had run out. When the lock's counter is still near
    /// `fencing_token` (see [`scripts::RELEASE`]), that is
    /// [`Released::Unsure`]; a counter that is gone or far beyond (Redis
    /// lost the lock: the connection broke with a restart) is
    /// [`Released::NotOwned`].
    pub(crate) async fn release(
        &self,
        owner: Owner<'_>,
        fencing_token: u64,
        notify: bool,
    ) -> Result<Released, LockError> {
        Ok(self.release_to(owner, fencing_token, notify, None).await?.0)
    }

    /// [`release`](Self::release), handing the lock to `successor` (see
    /// [`Successor`]); also the notice of the hand-over when the lock was
    /// handed to a waiter (`<token>:<fencing token>:<lease ms>`).
    pub(crate) async fn release_to(
        &self,
        Owner { keys, token }: Owner<'_>,
        fencing_token: u64,
        notify: bool,
        successor: Option<&Successor<'_>>,
    ) -> Result<(Released, Option<String>), LockError> {
        let invocation = scripts::release(keys, token, fencing_token, notify, successor);
        let (reply, resent): (ReleaseReply, bool) = self
            .send_then(Request::Script(&invocation), None, None)
            .await?;
        Ok(self.released(keys, reply, resent))
    }

    /// Releases every name of a set held under `token` (`members`: each
    /// name's keys and the fencing token it was granted) in one call; per
    /// name, what [`release`](Self::release) would answer.
    pub(crate) async fn release_set(
        &self,
        token: &str,
        members: &[(&Keys, u64)],
        notify: bool,
    ) -> Result<Vec<Released>, LockError> {
        let invocation = scripts::release_set(members, token, notify);
        let (replies, resent): (Vec<ReleaseReply>, bool) = self
            .send_then(Request::Script(&invocation), None, None)
            .await?;
        Ok(members
            .iter()
            .zip(scripts::set_replies(replies, members.len(), &self.server)?)
            .map(|((keys, _), reply)| self.released(keys, reply, resent).0)
            .collect())
    }

    /// What a release's `reply` for the lock of `keys` means, and the
    /// notice of its hand-over; `resent`: it answered a re-send.
    fn released(
        &self,
        keys: &Keys,
        reply: ReleaseReply,
        resent: bool,
    ) -> (Released, Option<String>) {
        match (reply, resent) {
            (ReleaseReply::Handed(notice), _) => {
                // A waiter of this Locker hears it now, not after the notice
                // came round through the subscriber connection.
                self.wakeups().handed_here(&keys.channel, &notice);
                (Released::Done, Some(notice))
            }
            (ReleaseReply::Code(1), _) => (Released::Done, None),
            (ReleaseReply::Code(2), true) => (Released::Unsure, None),
            _ => (Released::NotOwned, None),
        }
    }

    /// Raises the lock's fence counter to `fencing_token` if `token` owns
    /// the lock; false when it does not.
    pub(crate) async fn raise_fence(
        &self,
        keys: &Keys,
        token: &str,
        fencing_token: u64,
    ) -> Result<bool, LockError> {
        let invocation = scripts::raise_fence(keys, token, fencing_token);
        let owned: i64 = self.send(Request::Script(&invocation), None).await?;
        Ok(owned == 1)
    }

    /// See `Backend::extend`. An addition whose answer was lost
    /// with its connection is sent again as a raise (see [`Extend::Add`]).
    pub(crate) async fn extend(
        &self,
        Owner { keys, token }: Owner<'_>,
        (by, how): (Duration, Extend),
        max_lease: Duration,
    ) -> Result<Option<Duration>, LockError> {
        let first = scripts::extend(keys, token, millis(by), how.mode(), max_lease);
        let raise = |held_until: Instant| {
            move || {
                let target = (held_until + by).saturating_duration_since(Instant::now());
                scripts::extend(keys, token, millis(target), "raise", max_lease)
            }
        };
        let again = match how {
            Extend::Add { held_until } => Some(raise(held_until)),
            Extend::Set | Extend::Hold => None,
        };
        let again = again
            .as_ref()
            .map(|make| make as &(dyn Fn() -> Invocation + Sync));
        let (left, _): (i64, bool) = self
            .grant(&first, (|left| *left >= 0, false), again, None)
            .await?;
        extended(left, max_lease)
    }

    /// Renews a batch of leases: each one's time left, `None` when not
    /// owned. Sent on [`Lane::Renewal`] when grants wait for replicas (see
    /// [`renewal`](Self::renewal)).
    pub(crate) async fn renew(
        &self,
        leases: &[Renewal<'_>],
    ) -> Result<Vec<Option<Duration>>, LockError> {
        let invocation = scripts::renew(&leases.iter().collect::<Vec<_>>());
        let left = self.renewal(&invocation).await?;
        if left.len() != leases.len() {
            return Err(LockError::UnexpectedReply {
                server: self.server.clone(),
                reply: format!("{} renewals with {} values", leases.len(), left.len()),
            });
        }
        Ok(left.into_iter().map(left_of).collect())
    }

    /// Sends a renewal script (safe to repeat). When grants wait for
    /// replicas it goes with `WAIT` on [`Lane::Renewal`], a connection of
    /// its own, so that it never waits behind the grants' `WAIT`s, and a
    /// renewal too few replicas acknowledged is [`LockError::Replicas`]
    /// (not counted). Otherwise it goes on [`Lane::Shared`].
    async fn renewal(&self, invocation: &Invocation) -> Result<Vec<i64>, LockError> {
        if !self.replicas.wanted() {
            return self.send(Request::Script(invocation), None).await;
        }
        let request = Request::Renewal(invocation, self.replicas);
        let Acked { reply, replicas } = self.send(request, None).await?;
        self.replicas.enough(&self.server, replicas)?;
        Ok(reply)
    }

    /// Runs a script that is safe to repeat (sent again after a dropped
    /// connection).
    pub(crate) async fn run_script<T: FromRedisValue>(
        &self,
        invocation: &Invocation,
    ) -> Result<T, LockError> {
        self.send(Request::Script(invocation), None).await
    }

    /// Runs an attempt of a kind whose reply starts with 1 when taken (a
    /// side of a read-write lock, a permit, a set): a grant (see
    /// [`grant`](Self::grant)) when it answers `{1, ...}`. When its answer
    /// will not be read (it timed out, or the caller dropped this future),
    /// `give_back` is sent on the same connection, so that it runs after
    /// the script.
    pub(crate) async fn run_script_or_give_back(
        &self,
        invocation: &Invocation,
        give_back: &(dyn Fn() -> redis::Cmd + Sync),
    ) -> Result<Vec<i64>, LockError> {
        let give_back = |connection: MultiplexedConnection| {
            give_back_in_order(connection, give_back());
        };
        let taken = |reply: &Vec<i64>| reply.first() == Some(&1);
        let (reply, _) = self
            .grant(invocation, (taken, true), None, Some(&give_back))
            .await?;
        Ok(reply)
    }

    /// Runs a command that is safe to repeat.
    pub(crate) async fn run_command<T: FromRedisValue>(
        &self,
        command: &redis::Cmd,
    ) -> Result<T, LockError> {
        self.send(Request::Command(command), None).await
    }

    /// Runs a script that must not run twice: never sent again, whatever
    /// happened to the connection.
    pub(crate) async fn run_once<T: FromRedisValue>(
        &self,
        invocation: &Invocation,
    ) -> Result<T, LockError> {
        let (slot, generation, mut connection) = self.connection(Lane::Shared).await?;
        match Request::Script(invocation)
            .send(&self.scripts, &mut connection)
            .await
        {
            Ok(value) => Ok(value),
            Err(e) => {
                if broken(&e) {
                    slot.discard(generation);
                }
                Err(self.error(e))
            }
        }
    }

    pub(crate) async fn ping(&self) -> Result<(), LockError> {
        self.send(Request::Command(&redis::cmd("PING")), None).await
    }
}

impl Slot {
    fn cached(&self) -> Option<(u64, MultiplexedConnection)> {
        let current = lock(&self.current);
        current
            .as_ref()
            .map(|c| (c.generation, c.connection.clone()))
    }

    fn discard(&self, generation: u64) {
        let mut current = lock(&self.current);
        if current.as_ref().is_some_and(|c| c.generation == generation) {
            *current = None;
        }
    }
}

/// Sends `request` on `connection`, queued before any request sent on that
/// connection after this returns: a give-back runs before the caller's next
/// request to that server. Its answer is awaited (and ignored) by a task,
/// which keeps the connection open until then.
///
/// A multiplexed connection queues a request on its first poll, so the
/// request's future is polled once here, then handed to the task. When that
/// first poll cannot queue it (the connection's queue is full), or outside
/// a runtime, the task sends it, after requests sent meanwhile.
pub(super) fn give_back_in_order(mut connection: MultiplexedConnection, request: redis::Cmd) {
    let mut send = Box::pin(tokio::task::unconstrained(async move {
        let released: redis::RedisResult<redis::Value> = request.query_async(&mut connection).await;
        drop(released);
    }));
    // On the connection's own runtime when there is one; when that runtime
    // is gone, so is the connection, and the lease frees the lock if the
    // acquisition ran.
    match tokio::runtime::Handle::try_current() {
        Ok(handle) => {
            let mut cx = std::task::Context::from_waker(futures_util::task::noop_waker_ref());
            if send.as_mut().poll(&mut cx).is_pending() {
                drop(handle.spawn(send));
            }
        }
        Err(_) => drop(io::spawn(send)),
    }
}

/// Gives a request back through `then` when dropped armed: the request was
/// sent and its answer will not be read.
struct Unanswered<'a> {
    connection: Option<MultiplexedConnection>,
    then: Option<&'a (dyn Fn(MultiplexedConnection) + Sync)>,
}

impl Unanswered<'_> {
    fn disarm(mut self) {
        self.connection = None;
    }
}

impl Drop for Unanswered<'_> {
    fn drop(&mut self) {
        if let (Some(connection), Some(then)) = (self.connection.take(), self.then) {
            then(connection);
        }
    }
}

/// What [`SingleNode::send`] sends.
#[derive(Clone, Copy)]
pub(super) enum Request<'a> {
    /// A Lua script: FCALL or EVALSHA (see [`ScriptMode`]), loaded when
    /// the server lacks it.
    Script(&'a Invocation),
    /// A plain command.
    Command(&'a redis::Cmd),
    /// A script that grants time, the write before a WAIT (see
    /// [`GroupCommit::beat`]), then `WAIT` for the replicas, in one
    /// pipeline on the [`Lane::Replicated`] of the index given; its answer
    /// is an [`Acked`].
    Replicated(&'a Invocation, Replicas, &'a redis::Cmd, usize),
    /// A renewal, then `WAIT`, in one pipeline on [`Lane::Renewal`]; its
    /// answer is an [`Acked`].
    Renewal(&'a Invocation, Replicas),
}

impl Request<'_> {
    fn lane(self) -> Lane {
        match self {
            Request::Script(_) | Request::Command(_) => Lane::Shared,
            Request::Replicated(.., lane) => Lane::Replicated(lane),
            Request::Renewal(..) => Lane::Renewal,
        }
    }

    /// Sends the request on `connection`; a script as the server's `mode`
    /// says.
    async fn send<T: FromRedisValue>(
        self,
        mode: &ScriptMode,
        connection: &mut MultiplexedConnection,
    ) -> redis::RedisResult<T> {
        match self {
            Request::Script(invocation) => invocation.invoke_async(mode, connection).await,
            Request::Command(command) => command.query_async(connection).await,
            Request::Replicated(invocation, replicas, beat, _) => {
                invocation
                    .invoke_then_wait(mode, replicas, Some(beat), connection)
                    .await
            }
            Request::Renewal(invocation, replicas) => {
                invocation
                    .invoke_then_wait(mode, replicas, None, connection)
                    .await
            }
        }
    }
}

/// The connection is unusable (dropped, reset, or an answer timed out on a
/// connection that may be half-open): open a new one next time.
fn broken(e: &RedisError) -> bool {
    e.is_connection_dropped()
        || e.is_io_error()
        || e.is_timeout()
        || e.is_unrecoverable_error()
        || read_only(e)
}

/// The server is a replica now (a master demoted by a failover): find the
/// master again. A write says READONLY; a `WAIT` (a group commit's, which
/// writes nothing a replica refuses before it) says that it "cannot be used
/// with replica instances".
pub(crate) fn read_only(e: &RedisError) -> bool {
    e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::ReadOnly)
        || e.code() == Some("READONLY")
        || e.detail()
            .is_some_and(|d| d.contains("READONLY") || d.contains(WAIT_ON_A_REPLICA))
}
