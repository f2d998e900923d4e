//! The scripts called directly on a private redis-server (never 6379),
//! the way a caller that bypasses the API, or a bug in it, would: a bad
//! argument is an error and changes nothing in Redis, and each kind's
//! hand-overs write what its waiters expect.

use std::collections::BTreeMap;

use std::sync::Arc;
use std::time::Duration;

use redis::{Connection, Script, Value};

use crate::layout::{Keys, MAX_PERMITS, Permits, RwKeys, RwMode};

/// What a test sees of Redis: every key, with its type, its serialized
/// value and its time to live in ms (-1: none).
type Snapshot = BTreeMap<String, (String, Vec<u8>, i64)>;

fn snapshot(con: &mut Connection) -> Snapshot {
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(con).unwrap();
    keys.into_iter()
        .map(|key| {
            let (kind, dump, ttl): (String, Vec<u8>, i64) = redis::pipe()
                .cmd("TYPE")
                .arg(&key)
                .cmd("DUMP")
                .arg(&key)
                .cmd("PTTL")
                .arg(&key)
                .query(con)
                .unwrap();
            (key, (kind, dump, ttl))
        })
        .collect()
}

/// Asserts that nothing was written between the two snapshots: the same
/// keys, types and values, and no time to live raised, dropped or added
/// (they only ran down).
fn unchanged(before: &Snapshot, after: &Snapshot, call: &str) {
    let names = |m: &Snapshot| m.keys().cloned().collect::<Vec<_>>();
    assert_eq!(names(before), names(after), "{call} changed the keys");
    for (key, (kind, value, ttl)) in before {
        let (kind_after, value_after, ttl_after) = &after[key];
        assert_eq!(
            (kind, value),
            (kind_after, value_after),
            "{call} changed {key}"
        );
        assert_eq!(
            *ttl < 0,
            *ttl_after < 0,
            "{call} changed the expiry of {key}"
        );
        assert!(ttl_after <= ttl, "{call} raised the expiry of {key}");
    }
}

/// Calls the script with these keys and arguments; asserts that Redis
/// answered an error and that nothing was written.
fn refused(con: &mut Connection, script: &Script, keys: &[&str], args: &[&str], call: &str) {
    let before = snapshot(con);
    let mut invocation = script.prepare_invoke();
    for key in keys {
        invocation.key(*key);
    }
    for arg in args {
        invocation.arg(*arg);
    }
    let answer: redis::RedisResult<Value> = invocation.invoke(con);
    let after = snapshot(con);
    assert!(answer.is_err(), "{call} was accepted: {answer:?}");
    unchanged(&before, &after, call);
}

/// Numbers that are not a whole count of milliseconds within bounds.
const NOT_MS: &[&str] = &[
    "abc",
    "",
    "-1",
    "1.5",
    "1e17",
    "100000000000000000",
    "2592000001",
    "nan",
    "inf",
    "-inf",
];

mod lock {
    //! The scripts called directly, with a plain connection to a private
    //! redis-server (never 6379), the way a caller that bypasses the API,
    //! or a bug in it, would: a bad argument is an error, and changes
    //! nothing in Redis.

    use super::*;
    use crate::backend::scripts::*;
    use crate::backend::test_server::Server;

    /// The lock "held" (token `holder`, 3 s left, counter 5 with a time to
    /// live, one waiter queued), and the free lock "free" with no keys.
    fn setup(con: &mut Connection) -> (Keys, Keys) {
        let held = Keys::new("t:", "held", Duration::from_secs(60));
        let free = Keys::new("t:", "free", Duration::from_secs(60));
        let _: () = redis::pipe()
            .cmd("FLUSHALL")
            .cmd("SET")
            .arg(&held.lock)
            .arg("holder")
            .arg("PX")
            .arg(3_000)
            .cmd("SET")
            .arg(&held.fence)
            .arg(5)
            .arg("PX")
            .arg(60_000)
            .cmd("RPUSH")
            .arg(&held.queue)
            .arg("waiter")
            .cmd("HSET")
            .arg(&held.waiters)
            .arg("waiter")
            .arg("99999999999999:1000")
            .cmd("PEXPIRE")
            .arg(&held.queue)
            .arg(50_000)
            .cmd("PEXPIRE")
            .arg(&held.waiters)
            .arg(50_000)
            .query(con)
            .unwrap();
        (held, free)
    }

    #[test]
    fn max_ms_is_the_longest_duration_the_api_accepts() {
        let max: u128 = lua!("helpers.lua")
            .lines()
            .find_map(|line| line.strip_prefix("local MAX_MS = "))
            .and_then(|max| max.parse().ok())
            .unwrap();
        assert_eq!(max, crate::MAX_EXPIRE.as_millis());
        assert_eq!(max, crate::MAX_ACQUIRE_TIMEOUT.as_millis());
    }

    #[test]
    fn acquire_checks_its_arguments_before_writing() {
        let server = Server::start();
        let mut con = server.connect();
        let (held, free) = setup(&mut con);
        for keys in [&held, &free] {
            let k = [keys.lock.as_str(), &keys.fence, &keys.queue, &keys.waiters];
            for bad in NOT_MS.iter().chain(&["0"]) {
                let call = format!("ACQUIRE {} lease {bad:?}", keys.lock);
                let lease = format!("{bad}:60000:0:1:");
                refused(&mut con, &ACQUIRE, &k, &["newcomer", &lease, "5000"], &call);
            }
            for bad in NOT_MS {
                let call = format!("ACQUIRE {} wait {bad:?}", keys.lock);
                refused(
                    &mut con,
                    &ACQUIRE,
                    &k,
                    &["newcomer", "1000:60000:1:1:", bad],
                    &call,
                );
                let call = format!("ACQUIRE {} retention {bad:?}", keys.lock);
                let lease = format!("1000:{bad}:0:1:");
                refused(&mut con, &ACQUIRE, &k, &["newcomer", &lease, "5000"], &call);
                let lease = format!("1000:{bad}:0:1:host\n1\nlabel");
                refused(&mut con, &ACQUIRE, &k, &["newcomer", &lease, "5000"], &call);
            }
            for lease in [
                "1000",
                "",
                ":",
                "1000:",
                ":60000",
                "1000:60000",
                "1000:60000:0",
                "1000:60000:0:1",
                "1000:60000:2:1:h",
                "1000:60000:0:x:h",
                "1000:60000:0:-1:h",
                "1000::0:1:h",
                "1000:6x:0:1:h",
                ":60000:0:1:h",
            ] {
                let call = format!("ACQUIRE {} lease and retention {lease:?}", keys.lock);
                refused(&mut con, &ACQUIRE, &k, &["newcomer", lease, "5000"], &call);
            }
            let call = format!("ACQUIRE {} without a wait", keys.lock);
            refused(
                &mut con,
                &ACQUIRE,
                &k,
                &["newcomer", "1000:60000:0:1:"],
                &call,
            );
        }
    }

    #[test]
    fn release_checks_its_arguments_before_writing() {
        let server = Server::start();
        let mut con = server.connect();
        let (held, _) = setup(&mut con);
        let k = [held.lock.as_str(), &held.fence, &held.queue, &held.waiters];
        for token in ["holder", "waiter"] {
            for bad in NOT_MS {
                let call = format!("RELEASE by {token} retention {bad:?}");
                let args = [token, &held.channel, "0", bad, "5"];
                refused(&mut con, &RELEASE, &k, &args, &call);
            }
            for bad in ["abc", "", "-1", "1.5", "1e30", "9007199254740992", "nan"] {
                let call = format!("RELEASE by {token} granted {bad:?}");
                let args = [token, &held.channel, "0", "1000", bad];
                refused(&mut con, &RELEASE, &k, &args, &call);
            }
        }
        let args = ["holder", &held.channel, "0", "1000"];
        refused(
            &mut con,
            &RELEASE,
            &k,
            &args,
            "RELEASE without a fencing token",
        );
    }

    /// A release by a token that no longer owns the lock says whether the
    /// counter is still near the token's fencing token (the lock was
    /// released, or handed over, since), or not (started again from the
    /// clock after Redis lost the lock, or many acquisitions since).
    #[test]
    fn a_release_that_finds_the_lock_gone_tells_a_recent_counter() {
        let server = Server::start();
        let mut con = server.connect();
        let (held, _) = setup(&mut con);
        let answer = |con: &mut Connection, granted: u64| -> i64 {
            release(&held, "gone", granted, false).invoke(con).unwrap()
        };
        // The counter is 5.
        assert_eq!(answer(&mut con, 5), 2);
        assert_eq!(answer(&mut con, 4), 2, "one acquisition since");
        assert_eq!(answer(&mut con, 6), 0, "a counter below the token");
        assert_eq!(answer(&mut con, 0), 0, "no fencing token given");
        let _: () = redis::cmd("SET")
            .arg(&held.fence)
            .arg(1_005)
            .query(&mut con)
            .unwrap();
        assert_eq!(answer(&mut con, 5), 2, "a thousand acquisitions since");
        let _: () = redis::cmd("SET")
            .arg(&held.fence)
            .arg(1_006)
            .query(&mut con)
            .unwrap();
        assert_eq!(answer(&mut con, 5), 0, "more than a thousand since");
        let _: () = redis::cmd("DEL").arg(&held.fence).query(&mut con).unwrap();
        assert_eq!(answer(&mut con, 5), 0, "the counter is gone");
        assert_eq!(
            redis::cmd("GET")
                .arg(&held.lock)
                .query::<String>(&mut con)
                .unwrap(),
            "holder",
            "the owner's lock is left alone"
        );
    }

    #[test]
    fn extend_checks_its_arguments_before_writing() {
        let server = Server::start();
        let mut con = server.connect();
        let (held, _) = setup(&mut con);
        let k = [held.lock.as_str(), &held.fence, &held.lock];
        let channel = held.channel.as_str();
        for mode in ["add", "set", "raise", "hold"] {
            for bad in NOT_MS.iter().chain(&["0"]) {
                let call = format!("EXTEND {mode} by {bad:?}");
                refused(
                    &mut con,
                    &EXTEND,
                    &k,
                    &["holder", bad, mode, "60000", "60000", channel],
                    &call,
                );
                let call = format!("EXTEND {mode} with max {bad:?}");
                refused(
                    &mut con,
                    &EXTEND,
                    &k,
                    &["holder", "1000", mode, bad, "60000", channel],
                    &call,
                );
            }
            for bad in NOT_MS {
                let call = format!("EXTEND {mode} with retention {bad:?}");
                refused(
                    &mut con,
                    &EXTEND,
                    &k,
                    &["holder", "1000", mode, "60000", bad, channel],
                    &call,
                );
            }
            let call = format!("EXTEND {mode} with the holder key alone");
            refused(
                &mut con,
                &EXTEND,
                &k[..1],
                &["holder", "1000", mode, "60000", "60000", channel],
                &call,
            );
        }
        refused(
            &mut con,
            &EXTEND,
            &k,
            &["holder", "1000", "hold", "60000", "60000"],
            "EXTEND hold without a channel",
        );
        for mode in ["", "ADD", "replace"] {
            let call = format!("EXTEND in mode {mode:?}");
            refused(
                &mut con,
                &EXTEND,
                &k,
                &["holder", "1000", mode, "60000", "60000"],
                &call,
            );
        }
    }

    #[test]
    fn hold_sets_the_time_left_and_tells_the_waiters() {
        let server = Server::start();
        let mut con = server.connect();
        let (held, _) = setup(&mut con);
        let mut listener = server.connect();
        let mut pubsub = listener.as_pubsub();
        pubsub.subscribe(&held.channel).unwrap();
        pubsub
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        // Longer than the 3 s left: a hold may keep the lock past its lease.
        let left: i64 = extend(&held, "holder", 20_000, "hold", Duration::from_secs(60))
            .invoke(&mut con)
            .unwrap();
        assert_eq!(left, 20_000);
        let ttl: i64 = redis::cmd("PTTL").arg(&held.lock).query(&mut con).unwrap();
        assert!((19_000..=20_000).contains(&ttl), "lock PTTL {ttl}");
        let notice: String = pubsub.get_message().unwrap().get_payload().unwrap();
        assert_eq!(notice, "-:0:20000");
        // Another owner's lock: -1, nothing changed, nobody told.
        let before = snapshot(&mut con);
        let left: i64 = extend(&held, "stranger", 1_000, "hold", Duration::from_secs(60))
            .invoke(&mut con)
            .unwrap();
        assert_eq!(left, -1);
        unchanged(&before, &snapshot(&mut con), "EXTEND hold by a stranger");
        let _: () = redis::cmd("PUBLISH")
            .arg(&held.channel)
            .arg("marker")
            .query(&mut con)
            .unwrap();
        let next: String = pubsub.get_message().unwrap().get_payload().unwrap();
        assert_eq!(next, "marker", "a refused hold published a notice");
    }

    #[test]
    fn renew_checks_every_lease_before_writing() {
        let server = Server::start();
        let mut con = server.connect();
        let (held, _) = setup(&mut con);
        let other = Keys::new("t:", "other", Duration::ZERO);
        let _: () = redis::cmd("SET")
            .arg(&other.lock)
            .arg("other")
            .arg("PX")
            .arg(3_000)
            .query(&mut con)
            .unwrap();
        let k = [
            held.lock.as_str(),
            &held.fence,
            &held.lock,
            &other.lock,
            &other.fence,
            &other.lock,
        ];
        for bad in NOT_MS {
            // The first lease alone would be renewed: it must not be.
            let call = format!("RENEW with a second lease of {bad:?}");
            refused(
                &mut con,
                &RENEW,
                &k,
                &["60000", "holder", "20000", "other", bad],
                &call,
            );
        }
        refused(
            &mut con,
            &RENEW,
            &k,
            &["60000", "holder", "20000", "other"],
            "RENEW short of a lease",
        );
        for bad in NOT_MS {
            let call = format!("RENEW with retention {bad:?}");
            let args = [*bad, "holder", "20000", "other", "20000"];
            refused(&mut con, &RENEW, &k, &args, &call);
        }
        refused(
            &mut con,
            &RENEW,
            &k[..4],
            &["60000", "holder", "20000", "other", "20000"],
            "RENEW with a key short",
        );
    }

    #[test]
    fn raise_fence_checks_its_arguments_before_writing() {
        let server = Server::start();
        let mut con = server.connect();
        let (held, _) = setup(&mut con);
        let k = [held.lock.as_str(), &held.fence];
        for bad in [
            "abc",
            "",
            "0",
            "-3",
            "1.5",
            "1e30",
            "9007199254740992",
            "nan",
            "inf",
        ] {
            let call = format!("RAISE_FENCE to {bad:?}");
            refused(&mut con, &RAISE_FENCE, &k, &["holder", bad, "60000"], &call);
        }
        for bad in NOT_MS {
            let call = format!("RAISE_FENCE with retention {bad:?}");
            refused(&mut con, &RAISE_FENCE, &k, &["holder", "100", bad], &call);
        }
    }

    #[test]
    fn force_unlock_checks_its_arguments_before_writing() {
        let server = Server::start();
        let mut con = server.connect();
        let (held, _) = setup(&mut con);
        let k = [held.lock.as_str(), &held.fence, &held.queue, &held.waiters];
        for bad in [
            "abc",
            "",
            "-3",
            "1.5",
            "1e30",
            "9007199254740992",
            "nan",
            "inf",
        ] {
            let call = format!("FORCE_UNLOCK expecting token {bad:?}");
            let args = [held.channel.as_str(), "0", "60000", bad];
            refused(&mut con, &FORCE_UNLOCK, &k, &args, &call);
        }
        for bad in NOT_MS {
            let call = format!("FORCE_UNLOCK with retention {bad:?}");
            let args = [held.channel.as_str(), "0", bad, "0"];
            refused(&mut con, &FORCE_UNLOCK, &k, &args, &call);
        }
        let call = "FORCE_UNLOCK without an expected token";
        refused(
            &mut con,
            &FORCE_UNLOCK,
            &k,
            &[&held.channel, "0", "60000"],
            call,
        );
    }

    /// A queue entry that is not `<deadline>:<lease>` (written by an older
    /// version, or by hand) is skipped: the lock goes to the next valid
    /// waiter, or is deleted, and never stays without a time to live.
    #[test]
    fn release_skips_a_malformed_queue_entry() {
        let server = Server::start();
        let mut con = server.connect();
        let (held, _) = setup(&mut con);
        let _: () = redis::pipe()
            .cmd("DEL")
            .arg(&held.queue)
            .arg(&held.waiters)
            .cmd("RPUSH")
            .arg(&held.queue)
            .arg("bad")
            .arg("good")
            .cmd("HSET")
            .arg(&held.waiters)
            .arg("bad")
            .arg("99999999999999:1e17")
            .cmd("HSET")
            .arg(&held.waiters)
            .arg("good")
            .arg("99999999999999:4000")
            .query(&mut con)
            .unwrap();
        let released: ReleaseReply = release(&held, "holder", 5, false).invoke(&mut con).unwrap();
        // Handed to "good" (a fresh counter starts at the server's clock).
        let ReleaseReply::Handed(notice) = released else {
            panic!("not handed over: {released:?}");
        };
        let fence: u64 = notice
            .strip_prefix("good:")
            .and_then(|rest| rest.strip_suffix(":4000"))
            .and_then(|fence| fence.parse().ok())
            .unwrap_or_else(|| panic!("notice {notice:?}"));
        assert!(fence > 5, "{notice:?}");
        let owner: String = redis::cmd("GET").arg(&held.lock).query(&mut con).unwrap();
        // The owner token, then the holder (none recorded) and the time.
        assert!(owner.starts_with("good\n\n"), "{owner:?}");
        let ttl: i64 = redis::cmd("PTTL").arg(&held.lock).query(&mut con).unwrap();
        assert!((1..=4_000).contains(&ttl), "lock PTTL {ttl}");
        let fence_ttl: i64 = redis::cmd("PTTL").arg(&held.fence).query(&mut con).unwrap();
        assert!((1..=64_000).contains(&fence_ttl), "fence PTTL {fence_ttl}");
    }
}

mod rwlock {
    //! The scripts called directly on a private redis-server: a bad
    //! argument is an error and changes nothing; a reader's release hands
    //! the lock to the queued writer, never its own key; a writer's release
    //! admits the readers before the next writer; dead entries are skipped.

    use super::*;
    use crate::backend::rwlock::*;
    use crate::backend::scripts::{RW_RELEASE, rw_release_call};
    use crate::backend::test_server::Server;

    fn keys_for(mode: RwMode) -> (Keys, RwKeys) {
        let mut keys = Keys::new("t:", "rw", Duration::from_secs(60));
        let rw = RwKeys::make(&mut keys, mode);
        (keys, rw)
    }

    /// Queues `token` as a waiter on `side` (`r` or `w`), live for a minute
    /// (or dead when `live` is false).
    fn enqueue(con: &mut Connection, keys: &Keys, token: &str, side: char, live: bool) {
        let deadline = if live { "99999999999999" } else { "1" };
        let _: () = redis::pipe()
            .cmd("RPUSH")
            .arg(&keys.queue)
            .arg(token)
            .cmd("HSET")
            .arg(&keys.waiters)
            .arg(token)
            .arg(format!("{deadline}:4000:1:{side}:{token}"))
            .query(con)
            .unwrap();
    }

    fn take(con: &mut Connection, mode: RwMode, token: &str, wait: Duration) -> Vec<i64> {
        let (keys, rw) = keys_for(mode);
        acquire_invocation(&keys, &rw, (token, Duration::from_secs(5), wait, false))
            .invoke(con)
            .unwrap()
    }

    fn release(con: &mut Connection, mode: RwMode, token: &str) -> redis::Value {
        let (keys, rw) = keys_for(mode);
        rw_release_call(&keys, &rw, token, 0)
            .invocation()
            .invoke(con)
            .unwrap()
    }

    fn queue(con: &mut Connection) -> Vec<String> {
        let (keys, _) = keys_for(RwMode::Read);
        redis::cmd("LRANGE")
            .arg(&keys.queue)
            .arg(0)
            .arg(-1)
            .query(con)
            .unwrap()
    }

    fn exists(con: &mut Connection, key: &str) -> bool {
        redis::cmd("EXISTS").arg(key).query::<i64>(con).unwrap() == 1
    }

    #[test]
    fn the_scripts_check_their_arguments_before_writing() {
        let server = Server::start();
        let mut con = server.try_connect().unwrap();
        let (keys, rw) = keys_for(RwMode::Read);
        assert_eq!(take(&mut con, RwMode::Read, "a", Duration::ZERO)[0], 1);
        enqueue(&mut con, &keys, "q", 'w', true);
        let before = snapshot(&mut con);
        let all = [
            rw.write.as_str(),
            &rw.readers,
            &keys.fence,
            &keys.queue,
            &keys.waiters,
        ];
        let mut refused = |script: &Script, keys: &[&str], args: &[&str]| {
            let mut invocation = script.prepare_invoke();
            for key in keys {
                invocation.key(*key);
            }
            for arg in args {
                invocation.arg(*arg);
            }
            let answer: redis::RedisResult<redis::Value> = invocation.invoke(&mut con);
            assert!(answer.is_err(), "{args:?} accepted: {answer:?}");
            unchanged(&before, &snapshot(&mut con), &format!("{args:?}"));
        };
        for bad in ["", "x", "-1", "1.5", "nan", "inf", "2592000001"] {
            refused(
                &ACQUIRE,
                &all,
                &["n", &format!("r:{bad}:60000:0:1:h"), "1000"],
            );
            refused(
                &ACQUIRE,
                &all,
                &["n", &format!("w:1000:{bad}:0:1:h"), "1000"],
            );
            refused(&ACQUIRE, &all, &["n", "r:1000:60000:0:1:h", bad]);
            let reader = rw.holder_key("a");
            let mut six = all.to_vec();
            six.push(&reader);
            refused(&RW_RELEASE, &six, &["a", "c", "0", bad, "0", "0"]);
        }
        let reader = rw.holder_key("a");
        let mut six = all.to_vec();
        six.push(&reader);
        for bad in ["", "x", "-1", "1.5", "nan", "inf", "9007199254740992"] {
            refused(&RW_RELEASE, &six, &["a", "c", "0", "60000", bad, "0"]);
        }
        // Not a side; not the write key first; not the caller's reader key.
        refused(&ACQUIRE, &all, &["n", "x:1000:60000:0:1:h", "1000"]);
        let mut shifted = all.to_vec();
        shifted.rotate_left(1);
        refused(&ACQUIRE, &shifted, &["n", "r:1000:60000:0:1:h", "1000"]);
        let other = rw.holder_key("someone-else");
        let mut six = all.to_vec();
        six.push(&other);
        refused(&RW_RELEASE, &six, &["a", "c", "0", "60000", "0", "0"]);
    }

    #[test]
    fn a_readers_release_hands_the_lock_to_the_queued_writer() {
        let server = Server::start();
        let mut con = server.try_connect().unwrap();
        let (keys, rw) = keys_for(RwMode::Read);
        let fence_before = take(&mut con, RwMode::Write, "w0", Duration::ZERO)[1];
        release(&mut con, RwMode::Write, "w0");
        assert_eq!(
            take(&mut con, RwMode::Read, "r1", Duration::ZERO),
            [1, fence_before]
        );
        assert_eq!(take(&mut con, RwMode::Read, "r2", Duration::ZERO)[0], 1);
        // A writer queues; a newcomer reader does not pass it.
        assert_eq!(
            take(&mut con, RwMode::Write, "w1", Duration::from_secs(60))[0],
            0
        );
        assert_eq!(take(&mut con, RwMode::Read, "r3", Duration::ZERO)[0], 0);
        assert_eq!(release(&mut con, RwMode::Read, "r1"), redis::Value::Int(1));
        assert!(!exists(&mut con, &rw.write));
        let mut listener = server.try_connect().unwrap();
        let mut pubsub = listener.as_pubsub();
        pubsub.subscribe(&keys.channel).unwrap();
        pubsub
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let notice = release(&mut con, RwMode::Read, "r2");
        let notice: String = redis::FromRedisValue::from_redis_value(notice).unwrap();
        assert!(notice.starts_with("w1:"), "{notice:?}");
        let heard: String = pubsub.get_message().unwrap().get_payload().unwrap();
        assert_eq!(heard, notice);
        let value: String = redis::cmd("GET").arg(&rw.write).query(&mut con).unwrap();
        assert!(value.starts_with("w1\n"), "{value:?}");
        assert!(!exists(&mut con, &rw.holder_key("w1")));
        assert!(queue(&mut con).is_empty());
        // Asked again, the writer finds it, with a token past the last.
        let reply = take(&mut con, RwMode::Write, "w1", Duration::ZERO);
        assert_eq!(reply[0], 1);
        assert!(reply[1] > fence_before);
    }

    #[test]
    fn a_writers_release_admits_the_leading_live_readers() {
        let server = Server::start();
        let mut con = server.try_connect().unwrap();
        let (keys, rw) = keys_for(RwMode::Read);
        let written = take(&mut con, RwMode::Write, "w0", Duration::ZERO)[1];
        enqueue(&mut con, &keys, "dead", 'w', false);
        enqueue(&mut con, &keys, "r1", 'r', true);
        enqueue(&mut con, &keys, "r2", 'r', true);
        enqueue(&mut con, &keys, "w1", 'w', true);
        enqueue(&mut con, &keys, "r3", 'r', true);
        let mut listener = server.try_connect().unwrap();
        let mut pubsub = listener.as_pubsub();
        pubsub.subscribe(&keys.channel).unwrap();
        pubsub
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        release(&mut con, RwMode::Write, "w0");
        for reader in ["r1", "r2"] {
            let heard: String = pubsub.get_message().unwrap().get_payload().unwrap();
            assert!(
                heard.starts_with(&format!("{reader}:{written}:")),
                "{heard:?}"
            );
            assert!(exists(&mut con, &rw.holder_key(reader)));
        }
        assert!(!exists(&mut con, &rw.write));
        assert_eq!(queue(&mut con), ["w1", "r3"]);
        let members: Vec<String> = redis::cmd("ZRANGE")
            .arg(&rw.readers)
            .arg(0)
            .arg(-1)
            .query(&mut con)
            .unwrap();
        assert_eq!(members.len(), 2, "{members:?}");
        let ttl: i64 = redis::cmd("PTTL").arg(&rw.readers).query(&mut con).unwrap();
        assert!((1..=4_000).contains(&ttl), "readers index PTTL {ttl}");
        // A reader whose lease ended (its key gone, its end passed) is
        // dropped from the index.
        let _: () = redis::pipe()
            .cmd("DEL")
            .arg(rw.holder_key("r1"))
            .cmd("ZADD")
            .arg(&rw.readers)
            .arg(1)
            .arg("r1")
            .query(&mut con)
            .unwrap();
        release(&mut con, RwMode::Read, "r2");
        let value: String = redis::cmd("GET").arg(&rw.write).query(&mut con).unwrap();
        assert!(value.starts_with("w1\n"), "{value:?}");
        assert!(!exists(&mut con, &rw.readers));
    }
}

mod semaphore {
    //! The scripts called directly on a private redis-server: a bad
    //! argument is an error and changes nothing; a mismatch of permits
    //! writes nothing; free permits go to the oldest live waiter.

    use super::*;
    use crate::backend::semaphore::*;
    use crate::backend::test_server::Server;

    #[test]
    fn max_permits_is_the_rust_limit() {
        let max = crate::backend::scripts::lua!("sem_helpers.lua")
            .lines()
            .find_map(|line| line.strip_prefix("local MAX_PERMITS = "));
        assert_eq!(max, Some(MAX_PERMITS.to_string().as_str()));
    }

    /// A semaphore of 2: permit 0 held by `holder`, permit 1 free, `waiter`
    /// queued.
    fn setup(con: &mut Connection) -> (Keys, Permits) {
        let mut keys = Keys::new("t:", "s", Duration::from_secs(60));
        let permits = Permits::make(&mut keys, 2);
        let _: () = redis::pipe()
            .cmd("SET")
            .arg(permits.slot(0).unwrap())
            .arg("holder\nh\n1")
            .arg("PX")
            .arg(5_000)
            .cmd("SET")
            .arg(&permits.record)
            .arg(2)
            .arg("PX")
            .arg(60_000)
            .cmd("RPUSH")
            .arg(&keys.queue)
            .arg("waiter")
            .cmd("HSET")
            .arg(&keys.waiters)
            .arg("waiter")
            .arg("99999999999999:4000:1:host\n7\nw")
            .query(con)
            .unwrap();
        (keys, permits)
    }

    fn call(
        con: &mut Connection,
        script: &Script,
        keys: &[&str],
        args: &[&str],
    ) -> redis::RedisResult<redis::Value> {
        let mut invocation = script.prepare_invoke();
        for key in keys {
            invocation.key(*key);
        }
        for arg in args {
            invocation.arg(*arg);
        }
        invocation.invoke(con)
    }

    #[test]
    fn the_scripts_check_their_arguments_before_writing() {
        let server = Server::start();
        let mut con = server.try_connect().unwrap();
        let (keys, permits) = setup(&mut con);
        let all: Vec<&str> = [
            keys.fence.as_str(),
            &keys.queue,
            &keys.waiters,
            &permits.record,
        ]
        .into_iter()
        .chain(permits.slots.iter().map(String::as_str))
        .collect();
        let short = &all[..all.len() - 1];
        let channel = keys.channel.as_str();
        let before = snapshot(&mut con);
        let mut refused = |keys: &[&str], script: &Script, args: &[&str]| {
            let answer = call(&mut con, script, keys, args);
            assert!(answer.is_err(), "{args:?} accepted: {answer:?}");
            unchanged(&before, &snapshot(&mut con), &format!("{args:?}"));
        };
        for bad in ["", "x", "-1", "1.5", "nan", "inf", "2592000001"] {
            let lease = format!("{bad}:60000:0:1:h");
            refused(&all, &ACQUIRE, &["n", &lease, "1000", "2", channel]);
            let retention = format!("1000:{bad}:0:1:h");
            refused(&all, &ACQUIRE, &["n", &retention, "1000", "2", channel]);
            refused(
                &all,
                &ACQUIRE,
                &["n", "1000:60000:0:1:h", bad, "2", channel],
            );
            refused(&all, &GIVE_BACK, &["holder", bad, "2", channel]);
        }
        for bad in ["", "0", "-1", "1.5", "3", "257", "nan"] {
            refused(
                &all,
                &ACQUIRE,
                &["n", "1000:60000:0:1:h", "1000", bad, channel],
            );
            refused(&all, &GIVE_BACK, &["holder", "60000", bad, channel]);
        }
        // One key per permit.
        refused(
            short,
            &ACQUIRE,
            &["n", "1000:60000:0:1:h", "1000", "2", channel],
        );
        refused(short, &GIVE_BACK, &["holder", "60000", "2", channel]);
        // No channel.
        refused(&all, &ACQUIRE, &["n", "1000:60000:0:1:h", "1000", "2"]);
        refused(&all, &GIVE_BACK, &["holder", "60000", "2"]);
        refused(
            &all,
            &ACQUIRE,
            &["n", "1000:60000:0:1", "1000", "2", channel],
        );
        // Looking at every permit: 0 or 1, and then every permit's key.
        for bad in ["", "2", "x", "true"] {
            refused(
                &all,
                &ACQUIRE,
                &["n", "1000:60000:0:1:h", "1000", "2", channel, bad],
            );
        }
        refused(
            &all,
            &ACQUIRE,
            &["n", "1000:60000:0:1:h", "1000", "2", channel, "1"],
        );
    }

    #[test]
    fn a_mismatch_writes_nothing() {
        let server = Server::start();
        let mut con = server.try_connect().unwrap();
        let _ = setup(&mut con);
        let mut three = Keys::new("t:", "s", Duration::from_secs(60));
        let permits = Permits::make(&mut three, 3);
        let before = snapshot(&mut con);
        let reply: Vec<i64> = acquire_invocation(
            &permits,
            &three,
            ("n", Duration::from_secs(1), Duration::from_secs(1), false),
            false,
        )
        .invoke(&mut con)
        .unwrap();
        assert_eq!(reply, [-1, 2]);
        unchanged(&before, &snapshot(&mut con), "the call");
    }

    /// A free permit goes to the oldest waiter whose entry is valid and
    /// whose deadline has not passed, not to the caller behind it.
    #[test]
    fn a_free_permit_goes_to_the_oldest_live_waiter() {
        let server = Server::start();
        let mut con = server.try_connect().unwrap();
        let (keys, permits) = setup(&mut con);
        // Before `waiter`: one whose deadline passed, one malformed.
        let _: () = redis::pipe()
            .cmd("LPUSH")
            .arg(&keys.queue)
            .arg("bad")
            .arg("late")
            .cmd("HSET")
            .arg(&keys.waiters)
            .arg("late")
            .arg("1:4000:1:w")
            .arg("bad")
            .arg("99999999999999:1e17:1:w")
            .query(&mut con)
            .unwrap();
        let mut listener = server.try_connect().unwrap();
        let mut pubsub = listener.as_pubsub();
        pubsub.subscribe(&keys.channel).unwrap();
        pubsub
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let reply: Vec<i64> = acquire_invocation(
            &permits,
            &keys,
            (
                "newcomer",
                Duration::from_secs(1),
                Duration::from_secs(1),
                false,
            ),
            false,
        )
        .invoke(&mut con)
        .unwrap();
        assert_eq!(reply[0], 0, "the newcomer passed the waiter: {reply:?}");
        let value: String = redis::cmd("GET")
            .arg(permits.slot(1).unwrap())
            .query(&mut con)
            .unwrap();
        let notice: String = pubsub.get_message().unwrap().get_payload().unwrap();
        assert!(
            notice.starts_with("waiter:") && notice.ends_with(":4000"),
            "{notice:?}"
        );
        // A holder's value, with the notice's fencing token and the number
        // of permits.
        let lines: Vec<&str> = value.split('\n').collect();
        assert_eq!(lines.len(), 7, "{value:?}");
        assert_eq!(lines[..4], ["waiter", "host", "7", "w"], "{value:?}");
        assert!(lines[4].parse::<u64>().is_ok(), "{value:?}");
        assert_eq!(lines[5], notice.split(':').nth(1).unwrap(), "{value:?}");
        assert_eq!(lines[6], "2", "{value:?}");
        // The newcomer is queued now, with an expiry on every key.
        let queue: Vec<String> = redis::cmd("LRANGE")
            .arg(&keys.queue)
            .arg(0)
            .arg(-1)
            .query(&mut con)
            .unwrap();
        assert_eq!(queue, ["newcomer"]);
        for (key, (_, _, ttl)) in snapshot(&mut con) {
            assert!(ttl >= 0, "{key} has no expiry");
        }
        // Asked again, the waiter finds its permit, with the fencing token
        // its value carries since the hand-over.
        let reply: Vec<i64> = acquire_invocation(
            &permits,
            &keys,
            ("waiter", Duration::from_secs(1), Duration::ZERO, false),
            false,
        )
        .invoke(&mut con)
        .unwrap();
        let handed: i64 = notice.split(':').nth(1).unwrap().parse().unwrap();
        assert_eq!((reply[0], reply[2]), (1, 1));
        assert_eq!(reply[1], handed);
        // Its give-back hands the permit to the newcomer.
        let given: i64 = give_back_invocation(&permits, &keys, "waiter")
            .invoke(&mut con)
            .unwrap();
        assert_eq!(given, 1);
        let value: String = redis::cmd("GET")
            .arg(permits.slot(1).unwrap())
            .query(&mut con)
            .unwrap();
        assert!(value.starts_with("newcomer\n"), "{value:?}");
        assert!(value.ends_with("\n2"), "{value:?}");
    }

    fn get(con: &mut Connection, key: &str) -> Option<String> {
        redis::cmd("GET").arg(key).query(con).unwrap()
    }

    /// A caller asking for fewer permits than a semaphore whose record is
    /// gone and whose holders are all beyond that number is told to look at
    /// every permit (nothing written), and is then refused.
    #[test]
    fn a_caller_asking_fewer_looks_at_every_permit() {
        let server = Server::start();
        let mut con = server.try_connect().unwrap();
        let mut five = Keys::new("t:", "s", Duration::from_secs(60));
        let five = Permits::make(&mut five, 5);
        let mut two = Keys::new("t:", "s", Duration::from_secs(60));
        two.holder = Arc::from("h\np\nl");
        let permits = Permits::make(&mut two, 2);
        let attempt = ("n", Duration::from_secs(1), Duration::from_secs(1), false);
        // Nobody holds a permit (no fence counter): one request, no look at
        // every permit.
        let reply: Vec<i64> = acquire_invocation(&permits, &two, attempt, false)
            .invoke(&mut con)
            .unwrap();
        assert_eq!(reply[0], 1, "{reply:?}");
        let _: () = redis::cmd("FLUSHALL").query(&mut con).unwrap();
        // The counter a held permit keeps alive.
        let _: () = redis::cmd("SET")
            .arg(&two.fence)
            .arg(7)
            .arg("PX")
            .arg(5_000)
            .query(&mut con)
            .unwrap();
        for (held, answer) in [
            ("holder\nh\np\nl\n1\n7\n5", [-1, 5]),
            // Written by an older version: no number.
            ("holder\nh\np\nl\n1\n7", [-1, -1]),
        ] {
            let _: () = redis::cmd("SET")
                .arg(five.slot(3).unwrap())
                .arg(held)
                .arg("PX")
                .arg(5_000)
                .query(&mut con)
                .unwrap();
            let before = snapshot(&mut con);
            let reply: Vec<i64> = acquire_invocation(&permits, &two, attempt, false)
                .invoke(&mut con)
                .unwrap();
            assert_eq!(reply, [-2, 0]);
            unchanged(&before, &snapshot(&mut con), "the call");
            let reply: Vec<i64> = acquire_invocation(&permits, &two, attempt, true)
                .invoke(&mut con)
                .unwrap();
            assert_eq!(reply, answer);
            unchanged(&before, &snapshot(&mut con), "the call");
        }
        // Nothing held beyond: granted, with the number recorded.
        let _: () = redis::cmd("DEL")
            .arg(five.slot(3).unwrap())
            .query(&mut con)
            .unwrap();
        let reply: Vec<i64> = acquire_invocation(&permits, &two, attempt, true)
            .invoke(&mut con)
            .unwrap();
        assert_eq!((reply[0], reply[2]), (1, 0), "{reply:?}");
        let value = get(&mut con, permits.slot(0).unwrap()).unwrap();
        assert!(value.ends_with(&format!("\n{}\n2", reply[1])), "{value:?}");
        assert_eq!(get(&mut con, &permits.record).as_deref(), Some("2"));
        // A caller of 5 sees the number in the permit, record or none.
        let _: () = redis::cmd("DEL")
            .arg(&permits.record)
            .query(&mut con)
            .unwrap();
        let other = ("o", attempt.1, attempt.2, false);
        let reply: Vec<i64> = acquire_invocation(&five, &two, other, false)
            .invoke(&mut con)
            .unwrap();
        assert_eq!(reply, [-1, 2]);
        // A caller of 2 is served without looking further.
        let reply: Vec<i64> =
            acquire_invocation(&permits, &two, ("m", attempt.1, attempt.2, false), false)
                .invoke(&mut con)
                .unwrap();
        assert_eq!((reply[0], reply[2]), (1, 1), "{reply:?}");
    }

    /// An operator's forced release finds the token in the permit's value,
    /// whatever follows it, and hands the permit on with those lines.
    #[test]
    fn a_forced_permit_keeps_its_fields_when_handed_on() {
        let server = Server::start();
        let mut con = server.try_connect().unwrap();
        let (keys, permits) = setup(&mut con);
        let _: () = redis::cmd("SET")
            .arg(permits.slot(0).unwrap())
            .arg("holder\nh\np\nl\n1\n42\n2\nmore")
            .arg("PX")
            .arg(5_000)
            .query(&mut con)
            .unwrap();
        let seen: SemaphoreSeen = permits
            .invocation(&INSPECT, &keys)
            .invoke(&mut con)
            .unwrap();
        assert_eq!(seen.held.len(), 1, "{seen:?}");
        let permit = &seen.held[0];
        assert_eq!(permit.seen.who, "h\np\nl\n1");
        assert_eq!((permit.seen.fence, permit.permits), (Some(42), Some(2)));
        let mut force = permits.invocation(&FORCE_RELEASE, &keys);
        force.arg(42).arg(60_000).arg(2).arg(&keys.channel);
        let released: Released = force.invoke(&mut con).unwrap();
        assert_eq!(released.0.as_deref(), Some("h\np\nl\n1"));
        let value = get(&mut con, permits.slot(0).unwrap()).unwrap();
        let lines: Vec<&str> = value.split('\n').collect();
        assert_eq!(lines.len(), 8, "{value:?}");
        assert_eq!(lines[..4], ["waiter", "host", "7", "w"], "{value:?}");
        assert!(lines[5].parse::<u64>().unwrap() > 42, "{value:?}");
        assert_eq!(&lines[6..], ["2", "more"], "{value:?}");
        // The token no permit holds any more frees nothing.
        let released: Released = force.invoke(&mut con).unwrap();
        assert_eq!(released.0, None);
    }
}

mod set {
    use crate::backend::lockset::*;
    use crate::backend::test_server::Server;

    fn keys_of(con: &mut redis::Connection) -> Vec<String> {
        let mut keys: Vec<String> = redis::cmd("KEYS").arg("*").query(con).unwrap();
        keys.sort();
        keys
    }

    #[test]
    fn the_set_scripts_check_their_arguments_before_writing() {
        let server = Server::start();
        let mut con = server.connect();
        let keys = [
            "t:{a}",
            "t:{a}:fence",
            "t:{a}:queue",
            "t:{a}:waiters",
            "t:{b}",
            "t:{b}:fence",
            "t:{b}:queue",
            "t:{b}:waiters",
        ];
        let bad_second = [
            "0:0:1:h",
            "x:0:1:h",
            "1.5:0:1:h",
            "-1:0:1:h",
            "2592000001:0:1:h",
            "100:-1:1:h",
            "100:0:h",
            "",
        ];
        for second in bad_second {
            let reply: redis::RedisResult<redis::Value> = ACQUIRE_SET
                .key(&keys[..])
                .arg("tok")
                .arg(second)
                .arg(100)
                .arg("0")
                .arg("c1")
                .arg("c2")
                .invoke(&mut con);
            assert!(reply.is_err(), "{second:?}: {reply:?}");
            assert!(keys_of(&mut con).is_empty(), "{second:?} wrote something");
        }
        for wait in ["-1", "x", "0.5", "2592000001"] {
            let reply: redis::RedisResult<redis::Value> = ACQUIRE_SET
                .key(&keys[..])
                .arg("tok")
                .arg("100:0:1:h")
                .arg(wait)
                .arg("0")
                .arg("c1")
                .arg("c2")
                .invoke(&mut con);
            assert!(reply.is_err(), "wait {wait:?}: {reply:?}");
            assert!(
                keys_of(&mut con).is_empty(),
                "wait {wait:?} wrote something"
            );
        }
        let reply: redis::RedisResult<redis::Value> = ACQUIRE_SET
            .key(&keys[..6])
            .arg("tok")
            .arg("100:0:1:h")
            .arg(0)
            .arg("0")
            .arg("c1")
            .arg("c2")
            .invoke(&mut con);
        assert!(reply.is_err(), "six keys: {reply:?}");
        assert!(keys_of(&mut con).is_empty());

        for flag in ["2", "", "yes"] {
            let reply: redis::RedisResult<redis::Value> = ACQUIRE_SET
                .key(&keys[..])
                .arg("tok")
                .arg("100:0:1:h")
                .arg(100)
                .arg(flag)
                .arg("c1")
                .arg("c2")
                .invoke(&mut con);
            assert!(reply.is_err(), "flag {flag:?}: {reply:?}");
            assert!(keys_of(&mut con).is_empty());
        }

        // Taken, then a give-back with a bad retention changes nothing.
        let taken: Vec<i64> = ACQUIRE_SET
            .key(&keys[..])
            .arg("tok")
            .arg("10000:1000:1:h\n1\nl")
            .arg(0)
            .arg("0")
            .arg("c1")
            .arg("c2")
            .invoke(&mut con)
            .unwrap();
        assert_eq!(taken.len(), 3);
        assert_eq!(taken[0], 1);
        let before = keys_of(&mut con);
        for retention in ["-1", "x", "2592000001"] {
            let reply: redis::RedisResult<i64> = GIVE_BACK_SET
                .key(&keys[..])
                .arg("tok")
                .arg(retention)
                .arg("c1")
                .arg("c2")
                .invoke(&mut con);
            assert!(reply.is_err(), "retention {retention:?}: {reply:?}");
            assert_eq!(keys_of(&mut con), before);
        }
        // Sent twice: the second run takes nothing again (same counters).
        let again: Vec<i64> = ACQUIRE_SET
            .key(&keys[..])
            .arg("tok")
            .arg("10000:1000:1:h\n1\nl")
            .arg(0)
            .arg("0")
            .arg("c1")
            .arg("c2")
            .invoke(&mut con)
            .unwrap();
        assert_eq!(again, taken);
        let deleted: i64 = GIVE_BACK_SET
            .key(&keys[..])
            .arg("tok")
            .arg(1000)
            .arg("c1")
            .arg("c2")
            .invoke(&mut con)
            .unwrap();
        assert_eq!(deleted, 2);
        // Only the counters are left, each with a time to live.
        for key in keys_of(&mut con) {
            assert!(key.ends_with(":fence"), "{key}");
            let ttl: i64 = redis::cmd("PTTL").arg(&key).query(&mut con).unwrap();
            assert!(ttl > 0, "{key} has no expiry");
        }
    }
}
