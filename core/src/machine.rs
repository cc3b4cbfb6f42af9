//! [`JobMachine`]: every scheduling decision of a runner, with no I/O, no clock and no runtime.
//!
//! The machine holds the live jobs of one runner and decides which target a worker fetches next,
//! what to store when a fetch returns, when a job is terminal and when a sleeping worker must
//! wake. It never reads a clock: every input that depends on time carries `now`, a
//! [`Duration`] since an epoch the driver picks once (the driver uses
//! `tokio::time::Instant::now() - start`); it must never go backwards.
//!
//! # Driving it
//!
//! The methods fall into the groups of quinn-proto's `Connection`:
//! - getters on `&self`: [`live_jobs`](JobMachine::live_jobs), [`inflight`](JobMachine::inflight),
//!   [`job_key`](JobMachine::job_key), [`contains`](JobMachine::contains),
//!   [`is_closed`](JobMachine::is_closed);
//! - inputs: [`submit`](JobMachine::submit), [`handle_outcome`](JobMachine::handle_outcome),
//!   [`handle_stored`](JobMachine::handle_stored);
//! - commands: [`cancel`](JobMachine::cancel), [`close`](JobMachine::close);
//! - outputs: [`poll_dispatch`](JobMachine::poll_dispatch), [`poll_event`](JobMachine::poll_event),
//!   [`poll_timeout`](JobMachine::poll_timeout).
//!
//! After every input or command, the driver drains [`poll_event`](JobMachine::poll_event) (depth
//! and in-flight changes, in order). An idle worker calls
//! [`poll_dispatch`](JobMachine::poll_dispatch); when it returns `None` the worker sleeps until
//! a submit, a cancel, a stored outcome, or [`poll_timeout`](JobMachine::poll_timeout),
//! whichever comes first. Mutate → drain the outputs → mutate.
//!
//! One target goes: [`poll_dispatch`](JobMachine::poll_dispatch) → the driver stores it running
//! and fetches it → [`handle_outcome`](JobMachine::handle_outcome) says what to store (and
//! whether the job is now terminal) → the driver stores it →
//! [`handle_stored`](JobMachine::handle_stored). A target is *in flight* from its dispatch until
//! its outcome is stored, so the job's next target cannot be dispatched before then.
//!
//! # Rules it decides
//!
//! - Live jobs form one rotation in submit order. A dispatch takes the first job after the
//!   cursor (wrapping) that is *ready*: no target in flight and its next target due. The cursor
//!   then moves past that job.
//! - A job is serial: its next target is dispatched only after the outcome of the previous one.
//! - At most `workers` targets are in flight.
//! - A busy outcome puts the target back to pending, due again `retry_wait` later; the job
//!   waits, the others go on. A target busy for longer than `retry_for` since its first busy
//!   answer is failed with the busy text instead.
//! - When a job's last target is stored the job is terminal exactly once: all done → done, all
//!   failed → failed, else partial.
//! - A cancelled job dispatches nothing more; its in-flight outcome is still stored, and no
//!   terminal status follows (cancelled is final).
//! - After close nothing is dispatched; every live job is reported terminal once: at once,
//!   `failed` with [`ERR_CLOSED`], if it has nothing in flight; else when its in-flight outcome
//!   returns — with its own status if that was its last target, else `failed` with
//!   [`ERR_CLOSED`].
//!
//! # How it is built, and why that is the rotation above
//!
//! A job's [`JobKey`] is its submit number (0, 1, 2, … for the life of the machine, never
//! reused), so key order *is* submit order. The jobs themselves live in a slab (a `Vec` of
//! slots with a free list, so a slot is reused after its job is let go); a hash map from key
//! to slot, with a cheap multiplicative hash (keys are small integers the machine hands out,
//! not attacker-chosen), finds a job for [`handle_outcome`](JobMachine::handle_outcome) and
//! [`handle_stored`](JobMachine::handle_stored). A key is in that map exactly while the
//! machine holds its job, so a stale key is refused with [`MachineError::UnknownJob`] even when
//! its slot already holds a newer job: keys never alias.
//!
//! The rotation is an intrusive, circular, doubly-linked *ring* through the slots, in key
//! order. A held job is on the ring unless it waits for a busy target's retry: those sit in an
//! ordered set by due time instead, and when due they are put back at their submit-order place
//! (found in an ordered set of the ring's keys). Everything else stays on the ring: ready jobs,
//! and jobs with a target in flight (also cancelled, closing or finished ones until their
//! outcome is stored) — at most `workers` of those, since a target in flight is what keeps them.
//! So every job on the ring is either ready or one of at most `workers` in-flight jobs.
//!
//! The cursor is the key of the job last served (`cursor`), which may since have left the ring,
//! and a slot `cursor_at`: the ring member with the greatest key ≤ `cursor` (none if there is
//! none). A dispatch walks the ring from `cursor_at`'s successor (the head if none), wrapping,
//! and takes the first job with nothing in flight: that is exactly the first ready job with a
//! key after `cursor`, else the first one from the start — the reference scan over all jobs in
//! submit order. It passes over at most `workers` in-flight jobs, so it is O(`workers`).
//! `cursor_at` is kept true as the ring changes: serving a job sets both to it; taking the
//! `cursor_at` job off the ring moves `cursor_at` to its predecessor (none if it was the
//! head); putting a job with a key ≤ `cursor` back after `cursor_at` moves `cursor_at` to it; a
//! new job (the greatest key) joins at the tail and changes neither.
//!
//! # Cost
//!
//! A target's cycle (dispatch, outcome, stored) is O(`workers`) plus two hash look-ups by key;
//! the ordered sets are touched only per job (submit, end) and per busy answer (off the ring,
//! then back on) — O(log n) in the live jobs. Submit and cancel also hash the id. Nothing scans
//! the live jobs, except `close`, once.
//!
//! The machine never panics; an input that does not fit its state (an unknown job, an outcome
//! for a target not in flight) is refused with a [`MachineError`] and changes nothing.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;
use std::time::Duration;

use crate::{Config, JobStatus};

/// The error of a job failed because its runner closed.
pub const ERR_CLOSED: &str = "runner closed";
/// The error of a job failed by recovery: it was live when its runner stopped.
pub const ERR_INTERRUPTED: &str = "interrupted";
/// The error stored for a fetch that panicked.
pub const ERR_INTERNAL: &str = "internal error";
/// The error of a job the runner ended with an outcome its store did not take (a write that
/// failed): stored `failed` with this error rather than `done` or `partial`, which would show
/// the job ended whole.
pub const ERR_NOT_STORED: &str = "store: the outcome of a target could not be stored";
/// The error of a job whose admit the store answered with an error: the runner fails it in
/// the store, in case the store wrote it before it failed, so that it does not stay `queued`,
/// never run, holding its caller's caps (a job the store does not hold is no write at all).
pub const ERR_NOT_ADMITTED: &str = "store: the job's admit failed";

/// The machine's part of a [`Config`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MachineConfig {
    /// The most targets in flight at once (1 or 2 in a runner; any value ≥ 1 here).
    pub workers: usize,
    /// The pause before a busy target is due again.
    pub retry_wait: Duration,
    /// How long a target may keep coming back busy, from its first busy answer.
    pub retry_for: Duration,
}

impl From<&Config> for MachineConfig {
    fn from(c: &Config) -> Self {
        MachineConfig {
            workers: c.effective_workers(),
            retry_wait: c.effective_retry_wait(),
            retry_for: c.effective_retry_for(),
        }
    }
}

/// A job's handle in the machine: its place in the submit order (0 for the first job
/// submitted, then 1, 2, …; never reused).
pub type JobKey = u64;

/// A target for a worker to fetch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dispatch {
    /// The job's handle.
    pub key: JobKey,
    /// The job's id.
    pub id: Arc<str>,
    /// The target's index.
    pub idx: usize,
    /// Whether this is the job's first dispatch (the job becomes `running`).
    pub first: bool,
}

/// What a fetch returned, as far as scheduling cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// A result.
    Done,
    /// A failure to store.
    Failed,
    /// The target was only busy.
    Busy,
}

/// What to store for a target whose fetch returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Store {
    /// Store it done with its result.
    Done,
    /// Store it failed with its error and hint.
    Failed,
    /// Store it back to pending. `retry_at` is when it is due again; `None` when its job will
    /// not run again (cancelled or closed).
    Pending {
        /// When the target is due again.
        retry_at: Option<Duration>,
    },
    /// It has been busy for longer than `retry_for`: store it failed with the busy text.
    GiveUp,
}

impl Store {
    /// Whether the target's outcome is final (done or failed): the store counts it.
    pub fn is_final(self) -> bool {
        !matches!(self, Store::Pending { .. })
    }
}

/// A job that reached its terminal status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Terminal {
    /// The job's id.
    pub id: Arc<str>,
    /// Done, partial or failed.
    pub status: JobStatus,
    /// The job's error: empty, or [`ERR_CLOSED`].
    pub error: &'static str,
    /// From its submit to now.
    pub elapsed: Duration,
}

/// The decision for a returned fetch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completion {
    /// What to store for the target.
    pub store: Store,
    /// The job's terminal status, when this outcome ends it.
    pub terminal: Option<Terminal>,
}

/// A change the driver reports through its hooks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// The number of live jobs is now this.
    Depth(usize),
    /// The number of targets in flight is now this.
    Inflight(usize),
}

/// A job cancelled by [`JobMachine::cancel`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cancelled {
    /// The job's id.
    pub id: Arc<str>,
    /// Whether a target is still in flight (its outcome is still stored, then
    /// [`JobMachine::handle_stored`] is due as usual).
    pub inflight: bool,
    /// From its submit to now.
    pub elapsed: Duration,
}

/// An input the machine refused; nothing changed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MachineError {
    /// The machine is closed.
    #[error("closed")]
    Closed,
    /// A job needs at least one target.
    #[error("no targets")]
    NoTargets,
    /// The machine holds a job with this id already (live, or with a target still in flight).
    #[error("duplicate job id")]
    DuplicateId,
    /// No live job has this key.
    #[error("unknown job")]
    UnknownJob,
    /// The job has no target in flight, or not this one.
    #[error("target not in flight")]
    NotInFlight,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Live,
    Cancelled,
    // Closed while a target was in flight: terminal once that outcome is in.
    Closing,
    // Terminal (decided by an outcome), its last outcome still being stored.
    Finished,
}

#[derive(Debug)]
struct JobState {
    id: Arc<str>,
    targets: usize,
    next: usize,
    n_failed: usize,
    submitted: Duration,
    busy_since: Option<Duration>,
    // Set while the job sits in `waiting` (off the ring), so it can be found there in O(log n).
    due: Option<Duration>,
    inflight: bool,
    // The outcome is in and being stored: `retry_at` is the pending target's due time.
    storing: Option<Option<Duration>>,
    started: bool,
    phase: Phase,
}

/// No slot: the end of a link, an empty ring, no `cursor_at`.
const NIL: usize = usize::MAX;

/// One held job and its ring links (`prev`/`next` are slot numbers, meaningful while `linked`).
#[derive(Debug)]
struct Slot {
    key: JobKey,
    prev: usize,
    next: usize,
    linked: bool,
    job: JobState,
}

/// The hash of a [`JobKey`]: a multiplication by an odd constant, then a fold, a second
/// multiplication and a fold, so that every bit of the key reaches both the low bits (the
/// std hash map's bucket) and the top bits (its tag). Keys are integers the machine hands
/// out itself, so there is nothing to defend against; but the keys still live may be any
/// subset of them, strided too (every 256th job the long one), and a product alone has low
/// bits that depend only on the key's low bits. Public so that a driver can key its own maps
/// by [`JobKey`] as cheaply (`HashMap<JobKey, V, BuildHasherDefault<KeyHasher>>`).
#[derive(Debug, Default, Clone, Copy)]
pub struct KeyHasher(u64);

const KEY_MUL: u64 = 0x9E37_79B9_7F4A_7C15;
const KEY_MIX: u64 = 0xD6E8_FEB8_6659_FD93;

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        let z = (self.0 ^ (self.0 >> 32)).wrapping_mul(KEY_MIX);
        z ^ (z >> 32)
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(KEY_MUL);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0 ^ n).wrapping_mul(KEY_MUL);
    }
}

type KeyMap = HashMap<JobKey, usize, BuildHasherDefault<KeyHasher>>;

/// The pure scheduler of a runner. See the [module docs](self).
#[derive(Debug)]
pub struct JobMachine {
    cfg: MachineConfig,
    // The held jobs; `None` is a free slot, listed in `free`.
    slots: Vec<Option<Slot>>,
    free: Vec<usize>,
    // Key → slot, for every held job.
    by_key: KeyMap,
    // Id → slot, for every held job.
    by_id: HashMap<Arc<str>, usize>,
    // The keys of the jobs on the ring, to find a returning job's place.
    ring_keys: BTreeSet<JobKey>,
    // The ring member with the smallest key, or NIL.
    head: usize,
    // Jobs off the ring until a busy target's retry is due.
    waiting: BTreeSet<(Duration, JobKey)>,
    // The key of the job last served.
    cursor: Option<JobKey>,
    // The ring member with the greatest key ≤ `cursor`, or NIL.
    cursor_at: usize,
    next_key: JobKey,
    live: usize,
    inflight: usize,
    closed: bool,
    events: VecDeque<Event>,
}

impl JobMachine {
    /// An empty, open machine. `workers` below 1 counts as 1.
    pub fn new(cfg: MachineConfig) -> Self {
        JobMachine {
            cfg: MachineConfig {
                workers: cfg.workers.max(1),
                ..cfg
            },
            slots: Vec::new(),
            free: Vec::new(),
            by_key: KeyMap::default(),
            by_id: HashMap::new(),
            ring_keys: BTreeSet::new(),
            head: NIL,
            waiting: BTreeSet::new(),
            cursor: None,
            cursor_at: NIL,
            next_key: 0,
            live: 0,
            inflight: 0,
            closed: false,
            events: VecDeque::new(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> MachineConfig {
        self.cfg
    }

    /// Live jobs: submitted, not terminal, not cancelled.
    pub fn live_jobs(&self) -> usize {
        self.live
    }

    /// Targets in flight.
    pub fn inflight(&self) -> usize {
        self.inflight
    }

    /// Whether [`close`](Self::close) was called.
    pub fn is_closed(&self) -> bool {
        self.closed
    }

    /// The key of the job `id`, while the machine holds it (live, or cancelled/closing with a
    /// target in flight).
    pub fn job_key(&self, id: &str) -> Option<JobKey> {
        let s = *self.by_id.get(id)?;
        self.slot(s).map(|slot| slot.key)
    }

    /// Whether the machine holds the job `key` (live, or cancelled/closing with a target in
    /// flight): the same as [`job_key`](Self::job_key) of its id being `Some(key)`, in O(1)
    /// without hashing the id.
    pub fn contains(&self, key: JobKey) -> bool {
        self.by_key.contains_key(&key)
    }

    /// Whether the job `id` is live: not terminal, not cancelled, and the machine not closed.
    /// (A job closed with a target in flight still counts in [`live_jobs`](Self::live_jobs)
    /// until its outcome returns, since the store still holds it live.)
    pub fn is_live(&self, id: &str) -> bool {
        self.by_id
            .get(id)
            .and_then(|&s| self.slot(s))
            .is_some_and(|slot| slot.job.phase == Phase::Live)
    }

    /// A new job of `targets` targets, submitted at `now`. It joins the end of the rotation,
    /// its first target due at once.
    pub fn submit(
        &mut self,
        id: &str,
        targets: usize,
        now: Duration,
    ) -> Result<JobKey, MachineError> {
        if self.closed {
            return Err(MachineError::Closed);
        }
        if targets == 0 {
            return Err(MachineError::NoTargets);
        }
        if self.by_id.contains_key(id) {
            return Err(MachineError::DuplicateId);
        }
        let key = self.next_key;
        self.next_key += 1;
        let id: Arc<str> = Arc::from(id);
        let slot = Slot {
            key,
            prev: NIL,
            next: NIL,
            linked: false,
            job: JobState {
                id: id.clone(),
                targets,
                next: 0,
                n_failed: 0,
                submitted: now,
                busy_since: None,
                due: None,
                inflight: false,
                storing: None,
                started: false,
                phase: Phase::Live,
            },
        };
        let s = if let Some(s) = self.free.pop()
            && let Some(free) = self.slots.get_mut(s)
        {
            *free = Some(slot);
            s
        } else {
            self.slots.push(Some(slot));
            self.slots.len() - 1
        };
        self.by_key.insert(key, s);
        self.by_id.insert(id, s);
        // The greatest key so far: it joins at the tail, and the cursor (an older key) stays.
        let tail = self.slot(self.head).map(|h| h.prev);
        self.ring_keys.insert(key);
        self.splice(s, tail);
        self.set_live(self.live + 1);
        Ok(key)
    }

    /// The next target for an idle worker at `now`, or `None` when nothing is due, `workers`
    /// targets are in flight, or the machine is closed.
    pub fn poll_dispatch(&mut self, now: Duration) -> Option<Dispatch> {
        if self.closed || self.inflight >= self.cfg.workers {
            return None;
        }
        self.promote_due(now);
        let s = self.next_ready()?;
        let slot = self.slot_mut(s)?;
        let job = &mut slot.job;
        job.inflight = true;
        let first = !job.started;
        job.started = true;
        let d = Dispatch {
            key: slot.key,
            id: job.id.clone(),
            idx: job.next,
            first,
        };
        self.cursor = Some(d.key);
        self.cursor_at = s;
        self.set_inflight(self.inflight + 1);
        Some(d)
    }

    /// The outcome of target `idx` of job `key`, returned at `now`: what to store, and the job's
    /// terminal status if this ends it. The target stays in flight until
    /// [`handle_stored`](Self::handle_stored).
    pub fn handle_outcome(
        &mut self,
        key: JobKey,
        idx: usize,
        outcome: Outcome,
        now: Duration,
    ) -> Result<Completion, MachineError> {
        let cfg = self.cfg;
        let s = self.slot_of(key)?;
        let job = &mut self.slot_mut(s).ok_or(MachineError::UnknownJob)?.job;
        if !job.inflight || job.storing.is_some() || job.next != idx {
            return Err(MachineError::NotInFlight);
        }
        let store = match outcome {
            Outcome::Done => Store::Done,
            Outcome::Failed => Store::Failed,
            Outcome::Busy => {
                let since = *job.busy_since.get_or_insert(now);
                if now.saturating_sub(since) > cfg.retry_for {
                    Store::GiveUp
                } else if job.phase == Phase::Live {
                    Store::Pending {
                        retry_at: Some(now.saturating_add(cfg.retry_wait)),
                    }
                } else {
                    Store::Pending { retry_at: None }
                }
            }
        };
        if store.is_final() {
            job.next += 1;
            job.busy_since = None;
            if matches!(store, Store::Failed | Store::GiveUp) {
                job.n_failed += 1;
            }
        }
        job.storing = Some(match store {
            Store::Pending { retry_at } => retry_at,
            _ => None,
        });
        let terminal = match job.phase {
            Phase::Live | Phase::Closing if job.next >= job.targets => {
                let status = match job.n_failed {
                    0 => JobStatus::Done,
                    n if n >= job.targets => JobStatus::Failed,
                    _ => JobStatus::Partial,
                };
                Some(Terminal {
                    id: job.id.clone(),
                    status,
                    error: "",
                    elapsed: now.saturating_sub(job.submitted),
                })
            }
            Phase::Closing => Some(closed_terminal(job, now)),
            Phase::Live | Phase::Cancelled | Phase::Finished => None,
        };
        if terminal.is_some() {
            // It stays on the ring, in flight, until its outcome is stored.
            job.phase = Phase::Finished;
            self.set_live(self.live.saturating_sub(1));
        }
        Ok(Completion { store, terminal })
    }

    /// The outcome of job `key`'s in-flight target is stored, at `now`: the target is no longer
    /// in flight, and the job goes back into the rotation (due at once, or at its retry time).
    /// Returns the job's terminal status if the machine was closed while the outcome was being
    /// stored (`failed`, [`ERR_CLOSED`]).
    pub fn handle_stored(
        &mut self,
        key: JobKey,
        now: Duration,
    ) -> Result<Option<Terminal>, MachineError> {
        let s = self.slot_of(key)?;
        let job = &mut self.slot_mut(s).ok_or(MachineError::UnknownJob)?.job;
        let Some(retry_at) = job.storing.take() else {
            return Err(MachineError::NotInFlight);
        };
        job.inflight = false;
        let mut terminal = None;
        match job.phase {
            Phase::Live => {
                // Due at once: it is ready where it stands on the ring. Else it leaves the ring
                // until its retry is due.
                if let Some(due) = retry_at {
                    job.due = Some(due);
                    self.waiting.insert((due, key));
                    self.unlink(s);
                }
            }
            Phase::Closing => {
                terminal = Some(closed_terminal(job, now));
                self.end(s);
            }
            Phase::Cancelled | Phase::Finished => self.remove(s),
        }
        self.set_inflight(self.inflight.saturating_sub(1));
        Ok(terminal)
    }

    /// Cancels the live job `id` at `now`: nothing more of it is dispatched; an in-flight target
    /// is still stored when it returns. `None` if `id` is not live (unknown, terminal, or
    /// cancelled already).
    pub fn cancel(&mut self, id: &str, now: Duration) -> Option<Cancelled> {
        let s = *self.by_id.get(id)?;
        let job = &mut self.slot_mut(s)?.job;
        if job.phase != Phase::Live {
            return None;
        }
        job.phase = Phase::Cancelled;
        let c = Cancelled {
            id: job.id.clone(),
            inflight: job.inflight,
            elapsed: now.saturating_sub(job.submitted),
        };
        if c.inflight {
            // A job in flight is on the ring and never waiting; it stays there, not ready,
            // until its outcome is stored.
            self.set_live(self.live.saturating_sub(1));
        } else {
            self.end(s);
        }
        Some(c)
    }

    /// Closes the machine at `now`: nothing more is dispatched or submitted. Returns the live
    /// jobs with nothing in flight, each now terminal (`failed`, [`ERR_CLOSED`]); a live job
    /// with a target in flight is reported by [`handle_outcome`](Self::handle_outcome) or
    /// [`handle_stored`](Self::handle_stored) instead. A second call returns nothing.
    pub fn close(&mut self, now: Duration) -> Vec<Terminal> {
        if self.closed {
            return Vec::new();
        }
        self.closed = true;
        let mut live: Vec<(JobKey, usize)> = self
            .slots
            .iter()
            .enumerate()
            .filter_map(|(s, slot)| {
                slot.as_ref()
                    .filter(|slot| slot.job.phase == Phase::Live)
                    .map(|slot| (slot.key, s))
            })
            .collect();
        live.sort_unstable();
        let mut ended = Vec::new();
        for (_, s) in live {
            let Some(slot) = self.slot_mut(s) else {
                continue;
            };
            let job = &mut slot.job;
            if job.inflight {
                job.phase = Phase::Closing;
                continue;
            }
            ended.push(closed_terminal(job, now));
            self.end(s);
        }
        ended
    }

    /// The next change of state the driver must wake for, when it has nothing else to do: the
    /// earliest time a waiting target is due. `None` when nothing waits or the machine is closed.
    pub fn poll_timeout(&self) -> Option<Duration> {
        if self.closed {
            return None;
        }
        self.waiting.first().map(|(due, _)| *due)
    }

    /// The next depth or in-flight change, oldest first.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    fn slot(&self, s: usize) -> Option<&Slot> {
        self.slots.get(s).and_then(Option::as_ref)
    }

    fn slot_mut(&mut self, s: usize) -> Option<&mut Slot> {
        self.slots.get_mut(s).and_then(Option::as_mut)
    }

    fn slot_of(&self, key: JobKey) -> Result<usize, MachineError> {
        self.by_key
            .get(&key)
            .copied()
            .ok_or(MachineError::UnknownJob)
    }

    /// The first ready job on the ring after `cursor_at` (from the head if none), wrapping.
    /// Every job on the ring is ready but for at most `workers` with a target in flight.
    fn next_ready(&self) -> Option<usize> {
        let start = match self.slot(self.cursor_at) {
            Some(at) => at.next,
            None => self.head,
        };
        let mut s = start;
        // Bounded by the ring's length, so that even a broken ring cannot loop forever.
        for _ in 0..=self.ring_keys.len() {
            let slot = self.slot(s)?;
            if !slot.job.inflight && slot.job.phase == Phase::Live {
                return Some(s);
            }
            s = slot.next;
            if s == start {
                return None;
            }
        }
        None
    }

    /// Puts the waiting jobs due by `now` back on the ring.
    fn promote_due(&mut self, now: Duration) {
        while let Some(&(due, key)) = self.waiting.first() {
            if due > now {
                break;
            }
            self.waiting.pop_first();
            let Ok(s) = self.slot_of(key) else {
                continue;
            };
            if let Some(slot) = self.slot_mut(s) {
                slot.job.due = None;
            }
            self.link(s);
        }
    }

    /// Puts job `s` (off the ring) back on it, at its submit-order place.
    fn link(&mut self, s: usize) {
        let Some(slot) = self.slot(s) else {
            return;
        };
        if slot.linked {
            return;
        }
        let key = slot.key;
        let pred = self
            .ring_keys
            .range(..key)
            .next_back()
            .and_then(|k| self.by_key.get(k).copied());
        self.ring_keys.insert(key);
        self.splice(s, pred);
        // It now is the ring member with the greatest key ≤ the cursor, if its key is ≤ the
        // cursor and greater than the old one's.
        if let Some(c) = self.cursor
            && key <= c
            && self.slot(self.cursor_at).is_none_or(|at| at.key < key)
        {
            self.cursor_at = s;
        }
    }

    /// Links `s` into the ring right after `pred`; with no `pred`, before the head (it becomes
    /// the head). Its key must sit between its neighbours'.
    fn splice(&mut self, s: usize, pred: Option<usize>) {
        let (p, new_head) = match pred {
            Some(p) => (p, false),
            None => match self.slot(self.head) {
                Some(h) => (h.prev, true),
                None => {
                    // The ring was empty.
                    if let Some(slot) = self.slot_mut(s) {
                        slot.prev = s;
                        slot.next = s;
                        slot.linked = true;
                        self.head = s;
                    }
                    return;
                }
            },
        };
        let Some(n) = self.slot(p).map(|p| p.next) else {
            return;
        };
        if let Some(slot) = self.slot_mut(s) {
            slot.prev = p;
            slot.next = n;
            slot.linked = true;
        } else {
            return;
        }
        if let Some(p) = self.slot_mut(p) {
            p.next = s;
        }
        if let Some(n) = self.slot_mut(n) {
            n.prev = s;
        }
        if new_head {
            self.head = s;
        }
    }

    /// Takes job `s` off the ring (if it is on it).
    fn unlink(&mut self, s: usize) {
        let Some(slot) = self.slot_mut(s) else {
            return;
        };
        if !slot.linked {
            return;
        }
        slot.linked = false;
        let (key, p, n) = (slot.key, slot.prev, slot.next);
        self.ring_keys.remove(&key);
        let was_head = self.head == s;
        if n == s {
            self.head = NIL;
        } else {
            if let Some(p) = self.slot_mut(p) {
                p.next = n;
            }
            if let Some(n) = self.slot_mut(n) {
                n.prev = p;
            }
            if was_head {
                self.head = n;
            }
        }
        if self.cursor_at == s {
            // Its predecessor has the greatest key below it; the head has none below it.
            self.cursor_at = if was_head { NIL } else { p };
        }
    }

    /// Removes a job that has just stopped being live.
    fn end(&mut self, s: usize) {
        self.remove(s);
        self.set_live(self.live.saturating_sub(1));
    }

    /// Lets go of job `s`: off the ring and the waiting set, its key and id forgotten, its slot
    /// free for reuse.
    fn remove(&mut self, s: usize) {
        self.unlink(s);
        let Some(slot) = self.slots.get_mut(s).and_then(Option::take) else {
            return;
        };
        if let Some(due) = slot.job.due {
            self.waiting.remove(&(due, slot.key));
        }
        self.by_key.remove(&slot.key);
        self.by_id.remove(&slot.job.id);
        self.free.push(s);
    }

    fn set_live(&mut self, n: usize) {
        if n != self.live {
            self.live = n;
            self.events.push_back(Event::Depth(n));
        }
    }

    fn set_inflight(&mut self, n: usize) {
        if n != self.inflight {
            self.inflight = n;
            self.events.push_back(Event::Inflight(n));
        }
    }
}

fn closed_terminal(job: &JobState, now: Duration) -> Terminal {
    Terminal {
        id: job.id.clone(),
        status: JobStatus::Failed,
        error: ERR_CLOSED,
        elapsed: now.saturating_sub(job.submitted),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::hash::{BuildHasher, BuildHasherDefault};

    use super::KeyHasher;

    /// Keys 0, s, 2s, … (the live jobs may be any of those handed out) land in as many
    /// buckets, by the low 14 bits, as keys spread at random would (10 000 into 16 384: about
    /// 7 800), for strides up to 2^32 (a product alone put keys of stride 2^k, k ≤ 14, into
    /// 2^(14 - k) buckets).
    #[test]
    fn key_hashes_spread_strided_keys_over_the_buckets() {
        let hasher = BuildHasherDefault::<KeyHasher>::default();
        for k in [0, 2, 4, 6, 8, 10, 12, 14, 16, 20, 24, 32] {
            let buckets: HashSet<u64> = (0..10_000u64)
                .map(|i| hasher.hash_one(i << k) & 0x3fff)
                .collect();
            assert!(
                buckets.len() > 7_000,
                "stride 2^{k}: {} buckets",
                buckets.len()
            );
        }
    }
}
