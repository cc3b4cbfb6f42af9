//! The runner behaviour suite (`rota_tests::runner`) on [`RedbStore`]: on a fresh file in a temp
//! dir per test, and in memory.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use rota_store_redb::RedbStore;

mod file {
    use super::*;

    rota_tests::runner_tests!(
        sync || {
            let dir = tempfile::tempdir().unwrap();
            let store = RedbStore::open(dir.path().join("rota.redb")).unwrap();
            (Arc::new(store), dir)
        }
    );
}

mod in_memory {
    use super::*;

    rota_tests::runner_tests!(sync || (Arc::new(RedbStore::in_memory().unwrap()), ()));
}
