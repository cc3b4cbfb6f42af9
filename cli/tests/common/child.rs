//! A child process a test spawns (`rota`), killed when the test ends however it ends, and its
//! output read with a bound on every wait: a test that fails between spawn and kill leaves no
//! child behind (one left would hold the inherited stderr open, and `cargo test 2>&1 | tee`
//! would never end), and a child that stalls fails the test rather than hanging it.

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

/// The lines of a child's stream, read by a thread of their own (from the moment this is
/// made, to the stream's end) so that each wait for one can be bounded.
pub struct Lines(Receiver<std::io::Result<String>>);

impl Lines {
    /// Reads `stream` (a child's stdout or stderr) line by line until its end.
    pub fn new(stream: impl Read + Send + 'static) -> Lines {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut stream = BufReader::new(stream);
            loop {
                let mut line = String::new();
                match stream.read_line(&mut line) {
                    Ok(0) => break,
                    Ok(_) => {
                        if tx.send(Ok(line)).is_err() {
                            break;
                        }
                    }
                    Err(e) => {
                        let _ = tx.send(Err(e));
                        break;
                    }
                }
            }
        });
        Lines(rx)
    }

    /// The next line, with its `\n` if it has one, or `None` at the end of the stream; panics
    /// if none comes within `limit`.
    pub fn next_within(&mut self, limit: Duration) -> Option<String> {
        match self.0.recv_timeout(limit) {
            Ok(line) => Some(line.unwrap()),
            Err(RecvTimeoutError::Disconnected) => None,
            Err(RecvTimeoutError::Timeout) => {
                panic!("the child printed no line for {limit:?}: stuck")
            }
        }
    }

    /// Everything left up to the end of the stream (the child gone or done with it), as
    /// `read_to_string` would read it; panics if the end does not come within `limit`.
    pub fn rest_within(&mut self, limit: Duration) -> String {
        let deadline = Instant::now() + limit;
        let mut rest = String::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.0.recv_timeout(left) {
                Ok(line) => rest.push_str(&line.unwrap()),
                Err(RecvTimeoutError::Disconnected) => return rest,
                Err(RecvTimeoutError::Timeout) => {
                    panic!("the child's output did not end within {limit:?}")
                }
            }
        }
    }
}

/// Runs `f` (a blocking read of a child's output, say) on a thread of its own and returns
/// what it returns; panics, saying `what` is stuck, if it has not returned within `limit`.
pub fn within<T: Send + 'static>(
    limit: Duration,
    what: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = mpsc::channel();
    let thread = std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(limit) {
        Ok(v) => v,
        Err(RecvTimeoutError::Disconnected) => match thread.join() {
            Err(panic) => std::panic::resume_unwind(panic),
            Ok(()) => unreachable!("the thread sends before it ends"),
        },
        Err(RecvTimeoutError::Timeout) => panic!("{what}: not done within {limit:?}"),
    }
}
