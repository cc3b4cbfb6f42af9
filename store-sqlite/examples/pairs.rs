//! A quick measure of the store's per-target cost: `start_target` + `finish_target` pairs per
//! second on a temp file (WAL, `synchronous = NORMAL`), beside a raw rusqlite loop of the same
//! number of write transactions with two UPDATEs each. Not a benchmark (rota-bench is); run:
//!
//! ```text
//! cargo run --release -p rota-store-sqlite --example pairs [targets] [store|raw]
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Instant;

use rota_core::{BatchStore, CallerClass, Caps, JobStatus, NewJob, TargetWrite};
use rota_store_sqlite::SqliteStore;

const PER_JOB: usize = 32;

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let total: usize = std::env::args()
        .nth(1)
        .map_or(100_000, |n| n.parse().unwrap());
    let only = std::env::args().nth(2).unwrap_or_default();
    let dir = tempfile::tempdir().unwrap();
    if only != "raw" {
        store_loop(dir.path(), total).await;
    }
    if only != "store" {
        raw_loop(dir.path(), total);
    }
}

async fn store_loop(dir: &std::path::Path, total: usize) {
    let store = SqliteStore::open(dir.join("rota.db")).unwrap();
    let caps = Caps {
        targets_per_job: PER_JOB,
        jobs_per_caller: usize::MAX,
        jobs_total: usize::MAX,
        ttl_secs: 3600,
    };
    let jobs = total.div_ceil(PER_JOB);
    for j in 0..jobs {
        let job = NewJob {
            id: format!("{j:032x}"),
            caller: "bench".into(),
            class: CallerClass::Fleet,
            idem_key: format!("k{j}"),
            targets: (0..PER_JOB)
                .map(|i| (format!("https://example.com/{j}/{i}"), "{}".into()))
                .collect(),
            now: 1,
        };
        store.admit(&job, &caps).await.unwrap();
    }
    let result = TargetWrite::Done {
        result: format!(r#"{{"content":"{}"}}"#, "x".repeat(200)),
    };
    let started = Instant::now();
    let mut pairs = 0;
    'outer: for j in 0..jobs {
        let id = format!("{j:032x}");
        for i in 0..PER_JOB {
            store.start_target(&id, i, 2).await.unwrap().unwrap();
            let finish = (i + 1 == PER_JOB).then_some(JobStatus::Done);
            assert!(
                store
                    .finish_target(&id, i, &result, 3, finish)
                    .await
                    .unwrap()
            );
            pairs += 1;
            if pairs == total {
                break 'outer;
            }
        }
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "store: {pairs} start+finish pairs in {secs:.2} s = {:.0} pairs/s = {:.0} write txns/s",
        pairs as f64 / secs,
        2.0 * pairs as f64 / secs
    );
}

/// The same number of write transactions, two UPDATEs each, straight on rusqlite.
fn raw_loop(dir: &std::path::Path, pairs: usize) {
    let conn = rusqlite::Connection::open(dir.join("raw.db")).unwrap();
    conn.execute_batch(
        "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; \
         CREATE TABLE a (k INTEGER PRIMARY KEY, v INTEGER); \
         CREATE TABLE b (k INTEGER PRIMARY KEY, v INTEGER); \
         INSERT INTO a VALUES (1, 0); INSERT INTO b VALUES (1, 0);",
    )
    .unwrap();
    let started = Instant::now();
    for n in 0..2 * pairs as i64 {
        conn.execute_batch("BEGIN IMMEDIATE").unwrap();
        conn.prepare_cached("UPDATE a SET v = ?1 WHERE k = 1")
            .unwrap()
            .execute([n])
            .unwrap();
        conn.prepare_cached("UPDATE b SET v = ?1 WHERE k = 1")
            .unwrap()
            .execute([n])
            .unwrap();
        conn.execute_batch("COMMIT").unwrap();
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "raw:   {} two-UPDATE txns in {secs:.2} s = {:.0} txns/s",
        2 * pairs,
        2.0 * pairs as f64 / secs
    );
}
