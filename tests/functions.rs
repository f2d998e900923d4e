//! Redis Functions: a server of Redis 7 or later is sent FCALL of the
//! library's functions, never EVALSHA, and gets the library again after
//! `FUNCTION FLUSH`; a server that refuses FCALL or `FUNCTION LOAD` (the
//! command renamed away, an ACL user without it) is sent EVALSHA, after one
//! refused call per connection, not one per call, and every kind of lock
//! works there as well. A Redis Cluster runs the functions that publish
//! with SPUBLISH (loaded on every master), or EVALSHA where FCALL is
//! refused; grants that go with `WAIT` reload the library and fall back
//! alike; releases run out of memory both ways.

use crate::support;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use lockattr::Locker;
use support::RedisServer;
use support::cluster::Cluster;
use support::deployments::{
    RW_RULES, acl_setuser, joined, readme_user, spawn_try_lock, try_read_lock, try_renewed,
    try_semaphore, try_set, try_write_lock, user_url,
};
use support::replicas::ReplicaPair;

/// What the Functions mode needs beyond the README's rules (as
/// `docs/deployments.md` gives them).
const FUNCTION_RULES: &[&str] = &["+fcall", "+function|load"];

/// Two Lockers of `url`, one to hold and one to wait.
fn lockers(url: &str) -> (Locker, Locker) {
    (Locker::new(url).unwrap(), Locker::new(url).unwrap())
}

/// Every kind, through `locker` (and `other`, of the same server, for the
/// hand-overs): a lock renewed past its lease, extended and handed to a
/// waiter on release, `inspect`, a read-write lock whose writer waits for
/// the reader, a semaphore's permits, and a set.
async fn every_kind((locker, other): &(Locker, Locker)) {
    let guard = try_renewed(locker, "fn:order", Duration::from_millis(600))
        .await
        .unwrap();
    let waiter = spawn_try_lock(other, "fn:order", Duration::from_secs(20));
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert!(!guard.is_lost(), "renewal failed");
    guard.extend(Duration::from_secs(5)).await.unwrap();
    let info = locker.inspect("fn:order").await.unwrap().expect("held");
    assert_eq!(info.fencing_token, guard.fencing_token());
    let released_at = Instant::now();
    guard.release().await.unwrap();
    let (handed, _) = joined(waiter, Duration::from_secs(5), "no hand-over").await;
    let handed = handed.unwrap();
    assert!(
        released_at.elapsed() < Duration::from_secs(2),
        "the waiter was not handed the lock at the release"
    );
    handed.release().await.unwrap();
    assert!(locker.inspect("fn:order").await.unwrap().is_none());

    let reader = try_read_lock(locker, "fn:catalog", Duration::ZERO)
        .await
        .unwrap();
    let writer = {
        let other = other.clone();
        tokio::spawn(
            async move { try_write_lock(&other, "fn:catalog", Duration::from_secs(20)).await },
        )
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    reader.release().await.unwrap();
    let writer = joined(writer, Duration::from_secs(5), "the writer waited on")
        .await
        .unwrap();
    writer.release().await.unwrap();

    let first = try_semaphore(locker, "fn:gpu", 2, Duration::ZERO)
        .await
        .unwrap();
    let second = try_semaphore(other, "fn:gpu", 2, Duration::ZERO)
        .await
        .unwrap();
    assert!(
        try_semaphore(locker, "fn:gpu", 2, Duration::ZERO)
            .await
            .is_err(),
        "a third permit of two"
    );
    first.release().await.unwrap();
    second.release().await.unwrap();

    let set = try_set(locker, &["fn:a", "fn:b"], Duration::ZERO)
        .await
        .unwrap();
    assert!(
        try_set(other, &["fn:b", "fn:c"], Duration::ZERO)
            .await
            .is_err(),
        "a set over a held name"
    );
    set.release().await.unwrap();
}

/// `(calls, failed calls)` of `command` since start, from `INFO
/// commandstats` (lower case), read on `con`.
fn stats(con: &mut redis::Connection, command: &str) -> (u64, u64) {
    let info: String = redis::cmd("INFO").arg("commandstats").query(con).unwrap();
    let line = info
        .lines()
        .find_map(|line| line.strip_prefix(&format!("cmdstat_{command}:")));
    let field = |key: &str| {
        line.and_then(|line| {
            line.split(',')
                .find_map(|kv| kv.strip_prefix(key))
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or(0)
    };
    (field("calls="), field("failed_calls="))
}

/// The errors the server answered since start, by code, from `INFO
/// errorstats` (`{"ERR": 2, "NOPERM": 1}`), read on `con` (a new
/// connection adds errors of its own: redis-rs names itself with `CLIENT
/// SETINFO`, which Redis 7.0 does not know).
fn errors(con: &mut redis::Connection) -> HashMap<String, u64> {
    let info: String = redis::cmd("INFO").arg("errorstats").query(con).unwrap();
    info.lines()
        .filter_map(|line| {
            let (code, count) = line.strip_prefix("errorstat_")?.split_once(":count=")?;
            Some((code.to_owned(), count.trim().parse().ok()?))
        })
        .collect()
}

/// The names of the libraries loaded on `server` (`FUNCTION LIST`).
fn libraries(server: &RedisServer) -> Vec<String> {
    let list: Vec<HashMap<String, redis::Value>> = redis::cmd("FUNCTION")
        .arg("LIST")
        .query(&mut server.client())
        .unwrap();
    list.iter()
        .filter_map(|library| match library.get("library_name") {
            Some(redis::Value::BulkString(name)) => String::from_utf8(name.clone()).ok(),
            Some(redis::Value::SimpleString(name)) => Some(name.clone()),
            _ => None,
        })
        .collect()
}

/// Asserts that `server` ran the scripts as functions: FCALLs, no EVALSHA,
/// and the library loaded.
fn ran_functions(server: &RedisServer) {
    let con = &mut server.client();
    let (fcalls, _) = stats(con, "fcall");
    assert!(fcalls > 0, "no FCALL");
    assert_eq!(stats(con, "evalsha"), (0, 0), "EVALSHA was sent");
    let loaded = libraries(server);
    assert!(
        loaded.len() == 1 && loaded[0].starts_with("lockattr_v"),
        "libraries: {loaded:?}"
    );
}

/// Runs [`every_kind`] on `server` through `url` twice with the same
/// Lockers, and asserts that the scripts went with EVALSHA, and that the
/// server's refusals (errors of `code`: the refused FCALLs or `FUNCTION
/// LOAD`s) came with the first round's new connections, none with the
/// second round's calls on the same connections.
async fn runs_on_evalsha(server: &RedisServer, url: &str, code: &str) {
    let con = &mut server.client();
    let lockers = lockers(url);
    every_kind(&lockers).await;
    let first = errors(con);
    assert!(first.contains_key(code), "nothing refused: {first:?}");
    let (evalshas, _) = stats(con, "evalsha");
    every_kind(&lockers).await;
    let (more, _) = stats(con, "evalsha");
    assert!(more - evalshas > 20, "{} EVALSHAs", more - evalshas);
    assert_eq!(
        errors(con).get(code),
        first.get(code),
        "a refusal for each call"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_7_server_runs_every_script_as_a_function() {
    let server = RedisServer::start();
    every_kind(&lockers(&server.url())).await;
    ran_functions(&server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_function_flush_the_library_is_loaded_again() {
    let server = RedisServer::start();
    let locker = Locker::new(server.url()).unwrap();
    let guard = locker.lock("fn:flushed").acquire().await.unwrap();
    let () = redis::cmd("FUNCTION")
        .arg("FLUSH")
        .query(&mut server.client())
        .unwrap();
    assert!(libraries(&server).is_empty());
    // The release finds no function: the library is loaded, the release
    // sent again, and it runs once.
    guard.release().await.unwrap();
    assert!(locker.inspect("fn:flushed").await.unwrap().is_none());
    let guard = locker.lock("fn:flushed").acquire().await.unwrap();
    guard.release().await.unwrap();
    ran_functions(&server);
    let (_, failed) = stats(&mut server.client(), "fcall");
    assert_eq!(failed, 2, "one missing function before each load");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_with_fcall_renamed_away_is_sent_evalsha() {
    let server = RedisServer::start_with(&["--rename-command", "FCALL", ""]);
    runs_on_evalsha(&server, &server.url(), "ERR").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_with_function_renamed_away_is_sent_evalsha() {
    let server = RedisServer::start_with(&["--rename-command", "FUNCTION", ""]);
    // Each refusal is a missing function, then an unknown FUNCTION.
    runs_on_evalsha(&server, &server.url(), "ERR").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_without_fcall_is_sent_evalsha() {
    let server = RedisServer::start();
    readme_user(&server, "app", "app-pw");
    acl_setuser(&server, "app", RW_RULES);
    runs_on_evalsha(&server, &user_url(&server, "app", "app-pw"), "NOPERM").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_with_the_functions_rules_runs_functions() {
    let server = RedisServer::start();
    readme_user(&server, "app", "app-pw");
    acl_setuser(&server, "app", RW_RULES);
    acl_setuser(&server, "app", FUNCTION_RULES);
    every_kind(&lockers(&user_url(&server, "app", "app-pw"))).await;
    ran_functions(&server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_with_fcall_but_not_function_load_is_sent_evalsha() {
    let server = RedisServer::start();
    readme_user(&server, "app", "app-pw");
    acl_setuser(&server, "app", RW_RULES);
    acl_setuser(&server, "app", &["+fcall"]);
    runs_on_evalsha(&server, &user_url(&server, "app", "app-pw"), "NOPERM").await;
}

/// A Locker of `url` whose grants wait for one replica: each grant goes in
/// one pipeline with `WAIT`.
fn replicated(url: &str) -> Locker {
    Locker::builder(url)
        .min_replicas(1)
        .replica_timeout(Duration::from_secs(2))
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grants_that_wait_for_replicas_reload_the_library() {
    let pair = ReplicaPair::start();
    let locker = replicated(&pair.master.url());
    let guard = locker.lock("fn:replicated").acquire().await.unwrap();
    guard.release().await.unwrap();
    let () = redis::cmd("FUNCTION")
        .arg("FLUSH")
        .query(&mut pair.master.client())
        .unwrap();
    let guard = locker.lock("fn:replicated").acquire().await.unwrap();
    guard.release().await.unwrap();
    ran_functions(&pair.master);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grants_that_wait_for_replicas_fall_back_to_evalsha() {
    let pair = ReplicaPair::start();
    acl_setuser(
        &pair.master,
        "app",
        &["on", ">app-pw", "~*", "&*", "+@all", "-fcall"],
    );
    let locker = replicated(&user_url(&pair.master, "app", "app-pw"));
    for _ in 0..3 {
        let guard = locker.lock("fn:replicated").acquire().await.unwrap();
        guard.extend(Duration::from_secs(5)).await.unwrap();
        guard.release().await.unwrap();
    }
    let con = &mut pair.master.client();
    let (evalshas, _) = stats(con, "evalsha");
    assert!(evalshas >= 9, "{evalshas} EVALSHAs");
    let refused = errors(con).get("NOPERM").copied().unwrap_or(0);
    assert!((1..=4).contains(&refused), "{refused} refusals");
}

/// Holds a lock on `server`, makes Redis reach `maxmemory` (a limit below
/// what it uses, nothing to evict), and asserts that a new acquisition is
/// refused but the lock is still released.
async fn released_out_of_memory(server: &RedisServer) {
    let locker = Locker::new(server.url()).unwrap();
    let guard = locker.lock("fn:oom").acquire().await.unwrap();
    let con = &mut server.client();
    let () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg("1")
        .query(con)
        .unwrap();
    let refused = locker
        .lock("fn:other")
        .acquire_timeout(Duration::ZERO)
        .acquire()
        .await;
    assert!(refused.is_err(), "acquired out of memory");
    guard.release().await.unwrap();
    let () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg("0")
        .query(con)
        .unwrap();
    assert!(locker.inspect("fn:oom").await.unwrap().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_is_released_when_redis_is_out_of_memory() {
    let server = RedisServer::start();
    released_out_of_memory(&server).await;
    ran_functions(&server);
    let server = RedisServer::start_with(&["--rename-command", "FCALL", ""]);
    released_out_of_memory(&server).await;
}

/// Locks on names spread over a cluster's masters, each taken by one
/// Locker while another waits for it, and handed over on release.
async fn hand_overs(cluster: &Cluster) {
    let (locker, other) = (cluster.locker(), cluster.locker());
    for i in 0..6 {
        let name = format!("fn:cluster:{i}");
        let guard = locker.lock(&name).acquire().await.unwrap();
        let waiter = spawn_try_lock(&other, &name, Duration::from_secs(20));
        tokio::time::sleep(Duration::from_millis(50)).await;
        guard.release().await.unwrap();
        let (handed, _) = joined(waiter, Duration::from_secs(5), "no hand-over").await;
        handed.unwrap().release().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_runs_the_sharded_functions() {
    let cluster = Cluster::start();
    hand_overs(&cluster).await;
    assert!(
        cluster.calls("fcall") >= 24,
        "{} FCALLs",
        cluster.calls("fcall")
    );
    assert_eq!(cluster.calls("evalsha"), 0);
    assert!(cluster.calls("spublish") >= 6, "the hand-overs' notices");
    assert_eq!(cluster.calls("publish"), 0, "a PUBLISH was sent");
    for node in &cluster.nodes {
        assert_eq!(libraries(node).len(), 1, "the library on every master");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_without_fcall_is_sent_evalsha() {
    let cluster = Cluster::start_with(&["--rename-command", "FCALL", ""]);
    hand_overs(&cluster).await;
    assert!(
        cluster.calls("evalsha") >= 24,
        "{} EVALSHAs",
        cluster.calls("evalsha")
    );
    assert!(cluster.calls("spublish") >= 6, "the hand-overs' notices");
}
