//! The commands, on the runtime's public API: `Locker::inspect`, `locks`
//! and `force_unlock`.

use std::io::{BufRead, IsTerminal, Write};
use std::time::{Instant, SystemTime};

use lockattr_runtime::{LockInfo, Locker};

use crate::cli::{Cli, Command, LsArgs, ShowArgs, Target, UnlockArgs, WatchArgs};
use crate::exit::{Exit, Failure, redact};
use crate::format;
use crate::view::{HolderView, LockJson, LockView, to_json};
use crate::watch::{self, HandOvers, RefreshJson, Settings, Snapshot};

/// Runs the command `cli` names, connecting to `target`; `secrets` are
/// kept out of the messages `watch` shows.
pub async fn run(cli: Cli, target: Target, secrets: &[String]) -> Result<Exit, Failure> {
    let locker = match target {
        Target::Single(url) => Locker::builder(url).prefix(cli.conn.prefix).build(),
        Target::Cluster(seeds) => Locker::cluster_builder(seeds)
            .prefix(cli.conn.prefix)
            .build(),
    }?;
    match cli.command {
        Command::Ls(args) => ls(&locker, args).await,
        Command::Show(args) => show(&locker, args).await,
        Command::Unlock(args) => unlock(&locker, args).await,
        Command::Watch(args) => watch(&locker, args, secrets).await,
    }
}

/// The plain values of a lock the runtime reported.
fn view(info: &LockInfo) -> LockView {
    LockView {
        name: info.name.clone(),
        ttl: info.ttl,
        fencing_token: info.fencing_token,
        waiters: info.waiters,
        holder: info.holder.as_ref().map(|h| HolderView {
            host: h.host.clone(),
            pid: h.pid,
            label: h.label.clone(),
            since: h.since,
        }),
    }
}

/// A `--limit` as a count of locks.
fn limit(limit: u64) -> usize {
    usize::try_from(limit).unwrap_or(usize::MAX)
}

async fn ls(locker: &Locker, args: LsArgs) -> Result<Exit, Failure> {
    let limit = limit(args.limit);
    // In name order, as the runtime returns them.
    let locks: Vec<LockView> = locker
        .locks(&args.pattern, limit)
        .await?
        .iter()
        .map(view)
        .collect();
    if args.json {
        let items: Vec<LockJson> = locks.iter().map(LockJson::held).collect();
        print(&(to_json(&items) + "\n"))?;
    } else {
        print(&format::ls_table(&locks, SystemTime::now()))?;
    }
    if locks.len() >= limit {
        eprintln!("lockattr: listed the first {limit} locks (--limit); there may be more");
    }
    Ok(Exit::Ok)
}

async fn show(locker: &Locker, args: ShowArgs) -> Result<Exit, Failure> {
    let lock = locker.inspect(&args.name).await?.as_ref().map(view);
    if args.json {
        let json = match &lock {
            Some(lock) => LockJson::held(lock),
            None => LockJson::free(&args.name),
        };
        print(&(to_json(&json) + "\n"))?;
    } else {
        print(&format::show(&args.name, lock.as_ref(), SystemTime::now()))?;
    }
    Ok(if lock.is_some() {
        Exit::Ok
    } else {
        Exit::NotFound
    })
}

async fn unlock(locker: &Locker, args: UnlockArgs) -> Result<Exit, Failure> {
    let name = format::printable(&args.name).into_owned();
    let Some(lock) = locker.inspect(&args.name).await?.as_ref().map(view) else {
        print(&format!("Lock `{name}` is not held: nothing to unlock.\n"))?;
        return Ok(Exit::NotFound);
    };
    print(&format::show(&args.name, Some(&lock), SystemTime::now()))?;
    if !args.force {
        if !std::io::stdin().is_terminal() {
            return Err(Failure::usage(format!(
                "not force-unlocking `{name}`: standard input is not a terminal to ask on; \
                 pass --force to unlock without asking"
            )));
        }
        let holder = lock
            .holder
            .as_ref()
            .map_or_else(|| "an unknown holder".into(), format::holder);
        if !confirm(&format!("Force-unlock {name} held by {holder}? [y/N] "))? {
            print(&format!("Left `{name}` locked.\n"))?;
            return Ok(Exit::Ok);
        }
    }
    // Only the holder shown (and confirmed): a lock that changed hands
    // meanwhile is left to its new holder.
    let freed = if lock.fencing_token > 0 {
        locker
            .force_unlock_if(&args.name, lock.fencing_token)
            .await?
    } else {
        locker.force_unlock(&args.name).await?
    };
    if freed {
        print(&format!(
            "Force-unlocked `{name}` (fencing token {} was held).\n",
            lock.fencing_token
        ))?;
        Ok(Exit::Ok)
    } else {
        print(&format!(
            "Lock `{name}` was freed or changed hands in the meantime: nothing unlocked; look again.\n"
        ))?;
        Ok(Exit::NotFound)
    }
}

/// Asks `question` on stderr; true when the answer read from stdin is yes.
fn confirm(question: &str) -> Result<bool, Failure> {
    let mut stderr = std::io::stderr().lock();
    stderr
        .write_all(question.as_bytes())
        .and_then(|()| stderr.flush())
        .map_err(|e| Failure::io("ask for confirmation", e))?;
    let mut answer = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut answer)
        .map_err(|e| Failure::io("read the answer", e))?;
    Ok(matches!(
        answer.trim().to_ascii_lowercase().as_str(),
        "y" | "yes"
    ))
}

async fn watch(locker: &Locker, args: WatchArgs, secrets: &[String]) -> Result<Exit, Failure> {
    let settings = Settings {
        pattern: &args.pattern,
        interval: args.interval,
        limit: limit(args.limit),
        terminal: !args.json && std::io::stdout().is_terminal(),
    };
    let mut hand_overs = HandOvers::default();
    let mut refreshes = 0_u64;
    // Ctrl-C ends the watch (exit 0); without a handler it never comes.
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    tokio::pin!(ctrl_c);
    loop {
        let started = Instant::now();
        // `biased`: the Ctrl-C handler is in place before anything is shown.
        let result = tokio::select! {
            biased;
            () = &mut ctrl_c => return Ok(Exit::Ok),
            result = locker.locks(&args.pattern, settings.limit) => result,
        };
        let now = SystemTime::now();
        let (locks, failure) = match result {
            Ok(infos) => (infos.iter().map(view).collect(), None),
            Err(err) => (Vec::new(), Some(redact(&err.to_string(), secrets))),
        };
        let rates;
        let snapshot = match &failure {
            Some(message) => Snapshot::Failed(message),
            None => {
                // Refreshes start `interval` apart (or later, when one
                // takes longer): rates are counted between their starts.
                rates = hand_overs.update(&locks, started);
                Snapshot::Locks(&locks, &rates)
            }
        };
        if args.json {
            print(&(to_json(&RefreshJson::of(&snapshot, now)) + "\n"))?;
        } else {
            print(&watch::frame(&settings, &snapshot, now))?;
        }
        refreshes += 1;
        if args.count.is_some_and(|count| refreshes >= count) {
            return match failure {
                Some(message) => Err(Failure::new(message)),
                None => Ok(Exit::Ok),
            };
        }
        let next = tokio::time::Instant::from_std(started + args.interval);
        tokio::select! {
            biased;
            () = &mut ctrl_c => return Ok(Exit::Ok),
            () = tokio::time::sleep_until(next) => {}
        }
    }
}

/// Writes `text` to stdout in one piece. A closed pipe (`lockattr ls |
/// head`) is not an error.
fn print(text: &str) -> Result<(), Failure> {
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(Failure::io("write to standard output", e))
        }
        _ => Ok(()),
    }
}
