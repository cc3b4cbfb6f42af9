//! The store conformance suite: one documented check per point of the
//! [`BatchStore`] contract (see its `# Contract` doc section).
//!
//! Each check is a `pub async fn` that takes a fresh, empty store (`&dyn BatchStore`, or
//! `Arc<dyn BatchStore>` for the checks that spawn concurrent tasks) and returns `Ok(())`, a
//! store error, or panics on a broken rule with a message naming it. Times are small fake unix
//! seconds (around [`T0`]), far from any real clock, so a store that read a clock would show.
//!
//! A backend runs the whole list from one file in `tests/tests/` with
//! [`conformance_tests!`](crate::conformance_tests):
//!
//! ```text
//! use std::sync::Arc;
//! rota_tests::conformance_tests!(sync || (Arc::new(rota_store_memory::MemoryStore::new()), ()));
//! // or, for a constructor that awaits and a guard (say a temp dir) to keep alive:
//! rota_tests::conformance_tests!(|| async {
//!     let dir = tempfile::tempdir().unwrap();
//!     let store = Arc::new(MyStore::open(dir.path().join("db")).unwrap());
//!     (store, dir)
//! });
//! ```
//!
//! Contract points this suite cannot check, and why:
//! - that sweep and evict are *cheap* when nothing is due and that counts are kept *without a
//!   scan*: speed is the bench's business, not a test's (the checks do pin the results);
//! - that a store never *reads* a clock: only indirectly, through fake times;
//! - that admit is atomic *across processes* sharing one store: the checks race tasks on one
//!   handle;
//! - that admit stores *all or nothing* when the backend fails midway, and crash safety, owner
//!   locks and schema checks of file stores: those need the backend's own fault and file tests.

use std::sync::Arc;

use rota_core::{
    Admission, CallerClass, Caps, JobRow, JobStatus, NewJob, TargetRow, TargetState, TargetWrite,
};
use tokio::sync::Barrier;

#[doc(hidden)]
pub use rota_core::{BatchStore, StoreError};

/// What every check returns: a store error fails the check, as does a panic on a broken rule.
pub type Check = Result<(), StoreError>;

/// The suite's "now": every check's times are offsets from it.
pub const T0: i64 = 1_000;

/// Every check, by name, in the order [`conformance_tests!`](crate::conformance_tests)
/// generates them.
pub const CHECKS: &[&str] = crate::conformance_tests!(@list [names]);

/// Expands to one `#[tokio::test]` per conformance check, named after it, each on a fresh store.
///
/// The argument makes a store: a closure or fn (no arguments) returning a future of
/// `(Arc<S>, G)` where `S: BatchStore`, or, after the word `sync`, returning `(Arc<S>, G)`
/// directly. `G` is a guard kept alive until the test ends (a temp dir, say; `()` for none).
/// The expanding crate needs `tokio` with the `macros` and `rt-multi-thread` features.
#[macro_export]
macro_rules! conformance_tests {
    (@list [$($mode:tt)*]) => {
        $crate::conformance_tests! {@gen [$($mode)*]
            ref[
                admit_stores_a_queued_job_with_pending_targets,
                admit_checks_reuse_then_targets_then_caller_then_total,
                admit_refuses_more_targets_than_the_cap,
                admit_caps_each_callers_live_jobs,
                admit_caps_all_live_jobs,
                admit_reuses_queued_running_done_and_partial_jobs,
                admit_never_reuses_failed_or_cancelled_jobs,
                admit_reuses_only_while_the_lease_is_younger_than_ttl,
                admit_reuses_the_most_recently_created_of_several,
                admit_reuses_only_the_same_caller_and_key,
                admitting_an_existing_id_is_an_error_and_stores_nothing,
                a_terminal_status_is_final,
                finish_cannot_overwrite_a_terminal_status,
                running_is_set_only_from_queued,
                set_status_ends_a_live_job_with_its_error,
                storing_a_target_never_changes_the_job_status,
                start_target_sets_the_target_and_a_queued_job_running,
                finish_target_with_finish_ends_the_job,
                targets_done_counts_done_and_failed_targets,
                bytes_are_counted_through_every_write_and_delete,
                writes_and_touch_set_the_lease,
                reads_and_refused_writes_never_set_the_lease,
                sweep_deletes_terminal_jobs_whose_lease_is_older_than_ttl,
                sweep_counts_from_the_latest_lease,
                sweep_and_evict_never_delete_a_live_job,
                sweep_passes_over_a_live_job_whose_lease_is_old,
                evict_deletes_the_oldest_terminal_jobs_first,
                evict_stops_as_soon_as_the_total_fits,
                sweep_and_evict_change_nothing_when_nothing_is_due,
                deleted_jobs_free_their_key,
                recover_fails_every_live_job_and_frees_the_caps,
                unknown_ids_read_as_none_and_write_false,
                view_is_the_job_beside_its_targets,
                empty_and_mebibyte_values_round_trip,
                any_utf8_round_trips_exactly,
                ids_callers_and_keys_that_are_prefixes_or_empty_stay_apart,
                ttl_zero_and_negative_reuse_and_sweep_by_the_same_rule,
                times_at_the_ends_of_i64_round_trip_and_order_as_numbers,
                a_write_at_an_earlier_now_sets_the_lease_back,
                reuse_among_jobs_created_at_the_same_second_takes_the_greatest_id,
                a_job_of_no_targets_is_stored_and_ended_like_any_other,
                a_job_of_32_targets_is_stored_in_idx_order_and_33_are_refused,
                start_twice_and_finish_of_a_target_not_running,
                finish_with_targets_still_pending_ends_the_job,
                writes_to_an_ended_job_never_count_it_live_again,
            ]
            arc[
                concurrent_admits_of_one_key_create_one_job,
                concurrent_admits_never_exceed_the_total_cap,
                concurrent_admits_never_exceed_the_caller_cap,
                concurrent_writes_keep_every_count,
                a_view_is_one_moment_while_targets_are_stored,
            ]
        }
    };
    (@gen [names] ref[$($r:ident,)*] arc[$($a:ident,)*]) => {
        &[$(stringify!($r),)* $(stringify!($a),)*]
    };
    (@gen [tests $make:block] ref[$($r:ident,)*] arc[$($a:ident,)*]) => {
        $(
            #[doc = concat!("Conformance: [`rota_tests::conformance::", stringify!($r), "`].")]
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $r() -> ::std::result::Result<(), $crate::conformance::StoreError> {
                let (store, _guard) = $make;
                let store: ::std::sync::Arc<dyn $crate::conformance::BatchStore> = store;
                $crate::conformance::$r(&*store).await
            }
        )*
        $(
            #[doc = concat!("Conformance: [`rota_tests::conformance::", stringify!($a), "`].")]
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $a() -> ::std::result::Result<(), $crate::conformance::StoreError> {
                let (store, _guard) = $make;
                let store: ::std::sync::Arc<dyn $crate::conformance::BatchStore> = store;
                $crate::conformance::$a(store).await
            }
        )*
    };
    (sync $make:expr) => {
        $crate::conformance_tests!(@list [tests { ($make)() }]);
    };
    ($make:expr) => {
        $crate::conformance_tests!(@list [tests { ($make)().await }]);
    };
}

// ---- helpers ------------------------------------------------------------------------------

/// The id of test job `n`: 32 lowercase hex characters, ordered as `n` is.
pub fn job_id(n: u32) -> String {
    format!("{n:032x}")
}

/// Caps that never get in the way (TTL 100 s).
pub const ROOMY: Caps = Caps {
    targets_per_job: 64,
    jobs_per_caller: 64,
    jobs_total: 64,
    ttl_secs: 100,
};

/// Test job `n` of `caller` with key `key`, `targets` targets and `created_at` `now`. Every url
/// of a job is as long as every other (for `n < 10`).
pub fn new_job(n: u32, caller: &str, key: &str, targets: usize, now: i64) -> NewJob {
    NewJob {
        id: job_id(n),
        caller: caller.to_owned(),
        class: CallerClass::Fleet,
        idem_key: key.to_owned(),
        targets: (0..targets)
            .map(|i| (format!("https://example.com/{n}/{i}"), "{}".to_owned()))
            .collect(),
        now,
    }
}

/// Admits `job`, which must be created.
async fn created(store: &dyn BatchStore, job: &NewJob, caps: &Caps) -> Check {
    let got = store.admit(job, caps).await?;
    assert_eq!(got, Admission::Created, "admitting job {}", job.id);
    Ok(())
}

/// The stored row of job `id`, which must exist.
async fn row(store: &dyn BatchStore, id: &str) -> Result<JobRow, StoreError> {
    match store.job(id).await? {
        Some(r) => Ok(r),
        None => panic!("job {id} should be stored"),
    }
}

/// Admits test job `n` (one target, created at `now`) and brings it to `status` at `now`.
async fn job_in(
    store: &dyn BatchStore,
    n: u32,
    caller: &str,
    key: &str,
    status: JobStatus,
    now: i64,
) -> Result<String, StoreError> {
    let job = new_job(n, caller, key, 1, now);
    created(store, &job, &ROOMY).await?;
    if status != JobStatus::Queued {
        if status == JobStatus::Running {
            assert!(store.start_target(&job.id, 0, now).await?.is_some());
        } else {
            assert!(store.set_status(&job.id, status, "", now).await?);
        }
    }
    assert_eq!(row(store, &job.id).await?.status, status);
    Ok(job.id)
}

fn done(result: &str) -> TargetWrite {
    TargetWrite::Done {
        result: result.to_owned(),
    }
}

fn failed(error: &str, hint: &str) -> TargetWrite {
    TargetWrite::Failed {
        error: error.to_owned(),
        hint: hint.to_owned(),
    }
}

/// Checks that job `id`'s `targets_done` and `n_bytes` agree with its stored targets, and
/// returns its `n_bytes`.
async fn counts_agree(store: &dyn BatchStore, id: &str) -> Result<u64, StoreError> {
    let r = row(store, id).await?;
    let targets = store.targets(id).await?;
    let done = targets.iter().filter(|t| t.status.is_finished()).count();
    let bytes: u64 = targets.iter().map(TargetRow::n_bytes).sum();
    assert_eq!(r.targets_done, done, "job {id}: targets_done");
    assert_eq!(r.n_bytes, bytes, "job {id}: n_bytes");
    assert_eq!(r.targets_total, targets.len(), "job {id}: targets_total");
    Ok(r.n_bytes)
}

/// Asserts that a view's job row agrees with the targets beside it (`targets_done`,
/// `n_bytes`, `targets_total`, idx order): what [`BatchStore::view`] promises.
fn view_agrees(id: &str, job: &JobRow, targets: &[TargetRow]) {
    let done = targets.iter().filter(|t| t.status.is_finished()).count();
    let bytes: u64 = targets.iter().map(TargetRow::n_bytes).sum();
    assert_eq!(job.targets_done, done, "view of job {id}: targets_done");
    assert_eq!(job.n_bytes, bytes, "view of job {id}: n_bytes");
    assert_eq!(
        job.targets_total,
        targets.len(),
        "view of job {id}: targets_total"
    );
    let idxs: Vec<usize> = targets.iter().map(|t| t.idx).collect();
    assert!(
        idxs.iter().enumerate().all(|(i, &idx)| i == idx),
        "view of job {id}: idx order"
    );
}

/// Admits jobs `0..jobs` of `targets` targets each, job `n` for caller `c{n}`.
async fn admit_jobs(store: &dyn BatchStore, jobs: u32, targets: usize) -> Check {
    for n in 0..jobs {
        let job = new_job(n, &format!("c{n}"), "k", targets, T0);
        created(store, &job, &ROOMY).await?;
    }
    Ok(())
}

/// Awaits a spawned task, failing the check if it panicked.
async fn joined<T>(task: tokio::task::JoinHandle<T>) -> T {
    match task.await {
        Ok(v) => v,
        Err(e) => panic!("a concurrent task failed: {e}"),
    }
}

// ---- admission ----------------------------------------------------------------------------

/// Admit stores the job `queued` (created_at = lease = now, targets_done 0, no error, the
/// submit's caller, class and key, `n_bytes` the sum over its targets) and every target
/// `pending` in idx order, exactly as [`NewJob::rows`] builds them; the total and the live
/// counts include it.
pub async fn admit_stores_a_queued_job_with_pending_targets(store: &dyn BatchStore) -> Check {
    let job = NewJob {
        id: job_id(1),
        caller: "alice".into(),
        class: CallerClass::Restricted,
        idem_key: "k1".into(),
        targets: vec![
            ("https://example.com/a".into(), r#"{"mode":"text"}"#.into()),
            ("https://example.com/bb".into(), "{}".into()),
        ],
        now: T0,
    };
    created(store, &job, &ROOMY).await?;
    let (want_row, want_targets) = job.rows();
    let got = row(store, &job.id).await?;
    assert_eq!(got, want_row);
    assert_eq!(
        (
            got.status,
            got.targets_done,
            got.targets_total,
            got.created_at,
            got.lease
        ),
        (JobStatus::Queued, 0, 2, T0, T0)
    );
    assert_eq!(got.n_bytes, 21 + 15 + 22 + 2);
    let targets = store.targets(&job.id).await?;
    assert_eq!(targets, want_targets);
    assert!(targets.iter().all(|t| t.status == TargetState::Pending));
    assert_eq!(targets.iter().map(|t| t.idx).collect::<Vec<_>>(), [0, 1]);
    assert_eq!(store.total_bytes().await?, got.n_bytes);
    assert_eq!(store.live_jobs(None).await?, 1);
    assert_eq!(store.live_jobs(Some("alice")).await?, 1);
    assert_eq!(store.live_jobs(Some("bob")).await?, 0);
    Ok(())
}

/// Admit decides in the contract's order: a reusable job wins over every cap, then too many
/// targets, then the caller's cap, then the total cap; a refusal stores nothing.
pub async fn admit_checks_reuse_then_targets_then_caller_then_total(
    store: &dyn BatchStore,
) -> Check {
    let caps = Caps {
        targets_per_job: 2,
        jobs_per_caller: 1,
        jobs_total: 1,
        ttl_secs: 100,
    };
    created(store, &new_job(1, "alice", "k1", 1, T0), &caps).await?;
    let before = (store.total_bytes().await?, store.live_jobs(None).await?);
    let cases = [
        // Same key, too many targets, caller and total full: reuse comes first.
        (
            new_job(2, "alice", "k1", 3, T0 + 1),
            Admission::Reused { id: job_id(1) },
        ),
        // Too many targets comes before the caller's cap.
        (
            new_job(3, "alice", "k2", 3, T0 + 1),
            Admission::TooManyTargets { max: 2, got: 3 },
        ),
        // The caller's cap comes before the total cap.
        (new_job(4, "alice", "k2", 1, T0 + 1), Admission::CallerBusy),
        (new_job(5, "bob", "k3", 1, T0 + 1), Admission::Busy),
    ];
    for (job, want) in cases {
        assert_eq!(
            store.admit(&job, &caps).await?,
            want,
            "admitting job {}",
            job.id
        );
        assert_eq!(
            store.job(&job.id).await?,
            None,
            "a refused job is not stored"
        );
        assert!(store.targets(&job.id).await?.is_empty());
        let now = (store.total_bytes().await?, store.live_jobs(None).await?);
        assert_eq!(now, before, "a refusal changes no count");
    }
    Ok(())
}

/// A job may have exactly `targets_per_job` targets; one more is refused with the cap and the
/// count, and nothing is stored.
pub async fn admit_refuses_more_targets_than_the_cap(store: &dyn BatchStore) -> Check {
    let caps = Caps {
        targets_per_job: 3,
        ..ROOMY
    };
    created(store, &new_job(1, "alice", "k1", 3, T0), &caps).await?;
    let too_many = new_job(2, "alice", "k2", 4, T0);
    assert_eq!(
        store.admit(&too_many, &caps).await?,
        Admission::TooManyTargets { max: 3, got: 4 }
    );
    assert_eq!(store.job(&too_many.id).await?, None);
    assert_eq!(store.live_jobs(None).await?, 1);
    Ok(())
}

/// A caller may have `jobs_per_caller` live jobs; one more is `CallerBusy`. Other callers are
/// not affected, and a job that ends frees its caller's slot.
pub async fn admit_caps_each_callers_live_jobs(store: &dyn BatchStore) -> Check {
    let caps = Caps {
        jobs_per_caller: 2,
        ..ROOMY
    };
    created(store, &new_job(1, "alice", "k1", 1, T0), &caps).await?;
    created(store, &new_job(2, "alice", "k2", 1, T0), &caps).await?;
    let third = new_job(3, "alice", "k3", 1, T0);
    assert_eq!(store.admit(&third, &caps).await?, Admission::CallerBusy);
    assert_eq!(store.job(&third.id).await?, None);
    created(store, &new_job(4, "bob", "k1", 1, T0), &caps).await?;
    assert_eq!(store.live_jobs(Some("alice")).await?, 2);
    assert!(
        store
            .set_status(&job_id(1), JobStatus::Cancelled, "", T0 + 1)
            .await?
    );
    assert_eq!(store.live_jobs(Some("alice")).await?, 1);
    created(store, &new_job(5, "alice", "k3", 1, T0 + 1), &caps).await?;
    let sixth = new_job(6, "alice", "k6", 1, T0 + 1);
    assert_eq!(store.admit(&sixth, &caps).await?, Admission::CallerBusy);
    Ok(())
}

/// There may be `jobs_total` live jobs in all; one more is `Busy`, and a job that ends frees a
/// slot.
pub async fn admit_caps_all_live_jobs(store: &dyn BatchStore) -> Check {
    let caps = Caps {
        jobs_total: 3,
        ..ROOMY
    };
    for (n, caller) in [(1, "a"), (2, "b"), (3, "c")] {
        created(store, &new_job(n, caller, "k", 1, T0), &caps).await?;
    }
    let fourth = new_job(4, "d", "k", 1, T0);
    assert_eq!(store.admit(&fourth, &caps).await?, Admission::Busy);
    assert_eq!(store.job(&fourth.id).await?, None);
    assert_eq!(store.live_jobs(None).await?, 3);
    assert!(
        store
            .set_status(&job_id(2), JobStatus::Failed, "x", T0 + 1)
            .await?
    );
    assert_eq!(store.live_jobs(None).await?, 2);
    created(store, &new_job(4, "d", "k", 1, T0 + 1), &caps).await?;
    let fifth = new_job(5, "e", "k", 1, T0 + 1);
    assert_eq!(store.admit(&fifth, &caps).await?, Admission::Busy);
    Ok(())
}

/// A job of the same caller and key in status queued, running, done or partial is reused: its
/// id is returned and nothing is stored.
pub async fn admit_reuses_queued_running_done_and_partial_jobs(store: &dyn BatchStore) -> Check {
    use JobStatus::*;
    for (n, status) in [(1, Queued), (2, Running), (3, Done), (4, Partial)] {
        let key = format!("key-{status}");
        let id = job_in(store, n, "alice", &key, status, T0).await?;
        let bytes = store.total_bytes().await?;
        let again = new_job(n + 10, "alice", &key, 1, T0 + 1);
        assert_eq!(
            store.admit(&again, &ROOMY).await?,
            Admission::Reused { id },
            "a {status} job is reused"
        );
        assert_eq!(store.job(&again.id).await?, None);
        assert_eq!(store.total_bytes().await?, bytes);
    }
    Ok(())
}

/// A failed or cancelled job is never reused: the same caller and key get a new job.
pub async fn admit_never_reuses_failed_or_cancelled_jobs(store: &dyn BatchStore) -> Check {
    for (n, status) in [(1, JobStatus::Failed), (2, JobStatus::Cancelled)] {
        let key = format!("key-{status}");
        job_in(store, n, "alice", &key, status, T0).await?;
        created(store, &new_job(n + 10, "alice", &key, 1, T0 + 1), &ROOMY).await?;
    }
    Ok(())
}

/// A job is reused only while `now - lease < ttl`: at `lease + ttl - 1` it is, at `lease + ttl`
/// it is not. The age counts from the lease (here moved by a touch), not from `created_at`.
pub async fn admit_reuses_only_while_the_lease_is_younger_than_ttl(
    store: &dyn BatchStore,
) -> Check {
    let caps = Caps {
        ttl_secs: 10,
        ..ROOMY
    };
    // (job, lease after an optional touch, probe time, reused?)
    let cases = [
        (1, None, T0 + 9, true),
        (2, None, T0 + 10, false),
        (3, Some(T0 + 5), T0 + 14, true),
        (4, Some(T0 + 5), T0 + 15, false),
    ];
    for (n, touch, at, reused) in cases {
        let key = format!("k{n}");
        let id = job_in(store, n, "alice", &key, JobStatus::Done, T0).await?;
        if let Some(t) = touch {
            assert!(store.touch(&id, t).await?);
        }
        let probe = new_job(n + 10, "alice", &key, 1, at);
        let want = if reused {
            Admission::Reused { id }
        } else {
            Admission::Created
        };
        assert_eq!(
            store.admit(&probe, &caps).await?,
            want,
            "job {n} probed at {at}"
        );
    }
    Ok(())
}

/// Should several jobs of a caller and key be reusable, the most recently created one is
/// returned: checked twice, with the newer job's id sorting before the older one's and then
/// after it, so that neither an order by id nor a scan's own order passes for it.
pub async fn admit_reuses_the_most_recently_created_of_several(store: &dyn BatchStore) -> Check {
    let caps = Caps {
        ttl_secs: 10,
        ..ROOMY
    };
    for (old, new, key, probe) in [(9, 1, "k", 5), (2, 8, "k2", 6)] {
        let old = new_job(old, "alice", key, 1, T0);
        created(store, &old, &caps).await?;
        assert!(store.set_status(&old.id, JobStatus::Done, "", T0).await?);
        // The old job has expired for reuse, so a new one is created ...
        created(store, &new_job(new, "alice", key, 1, T0 + 10), &caps).await?;
        // ... and a touch makes the old one reusable again: now both are.
        assert!(store.touch(&old.id, T0 + 11).await?);
        let probe = new_job(probe, "alice", key, 1, T0 + 12);
        assert_eq!(
            store.admit(&probe, &caps).await?,
            Admission::Reused { id: job_id(new) },
            "key {key}"
        );
    }
    Ok(())
}

/// Reuse needs both the same caller and the same key.
pub async fn admit_reuses_only_the_same_caller_and_key(store: &dyn BatchStore) -> Check {
    created(store, &new_job(1, "alice", "k", 1, T0), &ROOMY).await?;
    created(store, &new_job(2, "bob", "k", 1, T0), &ROOMY).await?;
    created(store, &new_job(3, "alice", "k2", 1, T0), &ROOMY).await?;
    let probe = new_job(4, "bob", "k", 1, T0);
    assert_eq!(
        store.admit(&probe, &ROOMY).await?,
        Admission::Reused { id: job_id(2) }
    );
    Ok(())
}

/// Admitting an id that exists is an error and stores nothing: the stored job, its targets and
/// every count are unchanged, and its key still leads to it.
pub async fn admitting_an_existing_id_is_an_error_and_stores_nothing(
    store: &dyn BatchStore,
) -> Check {
    let first = new_job(1, "alice", "k1", 2, T0);
    created(store, &first, &ROOMY).await?;
    let (row_before, targets_before) = (
        row(store, &first.id).await?,
        store.targets(&first.id).await?,
    );
    let bytes = store.total_bytes().await?;
    let clash = new_job(1, "bob", "k2", 3, T0 + 1);
    let got = store.admit(&clash, &ROOMY).await;
    assert!(
        matches!(got, Err(StoreError::Conflict(_))),
        "admitting an existing id gave {got:?}"
    );
    assert_eq!(row(store, &first.id).await?, row_before);
    assert_eq!(store.targets(&first.id).await?, targets_before);
    assert_eq!(store.total_bytes().await?, bytes);
    assert_eq!(store.live_jobs(None).await?, 1);
    assert_eq!(store.live_jobs(Some("bob")).await?, 0);
    let probe = new_job(2, "alice", "k1", 2, T0 + 1);
    assert_eq!(
        store.admit(&probe, &ROOMY).await?,
        Admission::Reused { id: first.id }
    );
    created(store, &new_job(3, "bob", "k2", 3, T0 + 1), &ROOMY).await?;
    Ok(())
}

// ---- statuses -----------------------------------------------------------------------------

/// A terminal status is final: `set_status` to any status returns `false` and changes nothing
/// (status, error, lease), and neither `start_target` nor `finish_target` with a `finish`
/// changes the status.
pub async fn a_terminal_status_is_final(store: &dyn BatchStore) -> Check {
    let mut n = 0;
    for &from in JobStatus::ALL.iter().filter(|s| s.is_terminal()) {
        for &to in JobStatus::ALL {
            n += 1;
            let job = new_job(n, "alice", &format!("k{n}"), 2, T0);
            created(store, &job, &ROOMY).await?;
            assert!(store.set_status(&job.id, from, "first", T0 + 1).await?);
            let changed = store.set_status(&job.id, to, "second", T0 + 2).await?;
            assert!(!changed, "{from} -> {to} must be refused");
            let r = row(store, &job.id).await?;
            assert_eq!(
                (r.status, r.error.as_str(), r.lease),
                (from, "first", T0 + 1)
            );
            assert!(store.start_target(&job.id, 0, T0 + 3).await?.is_some());
            let w = done("{}");
            assert!(
                store
                    .finish_target(&job.id, 1, &w, T0 + 4, Some(to))
                    .await?
            );
            let r = row(store, &job.id).await?;
            assert_eq!(
                (r.status, r.error.as_str()),
                (from, "first"),
                "{from} stays {from}"
            );
        }
    }
    Ok(())
}

/// `finish_target` with a `finish` status cannot overwrite a terminal status; a target stored
/// into a cancelled job is stored (and counted), and the job stays cancelled.
pub async fn finish_cannot_overwrite_a_terminal_status(store: &dyn BatchStore) -> Check {
    let job = new_job(1, "alice", "k", 2, T0);
    created(store, &job, &ROOMY).await?;
    assert!(store.start_target(&job.id, 0, T0 + 1).await?.is_some());
    assert!(
        store
            .set_status(&job.id, JobStatus::Cancelled, "", T0 + 2)
            .await?
    );
    let w = done(r#"{"content":"late"}"#);
    assert!(
        store
            .finish_target(&job.id, 0, &w, T0 + 3, Some(JobStatus::Done))
            .await?
    );
    let r = row(store, &job.id).await?;
    assert_eq!((r.status, r.targets_done), (JobStatus::Cancelled, 1));
    let targets = store.targets(&job.id).await?;
    assert_eq!(targets.first().map(|t| t.status), Some(TargetState::Done));
    assert_eq!(
        targets.get(1).map(|t| t.status),
        Some(TargetState::Pending),
        "a later target stays pending"
    );
    let w = failed("e", "h");
    assert!(
        store
            .finish_target(&job.id, 1, &w, T0 + 4, Some(JobStatus::Failed))
            .await?
    );
    assert_eq!(row(store, &job.id).await?.status, JobStatus::Cancelled);
    Ok(())
}

/// `running` is set only from `queued`: queued → running is allowed once; running → running,
/// anything → queued are refused.
pub async fn running_is_set_only_from_queued(store: &dyn BatchStore) -> Check {
    let job = new_job(1, "alice", "k", 1, T0);
    created(store, &job, &ROOMY).await?;
    assert!(
        !store
            .set_status(&job.id, JobStatus::Queued, "", T0 + 1)
            .await?
    );
    assert!(
        store
            .set_status(&job.id, JobStatus::Running, "", T0 + 2)
            .await?
    );
    assert_eq!(row(store, &job.id).await?.status, JobStatus::Running);
    assert!(
        !store
            .set_status(&job.id, JobStatus::Running, "", T0 + 3)
            .await?
    );
    assert!(
        !store
            .set_status(&job.id, JobStatus::Queued, "", T0 + 4)
            .await?
    );
    let r = row(store, &job.id).await?;
    assert_eq!((r.status, r.lease), (JobStatus::Running, T0 + 2));
    assert_eq!(store.live_jobs(None).await?, 1);
    Ok(())
}

/// `set_status` moves a queued or running job to any terminal status with the given error and
/// lease, and the live counts drop.
pub async fn set_status_ends_a_live_job_with_its_error(store: &dyn BatchStore) -> Check {
    use JobStatus::*;
    let mut n = 0;
    for from in [Queued, Running] {
        for to in [Done, Partial, Failed, Cancelled] {
            n += 1;
            let id = job_in(store, n, "alice", &format!("k{n}"), from, T0).await?;
            let live = store.live_jobs(Some("alice")).await?;
            let error = format!("{from} to {to}");
            assert!(store.set_status(&id, to, &error, T0 + 5).await?);
            let r = row(store, &id).await?;
            assert_eq!((r.status, r.error, r.lease), (to, error, T0 + 5));
            assert_eq!(store.live_jobs(Some("alice")).await?, live - 1);
        }
    }
    assert_eq!(store.live_jobs(None).await?, 0);
    Ok(())
}

/// Storing a target (without `finish`) never changes its job's status: a queued job stays
/// queued, and a running job whose every target is stored stays running.
pub async fn storing_a_target_never_changes_the_job_status(store: &dyn BatchStore) -> Check {
    let job = new_job(1, "alice", "k", 2, T0);
    created(store, &job, &ROOMY).await?;
    assert!(
        store
            .finish_target(&job.id, 0, &done("{}"), T0 + 1, None)
            .await?
    );
    assert_eq!(row(store, &job.id).await?.status, JobStatus::Queued);
    assert!(store.start_target(&job.id, 1, T0 + 2).await?.is_some());
    assert!(
        store
            .finish_target(&job.id, 1, &failed("e", ""), T0 + 3, None)
            .await?
    );
    let r = row(store, &job.id).await?;
    assert_eq!((r.status, r.targets_done), (JobStatus::Running, 2));
    assert!(
        store
            .finish_target(&job.id, 0, &TargetWrite::Pending, T0 + 4, None)
            .await?
    );
    assert_eq!(row(store, &job.id).await?.status, JobStatus::Running);
    assert_eq!(store.live_jobs(None).await?, 1);
    Ok(())
}

/// `start_target` makes the target `running` (returning its row as stored, url and options
/// intact), makes a queued job `running`, leaves a running job running and a cancelled job
/// cancelled, and returns `None` for an idx the job does not have.
pub async fn start_target_sets_the_target_and_a_queued_job_running(
    store: &dyn BatchStore,
) -> Check {
    let job = new_job(1, "alice", "k", 2, T0);
    created(store, &job, &ROOMY).await?;
    let Some(started) = store.start_target(&job.id, 0, T0 + 5).await? else {
        panic!("target 0 exists");
    };
    let targets = store.targets(&job.id).await?;
    assert_eq!(targets.first(), Some(&started), "returns the row as stored");
    assert_eq!(
        (
            started.idx,
            started.status,
            started.url.as_str(),
            started.options.as_str()
        ),
        (0, TargetState::Running, "https://example.com/1/0", "{}")
    );
    assert_eq!(targets.get(1).map(|t| t.status), Some(TargetState::Pending));
    let r = row(store, &job.id).await?;
    assert_eq!(
        (r.status, r.lease, r.targets_done),
        (JobStatus::Running, T0 + 5, 0)
    );
    assert!(store.start_target(&job.id, 1, T0 + 6).await?.is_some());
    assert_eq!(row(store, &job.id).await?.status, JobStatus::Running);
    assert_eq!(store.start_target(&job.id, 2, T0 + 7).await?, None);
    assert_eq!(store.live_jobs(None).await?, 1);

    let other = new_job(2, "alice", "k2", 1, T0);
    created(store, &other, &ROOMY).await?;
    assert!(
        store
            .set_status(&other.id, JobStatus::Cancelled, "", T0 + 1)
            .await?
    );
    assert!(store.start_target(&other.id, 0, T0 + 2).await?.is_some());
    assert_eq!(row(store, &other.id).await?.status, JobStatus::Cancelled);
    Ok(())
}

/// `finish_target` with `finish` stores the target and ends a live job with that status and
/// an empty error, in one write: lease, counts and live counts all follow.
pub async fn finish_target_with_finish_ends_the_job(store: &dyn BatchStore) -> Check {
    use JobStatus::*;
    for (n, status) in [(1, Done), (2, Partial), (3, Failed), (4, Cancelled)] {
        let id = job_in(store, n, "alice", &format!("k{n}"), Running, T0).await?;
        let w = done("{}");
        assert!(
            store
                .finish_target(&id, 0, &w, T0 + 3, Some(status))
                .await?
        );
        let r = row(store, &id).await?;
        assert_eq!(
            (r.status, r.error.as_str(), r.lease, r.targets_done),
            (status, "", T0 + 3, 1)
        );
    }
    assert_eq!(store.live_jobs(None).await?, 0);
    assert_eq!(store.live_jobs(Some("alice")).await?, 0);
    Ok(())
}

// ---- counts -------------------------------------------------------------------------------

/// `targets_done` counts the targets stored done or failed, through every kind of write:
/// starting, finishing, overwriting an outcome, and sending a target back to pending or
/// running.
pub async fn targets_done_counts_done_and_failed_targets(store: &dyn BatchStore) -> Check {
    let job = new_job(1, "alice", "k", 3, T0);
    created(store, &job, &ROOMY).await?;
    let id = job.id.as_str();
    let steps: [(usize, Option<TargetWrite>, usize); 8] = [
        (0, None, 0),
        (0, Some(done("{}")), 1),
        (1, Some(failed("e", "h")), 2),
        (0, Some(failed("e2", "")), 2),
        (1, Some(TargetWrite::Pending), 1),
        (2, None, 1),
        (2, Some(done("{}")), 2),
        (0, None, 1),
    ];
    for (step, (idx, write, want)) in steps.into_iter().enumerate() {
        let now = T0 + 1 + step as i64;
        match &write {
            None => assert!(store.start_target(id, idx, now).await?.is_some()),
            Some(w) => assert!(store.finish_target(id, idx, w, now, None).await?),
        }
        let r = row(store, id).await?;
        assert_eq!(
            r.targets_done, want,
            "step {step}: {write:?} on target {idx}"
        );
        assert_eq!(r.targets_total, 3);
        counts_agree(store, id).await?;
    }
    Ok(())
}

/// A job's `n_bytes` is the bytes of its rows (url, options, result, error, hint) through every
/// write, including overwriting an outcome; the total is the sum over all jobs and drops by a
/// job's bytes when it is deleted.
pub async fn bytes_are_counted_through_every_write_and_delete(store: &dyn BatchStore) -> Check {
    let a = new_job(1, "alice", "ka", 2, T0);
    let b = new_job(2, "bob", "kb", 1, T0);
    created(store, &a, &ROOMY).await?;
    created(store, &b, &ROOMY).await?;
    // Each url is 23 bytes ("https://example.com/1/0"), each options 2 ("{}").
    let base_a = 2 * (23 + 2);
    let base_b = 23 + 2;
    assert_eq!(row(store, &a.id).await?.n_bytes, base_a);
    assert_eq!(store.total_bytes().await?, base_a + base_b);
    let steps: [(TargetWrite, u64); 6] = [
        (done(&"r".repeat(100)), 100),
        (done(&"r".repeat(40)), 40),
        (failed(&"e".repeat(10), &"h".repeat(5)), 15),
        (failed("", ""), 0),
        (done(""), 0),
        (TargetWrite::Pending, 0),
    ];
    for (i, (w, extra)) in steps.iter().enumerate() {
        assert!(store.finish_target(&a.id, 1, w, T0 + 1, None).await?);
        assert_eq!(
            row(store, &a.id).await?.n_bytes,
            base_a + extra,
            "after {w:?}"
        );
        assert_eq!(
            store.total_bytes().await?,
            base_a + extra + base_b,
            "step {i}"
        );
        counts_agree(store, &a.id).await?;
    }
    assert!(
        store
            .finish_target(&b.id, 0, &done(&"x".repeat(1000)), T0 + 2, None)
            .await?
    );
    assert_eq!(store.total_bytes().await?, base_a + base_b + 1000);
    assert!(store.start_target(&b.id, 0, T0 + 3).await?.is_some());
    assert_eq!(
        store.total_bytes().await?,
        base_a + base_b,
        "running holds no result"
    );
    assert!(
        store
            .finish_target(&b.id, 0, &done(&"x".repeat(1000)), T0 + 4, None)
            .await?
    );
    assert!(store.set_status(&b.id, JobStatus::Done, "", T0 + 4).await?);
    assert_eq!(store.evict(base_a).await?, 1);
    assert_eq!(store.total_bytes().await?, base_a);
    assert!(
        store
            .set_status(&a.id, JobStatus::Failed, "", T0 + 5)
            .await?
    );
    assert_eq!(store.sweep(T0 + 1000, 10).await?, 1);
    assert_eq!(store.total_bytes().await?, 0);
    Ok(())
}

// ---- leases -------------------------------------------------------------------------------

/// `start_target`, `finish_target` (with or without `finish`), a status change and `touch` each
/// set the lease to `now`; `touch` and target writes do so whatever the job's status.
pub async fn writes_and_touch_set_the_lease(store: &dyn BatchStore) -> Check {
    let job = new_job(1, "alice", "k", 2, T0);
    created(store, &job, &ROOMY).await?;
    let id = job.id.as_str();
    assert!(store.start_target(id, 0, T0 + 1).await?.is_some());
    assert_eq!(row(store, id).await?.lease, T0 + 1, "start_target");
    assert!(
        store
            .finish_target(id, 0, &done("{}"), T0 + 2, None)
            .await?
    );
    assert_eq!(row(store, id).await?.lease, T0 + 2, "finish_target");
    assert!(store.touch(id, T0 + 3).await?);
    assert_eq!(row(store, id).await?.lease, T0 + 3, "touch");
    assert!(
        store
            .set_status(id, JobStatus::Cancelled, "", T0 + 4)
            .await?
    );
    assert_eq!(row(store, id).await?.lease, T0 + 4, "set_status");
    assert!(store.touch(id, T0 + 5).await?);
    assert_eq!(
        row(store, id).await?.lease,
        T0 + 5,
        "touch of a terminal job"
    );
    assert!(
        store
            .finish_target(id, 1, &done("{}"), T0 + 6, None)
            .await?
    );
    assert_eq!(
        row(store, id).await?.lease,
        T0 + 6,
        "finish_target, terminal job"
    );
    assert!(store.start_target(id, 1, T0 + 7).await?.is_some());
    assert_eq!(
        row(store, id).await?.lease,
        T0 + 7,
        "start_target, terminal job"
    );

    let other = job_in(store, 2, "alice", "k2", JobStatus::Running, T0).await?;
    let w = done("{}");
    assert!(
        store
            .finish_target(&other, 0, &w, T0 + 8, Some(JobStatus::Done))
            .await?
    );
    assert_eq!(
        row(store, &other).await?.lease,
        T0 + 8,
        "finish_target with finish"
    );
    assert_eq!(
        row(store, &other).await?.created_at,
        T0,
        "created_at never moves"
    );
    Ok(())
}

/// Reads (`job`, `targets`, `live_jobs`, `total_bytes`), housekeeping that deletes nothing, and
/// refused writes never change the lease.
pub async fn reads_and_refused_writes_never_set_the_lease(store: &dyn BatchStore) -> Check {
    let job = new_job(1, "alice", "k", 1, T0);
    created(store, &job, &ROOMY).await?;
    let id = job.id.as_str();
    assert!(store.touch(id, T0 + 5).await?);
    for _ in 0..3 {
        store.job(id).await?;
        store.targets(id).await?;
        store.live_jobs(None).await?;
        store.live_jobs(Some("alice")).await?;
        store.total_bytes().await?;
    }
    assert_eq!(row(store, id).await?.lease, T0 + 5, "after reads");
    assert_eq!(store.sweep(T0 + 50, 100).await?, 0);
    assert_eq!(store.evict(u64::MAX).await?, 0);
    assert_eq!(row(store, id).await?.lease, T0 + 5, "after sweep and evict");
    assert!(!store.set_status(id, JobStatus::Queued, "", T0 + 9).await?);
    assert_eq!(
        row(store, id).await?.lease,
        T0 + 5,
        "after a refused set_status"
    );
    assert!(store.set_status(id, JobStatus::Done, "", T0 + 6).await?);
    assert!(!store.set_status(id, JobStatus::Failed, "x", T0 + 9).await?);
    assert_eq!(
        row(store, id).await?.lease,
        T0 + 6,
        "a refused change of a terminal job"
    );
    Ok(())
}

// ---- sweep and evict ----------------------------------------------------------------------

/// Sweep deletes, with their targets, the terminal jobs (of every terminal status) whose lease
/// is older than `now - ttl`; a lease of exactly `now - ttl` is kept. It returns how many.
pub async fn sweep_deletes_terminal_jobs_whose_lease_is_older_than_ttl(
    store: &dyn BatchStore,
) -> Check {
    use JobStatus::*;
    let now = T0 + 100;
    // (job, status, lease, swept?) with ttl 10: the cutoff is T0 + 90.
    let cases = [
        (1, Done, T0 + 89, true),
        (2, Done, T0 + 90, false),
        (3, Failed, T0 + 50, true),
        (4, Partial, T0 + 80, true),
        (5, Cancelled, T0 + 70, true),
        (6, Partial, T0 + 95, false),
    ];
    for (n, status, lease, _) in cases {
        job_in(store, n, "alice", &format!("k{n}"), status, lease).await?;
    }
    assert_eq!(store.sweep(now, 10).await?, 4);
    let mut kept = 0;
    for (n, _, _, swept) in cases {
        let id = job_id(n);
        let there = store.job(&id).await?.is_some();
        assert_eq!(there, !swept, "job {n}");
        assert_eq!(
            store.targets(&id).await?.is_empty(),
            swept,
            "targets of job {n}"
        );
        if there {
            kept += counts_agree(store, &id).await?;
        }
    }
    assert_eq!(store.total_bytes().await?, kept);
    assert_eq!(
        store.sweep(now, 10).await?,
        0,
        "a second sweep finds nothing"
    );
    Ok(())
}

/// Sweep counts a job's age from its latest lease, not from `created_at`: a job that ended
/// late, or that was touched or had a target stored after it ended, is kept until that lease
/// is old.
pub async fn sweep_counts_from_the_latest_lease(store: &dyn BatchStore) -> Check {
    let touched = job_in(store, 1, "alice", "k1", JobStatus::Done, T0).await?;
    let written = job_in(store, 2, "alice", "k2", JobStatus::Cancelled, T0).await?;
    let ended_late = job_in(store, 3, "alice", "k3", JobStatus::Running, T0).await?;
    assert!(store.touch(&touched, T0 + 50).await?);
    assert!(
        store
            .finish_target(&written, 0, &done("{}"), T0 + 50, None)
            .await?
    );
    assert!(
        store
            .set_status(&ended_late, JobStatus::Failed, "", T0 + 50)
            .await?
    );
    let all = [&touched, &written, &ended_late];
    assert_eq!(store.sweep(T0 + 60, 10).await?, 0);
    for id in all {
        assert!(
            store.job(id).await?.is_some(),
            "job {id} was active at T0 + 50"
        );
    }
    assert_eq!(store.sweep(T0 + 61, 10).await?, 3);
    for id in all {
        assert_eq!(store.job(id).await?, None);
    }
    Ok(())
}

/// Neither sweep nor evict ever deletes a queued or running job, however old or big.
pub async fn sweep_and_evict_never_delete_a_live_job(store: &dyn BatchStore) -> Check {
    let queued = job_in(store, 1, "alice", "k1", JobStatus::Queued, T0).await?;
    let running = job_in(store, 2, "alice", "k2", JobStatus::Running, T0).await?;
    let big = done(&"x".repeat(10_000));
    assert!(store.finish_target(&running, 0, &big, T0, None).await?);
    let ended = job_in(store, 3, "alice", "k3", JobStatus::Done, T0).await?;
    let live_bytes = row(store, &queued).await?.n_bytes + row(store, &running).await?.n_bytes;
    assert_eq!(store.sweep(T0 + 100_000, 10).await?, 1);
    assert_eq!(store.job(&ended).await?, None);
    let again = job_in(store, 4, "alice", "k4", JobStatus::Failed, T0).await?;
    assert_eq!(
        store.evict(0).await?,
        1,
        "evict deletes only the terminal job"
    );
    assert_eq!(store.job(&again).await?, None);
    assert_eq!(store.evict(0).await?, 0);
    for id in [&queued, &running] {
        assert!(store.job(id).await?.is_some(), "live job {id} kept");
        assert!(!store.targets(id).await?.is_empty());
    }
    assert_eq!(store.total_bytes().await?, live_bytes);
    assert_eq!(store.live_jobs(None).await?, 2);
    Ok(())
}

/// A live job whose last activity (a touch, a stored target) is older than the cutoff is
/// passed over by sweep, not a stop: the terminal jobs due after it are deleted all the same.
/// (A store that takes its due jobs from the front of a lease order, up to the first that is
/// not due, must keep the live jobs out of that order.)
pub async fn sweep_passes_over_a_live_job_whose_lease_is_old(store: &dyn BatchStore) -> Check {
    let queued = job_in(store, 1, "alice", "k1", JobStatus::Queued, T0).await?;
    let running = job_in(store, 2, "alice", "k2", JobStatus::Running, T0).await?;
    assert!(store.touch(&queued, T0 + 1).await?);
    assert!(
        store
            .finish_target(&running, 0, &done("{}"), T0 + 1, None)
            .await?
    );
    let ended = job_in(store, 3, "alice", "k3", JobStatus::Done, T0 + 2).await?;
    assert_eq!(
        store.sweep(T0 + 100, 10).await?,
        1,
        "the terminal job due after two live ones of older leases"
    );
    assert_eq!(store.job(&ended).await?, None);
    for id in [&queued, &running] {
        assert!(store.job(id).await?.is_some(), "live job {id} kept");
    }
    Ok(())
}

/// Evict deletes terminal jobs oldest first, by `created_at` and then by id (whatever their
/// leases), skipping live jobs however old.
pub async fn evict_deletes_the_oldest_terminal_jobs_first(store: &dyn BatchStore) -> Check {
    job_in(store, 9, "alice", "live", JobStatus::Running, T0).await?;
    // Admitted in this order; by (created_at, id) the eviction order is 5, 3, 4, 1, and the
    // leases run the other way.
    for (n, at) in [(4, T0 + 2), (1, T0 + 3), (3, T0 + 2), (5, T0 + 1)] {
        job_in(store, n, "alice", &format!("k{n}"), JobStatus::Done, at).await?;
        assert!(store.touch(&job_id(n), T0 + 20 + i64::from(n)).await?);
    }
    let mut left = vec![5, 3, 4, 1];
    while let Some(&next) = left.first() {
        let total = store.total_bytes().await?;
        assert_eq!(store.evict(total - 1).await?, 1, "one job frees a byte");
        assert_eq!(
            store.job(&job_id(next)).await?,
            None,
            "job {next} is the oldest"
        );
        left.retain(|n| *n != next);
        for n in &left {
            assert!(
                store.job(&job_id(*n)).await?.is_some(),
                "job {n} is newer than {next}"
            );
        }
    }
    assert!(store.job(&job_id(9)).await?.is_some(), "the live job stays");
    assert_eq!(store.evict(0).await?, 0);
    Ok(())
}

/// Evict deletes just enough: it stops as soon as the total is ≤ `max_bytes` (equal is
/// enough), keeps going while it is not, and returns how many jobs it deleted.
pub async fn evict_stops_as_soon_as_the_total_fits(store: &dyn BatchStore) -> Check {
    // Oldest first, with 100, 10, 1000 and 1 bytes of result.
    let mut sizes = Vec::new();
    for (n, extra) in [(1, 100), (2, 10), (3, 1000), (4, 1)] {
        let at = T0 + i64::from(n);
        let id = job_in(store, n, "alice", &format!("k{n}"), JobStatus::Running, at).await?;
        let w = done(&"r".repeat(extra));
        assert!(
            store
                .finish_target(&id, 0, &w, T0 + 5, Some(JobStatus::Done))
                .await?
        );
        sizes.push(row(store, &id).await?.n_bytes);
    }
    let &[s1, s2, s3, s4] = sizes.as_slice() else {
        unreachable!("four jobs");
    };
    let total = s1 + s2 + s3 + s4;
    assert_eq!(store.total_bytes().await?, total);
    assert_eq!(
        store.evict(total).await?,
        0,
        "a total equal to the budget fits"
    );
    assert_eq!(
        store.evict(total - s1).await?,
        1,
        "the oldest alone is enough"
    );
    assert_eq!(store.total_bytes().await?, s2 + s3 + s4);
    assert_eq!(
        store.evict(s4 + 1).await?,
        2,
        "jobs 2 and 3 are both needed"
    );
    assert_eq!(store.job(&job_id(3)).await?, None);
    assert!(
        store.job(&job_id(4)).await?.is_some(),
        "job 4 is not needed"
    );
    assert_eq!(store.total_bytes().await?, s4);
    assert_eq!(store.evict(0).await?, 1);
    assert_eq!(store.total_bytes().await?, 0);
    assert_eq!(store.evict(0).await?, 0, "nothing left to delete");
    Ok(())
}

/// With nothing due, sweep and evict return 0 and leave every row as it was; on an empty store
/// too.
pub async fn sweep_and_evict_change_nothing_when_nothing_is_due(store: &dyn BatchStore) -> Check {
    assert_eq!(store.sweep(T0, 10).await?, 0);
    assert_eq!(store.evict(0).await?, 0);
    let a = job_in(store, 1, "alice", "k1", JobStatus::Done, T0).await?;
    let b = job_in(store, 2, "alice", "k2", JobStatus::Queued, T0).await?;
    let before = (row(store, &a).await?, row(store, &b).await?);
    let targets = (store.targets(&a).await?, store.targets(&b).await?);
    let total = store.total_bytes().await?;
    assert_eq!(store.sweep(T0 + 10, 10).await?, 0);
    assert_eq!(store.evict(total).await?, 0);
    assert_eq!((row(store, &a).await?, row(store, &b).await?), before);
    assert_eq!(
        (store.targets(&a).await?, store.targets(&b).await?),
        targets
    );
    assert_eq!(store.total_bytes().await?, total);
    Ok(())
}

/// A deleted job is gone for idempotency too: a still-reusable job that was evicted no longer
/// answers its key, and the same submit creates a new job.
pub async fn deleted_jobs_free_their_key(store: &dyn BatchStore) -> Check {
    let old = job_in(store, 1, "alice", "k", JobStatus::Done, T0).await?;
    assert_eq!(store.evict(0).await?, 1);
    assert_eq!(store.job(&old).await?, None);
    created(store, &new_job(2, "alice", "k", 1, T0 + 1), &ROOMY).await?;
    let probe = new_job(3, "alice", "k", 1, T0 + 2);
    assert_eq!(
        store.admit(&probe, &ROOMY).await?,
        Admission::Reused { id: job_id(2) }
    );
    Ok(())
}

// ---- recover ------------------------------------------------------------------------------

/// Recover sets every queued and running job `failed` with the given error and lease `now`,
/// returns how many, leaves terminal jobs untouched, and frees the caps (a recovered job is not
/// reused).
pub async fn recover_fails_every_live_job_and_frees_the_caps(store: &dyn BatchStore) -> Check {
    let caps = Caps {
        jobs_per_caller: 1,
        jobs_total: 2,
        ..ROOMY
    };
    let done_id = job_in(store, 1, "carol", "k1", JobStatus::Done, T0).await?;
    let cancelled_id = job_in(store, 2, "carol", "k2", JobStatus::Cancelled, T0).await?;
    let ended = (
        row(store, &done_id).await?,
        row(store, &cancelled_id).await?,
    );
    let queued = new_job(3, "alice", "ka", 2, T0 + 1);
    created(store, &queued, &caps).await?;
    let running = new_job(4, "bob", "kb", 2, T0 + 1);
    created(store, &running, &caps).await?;
    assert!(store.start_target(&running.id, 0, T0 + 2).await?.is_some());
    assert_eq!(
        store
            .admit(&new_job(5, "dave", "kd", 1, T0 + 3), &caps)
            .await?,
        Admission::Busy
    );

    assert_eq!(store.recover("interrupted (suite)", T0 + 50).await?, 2);
    for id in [&queued.id, &running.id] {
        let r = row(store, id).await?;
        assert_eq!(
            (r.status, r.error.as_str(), r.lease),
            (JobStatus::Failed, "interrupted (suite)", T0 + 50)
        );
    }
    let after = (
        row(store, &done_id).await?,
        row(store, &cancelled_id).await?,
    );
    assert_eq!(after, ended, "terminal jobs are untouched");
    assert_eq!(store.live_jobs(None).await?, 0);
    assert_eq!(store.live_jobs(Some("alice")).await?, 0);
    created(store, &new_job(6, "alice", "ka", 2, T0 + 51), &caps).await?;
    created(store, &new_job(7, "dave", "kd", 1, T0 + 51), &caps).await?;
    assert_eq!(store.recover("again", T0 + 52).await?, 2);
    assert_eq!(store.recover("again", T0 + 53).await?, 0);
    Ok(())
}

// ---- unknown ids --------------------------------------------------------------------------

/// Unknown ids are not errors: reads give `None` or an empty list, writes `false` or `None`.
/// A known job with an unknown target idx is the same, and such a write changes nothing.
pub async fn unknown_ids_read_as_none_and_write_false(store: &dyn BatchStore) -> Check {
    let nope = job_id(404);
    assert_eq!(store.job(&nope).await?, None);
    assert!(store.targets(&nope).await?.is_empty());
    assert_eq!(store.start_target(&nope, 0, T0).await?, None);
    assert!(
        !store
            .finish_target(&nope, 0, &done("{}"), T0, Some(JobStatus::Done))
            .await?
    );
    assert!(
        !store
            .set_status(&nope, JobStatus::Cancelled, "", T0)
            .await?
    );
    assert!(!store.touch(&nope, T0).await?);
    assert_eq!(store.live_jobs(Some("nobody")).await?, 0);

    let job = new_job(1, "alice", "k", 2, T0);
    created(store, &job, &ROOMY).await?;
    let (r, t, total) = (
        row(store, &job.id).await?,
        store.targets(&job.id).await?,
        store.total_bytes().await?,
    );
    assert_eq!(store.start_target(&job.id, 2, T0 + 1).await?, None);
    let w = done("{}");
    assert!(
        !store
            .finish_target(&job.id, 2, &w, T0 + 2, Some(JobStatus::Done))
            .await?
    );
    assert!(
        !store
            .finish_target(&job.id, usize::MAX, &w, T0 + 3, None)
            .await?
    );
    assert_eq!(
        row(store, &job.id).await?,
        r,
        "a write to no target changes nothing"
    );
    assert_eq!(store.targets(&job.id).await?, t);
    assert_eq!(store.total_bytes().await?, total);
    assert_eq!(store.job(&nope).await?, None);
    Ok(())
}

// ---- data ---------------------------------------------------------------------------------

/// Empty strings (url, options, result, error, hint) and results of a mebibyte and more are
/// stored and read back exactly, and counted in `n_bytes`: an empty result is `Some("")`, not
/// `None`.
pub async fn empty_and_mebibyte_values_round_trip(store: &dyn BatchStore) -> Check {
    let mut job = new_job(1, "alice", "k", 2, T0);
    job.targets.insert(0, (String::new(), String::new()));
    created(store, &job, &ROOMY).await?;
    let big: String = (0..(1 << 20) / 8 + 1)
        .map(|i| format!("{:07}é", i % 10_000_000))
        .collect::<String>();
    assert!(big.len() > 1 << 20);
    let writes = [done(""), done(&big), failed("", "")];
    for (idx, w) in writes.iter().enumerate() {
        assert!(store.finish_target(&job.id, idx, w, T0 + 1, None).await?);
    }
    let targets = store.targets(&job.id).await?;
    let mut want = job.rows().1;
    for (t, w) in want.iter_mut().zip(&writes) {
        t.apply(w);
    }
    assert_eq!(targets.len(), 3);
    for (got, want) in targets.iter().zip(&want) {
        assert!(
            got == want,
            "target {} differs after a round trip",
            want.idx
        );
    }
    assert_eq!(targets.first().map(|t| t.result.as_deref()), Some(Some("")));
    assert_eq!(targets.first().map(|t| t.url.as_str()), Some(""));
    assert_eq!(
        targets
            .get(1)
            .and_then(|t| t.result.as_ref())
            .map(String::len),
        Some(big.len())
    );
    let bytes = counts_agree(store, &job.id).await?;
    assert_eq!(bytes, want.iter().map(TargetRow::n_bytes).sum::<u64>());
    assert_eq!(store.total_bytes().await?, bytes);
    Ok(())
}

/// Any UTF-8 (non-ASCII, emoji, quotes, backslashes, NULs, newlines, SQL and JSON
/// metacharacters) round-trips exactly in urls, options, results, errors, hints, caller names
/// and keys; bytes count as UTF-8 bytes; a NUL never truncates (callers and keys that differ
/// only after a NUL stay apart).
pub async fn any_utf8_round_trips_exactly(store: &dyn BatchStore) -> Check {
    let odd = concat!(
        "naïve 日本語 🦀 \"dq\" 'sq' back\\slash \0nul\0 new\nline\r\n\ttab ",
        "%_* '); DROP TABLE jobs; -- {\"a\":[1]} \u{feff}\u{10ffff}"
    );
    let caller = format!("caller {odd}");
    let key = format!("key\0{odd}");
    let job = NewJob {
        id: job_id(1),
        caller: caller.clone(),
        class: CallerClass::Fleet,
        idem_key: key.clone(),
        targets: vec![
            (
                format!("https://例え.jp/{odd}"),
                format!("{{\"q\":{odd:?}}}"),
            ),
            (odd.to_owned(), odd.to_owned()),
            (odd.to_owned(), String::new()),
        ],
        now: T0,
    };
    created(store, &job, &ROOMY).await?;
    let r = row(store, &job.id).await?;
    assert_eq!(
        (r.caller.as_str(), r.idem_key.as_str()),
        (caller.as_str(), key.as_str())
    );
    assert_eq!(r.n_bytes, job.rows().0.n_bytes, "bytes are UTF-8 bytes");
    let writes = [done(odd), failed(odd, odd), failed(odd, "")];
    for (idx, w) in writes.iter().enumerate() {
        assert!(store.finish_target(&job.id, idx, w, T0 + 1, None).await?);
    }
    let mut want = job.rows().1;
    for (t, w) in want.iter_mut().zip(&writes) {
        t.apply(w);
    }
    assert_eq!(store.targets(&job.id).await?, want);
    counts_agree(store, &job.id).await?;

    // A NUL does not end a string: these callers and keys are all distinct.
    assert_eq!(store.live_jobs(Some(&caller)).await?, 1);
    assert_eq!(
        store
            .live_jobs(Some("caller naïve 日本語 🦀 \"dq\" 'sq' back\\slash "))
            .await?,
        0
    );
    let near_key = new_job(2, &caller, "key\0", 1, T0 + 2);
    created(store, &near_key, &ROOMY).await?;
    let near_caller = new_job(3, "caller naïve", &key, 1, T0 + 2);
    created(store, &near_caller, &ROOMY).await?;
    let same = new_job(4, &caller, &key, 1, T0 + 2);
    assert_eq!(
        store.admit(&same, &ROOMY).await?,
        Admission::Reused { id: job.id.clone() }
    );

    assert!(
        store
            .set_status(&job.id, JobStatus::Failed, odd, T0 + 3)
            .await?
    );
    assert_eq!(row(store, &job.id).await?.error, odd);
    assert_eq!(store.recover(&caller, T0 + 4).await?, 2);
    assert_eq!(row(store, &near_key.id).await?.error, caller);
    Ok(())
}

// ---- view ---------------------------------------------------------------------------------

/// `view` is `None` for an unknown id and for a deleted job, and otherwise exactly what `job`
/// and `targets` read when nothing writes between them: after admit, after target writes, and
/// once the job is terminal. Reading it never sets the lease.
pub async fn view_is_the_job_beside_its_targets(store: &dyn BatchStore) -> Check {
    assert_eq!(store.view(&job_id(404)).await?, None);
    let job = new_job(1, "alice", "k", 3, T0);
    created(store, &job, &ROOMY).await?;
    let id = &job.id;
    let same = |view: Option<(JobRow, Vec<TargetRow>)>, row: JobRow, targets: Vec<TargetRow>| {
        assert_eq!(view, Some((row, targets)), "view of job {id}");
    };
    same(
        store.view(id).await?,
        row(store, id).await?,
        store.targets(id).await?,
    );

    store.start_target(id, 0, T0 + 1).await?;
    assert!(
        store
            .finish_target(id, 0, &done("first"), T0 + 2, None)
            .await?
    );
    store.start_target(id, 1, T0 + 3).await?;
    let (r, t) = (row(store, id).await?, store.targets(id).await?);
    assert_eq!(store.view(id).await?.map(|(j, _)| j.lease), Some(T0 + 3));
    same(store.view(id).await?, r.clone(), t.clone());
    if let Some((j, t)) = store.view(id).await? {
        view_agrees(id, &j, &t);
        assert_eq!((j.status, j.targets_done), (JobStatus::Running, 1));
        let states: Vec<TargetState> = t.iter().map(|t| t.status).collect();
        assert_eq!(
            states,
            [
                TargetState::Done,
                TargetState::Running,
                TargetState::Pending
            ]
        );
    }

    assert!(
        store
            .finish_target(id, 1, &failed("no", "h"), T0 + 4, Some(JobStatus::Partial))
            .await?
    );
    same(
        store.view(id).await?,
        row(store, id).await?,
        store.targets(id).await?,
    );
    assert_eq!(
        store.view(id).await?.map(|(j, _)| j.status),
        Some(JobStatus::Partial)
    );
    assert_eq!(
        store
            .sweep(T0 + 4 + ROOMY.ttl_secs + 1, ROOMY.ttl_secs)
            .await?,
        1
    );
    assert_eq!(store.view(id).await?, None);
    Ok(())
}

/// A view is one moment of the store: while tasks store targets (each write moving the job's
/// `targets_done`, `n_bytes` and lease), every view read beside them has a job row that agrees
/// with its targets. A store that read the job and then the targets, with a write between,
/// would show a count that its targets do not.
pub async fn a_view_is_one_moment_while_targets_are_stored(store: Arc<dyn BatchStore>) -> Check {
    const JOBS: u32 = 4;
    const TARGETS: usize = 32;
    admit_jobs(&*store, JOBS, TARGETS).await?;
    let start = Arc::new(Barrier::new(JOBS as usize + 1));
    let mut writers = Vec::new();
    for n in 0..JOBS {
        let (store, start) = (store.clone(), start.clone());
        writers.push(tokio::spawn(async move {
            let id = job_id(n);
            start.wait().await;
            for idx in 0..TARGETS {
                let now = T0 + 1 + idx as i64;
                store.start_target(&id, idx, now).await?;
                let w = done(&"r".repeat(1 + idx * 7));
                if !store.finish_target(&id, idx, &w, now, None).await? {
                    panic!("job {id}: target {idx} not stored");
                }
                tokio::task::yield_now().await;
            }
            Ok::<(), StoreError>(())
        }));
    }
    start.wait().await;
    loop {
        let writing = writers.iter().any(|w| !w.is_finished());
        for n in 0..JOBS {
            let id = job_id(n);
            let Some((job, targets)) = store.view(&id).await? else {
                panic!("job {id}: a live job's view is None");
            };
            view_agrees(&id, &job, &targets);
        }
        if !writing {
            break;
        }
        tokio::task::yield_now().await;
    }
    for w in writers {
        joined(w).await?;
    }
    for n in 0..JOBS {
        let (job, _) = store
            .view(&job_id(n))
            .await?
            .unwrap_or_else(|| panic!("job {n}"));
        assert_eq!(job.targets_done, TARGETS);
    }
    Ok(())
}

// ---- concurrency --------------------------------------------------------------------------

/// 32 concurrent admits of one caller and key (different ids) create exactly one job; every
/// other admit is told its id.
pub async fn concurrent_admits_of_one_key_create_one_job(store: Arc<dyn BatchStore>) -> Check {
    const N: u32 = 32;
    let start = Arc::new(Barrier::new(N as usize));
    let tasks: Vec<_> = (0..N)
        .map(|n| {
            let (store, start) = (store.clone(), start.clone());
            tokio::spawn(async move {
                let job = new_job(n, "alice", "same", 2, T0);
                start.wait().await;
                store.admit(&job, &ROOMY).await.map(|a| (job.id, a))
            })
        })
        .collect();
    let mut results = Vec::new();
    for t in tasks {
        results.push(joined(t).await?);
    }
    let winners: Vec<&String> = results
        .iter()
        .filter(|(_, a)| *a == Admission::Created)
        .map(|(id, _)| id)
        .collect();
    let [winner] = winners.as_slice() else {
        panic!("exactly one admit creates the job, got {}", winners.len());
    };
    for (id, a) in &results {
        if id != *winner {
            assert_eq!(
                *a,
                Admission::Reused {
                    id: (*winner).clone()
                },
                "admit of {id}"
            );
            assert_eq!(store.job(id).await?, None);
        }
    }
    assert_eq!(store.live_jobs(None).await?, 1);
    assert_eq!(
        store.total_bytes().await?,
        row(&*store, winner).await?.n_bytes
    );
    Ok(())
}

/// 24 callers admitting at once with `jobs_total` 2 create exactly 2 jobs; the others are told
/// `Busy`.
pub async fn concurrent_admits_never_exceed_the_total_cap(store: Arc<dyn BatchStore>) -> Check {
    const N: u32 = 24;
    let caps = Caps {
        jobs_total: 2,
        jobs_per_caller: 1,
        ..ROOMY
    };
    let results = race(&store, N, caps, |n| {
        new_job(n, &format!("caller{n}"), "k", 1, T0)
    })
    .await?;
    let created = results.iter().filter(|a| **a == Admission::Created).count();
    let busy = results.iter().filter(|a| **a == Admission::Busy).count();
    assert_eq!((created, busy), (2, N as usize - 2));
    assert_eq!(store.live_jobs(None).await?, 2);
    Ok(())
}

/// 32 admits of one caller at once (different keys) with `jobs_per_caller` 3 create exactly 3
/// jobs; the others are told `CallerBusy`.
pub async fn concurrent_admits_never_exceed_the_caller_cap(store: Arc<dyn BatchStore>) -> Check {
    const N: u32 = 32;
    let caps = Caps {
        jobs_per_caller: 3,
        ..ROOMY
    };
    let results = race(&store, N, caps, |n| {
        new_job(n, "alice", &format!("k{n}"), 1, T0)
    })
    .await?;
    let created = results.iter().filter(|a| **a == Admission::Created).count();
    let busy = results
        .iter()
        .filter(|a| **a == Admission::CallerBusy)
        .count();
    assert_eq!((created, busy), (3, N as usize - 3));
    assert_eq!(store.live_jobs(Some("alice")).await?, 3);
    assert_eq!(store.live_jobs(None).await?, 3);
    Ok(())
}

/// Admits `n` jobs made by `make` from `n` tasks released at once; their admissions.
async fn race(
    store: &Arc<dyn BatchStore>,
    n: u32,
    caps: Caps,
    make: impl Fn(u32) -> NewJob,
) -> Result<Vec<Admission>, StoreError> {
    let start = Arc::new(Barrier::new(n as usize));
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            let (store, start, job) = (store.clone(), start.clone(), make(i));
            tokio::spawn(async move {
                start.wait().await;
                store.admit(&job, &caps).await
            })
        })
        .collect();
    let mut results = Vec::new();
    for t in tasks {
        results.push(joined(t).await?);
    }
    Ok(results)
}

/// Target writes to many jobs at once keep every job's `targets_done` and `n_bytes`, and the
/// total, exact.
pub async fn concurrent_writes_keep_every_count(store: Arc<dyn BatchStore>) -> Check {
    const JOBS: u32 = 8;
    const TARGETS: usize = 4;
    admit_jobs(&*store, JOBS, TARGETS).await?;
    let start = Arc::new(Barrier::new(JOBS as usize * TARGETS));
    let mut tasks = Vec::new();
    for n in 0..JOBS {
        for idx in 0..TARGETS {
            let (store, start) = (store.clone(), start.clone());
            tasks.push(tokio::spawn(async move {
                let id = job_id(n);
                start.wait().await;
                store.start_target(&id, idx, T0 + 1).await?;
                let w = if idx % 2 == 0 {
                    done(&"r".repeat(10 * (idx + 1) + n as usize))
                } else {
                    failed(&"e".repeat(idx), "h")
                };
                store.finish_target(&id, idx, &w, T0 + 2, None).await
            }));
        }
    }
    for t in tasks {
        assert!(joined(t).await?, "every target exists");
    }
    let mut total = 0;
    for n in 0..JOBS {
        let id = job_id(n);
        total += counts_agree(&*store, &id).await?;
        let r = row(&*store, &id).await?;
        assert_eq!((r.targets_done, r.status), (TARGETS, JobStatus::Running));
    }
    assert_eq!(store.total_bytes().await?, total);
    Ok(())
}

// ---- edge cases ---------------------------------------------------------------------------

/// A job id, caller or key may be any string to a store, the empty one and ones that are
/// prefixes of each other included (`""`, `"a"`, `"a\0"`, `"ab"`): each job keeps its own row and
/// targets, a write to one reaches no other, a delete takes only its own rows, and the caller and
/// key indexes keep them apart. Evict takes jobs of one `created_at` in byte order of their ids
/// (the empty id first, a prefix before what it starts, `"Z"` < `"a"` < `"é"`).
pub async fn ids_callers_and_keys_that_are_prefixes_or_empty_stay_apart(
    store: &dyn BatchStore,
) -> Check {
    let ids = ["", "a", "a\0", "ab", "Z", "é"];
    for (n, id) in ids.iter().enumerate() {
        let job = NewJob {
            id: (*id).to_owned(),
            caller: ids[n % 3].to_owned(),
            class: CallerClass::Fleet,
            idem_key: ids[n].to_owned(),
            targets: (0..=n)
                .map(|i| (format!("u{n}/{i}"), "{}".into()))
                .collect(),
            now: T0,
        };
        created(store, &job, &ROOMY).await?;
    }
    for (n, id) in ids.iter().enumerate() {
        let r = row(store, id).await?;
        assert_eq!((r.id.as_str(), r.targets_total), (*id, n + 1), "job {id:?}");
        let targets = store.targets(id).await?;
        assert_eq!(targets.len(), n + 1, "targets of job {id:?}");
        assert!(
            targets.iter().all(|t| t.url.starts_with(&format!("u{n}/"))),
            "job {id:?} holds only its own targets"
        );
        counts_agree(store, id).await?;
    }
    // Callers "", "a", "a\0" have two live jobs each; "ab" (a key and id, never a caller), none.
    for caller in ["", "a", "a\0"] {
        assert_eq!(store.live_jobs(Some(caller)).await?, 2, "caller {caller:?}");
    }
    assert_eq!(store.live_jobs(Some("ab")).await?, 0);
    // A write to "a" reaches neither "" nor "ab" nor "a\0".
    let before: Vec<JobRow> = {
        let mut v = Vec::new();
        for id in ["", "a\0", "ab"] {
            v.push(row(store, id).await?);
        }
        v
    };
    assert!(store.start_target("a", 1, T0 + 1).await?.is_some());
    assert!(
        store
            .finish_target("a", 1, &done("xyz"), T0 + 2, Some(JobStatus::Done))
            .await?
    );
    for (id, was) in ["", "a\0", "ab"].iter().zip(&before) {
        assert_eq!(&row(store, id).await?, was, "job {id:?} untouched");
    }
    // Reuse by an empty caller and an empty key.
    let probe = NewJob {
        id: "probe".into(),
        caller: String::new(),
        class: CallerClass::Fleet,
        idem_key: String::new(),
        targets: vec![("u".into(), "{}".into())],
        now: T0 + 3,
    };
    assert_eq!(
        store.admit(&probe, &ROOMY).await?,
        Admission::Reused { id: String::new() }
    );
    // Every job ended at one created_at: evict goes by id, in byte order.
    for id in ids {
        store.set_status(id, JobStatus::Failed, "", T0 + 4).await?;
    }
    let mut order = ids.to_vec();
    order.sort_unstable();
    assert_eq!(order, ["", "Z", "a", "a\0", "ab", "é"]);
    while let Some(next) = order.first().copied() {
        let total = store.total_bytes().await?;
        let own = row(store, next).await?.n_bytes;
        assert_eq!(store.evict(total - 1).await?, 1, "evicting {next:?}");
        assert_eq!(store.job(next).await?, None, "job {next:?} is the oldest");
        assert!(
            store.targets(next).await?.is_empty(),
            "{next:?}'s targets go"
        );
        assert_eq!(store.total_bytes().await?, total - own);
        order.remove(0);
        for id in &order {
            counts_agree(store, id).await?;
        }
    }
    assert_eq!(store.total_bytes().await?, 0);
    Ok(())
}

/// A reuse window of 0 reuses only a job whose lease is later than now (a clock gone back); a
/// negative one, only a lease more than that far ahead. A sweep with ttl 0 deletes the terminal
/// jobs whose lease is before now; with a negative ttl, also those whose lease is up to that far
/// ahead of now (`lease < now - ttl`), never a live one.
pub async fn ttl_zero_and_negative_reuse_and_sweep_by_the_same_rule(
    store: &dyn BatchStore,
) -> Check {
    // (job, lease, probe now, ttl, reused?)
    let cases = [
        (1, T0, T0, 0, false),
        (2, T0 + 1, T0, 0, true),
        (3, T0 + 5, T0, -5, false),
        (4, T0 + 6, T0, -5, true),
        (5, T0, T0 + 1, 0, false),
    ];
    for (n, lease, at, ttl, reused) in cases {
        let key = format!("k{n}");
        let id = job_in(store, n, "alice", &key, JobStatus::Done, lease).await?;
        let probe = new_job(n + 10, "alice", &key, 1, at);
        let caps = Caps {
            ttl_secs: ttl,
            ..ROOMY
        };
        let want = if reused {
            Admission::Reused { id }
        } else {
            Admission::Created
        };
        assert_eq!(
            store.admit(&probe, &caps).await?,
            want,
            "lease {lease}, now {at}, ttl {ttl}"
        );
    }
    // Jobs 1..=5 are done (leases T0, T0+1, T0+5, T0+6, T0); 11, 15 were created queued at T0
    // and T0+1, 13 at T0. Sweep at T0 with ttl 0: none is before T0.
    assert_eq!(store.sweep(T0, 0).await?, 0);
    // ttl 0 at T0+1: the done jobs of lease T0 (1 and 5).
    assert_eq!(store.sweep(T0 + 1, 0).await?, 2);
    for (n, there) in [(1, false), (5, false), (2, true), (3, true), (4, true)] {
        assert_eq!(store.job(&job_id(n)).await?.is_some(), there, "job {n}");
    }
    // ttl -5 at T0+1: cutoff T0+6, so leases T0+1 and T0+5 go, T0+6 stays.
    assert_eq!(store.sweep(T0 + 1, -5).await?, 2);
    assert!(store.job(&job_id(4)).await?.is_some());
    // Live jobs are never swept, whatever the ttl.
    assert_eq!(store.sweep(T0, i64::MIN).await?, 1, "job 4, of lease T0+6");
    for n in [11, 13, 15] {
        assert_eq!(
            store.job(&job_id(n)).await?.map(|j| j.status),
            Some(JobStatus::Queued)
        );
    }
    let mut live_bytes = 0;
    for n in [11, 13, 15] {
        live_bytes += counts_agree(store, &job_id(n)).await?;
    }
    assert_eq!(store.total_bytes().await?, live_bytes);
    Ok(())
}

/// Times at the ends of `i64` round-trip (created_at, lease), order evict and sweep as numbers
/// (negative before positive), and the windows saturate instead of wrapping: a sweep at
/// `i64::MIN` deletes nothing whatever the (positive) ttl, one at `i64::MAX` with ttl 0 every
/// terminal job but one leased at `i64::MAX`, and a job leased at `i64::MIN` is never reused at
/// `i64::MAX` (its age saturates at `i64::MAX`, not below any window).
pub async fn times_at_the_ends_of_i64_round_trip_and_order_as_numbers(
    store: &dyn BatchStore,
) -> Check {
    let times = [i64::MAX, -1, i64::MIN, 0, i64::MIN + 1, i64::MAX - 1];
    for (n, &at) in times.iter().enumerate() {
        let id = job_in(
            store,
            n as u32,
            "alice",
            &format!("k{n}"),
            JobStatus::Done,
            at,
        )
        .await?;
        let r = row(store, &id).await?;
        assert_eq!((r.created_at, r.lease), (at, at), "job {n}");
    }
    // Reuse: a job leased at i64::MIN is not reusable at i64::MAX with the widest window.
    let caps = Caps {
        ttl_secs: i64::MAX,
        ..ROOMY
    };
    let probe = new_job(20, "alice", "k2", 1, i64::MAX);
    assert_eq!(store.admit(&probe, &caps).await?, Admission::Created);
    assert!(
        store
            .set_status(&probe.id, JobStatus::Done, "", i64::MAX)
            .await?
    );
    // ... and one leased at i64::MAX is, at i64::MIN (a clock gone back), with any window > 0 ...
    let probe = new_job(21, "alice", "k0", 1, i64::MIN);
    assert_eq!(
        store
            .admit(
                &probe,
                &Caps {
                    ttl_secs: 1,
                    ..ROOMY
                }
            )
            .await?,
        Admission::Reused { id: job_id(0) }
    );
    // Sweeps whose cutoff saturates at the bottom delete nothing.
    assert_eq!(store.sweep(i64::MIN, 1).await?, 0);
    assert_eq!(store.sweep(i64::MIN, i64::MAX).await?, 0);
    // ttl i64::MIN at i64::MIN: a cutoff of 0, the jobs leased at i64::MIN, i64::MIN + 1, -1.
    assert_eq!(store.sweep(i64::MIN, i64::MIN).await?, 3);
    for (n, &at) in times.iter().enumerate() {
        assert_eq!(
            store.job(&job_id(n as u32)).await?.is_some(),
            at >= 0,
            "job {n} at {at}"
        );
    }
    // Evict order by created_at: 0 (job 3), then i64::MAX - 1 (job 5), then the two at
    // i64::MAX by id (jobs 0 and 20).
    for gone in [3, 5, 0, 20] {
        let total = store.total_bytes().await?;
        assert_eq!(store.evict(total - 1).await?, 1);
        assert_eq!(store.job(&job_id(gone)).await?, None, "job {gone} next");
    }
    // Sweep at i64::MAX with ttl 0 takes every terminal job but one leased at i64::MAX.
    let a = job_in(store, 30, "bob", "a", JobStatus::Done, i64::MAX).await?;
    let b = job_in(store, 31, "bob", "b", JobStatus::Done, i64::MAX - 1).await?;
    assert_eq!(store.sweep(i64::MAX, 0).await?, 1);
    assert!(store.job(&a).await?.is_some());
    assert_eq!(store.job(&b).await?, None);
    assert_eq!(store.total_bytes().await?, counts_agree(store, &a).await?);
    Ok(())
}

/// A clock gone back: a write at a `now` earlier than the lease sets the lease back to it (the
/// lease is the last activity's time, not the latest time), and sweep and reuse then count
/// from that earlier lease. Each kind of write is checked alone, right after a sweep that found
/// nothing due at the later lease, so a store that skips a sweep by a kept bound on the oldest
/// lease must lower that bound on every one of them.
pub async fn a_write_at_an_earlier_now_sets_the_lease_back(store: &dyn BatchStore) -> Check {
    let kinds = [
        "touch",
        "finish_target",
        "start_target",
        "set_status",
        "recover",
    ];
    for (n, what) in (1..).zip(kinds) {
        let key = format!("k{n}");
        let id = match what {
            "set_status" => job_in(store, n, "alice", &key, JobStatus::Running, T0 + 100).await?,
            "recover" => job_in(store, n, "alice", &key, JobStatus::Queued, T0 + 100).await?,
            _ => job_in(store, n, "alice", &key, JobStatus::Done, T0 + 100).await?,
        };
        assert_eq!(
            store.sweep(T0 + 50, 10).await?,
            0,
            "{what}: nothing due yet"
        );
        match what {
            "touch" => assert!(store.touch(&id, T0 + 10).await?),
            "finish_target" => assert!(
                store
                    .finish_target(&id, 0, &done("{}"), T0 + 10, None)
                    .await?
            ),
            "start_target" => assert!(store.start_target(&id, 0, T0 + 10).await?.is_some()),
            "set_status" => assert!(
                store
                    .set_status(&id, JobStatus::Partial, "", T0 + 10)
                    .await?
            ),
            _ => assert_eq!(store.recover("interrupted", T0 + 10).await?, 1),
        }
        assert_eq!(row(store, &id).await?.lease, T0 + 10, "{what}");
        // Cutoff T0 + 40: the job, leased at T0 + 10 now, is due.
        assert_eq!(
            store.sweep(T0 + 50, 10).await?,
            1,
            "{what}: due at its new lease"
        );
        assert_eq!(store.job(&id).await?, None, "{what}");
    }
    // Reuse counted from the earlier lease: at T0 + 19 (age 9) yes, at T0 + 20 no.
    let caps = Caps {
        ttl_secs: 10,
        ..ROOMY
    };
    for (n, at, reused) in [(10, T0 + 19, true), (11, T0 + 20, false)] {
        let key = format!("r{n}");
        let id = job_in(store, n, "alice", &key, JobStatus::Done, T0 + 100).await?;
        assert!(store.touch(&id, T0 + 10).await?);
        let probe = new_job(n + 10, "alice", &key, 1, at);
        let want = if reused {
            Admission::Reused { id }
        } else {
            Admission::Created
        };
        assert_eq!(store.admit(&probe, &caps).await?, want, "probe at {at}");
    }
    Ok(())
}

/// Of several reusable jobs of one caller and key created at the same second, admit answers
/// the one of the greatest id (the order evict takes them in, reversed): every backend the
/// same, though SPEC only says "the most recently created".
pub async fn reuse_among_jobs_created_at_the_same_second_takes_the_greatest_id(
    store: &dyn BatchStore,
) -> Check {
    // ttl 0 reuses only a lease after now: each admit at T0 creates, then touches make all
    // reusable.
    let caps = Caps {
        ttl_secs: 0,
        ..ROOMY
    };
    for n in [5, 9, 2] {
        created(store, &new_job(n, "alice", "k", 1, T0), &caps).await?;
        assert!(
            store
                .set_status(&job_id(n), JobStatus::Done, "", T0)
                .await?
        );
    }
    for n in [5, 9, 2] {
        assert!(store.touch(&job_id(n), T0 + 1).await?);
    }
    let probe = new_job(7, "alice", "k", 1, T0);
    assert_eq!(
        store.admit(&probe, &caps).await?,
        Admission::Reused { id: job_id(9) }
    );
    Ok(())
}

/// A job of no targets is a job to a store (the runner refuses it before, SPEC §3 step 1): it
/// is stored queued with no target rows and 0 bytes, read back by `view`, capped by
/// `targets_per_job` 0 only when it has more, counted live until it ends, and deleted by sweep.
pub async fn a_job_of_no_targets_is_stored_and_ended_like_any_other(
    store: &dyn BatchStore,
) -> Check {
    let caps = Caps {
        targets_per_job: 0,
        ..ROOMY
    };
    let empty = new_job(1, "alice", "k", 0, T0);
    created(store, &empty, &caps).await?;
    assert_eq!(
        store
            .admit(&new_job(2, "alice", "k2", 1, T0), &caps)
            .await?,
        Admission::TooManyTargets { max: 0, got: 1 }
    );
    let r = row(store, &empty.id).await?;
    assert_eq!(
        (r.status, r.targets_total, r.targets_done, r.n_bytes),
        (JobStatus::Queued, 0, 0, 0)
    );
    assert_eq!(store.view(&empty.id).await?, Some((r, Vec::new())));
    assert_eq!(store.start_target(&empty.id, 0, T0 + 1).await?, None);
    assert_eq!(store.live_jobs(Some("alice")).await?, 1);
    assert_eq!(store.total_bytes().await?, 0);
    assert!(
        store
            .set_status(&empty.id, JobStatus::Done, "", T0 + 2)
            .await?
    );
    assert_eq!(store.live_jobs(None).await?, 0);
    assert_eq!(store.evict(0).await?, 0, "a total of 0 already fits");
    assert_eq!(store.sweep(T0 + 200, 100).await?, 1);
    assert_eq!(store.view(&empty.id).await?, None);
    Ok(())
}

/// With the default cap of 32 targets, a job of exactly 32 is stored with its targets read back
/// in numeric idx order (10 after 9, not after 1), each written to by its own idx; one of 33 is
/// refused with `{ max: 32, got: 33 }`.
pub async fn a_job_of_32_targets_is_stored_in_idx_order_and_33_are_refused(
    store: &dyn BatchStore,
) -> Check {
    let caps = Caps {
        targets_per_job: 32,
        ..ROOMY
    };
    let job = new_job(1, "alice", "k", 32, T0);
    created(store, &job, &caps).await?;
    assert_eq!(
        store
            .admit(&new_job(2, "alice", "k2", 33, T0), &caps)
            .await?,
        Admission::TooManyTargets { max: 32, got: 33 }
    );
    for idx in (0..32).rev() {
        let w = done(&"r".repeat(idx));
        assert!(store.finish_target(&job.id, idx, &w, T0 + 1, None).await?);
    }
    let targets = store.targets(&job.id).await?;
    assert_eq!(
        targets.iter().map(|t| t.idx).collect::<Vec<_>>(),
        (0..32).collect::<Vec<_>>()
    );
    for t in &targets {
        assert_eq!(t.url, format!("https://example.com/1/{}", t.idx));
        assert_eq!(t.result.as_deref().map(str::len), Some(t.idx));
    }
    assert_eq!(store.start_target(&job.id, 32, T0 + 2).await?, None);
    assert_eq!(row(store, &job.id).await?.targets_done, 32);
    counts_agree(store, &job.id).await?;
    Ok(())
}

/// Starting a target twice leaves it running, counted once (no result, no done), and moves the
/// lease each time; finishing a target that was never started (pending) stores it as any other;
/// finishing it again replaces the outcome and its bytes, still counted once.
pub async fn start_twice_and_finish_of_a_target_not_running(store: &dyn BatchStore) -> Check {
    let job = new_job(1, "alice", "k", 2, T0);
    created(store, &job, &ROOMY).await?;
    let id = job.id.as_str();
    let first = store.start_target(id, 0, T0 + 1).await?;
    let second = store.start_target(id, 0, T0 + 2).await?;
    assert_eq!(first, second, "the same row both times");
    let r = row(store, id).await?;
    assert_eq!(
        (r.status, r.lease, r.targets_done),
        (JobStatus::Running, T0 + 2, 0)
    );
    // Target 1 was never started.
    assert!(
        store
            .finish_target(id, 1, &done(&"x".repeat(50)), T0 + 3, None)
            .await?
    );
    assert!(
        store
            .finish_target(id, 1, &failed("gone", "retry"), T0 + 4, None)
            .await?
    );
    let targets = store.targets(id).await?;
    assert_eq!(
        targets
            .get(1)
            .map(|t| (t.status, t.result.clone(), t.error.as_str())),
        Some((TargetState::Failed, None, "gone"))
    );
    let r = row(store, id).await?;
    assert_eq!((r.targets_done, r.lease), (1, T0 + 4));
    let bytes = counts_agree(store, id).await?;
    assert_eq!(store.total_bytes().await?, bytes);
    Ok(())
}

/// `finish_target` with a `finish` status while other targets are still pending ends the job
/// all the same (the store takes the runner's word): those targets stay pending and uncounted,
/// the caller's live count drops, and the job then goes with every one of its targets.
pub async fn finish_with_targets_still_pending_ends_the_job(store: &dyn BatchStore) -> Check {
    let caps = Caps {
        jobs_per_caller: 1,
        ..ROOMY
    };
    let job = new_job(1, "alice", "k", 3, T0);
    created(store, &job, &caps).await?;
    assert!(store.start_target(&job.id, 0, T0 + 1).await?.is_some());
    assert!(
        store
            .finish_target(&job.id, 0, &done("{}"), T0 + 2, Some(JobStatus::Partial))
            .await?
    );
    let r = row(store, &job.id).await?;
    assert_eq!(
        (r.status, r.targets_done, r.targets_total),
        (JobStatus::Partial, 1, 3)
    );
    let states: Vec<TargetState> = store
        .targets(&job.id)
        .await?
        .iter()
        .map(|t| t.status)
        .collect();
    assert_eq!(
        states,
        [
            TargetState::Done,
            TargetState::Pending,
            TargetState::Pending
        ]
    );
    assert_eq!(store.live_jobs(Some("alice")).await?, 0);
    created(store, &new_job(2, "alice", "k2", 1, T0 + 3), &caps).await?;
    assert_eq!(store.evict(0).await?, 1);
    assert_eq!(store.job(&job.id).await?, None);
    assert!(store.targets(&job.id).await?.is_empty());
    assert_eq!(
        store.total_bytes().await?,
        counts_agree(store, &job_id(2)).await?
    );
    Ok(())
}

/// Writes to an ended job (a late target, a start, a touch, a refused `finish`, recovery) never
/// count it live again, for its caller or in all, and never free or take another's slot.
pub async fn writes_to_an_ended_job_never_count_it_live_again(store: &dyn BatchStore) -> Check {
    use JobStatus::*;
    let mut n = 0;
    for end in [Done, Partial, Failed, Cancelled] {
        n += 1;
        let id = job_in(store, n, "alice", &format!("k{n}"), Running, T0).await?;
        assert!(store.set_status(&id, end, "", T0 + 1).await?);
        assert!(store.start_target(&id, 0, T0 + 2).await?.is_some());
        assert!(
            store
                .finish_target(&id, 0, &TargetWrite::Pending, T0 + 3, Some(Running))
                .await?
        );
        assert!(store.touch(&id, T0 + 4).await?);
        assert_eq!(store.recover("interrupted", T0 + 5).await?, 0);
        assert_eq!(row(store, &id).await?.status, end);
        assert_eq!(store.live_jobs(Some("alice")).await?, 0, "after {end}");
        assert_eq!(store.live_jobs(None).await?, 0, "after {end}");
    }
    let caps = Caps {
        jobs_per_caller: 1,
        jobs_total: 1,
        ..ROOMY
    };
    created(store, &new_job(10, "alice", "new", 1, T0 + 6), &caps).await?;
    assert_eq!(
        store
            .admit(&new_job(11, "bob", "new", 1, T0 + 6), &caps)
            .await?,
        Admission::Busy
    );
    Ok(())
}
