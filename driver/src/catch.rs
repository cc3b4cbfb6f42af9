//! Catching a panic of the embedder's code (a fetch, a store, a hook) without a task per call.
//!
//! A caught panic's value is dropped unread (it is never stored or logged), and so is a future
//! that panicked; a panic in either's destructor is caught too. Unwind safety is asserted
//! because the runner observes nothing the panicking code could have left half-updated: a
//! future that panicked is dropped and never polled again, and its error is all the runner
//! sees of it. (What a store keeps after a panic, possibly half-written, is the store's: the
//! runner goes on calling it, each call's failure handled as any.)

use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::task::{Context, Poll};

/// A panic was caught (its value is gone).
#[derive(Debug)]
pub(crate) struct Panicked;

/// Drops `v`, catching a panic in its destructor. The value of such a panic is leaked, not
/// dropped: its own destructor might panic again.
pub(crate) fn drop_quietly<V>(v: V) {
    if let Err(payload) = catch_unwind(AssertUnwindSafe(move || drop(v))) {
        // Cold: only a destructor that panicked gets here.
        std::mem::forget(payload);
    }
}

/// Runs `f`, catching a panic.
#[inline]
pub(crate) fn catching<R>(f: impl FnOnce() -> R) -> Result<R, Panicked> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|payload| {
        drop_quietly(payload);
        Panicked
    })
}

/// Polls a boxed future, catching a panic while it is polled or dropped. It drops the future
/// as soon as it is ready (a panic of its destructor then loses nothing of its answer), or
/// after it panicked.
pub(crate) struct CatchUnwind<F: ?Sized>(Option<Pin<Box<F>>>);

impl<F: ?Sized> CatchUnwind<F> {
    #[inline]
    pub(crate) fn new(fut: Pin<Box<F>>) -> Self {
        CatchUnwind(Some(fut))
    }
}

impl<F: Future + ?Sized> Future for CatchUnwind<F> {
    type Output = Result<F::Output, Panicked>;

    #[inline]
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let slot = &mut self.0;
        // None once ended: this crate never polls it again then.
        let polled = catching(|| slot.as_mut().map(|fut| fut.as_mut().poll(cx)));
        match polled {
            Ok(Some(Poll::Pending)) => Poll::Pending,
            Ok(Some(Poll::Ready(v))) => {
                // Dropped now, in a catch of its own: a future that answered and then panics
                // in its destructor has still answered.
                drop_quietly(self.0.take());
                Poll::Ready(Ok(v))
            }
            Ok(None) | Err(Panicked) => {
                drop_quietly(self.0.take());
                Poll::Ready(Err(Panicked))
            }
        }
    }
}

impl<F: ?Sized> Drop for CatchUnwind<F> {
    fn drop(&mut self) {
        if let Some(fut) = self.0.take() {
            drop_quietly(fut);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Panics when dropped.
    struct Bomb;

    impl Drop for Bomb {
        fn drop(&mut self) {
            panic!("dropped");
        }
    }

    #[test]
    fn a_panic_whose_value_panics_when_dropped_is_caught() {
        assert!(catching(|| std::panic::panic_any(Bomb)).is_err());
    }

    #[test]
    fn a_future_that_panics_when_dropped_is_caught_and_keeps_its_answer() {
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        // Ready at once, and panics when dropped (after it answered).
        struct Ready(#[allow(dead_code)] Bomb);
        impl Future for Ready {
            type Output = u8;
            fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<u8> {
                Poll::Ready(1)
            }
        }
        let mut f = CatchUnwind::new(Box::pin(Ready(Bomb)));
        assert!(matches!(Pin::new(&mut f).poll(&mut cx), Poll::Ready(Ok(1))));
        assert!(f.0.is_none());
        let pending = async {
            let _bomb = Bomb;
            std::future::pending::<()>().await;
        };
        let mut f = CatchUnwind::new(Box::pin(pending));
        assert!(Pin::new(&mut f).poll(&mut cx).is_pending());
        drop(f);
    }

    #[test]
    fn a_future_that_panics_in_poll_is_caught_and_dropped() {
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        let mut f = CatchUnwind::new(Box::pin(async {
            if true {
                panic!("polled");
            }
        }));
        assert!(matches!(
            Pin::new(&mut f).poll(&mut cx),
            Poll::Ready(Err(Panicked))
        ));
        assert!(f.0.is_none());
    }

    #[test]
    fn a_future_that_panics_in_poll_and_again_when_dropped_is_caught() {
        struct Twice(#[allow(dead_code)] Bomb);
        impl Future for Twice {
            type Output = ();
            fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<()> {
                panic!("polled");
            }
        }
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        let mut f = CatchUnwind::new(Box::pin(Twice(Bomb)));
        assert!(matches!(
            Pin::new(&mut f).poll(&mut cx),
            Poll::Ready(Err(Panicked))
        ));
        assert!(f.0.is_none());
    }
}
