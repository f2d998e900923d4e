//! `mode = "read"` / `mode = "write"`: the function takes one side of a
//! read-write lock named by `name` instead of a lock.
//!
//! Input: `#[redis_lock(name = "catalog", mode = "read")]`. Output: the same
//! expansion as a lock's, with `acquire_read(locker, name, options)` (or
//! `acquire_write`, or their `_blocking` forms for a sync function) in place
//! of `acquire`.
//!
//! The value is a string literal, so the side is chosen at compile time; a
//! near miss (`"Read"`, `"shared"`, `"exclusive"`, `"w"`) is refused with
//! the value meant. Refused with `mode`: `permits` (a semaphore has no read
//! side), several names (`name = [..]`: a set is locked exclusively, name by
//! name), and `reentrant` on (a read-write hold is never re-entered).

use proc_macro2::{Span, TokenStream};
use quote::quote;
use syn::{Expr, ExprLit, ExprPath, Ident, Lit};

/// Which side of a read-write lock the function takes.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum RwMode {
    /// Shared with other readers, never with a writer.
    Read,
    /// Held alone: no reader, no other writer.
    Write,
}

impl RwMode {
    fn as_str(self) -> &'static str {
        match self {
            RwMode::Read => "read",
            RwMode::Write => "write",
        }
    }
}

/// The two modes, for messages.
const CHOICES: &str = "`mode = \"read\"` (held together with other readers, never with a writer) \
                       or `mode = \"write\"` (held alone)";

/// The value of `mode = ...`, and the option as written (`mode = "read"`)
/// for errors about what it cannot go with.
pub(crate) struct ModeArg {
    pub(crate) mode: RwMode,
    written: TokenStream,
}

impl ModeArg {
    /// `mode = "read"` or `mode = "write"`: a string literal.
    pub(crate) fn parse(key: &Ident, value: Expr) -> syn::Result<ModeArg> {
        let written = quote!(#key = #value);
        match &value {
            Expr::Lit(ExprLit {
                lit: Lit::Str(lit), ..
            }) => match lit.value().as_str() {
                "read" => Ok(ModeArg {
                    mode: RwMode::Read,
                    written,
                }),
                "write" => Ok(ModeArg {
                    mode: RwMode::Write,
                    written,
                }),
                other => Err(syn::Error::new(lit.span(), unknown(other))),
            },
            _ => {
                // `mode = read`, `mode = Shared`, `mode = RwMode::Read`: the
                // word is right or close, only the quotes are missing.
                let meant = match &value {
                    Expr::Path(ExprPath {
                        path, qself: None, ..
                    }) => path
                        .segments
                        .last()
                        .and_then(|s| suggest(&s.ident.to_string())),
                    _ => None,
                };
                let message = match meant {
                    Some(meant) => format!(
                        "`mode` takes a string literal, chosen at compile time: `mode = \"{}\"`",
                        meant.as_str()
                    ),
                    None => {
                        format!("`mode` takes a string literal, chosen at compile time: {CHOICES}")
                    }
                };
                Err(syn::Error::new_spanned(&value, message))
            }
        }
    }
}

/// The error for `mode` without a value, at the key.
pub(crate) fn needs_value(key: &Ident) -> syn::Error {
    syn::Error::new(key.span(), format!("`mode` needs a side: {CHOICES}"))
}

/// The error for a string that is not a mode, with the one meant when it is
/// a near miss.
fn unknown(value: &str) -> String {
    match suggest(value) {
        Some(meant) => {
            let meant = meant.as_str();
            format!(
                "unknown `mode` \"{value}\"; did you mean `mode = \"{meant}\"`? The modes are \
                 {CHOICES}"
            )
        }
        None if is_both(value) => format!(
            "unknown `mode` \"{value}\": `mode` picks the side of the read-write lock this \
             function takes; use {CHOICES}"
        ),
        None => format!("unknown `mode` \"{value}\"; use {CHOICES}"),
    }
}

/// `"rw"`, `"read-write"`: the kind of lock, not a side of it.
fn is_both(value: &str) -> bool {
    matches!(
        normalized(value).as_str(),
        "rw" | "readwrite" | "rwlock" | "readwritelock"
    )
}

/// Lower case, letters and digits only: `"Read-Only"` is `"readonly"`.
fn normalized(value: &str) -> String {
    value
        .chars()
        .filter(|c| c.is_alphanumeric())
        .flat_map(char::to_lowercase)
        .collect()
}

/// The mode meant by a near miss: another case, a synonym, an abbreviation,
/// or a typo (at most two edits from "read" or "write").
fn suggest(value: &str) -> Option<RwMode> {
    let word = normalized(value);
    const READ: &[&str] = &[
        "read", "r", "rd", "reader", "readers", "reading", "reads", "shared", "share", "sh", "s",
        "ro", "readonly", "readlock", "readside", "readmode",
    ];
    const WRITE: &[&str] = &[
        "write",
        "w",
        "wr",
        "writer",
        "writers",
        "writing",
        "writes",
        "exclusive",
        "excl",
        "ex",
        "x",
        "writelock",
        "writeside",
        "writemode",
        "unique",
        "mut",
        "mutable",
    ];
    if READ.contains(&word.as_str()) {
        return Some(RwMode::Read);
    }
    if WRITE.contains(&word.as_str()) {
        return Some(RwMode::Write);
    }
    let (read, write) = (edits(&word, "read"), edits(&word, "write"));
    match (read <= 2, write <= 2) {
        (true, false) => Some(RwMode::Read),
        (false, true) => Some(RwMode::Write),
        (true, true) if read < write => Some(RwMode::Read),
        (true, true) if write < read => Some(RwMode::Write),
        _ => None,
    }
}

/// The Levenshtein distance between two short words.
fn edits(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut previous = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let current = row[j + 1];
            row[j + 1] = if ca == *cb {
                previous
            } else {
                1 + previous.min(current).min(row[j])
            };
            previous = current;
        }
    }
    row[b.len()]
}

/// Refuses what does not go with `mode`: `permits`, several names, and
/// `reentrant` (on).
pub(crate) fn check(
    mode: &ModeArg,
    permits: bool,
    set: bool,
    reentrant: Option<&(bool, TokenStream)>,
    push: &mut dyn FnMut(syn::Error),
) {
    if permits {
        push(syn::Error::new_spanned(
            &mode.written,
            "`mode` cannot go with `permits`: a semaphore has no read side, every holder takes \
             one of its permits; remove `mode` for a semaphore, or `permits` for a read-write lock",
        ));
    }
    if set {
        push(syn::Error::new_spanned(
            &mode.written,
            "`mode` is not supported with several names (`name = [..]`): a set takes every name \
             as an exclusive lock, in one step, and has no read side; lock the set without `mode`, \
             or take each name's read-write lock in an annotated function of its own, nesting \
             the calls in the same order everywhere",
        ));
    }
    if let Some((true, written)) = reentrant {
        push(syn::Error::new_spanned(
            written,
            "`reentrant` cannot go with `mode`: a read-write hold is never re-entered, a nested \
             call takes a hold of its own, so a writer's nested read (or write) of its own name \
             would wait on itself until `acquire_time` ends; remove `reentrant`, and call an \
             un-annotated function from the locked body instead of locking the name again",
        ));
    }
}

/// The call that takes the read or the write side.
///
/// Input: `mode = "read"` on an `async fn`. Output:
/// `::lockattr::__private::acquire_read(locker, name, options).await`.
pub(crate) fn acquire(
    is_async: bool,
    mode: RwMode,
    (locker, name): (&TokenStream, &TokenStream),
    options: &TokenStream,
) -> TokenStream {
    let name = quote!(::core::convert::AsRef::<str>::as_ref(&#name));
    let function = match (mode, is_async) {
        (RwMode::Read, true) => "acquire_read",
        (RwMode::Read, false) => "acquire_read_blocking",
        (RwMode::Write, true) => "acquire_write",
        (RwMode::Write, false) => "acquire_write_blocking",
    };
    let function = Ident::new(function, Span::call_site());
    let call = quote!(::lockattr::__private::#function(#locker, #name, #options));
    if is_async { quote!(#call.await) } else { call }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(value: &str) -> Result<RwMode, String> {
        let key: Ident = syn::parse_quote!(mode);
        let value: Expr = syn::parse_str(value).unwrap();
        ModeArg::parse(&key, value)
            .map(|m| m.mode)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn the_two_modes_parse() {
        assert_eq!(parse("\"read\""), Ok(RwMode::Read));
        assert_eq!(parse("\"write\""), Ok(RwMode::Write));
    }

    #[test]
    fn near_misses_name_the_mode_meant() {
        for (value, meant) in [
            ("\"Read\"", "read"),
            ("\"READ\"", "read"),
            ("\"shared\"", "read"),
            ("\"r\"", "read"),
            ("\"read-only\"", "read"),
            ("\"raed\"", "read"),
            ("\"exclusive\"", "write"),
            ("\"w\"", "write"),
            ("\"Write\"", "write"),
            ("\"wirte\"", "write"),
            ("\"writer\"", "write"),
        ] {
            let e = parse(value).unwrap_err();
            assert!(
                e.contains(&format!("did you mean `mode = \"{meant}\"`")),
                "{value}: {e}"
            );
        }
    }

    #[test]
    fn other_strings_list_the_modes() {
        let e = parse("\"sideways\"").unwrap_err();
        assert!(e.starts_with("unknown `mode` \"sideways\"; use"), "{e}");
        assert!(!e.contains("did you mean"), "{e}");
        let e = parse("\"rw\"").unwrap_err();
        assert!(e.contains("picks the side"), "{e}");
        let e = parse("\"\"").unwrap_err();
        assert!(e.contains("unknown `mode` \"\""), "{e}");
    }

    #[test]
    fn values_that_are_not_strings_are_refused() {
        let e = parse("read").unwrap_err();
        assert!(e.contains("`mode = \"read\"`"), "{e}");
        let e = parse("Exclusive").unwrap_err();
        assert!(e.contains("`mode = \"write\"`"), "{e}");
        let e = parse("RwMode::Read").unwrap_err();
        assert!(e.contains("`mode = \"read\"`"), "{e}");
        for value in ["1", "MODE", "true", "b\"read\"", "'r'"] {
            let e = parse(value).unwrap_err();
            assert!(e.contains("takes a string literal"), "{value}: {e}");
        }
    }

    #[test]
    fn the_acquire_call_follows_mode_and_asyncness() {
        let (locker, name, options) = (quote!(l), quote!(n), quote!(o));
        let call = |is_async, mode| {
            acquire(is_async, mode, (&locker, &name), &options)
                .to_string()
                .replace(' ', "")
        };
        assert!(call(true, RwMode::Read).contains("__private::acquire_read(l,"));
        assert!(call(true, RwMode::Read).ends_with(".await"));
        assert!(call(false, RwMode::Read).contains("__private::acquire_read_blocking(l,"));
        assert!(call(true, RwMode::Write).contains("__private::acquire_write(l,"));
        assert!(call(false, RwMode::Write).contains("__private::acquire_write_blocking(l,"));
        assert!(!call(false, RwMode::Write).ends_with(".await"));
    }

    #[test]
    fn distance() {
        assert_eq!(edits("read", "read"), 0);
        assert_eq!(edits("raed", "read"), 2);
        assert_eq!(edits("writ", "write"), 1);
        assert_eq!(edits("", "read"), 4);
    }
}
