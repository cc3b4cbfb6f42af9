//! The store conformance suite on [`RedbStore`]: once on a fresh file in a temp dir per check
//! (durable commits, the lock), once in memory.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use rota_store_redb::RedbStore;

mod file {
    use super::*;

    rota_tests::conformance_tests!(
        sync || {
            let dir = tempfile::tempdir().unwrap();
            let store = RedbStore::open(dir.path().join("rota.redb")).unwrap();
            (Arc::new(store), dir)
        }
    );
}

mod in_memory {
    use super::*;

    rota_tests::conformance_tests!(sync || (Arc::new(RedbStore::in_memory().unwrap()), ()));
}
