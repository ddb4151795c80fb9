//! The functions that change the process's credentials and that glibc
//! applies to every thread it knows (`setuid`, `setgid`, `setgroups` and
//! the rest): under the system backend the flusher runs on a thread glibc
//! does not know of (`raw_thread`), which they would leave with the old
//! credentials, for example a root thread in a daemon that gave up root.
//! So the flusher is ended before the call and started again after it,
//! when it takes the credentials the call left (a new thread takes its
//! creator's). glibc's own function does the work, found with `dlsym`.
//! The exported names are in `exports`.
//! (Its internal calls, such as `initgroups`' `setgroups`, pass by these,
//! but daemons follow them with `setgid` and `setuid`, which do not.)

use core::ffi::{CStr, c_int, c_void};
use core::sync::atomic::{AtomicPtr, Ordering::Relaxed};

use allocmux_recorder::SpinLock;

use crate::flusher;

/// The next definition of `name` (glibc's), looked up once.
pub fn next(slot: &AtomicPtr<c_void>, name: &CStr) -> *mut c_void {
    let mut f = slot.load(Relaxed);
    if f.is_null() {
        // SAFETY: a lookup by a NUL-terminated name after this library.
        f = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) };
        slot.store(f, Relaxed);
    }
    f
}

/// Held by a change under way, so that two threads' changes do not
/// interleave with the flusher's restart (which would leave it with the
/// first one's credentials).
static CHANGING: SpinLock<()> = SpinLock::new(());

/// Runs `change` with the flusher paused around it (see the module docs),
/// keeping the `errno` it leaves.
pub fn with_flusher_paused(change: impl FnOnce() -> c_int) -> c_int {
    // A signal handler's change that interrupted one on its own thread
    // goes ahead without the pause.
    let Some(_changing) = CHANGING.lock_unless_held_here() else {
        return change();
    };
    let paused = flusher::pause_for_credentials();
    let r = change();
    if paused {
        let e = crate::fd::errno();
        flusher::resume_after_credentials();
        // SAFETY: this thread's errno.
        unsafe { *libc::__errno_location() = e };
    }
    r
}
