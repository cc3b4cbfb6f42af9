//! Opening a redb store: created when missing, owned by one handle, and refusing (unchanged)
//! any file that is not a rota store of this schema version.

#![allow(clippy::unwrap_used, clippy::expect_used)]

// The file helpers of store-sqlite's tests (std and tempfile only).
#[path = "../../store-sqlite/tests/common/files.rs"]
mod files;

use std::fs;
use std::path::{Path, PathBuf};

use files::{assert_made_where_it_leads, link_to_nothing, while_read_only};
use rota_core::claims::{FileClaim, FileKey};
use rota_core::{Admission, BatchStore, CallerClass, Caps, NewJob, StoreError, TargetWrite};
use rota_store_redb::{Durability, RedbOptions, RedbStore};

fn caps() -> Caps {
    Caps {
        targets_per_job: 32,
        jobs_per_caller: 10,
        jobs_total: 10,
        ttl_secs: 3600,
    }
}

fn new_job(id: &str, n: usize) -> NewJob {
    NewJob {
        id: id.into(),
        caller: "alice".into(),
        class: CallerClass::Fleet,
        idem_key: format!("key-{id}"),
        targets: (0..n)
            .map(|i| (format!("https://example.com/{i}"), "{}".into()))
            .collect(),
        now: 100,
    }
}

fn id(n: u8) -> String {
    format!("{n:032x}")
}

fn store_path(dir: &tempfile::TempDir) -> PathBuf {
    dir.path().join("rota.redb")
}

/// Writes a store with one finished job at `path`, then closes it.
async fn make_store(path: &Path) {
    let s = RedbStore::open(path).unwrap();
    assert_eq!(
        s.admit(&new_job(&id(1), 2), &caps()).await.unwrap(),
        Admission::Created
    );
    s.start_target(&id(1), 0, 101).await.unwrap();
    let done = TargetWrite::Done {
        result: r#"{"content":"x"}"#.into(),
    };
    s.finish_target(&id(1), 0, &done, 102, None).await.unwrap();
}

/// Asserts that opening `path` fails as `check` says and leaves the file as it was.
fn assert_refused_unchanged(path: &Path, check: impl Fn(&StoreError) -> bool) -> StoreError {
    let before = fs::read(path).unwrap();
    let err = RedbStore::open(path).expect_err("the open must fail");
    assert!(check(&err), "unexpected error: {err:?}");
    assert_eq!(
        fs::read(path).unwrap(),
        before,
        "the refused file was changed"
    );
    // Refused again the same way: nothing was repaired or initialized.
    let again = RedbStore::open(path).expect_err("the open must still fail");
    assert_eq!(again, err);
    err
}

fn is_corrupt(e: &StoreError) -> bool {
    matches!(e, StoreError::Corrupt(_))
}

#[tokio::test]
async fn a_missing_path_is_created_and_reopens_with_its_data() {
    let dir = tempfile::tempdir().unwrap();
    let path = store_path(&dir);
    make_store(&path).await;
    let s = RedbStore::open(&path).unwrap();
    let job = s.job(&id(1)).await.unwrap().unwrap();
    assert_eq!(
        (job.targets_total, job.targets_done, job.lease),
        (2, 1, 102)
    );
    let t = s.targets(&id(1)).await.unwrap();
    assert_eq!(t.len(), 2);
    assert_eq!(t[0].result.as_deref(), Some(r#"{"content":"x"}"#));
    assert_eq!(s.live_jobs(None).await.unwrap(), 1);
    assert_eq!(s.live_jobs(Some("alice")).await.unwrap(), 1);
    let bytes: u64 = t.iter().map(|r| r.n_bytes()).sum();
    assert_eq!(s.total_bytes().await.unwrap(), bytes);
}

#[tokio::test]
async fn creating_a_store_leaves_no_temporary_file_beside_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = store_path(&dir);
    drop(RedbStore::open(&path).unwrap());
    let names: Vec<_> = fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, vec![std::ffi::OsString::from("rota.redb")]);
}

/// `read_job` reads a job as the file holds it, the same as an open store shows it, and
/// leaves the file byte for byte as it was; it is refused while the store is open, and for a
/// file that is no store, as an open is.
#[tokio::test]
async fn read_job_reads_the_file_without_changing_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = store_path(&dir);
    make_store(&path).await;
    let open = RedbStore::open(&path).unwrap();
    let shown = open.view(&id(1)).await.unwrap().unwrap();
    assert!(matches!(
        RedbStore::read_job(&path, &id(1)),
        Err(StoreError::InUse(_))
    ));
    drop(open);
    let before = fs::read(&path).unwrap();
    let read = RedbStore::read_job(&path, &id(1)).unwrap().unwrap();
    assert_eq!(read, shown);
    assert_eq!(read.1.len(), 2);
    assert_eq!(RedbStore::read_job(&path, &id(9)).unwrap(), None);
    assert_eq!(
        fs::read(&path).unwrap(),
        before,
        "read_job changed the file"
    );
    let text = dir.path().join("notes.txt");
    fs::write(&text, "not a store").unwrap();
    assert!(matches!(
        RedbStore::read_job(&text, &id(1)),
        Err(StoreError::Corrupt(_))
    ));
}

/// `read_job` of a file that another process has open (here redb itself, whose locks belong to
/// its own file description, as another process's would) is refused `InUse`, its look through
/// the copy-on-write view locked out as redb's own open is, not read beside that writer; once
/// the other lets it go, it reads the job.
#[tokio::test]
async fn read_job_is_refused_while_another_opener_holds_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = store_path(&dir);
    make_store(&path).await;
    let other = redb::Database::builder().open(&path).unwrap();
    let err = RedbStore::read_job(&path, &id(1)).unwrap_err();
    assert!(
        matches!(&err, StoreError::InUse(m) if m.contains("already open")),
        "{err:?}"
    );
    drop(other);
    let (job, targets) = RedbStore::read_job(&path, &id(1)).unwrap().unwrap();
    assert_eq!((job.targets_done, targets.len()), (1, 2));
}

/// A store that cannot be made or looked at for a reason of the path (a missing directory, a
/// file where a directory should be) names the file after the system's words, which do not.
#[test]
fn a_path_that_cannot_hold_a_store_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-dir").join("s.redb");
    let plain = dir.path().join("plain");
    fs::write(&plain, "not a directory").unwrap();
    let under_a_file = plain.join("s.redb");
    for (path, says) in [
        (&missing, "create store file: No such file or directory"),
        (&under_a_file, "open store file: Not a directory"),
    ] {
        let err = RedbStore::open(path).unwrap_err();
        assert!(matches!(err, StoreError::Backend { .. }), "{err:?}");
        let text = err.to_string();
        assert!(text.starts_with(says), "{text}");
        assert!(text.ends_with(&format!(": {}", path.display())), "{text}");
    }
    let err = RedbStore::upgrade(&missing).unwrap_err().to_string();
    assert!(err.ends_with(&format!(": {}", missing.display())), "{err}");
}

/// A store file this process may not write fails to open (and to upgrade) with the system's
/// error and the reason, naming the file; a new store in a directory this process may not
/// write, likewise, naming the directory, and leaves nothing there. Once writable again the
/// store opens with its job, unchanged by the refused opens. Where this machine cannot make a
/// file read-only to this process (root without `chattr +i`), it says so on stderr and checks
/// nothing (under `CI`, it fails).
#[tokio::test]
async fn a_read_only_store_or_directory_is_named_as_such() {
    const NOTE: &str = "a rota store is written even to read a job from it";
    let dir = tempfile::tempdir().unwrap();
    let path = store_path(&dir);
    make_store(&path).await;
    let before = fs::read(&path).unwrap();
    let Some((open, upgrade)) = while_read_only(&path, || {
        (
            RedbStore::open(&path).unwrap_err(),
            RedbStore::upgrade(&path).unwrap_err(),
        )
    }) else {
        return;
    };
    for err in [open, upgrade] {
        assert!(matches!(err, StoreError::Backend { .. }), "{err:?}");
        let text = err.to_string();
        assert!(text.starts_with("open store file: "), "{text}");
        assert!(
            text.ends_with(&format!("{} is not writable; {NOTE}", path.display())),
            "{text}"
        );
    }
    assert_eq!(
        fs::read(&path).unwrap(),
        before,
        "a refused open changed the file"
    );

    let fresh = dir.path().join("new.redb");
    let Some(err) = while_read_only(dir.path(), || RedbStore::open(&fresh).unwrap_err()) else {
        return;
    };
    assert!(matches!(err, StoreError::Backend { .. }), "{err:?}");
    let text = err.to_string();
    assert!(text.starts_with("create store file: "), "{text}");
    assert!(
        text.ends_with(&format!(
            "{} does not exist, and its directory {} is not writable, so it cannot be made \
             there",
            fresh.display(),
            dir.path().display()
        )),
        "{text}"
    );
    let names: Vec<_> = fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, vec![std::ffi::OsString::from("rota.redb")]);

    let s = RedbStore::open(&path).unwrap();
    assert_eq!(s.job(&id(1)).await.unwrap().unwrap().targets_done, 1);
}

/// A path that is a symbolic link to nothing yet (here a relative one, into a directory of its
/// own) makes the store where the link leads, as SQLite does, leaving the link a link and no
/// temporary file; the store opens again through the link and by its own name.
#[tokio::test]
async fn a_link_to_nothing_yet_makes_the_store_where_it_leads() {
    let dir = tempfile::tempdir().unwrap();
    let (link, target) = link_to_nothing(dir.path(), "via.redb", "rota.redb");
    make_store(&link).await;
    assert_made_where_it_leads(&link, &target);
    let names: Vec<_> = fs::read_dir(dir.path().join("data"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, vec![std::ffi::OsString::from("rota.redb")]);
    for path in [&link, &target] {
        let s = RedbStore::open(path).unwrap();
        assert_eq!(s.job(&id(1)).await.unwrap().unwrap().targets_done, 1);
    }
}

/// A chain of symbolic links to nothing yet (a link to a link, to a path in another
/// directory) makes the store at the chain's end; one that loops is refused, and makes nothing.
#[tokio::test]
async fn a_chain_of_links_to_nothing_yet_makes_the_store_at_its_end() {
    let dir = tempfile::tempdir().unwrap();
    let (second, target) = link_to_nothing(dir.path(), "second.redb", "rota.redb");
    let first = dir.path().join("first.redb");
    std::os::unix::fs::symlink("second.redb", &first).unwrap();
    make_store(&first).await;
    assert_made_where_it_leads(&second, &target);
    let s = RedbStore::open(&first).unwrap();
    assert_eq!(s.job(&id(1)).await.unwrap().unwrap().targets_done, 1);

    let (a, b) = (dir.path().join("a.redb"), dir.path().join("b.redb"));
    std::os::unix::fs::symlink("b.redb", &a).unwrap();
    std::os::unix::fs::symlink("a.redb", &b).unwrap();
    let err = RedbStore::open(&a).unwrap_err();
    assert!(
        err.to_string()
            .contains("Too many levels of symbolic links"),
        "{err}"
    );
    assert!(fs::read_link(&a).is_ok() && fs::read_link(&b).is_ok());
    assert_eq!(
        fs::read_dir(dir.path()).unwrap().count(),
        5,
        "a file was made"
    );
}

/// The temporary files a store's creation leaves when a crash cuts it short are removed by a
/// later open of that store: those over a minute old that nothing holds, of that store's name.
#[test]
fn an_open_removes_the_stale_temporary_files_of_a_creation_a_crash_cut_short() {
    let dir = tempfile::tempdir().unwrap();
    let path = store_path(&dir);
    let name = path.file_name().unwrap().to_string_lossy().into_owned();
    let temp = |tail: &str| dir.path().join(format!(".{name}.rota-new-{tail}"));
    let aged = |p: &Path| {
        let f = fs::File::create(p).unwrap();
        f.set_len(4096).unwrap();
        f.set_modified(std::time::SystemTime::now() - std::time::Duration::from_secs(120))
            .unwrap();
    };
    let (stale, fresh, held) = (temp("1-2"), temp("1-3"), temp("1-4"));
    let other = dir.path().join(".other.redb.rota-new-1-5");
    aged(&stale);
    fs::write(&fresh, b"being made").unwrap();
    aged(&held);
    aged(&other);
    // Held as redb holds the file it builds a store in.
    let holder = fs::OpenOptions::new().write(true).open(&held).unwrap();
    holder.lock().unwrap();
    drop(RedbStore::open(&path).unwrap());
    assert!(!stale.exists(), "a stale temporary file is left");
    for kept in [&fresh, &held, &other] {
        assert!(kept.exists(), "{kept:?} was removed");
    }
    drop(holder);
    drop(RedbStore::open(&path).unwrap());
    assert!(!held.exists(), "let go of, it is stale");
    assert!(fresh.exists() && other.exists());
}

#[test]
fn a_second_open_fails_in_use_until_the_first_is_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let path = store_path(&dir);
    let first = RedbStore::open(&path).unwrap();
    let err = RedbStore::open(&path).unwrap_err();
    assert!(
        matches!(&err, StoreError::InUse(m) if m.contains("already open")),
        "{err:?}"
    );
    // The message names the file and says who may hold it.
    let shown = err.to_string();
    assert!(shown.contains("already open"), "{shown}");
    assert!(shown.contains(&path.display().to_string()), "{shown}");
    assert!(shown.contains("one owner at a time"), "{shown}");
    drop(first);
    RedbStore::open(&path).unwrap();
}

/// The lock is the file's, not its name's: a store open under one name is refused under a
/// symlink to it or a hard link of it, and the first owner keeps it (README, *Stores*: "whatever
/// name it is opened by").
#[cfg(unix)]
#[test]
fn a_store_open_under_one_name_is_refused_under_a_link_to_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = store_path(&dir);
    let soft = dir.path().join("soft.redb");
    let hard = dir.path().join("hard.redb");
    drop(RedbStore::open(&path).unwrap());
    std::os::unix::fs::symlink(&path, &soft).unwrap();
    fs::hard_link(&path, &hard).unwrap();
    for (first, second) in [
        (&path, &soft),
        (&path, &hard),
        (&soft, &path),
        (&hard, &soft),
    ] {
        let owner = RedbStore::open(first).unwrap();
        let err = RedbStore::open(second).unwrap_err();
        assert!(
            matches!(&err, StoreError::InUse(m) if m.contains("already open")),
            "{first:?} then {second:?}: {err:?}"
        );
        // The refused open took nothing from the owner: its lock still holds.
        let again = RedbStore::open(first).unwrap_err();
        assert!(matches!(again, StoreError::InUse(_)), "{again:?}");
        drop(owner);
    }
    RedbStore::open(&soft).unwrap();
}

/// A file claimed in this process is claimed by its inode too, whatever name it is reached by
/// (`RedbStore::open`: a second open "in this one, by a store of either kind", fails `InUse`
/// "before the file is read"): a store file claimed by its inode alone, as a store of another
/// kind open on it under another name claims it, is refused under its own name by `open`,
/// `read_job` and `upgrade`, unchanged, and opens once the claim is dropped.
#[cfg(unix)]
#[tokio::test]
async fn a_file_claimed_in_this_process_by_its_inode_is_refused_under_any_name() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    let path = store_path(&dir);
    make_store(&path).await;
    let m = fs::metadata(&path).unwrap();
    let key = FileKey::Inode {
        dev: m.dev(),
        ino: m.ino(),
    };
    let claim = FileClaim::take(vec![key]).unwrap();
    let before = fs::read(&path).unwrap();
    let in_this_process =
        |e: &StoreError| matches!(e, StoreError::InUse(m) if m.contains("in this process"));
    let open = RedbStore::open(&path).map(drop).unwrap_err();
    assert!(in_this_process(&open), "{open:?}");
    let read = RedbStore::read_job(&path, &id(1)).unwrap_err();
    assert!(in_this_process(&read), "{read:?}");
    let upgrade = RedbStore::upgrade(&path).unwrap_err();
    assert!(in_this_process(&upgrade), "{upgrade:?}");
    assert_eq!(
        fs::read(&path).unwrap(),
        before,
        "the claimed file was changed"
    );
    drop(claim);
    let s = RedbStore::open(&path).unwrap();
    assert_eq!(s.job(&id(1)).await.unwrap().unwrap().targets_done, 1);
}

/// A file not made yet is claimed by its canonical directory and its name (`FileKey::Path`):
/// while another opener in this process claims it so (a store being made there), an open of it
/// by another spelling, through a symbolic link to its directory, is refused `InUse` and makes
/// nothing; once the claim is dropped, it makes the store.
#[cfg(unix)]
#[test]
fn a_file_not_made_yet_is_claimed_by_its_canonical_name() {
    let dir = tempfile::tempdir().unwrap();
    let real = dir.path().join("real");
    fs::create_dir(&real).unwrap();
    let via = dir.path().join("via");
    std::os::unix::fs::symlink("real", &via).unwrap();
    let made = real.canonicalize().unwrap().join("rota.redb");
    let claim = FileClaim::take(vec![FileKey::Path(made.clone())]).unwrap();
    let err = RedbStore::open(via.join("rota.redb"))
        .map(drop)
        .unwrap_err();
    assert!(
        matches!(&err, StoreError::InUse(m) if m.contains("in this process")),
        "{err:?}"
    );
    assert_eq!(fs::read_dir(&real).unwrap().count(), 0, "a file was made");
    drop(claim);
    drop(RedbStore::open(via.join("rota.redb")).unwrap());
    assert!(made.is_file());
}

#[test]
fn an_empty_file_is_refused_and_left_empty() {
    let dir = tempfile::tempdir().unwrap();
    let path = store_path(&dir);
    fs::write(&path, b"").unwrap();
    let err = assert_refused_unchanged(&path, is_corrupt);
    assert!(err.to_string().contains("empty file"), "{err}");
    assert_eq!(fs::metadata(&path).unwrap().len(), 0);
}

#[test]
fn a_text_file_is_refused_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let path = store_path(&dir);
    fs::write(&path, "hello, this is not a database\n".repeat(500)).unwrap();
    let err = assert_refused_unchanged(&path, is_corrupt);
    assert!(err.to_string().contains("not a redb file"), "{err}");
}

#[tokio::test]
async fn a_truncated_store_is_refused_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let full = dir.path().join("full.redb");
    make_store(&full).await;
    let bytes = fs::read(&full).unwrap();
    let path = store_path(&dir);
    for len in [4, 9, 100, 512, 4096, 8192, bytes.len() / 2, bytes.len() - 1] {
        fs::write(&path, &bytes[..len]).unwrap();
        let err = assert_refused_unchanged(&path, is_corrupt);
        assert!(err.to_string().contains("rota.redb"), "{len}: {err}");
    }
}

#[tokio::test]
async fn a_store_with_a_damaged_page_is_refused_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let path = store_path(&dir);
    make_store(&path).await;
    let mut bytes = fs::read(&path).unwrap();
    // Flip every byte past the header pages: whatever the damage hits, a checksum catches it.
    for b in bytes.iter_mut().skip(8192) {
        *b ^= 0x5a;
    }
    fs::write(&path, &bytes).unwrap();
    assert_refused_unchanged(&path, is_corrupt);
}

#[test]
fn a_redb_database_of_another_program_is_refused_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let path = store_path(&dir);
    {
        let db = redb::Database::create(&path).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let def: redb::TableDefinition<&str, u64> = redb::TableDefinition::new("things");
            let mut t = txn.open_table(def).unwrap();
            t.insert("a", 1).unwrap();
        }
        txn.commit().unwrap();
    }
    let err = assert_refused_unchanged(&path, is_corrupt);
    assert!(err.to_string().contains("not a rota store"), "{err}");
}

/// A redb file whose `rota_meta` table holds `magic` and `version`.
fn write_meta(path: &Path, magic: &[u8], version: &[u8]) {
    let db = redb::Database::create(path).unwrap();
    let txn = db.begin_write().unwrap();
    {
        let def: redb::TableDefinition<&str, &[u8]> = redb::TableDefinition::new("rota_meta");
        let mut t = txn.open_table(def).unwrap();
        t.insert("magic", magic).unwrap();
        t.insert("schema_version", version).unwrap();
    }
    txn.commit().unwrap();
}

#[test]
fn a_rota_store_of_another_schema_version_is_refused_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let path = store_path(&dir);
    write_meta(&path, b"rota-store-redb", b"999");
    let err = assert_refused_unchanged(&path, |e| matches!(e, StoreError::Version { .. }));
    assert_eq!(
        err,
        StoreError::Version {
            found: "999".into(),
            expected: "3".into()
        }
    );
}

/// A meta table with rota's magic and an empty schema version says so, rather than that it
/// found version "" (the magic without a version key reads the same).
#[test]
fn a_rota_meta_table_without_a_schema_version_is_refused_saying_so() {
    let dir = tempfile::tempdir().unwrap();
    let path = store_path(&dir);
    write_meta(&path, b"rota-store-redb", b"");
    let err = assert_refused_unchanged(&path, is_corrupt);
    assert!(err.to_string().contains("holds no schema version"), "{err}");
    // Nor is a value that is no version shown: a damaged file could hold a URL there.
    fs::remove_file(&path).unwrap();
    write_meta(&path, b"rota-store-redb", b"https://secret.example/x");
    let err = assert_refused_unchanged(&path, is_corrupt);
    let shown = err.to_string();
    assert!(shown.contains("no valid schema version"), "{shown}");
    assert!(!shown.contains("secret"), "{shown}");
}

/// A schema version is shown only if it reads as one: at most 16 bytes, each a letter, a digit,
/// `.`, `-` or `_`. A short value with any other byte is no version (refused as corrupt, and
/// not shown), as is one of 17 such bytes; one of those bytes, 16 at most, is another schema
/// version, named in the refusal.
#[test]
fn only_a_value_that_reads_as_a_version_is_taken_for_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = store_path(&dir);
    for bad in ["x/y", "2 3", "4?", &"7".repeat(17)] {
        write_meta(&path, b"rota-store-redb", bad.as_bytes());
        let err = assert_refused_unchanged(&path, is_corrupt);
        let shown = err.to_string();
        assert!(
            shown.contains("no valid schema version"),
            "{bad:?}: {shown}"
        );
        assert!(!shown.contains(bad), "{bad:?}: {shown}");
        fs::remove_file(&path).unwrap();
    }
    for found in ["1.0-rc_2", "A.b-C_d", &"7".repeat(16)] {
        write_meta(&path, b"rota-store-redb", found.as_bytes());
        let err = assert_refused_unchanged(&path, |e| matches!(e, StoreError::Version { .. }));
        assert_eq!(
            err,
            StoreError::Version {
                found: found.into(),
                expected: "3".into()
            }
        );
        fs::remove_file(&path).unwrap();
    }
}

#[test]
fn a_meta_table_without_rotas_magic_is_refused_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let path = store_path(&dir);
    write_meta(&path, b"someone-else", b"1");
    let err = assert_refused_unchanged(&path, is_corrupt);
    assert!(err.to_string().contains("magic"), "{err}");
}

#[test]
fn a_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let err = RedbStore::open(dir.path()).unwrap_err();
    assert!(
        is_corrupt(&err) && err.to_string().contains("directory"),
        "{err}"
    );
}

/// A FIFO is refused at once, by `open` and by `upgrade`: opening it to read would wait for a
/// writer.
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
    std::thread::spawn(move || {
        let open = RedbStore::open(&path).map(drop);
        tx.send((open, RedbStore::upgrade(&path)))
    });
    let (open, upgrade) = rx
        .recv_timeout(std::time::Duration::from_secs(20))
        .expect("open or upgrade waited on the FIFO");
    for err in [open.unwrap_err(), upgrade.unwrap_err()] {
        assert!(
            is_corrupt(&err) && err.to_string().contains("not a regular file"),
            "{err}"
        );
    }
}

#[tokio::test]
async fn in_memory_stores_are_separate_and_start_empty() {
    let a = RedbStore::in_memory().unwrap();
    let b = RedbStore::in_memory().unwrap();
    assert_eq!(
        a.admit(&new_job(&id(1), 1), &caps()).await.unwrap(),
        Admission::Created
    );
    assert!(a.job(&id(1)).await.unwrap().is_some());
    assert!(b.job(&id(1)).await.unwrap().is_none());
    assert_eq!(b.live_jobs(None).await.unwrap(), 0);
    assert_eq!(b.total_bytes().await.unwrap(), 0);
}

#[tokio::test]
async fn a_no_sync_store_keeps_every_write_across_a_clean_close() {
    let dir = tempfile::tempdir().unwrap();
    let path = store_path(&dir);
    let opts = RedbOptions {
        durability: Durability::None,
        sync_every: 0,
        ..RedbOptions::default()
    };
    {
        let s = RedbStore::open_with(&path, opts.clone()).unwrap();
        assert_eq!(s.durability(), Durability::None);
        for n in 0..5 {
            assert_eq!(
                s.admit(&new_job(&id(n), 1), &caps()).await.unwrap(),
                Admission::Created
            );
        }
    }
    let s = RedbStore::open(&path).unwrap();
    assert_eq!(s.durability(), Durability::Immediate);
    assert_eq!(s.live_jobs(None).await.unwrap(), 5);
    for n in 0..5 {
        assert!(s.job(&id(n)).await.unwrap().is_some());
    }
}

#[tokio::test]
async fn a_row_that_cannot_be_decoded_reads_as_corrupt_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let path = store_path(&dir);
    make_store(&path).await;
    {
        let db = redb::Database::open(&path).unwrap();
        let txn = db.begin_write().unwrap();
        {
            // A live job's row is slot 0 of `live_rows`, target idx's slot idx + 1.
            let rows: redb::TableDefinition<(&str, u64), &[u8]> =
                redb::TableDefinition::new("live_rows");
            let mut t = txn.open_table(rows).unwrap();
            t.insert((id(1).as_str(), 0), &b"\x01\xff\xff"[..]).unwrap();
            t.insert((id(1).as_str(), 2), &b"\x01\x05ab"[..]).unwrap();
        }
        txn.commit().unwrap();
    }
    let s = RedbStore::open(&path).unwrap();
    for r in [
        s.job(&id(1)).await.map(|_| ()),
        s.touch(&id(1), 200).await.map(|_| ()),
        s.start_target(&id(1), 1, 200).await.map(|_| ()),
        s.verify().map(|_| ()),
    ] {
        assert!(matches!(r, Err(StoreError::Corrupt(_))), "{r:?}");
    }
    // A read of the targets gives the damaged one as corrupt, the others as stored.
    let targets = s.targets(&id(1)).await.unwrap();
    assert!(
        targets[1].error.starts_with("corrupt stored target row"),
        "{targets:?}"
    );
    assert!(targets[0].error.is_empty(), "{targets:?}");
}

#[test]
fn a_crashed_redb_database_of_another_program_is_refused_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let live = dir.path().join("live.redb");
    let db = redb::Database::create(&live).unwrap();
    let txn = db.begin_write().unwrap();
    {
        let def: redb::TableDefinition<&str, u64> = redb::TableDefinition::new("things");
        txn.open_table(def).unwrap().insert("a", 1).unwrap();
    }
    txn.commit().unwrap();
    // A copy taken while the database is open is what a crash leaves: it needs a repair,
    // which a read-only open refuses and a read-write open would write into the file.
    let path = store_path(&dir);
    fs::write(&path, fs::read(&live).unwrap()).unwrap();
    assert!(matches!(
        redb::ReadOnlyDatabase::open(&path),
        Err(redb::DatabaseError::RepairAborted)
    ));
    let err = assert_refused_unchanged(&path, is_corrupt);
    assert!(err.to_string().contains("not a rota store"), "{err}");
}

#[tokio::test]
async fn a_store_left_as_a_crash_leaves_it_opens_with_every_acknowledged_write() {
    let dir = tempfile::tempdir().unwrap();
    let live = dir.path().join("live.redb");
    let s = RedbStore::open(&live).unwrap();
    for n in 0..3 {
        assert_eq!(
            s.admit(&new_job(&id(n), 2), &caps()).await.unwrap(),
            Admission::Created
        );
    }
    let done = TargetWrite::Done {
        result: "{}".into(),
    };
    s.start_target(&id(0), 0, 101).await.unwrap();
    s.finish_target(&id(0), 0, &done, 102, None).await.unwrap();
    let path = store_path(&dir);
    fs::write(&path, fs::read(&live).unwrap()).unwrap();
    drop(s);
    let s = RedbStore::open(&path).unwrap();
    let v = s.verify().unwrap();
    assert_eq!((v.jobs.len(), v.live, v.targets), (3, 3, 6));
    assert_eq!(s.job(&id(0)).await.unwrap().unwrap().targets_done, 1);
}

const ROWS: redb::TableDefinition<(&str, u64), &[u8]> = redb::TableDefinition::new("rows");
const LIVE_ROWS: redb::TableDefinition<(&str, u64), &[u8]> =
    redb::TableDefinition::new("live_rows");
const LIVE_V2: redb::TableDefinition<&str, ()> = redb::TableDefinition::new("live");
const META: redb::TableDefinition<&str, &[u8]> = redb::TableDefinition::new("rota_meta");

/// Rewrites the closed store at `path` in schema 2's layout: every job's rows in `rows`, an
/// index `live` of the live jobs, schema version "2".
fn downgrade_to_schema_2(path: &Path) {
    let db = redb::Database::open(path).unwrap();
    let txn = db.begin_write().unwrap();
    {
        let mut rows = txn.open_table(ROWS).unwrap();
        let mut live = txn.open_table(LIVE_V2).unwrap();
        let live_rows = txn.open_table(LIVE_ROWS).unwrap();
        for entry in redb::ReadableTable::iter(&live_rows).unwrap() {
            let (k, v) = entry.unwrap();
            let (id, slot) = k.value();
            rows.insert((id, slot), v.value()).unwrap();
            if slot == 0 {
                live.insert(id, ()).unwrap();
            }
        }
    }
    txn.delete_table(LIVE_ROWS).unwrap();
    txn.open_table(META)
        .unwrap()
        .insert("schema_version", &b"2"[..])
        .unwrap();
    txn.commit().unwrap();
}

#[tokio::test]
async fn a_store_of_schema_2_is_refused_by_open_and_upgraded_with_every_job_kept() {
    let dir = tempfile::tempdir().unwrap();
    let path = store_path(&dir);
    let done = TargetWrite::Done {
        result: r#"{"content":"x"}"#.into(),
    };
    {
        let s = RedbStore::open(&path).unwrap();
        for n in 0..3 {
            assert_eq!(
                s.admit(&new_job(&id(n), 2), &caps()).await.unwrap(),
                Admission::Created
            );
        }
        // Job 0 ends; job 1 has a target running; job 2 is queued.
        for idx in 0..2 {
            s.start_target(&id(0), idx, 101).await.unwrap();
            let finish = (idx == 1).then_some(rota_core::JobStatus::Done);
            assert!(
                s.finish_target(&id(0), idx, &done, 102, finish)
                    .await
                    .unwrap()
            );
        }
        s.start_target(&id(1), 0, 103).await.unwrap();
    }
    downgrade_to_schema_2(&path);
    {
        let db = redb::Database::open(&path).unwrap();
        let txn = redb::ReadableDatabase::begin_read(&db).unwrap();
        assert!(txn.open_table(LIVE_ROWS).is_err(), "not schema 2's layout");
        assert_eq!(
            redb::ReadableTableMetadata::len(&txn.open_table(ROWS).unwrap()).unwrap(),
            9
        );
    }

    let err = assert_refused_unchanged(&path, |e| matches!(e, StoreError::Version { .. }));
    assert_eq!(
        err,
        StoreError::Version {
            found: "2".into(),
            expected: "3".into()
        }
    );
    assert!(RedbStore::upgrade(&path).unwrap(), "migrated");
    assert!(!RedbStore::upgrade(&path).unwrap(), "already current");

    let s = RedbStore::open(&path).unwrap();
    let v = s.verify().unwrap();
    assert_eq!((v.jobs.len(), v.live, v.targets), (3, 2, 6));
    assert_eq!(s.live_jobs(None).await.unwrap(), 2);
    let job0 = s.job(&id(0)).await.unwrap().unwrap();
    assert_eq!(
        (job0.status, job0.targets_done),
        (rota_core::JobStatus::Done, 2)
    );
    let t1 = s.targets(&id(1)).await.unwrap();
    assert_eq!(t1[0].status, rota_core::TargetState::Running);
    // The migrated live job goes on as any other.
    assert!(s.finish_target(&id(1), 0, &done, 104, None).await.unwrap());
    assert_eq!(s.job(&id(1)).await.unwrap().unwrap().targets_done, 1);
    s.verify().unwrap();
    drop(s);

    let db = redb::Database::open(&path).unwrap();
    let txn = redb::ReadableDatabase::begin_read(&db).unwrap();
    let meta = txn.open_table(META).unwrap();
    let version = redb::ReadableTable::get(&meta, "schema_version")
        .unwrap()
        .unwrap();
    assert_eq!(version.value(), b"3");
    assert!(
        txn.open_table(LIVE_V2).is_err(),
        "schema 2's live index is gone"
    );
    // Only the ended job's rows are left in `rows`.
    assert_eq!(
        redb::ReadableTableMetadata::len(&txn.open_table(ROWS).unwrap()).unwrap(),
        3
    );
}

#[tokio::test]
async fn verify_finds_a_job_whose_rows_are_in_the_wrong_table() {
    // (move the job row, move its targets, what verify must say)
    for (move_job, move_targets, says) in [
        (true, true, "a queued job among the terminal rows"),
        (true, false, "apart from its job row"),
        (false, true, "apart from its job row"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let path = store_path(&dir);
        {
            let s = RedbStore::open(&path).unwrap();
            s.admit(&new_job(&id(1), 2), &caps()).await.unwrap();
            s.verify().unwrap();
        }
        {
            let db = redb::Database::open(&path).unwrap();
            let txn = db.begin_write().unwrap();
            {
                let mut live_rows = txn.open_table(LIVE_ROWS).unwrap();
                let mut rows = txn.open_table(ROWS).unwrap();
                for slot in 0..3u64 {
                    if (slot == 0 && move_job) || (slot > 0 && move_targets) {
                        let v = live_rows.remove((id(1).as_str(), slot)).unwrap().unwrap();
                        rows.insert((id(1).as_str(), slot), v.value()).unwrap();
                    }
                }
            }
            txn.commit().unwrap();
        }
        let err = RedbStore::open(&path).unwrap().verify().unwrap_err();
        assert!(
            matches!(&err, StoreError::Corrupt(m) if m.contains(says)),
            "{move_job} {move_targets}: {err}"
        );
    }
}

#[tokio::test]
async fn verify_finds_a_job_missing_its_last_target_row() {
    let dir = tempfile::tempdir().unwrap();
    let path = store_path(&dir);
    {
        let s = RedbStore::open(&path).unwrap();
        s.admit(&new_job(&id(1), 2), &caps()).await.unwrap();
    }
    {
        let db = redb::Database::open(&path).unwrap();
        let txn = db.begin_write().unwrap();
        // Slot 2 holds target 1: what is left is target 0 alone, in its place.
        txn.open_table(LIVE_ROWS)
            .unwrap()
            .remove((id(1).as_str(), 2))
            .unwrap()
            .unwrap();
        txn.commit().unwrap();
    }
    let err = RedbStore::open(&path).unwrap().verify().unwrap_err();
    assert!(
        matches!(&err, StoreError::Corrupt(m) if m.contains("1 target rows for targets_total 2")),
        "{err}"
    );
}

#[test]
fn upgrade_refuses_what_open_refuses_and_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = store_path(&dir);
    assert!(RedbStore::upgrade(&path).is_err(), "a missing file");
    assert!(!path.exists(), "upgrade created a file");
    write_meta(&path, b"rota-store-redb", b"999");
    let before = fs::read(&path).unwrap();
    assert_eq!(
        RedbStore::upgrade(&path).unwrap_err(),
        StoreError::Version {
            found: "999".into(),
            expected: "3".into()
        }
    );
    assert_eq!(fs::read(&path).unwrap(), before, "the file changed");
    fs::write(&path, b"not a store").unwrap();
    assert!(is_corrupt(&RedbStore::upgrade(&path).unwrap_err()));
    assert!(is_corrupt(&RedbStore::upgrade(dir.path()).unwrap_err()));
}

#[tokio::test]
async fn debug_shows_counts_but_no_caller_or_url() {
    let dir = tempfile::tempdir().unwrap();
    let s = RedbStore::open(store_path(&dir)).unwrap();
    assert_eq!(
        s.admit(&new_job(&id(1), 2), &caps()).await.unwrap(),
        Admission::Created
    );
    let shown = format!("{s:?}");
    assert!(shown.contains("live_jobs: 1"), "{shown}");
    assert!(!shown.contains("alice"), "{shown}");
    assert!(!shown.contains("example.com"), "{shown}");
}

/// The store's `Debug` "shows the settings and counts": the durability and `sync_every` it
/// was opened with, and its total bytes as `total_bytes` reports them, each under its own
/// name (a store of one live job whose bytes are more than one, so that neither count can
/// pass for the other).
#[tokio::test]
async fn debug_shows_the_settings_it_was_opened_with_and_the_total_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let opts = RedbOptions {
        durability: Durability::None,
        sync_every: 7,
        ..RedbOptions::default()
    };
    let s = RedbStore::open_with(store_path(&dir), opts).unwrap();
    assert_eq!(
        s.admit(&new_job(&id(1), 2), &caps()).await.unwrap(),
        Admission::Created
    );
    let bytes = s.total_bytes().await.unwrap();
    assert!(bytes > 1, "{bytes}");
    let shown = format!("{s:?}");
    assert!(shown.contains("durability: None"), "{shown}");
    assert!(shown.contains("sync_every: 7"), "{shown}");
    assert!(shown.contains("live_jobs: 1,"), "{shown}");
    assert!(shown.contains(&format!("total_bytes: {bytes}")), "{shown}");
}

/// `RedbOptions::group_wait` is "ignored with `Durability::None`, whose commits do not wait
/// for the disk", and `RedbStore::group_wait` is "as taken from `RedbOptions::group_wait`
/// (zero with `Durability::None`)": a no-sync file store and an in-memory store never wait
/// for company, whatever they were given; a durable store takes what it was given (the
/// default `GROUP_WAIT`, zero, or a value under the cap) as it is.
#[test]
fn group_wait_is_taken_as_given_and_is_zero_without_sync() {
    use rota_store_redb::{GROUP_WAIT, MAX_GROUP_WAIT};
    use std::time::Duration;
    let dir = tempfile::tempdir().unwrap();
    let path = store_path(&dir);
    let opts = |durability, group_wait| RedbOptions {
        durability,
        group_wait,
        ..RedbOptions::default()
    };
    let ms = Duration::from_millis(1);
    for (given, want) in [
        (RedbOptions::default(), GROUP_WAIT),
        (opts(Durability::Immediate, ms), ms),
        (opts(Durability::Immediate, Duration::ZERO), Duration::ZERO),
        (opts(Durability::None, ms), Duration::ZERO),
        (opts(Durability::None, MAX_GROUP_WAIT), Duration::ZERO),
    ] {
        let shown = format!("{given:?}");
        let s = RedbStore::open_with(&path, given).unwrap();
        assert_eq!(s.group_wait(), want, "{shown}");
    }
    assert_eq!(RedbStore::in_memory().unwrap().group_wait(), Duration::ZERO);
}

fn is_in_use(e: &StoreError) -> bool {
    matches!(e, StoreError::InUse(m) if m.contains("already open"))
}

/// `upgrade` of a file open elsewhere fails `InUse` and leaves it unchanged, whether it is
/// current (held by a `RedbStore`) or of schema 2 (held by redb itself, as `RedbStore::open`
/// refuses it); once the holder is gone it upgrades (`RedbStore::upgrade`: "The store must not
/// be open elsewhere ([`StoreError::InUse`])").
#[tokio::test]
async fn upgrade_of_a_store_open_elsewhere_fails_in_use_and_leaves_it_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let path = store_path(&dir);
    make_store(&path).await;

    let held = RedbStore::open(&path).unwrap();
    let before = fs::read(&path).unwrap();
    let err = RedbStore::upgrade(&path).unwrap_err();
    assert!(is_in_use(&err), "{err:?}");
    assert_eq!(fs::read(&path).unwrap(), before, "the file changed");
    // The holder goes on as before.
    assert!(held.job(&id(1)).await.unwrap().is_some());
    drop(held);
    assert!(!RedbStore::upgrade(&path).unwrap(), "already current");

    downgrade_to_schema_2(&path);
    let raw = redb::Database::open(&path).unwrap();
    let before = fs::read(&path).unwrap();
    let err = RedbStore::upgrade(&path).unwrap_err();
    assert!(is_in_use(&err), "{err:?}");
    assert_eq!(fs::read(&path).unwrap(), before, "the file changed");
    drop(raw);
    assert!(RedbStore::upgrade(&path).unwrap(), "migrated once free");
    let s = RedbStore::open(&path).unwrap();
    assert!(s.job(&id(1)).await.unwrap().is_some());
    s.verify().unwrap();
}

/// A path that ends with a slash, `.` or `..` names a directory, even where nothing is yet:
/// refused, and nothing made (`x/.`, whose file name `Path` gives as `x`, failed to link a new
/// store file into place).
#[test]
fn a_path_with_a_trailing_slash_is_refused_and_nothing_made() {
    let dir = tempfile::tempdir().unwrap();
    for name in ["new/", "new//", "new/.", "new/.."] {
        let path = dir.path().join(name);
        assert_eq!(
            RedbStore::open(&path).unwrap_err(),
            StoreError::Corrupt(format!(
                "{}: names a directory, not a rota store file",
                path.display()
            ))
        );
    }
    assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0, "made nothing");
}
