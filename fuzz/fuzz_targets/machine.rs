//! Fuzz target `machine`: arbitrary operation sequences driven into [`JobMachine`] (1 or 2
//! workers, retry_wait and retry_for from the input), beside [`Model`], a plain O(n) reference
//! scheduler (a `Vec` of jobs in submit order, a cursor index, linear scans).
//!
//! After every operation the machine's return value must equal the model's, and these rules are
//! asserted directly (the same list as `core/tests/model.rs`):
//! - per-job serial order: a dispatch names the job's next target, never while one is in flight;
//! - at most `workers` targets in flight;
//! - round-robin: the dispatched job is the model's choice (first ready job after the cursor);
//! - a terminal status exactly once per job, with the status its outcomes give (all done → done,
//!   all failed → failed, else partial) or `failed`/`runner closed` for a job live at close;
//! - a cancelled job never gets a terminal status;
//! - nothing dispatched after close, and every job live at close reported once (checked at the
//!   end, after closing and letting every in-flight target return and be stored);
//! - a busy target is dispatched again no earlier than `retry_wait` after its busy answer, and is
//!   given up exactly when it has been busy for longer than `retry_for` since its first busy
//!   answer;
//! - `poll_timeout` is the earliest pending retry (`None` once closed);
//! - each event is a change, and the last `Depth`/`Inflight` events equal
//!   `live_jobs()`/`inflight()`;
//! - never a panic.
#![no_main]

use std::sync::Arc;
use std::time::Duration;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use rota_core::JobStatus;
use rota_core::machine::{
    Cancelled, Completion, Dispatch, ERR_CLOSED, Event, JobKey, JobMachine, MachineConfig,
    MachineError, Outcome, Store, Terminal,
};

#[derive(Arbitrary, Debug, Clone, Copy)]
enum FOutcome {
    Done,
    Failed,
    Busy,
}

impl From<FOutcome> for Outcome {
    fn from(o: FOutcome) -> Self {
        match o {
            FOutcome::Done => Outcome::Done,
            FOutcome::Failed => Outcome::Failed,
            FOutcome::Busy => Outcome::Busy,
        }
    }
}

#[derive(Arbitrary, Debug)]
enum Op {
    /// A new job of `targets % 5` targets (0 is refused).
    Submit {
        targets: u8,
    },
    /// A job under an id used before (refused while that job is held).
    SubmitOld {
        which: u8,
        targets: u8,
    },
    /// An idle worker polls.
    Dispatch,
    /// The fetch of the `which`-th target being fetched returns.
    Complete {
        which: u8,
        outcome: FOutcome,
    },
    /// The `which`-th returned outcome is stored.
    Stored {
        which: u8,
    },
    /// Cancel the `which`-th id used (one past the end: an unknown id).
    Cancel {
        which: u8,
    },
    /// `ms % 4000` milliseconds pass.
    Advance {
        ms: u16,
    },
    /// `secs % 8` whole seconds pass.
    AdvanceSecs {
        secs: u8,
    },
    Close,
    /// An outcome for an arbitrary (key, idx), usually not in flight.
    Spurious {
        key: u8,
        idx: u8,
        outcome: FOutcome,
    },
    /// A store for an arbitrary key, usually with nothing to store.
    SpuriousStored {
        key: u8,
    },
}

#[derive(Arbitrary, Debug)]
struct Input {
    two_workers: bool,
    /// Whole seconds (`% 4`), so that advances of whole seconds hit the retry boundaries.
    retry_wait_secs: u8,
    /// Whole seconds (`% 13`).
    retry_for_secs: u8,
    ops: Vec<Op>,
}

const MAX_OPS: usize = 1000;

fuzz_target!(|input: Input| {
    let cfg = MachineConfig {
        workers: if input.two_workers { 2 } else { 1 },
        retry_wait: Duration::from_secs(u64::from(input.retry_wait_secs % 4)),
        retry_for: Duration::from_secs(u64::from(input.retry_for_secs % 13)),
    };
    let mut run = Run::new(cfg);
    for op in input.ops.iter().take(MAX_OPS) {
        run.apply(op);
    }
    run.finish();
});

// ---- the reference model ------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Live,
    Cancelled,
    /// Closed with a target in flight.
    Closing,
    /// Terminal, its last outcome not stored yet.
    Finished,
    /// The machine holds it no more.
    Gone,
}

#[derive(Debug)]
struct MJob {
    id: String,
    targets: usize,
    next: usize,
    done: usize,
    failed: usize,
    submitted: Duration,
    started: bool,
    /// From dispatch until the outcome is stored.
    inflight: bool,
    /// The outcome is in, not stored yet: the retry time it set, if any.
    storing: Option<Option<Duration>>,
    first_busy: Option<Duration>,
    last_busy: Option<Duration>,
    /// Waiting for a retry at this time (not yet promoted to ready).
    due: Option<Duration>,
    phase: Phase,
    terminals: u32,
    cancelled: bool,
    live_at_close: bool,
}

#[derive(Debug)]
struct Model {
    cfg: MachineConfig,
    jobs: Vec<MJob>,
    cursor: Option<usize>,
    closed: bool,
}

fn key_of(i: usize) -> JobKey {
    i as JobKey
}

impl Model {
    fn live(&self) -> usize {
        self.jobs
            .iter()
            .filter(|j| matches!(j.phase, Phase::Live | Phase::Closing))
            .count()
    }

    fn inflight(&self) -> usize {
        self.jobs.iter().filter(|j| j.inflight).count()
    }

    fn held(&self, id: &str) -> Option<usize> {
        self.jobs
            .iter()
            .position(|j| j.id == id && j.phase != Phase::Gone)
    }

    fn get(&mut self, key: JobKey) -> Result<&mut MJob, MachineError> {
        usize::try_from(key)
            .ok()
            .and_then(|i| self.jobs.get_mut(i))
            .filter(|j| j.phase != Phase::Gone)
            .ok_or(MachineError::UnknownJob)
    }

    fn submit(&mut self, id: &str, targets: usize, now: Duration) -> Result<JobKey, MachineError> {
        if self.closed {
            return Err(MachineError::Closed);
        }
        if targets == 0 {
            return Err(MachineError::NoTargets);
        }
        if self.held(id).is_some() {
            return Err(MachineError::DuplicateId);
        }
        self.jobs.push(MJob {
            id: id.to_owned(),
            targets,
            next: 0,
            done: 0,
            failed: 0,
            submitted: now,
            started: false,
            inflight: false,
            storing: None,
            first_busy: None,
            last_busy: None,
            due: None,
            phase: Phase::Live,
            terminals: 0,
            cancelled: false,
            live_at_close: false,
        });
        Ok(key_of(self.jobs.len() - 1))
    }

    fn dispatch(&mut self, now: Duration) -> Option<Dispatch> {
        if self.closed || self.inflight() >= self.cfg.workers {
            return None;
        }
        for j in &mut self.jobs {
            if j.phase == Phase::Live && j.due.is_some_and(|d| d <= now) {
                j.due = None;
            }
        }
        let n = self.jobs.len();
        let start = self.cursor.map_or(0, |c| c + 1);
        let i = (0..n).map(|off| (start + off) % n).find(|&i| {
            let j = &self.jobs[i];
            j.phase == Phase::Live && !j.inflight && j.due.is_none()
        })?;
        self.cursor = Some(i);
        let j = &mut self.jobs[i];
        // The rules, stated directly.
        assert!(j.idx_is_next_and_idle(), "serial order broken for {}", j.id);
        if let Some(busy) = j.last_busy {
            assert!(
                now >= busy + self.cfg.retry_wait,
                "{} retried at {now:?}, busy at {busy:?}, retry_wait {:?}",
                j.id,
                self.cfg.retry_wait
            );
        }
        let first = !j.started;
        j.started = true;
        j.inflight = true;
        Some(Dispatch {
            key: key_of(i),
            id: Arc::from(j.id.as_str()),
            idx: j.next,
            first,
        })
    }

    fn outcome(
        &mut self,
        key: JobKey,
        idx: usize,
        outcome: Outcome,
        now: Duration,
    ) -> Result<Completion, MachineError> {
        let cfg = self.cfg;
        let j = self.get(key)?;
        if !j.inflight || j.storing.is_some() || j.next != idx {
            return Err(MachineError::NotInFlight);
        }
        let store = match outcome {
            Outcome::Done => Store::Done,
            Outcome::Failed => Store::Failed,
            Outcome::Busy => {
                let first = *j.first_busy.get_or_insert(now);
                j.last_busy = Some(now);
                if now - first > cfg.retry_for {
                    Store::GiveUp
                } else if j.phase == Phase::Live {
                    Store::Pending {
                        retry_at: Some(now + cfg.retry_wait),
                    }
                } else {
                    Store::Pending { retry_at: None }
                }
            }
        };
        match store {
            Store::Pending { retry_at } => j.storing = Some(retry_at),
            _ => {
                j.storing = Some(None);
                j.next += 1;
                j.first_busy = None;
                j.last_busy = None;
                if store == Store::Done {
                    j.done += 1;
                } else {
                    j.failed += 1;
                }
            }
        }
        let terminal = match j.phase {
            Phase::Live | Phase::Closing if j.next == j.targets => {
                let status = match (j.done, j.failed) {
                    (_, 0) => JobStatus::Done,
                    (0, _) => JobStatus::Failed,
                    _ => JobStatus::Partial,
                };
                Some((status, ""))
            }
            Phase::Closing => Some((JobStatus::Failed, ERR_CLOSED)),
            _ => None,
        };
        let terminal = terminal.map(|(status, error)| {
            j.phase = Phase::Finished;
            j.report_terminal();
            Terminal {
                id: Arc::from(j.id.as_str()),
                status,
                error,
                elapsed: now - j.submitted,
            }
        });
        Ok(Completion { store, terminal })
    }

    fn stored(&mut self, key: JobKey, now: Duration) -> Result<Option<Terminal>, MachineError> {
        let j = self.get(key)?;
        let retry_at = j.storing.take().ok_or(MachineError::NotInFlight)?;
        j.inflight = false;
        Ok(match j.phase {
            Phase::Live => {
                j.due = retry_at;
                None
            }
            Phase::Closing => {
                j.phase = Phase::Gone;
                j.report_terminal();
                Some(Terminal {
                    id: Arc::from(j.id.as_str()),
                    status: JobStatus::Failed,
                    error: ERR_CLOSED,
                    elapsed: now - j.submitted,
                })
            }
            Phase::Cancelled | Phase::Finished | Phase::Gone => {
                j.phase = Phase::Gone;
                None
            }
        })
    }

    fn cancel(&mut self, id: &str, now: Duration) -> Option<Cancelled> {
        let j = self
            .jobs
            .iter_mut()
            .find(|j| j.id == id && j.phase == Phase::Live)?;
        j.phase = if j.inflight {
            Phase::Cancelled
        } else {
            Phase::Gone
        };
        j.due = None;
        j.cancelled = true;
        Some(Cancelled {
            id: Arc::from(id),
            inflight: j.inflight,
            elapsed: now - j.submitted,
        })
    }

    fn close(&mut self, now: Duration) -> Vec<Terminal> {
        if self.closed {
            return Vec::new();
        }
        self.closed = true;
        let mut ended = Vec::new();
        for j in self.jobs.iter_mut().filter(|j| j.phase == Phase::Live) {
            j.live_at_close = true;
            j.due = None;
            if j.inflight {
                j.phase = Phase::Closing;
            } else {
                j.phase = Phase::Gone;
                j.report_terminal();
                ended.push(Terminal {
                    id: Arc::from(j.id.as_str()),
                    status: JobStatus::Failed,
                    error: ERR_CLOSED,
                    elapsed: now - j.submitted,
                });
            }
        }
        ended
    }

    fn poll_timeout(&self) -> Option<Duration> {
        if self.closed {
            return None;
        }
        self.jobs
            .iter()
            .filter(|j| j.phase == Phase::Live)
            .filter_map(|j| j.due)
            .min()
    }
}

impl MJob {
    fn idx_is_next_and_idle(&self) -> bool {
        self.phase == Phase::Live
            && !self.inflight
            && self.storing.is_none()
            && self.next < self.targets
    }

    /// Terminal exactly once, never after cancel.
    fn report_terminal(&mut self) {
        assert!(!self.cancelled, "{} terminal after cancel", self.id);
        assert_eq!(self.terminals, 0, "{} terminal twice", self.id);
        self.terminals += 1;
    }
}

// ---- one run ------------------------------------------------------------------------------

struct Run {
    machine: JobMachine,
    model: Model,
    now: Duration,
    ids: Vec<String>,
    /// The dispatches the simulated workers hold, and whether each one's fetch has returned.
    held: Vec<(Dispatch, bool)>,
    depth: usize,
    inflight: usize,
    steps: usize,
}

impl Run {
    fn new(cfg: MachineConfig) -> Self {
        Run {
            machine: JobMachine::new(cfg),
            model: Model {
                cfg,
                jobs: Vec::new(),
                cursor: None,
                closed: false,
            },
            now: Duration::ZERO,
            ids: Vec::new(),
            held: Vec::new(),
            depth: 0,
            inflight: 0,
            steps: 0,
        }
    }

    fn submit(&mut self, id: String, targets: u8) {
        let targets = usize::from(targets % 5);
        let got = self.machine.submit(&id, targets, self.now);
        let want = self.model.submit(&id, targets, self.now);
        assert_eq!(got, want, "submit {id} ({targets} targets)");
    }

    fn apply(&mut self, op: &Op) {
        let now = self.now;
        match *op {
            Op::Submit { targets } => {
                let id = format!("j{}", self.ids.len());
                self.ids.push(id.clone());
                self.submit(id, targets);
            }
            Op::SubmitOld { which, targets } => {
                let id = match self.ids.len() {
                    0 => "j-none".to_owned(),
                    n => self.ids[usize::from(which) % n].clone(),
                };
                self.submit(id, targets);
            }
            Op::Dispatch => {
                let before = self.machine.inflight();
                let got = self.machine.poll_dispatch(now);
                let want = self.model.dispatch(now);
                assert_eq!(got, want, "dispatch at {now:?}");
                if let Some(d) = got {
                    assert!(!self.machine.is_closed(), "dispatch after close");
                    assert!(
                        before < self.model.cfg.workers,
                        "more than workers in flight"
                    );
                    self.held.push((d, false));
                }
            }
            Op::Complete { which, outcome } => {
                let fetching: Vec<usize> =
                    (0..self.held.len()).filter(|&i| !self.held[i].1).collect();
                if !fetching.is_empty() {
                    let i = fetching[usize::from(which) % fetching.len()];
                    let (key, idx) = (self.held[i].0.key, self.held[i].0.idx);
                    self.outcome(key, idx, outcome.into());
                }
            }
            Op::Stored { which } => {
                let storing: Vec<usize> =
                    (0..self.held.len()).filter(|&i| self.held[i].1).collect();
                if !storing.is_empty() {
                    let key = self.held[storing[usize::from(which) % storing.len()]].0.key;
                    self.stored(key);
                }
            }
            Op::Spurious { key, idx, outcome } => {
                self.outcome(JobKey::from(key % 16), usize::from(idx % 6), outcome.into())
            }
            Op::SpuriousStored { key } => self.stored(JobKey::from(key % 16)),
            Op::Cancel { which } => {
                let i = usize::from(which) % (self.ids.len() + 1);
                let id = self
                    .ids
                    .get(i)
                    .cloned()
                    .unwrap_or_else(|| "nobody".to_owned());
                let got = self.machine.cancel(&id, now);
                let want = self.model.cancel(&id, now);
                assert_eq!(got, want, "cancel {id}");
            }
            Op::Advance { ms } => self.now += Duration::from_millis(u64::from(ms % 4000)),
            Op::AdvanceSecs { secs } => self.now += Duration::from_secs(u64::from(secs % 8)),
            Op::Close => {
                let got = self.machine.close(now);
                let want = self.model.close(now);
                assert_eq!(got, want, "close");
            }
        }
        self.settle();
    }

    fn outcome(&mut self, key: JobKey, idx: usize, outcome: Outcome) {
        let now = self.now;
        let got = self.machine.handle_outcome(key, idx, outcome, now);
        let want = self.model.outcome(key, idx, outcome, now);
        assert_eq!(got, want, "outcome {outcome:?} of {key}/{idx} at {now:?}");
        if got.is_ok() {
            let held = self.held.iter_mut().find(|(d, back)| d.key == key && !back);
            match held {
                Some((_, back)) => *back = true,
                None => panic!("outcome of {key}/{idx} accepted, no worker fetches it"),
            }
        }
    }

    fn stored(&mut self, key: JobKey) {
        let now = self.now;
        let got = self.machine.handle_stored(key, now);
        let want = self.model.stored(key, now);
        assert_eq!(got, want, "stored {key} at {now:?}");
        if got.is_ok() {
            let i = self.held.iter().position(|(d, back)| d.key == key && *back);
            match i {
                Some(i) => {
                    self.held.remove(i);
                }
                None => panic!("store of {key} accepted, no outcome was in"),
            }
        }
    }

    /// Drains the events and compares the getters with the model.
    fn settle(&mut self) {
        while let Some(e) = self.machine.poll_event() {
            match e {
                Event::Depth(n) => {
                    assert_ne!(n, self.depth, "Depth without a change");
                    self.depth = n;
                }
                Event::Inflight(n) => {
                    assert_ne!(n, self.inflight, "Inflight without a change");
                    self.inflight = n;
                }
            }
        }
        let m = &self.machine;
        assert_eq!(self.depth, m.live_jobs(), "last Depth vs live_jobs()");
        assert_eq!(self.inflight, m.inflight(), "last Inflight vs inflight()");
        assert_eq!(m.live_jobs(), self.model.live(), "live_jobs vs model");
        assert_eq!(m.inflight(), self.model.inflight(), "inflight vs model");
        assert_eq!(m.inflight(), self.held.len(), "inflight vs busy workers");
        assert!(
            m.inflight() <= self.model.cfg.workers,
            "more than workers in flight"
        );
        assert_eq!(m.is_closed(), self.model.closed);
        assert_eq!(m.poll_timeout(), self.model.poll_timeout(), "poll_timeout");
        // Every id costs a model scan: all of them every 64 ops, else the 8 newest.
        self.steps += 1;
        let skip = if self.steps.is_multiple_of(64) {
            0
        } else {
            self.ids.len().saturating_sub(8)
        };
        for id in &self.ids[skip..] {
            let held = self.model.held(id);
            assert_eq!(m.job_key(id), held.map(key_of), "job_key({id})");
            let live = held.is_some_and(|i| self.model.jobs[i].phase == Phase::Live);
            assert_eq!(m.is_live(id), live, "is_live({id})");
        }
    }

    /// Closes, lets every in-flight target return and be stored, and checks that every job was
    /// reported terminal exactly once (never if cancelled).
    fn finish(&mut self) {
        self.apply(&Op::Close);
        while self.held.iter().any(|(_, back)| !back) {
            self.apply(&Op::Complete {
                which: 0,
                outcome: FOutcome::Done,
            });
        }
        while !self.held.is_empty() {
            self.apply(&Op::Stored { which: 0 });
        }
        assert_eq!(
            self.machine.poll_dispatch(self.now),
            None,
            "dispatch after close"
        );
        assert_eq!((self.machine.live_jobs(), self.machine.inflight()), (0, 0));
        assert_eq!((self.depth, self.inflight), (0, 0), "last events");
        for id in &self.ids {
            assert_eq!(self.machine.job_key(id), None, "{id} still held");
        }
        for j in &self.model.jobs {
            assert_eq!(j.phase, Phase::Gone, "{} still held", j.id);
            assert_eq!(
                j.terminals,
                u32::from(!j.cancelled),
                "terminal reports of {}",
                j.id
            );
            if j.live_at_close {
                assert!(!j.cancelled);
            }
        }
    }
}
