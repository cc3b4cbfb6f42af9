//! The evicts and sweeps under way, which a cancel of a job with a target in flight waits for
//! before it writes `cancelled`.
//!
//! Such a job is terminal in the store once `cancelled` is written, so an evict or a sweep
//! could delete it, while its target in flight "finishes and is stored" (SPEC §5). So an evict
//! or sweep first marks itself busy here, then looks whether such a job exists (and if one
//! does, waits to be made up); a cancel first counts its job as one (under the state lock),
//! then waits here until no evict or sweep is busy, then writes. Both sides write, then read,
//! sequentially consistent: either the evict sees the job counted, or the cancel sees the
//! evict busy and writes only once it is over (or once the job's target is stored: the job is
//! then out of risk, and however many evicts and sweeps have begun since, none is waited for).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use tokio::sync::Notify;

/// The evicts and sweeps under way.
pub(crate) struct Housekeeping {
    /// A flag per worker, set while its evict (one after each stored target) is under way.
    /// Each on a cache line of its own: a flag two workers shared would cross between their
    /// cores at every target.
    evicting: Box<[Flag]>,
    /// Sweeps (one after each created job) and evicts of no worker (a cancel's) under way.
    others: AtomicUsize,
    /// Cancels waiting in [`quiet`](Self::quiet).
    waiting: AtomicUsize,
    /// Told when an evict or sweep ends while a cancel waits.
    over: Notify,
}

#[repr(align(128))]
struct Flag(AtomicBool);

impl Housekeeping {
    /// For `workers` workers.
    pub(crate) fn new(workers: usize) -> Housekeeping {
        Housekeeping {
            evicting: (0..workers).map(|_| Flag(AtomicBool::new(false))).collect(),
            others: AtomicUsize::new(0),
            waiting: AtomicUsize::new(0),
            over: Notify::new(),
        }
    }

    /// Marks an evict of worker `n` under way until the guard is dropped.
    pub(crate) fn evict(&self, n: usize) -> Busy<'_> {
        match self.evicting.get(n) {
            Some(Flag(flag)) => {
                flag.store(true, Ordering::SeqCst);
                Busy {
                    hk: self,
                    flag: Some(flag),
                }
            }
            None => self.other(),
        }
    }

    /// Marks a sweep, or an evict of no worker (a cancel's), under way until the guard is
    /// dropped.
    pub(crate) fn other(&self) -> Busy<'_> {
        self.others.fetch_add(1, Ordering::SeqCst);
        Busy {
            hk: self,
            flag: None,
        }
    }

    fn is_quiet(&self) -> bool {
        self.others.load(Ordering::SeqCst) == 0
            && self
                .evicting
                .iter()
                .all(|Flag(f)| !f.load(Ordering::SeqCst))
    }

    /// Waits until no evict or sweep is under way, or until `out` holds (the caller's job is
    /// no longer at risk: its target in flight is stored; told by [`wake`](Self::wake)). One
    /// that begins after the caller's job was counted sees it and deletes nothing (marked busy
    /// for no longer than its look), but for the evict after the job's own target is stored,
    /// which runs: so while the job is counted this waits in effect for those begun before and
    /// that one; once it is not, `out` ends the wait however many have begun since.
    pub(crate) async fn quiet(&self, mut out: impl FnMut() -> bool) {
        self.waiting.fetch_add(1, Ordering::SeqCst);
        let _waiting = Waiting(&self.waiting);
        loop {
            let over = self.over.notified();
            tokio::pin!(over);
            over.as_mut().enable();
            if self.is_quiet() || out() {
                return;
            }
            over.await;
        }
    }

    /// Tells the waiting cancels to look again (a job they may wait for is out of risk).
    pub(crate) fn wake(&self) {
        if self.waiting.load(Ordering::SeqCst) > 0 {
            self.over.notify_waiters();
        }
    }
}

/// An evict or sweep under way.
pub(crate) struct Busy<'a> {
    hk: &'a Housekeeping,
    /// Its worker's flag, or `None` for a count in `others`.
    flag: Option<&'a AtomicBool>,
}

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        match self.flag {
            Some(flag) => flag.store(false, Ordering::SeqCst),
            None => {
                self.hk.others.fetch_sub(1, Ordering::SeqCst);
            }
        }
        self.hk.wake();
    }
}

/// A cancel in [`Housekeeping::quiet`].
struct Waiting<'a>(&'a AtomicUsize);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::Future;
    use std::pin::pin;
    use std::task::{Context, Poll, Waker};

    fn poll_once(f: &mut (impl Future<Output = ()> + Unpin)) -> Poll<()> {
        std::pin::Pin::new(f).poll(&mut Context::from_waker(Waker::noop()))
    }

    #[test]
    fn quiet_waits_for_every_evict_and_sweep_under_way() {
        let hk = Housekeeping::new(2);
        let evict = hk.evict(1);
        let sweep = hk.other();
        let mut quiet = pin!(hk.quiet(|| false));
        assert!(poll_once(&mut quiet).is_pending());
        drop(evict);
        assert!(
            poll_once(&mut quiet).is_pending(),
            "a sweep is still under way"
        );
        drop(sweep);
        assert!(poll_once(&mut quiet).is_ready());
        assert_eq!(hk.waiting.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn quiet_is_ready_at_once_when_nothing_is_under_way() {
        let hk = Housekeeping::new(1);
        drop(hk.evict(0));
        drop(hk.evict(7));
        let mut quiet = pin!(hk.quiet(|| false));
        assert!(poll_once(&mut quiet).is_ready());
    }

    #[test]
    fn quiet_ends_once_its_job_is_out_of_risk_with_an_evict_under_way() {
        let hk = Housekeeping::new(1);
        let _evict = hk.evict(0);
        let out = std::cell::Cell::new(false);
        let mut quiet = pin!(hk.quiet(|| out.get()));
        assert!(poll_once(&mut quiet).is_pending());
        out.set(true);
        hk.wake();
        assert!(poll_once(&mut quiet).is_ready());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_end_of_an_evict_wakes_a_waiting_cancel() {
        let hk = std::sync::Arc::new(Housekeeping::new(2));
        let evict = hk.evict(0);
        let waiter = {
            let hk = hk.clone();
            tokio::spawn(async move { hk.quiet(|| false).await })
        };
        while hk.waiting.load(Ordering::SeqCst) == 0 {
            tokio::task::yield_now().await;
        }
        assert!(!waiter.is_finished());
        drop(evict);
        tokio::time::timeout(std::time::Duration::from_secs(10), waiter)
            .await
            .unwrap()
            .unwrap();
    }
}
