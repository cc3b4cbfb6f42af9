//! The store's reopen after an I/O error, from inside the store (its private count of opens):
//! an operation refused for an earlier I/O failure opens the database again unless another
//! operation did since it was refused, and a database is open.

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::SeqCst;

use rota_core::{Admission, BatchStore};

use crate::RedbStore;
use crate::test_support::{CAPS, block_on, job};

const A: &str = "0000000000000000000000000000000a";
const B: &str = "0000000000000000000000000000000b";

/// Two operations are refused after an I/O error. The other one opens the database again
/// first, and fails (the disk is still full): no database is open, though the count of opens
/// moved on. This one, refused before that reopen, must open the database all the same (the
/// disk taking writes again), not take the moved count for another's successful reopen; and
/// once a database is open, a reopen as of a count that moved on opens nothing again.
#[test]
fn an_operation_refused_before_a_reopen_that_failed_opens_the_database_itself() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.redb");
    let mut store = RedbStore::open(&path).unwrap();
    let opens = Arc::new(AtomicUsize::new(0));
    let count = opens.clone();
    store.between_close_and_open = Some(Box::new(move || {
        count.fetch_add(1, SeqCst);
    }));
    let file = store.file.clone().unwrap();
    assert_eq!(
        block_on(store.admit(&job(A), &CAPS)).unwrap(),
        Admission::Created
    );

    // A write fails: redb refuses the database from now on. This operation is refused, as of
    // the current count.
    file.failing.store(true, SeqCst);
    assert!(block_on(store.admit(&job(B), &CAPS)).is_err());
    let seen = store.slot().opened;
    // The other operation's reopen fails.
    assert!(block_on(store.admit(&job(B), &CAPS)).is_err());
    assert_eq!(opens.load(SeqCst), 1);
    assert_ne!(store.slot().opened, seen);
    assert!(
        store.slot().db().is_err(),
        "the failed open left no database"
    );

    file.failing.store(false, SeqCst);
    store.reopen(seen).unwrap();
    assert_eq!(opens.load(SeqCst), 2);
    assert!(store.slot().db().is_ok(), "no database after the reopen");
    assert!(block_on(store.job(A)).unwrap().is_some());

    // A database open since `seen`: a reopen as of it closes and opens nothing.
    store.reopen(seen).unwrap();
    assert_eq!(opens.load(SeqCst), 2);
    assert_eq!(
        block_on(store.admit(&job(B), &CAPS)).unwrap(),
        Admission::Created
    );
}
