//! The tables of a rota redb store, laid out for the operations of
//! [`BatchStore`](rota_core::BatchStore).
//!
//! | table | key → value | for |
//! |---|---|---|
//! | `rota_meta` | name → bytes | magic, schema version, the total bytes, the live total |
//! | `jobs` | job id → job row | every read and write of a job |
//! | `targets` | (job id, idx) → target row | a job's targets in idx order, by range |
//! | `idem` | (caller, idem key) ⇒ job ids (multimap) | admit's reuse check |
//! | `live` | job id → () | recover: the queued and running jobs |
//! | `caller_live` | caller → live count | admit's per-caller cap, in O(1) |
//! | `terminal_by_lease` | (lease, job id) → () | sweep: oldest leases first |
//! | `terminal_by_created` | (created_at, job id) → () | evict: oldest jobs first |
//!
//! The counters and indexes change in the same transaction as the rows they describe, so they
//! are never out of step, even after a crash.

use redb::{MultimapTableDefinition, TableDefinition};

pub(crate) const META: TableDefinition<&str, &[u8]> = TableDefinition::new("rota_meta");
pub(crate) const JOBS: TableDefinition<&str, &[u8]> = TableDefinition::new("jobs");
pub(crate) const TARGETS: TableDefinition<(&str, u64), &[u8]> = TableDefinition::new("targets");
pub(crate) const IDEM: MultimapTableDefinition<(&str, &str), &str> =
    MultimapTableDefinition::new("idem");
pub(crate) const LIVE: TableDefinition<&str, ()> = TableDefinition::new("live");
pub(crate) const CALLER_LIVE: TableDefinition<&str, u64> = TableDefinition::new("caller_live");
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
/// The schema version this build reads and writes.
pub(crate) const VERSION: &str = "1";
/// The meta key of the sum of every job's `n_bytes`.
pub(crate) const TOTAL_BYTES: &str = "total_bytes";
/// The meta key of the number of live jobs.
pub(crate) const LIVE_TOTAL: &str = "live_total";
