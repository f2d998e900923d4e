//! Grants that wait for replicas (`LockerBuilder::min_replicas`), under
//! load and when the replicas do not acknowledge: a renewed lease is
//! renewed in time however many grants wait for their replicas, and a grant
//! the replicas did not acknowledge is given back before its caller hears
//! of it (nothing stays held on the master, even when the process exits at
//! once), and the error says so.

use crate::support;

use std::time::{Duration, Instant};

use lockattr::Locker;
use support::proxy::Proxy;
use support::{RedisServer, eventually, lock_key};

/// A master and one replica in sync with it.
struct Pair {
    master: RedisServer,
    replica: RedisServer,
    /// The replica's link to the master, through a proxy that delays it.
    _link: Option<Proxy>,
}

impl Pair {
    /// A master and a replica whose link (the replication stream and the
    /// acknowledgements) takes `delay` longer each way, once it synced.
    fn lagging(delay: Duration) -> Pair {
        let master = RedisServer::start();
        let link = Proxy::start(master.port);
        let port = link.port();
        let pair = Pair::replicated(master, port, Some(link));
        pair._link
            .as_ref()
            .expect("a proxied link")
            .set_delay(delay);
        pair
    }

    /// Starts a replica of `master`, reached on `port`, and waits until it
    /// synced.
    fn replicated(master: RedisServer, port: u16, link: Option<Proxy>) -> Pair {
        let port = port.to_string();
        let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &port]);
        let synced = eventually(Duration::from_secs(20), || {
            let info: String = redis::cmd("INFO")
                .arg("replication")
                .query(&mut replica.client())
                .unwrap_or_default();
            info.contains("master_link_status:up")
        });
        assert!(synced.is_some(), "the replica never synced");
        Pair {
            master,
            replica,
            _link: link,
        }
    }

    /// A Locker whose grants wait for one replica, 100 ms at most.
    fn locker(&self) -> Locker {
        replica_locker(&self.master.url())
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        // A frozen replica cannot be audited or killed cleanly.
        self.replica.thaw();
    }
}

/// A Locker of `url` whose grants wait for one replica, 100 ms at most.
fn replica_locker(url: &str) -> Locker {
    Locker::builder(url)
        .min_replicas(1)
        .replica_timeout(Duration::from_millis(100))
        .build()
        .unwrap()
}

#[test]
fn a_renewed_lease_survives_fifty_sync_callers_on_other_names() {
    let pair = Pair::lagging(Duration::from_millis(10));
    let locker = pair.locker();
    let guard = locker
        .lock("t-renewed")
        .expire(Duration::from_millis(600))
        .renew(true)
        .acquire_blocking()
        .unwrap();
    // 50 threads take and release locks of their own, every one a grant
    // that waits for the replica, on the library's I/O thread.
    let until = Instant::now() + Duration::from_secs(3);
    let callers: Vec<_> = (0..50)
        .map(|i| {
            let locker = locker.clone();
            std::thread::spawn(move || {
                let name = format!("t-other-{i}");
                while Instant::now() < until {
                    let taken = locker
                        .lock(&name)
                        .acquire_timeout(Duration::from_millis(500))
                        .acquire_blocking();
                    // Not what this test is about: only the renewals are.
                    if let Ok(taken) = taken {
                        let _ = taken.release_blocking();
                    }
                }
            })
        })
        .collect();
    for caller in callers {
        caller.join().unwrap();
    }
    assert!(
        guard.lost_blocking(Duration::ZERO).is_none(),
        "the renewed guard was lost behind the grants"
    );
    assert!(!guard.is_lost());
    assert!(pair.master.exists(&lock_key("t-renewed")));
    guard.release_blocking().unwrap();
}
