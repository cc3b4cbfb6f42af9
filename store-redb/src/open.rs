//! Opening a store: create a new file, or check an existing one before touching it.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use redb::backends::{FileBackend, InMemoryBackend};
use redb::{Builder, Database, ReadableDatabase, ReadableTable};
use rota_core::claims::{FileClaim, FileKey, names_a_directory};
use rota_core::{BackendError, JobRow, StoreError, TargetRow};

use crate::error::{Ctx, err};
use crate::held::HeldFile;
use crate::overlay::Overlay;
use crate::store::{RedbOptions, RedbStore, move_rows};
use crate::tables::{
    LIVE_ROWS, LIVE_V2, MAGIC, MAGIC_KEY, META, ROWS, VERSION, VERSION_2, VERSION_KEY,
};

/// The first bytes of every redb file.
const REDB_MAGIC: [u8; 9] = [b'r', b'e', b'd', b'b', 0x1A, 0x0A, 0xA9, 0x0D, 0x0A];

impl RedbStore {
    /// Opens the store at `path`, creating it if nothing is there, with
    /// [`Durability::Immediate`](crate::Durability::Immediate).
    ///
    /// A second open of a file that is open fails with [`StoreError::InUse`]: in another
    /// process ("database already open"), or in this one, by a store of either kind ("already
    /// open by another store in this process", before the file is read: see
    /// [`rota_core::claims`]). A file that is not a rota redb store
    /// (an empty file, text, a truncated or damaged file, a redb database of another program;
    /// a directory, FIFO or device, refused before it is opened; a path that names a directory,
    /// `x/` or one ending in `.` or `..`, even where nothing is yet) fails with
    /// [`StoreError::Corrupt`], one of another schema version with
    /// [`StoreError::Version`]; neither changes the file. A store of schema version 2 (this
    /// crate before the live jobs' rows had a table of their own) is refused so too, and
    /// [`upgrade`](Self::upgrade) migrates it. A file this process may not write, or for a new
    /// store a directory it may not write, fails with [`StoreError::Backend`] saying so (a
    /// store is opened for writing even to be read). See [`open_with`](Self::open_with).
    pub fn open(path: impl AsRef<Path>) -> Result<RedbStore, StoreError> {
        Self::open_with(path, RedbOptions::default())
    }

    /// [`open`](Self::open) with options.
    ///
    /// A new store is built in a temporary file beside `path` (beside where it leads, if it is
    /// a symbolic link to nothing yet) and linked into place only once its meta table is
    /// durable (on a filesystem without hard links, moved over an empty file it makes there
    /// only if nothing is: of two processes creating one store, both open the first's), so a
    /// crash never leaves a half-made store at `path` (the temporary file such a
    /// crash leaves, `.NAME.rota-new-…`, a later open removes once it is a minute old). An
    /// existing file is checked before redb opens it for writing (which would change it): its
    /// first bytes must be redb's magic, and then it is opened through a copy-on-write view
    /// (reads from the file, writes to memory) with redb's full integrity check, which also
    /// replays the recovery a crash calls for, and its meta table must hold rota's magic and
    /// schema version. That check reads the whole file once per open. Only then is the file
    /// opened for real.
    pub fn open_with(path: impl AsRef<Path>, opts: RedbOptions) -> Result<RedbStore, StoreError> {
        let path = path.as_ref();
        // A name that ends with a slash (or with `.` or `..`) names a directory, where no new
        // store file can be made.
        if names_a_directory(path) {
            return Err(StoreError::Corrupt(format!(
                "{}: names a directory, not a rota store file",
                path.display()
            )));
        }
        let mut claim = claim(path)?;
        match fs::symlink_metadata(path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => create(path)?,
            Err(e) => return Err(at_file("open store file", path, e)),
            // A symbolic link to nothing yet: the store is made where it leads, as SQLite does.
            Ok(m) if m.file_type().is_symlink() && leads_nowhere(path) => {
                create(&link_target(path)?)?;
            }
            Ok(m) => a_file(path, &m)?,
        }
        // Its inode claimed too, now that the file exists: a claim of it by another name (a store
        // of this process opened a link to this new file meanwhile) is a second open.
        if let Some(id) = identity(path)
            && !claim.add(id)
        {
            return Err(already_open(path));
        }
        remove_stale_temps(&fs::canonicalize(path).unwrap_or_else(|_| path.to_owned()));
        drop(inspect(path, &[VERSION]).map_err(held_by_another(path))?);
        // Opened as redb's own open opens it, and held, locked, for as long as the store lives.
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|e| at_file("open store file", path, e))?;
        let held = Arc::new(HeldFile::new(file)?);
        let db = held.database(path).map_err(held_by_another(path))?;
        // After an I/O error redb refuses the database until it is opened again: as here, over
        // the same file, whose locks the store holds across it (see `crate::held`).
        let (again, file) = (path.to_owned(), held.clone());
        let mut store = RedbStore::from_db(db, &opts)?.reopened_by(Box::new(move || {
            file.database(&again).map_err(held_by_another(&again))
        }));
        store.file = Some(held);
        store.claim = Some(claim);
        Ok(store)
    }

    /// Job `id` and its targets as the file at `path` holds them, read without changing the
    /// file: through the copy-on-write view [`open`](Self::open) checks a file through first
    /// (a repair the file needs after a crash, or after a commit that failed for a full disk,
    /// is made in memory and thrown away), so it reads even a file on a full disk. `None` for
    /// a job the file does not hold. A store open on the file (in this process too) makes it
    /// fail with [`StoreError::InUse`]; a file [`open`](Self::open) would refuse, likewise.
    pub fn read_job(
        path: impl AsRef<Path>,
        id: &str,
    ) -> Result<Option<(JobRow, Vec<TargetRow>)>, StoreError> {
        let path = path.as_ref();
        let _claim = claim(path)?;
        let m = fs::symlink_metadata(path).map_err(|e| at_file("open store file", path, e))?;
        a_file(path, &m)?;
        let db = inspect(path, &[VERSION]).map_err(held_by_another(path))?;
        RedbStore::from_db(db, &RedbOptions::default())?.view_sync(id)
    }

    /// Migrates the store at `path` from schema version 2 to the current one (3), in one
    /// durable transaction: `Ok(true)` once migrated, `Ok(false)` if it already was current.
    /// The file is checked as [`open`](Self::open) checks it, and anything else it refuses
    /// (a missing file too) is refused here, unchanged. Every job, index and target is kept;
    /// a crash during the migration leaves the file as it was before. The store must not be
    /// open elsewhere ([`StoreError::InUse`]).
    pub fn upgrade(path: impl AsRef<Path>) -> Result<bool, StoreError> {
        let path = path.as_ref();
        let _claim = claim(path)?;
        let m = fs::symlink_metadata(path).map_err(|e| at_file("open store file", path, e))?;
        a_file(path, &m)?;
        drop(inspect(path, &[VERSION_2, VERSION]).map_err(held_by_another(path))?);
        let db = open_db(path).map_err(held_by_another(path))?;
        let migrated = migrate(&db)?;
        db.close().map_err(err("close store file"))?;
        Ok(migrated)
    }

    /// A new store in memory (redb's `InMemoryBackend`): for tests and for runs that need no
    /// file. Nothing survives the process anyway, so its commits are non-durable
    /// ([`Durability::None`](crate::Durability::None)), which skips writing pages into the
    /// backend; one in [`SYNC_EVERY`](crate::SYNC_EVERY) is durable so that redb frees the
    /// pages of old versions.
    pub fn in_memory() -> Result<RedbStore, StoreError> {
        let db = Builder::new()
            .create_with_backend(InMemoryBackend::new())
            .map_err(err("create in-memory store"))?;
        init(&db)?;
        let opts = RedbOptions {
            durability: crate::Durability::None,
            ..RedbOptions::default()
        };
        RedbStore::from_db(db, &opts)
    }
}

/// Claims the file at `path` in this process ([`rota_core::claims`], shared with the other
/// file stores) before anything opens it, or fails with [`StoreError::InUse`]: a store of
/// another kind open on the file here (a SQLite store) would lose its lock as soon as this one
/// closed a descriptor of the file, even one that only read its first bytes.
fn claim(path: &Path) -> Result<FileClaim, StoreError> {
    let keys = std::iter::once(FileKey::Path(canonical(path)))
        .chain(identity(path))
        .collect();
    FileClaim::take(keys).ok_or_else(|| already_open(path))
}

/// The refusal of `path`, claimed in this process already.
fn already_open(path: &Path) -> StoreError {
    StoreError::InUse(format!(
        "{}: already open by another store in this process (a store has one owner at a \
         time); drop it first",
        path.display()
    ))
}

/// The device and inode of the file at `path` (symlinks followed), if it exists. `stat` opens
/// no descriptor.
#[cfg(unix)]
fn identity(path: &Path) -> Option<FileKey> {
    use std::os::unix::fs::MetadataExt;
    fs::metadata(path).ok().map(|m| FileKey::Inode {
        dev: m.dev(),
        ino: m.ino(),
    })
}

/// Files have no identity here beyond their path.
#[cfg(not(unix))]
fn identity(_path: &Path) -> Option<FileKey> {
    None
}

/// `path` with symlinks resolved, so two spellings of one file are one claim. A file that does
/// not exist yet is named by its canonical directory.
fn canonical(path: &Path) -> PathBuf {
    if let Ok(p) = path.canonicalize() {
        return p;
    }
    match (path.parent(), path.file_name()) {
        (Some(dir), Some(name)) => {
            let dir = if dir.as_os_str().is_empty() {
                Path::new(".")
            } else {
                dir
            };
            dir.canonicalize()
                .map(|d| d.join(name))
                .unwrap_or_else(|_| path.to_path_buf())
        }
        _ => path.to_path_buf(),
    }
}

/// Names the file in a [`StoreError::InUse`] met opening `path` (redb says only "database
/// already open"), and who may hold it; any other error is passed on as it is.
fn held_by_another(path: &Path) -> impl Fn(StoreError) -> StoreError + '_ {
    move |e| match e {
        StoreError::InUse(why) => StoreError::InUse(format!(
            "{}: {why} (by another process, or by redb itself elsewhere in this one: a store \
             has one owner at a time)",
            path.display()
        )),
        e => e,
    }
}

/// Opens the checked file at `path` for real (redb may panic on a damaged file).
fn open_db(path: &Path) -> Result<Database, StoreError> {
    catch_unwind(AssertUnwindSafe(|| Database::builder().open(path)))
        .map_err(|_| panicked(path))?
        .map_err(err("open store file"))
}

/// Refuses a directory at `path` (whose metadata, not following a symlink, is `m`), and
/// anything else that is not a regular file once symlinks are followed (a FIFO, whose opening
/// for reading would wait for a writer; a socket; a device): none is a store.
fn a_file(path: &Path, m: &fs::Metadata) -> Result<(), StoreError> {
    if m.is_dir() {
        return Err(StoreError::Corrupt(format!(
            "{}: is a directory, not a rota store",
            path.display()
        )));
    }
    match fs::metadata(path) {
        Ok(m) if !m.is_file() => Err(StoreError::Corrupt(format!(
            "{}: not a regular file, not a rota store",
            path.display()
        ))),
        _ => Ok(()),
    }
}

fn panicked(path: &Path) -> StoreError {
    StoreError::Corrupt(format!(
        "{}: redb could not read the file (it panicked)",
        path.display()
    ))
}

/// Writes the meta table of a new store, durably.
pub(crate) fn init(db: &Database) -> Result<(), StoreError> {
    let txn = db.begin_write().map_err(err("begin write"))?;
    crate::store::init(&txn)?;
    txn.commit().map_err(err("initialize store"))
}

/// Creates a store at `path`: in a temporary file, linked into place when complete. If another
/// process links its own first, that one is used.
fn create(path: &Path) -> Result<(), StoreError> {
    let tmp = temp_path(path);
    // Made here, so that only a temporary file this call made is removed below.
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&tmp)
        .map_err(|e| {
            refused("create store file", path, e, || {
                format!(
                    "{} does not exist, and its directory {} is not writable, so it cannot be \
                     made there",
                    path.display(),
                    dir_of(path).display()
                )
            })
        })?;
    let built = (|| {
        let backend = FileBackend::new(file).map_err(err("create store file"))?;
        let db = Database::builder()
            .create_with_backend(backend)
            .map_err(err("create store file"))?;
        init(&db)?;
        db.close().map_err(err("close new store file"))
    })();
    let linked = built.and_then(|()| place(&tmp, path, |a, b| fs::hard_link(a, b)));
    let _ = fs::remove_file(&tmp);
    linked?;
    // The link must survive a crash too; a directory that cannot be synced is no error.
    if let Ok(d) = File::open(dir_of(path)) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// Puts the complete new store `tmp` at `path` (by `link`, a hard link), unless another
/// creator's is there first, which is then kept: the caller removes `tmp` either way. On a
/// filesystem without hard links, the name is claimed by an empty file made only if nothing
/// is there (so of two creators racing, one claims it and the other keeps the first's), and
/// the store moved over it: an open in that moment finds the empty file and is refused, as is
/// one after a crash in it (the empty file is left, to be removed by hand).
fn place(
    tmp: &Path,
    path: &Path,
    link: impl Fn(&Path, &Path) -> io::Result<()>,
) -> Result<(), StoreError> {
    let unlinked = match link(tmp, path) {
        Ok(()) => return Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => return Ok(()),
        Err(e) => e,
    };
    match OpenOptions::new().write(true).create_new(true).open(path) {
        Ok(claim) => {
            drop(claim);
            fs::rename(tmp, path).map_err(|e| {
                // The empty file is this call's own: not left to be refused.
                let _ = fs::remove_file(path);
                StoreError::backend("move new store file into place", e)
            })
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(_) => Err(StoreError::backend(
            "link new store file into place",
            unlinked,
        )),
    }
}

/// How old a temporary file of [`create`] must be before an open takes it for one a crash left
/// behind: a store is made in milliseconds.
const STALE_AFTER: std::time::Duration = std::time::Duration::from_secs(60);

/// Removes the temporary files [`create`] made beside `path` that a crash left behind (a
/// process killed between making one and removing it): those of `path`'s name, older than
/// [`STALE_AFTER`], that nothing holds (redb locks the file a store is built in, and an open
/// store's file, which a temporary file linked into place and not yet removed is a name of).
/// Best effort: a file it cannot judge or remove is left as it is.
fn remove_stale_temps(path: &Path) {
    let Some(name) = path.file_name() else {
        return;
    };
    let prefix = format!(".{}.rota-new-", name.to_string_lossy());
    let Ok(entries) = fs::read_dir(dir_of(path)) else {
        return;
    };
    for entry in entries.flatten() {
        if !entry.file_name().to_string_lossy().starts_with(&prefix) {
            continue;
        }
        let stale = entry
            .metadata()
            .ok()
            .filter(fs::Metadata::is_file)
            .and_then(|m| m.modified().ok())
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age >= STALE_AFTER);
        if !stale {
            continue;
        }
        let temp = entry.path();
        let Ok(file) = OpenOptions::new().read(true).write(true).open(&temp) else {
            continue;
        };
        if file.try_lock().is_ok() {
            let _ = fs::remove_file(&temp);
        }
    }
}

/// Whether `path`, a symbolic link, leads to nothing (no file, directory or anything else).
fn leads_nowhere(path: &Path) -> bool {
    matches!(fs::metadata(path), Err(e) if e.kind() == io::ErrorKind::NotFound)
}

/// How many symbolic links [`link_target`] follows, as Linux's path lookup (`ELOOP` past it).
const MAX_LINKS: usize = 40;

/// Where the symbolic link at `path` leads in the end, following a chain of links (each
/// relative target taken from its link's directory) to the first path that is no link. (The
/// system has just found that the chain ends in nothing, so it is no loop; the bound holds
/// should the links change meanwhile.)
fn link_target(path: &Path) -> Result<PathBuf, StoreError> {
    let mut at = path.to_owned();
    for _ in 0..MAX_LINKS {
        match fs::symlink_metadata(&at) {
            Ok(m) if m.file_type().is_symlink() => {
                let to =
                    fs::read_link(&at).map_err(|e| at_file("read store file's link", &at, e))?;
                at = dir_of(&at).join(to);
            }
            _ => return Ok(at),
        }
    }
    Err(StoreError::backend(
        "follow store file's link",
        io::Error::other(format!(
            "{}: more than {MAX_LINKS} symbolic links in a row",
            path.display()
        )),
    ))
}

/// The directory `path` is in (`.` for a bare file name).
fn dir_of(path: &Path) -> &Path {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

/// An I/O error met doing `context` to the store file at `path`: when it is a refusal to write
/// (permissions, an immutable file, a read-only file system), with `why` after the system's own
/// words, which name no file (for a store that exists, `why` says that it must be writable even
/// to be read); otherwise naming the file, as [`at_file`].
fn refused(context: &str, path: &Path, e: io::Error, why: impl FnOnce() -> String) -> StoreError {
    let denied = matches!(
        e.kind(),
        io::ErrorKind::PermissionDenied | io::ErrorKind::ReadOnlyFilesystem
    );
    if !denied {
        return at_file(context, path, e);
    }
    StoreError::Backend {
        context: context.into(),
        source: BackendError::new(e).explained(why()),
    }
}

/// An I/O error met doing `context` to the store file at `path`, naming the file after the
/// system's own words, which do not (`create store file: No such file or directory (os error
/// 2): /no/such/dir/s.redb`).
fn at_file(context: &str, path: &Path, e: io::Error) -> StoreError {
    StoreError::Backend {
        context: context.into(),
        source: BackendError::new(e).explained(path.display().to_string()),
    }
}

fn temp_path(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    path.with_file_name(format!(".{name}.rota-new-{}-{nanos}", std::process::id()))
}

/// Migrates a store of schema version 2 to the current one, in one durable transaction: the
/// rows of the jobs in version 2's live index move to the live rows, and that index goes. A
/// store of the current version is left alone. Whether it migrated.
fn migrate(db: &Database) -> Result<bool, StoreError> {
    const WHAT: &str = "migrate store from schema 2";
    let txn = db.begin_write().map_err(err("begin write"))?;
    let version = {
        let meta = txn.open_table(META).map_err(err("open meta table"))?;
        meta.get(VERSION_KEY)
            .map_err(err("read meta"))?
            .map(|g| g.value().to_vec())
    };
    if version.as_deref() != Some(VERSION_2.as_bytes()) {
        txn.abort().map_err(err("abort"))?;
        return Ok(false);
    }
    {
        let mut ids = Vec::new();
        for entry in txn.open_table(LIVE_V2).ctx(WHAT)?.iter().ctx(WHAT)? {
            ids.push(entry.ctx(WHAT)?.0.value().to_owned());
        }
        let mut rows = txn.open_table(ROWS).ctx(WHAT)?;
        let mut live_rows = txn.open_table(LIVE_ROWS).ctx(WHAT)?;
        for id in &ids {
            move_rows(&mut rows, &mut live_rows, id)?;
        }
    }
    txn.delete_table(LIVE_V2).ctx(WHAT)?;
    txn.open_table(META)
        .map_err(err("open meta table"))?
        .insert(VERSION_KEY, VERSION.as_bytes())
        .ctx(WHAT)?;
    txn.commit().map_err(err("commit migration"))?;
    Ok(true)
}

/// Checks that `path` is a rota store of one of the schema versions `accept`, without
/// changing it: the database, over a copy-on-write view of the file (see [`Overlay`]), holds
/// the file's lock until it is dropped.
fn inspect(path: &Path, accept: &[&str]) -> Result<Database, StoreError> {
    let not_rota = |why: &str| StoreError::Corrupt(format!("{}: {why}", path.display()));
    let mut head = Vec::with_capacity(REDB_MAGIC.len());
    File::open(path)
        .and_then(|f| f.take(REDB_MAGIC.len() as u64).read_to_end(&mut head))
        .map_err(|e| at_file("read store file", path, e))?;
    if head.is_empty() {
        return Err(not_rota("empty file, not a rota store"));
    }
    if head != REDB_MAGIC {
        return Err(not_rota("not a redb file, so not a rota store"));
    }
    // Opened writable only so that redb can take its exclusive lock; the overlay never writes.
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(|e| {
            refused("open store file", path, e, || {
                format!(
                    "{} is not writable; a rota store is written even to read a job from it",
                    path.display()
                )
            })
        })?;
    let len = file
        .metadata()
        .map_err(|e| at_file("open store file", path, e))?
        .len();
    let backend = FileBackend::new(file).map_err(err("open store file"))?;
    let overlay = Overlay::new(backend, len);
    // redb may panic on a file damaged outside it (debug builds assert on some such checks).
    catch_unwind(AssertUnwindSafe(|| check_meta(path, overlay, accept)))
        .map_err(|_| panicked(path))?
}

fn check_meta(path: &Path, overlay: Overlay, accept: &[&str]) -> Result<Database, StoreError> {
    let not_rota = |why: String| StoreError::Corrupt(format!("{}: {why}", path.display()));
    let db = Builder::new()
        .set_check_integrity_on_open(true)
        .create_with_backend(overlay)
        .map_err(|e| match err("open store file")(e) {
            StoreError::Backend { source, .. } => {
                not_rota(format!("not a readable redb database ({source})"))
            }
            StoreError::Corrupt(why) => not_rota(format!("damaged, not a readable store ({why})")),
            other => other,
        })?;
    let txn = db.begin_read().map_err(err("begin read"))?;
    let meta = match txn.open_table(META) {
        Ok(t) => t,
        Err(redb::TableError::TableDoesNotExist(_)) => {
            return Err(not_rota(
                "a redb database without rota's meta table, not a rota store".into(),
            ));
        }
        Err(e) => return Err(not_rota(format!("bad rota meta table ({e})"))),
    };
    let get = |key: &str| -> Result<Option<Vec<u8>>, StoreError> {
        Ok(meta
            .get(key)
            .map_err(err("read meta"))?
            .map(|g| g.value().to_vec()))
    };
    if get(MAGIC_KEY)?.as_deref() != Some(MAGIC) {
        return Err(not_rota(
            "the meta table lacks rota's magic, not a rota store".into(),
        ));
    }
    let found = get(VERSION_KEY)?
        .map(|v| String::from_utf8_lossy(&v).into_owned())
        .unwrap_or_default();
    if found.trim().is_empty() {
        return Err(not_rota(
            "rota's meta table holds no schema version, not a rota store".into(),
        ));
    }
    // Shown in the error only if it reads as a version: a damaged file could hold anything
    // there, and the message may be logged.
    let plain = found.len() <= 16
        && found
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-' || b == b'_');
    if !plain {
        return Err(not_rota(format!(
            "rota's meta table holds no valid schema version (a value of {} bytes), not a \
             rota store",
            found.len()
        )));
    }
    if !accept.contains(&found.as_str()) {
        return Err(StoreError::Version {
            found,
            expected: VERSION.into(),
        });
    }
    drop(meta);
    drop(txn);
    Ok(db)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    #[test]
    fn a_creator_that_loses_the_race_to_link_keeps_the_winners_file_and_leaves_no_temporary_file() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.redb");
        create(&path).unwrap();
        let first = fs::metadata(&path).unwrap().ino();
        // A second creator that found no file, then found the first one's linked in its place.
        create(&path).unwrap();
        assert_eq!(fs::metadata(&path).unwrap().ino(), first);
        let names: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["s.redb"]);
        drop(RedbStore::open(&path).unwrap());
    }

    /// A filesystem without hard links (FAT, some network mounts) refuses every link.
    #[cfg(unix)]
    fn no_links(_: &Path, _: &Path) -> io::Result<()> {
        Err(io::Error::from(io::ErrorKind::PermissionDenied))
    }

    #[cfg(unix)]
    fn ino(path: &Path) -> u64 {
        use std::os::unix::fs::MetadataExt;
        fs::metadata(path).unwrap().ino()
    }

    #[cfg(unix)]
    #[test]
    fn without_hard_links_a_new_store_is_moved_into_place() {
        let dir = tempfile::tempdir().unwrap();
        let (tmp, path) = (dir.path().join("new"), dir.path().join("s.redb"));
        fs::write(&tmp, b"new store").unwrap();
        let made = ino(&tmp);
        place(&tmp, &path, no_links).unwrap();
        assert_eq!(ino(&path), made);
        assert!(!tmp.exists());
    }

    /// A creator whose link fails (no hard links) and that cannot make the empty file either
    /// (here its directory is gone) fails with the link's error, its store left for the caller
    /// to remove: it does not take a store that is nowhere for placed.
    #[cfg(unix)]
    #[test]
    fn without_hard_links_a_store_that_cannot_be_placed_fails_with_the_links_error() {
        let dir = tempfile::tempdir().unwrap();
        let (tmp, path) = (
            dir.path().join("new"),
            dir.path().join("gone").join("s.redb"),
        );
        fs::write(&tmp, b"new store").unwrap();
        let err = place(&tmp, &path, no_links).unwrap_err();
        assert!(
            matches!(&err, StoreError::Backend { context, .. }
                if context == "link new store file into place"),
            "{err:?}"
        );
        assert!(err.to_string().contains("ermission denied"), "{err}");
        assert_eq!(fs::read(&tmp).unwrap(), b"new store");
        assert!(!path.exists());
    }

    /// A chain of symbolic links is followed to the first path that is no link, whether nothing
    /// is there or, should the chain's end be made meanwhile (another creator's store), a file:
    /// the store is then made, and found, there, not refused for a link that cannot be read.
    #[cfg(unix)]
    #[test]
    fn a_chain_of_links_is_followed_to_its_end_even_where_a_file_now_is() {
        let dir = tempfile::tempdir().unwrap();
        let (first, second) = (dir.path().join("first"), dir.path().join("second"));
        std::os::unix::fs::symlink("second", &first).unwrap();
        std::os::unix::fs::symlink("s.redb", &second).unwrap();
        let end = dir.path().join("s.redb");
        assert_eq!(link_target(&first).unwrap(), end);
        fs::write(&end, b"made meanwhile").unwrap();
        assert_eq!(link_target(&first).unwrap(), end);
        assert_eq!(link_target(&second).unwrap(), end);
    }

    /// The directory of a bare file name is `.` (an empty path names no directory, which could
    /// be neither synced after a new store's link nor named in a refusal to make one there).
    #[test]
    fn the_directory_of_a_bare_file_name_is_the_current_one() {
        assert_eq!(dir_of(Path::new("s.redb")), Path::new("."));
        assert_eq!(dir_of(Path::new("d/s.redb")), Path::new("d"));
        assert_eq!(dir_of(Path::new("/s.redb")), Path::new("/"));
    }

    #[cfg(unix)]
    #[test]
    fn without_hard_links_a_creator_that_loses_the_race_keeps_the_winners_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.redb");
        create(&path).unwrap();
        let first = ino(&path);
        // A second creator, its store made, finds the first one's in place: it keeps that one
        // (a plain rename would have put its own there, under a store open on the first).
        let tmp = dir.path().join("new");
        fs::write(&tmp, b"second store").unwrap();
        place(&tmp, &path, no_links).unwrap();
        assert_eq!(ino(&path), first);
        assert_eq!(fs::read(&tmp).unwrap(), b"second store");
        drop(RedbStore::open(&path).unwrap());
    }
}
