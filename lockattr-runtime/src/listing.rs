//! What [`Locker::locks`](crate::Locker::locks) and
//! [`Locker::semaphores`](crate::Locker::semaphores) return: what they
//! found, and how many keys they skipped.

use crate::LockError;

/// The locks or semaphores a listing found, in name order, and the number
/// of keys under the Locker's prefix it skipped because lockattr did not
/// write them: a key whose name is not UTF-8, or one that holds another
/// type than lockattr's (a hash at a lock key, a list at a permit key).
/// Such a key never stops a listing.
///
/// It derefs to a slice of what was found, and iterates over it.
///
/// ```no_run
/// # use lockattr_runtime as lockattr;
/// # async fn run(locker: &lockattr::Locker) -> Result<(), lockattr::LockError> {
/// let found = locker.locks("order:*", 100).await?;
/// for info in &found {
///     println!("{} {:?}", info.name, info.ttl);
/// }
/// if found.skipped() > 0 {
///     println!("{} keys under the prefix were not lockattr's", found.skipped());
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listing<T> {
    found: Vec<T>,
    skipped: usize,
}

impl<T> Listing<T> {
    pub(crate) fn new(found: Vec<T>, skipped: usize) -> Self {
        Listing { found, skipped }
    }

    /// How many keys matching the pattern were skipped: keys under the
    /// prefix that lockattr did not write (a name that is not UTF-8, or
    /// another type at a lock or permit key).
    pub fn skipped(&self) -> usize {
        self.skipped
    }

    /// What was found, as a `Vec`.
    pub fn into_vec(self) -> Vec<T> {
        self.found
    }
}

impl<T> std::ops::Deref for Listing<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        &self.found
    }
}

impl<T> IntoIterator for Listing<T> {
    type Item = T;
    type IntoIter = std::vec::IntoIter<T>;

    fn into_iter(self) -> Self::IntoIter {
        self.found.into_iter()
    }
}

impl<'a, T> IntoIterator for &'a Listing<T> {
    type Item = &'a T;
    type IntoIter = std::slice::Iter<'a, T>;

    fn into_iter(self) -> Self::IntoIter {
        self.found.iter()
    }
}

/// Whether `name` matches the glob `pattern`, as Redis matches keys
/// (`*` any text, `?` one character, `[abc]`, `[^abc]`, `[a-z]` one of or
/// none of, `\` escapes the next character, inside a class too), character
/// by character. Linear backtracking: never exponential.
pub(crate) fn glob_matches(pattern: &str, name: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let n: Vec<char> = name.chars().collect();
    let (mut pi, mut ni) = (0, 0);
    // Where the last `*` was, and the name's position it last took up to.
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        let step = match p.get(pi) {
            Some('*') => {
                star = Some((pi, ni));
                pi += 1;
                continue;
            }
            Some('?') => Some(pi + 1),
            Some('[') => class(&p, pi, n[ni]),
            Some('\\') if pi + 1 < p.len() => (p[pi + 1] == n[ni]).then_some(pi + 2),
            Some(&c) => (c == n[ni]).then_some(pi + 1),
            None => None,
        };
        match step {
            Some(next) => {
                pi = next;
                ni += 1;
            }
            None => match star {
                Some((sp, sn)) => {
                    pi = sp + 1;
                    ni = sn + 1;
                    star = Some((sp, sn + 1));
                }
                None => return false,
            },
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

/// The class at `p[start]` (`[`) against `c`: the index after the class
/// when it matches. An unclosed class runs to the end of the pattern.
fn class(p: &[char], start: usize, c: char) -> Option<usize> {
    let mut i = start + 1;
    let negate = p.get(i) == Some(&'^');
    if negate {
        i += 1;
    }
    let mut matched = false;
    while i < p.len() && p[i] != ']' {
        let lo = if p[i] == '\\' && i + 1 < p.len() {
            i += 1;
            p[i]
        } else {
            p[i]
        };
        if p.get(i + 1) == Some(&'-') && i + 2 < p.len() && p[i + 2] != ']' {
            let mut hi_at = i + 2;
            if p[hi_at] == '\\' && hi_at + 1 < p.len() {
                hi_at += 1;
            }
            let hi = p[hi_at];
            let (lo, hi) = if lo <= hi { (lo, hi) } else { (hi, lo) };
            matched |= (lo..=hi).contains(&c);
            i = hi_at + 1;
        } else {
            matched |= lo == c;
            i += 1;
        }
    }
    let end = if i < p.len() { i + 1 } else { i };
    (matched != negate).then_some(end)
}

/// The literal text every name matching `pattern` starts with: the
/// pattern up to its first `*`, `?` or `[`, unescaped.
pub(crate) fn literal_start(pattern: &str) -> String {
    let mut out = String::new();
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        match c {
            '*' | '?' | '[' => break,
            '\\' => match chars.next() {
                Some(escaped) => out.push(escaped),
                None => out.push('\\'),
            },
            c => out.push(c),
        }
    }
    out
}

/// Whether `e`, met while reading one key a listing found, says that the
/// key holds what lockattr never writes there (another type: `WRONGTYPE`;
/// a value its scripts cannot read): the key is then skipped, not the
/// listing failed.
pub(crate) fn foreign(e: &LockError) -> bool {
    let LockError::Redis { source, .. } = e else {
        return false;
    };
    if let Some(err) = source.downcast_ref::<redis::RedisError>()
        && matches!(
            err.kind(),
            redis::ErrorKind::UnexpectedReturnType | redis::ErrorKind::Parse
        )
    {
        return true;
    }
    source.to_string().contains("WRONGTYPE")
}

/// The `SCAN MATCH` glob of the keys under `prefix` of every name that
/// matches the name glob `pattern` (and of some more: filter the names
/// with [`glob_matches`]): the prefix, and the spelling of the literal
/// text the names start with, taken literally; then `*`.
pub(crate) fn scan_pattern(prefix: &str, pattern: &str) -> String {
    let mut out = String::new();
    for c in prefix.chars() {
        glob_literal(&mut out, c);
    }
    out.push('{');
    for c in literal_start(pattern).chars() {
        match c {
            // As `Keys::new` spells them.
            '\\' => out.push_str("\\\\\\\\"),
            '}' => out.push_str("\\\\x7d"),
            c => glob_literal(&mut out, c),
        }
    }
    out.push('*');
    out
}

/// Appends `c` to a glob, as a literal.
pub(crate) fn glob_literal(out: &mut String, c: char) {
    if matches!(c, '*' | '?' | '[' | ']' | '\\') {
        out.push('\\');
    }
    out.push(c);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_names_as_redis_matches_keys() {
        for (pattern, name, expected) in [
            ("*", "", true),
            ("*", "anything", true),
            ("a?", "a}", true),
            ("a????", "a}", false),
            ("a[}]", "a}", true),
            ("a[^}]", "a}", false),
            ("a[^x]", "a}", true),
            ("b[\\\\]c", "b\\c", true),
            ("b\\\\c", "b\\c", true),
            ("b\\*", "b*", true),
            ("b\\*", "bx", false),
            ("order:*", "order:7", true),
            ("order:*", "orders", false),
            ("*:7", "order:7", true),
            ("*a*b*c", "xxaxxbxxc", true),
            ("*a*b*c", "xxaxxbxx", false),
            ("[a-c]x", "bx", true),
            ("[a-c]x", "dx", false),
            ("[c-a]x", "bx", true),
            ("名?", "名前", true),
            ("a[", "a", false),
            ("a\\", "a\\", true),
            ("?", "", false),
        ] {
            assert_eq!(
                glob_matches(pattern, name),
                expected,
                "{pattern:?} {name:?}"
            );
        }
        // No exponential backtracking.
        let long = "a".repeat(5000);
        assert!(!glob_matches(&("*a".repeat(50) + "b"), &long));
    }

    #[test]
    fn the_literal_start_ends_at_the_first_wildcard() {
        assert_eq!(literal_start("order:*"), "order:");
        assert_eq!(literal_start("a\\*b?"), "a*b");
        assert_eq!(literal_start("[ab]"), "");
        assert_eq!(literal_start("a}"), "a}");
        assert_eq!(literal_start("x\\"), "x\\");
    }

    #[test]
    fn the_scan_pattern_spells_the_literal_start_as_keys_do() {
        assert_eq!(scan_pattern("lockattr:", "*"), "lockattr:{*");
        assert_eq!(scan_pattern("lockattr:", "order:*"), "lockattr:{order:*");
        assert_eq!(scan_pattern("a*b:", "x?"), "a\\*b:{x*");
        assert_eq!(scan_pattern("p:", "a}b"), "p:{a\\\\x7db*");
        assert_eq!(scan_pattern("p:", "a\\\\b"), "p:{a\\\\\\\\b*");
        assert_eq!(scan_pattern("p:", "a\\*"), "p:{a\\**");
    }
}
