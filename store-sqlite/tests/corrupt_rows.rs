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
