//! `_exit` and the `exec` family: an image that ends this way runs no exit
//! handler, so the exit profile is written first, then the process ends as
//! glibc's function would end it. (glibc's `execl*`, which call its
//! internal `execve`, are left to the periodic flush: Rust cannot define a
//! C variadic function.) The exported names are in `exports`.

use core::ffi::{CStr, c_char, c_int, c_void};
use core::sync::atomic::{AtomicPtr, Ordering::Relaxed};

use crate::lifecycle;

/// `_exit(2)` and `_Exit(3)`: writes the exit profile (processes that
/// leave this way, like dash and forked children, run no exit handlers),
/// then ends the process as glibc's `_exit` does.
pub fn exit_process(status: c_int) -> ! {
    lifecycle::before_exit();
    loop {
        // SAFETY: exit_group ends the process; it does not return.
        unsafe { libc::syscall(libc::SYS_exit_group, status) };
    }
}

/// `execve(2)`: writes the exit profile of the image being replaced (an
/// `exec` runs no exit handler), then makes the system call, as glibc's
/// `execve` does. If it fails, the profile becomes a running one again.
///
/// # Safety
/// As for `execve(2)`: NUL-terminated path, NULL-terminated arrays.
pub unsafe fn execve(
    path: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    note_vfork_child(path);
    let written = lifecycle::before_exec(name_of(path));
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
pub unsafe fn execv(path: *const c_char, argv: *const *const c_char) -> c_int {
    // SAFETY: `environ` is the process's environment; the rest is forwarded.
    unsafe { execve(path, argv, environ.cast_const()) }
}

/// `execvpe(3)`: the exit profile, then glibc's own (its `PATH` search and
/// shell fallback call glibc's internal `execve`, not this one).
///
/// # Safety
/// As for `execvpe(3)`.
pub unsafe fn execvpe(
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
    note_vfork_child(file);
    let written = lifecycle::before_exec(name_of(file));
    // SAFETY: glibc's execvpe, with the caller's arguments.
    let r = unsafe { core::mem::transmute::<*mut c_void, F>(next)(file, argv, envp) };
    failed_exec(written);
    r
}

/// `execvp(3)`: `execvpe` with the current environment.
///
/// # Safety
/// As for `execvp(3)`.
pub unsafe fn execvp(file: *const c_char, argv: *const *const c_char) -> c_int {
    // SAFETY: `environ` is the process's environment; the rest is forwarded.
    unsafe { execvpe(file, argv, environ.cast_const()) }
}

/// `fexecve(3)`: the exit profile, then glibc's own.
///
/// # Safety
/// As for `fexecve(3)`.
pub unsafe fn fexecve(fd: c_int, argv: *const *const c_char, envp: *const *const c_char) -> c_int {
    type F = unsafe extern "C" fn(c_int, *const *const c_char, *const *const c_char) -> c_int;
    static NEXT: AtomicPtr<c_void> = AtomicPtr::new(core::ptr::null_mut());
    let Some(next) = next_symbol(&NEXT, c"fexecve") else {
        return enosys();
    };
    // The program behind a descriptor has no name to give.
    let written = lifecycle::before_exec(b"");
    // SAFETY: glibc's fexecve, with the caller's arguments.
    let r = unsafe { core::mem::transmute::<*mut c_void, F>(next)(fd, argv, envp) };
    failed_exec(written);
    r
}

unsafe extern "C" {
    static environ: *mut *const c_char;
}

/// The program an `exec` call names, for the profile; none for a null
/// pointer, which the call itself then refuses (EFAULT).
fn name_of<'a>(path: *const c_char) -> &'a [u8] {
    if path.is_null() {
        return b"";
    }
    // SAFETY: a non-null `exec` argument is a NUL-terminated string the
    // caller keeps alive for the call.
    unsafe { CStr::from_ptr(path) }.to_bytes()
}

/// In a `vfork` child, notes the program it execs for the parent's
/// profile if the shim cannot reach it (`children`): the child shares the
/// parent's memory and writes no profile of its own.
fn note_vfork_child(program: *const c_char) {
    if !program.is_null() && crate::children::in_vfork_child() {
        // SAFETY: getpid has no preconditions.
        let pid = unsafe { libc::getpid() } as u32;
        // SAFETY: a non-null `exec` argument is a NUL-terminated string
        // the caller keeps alive for the call.
        crate::children::note_if_unreachable(pid, unsafe { CStr::from_ptr(program) });
    }
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
    lifecycle::after_failed_exec(written);
    // SAFETY: restores this thread's errno, a plain thread-local int.
    unsafe { *libc::__errno_location() = errno };
}

/// `posix_spawn(3)` and `posix_spawnp(3)` (`search_path`): glibc's, then
/// the child noted if the shim cannot reach its program (`children`):
/// glibc's child runs none of the shim's code before its `exec`.
///
/// # Safety
/// As for `posix_spawn(3)`.
pub unsafe fn posix_spawn(
    search_path: bool,
    pid: *mut libc::pid_t,
    path: *const c_char,
    file_actions: *const c_void,
    attrp: *const c_void,
    argv: *const *mut c_char,
    envp: *const *mut c_char,
) -> c_int {
    type F = unsafe extern "C" fn(
        *mut libc::pid_t,
        *const c_char,
        *const c_void,
        *const c_void,
        *const *mut c_char,
        *const *mut c_char,
    ) -> c_int;
    static NEXT_SPAWN: AtomicPtr<c_void> = AtomicPtr::new(core::ptr::null_mut());
    static NEXT_SPAWNP: AtomicPtr<c_void> = AtomicPtr::new(core::ptr::null_mut());
    let next = if search_path {
        next_symbol(&NEXT_SPAWNP, c"posix_spawnp")
    } else {
        next_symbol(&NEXT_SPAWN, c"posix_spawn")
    };
    let Some(next) = next else {
        return libc::ENOSYS;
    };
    // SAFETY: glibc's function of that name, with the caller's arguments.
    let r = unsafe {
        core::mem::transmute::<*mut c_void, F>(next)(pid, path, file_actions, attrp, argv, envp)
    };
    if r == 0 && !pid.is_null() && !path.is_null() && crate::choice::recorded() {
        // SAFETY: on success glibc stored the child's pid; `path` is the
        // caller's NUL-terminated string.
        let (child, program) = unsafe { (*pid as u32, CStr::from_ptr(path)) };
        // SAFETY: this thread's errno, kept across the look at the file.
        let errno = unsafe { *libc::__errno_location() };
        crate::children::note_if_unreachable(child, program);
        // SAFETY: as above.
        unsafe { *libc::__errno_location() = errno };
    }
    r
}
