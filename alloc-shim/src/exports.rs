//! The exported C symbols: names only. Each jumps through the hook table
//! (`hooks`), which holds the chosen backend's functions; `_exit` and the
//! `exec` functions write the exit profile first, since they skip the exit
//! handlers (glibc's `execl*`, which call its internal `execve`, are left
//! to the periodic flush: Rust cannot define a C variadic function).
//!
//! Under `cfg(test)` the symbols are not exported, so a unit-test binary
//! keeps glibc's malloc.

use core::ffi::{CStr, c_char, c_int, c_void};
use core::sync::atomic::{AtomicPtr, Ordering::Relaxed};

use crate::hooks::table;

/// `malloc(3)`.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn malloc(size: usize) -> *mut c_void {
    // SAFETY: the hook has malloc's contract.
    unsafe { (table().malloc)(size) }
}

/// `free(3)`.
///
/// # Safety
/// `ptr` is NULL or a live block from this allocator.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn free(ptr: *mut c_void) {
    // SAFETY: forwarded contract.
    unsafe { (table().free)(ptr) }
}

/// `calloc(3)`.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn calloc(count: usize, size: usize) -> *mut c_void {
    // SAFETY: the hook has calloc's contract.
    unsafe { (table().calloc)(count, size) }
}

/// `realloc(3)`.
///
/// # Safety
/// `ptr` is NULL or a live block from this allocator.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn realloc(ptr: *mut c_void, size: usize) -> *mut c_void {
    // SAFETY: forwarded contract.
    unsafe { (table().realloc)(ptr, size) }
}

/// `aligned_alloc(3)`.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn aligned_alloc(alignment: usize, size: usize) -> *mut c_void {
    // SAFETY: the hook has aligned_alloc's contract.
    unsafe { (table().aligned_alloc)(alignment, size) }
}

/// `malloc_usable_size(3)`.
///
/// # Safety
/// `ptr` is NULL or a live block from this allocator.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn malloc_usable_size(ptr: *mut c_void) -> usize {
    // SAFETY: forwarded contract.
    unsafe { (table().malloc_usable_size)(ptr) }
}

/// `memalign(3)`.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn memalign(alignment: usize, size: usize) -> *mut c_void {
    // SAFETY: the hook has memalign's contract.
    unsafe { (table().memalign)(alignment, size) }
}

/// `posix_memalign(3)`.
///
/// # Safety
/// `out` is valid for a pointer write.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn posix_memalign(
    out: *mut *mut c_void,
    alignment: usize,
    size: usize,
) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { (table().posix_memalign)(out, alignment, size) }
}

/// `pvalloc(3)`.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn pvalloc(size: usize) -> *mut c_void {
    // SAFETY: the hook has pvalloc's contract.
    unsafe { (table().pvalloc)(size) }
}

/// `valloc(3)`.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn valloc(size: usize) -> *mut c_void {
    // SAFETY: the hook has valloc's contract.
    unsafe { (table().valloc)(size) }
}

/// `_exit(2)`: writes the exit profile (processes that leave this way, like
/// dash and forked children, run no exit handlers), then ends the process
/// as glibc's `_exit` does.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn _exit(status: c_int) -> ! {
    crate::runtime::before_exit();
    loop {
        // SAFETY: exit_group ends the process; it does not return.
        unsafe { libc::syscall(libc::SYS_exit_group, status) };
    }
}

/// `_Exit(3)`, the C name of `_exit`.
#[allow(non_snake_case)] // the C name
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn _Exit(status: c_int) -> ! {
    _exit(status)
}

/// `execve(2)`: writes the exit profile of the image being replaced (an
/// `exec` runs no exit handler), then makes the system call, as glibc's
/// `execve` does. If it fails, the profile becomes a running one again.
///
/// # Safety
/// As for `execve(2)`: NUL-terminated path, NULL-terminated arrays.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn execve(
    path: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    let written = crate::runtime::before_exec();
    // SAFETY: the caller's arguments, as for execve(2); the raw system call
    // is all glibc's execve is.
    let r = unsafe { libc::syscall(libc::SYS_execve, path, argv, envp) } as c_int;
    failed_exec(written);
    r
}

/// `execv(3)`: `execve` with the current environment.
///
/// # Safety
/// As for `execv(3)`.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn execv(path: *const c_char, argv: *const *const c_char) -> c_int {
    // SAFETY: `environ` is the process's environment; the rest is forwarded.
    unsafe { execve(path, argv, environ.cast_const()) }
}

/// `execvpe(3)`: the exit profile, then glibc's own (its `PATH` search and
/// shell fallback call glibc's internal `execve`, not this one).
///
/// # Safety
/// As for `execvpe(3)`.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn execvpe(
    file: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    type F =
        unsafe extern "C" fn(*const c_char, *const *const c_char, *const *const c_char) -> c_int;
    static NEXT: AtomicPtr<c_void> = AtomicPtr::new(core::ptr::null_mut());
    let Some(next) = next_symbol(&NEXT, c"execvpe") else {
        return enosys();
    };
    let written = crate::runtime::before_exec();
    // SAFETY: glibc's execvpe, with the caller's arguments.
    let r = unsafe { core::mem::transmute::<*mut c_void, F>(next)(file, argv, envp) };
    failed_exec(written);
    r
}

/// `execvp(3)`: `execvpe` with the current environment.
///
/// # Safety
/// As for `execvp(3)`.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn execvp(file: *const c_char, argv: *const *const c_char) -> c_int {
    // SAFETY: `environ` is the process's environment; the rest is forwarded.
    unsafe { execvpe(file, argv, environ.cast_const()) }
}

/// `fexecve(3)`: the exit profile, then glibc's own.
///
/// # Safety
/// As for `fexecve(3)`.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn fexecve(
    fd: c_int,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    type F = unsafe extern "C" fn(c_int, *const *const c_char, *const *const c_char) -> c_int;
    static NEXT: AtomicPtr<c_void> = AtomicPtr::new(core::ptr::null_mut());
    let Some(next) = next_symbol(&NEXT, c"fexecve") else {
        return enosys();
    };
    let written = crate::runtime::before_exec();
    // SAFETY: glibc's fexecve, with the caller's arguments.
    let r = unsafe { core::mem::transmute::<*mut c_void, F>(next)(fd, argv, envp) };
    failed_exec(written);
    r
}

unsafe extern "C" {
    static environ: *mut *const c_char;
}

/// The definition of `name` after this library's (glibc's), looked up once.
fn next_symbol(cache: &AtomicPtr<c_void>, name: &CStr) -> Option<*mut c_void> {
    let mut p = cache.load(Relaxed);
    if p.is_null() {
        // SAFETY: a NUL-terminated name; RTLD_NEXT from this library.
        p = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) };
        cache.store(p, Relaxed);
    }
    (!p.is_null()).then_some(p)
}

fn enosys() -> c_int {
    // SAFETY: this thread's errno.
    unsafe { *libc::__errno_location() = libc::ENOSYS };
    -1
}

/// After an `exec` that returned (failed): the profile goes on, with the
/// call's errno kept for the caller.
fn failed_exec(written: bool) {
    // SAFETY: this thread's errno.
    let errno = unsafe { *libc::__errno_location() };
    crate::runtime::after_failed_exec(written);
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
}
