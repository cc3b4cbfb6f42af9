//! Fuzz target `stores`: differential testing of the three `BatchStore` backends.
//!
//! One arbitrary sequence of store operations (admit with small caps and a few callers and keys,
//! start_target, finish_target with every `TargetWrite` and an optional finish status, the two
//! together as a worker does them, set_status, touch, and more rarely sweep, evict and recover,
//! and the reads) is applied to `MemoryStore`, `SqliteStore::open_in_memory()` and
//! `RedbStore::in_memory()`. Job ids come from a pool of four fixed ids and target indexes from
//! the job's own (by the memory store's row, plus one past the end), so operations hit existing
//! rows; times move forward by up to a minute per step and sometimes back a few seconds.
//! `ROTA_FUZZ_TRACE=1` prints every operation and its answer.
//!
//! After every operation all three must give the same answer (the same `Ok` value, or all an
//! error). After every write they must also hold the same state: the written job's row and
//! target rows, `live_jobs` for everyone and per caller, and `total_bytes`; after sweep, evict,
//! recover, every 16th operation and at the end, every pooled job's rows. Each store's state must
//! also be consistent with itself: `targets_done` counts the done + failed rows, `n_bytes` is the
//! sum of `TargetRow::n_bytes`, a result is stored exactly for done rows, and (on a full
//! snapshot) `total_bytes` is the sum of `n_bytes` and `live_jobs` counts the queued + running
//! jobs.
//! A disagreement panics with the operation, its index and each store's answer.
#![no_main]

use std::fmt::Debug;
use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use rota_core::{
    BatchStore, CallerClass, Caps, JobRow, JobStatus, NewJob, StoreError, TargetRow, TargetState,
    TargetWrite,
};
use rota_store_memory::MemoryStore;
use rota_store_redb::RedbStore;
use rota_store_sqlite::SqliteStore;

const IDS: u8 = 4;
const CALLERS: [&str; 3] = ["alice", "bob", "c\u{e9}cile"];
const KEYS: [&str; 3] = ["k0", "k1", "k2"];
const URLS: [&str; 4] = [
    "https://example.com/a",
    "",
    "\u{1F600} \"quoted\" \0 nul\nnewline",
    "u",
];
const OPTIONS: [&str; 3] = ["{}", r#"{"mode":"text","recover":true}"#, ""];
const TEXTS: [&str; 4] = [
    r#"{"content":"hello"}"#,
    "",
    r#"{"content":"x","meta":{"status":200}}"#,
    "HTTP 404",
];
const MAX_OPS: usize = 100;
const MAX_TEXT: usize = 80;

#[derive(Arbitrary, Debug, Clone, Copy)]
enum St {
    Queued,
    Running,
    Done,
    Partial,
    Failed,
    Cancelled,
}

impl From<St> for JobStatus {
    fn from(s: St) -> Self {
        match s {
            St::Queued => JobStatus::Queued,
            St::Running => JobStatus::Running,
            St::Done => JobStatus::Done,
            St::Partial => JobStatus::Partial,
            St::Failed => JobStatus::Failed,
            St::Cancelled => JobStatus::Cancelled,
        }
    }
}

#[derive(Arbitrary, Debug, Clone)]
enum Text {
    Pool(u8),
    Any(String),
}

impl Text {
    fn get(&self) -> String {
        match self {
            Text::Pool(i) => TEXTS[usize::from(*i) % TEXTS.len()].to_owned(),
            Text::Any(s) => s.chars().take(MAX_TEXT).collect(),
        }
    }
}

#[derive(Arbitrary, Debug, Clone)]
enum W {
    Running,
    Pending,
    Done { result: Text },
    Failed { error: Text, hint: Text },
}

impl W {
    fn get(&self) -> TargetWrite {
        match self {
            W::Running => TargetWrite::Running,
            W::Pending => TargetWrite::Pending,
            W::Done { result } => TargetWrite::Done {
                result: result.get(),
            },
            W::Failed { error, hint } => TargetWrite::Failed {
                error: error.get(),
                hint: hint.get(),
            },
        }
    }
}

#[derive(Arbitrary, Debug, Clone)]
enum Housekeep {
    Sweep { ttl: u8 },
    Evict { max_bytes: u16 },
    Recover { error: Text },
}

#[derive(Arbitrary, Debug, Clone)]
enum Read {
    Job { id: u8 },
    Targets { id: u8 },
    LiveJobs { caller: Option<u8> },
    TotalBytes,
    View { id: u8 },
}

#[derive(Arbitrary, Debug, Clone)]
enum Op {
    Admit {
        id: u8,
        caller: u8,
        key: u8,
        restricted: bool,
        targets: Vec<(u8, u8)>,
        per_job: u8,
        per_caller: u8,
        total: u8,
        ttl: u8,
    },
    Start {
        id: u8,
        idx: u8,
    },
    Finish {
        id: u8,
        idx: u8,
        write: W,
        finish: Option<St>,
    },
    SetStatus {
        id: u8,
        status: St,
        error: Text,
    },
    Touch {
        id: u8,
    },
    /// Start then finish one target (what a worker does).
    Work {
        id: u8,
        idx: u8,
        write: W,
        finish: Option<St>,
    },
    /// Sweep, evict or recover: rarer than the other writes, so jobs live long enough.
    Housekeep(Housekeep),
    Read(Read),
    Advance {
        secs: u8,
    },
    Rewind {
        secs: u8,
    },
}

fn job_id(n: u8) -> String {
    format!("{:032x}", 0x0f0f_u32 + u32::from(n % IDS))
}

/// `ROTA_FUZZ_TRACE=1`: print every operation and the first store's answer (to read a crash).
fn trace() -> bool {
    static TRACE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *TRACE.get_or_init(|| std::env::var_os("ROTA_FUZZ_TRACE").is_some())
}

/// Polls a future to completion on this thread; the stores never actually wait.
fn block_on<F: Future>(f: F) -> F::Output {
    let mut f = pin!(f);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::yield_now();
    }
}

struct Diff {
    stores: Vec<(&'static str, Box<dyn BatchStore>)>,
    now: i64,
    step: usize,
}

/// All stores must give the same `Ok` answer, or all an error.
fn agree<T: Debug + PartialEq>(
    what: &dyn Debug,
    step: usize,
    answers: &[(&str, Result<T, StoreError>)],
) {
    let Some((first_name, first)) = answers.first() else {
        return;
    };
    for (name, got) in &answers[1..] {
        let same = match (first, got) {
            (Ok(a), Ok(b)) => a == b,
            (Err(_), Err(_)) => true,
            _ => false,
        };
        if !same {
            let all: Vec<String> = answers
                .iter()
                .map(|(n, a)| format!("  {n}: {a:?}"))
                .collect();
            panic!(
                "stores disagree at op #{step} {what:?}: {first_name} vs {name}\n{}",
                all.join("\n")
            );
        }
    }
}

impl Diff {
    /// A target index of pooled job `id`: mostly one it has (by the first store's row), else one
    /// past its last.
    fn idx(&self, id: u8, raw: u8) -> usize {
        let n = self
            .stores
            .first()
            .and_then(|(_, s)| block_on(s.job(&job_id(id))).ok().flatten())
            .map_or(4, |j| j.targets_total);
        usize::from(raw) % (n + 1)
    }

    fn each<T: Debug + PartialEq>(
        &self,
        what: &dyn Debug,
        f: impl Fn(&dyn BatchStore) -> Result<T, StoreError>,
    ) -> Vec<(&'static str, Result<T, StoreError>)> {
        let answers: Vec<_> = self
            .stores
            .iter()
            .map(|(n, s)| (*n, f(s.as_ref())))
            .collect();
        if trace()
            && let Some((_, a)) = answers.first()
        {
            eprintln!("#{} {what:?} -> {a:?}", self.step);
        }
        agree(what, self.step, &answers);
        answers
    }

    fn apply(&mut self, op: &Op) {
        let now = self.now;
        match op {
            Op::Admit {
                id,
                caller,
                key,
                restricted,
                targets,
                per_job,
                per_caller,
                total,
                ttl,
            } => {
                let mut targets: Vec<(String, String)> = targets
                    .iter()
                    .take(4)
                    .map(|&(u, o)| {
                        (
                            URLS[usize::from(u) % URLS.len()].to_owned(),
                            OPTIONS[usize::from(o) % OPTIONS.len()].to_owned(),
                        )
                    })
                    .collect();
                if targets.is_empty() {
                    targets.push((URLS[0].to_owned(), OPTIONS[0].to_owned()));
                }
                let job = NewJob {
                    id: job_id(*id),
                    caller: CALLERS[usize::from(*caller) % CALLERS.len()].to_owned(),
                    class: if *restricted {
                        CallerClass::Restricted
                    } else {
                        CallerClass::Fleet
                    },
                    idem_key: KEYS[usize::from(*key) % KEYS.len()].to_owned(),
                    targets,
                    now,
                };
                let caps = Caps {
                    targets_per_job: usize::from(per_job % 5) + 1,
                    jobs_per_caller: usize::from(per_caller % 3) + 1,
                    jobs_total: usize::from(total % 4) + 1,
                    ttl_secs: i64::from(ttl % 30),
                };
                self.each(&(op, &caps, now), |s| block_on(s.admit(&job, &caps)));
            }
            Op::Start { id, idx } => {
                let (id, idx) = (job_id(*id), self.idx(*id, *idx));
                self.each(&(op, now), |s| block_on(s.start_target(&id, idx, now)));
            }
            Op::Finish {
                id,
                idx,
                write,
                finish,
            } => {
                let (id, idx, write) = (job_id(*id), self.idx(*id, *idx), write.get());
                let finish = finish.map(JobStatus::from);
                self.each(&(op, now), |s| {
                    block_on(s.finish_target(&id, idx, &write, now, finish))
                });
            }
            Op::Work {
                id,
                idx,
                write,
                finish,
            } => {
                let (id, idx, write) = (job_id(*id), self.idx(*id, *idx), write.get());
                let finish = finish.map(JobStatus::from);
                self.each(&(op, "start", now), |s| {
                    block_on(s.start_target(&id, idx, now))
                });
                self.each(&(op, "finish", now), |s| {
                    block_on(s.finish_target(&id, idx, &write, now, finish))
                });
            }
            Op::SetStatus { id, status, error } => {
                let (id, error) = (job_id(*id), error.get());
                let status = JobStatus::from(*status);
                self.each(&(op, now), |s| {
                    block_on(s.set_status(&id, status, &error, now))
                });
            }
            Op::Touch { id } => {
                let id = job_id(*id);
                self.each(&(op, now), |s| block_on(s.touch(&id, now)));
            }
            Op::Housekeep(Housekeep::Sweep { ttl }) => {
                let ttl = i64::from(ttl % 60);
                self.each(&(op, now), |s| block_on(s.sweep(now, ttl)));
            }
            Op::Housekeep(Housekeep::Evict { max_bytes }) => {
                let max = u64::from(*max_bytes % 512);
                self.each(&(op, max), |s| block_on(s.evict(max)));
            }
            Op::Housekeep(Housekeep::Recover { error }) => {
                let error = error.get();
                self.each(&(op, now), |s| block_on(s.recover(&error, now)));
            }
            Op::Read(Read::Job { id }) => {
                let id = job_id(*id);
                self.each(op, |s| block_on(s.job(&id)));
            }
            Op::Read(Read::Targets { id }) => {
                let id = job_id(*id);
                self.each(op, |s| block_on(s.targets(&id)));
            }
            Op::Read(Read::View { id }) => {
                let id = job_id(*id);
                let answers = self.each(op, |s| block_on(s.view(&id)));
                // Nothing writes between the reads here: a view is what job and targets read.
                for ((name, s), (_, view)) in self.stores.iter().zip(&answers) {
                    let Ok(view) = view else { continue };
                    let job = block_on(s.job(&id)).ok().flatten();
                    let targets = block_on(s.targets(&id)).unwrap_or_default();
                    let apart = job.map(|j| (j, targets));
                    assert_eq!(
                        view, &apart,
                        "#{} {name}: view of {id} against job and targets",
                        self.step
                    );
                }
            }
            Op::Read(Read::LiveJobs { caller }) => {
                let caller = caller.map(|c| CALLERS[usize::from(c) % CALLERS.len()]);
                self.each(op, |s| block_on(s.live_jobs(caller)));
            }
            Op::Read(Read::TotalBytes) => {
                self.each(op, |s| block_on(s.total_bytes()));
            }
            Op::Advance { secs } => self.now += i64::from(secs % 64),
            Op::Rewind { secs } => self.now -= i64::from(secs % 4),
        }
        self.compare_state(op);
    }

    /// Every store holds the same rows and counts, each consistent with itself: after an op on
    /// one job, that job's rows and the global counts; after one that may touch many (sweep,
    /// evict, recover), every 16 ops and at the end, every pooled job and every count.
    fn compare_state(&self, op: &Op) {
        let touched = match op {
            Op::Admit { id, .. }
            | Op::Start { id, .. }
            | Op::Finish { id, .. }
            | Op::Work { id, .. }
            | Op::SetStatus { id, .. }
            | Op::Touch { id } => Some(*id % IDS),
            Op::Housekeep(_) => None,
            _ if self.step % 16 == 15 => None,
            _ => return,
        };
        let what = format!("state after {op:?}");
        let snaps = self.each(&what, |s| snapshot(s, touched));
        for (name, snap) in &snaps {
            if let Ok(snap) = snap {
                check_consistent(name, self.step, op, snap);
            }
        }
    }

    fn compare_all(&self) {
        let snaps = self.each(&"state at the end", |s| snapshot(s, None));
        for (name, snap) in &snaps {
            if let Ok(snap) = snap {
                check_consistent(name, self.step, &Op::Read(Read::TotalBytes), snap);
            }
        }
    }
}

#[derive(Debug, PartialEq)]
struct Snapshot {
    /// Every pooled job, or only the one an op touched (`full` false).
    full: bool,
    jobs: Vec<(String, Option<JobRow>, Vec<TargetRow>)>,
    live: usize,
    live_by_caller: Vec<usize>,
    total_bytes: u64,
}

fn snapshot(s: &dyn BatchStore, only: Option<u8>) -> Result<Snapshot, StoreError> {
    let mut jobs = Vec::new();
    let pool: Vec<u8> = match only {
        Some(n) => vec![n],
        None => (0..IDS).collect(),
    };
    for n in pool {
        let id = job_id(n);
        let row = block_on(s.job(&id))?;
        let targets = block_on(s.targets(&id))?;
        jobs.push((id, row, targets));
    }
    let mut live_by_caller = Vec::new();
    for c in CALLERS {
        live_by_caller.push(block_on(s.live_jobs(Some(c)))?);
    }
    Ok(Snapshot {
        full: only.is_none(),
        jobs,
        live: block_on(s.live_jobs(None))?,
        live_by_caller,
        total_bytes: block_on(s.total_bytes())?,
    })
}

fn check_consistent(name: &str, step: usize, op: &Op, s: &Snapshot) {
    let ctx = || format!("{name} after op #{step} {op:?}");
    let mut total = 0;
    let mut live = 0;
    let mut by_caller = vec![0; CALLERS.len()];
    for (id, row, targets) in &s.jobs {
        let Some(row) = row else {
            assert!(
                targets.is_empty(),
                "{}: targets of a missing job {id}",
                ctx()
            );
            continue;
        };
        assert_eq!(&row.id, id, "{}", ctx());
        assert_eq!(
            row.targets_total,
            targets.len(),
            "{}: targets_total of {id}",
            ctx()
        );
        let finished = targets.iter().filter(|t| t.status.is_finished()).count();
        assert_eq!(
            row.targets_done,
            finished,
            "{}: targets_done of {id}",
            ctx()
        );
        let bytes: u64 = targets.iter().map(TargetRow::n_bytes).sum();
        assert_eq!(row.n_bytes, bytes, "{}: n_bytes of {id}", ctx());
        for (i, t) in targets.iter().enumerate() {
            assert_eq!(t.idx, i, "{}: idx order of {id}", ctx());
            assert_eq!(
                t.result.is_some(),
                t.status == TargetState::Done,
                "{}: result of {id}/{i}",
                ctx()
            );
        }
        total += row.n_bytes;
        if row.status.is_live() {
            live += 1;
            if let Some(c) = CALLERS.iter().position(|c| *c == row.caller) {
                by_caller[c] += 1;
            }
        }
    }
    if s.full {
        assert_eq!(s.total_bytes, total, "{}: total_bytes", ctx());
        assert_eq!(s.live, live, "{}: live_jobs(None)", ctx());
        assert_eq!(s.live_by_caller, by_caller, "{}: live_jobs(caller)", ctx());
    }
}

fuzz_target!(|ops: Vec<Op>| {
    let (Ok(sqlite), Ok(redb)) = (SqliteStore::open_in_memory(), RedbStore::in_memory()) else {
        panic!("an in-memory store failed to open");
    };
    let mut diff = Diff {
        stores: vec![
            ("memory", Box::new(MemoryStore::new())),
            ("sqlite", Box::new(sqlite)),
            ("redb", Box::new(redb)),
        ],
        now: 1_000_000,
        step: 0,
    };
    for (step, op) in ops.iter().take(MAX_OPS).enumerate() {
        diff.step = step;
        diff.apply(op);
    }
    diff.compare_all();
});
