//! Private redis-server processes for the tests (after the workspace's
//! `tests/support/mod.rs`): each on a free loopback port, answered before
//! use, killed when dropped. Never a server on 6379.
//!
//! Before a server is killed at the end of its test, the workspace's
//! keyspace audit (`tests/support/audit.rs`) fails the test when a key has
//! no TTL, unless it is a documented exception or allowed by the test
//! ([`RedisServer::allow_untimed`]).

#![allow(dead_code)] // not every helper is used by every test

#[path = "../../tests/support/audit.rs"]
pub mod audit;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// A redis-server of our own.
pub struct RedisServer {
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
            let dir = std::env::temp_dir()
                .join(format!("lockattr-cli-test-{}-{port}", std::process::id()));
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

    /// Sends one inline command over a fresh connection and returns the raw reply.
    pub fn raw(&self, command: &str) -> std::io::Result<String> {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port))?;
        stream.set_read_timeout(Some(Duration::from_secs(2)))?;
        stream.write_all(format!("{command}\r\n").as_bytes())?;
        let mut buf = vec![0_u8; 64 * 1024];
        let n = stream.read(&mut buf)?;
        Ok(String::from_utf8_lossy(&buf[..n]).into_owned())
    }
}

// ---- The keyspace audit (see `tests/support/audit.rs` of the workspace). ----

impl RedisServer {
    /// Lets keys matching `pattern` (Redis glob: `*`, `?`, `\` escapes)
    /// have no TTL when the server is audited: for keys this test writes
    /// itself without a TTL on purpose, never for keys lockattr writes.
    pub fn allow_untimed(&self, pattern: &str) {
        self.allowed.add(pattern);
    }

    /// The keyspace audit now: the keys without a TTL, in every database,
    /// that are neither documented exceptions nor allowed; `Err` when it
    /// could not run.
    pub fn audit(&self) -> Result<Vec<audit::UntimedKey>, String> {
        audit::now(self.port, audit::password_of(&self.extra), &self.allowed)
    }

    /// The audit at the server's final stop, once: the failure message, if
    /// any. Nothing when the test is already failing or the server is not
    /// running (the test killed it).
    fn final_audit(&mut self) -> Option<String> {
        if std::mem::replace(&mut self.audited, true) || std::thread::panicking() {
            return None;
        }
        if !matches!(self.child.as_mut()?.try_wait(), Ok(None)) {
            return None;
        }
        audit::at_stop(self.port, audit::password_of(&self.extra), &self.allowed)
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        // Audited before the kill; the failure raised after it.
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
    /// `redis://:<password>@127.0.0.1:<port>/`, for a server started with `--requirepass`.
    pub fn url_with_password(&self, password: &str) -> String {
        format!("redis://:{password}@127.0.0.1:{}/", self.port)
    }
}

/// Polls `cond` every 10 ms until it holds or `within` has passed; true
/// when it held.
pub fn eventually(within: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    loop {
        if cond() {
            return true;
        }
        if start.elapsed() >= within {
            return false;
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
                    "child process still running after {within:?}; killed. stdout:\n{}\nstderr:\n{}",
                    String::from_utf8_lossy(&output.stdout),
                    String::from_utf8_lossy(&output.stderr)
                );
            }
            None => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// `lockattr --url <url> args...` (the binary under test, `REDIS_URL`
/// unset, within 30 s): exit code, stdout, stderr.
pub fn lockattr_at(url: &str, args: &[&str]) -> (i32, String, String) {
    let output = wait_child(
        Command::new(env!("CARGO_BIN_EXE_lockattr"))
            .arg("--url")
            .arg(url)
            .args(args)
            .env_remove("REDIS_URL")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start lockattr"),
        Duration::from_secs(30),
    );
    (
        output.status.code().expect("exit code"),
        String::from_utf8(output.stdout).expect("UTF-8 stdout"),
        String::from_utf8(output.stderr).expect("UTF-8 stderr"),
    )
}
