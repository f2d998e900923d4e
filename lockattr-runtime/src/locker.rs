//! [`Locker`] and its configuration ([`LockerBuilder`]), which every
//! request of the Locker shares. A lock's request is in `request.rs`, the
//! other kinds' in their own files.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::address::{Address, RedisAddr, TlsFiles};
use crate::backend::redlock::Redlock;
use crate::backend::shared::Replicas;
use crate::backend::source::{MasterSettings, Sentinels};
use crate::backend::{Backend, ClusterNodes, SingleNode, Timeouts};
use crate::inner::Inner;
use crate::local::LocalQueues;
use crate::watchdog::Watchdog;
use crate::{LockError, io};

/// Default prefix of every Redis key the library writes.
pub const DEFAULT_PREFIX: &str = "lockattr:";
/// Default time to open a connection to Redis: 1 second.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// Default time to wait for one answer from Redis: 1 second.
pub const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(1);
pub use crate::layout::MAX_EXPIRE;
/// Default [`max_lease`](LockerBuilder::max_lease) of a Redlock: 60
/// seconds. Nodes restarted empty take no part in a majority for this long.
pub const DEFAULT_REDLOCK_MAX_LEASE: Duration = Duration::from_secs(60);
/// The longest connect, response or node timeout accepted: 10 minutes.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(600);
/// Default [`fence_retention`](LockerBuilder::fence_retention): 60 seconds.
pub const DEFAULT_FENCE_RETENTION: Duration = Duration::from_secs(60);
/// Default [`replica_timeout`](LockerBuilder::replica_timeout): 100
/// milliseconds, how long a master waits for replicas to acknowledge a
/// grant when [`min_replicas`](LockerBuilder::min_replicas) asks for any.
pub const DEFAULT_REPLICA_TIMEOUT: Duration = Duration::from_millis(100);

/// Who gets a lock that is released while others wait for it
/// ([`LockerBuilder::fairness`]), on one server and on a Redis Cluster (a
/// Redlock's waiters do not queue: the first to ask after a release gets
/// it).
///
/// ```
/// # use lockattr_runtime::{Fairness, Locker};
/// # use std::time::Duration;
/// let locker = Locker::builder("redis://127.0.0.1/")
///     .fairness(Fairness::Bounded(Duration::from_millis(2)))
///     .build()
///     .unwrap();
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Fairness {
    /// First come, first served: every release hands the lock straight to
    /// the oldest waiter still within its acquire time, with its fencing
    /// token, and tells it so. Nobody can take a lock that others queue
    /// for, but every critical section under contention then costs a
    /// hand-over to another process.
    Fifo,
    /// Newcomers may take the lock while the oldest waiter has waited less
    /// than this (as Go's `sync.Mutex` does): a release then leaves the
    /// lock free and tells only the oldest waiter to try; whoever asks
    /// first gets it (usually the releasing process, which is already
    /// running), and the waiter keeps its place. Once the oldest waiter has
    /// waited this long, releases hand over first come, first served
    /// again. So a process can run critical sections back to back for
    /// about this long before the next process in line gets the lock,
    /// which saves a hand-over per critical section, and no waiter waits
    /// more than about this long per process ahead of it in line. From 1 ms
    /// to 1 s.
    Bounded(Duration),
}

/// The longest [`Fairness::Bounded`] time accepted: 1 second.
const MAX_BARGE: Duration = Duration::from_secs(1);

/// A handle to a Redis deployment that hands out locks.
///
/// Cheap to create (it parses the URL and connects on first use) and cheap
/// to clone (clones share its connections). All locks of a Locker share one
/// multiplexed connection per tokio runtime that uses it, so an operation
/// awaited on a tokio runtime (in a task or in `block_on`) talks to Redis
/// from that runtime; plain threads (the blocking path) and other
/// executors go through a small I/O thread of the library. Connections are opened again after they
/// drop or Redis restarts. Waiters of a Locker hear release notices on one
/// more connection per runtime where they wait. A Locker works from any tokio runtime,
/// from several runtimes one after another, and from plain threads.
///
/// ```no_run
/// # use lockattr_runtime as lockattr; // the doctest builds without the facade
/// use lockattr::Locker;
/// use std::time::Duration;
///
/// # async fn run() -> Result<(), lockattr::LockError> {
/// let locker = Locker::new("redis://127.0.0.1:6379/")?;
/// let guard = locker
///     .lock("order:7")
///     .expire(Duration::from_secs(30))
///     .acquire_timeout(Duration::from_secs(5))
///     .acquire()
///     .await?;
/// println!("fencing token {}", guard.fencing_token());
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Locker {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for Locker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Locker")
            .field("server", &self.inner.backend.server())
            .field("prefix", &self.inner.prefix)
            .finish()
    }
}

impl Locker {
    /// A Locker for the Redis server at `url`, with default settings.
    ///
    /// Accepts `redis://[[user]:password@]host[:port][/db]`,
    /// `rediss://...` (TLS: see [`LockerBuilder::tls_root_ca`]) and
    /// `unix:///path/to/redis.sock`, or a [`redis::ConnectionInfo`] (see
    /// [`RedisAddr`]). Does not connect: an unreachable server shows up as
    /// [`LockError::Connection`] on first use.
    ///
    /// ```
    /// # use lockattr_runtime::Locker;
    /// let locker = Locker::new("redis://:secret@127.0.0.1:6379/2").unwrap();
    /// assert!(!format!("{locker:?}").contains("secret"));
    /// assert!(Locker::new("http://example.com").is_err());
    /// ```
    pub fn new(url: impl RedisAddr) -> Result<Locker, LockError> {
        Locker::builder(url).build()
    }

    /// A builder for a Locker with non-default settings.
    ///
    /// ```
    /// # use lockattr_runtime::Locker;
    /// # use std::time::Duration;
    /// let locker = Locker::builder("redis://127.0.0.1:6379/")
    ///     .prefix("myapp:lock:")
    ///     .connect_timeout(Duration::from_millis(300))
    ///     .response_timeout(Duration::from_millis(300))
    ///     .build()
    ///     .unwrap();
    /// assert_eq!(locker.prefix(), "myapp:lock:");
    /// ```
    pub fn builder(url: impl RedisAddr) -> LockerBuilder {
        LockerBuilder::new(Target::Single(Address::of(url)))
    }

    /// A Locker over independent Redis masters (Redlock), with default
    /// settings: a lock is held while a majority of them hold it.
    ///
    /// Takes any list of URLs (an array, a slice, a `Vec<String>`): an odd
    /// number of at least 3 masters that do not replicate each other. A
    /// majority tolerates the failure of the rest: 1 of 3, 2 of 5, 3 of 7.
    /// Every request goes to all nodes at once, so an acquisition costs
    /// about one round trip. A node that is down or frozen costs at most the
    /// [node timeout](LockerBuilder::node_timeout) per operation (once a
    /// majority is connected). An acquisition that cannot reach a majority
    /// tries again, with a growing pause, until its acquire time ends, then
    /// fails with [`LockError::NoQuorum`]; with an acquire time of zero it
    /// fails at once.
    ///
    /// Each URL must reach a different server: two URLs that turn out to
    /// reach one server (`localhost` and `127.0.0.1`, two databases of it)
    /// count once, and acquisitions fail with [`LockError::InvalidInput`].
    /// Nodes restarted without their data do not vote for
    /// [`max_lease`](LockerBuilder::max_lease) (60 s by default; see
    /// [`delay_restarted_nodes`](LockerBuilder::delay_restarted_nodes)),
    /// which also holds for nodes seen for the first time.
    ///
    /// Guards work as with one server: release, extend, renewal and the lost
    /// signal count a majority; the lease is trusted for `expire` less a
    /// clock drift allowance (1% of it plus 2 ms) from when the request was
    /// sent. Fencing tokens keep increasing from one owner to the next (see
    /// the crate docs for how, and what they assume). Waiters try again when
    /// a release notice arrives from any node, instead of polling.
    ///
    /// ```
    /// # use lockattr_runtime::Locker;
    /// let locker = Locker::redlock([
    ///     "redis://10.0.0.1:6379/",
    ///     "redis://10.0.0.2:6379/",
    ///     "redis://10.0.0.3:6379/",
    /// ])
    /// .unwrap();
    /// assert!(Locker::redlock(vec!["redis://a/".to_string(), "redis://b/".to_string()]).is_err());
    /// ```
    pub fn redlock<I>(urls: I) -> Result<Locker, LockError>
    where
        I: IntoIterator,
        I::Item: RedisAddr,
    {
        Locker::redlock_builder(urls).build()
    }

    /// A builder for a Redlock [`Locker`] with non-default settings: those
    /// of [`Locker::builder`], plus [`node_timeout`](LockerBuilder::node_timeout)
    /// and [`delay_restarted_nodes`](LockerBuilder::delay_restarted_nodes);
    /// [`max_lease`](LockerBuilder::max_lease) defaults to 60 s here.
    ///
    /// ```
    /// # use lockattr_runtime::Locker;
    /// # use std::time::Duration;
    /// let urls = ["redis://10.0.0.1/", "redis://10.0.0.2/", "redis://10.0.0.3/"];
    /// let locker = Locker::redlock_builder(&urls)
    ///     .node_timeout(Duration::from_millis(50))
    ///     .build()
    ///     .unwrap();
    /// ```
    pub fn redlock_builder<I>(urls: I) -> LockerBuilder
    where
        I: IntoIterator,
        I::Item: RedisAddr,
    {
        LockerBuilder::new(Target::Redlock(addresses(urls)))
    }

    /// A Locker over a Redis Cluster, with default settings, given the URLs
    /// of one or more of its nodes (the rest are discovered).
    ///
    /// Every key of a lock shares the lock's name as its hash tag, so a lock
    /// lives on the one master that serves its slot; the client follows the
    /// cluster's redirections when slots move. Waiting, hand-over on
    /// release, fencing tokens and renewal work as on one server.
    ///
    /// ```
    /// # use lockattr_runtime::Locker;
    /// let locker = Locker::cluster(["redis://10.0.0.1:7000/", "redis://10.0.0.2:7000/"]).unwrap();
    /// assert!(Locker::cluster(Vec::<String>::new()).is_err());
    /// ```
    pub fn cluster<I>(seeds: I) -> Result<Locker, LockError>
    where
        I: IntoIterator,
        I::Item: RedisAddr,
    {
        Locker::cluster_builder(seeds).build()
    }

    /// A builder for a Redis Cluster [`Locker`] with non-default settings
    /// (those of [`Locker::builder`]).
    ///
    /// ```
    /// # use lockattr_runtime::Locker;
    /// # use std::time::Duration;
    /// let locker = Locker::cluster_builder(["redis://10.0.0.1:7000/"])
    ///     .response_timeout(Duration::from_millis(500))
    ///     .build()
    ///     .unwrap();
    /// ```
    pub fn cluster_builder<I>(seeds: I) -> LockerBuilder
    where
        I: IntoIterator,
        I::Item: RedisAddr,
    {
        LockerBuilder::new(Target::Cluster(addresses(seeds)))
    }

    /// A Locker for the master of a Redis Sentinel group, with default
    /// settings: `master_name` is the name the sentinels monitor
    /// (`sentinel monitor <name> ...`), `sentinels` the URLs of one or more
    /// sentinels (`redis://host:26379/`; `rediss://` for TLS; a password in
    /// a URL is the sentinel's own).
    ///
    /// Every new connection asks the sentinels (all at once; the first
    /// master that confirms its role wins) where the master is. After a
    /// failover, operations fail with [`LockError::Connection`] while the
    /// old master is gone (or answers as a replica), then reach the new
    /// master: the same Locker goes on working. The master is reached with
    /// TLS when the sentinels are, with the same
    /// [certificates](LockerBuilder::tls_root_ca); its credentials and
    /// database are [`master_auth`](LockerBuilder::master_auth) and
    /// [`master_db`](LockerBuilder::master_db).
    ///
    /// A failover can lose a lock: Redis replicates asynchronously, so a
    /// lock taken just before the master failed may be missing on the
    /// replica promoted in its place, and a second owner can then take it
    /// while the first still works. It is the same with any replicated
    /// Redis; make the protected writes conditional on the
    /// [fencing token](crate::LockGuard::fencing_token), which keeps
    /// increasing across a failover (a counter that was lost starts again
    /// from the new master's clock).
    ///
    /// ```
    /// # use lockattr_runtime::Locker;
    /// let locker = Locker::sentinel(
    ///     "mymaster",
    ///     ["redis://10.0.0.1:26379/", "redis://10.0.0.2:26379/", "redis://10.0.0.3:26379/"],
    /// )
    /// .unwrap();
    /// assert!(Locker::sentinel("mymaster", Vec::<String>::new()).is_err());
    /// ```
    pub fn sentinel<I>(master_name: &str, sentinels: I) -> Result<Locker, LockError>
    where
        I: IntoIterator,
        I::Item: RedisAddr,
    {
        Locker::sentinel_builder(master_name, sentinels).build()
    }

    /// A builder for a Sentinel [`Locker`] with non-default settings: those
    /// of [`Locker::builder`], plus [`master_auth`](LockerBuilder::master_auth)
    /// and [`master_db`](LockerBuilder::master_db).
    ///
    /// ```
    /// # use lockattr_runtime::Locker;
    /// # use std::time::Duration;
    /// let locker = Locker::sentinel_builder(
    ///     "mymaster",
    ///     ["redis://:sentinel-secret@10.0.0.1:26379/", "redis://:sentinel-secret@10.0.0.2:26379/"],
    /// )
    /// .master_auth("locks", "master-secret")
    /// .master_db(2)
    /// .connect_timeout(Duration::from_millis(500))
    /// .build()
    /// .unwrap();
    /// assert!(!format!("{locker:?}").contains("secret"));
    /// ```
    pub fn sentinel_builder<I>(master_name: impl Into<String>, sentinels: I) -> LockerBuilder
    where
        I: IntoIterator,
        I::Item: RedisAddr,
    {
        LockerBuilder::new(Target::Sentinel {
            master_name: master_name.into(),
            sentinels: addresses(sentinels),
        })
    }

    /// The longest lease this Locker accepts (see
    /// [`LockerBuilder::max_lease`]).
    ///
    /// ```
    /// # use lockattr_runtime::{Locker, MAX_EXPIRE};
    /// assert_eq!(Locker::new("redis://127.0.0.1/").unwrap().max_lease(), MAX_EXPIRE);
    /// ```
    pub fn max_lease(&self) -> Duration {
        self.inner.max_lease
    }

    /// The label this Locker's locks are recorded under (see
    /// [`LockerBuilder::label`]).
    ///
    /// ```
    /// # use lockattr_runtime::Locker;
    /// let locker = Locker::builder("redis://127.0.0.1/").label("api").build().unwrap();
    /// assert_eq!(locker.label(), "api");
    /// ```
    pub fn label(&self) -> &str {
        &self.inner.label
    }

    /// The prefix of every Redis key this Locker writes.
    ///
    /// ```
    /// # use lockattr_runtime::Locker;
    /// assert_eq!(Locker::new("redis://127.0.0.1/").unwrap().prefix(), "lockattr:");
    /// ```
    pub fn prefix(&self) -> &str {
        &self.inner.prefix
    }

    /// One PING round trip through this Locker's connection: checks that
    /// Redis answers, and measures how long it takes.
    ///
    /// ```no_run
    /// # use lockattr_runtime::Locker;
    /// # async fn run(locker: &Locker) -> Result<(), lockattr_runtime::LockError> {
    /// let rtt = locker.ping().await?;
    /// println!("Redis answered in {rtt:?}");
    /// # Ok(()) }
    /// ```
    pub async fn ping(&self) -> Result<Duration, LockError> {
        let inner = self.inner.clone();
        let start = Instant::now();
        io::run_here(async move { inner.backend.ping().await }).await?;
        Ok(start.elapsed())
    }

    /// [`ping`](Locker::ping) for threads without an async runtime.
    ///
    /// ```no_run
    /// # use lockattr_runtime::Locker;
    /// # fn run(locker: &Locker) -> Result<(), lockattr_runtime::LockError> {
    /// locker.ping_blocking()?;
    /// # Ok(()) }
    /// ```
    pub fn ping_blocking(&self) -> Result<Duration, LockError> {
        let inner = self.inner.clone();
        let start = Instant::now();
        io::run_blocking(async move { inner.backend.ping().await })?;
        Ok(start.elapsed())
    }
}

fn addresses<I>(urls: I) -> Vec<Address>
where
    I: IntoIterator,
    I::Item: RedisAddr,
{
    urls.into_iter().map(Address::of).collect()
}

/// What a [`LockerBuilder`] builds a Locker for.
#[derive(Clone)]
enum Target {
    Single(Address),
    Redlock(Vec<Address>),
    Cluster(Vec<Address>),
    Sentinel {
        master_name: String,
        sentinels: Vec<Address>,
    },
}

/// Settings of a [`Locker`]; see [`Locker::builder`],
/// [`Locker::redlock_builder`] and [`Locker::cluster_builder`].
#[derive(Clone)]
pub struct LockerBuilder {
    target: Target,
    prefix: String,
    timeouts: Timeouts,
    node_timeout: Option<Duration>,
    delay_restarted_nodes: Option<bool>,
    max_lease: Option<Duration>,
    fence_retention: Duration,
    tls: TlsFiles,
    master: Option<MasterSettings>,
    label: Option<String>,
    fairness: Fairness,
    replicas: Replicas,
}

impl std::fmt::Debug for LockerBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The URLs may hold a password: never print them.
        let kind = match &self.target {
            Target::Single(_) => "single",
            Target::Redlock(_) => "redlock",
            Target::Cluster(_) => "cluster",
            Target::Sentinel { .. } => "sentinel",
        };
        f.debug_struct("LockerBuilder")
            .field("kind", &kind)
            .field("prefix", &self.prefix)
            .field("connect_timeout", &self.timeouts.connect)
            .field("response_timeout", &self.timeouts.response)
            .field("node_timeout", &self.node_timeout)
            .field("max_lease", &self.max_lease)
            .field("fence_retention", &self.fence_retention)
            .field("tls", &self.tls)
            .field("master", &self.master)
            .field("label", &self.label)
            .field("fairness", &self.fairness)
            .field("min_replicas", &self.replicas.min)
            .field("replica_timeout", &self.replicas.timeout)
            .finish_non_exhaustive()
    }
}

/// The setters of a builder that only store their argument. Each entry,
/// `pub fn name(arg: Type, ..) => field = value;` after its docs, is the
/// method `pub fn name(mut self, arg: Type, ..) -> Self` with those docs: it
/// sets `self.field` (or a field of a field, `timeouts.connect`) to `value`
/// and returns the builder, for the next setting.
macro_rules! setters {
    ($(
        $(#[$attr:meta])*
        $vis:vis fn $name:ident($($arg:ident: $ty:ty),+) => $($field:ident).+ = $value:expr;
    )+) => {
        $(
            $(#[$attr])*
            $vis fn $name(mut self, $($arg: $ty),+) -> Self {
                self.$($field).+ = $value;
                self
            }
        )+
    };
}
pub(crate) use setters;

impl LockerBuilder {
    fn new(target: Target) -> LockerBuilder {
        LockerBuilder {
            target,
            prefix: DEFAULT_PREFIX.to_owned(),
            timeouts: Timeouts {
                connect: DEFAULT_CONNECT_TIMEOUT,
                response: DEFAULT_RESPONSE_TIMEOUT,
            },
            node_timeout: None,
            delay_restarted_nodes: None,
            max_lease: None,
            fence_retention: DEFAULT_FENCE_RETENTION,
            tls: TlsFiles::default(),
            master: None,
            label: None,
            fairness: Fairness::Fifo,
            replicas: Replicas {
                min: 0,
                timeout: DEFAULT_REPLICA_TIMEOUT,
            },
        }
    }

    setters! {
        /// Who gets a lock released while others wait (see [`Fairness`]).
        /// Default: [`Fairness::Fifo`]. No effect on a Redlock.
        ///
        /// ```
        /// # use lockattr_runtime::{Fairness, Locker};
        /// # use std::time::Duration;
        /// let locker = Locker::builder("redis://127.0.0.1/")
        ///     .fairness(Fairness::Bounded(Duration::from_millis(2)))
        ///     .build()
        ///     .unwrap();
        /// ```
        pub fn fairness(fairness: Fairness) => fairness = fairness;

        /// How many replicas must hold a grant before the caller is told it
        /// has the lock (default 0: the master alone). On one server with
        /// replicas, a Sentinel group, or each master of a Cluster; refused on
        /// a Redlock, whose nodes are masters without replicas.
        ///
        /// Redis replicates asynchronously. A lock written to a master that
        /// dies before a replica received it is gone once that replica is
        /// promoted, and a second caller then takes the same name while the
        /// first still runs. With `n` above zero, every script that grants
        /// time is followed by `WAIT n replica_timeout` (on one server or a
        /// Sentinel group, the grants of a process share their WAITs: one
        /// covers every grant answered before it was sent), and the grant
        /// only counts once `n` replicas acknowledged it:
        /// - an acquisition that does not reach `n` replicas in time is given
        ///   back and tried again while its acquire time lasts, then fails with
        ///   [`LockError::Replicas`];
        /// - a waiter handed the lock by a release confirms it with one more
        ///   call (and WAIT) before its body starts;
        /// - a renewal, an `extend` or a `hold_at_least` that is not
        ///   acknowledged does not count: the guard keeps the lease it had,
        ///   and is lost when that ends.
        ///
        /// Releases do not wait: a release that a failover loses only delays
        /// the next holder until the lease ends.
        ///
        /// WAIT is not consensus. A replica that acknowledged can still lose
        /// an election to one that did not, and a master can fail over after
        /// the acknowledgement to a replica that lagged; with `n` equal to
        /// the number of replicas, every replica that can be promoted holds
        /// the grant. Grants that wait share one connection per tokio runtime
        /// (per master on a Cluster), so that a frozen replica stalls nothing
        /// but them; on it, one grant waits for its acknowledgement before
        /// the next is read. See `docs/faults.md` for what each setting
        /// survives.
        ///
        /// ```
        /// # use lockattr_runtime::Locker;
        /// # use std::time::Duration;
        /// let locker = Locker::sentinel_builder("locks", ["redis://10.0.0.1:26379/"])
        ///     .min_replicas(1)
        ///     .replica_timeout(Duration::from_millis(50))
        ///     .build();
        /// assert!(locker.is_ok());
        /// let urls = ["redis://10.0.0.1/", "redis://10.0.0.2/", "redis://10.0.0.3/"];
        /// let redlock = Locker::redlock_builder(urls).min_replicas(1).build();
        /// assert!(redlock.unwrap_err().to_string().contains("min_replicas"));
        /// ```
        pub fn min_replicas(n: u32) => replicas.min = n;

        /// How long a master waits for [`min_replicas`](Self::min_replicas)
        /// replicas to acknowledge a grant (default
        /// [`DEFAULT_REPLICA_TIMEOUT`], 100 ms; more than zero, at most
        /// [`MAX_TIMEOUT`]). A lock's lease must be at least twice as long.
        ///
        /// A healthy replica on the same network acknowledges within a round
        /// trip or two; see `docs/performance.md` for the measured cost. The
        /// time comes off the lease, and an acquisition that waits this long
        /// in vain tries again while its acquire time lasts.
        ///
        /// ```
        /// # use lockattr_runtime::Locker;
        /// # use std::time::Duration;
        /// let err = Locker::builder("redis://127.0.0.1/")
        ///     .min_replicas(1)
        ///     .replica_timeout(Duration::ZERO)
        ///     .build()
        ///     .unwrap_err();
        /// assert!(err.to_string().contains("replica timeout"));
        /// ```
        pub fn replica_timeout(timeout: Duration) => replicas.timeout = timeout;

        /// Redlock only: how long each node may take to answer one request
        /// (default: a hundredth of the lock's lease, at least 10 ms and at most
        /// the response timeout; at most [`MAX_TIMEOUT`]). A node that is down
        /// or frozen costs an
        /// operation at most this long; its answer is then not counted. Keep it
        /// well below the lease: the time spent waiting comes off the lease's
        /// validity, and above a round trip to the nodes.
        ///
        /// It bounds the request only. Opening a connection (and reading what
        /// the Locker reads on it, and loading the scripts) is bounded by the
        /// [connect](Self::connect_timeout) and
        /// [response](Self::response_timeout) timeouts, in a task that goes on
        /// when an operation stops waiting for it. A request cut off by the node
        /// timeout leaves its connection open; an acquisition cut off is given
        /// back on that connection before any later request.
        ///
        /// ```
        /// # use lockattr_runtime::Locker;
        /// # use std::time::Duration;
        /// let urls = ["redis://10.0.0.1/", "redis://10.0.0.2/", "redis://10.0.0.3/"];
        /// let locker = Locker::redlock_builder(urls).node_timeout(Duration::from_millis(25)).build();
        /// assert!(locker.is_ok());
        /// let single = Locker::builder("redis://10.0.0.1/").node_timeout(Duration::from_millis(25)).build();
        /// assert!(single.unwrap_err().to_string().contains("Redlock"));
        /// ```
        pub fn node_timeout(timeout: Duration) => node_timeout = Some(timeout);

        /// Redlock only: whether a node that has kept its data for less than the
        /// Locker's [`max_lease`](Self::max_lease) is kept from counting toward
        /// any majority (default `true`).
        ///
        /// A node restarted without persistence has forgotten the locks it held:
        /// with the majority of a holder that used it, a second owner could
        /// take the lock while the first still holds its lease, which may be as
        /// long as `max_lease` whatever the lease of the lock being requested.
        /// Delaying the restarted node's vote until every lease it may have held
        /// has run out closes that gap (the Redlock description's "delayed
        /// restart", done by the clients).
        ///
        /// When a node last started is read on every new connection to it (a
        /// restart breaks the connections), from two sources: `INFO server`'s
        /// uptime, and a marker key, `<prefix>node`, that the first Locker to
        /// find it missing writes with the server's clock (`TIME`) and a random
        /// id. A restart without persistence, `FLUSHALL` or `FLUSHDB` removes
        /// the marker with the locks. The later of the two counts: INFO sees a
        /// restart from an old snapshot that kept the marker, the marker sees a
        /// restart when INFO is refused. The marker has no TTL (no `volatile-*`
        /// policy evicts it) and holds about 50 bytes; on a database other than
        /// 0 the same key is also kept in database 0 (it tells one server's
        /// databases apart from other servers). The Locker's Redis user needs
        /// `INFO` (in `@dangerous`: `+@all -@dangerous` refuses it; add `+info`)
        /// or access to the marker key with `EVAL`, `SELECT` and `TIME` (which
        /// `+@all -@dangerous` allows); best both. A node for which neither can
        /// be read does not vote, whatever this setting, and the
        /// [`LockError::NoQuorum`] of an acquisition says why. With INFO refused,
        /// a restart from a snapshot that kept the marker is not seen; neither
        /// is a flush (or an eviction of the marker under an `allkeys-*`
        /// policy) until the Locker's connection is opened again.
        ///
        /// The cost: after nodes start (a new deployment included), and the
        /// first time a Locker of this version sees a node (there is no marker
        /// yet), locks whose majority needs them wait until the nodes have kept
        /// their data for `max_lease`. Turn it off only when the nodes persist
        /// every write (`appendfsync always`) or are never restarted within
        /// `max_lease`.
        ///
        /// ```
        /// # use lockattr_runtime::Locker;
        /// let urls = ["redis://10.0.0.1/", "redis://10.0.0.2/", "redis://10.0.0.3/"];
        /// let locker = Locker::redlock_builder(urls).delay_restarted_nodes(false).build();
        /// assert!(locker.is_ok());
        /// ```
        pub fn delay_restarted_nodes(delay: bool) => delay_restarted_nodes = Some(delay);

        /// The longest lease any lock of this Locker may have: a longer
        /// `expire` is refused, and so is an `extend` that would leave more time
        /// than this. Default: [`MAX_EXPIRE`] (30 days) on one server or a
        /// cluster, [`DEFAULT_REDLOCK_MAX_LEASE`] (60 s) on a Redlock.
        ///
        /// On a Redlock it bounds how long a node restarted without its data
        /// must stay out of every majority (see
        /// [`delay_restarted_nodes`](Self::delay_restarted_nodes)): no lease on
        /// any node can outlast it, so once a node has been up this long, every
        /// lock it forgot has ended. A longer `max_lease` allows longer leases
        /// and keeps restarted nodes out for longer; renewed locks
        /// (`renew(true)`) need no long lease, as the watchdog keeps renewing a
        /// short one.
        ///
        /// ```
        /// # use lockattr_runtime::Locker;
        /// # use std::time::Duration;
        /// let urls = ["redis://10.0.0.1/", "redis://10.0.0.2/", "redis://10.0.0.3/"];
        /// let locker = Locker::redlock_builder(urls)
        ///     .max_lease(Duration::from_secs(30))
        ///     .build()
        ///     .unwrap();
        /// assert_eq!(locker.max_lease(), Duration::from_secs(30));
        /// ```
        pub fn max_lease(max_lease: Duration) => max_lease = Some(max_lease);

        /// How long a lock's fencing counter stays in Redis after the lock's
        /// lease ended (default [`DEFAULT_FENCE_RETENTION`], 60 s; at most
        /// [`MAX_EXPIRE`]).
        ///
        /// Every lock name has a counter key (`<prefix>{name}:fence`) next to
        /// its lock key. A new counter gets a time to live of its lease plus
        /// this retention, a release shortens it to this retention, and an
        /// acquisition leaves it as it is (no extra command), so nothing of a
        /// lock stays in Redis longer than this after its last lease ended (a
        /// counter may go sooner, even while a lock renewed or extended far past
        /// its first lease is held; the next token then comes from the clock). Without that, every name ever
        /// locked kept a key forever: ten million order names were about a
        /// gigabyte, never evictable under a `volatile-*` policy, and under
        /// `noeviction` a full Redis refused every acquisition.
        ///
        /// The trade-off: a counter that no longer exists starts again from
        /// the Redis server's clock in microseconds, so fencing tokens keep
        /// increasing across its expiry as long as the server's clock does not
        /// step back and a name is taken fewer than a million times a second.
        /// While the counter exists, tokens do not depend on the clock at all:
        /// a longer retention protects against a clock step for longer after a
        /// lock was last used, at the cost of one small key per recently used
        /// name. Zero lets the counter go with the lease. Keep it above a
        /// second: a release whose answer is lost with its connection is sent
        /// again, and that second try counts the lock as released only while
        /// the counter is still there (see [`LockGuard::release`](crate::LockGuard::release)).
        ///
        /// ```
        /// # use lockattr_runtime::Locker;
        /// # use std::time::Duration;
        /// let locker = Locker::builder("redis://127.0.0.1/")
        ///     .fence_retention(Duration::from_secs(3600))
        ///     .build()
        ///     .unwrap();
        /// ```
        pub fn fence_retention(retention: Duration) => fence_retention = retention;

        /// Trusts the certificate authority `pem` (one or more PEM
        /// certificates) for the servers' certificates, instead of the platform's
        /// (or, with `tls-rustls-webpki-roots`, Mozilla's) roots. For every
        /// server of the Locker: the one server, each Redlock node, the Cluster
        /// nodes, the sentinels and their master. The URLs must be `rediss://`
        /// (a plain URL with TLS settings is refused); host names are still
        /// checked against the certificates.
        ///
        /// Needs a TLS feature of lockattr: `tls-rustls` (any Locker) or
        /// `tls-native-tls` (one server and Redlock; a Cluster or Sentinel takes
        /// certificates only with rustls). An untrusted certificate or a wrong
        /// host name is a [`LockError::Connection`] on first use, within the
        /// connect timeout; a PEM without a certificate is refused by
        /// [`build`](Self::build). The certificates never appear in errors or
        /// `Debug` output.
        ///
        /// ```no_run
        /// # use lockattr_runtime::Locker;
        /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
        /// let locker = Locker::builder("rediss://redis.internal:6380/")
        ///     .tls_root_ca(std::fs::read("/etc/redis/tls/ca.crt")?)
        ///     .build()?;
        /// # Ok(()) }
        /// ```
        pub fn tls_root_ca(pem: impl Into<Vec<u8>>) => tls.root_ca = Some(pem.into());

        /// Presents the client certificate `cert_pem` (its chain, PEM) with its
        /// private key `key_pem` (PEM: PKCS#8, PKCS#1 or SEC1) to every server,
        /// for servers that require it (mutual TLS, `tls-auth-clients yes`).
        /// Same rules as [`tls_root_ca`](Self::tls_root_ca); the key is never
        /// shown in errors or `Debug` output. A certificate the server refuses
        /// is a [`LockError::Connection`] on first use.
        ///
        /// ```no_run
        /// # use lockattr_runtime::Locker;
        /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
        /// let locker = Locker::builder("rediss://redis.internal:6380/")
        ///     .tls_root_ca(std::fs::read("/etc/redis/tls/ca.crt")?)
        ///     .tls_client_auth(
        ///         std::fs::read("/etc/myapp/tls/client.crt")?,
        ///         std::fs::read("/etc/myapp/tls/client.key")?,
        ///     )
        ///     .build()?;
        /// # Ok(()) }
        /// ```
        pub fn tls_client_auth(cert_pem: impl Into<Vec<u8>>, key_pem: impl Into<Vec<u8>>)
            => tls.client = Some((cert_pem.into(), key_pem.into()));
    }

    /// Sentinel only: the user and password the master (and, after a
    /// failover, the replica promoted in its place) is reached with; for a
    /// server with only `requirepass`, the user is `"default"`. The
    /// sentinels' own password goes in their URLs. Never shown in errors
    /// or `Debug` output.
    ///
    /// ```
    /// # use lockattr_runtime::Locker;
    /// let locker = Locker::sentinel_builder("mymaster", ["redis://10.0.0.1:26379/"])
    ///     .master_auth("default", "secret")
    ///     .build()
    ///     .unwrap();
    /// let single = Locker::builder("redis://10.0.0.1/").master_auth("default", "secret").build();
    /// assert!(single.unwrap_err().to_string().contains("Sentinel"));
    /// ```
    pub fn master_auth(mut self, user: impl Into<String>, password: impl Into<String>) -> Self {
        let master = self.master.get_or_insert_with(MasterSettings::default);
        master.user = Some(user.into());
        master.password = Some(password.into());
        self
    }

    /// Sentinel only: the database of the master the locks live in
    /// (default 0).
    ///
    /// ```
    /// # use lockattr_runtime::Locker;
    /// let locker = Locker::sentinel_builder("mymaster", ["redis://10.0.0.1:26379/"])
    ///     .master_db(3)
    ///     .build();
    /// assert!(locker.is_ok());
    /// ```
    pub fn master_db(mut self, db: i64) -> Self {
        self.master.get_or_insert_with(MasterSettings::default).db = Some(db);
        self
    }

    setters! {
        /// The label this Locker's acquisitions are recorded under, with the
        /// host name and process id, next to each lock it takes (see
        /// [`Locker::inspect`]): which service holds a lock, for the operator
        /// looking at it. Default: the executable's name. At most 100 bytes,
        /// printable, without line breaks.
        ///
        /// ```
        /// # use lockattr_runtime::Locker;
        /// let locker = Locker::builder("redis://127.0.0.1/").label("billing-worker").build().unwrap();
        /// assert_eq!(locker.label(), "billing-worker");
        /// assert!(Locker::builder("redis://127.0.0.1/").label("a\nb").build().is_err());
        /// ```
        pub fn label(label: impl Into<String>) => label = Some(label.into());

        /// The prefix of every Redis key (default `"lockattr:"`).
        ///
        /// On a Redis Cluster every key of a lock carries the lock's name as its
        /// hash tag (`lockattr:{order:7}`, `lockattr:{order:7}:fence`, ...), so
        /// locks spread over the masters and a lock's keys share one slot. A
        /// prefix may instead carry a hash tag of its own, one non-empty `{tag}`
        /// (`"bank:{transfers}:"`): then every key of this Locker's locks is in
        /// that tag's slot, on one master, and a [set of
        /// names](Locker::lock_all) is taken by one script call instead of one
        /// per slot. Any other `{` or `}` in a prefix is refused: an empty or
        /// unclosed tag would split a lock's keys over several slots. Every
        /// process that shares locks must use the same prefix.
        ///
        /// ```
        /// # use lockattr_runtime::Locker;
        /// let related = Locker::cluster_builder(["redis://127.0.0.1:7000/"])
        ///     .prefix("bank:{transfers}:")
        ///     .build()
        ///     .unwrap();
        /// assert_eq!(related.prefix(), "bank:{transfers}:");
        /// assert!(Locker::builder("redis://127.0.0.1/").prefix("a{b").build().is_err());
        /// assert!(Locker::builder("redis://127.0.0.1/").prefix("a{}:").build().is_err());
        /// ```
        pub fn prefix(prefix: impl Into<String>) => prefix = prefix.into();

        /// How long opening a connection may take, handshake included (default
        /// 1 s, at most [`MAX_TIMEOUT`]).
        ///
        /// ```
        /// # use lockattr_runtime::Locker;
        /// # use std::time::Duration;
        /// let b = Locker::builder("redis://127.0.0.1/").connect_timeout(Duration::from_millis(200));
        /// ```
        pub fn connect_timeout(timeout: Duration) => timeouts.connect = timeout;

        /// How long one answer from Redis may take (default 1 s, at most
        /// [`MAX_TIMEOUT`]). A frozen or overloaded server turns into
        /// [`LockError::Connection`] after this long.
        ///
        /// ```
        /// # use lockattr_runtime::Locker;
        /// # use std::time::Duration;
        /// let b = Locker::builder("redis://127.0.0.1/").response_timeout(Duration::from_millis(200));
        /// ```
        pub fn response_timeout(timeout: Duration) => timeouts.response = timeout;
    }

    /// Checks the settings and makes the Locker. Does not connect.
    ///
    /// ```
    /// # use lockattr_runtime::Locker;
    /// # use std::time::Duration;
    /// let err = Locker::builder("redis://127.0.0.1/")
    ///     .response_timeout(Duration::ZERO)
    ///     .build()
    ///     .unwrap_err();
    /// assert!(err.to_string().contains("response timeout"));
    /// ```
    pub fn build(self) -> Result<Locker, LockError> {
        check_prefix(&self.prefix)?;
        for (what, value) in [
            ("connect timeout", Some(self.timeouts.connect)),
            ("response timeout", Some(self.timeouts.response)),
            ("node timeout", self.node_timeout),
            ("replica timeout", Some(self.replicas.timeout)),
        ] {
            match value {
                Some(value) if value.is_zero() => {
                    return Err(LockError::invalid(what, "it must be longer than zero"));
                }
                Some(value) if value > MAX_TIMEOUT => {
                    return Err(LockError::invalid(
                        what,
                        format!("{value:?} is longer than {MAX_TIMEOUT:?}; is the unit right?"),
                    ));
                }
                _ => {}
            }
        }
        let barge = match self.fairness {
            Fairness::Fifo => Duration::ZERO,
            Fairness::Bounded(d) if d < Duration::from_millis(1) || d > MAX_BARGE => {
                return Err(LockError::invalid(
                    "fairness",
                    format!(
                        "Fairness::Bounded({d:?}) is outside 1 ms to {MAX_BARGE:?}; use \
                         Fairness::Fifo for first come, first served"
                    ),
                ));
            }
            Fairness::Bounded(d) => d,
        };
        if self.fence_retention > MAX_EXPIRE {
            return Err(LockError::invalid(
                "fence retention",
                format!(
                    "{:?} is longer than {MAX_EXPIRE:?}; is the unit right?",
                    self.fence_retention
                ),
            ));
        }
        let max_lease = self.max_lease.unwrap_or(match self.target {
            Target::Redlock(_) => DEFAULT_REDLOCK_MAX_LEASE,
            Target::Single(_) | Target::Cluster(_) | Target::Sentinel { .. } => MAX_EXPIRE,
        });
        self.tls.check()?;
        let label = match &self.label {
            Some(label) => crate::holder::check_label(label)?,
            None => crate::holder::default_label(),
        };
        if self.master.is_some() && !matches!(self.target, Target::Sentinel { .. }) {
            return Err(LockError::invalid(
                "Locker setting",
                "`master_auth` and `master_db` apply to a Sentinel Locker \
                 (`Locker::sentinel_builder`) only; put the credentials in the URL",
            ));
        }
        if max_lease.is_zero() || max_lease > MAX_EXPIRE {
            return Err(LockError::invalid(
                "max lease",
                format!("{max_lease:?} is not between a millisecond and {MAX_EXPIRE:?}"),
            ));
        }
        // The longest a release call takes: sent twice when its answer was
        // lost, each within the connect and response timeouts, and the
        // replicas' acknowledgement (see `LocalQueues`).
        let replicas = if self.replicas.wanted() {
            self.replicas.timeout
        } else {
            Duration::ZERO
        };
        let settle = (self.timeouts.connect + self.timeouts.response + replicas) * 2;
        let backend = match &self.target {
            Target::Redlock(_) if self.replicas.wanted() => {
                return Err(LockError::invalid(
                    "Locker setting",
                    "`min_replicas` applies to one server with replicas, Sentinel or a Redis \
                     Cluster; a Redlock's nodes are independent masters, each without \
                     replicas, and its majority is what survives a lost node",
                ));
            }
            Target::Redlock(urls) => Backend::Redlock(Arc::new(Redlock::new(
                urls,
                &self.tls,
                self.timeouts,
                self.node_timeout,
                self.delay_restarted_nodes.unwrap_or(true),
                max_lease,
                &self.prefix,
            )?)),
            Target::Single(url) => {
                self.no_redlock_settings()?;
                Backend::Single(
                    SingleNode::new(url, &self.tls, self.timeouts)?
                        .with_replicas(self.replicas, &self.prefix),
                )
            }
            Target::Cluster(seeds) => {
                self.no_redlock_settings()?;
                Backend::Cluster(
                    ClusterNodes::new(seeds, &self.tls, self.timeouts)?
                        .with_replicas(self.replicas),
                )
            }
            Target::Sentinel {
                master_name,
                sentinels,
            } => {
                self.no_redlock_settings()?;
                let sentinels = sentinels
                    .iter()
                    .map(|s| s.info("redis://[[user]:password@]host[:port] or rediss://..."))
                    .collect::<Result<Vec<_>, _>>()?;
                let master = self.master.clone().unwrap_or_default();
                let sentinels = Sentinels::new(master_name, sentinels, &master, &self.tls)?;
                Backend::Single(
                    SingleNode::sentinel(sentinels, self.timeouts)
                        .with_replicas(self.replicas, &self.prefix),
                )
            }
        };
        Ok(Locker {
            inner: Arc::new(Inner {
                backend: Arc::new(backend),
                prefix: self.prefix,
                max_lease,
                fence_retention: self.fence_retention,
                barge,
                holder: crate::holder::holder_record(&label).into(),
                label,
                watchdog: Watchdog::default(),
                local: Arc::new(LocalQueues::new(settle)),
            }),
        })
    }
}

impl LockerBuilder {
    /// Refuses the Redlock-only settings on another kind of Locker.
    fn no_redlock_settings(&self) -> Result<(), LockError> {
        let setting = match (self.node_timeout, self.delay_restarted_nodes) {
            (Some(_), _) => "node_timeout",
            (None, Some(_)) => "delay_restarted_nodes",
            (None, None) => return Ok(()),
        };
        Err(LockError::invalid(
            "Locker setting",
            format!("`{setting}` applies to a Redlock (`Locker::redlock_builder`) only"),
        ))
    }
}

/// Accepts a key prefix without braces, or with one non-empty hash tag
/// (`"bank:{transfers}:"`): with either, all keys of a lock share a slot.
fn check_prefix(prefix: &str) -> Result<(), LockError> {
    let braces = prefix.matches(['{', '}']).count();
    let tag = prefix
        .split_once('{')
        .and_then(|(_, rest)| rest.split_once('}'))
        .map(|(tag, _)| tag);
    if braces == 0 || (braces == 2 && tag.is_some_and(|tag| !tag.is_empty())) {
        return Ok(());
    }
    Err(LockError::invalid(
        "key prefix",
        format!(
            "{prefix:?} has braces that are not one non-empty hash tag: a prefix may hold one \
             `{{tag}}` (as in \"bank:{{transfers}}:\", to keep all of a Locker's locks in one \
             Redis Cluster slot) and no other `{{` or `}}`; an empty or unclosed tag would split \
             a lock's keys over several slots"
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prefix_holds_no_braces_or_one_hash_tag() {
        for ok in ["", "lockattr:", "bank:{transfers}:", "{t}", "a:{x y}:b"] {
            assert!(check_prefix(ok).is_ok(), "{ok:?}");
        }
        for bad in ["a{b", "a}b", "{}:", "a}{b}", "{a}{b}", "{a}}", "}{", "{{a}"] {
            let err = check_prefix(bad).unwrap_err().to_string();
            assert!(err.contains("hash tag"), "{bad:?}: {err}");
        }
    }

    #[test]
    fn debug_hides_the_password() {
        let locker = Locker::new("redis://user:hunter2@127.0.0.1:6390/3").unwrap();
        let shown = format!("{locker:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("127.0.0.1:6390/3"), "{shown}");
        let builder = Locker::builder("redis://user:hunter2@127.0.0.1:6390/3");
        assert!(!format!("{builder:?}").contains("hunter2"));
    }

    #[test]
    fn bad_urls_are_refused_without_echoing_them() {
        for url in ["", "http://x", "redis://:hunter2@host:notaport/"] {
            let err = Locker::new(url).unwrap_err();
            let msg = err.to_string();
            assert!(msg.contains("Redis URL"), "{msg}");
            assert!(!msg.contains("hunter2"), "{msg}");
        }
    }
}
