//! The loader's generation: whether a library was loaded or unloaded since
//! the stack recorder last looked, asked before every captured stack.
//!
//! The portable way to ask is `dl_iterate_phdr`, whose first callback
//! carries the loader's load and unload counts (`dlpi_adds`, `dlpi_subs`).
//! It takes the loader's lock and walks every loaded object to find the
//! caller's namespace: on deep stacks, where every allocation is captured,
//! that was 6–10% of exact mode's instructions (docs/performance.md).
//!
//! On glibc for x86-64 the same counts are read where the loader keeps
//! them, in its exported `_rtld_global`: the number of objects ever added
//! (`_dl_load_adds`) and each namespace's number of loaded objects
//! (`_ns_nloaded`), whose difference is the number removed. Four loads, no
//! lock. Where those fields lie is not an interface, so their places (as
//! glibc 2.36 lays them out) are used only once a read of them, made under
//! the loader's lock, has given exactly what `dl_iterate_phdr` reported
//! under the same lock; until then, and with any other layout or C
//! library, every call takes the locked path.
//!
//! Read without the lock, the counts are exact for what the recorder needs
//! them for. A library's code cannot run (and so cannot be on a stack)
//! before the loader has counted it, and code at an address a closed
//! library used can only come back through a new load, which counts. A
//! read that races a load or an unload may see some fields before it and
//! some after: at worst a value that matches no state, after which the
//! next read differs again and the module list is read once more.

use core::ffi::{c_int, c_void};
use core::sync::atomic::Ordering::Relaxed;
use core::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, AtomicUsize};

/// Objects ever added and objects removed: one of them changes on every
/// load and unload (`dlopen`, `dlclose`, and the C library's own loads of
/// `iconv` and NSS modules).
pub type Generation = (u64, u64);

/// The loader's generation, without its lock where the counters' places
/// were verified (see the module docs), else through `dl_iterate_phdr`,
/// which takes the lock: never call it while holding a lock an allocating
/// thread may wait for.
pub fn generation() -> Generation {
    let base = RTLD_GLOBAL.load(Relaxed);
    if !base.is_null() {
        // SAFETY: `base` was stored only after `verify` found `_rtld_global`
        // and checked its size covers every field read; the object is the
        // loader's and is never unmapped.
        return unsafe { read_counters(base) };
    }
    locked_generation(ATTEMPTS.load(Relaxed) < MAX_ATTEMPTS)
}

/// Whether [`generation`] reads the loader's counters without its lock.
pub fn reads_counters_directly() -> bool {
    !RTLD_GLOBAL.load(Relaxed).is_null()
}

/// The loader's generation through `dl_iterate_phdr` (under its lock),
/// the way every C library gives it. With `try_verify`, also looks for
/// the counters' places and, if reading them gives the same generation,
/// keeps them for [`generation`].
pub fn locked_generation(try_verify: bool) -> Generation {
    let mut walk = Walk {
        generation: None,
        try_verify,
    };
    // SAFETY: the callback only writes `walk`, which outlives the call.
    unsafe { libc::dl_iterate_phdr(Some(each_object), &mut walk as *mut Walk as *mut c_void) };
    walk.generation.unwrap_or((0, 0))
}

/// `_rtld_global`, once its counters were verified; null before (or if
/// they never are).
static RTLD_GLOBAL: AtomicPtr<u8> = AtomicPtr::new(core::ptr::null_mut());
/// Verification attempts so far. One that finds more than one namespace
/// cannot compare (see `verify`) and is retried, a few times at most, so
/// that a layout that never matches costs nothing after.
static ATTEMPTS: AtomicU32 = AtomicU32::new(0);
const MAX_ATTEMPTS: u32 = 8;

/// Places in glibc's `struct rtld_global` on x86-64, as glibc 2.36 lays it
/// out (read from its debug information): `_dl_ns[DL_NNS]` of 160-byte
/// `struct link_namespaces` whose `_ns_nloaded` (a 32-bit count) is at
/// byte 8, then `_dl_nns`, three recursive locks, and `_dl_load_adds`.
const DL_NNS: usize = 16;
const NAMESPACE_SIZE: usize = 160;
const NS_NLOADED: usize = 8;
const NNS: usize = DL_NNS * NAMESPACE_SIZE;
const LOAD_ADDS: usize = 0xa80;
/// The least size `_rtld_global` must have for every read to be inside it.
const MIN_SIZE: u64 = LOAD_ADDS as u64 + 8;

/// Reads the generation from `_rtld_global` at `base`, without a lock.
///
/// # Safety
/// `base` is `_rtld_global`, at least [`MIN_SIZE`] bytes.
unsafe fn read_counters(base: *mut u8) -> Generation {
    // SAFETY: the fields are inside the object (caller's contract) and
    // aligned as the C structure aligns them. The loader writes them under
    // its lock and we read without it; atomic loads make that a race only
    // on the values, which the module docs show is harmless.
    unsafe {
        let adds = AtomicU64::from_ptr(base.add(LOAD_ADDS).cast()).load(Relaxed);
        let nns = AtomicUsize::from_ptr(base.add(NNS).cast())
            .load(Relaxed)
            .min(DL_NNS);
        // Namespace 0, then any that `dlmopen` added.
        let mut loaded = u64::from(AtomicU32::from_ptr(base.add(NS_NLOADED).cast()).load(Relaxed));
        for ns in 1..nns {
            let count = base.add(ns * NAMESPACE_SIZE + NS_NLOADED);
            loaded += u64::from(AtomicU32::from_ptr(count.cast()).load(Relaxed));
        }
        (adds, adds.wrapping_sub(loaded))
    }
}

/// What the `dl_iterate_phdr` callback fills in.
struct Walk {
    generation: Option<Generation>,
    try_verify: bool,
}

unsafe extern "C" fn each_object(
    info: *mut libc::dl_phdr_info,
    size: usize,
    out: *mut c_void,
) -> c_int {
    // SAFETY: `info` and its program headers are valid for the callback,
    // which runs under the loader's lock; `out` is our `Walk`.
    unsafe {
        let walk = &mut *(out as *mut Walk);
        let info = &*info;
        if walk.generation.is_none() {
            if size < core::mem::offset_of!(libc::dl_phdr_info, dlpi_subs) + 8 {
                return 1;
            }
            // The counts are global: the first object's are everyone's.
            walk.generation = Some((info.dlpi_adds, info.dlpi_subs));
            if !walk.try_verify || !cfg!(all(target_arch = "x86_64", target_env = "gnu")) {
                return 1;
            }
            ATTEMPTS.fetch_add(1, Relaxed);
        }
        // Looking for the loader itself, whose base the kernel passed.
        if info.dlpi_addr == 0 || info.dlpi_addr != libc::getauxval(libc::AT_BASE) {
            return 0;
        }
        if let Some(base) = find_rtld_global(info) {
            verify(base, walk.generation.unwrap_or_default());
        }
        1
    }
}

/// Keeps `base` for [`generation`] if reading the counters there gives
/// `expected`, what `dl_iterate_phdr` reported under the same lock. With
/// more than one namespace (`dlmopen`) the two cannot be compared: glibc
/// 2.36 miscounts the other namespaces' objects in `dlpi_subs` (it adds
/// their count once per object), so the attempt is left for later.
///
/// # Safety
/// `base` is `_rtld_global`, at least [`MIN_SIZE`] bytes; called under
/// the loader's lock.
unsafe fn verify(base: *mut u8, expected: Generation) {
    // SAFETY: forwarded from the caller.
    let nns = unsafe { AtomicUsize::from_ptr(base.add(NNS).cast()).load(Relaxed) };
    // SAFETY: forwarded from the caller.
    if nns == 1 && unsafe { read_counters(base) } == expected {
        RTLD_GLOBAL.store(base, Relaxed);
    }
}

/// `_rtld_global` in the loader described by `info`, if its dynamic
/// symbol table has it with the size the counters need; every address
/// read is checked to be inside one of the object's loaded segments.
///
/// # Safety
/// `info` describes a loaded object (from `dl_iterate_phdr`).
unsafe fn find_rtld_global(info: &libc::dl_phdr_info) -> Option<*mut u8> {
    const DT_NULL: u64 = 0;
    const DT_STRTAB: u64 = 5;
    const DT_SYMTAB: u64 = 6;
    const DT_GNU_HASH: u64 = 0x6fff_fef5;
    const NAME: &[u8] = b"_rtld_global\0";

    let bias = info.dlpi_addr;
    // SAFETY: the callback's program headers (caller's contract).
    let phdrs = unsafe { core::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize) };
    // Nothing here allocates: it runs under the loader's lock, inside an
    // allocation call.
    let mapped = |addr: u64, len: u64| {
        phdrs.iter().filter(|p| p.p_type == libc::PT_LOAD).any(|p| {
            let start = bias.wrapping_add(p.p_vaddr);
            addr >= start
                && addr
                    .checked_add(len)
                    .is_some_and(|end| end <= start.wrapping_add(p.p_memsz))
        })
    };
    let read_u32 = |addr: u64| {
        // SAFETY: checked to lie in a loaded segment of the object.
        mapped(addr, 4).then(|| unsafe { (addr as *const u32).read_unaligned() })
    };
    let read_u64 = |addr: u64| {
        // SAFETY: checked to lie in a loaded segment of the object.
        mapped(addr, 8).then(|| unsafe { (addr as *const u64).read_unaligned() })
    };
    // glibc turns the dynamic section's addresses into run-time ones where
    // it may write the section (x86-64); others keep them relative.
    let at = |ptr: u64| if ptr < bias { ptr + bias } else { ptr };

    let dynamic = phdrs.iter().find(|p| p.p_type == libc::PT_DYNAMIC)?;
    let (mut strtab, mut symtab, mut gnu_hash) = (None, None, None);
    let mut entry = bias + dynamic.p_vaddr;
    loop {
        let tag = read_u64(entry)?;
        let value = read_u64(entry + 8)?;
        match tag {
            DT_NULL => break,
            DT_STRTAB => strtab = Some(at(value)),
            DT_SYMTAB => symtab = Some(at(value)),
            DT_GNU_HASH => gnu_hash = Some(at(value)),
            _ => {}
        }
        entry += 16;
    }
    let (strtab, symtab, table) = (strtab?, symtab?, gnu_hash?);

    // The GNU hash table: bucket count, first hashed symbol, Bloom filter
    // words (skipped), buckets, then one hash per symbol from the first
    // hashed one, the last of each bucket's chain with its low bit set.
    let hash = NAME[..NAME.len() - 1].iter().fold(5381u32, |h, &c| {
        h.wrapping_mul(33).wrapping_add(u32::from(c))
    });
    let nbuckets = read_u32(table)?;
    let first = read_u32(table + 4)?;
    let bloom_words = read_u32(table + 8)?;
    if nbuckets == 0 {
        return None;
    }
    let buckets = table + 16 + 8 * u64::from(bloom_words);
    let chains = buckets + 4 * u64::from(nbuckets);
    let mut index = read_u32(buckets + 4 * u64::from(hash % nbuckets))?;
    if index < first {
        return None;
    }
    loop {
        let chain_hash = read_u32(chains + 4 * u64::from(index - first))?;
        if chain_hash | 1 == hash | 1 {
            let sym = symtab + u64::from(index) * core::mem::size_of::<libc::Elf64_Sym>() as u64;
            let name = strtab + u64::from(read_u32(sym)?);
            let value = read_u64(sym + 8)?;
            let size = read_u64(sym + 16)?;
            if mapped(name, NAME.len() as u64)
                // SAFETY: checked to lie in a loaded segment of the object.
                && unsafe { core::slice::from_raw_parts(name as *const u8, NAME.len()) } == NAME
            {
                let object = bias + value;
                return (size >= MIN_SIZE && mapped(object, size)).then_some(object as *mut u8);
            }
        }
        if chain_hash & 1 != 0 {
            return None;
        }
        index += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_counters_directly_on_glibc() {
        let g = locked_generation(true);
        assert!(g.0 > 0, "{g:?}");
        if cfg!(all(target_arch = "x86_64", target_env = "gnu")) {
            assert!(
                reads_counters_directly(),
                "the counters' places did not verify on this glibc"
            );
        }
        assert_eq!(generation(), locked_generation(false));
    }

    /// A library loaded and unloaded changes the generation, read either
    /// way, and both ways agree after each step.
    #[test]
    fn follows_loads_and_unloads() {
        locked_generation(true);
        let before = generation();
        assert_eq!(before, locked_generation(false));
        // SAFETY: dlopen of a system library with no constructors that
        // matter here; the handle is closed below.
        let handle = unsafe { libc::dlopen(c"libz.so.1".as_ptr(), libc::RTLD_NOW) };
        assert!(!handle.is_null(), "libz.so.1 is installed");
        let loaded = generation();
        assert_eq!(loaded, locked_generation(false));
        assert!(loaded.0 > before.0, "{before:?} -> {loaded:?}");
        // SAFETY: the handle from the dlopen above, closed once.
        assert_eq!(unsafe { libc::dlclose(handle) }, 0);
        let unloaded = generation();
        assert_eq!(unloaded, locked_generation(false));
        assert_ne!(unloaded, loaded);
    }
}
