//! A fetch shared behind an `Arc` costs nothing a fetch: the `Arc` hands on the future of the
//! fetch it shares as it is, with no second boxed future around it. (Every target the runner
//! fetches goes through its `Arc<dyn Fetch>`.) Counted with an allocator that counts this
//! thread's allocations; a test binary of its own, so that no other test shares it.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use rota::{Caller, CancellationToken, Fetch, FetchError, Options, Target, TargetResult};

struct Counting;

thread_local! {
    static ALLOCS: Cell<usize> = const { Cell::new(0) };
}

// SAFETY: every call is handed to the system allocator as it is; the count is a thread-local
// `Cell` of a const initializer, which allocates nothing.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCS.try_with(|n| n.set(n.get() + 1));
        // SAFETY: the caller's contract for `alloc` is passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract for `dealloc` is passed on.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

fn allocs() -> usize {
    ALLOCS.with(Cell::get)
}

fn args() -> (Arc<Caller>, Target, CancellationToken) {
    let caller = Arc::new(Caller {
        name: "alice".into(),
        workspace: "w".into(),
        key_sha256: String::new(),
    });
    let target = Target {
        url: "https://example.com/a".into(),
        options: Options::default(),
    };
    (caller, target, CancellationToken::new())
}

/// What [`Fetch::fetch`] returns.
type FetchFuture<'a> = Pin<Box<dyn Future<Output = Result<TargetResult, FetchError>> + Send + 'a>>;

/// The allocations made while `make` builds a fetch's future and it is polled to its end (the
/// arguments are made before, the result dropped after), and that result.
fn count<'a>(
    make: impl FnOnce(Arc<Caller>, Target, CancellationToken) -> FetchFuture<'a>,
) -> (usize, Result<TargetResult, FetchError>) {
    let (caller, target, cancel) = args();
    let before = allocs();
    let mut fut = make(caller, target, cancel);
    // The fetches here are ready at their first poll.
    let out = match fut.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(out) => out,
        Poll::Pending => panic!("the fetch was not ready at once"),
    };
    drop(fut);
    (allocs() - before, out)
}

#[test]
fn an_arc_around_a_fetch_adds_no_allocation_to_a_fetch() {
    let fetch = |_: Arc<Caller>, target: Target, _: CancellationToken| async move {
        Ok::<_, FetchError>(TargetResult {
            content: target.url,
            meta: Default::default(),
        })
    };
    let shared: Arc<dyn Fetch> = Arc::new(fetch);
    let twice: Arc<Arc<dyn Fetch>> = Arc::new(shared.clone());

    let (direct, r0) = count(|c, t, k| (*shared).fetch(c, t, k));
    let (once, r1) = count(|c, t, k| shared.fetch(c, t, k));
    let (two, r2) = count(|c, t, k| twice.fetch(c, t, k));
    // At least the closure's `async_trait` future, a box.
    assert!(direct >= 1, "the shared fetch's own future");
    assert_eq!(once, direct, "through one Arc");
    assert_eq!(two, direct, "through two");
    for r in [r0, r1, r2] {
        assert!(
            matches!(&r, Ok(t) if t.content == "https://example.com/a"),
            "{r:?}"
        );
    }
}
