//! The command line: arguments (clap), and where they say to connect.

use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::exit::Failure;

/// The address used when neither `--url` nor `REDIS_URL` gives one.
pub const DEFAULT_URL: &str = "redis://127.0.0.1:6379/";

/// The environment variable read when no `--url` is given.
pub const URL_ENV: &str = "REDIS_URL";

/// `lockattr [OPTIONS] <COMMAND>`.
#[derive(Debug, Parser)]
#[command(
    name = "lockattr",
    version,
    about = "List, inspect, watch and force-unlock lockattr's Redis locks",
    long_about = "List, inspect, watch and force-unlock the Redis locks of lockattr \
                  (#[redis_lock] and lockattr::Locker).\n\n\
                  Semaphores show in `ls` and `show`; `unlock` frees one of their permits.\n\n\
                  Read-write locks show in `ls` and `show` (writer and readers); `unlock` frees \
                  their writer.\n\n\
                  Exit codes: 0 done, 1 not found (a free lock or semaphore), 2 error.",
    max_term_width = 100
)]
pub struct Cli {
    /// Where the locks are.
    #[command(flatten)]
    pub conn: Connection,

    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The options naming the Redis deployment and the Locker's key prefix.
#[derive(Debug, Args)]
pub struct Connection {
    /// Redis URL [default: $REDIS_URL, then redis://127.0.0.1:6379/]
    ///
    /// `redis://[[user]:password@]host[:port][/db]`, `rediss://...` (TLS), `unix:///path`.
    /// The password is never printed.
    #[arg(long = "url", value_name = "URL", global = true)]
    pub urls: Vec<String>,

    /// The URLs are seeds of a Redis Cluster (--url may then be given several times).
    #[arg(long, global = true)]
    pub cluster: bool,

    /// The key prefix of the Locker whose locks to read.
    #[arg(long, value_name = "P", global = true, default_value = lockattr_runtime::DEFAULT_PREFIX)]
    pub prefix: String,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// List held locks, read-write locks, then semaphores in use: NAME, KIND, HOLDER, SINCE, TTL, WAITERS, FENCE.
    Ls(LsArgs),
    /// Show one lock in detail, or the semaphore of that name (exit 1 when neither is held).
    Show(ShowArgs),
    /// Free a lock whoever holds it, or a semaphore's permit (asks first; exit 1 when free).
    Unlock(UnlockArgs),
    /// A live table of held locks with their waiters and hand-overs per second, then read-write locks and semaphores.
    Watch(WatchArgs),
}

/// `lockattr ls`.
#[derive(Debug, Args)]
pub struct LsArgs {
    /// Which lock names: a Redis glob (`*`, `?`, `[abc]`, `\` escapes), matched against the name.
    #[arg(default_value = "*")]
    pub pattern: String,

    /// List at most this many locks.
    #[arg(long, value_name = "N", default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..))]
    pub limit: u64,

    /// Print a JSON array of the objects `show --json` prints.
    #[arg(long)]
    pub json: bool,
}

/// `lockattr show`.
#[derive(Debug, Args)]
pub struct ShowArgs {
    /// The lock's name (as given to `Locker::lock` or `#[redis_lock(name = ...)]`).
    pub name: String,

    /// Print one JSON object: name, held, ttl_ms, fencing_token, waiters, holder.
    #[arg(long)]
    pub json: bool,

    /// Look at the semaphore of that name only, even when a lock of the same name is held.
    #[arg(long)]
    pub semaphore: bool,
}

/// `lockattr unlock`.
#[derive(Debug, Args)]
pub struct UnlockArgs {
    /// The lock's name (or a semaphore's: then one permit is freed).
    pub name: String,

    /// For a semaphore: the fencing token of the permit to free (from
    /// `show`); needed when more than one permit is held. For a read-write
    /// lock: the writer's, checked before it is freed.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub fencing_token: Option<u64>,

    /// Free a permit of the semaphore of that name, even when a lock of the same name is held.
    #[arg(long)]
    pub semaphore: bool,

    /// Do not ask; needed when standard input is not a terminal.
    #[arg(long, short = 'f')]
    pub force: bool,
}

/// `lockattr watch`.
#[derive(Debug, Args)]
pub struct WatchArgs {
    /// Which lock names: a Redis glob.
    #[arg(default_value = "*")]
    pub pattern: String,

    /// Seconds between refreshes (decimals allowed: 0.5).
    #[arg(long, value_name = "SECONDS", default_value = "1", value_parser = parse_interval)]
    pub interval: Duration,

    /// Stop after this many refreshes.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub count: Option<u64>,

    /// Show at most this many locks.
    #[arg(long, value_name = "N", default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..))]
    pub limit: u64,

    /// Print one JSON object per refresh and line instead of the table.
    #[arg(long)]
    pub json: bool,
}

/// The shortest refresh interval: `watch` should not hammer Redis.
pub const MIN_INTERVAL: Duration = Duration::from_millis(10);

/// The longest refresh interval: one day.
pub const MAX_INTERVAL: Duration = Duration::from_secs(24 * 3600);

/// `--interval`: seconds, decimals allowed, from 0.01 to one day.
fn parse_interval(text: &str) -> Result<Duration, String> {
    let seconds: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("`{text}` is not a number of seconds (for example 1 or 0.5)"))?;
    if !seconds.is_finite()
        || seconds < MIN_INTERVAL.as_secs_f64()
        || seconds > MAX_INTERVAL.as_secs_f64()
    {
        return Err(format!(
            "the interval must be from {} to {} seconds",
            MIN_INTERVAL.as_secs_f64(),
            MAX_INTERVAL.as_secs()
        ));
    }
    Ok(Duration::from_secs_f64(seconds))
}

/// The deployment to connect to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// One server (`Locker::builder`).
    Single(String),
    /// A Redis Cluster, by its seed nodes (`Locker::cluster_builder`).
    Cluster(Vec<String>),
}

impl Connection {
    /// The URLs the options give: those of `--url`, else `env_url` (the
    /// value of `REDIS_URL`, when set and not empty), else [`DEFAULT_URL`].
    pub fn urls(&self, env_url: Option<String>) -> Vec<String> {
        if !self.urls.is_empty() {
            return self.urls.clone();
        }
        match env_url {
            Some(url) if !url.trim().is_empty() => vec![url],
            _ => vec![DEFAULT_URL.to_owned()],
        }
    }

    /// The deployment the options name. Several `--url` without
    /// `--cluster` are refused: they are cluster seeds or a mistake.
    pub fn target(&self, env_url: Option<String>) -> Result<Target, Failure> {
        let mut urls = self.urls(env_url);
        if !TLS
            && urls.iter().any(|url| {
                let scheme = url.trim_start().split(':').next().unwrap_or_default();
                ["rediss", "valkeys"].contains(&scheme.to_ascii_lowercase().as_str())
            })
        {
            return Err(Failure::usage(
                "`rediss://` (TLS) needs a lockattr built with TLS: reinstall it with \
                 `cargo install lockattr-cli --features tls-rustls`",
            ));
        }
        if self.cluster {
            Ok(Target::Cluster(urls))
        } else if urls.len() > 1 {
            Err(Failure::usage(format!(
                "--url was given {} times; several URLs are the seed nodes of a Redis Cluster: \
                 add --cluster",
                urls.len()
            )))
        } else {
            Ok(Target::Single(urls.remove(0)))
        }
    }
}

/// Whether this build speaks TLS (a TLS feature of the package).
const TLS: bool = cfg!(any(feature = "tls-rustls", feature = "tls-native-tls"));

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("lockattr").chain(args.iter().copied()))
    }

    #[test]
    fn clap_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn ls_defaults() {
        let cli = parse(&["ls"]).unwrap();
        let Command::Ls(ls) = cli.command else {
            panic!("not ls")
        };
        assert_eq!(ls.pattern, "*");
        assert_eq!(ls.limit, 1000);
        assert!(!ls.json);
        assert_eq!(cli.conn.prefix, lockattr_runtime::DEFAULT_PREFIX);
        assert!(cli.conn.urls.is_empty());
        assert!(!cli.conn.cluster);
    }

    #[test]
    fn ls_with_pattern_limit_and_json() {
        let cli = parse(&["ls", "order:*", "--limit", "5", "--json"]).unwrap();
        let Command::Ls(ls) = cli.command else {
            panic!("not ls")
        };
        assert_eq!(
            (ls.pattern.as_str(), ls.limit, ls.json),
            ("order:*", 5, true)
        );
    }

    #[test]
    fn global_options_go_before_or_after_the_command() {
        for args in [
            &["--url", "redis://h:1/", "--prefix", "app:", "show", "x"][..],
            &["show", "x", "--url", "redis://h:1/", "--prefix", "app:"][..],
        ] {
            let cli = parse(args).unwrap();
            assert_eq!(cli.conn.urls, ["redis://h:1/"]);
            assert_eq!(cli.conn.prefix, "app:");
            let Command::Show(show) = cli.command else {
                panic!("not show")
            };
            assert_eq!(show.name, "x");
        }
    }

    #[test]
    fn unlock_force() {
        for (args, force) in [
            (&["unlock", "x"][..], false),
            (&["unlock", "x", "--force"][..], true),
            (&["unlock", "-f", "x"][..], true),
        ] {
            let Command::Unlock(unlock) = parse(args).unwrap().command else {
                panic!("not unlock")
            };
            assert_eq!((unlock.name.as_str(), unlock.force), ("x", force));
        }
    }

    #[test]
    fn watch_interval_and_count() {
        let Command::Watch(watch) = parse(&["watch"]).unwrap().command else {
            panic!("not watch")
        };
        assert_eq!(watch.interval, Duration::from_secs(1));
        assert_eq!(watch.count, None);
        assert_eq!(watch.pattern, "*");
        let Command::Watch(watch) = parse(&["watch", "a*", "--interval", "0.2", "--count", "2"])
            .unwrap()
            .command
        else {
            panic!("not watch")
        };
        assert_eq!(watch.interval, Duration::from_millis(200));
        assert_eq!(watch.count, Some(2));
        assert_eq!(watch.pattern, "a*");
    }

    #[test]
    fn bad_arguments_are_usage_errors() {
        for args in [
            &[][..],
            &["show"][..],
            &["unlock"][..],
            &["frobnicate"][..],
            &["ls", "--limit", "0"][..],
            &["ls", "--limit", "many"][..],
            &["watch", "--interval", "0"][..],
            &["watch", "--interval", "-1"][..],
            &["watch", "--interval", "NaN"][..],
            &["watch", "--interval", "inf"][..],
            &["watch", "--interval", "soon"][..],
            &["watch", "--count", "0"][..],
            &["unlock", "x", "--json"][..],
        ] {
            let err = parse(args).map(|_| ()).unwrap_err();
            assert_eq!(err.exit_code(), 2, "{args:?}: {err}");
        }
    }

    fn conn(urls: &[&str], cluster: bool) -> Connection {
        Connection {
            urls: urls.iter().map(|u| u.to_string()).collect(),
            cluster,
            prefix: "p:".into(),
        }
    }

    #[test]
    fn a_tls_url_without_tls_says_how_to_install_with_it() {
        if TLS {
            return;
        }
        for urls in [
            &["rediss://:pw@host:6380/"][..],
            &["redis://a/", "REDISS://b/"],
        ] {
            let err = conn(urls, urls.len() > 1).target(None).unwrap_err();
            let message = err.to_string();
            assert!(
                message.contains("cargo install lockattr-cli --features tls-rustls"),
                "{message}"
            );
            assert!(
                !message.contains("Cargo.toml") && !message.contains("pw"),
                "{message}"
            );
        }
    }

    #[test]
    fn url_comes_from_the_option_then_the_environment_then_the_default() {
        let env = || Some("redis://env:1/".to_owned());
        assert_eq!(
            conn(&["redis://opt:1/"], false).target(env()).unwrap(),
            Target::Single("redis://opt:1/".into())
        );
        assert_eq!(
            conn(&[], false).target(env()).unwrap(),
            Target::Single("redis://env:1/".into())
        );
        assert_eq!(
            conn(&[], false).target(None).unwrap(),
            Target::Single(DEFAULT_URL.into())
        );
        assert_eq!(
            conn(&[], false).target(Some(" ".into())).unwrap(),
            Target::Single(DEFAULT_URL.into())
        );
    }

    #[test]
    fn several_urls_need_cluster() {
        let err = conn(&["redis://a:1/", "redis://b:1/"], false)
            .target(None)
            .unwrap_err();
        assert!(err.to_string().contains("--cluster"), "{err}");
        assert_eq!(
            conn(&["redis://a:1/", "redis://b:1/"], true)
                .target(None)
                .unwrap(),
            Target::Cluster(vec!["redis://a:1/".into(), "redis://b:1/".into()])
        );
        assert_eq!(
            conn(&[], true)
                .target(Some("redis://env:1/".into()))
                .unwrap(),
            Target::Cluster(vec!["redis://env:1/".into()])
        );
    }

    #[test]
    fn several_urls_parse_with_cluster() {
        let cli = parse(&[
            "--cluster",
            "--url",
            "redis://a:1/",
            "--url",
            "redis://b:1/",
            "ls",
        ])
        .unwrap();
        assert!(cli.conn.cluster);
        assert_eq!(cli.conn.urls, ["redis://a:1/", "redis://b:1/"]);
    }
}
