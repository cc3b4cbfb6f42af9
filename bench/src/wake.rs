//! How long this machine takes to wake a parked thread: a cost a runner row pays at least
//! once per batch (a submit wakes an idle worker), and which no code in the runner can cut.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// The 10th, 50th and 90th percentiles of `n` wake-ups: one thread parks; the other, `gap`
/// after it took the last wake-up (time enough to park again), notes the time and unparks it;
/// the latency is from that note to the parked thread running again. `None` if the thread
/// could not be started or `n` is 0.
pub fn probe(n: usize, gap: Duration) -> Option<[Duration; 3]> {
    let slot: Arc<Mutex<Option<Instant>>> = Arc::new(Mutex::new(None));
    let theirs = slot.clone();
    let waiter = std::thread::Builder::new()
        .name("wake-probe".into())
        .spawn(move || {
            let mut lat = Vec::with_capacity(n);
            while lat.len() < n {
                std::thread::park();
                let sent = theirs.lock().unwrap_or_else(PoisonError::into_inner).take();
                if let Some(t) = sent {
                    lat.push(t.elapsed());
                }
            }
            lat
        })
        .ok()?;
    for _ in 0..n {
        // The last wake-up taken (else this one would overwrite it and the waiter wait for
        // ever), then `gap` for the waiter to park again.
        while slot
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some()
        {
            std::hint::spin_loop();
        }
        let t = Instant::now();
        while t.elapsed() < gap {
            std::hint::spin_loop();
        }
        *slot.lock().unwrap_or_else(PoisonError::into_inner) = Some(Instant::now());
        waiter.thread().unpark();
    }
    let mut lat = waiter.join().ok()?;
    lat.sort();
    let at = |q: usize| lat.get(lat.len() * q / 10).copied();
    Some([at(1)?, at(5)?, at(9)?])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_wake_up_is_taken_and_the_percentiles_are_in_order() {
        let [p10, p50, p90] = probe(50, Duration::from_micros(50)).unwrap();
        assert!(p10 <= p50 && p50 <= p90, "{p10:?} {p50:?} {p90:?}");
        assert!(p10 > Duration::ZERO);
    }

    #[test]
    fn no_wake_ups_is_no_figure() {
        assert_eq!(probe(0, Duration::ZERO), None);
    }
}
