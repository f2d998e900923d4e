//! A lock as the commands show it, in plain values (the runtime's
//! `LockInfo` is `#[non_exhaustive]`: only the runtime can make one), and
//! its JSON form.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;

/// A held lock.
#[derive(Debug, Clone, PartialEq)]
pub struct LockView {
    /// The lock's name (not the Redis key).
    pub name: String,
    /// Time left of the lease.
    pub ttl: Duration,
    /// The holder's fencing token.
    pub fencing_token: u64,
    /// Callers queued for the lock.
    pub waiters: usize,
    /// Who holds it, when recorded.
    pub holder: Option<HolderView>,
}

/// Who holds a lock.
#[derive(Debug, Clone, PartialEq)]
pub struct HolderView {
    /// The holder's host name.
    pub host: String,
    /// The holder's process id.
    pub pid: u32,
    /// The holder's label (by default its executable's name).
    pub label: String,
    /// When it acquired the lock, by the Redis clock.
    pub since: SystemTime,
}

/// The JSON object of one lock (`show --json`, the items of `ls --json`).
#[derive(Debug, Serialize)]
pub struct LockJson {
    /// The lock's name.
    pub name: String,
    /// Always `"lock"` (a read-write lock's object says `"read-write"`, a
    /// semaphore's `"semaphore"`).
    pub kind: &'static str,
    /// Whether it is held.
    pub held: bool,
    /// Milliseconds left of the lease; `null` when free.
    pub ttl_ms: Option<u64>,
    /// The holder's fencing token; `null` when free or not recorded.
    pub fencing_token: Option<u64>,
    /// Callers queued for it.
    pub waiters: usize,
    /// The holder; `null` when free or not recorded.
    pub holder: Option<HolderJson>,
}

/// The JSON object of a holder.
#[derive(Debug, Serialize)]
pub struct HolderJson {
    /// Host name.
    pub host: String,
    /// Process id.
    pub pid: u32,
    /// Label.
    pub label: String,
    /// Acquire time in Unix epoch milliseconds (Redis clock).
    pub since_ms: u64,
}

impl LockJson {
    /// A held lock.
    pub fn held(view: &LockView) -> LockJson {
        LockJson {
            name: view.name.clone(),
            kind: "lock",
            held: true,
            ttl_ms: Some(millis(view.ttl)),
            fencing_token: known(view.fencing_token),
            waiters: view.waiters,
            holder: view.holder.as_ref().map(|h| HolderJson {
                host: h.host.clone(),
                pid: h.pid,
                label: h.label.clone(),
                since_ms: epoch_millis(h.since),
            }),
        }
    }

    /// A free lock.
    pub fn free(name: &str) -> LockJson {
        LockJson {
            name: name.to_owned(),
            kind: "lock",
            held: false,
            ttl_ms: None,
            fencing_token: None,
            waiters: 0,
            holder: None,
        }
    }
}

/// One held permit of a semaphore.
#[derive(Debug, Clone, PartialEq)]
pub struct PermitView {
    /// The permit's index.
    pub permit: u32,
    /// Time left of the lease.
    pub ttl: Duration,
    /// The holder's fencing token (0: being handed over).
    pub fencing_token: u64,
    /// Who holds it, when recorded.
    pub holder: Option<HolderView>,
}

/// A semaphore in use.
#[derive(Debug, Clone, PartialEq)]
pub struct SemaphoreView {
    /// The semaphore's name.
    pub name: String,
    /// Its number of permits.
    pub permits: u32,
    /// The permits held, by index.
    pub holders: Vec<PermitView>,
    /// Callers queued for a permit.
    pub waiters: usize,
    /// The oldest of them (`since`: when each queued).
    pub waiting: Vec<HolderView>,
}

/// The JSON object of a semaphore (`show --json` of a semaphore, items of
/// `ls --json` with `"kind": "semaphore"`).
#[derive(Debug, Serialize)]
pub struct SemaphoreJson {
    /// The semaphore's name.
    pub name: String,
    /// Always `"semaphore"`.
    pub kind: &'static str,
    /// Whether a permit is held.
    pub held: bool,
    /// Its number of permits.
    pub permits: u32,
    /// How many are held.
    pub held_permits: usize,
    /// Callers queued for a permit.
    pub waiters: usize,
    /// The held permits.
    pub holders: Vec<PermitJson>,
    /// The oldest waiters (`since_ms`: when each queued).
    pub waiting: Vec<HolderJson>,
}

/// The JSON object of a held permit.
#[derive(Debug, Serialize)]
pub struct PermitJson {
    /// The permit's index.
    pub permit: u32,
    /// Milliseconds left of the lease.
    pub ttl_ms: u64,
    /// The holder's fencing token; `null` when not known (being handed
    /// over).
    pub fencing_token: Option<u64>,
    /// The holder; `null` when not recorded.
    pub holder: Option<HolderJson>,
}

impl HolderJson {
    /// The JSON of a holder.
    pub fn of(h: &HolderView) -> HolderJson {
        HolderJson {
            host: h.host.clone(),
            pid: h.pid,
            label: h.label.clone(),
            since_ms: epoch_millis(h.since),
        }
    }
}

impl SemaphoreJson {
    /// A semaphore in use.
    pub fn of(view: &SemaphoreView) -> SemaphoreJson {
        SemaphoreJson {
            name: view.name.clone(),
            kind: "semaphore",
            held: !view.holders.is_empty(),
            permits: view.permits,
            held_permits: view.holders.len(),
            waiters: view.waiters,
            holders: view
                .holders
                .iter()
                .map(|p| PermitJson {
                    permit: p.permit,
                    ttl_ms: millis(p.ttl),
                    fencing_token: known(p.fencing_token),
                    holder: p.holder.as_ref().map(HolderJson::of),
                })
                .collect(),
            waiting: view.waiting.iter().map(HolderJson::of).collect(),
        }
    }
}

/// One hold of a read-write lock: its writer's, or a reader's.
#[derive(Debug, Clone, PartialEq)]
pub struct HoldView {
    /// Time left of the lease.
    pub ttl: Duration,
    /// The fencing token (a reader's: the last write's).
    pub fencing_token: u64,
    /// Who holds it, when recorded.
    pub holder: Option<HolderView>,
}

/// A held read-write lock.
#[derive(Debug, Clone, PartialEq)]
pub struct RwView {
    /// The read-write lock's name.
    pub name: String,
    /// Its writer, when one holds it.
    pub writer: Option<HoldView>,
    /// Its readers.
    pub readers: Vec<HoldView>,
    /// Callers queued for either side.
    pub waiters: usize,
}

/// The JSON object of a read-write lock (`show --json` of one, items of
/// `ls --json` with `"kind": "read-write"`).
#[derive(Debug, Serialize)]
pub struct RwJson {
    /// The read-write lock's name.
    pub name: String,
    /// Always `"read-write"`.
    pub kind: &'static str,
    /// Always true (a free read-write lock is not shown).
    pub held: bool,
    /// Callers queued for either side.
    pub waiters: usize,
    /// The writer; `null` when none holds it.
    pub writer: Option<HoldJson>,
    /// The readers.
    pub readers: Vec<HoldJson>,
}

/// The JSON object of a writer or a reader.
#[derive(Debug, Serialize)]
pub struct HoldJson {
    /// Milliseconds left of the lease.
    pub ttl_ms: u64,
    /// The fencing token (a reader's: the last write's); `null` when none
    /// is known (a reader before any write).
    pub fencing_token: Option<u64>,
    /// The holder; `null` when not recorded.
    pub holder: Option<HolderJson>,
}

impl RwJson {
    /// A held read-write lock.
    pub fn of(view: &RwView) -> RwJson {
        let hold = |h: &HoldView| HoldJson {
            ttl_ms: millis(h.ttl),
            fencing_token: known(h.fencing_token),
            holder: h.holder.as_ref().map(HolderJson::of),
        };
        RwJson {
            name: view.name.clone(),
            kind: "read-write",
            held: true,
            waiters: view.waiters,
            writer: view.writer.as_ref().map(hold),
            readers: view.readers.iter().map(hold).collect(),
        }
    }
}

/// An item of `ls --json`: a lock's object, a read-write lock's or a
/// semaphore's.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum ItemJson {
    /// A lock.
    Lock(LockJson),
    /// A read-write lock.
    ReadWrite(RwJson),
    /// A semaphore.
    Semaphore(SemaphoreJson),
}

/// A fencing token, `None` for 0 (none known), as text shows it `-`.
pub fn known(fencing_token: u64) -> Option<u64> {
    (fencing_token != 0).then_some(fencing_token)
}

/// Whole milliseconds of `d`, saturating.
pub fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Milliseconds since the Unix epoch (0 for an earlier time).
pub fn epoch_millis(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map(millis).unwrap_or(0)
}

/// `value` as one line of JSON.
pub fn to_json<T: Serialize + ?Sized>(value: &T) -> String {
    // Serializing these plain structs cannot fail: no maps with non-string
    // keys, no failing Serialize impls.
    serde_json::to_string(value).expect("JSON of plain values")
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use serde_json::{Value, json};

    /// A held lock for the tests.
    pub(crate) fn held(name: &str, token: u64) -> LockView {
        LockView {
            name: name.into(),
            ttl: Duration::from_millis(9_500),
            fencing_token: token,
            waiters: 2,
            holder: Some(HolderView {
                host: "web-1".into(),
                pid: 4242,
                label: "billing".into(),
                since: UNIX_EPOCH + Duration::from_millis(1_700_000_000_123),
            }),
        }
    }

    #[test]
    fn held_lock_json_has_exactly_the_documented_fields() {
        let value: Value = serde_json::from_str(&to_json(&LockJson::held(&held("order:7", 42))))
            .expect("valid JSON");
        assert_eq!(
            value,
            json!({
                "name": "order:7",
                "kind": "lock",
                "held": true,
                "ttl_ms": 9500,
                "fencing_token": 42,
                "waiters": 2,
                "holder": {"host": "web-1", "pid": 4242, "label": "billing", "since_ms": 1_700_000_000_123_u64},
            })
        );
    }

    #[test]
    fn unknown_holder_is_null() {
        let mut view = held("x", 1);
        view.holder = None;
        let value: Value = serde_json::from_str(&to_json(&LockJson::held(&view))).unwrap();
        assert_eq!(value["holder"], Value::Null);
        assert_eq!(value["held"], true);
    }

    #[test]
    fn free_lock_json() {
        let value: Value = serde_json::from_str(&to_json(&LockJson::free("x"))).unwrap();
        assert_eq!(
            value,
            json!({"name": "x", "kind": "lock", "held": false, "ttl_ms": null, "fencing_token": null, "waiters": 0, "holder": null})
        );
    }

    #[test]
    fn large_fencing_tokens_are_exact() {
        // Counters start at the Redis server's time in microseconds.
        let token = 1_700_000_000_123_456_u64;
        let value: Value =
            serde_json::from_str(&to_json(&LockJson::held(&held("x", token)))).unwrap();
        assert_eq!(value["fencing_token"].as_u64(), Some(token));
    }

    /// A semaphore of 3 permits, 2 held, 1 waiting, for the tests.
    pub(crate) fn semaphore(name: &str) -> SemaphoreView {
        let who = held("x", 1).holder.unwrap();
        SemaphoreView {
            name: name.into(),
            permits: 3,
            holders: vec![
                PermitView {
                    permit: 0,
                    ttl: Duration::from_millis(9_500),
                    fencing_token: 41,
                    holder: Some(who.clone()),
                },
                PermitView {
                    permit: 2,
                    ttl: Duration::from_millis(1_200),
                    fencing_token: 43,
                    holder: None,
                },
            ],
            waiters: 1,
            waiting: vec![who],
        }
    }

    #[test]
    fn semaphore_json_has_exactly_the_documented_fields() {
        let value: Value =
            serde_json::from_str(&to_json(&SemaphoreJson::of(&semaphore("gpu")))).unwrap();
        let who = json!({"host": "web-1", "pid": 4242, "label": "billing", "since_ms": 1_700_000_000_123_u64});
        assert_eq!(
            value,
            json!({
                "name": "gpu",
                "kind": "semaphore",
                "held": true,
                "permits": 3,
                "held_permits": 2,
                "waiters": 1,
                "holders": [
                    {"permit": 0, "ttl_ms": 9500, "fencing_token": 41, "holder": who},
                    {"permit": 2, "ttl_ms": 1200, "fencing_token": 43, "holder": null},
                ],
                "waiting": [who],
            })
        );
    }

    /// A read-write lock read by two readers, one waiting, for the tests.
    pub(crate) fn read_write(name: &str) -> RwView {
        let who = held("x", 1).holder;
        RwView {
            name: name.into(),
            writer: None,
            readers: vec![
                HoldView {
                    ttl: Duration::from_millis(9_500),
                    fencing_token: 41,
                    holder: who,
                },
                HoldView {
                    ttl: Duration::from_millis(1_200),
                    fencing_token: 41,
                    holder: None,
                },
            ],
            waiters: 1,
        }
    }

    #[test]
    fn read_write_json_has_exactly_the_documented_fields() {
        let mut rw = read_write("catalog");
        rw.readers.truncate(1);
        let value: Value = serde_json::from_str(&to_json(&RwJson::of(&rw))).unwrap();
        let who = json!({"host": "web-1", "pid": 4242, "label": "billing", "since_ms": 1_700_000_000_123_u64});
        assert_eq!(
            value,
            json!({
                "name": "catalog",
                "kind": "read-write",
                "held": true,
                "waiters": 1,
                "writer": null,
                "readers": [{"ttl_ms": 9500, "fencing_token": 41, "holder": who}],
            })
        );
    }

    #[test]
    fn epoch_millis_saturates_before_the_epoch() {
        assert_eq!(epoch_millis(UNIX_EPOCH - Duration::from_secs(1)), 0);
        assert_eq!(epoch_millis(UNIX_EPOCH + Duration::from_micros(1_999)), 1);
    }
}
