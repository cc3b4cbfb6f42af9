//! How many target writes (`start_target` + `finish_target` pairs) a second a file store takes,
//! against raw redb loops of the same two commits, all durable or with the start non-durable.
//!
//! `cargo run --release -p rota-store-redb --example commit_rate [pairs] [config]` (default
//! 2000 pairs), in a temp dir (`TMPDIR` chooses where). With a config (`raw_all`, `raw_lazy`,
//! `store`, `none`, `mem`) it runs that one alone, for `strace -f -c -e trace=fdatasync,fsync`
//! (which counts the fsyncs a pair costs, whatever the machine's load) or `perf`.

use std::time::Instant;

use redb::{Database, Durability as RedbDurability, TableDefinition};
use rota_core::{BatchStore, CallerClass, Caps, JobStatus, NewJob, TargetWrite};
use rota_store_redb::{Durability, RedbOptions, RedbStore};

const T: TableDefinition<u64, &[u8]> = TableDefinition::new("t");

fn raw(dir: &std::path::Path, name: &str, pairs: u64, start_durable: bool) -> f64 {
    let db = Database::create(dir.join(name)).unwrap_or_else(|e| panic!("{e}"));
    let value = vec![b'x'; 200];
    let t0 = Instant::now();
    for i in 0..pairs {
        for durable in [start_durable, true] {
            let mut txn = db.begin_write().unwrap_or_else(|e| panic!("{e}"));
            if !durable {
                txn.set_durability(RedbDurability::None)
                    .unwrap_or_else(|e| panic!("{e}"));
            }
            {
                let mut t = txn.open_table(T).unwrap_or_else(|e| panic!("{e}"));
                t.insert(i, value.as_slice())
                    .unwrap_or_else(|e| panic!("{e}"));
            }
            txn.commit().unwrap_or_else(|e| panic!("{e}"));
        }
    }
    pairs as f64 / t0.elapsed().as_secs_f64()
}

async fn store(dir: &std::path::Path, name: &str, pairs: u64, opts: RedbOptions) -> f64 {
    let s = RedbStore::open_with(dir.join(name), opts).unwrap_or_else(|e| panic!("{e}"));
    pairs_per_sec(&s, pairs).await
}

async fn pairs_per_sec(s: &RedbStore, pairs: u64) -> f64 {
    let per_job = 32u64;
    let caps = Caps {
        targets_per_job: per_job as usize,
        jobs_per_caller: 1,
        jobs_total: 8,
        ttl_secs: 86_400,
    };
    let result = TargetWrite::Done {
        result: format!(r#"{{"content":"{}"}}"#, "x".repeat(200)),
    };
    let t0 = Instant::now();
    let mut done = 0;
    let mut job = 0u64;
    while done < pairs {
        let id = format!("{job:032x}");
        let nj = NewJob {
            id: id.clone(),
            caller: "bench".into(),
            class: CallerClass::Fleet,
            idem_key: id.clone(),
            targets: (0..per_job)
                .map(|i| (format!("https://example.com/{job}/{i}"), "{}".into()))
                .collect(),
            now: 1,
        };
        s.admit(&nj, &caps).await.unwrap_or_else(|e| panic!("{e}"));
        for idx in 0..per_job as usize {
            s.start_target(&id, idx, 2)
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            let last = idx + 1 == per_job as usize;
            let finish = last.then_some(JobStatus::Done);
            s.finish_target(&id, idx, &result, 3, finish)
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            done += 1;
        }
        job += 1;
    }
    done as f64 / t0.elapsed().as_secs_f64()
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let pairs: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(2000);
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let none = RedbOptions {
        durability: Durability::None,
        ..RedbOptions::default()
    };
    // One configuration alone, for `strace -c` or `perf`.
    if let Some(only) = std::env::args().nth(2) {
        let s = match only.as_str() {
            "raw_all" => raw(dir.path(), "raw_all.redb", pairs, true),
            "raw_lazy" => raw(dir.path(), "raw_lazy.redb", pairs, false),
            "store" => store(dir.path(), "store.redb", pairs, RedbOptions::default()).await,
            "none" => store(dir.path(), "store_none.redb", pairs, none).await,
            "mem" => {
                let mem = RedbStore::in_memory().unwrap_or_else(|e| panic!("{e}"));
                pairs_per_sec(&mem, pairs).await
            }
            other => panic!("unknown configuration {other}"),
        };
        println!("{only}: {s:8.0} pairs/s");
        return;
    }
    println!("{pairs} start+finish pairs each (32 targets a job, 200-byte results), 3 rounds");
    for round in 0..3 {
        let name = |n: &str| format!("{n}-{round}.redb");
        let all_durable = raw(dir.path(), &name("raw_all"), pairs, true);
        println!("raw redb, start Immediate + finish Immediate: {all_durable:8.0} pairs/s");
        let lazy_start = raw(dir.path(), &name("raw_lazy"), pairs, false);
        println!("raw redb, start None      + finish Immediate: {lazy_start:8.0} pairs/s");
        let s = store(dir.path(), &name("store"), pairs, RedbOptions::default()).await;
        println!("RedbStore, Durability::Immediate (default):   {s:8.0} pairs/s");
        let s = store(dir.path(), &name("store_none"), pairs, none.clone()).await;
        println!("RedbStore, Durability::None:                  {s:8.0} pairs/s");
        let mem = RedbStore::in_memory().unwrap_or_else(|e| panic!("{e}"));
        let s = pairs_per_sec(&mem, pairs).await;
        println!("RedbStore, in_memory():                       {s:8.0} pairs/s");
    }
}
