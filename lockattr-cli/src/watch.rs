//! `watch`: hand-overs per second from fencing tokens, and one refresh's
//! screen or JSON line.

use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime};

use serde::Serialize;

use crate::format;
use crate::view::{LockJson, LockView, RwJson, RwView, SemaphoreJson, SemaphoreView, epoch_millis};

/// ANSI: cursor to the top left corner, then clear the screen.
pub const CLEAR: &str = "\x1b[H\x1b[2J";

/// How long a name's last fencing token is kept after it was last seen
/// held, to count its hand-overs when it shows up again.
pub const FORGET_AFTER: Duration = Duration::from_secs(60);

/// Counts hand-overs per name: a lock's fencing token counts up by one per
/// acquisition (a hand-over to a waiter included), so the tokens seen at two
/// refreshes tell how many times the lock changed hands in between.
#[derive(Debug, Default)]
pub struct HandOvers {
    /// The last fencing token seen for each name, and when.
    seen: HashMap<String, (u64, Instant)>,
}

impl HandOvers {
    /// Records the tokens of one refresh, made at `at`, and returns for each
    /// lock its hand-overs per second since its name was last seen held
    /// (`None` when it was not seen within [`FORGET_AFTER`]).
    pub fn update(&mut self, locks: &[LockView], at: Instant) -> Vec<Option<f64>> {
        let rates = locks
            .iter()
            .map(|lock| {
                let &(token, then) = self.seen.get(&lock.name)?;
                rate(
                    token,
                    lock.fencing_token,
                    at.saturating_duration_since(then),
                )
            })
            .collect();
        for lock in locks {
            self.seen
                .insert(lock.name.clone(), (lock.fencing_token, at));
        }
        self.seen
            .retain(|_, (_, then)| at.saturating_duration_since(*then) <= FORGET_AFTER);
        rates
    }
}

/// Hand-overs per second between two fencing tokens of one name seen
/// `elapsed` apart. A counter that Redis lost starts again from the
/// server's clock in microseconds: a jump larger than one per microsecond
/// (or backwards) is that, counted as one hand-over.
pub fn rate(old: u64, new: u64, elapsed: Duration) -> Option<f64> {
    if elapsed.is_zero() {
        return None;
    }
    let mut changes = new.wrapping_sub(old);
    if new < old || u128::from(changes) > elapsed.as_micros() {
        changes = 1;
    }
    Some(changes as f64 / elapsed.as_secs_f64())
}

/// The columns of the live table.
pub const HEADER: [&str; 8] = [
    "NAME",
    "KIND",
    "HOLDER",
    "SINCE",
    "TTL",
    "WAITERS",
    "FENCE",
    "HAND-OVERS/S",
];

/// What one refresh found.
#[derive(Debug)]
pub enum Snapshot<'a> {
    /// The held locks, their hand-overs per second, the held read-write
    /// locks and the semaphores in use (shown after the locks, without a
    /// rate: a read-write lock's readers share its writers' fencing counter,
    /// and a semaphore's permits share one), and how many keys were skipped
    /// (under the prefix, not written by lockattr).
    Locks(
        &'a [LockView],
        &'a [Option<f64>],
        &'a [RwView],
        &'a [SemaphoreView],
        usize,
    ),
    /// The refresh failed (the message is shown and the next refresh tries again).
    Failed(&'a str),
}

/// The settings shown in the header line.
#[derive(Debug)]
pub struct Settings<'a> {
    /// The glob over lock names.
    pub pattern: &'a str,
    /// Time between refreshes.
    pub interval: Duration,
    /// The most locks listed.
    pub limit: usize,
    /// Whether the output is a terminal (then the screen is cleared first).
    pub terminal: bool,
}

/// One refresh as text: on a terminal, the screen cleared and redrawn;
/// otherwise the table after a blank line.
pub fn frame(settings: &Settings<'_>, snapshot: &Snapshot<'_>, now: SystemTime) -> String {
    let mut out = String::from(if settings.terminal { CLEAR } else { "\n" });
    out.push_str(&format!(
        "{}  every {}  pattern {}",
        format::utc(now, false),
        format::duration(settings.interval),
        format::printable(settings.pattern),
    ));
    match snapshot {
        Snapshot::Failed(message) => {
            out.push_str(&format!("\nlockattr: {message}\n"));
        }
        Snapshot::Locks(locks, rates, rws, semaphores, skipped) => {
            let more = if locks.len() >= settings.limit
                || rws.len() >= settings.limit
                || semaphores.len() >= settings.limit
            {
                " (the --limit; there may be more)"
            } else {
                ""
            };
            let skipped = if *skipped > 0 {
                format!(
                    ", {} skipped (not lockattr's)",
                    format::count(*skipped, "key", "keys")
                )
            } else {
                String::new()
            };
            out.push_str(&format!(
                "  {}{skipped}{more}\n\n",
                held_text(locks.len(), rws.len(), semaphores.len())
            ));
            let rows: Vec<Vec<String>> = locks
                .iter()
                .zip(rates.iter())
                .map(|(lock, rate)| {
                    let mut row = format::ls_row(lock, now);
                    row.push(rate.map_or_else(|| "-".into(), |r| format!("{r:.1}")));
                    row
                })
                .chain(rws.iter().map(|rw| {
                    let mut row = format::ls_rw_row(rw, now);
                    row.push("-".into());
                    row
                }))
                .chain(semaphores.iter().map(|sem| {
                    let mut row = format::ls_semaphore_row(sem, now);
                    row.push("-".into());
                    row
                }))
                .collect();
            out.push_str(&format::table(&HEADER, &rows));
        }
    }
    if settings.terminal {
        out.push_str("\n(Ctrl-C to quit)\n");
    }
    out
}

/// What a refresh found, in words: `1 lock, 2 read-write locks and 1
/// semaphore held`, the kinds none of is held left out; `nothing held`.
fn held_text(locks: usize, rws: usize, semaphores: usize) -> String {
    let parts: Vec<String> = [
        (locks, "lock", "locks"),
        (rws, "read-write lock", "read-write locks"),
        (semaphores, "semaphore", "semaphores"),
    ]
    .into_iter()
    .filter(|(n, _, _)| *n > 0)
    .map(|(n, one, many)| format::count(n, one, many))
    .collect();
    match parts.as_slice() {
        [] => "nothing held".into(),
        [one] => format!("{one} held"),
        [first @ .., last] => format!("{} and {last} held", first.join(", ")),
    }
}

/// One refresh as a JSON line (`watch --json`).
#[derive(Debug, Serialize)]
pub struct RefreshJson {
    /// When, in Unix epoch milliseconds.
    pub time_ms: u64,
    /// The held locks, or `null` when the refresh failed.
    pub locks: Option<Vec<WatchedJson>>,
    /// Why the refresh failed; `null` when it did not.
    pub error: Option<String>,
    /// The semaphores in use, as `show --json` of a semaphore; left out
    /// when there are none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub semaphores: Vec<SemaphoreJson>,
    /// The read-write locks held, as `show --json` of one; left out when
    /// there are none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub read_write: Vec<RwJson>,
    /// How many keys under the prefix were skipped, not written by
    /// lockattr; left out when none was.
    #[serde(skip_serializing_if = "is_zero")]
    pub skipped: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// A lock in [`RefreshJson`]: the object of `show --json` and its hand-overs.
#[derive(Debug, Serialize)]
pub struct WatchedJson {
    /// As `show --json`.
    #[serde(flatten)]
    pub lock: LockJson,
    /// Hand-overs per second since the last refresh; `null` when unknown.
    pub handovers_per_s: Option<f64>,
}

impl RefreshJson {
    /// The JSON of one refresh.
    pub fn of(snapshot: &Snapshot<'_>, now: SystemTime) -> RefreshJson {
        let time_ms = epoch_millis(now);
        match snapshot {
            Snapshot::Failed(message) => RefreshJson {
                time_ms,
                locks: None,
                error: Some((*message).to_owned()),
                semaphores: Vec::new(),
                read_write: Vec::new(),
                skipped: 0,
            },
            Snapshot::Locks(locks, rates, rws, semaphores, skipped) => RefreshJson {
                time_ms,
                locks: Some(
                    locks
                        .iter()
                        .zip(rates.iter())
                        .map(|(lock, rate)| WatchedJson {
                            lock: LockJson::held(lock),
                            handovers_per_s: *rate,
                        })
                        .collect(),
                ),
                error: None,
                semaphores: semaphores.iter().map(SemaphoreJson::of).collect(),
                read_write: rws.iter().map(RwJson::of).collect(),
                skipped: *skipped,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::tests::held;
    use crate::view::to_json;

    #[test]
    fn the_header_counts_every_kind() {
        assert_eq!(held_text(0, 0, 0), "nothing held");
        assert_eq!(held_text(1, 0, 0), "1 lock held");
        assert_eq!(held_text(2, 0, 1), "2 locks and 1 semaphore held");
        assert_eq!(
            held_text(1, 1, 1),
            "1 lock, 1 read-write lock and 1 semaphore held"
        );
        let rw = crate::view::tests::read_write("catalog");
        let now = rw.readers[0].holder.as_ref().unwrap().since;
        let snapshot = Snapshot::Locks(&[], &[], std::slice::from_ref(&rw), &[], 2);
        let text = frame(&settings(false), &snapshot, now);
        assert!(
            text.contains("1 read-write lock held, 2 keys skipped"),
            "{text}"
        );
        assert!(
            text.lines()
                .last()
                .unwrap()
                .starts_with("catalog  read-write")
        );
        let value: serde_json::Value =
            serde_json::from_str(&to_json(&RefreshJson::of(&snapshot, now))).unwrap();
        assert_eq!(value["read_write"][0]["name"], "catalog");
        assert_eq!(value["skipped"], 2);
    }

    #[test]
    fn semaphores_follow_the_locks_without_a_rate() {
        let locks = [held("order:7", 42)];
        let sems = [crate::view::tests::semaphore("gpu")];
        let now = locks[0].holder.as_ref().unwrap().since;
        let text = frame(
            &settings(false),
            &Snapshot::Locks(&locks, &[None], &[], &sems, 0),
            now,
        );
        assert!(text.contains("1 lock and 1 semaphore held"), "{text}");
        let last = text.lines().last().unwrap();
        assert!(last.starts_with("gpu      semaphore(2/3)"), "{text}");
        assert!(last.ends_with("41,43  -"), "{text}");
        let json = to_json(&RefreshJson::of(
            &Snapshot::Locks(&locks, &[None], &[], &sems, 0),
            now,
        ));
        let value: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(value["semaphores"][0]["kind"], "semaphore");
        let json = to_json(&RefreshJson::of(
            &Snapshot::Locks(&locks, &[None], &[], &[], 0),
            now,
        ));
        assert!(!json.contains("semaphores"), "{json}");
    }

    #[test]
    fn rates_from_token_increases() {
        let s = Duration::from_secs;
        assert_eq!(rate(10, 10, s(1)), Some(0.0));
        assert_eq!(rate(10, 13, s(1)), Some(3.0));
        assert_eq!(rate(10, 13, Duration::from_millis(200)), Some(15.0));
        assert_eq!(rate(10, 13, Duration::ZERO), None);
        // A counter started again from the clock: one hand-over.
        assert_eq!(rate(5, 1_700_000_000_000_000, s(2)), Some(0.5));
        assert_eq!(rate(1_700_000_000_000_000, 5, s(2)), Some(0.5));
    }

    #[test]
    fn hand_overs_between_refreshes() {
        let t0 = Instant::now();
        let mut hand_overs = HandOvers::default();
        let first = [held("a", 100), held("b", 7)];
        assert_eq!(hand_overs.update(&first, t0), [None, None]);
        let second = [held("a", 104), held("c", 1)];
        assert_eq!(
            hand_overs.update(&second, t0 + Duration::from_secs(2)),
            [Some(2.0), None]
        );
        // `b` was free at the second refresh; its token is still known.
        let third = [held("b", 9)];
        assert_eq!(
            hand_overs.update(&third, t0 + Duration::from_secs(4)),
            [Some(0.5)]
        );
        // Names not seen for FORGET_AFTER are forgotten.
        let later = t0 + Duration::from_secs(4) + FORGET_AFTER + Duration::from_secs(1);
        assert_eq!(hand_overs.update(&[], later), Vec::<Option<f64>>::new());
        assert!(hand_overs.seen.is_empty());
    }

    fn settings(terminal: bool) -> Settings<'static> {
        Settings {
            pattern: "order:*",
            interval: Duration::from_secs(1),
            limit: 1000,
            terminal,
        }
    }

    #[test]
    fn terminal_frames_clear_the_screen() {
        let locks = [held("order:7", 42)];
        let since = locks[0].holder.as_ref().unwrap().since;
        let text = frame(
            &settings(true),
            &Snapshot::Locks(&locks, &[Some(2.5)], &[], &[], 0),
            since,
        );
        assert!(text.starts_with(CLEAR));
        assert!(
            text.contains("2023-11-14 22:13:20 UTC  every 1.0s  pattern order:*  1 lock held\n")
        );
        let header = text.lines().find(|l| l.starts_with("NAME")).unwrap();
        assert_eq!(header.split_whitespace().collect::<Vec<_>>(), HEADER);
        let row = text.lines().find(|l| l.starts_with("order:7")).unwrap();
        let cells: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(cells[cells.len() - 3..], ["2", "42", "2.5"], "{row}");
        assert!(text.contains("Ctrl-C"));
    }

    #[test]
    fn other_outputs_get_plain_frames() {
        let locks = [held("order:7", 42)];
        let now = SystemTime::now();
        let text = frame(
            &settings(false),
            &Snapshot::Locks(&locks, &[None], &[], &[], 0),
            now,
        );
        assert!(!text.contains('\x1b'));
        assert!(text.starts_with('\n'));
        let row = text.lines().find(|l| l.starts_with("order:7")).unwrap();
        let cells: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(cells[cells.len() - 2..], ["42", "-"], "{row}");
    }

    #[test]
    fn a_full_page_says_there_may_be_more() {
        let locks = [held("a", 1)];
        let mut settings = settings(false);
        settings.limit = 1;
        let text = frame(
            &settings,
            &Snapshot::Locks(&locks, &[None], &[], &[], 0),
            SystemTime::now(),
        );
        assert!(text.contains("--limit"));
    }

    #[test]
    fn failed_refreshes_show_the_error() {
        let text = frame(
            &settings(false),
            &Snapshot::Failed("down"),
            SystemTime::now(),
        );
        assert!(text.contains("\nlockattr: down\n"));
        assert!(!text.contains("NAME"));
    }

    #[test]
    fn json_lines() {
        let locks = [held("a", 1)];
        let line = to_json(&RefreshJson::of(
            &Snapshot::Locks(&locks, &[Some(1.5)], &[], &[], 0),
            std::time::UNIX_EPOCH + Duration::from_millis(5),
        ));
        let value: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(value["time_ms"], 5);
        assert_eq!(value["error"], serde_json::Value::Null);
        assert_eq!(value["locks"][0]["name"], "a");
        assert_eq!(value["locks"][0]["held"], true);
        assert_eq!(value["locks"][0]["handovers_per_s"], 1.5);
        let line = to_json(&RefreshJson::of(
            &Snapshot::Failed("down"),
            SystemTime::now(),
        ));
        let value: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(value["locks"], serde_json::Value::Null);
        assert_eq!(value["error"], "down");
    }
}
