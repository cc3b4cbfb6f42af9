//! The runner behaviour suite (`rota_tests::runner`) on [`SqliteStore`]: on a fresh file in a
//! temp dir per test, and in memory.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use rota_store_sqlite::SqliteStore;

mod file {
    use super::*;

    rota_tests::runner_tests!(
        sync || {
            let dir = tempfile::tempdir().unwrap();
            let store = SqliteStore::open(dir.path().join("rota.sqlite3")).unwrap();
            (Arc::new(store), dir)
        }
    );
}

mod in_memory {
    use super::*;

    rota_tests::runner_tests!(sync || (Arc::new(SqliteStore::open_in_memory().unwrap()), ()));
}
