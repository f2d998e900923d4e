//! Both libraries behind one interface, and the deployments they run on:
//! lockattr's `Locker` and rslock's `LockManager` (the peer).

use std::time::Duration;

use lockattr::{LockGuard, Locker};
use rslock::LockManager;

use crate::{ACQUIRE_TIMEOUT, Res};

/// rslock 0.10.0's defaults (`DEFAULT_RETRY_COUNT`, `DEFAULT_RETRY_DELAY` in
/// its src/lock.rs): 3 attempts, a random 0..200 ms sleep between attempts.
/// Checked at run time against the `Debug` output of a fresh `LockManager`.
pub const RSLOCK_DEFAULT_RETRY_COUNT: u32 = 3;
/// See [`RSLOCK_DEFAULT_RETRY_COUNT`].
pub const RSLOCK_DEFAULT_RETRY_DELAY: Duration = Duration::from_millis(200);
/// A blocked rslock waiter in the hand-over rows: 100 attempts with the
/// default delay keep it trying for about 10 s (mean sleep 100 ms).
pub const RSLOCK_WAITER_RETRY_COUNT: u32 = 100;

/// Which library.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Lib {
    /// This crate.
    Lockattr,
    /// rslock 0.10.
    Rslock,
}

impl Lib {
    /// Both, in index order.
    pub const BOTH: [Lib; 2] = [Lib::Lockattr, Lib::Rslock];
    /// Alternating blocks in the order A B B A, so a linear drift cancels.
    pub const ABBA: [Lib; 4] = [Lib::Lockattr, Lib::Rslock, Lib::Rslock, Lib::Lockattr];

    /// Its crate name.
    pub fn name(self) -> &'static str {
        match self {
            Lib::Lockattr => "lockattr",
            Lib::Rslock => "rslock",
        }
    }

    /// The inverse of [`Lib::name`].
    pub fn parse(s: &str) -> Res<Lib> {
        match s {
            "lockattr" => Ok(Lib::Lockattr),
            "rslock" => Ok(Lib::Rslock),
            other => Err(format!("unknown library `{other}`").into()),
        }
    }

    /// 0 for lockattr, 1 for rslock: the index of `[_; 2]` figures.
    pub fn index(self) -> usize {
        self as usize
    }
}

/// What the locks run on.
#[derive(Clone, Debug)]
pub enum Deploy {
    /// One server.
    Single(String),
    /// Redlock over these servers (both libraries).
    Redlock(Vec<String>),
    /// A Redis Cluster with these seeds (lockattr only: rslock has no
    /// cluster client).
    Cluster(Vec<String>),
}

impl Deploy {
    /// As a child-process parameter: `kind|url,url`.
    pub fn to_param(&self) -> String {
        let (kind, urls) = match self {
            Deploy::Single(url) => ("single", std::slice::from_ref(url)),
            Deploy::Redlock(urls) => ("redlock", urls.as_slice()),
            Deploy::Cluster(urls) => ("cluster", urls.as_slice()),
        };
        format!("{kind}|{}", urls.join(","))
    }

    /// The inverse of [`Deploy::to_param`].
    pub fn parse(s: &str) -> Res<Deploy> {
        let (kind, urls) = s.split_once('|').ok_or("bad deployment")?;
        let urls: Vec<String> = urls.split(',').map(str::to_owned).collect();
        match kind {
            "single" => Ok(Deploy::Single(urls[0].clone())),
            "redlock" => Ok(Deploy::Redlock(urls)),
            "cluster" => Ok(Deploy::Cluster(urls)),
            other => Err(format!("unknown deployment `{other}`").into()),
        }
    }

    /// The libraries that run on it.
    pub fn libs(&self) -> &'static [Lib] {
        match self {
            Deploy::Cluster(_) => &[Lib::Lockattr],
            _ => &Lib::BOTH,
        }
    }
}

/// A held lock of either library.
pub enum Held {
    /// lockattr's guard.
    Lockattr(LockGuard),
    /// rslock's lock.
    Rslock(rslock::Lock),
}

/// One lock manager of each library, both on the same deployment.
#[derive(Clone)]
pub struct Libs {
    /// lockattr's.
    pub locker: Locker,
    /// rslock's; none on a Cluster.
    pub rslock: Option<LockManager>,
}

impl Libs {
    /// Both on one server. `rslock_retry`: None for rslock's defaults, or
    /// `(count, delay)`.
    pub fn new(url: &str, rslock_retry: Option<(u32, Duration)>) -> Res<Libs> {
        Libs::on(&Deploy::Single(url.to_owned()), rslock_retry)
    }

    /// Both on `deploy` (lockattr only on a Cluster). A Redlock of lockattr
    /// lets the bench's just-started nodes vote at once: by default a node
    /// up for less than a lease does not, which would stall the first 10 s.
    pub fn on(deploy: &Deploy, rslock_retry: Option<(u32, Duration)>) -> Res<Libs> {
        Libs::on_with(deploy, rslock_retry, 0)
    }

    /// [`Libs::on`], with lockattr's Locker built with
    /// `min_replicas(min_replicas)` (row 13; 0 is the default, no WAIT). A
    /// Redlock refuses any other value.
    pub fn on_with(
        deploy: &Deploy,
        rslock_retry: Option<(u32, Duration)>,
        min_replicas: u32,
    ) -> Res<Libs> {
        let (builder, urls) = match deploy {
            Deploy::Single(url) => (Locker::builder(url.as_str()), Some(vec![url.clone()])),
            Deploy::Redlock(urls) => (
                Locker::redlock_builder(urls).delay_restarted_nodes(false),
                Some(urls.clone()),
            ),
            Deploy::Cluster(seeds) => (Locker::cluster_builder(seeds), None),
        };
        let locker = builder.min_replicas(min_replicas).build()?;
        let rslock = urls.map(|urls| {
            let mut manager = LockManager::new(urls);
            if let Some((count, delay)) = rslock_retry {
                manager.set_retry(count, delay);
            }
            manager
        });
        Ok(Libs { locker, rslock })
    }

    fn rslock(&self) -> Res<&LockManager> {
        Ok(self
            .rslock
            .as_ref()
            .ok_or("rslock does not run on a Redis Cluster")?)
    }

    /// Acquires `name`; `Ok(None)` when the library gave up waiting
    /// (lockattr: its acquire timeout; rslock: its retries ran out).
    pub async fn acquire(&self, lib: Lib, name: &str, expire: Duration) -> Res<Option<Held>> {
        match lib {
            Lib::Lockattr => {
                match self
                    .locker
                    .lock(name)
                    .expire(expire)
                    .acquire_timeout(ACQUIRE_TIMEOUT)
                    .acquire()
                    .await
                {
                    Ok(guard) => Ok(Some(Held::Lockattr(guard))),
                    Err(e) if e.is_timeout() => Ok(None),
                    Err(e) => Err(e.into()),
                }
            }
            Lib::Rslock => match self.rslock()?.lock(name, expire).await {
                Ok(lock) => Ok(Some(Held::Rslock(lock))),
                Err(rslock::LockError::Unavailable) => Ok(None),
                Err(e) => Err(e.into()),
            },
        }
    }

    /// [`Libs::acquire`], with giving up as an error.
    pub async fn acquire_or_fail(&self, lib: Lib, name: &str, expire: Duration) -> Res<Held> {
        self.acquire(lib, name, expire)
            .await?
            .ok_or_else(|| format!("{} gave up waiting for `{name}`", lib.name()).into())
    }

    /// Releases a lock of either library.
    pub async fn release(&self, held: Held) -> Res<()> {
        match held {
            Held::Lockattr(guard) => guard.release().await?,
            // Best effort by design: rslock's unlock reports nothing.
            Held::Rslock(lock) => self.rslock()?.unlock(&lock).await,
        }
        Ok(())
    }
}

/// The retry settings of a fresh rslock `LockManager`, read from its `Debug`
/// output (the fields are private): `(retry_count, "retry_delay")`.
pub fn rslock_defaults_seen() -> (Option<u32>, Option<String>) {
    let text = format!("{:?}", LockManager::new(vec!["redis://127.0.0.1:1/"]));
    let field = |name: &str| {
        text.split_once(&format!("{name}: "))
            .map(|(_, rest)| rest.split([',', ' ', '}']).next().unwrap_or("").to_owned())
    };
    (
        field("retry_count").and_then(|c| c.parse().ok()),
        field("retry_delay"),
    )
}
