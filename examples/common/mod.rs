//! For the examples: the Redis URL from `REDIS_URL`, or a throwaway
//! redis-server on a free loopback port that stops with the example.

use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A Redis to talk to; stops the throwaway server (if any) when dropped.
pub struct Redis {
    pub url: String,
    child: Option<Child>,
}

impl Drop for Redis {
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// `REDIS_URL` when set; otherwise starts `redis-server` on a free port.
#[allow(dead_code)] // not every example uses it
pub fn redis() -> Result<Redis, Box<dyn std::error::Error>> {
    if let Ok(url) = std::env::var("REDIS_URL") {
        return Ok(Redis { url, child: None });
    }
    throwaway()
}

/// Starts `redis-server` on a free port.
pub fn throwaway() -> Result<Redis, Box<dyn std::error::Error>> {
    let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let child = Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no"])
        .stdout(Stdio::null())
        .spawn()
        .map_err(|e| {
            format!("REDIS_URL is not set and `redis-server` could not be started ({e}); install redis-server or set REDIS_URL")
        })?;
    let redis = Redis {
        url: format!("redis://127.0.0.1:{port}/"),
        child: Some(child),
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if Instant::now() > deadline {
            return Err("the throwaway redis-server did not start within 10 s".into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    println!("(started a throwaway redis-server at {})", redis.url);
    Ok(redis)
}
