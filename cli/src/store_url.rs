//! `--store URL`: which store backs the command.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;

use rota::claims::names_a_directory;
use rota::{BatchStore, StoreError};

/// A store named on the command line: `sqlite:PATH`, `redb:PATH` or `memory`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreUrl {
    /// A SQLite file.
    Sqlite(PathBuf),
    /// A redb file.
    Redb(PathBuf),
    /// A store in this process's memory: nothing outlives the command.
    Memory,
}

impl FromStr for StoreUrl {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let file = |kind: &str, path: &str| -> Result<PathBuf, String> {
            if path.is_empty() {
                let example = if kind == "sqlite" {
                    "rota.sqlite3"
                } else {
                    "rota.redb"
                };
                Err(format!(
                    "{kind}:PATH needs a file path, like {kind}:{example}"
                ))
            } else if let Some(rest) = path
                .strip_prefix("//")
                .filter(|r| !r.is_empty() && !r.starts_with('/'))
            {
                // Other tools' `sqlite://file` is a file here; as a path, `//file` is at the
                // root of the file system.
                Err(format!(
                    "{kind}:PATH takes a file path, not a URL with //: write {kind}:{rest} for \
                     the file {rest}, or {kind}:/{rest} for /{rest}"
                ))
            } else if names_a_directory(Path::new(path)) {
                // SQLite would make the file `x` of `x/` (and of `x/.`, whose `.` it resolves),
                // and every later open of `x/` (a `rota status` of a job it holds) then fail as
                // not a directory.
                let file = path.trim_end_matches('/');
                Err(if file.is_empty() || names_a_directory(Path::new(file)) {
                    format!("{kind}:PATH takes a file path, and {path} names a directory")
                } else {
                    format!(
                        "{kind}:PATH takes a file path, and {path} ends with a slash: write \
                         {kind}:{file} for the file {file}"
                    )
                })
            } else {
                Ok(PathBuf::from(path))
            }
        };
        if let Some(path) = s.strip_prefix("sqlite:") {
            file("sqlite", path).map(StoreUrl::Sqlite)
        } else if let Some(path) = s.strip_prefix("redb:") {
            file("redb", path).map(StoreUrl::Redb)
        } else if s == "memory" {
            Ok(StoreUrl::Memory)
        } else {
            Err(format!(
                "unknown store {s:?}: use sqlite:PATH, redb:PATH or memory"
            ))
        }
    }
}

impl fmt::Display for StoreUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreUrl::Sqlite(p) => write!(f, "sqlite:{}", p.display()),
            StoreUrl::Redb(p) => write!(f, "redb:{}", p.display()),
            StoreUrl::Memory => f.write_str("memory"),
        }
    }
}

impl StoreUrl {
    /// The store's file, if it has one.
    pub fn path(&self) -> Option<&Path> {
        match self {
            StoreUrl::Sqlite(p) | StoreUrl::Redb(p) => Some(p),
            StoreUrl::Memory => None,
        }
    }

    /// The same store with its file path made absolute (for telling the user where it is).
    pub fn absolute(&self) -> StoreUrl {
        let abs = |p: &PathBuf| std::path::absolute(p).unwrap_or_else(|_| p.clone());
        match self {
            StoreUrl::Sqlite(p) => StoreUrl::Sqlite(abs(p)),
            StoreUrl::Redb(p) => StoreUrl::Redb(abs(p)),
            StoreUrl::Memory => StoreUrl::Memory,
        }
    }

    /// Whether the store's file is missing (`false` for the memory store), for the commands
    /// that read a store and must not create one. A path that cannot be looked at (a directory
    /// on the way that cannot be searched, or is a file) is an error naming the path, not a
    /// missing store.
    pub fn is_missing(&self) -> Result<bool, String> {
        match self.path() {
            None => Ok(false),
            Some(p) => p
                .try_exists()
                .map(|there| !there)
                .map_err(|e| format!("cannot look for the store {self}: {e}")),
        }
    }

    /// Opens the store. A file store is created if it does not exist.
    pub fn open(&self) -> Result<Arc<dyn BatchStore>, StoreError> {
        Ok(match self {
            StoreUrl::Sqlite(p) => Arc::new(rota_store_sqlite::SqliteStore::open(p)?),
            StoreUrl::Redb(p) => Arc::new(rota_store_redb::RedbStore::open(p)?),
            StoreUrl::Memory => Arc::new(rota_store_memory::MemoryStore::new()),
        })
    }

    /// [`open`](Self::open) for a command: its error as a message for the user, which says
    /// what to do about a redb file of an older schema that `rota upgrade` migrates, or about a
    /// store another command holds.
    pub fn open_for_command(&self) -> Result<Arc<dyn BatchStore>, String> {
        self.open().map_err(|e| {
            let hint = match (&e, self) {
                (StoreError::Version { found, .. }, StoreUrl::Redb(_)) if found == "2" => {
                    format!(" (migrate it first: rota --store {self} upgrade)")
                }
                // The stores' own words name their types and any SQLite client.
                (StoreError::InUse(_), _) => IN_USE_HINT.into(),
                // redb says only "No such file or directory", naming the file (the SQLite
                // store names a missing directory itself: not twice).
                _ => match self.path().and_then(Path::parent) {
                    Some(dir)
                        if !dir.as_os_str().is_empty()
                            && !e
                                .to_string()
                                .contains(&format!("directory {}", dir.display())) =>
                    {
                        dir_hint(dir, &std::fs::metadata(dir))
                    }
                    _ => String::new(),
                },
            };
            format!("opening the store {self}: {e}{hint}")
        })
    }
}

/// What an error of a store another process holds adds, in terms of rota's commands.
pub const IN_USE_HINT: &str =
    " (is a `rota run` or `rota demo` on it still running? try again once it ends)";

/// What a failed open adds about the store's directory `dir`, as `looked` (its metadata) found
/// it: that it is missing, or not a directory. Nothing where the look itself failed otherwise
/// (a directory on the way that may not be searched): the store's own error says that, and
/// the directory may well be there.
fn dir_hint(dir: &Path, looked: &std::io::Result<std::fs::Metadata>) -> String {
    use std::io::ErrorKind;
    match looked {
        Ok(m) if m.is_dir() => String::new(),
        Ok(_) => format!(" ({} is not a directory)", dir.display()),
        Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::NotADirectory) => {
            format!(" (there is no directory {})", dir.display())
        }
        Err(_) => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_urls_parse_and_print_back() {
        for s in [
            "sqlite:rota.sqlite3",
            "redb:/tmp/x.redb",
            "memory",
            "sqlite:a:b",
        ] {
            assert_eq!(s.parse::<StoreUrl>().unwrap().to_string(), s);
        }
        assert_eq!(
            "sqlite:dir/r.db".parse::<StoreUrl>().unwrap().path(),
            Some(Path::new("dir/r.db"))
        );
    }

    /// A file store's kind with no path is refused with an example path of that kind.
    #[test]
    fn a_file_store_without_a_path_is_refused_with_an_example_of_its_kind() {
        for (url, example) in [
            ("sqlite:", "sqlite:rota.sqlite3"),
            ("redb:", "redb:rota.redb"),
        ] {
            let Err(e) = url.parse::<StoreUrl>() else {
                panic!("{url} was accepted");
            };
            assert!(e.contains("needs a file path"), "{url}: {e}");
            assert!(e.contains(example), "{url}: {e}");
        }
    }

    /// A path that names a directory (a trailing slash, `.` or `..` at its end) is refused
    /// before anything is opened: SQLite would make the file `x` of `sqlite:x/`, and every later
    /// command on `sqlite:x/` then fail.
    #[test]
    fn a_path_that_names_a_directory_is_refused() {
        for (url, said) in [
            ("sqlite:ee/", "write sqlite:ee for the file ee"),
            (
                "redb:dir/r.redb//",
                "write redb:dir/r.redb for the file dir/r.redb",
            ),
            ("sqlite:/", "/ names a directory"),
            ("sqlite:.", ". names a directory"),
            ("redb:a/..", "a/.. names a directory"),
            ("sqlite:../", "../ names a directory"),
            ("sqlite:x/.", "x/. names a directory"),
            ("redb:a/b/.", "a/b/. names a directory"),
            ("sqlite:x/./", "x/./ names a directory"),
        ] {
            let Err(e) = url.parse::<StoreUrl>() else {
                panic!("{url} was accepted");
            };
            assert!(e.contains("takes a file path"), "{url}: {e}");
            assert!(e.contains(said), "{url}: {e}");
        }
        for ok in ["sqlite:a/.b", "redb:..x", "sqlite:./x"] {
            assert!(ok.parse::<StoreUrl>().is_ok(), "{ok}");
        }
    }

    /// The error of opening the store at `url`, which must fail.
    fn open_error(url: &str) -> String {
        url.parse::<StoreUrl>()
            .unwrap()
            .open_for_command()
            .err()
            .unwrap()
    }

    #[test]
    fn a_store_in_a_missing_directory_names_the_directory() {
        for url in [
            "sqlite:/no-such-rota-dir/x.sqlite3",
            "redb:/no-such-rota-dir/x.redb",
        ] {
            let e = open_error(url);
            let said = if url.starts_with("sqlite") {
                // The store's own words; said once.
                "it does not exist, and neither does its directory /no-such-rota-dir"
            } else {
                "(there is no directory /no-such-rota-dir)"
            };
            assert!(e.ends_with(said), "{e}");
            assert_eq!(e.matches("directory /no-such-rota-dir").count(), 1, "{e}");
        }
    }

    /// Only a redb file of schema 2, which `rota upgrade` migrates, is told to run it; one of
    /// another schema version is refused without that hint.
    #[test]
    fn only_a_redb_file_of_schema_2_is_told_to_upgrade() {
        let tmp = tempfile::tempdir().unwrap();
        for (version, hinted) in [("2", true), ("999", false)] {
            let path = tmp.path().join(format!("v{version}.redb"));
            let db = redb::Database::create(&path).unwrap();
            let txn = db.begin_write().unwrap();
            {
                let meta: redb::TableDefinition<&str, &[u8]> =
                    redb::TableDefinition::new("rota_meta");
                let mut t = txn.open_table(meta).unwrap();
                t.insert("magic", &b"rota-store-redb"[..]).unwrap();
                t.insert("schema_version", version.as_bytes()).unwrap();
            }
            txn.commit().unwrap();
            drop(db);
            let e = open_error(&format!("redb:{}", path.display()));
            assert!(e.contains(&format!("found {version}")), "{e}");
            assert_eq!(e.contains("upgrade"), hinted, "{e}");
        }
    }

    /// A store whose directory is a file says so; one under a file, that there is no such
    /// directory; one whose directory could not be looked at (a directory on the way that may
    /// not be searched) gets no word about it, rather than "there is no directory".
    #[test]
    fn a_store_whose_directory_is_not_one_says_so() {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("plain");
        std::fs::write(&file, "not a directory").unwrap();
        for (url, said) in [
            (
                format!("sqlite:{}/x.sqlite3", file.display()),
                format!("({} is not a directory)", file.display()),
            ),
            (
                format!("redb:{}/sub/x.redb", file.display()),
                format!("(there is no directory {}/sub)", file.display()),
            ),
        ] {
            let e = open_error(&url);
            assert!(e.ends_with(&said), "{e}");
        }
        let denied = Err(std::io::Error::from(std::io::ErrorKind::PermissionDenied));
        assert_eq!(dir_hint(Path::new("locked/sub"), &denied), "");
    }

    /// `sqlite://rota.sqlite3`, as other tools' URLs go, is the path `//rota.sqlite3`: a file at
    /// the root of the file system, not here.
    #[test]
    fn a_store_url_with_two_slashes_is_refused_not_put_at_the_root() {
        for (bad, kind) in [
            ("sqlite://rota.sqlite3", "sqlite"),
            ("redb://rota.redb", "redb"),
            ("sqlite://dir/x.db", "sqlite"),
        ] {
            let e = bad.parse::<StoreUrl>().unwrap_err();
            assert!(e.contains(&format!("{kind}:PATH")), "{bad}: {e}");
            assert!(
                e.contains(&format!("{kind}:{}", &bad[kind.len() + 3..])),
                "{bad}: {e}"
            );
        }
        // One slash, or three (an absolute path), is a path as given.
        for (ok, path) in [
            ("sqlite:/tmp/x.sqlite3", "/tmp/x.sqlite3"),
            ("redb:///tmp/x.redb", "///tmp/x.redb"),
        ] {
            assert_eq!(
                ok.parse::<StoreUrl>().unwrap().path(),
                Some(Path::new(path))
            );
        }
    }

    #[test]
    fn bad_store_urls_say_what_is_expected() {
        for bad in [
            "",
            "sqlite:",
            "redb:",
            "postgres://x",
            "mem",
            "rota.sqlite3",
        ] {
            let e = bad.parse::<StoreUrl>().unwrap_err();
            assert!(e.contains(":PATH"), "{bad:?}: {e}");
        }
    }
}
