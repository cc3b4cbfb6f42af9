//! Group commit: the write operations that arrive while one thread is committing are committed
//! together in the next transaction, with one fsync for all of them.
//!
//! redb has one writer at a time, and a durable commit holds it for the length of an fsync. With
//! redb's own lock, a second thread waiting to write sleeps until the commit ends, and the wake-up
//! of that thread (tens of microseconds) lies on the store's critical path at every hand-over.
//! Here the thread that commits (the *leader*) takes what queued up meanwhile and commits it
//! itself, at once: the waiting threads are woken with their results while the leader goes on, and
//! what queued in one fsync's time shares the next one.
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

use rota_core::StoreError;

/// The batches one leader commits in a row at most before it leaves the rest to another thread
/// (its own caller has been waiting for its result since the first).
const MAX_ROUNDS: usize = 4;

/// An operation waiting to be committed, and the number its result is filed under.
pub(crate) struct Queued<O> {
    pub(crate) ticket: u64,
    pub(crate) op: O,
}

struct State<O> {
    next_ticket: u64,
    pending: Vec<Queued<O>>,
    /// Whether a thread is committing a batch now.
    leading: bool,
    /// Results not yet collected, by ticket.
    done: HashMap<u64, Result<(), StoreError>>,
}

/// The queue of operations waiting for the write transaction.
pub(crate) struct Combiner<O> {
    state: Mutex<State<O>>,
    ready: Condvar,
}

impl<O> std::fmt::Debug for Combiner<O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Combiner").finish_non_exhaustive()
    }
}

impl<O> Default for Combiner<O> {
    fn default() -> Self {
        Combiner {
            state: Mutex::new(State {
                next_ticket: 0,
                pending: Vec::new(),
                leading: false,
                done: HashMap::new(),
            }),
            ready: Condvar::new(),
        }
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
    /// The lock is never held while an operation runs, so a poisoned lock (a panic inside the
    /// queue's own bookkeeping) leaves the state whole: go on with it.
    fn lock(&self) -> MutexGuard<'_, State<O>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `op` through `exec`, alone or in one batch with other threads' operations, and
    /// returns its result. Blocks until the batch that holds `op` has been committed.
    pub(crate) fn run(&self, op: O, exec: Exec<'_, O>) -> Result<(), StoreError> {
        let mut st = self.lock();
        let ticket = st.next_ticket;
        st.next_ticket = st.next_ticket.wrapping_add(1);
        st.pending.push(Queued { ticket, op });
        loop {
            if let Some(result) = st.done.remove(&ticket) {
                return result;
            }
            if st.leading {
                st = self.ready.wait(st).unwrap_or_else(PoisonError::into_inner);
                continue;
            }
            st.leading = true;
            for _ in 0..MAX_ROUNDS {
                let mut batch = std::mem::take(&mut st.pending);
                if batch.is_empty() {
                    break;
                }
                drop(st);
                // `exec` catches a panic per commit (so that one operation's panic fails it
                // alone); this is the net under that, for a panic in `exec` itself.
                let results = catch_unwind(AssertUnwindSafe(|| exec(&mut batch)))
                    .unwrap_or_else(|_| Vec::new());
                let mut results = results.into_iter();
                let tickets: Vec<u64> = batch.iter().map(|q| q.ticket).collect();
                drop(batch);
                st = self.lock();
                for t in tickets {
                    let r = results.next().unwrap_or_else(|| Err(panicked()));
                    st.done.insert(t, r);
                }
                self.ready.notify_all();
            }
            st.leading = false;
            if !st.pending.is_empty() {
                // Someone else's operation is waiting: one of the waiting threads leads next.
                self.ready.notify_all();
            }
        }
    }

    #[cfg(test)]
    fn pending(&self) -> usize {
        self.lock().pending.len()
    }
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

    #[test]
    fn many_threads_each_get_their_own_results() {
        let c = Arc::new(Combiner::default());
        let log = Arc::new(Log::default());
        let handles: Vec<_> = (0..8u32)
            .map(|t| {
                let (c, log) = (c.clone(), log.clone());
                std::thread::spawn(move || {
                    for i in 0..200u32 {
                        let op = 1000 + t * 1000 + i;
                        c.run(op, &|b| log.exec(b)).unwrap();
                        let r = c.run(13, &|b| log.exec(b));
                        assert!(matches!(r, Err(StoreError::Conflict(_))), "{r:?}");
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
        let expected: Vec<u32> = (0..8u32)
            .flat_map(|t| (0..200).map(move |i| 1000 + t * 1000 + i))
            .collect();
        assert_eq!(ran, expected, "every op ran exactly once");
        let st = c.lock();
        assert!(st.done.is_empty() && st.pending.is_empty() && !st.leading);
    }
}
