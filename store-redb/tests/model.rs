//! RedbStore against MemoryStore as a model: the same random operations on both give the same
//! answers, and after every one RedbStore's indexes and counters agree with its rows.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use rota_core::{BatchStore, CallerClass, Caps, JobStatus, NewJob, TargetWrite};
use rota_store_memory::MemoryStore;
use rota_store_redb::RedbStore;

/// xorshift64*: a small deterministic generator, so a failure replays from its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len() as u64) as usize]
    }
}

fn text(rng: &mut Rng) -> String {
    let parts = ["", "a", "é✓", "\"q\"", "\0", "\n", "long-text-", "{}"];
    (0..rng.below(4)).map(|_| *rng.pick(&parts)).collect()
}

async fn run(seed: u64, ops: usize, redb: &RedbStore) {
    let model = MemoryStore::new();
    let mut rng = Rng(seed);
    let mut ids: Vec<String> = vec!["f".repeat(32)];
    let mut now = 1_000i64;
    for step in 0..ops {
        now += rng.below(3) as i64;
        let id = rng.pick(&ids).clone();
        let idx = rng.below(4) as usize;
        let ctx = format!("seed {seed} step {step}");
        match rng.below(12) {
            0 | 1 => {
                let fresh = rng.below(5) != 0;
                let new_id = if fresh {
                    format!("{:032x}", rng.next())
                } else {
                    id.clone()
                };
                let job = NewJob {
                    id: new_id.clone(),
                    caller: rng.pick(&["alice", "bob", "carol"]).to_string(),
                    class: *rng.pick(&[CallerClass::Fleet, CallerClass::Restricted]),
                    idem_key: rng.pick(&["k1", "k2"]).to_string(),
                    targets: (0..rng.below(4))
                        .map(|_| (text(&mut rng), text(&mut rng)))
                        .collect(),
                    now,
                };
                let caps = Caps {
                    targets_per_job: 1 + rng.below(3) as usize,
                    jobs_per_caller: 1 + rng.below(3) as usize,
                    jobs_total: 1 + rng.below(6) as usize,
                    ttl_secs: 1 + rng.below(30) as i64,
                };
                let a = redb.admit(&job, &caps).await;
                let b = model.admit(&job, &caps).await;
                assert_eq!(a.is_ok(), b.is_ok(), "{ctx}: admit {a:?} vs {b:?}");
                if let (Ok(a), Ok(b)) = (a, b) {
                    assert_eq!(a, b, "{ctx}: admit");
                }
                if fresh {
                    ids.push(new_id);
                }
            }
            2 | 3 => {
                let a = redb.start_target(&id, idx, now).await.unwrap();
                let b = model.start_target(&id, idx, now).await.unwrap();
                assert_eq!(a, b, "{ctx}: start_target");
            }
            4 | 5 => {
                let write = match rng.below(4) {
                    0 => TargetWrite::Done {
                        result: format!(r#"{{"content":"{}"}}"#, rng.below(1000)),
                    },
                    1 => TargetWrite::Failed {
                        error: text(&mut rng),
                        hint: text(&mut rng),
                    },
                    2 => TargetWrite::Pending,
                    _ => TargetWrite::Running,
                };
                let finish = if rng.below(2) == 0 {
                    None
                } else {
                    Some(*rng.pick(JobStatus::ALL))
                };
                let a = redb.finish_target(&id, idx, &write, now, finish).await;
                let b = model.finish_target(&id, idx, &write, now, finish).await;
                assert_eq!(a.unwrap(), b.unwrap(), "{ctx}: finish_target");
            }
            6 => {
                let status = *rng.pick(JobStatus::ALL);
                let error = text(&mut rng);
                let a = redb.set_status(&id, status, &error, now).await.unwrap();
                let b = model.set_status(&id, status, &error, now).await.unwrap();
                assert_eq!(a, b, "{ctx}: set_status");
            }
            7 => {
                let a = redb.touch(&id, now).await.unwrap();
                let b = model.touch(&id, now).await.unwrap();
                assert_eq!(a, b, "{ctx}: touch");
            }
            8 => {
                let ttl = rng.below(20) as i64;
                let a = redb.sweep(now, ttl).await.unwrap();
                let b = model.sweep(now, ttl).await.unwrap();
                assert_eq!(a, b, "{ctx}: sweep");
            }
            9 => {
                let max = rng.below(60);
                let a = redb.evict(max).await.unwrap();
                let b = model.evict(max).await.unwrap();
                assert_eq!(a, b, "{ctx}: evict");
            }
            10 if rng.below(4) == 0 => {
                let a = redb.recover("interrupted", now).await.unwrap();
                let b = model.recover("interrupted", now).await.unwrap();
                assert_eq!(a, b, "{ctx}: recover");
            }
            _ => {
                let caller = rng.pick(&[None, Some("alice"), Some("bob"), Some("nobody")]);
                assert_eq!(
                    redb.live_jobs(*caller).await.unwrap(),
                    model.live_jobs(*caller).await.unwrap(),
                    "{ctx}: live_jobs"
                );
            }
        }
        let v = redb.verify().unwrap_or_else(|e| panic!("{ctx}: {e}"));
        assert_eq!(v.total_bytes, model.total_bytes().await.unwrap(), "{ctx}");
        assert_eq!(v.live, model.live_jobs(None).await.unwrap(), "{ctx}");
        for id in &ids {
            assert_eq!(
                redb.job(id).await.unwrap(),
                model.job(id).await.unwrap(),
                "{ctx}"
            );
            assert_eq!(
                redb.targets(id).await.unwrap(),
                model.targets(id).await.unwrap(),
                "{ctx}"
            );
        }
    }
}

#[tokio::test]
async fn random_operations_agree_with_the_memory_store_and_keep_indexes_in_step() {
    for seed in 1..=6u64 {
        run(seed * 0x9E37_79B9, 300, &RedbStore::in_memory().unwrap()).await;
    }
}

#[tokio::test]
async fn random_operations_on_a_file_store_agree_with_the_memory_store() {
    let dir = tempfile::tempdir().unwrap();
    let store = RedbStore::open(dir.path().join("model.redb")).unwrap();
    run(0xDEAD_BEEF, 300, &store).await;
}
