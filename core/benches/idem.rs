//! Micro-benchmark of `idem_key`, which every submit computes: a job of 32 targets, with
//! default options and with options set.
//!
//! `cargo bench -p rota-core --bench idem`

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use rota_core::{Options, Target, idem_key};

fn targets(options: &Options) -> Vec<Target> {
    (0..32)
        .map(|i| Target {
            url: format!("https://shop.example.com/catalogue/items/{i:05}?page={i}&sort=price"),
            options: options.clone(),
        })
        .collect()
}

fn idem(c: &mut Criterion) {
    let mut g = c.benchmark_group("idem_key");
    g.throughput(Throughput::Elements(1));
    let set = Options {
        mode: "text".into(),
        question: "What does the item cost?".into(),
        context: Some(true),
        ..Options::default()
    };
    for (name, options) in [
        ("32 targets", Options::default()),
        ("32 targets, options", set),
    ] {
        let ts = targets(&options);
        g.bench_with_input(BenchmarkId::from_parameter(name), &ts, |b, ts| {
            b.iter(|| idem_key(black_box("fleet-caller-0001"), black_box(ts)));
        });
    }
    g.finish();
}

criterion_group!(benches, idem);
criterion_main!(benches);
