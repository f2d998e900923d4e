//! The redis-server processes of the workspace's tests (the `lockattr`
//! crate's `tests/` and `lockattr-cli/tests/`): each on a free loopback
//! port, answered before use, killed when dropped. Never a server on 6379.
//! Not published: a dev-dependency of both, so that both packages build
//! from their own files and share one server support.
//!
//! Before a server is killed at the end of its test, the keyspace audit
//! ([`audit`]) reads every key it holds and fails the test when one has no
//! TTL, unless it is a documented exception ([`audit::EXCEPTIONS`]) or a key
//! the test allowed with [`RedisServer::allow_untimed`]. A server the test
//! killed itself is not audited, nor one dropped while the test is already
//! failing; a restarted server is audited once, at its final stop.

pub mod audit;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// A redis-server of our own.
pub struct RedisServer {
    /// The loopback port it listens on.
    pub port: u16,
    child: Option<Child>,
    dir: PathBuf,
    extra: Vec<String>,
    /// Keys the test wrote without a TTL on purpose ([`allow_untimed`](Self::allow_untimed)).
    allowed: audit::Allowed,
    /// The final audit ran (or was given up).
    audited: bool,
}

impl RedisServer {
    /// Starts a server on a free port and waits until it answers PING.
    pub fn start() -> RedisServer {
        Self::start_with(&[])
    }

    /// Starts a server with extra command-line options (`--requirepass x`).
    pub fn start_with(extra: &[&str]) -> RedisServer {
        // A free port can be taken by another test process between
        // `free_port` and the server's bind: then try another one.
        let mut failures = Vec::new();
        for _ in 0..5 {
            let port = free_port();
            let dir =
                std::env::temp_dir().join(format!("lockattr-test-{}-{port}", std::process::id()));
            std::fs::create_dir_all(&dir).expect("temp dir");
            let mut server = RedisServer {
                port,
                child: None,
                dir,
                extra: extra.iter().map(|s| s.to_string()).collect(),
                allowed: audit::Allowed::default(),
                audited: false,
            };
            match server.try_spawn() {
                Ok(()) => return server,
                Err(e) => failures.push(e),
            }
        }
        panic!("cannot start redis-server: {failures:?}");
    }

    /// `redis://127.0.0.1:<port>/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    fn spawn(&mut self) {
        if let Err(e) = self.try_spawn() {
            panic!("{e}");
        }
    }

    /// Starts the process and waits until it answers; Err when it exited
    /// at start (the port was taken).
    fn try_spawn(&mut self) -> Result<(), String> {
        let binary = std::env::var("REDIS_SERVER").unwrap_or_else(|_| "redis-server".into());
        let child = Command::new(&binary)
            .args(["--port", &self.port.to_string()])
            .args(["--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .args(["--dir", self.dir.to_str().expect("utf-8 temp dir")])
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start `{binary}` (install redis-server): {e}"));
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            // Our process must be the one answering: a server that could not
            // bind the port exits, and someone else's may be listening there.
            if let Some(Ok(Some(status))) = self.child.as_mut().map(|c| c.try_wait()) {
                self.child = None;
                return Err(format!(
                    "redis-server on port {} exited at start ({status}); was the port taken?",
                    self.port
                ));
            }
            let pid = self.child.as_ref().map_or(0, |c| c.id());
            // A server started with INFO renamed away (`--rename-command
            // INFO ""`) answers that it knows no such command: only ours is.
            let renamed = self
                .extra
                .windows(2)
                .any(|w| w[0] == "--rename-command" && w[1].eq_ignore_ascii_case("info"));
            if self
                .raw("INFO server")
                .map(|r| {
                    r.contains(&format!("process_id:{pid}\r\n"))
                        || r.starts_with("-NOAUTH")
                        || (renamed && r.starts_with("-ERR unknown command"))
                })
                .unwrap_or(false)
            {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!(
            "redis-server on port {} did not answer within 10 s",
            self.port
        );
    }

    /// Kills the server (data is lost: it keeps none on disk).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port, empty.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    /// Starts the server again on the same port, empty, with the
    /// command-line options `extra` instead of its own.
    pub fn restart_with(&mut self, extra: Vec<String>) {
        self.kill();
        self.extra = extra;
        self.spawn();
    }

    /// SIGSTOP: the server keeps its socket but answers nothing.
    pub fn freeze(&self) {
        self.signal("-STOP");
    }

    /// SIGCONT after [`freeze`](Self::freeze).
    pub fn thaw(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, sig: &str) {
        let pid = self.child.as_ref().expect("server running").id();
        let status = Command::new("kill")
            .args([sig, &pid.to_string()])
            .status()
            .expect("kill");
        assert!(status.success());
    }

    /// Sends one inline command over a fresh connection and returns the raw reply.
    pub fn raw(&self, command: &str) -> std::io::Result<String> {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port))?;
        stream.set_read_timeout(Some(Duration::from_secs(2)))?;
        stream.write_all(format!("{command}\r\n").as_bytes())?;
        let mut buf = vec![0_u8; 64 * 1024];
        let n = stream.read(&mut buf)?;
        Ok(String::from_utf8_lossy(&buf[..n]).into_owned())
    }

    /// A synchronous redis client to inspect or change keys from outside.
    pub fn client(&self) -> redis::Connection {
        redis::Client::open(self.url())
            .expect("url")
            .get_connection()
            .expect("connect to test redis")
    }

    /// Number of clients connected, as CLIENT LIST reports them (this query's own included).
    pub fn client_count(&self) -> usize {
        let list: String = redis::cmd("CLIENT")
            .arg("LIST")
            .query(&mut self.client())
            .expect("CLIENT LIST");
        list.lines().count()
    }
}

// ---- The keyspace audit (see `audit.rs`). ----

impl RedisServer {
    /// Lets keys matching `pattern` (Redis glob: `*`, `?`, `\` escapes)
    /// have no TTL when the server is audited: for keys this test writes
    /// itself without a TTL on purpose (a counter, a foreign value planted
    /// at a lock key), never for keys lockattr writes. Kept across
    /// [`restart`](Self::restart).
    pub fn allow_untimed(&self, pattern: &str) {
        self.allowed.add(pattern);
    }

    /// The keyspace audit now: the keys without a TTL, in every database,
    /// that are neither documented exceptions nor allowed; `Err` when it
    /// could not run.
    pub fn audit(&self) -> Result<Vec<audit::UntimedKey>, String> {
        audit::now(self.port, audit::password_of(&self.extra), &self.allowed)
    }

    /// The audit at the server's final stop, once (the drop's, or a set of
    /// servers' that reports them together): the failure message, if
    /// any. Nothing when the test is already failing (a panic in a panic
    /// aborts) or the server is not running (the test killed it).
    pub fn final_audit(&mut self) -> Option<String> {
        if std::mem::replace(&mut self.audited, true) || std::thread::panicking() {
            return None;
        }
        let child = self.child.as_mut()?;
        if !matches!(child.try_wait(), Ok(None)) {
            return None;
        }
        // A frozen server must answer the audit.
        let _ = Command::new("kill")
            .args(["-CONT", &child.id().to_string()])
            .status();
        audit::at_stop(self.port, audit::password_of(&self.extra), &self.allowed)
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        // Audited before the kill; the failure raised after it, so that a
        // failing audit leaves no server behind.
        let finding = self.final_audit();
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
        if let Some(finding) = finding {
            panic!("{finding}");
        }
    }
}

/// A port nobody listens on right now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

impl RedisServer {
    /// Whether the test left the process running (it did not
    /// [`kill`](Self::kill) it).
    pub fn has_process(&self) -> bool {
        self.child.is_some()
    }

    /// The final audit done by `scan` instead of the drop's (a replica's
    /// keys, read after `READONLY`): once, while the process runs; the
    /// failure message naming the server as `what`, if any. The drop then
    /// audits the server no more.
    pub fn final_audit_by(
        &mut self,
        what: &str,
        scan: impl FnOnce(u16) -> Result<Vec<audit::UntimedKey>, String>,
    ) -> Option<String> {
        let running = matches!(self.child.as_mut().map(|c| c.try_wait()), Some(Ok(None)));
        if self.audited || !running {
            return None;
        }
        self.audited = true;
        let server = format!("redis-server on port {} ({what})", self.port);
        match scan(self.port) {
            Ok(found) => {
                let keys = audit::unexpected(found, &self.allowed.patterns());
                (!keys.is_empty()).then(|| audit::report(&server, &keys))
            }
            Err(why) => Some(audit::refused(&server, &why)),
        }
    }
}

impl RedisServer {
    /// True when `key` exists, checked over a fresh connection.
    pub fn exists(&self, key: &str) -> bool {
        let n: i64 = redis::cmd("EXISTS")
            .arg(key)
            .query(&mut self.client())
            .expect("EXISTS");
        n == 1
    }

    /// The key's remaining time to live in milliseconds (-2: no key, -1: no expiry).
    pub fn pttl(&self, key: &str) -> i64 {
        redis::cmd("PTTL")
            .arg(key)
            .query(&mut self.client())
            .expect("PTTL")
    }

    /// The keys matching `pattern` (KEYS: fine on a test server), sorted.
    pub fn keys(&self, pattern: &str) -> Vec<String> {
        let mut keys: Vec<String> = redis::cmd("KEYS")
            .arg(pattern)
            .query(&mut self.client())
            .expect("KEYS");
        keys.sort();
        keys
    }

    /// The string value at `key`, if any.
    pub fn get(&self, key: &str) -> Option<String> {
        redis::cmd("GET")
            .arg(key)
            .query(&mut self.client())
            .expect("GET")
    }

    /// The owner token of the lock at `key`: the first line of its value
    /// (the rest records the holder and when it took the lock).
    pub fn owner(&self, key: &str) -> Option<String> {
        self.get(key)
            .map(|value| value.split('\n').next().unwrap_or_default().to_owned())
    }

    /// The lock keys of the default prefix (`lockattr:{...}`), fence counters left out.
    pub fn held_locks(&self) -> Vec<String> {
        self.keys("lockattr:*")
            .into_iter()
            .filter(|k| !k.ends_with(":fence"))
            .collect()
    }
}

impl RedisServer {
    /// Connections subscribed to something now (`CLIENT LIST TYPE pubsub`).
    pub fn pubsub_clients(&self) -> usize {
        let list: String = redis::cmd("CLIENT")
            .arg("LIST")
            .arg("TYPE")
            .arg("pubsub")
            .query(&mut self.client())
            .expect("CLIENT LIST TYPE pubsub");
        list.lines().filter(|l| !l.trim().is_empty()).count()
    }

    /// `redis://:<password>@127.0.0.1:<port>/`, for a server started with `--requirepass`.
    pub fn url_with_password(&self, password: &str) -> String {
        format!("redis://:{password}@127.0.0.1:{}/", self.port)
    }

    /// Calls per command since start, from `INFO commandstats` (`{"evalsha": 3, ...}`).
    pub fn command_calls(&self) -> HashMap<String, u64> {
        self.command_stats()
            .into_iter()
            .map(|(name, (calls, _))| (name, calls))
            .collect()
    }

    /// Scripts this server ran since start: `EVALSHA`s and `FCALL`s that
    /// completed (the library sends FCALL to a server that takes Redis
    /// Functions, EVALSHA to one that does not).
    pub fn scripts_run(&self) -> u64 {
        let completed = self.completed_calls();
        ["evalsha", "fcall"]
            .iter()
            .filter_map(|command| completed.get(*command))
            .sum()
    }

    /// Calls that completed per command since start: calls minus failed
    /// calls (an EVALSHA answered NOSCRIPT, or an FCALL answered that the
    /// function is not loaded, then sent again, counts once).
    pub fn completed_calls(&self) -> HashMap<String, u64> {
        self.command_stats()
            .into_iter()
            .map(|(name, (calls, failed))| (name, calls - failed))
            .collect()
    }

    /// `(calls, failed calls)` per command, from `INFO commandstats`.
    fn command_stats(&self) -> HashMap<String, (u64, u64)> {
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query(&mut self.client())
            .expect("INFO commandstats");
        info.lines()
            .filter_map(|line| {
                let (name, stats) = line.strip_prefix("cmdstat_")?.split_once(':')?;
                let field = |key: &str| -> Option<u64> {
                    stats
                        .split(',')
                        .find_map(|kv| kv.strip_prefix(key))?
                        .parse()
                        .ok()
                };
                Some((
                    name.to_owned(),
                    (field("calls=")?, field("failed_calls=").unwrap_or(0)),
                ))
            })
            .collect()
    }

    /// Connections accepted since start (`INFO stats`), this query's own included.
    pub fn total_connections_received(&self) -> u64 {
        let info: String = redis::cmd("INFO")
            .arg("stats")
            .query(&mut self.client())
            .expect("INFO stats");
        info.lines()
            .find_map(|line| line.strip_prefix("total_connections_received:"))
            .and_then(|n| n.trim().parse().ok())
            .expect("total_connections_received in INFO stats")
    }
}

/// Polls `cond` every 10 ms until it holds or `within` has passed; returns
/// how long it took, or `None` if it never held.
pub fn eventually(within: Duration, mut cond: impl FnMut() -> bool) -> Option<Duration> {
    let start = Instant::now();
    loop {
        if cond() {
            return Some(start.elapsed());
        }
        if start.elapsed() >= within {
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Waits for `child` for at most `within`; kills it and panics when it runs longer.
pub fn wait_child(mut child: Child, within: Duration) -> Output {
    let start = Instant::now();
    loop {
        match child.try_wait().expect("try_wait") {
            Some(_) => return child.wait_with_output().expect("child output"),
            None if start.elapsed() > within => {
                let _ = child.kill();
                let output = child.wait_with_output().expect("child output");
                panic!(
                    "child test process still running after {within:?}; killed. stdout:\n{}\nstderr:\n{}",
                    String::from_utf8_lossy(&output.stdout),
                    String::from_utf8_lossy(&output.stderr)
                );
            }
            None => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}
