//! A fault-injecting TCP proxy in front of a redis-server: added latency,
//! lost replies, silently dead links and cut connections, on demand.
//!
//! Plain threads and `std::net` only, so it works under any async runtime
//! (or none). Each proxied connection uses four threads: a reader and a
//! writer per direction. A reader timestamps every chunk it reads and queues
//! it; the writer delivers it at `read time + delay`, in order, so delays do
//! not add up along a pipeline.
//!
//! Closing a connection means `shutdown(Both)` on both of its sockets: the
//! client sees end-of-file (or a reset) on its next read, Redis drops the
//! client. An end-of-file from either side is passed on after the bytes
//! before it (a half-close); the connection counts as closed once both
//! directions ended. A killed redis-server therefore looks, to the client,
//! like a closed connection, as without the proxy.
//!
//! A stalled connection does not read, so it notices neither side hanging
//! up until the stall ends; `cut_all` and dropping the proxy still close it.

#![allow(dead_code)] // each test file uses a part of this module

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long a blocked read or write waits before it looks at the flags again
/// (closing a socket wakes a blocked read at once; this is a safety net).
const POLL: Duration = Duration::from_millis(50);
/// How often a stalled reader or writer checks whether the stall is over.
const STALL_POLL: Duration = Duration::from_millis(5);
/// After the request of a `drop_after_*` was passed on, how long the proxy
/// waits for Redis to answer and hang up before it closes the link anyway.
const DROP_GRACE: Duration = Duration::from_secs(2);
/// The largest chunk read at once.
const CHUNK: usize = 64 * 1024;

/// A fault-injecting TCP proxy to `127.0.0.1:<target port>`, listening on
/// a free loopback port. Dropping it stops it and closes every connection.
pub struct Proxy {
    port: u16,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
}

impl Proxy {
    /// Listens on a free loopback port and forwards every connection to
    /// `127.0.0.1:target_port` (a connection whose target refuses it is
    /// closed right after it was accepted).
    pub fn start(target_port: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("proxy: bind a loopback port");
        let port = listener.local_addr().expect("proxy: local address").port();
        listener
            .set_nonblocking(true)
            .expect("proxy: non-blocking listener");
        let shared = Arc::new(Shared::default());
        let acceptor = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name(format!("proxy-{port}-accept"))
                .spawn(move || accept_loop(listener, target_port, shared))
                .expect("proxy: spawn the acceptor")
        };
        Proxy {
            port,
            shared,
            acceptor: Some(acceptor),
        }
    }

    /// The loopback port the proxy listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:<port>/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// `redis://127.0.0.1:<port>/<db>`.
    pub fn url_db(&self, db: u32) -> String {
        format!("redis://127.0.0.1:{}/{db}", self.port)
    }

    /// Constant one-way latency added in each direction, so a round trip
    /// costs `2 × delay` more. Every chunk read after this call is
    /// delivered `delay` after it was read, in order; chunks read together
    /// (a pipeline) are delayed once, not once each. Applies to new and
    /// existing connections; `Duration::ZERO` turns it off (chunks already
    /// queued keep their delivery time).
    pub fn set_delay(&self, delay: Duration) {
        let nanos = u64::try_from(delay.as_nanos()).unwrap_or(u64::MAX);
        self.shared.delay_nanos.store(nanos, Ordering::SeqCst);
    }

    /// The next client→server chunk, on any connection, is passed to Redis;
    /// then its connection is closed on both sides before any reply goes
    /// back: "the request reached Redis, the answer was lost". When the
    /// client sees its connection closed, Redis has run the request (the
    /// proxy half-closes towards Redis and waits, at most 2 s, until Redis
    /// hangs up). Replies still on their way on that connection are lost
    /// too. One-shot: later chunks and connections work normally. Replaces
    /// a pending `drop_after_*`.
    pub fn drop_after_next_request(&self) {
        *lock(&self.shared.drop_trigger) = Some(Vec::new());
    }

    /// Like [`drop_after_next_request`](Self::drop_after_next_request), but
    /// only for a client→server chunk that contains `needle` (ASCII
    /// case-insensitive), such as `b"EVALSHA"` or a key name; chunks
    /// without it pass normally. The needle must lie within one chunk: one
    /// command, or a pipeline, written at once. One-shot.
    pub fn drop_after_request_containing(&self, needle: &[u8]) {
        *lock(&self.shared.drop_trigger) = Some(needle.to_ascii_lowercase());
    }

    /// Every connection whose client→server traffic so far, or from now on,
    /// contains `needle` (ASCII case-insensitive, e.g. `b"SUBSCRIBE"`) goes
    /// silent until [`resume`](Self::resume): its sockets stay open, and
    /// nothing passes in either direction (the chunk that contains the
    /// needle is held too). Bytes are held, not lost: the proxy stops
    /// reading, so they wait in socket buffers, and after `resume` they are
    /// delivered late, in order, like after a healed network partition.
    /// The proxy keeps each connection's client→server bytes for this
    /// matching, for as long as the connection lives.
    pub fn stall_matching(&self, needle: &[u8]) {
        let needle = needle.to_ascii_lowercase();
        lock(&self.shared.stall_needles).push(needle.clone());
        for conn in lock(&self.shared.conns).iter() {
            if contains(&lock(&conn.history), &needle) {
                conn.stalled.store(true, Ordering::SeqCst);
            }
        }
    }

    /// Every connection, current and new, goes silent until
    /// [`resume`](Self::resume): new connections are accepted (and
    /// connected to Redis), sockets stay open, nothing is passed on. Bytes
    /// are held and delivered late after `resume`, as with
    /// [`stall_matching`](Self::stall_matching).
    pub fn stall_all(&self) {
        self.shared.stall_all.store(true, Ordering::SeqCst);
    }

    /// Ends every stall (of [`stall_all`](Self::stall_all) and of
    /// [`stall_matching`](Self::stall_matching), whose needles are
    /// forgotten): the bytes held meanwhile are delivered now, in order,
    /// and traffic flows again.
    pub fn resume(&self) {
        lock(&self.shared.stall_needles).clear();
        self.shared.stall_all.store(false, Ordering::SeqCst);
        for conn in lock(&self.shared.conns).iter() {
            conn.stalled.store(false, Ordering::SeqCst);
        }
    }

    /// Closes every current connection at once, both sides. New
    /// connections work normally.
    pub fn cut_all(&self) {
        for conn in lock(&self.shared.conns).iter() {
            conn.close();
        }
    }

    /// Connections open right now (accepted and not closed yet).
    pub fn open_connections(&self) -> usize {
        lock(&self.shared.conns)
            .iter()
            .filter(|c| !c.closed.load(Ordering::SeqCst))
            .count()
    }

    /// Connections accepted since start. The proxy accepts in its own
    /// thread, shortly after the client's `connect` returned: poll rather
    /// than read this once.
    pub fn accepted(&self) -> usize {
        self.shared.accepted.load(Ordering::SeqCst)
    }
}

impl Drop for Proxy {
    /// Stops accepting, closes every connection and joins every thread.
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::SeqCst);
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
        let conns = std::mem::take(&mut *lock(&self.shared.conns));
        for conn in &conns {
            conn.close();
        }
        for conn in &conns {
            for thread in std::mem::take(&mut *lock(&conn.threads)) {
                let _ = thread.join();
            }
        }
    }
}

/// State shared by the handle, the acceptor and every connection's threads.
#[derive(Default)]
struct Shared {
    delay_nanos: AtomicU64,
    stall_all: AtomicBool,
    /// Lower-cased needles of `stall_matching`, until `resume`.
    stall_needles: Mutex<Vec<Vec<u8>>>,
    /// A pending `drop_after_*`: the lower-cased needle, empty for any chunk.
    drop_trigger: Mutex<Option<Vec<u8>>>,
    conns: Mutex<Vec<Arc<Conn>>>,
    accepted: AtomicUsize,
    shutdown: AtomicBool,
}

impl Shared {
    fn delay(&self) -> Duration {
        Duration::from_nanos(self.delay_nanos.load(Ordering::SeqCst))
    }

    /// Takes the pending `drop_after_*` when `chunk` fires it.
    fn take_drop_trigger(&self, chunk: &[u8]) -> bool {
        let mut trigger = lock(&self.drop_trigger);
        let fires = match trigger.as_deref() {
            None => false,
            Some(needle) => contains(&chunk.to_ascii_lowercase(), needle),
        };
        if fires {
            *trigger = None;
        }
        fires
    }
}

/// One proxied connection.
struct Conn {
    client: TcpStream,
    server: TcpStream,
    closed: AtomicBool,
    /// Silenced by `stall_matching`.
    stalled: AtomicBool,
    /// A `drop_after_*` fired: nothing more goes back to the client, and
    /// the connection closes once the request was passed on.
    dropping: AtomicBool,
    /// Directions that ended with an end-of-file passed on.
    finished: AtomicUsize,
    /// Every client→server byte so far, lower-cased, for `stall_matching`.
    history: Mutex<Vec<u8>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl Conn {
    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    fn is_stalled(&self, shared: &Shared) -> bool {
        shared.stall_all.load(Ordering::SeqCst) || self.stalled.load(Ordering::SeqCst)
    }

    fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        let _ = self.client.shutdown(Shutdown::Both);
        let _ = self.server.shutdown(Shutdown::Both);
    }

    /// Appends a client→server chunk to the history and silences the
    /// connection when a `stall_matching` needle now appears in it.
    fn record(&self, shared: &Shared, chunk: &[u8]) {
        let mut history = lock(&self.history);
        let old_len = history.len();
        history.extend(chunk.iter().map(u8::to_ascii_lowercase));
        for needle in lock(&shared.stall_needles).iter() {
            let from = old_len.saturating_sub(needle.len().saturating_sub(1));
            if contains(&history[from..], needle) {
                self.stalled.store(true, Ordering::SeqCst);
            }
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Direction {
    ClientToServer,
    ServerToClient,
}

/// What a reader hands its writer.
enum Item {
    Data {
        deliver_at: Instant,
        bytes: Vec<u8>,
        /// The chunk that fired a `drop_after_*`.
        drop_after: bool,
    },
    /// The source sent end-of-file.
    Eof { deliver_at: Instant },
    /// The source failed (reset): close the connection.
    Reset,
}

fn accept_loop(listener: TcpListener, target_port: u16, shared: Arc<Shared>) {
    while !shared.shutdown.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((client, _)) => {
                shared.accepted.fetch_add(1, Ordering::SeqCst);
                if let Err(client) = open(client, target_port, &shared) {
                    let _ = client.shutdown(Shutdown::Both);
                }
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::Interrupted => {
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(5)),
        }
        // Forget connections that are closed and whose threads are done.
        lock(&shared.conns).retain(|conn| {
            !(conn.is_closed() && lock(&conn.threads).iter().all(JoinHandle::is_finished))
        });
    }
}

/// Connects to the target and starts the four threads of a connection;
/// gives the client socket back when that fails.
fn open(client: TcpStream, target_port: u16, shared: &Arc<Shared>) -> Result<(), TcpStream> {
    let target = std::net::SocketAddr::from(([127, 0, 0, 1], target_port));
    let Ok(server) = TcpStream::connect_timeout(&target, Duration::from_secs(2)) else {
        return Err(client);
    };
    let setup = |s: &TcpStream| {
        s.set_nonblocking(false)?;
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(POLL))?;
        s.set_write_timeout(Some(POLL))
    };
    if setup(&client).is_err() || setup(&server).is_err() {
        let _ = server.shutdown(Shutdown::Both);
        return Err(client);
    }
    let clones = (|| {
        Ok::<_, std::io::Error>((
            client.try_clone()?,
            client.try_clone()?,
            server.try_clone()?,
            server.try_clone()?,
        ))
    })();
    let Ok((client_r, client_w, server_r, server_w)) = clones else {
        let _ = server.shutdown(Shutdown::Both);
        return Err(client);
    };
    let conn = Arc::new(Conn {
        client,
        server,
        closed: AtomicBool::new(false),
        stalled: AtomicBool::new(false),
        dropping: AtomicBool::new(false),
        finished: AtomicUsize::new(0),
        history: Mutex::new(Vec::new()),
        threads: Mutex::new(Vec::new()),
    });
    lock(&shared.conns).push(conn.clone());
    let (up_tx, up_rx) = mpsc::channel();
    let (down_tx, down_rx) = mpsc::channel();
    use Direction::*;
    spawn_pump(shared, &conn, "c2s-read", move |s, c| {
        read_loop(s, c, client_r, up_tx, ClientToServer)
    });
    spawn_pump(shared, &conn, "c2s-write", move |s, c| {
        write_loop(s, c, server_w, up_rx, ClientToServer)
    });
    spawn_pump(shared, &conn, "s2c-read", move |s, c| {
        read_loop(s, c, server_r, down_tx, ServerToClient)
    });
    spawn_pump(shared, &conn, "s2c-write", move |s, c| {
        write_loop(s, c, client_w, down_rx, ServerToClient)
    });
    Ok(())
}

/// Starts one of a connection's threads; closes the connection when the
/// thread cannot start (its other threads then exit).
fn spawn_pump(
    shared: &Arc<Shared>,
    conn: &Arc<Conn>,
    name: &str,
    pump: impl FnOnce(&Shared, &Conn) + Send + 'static,
) {
    let (shared, conn2) = (shared.clone(), conn.clone());
    let started = std::thread::Builder::new()
        .name(format!("proxy-{name}"))
        .stack_size(256 * 1024)
        .spawn(move || pump(&shared, &conn2));
    match started {
        Ok(thread) => lock(&conn.threads).push(thread),
        Err(_) => conn.close(),
    }
}

/// Reads chunks from `src` and queues them, timestamped, for the writer.
/// Does not read while the connection is stalled.
fn read_loop(
    shared: &Shared,
    conn: &Conn,
    mut src: TcpStream,
    queue: Sender<Item>,
    direction: Direction,
) {
    let mut buf = vec![0_u8; CHUNK];
    while !conn.is_closed() {
        if conn.is_stalled(shared) {
            std::thread::sleep(STALL_POLL);
            continue;
        }
        let item = match src.read(&mut buf) {
            Ok(0) => Item::Eof {
                deliver_at: Instant::now() + shared.delay(),
            },
            Ok(n) => {
                let deliver_at = Instant::now() + shared.delay();
                let bytes = buf[..n].to_vec();
                let mut drop_after = false;
                if direction == Direction::ClientToServer {
                    if conn.dropping.load(Ordering::SeqCst) {
                        continue; // the connection is being dropped: swallow
                    }
                    conn.record(shared, &bytes);
                    drop_after = shared.take_drop_trigger(&bytes);
                    if drop_after {
                        conn.dropping.store(true, Ordering::SeqCst);
                    }
                }
                Item::Data {
                    deliver_at,
                    bytes,
                    drop_after,
                }
            }
            Err(e) if is_retry(&e) => continue,
            Err(_) => Item::Reset,
        };
        let last = !matches!(item, Item::Data { .. });
        if queue.send(item).is_err() || last {
            return;
        }
    }
}

/// Delivers the reader's chunks to `dst`, each at its time, in order,
/// holding them while the connection is stalled.
fn write_loop(
    shared: &Shared,
    conn: &Conn,
    mut dst: TcpStream,
    queue: Receiver<Item>,
    direction: Direction,
) {
    loop {
        let item = match queue.recv_timeout(POLL) {
            Ok(item) => item,
            Err(RecvTimeoutError::Timeout) if !conn.is_closed() => continue,
            Err(_) => return,
        };
        let deliver_at = match &item {
            Item::Data { deliver_at, .. } | Item::Eof { deliver_at } => *deliver_at,
            Item::Reset => Instant::now(),
        };
        // Wait for the delivery time, then for the end of any stall.
        loop {
            if conn.is_closed() {
                return;
            }
            let now = Instant::now();
            if now < deliver_at {
                std::thread::sleep((deliver_at - now).min(POLL));
            } else if conn.is_stalled(shared) {
                std::thread::sleep(STALL_POLL);
            } else {
                break;
            }
        }
        let dropping = conn.dropping.load(Ordering::SeqCst);
        match item {
            // Nothing goes back to the client of a dropped request.
            Item::Data { .. } if dropping && direction == Direction::ServerToClient => {}
            Item::Data {
                bytes, drop_after, ..
            } => {
                if write_all(conn, &mut dst, &bytes).is_err() {
                    conn.close();
                    return;
                }
                if drop_after {
                    // Redis reads the request before the end-of-file, runs
                    // it, then hangs up: close once it did, or after a grace.
                    let _ = dst.shutdown(Shutdown::Write);
                    let start = Instant::now();
                    while !conn.is_closed() && start.elapsed() < DROP_GRACE {
                        std::thread::sleep(STALL_POLL);
                    }
                    conn.close();
                    return;
                }
            }
            Item::Eof { .. } => {
                let _ = dst.shutdown(Shutdown::Write);
                if dropping || conn.finished.fetch_add(1, Ordering::SeqCst) + 1 == 2 {
                    conn.close();
                }
                return;
            }
            Item::Reset => {
                conn.close();
                return;
            }
        }
    }
}

/// `write_all` that survives write timeouts and gives up once the
/// connection is closed.
fn write_all(conn: &Conn, dst: &mut TcpStream, mut bytes: &[u8]) -> std::io::Result<()> {
    while !bytes.is_empty() {
        if conn.is_closed() {
            return Err(ErrorKind::NotConnected.into());
        }
        match dst.write(bytes) {
            Ok(0) => return Err(ErrorKind::WriteZero.into()),
            Ok(n) => bytes = &bytes[n..],
            Err(e) if is_retry(&e) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn is_retry(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
    )
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    needle.is_empty() || haystack.windows(needle.len()).any(|w| w == needle)
}

/// Locks, ignoring poisoning (a panicking test thread must not wedge the proxy).
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}
