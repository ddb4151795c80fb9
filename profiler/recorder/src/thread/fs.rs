//! A thread's state in static TLS (x86-64, initial-exec, as in the shim):
//! [`FsState`] reaches its fields with `%fs`-relative instructions, and
//! [`OwnState`] lets a hook take either kind of state.

use super::*;

/// A thread's own [`ThreadState`] where it lives in the thread's static
/// TLS (x86-64, initial-exec, as in the shim): at the start of the block
/// `L` names ([`TlsBlock`]). The fast path reaches its fields with
/// `%fs`-relative instructions, as a C compiler reaches an initial-exec
/// `__thread` variable: the state's address would take one instruction
/// more per call to make (the thread pointer's `add`).
///
/// A value of it holds nothing: the block's offset is read where it is
/// needed (one load, from the GOT), so a body that carries one to the slow
/// path passes no more registers than without it.
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy, Debug)]
pub struct FsState<L>(core::marker::PhantomData<L>);

/// Where a block of static TLS is: its offset from the thread pointer
/// (x86-64, initial-exec: a load from the GOT, the same for every thread).
#[cfg(target_arch = "x86_64")]
pub trait TlsBlock: Copy {
    /// The offset.
    fn offset() -> usize;
}

/// The thread pointer plus `offset`: an address in the calling thread's
/// static TLS.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) fn tls_address(offset: usize) -> usize {
    let tp: usize;
    // SAFETY: reads the thread pointer, which `%fs:0` holds on x86-64
    // Linux and which is fixed for the thread's life (hence `pure`,
    // `nomem`: computed once per function).
    unsafe {
        core::arch::asm!(
            "mov {tp}, qword ptr fs:[0]",
            tp = out(reg) tp,
            options(pure, nomem, nostack, preserves_flags),
        );
    }
    tp.wrapping_add(offset)
}

#[cfg(target_arch = "x86_64")]
impl<L: TlsBlock> FsState<L> {
    /// The state at the start of block `L`.
    ///
    /// # Safety
    /// Every thread that uses it must have its own `ThreadState` at the
    /// start of its block `L`.
    #[inline(always)]
    pub const unsafe fn new() -> Self {
        FsState(core::marker::PhantomData)
    }

    /// The state's address, for everything off the fast path.
    #[inline(always)]
    pub fn state(self) -> &'static ThreadState {
        // SAFETY: the state is at the start of the calling thread's block
        // (`new`), zero-initialised or in use, and the thread's own.
        unsafe { &*(tls_address(L::offset()) as *const ThreadState) }
    }

    /// [`ThreadState::take_bytes`], with one `%fs`-relative `sub` and a
    /// branch on its carry or zero (the request was not below what was
    /// left).
    #[inline(always)]
    pub(super) fn take_bytes(self, requested: usize) -> bool {
        let mut below = true;
        // SAFETY: the operand is the state's `bytes_left`, this thread's
        // own aligned `AtomicU64`. Only the owner changes it; others only
        // load it. A `sub` to memory without `lock` is one load and one
        // store, each single-copy atomic on x86-64: the relaxed load and
        // store of the portable version. The label only sets a flag.
        unsafe {
            core::arch::asm!(
                "sub qword ptr fs:[{o} + {at}], {v}",
                "jbe {ended}",
                o = in(reg) L::offset(),
                at = const core::mem::offset_of!(ThreadState, bytes_left),
                v = in(reg) requested,
                ended = label {
                    below = false;
                },
                options(nostack),
            );
        }
        below
    }

    /// Adds `v` to the `u64` counter `AT` bytes into the state.
    #[inline(always)]
    pub(super) fn add<const AT: usize>(self, v: usize) {
        // SAFETY: `AT` is the offset of one of the state's `AtomicU64`
        // counters (the constants below), this thread's own, 8-byte
        // aligned (the state is 64-byte aligned). Only the owner adds to
        // it; others only load it. An `add` to memory without `lock` is one
        // load and one store, each single-copy atomic on x86-64: the
        // relaxed load and store of `Counters`' own unshared bump.
        unsafe {
            core::arch::asm!(
                "add qword ptr fs:[{o} + {at}], {v}",
                o = in(reg) L::offset(),
                at = const AT,
                v = in(reg) v,
                options(nostack),
            );
        }
    }
}

#[cfg(target_arch = "x86_64")]
const ALLOCATED_AT: usize = core::mem::offset_of!(ThreadState, counters) + Counters::ALLOCATED_AT;
#[cfg(target_arch = "x86_64")]
const FREED_AT: usize = core::mem::offset_of!(ThreadState, counters) + Counters::FREED_AT;

/// A thread's own state as a hook reaches it: by its address, or on
/// x86-64 from the thread pointer ([`FsState`]).
pub trait OwnState<'a>: Copy {
    /// The state's address.
    fn state(self) -> &'a ThreadState;
    /// [`ThreadState::take_bytes`] on this state.
    fn take_bytes(self, requested: usize) -> bool;
    /// Adds a block of `usable` bytes to the state's allocated bytes.
    fn allocated(self, usable: usize);
    /// Adds a block of `usable` bytes to the state's freed bytes.
    fn freed(self, usable: usize);
    /// [`enter`] on this state.
    ///
    /// # Safety
    /// As for [`enter`]: the calling thread's own state.
    unsafe fn enter<B: Body>(self, body: B) -> B::Out;
}

impl<'a> OwnState<'a> for &'a ThreadState {
    #[inline(always)]
    fn state(self) -> &'a ThreadState {
        self
    }
    #[inline(always)]
    fn take_bytes(self, requested: usize) -> bool {
        ThreadState::take_bytes(self, requested)
    }
    #[inline(always)]
    fn allocated(self, usable: usize) {
        self.counters.allocated::<false>(usable);
    }
    #[inline(always)]
    fn freed(self, usable: usize) {
        self.counters.freed::<false>(usable);
    }
    #[inline(always)]
    unsafe fn enter<B: Body>(self, body: B) -> B::Out {
        // SAFETY: forwarded from the caller.
        unsafe { enter(self, body) }
    }
}

#[cfg(target_arch = "x86_64")]
impl<L: TlsBlock> OwnState<'static> for FsState<L> {
    #[inline(always)]
    fn state(self) -> &'static ThreadState {
        FsState::state(self)
    }
    #[inline(always)]
    fn take_bytes(self, requested: usize) -> bool {
        FsState::take_bytes(self, requested)
    }
    #[inline(always)]
    fn allocated(self, usable: usize) {
        self.add::<ALLOCATED_AT>(usable);
    }
    #[inline(always)]
    fn freed(self, usable: usize) {
        self.add::<FREED_AT>(usable);
    }
    #[inline(always)]
    unsafe fn enter<B: Body>(self, body: B) -> B::Out {
        // SAFETY: forwarded from the caller.
        unsafe { enter_fs(self, body) }
    }
}

/// [`enter`] for a state in static TLS (see [`FsState`]): the same
/// decrement and branch, and on the fast path the same recording, each
/// one `%fs`-relative instruction.
///
/// # Safety
/// As for [`enter`], with `t` the calling thread's state.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub unsafe fn enter_fs<B: Body, L: TlsBlock>(t: FsState<L>, body: B) -> B::Out {
    // SAFETY: as in `enter`, with the counter addressed from the thread
    // pointer: `t` names the calling thread's own state.
    unsafe {
        core::arch::asm!(
            "dec dword ptr fs:[{o} + {offset}]",
            "js {slow}",
            o = in(reg) L::offset(),
            offset = const core::mem::offset_of!(ThreadState, countdown) + 4 * B::FUNC as usize,
            slow = label {
                // SAFETY: forwarded from the caller.
                return unsafe { slow(body, t.state()) };
            },
            options(nostack),
        );
    }
    // SAFETY: forwarded from the caller.
    unsafe { body.run(&Owned(t)) }
}
