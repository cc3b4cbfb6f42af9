//! The command line: `rota [--store URL] <run FILE | status ID | demo | upgrade>`.

use std::path::PathBuf;
use std::time::Duration;

use clap::error::ErrorKind;
use clap::parser::ValueSource;
use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};
use rota::Config;

use crate::http::HttpConfig;
use crate::store_url::StoreUrl;

/// The store used when neither `--store` nor `ROTA_STORE` is given.
pub const DEFAULT_STORE: &str = "sqlite:rota.sqlite3";

/// rota: a store-backed batch job runner.
///
/// A job is a list of fetch targets; rota drains them through its built-in HTTP fetcher,
/// round-robin across jobs, retries targets that are only busy, and stores every outcome.
/// Start with `rota demo`.
#[derive(Debug, Parser)]
#[command(name = "rota", version, propagate_version = true, max_term_width = 100)]
pub struct Cli {
    /// Where jobs are stored: sqlite:PATH, redb:PATH or memory.
    #[arg(
        long,
        global = true,
        env = "ROTA_STORE",
        default_value = DEFAULT_STORE,
        value_name = "URL"
    )]
    pub store: StoreUrl,

    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

impl Cli {
    /// Parses the process's arguments as [`Parser::try_parse`] does, except that a `ROTA_STORE`
    /// that is set but empty counts as unset (as an empty variable usually does), rather than
    /// naming a store "", and that one that is not a store URL is an error naming it only if
    /// `--store` is not given (clap would check it even then, and name `--store` for it).
    pub fn from_env_and_args() -> Result<Cli, clap::Error> {
        let mut cmd = Cli::command();
        let env = std::env::var_os("ROTA_STORE");
        let empty = env.as_ref().is_some_and(|v| v.is_empty());
        // Why ROTA_STORE is not a store URL, if it is set and is not.
        let bad_env = env
            .filter(|v| !v.is_empty())
            .and_then(|v| match v.to_str() {
                Some(s) => s
                    .parse::<StoreUrl>()
                    .err()
                    .map(|e| format!("ROTA_STORE={s:?}: {e}")),
                None => Some("ROTA_STORE is not valid UTF-8".to_owned()),
            });
        if empty || bad_env.is_some() {
            cmd = cmd.mut_arg("store", |a| a.env(None::<&str>));
        }
        let matches = cmd.try_get_matches_from_mut(std::env::args_os())?;
        if let Some(e) = bad_env
            && matches.value_source("store") != Some(ValueSource::CommandLine)
        {
            return Err(cmd.error(ErrorKind::ValueValidation, e));
        }
        Cli::from_arg_matches(&matches).map_err(|e| e.format(&mut cmd))
    }
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run one job: fetch every target in FILE, print one JSON line per target on stdout.
    ///
    /// FILE (`-` for stdin) is a JSON array, or JSON lines; each item is a URL string or a
    /// target object {"url": "...", "options": {"grep": "..."}}. The job id and progress go to
    /// stderr. Exit status: 0 all done, 2 partial, 1 failed, cancelled or error. The first
    /// Ctrl-C cancels the job (the target in flight finishes and is stored); a second exits at
    /// once.
    Run(RunArgs),
    /// Print a stored job and its targets (a JobView) as JSON.
    ///
    /// Reads the job: it changes no job and starts no worker (opening a file store may still
    /// write the store's own bookkeeping; see the README).
    Status(StatusArgs),
    /// Run two jobs of two callers against a loopback server inside this process (offline).
    ///
    /// Shows the round-robin order and every outcome as it happens: pages that succeed, one that
    /// is busy twice and then fine, one missing (404) and one too slow for the timeout. The jobs
    /// are kept in the store, to be read back with `rota status ID`.
    Demo(DemoArgs),
    /// Migrate the store's file to this version's schema.
    ///
    /// A redb file of schema 2 (written by rota before redb's live jobs had a table of their
    /// own), which `run`, `status` and `demo` refuse unchanged, is migrated in one durable
    /// transaction, keeping every job. A store already current is left alone; a missing file
    /// is an error and is not created.
    Upgrade,
}

/// `rota run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The targets: a JSON array or JSON lines; `-` reads stdin.
    #[arg(value_name = "FILE")]
    pub file: PathBuf,

    /// The caller the job is submitted as [default: $USER, else $USERNAME, else local].
    #[arg(long, value_name = "NAME", value_parser = parse_caller)]
    pub caller: Option<String>,

    /// Fetch every target again, even if this caller ran the same targets within --ttl (a new
    /// job; the older one is kept, and later runs reuse the newer, but for two made within the
    /// same second, of which they may reuse either).
    #[arg(long)]
    pub fresh: bool,

    /// The runner's settings.
    #[command(flatten)]
    pub runner: RunnerArgs,

    /// The built-in fetcher's settings.
    #[command(flatten)]
    pub fetch: FetchArgs,
}

/// `rota status`.
#[derive(Debug, Args)]
pub struct StatusArgs {
    /// The job id `rota run` printed (32 hex characters).
    #[arg(value_name = "ID", value_parser = parse_id)]
    pub id: String,
}

/// `rota demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// The runner's settings (the demo's own default for --retry-wait is 200ms).
    #[command(flatten)]
    pub runner: RunnerArgs,

    /// The time limit of one request [default: 1s, so that the slow page times out].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration,
          help_heading = "Fetcher")]
    pub timeout: Option<Duration>,
}

/// The runner's [`Config`], one flag per field. Unset flags keep the base config's value.
#[derive(Debug, Clone, Default, Args)]
#[command(next_help_heading = "Runner")]
pub struct RunnerArgs {
    /// How long a job is kept (and reused) after its last activity [default: 24h].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub ttl: Option<Duration>,
    /// The most targets one job may have [default: 32].
    #[arg(long, value_name = "N", value_parser = parse_count)]
    pub targets_per_job: Option<usize>,
    /// The most live jobs one caller may have [default: 1].
    #[arg(long, value_name = "N", value_parser = parse_count)]
    pub jobs_per_caller: Option<usize>,
    /// The most live jobs in all [default: 8].
    #[arg(long, value_name = "N", value_parser = parse_count)]
    pub jobs_total: Option<usize>,
    /// How many workers fetch at once, 1 or 2 [default: 1].
    #[arg(long, value_name = "N", value_parser = parse_workers)]
    pub workers: Option<usize>,
    /// The store's byte budget: finished jobs are evicted past it, like 64MiB [default: 64MiB].
    #[arg(long, value_name = "SIZE", value_parser = parse_nonzero_size)]
    pub max_bytes: Option<u64>,
    /// The pause before a busy target is tried again [default: 2s; in the demo 200ms].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub retry_wait: Option<Duration>,
    /// How long one target may keep coming back busy before it fails [default: 10m].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub retry_for: Option<Duration>,
}

impl RunnerArgs {
    /// `base` with every flag that was given applied.
    pub fn apply(&self, base: Config) -> Config {
        Config {
            ttl: self.ttl.unwrap_or(base.ttl),
            targets_per_job: self.targets_per_job.unwrap_or(base.targets_per_job),
            jobs_per_caller: self.jobs_per_caller.unwrap_or(base.jobs_per_caller),
            jobs_total: self.jobs_total.unwrap_or(base.jobs_total),
            workers: self.workers.unwrap_or(base.workers),
            max_bytes: self.max_bytes.unwrap_or(base.max_bytes),
            retry_wait: self.retry_wait.unwrap_or(base.retry_wait),
            retry_for: self.retry_for.unwrap_or(base.retry_for),
            ..base
        }
    }
}

/// The built-in fetcher's settings.
#[derive(Debug, Clone, Copy, Args)]
#[command(next_help_heading = "Fetcher")]
pub struct FetchArgs {
    /// The time limit of one request: connect, headers and body [default: 30s].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration,
          default_value = "30s", hide_default_value = true)]
    pub timeout: Duration,
    /// The largest body kept, like 8MiB or 500KiB; a larger page fails [default: 8MiB].
    #[arg(long, value_name = "SIZE", value_parser = parse_nonzero_size, default_value = "8MiB",
          hide_default_value = true)]
    pub max_body: u64,
}

impl FetchArgs {
    /// The fetcher's configuration.
    pub fn http_config(&self) -> HttpConfig {
        HttpConfig {
            timeout: self.timeout,
            max_body: self.max_body,
            system_proxy: true,
        }
    }
}

/// The default caller name: `$USER`, else `$USERNAME`, else `local`.
pub fn default_caller() -> String {
    ["USER", "USERNAME"]
        .iter()
        .filter_map(|k| std::env::var(k).ok())
        .map(|v| v.trim().to_owned())
        .find(|v| !v.is_empty())
        .unwrap_or_else(|| "local".to_owned())
}

/// Parses `--workers`: 1 or 2 (the runner has at most two).
pub fn parse_workers(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(n @ 1..=rota::MAX_WORKERS) => Ok(n),
        _ => Err(format!("{s:?}: the runner has 1 or 2 workers")),
    }
}

/// Parses `--caller`: any non-blank name.
pub fn parse_caller(s: &str) -> Result<String, String> {
    let name = s.trim();
    if name.is_empty() {
        Err("a caller needs a name".into())
    } else {
        Ok(name.to_owned())
    }
}

/// Parses a job id: any non-blank text (ids are 32 lowercase hex characters, but a store may
/// hold others, so anything else is simply a job that is not there).
pub fn parse_id(s: &str) -> Result<String, String> {
    let id = s.trim();
    if id.is_empty() {
        Err("give the job id that `rota run` printed".into())
    } else {
        Ok(id.to_owned())
    }
}

/// Parses a count flag: a whole number of at least 1 (the runner reads 0 as "the default",
/// which is never what `--jobs-total 0` means).
pub fn parse_count(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(0) => Err(format!(
            "{s:?}: must be at least 1 (leave the flag out for the default)"
        )),
        Ok(n) => Ok(n),
        Err(e) if *e.kind() == std::num::IntErrorKind::PosOverflow => {
            Err(format!("{s:?} is too large (at most {})", usize::MAX))
        }
        Err(_) => Err(format!("{s:?} is not a whole number")),
    }
}

/// Parses a duration flag (humantime: `200ms`, `2s`, `10m`, `24h`) of more than zero (the
/// runner reads zero as "the default", and a zero timeout fails every fetch).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    match humantime::parse_duration(s.trim()) {
        Ok(d) if d.is_zero() => Err(format!(
            "{s:?}: must be more than 0 (leave the flag out for the default)"
        )),
        Ok(d) => Ok(d),
        Err(e) => Err(format!(
            "{s:?} is not a duration like 200ms, 2s, 10m or 24h: {e}"
        )),
    }
}

/// Parses a size flag of more than zero bytes (see [`parse_size`]).
pub fn parse_nonzero_size(s: &str) -> Result<u64, String> {
    match parse_size(s)? {
        0 => Err(format!(
            "{s:?}: must be more than 0 (leave the flag out for the default)"
        )),
        n => Ok(n),
    }
}

/// Parses a byte size: a whole number with an optional unit, `B`, `K`/`KiB` (1024), `M`/`MiB`,
/// `G`/`GiB`, or the decimal `KB` (1000), `MB`, `GB`. Case and a space before the unit do not
/// matter.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (digits, unit) = s.split_at(split);
    let n: u64 = digits.parse().map_err(|e: std::num::ParseIntError| {
        if *e.kind() == std::num::IntErrorKind::PosOverflow {
            format!("{s:?} is too large")
        } else {
            format!("{s:?} is not a size: give a whole number like 8MiB or 500000")
        }
    })?;
    if unit.starts_with(['.', ',']) {
        return Err(format!(
            "{s:?} is not a size: give a whole number of a unit, no fraction: like 1536MiB, \
             not 1.5GiB"
        ));
    }
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        other => {
            return Err(format!(
                "unknown size unit {other:?}: use B, KiB, MiB, GiB (or KB, MB, GB)"
            ));
        }
    };
    n.checked_mul(mult)
        .ok_or_else(|| format!("{s:?} is too large"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn a_size_too_large_for_its_number_says_too_large() {
        for s in [
            "99999999999999999999999",
            "99999999999999999999999MiB",
            "17179869184GiB",
        ] {
            assert_eq!(parse_size(s), Err(format!("{s:?} is too large")));
        }
        assert_eq!(parse_size("18446744073709551615"), Ok(u64::MAX));
    }

    #[test]
    fn sizes_take_binary_and_decimal_units() {
        assert_eq!(parse_size("8MiB"), Ok(8 << 20));
        assert_eq!(parse_size("8 mib"), Ok(8 << 20));
        assert_eq!(parse_size("500KiB"), Ok(500 << 10));
        assert_eq!(parse_size("2k"), Ok(2048));
        assert_eq!(parse_size("3MB"), Ok(3_000_000));
        assert_eq!(parse_size("1000"), Ok(1000));
        assert!(parse_size("lots").is_err());
        assert!(parse_size("8 parsecs").is_err());
        assert!(parse_size("-1").is_err());
        assert!(parse_size("99999999999999G").is_err());
    }

    /// A fraction is refused as one, not as an unknown unit ".5gib" beside a list of units
    /// that names GiB.
    #[test]
    fn a_size_with_a_fraction_says_sizes_are_whole_numbers() {
        for s in ["1.5GiB", "0.5 MiB", "2.5", "1,5MiB"] {
            let e = parse_size(s).unwrap_err();
            assert!(!e.contains("unknown size unit"), "{s}: {e}");
            assert!(e.contains("whole number"), "{s}: {e}");
            assert!(e.contains(&format!("{s:?}")), "{s}: {e}");
        }
    }

    #[test]
    fn workers_are_one_or_two_and_a_caller_and_a_job_id_are_not_blank() {
        assert_eq!(parse_workers("1"), Ok(1));
        assert_eq!(parse_workers("2"), Ok(2));
        for bad in ["0", "3", "two", ""] {
            assert!(parse_workers(bad).is_err(), "{bad:?}");
        }
        assert_eq!(parse_caller(" ann "), Ok("ann".to_owned()));
        assert_eq!(parse_id(" 0a1b "), Ok("0a1b".to_owned()));
        assert!(parse_id(" ").is_err());
        assert!(Cli::try_parse_from(["rota", "status", ""]).is_err());
        assert!(parse_caller("  ").is_err());
    }

    #[test]
    fn zero_is_refused_for_every_count_duration_and_size_flag() {
        let zeros = [
            ("--ttl", "0s"),
            ("--targets-per-job", "0"),
            ("--jobs-per-caller", "0"),
            ("--jobs-total", "0"),
            ("--max-bytes", "0"),
            ("--retry-wait", "0ms"),
            ("--retry-for", "0s"),
            ("--timeout", "0s"),
            ("--max-body", "0KiB"),
        ];
        for (flag, zero) in zeros {
            let e = Cli::try_parse_from(["rota", "run", "f.json", flag, zero])
                .err()
                .unwrap_or_else(|| panic!("{flag} {zero} is accepted"));
            assert!(e.to_string().contains("must be"), "{flag}: {e}");
        }
        assert!(Cli::try_parse_from(["rota", "demo", "--timeout", "0s"]).is_err());
        // One of each kind, above zero, is taken.
        assert_eq!(parse_count("1"), Ok(1));
        assert_eq!(parse_duration("1ms"), Ok(Duration::from_millis(1)));
        assert_eq!(parse_nonzero_size("1"), Ok(1));
        assert!(parse_count("x").is_err());
        assert!(parse_duration("soon").is_err());
    }

    /// A count whose number is too large for it says so, not that it is no whole number.
    #[test]
    fn a_count_too_large_for_its_number_says_too_large() {
        let e = parse_count("99999999999999999999").unwrap_err();
        assert_eq!(
            e,
            format!(
                "\"99999999999999999999\" is too large (at most {})",
                usize::MAX
            )
        );
        assert_eq!(parse_count(&usize::MAX.to_string()), Ok(usize::MAX));
        assert_eq!(
            parse_count("-1").unwrap_err(),
            "\"-1\" is not a whole number"
        );
    }

    /// `rota run f.json FLAGS`, parsed.
    fn run_with(flags: &[&str]) -> RunArgs {
        let cli = Cli::try_parse_from([&["rota", "run", "f.json"], flags].concat()).unwrap();
        let Command::Run(run) = cli.command else {
            panic!("not run");
        };
        run
    }

    #[test]
    fn runner_flags_override_only_what_is_given() {
        let run = run_with(&[
            "--retry-wait",
            "200ms",
            "--workers",
            "2",
            "--max-bytes",
            "1MiB",
        ]);
        let c = run.runner.apply(Config::default());
        assert_eq!(c.retry_wait, Duration::from_millis(200));
        assert_eq!(c.workers, 2);
        assert_eq!(c.max_bytes, 1 << 20);
        assert_eq!(c.ttl, Config::default().ttl);
        // The flags' literal defaults are the fetcher's constants.
        assert_eq!(run.fetch.http_config(), crate::http::HttpConfig::default());
    }

    /// Every runner flag reaches its field of the config (each value unlike the default).
    #[test]
    fn every_runner_flag_sets_its_config_field() {
        let run = run_with(&[
            "--ttl",
            "90s",
            "--targets-per-job",
            "5",
            "--jobs-per-caller",
            "3",
            "--jobs-total",
            "7",
            "--workers",
            "2",
            "--max-bytes",
            "2KiB",
            "--retry-wait",
            "150ms",
            "--retry-for",
            "4m",
        ]);
        let c = run.runner.apply(Config::default());
        let got = (
            c.ttl,
            c.targets_per_job,
            c.jobs_per_caller,
            c.jobs_total,
            c.workers,
            c.max_bytes,
            c.retry_wait,
            c.retry_for,
        );
        let want = (
            Duration::from_secs(90),
            5,
            3,
            7,
            2,
            2048,
            Duration::from_millis(150),
            Duration::from_secs(240),
        );
        assert_eq!(got, want);
        // No value given is the default's, so none of them passes by falling back to it.
        let d = Config::default();
        assert_ne!(want.0, d.ttl);
        assert_ne!(want.1, d.targets_per_job);
        assert_ne!(want.2, d.jobs_per_caller);
        assert_ne!(want.3, d.jobs_total);
        assert_ne!(want.4, d.workers);
        assert_ne!(want.5, d.max_bytes);
        assert_ne!(want.6, d.retry_wait);
        assert_ne!(want.7, d.retry_for);
    }

    #[test]
    fn the_store_flag_is_global() {
        let cli = Cli::try_parse_from(["rota", "status", "abc", "--store", "memory"]).unwrap();
        assert_eq!(cli.store, StoreUrl::Memory);
    }
}
