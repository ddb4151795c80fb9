//! Whether the program is single-threaded, as glibc sees it.
//!
//! glibc's `fork` takes its allocator's and stdio's locks only once the
//! process has had a second thread (`__libc_single_threaded` false); before
//! that it takes none, which is what makes `fork` from a signal handler
//! that interrupted `malloc` work in a single-threaded program. The shim
//! runs jemalloc's fork handlers by the same rule.

use core::sync::atomic::{AtomicPtr, Ordering::Relaxed};

/// glibc's `__libc_single_threaded` (since 2.32), found at start-up; null
/// before that, or with an older glibc.
static FLAG: AtomicPtr<libc::c_char> = AtomicPtr::new(core::ptr::null_mut());

/// Looks the flag up (at start-up: `dlsym` may allocate).
pub fn init() {
    // SAFETY: a lookup by a NUL-terminated name in the global scope.
    let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"__libc_single_threaded".as_ptr()) };
    FLAG.store(p.cast(), Relaxed);
}

/// Whether the process has never had a second thread (false if unknown).
pub fn single_threaded() -> bool {
    let p = FLAG.load(Relaxed);
    // SAFETY: glibc's flag, a `char` it keeps for the process's life.
    !p.is_null() && unsafe { p.read_volatile() } != 0
}
