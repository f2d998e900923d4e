//! `lockattr`: the operator's command for the Redis locks of
//! [lockattr](https://docs.rs/lockattr): list them, look at one, watch them
//! live, and free one whose holder is gone.
//!
//! ```text
//! cargo install lockattr-cli
//!
//! lockattr ls 'order:*'            # NAME, KIND, HOLDER, SINCE, TTL, WAITERS, FENCE
//! lockattr show order:7 --json     # one lock: holder, lease left, fencing token, waiters
//! lockattr watch --interval 0.5    # a live table with hand-overs per second
//! lockattr unlock order:7          # asks first; --force does not
//! ```
//!
//! Every command takes:
//!
//! - `--url URL`: the Redis server (default: the `REDIS_URL` environment
//!   variable, then `redis://127.0.0.1:6379/`). With `--cluster`, the URLs
//!   are seed nodes of a Redis Cluster, and `--url` may be given several
//!   times.
//! - `--prefix P`: the key prefix of the application's `Locker` (default
//!   `lockattr:`).
//!
//! `ls`, `show` and `watch` print JSON with `--json`: `show` one object with
//! the fields `name`, `held`, `ttl_ms`, `fencing_token`, `waiters` and
//! `holder` (`host`, `pid`, `label`, `since_ms` in Unix epoch milliseconds,
//! or `null` when the holder's client did not record it); `ls` an array of
//! those objects; `watch` one line per refresh, `{"time_ms", "locks",
//! "error"}`, each lock with its `handovers_per_s`.
//!
//! Exit codes: 0 done, 1 not found (`show` or `unlock` of a free lock), 2
//! error (bad arguments, Redis unreachable, `unlock` without `--force` when
//! standard input is not a terminal). Errors go to stderr as
//! `lockattr: <message>`, never with the password of a URL.
//!
//! The tool reads and frees locks through the public API of
//! [`lockattr_runtime::Locker`] (`locks`, `inspect`, `force_unlock_if`), so it
//! sees what the library's own clients write.
#![forbid(unsafe_code)]

mod cli;
mod commands;
mod exit;
mod format;
mod view;
mod watch;

use std::process::ExitCode;

use clap::Parser;

use crate::cli::{Cli, URL_ENV};
use crate::exit::ERROR_CODE;

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    // Usage errors exit with code 2 (clap's own), `--help` with 0.
    let cli = Cli::parse();
    let env_url = std::env::var(URL_ENV).ok();
    let urls = cli.conn.urls(env_url.clone());
    let secrets = exit::secrets(urls.iter().map(String::as_str));
    let result = match cli.conn.target(env_url) {
        Ok(target) => commands::run(cli, target, &secrets).await,
        Err(failure) => Err(failure),
    };
    match result {
        Ok(exit) => exit.into(),
        Err(failure) => {
            eprintln!("{}", failure.line(&secrets));
            ExitCode::from(ERROR_CODE)
        }
    }
}
