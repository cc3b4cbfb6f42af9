//! Group commit: the write operations that arrive while one thread is committing are committed
//! together in the next transaction, with one fsync for all of them.
//!
//! redb has one writer at a time, and a durable commit holds it for the length of an fsync.
//! Here the thread that commits (the *leader*) takes every operation queued so far and commits
//! them in one transaction; the operations that arrive meanwhile wait for the next batch, which
//! one of their threads leads once the leader hands over.
//!
//! A queue alone rarely batches the runner's writes: each thread has one write in flight, so
//! when two threads take turns, the one whose write just committed is still preparing its next
//! one when the other's, queued during the commit, starts alone; and so on, one write per fsync.
//! So a leader about to make a *durable* commit (an fsync, hundreds of microseconds) waits a
//! little for *company*: a thread that wrote in the previous durable commit, was acknowledged
//! less than the combiner's `wait` ago and has nothing queued yet is likely to be back within
//! microseconds, and then one fsync serves both. The wait ends as soon as every such thread has
//! queued, or when its time is up (PostgreSQL's `commit_delay` is the same idea). A thread
//! writing alone never waits (the previous durable commit was its own), and neither does a
//! thread whose partner has been away longer than `wait` (busy elsewhere: a slow fetch), nor a
//! batch that needs no fsync (a store opened without durability).
//!
//! Each operation still runs whole inside one transaction, and is acknowledged only after that
//! transaction has committed, so sharing a transaction changes neither what an operation sees
//! (the operations of a batch run one after another, each seeing the writes of those before it)
//! nor what survives a crash. A batch in which one operation fails is not committed: each of its
//! operations is then run again in a transaction of its own, so a failure belongs to its operation
//! alone.

use std::collections::HashMap;
use std::io;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::{self, ThreadId};
use std::time::{Duration, Instant};

use rota_core::StoreError;

/// An operation waiting to be committed, and the number its result is filed under.
pub(crate) struct Queued<O> {
    pub(crate) ticket: u64,
    pub(crate) op: O,
    /// The thread that queued it.
    thread: ThreadId,
}

#[cfg(test)]
impl<O> Queued<O> {
    /// `op` as queued by this thread.
    pub(crate) fn new(ticket: u64, op: O) -> Self {
        Queued {
            ticket,
            op,
            thread: thread::current().id(),
        }
    }
}

struct State<O> {
    next_ticket: u64,
    pending: Vec<Queued<O>>,
    /// Whether a thread is leading a batch now (waiting for company or committing).
    leading: bool,
    /// Whether the leader is waiting for company: a new operation must wake it.
    gathering: bool,
    /// The threads whose operations were in the last durable commit, each with when its
    /// latest operation was acknowledged.
    last: Vec<(ThreadId, Instant)>,
    /// Results not yet collected, by ticket.
    done: HashMap<u64, Result<(), StoreError>>,
    /// How many times a leader has slept for company.
    #[cfg(test)]
    waits: usize,
}

/// The queue of operations waiting for the write transaction.
pub(crate) struct Combiner<O> {
    state: Mutex<State<O>>,
    /// Signalled when a batch is committed or the leader hands over.
    ready: Condvar,
    /// Signalled when an operation is queued while the leader waits for company.
    arrived: Condvar,
    /// The longest a leader waits for company before a durable commit; zero never waits.
    wait: Duration,
}

impl<O> std::fmt::Debug for Combiner<O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Combiner")
            .field("wait", &self.wait)
            .finish_non_exhaustive()
    }
}

impl<O> Default for Combiner<O> {
    fn default() -> Self {
        Combiner::new(Duration::ZERO)
    }
}

/// The error of an operation whose commit panicked.
pub(crate) fn panicked() -> StoreError {
    StoreError::backend(
        "write",
        io::Error::other("the store failed while committing (a panic)"),
    )
}

/// Calls `f`, a commit, and turns a panic inside it into [`panicked`]'s error.
pub(crate) fn guarded(f: impl FnOnce() -> Result<(), StoreError>) -> Result<(), StoreError> {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|_| Err(panicked()))
}

/// Runs a batch: one result per operation, in the batch's order.
pub(crate) type Exec<'a, O> = &'a dyn Fn(&mut [Queued<O>]) -> Vec<Result<(), StoreError>>;

impl<O> Combiner<O> {
    /// A queue whose leaders wait up to `wait` for company before a durable commit.
    pub(crate) fn new(wait: Duration) -> Self {
        Combiner {
            state: Mutex::new(State {
                next_ticket: 0,
                pending: Vec::new(),
                leading: false,
                gathering: false,
                last: Vec::new(),
                done: HashMap::new(),
                #[cfg(test)]
                waits: 0,
            }),
            ready: Condvar::new(),
            arrived: Condvar::new(),
            wait,
        }
    }

    /// The longest a leader waits for company.
    pub(crate) fn wait(&self) -> Duration {
        self.wait
    }

    /// The lock is never held while an operation runs, so a poisoned lock (a panic inside the
    /// queue's own bookkeeping) leaves the state whole: go on with it.
    fn lock(&self) -> MutexGuard<'_, State<O>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `op` through `exec`, alone or in one batch with other threads' operations, and
    /// returns its result. Blocks until the batch that holds `op` has been committed.
    pub(crate) fn run(&self, op: O, exec: Exec<'_, O>) -> Result<(), StoreError> {
        let me = thread::current().id();
        let mut st = self.lock();
        let ticket = st.next_ticket;
        st.next_ticket = st.next_ticket.wrapping_add(1);
        st.pending.push(Queued {
            ticket,
            op,
            thread: me,
        });
        if st.gathering {
            self.arrived.notify_all();
        }
        loop {
            if let Some(result) = st.done.remove(&ticket) {
                return result;
            }
            if st.leading {
                st = self.ready.wait(st).unwrap_or_else(PoisonError::into_inner);
                continue;
            }
            // This thread's operation is still queued: it leads until that is committed.
            st.leading = true;
            st = self.lead(st, me, exec);
            // Hand over: this thread returns (and may soon queue its next write), and one of
            // the waiting threads, if any has an operation queued, leads next.
            st.leading = false;
            self.ready.notify_all();
        }
    }

    /// The leader's work: its own operation is queued, and is committed with all that is
    /// queued when it ends, after a wait for company ([`company`](Self::company)).
    fn lead<'a>(
        &'a self,
        mut st: MutexGuard<'a, State<O>>,
        me: ThreadId,
        exec: Exec<'_, O>,
    ) -> MutexGuard<'a, State<O>> {
        loop {
            if let Some(left) = self.company(&st, me) {
                #[cfg(test)]
                {
                    st.waits += 1;
                }
                st.gathering = true;
                st = self
                    .arrived
                    .wait_timeout(st, left)
                    .unwrap_or_else(PoisonError::into_inner)
                    .0;
                st.gathering = false;
                continue;
            }
            let batch = std::mem::take(&mut st.pending);
            // The writers to expect back are those of this commit.
            let threads = threads_of(&batch);
            st = self.commit(st, batch, exec);
            let now = Instant::now();
            st.last = threads.into_iter().map(|t| (t, now)).collect();
            return st;
        }
    }

    /// How long the leader is to wait for company before committing what is queued, if at
    /// all: while a thread of the last commit, other than the leader, has nothing queued and
    /// was acknowledged less than `wait` ago (it is likely preparing its next write; one
    /// acknowledged longer ago is busy elsewhere). Never with a `wait` of zero (a store whose
    /// commits need no fsync).
    fn company(&self, st: &State<O>, me: ThreadId) -> Option<Duration> {
        if self.wait.is_zero() {
            return None;
        }
        let now = Instant::now();
        st.last
            .iter()
            .filter(|(t, _)| *t != me && !st.pending.iter().any(|q| q.thread == *t))
            // A wait too long to add to an instant is as good as endless.
            .map(|(_, at)| {
                at.checked_add(self.wait)
                    .map_or(self.wait, |end| end.saturating_duration_since(now))
            })
            .filter(|left| !left.is_zero())
            .max()
    }

    /// Commits `batch` through `exec` (with the lock released) and files its results. The
    /// operations are dropped before the lock is taken again.
    fn commit<'a>(
        &'a self,
        st: MutexGuard<'a, State<O>>,
        mut batch: Vec<Queued<O>>,
        exec: Exec<'_, O>,
    ) -> MutexGuard<'a, State<O>> {
        drop(st);
        // `exec` catches a panic per commit (so that one operation's panic fails it alone);
        // this is the net under that, for a panic in `exec` itself.
        let results =
            catch_unwind(AssertUnwindSafe(|| exec(&mut batch))).unwrap_or_else(|_| Vec::new());
        let tickets: Vec<u64> = batch.iter().map(|q| q.ticket).collect();
        // A panic dropping an operation must not unwind past the leader with its batch's
        // results unfiled (every writer would wait for them for ever).
        let _ = catch_unwind(AssertUnwindSafe(move || drop(batch)));
        let mut results = results.into_iter();
        let mut st = self.lock();
        for t in tickets {
            let r = results.next().unwrap_or_else(|| Err(panicked()));
            st.done.insert(t, r);
        }
        self.ready.notify_all();
        st
    }

    #[cfg(test)]
    fn pending(&self) -> usize {
        self.lock().pending.len()
    }
}

/// The threads that queued `ops`, each once.
fn threads_of<'q, O: 'q>(ops: impl IntoIterator<Item = &'q Queued<O>>) -> Vec<ThreadId> {
    let mut threads = Vec::new();
    for q in ops {
        if !threads.contains(&q.thread) {
            threads.push(q.thread);
        }
    }
    threads
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::{Duration, Instant};

    /// Waits (polling, bounded) until `f` holds.
    fn until(f: impl Fn() -> bool) {
        let t0 = Instant::now();
        while !f() {
            assert!(t0.elapsed() < Duration::from_secs(20), "timed out");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// What the tests' executor saw: the batches, as the ops' numbers.
    #[derive(Default)]
    struct Log {
        batches: Mutex<Vec<Vec<u32>>>,
        /// While set, the executor holds its first batch (the leader's commit "takes long").
        hold: AtomicBool,
    }

    impl Log {
        fn exec(&self, batch: &mut [Queued<u32>]) -> Vec<Result<(), StoreError>> {
            while self.hold.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(1));
            }
            self.batches
                .lock()
                .unwrap()
                .push(batch.iter().map(|q| q.op).collect());
            batch
                .iter()
                .map(|q| match q.op {
                    13 => Err(StoreError::Conflict("13".into())),
                    99 => panic!("op 99 panics"),
                    _ => Ok(()),
                })
                .collect()
        }
    }

    #[test]
    fn an_uncontended_op_runs_alone_and_gets_its_result() {
        let c = Combiner::default();
        let log = Log::default();
        assert!(c.run(1, &|b| log.exec(b)).is_ok());
        assert!(matches!(
            c.run(13, &|b| log.exec(b)),
            Err(StoreError::Conflict(_))
        ));
        assert_eq!(*log.batches.lock().unwrap(), vec![vec![1], vec![13]]);
    }

    #[test]
    fn ops_that_queue_during_a_commit_share_the_next_one_and_each_gets_its_own_result() {
        let c = Arc::new(Combiner::default());
        let log = Arc::new(Log::default());
        log.hold.store(true, Ordering::SeqCst);
        let spawn = |op: u32| {
            let (c, log) = (c.clone(), log.clone());
            std::thread::spawn(move || c.run(op, &|b| log.exec(b)))
        };
        let leader = spawn(1);
        // The leader has taken its op out of the queue and is "committing".
        until(|| c.pending() == 0 && c.lock().leading);
        let others: Vec<_> = [2, 13, 4].into_iter().map(spawn).collect();
        until(|| c.pending() == 3);
        log.hold.store(false, Ordering::SeqCst);
        assert!(leader.join().unwrap().is_ok());
        let results: Vec<_> = others.into_iter().map(|h| h.join().unwrap()).collect();
        assert!(results[0].is_ok());
        assert!(matches!(results[1], Err(StoreError::Conflict(_))));
        assert!(results[2].is_ok());
        let batches = log.batches.lock().unwrap().clone();
        assert_eq!(batches.len(), 2, "{batches:?}");
        assert_eq!(batches[0], vec![1]);
        let mut second = batches[1].clone();
        second.sort();
        assert_eq!(second, vec![2, 4, 13]);
        assert!(c.lock().done.is_empty(), "every result was collected");
    }

    #[test]
    fn a_panicking_batch_fails_its_ops_and_the_queue_goes_on() {
        let c = Combiner::default();
        let log = Log::default();
        let r = c.run(99, &|b| log.exec(b));
        assert!(matches!(r, Err(StoreError::Backend { .. })), "{r:?}");
        assert!(!c.lock().leading);
        assert!(c.run(2, &|b| log.exec(b)).is_ok());
    }

    /// Where the result of an op run on another thread arrives.
    type Outcome = std::sync::mpsc::Receiver<Result<(), StoreError>>;

    /// Runs `op` on a new thread; its result comes through the returned channel.
    fn spawn_run(c: &Arc<Combiner<u32>>, log: &Arc<Log>, op: u32) -> Outcome {
        let (c, log) = (c.clone(), log.clone());
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || tx.send(c.run(op, &|b| log.exec(b))));
        rx
    }

    /// A wait longer than any test: as long as a `Duration` goes, too long to add to an
    /// `Instant` (which must not panic).
    const LONG: Duration = Duration::MAX;

    /// `threads` threads each run 200 numbered ops (each followed by a failing op 13 when
    /// `conflicts`): every numbered op runs exactly once, each caller gets its own result, and
    /// the queue is left empty.
    fn many_threads(c: Combiner<u32>, threads: u32, conflicts: bool) {
        let c = Arc::new(c);
        let log = Arc::new(Log::default());
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (c, log) = (c.clone(), log.clone());
                std::thread::spawn(move || {
                    for i in 0..200u32 {
                        let op = 1000 + t * 1000 + i;
                        c.run(op, &|b| log.exec(b)).unwrap();
                        if conflicts {
                            let r = c.run(13, &|b| log.exec(b));
                            assert!(matches!(r, Err(StoreError::Conflict(_))), "{r:?}");
                        }
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        let mut ran: Vec<u32> = log
            .batches
            .lock()
            .unwrap()
            .iter()
            .flatten()
            .copied()
            .filter(|&op| op != 13)
            .collect();
        ran.sort();
        let expected: Vec<u32> = (0..threads)
            .flat_map(|t| (0..200).map(move |i| 1000 + t * 1000 + i))
            .collect();
        assert_eq!(ran, expected, "every op ran exactly once");
        let st = c.lock();
        assert!(st.done.is_empty() && st.pending.is_empty() && !st.leading && !st.gathering);
    }

    #[test]
    fn many_threads_each_get_their_own_results() {
        many_threads(Combiner::default(), 8, true);
    }

    /// This thread writes op 1 durably; then another thread's durable op 2 leads and waits (for
    /// [`LONG`]) for this thread's next write. Returns once it waits, with op 2's result.
    fn a_leader_waiting_for_this_thread() -> (Arc<Combiner<u32>>, Arc<Log>, Outcome) {
        let c = Arc::new(Combiner::new(LONG));
        let log = Arc::new(Log::default());
        assert!(c.run(1, &|b| log.exec(b)).is_ok());
        let other = spawn_run(&c, &log, 2);
        until(|| c.lock().gathering);
        (c, log, other)
    }

    #[test]
    fn a_durable_commit_waits_for_the_thread_of_the_last_batch_and_shares_its_commit() {
        let (c, log, other) = a_leader_waiting_for_this_thread();
        // Counted (the tests that say a leader never waited read this count; a spurious
        // wake-up may count a second wait).
        assert!(c.lock().waits >= 1);
        // This thread's next write arrives while the leader waits.
        assert!(c.run(3, &|b| log.exec(b)).is_ok());
        assert!(other.recv().unwrap().is_ok());
        assert_eq!(*log.batches.lock().unwrap(), vec![vec![1], vec![2, 3]]);
        let st = c.lock();
        assert!(!st.gathering && !st.leading && st.pending.is_empty() && st.done.is_empty());
    }

    #[test]
    fn a_writer_acknowledged_longer_than_the_wait_ago_is_not_waited_for() {
        let c = Arc::new(Combiner::new(Duration::from_millis(30)));
        let log = Arc::new(Log::default());
        assert!(c.run(1, &|b| log.exec(b)).is_ok());
        std::thread::sleep(Duration::from_millis(60));
        let other = spawn_run(&c, &log, 2);
        assert!(other.recv().unwrap().is_ok());
        assert_eq!(c.lock().waits, 0);
        assert_eq!(*log.batches.lock().unwrap(), vec![vec![1], vec![2]]);
    }

    #[test]
    fn a_leader_waits_for_company_no_longer_than_its_wait() {
        let c = Arc::new(Combiner::new(Duration::from_millis(20)));
        let log = Arc::new(Log::default());
        assert!(c.run(1, &|b| log.exec(b)).is_ok());
        // This thread does not write again: the other commits alone once the wait is over.
        let other = spawn_run(&c, &log, 2);
        let r = other.recv_timeout(Duration::from_secs(60));
        assert!(matches!(r, Ok(Ok(()))), "{r:?}");
        assert_eq!(*log.batches.lock().unwrap(), vec![vec![1], vec![2]]);
        assert!(!c.lock().gathering);
    }

    #[test]
    fn a_thread_writing_alone_never_waits() {
        let c = Arc::new(Combiner::new(LONG));
        let log = Arc::new(Log::default());
        // Alone: the last batch was always this thread's own.
        let alone = {
            let (c, log) = (c.clone(), log.clone());
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                for op in 1..=3 {
                    tx.send(c.run(op, &|b| log.exec(b))).unwrap();
                }
            });
            rx
        };
        for _ in 1..=3 {
            let r = alone.recv_timeout(Duration::from_secs(60));
            assert!(matches!(r, Ok(Ok(()))), "{r:?}");
        }
        assert_eq!(
            *log.batches.lock().unwrap(),
            vec![vec![1], vec![2], vec![3]]
        );
        assert_eq!(c.lock().waits, 0);
    }

    /// A queue of no wait (a store whose commits need no fsync) never waits for company, even
    /// for a thread of the last commit acknowledged just now.
    #[test]
    fn a_queue_of_no_wait_never_waits() {
        let c = Arc::new(Combiner::default());
        let log = Arc::new(Log::default());
        assert!(c.run(1, &|b| log.exec(b)).is_ok());
        let other = spawn_run(&c, &log, 2);
        let r = other.recv_timeout(Duration::from_secs(60));
        assert!(matches!(r, Ok(Ok(()))), "{r:?}");
        assert_eq!(*log.batches.lock().unwrap(), vec![vec![1], vec![2]]);
        assert_eq!(c.lock().waits, 0);
    }

    #[test]
    fn many_threads_with_a_wait_each_get_their_own_results() {
        many_threads(Combiner::new(Duration::from_micros(200)), 4, false);
    }
}
