//! Capturing the calling thread's stack from inside an allocation call, on
//! binaries without frame pointers: DWARF CFI from each loaded module's
//! `.eh_frame` (indexed by `.eh_frame_hdr`), evaluated by the `framehop`
//! crate with its rule cache, reading nothing but the thread's own stack.
//!
//! The module list comes from `dl_iterate_phdr` and is rebuilt when the
//! loader's generation changes (see [`super::loader`]: dlopen, dlclose).
//! That call takes the loader's lock, so it is never made while holding
//! the stack lock: a thread inside `dlopen` that allocates would otherwise
//! wait for us while we wait for it.
//!
//! Everything here allocates only while rebuilding the module list (through
//! the host's global allocator, which in the shim bypasses the hooks);
//! unwinding itself does not allocate (`MustNotAllocateDuringUnwind`).

use core::ffi::{c_int, c_void};
use core::mem::MaybeUninit;
use core::ops::Range;

use super::last_stack::{Follow, LastStacks, Repeat, Reuse, State};
use super::tables::{Zeroable, zeroed_box};
use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64};
use framehop::{ExplicitModuleSectionInfo, FrameAddress, MustNotAllocateDuringUnwind, Unwinder};

/// Most frames kept per stack; deeper stacks keep their innermost frames.
pub const MAX_FRAMES: usize = 128;

/// Room for one stack's return addresses, left uninitialised: zeroing its
/// 1 KiB on every hooked call was 8% of exact mode's instructions on a
/// malloc/free churn. [`StackUnwinder::capture`] hands back the part it
/// filled.
pub type FrameBuf = [MaybeUninit<u64>; MAX_FRAMES];

/// An empty [`FrameBuf`] (no memory is written).
pub const fn frame_buf() -> FrameBuf {
    [const { MaybeUninit::uninit() }; MAX_FRAMES]
}

/// One executable mapping of a loaded ELF object, as written to the profile.
#[derive(Clone, Debug)]
pub struct ModuleInfo {
    /// Address range of the executable segment.
    pub range: Range<u64>,
    /// File offset of `range.start`.
    pub file_offset: u64,
    /// Load bias (`dlpi_addr`).
    pub bias: u64,
    /// GNU build id, empty if none.
    pub build_id: Vec<u8>,
    /// Path of the file (the executable's real path for the main program).
    pub path: Vec<u8>,
}

pub use super::loader::{Generation, generation};

/// A loaded object's unwind data, found from its program headers.
struct Found {
    info: ModuleInfo,
    exec: Range<u64>,
    eh_frame_hdr: Option<Range<u64>>,
    /// The loadable segments (to bound `.eh_frame`, whose size no header states).
    loads: Vec<Range<u64>>,
}

/// Every loaded object with an executable segment. Allocates (call it with
/// no lock held).
pub fn loaded_modules() -> (Vec<ModuleInfo>, Vec<framehop::Module<&'static [u8]>>) {
    unsafe extern "C" fn each(
        info: *mut libc::dl_phdr_info,
        _size: usize,
        out: *mut c_void,
    ) -> c_int {
        // SAFETY: `info` and its headers are valid for the callback; `out` is our Vec.
        unsafe {
            let out = &mut *(out as *mut Vec<Found>);
            let info = &*info;
            let bias = info.dlpi_addr;
            let phdrs = core::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize);
            let mut exec: Option<(Range<u64>, u64)> = None;
            let mut hdr = None;
            let mut build_id = Vec::new();
            let mut loads = Vec::new();
            for ph in phdrs {
                let start = bias.wrapping_add(ph.p_vaddr);
                let range = start..start.wrapping_add(ph.p_memsz);
                match ph.p_type {
                    libc::PT_LOAD => {
                        loads.push(range.clone());
                        if ph.p_flags & libc::PF_X != 0 && exec.is_none() {
                            exec = Some((range, ph.p_offset));
                        }
                    }
                    libc::PT_GNU_EH_FRAME => hdr = Some(range),
                    libc::PT_NOTE if build_id.is_empty() => {
                        build_id = note_build_id(range.start as *const u8, ph.p_memsz as usize);
                    }
                    _ => {}
                }
            }
            let Some((exec, file_offset)) = exec else {
                return 0;
            };
            let name = info.dlpi_name;
            let path = if name.is_null() {
                Vec::new()
            } else {
                core::ffi::CStr::from_ptr(name).to_bytes().to_vec()
            };
            out.push(Found {
                info: ModuleInfo {
                    range: exec.clone(),
                    file_offset,
                    bias,
                    build_id,
                    path,
                },
                exec,
                eh_frame_hdr: hdr,
                loads,
            });
        }
        0
    }
    let mut found: Vec<Found> = Vec::new();
    // SAFETY: the callback only pushes onto `found`, which outlives the call.
    unsafe { libc::dl_iterate_phdr(Some(each), &mut found as *mut Vec<Found> as *mut c_void) };

    let exe = own_exe_path();
    let cwd = current_dir();
    let mut infos = Vec::with_capacity(found.len());
    let mut modules = Vec::with_capacity(found.len());
    for (i, mut f) in found.into_iter().enumerate() {
        // The main program comes first, with an empty name.
        if i == 0 && f.info.path.is_empty() {
            f.info.path = exe.clone();
        }
        // A relative LD_PRELOAD or dlopen path stays relative in the
        // loader's list; the profile is read elsewhere, so anchor it.
        if f.info.path.contains(&b'/') && !f.info.path.starts_with(b"/") && !cwd.is_empty() {
            let mut full = cwd.clone();
            full.push(b'/');
            full.extend_from_slice(&f.info.path);
            f.info.path = full;
        }
        modules.push(framehop_module(&f));
        infos.push(f.info);
    }
    (infos, modules)
}

fn own_exe_path() -> Vec<u8> {
    let mut buf = [0u8; 4096];
    // SAFETY: valid NUL-terminated path and buffer.
    let n = unsafe {
        libc::readlink(
            c"/proc/self/exe".as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    if n > 0 {
        buf[..n as usize].to_vec()
    } else {
        Vec::new()
    }
}

fn current_dir() -> Vec<u8> {
    let mut buf = [0u8; 4096];
    // SAFETY: valid buffer and length.
    let p = unsafe { libc::getcwd(buf.as_mut_ptr().cast(), buf.len()) };
    if p.is_null() {
        return Vec::new();
    }
    let n = buf.iter().position(|&b| b == 0).unwrap_or(0);
    buf[..n].to_vec()
}

/// The GNU build id in a PT_NOTE segment, or empty.
///
/// # Safety
/// `p..p+len` must be a mapped note segment.
unsafe fn note_build_id(p: *const u8, len: usize) -> Vec<u8> {
    // SAFETY: the caller vouches for the segment.
    let notes = unsafe { core::slice::from_raw_parts(p, len) };
    let word = |at: usize| -> Option<usize> {
        Some(u32::from_ne_bytes(notes.get(at..at + 4)?.try_into().ok()?) as usize)
    };
    let mut at = 0;
    while let (Some(namesz), Some(descsz), Some(kind)) = (word(at), word(at + 4), word(at + 8)) {
        let name = at + 12;
        let desc = name + namesz.next_multiple_of(4);
        let next = desc + descsz.next_multiple_of(4);
        if next > notes.len() {
            break;
        }
        if kind == 3 && notes[name..name + namesz].starts_with(b"GNU") {
            return notes[desc..desc + descsz].to_vec();
        }
        at = next;
    }
    Vec::new()
}

/// Where `.eh_frame` starts, from the `eh_frame_ptr` field of `.eh_frame_hdr`.
fn eh_frame_start(hdr: &[u8], hdr_addr: u64) -> Option<u64> {
    let (&version, &enc) = (hdr.first()?, hdr.get(1)?);
    if version != 1 {
        return None;
    }
    let field = hdr_addr + 4;
    let raw = hdr.get(4..)?;
    let value = match enc & 0x0f {
        0x03 => u32::from_ne_bytes(raw.get(..4)?.try_into().ok()?) as u64, // udata4
        0x0b => i32::from_ne_bytes(raw.get(..4)?.try_into().ok()?) as i64 as u64, // sdata4
        0x00 | 0x04 | 0x0c => u64::from_ne_bytes(raw.get(..8)?.try_into().ok()?), // absptr, (s|u)data8
        _ => return None,
    };
    match enc & 0x70 {
        0x00 => Some(value),                        // absolute
        0x10 => Some(field.wrapping_add(value)),    // pc-relative
        0x30 => Some(hdr_addr.wrapping_add(value)), // data-relative: to the header
        _ => None,
    }
}

fn framehop_module(f: &Found) -> framehop::Module<&'static [u8]> {
    let bias = f.info.bias;
    let svma = |r: &Range<u64>| r.start.wrapping_sub(bias)..r.end.wrapping_sub(bias);
    let mut info = ExplicitModuleSectionInfo {
        base_svma: 0,
        text_svma: Some(svma(&f.exec)),
        ..Default::default()
    };
    if let Some(hdr) = &f.eh_frame_hdr {
        // SAFETY: PT_GNU_EH_FRAME lies in a loaded read-only segment that
        // stays mapped while the object is loaded; the module is dropped
        // when the loader's generation says something was unloaded.
        let hdr_data: &'static [u8] = unsafe {
            core::slice::from_raw_parts(hdr.start as *const u8, (hdr.end - hdr.start) as usize)
        };
        if let Some(eh) = eh_frame_start(hdr_data, hdr.start) {
            // `.eh_frame` has no size in the program headers: it runs at
            // most to the end of the segment holding it, and is only read
            // at offsets the header's table gives.
            if let Some(seg) = f.loads.iter().find(|s| s.contains(&eh)) {
                // SAFETY: `eh` to the segment's end lies in a loaded segment,
                // mapped while the object is loaded; the module is dropped
                // when the loader's generation says something was unloaded.
                let eh_data: &'static [u8] = unsafe {
                    core::slice::from_raw_parts(eh as *const u8, (seg.end - eh) as usize)
                };
                info.eh_frame_hdr_svma = Some(svma(hdr));
                info.eh_frame_hdr = Some(hdr_data);
                info.eh_frame_svma = Some(svma(&(eh..seg.end)));
                info.eh_frame = Some(eh_data);
            }
        }
    }
    framehop::Module::new(String::new(), f.exec.clone(), bias, info)
}

/// framehop rule caches (509 slots each).
const RULE_CACHES: usize = 16;
/// Slots of the learned-step table (16 bytes each: 256 KiB).
const STEP_SLOTS: usize = 1 << 14;

/// What unwinding one frame from a given return address does, learned
/// from framehop (see [`learn`]). A return address's step is a function of
/// the code alone, so it is learned once and then replayed in a few
/// instructions, where framehop would look up its module and rule cache
/// every time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(u8)] // a defined layout: zeroed memory reads as `Unknown` (see `StepTable`)
enum Step {
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
    fn apply(
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
    fn state(&self, key: u64, sp: u64, bp: u64) -> State {
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
            _ => State::unwound(key, sp, bp),
        }
    }
}

/// The kernel's signal return trampoline on x86-64 Linux (glibc's and
/// musl's `__restore_rt`): `mov $15, %rax; syscall` (`rt_sigreturn`). A
/// signal handler returns to it, so it is the handler's return address, as
/// libunwind recognises signal frames. framehop does not: glibc describes
/// the trampoline with DWARF expressions it does not evaluate.
const SIGRETURN: [u8; 9] = [0x48, 0xc7, 0xc0, 0x0f, 0x00, 0x00, 0x00, 0x0f, 0x05];

/// Whether the code at `address` is the signal return trampoline. Reads
/// code only inside a loaded module's executable mapping.
fn is_sigreturn(modules: &[ModuleInfo], address: u64) -> bool {
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
fn signal_step(sp: u64, read: &impl Fn(u64) -> Option<u64>) -> Option<(u64, u64, u64)> {
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
const NOT_RETURN: u64 = 1 << 63;

/// The key of the step from `address` (see [`NOT_RETURN`]).
#[inline(always)]
fn step_key(address: FrameAddress) -> u64 {
    address.address()
        | if address.is_return_address() {
            0
        } else {
            NOT_RETURN
        }
}

/// The frame address a step's key stands for.
fn frame_address(key: u64) -> Option<FrameAddress> {
    if key & NOT_RETURN != 0 {
        Some(FrameAddress::from_instruction_pointer(key & !NOT_RETURN))
    } else {
        FrameAddress::from_return_address(key)
    }
}

/// A word framehop "reads" while a step is learned: distinct for every
/// address, never 0, and far from any probe register, so each register
/// the step computes shows where it came from.
fn probe_word(addr: u64) -> u64 {
    addr.rotate_left(29) ^ 0x5a5a_0000_0000_0001
}

fn probe_address(word: u64) -> u64 {
    (word ^ 0x5a5a_0000_0000_0001).rotate_right(29)
}

/// `value - base` in words, if it is a whole number of them that fits.
fn words_from(base: u64, value: u64) -> Option<i16> {
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
fn learn(
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
enum Stop {
    /// At the end of the stack, or with the frame buffer full.
    End,
    /// At a frame with no learned affine step.
    NotReplayed,
    /// At the first frame past the leaf.
    PastLeaf,
}

/// Learned steps by return address: a direct-mapped table, replaced on a
/// collision.
struct Steps {
    /// A fixed-size array, so that a masked index needs no bounds check.
    slots: Box<StepTable>,
}

type StepTable = [(u64, Step); STEP_SLOTS];

// SAFETY: all-zero bytes are an empty table: key 0 (no code is at address
// 0) and `Step::Unknown`, discriminant 0 of a `repr(u8)` enum.
unsafe impl Zeroable for StepTable {}

impl Steps {
    /// An empty table; `None` without the memory for it. Zeroed by the
    /// allocator, so pages no address hashes to are never touched (fresh
    /// 256 KiB comes from the kernel already zero).
    fn new() -> Option<Self> {
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
    fn replay(
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
    fn replay_while<const LEAF: bool>(
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
    fn slot(&mut self, key: u64) -> &mut (u64, Step) {
        let i = (key.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - STEP_SLOTS.trailing_zeros()))
            as usize;
        &mut self.slots[i % STEP_SLOTS]
    }
}

/// framehop's rule cache for `address`. Its slot in a cache is
/// `address % 509`, so the cache is picked by the quotient: neighbouring
/// addresses spread over all of them.
fn cache_for(
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
fn new_caches(short: impl Fn() -> bool) -> Vec<CacheX86_64<MustNotAllocateDuringUnwind>> {
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
fn framehop_step(
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
struct Emit<'a> {
    out: &'a mut FrameBuf,
    n: usize,
    leaf: bool,
    skip: Range<u64>,
}

impl Emit<'_> {
    fn full(&self) -> bool {
        self.n == MAX_FRAMES
    }

    /// The buffer's unused part, for frames taken from the thread's last
    /// stack (which then add to `n`).
    #[inline(always)]
    fn room(&mut self) -> &mut [MaybeUninit<u64>] {
        &mut self.out[self.n..]
    }

    /// Takes the return address (not 0) of a frame past the leaf; false
    /// when full.
    #[inline(always)]
    fn push_outer(&mut self, ret: u64) -> bool {
        debug_assert!(!self.leaf && ret != 0 && !self.full());
        // SAFETY: `n < MAX_FRAMES`: every push that fills `out` returns
        // false, and no capture pushes again after that.
        unsafe { self.out.get_unchecked_mut(self.n) }.write(ret);
        self.n += 1;
        !self.full()
    }

    /// Takes one return address; false at the end of the stack or when full.
    #[inline(always)]
    fn push(&mut self, ret: u64) -> bool {
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

/// The unwinder, its rule cache and the module list it was built from.
#[allow(missing_debug_implementations)] // framehop's types have no Debug
pub struct StackUnwinder {
    unwinder: Option<UnwinderX86_64<&'static [u8], MustNotAllocateDuringUnwind>>,
    /// framehop's rule caches: each has 509 direct-mapped slots, too few
    /// for an interpreter's thousands of return addresses, so addresses
    /// are spread over several by a hash.
    caches: Vec<CacheX86_64<MustNotAllocateDuringUnwind>>,
    /// Steps learned from framehop; `None` without the memory for them
    /// (then framehop unwinds every frame).
    steps: Option<Steps>,
    /// Threads' last stacks, whose unchanged frames a capture checks
    /// rather than unwinds; `None` without the memory for them. Built from
    /// the learned steps, so replaced with them.
    last_stacks: Option<Box<LastStacks>>,
    generation: Option<Generation>,
    modules: Vec<ModuleInfo>,
    /// Frames in this range (the recorder's own module, in the shim) are
    /// dropped from the leaf end of every stack.
    skip: Range<u64>,
    skip_own_module: bool,
    /// Frames unwound by a learned step (for tests and tuning).
    pub replayed: u64,
    /// Frames taken from a thread's last stack (for tests and tuning).
    pub reused: u64,
    /// The last capture's use of its thread's last stack, if any.
    repeat: Option<Repeat>,
}

impl StackUnwinder {
    /// An unwinder with no modules yet. With `skip_own_module`, the frames
    /// of the module this code is in are left out of stacks (the shim's).
    pub const fn new(skip_own_module: bool) -> Self {
        StackUnwinder {
            unwinder: None,
            caches: Vec::new(),
            steps: None,
            last_stacks: None,
            generation: None,
            modules: Vec::new(),
            skip: 0..0,
            skip_own_module,
            replayed: 0,
            reused: 0,
            repeat: None,
        }
    }

    /// Whether the module list is that of loader generation `g`.
    pub fn is_current(&self, g: Generation) -> bool {
        self.generation == Some(g) && !self.caches.is_empty()
    }

    /// Replaces the module list (built by [`loaded_modules`] for `g`).
    pub fn install(
        &mut self,
        g: Generation,
        (infos, modules): (Vec<ModuleInfo>, Vec<framehop::Module<&'static [u8]>>),
    ) {
        let mut unwinder = UnwinderX86_64::new();
        for m in modules {
            unwinder.add_module(m);
        }
        let here = StackUnwinder::capture as *const () as u64;
        self.skip = match infos.iter().find(|m| m.range.contains(&here)) {
            Some(m) if self.skip_own_module => m.range.clone(),
            _ => 0..0,
        };
        self.unwinder = Some(unwinder);
        self.modules = infos;
        // Learned steps may belong to code that is gone. A new table
        // rather than a cleared one: the old one is given back before the
        // new is asked for, and untouched pages of the new stay unused.
        self.steps = None;
        self.last_stacks = None;
        self.steps = Steps::new();
        self.last_stacks = zeroed_box::<LastStacks>();
        self.generation = Some(g);
        if self.caches.is_empty() {
            self.caches = new_caches(super::stacks::is_short_of_memory);
        }
    }

    /// Which last stack the latest [`capture`](Self::capture) used, and
    /// whether its return addresses were all that stack's: the same call
    /// stack as the capture before it in that slot. `None` if it used none.
    pub fn repeat(&self) -> Option<Repeat> {
        self.repeat
    }

    /// The executable mappings the unwinder knows.
    pub fn modules(&self) -> &[ModuleInfo] {
        &self.modules
    }

    /// Writes the calling thread's return addresses into `out`, the
    /// innermost first and the skipped module's frames left out, reading
    /// stack memory only in `stack` (the thread's stack mapping). Returns
    /// how many it wrote.
    ///
    /// The first frame is framehop's; every other starts at a return
    /// address, whose step is learned the first time it is seen (see
    /// [`learn`]) and replayed from then on. Steps that are not affine in
    /// the stack and frame pointers go to framehop each time. Those two
    /// registers are all framehop tracks on x86-64 too, so a replayed step
    /// loses nothing it would have kept. Frames the thread's last capture
    /// also had are checked rather than unwound (see [`super::last_stack`]).
    #[inline(never)]
    pub fn capture<'b>(&mut self, stack: Range<u64>, out: &'b mut FrameBuf) -> &'b [u64] {
        let frames = self.unwind(stack.clone(), out, true, true);
        // Debug builds unwind every frame again and compare.
        #[cfg(debug_assertions)]
        {
            let mut again = frame_buf();
            let unwound = self.unwind(stack, &mut again, true, false);
            debug_assert_eq!(frames, unwound, "frames taken from the last stack differ");
        }
        frames
    }

    /// Unwinds with learned steps if `replay`, checking frames of the
    /// thread's last stack rather than unwinding them if `use_last` too
    /// (and only then noting its [`repeat`](Self::repeat)).
    #[inline(always)]
    fn unwind<'b>(
        &mut self,
        stack: Range<u64>,
        out: &'b mut FrameBuf,
        replay: bool,
        use_last: bool,
    ) -> &'b [u64] {
        if use_last {
            self.repeat = None;
        }
        let Some(unwinder) = self.unwinder.as_ref() else {
            return &[];
        };
        if self.caches.is_empty() {
            return &[];
        }
        let caches = &mut self.caches;
        let (pc, sp, bp): (u64, u64, u64);
        // SAFETY: reads three registers; no memory is touched.
        unsafe {
            core::arch::asm!(
                "lea {pc}, [rip]",
                "mov {sp}, rsp",
                "mov {bp}, rbp",
                pc = out(reg) pc,
                sp = out(reg) sp,
                bp = out(reg) bp,
                options(nomem, nostack, preserves_flags),
            );
        }
        // Only the live part of the stack: from here up to its top.
        let lo = sp.max(stack.start).next_multiple_of(8);
        // Words may start from `lo` to `hi - 8`: `addr - lo` at most `span`.
        let Some(span) = stack.end.checked_sub(lo).and_then(|n| n.checked_sub(8)) else {
            return &[];
        };
        // With `lo` a multiple of 8, one comparison checks both the range
        // and the alignment: rotating puts a misaligned offset's low bits at
        // the top, above any span.
        let words = span / 8;
        let read = move |addr: u64| -> Option<u64> {
            if addr.wrapping_sub(lo).rotate_right(3) <= words {
                // SAFETY: inside this thread's own stack, which is mapped
                // from the current frame up to its top, and aligned (as
                // `lo` is).
                Some(unsafe { core::ptr::read_volatile(addr as *const u64) })
            } else {
                None
            }
        };
        let framehop_step = |caches: &mut [_], address: FrameAddress, sp, bp| {
            framehop_step(unwinder, caches, &read, address, sp, bp)
        };
        let mut emit = Emit {
            out: &mut *out,
            n: 0,
            leaf: true,
            skip: self.skip.clone(),
        };
        let modules = &self.modules;
        let mut steps = if replay { self.steps.as_mut() } else { None };
        let mut reuse = match (&steps, self.last_stacks.as_deref_mut()) {
            (Some(_), Some(last)) if use_last => Some(last.reuse(stack.clone())),
            _ => None,
        };
        let mut address = FrameAddress::from_instruction_pointer(pc);
        let (mut sp, mut bp) = (sp, bp);
        let mut replayed = 0;
        loop {
            if let Some(steps) = steps.as_deref_mut() {
                let mut at = step_key(address);
                let end = steps.replay(
                    (&mut at, &mut sp, &mut bp),
                    &read,
                    &mut emit,
                    &mut reuse,
                    &mut replayed,
                );
                if end {
                    break;
                }
                // A return address `emit` took (not 0), or the key it
                // started from.
                let Some(a) = frame_address(at) else {
                    break;
                };
                address = a;
            }
            // Past the leaf, the thread's last stack may have this state
            // (the replay loop has looked already, unless it stopped at
            // the leaf's end).
            if let (false, Some(r)) = (emit.leaf, reuse.as_mut()) {
                let mut key = step_key(address);
                let (follow, written) = r.follow((&mut key, &mut sp, &mut bp), &read, emit.room());
                emit.n += written;
                match follow {
                    Follow::Full => break,
                    Follow::Moved => match frame_address(key) {
                        Some(a) => address = a,
                        None => break,
                    },
                    Follow::New => {}
                }
            }
            let next = match steps.as_deref_mut() {
                Some(steps) => {
                    let key = step_key(address);
                    let slot = steps.slot(key);
                    if slot.0 != key {
                        let cache = cache_for(caches, address.address());
                        let step = if key == address.address() && is_sigreturn(modules, key) {
                            Step::Signal
                        } else {
                            learn(unwinder, cache, address)
                        };
                        *slot = (key, step);
                    }
                    if let (false, Some(r)) = (emit.leaf, reuse.as_mut()) {
                        r.record(slot.1.state(key, sp, bp));
                    }
                    match slot.1 {
                        Step::Affine { .. } => {
                            replayed += 1;
                            slot.1.apply(sp, bp, &read)
                        }
                        Step::End | Step::Unknown => None,
                        Step::Signal => signal_step(sp, &read),
                        Step::Framehop => framehop_step(caches, address, sp, bp),
                    }
                }
                None if address.is_return_address() && is_sigreturn(modules, address.address()) => {
                    signal_step(sp, &read)
                }
                None => framehop_step(caches, address, sp, bp),
            };
            // The caller's key: a signal frame's is the interrupted
            // instruction, not a return address.
            let Some((caller, caller_sp, caller_bp)) = next else {
                break;
            };
            if !emit.push(caller & !NOT_RETURN) {
                break;
            }
            let Some(a) = frame_address(caller) else {
                break;
            };
            (address, sp, bp) = (a, caller_sp, caller_bp);
        }
        self.replayed += replayed;
        let n = emit.n;
        if use_last {
            self.repeat = reuse.map(|r| {
                self.reused += r.reused;
                r.finish(n)
            });
        }
        // SAFETY: `Emit::push` wrote `out[0..n]`, in order, and nothing else
        // has touched `out` since.
        unsafe { core::slice::from_raw_parts(out.as_ptr().cast::<u64>(), n) }
    }
}

/// The memory mapping holding the calling thread's stack pointer: its
/// lowest address and one past its highest. Read from `/proc/self/maps`
/// with plain system calls and a buffer on the stack, so it allocates
/// nothing (`pthread_getattr_np` would: it reads the same file through
/// stdio for the main thread, and allocates a CPU set for the others).
pub fn thread_stack() -> Option<Range<u64>> {
    let marker = 0u8;
    let sp = &marker as *const u8 as u64;
    // SAFETY: a NUL-terminated path; the descriptor is closed below.
    let fd = unsafe {
        libc::open(
            c"/proc/self/maps".as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return None;
    }
    let mut buf = [0u8; 4096];
    let mut have = 0usize;
    let mut found = None;
    'read: loop {
        // SAFETY: reading into the unused tail of `buf`.
        let n = unsafe { libc::read(fd, buf[have..].as_mut_ptr().cast(), buf.len() - have) };
        if n <= 0 {
            break;
        }
        have += n as usize;
        let mut start = 0;
        while let Some(nl) = buf[start..have].iter().position(|&b| b == b'\n') {
            if let Some(r) = mapping_range(&buf[start..start + nl])
                && r.contains(&sp)
            {
                found = Some(r);
                break 'read;
            }
            start += nl + 1;
        }
        if start == 0 && have == buf.len() {
            // A line longer than the buffer (a very long path): its
            // range is at the start; keep only that.
            if let Some(r) = mapping_range(&buf[..have])
                && r.contains(&sp)
            {
                found = Some(r);
                break;
            }
            have = 0;
            continue;
        }
        buf.copy_within(start..have, 0);
        have -= start;
    }
    // SAFETY: our descriptor.
    unsafe { libc::close(fd) };
    found
}

/// The address range at the start of a `/proc/self/maps` line.
fn mapping_range(line: &[u8]) -> Option<Range<u64>> {
    let end = line.iter().position(|&b| b == b' ')?;
    let range = core::str::from_utf8(&line[..end]).ok()?;
    let (a, b) = range.split_once('-')?;
    Some(u64::from_str_radix(a, 16).ok()?..u64::from_str_radix(b, 16).ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Captures `depth` frames of itself below the caller, with learned
    /// steps if `replay`, else with framehop alone.
    #[inline(never)]
    fn deeper(
        u: &mut StackUnwinder,
        stack: Range<u64>,
        depth: u32,
        out: &mut Vec<u64>,
        replay: bool,
    ) -> usize {
        // black_box after each call: no tail calls, one frame per level.
        let n = if depth == 0 {
            let mut buf = frame_buf();
            let frames = if replay {
                u.capture(stack, &mut buf)
            } else {
                u.capture_framehop_only(stack, &mut buf)
            };
            out.clear();
            out.extend_from_slice(frames);
            frames.len()
        } else {
            deeper(u, stack, depth - 1, out, replay)
        };
        core::hint::black_box(n)
    }

    /// Rule caches are made while memory lasts, and the unwinder works
    /// with however many there are: with none it takes no stack.
    #[test]
    fn rule_caches_stop_where_memory_runs_short() {
        let asked = core::cell::Cell::new(0);
        let short_after_three = || {
            asked.set(asked.get() + 1);
            asked.get() > 3
        };
        let mut u = StackUnwinder::new(false);
        u.install(generation(), loaded_modules());
        u.caches = new_caches(short_after_three);
        assert_eq!(u.caches.len(), 3);
        let stack = thread_stack().unwrap();
        let mut out = Vec::new();
        for replay in [false, true] {
            let n = deeper(&mut u, stack.clone(), 5, &mut out, replay);
            assert!(n > 5, "{replay}: {out:x?}");
        }
        u.caches = new_caches(|| true);
        assert!(u.caches.is_empty());
        assert_eq!(deeper(&mut u, stack, 5, &mut out, true), 0);
    }

    #[test]
    fn captures_the_callers() {
        let mut u = StackUnwinder::new(false);
        u.install(generation(), loaded_modules());
        assert!(
            u.modules()
                .iter()
                .any(|m| m.range.contains(&(deeper as *const () as u64)))
        );
        let stack = thread_stack().unwrap();
        let mut out = Vec::new();
        let n5 = deeper(&mut u, stack.clone(), 5, &mut out, true);
        let n10 = deeper(&mut u, stack, 10, &mut out, true);
        // Five more frames of `deeper`, and the stack reaches past it.
        assert_eq!(n10, n5 + 5, "{:x?}", &out[..n10]);
        let in_deeper = |a: u64| {
            let f = deeper as *const () as u64;
            a > f && a < f + 4096
        };
        assert!(
            out[..11].iter().all(|&a| in_deeper(a)),
            "{:x?}",
            &out[..n10]
        );
        assert!(!in_deeper(out[11]));
    }

    impl StackUnwinder {
        /// [`StackUnwinder::capture`] with framehop unwinding every frame.
        #[inline(never)]
        fn capture_framehop_only<'b>(
            &mut self,
            stack: Range<u64>,
            out: &'b mut FrameBuf,
        ) -> &'b [u64] {
            self.unwind(stack, out, false, false)
        }
    }

    #[test]
    fn replayed_steps_give_framehops_stacks() {
        let mut u = StackUnwinder::new(false);
        u.install(generation(), loaded_modules());
        let stack = thread_stack().unwrap();
        let mut previous = None;
        for depth in [3, 0, 7, 3, 12, 12, 1] {
            // Both captures from one call site, so all frames but the first
            // (where `deeper` calls the capture) are the same: `deeper`,
            // this test, the test harness, std, libc.
            let [replayed, plain] = [true, false].map(|replay| {
                let mut out = Vec::new();
                deeper(&mut u, stack.clone(), depth, &mut out, replay);
                out
            });
            assert_eq!(
                replayed[1..],
                plain[1..],
                "depth {depth}: {replayed:x?} against {plain:x?}"
            );
            assert!(replayed.len() > depth as usize + 3, "{replayed:x?}");
            // Only the second capture at depth 12 is the one before it
            // again (framehop's captures leave the last stack alone).
            let repeat = u.repeat().expect("a capture with the last stacks");
            assert_eq!(repeat.same, previous == Some(depth), "depth {depth}");
            previous = Some(depth);
        }
        assert!(u.replayed > 20, "{} frames replayed", u.replayed);
    }

    /// Calls [`deeper`] from its own frame: two instances have the same
    /// frame size, so the frames inside them are at the same stack
    /// addresses and differ only in the return address into each.
    #[inline(never)]
    fn from<const SITE: u32>(
        u: &mut StackUnwinder,
        stack: Range<u64>,
        out: &mut Vec<u64>,
        replay: bool,
    ) {
        core::hint::black_box(deeper(u, stack, 4, out, replay));
    }

    #[test]
    fn frames_of_the_last_stack_are_checked_not_trusted() {
        let mut u = StackUnwinder::new(false);
        u.install(generation(), loaded_modules());
        let stack = thread_stack().unwrap();
        let mut seen = Vec::new();
        for round in 0..6 {
            // The same inner frames at the same addresses, under a
            // different caller every other round; from one call site, so
            // that only the first frame differs from framehop's.
            let [replayed, plain] = [true, false].map(|replay| {
                let mut out = Vec::new();
                if round % 2 == 0 {
                    from::<1>(&mut u, stack.clone(), &mut out, replay);
                } else {
                    from::<2>(&mut u, stack.clone(), &mut out, replay);
                }
                out
            });
            assert_eq!(
                replayed[1..],
                plain[1..],
                "round {round}: {replayed:x?} against {plain:x?}"
            );
            seen.push(replayed);
        }
        assert_ne!(seen[0][1..], seen[1][1..], "the callers differ");
        assert_eq!(seen[0][1..], seen[2][1..]);
        assert!(u.reused > 0, "nothing was taken from the last stack");
    }

    #[test]
    fn a_new_step_table_is_empty() {
        let mut steps = Steps::new().unwrap();
        assert!(steps.slots.iter().all(|&slot| slot == (0, Step::Unknown)));
        assert_eq!(*steps.slot(0x1234), (0, Step::Unknown));
    }

    #[test]
    fn learns_affine_steps_and_leaves_the_rest_to_framehop() {
        let mut u = StackUnwinder::new(false);
        u.install(generation(), loaded_modules());
        // A return address into `deeper` (the instruction after its call to
        // itself): an ordinary Rust frame, affine in the stack pointer.
        let stack = thread_stack().unwrap();
        let mut out = Vec::new();
        deeper(&mut u, stack, 2, &mut out, true);
        let unwinder = u.unwinder.as_ref().unwrap();
        let ret = out[1];
        let address = FrameAddress::from_return_address(ret).unwrap();
        let step = learn(unwinder, &mut CacheX86_64::new_in(), address);
        assert!(
            matches!(step, Step::Affine { cfa_on_bp: false, cfa_by_8, .. } if cfa_by_8 > 0),
            "{step:?}"
        );
        // No module holds address 16: framehop falls back to frame
        // pointers there, which is affine in the frame pointer.
        let nowhere = FrameAddress::from_return_address(16).unwrap();
        let step = learn(unwinder, &mut CacheX86_64::new_in(), nowhere);
        assert_eq!(
            step,
            Step::Affine {
                cfa_on_bp: true,
                cfa_by_8: 2,
                bp_saved: true,
                bp_on_bp: true,
                bp_by_8: 0
            }
        );
    }

    /// The unwinder and both captures of [`unwinds_through_a_signal_frame`],
    /// handed to and from its signal handler.
    static SIGNALLED: std::sync::Mutex<Option<SignalCaptures>> = std::sync::Mutex::new(None);

    /// The unwinder, its capture with learned steps, and framehop's own.
    type SignalCaptures = (StackUnwinder, Vec<u64>, Vec<u64>);

    #[inline(never)]
    fn capture_both(u: &mut StackUnwinder, replayed: &mut Vec<u64>, plain: &mut Vec<u64>) {
        let stack = thread_stack().unwrap();
        let mut buf = frame_buf();
        replayed.extend_from_slice(u.capture(stack.clone(), &mut buf));
        plain.extend_from_slice(u.capture_framehop_only(stack, &mut buf));
    }

    extern "C" fn on_signal(_: libc::c_int) {
        let mut state = SIGNALLED.lock().unwrap();
        let (u, replayed, plain) = state.as_mut().unwrap();
        capture_both(u, replayed, plain);
    }

    #[inline(never)]
    fn raise_here() -> usize {
        // SAFETY: the handler is installed; raise returns after it runs.
        unsafe { libc::raise(libc::SIGUSR1) };
        core::hint::black_box(raise_here as *const () as usize)
    }

    #[test]
    fn unwinds_through_a_signal_frame() {
        let mut u = StackUnwinder::new(false);
        u.install(generation(), loaded_modules());
        *SIGNALLED.lock().unwrap() = Some((u, Vec::new(), Vec::new()));
        // SAFETY: a plain handler for a signal nothing else in the test
        // binary uses; it is raised synchronously below.
        unsafe { libc::signal(libc::SIGUSR1, on_signal as *const () as usize) };
        // Twice: the second time every step is already learned.
        for _ in 0..2 {
            {
                let mut state = SIGNALLED.lock().unwrap();
                let (_, replayed, plain) = state.as_mut().unwrap();
                replayed.clear();
                plain.clear();
            }
            raise_here();
            let state = SIGNALLED.lock().unwrap();
            let (u, replayed, plain) = state.as_ref().unwrap();
            // The first frame is the call site inside `capture_both`, which
            // differs; from the handler out the frames are the same.
            assert_eq!(
                replayed[1..],
                plain[1..],
                "{replayed:x?} against {plain:x?}"
            );
            // The handler returns to the kernel's trampoline; the frames
            // outside it are those the signal interrupted: `raise` in libc,
            // then the call in `raise_here` (a few bytes in: it is short).
            let t = replayed
                .iter()
                .position(|&a| is_sigreturn(u.modules(), a))
                .unwrap_or_else(|| panic!("no signal frame: {replayed:x?}"));
            let f = raise_here as *const () as u64;
            let in_raise_here = |a: u64| a > f && a < f + 64;
            let in_here = |a: u64| {
                u.modules()
                    .iter()
                    .any(|m| m.range.contains(&a) && m.range.contains(&f))
            };
            assert!(
                !in_here(replayed[t + 1]) && replayed[t + 2..].iter().any(|&a| in_raise_here(a)),
                "the frames the signal interrupted are missing: {replayed:x?}"
            );
        }
    }

    #[test]
    fn reads_the_build_id_and_eh_frame() {
        let (infos, _) = loaded_modules();
        let libc_mod = infos
            .iter()
            .find(|m| m.path.windows(4).any(|w| w == b"libc"))
            .expect("libc is loaded");
        assert_eq!(
            libc_mod.build_id.len(),
            20,
            "Debian builds carry a SHA-1 build id"
        );
        let g = generation();
        assert!(g.0 > 0, "{g:?}");
    }
}
