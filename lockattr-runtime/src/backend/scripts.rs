//! The Lua scripts, one static [`Lua`] each, and their calls
//! ([`Invocation`]).
//!
//! A server of Redis 7 or later is sent FCALL of the script's function in
//! the library that `build.rs` makes of every script ([`LIBRARY`]), which
//! defines the shared helpers once, when it is loaded, instead of on every
//! call; the library is loaded (`FUNCTION LOAD`) when the server answers
//! that it lacks the function (first use, or after a restart, a
//! `FUNCTION FLUSH` or a `FLUSHALL` emptied it), then the call is sent
//! again. A server that refuses FCALL or `FUNCTION LOAD` (older than 7.0, an
//! ACL without them, the command renamed away) is sent EVALSHA instead from
//! then on (see [`ScriptMode`]), with the script loaded on NOSCRIPT. Both
//! run the same Lua, so they answer the same replies and the same errors of
//! the scripts' own (an error of a command a script runs ends with Redis's
//! note of where, which names the function or the SHA1).
//!
//! Every script checks its numeric arguments before it writes anything: a
//! duration must be a whole number of milliseconds within the bounds below,
//! or the script answers an error and leaves Redis as it was (Redis does not
//! roll back the writes of a script that fails halfway). Each number is then
//! passed on to Redis as the checked Lua number, never as the caller's text.
//!
//! Nothing of a lock stays in Redis long after its last lease ended: the
//! lock key is always written with its lease, the queue keys expire with the
//! longest wait, and the fencing counter expires `fence_retention` after the
//! lease of the acquisition that last incremented it (or after the release).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::{Cmd, FromRedisValue, RedisError, RedisResult, Script, ToRedisArgs};
use std::sync::OnceLock;

use super::shared::{Renewal, Replicas, Successor, millis, whole_millis};
use crate::layout::{Keys, KindKeys, RwKeys};

/// The files of `src/lua/` named, joined in order, as they are (what a
/// test reads a shared file's constants from).
#[cfg(test)]
macro_rules! lua {
    ($($file:literal),+) => {
        concat!($(include_str!(concat!("../lua/", $file))),+)
    };
}
#[cfg(test)]
pub(crate) use lua;

/// The script `src/lua/<file>` (a [`Source`]): its file name, and its
/// source, the shared helpers it uses (only those: see `build.rs`) followed
/// by its own file.
macro_rules! script {
    ($file:literal) => {
        $crate::backend::scripts::Source {
            file: $file,
            text: include_str!(concat!(env!("OUT_DIR"), "/lua/", $file)),
        }
    };
}
pub(crate) use script;

/// A script as [`script!`] gives it.
pub(crate) struct Source {
    /// The file's name in `src/lua/`, which names its function in the
    /// library.
    pub(crate) file: &'static str,
    /// The source EVAL and SCRIPT LOAD are sent.
    pub(crate) text: &'static str,
}

/// The Functions library of every script (made by `build.rs`), as
/// `FUNCTION LOAD` is sent it: its first line names it
/// `lockattr_v<hash of its text>`, and each script is its function
/// `lockattr_v<hash>_<file less .lua>` (with `_sharded` after it for the
/// copy a Redis Cluster runs, see [`Lua::sharded`]). A library of another
/// version of this crate has another name, so both stay loaded side by
/// side during a rolling deploy.
pub(crate) static LIBRARY: &str = include_str!(concat!(env!("OUT_DIR"), "/lua/library.lua"));

/// The name of [`LIBRARY`], from its first line (`#!lua name=<name>`).
pub(crate) fn library_name() -> &'static str {
    let first = LIBRARY.lines().next().unwrap_or_default();
    first.strip_prefix("#!lua name=").unwrap_or(first)
}

/// How one server (a node, or a whole Redis Cluster) is sent scripts:
/// FCALL of the library's functions, which it is sent first, or EVALSHA,
/// once it refused FCALL or `FUNCTION LOAD` (see [`fcall_refused`]).
///
/// The choice is remembered, so that a server that refuses Functions costs
/// one refused call, not one per call. It is made again when a connection
/// to the server is opened ([`reset`](Self::reset)): the new connection
/// may reach another server (a failover, a restart on a new version).
/// Errors of the script itself never change it.
#[derive(Debug, Default)]
pub(crate) struct ScriptMode {
    /// Whether the server refused Functions.
    eval: AtomicBool,
}

impl ScriptMode {
    /// Whether the server is sent FCALL.
    pub(crate) fn functions(&self) -> bool {
        !self.eval.load(Ordering::Relaxed)
    }

    /// Sends FCALL again, until the server refuses it.
    pub(crate) fn reset(&self) {
        self.eval.store(false, Ordering::Relaxed);
    }

    /// Sends EVALSHA from now on: the server refused Functions with `e`.
    fn fall_back(&self, e: &RedisError) {
        if !self.eval.swap(true, Ordering::Relaxed) {
            tracing::debug!(target: "lockattr",
                error = %e,
                "the server refuses Redis Functions: its scripts go with EVALSHA"
            );
        }
    }
}

/// The first error a server answered in `e` (the first failed command of a
/// pipeline): its code and its message. `None` for an error of the
/// connection.
fn server_error(e: &RedisError) -> Option<(String, String)> {
    let errors = e.clone().into_server_errors()?;
    let (_, error) = errors.first()?;
    Some((
        error.code().to_owned(),
        error.details().unwrap_or_default().to_owned(),
    ))
}

/// Whether the server answered `e` to FCALL because it lacks the function
/// (the library is not loaded): nothing ran.
pub(crate) fn function_missing(e: &RedisError) -> bool {
    server_error(e).is_some_and(|(code, message)| code == "ERR" && message == "Function not found")
}

/// Whether the server refused the FCALL command itself with `e`, before
/// any script ran: it does not know the command (older than Redis 7.0, or
/// renamed away with `rename-command`), or the ACL user may not run it.
/// A script's own errors, and those of the commands it calls, never are
/// (they name another command, or none).
pub(crate) fn fcall_refused(e: &RedisError) -> bool {
    let Some((code, message)) = server_error(e) else {
        return false;
    };
    let message = message.to_ascii_lowercase();
    match code.as_str() {
        "NOPERM" => message.contains("'fcall'"),
        // `unknown command 'FCALL', ...` (Redis 7), or with backquotes.
        "ERR" => message
            .strip_prefix("unknown command ")
            .is_some_and(|rest| rest.trim_start_matches(['\'', '`']).starts_with("fcall")),
        _ => false,
    }
}

/// Loads [`LIBRARY`] (`FUNCTION LOAD`); a library of that name already
/// loaded (by another process meanwhile: the same text) is fine.
///
/// `Err(None)` when the server refuses it (older than 7.0, an ACL without
/// `FUNCTION LOAD`, the command renamed away, or anything else it answers
/// with an error): scripts then go with EVALSHA. `Err(Some(e))` when the
/// connection failed.
pub(crate) async fn load_library<C: ConnectionLike>(
    connection: &mut C,
) -> Result<(), Option<RedisError>> {
    match redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg(LIBRARY)
        .query_async::<redis::Value>(connection)
        .await
    {
        Ok(_) => Ok(()),
        Err(e) => match server_error(&e) {
            Some((_, message)) if message.ends_with("already exists") => Ok(()),
            Some(_) => Err(None),
            None => Err(Some(e)),
        },
    }
}

/// A script: its Lua source (for EVAL and SCRIPT LOAD), its SHA1 (for
/// EVALSHA), computed on first use, and its function in [`LIBRARY`] (for
/// FCALL).
pub(crate) struct Lua {
    pub(crate) source: &'static str,
    /// Its file in `src/lua/`, which names its function.
    file: &'static str,
    /// Whether this is the copy a Redis Cluster runs.
    is_sharded: bool,
    hash: OnceLock<String>,
    /// The name of its function in [`LIBRARY`], made on first use.
    function: OnceLock<String>,
    /// The copy a Redis Cluster runs (see [`sharded`](Self::sharded)),
    /// made on first use.
    sharded: OnceLock<Option<&'static Lua>>,
}

/// The line of `helpers.lua` that picks how the scripts publish their
/// notices, and what it becomes in the copy a Redis Cluster runs.
const PUBLISH: (&str, &str) = (
    "local publish_command = 'publish'\n",
    "local publish_command = 'spublish'\n",
);

impl Lua {
    /// The script `source` (see [`script!`]); its hash and its function's
    /// name are made on first use.
    pub(crate) const fn new(source: Source) -> Lua {
        Lua {
            source: source.text,
            file: source.file,
            is_sharded: false,
            hash: OnceLock::new(),
            function: OnceLock::new(),
            sharded: OnceLock::new(),
        }
    }

    /// The copy of this script that a Redis Cluster runs: its notices go
    /// out with SPUBLISH, which only the shard serving the channel's slot
    /// carries, instead of PUBLISH, which every node of the cluster
    /// carries. The script itself when it publishes nothing. Its function
    /// in [`LIBRARY`] is the script's with `_sharded` after it.
    pub(crate) fn sharded(&'static self) -> &'static Lua {
        self.sharded
            .get_or_init(|| {
                // Made once per script, and kept as long as the static
                // script itself.
                sharded_source(self.source).map(|source| {
                    let mut copy = Lua::new(Source {
                        file: self.file,
                        text: Box::leak(source.into_boxed_str()),
                    });
                    copy.is_sharded = true;
                    &*Box::leak(Box::new(copy))
                })
            })
            .unwrap_or(self)
    }

    /// The SHA1 of the source, as EVALSHA names the script.
    fn hash(&self) -> &str {
        self.hash
            .get_or_init(|| Script::new(self.source).get_hash().to_owned())
    }

    /// The name of the script's function in [`LIBRARY`], as FCALL names
    /// it.
    pub(crate) fn function(&self) -> &str {
        self.function.get_or_init(|| {
            let name = self.file.trim_end_matches(".lua");
            let sharded = if self.is_sharded { "_sharded" } else { "" };
            format!("{}_{name}{sharded}", library_name())
        })
    }

    /// A call of this script with `keys`, as FCALL of its function; its
    /// arguments follow.
    pub(crate) fn with_keys<'k>(
        &'static self,
        keys: impl IntoIterator<Item = &'k str>,
    ) -> Invocation {
        let keys: Vec<&str> = keys.into_iter().collect();
        let mut cmd = redis::cmd("FCALL");
        cmd.arg(self.function()).arg(keys.len());
        for key in keys {
            cmd.arg(key);
        }
        Invocation {
            script: self,
            cmd,
            evalsha: OnceLock::new(),
        }
    }

    /// Loads the script into the server's script cache (`SCRIPT LOAD`).
    pub(crate) async fn load_async<C: ConnectionLike>(
        &self,
        connection: &mut C,
    ) -> RedisResult<()> {
        redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(self.source)
            .query_async::<String>(connection)
            .await
            .map(drop)
    }
}

/// What FCALL came to (see [`Invocation::invoke_async`]).
enum Called<T> {
    /// The server's answer (the script's, or an error).
    Answer(RedisResult<T>),
    /// The server refuses Functions (see [`fcall_refused`]): nothing ran.
    Refused(RedisError),
}

/// One call of a script: the FCALL command, its keys and arguments written
/// once into it as they are given (no copy per argument when it is sent,
/// and none per send), and the same call as EVALSHA, copied from it once,
/// on its first send to a server that refuses Functions. Sent with
/// [`invoke_async`](Self::invoke_async) (FCALL or EVALSHA, as the server's
/// [`ScriptMode`] says; loaded when the server lacks it), followed by
/// `WAIT` with [`invoke_then_wait`](Self::invoke_then_wait), or turned into
/// an EVAL with the source ([`eval`](Self::eval): a give-back that may
/// reach a server that never saw the script, or lost its cache).
#[derive(Clone)]
pub(crate) struct Invocation {
    script: &'static Lua,
    /// The call as FCALL of the script's function, written once as its
    /// keys and arguments are given: what a server of Redis 7 or later is
    /// sent.
    cmd: Cmd,
    /// The call as EVALSHA, made on first use (a server that refuses
    /// Functions).
    evalsha: OnceLock<Cmd>,
}

impl Invocation {
    /// The same call of the script's copy that a Redis Cluster runs (see
    /// [`Lua::sharded`]); borrowed when the script publishes nothing.
    pub(crate) fn sharded(&self) -> std::borrow::Cow<'_, Invocation> {
        let script = self.script.sharded();
        if std::ptr::eq(script, self.script) {
            return std::borrow::Cow::Borrowed(self);
        }
        let mut cmd = redis::cmd("FCALL");
        cmd.arg(script.function());
        copy_after(&self.cmd, 2, &mut cmd);
        std::borrow::Cow::Owned(Invocation {
            script,
            cmd,
            evalsha: OnceLock::new(),
        })
    }

    /// Appends an argument (after the keys, given when it was made).
    pub(crate) fn arg(&mut self, arg: impl ToRedisArgs) -> &mut Invocation {
        self.cmd.arg(arg);
        self.evalsha = OnceLock::new();
        self
    }

    /// The call as FCALL of the script's function.
    pub(crate) fn fcall(&self) -> &Cmd {
        &self.cmd
    }

    /// The call as EVALSHA of the script's SHA1: the words after `FCALL
    /// <function>` (the number of keys, the keys and the arguments) are the
    /// same.
    pub(crate) fn evalsha(&self) -> &Cmd {
        self.evalsha.get_or_init(|| {
            let mut cmd = redis::cmd("EVALSHA");
            cmd.arg(self.script.hash());
            copy_after(&self.cmd, 2, &mut cmd);
            cmd
        })
    }

    /// Sends the call: FCALL while `mode` says the server takes it
    /// (the library loaded when the server lacks the function, and the
    /// call sent again), EVALSHA otherwise or once the server refused FCALL
    /// (the script loaded on NOSCRIPT: it did not run, and the call sent
    /// again).
    pub(crate) async fn invoke_async<T: FromRedisValue, C: ConnectionLike>(
        &self,
        mode: &ScriptMode,
        connection: &mut C,
    ) -> RedisResult<T> {
        if mode.functions() {
            let called = match self.fcall().query_async(connection).await {
                Err(e) if function_missing(&e) => match load_library(connection).await {
                    Ok(()) => Called::from(self.fcall().query_async(connection).await),
                    Err(None) => Called::Refused(e),
                    Err(Some(e)) => return Err(e),
                },
                answer => Called::from(answer),
            };
            match called {
                Called::Answer(answer) => return answer,
                Called::Refused(e) => mode.fall_back(&e),
            }
        }
        match self.evalsha().query_async(connection).await {
            Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
                self.script.load_async(connection).await?;
                self.evalsha().query_async(connection).await
            }
            answer => answer,
        }
    }

    /// [`invoke_async`](Self::invoke_async) on a synchronous connection
    /// (the scripts' own tests): EVALSHA.
    #[cfg(test)]
    pub(crate) fn invoke<T: FromRedisValue>(
        &self,
        connection: &mut redis::Connection,
    ) -> RedisResult<T> {
        match self.evalsha().query(connection) {
            Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
                redis::cmd("SCRIPT")
                    .arg("LOAD")
                    .arg(self.script.source)
                    .query::<String>(connection)?;
                self.evalsha().query(connection)
            }
            answer => answer,
        }
    }

    /// Sends the call, then `beat` when given (its answer ignored), then
    /// `WAIT` for `replicas`, in one pipeline on `connection` (which WAIT
    /// blocks until the replicas answered or the timeout passed). The
    /// answer is an `Acked` of the script's. The call goes as FCALL or
    /// EVALSHA as for [`invoke_async`](Self::invoke_async): a function or
    /// script Redis does not know yet (it did not run, and WAIT only counted
    /// earlier writes) is loaded, and the pipeline sent again; a refused
    /// FCALL is sent again as EVALSHA.
    pub(crate) async fn invoke_then_wait<T: FromRedisValue, C: ConnectionLike + Send>(
        &self,
        mode: &ScriptMode,
        replicas: Replicas,
        beat: Option<&Cmd>,
        connection: &mut C,
    ) -> RedisResult<T> {
        let then_wait = |call: &Cmd| {
            let mut pipeline = redis::pipe();
            pipeline.add_command(call.clone());
            if let Some(beat) = beat {
                pipeline.add_command(beat.clone()).ignore();
            }
            pipeline
                .cmd("WAIT")
                .arg(replicas.min)
                .arg(millis(replicas.timeout));
            pipeline
        };
        if mode.functions() {
            let pipeline = then_wait(self.fcall());
            let called = match pipeline.query_async(connection).await {
                Err(e) if function_missing(&e) => match load_library(connection).await {
                    Ok(()) => Called::from(pipeline.query_async(connection).await),
                    Err(None) => Called::Refused(e),
                    Err(Some(e)) => return Err(e),
                },
                answer => Called::from(answer),
            };
            match called {
                Called::Answer(answer) => return answer,
                Called::Refused(e) => mode.fall_back(&e),
            }
        }
        let pipeline = then_wait(self.evalsha());
        match pipeline.query_async(connection).await {
            Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
                self.script.load_async(connection).await?;
                pipeline.query_async(connection).await
            }
            answer => answer,
        }
    }

    /// The same call as EVAL with the script's source.
    pub(crate) fn eval(&self) -> Cmd {
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(self.script.source);
        // The words after `FCALL <function>`: the number of keys, the keys
        // and the arguments.
        copy_after(&self.cmd, 2, &mut cmd);
        cmd
    }
}

impl<T> From<RedisResult<T>> for Called<T> {
    /// An FCALL's answer: [`Called::Refused`] when the server refused the
    /// command itself.
    fn from(answer: RedisResult<T>) -> Called<T> {
        match answer {
            Err(e) if fcall_refused(&e) => Called::Refused(e),
            answer => Called::Answer(answer),
        }
    }
}

/// Appends the words of `from` after its first `skip` to `to`.
fn copy_after(from: &Cmd, skip: usize, to: &mut Cmd) {
    for word in from.args_iter().skip(skip) {
        if let redis::Arg::Simple(bytes) = word {
            to.arg(bytes);
        }
    }
}

/// Script source `source` as a Redis Cluster runs it (see
/// [`Lua::sharded`]); `None` when the script publishes nothing (it never
/// calls the shared `announce`, which `build.rs` then leaves out).
fn sharded_source(source: &str) -> Option<String> {
    source
        .contains("local function announce(")
        .then(|| source.replacen(PUBLISH.0, PUBLISH.1, 1))
}

/// `EVAL` command `cmd` (an [`Invocation::eval`]) with the source of the
/// copy a Redis Cluster runs (see [`Lua::sharded`]); `cmd` itself when
/// its script publishes nothing.
pub(crate) fn sharded_eval(cmd: Cmd) -> Cmd {
    let source = match cmd.args_iter().nth(1) {
        Some(redis::Arg::Simple(source)) => {
            std::str::from_utf8(source).ok().and_then(sharded_source)
        }
        _ => None,
    };
    let Some(source) = source else {
        return cmd;
    };
    let mut sharded = redis::cmd("EVAL");
    sharded.arg(source);
    copy_after(&cmd, 2, &mut sharded);
    sharded
}

/// Takes the lock if it is free, in one round trip; otherwise queues the
/// caller (when it is willing to wait).
///
/// KEYS: lock, fence, queue, waiters. ARGV: token, `<lease in ms>:<how
/// long the fence counter outlives the lease in ms>:<queued>:<since>:<holder>`,
/// how long the caller will wait in ms (0: it will not, and leaves the
/// queue if it was in it). `queued` is `1` when an earlier call with this
/// token may have queued it (it then leaves the queue when it takes the
/// lock), `0` for a token's first call; `since` is the caller's clock in ms.
/// Ten words with EVALSHA, the most Redis reads from a client that has not
/// authenticated: a missing password is then answered NOAUTH, not a
/// protocol error (hence everything but the token and the wait in one
/// argument).
///
/// The lock's value is `<token>\n<holder>\n<since>`: the owner token, who
/// holds it (`<host>\n<pid>\n<label>`, as the Locker describes itself) and
/// when it was taken, in ms (by the taker's clock; by the server's when a
/// release handed it over). [`INSPECT`] shows all but the token. A queued
/// waiter's entry carries its holder too, for a hand-over.
/// Returns `{1, fencing token}` when the token holds the lock, `{0, pttl of
/// the holder}` when not.
///
/// The free lock is tried first, with `SET NX`, before any shared helper
/// runs (arguments of the shape [`acquire`] writes are read inline; any
/// other shape goes through the full checks, which answer the same as
/// before): an uncontended acquisition costs `GET` of the counter, `SET NX`
/// and `SET` of the counter, nothing else. A value at the fence key that no
/// script writes there (not a whole number below 2^53) is refused before
/// anything is written, with an error that names the key.
///
/// A token that already holds the lock counts as taken: a release handed it
/// the lock (see [`RELEASE`]), or this is a retry whose first answer was
/// lost. Its lease restarts, so it is never shorter than the caller thinks.
///
/// A free lock goes to whoever asks first, queued or not: it is only free
/// with waiters queued when a holder's lease ran out (a release hands the
/// lock to the oldest waiter instead), and then the first waiter whose timer
/// fires takes it.
pub(crate) static ACQUIRE: Lua = Lua::new(script!("acquire.lua"));

/// Releases the lock if the token owns it, handing it straight to the oldest
/// waiter whose deadline has not passed (with a new fencing token and that
/// waiter's lease) and publishing `<waiter's token>:<fencing token>:<lease
/// ms>` on the lock's channel; deletes it when nobody waits, and then lets
/// the fence counter expire after the retention. A token that does not own
/// the lock leaves the queue instead (a waiter that gave up).
///
/// KEYS: lock, fence, queue, waiters. ARGV: token, then
/// `<notify>:<retention>:<fencing token>:<barge>:<shared>:<channel>`, read
/// once: `notify` is `1` to publish `-:0:0` on the channel when the lock is
/// deleted (nobody queued; the release notice of a Redlock, whose waiters
/// do not queue) or `0`, `retention` how long the fence counter outlives a
/// lease in ms, the fencing token the token was granted (0: none), `barge`
/// the barging window in ms (see `Fairness`), `shared` is `1` when the
/// fence counter is shared with other live holders (a semaphore's permits;
/// a deletion then never shortens it) or `0`, and the lock's channel last
/// (it may hold colons); then, optionally, a successor: the token of a
/// waiter of the releasing process (`crate::local`) and `<its lease
/// ms>:<its wait ms>:<its holder>`. When nobody is queued, the successor takes the lock
/// in the same call (a new fencing token, its lease, the notice published
/// as for any hand-over); otherwise it is queued last and the oldest waiter
/// is served, so the other processes keep their turn. `-:0:0` is also published when the lock is
/// deleted and the queue held the marker `-` (never a token): callers
/// waiting for several names at once (`lockset`) put it there, at the
/// end, to hear when the lock is freed. A release that pops the marker
/// first drops the entries of the waiters hash whose deadline has passed
/// (a set waiter's entry is in no queue, so no pop reaches it: one that
/// died without giving back would stay), with `HGETALL`, skipped where the
/// server refuses it; a hand-over to a queued waiter then puts the marker
/// back at the end (while an entry is left in the waiters hash, and with
/// that hash's time to live when the pop emptied the queue).
/// Returns 1 when released and deleted, the notice (a string) when released
/// and handed to a waiter (so that the releasing process can wake a waiter
/// of its own at once, without waiting for the notice to come round through
/// its subscriber connection), 0 when the token did not own the lock, and 2
/// when it did not, but the fence counter is at most `RECENT_FENCE` (1000, `lua/helpers.lua`) past
/// the given fencing token: no more than that many acquisitions since the
/// token's, and not a counter started again from the clock because Redis
/// lost the lock (a restart without persistence).
///
/// The owner's release of a lock nobody is queued for is tried first,
/// before any shared helper but `owns` runs: `GET`, `PTTL` of the queue
/// (-2: there is none), `DEL` and `PEXPIRE` of the counter (and the notice
/// when asked for).
///
/// Running it twice is harmless (the second finds the lock no longer the
/// token's and changes nothing of another owner's), but the second answer
/// is not 1: see `SingleNode::release` for what a re-sent release means.
pub(crate) static RELEASE: Lua = Lua::new(script!("release.lua"));

/// Releases every name of a set taken under one token in one call, each
/// exactly as [`RELEASE`] releases a lock (handed to its oldest live waiter,
/// or deleted), so a set costs one call per server or Cluster slot to
/// release, as it costs to take.
///
/// KEYS: for each name, its lock, fence, queue and waiters keys. ARGV:
/// token, `1` to publish `-:0:0` on a name's channel when its lock is
/// deleted (Redlock) or `0`, how long a fence counter outlives a lease in
/// ms, the barging window in ms, then for each name its channel and the
/// fencing token it was granted (0: none). Returns, for each name in order,
/// what [`RELEASE`] returns for it.
pub(crate) static RELEASE_SET: Lua = Lua::new(script!("release_set.lua"));

/// Frees a lock whoever holds it (an operator's forced unlock), exactly as
/// its owner's release would: handed to the oldest waiter, or deleted.
///
/// KEYS: lock, fence, queue, waiters. ARGV: the lock's channel, `1` to
/// publish a release notice when nobody is queued (Redlock) or `0`, how
/// long the fence counter outlives a lease in ms, and the fencing token the
/// holder must have (0: any holder), as the holder's own value carries it
/// (never the counter, which may have moved on or be gone).
/// Returns 0 when the lock was free (or held under another token), or `{1, <holder>\n<since>}` of the
/// owner it took the lock from (never the owner token).
pub(crate) static FORCE_UNLOCK: Lua = Lua::new(script!("force_unlock.lua"));

/// What [`INSPECT`] tells of one lock on one server.
///
/// KEYS: lock, fence, waiters. Returns `{<holder>\n<since>[\n<fencing
/// token>] or '', pttl, the holder's fencing token as its value carries it
/// or -1 (a value written by an older version), the waiters whose deadline
/// has not passed (every entry of the waiters hash where the server refuses
/// `HGETALL`: `HLEN`), sha1 of the owner token}`, or 0
/// when the lock is free. The owner token itself never leaves Redis: its
/// hash only tells owners apart (a Redlock's majority view).
pub(crate) static INSPECT: Lua = Lua::new(script!("inspect.lua"));

/// Changes the lease of a lock the token owns. Returns the lease's new time
/// left in ms, -1 when the token does not own the lock, or -2 (and changes
/// nothing) when the lease would have more than the max lease left.
///
/// KEYS: the holder key, its fence counter, and its kind's index of holders
/// (the holder key again when the kind keeps none; see `keep_hold` in `lua/helpers.lua`).
/// ARGV: token, ms, mode, max lease in ms, how long the fence counter
/// outlives the lease in ms, and for `hold` the lock's channel. Whatever
/// the mode, the counter and the index then live at least as long as the
/// new lease (plus the retention for the counter). Modes:
/// - `set`: the lease becomes ms (safe to repeat);
/// - `hold`: as `set`, then publishes `-:0:<ms>` on the channel, which
///   names no waiter and tells every waiter when the lock now ends (a
///   release within `hold_at_least`; safe to repeat);
/// - `add`: add ms to the time left (not safe to repeat: twice adds twice);
/// - `raise`: the lease becomes ms if it has less left, and is left alone
///   otherwise (safe to repeat): how an `add` whose answer was lost is sent
///   again, with ms the time the lease was known to have then plus the
///   addition, less the time since, so that the first try or the re-send
///   applies, never both.
pub(crate) static EXTEND: Lua = Lua::new(script!("extend.lua"));

/// Renews many leases in one call (the watchdog's batch).
///
/// KEYS: for each hold, its holder key, fence counter and index (as
/// [`EXTEND`]'s). ARGV: how long a fence counter outlives a lease in ms,
/// then for each hold its owner's token and the lease in ms. A raised lease
/// keeps the hold's counter and index alive with it (see `keep_hold` in `lua/helpers.lua`).
/// A lease is raised to that many ms if it has less left; it is never
/// shortened (an owner may have extended it further), and 0 only reads it.
/// Returns, per key, the time left in ms, or -1 when the token does not own
/// the lock: a deleted or taken lock is never brought back. Safe to repeat.
pub(crate) static RENEW: Lua = Lua::new(script!("renew.lua"));

/// Raises a lock's fence counter to a Redlock's fencing token, if the token
/// still owns the lock there (see `Redlock`'s fencing); a raised counter
/// expires the retention after the lock's lease. Safe to repeat.
///
/// KEYS: lock, fence. ARGV: owner token, fencing token, how long the fence
/// counter outlives the lease in ms.
/// Returns 1 when the owner token owns the lock (the counter is then at
/// least the fencing token), 0 when not.
pub(crate) static RAISE_FENCE: Lua = Lua::new(script!("raise_fence.lua"));

/// What [`RELEASE`] answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ReleaseReply {
    /// 0, 1 or 2 (see [`RELEASE`]).
    Code(i64),
    /// Released and handed to a waiter: the notice published for it,
    /// `<waiter's token>:<fencing token>:<lease ms>`.
    Handed(String),
}

impl redis::FromRedisValue for ReleaseReply {
    fn from_redis_value(v: redis::Value) -> Result<Self, redis::ParsingError> {
        match v {
            redis::Value::Int(code) => Ok(ReleaseReply::Code(code)),
            v => String::from_redis_value(v).map(ReleaseReply::Handed),
        }
    }
}

/// The replies of a [`RELEASE_SET`] call for `names` names: one per name,
/// or an error naming `server` when Redis answered another number.
pub(crate) fn set_replies(
    replies: Vec<ReleaseReply>,
    names: usize,
    server: &str,
) -> Result<Vec<ReleaseReply>, crate::LockError> {
    if replies.len() != names {
        return Err(crate::LockError::UnexpectedReply {
            server: server.to_owned(),
            reply: format!("the release of {names} names with {} values", replies.len()),
        });
    }
    Ok(replies)
}

/// An [`ACQUIRE`] call; `queued`: an earlier call with this token may have
/// queued it.
pub(crate) fn acquire(
    keys: &Keys,
    token: &str,
    expire: Duration,
    wait: Duration,
    queued: bool,
) -> Invocation {
    let mut invocation = ACQUIRE.with_keys(keys.queued());
    invocation
        .arg(token)
        .arg(packed(keys, expire, Some(queued)))
        .arg(whole_millis(wait));
    invocation
}

/// The packed second argument of every acquire script (one argument, so
/// that the lock's ACQUIRE stays within the ten words Redis reads before
/// authentication): `<lease ms>:<retention ms>[:<queued 0 or 1>]:<since
/// ms>:<holder>`, `since` by this process's clock.
pub(crate) fn packed(keys: &Keys, expire: Duration, queued: Option<bool>) -> String {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let (lease, retention) = (millis(expire), whole_millis(keys.fence_retention));
    match queued {
        Some(queued) => format!(
            "{lease}:{retention}:{}:{since}:{}",
            u8::from(queued),
            keys.holder
        ),
        None => format!("{lease}:{retention}:{since}:{}", keys.holder),
    }
}

/// A [`RELEASE`] call for `token`, granted `fencing_token` (0: none);
/// `notify` publishes a release notice when nobody is queued (Redlock);
/// `successor`: a waiter of this process to hand a lock to (see
/// [`RELEASE`]).
pub(crate) fn release(
    keys: &Keys,
    token: &str,
    fencing_token: u64,
    notify: bool,
    successor: Option<&Successor<'_>>,
) -> Invocation {
    if let KindKeys::Rw(rw) = &keys.kind {
        // A read-write lock's release never hands a reader's key on.
        return rw_release_call(keys, rw, token, fencing_token);
    }
    let mut call = release_call(keys, token, fencing_token, notify, keys.barge);
    if let Some(next) = successor {
        call.arg(next.token).arg(format!(
            "{}:{}:{}",
            millis(next.lease),
            millis(next.wait),
            next.holder
        ));
    }
    call
}

/// A [`RELEASE_SET`] call for `token`, for `members`: each name's keys and
/// the fencing token it was granted. `notify` as for [`release`].
pub(crate) fn release_set(members: &[(&Keys, u64)], token: &str, notify: bool) -> Invocation {
    let mut call = RELEASE_SET.with_keys(members.iter().flat_map(|(keys, _)| keys.queued()));
    let (retention, barge) = members
        .first()
        .map_or((Duration::ZERO, Duration::ZERO), |(keys, _)| {
            (keys.fence_retention, keys.barge)
        });
    call.arg(token)
        .arg(if notify { "1" } else { "0" })
        .arg(whole_millis(retention))
        .arg(whole_millis(barge));
    for (keys, fencing_token) in members {
        call.arg(&keys.channel).arg(*fencing_token);
    }
    call
}

/// A [`RELEASE`] call sent as EVAL with the source, to give back an
/// acquisition whose answer was not read: it may run after a restart or on
/// a server that never saw the script, where EVALSHA would only say
/// NOSCRIPT long after anyone listened. No fencing token, no notice, no
/// barging window: the lock goes straight to the oldest waiter.
pub(crate) fn give_back(keys: &Keys, token: &str) -> redis::Cmd {
    if let KindKeys::Rw(rw) = &keys.kind {
        return rw_release_call(keys, rw, token, 0).eval();
    }
    release_call(keys, token, 0, false, Duration::ZERO).eval()
}

/// Releases one side of a read-write lock if the token holds it, then admits the waiters that
/// may take the lock now (see `backend::rwlock`), each named on the channel;
/// a token that holds nothing leaves the queue instead. Safe to repeat; the
/// give-back of an abandoned attempt too.
///
/// KEYS: write, readers, fence, queue, waiters, then the key the token
/// holds (the write key, or its own reader key). ARGV as the lock's
/// [`RELEASE`] once took them: token, channel (unused: it follows from the
/// write key), notify (unused), retention in ms, the fencing token the
/// token was granted, barge (unused). Returns as the
/// lock's: the first notice published when the lock was handed on, 1 when
/// released, 0 when the token did not hold it, and 2 when it did not but
/// may have just released it: a writer whose fencing token is at most a
/// thousand behind the counter, or a reader (whose key nobody else takes).
pub(crate) static RW_RELEASE: Lua = Lua::new(script!("rw_release.lua"));

/// A [`RW_RELEASE`] call for `token` (see [`release`]).
pub(crate) fn rw_release_call(
    keys: &Keys,
    rw: &RwKeys,
    token: &str,
    fencing_token: u64,
) -> Invocation {
    let holder = rw.holder_key(token);
    let mut call = RW_RELEASE.with_keys([
        rw.write.as_str(),
        &rw.readers,
        &keys.fence,
        &keys.queue,
        &keys.waiters,
        &holder,
    ]);
    call.arg(token)
        .arg(&keys.channel)
        .arg("0")
        .arg(whole_millis(keys.fence_retention))
        .arg(fencing_token)
        .arg(0);
    call
}

fn release_call(
    keys: &Keys,
    token: &str,
    fencing_token: u64,
    notify: bool,
    barge: Duration,
) -> Invocation {
    let mut call = RELEASE.with_keys(keys.queued());
    let shared = matches!(keys.kind, KindKeys::Permit(_));
    call.arg(token).arg(format!(
        "{}:{}:{fencing_token}:{}:{}:{}",
        u8::from(notify),
        whole_millis(keys.fence_retention),
        whole_millis(barge),
        u8::from(shared),
        keys.channel
    ));
    call
}

/// An [`EXTEND`] call: `ms` in `mode`, refused beyond `max_lease` (`hold`
/// also names the lock's channel).
pub(crate) fn extend(
    keys: &Keys,
    token: &str,
    ms: u64,
    mode: &str,
    max_lease: Duration,
) -> Invocation {
    let mut invocation = EXTEND.with_keys(keys.held());
    invocation
        .arg(token)
        .arg(ms)
        .arg(mode)
        .arg(millis(max_lease))
        .arg(whole_millis(keys.fence_retention));
    if mode == "hold" {
        invocation.arg(&keys.channel);
    }
    invocation
}

/// A [`RENEW`] call for a batch of holds (of one Locker: one retention).
pub(crate) fn renew(leases: &[&Renewal<'_>]) -> Invocation {
    let mut invocation = RENEW.with_keys(leases.iter().flat_map(|lease| lease.keys.held()));
    let retention = leases
        .first()
        .map_or(Duration::ZERO, |l| l.keys.fence_retention);
    invocation.arg(whole_millis(retention));
    for lease in leases {
        invocation
            .arg(lease.token)
            .arg(lease.lease.map_or(0, millis));
    }
    invocation
}

/// A [`RAISE_FENCE`] call.
pub(crate) fn raise_fence(keys: &Keys, token: &str, fencing_token: u64) -> Invocation {
    let mut invocation = RAISE_FENCE.with_keys([keys.lock.as_str(), &keys.fence]);
    invocation
        .arg(token)
        .arg(fencing_token)
        .arg(whole_millis(keys.fence_retention));
    invocation
}

#[cfg(test)]
#[path = "../lua/tests.rs"]
mod tests;
