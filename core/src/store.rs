//! The [`BatchStore`] trait and the rows it stores.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::{CallerClass, Job, JobStatus, StoreError, TargetResult, TargetState, TargetStatus};

/// A stored job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobRow {
    /// 32 lowercase hex characters.
    pub id: String,
    /// The submitting caller's name.
    pub caller: String,
    /// The submitting caller's class.
    pub class: CallerClass,
    /// The submit's [`idem_key`](crate::idem_key).
    pub idem_key: String,
    /// Where the job is.
    pub status: JobStatus,
    /// Why the job failed as a whole, else empty.
    pub error: String,
    /// How many targets it has.
    pub targets_total: usize,
    /// How many of its targets are done or failed.
    pub targets_done: usize,
    /// When it was admitted, unix seconds.
    pub created_at: i64,
    /// Its last activity, unix seconds: the TTL counts from here.
    pub lease: i64,
    /// The bytes its target rows hold: see [`TargetRow::n_bytes`].
    pub n_bytes: u64,
}

impl JobRow {
    /// The caller-facing view of the row.
    pub fn to_job(&self) -> Job {
        Job {
            id: self.id.clone(),
            caller: self.caller.clone(),
            status: self.status,
            error: self.error.clone(),
            targets_total: self.targets_total,
            targets_done: self.targets_done,
            created_at: self.created_at,
        }
    }
}

/// A stored target.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TargetRow {
    /// Its position in the job, from 0.
    pub idx: usize,
    /// What it fetches.
    pub url: String,
    /// The JSON of its [`Options`](crate::Options).
    pub options: String,
    /// Where it is.
    pub status: TargetState,
    /// The JSON of its [`TargetResult`], when done.
    pub result: Option<String>,
    /// Its error, when failed.
    pub error: String,
    /// Its hint, when failed.
    pub hint: String,
}

impl TargetRow {
    /// A new pending target.
    pub fn pending(idx: usize, url: impl Into<String>, options: impl Into<String>) -> Self {
        TargetRow {
            idx,
            url: url.into(),
            options: options.into(),
            status: TargetState::Pending,
            result: None,
            error: String::new(),
            hint: String::new(),
        }
    }

    /// What a read gives for target `idx` when its stored row cannot be decoded (SPEC §5: the
    /// job's other targets are still shown): `failed`, no URL, options or result, and `error`
    /// naming the corruption (`corrupt stored target row: …`). Never written back.
    pub fn corrupt(idx: usize, why: impl std::fmt::Display) -> Self {
        TargetRow {
            idx,
            url: String::new(),
            options: String::new(),
            status: TargetState::Failed,
            result: None,
            error: format!("corrupt stored target row: {why}"),
            hint: String::new(),
        }
    }

    /// The bytes this row holds, as counted in [`JobRow::n_bytes`]: the lengths of url,
    /// options, result, error and hint.
    pub fn n_bytes(&self) -> u64 {
        let n = self.url.len()
            + self.options.len()
            + self.result.as_ref().map_or(0, String::len)
            + self.error.len()
            + self.hint.len();
        n as u64
    }

    /// Applies a write: the row's status, result, error and hint become the write's.
    pub fn apply(&mut self, write: &TargetWrite) {
        let (status, result, error, hint) = match write {
            TargetWrite::Running => (TargetState::Running, None, "", ""),
            TargetWrite::Pending => (TargetState::Pending, None, "", ""),
            TargetWrite::Done { result } => (TargetState::Done, Some(result.clone()), "", ""),
            TargetWrite::Failed { error, hint } => {
                (TargetState::Failed, None, error.as_str(), hint.as_str())
            }
        };
        self.status = status;
        self.result = result;
        self.error = error.to_owned();
        self.hint = hint.to_owned();
    }

    /// The caller-facing view: the result decoded from its JSON. A result that cannot be
    /// decoded gives `result: None` and an error naming the corruption.
    pub fn to_status(&self) -> TargetStatus {
        let (result, error) = match self.result.as_deref() {
            None => (None, self.error.clone()),
            Some(json) => match serde_json::from_str::<TargetResult>(json) {
                Ok(r) => (Some(r), self.error.clone()),
                Err(e) => (None, format!("corrupt stored result: {e}")),
            },
        };
        TargetStatus {
            idx: self.idx,
            url: self.url.clone(),
            status: self.status,
            result,
            error,
            hint: self.hint.clone(),
        }
    }
}

/// What to store for a target.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum TargetWrite {
    /// Being fetched (see [`BatchStore::start_target`]).
    Running,
    /// Back to pending: the fetch was only busy.
    Pending,
    /// Done, with the JSON of its [`TargetResult`].
    Done {
        /// The result JSON.
        result: String,
    },
    /// Failed with an error and a hint (empty for none).
    Failed {
        /// The error text.
        error: String,
        /// The hint, or empty.
        hint: String,
    },
}

/// A job to admit: [`BatchStore::admit`] stores it `queued` with its targets `pending`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewJob {
    /// 32 lowercase hex characters.
    pub id: String,
    /// The caller's name.
    pub caller: String,
    /// The caller's class.
    pub class: CallerClass,
    /// The submit's [`idem_key`](crate::idem_key).
    pub idem_key: String,
    /// Each target's url and the JSON of its options, in idx order.
    pub targets: Vec<(String, String)>,
    /// Now, unix seconds: the job's `created_at` and lease.
    pub now: i64,
}

impl NewJob {
    /// The job's rows as admit stores them.
    pub fn rows(&self) -> (JobRow, Vec<TargetRow>) {
        let targets: Vec<TargetRow> = self
            .targets
            .iter()
            .enumerate()
            .map(|(i, (url, options))| TargetRow::pending(i, url.clone(), options.clone()))
            .collect();
        let job = JobRow {
            id: self.id.clone(),
            caller: self.caller.clone(),
            class: self.class,
            idem_key: self.idem_key.clone(),
            status: JobStatus::Queued,
            error: String::new(),
            targets_total: targets.len(),
            targets_done: 0,
            created_at: self.now,
            lease: self.now,
            n_bytes: targets.iter().map(TargetRow::n_bytes).sum(),
        };
        (job, targets)
    }
}

/// The limits [`BatchStore::admit`] checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Caps {
    /// The most targets a job may have.
    pub targets_per_job: usize,
    /// The most live jobs one caller may have.
    pub jobs_per_caller: usize,
    /// The most live jobs in all.
    pub jobs_total: usize,
    /// A job is reused only while `now - lease < ttl_secs`, the difference saturating as in
    /// [`reusable`], which a store should call: `i64::MIN` reuses none, whatever the times (the
    /// driver's `submit_fresh` admits with it).
    pub ttl_secs: i64,
}

/// What [`BatchStore::admit`] did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Admission {
    /// The job was stored.
    Created,
    /// A reusable job of this caller and key exists: nothing was stored.
    Reused {
        /// The existing job's id.
        id: String,
    },
    /// The job has more targets than the cap; nothing was stored.
    TooManyTargets {
        /// The cap.
        max: usize,
        /// How many the job has.
        got: usize,
    },
    /// The caller has `jobs_per_caller` live jobs; nothing was stored.
    CallerBusy,
    /// There are `jobs_total` live jobs; nothing was stored.
    Busy,
}

/// Whether a job of `status` whose lease is `lease` may be reused at `now` (SPEC §3 step 2):
/// queued, running, done or partial, and `now - lease < ttl_secs`.
pub fn reusable(status: JobStatus, lease: i64, now: i64, ttl_secs: i64) -> bool {
    matches!(
        status,
        JobStatus::Queued | JobStatus::Running | JobStatus::Done | JobStatus::Partial
    ) && now.saturating_sub(lease) < ttl_secs
}

/// Whether a job may go from `from` to `to`: `running` only from `queued`; a terminal status
/// only from a live one; nothing from a terminal one.
pub fn may_transition(from: JobStatus, to: JobStatus) -> bool {
    match to {
        JobStatus::Queued => false,
        JobStatus::Running => from == JobStatus::Queued,
        _ => from.is_live(),
    }
}

/// Whether a job is swept at `now`: terminal, and `lease < now - ttl_secs`.
pub fn sweepable(status: JobStatus, lease: i64, now: i64, ttl_secs: i64) -> bool {
    status.is_terminal() && lease < now.saturating_sub(ttl_secs)
}

/// The store of jobs and targets behind a runner.
///
/// Object-safe and `Send + Sync`: the runner holds an `Arc<dyn BatchStore>`. Every backend runs
/// the conformance suite in `rota-tests` (`rota_tests::conformance`), which checks each point
/// below.
///
/// # Contract
///
/// - **Times** are unix seconds, passed in by the caller; a store never reads a clock.
/// - **Admit** ([`admit`](Self::admit)) is one atomic operation, in this order:
///   1. if a job of this caller with this `idem_key` is [`reusable`] at `now`, return
///      [`Admission::Reused`] with its id (the most recently created, should there be several);
///   2. more targets than `caps.targets_per_job` → [`Admission::TooManyTargets`];
///   3. the caller's live (queued + running) jobs ≥ `caps.jobs_per_caller` →
///      [`Admission::CallerBusy`];
///   4. all live jobs ≥ `caps.jobs_total` → [`Admission::Busy`];
///   5. store the job `queued` (`created_at` = lease = `now`, `targets_done` 0) and every target
///      `pending`, all or nothing → [`Admission::Created`].
///
///   Concurrent admits, from one process or (for a shared store) many, never exceed a cap and
///   never create two reusable jobs for one caller and key. Admitting an id that exists is a
///   [`StoreError::Conflict`] and stores nothing.
/// - **Statuses.** A terminal status (done, partial, failed, cancelled) is final: nothing changes
///   it. `running` is set only from `queued`. [`may_transition`] is the rule; a write it forbids
///   changes nothing and returns `false`. Storing a target never changes its job's status, except
///   as the explicit `finish` argument of [`finish_target`](Self::finish_target) says.
/// - **Leases.** [`start_target`](Self::start_target), [`finish_target`](Self::finish_target), a
///   status change and [`touch`](Self::touch) set the job's lease to `now`. Reads never do.
/// - **Counts.** A job's `targets_done` is the number of its targets stored done or failed; its
///   `n_bytes` is the sum of [`TargetRow::n_bytes`] over its targets; the store keeps the total
///   over all jobs ([`total_bytes`](Self::total_bytes)), and the live counts, without a scan.
/// - **Sweep** deletes the terminal jobs (with their targets) that are [`sweepable`].
///   **Evict** deletes terminal jobs oldest first (by `created_at`, then id) until the total is
///   ≤ `max_bytes`, or no terminal job is left. Neither ever deletes a live job; both are cheap
///   when there is nothing to delete.
/// - **Recover** sets every queued or running job `failed` with the given error.
/// - **Unknown ids** are not errors: reads return `None` or an empty list, writes return `false`
///   (or `None`). A write that returns `false` or `None` changes nothing, lease included.
/// - **Data** round-trips exactly: any UTF-8 (non-ASCII, quotes, NULs, newlines), empty strings,
///   and results of a mebibyte and more.
/// - **Crash safety** (file stores): after a crash at any moment the store opens, every write
///   it acknowledged is there, and no job or target is half-written. A file store is owned by one
///   process at a time ([`StoreError::InUse`]), and refuses a file that is not a rota store of
///   its schema version ([`StoreError::Corrupt`], [`StoreError::Version`]) without changing it.
/// - **Errors** are logged by the runner: their text names no URL, host or caller key (see
///   [`StoreError`]).
#[async_trait]
pub trait BatchStore: Send + Sync {
    /// Admits a job (see the contract): idempotency, caps and insert as one atomic operation.
    async fn admit(&self, job: &NewJob, caps: &Caps) -> Result<Admission, StoreError>;

    /// The job `id`, if stored.
    async fn job(&self, id: &str) -> Result<Option<JobRow>, StoreError>;

    /// The targets of job `id` in idx order; empty for an unknown id. A target whose stored
    /// row cannot be decoded is given as [`TargetRow::corrupt`], not as an error for the job.
    async fn targets(&self, id: &str) -> Result<Vec<TargetRow>, StoreError>;

    /// The job `id` and its targets in idx order, read as of one moment (no write between the
    /// two), or `None` if the job is not stored: the job's `targets_done` and `n_bytes` then
    /// agree with the targets beside it (all but a [`TargetRow::corrupt`] placeholder, which
    /// stands for a row that could not be read).
    ///
    /// The default reads [`job`](Self::job), then [`targets`](Self::targets), then the job
    /// again, and reads afresh (up to 8 times) while the job changed in between; a store that
    /// can read both in one transaction or under one lock should do that instead (every store
    /// of this workspace does). If the job keeps changing, the last pair read is returned.
    async fn view(&self, id: &str) -> Result<Option<(JobRow, Vec<TargetRow>)>, StoreError> {
        let Some(mut job) = self.job(id).await? else {
            return Ok(None);
        };
        for _ in 0..8 {
            let targets = self.targets(id).await?;
            match self.job(id).await? {
                None => return Ok(None),
                Some(again) if again == job => return Ok(Some((job, targets))),
                Some(again) => job = again,
            }
        }
        let targets = self.targets(id).await?;
        Ok(Some((job, targets)))
    }

    /// A worker starts target `idx` of job `id`: the target becomes `running`, the job becomes
    /// `running` if it is `queued`, and the lease becomes `now`. Returns the target's row as
    /// stored after the write (the runner reads the url and options from it), or `None` if there
    /// is no such target.
    async fn start_target(
        &self,
        id: &str,
        idx: usize,
        now: i64,
    ) -> Result<Option<TargetRow>, StoreError>;

    /// Stores target `idx` of job `id` as `write` says, updates `targets_done` and `n_bytes`,
    /// and sets the lease to `now`; then, in the same transaction, if `finish` is given, sets the
    /// job's status to it as [`set_status`](Self::set_status) would (with an empty error).
    /// `false` if there is no such target.
    async fn finish_target(
        &self,
        id: &str,
        idx: usize,
        write: &TargetWrite,
        now: i64,
        finish: Option<JobStatus>,
    ) -> Result<bool, StoreError>;

    /// Sets job `id` to `status` with `error` if [`may_transition`] allows it, and its lease to
    /// `now`. Whether it changed anything.
    async fn set_status(
        &self,
        id: &str,
        status: JobStatus,
        error: &str,
        now: i64,
    ) -> Result<bool, StoreError>;

    /// Sets job `id`'s lease to `now`, whatever its status. Whether the job exists.
    async fn touch(&self, id: &str, now: i64) -> Result<bool, StoreError>;

    /// Deletes the [`sweepable`] jobs and their targets. How many jobs it deleted.
    async fn sweep(&self, now: i64, ttl_secs: i64) -> Result<usize, StoreError>;

    /// Deletes terminal jobs oldest first until [`total_bytes`](Self::total_bytes) ≤
    /// `max_bytes`. How many jobs it deleted.
    async fn evict(&self, max_bytes: u64) -> Result<usize, StoreError>;

    /// Sets every queued or running job `failed` with `error`, lease `now`. How many.
    async fn recover(&self, error: &str, now: i64) -> Result<usize, StoreError>;

    /// The live (queued + running) jobs of `caller`, or of everyone for `None`.
    async fn live_jobs(&self, caller: Option<&str>) -> Result<usize, StoreError>;

    /// The sum of every stored job's `n_bytes`.
    async fn total_bytes(&self) -> Result<u64, StoreError>;
}

/// A shared store is a store: `Arc<S>` forwards every call.
#[async_trait]
impl<S: BatchStore + ?Sized> BatchStore for std::sync::Arc<S> {
    async fn admit(&self, job: &NewJob, caps: &Caps) -> Result<Admission, StoreError> {
        (**self).admit(job, caps).await
    }
    async fn job(&self, id: &str) -> Result<Option<JobRow>, StoreError> {
        (**self).job(id).await
    }
    async fn targets(&self, id: &str) -> Result<Vec<TargetRow>, StoreError> {
        (**self).targets(id).await
    }
    async fn view(&self, id: &str) -> Result<Option<(JobRow, Vec<TargetRow>)>, StoreError> {
        (**self).view(id).await
    }
    async fn start_target(
        &self,
        id: &str,
        idx: usize,
        now: i64,
    ) -> Result<Option<TargetRow>, StoreError> {
        (**self).start_target(id, idx, now).await
    }
    async fn finish_target(
        &self,
        id: &str,
        idx: usize,
        write: &TargetWrite,
        now: i64,
        finish: Option<JobStatus>,
    ) -> Result<bool, StoreError> {
        (**self).finish_target(id, idx, write, now, finish).await
    }
    async fn set_status(
        &self,
        id: &str,
        status: JobStatus,
        error: &str,
        now: i64,
    ) -> Result<bool, StoreError> {
        (**self).set_status(id, status, error, now).await
    }
    async fn touch(&self, id: &str, now: i64) -> Result<bool, StoreError> {
        (**self).touch(id, now).await
    }
    async fn sweep(&self, now: i64, ttl_secs: i64) -> Result<usize, StoreError> {
        (**self).sweep(now, ttl_secs).await
    }
    async fn evict(&self, max_bytes: u64) -> Result<usize, StoreError> {
        (**self).evict(max_bytes).await
    }
    async fn recover(&self, error: &str, now: i64) -> Result<usize, StoreError> {
        (**self).recover(error, now).await
    }
    async fn live_jobs(&self, caller: Option<&str>) -> Result<usize, StoreError> {
        (**self).live_jobs(caller).await
    }
    async fn total_bytes(&self) -> Result<u64, StoreError> {
        (**self).total_bytes().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn running_only_from_queued_and_terminal_is_final() {
        use JobStatus::*;
        assert!(may_transition(Queued, Running));
        assert!(!may_transition(Running, Running));
        assert!(!may_transition(Done, Running));
        for to in [Done, Partial, Failed, Cancelled] {
            assert!(may_transition(Queued, to) && may_transition(Running, to));
            for from in [Done, Partial, Failed, Cancelled] {
                assert!(!may_transition(from, to), "{from} -> {to}");
            }
        }
        assert!(!may_transition(Running, Queued));
    }

    #[test]
    fn reuse_by_status_and_lease_age() {
        use JobStatus::*;
        for s in [Queued, Running, Done, Partial] {
            assert!(reusable(s, 100, 109, 10));
            assert!(!reusable(s, 100, 110, 10));
        }
        for s in [Failed, Cancelled] {
            assert!(!reusable(s, 100, 100, 10));
        }
        // A window of `i64::MIN` reuses nothing, even a lease later than now (a clock gone
        // back), which a window of 0 would; the difference saturates at either end.
        assert!(reusable(Done, 105, 100, 0));
        for (lease, now) in [
            (105, 100),
            (100, 100),
            (i64::MIN, i64::MAX),
            (i64::MAX, i64::MIN),
        ] {
            assert!(!reusable(Done, lease, now, i64::MIN), "{lease} {now}");
        }
    }

    #[test]
    fn sweep_takes_only_old_terminal_jobs() {
        assert!(sweepable(JobStatus::Done, 89, 100, 10));
        assert!(!sweepable(JobStatus::Done, 90, 100, 10));
        assert!(!sweepable(JobStatus::Running, 0, 100, 10));
    }

    #[test]
    fn a_corrupt_result_decodes_to_none_with_an_error() {
        let mut row = TargetRow::pending(0, "u", "{}");
        row.apply(&TargetWrite::Done {
            result: "{not json".into(),
        });
        let st = row.to_status();
        assert_eq!(st.result, None);
        assert!(
            st.error.starts_with("corrupt stored result"),
            "{}",
            st.error
        );
        row.apply(&TargetWrite::Done {
            result: r#"{"content":"x"}"#.into(),
        });
        assert_eq!(
            row.to_status().result.map(|r| r.content).as_deref(),
            Some("x")
        );
    }

    /// A store whose `job` answers from a script (the last answer repeats) and whose
    /// `targets` counts its calls: for the default [`BatchStore::view`]. Nothing else is called.
    struct Scripted {
        jobs: std::sync::Mutex<Vec<Option<JobRow>>>,
        targets_read: std::sync::atomic::AtomicUsize,
    }

    impl Scripted {
        fn new(jobs: Vec<Option<JobRow>>) -> Self {
            Scripted {
                jobs: std::sync::Mutex::new(jobs),
                targets_read: std::sync::atomic::AtomicUsize::new(0),
            }
        }
        fn targets_read(&self) -> usize {
            self.targets_read.load(std::sync::atomic::Ordering::SeqCst)
        }
    }

    #[async_trait]
    impl BatchStore for Scripted {
        async fn admit(&self, _: &NewJob, _: &Caps) -> Result<Admission, StoreError> {
            unreachable!()
        }
        async fn job(&self, _: &str) -> Result<Option<JobRow>, StoreError> {
            let mut jobs = self.jobs.lock().unwrap();
            Ok(if jobs.len() > 1 {
                jobs.remove(0)
            } else {
                jobs[0].clone()
            })
        }
        async fn targets(&self, _: &str) -> Result<Vec<TargetRow>, StoreError> {
            let n = self
                .targets_read
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Ok(vec![TargetRow::pending(n, "u", "{}")])
        }
        async fn start_target(
            &self,
            _: &str,
            _: usize,
            _: i64,
        ) -> Result<Option<TargetRow>, StoreError> {
            unreachable!()
        }
        async fn finish_target(
            &self,
            _: &str,
            _: usize,
            _: &TargetWrite,
            _: i64,
            _: Option<JobStatus>,
        ) -> Result<bool, StoreError> {
            unreachable!()
        }
        async fn set_status(
            &self,
            _: &str,
            _: JobStatus,
            _: &str,
            _: i64,
        ) -> Result<bool, StoreError> {
            unreachable!()
        }
        async fn touch(&self, _: &str, _: i64) -> Result<bool, StoreError> {
            unreachable!()
        }
        async fn sweep(&self, _: i64, _: i64) -> Result<usize, StoreError> {
            unreachable!()
        }
        async fn evict(&self, _: u64) -> Result<usize, StoreError> {
            unreachable!()
        }
        async fn recover(&self, _: &str, _: i64) -> Result<usize, StoreError> {
            unreachable!()
        }
        async fn live_jobs(&self, _: Option<&str>) -> Result<usize, StoreError> {
            unreachable!()
        }
        async fn total_bytes(&self) -> Result<u64, StoreError> {
            unreachable!()
        }
    }

    /// Runs a future that never waits (the scripted store's) to its end.
    fn now<T>(f: impl std::future::Future<Output = T>) -> T {
        let mut f = std::pin::pin!(f);
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        match f.as_mut().poll(&mut cx) {
            std::task::Poll::Ready(v) => v,
            std::task::Poll::Pending => panic!("the scripted store never waits"),
        }
    }

    fn row(done: usize) -> JobRow {
        let job = NewJob {
            id: "a".repeat(32),
            caller: "c".into(),
            class: CallerClass::Fleet,
            idem_key: "k".into(),
            targets: vec![("u".into(), "{}".into())],
            now: 5,
        };
        JobRow {
            targets_done: done,
            ..job.rows().0
        }
    }

    #[test]
    fn the_default_view_reads_again_while_the_job_changes_between_its_reads() {
        // Unchanged: one pair, two job reads.
        let s = Scripted::new(vec![Some(row(0))]);
        let (job, targets) = now(s.view("x")).unwrap().unwrap();
        assert_eq!(
            (job.targets_done, targets[0].idx, s.targets_read()),
            (0, 0, 1)
        );

        // Changed once (a target stored between the reads): the targets are read again, beside
        // the job as it was then.
        let s = Scripted::new(vec![Some(row(0)), Some(row(1))]);
        let (job, targets) = now(s.view("x")).unwrap().unwrap();
        assert_eq!(
            (job.targets_done, targets[0].idx, s.targets_read()),
            (1, 1, 2)
        );

        // Deleted between the reads, or never there: None.
        let s = Scripted::new(vec![Some(row(0)), None]);
        assert_eq!(now(s.view("x")).unwrap(), None);
        let s = Scripted::new(vec![None]);
        assert_eq!(now(s.view("x")).unwrap(), None);
        assert_eq!(s.targets_read(), 0);

        // Changing at every read: 8 tries, then the last pair read.
        let s = Scripted::new((0..20).map(|n| Some(row(n))).collect());
        let (job, targets) = now(s.view("x")).unwrap().unwrap();
        assert_eq!(
            (job.targets_done, targets[0].idx, s.targets_read()),
            (8, 8, 9)
        );
    }

    /// A done target's result counts in its bytes (SPEC §6: url, options, result, error, hint).
    #[test]
    fn n_bytes_counts_the_result_of_a_done_target() {
        let mut row = TargetRow::pending(0, "https://example.com/a", "{}");
        row.apply(&TargetWrite::Done {
            result: r#"{"content":"x"}"#.into(),
        });
        assert_eq!(row.n_bytes(), 21 + 2 + 15);
    }

    /// A store whose every answer is made from its arguments: to see that `Arc<S>` forwards
    /// each call with its arguments, and gives back the answer of `S`.
    struct Echo;

    #[async_trait]
    impl BatchStore for Echo {
        async fn admit(&self, job: &NewJob, caps: &Caps) -> Result<Admission, StoreError> {
            Ok(Admission::TooManyTargets {
                max: caps.targets_per_job,
                got: job.targets.len(),
            })
        }
        async fn job(&self, id: &str) -> Result<Option<JobRow>, StoreError> {
            Ok(Some(JobRow {
                id: id.into(),
                ..row(0)
            }))
        }
        async fn targets(&self, id: &str) -> Result<Vec<TargetRow>, StoreError> {
            Ok(vec![TargetRow::pending(0, id, "{}")])
        }
        // Not the default view: an `Arc` must forward to this one.
        async fn view(&self, id: &str) -> Result<Option<(JobRow, Vec<TargetRow>)>, StoreError> {
            let job = JobRow {
                id: id.into(),
                ..row(7)
            };
            Ok(Some((job, Vec::new())))
        }
        async fn start_target(
            &self,
            id: &str,
            idx: usize,
            now: i64,
        ) -> Result<Option<TargetRow>, StoreError> {
            Ok(Some(TargetRow::pending(idx, id, now.to_string())))
        }
        async fn finish_target(
            &self,
            id: &str,
            idx: usize,
            write: &TargetWrite,
            now: i64,
            finish: Option<JobStatus>,
        ) -> Result<bool, StoreError> {
            Ok(id == "a"
                && idx == 1
                && *write == TargetWrite::Pending
                && now == 2
                && finish == Some(JobStatus::Done))
        }
        async fn set_status(
            &self,
            id: &str,
            status: JobStatus,
            error: &str,
            now: i64,
        ) -> Result<bool, StoreError> {
            Ok(id == "a" && status == JobStatus::Failed && error == "e" && now == 2)
        }
        async fn touch(&self, id: &str, now: i64) -> Result<bool, StoreError> {
            Ok(id == "a" && now == 2)
        }
        async fn sweep(&self, now: i64, ttl_secs: i64) -> Result<usize, StoreError> {
            Ok(usize::try_from(now - ttl_secs).unwrap())
        }
        async fn evict(&self, max_bytes: u64) -> Result<usize, StoreError> {
            Ok(usize::try_from(max_bytes).unwrap())
        }
        async fn recover(&self, error: &str, now: i64) -> Result<usize, StoreError> {
            Ok(error.len() + usize::try_from(now).unwrap())
        }
        async fn live_jobs(&self, caller: Option<&str>) -> Result<usize, StoreError> {
            Ok(caller.map_or(9, str::len))
        }
        async fn total_bytes(&self) -> Result<u64, StoreError> {
            Ok(11)
        }
    }

    #[test]
    fn an_arc_of_a_store_forwards_every_call_and_its_answer() {
        let shared = std::sync::Arc::new(Echo);
        // The `BatchStore` impl of `Arc<Echo>`, not of `Echo`.
        let s: &dyn BatchStore = &shared;
        let new = NewJob {
            id: "a".repeat(32),
            caller: "c".into(),
            class: CallerClass::Fleet,
            idem_key: "k".into(),
            targets: vec![("u".into(), "{}".into()); 3],
            now: 5,
        };
        let caps = Caps {
            targets_per_job: 2,
            jobs_per_caller: 1,
            jobs_total: 1,
            ttl_secs: 1,
        };
        assert_eq!(
            now(s.admit(&new, &caps)).unwrap(),
            Admission::TooManyTargets { max: 2, got: 3 }
        );
        assert_eq!(now(s.job("x")).unwrap().map(|j| j.id), Some("x".into()));
        let targets = now(s.targets("x")).unwrap();
        assert_eq!(targets, [TargetRow::pending(0, "x", "{}")]);
        let (job, targets) = now(s.view("x")).unwrap().unwrap();
        assert_eq!(
            (job.id.as_str(), job.targets_done, targets.len()),
            ("x", 7, 0)
        );
        assert_eq!(
            now(s.start_target("x", 4, 6)).unwrap(),
            Some(TargetRow::pending(4, "x", "6"))
        );
        let pending = TargetWrite::Pending;
        let done = Some(JobStatus::Done);
        assert!(now(s.finish_target("a", 1, &pending, 2, done)).unwrap());
        assert!(!now(s.finish_target("a", 0, &pending, 2, done)).unwrap());
        assert!(now(s.set_status("a", JobStatus::Failed, "e", 2)).unwrap());
        assert!(!now(s.set_status("a", JobStatus::Failed, "e", 3)).unwrap());
        assert!(now(s.touch("a", 2)).unwrap());
        assert!(!now(s.touch("b", 2)).unwrap());
        assert_eq!(now(s.sweep(10, 3)).unwrap(), 7);
        assert_eq!(now(s.evict(5)).unwrap(), 5);
        assert_eq!(now(s.recover("abc", 4)).unwrap(), 7);
        assert_eq!(now(s.live_jobs(None)).unwrap(), 9);
        assert_eq!(now(s.live_jobs(Some("ab"))).unwrap(), 2);
        assert_eq!(now(s.total_bytes()).unwrap(), 11);
    }

    #[test]
    fn n_bytes_counts_every_text_column() {
        let mut row = TargetRow::pending(0, "abc", "{}");
        assert_eq!(row.n_bytes(), 5);
        row.apply(&TargetWrite::Failed {
            error: "err".into(),
            hint: "hi".into(),
        });
        assert_eq!(row.n_bytes(), 10);
    }
}
