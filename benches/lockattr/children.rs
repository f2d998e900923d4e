//! Child processes: this binary re-executed with `LOCKATTR_BENCH_ROLE`
//! naming its role, and the parameters it gets.

use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::{Res, servers};

/// Environment variable naming the role of a re-executed child process.
pub const ROLE_ENV: &str = "LOCKATTR_BENCH_ROLE";
/// Environment variable with the URL of the server the processes signal
/// each other through (the single server).
pub const URL_ENV: &str = "LOCKATTR_BENCH_URL";
/// Environment variable with `key=value;...` parameters, for child processes.
pub const PARAMS_ENV: &str = "LOCKATTR_BENCH_PARAMS";

/// Child processes of one scenario: killed (if still running) and reaped
/// when dropped.
pub struct Children {
    what: &'static str,
    /// The processes, in the order of their parameters.
    pub procs: Vec<Child>,
}

impl Children {
    /// Starts one process of `role` per parameter string.
    pub fn spawn(
        what: &'static str,
        role: &str,
        url: &str,
        params: impl IntoIterator<Item = String>,
    ) -> Res<Children> {
        let exe = std::env::current_exe()?;
        let mut children = Children {
            what,
            procs: Vec::new(),
        };
        for p in params {
            let child = Command::new(&exe)
                .env(ROLE_ENV, role)
                .env(URL_ENV, url)
                .env(PARAMS_ENV, p)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::inherit())
                .spawn()
                .map_err(|e| format!("cannot start a {what} process: {e}"))?;
            servers::track(child.id(), None);
            children.procs.push(child);
        }
        Ok(children)
    }

    /// Fails when a child has exited already (it would never be ready).
    pub fn check_running(&mut self) -> Res<()> {
        for child in &mut self.procs {
            if let Some(status) = child.try_wait()? {
                return Err(format!("a {} process exited early ({status})", self.what).into());
            }
        }
        Ok(())
    }

    /// Waits for every child to exit successfully; on the first failure or
    /// after `timeout`, kills the rest and returns an error.
    pub async fn wait(&mut self, timeout: Duration) -> Res<()> {
        let deadline = Instant::now() + timeout;
        loop {
            let mut running = 0;
            for child in &mut self.procs {
                match child.try_wait()? {
                    Some(status) if !status.success() => {
                        return Err(format!("a {} process failed ({status})", self.what).into());
                    }
                    Some(_) => {}
                    None => running += 1,
                }
            }
            if running == 0 {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(
                    format!("{} processes did not finish within {timeout:?}", self.what).into(),
                );
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

impl Drop for Children {
    fn drop(&mut self) {
        for child in &mut self.procs {
            if let Ok(None) = child.try_wait() {
                let _ = child.kill();
            }
            let _ = child.wait();
            servers::untrack(child.id());
        }
    }
}

/// `key=value;key=value` parameters of a child process.
pub struct Params(BTreeMap<String, String>);

impl Params {
    pub fn from_env() -> Res<Params> {
        let raw = std::env::var(PARAMS_ENV).map_err(|_| format!("{PARAMS_ENV} is not set"))?;
        let map = raw
            .split(';')
            .filter(|kv| !kv.is_empty())
            .map(|kv| {
                kv.split_once('=')
                    .map(|(k, v)| (k.to_owned(), v.to_owned()))
                    .ok_or_else(|| format!("bad parameter `{kv}`"))
            })
            .collect::<Result<_, _>>()?;
        Ok(Params(map))
    }

    /// A parameter as text.
    pub fn text(&self, key: &str) -> Res<&str> {
        Ok(self
            .0
            .get(key)
            .ok_or_else(|| format!("parameter `{key}` missing"))?)
    }

    /// A parameter as a whole number.
    pub fn num(&self, key: &str) -> Res<u64> {
        let v = self.text(key)?;
        Ok(v.parse()
            .map_err(|e| format!("parameter `{key}`={v}: {e}"))?)
    }
}
