//! The deterministic explorer of the local queue: every order of the
//! events of a few tasks, run against the real queue with a model of Redis.
//!
//! Each scenario is a handful of tasks of one process (a holder, waiters
//! that may time out or be dropped at every step) and a task of another
//! process, around one lock. An event is one step that a real task takes
//! between two awaits: a release's `pass`, Redis running the release, its
//! answer read (or lost, or its future dropped), a waiter's deadline
//! firing, its turn received or claimed, its bounded wait for a release
//! running out, an attempt, a give-back run in the background, a lease
//! ending. The steps call the queue's own functions ([`Turn::pass`],
//! [`Passing::deliver`], [`LocalWait::give_up`], [`LocalWait::abandon`],
//! [`LocalWait::overdue`], [`Handed::claim`]); the clock is the explorer's,
//! and Redis is a model of what the scripts decide for one lock (the
//! holder, its fencing counter, the queue), so a schedule runs in
//! microseconds and replays exactly.
//!
//! The search is a depth-first enumeration of every schedule (stateless:
//! each schedule runs from the start, following a prefix of choices), the
//! way `loom` enumerates thread interleavings, here over the tasks' steps.
//! The scenarios are small enough to be explored whole, so nothing is left
//! to chance: a failure prints its schedule.
//!
//! The oracles, after every step:
//! - exclusion: at most one task is inside its critical section (a guard
//!   returned, not lost, not yet releasing);
//! - one claimant: a give-back never runs for a token whose task holds a
//!   guard with it;
//! - at the end: every task finished, nothing of the name is left in the
//!   queues (but the turn of a forgotten guard), and a newcomer finds a
//!   turn at once when no turn of the process counts any more.

use std::collections::{HashSet, VecDeque};
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::{Entered, GaveUp, GiveBack, Handed, How, LocalQueues, LocalWait, Passing, Turn, lock};
use crate::backend::Released;
use crate::layout::Keys;

/// The leases of the tasks.
const LEASE: Duration = Duration::from_secs(10);
/// How long a release call takes at most (the queues' `settle`).
const SETTLE: Duration = Duration::from_millis(50);

/// What the scripts decide for one lock.
#[derive(Default)]
struct Redis {
    owner: Option<String>,
    fence: u64,
    /// Queued tokens, oldest first.
    queue: VecDeque<String>,
    /// Raised by every change, so that an attempt is only tried again once
    /// something changed.
    version: u64,
}

impl Redis {
    /// `acquire.lua` for `token`: taken (free and first in line, or
    /// already the token's) or busy; busy, it queues the token when it
    /// waits, and takes it out of the queue when not.
    fn attempt(&mut self, token: &str, wait: bool) -> Option<u64> {
        self.version += 1;
        if self.owner.as_deref() == Some(token) {
            self.queue.retain(|t| t != token);
            return Some(self.fence);
        }
        if self.owner.is_none() && self.queue.front().is_none_or(|t| t == token) {
            self.queue.retain(|t| t != token);
            return Some(self.grant(token));
        }
        if !wait {
            self.queue.retain(|t| t != token);
        } else if !self.queue.iter().any(|t| t == token) {
            self.queue.push_back(token.to_owned());
        }
        None
    }

    fn grant(&mut self, token: &str) -> u64 {
        self.fence += 1;
        self.owner = Some(token.to_owned());
        self.fence
    }

    /// `release.lua` by `token`, naming `successor` (queued last, then the
    /// oldest queued is handed the lock).
    fn release(&mut self, token: &str, successor: Option<&str>) -> (Released, Option<String>) {
        self.version += 1;
        if self.owner.as_deref() != Some(token) {
            return (Released::NotOwned, None);
        }
        self.owner = None;
        if let Some(s) = successor
            && !self.queue.iter().any(|t| t == s)
        {
            self.queue.push_back(s.to_owned());
        }
        let notice = self.queue.pop_front().map(|next| {
            let fence = self.grant(&next);
            format!("{next}:{fence}:{}", LEASE.as_millis())
        });
        (Released::Done, notice)
    }

    /// A give-back: a release of what the token holds, and out of the
    /// queue.
    fn give_back(&mut self, token: &str) {
        self.queue.retain(|t| t != token);
        let _ = self.release(token, None);
    }

    /// The lease of the holder ended.
    fn expire(&mut self) {
        self.version += 1;
        self.owner = None;
    }
}

/// The explorer's Redis for the queue: give-backs wait, as events.
#[derive(Default)]
struct Background {
    owed: Mutex<Vec<String>>,
}

impl GiveBack for Background {
    fn give_back(self: Arc<Self>, _keys: Keys, token: String, _lease: Duration) {
        self.owed.lock().unwrap().push(token);
    }
}

/// Where a task of the process is.
#[allow(clippy::large_enum_variant)] // a few of them, in a test
enum Task {
    /// Waiting in the local queue.
    Waiting(LocalWait),
    /// Named by a release after its deadline: waiting for the answer.
    LastCall(LocalWait),
    /// Its turn arrived, not claimed yet.
    Handed(Handed),
    /// Asking Redis with its token (`seen`: Redis's version at its last
    /// attempt; `late`: one last attempt, no waiting).
    Asking {
        turn: Option<Turn>,
        late: bool,
        seen: Option<u64>,
        /// Its token may be queued (or hold the lock): a dropped future
        /// gives it back.
        owes: bool,
    },
    /// Inside its critical section.
    Holds {
        turn: Option<Turn>,
    },
    /// Its release is on its way.
    Releasing {
        passing: Option<Passing>,
        turn: Option<Turn>,
        ran: Option<(Released, Option<String>)>,
        sent: Instant,
    },
    Done,
}

/// A task of the process.
struct Actor {
    token: String,
    deadline: Instant,
    task: Task,
    /// Its future may be dropped at any await.
    cancellable: bool,
    /// It forgets its guard: its lease ends instead of a release.
    forgets: bool,
}

/// The other process's task: asks once, holds, releases.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Other {
    Idle,
    Queued,
    Holds,
    Done,
    Absent,
}

/// One step of a schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Event {
    /// The waiter's channel is read.
    Recv(usize),
    /// The waiter's deadline fires.
    Deadline(usize),
    /// The first waiter finds no turn counting (its timer fired).
    Overdue(usize),
    /// The bounded wait for the release's answer runs out.
    Bound(usize),
    Claim(usize),
    Attempt(usize),
    /// The task's future is dropped.
    Drop(usize),
    /// A holder starts its release (or its lease ends, if it forgets).
    Release(usize),
    /// Redis runs the release.
    Run(usize),
    /// The release's answer is read.
    Answer(usize),
    /// The release's answer is lost with its connection.
    Lost(usize),
    /// A give-back owed in the background runs.
    GiveBack(usize),
    /// The holder's lease ends in Redis (a forgotten guard, a release
    /// dropped before it was sent).
    Expire,
    OtherAttempt,
    OtherRelease,
}

/// One scenario being run.
struct World {
    queues: Arc<LocalQueues>,
    clock: Arc<Mutex<Instant>>,
    keys: Keys,
    redis: Redis,
    background: Arc<Background>,
    actors: Vec<Actor>,
    other: Other,
    /// Turns of guards that were forgotten.
    forgotten: Vec<Turn>,
    start: Instant,
    /// Release futures may be dropped.
    drop_releases: bool,
    trace: Vec<String>,
}

/// A scenario: the tasks of the process (the first holds the lock), and
/// whether a task of another process takes part.
#[derive(Clone, Copy)]
struct Scenario {
    /// Per waiter: its deadline after the start, whether it may be
    /// dropped.
    waiters: &'static [(u64, bool)],
    /// The holder forgets its guard.
    forgets: bool,
    other: bool,
    /// Release futures may be dropped on their way.
    drop_releases: bool,
}

impl World {
    fn new(scenario: Scenario) -> World {
        let start = Instant::now();
        let clock = Arc::new(Mutex::new(start));
        let read = clock.clone();
        let queues = Arc::new(LocalQueues::with_clock(
            SETTLE,
            Arc::new(move || *read.lock().unwrap()),
        ));
        let mut keys = Keys::new("explore:", "lock", Duration::from_secs(60));
        keys.holder = Arc::from("host\n1\nexplore");
        let mut world = World {
            queues,
            clock,
            keys,
            redis: Redis::default(),
            background: Arc::default(),
            actors: Vec::new(),
            other: if scenario.other {
                Other::Idle
            } else {
                Other::Absent
            },
            forgotten: Vec::new(),
            start,
            drop_releases: scenario.drop_releases,
            trace: Vec::new(),
        };
        // The holder: its turn, and the lock.
        let deadline = start + Duration::from_secs(1);
        let Entered::Turn(turn) = world.enter("h", deadline) else {
            unreachable!("the first task takes the turn");
        };
        let fence = world.redis.attempt("h", true).expect("free");
        assert_eq!(fence, 1);
        turn.held(start, LEASE);
        world.actors.push(Actor {
            token: "h".into(),
            deadline,
            task: Task::Holds { turn: Some(turn) },
            cancellable: false,
            forgets: scenario.forgets,
        });
        for (i, &(after_ms, cancellable)) in scenario.waiters.iter().enumerate() {
            let token = format!("w{i}");
            let deadline = start + Duration::from_millis(after_ms);
            let Entered::Wait(here) = world.enter(&token, deadline) else {
                unreachable!("the holder's turn counts");
            };
            world.actors.push(Actor {
                token,
                deadline,
                task: Task::Waiting(here),
                cancellable,
                forgets: false,
            });
        }
        world
    }

    fn now(&self) -> Instant {
        *self.clock.lock().unwrap()
    }

    fn advance_to(&self, at: Instant) {
        let mut now = self.clock.lock().unwrap();
        *now = (*now).max(at);
    }

    fn enter(&self, token: &str, deadline: Instant) -> Entered {
        self.queues.enter(&self.keys, token, LEASE, deadline)
    }

    fn owed(&self) -> Vec<String> {
        self.background.owed.lock().unwrap().clone()
    }

    /// The events that can happen now.
    fn enabled(&self) -> Vec<Event> {
        let mut events = Vec::new();
        for (i, actor) in self.actors.iter().enumerate() {
            match &actor.task {
                Task::Waiting(here) => {
                    if !here.rx.is_empty() {
                        events.push(Event::Recv(i));
                    }
                    events.push(Event::Deadline(i));
                    if self.may_take_turn(here) {
                        events.push(Event::Overdue(i));
                    }
                }
                Task::LastCall(here) => {
                    if !here.rx.is_empty() {
                        events.push(Event::Recv(i));
                    }
                    events.push(Event::Bound(i));
                }
                Task::Handed(_) => events.push(Event::Claim(i)),
                Task::Asking { seen, late, .. } => {
                    if *seen != Some(self.redis.version) || *late {
                        events.push(Event::Attempt(i));
                    } else {
                        events.push(Event::Deadline(i));
                    }
                }
                Task::Holds { .. } => events.push(Event::Release(i)),
                Task::Releasing { ran, .. } => match ran {
                    None => events.push(Event::Run(i)),
                    Some(_) => {
                        events.push(Event::Answer(i));
                        events.push(Event::Lost(i));
                    }
                },
                Task::Done => {}
            }
            let waiting = !matches!(
                actor.task,
                Task::Holds { .. } | Task::Releasing { .. } | Task::Done
            );
            let releasing = matches!(actor.task, Task::Releasing { .. });
            if (actor.cancellable && waiting) || (self.drop_releases && releasing) {
                events.push(Event::Drop(i));
            }
        }
        for i in 0..self.owed().len() {
            events.push(Event::GiveBack(i));
        }
        // A lease ends only when nobody uses it any more (a forgotten
        // guard's is ended by its task's step).
        if let Some(owner) = &self.redis.owner
            && self
                .actors
                .iter()
                .any(|a| &a.token == owner && matches!(a.task, Task::Done))
        {
            events.push(Event::Expire);
        }
        match self.other {
            Other::Idle => events.push(Event::OtherAttempt),
            Other::Queued
                if self.redis.owner.as_deref() == Some("e")
                    || (self.redis.owner.is_none()
                        && self.redis.queue.front().is_some_and(|t| t == "e")) =>
            {
                events.push(Event::OtherAttempt)
            }
            Other::Holds => events.push(Event::OtherRelease),
            _ => {}
        }
        events
    }

    fn may_take_turn(&self, here: &LocalWait) -> bool {
        let names = lock(&self.queues.names);
        let name = names.get(self.keys.lock.as_str());
        name.is_some_and(|name| here.may_take_turn(name, self.now()))
    }

    /// Everything that decides what can happen from here on: two schedules
    /// that reach the same state have the same futures.
    fn state(&self) -> String {
        let start = self.start;
        let at = |t: Instant| t.saturating_duration_since(start).as_millis();
        let mut state = String::new();
        for a in &self.actors {
            let turn = |t: &Option<Turn>| t.as_ref().map(|t| t.id);
            let _ = match &a.task {
                Task::Waiting(here) => write!(state, "W{}", here.rx.is_empty()),
                Task::LastCall(here) => write!(state, "L{}", here.rx.is_empty()),
                Task::Handed(h) => {
                    write!(state, "H{:?}{}{}", h.how, h.unclaimed.is_some(), h.turn.id)
                }
                Task::Asking {
                    turn: t,
                    late,
                    seen,
                    owes,
                } => write!(
                    state,
                    "A{:?}{late}{}{owes}",
                    turn(t),
                    *seen == Some(self.redis.version)
                ),
                Task::Holds { turn: t } => write!(state, "O{:?}", turn(t)),
                Task::Releasing {
                    passing,
                    turn: t,
                    ran,
                    sent,
                } => write!(
                    state,
                    "R{}{:?}{ran:?}{}",
                    passing.is_some(),
                    turn(t),
                    at(*sent)
                ),
                Task::Done => write!(state, "D"),
            };
            state.push('|');
        }
        let _ = write!(
            state,
            "{:?}{}{:?}{:?}{:?}{}|",
            self.redis.owner,
            self.redis.fence,
            self.redis.queue,
            self.owed(),
            self.other,
            at(self.now())
        );
        let names = lock(&self.queues.names);
        if let Some(name) = names.get(self.keys.lock.as_str()) {
            for t in &name.turns {
                let _ = write!(state, "t{}:{}", t.id, at(t.until));
            }
            for e in &name.waiters {
                let _ = write!(state, "w{}:{}", e.id, e.tx.is_closed());
            }
        }
        state
    }

    /// The tokens inside their critical section.
    fn inside(&self) -> Vec<String> {
        let mut inside: Vec<String> = self
            .actors
            .iter()
            .filter(|a| matches!(a.task, Task::Holds { .. }))
            .map(|a| a.token.clone())
            .collect();
        if self.other == Other::Holds {
            inside.push("e".into());
        }
        inside
    }

    fn step(&mut self, event: Event) -> Result<(), String> {
        let now = self.now();
        self.trace.push(format!("{event:?}"));
        match event {
            Event::Recv(i) => {
                let here = match &mut self.actors[i].task {
                    Task::Waiting(here) | Task::LastCall(here) => here,
                    _ => unreachable!(),
                };
                let handed = here.rx.try_recv().expect("a value was there");
                self.actors[i].task = Task::Handed(handed);
            }
            Event::Deadline(i) => {
                let deadline = self.actors[i].deadline;
                self.advance_to(deadline);
                let actor = &mut self.actors[i];
                match std::mem::replace(&mut actor.task, Task::Done) {
                    Task::Waiting(mut here) => {
                        actor.task = match here.give_up() {
                            // Never named: one last attempt with its token.
                            GaveUp::Left => Task::Asking {
                                turn: None,
                                late: true,
                                seen: None,
                                owes: false,
                            },
                            GaveUp::Named => Task::LastCall(here),
                        };
                        let gave_up = matches!(actor.task, Task::LastCall(_));
                        let _ = write!(self.trace_line(), " -> named: {gave_up}");
                    }
                    Task::Asking { turn, owes, .. } => {
                        actor.task = Task::Asking {
                            turn,
                            late: true,
                            seen: None,
                            owes,
                        };
                    }
                    _ => unreachable!(),
                }
            }
            Event::Overdue(i) => {
                let Task::Waiting(here) = &self.actors[i].task else {
                    unreachable!()
                };
                if let Some(turn) = here.overdue(now) {
                    self.actors[i].task = Task::Asking {
                        turn: Some(turn),
                        late: false,
                        seen: None,
                        owes: false,
                    };
                }
            }
            Event::Bound(i) => {
                let Task::LastCall(mut here) =
                    std::mem::replace(&mut self.actors[i].task, Task::Done)
                else {
                    unreachable!()
                };
                self.advance_to(now + SETTLE);
                if let Some(handed) = here.abandon() {
                    self.actors[i].task = Task::Handed(handed);
                }
            }
            Event::Claim(i) => {
                let Task::Handed(handed) = std::mem::replace(&mut self.actors[i].task, Task::Done)
                else {
                    unreachable!()
                };
                let (turn, how) = handed.claim();
                let late = self.now() >= self.actors[i].deadline;
                self.actors[i].task = match how {
                    How::Granted { sent, .. } => {
                        turn.held(sent, LEASE);
                        if self.redis.owner.as_deref() != Some(&self.actors[i].token) {
                            return Err(format!(
                                "{} was told it was granted a lock that is {:?}'s",
                                self.actors[i].token, self.redis.owner
                            ));
                        }
                        Task::Holds { turn: Some(turn) }
                    }
                    How::Ask { queued } => {
                        turn.asking(self.actors[i].deadline);
                        Task::Asking {
                            turn: Some(turn),
                            late,
                            seen: None,
                            owes: queued,
                        }
                    }
                };
            }
            Event::Attempt(i) => {
                let Task::Asking {
                    turn, late, owes, ..
                } = std::mem::replace(&mut self.actors[i].task, Task::Done)
                else {
                    unreachable!()
                };
                let token = self.actors[i].token.clone();
                let taken = self.redis.attempt(&token, !late);
                let _ = write!(self.trace_line(), " -> taken: {}", taken.is_some());
                self.actors[i].task = match taken {
                    Some(_) => {
                        if let Some(turn) = &turn {
                            turn.held(self.now(), LEASE);
                        }
                        Task::Holds { turn }
                    }
                    // Timed out: the last attempt left the queue.
                    None if late => Task::Done,
                    None => Task::Asking {
                        turn,
                        late,
                        seen: Some(self.redis.version),
                        owes: owes || !late,
                    },
                };
            }
            Event::Drop(i) => {
                let token = self.actors[i].token.clone();
                match std::mem::replace(&mut self.actors[i].task, Task::Done) {
                    // Its acquisition's guard gives its token back.
                    Task::Asking { owes: true, .. } => {
                        self.background.owed.lock().unwrap().push(token);
                    }
                    // A release dropped on its way: its Passing tells the
                    // successor to ask.
                    Task::Releasing { passing, turn, .. } => {
                        drop(passing);
                        drop(turn);
                    }
                    other => drop(other),
                }
            }
            Event::Release(i) => {
                let Task::Holds { turn } = std::mem::replace(&mut self.actors[i].task, Task::Done)
                else {
                    unreachable!()
                };
                if self.actors[i].forgets {
                    // Its lease runs out; the turn is never dropped.
                    if let Some(turn) = turn {
                        self.forgotten.push(turn);
                    }
                    self.advance_to(now + LEASE);
                    self.redis.expire();
                    return Ok(());
                }
                let redis: Arc<dyn GiveBack> = self.background.clone();
                let (passing, turn) = match turn.map(|t| t.pass(&redis, &self.keys)) {
                    Some(Ok(passing)) => (Some(passing), None),
                    Some(Err(turn)) => (None, Some(turn)),
                    None => (None, None),
                };
                self.actors[i].task = Task::Releasing {
                    passing,
                    turn,
                    ran: None,
                    sent: now,
                };
            }
            Event::Run(i) => {
                let token = self.actors[i].token.clone();
                let Task::Releasing { passing, ran, .. } = &mut self.actors[i].task else {
                    unreachable!()
                };
                let successor = passing.as_ref().and_then(|p| p.successor(now));
                let successor = successor.map(|s| s.token.to_owned());
                *ran = Some(self.redis.release(&token, successor.as_deref()));
            }
            Event::Answer(i) | Event::Lost(i) => {
                let Task::Releasing {
                    passing,
                    turn,
                    ran,
                    sent,
                } = std::mem::replace(&mut self.actors[i].task, Task::Done)
                else {
                    unreachable!()
                };
                if let Some(passing) = passing {
                    let ran = ran.as_ref().expect("ran");
                    let seen = match event {
                        Event::Answer(_) => Ok((ran.0, ran.1.as_deref())),
                        _ => Err(()),
                    };
                    passing.deliver(seen, sent, false);
                }
                drop(turn);
            }
            Event::GiveBack(k) => {
                let token = self.background.owed.lock().unwrap().remove(k);
                if self.inside().contains(&token) {
                    return Err(format!(
                        "a give-back of {token} ran while its task holds a guard with it"
                    ));
                }
                self.redis.give_back(&token);
            }
            Event::Expire => self.redis.expire(),
            Event::OtherAttempt => {
                self.other = match self.redis.attempt("e", true) {
                    Some(_) => Other::Holds,
                    None => Other::Queued,
                };
            }
            Event::OtherRelease => {
                let _ = self.redis.release("e", None);
                self.other = Other::Done;
            }
        }
        let inside = self.inside();
        if inside.len() > 1 {
            return Err(format!("two holders: {inside:?}"));
        }
        if let Some(token) = inside.first()
            && self.redis.owner.as_deref() != Some(token)
        {
            return Err(format!(
                "{token} is inside its critical section, and the lock is {:?}'s",
                self.redis.owner
            ));
        }
        Ok(())
    }

    fn trace_line(&mut self) -> &mut String {
        self.trace.last_mut().expect("every step starts a line")
    }

    /// The checks once no event is left.
    fn finish(&mut self) -> Result<(), String> {
        for actor in &self.actors {
            if !matches!(actor.task, Task::Done) {
                return Err(format!("{} never finished", actor.token));
            }
        }
        if !self.owed().is_empty() {
            return Err(format!("give-backs left: {:?}", self.owed()));
        }
        // A newcomer, once every turn has ended, takes a turn at once.
        let end = {
            let names = lock(&self.queues.names);
            names
                .get(self.keys.lock.as_str())
                .and_then(|n| n.last_end())
        };
        if let Some(end) = end {
            self.advance_to(end + Duration::from_millis(1));
        }
        let deadline = self.now() + Duration::from_secs(1);
        match self.enter("newcomer", deadline) {
            Entered::Turn(turn) => drop(turn),
            Entered::Wait(_) => {
                return Err("a newcomer waits in the process though no turn counts".into());
            }
        }
        self.forgotten.clear();
        let names = lock(&self.queues.names);
        if !names.is_empty() {
            return Err("the name is left in the local queues".into());
        }
        Ok(())
    }
}

/// Runs one schedule, following `choices` and then the first event each
/// time, until no event is left or it reaches a state that an earlier
/// schedule reached (whose futures were explored from there); returns the
/// choices made (with how many there were at each step) and the failure,
/// if any.
fn run(
    scenario: Scenario,
    choices: &[usize],
    seen: &mut HashSet<String>,
) -> (Vec<(usize, usize)>, Result<(), String>, World) {
    let mut world = World::new(scenario);
    let mut made = Vec::new();
    loop {
        let events = world.enabled();
        if events.is_empty() {
            break;
        }
        let choice = choices.get(made.len()).copied().unwrap_or(0);
        made.push((choice, events.len()));
        if let Err(e) = world.step(events[choice]) {
            return (made, Err(e), world);
        }
        if made.len() > 200 {
            return (made, Err("more than 200 steps".into()), world);
        }
        if made.len() >= choices.len() && !seen.insert(world.state()) {
            return (made, Ok(()), world);
        }
    }
    let finished = world.finish();
    (made, finished, world)
}

/// What an exploration saw.
#[derive(Debug)]
struct Explored {
    schedules: u64,
    steps: u64,
}

/// Explores every schedule of `scenario`: the first failure, with its
/// schedule, or the counts.
fn explore(scenario: Scenario) -> Result<Explored, String> {
    let mut explored = Explored {
        schedules: 0,
        steps: 0,
    };
    let mut prefix: Vec<usize> = Vec::new();
    let mut seen = HashSet::new();
    loop {
        let (mut made, result, world) = run(scenario, &prefix, &mut seen);
        explored.schedules += 1;
        explored.steps += made.len() as u64;
        if let Err(e) = result {
            return Err(format!(
                "{e}\nafter schedule {} of the exploration:\n  {}",
                explored.schedules,
                world.trace.join("\n  ")
            ));
        }
        // The next schedule: the last choice that has another option.
        let mut next = None;
        while let Some((choice, of)) = made.pop() {
            if choice + 1 < of {
                let mut p: Vec<usize> = made.iter().map(|&(c, _)| c).collect();
                p.push(choice + 1);
                next = Some(p);
                break;
            }
        }
        match next {
            Some(p) => prefix = p,
            None => break,
        }
    }
    Ok(explored)
}

#[cfg(test)]
mod explore {
    use super::*;

    fn explored(scenario: Scenario) -> Explored {
        let explored = explore(scenario).unwrap_or_else(|e| panic!("{e}"));
        eprintln!("{explored:?}");
        explored
    }

    /// The holder's release names a waiter whose deadline may fire at any
    /// step of the release: the release's answer may be read, lost, or
    /// the release dropped.
    #[test]
    fn a_named_waiter_whose_deadline_fires_during_the_release() {
        explored(Scenario {
            waiters: &[(100, false)],
            forgets: false,
            other: false,
            drop_releases: true,
        });
    }

    /// The same with a task of another process queued in Redis, and a
    /// waiter whose future may be dropped at every await.
    #[test]
    fn with_a_task_of_another_process_and_dropped_futures() {
        explored(Scenario {
            waiters: &[(100, true)],
            forgets: false,
            other: true,
            drop_releases: true,
        });
    }

    /// Two waiters: the hand-over goes on from the first to the second.
    #[test]
    fn two_waiters_hand_over_in_turn() {
        explored(Scenario {
            waiters: &[(100, true), (200, false)],
            forgets: false,
            other: false,
            drop_releases: true,
        });
    }

    /// Three waiters that may each be dropped or time out, a task of
    /// another process, and releases that may be dropped: the largest
    /// scenario: about 1.6 million schedules, minutes in a debug build, so
    /// it runs on demand: `cargo test --release -p lockattr-runtime --lib
    /// explore -- --include-ignored`.
    #[test]
    #[ignore = "minutes in a debug build; run on demand"]
    fn three_waiters_another_process_and_every_drop() {
        explored(Scenario {
            waiters: &[(100, true), (150, true), (200, true)],
            forgets: false,
            other: true,
            drop_releases: true,
        });
    }

    /// A holder that forgets its guard: the waiters go to Redis once its
    /// lease ends, and the process has one turn that counts again.
    #[test]
    fn a_forgotten_guard_strands_nobody() {
        explored(Scenario {
            waiters: &[(20_000, false), (30_000, true)],
            forgets: true,
            other: true,
            drop_releases: false,
        });
    }
}
