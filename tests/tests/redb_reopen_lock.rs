//! A redb store's file stays locked while the store opens its database again after real I/O
//! errors (a file size limit, as in `file_limit.rs`): another opener, trying all along, never
//! gets it. The other opener takes the lock redb takes on the whole file (`flock`, besides its
//! byte-range locks, on Linux, for redb before 4.3; not under redb's `experimental-api-5`
//! feature, which nothing here enables), on a file description of its own, as another process
//! would. Before the store held its file across the reopen, it took it tens of thousands of
//! times a run, and the store was refused its own file.
//!
//! Alone in its test binary (its own process): the limit is the process's.

#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod fsize;

use std::fs::{OpenOptions, TryLockError};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::time::Duration;

use fsize::{ignore_sigxfsz, limit_files_to, unlimited};
use rota_core::{BatchStore, CallerClass, Caps, NewJob, TargetWrite};
use rota_store_redb::RedbStore;

const CAPS: Caps = Caps {
    targets_per_job: 8,
    jobs_per_caller: 100_000,
    jobs_total: 100_000,
    ttl_secs: 3600,
};

fn job(n: usize) -> NewJob {
    NewJob {
        id: format!("{n:032x}"),
        caller: "alice".into(),
        class: CallerClass::Fleet,
        idem_key: format!("key-{n}"),
        targets: vec![("https://files.example/".into(), "{}".into())],
        now: 1,
    }
}

#[tokio::test]
async fn no_other_opener_gets_the_file_while_the_store_opens_its_database_again() {
    ignore_sigxfsz();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rota.redb");
    let store = RedbStore::open(&path).unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let (tries, taken) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let other = {
        let (stop, tries, taken, path) = (stop.clone(), tries.clone(), taken.clone(), path.clone());
        std::thread::spawn(move || {
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .open(&path)
                .unwrap();
            while !stop.load(SeqCst) {
                tries.fetch_add(1, SeqCst);
                match file.try_lock() {
                    Ok(()) => {
                        taken.fetch_add(1, SeqCst);
                        file.unlock().unwrap();
                    }
                    Err(TryLockError::WouldBlock) => {}
                    Err(TryLockError::Error(e)) => panic!("flock: {e}"),
                }
            }
        })
    };

    let page = TargetWrite::Done {
        result: "x".repeat(64 * 1024),
    };
    let (mut n, mut reopens, mut refused) = (0, 0, 0);
    for _ in 0..20 {
        let len = std::fs::metadata(&path).unwrap().len();
        limit_files_to(len + 256 * 1024);
        // Writes until the limit makes one fail: redb refuses the database from then on.
        loop {
            n += 1;
            let j = job(n);
            if store.admit(&j, &CAPS).await.is_err()
                || store.finish_target(&j.id, 0, &page, 2, None).await.is_err()
            {
                break;
            }
        }
        limit_files_to(unlimited());
        reopens += 1;
        // The next write opens the database again.
        loop {
            n += 1;
            match store.admit(&job(n), &CAPS).await {
                Ok(_) => break,
                Err(e) => {
                    refused += 1;
                    assert!(refused < 100, "the store stays refused: {e}");
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        }
    }
    stop.store(true, SeqCst);
    other.join().unwrap();
    let (tries, taken) = (tries.load(SeqCst), taken.load(SeqCst));
    println!(
        "{reopens} reopens; the other opener's tries: {tries}, taken: {taken}; writes refused \
         after the limit was lifted: {refused}"
    );
    assert!(tries > 0);
    assert_eq!(
        taken, 0,
        "another opener took the file while the store held it"
    );
    assert_eq!(refused, 0, "the store was refused its own file");
    store.verify().unwrap();
    drop(store);
    // Let go of with the store.
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    file.try_lock().unwrap();
}
