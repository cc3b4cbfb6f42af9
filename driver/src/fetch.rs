//! The injected fetch.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

use crate::{Caller, FetchError, Target, TargetResult};

/// Fetches one target for the caller that submitted its job.
///
/// `cancel` is cancelled when the runner closes: a long fetch should return soon after. A panic
/// is caught by the runner and stored as `internal error`.
///
/// Any `Fn(Arc<Caller>, Target, CancellationToken) -> impl Future<Output = Result<TargetResult,
/// FetchError>>` is a `Fetch`.
#[async_trait]
pub trait Fetch: Send + Sync + 'static {
    /// Fetches `target` for `caller`.
    async fn fetch(
        &self,
        caller: Arc<Caller>,
        target: Target,
        cancel: CancellationToken,
    ) -> Result<TargetResult, FetchError>;
}

#[async_trait]
impl<F, Fut> Fetch for F
where
    F: Fn(Arc<Caller>, Target, CancellationToken) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<TargetResult, FetchError>> + Send + 'static,
{
    async fn fetch(
        &self,
        caller: Arc<Caller>,
        target: Target,
        cancel: CancellationToken,
    ) -> Result<TargetResult, FetchError> {
        self(caller, target, cancel).await
    }
}

/// A shared fetch is a fetch: an `Arc<dyn Fetch>` chosen at run time, or an `Arc<F>` the
/// embedder also keeps, can be given to [`Runner::start`](crate::Runner::start) as it is.
///
/// It returns the shared fetch's own future, with no second boxed future around it.
impl<T: Fetch + ?Sized> Fetch for Arc<T> {
    fn fetch<'life0, 'async_trait>(
        &'life0 self,
        caller: Arc<Caller>,
        target: Target,
        cancel: CancellationToken,
    ) -> Pin<Box<dyn Future<Output = Result<TargetResult, FetchError>> + Send + 'async_trait>>
    where
        'life0: 'async_trait,
        Self: 'async_trait,
    {
        (**self).fetch(caller, target, cancel)
    }
}
