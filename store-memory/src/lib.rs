//! rota-store-memory: [`MemoryStore`], the in-process [`BatchStore`](rota_core::BatchStore) of
//! rota.
//!
//! Every job lives in one `HashMap` behind one [`std::sync::Mutex`]. Each operation takes the
//! lock, does its work without awaiting and releases it, so admit (idempotency lookup, caps and
//! insert) is atomic and concurrent callers never exceed a cap or create two jobs for one key.
//! Nothing survives the process: it is the store for tests and for embeddings that need no
//! persistence.
//!
//! Beside the jobs it keeps, updated on every write:
//! - the total of every job's `n_bytes`, so [`evict`](rota_core::BatchStore::evict) under budget
//!   is one comparison;
//! - two ordered indexes of the terminal jobs, by `(lease, id)` for sweep and by
//!   `(created_at, id)` for evict, so both find their victims from the front of a `BTreeSet`
//!   instead of scanning, and stop at the first job that is not due;
//! - the live (queued + running) job count, in all and per caller, so the caps are O(1);
//! - `(caller, idem_key)` → the jobs of that key by `(created_at, id)`, so the idempotency lookup
//!   reads only the jobs of one key.
//!
//! Only [`recover`](rota_core::BatchStore::recover) scans every job: it runs once, when a runner
//! starts.
//!
//! A panic while the lock is held cannot leave the state half-updated by this crate (no code
//! under the lock panics), so a poisoned lock is taken over rather than turned into a panic.
#![deny(clippy::unwrap_used, clippy::expect_used)]
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod state;
mod store;

pub use store::MemoryStore;
