//! The `rota` binary end to end: a loopback server started by the test, a SQLite store in a
//! temp dir.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use rota::{JobStatus, JobView, TargetState, TargetStatus};
use tempfile::TempDir;

use common::child::{KillOnDrop, Lines, within};

/// Long enough for anything below on a loaded machine; only there so a hang fails the test.
const LIMIT: Duration = Duration::from_secs(120);

/// The variables in which the environment names a proxy for `rota run`'s fetcher (reqwest reads
/// them, lower and upper case). Every `rota` a test starts has them removed: the tests fetch
/// from their own loopback server, which a proxy the machine names would not reach. A test
/// that wants one sets it after (as `rota_with`'s `vars` do).
const PROXY_VARS: [&str; 8] = [
    "http_proxy",
    "HTTP_PROXY",
    "https_proxy",
    "HTTPS_PROXY",
    "all_proxy",
    "ALL_PROXY",
    "no_proxy",
    "NO_PROXY",
];

/// `program`, with no proxy in its environment ([`PROXY_VARS`]).
fn without_proxy(program: impl AsRef<std::ffi::OsStr>) -> std::process::Command {
    let mut cmd = std::process::Command::new(program);
    for v in PROXY_VARS {
        cmd.env_remove(v);
    }
    cmd
}

/// `rota`, to run to its end, with no proxy in its environment.
fn rota_cmd() -> assert_cmd::Command {
    assert_cmd::Command::from_std(rota_process())
}

/// `rota`, to spawn and signal, with no proxy in its environment.
fn rota_process() -> std::process::Command {
    without_proxy(assert_cmd::cargo::cargo_bin!("rota"))
}

/// `sh`, for a pipeline that runs `rota`, with no proxy in its environment.
fn sh_cmd() -> assert_cmd::Command {
    assert_cmd::Command::from_std(without_proxy("sh"))
}

struct Env {
    dir: TempDir,
}

impl Env {
    fn new() -> Env {
        Env {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn db(&self) -> PathBuf {
        self.dir.path().join("jobs.sqlite3")
    }

    fn store(&self) -> String {
        format!("sqlite:{}", self.db().display())
    }

    fn file(&self, name: &str, contents: &str) -> PathBuf {
        let p = self.dir.path().join(name);
        std::fs::write(&p, contents).unwrap();
        p
    }

    /// Runs `rota ARGS` with `stdin` and `ROTA_STORE` set to the temp db, off the runtime.
    async fn rota(&self, args: &[&str], stdin: Option<&str>) -> Output {
        self.rota_with(args, stdin, &[]).await
    }

    /// [`rota`](Self::rota) with the environment variables `vars` set too.
    async fn rota_with(&self, args: &[&str], stdin: Option<&str>, vars: &[(&str, &str)]) -> Output {
        let mut cmd = rota_cmd();
        cmd.current_dir(self.dir.path())
            .env("USER", "tester")
            .env("ROTA_STORE", self.store())
            .env_remove("RUST_LOG")
            .envs(vars.iter().copied())
            .args(args)
            .timeout(LIMIT);
        if let Some(s) = stdin {
            cmd.write_stdin(s.to_owned());
        }
        tokio::task::spawn_blocking(move || cmd.output().unwrap())
            .await
            .unwrap()
    }
}

fn code(o: &Output) -> i32 {
    o.status.code().unwrap_or(-1)
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// stdout as one `TargetStatus` per line.
fn lines(o: &Output) -> Vec<TargetStatus> {
    String::from_utf8(o.stdout.clone())
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// The job id from `job ID created`.
fn job_id(o: &Output) -> String {
    let err = stderr(o);
    err.lines()
        .find_map(|l| {
            let rest = l.strip_prefix("job ")?;
            let (id, tail) = rest.split_once(' ')?;
            (tail.starts_with("created") || tail.starts_with("reused")).then(|| id.to_owned())
        })
        .unwrap_or_else(|| panic!("no job id in stderr:\n{err}"))
}

/// Unix seconds now, as the store keeps its times.
fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// Waits until the unix clock reads a second later than `second`.
async fn until_past_second(second: u64) {
    while unix_now() <= second {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn json_array(urls: &[String]) -> String {
    serde_json::to_string(urls).unwrap()
}

/// `rota status ID` on the test's store, which must answer; the job read back.
async fn view_of(env: &Env, id: &str) -> JobView {
    let o = env.rota(&["status", id], None).await;
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    serde_json::from_slice(&o.stdout).unwrap()
}

/// `rota ARGS` on the test's store with `USER` and `USERNAME` removed, then `vars` set.
async fn rota_with(env: &Env, vars: &[(&str, &str)], args: &[&str]) -> Output {
    let mut cmd = rota_cmd();
    cmd.current_dir(env.dir.path())
        .env_remove("USER")
        .env_remove("USERNAME")
        .env("ROTA_STORE", env.store())
        .env_remove("RUST_LOG")
        .envs(vars.iter().copied())
        .args(args)
        .timeout(LIMIT);
    tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap()
}

/// The caller is `--caller NAME`, by default `$USER`, else `$USERNAME`, else `local`; and
/// idempotency is per caller: the same targets from another caller are a job of its own,
/// from the same caller (however it is named) the stored job back, fetched again never.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_caller_is_the_flag_else_user_else_username_else_local_and_reuse_is_per_caller() {
    let s = common::start().await;
    let env = Env::new();
    let f = env.file("t.json", &json_array(&[s.url("/busy/caller/0")]));
    let f = f.to_str().unwrap();
    // Runs `rota run FILE` with `vars` and `flags`: its job id, created or reused, and caller.
    let run = async |vars: &[(&str, &str)], flags: &[&str]| {
        let o = rota_with(&env, vars, &[&["run", f], flags].concat()).await;
        assert_eq!(code(&o), 0, "{vars:?} {flags:?}: {}", stderr(&o));
        let id = job_id(&o);
        let created = stderr(&o).contains(&format!("job {id} created"));
        (id.clone(), created, view_of(&env, &id).await.job.caller)
    };

    let (windows, created, caller) = run(&[("USERNAME", "winuser")], &[]).await;
    assert!(created);
    assert_eq!(caller, "winuser", "$USERNAME without $USER");

    let (local, created, caller) = run(&[], &[]).await;
    assert!(created, "another caller's targets are not reused");
    assert_ne!(local, windows);
    assert_eq!(caller, "local", "neither $USER nor $USERNAME");

    let (user, created, caller) = run(&[("USER", "tester"), ("USERNAME", "winuser")], &[]).await;
    assert!(created);
    assert_eq!(caller, "tester", "$USER before $USERNAME");
    assert!(user != windows && user != local);

    // The flag wins over $USER; the same caller and targets: the stored job back.
    let vars = [("USER", "tester")];
    let (again, created, caller) = run(&vars, &["--caller", "winuser"]).await;
    assert!(!created, "the same caller's targets are reused");
    assert_eq!((again, caller), (windows, "winuser".to_owned()));
    assert_eq!(s.hits("busy/caller"), 3, "fetched once per caller");
}

/// `ROTA_STORE` set but empty counts as unset: the default store, in the current directory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_rota_store_means_the_default_store() {
    let s = common::start().await;
    let env = Env::new();
    let f = env.file("t.json", &json_array(&[s.url("/page/a")]));
    let mut cmd = rota_cmd();
    cmd.current_dir(env.dir.path())
        .env("ROTA_STORE", "")
        .env_remove("RUST_LOG")
        .arg("run")
        .arg(&f)
        .timeout(LIMIT);
    let o = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(env.dir.path().join("rota.sqlite3").is_file());
}

/// `--store` wins over `ROTA_STORE`, even over one that is not a store URL, before or after
/// the subcommand; without the flag, such a `ROTA_STORE` is an error that names it (not the
/// `--store` flag, which was not given).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_flag_wins_over_a_bad_rota_store_which_alone_is_named() {
    let env = Env::new();
    let id = "0123456789abcdef0123456789abcdef";
    let bad = [("ROTA_STORE", "bogus")];
    for args in [
        &["--store", "memory", "status", id][..],
        &["status", id, "--store", "memory"][..],
        &["--store=memory", "upgrade"][..],
    ] {
        let o = env.rota_with(args, None, &bad).await;
        assert_eq!(code(&o), 1, "{args:?}");
        assert!(
            stderr(&o).contains("the memory store keeps nothing between commands"),
            "{args:?}: {}",
            stderr(&o)
        );
    }
    let o = env.rota_with(&["status", id], None, &bad).await;
    assert_eq!(code(&o), 1);
    let e = stderr(&o);
    assert!(e.contains("ROTA_STORE"), "{e}");
    assert!(e.contains("unknown store \"bogus\""), "{e}");
    assert!(!e.contains("--store <URL>"), "{e}");
    // Help and version still answer.
    let o = env.rota_with(&["status", "--help"], None, &bad).await;
    assert_eq!(code(&o), 0, "{}", stderr(&o));
}

/// A `RUST_LOG` directive for a module of the HTTP stack (more specific than the crate-wide
/// off the binary adds) does not bring back its records, which name the host they connect to.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rust_log_naming_a_module_of_the_http_stack_leaves_hosts_out_of_the_logs() {
    let s = common::start().await;
    let env = Env::new();
    let f = env.file("t.json", &json_array(&[s.url("/page/a")]));
    for filter in [
        "debug,hyper_util::client::legacy::connect::http=trace",
        "debug,reqwest::connect=trace",
    ] {
        let mut cmd = rota_cmd();
        cmd.current_dir(env.dir.path())
            .env("RUST_LOG", filter)
            .args(["--store", "memory", "run"])
            .arg(&f)
            .timeout(LIMIT);
        let o = tokio::task::spawn_blocking(move || cmd.output().unwrap())
            .await
            .unwrap();
        let err = stderr(&o);
        assert_eq!(code(&o), 0, "{err}");
        // Our own debug records are there, and no host.
        assert!(err.contains("DEBUG"), "{err}");
        assert!(!err.contains("127.0.0.1"), "RUST_LOG={filter}:\n{err}");
    }
}

/// Every way the built-in fetcher fails — a redirect loop, a redirect off HTTP, an error
/// status, busy until it gives up, a timeout, a body over the cap, a refused connection, a
/// host that does not resolve — stores its error, and logs no host, even at `RUST_LOG=trace`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_failure_of_a_fetch_puts_its_host_in_the_logs() {
    let s = common::start().await;
    let env = Env::new();
    // A port nothing listens on (bound, then let go).
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let urls = [
        s.url("/loop"),
        s.url("/to-ftp"),
        s.url("/status/404"),
        s.url("/always-busy"),
        s.url("/sleep/5000"),
        s.url("/big/5000"),
        format!("http://127.0.0.1:{closed}/refused"),
        "http://no-such-host.invalid/x".to_owned(),
    ];
    let f = env.file("t.json", &json_array(&urls));
    let mut cmd = rota_cmd();
    cmd.current_dir(env.dir.path())
        .env("RUST_LOG", "trace")
        .args([
            "--store",
            "memory",
            "run",
            "--retry-wait",
            "10ms",
            "--retry-for",
            "50ms",
        ])
        .args(["--timeout", "300ms", "--max-body", "1KB"])
        .arg(&f)
        .timeout(LIMIT);
    let o = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    let err = stderr(&o);
    assert_eq!(code(&o), 1, "{err}");
    assert!(err.contains("DEBUG"), "{err}");
    let got = lines(&o);
    assert_eq!(got.len(), urls.len(), "{err}");
    // Each failed its own way (so each failure path ran) ...
    let why = [
        "too many redirects",
        "a redirect to an address rota cannot fetch",
        "HTTP 404",
        "HTTP 503",
        "timed out",
        "body larger than",
        "could not connect",
        "could not connect",
    ];
    for (t, why) in got.iter().zip(why) {
        assert_eq!(t.status, TargetState::Failed, "{t:?}");
        assert!(t.error.contains(why), "{t:?}");
    }
    // ... and no log line does.
    for host in ["127.0.0.1", "no-such-host", "files.example"] {
        assert!(!err.contains(host), "{host} in the logs:\n{err}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_prints_one_json_line_per_target_in_idx_order_and_exits_0_when_all_are_done() {
    let s = common::start().await;
    let env = Env::new();
    let urls: Vec<String> = ["/page/a", "/page/b", "/page/c"].map(|p| s.url(p)).to_vec();
    let f = env.file("t.json", &json_array(&urls));
    let o = env.rota(&["run", f.to_str().unwrap()], None).await;
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let got = lines(&o);
    assert_eq!(got.len(), 3);
    for (i, (t, url)) in got.iter().zip(&urls).enumerate() {
        assert_eq!((t.idx, &t.url, t.status), (i, url, TargetState::Done));
        let r = t.result.as_ref().unwrap();
        assert_eq!(r.content, format!("page {}", ["a", "b", "c"][i]));
        assert_eq!(r.meta["status"], 200);
    }
    let id = job_id(&o);
    assert_eq!(id.len(), 32);
    let err = stderr(&o);
    assert!(
        err.contains(&format!("job {id} created (3 targets)")),
        "{err}"
    );
    assert!(
        err.contains(&format!("job {id} done: 3/3 done, 0 failed")),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_exits_2_when_the_job_is_partial() {
    let s = common::start().await;
    let env = Env::new();
    let f = env.file("t.json", &json_array(&[s.url("/ok"), s.url("/status/404")]));
    let o = env.rota(&["run", f.to_str().unwrap()], None).await;
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    let got = lines(&o);
    assert_eq!(got[0].status, TargetState::Done);
    assert_eq!(got[1].status, TargetState::Failed);
    assert_eq!(got[1].error, "HTTP 404 Not Found");
    assert!(!got[1].hint.is_empty());
    assert!(
        stderr(&o).contains("partial: 1/2 done, 1 failed"),
        "{}",
        stderr(&o)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_exits_1_when_every_target_failed() {
    let s = common::start().await;
    let env = Env::new();
    let f = env.file(
        "t.json",
        &json_array(&[s.url("/status/500"), s.url("/status/404")]),
    );
    let o = env.rota(&["run", f.to_str().unwrap()], None).await;
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    let got = lines(&o);
    assert_eq!(got[0].error, "HTTP 500 Internal Server Error");
    assert_eq!(got[1].error, "HTTP 404 Not Found");
}

/// Options the built-in fetcher would refuse (one it does not support, an invalid grep
/// pattern) are refused with the file's other bad contents, before the store is opened: they
/// used to make a job whose targets each failed for them. The error names the target's item in
/// an array and its line in JSON lines, as for the contents' other errors.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn options_the_fetcher_refuses_fail_before_the_job_is_made() {
    let env = Env::new();
    for (options, says) in [
        (
            serde_json::json!({"jq": ".a"}),
            "option jq is not supported by the built-in fetcher; the built-in fetcher does a \
             plain GET and supports only the grep option",
        ),
        (
            serde_json::json!({"grep": "a(b"}),
            "invalid grep pattern: unclosed group at column 2; grep is a regular expression",
        ),
    ] {
        let second = serde_json::json!({"url": "https://a.example/2", "options": options});
        let array = serde_json::json!(["https://a.example/1", second]).to_string();
        // JSON lines, the second target on line 4.
        let lines = format!("\"https://a.example/1\"\n\n\n{second}\n");
        for (name, text, place) in [
            ("t.json", array, "item 2 (idx 1)"),
            ("t.jsonl", lines, "line 4"),
        ] {
            let f = env.file(name, &text);
            let o = env.rota(&["run", f.to_str().unwrap()], None).await;
            assert_eq!(code(&o), 1, "{options}: {}", stderr(&o));
            assert!(
                stderr(&o).contains(&format!("rota: error: {}: {place}: {says}", f.display())),
                "{options}: {}",
                stderr(&o)
            );
            assert!(o.stdout.is_empty());
            assert!(!env.db().exists(), "{options}: the store was opened");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_reads_json_lines_from_stdin() {
    let s = common::start().await;
    let env = Env::new();
    let input = format!(
        "\"{}\"\n\n{{\"url\": \"{}\", \"options\": {{\"grep\": \"^rust\"}}}}\n",
        s.url("/page/x"),
        s.url("/ok")
    );
    let o = env.rota(&["run", "-"], Some(&input)).await;
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let got = lines(&o);
    assert_eq!(got[0].result.as_ref().unwrap().content, "page x");
    assert_eq!(
        got[1].result.as_ref().unwrap().content,
        "rust is here\nrusty end"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_page_is_retried_and_the_retries_are_counted() {
    let s = common::start().await;
    let env = Env::new();
    let f = env.file("t.json", &json_array(&[s.url("/busy/k/2")]));
    let o = env
        .rota(&["run", f.to_str().unwrap(), "--retry-wait", "50ms"], None)
        .await;
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(lines(&o)[0].result.as_ref().unwrap().content, "fine k");
    assert!(
        stderr(&o).contains("1/1 done, 0 failed, 2 retries"),
        "{}",
        stderr(&o)
    );
}

/// Where stderr is not a terminal, the progress is a plain line
/// `progress: N/M finished, F failed, R retries` (`1 retry` for one), printed whenever a count
/// changes and only then, between the `created` line and the summary.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_off_a_terminal_is_a_plain_line_printed_whenever_a_count_changes() {
    let s = common::start().await;
    let env = Env::new();
    // A busy answer, then a page in flight for 3 s (the watcher looks every 0.5 s at the
    // least), then a failure.
    let urls = [
        s.url("/busy/p/1"),
        s.url("/sleep/3000"),
        s.url("/status/404"),
    ];
    let f = env.file("t.json", &json_array(&urls));
    let o = env
        .rota(&["run", f.to_str().unwrap(), "--retry-wait", "50ms"], None)
        .await;
    let err = stderr(&o);
    assert_eq!(code(&o), 2, "{err}");
    let all: Vec<&str> = err.lines().collect();
    let id = job_id(&o);
    assert_eq!(all[0], format!("job {id} created (3 targets)"), "{err}");
    assert!(
        all.last()
            .unwrap()
            .starts_with(&format!("job {id} partial: ")),
        "{err}"
    );
    let progress = &all[1..all.len() - 1];
    assert!(!progress.is_empty(), "{err}");

    let line =
        regex::Regex::new(r"^progress: (\d+)/3 finished, (\d+) failed, (\d+) (retry|retries)$")
            .unwrap();
    let mut last: Option<[usize; 3]> = None;
    for l in progress {
        let c = line
            .captures(l)
            .unwrap_or_else(|| panic!("{l:?} is not a progress line:\n{err}"));
        let n: [usize; 3] = [1, 2, 3].map(|i| c[i].parse().unwrap());
        let unit = if n[2] == 1 { "retry" } else { "retries" };
        assert_eq!(&c[4], unit, "{l}");
        if let Some(prev) = last {
            assert_ne!(n, prev, "printed again without a change:\n{err}");
            assert!(
                prev.iter().zip(&n).all(|(a, b)| a <= b),
                "a count went down:\n{err}"
            );
        }
        last = Some(n);
    }
    assert!(
        progress.contains(&"progress: 1/3 finished, 0 failed, 1 retry"),
        "the counts while the slow page was in flight:\n{err}"
    );
    // The last line has the final counts: the watcher asks whether the runner is done with the
    // job before it looks at the job, not after.
    assert_eq!(
        progress.last().copied(),
        Some("progress: 3/3 finished, 1 failed, 1 retry"),
        "{err}"
    );
}

/// `rota run` of the pages `urls`, each busy one tried again every 50 ms for 300 ms, which
/// must fail.
async fn run_busy(env: &Env, urls: &[String]) -> Output {
    let f = env.file("busy.json", &json_array(urls));
    let args = [
        "run",
        f.to_str().unwrap(),
        "--retry-wait",
        "50ms",
        "--retry-for",
        "300ms",
    ];
    let o = env.rota(&args, None).await;
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    o
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_always_busy_fails_after_retry_for() {
    let s = common::start().await;
    let env = Env::new();
    let o = run_busy(&env, &[s.url("/always-busy")]).await;
    let t = &lines(&o)[0];
    assert_eq!(t.status, TargetState::Failed);
    assert_eq!(t.error, "HTTP 503 Service Unavailable");

    // Counted: every busy answer but the last, which was not tried again.
    let o = run_busy(&env, &[s.url("/busy/k/1000000")]).await;
    let fetches = s.hits("busy/k");
    assert!(fetches >= 2, "{fetches} fetches");
    let err = stderr(&o);
    assert!(err.contains("created (1 target)"), "{err}");
    let retries = match fetches - 1 {
        1 => "1 retry".to_owned(),
        n => format!("{n} retries"),
    };
    assert!(
        err.contains(&format!("1 failed, {retries},")),
        "{fetches} fetches: {err}"
    );
}

/// A page that stays busy (503 or 429) past `--retry-for` is stored failed with its last
/// answer and without a hint, on stdout as in the store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_busy_past_retry_for_is_stored_failed_without_a_hint() {
    let s = common::start().await;
    let env = Env::new();
    let o = run_busy(&env, &[s.url("/always-busy"), s.url("/too-many")]).await;
    let view = view_of(&env, &job_id(&o)).await;
    assert_eq!(view.targets, lines(&o));
    let got: Vec<_> = view
        .targets
        .iter()
        .map(|t| (t.status, t.error.as_str(), t.hint.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            (TargetState::Failed, "HTTP 503 Service Unavailable", ""),
            (TargetState::Failed, "HTTP 429 Too Many Requests", ""),
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_timeout_and_max_body_flags_reach_the_fetcher() {
    let s = common::start().await;
    let env = Env::new();
    let f = env.file(
        "t.json",
        &json_array(&[s.url("/sleep/3000"), s.url("/big/2048")]),
    );
    // A timeout the 2 KiB page answers well within, even on a loaded machine.
    let args = [
        "run",
        f.to_str().unwrap(),
        "--timeout",
        "1s",
        "--max-body",
        "1KiB",
    ];
    let o = env.rota(&args, None).await;
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    let got = lines(&o);
    assert_eq!(got[0].error, "timed out after 1s");
    assert_eq!(got[1].error, "body larger than the 1 KiB cap");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_past_max_bytes_is_shown_whole_then_evicted() {
    let s = common::start().await;
    let env = Env::new();
    let urls: Vec<String> = ["/page/a", "/page/b"].map(|p| s.url(p)).to_vec();
    let f = env.file("t.json", &json_array(&urls));
    let redb = format!("redb:{}", env.dir.path().join("jobs.redb").display());
    for store in [env.store(), redb] {
        // A budget of one byte: the job's results are past it as soon as it ends.
        let o = env
            .rota(
                &[
                    "--store",
                    &store,
                    "run",
                    "--max-bytes",
                    "1",
                    f.to_str().unwrap(),
                ],
                None,
            )
            .await;
        assert_eq!(code(&o), 0, "{store}: {}", stderr(&o));
        let got = lines(&o);
        assert_eq!(
            got.iter().map(|t| (&t.url, t.status)).collect::<Vec<_>>(),
            urls.iter()
                .map(|u| (u, TargetState::Done))
                .collect::<Vec<_>>(),
            "{store}: every result is shown"
        );
        let id = job_id(&o);
        let err = stderr(&o);
        assert!(
            err.contains(&format!(
                "job {id} evicted from the store once shown: it is past --max-bytes"
            )),
            "{store}: {err}"
        );
        let st = env.rota(&["--store", &store, "status", &id], None).await;
        assert_eq!(code(&st), 1, "{store}: evicted after it was shown");
    }

    // The demo likewise reports both jobs, then says they were evicted.
    let o = env.rota(&["demo", "--max-bytes", "1"], None).await;
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let out = String::from_utf8(o.stdout.clone()).unwrap();
    assert_eq!(out.matches(" targets done, ").count(), 2, "{out}");
    assert_eq!(out.matches("evicted once shown").count(), 2, "{out}");
    assert!(!out.contains("Read one back"), "{out}");
}

/// `sqlite:PATH` names a file even when PATH begins with `file:`: the bundled SQLite would read
/// such a name as a URI, whose query may pick a VFS without locks (`vfs=unix-none`), so that
/// two owners wrote one file at once and jobs were lost. The store is the file of that very
/// name, and it keeps a second owner out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sqlite_path_that_looks_like_a_uri_is_a_file_of_that_name() {
    let s = common::start().await;
    let env = Env::new();
    let name = "file:x.db?vfs=unix-none";
    let store = format!("sqlite:{name}");
    let targets = json_array(&[s.url("/ok")]);
    let o = env
        .rota(&["--store", &store, "run", "-"], Some(&targets))
        .await;
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let id = job_id(&o);
    let file = env.dir.path().join(name);
    assert!(file.is_file(), "no file named {name}");
    assert!(!env.dir.path().join("x.db").exists());

    let held = rota_store_sqlite::SqliteStore::open(&file).unwrap();
    let o = env.rota(&["--store", &store, "status", &id], None).await;
    assert_eq!(code(&o), 1);
    assert!(
        stderr(&o).contains("in use by another owner"),
        "{}",
        stderr(&o)
    );
    drop(held);
    let o = env.rota(&["--store", &store, "status", &id], None).await;
    assert_eq!(code(&o), 0, "{}", stderr(&o));
}

/// README: a store path "that names a directory is refused (... one ending in `.` or `..` as
/// naming a directory)". `sqlite:x/.` ends in `.`: it must be refused before anything is
/// opened, not made into the file `x` by SQLite (which resolves the `.`), which every later
/// command on `sqlite:x/.` then fails to find ("Not a directory").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_path_ending_in_a_dot_is_refused_and_makes_no_file() {
    let s = common::start().await;
    let env = Env::new();
    let targets = json_array(&[s.url("/ok")]);
    for (kind, name) in [("sqlite", "x"), ("redb", "y")] {
        let store = format!("{kind}:{name}/.");
        let o = env
            .rota(&["--store", &store, "run", "-"], Some(&targets))
            .await;
        let err = stderr(&o);
        assert_eq!(code(&o), 1, "{store}: {err}");
        assert!(err.contains("names a directory"), "{store}: {err}");
        assert!(
            !env.dir.path().join(name).exists(),
            "{store} made the file {name}: {err}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_reads_the_job_back_from_the_sqlite_file() {
    let s = common::start().await;
    let env = Env::new();
    let f = env.file("t.json", &json_array(&[s.url("/ok"), s.url("/status/404")]));
    let run = env.rota(&["run", f.to_str().unwrap()], None).await;
    let id = job_id(&run);
    assert!(env.db().exists());

    let o = env.rota(&["status", &id], None).await;
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let view: JobView = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(view.job.id, id);
    assert_eq!(view.job.caller, "tester");
    assert_eq!(view.job.status, JobStatus::Partial);
    assert_eq!((view.job.targets_done, view.job.targets_total), (2, 2));
    assert_eq!(view.targets, lines(&run), "status shows what run printed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_and_status_work_on_a_redb_store_and_run_on_a_memory_store() {
    let s = common::start().await;
    let env = Env::new();
    let f = env.file("t.json", &json_array(&[s.url("/ok")]));
    let redb = format!("redb:{}", env.dir.path().join("jobs.redb").display());
    let run = env
        .rota(&["--store", &redb, "run", f.to_str().unwrap()], None)
        .await;
    assert_eq!(code(&run), 0, "{}", stderr(&run));
    let st = env
        .rota(&["--store", &redb, "status", &job_id(&run)], None)
        .await;
    assert_eq!(code(&st), 0, "{}", stderr(&st));
    let view: JobView = serde_json::from_slice(&st.stdout).unwrap();
    assert_eq!(view.targets, lines(&run));

    let mem = env
        .rota(&["run", f.to_str().unwrap(), "--store", "memory"], None)
        .await;
    assert_eq!(code(&mem), 0, "{}", stderr(&mem));
    assert_eq!(lines(&mem)[0].result, lines(&run)[0].result);
    assert!(!env.db().exists(), "--store overrides ROTA_STORE");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn running_the_same_file_again_reuses_the_stored_job_without_fetching() {
    let s = common::start().await;
    let env = Env::new();
    let f = env.file("t.json", &json_array(&[s.url("/busy/once/0")]));
    let first = env.rota(&["run", f.to_str().unwrap()], None).await;
    let second = env.rota(&["run", f.to_str().unwrap()], None).await;
    assert_eq!(code(&second), 0, "{}", stderr(&second));
    assert_eq!(job_id(&second), job_id(&first));
    assert!(stderr(&second).contains("reused"), "{}", stderr(&second));
    assert_eq!(lines(&second), lines(&first));
    assert_eq!(s.hits("busy/once"), 1);
}

/// `--fresh` fetches every target again though the same caller ran them within `--ttl`: a new
/// job, said to be created; a later run without it reuses that newest job. (The store orders
/// jobs created in one second by id, so the fresh run waits for the next second.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_fresh_fetches_again_and_later_runs_reuse_the_new_job() {
    let s = common::start().await;
    let env = Env::new();
    let f = env.file("t.json", &json_array(&[s.url("/busy/fresh/0")]));
    let f = f.to_str().unwrap();
    let first = env.rota(&["run", f], None).await;
    assert_eq!(code(&first), 0, "{}", stderr(&first));
    let ran = unix_now();
    until_past_second(ran).await;
    let fresh = env.rota(&["run", "--fresh", f], None).await;
    let err = stderr(&fresh);
    assert_eq!(code(&fresh), 0, "{err}");
    let new = job_id(&fresh);
    assert_ne!(new, job_id(&first));
    assert!(
        err.starts_with(&format!("job {new} created (1 target)\n")),
        "{err}"
    );
    assert_eq!(s.hits("busy/fresh"), 2);

    let again = env.rota(&["run", f], None).await;
    assert_eq!(code(&again), 0, "{}", stderr(&again));
    assert_eq!(job_id(&again), new);
    assert!(stderr(&again).contains("reused"), "{}", stderr(&again));
    assert_eq!(s.hits("busy/fresh"), 2);
}

/// The same caller running the same file again within `--ttl` is told so in these words, and
/// shown the stored outcome with the progress line of its stored counts; once the job's last
/// activity is further back than `--ttl`, the file is a new job, fetched again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rerun_within_ttl_says_it_reuses_the_job_and_one_past_ttl_fetches_again() {
    let s = common::start().await;
    let env = Env::new();
    let urls = [
        s.url("/busy/r1/0"),
        s.url("/busy/r2/0"),
        s.url("/status/404"),
    ];
    let f = env.file("t.json", &json_array(&urls));
    let f = f.to_str().unwrap();
    let first = env.rota(&["run", f], None).await;
    assert_eq!(code(&first), 2, "{}", stderr(&first));
    let id = job_id(&first);

    let again = env.rota(&["run", f], None).await;
    let err = stderr(&again);
    assert_eq!(code(&again), 2, "{err}");
    // The job's last activity is no later than this.
    let shown = unix_now();
    let got: Vec<&str> = err.lines().collect();
    assert_eq!(got.len(), 3, "{err}");
    assert_eq!(
        got[0],
        format!(
            "job {id} reused: the same caller submitted the same targets within --ttl; \
             showing its stored outcome"
        )
    );
    // The busy answers of the first run were not stored, so none are claimed here.
    assert_eq!(got[1], "progress: 3/3 finished, 1 failed");
    let summary = regex::Regex::new(&format!(
        r"^job {id} partial: 2/3 done, 1 failed, \d+\.\ds$"
    ))
    .unwrap();
    assert!(summary.is_match(got[2]), "{err}");
    assert_eq!(lines(&again), lines(&first));
    assert_eq!((s.hits("busy/r1"), s.hits("busy/r2")), (1, 1));

    // Once a whole second has passed since then (the clock polled), `--ttl 1s` is past.
    until_past_second(shown).await;
    let late = env.rota(&["run", f, "--ttl", "1s"], None).await;
    let err = stderr(&late);
    assert_eq!(code(&late), 2, "{err}");
    let new = job_id(&late);
    assert_ne!(new, id, "reused past --ttl");
    assert!(
        err.starts_with(&format!("job {new} created (3 targets)\n")),
        "{err}"
    );
    assert_eq!((s.hits("busy/r1"), s.hits("busy/r2")), (2, 2));
}

/// The store keeps no ttl of its own: a run's sweep applies that run's `--ttl` to every
/// finished job in the store, another caller's too (as the README's flag table says). A run
/// with the default `--ttl` leaves an older job of another caller; one with `--ttl 1s`, once
/// that job's last activity is over a second back, deletes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runs_ttl_sweeps_every_callers_finished_jobs() {
    let s = common::start().await;
    let env = Env::new();
    let a = env.file("a.json", &json_array(&[s.url("/ok")]));
    let alice = env
        .rota(&["run", "--caller", "alice", a.to_str().unwrap()], None)
        .await;
    assert_eq!(code(&alice), 0, "{}", stderr(&alice));
    // Alice's job's last activity is no later than this.
    let finished = unix_now();
    let id = job_id(&alice);
    // A sweep deletes a lease older than `now - ttl`: with `--ttl 1s`, two whole seconds on.
    until_past_second(finished + 1).await;
    for (n, ttl) in [(1, None), (2, Some("1s"))] {
        let b = env.file(
            &format!("b{n}.json"),
            &json_array(&[s.url(&format!("/page/{n}"))]),
        );
        let mut args = vec!["run", "--caller", "bob", b.to_str().unwrap()];
        args.extend(ttl.iter().flat_map(|t| ["--ttl", *t]));
        let bob = env.rota(&args, None).await;
        assert_eq!(code(&bob), 0, "{}", stderr(&bob));
        let o = env.rota(&["status", &id], None).await;
        match ttl {
            None => assert_eq!(code(&o), 0, "swept by the default ttl: {}", stderr(&o)),
            Some(_) => {
                assert_eq!(code(&o), 1, "not swept by --ttl 1s");
                assert!(
                    stderr(&o).contains(&format!("no job {id} in sqlite:")),
                    "{}",
                    stderr(&o)
                );
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_of_an_unknown_id_is_a_clear_error() {
    let s = common::start().await;
    let env = Env::new();
    let f = env.file("t.json", &json_array(&[s.url("/ok")]));
    env.rota(&["run", f.to_str().unwrap()], None).await;
    let o = env
        .rota(&["status", "0123456789abcdef0123456789abcdef"], None)
        .await;
    assert_eq!(code(&o), 1);
    assert!(o.stdout.is_empty());
    assert!(
        stderr(&o).contains("no job 0123456789abcdef0123456789abcdef in sqlite:"),
        "{}",
        stderr(&o)
    );
}

/// A job id copied in upper case finds the job; text that is no job id says what one is, not
/// that the job may have expired; and a failed write of the job says why it failed (it said
/// "it is closed" of a full disk).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_finds_an_upper_case_id_explains_a_malformed_one_and_says_why_stdout_failed() {
    let s = common::start().await;
    let env = Env::new();
    let f = env.file("t.json", &json_array(&[s.url("/ok")]));
    let id = job_id(&env.rota(&["run", f.to_str().unwrap()], None).await);
    let o = env.rota(&["status", &id.to_uppercase()], None).await;
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let view: JobView = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(view.job.id, id);

    for bad in ["xyz", "' or 1=1 --", &format!("{id}0")] {
        let o = env.rota(&["status", bad], None).await;
        assert_eq!(code(&o), 1, "{bad}");
        assert!(
            stderr(&o).contains(&format!(
                "no job {bad} in sqlite:{}: a job id is 32 hexadecimal digits, as `rota run` \
                 printed it",
                env.db().display()
            )),
            "{bad}: {}",
            stderr(&o)
        );
    }

    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let o = rota_process()
        .current_dir(env.dir.path())
        .env("ROTA_STORE", env.store())
        .args(["status", &id])
        .stdout(full)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("writing stdout: No space left on device"),
        "{}",
        stderr(&o)
    );
}

/// An id is looked for as given before in lower case: a job a program stored through the
/// library under an upper-case id is found by it (not lost to the look for its lower case).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_finds_a_job_stored_under_an_upper_case_id_as_given() {
    use rota::{Admission, BatchStore, CallerClass, Caps, NewJob};
    let env = Env::new();
    let id = "0123456789ABCDEF0123456789ABCDEF";
    {
        let store = rota_store_sqlite::SqliteStore::open(env.db()).unwrap();
        let job = NewJob {
            id: id.into(),
            caller: "tester".into(),
            class: CallerClass::Fleet,
            idem_key: "k".into(),
            targets: vec![("http://127.0.0.1:9/a".into(), "{}".into())],
            now: 1_700_000_000,
        };
        let caps = Caps {
            targets_per_job: 32,
            jobs_per_caller: 1,
            jobs_total: 8,
            ttl_secs: 3600,
        };
        assert_eq!(store.admit(&job, &caps).await.unwrap(), Admission::Created);
    }
    let o = env.rota(&["status", id], None).await;
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let view: JobView = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(view.job.id, id);
    assert_eq!(view.targets.len(), 1);
}

/// A store path in the working directory that cannot be opened (here: a directory) gets no
/// word about its directory: it has none but the working one, which is there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_named_without_a_directory_that_cannot_be_opened_blames_no_directory() {
    let env = Env::new();
    std::fs::create_dir(env.dir.path().join("adir")).unwrap();
    for store in ["sqlite:adir", "redb:adir"] {
        let o = env
            .rota(
                &[
                    "--store",
                    store,
                    "status",
                    "0123456789abcdef0123456789abcdef",
                ],
                None,
            )
            .await;
        let err = stderr(&o);
        assert_eq!(code(&o), 1, "{store}: {err}");
        assert!(
            err.contains(&format!("opening the store {store}: ")),
            "{store}: {err}"
        );
        assert!(!err.contains("directory )"), "{store}: {err}");
        assert!(!err.contains("there is no directory"), "{store}: {err}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_on_a_store_that_does_not_exist_fails_and_creates_nothing() {
    let env = Env::new();
    let o = env
        .rota(&["status", "0123456789abcdef0123456789abcdef"], None)
        .await;
    assert_eq!(code(&o), 1);
    assert!(stderr(&o).contains("no store at"), "{}", stderr(&o));
    assert!(!env.db().exists());
}

/// A store path that cannot be looked at (here: under a regular file) is not called missing:
/// the error names the path and what the system said, for `status` and `upgrade` alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_and_upgrade_on_a_path_that_cannot_be_looked_at_say_why_not_no_store() {
    let env = Env::new();
    let file = env.file("plain", "not a directory");
    for scheme in ["sqlite", "redb"] {
        let store = format!("{scheme}:{}/jobs", file.display());
        for args in [
            vec![
                "--store",
                &store,
                "status",
                "0123456789abcdef0123456789abcdef",
            ],
            vec!["--store", &store, "upgrade"],
        ] {
            let o = env.rota(&args, None).await;
            let err = stderr(&o);
            assert_eq!(code(&o), 1, "{args:?}: {err}");
            assert!(!err.contains("no store"), "{args:?}: {err}");
            assert!(
                err.contains(&format!("cannot look for the store {store}")),
                "{args:?}: {err}"
            );
            assert!(err.contains("Not a directory"), "{args:?}: {err}");
        }
    }
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        "not a directory",
        "the file is left as it was"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_file_contents_fail_before_anything_is_submitted_naming_the_item_or_line() {
    let env = Env::new();
    let cases: [(&str, &str); 5] = [
        (
            r#"["http://127.0.0.1:9/a", {"url": "http://127.0.0.1:9/b", "options": {"jqq": 1}}]"#,
            "item 2 (idx 1): unknown option \"jqq\"",
        ),
        (
            r#"["http://127.0.0.1:9/a", 42]"#,
            "item 2 (idx 1): expected a URL string",
        ),
        (
            "\"http://127.0.0.1:9/a\"\n\"not a url\"\n",
            "line 2: \"not a url\" is not an absolute http(s) URL",
        ),
        (
            "\"http://127.0.0.1:9/a\"\n{\"url\": \n",
            "line 2: not valid JSON",
        ),
        ("[]", "no targets"),
    ];
    for (contents, want) in cases {
        let f = env.file("bad.json", contents);
        let o = env.rota(&["run", f.to_str().unwrap()], None).await;
        assert_eq!(code(&o), 1, "{contents}");
        let err = stderr(&o);
        assert!(
            err.contains(want),
            "{contents}\n  stderr: {err}\n  want: {want}"
        );
        assert!(err.contains("bad.json: "), "{err}");
        assert!(o.stdout.is_empty());
        assert!(!err.contains("created"), "{err}");
    }
    assert!(!env.db().exists(), "the store was never opened");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_file_or_bad_flag_is_an_error_with_exit_1() {
    let env = Env::new();
    let o = env.rota(&["run", "nope.json"], None).await;
    assert_eq!(code(&o), 1);
    assert!(stderr(&o).contains("reading nope.json"), "{}", stderr(&o));
    let o = env
        .rota(&["run", "x.json", "--retry-wait", "soon"], None)
        .await;
    assert_eq!(code(&o), 1, "a usage error is 1, not 2 (partial)");
    let o = env
        .rota(&["run", "x.json", "--store", "postgres://db"], None)
        .await;
    assert_eq!(code(&o), 1);
    assert!(
        stderr(&o).contains("sqlite:PATH, redb:PATH or memory"),
        "{}",
        stderr(&o)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_many_targets_is_refused_with_a_hint() {
    let s = common::start().await;
    let env = Env::new();
    let u = s.url("/busy/tmt/0");
    let f = env.file("t.json", &json_array(&[u.clone(), u.clone(), u]));
    let o = env
        .rota(
            &["run", f.to_str().unwrap(), "--targets-per-job", "2"],
            None,
        )
        .await;
    assert_eq!(code(&o), 1);
    assert!(
        stderr(&o).contains("too many targets (3 > 2)"),
        "{}",
        stderr(&o)
    );
    assert!(stderr(&o).contains("--targets-per-job"), "{}", stderr(&o));
    assert_eq!(s.hits("busy/tmt"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_subcommand_has_help() {
    let env = Env::new();
    for args in [
        vec!["--help"],
        vec!["run", "--help"],
        vec!["status", "--help"],
        vec!["demo", "--help"],
    ] {
        let o = env.rota(&args, None).await;
        assert_eq!(code(&o), 0, "{args:?}");
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(out.contains("Usage: rota"), "{args:?}: {out}");
    }
    let o = env.rota(&["run", "--help"], None).await;
    let out = String::from_utf8_lossy(&o.stdout);
    for flag in [
        "--caller",
        "--ttl",
        "--targets-per-job",
        "--jobs-per-caller",
        "--jobs-total",
        "--workers",
        "--max-bytes",
        "--retry-wait",
        "--retry-for",
        "--timeout",
        "--max-body",
        "--store",
        "ROTA_STORE",
    ] {
        assert!(out.contains(flag), "run --help lacks {flag}");
    }
}

/// Runs `rota demo ARGS`, which must exit 0, and checks that its output holds every line of
/// `wants`; the output.
async fn demo_saying(env: &Env, args: &[&str], wants: &[&str]) -> String {
    let o = env.rota(&[&["demo"], args].concat(), None).await;
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let out = String::from_utf8(o.stdout.clone()).unwrap();
    for want in wants {
        assert!(out.contains(want), "demo output lacks {want:?}:\n{out}");
    }
    out
}

/// The demo on a SQLite store: its lines narrate each fetch in turn (a failed page with its
/// hint, a fetched one with its size), and both jobs are left in the store, readable with the
/// commands it prints.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_runs_two_jobs_offline_and_leaves_them_in_the_store() {
    let env = Env::new();
    let wants = [
        "/slow        answers after 3s, past the fetcher's 1s timeout",
        "alice #0  GET /articles/1  → done",
        "bob   #0  GET /articles/3  → done",
        "alice #1  GET /busy        → busy (HTTP 503 Service Unavailable)",
        "alice #1  GET /busy        → done",
        "bob   #1  GET /missing     → failed: HTTP 404 Not Found",
        "bob   #2  GET /slow        → failed: timed out after 1s",
    ];
    let out = demo_saying(&env, &[], &wants).await;
    // Round-robin: bob's first target runs before alice's second.
    let pos = |s: &str| {
        out.find(s)
            .unwrap_or_else(|| panic!("{s:?} missing:\n{out}"))
    };
    assert!(pos("bob   #0") < pos("alice #1"), "{out}");
    assert!(pos("alice #0") < pos("bob   #0"), "{out}");
    // A page that failed has its hint on the next line, under the outcome.
    let hinted = format!(
        "GET /missing     → failed: HTTP 404 Not Found\n{:40}hint: ",
        ""
    );
    assert!(out.contains(&hinted), "{out}");
    // The busy page is busy twice, as the demo's opening lines say, then answers.
    assert_eq!(
        out.matches("alice #1  GET /busy        → busy").count(),
        2,
        "{out}"
    );

    let ids: Vec<&str> = out
        .lines()
        .filter_map(|l| l.trim().strip_prefix("rota --store "))
        .filter_map(|l| l.split_once(" status ").map(|(_, id)| id))
        .collect();
    assert_eq!(ids.len(), 2, "{out}");
    let mut statuses = Vec::new();
    for id in ids {
        let st = env.rota(&["status", id], None).await;
        assert_eq!(code(&st), 0, "{}", stderr(&st));
        let view: JobView = serde_json::from_slice(&st.stdout).unwrap();
        // Each job's first target is an article, stored with what its page says.
        let first = view.targets[0].result.as_ref().map(|r| r.content.as_str());
        assert!(first.is_some_and(|c| c.contains("Article ")), "{first:?}");
        // Its line says how many bytes the page had: all of what was stored.
        let shown = format!("{:<5} #0  GET /articles/", view.job.caller);
        let line = out
            .lines()
            .find(|l| l.contains(&shown))
            .unwrap_or_else(|| panic!("no {shown:?} line:\n{out}"));
        let bytes = first.map_or(0, str::len);
        assert!(
            line.ends_with(&format!("→ done ({bytes} bytes)")),
            "{line:?}, stored {bytes} bytes"
        );
        statuses.push((view.job.caller, view.job.status));
    }
    assert_eq!(
        statuses,
        vec![
            ("alice".to_owned(), JobStatus::Done),
            ("bob".to_owned(), JobStatus::Partial)
        ]
    );
}

/// A `--max-bytes` that holds one of the demo's jobs but not both evicts one: the demo says
/// so of that one, says one job is stored, and offers the read-back of the other only, which
/// works, while the evicted one is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_demo_past_max_bytes_by_one_job_offers_the_read_back_of_the_other() {
    let env = Env::new();
    // The jobs hold 822 bytes (alice's) and 970 (bob's) by the store's count: 1400 is more than
    // either and less than both, with some 400 bytes to spare each way.
    let out = demo_saying(&env, &["--max-bytes", "1400"], &["One job is stored in "]).await;
    let submitted: Vec<&str> = out
        .lines()
        .filter_map(|l| l.strip_prefix("submitted job "))
        .filter_map(|l| l.split_once(' ').map(|(id, _)| id))
        .collect();
    let evicted: Vec<&str> = out
        .lines()
        .filter_map(|l| l.trim().strip_prefix("job "))
        .filter_map(|l| l.strip_suffix(" evicted once shown: the store is past --max-bytes"))
        .collect();
    let offered: Vec<&str> = out
        .lines()
        .filter_map(|l| l.trim().strip_prefix("rota --store "))
        .filter_map(|l| l.split_once(" status ").map(|(_, id)| id))
        .collect();
    assert_eq!(submitted.len(), 2, "{out}");
    assert_eq!(evicted.len(), 1, "{out}");
    assert_eq!(offered.len(), 1, "{out}");
    assert!(!out.contains("Both jobs are stored"), "{out}");
    let mut both = [evicted[0], offered[0]];
    both.sort_unstable();
    let mut want = [submitted[0], submitted[1]];
    want.sort_unstable();
    assert_eq!(both, want, "one of each:\n{out}");
    let kept = env.rota(&["status", offered[0]], None).await;
    assert_eq!(code(&kept), 0, "{}", stderr(&kept));
    let gone = env.rota(&["status", evicted[0]], None).await;
    assert_eq!(code(&gone), 1, "{}", stderr(&gone));
}

/// The line before the fetches names how many workers take the targets, in the singular for
/// the default one (`1 worker takes`) and the plural for `--workers 2` (`2 workers take`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_says_how_many_workers_take_the_targets() {
    let env = Env::new();
    let one = "\n1 worker takes the jobs' targets in turn, one at a time per job";
    let out = demo_saying(&env, &["--store", "memory"], &[one]).await;
    assert!(!out.contains("workers take"), "{out}");
    let two = "\n2 workers take the jobs' targets in turn, one at a time per job";
    let out = demo_saying(&env, &["--store", "memory", "--workers", "2"], &[two]).await;
    assert!(!out.contains("worker takes"), "{out}");
}

/// What a terminal shows of `rota --store memory run FILE > /dev/null` (its stderr), the
/// terminal `script`'s (util-linux), with `TERM` set to `term` (unset for `None`) and `vars`.
/// `None` where there is no `script`: then this says so on stderr (under `CI`, it fails).
#[cfg(unix)]
async fn shown_on_a_terminal(
    file: &Path,
    term: Option<&str>,
    vars: &[(&str, &str)],
) -> Option<String> {
    typed_on_a_terminal(&format!("'{}'", file.display()), None, term, vars).await
}

/// [`shown_on_a_terminal`] of `rota --store memory run FILE` where FILE is as the shell is to
/// read it, and with `typed` typed in on the terminal (then the end of input).
#[cfg(unix)]
async fn typed_on_a_terminal(
    file: &str,
    typed: Option<&str>,
    term: Option<&str>,
    vars: &[(&str, &str)],
) -> Option<String> {
    // util-linux's `script` (a BSD one takes other options, and refuses `--version`).
    if !std::process::Command::new("script")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        assert!(
            std::env::var_os("CI").is_none(),
            "no `script` to make a terminal"
        );
        eprintln!("no `script` here: what a terminal shows is not checked");
        return None;
    }
    let line = format!(
        "'{}' --store memory run {file} > /dev/null",
        assert_cmd::cargo::cargo_bin!("rota").display(),
    );
    let mut cmd = assert_cmd::Command::from_std(without_proxy("script"));
    cmd.args(["-qec", &line, "/dev/null"])
        .env_remove("RUST_LOG")
        .envs(vars.iter().copied())
        .timeout(LIMIT);
    if let Some(t) = typed {
        cmd.write_stdin(t.to_owned());
    }
    match term {
        Some(t) => cmd.env("TERM", t),
        None => cmd.env_remove("TERM"),
    };
    let o = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    let shown = String::from_utf8_lossy(&o.stdout).into_owned();
    assert_eq!(code(&o), 0, "TERM {term:?}: {shown}");
    Some(shown)
}

/// On a terminal, `rota run` draws a bar; on one whose `TERM` is `dumb` or unset, where
/// indicatif draws nothing, it prints the plain progress lines instead (it used to show no
/// progress at all there).
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dumb_terminal_gets_the_plain_progress_lines() {
    let s = common::start().await;
    let env = Env::new();
    let f = env.file("t.json", &json_array(&[s.url("/ok")]));
    for term in [Some("dumb"), None, Some("xterm")] {
        let Some(shown) = shown_on_a_terminal(&f, term, &[]).await else {
            return;
        };
        let lines = shown.contains("progress: 1/1 finished, 0 failed, 0 retries");
        let bar = shown.contains("1/1 finished · 0 failed, 0 retries");
        assert_eq!(
            (lines, bar),
            (term != Some("xterm"), term == Some("xterm")),
            "TERM {term:?}: {shown}"
        );
        assert!(shown.contains(" done: 1/1 done"), "TERM {term:?}: {shown}");
    }
}

/// `rota run -` whose stdin is a terminal says that it reads the targets from it, and how to
/// end them, rather than wait without a word; from a pipe it says nothing of it.
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_from_a_terminal_says_how_to_end_the_targets() {
    const SAYS: &str = "reading the targets from the terminal, to Ctrl-D";
    let s = common::start().await;
    let env = Env::new();
    let typed = format!("\"{}\"\n", s.url("/ok"));
    let Some(shown) = typed_on_a_terminal("-", Some(&typed), Some("dumb"), &[]).await else {
        return;
    };
    assert!(shown.contains(SAYS), "{shown}");
    assert!(shown.contains(" done: 1/1 done"), "{shown}");
    let o = env
        .rota(&["--store", "memory", "run", "-"], Some(&typed))
        .await;
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(!stderr(&o).contains(SAYS), "{}", stderr(&o));
}

/// A log record written while the bar is drawn goes on a line of its own above the bar, the
/// bar cleared first: it used to be written on after the bar's text, and the bar's fragments
/// stayed on screen.
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_go_above_the_progress_bar_not_onto_it() {
    let s = common::start().await;
    let env = Env::new();
    let f = env.file(
        "t.json",
        &json_array(&[s.url("/sleep/300"), s.url("/sleep/300"), s.url("/ok")]),
    );
    let vars = [("RUST_LOG", "rota=debug")];
    let Some(shown) = shown_on_a_terminal(&f, Some("xterm"), &vars).await else {
        return;
    };
    // The terminal's lines, and within one what a carriage return starts again.
    let pieces: Vec<&str> = shown.split(['\r', '\n']).collect();
    let logs = pieces.iter().filter(|p| p.contains("DEBUG")).count();
    assert!(logs >= 3, "the debug records: {shown}");
    assert!(
        pieces.iter().any(|p| p.contains("finished · ")),
        "the bar: {shown}"
    );
    for p in pieces {
        assert!(
            !(p.contains("DEBUG") && p.contains("finished · ")),
            "a record written onto the bar: {p:?}"
        );
    }
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_machine_without_ca_certificates_still_runs_on_the_bundled_roots() {
    let s = common::start().await;
    let env = Env::new();
    let empty = env.dir.path().join("no-certs");
    std::fs::create_dir(&empty).unwrap();
    let f = env.file("t.json", &json_array(&[s.url("/ok")]));
    let mut cmd = rota_cmd();
    cmd.current_dir(env.dir.path())
        .env("ROTA_STORE", env.store())
        .env_remove("RUST_LOG")
        // rustls-native-certs reads only these when they are set.
        .env("SSL_CERT_FILE", "/dev/null")
        .env("SSL_CERT_DIR", &empty)
        .args(["run", f.to_str().unwrap()])
        .timeout(LIMIT);
    let o = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    // The warning gives the cause (reqwest's own words for it are only "builder error").
    let err = stderr(&o);
    assert!(
        err.contains("no usable system CA certificates: trusting the bundled Mozilla roots"),
        "{err}"
    );
    assert!(err.contains("No CA certificates were loaded"), "{err}");
    assert!(!err.contains("builder error"), "{err}");
    assert_eq!(lines(&o)[0].status, TargetState::Done);
}

/// `rota run` whose stdout is closed (`rota run … | head -0`) ends with 1 and says why, after
/// printing its summary as it would have; its job, whose results went nowhere, stays in the
/// store past `--max-bytes` (it used to be evicted, its results lost), and the next run that
/// shows its own job applies the budget. Within the budget, nothing is said of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_with_its_stdout_closed_keeps_its_job_past_the_budget_and_says_why() {
    use std::process::Stdio;
    let s = common::start().await;
    let env = Env::new();
    let f = env.file("t.json", &json_array(&[s.url("/page/a"), s.url("/page/b")]));
    // `rota ARGS run --max-bytes MAX FILE` with its stdout's read end closed before anything
    // is written.
    let run_unread = |args: &[&str], max: &str, f: &Path| {
        let mut child = KillOnDrop::spawn(
            rota_process()
                .current_dir(env.dir.path())
                .env("ROTA_STORE", env.store())
                .env_remove("RUST_LOG")
                .args(args)
                .args(["run", "--max-bytes", max])
                .arg(f)
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped()),
        );
        drop(child.stdout.take());
        let mut err = Lines::new(child.stderr.take().unwrap());
        tokio::task::spawn_blocking(move || {
            let stderr = err.rest_within(LIMIT).into_bytes();
            let status = child.wait_within(LIMIT);
            Output {
                status,
                stdout: Vec::new(),
                stderr,
            }
        })
    };
    let o = run_unread(&[], "1", &f).await.unwrap();
    let err = stderr(&o);
    assert_eq!(code(&o), 1, "{err}");
    assert!(err.contains("writing stdout"), "{err}");
    let id = job_id(&o);
    assert!(
        err.contains(&format!("job {id} done: 2/2 done")),
        "the summary: {err}"
    );
    assert!(
        err.contains(&format!(
            "job {id} kept in the store, --max-bytes not applied: its results could not be \
             written out (`rota status {id}` shows them"
        )),
        "{err}"
    );
    assert!(!err.contains("evicted"), "{err}");
    let st = env.rota(&["status", &id], None).await;
    assert_eq!(code(&st), 0, "kept: {}", stderr(&st));
    let view: JobView = serde_json::from_slice(&st.stdout).unwrap();
    assert_eq!(view.job.status, JobStatus::Done);

    // The next run, shown, applies the budget: the older job goes first.
    let g = env.file("u.json", &json_array(&[s.url("/page/c")]));
    let o = env
        .rota(&["run", "--max-bytes", "1", g.to_str().unwrap()], None)
        .await;
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let st = env.rota(&["status", &id], None).await;
    assert_eq!(code(&st), 1, "evicted past --max-bytes: {}", stderr(&st));

    // A store within its budget would evict nothing: no word of a job kept past it.
    let h = env.file("v.json", &json_array(&[s.url("/page/d")]));
    let o = run_unread(&[], "1GiB", &h).await.unwrap();
    let err = stderr(&o);
    assert_eq!(code(&o), 1, "{err}");
    assert!(err.contains("writing stdout"), "{err}");
    assert!(err.contains(" done: 1/1 done"), "the summary: {err}");
    assert!(!err.contains("kept in the store"), "{err}");

    // The memory store keeps nothing to read back: no word of a job kept.
    let o = run_unread(&["--store", "memory"], "1", &f).await.unwrap();
    let err = stderr(&o);
    assert_eq!(code(&o), 1, "{err}");
    assert!(err.contains("writing stdout"), "{err}");
    assert!(err.contains(" done: 2/2 done"), "the summary: {err}");
    assert!(!err.contains("kept in the store"), "{err}");
}

/// A busy answer's line says when the target is tried again and when it fails instead; with a
/// `--retry-for` shorter than the demo's busy page stays busy, `/busy` fails and alice's job
/// ends partial.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_says_a_busy_target_fails_once_busy_past_retry_for() {
    let env = Env::new();
    let wants = [
        "alice #1  GET /busy        → busy (HTTP 503 Service Unavailable): tried again in 200ms, \
         or failed if busy for over 100ms (--retry-for)",
        "of alice is partial: 2/3 targets done, 1 failed",
    ];
    let out = demo_saying(&env, &["--retry-for", "100ms"], &wants).await;
    assert!(!out.contains("GET /busy        → done"), "{out}");
}

/// The demo's server is on loopback: a proxy the environment names (here one that refuses every
/// connection) is not used, and the fetches reach the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_fetches_past_a_proxy_the_environment_names() {
    let env = Env::new();
    let (_held, dead) = common::refusing();
    let dead = format!("http://{dead}/");
    let mut vars: Vec<(&str, &str)> = ["http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"]
        .into_iter()
        .map(|k| (k, dead.as_str()))
        .collect();
    vars.extend([("no_proxy", ""), ("NO_PROXY", "")]);
    let o = env.rota_with(&["demo"], None, &vars).await;
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    for want in [
        "alice #0  GET /articles/1  → done",
        "bob   #0  GET /articles/3  → done",
    ] {
        assert!(out.contains(want), "demo output lacks {want:?}:\n{out}");
    }
}

/// A proxy variable set to something the HTTP client cannot use (an unknown scheme, no host)
/// is ignored by it, and the fetches go direct: `rota run` warns of it, by the variable's name
/// only (its value may hold credentials), and the fetch reaches the host. A failed connection
/// is then the host's, with no word of a proxy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_warns_of_a_proxy_variable_the_client_ignores() {
    let s = common::start().await;
    let (_held, dead) = common::refusing();
    let env = Env::new();
    let targets = json_array(&[s.url("/ok"), format!("http://{dead}/")]);
    for (var, val) in [
        ("http_proxy", "bogus://user:secret@unusable.example"),
        ("ALL_PROXY", "::::secret"),
    ] {
        let vars = [(var, val), ("no_proxy", "")];
        let o = env
            .rota_with(&["--store", "memory", "run", "-"], Some(&targets), &vars)
            .await;
        let err = stderr(&o);
        assert_eq!(code(&o), 2, "{var}: {err}");
        assert!(
            err.contains(&format!(
                "{var} is set, but not to a proxy URL (scheme http, https, socks4, socks4a, \
                 socks5 or socks5h, and a host): it is ignored, and fetches go direct"
            )),
            "{var}: {err}"
        );
        assert!(
            !err.contains("secret") && !err.contains("unusable"),
            "{err}"
        );
        let got = lines(&o);
        assert_eq!(got[0].status, TargetState::Done, "{var}: {err}");
        assert_eq!(got[1].status, TargetState::Failed, "{var}: {err}");
        assert!(!got[1].hint.contains("proxy"), "{var}: {}", got[1].hint);
    }
    // None: no such warning.
    let o = env
        .rota_with(&["--store", "memory", "run", "-"], Some(&targets), &[])
        .await;
    assert!(!stderr(&o).contains("is set, but not"), "{}", stderr(&o));
    // An unusable http_proxy beside a usable all_proxy: the fetches go through the latter, and
    // the warning says only that the former is ignored.
    let proxy = common::socks5().await;
    let url = proxy.url("socks5");
    let vars = [
        ("http_proxy", "bogus://unusable.example"),
        ("all_proxy", url.as_str()),
        ("no_proxy", ""),
    ];
    let ok = json_array(&[s.url("/ok")]);
    let o = env
        .rota_with(&["--store", "memory", "run", "-"], Some(&ok), &vars)
        .await;
    let err = stderr(&o);
    assert_eq!(code(&o), 0, "{err}");
    assert!(
        err.contains(
            "http_proxy is set, but not to a proxy URL (scheme http, https, socks4, socks4a, \
             socks5 or socks5h, and a host): it is ignored\n"
        ),
        "{err}"
    );
    assert_eq!(proxy.relayed(), 1, "{err}");
}

/// `rota run` goes through the proxy the environment names, a SOCKS one too (`all_proxy` is
/// often `socks5://…`, as curl and proxy tools set it): with it every fetch used to fail
/// `could not connect: unsupported scheme socks5`, with a hint to check the target's host.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_fetches_through_a_socks_proxy_the_environment_names() {
    let s = common::start().await;
    let proxy = common::socks5().await;
    let env = Env::new();
    let targets = json_array(&[s.url("/ok")]);
    for (i, scheme) in ["socks5", "socks5h"].into_iter().enumerate() {
        let url = proxy.url(scheme);
        let vars = [("all_proxy", url.as_str()), ("no_proxy", "")];
        let o = env
            .rota_with(&["--store", "memory", "run", "-"], Some(&targets), &vars)
            .await;
        assert_eq!(code(&o), 0, "{scheme}: {}", stderr(&o));
        let got = lines(&o);
        assert_eq!(
            got[0].result.as_ref().unwrap().content,
            common::OK_BODY,
            "{scheme}"
        );
        assert_eq!(
            proxy.relayed(),
            i + 1,
            "{scheme}: the fetch went past the proxy"
        );
    }
}

/// An https:// target goes to the proxy the environment names as a `CONNECT`. A proxy that
/// refuses it for want of credentials (407) gets the same hint as its 407 to an http://
/// target's request, and one that refuses it otherwise a hint about the proxy: both used to get
/// the hint of an unreachable host (check the DNS name, the scheme, the TLS handshake).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxy_refusing_a_tunnel_gets_a_hint_about_the_proxy() {
    let env = Env::new();
    let targets = json_array(&["https://example.invalid/page".to_owned()]);
    for (status_line, cause, says) in [
        (
            "407 Proxy Authentication Required",
            "proxy authorization required",
            "wants credentials; give them in its URL",
        ),
        (
            "403 Forbidden",
            "unsuccessful",
            "would not open a connection",
        ),
    ] {
        let proxy = common::refusing_proxy(status_line).await;
        let url = proxy.url();
        let vars = [("https_proxy", url.as_str()), ("no_proxy", "")];
        let o = env
            .rota_with(&["--store", "memory", "run", "-"], Some(&targets), &vars)
            .await;
        assert_eq!(code(&o), 1, "{status_line}: {}", stderr(&o));
        assert_eq!(
            proxy.asked(),
            ["CONNECT example.invalid:443 HTTP/1.1"],
            "{status_line}"
        );
        let got = lines(&o);
        assert_eq!(got[0].status, TargetState::Failed, "{status_line}");
        assert!(
            got[0].error.ends_with(cause),
            "{status_line}: {}",
            got[0].error
        );
        assert!(got[0].hint.contains(says), "{status_line}: {}", got[0].hint);
        assert!(
            got[0].hint.contains("no_proxy"),
            "{status_line}: {}",
            got[0].hint
        );
        assert!(
            !got[0].hint.contains("DNS"),
            "{status_line}: {}",
            got[0].hint
        );
    }
}

/// A target whose proxy (the one the environment names) cannot be reached gets a hint about
/// that proxy, not only about the target's host: an HTTP proxy for an https:// target (asked
/// for a tunnel) or an http:// one, a SOCKS one for any target.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_proxy_gets_a_hint_about_the_proxy() {
    // A port nothing listens on, held for the test.
    let (_held, closed) = common::refusing();
    let env = Env::new();
    for (var, proxy, target) in [
        (
            "https_proxy",
            format!("http://{closed}"),
            "https://example.invalid/page",
        ),
        (
            "all_proxy",
            format!("socks5h://{closed}"),
            "http://example.invalid/page",
        ),
        // An http:// target's request goes to an HTTP proxy as it is: its failure does not
        // tell the proxy from the host, and the hint names both.
        (
            "http_proxy",
            format!("http://{closed}"),
            "http://example.invalid/page",
        ),
        // With socks5:// rota resolves the host itself: a name that does not resolve fails
        // before the proxy is tried, rightly with the host's hint. An address needs no lookup.
        (
            "all_proxy",
            format!("socks5://{closed}"),
            "https://192.0.2.1/page",
        ),
    ] {
        let targets = json_array(&[target.to_owned()]);
        let vars = [(var, proxy.as_str()), ("no_proxy", "")];
        let o = env
            .rota_with(&["--store", "memory", "run", "-"], Some(&targets), &vars)
            .await;
        assert_eq!(code(&o), 1, "{proxy}: {}", stderr(&o));
        let got = lines(&o);
        assert_eq!(got[0].status, TargetState::Failed, "{proxy}");
        assert!(
            got[0].error.starts_with("could not connect: "),
            "{proxy}: {}",
            got[0].error
        );
        assert!(
            got[0].hint.contains("could not be reached"),
            "{proxy}: {}",
            got[0].hint
        );
        assert!(got[0].hint.contains(var), "{proxy}: {}", got[0].hint);
        assert!(!got[0].hint.contains("DNS"), "{proxy}: {}", got[0].hint);
    }
}

/// With no proxy in the environment, an http:// target whose host refuses the connection gets
/// the hint about the host alone: no proxy is named, so none is blamed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_connection_without_a_proxy_blames_only_the_host() {
    let (_held, closed) = common::refusing();
    let env = Env::new();
    let targets = json_array(&[format!("http://{closed}/page")]);
    let o = env
        .rota(&["--store", "memory", "run", "-"], Some(&targets))
        .await;
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    let got = lines(&o);
    assert_eq!(got[0].status, TargetState::Failed);
    assert!(
        got[0].error.starts_with("could not connect: "),
        "{}",
        got[0].error
    );
    assert!(
        got[0].hint.starts_with("the host could not be reached"),
        "{}",
        got[0].hint
    );
    assert!(!got[0].hint.contains("proxy"), "{}", got[0].hint);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_past_the_input_cap_is_refused_unparsed() {
    let env = Env::new();
    let line = "\"https://a.example/page\"\n";
    let big = env.file("big.jsonl", &line.repeat((16 << 20) / line.len() + 1));
    let o = env
        .rota(
            &["run", "--targets-per-job", "1", big.to_str().unwrap()],
            None,
        )
        .await;
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("big.jsonl: larger than 16 MiB, more than a job of at most"),
        "{}",
        stderr(&o)
    );
    assert!(!env.db().exists(), "no store was opened");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_stops_with_exit_1_when_its_stdout_is_closed() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    let env = Env::new();
    let mut child = KillOnDrop::spawn(
        rota_process()
            .current_dir(env.dir.path())
            .env("ROTA_STORE", env.store())
            .env("RUST_LOG", "rota=debug")
            .arg("demo")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null()),
    );
    let stdout = child.stdout.take().unwrap();
    let first = within(LIMIT, "reading the demo's first line", move || {
        let mut first = String::new();
        BufReader::new(stdout).read_line(&mut first).unwrap();
        first
    });
    assert!(first.starts_with("rota demo"), "{first}");
    // The reader is dropped: stdout is closed, like `rota demo | head -1`.
    let mut waited = Duration::ZERO;
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if waited > LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("rota demo hung after its stdout was closed");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        waited += Duration::from_millis(50);
    };
    assert_eq!(
        status.code(),
        Some(1),
        "an error, not a panic (101) or a hang"
    );
}

/// Help, the version and the demo, written to a full device, fail with 1 and say why, as
/// `run` and `status` do (help and version said nothing and exited 0; the demo said "it is
/// closed").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn help_version_and_the_demo_say_why_stdout_failed() {
    let env = Env::new();
    for args in [
        &["--help"][..],
        &["--version"],
        &["run", "--help"],
        &["demo"],
    ] {
        let full = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap();
        let mut cmd = rota_process();
        cmd.current_dir(env.dir.path())
            .env("ROTA_STORE", env.store())
            .args(args)
            .stdout(full);
        let o = tokio::task::spawn_blocking(move || cmd.output().unwrap())
            .await
            .unwrap();
        assert_eq!(o.status.code(), Some(1), "{args:?}: {}", stderr(&o));
        assert!(
            stderr(&o).contains("rota: error: writing stdout: No space left on device"),
            "{args:?}: {}",
            stderr(&o)
        );
    }
}

#[cfg(unix)]
mod interrupt {
    use super::*;
    use std::process::{Child, Command, Stdio};

    /// Starts `rota run FILE`, waits for `job ID created` on stderr, returns the child, the id
    /// and the rest of stderr's lines.
    fn start(env: &Env, file: &Path) -> (KillOnDrop, String, Lines) {
        let mut child = KillOnDrop::spawn(
            rota_process()
                .current_dir(env.dir.path())
                .env("USER", "tester")
                .env_remove("ROTA_STORE")
                .args(["--store", &env.store(), "run"])
                .arg(file)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped()),
        );
        let mut err = Lines::new(child.stderr.take().unwrap());
        loop {
            let Some(line) = err.next_within(LIMIT) else {
                let _ = child.kill();
                let status = child.wait();
                panic!("rota ended before creating the job: {status:?}");
            };
            if let Some(rest) = line.strip_prefix("job ")
                && let Some((id, tail)) = rest.split_once(' ')
                && tail.starts_with("created")
            {
                return (child, id.to_owned(), err);
            }
        }
    }

    /// How long after the first signal a test sends a second of the same kind: a signal of
    /// the first one's kind within 200 ms of it is taken for the first repeated (as `timeout`
    /// sends it), not for a second Ctrl-C.
    const AFTER_THE_FIRST: Duration = Duration::from_millis(400);

    /// Sends `first`, then `second` (`kill`'s signal options) to `child` at once, by one shell.
    fn signals_at_once(child: &Child, first: &str, second: &str) {
        let pid = child.id();
        let ok = Command::new("sh")
            .args(["-c", &format!("kill {first} {pid}; kill {second} {pid}")])
            .status()
            .unwrap();
        assert!(ok.success());
    }

    /// Reads `err` up to rota's line that it is cancelling job `id` (the first signal handled),
    /// and returns that line.
    fn until_cancelling(err: &mut Lines, id: &str) -> String {
        loop {
            let line = err.next_within(LIMIT).expect("rota ended early");
            if line.starts_with(&format!("cancelling job {id}")) {
                return line;
            }
        }
    }

    fn sigint(child: &Child) {
        signal(child, "-INT");
    }

    fn signal(child: &Child, which: &str) {
        let ok = Command::new("kill")
            .args([which, &child.id().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok);
    }

    /// Ctrl-C during `rota demo` cancels its jobs rather than killing it halfway: both end
    /// `cancelled` in the store (not left `running` there), the demo says so, shows them, and
    /// ends with 1. (A retry wait of a minute keeps alice's job, with its busy page, from
    /// ending before the signal, and a timeout longer than the slow page's 3 s keeps bob's
    /// for those 3 s: by default they end 0.4 s and 1 s after the line the signal follows.)
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn ctrl_c_in_the_demo_cancels_its_jobs() {
        let env = Env::new();
        let mut child = KillOnDrop::spawn(
            rota_process()
                .current_dir(env.dir.path())
                .env_remove("ROTA_STORE")
                .env_remove("RUST_LOG")
                .args(["--store", &env.store(), "demo"])
                .args(["--retry-wait", "60s", "--timeout", "10s"])
                .stdout(Stdio::piped())
                .stderr(Stdio::null()),
        );
        let mut out = Lines::new(child.stdout.take().unwrap());
        let ids = tokio::task::block_in_place(|| {
            let mut ids = Vec::new();
            loop {
                let line = out.next_within(LIMIT).expect("the demo ended early");
                if let Some(rest) = line.strip_prefix("submitted job ")
                    && let Some((id, _)) = rest.split_once(' ')
                {
                    ids.push(id.to_owned());
                }
                // The targets start being fetched after this line.
                if line.contains("the jobs' targets in turn") {
                    return ids;
                }
            }
        });
        assert_eq!(ids.len(), 2);
        sigint(&child);
        let (status, rest) = tokio::task::spawn_blocking(move || {
            let rest = out.rest_within(LIMIT);
            (child.wait_within(LIMIT), rest)
        })
        .await
        .unwrap();
        assert_eq!(status.code(), Some(1), "{rest}");
        assert!(rest.contains("cancelling the jobs"), "{rest}");
        for id in &ids {
            assert!(rest.contains(&format!("job {id} of ")), "{rest}");
            let o = env.rota(&["status", id], None).await;
            let view: JobView = serde_json::from_slice(&o.stdout).unwrap();
            assert_eq!(view.job.status, JobStatus::Cancelled, "{rest}");
            assert!(
                view.targets
                    .iter()
                    .all(|t| t.status != TargetState::Running),
                "a target left running: {rest}"
            );
        }
    }

    /// SIGTERM (what `timeout`, `kill` and service managers send) cancels the job as Ctrl-C
    /// does: the target in flight is stored, nothing else starts, and the job is `cancelled`
    /// in the store rather than left `running` there.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sigterm_cancels_the_job_as_ctrl_c_does() {
        let s = common::start().await;
        let env = Env::new();
        let f = env.file(
            "t.json",
            &json_array(&[s.url("/sleep/3000"), s.url("/page/b")]),
        );
        let (mut child, id, mut err) = tokio::task::block_in_place(|| start(&env, &f));
        // The first target is in flight for 3 s: signal inside that.
        in_flight(&s, 3000).await;
        signal(&child, "-TERM");
        let (status, rest) = tokio::task::spawn_blocking(move || {
            let rest = err.rest_within(LIMIT);
            (child.wait_within(LIMIT), rest)
        })
        .await
        .unwrap();
        assert_eq!(status.code(), Some(1), "{rest}");
        assert!(rest.contains(&format!("cancelling job {id}")), "{rest}");
        let o = env.rota(&["status", &id], None).await;
        let view: JobView = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(view.job.status, JobStatus::Cancelled);
        assert_eq!(view.targets[0].status, TargetState::Done);
        assert_eq!(view.targets[1].status, TargetState::Pending);
    }

    /// A signal that comes once the job is over (here while its results wait for a reader of
    /// stdout that reads no more) ends `rota run` at once: there is nothing left to cancel.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_signal_once_the_job_is_over_ends_run_at_once() {
        let s = common::start().await;
        let env = Env::new();
        let f = env.file("t.json", &json_array(&[s.url("/big/300000")]));
        let (mut child, _id, _err) = tokio::task::block_in_place(|| start(&env, &f));
        // The results have begun: the job is over. The rest (far more than a pipe holds)
        // waits for a read that never comes; the pipe stays open.
        let mut out = child.stdout.take().unwrap();
        let out = tokio::task::block_in_place(|| {
            within(LIMIT, "reading the first results", move || {
                let mut first = [0u8; 16];
                std::io::Read::read_exact(&mut out, &mut first).unwrap();
                out
            })
        });
        signal(&child, "-TERM");
        let status = tokio::task::spawn_blocking(move || {
            for _ in 0..200 {
                if let Some(st) = child.try_wait().unwrap() {
                    return Some(st);
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
            None
        })
        .await
        .unwrap();
        drop(out);
        assert_eq!(
            status.and_then(|s| s.code()),
            Some(143),
            "one SIGTERM once the job was over did not end rota within 10 s"
        );
    }

    /// A SIGTERM that comes while a reused job's stored outcome is first looked at (a job of
    /// large pages: that look reads every stored result, which takes a while) is not lost: the
    /// job is over, there is nothing to cancel, so it ends the process at once (README: "Once
    /// the job is over (its results being printed, say to a pipe nobody reads), the first
    /// signal exits at once"). Here stdout is a pipe nobody reads. (It was taken off the channel
    /// by nobody: the look saw the job over, and the channel, the signal in it, was dropped;
    /// rota then went on to print, blocked on the pipe for ever.)
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_signal_during_a_reused_jobs_first_look_is_not_lost() {
        let s = common::start().await;
        let env = Env::new();
        let urls: Vec<String> = (0..30)
            .map(|i| s.url(&format!("/big/{}", 4_000_000 + i)))
            .collect();
        let f = env.file("t.json", &json_array(&urls));
        let o = env
            .rota(&["run", f.to_str().unwrap(), "--max-bytes", "1GiB"], None)
            .await;
        assert_eq!(code(&o), 0, "{}", stderr(&o));
        let mut child = KillOnDrop::spawn(
            rota_process()
                .current_dir(env.dir.path())
                .env("USER", "tester")
                .env_remove("ROTA_STORE")
                .args(["--store", &env.store(), "run", "--max-bytes", "1GiB"])
                .arg(&f)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped()),
        );
        let _out = child.stdout.take().unwrap();
        let mut err = Lines::new(child.stderr.take().unwrap());
        tokio::task::block_in_place(|| {
            loop {
                let line = err.next_within(LIMIT).expect("rota ended early");
                if line.contains(" reused: ") {
                    return;
                }
            }
        });
        signal(&child, "-TERM");
        let status = tokio::task::spawn_blocking(move || {
            for _ in 0..200 {
                if let Some(st) = child.try_wait().unwrap() {
                    return Some(st);
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            None
        })
        .await
        .unwrap();
        assert_eq!(
            status.and_then(|s| s.code()),
            Some(143),
            "a SIGTERM during the reused job's first look did not end rota within 10 s: {}",
            err.rest_within(Duration::from_secs(1))
        );
    }

    /// A store that stops taking writes partway (here a file size limit, as a full disk
    /// would) does not keep `rota run` waiting for ever for the job to end in the store: it
    /// ends with 1 once the runner is done, and says why.
    /// `rota --store STORE run FILE` with files limited to `limit` blocks of the shell's
    /// `ulimit -f`, as a full disk would limit them. SIGXFSZ is left as it is by default, which
    /// kills a process at a write past the limit: rota takes it over, so that such a write
    /// fails with EFBIG instead.
    async fn run_under_file_limit(store: &str, file: &Path, limit: u32) -> Output {
        under_file_limit(store, &format!("run '{}'", file.display()), limit).await
    }

    /// `rota --store STORE COMMAND` (COMMAND as shell words) under [`run_under_file_limit`]'s
    /// file limit.
    async fn under_file_limit(store: &str, command: &str, limit: u32) -> Output {
        let script = format!(
            "ulimit -f {limit}; exec '{}' --store '{store}' {command}",
            assert_cmd::cargo::cargo_bin!("rota").display(),
        );
        let mut cmd = sh_cmd();
        cmd.args(["-c", &script])
            .env_remove("RUST_LOG")
            .env_remove("ROTA_STORE")
            .timeout(LIMIT);
        tokio::task::spawn_blocking(move || cmd.output().unwrap())
            .await
            .unwrap()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn run_ends_with_1_when_the_store_stops_taking_writes() {
        let s = common::start().await;
        let env = Env::new();
        let urls: Vec<String> = (0..5)
            .map(|i| s.url(&format!("/big/{}", 150_000 + i)))
            .collect();
        let f = env.file("t.json", &json_array(&urls));
        let o = run_under_file_limit(&env.store(), &f, 400).await;
        let err = stderr(&o);
        assert_eq!(code(&o), 1, "{err}");
        // Failed in the store for the outcomes it lost, or, if the store took not even that
        // status write, said to be left live there.
        assert!(
            err.contains(rota::machine::ERR_NOT_STORED)
                || err.contains("did not take its last writes"),
            "{err}"
        );
        // Every target came to an outcome: the summary counts those the store lost as not
        // stored, none as not run.
        let summary = err
            .lines()
            .rfind(|l| l.starts_with("job ") && l.contains(" done, "));
        assert!(summary.is_some_and(|s| !s.contains(" not run")), "{err}");
    }

    /// The demo, too, ends with 1 and says why once its store stops taking writes, rather than
    /// wait for ever for jobs the store will never show ended: the runner's hooks tell it that
    /// the runner is done with them. (Limits of 100 to 300 blocks all get here: at fewer the
    /// store does not open or a submit fails, at more the demo ends well.)
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_demo_ends_with_1_when_its_store_stops_taking_writes() {
        let env = Env::new();
        let o = under_file_limit(&env.store(), "demo", 180).await;
        let err = stderr(&o);
        assert_eq!(code(&o), 1, "{err}");
        assert!(
            err.contains("the store did not take the jobs' last writes"),
            "{err}"
        );
    }

    /// On redb, what `rota run` prints once the store stopped taking writes is what the file
    /// holds, as `rota status` reads it afterwards: every write the store acknowledged, a
    /// target's start too, is durable, so the open store shows nothing the file lacks. Several
    /// file size limits, so the failure lands at different points.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn on_redb_a_run_the_store_failed_prints_what_the_file_holds() {
        let s = common::start().await;
        let env = Env::new();
        let urls: Vec<String> = (0..6)
            .map(|i| s.url(&format!("/big/{}", 150_000 + i)))
            .collect();
        let f = env.file("t.json", &json_array(&urls));
        for (round, limit) in [200, 400, 800].into_iter().enumerate() {
            let store = format!(
                "redb:{}",
                env.dir.path().join(format!("{round}.redb")).display()
            );
            let o = run_under_file_limit(&store, &f, limit).await;
            assert_eq!(code(&o), 1, "limit {limit}: {}", stderr(&o));
            // A fetched target whose outcome the store did not take is counted so, though the
            // file shows it pending.
            let err = stderr(&o);
            if err.contains("storing the target failed") {
                let summary = err.lines().last().unwrap_or_default();
                assert!(summary.contains(" not stored"), "limit {limit}: {err}");
            }
            // Its stdout took every line: no word of results that could not be written out.
            assert!(
                !err.contains("could not be written out"),
                "limit {limit}: {err}"
            );
            let printed: Vec<TargetStatus> = String::from_utf8_lossy(&o.stdout)
                .lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect();
            let id = job_id(&o);
            let o = env.rota(&["--store", &store, "status", &id], None).await;
            assert_eq!(code(&o), 0, "{}", stderr(&o));
            let file: JobView = serde_json::from_slice(&o.stdout).unwrap();
            assert_eq!(printed, file.targets, "limit {limit}");
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_first_ctrl_c_cancels_the_job_and_the_target_in_flight_is_stored() {
        let s = common::start().await;
        let env = Env::new();
        let f = env.file(
            "t.json",
            &json_array(&[s.url("/sleep/3000"), s.url("/page/b"), s.url("/page/c")]),
        );
        let (mut child, id, mut err) = {
            let env_ref = &env;
            let f = f.clone();
            // Blocking reads: off the runtime that serves the pages.
            tokio::task::block_in_place(|| start(env_ref, &f))
        };
        // The first target is in flight for 3 s: interrupt inside that.
        in_flight(&s, 3000).await;
        sigint(&child);
        let (status, stdout, rest) = tokio::task::spawn_blocking(move || {
            let rest = err.rest_within(LIMIT);
            let out = Lines::new(child.stdout.take().unwrap()).rest_within(LIMIT);
            (child.wait_within(LIMIT), out, rest)
        })
        .await
        .unwrap();
        assert_eq!(status.code(), Some(1), "{rest}");
        assert!(rest.contains(&format!("cancelling job {id}")), "{rest}");
        assert!(rest.contains(&format!("job {id} cancelled")), "{rest}");
        let got: Vec<TargetStatus> = stdout
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(got.len(), 3);
        assert_eq!(
            got[0].status,
            TargetState::Done,
            "the in-flight target finished"
        );
        assert_eq!(got[0].result.as_ref().unwrap().content, "slept 3000ms");
        assert_eq!(got[1].status, TargetState::Pending);
        assert_eq!(got[2].status, TargetState::Pending);

        let o = env.rota(&["status", &id], None).await;
        let view: JobView = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(view.job.status, JobStatus::Cancelled);
        assert_eq!(view.job.targets_done, 1);
    }

    /// The same signal again right after the first (within 200 ms) is the first repeated, not a
    /// second Ctrl-C: GNU `timeout` sends its signal to the command and then to its process
    /// group, which holds the command too. The job is cancelled, the target in flight finishes
    /// and is stored, the results are printed and the run ends with 1, as after one Ctrl-C.
    /// (It used to take the copy for a second Ctrl-C and quit at once: 130, nothing printed.)
    /// The copy is sent once the first is seen handled (its line read), as two sent at once may
    /// reach rota as one.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_same_signal_again_at_once_is_the_first_repeated() {
        let s = common::start().await;
        let env = Env::new();
        let f = env.file(
            "t.json",
            &json_array(&[s.url("/sleep/1500"), s.url("/page/b")]),
        );
        let (mut child, id, mut err) = tokio::task::block_in_place(|| start(&env, &f));
        in_flight(&s, 1500).await;
        sigint(&child);
        let mut rest = tokio::task::block_in_place(|| {
            let line = until_cancelling(&mut err, &id);
            sigint(&child);
            line
        });
        let (status, stdout) = tokio::task::block_in_place(|| {
            rest.push_str(&err.rest_within(LIMIT));
            let out = Lines::new(child.stdout.take().unwrap()).rest_within(LIMIT);
            (child.wait_within(LIMIT), out)
        });
        assert_eq!(status.code(), Some(1), "{rest}");
        assert!(!rest.contains("interrupted"), "{rest}");
        let got: Vec<TargetStatus> = stdout
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(got.len(), 2, "{rest}");
        assert_eq!(
            got[0].status,
            TargetState::Done,
            "the in-flight target finished"
        );
        assert_eq!(got[1].status, TargetState::Pending);
        assert_eq!(view_of(&env, &id).await.job.status, JobStatus::Cancelled);
    }

    /// A cancelled job's summary counts the targets it never ran (`job ID cancelled: 2/8 done,
    /// 0 failed, 6 not run, 0 retries, 1.4s`), apart from those done and those failed.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_cancelled_jobs_summary_counts_the_targets_not_run() {
        let s = common::start().await;
        let env = Env::new();
        let f = env.file(
            "t.json",
            &json_array(&[
                s.url("/status/404"),
                s.url("/sleep/5000"),
                s.url("/page/c"),
                s.url("/page/d"),
            ]),
        );
        let (mut child, id, mut err) = tokio::task::block_in_place(|| start(&env, &f));
        in_flight(&s, 5000).await;
        sigint(&child);
        let rest = tokio::task::block_in_place(|| err.rest_within(LIMIT));
        let status = tokio::task::block_in_place(|| child.wait_within(LIMIT));
        assert_eq!(status.code(), Some(1), "{rest}");
        assert!(rest.contains(&format!("cancelling job {id}")), "{rest}");
        let summary = regex::Regex::new(&format!(
            r"^job {id} cancelled: 1/4 done, 1 failed, 2 not run, 0 retries, \d+\.\ds$"
        ))
        .unwrap();
        let last = rest.lines().last().unwrap_or_default();
        assert!(summary.is_match(last), "the summary:\n{rest}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_second_ctrl_c_exits_at_once() {
        let s = common::start().await;
        let env = Env::new();
        let f = env.file(
            "t.json",
            &json_array(&[s.url("/sleep/60000"), s.url("/page/b")]),
        );
        let (mut child, id, mut err) = tokio::task::block_in_place(|| start(&env, &f));
        in_flight(&s, 60000).await;
        sigint(&child);
        // The second only after the first was handled.
        let rest = tokio::task::block_in_place(|| {
            until_cancelling(&mut err, &id);
            // As a person would, not within 200 ms of the first (that is the first repeated).
            std::thread::sleep(AFTER_THE_FIRST);
            sigint(&child);
            err.rest_within(LIMIT)
        });
        let status = tokio::task::block_in_place(|| child.wait_within(LIMIT));
        // Without the second interrupt it would wait for the page (60 s), then exit 1.
        assert_eq!(status.code(), Some(130), "{rest}");
        assert!(rest.contains("interrupted"), "{rest}");
    }

    /// Waits until the server has had a request for `/sleep/{ms}`: the target is in flight,
    /// so the runner has stored it `running` (it stores a target running before fetching it).
    async fn in_flight(s: &common::Server, ms: u64) {
        let mut waited = Duration::ZERO;
        while s.hits(&format!("sleep/{ms}")) == 0 {
            assert!(waited < LIMIT, "the target never reached the server");
            tokio::time::sleep(Duration::from_millis(20)).await;
            waited += Duration::from_millis(20);
        }
    }

    /// A `rota run` killed outright (`kill -9`, no chance to cancel) leaves its job live in
    /// the file store. `rota status` shows it as it is (it starts no runner, so it never fails
    /// or changes a job), and the next `rota run` on that store fails it `interrupted` (jobs
    /// never resume), with no host in its logs even at `RUST_LOG=debug`.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_job_left_running_by_a_killed_run_is_failed_interrupted_by_the_next_run() {
        let s = common::start().await;
        let env = Env::new();
        let f = env.file(
            "t.json",
            &json_array(&[s.url("/sleep/60000"), s.url("/page/b")]),
        );
        let (mut child, id, _err) = tokio::task::block_in_place(|| start(&env, &f));
        in_flight(&s, 60000).await;
        child.kill().unwrap();
        tokio::task::block_in_place(|| child.wait().unwrap());

        for _ in 0..2 {
            let view = view_of(&env, &id).await;
            assert_eq!(
                view.job.status,
                JobStatus::Running,
                "status changed the job"
            );
            assert_eq!(view.job.error, "");
            assert_eq!(view.targets[0].status, TargetState::Running);
            assert_eq!(view.targets[1].status, TargetState::Pending);
        }

        // The next run on the store, as the same caller (whose one live job it was).
        let g = env.file("u.json", &json_array(&[s.url("/page/c")]));
        let mut cmd = rota_cmd();
        cmd.current_dir(env.dir.path())
            .env("USER", "tester")
            .env("ROTA_STORE", env.store())
            .env("RUST_LOG", "debug")
            .arg("run")
            .arg(&g)
            .timeout(LIMIT);
        let o = tokio::task::spawn_blocking(move || cmd.output().unwrap())
            .await
            .unwrap();
        let err = stderr(&o);
        assert_eq!(code(&o), 0, "{err}");
        assert!(err.contains("DEBUG"), "{err}");
        assert!(!err.contains("127.0.0.1"), "a host in the logs:\n{err}");
        assert_ne!(job_id(&o), id);

        let view = view_of(&env, &id).await;
        assert_eq!(view.job.status, JobStatus::Failed);
        assert_eq!(view.job.error, "interrupted");
    }

    /// A second SIGTERM exits at once with 143 (the shell's code for it, as 130 is for
    /// Ctrl-C), without waiting for the target in flight: that target stays `running` in the
    /// stored, cancelled job.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_second_sigterm_exits_at_once_with_143_leaving_the_target_in_flight_running() {
        let s = common::start().await;
        let env = Env::new();
        let f = env.file(
            "t.json",
            &json_array(&[s.url("/sleep/60000"), s.url("/page/b")]),
        );
        let (mut child, id, mut err) = tokio::task::block_in_place(|| start(&env, &f));
        in_flight(&s, 60000).await;
        signal(&child, "-TERM");
        let rest = tokio::task::block_in_place(|| {
            until_cancelling(&mut err, &id);
            std::thread::sleep(AFTER_THE_FIRST);
            signal(&child, "-TERM");
            err.rest_within(LIMIT)
        });
        let status = tokio::task::block_in_place(|| child.wait_within(LIMIT));
        // Without the second signal it would wait for the page (60 s), then exit 1.
        assert_eq!(status.code(), Some(143), "{rest}");
        assert!(rest.contains("interrupted"), "{rest}");

        let view = view_of(&env, &id).await;
        assert_eq!(view.job.status, JobStatus::Cancelled, "{rest}");
        assert_eq!(view.targets[0].status, TargetState::Running, "{rest}");
        assert_eq!(view.targets[1].status, TargetState::Pending, "{rest}");
    }

    /// A file store has one owner at a time: while `rota run` holds it, `rota status` on it
    /// fails with `in use by another owner` and a hint in terms of rota's commands (exit 1,
    /// nothing on stdout); once the run has ended, the same command reads the job.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn status_on_a_store_a_run_holds_fails_in_use_by_another_owner() {
        let s = common::start().await;
        let env = Env::new();
        let f = env.file("t.json", &json_array(&[s.url("/sleep/60000")]));
        let (mut child, id, _err) = tokio::task::block_in_place(|| start(&env, &f));
        let o = env.rota(&["status", &id], None).await;
        let err = stderr(&o);
        assert_eq!(code(&o), 1, "{err}");
        assert!(o.stdout.is_empty());
        assert!(err.contains("in use by another owner"), "{err}");
        assert!(
            err.ends_with(
                "(is a `rota run` or `rota demo` on it still running? try again once it ends)\n"
            ),
            "{err}"
        );
        assert!(
            child.try_wait().unwrap().is_none(),
            "the run ended before the status: {err}"
        );

        child.kill().unwrap();
        tokio::task::block_in_place(|| child.wait().unwrap());
        assert_eq!(view_of(&env, &id).await.job.id, id);
    }

    /// Two interrupts in quick succession (a Ctrl-C pressed twice, or `kill -INT` then
    /// `kill -TERM`): the first cancels the job, and the second ends the process only once
    /// that cancel is stored, so the job is `cancelled` in the store with the target in flight
    /// left `running`. (The second signal used to end the process before the cancel was
    /// written, leaving the job live.)
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn two_interrupts_back_to_back_leave_the_job_cancelled_in_the_store() {
        let s = common::start().await;
        let env = Env::new();
        let f = env.file(
            "t.json",
            &json_array(&[s.url("/sleep/60000"), s.url("/page/b")]),
        );
        let (mut child, id, mut err) = tokio::task::block_in_place(|| start(&env, &f));
        in_flight(&s, 60000).await;
        signals_at_once(&child, "-INT", "-TERM");
        let rest = tokio::task::block_in_place(|| err.rest_within(LIMIT));
        let status = tokio::task::block_in_place(|| child.wait_within(LIMIT));
        assert!(matches!(status.code(), Some(130 | 143)), "{rest}");
        let view = view_of(&env, &id).await;
        assert_eq!(view.job.status, JobStatus::Cancelled, "{rest}");
        assert_eq!(view.targets[0].status, TargetState::Running);
    }
}

/// Marks the closed redb store at `path` as schema version 2. (Only the mark: the migration of
/// schema 2's layout itself is tested in rota-store-redb; here, the command around it.)
fn mark_redb_as_schema_2(path: &std::path::Path) {
    const META: redb::TableDefinition<&str, &[u8]> = redb::TableDefinition::new("rota_meta");
    let db = redb::Database::open(path).unwrap();
    let txn = db.begin_write().unwrap();
    txn.open_table(META)
        .unwrap()
        .insert("schema_version", &b"2"[..])
        .unwrap();
    txn.commit().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgrade_migrates_a_redb_file_of_schema_2_that_status_refuses_unchanged() {
    let s = common::start().await;
    let env = Env::new();
    let f = env.file("t.json", &json_array(&[s.url("/ok"), s.url("/status/404")]));
    let path = env.dir.path().join("jobs.redb");
    let redb = format!("redb:{}", path.display());
    let run = env
        .rota(&["--store", &redb, "run", f.to_str().unwrap()], None)
        .await;
    assert_eq!(code(&run), 2, "{}", stderr(&run));
    let id = job_id(&run);
    mark_redb_as_schema_2(&path);

    let before = std::fs::read(&path).unwrap();
    let st = env.rota(&["--store", &redb, "status", &id], None).await;
    assert_eq!(code(&st), 1);
    assert_eq!(
        stderr(&st).trim_end(),
        format!(
            "rota: error: opening the store {redb}: schema version mismatch: found 2, \
             expected 3 (migrate it first: rota --store {redb} upgrade)"
        )
    );
    assert_eq!(
        std::fs::read(&path).unwrap(),
        before,
        "status changed the file"
    );

    let up = env.rota(&["--store", &redb, "upgrade"], None).await;
    assert_eq!(code(&up), 0, "{}", stderr(&up));
    assert_eq!(
        stderr(&up).trim_end(),
        format!("{redb}: migrated from schema 2 to 3, every job kept")
    );
    let st = env.rota(&["--store", &redb, "status", &id], None).await;
    assert_eq!(code(&st), 0, "{}", stderr(&st));
    let view: JobView = serde_json::from_slice(&st.stdout).unwrap();
    assert_eq!(view.job.status, JobStatus::Partial);
    assert_eq!(view.targets, lines(&run), "every target kept");

    let again = env.rota(&["--store", &redb, "upgrade"], None).await;
    assert_eq!(code(&again), 0, "{}", stderr(&again));
    assert!(
        stderr(&again).contains("already current"),
        "{}",
        stderr(&again)
    );
}

/// `rota upgrade` of a redb store another process holds fails `in use by another owner`, with
/// the hint `status` and `run` give, and leaves the file as its holder has it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgrade_of_a_redb_store_another_process_holds_says_which_command_may_hold_it() {
    let s = common::start().await;
    let env = Env::new();
    let f = env.file("t.json", &json_array(&[s.url("/ok")]));
    let path = env.dir.path().join("jobs.redb");
    let redb = format!("redb:{}", path.display());
    let run = env
        .rota(&["--store", &redb, "run", f.to_str().unwrap()], None)
        .await;
    assert_eq!(code(&run), 0, "{}", stderr(&run));
    let held = redb::Database::open(&path).unwrap();
    let before = std::fs::read(&path).unwrap();
    let up = env.rota(&["--store", &redb, "upgrade"], None).await;
    let err = stderr(&up);
    assert_eq!(code(&up), 1, "{err}");
    assert!(err.contains("in use by another owner"), "{err}");
    assert!(
        err.ends_with(
            "(is a `rota run` or `rota demo` on it still running? try again once it ends)\n"
        ),
        "{err}"
    );
    assert!(
        std::fs::read(&path).unwrap() == before,
        "upgrade changed the file"
    );
    drop(held);
}

/// `rota run` and `rota demo` refuse a redb file of schema 2 as `rota status` does, saying how
/// to migrate it, and leave it unchanged: nothing is fetched, and the job in it is kept as it
/// was for `rota upgrade`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_and_demo_refuse_a_redb_file_of_schema_2_and_leave_it_unchanged() {
    let s = common::start().await;
    let env = Env::new();
    let f = env.file("t.json", &json_array(&[s.url("/busy/v2/0")]));
    let f = f.to_str().unwrap();
    let path = env.dir.path().join("jobs.redb");
    let redb = format!("redb:{}", path.display());
    let first = env.rota(&["--store", &redb, "run", f], None).await;
    assert_eq!(code(&first), 0, "{}", stderr(&first));
    let id = job_id(&first);
    mark_redb_as_schema_2(&path);
    let before = std::fs::read(&path).unwrap();

    let want = format!(
        "rota: error: opening the store {redb}: schema version mismatch: found 2, expected 3 \
         (migrate it first: rota --store {redb} upgrade)"
    );
    for args in [
        ["--store", redb.as_str(), "run", f].as_slice(),
        ["--store", redb.as_str(), "demo"].as_slice(),
    ] {
        let o = env.rota(args, None).await;
        let err = stderr(&o);
        assert_eq!(code(&o), 1, "{args:?}: {err}");
        assert_eq!(err.trim_end(), want, "{args:?}");
        assert_eq!(
            std::fs::read(&path).unwrap(),
            before,
            "{args:?} changed the file"
        );
    }
    assert_eq!(s.hits("busy/v2"), 1, "fetched again");

    let up = env.rota(&["--store", &redb, "upgrade"], None).await;
    assert_eq!(code(&up), 0, "{}", stderr(&up));
    let st = env.rota(&["--store", &redb, "status", &id], None).await;
    assert_eq!(code(&st), 0, "{}", stderr(&st));
    let view: JobView = serde_json::from_slice(&st.stdout).unwrap();
    assert_eq!(view.job.status, JobStatus::Done);
    assert_eq!(view.targets, lines(&first));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgrade_of_an_empty_sqlite_file_is_refused_and_leaves_it_empty() {
    let env = Env::new();
    env.file("jobs.sqlite3", "");
    let o = env.rota(&["upgrade"], None).await;
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("empty file, not a rota store"),
        "{}",
        stderr(&o)
    );
    assert_eq!(std::fs::metadata(env.db()).unwrap().len(), 0);
}

/// A SQLite store of this version is opened (so checked), said current and left as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgrade_of_a_current_sqlite_store_says_so_and_changes_nothing() {
    let env = Env::new();
    drop(rota_store_sqlite::SqliteStore::open(env.db()).unwrap());
    let before = std::fs::read(env.db()).unwrap();
    assert!(!before.is_empty());
    let o = env.rota(&["upgrade"], None).await;
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(
        stderr(&o).contains(&format!("{}: already current, left alone", env.store())),
        "{}",
        stderr(&o)
    );
    assert_eq!(std::fs::read(env.db()).unwrap(), before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_demo_its_caps_cannot_hold_names_the_flags_and_stores_nothing() {
    let env = Env::new();
    for flag in [["--jobs-total", "1"], ["--targets-per-job", "3"]] {
        let o = env.rota(&["demo", flag[0], flag[1]], None).await;
        assert_eq!(code(&o), 1, "{}", stderr(&o));
        assert!(
            stderr(&o).contains("it needs --jobs-total 2 and --targets-per-job 4 or more"),
            "{}",
            stderr(&o)
        );
        assert!(o.stdout.is_empty());
        assert!(!env.db().exists(), "{flag:?}: the store was created");
    }
}

/// Caps of exactly what the demo needs are enough; on the memory store it says the jobs are
/// gone with it, and offers no `rota status` to read them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_demo_with_just_the_caps_it_needs_runs_and_on_memory_says_nothing_is_kept() {
    let env = Env::new();
    let args = [
        "--store",
        "memory",
        "--jobs-total",
        "2",
        "--targets-per-job",
        "4",
    ];
    let out = demo_saying(
        &env,
        &args,
        &["The memory store is gone with this process: run the demo with --store sqlite:PATH"],
    )
    .await;
    assert!(!out.contains("status"), "{out}");
    assert!(!env.db().exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_demo_with_a_timeout_longer_than_the_slow_page_says_it_answers_within_it() {
    let wants = [
        "/slow        answers after 3s, within the fetcher's 20s timeout",
        "bob   #2  GET /slow        → done",
    ];
    // Not 30s, the built-in fetcher's own default: the line shows the timeout given.
    demo_saying(&Env::new(), &["--timeout", "20s"], &wants).await;
}

/// With a timeout of exactly the slow page's time, which of the two comes first is a race: the
/// demo says so, rather than "past" (or "within") the timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_demo_with_a_timeout_of_the_slow_pages_time_says_either_may_come_first() {
    let wants =
        ["/slow        answers after 3s, just at the fetcher's 3s timeout: either may come first"];
    let out = demo_saying(&Env::new(), &["--timeout", "3s"], &wants).await;
    assert!(!out.contains("past the fetcher"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demos_read_back_commands_work_in_the_shell_that_ran_it() {
    let env = Env::new();
    // The default store given by flag, while ROTA_STORE (another store) stays set.
    let out = demo_saying(&env, &["--store", "sqlite:rota.sqlite3"], &[]).await;
    let commands: Vec<&str> = out
        .lines()
        .filter_map(|l| l.trim().strip_prefix("rota "))
        .filter(|l| l.contains("status "))
        .collect();
    assert_eq!(commands.len(), 2, "{out}");
    for c in commands {
        let args: Vec<&str> = c.split(' ').collect();
        let st = env.rota(&args, None).await;
        assert_eq!(code(&st), 0, "`rota {c}`: {}", stderr(&st));
    }
}

/// On the default store (no `--store`, no `ROTA_STORE`), the demo says both jobs are stored in
/// it, and its read-back commands are plain `rota status ID`, to be run from this directory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_on_the_default_store_offers_plain_read_back_commands() {
    let env = Env::new();
    let mut cmd = rota_cmd();
    cmd.current_dir(env.dir.path())
        .env_remove("ROTA_STORE")
        .env_remove("RUST_LOG")
        .arg("demo")
        .timeout(LIMIT);
    let o = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let out = String::from_utf8(o.stdout).unwrap();
    let db = env.dir.path().join("rota.sqlite3");
    assert!(
        out.contains(&format!("Both jobs are stored in sqlite:{}.", db.display())),
        "{out}"
    );
    assert!(
        out.contains("Read one back (from this directory) with:"),
        "{out}"
    );
    let ids: Vec<&str> = out
        .lines()
        .filter_map(|l| l.strip_prefix("  rota status "))
        .collect();
    assert_eq!(ids.len(), 2, "{out}");
    for id in ids {
        let st = env
            .rota(&["--store", "sqlite:rota.sqlite3", "status", id], None)
            .await;
        assert_eq!(code(&st), 0, "{}", stderr(&st));
    }
}

/// The read-back commands, pasted into a shell, work for a store path with a space and a quote.
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demos_read_back_commands_work_in_a_shell_for_a_path_with_a_space_and_a_quote() {
    let env = Env::new();
    let dir = env.dir.path().join("my jobs").join("it's here");
    std::fs::create_dir_all(&dir).unwrap();
    let store = format!("sqlite:{}", dir.join("rota.sqlite3").display());
    let out = demo_saying(&env, &["--store", &store], &[]).await;
    let commands: Vec<&str> = out
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("rota ") && l.contains(" status "))
        .collect();
    assert_eq!(commands.len(), 2, "{out}");
    let bin = assert_cmd::cargo::cargo_bin!("rota");
    let path = format!(
        "{}:{}",
        bin.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    for c in commands {
        let mut sh = sh_cmd();
        sh.args(["-c", c])
            .env("PATH", &path)
            .env_remove("ROTA_STORE")
            .current_dir(env.dir.path())
            .timeout(LIMIT);
        let st = tokio::task::spawn_blocking(move || sh.output().unwrap())
            .await
            .unwrap();
        assert_eq!(code(&st), 0, "`{c}`: {}", stderr(&st));
        let view: JobView = serde_json::from_slice(&st.stdout).unwrap();
        assert!(view.job.status.is_terminal());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgrade_of_no_file_or_the_memory_store_is_an_error_and_creates_nothing() {
    let env = Env::new();
    let o = env.rota(&["upgrade"], None).await;
    assert_eq!(code(&o), 1);
    assert!(stderr(&o).contains("no store at"), "{}", stderr(&o));
    assert!(!env.db().exists());
    let o = env.rota(&["--store", "memory", "upgrade"], None).await;
    assert_eq!(code(&o), 1);
    assert!(stderr(&o).contains("nothing to upgrade"), "{}", stderr(&o));
}

/// `rota run` and `rota status` on a `--store` file that is not a rota store (a text file for
/// SQLite; bytes that are no redb file, and a redb store cut short, for redb) fail with exit 1
/// and the store's `corrupt data` error, fetch nothing, print nothing on stdout and leave the
/// file byte for byte unchanged (README "Stores": "A file that is not a rota store (a text
/// file, another program's database, a truncated file) fails with `StoreError::Corrupt` ...
/// the file is left byte for byte unchanged").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_and_status_refuse_a_file_that_is_not_a_rota_store_and_leave_it_unchanged() {
    let s = common::start().await;
    let env = Env::new();
    let f = env.file("t.json", &json_array(&[s.url("/busy/notrota/0")]));
    let f = f.to_str().unwrap();

    // A real redb store, cut to half its length.
    let whole = env.dir.path().join("whole.redb");
    let made = env
        .rota(
            &["--store", &format!("redb:{}", whole.display()), "run", f],
            None,
        )
        .await;
    assert_eq!(code(&made), 0, "{}", stderr(&made));
    let id = job_id(&made);
    assert_eq!(s.hits("busy/notrota"), 1);
    let mut cut = std::fs::read(&whole).unwrap();
    cut.truncate(cut.len() / 2);
    // Bytes of no format (a fixed xorshift sequence, so the test is the same every run).
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let noise: Vec<u8> = (0..8192)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    // A text file longer than a SQLite header (100 bytes).
    let text = (1..=5)
        .map(|i| format!("{i},https://example.com/page/{i}\n"))
        .collect::<String>()
        .into_bytes();
    assert!(text.len() > 100);

    // (store URL scheme, file name, contents, what the error says after the path, if exact)
    let cases: [(&str, &str, Vec<u8>, Option<&str>); 4] = [
        (
            "sqlite",
            "rota.sqlite3",
            text.clone(),
            Some("not a SQLite database (no SQLite header): not a rota store"),
        ),
        (
            "redb",
            "text.redb",
            text,
            Some("not a redb file, so not a rota store"),
        ),
        (
            "redb",
            "noise.redb",
            noise,
            Some("not a redb file, so not a rota store"),
        ),
        ("redb", "cut.redb", cut, None),
    ];
    for (scheme, name, contents, says) in cases {
        let path = env.dir.path().join(name);
        std::fs::write(&path, &contents).unwrap();
        let url = format!("{scheme}:{}", path.display());
        let prefix = format!(
            "rota: error: opening the store {url}: corrupt data: {}: ",
            path.display()
        );
        for args in [
            ["--store", url.as_str(), "run", f].as_slice(),
            ["--store", url.as_str(), "status", &id].as_slice(),
        ] {
            let o = env.rota(args, None).await;
            let err = stderr(&o);
            assert_eq!(code(&o), 1, "{args:?}: {err}");
            match says {
                Some(says) => assert_eq!(err.trim_end(), format!("{prefix}{says}"), "{args:?}"),
                None => assert!(
                    err.starts_with(&prefix) && err.trim_end().lines().count() == 1,
                    "{args:?}: {err}"
                ),
            }
            assert!(o.stdout.is_empty(), "{args:?}: {:?}", o.stdout);
            assert_eq!(
                std::fs::read(&path).unwrap(),
                contents,
                "{args:?} changed the file"
            );
        }
    }
    assert_eq!(s.hits("busy/notrota"), 1, "fetched again");
    // Nothing was created beside the refused files.
    let mut names: Vec<String> = std::fs::read_dir(env.dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "cut.redb",
            "noise.redb",
            "rota.sqlite3",
            "t.json",
            "text.redb",
            "whole.redb"
        ]
    );
}
