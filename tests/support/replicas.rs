//! A master and a replica of our own, in sync, the replica's link to the
//! master direct or through a proxy that delays it.

use std::time::Duration;

use super::proxy::Proxy;
use super::{RedisServer, eventually};

/// A master and one replica in sync with it.
pub struct ReplicaPair {
    pub master: RedisServer,
    pub replica: RedisServer,
    /// The replica's link to the master, when it goes through a proxy.
    pub link: Option<Proxy>,
}

impl ReplicaPair {
    /// A master and a replica that reaches it directly.
    pub fn start() -> ReplicaPair {
        let master = RedisServer::start();
        let port = master.port;
        ReplicaPair::replicated(master, port, None)
    }

    /// A master and a replica whose link (the replication stream and the
    /// acknowledgements) takes `delay` longer each way, once it synced.
    pub fn lagging(delay: Duration) -> ReplicaPair {
        let master = RedisServer::start();
        let link = Proxy::start(master.port);
        let port = link.port();
        let pair = ReplicaPair::replicated(master, port, Some(link));
        pair.link.as_ref().expect("a proxied link").set_delay(delay);
        pair
    }

    /// Starts a replica of `master`, reached on `port`, and waits until it
    /// synced.
    fn replicated(master: RedisServer, port: u16, link: Option<Proxy>) -> ReplicaPair {
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
        ReplicaPair {
            master,
            replica,
            link,
        }
    }
}

impl Drop for ReplicaPair {
    fn drop(&mut self) {
        // A frozen replica cannot be audited or killed cleanly.
        self.replica.thaw();
    }
}
