//! Files as the store tests need them: a file or directory made read-only to this process,
//! and a symbolic link to nothing yet. Shared: the tests of `rota-store-redb` include this file
//! too (by its path), so it uses nothing but `std` and `tempfile`.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Makes a file or directory read-only to this process until dropped: its write permissions
/// off, or, where that binds nothing (root), its immutable attribute (`chattr +i`, which binds
/// root too). `None` where neither works (root without `chattr` or without the capability it
/// needs, as in a default container): everything it changed is put back.
pub struct ReadOnly {
    path: PathBuf,
    immutable: bool,
    mode: u32,
}

impl ReadOnly {
    pub fn set(path: &Path) -> Option<ReadOnly> {
        use std::os::unix::fs::PermissionsExt;
        let mode = fs::metadata(path).unwrap().permissions().mode();
        fs::set_permissions(path, fs::Permissions::from_mode(mode & !0o222)).unwrap();
        let mut guard = ReadOnly {
            path: path.to_owned(),
            immutable: false,
            mode,
        };
        if Self::writable(path) {
            let out = Command::new("chattr").arg("+i").arg(path).output();
            guard.immutable = out.as_ref().is_ok_and(|o| o.status.success());
            if !guard.immutable || Self::writable(path) {
                eprintln!(
                    "cannot make {} read-only here (permissions bind nothing, chattr +i: {out:?})",
                    path.display()
                );
                return None;
            }
        }
        Some(guard)
    }

    /// Whether this process may write into `path` (a file opened for writing, a file made in
    /// a directory).
    fn writable(path: &Path) -> bool {
        if path.is_dir() {
            tempfile::tempfile_in(path).is_ok()
        } else {
            fs::OpenOptions::new().write(true).open(path).is_ok()
        }
    }
}

impl Drop for ReadOnly {
    fn drop(&mut self) {
        use std::os::unix::fs::PermissionsExt;
        if self.immutable {
            let _ = Command::new("chattr").arg("-i").arg(&self.path).status();
        }
        let _ = fs::set_permissions(&self.path, fs::Permissions::from_mode(self.mode));
    }
}

/// Runs `f` while `target` is read-only to this process: its answer, or `None` if this machine
/// cannot make `target` read-only (then nothing is checked), except under `CI` (this project's
/// CI runs where it can), where that fails the test.
pub fn while_read_only<T>(target: &Path, f: impl FnOnce() -> T) -> Option<T> {
    let Some(guard) = ReadOnly::set(target) else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI: this machine cannot make {} read-only to this process",
            target.display()
        );
        return None;
    };
    let answer = f();
    drop(guard);
    Some(answer)
}

/// Makes the directory `data` in `dir`, and `dir/name` a symbolic link to `data/file` (a
/// relative one), which leads to nothing yet: the link's path and the path it leads to.
pub fn link_to_nothing(dir: &Path, name: &str, file: &str) -> (PathBuf, PathBuf) {
    fs::create_dir(dir.join("data")).unwrap();
    let link = dir.join(name);
    std::os::unix::fs::symlink(Path::new("data").join(file), &link).unwrap();
    (link, dir.join("data").join(file))
}

/// Asserts that `link` is still a symbolic link, and that the store it led to is a file at
/// `target`.
pub fn assert_made_where_it_leads(link: &Path, target: &Path) {
    let kind = fs::symlink_metadata(link).unwrap().file_type();
    assert!(kind.is_symlink(), "{} is no longer a link", link.display());
    assert!(fs::symlink_metadata(target).unwrap().is_file());
}
