//! The bare client of row 2: a plain redis-rs `MultiplexedConnection` that
//! sends exactly the commands lockattr's client sends for an uncontended
//! acquire + release of a plain lock, and nothing else.
//!
//! The commands are not written here: at the start of the row, the bench
//! watches the server with `redis-cli monitor` while the row's own Locker
//! runs two acquire + release pairs, 5 ms apart (after one untimed pair, so the
//! library is loaded and the connections open), and keeps what that
//! Locker's connections sent between three `ECHO` markers of its own. The
//! two pairs must send the same commands; a word (or a `:`-separated field
//! of one) that differs between them is made fresh on every replay:
//!
//! - the acquisition's token (32 hex digits, the first such field), a new
//!   token per pair, the same in each of its commands;
//! - a number within ten minutes of the clock in ms (the acquisition's
//!   `since`): the clock now;
//! - any other number (the fencing token the release names): the one the
//!   pair's first reply (`[1, fencing token]`) granted; the capture checks
//!   that the second pair's is the first pair's + 1.
//!
//! Anything else that differs is an error: the bench would not know how
//! to make it fresh. The lock's name in every word is replaced by the bare
//! client's own, so the two never touch each other's keys. A replayed pair
//! checks its replies: the first must grant the lock (`[1, n]`), the last
//! must be the release's 1.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redis::Value;
use redis::aio::MultiplexedConnection;

use crate::peers::{Lib, Libs};
use crate::{EXPIRE, Res};

/// A piece of a replayed word.
#[derive(Clone, Debug, PartialEq)]
enum Piece {
    /// Sent as captured (the lock's name replaced).
    Text(String),
    /// The pair's fresh token.
    Token,
    /// The clock in ms since the Unix epoch.
    NowMs,
    /// The fencing token granted by the pair's first reply.
    Fence,
}

/// A word of a command: its pieces, joined by `:` where split.
#[derive(Clone, Debug)]
struct Word(Vec<Piece>);

/// The commands of one acquire + release, as a template.
#[derive(Clone, Debug)]
pub struct Bare {
    commands: Vec<Vec<Word>>,
    /// A fixed random prefix of the fresh tokens.
    seed: u64,
    /// Pairs replayed so far (the rest of each token).
    seq: u64,
}

impl Bare {
    /// The commands as the bare client sends them (control characters
    /// escaped as in Rust), fresh values in braces,
    /// e.g. `FCALL lockattr_acquire 4 ... {token} 10000:...:{now_ms}:... 10000`.
    pub fn shown(&self) -> String {
        self.commands
            .iter()
            .map(|words| {
                words
                    .iter()
                    .map(|w| {
                        w.0.iter()
                            .map(|p| match p {
                                Piece::Text(t) => t.escape_debug().to_string(),
                                Piece::Token => "{token}".into(),
                                Piece::NowMs => "{now_ms}".into(),
                                Piece::Fence => "{fencing_token}".into(),
                            })
                            .collect::<Vec<_>>()
                            .join(":")
                    })
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// The command names, e.g. `FCALL, FCALL`.
    pub fn command_names(&self) -> String {
        self.commands
            .iter()
            .map(|words| match words.first().and_then(|w| w.0.first()) {
                Some(Piece::Text(t)) => t.to_uppercase(),
                _ => "?".into(),
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// One acquire + release on `con`, with a fresh token and clock.
    pub async fn pair(&mut self, con: &mut MultiplexedConnection) -> Res<()> {
        self.seq += 1;
        let token = format!("{:016x}{:016x}", self.seed, self.seq);
        let mut fence: Option<i64> = None;
        let last = self.commands.len() - 1;
        for (i, words) in self.commands.iter().enumerate() {
            let now_ms = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_millis());
            let mut cmd = redis::Cmd::new();
            for word in words {
                let mut text = String::new();
                for (k, piece) in word.0.iter().enumerate() {
                    if k > 0 {
                        text.push(':');
                    }
                    match piece {
                        Piece::Text(t) => text.push_str(t),
                        Piece::Token => text.push_str(&token),
                        Piece::NowMs => text.push_str(&now_ms.to_string()),
                        Piece::Fence => text.push_str(
                            &fence
                                .ok_or("the bare client's first reply granted no fencing token")?
                                .to_string(),
                        ),
                    }
                }
                cmd.arg(text);
            }
            let reply: Value = cmd.query_async(con).await?;
            if i == 0 {
                fence = Some(granted(&reply).ok_or_else(|| {
                    format!("the bare client's acquisition was not granted: {reply:?}")
                })?);
            }
            if i == last && i > 0 && reply != Value::Int(1) {
                return Err(format!("the bare client's release answered {reply:?}, not 1").into());
            }
        }
        Ok(())
    }
}

/// The fencing token of a `[1, n]` reply.
fn granted(reply: &Value) -> Option<i64> {
    match reply {
        Value::Array(items) => match items.as_slice() {
            [Value::Int(1), Value::Int(n)] => Some(*n),
            _ => None,
        },
        _ => None,
    }
}

/// Watches the server at `port` while `libs`'s Locker runs two acquire +
/// release pairs of `name`, and makes the template that replays them on
/// `bare_name` (see the module's documentation). `raw` sends the markers.
pub async fn capture(
    port: u16,
    raw: &mut MultiplexedConnection,
    libs: &Libs,
    name: &str,
    bare_name: &str,
) -> Res<Bare> {
    // One untimed pair first: the library loaded, the connections open.
    let held = libs.acquire_or_fail(Lib::Lockattr, name, EXPIRE).await?;
    libs.release(held).await?;

    let mut monitor = Command::new("redis-cli")
        .args(["-p", &port.to_string(), "monitor"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot run redis-cli monitor: {e}"))?;
    let stdout = monitor
        .stdout
        .take()
        .ok_or("redis-cli monitor: no stdout")?;
    let (tx, rx) = mpsc::channel::<String>();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let outcome = async {
        let markers = [
            "lockattr-bench-bare-a",
            "lockattr-bench-bare-b",
            "lockattr-bench-bare-c",
        ];
        // MONITOR answers OK, then shows the commands that follow; ECHO
        // markers until one shows, so the first pair is surely watched.
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut lines = Vec::new();
        'ready: loop {
            redis::cmd("ECHO")
                .arg(markers[0])
                .query_async::<()>(raw)
                .await?;
            while let Ok(line) = rx.recv_timeout(Duration::from_millis(50)) {
                if line.contains(markers[0]) {
                    lines.push(line);
                    break 'ready;
                }
            }
            if Instant::now() > deadline {
                return Err("redis-cli monitor showed nothing within 5 s".into());
            }
        }
        for marker in &markers[1..] {
            // A few ms apart, so a field that holds the clock in ms differs
            // between the two pairs and is told from a constant.
            tokio::time::sleep(Duration::from_millis(5)).await;
            let held = libs.acquire_or_fail(Lib::Lockattr, name, EXPIRE).await?;
            libs.release(held).await?;
            redis::cmd("ECHO")
                .arg(*marker)
                .query_async::<()>(raw)
                .await?;
        }
        loop {
            let line = rx
                .recv_timeout(Duration::from_secs(5))
                .map_err(|_| "redis-cli monitor stopped before the last marker")?;
            let done = line.contains(markers[2]);
            lines.push(line);
            if done {
                break;
            }
        }
        template(&lines, &markers, name, bare_name)
    }
    .await;
    let _ = monitor.kill();
    let _ = monitor.wait();
    let _ = reader.join();
    outcome
}

/// One MONITOR line: the client's address (`lua` for a script's own
/// commands) and the command's words.
fn parse_line(line: &str) -> Res<(String, Vec<String>)> {
    let open = line
        .find('[')
        .ok_or_else(|| format!("MONITOR line without a client: {line}"))?;
    let close = open
        + line[open..]
            .find("] ")
            .ok_or_else(|| format!("MONITOR line without a client: {line}"))?;
    let client = line[open + 1..close]
        .split_once(' ')
        .map_or("", |(_db, addr)| addr)
        .to_owned();
    let mut words = Vec::new();
    let mut chars = line[close + 2..].chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            ' ' => {}
            '"' => {
                let mut bytes = Vec::new();
                loop {
                    let c = chars
                        .next()
                        .ok_or_else(|| format!("unterminated word in MONITOR line: {line}"))?;
                    match c {
                        '"' => break,
                        '\\' => {
                            let e = chars.next().ok_or("a MONITOR line ends in `\\`")?;
                            match e {
                                'n' => bytes.push(b'\n'),
                                'r' => bytes.push(b'\r'),
                                't' => bytes.push(b'\t'),
                                'a' => bytes.push(7),
                                'b' => bytes.push(8),
                                'x' => {
                                    let hex: String = chars.by_ref().take(2).collect();
                                    bytes.push(u8::from_str_radix(&hex, 16)?);
                                }
                                other => {
                                    let mut buf = [0; 4];
                                    bytes.extend_from_slice(other.encode_utf8(&mut buf).as_bytes());
                                }
                            }
                        }
                        other => {
                            let mut buf = [0; 4];
                            bytes.extend_from_slice(other.encode_utf8(&mut buf).as_bytes());
                        }
                    }
                }
                words
                    .push(String::from_utf8(bytes).map_err(|_| {
                        format!("a word that is not UTF-8 in MONITOR line: {line}")
                    })?);
            }
            other => return Err(format!("unexpected `{other}` in MONITOR line: {line}").into()),
        }
    }
    Ok((client, words))
}

/// The template from the MONITOR lines (markers included).
fn template(lines: &[String], markers: &[&str; 3], name: &str, bare_name: &str) -> Res<Bare> {
    let parsed = lines
        .iter()
        .map(|l| parse_line(l))
        .collect::<Res<Vec<_>>>()?;
    let is_marker = |words: &[String], m: &str| {
        words.len() == 2 && words[0].eq_ignore_ascii_case("echo") && words[1] == m
    };
    let marker_client = parsed
        .iter()
        .find(|(_, w)| is_marker(w, markers[0]))
        .map(|(c, _)| c.clone())
        .ok_or("the first marker is missing from the MONITOR lines")?;
    let mut pairs: [Vec<Vec<String>>; 2] = Default::default();
    let mut part: Option<usize> = None;
    for (client, words) in &parsed {
        if let Some(k) = markers.iter().position(|m| is_marker(words, m)) {
            part = (k < 2).then_some(k);
            continue;
        }
        // The bench's marker connection and the scripts' own commands are
        // not the client's.
        if *client == marker_client || client == "lua" {
            continue;
        }
        if let Some(k) = part {
            pairs[k].push(words.clone());
        }
    }
    let [a, b] = &pairs;
    if a.is_empty() || a.len() != b.len() {
        return Err(format!(
            "two acquire + release pairs sent {} and {} commands: {a:?} / {b:?}",
            a.len(),
            b.len()
        )
        .into());
    }
    let token = a
        .iter()
        .zip(b)
        .flat_map(|(ca, cb)| ca.iter().zip(cb))
        .flat_map(|(wa, wb)| wa.split(':').zip(wb.split(':')))
        .find(|(x, y)| x != y && x.len() == 32 && x.bytes().all(|c| c.is_ascii_hexdigit()))
        .map(|(x, _)| x.to_owned());
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis()) as i128;
    let mut commands = Vec::new();
    for (ca, cb) in a.iter().zip(b) {
        if ca.len() != cb.len() || !ca[0].eq_ignore_ascii_case(&cb[0]) {
            return Err(format!("two pairs sent different commands: {ca:?} / {cb:?}").into());
        }
        let mut words = Vec::new();
        for (wa, wb) in ca.iter().zip(cb) {
            let (wa, wb) = (&wa.replace(name, bare_name), &wb.replace(name, bare_name));
            let pieces = if wa == wb {
                vec![Piece::Text(wa.clone())]
            } else {
                let (fa, fb): (Vec<&str>, Vec<&str>) =
                    (wa.split(':').collect(), wb.split(':').collect());
                if fa.len() != fb.len() {
                    return Err(
                        format!("a word differs in shape between two pairs: {wa} / {wb}").into(),
                    );
                }
                let mut pieces = Vec::new();
                for (x, y) in fa.iter().zip(&fb) {
                    let piece = if x == y {
                        Piece::Text((*x).to_owned())
                    } else if token.as_deref() == Some(*x) {
                        Piece::Token
                    } else if let (Ok(nx), Ok(ny)) = (x.parse::<i128>(), y.parse::<i128>()) {
                        if (nx - now_ms).abs() < 600_000 {
                            Piece::NowMs
                        } else if ny == nx + 1 {
                            Piece::Fence
                        } else {
                            return Err(format!(
                                "a number that is neither the clock nor a fencing token differs between two pairs: {x} / {y} in {wa}"
                            )
                            .into());
                        }
                    } else {
                        return Err(format!(
                            "a field differs between two pairs and the bare client cannot make it fresh: {x} / {y} in {wa}"
                        )
                        .into());
                    };
                    pieces.push(piece);
                }
                pieces
            };
            words.push(Word(pieces));
        }
        commands.push(words);
    }
    if commands
        .iter()
        .flatten()
        .any(|w| w.0.contains(&Piece::Fence))
        && commands.len() < 2
    {
        return Err("a fencing token in the only command of a pair".into());
    }
    Ok(Bare {
        commands,
        seed: seed(),
        seq: 0,
    })
}

/// 64 bits that differ from run to run (no cryptography needed: the
/// tokens only have to be new).
fn seed() -> u64 {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    nanos ^ (u64::from(std::process::id()) << 32) ^ 0x9e37_79b9_7f4a_7c15
}
