//! How long a cache line takes to go from one core to the other and back: what two workers pay
//! each time one of them takes a lock, or writes state, that the other touched last. On a
//! virtual machine this is not a constant: it depends on where the host runs the two virtual
//! cores at the time, and it changes while the bench runs, so the bench probes it before every
//! run of a runner row.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Spins before a waiting side yields its core (if the other side is not running, as on a
/// machine of one core or a loaded one, spinning on would only delay it).
const SPINS: u32 = 10_000;

/// The flag the two threads pass, alone on its cache lines.
#[repr(align(128))]
struct Flag(AtomicU64);

/// Waits until `flag` holds `want`.
fn wait_for(flag: &Flag, want: u64) {
    let mut spins = 0;
    while flag.0.load(Ordering::Acquire) != want {
        spins += 1;
        if spins < SPINS {
            std::hint::spin_loop();
        } else {
            spins = 0;
            std::thread::yield_now();
        }
    }
}

/// The mean round trip of a cache line between this thread and another over `rounds`: this
/// thread writes a counter, the other waits for it and writes the next, this one waits for
/// that. `None` if `rounds` is 0 or the thread could not be started.
pub fn round_trip(rounds: u64) -> Option<Duration> {
    if rounds == 0 {
        return None;
    }
    let flag = Arc::new(Flag(AtomicU64::new(0)));
    let theirs = flag.clone();
    let other = std::thread::Builder::new()
        .name("line-probe".into())
        .spawn(move || {
            // Running: say so, then answer every even value with the next (odd) one.
            theirs.0.store(1, Ordering::Release);
            for i in 1..=rounds {
                wait_for(&theirs, 2 * i);
                theirs.0.store(2 * i + 1, Ordering::Release);
            }
        })
        .ok()?;
    wait_for(&flag, 1);
    let t0 = Instant::now();
    for i in 1..=rounds {
        flag.0.store(2 * i, Ordering::Release);
        wait_for(&flag, 2 * i + 1);
    }
    let took = t0.elapsed();
    other.join().ok()?;
    Some(Duration::from_nanos(
        u64::try_from(took.as_nanos() / u128::from(rounds)).unwrap_or(u64::MAX),
    ))
}

/// The least of `batches` round-trip means of `rounds` each (see [`round_trip`]), a
/// millisecond apart: a thread of the probe that loses its core for a while (to the kernel's
/// own work after a file store's run, say) slows the batches it happens in, not the one that
/// ran undisturbed, while cores that are far apart slow every batch. `None` if no batch could
/// be measured.
pub fn probe(batches: usize, rounds: u64) -> Option<Duration> {
    (0..batches)
        .filter_map(|i| {
            if i > 0 {
                std::thread::sleep(Duration::from_millis(1));
            }
            round_trip(rounds)
        })
        .min()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_round_trip_is_answered_and_takes_some_time() {
        let t = round_trip(1_000).unwrap();
        assert!(t > Duration::ZERO, "{t:?}");
    }

    #[test]
    fn no_rounds_is_no_figure() {
        assert_eq!(round_trip(0), None);
        assert_eq!(probe(3, 0), None);
        assert_eq!(probe(0, 10), None);
    }

    #[test]
    fn a_probe_is_the_least_batch() {
        let t = probe(3, 1_000).unwrap();
        assert!(t > Duration::ZERO, "{t:?}");
    }
}
