//! The schema: its tables and indexes, the marks that tell a rota store from any other file, and
//! the check of an opened file against them.

use rota_core::StoreError;
use rusqlite::Transaction;

use crate::error::ctx;

/// `PRAGMA application_id` of every rota store: "rota" in ASCII.
pub const APPLICATION_ID: u32 = 0x726f_7461;

/// `PRAGMA user_version` of the schema this build reads and writes. A file of any other version
/// is refused with [`StoreError::Version`]: there are no migrations yet.
pub const SCHEMA_VERSION: u32 = 1;

/// The tables a rota store holds and the columns of each (as in [`DDL`]), all of which
/// [`check`] requires.
const TABLES: [(&str, &[&str]); 2] = [
    (
        "jobs",
        &[
            "seq",
            "id",
            "caller",
            "class",
            "idem_key",
            "status",
            "error",
            "targets_total",
            "targets_done",
            "created_at",
            "lease",
            "n_bytes",
        ],
    ),
    (
        "targets",
        &[
            "job", "idx", "url", "options", "status", "result", "error", "hint",
        ],
    ),
];

/// The schema, created in one transaction with the marks of [`set_marks`].
///
/// - `jobs.seq` is an `INTEGER PRIMARY KEY` (a rowid alias, so it survives `VACUUM`) that the
///   targets point at: an 8-byte key instead of the 32-character id in every target row.
/// - `jobs_by_key` serves the idempotency lookup: the jobs of one caller and key, newest last.
/// - `jobs_live` holds only queued and running jobs: the live counts are read from it once at
///   open (and then kept in memory, see below), and recovery finds the live jobs by it.
/// - `jobs_sweep` and `jobs_evict` hold only terminal jobs, ordered as sweep and evict take
///   them, so both stop at once when nothing is due.
/// - the total of every job's `n_bytes` is summed once at open and then kept in memory (see
///   `ops::Tally`), so `total_bytes` and the evict check read no row at all, and neither do
///   the cap checks (the live counts are kept beside it).
/// - targets are a rowid table (their results may be mebibytes; `WITHOUT ROWID` suits small
///   rows only) keyed by `(job, idx)`.
const DDL: &str = "
CREATE TABLE jobs (
    seq           INTEGER PRIMARY KEY,
    id            TEXT    NOT NULL UNIQUE,
    caller        TEXT    NOT NULL,
    class         TEXT    NOT NULL,
    idem_key      TEXT    NOT NULL,
    status        TEXT    NOT NULL,
    error         TEXT    NOT NULL,
    targets_total INTEGER NOT NULL,
    targets_done  INTEGER NOT NULL,
    created_at    INTEGER NOT NULL,
    lease         INTEGER NOT NULL,
    n_bytes       INTEGER NOT NULL
);
CREATE INDEX jobs_by_key ON jobs (caller, idem_key, created_at, id);
CREATE INDEX jobs_live ON jobs (caller) WHERE status IN ('queued', 'running');
CREATE INDEX jobs_sweep ON jobs (lease) WHERE status NOT IN ('queued', 'running');
CREATE INDEX jobs_evict ON jobs (created_at, id) WHERE status NOT IN ('queued', 'running');
CREATE TABLE targets (
    job     INTEGER NOT NULL,
    idx     INTEGER NOT NULL,
    url     TEXT    NOT NULL,
    options TEXT    NOT NULL,
    status  TEXT    NOT NULL,
    result  TEXT,
    error   TEXT    NOT NULL,
    hint    TEXT    NOT NULL,
    PRIMARY KEY (job, idx)
);
";

/// Creates the schema and sets the marks, inside `tx`.
pub(crate) fn create(tx: &Transaction<'_>) -> Result<(), StoreError> {
    tx.execute_batch(DDL).map_err(ctx("creating the schema"))?;
    set_marks(tx)
}

/// Sets `application_id` and `user_version`. Both live in the file's header page, so they are
/// written by the same transaction as the schema.
fn set_marks(tx: &Transaction<'_>) -> Result<(), StoreError> {
    tx.execute_batch(&format!(
        "PRAGMA application_id = {APPLICATION_ID}; PRAGMA user_version = {SCHEMA_VERSION};"
    ))
    .map_err(ctx("marking the file as a rota store"))
}

/// What the database behind `tx` is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Found {
    /// No page at all: a new file, to be created.
    New,
    /// A rota store of this schema version.
    Rota,
}

/// Reads what the database behind `tx` is: new, or a rota store of [`SCHEMA_VERSION`] with
/// every table. Anything else is an error naming the problem; nothing is written.
pub(crate) fn check(tx: &Transaction<'_>, shown: &str) -> Result<Found, StoreError> {
    let (app, version) = (pragma(tx, "application_id")?, pragma(tx, "user_version")?);
    let objects: u64 = tx
        .query_row("SELECT count(*) FROM sqlite_schema", [], |r| r.get(0))
        .map_err(ctx("reading the schema"))?;
    // No marks and no schema: a file of no pages (`page_count` cannot tell, as a write
    // transaction has already allocated page 1 in its cache). The caller's look at the file
    // has refused any file with content and no marks, so this is a new file, or one whose
    // creation a crash cut short and SQLite has just rolled back.
    if app == 0 && version == 0 && objects == 0 {
        return Ok(Found::New);
    }
    marks(app, version, shown)?;
    let mut stmt = tx
        .prepare("SELECT name FROM sqlite_schema WHERE type = 'table'")
        .map_err(ctx("reading the schema"))?;
    let names = stmt
        .query_map([], |r| r.get::<_, String>(0))
        .map_err(ctx("reading the schema"))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(ctx("reading the schema"))?;
    let mut columns = tx
        .prepare("SELECT name FROM pragma_table_info(?1)")
        .map_err(ctx("reading the schema"))?;
    if let Some((table, _)) = TABLES.iter().find(|(t, _)| !names.iter().any(|n| n == t)) {
        return Err(StoreError::Corrupt(format!(
            "{shown}: a rota store without its table {table:?}"
        )));
    }
    for (table, wanted) in TABLES {
        let has = columns
            .query_map([table], |r| r.get::<_, String>(0))
            .map_err(ctx("reading the schema"))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(ctx("reading the schema"))?;
        if let Some(column) = wanted.iter().find(|c| !has.iter().any(|h| h == *c)) {
            return Err(StoreError::Corrupt(format!(
                "{shown}: a rota store whose table {table:?} has no column {column:?}"
            )));
        }
    }
    Ok(Found::Rota)
}

/// Checks the two marks of a rota store: the application id, then the schema version.
pub(crate) fn marks(application_id: u32, user_version: u32, shown: &str) -> Result<(), StoreError> {
    if application_id != APPLICATION_ID {
        return Err(StoreError::Corrupt(if application_id == 0 {
            format!("{shown}: a SQLite database that is not a rota store (no rota application id)")
        } else {
            format!(
                "{shown}: a SQLite database of another program (application_id \
                 {application_id:#010x}, rota's is {APPLICATION_ID:#010x}), not a rota store"
            )
        }));
    }
    if user_version != SCHEMA_VERSION {
        return Err(StoreError::Version {
            found: user_version.to_string(),
            expected: SCHEMA_VERSION.to_string(),
        });
    }
    Ok(())
}

fn pragma(tx: &Transaction<'_>, name: &str) -> Result<u32, StoreError> {
    tx.query_row(&format!("PRAGMA {name}"), [], |r| r.get::<_, i64>(0))
        .map_err(ctx("reading the file's header"))
        // application_id and user_version are signed 32-bit in SQLite: keep their bits.
        .map(|v| v as u32)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use rusqlite::Connection;

    use super::*;

    /// [`TABLES`] lists the columns of [`DDL`]'s tables, in order: none missed, none made up.
    #[test]
    fn the_columns_checked_are_the_columns_created() {
        let mut conn = Connection::open_in_memory().unwrap();
        let tx = conn.transaction().unwrap();
        create(&tx).unwrap();
        for (table, wanted) in TABLES {
            let mut stmt = tx
                .prepare("SELECT name FROM pragma_table_info(?1) ORDER BY cid")
                .unwrap();
            let made: Vec<String> = stmt
                .query_map([table], |r| r.get(0))
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap();
            assert_eq!(made, wanted, "{table}");
        }
        assert_eq!(check(&tx, "mem").unwrap(), Found::Rota);
    }
}
