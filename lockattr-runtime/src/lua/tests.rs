//! The scripts called directly on a private redis-server (never 6379),
//! the way a caller that bypasses the API, or a bug in it, would: a bad
//! argument is an error and changes nothing in Redis, and each kind's
//! hand-overs write what its waiters expect.

use std::collections::BTreeMap;

use std::sync::Arc;
use std::time::Duration;

use redis::{Connection, FromRedisValue, PubSub, Script, Value};

use crate::backend::scripts::{LIBRARY, Lua, function_missing};

use crate::backend::test_server::Server;
use crate::layout::{Keys, MAX_PERMITS, Permits, RwKeys, RwMode};

/// What a test sees of Redis: every key, with its type, its serialized
/// value and its time to live in ms (-1: none).
type Snapshot = BTreeMap<String, (String, Vec<u8>, i64)>;

fn snapshot(con: &mut Connection) -> Snapshot {
    let keys: Vec<String> = query(con, &["KEYS", "*"]);
    keys.into_iter()
        .map(|key| {
            let commands: [&[&str]; 3] = [&["TYPE", &key], &["DUMP", &key], &["PTTL", &key]];
            let seen = pipeline(con, &commands);
            (key, seen)
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
        let what = format!("{call} changed {key}");
        assert_eq!((kind, value), (kind_after, value_after), "{what}");
        assert_eq!(*ttl < 0, *ttl_after < 0, "{what}'s expiry");
        assert!(ttl_after <= ttl, "{call} raised the expiry of {key}");
    }
}

/// A private server, a connection to it, and what `setup` made there.
fn start<T>(setup: impl FnOnce(&mut Connection) -> T) -> (Server, Connection, T) {
    let server = Server::start();
    let mut con = server.connect();
    let made = setup(&mut con);
    (server, con, made)
}

/// Calls the script with these keys and arguments, as FCALL of its
/// function in the library (loaded when the server lacks it), as a server
/// of Redis 7 or later is sent it. (An [`Invocation`]'s `invoke` sends
/// EVALSHA, so the tests go both ways.)
///
/// [`Invocation`]: crate::backend::scripts::Invocation
fn call<T: FromRedisValue>(
    con: &mut Connection,
    script: &Lua,
    keys: &[&str],
    args: &[&str],
) -> redis::RedisResult<T> {
    let mut fcall = redis::cmd("FCALL");
    fcall
        .arg(script.function())
        .arg(keys.len())
        .arg(keys)
        .arg(args);
    match fcall.query(con) {
        Err(e) if function_missing(&e) => {
            redis::cmd("FUNCTION")
                .arg("LOAD")
                .arg(LIBRARY)
                .query::<String>(con)?;
            fcall.query(con)
        }
        answer => answer,
    }
}

/// The same call as [`call`], sent as EVAL of the script's source.
fn eval<T: FromRedisValue>(
    con: &mut Connection,
    script: &Lua,
    keys: &[&str],
    args: &[&str],
) -> redis::RedisResult<T> {
    Script::new(script.source).key(keys).arg(args).invoke(con)
}

/// The code and message of the error `answer`, as the server wrote them.
fn error_text(answer: redis::RedisResult<Value>) -> Option<(String, String)> {
    let errors = answer.err()?.into_server_errors()?;
    let (_, error) = errors.first()?;
    Some((
        error.code().to_owned(),
        error.details().unwrap_or_default().to_owned(),
    ))
}

/// Calls the script with these keys and arguments; asserts that Redis
/// answered an error, the same to FCALL and to EVAL, and that nothing was
/// written.
fn refused(con: &mut Connection, script: &Lua, keys: &[&str], args: &[&str]) {
    let before = snapshot(con);
    let answer = call::<Value>(con, script, keys, args);
    let what = format!("{args:?} on {keys:?}");
    assert!(answer.is_err(), "{what} was accepted: {answer:?}");
    let evaluated = eval::<Value>(con, script, keys, args);
    assert_eq!(
        error_text(answer),
        error_text(evaluated),
        "{what}: FCALL and EVAL answered other errors"
    );
    unchanged(&before, &snapshot(con), &what);
}

/// Runs one command, given as its words.
fn query<T: FromRedisValue>(con: &mut Connection, words: &[&str]) -> T {
    redis::cmd(words[0]).arg(&words[1..]).query(con).unwrap()
}

/// Runs the commands, each given as its words, in one pipeline.
fn pipeline<T: FromRedisValue>(con: &mut Connection, commands: &[&[&str]]) -> T {
    let mut pipe = redis::pipe();
    for words in commands {
        pipe.cmd(words[0]).arg(&words[1..]);
    }
    pipe.query(con).unwrap()
}

fn write(con: &mut Connection, commands: &[&[&str]]) {
    pipeline::<()>(con, commands);
}

fn get(con: &mut Connection, key: &str) -> Option<String> {
    query(con, &["GET", key])
}

fn pttl(con: &mut Connection, key: &str) -> i64 {
    query(con, &["PTTL", key])
}

/// `listener` subscribed to `channel`, waiting 5 s at most for a message.
fn listen<'a>(listener: &'a mut Connection, channel: &str) -> PubSub<'a> {
    let mut pubsub = listener.as_pubsub();
    pubsub.subscribe(channel).unwrap();
    let timeout = Some(Duration::from_secs(5));
    pubsub.set_read_timeout(timeout).unwrap();
    pubsub
}

/// The next message heard.
fn heard(pubsub: &mut PubSub) -> String {
    pubsub.get_message().unwrap().get_payload().unwrap()
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

/// Numbers that are not a fencing token (nor 0, where 0 is accepted).
const NOT_TOKEN: &[&str] = &[
    "abc",
    "",
    "-3",
    "1.5",
    "1e30",
    "9007199254740992",
    "nan",
    "inf",
];

mod lock {
    //! The lock's scripts: a bad argument is an error, and changes nothing
    //! in Redis; a release reads the counter and the queue as it must.

    use super::*;
    use crate::backend::scripts::*;

    /// The lock "held" (token `holder`, 3 s left, counter 5 with a time to
    /// live, one waiter queued), and the free lock "free" with no keys.
    fn setup(con: &mut Connection) -> (Keys, Keys) {
        let held = Keys::new("t:", "held", Duration::from_secs(60));
        let free = Keys::new("t:", "free", Duration::from_secs(60));
        write(
            con,
            &[
                &["FLUSHALL"],
                &["SET", &held.lock, "holder", "PX", "3000"],
                &["SET", &held.fence, "5", "PX", "60000"],
                &["RPUSH", &held.queue, "waiter"],
                &["HSET", &held.waiters, "waiter", "99999999999999:1000"],
                &["PEXPIRE", &held.queue, "50000"],
                &["PEXPIRE", &held.waiters, "50000"],
            ],
        );
        (held, free)
    }

    /// The lock's four keys.
    fn four(keys: &Keys) -> [&str; 4] {
        [&keys.lock, &keys.fence, &keys.queue, &keys.waiters]
    }

    /// The keys EXTEND and RENEW take for a lock: holder, counter, index.
    fn three(keys: &Keys) -> [&str; 3] {
        [&keys.lock, &keys.fence, &keys.lock]
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
        let (_server, mut con, (held, free)) = start(setup);
        for keys in [&held, &free] {
            let k = four(keys);
            let mut refuse = |args: &[&str]| refused(&mut con, &ACQUIRE, &k, args);
            for bad in NOT_MS.iter().chain(&["0"]) {
                refuse(&["newcomer", &format!("{bad}:60000:0:1:"), "5000"]);
            }
            for bad in NOT_MS {
                refuse(&["newcomer", "1000:60000:1:1:", bad]);
                refuse(&["newcomer", &format!("1000:{bad}:0:1:"), "5000"]);
                let holder = format!("1000:{bad}:0:1:host\n1\nlabel");
                refuse(&["newcomer", &holder, "5000"]);
            }
            // Not `<lease>:<retention>:<0 or 1>:<since>:<holder>`.
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
                refuse(&["newcomer", lease, "5000"]);
            }
            refuse(&["newcomer", "1000:60000:0:1:"]);
        }
    }

    #[test]
    fn release_checks_its_arguments_before_writing() {
        let (_server, mut con, (held, _)) = start(setup);
        let k = four(&held);
        let mut refuse = |args: &[&str]| refused(&mut con, &RELEASE, &k, args);
        let channel = &held.channel;
        for token in ["holder", "waiter"] {
            for bad in NOT_MS {
                refuse(&[token, &format!("0:{bad}:5:0:0:{channel}")]);
                refuse(&[token, &format!("0:1000:5:{bad}:0:{channel}")]);
            }
            for bad in NOT_TOKEN {
                refuse(&[token, &format!("0:1000:{bad}:0:0:{channel}")]);
            }
        }
        // Not `<notify>:<retention>:<fencing token>:<barge>:<shared>:<channel>`.
        for packed in ["", "0:1000:5:0:0", "0:1000:5", channel.as_str()] {
            refuse(&["holder", packed]);
        }
        refuse(&["holder"]);
    }

    /// A release by a token that no longer owns the lock says whether the
    /// counter is still near the token's fencing token (the lock was
    /// released, or handed over, since), or not (started again from the
    /// clock after Redis lost the lock, or many acquisitions since).
    #[test]
    fn a_release_that_finds_the_lock_gone_tells_a_recent_counter() {
        let (_server, mut con, (held, _)) = start(setup);
        let answer = |con: &mut Connection, granted: u64| -> i64 {
            release(&held, "gone", granted, false, None)
                .invoke(con)
                .unwrap()
        };
        // The counter is 5.
        assert_eq!(answer(&mut con, 5), 2);
        assert_eq!(answer(&mut con, 4), 2, "one acquisition since");
        assert_eq!(answer(&mut con, 6), 0, "a counter below the token");
        assert_eq!(answer(&mut con, 0), 0, "no fencing token given");
        write(&mut con, &[&["SET", &held.fence, "1005"]]);
        assert_eq!(answer(&mut con, 5), 2, "a thousand acquisitions since");
        write(&mut con, &[&["SET", &held.fence, "1006"]]);
        assert_eq!(answer(&mut con, 5), 0, "more than a thousand since");
        write(&mut con, &[&["DEL", &held.fence]]);
        assert_eq!(answer(&mut con, 5), 0, "the counter is gone");
        let owner = get(&mut con, &held.lock);
        assert_eq!(
            owner.as_deref(),
            Some("holder"),
            "the owner's lock is left alone"
        );
    }

    #[test]
    fn extend_checks_its_arguments_before_writing() {
        let (_server, mut con, (held, _)) = start(setup);
        let k = three(&held);
        let channel = held.channel.as_str();
        let mut refuse = |keys: &[&str], args: &[&str]| refused(&mut con, &EXTEND, keys, args);
        for mode in ["add", "set", "raise", "hold"] {
            for bad in NOT_MS.iter().chain(&["0"]) {
                refuse(&k, &["holder", bad, mode, "60000", "60000", channel]);
                refuse(&k, &["holder", "1000", mode, bad, "60000", channel]);
            }
            for bad in NOT_MS {
                refuse(&k, &["holder", "1000", mode, "60000", bad, channel]);
            }
            // The holder key alone.
            refuse(
                &k[..1],
                &["holder", "1000", mode, "60000", "60000", channel],
            );
        }
        // Hold without a channel; modes that are not one.
        for mode in ["hold", "", "ADD", "replace"] {
            refuse(&k, &["holder", "1000", mode, "60000", "60000"]);
        }
    }

    #[test]
    fn hold_sets_the_time_left_and_tells_the_waiters() {
        let (server, mut con, (held, _)) = start(setup);
        let mut listener = server.connect();
        let mut pubsub = listen(&mut listener, &held.channel);
        let hold = |con: &mut Connection, token: &str, ms: u64| -> i64 {
            let max = Duration::from_secs(60);
            extend(&held, token, ms, "hold", max).invoke(con).unwrap()
        };
        // Longer than the 3 s left: a hold may keep the lock past its lease.
        assert_eq!(hold(&mut con, "holder", 20_000), 20_000);
        let ttl = pttl(&mut con, &held.lock);
        assert!((19_000..=20_000).contains(&ttl), "lock PTTL {ttl}");
        assert_eq!(heard(&mut pubsub), "-:0:20000");
        // Another owner's lock: -1, nothing changed, nobody told.
        let before = snapshot(&mut con);
        assert_eq!(hold(&mut con, "stranger", 1_000), -1);
        unchanged(&before, &snapshot(&mut con), "EXTEND hold by a stranger");
        write(&mut con, &[&["PUBLISH", &held.channel, "marker"]]);
        assert_eq!(
            heard(&mut pubsub),
            "marker",
            "a refused hold published a notice"
        );
    }

    #[test]
    fn renew_checks_every_lease_before_writing() {
        let (_server, mut con, (held, _)) = start(setup);
        let other = Keys::new("t:", "other", Duration::ZERO);
        write(&mut con, &[&["SET", &other.lock, "other", "PX", "3000"]]);
        let k = [three(&held), three(&other)].concat();
        let mut refuse = |keys: &[&str], args: &[&str]| refused(&mut con, &RENEW, keys, args);
        for bad in NOT_MS {
            // The first lease alone would be renewed: it must not be.
            refuse(&k, &["60000", "holder", "20000", "other", bad]);
            refuse(&k, &[bad, "holder", "20000", "other", "20000"]);
        }
        // Short of a lease; a key short.
        refuse(&k, &["60000", "holder", "20000", "other"]);
        refuse(&k[..4], &["60000", "holder", "20000", "other", "20000"]);
    }

    #[test]
    fn raise_fence_checks_its_arguments_before_writing() {
        let (_server, mut con, (held, _)) = start(setup);
        let k = [held.lock.as_str(), &held.fence];
        for bad in NOT_TOKEN.iter().chain(&["0"]) {
            refused(&mut con, &RAISE_FENCE, &k, &["holder", bad, "60000"]);
        }
        for bad in NOT_MS {
            refused(&mut con, &RAISE_FENCE, &k, &["holder", "100", bad]);
        }
    }

    #[test]
    fn force_unlock_checks_its_arguments_before_writing() {
        let (_server, mut con, (held, _)) = start(setup);
        let (k, channel) = (four(&held), held.channel.as_str());
        let mut refuse = |args: &[&str]| refused(&mut con, &FORCE_UNLOCK, &k, args);
        for bad in NOT_TOKEN {
            refuse(&[channel, "0", "60000", bad]);
        }
        for bad in NOT_MS {
            refuse(&[channel, "0", bad, "0"]);
        }
        // Without an expected token.
        refuse(&[channel, "0", "60000"]);
    }

    /// A successor of the releasing process (see `crate::local`): the lock
    /// when nobody is queued, in the same call; otherwise queued last, and
    /// the oldest waiter served.
    #[test]
    fn a_release_hands_the_lock_to_its_successor_only_when_nobody_is_queued() {
        use crate::backend::shared::Successor;
        let (_server, mut con, (held, _)) = start(setup);
        let next = Successor {
            token: "next",
            lease: Duration::from_millis(4000),
            wait: Duration::from_millis(9000),
            holder: "host\n7\nlabel",
        };
        // "waiter" of another process is queued: it is served, and the
        // successor queued after it, with its own lease and holder.
        let released: ReleaseReply = release(&held, "holder", 5, false, Some(&next))
            .invoke(&mut con)
            .unwrap();
        let ReleaseReply::Handed(notice) = released else {
            panic!("not handed over: {released:?}");
        };
        assert!(notice.starts_with("waiter:6:"), "{notice:?}");
        let queue: Vec<String> = query(&mut con, &["LRANGE", &held.queue, "0", "-1"]);
        assert_eq!(queue, ["next"]);
        let entry: String = query(&mut con, &["HGET", &held.waiters, "next"]);
        let fields: Vec<&str> = entry.splitn(4, ':').collect();
        assert_eq!(fields[1], "4000", "{entry:?}");
        assert_eq!(fields[3], "host\n7\nlabel", "{entry:?}");
        assert!(pttl(&mut con, &held.queue) > 0 && pttl(&mut con, &held.waiters) > 0);
        // Its release, with the queue empty once "next" leaves it: the
        // successor "after" takes the lock at once, with the next fencing
        // token and its lease, and is named in the notice.
        write(&mut con, &[&["DEL", &held.queue, &held.waiters]]);
        let after = Successor {
            token: "after",
            ..next
        };
        let released: ReleaseReply = release(&held, "waiter", 6, false, Some(&after))
            .invoke(&mut con)
            .unwrap();
        let ReleaseReply::Handed(notice) = released else {
            panic!("not handed over: {released:?}");
        };
        assert_eq!(notice, "after:7:4000");
        let owner = get(&mut con, &held.lock).unwrap();
        assert!(owner.starts_with("after\nhost\n7\nlabel\n"), "{owner:?}");
        assert!(owner.ends_with("\n7"), "{owner:?}");
        assert!((1..=4_000).contains(&pttl(&mut con, &held.lock)));
        assert_eq!(get(&mut con, &held.fence).as_deref(), Some("7"));
        // A token that does not own the lock leaves its successor alone.
        let stranger = Successor {
            token: "stranger",
            ..next
        };
        let before = snapshot(&mut con);
        let released: i64 = release(&held, "gone", 0, false, Some(&stranger))
            .invoke(&mut con)
            .unwrap();
        assert_eq!(released, 0);
        unchanged(
            &before,
            &snapshot(&mut con),
            "a release by a token that is not the owner",
        );
    }

    #[test]
    fn a_release_checks_its_successor_before_writing() {
        let (_server, mut con, (held, _)) = start(setup);
        let k = four(&held);
        let mut refuse = |args: &[&str]| refused(&mut con, &RELEASE, &k, args);
        let packed = format!("0:1000:5:0:0:{}", held.channel);
        let base = ["holder", packed.as_str()];
        let with = |token: &str, packed: &str| {
            let mut args: Vec<String> = base.iter().map(|a| a.to_string()).collect();
            args.push(token.to_owned());
            args.push(packed.to_owned());
            args
        };
        let mut bad: Vec<Vec<String>> = vec![
            with("", "1000:1000:h"),
            with("a:b", "1000:1000:h"),
            with("next", "1000:1000"),
            with("next", ""),
            with("next", "0:1000:h"),
            with("next", "1000:0:h"),
        ];
        for n in NOT_MS {
            bad.push(with("next", &format!("{n}:1000:h")));
            bad.push(with("next", &format!("1000:{n}:h")));
        }
        // A successor without its lease and wait.
        let mut alone: Vec<String> = base.iter().map(|a| a.to_string()).collect();
        alone.push("next".to_owned());
        bad.push(alone);
        for args in bad {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            refuse(&args);
        }
    }

    /// A queue entry that is not `<deadline>:<lease>` (written by an older
    /// version, or by hand) is skipped: the lock goes to the next valid
    /// waiter, or is deleted, and never stays without a time to live.
    #[test]
    fn release_skips_a_malformed_queue_entry() {
        let (_server, mut con, (held, _)) = start(setup);
        write(
            &mut con,
            &[
                &["DEL", &held.queue, &held.waiters],
                &["RPUSH", &held.queue, "bad", "good"],
                &["HSET", &held.waiters, "bad", "99999999999999:1e17"],
                &["HSET", &held.waiters, "good", "99999999999999:4000"],
            ],
        );
        let released: ReleaseReply = release(&held, "holder", 5, false, None)
            .invoke(&mut con)
            .unwrap();
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
        // The owner token, then the holder (none recorded) and the time.
        let owner = get(&mut con, &held.lock).unwrap();
        assert!(owner.starts_with("good\n\n"), "{owner:?}");
        let ttl = pttl(&mut con, &held.lock);
        assert!((1..=4_000).contains(&ttl), "lock PTTL {ttl}");
        let fence_ttl = pttl(&mut con, &held.fence);
        assert!((1..=64_000).contains(&fence_ttl), "fence PTTL {fence_ttl}");
    }
}

mod rwlock {
    //! The scripts called directly on a private redis-server: a bad
    //! argument is an error and changes nothing; a reader's release hands
    //! the lock to the queued writer, never its own key; a writer's release
    //! admits the readers before the next writer; dead entries are skipped.

    use super::*;
    use crate::backend::inspect::{RW_FORCE_UNLOCK, RW_INSPECT};
    use crate::backend::rwlock::*;
    use crate::backend::scripts::{RW_RELEASE, rw_release_call};

    fn keys_for(mode: RwMode) -> (Keys, RwKeys) {
        let mut keys = Keys::new("t:", "rw", Duration::from_secs(60));
        let rw = RwKeys::make(&mut keys, mode);
        (keys, rw)
    }

    /// Queues `token` as a waiter on `side` (`r` or `w`), live for a minute
    /// (or dead when `live` is false).
    fn enqueue(con: &mut Connection, keys: &Keys, token: &str, side: char, live: bool) {
        let deadline = if live { "99999999999999" } else { "1" };
        let entry = format!("{deadline}:4000:1:{side}:{token}");
        write(
            con,
            &[
                &["RPUSH", &keys.queue, token],
                &["HSET", &keys.waiters, token, &entry],
            ],
        );
    }

    fn take(con: &mut Connection, mode: RwMode, token: &str, wait: Duration) -> Vec<i64> {
        let (keys, rw) = keys_for(mode);
        acquire_invocation(&keys, &rw, (token, Duration::from_secs(5), wait, false))
            .invoke(con)
            .unwrap()
    }

    fn release(con: &mut Connection, mode: RwMode, token: &str) -> Value {
        let (keys, rw) = keys_for(mode);
        let call = rw_release_call(&keys, &rw, token, 0);
        call.invoke(con).unwrap()
    }

    fn queue(con: &mut Connection) -> Vec<String> {
        let (keys, _) = keys_for(RwMode::Read);
        query(con, &["LRANGE", &keys.queue, "0", "-1"])
    }

    fn exists(con: &mut Connection, key: &str) -> bool {
        query::<i64>(con, &["EXISTS", key]) == 1
    }

    #[test]
    fn the_scripts_check_their_arguments_before_writing() {
        let (_server, mut con, (keys, rw)) = start(|_| keys_for(RwMode::Read));
        assert_eq!(take(&mut con, RwMode::Read, "a", Duration::ZERO)[0], 1);
        enqueue(&mut con, &keys, "q", 'w', true);
        let all = [
            rw.write.as_str(),
            &rw.readers,
            &keys.fence,
            &keys.queue,
            &keys.waiters,
        ];
        let (reader, other) = (rw.holder_key("a"), rw.holder_key("someone-else"));
        let (mut six, mut six_other) = (all.to_vec(), all.to_vec());
        six.push(&reader);
        six_other.push(&other);
        let mut shifted = all.to_vec();
        shifted.rotate_left(1);
        let mut refuse = |script: &Lua, keys: &[&str], args: &[&str]| {
            refused(&mut con, script, keys, args);
        };
        for bad in NOT_MS {
            refuse(
                &ACQUIRE,
                &all,
                &["n", &format!("r:{bad}:60000:0:1:h"), "1000"],
            );
            refuse(
                &ACQUIRE,
                &all,
                &["n", &format!("w:1000:{bad}:0:1:h"), "1000"],
            );
            refuse(&ACQUIRE, &all, &["n", "r:1000:60000:0:1:h", bad]);
            refuse(&RW_RELEASE, &six, &["a", "c", "0", bad, "0", "0"]);
            refuse(&RW_FORCE_UNLOCK, &all, &[bad, "0"]);
        }
        for bad in NOT_TOKEN {
            refuse(&RW_RELEASE, &six, &["a", "c", "0", "60000", bad, "0"]);
            refuse(&RW_FORCE_UNLOCK, &all, &["60000", bad]);
        }
        // Not a side; not the write key first; not the caller's reader key.
        refuse(&ACQUIRE, &all, &["n", "x:1000:60000:0:1:h", "1000"]);
        refuse(&ACQUIRE, &shifted, &["n", "r:1000:60000:0:1:h", "1000"]);
        refuse(&RW_INSPECT, &shifted, &[]);
        refuse(&RW_FORCE_UNLOCK, &shifted, &["60000", "0"]);
        refuse(&RW_RELEASE, &six_other, &["a", "c", "0", "60000", "0", "0"]);
    }

    #[test]
    fn a_readers_release_hands_the_lock_to_the_queued_writer() {
        let (server, mut con, (keys, rw)) = start(|_| keys_for(RwMode::Read));
        let (reader, writer, now) = (RwMode::Read, RwMode::Write, Duration::ZERO);
        let fence_before = take(&mut con, writer, "w0", now)[1];
        release(&mut con, writer, "w0");
        assert_eq!(take(&mut con, reader, "r1", now), [1, fence_before]);
        assert_eq!(take(&mut con, reader, "r2", now)[0], 1);
        // A writer queues; a newcomer reader does not pass it.
        assert_eq!(take(&mut con, writer, "w1", Duration::from_secs(60))[0], 0);
        assert_eq!(take(&mut con, reader, "r3", now)[0], 0);
        assert_eq!(release(&mut con, reader, "r1"), Value::Int(1));
        assert!(!exists(&mut con, &rw.write));
        let mut listener = server.connect();
        let mut pubsub = listen(&mut listener, &keys.channel);
        let notice = String::from_redis_value(release(&mut con, reader, "r2")).unwrap();
        assert!(notice.starts_with("w1:"), "{notice:?}");
        assert_eq!(heard(&mut pubsub), notice);
        let value = get(&mut con, &rw.write).unwrap();
        assert!(value.starts_with("w1\n"), "{value:?}");
        assert!(!exists(&mut con, &rw.holder_key("w1")));
        assert!(queue(&mut con).is_empty());
        // Asked again, the writer finds it, with a token past the last.
        let reply = take(&mut con, writer, "w1", now);
        assert_eq!(reply[0], 1);
        assert!(reply[1] > fence_before);
    }

    #[test]
    fn a_writers_release_admits_the_leading_live_readers() {
        let (server, mut con, (keys, rw)) = start(|_| keys_for(RwMode::Read));
        let written = take(&mut con, RwMode::Write, "w0", Duration::ZERO)[1];
        for (token, side, live) in [
            ("dead", 'w', false),
            ("r1", 'r', true),
            ("r2", 'r', true),
            ("w1", 'w', true),
            ("r3", 'r', true),
        ] {
            enqueue(&mut con, &keys, token, side, live);
        }
        let mut listener = server.connect();
        let mut pubsub = listen(&mut listener, &keys.channel);
        release(&mut con, RwMode::Write, "w0");
        for reader in ["r1", "r2"] {
            let notice = heard(&mut pubsub);
            let start = format!("{reader}:{written}:");
            assert!(notice.starts_with(&start), "{notice:?}");
            assert!(exists(&mut con, &rw.holder_key(reader)));
        }
        assert!(!exists(&mut con, &rw.write));
        assert_eq!(queue(&mut con), ["w1", "r3"]);
        let members: Vec<String> = query(&mut con, &["ZRANGE", &rw.readers, "0", "-1"]);
        assert_eq!(members.len(), 2, "{members:?}");
        let ttl = pttl(&mut con, &rw.readers);
        assert!((1..=4_000).contains(&ttl), "readers index PTTL {ttl}");
        // A reader whose lease ended (its key gone, its end passed) is
        // dropped from the index.
        write(
            &mut con,
            &[
                &["DEL", &rw.holder_key("r1")],
                &["ZADD", &rw.readers, "1", "r1"],
            ],
        );
        release(&mut con, RwMode::Read, "r2");
        let value = get(&mut con, &rw.write).unwrap();
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
        let (slot, entry) = (permits.slot(0).unwrap(), "99999999999999:4000:1:host\n7\nw");
        write(
            con,
            &[
                &["SET", slot, "holder\nh\n1", "PX", "5000"],
                &["SET", &permits.record, "2", "PX", "60000"],
                &["RPUSH", &keys.queue, "waiter"],
                &["HSET", &keys.waiters, "waiter", entry],
            ],
        );
        (keys, permits)
    }

    /// A semaphore's keys for `permits` permits (its holder described as
    /// `holder`, if given).
    fn semaphore(permits: u32, holder: Option<&str>) -> (Keys, Permits) {
        let mut keys = Keys::new("t:", "s", Duration::from_secs(60));
        if let Some(holder) = holder {
            keys.holder = Arc::from(holder);
        }
        let permits = Permits::make(&mut keys, permits);
        (keys, permits)
    }

    /// An acquisition by `token` for a second, waiting `wait`, looking at
    /// every permit with `every`.
    fn acquire(
        con: &mut Connection,
        (keys, permits): (&Keys, &Permits),
        token: &str,
        wait: Duration,
        every: bool,
    ) -> Vec<i64> {
        let attempt = (token, Duration::from_secs(1), wait, false);
        let invocation = acquire_invocation(permits, keys, attempt, every);
        invocation.invoke(con).unwrap()
    }

    #[test]
    fn the_scripts_check_their_arguments_before_writing() {
        let (_server, mut con, (keys, permits)) = start(setup);
        let mut all = vec![&keys.fence, &keys.queue, &keys.waiters, &permits.record];
        all.extend(&permits.slots);
        let all: Vec<&str> = all.into_iter().map(String::as_str).collect();
        let short = &all[..all.len() - 1];
        let channel = keys.channel.as_str();
        let mut refuse = |keys: &[&str], script: &Lua, args: &[&str]| {
            refused(&mut con, script, keys, args);
        };
        for bad in NOT_MS {
            let (lease, retention) = (format!("{bad}:60000:0:1:h"), format!("1000:{bad}:0:1:h"));
            refuse(&all, &ACQUIRE, &["n", &lease, "1000", "2", channel]);
            refuse(&all, &ACQUIRE, &["n", &retention, "1000", "2", channel]);
            refuse(
                &all,
                &ACQUIRE,
                &["n", "1000:60000:0:1:h", bad, "2", channel],
            );
            refuse(&all, &GIVE_BACK, &["holder", bad, "2", channel]);
        }
        for bad in ["", "0", "-1", "1.5", "3", "257", "nan"] {
            refuse(
                &all,
                &ACQUIRE,
                &["n", "1000:60000:0:1:h", "1000", bad, channel],
            );
            refuse(&all, &GIVE_BACK, &["holder", "60000", bad, channel]);
        }
        let good = ["n", "1000:60000:0:1:h", "1000", "2", channel];
        // One key per permit.
        refuse(short, &ACQUIRE, &good);
        refuse(short, &GIVE_BACK, &["holder", "60000", "2", channel]);
        // No channel; no holder.
        refuse(&all, &ACQUIRE, &good[..4]);
        refuse(&all, &GIVE_BACK, &["holder", "60000", "2"]);
        refuse(
            &all,
            &ACQUIRE,
            &["n", "1000:60000:0:1", "1000", "2", channel],
        );
        // Looking at every permit: 0 or 1, and then every permit's key.
        for bad in ["", "2", "x", "true", "1"] {
            refuse(&all, &ACQUIRE, &[&good[..], &[bad]].concat());
        }
    }

    #[test]
    fn a_mismatch_writes_nothing() {
        let (_server, mut con, _) = start(setup);
        let (three, permits) = semaphore(3, None);
        let before = snapshot(&mut con);
        let second = Duration::from_secs(1);
        let reply = acquire(&mut con, (&three, &permits), "n", second, false);
        assert_eq!(reply, [-1, 2]);
        unchanged(&before, &snapshot(&mut con), "the call");
    }

    /// A free permit goes to the oldest waiter whose entry is valid and
    /// whose deadline has not passed, not to the caller behind it.
    #[test]
    fn a_free_permit_goes_to_the_oldest_live_waiter() {
        let (server, mut con, (keys, permits)) = start(setup);
        let slot = permits.slot(1).unwrap();
        // Before `waiter`: one whose deadline passed, one malformed.
        write(
            &mut con,
            &[
                &["LPUSH", &keys.queue, "bad", "late"],
                &["HSET", &keys.waiters, "late", "1:4000:1:w"],
                &["HSET", &keys.waiters, "bad", "99999999999999:1e17:1:w"],
            ],
        );
        let mut listener = server.connect();
        let mut pubsub = listen(&mut listener, &keys.channel);
        let second = Duration::from_secs(1);
        let reply = acquire(&mut con, (&keys, &permits), "newcomer", second, false);
        assert_eq!(reply[0], 0, "the newcomer passed the waiter: {reply:?}");
        let value = get(&mut con, slot).unwrap();
        let notice = heard(&mut pubsub);
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
        let queue: Vec<String> = query(&mut con, &["LRANGE", &keys.queue, "0", "-1"]);
        assert_eq!(queue, ["newcomer"]);
        for (key, (_, _, ttl)) in snapshot(&mut con) {
            assert!(ttl >= 0, "{key} has no expiry");
        }
        // Asked again, the waiter finds its permit, with the fencing token
        // its value carries since the hand-over.
        let reply = acquire(&mut con, (&keys, &permits), "waiter", Duration::ZERO, false);
        let handed: i64 = notice.split(':').nth(1).unwrap().parse().unwrap();
        assert_eq!((reply[0], reply[2]), (1, 1));
        assert_eq!(reply[1], handed);
        // Its give-back hands the permit to the newcomer.
        let given: i64 = give_back_invocation(&permits, &keys, "waiter")
            .invoke(&mut con)
            .unwrap();
        assert_eq!(given, 1);
        let value = get(&mut con, slot).unwrap();
        assert!(value.starts_with("newcomer\n"), "{value:?}");
        assert!(value.ends_with("\n2"), "{value:?}");
    }

    /// A caller asking for fewer permits than a semaphore whose record is
    /// gone and whose holders are all beyond that number is told to look at
    /// every permit (nothing written), and is then refused.
    #[test]
    fn a_caller_asking_fewer_looks_at_every_permit() {
        let server = Server::start();
        let mut con = server.connect();
        let (_, five) = semaphore(5, None);
        let (two, permits) = semaphore(2, Some("h\np\nl"));
        let second = Duration::from_secs(1);
        let ask = |con: &mut Connection, token, every| {
            acquire(con, (&two, &permits), token, second, every)
        };
        // Nobody holds a permit (no fence counter): one request, no look at
        // every permit.
        let reply = ask(&mut con, "n", false);
        assert_eq!(reply[0], 1, "{reply:?}");
        // The counter a held permit keeps alive.
        write(
            &mut con,
            &[&["FLUSHALL"], &["SET", &two.fence, "7", "PX", "5000"]],
        );
        for (held, answer) in [
            ("holder\nh\np\nl\n1\n7\n5", [-1, 5]),
            // Written by an older version: no number.
            ("holder\nh\np\nl\n1\n7", [-1, -1]),
        ] {
            write(
                &mut con,
                &[&["SET", five.slot(3).unwrap(), held, "PX", "5000"]],
            );
            let before = snapshot(&mut con);
            assert_eq!(ask(&mut con, "n", false), [-2, 0]);
            unchanged(&before, &snapshot(&mut con), "the call");
            assert_eq!(ask(&mut con, "n", true), answer);
            unchanged(&before, &snapshot(&mut con), "the call");
        }
        // Nothing held beyond: granted, with the number recorded.
        write(&mut con, &[&["DEL", five.slot(3).unwrap()]]);
        let reply = ask(&mut con, "n", true);
        assert_eq!((reply[0], reply[2]), (1, 0), "{reply:?}");
        let value = get(&mut con, permits.slot(0).unwrap()).unwrap();
        assert!(value.ends_with(&format!("\n{}\n2", reply[1])), "{value:?}");
        assert_eq!(get(&mut con, &permits.record).as_deref(), Some("2"));
        // A caller of 5 sees the number in the permit, record or none.
        write(&mut con, &[&["DEL", &permits.record]]);
        let reply = acquire(&mut con, (&two, &five), "o", second, false);
        assert_eq!(reply, [-1, 2]);
        // A caller of 2 is served without looking further.
        let reply = ask(&mut con, "m", false);
        assert_eq!((reply[0], reply[2]), (1, 1), "{reply:?}");
    }

    /// An operator's forced release finds the token in the permit's value,
    /// whatever follows it, and hands the permit on with those lines.
    #[test]
    fn a_forced_permit_keeps_its_fields_when_handed_on() {
        let (_server, mut con, (keys, permits)) = start(setup);
        let slot = permits.slot(0).unwrap();
        let value = "holder\nh\np\nl\n1\n42\n2\nmore";
        write(&mut con, &[&["SET", slot, value, "PX", "5000"]]);
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
        let released: crate::backend::shared::Forced = force.invoke(&mut con).unwrap();
        assert_eq!(released.0.as_deref(), Some("h\np\nl\n1"));
        let value = get(&mut con, slot).unwrap();
        let lines: Vec<&str> = value.split('\n').collect();
        assert_eq!(lines.len(), 8, "{value:?}");
        assert_eq!(lines[..4], ["waiter", "host", "7", "w"], "{value:?}");
        assert!(lines[5].parse::<u64>().unwrap() > 42, "{value:?}");
        assert_eq!(&lines[6..], ["2", "more"], "{value:?}");
        // The token no permit holds any more frees nothing.
        let released: crate::backend::shared::Forced = force.invoke(&mut con).unwrap();
        assert_eq!(released.0, None);
    }
}

mod set {
    use super::*;
    use crate::backend::lockset::*;
    use crate::backend::scripts::RELEASE_SET;

    /// ACQUIRE_SET's arguments for the token `tok` and two names.
    fn args<'a>(second: &'a str, wait: &'a str, flag: &'a str) -> [&'a str; 6] {
        ["tok", second, wait, flag, "c1", "c2"]
    }

    #[test]
    fn the_set_scripts_check_their_arguments_before_writing() {
        let server = Server::start();
        let mut con = server.connect();
        let names = ["t:{a}", "t:{b}"]
            .map(|name| ["", ":fence", ":queue", ":waiters"].map(|key| format!("{name}{key}")));
        let keys: Vec<&str> = names.iter().flatten().map(String::as_str).collect();
        let mut refuse = |script: &Lua, keys: &[&str], args: &[&str]| {
            refused(&mut con, script, keys, args);
        };
        for second in [
            "0:0:1:h",
            "x:0:1:h",
            "1.5:0:1:h",
            "-1:0:1:h",
            "2592000001:0:1:h",
            "100:-1:1:h",
            "100:0:h",
            "",
        ] {
            refuse(&ACQUIRE_SET, &keys, &args(second, "100", "0"));
        }
        for wait in NOT_MS {
            refuse(&ACQUIRE_SET, &keys, &args("100:0:1:h", wait, "0"));
        }
        refuse(&ACQUIRE_SET, &keys[..6], &args("100:0:1:h", "0", "0"));
        for flag in ["2", "", "yes"] {
            refuse(&ACQUIRE_SET, &keys, &args("100:0:1:h", "100", flag));
        }
        // Taken, then a give-back with a bad retention changes nothing.
        let take = args("10000:1000:1:h\n1\nl", "0", "0");
        let taken: Vec<i64> = call(&mut con, &ACQUIRE_SET, &keys, &take).unwrap();
        assert_eq!(taken.len(), 3);
        assert_eq!(taken[0], 1);
        for retention in NOT_MS {
            refused(
                &mut con,
                &GIVE_BACK_SET,
                &keys,
                &["tok", retention, "c1", "c2"],
            );
        }
        // Sent twice: the second run takes nothing again (same counters).
        let again: Vec<i64> = call(&mut con, &ACQUIRE_SET, &keys, &take).unwrap();
        assert_eq!(again, taken);
        let give_back = ["tok", "1000", "c1", "c2"];
        let deleted: i64 = call(&mut con, &GIVE_BACK_SET, &keys, &give_back).unwrap();
        assert_eq!(deleted, 2);
        // Only the counters are left, each with a time to live.
        for key in query::<Vec<String>>(&mut con, &["KEYS", "*"]) {
            assert!(key.ends_with(":fence"), "{key}");
            assert!(pttl(&mut con, &key) > 0, "{key} has no expiry");
        }
    }

    /// A foreign value at a later name's fence counter refuses the set
    /// before anything is written (not even the earlier names' counters),
    /// whether every name is free or one is busy and the caller would
    /// wait, with the refusal the lock's ACQUIRE gives, naming the key.
    #[test]
    fn the_set_script_checks_every_counter_before_writing() {
        use crate::backend::scripts::ACQUIRE;
        let server = Server::start();
        let mut con = server.connect();
        let names = ["t:{a}", "t:{b}"]
            .map(|name| ["", ":fence", ":queue", ":waiters"].map(|key| format!("{name}{key}")));
        let keys: Vec<&str> = names.iter().flatten().map(String::as_str).collect();
        write(
            &mut con,
            &[
                &["SET", "t:{a}:fence", "41", "PX", "60000"],
                &["SET", "t:{b}:fence", "x", "PX", "60000"],
            ],
        );
        let lock: redis::RedisError = call::<Value>(
            &mut con,
            &ACQUIRE,
            &keys[4..],
            &["tok", "10000:1000:0:1:h\n1\nl", "0"],
        )
        .unwrap_err();
        assert_eq!(
            lock.detail(),
            Some("lockattr: the fence counter t:{b}:fence holds a foreign value")
        );
        let take = |wait| args("10000:1000:1:h\n1\nl", wait, "0");
        for wait in ["0", "5000"] {
            refused(&mut con, &ACQUIRE_SET, &keys, &take(wait));
        }
        // `a` held by another token: the set would wait, and is refused
        // the same, entering no waiter.
        write(
            &mut con,
            &[&["SET", "t:{a}", "other\nh\n3\nl\n1\n41", "PX", "60000"]],
        );
        refused(
            &mut con,
            &ACQUIRE_SET,
            &keys,
            &args("10000:1000:1:h\n1\nl", "5000", "1"),
        );
        let set = call::<Value>(&mut con, &ACQUIRE_SET, &keys, &take("0")).unwrap_err();
        assert_eq!(set.detail(), lock.detail());
    }

    /// RELEASE_SET's keys for three names, and the set `tok` taken on them
    /// with fencing tokens `{1, f1, f2, f3}`.
    fn three_taken(con: &mut Connection) -> (Vec<String>, Vec<i64>) {
        let names = ["r:{a}", "r:{b}", "r:{c}"]
            .map(|name| ["", ":fence", ":queue", ":waiters"].map(|key| format!("{name}{key}")));
        let keys: Vec<String> = names.into_iter().flatten().collect();
        let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
        let take = ["tok", "10000:1000:1:h\n1\nl", "0", "0", "c1", "c2", "c3"];
        let taken: Vec<i64> = call(con, &ACQUIRE_SET, &refs, &take).unwrap();
        assert_eq!(taken[0], 1);
        (keys, taken)
    }

    #[test]
    fn the_set_release_checks_its_arguments_before_writing() {
        let server = Server::start();
        let mut con = server.connect();
        let (keys, taken) = three_taken(&mut con);
        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
        let fences: Vec<String> = taken[1..].iter().map(i64::to_string).collect();
        let args = |notify: &str, retention: &str, barge: &str, fence: &str| -> Vec<String> {
            [
                "tok", notify, retention, barge, "c1", fence, "c2", &fences[1], "c3", &fences[2],
            ]
            .map(str::to_owned)
            .to_vec()
        };
        let mut refuse = |keys: &[&str], args: &[String]| {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            refused(&mut con, &RELEASE_SET, keys, &args);
        };
        for bad in NOT_MS {
            refuse(&keys, &args("0", bad, "0", &fences[0]));
            refuse(&keys, &args("0", "1000", bad, &fences[0]));
        }
        for bad in NOT_TOKEN {
            refuse(&keys, &args("0", "1000", "0", bad));
        }
        for notify in ["2", "", "yes"] {
            refuse(&keys, &args(notify, "1000", "0", &fences[0]));
        }
        // A name's keys or its channel and fencing token missing.
        refuse(&keys[..11], &args("0", "1000", "0", &fences[0]));
        refuse(&keys, &args("0", "1000", "0", &fences[0])[..9]);
        refuse(&keys[..8], &args("0", "1000", "0", &fences[0]));
    }

    /// Each name is released as the lock's RELEASE releases it: one handed
    /// to its queued waiter (with the next fencing token, told on its
    /// channel), one deleted, one that another token holds left alone.
    #[test]
    fn the_set_release_releases_each_name_as_a_lock_release_does() {
        let server = Server::start();
        let mut con = server.connect();
        let (keys, taken) = three_taken(&mut con);
        let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
        // A waiter queued on a, for a lease of 7 s; c taken over by `other`.
        let deadline = (std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis()
            + 60_000)
            .to_string();
        let entry = format!("{deadline}:7000:1:h\n2\nw");
        write(
            &mut con,
            &[
                &["RPUSH", &keys[2], "waiter"],
                &["HSET", &keys[3], "waiter", &entry],
                &["SET", &keys[8], "other\nh\n3\nl\n1\n99"],
            ],
        );
        let mut listener = server.connect();
        let mut pubsub = listen(&mut listener, "c1");
        let fences: Vec<String> = taken[1..].iter().map(i64::to_string).collect();
        let released: Vec<Value> = call(
            &mut con,
            &RELEASE_SET,
            &refs,
            &[
                "tok", "0", "1000", "0", "c1", &fences[0], "c2", &fences[1], "c3", &fences[2],
            ],
        )
        .unwrap();
        let notice = format!("waiter:{}:7000", taken[1] + 1);
        assert_eq!(
            released,
            [
                Value::BulkString(notice.clone().into_bytes()),
                Value::Int(1),
                // Not the token's, its counter still at the granted token.
                Value::Int(2),
            ]
        );
        assert_eq!(heard(&mut pubsub), notice);
        let a = get(&mut con, &keys[0]).unwrap();
        assert!(a.starts_with("waiter\nh\n2\nw\n"), "{a}");
        assert!(a.ends_with(&format!("\n{}", taken[1] + 1)), "{a}");
        assert!((6000..=7000).contains(&pttl(&mut con, &keys[0])));
        assert_eq!(get(&mut con, &keys[4]), None);
        assert!(
            pttl(&mut con, &keys[5]) <= 1000,
            "b's counter keeps the retention"
        );
        assert_eq!(
            get(&mut con, &keys[8]).as_deref(),
            Some("other\nh\n3\nl\n1\n99")
        );
    }
}

/// A Redis Cluster runs a copy of each script that publishes, the same but
/// for SPUBLISH; a script that publishes nothing is its own copy; and a
/// give-back, sent as EVAL with the source, gets the copy too.
#[test]
fn a_cluster_runs_a_copy_that_publishes_on_shard_channels() {
    use crate::backend::scripts::{ACQUIRE, RELEASE, give_back, sharded_eval};
    let (plain, shard) = (
        "local publish_command = 'publish'\n",
        "local publish_command = 'spublish'\n",
    );
    let sharded = RELEASE.sharded();
    assert!(!std::ptr::eq(sharded, &RELEASE));
    assert!(RELEASE.source.contains(plain));
    assert_eq!(sharded.source, RELEASE.source.replacen(plain, shard, 1));
    assert!(std::ptr::eq(RELEASE.sharded(), sharded), "made once");
    assert!(std::ptr::eq(ACQUIRE.sharded(), &ACQUIRE));

    let keys = Keys::new("lockattr:", "n", Duration::from_secs(60));
    let plain_eval = give_back(&keys, "t");
    let sharded_eval = sharded_eval(give_back(&keys, "t"));
    let words = |cmd: &redis::Cmd| -> Vec<Vec<u8>> {
        cmd.args_iter()
            .map(|arg| match arg {
                redis::Arg::Simple(bytes) => bytes.to_vec(),
                _ => Vec::new(),
            })
            .collect()
    };
    let (plain_words, sharded_words) = (words(&plain_eval), words(&sharded_eval));
    assert_eq!(sharded_words[1], sharded.source.as_bytes());
    assert_eq!(
        plain_words[2..],
        sharded_words[2..],
        "the same keys and arguments"
    );
}

/// Calls of `command` the server counted (`INFO commandstats`).
fn command_calls(con: &mut Connection, command: &str) -> u64 {
    let info: String = query(con, &["INFO", "commandstats"]);
    info.lines()
        .find_map(|line| line.strip_prefix(&format!("cmdstat_{command}:calls=")))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// The library's copy of a script for a Redis Cluster is its own function,
/// `<function>_sharded`, which publishes with SPUBLISH where the script's
/// own function publishes with PUBLISH (a call starts from the plain
/// setting whichever function ran before it).
#[test]
fn the_sharded_function_publishes_on_shard_channels() {
    use crate::backend::scripts::RELEASE;
    let sharded = RELEASE.sharded();
    assert_eq!(
        sharded.function(),
        format!("{}_sharded", RELEASE.function())
    );
    let (_server, mut con, ()) = start(|_| ());
    let keys = ["l", "f", "q", "w"];
    // Released by its owner, nobody queued, `notify`: `-:0:0` published.
    let release = ["t", "1:0:0:0:0:ch"];
    for (script, publish, spublish) in [(sharded, 0, 1), (&RELEASE, 1, 1), (sharded, 1, 2)] {
        write(&mut con, &[&["SET", "l", "t"]]);
        assert_eq!(call::<i64>(&mut con, script, &keys, &release).unwrap(), 1);
        assert_eq!(
            (
                command_calls(&mut con, "publish"),
                command_calls(&mut con, "spublish")
            ),
            (publish, spublish),
            "after {}",
            script.function()
        );
    }
}

/// Which errors send a server's scripts to EVALSHA: FCALL refused itself
/// (an ACL user without it), never a missing library (it is loaded), a
/// script's own refusal, or an error of a command the script runs, even a
/// command the ACL refuses.
#[test]
fn only_a_refused_fcall_sends_scripts_to_evalsha() {
    use crate::backend::scripts::{ACQUIRE, fcall_refused};
    let (server, mut con, ()) = start(|_| ());
    let keys = ["l", "f", "q", "w"];
    let take = ["t", "1000:0:0:1:h", "0"];
    let fcall = |con: &mut Connection| {
        redis::cmd("FCALL")
            .arg(ACQUIRE.function())
            .arg(4)
            .arg(&keys)
            .arg(&take)
            .query::<Value>(con)
    };
    let missing = fcall(&mut con).unwrap_err();
    assert!(function_missing(&missing), "{missing:?}");
    assert!(!fcall_refused(&missing), "{missing:?}");
    let own = call::<Value>(&mut con, &ACQUIRE, &keys, &["t", "bad", "0"]).unwrap_err();
    write(&mut con, &[&["HSET", "f", "a", "b"]]);
    let wrong_type = call::<Value>(&mut con, &ACQUIRE, &keys, &take).unwrap_err();
    write(
        &mut con,
        &[
            &["DEL", "f"],
            &[
                "ACL", "SETUSER", "noget", "on", ">pw", "~*", "&*", "+@all", "-get",
            ],
            &[
                "ACL", "SETUSER", "nofcall", "on", ">pw", "~*", "&*", "+@all", "-fcall",
            ],
        ],
    );
    let as_user = |user: &str| {
        let mut con = server.connect();
        let () = query(&mut con, &["AUTH", user, "pw"]);
        fcall(&mut con).unwrap_err()
    };
    let inner = as_user("noget");
    for e in [&own, &wrong_type, &inner] {
        assert!(!fcall_refused(e), "{e:?}");
        assert!(!function_missing(e), "{e:?}");
    }
    let refused = as_user("nofcall");
    assert!(fcall_refused(&refused), "{refused:?}");
}

mod fast_paths {
    //! The lock's ACQUIRE and RELEASE against the scripts as they were
    //! before their fast paths (`lua/before/`, joined with today's helpers by `build.rs`): each case
    //! runs on one server with the scripts as they were and on another
    //! with the scripts as they are, and both answer the same, leave the
    //! same keys, values and times to live, and publish the same notices.
    //! Values that carry the server's clock (a counter started from it, a
    //! hand-over's `since`) may differ by the time between the two runs.

    use super::*;
    use crate::backend::scripts::{ACQUIRE, RELEASE, Source};

    // Sent as EVAL of their source (they are not in the library).
    static ACQUIRE_BEFORE: Lua = Lua::new(Source {
        file: "before/acquire.lua",
        text: include_str!(concat!(env!("OUT_DIR"), "/lua/before/acquire.lua")),
    });
    static RELEASE_BEFORE: Lua = Lua::new(Source {
        file: "before/release.lua",
        text: include_str!(concat!(env!("OUT_DIR"), "/lua/before/release.lua")),
    });

    const KEYS: [&str; 4] = ["t:{n}", "t:{n}:fence", "t:{n}:queue", "t:{n}:waiters"];
    const CHANNEL: &str = "t:{n}:wake";
    /// An acquisition's packed argument: a lease of 10 s, a retention of
    /// 60 s, not queued, since 1700000000000, holder `h\n1\nl`.
    const PACKED: &str = "10000:60000:0:1700000000000:h\n1\nl";

    /// What a server shows after a call: the reply (or error), every key
    /// with its type, its value as words and its time to live, and the
    /// notices published on the lock's channel.
    #[derive(Debug)]
    struct Outcome {
        reply: String,
        keys: Vec<(String, String, Vec<String>, i64)>,
        notices: Vec<String>,
    }

    /// How a script is sent: [`call`] (FCALL) or [`eval`].
    type Send = fn(&mut Connection, &Lua, &[&str], &[&str]) -> redis::RedisResult<Value>;

    /// Runs `setup` on an emptied `server`, then the script with `args`,
    /// sent by `send`.
    fn outcome(
        server: &Server,
        (script, send): (&Lua, Send),
        setup: &[Vec<String>],
        args: &[String],
    ) -> Outcome {
        let mut con = server.connect();
        query::<()>(&mut con, &["FLUSHALL"]);
        for words in setup {
            let words: Vec<&str> = words.iter().map(String::as_str).collect();
            query::<()>(&mut con, &words);
        }
        let mut listener = server.connect();
        let mut pubsub = listen(&mut listener, CHANNEL);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let reply = match send(&mut con, script, &KEYS, &args) {
            Ok(value) => format!("{value:?}"),
            Err(e) => format!("error {e}"),
        };
        query::<()>(&mut con, &["PUBLISH", CHANNEL, "end"]);
        let mut notices = Vec::new();
        loop {
            let notice = heard(&mut pubsub);
            if notice == "end" {
                break;
            }
            notices.push(notice);
        }
        let mut names: Vec<String> = query(&mut con, &["KEYS", "*"]);
        names.sort();
        let keys = names
            .into_iter()
            .map(|key| {
                let kind: String = query(&mut con, &["TYPE", &key]);
                let mut value: Vec<String> = match kind.as_str() {
                    "string" => vec![query(&mut con, &["GET", &key])],
                    "list" => query(&mut con, &["LRANGE", &key, "0", "-1"]),
                    "hash" => query(&mut con, &["HGETALL", &key]),
                    other => panic!("{key} is a {other}"),
                };
                if kind == "hash" {
                    let mut pairs: Vec<String> = value.chunks(2).map(|p| p.join("=")).collect();
                    pairs.sort();
                    value = pairs;
                }
                let ttl = pttl(&mut con, &key);
                (key, kind, value, ttl)
            })
            .collect();
        Outcome {
            reply,
            keys,
            notices,
        }
    }

    /// Whether `a` and `b` are the same text but for clock readings: runs
    /// of 13 digits (ms) within 2 s of each other, of 16 (µs) within 2 s.
    fn same(a: &str, b: &str) -> bool {
        fn parts(s: &str) -> Vec<(bool, &str)> {
            let mut parts = Vec::new();
            let mut start = 0;
            let bytes = s.as_bytes();
            for i in 1..=bytes.len() {
                if i == bytes.len() || bytes[i].is_ascii_digit() != bytes[start].is_ascii_digit() {
                    parts.push((bytes[start].is_ascii_digit(), &s[start..i]));
                    start = i;
                }
            }
            parts
        }
        if a.is_empty() || b.is_empty() {
            return a == b;
        }
        let (a, b) = (parts(a), parts(b));
        a.len() == b.len()
            && a.iter().zip(&b).all(|((digits, x), (_, y))| {
                if x == y {
                    return true;
                }
                let tolerance = match x.len() {
                    13 => 2_000,
                    16 => 2_000_000,
                    _ => return false,
                };
                *digits
                    && x.len() == y.len()
                    && x.parse::<i64>()
                        .unwrap()
                        .abs_diff(y.parse::<i64>().unwrap())
                        <= tolerance
            })
    }

    /// Runs one case with the scripts before and now; asserts the same
    /// outcome.
    fn compare(
        servers: &(Server, Server),
        scripts: (&Lua, &Lua),
        case: &str,
        setup: &[Vec<String>],
        args: (&[String], &[String]),
    ) {
        let before = outcome(&servers.0, (scripts.0, eval), setup, args.0);
        let now = outcome(&servers.1, (scripts.1, call), setup, args.1);
        let what = format!("{case}: before {before:#?}\nnow {now:#?}");
        // ACQUIRE's refusal `{0, pttl}` carries a time to live.
        let pttl = |reply: &str| -> Option<i64> {
            reply
                .strip_prefix("array([int(0), int(")?
                .strip_suffix(")])")?
                .parse()
                .ok()
        };
        match (pttl(&before.reply), pttl(&now.reply)) {
            (Some(x), Some(y)) => assert!(x.abs_diff(y) <= 1_000, "reply of {what}"),
            _ => assert!(same(&before.reply, &now.reply), "reply of {what}"),
        }
        assert_eq!(before.notices.len(), now.notices.len(), "notices of {what}");
        for (a, b) in before.notices.iter().zip(&now.notices) {
            assert!(same(a, b), "notices of {what}");
        }
        assert_eq!(before.keys.len(), now.keys.len(), "keys of {what}");
        for (a, b) in before.keys.iter().zip(&now.keys) {
            assert_eq!((&a.0, &a.1), (&b.0, &b.1), "keys of {what}");
            assert_eq!(a.2.len(), b.2.len(), "{} of {what}", a.0);
            for (x, y) in a.2.iter().zip(&b.2) {
                assert!(same(x, y), "{} of {what}", a.0);
            }
            let (x, y) = (a.3, b.3);
            assert!(
                (x < 0 && x == y) || (x >= 0 && y >= 0 && x.abs_diff(y) <= 1_000),
                "time to live of {} of {what}",
                a.0
            );
        }
    }

    fn words(words: &[&str]) -> Vec<String> {
        words.iter().map(|w| w.to_string()).collect()
    }

    /// A waiter entry: deadline `deadline`, lease 4 s, queued at `at`,
    /// holder `w\n2\nq`.
    fn entry(deadline: u128, at: u128) -> String {
        format!("{deadline}:4000:{at}:w\n2\nq")
    }

    fn now_ms() -> u128 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis()
    }

    /// The setups the cases start from, by name.
    fn setups() -> Vec<(&'static str, Vec<Vec<String>>)> {
        let [lock, fence, queue, waiters] = KEYS;
        let now = now_ms();
        let live = entry(now + 600_000, now - 100_000);
        let recent = entry(now + 600_000, now - 10);
        let dead = entry(now - 1_000, now - 100_000);
        let counter = words(&["SET", fence, "41", "PX", "63000"]);
        let mine = words(&[
            "SET",
            lock,
            "tok\nh\n1\nl\n1700000000000\n41",
            "PX",
            "30000",
        ]);
        let theirs = words(&[
            "SET",
            lock,
            "other\nh\n2\nl\n1700000000000\n41",
            "PX",
            "3000",
        ]);
        let queued = |token: &str, entry: &str| {
            vec![
                words(&["RPUSH", queue, token]),
                words(&["HSET", waiters, token, entry]),
                words(&["PEXPIRE", queue, "600000"]),
                words(&["PEXPIRE", waiters, "600000"]),
            ]
        };
        let with = |parts: &[&[Vec<String>]]| parts.concat();
        let mut setups = vec![
            ("nothing", vec![]),
            ("a counter", vec![counter.clone()]),
            (
                "a counter without expiry",
                vec![words(&["SET", fence, "41"])],
            ),
            (
                "a counter with a longer expiry",
                vec![words(&["SET", fence, "41", "PX", "900000"])],
            ),
            (
                "the last counter",
                vec![words(&["SET", fence, "9007199254740991", "PX", "50000"])],
            ),
            (
                "a counter at 0",
                vec![words(&["SET", fence, "0", "PX", "50000"])],
            ),
            (
                "a queue",
                with(&[std::slice::from_ref(&counter), &queued("waiter", &live)]),
            ),
            (
                "the token queued",
                with(&[
                    std::slice::from_ref(&counter),
                    &queued("waiter", &live),
                    &queued("tok", &live),
                ]),
            ),
            ("held", vec![counter.clone(), theirs.clone()]),
            (
                "held with the token queued",
                with(&[&[counter.clone(), theirs.clone()], &queued("tok", &live)]),
            ),
            ("mine", vec![counter.clone(), mine.clone()]),
            (
                "mine without a fencing token",
                vec![
                    counter.clone(),
                    words(&["SET", lock, "tok\nh\n1\nl\n1700000000000", "PX", "30000"]),
                ],
            ),
            (
                "mine without a fencing token or a counter",
                vec![words(&["SET", lock, "tok", "PX", "30000"])],
            ),
            ("mine without a counter", vec![mine.clone()]),
            (
                "mine with a longer counter",
                vec![words(&["SET", fence, "41", "PX", "900000"]), mine.clone()],
            ),
            (
                "mine with kind's fields",
                with(&[
                    &[
                        counter.clone(),
                        words(&[
                            "SET",
                            lock,
                            "tok\nh\n1\nl\n1700000000000\n41\n3",
                            "PX",
                            "3000",
                        ]),
                    ],
                    &queued("waiter", &live),
                ]),
            ),
            (
                "mine with a waiter",
                with(&[&[counter.clone(), mine.clone()], &queued("waiter", &live)]),
            ),
            (
                "mine with a recent waiter",
                with(&[&[counter.clone(), mine.clone()], &queued("waiter", &recent)]),
            ),
            (
                "mine with a dead waiter, then a live one",
                with(&[
                    &[counter.clone(), mine.clone()],
                    &queued("dead", &dead),
                    &queued("waiter", &live),
                ]),
            ),
            (
                "mine with dead waiters only",
                with(&[&[counter.clone(), mine.clone()], &queued("dead", &dead)]),
            ),
            (
                "mine with the marker and a set waiter",
                with(&[
                    &[counter.clone(), mine.clone()],
                    &queued("-", &live),
                    &queued("waiter", &live),
                    &[words(&["HSET", waiters, "setter", &dead])],
                ]),
            ),
            (
                "mine with set waiters outside the queue",
                with(&[
                    &[counter.clone(), mine.clone()],
                    &[
                        words(&["HSET", waiters, "setter", &live]),
                        words(&["PEXPIRE", waiters, "600000"]),
                    ],
                ]),
            ),
            (
                "mine with the token queued",
                with(&[&[counter.clone(), mine.clone()], &queued("tok", &live)]),
            ),
        ];
        for foreign in [
            "abc",
            "",
            "-1",
            "1.5",
            "9007199254740992",
            "1e400",
            "nan",
            "0x10",
            " 7",
            "7.0",
            "1e3",
        ] {
            setups.push((
                "a counter of another shape",
                vec![words(&["SET", fence, foreign, "PX", "50000"])],
            ));
        }
        setups
    }

    #[test]
    fn acquire_answers_and_writes_as_before() {
        let servers = (Server::start(), Server::start());
        let scripts = (&ACQUIRE_BEFORE, &ACQUIRE);
        let mut args = vec![
            words(&["tok", PACKED, "0"]),
            words(&["tok", PACKED, "5000"]),
            words(&["tok", "10000:60000:1:1700000000000:h\n1\nl", "0"]),
            words(&["tok", "10000:60000:1:1700000000000:h\n1\nl", "5000"]),
            words(&["tok", "2592000000:2592000000:0:1:", "2592000000"]),
            words(&["tok", "100000:0:0:0:h", "0"]),
            words(&["tok", "010000:060000:0:01:h:x", "05000"]),
            // Shapes the checks accept but the fast path leaves to them.
            words(&["tok", " 10000:60000:0:1:h", "0"]),
            words(&["tok", "1e4:6e4:0:1:h", "5e3"]),
            words(&["tok", "0x10:60000.0:0:1:h", "0x10"]),
            words(&["tok", "10000:60000:0:1:h", " 5000 "]),
            words(&["tok", "10000:60000:0:1:h", "5000.0"]),
            // Refused.
            words(&["tok", PACKED]),
            words(&["tok"]),
            words(&["tok", "10000:60000:2:1:h", "0"]),
            words(&["tok", "10000:60000:0:x:h", "0"]),
            words(&["tok", "10000:60000:0:1", "0"]),
            words(&["tok", "0:60000:0:1:h", "0"]),
        ];
        for bad in NOT_MS {
            args.push(words(&["tok", &format!("{bad}:60000:0:1:h"), "0"]));
            args.push(words(&["tok", &format!("10000:{bad}:0:1:h"), "0"]));
            args.push(words(&["tok", PACKED, bad]));
        }
        for (name, setup) in setups() {
            for args in &args {
                let case = format!("ACQUIRE {args:?} on {name}");
                compare(&servers, scripts, &case, &setup, (args, args));
            }
        }
    }

    /// RELEASE's arguments now for the arguments `before` of the script
    /// as it was (token, channel, notify, retention, fencing token, barge,
    /// shared, then a successor's two): the token, the five after the
    /// channel and the channel packed in one (a missing one empty), then
    /// the successor's.
    fn release_args(before: &[String]) -> Vec<String> {
        let field = |i: usize| before.get(i).map_or("", String::as_str);
        let mut now = vec![field(0).to_owned(), [2, 3, 4, 5, 6, 1].map(field).join(":")];
        now.extend(before.iter().skip(7).cloned());
        now
    }

    #[test]
    fn release_answers_and_writes_as_before() {
        let servers = (Server::start(), Server::start());
        let scripts = (&RELEASE_BEFORE, &RELEASE);
        let release = |token: &str,
                       notify: &str,
                       retention: &str,
                       granted: &str,
                       barge: &str,
                       shared: &str| {
            words(&[token, CHANNEL, notify, retention, granted, barge, shared])
        };
        let mut args = Vec::new();
        for token in ["tok", "other", "waiter", "gone"] {
            for (notify, shared) in [("0", "0"), ("1", "0"), ("0", "1"), ("1", "1")] {
                args.push(release(token, notify, "60000", "41", "0", shared));
            }
            args.push(release(token, "0", "60000", "0", "0", "0"));
            args.push(release(token, "0", "60000", "41", "60000", "0"));
            args.push(release(token, "0", "0", "2000", "0", "0"));
        }
        // Shapes the checks accept but the fast path leaves to them.
        args.push(release("tok", "0", "6e4", "41", "0", "0"));
        args.push(release("tok", "0", " 60000", "41.0", "0x0", "0"));
        args.push(release("tok", "2", "060000", "041", "00", "2"));
        // Successors.
        let mut successor = release("tok", "0", "60000", "41", "0", "0");
        successor.extend(words(&["next", "4000:9000:h\n7\nl"]));
        args.push(successor.clone());
        let mut stranger = release("other", "1", "60000", "41", "0", "0");
        stranger.extend(words(&["next", "4000:9000:h\n7\nl"]));
        args.push(stranger);
        // Refused.
        args.push(words(&["tok", CHANNEL, "0", "60000"]));
        args.push(words(&["tok"]));
        for bad in NOT_MS {
            args.push(release("tok", "0", bad, "41", "0", "0"));
            args.push(release("tok", "0", "60000", "41", bad, "0"));
        }
        for bad in NOT_TOKEN {
            args.push(release("tok", "0", "60000", bad, "0", "0"));
        }
        for (token, packed) in [
            ("", "4000:9000:h"),
            ("a:b", "4000:9000:h"),
            ("next", "0:9000:h"),
            ("next", "4000:9000"),
        ] {
            let mut bad = successor[..7].to_vec();
            bad.extend(words(&[token, packed]));
            args.push(bad);
        }
        let mut alone = successor[..7].to_vec();
        alone.push("next".to_owned());
        args.push(alone);
        for (name, setup) in setups() {
            for args in &args {
                let case = format!("RELEASE {args:?} on {name}");
                compare(
                    &servers,
                    scripts,
                    &case,
                    &setup,
                    (args, &release_args(args)),
                );
            }
        }
    }
}
