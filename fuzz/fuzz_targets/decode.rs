//! Fuzz target `decode`: arbitrary bytes where rota decodes stored data. The input (as UTF-8,
//! lossily) is used
//! - (a) as a stored result: `TargetRow::to_status` must agree with `TargetResult::from_json`
//!   (the decoded result, or `result: None` and an error naming the corruption);
//! - (b) as an options column: `Options::from_json`, and what decodes re-encodes to itself;
//!
//! and the raw bytes are used
//! - (c) as a whole file handed to `SqliteStore::open` and `RedbStore::open`: an error, or a
//!   store whose reads and a few writes all return (any `Result`). A file that fails to open is
//!   not changed.
//!
//! Never a panic, never an unbounded allocation (run with `-rss_limit_mb=2048` and a
//! `-max_len`). `RedbStore::open` catches a panic of redb itself on a damaged file and returns
//! `StoreError::Corrupt`; such a caught panic is allowed (redb's own bug, handled), every other
//! panic aborts as usual. Set `ROTA_FUZZ_STRICT=1` to abort on the caught ones too.
#![no_main]

use std::cell::Cell;
use std::fs;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::pin;
use std::sync::OnceLock;
use std::task::{Context, Poll, Waker};

use libfuzzer_sys::fuzz_target;
use rota_core::{
    BatchStore, CallerClass, Caps, NewJob, Options, TargetResult, TargetRow, TargetWrite,
};
use rota_store_redb::RedbStore;
use rota_store_sqlite::SqliteStore;

thread_local! {
    static IN_REDB_OPEN: Cell<bool> = const { Cell::new(false) };
}

fn dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| match tempfile::tempdir() {
        Ok(d) => d.keep(),
        Err(e) => panic!("no temp dir: {e}"),
    })
}

fn block_on<F: Future>(f: F) -> F::Output {
    let mut f = pin!(f);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::yield_now();
    }
}

fn job_id(n: u8) -> String {
    format!("{:032x}", 0x0f0f_u32 + u32::from(n % 6))
}

/// Every read and a few writes on a store opened from fuzzed bytes: each must return.
fn exercise(s: &dyn BatchStore) {
    for n in 0..6 {
        let id = job_id(n);
        let _ = block_on(s.job(&id));
        let _ = block_on(s.targets(&id));
    }
    let _ = block_on(s.live_jobs(None));
    let _ = block_on(s.live_jobs(Some("alice")));
    let _ = block_on(s.total_bytes());
    let _ = block_on(s.recover("interrupted", 2_000_000));
    let job = NewJob {
        id: format!("{:032x}", 0xfeed_u32),
        caller: "alice".into(),
        class: CallerClass::Fleet,
        idem_key: "k0".into(),
        targets: vec![("https://example.com/a".into(), "{}".into())],
        now: 2_000_000,
    };
    let caps = Caps {
        targets_per_job: 4,
        jobs_per_caller: 4,
        jobs_total: 8,
        ttl_secs: 100,
    };
    let _ = block_on(s.admit(&job, &caps));
    let _ = block_on(s.start_target(&job.id, 0, 2_000_001));
    let write = TargetWrite::Done {
        result: r#"{"content":"x"}"#.into(),
    };
    let _ = block_on(s.finish_target(&job.id, 0, &write, 2_000_002, None));
    let _ = block_on(s.sweep(2_000_003, 10));
    let _ = block_on(s.evict(0));
}

/// Clears the directory of the previous input's files (main file, journals, temp files).
fn clear(dir: &Path) {
    if let Ok(entries) = fs::read_dir(dir) {
        for e in entries.flatten() {
            let _ = fs::remove_file(e.path());
        }
    }
}

fn check_file(data: &[u8], name: &str, open: impl FnOnce(&Path) -> Option<Box<dyn BatchStore>>) {
    let dir = dir();
    clear(dir);
    let path = dir.join(name);
    if fs::write(&path, data).is_err() {
        return;
    }
    match open(&path) {
        Some(store) => exercise(store.as_ref()),
        None => {
            let after = fs::read(&path).unwrap_or_default();
            assert!(
                after == data,
                "{name}: a file that failed to open was changed"
            );
        }
    }
}

/// Writes a small SQLite store and a small redb store (two jobs: one done, one queued) into
/// `out`, as seeds for this target's corpus (`corpus/decode/seed_*_store`; no file extension,
/// since the repository ignores `*.redb`): `ROTA_FUZZ_WRITE_SEEDS=<dir> cargo fuzz run -s none
/// decode -- -runs=0`.
fn write_seeds(out: &Path) {
    let _ = fs::create_dir_all(out);
    let fill = |s: &dyn BatchStore| {
        let caps = Caps {
            targets_per_job: 4,
            jobs_per_caller: 4,
            jobs_total: 8,
            ttl_secs: 100,
        };
        for (n, caller) in [(0u8, "alice"), (1, "bob")] {
            let job = NewJob {
                id: job_id(n),
                caller: caller.into(),
                class: CallerClass::Fleet,
                idem_key: format!("k{n}"),
                targets: vec![
                    ("https://example.com/a".into(), "{}".into()),
                    (
                        "https://example.com/\u{e9}".into(),
                        r#"{"mode":"text"}"#.into(),
                    ),
                ],
                now: 1_000_000,
            };
            let _ = block_on(s.admit(&job, &caps));
        }
        let id = job_id(0);
        let _ = block_on(s.start_target(&id, 0, 1_000_001));
        let done = TargetWrite::Done {
            result: r#"{"content":"hello","meta":{"status":200}}"#.into(),
        };
        let _ = block_on(s.finish_target(&id, 0, &done, 1_000_002, None));
        let failed = TargetWrite::Failed {
            error: "HTTP 404".into(),
            hint: "check the url".into(),
        };
        let _ = block_on(s.finish_target(
            &id,
            1,
            &failed,
            1_000_003,
            Some(rota_core::JobStatus::Partial),
        ));
    };
    if let Ok(s) = SqliteStore::open(out.join("seed_sqlite_store")) {
        fill(&s);
    }
    if let Ok(s) = RedbStore::open(out.join("seed_redb_store")) {
        fill(&s);
    }
}

fuzz_target!(
    init: {
        if let Some(out) = std::env::var_os("ROTA_FUZZ_WRITE_SEEDS") {
            write_seeds(Path::new(&out));
        }
        let strict = std::env::var_os("ROTA_FUZZ_STRICT").is_some();
        let default_hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !strict && IN_REDB_OPEN.with(Cell::get) {
                return; // caught by RedbStore::open and returned as StoreError::Corrupt
            }
            default_hook(info);
            std::process::abort();
        }));
    },
    |data: &[u8]| {
        let text = String::from_utf8_lossy(data);

        // (a) a stored result
        let mut row = TargetRow::pending(0, "u", "{}");
        row.apply(&TargetWrite::Done {
            result: text.to_string(),
        });
        let status = row.to_status();
        match TargetResult::from_json(&text) {
            Ok(r) => {
                assert_eq!(status.result.as_ref(), Some(&r));
                assert!(r.to_json().is_ok());
            }
            Err(_) => {
                assert_eq!(status.result, None);
                assert!(status.error.starts_with("corrupt stored result"), "{}", status.error);
            }
        }

        // (b) an options column
        if let Ok(o) = Options::from_json(&text) {
            assert_eq!(Options::from_json(&o.to_json()).ok(), Some(o));
        }

        // (c) a whole file
        check_file(data, "store.sqlite", |p| {
            SqliteStore::open(p).ok().map(|s| Box::new(s) as Box<dyn BatchStore>)
        });
        check_file(data, "store.redb", |p| {
            IN_REDB_OPEN.with(|f| f.set(true));
            let s = RedbStore::open(p);
            IN_REDB_OPEN.with(|f| f.set(false));
            s.ok().map(|s| Box::new(s) as Box<dyn BatchStore>)
        });
    }
);
