//! The held file (crate::held): adversarial checks of its lending, of its open's equivalence
//! with `Database::open`, and of its lifetime.

use std::fs::OpenOptions;
use std::ops::Bound::{self, Excluded, Included, Unbounded};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering::SeqCst;

use redb::StorageBackend;
use redb::backends::FileBackend;
use rota_core::{Admission, BatchStore, StoreError};

use crate::RedbStore;
use crate::held::HeldFile;
use crate::test_support::{CAPS, block_on, job_n};

const LOCK_BASE: u64 = 1 << 62;

fn rw(path: &Path) -> std::fs::File {
    OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap()
}

fn held(path: &Path) -> Arc<HeldFile> {
    Arc::new(HeldFile::new(rw(path)).unwrap())
}

/// Whether another open file description (another process, as far as the locks go) can take
/// every range redb's exclusive writer takes, and the `flock` (each let go of at once).
fn free_for_others(path: &Path) -> bool {
    let other = FileBackend::new(rw(path)).unwrap();
    let ranges: [(Bound<u64>, Bound<u64>); 3] = [
        (Included(LOCK_BASE + 1024), Unbounded),
        (Excluded(LOCK_BASE + 1), Excluded(LOCK_BASE + 896)),
        (Unbounded, Included(LOCK_BASE + 1)),
    ];
    let mut all = true;
    for r in ranges {
        all &= other.try_lock_range(r.0, r.1).unwrap();
    }
    other.close().unwrap();
    all
}

/// Open, write, fail, reopen, drop: many times in one process, on one path. The file is let go
/// of with every store (also one dropped with no database, its reopen having failed, and one
/// dropped while its writes fail), and the next open of the path in this process gets it.
#[test]
fn open_use_fail_reopen_drop_many_times_in_one_process() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.redb");
    let mut n = 0;
    for round in 0..25 {
        let store = RedbStore::open(&path).unwrap();
        let file = store.file.clone().unwrap();
        n += 1;
        assert_eq!(
            block_on(store.admit(&job_n(n), &CAPS)).unwrap(),
            Admission::Created
        );
        file.failing.store(true, SeqCst);
        assert!(block_on(store.admit(&job_n(n + 1000), &CAPS)).is_err());
        match round % 3 {
            // A reopen that succeeds, and a few more.
            0 => {
                file.failing.store(false, SeqCst);
                n += 1;
                assert_eq!(
                    block_on(store.admit(&job_n(n), &CAPS)).unwrap(),
                    Admission::Created
                );
                store.reopen_now().unwrap();
                store.reopen_now().unwrap();
            }
            // A reopen that fails: the store is dropped with no database.
            1 => {
                assert!(block_on(store.admit(&job_n(n + 1000), &CAPS)).is_err());
                assert!(store.slot().db().is_err());
            }
            // Dropped with the database refusing everything, writes still failing.
            _ => {}
        }
        assert!(!free_for_others(&path), "round {round}: held while open");
        drop(file);
        drop(store);
        assert!(
            free_for_others(&path),
            "round {round}: let go of with the store"
        );
    }
    let store = RedbStore::open(&path).unwrap();
    let v = store.verify().unwrap();
    assert_eq!(v.jobs.len(), n, "every acknowledged job is there");
}

/// The first open over a held file refused midway (another description holds the second range
/// redb takes): the first range, taken, is recorded; once the other lets go, an open over the
/// same held file is lent it and takes the rest; the file's drop lets all go.
#[test]
fn a_first_open_refused_midway_then_retried_over_the_same_held_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.redb");
    redb::Database::create(&path).unwrap().close().unwrap();

    let other = FileBackend::new(rw(&path)).unwrap();
    assert!(
        other
            .try_lock_range(Included(LOCK_BASE + 500), Excluded(LOCK_BASE + 501))
            .unwrap()
    );
    let file = held(&path);
    assert_eq!(
        file.database(&path).unwrap_err(),
        StoreError::InUse("database already open".into())
    );
    other.close().unwrap();
    drop(other);
    // The suffix, taken by the failed open, is still this file's.
    assert!(!free_for_others(&path));

    let db = file.database(&path).unwrap();
    assert!(!free_for_others(&path));
    db.close().unwrap();
    assert!(
        !free_for_others(&path),
        "a database's close releases nothing"
    );
    drop(file);
    assert!(free_for_others(&path));
}

/// What a plain `Database::open` of the file at `path` does to it, against what the held file's
/// open does to a copy: both open it or both refuse it, and both leave the same bytes. For
/// damaged and truncated files, where `create_with_backend` (which may initialize an empty
/// file) could differ from `open`.
#[test]
fn the_held_files_open_does_what_database_open_does_to_any_file() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.redb");
    {
        let s = RedbStore::open(&good).unwrap();
        for n in 0..20 {
            block_on(s.admit(&job_n(n), &CAPS)).unwrap();
        }
    }
    let bytes = std::fs::read(&good).unwrap();
    let len = bytes.len();
    let mut cases: Vec<(String, Vec<u8>)> = vec![
        ("intact".into(), bytes.clone()),
        ("empty".into(), vec![]),
        ("one byte".into(), bytes[..1].to_vec()),
        ("magic only".into(), bytes[..9].to_vec()),
        ("header only".into(), bytes[..320].to_vec()),
        ("half".into(), bytes[..len / 2].to_vec()),
        ("all but a byte".into(), bytes[..len - 1].to_vec()),
        ("zeros of its length".into(), vec![0; len]),
    ];
    let mut no_magic = bytes.clone();
    no_magic[0] ^= 0xff;
    cases.push(("magic broken".into(), no_magic));
    for at in [64, 128, 200, 4096, 8192, len / 2] {
        let mut b = bytes.clone();
        for x in &mut b[at..(at + 64).min(len)] {
            *x ^= 0x5a;
        }
        cases.push((format!("64 bytes flipped at {at}"), b));
    }
    // Flagged for recovery (the god byte's recovery bit), as after a crash.
    let mut recovery = bytes.clone();
    recovery[9] |= 0b10;
    cases.push(("recovery required".into(), recovery));

    for (what, content) in cases {
        let a = dir.path().join("a.redb");
        let b = dir.path().join("b.redb");
        std::fs::write(&a, &content).unwrap();
        std::fs::write(&b, &content).unwrap();
        let plain = catch_unwind(AssertUnwindSafe(|| redb::Database::builder().open(&a)))
            .map(|r| r.map(drop).map_err(|e| e.to_string()));
        let file = held(&b);
        let ours = file.database(&b).map(drop);
        drop(file);
        let plain_ok = matches!(plain, Ok(Ok(())));
        assert_eq!(
            plain_ok,
            ours.is_ok(),
            "{what}: Database::open gave {plain:?}, the held file's open {ours:?}"
        );
        assert!(
            std::fs::read(&a).unwrap() == std::fs::read(&b).unwrap(),
            "{what}: the two opens left different files"
        );
        if !plain_ok {
            assert_eq!(
                std::fs::read(&b).unwrap(),
                content,
                "{what}: a refused open changed the file"
            );
        }
    }
}

/// The file truncated to nothing under an open store (by another program): its next reopen is
/// refused, and writes no new database over it (`create_with_backend` would initialize an
/// empty file).
#[test]
fn a_reopen_of_a_file_emptied_under_the_store_is_refused_and_initializes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.redb");
    let store = RedbStore::open(&path).unwrap();
    let file = store.file.clone().unwrap();
    block_on(store.admit(&job_n(1), &CAPS)).unwrap();
    // A write fails, and so does the reopen after it: the store holds no database.
    file.failing.store(true, SeqCst);
    assert!(block_on(store.admit(&job_n(2), &CAPS)).is_err());
    assert!(block_on(store.admit(&job_n(2), &CAPS)).is_err());
    assert!(store.slot().db().is_err());
    file.failing.store(false, SeqCst);
    drop(file);
    rw(&path).set_len(0).unwrap();
    assert!(matches!(store.reopen_now(), Err(StoreError::Corrupt(_))));
    assert!(matches!(store.reopen_now(), Err(StoreError::Corrupt(_))));
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 0);
    drop(store);
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 0);
}

/// A file backend that records every lock call redb makes of it, and can fail its writes.
#[derive(Debug)]
struct Recording {
    inner: FileBackend,
    calls: Arc<std::sync::Mutex<Vec<String>>>,
    failing: Arc<std::sync::atomic::AtomicBool>,
}

impl Recording {
    fn log(&self, s: String) {
        self.calls.lock().unwrap().push(s);
    }
    fn check(&self) -> std::io::Result<()> {
        if self.failing.load(SeqCst) {
            return Err(std::io::Error::other("injected"));
        }
        Ok(())
    }
}

impl StorageBackend for Recording {
    fn len(&self) -> std::io::Result<u64> {
        self.inner.len()
    }
    fn read(&self, offset: u64, out: &mut [u8]) -> std::io::Result<()> {
        self.inner.read(offset, out)
    }
    fn set_len(&self, len: u64) -> std::io::Result<()> {
        self.check()?;
        self.inner.set_len(len)
    }
    fn sync_data(&self) -> std::io::Result<()> {
        self.check()?;
        self.inner.sync_data()
    }
    fn write(&self, offset: u64, data: &[u8]) -> std::io::Result<()> {
        self.check()?;
        self.inner.write(offset, data)
    }
    fn close(&self) -> std::io::Result<()> {
        self.log("close".into());
        self.inner.close()
    }
    fn try_lock_range(&self, s: Bound<u64>, e: Bound<u64>) -> Result<bool, redb::BackendError> {
        self.log(format!("try_lock {s:?}..{e:?}"));
        self.inner.try_lock_range(s, e)
    }
    fn try_lock_shared_range(
        &self,
        s: Bound<u64>,
        e: Bound<u64>,
    ) -> Result<bool, redb::BackendError> {
        self.log(format!("try_lock_shared {s:?}..{e:?}"));
        self.inner.try_lock_shared_range(s, e)
    }
    fn lock_range(&self, s: Bound<u64>, e: Bound<u64>) -> Result<(), redb::BackendError> {
        self.log(format!("lock {s:?}..{e:?}"));
        self.inner.lock_range(s, e)
    }
    fn lock_shared_range(&self, s: Bound<u64>, e: Bound<u64>) -> Result<(), redb::BackendError> {
        self.log(format!("lock_shared {s:?}..{e:?}"));
        self.inner.lock_shared_range(s, e)
    }
    fn unlock_range(&self, s: Bound<u64>, e: Bound<u64>) -> Result<(), redb::BackendError> {
        self.log(format!("unlock {s:?}..{e:?}"));
        self.inner.unlock_range(s, e)
    }
    fn query_lock_range(&self, s: Bound<u64>, e: Bound<u64>) -> Result<bool, redb::BackendError> {
        self.log(format!("query {s:?}..{e:?}"));
        self.inner.query_lock_range(s, e)
    }
}

/// What redb 4.6 asks of a backend's locks in the store's mode (exclusive writer), over a
/// whole life: open, writes, reads, a failed write, close, an open after it needing recovery,
/// an open refused midway. Only the three ranges at each open, all exclusive, all disjoint,
/// and `close`: never an unlock, a shared lock or a query, so the held file's record cannot
/// diverge from the kernel's locks in the store's use.
#[test]
fn redb_asks_only_three_disjoint_exclusive_ranges_at_open_and_close() {
    use redb::{ReadableDatabase, TableDefinition};
    const T: TableDefinition<u64, &[u8]> = TableDefinition::new("t");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.redb");
    std::fs::File::create(&path).unwrap();
    let calls = Arc::new(std::sync::Mutex::new(Vec::new()));
    let failing = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let backend = || Recording {
        inner: FileBackend::new(rw(&path)).unwrap(),
        calls: calls.clone(),
        failing: failing.clone(),
    };
    let db = redb::Builder::new().create_with_backend(backend()).unwrap();
    for i in 0..50u64 {
        let w = db.begin_write().unwrap();
        w.open_table(T)
            .unwrap()
            .insert(i, &[7u8; 5000][..])
            .unwrap();
        w.commit().unwrap();
        let r = db.begin_read().unwrap();
        assert!(r.open_table(T).unwrap().get(i).unwrap().is_some());
    }
    failing.store(true, SeqCst);
    let w = db.begin_write().unwrap();
    w.open_table(T)
        .unwrap()
        .insert(99, &[7u8; 5000][..])
        .unwrap();
    assert!(w.commit().is_err());
    assert!(db.begin_write().is_err());
    drop(db.close());
    failing.store(false, SeqCst);
    let db = redb::Builder::new().create_with_backend(backend()).unwrap();
    // Refused midway by another description on the second range.
    let other = FileBackend::new(rw(&path)).unwrap();
    drop(db);
    assert!(
        other
            .try_lock_range(Included(LOCK_BASE + 500), Excluded(LOCK_BASE + 501))
            .unwrap()
    );
    assert!(redb::Builder::new().create_with_backend(backend()).is_err());
    other.close().unwrap();

    let open = [
        format!("try_lock Included({})..Unbounded", LOCK_BASE + 1024),
        format!(
            "try_lock Excluded({})..Excluded({})",
            LOCK_BASE + 1,
            LOCK_BASE + 896
        ),
        format!("try_lock Unbounded..Included({})", LOCK_BASE + 1),
    ];
    let mut expected: Vec<String> = Vec::new();
    for _ in 0..2 {
        expected.extend(open.iter().cloned());
        expected.push("close".into());
    }
    expected.extend(open[..2].iter().cloned());
    expected.push("close".into());
    assert_eq!(*calls.lock().unwrap(), expected);
}

/// Writers on four threads while the disk fails on and off (so reopens run under them, each
/// waiting for the transactions in flight), and another description trying the locks all
/// along: it never gets them; the store ends consistent, and is let go of with its drop.
#[test]
fn reopens_under_concurrent_writers_keep_the_file_locked_and_release_it_at_drop() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.redb");
    let store = Arc::new(RedbStore::open(&path).unwrap());
    let file = store.file.clone().unwrap();
    // One write fails for certain (so the first write after it opens the database again),
    // whatever the toggler's timing below.
    file.failing.store(true, SeqCst);
    assert!(block_on(store.admit(&job_n(99_998), &CAPS)).is_err());
    file.failing.store(false, SeqCst);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watcher = {
        let (stop, path) = (stop.clone(), path.clone());
        std::thread::spawn(move || {
            let mut taken = 0;
            while !stop.load(SeqCst) {
                if free_for_others(&path) {
                    taken += 1;
                }
            }
            taken
        })
    };
    let toggler = {
        let (stop, file) = (stop.clone(), file.clone());
        std::thread::spawn(move || {
            while !stop.load(SeqCst) {
                file.failing.store(true, SeqCst);
                std::thread::sleep(std::time::Duration::from_micros(300));
                file.failing.store(false, SeqCst);
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
        })
    };
    let writers: Vec<_> = (0..4)
        .map(|t| {
            let store = store.clone();
            std::thread::spawn(move || {
                let mut ok = 0;
                for i in 0..150 {
                    if block_on(store.admit(&job_n(t * 1000 + i), &CAPS)).is_ok() {
                        ok += 1;
                    }
                }
                ok
            })
        })
        .collect();
    let ok: usize = writers.into_iter().map(|w| w.join().unwrap()).sum();
    stop.store(true, SeqCst);
    toggler.join().unwrap();
    assert_eq!(
        watcher.join().unwrap(),
        0,
        "another description took the file"
    );
    file.failing.store(false, SeqCst);
    drop(file);
    block_on(store.admit(&job_n(99_999), &CAPS)).unwrap();
    let v = store.verify().unwrap();
    assert!(
        v.jobs.len() > ok,
        "{} jobs, {ok} acknowledged",
        v.jobs.len()
    );
    assert!(!free_for_others(&path));
    drop(Arc::try_unwrap(store).unwrap());
    assert!(free_for_others(&path));
}
