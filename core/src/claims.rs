//! The store files open in this process, shared by every file store: a store that claims its
//! file here before it touches it never opens a descriptor of a file another store of this
//! process holds.
//!
//! That matters for SQLite: closing *any* descriptor of a file drops every POSIX lock this
//! process holds on it, SQLite's own included. So a store of another kind that merely read the
//! header of an open SQLite store's file (to see whether it is its own kind) would silently
//! unlock it, and let a second process own the file too. The keys are made by the store crates
//! (a canonical path; on Unix a device and inode, which every hard link to a file shares): this
//! module only keeps them, and does no I/O.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

/// Whether `path` names a directory by its form alone, where no store file can be made: it
/// ends with a slash, or its last part is `.` or `..` ([`Path::file_name`] alone misses `x/.`,
/// whose components drop the `.`: its name is `x`, and SQLite would make the file `x`). Looks
/// at the path only, not at the file system.
pub fn names_a_directory(path: &Path) -> bool {
    let bytes = path.as_os_str().as_encoded_bytes();
    bytes.ends_with(b"/") || bytes.ends_with(b"/.") || path.file_name().is_none()
}

/// How a claimed file is known.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum FileKey {
    /// Its path, symbolic links resolved (for a file not made yet, its canonical directory and
    /// its name).
    Path(PathBuf),
    /// Its device and inode: the file itself, whatever name it is reached by.
    Inode {
        /// The device.
        dev: u64,
        /// The inode.
        ino: u64,
    },
}

/// The keys of the files claimed in this process.
static CLAIMED: Mutex<BTreeSet<FileKey>> = Mutex::new(BTreeSet::new());

fn claimed() -> std::sync::MutexGuard<'static, BTreeSet<FileKey>> {
    // Nothing panics under this lock, so a poisoned one holds a consistent set.
    CLAIMED.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A claim on one file, under one or more keys; dropping it lets the file go.
#[derive(Debug)]
#[must_use = "the file is let go of as soon as its claim is dropped"]
pub struct FileClaim(Vec<FileKey>);

impl FileClaim {
    /// Claims the file known by `keys` for the caller, or `None` if any of them is claimed
    /// already (the file is open in this process).
    pub fn take(keys: Vec<FileKey>) -> Option<FileClaim> {
        let mut set = claimed();
        if keys.iter().any(|k| set.contains(k)) {
            return None;
        }
        set.extend(keys.iter().cloned());
        Some(FileClaim(keys))
    }

    /// Adds `key` to this claim (the file's inode, once an open that created the file knows
    /// it). `false`, and nothing added, if another claim holds that key.
    pub fn add(&mut self, key: FileKey) -> bool {
        if self.0.contains(&key) {
            return true;
        }
        if claimed().insert(key.clone()) {
            self.0.push(key);
            true
        } else {
            false
        }
    }
}

impl Drop for FileClaim {
    fn drop(&mut self) {
        let mut set = claimed();
        for k in &self.0 {
            set.remove(k);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(p: &str) -> FileKey {
        FileKey::Path(PathBuf::from(p))
    }

    #[test]
    fn a_path_names_a_directory_by_a_trailing_slash_dot_or_dot_dot() {
        for p in ["x/", "x//", "x/.", "x/..", ".", "..", "/", "a/b/.", "x/./"] {
            assert!(names_a_directory(Path::new(p)), "{p}");
        }
        for p in ["x", "x.", ".x", "a/b", "a/..b", "a/.b", "x.db"] {
            assert!(!names_a_directory(Path::new(p)), "{p}");
        }
    }

    #[test]
    fn a_file_is_claimed_once_under_any_of_its_keys_until_the_claim_is_dropped() {
        let inode = FileKey::Inode { dev: 7, ino: 4242 };
        let first = FileClaim::take(vec![path("/claims-test/a"), inode.clone()]).unwrap();
        assert!(FileClaim::take(vec![path("/claims-test/a")]).is_none());
        // Another name of the same file (a hard link).
        assert!(FileClaim::take(vec![path("/claims-test/b"), inode.clone()]).is_none());
        drop(first);
        let again = FileClaim::take(vec![path("/claims-test/b"), inode]).unwrap();
        drop(again);
    }

    #[test]
    fn a_key_added_to_one_claim_is_refused_to_another() {
        let mut a = FileClaim::take(vec![path("/claims-test/c")]).unwrap();
        let mut b = FileClaim::take(vec![path("/claims-test/d")]).unwrap();
        let inode = FileKey::Inode { dev: 7, ino: 4343 };
        assert!(a.add(inode.clone()));
        assert!(a.add(inode.clone()), "a key a claim holds is its own");
        assert!(!b.add(inode.clone()));
        drop(a);
        assert!(b.add(inode));
    }
}
