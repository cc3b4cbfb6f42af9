//! [`SqliteStore`]: the [`BatchStore`] over one SQLite connection behind a mutex.

use std::fmt;
use std::ops::{Deref, DerefMut};
use std::path::Path;
use std::sync::{Mutex, MutexGuard, PoisonError, TryLockError};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use rota_core::{
    Admission, BatchStore, Caps, JobRow, JobStatus, NewJob, StoreError, TargetRow, TargetWrite,
};
use rusqlite::Connection;

use crate::batch::{self, Db, Op, Published, Queue, Slot};
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
/// - **Durable and crash-safe.** WAL journal; a write is acknowledged only once the transaction
///   that holds it has committed, and each write is all or nothing (admit stores the job with
///   every target), so after `kill -9` at any moment the file opens, every write the store
///   acknowledged is there and none is half done. See [`Synchronous`] for power loss.
/// - **Group commit.** Writes made at the same time from several threads (two workers, a
///   submit beside them) share one transaction and one commit: the thread that has the
///   connection runs the others' queued writes too; one that fails is rolled back alone (if
///   it fails after others of its transaction, that transaction's writes run again with a
///   savepoint for each). One thread writing alone makes one commit per write, as before.
/// - **Housekeeping without the connection when there is nothing to do.** The byte total and a
///   bound on the oldest terminal lease are kept in memory (the file has one owner): evict
///   under the budget and a sweep with nothing due (after every stored target, after every
///   admit) answer without waiting for a writing thread.
/// - **One owner.** While a store is open, opening its file again, from this process or any
///   other, fails with [`StoreError::InUse`] (from this process at once; from another after
///   trying again for 300 ms, so that of two processes opening one file at the same moment
///   one owns it rather than each holding the other off; the open blocks its thread
///   meanwhile, as it does for its reads of the file); it succeeds once the store is dropped
///   (or its process has died).
/// - **Refuses what it does not own.** A file that is not a rota store (a text file, another
///   program's database, a SQLite database with no rota schema, a truncated store; a
///   directory, FIFO or device, refused before it is opened; a path that names a directory,
///   `x/` or one ending in `.` or `..`, even where nothing is yet) fails with
///   [`StoreError::Corrupt`], one of another schema version with [`StoreError::Version`], and
///   the file is left byte for byte as it was. A missing or 0-byte file is a new store, and so
///   is a new store whose first commit a crash cut short (a file shorter than its header says,
///   still in rollback-journal mode, SQLite's journal beside it: SQLite rolls it back).
/// - **One name.** A store file with more than one name (hard links: `cp -al`, `rsync
///   --link-dest` snapshots make them) fails with [`StoreError::Backend`] saying so, unchanged:
///   SQLite keeps the write-ahead log beside the name it opened, so after a crash an open by
///   another name would miss that log's writes, and a later open by the first name would lay
///   the old log over newer pages. Move a store with its `-wal` file, if one is beside it.
/// - **Other stores of this process.** The file is claimed in [`rota_core::claims`] before it
///   is read, so a store of another kind in this process (a redb open of this file) is refused
///   with [`StoreError::InUse`] before it opens a descriptor of the file, whose closing would
///   drop this store's lock.
/// - **A value of 1 GB or more is refused.** SQLite stores no string of 1 000 000 000 bytes or
///   more (its compile-time `SQLITE_MAX_LENGTH`, which a connection can lower but not raise):
///   an admit with such a url or options, or a `finish_target` with such a result, fails
///   ("string or blob too big") and changes nothing, the finish status it carried included
///   (the runner then ends that job `failed`). The memory and redb stores take such a value.
///
/// **Threads.** `rusqlite::Connection` is `Send` but not `Sync`, so it lives in a
/// [`std::sync::Mutex`]. Each async method takes the lock (or, for a write, finds that another
/// thread's batch did it), runs its few statements inline and releases it; the lock is never
/// held across an await. Handing each call to
/// `spawn_blocking` was measured as too slow for statements that take microseconds (a thread
/// hop costs more than the work), so a call blocks its task's thread for that short time
/// instead; with [`Synchronous::Full`] that time includes the disk sync. A read that finds the
/// connection busy spins for up to 400 µs (a few transactions) before it sleeps on the lock; a
/// write that finds a batch running spins as long, then sleeps until a batch has done it (it
/// then returns without the connection) or no thread leads (it then leads).
pub struct SqliteStore {
    // Field order is drop order: the connection closes (releasing the file's lock) before the
    // claim lets another open in this process try.
    db: Mutex<Db>,
    /// The tally's byte total and lease floor as of the last batch or release of `db`, so that
    /// evict under the budget (after every stored target) and sweep with nothing due (after
    /// every admit) need not wait for the connection: see [`DbGuard`] and `batch` (a batch
    /// publishes them before it answers its writes).
    pub(crate) published: Published,
    /// The writes waiting for a batch: see `batch`.
    pub(crate) queue: Queue,
    _claim: Option<Claim>,
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
        Ok(SqliteStore::new(
            Db::new(opened.conn, opened.tally),
            Some(opened.claim),
        ))
    }

    /// A new, empty store in memory: private to this handle, gone when it is dropped.
    pub fn open_in_memory() -> Result<SqliteStore, StoreError> {
        let conn = open::open_memory()?;
        let tally = Tally::read(&conn)?;
        Ok(SqliteStore::new(Db::new(conn, tally), None))
    }

    fn new(db: Db, claim: Option<Claim>) -> SqliteStore {
        SqliteStore {
            published: Published::new(&db),
            db: Mutex::new(db),
            queue: Queue::default(),
            _claim: claim,
        }
    }

    /// Runs SQLite's `PRAGMA integrity_check` over the whole file: `Ok` if it finds nothing,
    /// else [`StoreError::Corrupt`] with its findings. Reads every page: not for a hot path.
    pub fn integrity_check(&self) -> Result<(), StoreError> {
        ops::integrity_check(&self.db().conn)
    }

    /// The connection. A panic under the lock can only come from inside rusqlite, and a
    /// transaction it interrupted is rolled back when its guard drops, so a poisoned lock still
    /// guards a consistent database and is taken over. A transaction an earlier failure left
    /// open is rolled back first (see [`Db::end_stray_transaction`]).
    pub(crate) fn db(&self) -> DbGuard<'_> {
        let mut db = lock_adaptive(&self.db);
        db.end_stray_transaction();
        DbGuard {
            db,
            published: &self.published,
        }
    }

    /// Runs the write `f` in a group commit (see `batch`): queues it, then waits until either
    /// another thread's batch has done it, or no thread leads and this one leads batches (its
    /// own write in the first, unless more than a batch was queued before it).
    pub(crate) fn write<R, F>(&self, f: F) -> Result<R, StoreError>
    where
        F: Fn(&Connection, &mut Tally) -> Result<R, StoreError> + Send + 'static,
        R: Send + 'static,
    {
        let slot = Slot::new();
        if let Some(_leading) = self.queue.wait(Op::boxed(f, &slot), &slot, SPIN_FOR)
            && !slot.is_done()
        {
            // (A write may be done by the time its thread leads: a leader answered it and
            // stepped down between this thread's two looks.)
            let mut db = self.db();
            // Each batch takes at least one write, and this one stays queued until a batch
            // of this thread takes it: this ends. The connection is let go (publishing the
            // total) before the lead is.
            while !slot.is_done() && self.queue.lead(&mut db, &self.published) {}
        }
        slot.take().unwrap_or_else(|| Err(batch::lost()))
    }
}

/// The connection, locked; on release it publishes the tally's byte total and lease floor
/// (still under the lock, so what is published is in the order of the writes). A caller's own
/// write is therefore in what its next [`evict`](BatchStore::evict) or
/// [`sweep`](BatchStore::sweep) reads without the lock; a write another thread is making at
/// that moment is seen by that thread's own calls.
pub(crate) struct DbGuard<'a> {
    db: MutexGuard<'a, Db>,
    published: &'a Published,
}

impl Deref for DbGuard<'_> {
    type Target = Db;
    fn deref(&self) -> &Db {
        &self.db
    }
}

impl DerefMut for DbGuard<'_> {
    fn deref_mut(&mut self) -> &mut Db {
        &mut self.db
    }
}

impl Drop for DbGuard<'_> {
    fn drop(&mut self) {
        self.published.publish(&self.db);
    }
}

/// How long a call waits by spinning before it sleeps: a write for its batch or the lead (see
/// [`Queue::wait`](crate::batch::Queue::wait)), a read for the connection's lock.
///
/// A write that comes while a batch runs waits for that batch and for the next one, which
/// takes it. Counted in the group commit during rota-bench's SQLite runner row at 10 000 live
/// jobs with 1 worker, while the bench submits beside the worker: batches of ~90 µs on average
/// (an admit and a target's write, mostly). With a spin of 100 µs (the first value), 2 800–4 600
/// writes a turn went to sleep (0.9–2.7 s asleep in all), and a sleeping thread pays a wake-up
/// on top (about 50 µs on this project's machine, a KVM guest); with 400 µs, 150–330, most of
/// them waits for a checkpoint, which takes milliseconds. In A/B runs of the
/// two builds the runner of 1 worker kept 0.88–1.02 of the raw loop's speed at 100 and 10 000
/// live jobs with 400 µs, against 0.83–0.92 with 100 µs; rows of 2 workers and of 10 live jobs
/// moved within their spread (2 workers and the submitting task: three writing threads on
/// two cores, where a spinning thread takes time another could use). A longer hold (a
/// checkpoint, a `Synchronous::Full` sync) costs a waiter at most this spin before it sleeps.
pub(crate) const SPIN_FOR: Duration = Duration::from_micros(400);

/// Locks `m`, spinning for up to [`SPIN_FOR`] before sleeping on it (an adaptive lock, as
/// glibc's `PTHREAD_MUTEX_ADAPTIVE_NP`). The lock is held for one transaction, tens of
/// microseconds; a caller that sleeps at once pays two context switches and a wake-up syscall
/// per handover, more than the wait itself, and two workers storing back to back hand over
/// on nearly every call. Measured with rota-bench (runner rows, SQLite file, 100 live jobs,
/// 2 workers, instant fetch): about 47 700 context switches for the 52 000 targets of the run
/// with a plain lock, 18 200 with this one, and 15 400–15 800 targets/s against 13 100–14 300
/// over three turns each (that was with a spin of 100 µs, before the group commit). A holder
/// that keeps the lock longer (a `Synchronous::Full` sync, a checkpoint, a large result) costs
/// a waiter at most this spin before it sleeps. A poisoned lock is taken over (see
/// [`SqliteStore::db`]).
fn lock_adaptive<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    let mut started: Option<Instant> = None;
    loop {
        match m.try_lock() {
            Ok(g) => return g,
            Err(TryLockError::Poisoned(e)) => return e.into_inner(),
            Err(TryLockError::WouldBlock) => {}
        }
        // The clock is read once per 64 spins, the first time only once the lock was found
        // held, so an uncontended lock costs one `try_lock`.
        let t0 = *started.get_or_insert_with(Instant::now);
        if t0.elapsed() >= SPIN_FOR {
            return m.lock().unwrap_or_else(PoisonError::into_inner);
        }
        for _ in 0..64 {
            std::hint::spin_loop();
        }
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
        let (job, caps) = (job.clone(), *caps);
        self.write(move |conn, tally| ops::admit(conn, tally, &job, &caps))
    }

    async fn job(&self, id: &str) -> Result<Option<JobRow>, StoreError> {
        ops::job(&self.db().conn, id)
    }

    async fn targets(&self, id: &str) -> Result<Vec<TargetRow>, StoreError> {
        ops::targets(&self.db().conn, id)
    }

    async fn view(&self, id: &str) -> Result<Option<(JobRow, Vec<TargetRow>)>, StoreError> {
        // Every write runs on this connection, under this lock: none comes between the reads.
        let db = self.db();
        let Some(job) = ops::job(&db.conn, id)? else {
            return Ok(None);
        };
        Ok(Some((job, ops::targets(&db.conn, id)?)))
    }

    async fn start_target(
        &self,
        id: &str,
        idx: usize,
        now: i64,
    ) -> Result<Option<TargetRow>, StoreError> {
        let id = id.to_owned();
        self.write(move |conn, tally| ops::start_target(conn, tally, &id, idx, now))
    }

    async fn finish_target(
        &self,
        id: &str,
        idx: usize,
        write: &TargetWrite,
        now: i64,
        finish: Option<JobStatus>,
    ) -> Result<bool, StoreError> {
        let (id, write) = (id.to_owned(), write.clone());
        self.write(move |conn, tally| {
            ops::finish_target(conn, tally, &id, idx, &write, now, finish)
        })
    }

    async fn set_status(
        &self,
        id: &str,
        status: JobStatus,
        error: &str,
        now: i64,
    ) -> Result<bool, StoreError> {
        let (id, error) = (id.to_owned(), error.to_owned());
        self.write(move |conn, tally| ops::set_status(conn, tally, &id, status, &error, now))
    }

    async fn touch(&self, id: &str, now: i64) -> Result<bool, StoreError> {
        let mut db = self.db();
        let touched = ops::touch(&db.conn, id, now)?;
        if touched {
            // Published as `db` is let go, before this returns.
            db.leased(now);
        }
        Ok(touched)
    }

    async fn sweep(&self, now: i64, ttl_secs: i64) -> Result<usize, StoreError> {
        // Nothing due (the common case, after every admit): no job the sweep could delete has
        // a lease below the published floor, so none is below a cutoff at or under it. No
        // wait for the connection, which a worker storing a target may hold.
        let cutoff = now.saturating_sub(ttl_secs);
        if cutoff <= self.published.lease_floor() {
            return Ok(0);
        }
        self.write(move |conn, tally| ops::sweep(conn, tally, now, ttl_secs))
    }

    async fn evict(&self, max_bytes: u64) -> Result<usize, StoreError> {
        // Under the budget (the common case, after every stored target): no wait for the
        // connection, which another worker may hold.
        if self.published.bytes() <= max_bytes {
            return Ok(0);
        }
        self.write(move |conn, tally| ops::evict(conn, tally, max_bytes))
    }

    async fn recover(&self, error: &str, now: i64) -> Result<usize, StoreError> {
        let error = error.to_owned();
        self.write(move |conn, tally| ops::recover(conn, tally, &error, now))
    }

    async fn live_jobs(&self, caller: Option<&str>) -> Result<usize, StoreError> {
        Ok(self.db().tally()?.live_of(caller))
    }

    async fn total_bytes(&self) -> Result<u64, StoreError> {
        Ok(self.db().tally()?.bytes)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::mpsc;
    use std::thread;

    use super::*;
    use crate::batch_tests::block_on;

    #[test]
    fn the_adaptive_lock_waits_out_a_short_hold_and_a_long_one() {
        // A hold shorter than the spin, and one far longer (the caller then sleeps).
        for hold in [Duration::from_micros(10), SPIN_FOR * 20] {
            let m = Arc::new(Mutex::new(0u32));
            let (held_tx, held) = mpsc::channel();
            let holder = {
                let m = m.clone();
                thread::spawn(move || {
                    let mut g = m.lock().unwrap();
                    held_tx.send(()).unwrap();
                    thread::sleep(hold);
                    *g = 1;
                })
            };
            held.recv().unwrap();
            // Taken only once the holder let go: its write is seen.
            assert_eq!(*lock_adaptive(&m), 1, "hold {hold:?}");
            holder.join().unwrap();
        }
    }

    #[test]
    fn the_adaptive_lock_takes_over_a_poisoned_lock() {
        let m = Arc::new(Mutex::new(7u32));
        let m2 = m.clone();
        let _ = thread::spawn(move || {
            let _g = m2.lock().unwrap();
            panic!("poison the lock");
        })
        .join();
        assert!(m.is_poisoned());
        assert_eq!(*lock_adaptive(&m), 7);
    }

    fn job_of(id: &str, bytes: usize) -> NewJob {
        NewJob {
            id: id.into(),
            caller: "alice".into(),
            class: rota_core::CallerClass::Fleet,
            idem_key: id.into(),
            targets: vec![("u".repeat(bytes), "{}".into())],
            now: 1,
        }
    }

    const CAPS: Caps = Caps {
        targets_per_job: 8,
        jobs_per_caller: 8,
        jobs_total: 8,
        ttl_secs: 100,
    };

    /// Runs `call` on a thread of its own while another thread holds the connection, and
    /// gives its answer, or `Err` if it had none after 30 s (it was waiting for the
    /// connection); the connection is let go before this returns.
    fn while_the_connection_is_held<T: Send + 'static>(
        s: &Arc<SqliteStore>,
        call: impl FnOnce(&SqliteStore) -> T + Send + 'static,
    ) -> Result<T, mpsc::RecvTimeoutError> {
        let (held_tx, held) = mpsc::channel();
        let (release_tx, release) = mpsc::channel::<()>();
        let holder = {
            let s = s.clone();
            thread::spawn(move || {
                let _db = s.db();
                held_tx.send(()).unwrap();
                release.recv().unwrap();
            })
        };
        held.recv().unwrap();
        let (done_tx, done) = mpsc::channel();
        {
            let s = s.clone();
            thread::spawn(move || {
                let _ = done_tx.send(call(&s));
            });
        }
        // Had it waited for the connection, it would still be waiting when this gives up.
        let answer = done.recv_timeout(Duration::from_secs(30));
        release_tx.send(()).unwrap();
        holder.join().unwrap();
        answer
    }

    #[tokio::test]
    async fn evict_under_the_budget_does_not_wait_for_the_connection() {
        let s = Arc::new(SqliteStore::open_in_memory().unwrap());
        s.admit(&job_of("a", 100), &CAPS).await.unwrap();
        let total = s.total_bytes().await.unwrap();
        assert_eq!(total, 102);
        let evicted = while_the_connection_is_held(&s, move |s| block_on(s.evict(total)));
        assert!(matches!(evicted, Ok(Ok(0))), "{evicted:?}");
        // Over the budget, evict takes the connection and deletes (the job is live: nothing).
        assert_eq!(s.evict(total - 1).await.unwrap(), 0);
    }

    #[tokio::test]
    async fn sweep_with_nothing_due_does_not_wait_for_the_connection() {
        let s = Arc::new(SqliteStore::open_in_memory().unwrap());
        s.admit(&job_of("a", 10), &CAPS).await.unwrap();
        assert!(s.set_status("a", JobStatus::Done, "", 50).await.unwrap());
        // A cutoff (49) under the only terminal lease (50).
        let swept = while_the_connection_is_held(&s, |s| block_on(s.sweep(59, 10)));
        assert!(matches!(swept, Ok(Ok(0))), "{swept:?}");
        // A cutoff past the lease (51 > 50) takes the connection and deletes.
        assert_eq!(s.sweep(61, 10).await.unwrap(), 1);
        assert_eq!(s.job("a").await.unwrap(), None);
    }

    /// Every write that sets a lease lowers the published floor to its `now`, even a `now`
    /// earlier than the floor (a clock set back; an embedder's own times): a sweep after it
    /// finds the job due at that lease, where the floor before it would have skipped.
    #[tokio::test]
    async fn every_write_that_sets_a_lease_lowers_the_floor_sweep_skips_below() {
        let done = TargetWrite::Done { result: "r".into() };
        for what in ["touch", "finish_target", "start_target"] {
            let s = SqliteStore::open_in_memory().unwrap();
            s.admit(&job_of("a", 10), &CAPS).await.unwrap();
            assert!(s.set_status("a", JobStatus::Done, "", 1_000).await.unwrap());
            assert_eq!(s.published.lease_floor(), 1_000, "{what}");
            // Nothing is due at 1 005 with a ttl of 10: skipped, and rightly.
            assert_eq!(s.sweep(1_005, 10).await.unwrap(), 0, "{what}");
            // The terminal job's lease set back to 100: due at 1 005.
            let wrote = match what {
                "touch" => s.touch("a", 100).await.unwrap(),
                "finish_target" => s.finish_target("a", 0, &done, 100, None).await.unwrap(),
                _ => s.start_target("a", 0, 100).await.unwrap().is_some(),
            };
            assert!(wrote, "{what}");
            assert_eq!(s.published.lease_floor(), 100, "{what}");
            assert_eq!(s.sweep(1_005, 10).await.unwrap(), 1, "{what}");
            assert_eq!(s.job("a").await.unwrap(), None, "{what}");
            assert_eq!(s.published.lease_floor(), i64::MAX, "{what}");
        }
        // A job ended by a status change or by recovery at an earlier `now` than the floor.
        let s = SqliteStore::open_in_memory().unwrap();
        for (id, status, now) in [
            ("b", JobStatus::Done, 1_000),
            ("c", JobStatus::Cancelled, 200),
        ] {
            s.admit(&job_of(id, 10), &CAPS).await.unwrap();
            assert!(s.set_status(id, status, "", now).await.unwrap());
        }
        assert_eq!(s.published.lease_floor(), 200);
        s.admit(&job_of("d", 10), &CAPS).await.unwrap();
        assert_eq!(s.recover("interrupted", 100).await.unwrap(), 1);
        assert_eq!(s.published.lease_floor(), 100);
        // Due: d (100) and c (200) at a cutoff of 500; b (1 000) stays, and is the floor.
        assert_eq!(s.sweep(510, 10).await.unwrap(), 2);
        assert_eq!(s.published.lease_floor(), 1_000);
        assert!(s.job("b").await.unwrap().is_some());
    }

    /// A recovery that fails no job sets no lease, so it leaves the floor sweep skips below
    /// where it was (the one terminal job's lease here, none on an empty store): lowering it to
    /// the recovery's `now` would send the next sweeps with nothing due to the connection.
    #[tokio::test]
    async fn a_recovery_that_fails_no_job_leaves_the_lease_floor_where_it_was() {
        let s = SqliteStore::open_in_memory().unwrap();
        s.admit(&job_of("a", 10), &CAPS).await.unwrap();
        assert!(s.set_status("a", JobStatus::Done, "", 1_000).await.unwrap());
        assert_eq!(s.recover("interrupted", 100).await.unwrap(), 0);
        assert_eq!(s.published.lease_floor(), 1_000);
        let s = SqliteStore::open_in_memory().unwrap();
        assert_eq!(s.recover("interrupted", 100).await.unwrap(), 0);
        assert_eq!(s.published.lease_floor(), i64::MAX);
    }

    /// The `PRAGMA synchronous` of the store's connection.
    fn synchronous(s: &SqliteStore) -> i64 {
        s.db()
            .conn
            .query_row("PRAGMA synchronous", [], |r| r.get(0))
            .unwrap()
    }

    /// [`SqliteOptions::synchronous`] is what the connection commits with: `Synchronous::Full`
    /// "every commit syncs the WAL before it returns" is `PRAGMA synchronous = FULL` (2), and
    /// the default, for [`SqliteStore::open`] and for an explicit `Normal`, is `NORMAL` (1),
    /// in the WAL journal mode both are documented for. The setting is the connection's, not
    /// the file's: a file opened `Full` and then reopened by default is `NORMAL` again.
    #[test]
    fn the_synchronous_option_is_what_the_connection_commits_with() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rota.db");
        let full = SqliteOptions {
            synchronous: Synchronous::Full,
        };
        for (opts, want) in [
            (full, 2),
            (SqliteOptions::default(), 1),
            (
                SqliteOptions {
                    synchronous: Synchronous::Normal,
                },
                1,
            ),
            (full, 2),
        ] {
            let s = SqliteStore::open_with(&path, opts).unwrap();
            assert_eq!(synchronous(&s), want, "{opts:?}");
            let journal: String = s
                .db()
                .conn
                .query_row("PRAGMA journal_mode", [], |r| r.get(0))
                .unwrap();
            assert_eq!(journal, "wal", "{opts:?}");
        }
        assert_eq!(synchronous(&SqliteStore::open(&path).unwrap()), 1);
    }

    #[tokio::test]
    async fn the_published_total_follows_every_write() {
        let s = SqliteStore::open_in_memory().unwrap();
        let published = || s.published.bytes();
        assert_eq!(published(), 0);
        s.admit(&job_of("a", 10), &CAPS).await.unwrap();
        assert_eq!(published(), 12);
        let done = TargetWrite::Done {
            result: "r".repeat(30),
        };
        assert!(
            s.finish_target("a", 0, &done, 2, Some(JobStatus::Done))
                .await
                .unwrap()
        );
        assert_eq!(published(), 42);
        assert_eq!(published(), s.total_bytes().await.unwrap());
        // Evicting the finished job brings it back to zero.
        assert_eq!(s.evict(0).await.unwrap(), 1);
        assert_eq!(published(), 0);
    }
}
