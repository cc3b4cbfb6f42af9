//! Mapping rusqlite's errors into [`StoreError`].

use rota_core::StoreError;
use rusqlite::ErrorCode;

/// `e`, met while doing `context`, as a [`StoreError`]: undecodable rows and a malformed file
/// are [`StoreError::Corrupt`], a lock held elsewhere is [`StoreError::InUse`], anything else
/// is [`StoreError::Backend`]. rusqlite's messages never carry a row's values, so no URL leaks.
pub(crate) fn sql(context: &str, e: rusqlite::Error) -> StoreError {
    if undecodable(&e) {
        return StoreError::Corrupt(format!("{context}: {e}"));
    }
    match &e {
        rusqlite::Error::SqliteFailure(f, _) => match f.code {
            ErrorCode::DatabaseCorrupt | ErrorCode::NotADatabase => {
                StoreError::Corrupt(format!("{context}: {e}"))
            }
            ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked => {
                StoreError::InUse(format!("{context}: {e}"))
            }
            _ => StoreError::backend(context, e),
        },
        _ => StoreError::backend(context, e),
    }
}

/// Whether `e` is a stored value that does not decode (text that is not UTF-8, a value of the
/// wrong type or out of range, an unknown name): a damaged row, not a failing file.
pub(crate) fn undecodable(e: &rusqlite::Error) -> bool {
    matches!(
        e,
        rusqlite::Error::FromSqlConversionFailure(..)
            | rusqlite::Error::IntegralValueOutOfRange(..)
            | rusqlite::Error::InvalidColumnType(..)
            | rusqlite::Error::Utf8Error(..)
    )
}

/// A closure for `map_err`: [`sql`] with `context`.
pub(crate) fn ctx(context: &'static str) -> impl Fn(rusqlite::Error) -> StoreError {
    move |e| sql(context, e)
}

/// A stored text column that holds no known name of its enum.
#[derive(Debug)]
pub(crate) struct BadName {
    pub(crate) what: &'static str,
    pub(crate) found: String,
}

impl std::fmt::Display for BadName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "unknown {} {:?}", self.what, self.found)
    }
}

impl std::error::Error for BadName {}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure(code: std::os::raw::c_int) -> rusqlite::Error {
        rusqlite::Error::SqliteFailure(rusqlite::ffi::Error::new(code), None)
    }

    #[test]
    fn sqlites_codes_map_to_what_the_caller_can_act_on() {
        use rusqlite::ffi;
        for code in [ffi::SQLITE_BUSY, ffi::SQLITE_LOCKED] {
            let e = sql("writing", failure(code));
            assert!(
                matches!(&e, StoreError::InUse(m) if m.starts_with("writing: ")),
                "{e:?}"
            );
        }
        for code in [ffi::SQLITE_CORRUPT, ffi::SQLITE_NOTADB] {
            let e = sql("reading", failure(code));
            assert!(
                matches!(&e, StoreError::Corrupt(m) if m.starts_with("reading: ")),
                "{e:?}"
            );
        }
        let e = sql("writing", failure(ffi::SQLITE_FULL));
        assert!(matches!(e, StoreError::Backend { .. }), "{e:?}");
        // A stored value that does not decode is a damaged row.
        let e = sql(
            "reading",
            rusqlite::Error::InvalidColumnType(0, "n".into(), rusqlite::types::Type::Text),
        );
        assert!(matches!(e, StoreError::Corrupt(_)), "{e:?}");
    }
}
