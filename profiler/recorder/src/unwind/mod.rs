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

mod modules;
mod steps;
#[cfg(test)]
mod tests;

pub use modules::*;
use steps::*;

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
