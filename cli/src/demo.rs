//! `rota demo`: two jobs of two callers, fetched from a loopback server inside the process.
//!
//! Everything it prints goes to stdout, the demo's own loopback URLs included (they are the
//! demo's output, not logs: tracing still never sees a URL).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use axum::Router;
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use rota::{
    Caller, CallerClass, CancellationToken, Config, Fetch, FetchError, JobStatus, Options, Runner,
    Target, TargetResult, TargetState,
};

use crate::cli::DemoArgs;
use crate::http::{HttpConfig, HttpFetch};
use crate::progress::{Signals, WakeHooks};
use crate::store_url::StoreUrl;

/// How long the demo's slow page takes to answer.
const SLOW_PAGE: Duration = Duration::from_secs(3);
/// The demo fetcher's default timeout: shorter than [`SLOW_PAGE`].
const DEMO_TIMEOUT: Duration = Duration::from_secs(1);
/// The demo runner's default pause before a busy target is tried again.
const DEMO_RETRY_WAIT: Duration = Duration::from_millis(200);
/// How many times `/busy` answers 503 before it answers 200 (the intro says "twice").
const BUSY_TIMES: usize = 2;

/// The demo's loopback server: `/articles/{n}` (200), `/busy` (503 twice, then 200),
/// `/missing` (404) and `/slow` (200 after 3 s).
pub async fn serve() -> Result<SocketAddr, String> {
    let busy = Arc::new(AtomicUsize::new(0));
    let app = Router::new()
        .route("/articles/{n}", get(article))
        .route("/busy", get(busy_page))
        .route(
            "/missing",
            get(|| async { (StatusCode::NOT_FOUND, "no such page") }),
        )
        .route(
            "/slow",
            get(|| async {
                tokio::time::sleep(SLOW_PAGE).await;
                "slow, but here"
            }),
        )
        .with_state(busy);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| format!("starting the demo server on 127.0.0.1: {e}"))?;
    let addr = listener
        .local_addr()
        .map_err(|e| format!("starting the demo server: {e}"))?;
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::warn!(error = %e, "demo server stopped");
        }
    });
    Ok(addr)
}

async fn article(Path(n): Path<u32>) -> Response {
    let body = format!(
        "<html><head><title>Article {n}</title></head>\n<body><h1>Article {n}</h1>\n\
         <p>rota fetched this page from the demo's loopback server.</p></body></html>\n"
    );
    ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], body).into_response()
}

async fn busy_page(State(hits): State<Arc<AtomicUsize>>) -> Response {
    if hits.fetch_add(1, Ordering::Relaxed) < BUSY_TIMES {
        (StatusCode::SERVICE_UNAVAILABLE, "busy, come back later").into_response()
    } else {
        "not busy any more".into_response()
    }
}

/// A fetch that prints each attempt's outcome as it happens, with its caller and idx.
///
/// It holds every fetch until `gate` opens, once both jobs are submitted: the loopback pages
/// answer so fast that a worker would otherwise finish most of the first job before the second
/// is in, and the rotation would not show.
struct Narrating {
    inner: HttpFetch,
    gate: CancellationToken,
    base: String,
    idx: HashMap<(String, String), usize>,
    retry_wait: Duration,
    retry_for: Duration,
    started: Instant,
}

#[async_trait]
impl Fetch for Narrating {
    async fn fetch(
        &self,
        caller: Arc<Caller>,
        target: Target,
        cancel: CancellationToken,
    ) -> Result<TargetResult, FetchError> {
        let idx = self
            .idx
            .get(&(caller.name.clone(), target.url.clone()))
            .map_or_else(|| "?".to_owned(), |i| i.to_string());
        let path = target
            .url
            .strip_prefix(&self.base)
            .unwrap_or(&target.url)
            .to_owned();
        tokio::select! {
            () = self.gate.cancelled() => {}
            () = cancel.cancelled() => return Err(FetchError::Other("fetch cancelled".into())),
        }
        let r = self.inner.get(&target, &cancel).await;
        let at = self.started.elapsed();
        let outcome = match &r {
            Ok(res) => format!(
                "done ({} bytes)",
                res.meta.get("bytes").and_then(|b| b.as_u64()).unwrap_or(0)
            ),
            // The runner's rule: stored failed at a busy answer once the target has been busy
            // for longer than retry_for since its first busy answer.
            Err(FetchError::RetryLater(msg)) => format!(
                "busy ({msg}): tried again in {}, or failed if busy for over {} (--retry-for)",
                humantime::format_duration(self.retry_wait),
                humantime::format_duration(self.retry_for)
            ),
            Err(FetchError::Target(e)) => format!("failed: {}\n{:40}hint: {}", e.msg, "", e.hint),
            Err(FetchError::Other(msg)) => format!("failed: {msg}"),
        };
        say!(
            "  {:>6.2}s  {:<5} #{idx}  GET {path:<12} → {outcome}",
            at.as_secs_f64(),
            caller.name
        );
        r
    }
}

/// The demo's jobs: a caller and its targets' paths.
fn jobs() -> Vec<(&'static str, Vec<&'static str>)> {
    vec![
        ("alice", vec!["/articles/1", "/busy", "/articles/2"]),
        (
            "bob",
            vec!["/articles/3", "/missing", "/slow", "/articles/4"],
        ),
    ]
}

/// Runs `rota demo` on `store`: see [`crate::cli::Command::Demo`].
pub async fn demo(store_url: &StoreUrl, args: DemoArgs) -> Result<ExitCode, String> {
    let addr = serve().await?;
    let base = format!("http://{addr}");
    let signals = Arc::new(Signals::default());
    let (cfg, budget) = crate::run::budget_after_reading(args.runner.apply(Config {
        retry_wait: DEMO_RETRY_WAIT,
        hooks: Arc::new(WakeHooks(signals.clone())),
        ..Config::default()
    }));
    let http = HttpFetch::new(HttpConfig {
        timeout: args.timeout.unwrap_or(DEMO_TIMEOUT),
        // Its server is on loopback: a proxy the environment names could not reach it.
        system_proxy: false,
        ..HttpConfig::default()
    })?;

    let jobs: Vec<(&str, Vec<Target>)> = jobs()
        .into_iter()
        .map(|(who, paths)| {
            let targets = paths
                .iter()
                .map(|p| Target {
                    url: format!("{base}{p}"),
                    options: Options::default(),
                })
                .collect();
            (who, targets)
        })
        .collect();
    let mut idx = HashMap::new();
    for (who, targets) in &jobs {
        for (i, t) in targets.iter().enumerate() {
            idx.insert(((*who).to_owned(), t.url.clone()), i);
        }
    }
    let gate = CancellationToken::new();
    let fetch = Narrating {
        inner: http,
        gate: gate.clone(),
        base: base.clone(),
        idx,
        retry_wait: cfg.effective_retry_wait(),
        retry_for: cfg.effective_retry_for(),
        started: Instant::now(),
    };

    let most = jobs.iter().map(|(_, t)| t.len()).max().unwrap_or(0);
    if cfg.effective_targets_per_job() < most || cfg.effective_jobs_total() < jobs.len() {
        return Err(format!(
            "the demo submits {} jobs of up to {most} targets: it needs --jobs-total {} and \
             --targets-per-job {most} or more",
            jobs.len(),
            jobs.len()
        ));
    }
    let limit = fetch.inner.config().timeout;
    let timeout = humantime::format_duration(limit);
    // At exactly the page's time, the answer and the timeout race: the line says so.
    let against = match limit.cmp(&SLOW_PAGE) {
        std::cmp::Ordering::Greater => format!("within the fetcher's {timeout} timeout"),
        std::cmp::Ordering::Equal => {
            format!("just at the fetcher's {timeout} timeout: either may come first")
        }
        std::cmp::Ordering::Less => format!("past the fetcher's {timeout} timeout"),
    };
    say!("rota demo: offline, against a loopback server in this process at {base}");
    say!("  /articles/N  succeeds");
    say!("  /busy        answers 503 (busy) twice, then succeeds");
    say!("  /missing     answers 404");
    say!(
        "  /slow        answers after {}, {against}",
        humantime::format_duration(SLOW_PAGE)
    );
    say!("store: {}", store_url.absolute());
    let store = store_url.open_for_command()?;
    let workers = cfg.effective_workers();
    let runner = Runner::start(store.clone(), fetch, cfg)
        .await
        .map_err(|e| format!("starting on the store {store_url}: {e}"))?;
    say!();

    // Listening before the jobs exist: a Ctrl-C (or SIGTERM) from here on cancels them rather
    // than killing the process halfway, leaving them live in the store.
    let mut interrupts = crate::run::interrupts()?;
    let mut cancelled = false;
    let mut ids = Vec::new();
    let mut created = 0;
    for (who, targets) in jobs {
        let n = targets.len();
        let caller = Caller {
            name: who.to_owned(),
            workspace: "demo".into(),
            key_sha256: String::new(),
        };
        match runner.submit(caller, CallerClass::Fleet, targets).await {
            Ok(s) => {
                say!("submitted job {} for {who} ({n} targets)", s.id);
                created += usize::from(!s.reused);
                ids.push((who, s.id));
            }
            Err(e) => {
                runner.close().await;
                return Err(format!("submitting {who}'s job: {e}"));
            }
        }
    }
    say!(
        "\n{} the jobs' targets in turn, one at a time per job (times since the start):",
        if workers == 1 {
            "1 worker takes".to_owned()
        } else {
            format!("{workers} workers take")
        }
    );
    gate.cancel();

    let mut finished: Vec<Option<JobStatus>> = vec![None; ids.len()];
    while finished.iter().any(Option::is_none) {
        // Before the looks below: the runner has made (or tried) every write of the jobs it
        // created, so what they show is what the store took.
        let runner_done = signals.runner_done_with(created);
        for (slot, (who, id)) in finished.iter_mut().zip(&ids) {
            if slot.is_some() {
                continue;
            }
            let view = runner
                .status(id)
                .await
                .map_err(|e| format!("reading job {id}: {e}"))?
                .ok_or_else(|| format!("job {id} vanished from the store"))?;
            if view.job.status.is_terminal() {
                let failed = view
                    .targets
                    .iter()
                    .filter(|t| t.status == TargetState::Failed)
                    .count();
                let line = format!(
                    "  job {id} of {who} is {}: {}/{} targets done, {failed} failed",
                    view.job.status,
                    view.job.targets_done.saturating_sub(failed),
                    view.job.targets_total
                );
                say!("{line}");
                *slot = Some(view.job.status);
            }
        }
        if let Some(why) = crate::out::stdout_failure() {
            runner.close().await;
            return Err(format!("writing stdout: {why}"));
        }
        // The runner is done with every job it created, yet one is not ended in the store:
        // the store did not take its last writes (a full disk), and never will show it ended.
        if runner_done && finished.iter().any(Option::is_none) {
            runner.close().await;
            return Err(
                "the store did not take the jobs' last writes (see the warnings \
                        above); the next run on this store fails the jobs left live \
                        `interrupted`"
                    .into(),
            );
        }
        tokio::select! {
            () = signals.changed(Duration::from_millis(250)) => {}
            Some(interrupt) = interrupts.recv(), if !cancelled => {
                cancelled = true;
                say!(
                    "\ncancelling the jobs: the target in flight finishes and is stored (Ctrl-C \
                     again to quit at once)"
                );
                for (_, id) in &ids {
                    runner.cancel(id).await;
                }
                // Stored: a second signal may end the process now.
                drop(interrupt);
                // Each job is cancelled in the store at once; its lines wait for the target
                // in flight, so that they count it.
                while signals.inflight() > 0 {
                    signals.changed(Duration::from_millis(250)).await;
                }
            }
        }
    }
    // The jobs are over: a signal from here on has nothing to cancel, and ends the process at
    // once (see `run::interrupts`); so does one that came during the last look.
    crate::run::exit_if_interrupted(&mut interrupts);
    drop(interrupts);
    runner.close().await;
    // Both jobs reported: now the byte budget (which may evict them).
    let mut kept = Vec::new();
    match crate::run::evict_to(&*store, budget).await {
        Ok(0) => kept.extend(ids.iter().map(|(_, id)| id)),
        Ok(_) => {
            for (_, id) in &ids {
                match store.job(id).await {
                    Ok(None) => {
                        say!("  job {id} evicted once shown: the store is past --max-bytes");
                    }
                    _ => kept.push(id),
                }
            }
        }
        Err(e) => {
            say!("  {e}");
            kept.extend(ids.iter().map(|(_, id)| id));
        }
    }

    say!();
    match store_url {
        StoreUrl::Memory => {
            say!(
                "The memory store is gone with this process: run the demo with \
                 --store sqlite:PATH to keep the jobs."
            );
        }
        _ if kept.is_empty() => {}
        _ => {
            if kept.len() == ids.len() {
                say!("Both jobs are stored in {}.", store_url.absolute());
            } else {
                say!("One job is stored in {}.", store_url.absolute());
            }
            let flag = if store_url.to_string() == crate::cli::DEFAULT_STORE
                && std::env::var_os("ROTA_STORE").is_none()
            {
                String::new()
            } else {
                format!("--store {} ", shell_word(&store_url.absolute().to_string()))
            };
            if flag.is_empty() {
                say!("Read one back (from this directory) with:");
            } else {
                say!("Read one back with:");
            }
            for id in kept {
                say!("  rota {flag}status {id}");
            }
        }
    }
    Ok(if cancelled {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// `s` as one word for a POSIX shell: as it is when it holds only characters no shell treats
/// specially, else in single quotes (a quote inside written `'\''`).
fn shell_word(s: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "/._-:+=,@%".contains(c);
    if !s.is_empty() && s.chars().all(plain) {
        return s.to_owned();
    }
    format!("'{}'", s.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shell_word_is_quoted_only_when_it_needs_to_be() {
        assert_eq!(
            shell_word("sqlite:/tmp/a-b_c.d/rota.sqlite3"),
            "sqlite:/tmp/a-b_c.d/rota.sqlite3"
        );
        assert_eq!(
            shell_word("sqlite:/tmp/my jobs/r.db"),
            "'sqlite:/tmp/my jobs/r.db'"
        );
        assert_eq!(shell_word("sqlite:/tmp/it's"), r"'sqlite:/tmp/it'\''s'");
        assert_eq!(shell_word("a$b`c"), "'a$b`c'");
        assert_eq!(shell_word(""), "''");
    }
}
