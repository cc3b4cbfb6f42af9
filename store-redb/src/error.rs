//! How redb's errors map into [`StoreError`].

use rota_core::StoreError;

/// Maps a redb error met while doing `context`: corruption (a broken page, a table of the
/// wrong type or missing) is [`StoreError::Corrupt`], a held lock is [`StoreError::InUse`],
/// anything else is [`StoreError::Backend`] with redb's error as its source.
pub(crate) fn map(context: &'static str) -> impl Fn(redb::Error) -> StoreError {
    move |e| {
        use redb::Error as E;
        match e {
            E::Corrupted(msg) => StoreError::Corrupt(format!("{context}: {msg}")),
            E::DatabaseAlreadyOpen => StoreError::InUse("database already open".into()),
            E::LockProtocolMismatch => StoreError::InUse(
                "database already open by a process running another redb version".into(),
            ),
            E::TableDoesNotExist(t) => {
                StoreError::Corrupt(format!("{context}: the table {t:?} is missing"))
            }
            e @ (E::TableTypeMismatch { .. }
            | E::TableIsMultimap(_)
            | E::TableIsNotMultimap(_)
            | E::TypeDefinitionChanged { .. }) => StoreError::Corrupt(format!("{context}: {e}")),
            e => StoreError::backend(context, e),
        }
    }
}

/// Shorthand: `.map_err(err("doing x"))` on any redb result.
pub(crate) fn err<E: Into<redb::Error>>(context: &'static str) -> impl Fn(E) -> StoreError {
    let f = map(context);
    move |e| f(e.into())
}

/// `.ctx("doing x")` on any redb result: [`err`] as a method.
pub(crate) trait Ctx<T> {
    /// Maps the error as [`map`] does.
    fn ctx(self, context: &'static str) -> Result<T, StoreError>;
}

impl<T, E: Into<redb::Error>> Ctx<T> for Result<T, E> {
    fn ctx(self, context: &'static str) -> Result<T, StoreError> {
        self.map_err(err(context))
    }
}

/// A commit that failed: redb says such a commit may have become durable all the same, so
/// neither is its batch run again operation by operation, nor the commit tried again after the
/// database is opened again (each would find its own writes made: an admit its own job).
#[derive(Debug)]
pub(crate) struct CommitUncertain(pub(crate) redb::Error);

impl std::fmt::Display for CommitUncertain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (the write may have been made all the same)", self.0)
    }
}

impl std::error::Error for CommitUncertain {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        std::error::Error::source(&self.0)
    }
}

/// Whether `e` is a [`CommitUncertain`].
pub(crate) fn uncertain(e: &StoreError) -> bool {
    matches!(e, StoreError::Backend { source, .. }
        if source.inner().downcast_ref::<CommitUncertain>().is_some())
}
