//! [`SqliteStore`]: the [`BatchStore`] over one SQLite connection behind a mutex.

use std::fmt;
use std::path::Path;
use std::sync::{Mutex, MutexGuard, PoisonError};

use async_trait::async_trait;
use rota_core::{
    Admission, BatchStore, Caps, JobRow, JobStatus, NewJob, StoreError, TargetRow, TargetWrite,
};
use rusqlite::Connection;

use crate::open::{self, Claim};
use crate::ops::{self, Tally};

/// How hard a commit pushes to the disk (`PRAGMA synchronous`), in WAL mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Synchronous {
    /// `NORMAL`, the default: a commit is written to the WAL but not synced; the WAL is synced
    /// at each checkpoint. A write the store acknowledged survives a crash of the process
    /// (`kill -9`, a panic, an OOM kill), since the OS holds it; a power loss or OS crash may
    /// lose the last transactions (never corrupting the file). The fast choice.
    #[default]
    Normal,
    /// `FULL`: every commit syncs the WAL before it returns, so an acknowledged write also
    /// survives a power loss or OS crash. Each commit then waits for the disk: slower, by as
    /// much as the disk's sync latency per transaction.
    Full,
}

/// How [`SqliteStore::open_with`] opens a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SqliteOptions {
    /// The durability of a commit; see [`Synchronous`].
    pub synchronous: Synchronous,
}

/// A [`BatchStore`] in one SQLite file (or in memory), owned by one process.
///
/// - **Durable and crash-safe.** WAL journal; each operation is one transaction (admit and every
///   write one `BEGIN IMMEDIATE`), so after `kill -9` at any moment the file opens, every write
///   the store acknowledged is there and none is half done. See [`Synchronous`] for power loss.
/// - **One owner.** While a store is open, opening its file again, from this process or any
///   other, fails with [`StoreError::InUse`]; it succeeds once the store is dropped (or its
///   process has died).
/// - **Refuses what it does not own.** A file that is not a rota store (a text file, another
///   program's database, a SQLite database with no rota schema, a truncated store) fails with
///   [`StoreError::Corrupt`], one of another schema version with [`StoreError::Version`], and
///   the file is left byte for byte as it was. A missing or 0-byte file is a new store.
///
/// **Threads.** `rusqlite::Connection` is `Send` but not `Sync`, so it lives in a
/// [`std::sync::Mutex`]. Each async method takes the lock, runs its few statements inline and
/// releases it; the lock is never held across an await. Handing each call to
/// `spawn_blocking` was measured as too slow for statements that take microseconds (a thread
/// hop costs more than the work), so a call blocks its task's thread for that short time
/// instead; with [`Synchronous::Full`] that time includes the disk sync.
pub struct SqliteStore {
    // Field order is drop order: the connection closes (releasing the file's lock) before the
    // claim lets another open in this process try.
    db: Mutex<Db>,
    _claim: Option<Claim>,
}

/// What the mutex guards: the connection, and its tally, the total of every job's `n_bytes`
/// and the live jobs' counts (see `ops::Tally`: read at open, then kept by each commit that
/// changes it).
struct Db {
    conn: Connection,
    tally: Tally,
}

impl Db {
    fn new(conn: Connection) -> Result<Db, StoreError> {
        let tally = Tally::read(&conn)?;
        Ok(Db { conn, tally })
    }
}

impl SqliteStore {
    /// Opens the store at `path`, creating it if the file is missing or empty, with the default
    /// [`SqliteOptions`] (WAL, `synchronous = NORMAL`).
    pub fn open(path: impl AsRef<Path>) -> Result<SqliteStore, StoreError> {
        Self::open_with(path, SqliteOptions::default())
    }

    /// Opens the store at `path` with `options`; see [`open`](Self::open).
    pub fn open_with(
        path: impl AsRef<Path>,
        options: SqliteOptions,
    ) -> Result<SqliteStore, StoreError> {
        let opened = open::open_file(path.as_ref(), options)?;
        Ok(SqliteStore {
            db: Mutex::new(Db {
                conn: opened.conn,
                tally: opened.tally,
            }),
            _claim: Some(opened.claim),
        })
    }

    /// A new, empty store in memory: private to this handle, gone when it is dropped.
    pub fn open_in_memory() -> Result<SqliteStore, StoreError> {
        Ok(SqliteStore {
            db: Mutex::new(Db::new(open::open_memory()?)?),
            _claim: None,
        })
    }

    /// Runs SQLite's `PRAGMA integrity_check` over the whole file: `Ok` if it finds nothing,
    /// else [`StoreError::Corrupt`] with its findings. Reads every page: not for a hot path.
    pub fn integrity_check(&self) -> Result<(), StoreError> {
        ops::integrity_check(&self.db().conn)
    }

    /// The connection. A panic under the lock can only come from inside rusqlite, and a
    /// transaction it interrupted is rolled back when its guard drops, so a poisoned lock still
    /// guards a consistent database and is taken over.
    fn db(&self) -> MutexGuard<'_, Db> {
        self.db.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Shows no rows (they hold URLs) and no path.
impl fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteStore")
            .field("in_memory", &self._claim.is_none())
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl BatchStore for SqliteStore {
    async fn admit(&self, job: &NewJob, caps: &Caps) -> Result<Admission, StoreError> {
        let db = &mut *self.db();
        ops::admit(&mut db.conn, &mut db.tally, job, caps)
    }

    async fn job(&self, id: &str) -> Result<Option<JobRow>, StoreError> {
        ops::job(&self.db().conn, id)
    }

    async fn targets(&self, id: &str) -> Result<Vec<TargetRow>, StoreError> {
        ops::targets(&self.db().conn, id)
    }

    async fn start_target(
        &self,
        id: &str,
        idx: usize,
        now: i64,
    ) -> Result<Option<TargetRow>, StoreError> {
        let db = &mut *self.db();
        ops::start_target(&mut db.conn, &mut db.tally, id, idx, now)
    }

    async fn finish_target(
        &self,
        id: &str,
        idx: usize,
        write: &TargetWrite,
        now: i64,
        finish: Option<JobStatus>,
    ) -> Result<bool, StoreError> {
        let db = &mut *self.db();
        ops::finish_target(&mut db.conn, &mut db.tally, id, idx, write, now, finish)
    }

    async fn set_status(
        &self,
        id: &str,
        status: JobStatus,
        error: &str,
        now: i64,
    ) -> Result<bool, StoreError> {
        let db = &mut *self.db();
        ops::set_status(&mut db.conn, &mut db.tally, id, status, error, now)
    }

    async fn touch(&self, id: &str, now: i64) -> Result<bool, StoreError> {
        ops::touch(&self.db().conn, id, now)
    }

    async fn sweep(&self, now: i64, ttl_secs: i64) -> Result<usize, StoreError> {
        let db = &mut *self.db();
        ops::sweep(&mut db.conn, &mut db.tally, now, ttl_secs)
    }

    async fn evict(&self, max_bytes: u64) -> Result<usize, StoreError> {
        let db = &mut *self.db();
        ops::evict(&mut db.conn, &mut db.tally, max_bytes)
    }

    async fn recover(&self, error: &str, now: i64) -> Result<usize, StoreError> {
        let db = &mut *self.db();
        ops::recover(&mut db.conn, &mut db.tally, error, now)
    }

    async fn live_jobs(&self, caller: Option<&str>) -> Result<usize, StoreError> {
        Ok(self.db().tally.live_of(caller))
    }

    async fn total_bytes(&self) -> Result<u64, StoreError> {
        Ok(self.db().tally.bytes)
    }
}
