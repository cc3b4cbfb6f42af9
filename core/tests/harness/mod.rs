//! A deterministic driver for [`JobMachine`] tests, in the shape of quinn-proto's
//! `tests/util.rs` `Pair`: it plays the workers, the fetch and the clock.
//!
//! The [`Harness`] holds a machine, a simulated clock (a [`Duration`] that only moves when a test
//! or [`Harness::step`] moves it), `workers` simulated workers each holding at most one
//! [`Dispatch`], and a scripted fetch: per (job id, idx) a queue of [`Outcome`]s, `Done` once the
//! queue is empty. A worker's target goes as the driver's does: dispatched, its fetch returns
//! ([`JobMachine::handle_outcome`]), its outcome is stored ([`JobMachine::handle_stored`]). It
//! records every dispatch, completion, terminal status, cancel and event, each with a sequence
//! number, so a test asserts on exact sequences.
//!
//! After every input it drains the machine's events and checks that each one is a change and
//! that the last ones match the machine's getters, and that the machine's in-flight count equals
//! the number of busy simulated workers.

// Each test crate uses a different part of the harness.
#![allow(dead_code)]

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use rota_core::JobStatus;
use rota_core::machine::{
    Cancelled, Completion, Dispatch, Event, JobKey, JobMachine, MachineConfig, MachineError,
    Outcome, Store, Terminal,
};

/// The harness's default pause before a busy target is due again.
pub const RETRY_WAIT: Duration = Duration::from_secs(2);
/// The harness's default give-up time for a busy target.
pub const RETRY_FOR: Duration = Duration::from_secs(10);

/// `s` seconds.
pub fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

/// `ms` milliseconds.
pub fn ms(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

/// A dispatch a simulated worker took.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dispatched {
    /// Position in the harness's log of dispatches and completions.
    pub seq: usize,
    /// The simulated time.
    pub at: Duration,
    /// The worker that took it.
    pub worker: usize,
    /// The job's id.
    pub id: String,
    /// The target's index.
    pub idx: usize,
    /// The machine's `first` flag.
    pub first: bool,
}

/// A fetch a simulated worker returned, and the machine's decision for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completed {
    /// Position in the harness's log of dispatches and completions.
    pub seq: usize,
    /// The simulated time.
    pub at: Duration,
    /// The worker that returned it.
    pub worker: usize,
    /// The job's id.
    pub id: String,
    /// The target's index.
    pub idx: usize,
    /// What the scripted fetch returned.
    pub outcome: Outcome,
    /// What the machine said to store.
    pub store: Store,
    /// The terminal status the machine reported with the outcome.
    pub terminal: Option<Terminal>,
    /// When the outcome was stored (its sequence number), if it was.
    pub stored_seq: Option<usize>,
    /// The terminal status the machine reported once it was stored.
    pub stored_terminal: Option<Terminal>,
}

/// A simulated worker's target: fetching, or its outcome (completion `returned`) being stored.
#[derive(Debug, Clone)]
struct Held {
    d: Dispatch,
    seq: usize,
    returned: Option<usize>,
}

/// The deterministic driver. See the [module docs](self).
#[derive(Debug)]
pub struct Harness {
    /// The machine under test.
    pub machine: JobMachine,
    /// The simulated clock.
    pub now: Duration,
    workers: Vec<Option<Held>>,
    script: HashMap<(String, usize), VecDeque<Outcome>>,
    seq: usize,
    /// Every dispatch, in order.
    pub dispatches: Vec<Dispatched>,
    /// Every completion, in order.
    pub completions: Vec<Completed>,
    /// Every terminal status, from completions and from close, in order.
    pub terminals: Vec<Terminal>,
    /// Every successful cancel, in order.
    pub cancels: Vec<Cancelled>,
    /// Every event, in order.
    pub events: Vec<Event>,
    events_taken: usize,
    depth: usize,
    inflight: usize,
}

impl Harness {
    /// `workers` workers, [`RETRY_WAIT`] and [`RETRY_FOR`].
    pub fn new(workers: usize) -> Self {
        Self::with_config(MachineConfig {
            workers,
            retry_wait: RETRY_WAIT,
            retry_for: RETRY_FOR,
        })
    }

    /// A harness over a machine of this configuration, with `cfg.workers` simulated workers
    /// (at least one).
    pub fn with_config(cfg: MachineConfig) -> Self {
        Harness {
            machine: JobMachine::new(cfg),
            now: Duration::ZERO,
            workers: vec![None; cfg.workers.max(1)],
            script: HashMap::new(),
            seq: 0,
            dispatches: Vec::new(),
            completions: Vec::new(),
            terminals: Vec::new(),
            cancels: Vec::new(),
            events: Vec::new(),
            events_taken: 0,
            depth: 0,
            inflight: 0,
        }
    }

    /// Scripts the fetch of target `idx` of job `id`: these outcomes in order, then `Done`.
    pub fn script(&mut self, id: &str, idx: usize, outcomes: impl IntoIterator<Item = Outcome>) {
        self.script
            .entry((id.to_owned(), idx))
            .or_default()
            .extend(outcomes);
    }

    /// Submits job `id` of `targets` targets now; panics if the machine refuses.
    pub fn submit(&mut self, id: &str, targets: usize) -> JobKey {
        match self.try_submit(id, targets) {
            Ok(key) => key,
            Err(e) => panic!("submit {id}: {e}"),
        }
    }

    /// Submits job `id` of `targets` targets now.
    pub fn try_submit(&mut self, id: &str, targets: usize) -> Result<JobKey, MachineError> {
        let r = self.machine.submit(id, targets, self.now);
        self.settle();
        r
    }

    /// Cancels job `id` now.
    pub fn cancel(&mut self, id: &str) -> Option<Cancelled> {
        let r = self.machine.cancel(id, self.now);
        if let Some(c) = &r {
            self.cancels.push(c.clone());
        }
        self.settle();
        r
    }

    /// Closes the machine now; the terminal statuses it returns are recorded.
    pub fn close(&mut self) -> Vec<Terminal> {
        let ended = self.machine.close(self.now);
        self.terminals.extend(ended.iter().cloned());
        self.settle();
        ended
    }

    /// Moves the clock forward by `d`.
    pub fn advance(&mut self, d: Duration) {
        self.now += d;
    }

    /// Moves the clock to `t`, which must not be in the past.
    pub fn advance_to(&mut self, t: Duration) {
        assert!(t >= self.now, "the clock never goes back");
        self.now = t;
    }

    /// The lowest idle worker polls the machine; `None` if every worker is busy or the machine
    /// has nothing due.
    pub fn poll(&mut self) -> Option<Dispatched> {
        let worker = self.workers.iter().position(Option::is_none)?;
        let d = self.machine.poll_dispatch(self.now);
        let out = d.map(|d| {
            let rec = Dispatched {
                seq: self.next_seq(),
                at: self.now,
                worker,
                id: d.id.to_string(),
                idx: d.idx,
                first: d.first,
            };
            self.workers[worker] = Some(Held {
                d,
                seq: rec.seq,
                returned: None,
            });
            self.dispatches.push(rec.clone());
            rec
        });
        self.settle();
        out
    }

    /// The worker holding job `id`'s target returns its scripted outcome, which is stored.
    pub fn complete(&mut self, id: &str) -> Completed {
        let worker = self.worker_of(id);
        let outcome = self.next_outcome(worker);
        self.return_fetch(worker, outcome);
        self.store(worker)
    }

    /// The worker holding job `id`'s target returns `outcome`, whatever the script says, and it
    /// is stored.
    pub fn complete_with(&mut self, id: &str, outcome: Outcome) -> Completed {
        let worker = self.worker_of(id);
        self.return_fetch(worker, outcome);
        self.store(worker)
    }

    /// The fetch of job `id`'s target returns `outcome`; it is not stored yet.
    pub fn fetch_returns(&mut self, id: &str, outcome: Outcome) -> Completed {
        let worker = self.worker_of(id);
        self.return_fetch(worker, outcome)
    }

    /// The outcome of job `id`'s target, returned by [`fetch_returns`](Self::fetch_returns), is
    /// stored now.
    pub fn stored(&mut self, id: &str) -> Completed {
        let worker = self.worker_of(id);
        self.store(worker)
    }

    /// The oldest outcome being stored is stored; else the busy worker that took its target
    /// first returns its scripted outcome, and it is stored.
    pub fn complete_oldest(&mut self) -> Option<Completed> {
        let oldest = |storing: bool| {
            self.workers
                .iter()
                .enumerate()
                .filter_map(|(w, slot)| slot.as_ref().map(|h| (h, w)))
                .filter(|(h, _)| h.returned.is_some() == storing)
                .map(|(h, w)| (h.seq, w))
                .min()
                .map(|(_, w)| w)
        };
        if let Some(worker) = oldest(true) {
            return Some(self.store(worker));
        }
        let worker = oldest(false)?;
        let outcome = self.next_outcome(worker);
        self.return_fetch(worker, outcome);
        Some(self.store(worker))
    }

    /// One unit of work: an idle worker polls for a dispatch; else the oldest busy worker's
    /// target is finished (its fetch returns, if it had not, and the outcome is stored); else
    /// the clock moves to the machine's next wake-up. `false` when
    /// there is nothing to do: the run is quiescent.
    pub fn step(&mut self) -> bool {
        if self.workers.iter().any(Option::is_none) && self.poll().is_some() {
            return true;
        }
        if self.complete_oldest().is_some() {
            return true;
        }
        match self.machine.poll_timeout() {
            Some(t) if t > self.now => {
                self.now = t;
                true
            }
            _ => false,
        }
    }

    /// Steps until quiescent; panics if that takes more than `max_steps` steps. Returns the
    /// number of steps taken.
    pub fn drive_bounded(&mut self, max_steps: usize) -> usize {
        for n in 0..max_steps {
            if !self.step() {
                return n;
            }
        }
        panic!("the run did not settle in {max_steps} steps");
    }

    /// [`drive_bounded`](Self::drive_bounded) with a bound no test here comes near.
    pub fn drive(&mut self) -> usize {
        self.drive_bounded(10_000)
    }

    /// The dispatches as `"{id}{idx}"`, e.g. `["a0", "b0", "a1"]`.
    pub fn trace(&self) -> Vec<String> {
        self.dispatches
            .iter()
            .map(|d| format!("{}{}", d.id, d.idx))
            .collect()
    }

    /// The simulated times of the dispatches.
    pub fn dispatch_times(&self) -> Vec<Duration> {
        self.dispatches.iter().map(|d| d.at).collect()
    }

    /// The terminal statuses as (id, status, error), in order.
    pub fn statuses(&self) -> Vec<(String, JobStatus, &'static str)> {
        self.terminals
            .iter()
            .map(|t| (t.id.to_string(), t.status, t.error))
            .collect()
    }

    /// The events since the last call, oldest first.
    pub fn take_events(&mut self) -> Vec<Event> {
        let new = self.events[self.events_taken..].to_vec();
        self.events_taken = self.events.len();
        new
    }

    /// The ids of the jobs whose targets are in flight, by worker.
    pub fn busy(&self) -> Vec<Option<String>> {
        self.workers
            .iter()
            .map(|w| w.as_ref().map(|h| h.d.id.to_string()))
            .collect()
    }

    /// Checks that every job's targets were dispatched in order 0, 1, 2, … and each only after
    /// the outcome of the job's previous dispatch was stored (the same idx again after a busy
    /// outcome, the next one after a final one).
    pub fn assert_serial(&self) {
        let mut last: HashMap<&str, (usize, usize)> = HashMap::new();
        for d in &self.dispatches {
            if let Some(&(idx, seq)) = last.get(d.id.as_str()) {
                let back = self
                    .completions
                    .iter()
                    .find(|c| c.id == d.id && c.seq > seq)
                    .unwrap_or_else(|| {
                        panic!("{}{} dispatched while {idx} in flight", d.id, d.idx)
                    });
                let stored = back.stored_seq.unwrap_or(usize::MAX);
                assert!(stored < d.seq, "{}{} before {idx} was stored", d.id, d.idx);
                let want = if back.store.is_final() { idx + 1 } else { idx };
                assert_eq!(d.idx, want, "job {} out of order", d.id);
            } else {
                assert_eq!(d.idx, 0, "job {} did not start at target 0", d.id);
            }
            last.insert(&d.id, (d.idx, d.seq));
        }
    }

    fn next_seq(&mut self) -> usize {
        self.seq += 1;
        self.seq
    }

    fn worker_of(&self, id: &str) -> usize {
        self.workers
            .iter()
            .position(|w| w.as_ref().is_some_and(|h| &*h.d.id == id))
            .unwrap_or_else(|| panic!("no worker holds a target of job {id}"))
    }

    fn next_outcome(&mut self, worker: usize) -> Outcome {
        let Some(h) = &self.workers[worker] else {
            panic!("worker {worker} is idle");
        };
        self.script
            .get_mut(&(h.d.id.to_string(), h.d.idx))
            .and_then(VecDeque::pop_front)
            .unwrap_or(Outcome::Done)
    }

    fn return_fetch(&mut self, worker: usize, outcome: Outcome) -> Completed {
        let Some(h) = self.workers[worker].clone() else {
            panic!("worker {worker} is idle");
        };
        assert!(
            h.returned.is_none(),
            "the fetch of {}{} returned twice",
            h.d.id,
            h.d.idx
        );
        let (d, now) = (&h.d, self.now);
        let c: Completion = match self.machine.handle_outcome(d.key, d.idx, outcome, now) {
            Ok(c) => c,
            Err(e) => panic!("the outcome of {}{} was refused: {e}", d.id, d.idx),
        };
        if let Some(t) = &c.terminal {
            self.terminals.push(t.clone());
        }
        let rec = Completed {
            seq: self.next_seq(),
            at: now,
            worker,
            id: d.id.to_string(),
            idx: d.idx,
            outcome,
            store: c.store,
            terminal: c.terminal,
            stored_seq: None,
            stored_terminal: None,
        };
        self.workers[worker] = Some(Held {
            returned: Some(self.completions.len()),
            ..h
        });
        self.completions.push(rec.clone());
        self.settle();
        rec
    }

    fn store(&mut self, worker: usize) -> Completed {
        let Some(Held {
            d,
            returned: Some(at),
            ..
        }) = self.workers[worker].take()
        else {
            panic!("worker {worker} has no outcome to store");
        };
        let terminal = match self.machine.handle_stored(d.key, self.now) {
            Ok(t) => t,
            Err(e) => panic!("the stored outcome of {}{} was refused: {e}", d.id, d.idx),
        };
        if let Some(t) = &terminal {
            self.terminals.push(t.clone());
        }
        let seq = self.next_seq();
        let rec = &mut self.completions[at];
        rec.stored_seq = Some(seq);
        rec.stored_terminal = terminal;
        let rec = rec.clone();
        self.settle();
        rec
    }

    /// Drains the machine's events and checks them against its getters and the workers.
    fn settle(&mut self) {
        while let Some(e) = self.machine.poll_event() {
            match e {
                Event::Depth(n) => {
                    assert_ne!(n, self.depth, "Depth({n}) reported without a change");
                    self.depth = n;
                }
                Event::Inflight(n) => {
                    assert_ne!(n, self.inflight, "Inflight({n}) reported without a change");
                    self.inflight = n;
                }
            }
            self.events.push(e);
        }
        assert_eq!(
            self.depth,
            self.machine.live_jobs(),
            "last Depth vs live_jobs()"
        );
        assert_eq!(
            self.inflight,
            self.machine.inflight(),
            "last Inflight vs inflight()"
        );
        let busy = self.workers.iter().filter(|w| w.is_some()).count();
        assert_eq!(busy, self.machine.inflight(), "busy workers vs inflight()");
    }
}
