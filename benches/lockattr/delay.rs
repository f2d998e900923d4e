//! A TCP proxy that adds a constant delay each way, with as few thread
//! hops as it can: one thread per direction of a connection reads a chunk,
//! sleeps until `read time + delay` (`thread::sleep`, no spinning) and
//! writes it, then reads the next.
//!
//! The tests' fault proxy (`tests/support/proxy.rs`) hands every chunk
//! from a reader thread to a writer thread, so a round trip through it
//! wakes four threads more than a direct one: on a VM that alone costs
//! more than 0.1 ms, which leaves nothing for a 0.2 ms target. Here a
//! round trip wakes two more. The price: a chunk that arrives while the
//! one before it is still waiting is read only once that one is written,
//! so it waits up to one delay more than it should. The bench's loops
//! have one request in flight per connection, so it does not happen
//! there; where it could (a pipeline), the figures would read high.
//!
//! `thread::sleep` wakes later than asked (timer slack, about 50 µs for a
//! normal thread on Linux, and the wake-up itself), so callers calibrate
//! the delay against PINGs through the proxy and report the RTT they
//! measured, not the delay they set.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::Res;

/// A delay proxy to `127.0.0.1:<target port>` on a free loopback port.
/// Dropping it closes every connection.
pub struct DelayProxy {
    port: u16,
    delay_nanos: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    /// Every socket of every connection, to shut them down on drop.
    sockets: Arc<Mutex<Vec<TcpStream>>>,
    acceptor: Option<JoinHandle<()>>,
}

impl DelayProxy {
    /// Listens on a free loopback port; forwards each connection to
    /// `127.0.0.1:target_port`.
    pub fn start(target_port: u16) -> Res<DelayProxy> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let port = listener.local_addr()?.port();
        let delay_nanos = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let sockets = Arc::new(Mutex::new(Vec::new()));
        let acceptor = {
            let (delay_nanos, stop, sockets) = (delay_nanos.clone(), stop.clone(), sockets.clone());
            std::thread::Builder::new()
                .name("delay-accept".into())
                .spawn(move || {
                    for client in listener.incoming() {
                        if stop.load(Ordering::SeqCst) {
                            return;
                        }
                        let Ok(client) = client else { continue };
                        if open(client, target_port, &delay_nanos, &sockets).is_err() {
                            continue;
                        }
                    }
                })?
        };
        Ok(DelayProxy {
            port,
            delay_nanos,
            stop,
            sockets,
            acceptor: Some(acceptor),
        })
    }

    /// `redis://127.0.0.1:<port>/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// The delay added each way, for chunks read from now on.
    pub fn set_delay(&self, delay: Duration) {
        let nanos = u64::try_from(delay.as_nanos()).unwrap_or(u64::MAX);
        self.delay_nanos.store(nanos, Ordering::SeqCst);
    }
}

impl Drop for DelayProxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the acceptor with a connection of our own.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
        for socket in self
            .sockets
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            let _ = socket.shutdown(Shutdown::Both);
        }
    }
}

fn open(
    client: TcpStream,
    target_port: u16,
    delay_nanos: &Arc<AtomicU64>,
    sockets: &Arc<Mutex<Vec<TcpStream>>>,
) -> std::io::Result<()> {
    let server = TcpStream::connect(("127.0.0.1", target_port))?;
    client.set_nodelay(true)?;
    server.set_nodelay(true)?;
    {
        let mut all = sockets.lock().unwrap_or_else(|e| e.into_inner());
        all.push(client.try_clone()?);
        all.push(server.try_clone()?);
    }
    for (src, dst, name) in [
        (client.try_clone()?, server.try_clone()?, "delay-up"),
        (server, client, "delay-down"),
    ] {
        let delay_nanos = delay_nanos.clone();
        std::thread::Builder::new()
            .name(name.into())
            .stack_size(128 * 1024)
            .spawn(move || pump(src, dst, &delay_nanos))?;
    }
    Ok(())
}

/// Reads a chunk, waits until its delivery time, writes it; passes on the
/// end of the stream.
fn pump(mut src: TcpStream, mut dst: TcpStream, delay_nanos: &AtomicU64) {
    let mut buf = vec![0_u8; 64 * 1024];
    loop {
        let n = match src.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let deliver_at = Instant::now() + Duration::from_nanos(delay_nanos.load(Ordering::Relaxed));
        let now = Instant::now();
        if deliver_at > now {
            std::thread::sleep(deliver_at - now);
        }
        if dst.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = dst.shutdown(Shutdown::Write);
    let _ = src.shutdown(Shutdown::Read);
}
