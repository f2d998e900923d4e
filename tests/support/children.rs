//! Child processes: tests that re-execute their own test binary
//! (`--exact <worker>`), the worker doing nothing unless started so.

use std::io::{BufRead, BufReader};
use std::panic::Location;
use std::process::Child;
use std::time::Duration;

use super::{child_test_of, wait_child};

/// The index of a child among those [`run_children`] started (`0`..),
/// in its environment.
pub const CHILD_INDEX: &str = "LOCKATTR_CHILD_INDEX";

/// Runs `count` children, each the test `worker` of this binary with
/// `envs` (and [`CHILD_INDEX`]), and asserts that each one exited
/// successfully within `within` and printed `<done> <its pid>`.
#[track_caller]
pub fn run_children(
    worker: &str,
    count: usize,
    envs: &[(&str, &str)],
    done: &str,
    within: Duration,
) {
    let caller = Location::caller();
    let children: Vec<Child> = (0..count)
        .map(|i| {
            let index = i.to_string();
            let mut envs = envs.to_vec();
            envs.push((CHILD_INDEX, &index));
            child_test_of(caller, worker, &envs)
                .spawn()
                .expect("spawn child test process")
        })
        .collect();
    for child in children {
        let pid = child.id();
        let output = wait_child(child, within);
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            output.status.success(),
            "child {pid} failed: {}\nstdout:\n{stdout}\nstderr:\n{stderr}",
            output.status
        );
        assert!(
            stdout.contains(&format!("{done} {pid}")),
            "child {pid} did not run {worker}\nstdout:\n{stdout}\nstderr:\n{stderr}"
        );
    }
}

/// Reads `child`'s stdout until a line holds `marker`; what follows the
/// marker on that line (libtest may have written `test <name> ... `
/// before it). Panics when the child ends first.
pub fn read_until(child: &mut Child, marker: &str) -> String {
    let lines = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
    for line in lines {
        let line = line.expect("the child's stdout");
        if let Some((_, rest)) = line.split_once(marker) {
            return rest.trim().to_owned();
        }
    }
    panic!("the child ended before printing {marker}");
}

/// Counts this child in under `started` on the server at `url`, then waits
/// (at most 30 s) until all `count` children have, so that they contend.
pub fn start_together(url: &str, count: usize) {
    let mut con = redis::Client::open(url).unwrap().get_connection().unwrap();
    let _: u64 = redis::cmd("INCR").arg("started").query(&mut con).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let started: u64 = redis::cmd("GET").arg("started").query(&mut con).unwrap();
        if started >= count as u64 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the other children never started"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}
