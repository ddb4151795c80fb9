//! The hook table: one set of small `extern "C"` functions per backend (each
//! the body from `posix` run under the recorder), and the table the exports
//! jump through. The table starts at trampolines that choose the backend at
//! the process's first call; after that an export costs one load and an
//! indirect tail jump, and each hook is a separate function whose fast path
//! saves no more registers than its own work needs.

use core::ffi::{c_int, c_void};
use core::marker::PhantomData;
use core::sync::atomic::{AtomicPtr, Ordering::Relaxed};

use allocmux::recorder::stacks::{StackBody, enter_stacks};
use allocmux::recorder::{Body, enter};

use crate::backend::{Backend, Jemalloc, Mimalloc, System};
use crate::posix::*;
use crate::runtime::{self, Choice};
use crate::tls;

/// One function pointer per exported symbol.
pub struct Hooks {
    pub malloc: unsafe extern "C" fn(usize) -> *mut c_void,
    pub free: unsafe extern "C" fn(*mut c_void),
    pub calloc: unsafe extern "C" fn(usize, usize) -> *mut c_void,
    pub realloc: unsafe extern "C" fn(*mut c_void, usize) -> *mut c_void,
    pub aligned_alloc: unsafe extern "C" fn(usize, usize) -> *mut c_void,
    pub malloc_usable_size: unsafe extern "C" fn(*mut c_void) -> usize,
    pub memalign: unsafe extern "C" fn(usize, usize) -> *mut c_void,
    pub posix_memalign: unsafe extern "C" fn(*mut *mut c_void, usize, usize) -> c_int,
    pub pvalloc: unsafe extern "C" fn(usize) -> *mut c_void,
    pub valloc: unsafe extern "C" fn(usize) -> *mut c_void,
}

static TABLE: AtomicPtr<Hooks> = AtomicPtr::new(&FIRST_CALL as *const Hooks as *mut Hooks);

/// The hooks in force.
#[inline(always)]
pub fn table() -> &'static Hooks {
    // SAFETY: TABLE always points at one of the static tables below.
    unsafe { &*TABLE.load(Relaxed) }
}

/// Makes `choice` the process's backend, with stack recording if `stacks`
/// (set up beforehand). Called by the first call (or by several threads'
/// first calls at once, with the same choice: idempotent).
pub fn install(choice: Choice, stacks: bool) {
    let t: &'static Hooks = match (choice, stacks) {
        (Choice::System, false) => &SYSTEM,
        (Choice::System, true) => &SYSTEM_STACKS,
        (Choice::Jemalloc, false) => &JEMALLOC,
        (Choice::Jemalloc, true) => &JEMALLOC_STACKS,
        (Choice::Mimalloc, _) => {
            crate::backend::init_mimalloc();
            if stacks { &MIMALLOC_STACKS } else { &MIMALLOC }
        }
        (Choice::Unrecorded, _) => &UNRECORDED,
    };
    TABLE.store(t as *const Hooks as *mut Hooks, Relaxed);
}

/// Runs a body on this thread's recorder.
#[inline(always)]
unsafe fn plain<X: Body>(body: X) -> X::Out {
    // SAFETY: this thread's own state; the caller's arguments.
    unsafe { enter(&tls::current().state, body) }
}

/// Runs a body on this thread's recorder, with stack recording.
#[inline(always)]
unsafe fn with_stacks<X: StackBody>(body: X) -> X::Out {
    let t = tls::current();
    // SAFETY: this thread's own states; the caller's arguments.
    unsafe { enter_stacks(&t.state, &t.stacks, body) }
}

macro_rules! recorded_hooks {
    ($B:ty) => {
        recorded_hooks!($B, plain)
    };
    ($B:ty, $run:ident) => {{
        unsafe extern "C" fn malloc<B: Backend>(size: usize) -> *mut c_void {
            // SAFETY: this thread's own state; the program's arguments.
            unsafe { $run(Malloc::<B>(size, PhantomData)) }
        }
        unsafe extern "C" fn free<B: Backend>(ptr: *mut c_void) {
            // SAFETY: as above.
            unsafe { $run(Free::<B>(ptr, PhantomData)) }
        }
        unsafe extern "C" fn calloc<B: Backend>(n: usize, size: usize) -> *mut c_void {
            // SAFETY: as above.
            unsafe { $run(Calloc::<B>(n, size, PhantomData)) }
        }
        unsafe extern "C" fn realloc<B: Backend>(ptr: *mut c_void, size: usize) -> *mut c_void {
            // SAFETY: as above.
            unsafe { $run(Realloc::<B>(ptr, size, PhantomData)) }
        }
        unsafe extern "C" fn aligned_alloc<B: Backend>(align: usize, size: usize) -> *mut c_void {
            // SAFETY: as above.
            unsafe { $run(AlignedAlloc::<B>(align, size, PhantomData)) }
        }
        unsafe extern "C" fn malloc_usable_size<B: Backend>(ptr: *mut c_void) -> usize {
            // SAFETY: as above.
            unsafe { $run(UsableSize::<B>(ptr, PhantomData)) }
        }
        unsafe extern "C" fn memalign<B: Backend>(align: usize, size: usize) -> *mut c_void {
            // SAFETY: as above.
            unsafe { $run(Memalign::<B>(align, size, PhantomData)) }
        }
        unsafe extern "C" fn posix_memalign<B: Backend>(
            out: *mut *mut c_void,
            align: usize,
            size: usize,
        ) -> c_int {
            // SAFETY: as above.
            unsafe { $run(PosixMemalign::<B>(out, align, size, PhantomData)) }
        }
        unsafe extern "C" fn pvalloc<B: Backend>(size: usize) -> *mut c_void {
            // SAFETY: as above.
            unsafe { $run(Pvalloc::<B>(size, PhantomData)) }
        }
        unsafe extern "C" fn valloc<B: Backend>(size: usize) -> *mut c_void {
            // SAFETY: as above.
            unsafe { $run(Valloc::<B>(size, PhantomData)) }
        }
        Hooks {
            malloc: malloc::<$B>,
            free: free::<$B>,
            calloc: calloc::<$B>,
            realloc: realloc::<$B>,
            aligned_alloc: aligned_alloc::<$B>,
            malloc_usable_size: malloc_usable_size::<$B>,
            memalign: memalign::<$B>,
            posix_memalign: posix_memalign::<$B>,
            pvalloc: pvalloc::<$B>,
            valloc: valloc::<$B>,
        }
    }};
}

static SYSTEM: Hooks = bench_variant!(recorded_hooks!(System), System);
static JEMALLOC: Hooks = bench_variant!(recorded_hooks!(Jemalloc), Jemalloc);

/// The shim as it ships: the recorded hooks.
#[cfg(not(any(allocmux_bench = "forward", allocmux_bench = "count")))]
macro_rules! bench_variant {
    ($hooks:expr, $B:ty) => {
        $hooks
    };
}

/// Benchmark builds only (`RUSTFLAGS='--cfg allocmux_bench="forward"'` or
/// `"count"`, used by `scripts/shim_overhead.py --floors`): `malloc` and
/// `free` forward with no recording at all, or with nothing but one
/// per-thread increment, to measure what interposition and the cheapest
/// exact counting cost by themselves.
#[cfg(any(allocmux_bench = "forward", allocmux_bench = "count"))]
macro_rules! bench_variant {
    ($hooks:expr, $B:ty) => {{
        unsafe extern "C" fn malloc(size: usize) -> *mut c_void {
            #[cfg(allocmux_bench = "count")]
            tls::current().state.bench_count(allocmux::Func::Malloc);
            // SAFETY: forwarded.
            unsafe { <$B as Backend>::malloc(size) }
        }
        unsafe extern "C" fn free(ptr: *mut c_void) {
            #[cfg(allocmux_bench = "count")]
            tls::current().state.bench_count(allocmux::Func::Free);
            if !ptr.is_null() {
                // SAFETY: forwarded.
                unsafe { <$B as Backend>::free(ptr) }
            }
        }
        Hooks {
            malloc,
            free,
            ..$hooks
        }
    }};
}
use bench_variant;
static MIMALLOC: Hooks = recorded_hooks!(Mimalloc);
static SYSTEM_STACKS: Hooks = recorded_hooks!(System, with_stacks);
static JEMALLOC_STACKS: Hooks = recorded_hooks!(Jemalloc, with_stacks);
static MIMALLOC_STACKS: Hooks = recorded_hooks!(Mimalloc, with_stacks);

/// Secure execution: glibc, nothing recorded.
static UNRECORDED: Hooks = {
    unsafe extern "C" fn malloc(size: usize) -> *mut c_void {
        // SAFETY: the program's arguments; nothing is recorded.
        unsafe { Malloc::<System>(size, PhantomData).run(&Unrecorded) }
    }
    unsafe extern "C" fn free(ptr: *mut c_void) {
        // SAFETY: as above.
        unsafe { Free::<System>(ptr, PhantomData).run(&Unrecorded) }
    }
    unsafe extern "C" fn calloc(n: usize, size: usize) -> *mut c_void {
        // SAFETY: as above.
        unsafe { Calloc::<System>(n, size, PhantomData).run(&Unrecorded) }
    }
    unsafe extern "C" fn realloc(ptr: *mut c_void, size: usize) -> *mut c_void {
        // SAFETY: as above.
        unsafe { Realloc::<System>(ptr, size, PhantomData).run(&Unrecorded) }
    }
    unsafe extern "C" fn aligned_alloc(align: usize, size: usize) -> *mut c_void {
        // SAFETY: as above.
        unsafe { AlignedAlloc::<System>(align, size, PhantomData).run(&Unrecorded) }
    }
    unsafe extern "C" fn malloc_usable_size(ptr: *mut c_void) -> usize {
        // SAFETY: as above.
        unsafe { UsableSize::<System>(ptr, PhantomData).run(&Unrecorded) }
    }
    unsafe extern "C" fn memalign(align: usize, size: usize) -> *mut c_void {
        // SAFETY: as above.
        unsafe { Memalign::<System>(align, size, PhantomData).run(&Unrecorded) }
    }
    unsafe extern "C" fn posix_memalign(out: *mut *mut c_void, align: usize, size: usize) -> c_int {
        // SAFETY: as above.
        unsafe { PosixMemalign::<System>(out, align, size, PhantomData).run(&Unrecorded) }
    }
    unsafe extern "C" fn pvalloc(size: usize) -> *mut c_void {
        // SAFETY: as above.
        unsafe { Pvalloc::<System>(size, PhantomData).run(&Unrecorded) }
    }
    unsafe extern "C" fn valloc(size: usize) -> *mut c_void {
        // SAFETY: as above.
        unsafe { Valloc::<System>(size, PhantomData).run(&Unrecorded) }
    }
    Hooks {
        malloc,
        free,
        calloc,
        realloc,
        aligned_alloc,
        malloc_usable_size,
        memalign,
        posix_memalign,
        pvalloc,
        valloc,
    }
};

/// The process's first call, whatever the function: choose, then forward.
static FIRST_CALL: Hooks = {
    unsafe extern "C" fn malloc(size: usize) -> *mut c_void {
        runtime::backend();
        // SAFETY: forwarded to the chosen table.
        unsafe { (table().malloc)(size) }
    }
    unsafe extern "C" fn free(ptr: *mut c_void) {
        runtime::backend();
        // SAFETY: as above.
        unsafe { (table().free)(ptr) }
    }
    unsafe extern "C" fn calloc(n: usize, size: usize) -> *mut c_void {
        runtime::backend();
        // SAFETY: as above.
        unsafe { (table().calloc)(n, size) }
    }
    unsafe extern "C" fn realloc(ptr: *mut c_void, size: usize) -> *mut c_void {
        runtime::backend();
        // SAFETY: as above.
        unsafe { (table().realloc)(ptr, size) }
    }
    unsafe extern "C" fn aligned_alloc(align: usize, size: usize) -> *mut c_void {
        runtime::backend();
        // SAFETY: as above.
        unsafe { (table().aligned_alloc)(align, size) }
    }
    unsafe extern "C" fn malloc_usable_size(ptr: *mut c_void) -> usize {
        runtime::backend();
        // SAFETY: as above.
        unsafe { (table().malloc_usable_size)(ptr) }
    }
    unsafe extern "C" fn memalign(align: usize, size: usize) -> *mut c_void {
        runtime::backend();
        // SAFETY: as above.
        unsafe { (table().memalign)(align, size) }
    }
    unsafe extern "C" fn posix_memalign(out: *mut *mut c_void, align: usize, size: usize) -> c_int {
        runtime::backend();
        // SAFETY: as above.
        unsafe { (table().posix_memalign)(out, align, size) }
    }
    unsafe extern "C" fn pvalloc(size: usize) -> *mut c_void {
        runtime::backend();
        // SAFETY: as above.
        unsafe { (table().pvalloc)(size) }
    }
    unsafe extern "C" fn valloc(size: usize) -> *mut c_void {
        runtime::backend();
        // SAFETY: as above.
        unsafe { (table().valloc)(size) }
    }
    Hooks {
        malloc,
        free,
        calloc,
        realloc,
        aligned_alloc,
        malloc_usable_size,
        memalign,
        posix_memalign,
        pvalloc,
        valloc,
    }
};
