//! [`RedbStore`]: every [`BatchStore`] operation inside one redb transaction.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use async_trait::async_trait;
use redb::{
    Database, MultimapTable, ReadTransaction, ReadableDatabase, ReadableMultimapTable,
    ReadableTable, Table, WriteTransaction,
};
use rota_core::{
    Admission, BatchStore, Caps, JobRow, JobStatus, NewJob, StoreError, TargetRow, TargetWrite,
    may_transition, reusable, sweepable,
};

use crate::codec::{decode_job, decode_target, encode_job, encode_target};
use crate::commit::{Combiner, Queued, guarded};
use crate::error::{CommitUncertain, Ctx, err, uncertain};
use crate::tables::*;

/// How much a commit is worth after a crash.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Durability {
    /// Every acknowledged write survives a crash (`kill -9`, power loss): each commit waits for
    /// an fsync, which bounds a store to a few thousand commits a second (~5 k/s measured on
    /// this project's machine when idle). The default.
    #[default]
    Immediate,
    /// Commits do not wait for the disk (about 6× the commits a second). **May lose the most
    /// recent writes on a crash, never corrupts**: after a crash the store opens as of its last
    /// durable commit, every job in it whole, every index and count in step. One commit in
    /// [`RedbOptions::sync_every`] is made durable, and so is closing the store (dropping it),
    /// which bounds the loss to the commits since the last of those. After an I/O error (a
    /// full disk) such a store refuses every operation until its owner opens it again, as
    /// after a crash, and with the same loss: opening it again by itself, as a store of
    /// [`Immediate`](Self::Immediate) durability does, would take back writes it acknowledged.
    None,
}

/// The default of [`RedbOptions::sync_every`].
pub const SYNC_EVERY: u32 = 1000;

/// The default of [`RedbOptions::group_wait`]: 200 µs, less than one fsync (0.4 to 1 ms
/// measured on this project's machine), and about four times what the runner's worker or a
/// submitting task takes, on average, to come back with its next write (~45 µs measured in
/// the rota-bench redb rows, most of it the wake-up of a sleeping thread).
pub const GROUP_WAIT: Duration = Duration::from_micros(200);

/// The most [`RedbOptions::group_wait`] can be: 10 ms, ten fsyncs of this project's machine. A
/// wait is for a writer that is about to come back; one that does not (it has ended, or waits
/// for this commit's result) costs the whole wait.
pub const MAX_GROUP_WAIT: Duration = Duration::from_millis(10);

/// How to open a [`RedbStore`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedbOptions {
    /// What a commit promises; [`Durability::Immediate`] by default.
    pub durability: Durability,
    /// With [`Durability::None`], one commit in this many is made durable. Default
    /// [`SYNC_EVERY`]; 0 means none until the store is closed, and a file that only grows
    /// meanwhile, since redb frees pages only in durable commits. Ignored with
    /// [`Durability::Immediate`].
    pub sync_every: u32,
    /// How long a thread that wrote in the previous durable commit is waited for, counted from
    /// its latest acknowledgement: a durable commit waits for *company*, for such a thread to
    /// queue its next write, so that one fsync serves both (see "Group commit" on
    /// [`RedbStore`]), so a commit waits at most this long. Default [`GROUP_WAIT`]; zero never
    /// waits; more than [`MAX_GROUP_WAIT`] is taken as that. Ignored with [`Durability::None`],
    /// whose commits do not wait for the disk.
    pub group_wait: Duration,
}

impl Default for RedbOptions {
    fn default() -> Self {
        RedbOptions {
            durability: Durability::Immediate,
            sync_every: SYNC_EVERY,
            group_wait: GROUP_WAIT,
        }
    }
}

/// A [`BatchStore`] in a redb database: a single file owned by one process, or memory.
///
/// Every operation that writes runs whole inside one redb write transaction: admit (reuse check,
/// caps and insert) is one, so concurrent admits are serialized by redb's single writer and never
/// exceed a cap. A sweep with nothing due, and an evict under the budget or with no terminal job to
/// delete, take no write transaction (a read at most), so they never wait for another thread's
/// commit. The layout is in the `tables` module: a job's row and its targets' rows side by side, in
/// a table of the live jobs' rows or one of the terminal jobs' rows (a job moves from the first to
/// the second when it ends), job ids by (caller, idem key), the terminal jobs by lease (for sweep)
/// and by `created_at` (for evict), and a meta table with the magic and the schema version, all
/// kept in step in the same transactions. The counts admit and evict consult (total bytes, live
/// jobs in all and per caller) are counted when the store opens and kept in memory, moved after
/// each commit.
///
/// # Group commit
///
/// Operations that arrive while another thread's commit is under way are queued, and the next
/// commit takes them all: one transaction and one fsync for all of them. Threads that take
/// turns writing (the runner's worker and a submitting task, or two workers) would still get
/// one fsync each, since each has one write in flight and is preparing the next when the
/// other's commit starts. So a durable commit first waits for *company*: for each thread that
/// wrote in the previous durable commit, was acknowledged less than
/// [`RedbOptions::group_wait`] ago (200 µs by default) and has not queued again, until it
/// queues or that time is up. A thread writing alone never waits, nor does a commit that needs
/// no fsync (all of them, with [`Durability::None`]). So with a submitting task beside a worker,
/// or two workers, one fsync can carry a write of each.
///
/// Each operation still runs whole, after the ones before it in its transaction, and returns
/// only once its transaction has committed; if one operation of a batch fails (an error, or a
/// panic inside redb or the operation), the batch is not committed and each of its operations
/// runs again in a transaction of its own, so a failure belongs to its operation alone.
///
/// The live and byte counts are kept in memory and move just after each commit.
/// [`live_jobs`](BatchStore::live_jobs), [`total_bytes`](BatchStore::total_bytes) and
/// [`verify`](RedbStore::verify) wait out a commit in progress, so what they report agrees
/// with every row a read has seen.
///
/// # Two writes per target, each durable
///
/// The runner stores two writes per target: [`start_target`](BatchStore::start_target), then
/// [`finish_target`](BatchStore::finish_target), which may also carry the job's terminal
/// status. Both are durable commits, as every other write: an acknowledged start survives a
/// crash like the rest (the file then shows the target `running` until recovery fails its job
/// `interrupted`). So a lone worker pays two fsyncs per target; a submitting task or a second
/// worker shares them (group commit, above).
///
/// # After an I/O error
///
/// Once a read or write of its file fails (a full disk, a device error), redb refuses every
/// later operation on the database until it is closed and opened again. The store does that
/// itself: the next operation, meeting that refusal, closes the database, opens it again as
/// [`open_with`](RedbStore::open_with) did (redb repairs what the failure left), reads the
/// counts again from the file, and runs. So one failed write does not leave the store refusing
/// every later one until the process restarts. If opening it again fails too (its reads of the
/// file fail), that operation fails, and the next one tries again. The database is opened again
/// over the file the store opened, never its path again, and the file stays locked throughout,
/// from the store's open to its drop: no other process can open it in between (one that tries
/// is refused, as ever). A store [`in_memory`](RedbStore::in_memory) is not opened again.
///
/// # Async
///
/// redb is synchronous. Each operation is a short transaction (well under a millisecond of
/// CPU, plus one fsync for a durable commit), so it runs inline in the async fn rather than through
/// `spawn_blocking`: handing every call to the blocking pool and back was measured too slow for
/// the two calls a target makes. The cost is that a commit holds its runtime thread for the
/// length of its fsync, and that a second writer waits in the queue on its own thread; the
/// runner has at most two workers, so that is a short, bounded wait.
pub struct RedbStore {
    /// The database, opened again in place after an I/O error (see [`RedbStore::reopen`]).
    /// Every transaction runs under a read guard of it, so a reopen, under the write guard,
    /// closes the old database only once nothing uses it.
    db: RwLock<DbSlot>,
    /// How to open the database again: `None` for a store in memory, which cannot be.
    reopen: Option<Reopen>,
    durability: Durability,
    sync_every: u32,
    /// Commits since the last durable one, with [`Durability::None`].
    lazy_commits: AtomicU32,
    /// The write operations waiting for the write transaction (group commit).
    queue: Combiner<Op>,
    /// The counts, as of the last commit.
    tally: Mutex<Tally>,
    /// See [`RedbStore::published`].
    published: Mutex<()>,
    /// The file, if the store is a file's: open, and locked, from the store's open to its drop,
    /// across every reopen (see [`RedbStore::reopen`]); let go of only once the database
    /// (declared first) is closed.
    pub(crate) file: Option<Arc<crate::held::HeldFile>>,
    /// The file's claim in this process, if the store is a file's; let go of only once the
    /// database (declared first) is closed.
    pub(crate) claim: Option<rota_core::claims::FileClaim>,
    /// Test only: run by [`RedbStore::reopen`] between closing the database and opening it
    /// again.
    #[cfg(test)]
    pub(crate) between_close_and_open: Option<Box<dyn Fn() + Send + Sync>>,
}

/// Opens a store's database again, as its open did (see [`RedbStore::reopen`]).
pub(crate) type Reopen = Box<dyn Fn() -> Result<Database, StoreError> + Send + Sync>;

/// A store's database, and how many times it was opened again.
pub(crate) struct DbSlot {
    /// `None` once an I/O error closed it and opening it again failed (tried again by the next
    /// operation).
    db: Option<Database>,
    /// Opens since the store's own: an operation that meets the error of an earlier I/O
    /// failure opens the database again only if no other did since it began.
    opened: u64,
}

impl DbSlot {
    /// The database, or the error of a store whose reopen failed.
    pub(crate) fn db(&self) -> Result<&Database, StoreError> {
        self.db.as_ref().ok_or_else(|| {
            StoreError::backend(
                "open store file again",
                std::io::Error::other(
                    "closed after an I/O error, and not yet opened again (the next operation \
                     tries)",
                ),
            )
        })
    }
}

/// Whether `e` is redb's refusal after an earlier I/O failure: once a read or write of the file
/// fails, redb refuses every later operation on the database (`PreviousIo`) until it is closed
/// and opened again; the operation that met it touched nothing.
fn previous_io(e: &StoreError) -> bool {
    matches!(e, StoreError::Backend { source, .. }
        if matches!(source.inner().downcast_ref::<redb::Error>(), Some(redb::Error::PreviousIo)))
}

/// Shows the settings and counts, never a row or a caller's name.
impl fmt::Debug for RedbStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (live, bytes) = {
            let t = self.tally_lock();
            (t.live, t.bytes)
        };
        f.debug_struct("RedbStore")
            .field("durability", &self.durability)
            .field("sync_every", &self.sync_every)
            .field("live_jobs", &live)
            .field("total_bytes", &bytes)
            .finish_non_exhaustive()
    }
}

/// A write operation waiting for its transaction: it runs against the open tables and says
/// whether it changed anything; its result goes where its caller will look.
pub(crate) struct Op {
    run: Run,
}

impl Op {
    /// The operation `f`, and where its result will be.
    pub(crate) fn new<T: Send + 'static>(
        mut f: impl FnMut(&mut Tables<'_>) -> Result<Done<T>, StoreError> + Send + 'static,
    ) -> (Op, Slot<T>) {
        let slot = Slot(Arc::new(Mutex::new(None)));
        let out = slot.0.clone();
        let op = Op {
            run: Box::new(move |t| {
                let Done(value, changed) = f(t)?;
                *out.lock().unwrap_or_else(PoisonError::into_inner) = Some(value);
                Ok(changed)
            }),
        };
        (op, slot)
    }
}

/// Where an [`Op`] leaves its result: the value of its last run.
pub(crate) struct Slot<T>(Arc<Mutex<Option<T>>>);

impl<T> Slot<T> {
    /// The result, once the operation has committed.
    pub(crate) fn take(&self) -> Result<T, StoreError> {
        let value = self.0.lock().unwrap_or_else(PoisonError::into_inner).take();
        value.ok_or_else(|| StoreError::backend("write", std::io::Error::other("no result")))
    }
}

/// The body of an [`Op`]: runs it, and says whether it changed anything.
type Run = Box<dyn for<'t> FnMut(&mut Tables<'t>) -> Result<bool, StoreError> + Send>;

/// The counts every admit and evict consults, kept in memory: computed from the rows when the
/// store opens ([`Tally::of`]) and moved only after a commit, by what that transaction changed.
/// Keeping them out of the file spares every commit the pages of a counter table; only the one
/// owner of the file writes it, so they cannot go stale.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Tally {
    /// The sum of every job's `n_bytes`.
    pub(crate) bytes: u64,
    /// The live (queued or running) jobs.
    pub(crate) live: u64,
    /// The live jobs of each caller that has any.
    pub(crate) by_caller: HashMap<String, u64>,
}

impl Tally {
    /// Counts the store in `db`: the live jobs through their rows, the bytes of every job
    /// through those and the created index (which between them name every job). A database
    /// without rota's tables yet counts zero. A job row that cannot be decoded counts for
    /// nothing, so that one damaged row does not keep the rest of the store from opening: every
    /// read or write of that job, and [`verify`](RedbStore::verify), reports it
    /// [`Corrupt`](StoreError::Corrupt), while sweep, evict, recovery and the reuse check pass
    /// it over. An index entry without its job counts for nothing too.
    pub(crate) fn of(db: &Database) -> Result<Tally, StoreError> {
        let txn = db.begin_read().map_err(err("begin read"))?;
        let mut tally = Tally::default();
        let (rows, live_rows) = match (txn.open_table(ROWS), txn.open_table(LIVE_ROWS)) {
            (Ok(r), Ok(l)) => (r, l),
            (Err(redb::TableError::TableDoesNotExist(_)), _)
            | (_, Err(redb::TableError::TableDoesNotExist(_))) => return Ok(tally),
            (Err(e), _) | (_, Err(e)) => return Err(err("open rows table")(e)),
        };
        const WHAT: &str = "count the store";
        for id in live_ids(&live_rows)? {
            if let Some(job) = counted(load_job(&live_rows, &id))? {
                tally.live += 1;
                *tally.by_caller.entry(job.caller).or_default() += 1;
                tally.bytes = tally.bytes.saturating_add(job.n_bytes);
            }
        }
        for entry in txn.open_table(BY_CREATED).ctx(WHAT)?.iter().ctx(WHAT)? {
            let (k, _) = entry.ctx(WHAT)?;
            if let Some(job) = counted(load_job(&rows, k.value().1))? {
                tally.bytes = tally.bytes.saturating_add(job.n_bytes);
            }
        }
        Ok(tally)
    }

    fn apply(&mut self, d: Delta) {
        // In range: every change was checked against the counts it started from.
        self.bytes = u64::try_from(i128::from(self.bytes) + d.bytes).unwrap_or(0);
        self.live = self.live.saturating_add_signed(d.live);
        for (caller, n) in d.callers {
            let left = self
                .by_caller
                .get(&caller)
                .copied()
                .unwrap_or(0)
                .saturating_add_signed(n);
            if left == 0 {
                self.by_caller.remove(&caller);
            } else {
                self.by_caller.insert(caller, left);
            }
        }
    }
}

/// A job [`Tally::of`] counts: `None` for a missing or undecodable row.
fn counted(job: Result<Option<JobRow>, StoreError>) -> Result<Option<JobRow>, StoreError> {
    match job {
        Err(StoreError::Corrupt(_)) => Ok(None),
        other => other,
    }
}

/// What one transaction changes in the [`Tally`], applied once it has committed.
#[derive(Debug, Default)]
struct Delta {
    bytes: i128,
    live: i64,
    /// Few: one entry per caller whose jobs the transaction admitted or ended.
    callers: Vec<(String, i64)>,
}

/// Every table, open in one write transaction, and the counts as this transaction sees them.
pub(crate) struct Tables<'t> {
    /// The rows of the terminal jobs.
    rows: Table<'t, (&'static str, u64), &'static [u8]>,
    /// The rows of the live jobs.
    live_rows: Table<'t, (&'static str, u64), &'static [u8]>,
    idem: MultimapTable<'t, (&'static str, &'static str), &'static str>,
    by_lease: Table<'t, (i64, &'static str), ()>,
    by_created: Table<'t, (i64, &'static str), ()>,
    /// The counts as of the last commit (only the transaction's thread moves them).
    tally: &'t Mutex<Tally>,
    /// This transaction's changes to them.
    delta: Delta,
}

/// Creates every table and writes the magic and the schema version: a new store.
pub(crate) fn init(txn: &WriteTransaction) -> Result<(), StoreError> {
    let e = err("initialize meta");
    let mut meta = txn.open_table(META).map_err(err("open meta table"))?;
    meta.insert(MAGIC_KEY, MAGIC).map_err(&e)?;
    meta.insert(VERSION_KEY, VERSION.as_bytes()).map_err(&e)?;
    let unused = Mutex::new(Tally::default());
    Tables::open(txn, &unused)?;
    Ok(())
}

impl<'t> Tables<'t> {
    /// Opens (creating on first use) every table.
    fn open(txn: &'t WriteTransaction, tally: &'t Mutex<Tally>) -> Result<Self, StoreError> {
        Ok(Tables {
            rows: txn.open_table(ROWS).map_err(err("open rows table"))?,
            live_rows: txn
                .open_table(LIVE_ROWS)
                .map_err(err("open live rows table"))?,
            idem: txn
                .open_multimap_table(IDEM)
                .map_err(err("open idem table"))?,
            by_lease: txn.open_table(BY_LEASE).map_err(err("open lease index"))?,
            by_created: txn
                .open_table(BY_CREATED)
                .map_err(err("open created index"))?,
            tally,
            delta: Delta::default(),
        })
    }

    fn committed(&self) -> std::sync::MutexGuard<'t, Tally> {
        self.tally.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The total bytes as this transaction sees them.
    fn bytes(&self) -> Result<u64, StoreError> {
        u64::try_from(i128::from(self.committed().bytes) + self.delta.bytes)
            .map_err(|_| StoreError::Corrupt("byte count out of range".into()))
    }

    fn live_total(&self) -> Result<u64, StoreError> {
        self.committed()
            .live
            .checked_add_signed(self.delta.live)
            .ok_or_else(|| StoreError::Corrupt("live count out of range".into()))
    }

    fn caller_live(&self, caller: &str) -> Result<u64, StoreError> {
        let base = self.committed().by_caller.get(caller).copied().unwrap_or(0);
        let d = self
            .delta
            .callers
            .iter()
            .find(|(c, _)| c == caller)
            .map_or(0, |(_, n)| *n);
        base.checked_add_signed(d)
            .ok_or_else(|| StoreError::Corrupt("caller live count out of range".into()))
    }

    /// Counts one more (`+1`) or one fewer (`-1`) live job of `caller`.
    fn add_live(&mut self, caller: &str, n: i64) -> Result<(), StoreError> {
        // Checked against what is counted, so that a commit never moves a count out of range.
        self.live_total()?
            .checked_add_signed(n)
            .ok_or_else(|| StoreError::Corrupt("live count out of range".into()))?;
        self.caller_live(caller)?
            .checked_add_signed(n)
            .ok_or_else(|| StoreError::Corrupt("caller live count out of range".into()))?;
        self.delta.live += n;
        match self.delta.callers.iter_mut().find(|(c, _)| c == caller) {
            Some((_, d)) => *d += n,
            None => self.delta.callers.push((caller.to_owned(), n)),
        }
        Ok(())
    }

    fn add_bytes(&mut self, old: u64, new: u64) -> Result<(), StoreError> {
        let d = i128::from(new) - i128::from(old);
        u64::try_from(i128::from(self.bytes()?) + d)
            .map_err(|_| StoreError::Corrupt("byte count out of range".into()))?;
        self.delta.bytes += d;
        Ok(())
    }

    fn job(&self, id: &str) -> Result<Option<JobRow>, StoreError> {
        find_job(&self.live_rows, &self.rows, id)
    }

    /// Job `id`, for a scan over many jobs (sweep, evict, recover, the reuse check): a job row
    /// that cannot be decoded is passed over as if absent, so that one damaged row does not
    /// stop the scan for every other job. (A read or write of that job itself still reports
    /// it [`Corrupt`](StoreError::Corrupt); the damaged row is left as it is.)
    fn job_in_scan(&self, id: &str) -> Result<Option<JobRow>, StoreError> {
        match self.job(id) {
            Err(StoreError::Corrupt(_)) => Ok(None),
            r => r,
        }
    }

    /// The table that holds the rows of a job of `status`.
    fn rows_of(&mut self, status: JobStatus) -> &mut Table<'t, (&'static str, u64), &'static [u8]> {
        if status.is_live() {
            &mut self.live_rows
        } else {
            &mut self.rows
        }
    }

    /// Stores a new job and its targets, with every index and count.
    fn insert_job(&mut self, job: &JobRow, targets: &[TargetRow]) -> Result<(), StoreError> {
        let e = err("admit");
        let id = job.id.as_str();
        let rows = self.rows_of(job.status);
        rows.insert((id, JOB_SLOT), encode_job(job).as_slice())
            .map_err(&e)?;
        for t in targets {
            let Some(slot) = target_slot(t.idx) else {
                return Err(StoreError::Corrupt(format!(
                    "job {id}: target idx out of range"
                )));
            };
            rows.insert((id, slot), encode_target(t).as_slice())
                .map_err(&e)?;
        }
        self.idem
            .insert((job.caller.as_str(), job.idem_key.as_str()), id)
            .map_err(&e)?;
        if job.status.is_live() {
            self.add_live(&job.caller, 1)?;
        } else {
            self.by_lease.insert((job.lease, id), ()).map_err(&e)?;
            self.by_created
                .insert((job.created_at, id), ())
                .map_err(&e)?;
        }
        self.add_bytes(0, job.n_bytes)?;
        Ok(())
    }

    /// Replaces the job row `old` with `new`, keeping the indexes and counts in step. A job
    /// that ends moves with its targets from the live rows to the terminal ones.
    fn put_job(&mut self, old: &JobRow, new: &JobRow) -> Result<(), StoreError> {
        let e = err("write job");
        let id = new.id.as_str();
        if old.status.is_live() && new.status.is_terminal() {
            // The job's row moves too, and is overwritten with `new` below.
            move_rows(&mut self.live_rows, &mut self.rows, id)?;
            self.add_live(&new.caller, -1)?;
            self.by_lease.insert((new.lease, id), ()).map_err(&e)?;
            self.by_created
                .insert((new.created_at, id), ())
                .map_err(&e)?;
        } else if old.status.is_terminal() && old.lease != new.lease {
            self.by_lease.remove((old.lease, id)).map_err(&e)?;
            self.by_lease.insert((new.lease, id), ()).map_err(&e)?;
        }
        if old.n_bytes != new.n_bytes {
            self.add_bytes(old.n_bytes, new.n_bytes)?;
        }
        self.rows_of(new.status)
            .insert((id, JOB_SLOT), encode_job(new).as_slice())
            .map_err(&e)?;
        Ok(())
    }

    /// Deletes a job with its targets, index entries and counts.
    fn delete_job(&mut self, job: &JobRow) -> Result<(), StoreError> {
        let e = err("delete job");
        let id = job.id.as_str();
        self.rows_of(job.status)
            .retain_in((id, JOB_SLOT)..=(id, u64::MAX), |_, _| false)
            .map_err(&e)?;
        self.idem
            .remove((job.caller.as_str(), job.idem_key.as_str()), id)
            .map_err(&e)?;
        if job.status.is_live() {
            self.add_live(&job.caller, -1)?;
        } else {
            self.by_lease.remove((job.lease, id)).map_err(&e)?;
            self.by_created.remove((job.created_at, id)).map_err(&e)?;
        }
        self.add_bytes(job.n_bytes, 0)?;
        Ok(())
    }

    /// Applies `write` to target `idx` of `job` (as stored: its status says which table holds
    /// it), updating the job's `targets_done` and `n_bytes` (the caller writes the job). The
    /// row as stored, or `None` if there is no such target.
    fn store_target(
        &mut self,
        job: &mut JobRow,
        idx: usize,
        write: &TargetWrite,
    ) -> Result<Option<TargetRow>, StoreError> {
        let e = err("write target");
        let Some(slot) = target_slot(idx) else {
            return Ok(None);
        };
        let key = (job.id.as_str(), slot);
        let rows = self.rows_of(job.status);
        let old = match rows.get(key).map_err(&e)? {
            Some(g) => decode_target(idx as u64, g.value())?,
            None => return Ok(None),
        };
        let mut row = old.clone();
        row.apply(write);
        job.n_bytes = job
            .n_bytes
            .checked_sub(old.n_bytes())
            .and_then(|n| n.checked_add(row.n_bytes()))
            .ok_or_else(|| StoreError::Corrupt(format!("job {}: n_bytes out of range", job.id)))?;
        match (old.status.is_finished(), row.status.is_finished()) {
            (false, true) => job.targets_done += 1,
            (true, false) => {
                job.targets_done = job.targets_done.checked_sub(1).ok_or_else(|| {
                    StoreError::Corrupt(format!("job {}: targets_done out of range", job.id))
                })?
            }
            _ => {}
        }
        rows.insert(key, encode_target(&row).as_slice())
            .map_err(&e)?;
        Ok(Some(row))
    }
}

/// Moves the rows of job `id` (its own and its targets') from the table `from` to `to`.
pub(crate) fn move_rows(
    from: &mut Table<'_, (&'static str, u64), &'static [u8]>,
    to: &mut Table<'_, (&'static str, u64), &'static [u8]>,
    id: &str,
) -> Result<(), StoreError> {
    const WHAT: &str = "move a job's rows";
    let mut moved: Vec<(u64, Vec<u8>)> = Vec::new();
    for entry in from
        .extract_from_if((id, JOB_SLOT)..=(id, u64::MAX), |_, _| true)
        .ctx(WHAT)?
    {
        let (k, v) = entry.ctx(WHAT)?;
        moved.push((k.value().1, v.value().to_vec()));
    }
    for (slot, v) in &moved {
        to.insert((id, *slot), v.as_slice()).ctx(WHAT)?;
    }
    Ok(())
}

/// The job `id`, from the live rows or else the terminal ones.
pub(crate) fn find_job(
    live_rows: &impl ReadableTable<(&'static str, u64), &'static [u8]>,
    rows: &impl ReadableTable<(&'static str, u64), &'static [u8]>,
    id: &str,
) -> Result<Option<JobRow>, StoreError> {
    match load_job(live_rows, id)? {
        Some(job) => Ok(Some(job)),
        None => load_job(rows, id),
    }
}

/// The targets of job `id` in `table` (the one that holds its row), in idx order.
fn load_targets(
    table: &impl ReadableTable<(&'static str, u64), &'static [u8]>,
    id: &str,
) -> Result<Vec<TargetRow>, StoreError> {
    let e = err("read targets");
    let mut out = Vec::new();
    for entry in table
        .range((id, JOB_SLOT + 1)..=(id, u64::MAX))
        .map_err(&e)?
    {
        let (k, v) = entry.map_err(&e)?;
        let slot = k.value().1 - 1;
        out.push(match decode_target(slot, v.value()) {
            Ok(t) => t,
            // A row that cannot be decoded does not hide the job's other targets.
            Err(StoreError::Corrupt(why)) => {
                TargetRow::corrupt(usize::try_from(slot).unwrap_or(out.len()), why)
            }
            Err(other) => return Err(other),
        });
    }
    Ok(out)
}

/// The ids of the jobs in `live_rows`, in id order.
pub(crate) fn live_ids(
    live_rows: &impl ReadableTable<(&'static str, u64), &'static [u8]>,
) -> Result<Vec<String>, StoreError> {
    let e = err("read live jobs");
    let mut ids = Vec::new();
    for entry in live_rows.iter().map_err(&e)? {
        let (k, _) = entry.map_err(&e)?;
        let (id, slot) = k.value();
        if slot == JOB_SLOT {
            ids.push(id.to_owned());
        }
    }
    Ok(ids)
}

pub(crate) fn load_job(
    rows: &impl ReadableTable<(&'static str, u64), &'static [u8]>,
    id: &str,
) -> Result<Option<JobRow>, StoreError> {
    match rows.get((id, JOB_SLOT)).map_err(err("read job"))? {
        Some(g) => decode_job(id, g.value()).map(Some),
        None => Ok(None),
    }
}

/// What a write operation did: its result, and whether there is anything to commit.
pub(crate) struct Done<T>(pub(crate) T, pub(crate) bool);

impl RedbStore {
    /// The store in `db`, its counts read from it.
    pub(crate) fn from_db(db: Database, opts: &RedbOptions) -> Result<Self, StoreError> {
        let tally = Tally::of(&db)?;
        Ok(RedbStore {
            db: RwLock::new(DbSlot {
                db: Some(db),
                opened: 0,
            }),
            reopen: None,
            durability: opts.durability,
            sync_every: opts.sync_every,
            lazy_commits: AtomicU32::new(0),
            queue: Combiner::new(match opts.durability {
                Durability::Immediate => opts.group_wait.min(MAX_GROUP_WAIT),
                Durability::None => Duration::ZERO,
            }),
            tally: Mutex::new(tally),
            published: Mutex::new(()),
            file: None,
            claim: None,
            #[cfg(test)]
            between_close_and_open: None,
        })
    }

    /// The counts as of the last commit.
    pub(crate) fn tally(&self) -> Tally {
        self.tally_lock().clone()
    }

    /// Held from a commit to its counts' update: while it is held by a reader, no commit is
    /// between the two, so the rows it reads and the counts agree. Only the committing thread
    /// (one at a time, the group commit's leader) and such readers take it.
    pub(crate) fn published(&self) -> std::sync::MutexGuard<'_, ()> {
        self.published
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn tally_lock(&self) -> std::sync::MutexGuard<'_, Tally> {
        self.tally.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `self`, opened again by `reopen` after an I/O error ([`RedbStore::reopen`]).
    pub(crate) fn reopened_by(mut self, reopen: Reopen) -> Self {
        self.reopen = Some(reopen);
        self
    }

    /// The database slot, under a read guard: a reopen waits for it.
    pub(crate) fn slot(&self) -> std::sync::RwLockReadGuard<'_, DbSlot> {
        self.db.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `f` on the database. If redb refuses it for an earlier I/O failure (a full disk, a
    /// device error: redb then refuses everything until the database is closed and opened
    /// again), the database is opened again and `f` runs once more: one failed write does not
    /// leave the store refusing every later one until the process restarts. A store in memory,
    /// or one opened with [`Durability::None`], is not opened again (see
    /// [`may_reopen`](Self::may_reopen)): the refusal stands. A commit that failed is not
    /// tried again either ([`CommitUncertain`]: it may have been made).
    fn on_db<T>(
        &self,
        mut f: impl FnMut(&Database) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let seen = {
            let slot = self.slot();
            if let Some(db) = slot.db.as_ref() {
                match f(db) {
                    Err(e) if previous_io(&e) && self.may_reopen() => {}
                    done => return done,
                }
            }
            slot.opened
        };
        self.reopen(seen)?;
        let slot = self.slot();
        f(slot.db()?)
    }

    /// Whether an operation refused for an earlier I/O failure may open the database again:
    /// a store in memory cannot (its data would be gone), and one opened with
    /// [`Durability::None`] must not: its commits since the last durable one are not in the
    /// file, so opening it again would take back writes it acknowledged (jobs it ended would be
    /// live again), with no crash. Such a store refuses every operation until its owner opens
    /// it again, as after a crash.
    fn may_reopen(&self) -> bool {
        self.reopen.is_some() && self.durability == Durability::Immediate
    }

    /// Closes the database and opens it again, as its open did, unless another operation did
    /// since open number `seen`; the counts are read again from the file (a write whose commit
    /// failed may be in it all the same: redb says a failed commit may have become durable).
    /// Under the write guard, so no transaction is running; on failure the slot is left
    /// empty, and the next operation tries again. A file store's file stays locked between the
    /// close and the open, and after an open that failed: its databases are all opened over
    /// the one file the store holds, whose locks the first one took, and which the store lets
    /// go of only when it is dropped (see `crate::held`). So no other process can open the file
    /// meanwhile (another store of this process is refused it by its claim, as ever).
    fn reopen(&self, seen: u64) -> Result<(), StoreError> {
        let Some(open) = &self.reopen else {
            return self.slot().db().map(drop);
        };
        let mut slot = self.db.write().unwrap_or_else(PoisonError::into_inner);
        if slot.opened != seen && slot.db.is_some() {
            return Ok(());
        }
        if let Some(old) = slot.db.take() {
            // Its file and lock are let go even if closing fails (it failed already).
            drop(old.close());
        }
        #[cfg(test)]
        if let Some(hook) = &self.between_close_and_open {
            hook();
        }
        slot.opened = slot.opened.wrapping_add(1);
        let db = open()?;
        let tally = Tally::of(&db)?;
        let _published = self.published();
        *self.tally_lock() = tally;
        slot.db = Some(db);
        Ok(())
    }

    /// Test only: closes the database and opens it again now, as after an I/O error.
    #[cfg(test)]
    pub(crate) fn reopen_now(&self) -> Result<(), StoreError> {
        let seen = self.slot().opened;
        self.reopen(seen)
    }

    /// The durability this store was opened with.
    pub fn durability(&self) -> Durability {
        self.durability
    }

    /// How long a durable commit waits for company, as taken from [`RedbOptions::group_wait`]
    /// (zero with [`Durability::None`]).
    pub fn group_wait(&self) -> Duration {
        self.queue.wait()
    }

    /// Runs `f` in a write transaction, and commits it if `f` says there is something to
    /// commit. Threads that write at the same time share a transaction (group commit, in the
    /// `commit` module): `f` runs whole inside one, may be run a second time alone if another
    /// operation of its batch fails, and returns only once its transaction has committed. It
    /// must therefore own what it reads (hence `'static`) and change nothing but the tables.
    fn write<T: Send + 'static>(
        &self,
        f: impl FnMut(&mut Tables<'_>) -> Result<Done<T>, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let (op, slot) = Op::new(f);
        // (The queue of a store opened with `Durability::None` has no wait: see `from_db`.)
        self.queue.run(op, &|batch| self.commit_batch(batch))?;
        slot.take()
    }

    /// Commits `batch` in one transaction; if that fails (an error or a panic) before the
    /// commit, each operation in one of its own, so that a failure, a panic too, belongs to its
    /// operation alone. A commit that fails may have been made all the same (redb says so):
    /// then every operation of the batch fails with its error, none is run again.
    pub(crate) fn commit_batch(&self, batch: &mut [Queued<Op>]) -> Vec<Result<(), StoreError>> {
        if batch.len() > 1 {
            let mut ops: Vec<&mut Op> = batch.iter_mut().map(|q| &mut q.op).collect();
            match guarded(|| self.commit(&mut ops)) {
                Ok(()) => return batch.iter().map(|_| Ok(())).collect(),
                Err(e) if uncertain(&e) => return batch.iter().map(|_| Err(e.clone())).collect(),
                Err(_) => {}
            }
        }
        batch
            .iter_mut()
            .map(|q| guarded(|| self.commit(&mut [&mut q.op])))
            .collect()
    }

    /// Runs `ops` one after another in one write transaction and commits it, durably unless the
    /// store was opened with [`Durability::None`]; nothing changed, or an error, aborts it
    /// (opened again first if an earlier I/O failure left it refusing: see [`Self::on_db`]).
    fn commit(&self, ops: &mut [&mut Op]) -> Result<(), StoreError> {
        self.on_db(|db| self.commit_on(db, ops))
    }

    fn commit_on(&self, db: &Database, ops: &mut [&mut Op]) -> Result<(), StoreError> {
        let mut txn = db.begin_write().map_err(err("begin write"))?;
        let mut changed = false;
        let delta = {
            let mut t = Tables::open(&txn, &self.tally)?;
            for op in ops.iter_mut() {
                changed |= (op.run)(&mut t)?;
            }
            t.delta
        };
        if !changed {
            txn.abort().map_err(err("abort"))?;
            return Ok(());
        }
        if !self.durable() {
            txn.set_durability(redb::Durability::None)
                .map_err(err("set durability"))?;
        }
        // The rows and the counts become visible together to whoever takes `published`.
        let _published = self.published();
        txn.commit()
            .map_err(|e| StoreError::backend("commit", CommitUncertain(e.into())))?;
        self.tally_lock().apply(delta);
        Ok(())
    }

    /// Whether the next commit is to be durable.
    fn durable(&self) -> bool {
        match self.durability {
            Durability::Immediate => true,
            Durability::None => {
                let n = self.lazy_commits.fetch_add(1, Ordering::Relaxed);
                self.sync_every != 0 && n % self.sync_every == self.sync_every - 1
            }
        }
    }

    fn read<T>(
        &self,
        f: impl Fn(&ReadTransaction) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        self.on_db(|db| f(&db.begin_read().map_err(err("begin read"))?))
    }

    fn admit_sync(&self, job: &NewJob, caps: &Caps) -> Result<Admission, StoreError> {
        self.write(admit_op(job.clone(), *caps))
    }

    fn targets_sync(&self, id: &str) -> Result<Vec<TargetRow>, StoreError> {
        self.read(|txn| {
            let live = txn
                .open_table(LIVE_ROWS)
                .map_err(err("open live rows table"))?;
            let e = err("read targets");
            if live.get((id, JOB_SLOT)).map_err(&e)?.is_some() {
                load_targets(&live, id)
            } else {
                load_targets(&txn.open_table(ROWS).map_err(err("open rows table"))?, id)
            }
        })
    }

    /// The job and its targets from one read transaction: one snapshot of the file.
    pub(crate) fn view_sync(
        &self,
        id: &str,
    ) -> Result<Option<(JobRow, Vec<TargetRow>)>, StoreError> {
        self.read(|txn| {
            let live = txn
                .open_table(LIVE_ROWS)
                .map_err(err("open live rows table"))?;
            if let Some(job) = load_job(&live, id)? {
                return Ok(Some((job, load_targets(&live, id)?)));
            }
            let rows = txn.open_table(ROWS).map_err(err("open rows table"))?;
            match load_job(&rows, id)? {
                Some(job) => Ok(Some((job, load_targets(&rows, id)?))),
                None => Ok(None),
            }
        })
    }

    fn start_target_sync(
        &self,
        id: &str,
        idx: usize,
        now: i64,
    ) -> Result<Option<TargetRow>, StoreError> {
        let id = id.to_owned();
        self.write(move |t| {
            let Some(old) = t.job(&id)? else {
                return Ok(Done(None, false));
            };
            let mut job = old.clone();
            let Some(row) = t.store_target(&mut job, idx, &TargetWrite::Running)? else {
                return Ok(Done(None, false));
            };
            if may_transition(job.status, JobStatus::Running) {
                job.status = JobStatus::Running;
            }
            job.lease = now;
            t.put_job(&old, &job)?;
            Ok(Done(Some(row), true))
        })
    }

    fn finish_target_sync(
        &self,
        id: &str,
        idx: usize,
        write: &TargetWrite,
        now: i64,
        finish: Option<JobStatus>,
    ) -> Result<bool, StoreError> {
        let (id, write) = (id.to_owned(), write.clone());
        self.write(move |t| {
            let Some(old) = t.job(&id)? else {
                return Ok(Done(false, false));
            };
            let mut job = old.clone();
            if t.store_target(&mut job, idx, &write)?.is_none() {
                return Ok(Done(false, false));
            }
            job.lease = now;
            if let Some(status) = finish
                && may_transition(job.status, status)
            {
                job.status = status;
                job.error.clear();
            }
            t.put_job(&old, &job)?;
            Ok(Done(true, true))
        })
    }

    fn set_status_sync(
        &self,
        id: &str,
        status: JobStatus,
        error: &str,
        now: i64,
    ) -> Result<bool, StoreError> {
        let (id, error) = (id.to_owned(), error.to_owned());
        self.write(move |t| {
            let Some(old) = t.job(&id)? else {
                return Ok(Done(false, false));
            };
            if !may_transition(old.status, status) {
                return Ok(Done(false, false));
            }
            let mut job = old.clone();
            job.status = status;
            job.error.clone_from(&error);
            job.lease = now;
            t.put_job(&old, &job)?;
            Ok(Done(true, true))
        })
    }

    fn touch_sync(&self, id: &str, now: i64) -> Result<bool, StoreError> {
        let id = id.to_owned();
        self.write(move |t| {
            let Some(old) = t.job(&id)? else {
                return Ok(Done(false, false));
            };
            if old.lease == now {
                return Ok(Done(true, false));
            }
            let mut job = old.clone();
            job.lease = now;
            t.put_job(&old, &job)?;
            Ok(Done(true, true))
        })
    }

    fn sweep_sync(&self, now: i64, ttl_secs: i64) -> Result<usize, StoreError> {
        let cutoff = now.saturating_sub(ttl_secs);
        // Nothing due (the common case, after every admit): a read, no write lock.
        let due = self.read(|txn| {
            let table = txn.open_table(BY_LEASE).map_err(err("open lease index"))?;
            let first = table.first().map_err(err("sweep"))?;
            Ok(first.is_some_and(|(k, _)| k.value().0 < cutoff))
        })?;
        if !due {
            return Ok(0);
        }
        self.write(move |t| {
            let e = err("sweep");
            let mut due: Vec<(i64, String)> = Vec::new();
            for entry in t.by_lease.range(..(cutoff, "")).map_err(&e)? {
                let (k, _) = entry.map_err(&e)?;
                let (lease, id) = k.value();
                due.push((lease, id.to_owned()));
            }
            let mut n = 0;
            for (lease, id) in &due {
                match t.job_in_scan(id)? {
                    Some(job) if sweepable(job.status, job.lease, now, ttl_secs) => {
                        t.delete_job(&job)?;
                        n += 1;
                    }
                    // An index entry without its job, or with a damaged one: drop it so it is
                    // not met again.
                    None => {
                        t.by_lease.remove((*lease, id.as_str())).map_err(&e)?;
                    }
                    Some(_) => {}
                }
            }
            Ok(Done(n, !due.is_empty()))
        })
    }

    fn evict_sync(&self, max_bytes: u64) -> Result<usize, StoreError> {
        // Under the limit (the common case, after every stored target): no transaction at all.
        // Not behind `published`, so as not to wait out another thread's commit: the total
        // holds every write that returned (this caller's own included); a commit still
        // finishing is seen by the next evict.
        if self.tally_lock().bytes <= max_bytes {
            return Ok(0);
        }
        // Over it with no terminal job to delete (the live jobs alone over the budget): a read,
        // not the write lock, which would wait out another thread's commit for nothing.
        let any = self.read(|txn| {
            let table = txn
                .open_table(BY_CREATED)
                .map_err(err("open created index"))?;
            Ok(table.first().map_err(err("evict"))?.is_some())
        })?;
        if !any {
            return Ok(0);
        }
        self.write(move |t| {
            let e = err("evict");
            let mut n = 0;
            let mut changed = false;
            while t.bytes()? > max_bytes {
                let Some((created, id)) = t.by_created.first().map_err(&e)?.map(|(k, _)| {
                    let (c, id) = k.value();
                    (c, id.to_owned())
                }) else {
                    break;
                };
                changed = true;
                match t.job_in_scan(&id)? {
                    Some(job) if job.status.is_terminal() => {
                        t.delete_job(&job)?;
                        n += 1;
                    }
                    // An entry without a terminal job, or with a damaged one (its bytes count
                    // for nothing): dropped so it is not met again.
                    _ => {
                        t.by_created.remove((created, id.as_str())).map_err(&e)?;
                    }
                }
            }
            Ok(Done(n, changed))
        })
    }

    fn recover_sync(&self, error: &str, now: i64) -> Result<usize, StoreError> {
        let error = error.to_owned();
        self.write(move |t| {
            let ids = live_ids(&t.live_rows)?;
            let mut n = 0;
            for id in &ids {
                let Some(old) = t.job_in_scan(id)? else {
                    continue;
                };
                if !may_transition(old.status, JobStatus::Failed) {
                    continue;
                }
                let mut job = old.clone();
                job.status = JobStatus::Failed;
                job.error.clone_from(&error);
                job.lease = now;
                t.put_job(&old, &job)?;
                n += 1;
            }
            Ok(Done(n, !ids.is_empty()))
        })
    }

    fn live_jobs_sync(&self, caller: Option<&str>) -> Result<usize, StoreError> {
        // After any commit whose rows a read may already have seen.
        let _published = self.published();
        let tally = self.tally_lock();
        let n = match caller {
            None => tally.live,
            Some(c) => tally.by_caller.get(c).copied().unwrap_or(0),
        };
        usize::try_from(n).map_err(|_| StoreError::Corrupt("live count out of range".into()))
    }
}

/// Admit as an operation of a write transaction: reuse check, caps and insert.
pub(crate) fn admit_op(
    job: NewJob,
    caps: Caps,
) -> impl FnMut(&mut Tables<'_>) -> Result<Done<Admission>, StoreError> + Send + 'static {
    move |t| {
        let now = job.now;
        let mut best: Option<(i64, String)> = None;
        let ids = t
            .idem
            .get((job.caller.as_str(), job.idem_key.as_str()))
            .map_err(err("read idem index"))?;
        for id in ids {
            let id = id.map_err(err("read idem index"))?;
            let id = id.value();
            let Some(j) = t.job_in_scan(id)? else {
                continue;
            };
            if reusable(j.status, j.lease, now, caps.ttl_secs)
                && best
                    .as_ref()
                    .is_none_or(|(c, b)| (j.created_at, id) > (*c, b.as_str()))
            {
                best = Some((j.created_at, id.to_owned()));
            }
        }
        if let Some((_, id)) = best {
            return Ok(Done(Admission::Reused { id }, false));
        }
        if job.targets.len() > caps.targets_per_job {
            let a = Admission::TooManyTargets {
                max: caps.targets_per_job,
                got: job.targets.len(),
            };
            return Ok(Done(a, false));
        }
        if t.caller_live(&job.caller)? >= caps.jobs_per_caller as u64 {
            return Ok(Done(Admission::CallerBusy, false));
        }
        if t.live_total()? >= caps.jobs_total as u64 {
            return Ok(Done(Admission::Busy, false));
        }
        if t.job(&job.id)?.is_some() {
            return Err(StoreError::Conflict(format!(
                "job {} already exists",
                job.id
            )));
        }
        let (row, targets) = job.rows();
        t.insert_job(&row, &targets)?;
        Ok(Done(Admission::Created, true))
    }
}

#[async_trait]
impl BatchStore for RedbStore {
    async fn admit(&self, job: &NewJob, caps: &Caps) -> Result<Admission, StoreError> {
        self.admit_sync(job, caps)
    }

    async fn job(&self, id: &str) -> Result<Option<JobRow>, StoreError> {
        self.read(|txn| {
            let live = txn
                .open_table(LIVE_ROWS)
                .map_err(err("open live rows table"))?;
            let rows = txn.open_table(ROWS).map_err(err("open rows table"))?;
            find_job(&live, &rows, id)
        })
    }

    async fn targets(&self, id: &str) -> Result<Vec<TargetRow>, StoreError> {
        self.targets_sync(id)
    }

    async fn view(&self, id: &str) -> Result<Option<(JobRow, Vec<TargetRow>)>, StoreError> {
        self.view_sync(id)
    }

    async fn start_target(
        &self,
        id: &str,
        idx: usize,
        now: i64,
    ) -> Result<Option<TargetRow>, StoreError> {
        self.start_target_sync(id, idx, now)
    }

    async fn finish_target(
        &self,
        id: &str,
        idx: usize,
        write: &TargetWrite,
        now: i64,
        finish: Option<JobStatus>,
    ) -> Result<bool, StoreError> {
        self.finish_target_sync(id, idx, write, now, finish)
    }

    async fn set_status(
        &self,
        id: &str,
        status: JobStatus,
        error: &str,
        now: i64,
    ) -> Result<bool, StoreError> {
        self.set_status_sync(id, status, error, now)
    }

    async fn touch(&self, id: &str, now: i64) -> Result<bool, StoreError> {
        self.touch_sync(id, now)
    }

    async fn sweep(&self, now: i64, ttl_secs: i64) -> Result<usize, StoreError> {
        self.sweep_sync(now, ttl_secs)
    }

    async fn evict(&self, max_bytes: u64) -> Result<usize, StoreError> {
        self.evict_sync(max_bytes)
    }

    async fn recover(&self, error: &str, now: i64) -> Result<usize, StoreError> {
        self.recover_sync(error, now)
    }

    async fn live_jobs(&self, caller: Option<&str>) -> Result<usize, StoreError> {
        self.live_jobs_sync(caller)
    }

    async fn total_bytes(&self) -> Result<u64, StoreError> {
        let _published = self.published();
        Ok(self.tally_lock().bytes)
    }
}

#[cfg(test)]
#[path = "reopen_tests.rs"]
mod reopen_tests;
