//! What the crate's own test modules share: caps, a job, and a runtime to wait on a store call.

use rota_core::{CallerClass, Caps, NewJob};

/// Caps no test here reaches.
pub(crate) const CAPS: Caps = Caps {
    targets_per_job: 8,
    jobs_per_caller: 1000,
    jobs_total: 1000,
    ttl_secs: 100,
};

/// A job of one target for alice, of id `id`, created at 10.
pub(crate) fn job(id: &str) -> NewJob {
    NewJob {
        id: id.into(),
        caller: "alice".into(),
        class: CallerClass::Fleet,
        idem_key: format!("key-{id}"),
        targets: vec![("u0".into(), "{}".into())],
        now: 10,
    }
}

/// [`job`] of the id that is `n` in 32 hex digits.
pub(crate) fn job_n(n: usize) -> NewJob {
    job(&format!("{n:032x}"))
}

/// Runs `f` to its end on a runtime of its own.
pub(crate) fn block_on<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(f)
}
