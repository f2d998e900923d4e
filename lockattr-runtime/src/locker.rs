//! [`Locker`], its configuration, and the `lock(name)` builder.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::backend::redlock::{self, Redlock};
use crate::backend::{Attempt, Backend, ClusterNodes, Queued, SingleNode, Timeouts, Waiter, Wake};
use crate::guard::{Lease, LockGuard};
use crate::key::Keys;
use crate::lost::LeaseState;
use crate::watchdog::{self, Watchdog};
use crate::{LockError, io};

/// Default lease of a lock: 10 seconds.
pub const DEFAULT_EXPIRE: Duration = Duration::from_secs(10);
/// Default time to wait for a busy lock: 10 seconds.
pub const DEFAULT_ACQUIRE_TIMEOUT: Duration = Duration::from_secs(10);
/// Default prefix of every Redis key the library writes.
pub const DEFAULT_PREFIX: &str = "lockattr:";
/// Default time to open a connection to Redis: 1 second.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// Default time to wait for one answer from Redis: 1 second.
pub const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(1);
/// The longest lease accepted: 30 days. Longer leases are almost always a
/// unit mistake, and a lock that outlives its owner that long is a stuck lock.
pub const MAX_EXPIRE: Duration = Duration::from_secs(30 * 24 * 3600);

/// A handle to a Redis deployment that hands out locks.
///
/// Cheap to create (it parses the URL and connects on first use) and cheap
/// to clone (clones share its connections). All locks of a Locker share one
/// multiplexed connection per tokio runtime that uses it, so an operation
/// awaited on a multi-thread tokio runtime, or in a task, talks to Redis
/// from that runtime; plain threads (the blocking path), `block_on` of a
/// current-thread runtime and other executors go through a
/// small I/O thread of the library. Connections are opened again after they
/// drop or Redis restarts. Waiters of a Locker share one more connection,
/// subscribed to release notices. A Locker works from any tokio runtime,
/// from several runtimes one after another, and from plain threads.
///
/// ```no_run
/// use lockattr_runtime::Locker;
/// use std::time::Duration;
///
/// # async fn run() -> Result<(), lockattr_runtime::LockError> {
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

pub(crate) struct Inner {
    pub(crate) backend: Backend,
    pub(crate) prefix: String,
    /// Renews the leases of guards acquired with `renew`.
    pub(crate) watchdog: Watchdog,
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
    /// Accepts `redis://[[user]:password@]host[:port][/db]` and
    /// `unix:///path/to/redis.sock`. Does not connect: an unreachable server
    /// shows up as [`LockError::Connection`] on first use.
    ///
    /// ```
    /// # use lockattr_runtime::Locker;
    /// let locker = Locker::new("redis://:secret@127.0.0.1:6379/2").unwrap();
    /// assert!(!format!("{locker:?}").contains("secret"));
    /// assert!(Locker::new("http://example.com").is_err());
    /// ```
    pub fn new(url: &str) -> Result<Locker, LockError> {
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
    pub fn builder(url: impl Into<String>) -> LockerBuilder {
        LockerBuilder::new(Target::Single(url.into()))
    }

    /// A Locker over independent Redis masters (Redlock), with default
    /// settings: a lock is held while a majority of them hold it.
    ///
    /// Takes any list of URLs (an array, a slice, a `Vec<String>`): an odd
    /// number of at least 3 masters that do not replicate each other. A
    /// majority tolerates the failure of the rest: 1 of 3, 2 of 5, 3 of 7.
    /// Every request goes to all nodes at once, so an acquisition costs
    /// about one round trip. A node that is down or frozen costs at most the
    /// [node timeout](LockerBuilder::node_timeout) per operation, and an
    /// acquisition that cannot reach a majority fails at once with
    /// [`LockError::NoQuorum`].
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
        I::Item: AsRef<str>,
    {
        Locker::redlock_builder(urls).build()
    }

    /// A builder for a Redlock [`Locker`] with non-default settings: those
    /// of [`Locker::builder`], plus [`node_timeout`](LockerBuilder::node_timeout)
    /// and [`delay_restarted_nodes`](LockerBuilder::delay_restarted_nodes).
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
        I::Item: AsRef<str>,
    {
        LockerBuilder::new(Target::Redlock(strings(urls)))
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
        I::Item: AsRef<str>,
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
        I::Item: AsRef<str>,
    {
        LockerBuilder::new(Target::Cluster(strings(seeds)))
    }

    /// Starts a lock request for `name`; finish it with
    /// [`acquire`](LockBuilder::acquire) or
    /// [`acquire_blocking`](LockBuilder::acquire_blocking).
    ///
    /// `locker.lock("x")` and `#[redis_lock(name = "x")]` are the same lock.
    /// Any UTF-8 text is a valid name, except the empty string.
    ///
    /// ```no_run
    /// # use lockattr_runtime::Locker;
    /// # fn run(locker: &Locker) -> Result<(), lockattr_runtime::LockError> {
    /// let guard = locker.lock("report:2024").acquire_blocking()?;
    /// // ... work ...
    /// guard.release_blocking()?;
    /// # Ok(()) }
    /// ```
    pub fn lock(&self, name: impl AsRef<str>) -> LockBuilder<'_> {
        LockBuilder {
            locker: self,
            name: name.as_ref().to_owned(),
            expire: DEFAULT_EXPIRE,
            acquire_timeout: DEFAULT_ACQUIRE_TIMEOUT,
            renew: false,
        }
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

fn strings<I>(urls: I) -> Vec<String>
where
    I: IntoIterator,
    I::Item: AsRef<str>,
{
    urls.into_iter().map(|u| u.as_ref().to_owned()).collect()
}

/// What a [`LockerBuilder`] builds a Locker for.
#[derive(Clone)]
enum Target {
    Single(String),
    Redlock(Vec<String>),
    Cluster(Vec<String>),
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
}

impl std::fmt::Debug for LockerBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The URLs may hold a password: never print them.
        let kind = match &self.target {
            Target::Single(_) => "single",
            Target::Redlock(_) => "redlock",
            Target::Cluster(_) => "cluster",
        };
        f.debug_struct("LockerBuilder")
            .field("kind", &kind)
            .field("prefix", &self.prefix)
            .field("connect_timeout", &self.timeouts.connect)
            .field("response_timeout", &self.timeouts.response)
            .field("node_timeout", &self.node_timeout)
            .finish_non_exhaustive()
    }
}

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
        }
    }

    /// Redlock only: how long each node may take to answer one request
    /// (default: a hundredth of the lock's lease, at least 10 ms and at most
    /// the response timeout). A node that is down or frozen costs an
    /// operation at most this long; its answer is then not counted. Keep it
    /// well below the lease: the time spent waiting comes off the lease's
    /// validity.
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
    pub fn node_timeout(mut self, timeout: Duration) -> Self {
        self.node_timeout = Some(timeout);
        self
    }

    /// Redlock only: whether a node that has been up for less than a lock's
    /// `expire` is kept from counting toward that lock's majority (default
    /// `true`).
    ///
    /// A node restarted without persistence has forgotten the locks it held:
    /// with the majority of a holder that used it, a second owner could
    /// take the lock while the first still holds its lease. Delaying the
    /// restarted node's vote until every lease it may have held has run out
    /// closes that gap (the Redlock description's "delayed restart", done
    /// by the clients). A node's uptime is read with `INFO server` when a
    /// connection to it opens.
    ///
    /// The cost: after nodes start (a new deployment included), locks whose
    /// majority needs them wait until the nodes have been up for `expire`.
    /// Turn it off only when the nodes persist every write (`appendfsync
    /// always`) or are never restarted within a lease.
    ///
    /// ```
    /// # use lockattr_runtime::Locker;
    /// let urls = ["redis://10.0.0.1/", "redis://10.0.0.2/", "redis://10.0.0.3/"];
    /// let locker = Locker::redlock_builder(urls).delay_restarted_nodes(false).build();
    /// assert!(locker.is_ok());
    /// ```
    pub fn delay_restarted_nodes(mut self, delay: bool) -> Self {
        self.delay_restarted_nodes = Some(delay);
        self
    }

    /// The prefix of every Redis key (default `"lockattr:"`). It may not
    /// contain `{` or `}`, which would break the keys' Redis Cluster hash tag.
    ///
    /// ```
    /// # use lockattr_runtime::Locker;
    /// assert!(Locker::builder("redis://127.0.0.1/").prefix("a{b").build().is_err());
    /// ```
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// How long opening a connection may take, handshake included (default 1 s).
    ///
    /// ```
    /// # use lockattr_runtime::Locker;
    /// # use std::time::Duration;
    /// let b = Locker::builder("redis://127.0.0.1/").connect_timeout(Duration::from_millis(200));
    /// ```
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.timeouts.connect = timeout;
        self
    }

    /// How long one answer from Redis may take (default 1 s). A frozen or
    /// overloaded server turns into [`LockError::Connection`] after this long.
    ///
    /// ```
    /// # use lockattr_runtime::Locker;
    /// # use std::time::Duration;
    /// let b = Locker::builder("redis://127.0.0.1/").response_timeout(Duration::from_millis(200));
    /// ```
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.timeouts.response = timeout;
        self
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
        if self.prefix.contains(['{', '}']) {
            return Err(LockError::invalid(
                "key prefix",
                "it may not contain `{` or `}`: the lock name is put between braces to keep \
                 all keys of a lock in one Redis Cluster slot",
            ));
        }
        for (what, value) in [
            ("connect timeout", self.timeouts.connect),
            ("response timeout", self.timeouts.response),
        ] {
            if value.is_zero() {
                return Err(LockError::invalid(what, "it must be longer than zero"));
            }
        }
        if let Some(timeout) = self.node_timeout
            && timeout.is_zero()
        {
            return Err(LockError::invalid(
                "node timeout",
                "it must be longer than zero",
            ));
        }
        let backend = match &self.target {
            Target::Redlock(urls) => Backend::Redlock(Redlock::new(
                urls,
                self.timeouts,
                self.node_timeout,
                self.delay_restarted_nodes.unwrap_or(true),
            )?),
            Target::Single(url) => {
                self.no_redlock_settings()?;
                Backend::Single(SingleNode::new(url, self.timeouts)?)
            }
            Target::Cluster(seeds) => {
                self.no_redlock_settings()?;
                Backend::Cluster(ClusterNodes::new(seeds, self.timeouts)?)
            }
        };
        Ok(Locker {
            inner: Arc::new(Inner {
                backend,
                prefix: self.prefix,
                watchdog: Watchdog::default(),
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

/// A lock request: the name, lease and wait of one acquisition.
///
/// Made by [`Locker::lock`]; finish it with [`acquire`](Self::acquire) or
/// [`acquire_blocking`](Self::acquire_blocking).
///
/// ```no_run
/// # use lockattr_runtime::Locker;
/// # use std::time::Duration;
/// # async fn run(locker: &Locker) -> Result<(), lockattr_runtime::LockError> {
/// let guard = locker.lock("nightly-report")
///     .expire(Duration::from_secs(60))
///     .acquire_timeout(Duration::ZERO) // one attempt: skip if someone else runs it
///     .acquire()
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
#[must_use = "a lock request does nothing until `.acquire()` or `.acquire_blocking()`"]
pub struct LockBuilder<'a> {
    locker: &'a Locker,
    name: String,
    expire: Duration,
    acquire_timeout: Duration,
    renew: bool,
}

impl LockBuilder<'_> {
    /// The lease: the lock frees itself this long after it is taken unless it
    /// is released or extended first (default 10 s, at most 30 days, not zero).
    ///
    /// ```
    /// # use lockattr_runtime::Locker;
    /// # use std::time::Duration;
    /// # let locker = Locker::new("redis://127.0.0.1/").unwrap();
    /// let request = locker.lock("x").expire(Duration::from_secs(30));
    /// ```
    pub fn expire(mut self, expire: Duration) -> Self {
        self.expire = expire;
        self
    }

    /// How long to wait while another owner holds the lock (default 10 s).
    /// Zero makes exactly one attempt.
    ///
    /// ```
    /// # use lockattr_runtime::Locker;
    /// # use std::time::Duration;
    /// # let locker = Locker::new("redis://127.0.0.1/").unwrap();
    /// let request = locker.lock("x").acquire_timeout(Duration::from_millis(250));
    /// ```
    pub fn acquire_timeout(mut self, timeout: Duration) -> Self {
        self.acquire_timeout = timeout;
        self
    }

    /// Renews the lease while the guard is held (default off): every
    /// `expire / 3` the lock's time left is raised back to `expire`, so the
    /// work may take as long as it needs, while the lock of a crashed owner
    /// still frees itself within `expire`.
    ///
    /// One task per Locker renews all its locks, several per round trip; it
    /// stops before [`LockGuard::release`] returns, and when a guard is
    /// dropped. A renewal only touches a lock that still holds this guard's
    /// token: a released, expired or taken lock is never brought back. When
    /// a renewal finds the lock gone, or none gets through for a whole
    /// lease, the guard is marked lost ([`LockGuard::is_lost`]).
    ///
    /// ```no_run
    /// # use lockattr_runtime::Locker;
    /// # use std::time::Duration;
    /// # async fn run(locker: &Locker) -> Result<(), lockattr_runtime::LockError> {
    /// let guard = locker
    ///     .lock("rebuild-search-index")
    ///     .expire(Duration::from_secs(15)) // freed within 15 s if this process dies
    ///     .renew(true)                     // held for as long as the work takes
    ///     .acquire()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn renew(mut self, renew: bool) -> Self {
        self.renew = renew;
        self
    }

    /// Takes the lock, waiting up to the acquire timeout while it is held.
    ///
    /// Fails with [`LockError::Timeout`] when the lock stayed busy,
    /// [`LockError::Connection`] when Redis could not be reached (at once,
    /// not after the acquire timeout), and [`LockError::InvalidInput`] for an
    /// empty name or a zero or too long lease. Dropping the future is safe: a
    /// lock taken for a caller who stopped waiting is released at once.
    ///
    /// ```no_run
    /// # use lockattr_runtime::Locker;
    /// # async fn run(locker: &Locker) -> Result<(), lockattr_runtime::LockError> {
    /// let guard = locker.lock("x").acquire().await?;
    /// # Ok(()) }
    /// ```
    pub async fn acquire(self) -> Result<LockGuard, LockError> {
        let request = self.checked()?;
        if io::can_run_here() {
            acquire(request, io::CallerGone::never()).await
        } else {
            io::run_watched(|gone| acquire(request, gone)).await
        }
    }

    /// [`acquire`](Self::acquire) for synchronous code: blocks the calling
    /// thread, needs no async runtime. The guard it returns releases the lock
    /// before its Drop returns.
    ///
    /// ```no_run
    /// # use lockattr_runtime::Locker;
    /// # fn run(locker: &Locker) -> Result<(), lockattr_runtime::LockError> {
    /// let guard = locker.lock("x").acquire_blocking()?;
    /// # Ok(()) }
    /// ```
    pub fn acquire_blocking(self) -> Result<LockGuard, LockError> {
        let request = self.checked()?;
        let mut guard = io::run_blocking(acquire(request, io::CallerGone::never()))?;
        guard.set_blocking();
        Ok(guard)
    }

    /// Checks the request; the lease to try for and how long to wait.
    fn checked(self) -> Result<(Lease, Duration), LockError> {
        if self.name.is_empty() {
            return Err(LockError::invalid(
                "lock name",
                "it is empty; give every lock a non-empty name",
            ));
        }
        if self.expire.is_zero() {
            return Err(LockError::invalid(
                "expire",
                "a lease of zero would free the lock at once; use at least a millisecond",
            ));
        }
        if self.expire > MAX_EXPIRE {
            return Err(LockError::invalid(
                "expire",
                format!(
                    "{:?} is longer than the {:?} allowed; is the unit right?",
                    self.expire, MAX_EXPIRE
                ),
            ));
        }
        let keys = Keys::new(&self.locker.inner.prefix, &self.name);
        let token = new_token()?;
        let lease = Lease {
            locker: self.locker.inner.clone(),
            name: self.name,
            keys,
            token,
            expire: self.expire,
            fencing_token: 0,
            renew: self.renew,
            state: LeaseState::new(Instant::now(), self.renew),
            watch: std::sync::Mutex::new(None),
        };
        Ok((lease, self.acquire_timeout))
    }
}

/// The acquisition loop: on the caller's runtime, or on the I/O thread.
///
/// Each attempt is one script call. When the lock is held, the attempt also
/// queues this request in Redis, and the loop sleeps until the first of:
/// - a release hands it the lock (a message on the lock's channel: see
///   [`crate::backend::Wakeups`]); it returns at once, already the owner;
/// - the holder's lease would end (a crashed holder's lock is taken a
///   millisecond after it expires, and a lost message costs at most that);
/// - its acquire timeout ends: then one last attempt, which also leaves the
///   queue, so the wait ends within a round trip of the timeout;
/// - the caller is gone (this future dropped, or `gone` on the I/O thread):
///   it leaves the queue, passing the lock on if it was just handed it. An
///   attempt whose answer will not be read is given back on its own
///   connection (see `SingleNode::try_acquire`).
async fn acquire(
    (lease, wait): (Lease, Duration),
    mut gone: io::CallerGone,
) -> Result<LockGuard, LockError> {
    let locker = lease.locker.clone();
    let backend = match &locker.backend {
        Backend::Single(node) => Queued::Single(node),
        Backend::Cluster(nodes) => Queued::Cluster(nodes),
        Backend::Redlock(nodes) => return acquire_majority(nodes, lease, wait, gone).await,
    };
    let now = Instant::now();
    let deadline = now.checked_add(wait).unwrap_or(now + MAX_EXPIRE);
    let wakeups = backend.wakeups();
    // Uncontended: no pub/sub work at all, unless the channel is already
    // subscribed (a lock in demand), in which case waiting starts warm.
    let mut waiter = wakeups.register_if_subscribed(&lease.keys.channel, &lease.token);
    let mut queued = LeaveOnDrop(None);
    loop {
        let sent = Instant::now();
        let left = deadline.saturating_duration_since(sent);
        let attempt = backend
            .try_acquire(&lease.keys, &lease.token, lease.expire, left)
            .await;
        let expires_in = match attempt {
            Ok(Attempt::Acquired { fencing_token }) => {
                queued.0 = None;
                return Ok(granted(lease, fencing_token, sent, false));
            }
            Ok(Attempt::Held { expires_in }) => expires_in,
            // `queued` leaves the queue, if this request was in it.
            Err(e) => return Err(e),
        };
        if left.is_zero() {
            // That attempt left the queue.
            queued.0 = None;
            return Err(LockError::Timeout {
                name: lease.name,
                waited: wait,
            });
        }
        if queued.0.is_none() {
            queued.0 = Some((
                lease.locker.clone(),
                lease.keys.clone(),
                lease.token.clone(),
                lease.expire,
            ));
        }
        if waiter.is_none() {
            match wakeups.register(&lease.keys.channel, &lease.token).await {
                Ok(registered) => {
                    // Subscribed only now: the lock may have been handed to
                    // us before. Ask again; from here on, no message is missed.
                    waiter = Some(registered);
                    continue;
                }
                Err(e) => tracing::debug!(
                    lock = %lease.name,
                    error = %e,
                    "cannot subscribe to release notices; checking the lock every {FALLBACK_PAUSE:?}"
                ),
            }
        }
        // When to ask Redis again: at the deadline, when the holder's lease
        // ends, or soon if no release notice can reach us.
        let mut wake_at = deadline;
        if let Some(left) = expires_in {
            wake_at = wake_at.min(soon_after(left));
        }
        if waiter.is_none() {
            wake_at = wake_at.min(soon_after(FALLBACK_PAUSE));
        }
        loop {
            let woken = async {
                match waiter.as_mut() {
                    Some(waiter) => waiter.wait().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                wake = woken => match wake {
                    // The release that handed it over ran after `sent`: the
                    // attempt just sent found the lock held.
                    Wake::Handed { fencing_token } => {
                        queued.0 = None;
                        return Ok(granted(lease, fencing_token, sent, true));
                    }
                    Wake::Recheck => {
                        waiter = None;
                        break;
                    }
                    // Another waiter got the lock: a crash of that holder is
                    // what to watch for now.
                    Wake::Rearm { lease } => wake_at = deadline.min(soon_after(lease)),
                },
                () = tokio::time::sleep_until(wake_at.into()) => break,
                () = gone.wait() => return Err(LockError::Runtime {
                    reason: "the caller stopped waiting".into(),
                }),
            }
        }
    }
}

/// The guard of a lease just taken by a request sent at `sent` (or handed
/// over by a release that ran after `sent`), entered in the watchdog when it
/// is renewed.
///
/// A lease handed over started at the release, which may be long after
/// `sent`: its `valid_until` counted from `sent` is safe but short. When it
/// would cut more than a tenth of the lease, the watchdog reads the lease's
/// time left once to make it exact (a renewed lease is renewed at once
/// instead), in the background: the hand-over itself stays a single message.
fn granted(mut lease: Lease, fencing_token: u64, sent: Instant, handed: bool) -> LockGuard {
    lease.fencing_token = fencing_token;
    let trusted = lease
        .expire
        .saturating_sub(lease.locker.backend.drift(lease.expire));
    lease.state = LeaseState::new(sent + trusted, lease.renew);
    let (renew, expire) = (lease.renew, lease.expire);
    let lease = Arc::new(lease);
    let locker = lease.locker.clone();
    let watch = if renew {
        let period = watchdog::period(expire);
        Some(
            locker
                .watchdog
                .watch(&locker, &lease, sent + period, Some(period)),
        )
    } else if handed && sent.elapsed() > expire / 10 {
        Some(locker.watchdog.watch(&locker, &lease, Instant::now(), None))
    } else {
        None
    };
    *lease.watch.lock().unwrap_or_else(|p| p.into_inner()) = watch;
    LockGuard::new(lease)
}

/// The acquisition loop of a Redlock.
///
/// Each attempt asks every node at once (see [`Redlock::attempt`]). With a
/// majority of voting nodes, and time left on the lease after the drift
/// allowance, the lock is taken. Otherwise the nodes that granted it are
/// released, and the loop waits for the first of:
/// - a release notice from any node (waiters do not queue on a Redlock;
///   each subscribes to the lock's channel on every node it can reach);
/// - the end of the holder's lease, as the nodes reported it;
/// - after a split vote, a random pause that grows with each split in a
///   row, so that contenders stop taking a minority each;
/// - its acquire timeout: then one last attempt.
///
/// It fails at once with [`LockError::NoQuorum`] when fewer than a majority
/// of the nodes answer. An attempt cut short (this future dropped) gives
/// back what it had taken, in the background.
async fn acquire_majority(
    nodes: &Redlock,
    lease: Lease,
    wait: Duration,
    mut gone: io::CallerGone,
) -> Result<LockGuard, LockError> {
    let now = Instant::now();
    let deadline = now.checked_add(wait).unwrap_or(now + MAX_EXPIRE);
    let expire = lease.expire;
    let trusted = expire.saturating_sub(redlock::drift(expire));
    let mut waiters: Option<Vec<Waiter>> = None;
    let mut splits = 0;
    loop {
        if let Some(list) = waiters.as_mut() {
            // Notices heard before this attempt are answered by it.
            list.retain_mut(Waiter::drain);
        }
        let sent = Instant::now();
        let left = deadline.saturating_duration_since(sent);
        let votes = nodes.attempt(&lease.keys, &lease.token, expire).await;
        let taken: Vec<usize> = votes.granted.iter().map(|&(i, _)| i).collect();
        let mut give_back = GiveBackOnDrop {
            locker: &lease.locker,
            keys: &lease.keys,
            token: &lease.token,
            expire,
            nodes: taken,
        };
        if votes.voters >= nodes.quorum()
            && let Some(fence) = nodes.fence(&lease.keys, &lease.token, expire, &votes).await
            && sent.elapsed() < trusted
        {
            give_back.nodes.clear();
            drop(give_back);
            return Ok(granted(lease, fence, sent, false));
        }
        let taken = std::mem::take(&mut give_back.nodes);
        drop(give_back);
        if !taken.is_empty() {
            nodes
                .give_back(&lease.keys, &lease.token, expire, &taken)
                .await;
        }
        if votes.answered < nodes.quorum() {
            return Err(nodes.unreachable(&lease.name, votes));
        }
        if left.is_zero() {
            if votes.granted.len() >= nodes.quorum() && votes.voters < nodes.quorum() {
                return Err(nodes.too_young(&lease.name, expire, &votes));
            }
            return Err(LockError::Timeout {
                name: lease.name,
                waited: wait,
            });
        }
        if waiters.is_none() {
            // Subscribed only now: the lock may have been freed before.
            waiters = Some(
                nodes
                    .register(&lease.keys.channel, &lease.token, expire)
                    .await,
            );
            continue;
        }
        let mut wake_at = deadline;
        if let Some(held) = votes.held_for {
            wake_at = wake_at.min(soon_after(held));
        }
        if votes.granted.is_empty() {
            splits = 0;
        } else {
            splits += 1;
            wake_at = wake_at.min(Instant::now() + redlock::split_pause(splits));
        }
        let waiters = waiters.as_deref_mut().unwrap_or_default();
        if waiters.is_empty() {
            wake_at = wake_at.min(soon_after(FALLBACK_PAUSE));
        }
        tokio::select! {
            () = redlock::any_notice(waiters) => {}
            () = tokio::time::sleep_until(wake_at.into()) => {}
            () = gone.wait() => return Err(LockError::Runtime {
                reason: "the caller stopped waiting".into(),
            }),
        }
    }
}

/// Nodes of a Redlock that granted an attempt still in progress: dropped
/// with nodes listed (the caller stopped waiting), it releases them in the
/// background.
struct GiveBackOnDrop<'a> {
    locker: &'a Arc<Inner>,
    keys: &'a Keys,
    token: &'a str,
    expire: Duration,
    nodes: Vec<usize>,
}

impl Drop for GiveBackOnDrop<'_> {
    fn drop(&mut self) {
        if self.nodes.is_empty() {
            return;
        }
        let (locker, keys, token) = (
            self.locker.clone(),
            self.keys.clone(),
            self.token.to_owned(),
        );
        let (expire, nodes) = (self.expire, std::mem::take(&mut self.nodes));
        let giving = io::spawn(async move {
            if let Backend::Redlock(redlock) = &locker.backend {
                redlock.give_back(&keys, &token, expire, &nodes).await;
            }
        });
        if let Err(e) = giving {
            tracing::debug!(error = %e, "cannot give back a partial Redlock acquisition; its leases free it");
        }
    }
}

/// A millisecond after `lease` from now: when a lease that has `lease` left
/// has surely ended. Far in the future for absurd leases.
fn soon_after(lease: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(lease.saturating_add(Duration::from_millis(1)))
        .unwrap_or(now + MAX_EXPIRE)
}

/// How often a waiter that cannot subscribe to release notices checks the
/// lock (a server whose ACL forbids SUBSCRIBE, a subscriber connection that
/// cannot be opened).
const FALLBACK_PAUSE: Duration = Duration::from_millis(50);

/// A queued request: dropped while set, it takes the request out of the
/// lock's queue in the background; if a release had just handed it the
/// lock, the lock goes on to the next waiter (or is freed).
struct LeaveOnDrop(Option<(Arc<Inner>, Keys, String, Duration)>);

impl Drop for LeaveOnDrop {
    fn drop(&mut self) {
        let Some((locker, keys, token, expire)) = self.0.take() else {
            return;
        };
        let leaving = io::spawn(async move {
            let _ = locker.backend.release(&keys, &token, "", expire).await;
        });
        if let Err(e) = leaving {
            tracing::debug!(error = %e, "cannot leave a lock's queue; the entry expires with the wait");
        }
    }
}

/// 128 random bits from the operating system's CSPRNG, as 32 hex digits.
fn new_token() -> Result<String, LockError> {
    let mut bytes = [0_u8; 16];
    getrandom::fill(&mut bytes).map_err(|e| LockError::Runtime {
        reason: format!("the operating system's random number generator failed: {e}"),
    })?;
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut token = String::with_capacity(32);
    for b in bytes {
        token.push(char::from(HEX[usize::from(b >> 4)]));
        token.push(char::from(HEX[usize::from(b & 15)]));
    }
    Ok(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_128_random_bits() {
        let a = new_token().unwrap();
        let b = new_token().unwrap();
        assert_eq!(a.len(), 32);
        assert!(a.chars().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
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
