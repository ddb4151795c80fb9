//! [`Switchable`]: a global allocator that is the system allocator, jemalloc
//! or mimalloc, chosen once per process from `ALLOCMUX_ALLOCATOR`.
//!
//! The choice is made by the process's first allocation (or an earlier
//! [`Switchable::backend`] call) and stored in one atomic byte, and the
//! chosen allocator's four functions in four slots: every call after that
//! is one indirect jump through its slot, whichever allocator it is (a
//! test of the byte per allocator would cost the last one tested the
//! most), and a block is always freed by the allocator that made it.
//! jemalloc and mimalloc are the same static,
//! prefixed builds the shim uses (`_rjem_*` from tikv-jemalloc-sys, `mi_*`
//! from libmimalloc-sys), called the way tikv-jemallocator and the mimalloc
//! crate call them.

use core::alloc::{GlobalAlloc, Layout};
use core::sync::atomic::{AtomicPtr, AtomicU8, Ordering::Relaxed};

use allocmux_format::Backend;
use allocmux_format::settings::{ALLOCATOR, Reader, Settings};

const UNCHOSEN: u8 = 0;
const SYSTEM: u8 = 1;
const JEMALLOC: u8 = 2;
const MIMALLOC: u8 = 3;
const NEXT: u8 = 4;

/// The process's choice, `UNCHOSEN` until the first call.
static CHOICE: AtomicU8 = AtomicU8::new(UNCHOSEN);

/// A [`GlobalAlloc`] that is the system allocator, jemalloc or mimalloc,
/// as the environment variable `ALLOCMUX_ALLOCATOR` says when the process
/// first allocates (`system`, `jemalloc`, `mimalloc`; unset means system).
/// One binary can then be compared under all three, with `allocmux
/// compare` or by hand, without `LD_PRELOAD`. `next` is the process's
/// `malloc`, as `system` is, but named for what it is when an allocator
/// library is preloaded (`LD_PRELOAD=libtcmalloc_minimal.so.4
/// ALLOCMUX_ALLOCATOR=next`).
///
/// ```no_run
/// #[global_allocator]
/// static ALLOC: allocmux::Switchable = allocmux::Switchable::new();
///
/// eprintln!("allocating with {}", ALLOC.backend().name());
/// ```
///
/// An unknown name, or one whose feature is off, gets one line on stderr
/// and the system allocator. It composes with counting:
/// `Counting<Switchable>`.
#[derive(Debug, Default, Clone, Copy)]
pub struct Switchable {
    _private: (),
}

impl Switchable {
    /// The allocator; `const`, for a `static`.
    pub const fn new() -> Self {
        Switchable { _private: () }
    }

    /// Whether this build can switch to `backend` (jemalloc and mimalloc
    /// are cargo features of allocmux, both on by default).
    pub const fn can_use(backend: Backend) -> bool {
        match backend {
            Backend::System => true,
            Backend::Jemalloc => cfg!(feature = "jemalloc"),
            Backend::Mimalloc => cfg!(feature = "mimalloc"),
            Backend::Next => true,
        }
    }

    /// The backend in use, choosing it now if nothing has allocated yet.
    pub fn backend(&self) -> Backend {
        decode(choice())
    }

    /// The backend in use, if the choice was made, without making it:
    /// for code that must not link the choice in (and with it the
    /// program's `switchable` mark) unless `Switchable` is used.
    pub(crate) fn chosen() -> Option<Backend> {
        match CHOICE.load(Relaxed) {
            UNCHOSEN => None,
            code => Some(decode(code)),
        }
    }

    /// The statistics of the backend in use ([`allocator_stats::read`]
    /// for [`Switchable::backend`]): with `Counting<Switchable>`,
    /// `ALLOC.inner().allocator_stats()`.
    ///
    /// [`allocator_stats::read`]: crate::allocator_stats::read
    pub fn allocator_stats(&self) -> Option<allocmux_format::AllocatorStats> {
        crate::allocator_stats::read(self.backend())
    }
}

fn decode(code: u8) -> Backend {
    match code {
        SYSTEM => Backend::System,
        JEMALLOC => Backend::Jemalloc,
        MIMALLOC => Backend::Mimalloc,
        NEXT => Backend::Next,
        code => unreachable!("choose() stores a backend's code, not {code}"),
    }
}

#[inline(always)]
fn choice() -> u8 {
    match CHOICE.load(Relaxed) {
        UNCHOSEN => choose(),
        c => c,
    }
}

/// Reads `ALLOCMUX_ALLOCATOR` and stores the choice, unless another thread
/// stored one first: then that one holds, so no two calls ever disagree.
///
/// This runs inside the first allocation, so it must not allocate: the
/// settings are read with `getenv` (std's `env::var` builds a `String`),
/// and the complaint is written with `write(2)`, not formatted.
#[cold]
#[inline(never)]
fn choose() -> u8 {
    crate::marks::switchable();
    let settings = Settings::from_env(Reader::Shim, getenv);
    let value = getenv(ALLOCATOR).unwrap_or_default();
    let wanted = settings
        .problems()
        .all(|p| p.name != ALLOCATOR)
        .then_some(settings.allocator);
    let backend = match wanted {
        Some(b) if Switchable::can_use(b) => b,
        _ => Backend::System,
    };
    let code = match backend {
        Backend::System => SYSTEM,
        Backend::Jemalloc => JEMALLOC,
        Backend::Mimalloc => MIMALLOC,
        Backend::Next => NEXT,
    };
    match CHOICE.compare_exchange(UNCHOSEN, code, Relaxed, Relaxed) {
        Ok(_) => {
            match wanted {
                None => complain(&[
                    b"allocmux: unknown ALLOCMUX_ALLOCATOR=",
                    value,
                    b" (expected system, jemalloc, mimalloc or next); using system\n",
                ]),
                Some(b) if !Switchable::can_use(b) => complain(&[
                    b"allocmux: ALLOCMUX_ALLOCATOR=",
                    value,
                    b" is not built in (a cargo feature of allocmux); using system\n",
                ]),
                _ => {}
            }
            code
        }
        Err(first) => first,
    }
}

/// The value of the environment variable `name` (at most 63 bytes), read
/// with `getenv`, which allocates nothing.
pub(crate) fn getenv(name: &str) -> Option<&'static [u8]> {
    let mut c_name = [0u8; 64];
    if name.len() >= c_name.len() {
        return None;
    }
    c_name[..name.len()].copy_from_slice(name.as_bytes());
    // SAFETY: a NUL-terminated name (the buffer is longer than it); getenv
    // does not allocate and returns NULL or a NUL-terminated string that
    // stays valid while nobody calls setenv (the process is starting, or
    // the program is ours to trust).
    unsafe {
        let p = libc::getenv(c_name.as_ptr().cast());
        (!p.is_null()).then(|| core::ffi::CStr::from_ptr(p).to_bytes())
    }
}

/// Writes one line to stderr in pieces, without formatting or allocating.
fn complain(parts: &[&[u8]]) {
    for part in parts {
        // SAFETY: a valid buffer of that length; a failed or short write to
        // stderr loses (part of) the message, nothing else.
        unsafe { libc::write(2, part.as_ptr().cast(), part.len()) };
    }
}

/// One allocator's functions, with `GlobalAlloc`'s contracts, each layout
/// passed as its size and alignment, in the registers `__rust_alloc` and
/// the others receive them in: a call then jumps through its slot with no
/// argument moved.
#[derive(Clone, Copy)]
struct Functions {
    alloc: unsafe fn(usize, usize) -> *mut u8,
    alloc_zeroed: unsafe fn(usize, usize) -> *mut u8,
    dealloc: unsafe fn(*mut u8, usize, usize),
    realloc: unsafe fn(*mut u8, usize, usize, usize) -> *mut u8,
}

/// The [`Functions`] of a module whose `alloc`, `alloc_zeroed`, `dealloc`
/// and `realloc` take a `Layout`, as `GlobalAlloc`'s do.
macro_rules! functions_of {
    ($m:ident) => {
        Functions {
            // SAFETY: the size and alignment of a `GlobalAlloc` call's
            // layout, valid as such; the call's contract, forwarded.
            alloc: |size, align| unsafe {
                $m::alloc(Layout::from_size_align_unchecked(size, align))
            },
            // SAFETY: as for `alloc`.
            alloc_zeroed: |size, align| unsafe {
                $m::alloc_zeroed(Layout::from_size_align_unchecked(size, align))
            },
            // SAFETY: as for `alloc`; the block is this allocator's (the
            // choice never changes).
            dealloc: |ptr, size, align| unsafe {
                $m::dealloc(ptr, Layout::from_size_align_unchecked(size, align))
            },
            // SAFETY: as for `dealloc`.
            realloc: |ptr, size, align, new_size| unsafe {
                $m::realloc(
                    ptr,
                    Layout::from_size_align_unchecked(size, align),
                    new_size,
                )
            },
        }
    };
}

/// The functions of `backend`, which `choose` has checked is built in.
fn functions(backend: Backend) -> Functions {
    match backend {
        // The process's `malloc`, whichever library defines it.
        Backend::System | Backend::Next => functions_of!(system),
        #[cfg(feature = "jemalloc")]
        Backend::Jemalloc => functions_of!(jemalloc),
        #[cfg(feature = "mimalloc")]
        Backend::Mimalloc => functions_of!(mimalloc),
        #[cfg(not(feature = "jemalloc"))]
        Backend::Jemalloc => unreachable!("choose() never picks a backend not built in"),
        #[cfg(not(feature = "mimalloc"))]
        Backend::Mimalloc => unreachable!("choose() never picks a backend not built in"),
    }
}

/// The functions every call goes through: the first call's until the
/// choice is made, then the chosen allocator's. A slot per function
/// rather than a pointer to a [`Functions`]: a call is then one load of
/// its slot and a jump, with no pointer to chase first.
struct Slots {
    alloc: AtomicPtr<()>,
    alloc_zeroed: AtomicPtr<()>,
    dealloc: AtomicPtr<()>,
    realloc: AtomicPtr<()>,
}

impl Slots {
    const fn of(f: Functions) -> Slots {
        Slots {
            alloc: AtomicPtr::new(f.alloc as *mut ()),
            alloc_zeroed: AtomicPtr::new(f.alloc_zeroed as *mut ()),
            dealloc: AtomicPtr::new(f.dealloc as *mut ()),
            realloc: AtomicPtr::new(f.realloc as *mut ()),
        }
    }

    fn set(&self, f: Functions) {
        self.alloc.store(f.alloc as *mut (), Relaxed);
        self.alloc_zeroed.store(f.alloc_zeroed as *mut (), Relaxed);
        self.dealloc.store(f.dealloc as *mut (), Relaxed);
        self.realloc.store(f.realloc as *mut (), Relaxed);
    }
}

static SLOTS: Slots = Slots::of(first_call::FUNCTIONS);

/// The process's first calls, whichever function: choose, fill the slots,
/// then call the chosen function. Several threads may get here before the
/// slots are filled: each finds the same choice (`choose`) and stores the
/// same functions.
mod first_call {
    use super::*;

    pub const FUNCTIONS: Functions = Functions {
        alloc,
        alloc_zeroed,
        dealloc,
        realloc,
    };

    #[cold]
    fn install() -> Functions {
        let f = functions(Switchable::new().backend());
        SLOTS.set(f);
        f
    }

    unsafe fn alloc(size: usize, align: usize) -> *mut u8 {
        // SAFETY: the caller's arguments, to the chosen allocator.
        unsafe { (install().alloc)(size, align) }
    }

    unsafe fn alloc_zeroed(size: usize, align: usize) -> *mut u8 {
        // SAFETY: the caller's arguments, to the chosen allocator.
        unsafe { (install().alloc_zeroed)(size, align) }
    }

    unsafe fn dealloc(ptr: *mut u8, size: usize, align: usize) {
        // SAFETY: no block exists before the first allocation, which made
        // the choice: a block being freed is the chosen allocator's.
        unsafe { (install().dealloc)(ptr, size, align) }
    }

    unsafe fn realloc(ptr: *mut u8, size: usize, align: usize, new_size: usize) -> *mut u8 {
        // SAFETY: as for `dealloc`.
        unsafe { (install().realloc)(ptr, size, align, new_size) }
    }
}

// SAFETY: every call goes to the functions in the slots: the first call's,
// which choose and call the chosen allocator's, then the chosen
// allocator's; the choice never changes once made, so every block is
// resized and freed by the allocator that made it. Each allocator's
// functions honour the layout's size and alignment.
unsafe impl GlobalAlloc for Switchable {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the slot only ever holds an `alloc` of `Functions`
        // (`Slots::of`, `Slots::set`); the caller's layout, forwarded.
        unsafe {
            let f: unsafe fn(usize, usize) -> *mut u8 =
                core::mem::transmute(SLOTS.alloc.load(Relaxed));
            f(layout.size(), layout.align())
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the slot only ever holds an `alloc_zeroed` of
        // `Functions`; the caller's layout, forwarded.
        unsafe {
            let f: unsafe fn(usize, usize) -> *mut u8 =
                core::mem::transmute(SLOTS.alloc_zeroed.load(Relaxed));
            f(layout.size(), layout.align())
        }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the slot only ever holds a `dealloc` of `Functions`; a
        // block of the allocator in use (the choice is fixed), forwarded.
        unsafe {
            let f: unsafe fn(*mut u8, usize, usize) =
                core::mem::transmute(SLOTS.dealloc.load(Relaxed));
            f(ptr, layout.size(), layout.align())
        }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the slot only ever holds a `realloc` of `Functions`; a
        // block of the allocator in use (the choice is fixed), forwarded.
        unsafe {
            let f: unsafe fn(*mut u8, usize, usize, usize) -> *mut u8 =
                core::mem::transmute(SLOTS.realloc.load(Relaxed));
            f(ptr, layout.size(), layout.align(), new_size)
        }
    }
}

/// glibc's malloc, as std's `System` drives it.
mod system {
    use core::alloc::{GlobalAlloc, Layout};
    use std::alloc::System;

    /// # Safety
    /// As `GlobalAlloc::alloc`.
    #[inline(always)]
    pub unsafe fn alloc(layout: Layout) -> *mut u8 {
        // SAFETY: the caller's layout, forwarded.
        unsafe { System.alloc(layout) }
    }

    /// # Safety
    /// As `GlobalAlloc::alloc_zeroed`.
    #[inline(always)]
    pub unsafe fn alloc_zeroed(layout: Layout) -> *mut u8 {
        // SAFETY: the caller's layout, forwarded.
        unsafe { System.alloc_zeroed(layout) }
    }

    /// # Safety
    /// As `GlobalAlloc::dealloc`, for a block of `System`.
    #[inline(always)]
    pub unsafe fn dealloc(ptr: *mut u8, layout: Layout) {
        // SAFETY: a block of `System`, forwarded.
        unsafe { System.dealloc(ptr, layout) }
    }

    /// # Safety
    /// As `GlobalAlloc::realloc`, for a block of `System`.
    #[inline(always)]
    pub unsafe fn realloc(ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: a block of `System`, forwarded.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// jemalloc as tikv-jemallocator drives it: plain `malloc`/`calloc`/
/// `realloc` when the natural alignment suffices, the `*allocx` calls with
/// an alignment flag otherwise, and sized `sdallocx` to free.
#[cfg(feature = "jemalloc")]
mod jemalloc {
    use core::alloc::Layout;
    use core::ffi::{c_int, c_void};

    use tikv_jemalloc_sys as je;

    /// `_Alignof(max_align_t)`: what jemalloc's plain calls guarantee.
    const MIN_ALIGN: usize = if cfg!(any(target_arch = "x86_64", target_arch = "aarch64")) {
        16
    } else {
        8
    };

    #[inline(always)]
    fn flags(align: usize, size: usize) -> c_int {
        if align <= MIN_ALIGN && align <= size {
            0
        } else {
            je::MALLOCX_ALIGN(align)
        }
    }

    /// # Safety
    /// As `GlobalAlloc::alloc`.
    #[inline(always)]
    pub unsafe fn alloc(layout: Layout) -> *mut u8 {
        let f = flags(layout.align(), layout.size());
        // SAFETY: a non-zero size (GlobalAlloc's contract) and a valid flag.
        unsafe {
            if f == 0 {
                je::malloc(layout.size()).cast()
            } else {
                je::mallocx(layout.size(), f).cast()
            }
        }
    }

    /// # Safety
    /// As `GlobalAlloc::alloc_zeroed`.
    #[inline(always)]
    pub unsafe fn alloc_zeroed(layout: Layout) -> *mut u8 {
        let f = flags(layout.align(), layout.size());
        // SAFETY: as in `alloc`.
        unsafe {
            if f == 0 {
                je::calloc(1, layout.size()).cast()
            } else {
                je::mallocx(layout.size(), f | je::MALLOCX_ZERO).cast()
            }
        }
    }

    /// # Safety
    /// As `GlobalAlloc::dealloc`, for a block from this module.
    #[inline(always)]
    pub unsafe fn dealloc(ptr: *mut u8, layout: Layout) {
        let f = flags(layout.align(), layout.size());
        // SAFETY: a live jemalloc block with the size and flags it was made with.
        unsafe { je::sdallocx(ptr.cast::<c_void>(), layout.size(), f) }
    }

    /// # Safety
    /// As `GlobalAlloc::realloc`, for a block from this module.
    #[inline(always)]
    pub unsafe fn realloc(ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let f = flags(layout.align(), new_size);
        // SAFETY: a live jemalloc block, a non-zero size, a valid flag.
        unsafe {
            if f == 0 {
                je::realloc(ptr.cast(), new_size).cast()
            } else {
                je::rallocx(ptr.cast(), new_size, f).cast()
            }
        }
    }
}

/// mimalloc as the mimalloc crate drives it: the aligned calls throughout
/// (they take the plain path for small alignments).
#[cfg(feature = "mimalloc")]
mod mimalloc {
    use core::alloc::Layout;

    use libmimalloc_sys as mi;

    /// # Safety
    /// As `GlobalAlloc::alloc`.
    #[inline(always)]
    pub unsafe fn alloc(layout: Layout) -> *mut u8 {
        // SAFETY: a valid layout; mimalloc accepts any power-of-two alignment.
        unsafe { mi::mi_malloc_aligned(layout.size(), layout.align()).cast() }
    }

    /// # Safety
    /// As `GlobalAlloc::alloc_zeroed`.
    #[inline(always)]
    pub unsafe fn alloc_zeroed(layout: Layout) -> *mut u8 {
        // SAFETY: as in `alloc`.
        unsafe { mi::mi_zalloc_aligned(layout.size(), layout.align()).cast() }
    }

    /// # Safety
    /// As `GlobalAlloc::dealloc`, for a block from this module.
    #[inline(always)]
    pub unsafe fn dealloc(ptr: *mut u8, _layout: Layout) {
        // SAFETY: a live mimalloc block.
        unsafe { mi::mi_free(ptr.cast()) }
    }

    /// # Safety
    /// As `GlobalAlloc::realloc`, for a block from this module.
    #[inline(always)]
    pub unsafe fn realloc(ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: a live mimalloc block, resized keeping its alignment.
        unsafe { mi::mi_realloc_aligned(ptr.cast(), new_size, layout.align()).cast() }
    }
}
