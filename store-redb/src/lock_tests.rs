//! A file store's file stays locked for the store's whole life: between closing its database
//! and opening it again after an I/O error too, where another opener once could take it.
//! (redb's locks belong to an open file description, so an open here, on a file description of
//! its own, meets them as another process's open would.)

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering::SeqCst;
use std::sync::{Arc, Mutex};

use rota_core::{Admission, BatchStore, StoreError};

use crate::RedbStore;
use crate::test_support::{CAPS, block_on, job};

const A: &str = "0000000000000000000000000000000a";
const B: &str = "0000000000000000000000000000000b";
const C: &str = "0000000000000000000000000000000c";

/// What other openers of `path` get: a writer's open and a read-only one, as redb's own
/// `Database::open` and `open_read_only` make them.
fn others_open(path: &Path) -> [String; 2] {
    [
        format!("{:?}", redb::Database::builder().open(path).map(drop)),
        format!("{:?}", redb::Builder::new().open_read_only(path).map(drop)),
    ]
}

const REFUSED: [&str; 2] = ["Err(DatabaseAlreadyOpen)", "Err(DatabaseAlreadyOpen)"];

/// What other openers got, at each reopen.
type Seen = Arc<Mutex<Vec<[String; 2]>>>;

/// A store at a new file, with a hook in its reopen that records what other openers get
/// between the close and the open.
fn watched_store() -> (tempfile::TempDir, PathBuf, RedbStore, Seen) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.redb");
    let mut store = RedbStore::open(&path).unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (record, at) = (seen.clone(), path.clone());
    store.between_close_and_open = Some(Box::new(move || {
        record.lock().unwrap().push(others_open(&at));
    }));
    (dir, path, store, seen)
}

/// The store's file is refused to others while it is open, and opens once it is dropped.
fn refused_until_dropped(path: &Path, store: RedbStore) {
    assert_eq!(others_open(path), REFUSED, "while the store is open");
    drop(store);
    assert_eq!(
        others_open(path),
        ["Ok(())", "Ok(())"],
        "once it is dropped"
    );
    drop(RedbStore::open(path).unwrap());
}

#[test]
fn the_file_stays_locked_between_closing_the_database_and_opening_it_again() {
    let (_dir, path, store, seen) = watched_store();
    assert_eq!(
        block_on(store.admit(&job(A), &CAPS)).unwrap(),
        Admission::Created
    );
    assert_eq!(others_open(&path), REFUSED, "before the reopen");

    store.reopen_now().unwrap();

    assert_eq!(
        *seen.lock().unwrap(),
        [REFUSED],
        "between the close and the open"
    );
    // Opened again over the same file: what it held is there, and it takes writes.
    assert!(block_on(store.job(A)).unwrap().is_some());
    assert_eq!(
        block_on(store.admit(&job(B), &CAPS)).unwrap(),
        Admission::Created
    );
    // ... again and again: a later reopen is lent the locks the first open took.
    store.reopen_now().unwrap();
    store.reopen_now().unwrap();
    assert_eq!(seen.lock().unwrap().len(), 3);
    assert!(seen.lock().unwrap().iter().all(|s| *s == REFUSED));
    assert_eq!(block_on(store.live_jobs(None)).unwrap(), 2);
    refused_until_dropped(&path, store);
}

#[test]
fn after_an_io_error_the_store_opens_its_database_again_with_the_file_still_locked() {
    let (_dir, path, store, seen) = watched_store();
    let file = store.file.clone().unwrap();
    assert_eq!(
        block_on(store.admit(&job(A), &CAPS)).unwrap(),
        Admission::Created
    );

    // A full disk: the admit fails, and redb refuses the database from then on.
    file.failing.store(true, SeqCst);
    assert!(matches!(
        block_on(store.admit(&job(B), &CAPS)),
        Err(StoreError::Backend { .. })
    ));
    assert!(seen.lock().unwrap().is_empty());
    file.failing.store(false, SeqCst);

    // The next operation opens the database again, the file locked throughout.
    assert_eq!(
        block_on(store.admit(&job(C), &CAPS)).unwrap(),
        Admission::Created
    );
    assert_eq!(*seen.lock().unwrap(), [REFUSED]);
    assert!(block_on(store.job(A)).unwrap().is_some());
    assert!(block_on(store.job(C)).unwrap().is_some());
    drop(file);
    refused_until_dropped(&path, store);
}

#[test]
fn a_reopen_that_fails_leaves_the_file_locked_until_one_succeeds() {
    let (_dir, path, store, seen) = watched_store();
    let file = store.file.clone().unwrap();
    assert_eq!(
        block_on(store.admit(&job(A), &CAPS)).unwrap(),
        Admission::Created
    );

    // The disk stays full: the admit fails, and so does the open after it (redb writes the
    // header as it opens), which leaves the store with no database.
    file.failing.store(true, SeqCst);
    assert!(block_on(store.admit(&job(B), &CAPS)).is_err());
    assert!(block_on(store.admit(&job(B), &CAPS)).is_err());
    assert_eq!(*seen.lock().unwrap(), [REFUSED]);
    assert!(
        store.slot().db().is_err(),
        "the failed open left no database"
    );
    assert_eq!(others_open(&path), REFUSED, "with no database open");

    file.failing.store(false, SeqCst);
    assert_eq!(
        block_on(store.admit(&job(C), &CAPS)).unwrap(),
        Admission::Created
    );
    assert_eq!(seen.lock().unwrap().len(), 2);
    assert!(seen.lock().unwrap().iter().all(|s| *s == REFUSED));
    assert!(block_on(store.job(A)).unwrap().is_some());
    drop(file);
    refused_until_dropped(&path, store);
}
