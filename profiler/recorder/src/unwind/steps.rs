//! Learned unwinding steps: what framehop did for a return address, kept
//! in a table and replayed in a few instructions, with framehop's rule
//! caches behind it for addresses not learned yet.

use super::*;

/// framehop rule caches (509 slots each).
pub(super) const RULE_CACHES: usize = 16;
/// Slots of the learned-step table (16 bytes each: 256 KiB).
pub(super) const STEP_SLOTS: usize = 1 << 14;

/// What unwinding one frame from a given return address does, learned
/// from framehop (see [`learn`]). A return address's step is a function of
/// the code alone, so it is learned once and then replayed in a few
/// instructions, where framehop would look up its module and rule cache
/// every time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(u8)] // a defined layout: zeroed memory reads as `Unknown` (see `StepTable`)
pub(super) enum Step {
    /// Not learned yet (an empty slot).
    #[default]
    Unknown = 0,
    /// The end of the stack.
    End,
    /// The caller's stack pointer (the canonical frame address) is the
    /// frame pointer if `cfa_on_bp`, else the stack pointer, plus
    /// `8 * cfa_by_8`; the return address is the word below it. The
    /// word at the frame pointer if `bp_on_bp`, else the stack pointer,
    /// plus `8 * bp_by_8` is read, and it is the caller's frame pointer if
    /// `bp_saved`; if not, that word is the return address's (read again
    /// rather than branched around) and the frame pointer is unchanged.
    /// (Flags rather than nested enums: replaying selects between
    /// registers without branching on the rule.)
    Affine {
        cfa_on_bp: bool,
        cfa_by_8: i16,
        bp_saved: bool,
        bp_on_bp: bool,
        bp_by_8: i16,
    },
    /// The kernel's signal return trampoline (see [`is_sigreturn`]): the
    /// interrupted registers are in the `ucontext_t` at the stack pointer.
    Signal,
    /// Anything else (a DWARF expression, a step framehop
    /// fails on the made-up registers): framehop every time, as it would
    /// be without this. (An address no module holds is not one: framehop
    /// falls back to the frame pointer there, which is affine.)
    Framehop,
}

impl Step {
    /// The registers (return address, stack pointer, frame pointer) of the
    /// caller, or `None` at the end of the stack or on a read `read`
    /// refuses. Checks as framehop's rules do: the stack pointer must move
    /// up, and a return address of 0 ends the stack.
    #[inline(always)]
    pub(super) fn apply(
        &self,
        sp: u64,
        bp: u64,
        read: &impl Fn(u64) -> Option<u64>,
    ) -> Option<(u64, u64, u64)> {
        let Step::Affine {
            cfa_on_bp,
            cfa_by_8,
            bp_saved,
            bp_on_bp,
            bp_by_8,
        } = *self
        else {
            return None;
        };
        // Wrapping is safe: a sum past the top of the address space wraps
        // below any stack pointer (offsets are under 256 KiB), so it ends
        // the stack here, as framehop's overflow error does.
        let at = |base: u64, by_8: i16| base.wrapping_add((i64::from(by_8) * 8) as u64);
        let cfa = at(if cfa_on_bp { bp } else { sp }, cfa_by_8);
        if cfa <= sp {
            return None;
        }
        let ret = read(cfa - 8)?;
        let saved = read(at(if bp_on_bp { bp } else { sp }, bp_by_8))?;
        let new_bp = if bp_saved { saved } else { bp };
        (ret != 0).then_some((ret, cfa, new_bp))
    }

    /// State `(key, sp, bp)` with this step from it, as the last stack
    /// keeps it: which word the step restores the frame pointer from, and
    /// whether it reads the frame pointer.
    #[inline(always)]
    pub(super) fn state(&self, key: u64, sp: u64, bp: u64) -> State {
        match *self {
            Step::Affine {
                cfa_on_bp,
                bp_saved,
                bp_on_bp,
                bp_by_8,
                ..
            } => {
                let base = if bp_on_bp { bp } else { sp };
                let saved_at = bp_saved.then(|| base.wrapping_add((i64::from(bp_by_8) * 8) as u64));
                State::affine(key, sp, bp, saved_at, cfa_on_bp || bp_on_bp)
            }
            Step::Unknown | Step::End | Step::Framehop | Step::Signal => {
                State::unwound(key, sp, bp)
            }
        }
    }
}

/// The kernel's signal return trampoline on x86-64 Linux (glibc's and
/// musl's `__restore_rt`): `mov $15, %rax; syscall` (`rt_sigreturn`). A
/// signal handler returns to it, so it is the handler's return address, as
/// libunwind recognises signal frames. framehop does not: glibc describes
/// the trampoline with DWARF expressions it does not evaluate.
pub(super) const SIGRETURN: [u8; 9] = [0x48, 0xc7, 0xc0, 0x0f, 0x00, 0x00, 0x00, 0x0f, 0x05];

/// Whether the code at `address` is the signal return trampoline. Reads
/// code only inside a loaded module's executable mapping.
pub(super) fn is_sigreturn(modules: &[ModuleInfo], address: u64) -> bool {
    let end = address.wrapping_add(SIGRETURN.len() as u64);
    modules.iter().any(|m| {
        m.range.start <= address && address < end && end <= m.range.end && {
            // SAFETY: inside a mapped, readable executable segment
            // (`dl_iterate_phdr`'s `PT_LOAD` with `PF_X`, which the loader
            // maps readable too).
            let code =
                unsafe { core::slice::from_raw_parts(address as *const u8, SIGRETURN.len()) };
            code == SIGRETURN
        }
    })
}

/// The interrupted registers of a signal frame whose `ucontext_t` is at
/// `sp`: the instruction pointer (as a key, marked [`NOT_RETURN`]), stack
/// and frame pointers; `None` on a read `read` refuses.
pub(super) fn signal_step(sp: u64, read: &impl Fn(u64) -> Option<u64>) -> Option<(u64, u64, u64)> {
    let gregs = core::mem::offset_of!(libc::ucontext_t, uc_mcontext)
        + core::mem::offset_of!(libc::mcontext_t, gregs);
    let reg = |r: c_int| read(sp.wrapping_add((gregs + r as usize * 8) as u64));
    let pc = reg(libc::REG_RIP)?;
    (pc != 0).then_some((pc | NOT_RETURN, reg(libc::REG_RSP)?, reg(libc::REG_RBP)?))
}

/// Marks a step's key (a code address) that is not a return address: the
/// first frame's, inside the unwinder, and an interrupted instruction
/// under a signal frame. Their steps are different rules from those of a
/// return address one past them (framehop looks up the address itself
/// rather than the one before it).
pub(super) const NOT_RETURN: u64 = 1 << 63;

/// The key of the step from `address` (see [`NOT_RETURN`]).
#[inline(always)]
pub(super) fn step_key(address: FrameAddress) -> u64 {
    address.address()
        | if address.is_return_address() {
            0
        } else {
            NOT_RETURN
        }
}

/// The frame address a step's key stands for.
pub(super) fn frame_address(key: u64) -> Option<FrameAddress> {
    if key & NOT_RETURN != 0 {
        Some(FrameAddress::from_instruction_pointer(key & !NOT_RETURN))
    } else {
        FrameAddress::from_return_address(key)
    }
}

/// A word framehop "reads" while a step is learned: distinct for every
/// address, never 0, and far from any probe register, so each register
/// the step computes shows where it came from.
pub(super) fn probe_word(addr: u64) -> u64 {
    addr.rotate_left(29) ^ 0x5a5a_0000_0000_0001
}

pub(super) fn probe_address(word: u64) -> u64 {
    (word ^ 0x5a5a_0000_0000_0001).rotate_right(29)
}

/// `value - base` in words, if it is a whole number of them that fits.
pub(super) fn words_from(base: u64, value: u64) -> Option<i16> {
    let d = value.wrapping_sub(base) as i64;
    if d % 8 != 0 {
        return None;
    }
    i16::try_from(d / 8).ok()
}

/// Learns the step from `address` by running framehop on it
/// twice with made-up registers and a stack whose every word names its own
/// address. The step is affine when the first run's results are each a
/// register plus a constant (or a word read there), and that model
/// predicts the second run exactly. The two runs' registers differ by an
/// odd number of words, so a rule that aligns the stack pointer (a DWARF
/// expression) shows up as not affine.
pub(super) fn learn(
    unwinder: &UnwinderX86_64<&'static [u8], MustNotAllocateDuringUnwind>,
    cache: &mut CacheX86_64<MustNotAllocateDuringUnwind>,
    address: FrameAddress,
) -> Step {
    const PROBES: [(u64, u64); 2] = [
        (0x1000_0000_0000, 0x3000_0000_0000),
        (0x1000_0012_3458, 0x3000_0045_6788),
    ];
    let mut run = |(sp, bp): (u64, u64)| {
        let mut regs = UnwindRegsX86_64::new(address.address(), sp, bp);
        let mut read = |a: u64| Ok(probe_word(a));
        match unwinder.unwind_frame(address, &mut regs, cache, &mut read) {
            Ok(Some(r)) => Some(Some((r, regs.sp(), regs.bp()))),
            Ok(None) => Some(None),
            Err(_) => None,
        }
    };
    let (Some(first), Some(second)) = (run(PROBES[0]), run(PROBES[1])) else {
        return Step::Framehop;
    };
    let Some((_, new_sp, new_bp)) = first else {
        return if second.is_none() {
            Step::End
        } else {
            Step::Framehop
        };
    };
    let (sp, bp) = PROBES[0];
    let cfa = match (words_from(sp, new_sp), words_from(bp, new_sp)) {
        (Some(n), _) => (false, n),
        (None, Some(n)) => (true, n),
        (None, None) => return Step::Framehop,
    };
    let (bp_saved, bp_on_bp, bp_by_8) = if new_bp == bp {
        // The frame pointer's word is then the return address's, read
        // again rather than branched around in `Step::apply`.
        let Some(below) = cfa.1.checked_sub(1) else {
            return Step::Framehop;
        };
        (false, cfa.0, below)
    } else {
        let at = probe_address(new_bp);
        match (words_from(sp, at), words_from(bp, at)) {
            (Some(n), _) => (true, false, n),
            (None, Some(n)) => (true, true, n),
            (None, None) => return Step::Framehop,
        }
    };
    let step = Step::Affine {
        cfa_on_bp: cfa.0,
        cfa_by_8: cfa.1,
        bp_saved,
        bp_on_bp,
        bp_by_8,
    };
    // Replaying the model on both probes checks the return address too:
    // it must be the word below the canonical frame address.
    let read = |a: u64| Some(probe_word(a));
    let model = |(sp, bp): (u64, u64)| step.apply(sp, bp, &read);
    if model(PROBES[0]) != first || model(PROBES[1]) != second {
        return Step::Framehop;
    }
    step
}

/// Where replaying learned steps stopped (see [`Steps::replay`]).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Stop {
    /// At the end of the stack, or with the frame buffer full.
    End,
    /// At a frame with no learned affine step.
    NotReplayed,
    /// At the first frame past the leaf.
    PastLeaf,
}

/// Learned steps by return address: a direct-mapped table, replaced on a
/// collision.
pub(super) struct Steps {
    /// A fixed-size array, so that a masked index needs no bounds check.
    pub(super) slots: Box<StepTable>,
}

pub(super) type StepTable = [(u64, Step); STEP_SLOTS];

// SAFETY: all-zero bytes are an empty table: key 0 (no code is at address
// 0) and `Step::Unknown`, discriminant 0 of a `repr(u8)` enum.
unsafe impl Zeroable for StepTable {}

impl Steps {
    /// An empty table; `None` without the memory for it. Zeroed by the
    /// allocator, so pages no address hashes to are never touched (fresh
    /// 256 KiB comes from the kernel already zero).
    pub(super) fn new() -> Option<Self> {
        Some(Steps {
            slots: zeroed_box::<StepTable>()?,
        })
    }

    /// Replays learned steps from the frame with step key `at` and stack
    /// and frame pointers `sp` and `bp`, frame after frame, handing each
    /// caller's return address to `emit`, and leaves the registers at the
    /// first frame it has no affine step for. True if it reached the end of
    /// the stack or filled `emit`. The common case of
    /// [`StackUnwinder::capture`], without its per-frame choices (learning,
    /// framehop, signal frames).
    #[inline(always)]
    pub(super) fn replay(
        &mut self,
        (at, sp, bp): (&mut u64, &mut u64, &mut u64),
        read: &impl Fn(u64) -> Option<u64>,
        emit: &mut Emit<'_>,
        reuse: &mut Option<Reuse<'_>>,
        replayed: &mut u64,
    ) -> bool {
        // The leaf's few frames first, then the rest with no test for the
        // leaf in the loop.
        let mut stop = Stop::PastLeaf;
        if emit.leaf {
            stop = self.replay_while::<true>((at, sp, bp), read, emit, &mut None, replayed);
        }
        if stop == Stop::PastLeaf {
            stop = self.replay_while::<false>((at, sp, bp), read, emit, reuse, replayed);
        }
        stop == Stop::End
    }

    /// [`Steps::replay`] while `emit` is at the leaf if `LEAF`, else to
    /// the end, past the leaf checking what it can of the thread's last
    /// stack rather than unwinding it (`reuse`).
    #[inline(always)]
    pub(super) fn replay_while<const LEAF: bool>(
        &mut self,
        (at, sp, bp): (&mut u64, &mut u64, &mut u64),
        read: &impl Fn(u64) -> Option<u64>,
        emit: &mut Emit<'_>,
        reuse: &mut Option<Reuse<'_>>,
        replayed: &mut u64,
    ) -> Stop {
        loop {
            if let (false, Some(r)) = (LEAF, reuse.as_mut()) {
                let (follow, written) = r.follow((at, sp, bp), read, emit.room());
                emit.n += written;
                if follow == Follow::Full {
                    return Stop::End;
                }
            }
            let (key, step) = &*self.slot(*at);
            if *key != *at || !matches!(step, Step::Affine { .. }) {
                return Stop::NotReplayed;
            }
            let next = step.apply(*sp, *bp, read);
            if let (false, Some(r)) = (LEAF, reuse.as_mut()) {
                r.record(step.state(*at, *sp, *bp));
            }
            let Some((caller, caller_sp, caller_bp)) = next else {
                return Stop::End;
            };
            *replayed += 1;
            let room = if LEAF {
                emit.push(caller)
            } else {
                emit.push_outer(caller)
            };
            if !room {
                return Stop::End;
            }
            (*at, *sp, *bp) = (caller, caller_sp, caller_bp);
            if LEAF && !emit.leaf {
                return Stop::PastLeaf;
            }
        }
    }

    #[inline(always)]
    pub(super) fn slot(&mut self, key: u64) -> &mut (u64, Step) {
        let i = (key.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - STEP_SLOTS.trailing_zeros()))
            as usize;
        &mut self.slots[i % STEP_SLOTS]
    }
}

/// framehop's rule cache for `address`. Its slot in a cache is
/// `address % 509`, so the cache is picked by the quotient: neighbouring
/// addresses spread over all of them.
pub(super) fn cache_for(
    caches: &mut [CacheX86_64<MustNotAllocateDuringUnwind>],
    address: u64,
) -> &mut CacheX86_64<MustNotAllocateDuringUnwind> {
    let q = (address / 509) as usize;
    // All of them but where memory ran short (see `new_caches`): a mask.
    let i = if caches.len() == RULE_CACHES {
        q % RULE_CACHES
    } else {
        q % caches.len()
    };
    &mut caches[i]
}

/// Up to [`RULE_CACHES`] new rule caches, made one at a time until
/// `short()` says memory has run out. framehop makes each infallibly (a
/// 24 KiB context and a 12 KiB table, about 600 KiB in all), so in the
/// shim, whose heap falls back on a small emergency reserve when the
/// allocator says no (and aborts when that is gone), making them all at a
/// capture that comes after memory ran out would empty it. Made this way,
/// at most one cache's worth comes from the reserve; the unwinder works
/// with fewer caches (more of its framehop steps miss), and with none
/// takes no stack.
pub(super) fn new_caches(
    short: impl Fn() -> bool,
) -> Vec<CacheX86_64<MustNotAllocateDuringUnwind>> {
    let mut caches = Vec::new();
    if caches.try_reserve_exact(RULE_CACHES).is_err() {
        return caches;
    }
    while caches.len() < RULE_CACHES && !short() {
        caches.push(CacheX86_64::new_in());
    }
    caches
}

/// One frame unwound by framehop from `address` with the stack and frame
/// pointers `sp` and `bp`: the caller's return address, stack pointer and
/// frame pointer, or `None` at the end of the stack or on an error.
pub(super) fn framehop_step(
    unwinder: &UnwinderX86_64<&'static [u8], MustNotAllocateDuringUnwind>,
    caches: &mut [CacheX86_64<MustNotAllocateDuringUnwind>],
    read: &impl Fn(u64) -> Option<u64>,
    address: FrameAddress,
    sp: u64,
    bp: u64,
) -> Option<(u64, u64, u64)> {
    let mut regs = UnwindRegsX86_64::new(address.address(), sp, bp);
    let mut read = |a: u64| read(a).ok_or(());
    match unwinder.unwind_frame(
        address,
        &mut regs,
        cache_for(caches, address.address()),
        &mut read,
    ) {
        Ok(Some(ret)) => Some((ret, regs.sp(), regs.bp())),
        _ => None,
    }
}

/// Collects return addresses, leaving out the skipped module's frames at
/// the leaf end.
pub(super) struct Emit<'a> {
    pub(super) out: &'a mut FrameBuf,
    pub(super) n: usize,
    pub(super) leaf: bool,
    pub(super) skip: Range<u64>,
}

impl Emit<'_> {
    pub(super) fn full(&self) -> bool {
        self.n == MAX_FRAMES
    }

    /// The buffer's unused part, for frames taken from the thread's last
    /// stack (which then add to `n`).
    #[inline(always)]
    pub(super) fn room(&mut self) -> &mut [MaybeUninit<u64>] {
        &mut self.out[self.n..]
    }

    /// Takes the return address (not 0) of a frame past the leaf; false
    /// when full.
    #[inline(always)]
    pub(super) fn push_outer(&mut self, ret: u64) -> bool {
        debug_assert!(!self.leaf && ret != 0 && !self.full());
        // SAFETY: `n < MAX_FRAMES`: every push that fills `out` returns
        // false, and no capture pushes again after that.
        unsafe { self.out.get_unchecked_mut(self.n) }.write(ret);
        self.n += 1;
        !self.full()
    }

    /// Takes one return address; false at the end of the stack or when full.
    #[inline(always)]
    pub(super) fn push(&mut self, ret: u64) -> bool {
        if ret == 0 {
            return false;
        }
        if self.leaf {
            if self.skip.contains(&ret) {
                return true;
            }
            self.leaf = false;
        }
        self.out[self.n].write(ret);
        self.n += 1;
        !self.full()
    }
}
