//! `memory` rows: heap bytes per live job held by the machine and the driver, measured with the
//! counting allocator and with the store kept out of the count.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use rota::{
    Admission, BatchStore, Caller, CallerClass, CancellationToken, Caps, FetchError, JobRow,
    JobStatus, NewJob, Options, Runner, StoreError, Target, TargetResult, TargetRow, TargetWrite,
};

use crate::alloc;
use crate::machine::{Rig, TARGETS};
use crate::report::Row;
use crate::runner::{Finished, config};

/// A store that keeps nothing: every admit is created, every write succeeds. It lets the count
/// see only what the runner itself holds per job.
struct NullStore;

#[async_trait]
impl BatchStore for NullStore {
    async fn admit(&self, _job: &NewJob, _caps: &Caps) -> Result<Admission, StoreError> {
        Ok(Admission::Created)
    }
    async fn job(&self, _id: &str) -> Result<Option<JobRow>, StoreError> {
        Ok(None)
    }
    async fn targets(&self, _id: &str) -> Result<Vec<TargetRow>, StoreError> {
        Ok(Vec::new())
    }
    async fn start_target(
        &self,
        _id: &str,
        idx: usize,
        _now: i64,
    ) -> Result<Option<TargetRow>, StoreError> {
        Ok(Some(TargetRow::pending(
            idx,
            "https://bench.invalid/x",
            "{}",
        )))
    }
    async fn finish_target(
        &self,
        _id: &str,
        _idx: usize,
        _write: &TargetWrite,
        _now: i64,
        _finish: Option<JobStatus>,
    ) -> Result<bool, StoreError> {
        Ok(true)
    }
    async fn set_status(
        &self,
        _id: &str,
        _status: JobStatus,
        _error: &str,
        _now: i64,
    ) -> Result<bool, StoreError> {
        Ok(true)
    }
    async fn touch(&self, _id: &str, _now: i64) -> Result<bool, StoreError> {
        Ok(true)
    }
    async fn sweep(&self, _now: i64, _ttl_secs: i64) -> Result<usize, StoreError> {
        Ok(0)
    }
    async fn evict(&self, _max_bytes: u64) -> Result<usize, StoreError> {
        Ok(0)
    }
    async fn recover(&self, _error: &str, _now: i64) -> Result<usize, StoreError> {
        Ok(0)
    }
    async fn live_jobs(&self, _caller: Option<&str>) -> Result<usize, StoreError> {
        Ok(0)
    }
    async fn total_bytes(&self) -> Result<u64, StoreError> {
        Ok(0)
    }
}

/// A fetch that holds until the runner closes, so every submitted job stays live.
async fn hold(
    _caller: Arc<Caller>,
    _target: Target,
    cancel: CancellationToken,
) -> Result<TargetResult, FetchError> {
    cancel.cancelled().await;
    Err(FetchError::Other("closed".into()))
}

/// The machine alone: the heap it holds with `live` jobs of 32 targets, per job.
pub fn machine_row(live: usize) -> Row {
    alloc::start();
    let rig = Rig::new(live);
    let bytes = alloc::live();
    alloc::stop();
    assert_eq!(rig.m.live_jobs(), live);
    drop(rig);
    Row {
        bench: "memory",
        backend: "machine".into(),
        live_jobs: Some(live),
        targets: Some((live * TARGETS) as u64),
        bytes_per_job: Some(bytes as f64 / live as f64),
        ..Row::default()
    }
}

/// The runner (machine + driver) over [`NullStore`] with a holding fetch: the heap that grows
/// from `live` submits of 32-target jobs, per job. The counting starts after `Runner::start`
/// and after one warm-up job (so the runtime's and the runner's fixed allocations are out), and
/// is read once the first target's fetch is holding and the submit loop has returned.
pub async fn runner_row(live: usize, workers: usize) -> Result<Row, StoreError> {
    let runner = Runner::start(
        Arc::new(NullStore),
        hold,
        config(workers, Arc::new(Finished::default())),
    )
    .await?;
    let caller = Caller {
        name: "bench".into(),
        workspace: "bench".into(),
        key_sha256: String::new(),
    };
    let targets = |job: usize| -> Vec<Target> {
        (0..TARGETS)
            .map(|i| Target {
                url: format!("https://bench.invalid/{job}/{i}"),
                options: Options::default(),
            })
            .collect()
    };
    // Warm-up: the first jobs start the workers' fetches (held) and grow what grows once.
    for job in 0..workers {
        runner
            .submit(caller.clone(), CallerClass::Fleet, targets(job))
            .await
            .map_err(|e| StoreError::backend("bench submit", e))?;
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    alloc::start();
    for job in workers..workers + live {
        runner
            .submit(caller.clone(), CallerClass::Fleet, targets(job))
            .await
            .map_err(|e| StoreError::backend("bench submit", e))?;
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    let bytes = alloc::live();
    alloc::stop();
    runner.close().await;
    Ok(Row {
        bench: "memory",
        backend: "runner over null store".into(),
        live_jobs: Some(live),
        workers: Some(workers),
        targets: Some((live * TARGETS) as u64),
        bytes_per_job: Some(bytes as f64 / live as f64),
        ..Row::default()
    })
}
