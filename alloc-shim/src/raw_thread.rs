//! A thread glibc does not know of, for the flusher: made with `clone`
//! directly, with a thread pointer of its own, so that a program that
//! starts no thread stays single-threaded in glibc's eyes.
//!
//! That matters for `fork`. glibc's `fork` takes `atfork_lock` and its
//! arena and stdio locks only once the process has had a second thread
//! (`__libc_single_threaded` false), so in a single-threaded program a
//! signal handler may `fork` even when it interrupted `malloc` or the
//! program's own `fork`. A `pthread_create`d flusher clears that flag for
//! good, and such a handler then waits forever for the lock its own
//! interrupted frame holds.
//!
//! Because glibc believes the thread does not exist, what it runs is held
//! to what needs no glibc state shared with the program's thread:
//! - **No allocator.** glibc's `malloc` takes no lock in a
//!   single-threaded process, and jemalloc and mimalloc keep per-thread
//!   state in TLS this thread has zeroed, so the thread's own Rust
//!   allocations come from the shim heap's page blocks (see `heap`), never
//!   from an allocator; and it reads glibc's statistics only once the
//!   program has started a thread of its own (and glibc locks its arenas
//!   again), jemalloc's never (see `flusher`).
//! - **System calls through their glibc wrappers, nothing more**: open,
//!   write, rename, fstat, clock_nanosleep and the like, which keep no state
//!   beyond `errno`. No stdio, no `dlsym`, no locale.
//! - **Its own thread pointer.** `pthread_self()` (what the recorder's
//!   locks know their holder by) is its own, and so are its initial-exec
//!   thread-local variables: glibc's `errno` and the shim's per-thread
//!   state live in a zeroed block under its thread control block, the size
//!   of the process's static TLS. It has no dynamic thread vector: a
//!   `__tls_get_addr` (Rust's `thread_local!` in a shared library, which
//!   the shim avoids on x86_64) would fault rather than reach the program
//!   thread's variables.
//! - **No signals.** It starts with every signal blocked, so each signal
//!   meant for the program reaches one of the program's threads.
//! - **The program's credentials.** glibc's `setuid` and the like change
//!   every thread glibc knows, so the shim ends this thread around them
//!   and starts it again after (`credentials`), with the new credentials;
//!   its end is awaited through the thread id word the kernel clears, as
//!   `pthread_join` does.
//!
//! x86-64 only (the thread control block's layout is glibc's for that
//! architecture); elsewhere the flusher is a `pthread`.

use core::ffi::{c_int, c_void};
use core::sync::atomic::{AtomicI32, AtomicU32, AtomicUsize, Ordering::Acquire, Ordering::Relaxed};

const PAGE: usize = 4096;
/// The thread's stack (the flusher's deepest path, a profile write, needs
/// some kilobytes).
const STACK_BYTES: usize = 64 * 1024;
/// Room for glibc's thread control block (`struct pthread`, about 2.3 KiB
/// in glibc 2.36), zeroed but for its header.
const TCB_BYTES: usize = 16 * 1024;
/// Static TLS size assumed when glibc does not say (`_dl_get_tls_static_info`
/// missing): zero pages cost nothing until touched.
const FALLBACK_TLS_BYTES: usize = 1 << 20;
/// Slack on top of the size glibc gives, for its alignment.
const TLS_SLACK: usize = 64 * 1024;

/// The size of the zeroed block under the thread pointer, found by
/// [`prepare`]; 0 until then.
static TLS_BYTES: AtomicUsize = AtomicUsize::new(0);
/// The mapping of the thread started last in this process image: base and
/// length (a `fork` child unmaps its parent's).
static REGION_BASE: AtomicUsize = AtomicUsize::new(0);
static REGION_LEN: AtomicUsize = AtomicUsize::new(0);
/// The thread pointer of the thread started last (0: none), which is also
/// its `pthread_self()`.
static THREAD_POINTER: AtomicUsize = AtomicUsize::new(0);

/// The thread's id while it runs: the kernel writes it at the `clone`
/// and clears it (waking waiters) when the thread ends, as for a
/// `pthread`'s join.
static TID: AtomicI32 = AtomicI32::new(0);
/// The process that started the thread (a `vfork` child shares this
/// memory but not the thread).
static SPAWNER_PID: AtomicU32 = AtomicU32::new(0);

/// Finds the size of the process's static TLS, at start-up (`dlsym` may
/// allocate and takes the loader's lock, so never in a `fork` child).
pub fn prepare() {
    type StaticInfo = unsafe extern "C" fn(*mut usize, *mut usize);
    // SAFETY: a lookup by a NUL-terminated name in the global scope.
    let f = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"_dl_get_tls_static_info".as_ptr()) };
    let size = if f.is_null() {
        FALLBACK_TLS_BYTES
    } else {
        let (mut size, mut align) = (0usize, 0usize);
        // SAFETY: ld.so's `void _dl_get_tls_static_info(size_t *, size_t *)`,
        // with two valid out-pointers.
        unsafe { core::mem::transmute::<*mut c_void, StaticInfo>(f)(&mut size, &mut align) };
        size
    };
    TLS_BYTES.store(round_up(size + TLS_SLACK), Relaxed);
}

/// Whether the calling thread is the one [`spawn`] started last.
#[inline]
pub fn is_current() -> bool {
    let tp = THREAD_POINTER.load(Relaxed);
    // SAFETY: pthread_self has no preconditions (it reads the thread
    // pointer's `self` word, which `spawn` sets for its thread).
    tp != 0 && tp == unsafe { libc::pthread_self() } as usize
}

/// Whether the thread [`spawn`] started last runs in this process (not
/// in a `vfork` child, nor once it has ended).
pub fn runs_here() -> bool {
    // SAFETY: getpid has no preconditions.
    TID.load(Acquire) != 0 && SPAWNER_PID.load(Relaxed) == unsafe { libc::getpid() } as u32
}

/// Waits up to `timeout_ms` for the thread [`spawn`] started last to end;
/// whether it has.
pub fn wait_for_end(timeout_ms: u64) -> bool {
    let deadline = allocmux_recorder::monotonic_ns() + timeout_ms * 1_000_000;
    loop {
        let tid = TID.load(Acquire);
        if tid == 0 {
            return true;
        }
        if allocmux_recorder::monotonic_ns() >= deadline {
            return false;
        }
        // The kernel's wake at the thread's end is a shared one.
        wait_on(TID.as_ptr().cast(), tid as u32, deadline, true);
    }
}

/// Waits while the word at `word` holds `expected`, until `CLOCK_MONOTONIC`
/// reaches `deadline_ns` or a wake on the word (`shared`: a wake from
/// another process or the kernel's, else this process's own).
pub fn wait_on(word: *const u32, expected: u32, deadline_ns: u64, shared: bool) {
    let ts = libc::timespec {
        tv_sec: (deadline_ns / 1_000_000_000) as i64,
        tv_nsec: (deadline_ns % 1_000_000_000) as i64,
    };
    let private = if shared { 0 } else { libc::FUTEX_PRIVATE_FLAG };
    // SAFETY: a futex wait on a live word, until an absolute time on
    // CLOCK_MONOTONIC (FUTEX_WAIT_BITSET's clock); it only reads the word.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word,
            libc::FUTEX_WAIT_BITSET | private,
            expected,
            &ts as *const libc::timespec,
            core::ptr::null::<u32>(),
            libc::FUTEX_BITSET_MATCH_ANY,
        )
    };
}

/// Starts `main(arg)` on a new thread of this process that glibc does not
/// know of (see the module docs), or returns false if it cannot (no
/// memory, `clone` refused, [`prepare`] not run): the caller then starts a
/// `pthread`. The mapping of the thread started before is given back
/// first when `previous_gone`: in a `fork` child, where that thread was
/// not copied, or once it has ended ([`wait_for_end`]).
pub fn spawn(main: extern "C" fn(*mut c_void) -> c_int, previous_gone: bool) -> bool {
    if !cfg!(target_arch = "x86_64") {
        return false;
    }
    if previous_gone {
        TID.store(0, Relaxed);
        let (base, len) = (REGION_BASE.swap(0, Relaxed), REGION_LEN.swap(0, Relaxed));
        if base != 0 {
            // SAFETY: the previous thread's mapping, which nothing in this
            // process uses any more (the caller's word for it).
            unsafe { libc::munmap(base as *mut c_void, len) };
        }
    }
    let tls_bytes = TLS_BYTES.load(Relaxed);
    if tls_bytes == 0 {
        return false;
    }
    // Guard page, stack, static TLS, thread control block, low to high.
    let len = PAGE + STACK_BYTES + tls_bytes + TCB_BYTES;
    // SAFETY: a fresh anonymous mapping.
    let base = unsafe {
        libc::mmap(
            core::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
            -1,
            0,
        )
    };
    if base == libc::MAP_FAILED {
        return false;
    }
    let base = base as usize;
    // SAFETY: the first page of the mapping just made; a failure only
    // leaves the guard out.
    unsafe { libc::mprotect(base as *mut c_void, PAGE, libc::PROT_NONE) };
    let stack_top = base + PAGE + STACK_BYTES;
    let tp = stack_top + tls_bytes;
    // SAFETY: `tp` starts `TCB_BYTES` of the zeroed mapping, and the
    // calling thread's thread pointer its own control block.
    unsafe { init_control_block(tp) };
    REGION_BASE.store(base, Relaxed);
    REGION_LEN.store(len, Relaxed);
    THREAD_POINTER.store(tp, Relaxed);
    // SAFETY: getpid has no preconditions.
    SPAWNER_PID.store(unsafe { libc::getpid() } as u32, Relaxed);
    let flags = libc::CLONE_VM
        | libc::CLONE_FS
        | libc::CLONE_FILES
        | libc::CLONE_SIGHAND
        | libc::CLONE_THREAD
        | libc::CLONE_SYSVSEM
        | libc::CLONE_SETTLS
        | libc::CLONE_PARENT_SETTID
        | libc::CLONE_CHILD_CLEARTID;
    // SAFETY: the stack and thread pointer are in the mapping made above,
    // which stays for the thread's life; all signals are blocked around the
    // `clone` so the thread inherits a full mask.
    let tid = unsafe {
        let mut all: libc::sigset_t = core::mem::zeroed();
        let mut old: libc::sigset_t = core::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
        let tid = libc::clone(
            main,
            stack_top as *mut c_void,
            flags,
            core::ptr::null_mut(),
            TID.as_ptr(),
            tp as *mut c_void,
            TID.as_ptr(),
        );
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, core::ptr::null_mut());
        tid
    };
    if tid > 0 {
        return true;
    }
    TID.store(0, Relaxed);
    THREAD_POINTER.store(0, Relaxed);
    REGION_BASE.store(0, Relaxed);
    // SAFETY: the mapping made above, which no thread uses.
    unsafe { libc::munmap(base as *mut c_void, len) };
    false
}

/// Writes the header glibc's x86-64 code reads through the thread pointer
/// (`tcbhead_t`): itself at 0 and 16 (`tcb`, `self`), no dynamic thread
/// vector at 8, single-threaded at 24, and the calling thread's stack and
/// pointer guards (40, 48) and the rest of its header copied, so code
/// built with stack protection and glibc's pointer mangling run as on any
/// thread.
///
/// # Safety
/// `tp` must start [`TCB_BYTES`] of zeroed, writable memory, 64-aligned.
#[cfg(target_arch = "x86_64")]
unsafe fn init_control_block(tp: usize) {
    /// The header's length copied from the calling thread.
    const HEADER_WORDS: usize = 16;
    let own: *const usize;
    // SAFETY: on x86-64 glibc keeps the control block's own address at
    // %fs:0.
    unsafe {
        core::arch::asm!("mov {}, qword ptr fs:[0]", out(reg) own, options(nostack, readonly));
    }
    let new = tp as *mut usize;
    // SAFETY: both headers are at least HEADER_WORDS words (glibc's is 704
    // bytes); `new` is the caller's zeroed block.
    unsafe {
        core::ptr::copy_nonoverlapping(own, new, HEADER_WORDS);
        new.write(tp); // tcb
        new.add(1).write(0); // dtv
        new.add(2).write(tp); // self
        new.add(3).write(0); // multiple_threads, gscope_flag
    }
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn init_control_block(_: usize) {}

fn round_up(n: usize) -> usize {
    n.div_ceil(PAGE) * PAGE
}
