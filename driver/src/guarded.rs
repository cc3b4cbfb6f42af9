//! The store as the runner calls it: a call that panics (a bug of the store's: when called,
//! while its future runs, or when that future or the panic's value is dropped) is a store
//! error, as a failed call is, and never unwinds into a worker, which it would end (its jobs
//! then never finish), or into a caller's task. See `catch` for what is caught and why.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use rota_core::{Admission, BatchStore, Caps, JobRow, JobStatus, NewJob, StoreError};
use rota_core::{TargetRow, TargetWrite};

use crate::catch::{CatchUnwind, catching};

/// A store call's future, as [`BatchStore`]'s methods return it.
type Call<'a, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>;

/// The error of a store call that panicked. Not the panic's value: it may carry anything.
#[cold]
#[inline(never)]
fn panicked(op: &'static str) -> StoreError {
    StoreError::backend(op, std::io::Error::other("the store panicked"))
}

/// A guarded store call (see the module's doc): the call's future, or `None` if the call
/// panicked when made. A panic while the future runs is the same error.
pub(crate) struct Guard<'a, T> {
    call: Option<CatchUnwind<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>,
    op: &'static str,
}

impl<'a, T> Guard<'a, T> {
    /// Makes the store call `call` (catching a panic) and guards its future.
    #[inline]
    fn new(op: &'static str, call: impl FnOnce() -> Call<'a, T>) -> Self {
        Guard {
            call: catching(call).ok().map(CatchUnwind::new),
            op,
        }
    }
}

impl<T> Future for Guard<'_, T> {
    type Output = Result<T, StoreError>;

    #[inline]
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let op = self.op;
        let Some(call) = self.call.as_mut() else {
            return Poll::Ready(Err(panicked(op)));
        };
        match Pin::new(call).poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Ok(r)) => Poll::Ready(r),
            Poll::Ready(Err(_)) => Poll::Ready(Err(panicked(op))),
        }
    }
}

/// A [`BatchStore`] whose every call is guarded (see the module's doc): the methods the runner
/// uses, with the store's names and arguments. Each makes its call at once, as the store's
/// own method would, and returns the guarded future.
#[derive(Clone, Copy)]
pub(crate) struct Guarded<'s>(pub(crate) &'s dyn BatchStore);

impl<'s> Guarded<'s> {
    #[inline]
    pub(crate) fn admit<'a>(self, job: &'a NewJob, caps: &'a Caps) -> Guard<'a, Admission>
    where
        's: 'a,
    {
        Guard::new("admit", || self.0.admit(job, caps))
    }

    #[inline]
    pub(crate) fn view<'a>(self, id: &'a str) -> Guard<'a, Option<(JobRow, Vec<TargetRow>)>>
    where
        's: 'a,
    {
        Guard::new("view", || self.0.view(id))
    }

    #[inline]
    pub(crate) fn start_target<'a>(
        self,
        id: &'a str,
        idx: usize,
        now: i64,
    ) -> Guard<'a, Option<TargetRow>>
    where
        's: 'a,
    {
        Guard::new("start_target", || self.0.start_target(id, idx, now))
    }

    #[inline]
    pub(crate) fn finish_target<'a>(
        self,
        id: &'a str,
        idx: usize,
        write: &'a TargetWrite,
        now: i64,
        finish: Option<JobStatus>,
    ) -> Guard<'a, bool>
    where
        's: 'a,
    {
        Guard::new("finish_target", || {
            self.0.finish_target(id, idx, write, now, finish)
        })
    }

    #[inline]
    pub(crate) fn set_status<'a>(
        self,
        id: &'a str,
        status: JobStatus,
        error: &'a str,
        now: i64,
    ) -> Guard<'a, bool>
    where
        's: 'a,
    {
        Guard::new("set_status", || self.0.set_status(id, status, error, now))
    }

    #[inline]
    pub(crate) fn touch<'a>(self, id: &'a str, now: i64) -> Guard<'a, bool>
    where
        's: 'a,
    {
        Guard::new("touch", || self.0.touch(id, now))
    }

    #[inline]
    pub(crate) fn sweep(self, now: i64, ttl_secs: i64) -> Guard<'s, usize> {
        Guard::new("sweep", || self.0.sweep(now, ttl_secs))
    }

    #[inline]
    pub(crate) fn evict(self, max_bytes: u64) -> Guard<'s, usize> {
        Guard::new("evict", || self.0.evict(max_bytes))
    }

    #[inline]
    pub(crate) fn recover<'a>(self, error: &'a str, now: i64) -> Guard<'a, usize>
    where
        's: 'a,
    {
        Guard::new("recover", || self.0.recover(error, now))
    }
}
