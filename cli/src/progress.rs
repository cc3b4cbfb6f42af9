//! Watching a job: a fetch wrapper that counts retries, hooks that wake the watcher, and the
//! progress display on stderr.

use std::io::Write;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use rota::{
    Caller, CancellationToken, Fetch, FetchError, Hooks, JobOutcome, JobView, Target, TargetResult,
    TargetState,
};
use tokio::sync::Notify;

/// What the watcher is told between two looks at the store.
#[derive(Debug, Default)]
pub struct Signals {
    /// Fetches that came back busy.
    busy: AtomicUsize,
    /// Targets stored failed after coming back busy for too long: their last busy answer was
    /// not tried again.
    gave_up: AtomicUsize,
    /// The runner reported a job ended (done, partial, failed or cancelled). `rota run` and
    /// `rota demo` give each runner their own jobs only.
    ended: AtomicUsize,
    /// Targets in flight, as the runner last reported: a target is out of flight once its
    /// outcome's store write was made (or failed).
    inflight: AtomicUsize,
    /// Targets fetched to an outcome, and how many of those failed: counted together, so
    /// that a look never sees one of a target's counts without the other.
    tally: Mutex<Tally>,
    /// How many times the watcher was woken: see [`generation`](Self::generation).
    pokes: AtomicU64,
    wake: Notify,
}

impl Signals {
    /// How many fetches came back busy and were (or are to be) tried again: every busy answer
    /// but the last of a target that gave up. Of a cancelled job, a busy answer whose target was
    /// waiting for its retry still counts: the fetch is not told which target it fetches, and a
    /// job may list one twice, so which busy answers were the last cannot be told apart.
    pub fn retries(&self) -> usize {
        self.busy
            .load(Ordering::Relaxed)
            .saturating_sub(self.gave_up.load(Ordering::Relaxed))
    }

    /// Whether the runner is done with the `jobs` it created: each reported ended and nothing
    /// in flight, so every write for them was made (or failed). The store may still not show
    /// them ended, if it did not take those writes.
    pub fn runner_done_with(&self, jobs: usize) -> bool {
        self.ended.load(Ordering::SeqCst) >= jobs && self.inflight() == 0
    }

    /// How many targets were fetched to an outcome, stored or not (see [`Hooks::target`]).
    pub fn outcomes(&self) -> usize {
        self.tally().outcomes
    }

    /// The progress of a job this runner created, of `total` targets, as reported by the
    /// runner (no store read): its outcomes (stored, or their store write failed), its
    /// failures among them, and `retries`.
    pub fn counts(&self, total: usize, retries: Option<usize>) -> Counts {
        let t = *self.tally();
        Counts {
            finished: t.outcomes,
            total,
            failed: t.failed,
            retries,
        }
    }

    fn tally(&self) -> std::sync::MutexGuard<'_, Tally> {
        // Only counts are kept under it: a panic elsewhere leaves them valid.
        self.tally.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// How many targets the runner last reported in flight.
    pub fn inflight(&self) -> usize {
        self.inflight.load(Ordering::SeqCst)
    }

    /// A number that changes whenever something is reported (a busy answer, a target in or out
    /// of flight, an outcome, a job's end): read before a look at the store, it tells the next
    /// look whether there can be anything new to see.
    pub fn generation(&self) -> u64 {
        self.pokes.load(Ordering::SeqCst)
    }

    /// Waits until something happened, or `at_most` passed.
    pub async fn changed(&self, at_most: Duration) {
        let _ = tokio::time::timeout(at_most, self.wake.notified()).await;
    }

    fn poke(&self) {
        self.pokes.fetch_add(1, Ordering::SeqCst);
        // notify_one keeps a permit when nobody waits, so no wake-up is lost.
        self.wake.notify_one();
    }
}

/// Targets fetched to an outcome (done, failed, or busy for too long), whose store write was
/// then made or failed; `failed`, those of them that failed.
#[derive(Debug, Default, Clone, Copy)]
struct Tally {
    outcomes: usize,
    failed: usize,
}

/// A [`Fetch`] that counts the busy answers of the fetch it wraps.
pub struct Counting<F> {
    inner: F,
    signals: Arc<Signals>,
}

impl<F: Fetch> Counting<F> {
    /// Wraps `inner`, counting into `signals`.
    pub fn new(inner: F, signals: Arc<Signals>) -> Self {
        Counting { inner, signals }
    }
}

#[async_trait]
impl<F: Fetch> Fetch for Counting<F> {
    async fn fetch(
        &self,
        caller: Arc<Caller>,
        target: Target,
        cancel: CancellationToken,
    ) -> Result<TargetResult, FetchError> {
        let r = self.inner.fetch(caller, target, cancel).await;
        if matches!(r, Err(FetchError::RetryLater(_))) {
            self.signals.busy.fetch_add(1, Ordering::Relaxed);
            self.signals.poke();
        }
        r
    }
}

/// [`Hooks`] that wake the watcher whenever a target or a job is stored.
pub struct WakeHooks(pub Arc<Signals>);

impl Hooks for WakeHooks {
    fn job(&self, outcome: JobOutcome) {
        if !matches!(outcome, JobOutcome::Created | JobOutcome::Reused) {
            self.0.ended.fetch_add(1, Ordering::SeqCst);
        }
        self.0.poke();
    }
    fn inflight(&self, targets: usize) {
        self.0.inflight.store(targets, Ordering::SeqCst);
        self.0.poke();
    }
    fn target(&self, err: Option<&FetchError>, _elapsed: Duration, _result_bytes: usize) {
        // A final outcome that is a busy answer: the target gave up, not tried again.
        if matches!(err, Some(FetchError::RetryLater(_))) {
            self.0.gave_up.fetch_add(1, Ordering::Relaxed);
        }
        {
            let mut t = self.0.tally();
            t.outcomes += 1;
            t.failed += usize::from(err.is_some());
        }
        self.0.poke();
    }
}

/// A job's progress as shown: done / total, failures, retries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Counts {
    /// Targets stored done or failed.
    pub finished: usize,
    /// All targets.
    pub total: usize,
    /// Targets stored failed.
    pub failed: usize,
    /// Busy answers so far; `None` for a reused job, whose busy answers were not stored.
    pub retries: Option<usize>,
}

impl Counts {
    /// The counts of `view`, with `retries` busy answers (`None`: not known).
    pub fn of(view: &JobView, retries: Option<usize>) -> Counts {
        Counts {
            finished: view.job.targets_done,
            total: view.job.targets_total,
            failed: view
                .targets
                .iter()
                .filter(|t| t.status == TargetState::Failed)
                .count(),
            retries,
        }
    }

    fn tail(&self) -> String {
        format!("{} failed{}", self.failed, self.retries_shown())
    }

    /// `, 2 retries` (`, 1 retry`), or nothing when not known.
    pub fn retries_shown(&self) -> String {
        match self.retries {
            Some(1) => ", 1 retry".into(),
            Some(n) => format!(", {n} retries"),
            None => String::new(),
        }
    }
}

/// The progress display: a bar when stderr is a terminal that can draw one, else a plain line
/// per change.
pub enum Progress {
    /// An indicatif bar on stderr.
    Bar(ProgressBar),
    /// Plain lines on stderr; the last counts printed.
    Lines(Option<Counts>),
}

impl Progress {
    /// A bar if stderr is a terminal that can draw one, else plain lines. indicatif draws
    /// nothing on a terminal whose `TERM` is `dumb` or unset (an editor's shell, a CI runner's
    /// pseudo-terminal): there the lines are shown, not a bar that never appears.
    pub fn new(total: usize) -> Progress {
        let target = ProgressDrawTarget::stderr();
        if target.is_hidden() {
            return Progress::Lines(None);
        }
        let style =
            ProgressStyle::with_template("{spinner} [{bar:30}] {pos}/{len} finished · {msg}")
                .map(|s| s.progress_chars("=> "))
                .unwrap_or_else(|_| ProgressStyle::default_bar());
        let bar = ProgressBar::with_draw_target(Some(total as u64), target).with_style(style);
        // Known to the writers before it is first drawn (the tick draws at once).
        crate::out::showing(Some(bar.clone()));
        bar.enable_steady_tick(Duration::from_millis(120));
        Progress::Bar(bar)
    }

    /// Shows `c` (a plain line only when it differs from the last one shown).
    pub fn update(&mut self, c: Counts) {
        match self {
            Progress::Bar(bar) => {
                bar.set_length(c.total as u64);
                bar.set_position(c.finished as u64);
                bar.set_message(c.tail());
            }
            Progress::Lines(last) => {
                if *last != Some(c) {
                    note!(
                        "progress: {}/{} finished, {}",
                        c.finished,
                        c.total,
                        c.tail()
                    );
                    let _ = std::io::stderr().flush();
                    *last = Some(c);
                }
            }
        }
    }

    /// Prints `line` on stderr without tearing the bar (as every line is: see
    /// [`out::err`](crate::out::err)).
    pub fn note(&self, line: &str) {
        note!("{line}");
    }

    /// Removes the bar, if any.
    pub fn finish(&self) {
        if let Progress::Bar(bar) = self {
            bar.finish_and_clear();
            // Forgotten by the writers only once cleared: a line until then goes above it.
            crate::out::showing(None);
        }
    }
}

impl Drop for Progress {
    /// A command that returns early (an error) leaves no bar behind for the logs to go around.
    fn drop(&mut self) {
        self.finish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The watcher's wait lasts until something is reported (its `at_most` aside): it does not
    /// return at once, which would make the watcher spin between two looks at the store.
    #[tokio::test]
    async fn changed_waits_until_something_is_reported() {
        let signals = Arc::new(Signals::default());
        let hooks = WakeHooks(signals.clone());
        let mut wait = std::pin::pin!(signals.changed(Duration::from_secs(3600)));
        tokio::select! {
            biased;
            () = &mut wait => panic!("changed returned with nothing reported"),
            () = std::future::ready(()) => {}
        }
        let before = signals.generation();
        hooks.inflight(1);
        assert_ne!(signals.generation(), before);
        wait.await;
    }

    /// Finishing the progress, or dropping it (a command that returns early), clears its bar:
    /// none is left on the terminal, for the lines after it to go around.
    #[test]
    fn finishing_or_dropping_the_progress_clears_its_bar() {
        let _alone = crate::out::BAR_TESTS
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for finish in [true, false] {
            let bar = ProgressBar::with_draw_target(Some(4), ProgressDrawTarget::hidden());
            crate::out::showing(Some(bar.clone()));
            let progress = Progress::Bar(bar.clone());
            if finish {
                progress.finish();
                assert!(bar.is_finished(), "finish left the bar");
            }
            drop(progress);
            assert!(bar.is_finished(), "finish {finish}: the bar was left");
        }
    }
}
