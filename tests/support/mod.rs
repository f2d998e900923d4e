//! Private redis-server processes for the tests: each on a free loopback
//! port, answered before use, killed when dropped. Never a server on 6379.

#![allow(dead_code)] // each test file uses a part of this module

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A redis-server of our own.
pub struct RedisServer {
    pub port: u16,
    child: Option<Child>,
    dir: PathBuf,
    extra: Vec<String>,
}

impl RedisServer {
    /// Starts a server on a free port and waits until it answers PING.
    pub fn start() -> RedisServer {
        Self::start_with(&[])
    }

    /// Starts a server with extra command-line options (`--requirepass x`).
    pub fn start_with(extra: &[&str]) -> RedisServer {
        let port = free_port();
        let dir = std::env::temp_dir().join(format!("lockattr-test-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let mut server = RedisServer {
            port,
            child: None,
            dir,
            extra: extra.iter().map(|s| s.to_string()).collect(),
        };
        server.spawn();
        server
    }

    /// `redis://127.0.0.1:<port>/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    fn spawn(&mut self) {
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
            if self
                .raw("PING")
                .map(|r| r.starts_with("+PONG") || r.starts_with("-NOAUTH"))
                .unwrap_or(false)
            {
                return;
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

impl Drop for RedisServer {
    fn drop(&mut self) {
        if let Some(child) = &self.child {
            // A frozen server ignores SIGKILL's wait otherwise? No: SIGKILL works on stopped processes too.
            let _ = Command::new("kill")
                .args(["-CONT", &child.id().to_string()])
                .status();
        }
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A port nobody listens on right now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}
