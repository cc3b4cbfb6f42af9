//! Crash safety, proven with `kill -9`: a child process (this test binary, re-executed) runs a
//! [`Runner`] on a file store with an instant fetch, submitting jobs one after another and
//! printing each job's id once the runner reports it done. The parent kills it with SIGKILL at
//! several points (after 1, 5 and 20 acknowledged jobs, and at a random moment), reopens the
//! file, and checks that:
//! - the file opens (the dead owner's lock is gone) and `PRAGMA integrity_check` says ok;
//! - every acknowledged job is there, `done`, with every target done and its result exactly
//!   what the fetch returned;
//! - no job or target is half-written: every job's counts and bytes match its target rows, and
//!   no target is left without its job;
//! - `Runner::start` fails the job left live with error `interrupted`, and leaves none live.
//!
//! Runs without libtest (`harness = false`) so that the child is the same binary with one
//! environment variable set.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "common/child.rs"]
mod child_process;

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use child_process::{KillOnDrop, Lines};

use rota::{
    BatchStore, Caller, CallerClass, CancellationToken, Config, FetchError, JobStatus, Runner,
    Target, TargetResult, TargetState,
};
use rota_store_sqlite::SqliteStore;

const CHILD_ENV: &str = "ROTA_SQLITE_CRASH_CHILD";
/// Tells the child the job whose target 1 never returns, so a kill surely finds it live.
const HANG_ENV: &str = "ROTA_SQLITE_CRASH_HANG_AT";
const TARGETS: usize = 3;
/// How long the parent waits for the child's next line before it calls the child stuck.
const PATIENCE: Duration = Duration::from_secs(120);

fn main() {
    if std::env::args().any(|a| a == "--list") {
        println!("kill_9_at_any_moment_loses_no_acknowledged_job: test");
        return;
    }
    if let Ok(path) = std::env::var(CHILD_ENV) {
        child(Path::new(&path));
        return;
    }
    let seed = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(7);
    let random_jobs = 1 + (seed % 30) as usize;
    let random_delay = Duration::from_micros(u64::from(seed / 7 % 20_000));
    // (acknowledged jobs before the kill, then how long to wait, whether the next job hangs)
    let points = [
        (1, Duration::ZERO, false),
        (5, Duration::ZERO, false),
        (20, Duration::ZERO, false),
        (random_jobs, random_delay, false),
        (3, Duration::from_millis(100), true),
    ];
    for (after, delay, hang) in points {
        let mid = if hang {
            "_with_the_next_job_mid_fetch"
        } else {
            ""
        };
        print!(
            "test kill_9_after_{after}_jobs{mid}_and_{}us ... ",
            delay.as_micros()
        );
        std::io::stdout().flush().unwrap();
        let left_live = kill_and_check(after, delay, hang);
        println!(
            "ok ({})",
            if left_live {
                "a job was left live"
            } else {
                "no job was live"
            }
        );
    }
    println!("\ntest result: ok. {} kill points passed", points.len());
}

fn result_for(url: &str) -> TargetResult {
    let mut meta = serde_json::Map::new();
    meta.insert("len".into(), url.len().into());
    meta.insert("quote".into(), "ü \"\0\n".into());
    TargetResult {
        content: format!("content of {url}\n✓"),
        meta,
    }
}

async fn fetch(
    _caller: Arc<Caller>,
    target: Target,
    _cancel: CancellationToken,
) -> Result<TargetResult, FetchError> {
    Ok(result_for(&target.url))
}

fn url(job: usize, idx: usize) -> String {
    format!("https://example.com/crash/{job}/{idx}")
}

/// The child: submit, wait for done, print, forever (until killed).
fn child(path: &Path) {
    let hang = std::env::var(HANG_ENV)
        .ok()
        .map(|n| url(n.parse().unwrap(), 1));
    let fetch = move |caller: Arc<Caller>, target: Target, cancel: CancellationToken| {
        let hangs = hang.as_deref() == Some(target.url.as_str());
        async move {
            if hangs {
                std::future::pending::<()>().await;
            }
            fetch(caller, target, cancel).await
        }
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let store: Arc<dyn BatchStore> = Arc::new(SqliteStore::open(path).unwrap());
        let runner = Runner::start(store, fetch, Config::default())
            .await
            .unwrap();
        let caller = Caller {
            name: "crash".into(),
            ..Caller::default()
        };
        let mut out = std::io::stdout().lock();
        for n in 0.. {
            let targets = (0..TARGETS)
                .map(|i| Target {
                    url: url(n, i),
                    ..Target::default()
                })
                .collect();
            let job = runner
                .submit(caller.clone(), CallerClass::Fleet, targets)
                .await
                .unwrap();
            writeln!(out, "admitted {n} {}", job.id).unwrap();
            out.flush().unwrap();
            loop {
                let view = runner.status(&job.id).await.unwrap().unwrap();
                if view.job.status.is_terminal() {
                    assert_eq!(view.job.status, JobStatus::Done);
                    break;
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            writeln!(out, "done {n} {}", job.id).unwrap();
            out.flush().unwrap();
        }
    });
}

/// One kill point: run a child on a fresh file, kill it `delay` after its `after`-th
/// acknowledged job (with `hang`, after the next job, whose second target never returns, was
/// admitted), and check the file. Whether a job was left live.
fn kill_and_check(after: usize, delay: Duration, hang: bool) -> bool {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rota.db");
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.env(CHILD_ENV, &path).stdout(Stdio::piped());
    if hang {
        cmd.env(HANG_ENV, after.to_string());
    }
    let mut child = KillOnDrop::spawn(&mut cmd);
    let mut out = Lines::new(child.stdout.take().unwrap());
    let mut lines = Vec::new();
    let mut done = 0;
    let hung = format!("admitted {after} ");
    while done < after || (hang && !lines.last().is_some_and(|l: &String| l.starts_with(&hung))) {
        let line = out
            .next_within(PATIENCE)
            .unwrap_or_else(|| panic!("the child stopped after {done} jobs"));
        done += usize::from(line.starts_with("done "));
        lines.push(line);
    }
    std::thread::sleep(delay);
    child.kill().unwrap();
    let status = child.wait().unwrap();
    assert!(!status.success(), "the child was killed");
    // Whatever the child printed before it died was acknowledged too.
    lines.extend(out.rest_within(PATIENCE));

    let mut admitted: Vec<(usize, String)> = Vec::new();
    let mut acked: Vec<(usize, String)> = Vec::new();
    for line in &lines {
        let mut parts = line.split(' ');
        let (kind, n, id) = (parts.next(), parts.next(), parts.next());
        let entry = (n.unwrap().parse().unwrap(), id.unwrap().to_owned());
        match kind {
            Some("admitted") => admitted.push(entry),
            Some("done") => acked.push(entry),
            _ => panic!("unexpected line {line:?}"),
        }
    }
    assert!(acked.len() >= after);
    let unacked: Vec<_> = admitted
        .iter()
        .filter(|a| !acked.contains(a))
        .cloned()
        .collect();
    assert!(unacked.len() <= 1, "one job at a time: {unacked:?}");

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let left_live = rt.block_on(async {
        let store = Arc::new(SqliteStore::open(&path).expect("a killed store reopens"));
        store.integrity_check().unwrap();
        for (n, id) in &acked {
            let job = store
                .job(id)
                .await
                .unwrap()
                .unwrap_or_else(|| panic!("job {n} lost"));
            assert_eq!(
                (job.status, job.targets_done, job.targets_total),
                (JobStatus::Done, TARGETS, TARGETS),
                "job {n}"
            );
            assert_eq!(job.error, "");
            let targets = store.targets(id).await.unwrap();
            assert_eq!(targets.len(), TARGETS, "job {n}");
            for (i, t) in targets.iter().enumerate() {
                assert_eq!(
                    (t.idx, t.status),
                    (i, TargetState::Done),
                    "job {n} target {i}"
                );
                assert_eq!(t.url, url(*n, i));
                let want = serde_json::to_string(&result_for(&t.url)).unwrap();
                assert_eq!(
                    t.result.as_deref(),
                    Some(want.as_str()),
                    "job {n} target {i}"
                );
                assert_eq!(t.to_status().result, Some(result_for(&t.url)));
            }
        }
        let live_before = store.live_jobs(None).await.unwrap();
        assert!(live_before <= 1, "{live_before} live jobs");
        if hang {
            let (n, id) = unacked.first().expect("the hung job was admitted");
            let job = store.job(id).await.unwrap().unwrap();
            assert!(job.status.is_live(), "the hung job {n} is {}", job.status);
            let targets = store.targets(id).await.unwrap();
            assert_eq!(targets.len(), TARGETS);
            // Target 0 is stored whole or not at all; target 1 never finished.
            let t0 = &targets[0];
            if t0.status == TargetState::Done {
                let want = serde_json::to_string(&result_for(&t0.url)).unwrap();
                assert_eq!(t0.result.as_deref(), Some(want.as_str()));
            } else {
                assert_eq!(t0.result, None);
            }
            assert!(!targets[1].status.is_finished() && targets[1].result.is_none());
        }
        let left = match unacked.first() {
            Some((_, id)) => store.job(id).await.unwrap().map(|j| (id.clone(), j.status)),
            None => None,
        };
        let dyn_store: Arc<dyn BatchStore> = store.clone();
        let runner = Runner::start(dyn_store, fetch, Config::default())
            .await
            .unwrap();
        assert_eq!(
            store.live_jobs(None).await.unwrap(),
            0,
            "recovery leaves no job live"
        );
        let mut left_live = false;
        if let Some((id, status)) = left {
            let job = store.job(&id).await.unwrap().unwrap();
            if status.is_live() {
                assert_eq!(
                    (job.status, job.error.as_str()),
                    (JobStatus::Failed, "interrupted")
                );
                left_live = true;
            } else {
                assert_eq!(job.status, status, "a terminal job stays as it was");
            }
        }
        assert!(left_live || !hang, "the hung job was left live");
        runner.close().await;
        left_live
    });
    // Dropping the runtime drops the runner's tasks and with them the last handle on the store.
    drop(rt);
    check_rows(&path);
    left_live
}

/// Every job's counts and bytes against its target rows, and every target against its job,
/// straight from the file.
fn check_rows(path: &Path) {
    let conn = rusqlite::Connection::open(path).unwrap();
    let ok: String = conn
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(ok, "ok");
    let bad: i64 = conn
        .query_row(
            "SELECT count(*) FROM jobs j WHERE
               targets_total != (SELECT count(*) FROM targets t WHERE t.job = j.seq)
            OR targets_done != (SELECT count(*) FROM targets t
                                WHERE t.job = j.seq AND t.status IN ('done', 'failed'))
            OR n_bytes != (SELECT coalesce(sum(length(CAST(url AS BLOB))
                                 + length(CAST(options AS BLOB))
                                 + coalesce(length(CAST(result AS BLOB)), 0)
                                 + length(CAST(error AS BLOB))
                                 + length(CAST(hint AS BLOB))), 0)
                           FROM targets t WHERE t.job = j.seq)",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(bad, 0, "jobs whose counts disagree with their targets");

    let orphans: i64 = conn
        .query_row(
            "SELECT count(*) FROM targets WHERE job NOT IN (SELECT seq FROM jobs)",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(orphans, 0, "targets without a job");
}
