//! The oracles, outside Redis: a ledger of critical sections, a fenced
//! model store, and the waits that timed out.
//!
//! A task records `enter` once its guard was returned and `exit` before it
//! starts the release, so a recorded section lies inside the real hold: an
//! overlap in the ledger is an overlap of real holds. Events get their
//! order from one mutex; a worker process sends them to the parent over a
//! loopback TCP connection and waits for the answer before it goes on, so
//! the parent's order is the real one.

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How a section holds its name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Lock,
    Read,
    Write,
    /// A permit of a semaphore of this many.
    Permit(u32),
}

impl Mode {
    fn text(self) -> String {
        match self {
            Mode::Lock => "L".into(),
            Mode::Read => "R".into(),
            Mode::Write => "W".into(),
            Mode::Permit(n) => format!("P{n}"),
        }
    }

    fn parse(s: &str) -> Option<Mode> {
        Some(match s {
            "L" => Mode::Lock,
            "R" => Mode::Read,
            "W" => Mode::Write,
            _ => Mode::Permit(s.strip_prefix('P')?.parse().ok()?),
        })
    }

    /// Whether a fencing token of this mode is a new one (readers carry
    /// the last writer's, permits are fenced per permit, not per name).
    fn fences(self) -> bool {
        matches!(self, Mode::Lock | Mode::Write)
    }
}

/// A waiter as long as this, on a free name, is a liveness miss (sets try
/// again at every release of one of their names and once a second, so
/// they get a second more). Generous on purpose: tasks of other processes
/// and a loaded CI machine delay hand-overs.
pub const LIVENESS_BOUND: Duration = Duration::from_millis(1500);
const LIVENESS_BOUND_SET: Duration = Duration::from_millis(2500);

struct Interval {
    process: usize,
    holder: u64,
    name: String,
    token: u64,
    mode: Mode,
    enter_seq: u64,
    enter_at: Instant,
    /// (seq, when, lost at exit, closed because its process was killed)
    exit: Option<(u64, Instant, bool, bool)>,
    /// The holder reported the loss during the section (before its exit).
    lost_seen: bool,
}

struct WriteRec {
    holder: u64,
    name: String,
    token: u64,
    seq: u64,
    accepted: bool,
    /// A larger token of this name had been handed out before the write.
    later_existed: bool,
}

struct TimeoutRec {
    names: Vec<String>,
    mode: Mode,
    start: Instant,
    end: Instant,
}

#[derive(Default)]
struct Inner {
    seq: u64,
    intervals: Vec<Interval>,
    open: HashMap<(u64, String), usize>,
    /// The largest fencing token handed out per name (ledger order).
    issued: HashMap<String, u64>,
    /// The model store: the largest token it accepted a write with, per name.
    written: HashMap<String, u64>,
    writes: Vec<WriteRec>,
    timeouts: Vec<TimeoutRec>,
    dead: HashSet<usize>,
    /// The restarts of the server of a single-server round: (the seq just
    /// before it was killed, the seq once it answered again).
    restarts: Vec<(u64, u64)>,
    restarting: Option<u64>,
    counters: HashMap<String, u64>,
}

impl Inner {
    /// The next sequence number.
    fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }
}

/// The ledger of one round.
#[derive(Default)]
pub struct Book {
    inner: Mutex<Inner>,
}

/// What a round's ledger shows.
#[derive(Default, Debug, Clone)]
pub struct Findings {
    pub sections: u64,
    /// Overlaps not excused.
    pub overlaps: u64,
    /// Overlaps with an earlier guard that reported itself lost.
    pub excused_lost: u64,
    /// Overlaps across a restart of a single server (which forgets locks).
    pub excused_restart: u64,
    pub writes: u64,
    pub refused: u64,
    /// Writes the model store accepted from a guard not reported lost
    /// while a larger token already existed, plus writes it refused from
    /// a guard not reported lost.
    pub fencing_violations: u64,
    /// Waits that timed out while the name was free longer than the bound.
    pub liveness_checked: u64,
    pub liveness_misses: u64,
    pub liveness_excused: u64,
    pub counters: HashMap<String, u64>,
    pub details: Vec<String>,
}

impl Book {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The ledger, unless `process` was killed: what it still sends is
    /// ignored.
    fn alive(&self, process: usize) -> Option<std::sync::MutexGuard<'_, Inner>> {
        let inner = self.lock();
        (!inner.dead.contains(&process)).then_some(inner)
    }

    pub fn enter(&self, process: usize, holder: u64, name: &str, token: u64, mode: Mode) {
        let Some(mut inner) = self.alive(process) else {
            return;
        };
        let seq = inner.next_seq();
        let idx = inner.intervals.len();
        inner.intervals.push(Interval {
            process,
            holder,
            name: name.to_owned(),
            token,
            mode,
            enter_seq: seq,
            enter_at: Instant::now(),
            exit: None,
            lost_seen: false,
        });
        inner.open.insert((holder, name.to_owned()), idx);
        if mode.fences() {
            let max = inner.issued.entry(name.to_owned()).or_default();
            *max = (*max).max(token);
        }
    }

    pub fn exit(&self, process: usize, holder: u64, name: &str, lost: bool) {
        let Some(mut inner) = self.alive(process) else {
            return;
        };
        let seq = inner.next_seq();
        if let Some(idx) = inner.open.remove(&(holder, name.to_owned())) {
            let lost = lost || inner.intervals[idx].lost_seen;
            inner.intervals[idx].exit = Some((seq, Instant::now(), lost, false));
        }
    }

    /// The holder saw its guard lost, inside the section.
    pub fn lost(&self, process: usize, holder: u64, name: &str) {
        let Some(mut inner) = self.alive(process) else {
            return;
        };
        if let Some(&idx) = inner.open.get(&(holder, name.to_owned())) {
            inner.intervals[idx].lost_seen = true;
        }
    }

    /// A write to the model store inside a section: accepted when its
    /// token is at least the largest it accepted for the name.
    pub fn write(&self, process: usize, holder: u64, name: &str, token: u64) {
        let Some(mut inner) = self.alive(process) else {
            return;
        };
        let seq = inner.next_seq();
        let later_existed = inner.issued.get(name).is_some_and(|&max| max > token);
        let max = inner.written.entry(name.to_owned()).or_default();
        let accepted = token >= *max;
        if accepted {
            *max = token;
        }
        inner.writes.push(WriteRec {
            holder,
            name: name.to_owned(),
            token,
            seq,
            accepted,
            later_existed,
        });
    }

    /// A wait that ran its whole acquire time (`waited`) and timed out now.
    pub fn timeout(&self, process: usize, names: &[String], mode: Mode, waited: Duration) {
        let Some(mut inner) = self.alive(process) else {
            return;
        };
        let end = Instant::now();
        inner.timeouts.push(TimeoutRec {
            names: names.to_vec(),
            mode,
            start: end - waited,
            end,
        });
    }

    pub fn count(&self, what: &str, n: u64) {
        *self.lock().counters.entry(what.to_owned()).or_default() += n;
    }

    /// The process was SIGKILLed (and reaped): its open sections end now,
    /// and whatever it still sends is ignored.
    pub fn killed(&self, process: usize) {
        let mut inner = self.lock();
        inner.dead.insert(process);
        let seq = inner.next_seq();
        let now = Instant::now();
        let open: Vec<(u64, String)> = inner
            .open
            .iter()
            .filter(|(_, idx)| inner.intervals[**idx].process == process)
            .map(|(k, _)| k.clone())
            .collect();
        for key in open {
            if let Some(idx) = inner.open.remove(&key) {
                let lost = inner.intervals[idx].lost_seen;
                inner.intervals[idx].exit = Some((seq, now, lost, true));
            }
        }
    }

    /// The server of a single-server round is killed now, to be started
    /// again empty ([`restarted`](Self::restarted) once it answers).
    pub fn restarting(&self) {
        let mut inner = self.lock();
        inner.seq += 1;
        inner.restarting = Some(inner.seq);
    }

    /// The server restarted by [`restarting`](Self::restarting) answers again.
    pub fn restarted(&self) {
        let mut inner = self.lock();
        let seq = inner.next_seq();
        let from = inner.restarting.take().expect("restarting() first");
        inner.restarts.push((from, seq));
    }

    /// Checks the round. `windows`: the fault windows (from, to) that
    /// excuse a liveness miss.
    pub fn findings(&self, windows: &[(Instant, Instant)]) -> Findings {
        let mut inner = self.lock();
        // Sections never closed (a task that did not finish) end now, not lost.
        inner.seq += 1;
        let (seq, now) = (inner.seq, Instant::now());
        let open: Vec<usize> = inner.open.drain().map(|(_, idx)| idx).collect();
        for idx in open {
            let lost = inner.intervals[idx].lost_seen;
            inner.intervals[idx].exit = Some((seq, now, lost, false));
        }
        let inner = &*inner;
        let mut f = Findings {
            sections: inner
                .intervals
                .iter()
                .map(|i| i.holder)
                .collect::<HashSet<_>>()
                .len() as u64,
            counters: inner.counters.clone(),
            ..Findings::default()
        };
        // Lines of detail per round (LOCKATTR_TORTURE_DETAILS for more).
        let detail_cap: usize = std::env::var("LOCKATTR_TORTURE_DETAILS")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(4);
        // A section that entered before a restart was over, and one (or a
        // write) after it began: the server may have forgotten the first.
        let restart_between =
            |a: u64, b: u64| inner.restarts.iter().any(|&(from, to)| a < to && b > from);

        // Exclusion, name by name, in ledger order.
        let mut by_name: HashMap<&str, Vec<&Interval>> = HashMap::new();
        for i in &inner.intervals {
            by_name.entry(&i.name).or_default().push(i);
        }
        for (name, intervals) in &by_name {
            let mut events: Vec<(u64, bool, usize)> = Vec::new();
            for (n, i) in intervals.iter().enumerate() {
                events.push((i.enter_seq, true, n));
                events.push((i.exit.expect("closed above").0, false, n));
            }
            events.sort();
            let mut inside: Vec<usize> = Vec::new();
            for (_, is_enter, n) in events {
                if !is_enter {
                    inside.retain(|&m| m != n);
                    continue;
                }
                let b = intervals[n];
                let lost = |i: &Interval| i.exit.is_some_and(|e| e.2);
                if let Mode::Permit(permits) = b.mode {
                    let all = inside.len() as u32 + 1;
                    let live = inside.iter().filter(|&&m| !lost(intervals[m])).count() as u32 + 1;
                    if all > permits {
                        if live <= permits {
                            f.excused_lost += 1;
                        } else if inside
                            .iter()
                            .all(|&m| restart_between(intervals[m].enter_seq, b.enter_seq))
                        {
                            f.excused_restart += 1;
                        } else {
                            f.overlaps += 1;
                            if f.details.len() < detail_cap {
                                f.details.push(format!(
                                    "{name}: {live} live holders of {permits} permits once token {} entered",
                                    b.token
                                ));
                            }
                        }
                    }
                } else {
                    for &m in &inside {
                        let a = intervals[m];
                        let conflict = !(a.mode == Mode::Read && b.mode == Mode::Read);
                        if !conflict {
                            continue;
                        }
                        if lost(a) {
                            f.excused_lost += 1;
                        } else if restart_between(a.enter_seq, b.enter_seq) {
                            f.excused_restart += 1;
                        } else {
                            f.overlaps += 1;
                            if f.details.len() < detail_cap {
                                let since = b.enter_at.duration_since(a.enter_at);
                                f.details.push(format!(
                                    "{name}: {:?} token {} (process {}) entered {:.1} ms after {:?} token {} (process {}), which was inside and not lost{}",
                                    b.mode,
                                    b.token,
                                    b.process,
                                    since.as_secs_f64() * 1e3,
                                    a.mode,
                                    a.token,
                                    a.process,
                                    if a.exit.is_some_and(|e| e.3) { " (killed)" } else { "" },
                                ));
                            }
                        }
                    }
                }
                inside.push(n);
            }
        }

        // Fencing.
        let section_of: HashMap<(u64, &str), &Interval> = inner
            .intervals
            .iter()
            .map(|i| ((i.holder, i.name.as_str()), i))
            .collect();
        for w in &inner.writes {
            f.writes += 1;
            if !w.accepted {
                f.refused += 1;
            }
            let Some(section) = section_of.get(&(w.holder, w.name.as_str())) else {
                continue;
            };
            let lost = section.exit.is_some_and(|e| e.2);
            let stale = w.later_existed || !w.accepted;
            if stale && !lost && !restart_between(section.enter_seq, w.seq) {
                f.fencing_violations += 1;
                if f.details.len() < detail_cap + 2 {
                    f.details.push(format!(
                        "{}: the model store {} a write with token {} from a guard not lost{}",
                        w.name,
                        if w.accepted { "accepted" } else { "refused" },
                        w.token,
                        if w.accepted {
                            " while a larger token existed"
                        } else {
                            ""
                        },
                    ));
                }
            }
        }

        // Liveness: a timed-out wait during which its names were free for
        // longer than the bound, outside every fault window.
        for t in &inner.timeouts {
            let bound = if t.names.len() > 1 {
                LIVENESS_BOUND_SET
            } else {
                LIVENESS_BOUND
            };
            if t.end - t.start <= bound {
                continue;
            }
            f.liveness_checked += 1;
            let free = longest_free(&inner.intervals, t);
            if free <= bound {
                continue;
            }
            if windows.iter().any(|(a, b)| *a <= t.end && t.start <= *b) {
                f.liveness_excused += 1;
                continue;
            }
            f.liveness_misses += 1;
            if f.details.len() < detail_cap + 6 {
                f.details.push(format!(
                    "{:?} waited {:.0} ms on {:?} and timed out; they were free for {:.0} ms of it",
                    t.mode,
                    (t.end - t.start).as_secs_f64() * 1e3,
                    t.names,
                    free.as_secs_f64() * 1e3
                ));
            }
        }
        f
    }
}

/// The longest stretch of the wait `t` during which its names could have
/// been taken: no holder of any of them (a semaphore: fewer holders than
/// permits). Read-write waits count only stretches with nobody inside.
fn longest_free(intervals: &[Interval], t: &TimeoutRec) -> Duration {
    let mut events: Vec<(Instant, i32)> = Vec::new();
    for i in intervals.iter().filter(|i| t.names.contains(&i.name)) {
        let exit = i.exit.map_or(t.end, |e| e.1);
        if exit < t.start || i.enter_at > t.end {
            continue;
        }
        events.push((i.enter_at.max(t.start), 1));
        events.push((exit.min(t.end), -1));
    }
    events.sort();
    let capacity = match t.mode {
        Mode::Permit(n) => n as i32,
        _ => 1,
    };
    let (mut busy, mut free_since, mut longest) = (0_i32, Some(t.start), Duration::ZERO);
    for (at, delta) in events {
        busy += delta;
        if busy >= capacity {
            if let Some(since) = free_since.take() {
                longest = longest.max(at - since);
            }
        } else if free_since.is_none() {
            free_since = Some(at);
        }
    }
    if let Some(since) = free_since {
        longest = longest.max(t.end - since);
    }
    longest
}

/// Where a task sends its events: the round's book in this process, or
/// the parent's ledger server.
pub enum Sink {
    Local { book: Arc<Book> },
    Remote { process: usize, conn: Remote },
}

impl Sink {
    fn process(&self) -> usize {
        match self {
            Sink::Local { .. } => 0,
            Sink::Remote { process, .. } => *process,
        }
    }

    pub fn enter(&mut self, holder: u64, name: &str, token: u64, mode: Mode) {
        match self {
            Sink::Local { book } => book.enter(0, holder, name, token, mode),
            Sink::Remote { conn, .. } => {
                conn.call(&format!("E {holder} {token} {} {name}", mode.text()))
            }
        }
    }

    pub fn exit(&mut self, holder: u64, name: &str, lost: bool) {
        match self {
            Sink::Local { book } => book.exit(0, holder, name, lost),
            Sink::Remote { conn, .. } => {
                conn.call(&format!("X {holder} {} {name}", u8::from(lost)))
            }
        }
    }

    pub fn write(&mut self, holder: u64, name: &str, token: u64) {
        match self {
            Sink::Local { book } => book.write(0, holder, name, token),
            Sink::Remote { conn, .. } => conn.call(&format!("W {holder} {token} {name}")),
        }
    }

    pub fn timeout(&mut self, names: &[String], mode: Mode, waited: Duration) {
        match self {
            Sink::Local { book } => book.timeout(0, names, mode, waited),
            Sink::Remote { conn, .. } => conn.call(&format!(
                "T {} {} {}",
                waited.as_micros(),
                mode.text(),
                names.join(" ")
            )),
        }
    }

    pub fn lost(&mut self, holder: u64, name: &str) {
        match self {
            Sink::Local { book } => book.lost(0, holder, name),
            Sink::Remote { conn, .. } => conn.call(&format!("Z {holder} {name}")),
        }
    }

    pub fn count(&mut self, what: &str) {
        match self {
            Sink::Local { book } => book.count(what, 1),
            Sink::Remote { conn, .. } => conn.call(&format!("N {what}")),
        }
    }

    /// A holder id unique in the run: the process, the task, a count.
    pub fn holder(&self, task: usize, n: u64) -> u64 {
        ((self.process() as u64) << 48) | ((task as u64) << 32) | n
    }
}

/// A worker's connection to the parent's ledger: one line out, one line back.
pub struct Remote {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl Remote {
    pub fn connect(port: u16, process: usize) -> Remote {
        let stream =
            TcpStream::connect(("127.0.0.1", port)).expect("connect to the parent's ledger");
        stream.set_nodelay(true).expect("nodelay");
        let mut remote = Remote {
            reader: BufReader::new(stream.try_clone().expect("clone the ledger stream")),
            writer: stream,
        };
        remote.call(&format!("H {process}"));
        remote
    }

    fn call(&mut self, line: &str) {
        self.writer
            .write_all(format!("{line}\n").as_bytes())
            .expect("write to the ledger");
        let mut answer = String::new();
        self.reader
            .read_line(&mut answer)
            .expect("read from the ledger");
        assert_eq!(
            answer.trim(),
            "ok",
            "the ledger answered {answer:?} to {line:?}"
        );
    }
}

/// The parent's ledger server, on a loopback port: it files every event
/// of a worker in the current round's book, then answers `ok`.
pub struct Server {
    pub port: u16,
    current: Arc<Mutex<Arc<Book>>>,
}

impl Server {
    pub fn start() -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the ledger server");
        let port = listener.local_addr().expect("ledger address").port();
        let current = Arc::new(Mutex::new(Arc::new(Book::default())));
        let shared = current.clone();
        // The thread lives as long as the test process; connections end
        // when their worker does.
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let current = shared.clone();
                std::thread::spawn(move || serve(stream, current));
            }
        });
        Server { port, current }
    }

    /// Files what workers send from now on in `book`.
    pub fn set_book(&self, book: Arc<Book>) {
        *self.current.lock().unwrap_or_else(|e| e.into_inner()) = book;
    }
}

fn serve(stream: TcpStream, current: Arc<Mutex<Arc<Book>>>) {
    let _ = stream.set_nodelay(true);
    let Ok(mut writer) = stream.try_clone() else {
        return;
    };
    let mut process = usize::MAX;
    // A connection files in the book of the round it said hello in, so
    // that what a killed worker left in its socket cannot reach the next
    // round's book.
    let book = current.lock().unwrap_or_else(|e| e.into_inner()).clone();
    for line in BufReader::new(stream).lines() {
        let Ok(line) = line else { return };
        let words: Vec<&str> = line.split(' ').collect();
        let num = |i: usize| -> u64 { words.get(i).and_then(|w| w.parse().ok()).unwrap_or(0) };
        match words.first().copied() {
            Some("H") => process = num(1) as usize,
            Some("E") => {
                let mode = words.get(3).and_then(|m| Mode::parse(m)).expect("mode");
                book.enter(process, num(1), words[4], num(2), mode);
            }
            Some("X") => book.exit(process, num(1), words[3], num(2) == 1),
            Some("W") => book.write(process, num(1), words[3], num(2)),
            Some("T") => {
                let mode = words.get(2).and_then(|m| Mode::parse(m)).expect("mode");
                let names: Vec<String> = words[3..].iter().map(|s| s.to_string()).collect();
                book.timeout(process, &names, mode, Duration::from_micros(num(1)));
            }
            Some("Z") => book.lost(process, num(1), words[2]),
            Some("N") => book.count(words[1], 1),
            _ => panic!("the ledger got {line:?}"),
        }
        if writer.write_all(b"ok\n").is_err() {
            return;
        }
    }
}
