//! A redis-server of a unit test's own, for the modules whose scripts are
//! tested by calling them directly (never on 6379).

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use redis::Connection;

/// A redis-server of this test's own, killed when dropped.
pub(crate) struct Server {
    child: Child,
    port: u16,
}

impl Server {
    pub(crate) fn start() -> Server {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let binary = std::env::var("REDIS_SERVER").unwrap_or_else(|_| "redis-server".into());
        let child = Command::new(&binary)
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start `{binary}` (install redis-server): {e}"));
        let server = Server { child, port };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(mut con) = server.try_connect()
                && redis::cmd("PING").query::<String>(&mut con).is_ok()
            {
                return server;
            }
            assert!(Instant::now() < deadline, "redis-server did not start");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    pub(crate) fn try_connect(&self) -> redis::RedisResult<Connection> {
        redis::Client::open(format!("redis://127.0.0.1:{}/", self.port))?.get_connection()
    }

    pub(crate) fn connect(&self) -> Connection {
        self.try_connect().expect("connect to the test server")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
