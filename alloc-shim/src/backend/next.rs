//! The next `malloc` in the link order: the allocator library preloaded
//! after the shim (`LD_PRELOAD="SHIM LIBRARY"`: tcmalloc, a jemalloc or
//! mimalloc of the user's own build, any allocator that replaces
//! glibc's by defining the malloc family), or glibc's when none is.
//!
//! Its functions are found with `dlsym(RTLD_NEXT, ...)` once the process
//! has chosen this backend ([`resolve`], from the first call). `dlsym`
//! may itself allocate, and other early calls may come before it
//! returns: until then, calls are served from a small static arena whose
//! blocks are never reused (their `free` does nothing), as heaptrack's and
//! other interposers' start-up allocators do.
//!
//! The library must define `malloc`, `free`, `calloc`, `realloc`,
//! `memalign` and `malloc_usable_size` (the last tells the sizes of the
//! blocks it takes back); `valloc` and `pvalloc` are built on `memalign`.
//! Where one is missing (or found in another object, as glibc's would be),
//! every call goes to glibc instead, said once on stderr: blocks of two
//! allocators must never meet in one `free`.

use core::cell::UnsafeCell;
use core::ffi::{CStr, c_void};
use core::sync::atomic::{
    AtomicBool, AtomicPtr, AtomicUsize, Ordering::Acquire, Ordering::Relaxed, Ordering::Release,
};

use super::system::{__libc_calloc, __libc_free, __libc_malloc, __libc_memalign, __libc_realloc};
use super::{Backend, System};
use crate::posix::{memalign_via_aligned, pvalloc_via_aligned, set_errno};

/// The next library's functions, null until [`resolve`] has run.
struct Functions {
    malloc: AtomicPtr<()>,
    calloc: AtomicPtr<()>,
    realloc: AtomicPtr<()>,
    free: AtomicPtr<()>,
    memalign: AtomicPtr<()>,
    usable: AtomicPtr<()>,
}

static NEXT: Functions = Functions {
    malloc: AtomicPtr::new(core::ptr::null_mut()),
    calloc: AtomicPtr::new(core::ptr::null_mut()),
    realloc: AtomicPtr::new(core::ptr::null_mut()),
    free: AtomicPtr::new(core::ptr::null_mut()),
    memalign: AtomicPtr::new(core::ptr::null_mut()),
    usable: AtomicPtr::new(core::ptr::null_mut()),
};

type MallocFn = unsafe extern "C" fn(usize) -> *mut c_void;
type CallocFn = unsafe extern "C" fn(usize, usize) -> *mut c_void;
type ReallocFn = unsafe extern "C" fn(*mut c_void, usize) -> *mut c_void;
type FreeFn = unsafe extern "C" fn(*mut c_void);
type MemalignFn = unsafe extern "C" fn(usize, usize) -> *mut c_void;
type UsableFn = unsafe extern "C" fn(*mut c_void) -> usize;

/// glibc's `malloc_usable_size`, which the shim's own export would shadow.
unsafe extern "C" fn glibc_usable(ptr: *mut c_void) -> usize {
    // SAFETY: a live glibc block, as the caller passes.
    unsafe { System::usable(ptr) }
}

/// Finds the next library's functions; the first call of the process
/// makes it, after the choice is published (so that an allocation
/// inside `dlsym` is served from the arena, not by choosing again).
/// Threads racing here store the same pointers.
pub fn resolve() {
    let find = |name: &CStr| {
        // SAFETY: a symbol lookup with a NUL-terminated name; `dlsym`
        // allocates at most through the shim's exports, which serve it
        // from the arena until this returns.
        unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) }
    };
    let found = [
        find(c"malloc"),
        find(c"calloc"),
        find(c"realloc"),
        find(c"free"),
        find(c"memalign"),
        find(c"malloc_usable_size"),
    ];
    // `RTLD_NEXT` searches every object after the shim, glibc included:
    // a function the library lacks would be found in glibc, and glibc's
    // `free` or `malloc_usable_size` of the library's blocks is memory
    // corruption. So every function must come from `malloc`'s object.
    let object = |f: *mut c_void| {
        let mut info = core::mem::MaybeUninit::<libc::Dl_info>::uninit();
        // SAFETY: `dladdr` fills `info` for an address, allocating nothing.
        let known = unsafe { libc::dladdr(f.cast_const(), info.as_mut_ptr()) } != 0;
        // SAFETY: filled when `dladdr` returns non-zero.
        known.then(|| unsafe { info.assume_init() }.dli_fbase)
    };
    let home = object(found[0]);
    let whole = home.is_some() && found.iter().all(|&f| !f.is_null() && object(f) == home);
    let functions = if whole {
        found.map(|f| f.cast::<()>())
    } else {
        // Once, though threads racing in the first call may all get here.
        static WARNED: AtomicBool = AtomicBool::new(false);
        if !WARNED.swap(true, Relaxed) {
            crate::fmt::warn(format_args!(
                "the library after the shim in LD_PRELOAD lacks one of malloc, calloc, realloc, free, memalign and malloc_usable_size; using glibc's allocator"
            ));
        }
        [
            __libc_malloc as MallocFn as *mut (),
            __libc_calloc as CallocFn as *mut (),
            __libc_realloc as ReallocFn as *mut (),
            __libc_free as FreeFn as *mut (),
            __libc_memalign as MemalignFn as *mut (),
            glibc_usable as UsableFn as *mut (),
        ]
    };
    let [malloc, calloc, realloc, free, memalign, usable] = functions;
    // The functions that take blocks first, then those that hand them
    // out, `malloc` last: a thread that finds an allocating function set
    // (each read with Acquire) finds `free` and `malloc_usable_size` set
    // for the block it gets.
    for (slot, f) in [
        (&NEXT.free, free),
        (&NEXT.usable, usable),
        (&NEXT.realloc, realloc),
        (&NEXT.calloc, calloc),
        (&NEXT.memalign, memalign),
        (&NEXT.malloc, malloc),
    ] {
        slot.store(f, Release);
    }
}

/// The start-up arena: bytes handed out once, never reused.
const ARENA_BYTES: usize = 256 << 10;

#[repr(C, align(4096))]
struct Arena {
    bytes: UnsafeCell<[u8; ARENA_BYTES]>,
    used: AtomicUsize,
}

// SAFETY: each byte range is handed to one caller only (`used` is
// advanced atomically), and the arena's bytes are never handed out twice.
unsafe impl Sync for Arena {}

static ARENA: Arena = Arena {
    bytes: UnsafeCell::new([0; ARENA_BYTES]),
    used: AtomicUsize::new(0),
};

/// Each arena block is preceded by its size, in the 16 bytes before it.
const HEADER: usize = 16;

fn arena_start() -> usize {
    ARENA.bytes.get() as usize
}

fn in_arena(ptr: *mut c_void) -> bool {
    (ptr as usize).wrapping_sub(arena_start()) < ARENA_BYTES
}

/// `size` zeroed bytes aligned to `align` (a power of two) from the
/// arena, or null with `ENOMEM` when it is spent.
fn arena_alloc(size: usize, align: usize) -> *mut c_void {
    let align = align.max(HEADER);
    let mut used = ARENA.used.load(Relaxed);
    loop {
        let start = (arena_start() + used + HEADER).next_multiple_of(align) - arena_start();
        let end = match start.checked_add(size) {
            Some(end) if end <= ARENA_BYTES => end,
            _ => {
                set_errno(libc::ENOMEM);
                return core::ptr::null_mut();
            }
        };
        match ARENA
            .used
            .compare_exchange_weak(used, end, Relaxed, Relaxed)
        {
            Ok(_) => {
                let p = (arena_start() + start) as *mut u8;
                // SAFETY: `start - HEADER .. end` lies in the arena and
                // is this call's alone; the header is 16 bytes, aligned.
                unsafe { p.sub(HEADER).cast::<usize>().write(size) };
                return p.cast();
            }
            Err(now) => used = now,
        }
    }
}

/// The size an arena block was made with.
///
/// # Safety
/// `ptr` is an arena block.
unsafe fn arena_size(ptr: *mut c_void) -> usize {
    // SAFETY: the header written by `arena_alloc` precedes the block.
    unsafe { ptr.cast::<u8>().sub(HEADER).cast::<usize>().read() }
}

/// The function in `slot`, once resolved.
#[inline(always)]
fn resolved(slot: &AtomicPtr<()>) -> Option<*mut ()> {
    let f = slot.load(Acquire);
    (!f.is_null()).then_some(f)
}

/// A failed allocation sets `ENOMEM`, which not every allocator does.
#[inline(always)]
fn enomem_if_null(p: *mut c_void) -> *mut c_void {
    if p.is_null() {
        set_errno(libc::ENOMEM);
    }
    p
}

/// The next library's allocator.
#[derive(Debug, Clone, Copy)]
pub struct Next;

// SAFETY: forwards to the next library's malloc family (or glibc's as a
// whole), and serves only the arena's never-reused blocks before that;
// each block is freed by the allocator that made it (arena blocks by
// nothing), and failures set `ENOMEM`.
unsafe impl Backend for Next {
    type Sampled = Self;
    type Aligned = super::PageAligned<Self>;

    #[inline(always)]
    unsafe fn malloc(size: usize) -> *mut c_void {
        match resolved(&NEXT.malloc) {
            Some(f) => {
                // SAFETY: the library's `malloc`, as `resolve` found it.
                let p = unsafe { core::mem::transmute::<*mut (), MallocFn>(f)(size) };
                enomem_if_null(p)
            }
            None => arena_alloc(size, HEADER),
        }
    }
    #[inline(always)]
    unsafe fn calloc(count: usize, size: usize) -> *mut c_void {
        match resolved(&NEXT.calloc) {
            Some(f) => {
                // SAFETY: the library's `calloc`; the product does not overflow.
                let p = unsafe { core::mem::transmute::<*mut (), CallocFn>(f)(count, size) };
                enomem_if_null(p)
            }
            // The arena's bytes are zero: never handed out before.
            None => arena_alloc(count * size, HEADER),
        }
    }
    #[inline(always)]
    unsafe fn realloc(ptr: *mut c_void, size: usize) -> *mut c_void {
        if in_arena(ptr) {
            // SAFETY: a fresh block of this backend.
            let new = unsafe { Self::malloc(size) };
            if !new.is_null() {
                // SAFETY: both blocks hold at least the bytes copied.
                unsafe {
                    let old = arena_size(ptr).min(size);
                    core::ptr::copy_nonoverlapping(ptr.cast::<u8>(), new.cast::<u8>(), old);
                }
            }
            return new;
        }
        match resolved(&NEXT.realloc) {
            Some(f) => {
                // SAFETY: the library's `realloc` of one of its own blocks.
                let p = unsafe { core::mem::transmute::<*mut (), ReallocFn>(f)(ptr, size) };
                enomem_if_null(p)
            }
            // A block of no allocator the shim knows, before there is one
            // to ask its size: refused rather than guessed.
            None => enomem_if_null(core::ptr::null_mut()),
        }
    }
    #[inline(always)]
    unsafe fn free(ptr: *mut c_void) {
        if in_arena(ptr) {
            return;
        }
        if let Some(f) = resolved(&NEXT.free) {
            // SAFETY: the library's `free` of one of its own blocks.
            unsafe { core::mem::transmute::<*mut (), FreeFn>(f)(ptr) }
        }
    }
    #[inline(always)]
    unsafe fn aligned(align: usize, size: usize) -> *mut c_void {
        match resolved(&NEXT.memalign) {
            Some(f) => {
                // SAFETY: the library's `memalign`, with a power-of-two alignment.
                let p = unsafe { core::mem::transmute::<*mut (), MemalignFn>(f)(align, size) };
                enomem_if_null(p)
            }
            None => arena_alloc(size, align),
        }
    }
    #[inline(always)]
    unsafe fn memalign(align: usize, size: usize) -> *mut c_void {
        // SAFETY: the helper normalises the alignment for `aligned`.
        unsafe { memalign_via_aligned::<Self>(align, size) }
    }
    #[inline(always)]
    unsafe fn valloc(size: usize) -> *mut c_void {
        let page = allocmux_recorder::process::page_size();
        // SAFETY: the page size is a power of two.
        unsafe { Self::aligned(page, size) }
    }
    #[inline(always)]
    unsafe fn pvalloc(size: usize) -> *mut c_void {
        // SAFETY: built on `aligned`.
        unsafe { pvalloc_via_aligned::<Self>(size) }
    }
    #[inline(always)]
    unsafe fn usable(ptr: *mut c_void) -> usize {
        if in_arena(ptr) {
            // SAFETY: an arena block.
            return unsafe { arena_size(ptr) };
        }
        match resolved(&NEXT.usable) {
            // SAFETY: the library's `malloc_usable_size` of one of its blocks.
            Some(f) => unsafe { core::mem::transmute::<*mut (), UsableFn>(f)(ptr) },
            // Only a block of no allocator the shim knows (every block
            // before `resolve` is the arena's).
            None => 0,
        }
    }
}
