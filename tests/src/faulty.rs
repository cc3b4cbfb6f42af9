//! [`FaultyStore`]: a [`BatchStore`] wrapper that injects backend errors, for the runner's
//! fault tests (the shape of redb's countdown backend in its fuzzer).
//!
//! ```text
//! let store = Arc::new(FaultyStore::new(MemoryStore::new()));
//! store.fail(Op::FinishTarget);   // every finish_target now fails ...
//! store.heal(Op::FinishTarget);   // ... and now works again
//! store.fail_after(10);           // 10 more calls succeed, then every call fails
//! store.panic_on(Op::Evict);       // every evict now panics (a store's bug) ...
//! store.heal_all();                // ... and every fault is cleared
//! ```

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use rota_core::{
    Admission, BatchStore, Caps, JobRow, JobStatus, NewJob, StoreError, TargetRow, TargetWrite,
};

/// An operation of [`BatchStore`], one per trait method.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// [`BatchStore::admit`].
    Admit,
    /// [`BatchStore::job`].
    Job,
    /// [`BatchStore::targets`].
    Targets,
    /// [`BatchStore::view`].
    View,
    /// [`BatchStore::start_target`].
    StartTarget,
    /// [`BatchStore::finish_target`].
    FinishTarget,
    /// [`BatchStore::set_status`].
    SetStatus,
    /// [`BatchStore::touch`].
    Touch,
    /// [`BatchStore::sweep`].
    Sweep,
    /// [`BatchStore::evict`].
    Evict,
    /// [`BatchStore::recover`].
    Recover,
    /// [`BatchStore::live_jobs`].
    LiveJobs,
    /// [`BatchStore::total_bytes`].
    TotalBytes,
}

impl Op {
    /// Every operation, in trait order.
    pub const ALL: &'static [Op] = &[
        Op::Admit,
        Op::Job,
        Op::Targets,
        Op::View,
        Op::StartTarget,
        Op::FinishTarget,
        Op::SetStatus,
        Op::Touch,
        Op::Sweep,
        Op::Evict,
        Op::Recover,
        Op::LiveJobs,
        Op::TotalBytes,
    ];

    /// The trait method's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Op::Admit => "admit",
            Op::Job => "job",
            Op::Targets => "targets",
            Op::View => "view",
            Op::StartTarget => "start_target",
            Op::FinishTarget => "finish_target",
            Op::SetStatus => "set_status",
            Op::Touch => "touch",
            Op::Sweep => "sweep",
            Op::Evict => "evict",
            Op::Recover => "recover",
            Op::LiveJobs => "live_jobs",
            Op::TotalBytes => "total_bytes",
        }
    }

    fn bit(self) -> u32 {
        1 << (self as u32)
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// When an injected fault strikes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Timing {
    /// Before the wrapped store is called: the operation does nothing and fails (a write that
    /// never reached the disk). The default.
    #[default]
    Before,
    /// After the wrapped store has run the operation: its effect stays, but the caller gets the
    /// error instead of its result (a write that happened but was not acknowledged).
    After,
}

/// The countdown's value when it is off.
const OFF: u64 = u64::MAX;

/// The start of the value of every panic a [`FaultyStore`] injects: a secret that must never
/// reach a log or a row.
pub const STORE_PANIC_VALUE: &str = "store panic value: never log me";

/// The start of the context of every injected [`StoreError::Backend`].
const CONTEXT: &str = "injected fault in ";

/// Whether `e` is an error injected by a [`FaultyStore`].
pub fn is_injected(e: &StoreError) -> bool {
    matches!(e, StoreError::Backend { context, .. } if context.starts_with(CONTEXT))
}

/// Wraps a store and fails chosen operations, or every operation after a countdown, with a
/// [`StoreError::Backend`] whose context names the operation (see [`is_injected`]).
///
/// Every switch takes `&self` (atomics), so a test can turn faults on and off while a runner is
/// using the store through an `Arc`. An operation fails if it is one of the chosen operations
/// ([`fail`](Self::fail)), or if the countdown ([`fail_after`](Self::fail_after)) has run out;
/// a call that passes because of neither consumes one step of the countdown. With no fault set
/// it behaves exactly as the wrapped store (it passes the conformance suite).
///
/// `S` may be unsized: `FaultyStore::<dyn BatchStore>::from_arc(store)` wraps any backend a
/// test holds as an `Arc<dyn BatchStore>`.
pub struct FaultyStore<S: ?Sized> {
    inner: Arc<S>,
    failing: AtomicU32,
    panicking: AtomicU32,
    countdown: AtomicU64,
    late: AtomicBool,
    calls: AtomicU64,
    injected: AtomicU64,
    /// Jobs every `set_status` of which fails.
    status_fails_of: Mutex<Vec<String>>,
}

impl<S: BatchStore> FaultyStore<S> {
    /// Wraps `inner`, with no fault set.
    pub fn new(inner: S) -> Self {
        Self::from_arc(Arc::new(inner))
    }
}

impl<S: BatchStore + ?Sized> FaultyStore<S> {
    /// Wraps a shared store, with no fault set; the caller may keep using its own handle to
    /// reach the store behind the faults' back.
    pub fn from_arc(inner: Arc<S>) -> Self {
        FaultyStore {
            inner,
            failing: AtomicU32::new(0),
            panicking: AtomicU32::new(0),
            countdown: AtomicU64::new(OFF),
            late: AtomicBool::new(false),
            calls: AtomicU64::new(0),
            injected: AtomicU64::new(0),
            status_fails_of: Mutex::new(Vec::new()),
        }
    }

    /// The wrapped store, to read or write behind the faults' back.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// Makes every call of `op` fail until it is healed.
    pub fn fail(&self, op: Op) {
        self.failing.fetch_or(op.bit(), SeqCst);
    }

    /// Makes `op` work again (a running countdown still applies).
    pub fn heal(&self, op: Op) {
        self.failing.fetch_and(!op.bit(), SeqCst);
        self.panicking.fetch_and(!op.bit(), SeqCst);
    }

    /// Whether `op` is set to fail (not counting the countdown).
    pub fn is_failing(&self, op: Op) -> bool {
        self.failing.load(SeqCst) & op.bit() != 0
    }

    /// Makes every call of `op` panic, when its future is polled, until it is healed (a store's
    /// bug; [`heal`](Self::heal) and [`heal_all`](Self::heal_all) clear it). The panic's value
    /// is [`STORE_PANIC_VALUE`] followed by the operation's name.
    pub fn panic_on(&self, op: Op) {
        self.panicking.fetch_or(op.bit(), SeqCst);
    }

    /// Lets the next `n` calls through (of operations not set to fail), then fails every call
    /// until [`heal_all`](Self::heal_all). `fail_after(0)` fails from the next call on.
    pub fn fail_after(&self, n: u64) {
        self.countdown.store(n.min(OFF - 1), SeqCst);
    }

    /// Makes every `set_status` of job `id` fail (as a store fails a job whose row it cannot
    /// write), until [`heal_all`](Self::heal_all); other jobs' status writes are not touched.
    pub fn fail_status_writes_of(&self, id: &str) {
        self.status_fails_of().push(id.to_owned());
    }

    /// Clears every fault: no operation is set to fail or panic, no job's status writes fail
    /// and the countdown is off.
    pub fn heal_all(&self) {
        self.failing.store(0, SeqCst);
        self.panicking.store(0, SeqCst);
        self.countdown.store(OFF, SeqCst);
        self.status_fails_of().clear();
    }

    fn status_fails_of(&self) -> std::sync::MutexGuard<'_, Vec<String>> {
        self.status_fails_of
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Sets when a fault strikes (default [`Timing::Before`]).
    pub fn set_timing(&self, timing: Timing) {
        self.late.store(timing == Timing::After, SeqCst);
    }

    /// How many calls the store has had, failed or not.
    pub fn calls(&self) -> u64 {
        self.calls.load(SeqCst)
    }

    /// How many calls have been failed by an injected fault.
    pub fn injected(&self) -> u64 {
        self.injected.load(SeqCst)
    }

    /// Whether this call of `op` fails.
    fn strikes(&self, op: Op) -> bool {
        if self.is_failing(op) {
            return true;
        }
        // Count down by one unless off or run out; the value seen tells which.
        match self
            .countdown
            .fetch_update(SeqCst, SeqCst, |c| (c != OFF && c > 0).then(|| c - 1))
        {
            Ok(_) => false,
            Err(c) => c == 0,
        }
    }

    /// Runs `fut`, the wrapped store's `op`, unless a fault strikes.
    async fn call<T>(
        &self,
        op: Op,
        fut: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        self.calls.fetch_add(1, SeqCst);
        if self.panicking.load(SeqCst) & op.bit() != 0 {
            self.injected.fetch_add(1, SeqCst);
            std::panic::panic_any(format!("{STORE_PANIC_VALUE} {op}"));
        }
        if !self.strikes(op) {
            return fut.await;
        }
        self.fault(op, fut).await
    }

    /// Fails this call of `op` (whose wrapped call is `fut`), counting it as injected.
    async fn fault<T>(
        &self,
        op: Op,
        fut: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        self.injected.fetch_add(1, SeqCst);
        if self.late.load(SeqCst) {
            // The effect stays; only the answer is lost.
            let _ = fut.await;
        }
        Err(StoreError::backend(
            format!("{CONTEXT}{op}"),
            std::io::Error::other("injected fault"),
        ))
    }
}

/// Shows the fault switches and counters, not the wrapped store.
impl<S: ?Sized> fmt::Debug for FaultyStore<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ops = |bits: &AtomicU32| -> Vec<Op> {
            let bits = bits.load(SeqCst);
            Op::ALL
                .iter()
                .copied()
                .filter(|op| bits & op.bit() != 0)
                .collect()
        };
        let countdown = self.countdown.load(SeqCst);
        f.debug_struct("FaultyStore")
            .field("failing", &ops(&self.failing))
            .field("panicking", &ops(&self.panicking))
            .field("countdown", &(countdown != OFF).then_some(countdown))
            .field("late", &self.late.load(SeqCst))
            .field("calls", &self.calls.load(SeqCst))
            .field("injected", &self.injected.load(SeqCst))
            .field(
                "status_fails_of",
                &*self
                    .status_fails_of
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner),
            )
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl<S: BatchStore + ?Sized> BatchStore for FaultyStore<S> {
    async fn admit(&self, job: &NewJob, caps: &Caps) -> Result<Admission, StoreError> {
        self.call(Op::Admit, self.inner.admit(job, caps)).await
    }

    async fn job(&self, id: &str) -> Result<Option<JobRow>, StoreError> {
        self.call(Op::Job, self.inner.job(id)).await
    }

    async fn targets(&self, id: &str) -> Result<Vec<TargetRow>, StoreError> {
        self.call(Op::Targets, self.inner.targets(id)).await
    }

    async fn view(&self, id: &str) -> Result<Option<(JobRow, Vec<TargetRow>)>, StoreError> {
        self.call(Op::View, self.inner.view(id)).await
    }

    async fn start_target(
        &self,
        id: &str,
        idx: usize,
        now: i64,
    ) -> Result<Option<TargetRow>, StoreError> {
        let fut = self.inner.start_target(id, idx, now);
        self.call(Op::StartTarget, fut).await
    }

    async fn finish_target(
        &self,
        id: &str,
        idx: usize,
        write: &TargetWrite,
        now: i64,
        finish: Option<JobStatus>,
    ) -> Result<bool, StoreError> {
        let fut = self.inner.finish_target(id, idx, write, now, finish);
        self.call(Op::FinishTarget, fut).await
    }

    async fn set_status(
        &self,
        id: &str,
        status: JobStatus,
        error: &str,
        now: i64,
    ) -> Result<bool, StoreError> {
        let fut = self.inner.set_status(id, status, error, now);
        if self.status_fails_of().iter().any(|j| j == id) {
            self.calls.fetch_add(1, SeqCst);
            return self.fault(Op::SetStatus, fut).await;
        }
        self.call(Op::SetStatus, fut).await
    }

    async fn touch(&self, id: &str, now: i64) -> Result<bool, StoreError> {
        self.call(Op::Touch, self.inner.touch(id, now)).await
    }

    async fn sweep(&self, now: i64, ttl_secs: i64) -> Result<usize, StoreError> {
        self.call(Op::Sweep, self.inner.sweep(now, ttl_secs)).await
    }

    // Written by hand, as `#[async_trait]` would expand it, so that the wrapped store's `evict`
    // is called when this one is (a wrapped store that panics when called panics here then).
    fn evict<'s, 'f>(
        &'s self,
        max_bytes: u64,
    ) -> Pin<Box<dyn Future<Output = Result<usize, StoreError>> + Send + 'f>>
    where
        's: 'f,
        Self: 'f,
    {
        // `S`'s own method: `Arc<S>`'s would call it only when polled.
        let fut = S::evict(&self.inner, max_bytes);
        Box::pin(self.call(Op::Evict, fut))
    }

    async fn recover(&self, error: &str, now: i64) -> Result<usize, StoreError> {
        self.call(Op::Recover, self.inner.recover(error, now)).await
    }

    async fn live_jobs(&self, caller: Option<&str>) -> Result<usize, StoreError> {
        self.call(Op::LiveJobs, self.inner.live_jobs(caller)).await
    }

    async fn total_bytes(&self) -> Result<u64, StoreError> {
        self.call(Op::TotalBytes, self.inner.total_bytes()).await
    }
}
