//! `rota`: the command-line program of the rota batch job runner.

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::filter::Directive;

/// The HTTP stack's own logs name hosts and addresses at debug and trace; rota's logs never
/// carry a URL or a host, so these stay quiet whatever `RUST_LOG` asks (their failures reach
/// the user as stored target errors instead).
const QUIET: &[&str] = &[
    "hyper=off",
    "hyper_util=off",
    "h2=off",
    "reqwest=off",
    "axum=off",
];

fn log_filter() -> EnvFilter {
    let mut filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn"));
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
