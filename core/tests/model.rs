//! Model-based test of [`JobMachine`]: random sequences of submit, dispatch, a fetch returning
//! (done, failed or busy), its outcome stored, spurious outcomes and stores, cancel, time and
//! close (workers 1 or 2, up to 100 ops), run against the machine and against [`Model`], a plain
//! O(n) reference (a `Vec` of jobs in submit order and a cursor index, scanned). After every step
//! the machine must agree with the model, and an [`Observer`] that sees only the machine's
//! outputs checks every rule directly:
//!
//! - per-job serial order: target idx is dispatched only as the next one, never two in flight
//!   (a target is in flight from its dispatch until its outcome is stored);
//! - at most `workers` targets in flight;
//! - round-robin fairness: between two dispatches of one job, no other job that was ready (live,
//!   nothing in flight, next target due) the whole time was passed over; and a poll refused with
//!   a free worker means no job was ready;
//! - a terminal status exactly once, with the status its stored outcomes give (or `failed` /
//!   `runner closed` for a job live at close), never one after cancel;
//! - nothing dispatched after close; every job live at close reported once (checked at the end of
//!   each case, after closing and letting every in-flight target return and be stored);
//! - a busy target dispatched again no earlier than `retry_wait` after its busy answer, given up
//!   exactly when busy for longer than `retry_for` since its first busy answer;
//! - `poll_timeout` never later than a pending retry, never an unknown time, `None` once closed;
//! - the last `Depth` event equals `live_jobs()`, the last `Inflight` equals `inflight()`, and
//!   each event is a change.
//! - `job_key`, `is_live` and `contains` agree with the model for every id and key handed out.
//!
//! The same runs again, longer (200 to 600 ops, closed only at the end) and with 1 to 4 workers,
//! keep many jobs in the rotation at once.
//!
//! The number of cases honours `PROPTEST_CASES` (proptest's default, 256, otherwise; an eighth
//! of it for the long runs).

// Tests panic on purpose; the workspace denies these for library code.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use proptest::collection::vec;
use proptest::prelude::*;
use rota_core::JobStatus;
use rota_core::machine::{
    Cancelled, Completion, Dispatch, ERR_CLOSED, Event, JobKey, JobMachine, MachineConfig,
    MachineError, Outcome, Store, Terminal,
};

// ---- the generated input ------------------------------------------------------------------

/// Which id an op names: a new one, one already used (by index, wrapping), or one never used.
#[derive(Debug, Clone, Copy)]
enum Pick {
    New,
    Old(usize),
    Unknown,
}

#[derive(Debug, Clone)]
enum Op {
    /// Submit a job (0 targets is refused).
    Submit {
        id: Pick,
        targets: usize,
    },
    /// An idle worker polls.
    Dispatch,
    /// The fetch of the `pick`-th target being fetched (wrapping) returns; with `store`, its
    /// outcome is stored at once (else by a later [`Op::Stored`]). With nothing being fetched,
    /// an idle worker polls instead (so that few ops are wasted).
    Return {
        pick: usize,
        outcome: Outcome,
        store: bool,
    },
    /// The outcome of the `pick`-th returned target (wrapping) is stored. With none returned, an
    /// idle worker polls instead.
    Stored {
        pick: usize,
    },
    /// An outcome for an arbitrary (key, idx), usually not in flight.
    Spurious {
        key: JobKey,
        idx: usize,
        outcome: Outcome,
    },
    /// A store for an arbitrary key, usually with no outcome to store.
    SpuriousStored {
        key: JobKey,
    },
    Cancel(Pick),
    Advance(Duration),
    Close,
}

fn outcome() -> impl Strategy<Value = Outcome> {
    prop_oneof![
        2 => Just(Outcome::Done),
        1 => Just(Outcome::Failed),
        2 => Just(Outcome::Busy),
    ]
}

fn op(retry_wait_secs: u64) -> impl Strategy<Value = Op> {
    let submit_id = prop_oneof![6 => Just(Pick::New), 1 => any::<usize>().prop_map(Pick::Old)];
    let cancel_id = prop_oneof![4 => any::<usize>().prop_map(Pick::Old), 1 => Just(Pick::Unknown)];
    let targets = prop_oneof![12 => 1usize..=4, 1 => Just(0usize)];
    // Exactly retry_wait and whole seconds hit the retry boundaries; milliseconds fall between.
    let advance = prop_oneof![
        3 => Just(Duration::from_secs(retry_wait_secs)),
        3 => (0..=3 * retry_wait_secs).prop_map(Duration::from_secs),
        2 => (0..=3000 * retry_wait_secs).prop_map(Duration::from_millis),
    ];
    let store_now = prop_oneof![3 => Just(true), 1 => Just(false)];
    prop_oneof![
        40 => (submit_id, targets).prop_map(|(id, targets)| Op::Submit { id, targets }),
        15 => Just(Op::Dispatch),
        70 => (any::<usize>(), outcome(), store_now)
            .prop_map(|(pick, outcome, store)| Op::Return { pick, outcome, store }),
        12 => any::<usize>().prop_map(|pick| Op::Stored { pick }),
        4 => (0..12u64, 0..5usize, outcome())
            .prop_map(|(key, idx, outcome)| Op::Spurious { key, idx, outcome }),
        4 => (0..12u64).prop_map(|key| Op::SpuriousStored { key }),
        8 => cancel_id.prop_map(Op::Cancel),
        30 => advance.prop_map(Op::Advance),
        1 => Just(Op::Close),
    ]
}

/// The configuration (workers 1 or 2; `retry_for` often a whole number of `retry_wait`s, so
/// the give-up boundary is hit exactly) and the ops.
fn case() -> impl Strategy<Value = (MachineConfig, Vec<Op>)> {
    (1usize..=2, 1u64..=3).prop_flat_map(|(workers, wait)| {
        let retry_for = prop_oneof![(0..=4u64).prop_map(move |k| k * wait), 0..=12u64];
        retry_for.prop_flat_map(move |retry_for| {
            let cfg = MachineConfig {
                workers,
                retry_wait: Duration::from_secs(wait),
                retry_for: Duration::from_secs(retry_for),
            };
            (Just(cfg), vec(op(wait), 1..=100))
        })
    })
}

proptest! {
    #[test]
    fn machine_matches_the_model_and_keeps_every_rule((cfg, ops) in case()) {
        let mut run = Run::new(cfg);
        for op in &ops {
            run.apply(op)?;
        }
        run.finish()?;
    }
}

/// Long runs (200 to 600 ops, no close before the end) with 1 to 4 workers: many jobs in
/// the rotation at once, many of them leaving it for a retry and coming back, and more than
/// two targets in flight. An eighth as many cases as the short runs (at least one).
fn long_case() -> impl Strategy<Value = (MachineConfig, Vec<Op>)> {
    (1usize..=4, 1u64..=3).prop_flat_map(|(workers, wait)| {
        (0..=12u64).prop_flat_map(move |retry_for| {
            let cfg = MachineConfig {
                workers,
                retry_wait: Duration::from_secs(wait),
                retry_for: Duration::from_secs(retry_for),
            };
            // A close drawn here polls instead.
            let op = op(wait).prop_map(|op| match op {
                Op::Close => Op::Dispatch,
                op => op,
            });
            (Just(cfg), vec(op, 200..=600))
        })
    })
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: (ProptestConfig::default().cases / 8).max(1),
        ..ProptestConfig::default()
    })]
    #[test]
    fn machine_matches_the_model_over_long_runs_with_many_jobs((cfg, ops) in long_case()) {
        let mut run = Run::new(cfg);
        for op in &ops {
            run.apply(op)?;
        }
        run.finish()?;
    }
}

// ---- the reference model ------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Live,
    Cancelled,
    /// Closed with a target in flight.
    Closing,
    /// Terminal, its last outcome not stored yet.
    Finished,
    Gone,
}

#[derive(Debug)]
struct MJob {
    id: String,
    targets: usize,
    next: usize,
    failed: usize,
    submitted: Duration,
    started: bool,
    /// From dispatch until the outcome is stored.
    inflight: bool,
    /// The outcome is in, not stored yet: the retry time it set, if any.
    storing: Option<Option<Duration>>,
    busy_since: Option<Duration>,
    due: Option<Duration>,
    phase: Phase,
}

/// The obvious scheduler: every job ever submitted in a `Vec` (its index is its key), the index
/// of the job last served, and a linear scan.
#[derive(Debug)]
struct Model {
    cfg: MachineConfig,
    jobs: Vec<MJob>,
    cursor: Option<usize>,
    closed: bool,
}

fn key_of(i: usize) -> JobKey {
    JobKey::try_from(i).unwrap()
}

impl Model {
    fn new(cfg: MachineConfig) -> Self {
        Model {
            cfg,
            jobs: Vec::new(),
            cursor: None,
            closed: false,
        }
    }

    fn live(&self) -> usize {
        let live = |j: &&MJob| matches!(j.phase, Phase::Live | Phase::Closing);
        self.jobs.iter().filter(live).count()
    }

    fn inflight(&self) -> usize {
        self.jobs.iter().filter(|j| j.inflight).count()
    }

    /// The job the machine still holds under `id`.
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
            failed: 0,
            submitted: now,
            started: false,
            inflight: false,
            storing: None,
            busy_since: None,
            due: None,
            phase: Phase::Live,
        });
        Ok(key_of(self.jobs.len() - 1))
    }

    fn dispatch(&mut self, now: Duration) -> Option<Dispatch> {
        if self.closed || self.inflight() >= self.cfg.workers {
            return None;
        }
        let n = self.jobs.len();
        let start = self.cursor.map_or(0, |c| c + 1);
        let i = (0..n).map(|off| (start + off) % n).find(|&i| {
            let j = &self.jobs[i];
            j.phase == Phase::Live && !j.inflight && j.due.is_none_or(|d| d <= now)
        })?;
        self.cursor = Some(i);
        let j = &mut self.jobs[i];
        let first = !j.started;
        j.started = true;
        j.inflight = true;
        j.due = None;
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
                let since = *j.busy_since.get_or_insert(now);
                if now - since > cfg.retry_for {
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
        j.storing = Some(None);
        if let Store::Pending { retry_at } = store {
            j.storing = Some(retry_at);
        } else {
            j.next += 1;
            j.busy_since = None;
            if store != Store::Done {
                j.failed += 1;
            }
        }
        let status = if j.failed == 0 {
            JobStatus::Done
        } else if j.failed == j.targets {
            JobStatus::Failed
        } else {
            JobStatus::Partial
        };
        let terminal = match j.phase {
            Phase::Live | Phase::Closing if j.next == j.targets => Some((status, "")),
            Phase::Closing => Some((JobStatus::Failed, ERR_CLOSED)),
            _ => None,
        };
        let terminal = terminal.map(|(status, error)| {
            j.phase = Phase::Finished;
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
            if j.inflight {
                j.phase = Phase::Closing;
            } else {
                j.phase = Phase::Gone;
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
}

// ---- the direct checks --------------------------------------------------------------------

/// What the machine's outputs say of one job.
#[derive(Debug)]
struct OJob {
    id: String,
    targets: usize,
    submitted: Duration,
    next: usize,
    done: usize,
    failed: usize,
    /// From dispatch until the outcome is stored.
    inflight: bool,
    /// The outcome is in, not stored yet.
    storing: bool,
    /// The retry time that outcome set.
    storing_retry: Option<Duration>,
    cancelled: bool,
    terminals: usize,
    live_at_close: bool,
    first_busy: Option<Duration>,
    last_busy: Option<Duration>,
    retry_at: Option<Duration>,
    dispatched: bool,
    last_dispatch: Option<usize>,
    ready_since: Option<usize>,
}

impl OJob {
    /// Live: neither terminal nor cancelled.
    fn open(&self) -> bool {
        !self.cancelled && self.terminals == 0
    }
    /// The machine has let go of it.
    fn released(&self) -> bool {
        !self.inflight && (self.terminals > 0 || self.cancelled)
    }
}

/// Checks every rule from the machine's outputs alone.
#[derive(Debug)]
struct Observer {
    cfg: MachineConfig,
    jobs: BTreeMap<JobKey, OJob>,
    closed: bool,
}

impl Observer {
    fn inflight(&self) -> usize {
        self.jobs.values().filter(|j| j.inflight).count()
    }

    fn ready(&self, j: &OJob, now: Duration) -> bool {
        !self.closed && j.open() && !j.inflight && j.retry_at.is_none_or(|t| t <= now)
    }

    fn submitted(&mut self, key: JobKey, id: &str, targets: usize, now: Duration) -> TestResult {
        prop_assert!(!self.closed, "submit accepted after close");
        prop_assert!(targets > 0, "a job of no targets accepted");
        prop_assert!(!self.jobs.contains_key(&key), "key {key} reused");
        let dup = self.jobs.values().any(|j| j.id == id && !j.released());
        prop_assert!(!dup, "duplicate id {id} accepted");
        self.jobs.insert(
            key,
            OJob {
                id: id.to_owned(),
                targets,
                submitted: now,
                next: 0,
                done: 0,
                failed: 0,
                inflight: false,
                storing: false,
                storing_retry: None,
                cancelled: false,
                terminals: 0,
                live_at_close: false,
                first_busy: None,
                last_busy: None,
                retry_at: None,
                dispatched: false,
                last_dispatch: None,
                ready_since: None,
            },
        );
        Ok(())
    }

    fn dispatched(&mut self, d: &Dispatch, now: Duration, op: usize) -> TestResult {
        prop_assert!(!self.closed, "dispatch after close: {d:?}");
        prop_assert!(
            self.inflight() < self.cfg.workers,
            "more than workers in flight"
        );
        let Some(j) = self.jobs.get(&d.key) else {
            return Err(TestCaseError::fail(format!(
                "dispatch of unknown job {d:?}"
            )));
        };
        prop_assert_eq!(&*d.id, j.id.as_str());
        prop_assert!(j.open(), "dispatch of a job not live: {:?}", d);
        prop_assert!(!j.inflight, "two targets of {} in flight", j.id);
        prop_assert_eq!(d.idx, j.next, "job {} out of order", j.id);
        prop_assert_eq!(d.first, !j.dispatched, "first flag of {}", j.id);
        if let Some(at) = j.retry_at {
            prop_assert!(now >= at, "{} retried at {:?} before {:?}", j.id, now, at);
        }
        if let Some(busy) = j.last_busy {
            let wait = self.cfg.retry_wait;
            prop_assert!(now >= busy + wait, "{} retried within retry_wait", j.id);
        }
        if let Some(prev) = j.last_dispatch {
            for (k, other) in &self.jobs {
                let skipped = *k != d.key && other.ready_since.is_some_and(|s| s <= prev);
                prop_assert!(
                    !skipped,
                    "{} served twice while {} was ready since op {:?}",
                    j.id,
                    other.id,
                    other.ready_since
                );
            }
        }
        let j = self.jobs.get_mut(&d.key).unwrap();
        j.inflight = true;
        j.dispatched = true;
        j.last_dispatch = Some(op);
        j.retry_at = None;
        Ok(())
    }

    fn refused_dispatch(&self, now: Duration) -> TestResult {
        if !self.closed && self.inflight() < self.cfg.workers {
            for j in self.jobs.values() {
                prop_assert!(
                    !self.ready(j, now),
                    "a worker was refused but {} was ready",
                    j.id
                );
            }
        }
        Ok(())
    }

    fn returned(
        &mut self,
        key: JobKey,
        outcome: Outcome,
        c: &Completion,
        now: Duration,
    ) -> TestResult {
        let cfg = self.cfg;
        let closed = self.closed;
        let Some(j) = self.jobs.get_mut(&key) else {
            return Err(TestCaseError::fail(format!(
                "outcome of unknown job {key} accepted"
            )));
        };
        prop_assert!(
            j.inflight && !j.storing,
            "outcome of {} accepted, none expected",
            j.id
        );
        j.storing = true;
        let want = match outcome {
            Outcome::Done => Store::Done,
            Outcome::Failed => Store::Failed,
            Outcome::Busy => {
                let first = j.first_busy.unwrap_or(now);
                if now - first > cfg.retry_for {
                    Store::GiveUp
                } else if j.open() && !closed {
                    Store::Pending {
                        retry_at: Some(now + cfg.retry_wait),
                    }
                } else {
                    Store::Pending { retry_at: None }
                }
            }
        };
        prop_assert_eq!(c.store, want, "store for {}{}", j.id, j.next);
        if c.store.is_final() {
            j.next += 1;
            if c.store == Store::Done {
                j.done += 1;
            } else {
                j.failed += 1;
            }
            j.first_busy = None;
            j.last_busy = None;
        } else {
            j.first_busy = j.first_busy.or(Some(now));
            j.last_busy = Some(now);
            if let Store::Pending { retry_at } = c.store {
                j.storing_retry = retry_at;
            }
        }
        let want = if j.cancelled {
            None
        } else if j.next == j.targets {
            let status = match (j.done, j.failed) {
                (_, 0) => JobStatus::Done,
                (0, _) => JobStatus::Failed,
                _ => JobStatus::Partial,
            };
            Some((status, ""))
        } else if j.live_at_close {
            Some((JobStatus::Failed, ERR_CLOSED))
        } else {
            None
        };
        let got = c.terminal.as_ref().map(|t| (t.status, t.error));
        prop_assert_eq!(got, want, "terminal of {} with its outcome", j.id);
        if let Some(t) = &c.terminal {
            prop_assert_eq!(&*t.id, j.id.as_str());
            prop_assert_eq!(t.elapsed, now - j.submitted);
            prop_assert_eq!(j.terminals, 0, "{} reported terminal twice", j.id);
            j.terminals += 1;
        }
        Ok(())
    }

    fn stored(&mut self, key: JobKey, t: Option<&Terminal>, now: Duration) -> TestResult {
        let Some(j) = self.jobs.get_mut(&key) else {
            return Err(TestCaseError::fail(format!(
                "store of unknown job {key} accepted"
            )));
        };
        prop_assert!(
            j.storing,
            "store of {} accepted with no outcome to store",
            j.id
        );
        j.storing = false;
        j.inflight = false;
        j.retry_at = j.storing_retry.take();
        // Closed after its outcome came in: reported now.
        let want = (!j.cancelled && j.terminals == 0 && j.live_at_close).then(|| Terminal {
            id: Arc::from(j.id.as_str()),
            status: JobStatus::Failed,
            error: ERR_CLOSED,
            elapsed: now - j.submitted,
        });
        prop_assert_eq!(t, want.as_ref(), "terminal of {} once stored", j.id);
        if t.is_some() {
            j.terminals += 1;
        }
        Ok(())
    }

    fn refused(&self, key: JobKey, err: &MachineError) -> TestResult {
        let want = match self.jobs.get(&key) {
            Some(j) if !j.released() => MachineError::NotInFlight,
            _ => MachineError::UnknownJob,
        };
        prop_assert_eq!(err, &want, "input for job {}", key);
        Ok(())
    }

    fn cancelled(&mut self, id: &str, got: Option<&Cancelled>, now: Duration) -> TestResult {
        let closed = self.closed;
        let live = self
            .jobs
            .values_mut()
            .find(|j| j.id == id && j.open() && !closed);
        match (live, got) {
            (None, None) => {}
            (Some(j), Some(c)) => {
                prop_assert_eq!(&*c.id, id);
                prop_assert_eq!(c.inflight, j.inflight);
                prop_assert_eq!(c.elapsed, now - j.submitted);
                j.cancelled = true;
            }
            (j, c) => {
                return Err(TestCaseError::fail(format!(
                    "cancel {id}: live {j:?}, got {c:?}"
                )));
            }
        }
        Ok(())
    }

    fn closed_now(&mut self, ended: &[Terminal], now: Duration) -> TestResult {
        if self.closed {
            prop_assert!(ended.is_empty(), "a second close reported {ended:?}");
            return Ok(());
        }
        self.closed = true;
        let mut want = Vec::new();
        for j in self.jobs.values_mut().filter(|j| j.open()) {
            j.live_at_close = true;
            if !j.inflight {
                j.terminals += 1;
                want.push(Terminal {
                    id: Arc::from(j.id.as_str()),
                    status: JobStatus::Failed,
                    error: ERR_CLOSED,
                    elapsed: now - j.submitted,
                });
            }
        }
        prop_assert_eq!(ended, &want[..], "close");
        Ok(())
    }

    /// After every op: the readiness clock of the fairness check, and `poll_timeout`.
    fn after(&mut self, m: &JobMachine, now: Duration, op: usize) -> TestResult {
        let ready: Vec<bool> = self.jobs.values().map(|j| self.ready(j, now)).collect();
        for (j, ready) in self.jobs.values_mut().zip(ready) {
            j.ready_since = if ready {
                j.ready_since.or(Some(op))
            } else {
                None
            };
        }
        let open = self.jobs.values().filter(|j| j.open()).count();
        prop_assert_eq!(m.live_jobs(), open, "live_jobs");
        prop_assert_eq!(m.inflight(), self.inflight(), "inflight");
        prop_assert!(m.inflight() <= self.cfg.workers);
        prop_assert_eq!(m.is_closed(), self.closed);
        let timeout = m.poll_timeout();
        if self.closed {
            prop_assert_eq!(timeout, None, "poll_timeout after close");
            return Ok(());
        }
        let retries: Vec<Duration> = self
            .jobs
            .values()
            .filter(|j| j.open() && !j.inflight)
            .filter_map(|j| j.retry_at)
            .collect();
        if let Some(t) = timeout {
            prop_assert!(
                retries.contains(&t),
                "poll_timeout {t:?} is no retry of {retries:?}"
            );
        }
        for &r in retries.iter().filter(|&&r| r > now) {
            prop_assert!(
                timeout.is_some_and(|t| t <= r),
                "poll_timeout {timeout:?} misses the retry at {r:?}"
            );
        }
        Ok(())
    }

    /// At the end, after close and every in-flight outcome: each job was reported once, or never
    /// if it was cancelled.
    fn all_reported(&self) -> TestResult {
        for j in self.jobs.values() {
            let want = usize::from(!j.cancelled);
            prop_assert_eq!(j.terminals, want, "terminal reports of {}", j.id);
        }
        Ok(())
    }
}

type TestResult = Result<(), TestCaseError>;

// ---- one run ------------------------------------------------------------------------------

struct Run {
    machine: JobMachine,
    model: Model,
    obs: Observer,
    now: Duration,
    ops: usize,
    ids: Vec<String>,
    /// The dispatches the simulated workers hold, oldest first, and whether each one's fetch
    /// has returned (its outcome is being stored).
    held: Vec<(Dispatch, bool)>,
    depth: usize,
    inflight: usize,
}

impl Run {
    fn new(cfg: MachineConfig) -> Self {
        Run {
            machine: JobMachine::new(cfg),
            model: Model::new(cfg),
            obs: Observer {
                cfg,
                jobs: BTreeMap::new(),
                closed: false,
            },
            now: Duration::ZERO,
            ops: 0,
            ids: Vec::new(),
            held: Vec::new(),
            depth: 0,
            inflight: 0,
        }
    }

    fn id(&mut self, pick: Pick) -> String {
        match pick {
            Pick::Old(i) if !self.ids.is_empty() => self.ids[i % self.ids.len()].clone(),
            Pick::New | Pick::Old(_) => {
                let id = format!("j{}", self.ids.len());
                self.ids.push(id.clone());
                id
            }
            Pick::Unknown => "nobody".to_owned(),
        }
    }

    fn apply(&mut self, op: &Op) -> TestResult {
        self.ops += 1;
        let (now, n) = (self.now, self.ops);
        let fetching = self.held.iter().any(|(_, back)| !back);
        let storing = self.held.iter().any(|(_, back)| *back);
        let op = match op {
            Op::Return { .. } if !fetching => &Op::Dispatch,
            Op::Stored { .. } if !storing => &Op::Dispatch,
            op => op,
        };
        match *op {
            Op::Submit { id, targets } => {
                let id = self.id(id);
                let got = self.machine.submit(&id, targets, now);
                prop_assert_eq!(&got, &self.model.submit(&id, targets, now), "submit {}", id);
                if let Ok(key) = got {
                    self.obs.submitted(key, &id, targets, now)?;
                }
            }
            Op::Dispatch => {
                let got = self.machine.poll_dispatch(now);
                prop_assert_eq!(&got, &self.model.dispatch(now), "dispatch at {:?}", now);
                match got {
                    Some(d) => {
                        self.obs.dispatched(&d, now, n)?;
                        self.held.push((d, false));
                    }
                    None => self.obs.refused_dispatch(now)?,
                }
            }
            Op::Return {
                pick,
                outcome,
                store,
            } => {
                let fetching: Vec<usize> =
                    (0..self.held.len()).filter(|&i| !self.held[i].1).collect();
                if !fetching.is_empty() {
                    let (d, _) = &self.held[fetching[pick % fetching.len()]];
                    let key = d.key;
                    self.outcome(key, d.idx, outcome)?;
                    if store {
                        self.stored(key)?;
                    }
                }
            }
            Op::Stored { pick } => {
                let storing: Vec<usize> =
                    (0..self.held.len()).filter(|&i| self.held[i].1).collect();
                if !storing.is_empty() {
                    let key = self.held[storing[pick % storing.len()]].0.key;
                    self.stored(key)?;
                }
            }
            Op::Spurious { key, idx, outcome } => self.outcome(key, idx, outcome)?,
            Op::SpuriousStored { key } => self.stored(key)?,
            Op::Cancel(pick) => {
                let id = self.id(pick);
                let got = self.machine.cancel(&id, now);
                prop_assert_eq!(&got, &self.model.cancel(&id, now), "cancel {}", id);
                self.obs.cancelled(&id, got.as_ref(), now)?;
            }
            Op::Advance(d) => self.now += d,
            Op::Close => {
                let got = self.machine.close(now);
                prop_assert_eq!(&got, &self.model.close(now), "close");
                self.obs.closed_now(&got, now)?;
            }
        }
        self.settle(n)
    }

    /// A fetch returns: (key, idx) is usually a target the workers hold, but need not be.
    fn outcome(&mut self, key: JobKey, idx: usize, outcome: Outcome) -> TestResult {
        let now = self.now;
        let got = self.machine.handle_outcome(key, idx, outcome, now);
        let want = self.model.outcome(key, idx, outcome, now);
        prop_assert_eq!(&got, &want, "outcome {:?} of {}/{}", outcome, key, idx);
        match &got {
            Ok(c) => {
                self.obs.returned(key, outcome, c, now)?;
                let held = self.held.iter_mut().find(|(d, back)| d.key == key && !back);
                prop_assert!(held.is_some(), "no worker fetches {}/{}", key, idx);
                if let Some((_, back)) = held {
                    *back = true;
                }
                Ok(())
            }
            Err(e) => self.obs.refused(key, e),
        }
    }

    /// An outcome is stored: `key` is usually a job whose outcome is in, but need not be.
    fn stored(&mut self, key: JobKey) -> TestResult {
        let now = self.now;
        let got = self.machine.handle_stored(key, now);
        prop_assert_eq!(&got, &self.model.stored(key, now), "stored {}", key);
        match &got {
            Ok(t) => {
                self.obs.stored(key, t.as_ref(), now)?;
                let i = self.held.iter().position(|(d, back)| d.key == key && *back);
                prop_assert!(i.is_some(), "no worker stores an outcome of {}", key);
                if let Some(i) = i {
                    self.held.remove(i);
                }
                Ok(())
            }
            Err(e) => self.obs.refused(key, e),
        }
    }

    /// Drains the events and compares the getters with the model and the observer.
    fn settle(&mut self, op: usize) -> TestResult {
        while let Some(e) = self.machine.poll_event() {
            match e {
                Event::Depth(n) => {
                    prop_assert_ne!(n, self.depth, "Depth without a change");
                    self.depth = n;
                }
                Event::Inflight(n) => {
                    prop_assert_ne!(n, self.inflight, "Inflight without a change");
                    self.inflight = n;
                }
            }
        }
        let m = &self.machine;
        prop_assert_eq!(self.depth, m.live_jobs(), "last Depth vs live_jobs()");
        prop_assert_eq!(self.inflight, m.inflight(), "last Inflight vs inflight()");
        prop_assert_eq!(m.live_jobs(), self.model.live(), "live_jobs vs model");
        prop_assert_eq!(m.inflight(), self.model.inflight(), "inflight vs model");
        prop_assert_eq!(m.inflight(), self.held.len(), "inflight vs busy workers");
        for id in &self.ids {
            let held = self.model.held(id);
            prop_assert_eq!(m.job_key(id), held.map(key_of), "job_key({})", id);
            let live = held.is_some_and(|i| self.model.jobs[i].phase == Phase::Live);
            prop_assert_eq!(m.is_live(id), live, "is_live({})", id);
        }
        // Every key handed out, and the next one: held exactly while the model holds its job.
        for i in 0..=self.model.jobs.len() {
            let held = self
                .model
                .jobs
                .get(i)
                .is_some_and(|j| j.phase != Phase::Gone);
            prop_assert_eq!(m.contains(key_of(i)), held, "contains({})", i);
        }
        self.obs.after(m, self.now, op)
    }

    /// Closes (if the ops did not), lets every in-flight target return and be stored, and checks
    /// that every job was reported exactly once.
    fn finish(&mut self) -> TestResult {
        self.apply(&Op::Close)?;
        while self.held.iter().any(|(_, back)| !back) {
            self.apply(&Op::Return {
                pick: 0,
                outcome: Outcome::Done,
                store: false,
            })?;
        }
        while !self.held.is_empty() {
            self.apply(&Op::Stored { pick: 0 })?;
        }
        prop_assert_eq!(self.machine.live_jobs(), 0);
        prop_assert_eq!(self.machine.inflight(), 0);
        prop_assert_eq!((self.depth, self.inflight), (0, 0), "last events");
        self.obs.all_reported()
    }
}
