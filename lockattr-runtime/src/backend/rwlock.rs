//! Read-write locks on one server and on a Redis Cluster: many readers or
//! one writer of one name.
//!
//! # Keys
//!
//! A read-write lock `catalog` under the prefix `lockattr:` is made of
//! these keys, all under one hash tag (one Cluster slot, one script call):
//!
//! - `lockattr:{catalog}:rw:write`: the writer, a lock key
//!   (`<token>\n<holder>\n<since>\n<fencing token>`, with the writer's
//!   lease);
//! - `lockattr:{catalog}:rw:read:<token>`: one lock key per reader, with
//!   that reader's lease (its value as the writer's, with the fencing token
//!   it was granted);
//! - `lockattr:{catalog}:rw:reading`: the index of the readers, a sorted
//!   set of their tokens scored by the end of each one's lease (by the
//!   server's clock, never before its key's own end). Whatever extends a
//!   reader's lease (renewal, `extend`, `hold_at_least`) moves its score and
//!   keeps the index alive at least that long, so the index expires with
//!   its last reader, crashed or not; a member whose score has passed (a
//!   reader whose lease ran out) is dropped by the next script call. Each
//!   call counts the live readers and finds the first to end in O(log R),
//!   whatever their number. (Versions before it kept a plain set at
//!   `:rw:readers`, without a time to live; the scripts still count the
//!   readers in it while one exists, during a rolling deploy, and never
//!   write it. The older scripts do not read the index, so an older
//!   writer does not wait for newer readers: stop the older processes that
//!   take read-write locks before newer ones take them.)
//! - `lockattr:{catalog}:rw:fence`: the fencing counter, incremented by
//!   writers only; a reader is granted its current value (the last write's
//!   token, 0 when none is known) and keeps it for its lease plus the
//!   retention;
//! - `lockattr:{catalog}:rw:queue` and `:rw:waiters`: the waiters, oldest
//!   first; a waiter's entry is `<deadline>:<lease>:<queued>:<r|w>:<holder>`;
//! - `lockattr:{catalog}:rw:wake`: the channel hand-overs are told on.
//!
//! The reader keys are not passed to the scripts as KEYS: they are built
//! from the write key's name (`<base>:write` gives `<base>:read:<token>`),
//! so they share its hash tag and Cluster slot. A lock, a semaphore and a
//! read-write lock of the same name never share a key, and do not exclude
//! each other.
//!
//! # Protocol
//!
//! A writer's key and a reader's key are lock keys, so the guard's renewal,
//! extension, `hold_at_least` and lost signal run the scripts of a lock
//! unchanged on them. Taking ([`ACQUIRE`]) and releasing ([`RELEASE`], also
//! the give-back of abandoned attempts) have scripts of their own.
//!
//! Both first drop the dead readers and then *admit* from the head of the
//! queue (dead entries, whose deadline passed, are dropped): a writer at
//! the head is handed the lock when no writer and no reader holds it; while
//! no writer holds, every reader at the head up to the first writer is
//! handed a read key of its own. Each waiter handed the lock is named on
//! the channel (`<token>:<fencing token>:<lease>`; a reader's fencing token
//! may be 0, which its waiter hears as "ask now"), and asks once more to
//! learn its fencing token.
//!
//! A caller that was not handed the lock gets it only when the queue is
//! then empty (nobody older waits) and: for a reader, no writer holds; for
//! a writer, no writer and no reader holds. So a waiting writer blocks new
//! readers (writer-preferring), a writer's release admits every reader
//! waiting before the next writer at once, and the last reader's release
//! hands the lock to the waiting writer. A caller that waits is queued
//! and told how long until the first holder's lease ends, to ask again then
//! (a crashed holder).
//!
//! A call costs the same inside Redis whatever the number of readers (see
//! the index above); a waiter asks once a second, and at hand-overs.

use std::time::Duration;

use once_cell::sync::Lazy;
use redis::{Script, ScriptInvocation};

use super::queue::Queued;
use super::semaphore::{unauthenticated, whole_millis};
use super::shared::millis;
use crate::LockError;
use crate::layout::Keys;
use crate::layout::{RwKeys, RwMode};

/// Lua shared by [`ACQUIRE`] and [`RELEASE`]. KEYS: write, readers, fence,
/// queue, waiters. `retention` must be set first.
macro_rules! rw_helpers_lua {
    () => {
        concat!(
            r"
if string.sub(KEYS[1], -6) ~= ':write' then
  return redis.error_reply('ERR lockattr: the first key must be the write key')
end
local base = string.sub(KEYS[1], 1, -7)
local channel = base .. ':wake'
local function read_key(t)
  return base .. ':read:' .. t
end
-- The set of readers an older version kept (no time to live, a scan per
-- call): read while a rolling deploy runs both versions, never written.
local legacy = base .. ':readers'
if KEYS[2] == legacy then
  return redis.error_reply('ERR lockattr: the second key must be the readers index')
end
local now_ms
local function now()
  if not now_ms then
    local t = redis.call('time')
    now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  return now_ms
end
local function next_fence(ttl)
  local fence
",
            next_fence_lua!("KEYS[3]", "ttl"),
            r"
  return fence
end
-- The last write's token (0: none known), kept for a reader's lease.
local function read_fence(lease)
  local fence = tonumber(redis.call('get', KEYS[3]))
  if not fence then
    return 0
  end
",
            keep_fence_lua!("KEYS[3]", "lease + retention"),
            r"
  return fence
end
-- Writes the reader `t`'s key and enters it in the index of readers,
-- scored by the end of its lease (never before the key's own end), which
-- lives as long as its longest reader.
local function add_reader(t, value, lease)
  redis.call('set', read_key(t), value, 'PX', lease)
  redis.call('zadd', KEYS[2], now() + lease, t)
",
            keep_fence_lua!("KEYS[2]", "lease"),
            r"
end
-- The live readers: how many, and with `want_first` the shortest time
-- left (-1: none). The index drops the readers whose lease ended, so a
-- call costs the same whatever their number.
local function readers(want_first)
  redis.call('zremrangebyscore', KEYS[2], '-inf', '(' .. now())
  local n, first = redis.call('zcard', KEYS[2]), -1
  if n > 0 and want_first then
    first = tonumber(redis.call('zrange', KEYS[2], 0, 0, 'WITHSCORES')[2]) - now()
  end
  if redis.call('exists', legacy) == 1 then
    for _, t in ipairs(redis.call('smembers', legacy)) do
      local left = redis.call('pttl', read_key(t))
      if left == -2 then
        redis.call('srem', legacy, t)
      else
        n = n + 1
        if left >= 0 and (first < 0 or left < first) then
          first = left
        end
      end
    end
  end
  return n, first
end
-- The oldest live waiter (dead entries before it dropped): token, r or w,
-- lease, holder.
local function head()
  while true do
    local waiter = redis.call('lindex', KEYS[4], 0)
    if not waiter then
      return nil
    end
    local entry = redis.call('hget', KEYS[5], waiter)
    local deadline, lease, side, who
    if entry then
      deadline, lease, side, who = string.match(entry, '^(%d+):(%d+):%d+:([rw]):(.*)$')
      deadline, lease = tonumber(deadline), tonumber(lease)
    end
    if deadline and deadline >= now() and lease and lease >= 1 and lease <= ",
            max_ms!(),
            r" then
      return waiter, side, lease, who
    end
    redis.call('lpop', KEYS[4])
    if entry then
      redis.call('hdel', KEYS[5], waiter)
    end
  end
end
-- Hands the lock to the waiters at the head that may take it now: a writer
-- when nobody holds, each reader up to the first writer while no writer
-- holds. Returns the first notice (or nil), whether a writer holds, and
-- the number of readers.
local function admit(writer_held, nreaders)
  local first
  while not writer_held do
    local waiter, side, lease, who = head()
    if not waiter or (side == 'w' and nreaders > 0) then
      break
    end
    redis.call('lpop', KEYS[4])
    redis.call('hdel', KEYS[5], waiter)
    local value = waiter .. '\n' .. who .. '\n' .. string.format('%d', now())
    local fence
    if side == 'w' then
      fence = next_fence(lease + retention)
      redis.call('set', KEYS[1], value .. string.format('\n%d', fence), 'PX', lease)
      writer_held = true
    else
      fence = read_fence(lease)
      add_reader(waiter, value .. string.format('\n%d', fence), lease)
      nreaders = nreaders + 1
    end
    local notice = string.format('%s:%d:%d', waiter, fence, lease)
    redis.call('publish', channel, notice)
    first = first or notice
  end
  return first, writer_held, nreaders
end
"
        )
    };
}

/// Takes one side of the lock, or queues the caller.
///
/// KEYS: write, readers, fence, queue, waiters. ARGV: token, `<r or
/// w>:<lease ms>:<retention ms>:<queued>:<since>:<holder>` (as
/// [`ACQUIRE`](super::scripts::ACQUIRE) of a lock, with the side first),
/// how long the caller will wait in ms (0: it will not, and leaves the
/// queue). Ten words with EVALSHA (see the lock's script).
///
/// Returns `{1, fencing token}` when the token holds its side (a writer's
/// new token; for a reader, the last write's), `{0, pttl of the holder whose
/// lease ends first, or -1}` when not.
pub(crate) static ACQUIRE: Lazy<Script> = Lazy::new(|| {
    Script::new(concat!(
        r"
local side, lease_arg, retention_arg, queued, since, who = string.match(ARGV[2], '^([rw]):([^:]*):([^:]*):([01]):(%d+):(.*)$')
if not who then
  return redis.error_reply('ERR lockattr: the second argument must be <r or w>:<lease ms>:<retention ms>:<0 or 1>:<since ms>:<holder>')
end
",
        ms_arg_lua!("lease", "lease_arg", "1"),
        ms_arg_lua!("retention", "retention_arg", "0"),
        ms_arg_lua!("wait", "ARGV[3]", "0"),
        rw_helpers_lua!(),
        r"
local token = ARGV[1]
local mine_key = KEYS[1]
if side == 'r' then
  mine_key = read_key(token)
end
local function unqueue()
  if redis.call('hdel', KEYS[5], token) == 1 then
    redis.call('lrem', KEYS[4], 0, token)
  end
end
-- Whether the token holds its side (a hand-over, or a retry whose answer
-- was lost): its lease restarts.
local function held()
  local value = redis.call('get', mine_key)
  if not ",
        owns_lua!("value", "token"),
        r" then
    return nil
  end
  redis.call('pexpire', mine_key, lease)
  unqueue()
  local fence = ",
        holder_fence_lua!("value"),
        r"
  if side == 'r' then
    redis.call('zadd', KEYS[2], now() + lease, token)
",
        keep_fence_lua!("KEYS[2]", "lease"),
        r"
    return {1, fence or read_fence(lease)}
  end
  if fence then
",
        keep_fence_lua!("KEYS[3]", "lease + retention"),
        r"
  else
    fence = next_fence(lease + retention)
  end
  return {1, fence}
end
local reply = held()
if reply then
  return reply
end
local nreaders = readers()
local writer_held = redis.call('exists', KEYS[1]) == 1
local handed
handed, writer_held, nreaders = admit(writer_held, nreaders)
if handed then
  -- Perhaps to this very token (queued by an earlier call).
  reply = held()
  if reply then
    return reply
  end
end
if not writer_held and (side == 'r' or nreaders == 0)
    and redis.call('hexists', KEYS[5], token) == 0 and not head() then
  local value = token .. '\n' .. who .. '\n' .. since .. '\n'
  if side == 'r' then
    local fence = read_fence(lease)
    add_reader(token, value .. string.format('%d', fence), lease)
    return {1, fence}
  end
  local fence = next_fence(lease + retention)
  redis.call('set', mine_key, value .. string.format('%d', fence), 'PX', lease)
  return {1, fence}
end
if wait > 0 then
  if redis.call('hexists', KEYS[5], token) == 0 then
    local queued_at = now()
    redis.call('rpush', KEYS[4], token)
    redis.call('hset', KEYS[5], token, string.format('%d:%d:%d:%s:', queued_at + wait, lease, queued_at, side) .. who)
    for i = 4, 5 do
      if redis.call('pttl', KEYS[i]) < wait then
        redis.call('pexpire', KEYS[i], wait)
      end
    end
  end
else
  unqueue()
end
local first_end = redis.call('pttl', KEYS[1])
if first_end < 0 then
  first_end = -1
end
local _, readers_end = readers(true)
if readers_end >= 0 and (first_end < 0 or readers_end < first_end) then
  first_end = readers_end
end
return {0, first_end}
",
    ))
});

/// Releases one side if the token holds it, then admits the waiters that
/// may take the lock now (see the module docs), each named on the channel;
/// a token that holds nothing leaves the queue instead. Safe to repeat; the
/// give-back of an abandoned attempt too.
///
/// KEYS: write, readers, fence, queue, waiters, then the key the token
/// holds (the write key, or its own reader key). ARGV as the lock's
/// [`RELEASE_LUA`](super::scripts::RELEASE_LUA): token, channel (unused:
/// it follows from the write key), notify (unused), retention in ms, the
/// fencing token the token was granted, barge (unused). Returns as the
/// lock's: the first notice published when the lock was handed on, 1 when
/// released, 0 when the token did not hold it, and 2 when it did not but
/// may have just released it: a writer whose fencing token is at most a
/// thousand behind the counter, or a reader (whose key nobody else takes).
pub(crate) const RELEASE_LUA: &str = concat!(
    ms_arg_lua!("retention", "ARGV[4]", "0"),
    r"
local granted = tonumber(ARGV[5])
if not granted or granted ~= math.floor(granted) or granted < 0 or granted >= 9007199254740992 then
  return redis.error_reply('ERR lockattr: the fencing token must be a whole number from 0 to 2^53 - 1')
end
",
    rw_helpers_lua!(),
    r"
local token = ARGV[1]
local key = KEYS[6]
local writing = key == KEYS[1]
if not writing and key ~= read_key(token) then
  return redis.error_reply('ERR lockattr: the sixth key must be the write key or the reader key of the token')
end
local value = redis.call('get', key)
if not ",
    owns_lua!("value", "token"),
    r" then
  if redis.call('hdel', KEYS[5], token) == 1 then
    redis.call('lrem', KEYS[4], 0, token)
  end
  if not writing then
    redis.call('zrem', KEYS[2], token)
    redis.call('srem', legacy, token)
    return 2
  end
  if granted > 0 then
    local fence = tonumber(redis.call('get', KEYS[3]))
    if fence and fence >= granted and fence - granted <= 1000 then
      return 2
    end
  end
  return 0
end
redis.call('del', key)
if writing then
  redis.call('pexpire', KEYS[3], retention)
else
  redis.call('zrem', KEYS[2], token)
  redis.call('srem', legacy, token)
end
local nreaders = readers()
local first = admit(redis.call('exists', KEYS[1]) == 1, nreaders)
if first then
  return first
end
return 1
",
);

/// [`RELEASE_LUA`] as a script.
pub(crate) static RELEASE: Lazy<Script> = Lazy::new(|| Script::new(RELEASE_LUA));

/// A [`RELEASE`] call for `token` (see `scripts::release`).
pub(crate) fn release_invocation(
    keys: &Keys,
    rw: &RwKeys,
    token: &str,
    fencing_token: u64,
) -> ScriptInvocation<'static> {
    let mut invocation = RELEASE.prepare_invoke();
    invocation
        .key(&rw.write)
        .key(&rw.readers)
        .key(&keys.fence)
        .key(&keys.queue)
        .key(&keys.waiters)
        .key(rw.holder_key(token))
        .arg(token)
        .arg(&keys.channel)
        .arg("0")
        .arg(whole_millis(keys.fence_retention))
        .arg(fencing_token)
        .arg(0);
    invocation
}

/// [`RELEASE_LUA`] as EVAL with the source, to give back an attempt whose
/// answer was not read (see `scripts::give_back`).
pub(crate) fn give_back_eval(keys: &Keys, rw: &RwKeys, token: &str) -> redis::Cmd {
    redis::cmd("EVAL")
        .arg(RELEASE_LUA)
        .arg(6)
        .arg(&rw.write)
        .arg(&rw.readers)
        .arg(&keys.fence)
        .arg(&keys.queue)
        .arg(&keys.waiters)
        .arg(rw.holder_key(token))
        .arg(token)
        .arg(&keys.channel)
        .arg("0")
        .arg(whole_millis(keys.fence_retention))
        .arg(0)
        .arg(0)
        .to_owned()
}

fn acquire_invocation<'a>(
    keys: &Keys,
    rw: &RwKeys,
    (token, expire, wait, queued): (&str, Duration, Duration, bool),
) -> ScriptInvocation<'a> {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, whole_millis);
    let side = match rw.mode {
        RwMode::Read => 'r',
        RwMode::Write => 'w',
    };
    let mut invocation = ACQUIRE.prepare_invoke();
    invocation
        .key(&rw.write)
        .key(&rw.readers)
        .key(&keys.fence)
        .key(&keys.queue)
        .key(&keys.waiters)
        .arg(token)
        .arg(format!(
            "{side}:{}:{}:{}:{since}:{}",
            millis(expire),
            whole_millis(keys.fence_retention),
            u8::from(queued),
            keys.holder
        ))
        .arg(whole_millis(wait));
    invocation
}

/// What one [`ACQUIRE`] call found.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Answer {
    /// The token holds its side.
    Taken { fencing_token: u64 },
    /// Not taken; the first holder's lease ends in this much time.
    Busy { first_end: Option<Duration> },
}

impl Answer {
    fn from_reply(reply: &[i64]) -> Answer {
        match reply {
            [1, fence, ..] => Answer::Taken {
                fencing_token: u64::try_from(*fence).unwrap_or(0),
            },
            [_, left, ..] => Answer::Busy {
                first_end: u64::try_from(*left).ok().map(Duration::from_millis),
            },
            _ => Answer::Busy { first_end: None },
        }
    }
}

impl Queued<'_> {
    pub(crate) async fn try_rw(
        self,
        keys: &Keys,
        rw: &RwKeys,
        attempt: (&str, Duration, Duration, bool),
    ) -> Result<Answer, LockError> {
        let invocation = acquire_invocation(keys, rw, attempt);
        let reply: Result<Vec<i64>, LockError> = match self {
            Queued::Single(node) => {
                node.run_acquisition(&invocation, give_back_eval(keys, rw, attempt.0))
                    .await
            }
            Queued::Cluster(nodes) => nodes.run_script(&invocation).await,
        };
        Ok(Answer::from_reply(&reply.map_err(unauthenticated)?))
    }

    pub(crate) async fn give_back_rw(
        self,
        keys: &Keys,
        rw: &RwKeys,
        token: &str,
    ) -> Result<(), LockError> {
        let invocation = release_invocation(keys, rw, token, 0);
        let given: Result<redis::Value, LockError> = match self {
            Queued::Single(node) => node.run_script(&invocation).await,
            Queued::Cluster(nodes) => nodes.run_script(&invocation).await,
        };
        given.map(drop)
    }
}

#[cfg(test)]
mod tests {
    //! The scripts called directly on a private redis-server: a bad
    //! argument is an error and changes nothing; a reader's release hands
    //! the lock to the queued writer, never its own key; a writer's release
    //! admits the readers before the next writer; dead entries are skipped.

    use std::collections::BTreeMap;

    use redis::Connection;

    use super::*;
    use crate::backend::test_server::Server;

    fn snapshot(con: &mut Connection) -> BTreeMap<String, Vec<u8>> {
        let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(con).unwrap();
        keys.into_iter()
            .map(|key| {
                let dump: Vec<u8> = redis::cmd("DUMP").arg(&key).query(con).unwrap();
                (key, dump)
            })
            .collect()
    }

    fn keys_for(mode: RwMode) -> (Keys, RwKeys) {
        let mut keys = Keys::new("t:", "rw", Duration::from_secs(60));
        RwKeys::make(&mut keys, mode);
        let rw = keys.rw.clone().unwrap();
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
        release_invocation(&keys, &rw, token, 0)
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
            assert_eq!(before, snapshot(&mut con), "{args:?} wrote");
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
            refused(&RELEASE, &six, &["a", "c", "0", bad, "0", "0"]);
        }
        let reader = rw.holder_key("a");
        let mut six = all.to_vec();
        six.push(&reader);
        for bad in ["", "x", "-1", "1.5", "nan", "inf", "9007199254740992"] {
            refused(&RELEASE, &six, &["a", "c", "0", "60000", bad, "0"]);
        }
        // Not a side; not the write key first; not the caller's reader key.
        refused(&ACQUIRE, &all, &["n", "x:1000:60000:0:1:h", "1000"]);
        let mut shifted = all.to_vec();
        shifted.rotate_left(1);
        refused(&ACQUIRE, &shifted, &["n", "r:1000:60000:0:1:h", "1000"]);
        let other = rw.holder_key("someone-else");
        let mut six = all.to_vec();
        six.push(&other);
        refused(&RELEASE, &six, &["a", "c", "0", "60000", "0", "0"]);
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
