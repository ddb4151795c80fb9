//! The hook tables: one set of small `extern "C"` functions per backend
//! (each the body from `posix` run under the recorder), and the slots the
//! exports jump through, one per function. The slots start at trampolines
//! that choose the backend at the process's first call; after that an
//! export is one indirect jump through its slot (`jmp *slot(%rip)`), and
//! each hook is a separate function whose fast path saves no more
//! registers than its own work needs.
//!
//! Every per-function list here (the table's fields, each table's
//! functions) is generated from the one list of the malloc family,
//! `allocmux_format::for_each_malloc_function!`.

use core::marker::PhantomData;
use core::sync::atomic::{AtomicPtr, Ordering::Relaxed};

use allocmux_format::Backend as Allocator;
use allocmux_format::direct::{self, DirectTable};
use allocmux_format::profile::StackMode;
use allocmux_recorder::Body;
#[cfg(not(target_arch = "x86_64"))]
use allocmux_recorder::enter;
use allocmux_recorder::stacks::{StackBody, enter_sampled, enter_sampled_level, enter_stacks};

use crate::backend::{Jemalloc, Mimalloc, MimallocLookup, Next, System};
use crate::choice::{self, Choice};
use crate::posix::*;
use crate::tls;

/// The table's type: one function pointer per function of the family.
macro_rules! hooks_struct {
    ([] $($name:ident => $Func:ident ($($arg:ident : $ty:ty),*) $(-> $ret:ty)?;)*) => {
        /// One function pointer per exported malloc-family symbol.
        pub struct Hooks {
            $(
                #[doc = concat!("`", stringify!($name), "`.")]
                pub $name: unsafe extern "C" fn($($ty),*) $(-> $ret)?,
            )*
        }
    };
}
allocmux_format::for_each_malloc_function!(hooks_struct);

/// The slots the exports jump through, and the hook of one function read
/// from its slot (`hook!(malloc)`).
macro_rules! slots_struct {
    ([] $($name:ident => $Func:ident ($($arg:ident : $ty:ty),*) $(-> $ret:ty)?;)*) => {
        /// The hooks in force, one slot per function, each holding a
        /// function of one of the tables below. A slot rather than a
        /// pointer to a table: an export then loads its hook with one
        /// PC-relative load and no pointer to chase first.
        pub struct Slots {
            $(
                #[doc = concat!("`", stringify!($name), "`.")]
                pub $name: AtomicPtr<()>,
            )*
        }

        impl Slots {
            const fn of(t: &Hooks) -> Slots {
                Slots { $($name: AtomicPtr::new(t.$name as *mut ()),)* }
            }

            fn set(&self, t: &Hooks) {
                $(self.$name.store(t.$name as *mut (), Relaxed);)*
            }
        }

        /// The hook in force for one function, from its slot. Used in an
        /// `unsafe` block, whose SAFETY line owes that the slot only ever
        /// holds this function's hook (`Slots::of`, `Slots::set`).
        macro_rules! hook {
            $(
                ($name) => {
                    core::mem::transmute::<*mut (), unsafe extern "C" fn($($ty),*) $(-> $ret)?>(
                        $crate::hooks::SLOTS.$name.load(core::sync::atomic::Ordering::Relaxed),
                    )
                };
            )*
        }
        #[cfg(not(target_arch = "x86_64"))]
        pub(crate) use hook;
    };
}
allocmux_format::for_each_malloc_function!(slots_struct);

/// The hooks in force.
pub static SLOTS: Slots = Slots::of(&FIRST_CALL);

/// Which table's hooks this library's exports are: `UNIVERSAL` as built
/// (the exports jump through `SLOTS`), a table's code in a direct shim
/// (see `allocmux_format::direct`), where the CLI has rewritten this
/// byte in the file. Not zero, so that it is stored in the file, not in
/// `.bss`.
#[cfg_attr(not(test), unsafe(export_name = "allocmux_direct_table"))]
#[used]
static DIRECT_TABLE: u8 = direct::UNIVERSAL;

/// The table this library's exports are, if it is a direct shim.
pub fn direct_table() -> Option<DirectTable> {
    // SAFETY: a static byte. Read as memory, not as the constant the
    // compiler sees: the file may say otherwise.
    DirectTable::from_code(unsafe { core::ptr::read_volatile(&DIRECT_TABLE) })
}

/// Makes `choice` the process's backend, with stack recording in `mode`
/// (set up beforehand). Called by the first call (or by several threads'
/// first calls at once, with the same choice: idempotent).
pub fn install(choice: Choice, mode: StackMode) {
    use StackMode::{Exact, Off, Sample};
    if choice.backend == Allocator::Mimalloc && (!choice.recorded || choice.sampled_level) {
        // The recorded tables' `init_mimalloc` below does it for them.
        crate::backend::mimalloc_sets_errno();
    }
    let t: &'static Hooks = if !choice.recorded {
        match choice.backend {
            Allocator::Jemalloc => &JEMALLOC_FORWARD,
            Allocator::Mimalloc => &MIMALLOC_FORWARD,
            Allocator::System => &UNRECORDED,
            Allocator::Next => &NEXT_UNRECORDED,
        }
    } else if choice.sampled_level {
        match choice.backend {
            Allocator::Jemalloc => &JEMALLOC_SAMPLED_LEVEL,
            Allocator::Mimalloc => &MIMALLOC_SAMPLED_LEVEL,
            Allocator::System => &SYSTEM_SAMPLED_LEVEL,
            Allocator::Next => &NEXT_SAMPLED_LEVEL,
        }
    } else {
        match (choice.backend, mode) {
            (Allocator::Jemalloc, Off) => &JEMALLOC,
            (Allocator::Jemalloc, Sample { .. }) => &JEMALLOC_SAMPLED,
            (Allocator::Jemalloc, Exact) => &JEMALLOC_STACKS,
            (Allocator::Mimalloc, _) => match (crate::backend::init_mimalloc(), mode) {
                (true, Off) => &MIMALLOC,
                (true, Sample { .. }) => &MIMALLOC_SAMPLED,
                (true, Exact) => &MIMALLOC_STACKS,
                (false, Off) => &MIMALLOC_LOOKUP,
                (false, Sample { .. }) => &MIMALLOC_LOOKUP_SAMPLED,
                (false, Exact) => &MIMALLOC_LOOKUP_STACKS,
            },
            (Allocator::System, Off) => &SYSTEM,
            (Allocator::System, Sample { .. }) => &SYSTEM_SAMPLED,
            (Allocator::System, Exact) => &SYSTEM_STACKS,
            (Allocator::Next, Off) => &NEXT,
            (Allocator::Next, Sample { .. }) => &NEXT_SAMPLED,
            (Allocator::Next, Exact) => &NEXT_STACKS,
        }
    };
    SLOTS.set(t);
}

/// Runs a body on this thread's recorder.
#[inline(always)]
unsafe fn plain<X: Body>(body: X) -> X::Out {
    // SAFETY: this thread's own state; the caller's arguments.
    #[cfg(target_arch = "x86_64")]
    unsafe {
        allocmux_recorder::enter_fs(tls::state_in_tls(), body)
    }
    // SAFETY: this thread's own state; the caller's arguments.
    #[cfg(not(target_arch = "x86_64"))]
    unsafe {
        enter(&tls::current().state, body)
    }
}

/// Runs a body on this thread's recorder, with stack recording.
#[inline(always)]
unsafe fn with_stacks<X: StackBody>(body: X) -> X::Out {
    let t = tls::current();
    // SAFETY: this thread's own states; the caller's arguments.
    unsafe { enter_stacks(&t.state, &t.stacks, body) }
}

/// Runs a body on this thread's recorder, with sampled stacks (see
/// `enter_sampled`).
#[inline(always)]
unsafe fn with_sampled_stacks<X: StackBody>(body: X) -> X::Out {
    // SAFETY: this thread's own states; the caller's arguments; the
    // tables that use this are installed in sample mode only.
    #[cfg(target_arch = "x86_64")]
    unsafe {
        enter_sampled(tls::state_in_tls(), tls::stacks_in_tls(), body)
    }
    // SAFETY: as above.
    #[cfg(not(target_arch = "x86_64"))]
    unsafe {
        let t = tls::current();
        enter_sampled(&t.state, &t.stacks, body)
    }
}

/// Runs a body at the sampled level: the stack sample alone (see
/// `enter_sampled_level`).
#[inline(always)]
unsafe fn sampled_level<X: StackBody>(body: X) -> X::Out {
    // SAFETY: this thread's own stack state; the caller's arguments; the
    // tables that use this are installed in sample mode only.
    #[cfg(target_arch = "x86_64")]
    unsafe {
        enter_sampled_level(tls::stacks_in_tls(), body, Unrecorded)
    }
    // SAFETY: as above.
    #[cfg(not(target_arch = "x86_64"))]
    unsafe {
        enter_sampled_level(&tls::current().stacks, body, Unrecorded)
    }
}

/// Runs a body with nothing recorded (forwarding, secure execution).
#[inline(always)]
unsafe fn unrecorded<X: Body>(body: X) -> X::Out {
    // SAFETY: the caller's arguments; `Unrecorded` records nothing.
    unsafe { body.run(&Unrecorded) }
}

/// A table whose every function runs its body from `posix` (the type of
/// the function's name) for backend `$B` through `$run`; with a table name
/// `$direct`, each is exported as `allocmux_direct_$direct_$name`, for a
/// direct shim's export to be it (see `allocmux_format::direct`).
macro_rules! body_hooks {
    ([$B:ty, $run:ident, $direct:tt] $($name:ident => $Func:ident ($($arg:ident : $ty:ty),*) $(-> $ret:ty)?;)*) => {{
        $(
            direct_export!($direct, $name,
                unsafe extern "C" fn $name($($arg: $ty),*) $(-> $ret)? {
                    // SAFETY: the program's arguments, with the C function's
                    // contract, which the body keeps; `$run` uses this
                    // thread's own state.
                    unsafe { $run($Func::<$B>($($arg,)* PhantomData)) }
                }
            );
        )*
        Hooks { $($name),* }
    }};
}

/// A hook, exported under its direct shim's name when its table has one
/// (`[table]`), else as it is (`[]`).
macro_rules! direct_export {
    ([], $name:ident, $hook:item) => {
        $hook
    };
    ([$direct:ident], $name:ident, $hook:item) => {
        #[cfg_attr(
            not(test),
            unsafe(export_name = concat!("allocmux_direct_", stringify!($direct), "_", stringify!($name)))
        )]
        $hook
    };
}

/// The recorded hooks of backend `$B`, through `$run` (`plain` or
/// `with_stacks`), exported for a direct shim as table `$direct`.
macro_rules! recorded_hooks {
    ($B:ty) => {
        recorded_hooks!($B, plain)
    };
    ($B:ty, $run:ident) => {
        allocmux_format::for_each_malloc_function!(body_hooks, $B, $run, [])
    };
    ($B:ty, $run:ident, $direct:ident) => {
        allocmux_format::for_each_malloc_function!(body_hooks, $B, $run, [$direct])
    };
}

static SYSTEM: Hooks = bench_variant!(recorded_hooks!(System, plain, system), System);
static JEMALLOC: Hooks = bench_variant!(recorded_hooks!(Jemalloc, plain, jemalloc), Jemalloc);

/// The shim as it ships: the recorded hooks.
#[cfg(not(any(allocmux_bench = "forward", allocmux_bench = "count")))]
macro_rules! bench_variant {
    ($hooks:expr, $B:ty) => {
        $hooks
    };
}

/// Benchmark builds only (`RUSTFLAGS='--cfg allocmux_bench="forward"'` or
/// `"count"`, used by `scripts/shim_overhead.py --floors` and
/// `scripts/studies/counting_floor.py`): `malloc`, `free`, `calloc` and `realloc`
/// (all a Rust program's `System` allocator calls for alignments up to 16)
/// forward with no recording at all, or with nothing but one per-thread
/// increment, to measure what interposition and the cheapest exact
/// counting cost by themselves.
#[cfg(any(allocmux_bench = "forward", allocmux_bench = "count"))]
macro_rules! bench_variant {
    ($hooks:expr, $B:ty) => {{
        unsafe extern "C" fn malloc(size: usize) -> *mut core::ffi::c_void {
            #[cfg(allocmux_bench = "count")]
            tls::current()
                .state
                .bench_count(allocmux_format::Func::Malloc);
            // SAFETY: forwarded.
            unsafe { <$B as crate::backend::Backend>::malloc(size) }
        }
        unsafe extern "C" fn free(ptr: *mut core::ffi::c_void) {
            #[cfg(allocmux_bench = "count")]
            tls::current()
                .state
                .bench_count(allocmux_format::Func::Free);
            if !ptr.is_null() {
                // SAFETY: forwarded.
                unsafe { <$B as crate::backend::Backend>::free(ptr) }
            }
        }
        unsafe extern "C" fn calloc(count: usize, size: usize) -> *mut core::ffi::c_void {
            #[cfg(allocmux_bench = "count")]
            tls::current()
                .state
                .bench_count(allocmux_format::Func::Calloc);
            if count.checked_mul(size).is_none() {
                return core::ptr::null_mut();
            }
            // SAFETY: forwarded; the product does not overflow.
            unsafe { <$B as crate::backend::Backend>::calloc(count, size) }
        }
        unsafe extern "C" fn realloc(
            ptr: *mut core::ffi::c_void,
            size: usize,
        ) -> *mut core::ffi::c_void {
            #[cfg(allocmux_bench = "count")]
            tls::current()
                .state
                .bench_count(allocmux_format::Func::Realloc);
            if ptr.is_null() {
                // SAFETY: forwarded.
                return unsafe { <$B as crate::backend::Backend>::malloc(size) };
            }
            if size == 0 {
                // SAFETY: forwarded: glibc's `realloc(p, 0)` frees `p`.
                unsafe { <$B as crate::backend::Backend>::free(ptr) };
                return core::ptr::null_mut();
            }
            // SAFETY: forwarded, `ptr` non-NULL and `size` non-zero.
            unsafe { <$B as crate::backend::Backend>::realloc(ptr, size) }
        }
        Hooks {
            malloc,
            free,
            calloc,
            realloc,
            ..$hooks
        }
    }};
}
use bench_variant;
static MIMALLOC: Hooks = bench_variant!(recorded_hooks!(Mimalloc), Mimalloc);
/// Exact stacks.
static SYSTEM_STACKS: Hooks = recorded_hooks!(System, with_stacks);
static JEMALLOC_STACKS: Hooks = recorded_hooks!(Jemalloc, with_stacks);
static MIMALLOC_STACKS: Hooks = recorded_hooks!(Mimalloc, with_stacks);
/// Sampled stacks (under jemalloc, whose hooks read no block sizes, every
/// free looks in the filter).
static SYSTEM_SAMPLED: Hooks = recorded_hooks!(System, with_sampled_stacks, system_sampled);
static JEMALLOC_SAMPLED: Hooks = recorded_hooks!(Jemalloc, with_sampled_stacks, jemalloc_sampled);
static MIMALLOC_SAMPLED: Hooks = recorded_hooks!(Mimalloc, with_sampled_stacks);
/// mimalloc where its layout is not the one the shim reads block sizes
/// from (see `backend::mimalloc::page`): sizes from `mi_usable_size`.
static MIMALLOC_LOOKUP: Hooks = recorded_hooks!(MimallocLookup);
static MIMALLOC_LOOKUP_STACKS: Hooks = recorded_hooks!(MimallocLookup, with_stacks);
static MIMALLOC_LOOKUP_SAMPLED: Hooks = recorded_hooks!(MimallocLookup, with_sampled_stacks);

/// Forwarding (`ALLOCMUX_RECORD=off`, `allocmux run --record off`,
/// `compare`'s timing runs) and secure execution: the backend's functions
/// with the C semantics of `posix`, nothing recorded. jemalloc's and
/// mimalloc's have direct shims, whose exports are these hooks; glibc's
/// needs none (the CLI preloads nothing then).
static UNRECORDED: Hooks = recorded_hooks!(System, unrecorded);
/// The sampled level (live profiles): only the stack sample, every
/// backend with a direct shim (mimalloc's answers `malloc_usable_size`
/// with `mi_usable_size`, the only size it reads, so its layout is never
/// relied on).
static SYSTEM_SAMPLED_LEVEL: Hooks = recorded_hooks!(System, sampled_level, system_sampled_level);
static JEMALLOC_SAMPLED_LEVEL: Hooks =
    recorded_hooks!(Jemalloc, sampled_level, jemalloc_sampled_level);
static MIMALLOC_SAMPLED_LEVEL: Hooks =
    recorded_hooks!(MimallocLookup, sampled_level, mimalloc_sampled_level);
static JEMALLOC_FORWARD: Hooks = recorded_hooks!(Jemalloc, unrecorded, jemalloc_forward);
static MIMALLOC_FORWARD: Hooks = recorded_hooks!(Mimalloc, unrecorded, mimalloc_forward);
/// The next library after the shim (see `backend::next`): no direct shim,
/// since its functions are found at run time.
static NEXT: Hooks = recorded_hooks!(Next);
static NEXT_STACKS: Hooks = recorded_hooks!(Next, with_stacks);
static NEXT_SAMPLED: Hooks = recorded_hooks!(Next, with_sampled_stacks);
static NEXT_SAMPLED_LEVEL: Hooks = recorded_hooks!(Next, sampled_level);
static NEXT_UNRECORDED: Hooks = recorded_hooks!(Next, unrecorded);

/// A table whose every function chooses the backend, then forwards to the
/// table the choice installed.
macro_rules! first_call_hooks {
    ([] $($name:ident => $Func:ident ($($arg:ident : $ty:ty),*) $(-> $ret:ty)?;)*) => {{
        $(
            unsafe extern "C" fn $name($($arg: $ty),*) $(-> $ret)? {
                choice::current();
                // SAFETY: forwarded, with the caller's arguments, to the
                // same function of the table just installed (a slot holds
                // only its function's hooks).
                unsafe { (hook!($name))($($arg),*) }
            }
        )*
        Hooks { $($name),* }
    }};
}

/// The process's first call, whatever the function: choose, then forward.
static FIRST_CALL: Hooks = allocmux_format::for_each_malloc_function!(first_call_hooks);
