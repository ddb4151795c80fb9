//! A watcher of one thread's calls through [`Counting`](super::Counting):
//! what the allocation budgets use to find, on a failing budget only, the
//! call stacks of the allocations a closure made on the thread that ran it.
//!
//! The stack recorder ([`stacks`](super::stacks)) is process-wide (one
//! table, one mode, every thread's calls), which is what a profile needs;
//! a budget that failed in one test thread needs that thread's calls alone,
//! while the other tests keep running unwatched. So a thread opts in with
//! [`watching`], and the wrapper, seeing [`is_on`], hands each call of a
//! watching thread, after it was counted, to the thread's watcher function.
//!
//! The cost for every other call is one relaxed load of `WATCHING`
//! (besides the stack recorder's own), on the same line as the rest of
//! the wrapper's statics.

use core::cell::Cell;
use core::sync::atomic::{AtomicUsize, Ordering::Relaxed};

/// One call seen by a watcher, after the allocator returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub struct Event {
    /// The block handed out (by `alloc`, `alloc_zeroed`, `realloc`), or 0.
    pub new: usize,
    /// Its size as requested.
    pub size: usize,
    /// The block given back (by `dealloc`, or a `realloc` that succeeded),
    /// or 0.
    pub old: usize,
}

/// Threads watching now: while 0, the wrapper never looks further.
static WATCHING: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// This thread's watcher, if it is watching (const-initialised and
    /// without `Drop`, as the wrapper's thread state, so reading it from
    /// inside the allocator neither allocates nor registers a destructor).
    static WATCHER: Cell<Option<fn(Event)>> = const { Cell::new(None) };
    /// Inside the watcher: its own allocations are not watched.
    static BUSY: Cell<bool> = const { Cell::new(false) };
}

/// Whether any thread is watching: one relaxed load, for the wrapper's
/// decision to leave its fast path.
#[inline(always)]
pub fn is_on() -> bool {
    WATCHING.load(Relaxed) != 0
}

/// Runs `f` with `watcher` called, on this thread, for every allocation,
/// reallocation and free that goes through [`Counting`](super::Counting)
/// (not for those the watcher itself makes). Calls nest: the inner
/// watcher is the one called until `f` returns.
///
/// `watcher` runs inside the global allocator: it must not panic (that
/// aborts the process), and whatever it allocates is counted on the
/// thread as usual but not watched.
pub fn watching<R>(watcher: fn(Event), f: impl FnOnce() -> R) -> R {
    struct Restore(Option<fn(Event)>);
    impl Drop for Restore {
        fn drop(&mut self) {
            WATCHER.with(|w| w.set(self.0));
            WATCHING.fetch_sub(1, Relaxed);
        }
    }
    WATCHING.fetch_add(1, Relaxed);
    let _restore = Restore(WATCHER.with(|w| w.replace(Some(watcher))));
    f()
}

/// Tells this thread's watcher, if any, about a call that just returned.
/// `extern "C"`: a watcher that panics aborts here rather than unwinding
/// out of the global allocator.
#[cold]
#[inline(never)]
pub(crate) extern "C" fn tell(event: Event) {
    let Some(watcher) = WATCHER.with(|w| w.get()) else {
        return;
    };
    if BUSY.with(|b| b.replace(true)) {
        return;
    }
    watcher(event);
    BUSY.with(|b| b.set(false));
}
