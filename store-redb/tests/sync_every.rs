//! `RedbOptions::sync_every` with `Durability::None`: "one commit in this many is made
//! durable", and 0 means "none until the store is closed". What a `kill -9` keeps is the store
//! as of its last durable commit, so a child process makes a known number of commits, one admit
//! each, and is killed once it has made them all; the parent counts the jobs left in the file.
//! No timing is involved: the kill comes after the child says it has made every commit.
//!
//! The child is this same test binary, re-executed with [`CHILD_ENV`] set.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../../store-sqlite/tests/common/child.rs"]
mod child_process;

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use child_process::{KillOnDrop, Lines};

use rota_core::{Admission, BatchStore, CallerClass, Caps, NewJob};
use rota_store_redb::{Durability, RedbOptions, RedbStore};

/// Set in the child: the store's path.
const CHILD_ENV: &str = "ROTA_REDB_SYNC_EVERY_CHILD";
/// Set in the child: `sync_every` and how many jobs to admit, as `N,K`.
const PLAN_ENV: &str = "ROTA_REDB_SYNC_EVERY_PLAN";
const TEST: &str = "a_kill_keeps_the_commits_up_to_the_last_one_sync_every_made_durable";
/// Long enough for the child's commits on a loaded machine; only there so a hang fails the test.
const LIMIT: Duration = Duration::from_secs(60);

fn caps() -> Caps {
    Caps {
        targets_per_job: 32,
        jobs_per_caller: 100,
        jobs_total: 100,
        ttl_secs: 3600,
    }
}

fn id(n: u32) -> String {
    format!("{n:032x}")
}

fn new_job(n: u32) -> NewJob {
    NewJob {
        id: id(n),
        caller: "alice".into(),
        class: CallerClass::Fleet,
        idem_key: format!("key-{n}"),
        targets: vec![(format!("https://example.com/{n}"), "{}".into())],
        now: 100,
    }
}

/// The child: `k` admits, each its own commit, on a no-sync store with `sync_every` `n`; then
/// `DONE`, and it waits to be killed without ever closing the store.
async fn child(path: &str, plan: &str) {
    let (n, k) = plan.split_once(',').unwrap();
    let (n, k): (u32, u32) = (n.parse().unwrap(), k.parse().unwrap());
    let store = RedbStore::open_with(
        path,
        RedbOptions {
            durability: Durability::None,
            sync_every: n,
            ..RedbOptions::default()
        },
    )
    .unwrap();
    for j in 0..k {
        assert_eq!(
            store.admit(&new_job(j), &caps()).await.unwrap(),
            Admission::Created
        );
    }
    let mut out = std::io::stdout().lock();
    writeln!(out, "DONE").unwrap();
    out.flush().unwrap();
    loop {
        tokio::time::sleep(Duration::from_secs(3600)).await;
    }
}

/// Runs a child that admits `k` jobs with `sync_every` `n`, SIGKILLs it once it has, and returns
/// which of the jobs the file still holds.
async fn kept_after_kill(n: u32, k: u32) -> Vec<bool> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rota.redb");
    let mut child = KillOnDrop::spawn(
        Command::new(std::env::current_exe().unwrap())
            .args([TEST, "--exact", "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, &path)
            .env(PLAN_ENV, format!("{n},{k}"))
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit()),
    );
    let mut lines = Lines::new(child.stdout.take().unwrap());
    let mut done = false;
    while let Some(line) = lines.next_within(LIMIT) {
        // libtest may have printed the test's name on the same line.
        if line.contains("DONE") {
            done = true;
            break;
        }
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(done, "the child stopped before making its commits");
    check_kept(&path, k).await
}

async fn check_kept(path: &Path, k: u32) -> Vec<bool> {
    let store = RedbStore::open(path).unwrap();
    store.verify().unwrap();
    let mut kept = Vec::new();
    for j in 0..k {
        kept.push(store.job(&id(j)).await.unwrap().is_some());
    }
    assert_eq!(
        store.live_jobs(None).await.unwrap(),
        kept.iter().filter(|k| **k).count()
    );
    kept
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_keeps_the_commits_up_to_the_last_one_sync_every_made_durable() {
    if let Ok(path) = std::env::var(CHILD_ENV) {
        return child(&path, &std::env::var(PLAN_ENV).unwrap()).await;
    }
    // (sync_every, commits made, how many of them survive the kill)
    for (n, k, kept) in [
        // Every commit durable.
        (1, 4, 4),
        // The 3rd and 6th commits are durable: the 7th and 8th are lost.
        (3, 8, 6),
        // The 4th is durable, the 5th to 7th lost.
        (4, 7, 4),
        // None is, until a close that never comes.
        (0, 4, 0),
    ] {
        let got = kept_after_kill(n, k).await;
        let want: Vec<bool> = (0..k).map(|j| j < kept).collect();
        assert_eq!(got, want, "sync_every {n}, {k} commits");
    }
}
