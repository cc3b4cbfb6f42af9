//! Writing to stdout and stderr without panicking when they are closed.
//!
//! `println!` and `eprintln!` panic when their stream is gone (`rota demo | head`), and a panic
//! in a runner's worker, outside the fetch, would stop that worker. Everything the command
//! prints goes through here instead: a failed write to stdout is remembered, so the command can
//! stop; a failed write to stderr is dropped.

use std::io::{self, Write};
use std::sync::{Mutex, OnceLock, PoisonError};

use indicatif::ProgressBar;

/// What the first failed write to stdout failed with.
static STDOUT_FAILED: OnceLock<String> = OnceLock::new();

/// Writes `line` and a newline to stdout. `false` if stdout is gone (this time or before).
pub fn out(line: &str) -> bool {
    write_line(&mut io::stdout().lock(), &STDOUT_FAILED, line)
}

/// Writes `line` and a newline to `w`, unless a write to it has failed before (`failed` holds
/// why): output that lost a line does not go on past the gap. Whether `w` took it.
fn write_line(w: &mut impl Write, failed: &OnceLock<String>, line: &str) -> bool {
    if failed.get().is_some() {
        return false;
    }
    match writeln!(w, "{line}").and_then(|()| w.flush()) {
        Ok(()) => true,
        Err(e) => {
            let _ = failed.set(e.to_string());
            false
        }
    }
}

/// Why the first failed write to stdout failed (`Broken pipe (os error 32)`, `No space left on
/// device (os error 28)`), if one has.
pub fn stdout_failure() -> Option<&'static str> {
    STDOUT_FAILED.get().map(String::as_str)
}

/// Writes `line` and a newline to stderr, ignoring a failure.
pub fn err(line: &str) {
    let mut w = io::stderr().lock();
    let _ = writeln!(w, "{line}");
}

/// The progress bar on stderr, while one is shown: the logs go above it ([`QuietStderr`]).
static BAR: Mutex<Option<ProgressBar>> = Mutex::new(None);

/// Tells the log writer of the bar now shown on stderr, or that none is (`None`).
pub fn showing(bar: Option<ProgressBar>) {
    *BAR.lock().unwrap_or_else(PoisonError::into_inner) = bar;
}

/// The bar shown on stderr, if any (a handle to it: the lock is not held while it is used).
fn bar_shown() -> Option<ProgressBar> {
    BAR.lock().unwrap_or_else(PoisonError::into_inner).clone()
}

/// Stderr for the log subscriber: a write never fails (tracing-subscriber reports a failed write
/// with `eprintln!`, which panics when stderr is gone).
#[derive(Debug, Clone, Copy, Default)]
pub struct QuietStderr;

impl Write for QuietStderr {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        // tracing-subscriber writes each record whole, in one call: the bar is cleared for it
        // and drawn again below it, not written over.
        match bar_shown() {
            Some(bar) => bar.suspend(|| {
                let _ = io::stderr().write_all(buf);
            }),
            None => {
                let _ = io::stderr().write_all(buf);
            }
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        let _ = io::stderr().flush();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A writer whose first `fail` flushes fail (a full disk, say), and that takes everything
    /// after.
    struct FailsAtFirst {
        fail: usize,
        took: Vec<u8>,
    }

    impl Write for FailsAtFirst {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.took.extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> io::Result<()> {
            if self.fail > 0 {
                self.fail -= 1;
                self.took.clear();
                return Err(io::Error::other("no space"));
            }
            Ok(())
        }
    }

    #[test]
    fn after_a_failed_write_nothing_more_is_written() {
        let failed = OnceLock::new();
        let mut w = FailsAtFirst {
            fail: 0,
            took: Vec::new(),
        };
        assert!(write_line(&mut w, &failed, "one"));
        assert_eq!(w.took, b"one\n");
        w.fail = 1;
        assert!(!write_line(&mut w, &failed, "two"));
        assert_eq!(failed.get().map(String::as_str), Some("no space"));
        // The writer would take the next line, but the output has a gap: it stays stopped.
        assert!(!write_line(&mut w, &failed, "three"));
        assert!(w.took.is_empty(), "{:?}", String::from_utf8_lossy(&w.took));
    }
}
