//! [`MemoryStore`]: the [`BatchStore`] over [`State`] behind one mutex.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use async_trait::async_trait;
use rota_core::{
    Admission, BatchStore, Caps, JobRow, JobStatus, NewJob, StoreError, TargetRow, TargetWrite,
};

use crate::state::State;

/// A [`BatchStore`] in process memory, for tests and for runners that need no persistence.
///
/// Cheap to create; share it as an `Arc<dyn BatchStore>`. Every operation holds one lock for
/// the duration of a few map and index updates and never across an await, so it is safe and
/// atomic under any number of concurrent callers. See the crate docs for its indexes.
#[derive(Default)]
pub struct MemoryStore {
    state: Mutex<State>,
    /// The state's total bytes as of its last write, so that evict, called after every stored
    /// target and almost always under the budget, need not take the lock to find that out.
    total_bytes: AtomicU64,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// The lock. No code of this crate panics under it, so a poisoned lock still holds a
    /// consistent state and is taken over.
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs a write under the lock, and publishes the total bytes it leaves before unlocking.
    fn write<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        let mut st = self.state();
        let out = f(&mut st);
        self.total_bytes.store(st.total_bytes(), Ordering::Release);
        out
    }
}

/// Shows counts only: the rows hold URLs, which are never to be logged.
impl fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("MemoryStore");
        match self.state.try_lock() {
            Ok(s) => d
                .field("jobs", &s.len())
                .field("live_jobs", &s.live_jobs(None))
                .field("total_bytes", &s.total_bytes())
                .finish(),
            Err(_) => d.finish_non_exhaustive(),
        }
    }
}

#[async_trait]
impl BatchStore for MemoryStore {
    async fn admit(&self, job: &NewJob, caps: &Caps) -> Result<Admission, StoreError> {
        // The rows (a copy of every URL and options) are built before the lock is taken, so
        // that a submit holds it only for the checks and the inserts, not for the copying: the
        // workers' start and finish calls wait on it meanwhile.
        let rows = job.rows();
        self.write(|st| st.admit(job, caps, rows))
    }

    async fn job(&self, id: &str) -> Result<Option<JobRow>, StoreError> {
        Ok(self.state().job(id))
    }

    async fn targets(&self, id: &str) -> Result<Vec<TargetRow>, StoreError> {
        Ok(self.state().targets(id))
    }

    async fn view(&self, id: &str) -> Result<Option<(JobRow, Vec<TargetRow>)>, StoreError> {
        Ok(self.state().view(id))
    }

    async fn start_target(
        &self,
        id: &str,
        idx: usize,
        now: i64,
    ) -> Result<Option<TargetRow>, StoreError> {
        Ok(self.write(|st| st.start_target(id, idx, now)))
    }

    async fn finish_target(
        &self,
        id: &str,
        idx: usize,
        write: &TargetWrite,
        now: i64,
        finish: Option<JobStatus>,
    ) -> Result<bool, StoreError> {
        Ok(self.write(|st| st.finish_target(id, idx, write, now, finish)))
    }

    async fn set_status(
        &self,
        id: &str,
        status: JobStatus,
        error: &str,
        now: i64,
    ) -> Result<bool, StoreError> {
        Ok(self.write(|st| st.set_status(id, status, error, now)))
    }

    async fn touch(&self, id: &str, now: i64) -> Result<bool, StoreError> {
        Ok(self.write(|st| st.touch(id, now)))
    }

    async fn sweep(&self, now: i64, ttl_secs: i64) -> Result<usize, StoreError> {
        Ok(self.write(|st| st.sweep(now, ttl_secs)))
    }

    async fn evict(&self, max_bytes: u64) -> Result<usize, StoreError> {
        // Under the budget (nearly always): no lock. A write racing this call is ordered after
        // it; every write this caller saw complete is counted.
        if self.total_bytes.load(Ordering::Acquire) <= max_bytes {
            return Ok(0);
        }
        Ok(self.write(|st| st.evict(max_bytes)))
    }

    async fn recover(&self, error: &str, now: i64) -> Result<usize, StoreError> {
        Ok(self.write(|st| st.recover(error, now)))
    }

    async fn live_jobs(&self, caller: Option<&str>) -> Result<usize, StoreError> {
        Ok(self.state().live_jobs(caller))
    }

    async fn total_bytes(&self) -> Result<u64, StoreError> {
        Ok(self.total_bytes.load(Ordering::Acquire))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rota_core::CallerClass;

    fn new_job(id: &str, caller: &str, key: &str, n: usize, now: i64) -> NewJob {
        NewJob {
            id: id.into(),
            caller: caller.into(),
            class: CallerClass::Fleet,
            idem_key: key.into(),
            targets: (0..n).map(|i| (format!("u{i}"), "{}".into())).collect(),
            now,
        }
    }

    const CAPS: Caps = Caps {
        targets_per_job: 8,
        jobs_per_caller: 4,
        jobs_total: 6,
        ttl_secs: 50,
    };

    /// Through rota-core's `impl BatchStore for Arc<S>`, every call answers as the store's own
    /// (the runner's test wrappers call their inner `Arc<dyn BatchStore>` so).
    #[tokio::test]
    async fn an_arc_of_the_store_answers_every_call_as_the_store() {
        use rota_core::TargetState;
        let arc = std::sync::Arc::new(MemoryStore::new());
        let s: &dyn BatchStore = &arc;
        for (id, key, n) in [("a", "k", 2), ("b", "k2", 1)] {
            let job = new_job(id, "c", key, n, 10);
            assert_eq!(s.admit(&job, &CAPS).await.unwrap(), Admission::Created);
        }
        assert_eq!(s.live_jobs(Some("c")).await.unwrap(), 2);
        assert_eq!(s.live_jobs(Some("d")).await.unwrap(), 0);
        assert_eq!(s.job("a").await.unwrap().unwrap().targets_total, 2);
        assert_eq!(s.job("zz").await.unwrap(), None);
        assert_eq!(s.targets("a").await.unwrap().len(), 2);
        assert_eq!(s.view("b").await.unwrap().unwrap().1.len(), 1);
        let row = s.start_target("a", 0, 11).await.unwrap().unwrap();
        assert_eq!(row.status, TargetState::Running);
        assert_eq!(s.start_target("zz", 0, 11).await.unwrap(), None);
        let done = TargetWrite::Done {
            result: "r".repeat(100),
        };
        assert!(s.finish_target("a", 0, &done, 12, None).await.unwrap());
        assert!(!s.finish_target("zz", 0, &done, 12, None).await.unwrap());
        assert!(s.touch("a", 13).await.unwrap());
        assert!(!s.touch("zz", 13).await.unwrap());
        assert!(s.set_status("a", JobStatus::Done, "", 14).await.unwrap());
        assert!(!s.set_status("zz", JobStatus::Done, "", 14).await.unwrap());
        let bytes = s.total_bytes().await.unwrap();
        assert_eq!(bytes, BatchStore::total_bytes(&*arc).await.unwrap());
        assert!(bytes > 100, "{bytes}");
        // b was queued: failed now; then both are terminal.
        assert_eq!(s.recover("interrupted", 15).await.unwrap(), 1);
        assert_eq!(s.live_jobs(None).await.unwrap(), 0);
        assert_eq!(s.evict(bytes - 1).await.unwrap(), 1);
        assert_eq!(s.sweep(1_000, CAPS.ttl_secs).await.unwrap(), 1);
        assert_eq!(s.total_bytes().await.unwrap(), 0);
    }

    /// A deterministic random walk over every operation keeps every index equal to a recount.
    #[test]
    fn indexes_match_a_recount_after_every_operation() {
        let mut s = State::default();
        let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        let statuses = JobStatus::ALL;
        let (mut created, mut deleted, mut recovered) = (0, 0, 0);
        for step in 0..5_000i64 {
            let id = format!("{:02}", next(24));
            let idx = next(5) as usize;
            let now = step / 3;
            match next(9) {
                0 => {
                    let job = new_job(
                        &id,
                        &format!("c{}", next(3)),
                        &format!("k{}", next(4)),
                        1 + idx,
                        now,
                    );
                    if s.admit(&job, &CAPS, job.rows()) == Ok(Admission::Created) {
                        created += 1;
                    }
                }
                1 => {
                    s.start_target(&id, idx, now);
                }
                2 | 3 => {
                    let write = match next(3) {
                        0 => TargetWrite::Pending,
                        1 => TargetWrite::Done {
                            result: "r".repeat(next(40) as usize),
                        },
                        _ => TargetWrite::Failed {
                            error: "e".repeat(next(9) as usize),
                            hint: "h".into(),
                        },
                    };
                    let finish = statuses.get(next(8) as usize).copied();
                    s.finish_target(&id, idx, &write, now, finish);
                }
                4 => {
                    let to = statuses.get(next(6) as usize).copied().unwrap();
                    s.set_status(&id, to, "x", now);
                }
                5 => {
                    s.touch(&id, now);
                }
                6 => {
                    deleted += s.sweep(now, next(60) as i64);
                }
                7 => {
                    deleted += s.evict(next(400));
                }
                _ => {
                    if next(50) == 0 {
                        recovered += s.recover("interrupted", now);
                    }
                }
            }
            if let Err(e) = s.check() {
                panic!("step {step}: {e}");
            }
        }
        // The walk must reach every kind of change, or it proves little.
        assert!(
            created > 100 && deleted > 100 && recovered > 0,
            "{created} {deleted} {recovered}"
        );
    }

    #[tokio::test]
    async fn the_published_total_follows_every_write_and_evict_reads_it() {
        let store = MemoryStore::new();
        let caps = Caps {
            jobs_per_caller: 100,
            jobs_total: 100,
            ..CAPS
        };
        let same = |store: &MemoryStore| {
            assert_eq!(
                store.total_bytes.load(Ordering::Acquire),
                store.state().total_bytes()
            )
        };
        for n in 0..4i64 {
            let id = format!("j{n}");
            let job = new_job(&id, "alice", &id, 2, n);
            assert_eq!(store.admit(&job, &caps).await.unwrap(), Admission::Created);
            same(&store);
            for idx in 0..2 {
                store.start_target(&id, idx, n).await.unwrap().unwrap();
                same(&store);
                let done = TargetWrite::Done {
                    result: "r".repeat(10 * (n as usize + 1)),
                };
                let finish = (idx == 1).then_some(JobStatus::Done);
                assert!(
                    store
                        .finish_target(&id, idx, &done, n, finish)
                        .await
                        .unwrap()
                );
                same(&store);
            }
        }
        let total = store.total_bytes().await.unwrap();
        assert!(total > 0);
        assert_eq!(store.evict(total).await.unwrap(), 0);
        // One byte over the budget: the oldest job goes, and the total published follows.
        assert_eq!(store.evict(total - 1).await.unwrap(), 1);
        assert!(store.job("j0").await.unwrap().is_none());
        assert!(store.total_bytes().await.unwrap() < total);
        same(&store);
        assert_eq!(store.recover("interrupted", 9).await.unwrap(), 0);
        same(&store);
    }

    /// A panic while the lock is held (by code outside this crate's operations: none of them
    /// panics under it) poisons it; the store takes the lock over and goes on, with its rows
    /// as they were.
    #[tokio::test]
    async fn a_poisoned_lock_is_taken_over_and_the_store_goes_on() {
        let store = MemoryStore::new();
        let job = new_job("a1", "alice", "k", 2, 10);
        assert_eq!(store.admit(&job, &CAPS).await.unwrap(), Admission::Created);
        std::thread::scope(|s| {
            let held = s.spawn(|| {
                let _st = store.state.lock().unwrap();
                panic!("a panic while the store's lock is held");
            });
            assert!(held.join().is_err());
        });
        assert!(store.state.is_poisoned());
        assert_eq!(store.job("a1").await.unwrap().unwrap().targets_total, 2);
        assert!(store.start_target("a1", 0, 11).await.unwrap().is_some());
        let done = TargetWrite::Done { result: "r".into() };
        assert!(store.finish_target("a1", 0, &done, 12, None).await.unwrap());
        let other = new_job("b1", "bob", "k2", 1, 13);
        assert_eq!(
            store.admit(&other, &CAPS).await.unwrap(),
            Admission::Created
        );
        assert_eq!(store.live_jobs(None).await.unwrap(), 2);
    }

    #[tokio::test]
    async fn debug_shows_counts_not_rows() {
        let store = MemoryStore::new();
        for (id, key) in [("a1", "k"), ("a2", "k2")] {
            store
                .admit(&new_job(id, "alice", key, 1, 10), &CAPS)
                .await
                .unwrap();
        }
        assert!(
            store
                .set_status("a2", JobStatus::Done, "", 11)
                .await
                .unwrap()
        );
        let shown = format!("{store:?}");
        assert_eq!(
            shown,
            "MemoryStore { jobs: 2, live_jobs: 1, total_bytes: 8 }"
        );
        assert!(!shown.contains("u0"));
    }
}
