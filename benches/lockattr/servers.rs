//! Private redis-server processes: one server, the Redlock nodes, a
//! Redis Cluster, and a master with one replica. Never on port 6379; each is killed and its directory
//! removed on every way out: when dropped (a return, an error, a panic
//! unwinding), and on SIGINT, SIGTERM or SIGHUP through
//! [`clean_up_on_signals`].

use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::Res;

/// Nodes of the Redlock rows.
pub const REDLOCK_NODES: usize = 5;
/// Masters of the Cluster rows.
pub const CLUSTER_MASTERS: usize = 3;

/// Processes to kill (and directories to remove) when a signal ends the run.
static LIVE: Mutex<Vec<(u32, Option<PathBuf>)>> = Mutex::new(Vec::new());

/// Records a process (and its directory) for [`clean_up_on_signals`].
pub fn track(pid: u32, dir: Option<PathBuf>) {
    LIVE.lock()
        .unwrap_or_else(|e| e.into_inner())
        .push((pid, dir));
}

/// Forgets a process that was stopped the ordinary way.
pub fn untrack(pid: u32) {
    LIVE.lock()
        .unwrap_or_else(|e| e.into_inner())
        .retain(|(p, _)| *p != pid);
}

/// On SIGINT, SIGTERM or SIGHUP: kills every tracked process, removes the
/// directories and exits with status 130. Runs on a thread of its own, so
/// it works while the benchmark's runtime is busy.
pub fn clean_up_on_signals() {
    std::thread::spawn(|| {
        let Ok(rt) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        else {
            return;
        };
        rt.block_on(async {
            use tokio::signal::unix::{SignalKind, signal};
            let (Ok(mut int), Ok(mut term), Ok(mut hup)) = (
                signal(SignalKind::interrupt()),
                signal(SignalKind::terminate()),
                signal(SignalKind::hangup()),
            ) else {
                return;
            };
            tokio::select! {
                _ = int.recv() => {}
                _ = term.recv() => {}
                _ = hup.recv() => {}
            }
            let live = std::mem::take(&mut *LIVE.lock().unwrap_or_else(|e| e.into_inner()));
            for (pid, _) in &live {
                let _ = Command::new("kill")
                    .args(["-KILL", &pid.to_string()])
                    .stderr(Stdio::null())
                    .status();
            }
            for dir in live.iter().filter_map(|(_, d)| d.as_ref()) {
                let _ = std::fs::remove_dir_all(dir);
            }
            eprintln!("lockattr bench: interrupted; stopped its redis-servers and child processes");
            std::process::exit(130);
        });
    });
}

/// Every server of one run.
pub struct Servers {
    /// The server of rows 1-7 (and where the processes signal each other).
    pub single: RedisServer,
    /// The Redlock nodes.
    pub redlock: Vec<RedisServer>,
    /// The Cluster's masters, no replicas.
    pub cluster: Vec<RedisServer>,
    /// Row 13's master and its replica.
    pub replicated: Replicated,
}

impl Servers {
    /// Starts them all; whatever started is stopped again on an error.
    pub fn start() -> Res<Servers> {
        let single = RedisServer::start(&[])?;
        let redlock = (0..REDLOCK_NODES)
            .map(|_| RedisServer::start(&[]))
            .collect::<Res<Vec<_>>>()?;
        let cluster = start_cluster()?;
        let replicated = Replicated::start()?;
        Ok(Servers {
            single,
            redlock,
            cluster,
            replicated,
        })
    }

    /// The Redlock nodes' URLs.
    pub fn redlock_urls(&self) -> Vec<String> {
        self.redlock.iter().map(|s| s.url.clone()).collect()
    }

    /// The Cluster's seed URLs.
    pub fn cluster_urls(&self) -> Vec<String> {
        self.cluster.iter().map(|s| s.url.clone()).collect()
    }
}

/// A private redis-server; killed and its directory removed when dropped
/// (also while unwinding from a panic).
pub struct RedisServer {
    child: Child,
    dir: PathBuf,
    /// Its port on 127.0.0.1.
    pub port: u16,
    /// `redis://127.0.0.1:PORT/`.
    pub url: String,
    /// `redis_version` of `INFO server`.
    pub version: String,
}

/// A free loopback port other than 6379.
fn free_port() -> Res<u16> {
    loop {
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        if port != 6379 {
            return Ok(port);
        }
    }
}

impl RedisServer {
    /// Starts redis-server on a free port with `extra` arguments; tries
    /// another port when the one picked was taken in the meantime.
    pub fn start(extra: &[&str]) -> Res<RedisServer> {
        let mut last_error = String::new();
        for _ in 0..5 {
            match RedisServer::try_start(extra)? {
                Ok(server) => return Ok(server),
                Err(e) => last_error = e,
            }
        }
        Err(format!("could not start a private redis-server: {last_error}").into())
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `Ok(Err(..))`: this port did not work out, try another.
    fn try_start(extra: &[&str]) -> Res<Result<RedisServer, String>> {
        let port = free_port()?;
        let dir = std::env::temp_dir().join(format!(
            "lockattr-bench-redis-{}-{port}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&dir)
            .args(extra)
            .stdout(Stdio::null())
            .spawn()
            .map_err(|e| {
                let _ = std::fs::remove_dir_all(&dir);
                format!("could not start `redis-server` ({e}); install it (apt-get install redis-server)")
            })?;
        track(child.id(), Some(dir.clone()));
        // From here on, Drop kills the server and removes the directory.
        let mut server = RedisServer {
            child,
            dir,
            port,
            url: format!("redis://127.0.0.1:{port}/"),
            version: String::new(),
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = server.child.try_wait()? {
                return Ok(Err(format!("redis-server exited at start-up ({status})")));
            }
            if let Ok(info) = query(port, &["INFO", "server"]) {
                // Someone else's server may have taken the port first.
                let pid = info_field(&info, "process_id");
                if pid != Some(server.child.id().to_string()) {
                    return Ok(Err(format!("port {port} is served by another process")));
                }
                server.version =
                    info_field(&info, "redis_version").unwrap_or_else(|| "unknown".into());
                return Ok(Ok(server));
            }
            if Instant::now() > deadline {
                return Err("redis-server did not answer within 10 s".into());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
        untrack(self.child.id());
    }
}

/// Three masters with cluster mode on, joined by `redis-cli --cluster
/// create`; returns when every node reports `cluster_state:ok`.
fn start_cluster() -> Res<Vec<RedisServer>> {
    let nodes = (0..CLUSTER_MASTERS)
        .map(|_| {
            // The cluster bus port: another free one (by default it would
            // be the port + 10000, which may be taken).
            let bus = free_port()?.to_string();
            RedisServer::start(&[
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-port",
                &bus,
            ])
        })
        .collect::<Res<Vec<_>>>()?;
    let out = Command::new("redis-cli")
        .args(["--cluster", "create"])
        .args(nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)))
        .args(["--cluster-replicas", "0", "--cluster-yes"])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run redis-cli ({e}); install redis-tools"))?;
    if !out.status.success() {
        return Err(format!(
            "redis-cli --cluster create failed: {}",
            String::from_utf8_lossy(&out.stdout)
        )
        .into());
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    for node in &nodes {
        while !query(node.port, &["CLUSTER", "INFO"])?.contains("cluster_state:ok") {
            if Instant::now() > deadline {
                return Err("the cluster did not become ok within 20 s".into());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    Ok(nodes)
}

/// Row 13's servers: a master and one replica of it, in sync before the
/// run starts. Each is an ordinary [`RedisServer`], stopped and its
/// directory removed on every way out.
pub struct Replicated {
    /// The master the locks are taken on.
    pub master: RedisServer,
    /// Its replica (`--replicaof` the master).
    pub replica: RedisServer,
}

impl Replicated {
    /// Starts the master (diskless full sync without delay, so the replica
    /// syncs at once), then the replica; returns when the replica reports
    /// `master_link_status:up` and the master counts it as connected.
    fn start() -> Res<Replicated> {
        let sync = [
            "--repl-diskless-sync",
            "yes",
            "--repl-diskless-sync-delay",
            "0",
        ];
        let master = RedisServer::start(&sync)?;
        let port = master.port.to_string();
        let mut args = vec!["--replicaof", "127.0.0.1", &port];
        args.extend(sync);
        let replica = RedisServer::start(&args)?;
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let replica_info = query(replica.port, &["INFO", "replication"])?;
            let master_info = query(master.port, &["INFO", "replication"])?;
            let link_up = info_field(&replica_info, "master_link_status").as_deref() == Some("up");
            let connected = info_field(&master_info, "connected_slaves").as_deref() == Some("1");
            if link_up && connected {
                return Ok(Replicated { master, replica });
            }
            if Instant::now() > deadline {
                return Err("the replica did not report master_link_status:up within 20 s".into());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Sends one command to the Redis on `port` over a plain socket and returns
/// its bulk-string reply (`INFO`, `CLUSTER INFO`).
pub fn query(port: u16, args: &[&str]) -> std::io::Result<String> {
    use std::io::{Read, Write};
    let mut socket = TcpStream::connect(("127.0.0.1", port))?;
    socket.set_read_timeout(Some(Duration::from_secs(2)))?;
    let mut request = format!("*{}\r\n", args.len());
    for a in args {
        request.push_str(&format!("${}\r\n{a}\r\n", a.len()));
    }
    socket.write_all(request.as_bytes())?;
    let mut reply = Vec::new();
    let mut buf = [0u8; 4096];
    // A bulk string: `$<len>\r\n<len bytes>\r\n`.
    loop {
        let n = socket.read(&mut buf)?;
        if n == 0 {
            break;
        }
        reply.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&reply);
        if let Some((len, _)) = text.strip_prefix('$').and_then(|t| t.split_once("\r\n")) {
            let header = len.len() + 3;
            if len
                .parse::<usize>()
                .is_ok_and(|len| reply.len() >= header + len)
            {
                break;
            }
        } else if !text.starts_with('$') && text.contains("\r\n") {
            break; // an error reply, such as -LOADING
        }
    }
    let text = String::from_utf8_lossy(&reply).into_owned();
    if text.starts_with('$') {
        Ok(text)
    } else {
        Err(std::io::Error::other(text))
    }
}

/// `calls` of `cmdstat_wait` in the master's `INFO commandstats` (0 before
/// the first WAIT).
pub fn wait_calls(port: u16) -> Res<u64> {
    let stats = query(port, &["INFO", "commandstats"])?;
    Ok(info_field(&stats, "cmdstat_wait")
        .and_then(|v| {
            v.split(',')
                .find_map(|kv| kv.strip_prefix("calls="))
                .and_then(|c| c.parse().ok())
        })
        .unwrap_or(0))
}

/// `name:value` from an INFO reply.
pub fn info_field(info: &str, name: &str) -> Option<String> {
    info.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .map(|v| v.trim().to_owned())
}
