//! Text for people: durations, times, tables, the lines of `show`.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use comfy_table::{ContentArrangement, Table, presets};
use jiff::Timestamp;

use crate::view::{HoldView, HolderView, LockView, RwView, SemaphoreView};

/// A duration in at most two units, cut (never rounded) so that a lease is
/// never overstated: `0ms`, `850ms`, `9.4s`, `42s`, `3m12s`, `2h05m`,
/// `3d04h`.
pub fn duration(d: Duration) -> String {
    let secs = d.as_secs();
    if secs == 0 {
        format!("{}ms", d.subsec_millis())
    } else if secs < 10 {
        format!("{secs}.{}s", d.subsec_millis() / 100)
    } else if secs < 60 {
        format!("{secs}s")
    } else if secs < 3600 {
        format!("{}m{:02}s", secs / 60, secs % 60)
    } else if secs < 86_400 {
        format!("{}h{:02}m", secs / 3600, secs % 3600 / 60)
    } else {
        format!("{}d{:02}h", secs / 86_400, secs % 86_400 / 3600)
    }
}

/// How long ago `since` was, seen at `now` (zero when `since` is later:
/// the Redis clock may run ahead of ours).
pub fn age(since: SystemTime, now: SystemTime) -> Duration {
    now.duration_since(since).unwrap_or(Duration::ZERO)
}

/// `label@host:pid`.
pub fn holder(holder: &HolderView) -> String {
    format!(
        "{}@{}:{}",
        printable(&holder.label),
        printable(&holder.host),
        holder.pid
    )
}

/// `t` in UTC as `YYYY-MM-DD HH:MM:SS UTC` (with `.mmm` after the seconds
/// when `millis`; cut, never rounded). Times before 1970 show as the epoch;
/// times past the last one a [`Timestamp`] holds (in the year 9999) as
/// `after` that one.
pub fn utc(t: SystemTime, millis: bool) -> String {
    let (after, t) = match Timestamp::try_from(t.max(UNIX_EPOCH)) {
        Ok(t) => ("", t),
        Err(_) => ("after ", Timestamp::MAX),
    };
    let format = if millis {
        "%Y-%m-%d %H:%M:%S%.3f UTC"
    } else {
        "%Y-%m-%d %H:%M:%S UTC"
    };
    format!("{after}{}", t.strftime(format))
}

/// `text` safe to print on a terminal: control characters (escape
/// sequences, new lines) are shown escaped, as `\u{1b}` or `\n`.
pub fn printable(text: &str) -> Cow<'_, str> {
    if text.chars().any(char::is_control) {
        Cow::Owned(
            text.chars()
                .map(|c| {
                    if c.is_control() {
                        c.escape_debug().to_string()
                    } else {
                        c.to_string()
                    }
                })
                .collect(),
        )
    } else {
        Cow::Borrowed(text)
    }
}

/// Rows under a header, in columns two spaces apart (no borders, no
/// wrapping, no trailing spaces).
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut table = Table::new();
    table
        .load_style(presets::NOTHING)
        .set_content_arrangement(ContentArrangement::Disabled)
        .set_header(header.to_vec())
        .add_rows(rows.iter().cloned());
    for column in table.column_iter_mut() {
        column.set_padding((0, 2));
    }
    let mut out = table.trim_fmt();
    out.push('\n');
    out
}

/// `n` and the noun, singular or plural: `1 lock`, `2 locks`.
pub fn count(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// A fencing token as text: `-` for 0 (none known: a reader before any
/// write, a hold of an older version).
pub fn token(fencing_token: u64) -> String {
    if fencing_token == 0 {
        "-".into()
    } else {
        fencing_token.to_string()
    }
}

/// The columns of `ls`.
pub const LS_HEADER: [&str; 7] = ["NAME", "KIND", "HOLDER", "SINCE", "TTL", "WAITERS", "FENCE"];

/// The cells of one lock under [`LS_HEADER`].
pub fn ls_row(lock: &LockView, now: SystemTime) -> Vec<String> {
    vec![
        printable(&lock.name).into_owned(),
        "lock".into(),
        lock.holder.as_ref().map_or_else(|| "-".into(), holder),
        lock.holder
            .as_ref()
            .map_or_else(|| "-".into(), |h| duration(age(h.since, now))),
        duration(lock.ttl),
        lock.waiters.to_string(),
        token(lock.fencing_token),
    ]
}

/// The cells of one semaphore under [`LS_HEADER`]: its name, its kind
/// `semaphore(held/permits)`, its holder when one permit is held (else
/// how many), the age of its oldest hold, the shortest time left, its
/// waiters, and its holders' fencing tokens.
pub fn ls_semaphore_row(sem: &SemaphoreView, now: SystemTime) -> Vec<String> {
    let kind = format!("semaphore({}/{})", sem.holders.len(), sem.permits);
    let who = match sem.holders.as_slice() {
        [one] => one.holder.as_ref().map_or_else(|| "-".into(), holder),
        many => count(many.len(), "holder", "holders"),
    };
    let oldest = sem
        .holders
        .iter()
        .filter_map(|p| p.holder.as_ref())
        .map(|h| age(h.since, now))
        .max()
        .map_or_else(|| "-".into(), duration);
    let ttl = sem
        .holders
        .iter()
        .map(|p| p.ttl)
        .min()
        .map_or_else(|| "-".into(), duration);
    let fences: Vec<String> = sem.holders.iter().map(|p| token(p.fencing_token)).collect();
    vec![
        printable(&sem.name).into_owned(),
        kind,
        who,
        oldest,
        ttl,
        sem.waiters.to_string(),
        if fences.is_empty() {
            "-".into()
        } else {
            fences.join(",")
        },
    ]
}

/// The cells of one read-write lock under [`LS_HEADER`]: its name, its
/// kind `read-write`, its writer (or its one reader marked `(reader)`, or
/// how many read), the age of the writer's hold (or the oldest reader's),
/// the writer's time left (or the shortest reader's), its waiters, and the
/// writer's fencing token (or the readers' largest: the last write's; `-`
/// when none is known).
pub fn ls_rw_row(rw: &RwView, now: SystemTime) -> Vec<String> {
    let who = match (&rw.writer, rw.readers.as_slice()) {
        (Some(writer), _) => writer.holder.as_ref().map_or_else(|| "-".into(), holder),
        (None, [one]) => one
            .holder
            .as_ref()
            .map_or_else(|| "-".into(), |h| format!("{} (reader)", holder(h))),
        (None, many) => count(many.len(), "reader", "readers"),
    };
    let holds: Vec<&HoldView> = rw.writer.iter().chain(rw.readers.iter()).collect();
    let head = if rw.writer.is_some() {
        &holds[..1]
    } else {
        &holds[..]
    };
    let oldest = head
        .iter()
        .filter_map(|h| h.holder.as_ref())
        .map(|h| age(h.since, now))
        .max()
        .map_or_else(|| "-".into(), duration);
    let ttl = head
        .iter()
        .map(|h| h.ttl)
        .min()
        .map_or_else(|| "-".into(), duration);
    let fence = head.iter().map(|h| h.fencing_token).max().unwrap_or(0);
    vec![
        printable(&rw.name).into_owned(),
        "read-write".into(),
        who,
        oldest,
        ttl,
        rw.waiters.to_string(),
        token(fence),
    ]
}

/// The table of `ls`: the locks' rows, the read-write locks', then the
/// semaphores'.
pub fn ls_table_all(
    locks: &[LockView],
    rws: &[RwView],
    semaphores: &[SemaphoreView],
    now: SystemTime,
) -> String {
    let rows: Vec<Vec<String>> = locks
        .iter()
        .map(|l| ls_row(l, now))
        .chain(rws.iter().map(|rw| ls_rw_row(rw, now)))
        .chain(semaphores.iter().map(|s| ls_semaphore_row(s, now)))
        .collect();
    table(&LS_HEADER, &rows)
}

/// The lines of `show` for a held read-write lock: who holds it, then one
/// row for its writer or each reader.
pub fn show_rw(rw: &RwView, now: SystemTime) -> String {
    let mut out = String::new();
    let held = match (&rw.writer, rw.readers.len()) {
        (Some(_), _) => "by a writer".to_owned(),
        (None, 1) => "by 1 reader".to_owned(),
        (None, n) => format!("by {}", count(n, "reader", "readers")),
    };
    let pairs = [
        ("name", printable(&rw.name).into_owned()),
        ("kind", "read-write lock".to_owned()),
        ("held", held),
        ("waiters", rw.waiters.to_string()),
    ];
    for (key, value) in pairs {
        let _ = writeln!(out, "{:<9} {value}", format!("{key}:"));
    }
    let row = |side: &str, h: &HoldView| {
        vec![
            side.to_owned(),
            h.holder.as_ref().map_or_else(|| "-".into(), holder),
            h.holder.as_ref().map_or_else(
                || "-".into(),
                |who| {
                    format!(
                        "{} ({} ago)",
                        utc(who.since, true),
                        duration(age(who.since, now))
                    )
                },
            ),
            duration(h.ttl),
            token(h.fencing_token),
        ]
    };
    let rows: Vec<Vec<String>> = rw
        .writer
        .iter()
        .map(|w| row("writer", w))
        .chain(rw.readers.iter().map(|r| row("reader", r)))
        .collect();
    out.push('\n');
    out.push_str(&table(&["SIDE", "HOLDER", "SINCE", "TTL", "FENCE"], &rows));
    out
}

/// The lines of `show` for a semaphore in use: its permits, then one
/// block per held permit and the oldest waiters.
pub fn show_semaphore(sem: &SemaphoreView, now: SystemTime) -> String {
    let mut out = String::new();
    let pairs = [
        ("name", printable(&sem.name).into_owned()),
        ("kind", "semaphore".to_owned()),
        (
            "permits",
            format!("{} held of {}", sem.holders.len(), sem.permits),
        ),
        ("waiters", sem.waiters.to_string()),
    ];
    for (key, value) in pairs {
        let _ = writeln!(out, "{:<9} {value}", format!("{key}:"));
    }
    let rows: Vec<Vec<String>> = sem
        .holders
        .iter()
        .map(|p| {
            vec![
                p.permit.to_string(),
                p.holder.as_ref().map_or_else(|| "-".into(), holder),
                p.holder.as_ref().map_or_else(
                    || "-".into(),
                    |h| {
                        format!(
                            "{} ({} ago)",
                            utc(h.since, true),
                            duration(age(h.since, now))
                        )
                    },
                ),
                duration(p.ttl),
                token(p.fencing_token),
            ]
        })
        .collect();
    if !rows.is_empty() {
        out.push('\n');
        out.push_str(&table(
            &["PERMIT", "HOLDER", "SINCE", "TTL", "FENCE"],
            &rows,
        ));
    }
    if !sem.waiting.is_empty() {
        let rows: Vec<Vec<String>> = sem
            .waiting
            .iter()
            .map(|h| vec![holder(h), format!("{} ago", duration(age(h.since, now)))])
            .collect();
        out.push('\n');
        out.push_str(&table(&["WAITING", "QUEUED"], &rows));
    }
    out
}

/// The `key: value` lines of `show` (`lock` is `None` when the lock is free).
pub fn show(name: &str, lock: Option<&LockView>, now: SystemTime) -> String {
    let mut pairs: Vec<(&str, String)> = vec![("name", printable(name).into_owned())];
    match lock {
        None => {
            pairs.push(("held", "no".into()));
            pairs.push(("waiters", "0".into()));
        }
        Some(lock) => {
            pairs.push(("held", "yes".into()));
            match &lock.holder {
                Some(h) => {
                    pairs.push(("holder", holder(h)));
                    pairs.push((
                        "since",
                        format!(
                            "{} ({} ago)",
                            utc(h.since, true),
                            duration(age(h.since, now))
                        ),
                    ));
                }
                None => pairs.push(("holder", "unknown (not recorded by its client)".into())),
            }
            pairs.push((
                "ttl",
                format!(
                    "{} ({} ms)",
                    duration(lock.ttl),
                    crate::view::millis(lock.ttl)
                ),
            ));
            pairs.push(("fencing token", token(lock.fencing_token)));
            pairs.push(("waiters", lock.waiters.to_string()));
        }
    }
    let width = pairs.iter().map(|(k, _)| k.len()).max().unwrap_or(0) + 1;
    let mut out = String::new();
    for (key, value) in pairs {
        let _ = writeln!(out, "{:<width$} {value}", format!("{key}:"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::tests::held;

    #[test]
    fn durations() {
        let ms = Duration::from_millis;
        let s = Duration::from_secs;
        assert_eq!(duration(Duration::ZERO), "0ms");
        assert_eq!(duration(ms(850)), "850ms");
        assert_eq!(duration(ms(9_499)), "9.4s");
        assert_eq!(duration(ms(1_000)), "1.0s");
        assert_eq!(duration(ms(42_900)), "42s");
        assert_eq!(duration(s(192)), "3m12s");
        assert_eq!(duration(s(60)), "1m00s");
        assert_eq!(duration(s(2 * 3600 + 5 * 60 + 59)), "2h05m");
        assert_eq!(duration(s(3 * 86_400 + 4 * 3600 + 1)), "3d04h");
        assert!(duration(Duration::MAX).starts_with(&format!("{}d", u64::MAX / 86_400)));
    }

    #[test]
    fn ages_are_never_negative() {
        let t = UNIX_EPOCH + Duration::from_secs(1000);
        assert_eq!(age(t, t + Duration::from_secs(5)), Duration::from_secs(5));
        assert_eq!(age(t + Duration::from_secs(5), t), Duration::ZERO);
    }

    #[test]
    fn utc_times() {
        assert_eq!(utc(UNIX_EPOCH, false), "1970-01-01 00:00:00 UTC");
        let t = UNIX_EPOCH + Duration::from_millis(1_700_000_000_123);
        assert_eq!(utc(t, false), "2023-11-14 22:13:20 UTC");
        assert_eq!(utc(t, true), "2023-11-14 22:13:20.123 UTC");
        // A leap day, and the last second of a year.
        let t = UNIX_EPOCH + Duration::from_secs(951_782_400);
        assert_eq!(utc(t, false), "2000-02-29 00:00:00 UTC");
        let t = UNIX_EPOCH + Duration::from_secs(1_735_689_599);
        assert_eq!(utc(t, false), "2024-12-31 23:59:59 UTC");
        // Milliseconds are cut, not rounded up into the next second.
        let t = UNIX_EPOCH + Duration::from_nanos(1_999_999_999);
        assert_eq!(utc(t, true), "1970-01-01 00:00:01.999 UTC");
        // Out of range: before the epoch, after the year 9999.
        assert_eq!(
            utc(UNIX_EPOCH - Duration::from_secs(1), true),
            "1970-01-01 00:00:00.000 UTC"
        );
        let t = UNIX_EPOCH + Duration::from_secs(400_000_000_000);
        assert_eq!(utc(t, false), "after 9999-12-30 22:00:00 UTC");
    }

    #[test]
    fn control_characters_are_escaped() {
        assert!(matches!(printable("order:7"), Cow::Borrowed("order:7")));
        assert_eq!(printable("a\x1b[2Jb\nc"), "a\\u{1b}[2Jb\\nc");
        assert_eq!(printable("ünïcödé ✓"), "ünïcödé ✓");
    }

    #[test]
    fn tables_align_columns() {
        let text = table(
            &["NAME", "N"],
            &[
                vec!["a".into(), "1".into()],
                vec!["longer".into(), "22".into()],
            ],
        );
        assert_eq!(text, "NAME    N\na       1\nlonger  22\n");
        assert_eq!(table(&["NAME", "N"], &[]), "NAME  N\n");
        // Columns line up on a terminal's cells: a wide character takes two.
        let text = table(&["NAME", "N"], &[vec!["注文".into(), "1".into()]]);
        assert_eq!(text, "NAME  N\n注文  1\n");
    }

    #[test]
    fn ls_rows() {
        let lock = held("order:7", 42);
        let since = lock.holder.as_ref().unwrap().since;
        let row = ls_row(&lock, since + Duration::from_secs(192));
        assert_eq!(
            row,
            [
                "order:7",
                "lock",
                "billing@web-1:4242",
                "3m12s",
                "9.5s",
                "2",
                "42"
            ]
        );
        let mut unknown = lock.clone();
        unknown.holder = None;
        assert_eq!(
            ls_row(&unknown, since),
            ["order:7", "lock", "-", "-", "9.5s", "2", "42"]
        );
        let text = ls_table_all(&[lock], &[], &[], since);
        let mut lines = text.lines();
        assert_eq!(
            lines.next().unwrap().split_whitespace().collect::<Vec<_>>(),
            LS_HEADER
        );
        assert!(
            lines
                .next()
                .unwrap()
                .starts_with("order:7  lock  billing@web-1:4242")
        );
        assert_eq!(lines.next(), None);
    }

    #[test]
    fn show_a_held_lock() {
        let lock = held("order:7", 42);
        let since = lock.holder.as_ref().unwrap().since;
        let text = show("order:7", Some(&lock), since + Duration::from_secs(3));
        assert_eq!(
            text,
            "name:          order:7\n\
             held:          yes\n\
             holder:        billing@web-1:4242\n\
             since:         2023-11-14 22:13:20.123 UTC (3.0s ago)\n\
             ttl:           9.5s (9500 ms)\n\
             fencing token: 42\n\
             waiters:       2\n"
        );
    }

    #[test]
    fn semaphores_in_ls_and_show() {
        let sem = crate::view::tests::semaphore("gpu");
        let since = sem.holders[0].holder.as_ref().unwrap().since;
        let now = since + Duration::from_secs(3);
        assert_eq!(
            ls_semaphore_row(&sem, now),
            [
                "gpu",
                "semaphore(2/3)",
                "2 holders",
                "3.0s",
                "1.2s",
                "1",
                "41,43"
            ]
        );
        let text = ls_table_all(&[held("order:7", 42)], &[], std::slice::from_ref(&sem), now);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[1].starts_with("order:7 "), "{text}");
        assert!(lines[2].starts_with("gpu      semaphore(2/3)"), "{text}");
        assert_eq!(
            show_semaphore(&sem, now),
            "name:     gpu\n\
             kind:     semaphore\n\
             permits:  2 held of 3\n\
             waiters:  1\n\
             \n\
             PERMIT  HOLDER              SINCE                                   TTL   FENCE\n\
             0       billing@web-1:4242  2023-11-14 22:13:20.123 UTC (3.0s ago)  9.5s  41\n\
             2       -                   -                                       1.2s  43\n\
             \n\
             WAITING             QUEUED\n\
             billing@web-1:4242  3.0s ago\n"
        );
    }

    #[test]
    fn read_write_locks_in_ls_and_show() {
        let rw = crate::view::tests::read_write("catalog");
        let since = rw.readers[0].holder.as_ref().unwrap().since;
        let now = since + Duration::from_secs(3);
        assert_eq!(
            ls_rw_row(&rw, now),
            [
                "catalog",
                "read-write",
                "2 readers",
                "3.0s",
                "1.2s",
                "1",
                "41"
            ]
        );
        assert_eq!(
            show_rw(&rw, now),
            "name:     catalog\n\
             kind:     read-write lock\n\
             held:     by 2 readers\n\
             waiters:  1\n\
             \n\
             SIDE    HOLDER              SINCE                                   TTL   FENCE\n\
             reader  billing@web-1:4242  2023-11-14 22:13:20.123 UTC (3.0s ago)  9.5s  41\n\
             reader  -                   -                                       1.2s  41\n"
        );
        let mut written = rw.clone();
        written.writer = written.readers.pop();
        written.writer.as_mut().unwrap().fencing_token = 42;
        written.readers.clear();
        assert_eq!(
            ls_rw_row(&written, now),
            ["catalog", "read-write", "-", "-", "1.2s", "1", "42"]
        );
        let text = ls_table_all(&[held("order:7", 42)], &[rw], &[], now);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[2].starts_with("catalog  read-write"), "{text}");
    }

    #[test]
    fn counts_and_unknown_tokens() {
        assert_eq!(count(1, "lock", "locks"), "1 lock");
        assert_eq!(count(0, "lock", "locks"), "0 locks");
        assert_eq!(count(2, "semaphore", "semaphores"), "2 semaphores");
        assert_eq!(token(0), "-");
        assert_eq!(token(7), "7");
    }

    #[test]
    fn show_a_free_lock() {
        assert_eq!(
            show("x", None, UNIX_EPOCH),
            "name:    x\nheld:    no\nwaiters: 0\n"
        );
    }
}
