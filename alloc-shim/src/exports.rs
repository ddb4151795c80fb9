//! The exported C symbols: names only, as mimalloc's `alloc-override.c`.
//! The malloc family jumps through the hook table (`hooks`) of the chosen
//! backend; `_exit` and the `exec` functions go to `exec`, which writes the
//! exit profile first.
//!
//! Under `cfg(test)` the symbols are not exported, so a unit-test binary
//! keeps glibc's malloc.

use core::ffi::{c_char, c_int};

use crate::exec;
use crate::hooks::table;

/// One exported function per entry of the malloc family's table, each one
/// load of the hook table and an indirect tail jump.
macro_rules! malloc_exports {
    ([] $($name:ident => $Func:ident ($($arg:ident : $ty:ty),*) $(-> $ret:ty)?;)*) => {$(
        #[doc = concat!("`", stringify!($name), "(3)`, served by the hook in force.")]
        ///
        /// # Safety
        /// As for the C function: pointers the program passes are NULL or
        /// live blocks of this allocator, out-pointers are writable.
        #[cfg_attr(not(test), unsafe(no_mangle))]
        pub unsafe extern "C" fn $name($($arg: $ty),*) $(-> $ret)? {
            // SAFETY: the hook has this function's C contract, which the
            // caller keeps.
            unsafe { (table().$name)($($arg),*) }
        }
    )*};
}

allocmux::for_each_malloc_function!(malloc_exports);

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
