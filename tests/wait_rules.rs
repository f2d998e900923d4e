//! The rules that the one waiting loop keeps for every kind (see the
//! runtime's `wait` module), against a real Redis Cluster whose master of
//! the name is frozen (SIGSTOP: the socket takes the request, nothing
//! answers) while an attempt is on its way:
//! - an attempt whose answer is lost to the response timeout may still run
//!   when the master thaws, and is given back;
//! - an attempt whose caller stops waiting while it is on its way is given
//!   back too.
//!
//! Either way, nothing stays held after the thaw, for a lock, either side
//! of a read-write lock, a semaphore's permit and a set of names.

use crate::support;

use std::time::Duration;

use lockattr::{LockError, Locker};
use support::cluster::Cluster;
use support::{eventually, lock_key};

/// Each kind, as the test takes it.
const KINDS: [&str; 5] = ["lock", "read", "write", "permit", "set"];

/// How long the frozen master stays frozen: past the response timeout,
/// well within the cluster's node timeout (2 s), so no node is marked
/// failing.
const FROZEN: Duration = Duration::from_millis(900);

fn quick_locker(cluster: &Cluster) -> Locker {
    Locker::cluster_builder(cluster.urls())
        .response_timeout(Duration::from_millis(300))
        .connect_timeout(Duration::from_millis(300))
        .build()
        .unwrap()
}

/// Two names whose keys live on the same master as `first`'s.
fn names_on_one_master(cluster: &Cluster, stem: &str) -> Vec<String> {
    let first = format!("{stem}-0");
    let master = cluster.master_of(&lock_key(&first));
    let second = (1..)
        .map(|i| format!("{stem}-{i}"))
        .find(|n| cluster.master_of(&lock_key(n)) == master)
        .expect("some name on every master");
    vec![first, second]
}

/// One attempt of `kind` on `names` (a set takes both, the others the
/// first), released at once when it is granted.
async fn take(locker: &Locker, kind: &str, names: &[String]) -> Result<(), LockError> {
    let (expire, wait) = (Duration::from_secs(30), Duration::ZERO);
    if kind == "set" {
        let guard = locker
            .lock_all(names.iter().cloned())
            .expire(expire)
            .acquire_timeout(wait)
            .acquire()
            .await?;
        return guard.release().await;
    }
    let name = &names[0];
    let builder = match kind {
        "lock" => locker.lock(name),
        "read" => locker.read_lock(name),
        "write" => locker.write_lock(name),
        "permit" => locker.semaphore(name, 2),
        other => unreachable!("kind {other}"),
    };
    let guard = builder
        .expire(expire)
        .acquire_timeout(wait)
        .acquire()
        .await?;
    guard.release().await
}

/// The keys of `names` that a holder holds (not the fence counters,
/// queues, waiters or semaphore records), on the master serving them.
fn held(cluster: &Cluster, names: &[String]) -> Vec<String> {
    let node = &cluster.nodes[cluster.master_of(&lock_key(&names[0]))];
    names
        .iter()
        .flat_map(|name| node.keys(&format!("{}*", lock_key(name))))
        .filter(|key| {
            key.ends_with('}')
                || key.ends_with(":rw:write")
                || key.contains(":rw:read:")
                || key.contains(":sem:permit:")
        })
        .collect()
}

/// Freezes the master of `names`, runs `attempt` while it is frozen, then
/// thaws it and checks that nothing stays held.
fn frozen_attempt_leaves_nothing(
    cluster: &Cluster,
    names: &[String],
    what: &str,
    attempt: impl FnOnce(),
) {
    let master = &cluster.nodes[cluster.master_of(&lock_key(&names[0]))];
    master.freeze();
    attempt();
    std::thread::sleep(FROZEN.saturating_sub(Duration::from_millis(400)));
    master.thaw();
    let gone = eventually(Duration::from_secs(10), || held(cluster, names).is_empty());
    assert!(
        gone.is_some(),
        "{what}: still held after the thaw: {:?}",
        held(cluster, names)
    );
}

/// On a cluster of its own, with a [`quick_locker`], for each kind: two
/// names on one master (from `stem`), one attempt that opens the
/// connections, then `attempt` while that master is frozen
/// ([`frozen_attempt_leaves_nothing`]).
fn for_every_kind(
    stem: &str,
    attempt: impl Fn(&tokio::runtime::Runtime, &Locker, &str, &[String]),
) {
    let cluster = Cluster::start();
    let locker = quick_locker(&cluster);
    let rt = support::current_thread();
    for kind in KINDS {
        let names = names_on_one_master(&cluster, &format!("{stem}-{kind}"));
        // The connections open first: the frozen master then holds a
        // request sent on an open connection.
        rt.block_on(take(&locker, kind, &names)).unwrap();
        frozen_attempt_leaves_nothing(&cluster, &names, kind, || {
            attempt(&rt, &locker, kind, &names)
        });
    }
}

#[test]
fn an_attempt_whose_answer_timed_out_is_given_back_for_every_kind() {
    for_every_kind("timed-out", |rt, locker, kind, names| {
        let result = rt.block_on(take(locker, kind, names));
        assert!(
            result.as_ref().is_err_and(LockError::is_connection),
            "{kind}: a frozen master answered {result:?}"
        );
    });
}

#[test]
fn an_attempt_its_caller_stopped_waiting_for_is_given_back_for_every_kind() {
    for_every_kind("dropped", |rt, locker, kind, names| {
        let cut = rt.block_on(async {
            tokio::time::timeout(Duration::from_millis(100), take(locker, kind, names)).await
        });
        assert!(cut.is_err(), "{kind}: a frozen master answered {cut:?}");
    });
}
