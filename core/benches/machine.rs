//! Micro-benchmarks of the `JobMachine`'s hot paths: one target's cycle
//! (`poll_dispatch` → `handle_outcome` → `handle_stored`, events drained) at 10 and 10 000 live
//! jobs of 32 targets, the live count held by resubmitting; the same cycle for a target that
//! answers busy (`Pending` stored, the job out of the rotation until its retry is due, then
//! back in by the next `poll_dispatch`); and `submit`.
//!
//! `cargo bench -p rota-core --bench machine`

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use rota_core::JobMachine;
use rota_core::machine::{Completion, MachineConfig, Outcome};

const TARGETS: usize = 32;

fn machine() -> JobMachine {
    JobMachine::new(MachineConfig {
        workers: 1,
        retry_wait: Duration::from_secs(2),
        retry_for: Duration::from_secs(600),
    })
}

fn id(n: u64) -> String {
    format!("{n:032x}")
}

/// A machine with `live` jobs, and the number of the next job.
fn loaded(live: usize) -> (JobMachine, u64) {
    let mut m = machine();
    for n in 0..live as u64 {
        if m.submit(&id(n), TARGETS, Duration::ZERO).is_err() {
            panic!("submit refused");
        }
    }
    while m.poll_event().is_some() {}
    (m, live as u64)
}

/// One target's cycle at `now`: dispatched, its `outcome` handed back, stored.
fn one_cycle(m: &mut JobMachine, now: Duration, outcome: Outcome) -> Completion {
    let Some(d) = m.poll_dispatch(now) else {
        panic!("nothing to dispatch");
    };
    let Ok(c) = m.handle_outcome(d.key, d.idx, outcome, now) else {
        panic!("outcome refused");
    };
    if m.handle_stored(d.key, now).is_err() {
        panic!("stored refused");
    }
    c
}

fn cycle(c: &mut Criterion) {
    let mut g = c.benchmark_group("cycle");
    g.throughput(Throughput::Elements(1));
    for live in [10usize, 10_000] {
        g.bench_with_input(BenchmarkId::from_parameter(live), &live, |b, &live| {
            let (mut m, mut next) = loaded(live);
            let mut t = 0u64;
            b.iter(|| {
                t += 1;
                let now = Duration::from_nanos(t);
                let done = one_cycle(&mut m, now, Outcome::Done);
                if done.terminal.is_some() {
                    if m.submit(&id(next), TARGETS, now).is_err() {
                        panic!("submit refused");
                    }
                    next += 1;
                }
                while let Some(ev) = m.poll_event() {
                    black_box(ev);
                }
            });
        });
    }
    g.finish();
}

/// A busy target's cycle: every target answers busy, with a retry due at once, so each cycle
/// takes the job out of the rotation into the waiting set and the next `poll_dispatch` brings
/// a due one back (the path of a target that answers "retry later").
fn busy(c: &mut Criterion) {
    let mut g = c.benchmark_group("busy");
    g.throughput(Throughput::Elements(1));
    for live in [10usize, 10_000] {
        g.bench_with_input(BenchmarkId::from_parameter(live), &live, |b, &live| {
            let mut m = JobMachine::new(MachineConfig {
                workers: 1,
                retry_wait: Duration::ZERO,
                retry_for: Duration::from_secs(1 << 40),
            });
            for n in 0..live as u64 {
                if m.submit(&id(n), TARGETS, Duration::ZERO).is_err() {
                    panic!("submit refused");
                }
            }
            while m.poll_event().is_some() {}
            let mut t = 0u64;
            b.iter(|| {
                t += 1;
                let now = Duration::from_nanos(t);
                if one_cycle(&mut m, now, Outcome::Busy).store.is_final() {
                    panic!("a busy target gave up");
                }
                while let Some(ev) = m.poll_event() {
                    black_box(ev);
                }
            });
        });
    }
    g.finish();
}

fn submit(c: &mut Criterion) {
    let mut g = c.benchmark_group("submit");
    g.throughput(Throughput::Elements(1));
    for live in [10usize, 10_000] {
        g.bench_with_input(BenchmarkId::from_parameter(live), &live, |b, &live| {
            let (mut m, mut next) = loaded(live);
            // Submits are timed in chunks; between chunks the new jobs are cancelled, untimed,
            // so the machine stays at `live` jobs.
            b.iter_custom(|iters| {
                let mut spent = Duration::ZERO;
                let mut left = iters;
                while left > 0 {
                    let n = left.min(1_000);
                    let ids: Vec<String> = (next..next + n).map(id).collect();
                    next += n;
                    let t0 = Instant::now();
                    for id in &ids {
                        black_box(m.submit(id, TARGETS, Duration::ZERO)).ok();
                    }
                    spent += t0.elapsed();
                    for id in &ids {
                        m.cancel(id, Duration::ZERO);
                    }
                    while m.poll_event().is_some() {}
                    left -= n;
                }
                spent
            });
        });
    }
    g.finish();
}

criterion_group!(benches, cycle, busy, submit);
criterion_main!(benches);
