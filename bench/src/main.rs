//! rota-bench: throughput, scaling and memory of rota, each row beside its limit.
//!
//! `cargo run --release -p rota-bench -- [--quick] [--json]`
//!
//! - `machine`: the pure `JobMachine`, cycles per second; one cycle is one target:
//!   `poll_dispatch` → `handle_outcome(Done)` → `handle_stored` (plus draining the events), the
//!   live count held constant by submitting a new job of 32 targets when one ends.
//! - `runner`: the `Runner` end to end with an instant fetch, targets stored per second, from the
//!   first submit to the last target stored, all jobs submitted up front (a row of few live jobs
//!   repeats its batch until it has enough targets), on a multi-thread tokio runtime of 2
//!   worker threads. `limit_per_s` is the raw loop: exactly the store calls the runner makes for
//!   the same targets (per job admit + sweep; per target start_target + finish_target + evict),
//!   back to back, on a fresh store of the same backend; `ratio` = `per_s / limit_per_s`.
//!   Notes beside the rows give how long after a batch's first submit its first target was
//!   fetched, and how long this machine takes to wake a parked thread (see `wake`): a batch
//!   starts with its idle workers waking. Every run of a runner row is preceded by a probe of
//!   how long a cache line takes to go from one core to the other and back (see `line`), and
//!   a row's note marks the runs after a slow one.
//! - `history`: the runner's targets per second on the file stores, empty and with a prefill of
//!   terminal targets (1 000 000 in the full run).
//! - `memory`: heap bytes per live job held by the machine and the driver (a counting global
//!   allocator), at 10 000 live jobs of 32 targets.

#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod alloc;
mod line;
mod machine;
mod memory;
mod report;
mod runner;
#[cfg(test)]
mod same_calls;
mod stores;
mod wake;

use std::time::{Duration, Instant};

use report::{Out, Row};
use rota::StoreError;
use stores::Backend;

#[global_allocator]
static GLOBAL: alloc::Counting = alloc::Counting;

/// How big each row is.
struct Plan {
    quick: bool,
    machine_cycles: u64,
    /// The runner rows of each backend.
    backend: fn(Backend) -> BackendPlan,
    /// Finished jobs of 32 targets stored before the `history` rows' second measurement.
    history_jobs: usize,
    /// About how many targets a `history` row measures, per backend.
    history_targets: fn(Backend) -> usize,
    /// Run only this bench (`--only=NAME`).
    only: Option<String>,
    /// Multiplies every row's size (`--scale=F`).
    scale: f64,
    /// The backends of the runner and history rows (`--backend=NAME`).
    backends: Vec<Backend>,
    /// Only the runner rows of this many live jobs (`--live=N`).
    live: Option<usize>,
    /// Whether the runner rows probe the wake-up and the cache line's trip (not with
    /// `--no-probes`: under valgrind, which runs one thread at a time, a probe's two threads
    /// spinning for each other take minutes).
    probes: bool,
}

/// The runner rows of one backend.
#[derive(Debug, Clone, Copy)]
struct BackendPlan {
    /// Targets per job.
    per_job: usize,
    /// About how many targets a row of 10 or 100 live jobs measures (it repeats its batch).
    targets: usize,
    /// Whether the rows of 10 000 live jobs run (they measure 10 000 × `per_job` targets).
    big: bool,
    /// Each figure is the median of this many runs (the file stores' runs vary by ±15 % here
    /// from disk latency alone; the median drops a lucky or unlucky run of either column); the
    /// runs of a row's raw loop and runners take turns, so a slow spell of the machine falls
    /// on both columns alike, in an order that rotates from turn to turn. Every run's figure
    /// is printed in a note. SQLite's rows take 11 turns: its runs here slow down in spells
    /// that take in a few runs in a row (three or four, in runs of 2026-12-05), of every
    /// column; a column's median of 11 stays put unless six of its runs are slowed.
    tries: usize,
    /// `tries` for the rows of 10 000 live jobs (each run is 10 000 × `per_job` targets).
    big_tries: usize,
    /// A row of 10 or 100 live jobs takes no turn that would end past this much time since
    /// its first began, at the pace of its turns so far, once it has [`MIN_TURNS`]: so that a
    /// slow spell of the disk (the file stores' runs here at 0.6 of their speed on other days)
    /// cannot stretch the full run past its 10 minutes. On a usual day every row takes all
    /// its `tries` but the file stores' rows of 10 000 live jobs.
    budget: Duration,
    /// `budget` for the rows of 10 000 live jobs.
    big_budget: Duration,
    /// Targets of the unreported warm-up (raw and runner) before the backend's first row.
    warm: usize,
}

const BENCHES: [&str; 4] = ["machine", "runner", "history", "memory"];

impl Plan {
    fn scaled(&self, n: usize) -> usize {
        ((n as f64 * self.scale) as usize).max(1)
    }

    fn runs(&self, bench: &str) -> bool {
        self.only.as_deref().is_none_or(|o| o == bench)
    }
}

/// Wake-ups the probe of this machine's thread wake-up times (see [`wake`]), and the time
/// between them.
const WAKES: usize = 500;
const WAKE_GAP: Duration = Duration::from_micros(200);

/// A probe of the cache line's trip between the cores (see [`mod@line`]), taken before every run
/// of a runner row: the least of this many batches of `LINE_ROUNDS` round trips, a
/// millisecond apart (10–15 ms here).
const LINE_BATCHES: usize = 9;
const LINE_ROUNDS: u64 = 2_000;

/// A run whose probe took at least this many times the least probe seen is marked `*`. Here
/// a probe takes about 30 ns, about 65 ns, or about 340 ns (the last in spells, the two
/// virtual cores then far apart on the host): 4× the least marks only the last.
const FAR: u32 = 4;

const LIVE: [usize; 3] = [10, 100, 10_000];

/// The fewest turns a runner row takes, whatever its budget.
const MIN_TURNS: usize = 3;

/// Whether a row that has taken `done` turns in `elapsed` takes another within `budget`: always
/// below [`MIN_TURNS`]; after, only if a turn at the mean pace of those so far would end within
/// the budget.
fn another_turn(done: usize, elapsed: Duration, budget: Duration) -> bool {
    done < MIN_TURNS
        || elapsed.as_secs_f64() * (done as f64 + 1.0) / done as f64 <= budget.as_secs_f64()
}

/// Live jobs in the `history` rows.
const HISTORY_LIVE: usize = 10;

/// Turns of the `history` rows (each an empty store's run and the prefilled store's run); each
/// row is the median.
const HISTORY_TURNS: usize = 5;

fn plan(quick: bool) -> Plan {
    if quick {
        Plan {
            quick,
            machine_cycles: 1_000_000,
            backend: |b| match b {
                Backend::Memory => BackendPlan {
                    per_job: 32,
                    targets: 64_000,
                    big: true,
                    tries: 1,
                    big_tries: 1,
                    budget: Duration::from_secs(30),
                    big_budget: Duration::from_secs(30),
                    warm: 20_000,
                },
                Backend::Sqlite => BackendPlan {
                    per_job: 8,
                    targets: 8_000,
                    big: false,
                    tries: 1,
                    big_tries: 1,
                    budget: Duration::from_secs(30),
                    big_budget: Duration::from_secs(120),
                    warm: 1_000,
                },
                Backend::Redb => BackendPlan {
                    per_job: 1,
                    targets: 400,
                    big: false,
                    tries: 1,
                    big_tries: 1,
                    budget: Duration::from_secs(20),
                    big_budget: Duration::from_secs(80),
                    warm: 200,
                },
            },
            history_jobs: 500,
            history_targets: |b| match b {
                Backend::Redb => 320,
                _ => 3_200,
            },
            only: None,
            scale: 1.0,
            backends: Vec::new(),
            live: None,
            probes: true,
        }
    } else {
        Plan {
            quick,
            machine_cycles: 5_000_000,
            backend: |b| match b {
                Backend::Memory => BackendPlan {
                    per_job: 32,
                    targets: 320_000,
                    big: true,
                    tries: 9,
                    big_tries: 9,
                    budget: Duration::from_secs(30),
                    big_budget: Duration::from_secs(30),
                    warm: 50_000,
                },
                Backend::Sqlite => BackendPlan {
                    per_job: 8,
                    targets: 16_000,
                    big: true,
                    tries: 11,
                    big_tries: 11,
                    budget: Duration::from_secs(30),
                    big_budget: Duration::from_secs(120),
                    warm: 2_000,
                },
                Backend::Redb => BackendPlan {
                    per_job: 1,
                    targets: 1_000,
                    big: true,
                    tries: 7,
                    big_tries: 5,
                    budget: Duration::from_secs(20),
                    big_budget: Duration::from_secs(80),
                    warm: 200,
                },
            },
            history_jobs: 31_250,
            history_targets: |b| match b {
                Backend::Redb => 3_200,
                _ => 32_000,
            },
            only: None,
            scale: 1.0,
            backends: Vec::new(),
            live: None,
            probes: true,
        }
    }
}

/// rota-bench: throughput, scaling and memory of rota, each row beside its limit.
#[derive(Debug, clap::Parser)]
#[command(
    name = "rota-bench",
    after_help = "Without --quick, the full run (under 10 minutes on 2 cores). --only, --backend \
                  and --live pick rows (for profiling one)."
)]
struct Args {
    /// The short run (under a minute on 2 cores): smaller rows, one turn each, and no file
    /// store rows at 10 000 live jobs.
    #[arg(long)]
    quick: bool,
    /// One JSON object per row on stdout, instead of the table.
    #[arg(long)]
    json: bool,
    /// Run only this bench.
    #[arg(long, value_name = "BENCH", value_parser = BENCHES)]
    only: Option<String>,
    /// The runner and history rows of this backend only.
    #[arg(long, value_name = "BACKEND", value_parser = Backend::ALL.map(Backend::name))]
    backend: Option<String>,
    /// The runner rows of this many live jobs only.
    #[arg(long, value_name = "JOBS", value_parser = live_jobs)]
    live: Option<usize>,
    /// Multiplies every row's size by F (a number above 0).
    #[arg(long, value_name = "F", default_value_t = 1.0, value_parser = scale)]
    scale: f64,
    /// Skip the runner rows' probes of the wake-up and the cache line's trip (under valgrind,
    /// which runs one thread at a time, their spinning threads take minutes).
    #[arg(long)]
    no_probes: bool,
}

/// Parses `--live`: one of [`LIVE`].
fn live_jobs(s: &str) -> Result<usize, String> {
    s.parse().ok().filter(|n| LIVE.contains(n)).ok_or_else(|| {
        format!(
            "live jobs are one of {}",
            LIVE.map(|n| n.to_string()).join(", ")
        )
    })
}

/// Parses `--scale`: a finite number above 0.
fn scale(s: &str) -> Result<f64, String> {
    s.parse()
        .ok()
        .filter(|f: &f64| f.is_finite() && *f > 0.0)
        .ok_or_else(|| "the scale is a number above 0, like 0.05".to_owned())
}

/// Why the flags select no row at all, if they do not: the history rows run on the file stores
/// only.
fn selects_nothing(args: &Args) -> Option<String> {
    (args.only.as_deref() == Some("history") && args.backend.as_deref() == Some("memory")).then(
        || {
            "--only=history runs on the file stores only (sqlite-file, redb-file): \
             --backend=memory selects no row"
                .to_owned()
        },
    )
}

fn main() {
    let args = <Args as clap::Parser>::parse();
    if let Some(why) = selects_nothing(&args) {
        <Args as clap::CommandFactory>::command()
            .error(clap::error::ErrorKind::ArgumentConflict, why)
            .exit();
    }
    let out = Out { json: args.json };
    let mut plan = plan(args.quick);
    plan.only = args.only;
    plan.scale = args.scale;
    plan.backends = match args.backend {
        Some(b) => Backend::ALL.into_iter().filter(|x| x.name() == b).collect(),
        None => Backend::ALL.to_vec(),
    };
    plan.live = args.live;
    plan.probes = !args.no_probes;
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("rota-bench: tokio runtime: {e}");
            std::process::exit(1);
        }
    };
    let t0 = Instant::now();
    if let Err(e) = rt.block_on(all(&out, &plan)) {
        eprintln!("rota-bench: {e}");
        std::process::exit(1);
    }
    out.note(&format!("total {:.1} s", t0.elapsed().as_secs_f64()));
}

async fn all(out: &Out, plan: &Plan) -> Result<(), StoreError> {
    out.note(&format!(
        "rota-bench {}: {} cores",
        if plan.quick { "--quick" } else { "full run" },
        std::thread::available_parallelism().map_or(0, |n| n.get())
    ));
    out.header();
    if plan.runs("machine") {
        for live in [10, 1_000, 10_000] {
            out.row(&machine::row(
                live,
                plan.scaled(plan.machine_cycles as usize) as u64,
            ));
        }
    }
    if plan.runs("runner") {
        runner_rows(out, plan).await?;
    }
    if plan.runs("history") {
        history_rows(out, plan).await?;
    }
    if !plan.runs("memory") {
        return Ok(());
    }
    out.row(&memory::machine_row(10_000));
    for workers in [1, 2] {
        out.row(&memory::runner_row(10_000, workers).await?);
    }
    out.note(
        "memory: counting allocator; `machine` = a JobMachine grown from empty to 10 000 jobs; \
         `runner over null store` = the heap growth of a Runner (machine + driver: the caller \
         map, the machine) over a store that keeps nothing, with a fetch that holds, across \
         10 000 submits after a warm-up; the store's own memory is not in either.",
    );
    Ok(())
}

/// The median of runs' figures (the mean of the middle two for an even count).
fn median(runs: &[(f64, bool)]) -> f64 {
    let mut v: Vec<f64> = runs.iter().map(|(x, _)| *x).collect();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// The middle of `xs` once sorted (the upper of the middle two for an even count), `None` if
/// empty: the median the notes give of durations. Sorts `xs`.
fn middle(xs: &mut [Duration]) -> Option<Duration> {
    xs.sort();
    xs.get(xs.len() / 2).copied()
}

/// Runs' figures from least to most, as `a ≤ b* ≤ c` (per second, rounded; `*` marks a run
/// flagged `true`: a runner run after a slow probe of the cache line's trip).
fn spread(xs: &mut [(f64, bool)]) -> String {
    xs.sort_by(|a, b| a.0.total_cmp(&b.0));
    xs.iter()
        .map(|(x, far)| format!("{x:.0}{}", if *far { "*" } else { "" }))
        .collect::<Vec<_>>()
        .join(" ≤ ")
}

/// One run of `f` on a fresh store of `backend`.
async fn once<F, Fut, T>(backend: Backend, f: F) -> Result<T, StoreError>
where
    F: FnOnce(std::sync::Arc<dyn rota::BatchStore>) -> Fut,
    Fut: std::future::Future<Output = Result<T, StoreError>>,
{
    let s = stores::fresh(backend)?;
    let measured = f(s.store.clone()).await?;
    s.close();
    Ok(measured)
}

async fn runner_rows(out: &Out, plan: &Plan) -> Result<(), StoreError> {
    out.note(
        "runner: targets stored per second, instant fetch, all jobs submitted up front, tokio \
         multi-thread runtime of 2 threads; limit_per_s = the same store calls (per job admit + \
         sweep, per target start_target + finish_target + evict) issued back to back by one \
         loop on a fresh store; ratio = per_s / limit_per_s",
    );
    if plan.probes
        && let Some([p10, p50, p90]) = wake::probe(WAKES, WAKE_GAP)
    {
        out.note(&format!(
            "this machine wakes a parked thread {} µs after another unparks it (median of \
             {WAKES}; p10 {}, p90 {}): a runner row pays such a wake-up at least once per batch, \
             for the idle worker its first submit wakes",
            p50.as_micros(),
            p10.as_micros(),
            p90.as_micros()
        ));
    }
    let mut probes: Vec<Duration> = (0..5)
        .filter(|_| plan.probes)
        .filter_map(|_| line::probe(LINE_BATCHES, LINE_ROUNDS))
        .collect();
    let opening = middle(&mut probes);
    // The least probe seen so far: a run after a probe of `FAR` times that is marked.
    let mut least = probes.first().copied();
    if let Some(mid) = opening {
        out.note(&format!(
            "a cache line goes from one core to the other and back in {} ns (median of {} \
             probes, each the least of {LINE_BATCHES} batches of {LINE_ROUNDS} round trips): \
             what two workers pay for each lock or state the other touched last; every runner \
             run below (but redb's, where the kernel's work for its files disturbs the probe) \
             is probed first, and a run whose probe took {FAR}× the least seen or more is \
             marked * in its row's note",
            mid.as_nanos(),
            probes.len()
        ));
    }
    let mut job = 0;
    for &backend in &plan.backends {
        let bp = (plan.backend)(backend);
        let per_job = bp.per_job;
        out.note(&format!(
            "runner {}: jobs of {per_job} targets; each column the median of {} turns \
             (at 10000 live jobs {}) of raw loop, runner of 1, runner of 2{}",
            backend.name(),
            bp.tries,
            bp.big_tries,
            if bp.tries.max(bp.big_tries) > MIN_TURNS {
                format!(
                    ", or of fewer (never under {MIN_TURNS}) where the next turn would end past \
                     the row's {} s ({} s) at the pace of its turns so far",
                    bp.budget.as_secs(),
                    bp.big_budget.as_secs()
                )
            } else {
                String::new()
            }
        ));
        let warm = runner::Shape::new(10, per_job, plan.scaled(bp.warm));
        once(backend, |s| async move { runner::raw(&*s, warm, 0).await }).await?;
        once(backend, |s| runner::run(s, 1, warm, 0)).await?;
        for live in LIVE {
            if plan.live.is_some_and(|l| l != live) {
                continue;
            }
            if live == 10_000 && (!bp.big || plan.scale < 1.0) {
                out.note(&format!(
                    "skipped in {}: runner {} at 10000 live jobs",
                    if plan.scale < 1.0 {
                        "--scale below 1"
                    } else {
                        "--quick"
                    },
                    backend.name()
                ));
                continue;
            }
            let shape = runner::Shape::new(live, per_job, plan.scaled(bp.targets));
            let (tries, budget) = if live == 10_000 {
                (bp.big_tries, bp.big_budget)
            } else {
                (bp.tries, bp.budget)
            };
            // Each column over `tries` turns of: raw loop, runner of 1, runner of 2; each run's
            // figure, and whether a slow probe came before it (marked `*` in the row's note).
            let mut turns: [Vec<(f64, bool)>; 3] = Default::default();
            // Every probe of the row.
            let mut row_probes = Vec::new();
            // Per runner column: each run's median lag from a batch's first submit to its
            // first fetch.
            let mut lags: [Vec<Duration>; 2] = Default::default();
            // The order rotates from turn to turn (raw, 1, 2; then 1, 2, raw; …), so that no
            // column always runs first or last in a turn.
            let began = Instant::now();
            for turn in 0..tries.max(1) {
                if !another_turn(turn, began.elapsed(), budget) {
                    break;
                }
                for j in 0..turns.len() {
                    let col = (turn + j) % turns.len();
                    // Not on redb: after its runs the probe's threads share the cores with
                    // the kernel's work (2–9 µs a round trip here, even 200 ms later), which
                    // says nothing of the cores.
                    let probe = if backend == Backend::Redb || !plan.probes {
                        None
                    } else {
                        line::probe(LINE_BATCHES, LINE_ROUNDS)
                    };
                    if let Some(p) = probe {
                        least = Some(least.map_or(p, |l| l.min(p)));
                        row_probes.push(p);
                    }
                    let far = probe.zip(least).is_some_and(|(p, l)| p >= l * FAR);
                    let per_s = if col == 0 {
                        once(
                            backend,
                            |s| async move { runner::raw(&*s, shape, job).await },
                        )
                        .await?
                    } else {
                        let ran = once(backend, |s| runner::run(s, col, shape, job)).await?;
                        lags[col - 1].push(ran.first_fetch);
                        ran.per_s
                    };
                    turns[col].push((per_s, far));
                }
                job += shape.live * shape.reps;
            }
            let spread: Vec<String> = turns.iter_mut().map(|t| spread(t)).collect();
            out.note(&format!(
                "runner {} at {live} live: over {} turns ({:.0} s), raw {}; runner of 1 {}; \
                 runner of 2 {}",
                backend.name(),
                turns[0].len(),
                began.elapsed().as_secs_f64(),
                spread[0],
                spread[1],
                spread[2]
            ));
            let row_median = middle(&mut row_probes);
            if let (Some(lo), Some(hi), Some(mid)) =
                (row_probes.first(), row_probes.last(), row_median)
            {
                out.note(&format!(
                    "runner {} at {live} live: the cache-line probes before its runs took \
                     {}–{} ns, median {} ns{}",
                    backend.name(),
                    lo.as_nanos(),
                    hi.as_nanos(),
                    mid.as_nanos(),
                    match turns.iter().flatten().filter(|(_, far)| *far).count() {
                        0 => String::new(),
                        n => format!(", {n} of them {FAR}× the least seen or more (*)"),
                    }
                ));
            }
            // A column's figure: the median of its runs.
            let turns = turns.map(|t| median(&t));
            // A batch's mean time, from the row's rate: its targets / per_s.
            let batch_us = |per_s: f64| (shape.live * shape.per_job) as f64 / per_s * 1e6;
            let lag_us = |l: &mut Vec<Duration>| middle(l).map_or(0, |d| d.as_micros());
            out.note(&format!(
                "runner {} at {live} live: a batch's first target fetched {} µs (runner of 1) \
                 and {} µs (of 2) after its first submit began, of a batch of {:.0} µs and \
                 {:.0} µs (medians)",
                backend.name(),
                lag_us(&mut lags[0]),
                lag_us(&mut lags[1]),
                batch_us(turns[1]),
                batch_us(turns[2])
            ));
            let limit = turns[0];
            for (w, &per_s) in turns.iter().enumerate().skip(1) {
                out.row(&Row {
                    bench: "runner",
                    backend: backend.name().into(),
                    live_jobs: Some(live),
                    workers: Some(w),
                    targets: Some(shape.targets() as u64),
                    per_s: Some(per_s),
                    limit_per_s: Some(limit),
                    ratio: Some(per_s / limit),
                    ..Row::default()
                });
            }
        }
    }
    Ok(())
}

async fn history_rows(out: &Out, plan: &Plan) -> Result<(), StoreError> {
    let jobs = plan.scaled(plan.history_jobs);
    let stored = jobs * 32;
    out.note(&format!(
        "history: runner, {HISTORY_LIVE} live jobs of 32 targets, 1 worker, median of \
         {HISTORY_TURNS} turns; \
         prefill {jobs} finished jobs of 32 = {stored} terminal targets{}",
        if plan.quick {
            " (the full run: 1000000)"
        } else {
            ""
        }
    ));
    for backend in [Backend::Sqlite, Backend::Redb] {
        if !plan.backends.contains(&backend) {
            continue;
        }
        let shape = runner::Shape::new(
            HISTORY_LIVE,
            32,
            plan.scaled((plan.history_targets)(backend)),
        );
        // The prefilled file, filled once; each turn then runs on a fresh empty store and on
        // the prefilled one (reopened, its earlier turns' few jobs still in it), with new jobs.
        let filled = stores::new_dir()?;
        let filled_path = stores::path_in(backend, filled.path());
        let t0 = Instant::now();
        let s = stores::open(backend, &filled_path, true)?;
        runner::prefill(&*s, jobs).await?;
        drop(s);
        out.note(&format!(
            "history {}: prefill of {stored} targets took {:.1} s",
            backend.name(),
            t0.elapsed().as_secs_f64()
        ));
        let mut turns: [Vec<(f64, bool)>; 2] = Default::default();
        let mut job = 0;
        for turn in 0..HISTORY_TURNS {
            // Empty first in even turns, prefilled first in odd ones.
            for j in 0..2 {
                let prefilled = (turn + j) % 2 == 1;
                let per_s = if prefilled {
                    let store = stores::open(backend, &filled_path, false)?;
                    runner::run(store, 1, shape, job).await?.per_s
                } else {
                    let empty = stores::new_dir()?;
                    let store =
                        stores::open(backend, &stores::path_in(backend, empty.path()), false)?;
                    let per_s = runner::run(store, 1, shape, job).await?.per_s;
                    drop(empty);
                    per_s
                };
                turns[usize::from(prefilled)].push((per_s, false));
            }
            job += shape.live * shape.reps;
        }
        let spread: Vec<String> = turns.iter_mut().map(|t| spread(t)).collect();
        out.note(&format!(
            "history {}: over {HISTORY_TURNS} turns, empty {}; {stored} stored {}",
            backend.name(),
            spread[0],
            spread[1]
        ));
        for (prefill, t) in turns.iter().enumerate() {
            out.row(&Row {
                bench: "history",
                backend: format!(
                    "{}, {}",
                    backend.name(),
                    if prefill == 1 {
                        format!("{stored} stored")
                    } else {
                        "empty".into()
                    }
                ),
                live_jobs: Some(HISTORY_LIVE),
                workers: Some(1),
                targets: Some(shape.targets() as u64),
                per_s: Some(median(t)),
                ..Row::default()
            });
        }
        drop(filled);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::Parser;
    use clap::error::ErrorKind;

    use std::time::Duration;

    use super::{Args, MIN_TURNS, another_turn, selects_nothing};

    #[test]
    fn a_row_takes_another_turn_only_if_it_would_end_within_the_budget() {
        let s = Duration::from_secs;
        // Below the least, whatever the time spent.
        for done in 0..MIN_TURNS {
            assert!(another_turn(done, s(1_000), s(10)), "{done}");
        }
        // Three turns of 10 s: a fourth would end at 40 s.
        assert!(another_turn(3, s(30), s(40)));
        assert!(!another_turn(3, s(30), s(39)));
        // Turns of 2.5 s: the ninth would end at 22.5 s.
        assert!(another_turn(8, s(20), s(23)));
        assert!(!another_turn(8, s(20), s(22)));
    }

    #[test]
    fn the_flags_pick_rows_and_sizes() {
        let a = Args::try_parse_from([
            "rota-bench",
            "--quick",
            "--only=runner",
            "--backend",
            "sqlite-file",
            "--live=10000",
            "--scale=0.05",
            "--no-probes",
        ])
        .unwrap();
        assert!(a.quick && a.no_probes && !a.json);
        assert_eq!(a.only.as_deref(), Some("runner"));
        assert_eq!(a.backend.as_deref(), Some("sqlite-file"));
        assert_eq!((a.live, a.scale), (Some(10_000), 0.05));
        let a = Args::try_parse_from(["rota-bench", "--json"]).unwrap();
        assert!(a.json && !a.quick && !a.no_probes);
        assert_eq!(
            (a.only, a.backend, a.live, a.scale),
            (None, None, None, 1.0)
        );
    }

    #[test]
    fn a_bad_flag_is_an_error_that_names_it() {
        for (args, names) in [
            (&["--bogus"][..], "--bogus"),
            (&["--live=7"], "live jobs are one of 10, 100, 10000"),
            (&["--scale=0"], "above 0"),
            (&["--scale=NaN"], "above 0"),
            (&["--only=nope"], "nope"),
            (&["--backend=sqlite"], "sqlite-file"),
        ] {
            let e = Args::try_parse_from(std::iter::once("rota-bench").chain(args.iter().copied()))
                .unwrap_err();
            assert_ne!(e.kind(), ErrorKind::DisplayHelp, "{args:?}");
            assert!(e.to_string().contains(names), "{args:?}: {e}");
        }
        let none =
            Args::try_parse_from(["rota-bench", "--only=history", "--backend=memory"]).unwrap();
        assert!(
            selects_nothing(&none).is_some_and(|w| w.contains("file stores only")),
            "history on memory"
        );
        for some in [
            &["--only=history", "--backend=redb-file"][..],
            &["--only=runner", "--backend=memory"],
            &["--backend=memory"],
            &["--only=machine", "--backend=sqlite-file"],
        ] {
            let a = Args::try_parse_from(std::iter::once("rota-bench").chain(some.iter().copied()))
                .unwrap();
            assert!(selects_nothing(&a).is_none(), "{some:?}");
        }
        let help = Args::try_parse_from(["rota-bench", "--help"]).unwrap_err();
        assert_eq!(help.kind(), ErrorKind::DisplayHelp);
        assert!(help.to_string().contains("--no-probes"), "{help}");
    }
}
