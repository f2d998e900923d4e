//! Benchmark: one server, Redlock on five servers, and a three-master Redis
//! Cluster, measured in the same run on private loopback servers.
//!
//! Run with `cargo bench --bench deployments` (about half a minute), or
//! `-- --quick` for a smoke run. For each deployment it prints the median
//! uncontended acquire+release and the median handoff (a holder releases; a
//! waiter on another Locker, already waiting, returns from acquire), both
//! also in multiples of the round trip (RTT: the median raw PING to the
//! single server, sampled in the same loop). Target: Redlock uncontended at
//! most 1.5 times the single server's RTT multiple, thanks to the
//! concurrent fan-out.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use lockattr::Locker;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// A private redis-server; killed and its directory removed when dropped.
struct Server {
    port: u16,
    child: Child,
    dir: std::path::PathBuf,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn free_port() -> Res<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

fn start(extra: &[&str]) -> Res<Server> {
    let port = free_port()?;
    let dir = std::env::temp_dir().join(format!("lockattr-deploy-{}-{port}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let child = Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no"])
        .args(["--dir", dir.to_str().ok_or("temp dir")?])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start redis-server ({e}); install it"))?;
    let server = Server { port, child, dir };
    let client = redis::Client::open(server.url())?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while client.get_connection().is_err() {
        if Instant::now() > deadline {
            return Err(format!("redis-server on {port} did not start").into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(server)
}

impl Server {
    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }
}

fn cluster() -> Res<Vec<Server>> {
    let nodes = (0..3)
        .map(|_| {
            let bus = free_port()?.to_string();
            start(&[
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
        .output()
        .map_err(|e| format!("cannot run redis-cli ({e}); install redis-tools"))?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stdout).into_owned().into());
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    for node in &nodes {
        let mut con = redis::Client::open(node.url())?.get_connection()?;
        loop {
            let info: String = redis::cmd("CLUSTER").arg("INFO").query(&mut con)?;
            if info.contains("cluster_state:ok") {
                break;
            }
            if Instant::now() > deadline {
                return Err("the cluster did not become ok".into());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    Ok(nodes)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Median acquire+release and median raw PING, interleaved.
async fn uncontended(
    locker: &Locker,
    ping: &mut redis::aio::MultiplexedConnection,
    rounds: usize,
) -> Res<(f64, f64)> {
    let (mut lock, mut rtt) = (Vec::new(), Vec::new());
    for i in 0..rounds + rounds / 10 {
        let t = Instant::now();
        let _: String = redis::cmd("PING").query_async(ping).await?;
        let p = t.elapsed().as_secs_f64();
        let t = Instant::now();
        let guard = locker.lock("bench").acquire().await?;
        guard.release().await?;
        let l = t.elapsed().as_secs_f64();
        if i >= rounds / 10 {
            rtt.push(p);
            lock.push(l);
        }
    }
    Ok((median(lock), median(rtt)))
}

/// Median time from the start of a release to the waiter's return.
async fn handoff(holder: &Locker, waiter: &Locker, rounds: usize) -> Res<f64> {
    let mut samples = Vec::new();
    for _ in 0..rounds {
        let guard = holder
            .lock("handoff")
            .expire(Duration::from_secs(30))
            .acquire()
            .await?;
        let waiter = waiter.clone();
        let task = tokio::spawn(async move {
            let g = waiter
                .lock("handoff")
                .acquire_timeout(Duration::from_secs(20))
                .acquire()
                .await;
            let at = Instant::now();
            if let Ok(g) = g {
                let _ = g.release().await;
            }
            at
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        let released = Instant::now();
        guard.release().await?;
        let got = task.await?;
        samples.push(got.duration_since(released).as_secs_f64());
    }
    Ok(median(samples))
}

fn main() -> Res<()> {
    let quick = std::env::args().any(|a| a == "--quick");
    let (rounds, handoffs) = if quick { (200, 10) } else { (3000, 200) };
    let single = start(&[])?;
    let five = (0..5).map(|_| start(&[])).collect::<Res<Vec<_>>>()?;
    let masters = cluster()?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let mut ping = redis::Client::open(single.url())?
            .get_multiplexed_async_connection()
            .await?;
        let urls: Vec<String> = five.iter().map(Server::url).collect();
        // The bench's servers have just started: by default a node up for
        // less than a lease does not vote, which would stall the first 10 s.
        let redlock = || {
            Locker::redlock_builder(&urls)
                .delay_restarted_nodes(false)
                .build()
        };
        let seeds: Vec<String> = masters.iter().map(Server::url).collect();
        let shapes: Vec<(&str, Locker, Locker)> = vec![
            (
                "one server",
                Locker::new(single.url())?,
                Locker::new(single.url())?,
            ),
            ("Redlock, 5 servers", redlock()?, redlock()?),
            (
                "Cluster, 3 masters",
                Locker::cluster(&seeds)?,
                Locker::cluster(&seeds)?,
            ),
        ];
        println!(
            "{:<20} {:>14} {:>10} {:>14} {:>10}",
            "deployment", "acq+rel (µs)", "RTT x", "handoff (µs)", "RTT x"
        );
        let mut single_x = None;
        for (name, a, b) in &shapes {
            let (lock, rtt) = uncontended(a, &mut ping, rounds).await?;
            let hand = handoff(a, b, handoffs).await?;
            let x = lock / rtt;
            single_x.get_or_insert(x);
            println!(
                "{name:<20} {:>14.1} {:>10.2} {:>14.1} {:>10.2}   (RTT {:.1} µs)",
                lock * 1e6,
                x,
                hand * 1e6,
                hand / rtt,
                rtt * 1e6
            );
            if *name == "Redlock, 5 servers"
                && let Some(base) = single_x
            {
                let ratio = x / base;
                let verdict = if ratio <= 1.5 { "met" } else { "missed" };
                println!(
                    "{:<20} Redlock / one server = {ratio:.2} (target <= 1.5: {verdict})",
                    ""
                );
            }
        }
        Ok::<_, Box<dyn std::error::Error>>(())
    })
}
