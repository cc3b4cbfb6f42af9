//! rota-store-redb: [`RedbStore`], a [`BatchStore`](rota_core::BatchStore) in a redb database.
//!
//! - [`RedbStore::open`] / [`RedbStore::open_with`]: a single file, owned by one process,
//!   crash-safe ([`Durability::Immediate`], the default) or faster and possibly losing the
//!   latest writes on a crash ([`Durability::None`]);
//! - [`RedbStore::in_memory`]: the same store in memory.
//!
//! Every operation runs whole inside one transaction (concurrent ones may share one: group
//! commit); the layout and the fsync economy are documented on
//! [`RedbStore`].
#![deny(clippy::unwrap_used, clippy::expect_used)]
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

#[cfg(test)]
mod batch_tests;
mod codec;
mod commit;
mod error;
#[cfg(test)]
mod fault_tests;
mod held;
#[cfg(test)]
mod held_tests;
#[cfg(test)]
mod lock_tests;
mod open;
mod overlay;
mod store;
mod tables;
#[cfg(test)]
mod test_support;
#[cfg(test)]
mod uncertain_tests;
mod verify;

pub use store::{Durability, GROUP_WAIT, MAX_GROUP_WAIT, RedbOptions, RedbStore, SYNC_EVERY};
pub use verify::Verified;
