//! The three stores side by side over the ranges the `stores` fuzz target leaves out: times at
//! both ends of `i64`, reuse and sweep windows of 0, negative and extreme, ids, callers and keys
//! that are empty or prefixes of each other (with a NUL and non-ASCII), jobs of 0, 11 and 33
//! targets, caps of 0 and `usize::MAX`, evict budgets up to `u64::MAX`, and the file stores
//! opened again mid-walk (their counts read back from the file). After every operation all three
//! give the same answer (the same `Ok` value, or all an error) and hold the same rows and counts,
//! each `total_bytes` the sum of its jobs' `n_bytes`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fmt::Debug;
use std::path::Path;
use std::sync::Arc;

use rota_core::{
    Admission, BatchStore, CallerClass, Caps, JobStatus, NewJob, StoreError, TargetWrite,
};
use rota_store_memory::MemoryStore;
use rota_store_redb::RedbStore;
use rota_store_sqlite::SqliteStore;

const IDS: [&str; 7] = [
    "",
    "a",
    "ab",
    "a\0",
    "é",
    "b",
    "0123456789abcdef0123456789abcdef",
];
const CALLERS: [&str; 3] = ["", "alice", "alice\0"];
const KEYS: [&str; 2] = ["", "k"];
const TIMES: [i64; 9] = [
    i64::MIN,
    i64::MIN + 1,
    -5,
    0,
    1,
    5,
    100,
    i64::MAX - 1,
    i64::MAX,
];
const TTLS: [i64; 9] = [i64::MIN, -100, -1, 0, 1, 5, 100, i64::MAX - 1, i64::MAX];
const BUDGETS: [u64; 6] = [0, 1, 10, 100, 1000, u64::MAX];

/// A xorshift generator: the walk is the same on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }

    fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.next(xs.len() as u64) as usize]
    }
}

/// All answers are the same `Ok` value, or all errors.
fn agree<T: Debug + PartialEq>(step: usize, what: &str, answers: &[(&str, Result<T, StoreError>)]) {
    let (first_name, first) = &answers[0];
    for (name, got) in &answers[1..] {
        let same = match (first, got) {
            (Ok(a), Ok(b)) => a == b,
            (Err(_), Err(_)) => true,
            _ => false,
        };
        assert!(
            same,
            "step {step} {what}: {first_name} {first:?} vs {name} {got:?}"
        );
    }
}

type Stores = Vec<(&'static str, Box<dyn BatchStore>)>;

fn open_files(stores: &mut Stores, dir: &Path) {
    stores.push((
        "sqlite",
        Box::new(SqliteStore::open(dir.join("rota.db")).unwrap()),
    ));
    stores.push((
        "redb",
        Box::new(RedbStore::open(dir.join("rota.redb")).unwrap()),
    ));
}

/// Every row and count of every store, compared; each total the sum of its jobs' bytes.
async fn compare_state(stores: &Stores, step: usize, after: &str) {
    for id in IDS {
        let mut views = Vec::new();
        for (name, s) in stores {
            views.push((*name, s.view(id).await));
        }
        agree(step, &format!("view {id:?} after {after}"), &views);
    }
    for caller in CALLERS {
        let mut live = Vec::new();
        for (name, s) in stores {
            live.push((*name, s.live_jobs(Some(caller)).await));
        }
        agree(
            step,
            &format!("live jobs of {caller:?} after {after}"),
            &live,
        );
    }
    let mut totals = Vec::new();
    for (name, s) in stores {
        let total = s.total_bytes().await.unwrap();
        let mut sum = 0;
        for id in IDS {
            if let Some(j) = s.job(id).await.unwrap() {
                sum += j.n_bytes;
            }
        }
        assert_eq!(total, sum, "{name} step {step} after {after}: total bytes");
        totals.push((*name, Ok((s.live_jobs(None).await.unwrap(), total))));
    }
    agree(step, &format!("totals after {after}"), &totals);
}

#[tokio::test]
async fn the_three_stores_agree_over_extreme_times_windows_ids_and_budgets() {
    // Jobs created, swept, evicted and recovered over the walk: it must reach each.
    let mut reached = (0, 0, 0, 0);
    for seed in 1..=40u64 {
        let dir = tempfile::tempdir().unwrap();
        let mut stores: Stores = vec![("memory", Box::new(MemoryStore::new()))];
        open_files(&mut stores, dir.path());
        let mut r = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
        for step in 0..150 {
            let id = r.pick(&IDS).to_owned();
            let now = if r.next(3) == 0 {
                r.pick(&TIMES)
            } else {
                r.next(20) as i64
            };
            let what: String;
            macro_rules! each {
                ($s:ident => $e:expr) => {{
                    let mut out = Vec::new();
                    for (name, $s) in &stores {
                        out.push((*name, $e.await));
                    }
                    agree(step, &what, &out);
                    out.swap_remove(0).1
                }};
            }
            match r.next(10) {
                0 | 1 => {
                    let n = r.pick(&[0usize, 1, 2, 3, 11, 33]);
                    let job = NewJob {
                        id: id.clone(),
                        caller: r.pick(&CALLERS).into(),
                        class: CallerClass::Fleet,
                        idem_key: r.pick(&KEYS).into(),
                        targets: (0..n).map(|i| (format!("ü{i}"), "{}".into())).collect(),
                        now,
                    };
                    let caps = Caps {
                        targets_per_job: r.pick(&[0usize, 2, 32, usize::MAX]),
                        jobs_per_caller: r.pick(&[0usize, 1, 3, usize::MAX]),
                        jobs_total: r.pick(&[0usize, 2, 5, usize::MAX]),
                        ttl_secs: r.pick(&TTLS),
                    };
                    what = format!("admit {id:?} of {n} at {now} {caps:?}");
                    if each!(s => s.admit(&job, &caps)).is_ok_and(|a| a == Admission::Created) {
                        reached.0 += 1;
                    }
                }
                2 => {
                    let idx = r.next(12) as usize;
                    what = format!("start {id:?} {idx} at {now}");
                    let _ = each!(s => s.start_target(&id, idx, now));
                }
                3 | 4 => {
                    let idx = r.next(12) as usize;
                    let w = match r.next(4) {
                        0 => TargetWrite::Running,
                        1 => TargetWrite::Pending,
                        2 => TargetWrite::Done {
                            result: "r".repeat(r.next(30) as usize),
                        },
                        _ => TargetWrite::Failed {
                            error: "é".into(),
                            hint: String::new(),
                        },
                    };
                    let finish = if r.next(2) == 0 {
                        None
                    } else {
                        Some(r.pick(JobStatus::ALL))
                    };
                    what = format!("finish {id:?} {idx} {w:?} at {now} {finish:?}");
                    let _ = each!(s => s.finish_target(&id, idx, &w, now, finish));
                }
                5 => {
                    let status = r.pick(JobStatus::ALL);
                    what = format!("set_status {id:?} {status:?} at {now}");
                    let _ = each!(s => s.set_status(&id, status, "err", now));
                }
                6 => {
                    what = format!("touch {id:?} at {now}");
                    let _ = each!(s => s.touch(&id, now));
                }
                7 => {
                    let ttl = r.pick(&TTLS);
                    what = format!("sweep at {now} ttl {ttl}");
                    reached.1 += each!(s => s.sweep(now, ttl)).unwrap_or(0);
                }
                8 => {
                    let budget = r.pick(&BUDGETS);
                    what = format!("evict {budget}");
                    reached.2 += each!(s => s.evict(budget)).unwrap_or(0);
                }
                _ => {
                    if r.next(3) == 0 {
                        // The file stores opened again: their counts are read from the file.
                        stores.truncate(1);
                        open_files(&mut stores, dir.path());
                        what = "open again".into();
                    } else {
                        what = format!("recover at {now}");
                        reached.3 += each!(s => s.recover("interrupted", now)).unwrap_or(0);
                    }
                }
            }
            compare_state(&stores, step, &what).await;
        }
    }
    let (created, swept, evicted, recovered) = reached;
    assert!(
        created > 200 && swept > 20 && evicted > 20 && recovered > 20,
        "the walk reached too little: {reached:?}"
    );
}

/// Ids, callers and keys of up to 4 MiB are stored, found again for reuse, ended and swept the
/// same by every store.
#[tokio::test]
async fn ids_callers_and_keys_of_mebibytes_work_alike() {
    let dir = tempfile::tempdir().unwrap();
    let mut stores: Stores = vec![("memory", Box::new(MemoryStore::new()))];
    open_files(&mut stores, dir.path());
    let caps = Caps {
        targets_per_job: 8,
        jobs_per_caller: 8,
        jobs_total: 8,
        ttl_secs: 10,
    };
    for (step, len) in [1usize << 10, 1 << 16, 1 << 20, 4 << 20]
        .into_iter()
        .enumerate()
    {
        let big = "x".repeat(len);
        let job = NewJob {
            id: format!("{big}{len}"),
            caller: format!("c{big}"),
            class: CallerClass::Fleet,
            idem_key: format!("k{big}"),
            targets: vec![("u".into(), "{}".into())],
            now: 5,
        };
        let again = NewJob {
            id: "other".into(),
            ..job.clone()
        };
        for (name, s) in &stores {
            let answers = (
                s.admit(&job, &caps).await.unwrap(),
                s.admit(&again, &caps).await.unwrap(),
                s.job(&job.id).await.unwrap().map(|j| j.caller.len()),
                s.set_status(&job.id, JobStatus::Done, "", 6).await.unwrap(),
                s.sweep(100, 10).await.unwrap(),
                s.total_bytes().await.unwrap(),
            );
            let want = (
                Admission::Created,
                Admission::Reused { id: job.id.clone() },
                Some(len + 1),
                true,
                1,
                0,
            );
            assert!(answers == want, "{name}: {len} bytes (step {step})");
        }
    }
}

/// Six tasks writing to one store at once (admits, a Conflict among them, target writes with and
/// without a finish status, status changes, sweeps and evicts) leave every store's counts true to
/// its rows, and the file stores read the same counts back when opened again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_writes_leave_counts_that_match_the_rows_and_survive_an_open() {
    for seed in 0..4u64 {
        let dir = tempfile::tempdir().unwrap();
        let (sp, rp) = (dir.path().join("rota.db"), dir.path().join("rota.redb"));
        let kinds: Vec<(&str, Arc<dyn BatchStore>)> = vec![
            ("memory", Arc::new(MemoryStore::new())),
            ("sqlite", Arc::new(SqliteStore::open(&sp).unwrap())),
            ("redb", Arc::new(RedbStore::open(&rp).unwrap())),
        ];
        for (name, s) in kinds {
            let ids = stress(s.clone(), seed).await;
            let counted = recount(&*s, &ids).await;
            assert_eq!(counted.0, counted.1, "{name} seed {seed}: total bytes");
            assert_eq!(counted.2, s.live_jobs(None).await.unwrap(), "{name}: live");
            assert_eq!(
                counted.3,
                s.live_jobs(Some("alice")).await.unwrap(),
                "{name}: alice's live jobs"
            );
            drop(s);
            let reopened: Option<Box<dyn BatchStore>> = match name {
                "sqlite" => Some(Box::new(SqliteStore::open(&sp).unwrap())),
                "redb" => Some(Box::new(RedbStore::open(&rp).unwrap())),
                _ => None,
            };
            if let Some(s) = reopened {
                assert_eq!(recount(&*s, &ids).await, counted, "{name} opened again");
            }
        }
    }
}

/// (sum of n_bytes, total_bytes, live jobs, alice's live jobs), each job's counts checked.
async fn recount(s: &dyn BatchStore, ids: &[String]) -> (u64, u64, usize, usize) {
    let (mut sum, mut live, mut alice) = (0, 0, 0);
    for id in ids {
        if let Some((j, t)) = s.view(id).await.unwrap() {
            sum += j.n_bytes;
            let bytes: u64 = t.iter().map(|t| t.n_bytes()).sum();
            assert_eq!(j.n_bytes, bytes, "job {id}: n_bytes");
            let done = t.iter().filter(|t| t.status.is_finished()).count();
            assert_eq!(j.targets_done, done, "job {id}: targets_done");
            if j.status.is_live() {
                live += 1;
                alice += usize::from(j.caller == "alice");
            }
        }
    }
    (sum, s.total_bytes().await.unwrap(), live, alice)
}

async fn stress(store: Arc<dyn BatchStore>, seed: u64) -> Vec<String> {
    let ids: Vec<String> = (0..12).map(|n| format!("{n:032x}")).collect();
    let mut tasks = Vec::new();
    for t in 0..6u64 {
        let (store, ids) = (store.clone(), ids.clone());
        tasks.push(tokio::spawn(async move {
            let mut r = Rng((seed * 31 + t).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
            for _ in 0..300 {
                let id = ids[r.next(ids.len() as u64) as usize].clone();
                let now = 100 + r.next(50) as i64;
                // Errors (a Conflict) are answers too; the counts are what is checked.
                let _ = match r.next(8) {
                    0 => {
                        let job = NewJob {
                            id: id.clone(),
                            caller: r.pick(&["alice", "bob"]).into(),
                            class: CallerClass::Fleet,
                            idem_key: format!("k{}", r.next(4)),
                            targets: (0..1 + r.next(4))
                                .map(|i| (format!("u{i}"), "{}".into()))
                                .collect(),
                            now,
                        };
                        let caps = Caps {
                            targets_per_job: 8,
                            jobs_per_caller: 4,
                            jobs_total: 6,
                            ttl_secs: r.next(30) as i64,
                        };
                        store.admit(&job, &caps).await.map(drop)
                    }
                    1 | 2 => store
                        .start_target(&id, r.next(5) as usize, now)
                        .await
                        .map(drop),
                    3 | 4 => {
                        let w = TargetWrite::Done {
                            result: "r".repeat(r.next(40) as usize),
                        };
                        let finish = (r.next(3) == 0).then(|| r.pick(JobStatus::ALL));
                        store
                            .finish_target(&id, r.next(5) as usize, &w, now, finish)
                            .await
                            .map(drop)
                    }
                    5 => store
                        .set_status(&id, r.pick(JobStatus::ALL), "e", now)
                        .await
                        .map(drop),
                    6 => store.sweep(now, r.next(40) as i64).await.map(drop),
                    _ => store.evict(r.next(300)).await.map(drop),
                };
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    ids
}
