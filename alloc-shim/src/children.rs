//! Programs this process started that the shim cannot reach: a
//! statically linked or set-id program leaves no profile, and would vanish
//! from the report without a word. A child that forks and execs writes
//! what it execs in its own profile (`exec`); a child started by `vfork`
//! (dash's way) or `posix_spawn` runs no code of the shim's between its
//! start and its `exec`, so it is noted here, in the parent's memory, and
//! the parent's profile names it (`unprofiled_child PID PROGRAM`).
//!
//! Only programs the shim cannot reach are noted, so the few slots last a
//! shell that runs thousands of commands. The check reads the program's
//! ELF header (open, two `pread`s, close): no allocation, no lock, so it
//! may run in a `vfork` child, whose memory is the parent's.

use core::cell::UnsafeCell;
use core::ffi::{CStr, c_char};
use core::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use core::sync::atomic::{AtomicU32, AtomicUsize};

/// Programs noted at most; later ones are dropped.
const SLOTS: usize = 16;
/// The longest program name kept (a longer one is not noted).
const NAME_MAX: usize = 256;

struct Slot {
    /// The child's pid, stored last: 0 until the slot is whole.
    pid: AtomicU32,
    len: AtomicUsize,
    name: UnsafeCell<[u8; NAME_MAX]>,
}

// SAFETY: a slot's name is written once, by the one caller whose
// `fetch_add` took its index, before `pid` publishes it (Release); readers
// read it only after seeing the pid (Acquire).
unsafe impl Sync for Slot {}

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY: Slot = Slot {
    pid: AtomicU32::new(0),
    len: AtomicUsize::new(0),
    name: UnsafeCell::new([0; NAME_MAX]),
};

static NOTED: [Slot; SLOTS] = [EMPTY; SLOTS];
/// Slots taken so far (may pass `SLOTS`: the rest were dropped).
static TAKEN: AtomicUsize = AtomicUsize::new(0);
/// The pid whose children these are: the process that recorded them, so
/// a `vfork` child (which shares this memory) can tell it is one.
static OWNER: AtomicU32 = AtomicU32::new(0);

/// This process starts recording (at start-up, and in a `fork` child,
/// whose parent's children are not its own).
pub fn start(pid: u32) {
    for slot in &NOTED {
        slot.pid.store(0, Relaxed);
    }
    TAKEN.store(0, Relaxed);
    OWNER.store(pid, Relaxed);
}

/// Whether this is a `vfork` child of the recording process: it shares
/// the parent's memory, where [`note`] leaves what it execs.
pub fn in_vfork_child() -> bool {
    let owner = OWNER.load(Relaxed);
    // SAFETY: getpid has no preconditions.
    owner != 0 && owner != unsafe { libc::getpid() } as u32
}

/// Notes that child `pid` runs `program` (a path, or a name looked up in
/// `PATH` as `execvp` would), if the shim cannot reach it.
pub fn note_if_unreachable(pid: u32, program: &CStr) {
    let mut buf = [0u8; libc::PATH_MAX as usize];
    let Some(path) = resolve(program, &mut buf) else {
        return;
    };
    if !unreachable(path) {
        return;
    }
    let name = program.to_bytes();
    if name.len() > NAME_MAX || pid == 0 {
        return;
    }
    let i = TAKEN.fetch_add(1, Relaxed);
    let Some(slot) = NOTED.get(i) else {
        return;
    };
    // SAFETY: index `i` is this caller's alone (see `Slot`'s Sync).
    unsafe { (&mut *slot.name.get())[..name.len()].copy_from_slice(name) };
    slot.len.store(name.len(), Relaxed);
    slot.pid.store(pid, Release);
}

/// Calls `f` with each noted child: its pid and program.
pub fn for_each(mut f: impl FnMut(u32, &[u8])) {
    for slot in &NOTED {
        let pid = slot.pid.load(Acquire);
        if pid != 0 {
            let len = slot.len.load(Relaxed);
            // SAFETY: published by `pid` (Acquire), never written again.
            f(pid, unsafe { &(&*slot.name.get())[..len] });
        }
    }
}

/// The file `program` names: itself when it holds a `/`, else the first
/// executable of that name in `PATH` (`/bin:/usr/bin` without one), built
/// in `buf`.
fn resolve<'a>(program: &'a CStr, buf: &'a mut [u8]) -> Option<&'a CStr> {
    let name = program.to_bytes();
    if name.is_empty() {
        return None;
    }
    if name.contains(&b'/') {
        return Some(program);
    }
    // SAFETY: getenv reads the environment; the string stays valid while
    // nothing changes it, and this reads it at once.
    let path = unsafe { libc::getenv(c"PATH".as_ptr()) };
    let dirs: &[u8] = if path.is_null() {
        b"/bin:/usr/bin"
    } else {
        // SAFETY: a non-null getenv result is NUL-terminated.
        unsafe { CStr::from_ptr(path) }.to_bytes()
    };
    for dir in dirs.split(|&b| b == b':') {
        let dir: &[u8] = if dir.is_empty() { b"." } else { dir };
        let len = dir.len() + 1 + name.len();
        if len + 1 > buf.len() {
            continue;
        }
        buf[..dir.len()].copy_from_slice(dir);
        buf[dir.len()] = b'/';
        buf[dir.len() + 1..len].copy_from_slice(name);
        buf[len] = 0;
        // SAFETY: `buf[..=len]` is NUL-terminated just above.
        if unsafe { libc::access(buf.as_ptr().cast::<c_char>(), libc::X_OK) } == 0 {
            return CStr::from_bytes_with_nul(&buf[..=len]).ok();
        }
    }
    None
}

/// Whether the loader will not preload the shim into `path`: set-id, or an
/// ELF file with no interpreter (statically linked). Anything else (a
/// script, a file that cannot be read) counts as reachable.
fn unreachable(path: &CStr) -> bool {
    // SAFETY: `stat` is plain integers, so all-zero is a valid value.
    let mut st: libc::stat = unsafe { core::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a live out-pointer.
    if unsafe { libc::stat(path.as_ptr(), &mut st) } != 0 {
        return false;
    }
    if st.st_mode & (libc::S_ISUID | libc::S_ISGID) != 0 {
        return true;
    }
    // SAFETY: a NUL-terminated path; the descriptor is closed below.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return false;
    }
    let r = is_static_elf(fd);
    // SAFETY: the descriptor opened above.
    unsafe { libc::close(fd) };
    r
}

/// Whether the file on `fd` is a 64-bit ELF executable with no `PT_INTERP`.
fn is_static_elf(fd: i32) -> bool {
    let mut ehdr = [0u8; 64];
    if !read_at(fd, &mut ehdr, 0) || &ehdr[..4] != b"\x7fELF" || ehdr[4] != 2 {
        return false;
    }
    let u16_at = |b: &[u8], o: usize| u16::from_le_bytes([b[o], b[o + 1]]);
    let kind = u16_at(&ehdr, 16);
    // ET_EXEC or ET_DYN (a static-pie is ET_DYN without an interpreter).
    if kind != 2 && kind != 3 {
        return false;
    }
    let phoff = u64::from_le_bytes(ehdr[32..40].try_into().unwrap_or_default());
    let (entsize, count) = (u16_at(&ehdr, 54) as usize, u16_at(&ehdr, 56) as usize);
    let mut phdrs = [0u8; 56 * 32];
    let bytes = entsize * count;
    if entsize < 56 || bytes > phdrs.len() || !read_at(fd, &mut phdrs[..bytes], phoff) {
        return false;
    }
    const PT_INTERP: u32 = 3;
    // No interpreter: no loader, so nothing reads LD_PRELOAD (a
    // static-pie too, which is ET_DYN).
    !phdrs[..bytes]
        .chunks_exact(entsize)
        .any(|h| u32::from_le_bytes([h[0], h[1], h[2], h[3]]) == PT_INTERP)
}

/// Reads `buf.len()` bytes at `offset`, whole or not at all.
fn read_at(fd: i32, buf: &mut [u8], offset: u64) -> bool {
    // SAFETY: a live buffer of that length.
    let n = unsafe {
        libc::pread(
            fd,
            buf.as_mut_ptr().cast(),
            buf.len(),
            offset as libc::off_t,
        )
    };
    n == buf.len() as isize
}
