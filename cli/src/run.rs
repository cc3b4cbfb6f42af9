//! `rota run FILE`: one job, drained with the built-in HTTP fetcher.

use std::io::{BufWriter, Read, Write};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rota::{
    BatchStore, Caller, CallerClass, Config, Job, JobStatus, Runner, StoreError, SubmitError,
    TargetRow, TargetState,
};
use tokio::sync::{mpsc, oneshot};

use crate::cli::{RunArgs, default_caller};
use crate::http::HttpFetch;
use crate::input::parse_targets_with;
use crate::progress::{Counting, Counts, Progress, Signals, WakeHooks};
use crate::store_url::StoreUrl;

/// The longest the watcher waits between two looks at the store when nothing wakes it.
const POLL: Duration = Duration::from_millis(500);

/// `cfg` with its byte budget lifted, and that budget, for a command to apply itself with
/// [`evict_to`] once it has read the jobs it ran. Applied by the runner after each stored
/// target, a budget smaller than a job's results would evict that very job (the finished one)
/// as it ends, before its results are shown.
pub fn budget_after_reading(cfg: Config) -> (Config, u64) {
    let budget = cfg.effective_max_bytes();
    (
        Config {
            max_bytes: u64::MAX,
            ..cfg
        },
        budget,
    )
}

/// Evicts finished jobs, oldest first, until the store holds at most `budget` bytes; how many.
pub async fn evict_to(store: &dyn BatchStore, budget: u64) -> Result<usize, String> {
    store
        .evict(budget)
        .await
        .map_err(|e| format!("evicting finished jobs past --max-bytes: {e}"))
}

/// Whether `store` holds more than `budget` bytes, so that applying it would evict: when that is
/// not known (the store failing), it may.
async fn past_budget(store: &dyn BatchStore, budget: u64) -> bool {
    store
        .total_bytes()
        .await
        .map_or(true, |bytes| bytes > budget)
}

/// The most of FILE `rota run` reads for a job of at most `per_job` targets: 1 MiB a target (a
/// URL is at most 64 KiB), never less than 16 MiB and never more than [`MAX_INPUT`]. Past it
/// the input is refused unread, rather than read whole into memory (an endless stdin, say) only
/// to be refused for its count.
pub fn input_cap(per_job: usize) -> u64 {
    u64::try_from(per_job)
        .unwrap_or(u64::MAX)
        .saturating_mul(1 << 20)
        .clamp(16 << 20, MAX_INPUT)
}

/// The most of FILE `rota run` reads whatever `--targets-per-job` says (which has no upper
/// bound): 1 GiB, 16 384 targets of the longest URLs.
pub const MAX_INPUT: u64 = 1 << 30;

/// Reads `r` to its end as UTF-8 text, or fails once it is past `cap` bytes; `name` names it in
/// the errors.
pub fn read_at_most(r: impl Read, cap: u64, name: &str) -> Result<String, String> {
    let mut bytes = Vec::new();
    r.take(cap.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| format!("reading {name}: {e}"))?;
    if u64::try_from(bytes.len()).unwrap_or(u64::MAX) > cap {
        return Err(format!(
            "{name}: larger than {} MiB, more than a job of at most --targets-per-job targets \
             needs (1 MiB a target, at least 16 MiB and at most 1 GiB in all)",
            cap >> 20
        ));
    }
    String::from_utf8(bytes).map_err(|e| {
        // Where, as the contents' other errors say it (line and column, from 1, the column in
        // bytes): the first byte that is not UTF-8.
        let good = &e.as_bytes()[..e.utf8_error().valid_up_to()];
        let line = good.iter().filter(|&&b| b == b'\n').count() + 1;
        let column = good.len() - good.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1) + 1;
        format!(
            "{name}: not UTF-8 text (a byte that is not UTF-8 at line {line} column {column}); \
             give the targets as UTF-8 JSON"
        )
    })
}

/// The exit code of a job that ended as `status`: 0 done, 2 partial, 1 otherwise.
pub fn exit_code(status: JobStatus) -> ExitCode {
    match status {
        JobStatus::Done => ExitCode::SUCCESS,
        JobStatus::Partial => ExitCode::from(2),
        _ => ExitCode::FAILURE,
    }
}

/// Runs `rota run`: see [`crate::cli::Command::Run`].
pub async fn run(store_url: &StoreUrl, args: RunArgs) -> Result<ExitCode, String> {
    let is_stdin = args.file.as_os_str() == "-";
    let name = if is_stdin {
        "stdin".to_owned()
    } else {
        args.file.display().to_string()
    };
    let signals = Arc::new(Signals::default());
    let (cfg, budget) = budget_after_reading(args.runner.apply(Config {
        hooks: Arc::new(WakeHooks(signals.clone())),
        ..Config::default()
    }));
    let cap = input_cap(cfg.targets_per_job);
    let text = if is_stdin {
        let stdin = std::io::stdin().lock();
        // Typed in by hand: say what is read, and how to end it.
        if std::io::IsTerminal::is_terminal(&stdin) {
            let end = if cfg!(windows) {
                "Ctrl-Z and Enter"
            } else {
                "Ctrl-D"
            };
            note!("reading the targets from the terminal, to {end}");
        }
        read_at_most(stdin, cap, &name)?
    } else {
        let file = std::fs::File::open(&args.file).map_err(|e| format!("reading {name}: {e}"))?;
        read_at_most(file, cap, &name)?
    };
    // Options the built-in fetcher refuses would fail their targets, each after the job is
    // made: refused here instead, as bad contents are, before the store is opened.
    let targets = parse_targets_with(&text, |t| match crate::http::options_refused(&t.options) {
        Some((msg, hint)) => Err(format!("{msg}; {hint}")),
        None => Ok(()),
    })
    .map_err(|e| format!("{name}: {e}"))?;
    let total = targets.len();

    let fetch = Counting::new(HttpFetch::new(args.fetch.http_config())?, signals.clone());
    let store = store_url.open_for_command()?;
    let runner = Runner::start(store.clone(), fetch, cfg)
        .await
        .map_err(|e| format!("starting on the store {store_url}: {e}"))?;

    let caller = Caller {
        name: args.caller.unwrap_or_else(default_caller),
        workspace: "local".into(),
        key_sha256: String::new(),
    };
    // Listening before the job exists: a Ctrl-C from here on cancels it rather than killing
    // the process halfway.
    let mut interrupts = interrupts()?;
    let submitted = if args.fresh {
        runner
            .submit_fresh(caller, CallerClass::Fleet, targets)
            .await
    } else {
        runner.submit(caller, CallerClass::Fleet, targets).await
    };
    let submitted = match submitted {
        Ok(s) => s,
        Err(e) => {
            runner.close().await;
            return Err(submit_error(&e));
        }
    };
    let reused = submitted.reused;
    // Counted by this run's fetches; a reused job's were not stored, so they are not shown.
    let retries = || (!reused).then(|| signals.retries());
    let id = submitted.id;
    if reused {
        note!(
            "job {id} reused: the same caller submitted the same targets within --ttl; \
             showing its stored outcome"
        );
    } else {
        let targets = if total == 1 { "target" } else { "targets" };
        note!("job {id} created ({total} {targets})");
    }

    let started = Instant::now();
    let mut progress = Progress::new(total);
    let mut cancelling = false;
    // What the signals' generation was at the last look: the store is looked at again only once
    // something was reported since (or the runner is done with the job). A look at a job this
    // run created reads its row only (see `look_at_row`); a reused job's look reads every
    // stored result, which for large pages costs more than the wait itself (a target that hung
    // beside 20 stored pages of 8 MB took 2.6 s of CPU over a 10 s timeout, when every look
    // read them all, every half second).
    let mut looked_at = None;
    loop {
        // Asked before the look below, so that once the runner is done with the job, that look
        // shows (and the progress prints) every write it made.
        let runner_done = !reused && signals.runner_done_with(1);
        let generation = signals.generation();
        if looked_at != Some(generation) || runner_done {
            looked_at = Some(generation);
            let look = if reused {
                look_at_view(&runner, &id, retries()).await
            } else {
                look_at_row(&*store, &id, &signals, retries()).await
            };
            let look = match look {
                Ok(Some(l)) => l,
                Ok(None) => break,
                Err(e) => {
                    progress.note(&format!("reading job {id}: {e}"));
                    break;
                }
            };
            progress.update(look.counts);
            // After a cancel the job is terminal at once, but its target in flight is still
            // being fetched: wait for it to be stored (closing now would cancel that fetch).
            if look.terminal && !look.in_flight {
                break;
            }
        }
        // The runner is done with the job even if the store did not take its last writes (a
        // full disk): then the store never shows it ended, and waiting for that would be for
        // ever.
        if runner_done {
            break;
        }
        tokio::select! {
            () = signals.changed(POLL) => {}
            Some(interrupt) = interrupts.recv(), if !cancelling => {
                cancelling = true;
                progress.note(&format!(
                    "cancelling job {id}: the target in flight finishes and is stored \
                     (Ctrl-C again to quit at once)"
                ));
                runner.cancel(&id).await;
                // Stored: a second signal may end the process now.
                drop(interrupt);
            }
        }
    }
    // The job is over: a signal from here on has nothing to cancel, and ends the process at
    // once (see [`interrupts`]); so does one that came during the last look.
    progress.finish();
    exit_if_interrupted(&mut interrupts);
    drop(interrupts);
    runner.close().await;

    let (row, rows) = store
        .view(&id)
        .await
        .map_err(|e| format!("reading job {id}: {e}"))?
        .ok_or_else(|| format!("job {id} is no longer in the store"))?;
    let job = row.to_job();
    let failed = rows
        .iter()
        .filter(|t| t.status == TargetState::Failed)
        .count();
    // Should stdout fail (its reader gone, `rota run … | head -1`; a full disk), the summary
    // still comes, then the error; the budget waits for the next run (below).
    let printed = print_targets(rows);
    if !job.status.is_terminal() {
        note!(
            "job {id} is still {} in the store: the store did not take its last writes (see \
             the warnings above); the next run on this store fails it `interrupted`",
            job.status
        );
    }
    // The job's results are out: now the budget (which may evict this very job). Not if they
    // could not be written: evicted, they would be nowhere; the next run on the store applies
    // the budget once it has shown its own job.
    if printed.is_ok() {
        match evict_to(&*store, budget).await {
            Ok(0) => {}
            Ok(_) => {
                if let Ok(None) = store.job(&id).await {
                    note!("job {id} evicted from the store once shown: it is past --max-bytes");
                }
            }
            Err(e) => note!("{e}"),
        }
    } else if printed.is_err()
        && job.status.is_terminal()
        && !matches!(store_url, StoreUrl::Memory)
        && past_budget(&*store, budget).await
    {
        note!(
            "job {id} kept in the store, --max-bytes not applied: its results could not be \
             written out (`rota status {id}` shows them; the next run on this store applies \
             the budget)"
        );
    }
    let c = Counts {
        finished: job.targets_done,
        total: job.targets_total,
        failed,
        retries: retries(),
    };
    let outcomes = (!reused).then(|| signals.outcomes());
    note!("{}", summary(&job, c, outcomes, started.elapsed()));
    printed?;
    Ok(exit_code(job.status))
}

/// What a look at the job being watched saw.
struct Look {
    counts: Counts,
    /// The store holds the job ended.
    terminal: bool,
    /// A target of it is being fetched, or its outcome stored.
    in_flight: bool,
}

/// A look at a job this run's runner created: its row (status and size) from the store, its
/// progress from the runner's reports. Never its targets: a look reads no stored result, so a
/// run of large pages does not read every page stored so far after each target.
async fn look_at_row(
    store: &dyn BatchStore,
    id: &str,
    signals: &Signals,
    retries: Option<usize>,
) -> Result<Option<Look>, StoreError> {
    let Some(job) = store.job(id).await? else {
        return Ok(None);
    };
    Ok(Some(Look {
        counts: signals.counts(job.targets_total, retries),
        terminal: job.status.is_terminal(),
        // The runner runs this job only: what it has in flight is this job's.
        in_flight: signals.inflight() > 0,
    }))
}

/// A look at a reused job, whose targets this run's runner may not fetch (done, or run by
/// another process on the same store): the job and its targets, from the store.
async fn look_at_view(
    runner: &Runner,
    id: &str,
    retries: Option<usize>,
) -> Result<Option<Look>, StoreError> {
    let Some(view) = runner.status(id).await? else {
        return Ok(None);
    };
    Ok(Some(Look {
        counts: Counts::of(&view, retries),
        terminal: view.job.status.is_terminal(),
        in_flight: view
            .targets
            .iter()
            .any(|t| t.status == TargetState::Running),
    }))
}

/// How long a second Ctrl-C or SIGTERM waits for the first one's cancel to be stored before it
/// ends the process anyway (a store that hangs must not keep it from quitting).
const CANCEL_GRACE: Duration = Duration::from_secs(5);

/// The first Ctrl-C or SIGTERM, handed to the command: it cancels its jobs, then drops this,
/// which tells a second signal that the cancel is stored.
pub(crate) struct Interrupt {
    /// The shell's exit code for the signal: 130 for Ctrl-C, 143 for SIGTERM.
    pub(crate) code: i32,
    /// Dropped once the cancel is stored.
    _stored: oneshot::Sender<()>,
}

/// Ends the process at once for an interrupt the command took off `interrupts` only once its
/// jobs were over (it came during the command's last look at them: a reused job's first look
/// reads every stored result), as a signal from then on does: there is nothing to cancel. A
/// command calls it as it stops listening, so that such a signal is not dropped unheard.
pub(crate) fn exit_if_interrupted(interrupts: &mut mpsc::Receiver<Interrupt>) {
    if let Ok(interrupt) = interrupts.try_recv() {
        note!("interrupted");
        std::process::exit(interrupt.code);
    }
}

/// A signal of the same kind as the first that comes this soon after it is the same
/// interrupt, not a second one: GNU `timeout` sends its signal twice, to the command and then
/// to its process group, which holds the command too (microseconds apart). A person pressing
/// Ctrl-C twice takes longer; one who is quicker presses again.
const SAME_SIGNAL: Duration = Duration::from_millis(200);

/// The first Ctrl-C (or SIGTERM, as `timeout`, `kill` and service managers send) arrives on
/// the channel; the second of either ends the process, with the shell's code for it (130 for
/// Ctrl-C, 143 for SIGTERM), once the command has dropped the first one's [`Interrupt`] (its
/// cancel stored), or after [`CANCEL_GRACE`]: two signals close together must not leave the
/// job live in the store. (On Unix, the first one's kind again within [`SAME_SIGNAL`] is the
/// first one repeated, and ignored.) Once the command has dropped the receiver (its jobs are
/// over: there is nothing to cancel), the first signal ends the process at once. The handlers
/// are installed before this returns.
pub(crate) fn interrupts() -> Result<mpsc::Receiver<Interrupt>, String> {
    let (tx, rx) = mpsc::channel(1);
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut sigint =
            signal(SignalKind::interrupt()).map_err(|e| format!("listening for Ctrl-C: {e}"))?;
        let mut sigterm =
            signal(SignalKind::terminate()).map_err(|e| format!("listening for SIGTERM: {e}"))?;
        tokio::spawn(async move {
            // The exit code of the next of either signal, if one comes.
            let mut next = async || {
                tokio::select! {
                    s = sigint.recv() => s.map(|()| 130),
                    s = sigterm.recv() => s.map(|()| 143),
                }
            };
            let Some(first_code) = next().await else {
                return;
            };
            let first_at = Instant::now();
            let (first, cancelled) = oneshot::channel();
            let first = Interrupt {
                code: first_code,
                _stored: first,
            };
            if tx.send(first).await.is_err() {
                // The command has stopped listening: nothing to cancel.
                note!("interrupted");
                std::process::exit(first_code);
            }
            while let Some(code) = next().await {
                if code == first_code && first_at.elapsed() < SAME_SIGNAL {
                    continue;
                }
                let _ = tokio::time::timeout(CANCEL_GRACE, cancelled).await;
                note!("interrupted");
                std::process::exit(code);
            }
        });
    }
    #[cfg(not(unix))]
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_err() {
            return;
        }
        let (first, cancelled) = oneshot::channel();
        let first = Interrupt {
            code: 130,
            _stored: first,
        };
        if tx.send(first).await.is_err() {
            // The command has stopped listening: nothing to cancel.
            note!("interrupted");
            std::process::exit(130);
        }
        if tokio::signal::ctrl_c().await.is_ok() {
            let _ = tokio::time::timeout(CANCEL_GRACE, cancelled).await;
            note!("interrupted");
            std::process::exit(130);
        }
    });
    Ok(rx)
}

/// Prints one JSON line per target, each decoded from its stored row as it is printed and
/// the row then let go: the targets are in memory once, as stored, not a second time decoded.
fn print_targets(rows: Vec<TargetRow>) -> Result<(), String> {
    let mut out = BufWriter::new(std::io::stdout().lock());
    for row in rows {
        let t = row.to_status();
        drop(row);
        let line =
            serde_json::to_string(&t).map_err(|e| format!("encoding target {}: {e}", t.idx))?;
        writeln!(out, "{line}").map_err(|e| format!("writing stdout: {e}"))?;
    }
    out.flush().map_err(|e| format!("writing stdout: {e}"))
}

/// `job ID partial: 3/4 done, 1 failed, 2 retries, 1.3s` (no retries of a reused job); the
/// targets neither done nor failed are counted apart: those fetched to an outcome the store did
/// not take (`2 not stored`: of the `outcomes` this run fetched, those the store does not show
/// finished; none for a reused job, `None`), and those never run to an outcome (`6 not run`).
pub fn summary(job: &Job, c: Counts, outcomes: Option<usize>, elapsed: Duration) -> String {
    let why = if job.error.is_empty() {
        String::new()
    } else {
        format!(" ({})", job.error)
    };
    let left = c.total.saturating_sub(c.finished);
    let unstored = outcomes.unwrap_or(0).saturating_sub(c.finished).min(left);
    let mut rest = String::new();
    if unstored > 0 {
        rest += &format!(", {unstored} not stored");
    }
    if left > unstored {
        rest += &format!(", {} not run", left - unstored);
    }
    format!(
        "job {} {}{why}: {}/{} done, {} failed{rest}{}, {:.1}s",
        job.id,
        job.status,
        c.finished.saturating_sub(c.failed),
        c.total,
        c.failed,
        c.retries_shown(),
        elapsed.as_secs_f64()
    )
}

fn submit_error(e: &SubmitError) -> String {
    match e {
        SubmitError::TooManyTargets { .. } => {
            format!("{e}: split the file, or raise the cap with --targets-per-job")
        }
        SubmitError::CallerBusy => {
            format!("{e}: this caller already has a live job; wait, or raise --jobs-per-caller")
        }
        SubmitError::Busy => format!("{e}: too many live jobs; wait, or raise --jobs-total"),
        _ => format!("submitting the job: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use rota::{Job, JobStatus, JobView, StoreError, TargetState, TargetStatus};

    use super::*;

    /// A refused submit names the flag that raises its cap. (From `rota run` only too many
    /// targets can happen: its one submit meets a store no other process holds, whose live
    /// jobs the runner's start failed; the caps' words stand for a store shared some day.)
    #[test]
    fn a_refused_submit_names_the_flag_that_raises_its_cap() {
        for (e, want) in [
            (
                SubmitError::TooManyTargets { max: 2, got: 3 },
                "too many targets (3 > 2): split the file, or raise the cap with \
                 --targets-per-job",
            ),
            (
                SubmitError::CallerBusy,
                "caller busy: this caller already has a live job; wait, or raise \
                 --jobs-per-caller",
            ),
            (
                SubmitError::Busy,
                "jobs busy: too many live jobs; wait, or raise --jobs-total",
            ),
            (
                SubmitError::Store(StoreError::Closed),
                "submitting the job: store: runner closed",
            ),
        ] {
            assert_eq!(submit_error(&e), want);
        }
    }

    /// A job failed for the outcomes the store did not take (a full disk): of the four
    /// targets this run fetched to an outcome, two are not stored, and are counted apart from
    /// the one never run. (The store shows them `running`, as SQLite keeps them; redb's file
    /// may show them `pending`: the count is the run's, not the states'.)
    #[test]
    fn the_summary_counts_targets_left_running_apart_from_those_not_run() {
        let states = [
            TargetState::Done,
            TargetState::Failed,
            TargetState::Running,
            TargetState::Running,
            TargetState::Pending,
        ];
        let view = JobView {
            job: Job {
                id: "j".into(),
                caller: "c".into(),
                status: JobStatus::Failed,
                error: "store: the outcome of a target could not be stored".into(),
                targets_total: states.len(),
                targets_done: 2,
                created_at: 0,
            },
            targets: states
                .iter()
                .enumerate()
                .map(|(idx, &status)| TargetStatus {
                    idx,
                    url: String::new(),
                    status,
                    result: None,
                    error: String::new(),
                    hint: String::new(),
                })
                .collect(),
        };
        assert_eq!(
            summary(
                &view.job,
                Counts::of(&view, Some(0)),
                Some(4),
                Duration::from_millis(1200)
            ),
            "job j failed (store: the outcome of a target could not be stored): 1/5 done, \
             1 failed, 2 not stored, 1 not run, 0 retries, 1.2s"
        );
    }

    #[test]
    fn the_input_cap_is_a_mib_a_target_at_least_16_mib_and_at_most_1_gib() {
        assert_eq!(input_cap(32), 32 << 20);
        assert_eq!(input_cap(1), 16 << 20);
        assert_eq!(input_cap(1024), 1 << 30);
        assert_eq!(input_cap(1025), 1 << 30);
        assert_eq!(input_cap(usize::MAX), 1 << 30);
    }

    /// Input that is not UTF-8 says where its first bad byte is.
    #[test]
    fn input_that_is_not_utf8_says_where() {
        for (bytes, at) in [
            (&b"\xff[]"[..], "line 1 column 1"),
            (
                b"\"https://a.example/\"\n\"https://b.example/\xe9\"",
                "line 2 column 20",
            ),
        ] {
            let e = read_at_most(bytes, 100, "t.json").unwrap_err();
            assert_eq!(
                e,
                format!(
                    "t.json: not UTF-8 text (a byte that is not UTF-8 at {at}); give the \
                     targets as UTF-8 JSON"
                )
            );
        }
    }

    #[test]
    fn input_up_to_the_cap_is_read_and_past_it_refused() {
        assert_eq!(read_at_most(&b"abc"[..], 3, "f").unwrap(), "abc");
        let e = read_at_most(&b"abcd"[..], 3, "f").unwrap_err();
        assert!(e.starts_with("f: larger than 0 MiB"), "{e}");
        // Up to the cap, bytes that are not UTF-8 are read, then refused as such.
        let e = read_at_most(&b"\xff\xfe"[..], 3, "f").unwrap_err();
        assert!(e.starts_with("f: not UTF-8 text"), "{e}");
    }

    /// An endless input (`yes URL | rota run -`) is refused once past the cap, not read for
    /// ever into memory.
    #[test]
    fn an_endless_input_is_refused_at_the_cap() {
        let e = read_at_most(std::io::repeat(b'a'), 16 << 20, "stdin").unwrap_err();
        assert!(e.starts_with("stdin: larger than 16 MiB"), "{e}");
    }

    /// A store that answers job rows and nothing else: any read of a target is an error.
    struct RowsOnly(rota_store_memory::MemoryStore);

    #[async_trait::async_trait]
    impl BatchStore for RowsOnly {
        async fn admit(
            &self,
            _: &rota::NewJob,
            _: &rota::Caps,
        ) -> Result<rota::Admission, StoreError> {
            Err(StoreError::Closed)
        }
        async fn job(&self, id: &str) -> Result<Option<rota::JobRow>, StoreError> {
            self.0.job(id).await
        }
        async fn targets(&self, _: &str) -> Result<Vec<rota::TargetRow>, StoreError> {
            Err(StoreError::Closed)
        }
        async fn start_target(
            &self,
            _: &str,
            _: usize,
            _: i64,
        ) -> Result<Option<rota::TargetRow>, StoreError> {
            Err(StoreError::Closed)
        }
        async fn finish_target(
            &self,
            _: &str,
            _: usize,
            _: &rota::TargetWrite,
            _: i64,
            _: Option<JobStatus>,
        ) -> Result<bool, StoreError> {
            Err(StoreError::Closed)
        }
        async fn set_status(
            &self,
            _: &str,
            _: JobStatus,
            _: &str,
            _: i64,
        ) -> Result<bool, StoreError> {
            Err(StoreError::Closed)
        }
        async fn touch(&self, _: &str, _: i64) -> Result<bool, StoreError> {
            Err(StoreError::Closed)
        }
        async fn sweep(&self, _: i64, _: i64) -> Result<usize, StoreError> {
            Err(StoreError::Closed)
        }
        async fn evict(&self, _: u64) -> Result<usize, StoreError> {
            Err(StoreError::Closed)
        }
        async fn recover(&self, _: &str, _: i64) -> Result<usize, StoreError> {
            Err(StoreError::Closed)
        }
        async fn live_jobs(&self, _: Option<&str>) -> Result<usize, StoreError> {
            Err(StoreError::Closed)
        }
        async fn total_bytes(&self) -> Result<u64, StoreError> {
            Err(StoreError::Closed)
        }
    }

    /// A memory store holding one queued job `j` of `targets` pending targets
    /// (`https://example.com/0`, …), admitted at time 1.
    async fn memory_with_job_j(targets: usize) -> rota_store_memory::MemoryStore {
        let memory = rota_store_memory::MemoryStore::new();
        let job = rota::NewJob {
            id: "j".into(),
            caller: "c".into(),
            class: CallerClass::Fleet,
            idem_key: "k".into(),
            targets: (0..targets)
                .map(|i| (format!("https://example.com/{i}"), "{}".into()))
                .collect(),
            now: 1,
        };
        let caps = rota::Caps {
            targets_per_job: 32,
            jobs_per_caller: 1,
            jobs_total: 1,
            ttl_secs: 3600,
        };
        assert_eq!(
            memory.admit(&job, &caps).await.unwrap(),
            rota::Admission::Created
        );
        memory
    }

    /// A store is past its budget only when it holds more than the budget: one that holds
    /// exactly that much would evict nothing, so a run that cannot show its job says no word of
    /// a budget not applied. A store whose size cannot be read may be past it.
    #[tokio::test]
    async fn a_store_holding_exactly_its_budget_is_not_past_it() {
        let memory = memory_with_job_j(1).await;
        let total = memory.total_bytes().await.unwrap();
        assert!(total > 0);
        assert!(!past_budget(&memory, total).await);
        assert!(!past_budget(&memory, total + 1).await);
        assert!(past_budget(&memory, total - 1).await);
        assert!(past_budget(&RowsOnly(memory), u64::MAX).await);
    }

    /// A look at a job the run created reads the job's row, never its targets (each look
    /// would otherwise read every page stored so far): its counts are the runner's reports,
    /// its end the row's status, its target in flight the runner's in-flight count.
    #[tokio::test]
    async fn a_look_at_a_created_job_reads_its_row_and_no_target() {
        use rota::{Hooks, TargetWrite};

        let memory = memory_with_job_j(3).await;
        let page = TargetWrite::Done {
            result: r#"{"content":"a large page"}"#.into(),
        };
        let failed = TargetWrite::Failed {
            error: "HTTP 404".into(),
            hint: String::new(),
        };
        assert!(memory.finish_target("j", 0, &page, 2, None).await.unwrap());
        assert!(
            memory
                .finish_target("j", 1, &failed, 2, None)
                .await
                .unwrap()
        );
        let store = RowsOnly(memory);
        // What the runner reported: two outcomes, one of them failed; the third target in flight.
        let signals = Arc::new(Signals::default());
        let hooks = WakeHooks(signals.clone());
        hooks.inflight(1);
        hooks.target(None, Duration::ZERO, 26);
        hooks.target(
            Some(&rota::FetchError::Other("HTTP 404".into())),
            Duration::ZERO,
            0,
        );

        let look = look_at_row(&store, "j", &signals, Some(3))
            .await
            .unwrap()
            .unwrap();
        let want = Counts {
            finished: 2,
            total: 3,
            failed: 1,
            retries: Some(3),
        };
        assert_eq!(look.counts, want);
        assert!(!look.terminal && look.in_flight);
        // The job cancelled, its target in flight not yet stored: not over.
        assert!(
            store
                .0
                .set_status("j", JobStatus::Cancelled, "", 3)
                .await
                .unwrap()
        );
        let look = look_at_row(&store, "j", &signals, Some(3))
            .await
            .unwrap()
            .unwrap();
        assert!(look.terminal && look.in_flight);
        hooks.inflight(0);
        let look = look_at_row(&store, "j", &signals, Some(3))
            .await
            .unwrap()
            .unwrap();
        assert!(look.terminal && !look.in_flight);
        assert!(
            look_at_row(&store, "gone", &signals, None)
                .await
                .unwrap()
                .is_none()
        );
        // The same job looked at through its targets (a reused job's look) fails here: the
        // look above read none.
        assert!(store.view("j").await.is_err());
    }
}
