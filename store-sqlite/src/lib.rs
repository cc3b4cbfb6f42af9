//! rota-store-sqlite: [`SqliteStore`], the SQLite [`BatchStore`](rota_core::BatchStore) of rota:
//! crash-safe, owned by one process, and refusing any file that is not its own.
//!
//! - [`store`](SqliteStore): the store, its [`SqliteOptions`] and the trade of [`Synchronous`];
//!   one connection behind a mutex, each operation run inline (no `spawn_blocking`).
//! - `open`: how a file is looked at before anything is written, and how the exclusive lock
//!   makes one process its owner.
//! - `schema`: the tables and indexes, and the marks of a rota store: `PRAGMA application_id`
//!   = [`APPLICATION_ID`] and `PRAGMA user_version` = [`SCHEMA_VERSION`].
//! - `ops`: every operation, one statement per read and a few per write, on cached prepared
//!   statements. A target costs the runner two writes:
//!   [`start_target`](rota_core::BatchStore::start_target) and
//!   [`finish_target`](rota_core::BatchStore::finish_target) (which also sets the terminal
//!   status of a job's last target).
//! - `batch`: the group commit. Each write is queued; the thread that takes the connection runs
//!   every queued write in one `BEGIN IMMEDIATE` transaction and commits once, so two workers
//!   storing at once share a commit (if one write fails after others of its transaction,
//!   those run again with a savepoint each, so that it is rolled back alone).
#![deny(clippy::unwrap_used, clippy::expect_used)]
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod batch;
#[cfg(test)]
mod batch_tests;
mod error;
mod open;
mod ops;
mod schema;
mod store;

pub use schema::{APPLICATION_ID, SCHEMA_VERSION};
pub use store::{SqliteOptions, SqliteStore, Synchronous};
