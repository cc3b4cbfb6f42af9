//! [`RedbStore::verify`]: a full scan checking that every index and counter agrees with the rows.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use redb::{ReadableDatabase, ReadableMultimapTable, ReadableTable};
use rota_core::{StoreError, TargetRow};

use crate::codec::{decode_job, decode_target};
use crate::error::{Ctx, err};
use crate::store::RedbStore;
use crate::tables::*;

/// What [`RedbStore::verify`] found: a consistent store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    /// Every stored job's id, in id order.
    pub jobs: Vec<String>,
    /// How many of them are live (queued or running).
    pub live: usize,
    /// How many targets are stored.
    pub targets: usize,
    /// The sum of every job's `n_bytes`.
    pub total_bytes: u64,
}

impl RedbStore {
    /// Reads the whole store in one read transaction and checks that it is consistent: every
    /// row decodes; each job has exactly the targets `0..targets_total`, and its `targets_done`
    /// and `n_bytes` match them; a live job's rows are all in the live rows and a terminal job's
    /// all in the terminal ones; the counts the store keeps in memory (total bytes, live jobs in
    /// all and per caller) match the jobs; the idempotency, lease and created indexes hold
    /// exactly the jobs they should. [`StoreError::Corrupt`] names the first disagreement. For
    /// tools and tests: it reads everything.
    pub fn verify(&self) -> Result<Verified, StoreError> {
        // The snapshot and the counts of one moment: no commit between the two. (The database
        // first, then `published`, as a commit takes them.)
        let slot = self.slot();
        let (txn, counted) = {
            let _published = self.published();
            (
                slot.db()?.begin_read().map_err(err("begin read"))?,
                self.tally(),
            )
        };
        let bad = |why: String| StoreError::Corrupt(format!("verify: {why}"));

        let mut jobs = BTreeMap::new();
        let mut targets: BTreeMap<String, Vec<TargetRow>> = BTreeMap::new();
        let mut n_targets = 0;
        for (def, in_live) in [(LIVE_ROWS, true), (ROWS, false)] {
            let table = txn.open_table(def).ctx("verify")?;
            // Every id seen in this table: a job's targets must be in its own job's table.
            let mut here = BTreeSet::new();
            for entry in table.iter().ctx("verify")? {
                let (k, v) = entry.ctx("verify")?;
                let (id, slot) = k.value();
                if slot == JOB_SLOT {
                    let job = decode_job(id, v.value())?;
                    if job.status.is_live() != in_live {
                        return Err(bad(format!(
                            "job {id}: a {} job among the {} rows",
                            job.status.as_str(),
                            if in_live { "live" } else { "terminal" }
                        )));
                    }
                    if jobs.insert(job.id.clone(), job).is_some() {
                        return Err(bad(format!("job {id}: rows in both tables")));
                    }
                } else {
                    let row = decode_target(slot - 1, v.value())?;
                    targets.entry(id.to_owned()).or_default().push(row);
                    n_targets += 1;
                }
                here.insert(id.to_owned());
            }
            if let Some(id) = here
                .iter()
                .find(|id| jobs.get(*id).is_none_or(|j| j.status.is_live() != in_live))
            {
                return Err(bad(format!("targets of job {id} apart from its job row")));
            }
        }

        let mut total = 0u64;
        let mut live = BTreeSet::new();
        let mut per_caller: BTreeMap<&str, u64> = BTreeMap::new();
        let mut by_lease = BTreeSet::new();
        let mut by_created = BTreeSet::new();
        for (id, job) in &jobs {
            let rows = targets.get(id).map_or(&[][..], Vec::as_slice);
            if rows.len() != job.targets_total || rows.iter().enumerate().any(|(i, r)| r.idx != i) {
                return Err(bad(format!(
                    "job {id}: {} target rows for targets_total {}",
                    rows.len(),
                    job.targets_total
                )));
            }
            let done = rows.iter().filter(|r| r.status.is_finished()).count();
            if done != job.targets_done {
                return Err(bad(format!(
                    "job {id}: targets_done {} but {done} finished targets",
                    job.targets_done
                )));
            }
            let bytes: u64 = rows.iter().map(TargetRow::n_bytes).sum();
            if bytes != job.n_bytes {
                return Err(bad(format!(
                    "job {id}: n_bytes {} but its targets hold {bytes}",
                    job.n_bytes
                )));
            }
            total += bytes;
            if job.status.is_live() {
                live.insert(id.clone());
                *per_caller.entry(job.caller.as_str()).or_default() += 1;
            } else {
                by_lease.insert((job.lease, id.clone()));
                by_created.insert((job.created_at, id.clone()));
            }
        }

        if counted.bytes != total {
            return Err(bad(format!(
                "the counted total bytes {} are not the jobs' sum {total}",
                counted.bytes
            )));
        }
        if counted.live != live.len() as u64 {
            return Err(bad(format!(
                "the counted live jobs {} are not {}",
                counted.live,
                live.len()
            )));
        }
        let expected: HashMap<String, u64> = per_caller
            .into_iter()
            .map(|(c, n)| (c.to_owned(), n))
            .collect();
        if counted.by_caller != expected {
            return Err(bad("the counted per-caller live jobs do not match".into()));
        }

        for (def, want, name) in [
            (BY_LEASE, &by_lease, "lease"),
            (BY_CREATED, &by_created, "created"),
        ] {
            let mut got = BTreeSet::new();
            for entry in txn.open_table(def).ctx("verify")?.iter().ctx("verify")? {
                let (k, _) = entry.ctx("verify")?;
                let (t, id) = k.value();
                got.insert((t, id.to_owned()));
            }
            if &got != want {
                return Err(bad(format!(
                    "the {name} index does not match the terminal jobs"
                )));
            }
        }
        let mut idem = BTreeSet::new();
        let table = txn.open_multimap_table(IDEM).ctx("verify")?;
        for entry in table.iter().ctx("verify")? {
            let (k, values) = entry.ctx("verify")?;
            let (caller, key) = k.value();
            for v in values {
                let v = v.ctx("verify")?;
                idem.insert((caller.to_owned(), key.to_owned(), v.value().to_owned()));
            }
        }
        let want: BTreeSet<_> = jobs
            .values()
            .map(|j| (j.caller.clone(), j.idem_key.clone(), j.id.clone()))
            .collect();
        if idem != want {
            return Err(bad("the idempotency index does not match the jobs".into()));
        }

        Ok(Verified {
            live: live.len(),
            jobs: jobs.into_keys().collect(),
            targets: n_targets,
            total_bytes: total,
        })
    }
}
