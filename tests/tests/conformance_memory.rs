//! The store conformance suite on [`MemoryStore`].

use std::sync::Arc;

use rota_store_memory::MemoryStore;

rota_tests::conformance_tests!(sync || (Arc::new(MemoryStore::new()), ()));
