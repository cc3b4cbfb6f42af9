//! The injected fetch.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

use crate::{Caller, FetchError, Target, TargetResult};

/// Fetches one target for the caller that submitted its job.
///
/// `cancel` is cancelled when the runner closes (or its last handle is dropped): a long fetch
/// should return soon after. It is the runner's, not the job's: cancelling a job lets its
/// fetch in flight finish. A panic is caught by the runner and stored as `internal error`.
///
/// Any `Fn(Arc<Caller>, Target, CancellationToken) -> impl Future<Output = Result<TargetResult,
/// FetchError>>` is a `Fetch`, and so is an `Arc` of one (an `Arc<dyn Fetch>` too; a
/// `Box<dyn Fetch>` is not, as that impl would overlap the closures': `Arc::from` it). A type
/// of your own implements it with [`async_trait`](crate::async_trait), re-exported here:
///
/// ```
/// use std::sync::Arc;
///
/// use rota::{async_trait, CancellationToken, Caller, Fetch, FetchError, Target, TargetResult};
///
/// struct Echo {
///     prefix: String,
/// }
///
/// #[async_trait]
/// impl Fetch for Echo {
///     async fn fetch(
///         &self,
///         _caller: Arc<Caller>,
///         target: Target,
///         _cancel: CancellationToken,
///     ) -> Result<TargetResult, FetchError> {
///         Ok(TargetResult {
///             content: format!("{}{}", self.prefix, target.url),
///             meta: Default::default(),
///         })
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), FetchError> {
/// let boxed: Box<dyn Fetch> = Box::new(Echo { prefix: "got ".into() });
/// let shared: Arc<dyn Fetch> = Arc::from(boxed); // a `Fetch`, for `Runner::start`
/// let target = Target { url: "https://example.com/".into(), ..Target::default() };
/// let got = shared.fetch(Arc::default(), target, CancellationToken::new()).await?;
/// assert_eq!(got.content, "got https://example.com/");
/// # Ok(())
/// # }
/// ```
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
