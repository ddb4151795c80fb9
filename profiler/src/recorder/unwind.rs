//! Capturing the calling thread's stack from inside an allocation call, on
//! binaries without frame pointers: DWARF CFI from each loaded module's
//! `.eh_frame` (indexed by `.eh_frame_hdr`), evaluated by the `framehop`
//! crate with its rule cache, reading nothing but the thread's own stack.
//!
//! The module list comes from `dl_iterate_phdr` and is rebuilt when the
//! loader's load/unload counters change (dlopen, dlclose). That call takes
//! the loader's lock, so it is never made while holding the stack lock: a
//! thread inside `dlopen` that allocates would otherwise wait for us while
//! we wait for it.
//!
//! Everything here allocates only while rebuilding the module list (through
//! the host's global allocator, which in the shim bypasses the hooks);
//! unwinding itself does not allocate (`MustNotAllocateDuringUnwind`).

use core::ffi::{c_int, c_void};
use core::mem::MaybeUninit;
use core::ops::Range;

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

/// The loader's (adds, subs) counters: they change on every dlopen/dlclose.
pub type Generation = (u64, u64);

/// Reads the loader's generation. Takes the loader's lock: never call it
/// while holding a lock an allocating thread may wait for.
pub fn generation() -> Generation {
    unsafe extern "C" fn first(
        info: *mut libc::dl_phdr_info,
        size: usize,
        out: *mut c_void,
    ) -> c_int {
        // SAFETY: `info` is valid for the callback; `out` is our Generation.
        unsafe {
            let out = &mut *(out as *mut Generation);
            if size >= core::mem::offset_of!(libc::dl_phdr_info, dlpi_subs) + 8 {
                *out = ((*info).dlpi_adds, (*info).dlpi_subs);
            }
        }
        1 // one object is enough: the counters are global
    }
    let mut g: Generation = (0, 0);
    // SAFETY: the callback only writes `g`, which outlives the call.
    unsafe { libc::dl_iterate_phdr(Some(first), &mut g as *mut Generation as *mut c_void) };
    g
}

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
/// Steps remembered per capture (the frames plus the shim's own).
const MEMO_STEPS: usize = MAX_FRAMES + 16;
/// Threads whose last capture is remembered (by stack top).
const MEMO_SLOTS: usize = 8;
/// Stack words one unwinding step may read and still be remembered.
const MAX_READS: usize = 3;

/// One unwinding step: the registers it started from, the stack words it
/// read, and the return address it found (0: the end of the stack).
#[derive(Clone, Copy, Default)]
struct Step {
    pc: u64,
    sp: u64,
    bp: u64,
    ret: u64,
    reads: [(u64, u64); MAX_READS],
    /// Reads made; more than `MAX_READS` makes the step unverifiable.
    nreads: u8,
}

impl Step {
    fn note_read(&mut self, addr: u64, value: u64) {
        if let Some(r) = self.reads.get_mut(self.nreads as usize) {
            *r = (addr, value);
        }
        self.nreads = self.nreads.saturating_add(1);
    }
}

/// Whether every stack word read by `steps` still holds what was read.
///
/// # Safety
/// `readable` must only accept mapped addresses.
unsafe fn still_valid(steps: &[Step], readable: &impl Fn(u64) -> bool) -> bool {
    steps.iter().all(|s| {
        (s.nreads as usize) <= MAX_READS
            && s.reads[..s.nreads as usize].iter().all(|&(a, v)| {
                // SAFETY: checked readable (the caller's promise).
                readable(a) && unsafe { core::ptr::read_volatile(a as *const u64) } == v
            })
    })
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

    /// Takes one return address; false at the end of the stack or when full.
    fn push(&mut self, ret: u64) -> bool {
        if ret == 0 {
            return false;
        }
        if self.leaf && self.skip.contains(&ret) {
            return true;
        }
        self.leaf = false;
        self.out[self.n].write(ret);
        self.n += 1;
        !self.full()
    }
}

/// The last capture of a thread, double-buffered: the previous steps are
/// read while the new ones are written.
struct Memo {
    stack_top: u64,
    steps: [Vec<Step>; 2],
    len: [usize; 2],
    current: usize,
}

impl Memo {
    /// The remembered steps, and room for the new ones.
    fn split(&mut self) -> (&[Step], &mut [Step]) {
        let [a, b] = &mut self.steps;
        let (old, new) = if self.current == 0 { (a, b) } else { (b, a) };
        if new.is_empty() {
            new.resize(MEMO_STEPS, Step::default());
        }
        (&old[..self.len[self.current]], &mut new[..])
    }

    fn finish(&mut self, steps: usize) {
        self.current ^= 1;
        self.len[self.current] = steps;
    }
}

/// The remembered captures of up to `MEMO_SLOTS` threads.
struct Memos {
    slots: Vec<Memo>,
    next_victim: usize,
}

impl Memos {
    const fn new() -> Self {
        Memos {
            slots: Vec::new(),
            next_victim: 0,
        }
    }

    /// The slot of the thread whose stack ends at `top`, taking over the
    /// oldest-assigned one if it has none.
    fn slot(&mut self, top: u64) -> &mut Memo {
        if let Some(i) = self.slots.iter().position(|m| m.stack_top == top) {
            return &mut self.slots[i];
        }
        let fresh = Memo {
            stack_top: top,
            steps: [Vec::new(), Vec::new()],
            len: [0, 0],
            current: 0,
        };
        if self.slots.len() < MEMO_SLOTS {
            self.slots.push(fresh);
            return self.slots.last_mut().expect("just pushed");
        }
        let i = self.next_victim % MEMO_SLOTS;
        self.next_victim += 1;
        let m = &mut self.slots[i];
        m.stack_top = top;
        m.len = [0, 0];
        m
    }

    fn clear(&mut self) {
        for m in &mut self.slots {
            m.len = [0, 0];
        }
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
    generation: Option<Generation>,
    modules: Vec<ModuleInfo>,
    /// Frames in this range (the recorder's own module, in the shim) are
    /// dropped from the leaf end of every stack.
    skip: Range<u64>,
    skip_own_module: bool,
    memos: Memos,
    /// Captures that reused remembered steps (for tests and tuning).
    pub memo_hits: u64,
}

impl StackUnwinder {
    /// An unwinder with no modules yet. With `skip_own_module`, the frames
    /// of the module this code is in are left out of stacks (the shim's).
    pub const fn new(skip_own_module: bool) -> Self {
        StackUnwinder {
            unwinder: None,
            caches: Vec::new(),
            generation: None,
            modules: Vec::new(),
            skip: 0..0,
            skip_own_module,
            memos: Memos::new(),
            memo_hits: 0,
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
        // Remembered steps may refer to code that is gone.
        self.memos.clear();
        self.generation = Some(g);
        if self.caches.is_empty() {
            self.caches = (0..RULE_CACHES).map(|_| CacheX86_64::new_in()).collect();
        }
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
    /// Consecutive stacks of a thread share their outer frames (an
    /// interpreter's loop, a server's request handler), so each capture is
    /// remembered: per step, the registers before it, the stack words it
    /// read and the return address it found. When a step starts from the
    /// same registers as a remembered one, and every stack word the
    /// remembered steps from there on read still holds the same value, those
    /// steps would compute the same frames again (unwinding is a function of
    /// the registers and the words read), so they are taken as they are.
    #[inline(never)]
    pub fn capture<'b>(&mut self, stack: Range<u64>, out: &'b mut FrameBuf) -> &'b [u64] {
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
        let lo = sp.max(stack.start);
        let hi = stack.end;
        let readable = move |addr: u64| {
            addr >= lo && addr.checked_add(8).is_some_and(|e| e <= hi) && addr % 8 == 0
        };
        let memo = self.memos.slot(hi);
        let (old, new) = memo.split();
        let mut emit = Emit {
            out: &mut *out,
            n: 0,
            leaf: true,
            skip: self.skip.clone(),
        };
        let mut regs = UnwindRegsX86_64::new(pc, sp, bp);
        let mut address = FrameAddress::from_instruction_pointer(pc);
        let mut cursor = 0;
        let mut steps = 0;
        let mut same_stack = false;
        while steps < MEMO_STEPS && !emit.full() {
            // A remembered step from the same registers?
            while cursor < old.len() && old[cursor].sp < regs.sp() {
                cursor += 1;
            }
            if let Some(s) = old.get(cursor) {
                let same = s.pc == address.address() && s.sp == regs.sp() && s.bp == regs.bp();
                // SAFETY: `readable` bounds every read to this thread's
                // live stack.
                if same && unsafe { still_valid(&old[cursor..], &readable) } {
                    self.memo_hits += 1;
                    if steps == 0 && cursor == 0 {
                        // The whole remembered stack again (a loop that
                        // allocates from one place): it stays remembered
                        // where it is, rather than being copied over.
                        same_stack = true;
                        for s in old {
                            if !emit.push(s.ret) {
                                break;
                            }
                        }
                        break;
                    }
                    for s in &old[cursor..] {
                        if steps < MEMO_STEPS {
                            new[steps] = *s;
                            steps += 1;
                        }
                        if !emit.push(s.ret) {
                            break;
                        }
                    }
                    break;
                }
            }
            let mut step = Step {
                pc: address.address(),
                sp: regs.sp(),
                bp: regs.bp(),
                ..Step::default()
            };
            let mut read = |addr: u64| -> Result<u64, ()> {
                if !readable(addr) {
                    return Err(());
                }
                // SAFETY: inside this thread's own stack, which is mapped
                // from the current frame up to its top.
                let v = unsafe { core::ptr::read_volatile(addr as *const u64) };
                step.note_read(addr, v);
                Ok(v)
            };
            // framehop's slot is address % 509: pick the cache by the
            // quotient, so neighbouring addresses spread over all of them.
            let cache = &mut caches[(address.address() / 509) as usize % RULE_CACHES];
            step.ret = match unwinder.unwind_frame(address, &mut regs, cache, &mut read) {
                Ok(Some(ret)) => ret,
                _ => 0,
            };
            new[steps] = step;
            steps += 1;
            if !emit.push(step.ret) {
                break;
            }
            address = FrameAddress::from_return_address(step.ret).expect("non-zero");
        }
        if !same_stack {
            memo.finish(steps);
        }
        let n = emit.n;
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
            if let Some(r) = mapping_range(&buf[start..start + nl]) {
                if r.contains(&sp) {
                    found = Some(r);
                    break 'read;
                }
            }
            start += nl + 1;
        }
        if start == 0 && have == buf.len() {
            // A line longer than the buffer (a very long path): its
            // range is at the start; keep only that.
            if let Some(r) = mapping_range(&buf[..have]) {
                if r.contains(&sp) {
                    found = Some(r);
                    break;
                }
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

    #[inline(never)]
    fn deeper(u: &mut StackUnwinder, stack: Range<u64>, depth: u32, out: &mut Vec<u64>) -> usize {
        // black_box after each call: no tail calls, one frame per level.
        let n = if depth == 0 {
            let mut buf = frame_buf();
            let frames = u.capture(stack, &mut buf);
            out.clear();
            out.extend_from_slice(frames);
            frames.len()
        } else {
            deeper(u, stack, depth - 1, out)
        };
        core::hint::black_box(n)
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
        let n5 = deeper(&mut u, stack.clone(), 5, &mut out);
        let n10 = deeper(&mut u, stack, 10, &mut out);
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

    #[test]
    fn remembered_steps_give_the_same_stacks() {
        let mut u = StackUnwinder::new(false);
        u.install(generation(), loaded_modules());
        let stack = thread_stack().unwrap();
        let mut out = Vec::new();
        // One call site for every capture, so equal depths mean equal
        // stacks; the memo is cleared before some of them.
        let plan = [
            (3, true),
            (3, false),
            (7, false),
            (3, false),
            (12, true),
            (12, false),
        ];
        let plan = plan
            .iter()
            .chain(&[(0, false), (7, true), (2, false), (9, false)]);
        let mut seen: std::collections::HashMap<u32, Vec<u64>> = Default::default();
        for &(depth, clear) in plan.clone().chain(plan) {
            if clear {
                u.memos.clear();
            }
            let n = deeper(&mut u, stack.clone(), depth, &mut out);
            let want = seen.entry(depth).or_insert_with(|| out[..n].to_vec());
            assert_eq!(&out[..n], &want[..], "depth {depth}");
        }
        assert!(
            u.memo_hits >= 10,
            "{} of 20 captures reused steps",
            u.memo_hits
        );
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
