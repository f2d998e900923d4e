//! Lock names: the [`LockKey`] trait, and how a name becomes Redis keys.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::rc::Rc;
use std::sync::Arc;

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
/// prefix and the fields' names joined by `:` (`"account:42"`), each
/// field's `\` and `:` escaped as `\\` and `\:` so that different values
/// never write the same name. Without `prefix`, the prefix is the type's
/// path (`module_path!()`, `::` and its name). A hand-written `write_key`
/// that joins parts should escape them likewise.
///
/// ```
/// # use lockattr_runtime as lockattr; // the doctest builds without the facade
/// use lockattr::LockKey;
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

#[cfg(test)]
mod tests {
    use super::*;

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
