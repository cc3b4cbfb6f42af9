//! `rota`: the command-line program of the rota batch job runner.

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::filter::Directive;

/// The HTTP and TLS stacks' own logs name hosts and addresses (rustls and its certificate
/// verifier even at error: "certificate not valid for name …"); rota's logs never carry a URL
/// or a host, so these stay quiet whatever `RUST_LOG` asks (their failures reach the user as
/// stored target errors instead).
const QUIET: &[&str] = &[
    "hyper=off",
    "hyper_util=off",
    "h2=off",
    "reqwest=off",
    "axum=off",
    "rustls=off",
    "rustls_platform_verifier=off",
    "tokio_rustls=off",
    "hyper_rustls=off",
    "webpki=off",
];

/// `RUST_LOG`'s filter (warn without it), with the [`QUIET`] crates off.
fn log_filter() -> EnvFilter {
    quieted(EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn")))
}

/// `filter` with the [`QUIET`] crates off.
fn quieted(mut filter: EnvFilter) -> EnvFilter {
    for d in QUIET {
        if let Ok(d) = d.parse::<Directive>() {
            filter = filter.add_directive(d);
        }
    }
    filter
}

fn main() -> ExitCode {
    let cli = match rota_cli::cli::Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // Help and version go to stdout with 0; a usage error is an error: 1, not clap's 2,
            // which `rota run` keeps for a partial job.
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    // Logs go to stderr, at warn unless RUST_LOG says otherwise; stdout is for results.
    tracing_subscriber::fmt()
        .with_env_filter(log_filter())
        .with_writer(|| rota_cli::out::QuietStderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            rota_cli::out::err(&format!("rota: error: starting the async runtime: {e}"));
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(rota_cli::main_with(cli));
    // Whatever is still running (the demo's server, a DNS lookup) is not waited for.
    runtime.shutdown_background();
    match result {
        Ok(code) => code,
        Err(e) => {
            rota_cli::out::err(&format!("rota: error: {e}"));
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use tracing::{Level, enabled};
    use tracing_subscriber::layer::SubscriberExt;

    use super::*;

    #[test]
    fn the_http_and_tls_stacks_stay_quiet_even_at_trace() {
        let subscriber = tracing_subscriber::registry().with(quieted(EnvFilter::new("trace")));
        tracing::subscriber::with_default(subscriber, || {
            // Targets whose records name hosts: rustls at debug and trace, its certificate
            // verifier at error (as `log` records turned into events).
            assert!(!enabled!(target: "rustls::client::hs", Level::ERROR));
            assert!(!enabled!(
                target: "rustls_platform_verifier::verification::others",
                Level::ERROR
            ));
            assert!(!enabled!(target: "hyper_util::client::legacy::connect::http", Level::ERROR));
            assert!(!enabled!(target: "reqwest::connect", Level::ERROR));
            // Everything else still follows RUST_LOG.
            assert!(enabled!(target: "rota::runner", Level::TRACE));
            assert!(enabled!(target: "rota_cli::run", Level::DEBUG));
        });
    }
}
