//! Opening a file: the in-process claim, the look at the file before anything is written, and
//! the lock that makes one process its owner.
//!
//! The order matters, and each step is there for a reason:
//! 1. [`Claim`]: a process-wide set of the files open here, by path and (on Unix) by device and
//!    inode, so that a hard link to an open file is that file. A second open in this process
//!    fails at once, before it touches the file: closing any descriptor of a file drops every
//!    POSIX lock this process holds on it (SQLite's own locks included), so even a read of the
//!    header through a fresh descriptor would silently unlock the first owner.
//! 2. [`inspect`]: the first 100 bytes, read with plain file I/O. SQLite is not asked yet,
//!    because opening a database may write (replaying a hot journal, creating `-wal`/`-shm`
//!    files, changing the journal mode): a text file, a foreign or versioned-away database, or a
//!    truncated one is refused here and left byte for byte as it was.
//! 3. The lock: `PRAGMA locking_mode = EXCLUSIVE` with a zero busy timeout, then a read
//!    transaction. On a WAL database SQLite takes the file's EXCLUSIVE lock at that first read
//!    and keeps it until the connection closes, and keeps the WAL index in heap memory (no
//!    `-shm` file). Another process that opens the file cannot even read it: it gets
//!    `SQLITE_BUSY`, which is [`StoreError::InUse`] once it has tried again for 300 ms (two
//!    processes opening the file at the same moment may each hold the other off: see
//!    [`open_contended`]). The OS drops the lock when the owner exits, however it exits
//!    (`kill -9` included), so a crashed owner never blocks the next.
//! 4. Still read-only: the marks, tables and columns are checked through SQLite (a `-wal` left by
//!    a crash is read, not yet applied), and every job is read by the byte sum, so a file whose
//!    pages SQLite finds malformed is refused here. Until this passes, closing the connection
//!    does not checkpoint a `-wal` that was already there into the file.
//! 5. Only then `BEGIN IMMEDIATE`, the first step that may write: the checks once more, now
//!    under the write lock, or for a file with no page yet the schema is created; then the
//!    journal is switched to WAL.
//!
//! A read-only connection does not fit step 4: without the exclusive locking mode it creates
//! `-wal` and `-shm` files beside the file and leaves them, and with it, it cannot take the
//! lock (`SQLITE_IOERR_LOCK`); `immutable=1` would ignore the `-wal` of a crash.
//!
//! A file of 0 bytes counts as new, as SQLite itself treats it (it is what `mktemp` and
//! `tempfile` make); any file with content must already be a rota store of this version.

use std::ffi::OsString;
use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rota_core::StoreError;
use rota_core::claims::{FileClaim, FileKey, names_a_directory};
use rusqlite::config::DbConfig;
use rusqlite::{Connection, OpenFlags, TransactionBehavior};

use crate::error::ctx;
use crate::ops::Tally;
use crate::schema::{self, Found};
use crate::store::{SqliteOptions, Synchronous};

/// The busy timeout once the store is open. The exclusive lock means no other connection ever
/// holds the file, so this only bounds a wait that should not happen.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// How long an open tries again while the file is in use (see [`open_contended`]).
const CONTENDED_FOR: Duration = Duration::from_millis(300);

/// How many times at least an open tries again while the file is in use.
const MIN_TRIES: u32 = 5;

/// How many prepared statements a connection keeps: more than the store has.
const STATEMENT_CACHE: usize = 64;

/// The most the connection's page cache holds, in KiB (`PRAGMA cache_size` of −this); SQLite
/// grows it as pages are read, up to this. A runner over many live jobs (caps raised) touches
/// each job's rows once a round, and SQLite's default of 2 MiB holds fewer pages than 10 000
/// live jobs of 8 targets have: 64 MiB made the bench's SQLite rows at 10 000 live jobs 7–13 %
/// faster, raw loop and runner alike (bench/RESULTS.md, *2026-12-06, late*).
const CACHE_KIB: u32 = 64 * 1024;

/// A file's claim in this process ([`rota_core::claims`], shared with the other file
/// stores), by its canonical path and (on Unix, once it exists) by its device and inode, which
/// every hard link to it shares; let go of on drop.
#[derive(Debug)]
pub(crate) struct Claim(FileClaim);

impl Claim {
    /// Claims `path` for this process, or fails with [`StoreError::InUse`].
    fn take(path: &Path) -> Result<Claim, StoreError> {
        let keys: Vec<FileKey> = std::iter::once(FileKey::Path(canonical(path)))
            .chain(identity(path))
            .collect();
        FileClaim::take(keys).map(Claim).ok_or_else(|| {
            StoreError::InUse(format!(
                "{}: already open by another store in this process (a store has one owner at a \
             time); drop it first",
                path.display()
            ))
        })
    }

    /// Adds the identity of the file at `path` to the claim, once it exists (an open that
    /// created it claimed its path only). Another claim holds it only if a hard link to this
    /// new file was made and opened in this process while this open ran (one of the two then
    /// owns the file's lock); this claim then leaves the identity to that one.
    fn identify(&mut self, path: &Path) {
        if let Some(id) = identity(path) {
            self.0.add(id);
        }
    }
}

/// The device and inode of the file at `path` (symlinks followed), if it exists. `stat` opens
/// no descriptor, so it never drops a lock.
#[cfg(unix)]
fn identity(path: &Path) -> Option<FileKey> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| FileKey::Inode {
        dev: m.dev(),
        ino: m.ino(),
    })
}

/// Files have no identity here beyond their path.
#[cfg(not(unix))]
fn identity(_path: &Path) -> Option<FileKey> {
    None
}

/// `path` with symlinks resolved, so two spellings of one file are one claim. A file that does
/// not exist yet is named by its canonical directory.
fn canonical(path: &Path) -> PathBuf {
    if let Ok(p) = path.canonicalize() {
        return p;
    }
    match (path.parent(), path.file_name()) {
        (Some(dir), Some(name)) => {
            let dir = if dir.as_os_str().is_empty() {
                Path::new(".")
            } else {
                dir
            };
            dir.canonicalize()
                .map(|d| d.join(name))
                .unwrap_or_else(|_| path.to_path_buf())
        }
        _ => path.to_path_buf(),
    }
}

/// The SQLite header magic.
const MAGIC: &[u8; 16] = b"SQLite format 3\0";

/// The refusal of `path`, whose metadata `m` is not a regular file's, in the redb store's words.
fn not_a_file(path: &Path, m: &std::fs::Metadata) -> StoreError {
    let what = if m.is_dir() {
        "is a directory"
    } else {
        "not a regular file"
    };
    StoreError::Corrupt(format!("{}: {what}, not a rota store", path.display()))
}

/// Reads `path`'s header without SQLite and refuses what is not a rota store of this version.
/// `Ok` for a missing or empty file (new) and for a plausible rota store. Writes nothing.
pub(crate) fn inspect(path: &Path) -> Result<(), StoreError> {
    let shown = path.display();
    // A name that ends with a slash (or with `.` or `..`) names a directory: SQLite would make
    // the file `x` of `x/` (and of `x/.`), which every later open of `x/` would then fail to
    // find.
    if names_a_directory(path) {
        return Err(StoreError::Corrupt(format!(
            "{shown}: names a directory, not a rota store file"
        )));
    }
    // Looked at before it is opened: opening a FIFO for reading waits for a writer.
    match std::fs::metadata(path) {
        Ok(m) if !m.is_file() => return Err(not_a_file(path, &m)),
        _ => {}
    }
    let mut file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(StoreError::backend(format!("opening {shown}"), e)),
    };
    let meta = file
        .metadata()
        .map_err(|e| StoreError::backend(format!("reading {shown}"), e))?;
    if !meta.is_file() {
        return Err(not_a_file(path, &meta));
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let names = meta.nlink();
        if names > 1 {
            return Err(StoreError::backend(
                format!("opening {shown}"),
                io::Error::other(format!(
                    "the file has {names} names (hard links): SQLite keeps a store's \
                     write-ahead log beside the name it is opened by, so after a crash an open \
                     by another name would miss the writes in that log, and a later open by \
                     the first would lay that old log over newer pages; give the store one name"
                )),
            ));
        }
    }
    let len = meta.len();
    if len == 0 {
        return Ok(());
    }
    let mut head = [0u8; 100];
    match file.read_exact(&mut head) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
            return Err(StoreError::Corrupt(format!(
                "{shown}: {len} bytes, too short for a SQLite database: not a rota store"
            )));
        }
        Err(e) => return Err(StoreError::backend(format!("reading {shown}"), e)),
    }
    if !head.starts_with(MAGIC) {
        return Err(StoreError::Corrupt(format!(
            "{shown}: not a SQLite database (no SQLite header): not a rota store"
        )));
    }
    let shown = shown.to_string();
    schema::marks(be32(&head, 68), be32(&head, 60), &shown)?;
    let page_size = match be16(&head, 16) {
        1 => 65_536,
        n if n >= 512 && n.is_power_of_two() => u64::from(n),
        n => {
            return Err(StoreError::Corrupt(format!(
                "{shown}: invalid page size {n} in the SQLite header"
            )));
        }
    };
    if len % page_size != 0 {
        return Err(StoreError::Corrupt(format!(
            "{shown}: truncated: {len} bytes is not a whole number of {page_size}-byte pages"
        )));
    }
    // The header's page count is valid when its change counter matches (file format §1.3.7).
    // Every SQLite since 3.7.0 writes the two together, so a rota store's always match; SQLite
    // would rewrite a stale one as soon as a write transaction begins, changing the file.
    let (changes, valid_for) = (be32(&head, 24), be32(&head, 92));
    if changes != valid_for {
        return Err(StoreError::Corrupt(format!(
            "{shown}: the SQLite header's page count is stale (change counter {changes}, \
             valid for {valid_for}): not a file rota wrote, not a rota store"
        )));
    }
    // With a WAL beside the file, pages may legitimately live only in the WAL (and a checkpoint
    // cut short by a crash may have written the header before the pages), so the size is
    // checked only when there is none: then the file alone is the database. Nor while the
    // store's first commit, which creates the schema, may have been cut short: its header still
    // says rollback-journal mode (bytes 18 and 19 are 1; a store is switched to WAL, 2, right
    // after), and SQLite's rollback journal is beside it. A crash in that commit leaves the
    // header written (page 1 goes first) and the pages after it not all; SQLite rolls the file
    // back to what the journal holds (no pages: a new store). A store in WAL mode with a
    // journal beside it is checked as any other.
    let pages = u64::from(be32(&head, 28));
    let real = beside(path);
    let first_commit_cut_short =
        head.get(18..20) == Some(&[1, 1][..]) && sidecar(&real, "-journal").exists();
    if !sidecar(&real, "-wal").exists() && !first_commit_cut_short {
        let want = pages.saturating_mul(page_size);
        if len < want {
            return Err(StoreError::Corrupt(format!(
                "{shown}: truncated: the header says {pages} pages ({want} bytes), \
                 the file holds {len} bytes"
            )));
        }
    }
    Ok(())
}

fn be32(head: &[u8; 100], at: usize) -> u32 {
    head.get(at..at + 4)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u32::from_be_bytes)
}

fn be16(head: &[u8; 100], at: usize) -> u16 {
    head.get(at..at + 2)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u16::from_be_bytes)
}

/// Where SQLite keeps the journal and write-ahead log of the database at `path`: beside the
/// file, and through a symbolic link, beside the file it leads to (SQLite resolves links), not
/// beside the link. `path` itself if it cannot be resolved (a file not made yet).
fn beside(path: &Path) -> PathBuf {
    path.canonicalize().unwrap_or_else(|_| path.to_path_buf())
}

/// `path` with `suffix` appended to its file name (`-wal`, `-journal`). Give it the resolved
/// path ([`beside`]).
fn sidecar(path: &Path, suffix: &str) -> PathBuf {
    let mut s = OsString::from(path.as_os_str());
    s.push(suffix);
    PathBuf::from(s)
}

/// A file opened by [`open_file`]: its connection, its claim and its tally (bytes and live
/// counts), read while it was checked.
pub(crate) struct Opened {
    pub(crate) conn: Connection,
    pub(crate) claim: Claim,
    pub(crate) tally: Tally,
}

/// Opens (or creates) the rota store at `path` and makes this connection its one owner.
///
/// Nothing is written before the file is known to be a rota store that can be read: the marks,
/// the tables and the byte sum (which reads every job) are checked in a read transaction first.
/// Only then does `BEGIN IMMEDIATE` take the write lock, which is the first thing that may
/// write (SQLite rewrites a header whose page count it finds stale as soon as a write
/// transaction begins).
pub(crate) fn open_file(path: &Path, opts: SqliteOptions) -> Result<Opened, StoreError> {
    let mut claim = Claim::take(path)?;
    inspect(path)?;
    let shown = path.display().to_string();
    match open_contended(path, &shown, opts) {
        Ok((conn, tally)) => {
            claim.identify(path);
            Ok(Opened { conn, claim, tally })
        }
        // Looked at while the claim is held: the look's descriptor is the only one of this
        // process on the file then, so closing it drops no lock of another open.
        Err(StoreError::Backend { context, source }) => Err(StoreError::Backend {
            context,
            source: match not_writable(path) {
                Some(why) => source.explained(why),
                None => source,
            },
        }),
        Err(e) => Err(e),
    }
}

/// Why the store at `path` may not be written, if it may not: SQLite says only "disk I/O
/// error", "unable to open database file" or "attempt to write a readonly database" when the
/// file, its write-ahead log, or the directory that log is to be made in is read-only to this
/// process (permissions, an immutable file, a read-only file system), or when a new file's
/// directory does not exist. It looks where SQLite writes: through a symbolic link, at the file
/// it leads to. The look changes nothing that stays: files are opened for writing without being
/// created or truncated, and the directory is tried with a new empty file of a name of its
/// own, removed at once.
fn not_writable(path: &Path) -> Option<String> {
    fn denied(e: &io::Error) -> bool {
        matches!(
            e.kind(),
            io::ErrorKind::PermissionDenied | io::ErrorKind::ReadOnlyFilesystem
        )
    }
    fn refused(file: &Path) -> Option<io::Error> {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(file)
            .err()
            .filter(denied)
    }
    const NOTE: &str = "a rota store is written even to read a job from it";
    let real = std::fs::canonicalize(path).ok();
    let file = real.as_deref().unwrap_or(path);
    if let Some(e) = refused(file) {
        let shown = if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink()) {
            format!("{} (a link to {})", path.display(), file.display())
        } else {
            path.display().to_string()
        };
        return Some(format!("{shown} is not writable ({e}); {NOTE}"));
    }
    let wal = sidecar(file, "-wal");
    if wal.exists() {
        return refused(&wal).map(|e| {
            format!(
                "its write-ahead log {} is not writable ({e}); {NOTE}",
                wal.display()
            )
        });
    }
    let dir = match file.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    match probe_dir(dir) {
        // (SQLite's own words, "unable to open database file: PATH", name the file.)
        Err(e) if e.kind() == io::ErrorKind::NotFound && !file.exists() => Some(format!(
            "it does not exist, and neither does its directory {}",
            dir.display()
        )),
        Err(e) if denied(&e) && !file.exists() => Some(format!(
            "it does not exist, and its directory {} is not writable ({e}), so it cannot be \
             made there",
            dir.display()
        )),
        Err(e) if denied(&e) => Some(format!(
            "its directory {} is not writable ({e}), and SQLite makes its write-ahead log \
             there; {NOTE}",
            dir.display()
        )),
        _ => None,
    }
}

/// Whether a file can be made in `dir`: makes an empty one of a name no other has (this
/// process's id and the time), and removes it at once.
fn probe_dir(dir: &Path) -> io::Result<()> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let probe = dir.join(format!(".rota-write-probe-{}-{nanos}", std::process::id()));
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)?;
    std::fs::remove_file(&probe)
}

/// [`open_claimed`], tried again for up to [`CONTENDED_FOR`] (and [`MIN_TRIES`] times at
/// least) while the file is in use.
///
/// Two opens of one file at the same moment (two processes starting on one store) may each
/// take the shared lock of its first read and then wait for the other's to upgrade it: with a
/// zero busy timeout both give up, and in the exclusive locking mode a connection keeps its
/// shared lock until it is closed, so neither would ever give way. Each attempt that finds the
/// file in use closes its connection, which drops its locks, and the next comes after a pause
/// of random length, so that one of the two finds the file free and owns it; the other then
/// finds it owned. An open of a store another process holds therefore fails after that while,
/// not at once.
fn open_contended(
    path: &Path,
    shown: &str,
    opts: SqliteOptions,
) -> Result<(Connection, Tally), StoreError> {
    let began = Instant::now();
    let mut attempt = 0u32;
    loop {
        match open_claimed(path, shown, opts) {
            // Some tries however long the first took (a thread held off the CPU meanwhile).
            Err(StoreError::InUse(_)) if attempt < MIN_TRIES || began.elapsed() < CONTENDED_FOR => {
                attempt = attempt.wrapping_add(1);
                std::thread::sleep(pause(attempt));
            }
            done => return done,
        }
    }
}

/// A pause of 1 to 10 ms, of a length another process (or thread) pausing at the same moment
/// is unlikely to share: std's hasher keys are random per thread.
fn pause(attempt: u32) -> Duration {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(attempt);
    Duration::from_micros(1_000 + h.finish() % 9_001)
}

/// `path` as SQLite is to be given it so that it names that file: the bundled SQLite is built
/// with `SQLITE_USE_URI`, so a name that begins with `file:` would be read as a URI whatever the
/// open's flags, its query able to pick another file, the memory, or a VFS without locks
/// (`file:x.db?vfs=unix-none`: two owners of one file, and jobs lost). Such a relative path is
/// given as `./file:…`, the same file, which SQLite takes as a name. (An absolute path begins
/// with `/`.)
fn literal(path: &Path) -> std::borrow::Cow<'_, Path> {
    let bytes = path.as_os_str().as_encoded_bytes();
    if bytes.len() >= 5 && bytes[..5].eq_ignore_ascii_case(b"file:") {
        std::borrow::Cow::Owned(Path::new(".").join(path))
    } else {
        std::borrow::Cow::Borrowed(path)
    }
}

/// [`open_file`]'s SQLite part, under the claim: the connection and the tally.
fn open_claimed(
    path: &Path,
    shown: &str,
    opts: SqliteOptions,
) -> Result<(Connection, Tally), StoreError> {
    // A `-wal` that was there before this open holds another run's commits (a crash). While the
    // file is not yet known good, closing must not checkpoint those into it.
    let had_wal = sidecar(&beside(path), "-wal").exists();
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_CREATE
        | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let mut conn = Connection::open_with_flags(literal(path), flags)
        .map_err(|e| crate::error::sql(&format!("opening {shown}"), e))?;
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, had_wal)
        .map_err(ctx("holding the checkpoint on close"))?;
    conn.busy_timeout(Duration::ZERO)
        .map_err(ctx("setting the busy timeout"))?;
    let mode: String = conn
        .query_row("PRAGMA locking_mode = EXCLUSIVE", [], |r| r.get(0))
        .map_err(ctx("setting the locking mode"))?;
    if !mode.eq_ignore_ascii_case("exclusive") {
        return Err(StoreError::backend(
            "setting the locking mode",
            io::Error::other(format!("SQLite kept locking mode {mode:?}")),
        ));
    }
    let (found, tally) = {
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Deferred)
            .map_err(|e| locked(shown, e))?;
        // The first read takes the lock (on a WAL file, the exclusive one at once).
        tx.query_row("PRAGMA schema_version", [], |r| r.get::<_, i64>(0))
            .map_err(|e| locked(shown, e))?;
        let found = schema::check(&tx, shown)?;
        let tally = match found {
            Found::New => Tally::default(),
            Found::Rota => Tally::read(&tx)?,
        };
        tx.commit().map_err(|e| locked(shown, e))?;
        (found, tally)
    };
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, false)
        .map_err(ctx("restoring the checkpoint on close"))?;
    {
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| locked(shown, e))?;
        // Again under the write lock, race-free: another process may have created the file.
        match (found, schema::check(&tx, shown)?) {
            (_, Found::New) => schema::create(&tx)?,
            (Found::Rota, Found::Rota) => {}
            (Found::New, Found::Rota) => {
                return Err(StoreError::InUse(format!(
                    "{shown}: created by another process while this one opened it"
                )));
            }
        }
        tx.commit().map_err(|e| locked(shown, e))?;
    }
    let journal: String = conn
        .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
        .map_err(ctx("switching to WAL"))?;
    if !journal.eq_ignore_ascii_case("wal") {
        return Err(StoreError::backend(
            "switching to WAL",
            io::Error::other(format!("SQLite kept journal mode {journal:?}")),
        ));
    }
    tune(&conn, opts.synchronous)?;
    Ok((conn, tally))
}

/// The error of taking the file's lock: busy means another owner.
fn locked(shown: &str, e: rusqlite::Error) -> StoreError {
    match e.sqlite_error_code() {
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked) => {
            StoreError::InUse(format!(
                "{shown}: locked by another process (another SqliteStore, or any SQLite \
                 client); only one may own a rota store at a time"
            ))
        }
        _ => crate::error::sql(&format!("opening {shown}"), e),
    }
}

/// Opens a private in-memory store with the schema.
pub(crate) fn open_memory() -> Result<Connection, StoreError> {
    let mut conn = Connection::open_in_memory().map_err(ctx("opening an in-memory database"))?;
    {
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(ctx("creating the schema"))?;
        schema::create(&tx)?;
        tx.commit().map_err(ctx("creating the schema"))?;
    }
    tune(&conn, Synchronous::Normal)?;
    Ok(conn)
}

/// The settings of every connection after the schema is in place.
fn tune(conn: &Connection, sync: Synchronous) -> Result<(), StoreError> {
    let level = match sync {
        Synchronous::Normal => "NORMAL",
        Synchronous::Full => "FULL",
    };
    conn.execute_batch(&format!("PRAGMA synchronous = {level};"))
        .map_err(ctx("setting synchronous"))?;
    conn.execute_batch(&format!("PRAGMA cache_size = -{CACHE_KIB};"))
        .map_err(ctx("sizing the page cache"))?;
    // The sub-journal of the group commit's savepoints (made when a batch runs again after a
    // failed write: the first image of each page a write in a savepoint changes again) stays
    // in memory: by default SQLite spills one over 64 KiB
    // to a file in the temp directory, which an exclusive-mode connection then keeps, writing
    // every later savepoint's pages there (a syscall each: 2.8 % of the samples of rota-bench's
    // SQLite runner at 10 000 live jobs, 0.5 % in memory); and a batch would fail where that
    // directory is full or not writable. A savepoint holds one write's pages, and the store
    // makes no temporary tables.
    conn.execute_batch("PRAGMA temp_store = MEMORY;")
        .map_err(ctx("keeping temporary data in memory"))?;
    conn.busy_timeout(BUSY_TIMEOUT)
        .map_err(ctx("setting the busy timeout"))?;
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Barrier};

    use super::*;

    /// A relative path that begins with `file:` (in any case) is given to SQLite as `./file:…`,
    /// which it takes as a name, not a URI; every other path as it is.
    #[test]
    fn a_path_that_looks_like_a_uri_is_given_as_a_name() {
        for (given, opened) in [
            ("file:x.db", "./file:x.db"),
            ("FILE:x.db?vfs=unix-none", "./FILE:x.db?vfs=unix-none"),
            ("file:", "./file:"),
            ("files.db", "files.db"),
            ("x/file:x.db", "x/file:x.db"),
            ("/tmp/file:x.db", "/tmp/file:x.db"),
            ("./file:x.db", "./file:x.db"),
            ("file", "file"),
        ] {
            assert_eq!(literal(Path::new(given)), Path::new(opened), "{given}");
        }
    }

    /// A file not made yet is claimed by its canonical directory and its name, so that two
    /// spellings of it (here: through a link to its directory) are one claim while an open
    /// makes it: the second is refused before it touches the file, whose descriptor, closed,
    /// would drop the first open's locks. (Once made, the file is claimed by its canonical path
    /// and its inode too.)
    #[test]
    fn a_file_not_made_yet_is_claimed_by_its_canonical_directory() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real");
        std::fs::create_dir(&real).unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let held = Claim::take(&real.join("new.db")).unwrap();
        let err = Claim::take(&link.join("new.db")).unwrap_err();
        assert!(
            matches!(&err, StoreError::InUse(m) if m.contains("already open")),
            "{err:?}"
        );
        assert!(!real.join("new.db").exists());
        drop(held);
        drop(Claim::take(&link.join("new.db")).unwrap());
    }

    /// Two opens of one file at the same moment (as two processes would make them: no claim
    /// between them, SQLite's locks only): one of them, at least, opens it. Without the
    /// attempts again, both were refused as in use in some rounds: each took the shared lock
    /// of its first read and waited for the other's to upgrade it, and neither gave way. (That
    /// two opens never both own the file is `a_file_locked_by_another_process_is_in_use`.)
    #[test]
    fn of_two_opens_at_once_one_at_least_opens_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let mut both_refused = 0;
        for round in 0..200 {
            let path = dir.path().join(format!("r{}.db", round / 2));
            // Even rounds race on a new file, odd ones on the store the round before made.
            let barrier = Arc::new(Barrier::new(2));
            let opens: Vec<_> = (0..2)
                .map(|_| {
                    let (path, barrier) = (path.clone(), barrier.clone());
                    std::thread::spawn(move || {
                        barrier.wait();
                        open_contended(&path, "r.db", SqliteOptions::default()).map(drop)
                    })
                })
                .collect();
            let rs: Vec<_> = opens.into_iter().map(|t| t.join().unwrap()).collect();
            for r in &rs {
                if let Err(e) = r {
                    assert!(matches!(e, StoreError::InUse(_)), "round {round}: {e}");
                }
            }
            if rs.iter().all(Result::is_err) {
                both_refused += 1;
            }
        }
        assert_eq!(both_refused, 0, "of 200 rounds");
    }
}
