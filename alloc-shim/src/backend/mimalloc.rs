//! mimalloc (libmimalloc-sys, built without overriding `malloc`).

use core::ffi::{c_int, c_void};
use core::sync::atomic::{AtomicU32, Ordering::Relaxed};

use super::Backend;
use crate::posix::{memalign_via_aligned, pvalloc_via_aligned};
use allocmux_recorder::EXACT_TIMING_BYTES;
use allocmux_recorder::process::page_size;

unsafe extern "C" {
    fn mi_calloc(count: usize, size: usize) -> *mut c_void;
    fn mi_usable_size(ptr: *const c_void) -> usize;
}

/// mimalloc, with a block's usable size read from its page inline
/// (`PAGE_SIZES`, see [`page`]) or asked of `mi_usable_size`.
#[derive(Debug, Clone, Copy)]
pub struct MimallocWith<const PAGE_SIZES: bool>;

/// mimalloc, block sizes read from their pages: the hooks installed when
/// [`init`] found mimalloc's layout to be the one [`page`] reads.
pub type Mimalloc = MimallocWith<true>;
/// mimalloc, block sizes from `mi_usable_size`: the hooks installed
/// otherwise.
pub type MimallocLookup = MimallocWith<false>;

// SAFETY: forwards to mimalloc.
unsafe impl<const PAGE_SIZES: bool> Backend for MimallocWith<PAGE_SIZES> {
    type Sampled = Self;
    type Aligned = super::PageAligned<Self>;
    #[inline(always)]
    fn size_before_malloc(requested: usize) -> Option<usize> {
        if requested > SMALL_MAX {
            return None;
        }
        Self::size_before_small_malloc(requested)
    }

    #[inline(always)]
    fn size_before_small_malloc(requested: usize) -> Option<usize> {
        // The mask keeps the index in the table for any request, with no
        // test; for a request up to SMALL_MAX it changes nothing.
        let words = ((requested + 7) >> 3) & (SMALL_SIZES.len() - 1);
        let size = SMALL_SIZES[words].load(Relaxed);
        (size != 0).then_some(size as usize)
    }

    #[inline(always)]
    unsafe fn malloc(size: usize) -> *mut c_void {
        // SAFETY: plain forward.
        unsafe { libmimalloc_sys::mi_malloc(size) }
    }
    #[inline(always)]
    unsafe fn calloc(count: usize, size: usize) -> *mut c_void {
        // SAFETY: plain forward.
        unsafe { mi_calloc(count, size) }
    }
    #[inline(always)]
    unsafe fn realloc(ptr: *mut c_void, size: usize) -> *mut c_void {
        // SAFETY: the caller passes a mimalloc block.
        unsafe { libmimalloc_sys::mi_realloc(ptr, size) }
    }
    #[inline(always)]
    unsafe fn free(ptr: *mut c_void) {
        // SAFETY: the caller passes a mimalloc block.
        unsafe { libmimalloc_sys::mi_free(ptr) }
    }
    #[inline(always)]
    unsafe fn aligned(align: usize, size: usize) -> *mut c_void {
        // SAFETY: `align` is a power of two.
        unsafe { libmimalloc_sys::mi_malloc_aligned(size, align) }
    }
    #[inline(always)]
    unsafe fn memalign(align: usize, size: usize) -> *mut c_void {
        // SAFETY: the helper normalises the alignment first.
        unsafe { memalign_via_aligned::<Self>(align, size) }
    }
    #[inline(always)]
    unsafe fn valloc(size: usize) -> *mut c_void {
        // SAFETY: the page size is a power of two.
        unsafe { Self::aligned(page_size(), size) }
    }
    #[inline(always)]
    unsafe fn pvalloc(size: usize) -> *mut c_void {
        // SAFETY: forwards to `aligned`.
        unsafe { pvalloc_via_aligned::<Self>(size) }
    }
    #[inline(always)]
    unsafe fn usable(ptr: *mut c_void) -> usize {
        if PAGE_SIZES {
            // SAFETY: the caller passes a live mimalloc block, and these
            // hooks are installed only once `init` verified the layout.
            unsafe { page::usable(ptr) }
        } else {
            // SAFETY: the caller passes a live mimalloc block.
            unsafe { mi_usable_size(ptr) }
        }
    }
    #[inline(always)]
    unsafe fn allocated_size(ptr: *mut c_void, requested: usize, plain: bool) -> usize {
        match Self::size_before_malloc(requested) {
            Some(size) if plain => size,
            // SAFETY: the caller passes a live mimalloc block.
            _ => unsafe { Self::usable(ptr) },
        }
    }
}

/// A block's usable size read from its mimalloc page, as `mi_usable_size`
/// reads it, without the call: the `free` hook under mimalloc must count
/// the block's bytes, and the call (with the registers the hook saves
/// around it) was most of that hook's cost.
///
/// mimalloc 2.x finds a block's page from its address alone: the segment
/// is the address rounded down to 32 MiB (one byte before it, for huge
/// aligned blocks), its slice the offset from there in 64 KiB units, and
/// the page the slice minus the slice's `slice_offset`; a page of
/// unaligned blocks holds their usable size, `block_size`. Those places
/// are mimalloc's, not an interface: the constants below are the layout
/// of the `libmimalloc-sys` the workspace pins, as its build compiles it
/// (`MI_DEBUG=0`: no padding, no free-list keys), which a unit test
/// compiles from mimalloc's header. A different build (another version
/// resolved by a registry install, say) could differ, so [`verified`]
/// compares the reading with `mi_usable_size` on live blocks first,
/// reading only a segment's first slice (its header, always mapped), and
/// the hooks that use it are installed only if every block agrees.
pub(crate) mod page {
    use core::ffi::c_void;
    use core::sync::atomic::Ordering::Relaxed;

    use super::mi_usable_size;

    /// `MI_SEGMENT_SHIFT`: segments are 32 MiB, aligned to their size.
    pub const SEGMENT_SHIFT: u32 = 25;
    /// `MI_SEGMENT_SLICE_SHIFT`: slices are 64 KiB.
    pub const SLICE_SHIFT: u32 = 16;
    /// `offsetof(mi_segment_t, slices)`.
    pub const SLICES: usize = 288;
    /// `sizeof(mi_slice_t)`, which is `mi_page_t`.
    pub const SLICE_SIZE: usize = 96;
    /// `offsetof(mi_page_t, slice_offset)`, a `uint32_t`.
    pub const SLICE_OFFSET: usize = 4;
    /// `offsetof(mi_page_t, flags)`, a byte.
    pub const FLAGS: usize = 14;
    /// `flags.x.has_aligned`: the page holds aligned blocks, whose usable
    /// size depends on where in the block the pointer lies.
    pub const HAS_ALIGNED: u8 = 2;
    /// `offsetof(mi_page_t, block_size)`, a `size_t`.
    pub const BLOCK_SIZE: usize = 40;
    /// `offsetof(mi_page_t, page_start)`, a pointer: where the page's
    /// first block begins.
    pub const PAGE_START: usize = 48;

    /// The bytes of a segment [`verified`] reads within: its first slice,
    /// where the segment's header and its slices lie. mimalloc commits
    /// that much when it maps a segment (`mi_segment_os_alloc` commits the
    /// info slices, at least one), and keeps it while any block of the
    /// segment lives.
    const HEADER_BYTES: usize = 1 << SLICE_SHIFT;

    fn segment(p: usize) -> usize {
        (p - 1) & !((1usize << SEGMENT_SHIFT) - 1)
    }

    /// The address of the page of block `p`, reading the slice's offset
    /// with `read_u32` (a plain load, or a checked one). Wrapping: under a
    /// layout being verified the offset read may be anything, and
    /// [`agrees`] rejects a page outside the segment's header.
    #[inline(always)]
    fn page_of(p: usize, read_u32: impl FnOnce(usize) -> Option<u32>) -> Option<usize> {
        let segment = segment(p);
        let slice = segment + SLICES + ((p - segment) >> SLICE_SHIFT) * SLICE_SIZE;
        Some(slice.wrapping_sub(read_u32(slice + SLICE_OFFSET)? as usize))
    }

    /// The usable size of block `p` from its page's fields: the block
    /// size, less how far into its block `p` lies where the page holds
    /// aligned blocks (mimalloc's `mi_page_usable_aligned_size_of`).
    #[inline(always)]
    fn size_in(
        p: usize,
        flags: u8,
        block_size: usize,
        page_start: impl FnOnce() -> usize,
    ) -> usize {
        if flags & HAS_ALIGNED == 0 {
            block_size
        } else {
            // No call here: a call anywhere in the `free` hook makes it
            // save registers on its fast path too.
            // Wrapping, for a layout being verified (see `page_of`); the
            // remainder is below the block size, so the difference is not.
            block_size - p.wrapping_sub(page_start()) % block_size.max(1)
        }
    }

    /// The page's flags byte. The page's owner rewrites it (`in_full`)
    /// while other threads free blocks of the page, as mimalloc's own
    /// `free` reads it, so it is read as an atomic (a plain load all the
    /// same). `has_aligned`, the bit that matters here, only changes the
    /// reckoning for pointers inside a block, never a block's start.
    ///
    /// # Safety
    /// `page` is a live mimalloc page.
    #[inline(always)]
    unsafe fn flags(page: *const u8) -> u8 {
        // SAFETY: a byte of a live page, only ever accessed per byte.
        unsafe { (*page.add(FLAGS).cast::<core::sync::atomic::AtomicU8>()).load(Relaxed) }
    }

    /// Usable size of a live mimalloc block.
    ///
    /// # Safety
    /// `p` is a live, non-NULL mimalloc block, and [`verified`] returned
    /// true in this process.
    #[inline(always)]
    pub unsafe fn usable(p: *mut c_void) -> usize {
        // SAFETY: a live block's segment header holds its slice, and the
        // slice's offset leads to its page (the layout verified).
        let page = page_of(p as usize, |at| Some(unsafe { (at as *const u32).read() }));
        let page = page.unwrap_or(0) as *const u8;
        // SAFETY: as above: the page's fields.
        unsafe {
            size_in(
                p as usize,
                flags(page),
                page.add(BLOCK_SIZE).cast::<usize>().read(),
                || page.add(PAGE_START).cast::<usize>().read(),
            )
        }
    }

    /// Whether reading `p`'s page gives `mi_usable_size(p)`, reading only
    /// the first [`HEADER_BYTES`] of its segment: a wrong layout can then
    /// be wrong about the size, never read unmapped memory (a block whose
    /// slice lies past them counts as a disagreement).
    ///
    /// # Safety
    /// `p` is a live, non-NULL mimalloc block.
    unsafe fn agrees(p: *mut c_void) -> bool {
        let segment = segment(p as usize);
        let inside = |at: usize, len: usize| at >= segment && at + len <= segment + HEADER_BYTES;
        let read_u32 = |at: usize| {
            // SAFETY: inside the segment's first slice, its header.
            inside(at, 4).then(|| unsafe { (at as *const u32).read() })
        };
        let Some(page) = page_of(p as usize, read_u32) else {
            return false;
        };
        if !inside(page, PAGE_START + 8) {
            return false;
        }
        let page = page as *const u8;
        // SAFETY: inside the segment's header, checked above; `p` is live.
        unsafe {
            let size = size_in(
                p as usize,
                flags(page),
                page.add(BLOCK_SIZE).cast::<usize>().read_unaligned(),
                || page.add(PAGE_START).cast::<usize>().read_unaligned(),
            );
            size == mi_usable_size(p)
        }
    }

    /// Whether [`usable`] reads this mimalloc's blocks right: checked on
    /// live blocks of small and medium pages, some spanning several
    /// slices (a non-zero slice offset), and a page of aligned blocks.
    pub fn verified() -> bool {
        // Small (64 KiB pages) and medium (512 KiB pages of eight slices),
        // enough of the latter that some lie past their page's first
        // slice (a non-zero slice offset): a few hundred kilobytes, at
        // once back in mimalloc's free lists.
        const SIZES: [(usize, usize); 4] = [(24, 2), (1000, 2), (20_000, 6), (60_000, 3)];
        let mut blocks = [core::ptr::null_mut::<c_void>(); 16];
        let mut n = 0;
        let mut ok = true;
        'probe: for (size, count) in SIZES {
            for _ in 0..count {
                // SAFETY: a plain allocation, freed below.
                let p = unsafe { libmimalloc_sys::mi_malloc(size) };
                if p.is_null() {
                    ok = false;
                    break 'probe;
                }
                blocks[n] = p;
                n += 1;
                // SAFETY: `p` is live.
                ok &= unsafe { agrees(p) };
            }
        }
        // Blocks of pages of aligned blocks, at their start and inside.
        for (size, align) in [(200, 4096), (5000, 256)] {
            // SAFETY: a plain aligned allocation, freed below.
            let p = unsafe { libmimalloc_sys::mi_malloc_aligned(size, align) };
            if p.is_null() {
                ok = false;
                continue;
            }
            blocks[n] = p;
            n += 1;
            // SAFETY: `p` is live; one byte in is inside the same block.
            ok &= unsafe { agrees(p) && agrees(p.cast::<u8>().add(1).cast()) };
        }
        for &p in &blocks[..n] {
            // SAFETY: each block was allocated above, and is freed once.
            unsafe { libmimalloc_sys::mi_free(p) };
        }
        ok
    }
}

/// Largest request whose fresh block's usable size is read from the table:
/// every request the hooks' fast path makes (see
/// `Backend::size_before_small_malloc`).
const SMALL_MAX: usize = EXACT_TIMING_BYTES;

/// Usable size of a fresh `mi_malloc(n)` block for n up to [`SMALL_MAX`],
/// indexed by `(n + 7) / 8`: mimalloc rounds every request up to a whole
/// word and picks the size bin from that, so the word count decides the
/// block size. Filled at start-up from real allocations, so it is exact by
/// construction; zero means "look it up", so a table being filled (by one
/// or, racing, several first calls) is always safe to read. Relaxed atomic
/// loads are plain moves. Its length is a power of two, for the index to
/// be masked rather than tested (entries past `SMALL_MAX / 8` stay zero;
/// the 64 KiB are zero pages until written).
static SMALL_SIZES: [AtomicU32; (SMALL_MAX / 8 + 1).next_power_of_two()] =
    [const { AtomicU32::new(0) }; (SMALL_MAX / 8 + 1).next_power_of_two()];

unsafe extern "C" {
    fn mi_register_error(
        handler: Option<unsafe extern "C" fn(c_int, *mut c_void)>,
        arg: *mut c_void,
    );
}

/// mimalloc's error handler: it is called with ENOMEM (out of memory) or
/// EOVERFLOW (impossible size) for every failed allocation, right before
/// mimalloc returns NULL, so setting errno here gives glibc's behaviour.
unsafe extern "C" fn on_mimalloc_error(err: c_int, _arg: *mut c_void) {
    if err == libc::ENOMEM || err == libc::EOVERFLOW {
        crate::posix::set_errno(libc::ENOMEM);
    }
}

/// Prepares mimalloc for the shim: the errno handler and the small-size
/// table. Called once, when mimalloc is chosen, before any hook uses it.
/// Returns whether block sizes can be read from their pages
/// ([`page::verified`]).
pub fn init() -> bool {
    set_errno_on_failure();
    init_size_table();
    page::verified()
}

/// Registers the handler that sets `errno` as glibc does when an
/// allocation fails: whenever mimalloc is the backend, recorded or not.
pub fn set_errno_on_failure() {
    // SAFETY: registers a handler that only sets errno.
    unsafe { mi_register_error(Some(on_mimalloc_error), core::ptr::null_mut()) };
}

/// Fills the small-size table one size bin at a time: a block made for `n`
/// bytes has the usable size `u` of `n`'s bin (`mi_good_size`, mimalloc's
/// own answer, which allocates nothing), and every request from `n` to `u`
/// falls in that same bin (a bin takes the requests above the bin below
/// it, up to its block size). One real block per bin would leave ~70
/// pages with the thread, 4.7 MiB resident in a program that allocates
/// nothing; the test below checks the table against real blocks.
fn init_size_table() {
    let last = SMALL_MAX / 8;
    let mut words = 1;
    while words <= last {
        // SAFETY: a pure function of the size.
        let size = unsafe { libmimalloc_sys::mi_good_size(words * 8) };
        let Ok(value) = u32::try_from(size) else {
            return;
        };
        let end = (size / 8).clamp(words, last);
        for slot in &SMALL_SIZES[words..=end] {
            slot.store(value, Relaxed);
        }
        words = end + 1;
    }
    // malloc(0): mimalloc hands out its smallest block.
    SMALL_SIZES[0].store(SMALL_SIZES[1].load(Relaxed), Relaxed);
}

/// mimalloc's locks across `fork`.
///
/// mimalloc registers no `fork` handlers. Its allocation paths are
/// lock-free, but two mutexes of its (only) sub-process guard the list of
/// abandoned segments that live outside its arenas: `abandoned_os_visit_lock`
/// (one thread at a time walks that list; every reclaim try-locks it) and
/// `abandoned_os_lock` (the list itself). A child forked while another
/// thread held one keeps it held forever, and the child's `exit` waits for
/// it: `mi_process_done` collects with `force`, which takes the visit lock
/// without trying (seen in gdb on a hung child of `forkstress`).
///
/// So, as glibc and jemalloc do for their own locks, the forking thread
/// takes both, in mimalloc's order, and the parent and child release them
/// (the shim's handlers call these when another thread may hold one, after
/// glibc's stdio list lock: see `lifecycle`). Their holders only walk or
/// splice the list, so the wait is short, but it is bounded all the same,
/// so that a `fork` never waits on a thread that cannot go on (a signal
/// handler's `fork` on another thread, say): a lock not taken in time is
/// reset in the child, where its holder no longer exists (if that holder
/// was splicing the list, the child may lose track of some abandoned
/// segments, where mimalloc alone would hang). A lock held by the forking
/// thread itself (a signal handler's `fork` interrupting mimalloc) is left
/// to the frame that holds it, as mimalloc alone leaves it.
pub mod fork {
    use core::ffi::c_void;

    use crate::tls;
    use allocmux_recorder::monotonic_ns;

    unsafe extern "C" {
        /// mimalloc's own sub-process for a null id (`mi_subproc_main()`
        /// returns null, not the address).
        fn _mi_subproc_from_id(id: *mut c_void) -> *mut SubprocLocks;
    }

    /// The start of mimalloc 2.2's `mi_subproc_t` (`include/mimalloc/types.h`
    /// of the `libmimalloc-sys` version the workspace pins), where
    /// `mi_lock_t` is a `pthread_mutex_t` on Linux. A unit test compiles
    /// the offsets from that header and compares.
    #[repr(C)]
    pub(super) struct SubprocLocks {
        abandoned_count: usize,
        abandoned_os_list_count: usize,
        pub(super) abandoned_os_lock: libc::pthread_mutex_t,
        pub(super) abandoned_os_visit_lock: libc::pthread_mutex_t,
    }

    /// How long `prepare` tries a lock held by another thread, yielding in
    /// between. A holder only splices a list, so it lets go within
    /// microseconds unless it is preempted; on a loaded machine a yield
    /// can cost a whole time slice (1000 yields measured 2.9 s here), so
    /// the bound is on time, not on tries.
    const PATIENCE_NS: u64 = 20_000_000;

    /// What `prepare` did with one lock, for `parent` and `child`.
    /// (All-zero, the value in a new thread's TLS, is "leave it alone".)
    #[derive(Clone, Copy, PartialEq, Eq)]
    #[repr(u8)]
    pub enum Held {
        /// Already held by this thread (the frame a signal handler
        /// interrupted), or not looked at: left alone.
        ByThisThread = 0,
        /// Taken by this thread's `prepare`: released after the `fork`.
        ByPrepare,
        /// Held by another thread throughout: reset in the child.
        Elsewhere,
    }

    pub(super) fn locks() -> [*mut libc::pthread_mutex_t; 2] {
        // SAFETY: returns the address of mimalloc's static sub-process.
        let sub = unsafe { _mi_subproc_from_id(core::ptr::null_mut()) };
        // SAFETY: `sub` points to a live `mi_subproc_t`, whose start
        // `SubprocLocks` mirrors; no reference is made.
        unsafe {
            [
                &raw mut (*sub).abandoned_os_visit_lock,
                &raw mut (*sub).abandoned_os_lock,
            ]
        }
    }

    /// The thread id glibc records in a locked mutex (`__data.__owner`,
    /// the third `int` on every glibc target), 0 when unlocked.
    fn owner(lock: *mut libc::pthread_mutex_t) -> i32 {
        // SAFETY: a glibc `pthread_mutex_t` starts with `__lock`, `__count`
        // and `__owner`, each an `int`; a racy read of another thread's
        // lock can only be wrong about that thread, never equal our id.
        unsafe { lock.cast::<i32>().add(2).read_volatile() }
    }

    fn take(lock: *mut libc::pthread_mutex_t, me: i32) -> Held {
        if owner(lock) == me {
            return Held::ByThisThread;
        }
        let deadline = monotonic_ns() + PATIENCE_NS;
        loop {
            // SAFETY: mimalloc's initialised mutex, not held by this
            // thread; released in `parent` or `child`.
            if unsafe { libc::pthread_mutex_trylock(lock) } == 0 {
                return Held::ByPrepare;
            }
            if monotonic_ns() > deadline {
                break;
            }
            // SAFETY: sched_yield has no preconditions.
            unsafe { libc::sched_yield() };
        }
        Held::Elsewhere
    }

    /// From the shim's prepare handler.
    pub fn prepare() {
        // SAFETY: a system call without arguments.
        let me = unsafe { libc::gettid() };
        let [visit, list] = locks();
        let held = [take(visit, me), take(list, me)];
        tls::current().mimalloc_fork.set(held);
    }

    /// From the shim's parent handler.
    pub fn parent() {
        for (lock, held) in locks()
            .into_iter()
            .zip(tls::current().mimalloc_fork.get())
            .rev()
        {
            if held == Held::ByPrepare {
                // SAFETY: locked by this thread in `prepare`.
                unsafe { libc::pthread_mutex_unlock(lock) };
            }
        }
    }

    /// From the shim's child handler.
    pub fn child() {
        for (lock, held) in locks()
            .into_iter()
            .zip(tls::current().mimalloc_fork.get())
            .rev()
        {
            match held {
                // SAFETY: locked by the parent thread this one continues,
                // in `prepare`.
                Held::ByPrepare => unsafe {
                    libc::pthread_mutex_unlock(lock);
                },
                // SAFETY: the child has one thread, and the lock's holder
                // is not it: what `mi_lock_init` writes.
                Held::Elsewhere => unsafe {
                    lock.write(libc::PTHREAD_MUTEX_INITIALIZER);
                },
                Held::ByThisThread => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fork;
    use std::sync::mpsc;
    use std::time::{Duration, Instant};

    /// Forks (running the shim's mimalloc handlers where `pthread_atfork`
    /// would) while another thread holds mimalloc's visit lock, either for
    /// `hold` or until the fork is over; returns whether both of
    /// mimalloc's locks were free in the child. (A child's `exit` on the
    /// main thread waits for the visit lock; this checks the lock itself,
    /// from whichever thread the test harness runs on.)
    fn child_has_the_locks_free_while_a_thread_holds_one(hold: Option<Duration>) -> bool {
        let (locked_tx, locked_rx) = mpsc::channel();
        let (done_tx, done_rx) = mpsc::channel::<()>();
        let holder = std::thread::spawn(move || {
            let visit = fork::locks()[0];
            // SAFETY: mimalloc's initialised mutex, unlocked below.
            unsafe { libc::pthread_mutex_lock(visit) };
            locked_tx.send(()).unwrap();
            match hold {
                Some(d) => std::thread::sleep(d),
                None => done_rx.recv().unwrap(),
            }
            // SAFETY: locked above by this thread.
            unsafe { libc::pthread_mutex_unlock(visit) };
        });
        locked_rx.recv().unwrap();
        fork::prepare();
        // SAFETY: the child only runs the child handler, two try-locks and
        // `_exit`.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            fork::child();
            // SAFETY: mimalloc's initialised mutexes; `_exit` ends the child.
            unsafe {
                let free = fork::locks()
                    .into_iter()
                    .all(|lock| libc::pthread_mutex_trylock(lock) == 0);
                libc::_exit(if free { 0 } else { 1 });
            }
        }
        fork::parent();
        assert!(pid > 0, "fork failed");
        let start = Instant::now();
        let mut status = 0;
        let finished = loop {
            // SAFETY: waits for our own child without blocking.
            if unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) } == pid {
                break true;
            }
            if start.elapsed() > Duration::from_secs(10) {
                // SAFETY: our own child, then reaped.
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                    libc::waitpid(pid, &mut status, 0);
                }
                break false;
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        let _ = done_tx.send(());
        holder.join().unwrap();
        finished && libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0
    }

    /// What a C program with `main_body` prints, compiled against
    /// mimalloc's own header from the `libmimalloc-sys` sources the shim
    /// links, with the defines that crate builds mimalloc with
    /// (`MI_DEBUG=0`, `NDEBUG`).
    fn from_mimallocs_header(main_body: &str) -> String {
        // From build.rs: libmimalloc-sys's include directory.
        let include = env!("ALLOCMUX_MIMALLOC_INCLUDE");
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("probe.c");
        let exe = dir.path().join("probe");
        std::fs::write(
            &src,
            format!(
                "#include <stddef.h>\n#include <stdio.h>\n#include \"mimalloc/types.h\"\n\
                 int main(void) {{ {main_body} return 0; }}\n"
            ),
        )
        .unwrap();
        let built = std::process::Command::new("gcc")
            .args(["-DMI_DEBUG=0", "-DNDEBUG"])
            .arg(format!("-I{include}"))
            .arg(&src)
            .arg("-o")
            .arg(&exe)
            .status()
            .expect("gcc runs");
        assert!(built.success(), "the probe compiles against {include}");
        let out = std::process::Command::new(&exe).output().unwrap();
        String::from_utf8(out.stdout).unwrap()
    }

    /// `SubprocLocks` has the offsets mimalloc's own header gives.
    #[test]
    fn the_mirror_of_mimallocs_sub_process_matches_its_header() {
        let header = from_mimallocs_header(
            "printf(\"%zu %zu\", offsetof(mi_subproc_t, abandoned_os_lock), \
             offsetof(mi_subproc_t, abandoned_os_visit_lock));",
        );
        let mirror = format!(
            "{} {}",
            core::mem::offset_of!(fork::SubprocLocks, abandoned_os_lock),
            core::mem::offset_of!(fork::SubprocLocks, abandoned_os_visit_lock)
        );
        assert_eq!(mirror, header, "offsets of the two locks in mi_subproc_t");
    }

    /// The layout `page` reads block sizes with is the one mimalloc's own
    /// header gives.
    #[test]
    fn the_page_layout_matches_mimallocs_header() {
        use super::page::*;
        let header = from_mimallocs_header(
            "mi_page_t page = {0}; page.flags.x.has_aligned = 1; \
             printf(\"%d %d %zu %zu %zu %zu %u %zu %zu %d\", MI_SEGMENT_SHIFT, \
             MI_SEGMENT_SLICE_SHIFT, offsetof(mi_segment_t, slices), sizeof(mi_slice_t), \
             offsetof(mi_page_t, slice_offset), offsetof(mi_page_t, flags), \
             (unsigned)page.flags.full_aligned, offsetof(mi_page_t, block_size), \
             offsetof(mi_page_t, page_start), (int)MI_PADDING_SIZE);",
        );
        let mirror = format!(
            "{SEGMENT_SHIFT} {SLICE_SHIFT} {SLICES} {SLICE_SIZE} {SLICE_OFFSET} {FLAGS} \
             {HAS_ALIGNED} {BLOCK_SIZE} {PAGE_START} 0"
        );
        assert_eq!(mirror, header, "mimalloc's segment and page layout");
    }

    /// Block sizes read from their pages are `mi_usable_size`'s, for
    /// blocks of every kind of page: small, medium, large, huge (a segment
    /// of its own), and aligned blocks, at their start and inside them.
    #[test]
    fn block_sizes_read_from_pages_are_mimallocs() {
        assert!(
            super::page::verified(),
            "the layout is verified on live blocks"
        );
        let check = |p: *mut core::ffi::c_void| {
            assert!(!p.is_null());
            // SAFETY: a live mimalloc block (or a pointer inside one, as
            // mimalloc's own usable-size reckoning takes it).
            let (ours, theirs) = unsafe { (super::page::usable(p), super::mi_usable_size(p)) };
            assert_eq!(ours, theirs, "block at {p:?}");
        };
        let mut blocks = Vec::new();
        for size in [
            0,
            1,
            8,
            24,
            100,
            1000,
            4096,
            10_000,
            70_000,
            300_000,
            2 << 20,
            40 << 20,
        ] {
            for _ in 0..3 {
                // SAFETY: a plain allocation, freed below.
                let p = unsafe { libmimalloc_sys::mi_malloc(size) };
                check(p);
                blocks.push(p);
            }
        }
        for (size, align) in [
            (8, 64),
            (200, 4096),
            (5000, 256),
            (100_000, 1 << 16),
            (1 << 20, 1 << 22),
        ] {
            // SAFETY: a plain aligned allocation, freed below.
            let p = unsafe { libmimalloc_sys::mi_malloc_aligned(size, align) };
            check(p);
            // SAFETY: inside the same block.
            check(unsafe { p.cast::<u8>().add(size / 2).cast() });
            blocks.push(p);
        }
        for p in blocks {
            // SAFETY: allocated above, freed once.
            unsafe { libmimalloc_sys::mi_free(p) };
        }
    }

    /// The small-size table, filled from `mi_good_size` per size bin,
    /// gives every request up to its end the usable size of a block
    /// mimalloc makes for it, and the masked look-up of the hooks' fast
    /// path reads the same entries.
    #[test]
    fn the_small_size_table_is_mimallocs_for_every_request() {
        use super::{Backend, Mimalloc, SMALL_MAX};
        super::init_size_table();
        let mut wrong = Vec::new();
        for n in (0..=SMALL_MAX)
            .step_by(8)
            .flat_map(|n| [n.saturating_sub(1), n, n + 1])
        {
            if n > SMALL_MAX {
                continue;
            }
            // SAFETY: a plain allocation, freed at once.
            let theirs = unsafe {
                let p = libmimalloc_sys::mi_malloc(n);
                assert!(!p.is_null());
                let size = super::mi_usable_size(p);
                libmimalloc_sys::mi_free(p);
                size
            };
            let ours = (
                Mimalloc::size_before_malloc(n),
                Mimalloc::size_before_small_malloc(n),
            );
            if ours != (Some(theirs), Some(theirs)) && wrong.len() < 10 {
                wrong.push(format!("{n}: table {ours:?}, mimalloc {theirs}"));
            }
        }
        assert!(wrong.is_empty(), "{wrong:#?}");
        assert_eq!(Mimalloc::size_before_malloc(SMALL_MAX + 1), None);
    }

    /// Both ways a lock can be held at a fork, one after the other (they
    /// share the lock): a holder that lets go soon, for whom `prepare`
    /// waits, taking the lock that the child then releases; and one that
    /// does not let go before the fork is over, where `prepare` gives up
    /// and the child, in which the holder is gone, resets the lock.
    #[test]
    fn a_child_does_not_inherit_mimallocs_visit_lock() {
        let soon = Some(Duration::from_millis(5));
        assert!(child_has_the_locks_free_while_a_thread_holds_one(soon));
        assert!(child_has_the_locks_free_while_a_thread_holds_one(None));
    }
}
