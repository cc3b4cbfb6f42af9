//! The runner's configuration, its clock and its metrics hooks.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::{FetchError, JobOutcome};

/// The source of every unix-seconds time the runner stores. Inject one to test TTLs.
pub trait Clock: Send + Sync + 'static {
    /// Now, in seconds since the unix epoch.
    fn now_unix(&self) -> i64;
}

/// The system's wall clock; the default [`Clock`].
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_unix(&self) -> i64 {
        match SystemTime::now().duration_since(UNIX_EPOCH) {
            Ok(d) => i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
            Err(e) => -i64::try_from(e.duration().as_secs()).unwrap_or(i64::MAX),
        }
    }
}

/// Metrics hooks. Every method has an empty default body; they are called synchronously from
/// the runner's workers and from the calls of its callers, so they must be quick and must not
/// block. `depth`, `inflight` and `job(Created)` are called under the runner's state lock: a
/// submit, cancel or close made from one of them (even polled on another executor from there)
/// never returns, as it waits for the lock the hook's thread holds, and stalls that runtime
/// thread with it. `job(Cancelled)` and `job(Reused)` are called while their cancel or
/// submit counts as under way, which `close` waits for: a `close` awaited from one of them
/// (blocking on it) never returns either. Hand such work to a task instead. (A `status` or
/// `touch` only reads or writes the store, and takes no such lock.)
pub trait Hooks: Send + Sync + 'static {
    /// A job was created, reused, or reached a terminal outcome (once per job).
    fn job(&self, outcome: JobOutcome) {
        let _ = outcome;
    }
    /// A target's outcome was stored: `err` is `None` on success. `result_bytes` is the length
    /// of the stored result JSON (0 on failure).
    fn target(&self, err: Option<&FetchError>, elapsed: Duration, result_bytes: usize) {
        let _ = (err, elapsed, result_bytes);
    }
    /// A job reached a terminal status, `elapsed` after it was submitted (once per job).
    fn job_seconds(&self, elapsed: Duration) {
        let _ = elapsed;
    }
    /// The number of live (queued or running) jobs changed.
    fn depth(&self, live_jobs: usize) {
        let _ = live_jobs;
    }
    /// The number of targets being fetched changed.
    fn inflight(&self, targets: usize) {
        let _ = targets;
    }
}

/// Hooks that do nothing; the default.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoHooks;

impl Hooks for NoHooks {}

/// The runner's configuration. A zero field means its default; `workers` is clamped to 1..=2.
/// Read the effective values through the `effective_*` methods (or [`Config::normalized`]).
#[derive(Clone)]
pub struct Config {
    /// How long a job is kept (and reused) after its last activity. Default 24 h.
    pub ttl: Duration,
    /// The most targets one job may have. Default 32.
    pub targets_per_job: usize,
    /// The most live jobs one caller may have. Default 1.
    pub jobs_per_caller: usize,
    /// The most live jobs in all. Default 8.
    pub jobs_total: usize,
    /// How many workers drain the jobs. Default 1; clamped to 1..=2.
    pub workers: usize,
    /// The store's byte budget; terminal jobs are evicted past it, oldest first, after each
    /// target stored done or failed. Default 64 MiB.
    ///
    /// A job may be evicted as soon as it ends, by its own last target's store: when its
    /// results, with the live jobs', keep the store over the budget, the driver's
    /// `Runner::status` finds no job even once its `Done` hook has been called (and a live job whose results alone
    /// are past it evicts every terminal job at each target it stores). Set the budget well
    /// above the results a job's reader is to find.
    pub max_bytes: u64,
    /// The pause before a busy target is tried again. Default 2 s.
    pub retry_wait: Duration,
    /// How long one target may keep coming back busy before it fails. Default 10 min.
    pub retry_for: Duration,
    /// Metrics hooks. Default: none.
    pub hooks: Arc<dyn Hooks>,
    /// The clock of every unix-seconds time. Default: [`SystemClock`].
    pub clock: Arc<dyn Clock>,
}

/// Default [`Config::ttl`].
pub const DEFAULT_TTL: Duration = Duration::from_secs(24 * 60 * 60);
/// Default [`Config::targets_per_job`].
pub const DEFAULT_TARGETS_PER_JOB: usize = 32;
/// Default [`Config::jobs_per_caller`].
pub const DEFAULT_JOBS_PER_CALLER: usize = 1;
/// Default [`Config::jobs_total`].
pub const DEFAULT_JOBS_TOTAL: usize = 8;
/// Default [`Config::workers`].
pub const DEFAULT_WORKERS: usize = 1;
/// The most workers a runner has.
pub const MAX_WORKERS: usize = 2;
/// Default [`Config::max_bytes`].
pub const DEFAULT_MAX_BYTES: u64 = 64 * 1024 * 1024;
/// Default [`Config::retry_wait`].
pub const DEFAULT_RETRY_WAIT: Duration = Duration::from_secs(2);
/// Default [`Config::retry_for`].
pub const DEFAULT_RETRY_FOR: Duration = Duration::from_secs(10 * 60);

impl Default for Config {
    fn default() -> Self {
        Config {
            ttl: DEFAULT_TTL,
            targets_per_job: DEFAULT_TARGETS_PER_JOB,
            jobs_per_caller: DEFAULT_JOBS_PER_CALLER,
            jobs_total: DEFAULT_JOBS_TOTAL,
            workers: DEFAULT_WORKERS,
            max_bytes: DEFAULT_MAX_BYTES,
            retry_wait: DEFAULT_RETRY_WAIT,
            retry_for: DEFAULT_RETRY_FOR,
            hooks: Arc::new(NoHooks),
            clock: Arc::new(SystemClock),
        }
    }
}

fn or<T: PartialEq + Default>(v: T, default: T) -> T {
    if v == T::default() { default } else { v }
}

impl Config {
    /// The effective TTL.
    pub fn effective_ttl(&self) -> Duration {
        or(self.ttl, DEFAULT_TTL)
    }
    /// The reuse window in whole seconds ([`Caps::ttl_secs`](crate::Caps::ttl_secs)): the
    /// effective TTL rounded up (at least 1, as the effective TTL is never zero). A job is reused while its lease is younger than
    /// the TTL; leases and now are whole seconds, so an age is under the TTL exactly when it is
    /// under the TTL rounded up (an age of 1 s is under a TTL of 1.5 s).
    pub fn ttl_secs(&self) -> i64 {
        let ttl = self.effective_ttl();
        let up = ttl
            .as_secs()
            .saturating_add(u64::from(ttl.subsec_nanos() > 0));
        i64::try_from(up).unwrap_or(i64::MAX)
    }

    /// The age in whole seconds past which sweep deletes a terminal job
    /// ([`BatchStore::sweep`](crate::BatchStore::sweep)'s `ttl_secs`): the effective TTL rounded
    /// down. A job is swept once its lease is older than `now − ttl`; in whole seconds, once
    /// its age is over the TTL rounded down (an age of 1 s is over a TTL of 0.5 s).
    pub fn sweep_ttl_secs(&self) -> i64 {
        i64::try_from(self.effective_ttl().as_secs()).unwrap_or(i64::MAX)
    }
    /// The effective targets-per-job cap.
    pub fn effective_targets_per_job(&self) -> usize {
        or(self.targets_per_job, DEFAULT_TARGETS_PER_JOB)
    }
    /// The effective per-caller cap.
    pub fn effective_jobs_per_caller(&self) -> usize {
        or(self.jobs_per_caller, DEFAULT_JOBS_PER_CALLER)
    }
    /// The effective total cap.
    pub fn effective_jobs_total(&self) -> usize {
        or(self.jobs_total, DEFAULT_JOBS_TOTAL)
    }
    /// The effective worker count: the default for 0, clamped to 1..=2.
    pub fn effective_workers(&self) -> usize {
        or(self.workers, DEFAULT_WORKERS).clamp(1, MAX_WORKERS)
    }
    /// The effective byte budget.
    pub fn effective_max_bytes(&self) -> u64 {
        or(self.max_bytes, DEFAULT_MAX_BYTES)
    }
    /// The effective retry pause.
    pub fn effective_retry_wait(&self) -> Duration {
        or(self.retry_wait, DEFAULT_RETRY_WAIT)
    }
    /// The effective give-up time for a busy target.
    pub fn effective_retry_for(&self) -> Duration {
        or(self.retry_for, DEFAULT_RETRY_FOR)
    }

    /// A copy with every zero field replaced by its default and `workers` clamped.
    pub fn normalized(&self) -> Config {
        Config {
            ttl: self.effective_ttl(),
            targets_per_job: self.effective_targets_per_job(),
            jobs_per_caller: self.effective_jobs_per_caller(),
            jobs_total: self.effective_jobs_total(),
            workers: self.effective_workers(),
            max_bytes: self.effective_max_bytes(),
            retry_wait: self.effective_retry_wait(),
            retry_for: self.effective_retry_for(),
            hooks: self.hooks.clone(),
            clock: self.clock.clone(),
        }
    }
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("ttl", &self.ttl)
            .field("targets_per_job", &self.targets_per_job)
            .field("jobs_per_caller", &self.jobs_per_caller)
            .field("jobs_total", &self.jobs_total)
            .field("workers", &self.workers)
            .field("max_bytes", &self.max_bytes)
            .field("retry_wait", &self.retry_wait)
            .field("retry_for", &self.retry_for)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `Debug` shows the settings, and not the hooks or the clock (trait objects the embedder
    /// made).
    #[test]
    fn debug_shows_the_settings() {
        let shown = format!(
            "{:?}",
            Config {
                workers: 2,
                max_bytes: 77,
                ..Config::default()
            }
        );
        assert!(shown.starts_with("Config { ttl: "), "{shown}");
        assert!(
            shown.contains("workers: 2, max_bytes: 77, retry_wait: "),
            "{shown}"
        );
        assert!(shown.ends_with(", .. }"), "{shown}");
    }

    #[test]
    fn defaults_are_the_spec_values() {
        let c = Config::default();
        assert_eq!(c.ttl, Duration::from_secs(86_400));
        assert_eq!(c.targets_per_job, 32);
        assert_eq!(c.jobs_per_caller, 1);
        assert_eq!(c.jobs_total, 8);
        assert_eq!(c.workers, 1);
        assert_eq!(c.max_bytes, 64 << 20);
        assert_eq!(c.retry_wait, Duration::from_secs(2));
        assert_eq!(c.retry_for, Duration::from_secs(600));
    }

    #[test]
    fn a_zero_field_means_its_default() {
        let c = Config {
            ttl: Duration::ZERO,
            targets_per_job: 0,
            jobs_per_caller: 0,
            jobs_total: 0,
            workers: 0,
            max_bytes: 0,
            retry_wait: Duration::ZERO,
            retry_for: Duration::ZERO,
            ..Config::default()
        }
        .normalized();
        let d = Config::default();
        assert_eq!(format!("{c:?}"), format!("{d:?}"));
    }

    #[test]
    fn a_fractional_ttl_rounds_up_for_reuse_and_down_for_sweep() {
        for (ttl_ms, reuse, sweep) in [
            (1_500, 2, 1),
            (500, 1, 0),
            (1, 1, 0),
            (5_000, 5, 5),
            (86_400_000, 86_400, 86_400),
        ] {
            let c = Config {
                ttl: Duration::from_millis(ttl_ms),
                ..Config::default()
            };
            assert_eq!(
                (c.ttl_secs(), c.sweep_ttl_secs()),
                (reuse, sweep),
                "{ttl_ms} ms"
            );
        }
        let d = Config::default();
        assert_eq!((d.ttl_secs(), d.sweep_ttl_secs()), (86_400, 86_400));
    }

    #[test]
    fn workers_clamp_to_one_or_two() {
        for (set, want) in [(0, 1), (1, 1), (2, 2), (3, 2), (100, 2)] {
            let c = Config {
                workers: set,
                ..Config::default()
            };
            assert_eq!(c.effective_workers(), want, "workers = {set}");
        }
    }

    #[test]
    fn set_fields_are_kept() {
        let c = Config {
            ttl: Duration::from_secs(5),
            jobs_total: 3,
            max_bytes: 10,
            ..Config::default()
        }
        .normalized();
        assert_eq!((c.ttl_secs(), c.jobs_total, c.max_bytes), (5, 3, 10));
    }

    /// A set per-caller cap is kept, like every other set field (its default, 1, is what a
    /// mutant that ignores it would give).
    #[test]
    fn a_set_jobs_per_caller_is_kept() {
        let c = Config {
            jobs_per_caller: 3,
            ..Config::default()
        };
        assert_eq!(c.effective_jobs_per_caller(), 3);
        assert_eq!(c.normalized().jobs_per_caller, 3);
    }

    #[test]
    fn system_clock_is_after_2020() {
        assert!(SystemClock.now_unix() > 1_577_836_800);
    }
}
