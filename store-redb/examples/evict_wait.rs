//! What an evict with nothing it may delete (the store over its byte budget with only live
//! jobs) and a sweep with nothing due cost a file store: each timed alone, then while another
//! thread makes durable writes (touches) back to back, as another worker's stored targets are.
//!
//! `cargo run --release -p rota-store-redb --example evict_wait [calls]` (default 2000 calls
//! of each), in a temp dir (`TMPDIR` chooses where).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use rota_core::{BatchStore, CallerClass, Caps, NewJob};
use rota_store_redb::RedbStore;

fn ok<T, E: std::fmt::Display>(r: Result<T, E>) -> T {
    r.unwrap_or_else(|e| panic!("{e}"))
}

/// Microseconds per call of `f`, made `calls` times.
async fn per_call<F: Future<Output = usize>>(calls: u32, mut f: impl FnMut() -> F) -> f64 {
    let t0 = Instant::now();
    for _ in 0..calls {
        assert_eq!(f().await, 0, "nothing was to be deleted");
    }
    t0.elapsed().as_secs_f64() * 1e6 / f64::from(calls)
}

async fn time_both(s: &RedbStore, calls: u32, when: &str) {
    let evict = per_call(calls, || async { ok(s.evict(1).await) }).await;
    let sweep = per_call(calls, || async { ok(s.sweep(11, 100).await) }).await;
    println!(
        "{when}: evict over the budget {evict:.2} µs a call, sweep with nothing due {sweep:.2} µs"
    );
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let calls: u32 = std::env::args().nth(1).map_or(2000, |a| ok(a.parse()));
    let dir = ok(tempfile::tempdir());
    let s = Arc::new(ok(RedbStore::open(dir.path().join("store.redb"))));
    let caps = Caps {
        targets_per_job: 32,
        jobs_per_caller: 100,
        jobs_total: 100,
        ttl_secs: 100,
    };
    // Ten live jobs of 32 targets, and no terminal one.
    for n in 0..10 {
        let job = NewJob {
            id: format!("{n:032x}"),
            caller: "c".into(),
            class: CallerClass::Fleet,
            idem_key: format!("k{n}"),
            targets: (0..32)
                .map(|i| (format!("u{n}-{i}"), "{}".into()))
                .collect(),
            now: 10,
        };
        ok(s.admit(&job, &caps).await);
    }
    time_both(&s, calls, "alone").await;

    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (s, stop) = (s.clone(), stop.clone());
        std::thread::spawn(move || {
            let rt = ok(tokio::runtime::Builder::new_current_thread().build());
            let mut n = 0_u64;
            while !stop.load(Ordering::Relaxed) {
                let now = 11 + i64::from(n.is_multiple_of(2));
                assert!(ok(rt.block_on(s.touch(&format!("{:032x}", 0), now))));
                n += 1;
            }
            n
        })
    };
    time_both(&s, calls, "with another thread writing").await;
    stop.store(true, Ordering::Relaxed);
    let touches = writer
        .join()
        .unwrap_or_else(|_| panic!("the writer panicked"));
    println!("(the other thread made {touches} durable writes meanwhile)");
}
