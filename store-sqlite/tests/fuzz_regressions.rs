//! Inputs the `decode` fuzz target found, kept as ordinary tests: a file that is not a rota
//! store this build can read fails to open with [`StoreError::Corrupt`] naming the problem, and
//! its directory is left byte for byte as it was (no side file either).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::fs;

use rota_core::StoreError;
use rota_store_sqlite::SqliteStore;

/// A rota-marked header (WAL mode) over 9 pages, some malformed, whose page count says
/// 4278190089 and whose change counter (24..28) differs from its valid-for number (92..96).
const FIXTURE: &[u8] = include_bytes!("fixtures/fuzz-changed-on-refusal.bin");

/// Writes `bytes` (and `wal`, as its `-wal`, if given) to a fresh directory, opens it expecting
/// [`StoreError::Corrupt`], checks the directory is unchanged and returns the message.
fn refused_corrupt(bytes: &[u8], wal: Option<&[u8]>) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.sqlite");
    fs::write(&path, bytes).unwrap();
    if let Some(wal) = wal {
        fs::write(dir.path().join("store.sqlite-wal"), wal).unwrap();
    }
    match common::refused(&path) {
        StoreError::Corrupt(msg) => msg,
        other => panic!("expected Corrupt, got {other:?}"),
    }
}

/// A real rota store whose every page after the first (the schema) is overwritten with 0xff:
/// the header and the schema are sound, every table page is malformed. (The fuzz fixture with a
/// mended header is not used here: whether SQLite notices its damaged cells varies run to run.)
fn with_malformed_pages() -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.sqlite");
    drop(SqliteStore::open(&path).unwrap());
    let mut bytes = fs::read(&path).unwrap();
    let page = usize::from(u16::from_be_bytes([bytes[16], bytes[17]]));
    assert!(
        bytes.len() > page,
        "a new store has table pages after the schema page"
    );
    for b in &mut bytes[page..] {
        *b = 0xff;
    }
    bytes
}

/// SQLite rewrites a stale header page count as soon as a write transaction begins; a rota
/// store never has one (every SQLite since 3.7.0 keeps it current), so the header alone refuses
/// it, every time, before SQLite opens the file.
#[test]
fn a_rota_header_with_a_stale_page_count_is_refused_unchanged() {
    for _ in 0..5 {
        let msg = refused_corrupt(FIXTURE, None);
        assert!(msg.contains("page count is stale"), "{msg}");
    }
}

/// Whether SQLite finds the pages malformed is decided by reads (the marks, the tables and the
/// byte sum over every job) before anything may write: the file is refused untouched.
#[test]
fn a_rota_file_with_malformed_pages_is_refused_before_anything_is_written() {
    let bytes = with_malformed_pages();
    for _ in 0..5 {
        let msg = refused_corrupt(&bytes, None);
        assert!(msg.contains("malformed"), "{msg}");
    }
}

/// A `-wal` already beside a refused file (a crash's, or anyone's) is neither applied to the
/// file nor removed.
#[test]
fn a_refused_file_keeps_the_wal_beside_it() {
    let msg = refused_corrupt(&with_malformed_pages(), Some(b""));
    assert!(msg.contains("malformed"), "{msg}");
}
