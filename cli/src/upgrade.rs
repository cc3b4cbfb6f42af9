//! `rota upgrade`: migrates a store file to this version's schema.

use std::process::ExitCode;

use rota::StoreError;
use rota_store_redb::RedbStore;

use crate::store_url::{IN_USE_HINT, StoreUrl};

/// Migrates `store`'s file if it is a redb file of schema 2, and says what it did on stderr. A
/// store already current is left alone (a SQLite file is opened, and so checked, and closed);
/// a missing file, the memory store, or a file that is not a rota store is an error.
pub fn upgrade(store: &StoreUrl) -> Result<ExitCode, String> {
    match store {
        StoreUrl::Memory => {
            return Err(
                "the memory store keeps nothing between commands: nothing to upgrade".into(),
            );
        }
        StoreUrl::Sqlite(p) | StoreUrl::Redb(p) if store.is_missing()? => {
            return Err(format!("no store at {}: nothing to upgrade", p.display()));
        }
        StoreUrl::Sqlite(p) if std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.len() == 0) => {
            return Err(format!(
                "{store}: empty file, not a rota store: nothing to upgrade"
            ));
        }
        StoreUrl::Sqlite(_) => {
            drop(store.open_for_command()?);
            note!("{store}: already current, left alone");
        }
        StoreUrl::Redb(p) => {
            let migrated = RedbStore::upgrade(p).map_err(|e| {
                let hint = match e {
                    StoreError::InUse(_) => IN_USE_HINT,
                    _ => "",
                };
                format!("upgrading the store {store}: {e}{hint}")
            })?;
            if migrated {
                note!("{store}: migrated from schema 2 to 3, every job kept");
            } else {
                note!("{store}: already current, left alone");
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
