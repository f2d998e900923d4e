//! The fault-injecting proxy of `tests/support/proxy.rs` against a real
//! redis-server: forwarding, latency, lost replies, stalls, cuts and drop.
use crate::support;

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use support::proxy::Proxy;
use support::{RedisServer, eventually};

/// How long a raw client waits for bytes before it calls the link silent.
const SILENCE: Duration = Duration::from_millis(300);

fn connect(url: &str) -> redis::Connection {
    redis::Client::open(url)
        .expect("url")
        .get_connection()
        .expect("connect through the proxy")
}

fn ping(con: &mut redis::Connection) -> redis::RedisResult<String> {
    redis::cmd("PING").query(con)
}

/// SET `key` `value` over `con`.
fn set(con: &mut redis::Connection, key: &str, value: &str) -> redis::RedisResult<()> {
    redis::cmd("SET").arg(key).arg(value).query(con)
}

/// GET `key` over `con`, as a `T`.
fn get<T: redis::FromRedisValue>(con: &mut redis::Connection, key: &str) -> redis::RedisResult<T> {
    redis::cmd("GET").arg(key).query(con)
}

/// A server of our own, on which `keys` are the test's own keys, without
/// a TTL (see support::audit).
fn server_with_own_keys(keys: &[&str]) -> RedisServer {
    let server = RedisServer::start();
    for key in keys {
        server.allow_untimed(key);
    }
    server
}

fn timed<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let start = Instant::now();
    let value = f();
    (value, start.elapsed())
}

/// A raw TCP client of the proxy, whose reads give up after [`SILENCE`].
fn raw(proxy: &Proxy) -> TcpStream {
    let stream = TcpStream::connect(("127.0.0.1", proxy.port())).expect("connect to the proxy");
    stream.set_read_timeout(Some(SILENCE)).unwrap();
    stream
}

/// Sends an inline command.
fn send(stream: &mut TcpStream, command: &str) {
    stream
        .write_all(format!("{command}\r\n").as_bytes())
        .expect("write to the proxy");
}

/// Reads until the bytes received contain `needle`; panics on end-of-file,
/// on an error or after 5 s.
fn read_until(stream: &mut TcpStream, needle: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut got = Vec::new();
    let mut buf = [0_u8; 4096];
    while !String::from_utf8_lossy(&got).contains(needle) {
        assert!(
            Instant::now() < deadline,
            "no {needle:?} within 5 s; got {:?}",
            String::from_utf8_lossy(&got)
        );
        match stream.read(&mut buf) {
            Ok(0) => panic!(
                "connection closed before {needle:?}; got {:?}",
                String::from_utf8_lossy(&got)
            ),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if is_timeout(&e) => {}
            Err(e) => panic!("read error before {needle:?}: {e}"),
        }
    }
    String::from_utf8_lossy(&got).into_owned()
}

/// Asserts that nothing arrives for [`SILENCE`] and that the socket is
/// still open (the read times out rather than seeing end-of-file).
fn assert_silent(stream: &mut TcpStream) {
    let mut buf = [0_u8; 4096];
    match stream.read(&mut buf) {
        Ok(0) => panic!("the connection was closed; it should stay open and silent"),
        Ok(n) => panic!(
            "received {:?}; the link should be silent",
            String::from_utf8_lossy(&buf[..n])
        ),
        Err(e) if is_timeout(&e) => {}
        Err(e) => panic!("read error {e}; the link should be silent and open"),
    }
}

/// Asserts that the proxy closed `stream`: end-of-file or a reset, soon.
fn assert_closed(stream: &mut TcpStream) {
    let mut buf = [0_u8; 4096];
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return,
            Ok(_) => {} // bytes that were on their way: keep reading
            Err(e) if is_timeout(&e) => {
                assert!(Instant::now() < deadline, "still open after 5 s")
            }
            Err(_) => return, // reset
        }
    }
}

fn is_timeout(e: &std::io::Error) -> bool {
    matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut)
}

#[test]
fn forwards_commands_both_ways() {
    let server = server_with_own_keys(&["k", "in3"]);
    let proxy = Proxy::start(server.port);
    let mut con = connect(&proxy.url());
    set(&mut con, "k", "v").unwrap();
    let got: String = get(&mut con, "k").unwrap();
    assert_eq!(got, "v");
    assert_eq!(server.get("k").as_deref(), Some("v"));
    assert_eq!(ping(&mut con).unwrap(), "PONG");

    let mut db3 = connect(&proxy.url_db(3));
    set(&mut db3, "in3", "x").unwrap();
    let in0: Option<String> = get(&mut con, "in3").unwrap();
    assert_eq!(in0, None, "url_db selects another database");

    assert!(eventually(Duration::from_secs(2), || proxy.accepted() == 2).is_some());
    assert_eq!(proxy.open_connections(), 2);
    drop(con);
    assert!(
        eventually(Duration::from_secs(2), || proxy.open_connections() == 1).is_some(),
        "a connection the client closed is closed on the proxy too"
    );
}

#[test]
fn delay_costs_each_exchange_one_round_trip() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port);
    let mut con = connect(&proxy.url());
    let delay = Duration::from_millis(50);
    proxy.set_delay(delay);

    let (pong, single) = timed(|| ping(&mut con));
    assert_eq!(pong.unwrap(), "PONG");
    assert!(single >= 2 * delay, "a round trip took {single:?}");
    assert!(
        single < Duration::from_secs(1),
        "a round trip took {single:?}"
    );

    // Ten requests written at once are delayed once, not ten times (which
    // would take a full second).
    let mut pipe = redis::pipe();
    for _ in 0..10 {
        pipe.cmd("PING");
    }
    let (pongs, piped) = timed(|| pipe.query::<Vec<String>>(&mut con));
    assert_eq!(pongs.unwrap(), vec!["PONG"; 10]);
    assert!(piped >= 2 * delay, "the pipeline took {piped:?}");
    assert!(
        piped < 2 * single + Duration::from_millis(200),
        "the pipeline took {piped:?}, one round trip {single:?}"
    );

    proxy.set_delay(Duration::ZERO);
    let fastest = (0..5)
        .map(|_| timed(|| ping(&mut con).unwrap()).1)
        .min()
        .unwrap();
    assert!(
        fastest < 2 * delay,
        "without delay the fastest of five round trips took {fastest:?}"
    );
}

#[test]
fn drop_after_next_request_runs_it_and_loses_the_reply() {
    let server = server_with_own_keys(&["k", "k2"]);
    let proxy = Proxy::start(server.port);
    let mut con = connect(&proxy.url());
    proxy.drop_after_next_request();
    let result = set(&mut con, "k", "v");
    assert!(result.is_err(), "the reply should be lost: {result:?}");
    assert_eq!(
        server.get("k").as_deref(),
        Some("v"),
        "the request reached Redis before the client saw the error"
    );
    assert!(ping(&mut con).is_err(), "that connection is closed");
    assert!(eventually(Duration::from_secs(2), || proxy.open_connections() == 0).is_some());

    // One-shot: a new connection works.
    let mut con = connect(&proxy.url());
    set(&mut con, "k2", "w").unwrap();
    assert_eq!(ping(&mut con).unwrap(), "PONG");
    assert_eq!(server.get("k2").as_deref(), Some("w"));
}

#[test]
fn drop_after_request_containing_waits_for_its_needle() {
    let server = server_with_own_keys(&["bystander", "VICTIM:key", "victim:again"]);
    let proxy = Proxy::start(server.port);
    proxy.set_delay(Duration::from_millis(20)); // also with replies on their way
    let mut con = connect(&proxy.url());
    proxy.drop_after_request_containing(b"victim");

    set(&mut con, "bystander", "1").unwrap();
    assert_eq!(ping(&mut con).unwrap(), "PONG");

    // Case-insensitive: the needle is lower case, the key is not.
    let result = set(&mut con, "VICTIM:key", "2");
    assert!(result.is_err(), "the reply should be lost: {result:?}");
    assert_eq!(server.get("VICTIM:key").as_deref(), Some("2"));

    // One-shot.
    let mut con = connect(&proxy.url());
    set(&mut con, "victim:again", "3").unwrap();
    assert_eq!(server.get("victim:again").as_deref(), Some("3"));
}

#[test]
fn stall_matching_silences_only_matching_connections_until_resume() {
    let server = server_with_own_keys(&["k"]);
    let proxy = Proxy::start(server.port);
    let mut subscriber = raw(&proxy);
    send(&mut subscriber, "SUBSCRIBE news");
    read_until(&mut subscriber, "news");
    let mut plain = connect(&proxy.url());

    proxy.stall_matching(b"subscribe");
    let publish = |channel: &str, message: &str| -> i64 {
        redis::cmd("PUBLISH")
            .arg(channel)
            .arg(message)
            .query(&mut server.client())
            .unwrap()
    };
    assert_eq!(
        publish("news", "first"),
        1,
        "Redis still has the subscriber"
    );
    assert_silent(&mut subscriber);
    assert_eq!(ping(&mut plain).unwrap(), "PONG");
    set(&mut plain, "k", "v").unwrap();
    let got: String = get(&mut plain, "k").unwrap();
    assert_eq!(got, "v");

    // Traffic after the call is matched too: this SUBSCRIBE is held.
    let mut late = raw(&proxy);
    send(&mut late, "subscribe later");
    assert_silent(&mut late);
    assert_eq!(publish("later", "lost"), 0, "the SUBSCRIBE was held");
    assert_eq!(proxy.open_connections(), 3, "stalled sockets stay open");

    proxy.resume();
    assert_eq!(publish("news", "second"), 1);
    let got = read_until(&mut subscriber, "second");
    let first = got
        .find("first")
        .expect("the held message is delivered late");
    assert!(first < got.find("second").unwrap(), "in order: {got:?}");
    read_until(&mut late, "later");
    assert!(eventually(Duration::from_secs(2), || publish("later", "now") == 1).is_some());
    read_until(&mut late, "now");
    assert_eq!(ping(&mut plain).unwrap(), "PONG");
}

#[test]
fn stall_all_silences_every_connection_until_resume() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port);
    let mut con = connect(&proxy.url());
    con.set_read_timeout(Some(SILENCE)).unwrap();
    let mut early = raw(&proxy);
    send(&mut early, "PING");
    read_until(&mut early, "PONG");

    proxy.stall_all();
    let err = ping(&mut con).unwrap_err();
    assert!(err.is_timeout(), "the PING should time out: {err:?}");
    send(&mut early, "PING");
    assert_silent(&mut early);
    let mut fresh = raw(&proxy);
    assert!(eventually(Duration::from_secs(2), || proxy.accepted() == 3).is_some());
    send(&mut fresh, "ECHO fresh");
    assert_silent(&mut fresh);
    assert_eq!(proxy.open_connections(), 3, "stalled sockets stay open");

    proxy.resume();
    read_until(&mut early, "PONG");
    read_until(&mut fresh, "fresh");
    let mut con = connect(&proxy.url());
    assert_eq!(ping(&mut con).unwrap(), "PONG");
}

#[test]
fn cut_all_closes_every_connection() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port);
    let mut a = connect(&proxy.url());
    let mut b = connect(&proxy.url());
    assert_eq!(ping(&mut a).unwrap(), "PONG");
    assert_eq!(ping(&mut b).unwrap(), "PONG");
    let mut c = raw(&proxy);
    assert!(eventually(Duration::from_secs(2), || proxy.open_connections() == 3).is_some());
    // Through the proxy plus this query's own.
    assert_eq!(server.client_count(), 4);

    proxy.cut_all();
    assert!(ping(&mut a).is_err());
    assert!(ping(&mut b).is_err());
    assert_closed(&mut c);
    assert_eq!(proxy.open_connections(), 0);
    assert!(
        eventually(Duration::from_secs(2), || server.client_count() == 1).is_some(),
        "the server side is closed too"
    );

    let mut a = connect(&proxy.url());
    assert_eq!(ping(&mut a).unwrap(), "PONG");
}

#[test]
fn drop_closes_everything_and_returns() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port);
    let mut delayed = raw(&proxy);
    let mut stalled = raw(&proxy);
    let mut subscriber = raw(&proxy);
    send(&mut subscriber, "SUBSCRIBE news");
    read_until(&mut subscriber, "news");
    assert!(eventually(Duration::from_secs(2), || proxy.open_connections() == 3).is_some());
    proxy.stall_matching(b"SUBSCRIBE");
    proxy.set_delay(Duration::from_secs(30));
    send(&mut delayed, "PING"); // waits in the proxy's queue
    proxy.stall_all();
    send(&mut stalled, "PING"); // held
    std::thread::sleep(Duration::from_millis(50));

    let ((), took) = timed(|| drop(proxy));
    assert!(took < Duration::from_secs(2), "dropping took {took:?}");
    assert_closed(&mut delayed);
    assert_closed(&mut stalled);
    assert_closed(&mut subscriber);
    assert!(
        eventually(Duration::from_secs(2), || server.client_count() == 1).is_some(),
        "the server side is closed too"
    );
}

#[test]
fn a_killed_server_closes_its_connections() {
    let mut server = RedisServer::start();
    let proxy = Proxy::start(server.port);
    let mut con = connect(&proxy.url());
    assert_eq!(ping(&mut con).unwrap(), "PONG");
    server.kill();
    assert!(ping(&mut con).is_err());
    assert!(eventually(Duration::from_secs(2), || proxy.open_connections() == 0).is_some());

    server.restart();
    let mut con = connect(&proxy.url());
    assert_eq!(ping(&mut con).unwrap(), "PONG");
}
