//! The group commit (`batch`) through the store: writes queued behind a held connection share
//! one commit; a failing write is rolled back alone; a failed transaction or a panic fails the
//! whole batch, stores none of it and leaves the tally true; many threads at once.

use std::sync::Arc;
use std::thread;
use std::time::Duration;

use rota_core::{Admission, BatchStore, CallerClass, Caps, JobStatus, NewJob, TargetWrite};

use crate::SqliteStore;
use crate::error::ctx;
use crate::ops::Tally;

const CAPS: Caps = Caps {
    targets_per_job: 8,
    jobs_per_caller: 100,
    jobs_total: 1000,
    ttl_secs: 100,
};

fn job(id: &str, caller: &str) -> NewJob {
    NewJob {
        id: format!("{id:0>32}"),
        caller: caller.into(),
        class: CallerClass::Fleet,
        idem_key: format!("key-{id}-{caller}"),
        targets: vec![("u0".into(), "{}".into()), ("u1".into(), "{}".into())],
        now: 1,
    }
}

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(f)
}

type Call<T> = Box<dyn FnOnce(&SqliteStore) -> T + Send>;

/// Runs each call on a thread of its own while this thread holds the connection, queueing
/// them in order (each thread is started once the previous one's write is queued), then lets
/// go: the first thread to take the connection leads them all as one batch. The results, in
/// order.
fn batched<T: Send + 'static>(s: &Arc<SqliteStore>, calls: Vec<Call<T>>) -> Vec<T> {
    let held = s.db();
    let mut threads = Vec::new();
    for (i, call) in calls.into_iter().enumerate() {
        let s2 = s.clone();
        threads.push(thread::spawn(move || call(&s2)));
        while s.queue.waiting() < i + 1 {
            thread::sleep(Duration::from_micros(50));
        }
    }
    drop(held);
    threads.into_iter().map(|t| t.join().unwrap()).collect()
}

fn admit(j: NewJob) -> Call<Result<Admission, rota_core::StoreError>> {
    Box::new(move |s| block_on(s.admit(&j, &CAPS)))
}

/// The kept tally agrees with one read afresh from the rows.
fn assert_tally_true(s: &SqliteStore) {
    let mut db = s.db();
    let recount = Tally::read(&db.conn).unwrap();
    assert_eq!(*db.tally().unwrap(), recount);
}

#[test]
fn writes_queued_behind_a_held_connection_share_one_commit_and_each_gets_its_own_result() {
    let s = Arc::new(SqliteStore::open_in_memory().unwrap());
    let before = s.queue.commits();
    let calls = (0..8)
        .map(|i| admit(job(&i.to_string(), &format!("c{i}"))))
        .collect();
    let got = batched(&s, calls);
    assert!(got.iter().all(|r| *r == Ok(Admission::Created)), "{got:?}");
    assert_eq!(s.queue.commits(), before + 1);
    for i in 0..8 {
        let row = block_on(s.job(&job(&i.to_string(), "").id))
            .unwrap()
            .unwrap();
        assert_eq!(row.caller, format!("c{i}"));
    }
    assert_eq!(block_on(s.live_jobs(None)).unwrap(), 8);
    assert_tally_true(&s);
}

#[test]
fn a_write_that_fails_in_a_batch_is_rolled_back_alone() {
    let s = Arc::new(SqliteStore::open_in_memory().unwrap());
    let a = job("a", "alice");
    assert_eq!(block_on(s.admit(&a, &CAPS)), Ok(Admission::Created));
    let before = s.queue.commits();
    // Same id as a stored job (first of the batch: its whole transaction is rolled back), a
    // new job, the same id as that new job (in a savepoint, after it), another new job, and a
    // finish of a target that does not exist (not a failure: `false`).
    let mut dup_a = job("a", "bob");
    dup_a.idem_key = "other".into();
    let mut dup_b = job("b", "carol");
    dup_b.idem_key = "other".into();
    let got = batched(
        &s,
        vec![
            admit(dup_a),
            admit(job("b", "bob")),
            admit(dup_b),
            admit(job("c", "dave")),
            Box::new(|s| {
                block_on(s.finish_target(&job("zz", "").id, 0, &TargetWrite::Running, 2, None)).map(
                    |found| {
                        if found {
                            Admission::Busy
                        } else {
                            Admission::CallerBusy
                        }
                    },
                )
            }),
        ],
    );
    assert!(
        matches!(got[0], Err(rota_core::StoreError::Conflict(_))),
        "{got:?}"
    );
    assert_eq!(got[1], Ok(Admission::Created));
    assert!(
        matches!(got[2], Err(rota_core::StoreError::Conflict(_))),
        "{got:?}"
    );
    assert_eq!(got[3], Ok(Admission::Created));
    assert_eq!(got[4], Ok(Admission::CallerBusy));
    assert_eq!(s.queue.commits(), before + 1);
    // The failed writes left nothing: a is still alice's, b bob's; no carol.
    let row = |id: &str| block_on(s.job(&job(id, "").id)).unwrap().unwrap();
    assert_eq!(row("a").caller, "alice");
    assert_eq!(row("b").caller, "bob");
    assert_eq!(row("c").caller, "dave");
    assert_eq!(block_on(s.live_jobs(None)).unwrap(), 3);
    assert_eq!(block_on(s.live_jobs(Some("carol"))).unwrap(), 0);
    assert_tally_true(&s);
}

#[test]
fn a_batch_whose_transaction_fails_stores_none_of_its_writes_and_reads_the_tally_afresh() {
    let s = Arc::new(SqliteStore::open_in_memory().unwrap());
    let before = s.queue.commits();
    // The third write ends the transaction under the batch (as a failing disk would): the
    // batch cannot go on, and the two admits before it are not stored.
    let got = batched(
        &s,
        vec![
            admit(job("x", "xena")),
            admit(job("y", "yuri")),
            Box::new(|s: &SqliteStore| {
                s.write(|conn, _| {
                    conn.execute_batch("ROLLBACK").map_err(ctx("test"))?;
                    Ok(Admission::Busy)
                })
            }),
        ],
    );
    assert!(got.iter().all(Result::is_err), "{got:?}");
    assert_eq!(s.queue.commits(), before);
    assert_eq!(block_on(s.job(&job("x", "").id)).unwrap(), None);
    assert_eq!(block_on(s.job(&job("y", "").id)).unwrap(), None);
    // The tally had counted both admits: it is read afresh.
    assert_eq!(block_on(s.live_jobs(None)).unwrap(), 0);
    assert_eq!(block_on(s.total_bytes()).unwrap(), 0);
    assert_tally_true(&s);
    // The store goes on.
    assert_eq!(
        block_on(s.admit(&job("x", "xena"), &CAPS)),
        Ok(Admission::Created)
    );
    assert_eq!(block_on(s.live_jobs(None)).unwrap(), 1);
    s.integrity_check().unwrap();
}

#[test]
fn a_panicking_write_fails_its_batch_and_the_store_goes_on() {
    let s = Arc::new(SqliteStore::open_in_memory().unwrap());
    let got = batched(
        &s,
        vec![
            admit(job("x", "xena")),
            Box::new(|s: &SqliteStore| {
                s.write(|_, _| -> Result<Admission, rota_core::StoreError> {
                    panic!("a write that panics")
                })
            }),
            admit(job("y", "yuri")),
        ],
    );
    // x ran before the panic and is rolled back with it; y was not run (its thread may have
    // led a batch of its own after the panic: either way nothing of x is stored).
    assert!(got[0].is_err() && got[1].is_err(), "{got:?}");
    assert_eq!(block_on(s.job(&job("x", "").id)).unwrap(), None);
    let y_stored = block_on(s.job(&job("y", "").id)).unwrap().is_some();
    assert_eq!(y_stored, got[2].is_ok(), "{got:?}");
    assert_eq!(block_on(s.live_jobs(None)).unwrap(), usize::from(y_stored));
    assert_tally_true(&s);
    assert_eq!(
        block_on(s.admit(&job("x", "xena"), &CAPS)),
        Ok(Admission::Created)
    );
    s.integrity_check().unwrap();
}

#[test]
fn many_threads_writing_at_once_keep_the_rows_and_the_tally_in_step() {
    let s = Arc::new(SqliteStore::open_in_memory().unwrap());
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let s = s.clone();
            thread::spawn(move || {
                block_on(async {
                    for n in 0..40 {
                        let j = job(&format!("{t}x{n}"), &format!("c{t}"));
                        assert_eq!(s.admit(&j, &CAPS).await, Ok(Admission::Created));
                        for idx in 0..2 {
                            assert!(s.start_target(&j.id, idx, 2).await.unwrap().is_some());
                            let done = TargetWrite::Done {
                                result: format!("r{idx}"),
                            };
                            let last = (idx == 1).then_some(JobStatus::Done);
                            assert!(s.finish_target(&j.id, idx, &done, 3, last).await.unwrap());
                        }
                        s.evict(u64::MAX).await.unwrap();
                    }
                })
            })
        })
        .collect();
    threads.into_iter().for_each(|t| t.join().unwrap());
    assert_eq!(block_on(s.live_jobs(None)).unwrap(), 0);
    for t in 0..4 {
        for n in 0..40 {
            let row = block_on(s.job(&job(&format!("{t}x{n}"), "").id))
                .unwrap()
                .unwrap();
            assert_eq!((row.status, row.targets_done), (JobStatus::Done, 2));
        }
    }
    assert_tally_true(&s);
    s.integrity_check().unwrap();
}

/// A write that fails after SQLite rolled its whole transaction back (as SQLite does on a full
/// disk or an I/O error; here the write ends the transaction itself, then fails).
fn fails_and_rolls_back_all() -> Call<Result<Admission, rota_core::StoreError>> {
    Box::new(|s: &SqliteStore| {
        s.write(|conn, _| {
            conn.execute_batch("ROLLBACK").map_err(ctx("test"))?;
            Err(rota_core::StoreError::Conflict("rolled back".into()))
        })
    })
}

#[test]
fn a_write_whose_failure_rolled_back_the_transaction_takes_the_writes_before_it_only() {
    let s = Arc::new(SqliteStore::open_in_memory().unwrap());
    // First in its batch: nothing else is lost, and the writes after it are stored.
    let got = batched(
        &s,
        vec![fails_and_rolls_back_all(), admit(job("y", "yuri"))],
    );
    assert!(
        matches!(got[0], Err(rota_core::StoreError::Conflict(_))),
        "{got:?}"
    );
    assert_eq!(got[1], Ok(Admission::Created));
    assert!(block_on(s.job(&job("y", "").id)).unwrap().is_some());
    // After another write: that write is gone with the transaction, and says so.
    let got = batched(
        &s,
        vec![admit(job("x", "xena")), fails_and_rolls_back_all()],
    );
    assert!(got.iter().all(Result::is_err), "{got:?}");
    assert_eq!(block_on(s.job(&job("x", "").id)).unwrap(), None);
    assert_eq!(block_on(s.live_jobs(None)).unwrap(), 1);
    assert_tally_true(&s);
    s.integrity_check().unwrap();
}
