//! Random workloads on a real runner, on each backend, with the invariants that must hold
//! however its tasks were scheduled checked at the end (so nothing here depends on timing:
//! a seed's run may take any path, and every path must end in a state these allow).
//!
//! Each workload mixes done, failed and busy answers (with short `retry_wait` and
//! `retry_for`, so some targets give up), fetches that panic, cancels at random moments,
//! reused submits, submits refused by tight caps from three tasks at once, and a close in
//! the middle or at the end. `ROTA_RANDOM_CASES` sets the number of seeds of each test
//! (default 150).

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rota::{BatchStore, Config, FetchError, JobOutcome, JobStatus, TargetState};
use rota_store_memory::MemoryStore;
use rota_store_redb::RedbStore;
use rota_store_sqlite::SqliteStore;
use rota_tests::runner::{
    Act, Probe, Rig, Shared, T0, TestResult, content_of, rig, states, targets,
};

/// How many seeds each test runs.
fn cases() -> u64 {
    std::env::var("ROTA_RANDOM_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(150)
}

/// The next number of a xorshift generator shared by the tasks of one seed.
fn next(s: &AtomicU64) -> u64 {
    let mut x = s.load(Ordering::Relaxed);
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    s.store(x, Ordering::Relaxed);
    x
}

/// Seed `n`'s store: memory, SQLite and redb in turn.
fn store(n: u64) -> Result<Arc<dyn BatchStore>, rota::StoreError> {
    Ok(match n % 3 {
        0 => Arc::new(MemoryStore::new()),
        1 => Arc::new(SqliteStore::open_in_memory()?),
        _ => Arc::new(RedbStore::in_memory()?),
    })
}

/// A fetch whose answer to each url and attempt follows from `seed`: busy, failed, a panic
/// (if `panics`) or the page.
fn probe(seed: u64, panics: bool) -> Probe {
    Probe::scripted(script(seed, panics))
}

/// The answers of [`probe`].
fn script(seed: u64, panics: bool) -> impl Fn(&str, usize) -> Act + Send + Sync + 'static {
    move |url: &str, attempt: usize| {
        let h = url
            .bytes()
            .fold(seed, |a, b| a.wrapping_mul(31).wrapping_add(u64::from(b)))
            .wrapping_add(attempt as u64 * 7919);
        match h % 7 {
            0 | 1 => Act::Fail(FetchError::RetryLater("busy".into())),
            2 => Act::Fail(FetchError::Other("no".into())),
            3 if panics && h % 5 == 0 => Act::Panic("boom".into()),
            _ => Act::Ok(content_of(url)),
        }
    }
}

/// What holds for every job `r` created, once it is closed: terminal, nothing `running`, the
/// finished targets a prefix of the job with the rest `pending`, the status the one its
/// stored targets give (or `cancelled` exactly when a cancel of it returned true, or failed
/// `runner closed` with targets left); and the hooks: one created and one terminal outcome and
/// one `job_seconds` a job, one `target` a finished target, depth and in-flight back to 0, no
/// job with two fetches at once and no more at once than workers. `cancelled` lists the jobs a
/// cancel returned true for.
async fn check_closed(
    r: &Rig,
    seed: u64,
    workers: usize,
    created: &HashSet<String>,
    cancelled: &HashSet<String>,
) -> TestResult {
    let mut finished = 0;
    for id in created {
        let v = r.view(id).await?;
        let st = states(&v);
        let done = st.iter().filter(|s| **s == TargetState::Done).count();
        let failed = st.iter().filter(|s| **s == TargetState::Failed).count();
        let prefix = st.iter().take_while(|s| s.is_finished()).count();
        assert!(
            st[prefix..].iter().all(|s| *s == TargetState::Pending),
            "seed {seed}: {v:?}"
        );
        assert_eq!(v.job.targets_done, done + failed, "seed {seed}: {v:?}");
        finished += done + failed;
        match (v.job.status, v.job.error.as_str()) {
            (JobStatus::Done, "") => assert_eq!(done, st.len(), "seed {seed}: {v:?}"),
            (JobStatus::Failed, "") => assert_eq!(failed, st.len(), "seed {seed}: {v:?}"),
            (JobStatus::Partial, "") => assert!(
                done > 0 && failed > 0 && done + failed == st.len(),
                "seed {seed}: {v:?}"
            ),
            (JobStatus::Cancelled, "") => {}
            (JobStatus::Failed, "runner closed") => {
                assert!(prefix < st.len(), "seed {seed}: {v:?}")
            }
            _ => panic!("seed {seed}: a job ended as it should not: {v:?}"),
        }
        assert_eq!(
            v.job.status == JobStatus::Cancelled,
            cancelled.contains(id),
            "seed {seed}: cancelled exactly when a cancel said so: {v:?}"
        );
    }
    let h = &r.hooks;
    assert_eq!(h.count(JobOutcome::Created), created.len(), "seed {seed}");
    assert_eq!(h.terminal(), created.len(), "seed {seed}");
    assert_eq!(h.job_seconds(), created.len(), "seed {seed}");
    assert_eq!(h.targets().len(), finished, "seed {seed}");
    assert_eq!(h.depth().last().copied().unwrap_or(0), 0, "seed {seed}");
    assert_eq!(h.inflight().last().copied().unwrap_or(0), 0, "seed {seed}");
    assert!(r.probe.max_per_job() <= 1, "seed {seed}");
    assert!(r.probe.max_inflight() <= workers, "seed {seed}");
    assert_eq!(r.store.live_jobs(None).await?, 0, "seed {seed}");
    Ok(())
}

/// One task submits twelve jobs of 1–4 targets, pausing and cancelling one of them now and
/// then; then the runner is closed.
async fn one_submitter(n: u64) -> TestResult {
    let seed = n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let workers = 1 + (n as usize % 2);
    let cfg = Config {
        workers,
        jobs_per_caller: 100,
        jobs_total: 100,
        retry_wait: Duration::from_millis(2),
        retry_for: Duration::from_millis(15),
        ..Config::default()
    };
    let r = rig(store(n)?, probe(seed, true), cfg).await?;
    let rng = AtomicU64::new(seed | 1);
    let mut created = HashSet::new();
    let mut ids = Vec::new();
    let mut cancelled = HashSet::new();
    for j in 0..12 {
        let id = r
            .submit("alice", &format!("j{j}"), (next(&rng) % 4 + 1) as usize)
            .await?;
        created.insert(id.clone());
        ids.push(id);
        if next(&rng).is_multiple_of(3) {
            tokio::time::sleep(Duration::from_millis(next(&rng) % 5)).await;
        }
        if next(&rng).is_multiple_of(4) {
            let id = &ids[next(&rng) as usize % ids.len()];
            if r.runner.cancel(id).await {
                cancelled.insert(id.clone());
            }
        }
    }
    tokio::time::sleep(Duration::from_millis(next(&rng) % 30)).await;
    r.runner.close().await;
    check_closed(&r, seed, workers, &created, &cancelled).await
}

/// Three tasks each submit ten jobs for three callers under tight caps (some refused, some
/// reused) and cancel one of theirs now and then; the runner is closed while they run (even
/// seeds) or after. Beyond [`check_closed`]: at most one target of a job (the one in flight)
/// starts after a cancel of it returned, and no fetch is still running when close returns.
async fn three_submitters(n: u64) -> TestResult {
    let seed = n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let workers = 1 + (n as usize / 2 % 2);
    let cfg = Config {
        workers,
        jobs_per_caller: 3,
        jobs_total: 5,
        retry_wait: Duration::from_millis(1),
        retry_for: Duration::from_millis(8),
        ..Config::default()
    };
    let r = Arc::new(rig(store(n)?, probe(seed, false), cfg).await?);
    let rng = Arc::new(AtomicU64::new(seed | 1));
    let mut tasks = Vec::new();
    for t in 0..3 {
        let (r, rng) = (r.clone(), rng.clone());
        tasks.push(tokio::spawn(async move {
            // (id, reused, its name), and (id, when its cancel returned).
            let mut mine: Vec<(String, bool, String)> = Vec::new();
            let mut cancels = Vec::new();
            // Names of cancelled jobs are not submitted again: a new job of the same urls
            // would fetch them after the cancel.
            let mut dead = HashSet::new();
            for j in 0..10 {
                let size = (next(&rng) % 4 + 1) as usize;
                let who = format!("c{}", next(&rng) % 3);
                let mut name = format!("t{t}{who}n{size}j{}", next(&rng) % 6);
                if dead.contains(&name) {
                    name = format!("t{t}{who}x{j}");
                }
                if let Ok(s) = r.submit_targets(&who, targets(&name, size)).await {
                    mine.push((s.id, s.reused, name));
                }
                if next(&rng).is_multiple_of(3) {
                    tokio::task::yield_now().await;
                }
                if next(&rng).is_multiple_of(3) && !mine.is_empty() {
                    let (id, _, name) = &mine[next(&rng) as usize % mine.len()];
                    dead.insert(name.clone());
                    if r.runner.cancel(id).await {
                        cancels.push((id.clone(), tokio::time::Instant::now()));
                    }
                }
            }
            (mine, cancels)
        }));
    }
    if seed.is_multiple_of(2) {
        tokio::time::sleep(Duration::from_millis(next(&rng) % 4)).await;
        r.runner.close().await;
    }
    let mut created = HashSet::new();
    let mut cancels = Vec::new();
    for t in tasks {
        let (mine, c) = t.await?;
        created.extend(mine.into_iter().filter(|m| !m.1).map(|m| m.0));
        cancels.extend(c);
    }
    r.runner.close().await;
    let closed_at = tokio::time::Instant::now();
    let cancelled: HashSet<String> = cancels.iter().map(|(id, _)| id.clone()).collect();
    check_closed(&r, seed, workers, &created, &cancelled).await?;
    let calls = r.probe.calls();
    for (id, at) in &cancels {
        let urls: HashSet<String> = r
            .view(id)
            .await?
            .targets
            .into_iter()
            .map(|t| t.url)
            .collect();
        let late: HashSet<&str> = calls
            .iter()
            .filter(|c| urls.contains(&c.url) && c.started > *at)
            .map(|c| c.url.as_str())
            .collect();
        assert!(
            late.len() <= 1,
            "seed {seed}: after the cancel of {id}: {late:?}"
        );
    }
    assert!(
        calls
            .iter()
            .all(|c| c.ended.is_some_and(|e| e <= closed_at)),
        "seed {seed}: a fetch ran past close"
    );
    Ok(())
}

/// Two workers under a byte budget of 1 (every terminal job is evicted after each stored
/// target) and a ttl the clock passes now and then (the sweep after a submit deletes every
/// terminal job): one task submits twelve jobs and cancels one now and then, while fetches take
/// a moment (so a cancel often finds a target in flight) and answer busy or failed at times.
/// A cancelled job's target in flight is always stored (its job is never deleted under it: the
/// store never finds a target missing), no job stays live, and once the workers are done the
/// store is within its budget (no evict put off is left unmade).
async fn under_a_byte_budget(n: u64) -> TestResult {
    let seed = n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let shared = Arc::new(Shared::new(store(n)?));
    let cfg = Config {
        workers: 2,
        max_bytes: 1,
        ttl: Duration::from_secs(10),
        jobs_per_caller: 100,
        jobs_total: 100,
        retry_wait: Duration::from_millis(1),
        retry_for: Duration::from_millis(6),
        ..Config::default()
    };
    let probe = Probe::slow_scripted(script(seed, false), Duration::from_micros(300));
    let r = rig(shared.clone(), probe, cfg).await?;
    let rng = AtomicU64::new(seed | 1);
    let mut ids = Vec::new();
    for j in 0..12 {
        let id = r
            .submit("alice", &format!("j{j}"), (next(&rng) % 4 + 1) as usize)
            .await?;
        ids.push(id);
        if next(&rng).is_multiple_of(2) {
            tokio::time::sleep(Duration::from_micros(next(&rng) % 900)).await;
        }
        if next(&rng).is_multiple_of(3) {
            let id = &ids[next(&rng) as usize % ids.len()];
            r.runner.cancel(id).await;
        }
        if next(&rng).is_multiple_of(4) {
            r.clock.set(T0 + 11 * (j + 1));
        }
    }
    r.settled().await?;
    // The last evict put off is made after the last in-flight target's hooks.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while r.store.total_bytes().await? > 1 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "seed {seed}: the store is not brought within its budget"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    r.close().await?;
    assert_eq!(
        shared.finishes_missing(),
        0,
        "seed {seed}: an outcome was not stored, its job deleted under it"
    );
    assert_eq!(r.store.live_jobs(None).await?, 0, "seed {seed}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_workloads_under_a_byte_budget_lose_no_outcome() -> TestResult {
    for n in 1..=cases() {
        under_a_byte_budget(n).await?;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_workloads_of_one_submitter_end_in_states_the_spec_allows() -> TestResult {
    for n in 1..=cases() {
        one_submitter(n).await?;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_workloads_of_three_submitters_end_in_states_the_spec_allows() -> TestResult {
    for n in 1..=cases() {
        three_submitters(n).await?;
    }
    Ok(())
}
