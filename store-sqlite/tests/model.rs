//! SqliteStore agrees with MemoryStore, operation by operation, on a long random walk over
//! every operation of the trait: the same answers, the same rows, the same counts and bytes.
//! The shared conformance suite checks each rule by itself; this checks that nothing differs
//! in the combinations it does not list.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use rota_core::{BatchStore, CallerClass, Caps, JobStatus, NewJob, TargetWrite};
use rota_store_memory::MemoryStore;
use rota_store_sqlite::SqliteStore;

const CAPS: Caps = Caps {
    targets_per_job: 4,
    jobs_per_caller: 3,
    jobs_total: 5,
    ttl_secs: 40,
};

/// A small deterministic xorshift, so a failure names a step that replays.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// Text that exercises the round trip: non-ASCII, quotes, NULs, newlines, or nothing.
fn text(rng: &mut Rng) -> String {
    const PIECES: [&str; 6] = ["", "plain", "ünï ✓", "\"q'\"", "nul\0byte", "line\nbreak"];
    (0..rng.below(3))
        .map(|_| PIECES[rng.below(PIECES.len() as u64) as usize])
        .collect()
}

async fn same_state(a: &MemoryStore, b: &SqliteStore, step: usize) {
    for n in 0..16 {
        let id = format!("{n:032x}");
        assert_eq!(
            a.job(&id).await.unwrap(),
            b.job(&id).await.unwrap(),
            "step {step}: job {id}"
        );
        assert_eq!(
            a.targets(&id).await.unwrap(),
            b.targets(&id).await.unwrap(),
            "step {step}: targets of {id}"
        );
    }
    for caller in [None, Some("c0"), Some("c1"), Some("c2")] {
        assert_eq!(
            a.live_jobs(caller).await.unwrap(),
            b.live_jobs(caller).await.unwrap(),
            "step {step}: live jobs of {caller:?}"
        );
    }
    assert_eq!(
        a.total_bytes().await.unwrap(),
        b.total_bytes().await.unwrap(),
        "step {step}"
    );
}

async fn walk(b: SqliteStore, seed: u64, steps: usize) {
    let a = MemoryStore::new();
    let mut rng = Rng(seed);
    for step in 0..steps {
        let id = format!("{:032x}", rng.below(16));
        let idx = rng.below(5) as usize;
        let now = (step / 4) as i64;
        match rng.below(10) {
            0 | 1 => {
                let job = NewJob {
                    id: id.clone(),
                    caller: format!("c{}", rng.below(3)),
                    class: CallerClass::Restricted,
                    idem_key: format!("k{}", rng.below(3)),
                    targets: (0..1 + rng.below(5))
                        .map(|_| (text(&mut rng), text(&mut rng)))
                        .collect(),
                    now,
                };
                let (x, y) = (a.admit(&job, &CAPS).await, b.admit(&job, &CAPS).await);
                assert_eq!(x.is_ok(), y.is_ok(), "step {step}: admit {x:?} vs {y:?}");
                if let (Ok(x), Ok(y)) = (x, y) {
                    assert_eq!(x, y, "step {step}: admit");
                }
            }
            2 => {
                let (x, y) = (
                    a.start_target(&id, idx, now).await,
                    b.start_target(&id, idx, now).await,
                );
                assert_eq!(x.unwrap(), y.unwrap(), "step {step}: start_target");
            }
            3 | 4 => {
                let write = match rng.below(4) {
                    0 => TargetWrite::Pending,
                    1 => TargetWrite::Running,
                    2 => TargetWrite::Done {
                        result: text(&mut rng).repeat(rng.below(30) as usize),
                    },
                    _ => TargetWrite::Failed {
                        error: text(&mut rng),
                        hint: text(&mut rng),
                    },
                };
                let finish = JobStatus::ALL.get(rng.below(8) as usize).copied();
                let x = a
                    .finish_target(&id, idx, &write, now, finish)
                    .await
                    .unwrap();
                let y = b
                    .finish_target(&id, idx, &write, now, finish)
                    .await
                    .unwrap();
                assert_eq!(x, y, "step {step}: finish_target");
            }
            5 => {
                let to = JobStatus::ALL[rng.below(6) as usize];
                let error = text(&mut rng);
                let x = a.set_status(&id, to, &error, now).await.unwrap();
                let y = b.set_status(&id, to, &error, now).await.unwrap();
                assert_eq!(x, y, "step {step}: set_status {to}");
            }
            6 => {
                assert_eq!(
                    a.touch(&id, now).await.unwrap(),
                    b.touch(&id, now).await.unwrap(),
                    "step {step}: touch"
                );
            }
            7 => {
                let ttl = rng.below(50) as i64;
                assert_eq!(
                    a.sweep(now, ttl).await.unwrap(),
                    b.sweep(now, ttl).await.unwrap(),
                    "step {step}: sweep"
                );
            }
            8 => {
                let max = rng.below(300);
                assert_eq!(
                    a.evict(max).await.unwrap(),
                    b.evict(max).await.unwrap(),
                    "step {step}: evict"
                );
            }
            _ => {
                if rng.below(20) == 0 {
                    assert_eq!(
                        a.recover("interrupted", now).await.unwrap(),
                        b.recover("interrupted", now).await.unwrap(),
                        "step {step}: recover"
                    );
                }
            }
        }
        same_state(&a, &b, step).await;
    }
    b.integrity_check().unwrap();
}

#[tokio::test]
async fn an_in_memory_store_agrees_with_memory_store_on_a_random_walk() {
    walk(
        SqliteStore::open_in_memory().unwrap(),
        0x9e37_79b9_7f4a_7c15,
        3_000,
    )
    .await;
}

#[tokio::test]
async fn a_file_store_agrees_with_memory_store_on_a_random_walk() {
    let dir = tempfile::tempdir().unwrap();
    walk(
        SqliteStore::open(dir.path().join("rota.db")).unwrap(),
        0x2545_f491_4f6c_dd1d,
        2_000,
    )
    .await;
}
