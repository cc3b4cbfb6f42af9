//! `rota`: the command-line program of the rota batch job runner.

use std::backtrace::{Backtrace, BacktraceStatus};
use std::io::IsTerminal;
use std::process::ExitCode;

use tracing::Subscriber;
use tracing_subscriber::filter::{FilterExt, LevelFilter, filter_fn};
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

/// `env` with the [`QUIET`] crates off: a filter on the record's target, which a directive
/// for one of their modules in `RUST_LOG` cannot turn back on. It tells `tracing` it never
/// wants their callsites, so that their events are not even built (their `log` records, which
/// have no callsite, are built up to RUST_LOG's level and dropped here).
fn quieted<S>(env: EnvFilter) -> impl Filter<S>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
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

/// What a panic prints on stderr in place of the default hook's text: where it happened, never
/// its message, which may name a URL or a host (a fetch's panic, say, which the runner catches
/// and stores as `internal error`; the default hook would print the message beside the logs).
fn panic_note(info: &std::panic::PanicHookInfo<'_>) -> String {
    let at = info
        .location()
        .map(|l| format!(" at {}:{}", l.file(), l.line()))
        .unwrap_or_default();
    format!("rota: a panic{at} (its message is not shown: it may name a URL)")
}

/// What the panic hook prints on stderr: [`panic_note`], followed by `trace` when it was
/// captured (when RUST_BACKTRACE asks for one, as the default hook gives it): function names
/// and source lines only.
fn panic_report(info: &std::panic::PanicHookInfo<'_>, trace: &Backtrace) -> String {
    match trace.status() {
        BacktraceStatus::Captured => format!("{}\n{trace}", panic_note(info)),
        _ => panic_note(info),
    }
}

fn main() -> ExitCode {
    std::panic::set_hook(Box::new(|info| {
        rota_cli::out::err(&panic_report(info, &Backtrace::capture()));
    }));
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
    use std::io;
    use std::sync::{Arc, Mutex};

    use tracing::{Level, event};

    use super::*;

    /// Held by a test while it sets the panic hook, which is the whole process's.
    static HOOK: Mutex<()> = Mutex::new(());

    /// A panic's note names where it happened and not what its message says.
    #[test]
    fn a_panics_note_leaves_its_message_out() {
        static NOTE: Mutex<Option<String>> = Mutex::new(None);
        let _hook = HOOK.lock().unwrap_or_else(|e| e.into_inner());
        let before = std::panic::take_hook();
        std::panic::set_hook(Box::new(|info| {
            if let Ok(mut note) = NOTE.lock() {
                *note = Some(panic_note(info));
            }
        }));
        let line = line!() + 1;
        let r = std::panic::catch_unwind(|| panic!("fetching https://secret.example/x"));
        std::panic::set_hook(before);
        assert!(r.is_err());
        let note = NOTE.lock().ok().and_then(|mut n| n.take());
        assert_eq!(
            note,
            Some(format!(
                "rota: a panic at {}:{line} (its message is not shown: it may name a URL)",
                file!()
            ))
        );
    }

    /// The hook prints the panic's note, with the backtrace below it when one was captured
    /// (RUST_BACKTRACE asked for it), and the note alone when none was.
    #[test]
    fn a_panics_report_has_the_backtrace_only_when_one_was_captured() {
        type Seen = (String, String, String, String);
        static SEEN: Mutex<Option<Seen>> = Mutex::new(None);
        let _hook = HOOK.lock().unwrap_or_else(|e| e.into_inner());
        let before = std::panic::take_hook();
        std::panic::set_hook(Box::new(|info| {
            let trace = Backtrace::force_capture();
            let seen = (
                panic_note(info),
                trace.to_string(),
                panic_report(info, &trace),
                panic_report(info, &Backtrace::disabled()),
            );
            if let Ok(mut s) = SEEN.lock() {
                *s = Some(seen);
            }
        }));
        let r = std::panic::catch_unwind(|| panic!("fetching https://secret.example/x"));
        std::panic::set_hook(before);
        assert!(r.is_err());
        let Some((note, trace, with, without)) = SEEN.lock().ok().and_then(|mut s| s.take()) else {
            panic!("the hook saw no panic");
        };
        assert!(!trace.is_empty());
        assert_eq!(with, format!("{note}\n{trace}"));
        assert_eq!(without, note);
    }

    /// What a subscriber with [`quieted`]`(env)` as its one layer's filter writes while
    /// `emit` runs, as text.
    ///
    /// Records are emitted and their output read, rather than asked about with `enabled!`: a
    /// callsite's interest is shared by every subscriber alive in the process (the other
    /// tests' run on other threads at the same time), and when those differ, `enabled!`
    /// answers with the registry's "any per-layer filter enabled it", which with one filter
    /// is true even when that filter refused. An emitted record is checked against this
    /// subscriber's own filter before it is written.
    fn logged(env: &str, emit: impl FnOnce()) -> String {
        #[derive(Clone)]
        struct Capture(Arc<Mutex<Vec<u8>>>);
        impl io::Write for Capture {
            fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
                self.0
                    .lock()
                    .map_err(|_| io::Error::other("poisoned"))?
                    .extend_from_slice(buf);
                Ok(buf.len())
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        let out = Capture(Arc::new(Mutex::new(Vec::new())));
        let writer = out.clone();
        let subscriber = tracing_subscriber::registry().with(
            tracing_subscriber::fmt::layer()
                .with_writer(move || writer.clone())
                .with_ansi(false)
                .with_filter(quieted(EnvFilter::new(env))),
        );
        tracing::subscriber::with_default(subscriber, emit);
        let bytes = out.0.lock().map(|b| b.clone()).unwrap_or_default();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    #[test]
    fn the_http_and_tls_stacks_stay_quiet_even_at_trace() {
        let out = logged("trace", || {
            // Targets whose records name hosts: rustls at debug and trace, its certificate
            // verifier at error (as `log` records turned into events).
            event!(target: "rustls::client::hs", Level::ERROR, "rustls-error");
            event!(
                target: "rustls_platform_verifier::verification::others",
                Level::ERROR,
                "verifier-error"
            );
            event!(target: "hyper_util::client::legacy::connect::http", Level::ERROR, "hyper-error");
            event!(target: "reqwest::connect", Level::ERROR, "reqwest-error");
            // Everything else still follows RUST_LOG.
            event!(target: "rota::runner", Level::TRACE, "runner-trace");
            event!(target: "rota_cli::run", Level::DEBUG, "run-debug");
        });
        for quiet in [
            "rustls-error",
            "verifier-error",
            "hyper-error",
            "reqwest-error",
        ] {
            assert!(!out.contains(quiet), "{quiet} logged:\n{out}");
        }
        assert!(out.contains("runner-trace"), "{out}");
        assert!(out.contains("run-debug"), "{out}");
    }

    /// A directive for one of their modules, more specific than the crate's, does not bring
    /// their records back (these two name the host they connect to at debug).
    #[test]
    fn a_directive_for_one_of_their_modules_keeps_them_quiet() {
        let env = "warn,hyper_util::client::legacy::connect::http=trace,reqwest::connect=trace,\
                   rustls::client=trace,rota::runner=debug";
        let out = logged(env, || {
            event!(target: "hyper_util::client::legacy::connect::http", Level::DEBUG, "hyper-debug");
            event!(target: "reqwest::connect", Level::DEBUG, "reqwest-debug");
            event!(target: "rustls::client::hs", Level::ERROR, "rustls-error");
            event!(target: "rota::runner", Level::DEBUG, "runner-debug");
            event!(target: "rota::runner", Level::TRACE, "runner-trace");
        });
        for quiet in [
            "hyper-debug",
            "reqwest-debug",
            "rustls-error",
            "runner-trace",
        ] {
            assert!(!out.contains(quiet), "{quiet} logged:\n{out}");
        }
        assert!(out.contains("runner-debug"), "{out}");
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
