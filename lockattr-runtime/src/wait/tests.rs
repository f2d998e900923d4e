//! The deterministic explorer of the Redis-queue loop: every order of the
//! events of a few acquisitions in different processes, around one lock,
//! run through the real loop ([`waiting`]) with a scripted Redis.
//!
//! Each process runs one acquisition: the real [`Acquisition`] driven by
//! the real [`waiting`], on an [`Explored`] side. Every call the loop makes
//! on its side waits until the explorer chooses an event that ends it, so
//! an event is one step a real process takes between two awaits:
//! - Redis runs a process's attempt or give-back (`Run`), and the answer is
//!   read (`Answer`) or lost on a broken connection (`Lose`, after the
//!   request ran or before), or the answer does not come in time and the
//!   request runs later (`Stall`, then `Late`: at any step before the
//!   process's next request, which goes to Redis on the same connection
//!   after it); answers are delayed by any other events in between;
//! - a notice is delivered (`Notice`: subscribed, handed, another waiter
//!   handed), or lost because nobody listened when it was published;
//! - a sleep's time comes (`Time`), which moves the explorer's clock: the
//!   deadlines of every process fire between any two steps of another;
//! - the future is dropped at an await (`Drop`), and what it owed is given
//!   back in the background (`Later`, one give-back each);
//! - the holder of the lock releases it (`Release`), or its lease ends
//!   (`Expire`: a crashed holder);
//! - an attempt that took the lock is not acknowledged by the replicas
//!   (`Unacked`): the grant holds in Redis, the answer is
//!   `LockError::Replicas`.
//!
//! Redis is a model of what the scripts decide for one lock (`acquire.lua`,
//! `release.lua`): the holder and its fencing token, the counter, the FIFO
//! queue with each waiter's deadline, and the notices of a hand-over.
//!
//! The search is a depth-first enumeration of every schedule (stateless:
//! each schedule replays from the start, following a prefix of choices),
//! with budgets on the faults (lost answers, dropped futures), as
//! `local::tests` does for the process-local queue.
//!
//! The oracles, after every step:
//! - exclusion: at most one holder (a process whose loop returned a grant,
//!   not released yet, or the first holder);
//! - one claimant: every live holder's token is the one Redis holds, with
//!   the fencing token it was granted (a give-back of a granted token, or a
//!   grant Redis never made, breaks it);
//! - fencing: each grant's fencing token is above every earlier grant's;
//! - truth: a process whose error says its grant was given back finds
//!   none of its tokens holding the lock when it is told;
//! - no lost wake-up: a process asleep while Redis holds the lock for the
//!   token it listens with has a notice on its way (a hand-over published
//!   before it listened is caught by the `Subscribed` that follows);
//! - at the end: every acquisition finished, every give-back owed ran, and
//!   Redis holds nothing and queues nobody.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use super::acquisition::{Acquisition, Side, Woke, Won, waiting};
use crate::LockError;
use crate::backend::Wake;
use crate::backend::shared::Attempt;

/// Every holder's lease: longer than any scenario, so a lease ends only
/// where a scenario makes it (`Expire`).
const LEASE: Duration = Duration::from_secs(10);

/// A grant the replicas did not acknowledge (`Unacked`): it holds on the
/// master, and the loop must give it back before it returns the error.
fn unacked() -> LockError {
    LockError::Replicas {
        server: "explored:6379".into(),
        acknowledged: 0,
        wanted: 1,
        waited: Duration::from_millis(100),
        held_until: None,
    }
}

/// The name, for errors.
const NAME: &str = "explored";

/// The first holder's token.
const FIRST: &str = "first";

/// A lost answer: the connection broke after the request was written, so
/// it may have run (retried with a new token, the old one given back).
fn cut() -> LockError {
    let reset = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
    LockError::from_redis("explored:6379", redis::RedisError::from(reset))
}

/// The lock in Redis.
#[derive(Default)]
struct Redis {
    /// The holder's token, its fencing token, and when its lease ends.
    holder: Option<(String, u64, Instant)>,
    /// The fencing counter.
    counter: u64,
    /// The queue: each waiter's token and deadline, oldest first.
    queue: Vec<(String, Instant)>,
}

/// A call of a process's loop on its side, waiting for its event.
#[derive(Debug, Clone)]
enum Call {
    Attempt {
        token: String,
        left: Duration,
        queued: bool,
    },
    GiveBack {
        token: String,
    },
    Sleep {
        until: Instant,
        notices: bool,
    },
}

/// How a call ends.
enum Reply {
    Attempt(Result<Attempt, LockError>),
    GiveBack(Result<(), LockError>),
    Woke(Woke),
}

/// One process and its acquisition.
#[derive(Default)]
struct Process {
    /// The call its loop waits on.
    call: Option<Call>,
    /// The call ran in Redis; its reply is kept until read (or lost).
    ran: Option<Reply>,
    /// The reply to hand to the loop at its next poll.
    reply: Option<Reply>,
    /// The token whose notices reach it.
    listening: Option<String>,
    /// Notices published to it, not yet delivered.
    inbox: Vec<Wake>,
    /// Tokens its dropped or ended loop gave back in the background.
    later: Vec<String>,
    /// The loop ended: with its grant's token and fencing token, or an
    /// error.
    ended: Option<Result<(String, u64), String>>,
    /// Its grant was released.
    released: bool,
    /// Its future was dropped.
    dropped: bool,
    /// Requests whose answer timed out, still on their way to Redis.
    late: Vec<Call>,
    /// The fingerprint of its acquisition at its last await.
    acquisition: u64,
    /// Every token its attempts sent.
    tokens: HashSet<String>,
}

/// What every side and the explorer share.
struct World {
    /// When the scenario starts: every time is fingerprinted as an offset.
    start: Instant,
    clock: Instant,
    /// A number for each token, in the order they appear (tokens are
    /// random; their order is not).
    names: HashMap<String, usize>,
    redis: Redis,
    processes: Vec<Process>,
    /// The first holder still holds (it has not released, nor expired).
    first_holds: bool,
    /// The largest fencing token granted so far.
    last_fence: u64,
    /// The steps so far, for the failure's report.
    steps: Vec<String>,
    /// What an oracle found while a loop ran.
    fault: Option<String>,
}

type Shared = Rc<RefCell<World>>;

impl World {
    /// Ends the holder's lease when its time has come.
    fn expire(&mut self) {
        if let Some((_, _, until)) = &self.redis.holder
            && self.clock >= *until
        {
            self.redis.holder = None;
        }
    }

    /// `acquire.lua` for `token`.
    fn attempt(&mut self, token: &str, left: Duration, queued: bool) -> Attempt {
        self.expire();
        let now = self.clock;
        match &mut self.redis.holder {
            None => {
                self.redis.counter += 1;
                let fence = self.redis.counter;
                self.redis.holder = Some((token.to_owned(), fence, now + LEASE));
                if queued {
                    self.redis.queue.retain(|(t, _)| t != token);
                }
                Attempt::taken(fence, 0)
            }
            Some((holder, fence, until)) if holder == token => {
                *until = now + LEASE;
                Attempt::taken(*fence, 0)
            }
            Some((_, _, until)) => {
                let pttl = until.saturating_duration_since(now);
                if left.is_zero() {
                    self.redis.queue.retain(|(t, _)| t != token);
                } else if !self.redis.queue.iter().any(|(t, _)| t == token) {
                    self.redis.queue.push((token.to_owned(), now + left));
                }
                Attempt::Busy(Some(pttl))
            }
        }
    }

    /// `release.lua` for `token`: hands the lock to the oldest live waiter
    /// if the token holds it, or takes the token out of the queue.
    fn give_back(&mut self, token: &str) {
        self.expire();
        if self.redis.holder.as_ref().is_none_or(|(t, ..)| t != token) {
            self.redis.queue.retain(|(t, _)| t != token);
            return;
        }
        self.redis.holder = None;
        while !self.redis.queue.is_empty() {
            let (waiter, deadline) = self.redis.queue.remove(0);
            if deadline < self.clock {
                continue;
            }
            self.redis.counter += 1;
            let fence = self.redis.counter;
            self.redis.holder = Some((waiter.clone(), fence, self.clock + LEASE));
            for process in &mut self.processes {
                match &process.listening {
                    Some(t) if *t == waiter => process.inbox.push(Wake::Handed {
                        fencing_token: fence,
                    }),
                    Some(_) => process.inbox.push(Wake::Rearm { lease: LEASE }),
                    None => {}
                }
            }
            return;
        }
    }

    /// What decides the next steps: Redis, each process and its
    /// acquisition, and the faults left (`budgets`).
    fn fingerprint(&mut self, budgets: (usize, usize, usize)) -> u64 {
        let mut h = DefaultHasher::new();
        let start = self.start;
        let at = |t: Instant| t.saturating_duration_since(start);
        let names = &mut self.names;
        let mut n = |t: &str| numbered(names, t);
        (
            at(self.clock),
            self.redis.counter,
            self.first_holds,
            self.last_fence,
            budgets,
        )
            .hash(&mut h);
        if let Some((t, fence, until)) = &self.redis.holder {
            (n(t), fence, at(*until)).hash(&mut h);
        }
        for (t, deadline) in &self.redis.queue {
            (n(t), at(*deadline)).hash(&mut h);
        }
        for p in &self.processes {
            match &p.call {
                Some(Call::Attempt {
                    token,
                    left,
                    queued,
                }) => (0, n(token), left, queued).hash(&mut h),
                Some(Call::GiveBack { token }) => (1, n(token)).hash(&mut h),
                Some(Call::Sleep { until, notices }) => (2, at(*until), notices).hash(&mut h),
                None => 3.hash(&mut h),
            }
            match &p.ran {
                Some(Reply::Attempt(Ok(Attempt::Taken { fencing_token, .. }))) => {
                    (0, fencing_token).hash(&mut h)
                }
                Some(Reply::Attempt(Ok(Attempt::Busy(first_end)))) => (1, first_end).hash(&mut h),
                Some(_) => 2.hash(&mut h),
                None => 3.hash(&mut h),
            }
            p.listening.as_deref().map(&mut n).hash(&mut h);
            format!("{:?}", p.inbox).hash(&mut h);
            p.later
                .iter()
                .map(|t| n(t))
                .collect::<Vec<_>>()
                .hash(&mut h);
            match &p.ended {
                Some(Ok((t, fence))) => (0, n(t), fence).hash(&mut h),
                Some(Err(e)) => (1, e).hash(&mut h),
                None => 2.hash(&mut h),
            }
            for late in &p.late {
                match late {
                    Call::Attempt {
                        token,
                        left,
                        queued,
                    } => (0, n(token), left, queued).hash(&mut h),
                    Call::GiveBack { token } => (1, n(token)).hash(&mut h),
                    Call::Sleep { .. } => {}
                }
            }
            let mut tokens: Vec<usize> = p.tokens.iter().map(|t| n(t)).collect();
            tokens.sort_unstable();
            tokens.hash(&mut h);
            (p.released, p.dropped, p.acquisition).hash(&mut h);
        }
        h.finish()
    }

    /// Runs a request in Redis.
    fn run_call(&mut self, call: &Call) -> Option<Reply> {
        match call {
            Call::Attempt {
                token,
                left,
                queued,
            } => Some(Reply::Attempt(Ok(self.attempt(token, *left, *queued)))),
            Call::GiveBack { token } => {
                self.give_back(token);
                Some(Reply::GiveBack(Ok(())))
            }
            Call::Sleep { .. } => None,
        }
    }

    /// Runs the process's timed-out requests still on their way: they are
    /// ahead of its next request on the connection.
    fn run_late(&mut self, index: usize) {
        for late in std::mem::take(&mut self.processes[index].late) {
            self.run_call(&late);
        }
    }

    /// The oracles of every step.
    fn check(&self) -> Result<(), String> {
        if let Some(fault) = &self.fault {
            return Err(fault.clone());
        }
        let live: Vec<&(String, u64)> = self
            .processes
            .iter()
            .filter(|p| !p.released)
            .filter_map(|p| p.ended.as_ref()?.as_ref().ok())
            .collect();
        if live.len() + usize::from(self.first_holds) > 1 {
            return Err(format!(
                "two holders: {live:?}, first: {}",
                self.first_holds
            ));
        }
        // No wake-up is lost: a process asleep while Redis holds its lock
        // for the token it listens with has a notice on its way.
        for (i, p) in self.processes.iter().enumerate() {
            if let (Some(Call::Sleep { .. }), Some(token), Some((holder, ..))) =
                (&p.call, &p.listening, &self.redis.holder)
                && token == holder
                && p.inbox.is_empty()
            {
                return Err(format!(
                    "process {i} sleeps with no notice while it holds the lock"
                ));
            }
        }
        for (token, fence) in live {
            match &self.redis.holder {
                Some((t, f, _)) if t == token && f == fence => {}
                other => {
                    return Err(format!(
                        "a holder's grant ({token}, {fence}) is not Redis's: {other:?}"
                    ));
                }
            }
        }
        Ok(())
    }

    /// The oracles of the end: nothing left to run, nothing left in Redis.
    fn check_end(&mut self) -> Result<(), String> {
        if let Some(p) = self.processes.iter().position(|p| p.call.is_some()) {
            return Err(format!(
                "process {p} is stuck in {:?}",
                self.processes[p].call
            ));
        }
        self.expire();
        if self.redis.holder.is_some() || !self.redis.queue.is_empty() {
            return Err(format!(
                "left in Redis: holder {:?}, queue {:?}",
                self.redis.holder, self.redis.queue
            ));
        }
        Ok(())
    }
}

/// The number of `token` (numbered in the order tokens appear).
fn numbered(names: &mut HashMap<String, usize>, token: &str) -> usize {
    let next = names.len();
    *names.entry(token.to_owned()).or_insert(next)
}

/// A process's side: its calls wait for the explorer's events.
struct Explored {
    world: Shared,
    index: usize,
}

impl Explored {
    /// Waits until the explorer replies to `call`.
    async fn call(&mut self, call: Call) -> Reply {
        self.world.borrow_mut().processes[self.index].call = Some(call);
        std::future::poll_fn(|_| {
            let mut world = self.world.borrow_mut();
            let process = &mut world.processes[self.index];
            match process.reply.take() {
                Some(reply) => {
                    process.call = None;
                    Poll::Ready(reply)
                }
                None => Poll::Pending,
            }
        })
        .await
    }
}

impl Side for Explored {
    fn now(&self) -> Instant {
        self.world.borrow().clock
    }

    async fn attempt(
        &mut self,
        token: &str,
        left: Duration,
        queued: bool,
    ) -> Result<Attempt, LockError> {
        let token = token.to_owned();
        match self
            .call(Call::Attempt {
                token,
                left,
                queued,
            })
            .await
        {
            Reply::Attempt(answer) => answer,
            _ => unreachable!("an attempt is answered as one"),
        }
    }

    async fn give_back(&mut self, token: &str) -> Result<(), LockError> {
        let token = token.to_owned();
        match self.call(Call::GiveBack { token }).await {
            Reply::GiveBack(done) => done,
            _ => unreachable!("a give-back is answered as one"),
        }
    }

    fn listen(&mut self, token: &str, warm: bool) -> bool {
        if warm {
            // No channel is subscribed before the first wait.
            return false;
        }
        let mut world = self.world.borrow_mut();
        let process = &mut world.processes[self.index];
        process.listening = Some(token.to_owned());
        process.inbox.push(Wake::Subscribed);
        true
    }

    fn stop_listening(&mut self) {
        let mut world = self.world.borrow_mut();
        let process = &mut world.processes[self.index];
        process.listening = None;
        process.inbox.clear();
    }

    async fn sleep(&mut self, until: Instant, notices: bool) -> Woke {
        match self.call(Call::Sleep { until, notices }).await {
            Reply::Woke(woke) => woke,
            _ => unreachable!("a sleep ends with a wake-up"),
        }
    }

    fn give_back_later(&mut self, tokens: Vec<String>) {
        self.world.borrow_mut().processes[self.index]
            .later
            .extend(tokens);
    }

    fn notice_grants(&self) -> bool {
        true
    }

    fn one_name(&self) -> bool {
        true
    }

    fn lease(&self) -> Duration {
        LEASE
    }

    fn before_await(&mut self, acquisition: &Acquisition<'_>) {
        let mut world = self.world.borrow_mut();
        let start = world.start;
        let names = &mut world.names;
        let fingerprint = acquisition.fingerprint(start, &mut |t| numbered(names, t));
        world.processes[self.index].acquisition = fingerprint;
    }
}

/// One step the explorer may choose.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Event {
    /// Redis runs the process's attempt or give-back.
    Run(usize),
    /// The process reads the answer of its call that ran.
    Answer(usize),
    /// The process's attempt that took the lock is not acknowledged by
    /// the replicas: the grant holds in Redis, the answer is
    /// `LockError::Replicas`.
    Unacked(usize),
    /// The process's connection breaks: the answer is lost (its request
    /// ran, or not).
    Lose(usize),
    /// The process's answer times out; its request runs later.
    Stall(usize),
    /// The process's oldest timed-out request runs.
    Late(usize),
    /// The first notice of the process's inbox reaches its sleep.
    Notice(usize),
    /// The process's sleep ends at its time.
    Time(usize),
    /// The process's future is dropped.
    Drop(usize),
    /// One give-back the process left to the background runs.
    Later(usize),
    /// The process releases its grant.
    Release(usize),
    /// The first holder releases.
    ReleaseFirst,
    /// The first holder's lease ends (it crashed).
    Expire,
}

/// A scenario: the acquire time of each process, and the fault budgets.
#[derive(Clone, Copy)]
struct Scenario {
    /// Each process's acquire time, in milliseconds.
    waits: &'static [u64],
    /// How many answers may be lost in one schedule.
    losses: usize,
    /// How many futures may be dropped in one schedule.
    drops: usize,
    /// Whether the first holder may crash instead of releasing.
    crash: bool,
    /// How many grants the replicas may leave unacknowledged.
    unacked: usize,
}

type Loop = Pin<Box<dyn Future<Output = Result<Won, LockError>>>>;

/// One schedule, running.
struct Run {
    world: Shared,
    loops: Vec<Option<Loop>>,
    scenario: Scenario,
    losses: usize,
    drops: usize,
    unacked: usize,
}

impl Run {
    fn new(scenario: Scenario) -> Run {
        let start = Instant::now();
        let world = Rc::new(RefCell::new(World {
            start,
            clock: start,
            names: HashMap::new(),
            redis: Redis {
                holder: Some((FIRST.to_owned(), 1, start + LEASE)),
                counter: 1,
                queue: Vec::new(),
            },
            processes: scenario.waits.iter().map(|_| Process::default()).collect(),
            first_holds: true,
            last_fence: 1,
            steps: Vec::new(),
            fault: None,
        }));
        let loops = (0..scenario.waits.len())
            .map(|index| {
                let mut side = Explored {
                    world: world.clone(),
                    index,
                };
                let token = format!("p{index}");
                let acquisition = Acquisition::new(
                    NAME,
                    token,
                    (start, Duration::from_millis(scenario.waits[index])),
                    false,
                )
                .without_jitter();
                let run: Loop = Box::pin(async move { waiting(&mut side, acquisition).await });
                Some(run)
            })
            .collect();
        let mut run = Run {
            world,
            loops,
            scenario,
            losses: 0,
            drops: 0,
            unacked: 0,
        };
        for index in 0..scenario.waits.len() {
            run.poll(index);
        }
        run
    }

    /// Polls the process's loop up to its next call (or its end).
    fn poll(&mut self, index: usize) {
        let Some(fut) = &mut self.loops[index] else {
            return;
        };
        let mut cx = Context::from_waker(Waker::noop());
        if let Poll::Ready(done) = fut.as_mut().poll(&mut cx) {
            self.loops[index] = None;
            let mut world = self.world.borrow_mut();
            let ended = done
                .map(|won| (won.grant.token, won.grant.fencing_token))
                .map_err(|e| e.to_string());
            if let Ok((token, fence)) = &ended {
                world
                    .steps
                    .push(format!("process {index} won {token} ({fence})"));
                if *fence <= world.last_fence && world.fault.is_none() {
                    world.fault = Some(format!(
                        "fencing token {fence} granted after {}",
                        world.last_fence
                    ));
                }
                world.last_fence = world.last_fence.max(*fence);
            }
            if let Err(e) = &ended
                && e.contains("was given back")
                && let Some((holder, ..)) = &world.redis.holder
                && world.processes[index].tokens.contains(holder)
                && world.fault.is_none()
            {
                world.fault = Some(format!(
                    "process {index} was told its grant was given back, and Redis holds it: {e}"
                ));
            }
            world.processes[index].ended = Some(ended);
            world.processes[index].acquisition = 0;
        }
    }

    /// The events enabled now.
    fn events(&self) -> Vec<Event> {
        let world = self.world.borrow();
        let mut events = Vec::new();
        if world.first_holds {
            events.push(Event::ReleaseFirst);
            if self.scenario.crash {
                events.push(Event::Expire);
            }
        }
        for (i, p) in world.processes.iter().enumerate() {
            match &p.call {
                Some(Call::Attempt { .. } | Call::GiveBack { .. }) => {
                    if p.ran.is_none() {
                        events.push(Event::Run(i));
                    } else {
                        events.push(Event::Answer(i));
                    }
                    if self.unacked < self.scenario.unacked
                        && matches!(p.ran, Some(Reply::Attempt(Ok(Attempt::Taken { .. }))))
                    {
                        events.push(Event::Unacked(i));
                    }
                    if self.losses < self.scenario.losses {
                        events.push(Event::Lose(i));
                        if p.ran.is_none() {
                            events.push(Event::Stall(i));
                        }
                    }
                }
                Some(Call::Sleep { notices, .. }) => {
                    if *notices && !p.inbox.is_empty() {
                        events.push(Event::Notice(i));
                    }
                    events.push(Event::Time(i));
                }
                None => {}
            }
            if p.call.is_some() && self.drops < self.scenario.drops {
                events.push(Event::Drop(i));
            }
            if !p.later.is_empty() {
                events.push(Event::Later(i));
            }
            if !p.late.is_empty() {
                events.push(Event::Late(i));
            }
            if matches!(p.ended, Some(Ok(_))) && !p.released {
                events.push(Event::Release(i));
            }
        }
        events
    }

    /// Takes one step.
    fn step(&mut self, event: Event) {
        let mut world = self.world.borrow_mut();
        world.steps.push(format!("{event:?}"));
        let mut poll = None;
        match event {
            Event::Run(i) => {
                world.run_late(i);
                let call = world.processes[i].call.clone();
                if let Some(Call::Attempt { token, .. }) = &call {
                    world.processes[i].tokens.insert(token.clone());
                }
                let reply = call.and_then(|call| world.run_call(&call));
                world.processes[i].ran = Some(reply.expect("only a request runs"));
            }
            Event::Unacked(i) => {
                self.unacked += 1;
                let process = &mut world.processes[i];
                process.ran = None;
                process.reply = Some(Reply::Attempt(Err(unacked())));
                poll = Some(i);
            }
            Event::Answer(i) => {
                let process = &mut world.processes[i];
                process.reply = process.ran.take();
                poll = Some(i);
            }
            Event::Lose(i) => {
                self.losses += 1;
                let process = &mut world.processes[i];
                let lost = match process.call {
                    Some(Call::Attempt { .. }) => Reply::Attempt(Err(cut())),
                    _ => Reply::GiveBack(Err(cut())),
                };
                process.ran = None;
                process.reply = Some(lost);
                poll = Some(i);
            }
            Event::Notice(i) => {
                let process = &mut world.processes[i];
                let wake = process.inbox.remove(0);
                process.reply = Some(Reply::Woke(Woke::Notice(wake)));
                poll = Some(i);
            }
            Event::Time(i) => {
                if let Some(Call::Sleep { until, .. }) = world.processes[i].call {
                    world.clock = world.clock.max(until);
                }
                world.processes[i].reply = Some(Reply::Woke(Woke::Time));
                poll = Some(i);
            }
            Event::Drop(i) => {
                self.drops += 1;
                let process = &mut world.processes[i];
                process.dropped = true;
                process.acquisition = 0;
                let call = process.call.take();
                // A request written before the drop still runs, later,
                // before what the drop gives back on the same connection.
                if process.ran.take().is_none()
                    && let Some(call @ (Call::Attempt { .. } | Call::GiveBack { .. })) = call
                {
                    process.late.push(call);
                }
                drop(world);
                // Its loop's drop gives back what it owed, in the background.
                self.loops[i] = None;
                return;
            }
            Event::Stall(i) => {
                self.losses += 1;
                let process = &mut world.processes[i];
                let late = process.call.clone().expect("a request is on its way");
                let lost = match late {
                    Call::Attempt { .. } => Reply::Attempt(Err(cut())),
                    _ => Reply::GiveBack(Err(cut())),
                };
                process.late.push(late);
                process.reply = Some(lost);
                poll = Some(i);
            }
            Event::Late(i) => {
                let late = world.processes[i].late.remove(0);
                world.run_call(&late);
            }
            Event::Later(i) => {
                world.run_late(i);
                let token = world.processes[i].later.remove(0);
                world.give_back(&token);
            }
            Event::Release(i) => {
                world.processes[i].released = true;
                if let Some(Ok((token, _))) = world.processes[i].ended.clone() {
                    world.give_back(&token);
                }
            }
            Event::ReleaseFirst => {
                world.first_holds = false;
                world.give_back(FIRST);
            }
            Event::Expire => {
                world.first_holds = false;
                world.clock = world
                    .clock
                    .max(world.redis.holder.as_ref().map_or(world.clock, |h| h.2));
                world.expire();
            }
        }
        drop(world);
        if let Some(i) = poll {
            self.poll(i);
        }
    }
}

/// What an exploration covered.
#[derive(Debug)]
struct Coverage {
    schedules: usize,
    steps: usize,
    longest: usize,
}

/// The longest schedule explored; longer is a loop that does not end.
const MAX_STEPS: usize = 200;

/// Runs one schedule: the choices of `prefix`, then the first event at each
/// step, recording how many events each step had. The failure names its
/// steps.
fn run(
    scenario: Scenario,
    prefix: &[usize],
    choices: &mut Vec<(usize, usize)>,
    seen: &mut HashSet<u64>,
) -> Result<usize, String> {
    choices.clear();
    let mut run = Run::new(scenario);
    let failed = |run: &Run, why: String| {
        let steps = run.world.borrow().steps.join("\n  ");
        Err(format!("{why}\nschedule:\n  {steps}"))
    };
    loop {
        if let Err(why) = run.world.borrow().check() {
            return failed(&run, why);
        }
        let events = run.events();
        if events.is_empty() {
            let end = run.world.borrow_mut().check_end();
            return match end {
                Ok(()) => Ok(choices.len()),
                Err(why) => failed(&run, why),
            };
        }
        if choices.len() >= MAX_STEPS {
            return failed(&run, format!("no end after {MAX_STEPS} steps"));
        }
        let pick = prefix.get(choices.len()).copied().unwrap_or(0);
        choices.push((pick, events.len()));
        run.step(events[pick]);
        // A state reached before: its continuations are explored from
        // there (past the prefix, which replays the way here).
        let budgets = (run.losses, run.drops, run.unacked);
        let fingerprint = run.world.borrow_mut().fingerprint(budgets);
        if !seen.insert(fingerprint) && choices.len() >= prefix.len() {
            return Ok(choices.len());
        }
    }
}

/// Every schedule of `scenario`, depth first.
fn explore(scenario: Scenario) -> Result<Coverage, String> {
    let mut coverage = Coverage {
        schedules: 0,
        steps: 0,
        longest: 0,
    };
    let mut prefix: Vec<usize> = Vec::new();
    let mut choices = Vec::new();
    let mut seen = HashSet::new();
    loop {
        let steps = run(scenario, &prefix, &mut choices, &mut seen)?;
        coverage.schedules += 1;
        coverage.steps += steps;
        coverage.longest = coverage.longest.max(steps);
        // The next schedule: the deepest step with an untried event.
        let Some(deepest) = (0..choices.len())
            .rev()
            .find(|&d| choices[d].0 + 1 < choices[d].1)
        else {
            return Ok(coverage);
        };
        prefix = choices[..deepest].iter().map(|&(pick, _)| pick).collect();
        prefix.push(choices[deepest].0 + 1);
    }
}

#[cfg(test)]
mod explore {
    use super::*;

    #[test]
    fn unacknowledged_grants_are_given_back_before_the_error() {
        explored(Scenario {
            waits: &[0, 200],
            losses: 1,
            drops: 1,
            crash: false,
            unacked: 1,
        });
    }

    fn explored(scenario: Scenario) -> Coverage {
        match explore(scenario) {
            Ok(coverage) => {
                eprintln!("{coverage:?}");
                coverage
            }
            Err(failure) => panic!("{failure}"),
        }
    }

    #[test]
    fn one_waiter_with_a_lost_answer_and_a_drop() {
        explored(Scenario {
            waits: &[300],
            losses: 1,
            drops: 1,
            crash: true,
            unacked: 0,
        });
    }

    #[test]
    fn two_processes_behind_a_holder() {
        explored(Scenario {
            waits: &[300, 300],
            losses: 0,
            drops: 0,
            crash: false,
            unacked: 0,
        });
    }

    #[test]
    fn two_processes_with_a_lost_answer() {
        explored(Scenario {
            waits: &[300, 200],
            losses: 1,
            drops: 0,
            crash: false,
            unacked: 0,
        });
    }

    #[test]
    fn two_processes_with_a_drop() {
        explored(Scenario {
            waits: &[300, 200],
            losses: 0,
            drops: 1,
            crash: true,
            unacked: 0,
        });
    }
}
