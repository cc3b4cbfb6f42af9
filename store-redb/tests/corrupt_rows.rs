//! A target row whose bytes cannot be decoded (damaged by hand here) is read as
//! `TargetRow::corrupt`: the job's other targets are still shown (SPEC §5), by the store's
//! `targets` and `view` and by `Runner::status`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::Arc;

use redb::{Database, ReadableTable, TableDefinition};
use rota::{Caller, CancellationToken, Config, FetchError, Runner, Target, TargetResult};
use rota_core::{BatchStore, CallerClass, Caps, JobStatus, NewJob, TargetState, TargetWrite};
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
