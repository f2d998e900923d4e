//! The `lockattr` binary as a process, against a redis-server of the test's
//! own (a free loopback port, killed afterwards), with locks taken through
//! `lockattr-runtime`.

mod support;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use lockattr_runtime::{LockError, LockGuard, Locker};
use serde_json::Value;

use support::{RedisServer, eventually, free_port, wait_child};

/// How long one run of the binary may take.
const RUN_LIMIT: Duration = Duration::from_secs(30);

/// A finished run of the binary.
#[derive(Debug)]
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    /// stdout as JSON.
    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {self:?}"))
    }
}

/// The binary with `args`, no `REDIS_URL`, stdin not a terminal.
fn command(args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_lockattr"));
    command
        .args(args)
        .env_remove("REDIS_URL")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

/// Runs `command` to its end.
fn run_command(mut command: Command) -> Run {
    let output = wait_child(command.spawn().expect("start lockattr"), RUN_LIMIT);
    Run {
        code: output.status.code().expect("exit code (not a signal)"),
        stdout: String::from_utf8(output.stdout).expect("UTF-8 stdout"),
        stderr: String::from_utf8(output.stderr).expect("UTF-8 stderr"),
    }
}

/// `lockattr --url <server> args...`.
fn lockattr(server: &RedisServer, args: &[&str]) -> Run {
    let url = server.url();
    let mut all = vec!["--url", url.as_str()];
    all.extend_from_slice(args);
    run_command(command(&all))
}

/// A Locker on `server` whose holders are labelled `label`.
fn locker(server: &RedisServer, label: &str) -> Locker {
    Locker::builder(server.url())
        .label(label)
        .build()
        .expect("locker")
}

/// Takes `name` for 30 s.
fn take(locker: &Locker, name: &str) -> LockGuard {
    locker
        .lock(name)
        .expire(Duration::from_secs(30))
        .acquire_timeout(Duration::ZERO)
        .acquire_blocking()
        .unwrap_or_else(|e| panic!("take {name}: {e}"))
}

/// A thread queued for `name` (for up to 20 s); its result comes on the channel.
fn queue_waiter(locker: &Locker, name: &str) -> mpsc::Receiver<Result<LockGuard, LockError>> {
    let (send, receive) = mpsc::channel();
    let (locker, name) = (locker.clone(), name.to_owned());
    std::thread::spawn(move || {
        let result = locker
            .lock(&name)
            .expire(Duration::from_secs(30))
            .acquire_timeout(Duration::from_secs(20))
            .acquire_blocking();
        let _ = send.send(result);
    });
    receive
}

/// `show NAME --json` until its `waiters` is `n` (within 10 s).
fn wait_for_waiters(server: &RedisServer, name: &str, n: u64) {
    assert!(
        eventually(Duration::from_secs(10), || {
            lockattr(server, &["show", name, "--json"]).json()["waiters"] == n
        })
        .is_some(),
        "{name} never had {n} waiter(s): {:?}",
        lockattr(server, &["show", name, "--json"])
    );
}

fn epoch_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).unwrap().as_millis() as u64
}

#[test]
fn show_of_a_free_lock_exits_1_with_held_false() {
    let server = RedisServer::start();
    let run = lockattr(&server, &["show", "nobody:holds:this", "--json"]);
    assert_eq!(run.code, 1, "{run:?}");
    assert_eq!(
        run.json(),
        serde_json::json!({
            "name": "nobody:holds:this", "kind": "lock", "held": false, "ttl_ms": null,
            "fencing_token": null, "waiters": 0, "holder": null
        })
    );
    assert_eq!(run.stderr, "");

    let run = lockattr(&server, &["show", "nobody:holds:this"]);
    assert_eq!(run.code, 1, "{run:?}");
    assert!(run.stdout.contains("held:    no"), "{run:?}");
}

#[test]
fn show_of_a_held_lock_reports_holder_lease_and_fencing_token() {
    let server = RedisServer::start();
    let locker = locker(&server, "cli-test-holder");
    let before = epoch_ms(SystemTime::now());
    let guard = take(&locker, "order:7");
    let after = epoch_ms(SystemTime::now());

    let run = lockattr(&server, &["show", "order:7", "--json"]);
    assert_eq!(run.code, 0, "{run:?}");
    let value = run.json();
    let object = value.as_object().expect("an object");
    let mut fields: Vec<&str> = object.keys().map(String::as_str).collect();
    fields.sort();
    assert_eq!(
        fields,
        [
            "fencing_token",
            "held",
            "holder",
            "kind",
            "name",
            "ttl_ms",
            "waiters"
        ]
    );
    assert_eq!(value["name"], "order:7");
    assert_eq!(value["held"], true);
    assert_eq!(value["fencing_token"].as_u64(), Some(guard.fencing_token()));
    assert_eq!(value["waiters"], 0);
    let ttl = value["ttl_ms"].as_u64().expect("ttl_ms");
    assert!(
        ttl > 0 && ttl <= 30_000,
        "ttl_ms {ttl} outside the 30 s lease"
    );

    let holder = value["holder"].as_object().expect("holder object");
    let mut fields: Vec<&str> = holder.keys().map(String::as_str).collect();
    fields.sort();
    assert_eq!(fields, ["host", "label", "pid", "since_ms"]);
    assert_eq!(holder["label"], "cli-test-holder");
    assert_eq!(holder["pid"].as_u64(), Some(u64::from(std::process::id())));
    assert!(!holder["host"].as_str().expect("host").is_empty());
    // Redis runs on this machine: its clock is ours (1 s of slack for
    // rounding between the two).
    let since = holder["since_ms"].as_u64().expect("since_ms");
    assert!(
        since + 1000 >= before && since <= after + 1000,
        "since_ms {since} not within [{before}, {after}]"
    );

    let run = lockattr(&server, &["show", "order:7"]);
    assert_eq!(run.code, 0, "{run:?}");
    let holder = format!(
        "cli-test-holder@{}:{}",
        holder["host"].as_str().unwrap(),
        std::process::id()
    );
    for line in [
        "name:          order:7".to_owned(),
        "held:          yes".to_owned(),
        format!("holder:        {holder}"),
        format!("fencing token: {}", guard.fencing_token()),
        "waiters:       0".to_owned(),
    ] {
        assert!(
            run.stdout.lines().any(|l| l == line),
            "no line `{line}` in:\n{}",
            run.stdout
        );
    }
    guard.release_blocking().unwrap();
}

#[test]
fn show_counts_a_queued_waiter() {
    let server = RedisServer::start();
    let locker = locker(&server, "cli-test");
    let guard = take(&locker, "job");
    let waiter = queue_waiter(&locker, "job");
    wait_for_waiters(&server, "job", 1);
    let run = lockattr(&server, &["show", "job", "--json"]);
    assert_eq!(run.code, 0);
    assert_eq!(run.json()["waiters"], 1);
    assert_eq!(
        run.json()["fencing_token"].as_u64(),
        Some(guard.fencing_token())
    );

    // The waiter gets it on release; nobody waits any more.
    guard.release_blocking().unwrap();
    let next = waiter
        .recv_timeout(Duration::from_secs(10))
        .expect("the waiter returned")
        .expect("the waiter got the lock");
    let run = lockattr(&server, &["show", "job", "--json"]);
    assert_eq!(run.json()["waiters"], 0);
    assert_eq!(
        run.json()["fencing_token"].as_u64(),
        Some(next.fencing_token())
    );
}

#[test]
fn ls_lists_held_locks_matching_the_pattern() {
    let server = RedisServer::start();
    let locker = locker(&server, "lister");
    let _guards: Vec<LockGuard> = ["order:1", "order:2", "user:1"]
        .iter()
        .map(|name| take(&locker, name))
        .collect();

    let run = lockattr(&server, &["ls", "order:*", "--json"]);
    assert_eq!(run.code, 0, "{run:?}");
    let items = run.json();
    let items = items.as_array().expect("a JSON array");
    let names: Vec<&str> = items.iter().map(|i| i["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["order:1", "order:2"]);
    for item in items {
        assert_eq!(item["held"], true);
        assert_eq!(item["holder"]["label"], "lister");
        assert!(item["fencing_token"].as_u64().is_some());
        assert!(
            item["ttl_ms"]
                .as_u64()
                .is_some_and(|t| t > 0 && t <= 30_000)
        );
    }

    // The table: the header, then one row per lock.
    let run = lockattr(&server, &["ls"]);
    assert_eq!(run.code, 0, "{run:?}");
    let mut lines = run.stdout.lines();
    let header: Vec<&str> = lines.next().expect("a header").split_whitespace().collect();
    assert_eq!(
        header,
        ["NAME", "KIND", "HOLDER", "SINCE", "TTL", "WAITERS", "FENCE"]
    );
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split_whitespace().collect()).collect();
    let names: Vec<&str> = rows.iter().map(|r| r[0]).collect();
    assert_eq!(names, ["order:1", "order:2", "user:1"]);
    for row in &rows {
        assert_eq!(row.len(), 7, "{row:?}");
        assert_eq!(row[1], "lock", "{row:?}");
        assert!(row[2].starts_with("lister@"), "{row:?}");
        assert!(
            row[2].ends_with(&format!(":{}", std::process::id())),
            "{row:?}"
        );
        assert_eq!(row[5], "0");
    }

    // Nothing matches: an empty array, exit 0.
    let run = lockattr(&server, &["ls", "invoice:*", "--json"]);
    assert_eq!((run.code, run.json()), (0, serde_json::json!([])));

    // --limit: at most N, and a note on stderr.
    let run = lockattr(&server, &["ls", "--limit", "1", "--json"]);
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(run.json().as_array().unwrap().len(), 1);
    assert!(run.stderr.contains("--limit"), "{run:?}");
}

#[test]
fn prefix_selects_the_lockers_keys() {
    let server = RedisServer::start();
    let app = Locker::builder(server.url())
        .prefix("app:locks:")
        .build()
        .unwrap();
    let _guard = take(&app, "report");

    let run = lockattr(&server, &["ls", "--json"]);
    assert_eq!(run.json(), serde_json::json!([]));
    let run = lockattr(&server, &["show", "report", "--json"]);
    assert_eq!(run.code, 1);

    let run = lockattr(&server, &["--prefix", "app:locks:", "ls", "--json"]);
    assert_eq!(run.json()[0]["name"], "report");
    let run = lockattr(
        &server,
        &["show", "report", "--prefix", "app:locks:", "--json"],
    );
    assert_eq!((run.code, &run.json()["held"]), (0, &Value::Bool(true)));
}

#[test]
fn unlock_force_frees_a_held_lock_and_the_waiter_gets_it() {
    let server = RedisServer::start();
    let holder = locker(&server, "stuck-holder");
    let guard = take(&holder, "batch");
    let waiting = locker(&server, "next-holder");
    let waiter = queue_waiter(&waiting, "batch");
    wait_for_waiters(&server, "batch", 1);

    let run = lockattr(&server, &["unlock", "batch", "--force"]);
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.stdout.contains("Force-unlocked `batch`"), "{run:?}");
    assert!(
        run.stdout.contains("stuck-holder@"),
        "the lock is shown first: {run:?}"
    );

    let next = waiter
        .recv_timeout(Duration::from_secs(10))
        .expect("the waiter returned")
        .expect("the waiter got the lock");
    assert!(next.fencing_token() > guard.fencing_token());
    let shown = lockattr(&server, &["show", "batch", "--json"]).json();
    assert_eq!(shown["holder"]["label"], "next-holder");
    assert_eq!(shown["fencing_token"].as_u64(), Some(next.fencing_token()));
    // The old holder no longer owns it.
    assert!(guard.release_blocking().unwrap_err().is_not_owned());
}

/// The holder is freed by the fencing token its own value carries, even
/// when the lock's counter is gone (expired under a long hold, or evicted);
/// a holder whose value carries none (written by an older version) is
/// never freed unconditionally: the tool refuses and leaves it held.
#[test]
fn unlock_frees_only_by_the_token_the_holder_shows() {
    let server = RedisServer::start();
    let holder = locker(&server, "long-job");
    let guard = take(&holder, "nightly");
    server.raw("DEL lockattr:{nightly}:fence").unwrap();
    let run = lockattr(&server, &["unlock", "nightly", "--force"]);
    assert_eq!(run.code, 0, "{run:?}");
    assert!(
        run.stdout
            .contains(&format!("fencing token {} was held", guard.fencing_token())),
        "{run:?}"
    );
    assert!(guard.release_blocking().unwrap_err().is_not_owned());

    // A holder of an older version: owner token, host, pid, label, since.
    server
        .raw("SET lockattr:{legacy} \"old\\nhost\\n7\\nold-app\\n1700000000000\" PX 30000")
        .unwrap();
    let run = lockattr(&server, &["unlock", "legacy", "--force"]);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(run.stderr.contains("no fencing token"), "{run:?}");
    assert_eq!(
        server.raw("EXISTS lockattr:{legacy}").unwrap(),
        ":1\r\n",
        "freed unconditionally"
    );
}

#[test]
fn unlock_of_a_free_lock_exits_1() {
    let server = RedisServer::start();
    for args in [&["unlock", "free", "--force"][..], &["unlock", "free"][..]] {
        let run = lockattr(&server, args);
        assert_eq!(run.code, 1, "{args:?}: {run:?}");
        assert!(run.stdout.contains("not held"), "{run:?}");
    }
}

#[test]
fn unlock_without_force_and_no_terminal_refuses() {
    let server = RedisServer::start();
    let locker = locker(&server, "keeper");
    let guard = take(&locker, "precious");

    let run = lockattr(&server, &["unlock", "precious"]);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(run.stderr.starts_with("lockattr: "), "{run:?}");
    assert!(run.stderr.contains("--force"), "{run:?}");

    let shown = lockattr(&server, &["show", "precious", "--json"]);
    assert_eq!(shown.code, 0);
    assert_eq!(
        shown.json()["fencing_token"].as_u64(),
        Some(guard.fencing_token())
    );
    guard.release_blocking().expect("still the holder");
}

#[test]
fn a_server_that_is_down_exits_2_without_showing_the_password() {
    let port = free_port();
    let url = format!("redis://:hunter2-secret@127.0.0.1:{port}/");
    for args in [
        &["show", "x"][..],
        &["show", "x", "--json"][..],
        &["ls"][..],
        &["unlock", "x", "--force"][..],
        &["watch", "--count", "1"][..],
    ] {
        for from_env in [false, true] {
            let mut command = if from_env {
                command(args)
            } else {
                let mut all = vec!["--url", url.as_str()];
                all.extend_from_slice(args);
                command(&all)
            };
            if from_env {
                command.env("REDIS_URL", &url);
            }
            let run = run_command(command);
            assert_eq!(run.code, 2, "{args:?}: {run:?}");
            assert!(run.stderr.starts_with("lockattr: "), "{args:?}: {run:?}");
            assert!(run.stderr.contains(&format!("127.0.0.1:{port}")), "{run:?}");
            assert!(!run.stderr.contains("hunter2"), "{run:?}");
            assert!(!run.stdout.contains("hunter2"), "{run:?}");
        }
    }
}

#[test]
fn a_wrong_password_exits_2_without_showing_it() {
    let server = RedisServer::start_with(&["--requirepass", "right-one"]);
    let url = server.url_with_password("wrong-guess");
    let run = run_command(command(&["--url", &url, "show", "x"]));
    assert_eq!(run.code, 2, "{run:?}");
    assert!(run.stderr.starts_with("lockattr: "), "{run:?}");
    assert!(!run.stderr.contains("wrong-guess"), "{run:?}");

    let url = server.url_with_password("right-one");
    let run = run_command(command(&["--url", &url, "show", "x"]));
    assert_eq!(run.code, 1, "{run:?}");
    assert!(!run.stdout.contains("right-one") && !run.stderr.contains("right-one"));
}

#[test]
fn the_url_comes_from_redis_url() {
    let server = RedisServer::start();
    let locker = locker(&server, "env-test");
    let _guard = take(&locker, "from-env");
    let mut command = command(&["show", "from-env", "--json"]);
    command.env("REDIS_URL", server.url());
    let run = run_command(command);
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(run.json()["holder"]["label"], "env-test");

    // --url wins over REDIS_URL.
    let mut command = self::command(&["--url", &server.url(), "show", "from-env", "--json"]);
    command.env("REDIS_URL", format!("redis://127.0.0.1:{}/", free_port()));
    assert_eq!(run_command(command).code, 0);
}

#[test]
fn bad_arguments_exit_2() {
    for args in [
        &["ls", "--limit", "0"][..],
        &["show"][..],
        &["frobnicate"][..],
        &["watch", "--interval", "soon"][..],
        // Several URLs are cluster seeds: --cluster is needed.
        &[
            "--url",
            "redis://127.0.0.1:1/",
            "--url",
            "redis://127.0.0.1:2/",
            "ls",
        ][..],
    ] {
        let run = run_command(command(args));
        assert_eq!(run.code, 2, "{args:?}: {run:?}");
        assert!(!run.stderr.is_empty(), "{args:?}: {run:?}");
    }
    let run = run_command(command(&[
        "--url",
        "redis://a:1/",
        "--url",
        "redis://b:1/",
        "ls",
    ]));
    assert!(
        run.stderr.starts_with("lockattr: ") && run.stderr.contains("--cluster"),
        "{run:?}"
    );
}

#[test]
fn watch_count_2_prints_the_table_twice() {
    let server = RedisServer::start();
    let locker = locker(&server, "watched");
    let _guard = take(&locker, "w:1");
    let start = Instant::now();
    let run = lockattr(&server, &["watch", "--count", "2", "--interval", "0.2"]);
    let took = start.elapsed();
    assert_eq!(run.code, 0, "{run:?}");
    assert!(
        took >= Duration::from_millis(200),
        "two refreshes 0.2 s apart took {took:?}"
    );
    let headers = run.stdout.lines().filter(|l| l.starts_with("NAME")).count();
    let rows = run.stdout.lines().filter(|l| l.starts_with("w:1 ")).count();
    assert_eq!((headers, rows), (2, 2), "{}", run.stdout);
    let header = run.stdout.lines().find(|l| l.starts_with("NAME")).unwrap();
    assert_eq!(
        header.split_whitespace().collect::<Vec<_>>(),
        [
            "NAME",
            "KIND",
            "HOLDER",
            "SINCE",
            "TTL",
            "WAITERS",
            "FENCE",
            "HAND-OVERS/S"
        ]
    );
    // Not a terminal: no screen clearing.
    assert!(!run.stdout.contains('\x1b'));
}

/// Reads one line of the child's stdout on a thread, within `within`.
fn next_line(lines: &mpsc::Receiver<String>, within: Duration) -> String {
    lines
        .recv_timeout(within)
        .expect("watch printed a line in time")
}

/// Spawns `lockattr watch` with `args`; its stdout lines come on the channel.
fn spawn_watch(
    server: &RedisServer,
    args: &[&str],
) -> (std::process::Child, mpsc::Receiver<String>) {
    let url = server.url();
    let mut all = vec!["--url", url.as_str(), "watch"];
    all.extend_from_slice(args);
    let mut child = command(&all).spawn().expect("start lockattr watch");
    let stdout = child.stdout.take().expect("piped stdout");
    let (send, receive) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if send.send(line).is_err() {
                break;
            }
        }
    });
    (child, receive)
}

#[test]
fn watch_counts_hand_overs_from_fencing_tokens() {
    let server = RedisServer::start();
    let locker = locker(&server, "busy");
    let first = take(&locker, "hot");
    let first_token = first.fencing_token();
    let interval = 2.0;
    let (child, lines) = spawn_watch(
        &server,
        &["hot", "--json", "--count", "2", "--interval", "2"],
    );
    let line = next_line(&lines, Duration::from_secs(10));
    let refresh: Value = serde_json::from_str(&line).expect("a JSON line");
    assert_eq!(refresh["error"], Value::Null);
    assert_eq!(refresh["locks"][0]["name"], "hot");
    assert_eq!(
        refresh["locks"][0]["fencing_token"].as_u64(),
        Some(first_token)
    );
    assert_eq!(
        refresh["locks"][0]["handovers_per_s"],
        Value::Null,
        "first sight"
    );

    // Two more acquisitions before the next refresh, the last one held.
    first.release_blocking().unwrap();
    take(&locker, "hot").release_blocking().unwrap();
    let last = take(&locker, "hot");
    assert_eq!(last.fencing_token(), first_token + 2);

    let line = next_line(&lines, Duration::from_secs(10));
    let refresh: Value = serde_json::from_str(&line).expect("a JSON line");
    let lock = &refresh["locks"][0];
    assert_eq!(lock["fencing_token"].as_u64(), Some(last.fencing_token()));
    let rate = lock["handovers_per_s"].as_f64().expect("a rate");
    // 2 hand-overs in one interval (plus the time a refresh takes).
    assert!(
        rate <= 2.0 / interval + 1e-9 && rate > 2.0 / (interval + 1.0),
        "rate {rate}"
    );
    let output = wait_child(child, RUN_LIMIT);
    assert!(output.status.success(), "{output:?}");
}

#[test]
fn ctrl_c_ends_watch_with_exit_0() {
    let server = RedisServer::start();
    let (child, lines) = spawn_watch(&server, &["--interval", "0.2"]);
    // The first refresh is on screen: the Ctrl-C handler is in place.
    let first = next_line(&lines, Duration::from_secs(10));
    assert!(first.is_empty() || first.contains("UTC"), "{first:?}");
    let status = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("kill -INT");
    assert!(status.success());
    let output = wait_child(child, Duration::from_secs(10));
    assert_eq!(output.status.code(), Some(0), "{output:?}");
}

// ---- Semaphores ------------------------------------------------------------

/// Takes a permit of semaphore `name` (of `permits`) for 30 s.
fn take_permit(locker: &Locker, name: &str, permits: u32) -> LockGuard {
    locker
        .semaphore(name, permits)
        .expire(Duration::from_secs(30))
        .acquire_timeout(Duration::ZERO)
        .acquire_blocking()
        .unwrap_or_else(|e| panic!("take a permit of {name}: {e}"))
}

/// A thread queued for a permit of `name` (for up to 20 s).
fn queue_permit_waiter(
    locker: &Locker,
    name: &str,
    permits: u32,
) -> mpsc::Receiver<Result<LockGuard, LockError>> {
    let (send, receive) = mpsc::channel();
    let (locker, name) = (locker.clone(), name.to_owned());
    std::thread::spawn(move || {
        let result = locker
            .semaphore(&name, permits)
            .expire(Duration::from_secs(30))
            .acquire_timeout(Duration::from_secs(20))
            .acquire_blocking();
        let _ = send.send(result);
    });
    receive
}

#[test]
fn ls_and_show_report_a_semaphores_permits_holders_and_waiters() {
    let server = RedisServer::start();
    let workers = locker(&server, "gpu-worker");
    let lock = take(&workers, "order:1");
    let permits: Vec<LockGuard> = (0..2).map(|_| take_permit(&workers, "gpu", 2)).collect();
    let waiter = queue_permit_waiter(&locker(&server, "late"), "gpu", 2);
    assert!(
        eventually(Duration::from_secs(10), || {
            lockattr(&server, &["show", "gpu", "--json"]).json()["waiters"] == 1
        })
        .is_some(),
        "the waiter never queued"
    );

    // ls: the lock's row as before, then the semaphore's, marked.
    let run = lockattr(&server, &["ls"]);
    assert_eq!(run.code, 0, "{run:?}");
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{run:?}");
    assert!(lines[1].starts_with("order:1 "), "{run:?}");
    assert!(
        lines[2].starts_with("gpu      semaphore(2/2)  2 holders"),
        "{run:?}"
    );
    let mut tokens: Vec<u64> = permits.iter().map(LockGuard::fencing_token).collect();
    tokens.sort_unstable();
    let listed = format!("{},{}", tokens[0], tokens[1]);
    let other = format!("{},{}", tokens[1], tokens[0]);
    assert!(
        lines[2].ends_with(&listed) || lines[2].ends_with(&other),
        "{run:?}"
    );

    // ls --json: each object with its kind.
    let items = lockattr(&server, &["ls", "--json"]).json();
    let items = items.as_array().unwrap();
    assert_eq!(items.len(), 2, "{items:?}");
    assert_eq!(items[0]["name"], "order:1");
    assert_eq!(items[0]["kind"], "lock", "{items:?}");
    assert_eq!(items[1]["name"], "gpu");
    assert_eq!(items[1]["kind"], "semaphore");
    assert_eq!(items[1]["permits"], 2);
    assert_eq!(items[1]["held_permits"], 2);
    assert_eq!(items[1]["waiters"], 1);
    let mut shown: Vec<u64> = items[1]["holders"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["fencing_token"].as_u64().unwrap())
        .collect();
    shown.sort_unstable();
    assert_eq!(shown, tokens);
    for permit in items[1]["holders"].as_array().unwrap() {
        assert_eq!(permit["holder"]["label"], "gpu-worker");
        assert_eq!(permit["holder"]["pid"], std::process::id());
        assert!(permit["ttl_ms"].as_u64().is_some_and(|t| t <= 30_000));
    }
    assert_eq!(items[1]["waiting"][0]["label"], "late");
    // A pattern selects semaphores as it does locks.
    let run = lockattr(&server, &["ls", "order:*", "--json"]);
    assert_eq!(run.json().as_array().unwrap().len(), 1);

    // show: the permits, one line each, and the waiter.
    let run = lockattr(&server, &["show", "gpu"]);
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.stdout.contains("kind:     semaphore"), "{run:?}");
    assert!(run.stdout.contains("permits:  2 held of 2"), "{run:?}");
    assert!(run.stdout.contains("PERMIT  HOLDER"), "{run:?}");
    assert!(run.stdout.contains("late@"), "{run:?}");
    for token in &tokens {
        assert!(run.stdout.contains(&token.to_string()), "{run:?}");
    }
    // The lock of the same kind of name is still shown as before.
    let run = lockattr(&server, &["show", "order:1", "--json"]);
    assert_eq!(
        run.json()["fencing_token"].as_u64(),
        Some(lock.fencing_token())
    );

    drop(permits);
    let next = waiter
        .recv_timeout(Duration::from_secs(10))
        .expect("the waiter returned")
        .expect("the waiter got a permit");
    drop(next);
    assert!(
        eventually(Duration::from_secs(10), || lockattr(
            &server,
            &["show", "gpu"]
        )
        .code
            == 1)
        .is_some(),
        "the semaphore is free again: show exits 1"
    );
}

#[test]
fn unlock_frees_the_permit_named_by_its_fencing_token() {
    let server = RedisServer::start();
    let stuck = locker(&server, "stuck-worker");
    let first = take_permit(&stuck, "pool", 2);
    let second = take_permit(&stuck, "pool", 2);
    let waiter = queue_permit_waiter(&locker(&server, "next-worker"), "pool", 2);
    assert!(
        eventually(Duration::from_secs(10), || {
            lockattr(&server, &["show", "pool", "--json"]).json()["waiters"] == 1
        })
        .is_some()
    );

    // Two held: which one must be said.
    let run = lockattr(&server, &["unlock", "pool", "--force"]);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(run.stderr.contains("--fencing-token"), "{run:?}");
    // A token no permit holds: nothing freed, exit 1.
    let wrong = (first.fencing_token().max(second.fencing_token()) + 1000).to_string();
    let run = lockattr(
        &server,
        &["unlock", "pool", "--force", "--fencing-token", &wrong],
    );
    assert_eq!(run.code, 1, "{run:?}");
    // Without --force and no terminal: refused, nothing freed.
    let token = first.fencing_token().to_string();
    let run = lockattr(&server, &["unlock", "pool", "--fencing-token", &token]);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(run.stderr.contains("--force"), "{run:?}");
    assert!(!first.is_lost());

    let run = lockattr(
        &server,
        &["unlock", "pool", "--force", "--fencing-token", &token],
    );
    assert_eq!(run.code, 0, "{run:?}");
    assert!(
        run.stdout
            .contains(&format!("fencing token {token} was held")),
        "{run:?}"
    );
    let next = waiter
        .recv_timeout(Duration::from_secs(10))
        .expect("the waiter returned")
        .expect("the waiter got the freed permit");
    assert!(next.fencing_token() > first.fencing_token());
    assert!(first.release_blocking().unwrap_err().is_not_owned());
    // Again with the same token: it changed hands, exit 1.
    let run = lockattr(
        &server,
        &["unlock", "pool", "--force", "--fencing-token", &token],
    );
    assert_eq!(run.code, 1, "{run:?}");

    // One permit held: no token needed.
    drop(next);
    let run = lockattr(&server, &["unlock", "pool", "--force"]);
    assert_eq!(run.code, 0, "{run:?}");
    assert!(second.release_blocking().unwrap_err().is_not_owned());
    let run = lockattr(&server, &["unlock", "pool", "--force"]);
    assert_eq!(run.code, 1, "{run:?}");
}

#[test]
fn semaphores_are_listed_without_the_password() {
    let password = "sem-pass-7731";
    let server = RedisServer::start_with(&["--requirepass", password]);
    let url = server.url_with_password(password);
    let workers = Locker::builder(&url).label("w").build().unwrap();
    let _permit = take_permit(&workers, "secret-sem", 3);
    for args in [
        &["ls"][..],
        &["ls", "--json"][..],
        &["show", "secret-sem"][..],
        &["show", "secret-sem", "--json"][..],
    ] {
        let mut all = vec!["--url", url.as_str()];
        all.extend_from_slice(args);
        let run = run_command(command(&all));
        assert_eq!(run.code, 0, "{args:?}: {run:?}");
        assert!(run.stdout.contains("secret-sem"), "{run:?}");
        assert!(
            !run.stdout.contains(password) && !run.stderr.contains(password),
            "{run:?}"
        );
    }
}

#[test]
fn watch_shows_semaphores_after_the_locks() {
    let server = RedisServer::start();
    let workers = locker(&server, "watched");
    let _lock = take(&workers, "w:1");
    let _permit = take_permit(&workers, "w-sem", 3);
    let run = lockattr(&server, &["watch", "--count", "1"]);
    assert_eq!(run.code, 0, "{run:?}");
    assert!(
        run.stdout.contains("1 lock and 1 semaphore held"),
        "{run:?}"
    );
    let rows: Vec<&str> = run
        .stdout
        .lines()
        .skip_while(|l| !l.starts_with("NAME"))
        .skip(1)
        .collect();
    assert_eq!(rows.len(), 2, "{run:?}");
    assert!(rows[0].starts_with("w:1 "), "{run:?}");
    assert!(rows[1].starts_with("w-sem  semaphore(1/3)"), "{run:?}");

    let run = lockattr(&server, &["watch", "--count", "1", "--json"]);
    assert_eq!(run.code, 0, "{run:?}");
    let line = run.json();
    assert_eq!(line["locks"][0]["name"], "w:1");
    assert_eq!(line["semaphores"][0]["name"], "w-sem");
    assert_eq!(line["semaphores"][0]["held_permits"], 1);
}

#[test]
fn semaphore_selects_the_semaphore_of_a_name_a_lock_also_holds() {
    let server = RedisServer::start();
    let workers = locker(&server, "both");
    let lock = take(&workers, "dual");
    let permit = take_permit(&workers, "dual", 2);

    // Without the flag: the lock, as before.
    let shown = lockattr(&server, &["show", "dual", "--json"]).json();
    assert_eq!(shown["fencing_token"].as_u64(), Some(lock.fencing_token()));
    assert_eq!(shown["kind"], "lock");
    // With it: the semaphore.
    let run = lockattr(&server, &["show", "dual", "--semaphore", "--json"]);
    assert_eq!(run.code, 0, "{run:?}");
    let shown = run.json();
    assert_eq!(shown["kind"], "semaphore");
    assert_eq!(
        shown["holders"][0]["fencing_token"].as_u64(),
        Some(permit.fencing_token())
    );
    let run = lockattr(&server, &["unlock", "dual", "--semaphore", "--force"]);
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.stdout.contains("Force-released permit"), "{run:?}");
    assert!(permit.release_blocking().unwrap_err().is_not_owned());
    // The lock is untouched; the semaphore is free now.
    lock.release_blocking().expect("still the holder");
    let run = lockattr(&server, &["show", "dual", "--semaphore", "--json"]);
    assert_eq!(run.code, 1, "{run:?}");
    assert_eq!(run.json()["held"], false);
    let run = lockattr(&server, &["unlock", "dual", "--semaphore", "--force"]);
    assert_eq!(run.code, 1, "{run:?}");
}
