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

/// Writes `line` and a newline to stderr, ignoring a failure; above the progress bar, if one is
/// shown.
pub fn err(line: &str) {
    let write = || {
        let mut w = io::stderr().lock();
        let _ = writeln!(w, "{line}");
    };
    match bar_shown() {
        Some(bar) => bar.suspend(write),
        None => write(),
    }
}

/// The progress bar on stderr, while one is shown: the lines ([`err`]) and the logs
/// ([`QuietStderr`]) go above it. (So a line is never written from inside the bar's own
/// `suspend`, which holds the bar's lock.)
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

/// Held by the unit tests that show a bar or take it away ([`showing`]): [`BAR`] is one for
/// the process, and the tests run side by side.
#[cfg(test)]
pub(crate) static BAR_TESTS: Mutex<()> = Mutex::new(());

#[cfg(test)]
mod tests {
    use super::*;

    /// A terminal that notes what is done to it.
    #[derive(Debug, Clone, Default)]
    struct Screen(std::sync::Arc<Mutex<Vec<String>>>);

    impl Screen {
        fn did(&self, what: String) -> io::Result<()> {
            self.0.lock().unwrap().push(what);
            Ok(())
        }

        fn since(&self, n: usize) -> Vec<String> {
            self.0.lock().unwrap()[n..].to_vec()
        }

        fn len(&self) -> usize {
            self.0.lock().unwrap().len()
        }
    }

    impl indicatif::TermLike for Screen {
        fn width(&self) -> u16 {
            80
        }
        fn move_cursor_up(&self, n: usize) -> io::Result<()> {
            self.did(format!("up {n}"))
        }
        fn move_cursor_down(&self, n: usize) -> io::Result<()> {
            self.did(format!("down {n}"))
        }
        fn move_cursor_right(&self, n: usize) -> io::Result<()> {
            self.did(format!("right {n}"))
        }
        fn move_cursor_left(&self, n: usize) -> io::Result<()> {
            self.did(format!("left {n}"))
        }
        fn write_line(&self, s: &str) -> io::Result<()> {
            self.did(format!("line {s}"))
        }
        fn write_str(&self, s: &str) -> io::Result<()> {
            self.did(format!("str {s}"))
        }
        fn clear_line(&self) -> io::Result<()> {
            self.did("clear".into())
        }
        fn flush(&self) -> io::Result<()> {
            Ok(())
        }
    }

    /// While a bar is shown, a line of [`err`] and a log record of [`QuietStderr`] each clear
    /// the bar before they are written and draw it again after (the bar's `suspend`); with
    /// none shown, they are written as they are.
    #[test]
    fn lines_and_logs_go_above_the_bar_shown() {
        let _alone = BAR_TESTS.lock().unwrap_or_else(PoisonError::into_inner);
        let screen = Screen::default();
        let bar = ProgressBar::with_draw_target(
            Some(10),
            indicatif::ProgressDrawTarget::term_like(Box::new(screen.clone())),
        );
        bar.set_position(3);
        bar.tick();
        assert!(screen.len() > 0, "the bar was never drawn");
        showing(Some(bar.clone()));
        for write in [&(|| err("a line")) as &dyn Fn(), &|| {
            let _ = QuietStderr.write(b"a record\n");
        }] {
            let before = screen.len();
            write();
            let done = screen.since(before);
            let cleared = done.iter().position(|d| d == "clear");
            let drawn = done
                .iter()
                .rposition(|d| d.starts_with("str ") || d.starts_with("line "));
            assert!(
                matches!((cleared, drawn), (Some(c), Some(d)) if c < d),
                "cleared, then drawn again: {done:?}"
            );
        }
        showing(None);
        let before = screen.len();
        err("a line");
        assert_eq!(screen.since(before), Vec::<String>::new());
    }

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
