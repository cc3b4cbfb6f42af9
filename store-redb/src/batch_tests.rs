//! Group commit at the store: a batch of operations in one transaction, a failing one rerun
//! alone, and the kept counts moved only by what committed.

use std::sync::Arc;

use rota_core::{
    Admission, BatchStore, CallerClass, Caps, JobStatus, NewJob, StoreError, TargetWrite,
};

use crate::RedbStore;
use crate::commit::Queued;
use crate::store::{Done, Op, Slot, admit_op};

fn new_job(id: &str, caller: &str, now: i64) -> NewJob {
    NewJob {
        id: id.into(),
        caller: caller.into(),
        class: CallerClass::Fleet,
        idem_key: format!("key-{id}"),
        targets: vec![("u0".into(), "{}".into()), ("u1".into(), "{}".into())],
        now,
    }
}

const CAPS: Caps = Caps {
    targets_per_job: 8,
    jobs_per_caller: 2,
    jobs_total: 100,
    ttl_secs: 100,
};

fn admit(job: NewJob, caps: Caps) -> (Queued<Op>, Slot<Admission>) {
    let (op, slot) = Op::new(admit_op(job, caps));
    (Queued::new(0, op), slot)
}

/// An admit of the stored job `x` again, under another caller and key: a Conflict.
fn conflicting_admit() -> Queued<Op> {
    let mut dup = new_job("x", "carol", 1);
    dup.idem_key = "other".into();
    admit(dup, CAPS).0
}

#[tokio::test]
async fn a_batch_commits_its_ops_in_order_each_seeing_the_ones_before() {
    let s = RedbStore::in_memory().unwrap();
    // Two admits of one caller with a cap of 2, then a third: the third sees the first two.
    let (a, ra) = admit(new_job("a", "alice", 1), CAPS);
    let (b, rb) = admit(new_job("b", "alice", 1), CAPS);
    let (c, rc) = admit(new_job("c", "alice", 1), CAPS);
    let mut batch = vec![a, b, c];
    let results = s.commit_batch(&mut batch);
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    assert_eq!(ra.take().unwrap(), Admission::Created);
    assert_eq!(rb.take().unwrap(), Admission::Created);
    assert_eq!(rc.take().unwrap(), Admission::CallerBusy);
    assert_eq!(s.live_jobs(Some("alice")).await.unwrap(), 2);
    let v = s.verify().unwrap();
    assert_eq!(v.jobs, vec!["a".to_string(), "b".to_string()]);
}

#[tokio::test]
async fn an_op_that_fails_in_a_batch_fails_alone_and_the_others_commit() {
    let s = RedbStore::in_memory().unwrap();
    assert_eq!(
        s.admit(&new_job("x", "bob", 1), &CAPS).await.unwrap(),
        Admission::Created
    );
    let bytes = s.total_bytes().await.unwrap();
    let (a, ra) = admit(new_job("a", "alice", 1), CAPS);
    let d = conflicting_admit();
    let (b, rb) = admit(new_job("b", "dave", 1), CAPS);
    let mut batch = vec![a, d, b];
    let results = s.commit_batch(&mut batch);
    assert!(results[0].is_ok(), "{results:?}");
    assert!(
        matches!(results[1], Err(StoreError::Conflict(_))),
        "{results:?}"
    );
    assert!(results[2].is_ok(), "{results:?}");
    assert_eq!(ra.take().unwrap(), Admission::Created);
    assert_eq!(rb.take().unwrap(), Admission::Created);
    // Nothing of the failed admit was stored or counted, once each.
    assert_eq!(s.live_jobs(None).await.unwrap(), 3);
    assert_eq!(s.live_jobs(Some("carol")).await.unwrap(), 0);
    assert_eq!(s.job("x").await.unwrap().unwrap().caller, "bob");
    assert_eq!(s.total_bytes().await.unwrap(), bytes * 3);
    s.verify().unwrap();
}

#[test]
fn threads_writing_at_once_keep_every_cap_and_count() {
    let s = Arc::new(RedbStore::in_memory().unwrap());
    let caps = Caps {
        jobs_per_caller: 1000,
        jobs_total: 25,
        ..CAPS
    };
    let done = TargetWrite::Done {
        result: "r".repeat(10),
    };
    let created: usize = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..4)
            .map(|t| {
                let (s, done) = (s.clone(), done.clone());
                scope.spawn(move || {
                    let rt = tokio::runtime::Builder::new_current_thread()
                        .build()
                        .unwrap();
                    rt.block_on(async {
                        let mut created = 0;
                        for n in 0..20 {
                            let id = format!("t{t}-{n}");
                            match s
                                .admit(&new_job(&id, &format!("c{t}"), 1), &caps)
                                .await
                                .unwrap()
                            {
                                Admission::Created => created += 1,
                                Admission::Busy => continue,
                                a => panic!("{a:?}"),
                            }
                            for idx in 0..2 {
                                s.start_target(&id, idx, 2).await.unwrap().unwrap();
                                let finish = (n % 2 == 0 && idx == 1).then_some(JobStatus::Done);
                                assert!(s.finish_target(&id, idx, &done, 3, finish).await.unwrap());
                            }
                        }
                        created
                    })
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum()
    });
    let v = s.verify().unwrap();
    assert_eq!(v.jobs.len(), created);
    // The odd jobs stay live and the even ones end: 40 odd admits fill the cap of 25 exactly.
    assert_eq!(v.live, 25, "the total cap held");
    assert_eq!(v.targets, 2 * created);
}

/// An operation that panics inside its transaction.
fn panicking() -> (Queued<Op>, Slot<()>) {
    let (op, slot) = Op::new(|_t| -> Result<Done<()>, _> { panic!("an operation's bug") });
    (Queued::new(0, op), slot)
}

#[tokio::test]
async fn an_op_that_panics_fails_alone_and_its_batch_mates_commit() {
    let s = RedbStore::in_memory().unwrap();
    // The panic in the batch's transaction aborts it; each op then runs alone.
    let (a, ra) = admit(new_job("a", "alice", 1), CAPS);
    let (p, rp) = panicking();
    let (b, rb) = admit(new_job("b", "bob", 1), CAPS);
    let mut batch = vec![a, p, b];
    let results = s.commit_batch(&mut batch);
    assert!(results[0].is_ok(), "{results:?}");
    assert!(
        matches!(&results[1], Err(e) if e.to_string().contains("panic")),
        "{results:?}"
    );
    assert!(results[2].is_ok(), "{results:?}");
    assert_eq!(ra.take().unwrap(), Admission::Created);
    assert!(rp.take().is_err(), "the panicked op left no result");
    assert_eq!(rb.take().unwrap(), Admission::Created);
    assert_eq!(s.live_jobs(None).await.unwrap(), 2);
    s.verify().unwrap();
}

#[tokio::test]
async fn a_panic_in_a_rerun_keeps_the_results_of_the_ops_that_committed() {
    let s = RedbStore::in_memory().unwrap();
    assert_eq!(
        s.admit(&new_job("x", "bob", 1), &CAPS).await.unwrap(),
        Admission::Created
    );
    // The Conflict fails the batch; `a` then commits alone, before the panic of the last op.
    let (a, ra) = admit(new_job("a", "alice", 1), CAPS);
    let d = conflicting_admit();
    let (p, _) = panicking();
    let mut batch = vec![a, d, p];
    let results = s.commit_batch(&mut batch);
    assert!(results[0].is_ok(), "a committed op is told so: {results:?}");
    assert!(
        matches!(results[1], Err(StoreError::Conflict(_))),
        "{results:?}"
    );
    assert!(results[2].is_err(), "{results:?}");
    assert_eq!(ra.take().unwrap(), Admission::Created);
    assert_eq!(s.job("a").await.unwrap().unwrap().caller, "alice");
    assert_eq!(s.live_jobs(None).await.unwrap(), 2);
    s.verify().unwrap();
}

#[test]
fn verify_agrees_with_the_counts_while_another_thread_writes() {
    let s = Arc::new(RedbStore::in_memory().unwrap());
    let caps = Caps {
        jobs_per_caller: 1000,
        ..CAPS
    };
    let done = TargetWrite::Done { result: "r".into() };
    std::thread::scope(|scope| {
        let writer = scope.spawn(|| {
            let rt = tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap();
            rt.block_on(async {
                for n in 0..60 {
                    let id = format!("w{n}");
                    let job = new_job(&id, "alice", 1);
                    assert_eq!(s.admit(&job, &caps).await.unwrap(), Admission::Created);
                    for idx in 0..2 {
                        let finish = (idx == 1).then_some(JobStatus::Done);
                        assert!(s.finish_target(&id, idx, &done, 2, finish).await.unwrap());
                    }
                }
            });
        });
        // Every verify while the writer commits reads rows and counts of one moment. (Until
        // the writer's thread ends, done or panicked: the join then tells which.)
        let mut checks = 0;
        while !writer.is_finished() {
            if let Err(e) = s.verify() {
                panic!("verify during writes, after {checks} good checks: {e}");
            }
            checks += 1;
        }
        writer.join().unwrap();
    });
    s.verify().unwrap();
}

#[test]
fn a_group_wait_beyond_the_cap_waits_no_longer_than_the_cap() {
    let dir = tempfile::tempdir().unwrap();
    let opts = crate::RedbOptions {
        group_wait: std::time::Duration::MAX,
        ..crate::RedbOptions::default()
    };
    let s = Arc::new(RedbStore::open_with(dir.path().join("rota.redb"), opts).unwrap());
    assert_eq!(s.group_wait(), crate::MAX_GROUP_WAIT);
    let admit_on_a_thread = |id: &'static str| {
        let s = s.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap();
            let _ = tx.send(rt.block_on(s.admit(&new_job(id, id, 1), &CAPS)));
        });
        rx
    };
    // A thread writes durably and ends; the next durable write, on another thread, waits for
    // it (it was in the last commit) no longer than the cap, then commits.
    let first = admit_on_a_thread("a").recv().unwrap();
    assert_eq!(first.unwrap(), Admission::Created);
    let second = admit_on_a_thread("b").recv_timeout(std::time::Duration::from_secs(60));
    assert!(matches!(second, Ok(Ok(Admission::Created))), "{second:?}");
}

/// Runs `ask` on `s` in a thread of its own while another thread holds a write transaction
/// open; its answer if it came while the transaction was held (microseconds when `ask` takes
/// none; never, until the release, when it waits for one), `None` if it waited.
fn asked_while_a_write_is_held<T: Send + 'static>(
    s: &Arc<RedbStore>,
    ask: impl FnOnce(&RedbStore) -> T + Send + 'static,
) -> Option<T> {
    use std::sync::mpsc;
    use std::time::Duration;

    let (entered_tx, entered) = mpsc::channel();
    let (release, release_rx) = mpsc::channel::<()>();
    let (op, _slot) = Op::new(move |_t| {
        entered_tx.send(()).unwrap();
        release_rx.recv().unwrap();
        Ok(Done((), false))
    });
    let holder = {
        let s = s.clone();
        std::thread::spawn(move || s.commit_batch(&mut [Queued::new(0, op)]))
    };
    entered.recv().unwrap();
    let (done_tx, done) = mpsc::channel();
    let asker = {
        let s = s.clone();
        std::thread::spawn(move || done_tx.send(ask(&s)).unwrap())
    };
    // A limit only for a test that would otherwise hang.
    let answered = done.recv_timeout(Duration::from_secs(10));
    release.send(()).unwrap();
    assert!(holder.join().unwrap().iter().all(Result::is_ok));
    asker.join().unwrap();
    answered.ok()
}

/// An evict over the budget with only live jobs, and a sweep with nothing due, have nothing to
/// delete: neither takes the write transaction, so neither waits for one that another thread
/// holds (a commit's sync, with 2 workers, after every stored target).
#[test]
fn an_evict_or_sweep_with_nothing_to_delete_does_not_wait_for_a_write_under_way() {
    use crate::test_support::block_on;

    let s = Arc::new(RedbStore::in_memory().unwrap());
    assert_eq!(
        block_on(s.admit(&new_job("a", "alice", 1), &CAPS)).unwrap(),
        Admission::Created
    );
    assert!(block_on(s.total_bytes()).unwrap() > 1, "over a budget of 1");
    let (evicted, swept) = asked_while_a_write_is_held(&s, |s| {
        (block_on(s.evict(1)), block_on(s.sweep(2, CAPS.ttl_secs)))
    })
    .expect("evict and sweep waited for the write under way");
    assert_eq!(evicted.unwrap(), 0);
    assert_eq!(swept.unwrap(), 0);
    assert_eq!(block_on(s.live_jobs(None)).unwrap(), 1);
}

/// A sweep whose oldest terminal lease is exactly at the cutoff (`now - ttl`) has nothing due
/// (a job is swept only once its lease is older than that), so it takes no write transaction
/// and does not wait for one that another thread holds: the read that decides, not the write,
/// keeps the boundary.
#[test]
fn a_sweep_whose_oldest_lease_is_exactly_at_the_cutoff_does_not_wait_for_a_write_under_way() {
    use crate::test_support::block_on;

    let s = Arc::new(RedbStore::in_memory().unwrap());
    assert_eq!(
        block_on(s.admit(&new_job("a", "alice", 1), &CAPS)).unwrap(),
        Admission::Created
    );
    assert!(block_on(s.set_status("a", JobStatus::Done, "", 5)).unwrap());
    // The cutoff is 5 + 100 - 100 = 5, the job's lease: not older, not due.
    let swept =
        asked_while_a_write_is_held(&s, |s| block_on(s.sweep(5 + CAPS.ttl_secs, CAPS.ttl_secs)))
            .expect("the sweep waited for the write under way");
    assert_eq!(swept.unwrap(), 0);
    assert!(block_on(s.job("a")).unwrap().is_some(), "not swept");
    // One second later it is due.
    assert_eq!(
        block_on(s.sweep(6 + CAPS.ttl_secs, CAPS.ttl_secs)).unwrap(),
        1
    );
}

/// `live_jobs` and `total_bytes` wait out a commit in progress: a commit holds `published`
/// from its commit to its counts' update, and neither answers while it is held, so what they
/// report agrees with every row a read has seen (never the counts from before a commit whose
/// job a read already returned). Each answers, with the counts, once it is let go.
#[test]
fn live_jobs_and_total_bytes_wait_out_a_commit_between_its_rows_and_its_counts() {
    use crate::test_support::block_on;
    use std::sync::mpsc;
    use std::time::Duration;

    let s = Arc::new(RedbStore::in_memory().unwrap());
    assert_eq!(
        block_on(s.admit(&new_job("a", "alice", 1), &CAPS)).unwrap(),
        Admission::Created
    );
    let bytes = block_on(s.total_bytes()).unwrap();
    type Ask = fn(&RedbStore) -> u64;
    let asks: [(&str, Ask, u64); 3] = [
        (
            "live_jobs(None)",
            |s| block_on(s.live_jobs(None)).unwrap() as u64,
            1,
        ),
        (
            "live_jobs(alice)",
            |s| block_on(s.live_jobs(Some("alice"))).unwrap() as u64,
            1,
        ),
        ("total_bytes", |s| block_on(s.total_bytes()).unwrap(), bytes),
    ];
    for (what, ask, want) in asks {
        let published = s.published();
        let (tx, rx) = mpsc::channel();
        let asker = {
            let s = s.clone();
            std::thread::spawn(move || tx.send(ask(&s)).unwrap())
        };
        // Never answered while held: the wait only gives a wrong answer time to arrive.
        let early = rx.recv_timeout(Duration::from_millis(300));
        assert!(early.is_err(), "{what} answered during a commit: {early:?}");
        drop(published);
        // A limit only for a test that would otherwise hang.
        let answer = rx.recv_timeout(Duration::from_secs(10));
        assert_eq!(answer, Ok(want), "{what}");
        asker.join().unwrap();
    }
}
