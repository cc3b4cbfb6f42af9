//! A store whose panics panic again when dropped (a panic's value with a panicking destructor,
//! a future whose destructor panics), made when the call is made or while its future runs:
//! the runner catches those too, so neither a worker nor a caller sees a panic.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering::SeqCst};
use std::task::{Context, Poll};

use async_trait::async_trait;
use rota_core::{
    Admission, BatchStore, Caps, JobRow, JobStatus, NewJob, StoreError, TargetRow, TargetWrite,
};
use rota_store_memory::MemoryStore;
use rota_tests::runner::{Probe, TestResult, config, rig};

/// A panic's value that panics when dropped.
struct Bomb;

impl Drop for Bomb {
    fn drop(&mut self) {
        panic!("the panic value's destructor panicked");
    }
}

/// A store future, ready at once, whose destructor panics.
struct PanicsWhenDropped;

impl Future for PanicsWhenDropped {
    type Output = Result<bool, StoreError>;

    fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Self::Output> {
        Poll::Ready(Ok(true))
    }
}

impl Drop for PanicsWhenDropped {
    fn drop(&mut self) {
        panic!("the store future's destructor panicked");
    }
}

/// How [`Bombs`] misbehaves.
const WELL: u8 = 0;
/// `touch` and `evict` panic with a [`Bomb`] while their futures run.
const BOMB_IN_FUTURE: u8 = 1;
/// `touch` returns a [`PanicsWhenDropped`].
const FUTURE_BOMB: u8 = 2;
/// `touch` panics with a [`Bomb`] when called, before its future exists.
const BOMB_IN_CALL: u8 = 3;
/// `admit` answers, and its future then panics when dropped.
const ADMIT_THEN_BOMB: u8 = 4;

/// A store future that holds a [`Bomb`]: it answers as the future it wraps, then panics when
/// dropped.
struct ThenBomb<F: ?Sized>(Bomb, Pin<Box<F>>);

impl<F: Future + ?Sized> Future for ThenBomb<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        self.get_mut().1.as_mut().poll(cx)
    }
}

/// A memory store that misbehaves as its mode says.
struct Bombs(MemoryStore, AtomicU8);

impl Bombs {
    fn new() -> Arc<Bombs> {
        Arc::new(Bombs(MemoryStore::new(), AtomicU8::new(WELL)))
    }
}

#[async_trait]
impl BatchStore for Bombs {
    // Written by hand, as `#[async_trait]` would expand it, to wrap the future it returns.
    fn admit<'s, 'j, 'c, 'f>(
        &'s self,
        job: &'j NewJob,
        caps: &'c Caps,
    ) -> Pin<Box<dyn Future<Output = Result<Admission, StoreError>> + Send + 'f>>
    where
        's: 'f,
        'j: 'f,
        'c: 'f,
        Self: 'f,
    {
        let fut = self.0.admit(job, caps);
        if self.1.load(SeqCst) == ADMIT_THEN_BOMB {
            Box::pin(ThenBomb(Bomb, fut))
        } else {
            fut
        }
    }
    async fn job(&self, id: &str) -> Result<Option<JobRow>, StoreError> {
        self.0.job(id).await
    }
    async fn targets(&self, id: &str) -> Result<Vec<TargetRow>, StoreError> {
        self.0.targets(id).await
    }
    async fn start_target(
        &self,
        id: &str,
        idx: usize,
        now: i64,
    ) -> Result<Option<TargetRow>, StoreError> {
        self.0.start_target(id, idx, now).await
    }
    async fn finish_target(
        &self,
        id: &str,
        idx: usize,
        write: &TargetWrite,
        now: i64,
        finish: Option<JobStatus>,
    ) -> Result<bool, StoreError> {
        self.0.finish_target(id, idx, write, now, finish).await
    }
    async fn set_status(
        &self,
        id: &str,
        status: JobStatus,
        error: &str,
        now: i64,
    ) -> Result<bool, StoreError> {
        self.0.set_status(id, status, error, now).await
    }
    // Written by hand, as `#[async_trait]` would expand it, to misbehave when called.
    fn touch<'s, 'i, 'f>(
        &'s self,
        id: &'i str,
        now: i64,
    ) -> Pin<Box<dyn Future<Output = Result<bool, StoreError>> + Send + 'f>>
    where
        's: 'f,
        'i: 'f,
        Self: 'f,
    {
        match self.1.load(SeqCst) {
            BOMB_IN_FUTURE => Box::pin(async { std::panic::panic_any(Bomb) }),
            FUTURE_BOMB => Box::pin(PanicsWhenDropped),
            BOMB_IN_CALL => std::panic::panic_any(Bomb),
            _ => self.0.touch(id, now),
        }
    }
    async fn sweep(&self, now: i64, ttl_secs: i64) -> Result<usize, StoreError> {
        self.0.sweep(now, ttl_secs).await
    }
    async fn evict(&self, max_bytes: u64) -> Result<usize, StoreError> {
        if self.1.load(SeqCst) == BOMB_IN_FUTURE {
            std::panic::panic_any(Bomb);
        }
        self.0.evict(max_bytes).await
    }
    async fn recover(&self, error: &str, now: i64) -> Result<usize, StoreError> {
        self.0.recover(error, now).await
    }
    async fn live_jobs(&self, caller: Option<&str>) -> Result<usize, StoreError> {
        self.0.live_jobs(caller).await
    }
    async fn total_bytes(&self) -> Result<u64, StoreError> {
        self.0.total_bytes().await
    }
}

/// A `touch` in each mode returns to its caller (a task, which a panic would end).
#[tokio::test]
async fn a_touch_whose_panic_or_future_panics_when_dropped_returns() -> TestResult {
    let store = Bombs::new();
    let r = rig(store.clone(), Probe::new(), config()).await?;
    for mode in [BOMB_IN_FUTURE, FUTURE_BOMB, BOMB_IN_CALL] {
        store.1.store(mode, SeqCst);
        let runner = r.runner.clone();
        let got = tokio::spawn(async move { runner.touch("x").await }).await;
        assert!(got.is_ok(), "mode {mode}: the touch panicked: {got:?}");
    }
    store.1.store(WELL, SeqCst);
    r.close().await
}

/// An `evict` that panics with a value that panics again ends no worker: the next job runs.
#[tokio::test]
async fn an_evict_whose_panic_value_panics_when_dropped_stops_no_worker() -> TestResult {
    let store = Bombs::new();
    let r = rig(store.clone(), Probe::new(), config()).await?;
    store.1.store(BOMB_IN_FUTURE, SeqCst);
    let a = r.submit("alice", "a", 1).await?;
    r.terminal(&a).await?;
    store.1.store(WELL, SeqCst);
    let b = r.submit("alice", "b", 1).await?;
    assert_eq!(r.terminal(&b).await?.job.status, JobStatus::Done);
    r.close().await
}

/// A store call that answered and whose future then panics when dropped has still answered:
/// an admit that created the job is a created job, which runs (not a failed submit whose job
/// the store holds).
#[tokio::test]
async fn an_admit_whose_future_panics_when_dropped_after_its_answer_still_runs_the_job()
-> TestResult {
    let store = Bombs::new();
    let r = rig(store.clone(), Probe::new(), config()).await?;
    store.1.store(ADMIT_THEN_BOMB, SeqCst);
    let a = r.submit("alice", "a", 2).await?;
    store.1.store(WELL, SeqCst);
    assert_eq!(r.terminal(&a).await?.job.status, JobStatus::Done);
    r.close().await
}
