//! The commands, on the runtime's public API: `Locker::inspect`, `locks`
//! and `force_unlock_if` for locks and read-write locks (`LockInfo::kind`);
//! `inspect_semaphore`, `semaphores` and `force_unlock_permit` for
//! semaphores.

use std::io::{BufRead, IsTerminal, Write};
use std::time::{Instant, SystemTime};

use lockattr_runtime::{Holder, LockInfo, LockKind, Locker, SemaphoreInfo};

use crate::cli::{Cli, Command, LsArgs, ShowArgs, Target, UnlockArgs, WatchArgs};
use crate::exit::{Exit, Failure, redact};
use crate::format;
use crate::view::{
    HoldView, HolderView, ItemJson, LockJson, LockView, PermitView, RwJson, RwView, SemaphoreJson,
    SemaphoreView, to_json,
};
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

/// The plain values of a holder the runtime reported.
fn holder_view(h: &Holder) -> HolderView {
    HolderView {
        host: h.host.clone(),
        pid: h.pid,
        label: h.label.clone(),
        since: h.since,
    }
}

/// The plain values of a lock the runtime reported.
fn view(info: &LockInfo) -> LockView {
    LockView {
        name: info.name.clone(),
        ttl: info.ttl,
        fencing_token: info.fencing_token,
        waiters: info.waiters,
        holder: info.holder.as_ref().map(holder_view),
    }
}

/// A read-write lock the runtime reported ([`LockKind::ReadWrite`]) in
/// plain values; `None` for a lock.
fn rw_view(info: &LockInfo) -> Option<RwView> {
    if info.kind != LockKind::ReadWrite {
        return None;
    }
    Some(RwView {
        name: info.name.clone(),
        writer: info.exclusive.then(|| HoldView {
            ttl: info.ttl,
            fencing_token: info.fencing_token,
            holder: info.holder.as_ref().map(holder_view),
        }),
        readers: info
            .readers
            .iter()
            .map(|r| HoldView {
                ttl: r.ttl,
                fencing_token: r.fencing_token,
                holder: r.holder.as_ref().map(holder_view),
            })
            .collect(),
        waiters: info.waiters,
    })
}

/// The held locks, then the read-write locks, of what `locks` reported.
fn by_kind(found: &[LockInfo]) -> (Vec<LockView>, Vec<RwView>) {
    let rws: Vec<RwView> = found.iter().filter_map(rw_view).collect();
    let locks = found
        .iter()
        .filter(|info| info.kind != LockKind::ReadWrite)
        .map(view)
        .collect();
    (locks, rws)
}

/// The plain values of a semaphore the runtime reported.
fn semaphore_view(info: &SemaphoreInfo) -> SemaphoreView {
    SemaphoreView {
        name: info.name.clone(),
        permits: info.permits,
        holders: info
            .holders
            .iter()
            .map(|p| PermitView {
                permit: p.permit,
                ttl: p.ttl,
                fencing_token: p.fencing_token,
                holder: p.holder.as_ref().map(holder_view),
            })
            .collect(),
        waiters: info.waiters,
        waiting: info.waiting.iter().map(holder_view).collect(),
    }
}

/// A `--limit` as a count of locks.
fn limit(limit: u64) -> usize {
    usize::try_from(limit).unwrap_or(usize::MAX)
}

async fn ls(locker: &Locker, args: LsArgs) -> Result<Exit, Failure> {
    let limit = limit(args.limit);
    // In name order, as the runtime returns them.
    let found = locker.locks(&args.pattern, limit).await?;
    let (locks, rws) = by_kind(&found);
    let in_use = locker.semaphores(&args.pattern, limit).await?;
    let semaphores: Vec<SemaphoreView> = in_use.iter().map(semaphore_view).collect();
    let skipped = found.skipped() + in_use.skipped();
    if args.json {
        let items: Vec<ItemJson> = locks
            .iter()
            .map(|l| ItemJson::Lock(LockJson::held(l)))
            .chain(rws.iter().map(|rw| ItemJson::ReadWrite(RwJson::of(rw))))
            .chain(
                semaphores
                    .iter()
                    .map(|s| ItemJson::Semaphore(SemaphoreJson::of(s))),
            )
            .collect();
        print(&(to_json(&items) + "\n"))?;
    } else if locks.is_empty() && rws.is_empty() && semaphores.is_empty() {
        print(&format!(
            "No lock, read-write lock or semaphore matches `{}`.\n",
            format::printable(&args.pattern)
        ))?;
    } else {
        print(&format::ls_table_all(
            &locks,
            &rws,
            &semaphores,
            SystemTime::now(),
        ))?;
    }
    if skipped > 0 {
        eprintln!(
            "lockattr: skipped {} under the prefix that lockattr did not write \
             (a name that is not UTF-8, or a value of another type)",
            format::count(skipped, "key", "keys")
        );
    }
    if found.len() >= limit {
        eprintln!(
            "lockattr: listed the first {} (--limit); there may be more",
            format::count(limit, "lock", "locks")
        );
    }
    if semaphores.len() >= limit {
        eprintln!(
            "lockattr: listed the first {} (--limit); there may be more",
            format::count(limit, "semaphore", "semaphores")
        );
    }
    Ok(Exit::Ok)
}

async fn show(locker: &Locker, args: ShowArgs) -> Result<Exit, Failure> {
    if args.semaphore {
        let Some(sem) = in_use(locker, &args.name).await? else {
            let name = format::printable(&args.name);
            if args.json {
                let free = SemaphoreView {
                    name: args.name.clone(),
                    permits: 0,
                    holders: Vec::new(),
                    waiters: 0,
                    waiting: Vec::new(),
                };
                print(&(to_json(&SemaphoreJson::of(&free)) + "\n"))?;
            } else {
                print(&format!(
                    "Semaphore `{name}` has no permit held and no waiter.\n"
                ))?;
            }
            return Ok(Exit::NotFound);
        };
        return show_semaphore(&sem, args.json);
    }
    let info = locker.inspect(&args.name).await?;
    if let Some(rw) = info.as_ref().and_then(rw_view) {
        if args.json {
            print(&(to_json(&RwJson::of(&rw)) + "\n"))?;
        } else {
            print(&format::show_rw(&rw, SystemTime::now()))?;
        }
        return Ok(Exit::Ok);
    }
    let lock = info.as_ref().map(view);
    if lock.is_none()
        && let Some(sem) = in_use(locker, &args.name).await?
    {
        return show_semaphore(&sem, args.json);
    }
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

/// Prints a semaphore in use (`show`).
fn show_semaphore(sem: &SemaphoreView, json: bool) -> Result<Exit, Failure> {
    if json {
        print(&(to_json(&SemaphoreJson::of(sem)) + "\n"))?;
    } else {
        print(&format::show_semaphore(sem, SystemTime::now()))?;
    }
    Ok(Exit::Ok)
}

/// The semaphore `name` when it is in use (`None` as well on a Locker
/// that has no semaphores, a Redlock: the commands then see locks only).
async fn in_use(locker: &Locker, name: &str) -> Result<Option<SemaphoreView>, Failure> {
    match locker.inspect_semaphore(name).await {
        Ok(sem) => Ok(sem.as_ref().map(semaphore_view)),
        Err(lockattr_runtime::LockError::InvalidInput { .. }) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

async fn unlock(locker: &Locker, args: UnlockArgs) -> Result<Exit, Failure> {
    let name = format::printable(&args.name).into_owned();
    if args.semaphore {
        let Some(sem) = in_use(locker, &args.name).await? else {
            print(&format!(
                "Semaphore `{name}` has no permit held: nothing to unlock.\n"
            ))?;
            return Ok(Exit::NotFound);
        };
        return unlock_permit(locker, &args, sem).await;
    }
    let info = locker.inspect(&args.name).await?;
    if let Some(rw) = info.as_ref().and_then(rw_view) {
        return unlock_writer(locker, &args, rw).await;
    }
    let Some(lock) = info.as_ref().map(view) else {
        if let Some(sem) = in_use(locker, &args.name).await? {
            return unlock_permit(locker, &args, sem).await;
        }
        print(&format!("Lock `{name}` is not held: nothing to unlock.\n"))?;
        return Ok(Exit::NotFound);
    };
    print(&format::show(&args.name, Some(&lock), SystemTime::now()))?;
    // A holder is freed only by the fencing token its own value shows, so
    // that a lock that changed hands meanwhile is left to its new holder:
    // never unconditionally.
    if lock.fencing_token == 0 {
        return Err(Failure::new(format!(
            "not force-unlocking `{name}`: its holder's value carries no fencing token (it was \
             taken by a version of lockattr older than this tool), so this tool cannot make sure \
             it frees the holder shown and no later one; the lock frees itself when its lease \
             ends, or call `Locker::force_unlock` from code that knows the holder is gone"
        )));
    }
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
    let freed = locker
        .force_unlock_if(&args.name, lock.fencing_token)
        .await?;
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

/// `unlock` of a read-write lock: frees its writer, by the fencing token
/// shown (which `--fencing-token`, when given, must be), asking first
/// unless `--force`. Readers are never freed: their leases run out.
async fn unlock_writer(locker: &Locker, args: &UnlockArgs, rw: RwView) -> Result<Exit, Failure> {
    let name = format::printable(&args.name).into_owned();
    print(&format::show_rw(&rw, SystemTime::now()))?;
    let Some(writer) = rw.writer else {
        print(&format!(
            "Read-write lock `{name}` has no writer: nothing unlocked (readers are not \
             force-unlocked; each is free when its lease ends).\n"
        ))?;
        return Ok(Exit::NotFound);
    };
    if let Some(token) = args.fencing_token
        && token != writer.fencing_token
    {
        print(&format!(
            "The writer of `{name}` does not hold fencing token {token}: nothing unlocked; look \
             again.\n"
        ))?;
        return Ok(Exit::NotFound);
    }
    if writer.fencing_token == 0 {
        return Err(Failure::new(format!(
            "not force-unlocking the writer of `{name}`: its value carries no fencing token (it \
             was taken by a version of lockattr older than this tool), so this tool cannot make \
             sure it frees the writer shown and no later one; the writer is free when its lease \
             ends"
        )));
    }
    if !args.force {
        if !std::io::stdin().is_terminal() {
            return Err(Failure::usage(format!(
                "not force-unlocking the writer of `{name}`: standard input is not a terminal to \
                 ask on; pass --force to unlock without asking"
            )));
        }
        let holder = writer
            .holder
            .as_ref()
            .map_or_else(|| "an unknown holder".into(), format::holder);
        if !confirm(&format!(
            "Force-unlock the writer of read-write lock {name}, {holder}? [y/N] "
        ))? {
            print(&format!("Left `{name}` locked.\n"))?;
            return Ok(Exit::Ok);
        }
    }
    if locker
        .force_unlock_if(&args.name, writer.fencing_token)
        .await?
    {
        print(&format!(
            "Force-unlocked the writer of `{name}` (fencing token {} was held).\n",
            writer.fencing_token
        ))?;
        Ok(Exit::Ok)
    } else {
        print(&format!(
            "The writer of `{name}` was freed or changed in the meantime: nothing unlocked; look \
             again.\n"
        ))?;
        Ok(Exit::NotFound)
    }
}

/// `unlock` of a semaphore: frees the permit `--fencing-token` names (or
/// the only one held), asking first unless `--force`.
async fn unlock_permit(
    locker: &Locker,
    args: &UnlockArgs,
    sem: SemaphoreView,
) -> Result<Exit, Failure> {
    let name = format::printable(&args.name).into_owned();
    print(&format::show_semaphore(&sem, SystemTime::now()))?;
    let permit = match (args.fencing_token, sem.holders.as_slice()) {
        (Some(token), held) => match held.iter().find(|p| p.fencing_token == token) {
            Some(permit) => permit.clone(),
            None => {
                print(&format!(
                    "No permit of semaphore `{name}` is held with fencing token {token}: \
                     nothing unlocked; look again.\n"
                ))?;
                return Ok(Exit::NotFound);
            }
        },
        (None, [one]) => one.clone(),
        (None, []) => {
            print(&format!(
                "Semaphore `{name}` has no permit held: nothing to unlock.\n"
            ))?;
            return Ok(Exit::NotFound);
        }
        (None, held) => {
            return Err(Failure::usage(format!(
                "semaphore `{name}` has {} permits held: choose one with --fencing-token",
                held.len()
            )));
        }
    };
    if permit.fencing_token == 0 {
        return Err(Failure::new(format!(
            "not force-releasing permit {} of semaphore `{name}`: its holder's value carries no \
             fencing token (it was taken by a version of lockattr older than this tool); the \
             permit frees itself when its lease ends",
            permit.permit
        )));
    }
    if !args.force {
        if !std::io::stdin().is_terminal() {
            return Err(Failure::usage(format!(
                "not force-unlocking a permit of `{name}`: standard input is not a terminal to \
                 ask on; pass --force to unlock without asking"
            )));
        }
        let holder = permit
            .holder
            .as_ref()
            .map_or_else(|| "an unknown holder".into(), format::holder);
        if !confirm(&format!(
            "Force-release permit {} of semaphore {name} held by {holder}? [y/N] ",
            permit.permit
        ))? {
            print(&format!("Left the permit of `{name}` held.\n"))?;
            return Ok(Exit::Ok);
        }
    }
    if locker
        .force_unlock_permit(&args.name, permit.fencing_token)
        .await?
    {
        print(&format!(
            "Force-released permit {} of semaphore `{name}` (fencing token {} was held).\n",
            permit.permit, permit.fencing_token
        ))?;
        Ok(Exit::Ok)
    } else {
        print(&format!(
            "Permit {} of semaphore `{name}` was freed or changed hands in the meantime: \
             nothing unlocked; look again.\n",
            permit.permit
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
            result = refresh(locker, &args.pattern, settings.limit) => result,
        };
        let now = SystemTime::now();
        let (found, failure) = match result {
            Ok(found) => (found, None),
            Err(err) => (
                Refreshed::default(),
                Some(redact(&err.to_string(), secrets)),
            ),
        };
        let rates;
        let snapshot = match &failure {
            Some(message) => Snapshot::Failed(message),
            None => {
                // Refreshes start `interval` apart (or later, when one
                // takes longer): rates are counted between their starts.
                rates = hand_overs.update(&found.locks, started);
                Snapshot::Locks(
                    &found.locks,
                    &rates,
                    &found.read_write,
                    &found.semaphores,
                    found.skipped,
                )
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

/// What one refresh of `watch` found.
#[derive(Default)]
struct Refreshed {
    locks: Vec<LockView>,
    read_write: Vec<RwView>,
    semaphores: Vec<SemaphoreView>,
    /// Keys under the prefix that lockattr did not write.
    skipped: usize,
}

/// One refresh of `watch`: the held locks and read-write locks, then the
/// semaphores in use.
async fn refresh(
    locker: &Locker,
    pattern: &str,
    limit: usize,
) -> Result<Refreshed, lockattr_runtime::LockError> {
    let found = locker.locks(pattern, limit).await?;
    let (locks, read_write) = by_kind(&found);
    let in_use = locker.semaphores(pattern, limit).await?;
    Ok(Refreshed {
        locks,
        read_write,
        semaphores: in_use.iter().map(semaphore_view).collect(),
        skipped: found.skipped() + in_use.skipped(),
    })
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
