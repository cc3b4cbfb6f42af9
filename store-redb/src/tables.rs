//! The tables of a rota redb store, laid out for the operations of
//! [`BatchStore`](rota_core::BatchStore).
//!
//! | table | key → value | for |
//! |---|---|---|
//! | `rota_meta` | name → bytes | the magic and the schema version |
//! | `live_rows` | (job id, 0) → job row; (job id, idx + 1) → target row | the queued and running jobs and their targets |
//! | `rows` | the same | the terminal jobs and their targets |
//! | `idem` | (caller, idem key) ⇒ job ids (multimap) | admit's reuse check |
//! | `terminal_by_lease` | (lease, job id) → () | sweep: oldest leases first |
//! | `terminal_by_created` | (created_at, job id) → () | evict: oldest jobs first |
//!
//! A job's row and its targets' rows share one table, the job's first: storing a target writes
//! the target and its job, two neighbouring rows of one B-tree, so a commit copies one path of
//! pages rather than one per table (redb copies every page it changes, up to the root, and
//! writes them all at each durable commit). The rows of the live jobs, the ones the runner
//! writes target by target, are kept apart from those of the terminal jobs, so that the path a
//! target's commit copies is as deep as the live jobs make it, not the history: a job's rows
//! move from `live_rows` to `rows` in the transaction that ends it, one copy per job. (Page
//! writes per fsync in the `rota-bench` history row, counted with `strace`: with one table for
//! both, 17.5 on a store that held 1 000 000 terminal targets against 14.5 on an empty one;
//! with the live rows apart, 13.5–13.6 against 13.3.) The live jobs are the
//! job rows in `live_rows`: that table is also the index `recover` and the counts at open read.
//! The indexes change in the same transaction as the rows they describe, so they are never out
//! of step, even after a crash. The counts admit and evict consult (total bytes, live jobs in
//! all and per caller) are not stored: the store counts them when it opens and keeps them in
//! memory.

use redb::{MultimapTableDefinition, TableDefinition};

pub(crate) const META: TableDefinition<&str, &[u8]> = TableDefinition::new("rota_meta");
/// The rows of the terminal jobs.
pub(crate) const ROWS: TableDefinition<(&str, u64), &[u8]> = TableDefinition::new("rows");
/// The rows of the live (queued or running) jobs.
pub(crate) const LIVE_ROWS: TableDefinition<(&str, u64), &[u8]> = TableDefinition::new("live_rows");
pub(crate) const IDEM: MultimapTableDefinition<(&str, &str), &str> =
    MultimapTableDefinition::new("idem");
/// Schema 2's index of the live jobs, whose rows were in [`ROWS`]: read only to migrate.
pub(crate) const LIVE_V2: TableDefinition<&str, ()> = TableDefinition::new("live");
pub(crate) const BY_LEASE: TableDefinition<(i64, &str), ()> =
    TableDefinition::new("terminal_by_lease");
pub(crate) const BY_CREATED: TableDefinition<(i64, &str), ()> =
    TableDefinition::new("terminal_by_created");

/// The meta key of the magic value.
pub(crate) const MAGIC_KEY: &str = "magic";
/// What a rota store holds under [`MAGIC_KEY`].
pub(crate) const MAGIC: &[u8] = b"rota-store-redb";
/// The meta key of the schema version.
pub(crate) const VERSION_KEY: &str = "schema_version";
/// The schema version this build reads and writes. Version 1 (before any release) kept jobs
/// and targets in tables of their own and stored the counts; version 2 kept every job's rows
/// in `rows` with an index of the live jobs: [`RedbStore::upgrade`](crate::RedbStore::upgrade)
/// migrates it ([`VERSION_2`]).
pub(crate) const VERSION: &str = "3";
/// The one older schema version this build can migrate to [`VERSION`] (`RedbStore::upgrade`);
/// [`RedbStore::open`](crate::RedbStore::open) refuses it, as the SPEC asks of any other version.
pub(crate) const VERSION_2: &str = "2";

/// The slot of a job's own row in `rows`.
pub(crate) const JOB_SLOT: u64 = 0;

/// The slot of target `idx` in `rows`: `idx + 1`, `None` past `u64`.
pub(crate) fn target_slot(idx: usize) -> Option<u64> {
    u64::try_from(idx).ok()?.checked_add(1)
}
