//! A Redis Cluster, through the redis crate's async cluster client.
//!
//! Every key of a lock carries the lock's name as its hash tag, so the
//! scripts of one lock run on the one master that serves its slot; the
//! client follows MOVED and ASK redirections and refreshes its slot map.
//! The queue and the hand-over work as on one server. A release notice is a
//! PUBLISH, which a cluster forwards to every node, so the Locker's one
//! subscriber connection (to the first seed that answers) hears the
//! releases of every master. The watchdog's batch is split by hash slot
//! (a script may only touch keys of one slot); the calls go out at once,
//! and those for one master share its connection. Grants that wait for
//! replicas (`WAIT` after the script, in one pipeline to the slot's master)
//! use a second cluster connection, which their `WAIT` blocks while it
//! waits.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::future::join_all;
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::Slot;
use redis::{FromRedisValue, RedisError};

use super::scripts;
use super::scripts::{Invocation, ReleaseReply, ScriptMode};
use super::shared::{Acked, Attempt, Extend, Owner, Renewal, Renewed, millis};
use super::shared::{Replicas, Successor, Timeouts};
use super::single::SingleNode;
use super::source::Source;
use super::wake::{ShardedClient, Wakeups};
use crate::address::{self, Address, TlsFiles};
use crate::layout::{Keys, slot};
use crate::sync::lock;
use crate::{LockError, io};

/// A Redis Cluster.
pub(crate) struct ClusterNodes {
    client: ClusterClient,
    /// The connection (to every master), opened on the I/O thread on first
    /// use; the client reconnects to nodes by itself afterwards.
    current: Mutex<Option<ClusterConnection>>,
    connecting: tokio::sync::Mutex<()>,
    /// The connection of the grants that wait for replicas (opened on
    /// first use): `WAIT` blocks the connection to a master it is sent on,
    /// so it never goes on `current`, which every other request uses.
    replicated: Mutex<Option<ClusterConnection>>,
    /// The connection of the watchdog's renewals when grants wait for
    /// replicas (opened on first use): their `WAIT` never waits behind a
    /// grant's on `replicated`.
    renewals: Mutex<Option<ClusterConnection>>,
    timeouts: Timeouts,
    wakeups: Wakeups,
    server: String,
    /// Whether the nodes are reached through TLS.
    tls: bool,
    /// The first seed's address (credentials and TLS settings included).
    seed: redis::ConnectionInfo,
    /// How many replicas of a lock's master must hold a grant.
    replicas: Replicas,
    /// Whether the cluster takes FCALL or EVALSHA: one choice for all its
    /// masters (a master that refuses FCALL makes every script go with
    /// EVALSHA), found out again when a connection is opened.
    scripts: ScriptMode,
}

impl std::fmt::Debug for ClusterNodes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterNodes")
            .field("server", &self.server)
            .finish_non_exhaustive()
    }
}

impl ClusterNodes {
    /// Parses the seed addresses; does not connect.
    pub(crate) fn new(
        seeds: &[Address],
        tls: &TlsFiles,
        timeouts: Timeouts,
    ) -> Result<ClusterNodes, LockError> {
        if seeds.is_empty() {
            return Err(LockError::invalid(
                "Redis Cluster seeds",
                "none given; pass the URL of at least one node of the cluster",
            ));
        }
        tls.need_rustls("Redis Cluster")?;
        let infos = seeds
            .iter()
            .map(|seed| {
                seed.info("redis://[:password@]host[:port] or rediss://... for each cluster node")
            })
            .collect::<Result<Vec<_>, _>>()?;
        let clients = infos
            .iter()
            .map(|info| address::client(info.clone(), tls))
            .collect::<Result<Vec<_>, _>>()?;
        let names: Vec<String> = infos.iter().map(|c| c.addr().to_string()).collect();
        let uses_tls = infos.iter().any(address::is_tls);
        let seed = clients[0].get_connection_info().clone();
        let client = cluster_builder(infos.clone(), tls, timeouts)
            .build()
            .map_err(|e| {
                LockError::invalid(
                    "Redis Cluster seeds",
                    format!("{} (check the URLs)", e.category()),
                )
            })?;
        let tls_files = tls.clone();
        let sharded: ShardedClient = Arc::new(move |pushes| {
            cluster_builder(infos.clone(), &tls_files, timeouts)
                .use_protocol(redis::ProtocolVersion::RESP3)
                .push_sender(pushes)
                .build()
        });
        Ok(ClusterNodes {
            client,
            current: Mutex::new(None),
            connecting: tokio::sync::Mutex::new(()),
            replicated: Mutex::new(None),
            renewals: Mutex::new(None),
            wakeups: Wakeups::sharded(
                clients
                    .into_iter()
                    .map(|c| Source::Fixed(Box::new(c)))
                    .collect(),
                timeouts,
                sharded,
            ),
            server: format!("cluster[{}]", names.join(",")),
            tls: uses_tls,
            seed,
            timeouts,
            replicas: Replicas::default(),
            scripts: ScriptMode::default(),
        })
    }

    /// Makes every grant wait for `replicas` (see [`Replicas`]).
    pub(crate) fn with_replicas(mut self, replicas: Replicas) -> Self {
        self.replicas = replicas;
        self
    }

    /// How many replicas must hold a grant.
    pub(crate) fn replicas(&self) -> Replicas {
        self.replicas
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

    /// How long one operation may take, redirections and retries included.
    fn limit(&self) -> Duration {
        self.timeouts.response * 2
    }

    /// The connection every request but the replicated grants uses.
    async fn connection(&self) -> Result<ClusterConnection, LockError> {
        self.open(&self.current, None).await
    }

    /// The connection of the grants that wait for replicas.
    async fn replicated_connection(&self) -> Result<ClusterConnection, LockError> {
        self.open(&self.replicated, Some(self.replicated_config()))
            .await
    }

    /// The connection of the renewals: when grants wait for replicas, one
    /// of their own (configured as the grants'), so that a renewal's
    /// `WAIT` never waits behind a grant's; otherwise the shared one.
    async fn renewal_connection(&self) -> Result<ClusterConnection, LockError> {
        if !self.replicas.wanted() {
            return self.connection().await;
        }
        self.open(&self.renewals, Some(self.replicated_config()))
            .await
    }

    /// How the connections whose requests wait for replicas are made: an
    /// answer may take the replica timeout longer.
    fn replicated_config(&self) -> redis::cluster::ClusterConfig {
        redis::cluster::ClusterConfig::new()
            .set_connection_timeout(self.timeouts.connect)
            .set_response_timeout(self.timeouts.response + self.replicas.timeout)
    }

    /// The connection kept in `slot`, opened if needed (on the I/O thread,
    /// whose runtime outlives every caller's), with `config` when given.
    async fn open(
        &self,
        slot: &Mutex<Option<ClusterConnection>>,
        config: Option<redis::cluster::ClusterConfig>,
    ) -> Result<ClusterConnection, LockError> {
        let cached = || lock(slot).clone();
        if let Some(connection) = cached() {
            return Ok(connection);
        }
        let _connecting = self.connecting.lock().await;
        if let Some(connection) = cached() {
            return Ok(connection);
        }
        let client = self.client.clone();
        let limit = self.timeouts.connect + self.timeouts.response;
        let server = self.server.clone();
        let tls = self.tls;
        let connection = io::run(async move {
            let connecting = async {
                match config {
                    Some(config) => client.get_async_connection_with_config(config).await,
                    None => client.get_async_connection().await,
                }
            };
            match tokio::time::timeout(limit, connecting).await {
                Ok(Ok(connection)) => Ok(connection),
                Ok(Err(e)) => Err(LockError::from_connect(&server, e, tls)),
                Err(_) => Err(timed_out(&server, limit)),
            }
        })
        .await?;
        // Maybe a cluster upgraded or restarted meanwhile.
        self.scripts.reset();
        *lock(slot) = Some(connection.clone());
        Ok(connection)
    }

    /// Runs a script, for at most [`limit`](Self::limit).
    async fn invoke<T: FromRedisValue>(
        &self,
        invocation: &Invocation,
        connection: &mut ClusterConnection,
    ) -> Result<T, LockError> {
        let invocation = invocation.sharded();
        self.within(
            self.limit(),
            invocation.invoke_async(&self.scripts, connection),
        )
        .await
    }

    /// `request`'s answer, or a connection error after `limit`.
    async fn within<T>(
        &self,
        limit: Duration,
        request: impl Future<Output = redis::RedisResult<T>>,
    ) -> Result<T, LockError> {
        match tokio::time::timeout(limit, request).await {
            Ok(result) => result.map_err(|e| self.error(e)),
            Err(_) => Err(timed_out(&self.server, limit)),
        }
    }

    /// Runs a script on the master of its keys' slot.
    pub(crate) async fn run_script<T: FromRedisValue>(
        &self,
        invocation: &Invocation,
    ) -> Result<T, LockError> {
        let mut connection = self.connection().await?;
        self.invoke(invocation, &mut connection).await
    }

    /// Runs a script that grants time on the master of its keys' slot.
    /// When grants wait for replicas, it goes with `WAIT` on the replicated
    /// connection, and an answer that `granted` (time was granted) not
    /// acknowledged by enough of that master's replicas is
    /// [`LockError::Replicas`]: the grant may hold on the master, and the
    /// caller gives it back or does not count it.
    ///
    /// With `give_back`, for a script that takes something: an acquisition
    /// whose answer is not read (timed out, or this future dropped) may
    /// still run, so `give_back()` is then sent on the same connection, and
    /// runs after it on that master.
    async fn grant<T: FromRedisValue>(
        &self,
        invocation: &Invocation,
        granted: fn(&T) -> bool,
        give_back: Option<&(dyn Fn() -> redis::Cmd + Sync)>,
    ) -> Result<T, LockError> {
        let mut connection = self.grant_connection().await?;
        let mut pending = GiveBack(give_back.map(|g| (connection.clone(), g)));
        let answer = self.acked(invocation, &mut connection, self.limit()).await;
        if answer.is_ok() {
            pending.0 = None;
        }
        let Acked { reply, replicas } = answer?;
        if granted(&reply) {
            self.replicas.enough(&self.server, replicas)?;
        }
        Ok(reply)
    }

    /// The connection of the scripts that grant time: the replicated one
    /// when grants wait for replicas.
    async fn grant_connection(&self) -> Result<ClusterConnection, LockError> {
        if self.replicas.wanted() {
            self.replicated_connection().await
        } else {
            self.connection().await
        }
    }

    /// Runs `invocation` on `connection` within `limit`, followed by `WAIT`
    /// (and the replica timeout more) when grants wait for replicas: the
    /// answer, and how many replicas acknowledged it (0 when none are
    /// wanted, which is then enough).
    async fn acked<T: FromRedisValue>(
        &self,
        invocation: &Invocation,
        connection: &mut ClusterConnection,
        limit: Duration,
    ) -> Result<Acked<T>, LockError> {
        let invocation = invocation.sharded();
        if self.replicas.wanted() {
            let limit = limit + self.replicas.timeout;
            self.within(
                limit,
                invocation.invoke_then_wait(&self.scripts, self.replicas, None, connection),
            )
            .await
        } else {
            self.within(limit, invocation.invoke_async(&self.scripts, connection))
                .await
                .map(|reply| Acked { reply, replicas: 0 })
        }
    }

    /// Runs an attempt of a kind whose reply starts with 1 when taken (a
    /// side of a read-write lock, a permit, a set): a grant (see
    /// [`grant`](Self::grant)) when it answers `{1, ...}`.
    pub(crate) async fn run_script_or_give_back(
        &self,
        invocation: &Invocation,
        give_back: &(dyn Fn() -> redis::Cmd + Sync),
    ) -> Result<Vec<i64>, LockError> {
        let taken = |reply: &Vec<i64>| reply.first() == Some(&1);
        self.grant(invocation, taken, Some(give_back)).await
    }

    /// Runs a command without keys on any node.
    pub(crate) async fn run_command<T: FromRedisValue>(
        &self,
        command: &redis::Cmd,
    ) -> Result<T, LockError> {
        let mut connection = self.connection().await?;
        self.within(self.limit(), command.query_async(&mut connection))
            .await
    }

    /// The node at `host:port` as a server of its own, reached as the
    /// first seed is (credentials, TLS).
    pub(crate) fn node_at(&self, host: &str, port: u16) -> Result<SingleNode, LockError> {
        let mut info = self.seed.clone();
        let addr = match info.addr() {
            redis::ConnectionAddr::TcpTls {
                insecure,
                tls_params,
                ..
            } => redis::ConnectionAddr::TcpTls {
                host: host.to_owned(),
                port,
                insecure: *insecure,
                tls_params: tls_params.clone(),
            },
            _ => redis::ConnectionAddr::Tcp(host.to_owned(), port),
        };
        info = info.set_addr(addr);
        Ok(SingleNode::from_client(
            redis::Client::open(info).map_err(|e| self.error(e))?,
            self.timeouts,
        ))
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
        let give_back = || scripts::give_back(keys, token);
        let answer = self
            .grant(&invocation, Attempt::granted, Some(&give_back))
            .await?;
        Ok(Attempt::from_reply(answer))
    }

    pub(crate) async fn release(
        &self,
        owner: Owner<'_>,
        fencing_token: u64,
    ) -> Result<bool, LockError> {
        Ok(self.release_to(owner, fencing_token, None).await?.0)
    }

    /// [`release`](Self::release), handing the lock to `successor` (see
    /// `SingleNode::release_to`); also the notice of its hand-over.
    pub(crate) async fn release_to(
        &self,
        Owner { keys, token }: Owner<'_>,
        fencing_token: u64,
        successor: Option<&Successor<'_>>,
    ) -> Result<(bool, Option<String>), LockError> {
        let mut connection = self.connection().await?;
        let invocation = scripts::release(keys, token, fencing_token, false, successor);
        let reply: ReleaseReply = self.invoke(&invocation, &mut connection).await?;
        Ok(match reply {
            ReleaseReply::Handed(notice) => {
                self.released(keys, ReleaseReply::Handed(notice.clone()));
                (true, Some(notice))
            }
            reply => (self.released(keys, reply), None),
        })
    }

    /// Releases every name of a set held under `token`, one call per slot
    /// (the groups it was taken in), the calls sent together; per name,
    /// whether the token owned it. The first error, once every call
    /// answered, when one failed.
    pub(crate) async fn release_set(
        &self,
        token: &str,
        members: &[(&Keys, u64)],
    ) -> Result<Vec<bool>, LockError> {
        let mut groups: Vec<(u16, Vec<usize>)> = Vec::new();
        for (i, (keys, _)) in members.iter().enumerate() {
            let s = slot(&keys.lock);
            match groups.iter_mut().find(|(g, _)| *g == s) {
                Some((_, group)) => group.push(i),
                None => groups.push((s, vec![i])),
            }
        }
        let calls = groups.iter().map(|(_, group)| async move {
            let group: Vec<(&Keys, u64)> = group.iter().map(|&i| members[i]).collect();
            let invocation = scripts::release_set(&group, token, false);
            let mut connection = self.connection().await?;
            let replies = scripts::set_replies(
                self.invoke(&invocation, &mut connection).await?,
                group.len(),
                &self.server,
            )?;
            Ok(group
                .iter()
                .zip(replies)
                .map(|((keys, _), reply)| self.released(keys, reply))
                .collect::<Vec<bool>>())
        });
        let mut owned = vec![false; members.len()];
        for ((_, group), answer) in groups.iter().zip(join_all(calls).await) {
            for (&i, answer) in group.iter().zip(answer?) {
                owned[i] = answer;
            }
        }
        Ok(owned)
    }

    /// Whether a release's `reply` for the lock of `keys` found it the
    /// token's (deleted or handed over).
    fn released(&self, keys: &Keys, reply: ReleaseReply) -> bool {
        match reply {
            ReleaseReply::Handed(notice) => {
                // A waiter of this Locker hears it now (see `SingleNode::release`).
                self.wakeups().handed_here(&keys.channel, &notice);
                true
            }
            ReleaseReply::Code(code) => code == 1,
        }
    }

    pub(crate) async fn extend(
        &self,
        Owner { keys, token }: Owner<'_>,
        (by, how): (Duration, Extend),
        max_lease: Duration,
    ) -> Result<Option<Duration>, LockError> {
        let invocation = scripts::extend(keys, token, millis(by), how.mode(), max_lease);
        let left: i64 = self.grant(&invocation, |left| *left >= 0, None).await?;
        super::shared::extended(left, max_lease)
    }

    /// Renews a batch: one script call per hash slot, all at once. A slot
    /// whose master did not answer leaves its leases [`Renewed::Unknown`];
    /// an error only when no slot's master answered.
    pub(crate) async fn renew(&self, leases: &[Renewal<'_>]) -> Result<Vec<Renewed>, LockError> {
        let connection = self.renewal_connection().await?;
        // A dead master must not hold up the renewals of the others past
        // their leases: each slot's call gets a quarter of the shortest one.
        let shortest = leases
            .iter()
            .map(|l| l.expire)
            .min()
            .unwrap_or(self.limit());
        let limit = (shortest / 4)
            .max(Duration::from_millis(10))
            .min(self.limit());
        let mut slots: HashMap<Slot, Vec<usize>> = HashMap::new();
        for (i, lease) in leases.iter().enumerate() {
            slots
                .entry(Slot::for_key(&lease.keys.lock))
                .or_default()
                .push(i);
        }
        let calls = slots.into_values().map(|members| {
            let mut connection = connection.clone();
            async move {
                let batch: Vec<&Renewal<'_>> = members.iter().map(|&i| &leases[i]).collect();
                let invocation = scripts::renew(&batch);
                // Not acknowledged by enough replicas: not counted.
                let left: Result<Vec<i64>, LockError> = self
                    .acked(&invocation, &mut connection, limit)
                    .await
                    .and_then(|Acked { reply, replicas }| {
                        self.replicas.enough(&self.server, replicas).map(|()| reply)
                    });
                (members, left)
            }
        });
        let mut renewed = vec![Renewed::Unknown; leases.len()];
        let mut first_error = None;
        let mut answered = false;
        for (members, left) in join_all(calls).await {
            match left {
                Ok(left) if left.len() == members.len() => {
                    answered = true;
                    for (i, ms) in members.into_iter().zip(left) {
                        renewed[i] = Renewed::from_ms(ms);
                    }
                }
                Ok(_) => {
                    first_error.get_or_insert_with(|| LockError::UnexpectedReply {
                        server: self.server.clone(),
                        reply: "a batch of renewals with too few values".into(),
                    });
                }
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        match first_error {
            Some(e) if !answered => Err(e),
            _ => Ok(renewed),
        }
    }

    pub(crate) async fn ping(&self) -> Result<(), LockError> {
        let mut connection = self.connection().await?;
        self.within(
            self.limit(),
            redis::cmd("PING").query_async::<()>(&mut connection),
        )
        .await
    }
}

fn timed_out(server: &str, limit: Duration) -> LockError {
    LockError::Connection {
        server: server.to_owned(),
        source: format!("no answer within {limit:?}").into(),
    }
}

/// The cluster client for `infos` (the seeds), with the Locker's timeouts
/// and TLS files.
fn cluster_builder(
    infos: Vec<redis::ConnectionInfo>,
    tls: &TlsFiles,
    timeouts: Timeouts,
) -> redis::cluster::ClusterClientBuilder {
    let builder = ClusterClient::builder(infos)
        .connection_timeout(timeouts.connect)
        .response_timeout(timeouts.response)
        .retries(2);
    #[cfg(feature = "tls-rustls")]
    let builder = match tls.redis_certificates() {
        Some(certificates) => builder.certs(certificates),
        None => builder,
    };
    #[cfg(not(feature = "tls-rustls"))]
    let _ = tls;
    builder
}

/// An acquisition sent but not answered: dropped while set, it sends the
/// release in the background.
struct GiveBack<'a>(Option<(ClusterConnection, &'a (dyn Fn() -> redis::Cmd + Sync))>);

impl Drop for GiveBack<'_> {
    fn drop(&mut self) {
        let Some((mut connection, give_back)) = self.0.take() else {
            return;
        };
        let release = scripts::sharded_eval(give_back());
        let _ = io::spawn(async move {
            let released: redis::RedisResult<redis::Value> =
                release.query_async(&mut connection).await;
            drop(released);
        });
    }
}
