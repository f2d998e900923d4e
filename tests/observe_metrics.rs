//! Metrics (the `metrics` feature): acquisitions, timeouts, hand-overs,
//! losses and renewal failures are counted, waits and holds measured in
//! seconds, held locks and waiting callers gauged, every one labelled
//! `lock` by the lock's name template: the attribute's `name = "..."` as
//! written, or the function's path for a name taken from a value; for the
//! builder, `.kind(..)`, or the name's part before its first `:`. Never the
//! full name. A lock set has one label: the attribute's names as written
//! (`[a:{x}, b:{y}]`), `.kind(..)`, or its names' kinds sorted without
//! repeats (`[account, order]`); its acquisition counts once, each name it
//! holds counts as a held lock.
//!
//! Run with `cargo test --features metrics --test observe_metrics`. One
//! recorder serves the whole test binary; each test reads its own labels.

#![cfg(feature = "metrics")]

mod support;

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use lockattr::{LockError, LockKey, Locker, redis_lock};
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use support::attrs::{
    LOSS_WAIT, assert_queued_and_subscribed, capped, del, lost_within, renewed, renewed_all,
    spawn_wait, spawn_wait_all, try_take_all,
};
use support::lockers::locker;
use support::{RedisServer, eventually, lock_key};

/// A metric's name and its labels, sorted.
type Series = (String, Vec<(String, String)>);

/// What was recorded since the recorder was installed. A snapshot of the
/// debugging recorder takes the values it returns (counters and gauges
/// start again from zero, histograms are emptied), so every snapshot is
/// added up here, by every test.
#[derive(Default, Clone, Debug)]
struct Totals {
    counters: HashMap<Series, u64>,
    gauges: HashMap<Series, f64>,
    histograms: HashMap<Series, Vec<f64>>,
}

impl Totals {
    /// The series of `name` whose labels include all of `labels`.
    fn matching<'a, T>(
        map: &'a HashMap<Series, T>,
        name: &'a str,
        labels: &'a [(&str, &str)],
    ) -> impl Iterator<Item = &'a T> + 'a {
        map.iter()
            .filter(move |((n, have), _)| {
                n == name
                    && labels
                        .iter()
                        .all(|(k, v)| have.iter().any(|(hk, hv)| hk == k && hv == v))
            })
            .map(|(_, value)| value)
    }

    fn counter(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
        Totals::matching(&self.counters, name, labels).sum()
    }

    fn gauge(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        Totals::matching(&self.gauges, name, labels).sum()
    }

    fn samples(&self, name: &str, labels: &[(&str, &str)]) -> Vec<f64> {
        Totals::matching(&self.histograms, name, labels)
            .flatten()
            .copied()
            .collect()
    }

    /// Every value of a `lock` label of lockattr's metrics.
    fn lock_labels(&self) -> Vec<String> {
        let series = self
            .counters
            .keys()
            .chain(self.gauges.keys())
            .chain(self.histograms.keys());
        series
            .filter(|(name, _)| name.starts_with("lockattr_"))
            .flat_map(|(_, labels)| labels.iter())
            .filter(|(key, _)| key == "lock")
            .map(|(_, value)| value.clone())
            .collect()
    }
}

/// Everything recorded so far; the first call installs the recorder.
fn recorded() -> Totals {
    static STATE: OnceLock<(Snapshotter, Mutex<Totals>)> = OnceLock::new();
    let (snapshotter, totals) = STATE.get_or_init(|| {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder.install().expect("no other recorder");
        (snapshotter, Mutex::new(Totals::default()))
    });
    let mut totals = totals.lock().unwrap();
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        let (_, key) = key.into_parts();
        let mut labels: Vec<(String, String)> = key
            .labels()
            .map(|l| (l.key().to_owned(), l.value().to_owned()))
            .collect();
        labels.sort();
        let series = (key.name().to_owned(), labels);
        match value {
            DebugValue::Counter(n) => *totals.counters.entry(series).or_default() += n,
            DebugValue::Gauge(v) => *totals.gauges.entry(series).or_default() += v.into_inner(),
            DebugValue::Histogram(vs) => totals
                .histograms
                .entry(series)
                .or_default()
                .extend(vs.into_iter().map(|v| v.into_inner())),
        }
    }
    totals.clone()
}

/// Starts a server and a Locker of it, and the recorder.
fn metered() -> (RedisServer, Locker) {
    let server = RedisServer::start();
    let locker = locker(&server);
    recorded();
    (server, locker)
}

/// Starts a server and two Lockers of it (a holder's and a waiter's), and
/// the recorder.
fn metered_pair() -> (RedisServer, Locker, Locker) {
    let server = RedisServer::start();
    let (holders, waiters) = (locker(&server), locker(&server));
    recorded();
    (server, holders, waiters)
}

/// Asserts that none of `names` is a `lock` label.
fn no_full_names(names: &[&str]) {
    let labels = recorded().lock_labels();
    for name in names {
        assert!(
            !labels.iter().any(|l| l == name),
            "the full name {name:?} is a label: {labels:?}"
        );
    }
}

const ACQUISITIONS: &str = "lockattr_acquisitions_total";
const TIMEOUTS: &str = "lockattr_acquire_timeouts_total";
const HANDOVERS: &str = "lockattr_handovers_total";
const LOSSES: &str = "lockattr_losses_total";
const RENEWAL_FAILURES: &str = "lockattr_renewal_failures_total";
const WAIT: &str = "lockattr_wait_seconds";
const HOLD: &str = "lockattr_hold_seconds";
const HELD: &str = "lockattr_held_locks";
const WAITING: &str = "lockattr_waiting_tasks";

// ---- The attribute: the name template --------------------------------------

const ORDER: &[(&str, &str)] = &[("lock", "order:{order_id}")];

/// Returns the held-locks gauge of its template, read inside the body.
#[redis_lock(name = "order:{order_id}", locker = locker)]
async fn pay(locker: &Locker, order_id: u64) -> Result<f64, LockError> {
    tokio::task::yield_now().await;
    Ok(recorded().gauge(HELD, ORDER))
}

#[redis_lock(name = "order:{order_id}", locker = locker)]
fn pay_blocking(locker: &Locker, order_id: u64) -> Result<f64, LockError> {
    Ok(recorded().gauge(HELD, ORDER))
}

#[redis_lock(name = "order:{order_id}", locker = locker, acquire_time = "200ms")]
async fn pay_now(locker: &Locker, order_id: u64) -> Result<(), LockError> {
    Ok(())
}

/// Acquisitions, waits, holds, the held gauge and a timeout of annotated
/// functions are labelled `lock = "order:{order_id}"`, the template, and
/// never `order:7`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_attribute_labels_by_its_name_template() {
    let (_server, locker) = metered();

    assert_eq!(pay(&locker, 7).await.unwrap(), 1.0, "held inside the body");
    let blocking = locker.clone();
    let held = tokio::task::spawn_blocking(move || pay_blocking(&blocking, 8).unwrap())
        .await
        .unwrap();
    assert_eq!(held, 1.0, "held inside the sync body");
    let totals = recorded();
    assert_eq!(totals.counter(ACQUISITIONS, ORDER), 2);
    assert_eq!(totals.gauge(HELD, ORDER), 0.0, "released");
    assert_eq!(totals.gauge(WAITING, ORDER), 0.0, "nobody waits");
    assert_eq!(totals.samples(HOLD, ORDER).len(), 2);
    let waits = totals.samples(
        WAIT,
        &[("lock", "order:{order_id}"), ("outcome", "acquired")],
    );
    assert_eq!(waits.len(), 2);
    assert!(waits.iter().all(|w| *w >= 0.0));

    // Held by someone else: the annotated call times out.
    let holder = locker.lock("order:9").acquire().await.unwrap();
    let err = pay_now(&locker, 9).await.unwrap_err();
    assert!(matches!(err, LockError::Timeout { .. }), "{err:?}");
    holder.release().await.unwrap();
    let totals = recorded();
    assert_eq!(totals.counter(TIMEOUTS, ORDER), 1);
    let waited = totals.samples(
        WAIT,
        &[("lock", "order:{order_id}"), ("outcome", "timeout")],
    );
    assert_eq!(waited.len(), 1);
    assert!(waited[0] >= 0.2, "waited its acquire time: {waited:?}");
    assert_eq!(totals.counter(ACQUISITIONS, ORDER), 2);
    // The builder's guard on "order:9" counts under its own kind, "order".
    assert_eq!(totals.counter(ACQUISITIONS, &[("lock", "order")]), 1);
    no_full_names(&["order:7", "order:8", "order:9"]);
}

#[derive(LockKey)]
#[lock_key(prefix = "invoice")]
struct Invoice {
    #[lock_key]
    id: u64,
}

#[redis_lock(locker = locker)]
async fn settle(invoice: &Invoice, locker: &Locker) -> Result<(), LockError> {
    Ok(())
}

#[redis_lock(name = format!("refund-{}", id), locker = locker)]
fn refund(locker: &Locker, id: u64) -> Result<(), LockError> {
    Ok(())
}

/// A name taken from a value (the first argument's `LockKey`, or `name =
/// <expression>`) is labelled with the function's path: the value could
/// name any number of locks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_from_a_value_is_labelled_with_the_function_path() {
    let (_server, locker) = metered();
    settle(&Invoice { id: 3 }, &locker).await.unwrap();
    let blocking = locker.clone();
    tokio::task::spawn_blocking(move || refund(&blocking, 4).unwrap())
        .await
        .unwrap();
    let totals = recorded();
    let settle = concat!(module_path!(), "::settle");
    let refund = concat!(module_path!(), "::refund");
    assert_eq!(settle, "observe_metrics::settle");
    assert_eq!(totals.counter(ACQUISITIONS, &[("lock", settle)]), 1);
    assert_eq!(totals.counter(ACQUISITIONS, &[("lock", refund)]), 1);
    assert_eq!(totals.samples(HOLD, &[("lock", refund)]).len(), 1);
    no_full_names(&["invoice:3", "refund-4"]);
}

// ---- The builder: `kind`, or the name before its first `:` ------------------

/// `.kind("nightly")` labels `nightly`; by default a name is labelled by
/// its part before the first `:` (`cart` for `cart:42:items`), or whole
/// when it has none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_builder_labels_by_kind_or_the_name_before_its_first_colon() {
    let (_server, locker) = metered();
    let kinded = locker
        .lock("nightly-2024-06-01")
        .kind("nightly")
        .acquire()
        .await
        .unwrap();
    let owned_kind = String::from("user");
    let user = locker.lock("7").kind(owned_kind).acquire().await.unwrap();
    let cart = locker.lock("cart:42:items").acquire().await.unwrap();
    let single = locker.lock("singleton").acquire().await.unwrap();
    let totals = recorded();
    for kind in ["nightly", "user", "cart", "singleton"] {
        assert_eq!(totals.counter(ACQUISITIONS, &[("lock", kind)]), 1, "{kind}");
        assert_eq!(totals.gauge(HELD, &[("lock", kind)]), 1.0, "{kind}");
    }
    kinded.release().await.unwrap();
    user.release().await.unwrap();
    drop(cart); // a dropped guard counts as released too
    tokio::task::spawn_blocking(move || single.release_blocking().unwrap())
        .await
        .unwrap();
    let totals = recorded();
    for kind in ["nightly", "user", "cart", "singleton"] {
        assert_eq!(totals.gauge(HELD, &[("lock", kind)]), 0.0, "{kind}");
        assert_eq!(totals.samples(HOLD, &[("lock", kind)]).len(), 1, "{kind}");
    }
    no_full_names(&["nightly-2024-06-01", "7", "cart:42:items", "cart:42"]);
}

// ---- Lock sets -------------------------------------------------------------

/// A set acquired at once counts one acquisition and one wait
/// (`outcome = "acquired"`) under one label, its names' kinds sorted
/// without repeats; each of its names counts as held while the guard
/// lives and is a hold sample once released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_counts_one_acquisition_under_its_kinds() {
    let (_server, locker) = metered();
    let label = &[("lock", "[mset]")];
    let guard = locker
        .lock_all(["mset:2", "mset:1"])
        .acquire()
        .await
        .unwrap();
    let totals = recorded();
    assert_eq!(totals.counter(ACQUISITIONS, label), 1);
    assert_eq!(totals.gauge(HELD, label), 2.0, "two names held");
    assert_eq!(totals.gauge(WAITING, label), 0.0);
    let waits = totals.samples(WAIT, &[("lock", "[mset]"), ("outcome", "acquired")]);
    assert_eq!(waits.len(), 1, "one wait for the set");
    guard.release().await.unwrap();

    // Mixed kinds, blocking, and a given kind.
    let blocking = locker.clone();
    tokio::task::spawn_blocking(move || {
        let mixed = blocking
            .lock_all(["mset-order:7", "mset:1", "mset-order:8"])
            .acquire_blocking()
            .unwrap();
        mixed.release_blocking().unwrap();
        let kinded = blocking
            .lock_all(["mset:1", "mset:2"])
            .kind("transfer")
            .acquire_blocking()
            .unwrap();
        kinded.release_blocking().unwrap();
    })
    .await
    .unwrap();
    let totals = recorded();
    let mixed = &[("lock", "[mset, mset-order]")];
    assert_eq!(totals.counter(ACQUISITIONS, mixed), 1);
    assert_eq!(totals.samples(HOLD, mixed).len(), 3, "three names held");
    assert_eq!(totals.counter(ACQUISITIONS, &[("lock", "transfer")]), 1);
    assert_eq!(totals.gauge(HELD, label), 0.0, "released");
    assert_eq!(totals.samples(HOLD, label).len(), 2);
    assert_eq!(totals.gauge(HELD, mixed), 0.0);
    no_full_names(&["mset:1", "mset:2", "mset-order:7", "mset"]);
}

/// A set that waits for a held name counts as waiting meanwhile, and one
/// wait `outcome = "acquired"` once the name is released; a set whose
/// name stays held counts a timeout and a wait `outcome = "timeout"`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_that_waited_or_timed_out_is_measured() {
    let (_server, holders, waiters) = metered_pair();
    let label = &[("lock", "[mwait]")];
    let holder = holders.lock("mwait:b").acquire().await.unwrap();
    let waiter = spawn_wait_all(
        waiters.clone(),
        &["mwait:a", "mwait:b"],
        Duration::from_secs(20),
    );
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(recorded().gauge(WAITING, label), 1.0, "the set waits");
    holder.release().await.unwrap();
    let guard = waiter.await.unwrap().unwrap();
    let totals = recorded();
    assert_eq!(totals.gauge(WAITING, label), 0.0);
    assert_eq!(totals.counter(ACQUISITIONS, label), 1);
    let waited = totals.samples(WAIT, &[("lock", "[mwait]"), ("outcome", "acquired")]);
    assert_eq!(waited.len(), 1);
    assert!(waited[0] >= 0.4, "waited for the release: {waited:?}");
    guard.release().await.unwrap();

    let holder = holders.lock("mwait:a").acquire().await.unwrap();
    let err = try_take_all(
        &waiters,
        &["mwait:a", "mwait:b"],
        Duration::from_millis(300),
    )
    .await
    .unwrap_err();
    assert!(matches!(err, LockError::Timeout { .. }), "{err:?}");
    holder.release().await.unwrap();
    let totals = recorded();
    assert_eq!(totals.counter(TIMEOUTS, label), 1);
    let waited = totals.samples(WAIT, &[("lock", "[mwait]"), ("outcome", "timeout")]);
    assert_eq!(waited.len(), 1);
    assert!(waited[0] >= 0.3, "{waited:?}");
    assert_eq!(totals.gauge(WAITING, label), 0.0);
    assert_eq!(totals.gauge(HELD, label), 0.0);
}

const TRANSFER: &[(&str, &str)] = &[("lock", "[mxfer:{from}, mxfer:{to}]")];

/// Returns the held-locks gauge of its set, read inside the body.
#[redis_lock(name = ["mxfer:{from}", "mxfer:{to}"], locker = locker)]
async fn transfer(locker: &Locker, from: u64, to: u64) -> Result<f64, LockError> {
    Ok(recorded().gauge(HELD, TRANSFER))
}

/// A function annotated with a set is labelled with its names as written;
/// a name of a renewed set deleted under it is a loss of that label.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_annotated_set_is_labelled_with_its_templates() {
    let (server, locker) = metered();
    assert_eq!(transfer(&locker, 1, 2).await.unwrap(), 2.0);
    let totals = recorded();
    assert_eq!(totals.counter(ACQUISITIONS, TRANSFER), 1);
    assert_eq!(totals.gauge(HELD, TRANSFER), 0.0);
    assert_eq!(totals.samples(HOLD, TRANSFER).len(), 2);

    let guard = renewed_all(&locker, &["mlost:a", "mlost:b"], Duration::from_millis(600)).await;
    del(&server, &lock_key("mlost:a"));
    lost_within(LOSS_WAIT, guard.lost(), "the loss is seen").await;
    let lost = eventually(Duration::from_secs(5), || {
        recorded().counter(LOSSES, &[("lock", "[mlost]"), ("reason", "taken")]) == 1
    });
    assert!(lost.is_some(), "{:?}", recorded().counters);
    drop(guard);
    no_full_names(&["mxfer:1", "mlost:a"]);
}

// ---- Hand-over, waiting ----------------------------------------------------

/// A waiter counts as waiting while it waits; handed the lock by the
/// holder's release, it counts a hand-over and an acquisition.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_over_is_counted_and_a_waiter_gauged() {
    let (server, holders, waiters) = metered_pair();
    let relay = &[("lock", "relay")];
    let holder = holders.lock("relay:1").acquire().await.unwrap();
    let waiter = spawn_wait(waiters, "relay:1", Duration::from_secs(20));
    assert_queued_and_subscribed(&server, "relay:1");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(recorded().gauge(WAITING, relay), 1.0, "one caller waits");
    holder.release().await.unwrap();
    let guard = waiter.await.unwrap().unwrap();
    let totals = recorded();
    let handed = totals.samples(WAIT, &[("lock", "relay"), ("outcome", "handed_over")]);
    assert_eq!(totals.counter(HANDOVERS, relay), 1);
    assert_eq!(totals.counter(ACQUISITIONS, relay), 2);
    assert_eq!(totals.gauge(WAITING, relay), 0.0);
    assert_eq!(handed.len(), 1);
    assert!(handed[0] >= 0.3, "waited for the release: {handed:?}");
    guard.release().await.unwrap();
    no_full_names(&["relay:1"]);
}

// ---- Losses and renewal failures -------------------------------------------

/// A renewed lock deleted from outside is a loss `reason = "taken"`; one
/// whose renewals fail for a whole lease (Redis gone) counts its failed
/// renewals and a loss `reason = "unrenewed"`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losses_and_renewal_failures_are_counted() {
    let (mut server, locker) = metered();
    let lease = &[("lock", "lease")];

    let taken = renewed(&locker, "lease:taken", Duration::from_millis(600)).await;
    del(&server, &lock_key("lease:taken"));
    lost_within(LOSS_WAIT, taken.lost(), "the renewal sees the loss").await;
    drop(taken);
    assert_eq!(
        recorded().counter(LOSSES, &[("lock", "lease"), ("reason", "taken")]),
        1
    );

    let unrenewed = renewed(&locker, "lease:unrenewed", Duration::from_millis(600)).await;
    server.kill();
    lost_within(
        LOSS_WAIT,
        unrenewed.lost(),
        "renewals fail for a whole lease",
    )
    .await;
    let totals = recorded();
    assert_eq!(
        totals.counter(LOSSES, &[("lock", "lease"), ("reason", "unrenewed")]),
        1
    );
    assert!(totals.counter(RENEWAL_FAILURES, lease) >= 1);
    assert_eq!(totals.counter(LOSSES, lease), 2);
    drop(unrenewed);
    no_full_names(&["lease:taken", "lease:unrenewed"]);
}

/// A lease that runs out after its `renew_for` cap is a loss
/// `reason = "renew_for"`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loss_after_the_renewal_cap_is_counted() {
    let (_server, locker) = metered();
    let (lease, cap) = (Duration::from_millis(600), Duration::from_millis(800));
    let capped = capped(&locker, "cap:renew_for", lease, cap).await;
    lost_within(LOSS_WAIT, capped.lost(), "the lease runs out after the cap").await;
    drop(capped);
    assert_eq!(
        recorded().counter(LOSSES, &[("lock", "cap"), ("reason", "renew_for")]),
        1
    );
    no_full_names(&["cap:renew_for"]);
}
