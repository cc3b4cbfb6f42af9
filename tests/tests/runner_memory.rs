//! The runner behaviour suite (`rota_tests::runner`) on [`MemoryStore`].

use std::sync::Arc;

use rota_store_memory::MemoryStore;

rota_tests::runner_tests!(sync || (Arc::new(MemoryStore::new()), ()));
