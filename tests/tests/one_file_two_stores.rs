//! One file, two kinds of store, one process: a store of one kind open on a file keeps it
//! against an open of the other kind (`rota_core::claims`). For SQLite this is its lock: closing
//! any descriptor of the file drops this process's POSIX locks on it, so a redb open that only
//! read the file's first bytes (to refuse it as not a redb file) let a second process own the
//! store too, and the two corrupted it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Command;

use rota_core::{BatchStore, StoreError};
use rota_store_redb::RedbStore;
use rota_store_sqlite::SqliteStore;

/// The child mode: the path of a store to try to open as SQLite, from another process.
const TRY_ENV: &str = "ROTA_TEST_TRY_SQLITE";

/// Opens `path` as a SQLite store in a child process (this test binary, re-executed): what
/// came of it, `in use` or `opened`.
fn open_from_another_process(test: &str, path: &Path) -> String {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(TRY_ENV, path)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("rota-try: "))
        .unwrap_or_else(|| panic!("the child said nothing: {stdout}"))
        .to_owned()
}

/// The child's side: tries the open and says what came of it.
fn child_tries(path: &str) {
    let said = match SqliteStore::open(path) {
        Ok(_) => "opened".to_owned(),
        Err(StoreError::InUse(_)) => "in use".to_owned(),
        Err(e) => format!("failed: {e}"),
    };
    println!("\nrota-try: {said}");
}

#[tokio::test]
async fn a_redb_open_of_a_sqlite_stores_file_is_refused_and_sqlite_keeps_its_lock() {
    const TEST: &str = "a_redb_open_of_a_sqlite_stores_file_is_refused_and_sqlite_keeps_its_lock";
    if let Ok(path) = std::env::var(TRY_ENV) {
        return child_tries(&path);
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rota.sqlite3");
    let sqlite = SqliteStore::open(&path).unwrap();
    // (Nothing here reads the file itself either: that too would drop SQLite's lock.)
    // Each of redb's ways into a file, by the file's name and by a hard link to it.
    let link = dir.path().join("link.sqlite3");
    std::fs::hard_link(&path, &link).unwrap();
    let mut refusals = Vec::new();
    for p in [&path, &link] {
        refusals.push(RedbStore::open(p).map(drop));
        refusals.push(RedbStore::read_job(p, &"a".repeat(32)).map(drop));
        refusals.push(RedbStore::upgrade(p).map(drop));
    }
    // Its lock held throughout: another process still finds the store in use (given one name
    // again, as SQLite refuses a store of two).
    std::fs::remove_file(&link).unwrap();
    assert_eq!(open_from_another_process(TEST, &path), "in use");
    for r in refusals {
        assert!(
            matches!(&r, Err(StoreError::InUse(m)) if m.contains("already open by another store")),
            "{r:?}"
        );
    }
    assert_eq!(sqlite.live_jobs(None).await.unwrap(), 0);
    drop(sqlite);
    // Let go of with the store.
    assert!(matches!(
        RedbStore::open(&path),
        Err(StoreError::Corrupt(_))
    ));
}

#[tokio::test]
async fn a_sqlite_open_of_a_redb_stores_file_is_refused_in_use() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rota.redb");
    let redb = RedbStore::open(&path).unwrap();
    let err = SqliteStore::open(&path).map(drop).unwrap_err();
    assert!(
        matches!(&err, StoreError::InUse(m) if m.contains("already open by another store")),
        "{err:?}"
    );
    assert_eq!(redb.live_jobs(None).await.unwrap(), 0);
    drop(redb);
    assert!(matches!(
        SqliteStore::open(&path).map(drop),
        Err(StoreError::Corrupt(_))
    ));
}

/// Threads of this process racing to open one path, half as SQLite and half as redb, each
/// holding what it opened until all have tried: never two open at once, and every other
/// attempt is refused as in use, or as a file of the other kind (once the file exists).
#[test]
fn threads_racing_to_open_one_path_as_either_kind_get_one_store_at_most() {
    use std::sync::{Arc, Barrier};

    let dir = tempfile::tempdir().unwrap();
    let mut opened_any = 0;
    for round in 0..20 {
        // A new file in half the rounds, the one the last round made in the others.
        let path = Arc::new(dir.path().join(format!("race-{}", round / 2)));
        const THREADS: usize = 6;
        let gate = Arc::new(Barrier::new(THREADS));
        let held = Arc::new(Barrier::new(THREADS));
        let results: Vec<Result<&str, StoreError>> = (0..THREADS)
            .map(|t| {
                let (path, gate, held) = (path.clone(), gate.clone(), held.clone());
                std::thread::spawn(move || {
                    gate.wait();
                    let store: Result<Box<dyn BatchStore>, StoreError> = if t % 2 == 0 {
                        SqliteStore::open(&*path).map(|s| Box::new(s) as Box<dyn BatchStore>)
                    } else {
                        RedbStore::open(&*path).map(|s| Box::new(s) as Box<dyn BatchStore>)
                    };
                    let kind = if t % 2 == 0 { "sqlite" } else { "redb" };
                    // Held until every thread has tried.
                    held.wait();
                    store.map(|_| kind)
                })
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|h| h.join().unwrap())
            .collect();
        let opened: Vec<&str> = results
            .iter()
            .filter_map(|r| r.as_ref().ok().copied())
            .collect();
        assert!(opened.len() <= 1, "round {round}: {results:?}");
        opened_any += opened.len();
        for r in &results {
            assert!(
                matches!(
                    r,
                    Ok(_) | Err(StoreError::InUse(_) | StoreError::Corrupt(_))
                ),
                "round {round}: {r:?}"
            );
        }
    }
    assert!(
        opened_any >= 10,
        "only {opened_any} rounds of 20 opened a store"
    );
}
