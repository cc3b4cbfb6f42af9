//! A file store whose writes fail for a while, as on a full disk, takes writes again once the
//! disk does, without being opened again by its owner: a long-running process does not need a
//! restart after one failed write. The failure is real: a file size limit (`setrlimit`), under
//! which a write past the limit fails with EFBIG (SIGXFSZ ignored, as rota's CLI does).
//!
//! Alone in its test binary (its own process): the limit is the process's.

#![cfg(unix)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod fsize;

use std::path::Path;
use std::sync::Arc;

use fsize::{ignore_sigxfsz, limit_files_to, unlimited};
use rota_core::{Admission, BatchStore, CallerClass, Caps, JobStatus, NewJob, TargetWrite};
use rota_store_redb::RedbStore;
use rota_store_sqlite::SqliteStore;

const CAPS: Caps = Caps {
    targets_per_job: 32,
    jobs_per_caller: 100,
    jobs_total: 100,
    ttl_secs: 3600,
};

fn job(id: usize) -> NewJob {
    NewJob {
        id: format!("{id:032x}"),
        caller: "alice".into(),
        class: CallerClass::Fleet,
        idem_key: format!("key-{id}"),
        targets: (0..4)
            .map(|i| (format!("https://files.example/{id}/{i}"), "{}".into()))
            .collect(),
        now: 100,
    }
}

/// Writes jobs of four targets of 64 KiB results into `store` until a write fails (the file
/// limit reached), then lifts the limit: the next writes succeed, and the store, opened again
/// from its file, holds every job whose writes were acknowledged.
async fn writes_again_once_the_disk_does(name: &str, store: Arc<dyn BatchStore>, path: &Path) {
    let page = TargetWrite::Done {
        result: format!(r#"{{"content":"{}"}}"#, "x".repeat(64 * 1024)),
    };
    let len = std::fs::metadata(path).map_or(0, |m| m.len());
    limit_files_to(len + 2 * 1024 * 1024);
    let mut done = Vec::new();
    let mut failed = None;
    'jobs: for n in 0..200 {
        let j = job(n);
        match store.admit(&j, &CAPS).await {
            Ok(a) => assert_eq!(a, Admission::Created, "{name}"),
            Err(e) => {
                failed = Some(e);
                break;
            }
        }
        for idx in 0..4 {
            let finish = (idx == 3).then_some(JobStatus::Done);
            if let Err(e) = store.finish_target(&j.id, idx, &page, 101, finish).await {
                failed = Some(e);
                break 'jobs;
            }
        }
        done.push(j.id.clone());
    }
    limit_files_to(unlimited());
    let failed = failed.unwrap_or_else(|| panic!("{name}: no write failed under the limit"));
    assert!(!done.is_empty(), "{name}: the limit left no room: {failed}");

    // The same store, not opened again by its owner.
    let again = job(1000);
    let admitted = store.admit(&again, &CAPS).await.unwrap_or_else(|e| {
        panic!("{name}: a write after `{failed}` once the disk took writes again: {e}")
    });
    assert_eq!(admitted, Admission::Created, "{name}");
    for idx in 0..4 {
        let finish = (idx == 3).then_some(JobStatus::Done);
        assert!(
            store
                .finish_target(&again.id, idx, &page, 102, finish)
                .await
                .unwrap(),
            "{name}"
        );
    }
    done.push(again.id.clone());
    for id in &done {
        let row = store
            .job(id)
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("{name}: {id} gone"));
        assert_eq!(
            (row.status, row.targets_done),
            (JobStatus::Done, 4),
            "{name}: {id}"
        );
    }
}

#[tokio::test]
async fn a_file_store_takes_writes_again_once_the_disk_does() {
    ignore_sigxfsz();
    let dir = tempfile::tempdir().unwrap();

    let path = dir.path().join("rota.redb");
    let store: Arc<dyn BatchStore> = Arc::new(RedbStore::open(&path).unwrap());
    writes_again_once_the_disk_does("redb", store.clone(), &path).await;
    let live = store.live_jobs(None).await.unwrap();
    drop(store);
    let reopened = RedbStore::open(&path).unwrap();
    reopened.verify().unwrap();
    assert_eq!(reopened.live_jobs(None).await.unwrap(), live, "redb");

    let path = dir.path().join("rota.sqlite3");
    let store: Arc<dyn BatchStore> = Arc::new(SqliteStore::open(&path).unwrap());
    writes_again_once_the_disk_does("sqlite", store.clone(), &path).await;
    let live = store.live_jobs(None).await.unwrap();
    drop(store);
    let reopened = SqliteStore::open(&path).unwrap();
    assert_eq!(reopened.live_jobs(None).await.unwrap(), live, "sqlite");
}
