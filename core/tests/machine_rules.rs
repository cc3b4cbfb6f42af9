//! One test per rule of [`JobMachine`] (see the rules in `core/src/machine.rs`), each driven by
//! the deterministic [`Harness`] that plays the workers, the fetch and the clock.

// Tests panic on purpose; the workspace denies these for library code.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod harness;

use std::time::Duration;

use harness::{Harness, RETRY_FOR, RETRY_WAIT, ms, secs};
use rota_core::machine::{
    Cancelled, Completion, ERR_CLOSED, Event, JobMachine, MachineConfig, MachineError, Outcome,
    Store, Terminal,
};
use rota_core::{Config, JobStatus};

use JobStatus::{Done, Failed, Partial};
use Outcome::Busy;

fn pending_at(t: Duration) -> Store {
    Store::Pending { retry_at: Some(t) }
}

const NO_RETRY: Store = Store::Pending { retry_at: None };

// ---- rotation -----------------------------------------------------------------------------

#[test]
fn one_worker_alternates_two_jobs_a1_b1_a2_b2() {
    let mut h = Harness::new(1);
    h.submit("a", 3);
    h.submit("b", 3);
    h.drive();
    assert_eq!(h.trace(), ["a0", "b0", "a1", "b1", "a2", "b2"]);
    assert_eq!(
        h.statuses(),
        [("a".into(), Done, ""), ("b".into(), Done, "")]
    );
    h.assert_serial();
}

#[test]
fn a_lone_job_runs_back_to_back_until_a_second_is_submitted_then_round_robin() {
    let mut h = Harness::new(1);
    h.submit("a", 4);
    assert_eq!(h.poll().map(|d| d.idx), Some(0));
    h.complete("a");
    assert_eq!(h.poll().map(|d| d.idx), Some(1));
    // b arrives while a1 is in flight: it is next, then they alternate.
    h.submit("b", 2);
    h.complete("a");
    h.drive();
    assert_eq!(h.trace(), ["a0", "a1", "b0", "a2", "b1", "a3"]);
    h.assert_serial();
}

#[test]
fn cursor_moves_past_the_job_just_served() {
    // Three jobs: each round serves a, b, c in submit order.
    let mut h = Harness::new(1);
    h.submit("a", 2);
    h.submit("b", 2);
    h.submit("c", 2);
    h.drive();
    assert_eq!(h.trace(), ["a0", "b0", "c0", "a1", "b1", "c1"]);

    // A job that ends leaves the rotation; the cursor goes on past it.
    let mut h = Harness::new(1);
    h.submit("a", 1);
    h.submit("b", 2);
    h.submit("c", 2);
    h.drive();
    assert_eq!(h.trace(), ["a0", "b0", "c0", "b1", "c1"]);

    // With two workers the cursor follows the dispatches, not the completions: b0 returns
    // first, but the next dispatch is still c0 (after b, the job last served), then a1.
    let mut h = Harness::new(2);
    h.submit("a", 2);
    h.submit("b", 2);
    h.submit("c", 2);
    h.poll();
    h.poll();
    h.complete("b");
    assert_eq!(h.poll().map(|d| d.id), Some("c".into()));
    h.complete("a");
    assert_eq!(h.poll().map(|d| d.id), Some("a".into()));
    h.drive();
    assert_eq!(h.trace(), ["a0", "b0", "c0", "a1", "b1", "c1"]);
    h.assert_serial();
}

#[test]
fn a_job_submitted_later_joins_the_end_of_the_rotation() {
    let mut h = Harness::new(1);
    h.submit("a", 3);
    h.submit("b", 3);
    h.poll(); // a0
    h.complete("a");
    h.poll(); // b0
    h.submit("c", 2);
    h.complete("b");
    h.drive();
    assert_eq!(h.trace(), ["a0", "b0", "c0", "a1", "b1", "c1", "a2", "b2"]);
}

#[test]
fn first_is_set_on_a_jobs_first_dispatch_only() {
    let mut h = Harness::new(1);
    h.script("a", 0, [Busy]);
    h.submit("a", 2);
    h.drive();
    assert_eq!(h.trace(), ["a0", "a0", "a1"]);
    let first: Vec<bool> = h.dispatches.iter().map(|d| d.first).collect();
    assert_eq!(first, [true, false, false]);
}

// ---- serial jobs, worker cap ----------------------------------------------------------------

#[test]
fn a_job_is_serial_next_target_only_after_the_outcome() {
    let mut h = Harness::new(2);
    h.submit("a", 3);
    assert_eq!(h.poll().map(|d| d.idx), Some(0));
    // The second worker is idle, but a's only due target is its next one: not yet.
    assert_eq!(h.poll(), None);
    assert_eq!(h.machine.inflight(), 1);
    h.complete("a");
    assert_eq!(h.poll().map(|d| d.idx), Some(1));
    assert_eq!(h.poll(), None);
    // A busy outcome keeps the job on the same target.
    h.complete_with("a", Busy);
    assert_eq!(h.poll(), None);
    h.advance(RETRY_WAIT);
    assert_eq!(h.poll().map(|d| d.idx), Some(1));
    h.drive();
    assert_eq!(h.trace(), ["a0", "a1", "a1", "a2"]);
    h.assert_serial();
}

#[test]
fn a_target_stays_in_flight_until_its_outcome_is_stored() {
    let mut h = Harness::new(2);
    h.submit("a", 2);
    h.submit("b", 1);
    h.poll(); // a0
    let back = h.fetch_returns("a", Outcome::Done);
    assert_eq!((back.store, back.terminal), (Store::Done, None));
    assert_eq!(h.machine.inflight(), 1, "a0 is being stored");
    // The other worker takes b; then two are in flight and nothing more goes out.
    assert_eq!(h.poll().map(|d| d.id), Some("b".into()));
    assert_eq!(h.machine.poll_dispatch(h.now), None);
    h.complete("b");
    assert_eq!(h.poll(), None, "a1 waits until a0 is stored");
    h.stored("a");
    assert_eq!(h.poll().map(|d| (d.id, d.idx)), Some(("a".into(), 1)));
    h.assert_serial();
}

#[test]
fn a_busy_target_is_due_retry_wait_after_its_answer_however_late_it_is_stored() {
    // Stored before its retry time: it waits until then.
    let mut h = Harness::new(1);
    h.submit("a", 1);
    h.poll();
    assert_eq!(h.fetch_returns("a", Busy).store, pending_at(secs(2)));
    h.advance_to(secs(1));
    h.stored("a");
    assert_eq!(h.machine.poll_timeout(), Some(secs(2)));
    assert_eq!(h.poll(), None);
    h.advance_to(secs(2));
    assert!(h.poll().is_some());

    // Stored after it: due at once.
    let mut h = Harness::new(1);
    h.submit("a", 1);
    h.poll();
    h.fetch_returns("a", Busy);
    h.advance_to(secs(3));
    h.stored("a");
    assert!(h.poll().is_some());
    assert_eq!(h.dispatch_times(), [secs(0), secs(3)]);
}

#[test]
fn at_most_workers_targets_in_flight() {
    for workers in [1, 2] {
        let mut h = Harness::new(workers);
        for id in ["a", "b", "c", "d"] {
            h.submit(id, 2);
        }
        for _ in 0..workers {
            assert!(h.poll().is_some());
        }
        assert_eq!(h.machine.inflight(), workers);
        // Every simulated worker is busy; one more poll of the machine gets nothing.
        assert_eq!(h.machine.poll_dispatch(h.now), None);
        h.drive();
        assert_eq!(h.dispatches.len(), 8);
        let most = h
            .events
            .iter()
            .filter_map(|e| match e {
                Event::Inflight(n) => Some(*n),
                Event::Depth(_) => None,
            })
            .max();
        assert_eq!(most, Some(workers), "workers = {workers}");
    }
}

#[test]
fn workers_below_one_count_as_one() {
    let m = JobMachine::new(MachineConfig {
        workers: 0,
        retry_wait: RETRY_WAIT,
        retry_for: RETRY_FOR,
    });
    assert_eq!(m.config().workers, 1);
    let mut h = Harness::with_config(m.config());
    h.submit("a", 1);
    h.submit("b", 1);
    assert!(h.poll().is_some());
    assert_eq!(h.machine.poll_dispatch(h.now), None);
}

#[test]
fn machine_config_takes_the_effective_values_of_config() {
    let zero = Config {
        workers: 0,
        retry_wait: Duration::ZERO,
        retry_for: Duration::ZERO,
        ..Config::default()
    };
    assert_eq!(
        MachineConfig::from(&zero),
        MachineConfig {
            workers: 1,
            retry_wait: secs(2),
            retry_for: secs(600)
        }
    );
    let many = Config {
        workers: 7,
        retry_wait: ms(50),
        retry_for: secs(3),
        ..Config::default()
    };
    assert_eq!(
        MachineConfig::from(&many),
        MachineConfig {
            workers: 2,
            retry_wait: ms(50),
            retry_for: secs(3)
        }
    );
}

#[test]
fn two_workers_run_two_jobs_side_by_side_each_serial() {
    let mut h = Harness::new(2);
    h.submit("a", 3);
    h.submit("b", 3);
    h.drive();
    assert_eq!(h.trace(), ["a0", "b0", "a1", "b1", "a2", "b2"]);
    // Each job keeps to the worker that freed up for it, and both are in flight together.
    let workers: Vec<usize> = h.dispatches.iter().map(|d| d.worker).collect();
    assert_eq!(workers, [0, 1, 0, 1, 0, 1]);
    assert!(h.events.contains(&Event::Inflight(2)));
    h.assert_serial();
    assert_eq!(
        h.statuses(),
        [("a".into(), Done, ""), ("b".into(), Done, "")]
    );
}

// ---- busy targets -------------------------------------------------------------------------

#[test]
fn busy_target_is_due_again_after_retry_wait() {
    let mut h = Harness::new(1);
    h.script("a", 0, [Busy]);
    h.submit("a", 1);
    h.poll();
    h.advance(ms(300));
    let c = h.complete("a");
    assert_eq!(c.store, pending_at(ms(2300)));
    assert_eq!(c.terminal, None);
    assert_eq!(h.poll(), None);
    assert_eq!(h.machine.poll_timeout(), Some(ms(2300)));
    h.advance_to(ms(2300) - Duration::from_nanos(1));
    assert_eq!(h.poll(), None);
    h.advance_to(ms(2300));
    let again = h.poll().map(|d| (d.id, d.idx, d.first));
    assert_eq!(again, Some(("a".into(), 0, false)));
    assert_eq!(h.complete("a").store, Store::Done);
    assert_eq!(h.statuses(), [("a".into(), Done, "")]);
}

#[test]
fn busy_target_fails_after_retry_for_since_first_busy_answer() {
    // Busy at exactly first + retry_for is retried; busy any later gives up.
    for (last_answer, want) in [
        (secs(11), pending_at(secs(13))),
        (secs(11) + Duration::from_nanos(1), Store::GiveUp),
    ] {
        let mut h = Harness::new(1);
        h.submit("a", 1);
        h.poll();
        h.advance_to(secs(1));
        // The first busy answer, at 1 s, starts the retry_for clock (not the dispatch at 0 s).
        assert_eq!(h.complete_with("a", Busy).store, pending_at(secs(3)));
        h.advance_to(secs(3));
        h.poll();
        h.advance_to(last_answer);
        let c = h.complete_with("a", Busy);
        assert_eq!(c.store, want, "busy answer at {last_answer:?}");
        if want == Store::GiveUp {
            assert_eq!(c.terminal.map(|t| t.status), Some(Failed));
            assert_eq!(h.machine.live_jobs(), 0);
        } else {
            assert_eq!(c.terminal, None);
        }
    }
}

#[test]
fn an_always_busy_target_fails_no_later_than_retry_for_plus_retry_wait() {
    for wait in [secs(2), secs(3), ms(700)] {
        let mut h = Harness::with_config(MachineConfig {
            workers: 1,
            retry_wait: wait,
            retry_for: RETRY_FOR,
        });
        h.script("a", 0, [Busy; 100]);
        h.submit("a", 1);
        h.drive();
        let last = h.completions.last().cloned().unwrap();
        assert_eq!(last.store, Store::GiveUp);
        assert!(
            last.at > RETRY_FOR && last.at <= RETRY_FOR + wait,
            "{wait:?}: {last:?}"
        );
        // Every answer before it was busy and due again one retry_wait later.
        for (n, c) in h.completions.iter().rev().skip(1).enumerate() {
            assert_eq!(c.store, pending_at(c.at + wait), "answer {n} from the end");
        }
        assert_eq!(h.statuses(), [("a".into(), Failed, "")]);
    }
}

#[test]
fn the_busy_clock_starts_again_for_the_next_target() {
    let mut h = Harness::new(1);
    h.script("a", 0, [Busy; 5]); // busy at 0, 2, 4, 6, 8; done at 10
    h.script("a", 1, [Busy; 7]); // busy at 10 … 22: only 12 s since its own first busy answer
    h.submit("a", 2);
    h.drive();
    let a1: Vec<Store> = h
        .completions
        .iter()
        .filter(|c| c.idx == 1)
        .map(|c| c.store)
        .collect();
    assert_eq!(a1.len(), 7);
    assert_eq!(
        a1[5],
        pending_at(secs(22)),
        "busy at 20 = its first + retry_for"
    );
    assert_eq!(a1[6], Store::GiveUp, "busy at 22 > its first + retry_for");
    assert_eq!(h.statuses(), [("a".into(), Partial, "")]);
}

#[test]
fn a_busy_job_never_blocks_other_jobs() {
    let mut h = Harness::new(1);
    h.script("a", 0, [Busy]);
    h.submit("a", 2);
    h.submit("b", 3);
    h.drive();
    assert_eq!(h.trace(), ["a0", "b0", "b1", "b2", "a0", "a1"]);
    let at = h.dispatch_times();
    assert_eq!(at, [secs(0), secs(0), secs(0), secs(0), secs(2), secs(2)]);

    // With two workers, the free worker serves b while a waits.
    let mut h = Harness::new(2);
    h.script("a", 0, [Busy, Busy]);
    h.submit("a", 1);
    h.submit("b", 4);
    h.drive();
    assert_eq!(h.trace(), ["a0", "b0", "b1", "b2", "b3", "a0", "a0"]);
    h.assert_serial();
}

#[test]
fn poll_timeout_is_the_earliest_retry() {
    let mut h = Harness::new(2);
    assert_eq!(h.machine.poll_timeout(), None, "nothing waits");
    h.script("a", 0, [Busy]);
    h.script("b", 0, [Busy]);
    h.script("c", 0, [Busy]);
    h.submit("a", 1);
    h.submit("b", 1);
    h.submit("c", 1);
    h.poll(); // a0
    h.poll(); // b0
    h.advance_to(ms(500));
    h.complete("b"); // due at 2.5 s
    assert_eq!(h.machine.poll_timeout(), Some(ms(2500)));
    h.poll(); // c0
    h.advance_to(ms(900));
    h.complete("c"); // due at 2.9 s
    h.complete("a"); // due at 2.9 s
    assert_eq!(h.machine.poll_timeout(), Some(ms(2500)));
    // A cancelled job's retry is forgotten.
    h.cancel("b");
    assert_eq!(h.machine.poll_timeout(), Some(ms(2900)));
    h.advance_to(ms(2900));
    h.poll();
    h.poll();
    assert_eq!(h.machine.poll_timeout(), None, "both retries dispatched");
    h.complete("a");
    h.complete_with("c", Busy);
    assert_eq!(h.machine.poll_timeout(), Some(ms(4900)));
    h.close();
    assert_eq!(h.machine.poll_timeout(), None, "closed");
}

#[test]
fn dispatch_is_none_while_nothing_is_due() {
    let mut h = Harness::new(2);
    assert_eq!(h.poll(), None, "no jobs");
    h.script("a", 0, [Busy]);
    h.submit("a", 1);
    h.poll();
    h.complete("a");
    for t in [ms(0), ms(1000), ms(1999)] {
        h.advance_to(t);
        assert_eq!(h.poll(), None, "a waits at {t:?}");
    }
    h.advance_to(RETRY_WAIT);
    assert!(h.poll().is_some());
    assert_eq!(h.poll(), None, "a is in flight");
    h.complete("a");
    assert_eq!(h.poll(), None, "a is done");
    assert_eq!(h.trace(), ["a0", "a0"]);
}

// ---- terminal status ----------------------------------------------------------------------

#[test]
fn terminal_status_done_failed_partial_exactly_once() {
    let mut h = Harness::new(2);
    h.script("f", 0, [Outcome::Failed]);
    h.script("f", 1, [Outcome::Failed]);
    h.script("p", 1, [Outcome::Failed]);
    h.script("g", 0, [Busy; 100]); // gives up: a failed target
    h.submit("d", 2);
    h.submit("f", 2);
    h.submit("p", 3);
    h.submit("g", 1);
    h.drive();
    let mut got = h.statuses();
    got.sort_by(|x, y| x.0.cmp(&y.0));
    assert_eq!(
        got,
        [
            ("d".into(), Done, ""),
            ("f".into(), Failed, ""),
            ("g".into(), Failed, ""),
            ("p".into(), Partial, ""),
        ]
    );
    // The terminal status comes with the job's last outcome, and only with it.
    for c in &h.completions {
        let last = match c.id.as_str() {
            "d" | "f" => 1,
            "p" => 2,
            _ => 0,
        };
        assert_eq!(
            c.terminal.is_some(),
            c.idx == last && c.store.is_final(),
            "{c:?}"
        );
    }
    for t in &h.terminals {
        let end = h.completions.iter().rfind(|c| *c.id == *t.id).unwrap().at;
        assert_eq!(t.elapsed, end, "submitted at 0");
    }
    assert_eq!(h.machine.live_jobs(), 0);
    assert_eq!(h.close(), [], "nothing left to report");
}

#[test]
fn the_terminal_status_comes_with_the_last_outcome_and_the_job_is_let_go_once_stored() {
    use Event::{Depth, Inflight};
    let mut h = Harness::new(1);
    let a = h.submit("a", 1);
    h.poll();
    h.take_events();
    let back = h.fetch_returns("a", Outcome::Done);
    assert_eq!(back.terminal.map(|t| t.status), Some(Done));
    assert_eq!(h.take_events(), [Depth(0)], "not live; still in flight");
    assert!(!h.machine.is_live("a"));
    assert_eq!(h.machine.job_key("a"), Some(a), "held until stored");
    assert_eq!(h.cancel("a"), None, "terminal already");
    assert_eq!(h.close(), [], "terminal already");
    assert_eq!(h.stored("a").stored_terminal, None);
    assert_eq!(h.take_events(), [Inflight(0)]);
    assert_eq!(h.machine.job_key("a"), None);
    assert_eq!(h.statuses(), [("a".into(), Done, "")]);
}

// ---- cancel -------------------------------------------------------------------------------

#[test]
fn cancel_stops_dispatch_and_the_inflight_outcome_is_still_stored() {
    let mut h = Harness::new(1);
    h.submit("a", 3);
    h.submit("b", 2);
    h.poll(); // a0
    h.advance(secs(5));
    let c = h.cancel("a");
    assert_eq!(
        c,
        Some(Cancelled {
            id: "a".into(),
            inflight: true,
            elapsed: secs(5)
        })
    );
    assert_eq!(h.machine.live_jobs(), 1, "a no longer counts as live");
    assert_eq!(h.machine.inflight(), 1, "a0 is still in flight");
    assert!(!h.machine.is_live("a"));
    let back = h.complete("a");
    assert_eq!((back.store, back.terminal), (Store::Done, None));
    h.drive();
    assert_eq!(h.trace(), ["a0", "b0", "b1"]);
    assert_eq!(h.statuses(), [("b".into(), Done, "")]);

    // A busy answer of a cancelled job goes back to pending with no retry time.
    let mut h = Harness::new(1);
    h.submit("a", 2);
    h.poll();
    h.cancel("a");
    let back = h.complete_with("a", Busy);
    assert_eq!((back.store, back.terminal), (NO_RETRY, None));
    assert_eq!(h.machine.poll_timeout(), None);
    assert_eq!(h.poll(), None);
    assert_eq!(h.machine.job_key("a"), None, "the machine has let go of a");
}

#[test]
fn cancel_while_an_outcome_is_being_stored_lets_it_be_stored_and_dispatches_nothing_more() {
    let mut h = Harness::new(1);
    h.submit("a", 3);
    h.submit("b", 1);
    h.poll(); // a0
    h.fetch_returns("a", Busy);
    let c = h.cancel("a");
    assert_eq!(c.map(|c| c.inflight), Some(true));
    assert_eq!(h.machine.inflight(), 1);
    let stored = h.stored("a");
    assert_eq!(stored.stored_terminal, None);
    assert_eq!(h.machine.job_key("a"), None);
    h.advance(secs(60));
    h.drive();
    assert_eq!(h.trace(), ["a0", "b0"]);
    assert_eq!(h.statuses(), [("b".into(), Done, "")]);
}

#[test]
fn cancel_reports_no_terminal_status_afterwards() {
    // Its last target in flight: the outcome is stored but the job stays cancelled.
    let mut h = Harness::new(1);
    h.submit("a", 1);
    h.poll();
    h.cancel("a");
    let back = h.complete_with("a", Outcome::Failed);
    assert_eq!((back.store, back.terminal), (Store::Failed, None));
    // Nothing in flight: it is gone at once; close does not report it.
    h.submit("b", 2);
    h.submit("c", 2);
    assert_eq!(h.cancel("b").map(|c| c.inflight), Some(false));
    assert_eq!(h.machine.job_key("b"), None);
    let closed = h.close();
    assert_eq!(closed.len(), 1);
    assert_eq!(h.statuses(), [("c".into(), Failed, ERR_CLOSED)]);
    assert_eq!(h.cancels.len(), 2);
}

#[test]
fn cancel_of_unknown_or_terminal_job_is_none() {
    let mut h = Harness::new(1);
    assert_eq!(h.cancel("nope"), None, "unknown");
    h.submit("a", 1);
    h.drive();
    assert_eq!(h.statuses(), [("a".into(), Done, "")]);
    assert_eq!(h.cancel("a"), None, "terminal");
    h.submit("b", 2);
    h.poll();
    assert!(h.cancel("b").is_some());
    assert_eq!(h.cancel("b"), None, "cancelled, target in flight");
    h.complete("b");
    assert_eq!(h.cancel("b"), None, "cancelled");
    h.submit("c", 2);
    h.poll();
    h.close();
    assert_eq!(h.cancel("c"), None, "closing, target in flight");
    h.take_events();
    let before = format!("{:?}", h.machine);
    assert_eq!(h.cancel("c"), None);
    assert_eq!(h.cancel("zz"), None);
    assert_eq!(
        format!("{:?}", h.machine),
        before,
        "a refused cancel changes nothing"
    );
    assert_eq!(h.take_events(), []);
}

// ---- close --------------------------------------------------------------------------------

#[test]
fn close_dispatches_nothing_more_and_reports_every_live_job_once() {
    let mut h = Harness::new(1);
    h.script("c", 0, [Busy]);
    h.submit("a", 2);
    h.submit("b", 2);
    h.submit("c", 2);
    h.poll(); // a0
    h.complete("a");
    h.poll(); // b0
    h.complete("b");
    h.poll(); // c0, busy: waiting for a retry
    h.complete("c");
    h.advance(secs(1));
    let ended = h.close();
    let want = |id: &str| Terminal {
        id: id.into(),
        status: Failed,
        error: ERR_CLOSED,
        elapsed: secs(1),
    };
    assert_eq!(ended, [want("a"), want("b"), want("c")], "submit order");
    assert!(h.machine.is_closed());
    assert_eq!(h.machine.live_jobs(), 0);
    assert_eq!(h.events.last(), Some(&Event::Depth(0)));
    h.advance(secs(10));
    assert_eq!(h.machine.poll_dispatch(h.now), None);
    assert_eq!(h.machine.poll_timeout(), None);
    assert_eq!(h.drive(), 0, "nothing left to do");
    assert_eq!(h.trace(), ["a0", "b0", "c0"]);
}

#[test]
fn close_reports_a_job_with_a_target_in_flight_when_its_outcome_returns() {
    for (outcome, store) in [
        (Outcome::Done, Store::Done),
        (Outcome::Failed, Store::Failed),
        (Busy, NO_RETRY),
    ] {
        let mut h = Harness::new(2);
        h.submit("a", 3);
        h.submit("b", 1);
        h.submit("c", 2);
        h.poll(); // a0
        h.poll(); // b0
        h.complete("b");
        let ended = h.close();
        assert_eq!(ended.iter().map(|t| &*t.id).collect::<Vec<_>>(), ["c"]);
        assert_eq!(
            h.machine.live_jobs(),
            1,
            "a is live until its outcome returns"
        );
        assert_eq!(h.machine.poll_dispatch(h.now), None);
        h.advance(secs(4));
        let back = h.complete_with("a", outcome);
        assert_eq!(back.store, store);
        assert_eq!(
            back.terminal,
            Some(Terminal {
                id: "a".into(),
                status: Failed,
                error: ERR_CLOSED,
                elapsed: secs(4)
            })
        );
        assert_eq!(h.machine.live_jobs(), 0);
        assert_eq!(h.machine.job_key("a"), None);
        assert_eq!(h.terminals.len(), 3, "b done, c and a closed");
    }
}

#[test]
fn close_while_an_outcome_is_being_stored_reports_the_job_once_it_is_stored() {
    for outcome in [Outcome::Done, Outcome::Failed, Busy] {
        let mut h = Harness::new(1);
        h.submit("a", 2);
        h.poll();
        h.advance(secs(1));
        assert_eq!(h.fetch_returns("a", outcome).terminal, None);
        assert_eq!(h.close(), []);
        assert_eq!(h.machine.live_jobs(), 1);
        h.advance(secs(1));
        let stored = h.stored("a");
        assert_eq!(
            stored.stored_terminal,
            Some(Terminal {
                id: "a".into(),
                status: Failed,
                error: ERR_CLOSED,
                elapsed: secs(2)
            }),
            "{outcome:?}"
        );
        assert_eq!(h.machine.live_jobs(), 0);
        assert_eq!(h.terminals.len(), 1, "reported once");
        assert_eq!(h.trace(), ["a0"]);
    }
}

#[test]
fn close_lets_a_job_whose_last_target_is_in_flight_end_with_its_own_status() {
    // SPEC §5: close stores the in-flight outcomes, then fails the jobs *still live*; a job
    // whose last target was in flight is complete, so it takes its own terminal status.
    for (outcome, status) in [(Outcome::Done, Partial), (Outcome::Failed, Failed)] {
        let mut h = Harness::new(1);
        h.script("a", 0, [Outcome::Failed]);
        h.submit("a", 2);
        h.poll();
        h.complete("a");
        h.poll(); // a1, its last
        assert_eq!(h.close(), []);
        let back = h.complete_with("a", outcome);
        assert_eq!(
            back.terminal.map(|t| (t.status, t.error)),
            Some((status, ""))
        );
    }
}

#[test]
fn close_is_idempotent() {
    let mut h = Harness::new(1);
    h.submit("a", 1);
    h.submit("b", 1);
    h.poll();
    assert_eq!(h.close().len(), 1);
    h.take_events();
    let before = format!("{:?}", h.machine);
    assert_eq!(h.close(), []);
    assert_eq!(format!("{:?}", h.machine), before);
    assert_eq!(h.take_events(), []);
    h.complete("a");
    assert_eq!(h.close(), []);
    assert_eq!(h.statuses().len(), 2, "each job reported once");
}

// ---- events -------------------------------------------------------------------------------

#[test]
fn depth_and_inflight_events_follow_every_change() {
    use Event::{Depth, Inflight};
    let mut h = Harness::new(2);
    h.script("a", 0, [Busy]);
    h.submit("a", 2);
    assert_eq!(h.take_events(), [Depth(1)]);
    h.submit("b", 1);
    assert_eq!(h.take_events(), [Depth(2)]);
    h.poll();
    assert_eq!(h.take_events(), [Inflight(1)]);
    h.poll();
    assert_eq!(h.take_events(), [Inflight(2)]);
    h.complete("a"); // busy
    assert_eq!(h.take_events(), [Inflight(1)]);
    h.complete("b"); // b's last: terminal
    assert_eq!(h.take_events(), [Depth(1), Inflight(0)]);
    assert_eq!(h.poll(), None);
    assert_eq!(h.take_events(), [], "a refused poll changes nothing");
    h.submit("c", 3);
    h.advance(RETRY_WAIT);
    h.poll(); // c0 (after a, the job last served)
    h.poll(); // a0
    assert_eq!(h.take_events(), [Depth(2), Inflight(1), Inflight(2)]);
    h.cancel("c"); // in flight: not live, still in flight
    assert_eq!(h.take_events(), [Depth(1)]);
    h.complete("c");
    assert_eq!(h.take_events(), [Inflight(1)]);
    h.close(); // a is in flight: still live
    assert_eq!(h.take_events(), []);
    h.complete("a");
    assert_eq!(h.take_events(), [Depth(0), Inflight(0)]);
    assert_eq!(h.trace(), ["a0", "b0", "c0", "a0"]);
}

// ---- refused inputs -----------------------------------------------------------------------

#[test]
fn spurious_inputs_are_refused_and_change_nothing() {
    let mut h = Harness::new(2);
    let a = h.submit("a", 2);
    let b = h.submit("b", 1);
    h.poll(); // a0
    h.take_events();
    let before = format!("{:?}", h.machine);
    let now = h.now;
    let m = &mut h.machine;
    assert_eq!(
        m.handle_outcome(99, 0, Outcome::Done, now),
        Err(MachineError::UnknownJob)
    );
    assert_eq!(
        m.handle_outcome(b, 0, Outcome::Done, now),
        Err(MachineError::NotInFlight)
    );
    assert_eq!(
        m.handle_outcome(a, 1, Outcome::Done, now),
        Err(MachineError::NotInFlight)
    );
    assert_eq!(m.handle_stored(99, now), Err(MachineError::UnknownJob));
    assert_eq!(
        m.handle_stored(b, now),
        Err(MachineError::NotInFlight),
        "nothing in flight"
    );
    assert_eq!(
        m.handle_stored(a, now),
        Err(MachineError::NotInFlight),
        "a0 not back yet"
    );
    assert_eq!(m.submit("a", 1, now), Err(MachineError::DuplicateId));
    assert_eq!(m.submit("z", 0, now), Err(MachineError::NoTargets));
    assert_eq!(
        format!("{:?}", h.machine),
        before,
        "refusals change nothing"
    );
    assert_eq!(h.take_events(), []);

    // An outcome returned twice, or stored twice, is refused the second time.
    h.fetch_returns("a", Outcome::Done);
    let before = format!("{:?}", h.machine);
    let m = &mut h.machine;
    let twice = m.handle_outcome(a, 0, Outcome::Failed, now);
    assert_eq!(
        twice,
        Err(MachineError::NotInFlight),
        "a0's outcome is in already"
    );
    assert_eq!(format!("{:?}", h.machine), before);
    h.stored("a");
    h.take_events();
    let m = &mut h.machine;
    assert_eq!(
        m.handle_stored(a, now),
        Err(MachineError::NotInFlight),
        "stored already"
    );
    assert_eq!(
        m.handle_outcome(a, 0, Outcome::Done, now),
        Err(MachineError::NotInFlight)
    );
    assert_eq!(h.take_events(), []);

    // After close: no submit, and the inputs of an ended job are refused.
    h.close();
    h.take_events();
    let before = format!("{:?}", h.machine);
    let m = &mut h.machine;
    assert_eq!(m.submit("n", 1, now), Err(MachineError::Closed));
    assert_eq!(
        m.submit("n", 0, now),
        Err(MachineError::Closed),
        "closed is checked first"
    );
    assert_eq!(
        m.handle_outcome(a, 1, Outcome::Done, now),
        Err(MachineError::UnknownJob)
    );
    assert_eq!(m.handle_stored(a, now), Err(MachineError::UnknownJob));
    assert_eq!(format!("{:?}", h.machine), before);
    assert_eq!(h.take_events(), []);
    assert_eq!(h.trace(), ["a0"]);
}

#[test]
fn the_id_of_an_ended_job_may_be_submitted_again() {
    let mut h = Harness::new(1);
    let first = h.submit("a", 1);
    h.drive();
    let again = h.submit("a", 1);
    assert_ne!(first, again, "a new key");
    h.drive();
    assert_eq!(
        h.statuses(),
        [("a".into(), Done, ""), ("a".into(), Done, "")]
    );
}

// ---- time at its limits -------------------------------------------------------------------

#[test]
fn a_busy_answer_with_a_huge_retry_wait_does_not_panic() {
    // The machine never panics on any input: a retry time past the end of `Duration` saturates.
    let cfg = Config {
        retry_wait: Duration::MAX,
        ..Config::default()
    };
    let mut m = JobMachine::new(MachineConfig::from(&cfg));
    let key = m.submit("a", 1, Duration::ZERO).unwrap();
    assert!(m.poll_dispatch(Duration::ZERO).is_some());
    let c = m.handle_outcome(key, 0, Outcome::Busy, secs(1));
    assert_eq!(
        c,
        Ok(Completion {
            store: pending_at(Duration::MAX),
            terminal: None
        })
    );
    assert_eq!(m.handle_stored(key, secs(1)), Ok(None));
    assert_eq!(m.poll_timeout(), Some(Duration::MAX));
    assert_eq!(m.poll_dispatch(secs(3600)), None);
}

// ---- keys, slots and the ring ---------------------------------------------------------------

#[test]
fn a_stale_key_is_refused_after_its_slot_is_reused_by_a_newer_job() {
    let mut h = Harness::new(1);
    let a = h.submit("a", 1);
    h.drive();
    assert!(!h.machine.contains(a), "a is let go once stored");
    // b takes a's slot; a's key must not reach b.
    let b = h.submit("b", 2);
    assert_ne!(a, b);
    assert!(h.machine.contains(b));
    let before = format!("{:?}", h.machine);
    let now = h.now;
    assert_eq!(
        h.machine.handle_outcome(a, 0, Outcome::Done, now),
        Err(MachineError::UnknownJob)
    );
    assert_eq!(
        h.machine.handle_stored(a, now),
        Err(MachineError::UnknownJob)
    );
    assert_eq!(
        format!("{:?}", h.machine),
        before,
        "refused inputs change nothing"
    );
    // Also while b has its target in flight and its outcome being stored.
    assert_eq!(h.poll().map(|d| (d.id, d.idx)), Some(("b".into(), 0)));
    assert_eq!(
        h.machine.handle_outcome(a, 0, Outcome::Done, now),
        Err(MachineError::UnknownJob)
    );
    h.fetch_returns("b", Outcome::Done);
    assert_eq!(
        h.machine.handle_stored(a, now),
        Err(MachineError::UnknownJob)
    );
    h.stored("b");
    h.drive();
    assert_eq!(h.trace(), ["a0", "b0", "b1"]);
    assert_eq!(
        h.statuses(),
        [("a".into(), Done, ""), ("b".into(), Done, "")]
    );
    assert!(!h.machine.contains(b));
}

#[test]
fn contains_is_true_exactly_while_the_machine_holds_the_job() {
    let mut h = Harness::new(1);
    assert!(!h.machine.contains(0), "no key before the first submit");
    let a = h.submit("a", 2);
    assert!(h.machine.contains(a));
    assert!(!h.machine.contains(a + 1), "a key not handed out yet");
    h.poll();
    // Cancelled with a target in flight: still held until its outcome is stored.
    h.cancel("a");
    assert!(h.machine.contains(a));
    assert_eq!(h.machine.job_key("a"), Some(a));
    h.complete("a");
    assert!(!h.machine.contains(a));
    assert_eq!(h.machine.job_key("a"), None);
    // Ended without a target in flight: let go at once.
    let b = h.submit("b", 1);
    h.cancel("b");
    assert!(!h.machine.contains(b));
}

#[test]
fn is_live_and_is_closed_hold_until_cancel_and_close() {
    let mut h = Harness::new(1);
    assert!(!h.machine.is_closed(), "a new machine is open");
    h.submit("a", 2);
    h.submit("b", 2);
    assert!(h.machine.is_live("a") && h.machine.is_live("b"));
    assert!(!h.machine.is_live("x"), "never submitted");
    h.cancel("a");
    assert!(!h.machine.is_live("a"));
    assert!(h.machine.is_live("b"));
    assert!(!h.machine.is_closed());
    h.close();
    assert!(h.machine.is_closed());
    assert!(!h.machine.is_live("b"));
}

#[test]
fn the_cursor_stays_after_a_served_job_that_waits_for_a_retry_while_an_earlier_job_returns() {
    // c is served and goes busy (it leaves the rotation); b, before c in submit order, comes
    // back from its own retry. The next dispatch is still the job after c: d, not b.
    let mut h = Harness::new(1);
    for id in ["a", "b", "c", "d"] {
        h.submit(id, 2);
    }
    h.script("b", 0, [Busy]);
    h.script("c", 0, [Busy]);
    h.poll();
    h.complete("a"); // a0 done
    h.poll();
    h.complete("b"); // b0 busy at 0: due at 2
    h.advance(secs(1));
    h.poll();
    h.complete("c"); // c0 busy at 1: due at 3
    h.advance_to(RETRY_WAIT);
    assert_eq!(h.poll().map(|d| d.id), Some("d".into()), "after c comes d");
    h.complete("d");
    assert_eq!(
        h.poll().map(|d| d.id),
        Some("a".into()),
        "then it wraps to a"
    );
    h.complete("a");
    assert_eq!(h.poll().map(|d| (d.id, d.idx)), Some(("b".into(), 0)));
    h.complete("b");
    // c is not due before 3: d goes first.
    assert_eq!(h.poll().map(|d| (d.id, d.idx)), Some(("d".into(), 1)));
    h.complete("d");
    h.drive();
    assert_eq!(
        h.trace(),
        ["a0", "b0", "c0", "d0", "a1", "b0", "d1", "b1", "c0", "c1"]
    );
    h.assert_serial();
}

#[test]
fn the_cursor_stays_after_a_served_job_that_is_cancelled_or_ends() {
    // b was served last and is cancelled: the next dispatch is c, not a.
    let mut h = Harness::new(1);
    for id in ["a", "b", "c"] {
        h.submit(id, 2);
    }
    h.poll();
    h.complete("a");
    h.poll();
    h.complete("b");
    h.cancel("b");
    assert_eq!(h.poll().map(|d| (d.id, d.idx)), Some(("c".into(), 0)));
    h.complete("c");
    h.drive();
    assert_eq!(h.trace(), ["a0", "b0", "c0", "a1", "c1"]);

    // The first job is served and waits: the next is the second; once due, the first is back
    // at the front of the rotation (after b, the job last served, it wraps to a).
    let mut h = Harness::new(1);
    h.submit("a", 2);
    h.submit("b", 3);
    h.script("a", 0, [Busy]);
    h.poll();
    h.complete("a");
    assert_eq!(h.poll().map(|d| (d.id, d.idx)), Some(("b".into(), 0)));
    h.complete("b");
    h.advance_to(RETRY_WAIT);
    h.drive();
    assert_eq!(h.trace(), ["a0", "b0", "a0", "b1", "a1", "b2"]);
    h.assert_serial();
}

#[test]
fn a_retry_comes_back_at_its_submit_order_place_among_many_jobs() {
    // 20 jobs of 2 targets; the first targets of the first, an inner and the last job are busy
    // once. Once due they run in their own places of the second round.
    let ids: Vec<String> = (0..20).map(|i| format!("j{i:02}.")).collect();
    let mut h = Harness::new(1);
    for id in &ids {
        h.submit(id, 2);
    }
    for busy in ["j00.", "j07.", "j19."] {
        h.script(busy, 0, [Busy]);
    }
    for _ in 0..ids.len() {
        h.poll().unwrap();
        h.complete_oldest().unwrap();
    }
    h.advance_to(RETRY_WAIT);
    h.drive();
    let mut want: Vec<String> = ids.iter().map(|id| format!("{id}0")).collect();
    for id in &ids {
        let busy = ["j00.", "j07.", "j19."].contains(&id.as_str());
        want.push(format!("{id}{}", if busy { 0 } else { 1 }));
    }
    want.extend(["j00.1", "j07.1", "j19.1"].map(String::from));
    assert_eq!(h.trace(), want);
    h.assert_serial();
    assert_eq!(h.statuses().len(), ids.len());
}

#[test]
fn with_more_workers_than_two_the_rotation_passes_over_every_job_in_flight() {
    // Four workers, six jobs: each dispatch is the next job with nothing in flight.
    let mut h = Harness::new(4);
    for id in ["a", "b", "c", "d", "e", "f"] {
        h.submit(id, 2);
    }
    for _ in 0..4 {
        h.poll();
    }
    assert_eq!(h.trace(), ["a0", "b0", "c0", "d0"]);
    h.complete("b");
    h.complete("a");
    assert_eq!(h.poll().map(|d| d.id), Some("e".into()));
    assert_eq!(h.poll().map(|d| d.id), Some("f".into()));
    h.complete("d");
    // After f: a and b are free, c and e are in flight.
    assert_eq!(h.poll().map(|d| (d.id, d.idx)), Some(("a".into(), 1)));
    h.drive();
    h.assert_serial();
    assert_eq!(h.statuses().len(), 6);
}

#[test]
fn a_dispatch_passes_over_the_next_job_in_the_rotation_while_it_is_in_flight() {
    // Two workers: a0 and b0 go out, and b0 comes back first. The job after b (the one last
    // served) is a, still in flight: the rotation passes over it, wraps, and serves b again.
    let mut h = Harness::new(2);
    h.submit("a", 2);
    h.submit("b", 2);
    h.poll(); // a0
    h.poll(); // b0
    h.complete("b");
    assert_eq!(h.poll().map(|d| (d.id, d.idx)), Some(("b".into(), 1)));
    h.drive();
    h.assert_serial();
}
