//! Helpers of the tests that open files the store must refuse.

use std::fs;
use std::path::{Path, PathBuf};

use rota_core::StoreError;
use rota_store_sqlite::SqliteStore;

/// Every file in `dir` with its bytes, so a test can see that nothing was written or added.
pub fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut files: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let p = e.unwrap().path();
            let bytes = fs::read(&p).unwrap();
            (p, bytes)
        })
        .collect();
    files.sort();
    files
}

/// Opens `path` expecting a refusal; checks that the directory is byte for byte unchanged.
pub fn refused(path: &Path) -> StoreError {
    let dir = path.parent().unwrap();
    let before = snapshot(dir);
    let err = SqliteStore::open(path).expect_err("the file must be refused");
    assert_eq!(
        snapshot(dir),
        before,
        "refusing {err} changed the directory"
    );
    err
}
