//! What a fetch token shared by two workers costs, against one token of its own per worker (a
//! child of a shared one), as the runner's workers use them since 2026-12-05.
//!
//! Two threads each loop: clone the token, look at it, do some work of their own (about a
//! tenth of what a target costs the runner on the memory store), drop the clone, look again:
//! a clone, drop and look each take the token's lock. Prints nanoseconds per loop, five times
//! over: `cargo run --release -p rota-bench --example token_contention`.

use std::time::Instant;

use rota::CancellationToken;

const LOOPS: usize = 500_000;

/// Nanoseconds per loop, each of `tokens` looped on by a thread of its own.
fn per_loop(tokens: Vec<CancellationToken>) -> Option<f64> {
    let t = Instant::now();
    let threads: Vec<_> = tokens
        .into_iter()
        .map(|token| {
            std::thread::spawn(move || {
                let mut own = vec![1u64; 512];
                let mut n = 0usize;
                for _ in 0..LOOPS {
                    let clone = token.clone();
                    n += usize::from(!clone.is_cancelled());
                    for (k, x) in own.iter_mut().enumerate() {
                        *x = x.wrapping_mul(31).wrapping_add(k as u64);
                    }
                    drop(clone);
                    n += usize::from(!token.is_cancelled());
                }
                std::hint::black_box((n, own[7]));
            })
        })
        .collect();
    for t in threads {
        t.join().ok()?;
    }
    Some(t.elapsed().as_nanos() as f64 / LOOPS as f64)
}

fn main() {
    for _ in 0..5 {
        let root = CancellationToken::new();
        let (Some(shared), Some(own), Some(alone)) = (
            per_loop(vec![root.clone(), root.clone()]),
            per_loop(vec![root.child_token(), root.child_token()]),
            per_loop(vec![root.clone()]),
        ) else {
            eprintln!("a thread panicked");
            std::process::exit(1);
        };
        println!(
            "ns per loop: two threads on one token {shared:.1}; on a child token each \
             {own:.1}; one thread alone {alone:.1}"
        );
    }
}
