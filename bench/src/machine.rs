//! `machine` rows: the pure [`JobMachine`], one target per cycle (dispatch → complete(Done) →
//! stored), with the live count held constant by submitting a new job whenever one ends.

use std::fmt::Write as _;
use std::hint::black_box;
use std::time::{Duration, Instant};

use rota_core::JobMachine;
use rota_core::machine::{MachineConfig, Outcome};

use crate::report::Row;

/// Targets per job in the machine and memory rows.
pub const TARGETS: usize = 32;

/// A machine of one worker with `live` jobs of [`TARGETS`] targets, and the next id to use.
pub struct Rig {
    pub m: JobMachine,
    next_id: u64,
    id: String,
}

impl Rig {
    pub fn new(live: usize) -> Rig {
        let m = JobMachine::new(MachineConfig {
            workers: 1,
            retry_wait: Duration::from_secs(2),
            retry_for: Duration::from_secs(600),
        });
        let mut rig = Rig {
            m,
            next_id: 0,
            id: String::with_capacity(32),
        };
        for _ in 0..live {
            rig.submit(Duration::ZERO);
            // As a driver does after each call (so the memory row does not count a queue of
            // events no driver lets grow).
            while rig.m.poll_event().is_some() {}
        }
        rig
    }

    /// Submits a new job of [`TARGETS`] targets.
    pub fn submit(&mut self, now: Duration) {
        self.id.clear();
        let _ = write!(self.id, "{:032x}", self.next_id);
        self.next_id += 1;
        if self.m.submit(&self.id, TARGETS, now).is_err() {
            panic!("bench: the machine refused a submit");
        }
    }

    /// One cycle at `now`; drains the events as a driver does.
    pub fn cycle(&mut self, now: Duration) {
        let Some(d) = self.m.poll_dispatch(now) else {
            panic!("bench: nothing to dispatch");
        };
        let Ok(c) = self.m.handle_outcome(d.key, d.idx, Outcome::Done, now) else {
            panic!("bench: outcome refused");
        };
        if self.m.handle_stored(d.key, now).is_err() {
            panic!("bench: stored refused");
        }
        if c.terminal.is_some() {
            self.submit(now);
        }
        while let Some(ev) = self.m.poll_event() {
            black_box(ev);
        }
    }
}

/// Cycles per second at `live` live jobs over `cycles` cycles.
pub fn row(live: usize, cycles: u64) -> Row {
    let mut rig = Rig::new(live);
    // Warm up: one pass over every job, so the measured cycles see a settled rotation.
    for i in 0..(live as u64).min(cycles) {
        rig.cycle(Duration::from_nanos(i));
    }
    let t0 = Instant::now();
    for i in 0..cycles {
        rig.cycle(Duration::from_nanos(cycles + i));
    }
    let secs = t0.elapsed().as_secs_f64();
    assert_eq!(rig.m.live_jobs(), live);
    Row {
        bench: "machine",
        backend: String::new(),
        live_jobs: Some(live),
        workers: Some(1),
        targets: Some(cycles),
        per_s: Some(cycles as f64 / secs),
        ..Row::default()
    }
}
