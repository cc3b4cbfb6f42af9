//! `runner` and `history` rows: the [`Runner`] end to end with an instant fetch, and beside it
//! the raw loop of the same store calls.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rota::{
    Admission, BatchStore, Caller, CallerClass, CancellationToken, Caps, Config, FetchError, Hooks,
    JobOutcome, JobStatus, NewJob, Options, Runner, StoreError, Target, TargetResult, TargetWrite,
    idem_key,
};
use tokio::sync::Notify;

/// Caps high enough that nothing is refused, swept or evicted during a run.
pub const BIG: usize = 1_000_000;
pub const TTL: Duration = Duration::from_secs(10 * 365 * 24 * 3600);
pub const MAX_BYTES: u64 = 1 << 50;

/// The runner's config for a bench: caps raised, ttl and byte budget out of reach.
pub fn config(workers: usize, hooks: Arc<dyn Hooks>) -> Config {
    Config {
        ttl: TTL,
        targets_per_job: 32,
        jobs_per_caller: BIG,
        jobs_total: BIG,
        workers,
        max_bytes: MAX_BYTES,
        hooks,
        ..Config::default()
    }
}

/// The caps the runner passes to admit for [`config`].
pub fn caps() -> Caps {
    let c = config(1, Arc::new(Finished::default()));
    Caps {
        targets_per_job: c.targets_per_job,
        jobs_per_caller: c.jobs_per_caller,
        jobs_total: c.jobs_total,
        ttl_secs: c.ttl_secs(),
    }
}

/// Counts finished jobs, notes when the latest was, and wakes the bench when `goal` have
/// ended (or one ended otherwise than done: a failed store write, say, which the bench must
/// report rather than wait for ever on).
#[derive(Default)]
pub struct Finished {
    /// Jobs reported ended, and when the latest of them was (its last target stored).
    done: Mutex<(usize, Option<Instant>)>,
    /// Jobs reported ended otherwise than done.
    not_done: AtomicUsize,
    goal: AtomicUsize,
    notify: Notify,
}

impl Hooks for Finished {
    fn job(&self, outcome: JobOutcome) {
        if matches!(outcome, JobOutcome::Created | JobOutcome::Reused) {
            return;
        }
        if outcome != JobOutcome::Done {
            self.not_done.fetch_add(1, Ordering::SeqCst);
        }
        let mut done = self.done();
        done.0 += 1;
        done.1 = Some(Instant::now());
        if done.0 == self.goal.load(Ordering::SeqCst) || outcome != JobOutcome::Done {
            self.notify.notify_one();
        }
    }
}

impl Finished {
    fn done(&self) -> MutexGuard<'_, (usize, Option<Instant>)> {
        self.done.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits until `goal` jobs are done, and returns when the last of them was: the bench's
    /// own wake-up after that is not the runner's time. (A rep's jobs are all submitted before
    /// this call and the next rep's after it returns, so the latest done job is the rep's
    /// last; a goal met before it was set here is seen by the first look.) An error as soon as
    /// a job has ended otherwise than done.
    async fn wait_for(&self, goal: usize) -> Result<Instant, StoreError> {
        self.goal.store(goal, Ordering::SeqCst);
        loop {
            let notified = self.notify.notified();
            let bad = self.not_done.load(Ordering::SeqCst);
            if bad > 0 {
                return Err(StoreError::backend(
                    "bench",
                    std::io::Error::other(format!(
                        "{bad} job(s) ended otherwise than done (see the warnings logged)"
                    )),
                ));
            }
            if let (n, Some(at)) = *self.done()
                && n >= goal
            {
                return Ok(at);
            }
            notified.await;
        }
    }
}

/// What the instant fetch returns.
pub fn result() -> TargetResult {
    TargetResult {
        content: "ok".into(),
        meta: Default::default(),
    }
}

/// When a batch's first target was fetched (the instant fetch marks it).
pub struct FirstFetch {
    epoch: Instant,
    /// Nanoseconds after `epoch`; 0 until the batch's first fetch.
    at: AtomicU64,
}

impl FirstFetch {
    fn new() -> Self {
        FirstFetch {
            epoch: Instant::now(),
            at: AtomicU64::new(0),
        }
    }

    /// Notes now, if this is the batch's first fetch: one load for every later one.
    fn mark(&self) {
        if self.at.load(Ordering::Relaxed) == 0 {
            let ns = u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX);
            let _ = self
                .at
                .compare_exchange(0, ns.max(1), Ordering::Relaxed, Ordering::Relaxed);
        }
    }

    /// Readies it for the next batch (its workers idle: the last batch is all stored).
    fn reset(&self) {
        self.at.store(0, Ordering::SeqCst);
    }

    /// How long after `t0` the first fetch was (the hook that reported the batch done came
    /// after it, under locks, so its mark is seen here).
    fn after(&self, t0: Instant) -> Option<Duration> {
        match self.at.load(Ordering::SeqCst) {
            0 => None,
            ns => Some((self.epoch + Duration::from_nanos(ns)).saturating_duration_since(t0)),
        }
    }
}

fn url(job: usize, idx: usize) -> String {
    format!("https://bench.invalid/{job}/{idx}")
}

fn caller() -> Caller {
    Caller {
        name: "bench".into(),
        workspace: "bench".into(),
        key_sha256: String::new(),
    }
}

/// The shape of one measurement: `live` jobs of `per_job` targets submitted up front, `reps`
/// times over.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    pub live: usize,
    pub per_job: usize,
    pub reps: usize,
}

impl Shape {
    /// `live` jobs of `per_job`, repeated until about `targets` targets.
    pub fn new(live: usize, per_job: usize, targets: usize) -> Shape {
        let batch = live * per_job;
        Shape {
            live,
            per_job,
            reps: targets.div_ceil(batch).max(1),
        }
    }

    pub fn targets(&self) -> usize {
        self.live * self.per_job * self.reps
    }
}

/// What one runner run measured.
#[derive(Debug, Clone, Copy)]
pub struct Ran {
    /// Targets stored per second.
    pub per_s: f64,
    /// The median over its batches of how long after the batch's first submit began its
    /// first target was fetched: that submit, then the wake-up of a worker idle since the
    /// batch before.
    pub first_fetch: Duration,
}

/// Targets stored per second by a runner with `workers` on `store`: each rep submits `live`
/// jobs up front and waits until all are done; the clock runs from each rep's first submit to
/// its last stored target (as the hook of its last job saw it, not when the bench woke).
/// `first_job` numbers the jobs (so the URLs and keys are new).
pub async fn run(
    store: Arc<dyn BatchStore>,
    workers: usize,
    shape: Shape,
    first_job: usize,
) -> Result<Ran, StoreError> {
    let hooks = Arc::new(Finished::default());
    let first = Arc::new(FirstFetch::new());
    let seen = first.clone();
    // The instant fetch: marks `first`, then returns [`result`] from its first poll. (Its
    // future holds the arguments until then, as an `async fn` fetch's would.)
    let instant = move |caller: Arc<Caller>, target: Target, cancel: CancellationToken| {
        seen.mark();
        async move {
            drop((caller, target, cancel));
            Ok::<_, FetchError>(result())
        }
    };
    let runner = Runner::start(store, instant, config(workers, hooks.clone())).await?;
    let mut lags = Vec::with_capacity(shape.reps);
    let caller = caller();
    let mut busy = Duration::ZERO;
    let mut job = first_job;
    let mut goal = 0;
    for _ in 0..shape.reps {
        let batch: Vec<Vec<Target>> = (0..shape.live)
            .map(|_| {
                job += 1;
                (0..shape.per_job)
                    .map(|i| Target {
                        url: url(job, i),
                        options: Options::default(),
                    })
                    .collect()
            })
            .collect();
        goal += shape.live;
        first.reset();
        let t0 = Instant::now();
        for targets in batch {
            match runner
                .submit(caller.clone(), CallerClass::Fleet, targets)
                .await
            {
                Ok(s) if !s.reused => {}
                Ok(_) => panic!("bench: a submit was reused"),
                Err(e) => panic!("bench: submit failed: {e}"),
            }
        }
        let end = hooks.wait_for(goal).await?;
        busy += end.saturating_duration_since(t0);
        lags.extend(first.after(t0));
    }
    runner.close().await;
    Ok(Ran {
        per_s: shape.targets() as f64 / busy.as_secs_f64(),
        first_fetch: crate::middle(&mut lags).unwrap_or_default(),
    })
}

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// A job id spread over the id space like the runner's random ones (so the raw loop's inserts
/// and lookups land all over the id index, as the runner's do, not at its end): job number
/// `n` through two rounds of splitmix64, as 32 hex characters. Distinct for distinct `n`
/// (each round is a bijection of u64).
fn scattered_id(n: usize) -> String {
    fn mix(mut z: u64) -> u64 {
        z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    let hi = mix(n as u64);
    format!("{hi:016x}{:016x}", mix(hi))
}

/// The jobs of one rep as the runner would admit them (built before the clock starts).
fn new_jobs(shape: &Shape, job: &mut usize, now: i64) -> Vec<NewJob> {
    let caller = caller();
    (0..shape.live)
        .map(|_| {
            *job += 1;
            let targets: Vec<Target> = (0..shape.per_job)
                .map(|i| Target {
                    url: url(*job, i),
                    options: Options::default(),
                })
                .collect();
            NewJob {
                id: scattered_id(*job),
                caller: caller.name.clone(),
                class: CallerClass::Fleet,
                idem_key: idem_key(&caller.name, &targets),
                targets: targets
                    .iter()
                    .map(|t| (t.url.clone(), t.options.to_json()))
                    .collect(),
                now,
            }
        })
        .collect()
}

/// Targets per second of the store calls a runner makes for `shape`, issued back to back: per
/// job `admit` then `sweep` (Runner::submit), then round-robin over the jobs per target
/// `start_target`, `finish_target` (the last with the job's terminal status) and `evict`
/// (Runner::run_target). No fetch, no machine, no tasks.
pub async fn raw(
    store: &dyn BatchStore,
    shape: Shape,
    first_job: usize,
) -> Result<f64, StoreError> {
    let caps = caps();
    let mut job = first_job;
    let mut busy = Duration::ZERO;
    let write = TargetWrite::Done {
        result: result()
            .to_json()
            .map_err(|e| StoreError::backend("bench json", e))?,
    };
    for _ in 0..shape.reps {
        let now = unix_now();
        let jobs = new_jobs(&shape, &mut job, now);
        let t0 = Instant::now();
        for j in &jobs {
            match store.admit(j, &caps).await? {
                Admission::Created => {}
                a => panic!("bench: raw admit gave {a:?}"),
            }
            store.sweep(now, caps.ttl_secs).await?;
        }
        for idx in 0..shape.per_job {
            let finish = (idx + 1 == shape.per_job).then_some(JobStatus::Done);
            for j in &jobs {
                if store.start_target(&j.id, idx, now).await?.is_none() {
                    panic!("bench: raw start_target found no target");
                }
                if !store.finish_target(&j.id, idx, &write, now, finish).await? {
                    panic!("bench: raw finish_target found no target");
                }
                store.evict(MAX_BYTES).await?;
            }
        }
        busy += t0.elapsed();
    }
    Ok(shape.targets() as f64 / busy.as_secs_f64())
}

/// Stores `jobs` finished jobs of 32 done targets through the store API, fast: admit, then
/// `finish_target` per target (the last one finishing the job); no start, sweep or evict.
pub async fn prefill(store: &dyn BatchStore, jobs: usize) -> Result<(), StoreError> {
    let caps = caps();
    let shape = Shape {
        live: 1,
        per_job: 32,
        reps: 1,
    };
    let write = TargetWrite::Done {
        result: result()
            .to_json()
            .map_err(|e| StoreError::backend("bench json", e))?,
    };
    // Job numbers far from the measured ones so the ids never clash.
    let mut job = 1 << 40;
    let now = unix_now();
    for _ in 0..jobs {
        for j in new_jobs(&shape, &mut job, now) {
            if store.admit(&j, &caps).await? != Admission::Created {
                panic!("bench: prefill admit refused");
            }
            for idx in 0..32 {
                let finish = (idx == 31).then_some(JobStatus::Done);
                store.finish_target(&j.id, idx, &write, now, finish).await?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A job that ends otherwise than done (a failed store write) ends the wait with an error
    /// at once: the goal of done jobs would never be met.
    #[tokio::test]
    async fn a_job_not_done_ends_the_wait_with_an_error() {
        let f = Finished::default();
        f.job(JobOutcome::Created);
        f.job(JobOutcome::Done);
        let waited = tokio::time::timeout(Duration::from_secs(10), f.wait_for(1)).await;
        assert!(matches!(waited, Ok(Ok(_))), "{waited:?}");
        f.job(JobOutcome::Failed);
        let waited = tokio::time::timeout(Duration::from_secs(10), f.wait_for(3)).await;
        assert!(matches!(waited, Ok(Err(_))), "{waited:?}");
    }

    #[test]
    fn first_fetch_keeps_the_first_mark_of_a_batch_until_reset() {
        let f = FirstFetch::new();
        let t0 = Instant::now();
        assert_eq!(f.after(t0), None);
        std::thread::sleep(Duration::from_millis(2));
        f.mark();
        let first = f.after(t0).unwrap();
        assert!(first >= Duration::from_millis(2), "{first:?}");
        std::thread::sleep(Duration::from_millis(2));
        f.mark();
        assert_eq!(f.after(t0), Some(first));
        f.reset();
        assert_eq!(f.after(t0), None);
    }

    /// The `history` rows' prefilled file holds what they say once reopened as the rows reopen
    /// it (redb's prefill commits without an fsync until the store is dropped): every job
    /// `done` with its 32 targets, none live, and a runner's start recovers nothing in it.
    #[tokio::test]
    async fn a_prefilled_file_reopens_with_its_finished_jobs() {
        use crate::stores::{self, Backend};
        for backend in [Backend::Sqlite, Backend::Redb] {
            let dir = stores::new_dir().unwrap();
            let path = stores::path_in(backend, dir.path());
            let s = stores::open(backend, &path, true).unwrap();
            prefill(&*s, 3).await.unwrap();
            drop(s);
            let s = stores::open(backend, &path, false).unwrap();
            for n in 1..=3 {
                let (job, targets) = s.view(&scattered_id((1 << 40) + n)).await.unwrap().unwrap();
                assert_eq!(job.status, JobStatus::Done, "{backend:?}");
                assert_eq!((job.targets_total, job.targets_done), (32, 32));
                assert_eq!(targets.len(), 32);
            }
            assert_eq!(s.live_jobs(None).await.unwrap(), 0);
            assert_eq!(s.recover("x", unix_now()).await.unwrap(), 0);
            assert!(s.total_bytes().await.unwrap() > 0);
        }
    }
}
