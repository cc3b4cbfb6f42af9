//! The store conformance suite on [`SqliteStore`]: once on a fresh file in a temp dir per check
//! (WAL, the exclusive lock, real commits), once in memory.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use rota_store_sqlite::SqliteStore;

mod file {
    use super::*;

    rota_tests::conformance_tests!(
        sync || {
            let dir = tempfile::tempdir().unwrap();
            let store = SqliteStore::open(dir.path().join("rota.db")).unwrap();
            (Arc::new(store), dir)
        }
    );
}

mod in_memory {
    use super::*;

    rota_tests::conformance_tests!(sync || (Arc::new(SqliteStore::open_in_memory().unwrap()), ()));
}
