//! A target row whose bytes cannot be decoded (damaged by hand here) is read as
//! `TargetRow::corrupt`: the job's other targets are still shown (SPEC §5), by the store's
//! `targets` and `view` and by `Runner::status`. A job row that cannot be decoded is reported
//! corrupt when that job is read, and passed over by sweep, evict, recovery and the reuse
//! check, which go on for the other jobs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::Arc;

use redb::{Database, ReadableTable, TableDefinition};
use rota::{Caller, CancellationToken, Config, FetchError, Runner, Target, TargetResult};
use rota_core::{
    Admission, BatchStore, CallerClass, Caps, JobStatus, NewJob, StoreError, TargetState,
    TargetWrite,
};
use rota_store_redb::RedbStore;

const ID: &str = "0123456789abcdef0123456789abcdef";

/// The terminal jobs' rows, as the store keeps them: a job at slot 0, target `idx` at
/// `idx + 1`.
const ROWS: TableDefinition<(&str, u64), &[u8]> = TableDefinition::new("rows");

/// A done job of three targets, stored in a new file at `path`.
async fn store_job(path: &Path) {
    let store = RedbStore::open(path).unwrap();
    let job = NewJob {
        id: ID.into(),
        caller: "alice".into(),
        class: CallerClass::Fleet,
        idem_key: "k".into(),
        targets: (0..3)
            .map(|i| (format!("https://a.example/{i}"), "{}".to_owned()))
            .collect(),
        now: 100,
    };
    let caps = Caps {
        targets_per_job: 8,
        jobs_per_caller: 8,
        jobs_total: 8,
        ttl_secs: 100,
    };
    store.admit(&job, &caps).await.unwrap();
    let done = TargetWrite::Done {
        result: r#"{"content":"ok"}"#.into(),
    };
    for idx in 0..3 {
        let finish = (idx == 2).then_some(JobStatus::Done);
        assert!(
            store
                .finish_target(ID, idx, &done, 101, finish)
                .await
                .unwrap()
        );
    }
}

#[tokio::test]
async fn an_undecodable_target_row_is_read_as_corrupt_and_the_others_as_stored() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rota.redb");
    store_job(&path).await;
    // Target 1's row is cut short; target 2's is of no format the store writes.
    {
        let db = Database::open(&path).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut rows = txn.open_table(ROWS).unwrap();
            let whole = rows.get((ID, 2)).unwrap().unwrap().value().to_vec();
            rows.insert((ID, 2), &whole[..whole.len() / 2]).unwrap();
            assert!(rows.get((ID, 3)).unwrap().is_some());
            rows.insert((ID, 3), [0xffu8, 0xff].as_slice()).unwrap();
        }
        txn.commit().unwrap();
    }

    let store = Arc::new(RedbStore::open(&path).unwrap());
    let targets = store.targets(ID).await.unwrap();
    let (job, viewed) = store.view(ID).await.unwrap().unwrap();
    assert_eq!(viewed, targets);
    assert_eq!(job.targets_done, 3);
    assert_eq!(targets.len(), 3);
    assert_eq!(
        (targets[0].url.as_str(), targets[0].status),
        ("https://a.example/0", TargetState::Done)
    );
    for (idx, t) in targets.iter().enumerate().skip(1) {
        assert_eq!(
            (t.idx, t.status, &t.result),
            (idx, TargetState::Failed, &None)
        );
        assert!(
            t.error.starts_with("corrupt stored target row: "),
            "{}",
            t.error
        );
        assert!(t.url.is_empty());
    }

    let fetch = |_: Arc<Caller>, _: Target, _: CancellationToken| async {
        Err::<TargetResult, _>(FetchError::Other("unused".into()))
    };
    let runner = Runner::start(store, fetch, Config::default())
        .await
        .unwrap();
    let view = runner.status(ID).await.unwrap().unwrap();
    runner.close().await;
    assert_eq!(view.job.status, JobStatus::Done);
    assert_eq!(
        view.targets[0].result.as_ref().map(|r| r.content.as_str()),
        Some("ok")
    );
    assert!(view.targets[2].result.is_none());
    assert!(
        view.targets[2]
            .error
            .starts_with("corrupt stored target row")
    );
}

/// The live jobs' rows (a job at slot 0).
const LIVE_ROWS: TableDefinition<(&str, u64), &[u8]> = TableDefinition::new("live_rows");

const CAPS: Caps = Caps {
    targets_per_job: 8,
    jobs_per_caller: 8,
    jobs_total: 8,
    ttl_secs: 10,
};

fn id(n: u32) -> String {
    format!("{n:032x}")
}

/// Job `n` of one target for `caller` and key `key`, at time 100 + n.
fn new_job(n: u32, caller: &str, key: &str) -> NewJob {
    NewJob {
        id: id(n),
        caller: caller.into(),
        class: CallerClass::Fleet,
        idem_key: key.into(),
        targets: vec![(format!("https://a.example/{n}"), "{}".into())],
        now: 100 + i64::from(n),
    }
}

/// A store in a new file (in the returned directory) with jobs 1 and 2 of alice (keys `k1`,
/// `k2`), `done` unless `live`, whose job 1's row was cut short by hand before it was opened.
async fn two_jobs_the_first_damaged(live: bool) -> (tempfile::TempDir, RedbStore) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rota.redb");
    {
        let store = RedbStore::open(&path).unwrap();
        for n in [1, 2] {
            let job = new_job(n, "alice", &format!("k{n}"));
            assert_eq!(store.admit(&job, &CAPS).await.unwrap(), Admission::Created);
            if !live {
                let done = store.set_status(&job.id, JobStatus::Done, "", job.now);
                assert!(done.await.unwrap());
            }
        }
    }
    let db = Database::open(&path).unwrap();
    let txn = db.begin_write().unwrap();
    {
        let mut rows = txn.open_table(if live { LIVE_ROWS } else { ROWS }).unwrap();
        let one = id(1);
        let whole = rows
            .get((one.as_str(), 0))
            .unwrap()
            .unwrap()
            .value()
            .to_vec();
        rows.insert((one.as_str(), 0), &whole[..whole.len() / 2])
            .unwrap();
    }
    txn.commit().unwrap();
    drop(db);
    let store = RedbStore::open(&path).unwrap();
    (dir, store)
}

/// Job 1 is still reported corrupt when read.
async fn job_1_reads_as_corrupt(store: &RedbStore) {
    let got = store.job(&id(1)).await;
    assert!(matches!(got, Err(StoreError::Corrupt(_))), "{got:?}");
}

#[tokio::test]
async fn sweep_passes_over_a_damaged_job_row_and_sweeps_the_others() {
    let (_dir, store) = two_jobs_the_first_damaged(false).await;
    assert_eq!(store.sweep(10_000, 10).await.unwrap(), 1);
    assert_eq!(store.job(&id(2)).await.unwrap(), None, "job 2 swept");
    assert_eq!(store.sweep(10_000, 10).await.unwrap(), 0);
    job_1_reads_as_corrupt(&store).await;
}

#[tokio::test]
async fn evict_passes_over_a_damaged_job_row_and_evicts_the_others() {
    let (_dir, store) = two_jobs_the_first_damaged(false).await;
    assert!(store.total_bytes().await.unwrap() > 0, "job 2 counts");
    assert_eq!(store.evict(0).await.unwrap(), 1);
    assert_eq!(store.job(&id(2)).await.unwrap(), None, "job 2 evicted");
    assert_eq!(store.total_bytes().await.unwrap(), 0);
    job_1_reads_as_corrupt(&store).await;
}

#[tokio::test]
async fn the_reuse_check_passes_over_a_damaged_job_row() {
    let (_dir, store) = two_jobs_the_first_damaged(false).await;
    // Job 1's caller and key: nothing to reuse, so a new job.
    let again = new_job(3, "alice", "k1");
    assert_eq!(
        store.admit(&again, &CAPS).await.unwrap(),
        Admission::Created
    );
    // Job 2's: reused, as before.
    let reused = store
        .admit(&new_job(4, "alice", "k2"), &CAPS)
        .await
        .unwrap();
    assert_eq!(reused, Admission::Reused { id: id(2) });
    job_1_reads_as_corrupt(&store).await;
}

#[tokio::test]
async fn runner_start_recovers_the_other_live_jobs_past_a_damaged_one() {
    let (_dir, store) = two_jobs_the_first_damaged(true).await;
    let store = Arc::new(store);
    let fetch = |_: Arc<Caller>, _: Target, _: CancellationToken| async {
        Err::<TargetResult, _>(FetchError::Other("unused".into()))
    };
    let runner = Runner::start(store.clone(), fetch, Config::default())
        .await
        .unwrap();
    runner.close().await;
    let two = store.job(&id(2)).await.unwrap().unwrap();
    assert_eq!(
        (two.status, two.error.as_str()),
        (JobStatus::Failed, "interrupted")
    );
    job_1_reads_as_corrupt(&store).await;
}
