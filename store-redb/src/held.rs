//! The store's file, held open and locked from the store's open to its drop, across the
//! reopens after an I/O error.
//!
//! redb locks its file through the backend, and releases the locks in the backend's `close`,
//! which it calls as the database closes. A store that closed its database and opened the path
//! again after an I/O error (redb refuses everything after one until then) held no lock in
//! between: another process opening the file then would own it. So a file store's databases
//! are all opened over one [`HeldFile`], each through a [`Handle`] of it:
//!
//! - the locks and the I/O are redb's own [`FileBackend`]'s, over the one file: the locks it
//!   takes (on Linux, byte-range locks of the open file description over the whole file but
//!   for the bytes it reserves, and, for redb before 4.3, `flock`) are taken by the first
//!   database's open, exactly as `Database::open` takes them;
//! - a handle's `close` leaves them held: they are the store's, let go of only when the
//!   [`HeldFile`] is dropped, after the store's last database;
//! - a later database's open, asking for a lock the file already holds (the same range, or
//!   one inside it, no stronger), is told it has it, and takes nothing: the file is locked
//!   throughout, and the platform is never asked to lock again what this file description
//!   holds (which Windows refuses, and which could let go of the `flock` on a filesystem
//!   without byte-range locks).

use std::fs::File;
use std::io;
use std::ops::Bound;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use redb::backends::FileBackend;
use redb::{BackendError, Builder, Database, StorageBackend};
use rota_core::StoreError;

use crate::error::err;

/// A range of bytes as redb names it for a lock.
type Range = (Bound<u64>, Bound<u64>);

/// A lock: its range, and whether it is shared.
type Lock = (Range, bool);

/// A store's file, open and locked while the store lives (see the module's documentation).
#[derive(Debug)]
pub(crate) struct HeldFile {
    /// redb's backend over the file: the I/O, and the locks.
    backend: FileBackend,
    /// The locks taken through `backend`, and not released since.
    held: Mutex<Vec<Lock>>,
    /// Test only: fail every write and sync, as a full disk does.
    #[cfg(test)]
    pub(crate) failing: std::sync::atomic::AtomicBool,
}

impl HeldFile {
    /// The file `file`, opened for reading and writing (as redb's `Database::open` opens it),
    /// not yet locked: its first database's open locks it.
    pub(crate) fn new(file: File) -> Result<Self, StoreError> {
        Ok(HeldFile {
            backend: FileBackend::new(file).map_err(err("open store file"))?,
            held: Mutex::new(Vec::new()),
            #[cfg(test)]
            failing: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// A database over this file, opened as `Database::open` opens one (with redb's defaults),
    /// taking the file's locks if it does not hold them yet. An empty file is refused, as
    /// `Database::open` refuses it (this store's file is never empty). redb may panic on a
    /// damaged file: that is [`StoreError::Corrupt`], naming `path`.
    pub(crate) fn database(self: &Arc<Self>, path: &Path) -> Result<Database, StoreError> {
        if self.backend.len().map_err(err("open store file"))? == 0 {
            return Err(StoreError::Corrupt(format!(
                "{}: empty file, not a rota store",
                path.display()
            )));
        }
        let handle = Handle {
            file: self.clone(),
            lent: Mutex::new(Vec::new()),
        };
        catch_unwind(AssertUnwindSafe(|| {
            Builder::new().create_with_backend(handle)
        }))
        .map_err(|_| {
            StoreError::Corrupt(format!(
                "{}: redb could not read the file (it panicked)",
                path.display()
            ))
        })?
        .map_err(err("open store file"))
    }

    fn held(&self) -> MutexGuard<'_, Vec<Lock>> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether a lock the file holds covers `range` (a shared one only a shared request).
    fn covers(&self, range: Range, shared: bool) -> bool {
        self.held()
            .iter()
            .any(|&(outer, outer_shared)| (shared || !outer_shared) && within(range, outer))
    }

    /// Takes `range` through the backend, and records it if taken.
    fn try_lock(&self, range: Range, shared: bool) -> Result<bool, BackendError> {
        let taken = if shared {
            self.backend.try_lock_shared_range(range.0, range.1)?
        } else {
            self.backend.try_lock_range(range.0, range.1)?
        };
        if taken {
            self.held().push((range, shared));
        }
        Ok(taken)
    }

    /// Waits for `range` through the backend, and records it.
    fn lock(&self, range: Range, shared: bool) -> Result<(), BackendError> {
        if shared {
            self.backend.lock_shared_range(range.0, range.1)?;
        } else {
            self.backend.lock_range(range.0, range.1)?;
        }
        self.held().push((range, shared));
        Ok(())
    }

    /// Releases `range` through the backend, and forgets it, and every lock overlapping it: the
    /// platform lets go of every byte of the range this file description holds, whichever lock
    /// took it (a range taken twice, shared then exclusive, is one lock there; one overlapping
    /// it loses the overlap). So the record never holds a lock the file does not: a later
    /// request for one forgotten here is taken again rather than lent.
    fn unlock(&self, range: Range) -> Result<(), BackendError> {
        self.backend.unlock_range(range.0, range.1)?;
        self.held().retain(|&(r, _)| !overlap(r, range));
        Ok(())
    }

    /// Test only: the injected failure of a write or a sync.
    #[cfg(test)]
    fn check(&self) -> io::Result<()> {
        if self.failing.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(io::Error::other("injected I/O failure"));
        }
        Ok(())
    }

    #[cfg(not(test))]
    #[inline]
    fn check(&self) -> io::Result<()> {
        Ok(())
    }
}

/// The store lets go of its file: its locks are released (closing the file would release them
/// too; this says so, as redb's own close does).
impl Drop for HeldFile {
    fn drop(&mut self) {
        let _ = self.backend.close();
    }
}

/// `inner` lies within `outer`. A range whose bounds overflow lies within nothing.
fn within(inner: Range, outer: Range) -> bool {
    match (span(inner), span(outer)) {
        (Some((start, end)), Some((outer_start, outer_end))) => {
            outer_start <= start
                && match (end, outer_end) {
                    (_, None) => true,
                    (None, Some(_)) => false,
                    (Some(end), Some(outer_end)) => end <= outer_end,
                }
        }
        _ => false,
    }
}

/// `a` and `b` share a byte. A range whose bounds overflow shares one with every range.
fn overlap(a: Range, b: Range) -> bool {
    match (span(a), span(b)) {
        (Some((a_start, a_end)), Some((b_start, b_end))) => {
            a_end.is_none_or(|end| b_start < end) && b_end.is_none_or(|end| a_start < end)
        }
        _ => true,
    }
}

/// `range` as its first byte and the byte past its last (`None`: unbounded).
fn span(range: Range) -> Option<(u64, Option<u64>)> {
    let start = match range.0 {
        Bound::Unbounded => 0,
        Bound::Included(s) => s,
        Bound::Excluded(s) => s.checked_add(1)?,
    };
    let end = match range.1 {
        Bound::Unbounded => None,
        Bound::Included(e) => Some(e.checked_add(1)?),
        Bound::Excluded(e) => Some(e),
    };
    Some((start, end))
}

/// One database's backend over a [`HeldFile`]: its I/O is the file's; a lock it asks for that
/// the file holds already is lent to it (nothing is locked again); its `close` releases
/// nothing.
#[derive(Debug)]
pub(crate) struct Handle {
    file: Arc<HeldFile>,
    /// The locks this handle was told it has because the file held them already.
    lent: Mutex<Vec<Lock>>,
}

impl Handle {
    fn lent(&self) -> MutexGuard<'_, Vec<Lock>> {
        self.lent.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Lends `range` if the file holds it already: whether it did.
    fn lend(&self, range: Range, shared: bool) -> bool {
        let held = self.file.covers(range, shared);
        if held {
            self.lent().push((range, shared));
        }
        held
    }
}

impl StorageBackend for Handle {
    fn len(&self) -> Result<u64, io::Error> {
        self.file.backend.len()
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), io::Error> {
        self.file.backend.read(offset, out)
    }

    fn set_len(&self, len: u64) -> Result<(), io::Error> {
        self.file.check()?;
        self.file.backend.set_len(len)
    }

    fn sync_data(&self) -> Result<(), io::Error> {
        self.file.check()?;
        self.file.backend.sync_data()
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), io::Error> {
        self.file.check()?;
        self.file.backend.write(offset, data)
    }

    /// Releases nothing: the locks are the store's, until it drops the [`HeldFile`].
    fn close(&self) -> Result<(), io::Error> {
        self.lent().clear();
        Ok(())
    }

    fn try_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        if self.lend((start, end), false) {
            return Ok(true);
        }
        self.file.try_lock((start, end), false)
    }

    fn try_lock_shared_range(
        &self,
        start: Bound<u64>,
        end: Bound<u64>,
    ) -> Result<bool, BackendError> {
        if self.lend((start, end), true) {
            return Ok(true);
        }
        self.file.try_lock((start, end), true)
    }

    fn lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        if self.lend((start, end), false) {
            return Ok(());
        }
        self.file.lock((start, end), false)
    }

    fn lock_shared_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        if self.lend((start, end), true) {
            return Ok(());
        }
        self.file.lock((start, end), true)
    }

    /// A lent lock is given back (the file keeps it); one this handle took is released.
    fn unlock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        {
            let mut lent = self.lent();
            if let Some(i) = lent.iter().position(|&(r, _)| r == (start, end)) {
                lent.swap_remove(i);
                return Ok(());
            }
        }
        self.file.unlock((start, end))
    }

    fn query_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.file.backend.query_lock_range(start, end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Bound::{Excluded, Included, Unbounded};

    #[test]
    fn a_range_lies_within_another_by_its_first_and_last_byte() {
        let all = (Unbounded, Unbounded);
        assert!(within((Included(5), Excluded(9)), all));
        assert!(within((Included(0), Unbounded), all));
        assert!(within(all, (Included(0), Unbounded)));
        assert!(within(
            (Included(5), Included(8)),
            (Excluded(4), Excluded(9))
        ));
        assert!(!within(
            (Included(5), Included(9)),
            (Excluded(4), Excluded(9))
        ));
        assert!(!within(
            (Included(4), Included(8)),
            (Excluded(4), Excluded(9))
        ));
        assert!(!within(
            (Included(5), Unbounded),
            (Included(0), Included(u64::MAX - 1))
        ));
        // Bounds past u64 lie within nothing.
        assert!(!within((Included(5), Included(u64::MAX)), all));
        assert!(!within((Excluded(u64::MAX), Unbounded), all));
    }

    #[test]
    fn ranges_overlap_by_a_shared_byte() {
        let all = (Unbounded, Unbounded);
        assert!(overlap((Included(5), Excluded(9)), all));
        assert!(overlap(
            (Included(5), Excluded(9)),
            (Included(8), Unbounded)
        ));
        assert!(!overlap(
            (Included(5), Excluded(9)),
            (Included(9), Unbounded)
        ));
        assert!(!overlap(
            (Unbounded, Included(4)),
            (Excluded(4), Excluded(9))
        ));
        assert!(overlap(
            (Unbounded, Included(5)),
            (Excluded(4), Excluded(9))
        ));
        assert!(overlap(
            (Included(5), Included(u64::MAX)),
            (Included(0), Excluded(1))
        ));
    }

    /// Each of two ranges, one ending where the other starts, shares no byte with the other,
    /// whichever is named first.
    #[test]
    fn adjacent_ranges_do_not_overlap_in_either_order() {
        let (low, high) = ((Included(5), Excluded(9)), (Included(9), Unbounded));
        assert!(!overlap(low, high));
        assert!(!overlap(high, low));
        let (low, high) = ((Unbounded, Included(4)), (Excluded(4), Excluded(9)));
        assert!(!overlap(low, high));
        assert!(!overlap(high, low));
        // One byte more, and they share it, either way.
        let low = (Included(5), Included(9));
        assert!(overlap(low, high) && overlap(high, low));
    }

    fn held(path: &Path) -> Arc<HeldFile> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .unwrap();
        Arc::new(HeldFile::new(file).unwrap())
    }

    fn handle(file: &Arc<HeldFile>) -> Handle {
        Handle {
            file: file.clone(),
            lent: Mutex::new(Vec::new()),
        }
    }

    /// Another open file description: what another process meets.
    fn other_takes(path: &Path, range: Range) -> bool {
        let other = held(path);
        handle(&other).try_lock_range(range.0, range.1).unwrap()
    }

    /// Another open file description's shared lock.
    fn other_shares(path: &Path, range: Range) -> bool {
        let other = held(path);
        handle(&other)
            .try_lock_shared_range(range.0, range.1)
            .unwrap()
    }

    /// Every kind of request for a lock the file does not hold takes it, as asked (shared or
    /// exclusive), and records it: a later handle is lent each one. (redb 4.6 asks only
    /// `try_lock_range` in the store's mode; its readers' and shared writers' modes ask the
    /// others.)
    #[test]
    fn a_lock_the_file_does_not_hold_is_taken_by_every_kind_of_request_and_lent_later() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"x").unwrap();
        let file = held(&path);
        let (tried, waited, waited_shared) = (
            (Included(0), Excluded(10)),
            (Included(20), Excluded(30)),
            (Included(40), Excluded(50)),
        );

        let first = handle(&file);
        assert!(first.try_lock_shared_range(tried.0, tried.1).unwrap());
        first.lock_range(waited.0, waited.1).unwrap();
        first
            .lock_shared_range(waited_shared.0, waited_shared.1)
            .unwrap();
        assert!(first.lent().is_empty(), "nothing was held to lend");
        // Taken for real: exclusive where asked, shared where asked.
        assert!(!other_takes(&path, (Included(5), Excluded(6))));
        assert!(other_shares(&path, (Included(5), Excluded(6))));
        assert!(!other_takes(&path, (Included(25), Excluded(26))));
        assert!(!other_shares(&path, (Included(25), Excluded(26))));
        assert!(!other_takes(&path, (Included(45), Excluded(46))));
        assert!(other_shares(&path, (Included(45), Excluded(46))));
        first.close().unwrap();
        drop(first);

        // Recorded: a later handle is lent each, and the file still holds them.
        let later = handle(&file);
        assert!(later.try_lock_shared_range(tried.0, tried.1).unwrap());
        later.lock_range(waited.0, waited.1).unwrap();
        later
            .lock_shared_range(waited_shared.0, waited_shared.1)
            .unwrap();
        assert_eq!(later.lent().len(), 3, "{:?}", file.held());
        assert!(!other_takes(&path, (Included(25), Excluded(26))));
        // A shared lock is not lent for an exclusive request: that is taken.
        assert!(later.try_lock_range(tried.0, tried.1).unwrap());
        assert_eq!(later.lent().len(), 3);
    }

    /// A handle's length changes, writes and syncs reach the file; while the file is made to
    /// fail (the tests' full disk), each of them fails, and the file is left as it was.
    #[test]
    fn a_handles_io_reaches_the_file_and_each_kind_fails_while_the_file_fails() {
        use std::sync::atomic::Ordering::SeqCst;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"x").unwrap();
        let file = held(&path);
        let h = handle(&file);
        let on_disk = || std::fs::metadata(&path).unwrap().len();
        h.set_len(4096).unwrap();
        assert_eq!(on_disk(), 4096);
        h.write(100, b"abc").unwrap();
        h.sync_data().unwrap();
        h.set_len(1024).unwrap();
        assert_eq!((h.len().unwrap(), on_disk()), (1024, 1024));
        let read = || {
            let mut out = [0u8; 3];
            h.read(100, &mut out).unwrap();
            out
        };
        assert_eq!(&read(), b"abc");

        file.failing.store(true, SeqCst);
        assert!(h.set_len(8192).is_err());
        assert!(h.write(100, b"xyz").is_err());
        assert!(h.sync_data().is_err());
        assert_eq!(on_disk(), 1024);
        assert_eq!(&read(), b"abc");
    }

    /// A query reports whether another open file description holds a lock on the range.
    #[test]
    fn a_query_reports_another_descriptions_lock() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"x").unwrap();
        let file = held(&path);
        let mine = handle(&file);
        assert!(!mine.query_lock_range(Included(0), Excluded(10)).unwrap());
        let other = held(&path);
        assert!(
            handle(&other)
                .try_lock_range(Included(0), Excluded(10))
                .unwrap()
        );
        assert!(mine.query_lock_range(Included(5), Excluded(6)).unwrap());
        assert!(!mine.query_lock_range(Included(10), Excluded(20)).unwrap());
    }

    #[test]
    fn a_later_handle_is_lent_what_the_file_holds_and_its_close_and_unlock_release_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"x").unwrap();
        let file = held(&path);
        let (low, high) = ((Included(0), Excluded(100)), (Included(200), Unbounded));

        let first = handle(&file);
        assert!(first.try_lock_range(low.0, low.1).unwrap());
        assert!(first.try_lock_range(high.0, high.1).unwrap());
        first.close().unwrap();
        drop(first);
        assert!(!other_takes(&path, (Included(10), Excluded(20))));
        assert!(!other_takes(&path, (Included(300), Excluded(301))));

        let second = handle(&file);
        assert!(second.try_lock_range(low.0, low.1).unwrap());
        assert!(
            second
                .try_lock_shared_range(Included(5), Excluded(6))
                .unwrap()
        );
        assert_eq!(second.lent().len(), 2);
        // Given back, a lent lock stays the file's.
        second.unlock_range(low.0, low.1).unwrap();
        assert!(!other_takes(&path, (Included(10), Excluded(20))));
        // One the file did not hold is taken, and released by its unlock.
        assert!(second.try_lock_range(Included(120), Excluded(130)).unwrap());
        assert!(!other_takes(&path, (Included(125), Excluded(126))));
        second.unlock_range(Included(120), Excluded(130)).unwrap();
        assert!(other_takes(&path, (Included(125), Excluded(126))));
        second.close().unwrap();
        drop(second);
        assert!(!other_takes(&path, (Included(10), Excluded(20))));

        // The file let go of, everything is released.
        drop(file);
        assert!(other_takes(&path, (Unbounded, Unbounded)));
    }

    /// Review: the file's record of what it holds against the kernel's, when a range it holds
    /// shared is then taken exclusive (the same open file description: the kernel converts the
    /// lock, one lock), and that is unlocked: the kernel holds nothing there, and the record must
    /// not say it holds the range still (a later handle would be lent a lock nobody holds).
    #[test]
    fn the_record_follows_the_kernel_when_a_range_is_taken_twice_and_unlocked() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"x").unwrap();
        let file = held(&path);
        let r = (Included(10), Excluded(20));

        let first = handle(&file);
        assert!(first.try_lock_shared_range(r.0, r.1).unwrap());
        let second = handle(&file);
        // Not lent (a shared lock does not cover an exclusive request): taken for real.
        assert!(second.try_lock_range(r.0, r.1).unwrap());
        assert!(second.lent().is_empty());
        second.unlock_range(r.0, r.1).unwrap();
        // The kernel holds nothing on the range now ...
        assert!(other_takes(&path, r));
        // ... so a third handle must not be told it holds it.
        let third = handle(&file);
        assert!(third.try_lock_range(r.0, r.1).unwrap());
        assert!(
            third.lent().is_empty(),
            "lent a lock the file no longer holds: {:?}",
            file.held()
        );
        assert!(!other_takes(&path, r), "the range is not locked");
    }

    /// Review: a handle takes a range overlapping one the file holds (not inside it, so not lent)
    /// and unlocks it: the kernel lets go of the overlap too, and the record must not still say
    /// the first range is held whole.
    #[test]
    fn the_record_follows_the_kernel_when_an_overlapping_range_is_unlocked() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"x").unwrap();
        let file = held(&path);
        let (a, b) = ((Included(10), Excluded(20)), (Included(15), Excluded(30)));
        let first = handle(&file);
        assert!(first.try_lock_range(a.0, a.1).unwrap());
        let second = handle(&file);
        assert!(second.try_lock_range(b.0, b.1).unwrap());
        second.unlock_range(b.0, b.1).unwrap();
        assert!(other_takes(&path, (Included(16), Excluded(17))));
        let third = handle(&file);
        assert!(third.try_lock_range(a.0, a.1).unwrap());
        assert!(
            !other_takes(&path, (Included(16), Excluded(17))),
            "lent {a:?}, which the file holds only in part: {:?}",
            file.held()
        );
    }
}
