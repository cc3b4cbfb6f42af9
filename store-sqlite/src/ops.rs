//! Every [`BatchStore`](rota_core::BatchStore) operation as a synchronous function of the
//! connection: one statement for a read; for a write, its statements, run inside the
//! transaction the caller opened (`batch` opens it, and commits it once for every write of a
//! batch). A write moves the [`Tally`] only after its last statement succeeded, so a write that
//! fails has changed nothing, in the rows (its transaction, or its savepoint, is rolled back) or in
//! the tally. A write may run twice (`batch` runs a batch again after a failure, the first run
//! undone): it changes nothing but the rows and the tally.
//!
//! The rows are built and changed with rota-core's own helpers ([`NewJob::rows`],
//! [`TargetRow::apply`], [`TargetRow::n_bytes`], [`reusable`], [`may_transition`],
//! [`sweepable`](rota_core::sweepable)'s cutoff), so the counts agree byte for byte with every
//! other backend.

use std::collections::HashMap;

use rota_core::{
    Admission, CallerClass, Caps, JobRow, JobStatus, NewJob, StoreError, TargetRow, TargetState,
    TargetWrite, may_transition, reusable,
};
use rusqlite::types::{Type, Value};
use rusqlite::{Connection, OptionalExtension, Row, params};

use crate::error::{BadName, ctx, undecodable};

/// The predicate of the `jobs_live` index, written exactly as there so SQLite uses it.
macro_rules! live {
    () => {
        "status IN ('queued', 'running')"
    };
}
/// The predicate of the `jobs_sweep` and `jobs_evict` indexes.
macro_rules! terminal {
    () => {
        "status NOT IN ('queued', 'running')"
    };
}

// The statements that look rows up, named so the tests can check each one's query plan.
const REUSE: &str = "SELECT id, status, lease FROM jobs WHERE caller = ?1 AND idem_key = ?2 \
                     ORDER BY created_at DESC, id DESC";
/// A job row's columns, in the order [`job_row`] reads them.
macro_rules! job_columns {
    () => {
        "id, caller, class, idem_key, status, error, targets_total, targets_done, created_at, \
         lease, n_bytes"
    };
}
const JOB: &str = concat!("SELECT ", job_columns!(), " FROM jobs WHERE id = ?1");
const TARGETS: &str = "SELECT t.idx, t.url, t.options, t.status, t.result, t.error, t.hint \
                       FROM jobs j JOIN targets t ON t.job = j.seq WHERE j.id = ?1 \
                       ORDER BY t.idx";
const LOCATE: &str = "SELECT j.seq, j.status, t.rowid, t.idx, t.url, t.options, t.status, \
                      t.result, t.error, t.hint FROM jobs j JOIN targets t ON t.job = j.seq \
                      WHERE j.id = ?1 AND t.idx = ?2";
// Sweep and evict read each candidate's whole row, to pass over one they cannot decode (a
// damaged row: its status, say, may not be terminal at all); `seq` comes after the row.
const SWEEP_DUE: &str = concat!(
    "SELECT ",
    job_columns!(),
    ", seq FROM jobs WHERE ",
    terminal!(),
    " AND lease < ?1"
);
const EVICT_OLDEST: &str = concat!(
    "SELECT ",
    job_columns!(),
    ", seq FROM jobs WHERE ",
    terminal!(),
    " ORDER BY created_at, id LIMIT 1 OFFSET ?1"
);
/// The oldest lease of a terminal job: see [`oldest_terminal_lease`].
const OLDEST_LEASE: &str = concat!("SELECT min(lease) FROM jobs WHERE ", terminal!());
const RECOVER: &str = concat!(
    "UPDATE jobs SET status = 'failed', error = ?1, lease = ?2 WHERE ",
    live!()
);
const LIVE_BY_CALLER: &str = concat!(
    "SELECT caller, count(*) FROM jobs WHERE ",
    live!(),
    " GROUP BY caller"
);

/// What the store keeps in memory about its file, read once at open and then moved by each
/// write that changes it, as it succeeds inside its transaction (a batch whose commit fails
/// has its tally read afresh from the rows, see `batch`): the file
/// has one owner, so no other writer can change it, and no write pays for a counter row, nor
/// a cap check for a count over the live jobs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Tally {
    /// The sum of every job's `n_bytes` (one that is not an integer, a damaged row's, left out).
    pub(crate) bytes: u64,
    /// The number of live (queued or running) jobs (one whose caller is not text, a damaged
    /// row's, left out).
    pub(crate) live: usize,
    /// The number of live jobs of each caller that has any.
    pub(crate) live_by_caller: HashMap<String, usize>,
    /// At most the lease of every terminal job the sweep could delete (`i64::MAX` if there is
    /// none): a sweep whose cutoff is at or below it has nothing to do, and need not wait for
    /// the connection (see [`SqliteStore::sweep`](crate::SqliteStore)). Exact when read from the
    /// rows and after a sweep; lowered to `now` by every write that sets a lease (a target
    /// write, a status change, a touch, recovery: the only ways a job becomes terminal or a
    /// terminal job's lease moves), so it may then be below the oldest lease, never above it.
    pub(crate) lease_floor: i64,
}

impl Default for Tally {
    /// The tally of an empty store.
    fn default() -> Tally {
        Tally {
            bytes: 0,
            live: 0,
            live_by_caller: HashMap::new(),
            lease_floor: i64::MAX,
        }
    }
}

impl Tally {
    /// Reads the tally of the store behind `conn` (once, at open).
    pub(crate) fn read(conn: &Connection) -> Result<Tally, StoreError> {
        // A damaged row's byte count (not an integer) is left out, as redb leaves the row.
        let bytes = conn
            .query_row(
                "SELECT coalesce(sum(n_bytes), 0) FROM jobs WHERE typeof(n_bytes) = 'integer'",
                [],
                |r| r.get(0),
            )
            .map_err(ctx("summing the stored bytes"))?;
        let e = ctx("counting live jobs");
        let mut live_by_caller = HashMap::new();
        let mut stmt = conn.prepare(LIVE_BY_CALLER).map_err(&e)?;
        let mut rows = stmt.query([]).map_err(&e)?;
        while let Some(r) = rows.next().map_err(&e)? {
            // A caller that is not text (a damaged row) counts toward no cap: its job is
            // failed `interrupted` by the next start's recovery all the same.
            let Ok(caller) = r.get::<_, String>(0) else {
                continue;
            };
            let n: usize = r.get(1).map_err(&e)?;
            live_by_caller.insert(caller, n);
        }
        Ok(Tally {
            bytes,
            live: live_by_caller.values().sum(),
            live_by_caller,
            lease_floor: oldest_terminal_lease(conn)?,
        })
    }

    /// A write set a job's lease to `now` (see [`Tally::lease_floor`]).
    pub(crate) fn leased(&mut self, now: i64) {
        self.lease_floor = self.lease_floor.min(now);
    }

    /// The live jobs of `caller`, or of all callers.
    pub(crate) fn live_of(&self, caller: Option<&str>) -> usize {
        match caller {
            Some(c) => self.live_by_caller.get(c).copied().unwrap_or(0),
            None => self.live,
        }
    }

    fn move_bytes(&mut self, delta: i128) {
        self.bytes = shift(self.bytes, delta);
    }

    fn job_started(&mut self, caller: &str) {
        self.live += 1;
        *self.live_by_caller.entry(caller.to_owned()).or_insert(0) += 1;
    }

    fn job_ended(&mut self, caller: &str) {
        self.live = self.live.saturating_sub(1);
        if let Some(n) = self.live_by_caller.get_mut(caller) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.live_by_caller.remove(caller);
            }
        }
    }
}

fn name<T>(
    r: &Row<'_>,
    col: usize,
    what: &'static str,
    parse: fn(&str) -> Option<T>,
) -> rusqlite::Result<T> {
    let s: String = r.get(col)?;
    parse(&s).ok_or_else(|| {
        rusqlite::Error::FromSqlConversionFailure(col, Type::Text, Box::new(BadName::new(what, &s)))
    })
}

fn job_row(r: &Row<'_>) -> rusqlite::Result<JobRow> {
    Ok(JobRow {
        id: r.get(0)?,
        caller: r.get(1)?,
        class: name(r, 2, "caller class", CallerClass::parse)?,
        idem_key: r.get(3)?,
        status: name(r, 4, "job status", JobStatus::parse)?,
        error: r.get(5)?,
        targets_total: r.get(6)?,
        targets_done: r.get(7)?,
        created_at: r.get(8)?,
        lease: r.get(9)?,
        n_bytes: r.get(10)?,
    })
}

/// Columns `idx, url, options, status, result, error, hint` from `first` on.
fn target_row(r: &Row<'_>, first: usize) -> rusqlite::Result<TargetRow> {
    Ok(TargetRow {
        idx: r.get(first)?,
        url: r.get(first + 1)?,
        options: r.get(first + 2)?,
        status: name(r, first + 3, "target state", TargetState::parse)?,
        result: r.get(first + 4)?,
        error: r.get(first + 5)?,
        hint: r.get(first + 6)?,
    })
}

pub(crate) fn admit(
    conn: &Connection,
    tally: &mut Tally,
    job: &NewJob,
    caps: &Caps,
) -> Result<Admission, StoreError> {
    let e = ctx("admitting a job");
    {
        let mut stmt = conn.prepare_cached(REUSE).map_err(&e)?;
        let mut rows = stmt.query(params![job.caller, job.idem_key]).map_err(&e)?;
        while let Some(r) = rows.next().map_err(&e)? {
            // A job whose status or lease cannot be read (a damaged row) is not reusable: it
            // is passed over, so the caller's submits of this key still get an answer.
            let (Ok(status), Ok(lease)) = (name(r, 1, "job status", JobStatus::parse), r.get(2))
            else {
                continue;
            };
            if reusable(status, lease, job.now, caps.ttl_secs) {
                return Ok(Admission::Reused {
                    id: r.get(0).map_err(&e)?,
                });
            }
        }
    }
    if job.targets.len() > caps.targets_per_job {
        return Ok(Admission::TooManyTargets {
            max: caps.targets_per_job,
            got: job.targets.len(),
        });
    }
    if tally.live_of(Some(&job.caller)) >= caps.jobs_per_caller {
        return Ok(Admission::CallerBusy);
    }
    if tally.live_of(None) >= caps.jobs_total {
        return Ok(Admission::Busy);
    }
    let exists = conn
        .prepare_cached("SELECT 1 FROM jobs WHERE id = ?1")
        .and_then(|mut s| s.exists([&job.id]))
        .map_err(&e)?;
    if exists {
        return Err(StoreError::Conflict(format!(
            "job id {} already exists",
            job.id
        )));
    }
    let (row, targets) = job.rows();
    conn.prepare_cached(
        "INSERT INTO jobs (id, caller, class, idem_key, status, error, targets_total, \
         targets_done, created_at, lease, n_bytes) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
    )
    .and_then(|mut s| {
        s.execute(params![
            row.id,
            row.caller,
            row.class.as_str(),
            row.idem_key,
            row.status.as_str(),
            row.error,
            row.targets_total,
            row.targets_done,
            row.created_at,
            row.lease,
            row.n_bytes
        ])
    })
    .map_err(&e)?;
    let seq = conn.last_insert_rowid();
    {
        let mut insert = conn
            .prepare_cached(
                "INSERT INTO targets (job, idx, url, options, status, result, error, hint) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            )
            .map_err(&e)?;
        for t in &targets {
            insert
                .execute(params![
                    seq,
                    t.idx,
                    t.url,
                    t.options,
                    t.status.as_str(),
                    t.result,
                    t.error,
                    t.hint
                ])
                .map_err(&e)?;
        }
    }
    tally.move_bytes(i128::from(row.n_bytes));
    tally.job_started(&job.caller);
    Ok(Admission::Created)
}

pub(crate) fn job(conn: &Connection, id: &str) -> Result<Option<JobRow>, StoreError> {
    let e = ctx("reading a job");
    conn.prepare_cached(JOB)
        .and_then(|mut s| s.query_row([id], job_row).optional())
        .map_err(e)
}

/// Job `id`'s targets in idx order. A row whose values cannot be decoded (what [`ctx`] calls
/// corrupt: text that is not UTF-8, a value of the wrong type, an unknown state) is given as
/// [`TargetRow::corrupt`], so that the job's other targets are still read; any other error
/// fails the read.
pub(crate) fn targets(conn: &Connection, id: &str) -> Result<Vec<TargetRow>, StoreError> {
    let e = ctx("reading a job's targets");
    let mut stmt = conn.prepare_cached(TARGETS).map_err(&e)?;
    let mut rows = stmt.query([id]).map_err(&e)?;
    let mut out = Vec::new();
    while let Some(r) = rows.next().map_err(&e)? {
        out.push(match target_row(r, 0).map_err(&e) {
            Ok(t) => t,
            Err(StoreError::Corrupt(why)) => {
                // The idx column if it reads, else the row's place (rows come in idx order).
                let idx = r.get::<_, usize>(0).unwrap_or(out.len());
                TargetRow::corrupt(idx, why)
            }
            Err(other) => return Err(other),
        });
    }
    Ok(out)
}

/// A job's key and status, and its target `idx` with that target's rowid.
struct Located {
    seq: i64,
    status: JobStatus,
    rowid: i64,
    target: TargetRow,
}

fn locate(
    conn: &Connection,
    id: &str,
    idx: usize,
    what: &'static str,
) -> Result<Option<Located>, StoreError> {
    // An idx past i64::MAX names no stored target.
    let Ok(idx) = i64::try_from(idx) else {
        return Ok(None);
    };
    conn.prepare_cached(LOCATE)
        .and_then(|mut s| {
            s.query_row(params![id, idx], |r| {
                Ok(Located {
                    seq: r.get(0)?,
                    status: name(r, 1, "job status", JobStatus::parse)?,
                    rowid: r.get(2)?,
                    target: target_row(r, 3)?,
                })
            })
            .optional()
        })
        .map_err(ctx(what))
}

/// Applies `write` to the located target and the job's counts and lease, inside the open
/// transaction. Returns the row as stored, the change of the job's bytes, and the job's caller
/// if `status` moved the job from live to terminal.
fn store_target(
    conn: &Connection,
    mut at: Located,
    write: &TargetWrite,
    now: i64,
    status: Option<JobStatus>,
    what: &'static str,
) -> Result<(TargetRow, i128, Option<String>), StoreError> {
    let e = ctx(what);
    let (bytes_before, done_before) = (at.target.n_bytes(), at.target.status.is_finished());
    at.target.apply(write);
    let (bytes_after, done_after) = (at.target.n_bytes(), at.target.status.is_finished());
    let t = &at.target;
    conn.prepare_cached(
        "UPDATE targets SET status = ?1, result = ?2, error = ?3, hint = ?4 WHERE rowid = ?5",
    )
    .and_then(|mut s| {
        s.execute(params![
            t.status.as_str(),
            t.result,
            t.error,
            t.hint,
            at.rowid
        ])
    })
    .map_err(&e)?;
    let delta_bytes = i128::from(bytes_after) - i128::from(bytes_before);
    let delta_done = i64::from(done_after) - i64::from(done_before);
    let new_status = status
        .filter(|s| may_transition(at.status, *s))
        .unwrap_or(at.status);
    let bytes = i64_of(delta_bytes).map_err(&e)?;
    if new_status == at.status {
        // Status not written: SQLite then leaves the partial indexes on status alone.
        conn.prepare_cached(
            "UPDATE jobs SET lease = ?1, targets_done = targets_done + ?2, \
             n_bytes = n_bytes + ?3 WHERE seq = ?4",
        )
        .and_then(|mut s| s.execute(params![now, delta_done, bytes, at.seq]))
        .map_err(&e)?;
    } else {
        // An explicit finish clears the job's error, as set_status does with an empty one.
        conn.prepare_cached(
            "UPDATE jobs SET lease = ?1, targets_done = targets_done + ?2, \
             n_bytes = n_bytes + ?3, status = ?5, error = '' WHERE seq = ?4",
        )
        .and_then(|mut s| s.execute(params![now, delta_done, bytes, at.seq, new_status.as_str()]))
        .map_err(&e)?;
    }
    // The caller is read only when a job ends, once per job.
    let ended = if at.status.is_live() && new_status.is_terminal() {
        Some(
            conn.prepare_cached("SELECT caller FROM jobs WHERE seq = ?1")
                .and_then(|mut s| s.query_row([at.seq], |r| r.get(0)))
                .map_err(&e)?,
        )
    } else {
        None
    };
    Ok((at.target, delta_bytes, ended))
}

pub(crate) fn start_target(
    conn: &Connection,
    tally: &mut Tally,
    id: &str,
    idx: usize,
    now: i64,
) -> Result<Option<TargetRow>, StoreError> {
    const WHAT: &str = "starting a target";
    let Some(at) = locate(conn, id, idx, WHAT)? else {
        return Ok(None);
    };
    let running = Some(JobStatus::Running);
    let (row, delta, ended) = store_target(conn, at, &TargetWrite::Running, now, running, WHAT)?;
    tally.move_bytes(delta);
    tally.leased(now);
    if let Some(caller) = ended {
        tally.job_ended(&caller);
    }
    Ok(Some(row))
}

pub(crate) fn finish_target(
    conn: &Connection,
    tally: &mut Tally,
    id: &str,
    idx: usize,
    write: &TargetWrite,
    now: i64,
    finish: Option<JobStatus>,
) -> Result<bool, StoreError> {
    const WHAT: &str = "storing a target";
    let Some(at) = locate(conn, id, idx, WHAT)? else {
        return Ok(false);
    };
    let (_, delta, ended) = store_target(conn, at, write, now, finish, WHAT)?;
    tally.move_bytes(delta);
    tally.leased(now);
    if let Some(caller) = ended {
        tally.job_ended(&caller);
    }
    Ok(true)
}

pub(crate) fn set_status(
    conn: &Connection,
    tally: &mut Tally,
    id: &str,
    status: JobStatus,
    error: &str,
    now: i64,
) -> Result<bool, StoreError> {
    let e = ctx("setting a job's status");
    let from = conn
        .prepare_cached("SELECT status, caller FROM jobs WHERE id = ?1")
        .and_then(|mut s| {
            s.query_row([id], |r| {
                Ok((
                    name(r, 0, "job status", JobStatus::parse)?,
                    r.get::<_, String>(1)?,
                ))
            })
            .optional()
        })
        .map_err(&e)?;
    let Some((from, caller)) = from else {
        return Ok(false);
    };
    if !may_transition(from, status) {
        return Ok(false);
    }
    conn.prepare_cached("UPDATE jobs SET status = ?1, error = ?2, lease = ?3 WHERE id = ?4")
        .and_then(|mut s| s.execute(params![status.as_str(), error, now, id]))
        .map_err(&e)?;
    if from.is_live() && status.is_terminal() {
        tally.job_ended(&caller);
    }
    tally.leased(now);
    Ok(true)
}

pub(crate) fn touch(conn: &Connection, id: &str, now: i64) -> Result<bool, StoreError> {
    // One statement: SQLite runs it as its own transaction.
    conn.prepare_cached("UPDATE jobs SET lease = ?1 WHERE id = ?2")
        .and_then(|mut s| s.execute(params![now, id]))
        .map(|n| n > 0)
        .map_err(ctx("touching a job"))
}

pub(crate) fn sweep(
    conn: &Connection,
    tally: &mut Tally,
    now: i64,
    ttl_secs: i64,
) -> Result<usize, StoreError> {
    const WHAT: &str = "sweeping old jobs";
    let e = ctx(WHAT);
    // rota_core::sweepable: terminal and lease < now - ttl.
    let cutoff = now.saturating_sub(ttl_secs);
    let mut due: Vec<(i64, u64)> = Vec::new();
    {
        let mut stmt = conn.prepare_cached(SWEEP_DUE).map_err(&e)?;
        let mut rows = stmt.query([cutoff]).map_err(&e)?;
        while let Some(r) = rows.next().map_err(&e)? {
            if let Some(found) = decoded(r).map_err(&e)? {
                due.push(found);
            }
        }
    }
    let mut freed = 0;
    for &(seq, n_bytes) in &due {
        delete(conn, seq, WHAT)?;
        freed += i128::from(n_bytes);
    }
    // The floor made exact again: the next sweeps with a cutoff at or below it skip the
    // connection. (One lookup in the `jobs_sweep` index.)
    let floor = oldest_terminal_lease(conn)?;
    // Only terminal jobs are swept: the live counts stay.
    tally.move_bytes(-freed);
    tally.lease_floor = floor;
    Ok(due.len())
}

pub(crate) fn evict(
    conn: &Connection,
    tally: &mut Tally,
    max_bytes: u64,
) -> Result<usize, StoreError> {
    const WHAT: &str = "evicting old jobs";
    let e = ctx(WHAT);
    if tally.bytes <= max_bytes {
        return Ok(0);
    }
    let (mut left, mut deleted) = (tally.bytes, 0);
    // The damaged rows met so far, left in place: the next oldest is past them.
    let mut passed: i64 = 0;
    while left > max_bytes {
        let oldest = conn
            .prepare_cached(EVICT_OLDEST)
            .and_then(|mut s| s.query_row([passed], |r| Ok(decoded(r))).optional())
            .map_err(&e)?;
        let (seq, n_bytes) = match oldest {
            None => break,
            Some(Ok(Some(found))) => found,
            Some(Ok(None)) => {
                passed += 1;
                continue;
            }
            Some(Err(err)) => return Err(e(err)),
        };
        delete(conn, seq, WHAT)?;
        left = left.saturating_sub(n_bytes);
        deleted += 1;
    }
    // Only terminal jobs are evicted: the live counts stay.
    tally.bytes = left;
    Ok(deleted)
}

/// The `seq` and byte count of a sweep or evict candidate (a job row, then `seq`), or `None`
/// for a row that does not decode (damaged: passed over and left as it is).
fn decoded(r: &Row<'_>) -> rusqlite::Result<Option<(i64, u64)>> {
    match job_row(r) {
        Ok(job) => Ok(Some((r.get(11)?, job.n_bytes))),
        Err(e) if undecodable(&e) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Deletes job `seq` and its targets.
fn delete(conn: &Connection, seq: i64, what: &'static str) -> Result<(), StoreError> {
    let e = ctx(what);
    conn.prepare_cached("DELETE FROM targets WHERE job = ?1")
        .and_then(|mut s| s.execute([seq]))
        .map_err(&e)?;
    conn.prepare_cached("DELETE FROM jobs WHERE seq = ?1")
        .and_then(|mut s| s.execute([seq]))
        .map_err(&e)?;
    Ok(())
}

pub(crate) fn recover(
    conn: &Connection,
    tally: &mut Tally,
    error: &str,
    now: i64,
) -> Result<usize, StoreError> {
    // One statement, in the batch's transaction like every write. Every live job is now failed.
    let n = conn
        .prepare_cached(RECOVER)
        .and_then(|mut s| s.execute(params![error, now]))
        .map_err(ctx("recovering live jobs"))?;
    tally.live = 0;
    tally.live_by_caller.clear();
    if n > 0 {
        tally.leased(now);
    }
    Ok(n)
}

/// The oldest lease a sweep could find due ([`Tally::lease_floor`], exact): the least number
/// in the lease column of the terminal jobs, rounded down, or `i64::MAX` if none has one. A
/// lease that is not a number (a damaged row's) is never below a sweep's cutoff, since SQLite
/// orders every number before any text or blob, and a NULL is never compared true: such a row
/// is never due, and is left out here.
fn oldest_terminal_lease(conn: &Connection) -> Result<i64, StoreError> {
    let oldest: Value = conn
        .prepare_cached(OLDEST_LEASE)
        .and_then(|mut s| s.query_row([], |r| r.get(0)))
        .map_err(ctx("finding the oldest lease"))?;
    Ok(match oldest {
        Value::Integer(n) => n,
        // A damaged row's real number: the integer at or below it (saturating).
        Value::Real(x) => x.floor() as i64,
        Value::Null | Value::Text(_) | Value::Blob(_) => i64::MAX,
    })
}

#[cfg(test)]
impl Tally {
    /// A kept tally is true to `recount` (one read afresh from the rows): the same counts, and
    /// a lease floor at or below the exact one.
    pub(crate) fn assert_agrees(&self, recount: &Tally) {
        let floor = self.lease_floor;
        assert!(
            floor <= recount.lease_floor,
            "lease floor {floor} above the oldest terminal lease {}",
            recount.lease_floor
        );
        assert_eq!(
            &Tally {
                lease_floor: recount.lease_floor,
                ..self.clone()
            },
            recount
        );
    }
}

/// `total` moved by `delta`, never below 0.
fn shift(total: u64, delta: i128) -> u64 {
    u64::try_from((i128::from(total) + delta).max(0)).unwrap_or(u64::MAX)
}

fn i64_of(v: i128) -> rusqlite::Result<i64> {
    i64::try_from(v).map_err(|e| rusqlite::Error::ToSqlConversionFailure(Box::new(e)))
}

/// Runs `PRAGMA integrity_check`: `Ok` when SQLite says "ok", else its findings.
pub(crate) fn integrity_check(conn: &Connection) -> Result<(), StoreError> {
    let e = ctx("checking integrity");
    let lines: Vec<String> = conn
        .prepare("PRAGMA integrity_check")
        .and_then(|mut s| s.query_map([], |r| r.get(0))?.collect())
        .map_err(&e)?;
    if lines.len() == 1 && lines.first().is_some_and(|l| l == "ok") {
        Ok(())
    } else {
        Err(StoreError::Corrupt(format!(
            "integrity check: {}",
            lines.join("; ")
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The query plan of `sql`, one detail line per step.
    fn plan(conn: &Connection, sql: &str) -> Vec<String> {
        let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
        let nulls = vec![rusqlite::types::Null; stmt.parameter_count()];
        stmt.query_map(rusqlite::params_from_iter(nulls), |r| r.get::<_, String>(3))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    }

    fn new_job(n: u32, caller: &str) -> NewJob {
        NewJob {
            id: format!("{n:032x}"),
            caller: caller.into(),
            class: CallerClass::Fleet,
            idem_key: format!("key-{n}"),
            targets: vec![("u0".into(), "{}".into()), ("u1".into(), "{}".into())],
            now: 100,
        }
    }

    /// The kept tally after every kind of write agrees with one read afresh from the rows.
    #[test]
    fn the_kept_tally_matches_a_recount_after_every_write() {
        let conn = crate::open::open_memory().unwrap();
        let mut tally = Tally::read(&conn).unwrap();
        assert_eq!(tally, Tally::default());
        let caps = Caps {
            targets_per_job: 32,
            jobs_per_caller: 2,
            jobs_total: 3,
            ttl_secs: 10,
        };
        let check = |conn: &Connection, tally: &Tally, live: usize, a: usize, b: usize| {
            tally.assert_agrees(&Tally::read(conn).unwrap());
            assert_eq!(
                (
                    tally.live_of(None),
                    tally.live_of(Some("a")),
                    tally.live_of(Some("b"))
                ),
                (live, a, b)
            );
        };
        let done = TargetWrite::Done {
            result: r#"{"content":"ok"}"#.into(),
        };
        for (n, caller) in [(1, "a"), (2, "a"), (3, "b")] {
            let job = new_job(n, caller);
            assert_eq!(
                admit(&conn, &mut tally, &job, &caps).unwrap(),
                Admission::Created
            );
        }
        check(&conn, &tally, 3, 2, 1);
        // The caps are read from the tally.
        let over = new_job(4, "a");
        assert_eq!(
            admit(&conn, &mut tally, &over, &caps).unwrap(),
            Admission::CallerBusy
        );
        let over = new_job(4, "c");
        assert_eq!(
            admit(&conn, &mut tally, &over, &caps).unwrap(),
            Admission::Busy
        );
        check(&conn, &tally, 3, 2, 1);
        // start (queued → running) keeps the counts; a finish ends the job.
        let id1 = format!("{:032x}", 1);
        start_target(&conn, &mut tally, &id1, 0, 101).unwrap();
        check(&conn, &tally, 3, 2, 1);
        finish_target(&conn, &mut tally, &id1, 0, &done, 101, None).unwrap();
        finish_target(
            &conn,
            &mut tally,
            &id1,
            1,
            &done,
            101,
            Some(JobStatus::Done),
        )
        .unwrap();
        check(&conn, &tally, 2, 1, 1);
        // A second terminal status changes nothing; set_status ends a live job once.
        assert!(!set_status(&conn, &mut tally, &id1, JobStatus::Failed, "x", 102).unwrap());
        let id3 = format!("{:032x}", 3);
        assert!(set_status(&conn, &mut tally, &id3, JobStatus::Cancelled, "", 102).unwrap());
        check(&conn, &tally, 1, 1, 0);
        // Sweep and evict delete terminal jobs only.
        assert_eq!(sweep(&conn, &mut tally, 1_000, 10).unwrap(), 2);
        check(&conn, &tally, 1, 1, 0);
        assert_eq!(evict(&conn, &mut tally, 0).unwrap(), 0);
        check(&conn, &tally, 1, 1, 0);
        // Recovery fails every live job.
        assert_eq!(recover(&conn, &mut tally, "interrupted", 103).unwrap(), 1);
        check(&conn, &tally, 0, 0, 0);
        assert_eq!(evict(&conn, &mut tally, 0).unwrap(), 1);
        check(&conn, &tally, 0, 0, 0);
        assert_eq!(tally.bytes, 0);
    }

    #[test]
    fn every_lookup_is_served_by_an_index_never_a_table_scan() {
        let conn = crate::open::open_memory().unwrap();
        let want = [
            (REUSE, "jobs_by_key"),
            (JOB, "sqlite_autoindex_jobs_1"),
            (TARGETS, "sqlite_autoindex_targets_1"),
            (LOCATE, "sqlite_autoindex_targets_1"),
            (SWEEP_DUE, "jobs_sweep"),
            (OLDEST_LEASE, "jobs_sweep"),
            (EVICT_OLDEST, "jobs_evict"),
            (RECOVER, "jobs_live"),
            (LIVE_BY_CALLER, "jobs_live"),
        ];
        for (sql, index) in want {
            let steps = plan(&conn, sql);
            assert!(
                steps.iter().any(|s| s.contains(index)),
                "{sql}: expected index {index}, plan {steps:?}"
            );
            for s in &steps {
                let scans_a_table = s.starts_with("SCAN") && !s.contains("INDEX");
                assert!(
                    !scans_a_table && !s.contains("TEMP B-TREE"),
                    "{sql}: plan {steps:?}"
                );
            }
        }
    }
}
