//! The runner behaviour suite (`rota_tests::runner`) on [`MemoryStore`].

use std::sync::Arc;

use rota_store_memory::MemoryStore;
use rota_tests::runner::TestResult;

rota_tests::runner_tests!(sync || (Arc::new(MemoryStore::new()), ()));

/// `Runner::start` on a tokio runtime built without timers is refused with an error that says
/// so (a worker sleeps until a busy target is due again, which would panic there).
#[test]
fn start_refuses_a_runtime_without_timers() -> TestResult {
    use rota::{Config, Runner};
    use rota_tests::runner::Probe;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .build()?;
    let got = rt.block_on(Runner::start(
        Arc::new(MemoryStore::new()),
        Probe::new(),
        Config::default(),
    ));
    let Err(err) = got else {
        return Err("a runtime without timers was accepted".into());
    };
    assert!(err.to_string().contains("no timers"), "{err}");
    Ok(())
}

/// `Runner::start` outside any tokio runtime (here polled by hand on the test's own thread)
/// answers at once with an error, rather than panicking or never answering: its workers are
/// tokio tasks.
#[test]
fn start_outside_a_tokio_runtime_is_an_error() -> TestResult {
    use std::task::{Context, Poll, Waker};

    use rota::{Config, Runner};
    use rota_tests::runner::Probe;

    let start = Runner::start(
        Arc::new(MemoryStore::new()),
        Probe::new(),
        Config::default(),
    );
    let mut start = std::pin::pin!(start);
    let got = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        start.as_mut().poll(&mut Context::from_waker(Waker::noop()))
    }));
    match got {
        Ok(Poll::Ready(Err(_))) => Ok(()),
        Ok(Poll::Ready(Ok(_))) => Err("a runner started outside a tokio runtime".into()),
        Ok(Poll::Pending) => Err("start outside a runtime did not answer at once".into()),
        Err(_) => Err("start outside a runtime panicked".into()),
    }
}

/// A submit made from a task on the runtime lets the idle worker it woke start at once, while
/// the task goes on without yielding (as a loop of submits does: the bundled stores answer in
/// one poll). Tokio runs a task woken from one of its threads on that thread, behind the task
/// that woke it, where no other thread may take it: without the submit's yield the worker
/// would wait for the submitting task to yield, here for ever.
#[test]
fn a_submit_from_a_task_lets_the_worker_it_woke_start_before_the_task_yields()
-> rota_tests::runner::TestResult {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::{Duration, Instant};

    use rota::{CallerClass, CancellationToken, Config, FetchError, Runner, Target, TargetResult};
    use rota_tests::runner::{Res, caller, content_of, target};

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let fetched = Arc::new(AtomicBool::new(false));
    let seen = fetched.clone();
    let fetch = move |_: Arc<rota::Caller>, t: Target, _: CancellationToken| {
        seen.store(true, Ordering::SeqCst);
        async move { Ok::<TargetResult, FetchError>(content_of(&t.url)) }
    };
    let started = rt.block_on(async move {
        let config = Config {
            workers: 1,
            ..Config::default()
        };
        let runner = Runner::start(Arc::new(MemoryStore::new()), fetch, config).await?;
        // Time for the worker to find nothing to do and go idle.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let task = tokio::spawn(async move {
            let submitted = runner
                .submit(
                    caller("a"),
                    CallerClass::Fleet,
                    vec![target("https://a.test/1")],
                )
                .await;
            // On without yielding until the fetch has run, or for long enough to tell.
            let t0 = Instant::now();
            while !fetched.load(Ordering::SeqCst) && t0.elapsed() < Duration::from_secs(10) {
                std::hint::spin_loop();
            }
            let started = fetched.load(Ordering::SeqCst);
            runner.close().await;
            submitted?;
            Res::Ok(started)
        });
        task.await?
    })?;
    assert!(
        started,
        "the worker did not start while the submitting task went on"
    );
    Ok(())
}

/// A [`rota_tests::runner::Shared`] over a new memory store, and the runner's suite setup on it.
async fn misbehaving() -> Result<
    (Arc<rota_tests::runner::Shared>, rota_tests::runner::Rig),
    Box<dyn std::error::Error + Send + Sync>,
> {
    use rota_tests::runner::{Probe, Shared, config, rig};
    let store = Arc::new(Shared::new(Arc::new(MemoryStore::new())));
    let r = rig(store.clone(), Probe::new(), config()).await?;
    Ok((store, r))
}

/// A `touch` whose store panics with a value that panics again when dropped (while its future
/// runs, or when called), or whose future panics when dropped after it answered, returns to
/// its caller (a task, which a panic would end).
#[tokio::test]
async fn a_touch_whose_panic_or_future_panics_when_dropped_returns()
-> rota_tests::runner::TestResult {
    use rota_tests::runner::Misbehave;
    let (store, r) = misbehaving().await?;
    for bug in [
        Misbehave::PanicValuePanicsWhenDropped,
        Misbehave::FuturePanicsWhenDropped,
        Misbehave::TouchPanicsWhenCalled,
    ] {
        store.misbehave(bug);
        let runner = r.runner.clone();
        let got = tokio::spawn(async move { runner.touch("x").await }).await;
        assert!(got.is_ok(), "{bug:?}: the touch panicked: {got:?}");
    }
    store.misbehave(Misbehave::Not);
    r.close().await
}

/// An `evict` that panics with a value that panics again when dropped ends no worker: the
/// next job runs.
#[tokio::test]
async fn an_evict_whose_panic_value_panics_when_dropped_stops_no_worker()
-> rota_tests::runner::TestResult {
    use rota_tests::runner::Misbehave;
    let (store, r) = misbehaving().await?;
    store.misbehave(Misbehave::PanicValuePanicsWhenDropped);
    let a = r.submit("alice", "a", 1).await?;
    r.terminal(&a).await?;
    store.misbehave(Misbehave::Not);
    let b = r.submit("alice", "b", 1).await?;
    assert_eq!(r.terminal(&b).await?.job.status, rota::JobStatus::Done);
    r.close().await
}

/// A store call that answered and whose future then panics when dropped has still answered:
/// an admit that created the job is a created job, which runs (not a failed submit whose job
/// the store holds).
#[tokio::test]
async fn an_admit_whose_future_panics_when_dropped_after_its_answer_still_runs_the_job()
-> rota_tests::runner::TestResult {
    use rota_tests::runner::Misbehave;
    let (store, r) = misbehaving().await?;
    store.misbehave(Misbehave::FuturePanicsWhenDropped);
    let a = r.submit("alice", "a", 2).await?;
    store.misbehave(Misbehave::Not);
    assert_eq!(r.terminal(&a).await?.job.status, rota::JobStatus::Done);
    r.close().await
}

/// A close from inside a fetch racing a close from outside, both waiting for the runner's state
/// lock (held by a submit whose `Created` hook blocks) before either has closed the machine:
/// whichever takes the lock first, the fetch's close returns with the fetch token cancelled,
/// and the worker starts nothing more. Which close takes it first is not controlled here, and
/// the moment when a close found begun has not yet cancelled the token is too short for this
/// test to land in: the unit test beside the runner,
/// `a_close_inside_a_fetch_that_finds_a_close_begun_cancels_the_token_before_it_returns`,
/// makes that case.
#[test]
fn a_close_inside_a_fetch_racing_one_from_outside_returns_with_the_token_cancelled()
-> rota_tests::runner::TestResult {
    use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
    use std::sync::{Condvar, Mutex, MutexGuard, OnceLock, PoisonError};
    use std::time::{Duration, Instant};

    use rota::{
        Caller, CallerClass, CancellationToken, Config, FetchError, Hooks, JobOutcome, Runner,
        Target, TargetResult,
    };
    use rota_tests::runner::{caller, config, content_of, targets, url};

    /// Blocks the first `job(Created)` after it is armed (the runner calls it under its state
    /// lock) until released.
    #[derive(Default)]
    struct Gate {
        armed: AtomicBool,
        holding: AtomicBool,
        released: Mutex<bool>,
        cv: Condvar,
    }
    impl Hooks for Gate {
        fn job(&self, outcome: JobOutcome) {
            if outcome == JobOutcome::Created && self.armed.swap(false, Ordering::SeqCst) {
                self.holding.store(true, Ordering::SeqCst);
                let mut released = lock(&self.released);
                while !*released {
                    released = self
                        .cv
                        .wait(released)
                        .unwrap_or_else(PoisonError::into_inner);
                }
            }
        }
    }
    fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
        m.lock().unwrap_or_else(PoisonError::into_inner)
    }
    fn wait_until(what: &str, cond: impl Fn() -> bool) {
        let t0 = Instant::now();
        while !cond() {
            assert!(
                t0.elapsed() < rota_tests::runner::WAIT,
                "timed out waiting until {what}"
            );
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    fn on_a_thread_of_its_own(
        f: impl Future<Output = ()> + Send + 'static,
    ) -> std::thread::JoinHandle<()> {
        std::thread::spawn(move || {
            match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt.block_on(f),
                Err(e) => panic!("a runtime for the thread: {e}"),
            }
        })
    }

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let handle: Arc<OnceLock<Runner>> = Arc::new(OnceLock::new());
    let fetched = Arc::new(Mutex::new(Vec::<String>::new()));
    let go = Arc::new(AtomicBool::new(false));
    // 0: the fetch's close has not returned; 1: it returned with the token cancelled; 2: not.
    let seen = Arc::new(AtomicU8::new(0));
    let fetch = {
        let (handle, fetched, go, seen) =
            (handle.clone(), fetched.clone(), go.clone(), seen.clone());
        move |_: Arc<Caller>, t: Target, cancel: CancellationToken| {
            lock(&fetched).push(t.url.clone());
            let (handle, go, seen) = (handle.clone(), go.clone(), seen.clone());
            async move {
                if seen.load(Ordering::SeqCst) == 0 {
                    while !go.load(Ordering::SeqCst) {
                        tokio::time::sleep(Duration::from_millis(2)).await;
                    }
                    if let Some(runner) = handle.get() {
                        runner.close().await;
                    }
                    seen.store(if cancel.is_cancelled() { 1 } else { 2 }, Ordering::SeqCst);
                }
                Ok::<TargetResult, FetchError>(content_of(&t.url))
            }
        }
    };
    let gate = Arc::new(Gate::default());
    let cfg = Config {
        hooks: gate.clone(),
        ..config()
    };
    let runner = rt.block_on(Runner::start(Arc::new(MemoryStore::new()), fetch, cfg))?;
    assert!(handle.set(runner.clone()).is_ok(), "the handle is set once");
    rt.block_on(runner.submit(caller("alice"), CallerClass::Fleet, targets("a", 3)))?;
    wait_until("a0 is in its fetch", || !lock(&fetched).is_empty());
    // A submit whose Created hook holds the state lock.
    gate.armed.store(true, Ordering::SeqCst);
    let submitting = {
        let runner = runner.clone();
        on_a_thread_of_its_own(async move {
            let _ = runner
                .submit(caller("bob"), CallerClass::Fleet, targets("b", 1))
                .await;
        })
    };
    wait_until("the hook holds the state lock", || {
        gate.holding.load(Ordering::SeqCst)
    });
    // A close from outside: it waits for the state lock to close the machine.
    let closing = {
        let runner = runner.clone();
        on_a_thread_of_its_own(async move { runner.close().await })
    };
    std::thread::sleep(Duration::from_millis(100));
    // The fetch calls close now; a little later the hook lets go.
    go.store(true, Ordering::SeqCst);
    std::thread::sleep(Duration::from_millis(100));
    *lock(&gate.released) = true;
    gate.cv.notify_all();
    wait_until("the close inside the fetch returned", || {
        seen.load(Ordering::SeqCst) != 0
    });
    submitting
        .join()
        .map_err(|_| "the submit's thread panicked")?;
    closing.join().map_err(|_| "the close's thread panicked")?;
    assert_eq!(
        seen.load(Ordering::SeqCst),
        1,
        "close returned inside the fetch with the fetch token not cancelled"
    );
    assert_eq!(
        *lock(&fetched),
        [url("a", 0)],
        "nothing starts after the close"
    );
    Ok(())
}

/// A fetch shared behind an `Arc`, here chosen at run time as an `Arc<dyn Fetch>`, is given to
/// `Runner::start` as it is, and the embedder's own handle to it sees the runner's calls.
#[tokio::test]
async fn a_shared_fetch_behind_an_arc_is_a_fetch() -> rota_tests::runner::TestResult {
    use rota::{CallerClass, Config, Fetch, JobStatus, Runner};
    use rota_tests::runner::{Probe, caller, targets, until_status};
    let probe = Arc::new(Probe::new());
    let chosen: Arc<dyn Fetch> = probe.clone();
    let runner = Runner::start(Arc::new(MemoryStore::new()), chosen, Config::default()).await?;
    let s = runner
        .submit(caller("alice"), CallerClass::Fleet, targets("a", 2))
        .await?;
    until_status(&runner, &s.id, "is done", |v| {
        v.job.status == JobStatus::Done
    })
    .await?;
    assert_eq!(probe.started().len(), 2);
    runner.close().await;
    Ok(())
}

/// A busy target is tried again `retry_wait` after its busy answer, not later: the idle worker
/// sleeps until the machine's next retry time and wakes then. On tokio's paused clock (the
/// runner's times are tokio's), time moves only to the next timer, so the gap is the wait to
/// the millisecond of the timer's resolution.
#[tokio::test(start_paused = true)]
async fn a_busy_target_is_tried_again_when_retry_wait_is_up() -> rota_tests::runner::TestResult {
    use std::sync::Mutex;
    use std::time::Duration;

    use rota::{CallerClass, CancellationToken, Config, FetchError, JobStatus, Runner, Target};
    use rota_tests::runner::{caller, content_of, targets, until_status};
    use tokio::time::Instant;

    let wait = Duration::from_millis(700);
    let calls: Arc<Mutex<Vec<Instant>>> = Arc::default();
    let fetch = {
        let calls = calls.clone();
        move |_c: Arc<rota::Caller>, t: Target, _cancel: CancellationToken| {
            let calls = calls.clone();
            async move {
                let mut calls = calls.lock().unwrap_or_else(|e| e.into_inner());
                calls.push(Instant::now());
                if calls.len() == 1 {
                    Err(FetchError::RetryLater("busy".into()))
                } else {
                    Ok(content_of(&t.url))
                }
            }
        }
    };
    let cfg = Config {
        retry_wait: wait,
        ..Config::default()
    };
    let runner = Runner::start(Arc::new(MemoryStore::new()), fetch, cfg).await?;
    let s = runner
        .submit(caller("alice"), CallerClass::Fleet, targets("a", 1))
        .await?;
    until_status(&runner, &s.id, "is done", |v| {
        v.job.status == JobStatus::Done
    })
    .await?;
    let calls = calls.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let [busy, again] = calls[..] else {
        return Err(format!("two fetches expected, got {}", calls.len()).into());
    };
    let gap = again.duration_since(busy);
    assert!(
        gap >= wait && gap <= wait + Duration::from_millis(5),
        "tried again {gap:?} after its busy answer, retry_wait {wait:?}"
    );
    runner.close().await;
    Ok(())
}

/// A target that keeps coming back busy is failed once it has been busy for longer than
/// `retry_for` from its first busy answer, at the first answer past it: not sooner, and not a
/// retry later. On tokio's paused clock, as above.
#[tokio::test(start_paused = true)]
async fn a_target_busy_for_longer_than_retry_for_fails_at_its_first_answer_past_it()
-> rota_tests::runner::TestResult {
    use std::sync::Mutex;
    use std::time::Duration;

    use rota::{CallerClass, CancellationToken, Config, FetchError, JobStatus, Runner, Target};
    use rota_tests::runner::{caller, targets, until_status};
    use tokio::time::Instant;

    let (wait, retry_for) = (Duration::from_millis(100), Duration::from_secs(1));
    let calls: Arc<Mutex<Vec<Instant>>> = Arc::default();
    let fetch = {
        let calls = calls.clone();
        move |_c: Arc<rota::Caller>, _t: Target, _cancel: CancellationToken| {
            let calls = calls.clone();
            async move {
                calls
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(Instant::now());
                Err::<rota::TargetResult, _>(FetchError::RetryLater("busy".into()))
            }
        }
    };
    let cfg = Config {
        retry_wait: wait,
        retry_for,
        ..Config::default()
    };
    let runner = Runner::start(Arc::new(MemoryStore::new()), fetch, cfg).await?;
    let s = runner
        .submit(caller("alice"), CallerClass::Fleet, targets("a", 1))
        .await?;
    let v = until_status(&runner, &s.id, "is terminal", |v| {
        v.job.status.is_terminal()
    })
    .await?;
    assert_eq!(v.job.status, JobStatus::Failed);
    assert_eq!(v.targets.first().map(|t| t.error.as_str()), Some("busy"));
    let calls = calls.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let (Some(first), Some(last)) = (calls.first(), calls.last()) else {
        return Err("no fetch".into());
    };
    let busy_for = last.duration_since(*first);
    assert!(
        busy_for > retry_for && busy_for <= retry_for + wait + Duration::from_millis(5),
        "failed after {busy_for:?} of busy answers ({} fetches), retry_for {retry_for:?}, \
         retry_wait {wait:?}",
        calls.len()
    );
    runner.close().await;
    Ok(())
}

/// Idle workers never poll (SPEC §4): with the only target due again in an hour, they sleep
/// until then, and the runtime's thread parks as often during a sleep of the test's as it does
/// with no runner at all (tokio's timer wheel parks a long sleep in steps), not once more per
/// wake-up of a worker that looks for work on a timer. Counted by tokio's park count of the
/// test's one runtime thread, on the wall clock.
#[tokio::test(flavor = "current_thread")]
async fn idle_workers_sleep_until_the_next_retry_without_waking() -> rota_tests::runner::TestResult
{
    use std::sync::atomic::Ordering;
    use std::time::Duration;

    const IDLE: Duration = Duration::from_millis(300);
    let alone = parks_alone(IDLE).await;
    let (runner, fetched) = busy_runner(Arc::new(MemoryStore::new())).await?;
    retry_an_hour_away(&runner, &fetched).await?;
    let parks = parks_while_idle(IDLE).await;
    assert!(
        parks <= alone + 2,
        "the runtime's thread parked {parks} times in 300 ms of idle workers, {alone} times \
         with no runner"
    );
    assert_eq!(fetched.load(Ordering::SeqCst), 1, "fetched once, not again");
    runner.close().await;
    Ok(())
}

/// How many times the test's one runtime thread parks while the test sleeps for `idle`.
async fn parks_while_idle(idle: std::time::Duration) -> u64 {
    let metrics = tokio::runtime::Handle::current().metrics();
    let before = metrics.worker_park_count(0);
    tokio::time::sleep(idle).await;
    metrics.worker_park_count(0) - before
}

/// [`parks_while_idle`] with nothing else running: the most of three, as where a sleep falls on
/// the timer wheel's slots moves its count.
async fn parks_alone(idle: std::time::Duration) -> u64 {
    let mut alone = 0;
    for _ in 0..3 {
        alone = alone.max(parks_while_idle(idle).await);
    }
    alone
}

/// A runner of two workers on `store` whose every fetch answers busy, to be tried again in an
/// hour; and the count of its fetches.
async fn busy_runner(
    store: Arc<dyn rota::BatchStore>,
) -> rota_tests::runner::Res<(rota::Runner, Arc<std::sync::atomic::AtomicUsize>)> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use rota::{CancellationToken, Config, FetchError, Runner, Target};
    let fetched = Arc::new(AtomicUsize::new(0));
    let fetch = {
        let fetched = fetched.clone();
        move |_c: Arc<rota::Caller>, _t: Target, _cancel: CancellationToken| {
            fetched.fetch_add(1, Ordering::SeqCst);
            async { Err::<rota::TargetResult, _>(FetchError::RetryLater("busy".into())) }
        }
    };
    let cfg = Config {
        workers: 2,
        retry_wait: Duration::from_secs(3600),
        retry_for: Duration::from_secs(7200),
        ..Config::default()
    };
    Ok((Runner::start(store, fetch, cfg).await?, fetched))
}

/// Submits a job of one target to a [`busy_runner`] and waits until that target has been
/// fetched once and is back to pending, due again in an hour.
async fn retry_an_hour_away(
    runner: &rota::Runner,
    fetched: &std::sync::atomic::AtomicUsize,
) -> TestResult {
    use std::sync::atomic::Ordering;

    use rota::{CallerClass, TargetState};
    use rota_tests::runner::{caller, targets, until_status};
    let s = runner
        .submit(caller("alice"), CallerClass::Fleet, targets("a", 1))
        .await?;
    // (Pending once fetched: the fetch starts after the target is stored running.)
    until_status(runner, &s.id, "is fetched and back to pending", |v| {
        fetched.load(Ordering::SeqCst) == 1
            && v.targets
                .first()
                .is_some_and(|t| t.status == TargetState::Pending)
    })
    .await
    .map(drop)
}

/// A [`LogCapture`](rota_tests::runner::LogCapture) sees a record whose callsite was first
/// reached on another thread, one without a subscriber, while the capture was the only
/// subscriber in the process. tracing-core then decides the callsite's interest from the
/// reaching thread's own default (none: "never") and keeps it (tokio-rs/tracing#3611), so a
/// runner test's log check could miss a line another test's worker happened to reach first.
/// The capture keeps a second, silent subscriber registered for the process, which takes
/// tracing-core off that path. (Run alone, this test fails without it; beside other capture
/// tests it may pass either way.)
#[test]
fn a_capture_sees_a_record_first_reached_on_a_thread_without_one() -> TestResult {
    fn log_line(who: &str) {
        tracing::info!(who, "line first reached elsewhere");
    }
    let logs = rota_tests::runner::LogCapture::start();
    std::thread::spawn(|| log_line("other"))
        .join()
        .map_err(|_| "the other thread panicked")?;
    log_line("capture");
    let text = logs.buf.text();
    assert!(text.contains("who=\"capture\""), "not captured: {text:?}");
    assert!(
        !text.contains("who=\"other\""),
        "another thread's record: {text:?}"
    );
    Ok(())
}

/// Idle workers never poll (SPEC §4), on tokio's paused clock: a runner with nothing at all to
/// do, and then one whose only target is due again in an hour, each idles through 10 minutes of
/// virtual time, and in that time its store gets no call (counted by a wrapper that sees every
/// `BatchStore` call, reads included), the target is not fetched again, and the runtime's one
/// thread parks no more often than it does for the same sleep with no runner at all (give or
/// take 2: where a sleep falls on tokio's timer wheel moves its count by a step or two).
///
/// What can be seen: a worker that wakes on a timer and only asks its machine for work again
/// calls no store method and no hook, so no wrapper sees it. The park count does: on the paused
/// clock time moves only while the thread parks, so each timer wake-up is a park of its own,
/// and a poll of a period well under 10 minutes (250 ms: thousands; 60 s: tens) is far over
/// the bound, at once and on any machine. The store count catches a poll that reads the
/// store. (A poll of a period near or over 10 minutes would go unseen.)
#[tokio::test(start_paused = true)]
async fn idle_workers_sleep_through_ten_virtual_minutes_without_a_wake_up_or_a_store_call()
-> rota_tests::runner::TestResult {
    use std::sync::atomic::Ordering;
    use std::time::Duration;

    use rota_tests::runner::faulty;

    const IDLE: Duration = Duration::from_secs(600);
    let alone = parks_alone(IDLE).await;
    let (f, store) = faulty(Arc::new(MemoryStore::new()));
    let (runner, fetched) = busy_runner(store).await?;

    // Nothing to do at all.
    let calls = f.calls();
    let parks = parks_while_idle(IDLE).await;
    assert_eq!(f.calls(), calls, "store calls with nothing to do");
    assert!(
        parks <= alone + 2,
        "the runtime's thread parked {parks} times in {IDLE:?} of a runner with nothing to do, \
         {alone} times with no runner"
    );

    // Only a retry an hour away.
    retry_an_hour_away(&runner, &fetched).await?;
    let calls = f.calls();
    let parks = parks_while_idle(IDLE).await;
    assert_eq!(
        f.calls(),
        calls,
        "store calls while the only retry is an hour away"
    );
    assert!(
        parks <= alone + 2,
        "the runtime's thread parked {parks} times in {IDLE:?} of a runner whose only retry is \
         an hour away, {alone} times with no runner"
    );
    assert_eq!(fetched.load(Ordering::SeqCst), 1, "fetched once, not again");
    runner.close().await;
    Ok(())
}

/// A job's id is 16 random bytes (SPEC §3), all of them random: over 50 jobs, every byte of
/// the id (each pair of its 32 hex digits) takes more than one value, and no two ids are the
/// same. (A random byte is the same in 50 ids with probability 256^-49; an id with only some
/// bytes random, the rest fixed, fails at once.) The runner makes the id, whatever the store.
#[tokio::test]
async fn every_byte_of_a_job_id_is_random() -> TestResult {
    use std::collections::HashSet;

    use rota::Config;
    use rota_tests::runner::{Probe, config, rig};

    let cfg = Config {
        jobs_per_caller: 64,
        jobs_total: 64,
        ..config()
    };
    let r = rig(Arc::new(MemoryStore::new()), Probe::new(), cfg).await?;
    let mut ids = Vec::new();
    for n in 0..50 {
        ids.push(r.submit("alice", &format!("j{n}"), 1).await?);
    }
    r.close().await?;
    for id in &ids {
        assert!(
            id.len() == 32 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')),
            "id {id:?} is not 32 lowercase hex digits"
        );
    }
    assert_eq!(
        ids.iter().collect::<HashSet<_>>().len(),
        ids.len(),
        "{ids:?}"
    );
    for byte in 0..16 {
        let values: HashSet<&str> = ids
            .iter()
            .filter_map(|id| id.get(2 * byte..2 * byte + 2))
            .collect();
        assert!(
            values.len() > 1,
            "byte {byte} of the id is {values:?} in all of {} ids: {ids:?}",
            ids.len()
        );
    }
    Ok(())
}
