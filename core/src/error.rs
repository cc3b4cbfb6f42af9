//! The errors of a submit and of a store.

use std::error::Error as StdError;
use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// Why a submit was refused.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, thiserror::Error)]
pub enum SubmitError {
    /// The job had no targets.
    #[error("no targets")]
    NoTargets,
    /// The job had more targets than `Config::targets_per_job`.
    #[error("too many targets ({got} > {max})")]
    TooManyTargets {
        /// The cap.
        max: usize,
        /// How many the job had.
        got: usize,
    },
    /// The caller already has `Config::jobs_per_caller` live jobs.
    #[error("caller busy")]
    CallerBusy,
    /// There are already `Config::jobs_total` live jobs.
    #[error("jobs busy")]
    Busy,
    /// The store failed, or the runner is closed ([`StoreError::Closed`]).
    #[error("store: {0}")]
    Store(#[from] StoreError),
}

/// What went wrong in a store. Each backend maps its own errors into these variants.
///
/// The runner logs a store error's text (`Display`) with the job id it concerns; rota's logs
/// never carry a URL, a host or a caller key, so a store's error text must not either: name
/// the operation, the job id and counts, not a row's contents (a [`BatchStore`] of your own
/// that builds an error from a target's URL would put it in the logs).
///
/// [`BatchStore`]: crate::BatchStore
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// A row the operation needs does not exist.
    #[error("not found: {0}")]
    NotFound(String),
    /// The write conflicts with what is stored (for example, admitting an id that exists).
    #[error("conflict: {0}")]
    Conflict(String),
    /// Stored data could not be decoded, or the file is not a rota store.
    #[error("corrupt data: {0}")]
    Corrupt(String),
    /// The store is owned by another process or handle.
    #[error("in use by another owner: {0}")]
    InUse(String),
    /// The store was written by another schema version.
    #[error("schema version mismatch: found {found}, expected {expected}")]
    Version {
        /// The version the store holds.
        found: String,
        /// The version this build reads.
        expected: String,
    },
    /// The runner (or store) is closed.
    #[error("runner closed")]
    Closed,
    /// The backend failed.
    #[error("{context}: {source}")]
    Backend {
        /// What the store was doing.
        context: String,
        /// The backend's error.
        #[source]
        source: BackendError,
    },
}

impl StoreError {
    /// A backend error: `context` says what the store was doing.
    pub fn backend(
        context: impl Into<String>,
        source: impl StdError + Send + Sync + 'static,
    ) -> Self {
        StoreError::Backend {
            context: context.into(),
            source: BackendError::new(source),
        }
    }
}

/// A backend's own error, kept as the `source` of [`StoreError::Backend`].
///
/// Cloning shares the error. Two are equal when their messages are; it serializes as its message
/// and deserializes into an error holding only the message.
#[derive(Clone)]
pub struct BackendError(Arc<dyn StdError + Send + Sync>);

impl BackendError {
    /// Wraps a backend's error.
    pub fn new(e: impl StdError + Send + Sync + 'static) -> Self {
        BackendError(Arc::new(e))
    }

    /// The wrapped error.
    pub fn inner(&self) -> &(dyn StdError + Send + Sync + 'static) {
        &*self.0
    }

    /// This error with `why` after its own words (`"{self}: {why}"`): the cause that a
    /// backend's error does not name, such as a store file this process may not write behind
    /// SQLite's "disk I/O error" or the system's "Permission denied". Its
    /// [`source`](StdError::source) stays this error's own, so a chain printed whole says each
    /// part once; its [`inner`](Self::inner) is the pair, no longer the backend's own error.
    pub fn explained(self, why: impl Into<String>) -> Self {
        BackendError::new(Explained {
            error: self,
            why: why.into(),
        })
    }
}

/// A [`BackendError`] and the cause it does not name ([`BackendError::explained`]).
#[derive(Debug)]
struct Explained {
    error: BackendError,
    why: String,
}

impl fmt::Display for Explained {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.error, self.why)
    }
}

impl StdError for Explained {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.error.source()
    }
}

#[derive(Debug)]
struct Message(String);

impl fmt::Display for Message {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl StdError for Message {}

impl From<String> for BackendError {
    fn from(s: String) -> Self {
        BackendError::new(Message(s))
    }
}

impl fmt::Debug for BackendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for BackendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&*self.0, f)
    }
}

impl StdError for BackendError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.0.source()
    }
}

impl PartialEq for BackendError {
    fn eq(&self, other: &Self) -> bool {
        self.to_string() == other.to_string()
    }
}

impl Serialize for BackendError {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for BackendError {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(BackendError::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn submit_errors_display_as_the_spec_says() {
        assert_eq!(SubmitError::NoTargets.to_string(), "no targets");
        assert_eq!(
            SubmitError::TooManyTargets { max: 32, got: 33 }.to_string(),
            "too many targets (33 > 32)"
        );
        assert_eq!(SubmitError::CallerBusy.to_string(), "caller busy");
        assert_eq!(SubmitError::Busy.to_string(), "jobs busy");
        let e = SubmitError::Store(StoreError::NotFound("job x".into()));
        assert_eq!(e.to_string(), "store: not found: job x");
    }

    #[test]
    fn backend_errors_keep_their_source_and_round_trip_as_text() {
        let io = std::io::Error::other("disk full");
        let e = StoreError::backend("writing target", io);
        assert_eq!(e.to_string(), "writing target: disk full");
        assert_eq!(
            StdError::source(&e).map(|s| s.to_string()).as_deref(),
            Some("disk full")
        );
        let json = serde_json::to_string(&e).unwrap();
        let back: StoreError = serde_json::from_str(&json).unwrap();
        assert_eq!(back, e);
        assert_eq!(back.clone(), e);
    }

    /// Backend errors are equal when their texts are (as after a JSON round trip), and show
    /// the wrapped error's `Debug`.
    #[test]
    fn backend_errors_compare_by_text_and_debug_as_the_wrapped_error() {
        let full = BackendError::new(std::io::Error::other("disk full"));
        assert_eq!(full, BackendError::from("disk full".to_owned()));
        assert_ne!(full, BackendError::from("disk gone".to_owned()));
        assert_eq!(
            format!("{full:?}"),
            format!("{:?}", std::io::Error::other("disk full"))
        );
        assert_eq!(
            format!("{:?}", BackendError::from("x".to_owned())),
            r#"Message("x")"#
        );
    }

    /// An error that has a source of its own, like an I/O error inside a library's.
    #[derive(Debug)]
    struct Wrapped(std::io::Error);

    impl fmt::Display for Wrapped {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "I/O error: {}", self.0)
        }
    }

    impl StdError for Wrapped {
        fn source(&self) -> Option<&(dyn StdError + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn an_explained_backend_error_says_why_after_its_words_and_keeps_its_source() {
        let denied = std::io::Error::from(std::io::ErrorKind::PermissionDenied);
        let plain = BackendError::new(Wrapped(denied));
        let explained = plain.clone().explained("f.redb is not writable");
        assert_eq!(
            explained.to_string(),
            format!("{plain}: f.redb is not writable")
        );
        // The chain goes on with the wrapped error's own source, not with its text again.
        assert_eq!(
            explained.source().map(ToString::to_string),
            plain.source().map(ToString::to_string)
        );
        assert!(plain.source().is_some());
        let e = StoreError::Backend {
            context: "open store file".into(),
            source: explained,
        };
        assert_eq!(
            e.to_string(),
            format!("open store file: {plain}: f.redb is not writable")
        );
    }
}
