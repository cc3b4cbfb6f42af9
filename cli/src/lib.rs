//! rota-cli: the parts of the `rota` command — the built-in HTTP fetcher, the reader of
//! `rota run`'s FILE, the `--store` URL, and the `run`, `status`, `demo` and `upgrade`
//! subcommands.
#![deny(clippy::unwrap_used, clippy::expect_used)]
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

/// `say!(...)`: [`out::out`] of a `format!`; whether stdout took it.
macro_rules! say {
    () => {
        $crate::out::out("")
    };
    ($($t:tt)*) => {
        $crate::out::out(&format!($($t)*))
    };
}

/// `note!(...)`: [`out::err`] of a `format!`.
macro_rules! note {
    ($($t:tt)*) => {
        $crate::out::err(&format!($($t)*))
    };
}

pub mod cli;
pub mod demo;
pub mod http;
pub mod input;
pub mod out;
pub mod progress;
pub mod run;
pub mod status;
pub mod store_url;
pub mod upgrade;

use std::process::ExitCode;

use cli::{Cli, Command};

/// Runs the parsed command line: the process's exit code, or an error for stderr (exit 1).
pub async fn main_with(cli: Cli) -> Result<ExitCode, String> {
    #[cfg(unix)]
    survive_file_size_limit();
    match cli.command {
        Command::Run(args) => run::run(&cli.store, args).await,
        Command::Status(args) => status::status(&cli.store, &args.id).await,
        Command::Demo(args) => demo::demo(&cli.store, args).await,
        Command::Upgrade => upgrade::upgrade(&cli.store),
    }
}

/// Takes over SIGXFSZ, which a write past the file size limit (`ulimit -f`) raises and which
/// by default kills the process in the middle of that write, leaving its job live in the store
/// and nothing printed. Taken over, the write fails with EFBIG ("File too large") instead, as on
/// a full disk, and the run ends as it does then: the failed writes logged, the job's results
/// printed, exit 1. (Databases do the same: PostgreSQL ignores SIGXFSZ.) Tokio keeps its handler
/// for the life of the process, the stream dropped or not.
#[cfg(unix)]
fn survive_file_size_limit() {
    use tokio::signal::unix::{SignalKind, signal};
    if let Err(e) = signal(SignalKind::from_raw(libc::SIGXFSZ)) {
        tracing::warn!(error = %e, "could not take over SIGXFSZ: a file size limit will end rota mid-write");
    }
}
