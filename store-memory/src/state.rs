//! The jobs and their indexes: every operation of the store as a synchronous method, run under
//! the store's lock.

use std::collections::{BTreeSet, HashMap};

use rota_core::{
    Admission, Caps, JobRow, JobStatus, NewJob, StoreError, TargetRow, TargetWrite, may_transition,
    reusable, sweepable,
};

/// Applies `write` to target `t` of the job `row`, keeping the job's `n_bytes` and
/// `targets_done`; the store's byte total `total`, moved by as much.
fn apply(row: &mut JobRow, t: &mut TargetRow, write: &TargetWrite, total: u64) -> u64 {
    let (bytes_before, finished_before) = (t.n_bytes(), t.status.is_finished());
    t.apply(write);
    let (bytes_after, finished_after) = (t.n_bytes(), t.status.is_finished());
    row.n_bytes = row
        .n_bytes
        .saturating_sub(bytes_before)
        .saturating_add(bytes_after);
    match (finished_before, finished_after) {
        (false, true) => row.targets_done += 1,
        (true, false) => row.targets_done = row.targets_done.saturating_sub(1),
        _ => {}
    }
    total
        .saturating_sub(bytes_before)
        .saturating_add(bytes_after)
}

/// Sets the job's lease to `now`, moving it in the sweep index if it is terminal.
fn relet(by_lease: &mut BTreeSet<(i64, String)>, row: &mut JobRow, now: i64) {
    if row.status.is_terminal() && row.lease != now {
        by_lease.remove(&(row.lease, row.id.clone()));
        by_lease.insert((now, row.id.clone()));
    }
    row.lease = now;
}

/// A job and its targets, in idx order (a target's idx is its position).
#[derive(Debug)]
struct Stored {
    row: JobRow,
    targets: Vec<TargetRow>,
}

/// Everything the store holds. Invariants, kept by every method:
/// - `total_bytes` is the sum of every job's `n_bytes`, and each `n_bytes` the sum of its
///   targets' [`TargetRow::n_bytes`];
/// - `by_lease` and `by_age` hold exactly the terminal jobs, keyed by their current lease and
///   their `created_at`;
/// - `live_total` and `live_by_caller` count the queued and running jobs (no zero entries);
/// - `by_key[caller][idem_key]` holds `(created_at, id)` of exactly the stored jobs of that
///   caller and key (no empty entries).
#[derive(Debug, Default)]
pub(crate) struct State {
    jobs: HashMap<String, Stored>,
    by_key: HashMap<String, HashMap<String, BTreeSet<(i64, String)>>>,
    by_lease: BTreeSet<(i64, String)>,
    by_age: BTreeSet<(i64, String)>,
    live_total: usize,
    live_by_caller: HashMap<String, usize>,
    total_bytes: u64,
}

impl State {
    /// Admits `job` (SPEC §3), storing `rows` (its `job.rows()`, built by the caller before
    /// taking the lock) if it is created.
    pub(crate) fn admit(
        &mut self,
        job: &NewJob,
        caps: &Caps,
        rows: (JobRow, Vec<TargetRow>),
    ) -> Result<Admission, StoreError> {
        if let Some(id) = self.reusable_job(job, caps.ttl_secs) {
            return Ok(Admission::Reused { id });
        }
        if job.targets.len() > caps.targets_per_job {
            return Ok(Admission::TooManyTargets {
                max: caps.targets_per_job,
                got: job.targets.len(),
            });
        }
        if self.live_jobs(Some(&job.caller)) >= caps.jobs_per_caller {
            return Ok(Admission::CallerBusy);
        }
        if self.live_total >= caps.jobs_total {
            return Ok(Admission::Busy);
        }
        if self.jobs.contains_key(&job.id) {
            return Err(StoreError::Conflict(format!(
                "job id {} already exists",
                job.id
            )));
        }
        let (row, targets) = rows;
        self.total_bytes = self.total_bytes.saturating_add(row.n_bytes);
        self.live_total += 1;
        *self.live_by_caller.entry(row.caller.clone()).or_default() += 1;
        self.by_key
            .entry(row.caller.clone())
            .or_default()
            .entry(row.idem_key.clone())
            .or_default()
            .insert((row.created_at, row.id.clone()));
        self.jobs.insert(row.id.clone(), Stored { row, targets });
        Ok(Admission::Created)
    }

    /// The most recently created reusable job of the submit's caller and key.
    fn reusable_job(&self, job: &NewJob, ttl_secs: i64) -> Option<String> {
        let ids = self.by_key.get(&job.caller)?.get(&job.idem_key)?;
        ids.iter().rev().find_map(|(_, id)| {
            let row = &self.jobs.get(id)?.row;
            reusable(row.status, row.lease, job.now, ttl_secs).then(|| id.clone())
        })
    }

    pub(crate) fn job(&self, id: &str) -> Option<JobRow> {
        self.jobs.get(id).map(|s| s.row.clone())
    }

    pub(crate) fn targets(&self, id: &str) -> Vec<TargetRow> {
        self.jobs
            .get(id)
            .map(|s| s.targets.clone())
            .unwrap_or_default()
    }

    pub(crate) fn view(&self, id: &str) -> Option<(JobRow, Vec<TargetRow>)> {
        self.jobs
            .get(id)
            .map(|s| (s.row.clone(), s.targets.clone()))
    }

    pub(crate) fn start_target(&mut self, id: &str, idx: usize, now: i64) -> Option<TargetRow> {
        // One lookup of the job for the whole operation (at 10 000 live jobs each one is a
        // cache miss, under the store's lock).
        let s = self.jobs.get_mut(id)?;
        let t = s.targets.get_mut(idx)?;
        self.total_bytes = apply(&mut s.row, t, &TargetWrite::Running, self.total_bytes);
        let row = t.clone();
        if may_transition(s.row.status, JobStatus::Running) {
            // queued → running: both live, so no count or index changes.
            s.row.status = JobStatus::Running;
        }
        relet(&mut self.by_lease, &mut s.row, now);
        Some(row)
    }

    pub(crate) fn finish_target(
        &mut self,
        id: &str,
        idx: usize,
        write: &TargetWrite,
        now: i64,
        finish: Option<JobStatus>,
    ) -> bool {
        let Some(s) = self.jobs.get_mut(id) else {
            return false;
        };
        let Some(t) = s.targets.get_mut(idx) else {
            return false;
        };
        self.total_bytes = apply(&mut s.row, t, write, self.total_bytes);
        relet(&mut self.by_lease, &mut s.row, now);
        if let Some(status) = finish {
            self.set_status(id, status, "", now);
        }
        true
    }

    pub(crate) fn set_status(
        &mut self,
        id: &str,
        status: JobStatus,
        error: &str,
        now: i64,
    ) -> bool {
        let Some(s) = self.jobs.get_mut(id) else {
            return false;
        };
        let from = s.row.status;
        if !may_transition(from, status) {
            return false;
        }
        s.row.status = status;
        s.row.error = error.to_owned();
        s.row.lease = now;
        // may_transition only leaves a live status, so live → terminal is the one case that
        // moves the job between the counts and the terminal indexes.
        if from.is_live() && status.is_terminal() {
            self.live_total = self.live_total.saturating_sub(1);
            if let Some(n) = self.live_by_caller.get_mut(&s.row.caller) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    self.live_by_caller.remove(&s.row.caller);
                }
            }
            self.by_lease.insert((now, s.row.id.clone()));
            self.by_age.insert((s.row.created_at, s.row.id.clone()));
        }
        true
    }

    pub(crate) fn touch(&mut self, id: &str, now: i64) -> bool {
        let Some(s) = self.jobs.get_mut(id) else {
            return false;
        };
        relet(&mut self.by_lease, &mut s.row, now);
        true
    }

    pub(crate) fn sweep(&mut self, now: i64, ttl_secs: i64) -> usize {
        let due: Vec<String> = self
            .by_lease
            .iter()
            .take_while(|(lease, id)| {
                self.jobs
                    .get(id)
                    .is_some_and(|s| sweepable(s.row.status, *lease, now, ttl_secs))
            })
            .map(|(_, id)| id.clone())
            .collect();
        due.iter().filter(|id| self.delete(id)).count()
    }

    pub(crate) fn evict(&mut self, max_bytes: u64) -> usize {
        let mut deleted = 0;
        while self.total_bytes > max_bytes {
            let Some((_, id)) = self.by_age.pop_first() else {
                break;
            };
            if self.delete(&id) {
                deleted += 1;
            }
        }
        deleted
    }

    /// Deletes job `id` and its targets from the map and every index. Whether it existed.
    fn delete(&mut self, id: &str) -> bool {
        let Some(Stored { row, .. }) = self.jobs.remove(id) else {
            return false;
        };
        self.total_bytes = self.total_bytes.saturating_sub(row.n_bytes);
        if row.status.is_live() {
            self.live_total = self.live_total.saturating_sub(1);
            if let Some(n) = self.live_by_caller.get_mut(&row.caller) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    self.live_by_caller.remove(&row.caller);
                }
            }
        }
        self.by_lease.remove(&(row.lease, row.id.clone()));
        self.by_age.remove(&(row.created_at, row.id.clone()));
        if let Some(keys) = self.by_key.get_mut(&row.caller) {
            if let Some(ids) = keys.get_mut(&row.idem_key) {
                ids.remove(&(row.created_at, row.id));
                if ids.is_empty() {
                    keys.remove(&row.idem_key);
                }
            }
            if keys.is_empty() {
                self.by_key.remove(&row.caller);
            }
        }
        true
    }

    pub(crate) fn recover(&mut self, error: &str, now: i64) -> usize {
        let live: Vec<String> = self
            .jobs
            .values()
            .filter(|s| s.row.status.is_live())
            .map(|s| s.row.id.clone())
            .collect();
        live.iter()
            .filter(|id| self.set_status(id, JobStatus::Failed, error, now))
            .count()
    }

    pub(crate) fn live_jobs(&self, caller: Option<&str>) -> usize {
        match caller {
            None => self.live_total,
            Some(c) => self.live_by_caller.get(c).copied().unwrap_or(0),
        }
    }

    pub(crate) fn total_bytes(&self) -> u64 {
        self.total_bytes
    }

    pub(crate) fn len(&self) -> usize {
        self.jobs.len()
    }

    /// Checks every invariant of [`State`] against a full recount; the first broken one.
    #[cfg(test)]
    pub(crate) fn check(&self) -> Result<(), String> {
        let mut total = 0;
        let (mut live, mut by_caller) = (0, HashMap::<String, usize>::new());
        let (mut by_lease, mut by_age) = (BTreeSet::new(), BTreeSet::new());
        let mut keyed = 0;
        for (id, s) in &self.jobs {
            let r = &s.row;
            let bytes: u64 = s.targets.iter().map(TargetRow::n_bytes).sum();
            let done = s.targets.iter().filter(|t| t.status.is_finished()).count();
            if r.n_bytes != bytes || r.targets_done != done || r.targets_total != s.targets.len() {
                return Err(format!(
                    "job {id}: counts {r:?} vs {bytes} bytes, {done} done"
                ));
            }
            if s.targets.iter().enumerate().any(|(i, t)| t.idx != i) {
                return Err(format!("job {id}: targets out of idx order"));
            }
            total += r.n_bytes;
            if r.status.is_live() {
                live += 1;
                *by_caller.entry(r.caller.clone()).or_default() += 1;
            } else {
                by_lease.insert((r.lease, id.clone()));
                by_age.insert((r.created_at, id.clone()));
            }
            let indexed = self
                .by_key
                .get(&r.caller)
                .and_then(|k| k.get(&r.idem_key))
                .is_some_and(|ids| ids.contains(&(r.created_at, id.clone())));
            if !indexed {
                return Err(format!("job {id}: missing from the key index"));
            }
            keyed += 1;
        }
        let key_entries: usize = self
            .by_key
            .values()
            .flat_map(|k| k.values())
            .map(BTreeSet::len)
            .sum();
        let empty_keys = self
            .by_key
            .values()
            .any(|k| k.is_empty() || k.values().any(BTreeSet::is_empty));
        if total != self.total_bytes {
            return Err(format!("total {} != {total}", self.total_bytes));
        }
        if live != self.live_total || by_caller != self.live_by_caller {
            return Err("live counts".into());
        }
        if by_lease != self.by_lease || by_age != self.by_age {
            return Err("terminal indexes".into());
        }
        if key_entries != keyed || empty_keys {
            return Err("key index has stale or empty entries".into());
        }
        Ok(())
    }
}
