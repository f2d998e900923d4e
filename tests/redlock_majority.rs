//! A Redlock operation is done once a majority has answered it: the
//! slowest nodes do not hold up an acquisition or a release, and their
//! requests still run (the lock ends up held, then freed, on every node).

use crate::support;

use std::time::{Duration, Instant};

use lockattr::Locker;
use support::deployments::{cycle, hold_for, no_delay_redlock, set_key, start_nodes};
use support::lockers::owners;
use support::proxy::Proxy;
use support::takes::take_now;
use support::{RedisServer, eventually, keys, lock_key};

/// One way, on the two slow links: a round trip there costs 600 ms.
const SLOW: Duration = Duration::from_millis(300);

/// Five nodes, the last `slow` behind proxies (no delay yet), and a Locker
/// on them whose node timeout is far above the slow round trip.
fn slow_of_five(slow: usize) -> (Vec<RedisServer>, Vec<Proxy>, Locker) {
    let nodes = start_nodes(5);
    let fast = 5 - slow;
    let proxies: Vec<Proxy> = nodes[fast..].iter().map(|n| Proxy::start(n.port)).collect();
    let urls: Vec<String> = nodes[..fast]
        .iter()
        .map(RedisServer::url)
        .chain(proxies.iter().map(Proxy::url))
        .collect();
    // Connecting and answering get as long as the node timeout: on a
    // loaded machine a node that failed to connect within the default
    // second would miss the warm-up acquisition, and its fence counter
    // would start later, from its clock, past the others'.
    let locker = no_delay_redlock(&urls)
        .node_timeout(Duration::from_secs(5))
        .connect_timeout(Duration::from_secs(5))
        .response_timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    (nodes, proxies, locker)
}

/// Waits at most `within` until every node shows `owner` for `name` (`None`:
/// free everywhere); panics with `what` and the owners seen otherwise.
fn on_every_node(
    nodes: &[RedisServer],
    name: &str,
    owner: &Option<String>,
    within: Duration,
    what: &str,
) {
    assert!(
        eventually(within, || owners(nodes, name).iter().all(|o| o == owner)).is_some(),
        "{what}: {:?}",
        owners(nodes, name)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_two_slowest_of_five_nodes_hold_up_neither_acquire_nor_release() {
    let (nodes, proxies, locker) = slow_of_five(2);
    // Connections open, scripts loaded and the nodes' fence counters in
    // step while the links are fast: every node holds the warm-up lock
    // before it is released (an acquisition returns with a majority), and
    // every node has let it go before the links slow down.
    let warm_up = locker.lock("majority").acquire().await.unwrap();
    let token = nodes[0].owner(&lock_key("majority"));
    let warm = Duration::from_secs(5);
    on_every_node(
        &nodes,
        "majority",
        &token,
        warm,
        "the warm-up lock is not held on every node",
    );
    warm_up.release().await.unwrap();
    on_every_node(
        &nodes,
        "majority",
        &None,
        warm,
        "the warm-up lock is not freed on every node",
    );
    for proxy in &proxies {
        proxy.set_delay(SLOW);
    }

    let start = Instant::now();
    let guard = hold_for(&locker, "majority", Duration::from_secs(30)).await;
    let took = start.elapsed();
    assert!(
        took < 2 * SLOW,
        "the acquisition waited for the slow nodes: {took:?}"
    );
    // The slow nodes' requests were not given up: they take the lock for
    // the same owner, so it is held on all five.
    let token = nodes[0].owner(&lock_key("majority"));
    assert!(token.is_some());
    let late = Duration::from_secs(3);
    on_every_node(
        &nodes,
        "majority",
        &token,
        late,
        "not held by one owner on every node",
    );

    let start = Instant::now();
    guard.release().await.unwrap();
    let took = start.elapsed();
    assert!(
        took < 2 * SLOW,
        "the release waited for the slow nodes: {took:?}"
    );
    on_every_node(&nodes, "majority", &None, late, "not freed on every node");
}

/// With three of five nodes slow, no majority is reached without them: the
/// acquisition waits for their answers and gets the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_fast_majority_the_slow_answers_are_waited_for() {
    let (nodes, proxies, locker) = slow_of_five(3);
    locker.ping().await.unwrap();
    for proxy in &proxies {
        proxy.set_delay(SLOW);
    }
    let start = Instant::now();
    let guard = take_now(&locker, "slow-majority", Duration::from_secs(30)).await;
    assert!(start.elapsed() >= 2 * SLOW);
    let held = owners(&nodes, "slow-majority");
    assert!(
        held.iter().all(|o| *o == held[0] && o.is_some()),
        "{held:?}"
    );
    guard.release().await.unwrap();
    // Done at a majority: the last releases finish in the background.
    let late = Duration::from_secs(3);
    on_every_node(
        &nodes,
        "slow-majority",
        &None,
        late,
        "not freed on every node",
    );
}

/// Nodes that grant the lock after the acquisition was done are brought to
/// its fencing token: a node whose counter is behind is raised to it, one
/// whose counter is past it gives the lock back, so every node that holds
/// the lock has the guard's token (what `inspect` reports).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_nodes_are_brought_to_the_acquisitions_fencing_token() {
    let (nodes, proxies, locker) = slow_of_five(2);
    let name = "settled";
    let fence_key = keys::lock(name).fence;
    cycle(&locker, name).await;
    let before: u64 = nodes[0].get(&fence_key).unwrap().parse().unwrap();
    // Node 3 missed many acquisitions; node 4's counter started again from
    // its clock, far ahead.
    let behind = before - 1000;
    let ahead = before + 1_000_000;
    set_key(&nodes[3], &fence_key, behind);
    set_key(&nodes[4], &fence_key, ahead);
    for proxy in &proxies {
        proxy.set_delay(SLOW);
    }

    let guard = hold_for(&locker, name, Duration::from_secs(30)).await;
    let token = guard.fencing_token();
    assert_eq!(token, before + 1);
    let owner = nodes[0].owner(&lock_key(name));
    let fence_of = |node: &RedisServer| node.get(&fence_key).and_then(|f| f.parse::<u64>().ok());
    assert!(
        eventually(Duration::from_secs(3), || nodes[3].owner(&lock_key(name))
            == owner
            && fence_of(&nodes[3]) == Some(token)
            && nodes[4].owner(&lock_key(name)).is_none()
            && fence_of(&nodes[4]) == Some(ahead + 1))
        .is_some(),
        "node 3: owner {:?} counter {:?}; node 4: owner {:?} counter {:?}; token {token}",
        nodes[3].owner(&lock_key(name)),
        fence_of(&nodes[3]),
        nodes[4].owner(&lock_key(name)),
        fence_of(&nodes[4]),
    );
    let seen = locker.inspect(name).await.unwrap().expect("held");
    assert_eq!(seen.fencing_token, token);
    for proxy in &proxies {
        proxy.set_delay(Duration::ZERO);
    }
    guard.release().await.unwrap();
    let late = Duration::from_secs(3);
    on_every_node(&nodes, name, &None, late, "not freed on every node");
}
