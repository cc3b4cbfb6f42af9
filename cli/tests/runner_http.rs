//! The built-in fetcher driven by a real `Runner` (memory store) against a loopback server:
//! what a busy page does to a job.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use rota::{Caller, CallerClass, Config, JobStatus, JobView, Options, Runner, Target, TargetState};
use rota_cli::http::HttpFetch;
use rota_store_memory::MemoryStore;

fn target(url: String) -> Target {
    Target {
        url,
        options: Options::default(),
    }
}

async fn run_job(cfg: Config, targets: Vec<Target>) -> JobView {
    let fetch = HttpFetch::new(common::loopback()).unwrap();
    let runner = Runner::start(Arc::new(MemoryStore::new()), fetch, cfg)
        .await
        .unwrap();
    let caller = Caller {
        name: "tester".into(),
        ..Caller::default()
    };
    let job = runner
        .submit(caller, CallerClass::Fleet, targets)
        .await
        .unwrap();
    // Generous: the jobs below need well under a second.
    for _ in 0..600 {
        let view = runner.status(&job.id).await.unwrap().unwrap();
        if view.job.status.is_terminal() {
            runner.close().await;
            return view;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("job {} did not finish in 30 s", job.id);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_busy_twice_is_retried_and_its_job_ends_done() {
    let s = common::start().await;
    let cfg = Config {
        retry_wait: Duration::from_millis(50),
        ..Config::default()
    };
    let view = run_job(cfg, vec![target(s.url("/busy/a/2")), target(s.url("/ok"))]).await;
    assert_eq!(view.job.status, JobStatus::Done);
    assert_eq!(view.targets[0].result.as_ref().unwrap().content, "fine a");
    assert_eq!(s.hits("busy/a"), 3, "two busy answers, then the page");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_busy_for_longer_than_retry_for_fails_with_the_busy_status() {
    let s = common::start().await;
    let cfg = Config {
        retry_wait: Duration::from_millis(50),
        retry_for: Duration::from_millis(300),
        ..Config::default()
    };
    let view = run_job(
        cfg,
        vec![target(s.url("/always-busy")), target(s.url("/ok"))],
    )
    .await;
    assert_eq!(view.job.status, JobStatus::Partial);
    let busy = &view.targets[0];
    assert_eq!(busy.status, TargetState::Failed);
    assert_eq!(busy.error, "HTTP 503 Service Unavailable");
    assert_eq!(view.targets[1].status, TargetState::Done);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stored_failures_keep_the_fetchers_message_and_hint() {
    let s = common::start().await;
    let jq = Target {
        url: s.url("/ok"),
        options: Options {
            jq: ".a".into(),
            ..Options::default()
        },
    };
    let view = run_job(Config::default(), vec![target(s.url("/status/404")), jq]).await;
    assert_eq!(view.job.status, JobStatus::Failed);
    assert_eq!(view.targets[0].error, "HTTP 404 Not Found");
    assert!(view.targets[0].hint.contains("check the URL"));
    assert_eq!(
        view.targets[1].error,
        "option jq is not supported by the built-in fetcher"
    );
    assert!(view.targets[1].hint.contains("jq"));
}
