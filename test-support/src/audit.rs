//! The keyspace audit: lockattr promises that every key it writes expires
//! (a lock, its fence counter, its queue, a semaphore's permits, a
//! read-write lock's readers...), so that abandoned names never pile up in
//! Redis (and, under `noeviction`, never stop all locking once memory is
//! full). The support checks that promise on every server it stops: when a
//! test's redis-server is dropped, every key of every database is read and
//! the test fails if one has no TTL (or is a holder's value without its
//! fencing token: the other promise every kind keeps), unless it is
//!
//! - one of the documented exceptions, [`EXCEPTIONS`] (keys lockattr
//!   writes without a TTL by design), or
//! - allowed by the test on that server (`allow_untimed(pattern)` on the
//!   server handle): a key the test wrote itself without a TTL, such as a
//!   counter it keeps next to the locks or a foreign value it planted at a
//!   lock key.
//!
//! The audit is one Lua script ([`SCRIPT`]), so it sees one instant of the
//! keyspace (no key can gain or lose its TTL between the scan and the
//! check). It is sent over a redis-rs connection ([`scan_tcp`]) or, for a
//! TLS-only server, through `redis-cli` (see `tls.rs`); both read the same
//! lines ([`parse_lines`]).
//!

use std::sync::Mutex;
use std::time::Duration;

/// A key that breaks a promise: it has no TTL, or (its `kind` then
/// `holder`) it is a holder's value without its fencing token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UntimedKey {
    /// The database it is in.
    pub db: u32,
    /// Its name; control characters and `\` written `\xHH`.
    pub key: String,
    /// `TYPE`: `string`, `set`, `hash`, `list`, `zset`, `stream`.
    pub kind: String,
    /// Its length: bytes of a string, members of a set, entries of a hash...
    pub size: u64,
    /// What it holds, shortened: the first 60 bytes of a string, up to 3
    /// members or fields of the others; escaped like `key`.
    pub sample: String,
}

/// A key lockattr writes without a TTL by design.
pub struct Exception {
    /// What it is, for messages.
    pub name: &'static str,
    /// Whether an untimed key is this one.
    pub matches: fn(&UntimedKey) -> bool,
}

/// The restart marker `<prefix>node` (`lockattr-runtime/src/backend/node_facts.rs`,
/// README "Redlock"): the first Locker to connect to a server writes it,
/// `<server time in µs>:<random id>`, in the Locker's database and in
/// database 0, and nobody deletes it. It has no TTL on purpose: its age is
/// how long the server has kept its data (a restart without persistence or
/// a flush removes it), which tells a Redlock when a restarted node may
/// vote again, and its id tells two URLs of one server apart. About 50
/// bytes per server and prefix.
pub const NODE_MARKER: Exception = Exception {
    name: "the restart marker `<prefix>node` (node_facts.rs)",
    matches: |k| {
        k.kind == "string"
            && k.key.ends_with("node")
            && k.sample.split_once(':').is_some_and(|(micros, id)| {
                !micros.is_empty()
                    && micros.bytes().all(|b| b.is_ascii_digit())
                    && id.bytes().all(|b| b.is_ascii_hexdigit())
            })
    },
};

/// Every key lockattr writes without a TTL on purpose: the only untimed
/// keys the audit accepts on any server. Add one here only for a key that
/// is untimed by design, with a doc comment saying why (never for a key
/// written without a TTL by mistake: the audit exists to report those).
pub const EXCEPTIONS: &[&Exception] = &[&NODE_MARKER];

/// The audit: in every database (until `SELECT` refuses the next, as in a
/// cluster), each key whose `PTTL` is -1, and each holder's value (an owner
/// token of 32 hex digits first) that does not carry its fencing token on
/// its sixth line (type `holder`), as one line
/// `<db>\t<type>\t<size>\t<key>\t<sample>` ([`UntimedKey`]). Read-only;
/// `allow-cross-slot-keys`: a cluster node scans every key it holds.
pub const SCRIPT: &str = r#"#!lua flags=no-writes,allow-cross-slot-keys
local function esc(s)
  return (string.gsub(s, '[%c\\]', function(c)
    return string.format('\\x%02x', string.byte(c))
  end))
end
local function sample(key, kind)
  if kind == 'string' then
    return redis.call('strlen', key), redis.call('getrange', key, 0, 59)
  elseif kind == 'set' then
    return redis.call('scard', key), table.concat(redis.call('srandmember', key, 3), ' ')
  elseif kind == 'list' then
    return redis.call('llen', key), table.concat(redis.call('lrange', key, 0, 2), ' ')
  elseif kind == 'zset' then
    return redis.call('zcard', key), table.concat(redis.call('zrange', key, 0, 2), ' ')
  elseif kind == 'hash' then
    return redis.call('hlen', key), table.concat(redis.call('hscan', key, 0, 'count', 3)[2], ' ')
  elseif kind == 'stream' then
    return redis.call('xlen', key), ''
  end
  return 0, ''
end
local function shown(key, kind)
  local size, text = sample(key, kind)
  return size, esc(string.sub(text, 1, 120))
end
-- A holder's value (an owner token of 32 hex digits, then its holder
-- record) that does not carry its fencing token on its sixth line.
local owner = '^' .. string.rep('%x', 32) .. '\n'
local function is_holder_without_token(key)
  local value = redis.call('getrange', key, 0, 511)
  return string.match(value, owner) ~= nil
    and not string.match(value, '^[^\n]*\n[^\n]*\n[^\n]*\n[^\n]*\n[^\n]*\n%d+')
end
local out = {}
local db = 0
while true do
  local selected = redis.pcall('select', db)
  if type(selected) == 'table' and selected.err then break end
  if redis.call('dbsize') > 0 then
    local cursor = '0'
    repeat
      local page = redis.call('scan', cursor, 'count', 1000)
      cursor = page[1]
      for _, key in ipairs(page[2]) do
        local kind = redis.call('type', key)['ok']
        local broken = redis.call('pttl', key) == -1
        if not broken and kind == 'string' and is_holder_without_token(key) then
          broken, kind = true, 'holder'
        end
        if broken then
          local size, text = shown(key, kind == 'holder' and 'string' or kind)
          out[#out + 1] = string.format('%d\t%s\t%d\t%s\t%s', db, kind, size, esc(key), text)
        end
      end
    until cursor == '0'
  end
  db = db + 1
end
return out
"#;

/// [`SCRIPT`]'s body without its first line, for a server older than
/// Redis 7 (which knows no `#!lua` flags, and checks no slots in scripts).
fn script_without_flags() -> &'static str {
    SCRIPT.split_once('\n').map_or(SCRIPT, |(_, body)| body)
}

/// Reads [`SCRIPT`]'s lines.
pub fn parse_lines<'a>(
    lines: impl IntoIterator<Item = &'a str>,
) -> Result<Vec<UntimedKey>, String> {
    lines
        .into_iter()
        .filter(|line| !line.is_empty())
        .map(|line| {
            let mut fields = line.splitn(5, '\t');
            let bad = || format!("audit line {line:?}");
            let mut next = || fields.next().ok_or_else(bad);
            Ok(UntimedKey {
                db: next()?.parse().map_err(|_| bad())?,
                kind: next()?.to_owned(),
                size: next()?.parse().map_err(|_| bad())?,
                key: next()?.to_owned(),
                // `redis-cli` trims the last line: an empty sample may lose its tab.
                sample: fields.next().unwrap_or_default().to_owned(),
            })
        })
        .collect()
}

/// Why a server could not be audited.
#[derive(Debug)]
pub enum Failure {
    /// Nothing answers on the port (the test killed the server), or the
    /// connection failed: nothing to audit.
    Gone(String),
    /// The server answered with an error (a password it refused, a script
    /// that failed): the audit could not run although the server is up.
    Refused(String),
}

/// Runs [`SCRIPT`] on the server on `127.0.0.1:<port>`, after `AUTH
/// <password>` when there is one: the untimed keys, exceptions and allowed
/// keys included.
pub fn scan_tcp(port: u16, password: Option<&str>) -> Result<Vec<UntimedKey>, Failure> {
    let url = match password {
        Some(password) => format!("redis://:{password}@127.0.0.1:{port}/"),
        None => format!("redis://127.0.0.1:{port}/"),
    };
    let why = |e: redis::RedisError| {
        let text = format!("port {port}: {e}");
        // Nothing answers, or a server still loading or running a script.
        let gone = e.is_io_error()
            || e.is_connection_refusal()
            || e.is_timeout()
            || matches!(
                e.kind(),
                redis::ErrorKind::Server(redis::ServerErrorKind::BusyLoading)
            )
            || text.contains("BUSY");
        if gone {
            Failure::Gone(text)
        } else {
            Failure::Refused(text)
        }
    };
    let mut con = redis::Client::open(url.as_str())
        .and_then(|client| client.get_connection_with_timeout(Duration::from_secs(2)))
        .map_err(why)?;
    con.set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(why)?;
    let run = |con: &mut redis::Connection, script: &str| {
        redis::cmd("EVAL")
            .arg(script)
            .arg(0)
            .query::<Vec<String>>(con)
    };
    let lines = match run(&mut con, SCRIPT) {
        Err(e)
            if ["shebang", "compil", "Unexpected"]
                .iter()
                .any(|w| e.to_string().contains(w)) =>
        {
            run(&mut con, script_without_flags())
        }
        answer => answer,
    }
    .map_err(why)?;
    parse_lines(lines.iter().map(String::as_str)).map_err(Failure::Refused)
}

/// The password of `--requirepass` among a server's command-line
/// options, if it was started with one.
pub fn password_of(options: &[String]) -> Option<&str> {
    options
        .windows(2)
        .rev()
        .find(|w| w[0] == "--requirepass")
        .map(|w| w[1].as_str())
}

/// The audit of the server on `127.0.0.1:<port>` now: the keys that break
/// a promise, in every database, that are neither documented exceptions
/// nor `allowed`; `Err` when it could not run.
pub fn now(
    port: u16,
    password: Option<&str>,
    allowed: &Allowed,
) -> Result<Vec<UntimedKey>, String> {
    match scan_tcp(port, password) {
        Ok(found) => Ok(unexpected(found, &allowed.patterns())),
        Err(Failure::Gone(why) | Failure::Refused(why)) => Err(why),
    }
}

/// The audit of the server on `127.0.0.1:<port>` at its final stop: the
/// failure message, if any. A server that does not answer is skipped
/// with a note on stderr; one that answers with an error fails.
pub fn at_stop(port: u16, password: Option<&str>, allowed: &Allowed) -> Option<String> {
    let server = format!("redis-server on port {port}");
    match scan_tcp(port, password) {
        Ok(found) => {
            let keys = unexpected(found, &allowed.patterns());
            (!keys.is_empty()).then(|| report(&server, &keys))
        }
        Err(Failure::Gone(why)) => {
            eprintln!("keyspace audit skipped: {server} does not answer: {why}");
            None
        }
        Err(Failure::Refused(why)) => Some(refused(&server, &why)),
    }
}

/// The keys of `found` that are neither [`EXCEPTIONS`] nor matched by one
/// of the `allowed` patterns ([`glob`]).
pub fn unexpected(found: Vec<UntimedKey>, allowed: &[String]) -> Vec<UntimedKey> {
    found
        .into_iter()
        .filter(|k| !EXCEPTIONS.iter().any(|e| (e.matches)(k)))
        .filter(|k| !allowed.iter().any(|p| glob(p, &k.key)))
        .collect()
}

/// Patterns of keys a test wrote without a TTL on purpose, on one server.
#[derive(Debug, Default)]
pub struct Allowed(Mutex<Vec<String>>);

impl Allowed {
    /// Allows the keys matching `pattern` (Redis glob).
    pub fn add(&self, pattern: &str) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(pattern.to_owned());
    }

    /// The patterns allowed so far.
    pub fn patterns(&self) -> Vec<String> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// A pattern for [`glob`] that matches `key` only.
pub fn literal(key: &str) -> String {
    let mut out = String::with_capacity(key.len());
    for c in key.chars() {
        if matches!(c, '*' | '?' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Redis's glob, in part: `*` any run of characters, `?` one character,
/// `\` the next character as it is; everything else (`{`, `}`, `[`)
/// itself.
pub fn glob(pattern: &str, text: &str) -> bool {
    fn go(p: &[char], t: &[char]) -> bool {
        match p.split_first() {
            None => t.is_empty(),
            Some(('*', rest)) => (0..=t.len()).any(|i| go(rest, &t[i..])),
            Some(('?', rest)) => !t.is_empty() && go(rest, &t[1..]),
            Some(('\\', rest)) if !rest.is_empty() => {
                t.first() == Some(&rest[0]) && go(&rest[1..], &t[1..])
            }
            Some((c, rest)) => t.first() == Some(c) && go(rest, &t[1..]),
        }
    }
    let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
    go(&p, &t)
}

/// The most keys a report lists.
const LISTED: usize = 20;

/// The failure message for `keys`, found on `server` (`redis-server on
/// port 41234`) when it was stopped.
pub fn report(server: &str, keys: &[UntimedKey]) -> String {
    let mut out = format!(
        "keyspace audit: {server} holds {} key(s) without a TTL (or, of type `holder`, a \
         holder's value without its fencing token) when the test ended.\n\
         lockattr promises that every key it writes expires and that every holder's value \
         carries its fencing token; the only keys that may stay forever are the documented \
         exceptions (EXCEPTIONS in test-support/src/audit.rs: {}).\n",
        keys.len(),
        EXCEPTIONS
            .iter()
            .map(|e| e.name)
            .collect::<Vec<_>>()
            .join("; "),
    );
    for k in keys.iter().take(LISTED) {
        out.push_str(&format!(
            "  db {}  {:<6} size {:<4} {}    holds: {}\n",
            k.db, k.kind, k.size, k.key, k.sample
        ));
    }
    if keys.len() > LISTED {
        out.push_str(&format!("  ... and {} more\n", keys.len() - LISTED));
    }
    out.push_str(
        "A key lockattr wrote: find the script or command that writes it and give it a \
         PX/PEXPIRE (a defect, not an exception). A key the test wrote itself without a \
         TTL on purpose: call `allow_untimed(\"<pattern>\")` on the server handle (or \
         delete it). To look at a live server: `redis-cli -p <port> -n <db> --scan`, then \
         `TYPE`, `PTTL` and `OBJECT IDLETIME` of the key; `audit()` on the handle returns \
         this list without failing.",
    );
    out
}

/// The message when a server that is up could not be audited.
pub fn refused(server: &str, why: &str) -> String {
    format!(
        "keyspace audit: {server} is up but could not be audited ({why}); the audit checks \
         that no key is left without a TTL and must see every server (see test-support/src/audit.rs)"
    )
}
