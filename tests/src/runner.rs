//! The runner behaviour suite: one documented test per rule of SPEC §3–§5 and §8 (and the
//! housekeeping of §7), run against a real [`Runner`] on any [`BatchStore`].
//!
//! Each test is a `pub async fn` that takes a fresh, empty store (`Arc<dyn BatchStore>`) and
//! returns `Ok(())`, an error (a store or submit error, or a wait that timed out), or panics on
//! a broken rule with a message naming it. A backend runs the whole list from one file in
//! `tests/tests/` with [`runner_tests!`](crate::runner_tests), in the shape of
//! [`conformance_tests!`](crate::conformance_tests):
//!
//! ```text
//! use std::sync::Arc;
//! rota_tests::runner_tests!(sync || (Arc::new(rota_store_memory::MemoryStore::new()), ()));
//! // or, for a constructor that awaits and a guard (say a temp dir) to keep alive:
//! rota_tests::runner_tests!(|| async {
//!     let dir = tempfile::tempdir().unwrap();
//!     let store = Arc::new(MyStore::open(dir.path().join("db")).unwrap());
//!     (store, dir)
//! });
//! ```
//!
//! How the tests stay exact without timing anything:
//! - the fetch is a [`Probe`]: it records every call (url, attempt, caller, token, when) and
//!   can hold a url until the test releases it, so "while a0 is in flight" is a state the test
//!   controls, not a race it hopes to win;
//! - the hooks are a [`Recorder`], the clock a [`ManualClock`] (TTLs move by `set`, not sleep);
//! - every wait polls with [`until`] / [`until_status`] and a generous [`WAIT`]; the only
//!   sleeps are "nothing more happens" checks, which a correct runner cannot fail, and the
//!   lower bounds of `retry_wait` and of the hooks' durations, which it cannot fail either.
//!
//! Log checks capture `tracing` output with a thread-local subscriber ([`LogCapture`]), so
//! those tests run on a current-thread runtime, where the runner's workers run on the test's
//! thread.

use std::collections::HashMap;
use std::error::Error as StdError;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU8, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use rota::{
    Admission, Caller, CallerClass, CancellationToken, Caps, Clock, Config, Fetch, FetchError,
    Hooks, JobOutcome, JobRow, JobStatus, JobView, MAX_META_DEPTH, NewJob, Options, Runner,
    StoreError, SubmitError, Submitted, Target, TargetError, TargetResult, TargetRow, TargetState,
    TargetWrite, idem_key,
};
use tokio::sync::{Barrier, Semaphore};
use tokio::time::Instant;
use tracing_subscriber::fmt::MakeWriter;

use crate::faulty::{FaultyStore, Op, STORE_PANIC_VALUE, Timing};

#[doc(hidden)]
pub use rota_core::BatchStore;

/// What every test returns: an error fails it, as does a panic on a broken rule.
pub type TestResult = Result<(), Box<dyn StdError + Send + Sync>>;

/// A value or a test failure.
pub type Res<T> = Result<T, Box<dyn StdError + Send + Sync>>;

/// How long any wait lasts before the test fails: generous, for a loaded machine.
pub const WAIT: Duration = Duration::from_secs(10);

/// The pause between two polls of a wait.
pub const POLL: Duration = Duration::from_millis(5);

/// The [`ManualClock`]'s start: every test's "now", in unix seconds.
pub const T0: i64 = 1_700_000_000;

/// Every test, by name, in the order [`runner_tests!`](crate::runner_tests) generates them.
pub const TESTS: &[&str] = crate::runner_tests!(@list [names]);

/// Expands to one `#[tokio::test]` per runner test, named after it, each on a fresh store.
///
/// The argument makes a store, as for [`conformance_tests!`](crate::conformance_tests): a
/// closure or fn (no arguments) returning a future of `(Arc<S>, G)` where `S: BatchStore`, or,
/// after the word `sync`, returning `(Arc<S>, G)` directly. `G` is a guard kept alive until the
/// test ends (a temp dir, say; `()` for none). Tests that need real parallelism run on a
/// two-thread runtime; tests that capture logs, or that need one thread's scheduling, run on a
/// current-thread runtime.
#[macro_export]
macro_rules! runner_tests {
    (@list [$($mode:tt)*]) => {
        $crate::runner_tests! { @gen [$($mode)*]
            mt[
                submit_stores_the_job_queued_before_returning_and_keeps_the_caller_in_memory,
                a_jobs_caller_is_let_go_once_the_job_has_ended,
                submit_refuses_no_targets_before_anything_else,
                submit_refuses_more_targets_than_targets_per_job,
                submit_refuses_a_caller_at_jobs_per_caller,
                submit_refuses_everyone_at_jobs_total,
                caps_are_checked_targets_then_caller_then_total,
                reuse_comes_before_every_cap,
                submit_reuses_queued_running_done_and_partial_jobs,
                submit_never_reuses_failed_or_cancelled_jobs,
                another_caller_with_the_same_targets_gets_its_own_job,
                reuse_lasts_while_the_lease_is_younger_than_ttl,
                submit_fresh_makes_a_new_job_that_later_submits_reuse,
                a_fractional_ttl_is_kept_to_the_second,
                status_is_a_pure_read,
                touch_extends_the_lease,
                concurrent_submits_of_one_key_make_one_job,
                concurrent_submits_never_exceed_jobs_total,
                one_worker_alternates_the_targets_of_live_jobs,
                a_job_is_queued_until_reached_and_running_from_its_first_target,
                each_job_is_serial_while_two_workers_run_two_jobs_at_once,
                a_jobs_next_target_waits_for_the_previous_ones_write_with_a_worker_free,
                workers_clamp_to_two,
                a_runner_whose_config_fields_are_zero_runs_on_the_defaults,
                a_busy_target_goes_back_to_pending_and_is_retried,
                a_busy_target_is_tried_again_no_sooner_than_retry_wait,
                a_busy_target_does_not_hold_up_other_jobs,
                a_target_busy_for_longer_than_retry_for_fails_with_the_busy_text,
                a_result_with_meta_round_trips_through_status,
                a_result_whose_meta_nests_too_deep_is_stored_as_an_internal_error,
                a_target_error_keeps_msg_and_hint_and_other_keeps_its_text,
                the_terminal_status_is_done_failed_or_partial,
                every_hook_reports_with_the_right_counts,
                created_is_reported_before_the_jobs_terminal_outcome,
                hooks_get_the_fetch_time_and_the_submit_to_end_time,
                idle_workers_never_call_the_store,
                a_panicking_hook_stops_neither_the_workers_nor_the_outcomes,
                cancel_lets_the_inflight_target_finish_and_starts_nothing_more,
                cancel_while_a_stored_target_is_reported_starts_nothing_more,
                a_cancel_dropped_mid_write_still_ends_the_job_cancelled,
                a_cancel_while_a_targets_start_is_written_has_that_target_fetched_and_no_other,
                a_submit_dropped_mid_admit_still_runs_its_job,
                cancel_of_a_job_still_being_registered_waits_and_cancels_it,
                a_cancel_waiting_for_a_registration_that_never_comes_answers_false,
                a_cancel_waits_for_no_more_of_a_submit_once_its_job_is_registered,
                failed_admits_leave_no_writes_to_make_again,
                a_submit_outside_a_runtime_whose_admit_suspends_finishes_and_runs,
                cancel_of_a_queued_job_leaves_every_target_pending,
                cancelled_is_never_overwritten_by_the_last_inflight_outcome,
                cancel_is_false_for_unknown_terminal_and_cancelled_ids,
                status_of_an_unknown_id_is_none_and_a_corrupt_result_is_named,
                close_waits_for_the_inflight_fetch_then_fails_live_jobs,
                close_while_a_stored_target_is_reported_starts_nothing_more,
                close_leaves_cancelled_jobs_cancelled_and_a_busy_inflight_target_pending,
                close_returns_even_after_an_earlier_close_was_abandoned,
                close_waits_for_a_cancels_status_write_under_way,
                close_waits_for_a_submits_admit_under_way,
                a_close_polled_by_another_executor_and_dropped_still_closes,
                close_is_idempotent_and_refuses_later_submits,
                a_close_called_from_inside_a_fetch_returns_and_the_close_ends,
                a_close_from_inside_a_fetch_that_returns_at_once_starts_nothing_more,
                dropping_every_handle_stops_the_workers_after_their_inflight_targets,
                start_fails_leftover_live_jobs_as_interrupted_and_frees_their_caps,
                sweep_after_a_submit_deletes_expired_jobs_but_never_a_live_one,
                a_stored_target_sweeps_nothing_until_the_next_created_job,
                evict_after_a_stored_target_deletes_terminal_jobs_but_never_a_live_one,
                evict_runs_after_every_stored_target_not_only_at_a_jobs_end,
                evict_runs_again_once_a_cancelled_jobs_target_in_flight_is_stored,
                an_evict_put_off_for_a_cancelled_target_that_comes_back_busy_is_made_up,
                a_cancel_as_its_target_is_stored_leaves_no_job_over_the_budget,
                a_jobs_end_is_stored_before_the_hooks_report_it,
                a_targets_hook_comes_before_the_evict_after_it,
                a_stored_target_and_a_cancel_set_the_lease_to_their_time,
                a_cancel_lets_the_inflight_fetch_finish_with_its_token_uncancelled,
                a_store_failing_after_a_countdown_loses_no_accepted_outcome,
                a_cancel_whose_status_write_fails_is_written_again_at_close,
            ]
            ct[
                a_panic_is_stored_as_internal_error_and_its_value_is_never_kept,
                a_panic_before_the_fetch_future_exists_is_caught_too,
                a_failing_finish_target_is_logged_at_warn_and_the_job_goes_on,
                a_job_whose_final_write_fails_still_ends_in_the_store,
                a_busy_answer_whose_write_failed_loses_no_outcome,
                a_failing_start_target_is_logged_at_warn_and_the_job_goes_on,
                a_failing_set_status_is_logged_at_warn_and_survived,
                a_cancel_whose_status_write_fails_is_written_again_and_frees_the_cap,
                a_status_write_that_keeps_failing_holds_up_no_other,
                a_kept_write_that_fails_again_stays_kept_while_a_later_one_is_made,
                a_kept_status_write_another_task_is_making_is_made_before_the_next_admit,
                a_panicking_store_call_is_an_error_and_stops_no_worker,
                close_never_waits_on_a_submit_whose_caller_stopped_polling,
                a_close_cut_short_by_its_runtimes_shutdown_lets_a_later_close_return,
                a_close_from_inside_a_fetch_on_a_one_thread_runtime_starts_nothing_more,
                a_panicking_clock_is_logged_and_the_system_clock_answers,
                start_logs_how_many_leftover_live_jobs_it_failed,
                a_panicking_hook_is_logged_at_warn_without_its_value,
                failing_sweep_and_evict_are_logged_at_warn_and_survived,
                evict_leaves_a_cancelled_job_until_its_target_in_flight_is_stored,
                a_cancel_during_an_evict_under_way_writes_once_the_evict_is_over,
                a_cancel_waits_for_no_evict_once_its_target_in_flight_is_stored,
                a_close_during_a_put_off_evict_starts_nothing_more,
                a_sweep_leaves_a_cancelled_job_until_its_target_in_flight_is_stored,
                no_log_line_carries_a_url_host_or_caller_key,
            ]
        }
    };
    (@gen [names] mt[$($m:ident,)*] ct[$($c:ident,)*]) => {
        &[$(stringify!($m),)* $(stringify!($c),)*]
    };
    (@gen [tests $make:block] mt[$($m:ident,)*] ct[$($c:ident,)*]) => {
        $(
            #[doc = concat!("Runner: [`rota_tests::runner::", stringify!($m), "`].")]
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $m() -> $crate::runner::TestResult {
                let (store, _guard) = $make;
                let store: ::std::sync::Arc<dyn $crate::runner::BatchStore> = store;
                $crate::runner::$m(store).await
            }
        )*
        $(
            #[doc = concat!("Runner (current-thread runtime): [`rota_tests::runner::", stringify!($c), "`].")]
            #[tokio::test(flavor = "current_thread")]
            async fn $c() -> $crate::runner::TestResult {
                let (store, _guard) = $make;
                let store: ::std::sync::Arc<dyn $crate::runner::BatchStore> = store;
                $crate::runner::$c(store).await
            }
        )*
    };
    (sync $make:expr) => {
        $crate::runner_tests!(@list [tests { ($make)() }]);
    };
    ($make:expr) => {
        $crate::runner_tests!(@list [tests { ($make)().await }]);
    };
}

// ---- helpers: waiting ---------------------------------------------------------------------

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A test that panicked under a lock has failed already; the data is still readable.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn failure(msg: String) -> Box<dyn StdError + Send + Sync> {
    msg.into()
}

/// Polls `cond` every [`POLL`] until it holds; fails after [`WAIT`], naming `what`.
pub async fn until(what: &str, mut cond: impl FnMut() -> bool) -> TestResult {
    let deadline = Instant::now() + WAIT;
    while !cond() {
        if Instant::now() >= deadline {
            return Err(failure(format!(
                "timed out after {WAIT:?} waiting until {what}"
            )));
        }
        tokio::time::sleep(POLL).await;
    }
    Ok(())
}

/// Polls `runner.status(id)` until the job exists and `cond` holds; its view then. Fails after
/// [`WAIT`], naming `what` and showing the last view.
pub async fn until_status(
    runner: &Runner,
    id: &str,
    what: &str,
    cond: impl Fn(&JobView) -> bool,
) -> Res<JobView> {
    let deadline = Instant::now() + WAIT;
    loop {
        let view = runner.status(id).await?;
        if let Some(v) = &view
            && cond(v)
        {
            return Ok(v.clone());
        }
        if Instant::now() >= deadline {
            return Err(failure(format!(
                "timed out after {WAIT:?} waiting until job {id} {what}; last seen: {view:?}"
            )));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Awaits `fut`, failing after [`WAIT`] (a hang is a failure, not a stuck test).
pub async fn within<T>(what: &str, fut: impl Future<Output = T>) -> Res<T> {
    tokio::time::timeout(WAIT, fut)
        .await
        .map_err(|_| failure(format!("{what} did not return within {WAIT:?}")))
}

/// The states of a view's targets, in idx order.
pub fn states(v: &JobView) -> Vec<TargetState> {
    v.targets.iter().map(|t| t.status).collect()
}

// ---- helpers: jobs ------------------------------------------------------------------------

/// The url of target `idx` of test job `job`: `https://{job}.example/{idx}`.
pub fn url(job: &str, idx: usize) -> String {
    format!("https://{job}.example/{idx}")
}

/// The job part of a test url: everything before its last `/`.
fn job_of(url: &str) -> &str {
    url.rsplit_once('/').map_or(url, |(j, _)| j)
}

/// `n` targets of test job `job`, with default options.
pub fn targets(job: &str, n: usize) -> Vec<Target> {
    (0..n).map(|i| target(&url(job, i))).collect()
}

/// A target of `url` with default options.
pub fn target(url: &str) -> Target {
    Target {
        url: url.to_owned(),
        options: Options::default(),
    }
}

/// A caller named `name`, with a workspace and key that name it.
pub fn caller(name: &str) -> Caller {
    Caller {
        name: name.to_owned(),
        workspace: format!("workspace-of-{name}"),
        key_sha256: format!("key-sha256-of-{name}-c0ffee"),
    }
}

/// The answer to a submit that returned the existing job `id`.
pub fn reused(id: impl Into<String>) -> Submitted {
    Submitted {
        id: id.into(),
        reused: true,
    }
}

/// What the default [`Probe`] returns for `url`.
pub fn content_of(url: &str) -> TargetResult {
    TargetResult {
        content: format!("content of {url}"),
        meta: Default::default(),
    }
}

/// The length of the JSON the runner stores for `r`.
pub fn json_len(r: &TargetResult) -> usize {
    r.to_json().map_or(0, |j| j.len())
}

// ---- helpers: the fetch -------------------------------------------------------------------

/// What a [`Probe`] does for one fetch.
#[derive(Debug, Clone)]
pub enum Act {
    /// Return this result.
    Ok(TargetResult),
    /// Return this error.
    Fail(FetchError),
    /// Panic with this value.
    Panic(String),
}

/// One recorded fetch.
#[derive(Debug, Clone)]
pub struct Call {
    /// The target's url.
    pub url: String,
    /// How many fetches of this url came before this one.
    pub attempt: usize,
    /// The caller the runner passed.
    pub caller: Arc<Caller>,
    /// The target the runner passed.
    pub target: Target,
    /// The token the runner passed.
    pub cancel: CancellationToken,
    /// When the fetch started.
    pub started: Instant,
    /// When it returned (or panicked), if it has.
    pub ended: Option<Instant>,
}

type Script = dyn Fn(&str, usize) -> Act + Send + Sync;

#[derive(Default)]
struct ProbeLog {
    calls: Vec<Call>,
    inflight: usize,
    max_inflight: usize,
    per_job: HashMap<String, usize>,
    max_per_job: usize,
}

struct ProbeInner {
    script: Box<Script>,
    delay: Duration,
    gates: Mutex<HashMap<String, Arc<Semaphore>>>,
    log: Mutex<ProbeLog>,
}

/// A controllable, recording [`Fetch`]. A script maps `(url, attempt)` to an [`Act`]; a url can
/// be held ([`hold`](Self::hold)) so that its fetch waits until [`release`](Self::release).
/// Cheap to clone: clones share the record.
#[derive(Clone)]
pub struct Probe(Arc<ProbeInner>);

impl Default for Probe {
    fn default() -> Self {
        Self::new()
    }
}

impl Probe {
    /// A probe whose every fetch returns [`content_of`] its url.
    pub fn new() -> Probe {
        Probe::scripted(|url, _| Act::Ok(content_of(url)))
    }

    /// A probe that does what `script(url, attempt)` says.
    pub fn scripted(script: impl Fn(&str, usize) -> Act + Send + Sync + 'static) -> Probe {
        Probe::build(Box::new(script), Duration::ZERO)
    }

    /// A probe whose first fetch of each url answers busy (`RetryLater("busy")`), and every
    /// later one [`content_of`] the url.
    pub fn busy_once() -> Probe {
        Probe::scripted(|url, attempt| {
            if attempt == 0 {
                Act::Fail(FetchError::RetryLater("busy".into()))
            } else {
                Act::Ok(content_of(url))
            }
        })
    }

    /// A probe whose every fetch returns [`content_of`] its url after `delay`.
    pub fn slow(delay: Duration) -> Probe {
        Probe::slow_scripted(|url, _| Act::Ok(content_of(url)), delay)
    }

    /// A probe that does what `script(url, attempt)` says, after `delay`.
    pub fn slow_scripted(
        script: impl Fn(&str, usize) -> Act + Send + Sync + 'static,
        delay: Duration,
    ) -> Probe {
        Probe::build(Box::new(script), delay)
    }

    fn build(script: Box<Script>, delay: Duration) -> Probe {
        Probe(Arc::new(ProbeInner {
            script,
            delay,
            gates: Mutex::new(HashMap::new()),
            log: Mutex::new(ProbeLog::default()),
        }))
    }

    /// From now on, a fetch of `url` waits until [`release`](Self::release)`(url)`.
    pub fn hold(&self, url: &str) {
        lock(&self.0.gates).insert(url.to_owned(), Arc::new(Semaphore::new(0)));
    }

    /// Lets the held fetches of `url` (and every later one) go on.
    pub fn release(&self, url: &str) {
        if let Some(gate) = lock(&self.0.gates).remove(url) {
            gate.close();
        }
    }

    /// Releases every held url.
    pub fn release_all(&self) {
        for (_, gate) in lock(&self.0.gates).drain() {
            gate.close();
        }
    }

    /// The urls fetched, in the order their fetches started (a retried url appears again).
    pub fn started(&self) -> Vec<String> {
        lock(&self.0.log)
            .calls
            .iter()
            .map(|c| c.url.clone())
            .collect()
    }

    /// Every recorded fetch.
    pub fn calls(&self) -> Vec<Call> {
        lock(&self.0.log).calls.clone()
    }

    /// How many fetches of `url` started.
    pub fn attempts(&self, url: &str) -> usize {
        lock(&self.0.log)
            .calls
            .iter()
            .filter(|c| c.url == url)
            .count()
    }

    /// How many fetches of `url` returned.
    pub fn returned(&self, url: &str) -> usize {
        let log = lock(&self.0.log);
        log.calls
            .iter()
            .filter(|c| c.url == url && c.ended.is_some())
            .count()
    }

    /// The most fetches that were in flight at once.
    pub fn max_inflight(&self) -> usize {
        lock(&self.0.log).max_inflight
    }

    /// The most fetches of one job (urls sharing all but their last path segment) that were in
    /// flight at once.
    pub fn max_per_job(&self) -> usize {
        lock(&self.0.log).max_per_job
    }

    /// The fetches in flight now.
    pub fn inflight(&self) -> usize {
        lock(&self.0.log).inflight
    }
}

#[async_trait]
impl Fetch for Probe {
    async fn fetch(
        &self,
        caller: Arc<Caller>,
        target: Target,
        cancel: CancellationToken,
    ) -> Result<TargetResult, FetchError> {
        let me = &*self.0;
        let url = target.url.clone();
        let job = job_of(&url).to_owned();
        let (n, attempt) = {
            let mut log = lock(&me.log);
            let attempt = log.calls.iter().filter(|c| c.url == url).count();
            log.calls.push(Call {
                url: url.clone(),
                attempt,
                caller,
                target,
                cancel,
                started: Instant::now(),
                ended: None,
            });
            log.inflight += 1;
            log.max_inflight = log.max_inflight.max(log.inflight);
            let per = log.per_job.entry(job.clone()).or_default();
            *per += 1;
            let per = *per;
            log.max_per_job = log.max_per_job.max(per);
            (log.calls.len() - 1, attempt)
        };
        let gate = lock(&me.gates).get(&url).cloned();
        if let Some(gate) = gate {
            // Closed on release: the acquire then fails at once, which is the signal.
            let _ = gate.acquire().await;
        }
        if !me.delay.is_zero() {
            tokio::time::sleep(me.delay).await;
        }
        let act = (me.script)(&url, attempt);
        {
            let mut log = lock(&me.log);
            log.inflight = log.inflight.saturating_sub(1);
            if let Some(per) = log.per_job.get_mut(&job) {
                *per = per.saturating_sub(1);
            }
            if let Some(c) = log.calls.get_mut(n) {
                c.ended = Some(Instant::now());
            }
        }
        match act {
            Act::Ok(r) => Ok(r),
            Act::Fail(e) => Err(e),
            Act::Panic(value) => std::panic::panic_any(value),
        }
    }
}

// ---- helpers: hooks and clock -------------------------------------------------------------

/// [`Hooks`] that record every call.
#[derive(Debug, Default)]
pub struct Recorder {
    jobs: Mutex<Vec<JobOutcome>>,
    targets: Mutex<Vec<(Option<FetchError>, usize)>>,
    target_elapsed: Mutex<Vec<Duration>>,
    job_seconds: Mutex<Vec<Duration>>,
    depth: Mutex<Vec<usize>>,
    inflight: Mutex<Vec<usize>>,
}

impl Recorder {
    /// How many times `hooks.job(outcome)` was called.
    pub fn count(&self, outcome: JobOutcome) -> usize {
        lock(&self.jobs).iter().filter(|o| **o == outcome).count()
    }

    /// How many terminal outcomes (done, partial, failed, cancelled) were reported.
    pub fn terminal(&self) -> usize {
        lock(&self.jobs)
            .iter()
            .filter(|o| !matches!(o, JobOutcome::Created | JobOutcome::Reused))
            .count()
    }

    /// Every `hooks.target(err, _, result_bytes)` call, in order.
    pub fn targets(&self) -> Vec<(Option<FetchError>, usize)> {
        lock(&self.targets).clone()
    }

    /// The `elapsed` of every `hooks.target` call, in order.
    pub fn target_elapsed(&self) -> Vec<Duration> {
        lock(&self.target_elapsed).clone()
    }

    /// The `elapsed` of every `hooks.job_seconds` call, in order.
    pub fn job_elapsed(&self) -> Vec<Duration> {
        lock(&self.job_seconds).clone()
    }

    /// How many times `hooks.job_seconds` was called.
    pub fn job_seconds(&self) -> usize {
        lock(&self.job_seconds).len()
    }

    /// Every depth reported, in order.
    pub fn depth(&self) -> Vec<usize> {
        lock(&self.depth).clone()
    }

    /// Every in-flight count reported, in order.
    pub fn inflight(&self) -> Vec<usize> {
        lock(&self.inflight).clone()
    }

    /// Whether the last depth and in-flight counts reported are both 0 (or none was reported).
    pub fn idle(&self) -> bool {
        let zero = |v: &Mutex<Vec<usize>>| lock(v).last().is_none_or(|n| *n == 0);
        zero(&self.depth) && zero(&self.inflight)
    }
}

impl Hooks for Recorder {
    fn job(&self, outcome: JobOutcome) {
        lock(&self.jobs).push(outcome);
    }
    fn target(&self, err: Option<&FetchError>, elapsed: Duration, result_bytes: usize) {
        lock(&self.targets).push((err.cloned(), result_bytes));
        lock(&self.target_elapsed).push(elapsed);
    }
    fn job_seconds(&self, elapsed: Duration) {
        lock(&self.job_seconds).push(elapsed);
    }
    fn depth(&self, live_jobs: usize) {
        lock(&self.depth).push(live_jobs);
    }
    fn inflight(&self, targets: usize) {
        lock(&self.inflight).push(targets);
    }
}

/// A [`Clock`] the test sets by hand.
#[derive(Debug)]
pub struct ManualClock(AtomicI64);

impl ManualClock {
    /// A clock reading `now`.
    pub fn new(now: i64) -> Self {
        ManualClock(AtomicI64::new(now))
    }
    /// Makes the clock read `now`.
    pub fn set(&self, now: i64) {
        self.0.store(now, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_unix(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }
}

/// [`Hooks`] that hold a worker between two targets: the first `hooks.target` call (made once
/// that target's outcome is stored) blocks its thread until [`release`](Self::release), or for
/// at most [`WAIT`]. Needs a runtime with a thread to spare.
#[derive(Debug, Default)]
pub struct HeldTarget {
    /// Whether the first `hooks.target` call has come (and is held, until released).
    entered: AtomicBool,
    released: Mutex<bool>,
    wake: Condvar,
}

impl HeldTarget {
    /// Whether a worker is held in (or has passed) the first `hooks.target` call.
    pub fn entered(&self) -> bool {
        self.entered.load(Ordering::SeqCst)
    }

    /// Lets the held worker go on.
    pub fn release(&self) {
        *lock(&self.released) = true;
        self.wake.notify_all();
    }
}

impl Hooks for HeldTarget {
    fn target(&self, _err: Option<&FetchError>, _elapsed: Duration, _result_bytes: usize) {
        if self.entered.swap(true, Ordering::SeqCst) {
            return;
        }
        let released = lock(&self.released);
        let _held = self
            .wake
            .wait_timeout_while(released, WAIT, |released| !*released)
            .unwrap_or_else(|e| e.into_inner());
    }
}

// ---- helpers: logs ------------------------------------------------------------------------

/// A buffer that `tracing` output is written into; clones share it.
#[derive(Debug, Clone, Default)]
pub struct LogBuf(Arc<Mutex<Vec<u8>>>);

impl LogBuf {
    /// Everything written so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&lock(&self.0)).into_owned()
    }

    /// The lines at WARN that mention `needle`.
    pub fn warns_with(&self, needle: &str) -> Vec<String> {
        self.text()
            .lines()
            .filter(|l| l.contains(" WARN ") && l.contains(needle))
            .map(str::to_owned)
            .collect()
    }
}

impl io::Write for LogBuf {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        lock(&self.0).extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for LogBuf {
    type Writer = LogBuf;
    fn make_writer(&'a self) -> LogBuf {
        self.clone()
    }
}

/// Captures every `tracing` event at TRACE and above on this thread while it lives. Use it on
/// a current-thread runtime, where the runner's tasks run on the test's thread.
///
/// When dropped (its test not already failing), it checks that no captured line holds a host
/// of the test targets (`.example`, as [`url`] makes them): whatever a test makes fail — a
/// fetch, a store call, a hook — no URL or host reaches the logs.
pub struct LogCapture {
    /// What was captured.
    pub buf: LogBuf,
    _guard: tracing::subscriber::DefaultGuard,
}

impl LogCapture {
    /// Starts capturing.
    pub fn start() -> LogCapture {
        // While exactly one subscriber is registered in the process, tracing-core decides a
        // callsite's interest, when some thread first reaches it, from that thread's default
        // subscriber, not the registered one (tokio-rs/tracing#3611): a worker of another
        // test, with no subscriber, would fix "never" on a line this capture waits for. A
        // second, silent subscriber kept registered for the process takes it off that path.
        static SILENT: OnceLock<tracing::Dispatch> = OnceLock::new();
        SILENT.get_or_init(|| tracing::Dispatch::new(Silent));
        let buf = LogBuf::default();
        let sub = tracing_subscriber::fmt()
            .with_writer(buf.clone())
            .with_max_level(tracing::Level::TRACE)
            .with_ansi(false)
            .finish();
        LogCapture {
            _guard: tracing::subscriber::set_default(sub),
            buf,
        }
    }
}

impl Drop for LogCapture {
    fn drop(&mut self) {
        if std::thread::panicking() {
            return;
        }
        let text = self.buf.text();
        let leaked: Vec<&str> = text.lines().filter(|l| l.contains(".example")).collect();
        assert!(
            leaked.is_empty(),
            "a test target's host in the logs:\n{}",
            leaked.join("\n")
        );
    }
}

/// A subscriber that wants nothing; see [`LogCapture::start`].
struct Silent;

impl tracing::Subscriber for Silent {
    fn register_callsite(
        &self,
        _: &'static tracing::Metadata<'static>,
    ) -> tracing::subscriber::Interest {
        tracing::subscriber::Interest::never()
    }
    fn max_level_hint(&self) -> Option<tracing::level_filters::LevelFilter> {
        Some(tracing::level_filters::LevelFilter::OFF)
    }
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        false
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, _: &tracing::Event<'_>) {}
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

// ---- helpers: stores ----------------------------------------------------------------------

/// A [`BatchStore`] over a shared `Arc<dyn BatchStore>` that records every final target write
/// the wrapped store accepted (so a fault test can check none was lost), and can hold its
/// `set_status`, `admit`, `start_target`, `finish_target`, `evict` and `sweep` calls (a store
/// whose calls suspend), or act out
/// a bug in `admit`, `touch` and `evict` ([`Shared::misbehave`]). Put it under a
/// [`FaultyStore`] to record only the writes that got past the faults.
pub struct Shared {
    inner: Arc<dyn BatchStore>,
    accepted: Mutex<Vec<(String, usize, TargetWrite)>>,
    /// The ids of the jobs the wrapped store created, in order.
    created: Mutex<Vec<String>>,
    /// The [`Misbehave`] acted out, as its `u8`.
    misbehaving: AtomicU8,
    status_gate: Gate,
    admit_gate: Gate,
    finish_gate: Gate,
    start_gate: Gate,
    evict_gate: Gate,
    sweep_gate: Gate,
    /// `finish_target` calls that found no such target.
    missing: std::sync::atomic::AtomicUsize,
}

/// A bug a [`Shared`] store acts out (see [`Shared::misbehave`]): panics of a store written by
/// hand (not with `#[async_trait]`), whose methods may do work before their futures exist.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Misbehave {
    /// None.
    Not,
    /// `evict` panics (with [`STORE_PANIC_VALUE`]) when called, before its future exists.
    EvictPanicsWhenCalled,
    /// `touch` and `evict` panic, while their futures run, with a value that panics again when
    /// dropped.
    PanicValuePanicsWhenDropped,
    /// `touch` panics with such a value when called, before its future exists.
    TouchPanicsWhenCalled,
    /// `admit` and `touch` answer as the wrapped store does, and their futures then panic when
    /// dropped.
    FuturePanicsWhenDropped,
}

/// A value that panics when dropped: a panic's value, or part of a future, of a buggy store.
struct PanicsWhenDropped;

impl Drop for PanicsWhenDropped {
    fn drop(&mut self) {
        panic!("a store's value panicked when dropped");
    }
}

/// A store future that answers as the one it wraps, and panics when dropped.
struct ThenPanicsWhenDropped<F: ?Sized>(#[allow(dead_code)] PanicsWhenDropped, Pin<Box<F>>);

impl<F: Future + ?Sized> Future for ThenPanicsWhenDropped<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<F::Output> {
        self.get_mut().1.as_mut().poll(cx)
    }
}

/// A store call's future, as `#[async_trait]` makes it.
type StoreCall<'f, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'f>>;

/// Where a held store call waits: shut by `hold`, open again (for the waiting calls and every
/// later one) by `release`.
#[derive(Default)]
struct Gate {
    shut: Mutex<Option<Arc<Semaphore>>>,
    /// Calls waiting at the gate now.
    waiting: std::sync::atomic::AtomicUsize,
}

impl Gate {
    fn hold(&self) {
        *lock(&self.shut) = Some(Arc::new(Semaphore::new(0)));
    }

    fn release(&self) {
        if let Some(gate) = lock(&self.shut).take() {
            gate.close();
        }
    }

    /// Waits (up to 10 s) until `n` calls wait here.
    async fn held(&self, n: usize, what: &str) -> TestResult {
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.waiting.load(Ordering::SeqCst) != n {
            if Instant::now() > deadline {
                return Err(format!("{n} {what} calls never held").into());
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        Ok(())
    }

    async fn pass(&self) {
        let gate = lock(&self.shut).clone();
        if let Some(gate) = gate {
            self.waiting.fetch_add(1, Ordering::SeqCst);
            // Closed on release: the wait ends with an error, which is the signal.
            let _ = gate.acquire().await;
            self.waiting.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

impl Shared {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn BatchStore>) -> Self {
        Shared {
            inner,
            accepted: Mutex::new(Vec::new()),
            created: Mutex::new(Vec::new()),
            misbehaving: AtomicU8::new(Misbehave::Not as u8),
            status_gate: Gate::default(),
            admit_gate: Gate::default(),
            finish_gate: Gate::default(),
            start_gate: Gate::default(),
            evict_gate: Gate::default(),
            sweep_gate: Gate::default(),
            missing: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    /// From now on, a `set_status` call waits (suspended, before it reaches the wrapped store)
    /// until [`release_set_status`](Self::release_set_status).
    pub fn hold_set_status(&self) {
        self.status_gate.hold();
    }

    /// Lets the held `set_status` calls (and every later one) go on.
    pub fn release_set_status(&self) {
        self.status_gate.release();
    }

    /// From now on, an `admit` call waits (suspended, after the wrapped store has admitted the
    /// job) until [`release_admit`](Self::release_admit).
    pub fn hold_admit(&self) {
        self.admit_gate.hold();
    }

    /// Lets the held `admit` calls (and every later one) answer.
    pub fn release_admit(&self) {
        self.admit_gate.release();
    }

    /// Waits (up to 10 s) until `n` admit calls are held.
    pub async fn admits_held(&self, n: usize) -> TestResult {
        self.admit_gate.held(n, "admit").await
    }

    /// Waits (up to 10 s) until `n` set_status calls are held.
    pub async fn statuses_held(&self, n: usize) -> TestResult {
        self.status_gate.held(n, "set_status").await
    }

    /// From now on, a `finish_target` call waits (suspended, before it reaches the wrapped
    /// store) until [`release_finish_target`](Self::release_finish_target).
    pub fn hold_finish_target(&self) {
        self.finish_gate.hold();
    }

    /// Lets the held `finish_target` calls (and every later one) go on.
    pub fn release_finish_target(&self) {
        self.finish_gate.release();
    }

    /// How many `set_status` calls are held now.
    pub fn statuses_held_now(&self) -> usize {
        self.status_gate.waiting.load(Ordering::SeqCst)
    }

    /// From now on, a `start_target` call waits (suspended, before it reaches the wrapped
    /// store) until [`release_start_target`](Self::release_start_target).
    pub fn hold_start_target(&self) {
        self.start_gate.hold();
    }

    /// Lets the held `start_target` calls (and every later one) go on.
    pub fn release_start_target(&self) {
        self.start_gate.release();
    }

    /// Waits (up to 10 s) until `n` start_target calls are held.
    pub async fn starts_held(&self, n: usize) -> TestResult {
        self.start_gate.held(n, "start_target").await
    }

    /// From now on, an `evict` call waits (suspended, before it reaches the wrapped store)
    /// until [`release_evict`](Self::release_evict).
    pub fn hold_evict(&self) {
        self.evict_gate.hold();
    }

    /// Lets the held `evict` calls (and every later one) go on.
    pub fn release_evict(&self) {
        self.evict_gate.release();
    }

    /// Waits (up to 10 s) until `n` evict calls are held.
    pub async fn evicts_held(&self, n: usize) -> TestResult {
        self.evict_gate.held(n, "evict").await
    }

    /// How many `evict` calls are held now.
    pub fn evicts_held_now(&self) -> usize {
        self.evict_gate.waiting.load(Ordering::SeqCst)
    }

    /// From now on, a `sweep` call waits (suspended, before it reaches the wrapped store)
    /// until [`release_sweep`](Self::release_sweep).
    pub fn hold_sweep(&self) {
        self.sweep_gate.hold();
    }

    /// Lets the held `sweep` calls (and every later one) go on.
    pub fn release_sweep(&self) {
        self.sweep_gate.release();
    }

    /// Waits (up to 10 s) until `n` sweep calls are held.
    pub async fn sweeps_held(&self, n: usize) -> TestResult {
        self.sweep_gate.held(n, "sweep").await
    }

    /// How many `finish_target` calls are held now.
    pub fn finishes_held(&self) -> usize {
        self.finish_gate.waiting.load(Ordering::SeqCst)
    }

    /// From now on, acts out `bug` ([`Misbehave::Not`]: none).
    pub fn misbehave(&self, bug: Misbehave) {
        self.misbehaving.store(bug as u8, Ordering::SeqCst);
    }

    fn misbehaving(&self, bug: Misbehave) -> bool {
        self.misbehaving.load(Ordering::SeqCst) == bug as u8
    }

    /// The ids of the jobs the wrapped store created, in order (an admit held by
    /// [`hold_admit`](Self::hold_admit) is here already).
    pub fn created(&self) -> Vec<String> {
        lock(&self.created).clone()
    }

    /// How many `finish_target` calls found no such target (its job deleted under it).
    pub fn finishes_missing(&self) -> usize {
        self.missing.load(Ordering::SeqCst)
    }

    /// Every accepted done or failed target write, as (job id, idx, write).
    pub fn accepted(&self) -> Vec<(String, usize, TargetWrite)> {
        lock(&self.accepted).clone()
    }
}

#[async_trait]
impl BatchStore for Shared {
    // Written by hand, as `#[async_trait]` would expand it, to wrap the future it returns.
    fn admit<'s, 'j, 'c, 'f>(&'s self, job: &'j NewJob, caps: &'c Caps) -> StoreCall<'f, Admission>
    where
        's: 'f,
        'j: 'f,
        'c: 'f,
        Self: 'f,
    {
        let fut: StoreCall<'f, Admission> = Box::pin(async move {
            let r = self.inner.admit(job, caps).await;
            if matches!(r, Ok(Admission::Created)) {
                lock(&self.created).push(job.id.clone());
            }
            self.admit_gate.pass().await;
            r
        });
        if self.misbehaving(Misbehave::FuturePanicsWhenDropped) {
            Box::pin(ThenPanicsWhenDropped(PanicsWhenDropped, fut))
        } else {
            fut
        }
    }
    async fn job(&self, id: &str) -> Result<Option<JobRow>, StoreError> {
        self.inner.job(id).await
    }
    async fn targets(&self, id: &str) -> Result<Vec<TargetRow>, StoreError> {
        self.inner.targets(id).await
    }
    async fn view(&self, id: &str) -> Result<Option<(JobRow, Vec<TargetRow>)>, StoreError> {
        self.inner.view(id).await
    }
    async fn start_target(
        &self,
        id: &str,
        idx: usize,
        now: i64,
    ) -> Result<Option<TargetRow>, StoreError> {
        self.start_gate.pass().await;
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
        self.finish_gate.pass().await;
        let r = self.inner.finish_target(id, idx, write, now, finish).await;
        if matches!(r, Ok(true))
            && matches!(write, TargetWrite::Done { .. } | TargetWrite::Failed { .. })
        {
            lock(&self.accepted).push((id.to_owned(), idx, write.clone()));
        }
        if matches!(r, Ok(false)) {
            self.missing.fetch_add(1, Ordering::SeqCst);
        }
        r
    }
    async fn set_status(
        &self,
        id: &str,
        status: JobStatus,
        error: &str,
        now: i64,
    ) -> Result<bool, StoreError> {
        self.status_gate.pass().await;
        self.inner.set_status(id, status, error, now).await
    }
    // Written by hand, as `#[async_trait]` would expand it, to misbehave when called.
    fn touch<'s, 'i, 'f>(&'s self, id: &'i str, now: i64) -> StoreCall<'f, bool>
    where
        's: 'f,
        'i: 'f,
        Self: 'f,
    {
        if self.misbehaving(Misbehave::TouchPanicsWhenCalled) {
            std::panic::panic_any(PanicsWhenDropped);
        }
        if self.misbehaving(Misbehave::PanicValuePanicsWhenDropped) {
            return Box::pin(async { std::panic::panic_any(PanicsWhenDropped) });
        }
        let fut = self.inner.touch(id, now);
        if self.misbehaving(Misbehave::FuturePanicsWhenDropped) {
            Box::pin(ThenPanicsWhenDropped(PanicsWhenDropped, fut))
        } else {
            fut
        }
    }
    async fn sweep(&self, now: i64, ttl_secs: i64) -> Result<usize, StoreError> {
        self.sweep_gate.pass().await;
        self.inner.sweep(now, ttl_secs).await
    }
    // Written by hand, as `#[async_trait]` would expand it, to panic before the future exists.
    fn evict<'s, 'f>(&'s self, max_bytes: u64) -> StoreCall<'f, usize>
    where
        's: 'f,
        Self: 'f,
    {
        if self.misbehaving(Misbehave::EvictPanicsWhenCalled) {
            std::panic::panic_any(format!("{STORE_PANIC_VALUE} evict call"));
        }
        if self.misbehaving(Misbehave::PanicValuePanicsWhenDropped) {
            return Box::pin(async { std::panic::panic_any(PanicsWhenDropped) });
        }
        let fut = self.inner.evict(max_bytes);
        Box::pin(async move {
            self.evict_gate.pass().await;
            fut.await
        })
    }
    async fn recover(&self, error: &str, now: i64) -> Result<usize, StoreError> {
        self.inner.recover(error, now).await
    }
    async fn live_jobs(&self, caller: Option<&str>) -> Result<usize, StoreError> {
        self.inner.live_jobs(caller).await
    }
    async fn total_bytes(&self) -> Result<u64, StoreError> {
        self.inner.total_bytes().await
    }
}

/// `store` under a [`FaultyStore`] (over [`Shared`]), and the same as a `dyn BatchStore`.
pub fn faulty(store: Arc<dyn BatchStore>) -> (Arc<FaultyStore<Shared>>, Arc<dyn BatchStore>) {
    let f = Arc::new(FaultyStore::new(Shared::new(store)));
    let d: Arc<dyn BatchStore> = f.clone();
    (f, d)
}

// ---- helpers: the rig ---------------------------------------------------------------------

/// A config with room: one worker, caps that stay out of the way, a 20 ms retry pause.
pub fn config() -> Config {
    Config {
        workers: 1,
        jobs_per_caller: 16,
        jobs_total: 64,
        retry_wait: Duration::from_millis(20),
        ..Config::default()
    }
}

/// A runner on a store, with its probe, hooks and clock.
pub struct Rig {
    /// The runner.
    pub runner: Runner,
    /// Its store.
    pub store: Arc<dyn BatchStore>,
    /// Its fetch.
    pub probe: Probe,
    /// Its hooks.
    pub hooks: Arc<Recorder>,
    /// Its clock, at [`T0`] to start with.
    pub clock: Arc<ManualClock>,
}

/// Starts a runner on `store` with `probe` and `cfg` (its hooks and clock replaced by a new
/// [`Recorder`] and a [`ManualClock`] at [`T0`]).
pub async fn rig(store: Arc<dyn BatchStore>, probe: Probe, cfg: Config) -> Res<Rig> {
    let hooks = Arc::new(Recorder::default());
    let clock = Arc::new(ManualClock::new(T0));
    let cfg = Config {
        hooks: hooks.clone(),
        clock: clock.clone(),
        ..cfg
    };
    let runner = Runner::start(store.clone(), probe.clone(), cfg).await?;
    Ok(Rig {
        runner,
        store,
        probe,
        hooks,
        clock,
    })
}

impl Rig {
    /// Submits `targets` for caller `who`; the answer.
    pub async fn submit_targets(
        &self,
        who: &str,
        targets: Vec<Target>,
    ) -> Result<Submitted, SubmitError> {
        self.runner
            .submit(caller(who), CallerClass::Fleet, targets)
            .await
    }

    /// Submits `n` targets of test job `job` for caller `who`, which must create a job; its id.
    pub async fn submit(&self, who: &str, job: &str, n: usize) -> Res<String> {
        self.create(who, targets(job, n)).await
    }

    /// Submits `targets` for caller `who`, which must create a job; its id.
    pub async fn create(&self, who: &str, targets: Vec<Target>) -> Res<String> {
        let s = self.submit_targets(who, targets).await?;
        assert!(!s.reused, "a new submit of {who} creates a job");
        Ok(s.id)
    }

    /// The job's view, which must exist.
    pub async fn view(&self, id: &str) -> Res<JobView> {
        match self.runner.status(id).await? {
            Some(v) => Ok(v),
            None => Err(failure(format!("job {id} should be stored"))),
        }
    }

    /// The job's stored row, which must exist.
    pub async fn row(&self, id: &str) -> Res<JobRow> {
        match self.store.job(id).await? {
            Some(r) => Ok(r),
            None => Err(failure(format!("job {id} should be stored"))),
        }
    }

    /// Waits until job `id` is terminal; its view then.
    pub async fn terminal(&self, id: &str) -> Res<JobView> {
        until_status(&self.runner, id, "is terminal", |v| {
            v.job.status.is_terminal()
        })
        .await
    }

    /// Waits until the probe has started fetching `url` `n` times.
    pub async fn started(&self, url: &str, n: usize) -> TestResult {
        let what = format!("{url} has been fetched {n} time(s)");
        until(&what, || self.probe.attempts(url) >= n).await
    }

    /// Waits until every created job's terminal outcome was reported and the runner is idle.
    pub async fn settled(&self) -> TestResult {
        let h = &self.hooks;
        until(
            "every created job is reported terminal and nothing is in flight",
            || h.terminal() >= h.count(JobOutcome::Created) && h.idle(),
        )
        .await
    }

    /// Closes the runner, failing if it does not return.
    pub async fn close(&self) -> TestResult {
        within("close", self.runner.close()).await
    }

    /// Starts `close` in a task of its own; that task.
    pub fn spawn_close(&self) -> tokio::task::JoinHandle<()> {
        let runner = self.runner.clone();
        tokio::spawn(async move { runner.close().await })
    }
}

// ---- §3 submit ----------------------------------------------------------------------------

/// A submit stores the job `queued` with its targets `pending` before it returns (`created_at`
/// = lease = now, a 32-character lowercase hex id, the options' JSON); the caller's workspace
/// and key are never stored; the fetch gets the job's caller and its target unchanged.
pub async fn submit_stores_the_job_queued_before_returning_and_keeps_the_caller_in_memory(
    store: Arc<dyn BatchStore>,
) -> TestResult {
    let r = rig(store, Probe::new(), config()).await?;
    r.probe.hold(&url("a", 0));
    let a = r.submit("alice", "a", 1).await?;
    r.started(&url("a", 0), 1).await?;
    let options = Options {
        mode: "text".into(),
        grep: "rust".into(),
        context: Some(false),
        recover: true,
        ..Options::default()
    };
    let b_targets = vec![
        Target {
            url: url("b", 0),
            options: options.clone(),
        },
        target(&url("b", 1)),
    ];
    r.clock.set(T0 + 7);
    let b = r.create("bob", b_targets.clone()).await?;

    assert_eq!(b.len(), 32, "a job id is 16 bytes in hex");
    assert!(
        b.chars()
            .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c)),
        "id {b}"
    );
    assert_ne!(a, b);
    let row = r.row(&b).await?;
    assert_eq!(
        row.status,
        JobStatus::Queued,
        "stored queued before the submit returned"
    );
    assert_eq!((row.created_at, row.lease), (T0 + 7, T0 + 7));
    assert_eq!(
        (row.caller.as_str(), row.class),
        ("bob", CallerClass::Fleet)
    );
    assert_eq!(row.idem_key, idem_key("bob", &b_targets));
    assert_eq!((row.targets_total, row.targets_done), (2, 0));
    let rows = r.store.targets(&b).await?;
    assert_eq!(rows.len(), 2);
    for (t, want) in rows.iter().zip(&b_targets) {
        assert_eq!(t.status, TargetState::Pending);
        assert_eq!(t.url, want.url);
        assert_eq!(
            t.options,
            want.options.to_json(),
            "options are stored as their JSON"
        );
    }
    let everything = format!("{row:?} {rows:?}");
    let bob = caller("bob");
    assert!(
        !everything.contains(&bob.workspace),
        "the workspace is never stored"
    );
    assert!(
        !everything.contains(&bob.key_sha256),
        "the key is never stored"
    );

    r.probe.release_all();
    r.terminal(&a).await?;
    let v = r.terminal(&b).await?;
    assert_eq!(v.job.status, JobStatus::Done);
    let calls = r.probe.calls();
    let b0 = calls.iter().find(|c| c.url == url("b", 0));
    assert_eq!(
        b0.map(|c| &*c.caller),
        Some(&bob),
        "the fetch gets the job's caller"
    );
    assert_eq!(
        b0.map(|c| &c.target),
        b_targets.first(),
        "and its target, options and all"
    );
    r.close().await
}

/// The caller is kept in memory only while the runner holds its job: once the job has ended
/// the runner lets it go (only the fetch's own copy, kept by the probe, is left), so a
/// long-running runner does not hold every caller it ever served.
pub async fn a_jobs_caller_is_let_go_once_the_job_has_ended(
    store: Arc<dyn BatchStore>,
) -> TestResult {
    let r = rig(store, Probe::new(), config()).await?;
    let a = r.submit("alice", "a", 1).await?;
    assert_eq!(r.terminal(&a).await?.job.status, JobStatus::Done);
    let Some(held) = r.probe.calls().first().map(|c| c.caller.clone()) else {
        return Err(failure("a0 was fetched".into()));
    };
    // The probe's record and `held`: no other.
    until("the runner has let alice's caller go", || {
        Arc::strong_count(&held) == 2
    })
    .await?;
    r.close().await
}

/// An empty submit is refused with `NoTargets` before anything else: a caller at its cap, a
/// full runner, even a closed one.
pub async fn submit_refuses_no_targets_before_anything_else(
    store: Arc<dyn BatchStore>,
) -> TestResult {
    let cfg = Config {
        jobs_per_caller: 1,
        jobs_total: 1,
        ..config()
    };
    let r = rig(store, Probe::new(), cfg).await?;
    r.probe.hold(&url("a", 0));
    r.submit("alice", "a", 1).await?;
    for who in ["alice", "bob"] {
        let got = r.submit_targets(who, Vec::new()).await;
        assert_eq!(got, Err(SubmitError::NoTargets), "an empty submit of {who}");
    }
    assert_eq!(r.hooks.count(JobOutcome::Created), 1);
    r.probe.release_all();
    r.close().await?;
    let got = r.submit_targets("alice", Vec::new()).await;
    assert_eq!(
        got,
        Err(SubmitError::NoTargets),
        "an empty submit after close"
    );
    Ok(())
}

/// A job may have `targets_per_job` targets; one more is refused with `TooManyTargets`
/// carrying the cap and the count, and nothing is stored.
pub async fn submit_refuses_more_targets_than_targets_per_job(
    store: Arc<dyn BatchStore>,
) -> TestResult {
    let cfg = Config {
        targets_per_job: 3,
        ..config()
    };
    let r = rig(store, Probe::new(), cfg).await?;
    let got = r.submit_targets("alice", targets("a", 4)).await;
    assert_eq!(got, Err(SubmitError::TooManyTargets { max: 3, got: 4 }));
    if let Err(e) = got {
        assert_eq!(e.to_string(), "too many targets (4 > 3)");
    }
    assert_eq!(
        r.store.live_jobs(None).await?,
        0,
        "a refused job is not stored"
    );
    assert_eq!(r.store.total_bytes().await?, 0);
    let id = r.submit("alice", "a", 3).await?;
    assert_eq!(r.terminal(&id).await?.job.status, JobStatus::Done);
    assert_eq!(r.hooks.count(JobOutcome::Created), 1);
    r.close().await
}

/// A caller with `jobs_per_caller` live jobs is refused with `CallerBusy`; other callers are
/// not, and the caller is admitted again once one of its jobs ends.
pub async fn submit_refuses_a_caller_at_jobs_per_caller(store: Arc<dyn BatchStore>) -> TestResult {
    let cfg = Config {
        jobs_per_caller: 2,
        ..config()
    };
    let r = rig(store, Probe::new(), cfg).await?;
    r.probe.hold(&url("a", 0));
    let a = r.submit("alice", "a", 1).await?;
    r.submit("alice", "b", 1).await?;
    let got = r.submit_targets("alice", targets("c", 1)).await;
    assert_eq!(got, Err(SubmitError::CallerBusy));
    if let Err(e) = got {
        assert_eq!(e.to_string(), "caller busy");
    }
    r.submit("bob", "d", 1).await?;
    r.probe.release_all();
    r.terminal(&a).await?;
    r.submit("alice", "c", 1).await?;
    r.settled().await?;
    r.close().await
}

/// With `jobs_total` live jobs, every caller is refused with `Busy` until one ends.
pub async fn submit_refuses_everyone_at_jobs_total(store: Arc<dyn BatchStore>) -> TestResult {
    let cfg = Config {
        jobs_per_caller: 4,
        jobs_total: 2,
        ..config()
    };
    let r = rig(store, Probe::new(), cfg).await?;
    r.probe.hold(&url("a", 0));
    let a = r.submit("alice", "a", 1).await?;
    r.submit("bob", "b", 1).await?;
    for (who, job) in [("carol", "c"), ("alice", "d")] {
        let got = r.submit_targets(who, targets(job, 1)).await;
        assert_eq!(
            got,
            Err(SubmitError::Busy),
            "a submit of {who} at the total cap"
        );
        if let Err(e) = got {
            assert_eq!(e.to_string(), "jobs busy");
        }
    }
    r.probe.release_all();
    r.terminal(&a).await?;
    r.submit("carol", "c", 1).await?;
    r.settled().await?;
    r.close().await
}

/// The caps are checked in order: too many targets, then the caller's cap, then the total.
pub async fn caps_are_checked_targets_then_caller_then_total(
    store: Arc<dyn BatchStore>,
) -> TestResult {
    let cfg = Config {
        targets_per_job: 2,
        jobs_per_caller: 1,
        jobs_total: 2,
        ..config()
    };
    let r = rig(store, Probe::new(), cfg).await?;
    r.probe.hold(&url("a", 0));
    r.submit("alice", "a", 1).await?;
    r.submit("bob", "b", 1).await?;
    // Both the caller's cap and the total are full now.
    let got = r.submit_targets("alice", targets("c", 3)).await;
    assert_eq!(got, Err(SubmitError::TooManyTargets { max: 2, got: 3 }));
    let got = r.submit_targets("alice", targets("c", 1)).await;
    assert_eq!(
        got,
        Err(SubmitError::CallerBusy),
        "the caller's cap before the total"
    );
    let got = r.submit_targets("carol", targets("c", 1)).await;
    assert_eq!(got, Err(SubmitError::Busy));
    assert_eq!(r.hooks.count(JobOutcome::Created), 2);
    r.probe.release_all();
    r.settled().await?;
    r.close().await
}

/// A resubmit of a reusable job returns it (`reused`) whatever the caps: the caller at its
/// cap, the runner full, and even more targets than a later runner's `targets_per_job`.
pub async fn reuse_comes_before_every_cap(store: Arc<dyn BatchStore>) -> TestResult {
    let cfg = Config {
        jobs_per_caller: 1,
        jobs_total: 2,
        ..config()
    };
    let r = rig(store.clone(), Probe::new(), cfg).await?;
    let done = r.submit("carol", "d", 3).await?;
    r.terminal(&done).await?;
    r.probe.hold(&url("a", 0));
    let a = r.submit("alice", "a", 1).await?;
    let b = r.submit("bob", "b", 1).await?;
    assert_eq!(
        r.submit_targets("carol", targets("x", 1)).await,
        Err(SubmitError::Busy)
    );
    for (who, job, id) in [("alice", "a", &a), ("bob", "b", &b)] {
        let got = r.submit_targets(who, targets(job, 1)).await?;
        assert_eq!(got, reused(id.clone()), "resubmit of {who}");
    }
    assert_eq!(r.hooks.count(JobOutcome::Reused), 2);
    r.probe.release_all();
    r.settled().await?;
    r.close().await?;

    // A runner with a smaller targets_per_job still reuses the done 3-target job.
    let cfg = Config {
        targets_per_job: 2,
        ..config()
    };
    let r2 = rig(store, Probe::new(), cfg).await?;
    let got = r2.submit_targets("carol", targets("d", 3)).await?;
    assert_eq!(got, reused(done));
    assert_eq!(r2.hooks.count(JobOutcome::Reused), 1);
    r2.close().await
}

/// A resubmit of the same caller and targets returns the job, `reused`, while it is queued,
/// running, done or partial; no job is created and `hooks.job(Reused)` is called each time.
pub async fn submit_reuses_queued_running_done_and_partial_jobs(
    store: Arc<dyn BatchStore>,
) -> TestResult {
    let probe = Probe::scripted(|url, _| {
        if url.ends_with("/fail") {
            Act::Fail(FetchError::Other("no".into()))
        } else {
            Act::Ok(content_of(url))
        }
    });
    let r = rig(store, probe, config()).await?;
    let d_targets = targets("d", 1);
    let p_targets = vec![target(&url("p", 0)), target("https://p.example/fail")];
    let d = r.create("alice", d_targets.clone()).await?;
    let p = r.create("alice", p_targets.clone()).await?;
    r.terminal(&d).await?;
    r.terminal(&p).await?;
    r.probe.hold(&url("r", 0));
    let rn = r.submit("alice", "r", 1).await?;
    r.started(&url("r", 0), 1).await?;
    let q = r.submit("alice", "q", 1).await?;

    let cases = [
        (d_targets, &d, JobStatus::Done),
        (p_targets, &p, JobStatus::Partial),
        (targets("r", 1), &rn, JobStatus::Running),
        (targets("q", 1), &q, JobStatus::Queued),
    ];
    for (ts, id, status) in cases {
        assert_eq!(r.view(id).await?.job.status, status);
        let got = r.submit_targets("alice", ts).await?;
        assert_eq!(got, reused(id.clone()), "a {status} job is reused");
    }
    assert_eq!(r.hooks.count(JobOutcome::Reused), 4);
    assert_eq!(r.hooks.count(JobOutcome::Created), 4);
    r.probe.release_all();
    r.settled().await?;
    r.close().await
}

/// A failed or cancelled job is never reused: the same submit creates a new job.
pub async fn submit_never_reuses_failed_or_cancelled_jobs(
    store: Arc<dyn BatchStore>,
) -> TestResult {
    let probe = Probe::scripted(|url, _| {
        if url.starts_with("https://f.") {
            Act::Fail(FetchError::Other("no".into()))
        } else {
            Act::Ok(content_of(url))
        }
    });
    let r = rig(store, probe, config()).await?;
    let f = r.submit("alice", "f", 2).await?;
    assert_eq!(r.terminal(&f).await?.job.status, JobStatus::Failed);
    let f2 = r.submit_targets("alice", targets("f", 2)).await?;
    assert!(!f2.reused && f2.id != f, "a failed job is not reused");

    r.probe.hold(&url("c", 0));
    let c = r.submit("alice", "c", 1).await?;
    assert!(r.runner.cancel(&c).await);
    let c2 = r.submit_targets("alice", targets("c", 1)).await?;
    assert!(!c2.reused && c2.id != c, "a cancelled job is not reused");
    assert_eq!(r.hooks.count(JobOutcome::Reused), 0);
    r.probe.release_all();
    r.terminal(&c2.id).await?;
    r.settled().await?;
    r.close().await
}

/// Idempotency is per caller: another caller submitting the same targets gets a job of its
/// own.
pub async fn another_caller_with_the_same_targets_gets_its_own_job(
    store: Arc<dyn BatchStore>,
) -> TestResult {
    let r = rig(store, Probe::new(), config()).await?;
    let a = r.submit("alice", "a", 2).await?;
    r.terminal(&a).await?;
    let b = r.submit_targets("bob", targets("a", 2)).await?;
    assert!(!b.reused && b.id != a, "bob gets his own job");
    let v = r.terminal(&b.id).await?;
    assert_eq!(
        (v.job.caller.as_str(), v.job.status),
        ("bob", JobStatus::Done)
    );
    assert_eq!(r.submit_targets("alice", targets("a", 2)).await?, reused(a));
    r.close().await
}

/// A job is reused while `now - lease < ttl` (by the injected clock) and not once the lease
/// is `ttl` old: the same submit then creates a new job.
pub async fn reuse_lasts_while_the_lease_is_younger_than_ttl(
    store: Arc<dyn BatchStore>,
) -> TestResult {
    let cfg = Config {
        ttl: Duration::from_secs(100),
        ..config()
    };
    let r = rig(store, Probe::new(), cfg).await?;
    let a = r.submit("alice", "a", 1).await?;
    let b = r.submit("alice", "b", 1).await?;
    r.terminal(&a).await?;
    r.terminal(&b).await?;
    assert_eq!((r.row(&a).await?.lease, r.row(&b).await?.lease), (T0, T0));

    r.clock.set(T0 + 99);
    let got = r.submit_targets("alice", targets("a", 1)).await?;
    assert_eq!(got, reused(a), "reused at ttl - 1 s");
    r.clock.set(T0 + 100);
    let got = r.submit_targets("alice", targets("b", 1)).await?;
    assert!(
        !got.reused && got.id != b,
        "not reused once the lease is ttl old"
    );
    r.terminal(&got.id).await?;
    r.close().await
}

/// `submit_fresh` skips the reuse: a new job of the same caller and targets, fetched again,
/// while the reusable one stays as it was; a later `submit` reuses the newest reusable job, the
/// fresh one; a job whose lease is later than now (a clock gone back) is not reused either; and
/// the caps apply to a fresh submit as to any new job.
pub async fn submit_fresh_makes_a_new_job_that_later_submits_reuse(
    store: Arc<dyn BatchStore>,
) -> TestResult {
    let cfg = Config {
        jobs_per_caller: 1,
        ..config()
    };
    let r = rig(store, Probe::new(), cfg).await?;
    let fresh = |ts: Vec<Target>| {
        r.runner
            .submit_fresh(caller("alice"), CallerClass::Fleet, ts)
    };
    let old = r.submit("alice", "a", 2).await?;
    r.terminal(&old).await?;
    r.clock.set(T0 + 1);
    let new = fresh(targets("a", 2)).await?;
    assert!(!new.reused && new.id != old, "{new:?}");
    r.terminal(&new.id).await?;
    assert_eq!(r.probe.attempts(&url("a", 0)), 2, "fetched again");
    assert_eq!(r.probe.attempts(&url("a", 1)), 2, "fetched again");
    assert_eq!(r.hooks.count(JobOutcome::Created), 2);
    assert_eq!(r.hooks.count(JobOutcome::Reused), 0);
    let old_row = r.row(&old).await?;
    assert_eq!((old_row.status, old_row.lease), (JobStatus::Done, T0));

    r.clock.set(T0 + 2);
    let got = r.submit_targets("alice", targets("a", 2)).await?;
    assert_eq!(got, reused(new.id.clone()), "the newest job is reused");

    // Nor is a job reused whose lease is later than now, the clock having gone back.
    r.clock.set(T0);
    let back = fresh(targets("a", 2)).await?;
    assert!(!back.reused && back.id != new.id, "{back:?}");
    r.terminal(&back.id).await?;

    // The caps apply: with one live job of alice's, a fresh submit is refused.
    r.probe.hold(&url("b", 0));
    let b = r.submit("alice", "b", 1).await?;
    r.started(&url("b", 0), 1).await?;
    assert!(matches!(
        fresh(targets("a", 2)).await,
        Err(SubmitError::CallerBusy)
    ));
    r.probe.release_all();
    r.terminal(&b).await?;
    r.close().await
}

/// A TTL of a fraction of a second is kept to the second as the times are: under a TTL of
/// 1.5 s a job whose lease is 1 s old is younger than the TTL, so reused, and one 2 s old is
/// not; under a TTL of 0.5 s a done job whose lease is 1 s old is older than `now − ttl`, so
/// the next submit's sweep deletes it, and one of the same second is kept.
pub async fn a_fractional_ttl_is_kept_to_the_second(store: Arc<dyn BatchStore>) -> TestResult {
    let cfg = Config {
        ttl: Duration::from_millis(1500),
        ..config()
    };
    let r = rig(store.clone(), Probe::new(), cfg).await?;
    let a = r.submit("alice", "a", 1).await?;
    let b = r.submit("alice", "b", 1).await?;
    r.terminal(&a).await?;
    r.terminal(&b).await?;
    r.clock.set(T0 + 1);
    let got = r.submit_targets("alice", targets("a", 1)).await?;
    assert_eq!(got, reused(a), "1 s old under a TTL of 1.5 s");
    r.clock.set(T0 + 2);
    let got = r.submit_targets("alice", targets("b", 1)).await?;
    assert!(!got.reused && got.id != b, "2 s old under a TTL of 1.5 s");
    r.terminal(&got.id).await?;
    r.close().await?;

    let cfg = Config {
        ttl: Duration::from_millis(500),
        ..config()
    };
    let r = rig(store, Probe::new(), cfg).await?;
    let old = r.submit("carol", "c", 1).await?;
    r.terminal(&old).await?;
    let kept = r.submit("dave", "d", 1).await?;
    assert!(
        r.store.job(&old).await?.is_some(),
        "0 s old under a TTL of 0.5 s is kept"
    );
    r.terminal(&kept).await?;
    r.clock.set(T0 + 1);
    let e = r.submit("erin", "e", 1).await?;
    assert_eq!(
        r.store.job(&old).await?.map(|j| j.id),
        None,
        "1 s old under a TTL of 0.5 s is swept"
    );
    r.terminal(&e).await?;
    r.close().await
}

/// `status` writes nothing: reading a job, however often, leaves its lease as it was, so its
/// TTL still runs out on time.
pub async fn status_is_a_pure_read(store: Arc<dyn BatchStore>) -> TestResult {
    let cfg = Config {
        ttl: Duration::from_secs(100),
        ..config()
    };
    let r = rig(store, Probe::new(), cfg).await?;
    let a = r.submit("alice", "a", 2).await?;
    r.terminal(&a).await?;
    let before = r.row(&a).await?;
    let targets_before = r.store.targets(&a).await?;
    for now in [T0 + 10, T0 + 50, T0 + 99] {
        r.clock.set(now);
        r.view(&a).await?;
        assert!(
            r.runner
                .status("ffffffffffffffffffffffffffffffff")
                .await?
                .is_none()
        );
    }
    assert_eq!(r.row(&a).await?, before, "status changed the job row");
    assert_eq!(
        r.store.targets(&a).await?,
        targets_before,
        "status changed a target row"
    );
    r.clock.set(T0 + 100);
    let got = r.submit_targets("alice", targets("a", 2)).await?;
    assert!(!got.reused, "reads did not extend the lease");
    r.terminal(&got.id).await?;
    r.close().await
}

/// `touch` sets the lease to now: a touched job stays reusable past its first TTL.
pub async fn touch_extends_the_lease(store: Arc<dyn BatchStore>) -> TestResult {
    let cfg = Config {
        ttl: Duration::from_secs(100),
        ..config()
    };
    let r = rig(store, Probe::new(), cfg).await?;
    let a = r.submit("alice", "a", 1).await?;
    r.terminal(&a).await?;
    r.clock.set(T0 + 90);
    r.runner.touch(&a).await;
    r.runner.touch("ffffffffffffffffffffffffffffffff").await;
    assert_eq!(r.row(&a).await?.lease, T0 + 90);
    r.clock.set(T0 + 150);
    let got = r.submit_targets("alice", targets("a", 1)).await?;
    assert_eq!(got, reused(a.clone()), "reusable past its first ttl");
    r.clock.set(T0 + 250);
    let got = r.submit_targets("alice", targets("a", 1)).await?;
    assert!(
        !got.reused && got.id != a,
        "and not past the touched lease's ttl"
    );
    r.terminal(&got.id).await?;
    r.close().await
}

/// 32 tasks submitting one caller's same targets at once make exactly one job: one created,
/// 31 reused, all with its id.
pub async fn concurrent_submits_of_one_key_make_one_job(store: Arc<dyn BatchStore>) -> TestResult {
    const N: usize = 32;
    let r = rig(store, Probe::new(), config()).await?;
    r.probe.hold(&url("a", 0));
    let start = Arc::new(Barrier::new(N));
    let tasks: Vec<_> = (0..N)
        .map(|_| {
            let (runner, start) = (r.runner.clone(), start.clone());
            tokio::spawn(async move {
                start.wait().await;
                runner
                    .submit(caller("alice"), CallerClass::Fleet, targets("a", 2))
                    .await
            })
        })
        .collect();
    let mut got = Vec::new();
    for t in tasks {
        let answer = within("a submit", t).await??;
        got.push(answer?);
    }
    let created: Vec<&Submitted> = got.iter().filter(|s| !s.reused).collect();
    let [one] = created.as_slice() else {
        panic!("exactly one submit creates the job, got {}", created.len());
    };
    assert!(
        got.iter().all(|s| s.id == one.id),
        "every submit gets the one job's id"
    );
    assert_eq!(r.hooks.count(JobOutcome::Created), 1);
    assert_eq!(r.hooks.count(JobOutcome::Reused), N - 1);
    assert_eq!(r.store.live_jobs(None).await?, 1);
    r.probe.release_all();
    r.terminal(&one.id).await?;
    r.close().await
}

/// 24 callers submitting at once with `jobs_total` 2 (and room per caller) admit exactly 2
/// jobs; the other 22 are told `Busy`.
pub async fn concurrent_submits_never_exceed_jobs_total(store: Arc<dyn BatchStore>) -> TestResult {
    const N: usize = 24;
    let cfg = Config {
        jobs_per_caller: 1,
        jobs_total: 2,
        ..config()
    };
    let r = rig(store, Probe::new(), cfg).await?;
    for n in 0..N {
        r.probe.hold(&url(&format!("j{n}"), 0));
    }
    let start = Arc::new(Barrier::new(N));
    let tasks: Vec<_> = (0..N)
        .map(|n| {
            let (runner, start) = (r.runner.clone(), start.clone());
            tokio::spawn(async move {
                start.wait().await;
                let who = caller(&format!("caller{n}"));
                let ts = targets(&format!("j{n}"), 1);
                runner.submit(who, CallerClass::Fleet, ts).await
            })
        })
        .collect();
    let mut got = Vec::new();
    for t in tasks {
        got.push(within("a submit", t).await??);
    }
    let created = got
        .iter()
        .filter(|s| matches!(s, Ok(s) if !s.reused))
        .count();
    let busy = got.iter().filter(|s| **s == Err(SubmitError::Busy)).count();
    assert_eq!((created, busy), (2, N - 2), "answers: {got:?}");
    assert_eq!(r.store.live_jobs(None).await?, 2);
    r.probe.release_all();
    r.settled().await?;
    r.close().await
}

// ---- §4 workers ---------------------------------------------------------------------------

/// With one worker and two live jobs, their targets alternate `a1 b1 a2 b2 a3 b3` (the first
/// target is held until the second job is submitted).
pub async fn one_worker_alternates_the_targets_of_live_jobs(
    store: Arc<dyn BatchStore>,
) -> TestResult {
    let r = rig(store, Probe::new(), config()).await?;
    r.probe.hold(&url("a", 0));
    let a = r.submit("alice", "a", 3).await?;
    r.started(&url("a", 0), 1).await?;
    let b = r.submit("bob", "b", 3).await?;
    r.probe.release(&url("a", 0));
    r.terminal(&a).await?;
    r.terminal(&b).await?;
    let want: Vec<String> = [("a", 0), ("b", 0), ("a", 1), ("b", 1), ("a", 2), ("b", 2)]
        .iter()
        .map(|(j, i)| url(j, *i))
        .collect();
    assert_eq!(r.probe.started(), want);
    r.close().await
}

/// A job no worker has reached stays `queued` with every target `pending`; it is `running`
/// from its first target on, and its in-flight target reads `running`.
pub async fn a_job_is_queued_until_reached_and_running_from_its_first_target(
    store: Arc<dyn BatchStore>,
) -> TestResult {
    let r = rig(store, Probe::new(), config()).await?;
    r.probe.hold(&url("a", 0));
    r.probe.hold(&url("b", 0));
    let a = r.submit("alice", "a", 2).await?;
    r.started(&url("a", 0), 1).await?;
    let b = r.submit("bob", "b", 2).await?;
    let va = r.view(&a).await?;
    assert_eq!(va.job.status, JobStatus::Running);
    assert_eq!(states(&va), [TargetState::Running, TargetState::Pending]);
    let vb = r.view(&b).await?;
    assert_eq!(vb.job.status, JobStatus::Queued, "not reached yet");
    assert_eq!(states(&vb), [TargetState::Pending, TargetState::Pending]);

    r.probe.release(&url("a", 0));
    r.started(&url("b", 0), 1).await?;
    let vb = r.view(&b).await?;
    assert_eq!(
        vb.job.status,
        JobStatus::Running,
        "running from its first target"
    );
    assert_eq!(states(&vb), [TargetState::Running, TargetState::Pending]);
    let va = r.view(&a).await?;
    assert_eq!(states(&va), [TargetState::Done, TargetState::Pending]);
    assert_eq!(
        (va.job.status, va.job.targets_done),
        (JobStatus::Running, 1)
    );
    r.probe.release_all();
    r.terminal(&a).await?;
    r.terminal(&b).await?;
    r.close().await
}

/// With two workers, two jobs run side by side (both first targets in flight at once) while
/// each stays serial: a job's target `i + 1` starts only once target `i` is stored, and never
/// are two targets of one job in flight.
pub async fn each_job_is_serial_while_two_workers_run_two_jobs_at_once(
    store: Arc<dyn BatchStore>,
) -> TestResult {
    let cfg = Config {
        workers: 2,
        ..config()
    };
    let r = rig(store, Probe::slow(Duration::from_millis(3)), cfg).await?;
    for job in ["a", "b"] {
        r.probe.hold(&url(job, 0));
        r.probe.hold(&url(job, 1));
    }
    let a = r.submit("alice", "a", 4).await?;
    let b = r.submit("bob", "b", 4).await?;
    r.started(&url("a", 0), 1).await?;
    r.started(&url("b", 0), 1).await?;
    assert_eq!(r.probe.inflight(), 2, "both jobs progress at once");
    for job in ["a", "b"] {
        assert_eq!(r.probe.attempts(&url(job, 1)), 0, "{job}1 waits for {job}0");
        r.probe.release(&url(job, 0));
    }
    for (job, id) in [("a", &a), ("b", &b)] {
        r.started(&url(job, 1), 1).await?;
        let v = r.view(id).await?;
        assert_eq!(
            states(&v).first(),
            Some(&TargetState::Done),
            "{job}0 is stored before {job}1 starts"
        );
    }
    r.probe.release_all();
    r.terminal(&a).await?;
    r.terminal(&b).await?;
    assert_eq!(
        r.probe.max_per_job(),
        1,
        "never two targets of one job in flight"
    );
    for job in ["a", "b"] {
        let order: Vec<String> = r
            .probe
            .started()
            .into_iter()
            .filter(|u| job_of(u) == job_of(&url(job, 0)))
            .collect();
        assert_eq!(
            order,
            targets(job, 4)
                .into_iter()
                .map(|t| t.url)
                .collect::<Vec<_>>()
        );
    }
    r.close().await
}

/// A job's target `i + 1` does not start while target `i`'s outcome is being stored, even
/// with a worker idle to take it (SPEC §4: "target i+1 never starts before i is stored"). Two
/// workers, one job of three targets: a0's `finish_target` is held in the store, and for
/// 200 ms nothing else is fetched (a0 still `running` in the store); once the write is let go,
/// a1 starts, and the job ends `done` in order.
pub async fn a_jobs_next_target_waits_for_the_previous_ones_write_with_a_worker_free(
    store: Arc<dyn BatchStore>,
) -> TestResult {
    let shared = Arc::new(Shared::new(store));
    let cfg = Config {
        workers: 2,
        ..config()
    };
    let r = rig(shared.clone(), Probe::new(), cfg).await?;
    shared.hold_finish_target();
    let a = r.submit("alice", "a", 3).await?;
    until("a0's write is held", || shared.finishes_held() >= 1).await?;
    // A bounded wait, only to show that a1 does NOT start while a0's write is held (the other
    // worker is idle): a correct runner cannot fail it.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        r.probe.started(),
        [url("a", 0)],
        "a1 started while a0's outcome was still being stored"
    );
    assert_eq!(shared.finishes_held(), 1, "only a0's write is held");
    assert_eq!(
        states(&r.view(&a).await?),
        [
            TargetState::Running,
            TargetState::Pending,
            TargetState::Pending
        ],
        "a0's write is held before it reaches the store"
    );
    shared.release_finish_target();
    r.started(&url("a", 1), 1).await?;
    let v = r.terminal(&a).await?;
    assert_eq!(v.job.status, JobStatus::Done);
    assert_eq!(r.probe.started(), [url("a", 0), url("a", 1), url("a", 2)]);
    assert_eq!(
        r.probe.max_per_job(),
        1,
        "never two targets of one job in flight"
    );
    r.close().await
}

/// `workers: 5` runs 2 workers: with 4 jobs held, exactly 2 fetches start and no more are in
/// flight at once, ever.
pub async fn workers_clamp_to_two(store: Arc<dyn BatchStore>) -> TestResult {
    let cfg = Config {
        workers: 5,
        ..config()
    };
    let r = rig(store, Probe::new(), cfg).await?;
    let mut ids = Vec::new();
    for n in 0..4 {
        let job = format!("j{n}");
        r.probe.hold(&url(&job, 0));
        ids.push(r.submit(&format!("caller{n}"), &job, 2).await?);
    }
    until("two fetches are in flight", || r.probe.inflight() == 2).await?;
    // Nothing else can start while both workers are held; give a wrong third worker the time
    // to show itself.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        r.probe.started().len(),
        2,
        "a third fetch started: {:?}",
        r.probe.started()
    );
    r.probe.release_all();
    for id in &ids {
        r.terminal(id).await?;
    }
    r.settled().await?;
    assert_eq!(
        r.probe.max_inflight(),
        2,
        "at most (and at times exactly) 2 in flight"
    );
    assert_eq!(r.hooks.inflight().iter().max(), Some(&2));
    r.close().await
}

/// A zero `Config` field means its default: a runner started with every number and duration
/// zero takes jobs of up to 32 targets, 1 live job per caller and 8 in all, runs 1 worker,
/// evicts nothing under a 64 MiB budget, reuses a job for 24 h and tries a busy target again
/// no sooner than 2 s later.
pub async fn a_runner_whose_config_fields_are_zero_runs_on_the_defaults(
    store: Arc<dyn BatchStore>,
) -> TestResult {
    let probe = Probe::scripted(|url, attempt| {
        if url.starts_with("https://busy.") && attempt == 0 {
            Act::Fail(FetchError::RetryLater("busy".into()))
        } else {
            Act::Ok(content_of(url))
        }
    });
    let cfg = Config {
        ttl: Duration::ZERO,
        targets_per_job: 0,
        jobs_per_caller: 0,
        jobs_total: 0,
        workers: 0,
        max_bytes: 0,
        retry_wait: Duration::ZERO,
        retry_for: Duration::ZERO,
        ..Config::default()
    };
    let r = rig(store, probe, cfg).await?;

    // targets_per_job: 32.
    let got = r.submit_targets("alice", targets("a", 33)).await;
    assert_eq!(got, Err(SubmitError::TooManyTargets { max: 32, got: 33 }));
    r.probe.hold(&url("a", 0));
    let a = r.submit("alice", "a", 32).await?;
    // workers: 1 (there is a worker at all).
    r.started(&url("a", 0), 1).await?;
    // jobs_per_caller: 1.
    let got = r.submit_targets("alice", targets("a2", 1)).await;
    assert_eq!(got, Err(SubmitError::CallerBusy), "alice's second live job");
    // jobs_total: 8.
    let mut ids = vec![a.clone()];
    for n in 1..8 {
        // Held too, so that they stay live whatever runs them.
        let job = format!("j{n}");
        r.probe.hold(&url(&job, 0));
        ids.push(r.submit(&format!("caller{n}"), &job, 1).await?);
    }
    let got = r.submit_targets("caller8", targets("j8", 1)).await;
    assert_eq!(got, Err(SubmitError::Busy), "a ninth live job");
    // workers: 1, not more: with a0 held and seven jobs waiting, nothing else starts (a wrong
    // second worker gets the time to show itself).
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(r.probe.started(), [url("a", 0)], "one worker only");
    r.probe.release_all();
    for id in &ids {
        assert_eq!(r.terminal(id).await?.job.status, JobStatus::Done);
    }
    r.settled().await?;
    assert_eq!(r.probe.max_inflight(), 1, "one worker only");
    // max_bytes: 64 MiB, so every done job is still stored after the last stored target.
    for id in &ids {
        assert!(
            r.runner.status(id).await?.is_some(),
            "job {id} was evicted under a zero (so 64 MiB) budget"
        );
    }
    // ttl: 24 h, so a day less a second later alice's job is still reused.
    r.clock.set(T0 + 86_399);
    let got = r.submit_targets("alice", targets("a", 32)).await?;
    assert_eq!(got, reused(a.clone()), "reused within 24 h");
    // retry_wait: 2 s.
    let b = r.submit("dora", "busy", 1).await?;
    let b0 = url("busy", 0);
    r.terminal(&b).await?;
    let calls: Vec<Call> = r
        .probe
        .calls()
        .into_iter()
        .filter(|c| c.url == b0)
        .collect();
    let (first, retry) = match calls.as_slice() {
        [first, retry] => (first, retry),
        _ => return Err(failure(format!("busy/0 fetched {} times", calls.len()))),
    };
    let ended = first.ended.ok_or("the busy answer has no end")?;
    let waited = retry.started.saturating_duration_since(ended);
    assert!(
        waited >= Duration::from_secs(2),
        "tried again after {waited:?}, under the default retry_wait of 2 s"
    );
    r.close().await
}

/// A `RetryLater` answer puts the target back to `pending` (the job stays running); the worker
/// goes on with the other jobs, and the target is fetched again later and ends `done`.
pub async fn a_busy_target_goes_back_to_pending_and_is_retried(
    store: Arc<dyn BatchStore>,
) -> TestResult {
    let probe = Probe::scripted(|url, attempt| {
        if url.starts_with("https://a.") && attempt == 0 {
            Act::Fail(FetchError::RetryLater("busy".into()))
        } else {
            Act::Ok(content_of(url))
        }
    });
    let r = rig(store, probe, config()).await?;
    r.probe.hold(&url("a", 0));
    r.probe.hold(&url("b", 0));
    let a = r.submit("alice", "a", 1).await?;
    r.started(&url("a", 0), 1).await?;
    let b = r.submit("bob", "b", 1).await?;
    r.probe.release(&url("a", 0));
    // The only worker went on to b0 (held), so a0's busy answer is stored and waits.
    r.started(&url("b", 0), 1).await?;
    let va = r.view(&a).await?;
    assert_eq!(va.job.status, JobStatus::Running);
    assert_eq!(
        states(&va),
        [TargetState::Pending],
        "a busy target goes back to pending"
    );
    assert_eq!(va.job.targets_done, 0);
    r.probe.release_all();
    let va = r.terminal(&a).await?;
    assert_eq!(
        (va.job.status, states(&va)),
        (JobStatus::Done, vec![TargetState::Done])
    );
    assert_eq!(
        va.targets.first().and_then(|t| t.result.clone()),
        Some(content_of(&url("a", 0)))
    );
    assert_eq!(r.probe.attempts(&url("a", 0)), 2);
    r.terminal(&b).await?;
    r.close().await
}

/// A busy target is fetched again no sooner than `retry_wait` after its busy answer.
pub async fn a_busy_target_is_tried_again_no_sooner_than_retry_wait(
    store: Arc<dyn BatchStore>,
) -> TestResult {
    let wait = Duration::from_millis(150);
    let probe = Probe::busy_once();
    let cfg = Config {
        retry_wait: wait,
        ..config()
    };
    let r = rig(store, probe, cfg).await?;
    let a = r.submit("alice", "a", 1).await?;
    assert_eq!(r.terminal(&a).await?.job.status, JobStatus::Done);
    let calls = r.probe.calls();
    let (Some(first), Some(second)) = (calls.first(), calls.get(1)) else {
        panic!("two fetches of a0 expected, got {calls:?}");
    };
    let Some(busy_at) = first.ended else {
        panic!("the first fetch returned");
    };
    let gap = second.started.saturating_duration_since(busy_at);
    assert!(
        gap >= wait,
        "tried again {gap:?} after its busy answer, retry_wait {wait:?}"
    );
    r.close().await
}

/// While one job's target keeps coming back busy, another job is fetched and completes.
pub async fn a_busy_target_does_not_hold_up_other_jobs(store: Arc<dyn BatchStore>) -> TestResult {
    let probe = Probe::scripted(|url, _| {
        if url.starts_with("https://a.") {
            Act::Fail(FetchError::RetryLater("busy".into()))
        } else {
            Act::Ok(content_of(url))
        }
    });
    let cfg = Config {
        retry_wait: Duration::from_millis(10),
        retry_for: Duration::from_secs(600),
        ..config()
    };
    let r = rig(store, probe, cfg).await?;
    let a = r.submit("alice", "a", 1).await?;
    r.started(&url("a", 0), 2).await?;
    let b = r.submit("bob", "b", 3).await?;
    assert_eq!(r.terminal(&b).await?.job.status, JobStatus::Done);
    let va = r.view(&a).await?;
    assert_eq!(va.job.status, JobStatus::Running, "still retrying");
    assert_ne!(states(&va), [TargetState::Failed]);
    r.close().await?;
    let va = r.view(&a).await?;
    assert_eq!(
        (va.job.status, va.job.error.as_str()),
        (JobStatus::Failed, "runner closed")
    );
    Ok(())
}

/// A target that keeps coming back busy for longer than `retry_for` is stored `failed` with
/// the busy text of its last answer (no hint); the job goes on with its other targets. The
/// failure is stored no sooner than `retry_for` after the first busy answer: the test measures
/// from that answer's return (before the runner sees it) to when it sees the failure stored
/// (after the runner stored it), so a loaded machine only makes the span longer.
pub async fn a_target_busy_for_longer_than_retry_for_fails_with_the_busy_text(
    store: Arc<dyn BatchStore>,
) -> TestResult {
    // Each answer's text is its own, so the stored one shows which answer it came from.
    fn busy(attempt: usize) -> String {
        format!("upstream busy, queue full (429), answer {attempt}")
    }
    let probe = Probe::scripted(|url, attempt| {
        if url.ends_with("/0") {
            Act::Fail(FetchError::RetryLater(busy(attempt)))
        } else {
            Act::Ok(content_of(url))
        }
    });
    let retry_for = Duration::from_millis(300);
    let cfg = Config {
        retry_wait: Duration::from_millis(20),
        retry_for,
        ..config()
    };
    let r = rig(store, probe, cfg).await?;
    let a = r.submit("alice", "a", 2).await?;
    until_status(&r.runner, &a, "has a0 stored failed", |v| {
        states(v).first() == Some(&TargetState::Failed)
    })
    .await?;
    let failed_by = Instant::now();
    let calls = r.probe.calls();
    let Some(first_answer) = calls.first().and_then(|c| c.ended) else {
        panic!("a0's first fetch returned before it was stored failed: {calls:?}");
    };
    let span = failed_by.saturating_duration_since(first_answer);
    assert!(
        span >= retry_for,
        "a0 stored failed within {span:?} of its first busy answer, retry_for {retry_for:?}"
    );
    let v = r.terminal(&a).await?;
    assert_eq!(v.job.status, JobStatus::Partial);
    assert_eq!(states(&v), [TargetState::Failed, TargetState::Done]);
    let tries = r.probe.attempts(&url("a", 0));
    assert!(tries >= 2, "tried more than once before giving up");
    let t0 = v.targets.first();
    assert_eq!(
        t0.map(|t| (t.error.as_str(), t.hint.as_str())),
        Some((busy(tries - 1).as_str(), "")),
        "stored with the text of the last of {tries} busy answers"
    );
    assert_eq!(v.job.targets_done, 2);
    r.close().await
}

/// A result with meta round-trips exactly: `status` returns the very `TargetResult` the fetch
/// returned, and the store holds its JSON.
pub async fn a_result_with_meta_round_trips_through_status(
    store: Arc<dyn BatchStore>,
) -> TestResult {
    let json = r#"{"content":"naïve 日本語 🦀 \"quoted\"\nline\u0000nul","meta":{"status":200,"type":"text/html","ratio":0.25,"ok":true,"none":null,"tags":["a","b"],"nested":{"x":[1,{"y":"z"}]}}}"#;
    let result = TargetResult::from_json(json)?;
    assert_eq!(result.meta.len(), 7);
    let r2 = result.clone();
    let probe = Probe::scripted(move |_, _| Act::Ok(r2.clone()));
    let r = rig(store, probe, config()).await?;
    let a = r.submit("alice", "a", 1).await?;
    let v = r.terminal(&a).await?;
    let t = v.targets.first();
    assert_eq!(t.and_then(|t| t.result.clone()), Some(result.clone()));
    assert_eq!(
        t.map(|t| (t.error.as_str(), t.hint.as_str())),
        Some(("", ""))
    );
    let rows = r.store.targets(&a).await?;
    let stored = rows.first().and_then(|t| t.result.clone());
    assert_eq!(
        stored,
        Some(result.to_json()?),
        "the store holds the result's JSON"
    );
    r.settled().await?;
    assert_eq!(r.hooks.targets(), [(None, json_len(&result))]);
    r.close().await
}

/// A result with `meta` field `x` an array nested `depth` levels deep (`[[…]]`, the innermost
/// empty), read from its JSON.
fn nested_meta(depth: usize) -> Res<TargetResult> {
    let json = format!(
        r#"{{"content":"nested {depth}","meta":{{"x":{}{}}}}}"#,
        "[".repeat(depth),
        "]".repeat(depth)
    );
    Ok(TargetResult::from_json(&json)?)
}

/// A result whose `meta` nests deeper than [`MAX_META_DEPTH`] (122) levels, which could not be
/// read back inside a job's view, is stored `failed` with the error `internal error: meta field
/// "x" nests deeper than 122 levels`, no hint and no result (the hooks get that error and 0
/// bytes), and the job goes on; a result exactly 122 levels deep is stored `done` and reads
/// back whole.
pub async fn a_result_whose_meta_nests_too_deep_is_stored_as_an_internal_error(
    store: Arc<dyn BatchStore>,
) -> TestResult {
    let ok = nested_meta(MAX_META_DEPTH)?;
    let deep = nested_meta(MAX_META_DEPTH + 1)?;
    let (ok2, deep2) = (ok.clone(), deep.clone());
    let probe = Probe::scripted(move |url, _| match url.rsplit('/').next() {
        Some("0") => Act::Ok(ok2.clone()),
        Some("1") => Act::Ok(deep2.clone()),
        _ => Act::Ok(content_of(url)),
    });
    let r = rig(store, probe, config()).await?;
    let a = r.submit("alice", "a", 3).await?;
    let v = r.terminal(&a).await?;
    let want_error = "internal error: meta field \"x\" nests deeper than 122 levels";
    // The results by their content (the nested meta is long to print), then compared whole.
    let got: Vec<(TargetState, &str, &str, Option<&str>)> = v
        .targets
        .iter()
        .map(|t| {
            (
                t.status,
                t.error.as_str(),
                t.hint.as_str(),
                t.result.as_ref().map(|r| r.content.as_str()),
            )
        })
        .collect();
    let c2 = content_of(&url("a", 2));
    assert_eq!(
        got,
        [
            (TargetState::Done, "", "", Some("nested 122")),
            (TargetState::Failed, want_error, "", None),
            (TargetState::Done, "", "", Some(c2.content.as_str())),
        ],
        "122 levels are stored; 123 are an internal error, and the job goes on"
    );
    assert!(
        v.targets.first().and_then(|t| t.result.as_ref()) == Some(&ok),
        "the result 122 levels deep reads back whole"
    );
    assert_eq!(
        (v.job.status, v.job.error.as_str(), v.job.targets_done),
        (JobStatus::Partial, "", 3)
    );
    let rows = r.store.targets(&a).await?;
    assert_eq!(
        rows.get(1).map(|t| t.result.is_none()),
        Some(true),
        "nothing of the deep result is stored"
    );
    r.settled().await?;
    assert_eq!(
        r.hooks.targets(),
        [
            (None, json_len(&ok)),
            (Some(FetchError::Other(want_error.into())), 0),
            (None, json_len(&c2)),
        ]
    );
    r.close().await
}

/// A `Target` error is stored with its msg as the error and its hint; `Other` with its text
/// and no hint; neither has a result.
pub async fn a_target_error_keeps_msg_and_hint_and_other_keeps_its_text(
    store: Arc<dyn BatchStore>,
) -> TestResult {
    let probe = Probe::scripted(|url, _| match url.rsplit('/').next() {
        Some("0") => Act::Fail(FetchError::Target(TargetError {
            status: 503,
            msg: "HTTP 503 from upstream".into(),
            hint: "try again in a minute".into(),
        })),
        Some("1") => Act::Fail(FetchError::Other("connection reset by peer".into())),
        _ => Act::Ok(content_of(url)),
    });
    let r = rig(store, probe, config()).await?;
    let a = r.submit("alice", "a", 3).await?;
    let v = r.terminal(&a).await?;
    assert_eq!(
        (v.job.status, v.job.error.as_str()),
        (JobStatus::Partial, "")
    );
    let got: Vec<(TargetState, &str, &str, bool)> = v
        .targets
        .iter()
        .map(|t| {
            (
                t.status,
                t.error.as_str(),
                t.hint.as_str(),
                t.result.is_some(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            (
                TargetState::Failed,
                "HTTP 503 from upstream",
                "try again in a minute",
                false
            ),
            (TargetState::Failed, "connection reset by peer", "", false),
            (TargetState::Done, "", "", true),
        ]
    );
    r.close().await
}

/// When a job's last target is stored: all done → `done`, all failed → `failed`, a mix →
/// `partial`; every target counts in `targets_done` and the job has no error.
pub async fn the_terminal_status_is_done_failed_or_partial(
    store: Arc<dyn BatchStore>,
) -> TestResult {
    let probe = Probe::scripted(|url, _| {
        if url.starts_with("https://f.") || (url.ends_with("/1") && url.starts_with("https://p.")) {
            Act::Fail(FetchError::Other("no".into()))
        } else {
            Act::Ok(content_of(url))
        }
    });
    let cfg = Config {
        workers: 2,
        ..config()
    };
    let r = rig(store, probe, cfg).await?;
    let d = r.submit("alice", "d", 3).await?;
    let f = r.submit("alice", "f", 3).await?;
    let p = r.submit("alice", "p", 3).await?;
    for (id, want) in [
        (&d, JobStatus::Done),
        (&f, JobStatus::Failed),
        (&p, JobStatus::Partial),
    ] {
        let v = r.terminal(id).await?;
        assert_eq!((v.job.status, v.job.error.as_str()), (want, ""));
        assert_eq!((v.job.targets_total, v.job.targets_done), (3, 3));
    }
    r.close().await
}

/// Every hook is called with the right counts: `job` once per created, reused, done, partial,
/// failed and cancelled job; `target` once per stored target (err `None` with the result JSON's
/// length, or `Some` with 0); `job_seconds` once per terminal job; depth and in-flight at every
/// change, ending at 0; nothing more on close.
pub async fn every_hook_reports_with_the_right_counts(store: Arc<dyn BatchStore>) -> TestResult {
    let probe = Probe::scripted(|url, _| {
        if url.starts_with("https://f.") || (url.starts_with("https://p.") && url.ends_with("/1")) {
            Act::Fail(FetchError::Target(TargetError {
                status: 404,
                msg: "gone".into(),
                hint: "check the url".into(),
            }))
        } else {
            Act::Ok(content_of(url))
        }
    });
    let r = rig(store, probe, config()).await?;
    r.probe.hold(&url("d", 0));
    let d = r.submit("alice", "d", 2).await?;
    r.started(&url("d", 0), 1).await?;
    let c = r.submit("alice", "c", 1).await?;
    assert!(r.runner.cancel(&c).await);
    let p = r.submit("alice", "p", 2).await?;
    let f = r.submit("alice", "f", 1).await?;
    r.probe.release_all();
    for id in [&d, &p, &f] {
        r.terminal(id).await?;
    }
    let again = r.submit_targets("alice", targets("d", 2)).await?;
    assert_eq!(again, reused(d.clone()));
    let h = &r.hooks;
    until("every hook has been called", || {
        h.terminal() == 4 && h.targets().len() == 5 && h.job_seconds() == 4 && h.idle()
    })
    .await?;
    r.close().await?;

    let counts: Vec<usize> = JobOutcome::ALL.iter().map(|o| h.count(*o)).collect();
    // created, reused, done, partial, failed, cancelled
    assert_eq!(counts, [4, 1, 1, 1, 1, 1]);
    assert_eq!(h.job_seconds(), 4, "once per terminal job");
    let targets = h.targets();
    let mut ok_bytes: Vec<usize> = targets
        .iter()
        .filter(|(e, _)| e.is_none())
        .map(|(_, n)| *n)
        .collect();
    ok_bytes.sort_unstable();
    let mut want: Vec<usize> = [url("d", 0), url("d", 1), url("p", 0)]
        .iter()
        .map(|u| json_len(&content_of(u)))
        .collect();
    want.sort_unstable();
    assert_eq!(
        ok_bytes, want,
        "result_bytes is the length of the result JSON"
    );
    let failed: Vec<&(Option<FetchError>, usize)> =
        targets.iter().filter(|(e, _)| e.is_some()).collect();
    assert_eq!(failed.len(), 2);
    assert!(
        failed
            .iter()
            .all(|(e, n)| *n == 0 && matches!(e, Some(FetchError::Target(_))))
    );
    let inflight = h.inflight();
    assert_eq!(
        inflight,
        [1, 0].repeat(5),
        "one worker: each of 5 targets in flight, then not"
    );
    let depth = h.depth();
    assert_eq!(depth.last(), Some(&0));
    // d, c, c cancelled, p, f; then f, d and p end.
    assert_eq!(depth, [1, 2, 1, 2, 3, 2, 1, 0], "depth at every change");
    Ok(())
}

/// Hooks that report, in order, `Created` and `Done`; a `Created` report waits (up to 250 ms)
/// for a `Done` to come first, which it must not.
#[derive(Default)]
struct CreatedWaits {
    seen: Mutex<Vec<JobOutcome>>,
    done: Condvar,
}

impl Hooks for CreatedWaits {
    fn job(&self, outcome: JobOutcome) {
        let mut seen = lock(&self.seen);
        if outcome == JobOutcome::Created {
            seen = self
                .done
                .wait_timeout_while(seen, Duration::from_millis(250), |s| {
                    !s.contains(&JobOutcome::Done)
                })
                .map_or_else(|e| e.into_inner().0, |(s, _)| s);
        }
        seen.push(outcome);
        self.done.notify_all();
    }
}

/// `hooks.job(Created)` comes before the job's terminal outcome, even when a worker is free to
/// run the job at once and the hook takes its time: a metric of created minus finished jobs
/// never goes below zero.
pub async fn created_is_reported_before_the_jobs_terminal_outcome(
    store: Arc<dyn BatchStore>,
) -> TestResult {
    let hooks = Arc::new(CreatedWaits::default());
    let cfg = Config {
        hooks: hooks.clone(),
        ..config()
    };
    let runner = Runner::start(store, Probe::new(), cfg).await?;
    let a = runner
        .submit(caller("alice"), CallerClass::Fleet, targets("a", 1))
        .await?;
    until_status(&runner, &a.id, "is done", |v| {
        v.job.status == JobStatus::Done
    })
    .await?;
    until("the job's done is reported", || {
        lock(&hooks.seen).len() == 2
    })
    .await?;
    assert_eq!(
        *lock(&hooks.seen),
        [JobOutcome::Created, JobOutcome::Done],
        "created, then done"
    );
    within("close", runner.close()).await?;
    Ok(())
}

/// Hooks that panic in every method.
struct PanickingHooks;

impl Hooks for PanickingHooks {
    fn job(&self, _: JobOutcome) {
        panic!("hook job");
    }
    fn target(&self, _: Option<&FetchError>, _: Duration, _: usize) {
        panic!("hook target");
    }
    fn job_seconds(&self, _: Duration) {
        panic!("hook job_seconds");
    }
    fn depth(&self, _: usize) {
        panic!("hook depth");
    }
    fn inflight(&self, _: usize) {
        panic!("hook inflight");
    }
}

/// A hook that panics is the embedder's bug: it is caught, and neither stops a worker nor
/// loses an outcome — every job still ends, stored, and close returns.
pub async fn a_panicking_hook_stops_neither_the_workers_nor_the_outcomes(
    store: Arc<dyn BatchStore>,
) -> TestResult {
    let cfg = Config {
        hooks: Arc::new(PanickingHooks),
        workers: 2,
        ..config()
    };
    let runner = Runner::start(store, Probe::new(), cfg).await?;
    let mut ids = Vec::new();
    for (who, job) in [("alice", "a"), ("bob", "b")] {
        let s = runner
            .submit(caller(who), CallerClass::Fleet, targets(job, 3))
            .await?;
        ids.push(s.id);
    }
    for id in &ids {
        let v = until_status(&runner, id, "is terminal", |v| v.job.status.is_terminal()).await?;
        assert_eq!(v.job.status, JobStatus::Done, "job {id} ends done");
        assert_eq!(v.job.targets_done, 3);
    }
    within("close", runner.close()).await?;
    Ok(())
}

/// A hook that panics is logged at warn, without the panic's value, and the job still ends
/// done (on one thread, where the log capture sees the workers' lines).
pub async fn a_panicking_hook_is_logged_at_warn_without_its_value(
    store: Arc<dyn BatchStore>,
) -> TestResult {
    let logs = LogCapture::start();
    let cfg = Config {
        hooks: Arc::new(PanickingHooks),
        ..config()
    };
    let runner = Runner::start(store, Probe::new(), cfg).await?;
    let s = runner
        .submit(caller("alice"), CallerClass::Fleet, targets("a", 2))
        .await?;
    let v = until_status(&runner, &s.id, "is terminal", |v| {
        v.job.status.is_terminal()
    })
    .await?;
    assert_eq!(v.job.status, JobStatus::Done);
    within("close", runner.close()).await?;
    let text = logs.buf.text();
    assert!(
        !logs.buf.warns_with("a metrics hook panicked").is_empty(),
        "a panicking hook is logged at warn: {text}"
    );
    for value in [
        "hook job",
        "hook target",
        "hook job_seconds",
        "hook depth",
        "hook inflight",
    ] {
        assert!(
            !text.contains(value),
            "a hook's panic value is logged: {text}"
        );
    }
    Ok(())
}

/// `hooks.target` gets the fetch's duration (from its dispatch to its outcome) and
/// `hooks.job_seconds` the time from submit to the end (or to the cancel). With one worker, a0
/// held for 40 ms and b submitted meanwhile: a0's fetch time is at least 40 ms, b's submit-to-end
/// time exceeds its own fetch time by at least those 40 ms (it waited behind a0), and a job
/// cancelled 40 ms after its submit reports at least 40 ms. Every duration is at most the time
/// the test saw pass around it: no upper bound is a guess at the machine's speed.
pub async fn hooks_get_the_fetch_time_and_the_submit_to_end_time(
    store: Arc<dyn BatchStore>,
) -> TestResult {
    let hold = Duration::from_millis(40);
    let r = rig(store, Probe::new(), config()).await?;
    // Time passes before the first submit, so that a duration counted from the runner's start
    // (not from the submit or the dispatch) shows.
    tokio::time::sleep(hold).await;
    let began = Instant::now();
    r.probe.hold(&url("a", 0));
    let a = r.submit("alice", "a", 1).await?;
    r.started(&url("a", 0), 1).await?;
    let b = r.submit("bob", "b", 1).await?;
    tokio::time::sleep(hold).await;
    r.probe.release_all();
    r.terminal(&a).await?;
    r.terminal(&b).await?;
    r.settled().await?;
    let seen = began.elapsed();
    let fetch = r.hooks.target_elapsed();
    let job = r.hooks.job_elapsed();
    let ([fa, fb], [ja, jb]) = (fetch.as_slice(), job.as_slice()) else {
        panic!("one target and one job_seconds report per job: {fetch:?}, {job:?}");
    };
    assert!(
        *fa >= hold,
        "a0's fetch was held {hold:?}: target elapsed {fa:?}"
    );
    assert!(
        *jb >= *fb + hold,
        "b waited {hold:?} behind a0 before its fetch: job {jb:?}, fetch {fb:?}"
    );
    assert!(*ja >= *fa, "a's job time {ja:?} includes its fetch {fa:?}");
    for d in [fa, fb, ja, jb] {
        assert!(
            *d <= seen,
            "{d:?} reported, but only {seen:?} passed since the submits"
        );
    }

    let begun = Instant::now();
    r.probe.hold(&url("c", 0));
    let c = r.submit("carol", "c", 1).await?;
    r.started(&url("c", 0), 1).await?;
    tokio::time::sleep(hold).await;
    assert!(r.runner.cancel(&c).await);
    let seen = begun.elapsed();
    let job = r.hooks.job_elapsed();
    let [_, _, jc] = job.as_slice() else {
        panic!("one job_seconds report for the cancel: {job:?}");
    };
    assert!(
        *jc >= hold && *jc <= seen,
        "cancelled {hold:?} after its submit, {seen:?} seen: job_seconds {jc:?}"
    );
    r.probe.release_all();
    r.settled().await?;
    r.close().await
}

/// A runner with nothing due makes no store call at all: neither once its jobs are done nor
/// while a busy target waits out its `retry_wait` (workers sleep, they never poll).
pub async fn idle_workers_never_call_the_store(store: Arc<dyn BatchStore>) -> TestResult {
    let (f, dyn_store) = faulty(store);
    let probe = Probe::scripted(|url, _| {
        if url.starts_with("https://b.") {
            Act::Fail(FetchError::RetryLater("busy".into()))
        } else {
            Act::Ok(content_of(url))
        }
    });
    let cfg = Config {
        retry_wait: Duration::from_secs(60),
        ..config()
    };
    let r = rig(dyn_store, probe, cfg).await?;
    let a = r.submit("alice", "a", 2).await?;
    r.terminal(&a).await?;
    r.settled().await?;
    let calls = f.calls();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(f.calls(), calls, "store calls while idle");

    let b = r.submit("bob", "b", 1).await?;
    r.started(&url("b", 0), 1).await?;
    until("the busy answer is stored", || {
        r.hooks.inflight().last() == Some(&0)
    })
    .await?;
    let calls = f.calls();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        f.calls(),
        calls,
        "store calls while a target waits to be retried"
    );
    assert_eq!(r.probe.attempts(&url("b", 0)), 1);
    let row = f.inner().job(&b).await?;
    assert_eq!(row.map(|r| r.status), Some(JobStatus::Running));
    r.close().await
}

// ---- §5 cancel, status, touch, close ------------------------------------------------------

/// Cancel sets the job `cancelled` at once; its in-flight target finishes and is stored; no
/// further target starts and the later ones stay `pending`; the status stays `cancelled`;
/// `hooks.job(Cancelled)` and `hooks.job_seconds` are called once.
pub async fn cancel_lets_the_inflight_target_finish_and_starts_nothing_more(
    store: Arc<dyn BatchStore>,
) -> TestResult {
    let r = rig(store, Probe::new(), config()).await?;
    r.probe.hold(&url("a", 0));
    let a = r.submit("alice", "a", 3).await?;
    r.started(&url("a", 0), 1).await?;
    assert!(r.runner.cancel(&a).await, "a running job can be cancelled");
    let v = r.view(&a).await?;
    assert_eq!(
        v.job.status,
        JobStatus::Cancelled,
        "cancelled in the store at once"
    );
    assert_eq!(
        states(&v).first(),
        Some(&TargetState::Running),
        "a0 is still in flight"
    );
    assert_eq!(r.hooks.count(JobOutcome::Cancelled), 1);

    r.probe.release(&url("a", 0));
    let v = until_status(&r.runner, &a, "has a0 stored", |v| {
        states(v).first() == Some(&TargetState::Done)
    })
    .await?;
    assert_eq!(
        v.targets.first().and_then(|t| t.result.clone()),
        Some(content_of(&url("a", 0)))
    );
    // One worker: once another job is done, a1 would have had its turn.
    let b = r.submit("bob", "b", 2).await?;
    r.terminal(&b).await?;
    r.settled().await?;
    let v = r.view(&a).await?;
    assert_eq!(
        v.job.status,
        JobStatus::Cancelled,
        "nothing overwrites cancelled"
    );
    assert_eq!(
        states(&v),
        [
            TargetState::Done,
            TargetState::Pending,
            TargetState::Pending
        ]
    );
    assert_eq!(v.job.targets_done, 1);
    assert!(
        r.probe
            .started()
            .iter()
            .all(|u| !u.starts_with("https://a.") || *u == url("a", 0))
    );
    r.close().await?;
    assert_eq!(
        r.view(&a).await?.job.status,
        JobStatus::Cancelled,
        "not even close"
    );
    assert_eq!(r.hooks.count(JobOutcome::Cancelled), 1);
    assert_eq!(r.hooks.job_seconds(), 2, "once for a, once for b");
    Ok(())
}

/// A runner of one worker on `store`, with [`HeldTarget`] hooks and a [`Probe`], and job `a` of
/// three targets submitted: returned once the worker is held reporting a0 (stored done).
async fn held_after_a0(
    store: Arc<dyn BatchStore>,
) -> Res<(Runner, Arc<HeldTarget>, Probe, String)> {
    let hooks = Arc::new(HeldTarget::default());
    let probe = Probe::new();
    let cfg = Config {
        hooks: hooks.clone(),
        ..config()
    };
    let runner = Runner::start(store, probe.clone(), cfg).await?;
    let a = runner
        .submit(caller("alice"), CallerClass::Fleet, targets("a", 3))
        .await?
        .id;
    until("a worker reports a0, held", || hooks.entered()).await?;
    Ok((runner, hooks, probe, a))
}

/// A cancel that comes while the worker is still reporting the job's stored target (held in
/// `hooks.target`) starts nothing more either: the job's next target is taken only after that
/// report, and by then the job is cancelled.
pub async fn cancel_while_a_stored_target_is_reported_starts_nothing_more(
    store: Arc<dyn BatchStore>,
) -> TestResult {
    let (runner, hooks, probe, a) = held_after_a0(store).await?;
    let v = until_status(&runner, &a, "has a0 stored", |v| {
        states(v).first() == Some(&TargetState::Done)
    })
    .await?;
    assert_eq!(states(&v).get(1), Some(&TargetState::Pending));
    assert!(runner.cancel(&a).await, "a running job can be cancelled");
    hooks.release();
    // One worker: once another job is done, a1 would have had its turn.
    let b = runner
        .submit(caller("bob"), CallerClass::Fleet, targets("b", 1))
        .await?
        .id;
    until_status(&runner, &b, "is done", |v| v.job.status == JobStatus::Done).await?;
    let v = runner.status(&a).await?.ok_or("job a is stored")?;
    assert_eq!(v.job.status, JobStatus::Cancelled);
    assert_eq!(
        states(&v),
        [
            TargetState::Done,
            TargetState::Pending,
            TargetState::Pending
        ],
        "later targets stay pending"
    );
    assert_eq!(probe.started(), [url("a", 0), url("b", 0)], "fetched");
    within("close", runner.close()).await?;
    Ok(())
}

/// A target is in flight from when a worker takes it, before its `running` is written: a
/// cancel that comes while the store is writing it has that target fetched and stored (the
/// job stays `cancelled`), and starts nothing more.
pub async fn a_cancel_while_a_targets_start_is_written_has_that_target_fetched_and_no_other(
    store: Arc<dyn BatchStore>,
) -> TestResult {
    let shared = Arc::new(Shared::new(store));
    let r = rig(shared.clone(), Probe::new(), config()).await?;
    shared.hold_start_target();
    let a = r.submit("alice", "a", 2).await?;
    shared.starts_held(1).await?;
    assert!(r.runner.cancel(&a).await, "a was live");
    assert!(r.probe.started().is_empty(), "nothing fetched yet");
    shared.release_start_target();
    let v = until_status(&r.runner, &a, "has a0 stored", |v| {
        v.targets[0].status == TargetState::Done
    })
    .await?;
    assert_eq!(v.job.status, JobStatus::Cancelled);
    assert_eq!(states(&v), [TargetState::Done, TargetState::Pending]);
    r.close().await?;
    assert_eq!(r.probe.started(), [url("a", 0)], "a0 only");
    assert_eq!(r.hooks.count(JobOutcome::Cancelled), 1);
    Ok(())
}

/// A cancel whose caller gives up while the store is still writing `cancelled` (its future
/// dropped mid-call, by a timeout or a client gone away, with a store whose write suspends)
/// still ends the job `cancelled` in the store: the write goes on in a task of its own, and
/// lands as soon as the store answers (not only at the next stored target).
pub async fn a_cancel_dropped_mid_write_still_ends_the_job_cancelled(
    store: Arc<dyn BatchStore>,
) -> TestResult {
    let shared = Arc::new(Shared::new(store));
    let r = rig(shared.clone(), Probe::new(), config()).await?;
    r.probe.hold(&url("a", 0));
    let a = r.submit("alice", "a", 2).await?;
    r.started(&url("a", 0), 1).await?;
    shared.hold_set_status();
    let gave_up = tokio::time::timeout(Duration::from_millis(50), r.runner.cancel(&a)).await;
    assert!(gave_up.is_err(), "the cancel waits on the held write");
    assert_eq!(
        r.hooks.count(JobOutcome::Cancelled),
        1,
        "reported all the same"
    );
    shared.release_set_status();
    let v = until_status(&r.runner, &a, "is cancelled in the store", |v| {
        v.job.status == JobStatus::Cancelled
    })
    .await?;
    assert_eq!(
        states(&v),
        [TargetState::Running, TargetState::Pending],
        "a0 still held"
    );
    r.probe.release(&url("a", 0));
    let v = until_status(&r.runner, &a, "has a0 stored", |v| {
        v.targets[0].status == TargetState::Done
    })
    .await?;
    assert_eq!(v.job.status, JobStatus::Cancelled);
    assert_eq!(states(&v), [TargetState::Done, TargetState::Pending]);
    r.close().await?;
    assert_eq!(r.row(&a).await?.status, JobStatus::Cancelled, "still");
    assert_eq!(r.probe.started(), [url("a", 0)]);
    assert_eq!(r.hooks.count(JobOutcome::Cancelled), 1, "once");
    Ok(())
}

/// A rig over a [`Shared`] store whose admits are held from the start.
async fn rig_holding_admits(store: Arc<dyn BatchStore>) -> Res<(Arc<Shared>, Rig)> {
    let shared = Arc::new(Shared::new(store));
    let r = rig(shared.clone(), Probe::new(), config()).await?;
    shared.hold_admit();
    Ok((shared, r))
}

/// A submit whose caller gives up while a store that suspends is admitting its job (its
/// future dropped after the store wrote the job) still has the job run: it is not left
/// `queued` unrun, holding its caller's cap, nor reused while it never runs.
pub async fn a_submit_dropped_mid_admit_still_runs_its_job(
    store: Arc<dyn BatchStore>,
) -> TestResult {
    let (shared, r) = rig_holding_admits(store).await?;
    let gave_up = tokio::time::timeout(
        Duration::from_millis(50),
        r.runner
            .submit(caller("alice"), CallerClass::Fleet, targets("a", 2)),
    )
    .await;
    assert!(gave_up.is_err(), "the submit waits on the held admit");
    shared.release_admit();
    r.started(&url("a", 1), 1).await?;
    let again = r.submit_targets("alice", targets("a", 2)).await?;
    assert!(again.reused, "the same targets reuse the job: {again:?}");
    let v = r.terminal(&again.id).await?;
    assert_eq!(v.job.status, JobStatus::Done);
    assert_eq!(r.probe.started(), [url("a", 0), url("a", 1)]);
    assert_eq!(r.hooks.count(JobOutcome::Created), 1);
    r.close().await
}

/// A cancel of a job that the store holds but that its submit is still registering to run
/// (its admit suspended after the store wrote it) is no cancel of an unknown id: the store
/// answers another submit of the same targets with the job's id (`Reused`), and that caller may
/// cancel it at once. The cancel waits for the registration and cancels the job: it ends
/// `cancelled`, and nothing of it starts after its first target (held here, in case a worker
/// took it first).
pub async fn cancel_of_a_job_still_being_registered_waits_and_cancels_it(
    store: Arc<dyn BatchStore>,
) -> TestResult {
    let (shared, r) = rig_holding_admits(store).await?;
    r.probe.hold(&url("a", 0));
    let submit = {
        let runner = r.runner.clone();
        tokio::spawn(async move {
            runner
                .submit(caller("alice"), CallerClass::Fleet, targets("a", 2))
                .await
        })
    };
    shared.admits_held(1).await?;
    let id = shared.created().first().cloned().ok_or("no job created")?;
    let cancel = r.runner.cancel(&id);
    tokio::pin!(cancel);
    let first = poll_once(cancel.as_mut()).await;
    assert!(
        first.is_pending(),
        "the cancel answered {first:?} while the job was not yet registered"
    );
    shared.release_admit();
    let answer = tokio::time::timeout(WAIT, cancel)
        .await
        .map_err(|_| "the cancel never answered")?;
    assert!(answer, "the job was live: the cancel must end it");
    let submitted = submit.await??;
    assert_eq!(
        (submitted.id.as_str(), submitted.reused),
        (id.as_str(), false)
    );
    r.probe.release_all();
    let v = r.terminal(&id).await?;
    assert_eq!(v.job.status, JobStatus::Cancelled);
    r.close().await?;
    assert!(
        !r.probe.started().contains(&url("a", 1)),
        "a target started after the cancel: {:?}",
        r.probe.started()
    );
    assert_eq!(r.hooks.count(JobOutcome::Cancelled), 1);
    Ok(())
}

/// A cancel that waits for a job's registration (see
/// [`cancel_of_a_job_still_being_registered_waits_and_cancels_it`]) does not wait for ever when
/// the registration never comes: here the store wrote the job but answered the admit with an
/// error, so the submit fails, the runner never knows the job, and the cancel answers `false`.
/// The job the store holds is failed there (`ERR_NOT_ADMITTED`), not left `queued`.
pub async fn a_cancel_waiting_for_a_registration_that_never_comes_answers_false(
    store: Arc<dyn BatchStore>,
) -> TestResult {
    let (f, dyn_store) = faulty(store);
    let r = rig(dyn_store, Probe::new(), config()).await?;
    f.set_timing(Timing::After);
    f.fail(Op::Admit);
    f.inner().hold_admit();
    let submit = {
        let runner = r.runner.clone();
        tokio::spawn(async move {
            runner
                .submit(caller("alice"), CallerClass::Fleet, targets("a", 2))
                .await
        })
    };
    f.inner().admits_held(1).await?;
    let id = f
        .inner()
        .created()
        .first()
        .cloned()
        .ok_or("no job created")?;
    let cancel = r.runner.cancel(&id);
    tokio::pin!(cancel);
    let first = poll_once(cancel.as_mut()).await;
    assert!(first.is_pending(), "the cancel answered {first:?} at once");
    f.inner().release_admit();
    let submitted = submit.await?;
    assert!(submitted.is_err(), "{submitted:?}");
    let answer = tokio::time::timeout(WAIT, cancel)
        .await
        .map_err(|_| "the cancel never answered")?;
    assert!(!answer, "the runner never registered the job");
    f.heal_all();
    // The store wrote the job before it failed the admit: the runner failed it there, so it
    // does not stay queued, holding alice's cap, and handed out as reused.
    let row = f.inner().job(&id).await?;
    assert_eq!(
        row.as_ref().map(|j| (j.status, j.error.as_str())),
        Some((JobStatus::Failed, rota::machine::ERR_NOT_ADMITTED))
    );
    let again = r.submit_targets("alice", targets("a", 2)).await?;
    assert!(!again.reused, "a failed job is never reused: {again:?}");
    r.close().await
}

/// A cancel waits for a submit only while the submit is registering its job (see
/// [`cancel_of_a_job_still_being_registered_waits_and_cancels_it`]), not for the rest of that
/// submit: here the submit's sweep after the created job is held, and meanwhile its job runs,
/// ends and is let go of by the runner. A cancel of it then answers `false` in its first poll,
/// as for any ended job, rather than waiting for that sweep.
pub async fn a_cancel_waits_for_no_more_of_a_submit_once_its_job_is_registered(
    store: Arc<dyn BatchStore>,
) -> TestResult {
    let shared = Arc::new(Shared::new(store));
    let r = rig(shared.clone(), Probe::new(), config()).await?;
    shared.hold_sweep();
    let submit = {
        let runner = r.runner.clone();
        tokio::spawn(async move {
            runner
                .submit(caller("alice"), CallerClass::Fleet, targets("a", 1))
                .await
        })
    };
    shared.sweeps_held(1).await?;
    let id = shared.created().first().cloned().ok_or("no job created")?;
    assert_eq!(r.terminal(&id).await?.job.status, JobStatus::Done);
    // Reported ended and out of flight: the runner has let go of the job.
    r.settled().await?;
    let cancel = r.runner.cancel(&id);
    tokio::pin!(cancel);
    let first = poll_once(cancel.as_mut()).await;
    shared.release_sweep();
    assert!(
        matches!(first, std::task::Poll::Ready(false)),
        "a cancel of an ended job answered {first:?} while its submit's sweep was held"
    );
    let submitted = within("the submit", submit).await???;
    assert_eq!(
        submitted,
        Submitted {
            id: id.clone(),
            reused: false
        }
    );
    r.close().await
}

/// A submit whose admit fails tries once to fail its job in the store (in case the store
/// wrote it) and keeps nothing to write again: while the store is down, failed submits do not
/// pile up writes that every later submit and stored target would first try again.
pub async fn failed_admits_leave_no_writes_to_make_again(store: Arc<dyn BatchStore>) -> TestResult {
    let (f, dyn_store) = faulty(store);
    let r = rig(dyn_store, Probe::new(), config()).await?;
    f.fail(Op::Admit);
    f.fail(Op::SetStatus);
    for n in 0..20 {
        let failed = r
            .submit_targets("alice", targets(&format!("j{n}"), 1))
            .await;
        assert!(failed.is_err(), "{failed:?}");
    }
    f.heal_all();
    let before = f.calls();
    let a = r.submit("alice", "a", 1).await?;
    let calls = f.calls() - before;
    // Its admit and sweep, and the worker's start, finish and evict of its target if the
    // worker got there meanwhile; not 20 writes of the outage made again.
    assert!(
        calls <= 5,
        "the submit after the outage made {calls} store calls"
    );
    assert_eq!(r.terminal(&a).await?.job.status, JobStatus::Done);
    r.close().await
}

/// Polls `fut` once: its answer, or `Pending`.
async fn poll_once<F: Future>(fut: std::pin::Pin<&mut F>) -> std::task::Poll<F::Output> {
    let mut fut = fut;
    std::future::poll_fn(|cx| std::task::Poll::Ready(fut.as_mut().poll(cx))).await
}

/// A submit polled outside any tokio runtime (by another executor, here a plain thread's
/// `block_on`), whose store suspends in admit, goes on in a task on the runner's runtime (a
/// plain `tokio::spawn` would panic there), and the job runs.
pub async fn a_submit_outside_a_runtime_whose_admit_suspends_finishes_and_runs(
    store: Arc<dyn BatchStore>,
) -> TestResult {
    let (shared, r) = rig_holding_admits(store).await?;
    let runner = r.runner.clone();
    let submit = std::thread::spawn(move || {
        block_on(runner.submit(caller("alice"), CallerClass::Fleet, targets("a", 2)))
    });
    shared.admits_held(1).await?;
    shared.release_admit();
    let submitted = tokio::task::spawn_blocking(move || submit.join())
        .await?
        .map_err(|_| "the submit's thread panicked")??;
    assert!(!submitted.reused);
    let v = r.terminal(&submitted.id).await?;
    assert_eq!(v.job.status, JobStatus::Done);
    assert_eq!(r.probe.started(), [url("a", 0), url("a", 1)]);
    r.close().await
}

/// Polls `fut` to its end on this thread, parking between polls: an executor that is not
/// tokio's.
fn block_on<F: std::future::Future>(fut: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl std::task::Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = std::task::Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = std::task::Context::from_waker(&waker);
    let mut fut = std::pin::pin!(fut);
    loop {
        if let std::task::Poll::Ready(out) = fut.as_mut().poll(&mut cx) {
            return out;
        }
        std::thread::park();
    }
}

/// Cancelling a queued job leaves it `cancelled` with every target `pending`; none is fetched.
pub async fn cancel_of_a_queued_job_leaves_every_target_pending(
    store: Arc<dyn BatchStore>,
) -> TestResult {
    let r = rig(store, Probe::new(), config()).await?;
    r.probe.hold(&url("a", 0));
    let a = r.submit("alice", "a", 1).await?;
    r.started(&url("a", 0), 1).await?;
    let b = r.submit("bob", "b", 2).await?;
    assert!(r.runner.cancel(&b).await);
    assert_eq!(r.view(&b).await?.job.status, JobStatus::Cancelled);
    r.probe.release_all();
    r.terminal(&a).await?;
    let c = r.submit("carol", "c", 2).await?;
    r.terminal(&c).await?;
    r.settled().await?;
    let v = r.view(&b).await?;
    assert_eq!(v.job.status, JobStatus::Cancelled);
    assert_eq!(states(&v), [TargetState::Pending, TargetState::Pending]);
    assert_eq!(
        r.probe.attempts(&url("b", 0)) + r.probe.attempts(&url("b", 1)),
        0
    );
    assert_eq!(r.hooks.count(JobOutcome::Cancelled), 1);
    r.close().await
}

/// When the in-flight target of a cancelled job is its last, its outcome is stored but the job
/// stays `cancelled` (not done).
pub async fn cancelled_is_never_overwritten_by_the_last_inflight_outcome(
    store: Arc<dyn BatchStore>,
) -> TestResult {
    let r = rig(store, Probe::new(), config()).await?;
    r.probe.hold(&url("a", 0));
    let a = r.submit("alice", "a", 1).await?;
    r.started(&url("a", 0), 1).await?;
    assert!(r.runner.cancel(&a).await);
    r.probe.release_all();
    until_status(&r.runner, &a, "has a0 stored", |v| {
        states(v) == [TargetState::Done]
    })
    .await?;
    let b = r.submit("bob", "b", 1).await?;
    r.terminal(&b).await?;
    r.settled().await?;
    let v = r.view(&a).await?;
    assert_eq!(
        (v.job.status, v.job.targets_done),
        (JobStatus::Cancelled, 1)
    );
    assert_eq!(r.hooks.count(JobOutcome::Cancelled), 1);
    assert_eq!(
        r.hooks.count(JobOutcome::Done),
        1,
        "only b is reported done"
    );
    assert_eq!(r.hooks.job_seconds(), 2);
    r.close().await
}

/// `cancel` is `false` for an unknown id, a terminal job and a job already cancelled, and then
/// changes nothing.
pub async fn cancel_is_false_for_unknown_terminal_and_cancelled_ids(
    store: Arc<dyn BatchStore>,
) -> TestResult {
    let r = rig(store, Probe::new(), config()).await?;
    assert!(!r.runner.cancel("ffffffffffffffffffffffffffffffff").await);
    assert!(!r.runner.cancel("").await);
    let d = r.submit("alice", "d", 1).await?;
    r.terminal(&d).await?;
    r.settled().await?;
    assert!(!r.runner.cancel(&d).await, "a done job");
    assert_eq!(r.view(&d).await?.job.status, JobStatus::Done);
    r.probe.hold(&url("a", 0));
    let a = r.submit("alice", "a", 2).await?;
    assert!(r.runner.cancel(&a).await);
    assert!(!r.runner.cancel(&a).await, "a second cancel");
    r.probe.release_all();
    assert!(!r.runner.cancel(&a).await, "a cancelled job");
    assert_eq!(r.hooks.count(JobOutcome::Cancelled), 1);
    assert_eq!(r.hooks.job_seconds(), 2);
    r.close().await
}

/// `status` of an unknown id is `None`; a stored result that is not valid JSON gives that
/// target `result: None` and an error naming the corruption, without a panic.
pub async fn status_of_an_unknown_id_is_none_and_a_corrupt_result_is_named(
    store: Arc<dyn BatchStore>,
) -> TestResult {
    let r = rig(store, Probe::new(), config()).await?;
    assert_eq!(
        r.runner.status("ffffffffffffffffffffffffffffffff").await?,
        None
    );
    assert_eq!(r.runner.status("").await?, None);
    let job = NewJob {
        id: "0123456789abcdef0123456789abcdef".into(),
        caller: "mallory".into(),
        class: CallerClass::Restricted,
        idem_key: "k".into(),
        targets: vec![(url("z", 0), "{}".into()), (url("z", 1), "{}".into())],
        now: T0,
    };
    let caps = Caps {
        targets_per_job: 8,
        jobs_per_caller: 8,
        jobs_total: 8,
        ttl_secs: 100,
    };
    assert_eq!(r.store.admit(&job, &caps).await?, Admission::Created);
    let bad = TargetWrite::Done {
        result: "{\"content\": not json".into(),
    };
    assert!(r.store.finish_target(&job.id, 0, &bad, T0, None).await?);
    let v = r.view(&job.id).await?;
    let t = v.targets.first();
    assert_eq!(
        t.map(|t| (t.status, t.result.is_none())),
        Some((TargetState::Done, true))
    );
    let error = t.map(|t| t.error.clone()).unwrap_or_default();
    assert!(
        error.contains("corrupt"),
        "the error names the corruption: {error:?}"
    );
    assert_eq!(
        v.targets.get(1).map(|t| t.status),
        Some(TargetState::Pending)
    );
    r.close().await
}

/// Test job `a` of two targets, closed once its first was fetched: `failed` with `runner
/// closed`, its first target done with [`content_of`] its url (`why`), its second pending.
fn closed_after_its_first_target(va: &JobView, why: &str) {
    assert_eq!(
        (va.job.status, va.job.error.as_str()),
        (JobStatus::Failed, "runner closed")
    );
    assert_eq!(
        states(va),
        [TargetState::Done, TargetState::Pending],
        "{why}"
    );
    assert_eq!(
        va.targets.first().and_then(|t| t.result.clone()),
        Some(content_of(&url("a", 0))),
        "{why}"
    );
}

/// `close` cancels the fetch token, waits for the in-flight fetch to return (a held fetch
/// keeps it waiting), stores its outcome, then fails every live job with `runner closed`; no
/// target starts after it; concurrent and later closes all return; the hooks report each
/// closed job once and end at depth 0 and in-flight 0.
pub async fn close_waits_for_the_inflight_fetch_then_fails_live_jobs(
    store: Arc<dyn BatchStore>,
) -> TestResult {
    let r = rig(store, Probe::new(), config()).await?;
    r.probe.hold(&url("a", 0));
    let a = r.submit("alice", "a", 2).await?;
    r.started(&url("a", 0), 1).await?;
    let b = r.submit("bob", "b", 1).await?;
    let closes: Vec<_> = (0..2).map(|_| r.spawn_close()).collect();
    let calls = r.probe.calls();
    let Some(token) = calls.first().map(|c| c.cancel.clone()) else {
        panic!("a0 was fetched");
    };
    until("close cancels the fetch token", || token.is_cancelled()).await?;
    assert!(
        closes.iter().all(|c| !c.is_finished()),
        "close returned before the fetch did"
    );
    let refused = r.submit_targets("carol", targets("c", 1)).await;
    assert_eq!(
        refused,
        Err(SubmitError::Store(StoreError::Closed)),
        "submit while closing"
    );
    r.probe.release_all();
    for c in closes {
        within("a concurrent close", c).await??;
    }
    r.close().await?;

    closed_after_its_first_target(&r.view(&a).await?, "a0's outcome is stored");
    let vb = r.view(&b).await?;
    assert_eq!(
        (vb.job.status, vb.job.error.as_str()),
        (JobStatus::Failed, "runner closed")
    );
    assert_eq!(states(&vb), [TargetState::Pending]);
    assert_eq!(
        r.probe.started(),
        [url("a", 0)],
        "nothing starts once close is called"
    );
    assert_eq!(r.store.live_jobs(None).await?, 0);
    let h = &r.hooks;
    assert_eq!((h.count(JobOutcome::Failed), h.job_seconds()), (2, 2));
    assert!(
        h.idle(),
        "depth {:?} inflight {:?}",
        h.depth(),
        h.inflight()
    );
    Ok(())
}

/// A fetch that closes its runner (say, on an answer that means stop) gets on: close cannot
/// wait for the fetch that called it, still in flight, so it begins the close and returns.
/// The close then ends as any close does once that fetch has returned: the fetch token
/// cancelled, the fetch's outcome stored, the job failed `runner closed`, nothing else
/// started, and a close from outside returns once all of that is done.
pub async fn a_close_called_from_inside_a_fetch_returns_and_the_close_ends(
    store: Arc<dyn BatchStore>,
) -> TestResult {
    let handle: Arc<OnceLock<Runner>> = Arc::new(OnceLock::new());
    let inside_returned = Arc::new(AtomicBool::new(false));
    let fetched = Arc::new(Mutex::new(Vec::new()));
    let fetch = {
        let (handle, inside_returned, fetched) =
            (handle.clone(), inside_returned.clone(), fetched.clone());
        move |_: Arc<Caller>, target: Target, cancel: CancellationToken| {
            let (handle, inside_returned) = (handle.clone(), inside_returned.clone());
            lock(&fetched).push(target.url.clone());
            async move {
                let Some(runner) = handle.get() else {
                    return Err(FetchError::Other("no runner to close".into()));
                };
                runner.close().await;
                inside_returned.store(true, Ordering::SeqCst);
                // The close it began cancels the token it was given.
                match tokio::time::timeout(WAIT, cancel.cancelled()).await {
                    Ok(()) => Ok(content_of(&target.url)),
                    Err(_) => Err(FetchError::Other("the token was never cancelled".into())),
                }
            }
        }
    };
    let runner = Runner::start(store.clone(), fetch, config()).await?;
    assert!(handle.set(runner.clone()).is_ok(), "the handle is set once");
    let a = runner
        .submit(caller("alice"), CallerClass::Fleet, targets("a", 2))
        .await?;
    until("the close called inside the fetch returned", || {
        inside_returned.load(Ordering::SeqCst)
    })
    .await?;
    within("a close from outside", runner.close()).await?;

    let Some(va) = runner.status(&a.id).await? else {
        panic!("job a is stored");
    };
    closed_after_its_first_target(
        &va,
        "the closing fetch's outcome is stored, and nothing starts after it",
    );
    assert_eq!(*lock(&fetched), [url("a", 0)]);
    assert_eq!(store.live_jobs(None).await?, 0);
    assert_eq!(
        runner
            .submit(caller("bob"), CallerClass::Fleet, targets("b", 1))
            .await,
        Err(SubmitError::Store(StoreError::Closed)),
        "closed"
    );
    Ok(())
}

/// A fetch that closes its runner and returns without awaiting anything else: the close is
/// begun before close returns, so the worker, going on at once on the same thread, starts
/// nothing more (the job's other targets stay pending; the job is failed `runner closed`).
pub async fn a_close_from_inside_a_fetch_that_returns_at_once_starts_nothing_more(
    store: Arc<dyn BatchStore>,
) -> TestResult {
    let handle: Arc<OnceLock<Runner>> = Arc::new(OnceLock::new());
    let fetched = Arc::new(Mutex::new(Vec::new()));
    let cancelled = Arc::new(AtomicBool::new(false));
    let fetch = {
        let (handle, fetched, cancelled) = (handle.clone(), fetched.clone(), cancelled.clone());
        move |_: Arc<Caller>, target: Target, cancel: CancellationToken| {
            let (handle, cancelled) = (handle.clone(), cancelled.clone());
            lock(&fetched).push(target.url.clone());
            async move {
                if let Some(runner) = handle.get() {
                    runner.close().await;
                }
                cancelled.store(cancel.is_cancelled(), Ordering::SeqCst);
                Ok(content_of(&target.url))
            }
        }
    };
    let runner = Runner::start(store.clone(), fetch, config()).await?;
    assert!(handle.set(runner.clone()).is_ok(), "the handle is set once");
    let a = runner
        .submit(caller("alice"), CallerClass::Fleet, targets("a", 3))
        .await?;
    until("a fetch ran", || !lock(&fetched).is_empty()).await?;
    within("a close from outside", runner.close()).await?;
    assert_eq!(
        *lock(&fetched),
        [url("a", 0)],
        "nothing starts after the close"
    );
    assert!(
        cancelled.load(Ordering::SeqCst),
        "the token is cancelled when the close returns inside the fetch"
    );
    let Some(va) = runner.status(&a.id).await? else {
        panic!("job a is stored");
    };
    assert_eq!(
        (va.job.status, va.job.error.as_str()),
        (JobStatus::Failed, "runner closed")
    );
    assert_eq!(
        states(&va),
        [
            TargetState::Done,
            TargetState::Pending,
            TargetState::Pending
        ]
    );
    Ok(())
}

/// [`a_close_from_inside_a_fetch_that_returns_at_once_starts_nothing_more`] on a
/// current-thread runtime, where a task the close spawns runs only once the worker yields.
pub async fn a_close_from_inside_a_fetch_on_a_one_thread_runtime_starts_nothing_more(
    store: Arc<dyn BatchStore>,
) -> TestResult {
    a_close_from_inside_a_fetch_that_returns_at_once_starts_nothing_more(store).await
}

/// A close that comes while the worker is still reporting a stored target (held in
/// `hooks.target`) starts no other target: the job's next one stays `pending`, and the job is
/// failed with `runner closed`.
pub async fn close_while_a_stored_target_is_reported_starts_nothing_more(
    store: Arc<dyn BatchStore>,
) -> TestResult {
    let (runner, hooks, probe, a) = held_after_a0(store).await?;
    let closing = tokio::spawn({
        let runner = runner.clone();
        async move { runner.close().await }
    });
    // The token is cancelled once close has closed the machine.
    let token = probe
        .calls()
        .first()
        .map(|c| c.cancel.clone())
        .ok_or("a0 was fetched")?;
    until("close has begun", || token.is_cancelled()).await?;
    hooks.release();
    within("close", closing).await??;
    assert_eq!(probe.started(), [url("a", 0)], "nothing fetched after a0");
    let v = runner.status(&a).await?.ok_or("job a is stored")?;
    assert_eq!(
        (v.job.status, v.job.error.as_str()),
        (JobStatus::Failed, "runner closed")
    );
    assert_eq!(
        states(&v),
        [
            TargetState::Done,
            TargetState::Pending,
            TargetState::Pending
        ]
    );
    Ok(())
}

/// On close, a cancelled job with a target in flight stays `cancelled` (its outcome is
/// stored), and an in-flight target that answers busy is stored back to `pending` while its job
/// is failed with `runner closed`.
pub async fn close_leaves_cancelled_jobs_cancelled_and_a_busy_inflight_target_pending(
    store: Arc<dyn BatchStore>,
) -> TestResult {
    let probe = Probe::scripted(|url, _| {
        if url.starts_with("https://a.") {
            Act::Fail(FetchError::RetryLater("busy".into()))
        } else {
            Act::Ok(content_of(url))
        }
    });
    let cfg = Config {
        workers: 2,
        ..config()
    };
    let r = rig(store, probe, cfg).await?;
    r.probe.hold(&url("a", 0));
    r.probe.hold(&url("b", 0));
    let a = r.submit("alice", "a", 2).await?;
    let b = r.submit("bob", "b", 1).await?;
    r.started(&url("a", 0), 1).await?;
    r.started(&url("b", 0), 1).await?;
    assert!(r.runner.cancel(&b).await);
    let closing = r.spawn_close();
    let calls = r.probe.calls();
    until("close cancels the token", || {
        calls.iter().all(|c| c.cancel.is_cancelled())
    })
    .await?;
    r.probe.release_all();
    within("close", closing).await??;
    let va = r.view(&a).await?;
    assert_eq!(
        (va.job.status, va.job.error.as_str()),
        (JobStatus::Failed, "runner closed")
    );
    assert_eq!(states(&va), [TargetState::Pending, TargetState::Pending]);
    let vb = r.view(&b).await?;
    assert_eq!(
        (vb.job.status, states(&vb)),
        (JobStatus::Cancelled, vec![TargetState::Done])
    );
    let h = &r.hooks;
    assert_eq!(
        (h.count(JobOutcome::Failed), h.count(JobOutcome::Cancelled)),
        (1, 1)
    );
    assert_eq!(h.job_seconds(), 2);
    assert!(
        h.idle(),
        "depth {:?} inflight {:?}",
        h.depth(),
        h.inflight()
    );
    Ok(())
}

/// Dropping every handle of a runner without `close` cancels the fetch token (each worker's)
/// and stops the workers once their in-flight targets are stored: nothing more starts, and the
/// jobs still live stay live in the store, for the next start to fail as `interrupted`.
pub async fn dropping_every_handle_stops_the_workers_after_their_inflight_targets(
    store: Arc<dyn BatchStore>,
) -> TestResult {
    let cfg = Config {
        workers: 2,
        ..config()
    };
    let r = rig(store, Probe::new(), cfg).await?;
    r.probe.hold(&url("a", 0));
    r.probe.hold(&url("b", 0));
    let a = r.submit("alice", "a", 2).await?;
    let b = r.submit("bob", "b", 2).await?;
    r.started(&url("a", 0), 1).await?;
    r.started(&url("b", 0), 1).await?;
    let Rig {
        runner,
        store,
        probe,
        ..
    } = r;
    let other = runner.clone();
    drop(runner);
    let calls = probe.calls();
    assert!(
        calls.iter().all(|c| !c.cancel.is_cancelled()),
        "a handle is left: the runner runs on"
    );
    drop(other);
    until(
        "dropping the last handle cancels every fetch's token",
        || calls.iter().all(|c| c.cancel.is_cancelled()),
    )
    .await?;
    probe.release_all();
    let deadline = Instant::now() + WAIT;
    let mut seen = Vec::new();
    loop {
        seen.clear();
        for id in [&a, &b] {
            let Some((job, targets)) = store.view(id).await? else {
                return Err(failure(format!("job {id} should be stored")));
            };
            seen.push((
                job.status,
                targets.iter().map(|t| t.status).collect::<Vec<_>>(),
            ));
        }
        if seen
            .iter()
            .all(|(_, t)| t.first() == Some(&TargetState::Done))
        {
            break;
        }
        if Instant::now() >= deadline {
            return Err(failure(format!(
                "timed out waiting until both in-flight outcomes are stored; last seen: {seen:?}"
            )));
        }
        tokio::time::sleep(POLL).await;
    }
    // A worker asks for its next target under the lock it stores one under, and stops there;
    // give a worker that went on the time to show itself.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        probe.calls().len(),
        2,
        "a target started after the last handle was dropped"
    );
    for id in [&a, &b] {
        let Some((job, targets)) = store.view(id).await? else {
            return Err(failure(format!("job {id} should be stored")));
        };
        assert_eq!(job.status, JobStatus::Running, "a live job stays live");
        assert_eq!(
            targets.iter().map(|t| t.status).collect::<Vec<_>>(),
            [TargetState::Done, TargetState::Pending]
        );
    }
    Ok(())
}

/// `close` is idempotent even when a caller gives up on it: with the first close abandoned
/// (its task aborted, as a timeout would drop it) while a fetch is in flight, a later close
/// still stores that fetch's outcome, fails the live job with `runner closed`, and returns.
pub async fn close_returns_even_after_an_earlier_close_was_abandoned(
    store: Arc<dyn BatchStore>,
) -> TestResult {
    let r = rig(store, Probe::new(), config()).await?;
    r.probe.hold(&url("a", 0));
    let a = r.submit("alice", "a", 2).await?;
    r.started(&url("a", 0), 1).await?;
    let first = r.spawn_close();
    let calls = r.probe.calls();
    until("close cancels the token", || {
        calls.iter().all(|c| c.cancel.is_cancelled())
    })
    .await?;
    first.abort();
    assert!(
        first.await.is_err_and(|e| e.is_cancelled()),
        "the first close was abandoned"
    );
    r.probe.release_all();
    r.close().await?;
    let v = r.view(&a).await?;
    assert_eq!(
        (v.job.status, v.job.error.as_str()),
        (JobStatus::Failed, "runner closed")
    );
    assert_eq!(states(&v), [TargetState::Done, TargetState::Pending]);
    Ok(())
}

/// `close` is idempotent: on an idle runner, a second and third close return at once; every
/// submit after it is refused with `Store(Closed)`; cancel then says `false`.
pub async fn close_is_idempotent_and_refuses_later_submits(
    store: Arc<dyn BatchStore>,
) -> TestResult {
    let r = rig(store, Probe::new(), config()).await?;
    let a = r.submit("alice", "a", 1).await?;
    r.terminal(&a).await?;
    r.close().await?;
    r.close().await?;
    let clone = r.runner.clone();
    within("close on a clone", clone.close()).await?;
    let got = r.submit_targets("bob", targets("b", 1)).await;
    assert_eq!(got, Err(SubmitError::Store(StoreError::Closed)));
    if let Err(e) = got {
        assert_eq!(e.to_string(), "store: runner closed");
    }
    assert!(!r.runner.cancel(&a).await);
    assert_eq!(
        r.view(&a).await?.job.status,
        JobStatus::Done,
        "close leaves done jobs done"
    );
    assert_eq!(r.store.live_jobs(None).await?, 0);
    Ok(())
}

/// A rig over a [`Shared`] store with one job submitted, of `n` targets tagged `tag` (its
/// caller named after the tag), whose first fetch is held, started; and that job's id.
async fn rig_with_a_held_fetch(
    store: Arc<dyn BatchStore>,
    tag: &str,
    n: usize,
) -> Res<(Arc<Shared>, Rig, String)> {
    let shared = Arc::new(Shared::new(store));
    let r = rig(shared.clone(), Probe::new(), config()).await?;
    let id = held_fetch_job(&r, tag, n).await?;
    Ok((shared, r, id))
}

/// Submits a job of `n` targets tagged `tag` (its caller named after the tag) whose first
/// fetch is held, and waits until that fetch has started; the job's id.
async fn held_fetch_job(r: &Rig, tag: &str, n: usize) -> Res<String> {
    r.probe.hold(&url(tag, 0));
    let id = r.submit(tag, tag, n).await?;
    r.started(&url(tag, 0), 1).await?;
    Ok(id)
}

/// Waits until close has begun: every fetch so far has its token cancelled.
async fn until_close_began(r: &Rig) -> TestResult {
    let calls = r.probe.calls();
    until("close cancels the fetch tokens", || {
        calls.iter().all(|c| c.cancel.is_cancelled())
    })
    .await
}

/// Starts a close in a task of its own; once it has begun, lets the held fetches return, and
/// checks that close still waits (for `on`, a held store call). The close's task.
async fn close_waiting(r: &Rig, on: &str) -> Res<tokio::task::JoinHandle<()>> {
    let closing = r.spawn_close();
    until_close_began(r).await?;
    r.probe.release_all();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!closing.is_finished(), "close waits for {on}");
    Ok(closing)
}

/// A cancel whose status write is under way (a store that suspends) when close begins: close
/// waits for it, and the cancel's caller giving up meanwhile does not stop it, so when close
/// returns the job is `cancelled` in the store, not live.
pub async fn close_waits_for_a_cancels_status_write_under_way(
    store: Arc<dyn BatchStore>,
) -> TestResult {
    let (shared, r, a) = rig_with_a_held_fetch(store, "a", 2).await?;
    shared.hold_set_status();
    let cancelling = {
        let (runner, a) = (r.runner.clone(), a.clone());
        tokio::spawn(async move { runner.cancel(&a).await })
    };
    shared.statuses_held(1).await?;
    let closing = close_waiting(&r, "the cancel's write").await?;
    // The cancel's caller gives up (a timeout).
    cancelling.abort();
    let _ = cancelling.await;
    shared.release_set_status();
    within("close", closing).await??;
    let row = shared.job(&a).await?.ok_or("job a gone")?;
    assert_eq!(row.status, JobStatus::Cancelled, "when close returned");
    assert_eq!(r.hooks.count(JobOutcome::Cancelled), 1);
    assert_eq!(r.hooks.count(JobOutcome::Failed), 0);
    Ok(())
}

/// A submit whose admit is under way (a store that suspends) when close begins: close waits
/// for it, and the job the store took is `failed` with `runner closed` (the closing runner
/// does not register it) by the time close returns; the submit answers `runner closed`.
pub async fn close_waits_for_a_submits_admit_under_way(store: Arc<dyn BatchStore>) -> TestResult {
    // A held fetch, whose token shows when close has begun.
    let (shared, r, _) = rig_with_a_held_fetch(store, "z", 1).await?;
    shared.hold_admit();
    let submitting = {
        let runner = r.runner.clone();
        tokio::spawn(async move {
            runner
                .submit(caller("alice"), CallerClass::Fleet, targets("a", 1))
                .await
        })
    };
    shared.admits_held(1).await?;
    let closing = close_waiting(&r, "the admit").await?;
    shared.release_admit();
    within("close", closing).await??;
    assert_eq!(shared.live_jobs(None).await?, 0, "when close returned");
    let got = within("submit", submitting).await??;
    assert_eq!(got, Err(SubmitError::Store(StoreError::Closed)));
    assert_eq!(r.probe.started(), [url("z", 0)], "a is never fetched");
    Ok(())
}

/// A close polled once by another executor and then dropped (its caller gave up) still
/// closes: it went on in a task on the runner's runtime, so a later close returns, and the
/// jobs it ended are `failed` in the store.
pub async fn a_close_polled_by_another_executor_and_dropped_still_closes(
    store: Arc<dyn BatchStore>,
) -> TestResult {
    let (_, r, a) = rig_with_a_held_fetch(store, "a", 2).await?;
    let b = r.submit("bob", "b", 1).await?;
    let runner = r.runner.clone();
    std::thread::spawn(move || {
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        let mut close = Box::pin(runner.close());
        let first = close.as_mut().poll(&mut cx);
        assert!(first.is_pending(), "close waits for the held fetch");
    })
    .join()
    .map_err(|_| "the other executor's thread panicked")?;
    // The close goes on.
    until_close_began(&r).await?;
    r.probe.release_all();
    r.close().await?;
    for id in [&a, &b] {
        let v = r.view(id).await?;
        assert_eq!(
            (v.job.status, v.job.error.as_str()),
            (JobStatus::Failed, "runner closed"),
            "{id}"
        );
    }
    Ok(())
}

/// `Runner::start` fails every job left queued or running in the store with `interrupted`
/// (leaving terminal jobs as they are), which frees their caps: the same callers are admitted
/// again and their old jobs are not reused.
pub async fn start_fails_leftover_live_jobs_as_interrupted_and_frees_their_caps(
    store: Arc<dyn BatchStore>,
) -> TestResult {
    let caps = Caps {
        targets_per_job: 8,
        jobs_per_caller: 8,
        jobs_total: 8,
        ttl_secs: 86_400,
    };
    let new_job = |id: &str, who: &str, ts: &[Target]| NewJob {
        id: id.to_owned(),
        caller: who.to_owned(),
        class: CallerClass::Fleet,
        idem_key: idem_key(who, ts),
        targets: ts
            .iter()
            .map(|t| (t.url.clone(), t.options.to_json()))
            .collect(),
        now: T0 - 10,
    };
    let (qt, rt, dt) = (targets("q", 2), targets("r", 2), targets("d", 1));
    let q = new_job("00000000000000000000000000000001", "alice", &qt);
    let run = new_job("00000000000000000000000000000002", "bob", &rt);
    let d = new_job("00000000000000000000000000000003", "carol", &dt);
    for j in [&q, &run, &d] {
        assert_eq!(store.admit(j, &caps).await?, Admission::Created);
    }
    assert!(store.start_target(&run.id, 0, T0 - 9).await?.is_some());
    let done = TargetWrite::Done {
        result: "{\"content\":\"x\"}".into(),
    };
    assert!(
        store
            .finish_target(&d.id, 0, &done, T0 - 9, Some(JobStatus::Done))
            .await?
    );
    let d_before = store.job(&d.id).await?;

    let cfg = Config {
        jobs_per_caller: 1,
        jobs_total: 2,
        ..config()
    };
    let r = rig(store, Probe::new(), cfg).await?;
    for id in [&q.id, &run.id] {
        let row = r.row(id).await?;
        assert_eq!(
            (row.status, row.error.as_str()),
            (JobStatus::Failed, "interrupted")
        );
    }
    assert_eq!(
        r.store.job(&d.id).await?,
        d_before,
        "a terminal job is left alone"
    );
    assert_eq!(r.store.live_jobs(None).await?, 0);
    let q2 = r.create("alice", qt).await?;
    let r2 = r.create("bob", rt).await?;
    assert!(q2 != q.id && r2 != run.id);
    r.terminal(&q2).await?;
    r.terminal(&r2).await?;
    assert_eq!(
        r.probe.started().len(),
        4,
        "the new jobs run; the old ones never resume"
    );
    r.close().await
}

/// `Runner::start` tells, at info, how many jobs left live it failed as interrupted, with
/// their count (SPEC §8), and says nothing of it when there were none: here a start on an empty
/// store, then one on a store holding two live jobs (a queued one and a running one) and a
/// done one.
pub async fn start_logs_how_many_leftover_live_jobs_it_failed(
    store: Arc<dyn BatchStore>,
) -> TestResult {
    let logs = LogCapture::start();
    let told = |text: &str| -> Vec<String> {
        text.lines()
            .filter(|l| l.contains("left live as interrupted"))
            .map(str::to_owned)
            .collect()
    };
    let r = rig(store.clone(), Probe::new(), config()).await?;
    r.close().await?;
    drop(r);
    assert_eq!(
        told(&logs.buf.text()),
        Vec::<String>::new(),
        "none was left live"
    );

    let caps = Caps {
        targets_per_job: 8,
        jobs_per_caller: 8,
        jobs_total: 8,
        ttl_secs: 86_400,
    };
    for (n, who) in ["alice", "bob", "carol"].into_iter().enumerate() {
        let ts = targets(who, 1);
        let job = NewJob {
            id: format!("{:032x}", n + 1),
            caller: who.to_owned(),
            class: CallerClass::Fleet,
            idem_key: idem_key(who, &ts),
            targets: ts
                .iter()
                .map(|t| (t.url.clone(), t.options.to_json()))
                .collect(),
            now: T0 - 10,
        };
        assert_eq!(store.admit(&job, &caps).await?, Admission::Created);
    }
    let (running, done) = (format!("{:032x}", 2), format!("{:032x}", 3));
    assert!(store.start_target(&running, 0, T0 - 9).await?.is_some());
    let result = TargetWrite::Done {
        result: "{\"content\":\"x\"}".into(),
    };
    assert!(
        store
            .finish_target(&done, 0, &result, T0 - 9, Some(JobStatus::Done))
            .await?
    );
    let r = rig(store, Probe::new(), config()).await?;
    r.close().await?;
    let lines = told(&logs.buf.text());
    assert!(
        lines.len() == 1 && lines[0].contains(" INFO ") && lines[0].contains("jobs=2"),
        "the start after them tells of 2 jobs, at info: {lines:?}"
    );
    Ok(())
}

/// After each created job the runner sweeps with the configured TTL (SPEC §7: sweep(now,
/// ttl)): a terminal job whose lease is older than `now - ttl` is deleted, one whose lease is
/// exactly `now - ttl` is kept, and a live job whose lease is as old stays and completes. With
/// a TTL of 100 s and the sweep at `T0 + 10_000`: job `d` ended at `T0 + 9_899` (swept), job `y`
/// at `T0 + 9_900` (kept), job `l` is running since `T0` (kept). A sweep with a shorter TTL
/// (0, or 99) would delete `y`; one with a longer TTL (101) would keep `d`.
pub async fn sweep_after_a_submit_deletes_expired_jobs_but_never_a_live_one(
    store: Arc<dyn BatchStore>,
) -> TestResult {
    let cfg = Config {
        ttl: Duration::from_secs(100),
        ..config()
    };
    let r = rig(store, Probe::new(), cfg).await?;
    // Submitted at T0 (their sweeps find nothing terminal); one worker takes them in turn.
    for job in ["d", "y", "l"] {
        r.probe.hold(&url(job, 0));
    }
    let d = r.submit("alice", "d", 1).await?;
    let y = r.submit("yann", "y", 1).await?;
    let l = r.submit("bob", "l", 2).await?;
    // Each job's last write (its lease) at the time the test sets.
    for (job, id, at) in [("d", &d, T0 + 9_899), ("y", &y, T0 + 9_900)] {
        r.started(&url(job, 0), 1).await?;
        r.clock.set(at);
        r.probe.release(&url(job, 0));
        r.terminal(id).await?;
        assert_eq!(r.row(id).await?.lease, at, "{job} ended at its time");
    }
    r.started(&url("l", 0), 1).await?;
    r.clock.set(T0 + 10_000);
    let c = r.submit("carol", "c", 1).await?;
    assert_eq!(
        r.runner.status(&d).await?,
        None,
        "the done job whose lease is older than now - ttl is swept"
    );
    assert_eq!(
        r.runner.status(&y).await?.map(|v| v.job.status),
        Some(JobStatus::Done),
        "the done job whose lease is now - ttl is kept"
    );
    let vl = r.view(&l).await?;
    assert_eq!(
        vl.job.status,
        JobStatus::Running,
        "the live job is never swept"
    );
    r.probe.release_all();
    assert_eq!(r.terminal(&l).await?.job.status, JobStatus::Done);
    r.terminal(&c).await?;
    r.close().await
}

/// After each stored target the runner evicts down to `max_bytes`: with a budget of 1 byte a
/// finished job is deleted, while a live job stays, keeps its stored targets and completes.
pub async fn evict_after_a_stored_target_deletes_terminal_jobs_but_never_a_live_one(
    store: Arc<dyn BatchStore>,
) -> TestResult {
    let cfg = Config {
        max_bytes: 1,
        ..config()
    };
    let r = rig(store, Probe::new(), cfg).await?;
    let a = r.submit("alice", "a", 1).await?;
    until("a is reported done", || {
        r.hooks.count(JobOutcome::Done) == 1
    })
    .await?;
    r.probe.hold(&url("b", 1));
    let b = r.submit("bob", "b", 2).await?;
    r.started(&url("b", 1), 1).await?;
    assert_eq!(r.runner.status(&a).await?, None, "the done job is evicted");
    let vb = r.view(&b).await?;
    assert_eq!(
        vb.job.status,
        JobStatus::Running,
        "the live job is never evicted"
    );
    assert_eq!(states(&vb), [TargetState::Done, TargetState::Running]);
    assert_eq!(
        vb.targets.first().and_then(|t| t.result.clone()),
        Some(content_of(&url("b", 0)))
    );
    r.probe.release_all();
    until("b is reported done", || {
        r.hooks.count(JobOutcome::Done) == 2
    })
    .await?;
    r.close().await
}

/// Eviction follows every stored target, not only a job's end: a job ended without a stored
/// target (cancelled while queued) stays until the next target of another, still live job is
/// stored, and goes then, while that job runs on.
pub async fn evict_runs_after_every_stored_target_not_only_at_a_jobs_end(
    store: Arc<dyn BatchStore>,
) -> TestResult {
    let cfg = Config {
        max_bytes: 1,
        ..config()
    };
    let r = rig(store, Probe::new(), cfg).await?;
    r.probe.hold(&url("b", 0));
    r.probe.hold(&url("b", 1));
    let b = r.submit("bob", "b", 2).await?;
    r.started(&url("b", 0), 1).await?;
    let c = r.submit("carol", "c", 1).await?;
    assert!(r.runner.cancel(&c).await, "c is cancelled while queued");
    assert_eq!(
        r.view(&c).await?.job.status,
        JobStatus::Cancelled,
        "no target stored since: nothing evicted yet"
    );
    r.probe.release(&url("b", 0));
    // b1 starts once b0's outcome is stored and the store evicted.
    r.started(&url("b", 1), 1).await?;
    assert_eq!(
        r.runner.status(&c).await?,
        None,
        "evicted after b0 was stored, b still live"
    );
    assert_eq!(r.view(&b).await?.job.status, JobStatus::Running);
    r.probe.release_all();
    // Evicted as it ends (the budget is 1 byte): its end is known from the hooks.
    until("b is reported done", || {
        r.hooks.count(JobOutcome::Done) == 1
    })
    .await?;
    r.close().await
}

/// Two workers under a budget of 1 byte: job a (2 targets) cancelled with a0 held in flight,
/// then job b (1) run to its end beside it, b kept (the evict after b0 put off for a0). The
/// rig and a's and b's ids.
async fn b_done_beside_a_cancelled_a0_in_flight(
    store: Arc<dyn BatchStore>,
    probe: Probe,
) -> Res<(Rig, String, String)> {
    let cfg = Config {
        max_bytes: 1,
        workers: 2,
        ..config()
    };
    let r = rig(store, probe, cfg).await?;
    r.probe.hold(&url("a", 0));
    let a = r.submit("alice", "a", 2).await?;
    r.started(&url("a", 0), 1).await?;
    assert!(
        r.runner.cancel(&a).await,
        "a is cancelled with a0 in flight"
    );
    let b = r.submit("bob", "b", 1).await?;
    // b's end is reported after the evict that follows its stored target.
    until("b is reported done", || {
        r.hooks.count(JobOutcome::Done) == 1
    })
    .await?;
    assert_eq!(
        r.view(&b).await?.job.status,
        JobStatus::Done,
        "the evict after b0 waits for a0"
    );
    Ok((r, a, b))
}

/// SPEC §5 beside §7: a cancelled job's target in flight finishes and is stored even under a
/// budget that evicts every terminal job. The store evicts oldest first, so the evict after
/// another job's stored target waits while the cancelled job (terminal, but with its target
/// in flight) would go first; the evict after that target is stored deletes both. No outcome
/// is lost to a job deleted under it (the runner would warn `store: target missing, outcome
/// not stored`).
pub async fn evict_leaves_a_cancelled_job_until_its_target_in_flight_is_stored(
    store: Arc<dyn BatchStore>,
) -> TestResult {
    let logs = LogCapture::start();
    let (r, a, b) = b_done_beside_a_cancelled_a0_in_flight(store, Probe::new()).await?;
    let v = r.view(&a).await?;
    assert_eq!(v.job.status, JobStatus::Cancelled);
    assert_eq!(
        states(&v),
        [TargetState::Running, TargetState::Pending],
        "a is kept while a0 is in flight"
    );
    r.probe.release(&url("a", 0));
    until("a and b are evicted once a0 is stored", || {
        matches!(block_on(r.store.job(&a)), Ok(None))
            && matches!(block_on(r.store.job(&b)), Ok(None))
    })
    .await?;
    r.close().await?;
    let lost = logs.buf.warns_with("target missing");
    assert!(lost.is_empty(), "an outcome was not stored: {lost:?}");
    Ok(())
}

/// SPEC §7 after §5: the evicts held back while a cancelled job's target was in flight run
/// again once that target is stored: the job after it is evicted as it ends (a budget of 1
/// byte), not kept for good.
pub async fn evict_runs_again_once_a_cancelled_jobs_target_in_flight_is_stored(
    store: Arc<dyn BatchStore>,
) -> TestResult {
    let cfg = Config {
        max_bytes: 1,
        ..config()
    };
    let r = rig(store, Probe::new(), cfg).await?;
    r.probe.hold(&url("a", 0));
    let a = r.submit("alice", "a", 2).await?;
    r.started(&url("a", 0), 1).await?;
    assert!(
        r.runner.cancel(&a).await,
        "a is cancelled with a0 in flight"
    );
    r.probe.release(&url("a", 0));
    until("a is evicted once a0 is stored", || {
        matches!(block_on(r.store.job(&a)), Ok(None))
    })
    .await?;
    // One worker: b0 starts only after the worker is done with a0.
    let b = r.submit("bob", "b", 1).await?;
    // b's end is reported after the evict that follows its stored target.
    until("b is reported done", || {
        r.hooks.count(JobOutcome::Done) == 1
    })
    .await?;
    assert_eq!(
        r.runner.status(&b).await?,
        None,
        "the evict after b0 deletes b: nothing holds it back any more"
    );
    r.close().await
}

/// A probe whose fetch of a0 answers busy (a cancelled job's busy answer ends it with no evict
/// after it); every other target is fetched.
fn a0_busy() -> Probe {
    Probe::scripted(|u, _| {
        if u == url("a", 0) {
            Act::Fail(FetchError::RetryLater("busy".into()))
        } else {
            Act::Ok(content_of(u))
        }
    })
}

/// Two workers over `shared`: job a (2 targets) with a0 held in flight, job b (1) whose evict,
/// after b0, finds no cancelled job and is held in the store; then a cancel of a, in a task,
/// reported and waiting for that evict to write. The rig, a's and b's ids, the cancel's task.
async fn a_cancel_behind_a_held_evict(
    shared: &Arc<Shared>,
    probe: Probe,
    max_bytes: u64,
) -> Res<(Rig, String, String, tokio::task::JoinHandle<bool>)> {
    let cfg = Config {
        max_bytes,
        workers: 2,
        ..config()
    };
    let r = rig(shared.clone(), probe, cfg).await?;
    r.probe.hold(&url("a", 0));
    let a = r.submit("alice", "a", 2).await?;
    r.started(&url("a", 0), 1).await?;
    shared.hold_evict();
    let b = r.submit("bob", "b", 1).await?;
    shared.evicts_held(1).await?;
    let cancelling = {
        let (runner, a) = (r.runner.clone(), a.clone());
        tokio::spawn(async move { runner.cancel(&a).await })
    };
    // Reported before the write, which waits for the evict.
    until("a is reported cancelled", || {
        r.hooks.count(JobOutcome::Cancelled) == 1
    })
    .await?;
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(
        !cancelling.is_finished(),
        "the cancel waits for the evict under way"
    );
    Ok((r, a, b, cancelling))
}

/// SPEC §5 beside §7, two workers: an evict that began (found no cancelled job with a target
/// in flight) and is still in the store when a job with its target in flight is cancelled:
/// the cancel writes `cancelled` only once that evict is over, so the evict cannot delete the
/// job, whose target is then stored.
pub async fn a_cancel_during_an_evict_under_way_writes_once_the_evict_is_over(
    store: Arc<dyn BatchStore>,
) -> TestResult {
    let logs = LogCapture::start();
    let shared = Arc::new(Shared::new(store));
    let (r, a, b, cancelling) = a_cancel_behind_a_held_evict(&shared, Probe::new(), 1).await?;
    assert_eq!(
        shared.job(&a).await?.map(|j| j.status),
        Some(JobStatus::Running),
        "not yet written cancelled"
    );
    shared.release_evict();
    assert!(within("the cancel", cancelling).await??);
    assert_eq!(shared.job(&b).await?, None, "the evict under way deleted b");
    let v = r.view(&a).await?;
    assert_eq!(v.job.status, JobStatus::Cancelled);
    assert_eq!(states(&v), [TargetState::Running, TargetState::Pending]);
    r.probe.release(&url("a", 0));
    until("a is evicted once a0 is stored", || {
        matches!(block_on(r.store.job(&a)), Ok(None))
    })
    .await?;
    r.close().await?;
    let lost = logs.buf.warns_with("target missing");
    assert!(lost.is_empty(), "an outcome was not stored: {lost:?}");
    Ok(())
}

/// SPEC §5, two workers: a cancel waiting for an evict under way to write `cancelled` writes
/// as soon as the job's target in flight is stored (the job is then out of risk), without
/// waiting for that evict or any begun since: evicts that overlap would hold it off for ever.
pub async fn a_cancel_waits_for_no_evict_once_its_target_in_flight_is_stored(
    store: Arc<dyn BatchStore>,
) -> TestResult {
    let shared = Arc::new(Shared::new(store));
    let (r, a, _b, cancelling) =
        a_cancel_behind_a_held_evict(&shared, a0_busy(), config().max_bytes).await?;
    r.probe.release(&url("a", 0));
    until(
        "a is written cancelled, b0's evict still held",
        || matches!(block_on(shared.job(&a)), Ok(Some(j)) if j.status == JobStatus::Cancelled),
    )
    .await?;
    assert!(shared.evicts_held_now() >= 1, "b0's evict is still held");
    // (The cancel then makes an evict of its own, held too.)
    shared.release_evict();
    assert!(within("the cancel", cancelling).await??);
    r.settled().await?;
    r.close().await
}

/// SPEC §5: an evict put off for a cancelled job's target in flight is made by the worker that
/// stores that target before it takes the next one, so a close that begins during it still
/// stops the next target from starting (the job of it ends `failed`, `runner closed`).
pub async fn a_close_during_a_put_off_evict_starts_nothing_more(
    store: Arc<dyn BatchStore>,
) -> TestResult {
    let shared = Arc::new(Shared::new(store));
    let cfg = Config {
        workers: 2,
        ..config()
    };
    // a0's busy answer ends the cancelled job with no evict of its own: the next evict is the
    // one put off.
    let r = rig(shared.clone(), a0_busy(), cfg).await?;
    r.probe.hold(&url("a", 0));
    let a = r.submit("alice", "a", 1).await?;
    r.started(&url("a", 0), 1).await?;
    assert!(r.runner.cancel(&a).await);
    // b0's evict is put off while a0 is in flight.
    let _b = r.submit("bob", "b", 1).await?;
    until("b is reported done", || {
        r.hooks.count(JobOutcome::Done) == 1
    })
    .await?;
    // Both workers busy (a0, c0): d waits.
    r.probe.hold(&url("c", 0));
    let _c = r.submit("carol", "c", 1).await?;
    r.started(&url("c", 0), 1).await?;
    let d = r.submit("dave", "d", 1).await?;
    shared.hold_evict();
    r.probe.release(&url("a", 0));
    shared.evicts_held(1).await?;
    let closing = r.spawn_close();
    until_close_began(&r).await?;
    shared.release_evict();
    r.probe.release(&url("c", 0));
    within("close", closing).await??;
    assert_eq!(
        r.probe.attempts(&url("d", 0)),
        0,
        "d0 started after close began"
    );
    let v = r.view(&d).await?;
    assert_eq!(v.job.status, JobStatus::Failed);
    assert_eq!(v.job.error, "runner closed");
    Ok(())
}

/// SPEC §7 beside §5: a cancel that comes as its job's target in flight is stored (its evict
/// under way, which finds the job still running and keeps it) writes `cancelled` once that
/// evict is over, and then makes the evict it would have been: the job does not stay over the
/// budget with the runner idle.
pub async fn a_cancel_as_its_target_is_stored_leaves_no_job_over_the_budget(
    store: Arc<dyn BatchStore>,
) -> TestResult {
    let shared = Arc::new(Shared::new(store));
    let cfg = Config {
        max_bytes: 1,
        ..config()
    };
    let r = rig(shared.clone(), Probe::new(), cfg).await?;
    r.probe.hold(&url("a", 0));
    let a = r.submit("alice", "a", 2).await?;
    r.started(&url("a", 0), 1).await?;
    shared.hold_evict();
    r.probe.release(&url("a", 0));
    // a0 is stored; the evict after it is held in the store.
    shared.evicts_held(1).await?;
    let cancelling = {
        let (runner, a) = (r.runner.clone(), a.clone());
        tokio::spawn(async move { runner.cancel(&a).await })
    };
    until("a is reported cancelled", || {
        r.hooks.count(JobOutcome::Cancelled) == 1
    })
    .await?;
    shared.release_evict();
    assert!(within("the cancel", cancelling).await??);
    until("a is evicted after its cancel", || {
        matches!(block_on(r.store.job(&a)), Ok(None))
    })
    .await?;
    r.close().await
}

/// SPEC §7, two workers: the evict put off while a cancelled job's target was in flight is
/// made once that target is stored, even as a busy answer (a write back to pending, after
/// which no evict follows of itself), not kept back for good with the runner idle.
pub async fn an_evict_put_off_for_a_cancelled_target_that_comes_back_busy_is_made_up(
    store: Arc<dyn BatchStore>,
) -> TestResult {
    let (r, a, b) = b_done_beside_a_cancelled_a0_in_flight(store, a0_busy()).await?;
    r.probe.release(&url("a", 0));
    until(
        "a and b are evicted once a0's busy answer is stored",
        || {
            matches!(block_on(r.store.job(&a)), Ok(None))
                && matches!(block_on(r.store.job(&b)), Ok(None))
        },
    )
    .await?;
    r.close().await
}

/// SPEC §5 beside §7: the sweep after a submit leaves a cancelled job whose target is in flight
/// (its lease, the cancel's, past the ttl), as an evict does; the sweep is made once that
/// target is stored, and deletes the expired jobs it would have.
pub async fn a_sweep_leaves_a_cancelled_job_until_its_target_in_flight_is_stored(
    store: Arc<dyn BatchStore>,
) -> TestResult {
    let logs = LogCapture::start();
    let cfg = Config {
        ttl: Duration::from_secs(10),
        ..config()
    };
    let r = rig(store, Probe::new(), cfg).await?;
    let done = r.submit("carol", "c", 1).await?;
    until("c is reported done", || {
        r.hooks.count(JobOutcome::Done) == 1
    })
    .await?;
    r.probe.hold(&url("a", 0));
    let a = r.submit("alice", "a", 2).await?;
    r.started(&url("a", 0), 1).await?;
    assert!(
        r.runner.cancel(&a).await,
        "a is cancelled with a0 in flight"
    );
    // Both leases (c's end, a's cancel) are T0: expired by the time of b's submit.
    r.clock.set(T0 + 11);
    let b = r.submit("bob", "b", 1).await?;
    let v = r.view(&a).await?;
    assert_eq!(v.job.status, JobStatus::Cancelled, "a is not swept");
    assert_eq!(states(&v), [TargetState::Running, TargetState::Pending]);
    assert!(
        r.store.job(&done).await?.is_some(),
        "the sweep is put off whole"
    );
    r.probe.release(&url("a", 0));
    until("the sweep put off deletes c once a0 is stored", || {
        matches!(block_on(r.store.job(&done)), Ok(None))
    })
    .await?;
    r.settled().await?;
    let v = r.view(&a).await?;
    assert_eq!(
        states(&v),
        [TargetState::Done, TargetState::Pending],
        "a0 stored, a kept (a0's write set its lease to now)"
    );
    assert_eq!(r.view(&b).await?.job.status, JobStatus::Done);
    r.close().await?;
    let lost = logs.buf.warns_with("target missing");
    assert!(lost.is_empty(), "an outcome was not stored: {lost:?}");
    Ok(())
}

/// SPEC §7: the runner sweeps after each created job, not after a stored target: a terminal
/// job whose lease expired stays in the store while another job's targets are stored (with no
/// sweep put off for a cancelled job's target in flight), until the next created job's sweep
/// deletes it.
pub async fn a_stored_target_sweeps_nothing_until_the_next_created_job(
    store: Arc<dyn BatchStore>,
) -> TestResult {
    let cfg = Config {
        ttl: Duration::from_secs(10),
        ..config()
    };
    let r = rig(store, Probe::new(), cfg).await?;
    let c = r.submit("carol", "c", 1).await?;
    r.terminal(&c).await?;
    assert_eq!(r.row(&c).await?.lease, T0, "c ended at T0");
    // a is created at T0 (its sweep keeps c), and its targets are stored at T0 + 11, when c's
    // lease has expired.
    r.probe.hold(&url("a", 0));
    let a = r.submit("alice", "a", 2).await?;
    r.started(&url("a", 0), 1).await?;
    r.clock.set(T0 + 11);
    r.probe.release(&url("a", 0));
    assert_eq!(r.terminal(&a).await?.job.status, JobStatus::Done);
    r.settled().await?;
    assert!(
        r.store.job(&c).await?.is_some(),
        "c is kept: no job was created since its lease expired"
    );
    let b = r.submit("bob", "b", 1).await?;
    assert_eq!(
        r.store.job(&c).await?,
        None,
        "the sweep after b's creation deletes c"
    );
    r.terminal(&b).await?;
    r.close().await
}

/// [`Hooks`] that read the store as they are called: for `job` (a terminal outcome) the status
/// the store holds for the job being watched, for `target` whether the store still holds it.
struct StoreReader {
    store: Arc<dyn BatchStore>,
    /// The job watched, once its submit has returned.
    id: Mutex<Option<String>>,
    /// For each terminal `job` call: the outcome, and the watched job's stored status.
    ended: Mutex<Vec<(JobOutcome, Option<JobStatus>)>>,
    /// For each `target` call: whether the watched job was in the store.
    held: Mutex<Vec<bool>>,
}

impl StoreReader {
    fn new(store: Arc<dyn BatchStore>) -> Arc<Self> {
        Arc::new(StoreReader {
            store,
            id: Mutex::new(None),
            ended: Mutex::new(Vec::new()),
            held: Mutex::new(Vec::new()),
        })
    }

    /// Watches job `id` from now on.
    fn watch(&self, id: &str) {
        *lock(&self.id) = Some(id.to_owned());
    }

    /// The watched job's row as the store holds it now (`Err` if the store failed).
    fn read(&self) -> Result<Option<JobRow>, String> {
        let Some(id) = lock(&self.id).clone() else {
            return Err("no job watched yet".into());
        };
        block_on(self.store.job(&id)).map_err(|e| e.to_string())
    }
}

impl Hooks for StoreReader {
    fn job(&self, outcome: JobOutcome) {
        if matches!(outcome, JobOutcome::Created | JobOutcome::Reused) {
            return;
        }
        let status = self.read().ok().flatten().map(|row| row.status);
        lock(&self.ended).push((outcome, status));
    }
    fn target(&self, _err: Option<&FetchError>, _elapsed: Duration, _result_bytes: usize) {
        let held = matches!(self.read(), Ok(Some(_)));
        lock(&self.held).push(held);
    }
}

/// SPEC §4: a job's terminal status is stored, then `hooks.job` reports it: a hook that reads
/// the store finds the job done, partial or failed already (the job's last target and its
/// status are one write).
pub async fn a_jobs_end_is_stored_before_the_hooks_report_it(
    store: Arc<dyn BatchStore>,
) -> TestResult {
    let hooks = StoreReader::new(store.clone());
    let probe = Probe::scripted(|url, _| {
        if url.ends_with("/fail") {
            Act::Fail(FetchError::Other("no".into()))
        } else {
            Act::Ok(content_of(url))
        }
    });
    let cfg = Config {
        hooks: hooks.clone(),
        ..config()
    };
    let runner = Runner::start(store, probe.clone(), cfg).await?;
    let jobs = [
        (
            "done",
            vec!["https://t.example/d/0", "https://t.example/d/1"],
        ),
        (
            "partial",
            vec!["https://t.example/p/0", "https://t.example/p/fail"],
        ),
        ("failed", vec!["https://t.example/f/fail"]),
    ];
    for (i, (_, urls)) in jobs.iter().enumerate() {
        // Held until the job is watched, so that its end comes after.
        probe.hold(urls[0]);
        let s = runner
            .submit(
                caller("ann"),
                CallerClass::Fleet,
                urls.iter().map(|u| target(u)).collect(),
            )
            .await?;
        hooks.watch(&s.id);
        probe.release(urls[0]);
        until("the job's end is reported", || {
            lock(&hooks.ended).len() == i + 1
        })
        .await?;
    }
    runner.close().await;
    let ended = lock(&hooks.ended).clone();
    assert_eq!(
        ended,
        [
            (JobOutcome::Done, Some(JobStatus::Done)),
            (JobOutcome::Partial, Some(JobStatus::Partial)),
            (JobOutcome::Failed, Some(JobStatus::Failed)),
        ],
        "what the store held when hooks.job reported each job's end"
    );
    Ok(())
}

/// SPEC §4: a stored target's `hooks.target` comes before the evict that follows it: with a
/// budget of one byte, the hook still finds the job its target ended, which that evict then
/// deletes.
pub async fn a_targets_hook_comes_before_the_evict_after_it(
    store: Arc<dyn BatchStore>,
) -> TestResult {
    let hooks = StoreReader::new(store.clone());
    let probe = Probe::new();
    let cfg = Config {
        hooks: hooks.clone(),
        max_bytes: 1,
        ..config()
    };
    let runner = Runner::start(store.clone(), probe.clone(), cfg).await?;
    let u = "https://t.example/e/0";
    probe.hold(u);
    let s = runner
        .submit(caller("ann"), CallerClass::Fleet, vec![target(u)])
        .await?;
    hooks.watch(&s.id);
    probe.release(u);
    until("the target's hook is called", || {
        !lock(&hooks.held).is_empty()
    })
    .await?;
    until("the job is evicted", || {
        matches!(block_on(store.job(&s.id)), Ok(None))
    })
    .await?;
    runner.close().await;
    assert_eq!(
        *lock(&hooks.held),
        [true],
        "the ended job was in the store when hooks.target was called"
    );
    Ok(())
}

/// A stored target sets its job's lease to the time of its store (SPEC §6: every write of a
/// job bumps the lease to now), and so does a cancel: not the time of the submit.
pub async fn a_stored_target_and_a_cancel_set_the_lease_to_their_time(
    store: Arc<dyn BatchStore>,
) -> TestResult {
    let r = rig(store, Probe::new(), config()).await?;
    r.probe.hold(&url("a", 0));
    // b's target is held too, so that the cancel finds it live.
    r.probe.hold(&url("b", 0));
    let a = r.submit("alice", "a", 1).await?;
    r.started(&url("a", 0), 1).await?;
    let b = r.submit("bob", "b", 1).await?;
    r.clock.set(T0 + 50);
    r.probe.release(&url("a", 0));
    assert_eq!(r.terminal(&a).await?.job.status, JobStatus::Done);
    r.started(&url("b", 0), 1).await?;
    r.clock.set(T0 + 80);
    assert!(r.runner.cancel(&b).await);
    r.probe.release_all();
    r.terminal(&b).await?;
    let lease = |id: &str| {
        let store = r.store.clone();
        let id = id.to_owned();
        async move { store.job(&id).await.map(|row| row.map(|j| j.lease)) }
    };
    assert_eq!(
        lease(&a).await?,
        Some(T0 + 50),
        "a's lease is its target's store"
    );
    let b_lease = lease(&b).await?;
    assert!(
        b_lease.is_some_and(|l| l >= T0 + 80),
        "b's lease is its cancel's time or later: {b_lease:?}"
    );
    r.close().await
}

/// A cancel lets the target in flight finish (SPEC §5): the fetch's token is not cancelled by
/// it (only close cancels that), so a fetch that heeds its token still stores its result.
pub async fn a_cancel_lets_the_inflight_fetch_finish_with_its_token_uncancelled(
    store: Arc<dyn BatchStore>,
) -> TestResult {
    let gate = Arc::new(Semaphore::new(0));
    let saw_cancelled = Arc::new(Mutex::new(None::<bool>));
    let fetch = {
        let (gate, saw) = (gate.clone(), saw_cancelled.clone());
        move |_c: Arc<Caller>, t: Target, cancel: CancellationToken| {
            let (gate, saw) = (gate.clone(), saw.clone());
            async move {
                let held = gate
                    .acquire()
                    .await
                    .map_err(|_| FetchError::Other("gate".into()))?;
                held.forget();
                *lock(&saw) = Some(cancel.is_cancelled());
                if cancel.is_cancelled() {
                    return Err(FetchError::Other("cancelled".into()));
                }
                Ok(content_of(&t.url))
            }
        }
    };
    let cfg = Config {
        clock: Arc::new(ManualClock::new(T0)),
        ..config()
    };
    let runner = Runner::start(store, fetch, cfg).await?;
    let s = runner
        .submit(caller("alice"), CallerClass::Fleet, targets("a", 2))
        .await?;
    until_status(&runner, &s.id, "is running", |v| {
        v.targets
            .first()
            .is_some_and(|t| t.status == TargetState::Running)
    })
    .await?;
    assert!(runner.cancel(&s.id).await);
    gate.add_permits(1);
    let v = until_status(&runner, &s.id, "has its first target stored", |v| {
        v.targets
            .first()
            .is_some_and(|t| t.status != TargetState::Running)
    })
    .await?;
    assert_eq!(
        *lock(&saw_cancelled),
        Some(false),
        "the fetch's token was cancelled"
    );
    assert_eq!(v.job.status, JobStatus::Cancelled);
    assert_eq!(states(&v), [TargetState::Done, TargetState::Pending]);
    assert_eq!(
        v.targets.first().and_then(|t| t.result.clone()),
        Some(content_of(&url("a", 0)))
    );
    runner.close().await;
    Ok(())
}

// ---- §8 errors, panics, logs --------------------------------------------------------------

/// The distinctive panic value of the panic test: it must appear nowhere.
pub const PANIC_VALUE: &str = "panic-value-5d1e9b-never-stored-or-logged";

/// A [`Clock`] that panics, with [`PANIC_VALUE`], once `on` is set.
struct PanickingClock {
    on: AtomicBool,
}

impl Clock for PanickingClock {
    fn now_unix(&self) -> i64 {
        if self.on.load(Ordering::SeqCst) {
            std::panic::panic_any(PANIC_VALUE.to_owned());
        }
        T0
    }
}

/// An embedder's clock that panics ends no worker and fails no call: the runner logs it (at
/// warn the first time, then at debug; never the panic's value) and takes the system's time
/// instead. A runner started on
/// it, a job submitted, run to `done` and touched, then a second job, all while it panics at
/// every read: both jobs end `done`, their leases are the system's time, not the clock's `T0`.
pub async fn a_panicking_clock_is_logged_and_the_system_clock_answers(
    store: Arc<dyn BatchStore>,
) -> TestResult {
    let logs = LogCapture::start();
    let clock = Arc::new(PanickingClock {
        on: AtomicBool::new(true),
    });
    let cfg = Config {
        clock: clock.clone(),
        ..config()
    };
    let runner = Runner::start(store.clone(), Probe::new(), cfg).await?;
    let before = rota::SystemClock.now_unix();
    let mut ids = Vec::new();
    for (who, job) in [("alice", "a"), ("bob", "b")] {
        let s = runner
            .submit(caller(who), CallerClass::Fleet, targets(job, 2))
            .await?;
        let v = until_status(&runner, &s.id, "is terminal", |v| {
            v.job.status.is_terminal()
        })
        .await?;
        assert_eq!(v.job.status, JobStatus::Done, "job {job} ends done");
        runner.touch(&s.id).await;
        ids.push(s.id);
    }
    let after = rota::SystemClock.now_unix();
    for id in &ids {
        let Some(row) = store.job(id).await? else {
            panic!("job {id} is stored");
        };
        assert!(
            (before..=after).contains(&row.lease) && (before..=after).contains(&row.created_at),
            "the system's time, {before}..={after}, not the clock's: {row:?}"
        );
    }
    clock.on.store(false, Ordering::SeqCst);
    within("close", runner.close()).await?;
    let text = logs.buf.text();
    assert!(
        text.contains("the clock panicked"),
        "the panic is logged: {text}"
    );
    // At warn once (start's read), then at debug.
    let lines = |level: &str| {
        text.lines()
            .filter(|l| l.contains(level) && l.contains("the clock panicked"))
            .count()
    };
    assert_eq!(lines("WARN"), 1, "{text}");
    assert!(lines("DEBUG") >= 4, "{text}");
    assert!(!text.contains(PANIC_VALUE), "its value is not");
    Ok(())
}

/// A panicking fetch is stored as `failed` with the error `internal error` and no hint; the
/// job and the runner go on; the panic's value is in neither the store nor the logs.
pub async fn a_panic_is_stored_as_internal_error_and_its_value_is_never_kept(
    store: Arc<dyn BatchStore>,
) -> TestResult {
    let logs = LogCapture::start();
    let probe = Probe::scripted(|url, _| {
        if url.ends_with("/0") {
            Act::Panic(PANIC_VALUE.to_owned())
        } else {
            Act::Ok(content_of(url))
        }
    });
    let r = rig(store, probe, config()).await?;
    let a = r.submit("alice", "a", 2).await?;
    let v = r.terminal(&a).await?;
    assert_eq!(
        v.job.status,
        JobStatus::Partial,
        "the job went on after the panic"
    );
    let t0 = v.targets.first();
    assert_eq!(
        t0.map(|t| (t.status, t.error.as_str(), t.hint.as_str())),
        Some((TargetState::Failed, "internal error", ""))
    );
    let b = r.submit("bob", "b", 2).await?;
    let vb = r.terminal(&b).await?;
    assert_eq!(
        vb.job.status,
        JobStatus::Partial,
        "the runner survived the panic"
    );
    r.close().await?;

    panic_value_kept_nowhere(&*r.store, [&a, &b], &logs).await
}

/// Fails if [`PANIC_VALUE`] is in the rows of jobs `ids` or in `logs`, or if the logs do not
/// name the first job.
async fn panic_value_kept_nowhere(
    store: &dyn BatchStore,
    ids: [&str; 2],
    logs: &LogCapture,
) -> TestResult {
    for id in ids {
        let stored = format!("{:?} {:?}", store.job(id).await?, store.targets(id).await?);
        assert!(!stored.contains(PANIC_VALUE), "the panic value is stored");
    }
    let text = logs.buf.text();
    assert!(text.contains(ids[0]), "the logs name the job");
    assert!(
        !text.contains(PANIC_VALUE),
        "the panic value is logged:\n{text}"
    );
    Ok(())
}

/// A `Fetch` written by hand (no `#[async_trait]` on the impl) that panics with
/// [`PANIC_VALUE`] before it makes its future, for a url ending in `/0`.
struct PanicsBeforeItsFuture;

impl Fetch for PanicsBeforeItsFuture {
    fn fetch<'s, 'f>(
        &'s self,
        _caller: Arc<Caller>,
        target: Target,
        _cancel: CancellationToken,
    ) -> std::pin::Pin<Box<dyn Future<Output = Result<TargetResult, FetchError>> + Send + 'f>>
    where
        's: 'f,
        Self: 'f,
    {
        if target.url.ends_with("/0") {
            std::panic::panic_any(PANIC_VALUE.to_owned());
        }
        Box::pin(async move { Ok(content_of(&target.url)) })
    }
}

/// A fetch that panics before its future exists (in the call itself) is caught as well: the
/// target is stored `internal error`, the job and the runner go on, and the panic's value is
/// neither stored nor logged.
pub async fn a_panic_before_the_fetch_future_exists_is_caught_too(
    store: Arc<dyn BatchStore>,
) -> TestResult {
    let logs = LogCapture::start();
    let runner = Runner::start(store.clone(), PanicsBeforeItsFuture, config()).await?;
    let a = runner
        .submit(caller("alice"), CallerClass::Fleet, targets("a", 2))
        .await?
        .id;
    let v = until_status(&runner, &a, "is terminal", |v| v.job.status.is_terminal()).await?;
    assert_eq!(v.job.status, JobStatus::Partial, "the job went on");
    assert_eq!(
        v.targets
            .first()
            .map(|t| (t.status, t.error.as_str(), t.hint.as_str())),
        Some((TargetState::Failed, "internal error", ""))
    );
    let b = runner
        .submit(caller("bob"), CallerClass::Fleet, targets("b", 2))
        .await?
        .id;
    let vb = until_status(&runner, &b, "is terminal", |v| v.job.status.is_terminal()).await?;
    assert_eq!(vb.job.status, JobStatus::Partial, "the runner went on");
    within("close", runner.close()).await?;
    panic_value_kept_nowhere(&*store, [&a, &b], &logs).await
}

/// A `finish_target` that fails is logged at warn with the job id; the job goes on with its
/// next target and ends, and the outcomes the store accepted are there. The job ends `failed`
/// with `ERR_NOT_STORED`, not `done`: that would show a job ended whole with a target that
/// never got its outcome.
pub async fn a_failing_finish_target_is_logged_at_warn_and_the_job_goes_on(
    store: Arc<dyn BatchStore>,
) -> TestResult {
    let logs = LogCapture::start();
    let (f, dyn_store) = faulty(store);
    let r = rig(dyn_store, Probe::new(), config()).await?;
    r.probe.hold(&url("a", 1));
    f.fail(Op::FinishTarget);
    let a = r.submit("alice", "a", 2).await?;
    r.started(&url("a", 1), 1).await?;
    f.heal(Op::FinishTarget);
    r.probe.release_all();
    until("a is reported terminal", || r.hooks.terminal() == 1).await?;
    assert!(
        !logs.buf.warns_with(&a).is_empty(),
        "no warn names job {a}:\n{}",
        logs.buf.text()
    );
    let v = r.terminal(&a).await?;
    assert_eq!(
        states(&v),
        [TargetState::Running, TargetState::Done],
        "a0's outcome is not stored, a1's accepted one is"
    );
    assert_eq!(
        (v.job.status, v.job.error.as_str()),
        (JobStatus::Failed, rota::machine::ERR_NOT_STORED)
    );
    // The hooks say what the store says.
    assert_eq!(
        (
            r.hooks.count(JobOutcome::Done),
            r.hooks.count(JobOutcome::Failed)
        ),
        (0, 1)
    );
    // The next job, all stored, ends done.
    let b = r.submit("bob", "b", 2).await?;
    assert_eq!(r.terminal(&b).await?.job.status, JobStatus::Done);
    r.close().await
}

/// A job whose last target cannot be stored (finish_target keeps failing) still ends: it is not
/// left live in the store forever, holding its caller's cap.
pub async fn a_job_whose_final_write_fails_still_ends_in_the_store(
    store: Arc<dyn BatchStore>,
) -> TestResult {
    let logs = LogCapture::start();
    let (f, dyn_store) = faulty(store);
    let cfg = Config {
        jobs_per_caller: 1,
        ..config()
    };
    let r = rig(dyn_store, Probe::new(), cfg).await?;
    f.fail(Op::FinishTarget);
    let a = r.submit("alice", "a", 1).await?;
    until("a is reported terminal", || r.hooks.terminal() == 1).await?;
    assert!(!logs.buf.warns_with(&a).is_empty(), "no warn names job {a}");
    // The runner reports a job terminal only after its store writes for it have returned.
    let row = f.inner().job(&a).await?;
    let status = row.as_ref().map(|r| r.status);
    assert_eq!(
        row.as_ref().map(|r| r.error.as_str()),
        Some(rota::machine::ERR_NOT_STORED),
        "job a's outcome is not stored, so it is not done"
    );
    f.heal_all();
    let again = r.submit_targets("alice", targets("b", 1)).await;
    r.close().await?;
    assert!(
        status.is_some_and(JobStatus::is_terminal),
        "job a stays {status:?} in the store after the runner reported it terminal"
    );
    assert!(again.is_ok(), "the caller's cap is still held: {again:?}");
    Ok(())
}

/// A busy answer whose write (back to pending) failed loses no outcome: the target is tried
/// again, its outcome stored, and the job ends `done`.
pub async fn a_busy_answer_whose_write_failed_loses_no_outcome(
    store: Arc<dyn BatchStore>,
) -> TestResult {
    let (f, dyn_store) = faulty(store);
    let probe = Probe::busy_once();
    // Time enough to heal the store between the busy answer and the next try.
    let cfg = Config {
        retry_wait: Duration::from_secs(1),
        ..config()
    };
    let r = rig(dyn_store, probe, cfg).await?;
    f.fail(Op::FinishTarget);
    let a = r.submit("alice", "a", 1).await?;
    until("the busy answer's write has failed", || f.injected() >= 1).await?;
    f.heal(Op::FinishTarget);
    let v = r.terminal(&a).await?;
    assert_eq!((v.job.status, v.job.error.as_str()), (JobStatus::Done, ""));
    assert_eq!(r.probe.attempts(&url("a", 0)), 2);
    r.close().await
}

/// A `start_target` that fails is logged at warn with the job id, and the job still ends; once
/// the store heals, other jobs run as usual.
pub async fn a_failing_start_target_is_logged_at_warn_and_the_job_goes_on(
    store: Arc<dyn BatchStore>,
) -> TestResult {
    let logs = LogCapture::start();
    let (f, dyn_store) = faulty(store);
    let r = rig(dyn_store, Probe::new(), config()).await?;
    f.fail(Op::StartTarget);
    let a = r.submit("alice", "a", 2).await?;
    until("a is reported terminal", || r.hooks.terminal() == 1).await?;
    assert!(!logs.buf.warns_with(&a).is_empty(), "no warn names job {a}");
    let v = r.terminal(&a).await?;
    assert_eq!(v.job.targets_done, 2, "both outcomes were stored");
    f.heal_all();
    let b = r.submit("bob", "b", 2).await?;
    assert_eq!(r.terminal(&b).await?.job.status, JobStatus::Done);
    r.close().await
}

/// A `set_status` that fails (on cancel and on close) is logged at warn with the job id; the
/// runner goes on, other jobs complete and close returns.
pub async fn a_failing_set_status_is_logged_at_warn_and_survived(
    store: Arc<dyn BatchStore>,
) -> TestResult {
    let logs = LogCapture::start();
    let (f, dyn_store) = faulty(store);
    let r = rig(dyn_store, Probe::new(), config()).await?;
    r.probe.hold(&url("a", 0));
    let a = r.submit("alice", "a", 2).await?;
    r.started(&url("a", 0), 1).await?;
    f.fail(Op::SetStatus);
    r.runner.cancel(&a).await;
    assert!(!logs.buf.warns_with(&a).is_empty(), "no warn names job {a}");
    r.probe.release_all();
    let b = r.submit("bob", "b", 2).await?;
    assert_eq!(r.terminal(&b).await?.job.status, JobStatus::Done);
    r.probe.hold(&url("c", 0));
    let c = r.submit("carol", "c", 1).await?;
    let d = r.submit("dave", "d", 1).await?;
    r.started(&url("c", 0), 1).await?;
    let closing = r.spawn_close();
    until("close cancels the token", || {
        r.probe
            .calls()
            .last()
            .is_some_and(|c| c.cancel.is_cancelled())
    })
    .await?;
    r.probe.release_all();
    within("close", closing).await??;
    assert!(!logs.buf.warns_with(&d).is_empty(), "no warn names job {d}");
    assert!(f.injected() > 0);
    let vc = r.view(&c).await?;
    assert_eq!(states(&vc), [TargetState::Done], "c0's outcome is stored");
    Ok(())
}

/// A runner on a [`faulty`] `store` that lets each caller one live job, alice's job `a` of two
/// targets submitted and its first target held in its fetch; the fault switches, the rig and
/// `a`'s id.
async fn one_job_per_caller_a_fetching(
    store: Arc<dyn BatchStore>,
) -> Res<(Arc<FaultyStore<Shared>>, Rig, String)> {
    let (f, dyn_store) = faulty(store);
    let cfg = Config {
        jobs_per_caller: 1,
        ..config()
    };
    let r = rig(dyn_store, Probe::new(), cfg).await?;
    r.probe.hold(&url("a", 0));
    let a = r.submit("alice", "a", 2).await?;
    r.started(&url("a", 0), 1).await?;
    Ok((f, r, a))
}

/// A cancel whose status write fails leaves the job live in the store, holding its caller's
/// cap, only until the runner writes the status again: the next submit does so before its
/// admit, whose caps check then no longer counts the job.
pub async fn a_cancel_whose_status_write_fails_is_written_again_and_frees_the_cap(
    store: Arc<dyn BatchStore>,
) -> TestResult {
    let (f, r, a) = one_job_per_caller_a_fetching(store).await?;
    f.fail(Op::SetStatus);
    assert!(r.runner.cancel(&a).await, "a was live");
    let left = f.inner().job(&a).await?.map(|j| j.status);
    f.heal_all();
    let b = r.submit_targets("alice", targets("b", 1)).await;
    let after = f.inner().job(&a).await?.map(|j| j.status);
    r.probe.release_all();
    r.close().await?;
    assert!(
        left.is_some_and(JobStatus::is_live),
        "the failed write left a {left:?}, not live"
    );
    assert!(
        b.is_ok(),
        "alice's cap is still held by the cancelled a: {b:?}"
    );
    assert_eq!(
        after,
        Some(JobStatus::Cancelled),
        "a's status was not written again"
    );
    Ok(())
}

/// [`one_job_per_caller_a_fetching`], then bob's job `b` of two targets, and both cancelled
/// with their status writes kept: a's fail for good (until healed), b's first one failed, as in
/// a blip of the whole store. The faulty store, the rig, a's and b's ids.
async fn two_cancels_kept(
    store: Arc<dyn BatchStore>,
) -> Res<(Arc<FaultyStore<Shared>>, Rig, String, String)> {
    let (f, r, a) = one_job_per_caller_a_fetching(store).await?;
    let b = r.submit("bob", "b", 2).await?;
    f.fail_status_writes_of(&a);
    assert!(r.runner.cancel(&a).await, "a was live");
    f.fail(Op::SetStatus);
    assert!(r.runner.cancel(&b).await, "b was live");
    f.heal(Op::SetStatus);
    Ok((f, r, a, b))
}

/// A status write that keeps failing (a job whose row the store cannot write) holds up no
/// other: a cancel of another job whose write failed once, kept behind it, is written the next
/// time the runner makes its kept writes (here, before the next submit's admit), and its
/// caller's cap is free for that admit.
pub async fn a_status_write_that_keeps_failing_holds_up_no_other(
    store: Arc<dyn BatchStore>,
) -> TestResult {
    let (f, r, a, b) = two_cancels_kept(store).await?;
    let c = r.submit_targets("bob", targets("c", 1)).await;
    let (a_left, b_after) = (
        f.inner().job(&a).await?.map(|j| j.status),
        f.inner().job(&b).await?.map(|j| j.status),
    );
    f.heal_all();
    r.probe.release_all();
    r.close().await?;
    assert!(
        a_left.is_some_and(JobStatus::is_live),
        "a's writes were to fail: {a_left:?}"
    );
    assert_eq!(
        b_after,
        Some(JobStatus::Cancelled),
        "b's cancel, kept behind a's, was not written again"
    );
    assert!(
        c.is_ok(),
        "bob's cap is still held by the cancelled b: {c:?}"
    );
    Ok(())
}

/// A kept status write that fails again stays kept, in a round in which a write kept after it
/// is made: once the store takes it again, the next round (before the next submit's admit)
/// writes it, and the cap its job held is free for that admit.
pub async fn a_kept_write_that_fails_again_stays_kept_while_a_later_one_is_made(
    store: Arc<dyn BatchStore>,
) -> TestResult {
    let (f, r, a, _b) = two_cancels_kept(store).await?;
    // This submit's round: a's write fails again, b's is made.
    let c = r.submit_targets("bob", targets("c", 1)).await;
    let a_between = f.inner().job(&a).await?.map(|j| j.status);
    f.heal_all();
    // This one's round makes a's write, before its admit.
    let d = r.submit_targets("alice", targets("d", 1)).await;
    let a_after = f.inner().job(&a).await?.map(|j| j.status);
    r.probe.release_all();
    r.close().await?;
    assert!(c.is_ok(), "b's cancel was written again: {c:?}");
    assert!(
        a_between.is_some_and(JobStatus::is_live),
        "a's write was to fail again: {a_between:?}"
    );
    assert_eq!(
        a_after,
        Some(JobStatus::Cancelled),
        "a's cancel, failed again, was dropped rather than kept"
    );
    assert!(
        d.is_ok(),
        "alice's cap is still held by the cancelled a: {d:?}"
    );
    Ok(())
}

/// A kept status write that a worker is making again when a submit comes (the worker took it
/// after a stored target; the store has not taken it yet) is made before that submit's admit
/// all the same: the submit makes it too, and its caller's cap, held in the store by the job
/// the write ends, is free for the admit. (Else the admit, which comes once every kept write is
/// made, would find the cancelled job still live and refuse the caller as busy.)
pub async fn a_kept_status_write_another_task_is_making_is_made_before_the_next_admit(
    store: Arc<dyn BatchStore>,
) -> TestResult {
    let (f, r, a) = one_job_per_caller_a_fetching(store).await?;
    let b = r.submit("bob", "b", 1).await?;
    f.fail(Op::SetStatus);
    assert!(r.runner.cancel(&b).await, "b was live");
    f.heal(Op::SetStatus);
    assert!(
        f.inner().job(&b).await?.is_some_and(|j| j.status.is_live()),
        "b's cancel was to be kept, unwritten"
    );
    f.inner().hold_set_status();
    // a0 stored, the worker makes the kept write: held on its way to the store.
    r.probe.release(&url("a", 0));
    f.inner().statuses_held(1).await?;
    let runner = r.runner.clone();
    let submitting = tokio::spawn(async move {
        runner
            .submit(caller("bob"), CallerClass::Fleet, targets("c", 1))
            .await
    });
    // The submit either answers at once (its admit before the write: bob busy) or makes the
    // write itself first, and is held at the store with the worker's.
    until("the submit answers or makes the kept write", || {
        submitting.is_finished() || f.inner().statuses_held_now() == 2
    })
    .await?;
    f.inner().release_set_status();
    let c = within("the submit", submitting).await??;
    r.probe.release_all();
    let left = f.inner().job(&b).await?.map(|j| j.status);
    until_status(&r.runner, &a, "is done: the worker went on", |v| {
        v.job.status == JobStatus::Done
    })
    .await?;
    r.close().await?;
    assert!(
        c.is_ok(),
        "bob's cap is still held by the cancelled b: {c:?}"
    );
    assert_eq!(left, Some(JobStatus::Cancelled));
    Ok(())
}

/// A cancel whose status write fails is written again at close, when no submit and no stored
/// target came to write it before: a job cancelled while its busy target waits for its retry
/// (an hour away, so the worker is idle and nothing else writes) is left `running` in the
/// store by the failed write, and `cancelled` there, its target still `pending`, once close
/// returns. A write that still fails at close does not hold close up; it is left to the next
/// start, which fails the job `interrupted`.
pub async fn a_cancel_whose_status_write_fails_is_written_again_at_close(
    store: Arc<dyn BatchStore>,
) -> TestResult {
    let (f, dyn_store) = faulty(store);
    let probe = Probe::busy_once();
    // A retry pause no test outlasts: the busy target waits, and the worker is idle.
    let cfg = Config {
        retry_wait: Duration::from_secs(3_600),
        ..config()
    };
    let waiting =
        |v: &JobView| v.job.status == JobStatus::Running && states(v) == [TargetState::Pending];

    let r = rig(dyn_store.clone(), probe.clone(), cfg.clone()).await?;
    let a = r.submit("alice", "a", 1).await?;
    r.started(&url("a", 0), 1).await?;
    until_status(&r.runner, &a, "has a0 back to pending, busy", waiting).await?;
    f.fail(Op::SetStatus);
    assert!(r.runner.cancel(&a).await, "a was live");
    let left = f.inner().job(&a).await?.map(|j| j.status);
    assert_eq!(
        left,
        Some(JobStatus::Running),
        "the failed write left a live"
    );
    f.heal_all();
    r.close().await?;
    let v = r.view(&a).await?;
    assert_eq!(
        (v.job.status, v.job.error.as_str()),
        (JobStatus::Cancelled, ""),
        "a's cancelled status was not written again at close"
    );
    assert_eq!(states(&v), [TargetState::Pending], "a0 is left pending");
    assert_eq!(probe.attempts(&url("a", 0)), 1, "a0 was fetched once");
    assert_eq!(r.hooks.count(JobOutcome::Cancelled), 1);
    assert_eq!(r.hooks.terminal(), 1, "a is reported once, cancelled");
    assert_eq!(f.inner().live_jobs(None).await?, 0);

    // Still failing at close: left live, for the next start.
    let r = rig(dyn_store.clone(), probe.clone(), cfg.clone()).await?;
    let b = r.submit("bob", "b", 1).await?;
    r.started(&url("b", 0), 1).await?;
    until_status(&r.runner, &b, "has b0 back to pending, busy", waiting).await?;
    f.fail(Op::SetStatus);
    assert!(r.runner.cancel(&b).await, "b was live");
    r.close().await?;
    let left = f.inner().job(&b).await?.map(|j| (j.status, j.error));
    assert_eq!(left, Some((JobStatus::Running, String::new())));
    f.heal_all();
    let r = rig(dyn_store, probe.clone(), cfg).await?;
    let v = r.view(&b).await?;
    assert_eq!(
        (v.job.status, v.job.error.as_str()),
        (JobStatus::Failed, "interrupted")
    );
    assert_eq!(probe.attempts(&url("b", 0)), 1, "b0 was fetched once");
    r.close().await
}

/// A store call that panics (a bug of the store's) is a store error to the runner, handled as any:
/// a panicking `start_target` fails the target, a panicking `finish_target` ends the job `failed`
/// as not stored, a panicking `evict` or `sweep` is logged, a panicking `admit` fails the submit, a
/// panicking `set_status` is made again, a panicking `view` or `touch` is an error to its caller, a
/// panicking `recover` fails `Runner::start`. The one worker that made the calls goes on (a panic
/// that reached it would end it, and no later job would run); the panic's value is never logged or
/// stored.
pub async fn a_panicking_store_call_is_an_error_and_stops_no_worker(
    store: Arc<dyn BatchStore>,
) -> TestResult {
    let logs = LogCapture::start();
    let (f, dyn_store) = faulty(store);
    f.panic_on(Op::Recover);
    let refused = Runner::start(dyn_store.clone(), Probe::new(), config()).await;
    f.heal_all();
    assert!(
        matches!(&refused, Err(e) if e.to_string() == "recover: the store panicked"),
        "{:?}",
        refused.err()
    );
    let r = rig(dyn_store, Probe::new(), config()).await?;
    // Fails the test now if job `id` is not `status` with `error`, or a target of it has an
    // error that does not say the store panicked (`panicked`) or has one (not `panicked`).
    let ended = |id: String, status: JobStatus, error: &'static str, panicked: bool| {
        let r = &r;
        async move {
            let v = r.terminal(&id).await?;
            assert_eq!(
                (v.job.status, v.job.error.as_str()),
                (status, error),
                "{id}"
            );
            for t in &v.targets {
                assert_eq!(t.error.contains("the store panicked"), panicked, "{t:?}");
            }
            Res::Ok(id)
        }
    };
    let mut ids = Vec::new();

    f.panic_on(Op::StartTarget);
    let a = r.submit("alice", "a", 2).await?;
    ids.push(ended(a, JobStatus::Failed, "", true).await?);
    f.heal_all();

    f.panic_on(Op::FinishTarget);
    let b = r.submit("alice", "b", 2).await?;
    until("b is reported terminal", || r.hooks.terminal() == 2).await?;
    f.heal_all();
    ids.push(ended(b, JobStatus::Failed, rota::machine::ERR_NOT_STORED, false).await?);

    f.panic_on(Op::Evict);
    let c = r.submit("alice", "c", 2).await?;
    ids.push(ended(c, JobStatus::Done, "", false).await?);
    f.heal_all();

    f.inner().misbehave(Misbehave::EvictPanicsWhenCalled);
    let d = r.submit("alice", "d", 2).await?;
    ids.push(ended(d, JobStatus::Done, "", false).await?);
    f.inner().misbehave(Misbehave::Not);

    f.panic_on(Op::Sweep);
    let e = r.submit("alice", "e", 2).await?;
    ids.push(ended(e, JobStatus::Done, "", false).await?);
    f.heal_all();

    f.panic_on(Op::Admit);
    let refused = r.submit_targets("alice", targets("f", 2)).await;
    f.heal_all();
    assert!(
        matches!(&refused, Err(SubmitError::Store(e)) if e.to_string().contains("the store panicked")),
        "{refused:?}"
    );

    r.probe.hold(&url("g", 0));
    let g = r.submit("alice", "g", 2).await?;
    r.started(&url("g", 0), 1).await?;
    f.panic_on(Op::SetStatus);
    assert!(r.runner.cancel(&g).await, "g was live");
    f.heal_all();
    r.probe.release_all();
    until_status(&r.runner, &g, "g's cancelled is written again", |v| {
        v.job.status == JobStatus::Cancelled
    })
    .await?;
    ids.push(g);

    f.panic_on(Op::View);
    let view = r.runner.status(&ids[0]).await;
    f.heal_all();
    assert!(
        matches!(&view, Err(e) if e.to_string().contains("the store panicked")),
        "{view:?}"
    );
    f.panic_on(Op::Touch);
    r.runner.touch(&ids[0]).await;
    f.heal_all();
    // At warn, with the job's id (SPEC §8).
    let touch_warns = logs.buf.warns_with("store: touch failed");
    assert!(
        touch_warns.iter().any(|l| l.contains(ids[0].as_str())),
        "the failed touch is logged at warn with its job's id: {touch_warns:?}"
    );

    // The worker is still there.
    let h = r.submit("bob", "h", 2).await?;
    ids.push(ended(h, JobStatus::Done, "", false).await?);
    r.close().await?;

    let text = logs.buf.text();
    for id in &ids {
        let stored = format!(
            "{:?} {:?}",
            f.inner().job(id).await?,
            f.inner().targets(id).await?
        );
        assert!(
            !stored.contains(STORE_PANIC_VALUE),
            "the panic value is stored"
        );
    }
    assert!(
        !text.contains(STORE_PANIC_VALUE),
        "the panic value is logged:\n{text}"
    );
    for id in &ids[..2] {
        assert!(
            !logs.buf.warns_with(id).is_empty(),
            "no warn names job {id}"
        );
    }
    for logged in ["store: evict failed", "store: sweep failed"] {
        assert!(text.contains(logged), "not logged: {logged}");
    }
    Ok(())
}

/// A submit whose first poll suspends in the store (here: making a failed status write again,
/// held), and whose caller then neither polls it nor drops it, goes on in a task of its own:
/// close, which waits for the submits under way, still returns.
pub async fn close_never_waits_on_a_submit_whose_caller_stopped_polling(
    store: Arc<dyn BatchStore>,
) -> TestResult {
    let (f, dyn_store) = faulty(store);
    let r = rig(dyn_store, Probe::new(), config()).await?;
    let a = held_fetch_job(&r, "a", 2).await?;
    // a's cancelled is not written: it is due again at the next submit.
    f.fail(Op::SetStatus);
    assert!(r.runner.cancel(&a).await);
    f.heal_all();
    f.inner().hold_set_status();
    let mut submit = Box::pin(
        r.runner
            .submit(caller("bob"), CallerClass::Fleet, targets("b", 1)),
    );
    let first = std::future::poll_fn(|cx| std::task::Poll::Ready(submit.as_mut().poll(cx))).await;
    assert!(first.is_pending(), "the submit's status write is held");
    f.inner().statuses_held(1).await?;
    let closing = r.spawn_close();
    until_close_began(&r).await?;
    r.probe.release_all();
    f.inner().release_set_status();
    within("close", closing).await??;
    assert_eq!(
        f.inner().job(&a).await?.map(|j| j.status),
        Some(JobStatus::Cancelled)
    );
    assert_eq!(f.inner().live_jobs(None).await?, 0);
    drop(submit);
    Ok(())
}

/// The runtime the runner started on shuts down while close is joining a worker (a held
/// fetch), close's caller a task on that runtime too: a later close, from another runtime,
/// still returns (the cut-short close told it was over).
pub async fn a_close_cut_short_by_its_runtimes_shutdown_lets_a_later_close_return(
    store: Arc<dyn BatchStore>,
) -> TestResult {
    let other = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let r = other.spawn(rig(store, Probe::new(), config())).await??;
    held_fetch_job(&r, "a", 1).await?;
    let first = {
        let runner = r.runner.clone();
        other.spawn(async move { runner.close().await })
    };
    until_close_began(&r).await?;
    other.shutdown_background();
    assert!(first.await.is_err(), "the first close was cut short");
    r.probe.release_all();
    within("a later close", r.runner.close()).await?;
    Ok(())
}

/// A failing sweep (after a submit) and evict (after a stored target) are logged at warn with
/// the job id; jobs still complete and close returns.
pub async fn failing_sweep_and_evict_are_logged_at_warn_and_survived(
    store: Arc<dyn BatchStore>,
) -> TestResult {
    let logs = LogCapture::start();
    let (f, dyn_store) = faulty(store);
    let r = rig(dyn_store, Probe::new(), config()).await?;
    f.fail(Op::Sweep);
    f.fail(Op::Evict);
    let a = r.submit("alice", "a", 2).await?;
    let b = r.submit("bob", "b", 1).await?;
    assert_eq!(r.terminal(&a).await?.job.status, JobStatus::Done);
    assert_eq!(r.terminal(&b).await?.job.status, JobStatus::Done);
    r.settled().await?;
    for id in [&a, &b] {
        let warns = logs.buf.warns_with(id);
        assert!(
            warns.iter().any(|l| l.contains("sweep")),
            "no sweep warn names {id}"
        );
        assert!(
            warns.iter().any(|l| l.contains("evict")),
            "no evict warn names {id}"
        );
    }
    r.close().await
}

/// With a store that fails every call after a countdown (tried at several points, with faults
/// striking before the write and after it), the runner never panics or hangs: its jobs end,
/// close returns, and every target outcome the store accepted is still stored as written.
pub async fn a_store_failing_after_a_countdown_loses_no_accepted_outcome(
    store: Arc<dyn BatchStore>,
) -> TestResult {
    let (f, dyn_store) = faulty(store);
    let probe = Probe::scripted(|url, _| {
        if url.ends_with("/1") {
            Act::Fail(FetchError::Other("no".into()))
        } else {
            Act::Ok(content_of(url))
        }
    });
    for (t, timing) in [Timing::Before, Timing::After].into_iter().enumerate() {
        for n in [0u64, 1, 2, 3, 5, 8, 13, 21, 34] {
            f.heal_all();
            f.set_timing(timing);
            let cfg = Config {
                workers: 2,
                ..config()
            };
            let r = rig(dyn_store.clone(), probe.clone(), cfg).await?;
            f.fail_after(n);
            for k in 0..3 {
                // A refused submit (store error) is fine; an admitted job must run to its end.
                let job = format!("j{t}-{n}-{k}");
                let _ = r.submit_targets(&format!("c{k}"), targets(&job, 3)).await;
            }
            r.settled().await?;
            r.close().await?;
        }
    }
    assert!(f.injected() > 0, "faults were injected");
    f.heal_all();
    let accepted = f.inner().accepted();
    assert!(!accepted.is_empty(), "some writes got through");
    for (id, idx, write) in accepted {
        let rows = f.inner().targets(&id).await?;
        let Some(row) = rows.get(idx) else {
            panic!("the accepted outcome of target {idx} of job {id} is gone");
        };
        let mut want = row.clone();
        want.apply(&write);
        assert_eq!(
            *row, want,
            "target {idx} of job {id} is not as the store accepted it"
        );
    }
    Ok(())
}

/// The distinctive host, url and caller key of the log test: none may appear in any log line.
pub const SECRET_HOST: &str = "secret-host-7f3a.example";
/// See [`SECRET_HOST`].
pub const SECRET_PATH: &str = "very-private-path";
/// See [`SECRET_HOST`].
pub const SECRET_KEY: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

/// No log line, even at TRACE, carries a target's url or host or a caller's key — not in
/// results, errors, hints, busy texts, panics, cancels or close — while the logs do name the
/// jobs.
pub async fn no_log_line_carries_a_url_host_or_caller_key(
    store: Arc<dyn BatchStore>,
) -> TestResult {
    let logs = LogCapture::start();
    let secret = format!("https://{SECRET_HOST}/{SECRET_PATH}");
    let s = secret.clone();
    let probe = Probe::scripted(move |url, _| {
        let text = format!("failed to reach {s} ({url})");
        match url.rsplit('/').next() {
            Some("0") => Act::Ok(TargetResult {
                content: format!("page of {url}"),
                meta: Default::default(),
            }),
            Some("1") => Act::Fail(FetchError::Target(TargetError {
                status: 502,
                msg: text.clone(),
                hint: format!("check {s}"),
            })),
            Some("2") => Act::Fail(FetchError::Other(text)),
            Some("3") => Act::Fail(FetchError::RetryLater(text)),
            _ => Act::Panic(format!("panic at {s}")),
        }
    });
    let cfg = Config {
        retry_wait: Duration::from_millis(10),
        retry_for: Duration::from_millis(60),
        ..config()
    };
    let r = rig(store, probe, cfg).await?;
    let who = Caller {
        name: "alice".into(),
        workspace: "ws".into(),
        key_sha256: SECRET_KEY.into(),
    };
    let ts: Vec<Target> = (0..5).map(|i| target(&format!("{secret}/{i}"))).collect();
    let a = r
        .runner
        .submit(who.clone(), CallerClass::Restricted, ts.clone())
        .await?;
    let again = r
        .runner
        .submit(who.clone(), CallerClass::Restricted, ts)
        .await?;
    assert!(again.reused);
    r.terminal(&a.id).await?;
    r.probe.hold(&format!("{secret}/b/0"));
    let b_targets = vec![
        target(&format!("{secret}/b/0")),
        target(&format!("{secret}/b/1")),
    ];
    let b = r
        .runner
        .submit(who.clone(), CallerClass::Restricted, b_targets)
        .await?;
    r.started(&format!("{secret}/b/0"), 1).await?;
    let c_targets = vec![target(&format!("{secret}/c/0"))];
    let c = r
        .runner
        .submit(who.clone(), CallerClass::Restricted, c_targets)
        .await?;
    let d_targets = vec![target(&format!("{secret}/d/0"))];
    let d = r
        .runner
        .submit(who, CallerClass::Restricted, d_targets)
        .await?;
    assert!(r.runner.cancel(&c.id).await);
    r.runner.touch(&a.id).await;
    // An embedding API passes on the ids its clients send: one that is a URL, or a caller's
    // key, is no job's, and is not logged either.
    for foreign in [secret.as_str(), SECRET_KEY] {
        r.runner.touch(foreign).await;
        assert!(!r.runner.cancel(foreign).await);
        assert_eq!(r.runner.status(foreign).await?, None);
    }
    let closing = r.spawn_close();
    until("close cancels the token", || {
        r.probe
            .calls()
            .last()
            .is_some_and(|c| c.cancel.is_cancelled())
    })
    .await?;
    r.probe.release_all();
    within("close", closing).await??;

    let text = logs.buf.text();
    assert!(!text.is_empty(), "nothing was logged");
    for id in [&a.id, &b.id, &c.id, &d.id] {
        assert!(
            text.contains(id.as_str()),
            "the logs never name job {id}:\n{text}"
        );
    }
    for bad in [SECRET_HOST, SECRET_PATH, SECRET_KEY, "secret-host"] {
        let lines: Vec<&str> = text.lines().filter(|l| l.contains(bad)).collect();
        assert!(lines.is_empty(), "{bad:?} is logged:\n{}", lines.join("\n"));
    }
    Ok(())
}
