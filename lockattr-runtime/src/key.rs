//! Lock names: the [`LockKey`] trait, and how a name becomes Redis keys.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

/// A value that names a lock.
///
/// `#[redis_lock]` without `name = ...` locks the name of its first argument
/// (`self` included) through this trait, and `name = <expr>` accepts any
/// expression whose value implements it.
///
/// Implemented for `str`, `String`, `Cow<str>`, every integer type (written in
/// decimal: `42` names the lock `"42"`), `char`, `bool`, and through
/// references, `Box`, `Rc` and `Arc`. Derive it for your own types with
/// `#[derive(LockKey)]`: `#[lock_key(prefix = "account")]` on the type and
/// `#[lock_key]` on each field that identifies the value; the name is the
/// prefix and the fields' names joined by `:` (`"account:42"`).
///
/// ```
/// use lockattr_runtime::LockKey;
///
/// assert_eq!(42_u64.lock_key(), "42");
/// assert_eq!("order:7".lock_key(), "order:7");
///
/// struct Seat { row: u32, number: u32 }
/// impl LockKey for Seat {
///     fn write_key(&self, out: &mut String) {
///         out.push_str("seat:");
///         self.row.write_key(out);
///         out.push(':');
///         self.number.write_key(out);
///     }
/// }
/// assert_eq!(Seat { row: 5, number: 12 }.lock_key(), "seat:5:12");
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot name a lock: it does not implement `LockKey`",
    label = "this value names the lock",
    note = "add `#[derive(LockKey)]` to the type (with `#[lock_key]` on its identifying fields), \
            or give the lock an explicit name: `#[redis_lock(name = \"...\")]`"
)]
pub trait LockKey {
    /// Appends this value's lock name to `out`.
    fn write_key(&self, out: &mut String);

    /// This value's lock name.
    ///
    /// ```
    /// # use lockattr_runtime::LockKey;
    /// assert_eq!('x'.lock_key(), "x");
    /// ```
    fn lock_key(&self) -> String {
        let mut out = String::new();
        self.write_key(&mut out);
        out
    }
}

impl LockKey for str {
    fn write_key(&self, out: &mut String) {
        out.push_str(self);
    }
}

impl LockKey for String {
    fn write_key(&self, out: &mut String) {
        out.push_str(self);
    }
}

impl LockKey for Cow<'_, str> {
    fn write_key(&self, out: &mut String) {
        out.push_str(self);
    }
}

impl LockKey for char {
    fn write_key(&self, out: &mut String) {
        out.push(*self);
    }
}

impl LockKey for bool {
    fn write_key(&self, out: &mut String) {
        out.push_str(if *self { "true" } else { "false" });
    }
}

macro_rules! int_keys {
    ($($t:ty)*) => {$(
        impl LockKey for $t {
            fn write_key(&self, out: &mut String) {
                // Writing to a String cannot fail.
                let _ = write!(out, "{self}");
            }
        }
    )*};
}
int_keys!(u8 u16 u32 u64 u128 usize i8 i16 i32 i64 i128 isize);

macro_rules! pointer_keys {
    ($($(#[$m:meta])* [$($g:tt)*] $t:ty;)*) => {$(
        impl<$($g)*> LockKey for $t {
            fn write_key(&self, out: &mut String) {
                (**self).write_key(out);
            }
        }
    )*};
}
pointer_keys! {
    [T: LockKey + ?Sized] &T;
    [T: LockKey + ?Sized] &mut T;
    [T: LockKey + ?Sized] Box<T>;
    [T: LockKey + ?Sized] Rc<T>;
    [T: LockKey + ?Sized] Arc<T>;
}

/// The Redis keys of one lock, and how long its fencing counter outlives
/// a lease.
///
/// The lock key is `<prefix>{<name>}` and every other key of the lock is
/// `<prefix>{<name>}:<suffix>`, so that all of them hash to one Redis Cluster
/// slot (the part between the braces is the hash tag). A `}` inside the name
/// would end the hash tag early, so the name is escaped first: `\` becomes
/// `\\` and `}` becomes `\x7d`. The escape is reversible, so two different
/// names never share a key.
#[derive(Debug, Clone)]
pub(crate) struct Keys {
    /// `<prefix>{<escaped name>}`: holds the owner's token while locked.
    pub(crate) lock: String,
    /// `<prefix>{<escaped name>}:fence`: the lock's fencing counter. It
    /// expires [`fence_retention`](Self::fence_retention) after the lease it
    /// was last incremented for (or after the release); a new counter
    /// starts from the server's clock, so tokens keep increasing across
    /// its expiry (see `scripts::next_fence_lua`).
    pub(crate) fence: String,
    /// `<prefix>{<escaped name>}:queue`: the tokens of the waiters, oldest
    /// first. Redis deletes it when it is empty.
    pub(crate) queue: String,
    /// `<prefix>{<escaped name>}:waiters`: each queued token's deadline,
    /// lease, when it was queued and its holder record (`<deadline
    /// ms>:<lease ms>:<queued ms>:<holder>`). Redis deletes it when it is
    /// empty.
    pub(crate) waiters: String,
    /// `<prefix>{<escaped name>}:wake`: the pub/sub channel on which a
    /// release names the waiter it handed the lock to.
    pub(crate) channel: String,
    /// How long the fencing counter stays after a lease ended (the
    /// Locker's `fence_retention`): every script that writes the counter
    /// sets its expiry from this.
    pub(crate) fence_retention: Duration,
    /// Who takes the lock (`<host>\n<pid>\n<label>`), recorded with it.
    pub(crate) holder: Arc<str>,
    /// How long a release lets newcomers take the lock while the oldest
    /// waiter has waited less than that (the Locker's
    /// [`Fairness`](crate::Fairness)); zero: every release hands the lock to
    /// the oldest waiter.
    pub(crate) barge: Duration,
    /// A semaphore's number of permits (its `lock` is then the key of the
    /// permit held); 0 for a lock.
    pub(crate) permits: u32,
    /// A read-write lock's side and keys (its `lock` is then the key the
    /// holder holds: the writer's, or the reader's own); `None` otherwise.
    pub(crate) rw: Option<crate::backend::rwlock::RwKeys>,
}

impl Keys {
    /// The kind's index of its holders that a renewal of this hold updates
    /// (a read-write lock's readers, for a reader); the holder key itself
    /// when the kind keeps none.
    pub(crate) fn index(&self) -> &str {
        self.rw
            .as_ref()
            .and_then(|rw| rw.index())
            .unwrap_or(&self.lock)
    }

    pub(crate) fn new(prefix: &str, name: &str, fence_retention: Duration) -> Keys {
        let mut lock = String::with_capacity(prefix.len() + name.len() + 2);
        lock.push_str(prefix);
        lock.push('{');
        for c in name.chars() {
            match c {
                '\\' => lock.push_str("\\\\"),
                '}' => lock.push_str("\\x7d"),
                c => lock.push(c),
            }
        }
        lock.push('}');
        Keys {
            fence: format!("{lock}:fence"),
            queue: format!("{lock}:queue"),
            waiters: format!("{lock}:waiters"),
            channel: format!("{lock}:wake"),
            lock,
            fence_retention,
            holder: Arc::from(""),
            barge: Duration::ZERO,
            permits: 0,
            rw: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The hash tag Redis Cluster uses for a key (the whole key when none).
    fn hash_tag(key: &str) -> &str {
        if let Some(open) = key.find('{')
            && let Some(len) = key[open + 1..].find('}')
            && len > 0
        {
            return &key[open + 1..open + 1 + len];
        }
        key
    }

    #[test]
    fn keys_of_one_lock_share_a_hash_tag() {
        for name in ["order:7", "}", "a}b", "{x}", "\\}", "naïve 名前", "a b\nc"] {
            let keys = Keys::new("lockattr:", name, Duration::ZERO);
            assert_eq!(hash_tag(&keys.lock), hash_tag(&keys.fence), "{name:?}");
            assert_ne!(hash_tag(&keys.lock), keys.lock, "{name:?} has no hash tag");
        }
    }

    #[test]
    fn escaping_keeps_names_apart() {
        let names = ["}", "\\x7d", "\\}", "\\\\x7d", "a", "a}", "a\\x7d"];
        let mut keys: Vec<String> = names
            .iter()
            .map(|n| Keys::new("p:", n, Duration::ZERO).lock)
            .collect();
        keys.sort();
        keys.dedup();
        assert_eq!(keys.len(), names.len());
    }

    #[test]
    fn plain_names_are_readable() {
        assert_eq!(
            Keys::new("lockattr:", "order:7", Duration::ZERO).lock,
            "lockattr:{order:7}"
        );
        assert_eq!(
            Keys::new("lockattr:", "order:7", Duration::ZERO).fence,
            "lockattr:{order:7}:fence"
        );
    }

    #[test]
    fn std_types_name_locks() {
        assert_eq!(42_u8.lock_key(), "42");
        assert_eq!((-7_i64).lock_key(), "-7");
        assert_eq!(true.lock_key(), "true");
        assert_eq!(Arc::new(String::from("a")).lock_key(), "a");
        assert_eq!((&&"b").lock_key(), "b");
        assert_eq!(Box::new(9_u128).lock_key(), "9");
        assert_eq!(Rc::new('c').lock_key(), "c");
    }
}
