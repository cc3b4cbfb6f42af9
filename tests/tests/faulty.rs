//! [`FaultyStore`] itself: it fails what it is told to, when it is told to, and nothing else.

use std::sync::Arc;

use rota_core::{Admission, BatchStore, JobStatus, StoreError, TargetState, TargetWrite};
use rota_store_memory::MemoryStore;
use rota_tests::conformance::{ROOMY, T0, job_id, new_job};
use rota_tests::faulty::{FaultyStore, Op, STORE_PANIC_VALUE, Timing, is_injected};

fn faulty() -> FaultyStore<MemoryStore> {
    FaultyStore::new(MemoryStore::new())
}

fn must_fail<T: std::fmt::Debug>(got: Result<T, StoreError>, op: Op) {
    match got {
        Err(e) => {
            assert!(is_injected(&e), "{op}: not an injected error: {e}");
            assert!(e.to_string().contains(op.as_str()), "{op}: {e}");
        }
        Ok(v) => panic!("{op} should have failed, got {v:?}"),
    }
}

/// With no fault set, the wrapper is the wrapped store: it passes the whole suite.
mod transparent {
    use super::*;
    rota_tests::conformance_tests!(sync || (Arc::new(faulty()), ()));
}

#[tokio::test]
async fn a_chosen_operation_fails_without_effect_until_healed() -> Result<(), StoreError> {
    let store = faulty();
    let job = new_job(1, "alice", "k", 1, T0);
    assert_eq!(store.admit(&job, &ROOMY).await?, Admission::Created);
    store.fail(Op::FinishTarget);
    assert!(store.is_failing(Op::FinishTarget) && !store.is_failing(Op::StartTarget));
    let w = TargetWrite::Done {
        result: "{}".into(),
    };
    must_fail(
        store
            .finish_target(&job.id, 0, &w, T0 + 1, Some(JobStatus::Done))
            .await,
        Op::FinishTarget,
    );
    let row = store.inner().job(&job.id).await?;
    assert_eq!(
        row.map(|r| (r.status, r.targets_done, r.lease)),
        Some((JobStatus::Queued, 0, T0))
    );
    assert!(
        store.start_target(&job.id, 0, T0 + 2).await?.is_some(),
        "other ops work"
    );
    store.heal(Op::FinishTarget);
    assert!(
        store
            .finish_target(&job.id, 0, &w, T0 + 3, Some(JobStatus::Done))
            .await?
    );
    assert_eq!(
        store.job(&job.id).await?.map(|r| r.status),
        Some(JobStatus::Done)
    );
    assert_eq!(store.injected(), 1);
    Ok(())
}

#[tokio::test]
async fn one_jobs_status_writes_fail_without_effect_and_no_others_until_healed()
-> Result<(), StoreError> {
    let store = faulty();
    let (a, b) = (
        new_job(1, "alice", "k", 1, T0),
        new_job(2, "bob", "k", 1, T0),
    );
    for j in [&a, &b] {
        assert_eq!(store.admit(j, &ROOMY).await?, Admission::Created);
    }
    store.fail_status_writes_of(&a.id);
    must_fail(
        store
            .set_status(&a.id, JobStatus::Cancelled, "", T0 + 1)
            .await,
        Op::SetStatus,
    );
    assert_eq!(
        store.inner().job(&a.id).await?.map(|r| (r.status, r.lease)),
        Some((JobStatus::Queued, T0))
    );
    assert!(store.touch(&a.id, T0 + 2).await?, "a's other ops work");
    assert!(
        store
            .set_status(&b.id, JobStatus::Cancelled, "", T0 + 3)
            .await?,
        "b's status writes work"
    );
    assert_eq!((store.calls(), store.injected()), (5, 1));
    store.heal_all();
    assert!(
        store
            .set_status(&a.id, JobStatus::Cancelled, "", T0 + 4)
            .await?
    );
    for j in [&a, &b] {
        assert_eq!(
            store.job(&j.id).await?.map(|r| r.status),
            Some(JobStatus::Cancelled)
        );
    }
    Ok(())
}

#[tokio::test]
async fn every_operation_can_be_failed() -> Result<(), StoreError> {
    let store = faulty();
    for &op in Op::ALL {
        store.fail(op);
    }
    let id = job_id(1);
    let w = TargetWrite::Pending;
    must_fail(
        store.admit(&new_job(1, "a", "k", 1, T0), &ROOMY).await,
        Op::Admit,
    );
    must_fail(store.job(&id).await, Op::Job);
    must_fail(store.targets(&id).await, Op::Targets);
    must_fail(store.view(&id).await, Op::View);
    must_fail(store.start_target(&id, 0, T0).await, Op::StartTarget);
    must_fail(
        store.finish_target(&id, 0, &w, T0, None).await,
        Op::FinishTarget,
    );
    must_fail(
        store.set_status(&id, JobStatus::Done, "", T0).await,
        Op::SetStatus,
    );
    must_fail(store.touch(&id, T0).await, Op::Touch);
    must_fail(store.sweep(T0, 1).await, Op::Sweep);
    must_fail(store.evict(0).await, Op::Evict);
    must_fail(store.recover("x", T0).await, Op::Recover);
    must_fail(store.live_jobs(None).await, Op::LiveJobs);
    must_fail(store.total_bytes().await, Op::TotalBytes);
    assert_eq!((store.calls(), store.injected()), (13, 13));
    assert_eq!(
        store.inner().total_bytes().await?,
        0,
        "the failed admit stored nothing"
    );
    store.heal_all();
    assert_eq!(store.total_bytes().await?, 0);
    Ok(())
}

#[tokio::test]
async fn a_countdown_lets_n_calls_through_then_fails_everything() -> Result<(), StoreError> {
    let store = faulty();
    store.fail_after(3);
    assert_eq!(
        store.admit(&new_job(1, "a", "k", 1, T0), &ROOMY).await?,
        Admission::Created
    );
    assert!(store.touch(&job_id(1), T0 + 1).await?);
    assert_eq!(store.live_jobs(None).await?, 1);
    must_fail(store.total_bytes().await, Op::TotalBytes);
    must_fail(store.job(&job_id(1)).await, Op::Job);
    must_fail(store.touch(&job_id(1), T0 + 2).await, Op::Touch);
    assert_eq!(
        store.inner().job(&job_id(1)).await?.map(|r| r.lease),
        Some(T0 + 1)
    );
    store.heal_all();
    assert!(store.touch(&job_id(1), T0 + 3).await?);
    assert_eq!((store.calls(), store.injected()), (7, 3));
    store.fail_after(0);
    must_fail(store.live_jobs(None).await, Op::LiveJobs);
    Ok(())
}

#[tokio::test]
async fn a_late_fault_keeps_the_write_but_loses_the_answer() -> Result<(), StoreError> {
    let store = faulty();
    store.set_timing(Timing::After);
    store.fail(Op::Admit);
    let job = new_job(1, "alice", "k", 1, T0);
    must_fail(store.admit(&job, &ROOMY).await, Op::Admit);
    assert_eq!(
        store.inner().job(&job.id).await?.map(|r| r.status),
        Some(JobStatus::Queued)
    );
    store.heal(Op::Admit);
    let again = new_job(2, "alice", "k", 1, T0 + 1);
    assert_eq!(
        store.admit(&again, &ROOMY).await?,
        Admission::Reused { id: job.id }
    );
    Ok(())
}

#[tokio::test]
async fn it_wraps_a_shared_dyn_store_and_shows_its_switches() -> Result<(), StoreError> {
    let shared: Arc<dyn BatchStore> = Arc::new(MemoryStore::new());
    let store = FaultyStore::<dyn BatchStore>::from_arc(shared.clone());
    store.fail(Op::Admit);
    store.fail_after(5);
    must_fail(
        store.admit(&new_job(1, "a", "k", 1, T0), &ROOMY).await,
        Op::Admit,
    );
    assert_eq!(
        format!("{store:?}"),
        concat!(
            "FaultyStore { failing: [Admit], panicking: [], countdown: Some(5), late: false, calls: 1, ",
            "injected: 1, status_fails_of: [], .. }"
        )
    );
    assert_eq!(
        shared.admit(&new_job(1, "a", "k", 1, T0), &ROOMY).await?,
        Admission::Created
    );
    store.heal(Op::Admit);
    assert_eq!(
        store.live_jobs(None).await?,
        1,
        "both handles reach one store"
    );
    Ok(())
}

#[tokio::test]
async fn faults_switch_at_runtime_through_a_shared_handle() -> Result<(), StoreError> {
    let store = Arc::new(faulty());
    let switch = store.clone();
    let flip = tokio::spawn(async move { switch.fail(Op::LiveJobs) });
    if let Err(e) = flip.await {
        panic!("switching task failed: {e}");
    }
    must_fail(store.live_jobs(None).await, Op::LiveJobs);
    let switch = store.clone();
    let heal = tokio::spawn(async move { switch.heal(Op::LiveJobs) });
    if let Err(e) = heal.await {
        panic!("switching task failed: {e}");
    }
    assert_eq!(store.live_jobs(None).await?, 0);
    Ok(())
}

/// `panic_on` makes the chosen operation panic when its future is polled (with the secret
/// value), not when it is called, and changes nothing stored; `heal` ends it.
#[tokio::test]
async fn a_chosen_operation_panics_when_polled_until_healed() -> Result<(), StoreError> {
    let store = Arc::new(faulty());
    let job = new_job(1, "alice", "k", 1, T0);
    assert_eq!(store.admit(&job, &ROOMY).await?, Admission::Created);
    store.panic_on(Op::StartTarget);
    // Made here, panicking only once polled in the task.
    let call = {
        let (store, id) = (store.clone(), job.id.clone());
        async move { store.start_target(&id, 0, T0).await.map(drop) }
    };
    let got = tokio::spawn(call).await;
    let value = got
        .err()
        .filter(|e| e.is_panic())
        .and_then(|e| e.into_panic().downcast::<String>().ok());
    assert_eq!(
        value.as_deref().map(String::as_str),
        Some(format!("{STORE_PANIC_VALUE} start_target").as_str())
    );
    assert_eq!(store.injected(), 1);
    let rows = store.inner().targets(&job.id).await?;
    assert_eq!(rows.first().map(|t| t.status), Some(TargetState::Pending));
    store.heal(Op::StartTarget);
    assert!(store.start_target(&job.id, 0, T0).await?.is_some());
    Ok(())
}
