//! A commit that fails after its writes landed (redb: "a failed commit may have become
//! durable"), and an I/O error under `Durability::None`: what the store answers and keeps.

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use redb::backends::InMemoryBackend;
use redb::{Builder, StorageBackend};
use rota_core::{Admission, BatchStore, CallerClass, Caps, JobStatus, NewJob, TargetWrite};

use crate::commit::Queued;
use crate::error::uncertain;
use crate::store::{Op, admit_op};
use crate::{Durability, RedbOptions, RedbStore};

/// What the disk does: every write fails (a full disk), or the next sync fails after the
/// writes before it landed.
#[derive(Debug, Default)]
struct Disk {
    full: AtomicBool,
    sync_fails: AtomicBool,
}

/// Memory that outlives a database handle, failing as `disk` says.
#[derive(Debug)]
struct Flaky {
    mem: Arc<InMemoryBackend>,
    disk: Arc<Disk>,
}

impl Flaky {
    fn full(&self) -> io::Result<()> {
        if self.disk.full.load(Ordering::SeqCst) {
            return Err(io::Error::other("injected: disk full"));
        }
        Ok(())
    }
}

impl StorageBackend for Flaky {
    fn len(&self) -> io::Result<u64> {
        self.mem.len()
    }
    fn read(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        self.mem.read(offset, out)
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.full()?;
        self.mem.set_len(len)
    }
    fn sync_data(&self) -> io::Result<()> {
        self.full()?;
        if self.disk.sync_fails.swap(false, Ordering::SeqCst) {
            return Err(io::Error::other("injected: sync failed"));
        }
        self.mem.sync_data()
    }
    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.full()?;
        self.mem.write(offset, data)
    }
}

/// A new store on memory failing as `disk` says, opened again on it after an I/O error as a
/// file store is on its file.
fn store(opts: &RedbOptions, disk: &Arc<Disk>) -> RedbStore {
    let mem = Arc::new(InMemoryBackend::new());
    let open = {
        let (mem, disk) = (mem.clone(), disk.clone());
        move || {
            Builder::new().create_with_backend(Flaky {
                mem: mem.clone(),
                disk: disk.clone(),
            })
        }
    };
    let db = open().unwrap();
    crate::open::init(&db).unwrap();
    RedbStore::from_db(db, opts)
        .unwrap()
        .reopened_by(Box::new(move || {
            open().map_err(crate::error::err("open store again"))
        }))
}

const A: &str = "0000000000000000000000000000000a";
const B: &str = "0000000000000000000000000000000b";
const C: &str = "0000000000000000000000000000000c";
const X: &str = "00000000000000000000000000000aaa";

fn job(id: &str, caller: &str) -> NewJob {
    NewJob {
        id: id.into(),
        caller: caller.into(),
        class: CallerClass::Fleet,
        idem_key: format!("key-{id}"),
        targets: vec![("u0".into(), "{}".into())],
        now: 10,
    }
}

const CAPS: Caps = Caps {
    targets_per_job: 8,
    jobs_per_caller: 1,
    jobs_total: 100,
    ttl_secs: 100,
};

fn admit(job: NewJob, caps: Caps) -> Queued<Op> {
    Queued::new(0, Op::new(admit_op(job, caps)).0)
}

#[tokio::test]
async fn a_batch_whose_commit_fails_fails_whole_and_is_not_run_again_over_its_own_writes() {
    let disk = Arc::new(Disk::default());
    let s = store(&RedbOptions::default(), &disk);
    // A fresh admit (no reuse, as `submit_fresh` makes) beside one that may reuse.
    let fresh = Caps {
        ttl_secs: i64::MIN,
        ..CAPS
    };
    let mut batch = vec![admit(job(A, "alice"), CAPS), admit(job(B, "bob"), fresh)];
    disk.sync_fails.store(true, Ordering::SeqCst);
    let results = s.commit_batch(&mut batch);
    // Run again alone after the reopen, each would have found its own job: A `Reused` (of
    // itself), B a `Conflict` with itself; and the runner would run neither.
    assert_eq!(results.len(), 2);
    for r in &results {
        assert!(
            matches!(r, Err(e) if uncertain(e)),
            "each admit fails with the commit's error: {results:?}"
        );
    }
    assert!(
        results[0]
            .as_ref()
            .unwrap_err()
            .to_string()
            .contains("may have been made"),
        "{results:?}"
    );
    // The next write opens the store again: the writes were made after all, and the counts
    // read from the file agree with its rows.
    assert!(s.touch(A, 11).await.unwrap());
    assert_eq!(
        s.job(A).await.unwrap().map(|j| j.status),
        Some(JobStatus::Queued)
    );
    assert_eq!(s.live_jobs(None).await.unwrap(), 2);
    s.verify().unwrap();
}

#[tokio::test]
async fn a_lone_write_whose_commit_fails_is_an_error_though_it_may_have_been_made() {
    let disk = Arc::new(Disk::default());
    let s = store(&RedbOptions::default(), &disk);
    disk.sync_fails.store(true, Ordering::SeqCst);
    let r = s.admit(&job(A, "alice"), &CAPS).await;
    assert!(matches!(&r, Err(e) if uncertain(e)), "{r:?}");
    // Its caller, told of an error, may try again: the job is there, and is its own.
    assert_eq!(
        s.admit(&job(A, "alice"), &CAPS).await.unwrap(),
        Admission::Reused { id: A.into() }
    );
}

#[tokio::test]
async fn with_durability_none_an_io_error_leaves_the_store_refusing_not_taking_back_writes() {
    let opts = RedbOptions {
        durability: Durability::None,
        sync_every: 3,
        ..RedbOptions::default()
    };
    let disk = Arc::new(Disk::default());
    let s = store(&opts, &disk);
    let done = TargetWrite::Done {
        result: "{}".into(),
    };
    // Commits 1 and 2 lazy, 3 durable.
    assert_eq!(
        s.admit(&job(X, "xavier"), &CAPS).await.unwrap(),
        Admission::Created
    );
    assert!(s.touch(X, 11).await.unwrap());
    assert_eq!(
        s.admit(&job(A, "alice"), &CAPS).await.unwrap(),
        Admission::Created
    );
    // Commits 4 and 5 lazy: A runs and ends, acknowledged.
    assert!(s.start_target(A, 0, 12).await.unwrap().is_some());
    assert!(
        s.finish_target(A, 0, &done, 13, Some(JobStatus::Done))
            .await
            .unwrap()
    );
    // Commit 6, durable, meets a full disk; then the disk takes writes again.
    disk.full.store(true, Ordering::SeqCst);
    assert!(s.admit(&job(B, "bob"), &CAPS).await.is_err());
    disk.full.store(false, Ordering::SeqCst);
    // Opened again, the file would hold A queued, as of commit 3, and X never touched: alice
    // could not submit again (A would hold her cap) and A would never run. Refused instead,
    // until the owner opens the store again, as after a crash.
    let again = s.admit(&job(C, "alice"), &CAPS).await;
    assert!(again.is_err(), "{again:?}");
    assert!(
        !matches!(s.job(A).await, Ok(Some(j)) if j.status != JobStatus::Done),
        "A's acknowledged end is never taken back while the store is open"
    );
    assert_eq!(s.live_jobs(Some("alice")).await.unwrap(), 0);
}
