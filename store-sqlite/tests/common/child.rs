//! A child process of a test, killed when the test ends however it ends, and its output read
//! with a bound on every wait: a test that fails between spawn and kill leaves no child
//! behind (one left would hold the inherited stderr open, and `cargo test 2>&1 | tee` would
//! never end), and a child that stalls fails the test rather than hanging it. Shared: the tests
//! of `rota-store-redb` include this file too (by its path), so it uses nothing but `std`.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read};
use std::ops::{Deref, DerefMut};
use std::process::{Child, Command, ExitStatus};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

/// A spawned child, killed and reaped when dropped (a [`Child`] is not).
pub struct KillOnDrop(Child);

impl KillOnDrop {
    /// Spawns `cmd`.
    pub fn spawn(cmd: &mut Command) -> KillOnDrop {
        KillOnDrop(cmd.spawn().unwrap())
    }

    /// Waits for the child to end; panics (and the drop kills it) if it has not within `limit`.
    pub fn wait_within(&mut self, limit: Duration) -> ExitStatus {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.0.try_wait().unwrap() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "the child did not end within {limit:?}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Deref for KillOnDrop {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl DerefMut for KillOnDrop {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        // Gone already, or killed just now: either way, reaped.
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The lines of a child's stream, read by a thread of their own so that each wait for one
/// can be bounded.
pub struct Lines(Receiver<std::io::Result<String>>);

impl Lines {
    /// Reads `stream` (a child's stdout, say) line by line until its end.
    pub fn new(stream: impl Read + Send + 'static) -> Lines {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stream).lines() {
                let failed = line.is_err();
                if tx.send(line).is_err() || failed {
                    break;
                }
            }
        });
        Lines(rx)
    }

    /// The next line (without its end), or `None` at the end of the stream; panics if none
    /// comes within `limit`.
    pub fn next_within(&mut self, limit: Duration) -> Option<String> {
        match self.0.recv_timeout(limit) {
            Ok(line) => Some(line.unwrap()),
            Err(RecvTimeoutError::Disconnected) => None,
            Err(RecvTimeoutError::Timeout) => {
                panic!("the child printed no line for {limit:?}: stuck")
            }
        }
    }

    /// Every line left up to the end of the stream (the child gone); panics if the end does
    /// not come within `limit`.
    pub fn rest_within(&mut self, limit: Duration) -> Vec<String> {
        let deadline = Instant::now() + limit;
        let mut rest = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.0.recv_timeout(left) {
                Ok(line) => rest.push(line.unwrap()),
                Err(RecvTimeoutError::Disconnected) => return rest,
                Err(RecvTimeoutError::Timeout) => {
                    panic!("the child's output did not end within {limit:?}")
                }
            }
        }
    }
}
