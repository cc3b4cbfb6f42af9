//! The runner behaviour suite (`rota_tests::runner`) on [`MemoryStore`].

use std::sync::Arc;

use rota_store_memory::MemoryStore;

rota_tests::runner_tests!(sync || (Arc::new(MemoryStore::new()), ()));

/// `Runner::start` on a tokio runtime built without timers is refused with an error that says
/// so (a worker sleeps until a busy target is due again, which would panic there).
#[test]
fn start_refuses_a_runtime_without_timers() -> rota_tests::runner::TestResult {
    use rota::{Config, Runner};
    use rota_tests::runner::Probe;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .build()?;
    let got = rt.block_on(Runner::start(
        Arc::new(MemoryStore::new()),
        Probe::new(),
        Config::default(),
    ));
    let Err(err) = got else {
        return Err("a runtime without timers was accepted".into());
    };
    assert!(err.to_string().contains("no timers"), "{err}");
    Ok(())
}
