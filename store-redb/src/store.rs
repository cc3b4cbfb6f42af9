//! [`RedbStore`]: every [`BatchStore`] operation as one redb transaction.

use std::sync::atomic::{AtomicU32, Ordering};

use async_trait::async_trait;
use redb::{
    Database, MultimapTable, ReadTransaction, ReadableDatabase, ReadableMultimapTable,
    ReadableTable, Table, WriteTransaction,
};
use rota_core::{
    Admission, BatchStore, Caps, JobRow, JobStatus, NewJob, StoreError, TargetRow, TargetWrite,
    may_transition, reusable, sweepable,
};

use crate::codec::{decode_job, decode_target, decode_u64, encode_job, encode_target, encode_u64};
use crate::error::err;
use crate::tables::*;

/// How much a commit is worth after a crash.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Durability {
    /// Every acknowledged write survives a crash (`kill -9`, power loss): each commit waits for
    /// an fsync, which bounds a store to a few thousand commits a second (~5 k/s measured on
    /// this project's machine when idle). Marking a target running is the one exception, and a
    /// harmless one: see [`RedbStore`]. The default.
    #[default]
    Immediate,
    /// Commits do not wait for the disk (about 6× the commits a second). **May lose the most
    /// recent writes on a crash, never corrupts**: after a crash the store opens as of its last
    /// durable commit, every job in it whole, every index and count in step. One commit in
    /// [`RedbOptions::sync_every`] is made durable, and so is closing the store (dropping it),
    /// which bounds the loss to the commits since the last of those.
    None,
}

/// The default of [`RedbOptions::sync_every`].
pub const SYNC_EVERY: u32 = 1000;

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
}

impl Default for RedbOptions {
    fn default() -> Self {
        RedbOptions {
            durability: Durability::Immediate,
            sync_every: SYNC_EVERY,
        }
    }
}

/// A [`BatchStore`] in a redb database: a single file owned by one process, or memory.
///
/// Every operation is one redb transaction: admit (reuse check, caps and insert) is one write
/// transaction, so concurrent admits are serialized by redb's single writer and never exceed a
/// cap. The layout is in the `tables` module: jobs by id, targets by (job id, idx), job ids by
/// (caller, idem key), the live jobs and per-caller live counts, the terminal jobs by lease (for
/// sweep) and by `created_at` (for evict), and a meta table with the magic, the schema version
/// and the counters, all kept in step in the same transactions.
///
/// # Fewer fsyncs per target
///
/// The runner stores two writes per target: [`start_target`](BatchStore::start_target), then
/// [`finish_target`](BatchStore::finish_target), which may also carry the job's terminal
/// status. Two durable commits would cost two fsyncs per target, so `start_target` commits
/// with redb's `Durability::None`: it is visible at once to every later read and
/// transaction, but not synced. redb documents (design.md, "Non-durable commits") that a
/// non-durable commit is persisted by the next durable commit, which writes the whole state,
/// and that a crash before that rolls the file back to the last durable commit, consistent. So
/// the outcome's durable commit persists both writes with one fsync. A crash in between loses
/// only the "running" mark of a target whose outcome was never acknowledged: the job is still
/// queued or running on disk, and recovery fails it `interrupted` either way. (Any other
/// durable commit in between, another job's admit or outcome, persists the mark early, which
/// is just as harmless.) The crash tests check both halves: an unfollowed start is lost, and
/// the start before a durable outcome is kept.
///
/// # Async
///
/// redb is synchronous. Each operation is a short transaction (well under a millisecond of
/// CPU, plus one fsync for a durable commit), so it runs inline in the async fn rather than through
/// `spawn_blocking`: handing every call to the blocking pool and back was measured too slow for
/// the two calls a target makes. The cost is that a commit holds its runtime thread for the
/// length of its fsync, and that a second writer waits for redb's write lock on its own thread;
/// the runner has at most two workers, so that is a short, bounded wait.
#[derive(Debug)]
pub struct RedbStore {
    db: Database,
    durability: Durability,
    sync_every: u32,
    /// Commits since the last durable one, with [`Durability::None`].
    lazy_commits: AtomicU32,
}

/// What a commit must promise.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Commit {
    /// Survives a crash (unless the store was opened with [`Durability::None`]).
    Durable,
    /// May be lost in a crash: only `start_target`.
    Lazy,
}

/// Every table, open in one write transaction.
pub(crate) struct Tables<'t> {
    meta: Table<'t, &'static str, &'static [u8]>,
    jobs: Table<'t, &'static str, &'static [u8]>,
    targets: Table<'t, (&'static str, u64), &'static [u8]>,
    idem: MultimapTable<'t, (&'static str, &'static str), &'static str>,
    live: Table<'t, &'static str, ()>,
    caller_live: Table<'t, &'static str, u64>,
    by_lease: Table<'t, (i64, &'static str), ()>,
    by_created: Table<'t, (i64, &'static str), ()>,
}

impl<'t> Tables<'t> {
    /// Opens (creating on first use) every table.
    pub(crate) fn open(txn: &'t WriteTransaction) -> Result<Self, StoreError> {
        Ok(Tables {
            meta: txn.open_table(META).map_err(err("open meta table"))?,
            jobs: txn.open_table(JOBS).map_err(err("open jobs table"))?,
            targets: txn.open_table(TARGETS).map_err(err("open targets table"))?,
            idem: txn
                .open_multimap_table(IDEM)
                .map_err(err("open idem table"))?,
            live: txn.open_table(LIVE).map_err(err("open live table"))?,
            caller_live: txn
                .open_table(CALLER_LIVE)
                .map_err(err("open caller_live table"))?,
            by_lease: txn.open_table(BY_LEASE).map_err(err("open lease index"))?,
            by_created: txn
                .open_table(BY_CREATED)
                .map_err(err("open created index"))?,
        })
    }

    /// Writes the magic, the version and zero counters: a new store.
    pub(crate) fn init(&mut self) -> Result<(), StoreError> {
        let e = err("initialize meta");
        self.meta.insert(MAGIC_KEY, MAGIC).map_err(&e)?;
        self.meta
            .insert(VERSION_KEY, VERSION.as_bytes())
            .map_err(&e)?;
        for name in [TOTAL_BYTES, LIVE_TOTAL] {
            self.meta
                .insert(name, encode_u64(0).as_slice())
                .map_err(&e)?;
        }
        Ok(())
    }

    fn counter(&self, name: &str) -> Result<u64, StoreError> {
        counter(&self.meta, name)
    }

    fn add(&mut self, name: &str, delta: i64) -> Result<(), StoreError> {
        let n = self.counter(name)?;
        let n = n
            .checked_add_signed(delta)
            .ok_or_else(|| StoreError::Corrupt(format!("meta {name} out of range")))?;
        self.meta
            .insert(name, encode_u64(n).as_slice())
            .map_err(err("write meta counter"))?;
        Ok(())
    }

    fn caller_live(&self, caller: &str) -> Result<u64, StoreError> {
        Ok(self
            .caller_live
            .get(caller)
            .map_err(err("read caller live count"))?
            .map_or(0, |g| g.value()))
    }

    fn add_caller_live(&mut self, caller: &str, delta: i64) -> Result<(), StoreError> {
        let e = err("write caller live count");
        let n = self
            .caller_live(caller)?
            .checked_add_signed(delta)
            .ok_or_else(|| StoreError::Corrupt("caller live count out of range".into()))?;
        if n == 0 {
            self.caller_live.remove(caller).map_err(&e)?;
        } else {
            self.caller_live.insert(caller, n).map_err(&e)?;
        }
        Ok(())
    }

    fn job(&self, id: &str) -> Result<Option<JobRow>, StoreError> {
        load_job(&self.jobs, id)
    }

    /// Stores a new job and its targets, with every index and counter.
    fn insert_job(&mut self, job: &JobRow, targets: &[TargetRow]) -> Result<(), StoreError> {
        let e = err("admit");
        let id = job.id.as_str();
        self.jobs
            .insert(id, encode_job(job).as_slice())
            .map_err(&e)?;
        for t in targets {
            self.targets
                .insert((id, t.idx as u64), encode_target(t).as_slice())
                .map_err(&e)?;
        }
        self.idem
            .insert((job.caller.as_str(), job.idem_key.as_str()), id)
            .map_err(&e)?;
        self.live.insert(id, ()).map_err(&e)?;
        self.add_caller_live(&job.caller, 1)?;
        self.add(LIVE_TOTAL, 1)?;
        self.add(TOTAL_BYTES, bytes_delta(0, job.n_bytes)?)?;
        Ok(())
    }

    /// Replaces the job row `old` with `new`, keeping the indexes and counters in step.
    fn put_job(&mut self, old: &JobRow, new: &JobRow) -> Result<(), StoreError> {
        let e = err("write job");
        let id = new.id.as_str();
        if old.status.is_live() && new.status.is_terminal() {
            self.live.remove(id).map_err(&e)?;
            self.add_caller_live(&new.caller, -1)?;
            self.add(LIVE_TOTAL, -1)?;
            self.by_lease.insert((new.lease, id), ()).map_err(&e)?;
            self.by_created
                .insert((new.created_at, id), ())
                .map_err(&e)?;
        } else if old.status.is_terminal() && old.lease != new.lease {
            self.by_lease.remove((old.lease, id)).map_err(&e)?;
            self.by_lease.insert((new.lease, id), ()).map_err(&e)?;
        }
        if old.n_bytes != new.n_bytes {
            self.add(TOTAL_BYTES, bytes_delta(old.n_bytes, new.n_bytes)?)?;
        }
        self.jobs
            .insert(id, encode_job(new).as_slice())
            .map_err(&e)?;
        Ok(())
    }

    /// Deletes a job with its targets, index entries and counts.
    fn delete_job(&mut self, job: &JobRow) -> Result<(), StoreError> {
        let e = err("delete job");
        let id = job.id.as_str();
        self.targets
            .retain_in((id, 0u64)..=(id, u64::MAX), |_, _| false)
            .map_err(&e)?;
        self.jobs.remove(id).map_err(&e)?;
        self.idem
            .remove((job.caller.as_str(), job.idem_key.as_str()), id)
            .map_err(&e)?;
        if job.status.is_live() {
            self.live.remove(id).map_err(&e)?;
            self.add_caller_live(&job.caller, -1)?;
            self.add(LIVE_TOTAL, -1)?;
        } else {
            self.by_lease.remove((job.lease, id)).map_err(&e)?;
            self.by_created.remove((job.created_at, id)).map_err(&e)?;
        }
        self.add(TOTAL_BYTES, bytes_delta(job.n_bytes, 0)?)?;
        Ok(())
    }

    /// Applies `write` to target `idx` of `job`, updating the job's `targets_done` and
    /// `n_bytes` (the caller writes the job). The row as stored, or `None` if there is no such
    /// target.
    fn store_target(
        &mut self,
        job: &mut JobRow,
        idx: usize,
        write: &TargetWrite,
    ) -> Result<Option<TargetRow>, StoreError> {
        let e = err("write target");
        let key = (job.id.as_str(), idx as u64);
        let old = match self.targets.get(key).map_err(&e)? {
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
        self.targets
            .insert(key, encode_target(&row).as_slice())
            .map_err(&e)?;
        Ok(Some(row))
    }
}

fn counter(
    meta: &impl ReadableTable<&'static str, &'static [u8]>,
    name: &str,
) -> Result<u64, StoreError> {
    match meta.get(name).map_err(err("read meta counter"))? {
        Some(g) => decode_u64(name, g.value()),
        None => Err(StoreError::Corrupt(format!("meta {name} is missing"))),
    }
}

fn load_job(
    jobs: &impl ReadableTable<&'static str, &'static [u8]>,
    id: &str,
) -> Result<Option<JobRow>, StoreError> {
    match jobs.get(id).map_err(err("read job"))? {
        Some(g) => decode_job(id, g.value()).map(Some),
        None => Ok(None),
    }
}

fn bytes_delta(old: u64, new: u64) -> Result<i64, StoreError> {
    let d = i128::from(new) - i128::from(old);
    i64::try_from(d).map_err(|_| StoreError::Corrupt("byte count out of range".into()))
}

/// What a write operation did: its result, and whether there is anything to commit.
struct Done<T>(T, bool);

impl RedbStore {
    pub(crate) fn from_db(db: Database, opts: &RedbOptions) -> Self {
        RedbStore {
            db,
            durability: opts.durability,
            sync_every: opts.sync_every,
            lazy_commits: AtomicU32::new(0),
        }
    }

    pub(crate) fn db(&self) -> &Database {
        &self.db
    }

    /// The durability this store was opened with.
    pub fn durability(&self) -> Durability {
        self.durability
    }

    /// Runs `f` in one write transaction, and commits it if `f` says there is something to
    /// commit; an error or nothing to commit aborts it.
    fn write<T>(
        &self,
        kind: Commit,
        f: impl FnOnce(&mut Tables<'_>) -> Result<Done<T>, StoreError>,
    ) -> Result<T, StoreError> {
        let mut txn = self.db.begin_write().map_err(err("begin write"))?;
        let Done(out, changed) = {
            let mut t = Tables::open(&txn)?;
            f(&mut t)?
        };
        if !changed {
            txn.abort().map_err(err("abort"))?;
            return Ok(out);
        }
        if !self.durable(kind) {
            txn.set_durability(redb::Durability::None)
                .map_err(err("set durability"))?;
        }
        txn.commit().map_err(err("commit"))?;
        Ok(out)
    }

    fn durable(&self, kind: Commit) -> bool {
        match self.durability {
            Durability::Immediate => kind == Commit::Durable,
            Durability::None => {
                let n = self.lazy_commits.fetch_add(1, Ordering::Relaxed);
                self.sync_every != 0 && n % self.sync_every == self.sync_every - 1
            }
        }
    }

    fn read<T>(
        &self,
        f: impl FnOnce(&ReadTransaction) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let txn = self.db.begin_read().map_err(err("begin read"))?;
        f(&txn)
    }

    fn admit_sync(&self, job: &NewJob, caps: &Caps) -> Result<Admission, StoreError> {
        self.write(Commit::Durable, |t| {
            let now = job.now;
            let mut best: Option<(i64, String)> = None;
            let ids = t
                .idem
                .get((job.caller.as_str(), job.idem_key.as_str()))
                .map_err(err("read idem index"))?;
            for id in ids {
                let id = id.map_err(err("read idem index"))?;
                let id = id.value();
                let Some(j) = load_job(&t.jobs, id)? else {
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
            if t.counter(LIVE_TOTAL)? >= caps.jobs_total as u64 {
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
        })
    }

    fn targets_sync(&self, id: &str) -> Result<Vec<TargetRow>, StoreError> {
        self.read(|txn| {
            let table = txn.open_table(TARGETS).map_err(err("open targets table"))?;
            let e = err("read targets");
            let mut out = Vec::new();
            for entry in table.range((id, 0u64)..=(id, u64::MAX)).map_err(&e)? {
                let (k, v) = entry.map_err(&e)?;
                out.push(decode_target(k.value().1, v.value())?);
            }
            Ok(out)
        })
    }

    fn start_target_sync(
        &self,
        id: &str,
        idx: usize,
        now: i64,
    ) -> Result<Option<TargetRow>, StoreError> {
        self.write(Commit::Lazy, |t| {
            let Some(old) = t.job(id)? else {
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
        self.write(Commit::Durable, |t| {
            let Some(old) = t.job(id)? else {
                return Ok(Done(false, false));
            };
            let mut job = old.clone();
            if t.store_target(&mut job, idx, write)?.is_none() {
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
        self.write(Commit::Durable, |t| {
            let Some(old) = t.job(id)? else {
                return Ok(Done(false, false));
            };
            if !may_transition(old.status, status) {
                return Ok(Done(false, false));
            }
            let mut job = old.clone();
            job.status = status;
            job.error = error.to_owned();
            job.lease = now;
            t.put_job(&old, &job)?;
            Ok(Done(true, true))
        })
    }

    fn touch_sync(&self, id: &str, now: i64) -> Result<bool, StoreError> {
        self.write(Commit::Durable, |t| {
            let Some(old) = t.job(id)? else {
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
        self.write(Commit::Durable, |t| {
            let e = err("sweep");
            let mut due: Vec<(i64, String)> = Vec::new();
            for entry in t.by_lease.range(..(cutoff, "")).map_err(&e)? {
                let (k, _) = entry.map_err(&e)?;
                let (lease, id) = k.value();
                due.push((lease, id.to_owned()));
            }
            let mut n = 0;
            for (lease, id) in &due {
                match t.job(id)? {
                    Some(job) if sweepable(job.status, job.lease, now, ttl_secs) => {
                        t.delete_job(&job)?;
                        n += 1;
                    }
                    // An index entry without its job: drop it so it is not met again.
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
        // Under the limit (the common case, after every stored target): a read, no write lock.
        let over = self.read(|txn| {
            let meta = txn.open_table(META).map_err(err("open meta table"))?;
            Ok(counter(&meta, TOTAL_BYTES)? > max_bytes)
        })?;
        if !over {
            return Ok(0);
        }
        self.write(Commit::Durable, |t| {
            let e = err("evict");
            let mut n = 0;
            let mut changed = false;
            while t.counter(TOTAL_BYTES)? > max_bytes {
                let Some((created, id)) = t.by_created.first().map_err(&e)?.map(|(k, _)| {
                    let (c, id) = k.value();
                    (c, id.to_owned())
                }) else {
                    break;
                };
                changed = true;
                match t.job(&id)? {
                    Some(job) if job.status.is_terminal() => {
                        t.delete_job(&job)?;
                        n += 1;
                    }
                    _ => {
                        t.by_created.remove((created, id.as_str())).map_err(&e)?;
                    }
                }
            }
            Ok(Done(n, changed))
        })
    }

    fn recover_sync(&self, error: &str, now: i64) -> Result<usize, StoreError> {
        self.write(Commit::Durable, |t| {
            let e = err("recover");
            let mut ids = Vec::new();
            for entry in t.live.iter().map_err(&e)? {
                let (k, _) = entry.map_err(&e)?;
                ids.push(k.value().to_owned());
            }
            let mut n = 0;
            for id in &ids {
                let Some(old) = t.job(id)? else {
                    t.live.remove(id.as_str()).map_err(&e)?;
                    continue;
                };
                if !may_transition(old.status, JobStatus::Failed) {
                    continue;
                }
                let mut job = old.clone();
                job.status = JobStatus::Failed;
                job.error = error.to_owned();
                job.lease = now;
                t.put_job(&old, &job)?;
                n += 1;
            }
            Ok(Done(n, !ids.is_empty()))
        })
    }

    fn live_jobs_sync(&self, caller: Option<&str>) -> Result<usize, StoreError> {
        self.read(|txn| {
            let n = match caller {
                None => {
                    let meta = txn.open_table(META).map_err(err("open meta table"))?;
                    counter(&meta, LIVE_TOTAL)?
                }
                Some(c) => {
                    let table = txn
                        .open_table(CALLER_LIVE)
                        .map_err(err("open caller_live table"))?;
                    let n = table.get(c).map_err(err("read caller live count"))?;
                    n.map_or(0, |g| g.value())
                }
            };
            usize::try_from(n).map_err(|_| StoreError::Corrupt("live count out of range".into()))
        })
    }
}

#[async_trait]
impl BatchStore for RedbStore {
    async fn admit(&self, job: &NewJob, caps: &Caps) -> Result<Admission, StoreError> {
        self.admit_sync(job, caps)
    }

    async fn job(&self, id: &str) -> Result<Option<JobRow>, StoreError> {
        self.read(|txn| {
            let table = txn.open_table(JOBS).map_err(err("open jobs table"))?;
            load_job(&table, id)
        })
    }

    async fn targets(&self, id: &str) -> Result<Vec<TargetRow>, StoreError> {
        self.targets_sync(id)
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
        self.read(|txn| {
            let meta = txn.open_table(META).map_err(err("open meta table"))?;
            counter(&meta, TOTAL_BYTES)
        })
    }
}
