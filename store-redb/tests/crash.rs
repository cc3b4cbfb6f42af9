//! Crash safety, proven with `kill -9`: a child process runs a rota `Runner` on a file store,
//! submitting jobs one after another and printing each job's id once the runner reports it done;
//! the parent SIGKILLs it at several points, reopens the file and checks what survived.
//!
//! The child is this same test binary, re-executed with [`CHILD_ENV`] set: each test function
//! starts with "am I the child?" and, if so, plays the child instead of the parent.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../../store-sqlite/tests/common/child.rs"]
mod child_process;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use child_process::{KillOnDrop, Lines};

use rota::{
    Caller, CallerClass, CancellationToken, Config, JobStatus, Runner, Target, TargetResult,
    TargetState,
};
use rota_core::{BatchStore, StoreError};
use rota_store_redb::{Durability, RedbOptions, RedbStore};

/// Set in the child: the store's path.
const CHILD_ENV: &str = "ROTA_REDB_CRASH_CHILD";
/// Set in the child: `immediate` or `none`.
const DURABILITY_ENV: &str = "ROTA_REDB_CRASH_DURABILITY";
/// Targets per job.
const TARGETS: usize = 3;

/// With no sync, one commit in this many is durable: a job takes 7 commits (admit, then start
/// and finish per target), so the durable points fall at every stage of a job's life.
const SYNC_EVERY: u32 = 5;

/// How long the parent waits for the child's next line before it calls the child stuck: long
/// enough for anything here on a loaded machine; only there so a hang fails the test.
const LIMIT: Duration = Duration::from_secs(60);

fn options(durability: &str) -> RedbOptions {
    RedbOptions {
        durability: if durability == "none" {
            Durability::None
        } else {
            Durability::Immediate
        },
        sync_every: SYNC_EVERY,
        ..RedbOptions::default()
    }
}

/// The content the child's fetch returns for `url`: the parent checks it byte for byte.
fn content_of(url: &str) -> String {
    format!("content of {url} ✓ \"quoted\"\n")
}

/// The child: open the store, start a runner, submit job after job and print `SUBMIT id` when
/// a submit returns and `ACK id` when the runner reports the job done. Forever, until killed
/// (or until the parent is gone and printing fails).
async fn child(path: &str, durability: &str) {
    let store = RedbStore::open_with(path, options(durability)).unwrap();
    let fetch = |_c: Arc<Caller>, t: Target, _cancel: CancellationToken| async move {
        Ok(TargetResult {
            content: content_of(&t.url),
            meta: Default::default(),
        })
    };
    let runner = Runner::start(Arc::new(store), fetch, Config::default())
        .await
        .unwrap();
    let caller = Caller {
        name: "crash".into(),
        ..Caller::default()
    };
    let run = std::process::id();
    let mut out = std::io::stdout().lock();
    for n in 0u64.. {
        let targets = (0..TARGETS)
            .map(|i| Target {
                url: format!("https://example.com/{run}/{n}/{i}"),
                options: Default::default(),
            })
            .collect();
        let sub = runner
            .submit(caller.clone(), CallerClass::Fleet, targets)
            .await
            .unwrap();
        writeln!(out, "SUBMIT {}", sub.id).unwrap();
        out.flush().unwrap();
        loop {
            let view = runner.status(&sub.id).await.unwrap().unwrap();
            if view.job.status.is_terminal() {
                assert_eq!(view.job.status, JobStatus::Done);
                break;
            }
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
        writeln!(out, "ACK {}", sub.id).unwrap();
        out.flush().unwrap();
    }
}

/// Spawns the child, and the reader of its stdout.
fn spawn_child(test: &str, path: &Path, durability: &str) -> (KillOnDrop, Lines) {
    let mut child = KillOnDrop::spawn(
        Command::new(std::env::current_exe().unwrap())
            .args([test, "--exact", "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, path)
            .env(DURABILITY_ENV, durability)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit()),
    );
    let lines = Lines::new(child.stdout.take().unwrap());
    (child, lines)
}

/// What one child run printed before it was killed.
#[derive(Default, Debug)]
struct Run {
    acked: Vec<String>,
    /// The last job submitted and not acknowledged, if any.
    pending: Option<String>,
}

/// Runs a child until it has acknowledged `acks` jobs, then waits `delay` more and SIGKILLs it.
/// While it runs, checks that the parent cannot open the store.
fn run_and_kill(test: &str, path: &Path, durability: &str, acks: usize, delay: Duration) -> Run {
    let (mut child, mut lines) = spawn_child(test, path, durability);
    let mut run = Run::default();
    while run.acked.len() < acks {
        let line = lines.next_within(LIMIT).expect("the child stopped early");
        run.read(&line);
        if run.acked.len() == 1 && run.pending.is_none() {
            let err = RedbStore::open(path).unwrap_err();
            assert!(matches!(err, StoreError::InUse(_)), "{err:?}");
        }
    }
    std::thread::sleep(delay);
    child.kill().unwrap();
    child.wait().unwrap();
    // Lines the child printed before it died still count: they were acknowledged.
    for line in lines.rest_within(LIMIT) {
        run.read(&line);
    }
    run
}

impl Run {
    /// Reads one line of the child's output. libtest may have printed the test's name on the
    /// same line, so the marker is looked for anywhere in it; a line cut short by the kill has
    /// no complete id and counts for nothing.
    fn read(&mut self, line: &str) {
        let id_after = |marker: &str| {
            line.rfind(marker)
                .map(|at| &line[at + marker.len()..])
                .filter(|id| id.len() == 32)
        };
        if let Some(id) = id_after("SUBMIT ") {
            self.pending = Some(id.to_owned());
        } else if let Some(id) = id_after("ACK ") {
            assert_eq!(self.pending.take().as_deref(), Some(id));
            self.acked.push(id.to_owned());
        }
    }
}

/// Asserts that job `id` is done, whole, with every target's result as the fetch made it.
async fn assert_done_and_whole(store: &RedbStore, id: &str) {
    let job = store
        .job(id)
        .await
        .unwrap()
        .expect("an acknowledged job is missing");
    assert_eq!(job.status, JobStatus::Done, "job {id}");
    assert_eq!((job.targets_total, job.targets_done), (TARGETS, TARGETS));
    let targets = store.targets(id).await.unwrap();
    assert_eq!(targets.len(), TARGETS);
    for t in &targets {
        assert_eq!(t.status, TargetState::Done);
        let st = t.to_status();
        assert_eq!(st.result.unwrap().content, content_of(&t.url));
    }
}

/// Reopens the store, checks it, then starts and closes a runner on it: the leftover live job,
/// if any, must be failed `interrupted`. Returns the status and error of every job it holds.
async fn reopen_and_recover(path: &Path) -> BTreeMap<String, (JobStatus, String)> {
    let store = Arc::new(RedbStore::open(path).unwrap());
    store.verify().unwrap();
    let fetch = |_c: Arc<Caller>, _t: Target, _cancel: CancellationToken| async move {
        Ok(TargetResult::default())
    };
    let runner = Runner::start(store.clone(), fetch, Config::default())
        .await
        .unwrap();
    runner.close().await;
    drop(runner);
    // The runner's tasks may let go of the store a moment after close returns; the next open
    // (the child's, or the parent's) needs the file unlocked.
    for _ in 0..3000 {
        if Arc::strong_count(&store) == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        Arc::strong_count(&store),
        1,
        "the runner kept the store after close"
    );
    let v = store.verify().unwrap();
    assert_eq!(v.live, 0, "recovery left a live job");
    let mut out = BTreeMap::new();
    for id in v.jobs {
        let job = store.job(&id).await.unwrap().unwrap();
        out.insert(id, (job.status, job.error));
    }
    out
}

/// The points at which the child is killed: after so many acknowledged jobs, plus a delay that
/// lands the kill at a different point of a job's life.
const KILLS: [(usize, u64); 6] = [(3, 0), (8, 1), (15, 2), (22, 3), (30, 5), (40, 7)];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_keeps_every_acknowledged_job_and_recovery_fails_the_live_one() {
    const TEST: &str = "kill_9_keeps_every_acknowledged_job_and_recovery_fails_the_live_one";
    if let Ok(path) = std::env::var(CHILD_ENV) {
        return child(&path, &std::env::var(DURABILITY_ENV).unwrap()).await;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("crash.redb");
    let mut acked = Vec::new();
    let mut interrupted = 0;
    for (acks, delay_ms) in KILLS {
        let run = run_and_kill(
            TEST,
            &path,
            "immediate",
            acks,
            Duration::from_millis(delay_ms),
        );
        assert!(run.acked.len() >= acks);
        acked.extend(run.acked);
        {
            let store = RedbStore::open(&path).unwrap();
            store.verify().unwrap();
            for id in &acked {
                assert_done_and_whole(&store, id).await;
            }
            if let Some(id) = &run.pending {
                // Its submit returned, so it was stored; it may have finished unacknowledged.
                let job = store
                    .job(id)
                    .await
                    .unwrap()
                    .expect("a submitted job is missing");
                assert!(job.status.is_live() || job.status == JobStatus::Done);
            }
        }
        let statuses = reopen_and_recover(&path).await;
        if let Some(id) = &run.pending {
            let status = statuses.get(id).map(|(s, _)| *s);
            assert!(
                matches!(status, Some(JobStatus::Failed | JobStatus::Done)),
                "the leftover job {id} is {status:?}"
            );
        }
        for id in &acked {
            assert_eq!(statuses.get(id).map(|(s, _)| *s), Some(JobStatus::Done));
        }
        // The fetch never fails: a failed job can only be one that recovery failed.
        interrupted = 0;
        for (id, (status, error)) in &statuses {
            if *status == JobStatus::Failed {
                assert_eq!(error, "interrupted", "job {id}");
                interrupted += 1;
            }
        }
    }
    eprintln!(
        "immediate: {} acknowledged jobs kept, {interrupted} failed interrupted",
        acked.len()
    );
    assert!(
        interrupted >= 1,
        "no kill left a live job to recover: the test did not test recovery"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_without_sync_may_lose_recent_jobs_but_never_corrupts() {
    const TEST: &str = "kill_9_without_sync_may_lose_recent_jobs_but_never_corrupts";
    if let Ok(path) = std::env::var(CHILD_ENV) {
        return child(&path, &std::env::var(DURABILITY_ENV).unwrap()).await;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("crash.redb");
    // Jobs seen by a previous check: recovery's commit made them durable, so they must stay.
    let mut kept: BTreeMap<String, (JobStatus, String)> = BTreeMap::new();
    let (mut survived, mut lost, mut cut) = (0, 0, 0);
    for (acks, delay_ms) in KILLS {
        let run = run_and_kill(TEST, &path, "none", acks, Duration::from_millis(delay_ms));
        {
            let store = RedbStore::open(&path).unwrap();
            // Opens, and every index and counter agrees with the rows: nothing half-written.
            store.verify().unwrap();
            // What survived of this run is a prefix of what it acknowledged: a crash rolls
            // back to a point in the commit order.
            let mut present = Vec::new();
            for id in &run.acked {
                present.push(store.job(id).await.unwrap().is_some());
            }
            assert!(
                present.windows(2).all(|w| w[0] || !w[1]),
                "a later job survived an earlier one: {present:?}"
            );
            survived += present.iter().filter(|p| **p).count();
            lost += present.iter().filter(|p| !**p).count();
            for (id, present) in run.acked.iter().zip(&present) {
                if *present {
                    let job = store.job(id).await.unwrap().unwrap();
                    if job.status == JobStatus::Done {
                        assert_done_and_whole(&store, id).await;
                    } else {
                        // Rolled back to before its last target was stored: still whole.
                        assert!(job.status.is_live(), "{id}: {:?}", job.status);
                        assert!(job.targets_done < TARGETS);
                        cut += 1;
                    }
                }
            }
        }
        let statuses = reopen_and_recover(&path).await;
        for (id, status) in &kept {
            assert_eq!(statuses.get(id), Some(status), "job {id} was lost");
        }
        kept = statuses;
    }
    eprintln!("no sync: {survived} acknowledged jobs survived, {lost} lost, {cut} cut mid-job");
    assert!(
        survived > 0,
        "no acknowledged job survived: wholeness was never checked"
    );
}

/// The child of the start test: drives the store through a runner's calls for a job of two
/// targets: start 0, finish 0, start 1; prints `STARTED` once the last is acknowledged and
/// waits to be killed.
async fn start_child(path: &str) {
    use rota_core::{Caps, NewJob, TargetWrite};
    let store = RedbStore::open(path).unwrap();
    let id = "a".repeat(32);
    let job = NewJob {
        id: id.clone(),
        caller: "crash".into(),
        class: CallerClass::Fleet,
        idem_key: "k".into(),
        targets: vec![("u0".into(), "{}".into()), ("u1".into(), "{}".into())],
        now: 10,
    };
    let caps = Caps {
        targets_per_job: 2,
        jobs_per_caller: 1,
        jobs_total: 1,
        ttl_secs: 3600,
    };
    store.admit(&job, &caps).await.unwrap();
    store.start_target(&id, 0, 11).await.unwrap().unwrap();
    let done = TargetWrite::Done {
        result: r#"{"content":"c0"}"#.into(),
    };
    assert!(store.finish_target(&id, 0, &done, 12, None).await.unwrap());
    store.start_target(&id, 1, 13).await.unwrap().unwrap();
    println!("\nSTARTED");
    std::thread::sleep(Duration::from_secs(60));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_keeps_an_acknowledged_start_with_nothing_written_after_it() {
    const TEST: &str = "kill_9_keeps_an_acknowledged_start_with_nothing_written_after_it";
    if let Ok(path) = std::env::var(CHILD_ENV) {
        return start_child(&path).await;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("start.redb");
    let (mut child, mut lines) = spawn_child(TEST, &path, "immediate");
    let started = std::iter::from_fn(|| lines.next_within(LIMIT)).any(|l| l == "STARTED");
    assert!(started, "the child stopped early");
    child.kill().unwrap();
    child.wait().unwrap();

    let store = RedbStore::open(&path).unwrap();
    store.verify().unwrap();
    let id = "a".repeat(32);
    let job = store.job(&id).await.unwrap().unwrap();
    let targets = store.targets(&id).await.unwrap();
    // Every acknowledged write is there: the last, start 1, with nothing written after it.
    assert_eq!(job.status, JobStatus::Running);
    assert_eq!((job.targets_done, job.lease), (1, 13));
    assert_eq!(targets[0].status, TargetState::Done);
    assert_eq!(targets[0].result.as_deref(), Some(r#"{"content":"c0"}"#));
    assert_eq!(targets[1].status, TargetState::Running);
    drop(store);
    let statuses = reopen_and_recover(&path).await;
    assert_eq!(
        statuses.get(&id),
        Some(&(JobStatus::Failed, "interrupted".to_owned()))
    );
}
