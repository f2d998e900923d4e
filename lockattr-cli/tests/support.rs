//! The CLI's test support: the workspace's redis-server processes and their
//! keyspace audit (the unpublished `lockattr-test-support` crate, shared
//! with the `lockattr` crate's tests), and a run of the binary under test.

#![allow(dead_code)] // not every helper is used by every test

use std::process::{Command, Stdio};
use std::time::Duration;

#[allow(unused_imports)] // not every helper is used by every test
pub use lockattr_test_support::{RedisServer, eventually, free_port, wait_child};

/// `lockattr --url <url> args...` (the binary under test, `REDIS_URL`
/// unset, within 30 s): exit code, stdout, stderr.
pub fn lockattr_at(url: &str, args: &[&str]) -> (i32, String, String) {
    let output = wait_child(
        Command::new(env!("CARGO_BIN_EXE_lockattr"))
            .arg("--url")
            .arg(url)
            .args(args)
            .env_remove("REDIS_URL")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start lockattr"),
        Duration::from_secs(30),
    );
    (
        output.status.code().expect("exit code"),
        String::from_utf8(output.stdout).expect("UTF-8 stdout"),
        String::from_utf8(output.stderr).expect("UTF-8 stderr"),
    )
}
