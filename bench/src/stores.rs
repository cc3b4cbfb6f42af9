//! The backends under test, each opened fresh (file stores in their own temp dir).

use std::path::Path;
use std::sync::Arc;

use rota::{BatchStore, StoreError};
use rota_store_memory::MemoryStore;
use rota_store_redb::{Durability, RedbOptions, RedbStore};
use rota_store_sqlite::SqliteStore;
use tempfile::TempDir;

/// A backend of the runner rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Memory,
    Sqlite,
    Redb,
}

impl Backend {
    pub const ALL: [Backend; 3] = [Backend::Memory, Backend::Sqlite, Backend::Redb];

    pub fn name(self) -> &'static str {
        match self {
            Backend::Memory => "memory",
            Backend::Sqlite => "sqlite-file",
            Backend::Redb => "redb-file",
        }
    }

    fn file(self) -> &'static str {
        match self {
            Backend::Memory => "",
            Backend::Sqlite => "rota.sqlite",
            Backend::Redb => "rota.redb",
        }
    }
}

/// An open store and the temp dir its file lives in (dropped after the store).
pub struct Opened {
    pub store: Arc<dyn BatchStore>,
    pub dir: Option<TempDir>,
}

impl Opened {
    /// Closes the store, then removes its dir.
    pub fn close(self) {
        let Opened { store, dir } = self;
        drop(store);
        drop(dir);
    }
}

fn tempdir() -> Result<TempDir, StoreError> {
    tempfile::tempdir().map_err(|e| StoreError::backend("bench temp dir", e))
}

/// A fresh, empty store of `backend`, with its default (durable) options.
pub fn fresh(backend: Backend) -> Result<Opened, StoreError> {
    if backend == Backend::Memory {
        return Ok(Opened {
            store: Arc::new(MemoryStore::new()),
            dir: None,
        });
    }
    let dir = tempdir()?;
    let store = open(backend, &dir.path().join(backend.file()), false)?;
    Ok(Opened {
        store,
        dir: Some(dir),
    })
}

/// The path of `backend`'s file in `dir`.
pub fn path_in(backend: Backend, dir: &Path) -> std::path::PathBuf {
    dir.join(backend.file())
}

/// Opens the file store at `path`; `lazy` opens redb with no fsync per commit (for a prefill).
pub fn open(backend: Backend, path: &Path, lazy: bool) -> Result<Arc<dyn BatchStore>, StoreError> {
    Ok(match backend {
        Backend::Memory => Arc::new(MemoryStore::new()),
        Backend::Sqlite => Arc::new(SqliteStore::open(path)?),
        Backend::Redb if lazy => Arc::new(RedbStore::open_with(
            path,
            RedbOptions {
                durability: Durability::None,
                sync_every: 0,
                ..RedbOptions::default()
            },
        )?),
        Backend::Redb => Arc::new(RedbStore::open(path)?),
    })
}

pub fn new_dir() -> Result<TempDir, StoreError> {
    tempdir()
}
