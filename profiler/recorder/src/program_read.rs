//! A read the host's writer thread asks of a program thread because it
//! cannot make it itself: the allocator's statistics under jemalloc (the
//! writer thread has no jemalloc state of its own to read with) or under
//! glibc before the program has a second thread (then `malloc` takes no
//! lock, so the heap cannot be walked beside it). The program's next
//! thread through the countdown's slow path, 1 call in some hundreds,
//! runs the host's reader there: after its allocator call returned, when
//! the allocator is between calls on that thread, and outside the call's
//! timing.

use core::sync::atomic::{AtomicBool, AtomicPtr, Ordering::Relaxed};

/// Whether a read is asked and not yet made.
static ASKED: AtomicBool = AtomicBool::new(false);
/// The host's reader, a `fn()`; null until [`set_reader`].
static READER: AtomicPtr<()> = AtomicPtr::new(core::ptr::null_mut());

/// Sets the function a program thread runs when a read is asked. It runs
/// inside an allocator hook: it must not panic, and what it allocates goes
/// through the hooks.
pub fn set_reader(reader: fn()) {
    READER.store(reader as *mut (), Relaxed);
}

/// Asks the next program thread on the slow path to run the reader.
pub fn ask() {
    ASKED.store(true, Relaxed);
}

/// Runs the reader if a read is asked: one load when none is.
#[inline(always)]
pub(crate) fn run_if_asked() {
    if ASKED.load(Relaxed) {
        run();
    }
}

#[cold]
#[inline(never)]
fn run() {
    if !ASKED.swap(false, Relaxed) {
        return; // another thread took it
    }
    let reader = READER.load(Relaxed);
    if !reader.is_null() {
        // SAFETY: only `set_reader` stores a non-null value, from a `fn()`.
        let reader = unsafe { core::mem::transmute::<*mut (), fn()>(reader) };
        reader();
    }
}
