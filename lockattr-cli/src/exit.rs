//! Exit codes and the error printed before exiting with code 2.

use std::fmt;
use std::process::ExitCode;

/// How a command ended, when it did not fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Done: exit code 0.
    Ok,
    /// The lock was not held (`show`, `unlock` of a free lock): exit code 1.
    NotFound,
}

impl Exit {
    /// The process exit code.
    pub fn code(self) -> u8 {
        match self {
            Exit::Ok => 0,
            Exit::NotFound => 1,
        }
    }
}

impl From<Exit> for ExitCode {
    fn from(exit: Exit) -> ExitCode {
        ExitCode::from(exit.code())
    }
}

/// Exit code of a [`Failure`]: an error, bad arguments included.
pub const ERROR_CODE: u8 = 2;

/// A command failed: printed on stderr as `lockattr: <message>`, exit code 2.
#[derive(Debug)]
pub struct Failure {
    message: String,
}

impl Failure {
    /// A failure with this message.
    pub fn new(message: impl Into<String>) -> Failure {
        Failure {
            message: message.into(),
        }
    }

    /// Arguments that clap accepted but that do not go together.
    pub fn usage(message: impl Into<String>) -> Failure {
        Failure::new(message)
    }

    /// Standard output or standard input failed.
    pub fn io(what: &str, err: std::io::Error) -> Failure {
        Failure::new(format!("cannot {what}: {err}"))
    }

    /// The line printed on stderr, with every secret in `secrets` replaced
    /// by `***` (the runtime's messages never hold a password; this is a
    /// second line of defence for text quoted from elsewhere).
    pub fn line(&self, secrets: &[String]) -> String {
        format!("lockattr: {}", redact(&self.message, secrets))
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl From<lockattr_runtime::LockError> for Failure {
    fn from(err: lockattr_runtime::LockError) -> Failure {
        Failure::new(err.to_string())
    }
}

/// `text` with every occurrence of each secret replaced by `***`.
pub fn redact(text: &str, secrets: &[String]) -> String {
    let mut text = text.to_owned();
    for secret in secrets {
        if !secret.is_empty() {
            text = text.replace(secret.as_str(), "***");
        }
    }
    text
}

/// The passwords in `urls` (`scheme://[user]:password@host...`), as written
/// and percent-decoded, so that no message can show them.
pub fn secrets<'a>(urls: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let mut found = Vec::new();
    for url in urls {
        let Some((_, rest)) = url.split_once("://") else {
            continue;
        };
        // The authority ends at the first `/`, `?` or `#`; the user info at
        // its last `@`.
        let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
        let Some((userinfo, _)) = authority.rsplit_once('@') else {
            continue;
        };
        let Some((_, password)) = userinfo.split_once(':') else {
            continue;
        };
        for secret in [password.to_owned(), percent_decode(password)] {
            if !secret.is_empty() && !found.contains(&secret) {
                found.push(secret);
            }
        }
    }
    // Longest first: a secret that contains another is replaced whole.
    found.sort_by_key(|s| std::cmp::Reverse(s.len()));
    found
}

/// `%XX` escapes decoded (invalid ones kept as they are).
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| char::from(b).to_digit(16);
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let (Some(hi), Some(lo)) = (hex(bytes[i + 1]), hex(bytes[i + 2]))
        {
            out.push((hi * 16 + lo) as u8);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes() {
        assert_eq!(Exit::Ok.code(), 0);
        assert_eq!(Exit::NotFound.code(), 1);
        assert_eq!(ERROR_CODE, 2);
    }

    #[test]
    fn failure_line_is_prefixed() {
        assert_eq!(Failure::new("boom").line(&[]), "lockattr: boom");
    }

    #[test]
    fn passwords_are_found_in_urls() {
        assert_eq!(secrets(["redis://:s3cret@host:6379/0"]), ["s3cret"]);
        assert_eq!(secrets(["rediss://user:pw@host/"]), ["pw"]);
        assert_eq!(
            secrets(["redis://u:p%40ss@h/"]),
            ["p%40ss".to_owned(), "p@ss".to_owned()]
        );
        // An `@` in the password, unescaped: the user info ends at the last `@`.
        assert_eq!(secrets(["redis://:a@b@h/"]), ["a@b"]);
        assert!(secrets(["redis://h:6379/", "redis://user@h/", "unix:///tmp/r.sock"]).is_empty());
        assert!(secrets(["redis://h/path@x"]).is_empty());
    }

    #[test]
    fn secrets_are_redacted() {
        let secrets = secrets(["redis://:pw@h/", "redis://:longpw@h/"]);
        assert_eq!(
            Failure::new("auth pw failed, longpw too").line(&secrets),
            "lockattr: auth *** failed, *** too"
        );
    }

    #[test]
    fn percent_decoding() {
        assert_eq!(percent_decode("a%20b%2"), "a b%2");
        assert_eq!(percent_decode("%zz%41"), "%zzA");
        assert_eq!(percent_decode("%"), "%");
    }
}
