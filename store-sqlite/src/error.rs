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
    what: &'static str,
    /// What the column holds if it is a short plain word (a name misspelt, say); otherwise
    /// only its length in characters: a damaged file could hold anything there, a URL or a
    /// key too, and this message is logged.
    found: Result<String, usize>,
}

impl BadName {
    /// `found`, which is no name of `what`.
    pub(crate) fn new(what: &'static str, found: &str) -> Self {
        let plain = found.len() <= 16
            && found
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        let found = if plain {
            Ok(found.to_owned())
        } else {
            Err(found.chars().count())
        };
        BadName { what, found }
    }
}

impl std::fmt::Display for BadName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.found {
            Ok(word) => write!(f, "unknown {} {word:?}", self.what),
            Err(n) => write!(f, "unknown {}: a text of {n} characters", self.what),
        }
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
    fn an_unknown_name_is_shown_only_if_it_is_a_short_plain_word() {
        let shown = |found: &str| BadName::new("job status", found).to_string();
        assert_eq!(shown("runing"), r#"unknown job status "runing""#);
        assert_eq!(shown(""), r#"unknown job status """#);
        let url = "https://secret.example/p";
        assert_eq!(shown(url), "unknown job status: a text of 24 characters");
        assert_eq!(
            shown("abcdefghijklmnopq"),
            "unknown job status: a text of 17 characters"
        );
    }

    /// A "short plain word" is at most 16 bytes of ASCII letters, digits, `_` and `-` (a
    /// misspelt `not_done` or `re-run` is shown); any other text only by its length, counted
    /// in characters, not bytes.
    #[test]
    fn a_plain_word_is_16_letters_digits_underscores_or_hyphens_at_most() {
        let shown = |found: &str| BadName::new("target state", found).to_string();
        assert_eq!(
            shown("abcdefghijklmnop"),
            r#"unknown target state "abcdefghijklmnop""#
        );
        assert_eq!(shown("not_done"), r#"unknown target state "not_done""#);
        assert_eq!(shown("re-run"), r#"unknown target state "re-run""#);
        assert_eq!(shown("a b"), "unknown target state: a text of 3 characters");
        // Five characters, six bytes.
        assert_eq!(
            shown("d\u{f6}nes"),
            "unknown target state: a text of 5 characters"
        );
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
