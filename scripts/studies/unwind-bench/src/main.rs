//! unwind-bench: the in-process cost of capturing one call stack (return
//! addresses only) from deep inside code built the way distributions build it
//! (gcc -O2, no frame pointers, .eh_frame present), for five unwinders:
//!
//! * `gcc`: libgcc's `_Unwind_Backtrace` (under glibc `backtrace()` and
//!   Rust's `backtrace` crate on Linux)
//! * `glibc`: glibc `backtrace()`, for reference
//! * `libunwind`: libunwind's `unw_backtrace`, `UNW_CACHE_PER_THREAD` as in heaptrack
//! * `framehop`: framehop 0.16 `UnwinderX86_64` over the in-memory
//!   .eh_frame/.eh_frame_hdr of every module (dl_iterate_phdr),
//!   `CacheX86_64<MustNotAllocateDuringUnwind>`
//! * `allocmux`: allocmux's own `StackUnwinder`, which learns each return
//!   address's step from framehop once and replays it after that
//! * `fp`: frame-pointer walking, on a copy of the chain built with
//!   -fno-omit-frame-pointer (what it would cost with frame pointers)
//!
//! The C chain (c/chain.c, built by build_c.sh) puts D frames on the stack and
//! calls back into `capture()` here, which runs the selected unwinder into a
//! fixed buffer.  See RESULTS.md and run.sh.
//!
//! All unwinder libraries are reached through dlopen/dlsym on purpose:
//! libunwind.so.8 itself exports `_Unwind_Backtrace` and a weak `backtrace`,
//! so linking it with -lunwind could silently route the "libgcc" and "glibc"
//! measurements into libunwind.  We load it RTLD_LOCAL and take every symbol
//! from the library it is meant to come from (printed at start-up).

use std::arch::asm;
use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::time::Instant;

use allocmux_recorder::unwind::{self, StackUnwinder};
use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64};
use framehop::{ExplicitModuleSectionInfo, Module, MustNotAllocateDuringUnwind, Unwinder};

/// Capacity of the capture buffer; deeper stacks are truncated (none here).
const MAX_FRAMES: usize = 256;

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Method {
    /// Calls the chain with an empty capture: the harness cost, subtracted.
    None,
    Gcc,
    Glibc,
    Libunwind,
    Framehop,
    Allocmux,
    Fp,
}

impl Method {
    const TIMED: [Method; 6] = [
        Method::Gcc,
        Method::Glibc,
        Method::Libunwind,
        Method::Framehop,
        Method::Allocmux,
        Method::Fp,
    ];

    fn name(self) -> &'static str {
        match self {
            Method::None => "none",
            Method::Gcc => "gcc",
            Method::Glibc => "glibc",
            Method::Libunwind => "libunwind",
            Method::Framehop => "framehop",
            Method::Allocmux => "allocmux",
            Method::Fp => "fp",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Method::None => "(empty capture)",
            Method::Gcc => "libgcc `_Unwind_Backtrace`",
            Method::Glibc => "glibc `backtrace()`",
            Method::Libunwind => "libunwind `unw_backtrace` (per-thread cache)",
            Method::Framehop => "framehop 0.16 (MustNotAllocate)",
            Method::Allocmux => "allocmux `StackUnwinder` (learned steps)",
            Method::Fp => "frame pointers (FP copy of chain)",
        }
    }

    fn parse(s: &str) -> Option<Method> {
        [Method::None]
            .into_iter()
            .chain(Method::TIMED)
            .find(|m| m.name() == s)
    }

    /// The frame-pointer walker runs on the -fno-omit-frame-pointer copy of
    /// the chain; everything else on the distribution-style -O2 copy.
    fn default_chain(self) -> Chain {
        if self == Method::Fp {
            Chain::Fp
        } else {
            Chain::O2
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Chain {
    O2,
    Fp,
}

type CaptureFn = extern "C" fn(*mut c_void);
type ChainFn = unsafe extern "C" fn(c_int, CaptureFn, *mut c_void) -> u64;
type UnwindTraceFn = extern "C" fn(*mut c_void, *mut c_void) -> c_int;
type FhUnwinder = UnwinderX86_64<&'static [u8], MustNotAllocateDuringUnwind>;
type FhCache = CacheX86_64<MustNotAllocateDuringUnwind>;

/// Everything resolved once at start-up.
struct Api {
    unwind_backtrace: unsafe extern "C" fn(UnwindTraceFn, *mut c_void) -> c_int,
    unwind_get_ip: unsafe extern "C" fn(*mut c_void) -> usize,
    glibc_backtrace: unsafe extern "C" fn(*mut *mut c_void, c_int) -> c_int,
    unw_backtrace: unsafe extern "C" fn(*mut *mut c_void, c_int) -> c_int,
    chain_o2: ChainFn,
    chain_fp: ChainFn,
    framehop: FhUnwinder,
    /// One past the highest address of this thread's stack: the upper bound
    /// for framehop's and the fp walker's stack reads.
    stack_top: u64,
    /// Address ranges of the two chain libraries' executable segments.
    text_o2: std::ops::Range<u64>,
    text_fp: std::ops::Range<u64>,
    /// The LD_PRELOAD counter (c/alloc_count.c), if loaded.
    alloc_counter: Option<&'static std::sync::atomic::AtomicU64>,
}

/// State handed through the C chain to `capture()`.
struct Ctx {
    method: Method,
    len: usize,
    buf: [u64; MAX_FRAMES],
    api: &'static Api,
    /// framehop's rule cache and gimli scratch space; preallocated, reused.
    fh_cache: Box<FhCache>,
    /// allocmux's unwinder, with its module list built.
    allocmux: Box<StackUnwinder>,
}

impl Ctx {
    /// Never inlined: every capture, whichever unwinder, then sits under the
    /// same return addresses, so whole stacks can be compared.
    #[inline(never)]
    fn run(&mut self, chain: Chain, depth: usize) {
        let f = match chain {
            Chain::O2 => self.api.chain_o2,
            Chain::Fp => self.api.chain_fp,
        };
        // SAFETY: the chain functions only pass `self` back to capture().
        unsafe { f(depth as c_int, capture, self as *mut Ctx as *mut c_void) };
    }

    fn frames(&self) -> &[u64] {
        &self.buf[..self.len]
    }

    fn allocs(&self) -> u64 {
        self.api
            .alloc_counter
            .map_or(0, |c| c.load(std::sync::atomic::Ordering::Relaxed))
    }
}

/// Called from the innermost C frame.
extern "C" fn capture(arg: *mut c_void) {
    // SAFETY: arg is the &mut Ctx passed to the chain by Ctx::run.
    let ctx = unsafe { &mut *(arg as *mut Ctx) };
    ctx.len = match ctx.method {
        Method::None => 0,
        Method::Gcc => capture_gcc(ctx),
        Method::Glibc => capture_glibc(ctx),
        Method::Libunwind => capture_libunwind(ctx),
        Method::Framehop => capture_framehop(ctx),
        Method::Allocmux => capture_allocmux(ctx),
        Method::Fp => capture_fp(ctx),
    };
}

struct GccState {
    buf: *mut u64,
    len: usize,
    get_ip: unsafe extern "C" fn(*mut c_void) -> usize,
}

extern "C" fn gcc_trace_cb(uctx: *mut c_void, arg: *mut c_void) -> c_int {
    // SAFETY: arg is the GccState of capture_gcc, alive for the whole walk.
    let st = unsafe { &mut *(arg as *mut GccState) };
    // SAFETY: uctx is the live _Unwind_Context libgcc handed us.
    let ip = unsafe { (st.get_ip)(uctx) } as u64;
    // libgcc calls back once more for _start's caller with IP 0 (its CFI
    // marks the return address undefined); glibc's backtrace() drops that
    // entry too, so do the same for a like-for-like comparison.
    if st.len == MAX_FRAMES || ip == 0 {
        return 5; // _URC_END_OF_STACK: any non-zero value stops the walk
    }
    // SAFETY: buf has room (checked above).
    unsafe { *st.buf.add(st.len) = ip };
    st.len += 1;
    0 // _URC_NO_REASON: continue
}

#[inline(never)]
fn capture_gcc(ctx: &mut Ctx) -> usize {
    let mut st = GccState {
        buf: ctx.buf.as_mut_ptr(),
        len: 0,
        get_ip: ctx.api.unwind_get_ip,
    };
    // SAFETY: the callback only writes within buf.
    unsafe { (ctx.api.unwind_backtrace)(gcc_trace_cb, &mut st as *mut GccState as *mut c_void) };
    st.len
}

#[inline(never)]
fn capture_glibc(ctx: &mut Ctx) -> usize {
    // SAFETY: buf holds MAX_FRAMES pointer-sized slots.
    let n = unsafe {
        (ctx.api.glibc_backtrace)(
            ctx.buf.as_mut_ptr() as *mut *mut c_void,
            MAX_FRAMES as c_int,
        )
    };
    n.max(0) as usize
}

#[inline(never)]
fn capture_libunwind(ctx: &mut Ctx) -> usize {
    // SAFETY: buf holds MAX_FRAMES pointer-sized slots, the most
    // unw_backtrace writes when given that size.
    let n = unsafe {
        (ctx.api.unw_backtrace)(
            ctx.buf.as_mut_ptr() as *mut *mut c_void,
            MAX_FRAMES as c_int,
        )
    };
    n.max(0) as usize
}

/// framehop, starting from this function's own registers.  rip/rsp/rbp are
/// read with inline asm at a point where rsp is this function's steady-state
/// stack pointer, so the CFI row for `rip` describes exactly that state.
#[inline(never)]
fn capture_framehop(ctx: &mut Ctx) -> usize {
    let (rip, rsp, rbp): (u64, u64, u64);
    // SAFETY: reads three registers, touches no memory.
    unsafe {
        asm!("lea {ip}, [rip]", "mov {sp}, rsp", "mov {bp}, rbp",
             ip = out(reg) rip, sp = out(reg) rsp, bp = out(reg) rbp,
             options(nomem, nostack, preserves_flags));
    }
    let top = ctx.api.stack_top;
    // Only live stack ([sp, top) of this thread) may be read: a wrong CFI
    // rule must turn into an error, not a wild read.
    let mut read_stack = |addr: u64| -> Result<u64, ()> {
        if addr >= rsp && addr.checked_add(8).is_some_and(|end| end <= top) {
            // SAFETY: inside this thread's live stack, above our own frame.
            Ok(unsafe { (addr as *const u64).read_unaligned() })
        } else {
            Err(())
        }
    };
    let regs = UnwindRegsX86_64::new(rip, rsp, rbp);
    let mut frames = ctx
        .api
        .framehop
        .iter_frames(rip, regs, &mut ctx.fh_cache, &mut read_stack);
    let mut n = 0;
    // Ok(None) is a clean end (root reached); Err is the usual end at the
    // outermost frame (e.g. no CFI for _start's caller): keep what we have.
    while let Ok(Some(frame)) = frames.next() {
        if n == MAX_FRAMES {
            break;
        }
        ctx.buf[n] = frame.address();
        n += 1;
    }
    n
}

/// allocmux's recorder unwinder, as the shim calls it (minus its lock).
#[inline(never)]
fn capture_allocmux(ctx: &mut Ctx) -> usize {
    // The whole mapping: the unwinder itself reads only from its own stack
    // pointer up.
    let stack = 0..ctx.api.stack_top;
    let mut buf = unwind::frame_buf();
    let frames = ctx.allocmux.capture(stack, &mut buf);
    ctx.buf[..frames.len()].copy_from_slice(frames);
    frames.len()
}

/// Frame-pointer walk: [rbp] = caller's rbp, [rbp+8] = return address.
/// Bounds: each rbp must lie in [sp, top), be 8-aligned and strictly
/// increase, so a frame without a frame pointer ends the walk rather than
/// sending it into arbitrary memory.
#[inline(never)]
fn capture_fp(ctx: &mut Ctx) -> usize {
    let (rsp, rbp): (u64, u64);
    // SAFETY: reads two registers.
    unsafe {
        asm!("mov {sp}, rsp", "mov {bp}, rbp", sp = out(reg) rsp, bp = out(reg) rbp,
             options(nomem, nostack, preserves_flags));
    }
    let top = ctx.api.stack_top;
    let mut fp = rbp;
    let mut n = 0;
    while n < MAX_FRAMES {
        if fp < rsp || fp.saturating_add(16) > top || fp % 8 != 0 {
            break;
        }
        // SAFETY: fp..fp+16 is inside this thread's live stack (checked).
        let (next, ret) = unsafe { (*(fp as *const u64), *((fp + 8) as *const u64)) };
        if ret == 0 {
            break;
        }
        ctx.buf[n] = ret;
        n += 1;
        if next <= fp {
            break;
        }
        fp = next;
    }
    n
}

// ---------------------------------------------------------------------------
// Set-up: symbols, modules, stack bounds.

/// A dlsym result as a function pointer of the type the caller names.
///
/// # Safety
/// `F` must be the symbol's real C signature.
unsafe fn cast<F: Copy>(p: *mut c_void) -> F {
    assert_eq!(std::mem::size_of::<F>(), std::mem::size_of::<*mut c_void>());
    // SAFETY: same size (checked); the caller vouches for the signature.
    unsafe { std::mem::transmute_copy(&p) }
}

fn dl(path: &str, flags: c_int) -> *mut c_void {
    let c = CString::new(path).unwrap();
    // SAFETY: `c` is a NUL-terminated path that outlives the call; dlopen
    // has no other precondition.
    let h = unsafe { libc::dlopen(c.as_ptr(), flags) };
    if h.is_null() {
        // SAFETY: dlerror has no preconditions; it returns a C string or null.
        let e = unsafe { libc::dlerror() };
        let msg = if e.is_null() {
            "?".into()
        } else {
            // SAFETY: non-null (checked): dlerror's NUL-terminated message,
            // valid until the next dl* call on this thread, read at once.
            unsafe { CStr::from_ptr(e) }.to_string_lossy()
        };
        panic!("dlopen {path}: {msg}");
    }
    h
}

/// dlsym that also reports which file the symbol really came from.
fn sym(handle: *mut c_void, name: &str, verbose: bool) -> *mut c_void {
    let c = CString::new(name).unwrap();
    // SAFETY: `handle` came from a successful dlopen and `c` is a
    // NUL-terminated name that outlives the call.
    let p = unsafe { libc::dlsym(handle, c.as_ptr()) };
    assert!(!p.is_null(), "dlsym {name} failed");
    if verbose {
        // SAFETY: Dl_info is plain pointers and integers, for which all
        // zeroes is a valid (null) value.
        let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
        // SAFETY: dladdr only reads the loader's tables and writes `info`,
        // a valid out-parameter.
        unsafe { libc::dladdr(p, &mut info) };
        let file = if info.dli_fname.is_null() {
            "?".into()
        } else {
            // SAFETY: non-null (checked): the loader's NUL-terminated name of
            // a library that stays loaded (nothing is dlclosed).
            unsafe { CStr::from_ptr(info.dli_fname) }.to_string_lossy()
        };
        eprintln!("  {name:<30} from {file}");
    }
    p
}

/// One loaded ELF object as seen by dl_iterate_phdr.
struct ModInfo {
    name: String,
    base: u64,
    /// PT_LOAD segments as (svma start, svma end, flags).
    loads: Vec<(u64, u64, u32)>,
    eh_frame_hdr: Option<(u64, u64)>,
}

unsafe extern "C" fn phdr_cb(
    info: *mut libc::dl_phdr_info,
    _size: usize,
    data: *mut c_void,
) -> c_int {
    // SAFETY: called by dl_iterate_phdr with a valid info; data is our Vec.
    let (info, mods) = unsafe { (&*info, &mut *(data as *mut Vec<ModInfo>)) };
    let name = if info.dlpi_name.is_null() {
        String::new()
    } else {
        // SAFETY: non-null (checked): the loader's NUL-terminated module
        // name, valid during the callback.
        unsafe { CStr::from_ptr(info.dlpi_name) }
            .to_string_lossy()
            .into_owned()
    };
    // SAFETY: the loader's program headers of this module: dlpi_phnum
    // entries at dlpi_phdr, valid during the callback.
    let phdrs = unsafe { std::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize) };
    let mut m = ModInfo {
        name,
        base: info.dlpi_addr,
        loads: vec![],
        eh_frame_hdr: None,
    };
    for ph in phdrs {
        match ph.p_type {
            libc::PT_LOAD => m
                .loads
                .push((ph.p_vaddr, ph.p_vaddr + ph.p_memsz, ph.p_flags)),
            libc::PT_GNU_EH_FRAME => m.eh_frame_hdr = Some((ph.p_vaddr, ph.p_vaddr + ph.p_memsz)),
            _ => {}
        }
    }
    mods.push(m);
    0
}

fn loaded_modules() -> Vec<ModInfo> {
    let mut mods: Vec<ModInfo> = Vec::new();
    // SAFETY: the callback matches the expected signature.
    unsafe { libc::dl_iterate_phdr(Some(phdr_cb), &mut mods as *mut Vec<ModInfo> as *mut c_void) };
    mods
}

/// Reads a DW_EH_PE-encoded pointer (the subset .eh_frame_hdr uses) at
/// `avma`, whose stated address is `svma`; returns (svma value, size).
fn read_encoded(avma: u64, svma: u64, enc: u8) -> Option<(u64, u64)> {
    // SAFETY: reads inside a mapped, readable .eh_frame_hdr.
    let (raw, size): (i64, u64) = unsafe {
        let p = avma as *const u8;
        match enc & 0x0f {
            0x03 => ((p as *const u32).read_unaligned() as i64, 4),
            0x0b => ((p as *const i32).read_unaligned() as i64, 4),
            0x04 | 0x0c | 0x00 => ((p as *const i64).read_unaligned(), 8),
            _ => return None,
        }
    };
    let value = match enc & 0x70 {
        0x00 => raw as u64,
        0x10 => svma.wrapping_add(raw as u64), // pc-relative
        _ => return None,
    };
    Some((value, size))
}

/// Registers every loaded module with framehop, giving it the in-memory
/// .eh_frame_hdr (from PT_GNU_EH_FRAME), the .eh_frame it points to (length
/// found by walking CIE/FDE records to the zero terminator) and the text
/// segment.  All of it is 'static: nothing here is ever dlclosed.
fn build_framehop(mods: &[ModInfo]) -> (FhUnwinder, usize) {
    let mut unwinder = FhUnwinder::new();
    let mut count = 0;
    for m in mods {
        let Some((hdr_start, hdr_end)) = m.eh_frame_hdr else {
            continue;
        };
        if m.loads.is_empty() {
            continue;
        }
        let avma = |svma: u64| m.base.wrapping_add(svma);
        let hdr_avma = avma(hdr_start);
        // SAFETY: PT_GNU_EH_FRAME is mapped and readable.
        let (version, ptr_enc) =
            unsafe { (*(hdr_avma as *const u8), *((hdr_avma + 1) as *const u8)) };
        if version != 1 {
            continue;
        }
        let Some((eh_frame_svma, _)) = read_encoded(hdr_avma + 4, hdr_start + 4, ptr_enc) else {
            continue;
        };
        // Bound the walk by the end of the PT_LOAD holding .eh_frame.
        let Some(&(_, seg_end, _)) = m
            .loads
            .iter()
            .find(|l| l.0 <= eh_frame_svma && eh_frame_svma < l.1)
        else {
            continue;
        };
        let mut pos = eh_frame_svma;
        while pos + 4 <= seg_end {
            // SAFETY: inside the mapped segment (checked against seg_end).
            let len = unsafe { (avma(pos) as *const u32).read_unaligned() } as u64;
            if len == 0 {
                pos += 4;
                break;
            }
            pos += if len == 0xffff_ffff {
                // SAFETY: a 64-bit length follows the 0xffffffff escape in
                // the same record, inside the mapped segment.
                12 + unsafe { (avma(pos + 4) as *const u64).read_unaligned() }
            } else {
                4 + len
            };
        }
        let eh_frame_end = pos.min(seg_end);
        let slice = |start: u64, end: u64| -> &'static [u8] {
            // SAFETY: mapped for the life of the process (never dlclosed).
            unsafe { std::slice::from_raw_parts(avma(start) as *const u8, (end - start) as usize) }
        };
        let text = m
            .loads
            .iter()
            .find(|l| l.2 & libc::PF_X != 0)
            .map(|&(s, e, _)| (s, e));
        let lo = m.loads.iter().map(|l| l.0).min().unwrap();
        let hi = m.loads.iter().map(|l| l.1).max().unwrap();
        let info = ExplicitModuleSectionInfo {
            base_svma: 0,
            text_svma: text.map(|(s, e)| s..e),
            text: text.map(|(s, e)| slice(s, e)),
            eh_frame_svma: Some(eh_frame_svma..eh_frame_end),
            eh_frame: Some(slice(eh_frame_svma, eh_frame_end)),
            eh_frame_hdr_svma: Some(hdr_start..hdr_end),
            eh_frame_hdr: Some(slice(hdr_start, hdr_end)),
            ..Default::default()
        };
        let name = if m.name.is_empty() {
            "<main>".to_string()
        } else {
            m.name.clone()
        };
        unwinder.add_module(Module::new(name, avma(lo)..avma(hi), m.base, info));
        count += 1;
    }
    (unwinder, count)
}

fn stack_top() -> u64 {
    // SAFETY: standard pthread calls on the current thread.
    unsafe {
        let mut attr: libc::pthread_attr_t = std::mem::zeroed();
        assert_eq!(libc::pthread_getattr_np(libc::pthread_self(), &mut attr), 0);
        let mut addr: *mut c_void = std::ptr::null_mut();
        let mut size = 0usize;
        assert_eq!(libc::pthread_attr_getstack(&attr, &mut addr, &mut size), 0);
        libc::pthread_attr_destroy(&mut attr);
        addr as u64 + size as u64
    }
}

fn text_range(mods: &[ModInfo], file: &str) -> std::ops::Range<u64> {
    let m = mods
        .iter()
        .find(|m| m.name.ends_with(file))
        .expect("chain library not loaded");
    let &(s, e, _) = m.loads.iter().find(|l| l.2 & libc::PF_X != 0).unwrap();
    m.base + s..m.base + e
}

fn setup(lib_dir: &str, verbose: bool) -> &'static Api {
    let now = libc::RTLD_NOW;
    let chain_o2 = dl(&format!("{lib_dir}/libchain_o2.so"), now | libc::RTLD_LOCAL);
    let chain_fp = dl(&format!("{lib_dir}/libchain_fp.so"), now | libc::RTLD_LOCAL);
    // Rust's std already links libgcc_s on linux-gnu; NOLOAD just finds it.
    let gcc = dl("libgcc_s.so.1", now | libc::RTLD_NOLOAD);
    let glibc = dl("libc.so.6", now | libc::RTLD_NOLOAD);
    // RTLD_LOCAL: keep libunwind's own _Unwind_*/backtrace out of the global scope.
    let lu = dl("libunwind.so.8", now | libc::RTLD_LOCAL);
    if verbose {
        eprintln!("symbols:");
    }
    // SAFETY: every `cast` below gives a symbol the C signature declared
    // in its library's header (unwind.h, execinfo.h, libunwind.h); the
    // libraries stay loaded for the life of the process; the counter, when
    // present, is c/alloc_count.c's static 64-bit atomic.
    let api = unsafe {
        let set_caching_policy: unsafe extern "C" fn(*mut c_void, c_int) -> c_int =
            cast(sym(lu, "_ULx86_64_set_caching_policy", verbose));
        let local_as = sym(lu, "_ULx86_64_local_addr_space", verbose) as *const *mut c_void;
        // As heaptrack does: unw_set_caching_policy(unw_local_addr_space, UNW_CACHE_PER_THREAD).
        const UNW_CACHE_PER_THREAD: c_int = 2;
        assert_eq!(set_caching_policy(*local_as, UNW_CACHE_PER_THREAD), 0);

        let mods = loaded_modules();
        let (framehop, nmods) = build_framehop(&mods);
        if verbose {
            eprintln!("framehop: {nmods} modules with .eh_frame_hdr registered");
        }
        let counter = libc::dlsym(
            libc::RTLD_DEFAULT,
            c"unwind_bench_alloc_calls".as_ptr() as *const c_char,
        );
        Api {
            unwind_backtrace: cast(sym(gcc, "_Unwind_Backtrace", verbose)),
            unwind_get_ip: cast(sym(gcc, "_Unwind_GetIP", verbose)),
            glibc_backtrace: cast(sym(glibc, "backtrace", verbose)),
            unw_backtrace: cast(sym(lu, "unw_backtrace", verbose)),
            chain_o2: cast(sym(chain_o2, "chain_o2_run", verbose)),
            chain_fp: cast(sym(chain_fp, "chain_fp_run", verbose)),
            framehop,
            stack_top: stack_top(),
            text_o2: text_range(&mods, "libchain_o2.so"),
            text_fp: text_range(&mods, "libchain_fp.so"),
            alloc_counter: (!counter.is_null())
                .then(|| &*(counter as *const std::sync::atomic::AtomicU64)),
        }
    };
    Box::leak(Box::new(api))
}

// ---------------------------------------------------------------------------
// Correctness: compare each unwinder's stack with libgcc's on the same chain.

struct Check {
    method: Method,
    chain: Chain,
    depth: usize,
    total: usize,
    c_frames: usize,
    c_match: bool,
    /// Frames from the first C frame to the end, equal to the reference's?
    /// (None = equal; Some((common, ours, theirs)) = where they diverge.)
    tail: Option<(usize, usize, usize)>,
    cold_allocs: Option<u64>,
}

#[inline(never)]
fn check(
    ctx: &mut Ctx,
    method: Method,
    chain: Chain,
    depth: usize,
    reference: &[u64],
) -> (Check, Vec<u64>) {
    ctx.method = method;
    let a0 = ctx.allocs();
    ctx.run(chain, depth);
    let a1 = ctx.allocs();
    let got = ctx.frames().to_vec();
    let range = match chain {
        Chain::O2 => ctx.api.text_o2.clone(),
        Chain::Fp => ctx.api.text_fp.clone(),
    };
    let c_of = |v: &[u64]| {
        v.iter()
            .copied()
            .filter(|a| range.contains(a))
            .collect::<Vec<_>>()
    };
    let tail_of = |v: &[u64]| {
        let i = v.iter().position(|a| range.contains(a)).unwrap_or(v.len());
        v[i..].to_vec()
    };
    let (c_got, t_got) = (c_of(&got), tail_of(&got));
    let reference = if reference.is_empty() {
        &got[..]
    } else {
        reference
    };
    let (c_ref, t_ref) = (c_of(reference), tail_of(reference));
    let tail = if t_got == t_ref {
        None
    } else {
        let common = t_got.iter().zip(&t_ref).take_while(|(a, b)| a == b).count();
        Some((common, t_got.len(), t_ref.len()))
    };
    let c = Check {
        method,
        chain,
        depth,
        total: got.len(),
        c_frames: c_got.len(),
        c_match: c_got == c_ref,
        tail,
        cold_allocs: ctx.api.alloc_counter.map(|_| a1 - a0),
    };
    (c, got)
}

// ---------------------------------------------------------------------------

struct Opts {
    lib_dir: String,
    depths: Vec<usize>,
    iters: usize,
    reps: usize,
    only: Option<Method>,
    /// With --only: which copy of the chain (default: the method's own).
    chain: Option<Chain>,
    /// Print each unwinder's stack, symbolized, for one depth.
    dump: bool,
    /// Unwinders to time (default: all).
    methods: Vec<Method>,
}

fn parse_opts() -> Opts {
    let mut o = Opts {
        lib_dir: "build".into(),
        depths: vec![10, 20, 40],
        iters: 200_000,
        reps: 5,
        only: None,
        chain: None,
        dump: false,
        methods: Method::TIMED.to_vec(),
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = || args.next().unwrap_or_else(|| panic!("{a} needs a value"));
        match a.as_str() {
            "--lib-dir" => o.lib_dir = val(),
            "--depths" => {
                o.depths = val()
                    .split(',')
                    .map(|d| d.parse().expect("depth"))
                    .collect()
            }
            "--iters" => o.iters = val().parse().expect("iters"),
            "--reps" => o.reps = val().parse().expect("reps"),
            "--only" => o.only = Some(Method::parse(&val()).expect("unknown method")),
            "--chain" => {
                o.chain = Some(match val().as_str() {
                    "o2" => Chain::O2,
                    "fp" => Chain::Fp,
                    c => panic!("--chain o2|fp, not {c}"),
                })
            }
            "--dump" => o.dump = true,
            "--methods" => {
                o.methods = val()
                    .split(',')
                    .map(|m| Method::parse(m).expect("unknown method"))
                    .collect()
            }
            _ => panic!(
                "usage: unwind-bench [--lib-dir DIR] [--depths 10,20,40] [--iters N] [--reps R] [--methods gcc,glibc,libunwind,framehop,fp] [--only METHOD [--chain o2|fp]] [--dump]"
            ),
        }
    }
    assert!(
        o.depths.iter().all(|&d| (2..200).contains(&d)),
        "depths must be in 2..200"
    );
    o
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn main() {
    let o = parse_opts();
    let quiet = o.only.is_some();
    let api = setup(&o.lib_dir, !quiet);
    let mut ctx = Box::new(Ctx {
        method: Method::None,
        len: 0,
        buf: [0; MAX_FRAMES],
        api,
        fh_cache: Box::new(FhCache::new_in()),
        allocmux: {
            let mut u = Box::new(StackUnwinder::new(false));
            u.install(unwind::generation(), unwind::loaded_modules());
            u
        },
    });

    // --only: the callgrind mode.  Fixed warm-up, then `iters` captures; run
    // twice with different iters and the difference is the per-stack cost.
    if let Some(m) = o.only {
        let chain = o.chain.unwrap_or(m.default_chain());
        for &d in &o.depths {
            ctx.method = m;
            for _ in 0..200 {
                ctx.run(chain, d);
            }
            for _ in 0..o.iters {
                ctx.run(chain, d);
            }
        }
        // Nothing printed here: callgrind counts every call of this mode.
        return;
    }
    if o.dump {
        dump(&mut ctx, o.depths[0]);
        return;
    }

    // 1. Correctness, and allocations on the very first capture of each
    //    unwinder (cold: lazy initialisation happens here).
    let mut checks = Vec::new();
    let mut frames_of = std::collections::HashMap::new();
    // One call site for every capture (see Ctx::run), so whole stacks are
    // comparable.  libgcc runs first on each chain and is the reference.
    let plan = [
        (Method::Gcc, Chain::O2),
        (Method::Glibc, Chain::O2),
        (Method::Libunwind, Chain::O2),
        (Method::Framehop, Chain::O2),
        (Method::Allocmux, Chain::O2),
        (Method::Fp, Chain::O2), // frame pointers where there are none: expected to fail
        (Method::Gcc, Chain::Fp),
        (Method::Fp, Chain::Fp),
        (Method::Framehop, Chain::Fp), // framehop on the identical FP code
    ];
    for (i, &d) in o.depths.iter().enumerate() {
        let mut refs: std::collections::HashMap<Chain, Vec<u64>> = Default::default();
        for &(m, ch) in &plan {
            let reference = refs.get(&ch).cloned().unwrap_or_default();
            let (c, got) = check(&mut ctx, m, ch, d, &reference);
            if m == Method::Gcc {
                refs.insert(ch, got);
            }
            if ch == m.default_chain() {
                frames_of.insert((m, d), c.total);
            }
            // Cold allocations: only the very first capture of each unwinder counts.
            let first = i == 0 && ch == Chain::O2;
            checks.push(Check {
                cold_allocs: c.cold_allocs.filter(|_| first),
                ..c
            });
        }
    }

    // 2. Timing: reps × depths × methods, methods rotated each rep so no
    //    unwinder always runs first; median per (method, depth).
    let mut methods = vec![Method::None];
    methods.extend(o.methods.iter().copied());
    let mut ns: std::collections::HashMap<(Method, Chain, usize), Vec<f64>> = Default::default();
    let mut steady_allocs: std::collections::HashMap<Method, u64> = Default::default();
    let runs = |m: Method| {
        if m == Method::None {
            vec![Chain::O2, Chain::Fp]
        } else {
            vec![m.default_chain()]
        }
    };
    for &m in &methods {
        for &d in &o.depths {
            for ch in runs(m) {
                ctx.method = m;
                for _ in 0..2000 {
                    ctx.run(ch, d);
                }
            }
        }
    }
    let t_all = Instant::now();
    for rep in 0..o.reps {
        for &d in &o.depths {
            for k in 0..methods.len() {
                let m = methods[(k + rep) % methods.len()];
                for ch in runs(m) {
                    ctx.method = m;
                    let a0 = ctx.allocs();
                    let t = Instant::now();
                    for _ in 0..o.iters {
                        ctx.run(ch, d);
                    }
                    let el = t.elapsed().as_nanos() as f64 / o.iters as f64;
                    *steady_allocs.entry(m).or_default() += ctx.allocs() - a0;
                    ns.entry((m, ch, d)).or_default().push(el);
                }
            }
        }
    }
    eprintln!("timing took {:.1} s", t_all.elapsed().as_secs_f64());
    // framehop's rule cache is direct-mapped (slot = address % 509): a
    // collision between two hot return addresses would show up as misses.
    eprintln!("framehop cache: {:?}", ctx.fh_cache.stats());

    // 3. Report (markdown on stdout).
    println!(
        "### Wall time per captured stack (median of {} reps × {} captures)\n",
        o.reps, o.iters
    );
    println!(
        "Net = median minus the median of an empty capture through the same chain (the harness cost, shown in the first rows).\n"
    );
    println!(
        "| unwinder | C frames (D) | frames captured | ns/stack net (median) | min–max gross ns | ns/frame |"
    );
    println!("|---|---:|---:|---:|---:|---:|");
    let med = |ns: &mut std::collections::HashMap<(Method, Chain, usize), Vec<f64>>, key| {
        median(ns.get_mut(&key).unwrap())
    };
    for &d in &o.depths {
        for ch in [Chain::O2, Chain::Fp] {
            let v = ns.get(&(Method::None, ch, d)).unwrap();
            let (lo, hi) = minmax(v);
            let m = med(&mut ns, (Method::None, ch, d));
            println!(
                "| empty capture, {} chain | {d} | 0 | ({m:.0} gross) | {lo:.0}–{hi:.0} | |",
                chain_name(ch)
            );
        }
    }
    let mut net_of = std::collections::HashMap::new();
    for &m in &o.methods {
        for &d in &o.depths {
            let ch = m.default_chain();
            let base = med(&mut ns, (Method::None, ch, d));
            let (lo, hi) = minmax(ns.get(&(m, ch, d)).unwrap());
            let net = med(&mut ns, (m, ch, d)) - base;
            let frames = frames_of[&(m, d)];
            net_of.insert((m, d), net);
            println!(
                "| {} | {d} | {frames} | {net:.0} | {lo:.0}–{hi:.0} | {:.1} |",
                m.label(),
                net / frames as f64
            );
        }
    }
    let (dmin, dmax) = (
        *o.depths.iter().min().unwrap(),
        *o.depths.iter().max().unwrap(),
    );
    let total_calls = (o.reps * o.iters * o.depths.len()) as f64;
    println!("\n### Per extra frame and allocations\n");
    println!(
        "Marginal = (net ns at D={dmax} − net ns at D={dmin}) / {} extra C frames: the per-frame cost without fixed overhead.\n",
        dmax - dmin
    );
    println!(
        "| unwinder | marginal ns/frame | allocations on first capture | allocations per capture, steady state |"
    );
    println!("|---|---:|---:|---:|");
    for &m in &o.methods {
        let marg = if dmax > dmin {
            (net_of[&(m, dmax)] - net_of[&(m, dmin)]) / (dmax - dmin) as f64
        } else {
            f64::NAN
        };
        let cold = checks
            .iter()
            .find(|c| c.method == m && c.chain == Chain::O2 && c.cold_allocs.is_some())
            .and_then(|c| c.cold_allocs);
        let cold = cold.map_or("n/a (no LD_PRELOAD counter)".to_string(), |c| c.to_string());
        let steady = if api.alloc_counter.is_some() {
            format!("{:.4}", steady_allocs[&m] as f64 / total_calls)
        } else {
            "n/a".into()
        };
        println!("| {} | {marg:.1} | {cold} | {steady} |", m.label());
    }

    println!("\n### Correctness (reference: libgcc `_Unwind_Backtrace` on the same chain)\n");
    println!(
        "'C frames' counts return addresses inside the chain library (expected: D). 'Rest of stack' compares everything from the first C frame outwards (C, Rust harness, libc, _start).\n"
    );
    println!(
        "| unwinder | chain | D | frames total | C frames | C sequence = reference | rest of stack = reference |"
    );
    println!("|---|---|---:|---:|---:|---|---|");
    for c in &checks {
        let tail = match c.tail {
            None => "yes".to_string(),
            Some((common, ours, theirs)) if common == ours => {
                format!("prefix: stops {} frames early", theirs - ours)
            }
            Some((common, ours, theirs)) => {
                format!("no: first {common} equal, then differs ({ours} vs {theirs} frames)")
            }
        };
        let label = match (c.method, c.chain) {
            (Method::Fp, Chain::O2) => "frame pointers on the -O2 chain (expected to fail)",
            (Method::Framehop, Chain::Fp) => "framehop on the FP copy",
            (Method::Gcc, Chain::Fp) => "libgcc on the FP copy (reference there)",
            (m, _) => m.label(),
        };
        let ok = if c.c_frames == c.depth && c.c_match {
            "yes"
        } else {
            "**no**"
        };
        println!(
            "| {label} | {} | {} | {} | {} | {ok} | {tail} |",
            chain_name(c.chain),
            c.depth,
            c.total,
            c.c_frames
        );
    }
}

/// Prints each unwinder's raw stack with dladdr symbol names (nearest
/// exported/dynamic symbol; static C functions show as the library name).
fn dump(ctx: &mut Ctx, depth: usize) {
    for (m, ch) in [
        (Method::Gcc, Chain::O2),
        (Method::Glibc, Chain::O2),
        (Method::Libunwind, Chain::O2),
        (Method::Framehop, Chain::O2),
        (Method::Allocmux, Chain::O2),
        (Method::Fp, Chain::O2),
        (Method::Gcc, Chain::Fp),
        (Method::Fp, Chain::Fp),
    ] {
        ctx.method = m;
        ctx.run(ch, depth);
        println!(
            "== {} on {} chain, D={depth}: {} frames",
            m.name(),
            chain_name(ch),
            ctx.len
        );
        for &a in ctx.frames() {
            // SAFETY: Dl_info is plain pointers and integers, for which all
            // zeroes is a valid (null) value.
            let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
            // SAFETY: dladdr only reads loader tables and writes `info`, a
            // valid out-parameter.
            let ok = unsafe { libc::dladdr(a as *const c_void, &mut info) } != 0;
            let cs = |p: *const c_char| {
                if p.is_null() {
                    "?".to_string()
                } else {
                    // SAFETY: non-null (checked): a NUL-terminated name from
                    // dladdr, of a library that stays loaded.
                    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
                }
            };
            let (file, name) = if ok {
                (cs(info.dli_fname), cs(info.dli_sname))
            } else {
                ("?".into(), "?".into())
            };
            let file = file.rsplit('/').next().unwrap_or("").to_string();
            println!("  {a:#014x}  {file:<22} {name}");
        }
    }
}

fn minmax(v: &[f64]) -> (f64, f64) {
    v.iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &x| {
            (lo.min(x), hi.max(x))
        })
}

fn chain_name(c: Chain) -> &'static str {
    match c {
        Chain::O2 => "-O2",
        Chain::Fp => "-O2 -fno-omit-frame-pointer",
    }
}
