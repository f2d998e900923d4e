//! A Redis Sentinel deployment of our own: one master, one replica and three
//! sentinels (`redis-server <conf> --sentinel`), all on free loopback ports,
//! with timings short enough that a failover takes a few seconds. Every
//! process is killed when the set is dropped (also when a test panics).
//!
//! Timings: a sentinel thinks the master is down after 1 s without an
//! answer (`down-after-milliseconds`), two sentinels must agree (quorum 2
//! of 3) and one of them is elected to promote the replica; a failover that
//! stalls is retried after `2 * failover-timeout` = 6 s. A failover takes
//! about 3-5 s on a loaded 2-core machine.

use std::fs;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{RedisServer, free_port};

/// How the set is protected.
#[derive(Clone, Debug, Default)]
pub struct Auth {
    /// `requirepass` (and `masterauth`) of the master and the replica,
    /// `sentinel auth-pass` in the sentinels' configuration.
    pub data: Option<String>,
    /// `requirepass` of the sentinels themselves (they also use it to talk
    /// to each other).
    pub sentinels: Option<String>,
}

/// One master, one replica, three sentinels.
pub struct SentinelSet {
    /// The name the sentinels monitor the master under.
    pub name: String,
    /// The two data servers; `servers[master]` is the master (as the
    /// sentinels last reported it through [`wait_for_failover`](Self::wait_for_failover)).
    servers: [RedisServer; 2],
    master: usize,
    sentinels: Vec<Sentinel>,
    auth: Auth,
}

struct Sentinel {
    port: u16,
    child: Option<Child>,
    dir: PathBuf,
}

/// How long the set may take to start, and a failover at most (generous:
/// a failover that loses its first election is retried after 6 s).
pub const SETTLE: Duration = Duration::from_secs(30);

impl SentinelSet {
    /// Starts an unprotected set monitoring its master as `name`.
    pub fn start(name: &str) -> SentinelSet {
        Self::start_with_auth(name, Auth::default())
    }

    /// Starts a set protected by `auth`, and waits until every sentinel
    /// knows the replica (with its link to the master up) and the two
    /// other sentinels: from then on a failover can happen.
    pub fn start_with_auth(name: &str, auth: Auth) -> SentinelSet {
        let data_args = |replica_of: Option<u16>| -> Vec<String> {
            // A replica's first sync at once (the default waits 5 s for
            // more replicas to share a diskless transfer).
            let mut args: Vec<String> = vec!["--repl-diskless-sync-delay".into(), "0".into()];
            if let Some(pw) = &auth.data {
                args.extend(["--requirepass".into(), pw.clone()]);
                args.extend(["--masterauth".into(), pw.clone()]);
            }
            if let Some(port) = replica_of {
                args.extend(["--replicaof".into(), "127.0.0.1".into(), port.to_string()]);
            }
            args
        };
        let start = |args: Vec<String>| {
            RedisServer::start_with(&args.iter().map(String::as_str).collect::<Vec<_>>())
        };
        let master = start(data_args(None));
        let replica = start(data_args(Some(master.port)));
        let mut set = SentinelSet {
            name: name.to_owned(),
            servers: [master, replica],
            master: 0,
            sentinels: Vec::new(),
            auth,
        };
        // The sentinels learn the replicas from the master's INFO, asked at
        // once and then every 10 s: start them when the replica is there.
        set.wait_replica_online(set.servers[1].port);
        for _ in 0..3 {
            let sentinel = set.spawn_sentinel();
            set.sentinels.push(sentinel);
        }
        set.wait_sentinels_ready();
        set
    }

    /// `redis://127.0.0.1:<port>/` of each sentinel (with `:<password>@`
    /// when the sentinels require one).
    pub fn sentinel_urls(&self) -> Vec<String> {
        self.sentinels
            .iter()
            .map(|s| match &self.auth.sentinels {
                Some(pw) => format!("redis://:{pw}@127.0.0.1:{}/", s.port),
                None => format!("redis://127.0.0.1:{}/", s.port),
            })
            .collect()
    }

    /// Like [`sentinel_urls`](Self::sentinel_urls), never with a password.
    pub fn sentinel_urls_without_password(&self) -> Vec<String> {
        self.sentinels
            .iter()
            .map(|s| format!("redis://127.0.0.1:{}/", s.port))
            .collect()
    }

    /// The port of the master (the initial one, or the one the last
    /// [`wait_for_failover`](Self::wait_for_failover) returned).
    pub fn master_port(&self) -> u16 {
        self.servers[self.master].port
    }

    /// The port of the server that is not the master.
    pub fn replica_port(&self) -> u16 {
        self.servers[1 - self.master].port
    }

    /// The master's server.
    pub fn master(&self) -> &RedisServer {
        &self.servers[self.master]
    }

    /// The server that is not the master.
    pub fn replica(&self) -> &RedisServer {
        &self.servers[1 - self.master]
    }

    /// A direct connection to the data server on `port` (with the
    /// password, if any).
    pub fn client(&self, port: u16) -> redis::Connection {
        let con = redis::Client::open(self.data_url(port))
            .expect("url")
            .get_connection_with_timeout(Duration::from_secs(2))
            .unwrap_or_else(|e| panic!("connect to the data server on {port}: {e}"));
        con.set_read_timeout(Some(Duration::from_secs(5)))
            .expect("read timeout");
        con
    }

    /// A direct connection to the master.
    pub fn master_client(&self) -> redis::Connection {
        self.client(self.master_port())
    }

    /// True when `key` exists on the data server on `port`.
    pub fn exists_on(&self, port: u16, key: &str) -> bool {
        let n: i64 = redis::cmd("EXISTS")
            .arg(key)
            .query(&mut self.client(port))
            .expect("EXISTS");
        n == 1
    }

    /// The keys matching `pattern` on the data server on `port`, sorted.
    pub fn keys_on(&self, port: u16, pattern: &str) -> Vec<String> {
        let mut keys: Vec<String> = redis::cmd("KEYS")
            .arg(pattern)
            .query(&mut self.client(port))
            .expect("KEYS");
        keys.sort();
        keys
    }

    /// `role:` from `INFO replication` of the data server on `port`
    /// (`master` or `slave`), `None` when it does not answer.
    pub fn role_of(&self, port: u16) -> Option<String> {
        let mut con = redis::Client::open(self.data_url(port))
            .ok()?
            .get_connection_with_timeout(Duration::from_millis(500))
            .ok()?;
        con.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
        let info: String = redis::cmd("INFO").arg("replication").query(&mut con).ok()?;
        info.lines()
            .find_map(|l| l.strip_prefix("role:"))
            .map(|r| r.trim().to_owned())
    }

    /// Waits until every write the master took so far reached the replica
    /// (`WAIT 1`): a failover after this loses nothing.
    pub fn wait_replicated(&self) {
        let acked: i64 = redis::cmd("WAIT")
            .arg(1)
            .arg(5000)
            .query(&mut self.master_client())
            .expect("WAIT");
        assert!(acked >= 1, "the replica did not acknowledge within 5 s");
    }

    /// [`RedisServer::allow_untimed`] on both data servers.
    pub fn allow_untimed(&self, pattern: &str) {
        for server in &self.servers {
            server.allow_untimed(pattern);
        }
    }

    /// Kills the master (SIGKILL); the sentinels will promote the replica.
    pub fn kill_master(&mut self) {
        self.servers[self.master].kill();
    }

    /// SIGSTOP on the master: it keeps its sockets (and its clients'
    /// connections) but answers nothing; the sentinels will promote the
    /// replica.
    pub fn freeze_master(&self) {
        self.servers[self.master].freeze();
    }

    /// SIGCONT on the server on `port` after [`freeze_master`](Self::freeze_master).
    pub fn thaw(&self, port: u16) {
        self.server(port).thaw();
    }

    /// Kills every sentinel (the data servers stay up).
    pub fn kill_sentinels(&mut self) {
        for s in &mut self.sentinels {
            s.kill();
        }
    }

    /// What each sentinel answers to `SENTINEL GET-MASTER-ADDR-BY-NAME`:
    /// the master's port, or `None` (no answer, or an address that is not
    /// a port of ours).
    pub fn reported_master_ports(&self) -> Vec<Option<u16>> {
        (0..self.sentinels.len())
            .map(|i| {
                let mut con = self.sentinel_client(i).ok()?;
                let addr: Option<(String, String)> = redis::cmd("SENTINEL")
                    .arg("GET-MASTER-ADDR-BY-NAME")
                    .arg(&self.name)
                    .query(&mut con)
                    .ok()?;
                addr?.1.parse().ok()
            })
            .collect()
    }

    /// Waits until every sentinel reports a master other than the current
    /// one and that server answers as a master; returns its port. Panics
    /// (with the sentinels' logs) after `within`.
    pub fn wait_for_failover(&mut self, within: Duration) -> u16 {
        let old = self.master_port();
        let start = Instant::now();
        loop {
            let reported = self.reported_master_ports();
            if let Some(Some(port)) = reported.first()
                && *port != old
                && reported.iter().all(|p| *p == Some(*port))
                && self.role_of(*port).as_deref() == Some("master")
            {
                self.master = self
                    .servers
                    .iter()
                    .position(|s| s.port == *port)
                    .unwrap_or_else(|| panic!("the sentinels report a master on {port}, not ours"));
                return *port;
            }
            if start.elapsed() > within {
                panic!(
                    "no failover from {old} within {within:?}: the sentinels report {reported:?}\n{}",
                    self.logs()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Starts the killed old master again, empty, on its port, as a replica
    /// of the current master, and waits until its link to the master is up.
    pub fn restart_old_master_as_replica(&mut self) {
        let new_master = self.master_port();
        let old = 1 - self.master;
        let mut extra = vec!["--repl-diskless-sync-delay".into(), "0".into()];
        if let Some(pw) = &self.auth.data {
            extra.extend(["--requirepass".into(), pw.clone()]);
            extra.extend(["--masterauth".into(), pw.clone()]);
        }
        extra.extend([
            "--replicaof".into(),
            "127.0.0.1".into(),
            new_master.to_string(),
        ]);
        let server = &mut self.servers[old];
        server.restart_with(extra);
        let port = server.port;
        self.wait_replica_online(port);
    }

    /// `REPLICAOF 127.0.0.1 <current master>` sent to the server on `port`
    /// (a running old master), and waits until its link is up.
    pub fn demote(&self, port: u16) {
        let _: () = redis::cmd("REPLICAOF")
            .arg("127.0.0.1")
            .arg(self.master_port())
            .query(&mut self.client(port))
            .expect("REPLICAOF");
        self.wait_replica_online(port);
    }

    /// The last lines of each sentinel's log, for failure messages.
    pub fn logs(&self) -> String {
        let mut out = String::new();
        for s in &self.sentinels {
            let log = fs::read_to_string(s.dir.join("sentinel.log")).unwrap_or_default();
            let lines: Vec<&str> = log.lines().collect();
            let tail = &lines[lines.len().saturating_sub(25)..];
            out.push_str(&format!(
                "--- sentinel {} ---\n{}\n",
                s.port,
                tail.join("\n")
            ));
        }
        out
    }

    fn server(&self, port: u16) -> &RedisServer {
        self.servers
            .iter()
            .find(|s| s.port == port)
            .unwrap_or_else(|| panic!("no data server of ours on {port}"))
    }

    /// Waits until the replica on `port` reports `master_link_status:up`.
    fn wait_replica_online(&self, port: u16) {
        let up = super::eventually(SETTLE, || {
            let mut con = match redis::Client::open(self.data_url(port))
                .and_then(|c| c.get_connection_with_timeout(Duration::from_millis(500)))
            {
                Ok(con) => con,
                Err(_) => return false,
            };
            let info: String = match redis::cmd("INFO").arg("replication").query(&mut con) {
                Ok(info) => info,
                Err(_) => return false,
            };
            info.contains("master_link_status:up")
        });
        assert!(
            up.is_some(),
            "the replica on {port} did not sync within {SETTLE:?}"
        );
    }

    fn data_url(&self, port: u16) -> String {
        match &self.auth.data {
            Some(pw) => format!("redis://:{pw}@127.0.0.1:{port}/"),
            None => format!("redis://127.0.0.1:{port}/"),
        }
    }

    fn sentinel_client(&self, i: usize) -> redis::RedisResult<redis::Connection> {
        let url = match &self.auth.sentinels {
            Some(pw) => format!("redis://:{pw}@127.0.0.1:{}/", self.sentinels[i].port),
            None => format!("redis://127.0.0.1:{}/", self.sentinels[i].port),
        };
        let con =
            redis::Client::open(url)?.get_connection_with_timeout(Duration::from_millis(500))?;
        con.set_read_timeout(Some(Duration::from_secs(1)))?;
        Ok(con)
    }

    /// Waits until every sentinel lists the replica (link up, not down)
    /// and the two other sentinels.
    fn wait_sentinels_ready(&self) {
        let replica = self.replica_port().to_string();
        let ready = super::eventually(SETTLE, || {
            (0..self.sentinels.len()).all(|i| {
                let Ok(mut con) = self.sentinel_client(i) else {
                    return false;
                };
                let replicas: Vec<std::collections::HashMap<String, String>> =
                    match redis::cmd("SENTINEL")
                        .arg("REPLICAS")
                        .arg(&self.name)
                        .query(&mut con)
                    {
                        Ok(r) => r,
                        Err(_) => return false,
                    };
                let sees_replica = replicas.iter().any(|r| {
                    r.get("port") == Some(&replica)
                        && r.get("master-link-status").map(String::as_str) == Some("ok")
                        && r.get("flags").is_some_and(|f| !f.contains("down"))
                });
                let sentinels: Vec<redis::Value> = match redis::cmd("SENTINEL")
                    .arg("SENTINELS")
                    .arg(&self.name)
                    .query(&mut con)
                {
                    Ok(s) => s,
                    Err(_) => return false,
                };
                sees_replica && sentinels.len() == self.sentinels.len() - 1
            })
        });
        assert!(
            ready.is_some(),
            "the sentinels did not see the replica and each other within {SETTLE:?}\n{}",
            self.logs()
        );
    }

    /// Starts one sentinel on a free port (another if that one was taken).
    fn spawn_sentinel(&self) -> Sentinel {
        let mut failures = Vec::new();
        for _ in 0..5 {
            let port = free_port();
            let dir = std::env::temp_dir()
                .join(format!("lockattr-sentinel-{}-{port}", std::process::id()));
            fs::create_dir_all(&dir).expect("temp dir");
            let conf = dir.join("sentinel.conf");
            let name = &self.name;
            let mut text = format!(
                "port {port}\n\
                 bind 127.0.0.1\n\
                 dir {dir}\n\
                 logfile {log}\n\
                 sentinel resolve-hostnames no\n\
                 sentinel monitor {name} 127.0.0.1 {master} 2\n\
                 sentinel down-after-milliseconds {name} 1000\n\
                 sentinel failover-timeout {name} 3000\n\
                 sentinel parallel-syncs {name} 1\n",
                dir = dir.display(),
                log = dir.join("sentinel.log").display(),
                master = self.master_port(),
            );
            if let Some(pw) = &self.auth.data {
                text.push_str(&format!("sentinel auth-pass {name} {pw}\n"));
            }
            if let Some(pw) = &self.auth.sentinels {
                text.push_str(&format!("requirepass {pw}\n"));
            }
            fs::write(&conf, text).expect("sentinel config");
            let binary = std::env::var("REDIS_SERVER").unwrap_or_else(|_| "redis-server".into());
            let child = Command::new(&binary)
                .arg(&conf)
                .arg("--sentinel")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap_or_else(|e| panic!("cannot start `{binary} --sentinel`: {e}"));
            let mut sentinel = Sentinel {
                port,
                child: Some(child),
                dir,
            };
            match sentinel.wait_answering(self.auth.sentinels.as_deref()) {
                Ok(()) => return sentinel,
                Err(e) => failures.push(e),
            }
        }
        panic!("cannot start a sentinel: {failures:?}");
    }
}

/// The keyspace audit of both data servers (see `audit.rs`; the sentinels
/// hold no keys of ours), reported together; then every process is killed
/// by its own drop.
impl Drop for SentinelSet {
    fn drop(&mut self) {
        let findings: Vec<String> = self
            .servers
            .iter_mut()
            .filter_map(RedisServer::final_audit)
            .collect();
        if !findings.is_empty() {
            panic!("{}", findings.join("\n\n"));
        }
    }
}

impl Sentinel {
    /// Waits until this very process answers INFO; Err when it exited at
    /// start (the port was taken).
    fn wait_answering(&mut self, password: Option<&str>) -> Result<(), String> {
        let pid = self.child.as_ref().map_or(0, Child::id);
        let url = match password {
            Some(pw) => format!("redis://:{pw}@127.0.0.1:{}/", self.port),
            None => format!("redis://127.0.0.1:{}/", self.port),
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Some(Ok(Some(status))) = self.child.as_mut().map(Child::try_wait) {
                self.child = None;
                return Err(format!(
                    "sentinel on port {} exited at start ({status}); was the port taken?",
                    self.port
                ));
            }
            let answered = redis::Client::open(url.as_str())
                .and_then(|c| c.get_connection_with_timeout(Duration::from_millis(200)))
                .and_then(|mut con| redis::cmd("INFO").arg("server").query::<String>(&mut con));
            if answered.is_ok_and(|info| info.contains(&format!("process_id:{pid}\r\n"))) {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("sentinel on port {} did not answer within 10 s", self.port);
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        self.kill();
        let _ = fs::remove_dir_all(&self.dir);
    }
}
