//! The group commit (`batch`) through the store: writes queued behind a held connection share
//! one commit; a failing write is rolled back alone; a failed transaction or a panic fails the
//! whole batch, stores none of it and leaves the tally true; many threads at once.

use std::sync::Arc;
use std::thread;
use std::time::Duration;

use rota_core::{
    Admission, BatchStore, CallerClass, Caps, JobStatus, NewJob, TargetState, TargetWrite,
};

use crate::SqliteStore;
use crate::batch::{MAX_BATCH, Op, Slot};
use crate::error::ctx;
use crate::ops::{self, Tally};
use crate::store::SPIN_FOR;

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

/// Runs `f` to its end on a runtime of its own (for a thread that has none).
pub(crate) fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(f)
}

type Call<T> = Box<dyn FnOnce(&SqliteStore) -> T + Send>;

/// Runs each call on a thread of its own while this thread holds the connection, queueing
/// them in order (each thread is started once the previous one's write is queued, or once
/// that thread ended without queuing one), then lets go: the first thread to take the
/// connection leads them all as one batch. The results, in order.
fn batched<T: Send + 'static>(s: &Arc<SqliteStore>, calls: Vec<Call<T>>) -> Vec<T> {
    let held = s.db();
    let mut threads: Vec<thread::JoinHandle<T>> = Vec::new();
    let mut queued = 0;
    for call in calls {
        let s2 = s.clone();
        threads.push(thread::spawn(move || call(&s2)));
        // A call that ends without queuing a write (it panicked first, an assertion of the
        // test's own, say) is not waited for: the join below gives its panic, and the test
        // fails rather than waiting for ever.
        while s.queue.waiting() < queued + 1 {
            if threads.last().is_some_and(|t| t.is_finished()) {
                break;
            }
            thread::sleep(Duration::from_micros(50));
        }
        queued = s.queue.waiting();
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
    db.tally().unwrap().assert_agrees(&recount);
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
    // Every write succeeded: none ran in a savepoint of its own.
    assert_eq!(s.queue.savepoints(), 0);
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
    // dup_b failed after b, in a transaction without savepoints: b and dup_b ran again, dup_b
    // in a savepoint, and so did every write after them.
    assert_eq!(s.queue.savepoints(), 3);
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
            rolls_back_all(false),
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
    // led a batch of its own after the panic: either way nothing of x is stored). Both are
    // told of the panic (their answers filed as the batch unwound), not of a write lost.
    for r in &got[..2] {
        let e = r.as_ref().unwrap_err().to_string();
        assert!(e.contains("(a panic)"), "{e}");
    }
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

/// A write that ends the transaction under the batch (as SQLite does itself on a full disk or an
/// I/O error), then fails (`fail`) or says nothing of it.
fn rolls_back_all(fail: bool) -> Call<Result<Admission, rota_core::StoreError>> {
    Box::new(move |s: &SqliteStore| {
        s.write(move |conn, _| {
            conn.execute_batch("ROLLBACK").map_err(ctx("test"))?;
            if fail {
                Err(rota_core::StoreError::Conflict("rolled back".into()))
            } else {
                Ok(Admission::Busy)
            }
        })
    })
}

#[test]
fn a_write_whose_failure_rolled_back_the_transaction_fails_alone() {
    let s = Arc::new(SqliteStore::open_in_memory().unwrap());
    // First in its batch: nothing else is lost, and the writes after it are stored.
    let got = batched(&s, vec![rolls_back_all(true), admit(job("y", "yuri"))]);
    assert!(
        matches!(got[0], Err(rota_core::StoreError::Conflict(_))),
        "{got:?}"
    );
    assert_eq!(got[1], Ok(Admission::Created));
    assert!(block_on(s.job(&job("y", "").id)).unwrap().is_some());
    // After another write: that write, gone with the transaction, runs again in a new one and
    // is stored, as it would have been alone; the failing write gets its own error, and the
    // write after it is stored.
    let got = batched(
        &s,
        vec![
            admit(job("x", "xena")),
            rolls_back_all(true),
            admit(job("z", "zoe")),
        ],
    );
    assert_eq!(got[0], Ok(Admission::Created), "{got:?}");
    assert!(
        matches!(got[1], Err(rota_core::StoreError::Conflict(_))),
        "{got:?}"
    );
    assert_eq!(got[2], Ok(Admission::Created));
    assert!(block_on(s.job(&job("x", "").id)).unwrap().is_some());
    assert!(block_on(s.job(&job("z", "").id)).unwrap().is_some());
    assert_eq!(block_on(s.live_jobs(None)).unwrap(), 3);
    assert_tally_true(&s);
    s.integrity_check().unwrap();
}

/// Lets the store's file grow by `pages` pages at most (`PRAGMA max_page_count`): a write
/// past that fails with SQLITE_FULL, as on a full disk.
fn leave_room(s: &SqliteStore, pages: i64) {
    let db = s.db();
    let now: i64 = db
        .conn
        .query_row("PRAGMA page_count", [], |r| r.get(0))
        .unwrap();
    db.conn
        .query_row(
            &format!("PRAGMA max_page_count = {}", now + pages),
            [],
            |r| r.get::<_, i64>(0),
        )
        .unwrap();
}

/// A real SQLITE_FULL (a result that does not fit under `max_page_count`), wherever it stands
/// in its batch, fails that write alone: the small writes of the batch, which fit, are stored
/// and answered Ok, as they would be alone (SQLite rolls the whole transaction back on a full
/// disk, savepoints and all).
#[test]
fn a_full_disk_under_one_write_fails_that_write_alone() {
    for order in 0..3 {
        let s = Arc::new(SqliteStore::open_in_memory().unwrap());
        for id in ["a", "b", "c"] {
            block_on(s.admit(&job(id, "alice"), &CAPS)).unwrap();
        }
        leave_room(&s, 0);
        let finish = |id: &str, len: usize| -> Call<Result<String, String>> {
            let id = job(id, "").id;
            Box::new(move |s| {
                let w = TargetWrite::Done {
                    result: "r".repeat(len),
                };
                said(block_on(s.finish_target(&id, 0, &w, 5, None)))
            })
        };
        let mut calls = vec![finish("a", 10), finish("b", 10)];
        calls.insert(order, finish("c", 200_000));
        let mut got = batched(&s, calls);
        let big = got.remove(order);
        assert!(
            big.as_ref().is_err_and(|e| e.contains("full")),
            "order {order}: {big:?}"
        );
        assert_eq!(
            got,
            [Ok("true".to_owned()), Ok("true".to_owned())],
            "order {order}"
        );
        for (id, state) in [
            ("a", TargetState::Done),
            ("b", TargetState::Done),
            ("c", TargetState::Pending),
        ] {
            let t = block_on(s.targets(&job(id, "").id)).unwrap();
            assert_eq!(t[0].status, state, "order {order}: {id}");
        }
        assert_tally_true(&s);
    }
}

/// A nearly full disk under a batch of MAX_BATCH writes: each write that no longer fits rolls
/// the whole transaction back, and the writes before it, which fit, run again; they are then
/// committed at once, so that the next write that does not fit does not send them round again
/// (each of the writes that fit ran some dozen times, a thousand runs in all). Every write that
/// fits is stored, as one at a time; every other fails for the full disk alone.
#[test]
fn a_nearly_full_disk_runs_each_write_of_a_batch_a_few_times_at_most() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let run = |batch: bool| {
        let s = Arc::new(SqliteStore::open_in_memory().unwrap());
        for i in 0..MAX_BATCH {
            let j = job(&format!("j{i}"), &format!("c{i}"));
            assert_eq!(block_on(s.admit(&j, &CAPS)), Ok(Admission::Created));
        }
        leave_room(&s, 64);
        let runs = Arc::new(AtomicUsize::new(0));
        let calls: Vec<Call<Result<bool, rota_core::StoreError>>> = (0..MAX_BATCH)
            .map(|i| {
                let (id, runs) = (job(&format!("j{i}"), "").id, runs.clone());
                Box::new(move |s: &SqliteStore| {
                    s.write(move |conn, tally| {
                        runs.fetch_add(1, Ordering::Relaxed);
                        let w = TargetWrite::Done {
                            result: "r".repeat(10_000),
                        };
                        ops::finish_target(conn, tally, &id, 0, &w, 5, None)
                    })
                }) as Call<_>
            })
            .collect();
        let got: Vec<_> = if batch {
            batched(&s, calls)
        } else {
            calls.into_iter().map(|c| c(&s)).collect()
        };
        for (i, r) in got.iter().enumerate() {
            if let Err(e) = r {
                assert!(e.to_string().contains("full"), "{i}: {e}");
            }
        }
        assert_tally_true(&s);
        s.integrity_check().unwrap();
        let stored = got.iter().filter(|r| **r == Ok(true)).count();
        (stored, runs.load(Ordering::Relaxed))
    };
    let (alone, _) = run(false);
    let (stored, runs) = run(true);
    assert!(
        alone > 1 && alone < MAX_BATCH,
        "the disk fills mid-way: {alone}"
    );
    assert_eq!(stored, alone, "as many stored in a batch as one at a time");
    assert!(
        runs <= 3 * MAX_BATCH,
        "{runs} runs of {MAX_BATCH} writes ({stored} stored)"
    );
}

#[test]
fn a_batch_that_cannot_read_its_tally_fails_its_writes_with_that_error() {
    let s = SqliteStore::open_in_memory().unwrap();
    // A write that commits the transaction under its batch and renames the jobs table (as a
    // damaged file would lose it), then fails: the tally is to be read afresh, and cannot be.
    let broke = s.write(|conn, _| -> Result<(), rota_core::StoreError> {
        conn.execute_batch("COMMIT; ALTER TABLE jobs RENAME TO gone")
            .map_err(ctx("test"))?;
        Err(rota_core::StoreError::Conflict("broke it".into()))
    });
    assert!(
        matches!(broke, Err(rota_core::StoreError::Conflict(_))),
        "{broke:?}"
    );
    // The next write is told why it was not run.
    let e = block_on(s.admit(&job("x", "xena"), &CAPS))
        .unwrap_err()
        .to_string();
    assert!(e.contains("summing the stored bytes"), "{e}");
    // With the table back, the store goes on.
    s.db()
        .conn
        .execute_batch("ALTER TABLE gone RENAME TO jobs")
        .unwrap();
    assert_eq!(
        block_on(s.admit(&job("x", "xena"), &CAPS)),
        Ok(Admission::Created)
    );
    assert_tally_true(&s);
}

#[test]
fn a_write_is_answered_ok_exactly_when_it_is_stored() {
    let s = Arc::new(SqliteStore::open_in_memory().unwrap());
    // The first write ends its transaction; the next must not run outside one (its
    // savepoint would then be a transaction of its own) and be stored while answered Err.
    let got = batched(&s, vec![rolls_back_all(false), admit(job("x", "xena"))]);
    assert!(got[0].is_err(), "{got:?}");
    let stored = block_on(s.job(&job("x", "").id)).unwrap().is_some();
    assert_eq!(stored, got[1].is_ok(), "{got:?}");
    assert_tally_true(&s);
}

#[test]
fn a_failure_that_came_from_a_write_the_batch_then_lost_is_not_reported_as_its_own() {
    let s = Arc::new(SqliteStore::open_in_memory().unwrap());
    // carol's admit conflicts with bob's, which the same batch then loses: carol must not be
    // told the id exists.
    let mut carol = job("b", "carol");
    carol.idem_key = "other".into();
    let got = batched(
        &s,
        vec![admit(job("b", "bob")), admit(carol), rolls_back_all(false)],
    );
    assert!(
        got.iter()
            .all(|r| matches!(r, Err(rota_core::StoreError::Backend { .. }))),
        "{got:?}"
    );
    assert_eq!(block_on(s.job(&job("b", "").id)).unwrap(), None);
    assert_tally_true(&s);
}

#[test]
fn a_failing_write_that_changed_rows_leaves_none_of_them() {
    let s = Arc::new(SqliteStore::open_in_memory().unwrap());
    // The second write stores a whole job (on a scratch tally) and then fails: its savepoint
    // is rolled back, the first write is kept.
    let got = batched(
        &s,
        vec![
            admit(job("a", "alice")),
            Box::new(|s: &SqliteStore| {
                s.write(|conn, _| {
                    let j = job("b", "bob");
                    ops::admit(conn, &mut Tally::default(), &j, &CAPS)?;
                    Err(rota_core::StoreError::Conflict("changed my mind".into()))
                })
            }),
        ],
    );
    assert_eq!(got[0], Ok(Admission::Created));
    assert!(
        matches!(got[1], Err(rota_core::StoreError::Conflict(_))),
        "{got:?}"
    );
    assert!(block_on(s.job(&job("a", "").id)).unwrap().is_some());
    assert_eq!(block_on(s.job(&job("b", "").id)).unwrap(), None);
    assert!(block_on(s.targets(&job("b", "").id)).unwrap().is_empty());
    assert_tally_true(&s);
}

#[test]
fn a_commit_that_fails_fails_every_write_of_its_batch_and_stores_none() {
    let s = Arc::new(SqliteStore::open_in_memory().unwrap());
    // A deferred foreign key, broken inside the transaction, fails its COMMIT (SQLite checks
    // it there); the tables are temporary, on this connection only.
    s.db()
        .conn
        .execute_batch(
            "PRAGMA foreign_keys = ON;
             CREATE TEMP TABLE p (id INTEGER PRIMARY KEY);
             CREATE TEMP TABLE c (p INTEGER REFERENCES p (id) DEFERRABLE INITIALLY DEFERRED);",
        )
        .unwrap();
    let before = s.queue.commits();
    let got = batched(
        &s,
        vec![
            admit(job("x", "xena")),
            Box::new(|s: &SqliteStore| {
                s.write(|conn, _| {
                    conn.execute_batch("INSERT INTO c VALUES (7)")
                        .map_err(ctx("test"))?;
                    Ok(Admission::Busy)
                })
            }),
        ],
    );
    assert!(
        got.iter()
            .all(|r| matches!(r, Err(rota_core::StoreError::Backend { .. }))),
        "{got:?}"
    );
    assert_eq!(s.queue.commits(), before);
    assert_eq!(block_on(s.job(&job("x", "").id)).unwrap(), None);
    assert_eq!(block_on(s.live_jobs(None)).unwrap(), 0);
    assert_tally_true(&s);
    // The transaction is gone: the next write commits.
    assert_eq!(
        block_on(s.admit(&job("x", "xena"), &CAPS)),
        Ok(Admission::Created)
    );
    assert_eq!(s.queue.commits(), before + 1);
}

#[test]
fn a_write_answered_by_another_threads_batch_is_in_the_total_its_evict_reads() {
    let s = Arc::new(SqliteStore::open_in_memory().unwrap());
    let j = job("a", "alice");
    assert_eq!(block_on(s.admit(&j, &CAPS)), Ok(Admission::Created));
    let before = s.published.bytes();
    // A write queued by another thread (as `SqliteStore::write` queues it), led by this one,
    // which still holds the connection when the write is answered: the thread answered may
    // evict at once, and evict under the budget reads the published total without the lock.
    let mut held = s.db();
    let slot = Slot::new();
    let id = j.id.clone();
    s.queue.push(Op::boxed(
        move |conn, tally| {
            let done = TargetWrite::Done {
                result: "r".repeat(2000),
            };
            ops::finish_target(conn, tally, &id, 0, &done, 2, None)
        },
        &slot,
    ));
    assert!(s.queue.lead(&mut held, &s.published));
    assert_eq!(slot.take(), Some(Ok(true)));
    let total = held.tally().unwrap().bytes;
    assert!(total >= before + 2000);
    assert_eq!(s.published.bytes(), total);
}

#[test]
fn a_batch_takes_the_writes_queued_while_it_runs_up_to_its_most() {
    let s = Arc::new(SqliteStore::open_in_memory().unwrap());
    let commits = s.queue.commits();
    let mut held = s.db();
    // The batch's first write queues MAX_BATCH + 6 more while it runs, as other threads would.
    let later: Vec<Arc<Slot<()>>> = (0..MAX_BATCH + 6).map(|_| Slot::new()).collect();
    let first = Slot::new();
    let (s2, later2) = (s.clone(), later.clone());
    s.queue.push(Op::boxed(
        move |_, _| {
            for slot in &later2 {
                s2.queue.push(Op::boxed(|_, _| Ok(()), slot));
            }
            Ok(())
        },
        &first,
    ));
    // One batch, one commit: the first write and the first MAX_BATCH − 1 queued after it.
    assert!(s.queue.lead(&mut held, &s.published));
    assert_eq!(first.take(), Some(Ok(())));
    assert_eq!(s.queue.commits(), commits + 1);
    assert_eq!(s.queue.waiting(), 7);
    assert_eq!(later.iter().filter(|l| l.is_done()).count(), MAX_BATCH - 1);
    // The rest in the next.
    assert!(s.queue.lead(&mut held, &s.published));
    assert_eq!(s.queue.commits(), commits + 2);
    assert_eq!(s.queue.waiting(), 0);
    assert!(later.iter().all(|l| l.take() == Some(Ok(()))));
}

#[test]
fn a_thread_whose_write_another_batch_did_returns_without_the_connection() {
    let s = Arc::new(SqliteStore::open_in_memory().unwrap());
    let held = s.db();
    // A leads (and waits for the connection, held here); B queues behind it and sleeps.
    let spawn = |name: &'static str| {
        let s = s.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        let t = thread::spawn(move || tx.send(block_on(s.admit(&job(name, name), &CAPS))));
        (t, rx)
    };
    let (a, a_done) = spawn("a");
    while s.queue.waiting() < 1 {
        thread::sleep(Duration::from_micros(50));
    }
    let (b, b_done) = spawn("b");
    while s.queue.waiting() < 2 {
        thread::sleep(Duration::from_micros(50));
    }
    thread::sleep(SPIN_FOR * 10);
    // This thread, still holding the connection, runs both writes: B is answered and returns
    // although the connection is still held; A (which waits for the connection) does not.
    let mut held = held;
    assert!(s.queue.lead(&mut held, &s.published));
    let b_got = b_done.recv_timeout(Duration::from_secs(20));
    assert_eq!(b_got, Ok(Ok(Admission::Created)));
    assert!(a_done.try_recv().is_err());
    drop(held);
    assert_eq!(a_done.recv().unwrap(), Ok(Admission::Created));
    a.join().unwrap().unwrap();
    b.join().unwrap().unwrap();
    assert_eq!(block_on(s.live_jobs(None)).unwrap(), 2);
}

#[test]
fn threads_mixing_every_kind_of_write_and_failure_get_answers_that_match_the_rows() {
    let s = Arc::new(SqliteStore::open_in_memory().unwrap());
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let s = s.clone();
            thread::spawn(move || {
                // xorshift, one seed per thread: the same mix on every run.
                let mut x = 0x9E37_79B9_7F4A_7C15 ^ (t + 1);
                let mut next = move |n: u64| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x % n
                };
                let mut answered = Vec::new();
                block_on(async {
                    for n in 0..300 {
                        let id = job(&format!("{t}y{}", next(n + 1)), "").id;
                        match next(10) {
                            0..=2 => {
                                // Callers of this thread only: about 30 admits each, under the cap.
                                let j = job(&format!("{t}y{n}"), &format!("c{t}{}", next(3)));
                                let r = s.admit(&j, &CAPS).await;
                                if let Ok(a) = &r {
                                    assert_eq!(*a, Admission::Created);
                                }
                                let ok = r.is_ok();
                                answered.push((j.id, ok));
                            }
                            3 | 4 => {
                                let _ = s.start_target(&id, next(2) as usize, 2).await;
                            }
                            5 | 6 => {
                                let done = TargetWrite::Done {
                                    result: "r".repeat(next(300) as usize),
                                };
                                let end = (next(2) == 0).then_some(JobStatus::Done);
                                let _ = s.finish_target(&id, next(2) as usize, &done, 3, end).await;
                            }
                            7 => {
                                let _ = s.set_status(&id, JobStatus::Cancelled, "", 4).await;
                            }
                            8 => {
                                let r = s.write(|_, _| -> Result<(), rota_core::StoreError> {
                                    Err(rota_core::StoreError::Conflict("no".into()))
                                });
                                assert!(r.is_err());
                            }
                            _ => {
                                let r = s.write(|conn, _| -> Result<(), rota_core::StoreError> {
                                    conn.execute_batch("ROLLBACK").map_err(ctx("test"))?;
                                    Err(rota_core::StoreError::Conflict("rolled back".into()))
                                });
                                assert!(r.is_err());
                            }
                        }
                    }
                });
                answered
            })
        })
        .collect();
    for t in threads {
        for (id, ok) in t.join().unwrap() {
            let stored = block_on(s.job(&id)).unwrap().is_some();
            assert_eq!(stored, ok, "job {id}: stored {stored}, answered ok {ok}");
        }
    }
    assert_tally_true(&s);
    s.integrity_check().unwrap();
}

/// A call's answer, as text (so that calls of different kinds can share one batch).
fn said<T: std::fmt::Debug>(r: Result<T, rota_core::StoreError>) -> Result<String, String> {
    r.map(|v| format!("{v:?}")).map_err(|e| e.to_string())
}

/// A transaction left open on the connection, with a write in it, as a `ROLLBACK` that failed
/// after a failed batch leaves it: the next use of the connection rolls it back, so a read does
/// not see that write, the next batch neither fails on its `BEGIN` nor commits it, and the
/// tally stays true.
#[test]
fn a_transaction_left_open_is_rolled_back_before_the_connection_is_used_again() {
    let s = Arc::new(SqliteStore::open_in_memory().unwrap());
    let a = job("a", "ann");
    assert_eq!(block_on(s.admit(&a, &CAPS)).unwrap(), Admission::Created);
    {
        let db = s.db();
        db.conn
            .execute_batch("BEGIN IMMEDIATE; DELETE FROM targets;")
            .unwrap();
        assert!(!db.conn.is_autocommit());
    }
    assert_eq!(block_on(s.targets(&a.id)).unwrap().len(), 2);
    let b = job("b", "bob");
    assert_eq!(block_on(s.admit(&b, &CAPS)).unwrap(), Admission::Created);
    assert_eq!(block_on(s.targets(&b.id)).unwrap().len(), 2);
    assert_eq!(block_on(s.targets(&a.id)).unwrap().len(), 2);
    assert!(s.db().conn.is_autocommit());
    assert_tally_true(&s);
    s.integrity_check().unwrap();
}

/// SQLite stores no value longer than its length limit, 1 000 000 000 bytes in this build, which
/// a connection cannot raise (as the store's docs say). Over the limit (lowered here, to keep
/// the test small) an admit's url and a finish's result are refused with an error, and change
/// nothing: not the job, its finish status, its targets nor the byte total.
#[test]
fn a_value_over_sqlites_length_limit_is_refused_and_changes_nothing() {
    use rusqlite::limits::Limit;
    let s = Arc::new(SqliteStore::open_in_memory().unwrap());
    {
        let db = s.db();
        let len = Limit::SQLITE_LIMIT_LENGTH;
        assert_eq!(db.conn.limit(len).unwrap(), 1_000_000_000);
        db.conn.set_limit(len, i32::MAX).unwrap();
        assert_eq!(db.conn.limit(len).unwrap(), 1_000_000_000, "raised");
        db.conn.set_limit(len, 1_000).unwrap();
    }
    let a = job("a", "ann");
    assert_eq!(block_on(s.admit(&a, &CAPS)).unwrap(), Admission::Created);
    let bytes = block_on(s.total_bytes()).unwrap();
    assert!(block_on(s.start_target(&a.id, 0, 2)).unwrap().is_some());
    assert!(
        block_on(s.finish_target(
            &a.id,
            1,
            &TargetWrite::Failed {
                error: "e".into(),
                hint: String::new()
            },
            2,
            None
        ))
        .unwrap()
    );
    let bytes_1 = block_on(s.total_bytes()).unwrap();
    let big = TargetWrite::Done {
        result: "r".repeat(1_001),
    };
    let got = block_on(s.finish_target(&a.id, 0, &big, 3, Some(JobStatus::Partial)));
    assert!(
        got.as_ref()
            .is_err_and(|e| e.to_string().contains("too big")),
        "{got:?}"
    );
    let row = block_on(s.job(&a.id)).unwrap().unwrap();
    assert_eq!((row.status, row.targets_done), (JobStatus::Running, 1));
    assert_eq!(block_on(s.total_bytes()).unwrap(), bytes_1);
    assert!(bytes_1 > bytes);
    let mut b = job("b", "bob");
    b.targets[1].0 = "u".repeat(1_001);
    assert!(block_on(s.admit(&b, &CAPS)).is_err());
    assert_eq!(block_on(s.job(&b.id)).unwrap(), None);
    assert_eq!(block_on(s.total_bytes()).unwrap(), bytes_1);
    assert_tally_true(&s);
}

/// After a transaction of a batch is rolled back, the writes after it (in a new transaction of
/// the same batch) count on the rows, not on the tally the undone writes had moved: a cancel
/// undone with its transaction frees no room under `jobs_total` for the admit after it.
#[test]
fn a_write_after_a_rollback_mid_batch_counts_live_jobs_from_the_rows() {
    let s = Arc::new(SqliteStore::open_in_memory().unwrap());
    let caps = Caps {
        jobs_total: 1,
        ..CAPS
    };
    let a = job("a", "alice");
    assert_eq!(block_on(s.admit(&a, &caps)), Ok(Admission::Created));
    let (a_id, b) = (a.id.clone(), job("b", "bob"));
    let calls: Vec<Call<Result<String, String>>> = vec![
        Box::new(move |s| said(block_on(s.set_status(&a_id, JobStatus::Cancelled, "", 2)))),
        Box::new(|s| said(rolls_back_all(false)(s))),
        Box::new(move |s| said(block_on(s.admit(&b, &caps)))),
    ];
    let got = batched(&s, calls);
    assert!(
        got[0].is_err(),
        "the cancel went with its transaction: {got:?}"
    );
    assert_eq!(
        block_on(s.job(&a.id)).unwrap().map(|j| j.status),
        Some(JobStatus::Queued)
    );
    assert_eq!(got[2], Ok("Busy".to_owned()), "alice's job is still live");
    assert_eq!(block_on(s.live_jobs(None)), Ok(1));
    assert_tally_true(&s);
}

/// Likewise for the byte total: an admit undone with its transaction adds no bytes for an evict
/// after it in the same batch, which deletes only what the rows call for.
#[test]
fn an_evict_after_a_rollback_mid_batch_counts_bytes_from_the_rows() {
    let s = Arc::new(SqliteStore::open_in_memory().unwrap());
    for (n, t) in [("t1", 1), ("t2", 2)] {
        let mut j = job(n, "alice");
        j.now = t;
        assert_eq!(block_on(s.admit(&j, &CAPS)), Ok(Admission::Created));
        assert_eq!(
            block_on(s.set_status(&j.id, JobStatus::Done, "", t)),
            Ok(true)
        );
    }
    let total = block_on(s.total_bytes()).unwrap();
    let mut big = job("big", "bob");
    big.targets = vec![("u".repeat(5000), "{}".into())];
    let calls: Vec<Call<Result<String, String>>> = vec![
        Box::new(move |s| said(block_on(s.admit(&big, &CAPS)))),
        Box::new(|s| said(rolls_back_all(false)(s))),
        // One byte under the true total: only the oldest terminal job is to go.
        Box::new(move |s| said(block_on(s.evict(total - 1)))),
    ];
    let got = batched(&s, calls);
    assert!(
        got[0].is_err(),
        "the admit went with its transaction: {got:?}"
    );
    assert_eq!(got[2], Ok("1".to_owned()), "{got:?}");
    assert!(block_on(s.job(&job("t2", "").id)).unwrap().is_some());
    assert_tally_true(&s);
}

/// The files this process has open whose name SQLite gives its temporary files (a spilled
/// sub-journal, a temporary table).
#[cfg(target_os = "linux")]
fn sqlite_temp_files_open() -> Vec<String> {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .map(|p| p.display().to_string())
        .filter(|p| p.contains("etilqs_"))
        .collect()
}

#[test]
#[cfg(target_os = "linux")]
fn a_batch_whose_savepoint_rewrites_many_pages_writes_no_temporary_file() {
    // A write in a savepoint (a batch runs its writes in savepoints once one failed after
    // others) that rewrites pages the batch's earlier write dirtied keeps their first images
    // in the sub-journal, in memory (`temp_store = MEMORY`): SQLite would otherwise spill one
    // over 64 KiB to a file in the temp directory, and keep writing every later batch's there
    // (a syscall per page; and a batch fails where that directory is full or not writable).
    // Here, a 256 KiB result stored, then stored again in the same batch.
    let dir = tempfile::tempdir().unwrap();
    let s = Arc::new(SqliteStore::open(dir.path().join("rota.sqlite")).unwrap());
    let a = job("a", "alice");
    assert_eq!(block_on(s.admit(&a, &CAPS)), Ok(Admission::Created));
    let big = |fill: char| TargetWrite::Done {
        result: fill.to_string().repeat(256 * 1024),
    };
    let finish = |w: TargetWrite| -> Call<Result<bool, rota_core::StoreError>> {
        let id = job("a", "").id;
        Box::new(move |s| block_on(s.finish_target(&id, 0, &w, 2, None)))
    };
    // A third write that fails: the batch runs again with savepoints (the second write in one).
    let fails: Call<Result<bool, rota_core::StoreError>> =
        Box::new(|s| s.write(|_, _| Err(rota_core::StoreError::Conflict("fails".into()))));
    let before = s.queue.commits();
    let got = batched(&s, vec![finish(big('x')), finish(big('y')), fails]);
    assert_eq!(got[..2], [Ok(true), Ok(true)]);
    assert!(
        matches!(got[2], Err(rota_core::StoreError::Conflict(_))),
        "{got:?}"
    );
    assert_eq!(s.queue.commits(), before + 1, "one batch");
    assert_eq!(s.queue.savepoints(), 2);
    assert_eq!(sqlite_temp_files_open(), Vec::<String>::new());
    let stored = block_on(s.targets(&a.id)).unwrap();
    assert_eq!(
        stored[0].result.as_deref(),
        Some("y".repeat(256 * 1024).as_str())
    );
    assert_tally_true(&s);
}

#[test]
fn every_store_keeps_its_temporary_data_in_memory_and_a_page_cache_of_64_mib() {
    let dir = tempfile::tempdir().unwrap();
    let file = SqliteStore::open(dir.path().join("rota.sqlite")).unwrap();
    let memory = SqliteStore::open_in_memory().unwrap();
    for s in [&file, &memory] {
        let pragma = |name: &str| -> i64 {
            s.db()
                .conn
                .query_row(&format!("PRAGMA {name}"), [], |r| r.get(0))
                .unwrap()
        };
        assert_eq!(pragma("temp_store"), 2, "MEMORY");
        // Negative: KiB, not pages; 64 MiB, as the README says.
        assert_eq!(pragma("cache_size"), -65_536);
    }
}

/// A sweep whose batch is undone (the transaction rolled back after it deleted) raised the
/// lease floor past the jobs that are back: the floor is published as unknown until the tally
/// is read afresh, so the next sweep goes to the connection and deletes them.
#[test]
fn a_sweep_undone_with_its_batch_does_not_hide_the_jobs_that_came_back() {
    let s = Arc::new(SqliteStore::open_in_memory().unwrap());
    let j = job("a", "alice");
    assert_eq!(block_on(s.admit(&j, &CAPS)), Ok(Admission::Created));
    assert_eq!(
        block_on(s.set_status(&j.id, JobStatus::Done, "", 10)),
        Ok(true)
    );
    assert_eq!(s.published.lease_floor(), 10);
    let sweep: Call<Result<Admission, rota_core::StoreError>> = Box::new(|s: &SqliteStore| {
        s.write(|conn, tally| ops::sweep(conn, tally, 100, 10).map(|_| Admission::Busy))
    });
    let got = batched(&s, vec![sweep, rolls_back_all(false)]);
    assert!(got.iter().all(Result::is_err), "{got:?}");
    assert!(
        block_on(s.job(&j.id)).unwrap().is_some(),
        "the delete is undone"
    );
    assert_eq!(s.published.lease_floor(), i64::MIN, "unknown while stale");
    assert_eq!(block_on(s.sweep(100, 10)), Ok(1));
    assert_eq!(block_on(s.job(&j.id)).unwrap(), None);
    assert_eq!(s.published.lease_floor(), i64::MAX, "no terminal job left");
    assert_tally_true(&s);
}

#[test]
fn writes_run_again_after_a_failure_are_stored_once() {
    let s = Arc::new(SqliteStore::open_in_memory().unwrap());
    let a = job("a", "alice");
    assert_eq!(block_on(s.admit(&a, &CAPS)), Ok(Admission::Created));
    let finish = |idx: usize| -> Call<Result<bool, rota_core::StoreError>> {
        let id = a.id.clone();
        Box::new(move |s| {
            let done = TargetWrite::Done {
                result: "r".repeat(100),
            };
            block_on(s.finish_target(&id, idx, &done, 2, None))
        })
    };
    let fails: Call<Result<bool, rota_core::StoreError>> =
        Box::new(|s| s.write(|_, _| Err(rota_core::StoreError::Conflict("fails".into()))));
    // The two finishes ran, then the third write failed: all three ran again.
    let got = batched(&s, vec![finish(0), finish(1), fails]);
    assert_eq!(got[..2], [Ok(true), Ok(true)]);
    assert!(got[2].is_err(), "{got:?}");
    let row = block_on(s.job(&a.id)).unwrap().unwrap();
    assert_eq!(row.targets_done, 2);
    let targets = block_on(s.targets(&a.id)).unwrap();
    assert_eq!(targets.len(), 2);
    assert!(
        targets
            .iter()
            .all(|t| t.result.as_deref() == Some("r".repeat(100).as_str()))
    );
    assert_tally_true(&s);
    s.integrity_check().unwrap();
}

/// A thread asleep in the queue whose write no batch has taken is woken when the leader steps
/// down (its `Leading` dropped), and then leads and does its write: nothing else would wake
/// it. Here this thread takes the lead and gives it up without running a batch, while B sleeps.
#[test]
fn a_thread_asleep_when_the_leader_steps_down_takes_the_lead() {
    let s = Arc::new(SqliteStore::open_in_memory().unwrap());
    let mine = Slot::new();
    let lead = s
        .queue
        .wait(Op::boxed(|_, _| Ok(()), &mine), &mine, Duration::ZERO);
    assert!(lead.is_some(), "no thread led: this one leads");
    let (tx, b_done) = std::sync::mpsc::channel();
    let b = {
        let s = s.clone();
        thread::spawn(move || tx.send(block_on(s.admit(&job("b", "bob"), &CAPS))))
    };
    // B queued its write, spun, and is now asleep: it waits for a batch or the lead.
    while s.queue.sleepers() < 1 {
        thread::sleep(Duration::from_micros(50));
    }
    assert_eq!(s.queue.waiting(), 2);
    drop(lead);
    // Had the step-down not woken B, it would sleep for ever.
    let got = b_done.recv_timeout(Duration::from_secs(30));
    assert_eq!(got, Ok(Ok(Admission::Created)), "B was never woken");
    b.join().unwrap().unwrap();
    // B's batch did this thread's queued write too.
    assert_eq!(mine.take(), Some(Ok(())));
    assert_eq!(s.queue.waiting(), 0);
    assert!(block_on(s.job(&job("b", "").id)).unwrap().is_some());
}

/// Two writes that do not fit on a full disk, one after the other, behind two that do. The
/// first fails after others of a transaction without savepoints: all three run again, in
/// savepoints; it fails again, rolling the whole transaction back, and gets its own error; the
/// two before it run again in a new transaction that is committed as soon as they have (one
/// commit for both), so the second write that does not fit finds them stored and runs alone,
/// and they do not run a fourth time; the write after it is stored in a commit of its own.
#[test]
fn writes_run_again_after_a_full_disk_are_committed_together_before_the_next_write() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let s = Arc::new(SqliteStore::open_in_memory().unwrap());
    let ids = ["a", "b", "c", "d", "e"];
    for id in ids {
        block_on(s.admit(&job(id, "alice"), &CAPS)).unwrap();
    }
    leave_room(&s, 0);
    let runs: Vec<Arc<AtomicUsize>> = ids.iter().map(|_| Arc::default()).collect();
    let lens = [10, 10, 200_000, 200_000, 10];
    let calls: Vec<Call<Result<String, String>>> = ids
        .iter()
        .zip(lens)
        .zip(&runs)
        .map(|((id, len), runs)| {
            let (id, runs) = (job(id, "").id, runs.clone());
            Box::new(move |s: &SqliteStore| {
                said(s.write(move |conn, tally| {
                    runs.fetch_add(1, Ordering::Relaxed);
                    let w = TargetWrite::Done {
                        result: "r".repeat(len),
                    };
                    ops::finish_target(conn, tally, &id, 0, &w, 5, None)
                }))
            }) as Call<_>
        })
        .collect();
    let before = s.queue.commits();
    let got = batched(&s, calls);
    for (i, r) in got.iter().enumerate() {
        if lens[i] > 10 {
            assert!(
                r.as_ref().is_err_and(|e| e.contains("full")),
                "{i}: {got:?}"
            );
        } else {
            assert_eq!(*r, Ok("true".to_owned()), "{i}: {got:?}");
        }
    }
    let runs: Vec<usize> = runs.iter().map(|r| r.load(Ordering::Relaxed)).collect();
    assert_eq!(runs, [3, 3, 2, 1, 1], "runs of each write");
    // a and b in one commit, e in the next.
    assert_eq!(s.queue.commits(), before + 2);
    for (id, len) in ids.iter().zip(lens) {
        let t = block_on(s.targets(&job(id, "").id)).unwrap();
        let want = if len > 10 {
            TargetState::Pending
        } else {
            TargetState::Done
        };
        assert_eq!(t[0].status, want, "{id}");
    }
    assert_tally_true(&s);
    s.integrity_check().unwrap();
}

/// A batch whose commit fails (a deferred foreign key, which leaves SQLite's transaction open)
/// or whose write panics rolls its transaction back before it returns: the connection it was
/// given has none open, even before the next use of the connection would end a stray one.
#[test]
fn a_batch_that_fails_leaves_no_transaction_open_on_its_connection() {
    let s = Arc::new(SqliteStore::open_in_memory().unwrap());
    s.db()
        .conn
        .execute_batch(
            "PRAGMA foreign_keys = ON;
             CREATE TEMP TABLE p (id INTEGER PRIMARY KEY);
             CREATE TEMP TABLE c (p INTEGER REFERENCES p (id) DEFERRABLE INITIALLY DEFERRED);",
        )
        .unwrap();
    let mut held = s.db();
    let (x, fk) = (Slot::new(), Slot::<()>::new());
    let j = job("x", "xena");
    s.queue.push(Op::boxed(
        move |conn, tally| ops::admit(conn, tally, &j, &CAPS),
        &x,
    ));
    s.queue.push(Op::boxed(
        |conn, _| {
            conn.execute_batch("INSERT INTO c VALUES (7)")
                .map_err(ctx("test"))
        },
        &fk,
    ));
    assert!(s.queue.lead(&mut held, &s.published));
    assert!(matches!(x.take(), Some(Err(_))));
    assert!(matches!(fk.take(), Some(Err(_))));
    assert!(
        held.conn.is_autocommit(),
        "the failed commit's transaction is open"
    );
    let panics = Slot::<()>::new();
    s.queue
        .push(Op::boxed(|_, _| panic!("a write that panics"), &panics));
    assert!(s.queue.lead(&mut held, &s.published));
    assert!(matches!(panics.take(), Some(Err(_))));
    assert!(
        held.conn.is_autocommit(),
        "the panicked batch's transaction is open"
    );
    drop(held);
    assert_eq!(block_on(s.job(&job("x", "").id)).unwrap(), None);
    assert_tally_true(&s);
}
