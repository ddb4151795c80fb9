//! The exported C symbols: names only, as mimalloc's `alloc-override.c`.
//! The malloc family jumps through its slot (`hooks::SLOTS`), which holds
//! the chosen backend's hook; `_exit` and the `exec` functions go to
//! `exec`, which writes the exit profile first; `setuid` and the other
//! functions that change credentials go to glibc's through `credentials`,
//! which restarts the flusher thread around them.
//!
//! Under `cfg(test)` the symbols are not exported, so a unit-test binary
//! keeps glibc's malloc.

use core::ffi::{CStr, c_char, c_int, c_void};
use core::sync::atomic::AtomicPtr;

#[cfg(not(target_arch = "x86_64"))]
use crate::hooks::hook;
use crate::{credentials, exec};

/// One exported function per entry of the malloc family's table, each an
/// indirect tail jump through its slot. On x86-64 the export is that one
/// instruction, `jmp *slot(%rip)` (a naked function: the compiler reads an
/// atomic slot into a register first, one more instruction per call).
macro_rules! malloc_exports {
    ([] $($name:ident => $Func:ident ($($arg:ident : $ty:ty),*) $(-> $ret:ty)?;)*) => {$(
        #[doc = concat!("`", stringify!($name), "(3)`, served by the hook in force.")]
        ///
        /// # Safety
        /// As for the C function: pointers the program passes are NULL or
        /// live blocks of this allocator, out-pointers are writable.
        #[cfg(target_arch = "x86_64")]
        #[cfg_attr(not(test), unsafe(no_mangle))]
        #[unsafe(naked)]
        pub unsafe extern "C" fn $name($($arg: $ty),*) $(-> $ret)? {
            // The arguments are still in their registers and the return
            // address on the stack: the hook receives the program's call
            // as it was made. The slot is a pointer-sized atomic, so the
            // jump reads a whole hook (see `hooks::SLOTS`). The CFI
            // directives give the instruction an unwind entry (the return
            // address at the stack pointer, as at any function's entry):
            // a profiler or debugger that stops the program there can
            // still walk its stack.
            core::arch::naked_asm!(
                ".cfi_startproc",
                "jmp qword ptr [rip + {slots} + {offset}]",
                ".cfi_endproc",
                slots = sym crate::hooks::SLOTS,
                offset = const core::mem::offset_of!(crate::hooks::Slots, $name),
            )
        }

        #[doc = concat!("`", stringify!($name), "(3)`, served by the hook in force.")]
        ///
        /// # Safety
        /// As for the C function: pointers the program passes are NULL or
        /// live blocks of this allocator, out-pointers are writable.
        #[cfg(not(target_arch = "x86_64"))]
        #[cfg_attr(not(test), unsafe(no_mangle))]
        pub unsafe extern "C" fn $name($($arg: $ty),*) $(-> $ret)? {
            // SAFETY: the slot holds this function's hook (see `hooks`),
            // which has its C contract; the caller keeps it.
            unsafe { (hook!($name))($($arg),*) }
        }
    )*};
}

allocmux_format::for_each_malloc_function!(malloc_exports);

/// `_exit(2)`.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn _exit(status: c_int) -> ! {
    exec::exit_process(status)
}

/// `_Exit(3)`, the C name of `_exit`.
#[allow(non_snake_case)] // the C name
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn _Exit(status: c_int) -> ! {
    exec::exit_process(status)
}

/// `execve(2)`.
///
/// # Safety
/// As for `execve(2)`: NUL-terminated path, NULL-terminated arrays.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn execve(
    path: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    // SAFETY: the caller's arguments, with execve's contract.
    unsafe { exec::execve(path, argv, envp) }
}

/// `posix_spawn(3)`.
///
/// # Safety
/// As for `posix_spawn(3)`.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn posix_spawn(
    pid: *mut libc::pid_t,
    path: *const c_char,
    file_actions: *const c_void,
    attrp: *const c_void,
    argv: *const *mut c_char,
    envp: *const *mut c_char,
) -> c_int {
    // SAFETY: the caller's arguments, with posix_spawn's contract.
    unsafe { exec::posix_spawn(false, pid, path, file_actions, attrp, argv, envp) }
}

/// `posix_spawnp(3)`.
///
/// # Safety
/// As for `posix_spawnp(3)`.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn posix_spawnp(
    pid: *mut libc::pid_t,
    file: *const c_char,
    file_actions: *const c_void,
    attrp: *const c_void,
    argv: *const *mut c_char,
    envp: *const *mut c_char,
) -> c_int {
    // SAFETY: the caller's arguments, with posix_spawnp's contract.
    unsafe { exec::posix_spawn(true, pid, file, file_actions, attrp, argv, envp) }
}

/// `execv(3)`.
///
/// # Safety
/// As for `execv(3)`.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn execv(path: *const c_char, argv: *const *const c_char) -> c_int {
    // SAFETY: the caller's arguments, with execv's contract.
    unsafe { exec::execv(path, argv) }
}

/// `execvpe(3)`.
///
/// # Safety
/// As for `execvpe(3)`.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn execvpe(
    file: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    // SAFETY: the caller's arguments, with execvpe's contract.
    unsafe { exec::execvpe(file, argv, envp) }
}

/// `execvp(3)`.
///
/// # Safety
/// As for `execvp(3)`.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn execvp(file: *const c_char, argv: *const *const c_char) -> c_int {
    // SAFETY: the caller's arguments, with execvp's contract.
    unsafe { exec::execvp(file, argv) }
}

/// `fexecve(3)`.
///
/// # Safety
/// As for `fexecve(3)`.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn fexecve(
    fd: c_int,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    // SAFETY: the caller's arguments, with fexecve's contract.
    unsafe { exec::fexecve(fd, argv, envp) }
}

/// One export per function that changes credentials (see `credentials`).
macro_rules! credential_functions {
    ($($name:ident($($arg:ident: $ty:ty),*);)*) => {$(
        #[doc = concat!("`", stringify!($name), "`, glibc's, with the flusher paused around it.")]
        ///
        /// # Safety
        /// As for the C function.
        #[cfg_attr(not(test), unsafe(no_mangle))]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> c_int {
            static REAL: AtomicPtr<c_void> = AtomicPtr::new(core::ptr::null_mut());
            const NAME: &CStr =
                match CStr::from_bytes_with_nul(concat!(stringify!($name), "\0").as_bytes()) {
                    Ok(name) => name,
                    Err(_) => panic!("a C name"),
                };
            let f = credentials::next(&REAL, NAME);
            if f.is_null() {
                // SAFETY: this thread's errno.
                unsafe { *libc::__errno_location() = libc::ENOSYS };
                return -1;
            }
            // SAFETY: glibc's function of this name has this signature.
            let f = unsafe {
                core::mem::transmute::<*mut c_void, unsafe extern "C" fn($($ty),*) -> c_int>(f)
            };
            // SAFETY: the caller's arguments, as for the C function.
            credentials::with_flusher_paused(|| unsafe { f($($arg),*) })
        }
    )*};
}

credential_functions! {
    setuid(uid: libc::uid_t);
    seteuid(uid: libc::uid_t);
    setreuid(ruid: libc::uid_t, euid: libc::uid_t);
    setresuid(ruid: libc::uid_t, euid: libc::uid_t, suid: libc::uid_t);
    setgid(gid: libc::gid_t);
    setegid(gid: libc::gid_t);
    setregid(rgid: libc::gid_t, egid: libc::gid_t);
    setresgid(rgid: libc::gid_t, egid: libc::gid_t, sgid: libc::gid_t);
    setgroups(size: libc::size_t, list: *const libc::gid_t);
}
