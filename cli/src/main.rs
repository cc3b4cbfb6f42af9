//! `rota`: the command-line program of the rota batch job runner.

use std::io::IsTerminal;
use std::process::ExitCode;

use tracing::Subscriber;
use tracing_subscriber::filter::{Directive, FilterExt, LevelFilter, filter_fn};
use tracing_subscriber::layer::{Filter, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

/// The HTTP and TLS stacks' own logs name hosts and addresses (rustls and its certificate
/// verifier even at error: "certificate not valid for name …"); rota's logs never carry a URL
/// or a host, so these crates stay quiet whatever `RUST_LOG` asks (their failures reach the
/// user as stored target errors instead).
const QUIET: &[&str] = &[
    "hyper",
    "hyper_util",
    "h2",
    "reqwest",
    "axum",
    "rustls",
    "rustls_platform_verifier",
    "tokio_rustls",
    "hyper_rustls",
    "webpki",
];

/// `RUST_LOG`'s filter (warn without it), with the [`QUIET`] crates off.
fn log_filter<S>() -> impl Filter<S>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    quieted(EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn")))
}

/// `env` with the [`QUIET`] crates off. Off twice: a directive per crate, so that their
/// records are not even built; and a filter on the record's target, which a directive for one
/// of their modules in `RUST_LOG` (more specific, so it would win over the crate's) cannot
/// turn back on.
fn quieted<S>(mut env: EnvFilter) -> impl Filter<S>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    for krate in QUIET {
        if let Ok(d) = format!("{krate}=off").parse::<Directive>() {
            env = env.add_directive(d);
        }
    }
    // The records' target is known only as each one comes; the level limit stays RUST_LOG's,
    // so that tracing and `log` still skip what it turns off without building it.
    let limit = <EnvFilter as Filter<S>>::max_level_hint(&env).unwrap_or(LevelFilter::TRACE);
    env.and(filter_fn(|meta| !is_quiet(meta.target())).with_max_level_hint(limit))
}

/// Whether `target` (a record's, `crate::module::…`) is one of the [`QUIET`] crates'.
fn is_quiet(target: &str) -> bool {
    let krate = target.split("::").next().unwrap_or(target);
    QUIET.contains(&krate)
}

fn main() -> ExitCode {
    let cli = match rota_cli::cli::Cli::from_env_and_args() {
        Ok(cli) => cli,
        Err(e) => {
            // Help and version go to stdout with 0 (or 1, said on stderr, if stdout fails
            // them); a usage error is an error: 1, not clap's 2, which `rota run` keeps for a
            // partial job.
            let printed = e.print();
            if e.use_stderr() {
                return ExitCode::FAILURE;
            }
            return match printed {
                Ok(()) => ExitCode::SUCCESS,
                Err(why) => {
                    rota_cli::out::err(&format!("rota: error: writing stdout: {why}"));
                    ExitCode::FAILURE
                }
            };
        }
    };
    // Logs go to stderr, at warn unless RUST_LOG says otherwise; stdout is for results.
    tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(|| rota_cli::out::QuietStderr)
                .with_ansi(std::io::stderr().is_terminal())
                .with_filter(log_filter()),
        )
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

    use super::*;

    /// A subscriber that logs nothing, with [`quieted`]`(env)` as its one layer's filter.
    fn with_filter(env: &str) -> impl Subscriber + Send + Sync {
        tracing_subscriber::registry().with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::sink)
                .with_filter(quieted(EnvFilter::new(env))),
        )
    }

    #[test]
    fn the_http_and_tls_stacks_stay_quiet_even_at_trace() {
        tracing::subscriber::with_default(with_filter("trace"), || {
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

    /// A directive for one of their modules, more specific than the crate's, does not bring
    /// their records back (these two name the host they connect to at debug).
    #[test]
    fn a_directive_for_one_of_their_modules_keeps_them_quiet() {
        let env = "warn,hyper_util::client::legacy::connect::http=trace,reqwest::connect=trace,\
                   rustls::client=trace,rota::runner=debug";
        tracing::subscriber::with_default(with_filter(env), || {
            assert!(!enabled!(target: "hyper_util::client::legacy::connect::http", Level::DEBUG));
            assert!(!enabled!(target: "reqwest::connect", Level::DEBUG));
            assert!(!enabled!(target: "rustls::client::hs", Level::ERROR));
            assert!(enabled!(target: "rota::runner", Level::DEBUG));
            assert!(!enabled!(target: "rota::runner", Level::TRACE));
        });
    }

    /// The filter keeps RUST_LOG's level limit, which lets tracing and `log` skip a record
    /// above it before building it.
    #[test]
    fn the_filter_keeps_rust_logs_level_limit() {
        use tracing_subscriber::Registry;
        for (env, want) in [
            ("warn", LevelFilter::WARN),
            ("info,rota::runner=debug", LevelFilter::DEBUG),
            ("trace", LevelFilter::TRACE),
        ] {
            let filter = quieted::<Registry>(EnvFilter::new(env));
            assert_eq!(filter.max_level_hint(), Some(want), "{env}");
        }
    }

    #[test]
    fn a_quiet_crate_is_told_by_its_first_path_segment() {
        assert!(is_quiet("hyper"));
        assert!(is_quiet("hyper_util::client::legacy::connect::http"));
        assert!(is_quiet("rustls_platform_verifier::verification::others"));
        assert!(!is_quiet("hyperlocal"));
        assert!(!is_quiet("rota::runner"));
        assert!(!is_quiet("rota_cli::http"));
    }
}
