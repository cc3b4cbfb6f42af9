//! Group commit: the writes that queue while one is running share its transaction.
//!
//! Every write of the store ([`SqliteStore`](crate::SqliteStore)'s admit, start, finish, status,
//! sweep, evict and recover) is queued as a [`Write`], and its thread then waits for the
//! connection. The thread that takes the connection (the *leader*) runs every write queued by
//! then, and those queued while it runs them, up to [`MAX_BATCH`], in one `BEGIN IMMEDIATE`
//! transaction; commits once; and hands each write its result. The writes run back to back
//! while each succeeds; once one fails after others, the transaction is rolled back and they
//! run again, each after the first inside a savepoint of its own (see `Segment`). A waiting
//! thread spins for a short while, then sleeps until a batch has done its write (it returns
//! with its result, without taking the connection) or no thread leads (it then leads). One
//! leader at a time: it leads until its own write is done.
//!
//! - **Why.** A commit is about half of a small write's cost on a WAL file (its pages written
//!   to the WAL, checksummed, and every thousand pages a checkpoint: `perf` of rota-bench's
//!   SQLite runner rows put 53 % of the samples under `COMMIT`). Two workers storing
//!   targets back to back each find the other's write queued behind their own, so one commit
//!   carries both; and the leader runs the other's write on warm caches instead of handing the
//!   connection, and every page it touched, to the other core.
//! - **What a caller sees** is what one transaction per write gave: a write is answered Ok only
//!   once the commit that holds it has succeeded, and it is then stored; a write that fails (its
//!   own error) is rolled back (to its savepoint, in the batch's second try) and changes nothing,
//!   while the others of its batch go on. A write may so run more than once, each run but the last
//!   undone: twice where a write after it fails, and a third time where a later write's failure
//!   then rolls back the whole transaction of the second try (a nearly full disk); an undone run
//!   changes nothing but the rows and the tally. Every write of a transaction is answered when it
//!   ends: if the commit fails, each write in it gets that error, including one that had failed on
//!   its own (its failure may have come from an earlier write that is now lost), and none of them
//!   is stored. A write whose own failure makes SQLite roll the whole transaction back (a full
//!   disk, an I/O error: a savepoint cannot hold those back) gets its own error, and the writes
//!   before it run again in a new transaction, as they would have alone; where SQLite ends the
//!   transaction under a write that did not fail, each write in it gets an error and none is
//!   stored. The writes after either run in a new transaction. (Said of a transaction with
//!   savepoints: in one without, a write that fails, or under which SQLite ends the transaction,
//!   after others sends them all and itself to run again in a new transaction with savepoints, and
//!   what they get is decided there.)
//! - **The tally.** Each write moves the in-memory tally as it succeeds inside the transaction,
//!   so the next write of the batch sees it (two admits of one batch both count against the
//!   caps). A transaction that fails (or panics) leaves the tally ahead of the rows: it is then
//!   marked stale and read afresh from the rows before anything reads it again. The byte total
//!   and the lease floor are published ([`Published`]) for evict's and sweep's lock-free reads
//!   before any write of a batch is answered, so a thread that evicts or sweeps right after its
//!   write sees it.
//! - **Panics.** A panic while the leader runs a batch (inside SQLite or rusqlite) is caught:
//!   the transaction is rolled back and every write of the batch not yet answered gets an
//!   error, so no waiting thread waits for ever and the leader's own caller gets an error too.
//! - **A `ROLLBACK` that fails** (an I/O error) leaves the failed transaction open: it is rolled
//!   back again before the connection's next use and before each new transaction
//!   ([`Db::end_stray_transaction`]), so its writes are never read or committed later and the
//!   store's writes do not all fail on `BEGIN` from then on.

use std::collections::VecDeque;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use rota_core::StoreError;
use rusqlite::Connection;

use crate::error::ctx;
use crate::ops::Tally;

/// At most this many writes share a commit: a leader does not keep its own caller waiting
/// for ever while other threads keep queueing. Each thread has one write in flight, so a
/// batch is as large as the number of threads writing at once, well below this.
pub(crate) const MAX_BATCH: usize = 64;

/// The connection and what the store keeps beside it, as the store's mutex guards them.
pub(crate) struct Db {
    pub(crate) conn: Connection,
    tally: Tally,
    /// The tally may be ahead of the rows (a batch failed after moving it): read it afresh
    /// before it is used.
    stale: bool,
}

impl Db {
    pub(crate) fn new(conn: Connection, tally: Tally) -> Db {
        Db {
            conn,
            tally,
            stale: false,
        }
    }

    /// Rolls back a transaction left open on the connection by an earlier failure (a
    /// `ROLLBACK` that failed after a failed batch): its writes were answered with errors, so
    /// they must be neither read nor committed with the next batch, and until it ends every
    /// batch's `BEGIN` would fail. The tally may have moved with them: it is read afresh. If
    /// this `ROLLBACK` fails too, the next use of the connection (or the next transaction of a
    /// batch) tries again.
    pub(crate) fn end_stray_transaction(&mut self) {
        if !self.conn.is_autocommit() {
            self.stale = true;
            let _ = self.conn.execute_batch("ROLLBACK");
        }
    }

    /// The tally, read afresh from the rows first if it is stale.
    pub(crate) fn tally(&mut self) -> Result<&Tally, StoreError> {
        if self.stale {
            self.tally = Tally::read(&self.conn)?;
            self.stale = false;
        }
        Ok(&self.tally)
    }

    /// A write outside a batch (a touch) set a job's lease to `now`.
    pub(crate) fn leased(&mut self, now: i64) {
        self.tally.leased(now);
    }
}

/// What the store publishes of its tally for the calls that need not wait for the connection:
/// evict reads the byte total, sweep the lease floor ([`Tally::lease_floor`]). Published under
/// the connection's lock as it is let go, and by a batch before it answers any of its writes,
/// so a caller's own acknowledged write is always in what it reads next.
#[derive(Debug)]
pub(crate) struct Published {
    bytes: AtomicU64,
    lease_floor: AtomicI64,
}

impl Published {
    pub(crate) fn new(db: &Db) -> Published {
        let p = Published {
            bytes: AtomicU64::new(0),
            lease_floor: AtomicI64::new(i64::MIN),
        };
        p.publish(db);
        p
    }

    /// Publishes `db`'s tally; while it is stale, values that send every reader to the
    /// connection (`u64::MAX` bytes, over any budget; `i64::MIN` floor, below any cutoff).
    pub(crate) fn publish(&self, db: &Db) {
        let (bytes, floor) = if db.stale {
            (u64::MAX, i64::MIN)
        } else {
            (db.tally.bytes, db.tally.lease_floor)
        };
        self.bytes.store(bytes, Ordering::Release);
        self.lease_floor.store(floor, Ordering::Release);
    }

    /// The byte total as last published.
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Acquire)
    }

    /// The lease floor as last published.
    pub(crate) fn lease_floor(&self) -> i64 {
        self.lease_floor.load(Ordering::Acquire)
    }
}

/// Where a queued write's result is put for its waiting thread.
pub(crate) struct Slot<R> {
    result: Mutex<Option<Result<R, StoreError>>>,
}

impl<R> Slot<R> {
    pub(crate) fn new() -> Arc<Slot<R>> {
        Arc::new(Slot {
            result: Mutex::new(None),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Option<Result<R, StoreError>>> {
        self.result.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether the write has its result.
    pub(crate) fn is_done(&self) -> bool {
        self.lock().is_some()
    }

    /// Takes the result, once it is there.
    pub(crate) fn take(&self) -> Option<Result<R, StoreError>> {
        self.lock().take()
    }
}

/// The error of a write that no batch answered (it cannot happen: see `SqliteStore::write`).
pub(crate) fn lost() -> StoreError {
    StoreError::backend(
        "write",
        std::io::Error::other("the write was lost before it ran"),
    )
}

/// The error of a write whose batch panicked.
fn panicked() -> StoreError {
    StoreError::backend(
        "write",
        std::io::Error::other("the store failed while writing (a panic)"),
    )
}

/// The answer to one queued write: filed once; if it is dropped unfiled (a panic unwound past
/// it), the write gets [`panicked`]'s error, so its thread never waits for ever.
struct Reply<R> {
    slot: Option<Arc<Slot<R>>>,
}

impl<R> Reply<R> {
    fn file(mut self, r: Result<R, StoreError>) {
        if let Some(slot) = self.slot.take() {
            *slot.lock() = Some(r);
        }
    }
}

impl<R> Drop for Reply<R> {
    fn drop(&mut self) {
        if let Some(slot) = self.slot.take() {
            let mut result = slot.lock();
            if result.is_none() {
                *result = Some(Err(panicked()));
            }
        }
    }
}

/// A write waiting in the queue, or run in a batch's transaction and waiting for its end.
pub(crate) trait Write: Send {
    /// Runs the write inside the open transaction and keeps its result until it is answered;
    /// `true` if it succeeded. A write whose transaction was rolled back is run again (with
    /// the same arguments, on the rows as they were): its kept result is then replaced.
    fn run(&mut self, conn: &Connection, tally: &mut Tally) -> bool;
    /// Answers it: its kept result if `failed` is `None` (its transaction committed, or it
    /// failed and nothing of it is kept), else that error: its transaction failed.
    fn file(self: Box<Self>, failed: Option<&StoreError>);
    /// Answers the write with `e` without running it.
    fn fail(self: Box<Self>, e: &StoreError);
}

/// A write as the store queues it: the operation, its result once run, and where its result
/// goes.
pub(crate) struct Op<F, R> {
    f: F,
    kept: Option<Result<R, StoreError>>,
    reply: Reply<R>,
}

impl<F, R> Op<F, R>
where
    F: Fn(&Connection, &mut Tally) -> Result<R, StoreError> + Send + 'static,
    R: Send + 'static,
{
    /// The write `f`, whose result goes to `slot`. `f` may run more than once (see
    /// [`Write::run`]); it changes nothing but the rows and the tally it is given.
    pub(crate) fn boxed(f: F, slot: &Arc<Slot<R>>) -> Box<dyn Write> {
        Box::new(Op {
            f,
            kept: None,
            reply: Reply {
                slot: Some(slot.clone()),
            },
        })
    }
}

impl<F, R> Write for Op<F, R>
where
    F: Fn(&Connection, &mut Tally) -> Result<R, StoreError> + Send + 'static,
    R: Send + 'static,
{
    fn run(&mut self, conn: &Connection, tally: &mut Tally) -> bool {
        let r = (self.f)(conn, tally);
        let ok = r.is_ok();
        self.kept = Some(r);
        ok
    }

    fn file(self: Box<Self>, failed: Option<&StoreError>) {
        let Op { kept, reply, .. } = *self;
        reply.file(match (failed, kept) {
            (Some(e), _) => Err(e.clone()),
            (None, Some(r)) => r,
            (None, None) => Err(lost()),
        });
    }

    fn fail(self: Box<Self>, e: &StoreError) {
        self.reply.file(Err(e.clone()));
    }
}

/// The writes waiting for a batch, and who leads.
#[derive(Default)]
pub(crate) struct Queue {
    state: Mutex<State>,
    /// Where a waiting thread sleeps: told after every batch and when a leader steps down.
    wake: Condvar,
    /// The commits made (for the tests: how many writes shared one).
    commits: AtomicU64,
    /// The savepoints made (for the tests: a batch makes them only after a failure).
    savepoints: AtomicU64,
}

#[derive(Default)]
struct State {
    writes: Vec<Box<dyn Write>>,
    /// A thread leads: it runs batches until its own write is done, then steps down.
    leading: bool,
    /// Threads asleep on `wake`.
    sleepers: usize,
}

/// Leadership, given up when dropped (also by a panic unwinding through the leader).
pub(crate) struct Leading<'q>(&'q Queue);

impl Drop for Leading<'_> {
    fn drop(&mut self) {
        let mut st = self.0.lock();
        st.leading = false;
        // A write may still be queued (it came after the last batch): a sleeping thread
        // takes over; a spinning one sees it at its next look.
        if st.sleepers > 0 {
            self.0.wake.notify_all();
        }
    }
}

impl Queue {
    /// How many writes are waiting.
    #[cfg(test)]
    pub(crate) fn waiting(&self) -> usize {
        self.lock().writes.len()
    }

    /// How many threads are asleep, waiting for a batch to do their write or for the lead.
    #[cfg(test)]
    pub(crate) fn sleepers(&self) -> usize {
        self.lock().sleepers
    }

    /// How many commits the batches have made.
    #[cfg(test)]
    pub(crate) fn commits(&self) -> u64 {
        self.commits.load(Ordering::Relaxed)
    }

    /// How many savepoints the batches have made.
    #[cfg(test)]
    pub(crate) fn savepoints(&self) -> u64 {
        self.savepoints.load(Ordering::Relaxed)
    }

    /// Queues `w` as if by another thread, which waits for it.
    #[cfg(test)]
    pub(crate) fn push(&self, w: Box<dyn Write>) {
        self.lock().writes.push(w);
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues `w`, whose result goes to `slot`, and waits until either a leader has done it
    /// (`None`) or no thread leads (`Some`: this thread now leads, until the value is dropped;
    /// it is to lead batches until `slot` is done). Spins for up to `spin` first: a batch takes
    /// tens of microseconds, less than a sleep and a wake-up would cost.
    pub(crate) fn wait<R>(
        &self,
        w: Box<dyn Write>,
        slot: &Slot<R>,
        spin: Duration,
    ) -> Option<Leading<'_>> {
        {
            let mut st = self.lock();
            st.writes.push(w);
            if let Some(lead) = self.lead_if_free(&mut st) {
                return Some(lead);
            }
        }
        let t0 = Instant::now();
        loop {
            for _ in 0..64 {
                std::hint::spin_loop();
            }
            if slot.is_done() {
                return None;
            }
            if let Some(lead) = self.lead_if_free(&mut self.lock()) {
                return Some(lead);
            }
            if t0.elapsed() >= spin {
                break;
            }
        }
        let mut st = self.lock();
        loop {
            // The leader answers a batch's writes before it takes this lock to wake the
            // sleepers, so a write done before this look is seen, and one done after it wakes
            // this thread.
            if slot.is_done() {
                return None;
            }
            if let Some(lead) = self.lead_if_free(&mut st) {
                return Some(lead);
            }
            st.sleepers += 1;
            st = self.wake.wait(st).unwrap_or_else(PoisonError::into_inner);
            st.sleepers -= 1;
        }
    }

    /// The lead, if no thread has it (`st` is this queue's state, locked).
    fn lead_if_free(&self, st: &mut State) -> Option<Leading<'_>> {
        (!st.leading).then(|| {
            st.leading = true;
            Leading(self)
        })
    }

    /// Up to `n` of the queued writes, oldest first.
    fn take(&self, n: usize) -> Vec<Box<dyn Write>> {
        let mut st = self.lock();
        let n = n.min(st.writes.len());
        st.writes.drain(..n).collect()
    }

    /// Wakes the sleeping threads, after a batch answered its writes.
    fn answered(&self) {
        if self.lock().sleepers > 0 {
            self.wake.notify_all();
        }
    }

    /// Leads one batch on `db`, which the caller has locked: runs the queued writes (and those
    /// queued meanwhile, up to [`MAX_BATCH`]), commits, publishes the byte total to
    /// `published` and then answers each write (so a thread answered here and evicting next
    /// sees its own write in the total). Never panics: a panic inside is caught, the
    /// transaction rolled back and the batch's writes answered with an error. `false` if the
    /// queue was empty.
    pub(crate) fn lead(&self, db: &mut Db, published: &Published) -> bool {
        let caught = catch_unwind(AssertUnwindSafe(|| self.run_batch(db, published)));
        let took = caught.unwrap_or_else(|_| {
            // The writes the batch held were answered as their replies dropped.
            if !db.conn.is_autocommit() {
                let _ = catch_unwind(AssertUnwindSafe(|| db.conn.execute_batch("ROLLBACK")));
            }
            db.stale = true;
            true
        });
        if took {
            self.answered();
        }
        took
    }

    fn run_batch(&self, db: &mut Db, published: &Published) -> bool {
        let writes = self.take(MAX_BATCH);
        if writes.is_empty() {
            return false;
        }
        if let Err(e) = db.tally() {
            writes.into_iter().for_each(|w| w.fail(&e));
            return true;
        }
        let mut taken = writes.len();
        let mut pending = VecDeque::from(writes);
        let mut tx = Segment::default();
        // Writes handed back after a write's failure rolled back the whole transaction are
        // committed as soon as they have run again, so that no later write's failure sends
        // them round once more: on a nearly full disk each later write that does not fit would
        // hand them back again (a batch of MAX_BATCH writes ran some thousand times; in the
        // tests now three times a write at most: the first try, the try with savepoints, the
        // rerun).
        let mut rerun_left: usize = 0;
        loop {
            while let Some(w) = pending.pop_front() {
                if let Some(again) = tx.step(db, w, published) {
                    // A write failed after others of a transaction without savepoints (or,
                    // with them, SQLite rolled the transaction back under its failure): the
                    // transaction is gone, and they run again, each after the first in a
                    // savepoint, ahead of the writes not yet run.
                    if std::mem::take(&mut tx.lost_whole) {
                        rerun_left = again.len();
                    }
                    again.into_iter().rev().for_each(|w| pending.push_front(w));
                    tx.savepoints = true;
                } else if rerun_left > 0 {
                    rerun_left -= 1;
                    if rerun_left == 0 && tx.open {
                        tx.commit(db, published, &self.commits);
                    }
                }
            }
            if taken >= MAX_BATCH {
                break;
            }
            let more = self.take(MAX_BATCH - taken);
            if more.is_empty() {
                break;
            }
            taken += more.len();
            pending.extend(more);
        }
        self.savepoints.fetch_add(tx.made, Ordering::Relaxed);
        if tx.open {
            tx.commit(db, published, &self.commits);
        }
        true
    }
}

/// One transaction of a batch: the writes run in it, answered when it ends. A batch is one
/// segment unless a transaction ends early (its first write failed, or the transaction failed
/// and was rolled back): the writes after it then run in a new one.
///
/// The writes of a transaction run one after another with no savepoint between them, as long
/// as each succeeds: a savepoint makes SQLite copy every page a write changes that the
/// transaction had already written, to be able to undo that write alone (rota-bench's SQLite
/// runner rows at 10 000 live jobs, two alternating rounds of a test build run with and
/// without its savepoints: 0.855 / 0.872 against 0.896 / 0.894 of the raw loop's speed with
/// 1 worker, 0.895 / 0.912 against 0.961 / 0.955 with 2; see bench/RESULTS.md). When a write
/// fails after others (or the transaction ends under it) in a transaction without savepoints,
/// the transaction is rolled back with none of its writes answered, and they and the failing
/// one run again in a new one, each after the first in a savepoint of its own (`savepoints`),
/// so that a failing write is undone alone. With savepoints, a write whose failure makes
/// SQLite roll the whole transaction back (a full disk) gets its own error, and the writes
/// before it run again in a new transaction, committed as soon as they have.
#[derive(Default)]
struct Segment {
    /// Every write run in the open transaction, kept or rolled back to its savepoint: all are
    /// answered when the transaction ends (or handed back to run again, see above), since a
    /// failed write may have failed because of an earlier one (an id it conflicted with) that
    /// the commit may yet lose.
    ran: Vec<Box<dyn Write>>,
    open: bool,
    /// Each write after the first runs in a savepoint of its own (after a failure of a
    /// transaction without them; for the rest of the batch).
    savepoints: bool,
    /// Savepoints made.
    made: u64,
    /// The last hand-back came from a write whose failure rolled back the whole transaction.
    lost_whole: bool,
}

impl Segment {
    /// Runs `w` in the transaction (begun first if none is open), in a savepoint of its own if
    /// `savepoints` and it is not the transaction's first write. Without savepoints, a write
    /// that fails after others rolls the transaction back: the writes it held and `w` are
    /// returned, not answered, to be run again (the tally is then stale, read afresh in the
    /// next transaction).
    fn step(
        &mut self,
        db: &mut Db,
        mut w: Box<dyn Write>,
        published: &Published,
    ) -> Option<Vec<Box<dyn Write>>> {
        if !self.open {
            // (A transaction before this one, of this batch or of one before it under the same
            // lock, may have failed and left it open; the tally is then read afresh below.)
            db.end_stray_transaction();
            if let Err(e) = exec(&db.conn, "BEGIN IMMEDIATE") {
                // Nothing is open: this write fails alone, the next one tries again.
                w.fail(&e);
                return None;
            }
            self.open = true;
            // A transaction of this batch that failed left the tally moved by its undone
            // writes (stale): read it afresh, in this transaction, before a write counts on it.
            if let Err(e) = db.tally() {
                w.fail(&e);
                self.abort(db, published, &e);
                return None;
            }
        }
        let first = self.ran.is_empty();
        let savepoint = self.savepoints && !first;
        if savepoint {
            if let Err(e) = exec(&db.conn, "SAVEPOINT w") {
                w.fail(&e);
                self.abort(db, published, &e);
                return None;
            }
            self.made += 1;
        }
        let ok = w.run(&db.conn, &mut db.tally);
        if !first && !self.savepoints && (!ok || db.conn.is_autocommit()) {
            // Nothing to undo it alone: undo the transaction and run its writes again.
            if !db.conn.is_autocommit() {
                let _ = db.conn.execute_batch("ROLLBACK");
            }
            db.stale = true;
            self.open = false;
            let mut again = std::mem::take(&mut self.ran);
            again.push(w);
            return Some(again);
        }
        if db.conn.is_autocommit() && !ok {
            // The write's own failure made SQLite roll the whole transaction back (a full
            // disk, an I/O error, out of memory: a savepoint cannot hold those back), and
            // nothing of it was committed (a write never commits): the write gets its own
            // error, and the writes before it, which did not fail, run again in a new
            // transaction, as they would have alone. Each pass drops the write that failed.
            w.file(None);
            db.stale = true;
            self.open = false;
            published.publish(db);
            let again = std::mem::take(&mut self.ran);
            self.lost_whole = !again.is_empty();
            return (!again.is_empty()).then_some(again);
        }
        if db.conn.is_autocommit() {
            // The transaction ended under a write that did not fail: nothing says which of
            // them to blame, and all of them are gone.
            let e = rolled_back();
            w.file(Some(&e));
            self.abort(db, published, &e);
            return None;
        }
        if ok {
            if savepoint && let Err(e) = exec(&db.conn, "RELEASE w") {
                w.file(Some(&e));
                self.abort(db, published, &e);
                return None;
            }
            self.ran.push(w);
            return None;
        }
        if first {
            // Nothing else is in the transaction: roll it back and answer the write now.
            let undone = exec(&db.conn, "ROLLBACK");
            w.file(None);
            match undone {
                Ok(()) => self.open = false,
                Err(e) => self.abort(db, published, &e),
            }
            return None;
        }
        match exec(&db.conn, "ROLLBACK TO w").and_then(|()| exec(&db.conn, "RELEASE w")) {
            Ok(()) => self.ran.push(w),
            Err(e) => {
                w.file(Some(&e));
                self.abort(db, published, &e);
            }
        }
        None
    }

    /// Commits the transaction and answers its writes, counted in `commits`; if the commit
    /// fails, each write gets its error.
    fn commit(&mut self, db: &mut Db, published: &Published, commits: &AtomicU64) {
        match exec(&db.conn, "COMMIT") {
            Ok(()) => {
                commits.fetch_add(1, Ordering::Relaxed);
                self.answer(db, published, None);
            }
            Err(e) => self.abort(db, published, &e),
        }
    }

    /// Ends the transaction (committed, or already gone) and answers its writes: each its own
    /// result if `failed` is `None`, else that error.
    fn answer(&mut self, db: &Db, published: &Published, failed: Option<&StoreError>) {
        self.open = false;
        published.publish(db);
        self.ran.drain(..).for_each(|w| w.file(failed));
    }

    /// Rolls the transaction back (if SQLite has not) and fails every write run in it with
    /// `e`. The tally moved with them: it is read afresh before its next use.
    fn abort(&mut self, db: &mut Db, published: &Published, e: &StoreError) {
        if !db.conn.is_autocommit() {
            let _ = db.conn.execute_batch("ROLLBACK");
        }
        db.stale = true;
        self.answer(db, published, Some(e));
    }
}

/// The error of the writes of a transaction that ended under a write that did not fail.
fn rolled_back() -> StoreError {
    StoreError::backend(
        "write",
        std::io::Error::other("the transaction ended under a write"),
    )
}

/// Runs one of the batch's statements (`BEGIN IMMEDIATE`, `SAVEPOINT w`, `COMMIT`...),
/// prepared once and cached.
fn exec(conn: &Connection, sql: &'static str) -> Result<(), StoreError> {
    conn.prepare_cached(sql)
        .and_then(|mut s| s.execute([]))
        .map(drop)
        .map_err(ctx(sql))
}
