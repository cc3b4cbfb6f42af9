//! I/O failure injected at every write of a sequence of operations: whatever fails, the store
//! reopens consistent, every acknowledged operation is there, and the failed one is all or
//! nothing. (redb's own fuzzer does the same with a countdown backend.)

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use redb::backends::InMemoryBackend;
use redb::{Builder, StorageBackend};
use rota_core::{Admission, BatchStore, CallerClass, Caps, JobStatus, NewJob, TargetWrite};
use rota_store_memory::MemoryStore;

use crate::{RedbOptions, RedbStore};

/// Memory that outlives a database handle, failing every write once the countdown runs out.
#[derive(Debug)]
struct Failing {
    mem: Arc<InMemoryBackend>,
    countdown: Arc<AtomicU64>,
}

impl Failing {
    fn tick(&self) -> io::Result<()> {
        let left = self.countdown.load(Ordering::SeqCst);
        if left == 0 {
            return Err(io::Error::other("injected I/O failure"));
        }
        self.countdown.store(left - 1, Ordering::SeqCst);
        Ok(())
    }
}

impl StorageBackend for Failing {
    fn len(&self) -> io::Result<u64> {
        self.mem.len()
    }
    fn read(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        self.mem.read(offset, out)
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.tick()?;
        self.mem.set_len(len)
    }
    fn sync_data(&self) -> io::Result<()> {
        self.tick()?;
        self.mem.sync_data()
    }
    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.tick()?;
        self.mem.write(offset, data)
    }
}

/// The database on `mem`, its writes failing per `countdown`.
fn database(
    mem: &Arc<InMemoryBackend>,
    countdown: &Arc<AtomicU64>,
) -> Result<redb::Database, redb::DatabaseError> {
    Builder::new().create_with_backend(Failing {
        mem: mem.clone(),
        countdown: countdown.clone(),
    })
}

/// A store on `mem`, opened again on it after an I/O error as a file store is on its file.
fn open(mem: &Arc<InMemoryBackend>, countdown: &Arc<AtomicU64>) -> RedbStore {
    let db = database(mem, countdown).unwrap();
    let (mem, countdown) = (mem.clone(), countdown.clone());
    RedbStore::from_db(db, &RedbOptions::default())
        .unwrap()
        .reopened_by(Box::new(move || {
            database(&mem, &countdown).map_err(crate::error::err("open store again"))
        }))
}

const A: &str = "0000000000000000000000000000000a";
const B: &str = "0000000000000000000000000000000b";
const C: &str = "0000000000000000000000000000000c";

fn new_job(id: &str, caller: &str, n: usize, now: i64) -> NewJob {
    NewJob {
        id: id.into(),
        caller: caller.into(),
        class: CallerClass::Fleet,
        idem_key: format!("key-{id}"),
        targets: (0..n).map(|i| (format!("u{i}"), "{}".into())).collect(),
        now,
    }
}

const CAPS: Caps = Caps {
    targets_per_job: 8,
    jobs_per_caller: 4,
    jobs_total: 8,
    ttl_secs: 100,
};

/// Step `n` of the script, on any store. `None` past the end.
async fn step(s: &dyn BatchStore, n: usize) -> Option<Result<(), rota_core::StoreError>> {
    let done = |i: usize| TargetWrite::Done {
        result: format!(r#"{{"content":"{}"}}"#, "r".repeat(100 * (i + 1))),
    };
    let r = match n {
        0 => s.admit(&new_job(A, "alice", 3, 10), &CAPS).await.map(|a| {
            assert_eq!(a, Admission::Created);
        }),
        1 | 3 | 5 => s.start_target(A, (n - 1) / 2, 11).await.map(drop),
        2 | 4 => s
            .finish_target(A, n / 2 - 1, &done(n), 12, None)
            .await
            .map(drop),
        6 => s
            .finish_target(A, 2, &done(6), 13, Some(JobStatus::Done))
            .await
            .map(drop),
        7 => s.admit(&new_job(B, "bob", 2, 14), &CAPS).await.map(drop),
        8 => s
            .set_status(B, JobStatus::Cancelled, "", 15)
            .await
            .map(drop),
        9 => s.touch(A, 16).await.map(drop),
        10 => s.evict(300).await.map(drop),
        11 => s.sweep(200, 10).await.map(drop),
        _ => return None,
    };
    Some(r)
}

async fn same(a: &dyn BatchStore, b: &dyn BatchStore) -> bool {
    for id in [A, B, C] {
        if a.job(id).await.unwrap() != b.job(id).await.unwrap()
            || a.targets(id).await.unwrap() != b.targets(id).await.unwrap()
        {
            return false;
        }
    }
    a.total_bytes().await.unwrap() == b.total_bytes().await.unwrap()
        && a.live_jobs(None).await.unwrap() == b.live_jobs(None).await.unwrap()
}

/// The budgets the tests below try, from 0 up, until one lets the whole script run: the script
/// makes 94 writes (2026-12-07), so a store that still fails past ten times that never stops.
const BUDGETS: u64 = 1_000;

/// A new store whose writes fail once `budget` writes are made, run through the script until a
/// step fails or the script ends: its memory, countdown and store, how many steps were
/// acknowledged, and whether one failed.
async fn run_with_budget(
    budget: u64,
) -> (Arc<InMemoryBackend>, Arc<AtomicU64>, RedbStore, usize, bool) {
    let mem = Arc::new(InMemoryBackend::new());
    let countdown = Arc::new(AtomicU64::new(u64::MAX));
    let store = open(&mem, &countdown);
    crate::open::init(store.slot().db().unwrap()).unwrap();
    countdown.store(budget, Ordering::SeqCst);
    let mut acked = 0;
    let mut failed = false;
    while let Some(r) = step(&store, acked).await {
        if r.is_err() {
            failed = true;
            break;
        }
        acked += 1;
    }
    (mem, countdown, store, acked, failed)
}

#[tokio::test]
async fn a_write_failing_anywhere_leaves_a_consistent_store_with_every_acknowledged_op() {
    let mut failed_steps = std::collections::BTreeSet::new();
    for budget in 0..BUDGETS {
        let (mem, countdown, store, acked, failed) = run_with_budget(budget).await;
        drop(store);
        if !failed {
            // Every step failed at least once, at some write of its own: each is a durable
            // commit, the starts too.
            let every: std::collections::BTreeSet<usize> = (0..12).collect();
            assert_eq!(failed_steps, every);
            return;
        }
        failed_steps.insert(acked);
        countdown.store(u64::MAX, Ordering::SeqCst);
        let store = open(&mem, &countdown);
        let v = store
            .verify()
            .unwrap_or_else(|e| panic!("budget {budget}: {e}"));
        assert!(v.jobs.len() <= 2);
        // Every acknowledged step is there; the failed step is all or nothing. So the store is
        // the model after the acknowledged steps, with or without the failed one.
        let mut matched = false;
        for prefix in acked..=acked + 1 {
            let model = MemoryStore::new();
            for n in 0..prefix {
                step(&model, n).await.unwrap().unwrap();
            }
            matched |= same(&store, &model).await;
        }
        assert!(
            matched,
            "budget {budget}: step {acked} failed and left a state no prefix of the script has"
        );
    }
    panic!("every budget below {BUDGETS} failed a write of the script");
}

/// After a write fails for an I/O error, redb refuses every later operation until the database
/// is closed and opened again: the store does that itself, so once the disk takes writes again
/// (space freed) the same store, not reopened by its owner, takes them, and holds what it
/// should, in memory and in the file.
#[tokio::test]
async fn after_a_failed_write_the_store_takes_writes_again_once_the_disk_does() {
    let c = new_job(C, "carol", 1, 20);
    for budget in 0..BUDGETS {
        let (mem, countdown, store, acked, failed) = run_with_budget(budget).await;
        if !failed {
            return;
        }
        countdown.store(u64::MAX, Ordering::SeqCst);
        let admitted = store.admit(&c, &CAPS).await.unwrap_or_else(|e| {
            panic!("budget {budget}: the write after step {acked} failed: {e}")
        });
        assert_eq!(admitted, Admission::Created, "budget {budget}");
        store
            .verify()
            .unwrap_or_else(|e| panic!("budget {budget}: {e}"));
        let mut models = Vec::new();
        for prefix in acked..=acked + 1 {
            let model = MemoryStore::new();
            for n in 0..prefix {
                step(&model, n).await.unwrap().unwrap();
            }
            model.admit(&c, &CAPS).await.unwrap();
            models.push(model);
        }
        let mut matched = false;
        for model in &models {
            matched |= same(&store, model).await;
        }
        assert!(
            matched,
            "budget {budget}: after step {acked} failed, then C"
        );
        drop(store);
        let store = open(&mem, &countdown);
        let mut matched = false;
        for model in &models {
            matched |= same(&store, model).await;
        }
        assert!(matched, "budget {budget}: the file, opened afresh");
    }
    panic!("every budget below {BUDGETS} failed a write of the script");
}
