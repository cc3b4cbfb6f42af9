//! The raw loop issues the store calls the runner makes for the same targets: both are run on a
//! store that logs every call, and the logs are compared (per job, each call with its
//! arguments but the job's random id and the clock; the calls of no job, with theirs, counted).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use rota::{
    Admission, BatchStore, Caps, JobRow, JobStatus, NewJob, StoreError, TargetRow, TargetWrite,
};

use crate::runner::{self, Shape};
use crate::stores::{self, Backend};

/// What a store was asked: per job (keyed by its first target's URL, the same in both paths
/// for the same job numbers), its calls in order; and the calls of no job, counted.
#[derive(Debug, Default, PartialEq, Eq)]
struct Calls {
    per_job: BTreeMap<String, Vec<String>>,
    global: BTreeMap<String, usize>,
}

#[derive(Default)]
struct Log {
    calls: Calls,
    /// Job id → its key in `per_job`.
    key: HashMap<String, String>,
}

impl Log {
    fn job(&mut self, id: &str, call: String) {
        let key = self
            .key
            .get(id)
            .cloned()
            .unwrap_or_else(|| format!("unknown id {id}"));
        self.calls.per_job.entry(key).or_default().push(call);
    }

    fn global(&mut self, call: String) {
        *self.calls.global.entry(call).or_default() += 1;
    }
}

/// A store that logs every call, then forwards it.
struct Logging {
    inner: Arc<dyn BatchStore>,
    log: Arc<Mutex<Log>>,
}

impl Logging {
    fn log(&self) -> std::sync::MutexGuard<'_, Log> {
        self.log.lock().unwrap()
    }
}

#[async_trait]
impl BatchStore for Logging {
    async fn admit(&self, job: &NewJob, caps: &Caps) -> Result<Admission, StoreError> {
        {
            let mut log = self.log();
            log.key.insert(job.id.clone(), job.targets[0].0.clone());
            log.job(
                &job.id,
                format!(
                    "admit caller={} class={:?} idem_key={} targets={:?} caps={caps:?}",
                    job.caller, job.class, job.idem_key, job.targets
                ),
            );
        }
        self.inner.admit(job, caps).await
    }
    async fn job(&self, id: &str) -> Result<Option<JobRow>, StoreError> {
        self.log().job(id, "job".into());
        self.inner.job(id).await
    }
    async fn targets(&self, id: &str) -> Result<Vec<TargetRow>, StoreError> {
        self.log().job(id, "targets".into());
        self.inner.targets(id).await
    }
    async fn view(&self, id: &str) -> Result<Option<(JobRow, Vec<TargetRow>)>, StoreError> {
        self.log().job(id, "view".into());
        self.inner.view(id).await
    }
    async fn start_target(
        &self,
        id: &str,
        idx: usize,
        now: i64,
    ) -> Result<Option<TargetRow>, StoreError> {
        self.log().job(id, format!("start_target {idx}"));
        self.inner.start_target(id, idx, now).await
    }
    async fn finish_target(
        &self,
        id: &str,
        idx: usize,
        write: &TargetWrite,
        now: i64,
        finish: Option<JobStatus>,
    ) -> Result<bool, StoreError> {
        self.log()
            .job(id, format!("finish_target {idx} {write:?} {finish:?}"));
        self.inner.finish_target(id, idx, write, now, finish).await
    }
    async fn set_status(
        &self,
        id: &str,
        status: JobStatus,
        error: &str,
        now: i64,
    ) -> Result<bool, StoreError> {
        self.log()
            .job(id, format!("set_status {status:?} {error:?}"));
        self.inner.set_status(id, status, error, now).await
    }
    async fn touch(&self, id: &str, now: i64) -> Result<bool, StoreError> {
        self.log().job(id, "touch".into());
        self.inner.touch(id, now).await
    }
    async fn sweep(&self, now: i64, ttl_secs: i64) -> Result<usize, StoreError> {
        self.log().global(format!("sweep ttl_secs={ttl_secs}"));
        self.inner.sweep(now, ttl_secs).await
    }
    async fn evict(&self, max_bytes: u64) -> Result<usize, StoreError> {
        self.log().global(format!("evict max_bytes={max_bytes}"));
        self.inner.evict(max_bytes).await
    }
    async fn recover(&self, error: &str, now: i64) -> Result<usize, StoreError> {
        self.log().global(format!("recover {error:?}"));
        self.inner.recover(error, now).await
    }
    async fn live_jobs(&self, caller: Option<&str>) -> Result<usize, StoreError> {
        self.log().global(format!("live_jobs {caller:?}"));
        self.inner.live_jobs(caller).await
    }
    async fn total_bytes(&self) -> Result<u64, StoreError> {
        self.log().global("total_bytes".into());
        self.inner.total_bytes().await
    }
}

fn logging(backend: Backend) -> (Arc<Logging>, Arc<Mutex<Log>>, stores::Opened) {
    let opened = stores::fresh(backend).unwrap();
    let log = Arc::new(Mutex::new(Log::default()));
    let store = Arc::new(Logging {
        inner: opened.store.clone(),
        log: log.clone(),
    });
    (store, log, opened)
}

fn take(log: &Mutex<Log>) -> Calls {
    std::mem::take(&mut log.lock().unwrap().calls)
}

/// The calls of the runner of `workers` for `shape` (jobs numbered from 0), without the one
/// `recover` of `Runner::start` (made before its clock starts).
async fn runner_calls(backend: Backend, workers: usize, shape: Shape) -> Calls {
    let (store, log, opened) = logging(backend);
    runner::run(store, workers, shape, 0).await.unwrap();
    let mut calls = take(&log);
    let recovers: Vec<String> = calls
        .global
        .keys()
        .filter(|k| k.starts_with("recover "))
        .cloned()
        .collect();
    assert_eq!(recovers.len(), 1, "{:?}", calls.global);
    assert_eq!(calls.global.remove(&recovers[0]), Some(1));
    opened.close();
    calls
}

/// The calls of the raw loop for `shape` (jobs numbered from 0).
async fn raw_calls(backend: Backend, shape: Shape) -> Calls {
    let (store, log, opened) = logging(backend);
    runner::raw(&*store, shape, 0).await.unwrap();
    let calls = take(&log);
    opened.close();
    calls
}

/// The calls a job of `per_job` targets gets from either path, but its admit.
fn one_job(per_job: usize, done: &str) -> Vec<String> {
    (0..per_job)
        .flat_map(|i| {
            let finish = if i + 1 == per_job {
                "Some(Done)"
            } else {
                "None"
            };
            [
                format!("start_target {i}"),
                format!("finish_target {i} {done} {finish}"),
            ]
        })
        .collect()
}

async fn same_calls(backend: Backend, shape: Shape) {
    let raw = raw_calls(backend, shape).await;
    let jobs = shape.live * shape.reps;
    let targets = shape.targets();
    // The raw loop's own calls, counted: per job one admit and one sweep, per target one
    // start, one finish (the job's last with Done) and one evict.
    assert_eq!(raw.per_job.len(), jobs, "{raw:?}");
    let done = format!(
        "{:?}",
        TargetWrite::Done {
            result: runner::result().to_json().unwrap()
        }
    );
    for calls in raw.per_job.values() {
        assert!(calls[0].starts_with("admit "), "{calls:?}");
        assert_eq!(calls[1..], one_job(shape.per_job, &done)[..]);
    }
    let ttl = crate::runner::caps().ttl_secs;
    assert_eq!(
        raw.global,
        BTreeMap::from([
            (format!("sweep ttl_secs={ttl}"), jobs),
            (format!("evict max_bytes={}", runner::MAX_BYTES), targets),
        ])
    );
    for workers in [1, 2] {
        let ran = runner_calls(backend, workers, shape).await;
        // Per job the same calls with the same arguments (the admit's URLs, options JSON,
        // idem key, caller, class and caps; each target's write and finish), in the same
        // order; and the same sweeps and evicts, as many, with the same arguments.
        assert_eq!(ran.global, raw.global, "{backend:?}, {workers} workers");
        assert_eq!(ran.per_job, raw.per_job, "{backend:?}, {workers} workers");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_raw_loop_makes_the_runners_store_calls_on_memory() {
    for shape in [
        Shape {
            live: 3,
            per_job: 32,
            reps: 2,
        },
        Shape {
            live: 10,
            per_job: 1,
            reps: 3,
        },
    ] {
        same_calls(Backend::Memory, shape).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_raw_loop_makes_the_runners_store_calls_on_sqlite() {
    same_calls(
        Backend::Sqlite,
        Shape {
            live: 4,
            per_job: 8,
            reps: 2,
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_raw_loop_makes_the_runners_store_calls_on_redb() {
    same_calls(
        Backend::Redb,
        Shape {
            live: 4,
            per_job: 1,
            reps: 2,
        },
    )
    .await;
}
