//! The shim's per-thread state, in initial-exec TLS.
//!
//! A replacement malloc must use the initial-exec TLS model (glibc manual,
//! "Replacing malloc"): the general-dynamic model Rust uses for `thread_local!`
//! in a cdylib calls `__tls_get_addr` on every access, which may allocate on
//! first use in a thread and measured 1.5x slower on a churn. Stable Rust has
//! no `-Z tls-model`, so on x86-64 the TLS block is declared in `global_asm!`
//! and addressed through a `@GOTTPOFF` load plus `%fs`, exactly what a C
//! compiler emits for `__thread` with `tls_model("initial-exec")`. Elsewhere
//! a const-initialised `thread_local!` without destructor is the fallback.

use core::cell::Cell;

use crate::backend::mimalloc_fork::Held;
use allocmux_recorder::ThreadState;
#[cfg(target_arch = "x86_64")]
use allocmux_recorder::stacks::FsStacks;
use allocmux_recorder::stacks::StackThread;

/// What the shim keeps per thread. All-zero is valid (it lives in `.tbss`).
#[repr(C, align(64))]
pub struct ShimThread {
    /// The recorder's counters and sampling state.
    pub state: ThreadState,
    /// Stack sampling state (unused with stacks off).
    pub stacks: StackThread,
    /// This thread's `errno`, cached: `free` saves and restores it, and
    /// `__errno_location()` is a call into libc.
    errno: Cell<*mut libc::c_int>,
    /// What this thread's `fork` did with mimalloc's locks, from the
    /// prepare handler to the parent or child one.
    pub mimalloc_fork: Cell<[Held; 2]>,
}

impl ShimThread {
    #[allow(dead_code)] // used by the non-x86-64 fallback only
    const fn new() -> Self {
        ShimThread {
            state: ThreadState::new(),
            stacks: StackThread::new(),
            errno: Cell::new(core::ptr::null_mut()),
            mimalloc_fork: Cell::new([Held::ByThisThread; 2]),
        }
    }

    /// Runs `f` with this thread's calls unrecorded (no counts, no
    /// stacks): for allocmux's own allocations on a program thread.
    pub fn unrecorded<R>(&self, f: impl FnOnce() -> R) -> R {
        let state = self.state.pause();
        let stacks = self.stacks.pause();
        let r = f();
        self.stacks.resume(stacks);
        self.state.resume(state);
        r
    }

    /// The address of this thread's `errno`.
    #[inline(always)]
    pub fn errno(&self) -> *mut libc::c_int {
        let p = self.errno.get();
        if !p.is_null() {
            return p;
        }
        // SAFETY: __errno_location has no preconditions and never allocates.
        let p = unsafe { libc::__errno_location() };
        self.errno.set(p);
        p
    }
}

#[cfg(target_arch = "x86_64")]
core::arch::global_asm!(
    ".pushsection .tbss,\"awT\",@nobits",
    ".globl allocmux_shim_thread",
    ".hidden allocmux_shim_thread",
    ".type allocmux_shim_thread, @object",
    ".p2align 6",
    "allocmux_shim_thread:",
    ".zero {size}",
    ".size allocmux_shim_thread, {size}",
    ".popsection",
    size = const core::mem::size_of::<ShimThread>(),
);

/// The calling thread's state.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub fn current() -> &'static ShimThread {
    let p: *const ShimThread;
    // SAFETY: initial-exec TLS access: the GOT slot holds the block's offset
    // from the thread pointer, and %fs:0 holds the thread pointer itself.
    // Both are fixed for the thread's life (the GOT is relocated before any
    // code runs), so the result is a pure function of the thread: `nomem`
    // lets the compiler compute it once per function instead of after
    // every store.
    unsafe {
        core::arch::asm!(
            "mov {p}, qword ptr [rip + allocmux_shim_thread@GOTTPOFF]",
            "add {p}, qword ptr fs:[0]",
            p = out(reg) p,
            options(pure, nomem, nostack),
        );
        // SAFETY: the block is sized and aligned for ShimThread, zeroed per
        // thread (a valid fresh state), and only this thread takes `&` to the
        // non-atomic parts.
        &*p
    }
}

/// The calling thread's recorder state, reached from the thread pointer
/// (see `FsState`): the hooks' fast path addresses it with `%fs`-relative
/// instructions, one instruction fewer per call than through [`current`]'s
/// address.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub fn state_in_tls() -> allocmux_recorder::FsState<Block> {
    const { assert!(core::mem::offset_of!(ShimThread, state) == 0) };
    // SAFETY: every thread's block holds its own `ThreadState` first
    // (`ShimThread` is `repr(C)`, the assertion above).
    unsafe { allocmux_recorder::FsState::new() }
}

/// The calling thread's stack-sampling state, as [`state_in_tls`] gives
/// its recorder state.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub fn stacks_in_tls() -> FsStacks<Block, { core::mem::offset_of!(ShimThread, stacks) }> {
    // SAFETY: every thread's block holds its own `StackThread` there.
    unsafe { FsStacks::new() }
}

/// The shim's block of static TLS, `allocmux_shim_thread`.
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy, Debug)]
pub struct Block;

#[cfg(target_arch = "x86_64")]
impl allocmux_recorder::TlsBlock for Block {
    #[inline(always)]
    fn offset() -> usize {
        let offset: usize;
        // SAFETY: the GOT slot holds the block's offset from the thread
        // pointer, fixed for the process (see `current`).
        unsafe {
            core::arch::asm!(
                "mov {o}, qword ptr [rip + allocmux_shim_thread@GOTTPOFF]",
                o = out(reg) offset,
                options(pure, nomem, nostack, preserves_flags),
            );
        }
        offset
    }
}

#[cfg(not(target_arch = "x86_64"))]
thread_local! {
    static THREAD: ShimThread = const { ShimThread::new() };
}

/// The calling thread's state.
#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
pub fn current() -> &'static ShimThread {
    // SAFETY: the pointer stays valid for the thread's life, and the state
    // has no destructor, so this is never a dangling reference while the
    // thread runs.
    THREAD.with(|t| unsafe { &*(t as *const ShimThread) })
}
