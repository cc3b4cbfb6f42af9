//! A target row whose values cannot be decoded (damaged by hand here) is read as
//! `TargetRow::corrupt`: the job's other targets are still shown (SPEC §5), by the store's
//! `targets` and `view` and by `Runner::status`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::Arc;

use rota::{Caller, CancellationToken, Config, FetchError, Runner, Target, TargetResult};
use rota_core::{BatchStore, CallerClass, Caps, JobStatus, NewJob, TargetState, TargetWrite};
use rota_store_sqlite::SqliteStore;

const ID: &str = "0123456789abcdef0123456789abcdef";

const CAPS: Caps = Caps {
    targets_per_job: 8,
    jobs_per_caller: 8,
    jobs_total: 8,
    ttl_secs: 100,
};

/// A done job of three targets, stored in a new file at `path`.
async fn store_job(path: &Path) {
    let store = SqliteStore::open(path).unwrap();
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
    store.admit(&job, &CAPS).await.unwrap();
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

/// Runs `sql` on the file, as another program could.
fn damage(path: &Path, sql: &str) {
    let conn = rusqlite::Connection::open(path).unwrap();
    assert_eq!(conn.execute(sql, []).unwrap(), 1, "{sql}");
}

#[tokio::test]
async fn an_undecodable_target_row_is_read_as_corrupt_and_the_others_as_stored() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rota.sqlite3");
    store_job(&path).await;
    // Target 1's result is not UTF-8; target 2's state is no state rota knows.
    damage(
        &path,
        "UPDATE targets SET result = CAST(x'ff7b7d' AS TEXT) WHERE idx = 1",
    );
    damage(&path, "UPDATE targets SET status = 'lost' WHERE idx = 2");

    let store = Arc::new(SqliteStore::open(&path).unwrap());
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
    assert!(targets[1].error.contains("utf-8"), "{}", targets[1].error);
    assert!(targets[2].error.contains("lost"), "{}", targets[2].error);

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
    assert!(view.targets[1].result.is_none());
    assert!(
        view.targets[1]
            .error
            .starts_with("corrupt stored target row")
    );
}

/// A job whose status cannot be read (damaged by hand) is passed over by the reuse check: a
/// submit of its caller and key gets a new job, not an error, and the job itself still reads
/// as corrupt.
#[tokio::test]
async fn the_reuse_check_passes_over_a_job_whose_status_is_damaged() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rota.sqlite");
    store_job(&path).await;
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        let n = conn
            .execute("UPDATE jobs SET status = 'bogus' WHERE id = ?1", [ID])
            .unwrap();
        assert_eq!(n, 1);
    }
    let store = SqliteStore::open(&path).unwrap();
    let again = NewJob {
        id: "fedcba9876543210fedcba9876543210".into(),
        caller: "alice".into(),
        class: CallerClass::Fleet,
        idem_key: "k".into(),
        targets: vec![("https://a.example/0".into(), "{}".into())],
        now: 102,
    };
    assert_eq!(
        store.admit(&again, &CAPS).await.unwrap(),
        rota_core::Admission::Created
    );
    let got = store.job(ID).await;
    assert!(
        matches!(got, Err(rota_core::StoreError::Corrupt(_))),
        "{got:?}"
    );
}

/// The id of the second job of the damaged-row tests.
const TWO: &str = "fedcba9876543210fedcba9876543210";

/// A store with two done jobs of alice, [`ID`] (key `k`, three targets) and [`TWO`] (key
/// `k2`, one target), whose first job's row was damaged by `SET set` before it was opened.
async fn two_jobs_the_first_damaged(path: &Path, set: &str) -> SqliteStore {
    store_job(path).await;
    {
        let store = SqliteStore::open(path).unwrap();
        let two = NewJob {
            id: TWO.into(),
            caller: "alice".into(),
            class: CallerClass::Fleet,
            idem_key: "k2".into(),
            targets: vec![("https://a.example/two".into(), "{}".into())],
            now: 102,
        };
        assert_eq!(
            store.admit(&two, &CAPS).await.unwrap(),
            rota_core::Admission::Created
        );
        assert!(
            store
                .set_status(TWO, JobStatus::Done, "", 102)
                .await
                .unwrap()
        );
    }
    damage_job(path, set);
    SqliteStore::open(path).unwrap()
}

/// `UPDATE jobs SET {set} WHERE id = ID`.
fn damage_job(path: &Path, set: &str) {
    damage(path, &format!("UPDATE jobs SET {set} WHERE id = '{ID}'"));
}

/// README "Stores": "A store file damaged in one job's row still opens: reading that job
/// reports `StoreError::Corrupt`, while sweep, evict, recovery at `start` and the reuse check
/// pass it over and go on for every other job (the damaged row is left as it is ...)".
/// Sweep, on a job row whose status cannot be read: job 2 is swept, job 1 is left (and still
/// reads as corrupt).
#[tokio::test]
async fn sweep_passes_over_a_damaged_job_row_and_sweeps_the_others() {
    sweeps_job_2_only("status = 'bogus'").await;
}

/// Of two jobs the first of which is damaged by `set`, a sweep right after the open deletes
/// job 2 and leaves job 1, which still reads as corrupt.
async fn sweeps_job_2_only(set: &str) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rota.sqlite3");
    let store = two_jobs_the_first_damaged(&path, set).await;
    assert!(store.job(ID).await.is_err(), "job 1 reads as corrupt");
    assert_eq!(store.sweep(10_000, 10).await.unwrap(), 1, "job 2 only");
    assert_eq!(store.job(TWO).await.unwrap(), None, "job 2 swept");
    let got = store.job(ID).await;
    assert!(
        matches!(got, Err(rota_core::StoreError::Corrupt(_))),
        "the damaged job 1 must be left as it is: {got:?}"
    );
}

/// The same for evict (here the damage is in the lease).
#[tokio::test]
async fn evict_passes_over_a_damaged_job_row_and_evicts_the_others() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rota.sqlite3");
    let store = two_jobs_the_first_damaged(&path, "lease = 'x'").await;
    assert!(store.job(ID).await.is_err(), "job 1 reads as corrupt");
    assert_eq!(store.evict(0).await.unwrap(), 1, "job 2 only");
    assert_eq!(store.job(TWO).await.unwrap(), None, "job 2 evicted");
    let got = store.job(ID).await;
    assert!(
        matches!(got, Err(rota_core::StoreError::Corrupt(_))),
        "the damaged job 1 must be left as it is: {got:?}"
    );
}

/// "still opens": a job row whose byte count cannot be read, or (a live job) whose caller
/// cannot, does not keep the store from opening, and reading that job reports `Corrupt`.
#[tokio::test]
async fn a_store_damaged_in_one_job_rows_count_or_caller_still_opens() {
    let mut refused = Vec::new();
    for (live, set) in [
        (false, "n_bytes = 'x'"),
        (true, "caller = CAST(x'ff' AS TEXT)"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rota.sqlite3");
        store_job(&path).await;
        if live {
            // Job 1 back to running, as a crash would leave it.
            damage_job(&path, "status = 'running'");
        }
        damage_job(&path, set);
        match SqliteStore::open(&path) {
            Ok(store) => {
                let got = store.job(ID).await;
                assert!(
                    matches!(got, Err(rota_core::StoreError::Corrupt(_))),
                    "{set}: {got:?}"
                );
            }
            Err(e) => refused.push(format!("{set}: {e}")),
        }
    }
    assert!(refused.is_empty(), "refused to open: {refused:#?}");
}

/// A terminal job's lease another program wrote as a real number (here 50.5, the oldest) is
/// taken, rounded down, into the lease floor read at open (a sweep whose cutoff is at or below
/// the floor skips the connection), not counted as no lease: a sweep right after the open still
/// deletes job 2 (lease 102), and passes over the damaged job 1, whose lease reads as no integer.
#[tokio::test]
async fn a_lease_damaged_to_a_real_number_keeps_no_other_job_from_its_sweep() {
    sweeps_job_2_only("lease = 50.5").await;
}

/// A target row whose idx itself does not read (text where the number was) is given its place
/// among the job's rows, which come in idx order (a text after every number), as its idx: the
/// third of three here, not the first.
#[tokio::test]
async fn a_target_row_whose_idx_is_damaged_is_read_as_corrupt_at_its_place() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rota.sqlite3");
    store_job(&path).await;
    damage(&path, "UPDATE targets SET idx = 'x' WHERE idx = 2");
    let store = SqliteStore::open(&path).unwrap();
    let targets = store.targets(ID).await.unwrap();
    let idxs: Vec<usize> = targets.iter().map(|t| t.idx).collect();
    assert_eq!(idxs, [0, 1, 2]);
    assert_eq!(targets[1].status, TargetState::Done);
    assert_eq!(targets[2].status, TargetState::Failed);
    assert!(
        targets[2].error.starts_with("corrupt stored target row: "),
        "{}",
        targets[2].error
    );
}
