//! Opening a file: one owner at a time, and every file that is not a rota store of this schema
//! version refused with a clear error and left byte for byte as it was.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "common/child.rs"]
mod child_process;
mod common;
#[path = "common/files.rs"]
mod files;

use std::fs;
use std::path::Path;
use std::process::Command;

use common::refused;
use files::{assert_made_where_it_leads, link_to_nothing, while_read_only};
use rota_core::{BatchStore, CallerClass, Caps, JobStatus, NewJob, StoreError, TargetWrite};
use rota_store_sqlite::{APPLICATION_ID, SCHEMA_VERSION, SqliteOptions, SqliteStore, Synchronous};

const CAPS: Caps = Caps {
    targets_per_job: 8,
    jobs_per_caller: 4,
    jobs_total: 8,
    ttl_secs: 3600,
};

fn new_job(id: &str, n: usize) -> NewJob {
    NewJob {
        id: id.into(),
        caller: "alice".into(),
        class: CallerClass::Fleet,
        idem_key: format!("key-{id}"),
        targets: (0..n)
            .map(|i| (format!("https://example.com/{id}/{i}"), "{}".into()))
            .collect(),
        now: 100,
    }
}

/// A rota store at `path` holding one finished job, closed.
async fn make_store(path: &Path) {
    let store = SqliteStore::open(path).unwrap();
    store.admit(&new_job("j1", 2), &CAPS).await.unwrap();
    for idx in 0..2 {
        store.start_target("j1", idx, 101).await.unwrap();
        let write = TargetWrite::Done {
            result: format!(r#"{{"content":"c{idx}"}}"#),
        };
        let finish = (idx == 1).then_some(JobStatus::Done);
        store
            .finish_target("j1", idx, &write, 102, finish)
            .await
            .unwrap();
    }
}

/// Runs the sqlite3-compatible statements `sql` on a fresh database at `path` with rusqlite.
fn foreign_db(path: &Path, sql: &str) {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.execute_batch(sql).unwrap();
}

#[tokio::test]
async fn a_store_keeps_its_jobs_and_byte_total_across_close_and_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rota.db");
    make_store(&path).await;
    let store = SqliteStore::open(&path).unwrap();
    let job = store.job("j1").await.unwrap().unwrap();
    assert_eq!((job.status, job.targets_done), (JobStatus::Done, 2));
    let targets = store.targets("j1").await.unwrap();
    assert_eq!(targets[1].result.as_deref(), Some(r#"{"content":"c1"}"#));
    store.integrity_check().unwrap();
    store.admit(&new_job("j2", 3), &CAPS).await.unwrap();
    let total = store.total_bytes().await.unwrap();
    assert_eq!(
        total,
        job.n_bytes + store.job("j2").await.unwrap().unwrap().n_bytes
    );
    drop(store);
    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(store.total_bytes().await.unwrap(), total);
    assert_eq!(store.evict(0).await.unwrap(), 1, "only j1 is terminal");
    let left = store.job("j2").await.unwrap().unwrap().n_bytes;
    assert_eq!(store.total_bytes().await.unwrap(), left);
    drop(store);
    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(store.total_bytes().await.unwrap(), left);
    assert_eq!(store.job("j1").await.unwrap(), None);
}

#[tokio::test]
async fn a_missing_file_and_a_zero_byte_file_are_new_stores() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("new.db");
    let store = SqliteStore::open(&missing).unwrap();
    assert_eq!(store.live_jobs(None).await.unwrap(), 0);
    drop(store);
    let empty = dir.path().join("empty.db");
    fs::write(&empty, b"").unwrap();
    let store = SqliteStore::open(&empty).unwrap();
    store.admit(&new_job("j1", 1), &CAPS).await.unwrap();
    assert_eq!(store.live_jobs(None).await.unwrap(), 1);
}

#[tokio::test]
async fn an_open_store_keeps_only_its_file_and_wal_and_a_closed_one_only_its_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rota.db");
    let names = || {
        let mut n: Vec<String> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        n.sort();
        n
    };
    let store = SqliteStore::open(&path).unwrap();
    store.admit(&new_job("j1", 1), &CAPS).await.unwrap();
    // No -shm: the exclusive lock keeps the WAL index in memory; no -journal left over from
    // the schema's creation.
    assert_eq!(names(), ["rota.db", "rota.db-wal"]);
    drop(store);
    assert_eq!(names(), ["rota.db"]);
}

#[tokio::test]
async fn a_new_store_carries_rota_marks_in_its_header() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rota.db");
    drop(SqliteStore::open(&path).unwrap());
    let head = fs::read(&path).unwrap();
    assert!(head.starts_with(b"SQLite format 3\0"));
    let be32 = |at: usize| u32::from_be_bytes(head[at..at + 4].try_into().unwrap());
    assert_eq!(be32(68), APPLICATION_ID);
    assert_eq!(be32(60), SCHEMA_VERSION);
    // WAL (2) for both the read and write versions.
    assert_eq!((head[18], head[19]), (2, 2));
}

#[test]
fn a_second_open_in_this_process_is_in_use_until_the_first_is_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rota.db");
    let first = SqliteStore::open(&path).unwrap();
    let err = SqliteStore::open(&path).unwrap_err();
    assert!(matches!(err, StoreError::InUse(_)), "{err:?}");
    assert!(err.to_string().contains("already open"), "{err}");
    // Another spelling of the same file is the same file.
    let alias = dir.path().join(".").join("rota.db");
    assert!(matches!(
        SqliteStore::open(&alias),
        Err(StoreError::InUse(_))
    ));
    drop(first);
    SqliteStore::open(&path).unwrap();
}

/// A hard link to an open store is that store: an open through it is refused before it reads
/// the file (closing a descriptor of the file, even a reader's, would drop this process's lock
/// on it), so that another process is still locked out after the refused open. And a store
/// file with more than one name is refused at open: SQLite keeps the write-ahead log beside
/// the name it was opened by, so after a crash an open by another name would miss the writes
/// in that log.
#[test]
fn a_hard_link_to_an_open_store_is_refused_and_the_owner_keeps_its_lock() {
    // The child: opens the path it is given and says how that went.
    if let Ok(path) = std::env::var("ROTA_SQLITE_TRY") {
        match SqliteStore::open(&path) {
            Ok(_) => println!("\nrota-try: opened"),
            Err(StoreError::InUse(_)) => println!("\nrota-try: in use"),
            Err(e) => println!("\nrota-try: {e}"),
        }
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rota.db");
    let owner = SqliteStore::open(&path).unwrap();
    let link = dir.path().join("link.db");
    fs::hard_link(&path, &link).unwrap();
    let err = SqliteStore::open(&link).unwrap_err();
    assert!(
        matches!(&err, StoreError::InUse(m) if m.contains("already open")),
        "{err:?}"
    );
    // One name again, so that the child's open gets as far as the lock.
    fs::remove_file(&link).unwrap();
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "a_hard_link_to_an_open_store_is_refused_and_the_owner_keeps_its_lock",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("ROTA_SQLITE_TRY", &path)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("rota-try: in use"), "{said}");
    drop(owner);
    // Closed, a store of two names opens under neither, the file unchanged.
    fs::hard_link(&path, &link).unwrap();
    let before = fs::read(&path).unwrap();
    for name in [&path, &link] {
        let err = SqliteStore::open(name).map(drop).unwrap_err();
        assert!(
            err.to_string().contains("has 2 names (hard links)"),
            "{err}"
        );
    }
    assert_eq!(fs::read(&path).unwrap(), before, "the file changed");
    fs::remove_file(&link).unwrap();
    SqliteStore::open(&path).unwrap();
}

#[test]
fn a_file_locked_by_another_process_is_in_use() {
    // The `sqlite3`-free way to hold the lock from another process: this test binary itself,
    // re-executed as a child that opens the store and waits for its stdin to close.
    if let Ok(path) = std::env::var("ROTA_SQLITE_HOLD") {
        let _store = SqliteStore::open(&path).unwrap();
        println!("\nrota-hold-open");
        let mut line = String::new();
        let _ = std::io::stdin().read_line(&mut line);
        return;
    }
    use child_process::{KillOnDrop, Lines};
    use std::process::Stdio;
    use std::time::Duration;
    // Long enough for the child to open the store on a loaded machine; only there so a hang
    // fails the test.
    const LIMIT: Duration = Duration::from_secs(60);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rota.db");
    let mut child = KillOnDrop::spawn(
        Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "a_file_locked_by_another_process_is_in_use",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("ROTA_SQLITE_HOLD", &path)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped()),
    );
    let mut out = Lines::new(child.stdout.take().unwrap());
    loop {
        let line = out.next_within(LIMIT).expect("the child exited");
        if line.trim() == "rota-hold-open" {
            break;
        }
    }
    let began = std::time::Instant::now();
    let err = SqliteStore::open(&path).unwrap_err();
    let tried_for = began.elapsed();
    assert!(matches!(err, StoreError::InUse(_)), "{err:?}");
    assert!(
        err.to_string().contains("locked by another process"),
        "{err}"
    );
    // Not at once: two opens at the same moment could each hold the other off, so an open
    // tries again for 300 ms before it calls the file another's (README, *SQLite*).
    assert!(
        tried_for >= std::time::Duration::from_millis(300),
        "refused after {tried_for:?}"
    );
    drop(child.stdin.take());
    assert!(child.wait_within(LIMIT).success());
    SqliteStore::open(&path).unwrap();
}

#[test]
fn a_text_file_is_refused_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notes.txt");
    fs::write(&path, "these are my notes, not a database\n".repeat(40)).unwrap();
    let err = refused(&path);
    assert!(
        matches!(&err, StoreError::Corrupt(m) if m.contains("not a SQLite database")),
        "{err}"
    );
    let tiny = dir.path().join("tiny");
    fs::write(&tiny, "hi").unwrap();
    let err = refused(&tiny);
    assert!(
        matches!(&err, StoreError::Corrupt(m) if m.contains("too short")),
        "{err}"
    );
}

#[test]
fn an_empty_sqlite_database_that_is_not_new_is_refused_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("empty.db");
    // A valid database with a page but no tables at all.
    foreign_db(&path, "PRAGMA user_version = 0; VACUUM;");
    assert!(fs::metadata(&path).unwrap().len() > 0);
    let err = refused(&path);
    assert!(
        matches!(&err, StoreError::Corrupt(m) if m.contains("not a rota store")),
        "{err}"
    );
}

#[test]
fn another_programs_database_is_refused_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let plain = dir.path().join("plain.db");
    foreign_db(
        &plain,
        "CREATE TABLE jobs (x); INSERT INTO jobs VALUES (1);",
    );
    let err = refused(&plain);
    assert!(
        matches!(&err, StoreError::Corrupt(m) if m.contains("not a rota store")),
        "{err}"
    );
    let marked = dir.path().join("marked.db");
    foreign_db(&marked, "PRAGMA application_id = 1234; CREATE TABLE t (x);");
    let err = refused(&marked);
    assert!(
        matches!(&err, StoreError::Corrupt(m) if m.contains("another program") && m.contains("0x000004d2")),
        "{err}"
    );
    // Even in WAL mode, with its WAL still beside it.
    let wal = dir.path().join("wal.db");
    let conn = rusqlite::Connection::open(&wal).unwrap();
    conn.execute_batch("PRAGMA journal_mode = WAL; CREATE TABLE t (x); INSERT INTO t VALUES (1);")
        .unwrap();
    let err = SqliteStore::open(&wal).unwrap_err();
    assert!(
        matches!(&err, StoreError::Corrupt(m) if m.contains("not a rota store")),
        "{err}"
    );
    drop(conn);
    refused(&wal);
}

#[tokio::test]
async fn a_rota_store_of_another_schema_version_is_refused_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rota.db");
    make_store(&path).await;
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch(&format!("PRAGMA user_version = {};", SCHEMA_VERSION + 1))
            .unwrap();
    }
    let err = refused(&path);
    assert_eq!(
        err,
        StoreError::Version {
            found: (SCHEMA_VERSION + 1).to_string(),
            expected: SCHEMA_VERSION.to_string()
        }
    );
}

/// A header whose page size SQLite never writes (not a power of two, or under 512 bytes) is
/// refused as such, and the file left as it was.
#[tokio::test]
async fn a_store_whose_header_has_an_invalid_page_size_is_refused_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rota.db");
    make_store(&path).await;
    let whole = fs::read(&path).unwrap();
    // 256 and 128 are powers of two (and divide the file's length); 1000 and 0 are not.
    for size in [1000u16, 256, 128, 0] {
        let mut bytes = whole.clone();
        bytes[16..18].copy_from_slice(&size.to_be_bytes());
        fs::write(&path, &bytes).unwrap();
        let err = refused(&path);
        assert!(
            matches!(&err, StoreError::Corrupt(m)
                if m.ends_with(&format!("invalid page size {size} in the SQLite header"))),
            "{size}: {err:?}"
        );
    }
}

/// A link that leads round in a loop is refused with the system's own words for it, before
/// SQLite is asked (whose words would be "unable to open database file").
#[test]
fn a_link_that_leads_round_in_a_loop_is_refused_saying_so() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a.db"), dir.path().join("b.db"));
    std::os::unix::fs::symlink(&b, &a).unwrap();
    std::os::unix::fs::symlink(&a, &b).unwrap();
    let err = SqliteStore::open(&a).map(drop).unwrap_err();
    // ELOOP, 40 on Linux.
    let loops = std::io::Error::from_raw_os_error(40).to_string();
    assert!(
        matches!(&err, StoreError::Backend { .. }) && err.to_string().contains(&loops),
        "{err:?}"
    );
    let mut left: Vec<_> = fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    left.sort();
    assert_eq!(left, ["a.db", "b.db"]);
}

#[tokio::test]
async fn a_truncated_store_is_refused_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rota.db");
    make_store(&path).await;
    let whole = fs::read(&path).unwrap();
    assert!(whole.len() >= 3 * 4096, "{} bytes", whole.len());
    // Cut at a page boundary (only the header can tell) and mid-page.
    for keep in [4096, 4096 + 100, 50] {
        fs::write(&path, &whole[..keep]).unwrap();
        let err = refused(&path);
        let StoreError::Corrupt(msg) = &err else {
            panic!("{err:?}")
        };
        assert!(
            msg.contains("truncated") || msg.contains("too short"),
            "{msg}"
        );
    }
}

/// A new store at `path` as its first commit (the schema) leaves it, in rollback-journal
/// mode as it is made: the file's bytes, and its page size.
fn first_commit_at(path: &Path) -> (Vec<u8>, u32) {
    drop(SqliteStore::open(path).unwrap());
    let conn = rusqlite::Connection::open(path).unwrap();
    let mode: String = conn
        .query_row("PRAGMA journal_mode = DELETE", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "delete");
    let page_size: u32 = conn
        .query_row("PRAGMA page_size", [], |r| r.get(0))
        .unwrap();
    drop(conn);
    (fs::read(path).unwrap(), page_size)
}

/// The rollback journal of a transaction on a file of no pages, for pages of `page_size`: its
/// header alone (magic, no page records, a nonce, the original size of 0 pages, sector and page
/// size), one sector long.
fn empty_file_journal(page_size: u32) -> Vec<u8> {
    let mut journal = vec![0u8; 512];
    journal[..8].copy_from_slice(&[0xd9, 0xd5, 0x05, 0xf9, 0x20, 0xa1, 0x63, 0xd7]);
    journal[12..16].copy_from_slice(&0x1234_5678u32.to_be_bytes());
    journal[20..24].copy_from_slice(&512u32.to_be_bytes());
    journal[24..28].copy_from_slice(&page_size.to_be_bytes());
    journal
}

/// A new store whose first commit a crash cut short: SQLite writes the schema's pages after its
/// rollback journal (which for a new file records only its size, none), page 1 first with the
/// final header; killed partway, it leaves a file shorter than its header says and a hot
/// journal. The next open lets SQLite roll that back (to no pages: a new store) rather than
/// refuse the file as truncated for good.
#[tokio::test]
async fn a_new_store_whose_first_commit_was_cut_short_opens_as_new() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rota.db");
    let (whole, page_size) = first_commit_at(&path);
    assert!(
        whole.len() >= 3 * page_size as usize,
        "{} bytes",
        whole.len()
    );
    let journal = empty_file_journal(page_size);
    let mut hot = path.clone().into_os_string();
    hot.push("-journal");
    for keep in [1, 2] {
        fs::write(&path, &whole[..keep * page_size as usize]).unwrap();
        fs::write(&hot, &journal).unwrap();
        let store = SqliteStore::open(&path).unwrap_or_else(|e| panic!("{keep} pages: {e}"));
        assert!(store.job("j1").await.unwrap().is_none());
        store.admit(&new_job("j1", 1), &CAPS).await.unwrap();
        assert!(store.job("j1").await.unwrap().is_some());
        drop(store);
        assert!(!Path::new(&hot).exists(), "the journal was rolled back");
        fs::remove_file(&path).unwrap();
    }
    // A store in WAL mode (every store past its first commit) cut short is refused as
    // truncated, unchanged, journal or not: rolled back, it would open empty, its jobs gone.
    make_store(&path).await;
    let whole = fs::read(&path).unwrap();
    assert_eq!(whole[18..20], [2, 2], "a store is in WAL mode");
    fs::write(&path, &whole[..page_size as usize]).unwrap();
    fs::write(&hot, &journal).unwrap();
    let err = refused(&path);
    assert!(err.to_string().contains("truncated"), "{err}");
    assert_eq!(fs::read(&path).unwrap(), &whole[..page_size as usize]);
    assert_eq!(fs::read(&hot).unwrap(), journal, "the journal changed");
}

/// Opened through a symbolic link in another directory, a store's journal and write-ahead log
/// are looked for where SQLite keeps them: beside the file the link leads to, not beside the
/// link. A new store whose first commit was cut short opens as new through the link too (it
/// was refused as truncated), and a store refused for the version its write-ahead log holds is
/// left as it was, log included (the open through the link checkpointed the log into the file
/// and removed it).
#[tokio::test]
async fn through_a_link_the_journal_and_log_are_looked_for_where_it_leads() {
    let dir = tempfile::tempdir().unwrap();
    let (link, path) = link_to_nothing(dir.path(), "via.db", "rota.db");
    let (whole, page_size) = first_commit_at(&path);
    // The first commit cut short after page 1, its hot journal beside the file (see
    // `a_new_store_whose_first_commit_was_cut_short_opens_as_new`).
    let journal = empty_file_journal(page_size);
    let mut hot = path.clone().into_os_string();
    hot.push("-journal");
    fs::write(&path, &whole[..page_size as usize]).unwrap();
    fs::write(&hot, &journal).unwrap();
    let store = SqliteStore::open(&link).unwrap_or_else(|e| panic!("through the link: {e}"));
    assert!(store.job("j1").await.unwrap().is_none());
    drop(store);
    assert!(!Path::new(&hot).exists(), "the journal was rolled back");
    fs::remove_file(&path).unwrap();

    // A store whose write-ahead log holds a commit of another schema version (a newer rota
    // that crashed): its file and log copied while that rota had it open.
    let other = dir.path().join("other");
    fs::create_dir(&other).unwrap();
    let live = other.join("rota.db");
    make_store(&live).await;
    let conn = rusqlite::Connection::open(&live).unwrap();
    conn.execute_batch(&format!(
        "PRAGMA locking_mode = EXCLUSIVE; PRAGMA journal_mode = WAL; \
         PRAGMA user_version = {};",
        SCHEMA_VERSION + 1
    ))
    .unwrap();
    let mut wal = path.clone().into_os_string();
    wal.push("-wal");
    fs::copy(&live, &path).unwrap();
    fs::copy(other.join("rota.db-wal"), &wal).unwrap();
    drop(conn);
    let before = common::snapshot(path.parent().unwrap());
    let err = SqliteStore::open(&link).expect_err("another schema version");
    assert!(matches!(err, StoreError::Version { .. }), "{err}");
    let after = common::snapshot(path.parent().unwrap());
    let sizes = |files: &[(std::path::PathBuf, Vec<u8>)]| -> Vec<(String, usize)> {
        files
            .iter()
            .map(|(p, b)| (p.display().to_string(), b.len()))
            .collect()
    };
    assert!(
        after == before,
        "refusing {err} through the link changed the store: {:?} became {:?}",
        sizes(&before),
        sizes(&after)
    );
}

/// A store whose write-ahead log holds a commit that dropped every table and cleared one of
/// its marks (the header on disk still shows both) is refused for that mark, and left as it
/// was, log included: a file with no tables is new only if it has neither mark.
#[tokio::test]
async fn a_store_whose_log_clears_a_mark_and_every_table_is_refused_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    for mark in ["application_id", "user_version"] {
        // The file and log copied while the program that emptied the store had it open.
        let (other, here) = (dir.path().join("other"), dir.path().join(mark));
        fs::create_dir_all(&other).unwrap();
        fs::create_dir(&here).unwrap();
        let live = other.join(format!("{mark}.db"));
        make_store(&live).await;
        let conn = rusqlite::Connection::open(&live).unwrap();
        conn.execute_batch(&format!(
            "PRAGMA locking_mode = EXCLUSIVE; PRAGMA journal_mode = WAL; \
             DROP TABLE targets; DROP TABLE jobs; PRAGMA {mark} = 0;"
        ))
        .unwrap();
        let path = here.join("rota.db");
        fs::copy(&live, &path).unwrap();
        fs::copy(
            other.join(format!("{mark}.db-wal")),
            here.join("rota.db-wal"),
        )
        .unwrap();
        drop(conn);
        let head = fs::read(&path).unwrap();
        assert_eq!(head[68..72], APPLICATION_ID.to_be_bytes(), "{mark}");
        assert_eq!(head[60..64], SCHEMA_VERSION.to_be_bytes(), "{mark}");
        let err = refused(&path);
        match mark {
            "application_id" => assert!(
                matches!(&err, StoreError::Corrupt(m) if m.contains("no rota application id")),
                "{mark}: {err:?}"
            ),
            _ => assert!(
                matches!(&err, StoreError::Version { found, .. } if found == "0"),
                "{mark}: {err:?}"
            ),
        }
    }
}

/// The refusal of a SQLite file with rota's marks and what `ddl` makes.
fn refused_marked(path: &Path, ddl: &str) -> StoreError {
    foreign_db(
        path,
        &format!(
            "PRAGMA application_id = {APPLICATION_ID}; PRAGMA user_version = {SCHEMA_VERSION}; \
             {ddl}"
        ),
    );
    refused(path)
}

/// A file with rota's marks and both tables, one of them without a column the store reads, is
/// refused as a damaged store, naming the column, and left as it was (it failed as a backend
/// error, SQLite's "no such column: n_bytes" of the byte sum's query).
#[test]
fn a_rota_store_whose_table_lacks_a_column_is_refused_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    for (table, ddl, column) in [
        (
            "jobs",
            "CREATE TABLE jobs (seq INTEGER PRIMARY KEY, id TEXT); \
             CREATE TABLE targets (job, idx, url, options, status, result, error, hint);",
            "caller",
        ),
        (
            "targets",
            "CREATE TABLE jobs (seq INTEGER PRIMARY KEY, id, caller, class, idem_key, status, \
             error, targets_total, targets_done, created_at, lease, n_bytes); \
             CREATE TABLE targets (job, idx, url, options, status, error, hint);",
            "result",
        ),
    ] {
        let err = refused_marked(&dir.path().join(format!("{table}.db")), ddl);
        assert!(
            matches!(&err, StoreError::Corrupt(m)
                if m.ends_with(&format!("whose table {table:?} has no column {column:?}"))),
            "{err:?}"
        );
    }
}

/// A file with rota's marks missing a table, or every table (marks and nothing else: not a new
/// file to create the schema in), is refused.
#[test]
fn a_rota_store_missing_a_table_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    for (name, ddl, missing) in [
        ("one", "CREATE TABLE jobs (x);", "targets"),
        ("all", "", "jobs"),
    ] {
        let err = refused_marked(&dir.path().join(format!("{name}.db")), ddl);
        assert!(
            matches!(&err, StoreError::Corrupt(m)
                if m.ends_with(&format!("without its table {missing:?}"))),
            "{name}: {err}"
        );
    }
}

/// A new store in a directory that does not exist fails with SQLite's error and the reason
/// (SQLite says only "unable to open database file"), and makes no directory.
#[test]
fn a_new_store_in_a_missing_directory_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing");
    let err = SqliteStore::open(missing.join("rota.sqlite3"))
        .map(drop)
        .unwrap_err()
        .to_string();
    assert!(err.contains("unable to open database file"), "{err}");
    assert!(
        err.ends_with(&format!(
            ": it does not exist, and neither does its directory {}",
            missing.display()
        )),
        "{err}"
    );
    assert!(!missing.exists());
}

/// A store SQLite cannot open for a reason other than this process's rights (here a path
/// longer than SQLite takes, 512 bytes, in a directory of a name so long that no longer name can
/// be made in it) fails with SQLite's error alone: it is not said to be unwritable, nor its
/// directory, which the look tried and could not make a file in only for the name's length.
#[test]
fn a_store_sqlite_cannot_open_for_another_reason_is_not_called_unwritable() {
    let top = tempfile::tempdir().unwrap();
    // 4070 bytes: `x.db` in it is a name Linux takes (under 4096), the look's file is not.
    let mut dir = top.path().to_path_buf();
    while dir.as_os_str().len() + 251 <= 4068 {
        dir.push("d".repeat(250));
    }
    dir.push("d".repeat(4070 - dir.as_os_str().len() - 1));
    assert_eq!(dir.as_os_str().len(), 4070);
    fs::create_dir_all(&dir).unwrap();
    let err = SqliteStore::open(dir.join("x.db"))
        .map(drop)
        .unwrap_err()
        .to_string();
    assert!(err.contains("unable to open database file"), "{err}");
    assert!(!err.contains("not writable"), "{err}");
    assert_eq!(fs::read_dir(&dir).unwrap().count(), 0, "a file was made");
}

#[test]
fn a_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let err = SqliteStore::open(dir.path()).unwrap_err();
    assert_eq!(
        err,
        StoreError::Corrupt(format!(
            "{}: is a directory, not a rota store",
            dir.path().display()
        ))
    );
}

/// A path that ends with a slash, `.` or `..` names a directory, even where nothing is yet:
/// refused, and nothing made (SQLite would make the file `x` of `x/` or `x/.`, and every later
/// open of them fail).
#[test]
fn a_path_with_a_trailing_slash_is_refused_and_nothing_made() {
    let dir = tempfile::tempdir().unwrap();
    for name in ["new/", "new//"] {
        let path = dir.path().join(name);
        let err = SqliteStore::open(&path).unwrap_err();
        assert_eq!(
            err,
            StoreError::Corrupt(format!(
                "{}: names a directory, not a rota store file",
                path.display()
            ))
        );
    }
    // `x/.` too, whose file name `Path` gives as `x` (SQLite made the file `x`).
    for last in ["..", "."] {
        let path = dir.path().join("x").join(last);
        assert!(
            matches!(
                SqliteStore::open(&path).unwrap_err(),
                StoreError::Corrupt(m) if m.ends_with("names a directory, not a rota store file")
            ),
            "{}",
            path.display()
        );
    }
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "made nothing"
    );
}

/// A FIFO is refused at once: opening it to read its header would wait for a writer.
#[cfg(unix)]
#[test]
fn a_fifo_is_refused_without_waiting_for_a_writer() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fifo");
    let made = std::process::Command::new("mkfifo")
        .arg(&path)
        .status()
        .unwrap();
    assert!(made.success());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(SqliteStore::open(&path).map(drop)));
    let err = rx
        .recv_timeout(std::time::Duration::from_secs(20))
        .expect("open waited on the FIFO")
        .unwrap_err();
    assert!(
        matches!(&err, StoreError::Corrupt(m) if m.ends_with("fifo: not a regular file, not a rota store")),
        "{err}"
    );
}

#[tokio::test]
async fn full_synchronous_opens_and_stores_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rota.db");
    let opts = SqliteOptions {
        synchronous: Synchronous::Full,
    };
    {
        let store = SqliteStore::open_with(&path, opts).unwrap();
        store.admit(&new_job("j1", 1), &CAPS).await.unwrap();
    }
    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(
        store.job("j1").await.unwrap().unwrap().status,
        JobStatus::Queued
    );
}

#[tokio::test]
async fn in_memory_stores_are_private_to_their_handle() {
    let a = SqliteStore::open_in_memory().unwrap();
    let b = SqliteStore::open_in_memory().unwrap();
    a.admit(&new_job("j1", 1), &CAPS).await.unwrap();
    assert!(a.job("j1").await.unwrap().is_some());
    assert!(b.job("j1").await.unwrap().is_none());
    a.integrity_check().unwrap();
}

/// A path that is a symbolic link to nothing yet (here a relative one, into a directory of its
/// own) makes the store where the link leads (SQLite follows it), leaving the link a link; the
/// store opens again through the link and by its own name. (`rota-store-redb` does the same.)
#[tokio::test]
async fn a_link_to_nothing_yet_makes_the_store_where_it_leads() {
    let dir = tempfile::tempdir().unwrap();
    let (link, target) = link_to_nothing(dir.path(), "via.sqlite3", "rota.sqlite3");
    make_store(&link).await;
    assert_made_where_it_leads(&link, &target);
    for path in [&link, &target] {
        let store = SqliteStore::open(path).unwrap();
        assert_eq!(
            store.job("j1").await.unwrap().map(|j| j.status),
            Some(JobStatus::Done)
        );
    }
}

/// Opens the store at `path` while `target` is read-only: the error's text, or `None` where
/// this machine cannot make `target` read-only ([`while_read_only`]).
fn open_while_read_only(path: &Path, target: &Path) -> Option<String> {
    while_read_only(target, || {
        SqliteStore::open(path).map(drop).unwrap_err().to_string()
    })
}

/// A store that this process may not write (the file, its write-ahead log, or the directory
/// the log is to be made in; through a symbolic link, where the link leads) fails to open with
/// an error that says so, after SQLite's own ("disk I/O error", "unable to open database
/// file", "attempt to write a readonly database"); once writable again, it opens with its job,
/// unchanged by the refused opens. Where this machine cannot make a file read-only to this
/// process (root without `chattr +i`), it says so on stderr and checks nothing (under `CI`, it
/// fails).
#[tokio::test]
async fn a_read_only_store_its_log_or_its_directory_is_named_as_such() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rota.sqlite3");
    make_store(&path).await;
    let before = fs::read(&path).unwrap();
    let links = tempfile::tempdir().unwrap();
    let link = links.path().join("via-link.sqlite3");
    std::os::unix::fs::symlink(&path, &link).unwrap();
    let wal = dir.path().join("rota.sqlite3-wal");
    let fresh = dir.path().join("new.sqlite3");
    const NOTE: &str = "a rota store is written even to read a job";
    let cases: [(&str, &Path, &Path, &str); 5] = [
        ("file", &path, &path, "rota.sqlite3 is not writable"),
        ("linked-to file", &link, &path, "(a link to"),
        ("directory", &path, dir.path(), "its directory"),
        ("linked-to directory", &link, dir.path(), "its directory"),
        (
            "directory of a new store",
            &fresh,
            dir.path(),
            "new.sqlite3: it does not exist, and its directory",
        ),
    ];
    for (what, open, target, says) in cases {
        let Some(err) = open_while_read_only(open, target) else {
            return;
        };
        assert!(err.contains(says), "read-only {what}: {err}");
        if open == fresh.as_path() {
            assert!(err.ends_with("), so it cannot be made there"), "{err}");
        }
        // An existing store is written even to be read; a new one is not there to be read.
        let new = open == fresh.as_path();
        assert_eq!(err.contains(NOTE), !new, "read-only {what}: {err}");
        assert_eq!(
            err.contains("write-ahead log"),
            !new && target == dir.path(),
            "{err}"
        );
    }
    assert!(!fresh.exists(), "a refused new store left a file");
    let left: Vec<_> = fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n != "rota.sqlite3")
        .collect();
    assert!(left.is_empty(), "the looks left files: {left:?}");
    // A write-ahead log left by another user (here: read-only, and not a log at all).
    fs::write(&wal, b"not a log").unwrap();
    let Some(err) = open_while_read_only(&path, &wal) else {
        return;
    };
    fs::remove_file(&wal).unwrap();
    assert!(err.contains("its write-ahead log"), "read-only log: {err}");
    assert_eq!(
        fs::read(&path).unwrap(),
        before,
        "the refused opens changed the file"
    );
    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(
        store.job("j1").await.unwrap().map(|j| j.status),
        Some(JobStatus::Done)
    );
}

/// A new store named by its file name alone, in a working directory this process may not
/// write, is refused naming that directory as `.`, not by an empty name. (The test binary is
/// run again as a child with that working directory, so that this process's stays as it is.)
#[test]
fn a_new_store_by_a_bare_name_in_a_read_only_working_directory_names_it_dot() {
    // The child: opens the bare name it is given and says how that went.
    if let Ok(name) = std::env::var("ROTA_SQLITE_BARE") {
        match SqliteStore::open(&name) {
            Ok(_) => println!("\nrota-bare: opened"),
            Err(e) => println!("\nrota-bare: {e}"),
        }
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let Some(out) = while_read_only(dir.path(), || {
        Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "a_new_store_by_a_bare_name_in_a_read_only_working_directory_names_it_dot",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("ROTA_SQLITE_BARE", "new.sqlite3")
            .current_dir(dir.path())
            .output()
            .unwrap()
    }) else {
        return;
    };
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("new.sqlite3: it does not exist, and its directory . is not writable ("),
        "{said}"
    );
    assert_eq!(
        fs::read_dir(dir.path()).unwrap().count(),
        0,
        "a file was made"
    );
}

/// `SqliteStore`'s `Debug` "shows no rows (they hold URLs) and no path": neither the file's
/// path (here in a directory of a telling name) nor a stored URL, caller or key, whether the
/// store is a file or in memory; only whether it is in memory.
#[tokio::test]
async fn debug_shows_no_row_and_no_path() {
    let dir = tempfile::tempdir().unwrap();
    let secret_dir = dir.path().join("secret-dir");
    fs::create_dir(&secret_dir).unwrap();
    let file = SqliteStore::open(secret_dir.join("rota.db")).unwrap();
    let memory = SqliteStore::open_in_memory().unwrap();
    for (store, in_memory) in [(&file, false), (&memory, true)] {
        store.admit(&new_job("j1", 2), &CAPS).await.unwrap();
        let shown = format!("{store:?}");
        assert_eq!(
            shown,
            format!("SqliteStore {{ in_memory: {in_memory}, .. }}")
        );
        for secret in ["secret-dir", "rota.db", "example.com", "alice", "key-j1"] {
            assert!(!shown.contains(secret), "{secret} in {shown}");
        }
    }
}

/// `integrity_check` is "`Ok` if it finds nothing, else `StoreError::Corrupt` with its
/// findings": a store whose `jobs_live` index another program redefined (its entries no
/// longer those of its rows) still opens and serves the job, and the check names the index.
#[tokio::test]
async fn integrity_check_reports_what_it_finds_as_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rota.db");
    make_store(&path).await;
    SqliteStore::open(&path).unwrap().integrity_check().unwrap();
    {
        // The index holds no job (j1 is done); its definition now says it holds the done ones.
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch(
            "PRAGMA writable_schema = ON;
             UPDATE sqlite_schema SET sql = 'CREATE INDEX jobs_live ON jobs (caller) \
                 WHERE status IN (''done'')' WHERE name = 'jobs_live';
             PRAGMA writable_schema = OFF;",
        )
        .unwrap();
    }
    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(
        store.job("j1").await.unwrap().unwrap().status,
        JobStatus::Done
    );
    let err = store.integrity_check().unwrap_err();
    assert!(
        matches!(&err, StoreError::Corrupt(m) if m.starts_with("integrity check: ")
            && m.contains("jobs_live")),
        "{err:?}"
    );
}
