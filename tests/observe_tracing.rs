//! Tracing: every acquisition is an `acquire` span that names its lock and,
//! when it ends, says how long it waited and how it ended (`acquired`,
//! `handed_over`, `timeout`, `error`); the body of an annotated function
//! runs in a `hold` span with its lock and fencing token (async and sync);
//! a hand-over, a loss and a forced unlock are events. A lock set
//! (`lock_all`, `name = [..]`) has the same spans: its `lock` lists the
//! names, its `hold` span carries `fencing_tokens`, and a lost name is a
//! loss event of that name. Everything the library emits is under
//! the target `lockattr`, and no field or message carries an owner token or
//! a password.
//!
//! One subscriber for the whole test binary records every span (when it
//! closes) and every event; each test picks out its own by lock name.

mod support;

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use lockattr::{LockError, LockSetGuard, Locker, redis_lock};
use support::attrs::{
    LOSS_WAIT, assert_queued_and_subscribed, capped, del, lost_within, renewed, renewed_all,
    renewed_blocking, spawn_wait, spawn_wait_all, try_take_all, try_wait,
};
use support::lockers::{labelled, locker};
use support::{RedisServer, eventually, keys, lock_key};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

/// A closed span or an event, as the subscriber saw it.
#[derive(Debug, Clone)]
struct Seen {
    /// `"span"` or `"event"`.
    what: &'static str,
    /// A span's name, an event's message.
    name: String,
    target: String,
    module: String,
    level: tracing::Level,
    /// Every field (an event's message included, as `message`).
    fields: BTreeMap<String, String>,
    /// For an event, the spans it happened in, innermost first.
    scope: Vec<(String, BTreeMap<String, String>)>,
}

impl Seen {
    fn field(&self, name: &str) -> Option<&str> {
        self.fields.get(name).map(String::as_str)
    }
}

/// The fields of a span, kept in its extensions while it is open.
struct Fields(BTreeMap<String, String>);

struct Collect<'a>(&'a mut BTreeMap<String, String>);

impl Visit for Collect<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
}

/// Records into [`seen`].
struct Capture;

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Capture {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut fields = BTreeMap::new();
        attrs.record(&mut Collect(&mut fields));
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(Fields(fields));
        }
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id)
            && let Some(fields) = span.extensions_mut().get_mut::<Fields>()
        {
            values.record(&mut Collect(&mut fields.0));
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let mut fields = BTreeMap::new();
        event.record(&mut Collect(&mut fields));
        let scope = ctx
            .event_scope(event)
            .map(|scope| {
                scope
                    .map(|span| {
                        let fields = span
                            .extensions()
                            .get::<Fields>()
                            .map(|f| f.0.clone())
                            .unwrap_or_default();
                        (span.name().to_owned(), fields)
                    })
                    .collect()
            })
            .unwrap_or_default();
        let meta = event.metadata();
        seen().lock().unwrap().push(Seen {
            what: "event",
            name: fields.get("message").cloned().unwrap_or_default(),
            target: meta.target().to_owned(),
            module: meta.module_path().unwrap_or_default().to_owned(),
            level: *meta.level(),
            fields,
            scope,
        });
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(&id) else { return };
        let fields = span
            .extensions()
            .get::<Fields>()
            .map(|f| f.0.clone())
            .unwrap_or_default();
        let meta = span.metadata();
        seen().lock().unwrap().push(Seen {
            what: "span",
            name: meta.name().to_owned(),
            target: meta.target().to_owned(),
            module: meta.module_path().unwrap_or_default().to_owned(),
            level: *meta.level(),
            fields,
            scope: Vec::new(),
        });
    }
}

/// Everything recorded so far, by every test of this binary; the first
/// call installs the subscriber.
fn seen() -> &'static Mutex<Vec<Seen>> {
    static SEEN: OnceLock<Mutex<Vec<Seen>>> = OnceLock::new();
    SEEN.get_or_init(|| Mutex::new(Vec::new()))
}

fn capture() {
    static INSTALLED: OnceLock<()> = OnceLock::new();
    INSTALLED.get_or_init(|| {
        let subscriber = tracing_subscriber::registry().with(Capture);
        tracing::subscriber::set_global_default(subscriber).expect("no other subscriber");
    });
}

/// The closed spans named `name` of lock `lock`.
fn spans(name: &str, lock: &str) -> Vec<Seen> {
    seen()
        .lock()
        .unwrap()
        .iter()
        .filter(|s| s.what == "span" && s.name == name && s.field("lock") == Some(lock))
        .cloned()
        .collect()
}

/// Waits (at most 5 s: a span closes when its last clone is dropped, which
/// may be on another thread a moment after the call returned) until `count`
/// spans named `name` of lock `lock` have closed; returns them.
fn closed(name: &str, lock: &str, count: usize) -> Vec<Seen> {
    eventually(Duration::from_secs(5), || spans(name, lock).len() >= count);
    let found = spans(name, lock);
    assert_eq!(found.len(), count, "`{name}` spans of {lock}: {found:#?}");
    found
}

/// The events whose field `lock` is `lock`.
fn events(lock: &str) -> Vec<Seen> {
    seen()
        .lock()
        .unwrap()
        .iter()
        .filter(|s| s.what == "event" && s.field("lock") == Some(lock))
        .cloned()
        .collect()
}

/// Installs the recording subscriber, then starts a server.
fn traced_server() -> RedisServer {
    capture();
    RedisServer::start()
}

/// Installs the recording subscriber, then starts a server and a Locker
/// of it.
fn traced() -> (RedisServer, Locker) {
    capture();
    let server = RedisServer::start();
    let locker = locker(&server);
    (server, locker)
}

/// Installs the recording subscriber, then starts a server and two Lockers
/// of it: a holder's and a waiter's.
fn traced_pair() -> (RedisServer, Locker, Locker) {
    capture();
    let server = RedisServer::start();
    let (holders, waiters) = (locker(&server), locker(&server));
    (server, holders, waiters)
}

/// The events of lock `lock` whose message starts with `message`.
fn events_starting(lock: &str, message: &str) -> Vec<Seen> {
    events(lock)
        .into_iter()
        .filter(|e| e.name.starts_with(message))
        .collect()
}

/// The events of lock `lock` whose message is `message`.
fn events_named(lock: &str, message: &str) -> Vec<Seen> {
    events(lock)
        .into_iter()
        .filter(|e| e.name == message)
        .collect()
}

/// The event whose message is `message`, which must have happened in a
/// `hold` span: the event, and that span's fields.
fn in_hold_span(message: &str) -> (Seen, BTreeMap<String, String>) {
    let event = seen()
        .lock()
        .unwrap()
        .iter()
        .find(|s| s.what == "event" && s.name == message)
        .cloned()
        .unwrap_or_else(|| panic!("no event {message:?}"));
    let (name, fields) = event.scope.first().expect("the event is in a span");
    assert_eq!(name, "hold", "{event:#?}");
    let fields = fields.clone();
    (event, fields)
}

/// Asserts that `forced` is one WARN event under `lockattr`, forced by
/// the Locker labelled `ops-console`, none of whose fields holds `token`.
fn assert_forced_once(forced: &[Seen], token: &str) {
    assert_eq!(forced.len(), 1, "{forced:#?}");
    assert_eq!(forced[0].level, tracing::Level::WARN);
    assert_eq!(forced[0].target, "lockattr");
    assert_eq!(forced[0].field("forced_by"), Some("ops-console"));
    assert!(
        forced[0].fields.values().all(|v| !v.contains(token)),
        "{forced:#?}"
    );
}

/// The fencing tokens of a set's guard `g`, in the order of its names,
/// joined by `, `.
fn joined_tokens(g: &LockSetGuard) -> String {
    let tokens: Vec<String> = g
        .names()
        .map(|n| g.fencing_token_of(n).unwrap().to_string())
        .collect();
    tokens.join(", ")
}

/// The `waited_ms` of an `acquire` span.
fn waited_ms(span: &Seen) -> u64 {
    span.field("waited_ms")
        .unwrap_or_else(|| panic!("no waited_ms in {span:#?}"))
        .parse()
        .expect("waited_ms is a number")
}

// ---- The acquire span ------------------------------------------------------

/// An acquisition that gets a free lock: `outcome = "acquired"`, with how
/// long it waited; async and blocking alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquisition_is_a_span_with_its_lock_outcome_and_wait() {
    let (_server, locker) = traced();
    let guard = locker.lock("traced:free").acquire().await.unwrap();
    guard.release().await.unwrap();
    let blocking = locker.clone();
    tokio::task::spawn_blocking(move || {
        let guard = blocking.lock("traced:free").acquire_blocking().unwrap();
        guard.release_blocking().unwrap();
    })
    .await
    .unwrap();

    for span in closed("acquire", "traced:free", 2) {
        assert_eq!(span.target, "lockattr");
        assert_eq!(span.field("outcome"), Some("acquired"), "{span:#?}");
        waited_ms(&span);
    }
}

/// An acquisition of a lock that stays held: `outcome = "timeout"`, after
/// waiting its whole acquire timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_is_the_outcome_of_a_wait_that_gave_up() {
    let (_server, holders, waiters) = traced_pair();
    let holder = holders.lock("traced:busy").acquire().await.unwrap();
    let wait = Duration::from_millis(300);
    let err = try_wait(&waiters, "traced:busy", wait).await.unwrap_err();
    assert!(matches!(err, LockError::Timeout { .. }), "{err:?}");
    holder.release().await.unwrap();

    let spans = closed("acquire", "traced:busy", 2);
    let timeout = spans
        .iter()
        .find(|s| s.field("outcome") == Some("timeout"))
        .unwrap_or_else(|| panic!("no timeout among {spans:#?}"));
    assert!(waited_ms(timeout) >= 300, "{timeout:#?}");
}

/// An acquisition that fails (a wrong password): `outcome = "error"`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_is_the_outcome_of_a_failed_acquisition() {
    capture();
    let server = RedisServer::start_with(&["--requirepass", "right-horse-battery"]);
    let locker = Locker::new(server.url_with_password("wrong-staple")).unwrap();
    let err = try_wait(&locker, "traced:refused", Duration::ZERO)
        .await
        .unwrap_err();
    assert!(!matches!(err, LockError::Timeout { .. }), "{err:?}");
    let span = &closed("acquire", "traced:refused", 1)[0];
    assert_eq!(span.field("outcome"), Some("error"), "{span:#?}");
}

/// A waiter handed the lock by the holder's release: its span's outcome is
/// `handed_over`, and a hand-over event inside it names the lock and the
/// waiter's fencing token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_handed_the_lock_shows_handed_over() {
    let (server, holders, waiters) = traced_pair();
    let holder = holders.lock("traced:relay").acquire().await.unwrap();
    let waiter = spawn_wait(waiters, "traced:relay", Duration::from_secs(20));
    // Queued and subscribed to release notices, then a moment more: the
    // waiter has asked once more since it subscribed, and sleeps.
    assert_queued_and_subscribed(&server, "traced:relay");
    tokio::time::sleep(Duration::from_millis(300)).await;
    holder.release().await.unwrap();
    let guard = waiter.await.unwrap().unwrap();

    let spans = closed("acquire", "traced:relay", 2);
    let handed = spans
        .iter()
        .find(|s| s.field("outcome") == Some("handed_over"))
        .unwrap_or_else(|| panic!("no hand-over among {spans:#?}"));
    waited_ms(handed);
    let token = guard.fencing_token().to_string();
    let event = events("traced:relay")
        .into_iter()
        .find(|e| e.name.contains("handed over"))
        .expect("a hand-over event");
    assert_eq!(event.target, "lockattr");
    assert_eq!(event.field("fencing_token"), Some(token.as_str()));
    assert_eq!(
        event.scope.first().map(|(name, _)| name.as_str()),
        Some("acquire")
    );
    guard.release().await.unwrap();
}

// ---- The hold span ---------------------------------------------------------

#[redis_lock(name = "traced:{id}", locker = locker, guard = g)]
async fn async_traced(locker: &Locker, id: u32) -> Result<u64, LockError> {
    tokio::task::yield_now().await;
    tracing::info!(target: "observe_tracing", id, "in the async body");
    tokio::task::yield_now().await;
    Ok(g.fencing_token())
}

#[redis_lock(name = "traced:{id}", locker = locker, guard = g)]
fn sync_traced(locker: &Locker, id: u32) -> Result<u64, LockError> {
    tracing::info!(target: "observe_tracing", id, "in the sync body");
    Ok(g.fencing_token())
}

#[redis_lock(name = "traced:{id}", locker = locker, guard = g, on_lost = "error")]
fn sync_traced_checked(locker: &Locker, id: u32) -> Result<u64, LockError> {
    tracing::info!(target: "observe_tracing", id, "in the checked sync body");
    Ok(g.fencing_token())
}

/// The body of an annotated function runs in a `hold` span that names the
/// lock and carries the call's fencing token: events of the body happen in
/// it, async (across `.await`s) and sync, with and without `on_lost`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_body_runs_in_a_hold_span_with_the_fencing_token() {
    let (_server, locker) = traced();
    let first = async_traced(&locker, 1).await.unwrap();
    let (second, third) = tokio::task::spawn_blocking({
        let locker = locker.clone();
        move || {
            (
                sync_traced(&locker, 1).unwrap(),
                sync_traced_checked(&locker, 1).unwrap(),
            )
        }
    })
    .await
    .unwrap();

    let holds = closed("hold", "traced:1", 3);
    let mut tokens: Vec<String> = holds
        .iter()
        .map(|h| h.field("fencing_token").expect("fencing_token").to_owned())
        .collect();
    tokens.sort();
    let mut expected = vec![first.to_string(), second.to_string(), third.to_string()];
    expected.sort();
    assert_eq!(tokens, expected);
    assert!(holds.iter().all(|h| h.target == "lockattr"));

    for (message, token) in [
        ("in the async body", first),
        ("in the sync body", second),
        ("in the checked sync body", third),
    ] {
        let (_, fields) = in_hold_span(message);
        assert_eq!(fields.get("lock").map(String::as_str), Some("traced:1"));
        assert_eq!(fields.get("fencing_token"), Some(&token.to_string()));
    }
    // The acquisitions themselves are not inside the hold span.
    assert_eq!(closed("acquire", "traced:1", 3).len(), 3);
}

// ---- Events: loss ----------------------------------------------------------

/// A renewal that finds the lock deleted: a warning under `lockattr` that
/// names the lock and says why (`reason = "taken"`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_lock_is_a_warning_event() {
    let (server, locker) = traced();
    let guard = renewed(&locker, "traced:lost", Duration::from_millis(600)).await;
    del(&server, &lock_key("traced:lost"));
    let lost = lost_within(LOSS_WAIT, guard.lost(), "the renewal sees the loss").await;
    assert!(matches!(lost, LockError::Lost { .. }), "{lost:?}");
    let losses = events_starting("traced:lost", "lock lost");
    assert_eq!(losses.len(), 1, "{losses:#?}");
    assert_eq!(losses[0].level, tracing::Level::WARN);
    assert_eq!(losses[0].target, "lockattr");
    assert_eq!(losses[0].field("reason"), Some("taken"));
    drop(guard);
}

/// A guard whose loss was reported (the `lock lost` warning) and which is
/// then dropped warns no more: its release finds the lock not its own, as
/// the warning said. Sync and async alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_lost_guard_does_not_warn_again() {
    let (server, locker) = traced();
    for (name, blocking) in [("traced:drop-sync", true), ("traced:drop-async", false)] {
        let guard = if blocking {
            let locker = locker.clone();
            tokio::task::spawn_blocking(move || {
                renewed_blocking(&locker, name, Duration::from_millis(600))
            })
            .await
            .unwrap()
        } else {
            renewed(&locker, name, Duration::from_millis(600)).await
        };
        del(&server, &lock_key(name));
        assert!(eventually(Duration::from_secs(5), || guard.is_lost()).is_some());
        if blocking {
            tokio::task::spawn_blocking(move || drop(guard))
                .await
                .unwrap();
        } else {
            drop(guard);
        }
        // The release, in the background for an async guard, is done by then.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let warnings: Vec<Seen> = events(name)
            .into_iter()
            .filter(|e| e.level == tracing::Level::WARN)
            .collect();
        assert_eq!(warnings.len(), 1, "{name}: {warnings:#?}");
        assert!(warnings[0].name.starts_with("lock lost"), "{warnings:#?}");
    }
}

/// Renewal stopped by `renew_for`: an INFO event under `lockattr` naming
/// the lock and the cap when it stops, then the loss warning with
/// `reason = "renew_for"` when the lease runs out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_cap_is_an_info_event_then_a_loss() {
    let (_server, locker) = traced();
    let (lease, cap) = (Duration::from_millis(600), Duration::from_millis(800));
    let guard = capped(&locker, "traced:capped", lease, cap).await;
    let lost = lost_within(LOSS_WAIT, guard.lost(), "the lease runs out after the cap").await;
    assert!(matches!(lost, LockError::Lost { .. }), "{lost:?}");
    let seen = events("traced:capped");
    let stopped: Vec<&Seen> = seen
        .iter()
        .filter(|e| e.name.starts_with("lock renewal stopped"))
        .collect();
    assert_eq!(stopped.len(), 1, "{seen:#?}");
    assert_eq!(stopped[0].level, tracing::Level::INFO);
    assert_eq!(stopped[0].target, "lockattr");
    assert_eq!(stopped[0].field("renew_for_ms"), Some("800"));
    let losses: Vec<&Seen> = seen
        .iter()
        .filter(|e| e.name.starts_with("lock lost"))
        .collect();
    assert_eq!(losses.len(), 1, "{seen:#?}");
    assert_eq!(losses[0].field("reason"), Some("renew_for"));
    drop(guard);
}

// ---- Events: forced unlock -------------------------------------------------

/// An operator's `force_unlock` is a warning under `lockattr` that names
/// the lock and the Locker that forced it, never the holder's owner token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forced_unlock_is_a_warning_event() {
    let server = traced_server();
    let holder = locker(&server)
        .lock("traced:forced")
        .acquire()
        .await
        .unwrap();
    let token = server.owner(&lock_key("traced:forced")).expect("held");
    let operator = labelled(&server, "ops-console");
    assert!(operator.force_unlock("traced:forced").await.unwrap());
    let forced = events_named("traced:forced", "lock force-unlocked");
    assert_forced_once(&forced, &token);
    drop(holder);
}

// ---- Lock sets -------------------------------------------------------------

/// The closed spans named `name` whose `lock` lists exactly `names` (in
/// any order: a set lists its names in the order it takes them in, by
/// Cluster slot, then key).
fn set_spans(name: &str, names: &[&str]) -> Vec<Seen> {
    let mut want: Vec<&str> = names.to_vec();
    want.sort_unstable();
    seen()
        .lock()
        .unwrap()
        .iter()
        .filter(|s| s.what == "span" && s.name == name)
        .filter(|s| {
            let mut have: Vec<&str> = s.field("lock").unwrap_or_default().split(", ").collect();
            have.sort_unstable();
            have == want
        })
        .cloned()
        .collect()
}

/// Waits (at most 5 s) until `count` such spans have closed; returns them.
fn closed_set(name: &str, names: &[&str], count: usize) -> Vec<Seen> {
    eventually(Duration::from_secs(5), || {
        set_spans(name, names).len() >= count
    });
    let found = set_spans(name, names);
    assert_eq!(
        found.len(),
        count,
        "`{name}` spans of {names:?}: {found:#?}"
    );
    found
}

/// A set acquired at once: one `acquire` span listing its names in the
/// order they were taken in, with `outcome = "acquired"` and `waited_ms`;
/// async and blocking alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_acquired_at_once_is_one_span_with_outcome_and_wait() {
    let (_server, locker) = traced();
    let names = ["tset:free:a", "tset:free:b"];
    let guard = locker.lock_all(names).acquire().await.unwrap();
    let listed = guard.names().collect::<Vec<_>>().join(", ");
    guard.release().await.unwrap();
    let blocking = locker.clone();
    tokio::task::spawn_blocking(move || {
        let guard = blocking.lock_all(names).acquire_blocking().unwrap();
        guard.release_blocking().unwrap();
    })
    .await
    .unwrap();

    for span in closed_set("acquire", &names, 2) {
        assert_eq!(span.target, "lockattr");
        assert_eq!(span.level, tracing::Level::DEBUG);
        assert_eq!(span.field("lock"), Some(listed.as_str()), "{span:#?}");
        assert_eq!(span.field("outcome"), Some("acquired"), "{span:#?}");
        assert!(waited_ms(&span) < 5_000, "{span:#?}");
    }
}

/// A set one of whose names is held waits, and takes the set once that
/// name is released: `outcome = "acquired"` (a set takes its names in one
/// last attempt, never by a hand-over) after waiting at least as long as
/// the name was held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_that_waited_for_a_release_shows_its_wait() {
    let (_server, holders, waiters) = traced_pair();
    let names = ["tset:relay:a", "tset:relay:b"];
    let holder = holders.lock("tset:relay:b").acquire().await.unwrap();
    let waiter = spawn_wait_all(waiters, &names, Duration::from_secs(20));
    tokio::time::sleep(Duration::from_millis(400)).await;
    holder.release().await.unwrap();
    let guard = waiter.await.unwrap().unwrap();
    guard.release().await.unwrap();

    let span = &closed_set("acquire", &names, 1)[0];
    assert_eq!(span.field("outcome"), Some("acquired"), "{span:#?}");
    assert!(waited_ms(span) >= 400, "{span:#?}");
}

/// A set one of whose names stays held gives up: `outcome = "timeout"`
/// after its whole acquire timeout; a set refused before it tries (an
/// empty name) is `outcome = "error"`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_that_timed_out_or_was_refused_shows_it() {
    let (_server, holders, waiters) = traced_pair();
    let names = ["tset:busy:a", "tset:busy:b"];
    let holder = holders.lock("tset:busy:a").acquire().await.unwrap();
    let err = try_take_all(&waiters, &names, Duration::from_millis(300))
        .await
        .unwrap_err();
    assert!(matches!(err, LockError::Timeout { .. }), "{err:?}");
    holder.release().await.unwrap();
    let span = &closed_set("acquire", &names, 1)[0];
    assert_eq!(span.field("outcome"), Some("timeout"), "{span:#?}");
    assert!(waited_ms(span) >= 300, "{span:#?}");

    let err = waiters
        .lock_all(["tset:refused", ""])
        .acquire()
        .await
        .unwrap_err();
    assert!(matches!(err, LockError::InvalidInput { .. }), "{err:?}");
    let span = &closed_set("acquire", &["tset:refused", ""], 1)[0];
    assert_eq!(span.field("outcome"), Some("error"), "{span:#?}");
}

#[redis_lock(name = ["tset:{x}", "tset:{y}"], locker = locker, guard = g)]
async fn async_set_traced(locker: &Locker, x: u32, y: u32) -> Result<String, LockError> {
    tracing::info!(target: "observe_tracing", "in the async set body");
    Ok(joined_tokens(g))
}

#[redis_lock(name = ["tset:{x}", "tset:{y}"], locker = locker, guard = g)]
fn sync_set_traced(locker: &Locker, x: u32, y: u32) -> Result<String, LockError> {
    tracing::info!(target: "observe_tracing", "in the sync set body");
    Ok(joined_tokens(g))
}

/// The body of a function annotated with a set runs in a `hold` span
/// whose `lock` lists the names and `fencing_tokens` their tokens, in the
/// same order; its acquisition is an `acquire` span with an outcome.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_body_runs_in_a_hold_span_with_its_fencing_tokens() {
    let (_server, locker) = traced();
    let first = async_set_traced(&locker, 1, 2).await.unwrap();
    let second = tokio::task::spawn_blocking({
        let locker = locker.clone();
        move || sync_set_traced(&locker, 1, 2).unwrap()
    })
    .await
    .unwrap();

    let names = ["tset:1", "tset:2"];
    let holds = closed_set("hold", &names, 2);
    let mut tokens: Vec<&str> = holds
        .iter()
        .map(|h| h.field("fencing_tokens").expect("fencing_tokens"))
        .collect();
    tokens.sort_unstable();
    let mut expected = vec![first.as_str(), second.as_str()];
    expected.sort_unstable();
    assert_eq!(tokens, expected, "{holds:#?}");
    for message in ["in the async set body", "in the sync set body"] {
        let (event, fields) = in_hold_span(message);
        assert!(fields.contains_key("fencing_tokens"), "{event:#?}");
    }
    for span in closed_set("acquire", &names, 2) {
        assert_eq!(span.field("outcome"), Some("acquired"), "{span:#?}");
    }
}

/// A name of a renewed set deleted under it: a loss warning of that name,
/// as for a single lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_name_of_a_set_is_a_warning_event_of_that_name() {
    let (server, locker) = traced();
    let names = ["tset:lost:a", "tset:lost:b"];
    let guard = renewed_all(&locker, &names, Duration::from_millis(600)).await;
    del(&server, &lock_key("tset:lost:b"));
    let lost = lost_within(LOSS_WAIT, guard.lost(), "the renewal sees the loss").await;
    assert!(matches!(lost, LockError::Lost { .. }), "{lost:?}");
    eventually(Duration::from_secs(5), || !events("tset:lost:b").is_empty());
    let losses = events_starting("tset:lost:b", "lock lost");
    assert_eq!(losses.len(), 1, "{losses:#?}");
    assert_eq!(losses[0].level, tracing::Level::WARN);
    assert_eq!(losses[0].field("reason"), Some("taken"));
    assert!(
        events("tset:lost:a")
            .iter()
            .all(|e| !e.name.starts_with("lock lost")),
        "the other name is not lost"
    );
    drop(guard);
}

/// A forced release of a semaphore's permit is a warning under `lockattr`
/// naming the semaphore, the permit's fencing token and who forced it,
/// never the holder's owner token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forced_permit_release_is_a_warning_event() {
    let server = traced_server();
    let holder = locker(&server)
        .semaphore("traced-sem", 2)
        .acquire()
        .await
        .unwrap();
    let key = server
        .keys(&keys::permit_keys("traced-sem"))
        .pop()
        .expect("a permit key");
    let token = server.owner(&key).expect("held");
    let operator = labelled(&server, "ops-console");
    assert!(
        operator
            .force_unlock_permit("traced-sem", holder.fencing_token())
            .await
            .unwrap()
    );
    let forced = events_named("traced-sem", "semaphore permit force-released");
    assert_forced_once(&forced, &token);
    let fence = holder.fencing_token().to_string();
    assert_eq!(forced[0].field("fencing_token"), Some(fence.as_str()));
    drop(holder);
}

// ---- What is never recorded ------------------------------------------------

#[redis_lock(name = "secret:{id}", locker = locker, guard = g)]
async fn held_secretly(
    locker: &Locker,
    id: u32,
    server: &RedisServer,
) -> Result<String, LockError> {
    let token = redis_value(server, &lock_key(g.name()));
    tracing::info!(target: "observe_tracing", "in the secret body");
    Ok(token)
}

const PASSWORD: &str = "s3cret-for-tracing";

/// The owner token of the lock at `key` (the first line of its value),
/// read with the password.
fn redis_value(server: &RedisServer, key: &str) -> String {
    let mut con = redis::Client::open(server.url_with_password(PASSWORD))
        .unwrap()
        .get_connection()
        .unwrap();
    let value: String = redis::cmd("GET").arg(key).query(&mut con).unwrap();
    value.split('\n').next().unwrap_or_default().to_owned()
}

/// Owner tokens and the password of the Locker's URL appear in no field and
/// no message, of spans or events, across acquisitions, a hand-over, a
/// timeout, an annotated function and a loss; and everything the library
/// emits has the target `lockattr`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_owner_token_or_password_is_ever_recorded() {
    capture();
    let server = RedisServer::start_with(&["--requirepass", PASSWORD]);
    let url = server.url_with_password(PASSWORD);
    let (holders, waiters) = (Locker::new(&url).unwrap(), Locker::new(&url).unwrap());
    let mut tokens = Vec::new();

    // Held, then handed over to a waiter, which then times out another.
    let holder = holders.lock("secret:relay").acquire().await.unwrap();
    tokens.push(redis_value(&server, &lock_key("secret:relay")));
    let waiter = spawn_wait(waiters.clone(), "secret:relay", Duration::from_secs(20));
    tokio::time::sleep(Duration::from_millis(500)).await;
    holder.release().await.unwrap();
    let guard = waiter.await.unwrap().unwrap();
    tokens.push(redis_value(&server, &lock_key("secret:relay")));
    let err = try_wait(&holders, "secret:relay", Duration::from_millis(100))
        .await
        .unwrap_err();
    assert!(matches!(err, LockError::Timeout { .. }));
    guard.release().await.unwrap();

    // An annotated function.
    tokens.push(held_secretly(&holders, 1, &server).await.unwrap());

    // A loss.
    let lost = renewed(&holders, "secret:lost", Duration::from_millis(600)).await;
    tokens.push(redis_value(&server, &lock_key("secret:lost")));
    let mut con = redis::Client::open(url.as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    let _: () = redis::cmd("DEL")
        .arg(lock_key("secret:lost"))
        .query(&mut con)
        .unwrap();
    lost_within(LOSS_WAIT, lost.lost(), "the loss is seen").await;
    drop(lost);
    closed("acquire", "secret:relay", 3);
    closed("hold", "secret:1", 1);
    let deadline = Instant::now() + Duration::from_secs(5);
    while events("secret:lost").is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    assert_eq!(tokens.len(), 4);
    for token in &tokens {
        assert_eq!(token.len(), 32, "an owner token: {token}");
    }
    let seen = seen().lock().unwrap().clone();
    for record in &seen {
        let texts = record
            .fields
            .iter()
            .chain(record.scope.iter().flat_map(|(_, fields)| fields.iter()))
            .flat_map(|(key, value)| [key, value])
            .chain([&record.name]);
        for text in texts {
            assert!(!text.contains(PASSWORD), "the password in {record:#?}");
            for token in &tokens {
                assert!(
                    !text.contains(token.as_str()),
                    "an owner token in {record:#?}"
                );
            }
        }
        if record.module.starts_with("lockattr") {
            assert_eq!(record.target, "lockattr", "{record:#?}");
        }
    }
}
