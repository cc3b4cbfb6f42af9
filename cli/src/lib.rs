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
    match cli.command {
        Command::Run(args) => run::run(&cli.store, args).await,
        Command::Status(args) => status::status(&cli.store, &args.id).await,
        Command::Demo(args) => demo::demo(&cli.store, args).await,
        Command::Upgrade => upgrade::upgrade(&cli.store),
    }
}
