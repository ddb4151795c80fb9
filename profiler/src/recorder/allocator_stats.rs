//! Reading the allocators' own statistics: the calls behind
//! [`AllocatorStats::read`](crate::AllocatorStats::read).
//!
//! None of them allocates through `malloc` (jemalloc's control interface
//! uses its internal metadata allocator, glibc's `mallinfo2` and mimalloc's
//! `mi_process_info` fill caller-owned values), so the shim can read them
//! from its writer thread. They do take locks: jemalloc its `ctl` mutex and
//! arena statistics mutexes, glibc every arena's mutex. So they must not run
//! in a signal handler, or where the caller holds a lock that an allocating
//! thread (or a `fork`'s atfork handler) may be waiting for while holding
//! one of those: read first, then take your own locks.

use crate::allocator_stats::{GlibcStats, JemallocStats, MimallocStats};

/// jemalloc's totals after advancing its epoch (they are cached per epoch),
/// through tikv-jemalloc-ctl, which calls tikv-jemalloc-sys's
/// `_rjem_mallctl`: the jemalloc `Switchable`, tikv-jemallocator and the
/// shim allocate from.
#[cfg(feature = "jemalloc")]
pub fn read_jemalloc_stats() -> Option<JemallocStats> {
    use tikv_jemalloc_ctl::{epoch, stats};
    epoch::advance().ok()?;
    Some(JemallocStats {
        allocated: stats::allocated::read().ok()? as u64,
        active: stats::active::read().ok()? as u64,
        resident: stats::resident::read().ok()? as u64,
        mapped: stats::mapped::read().ok()? as u64,
        retained: stats::retained::read().ok()? as u64,
    })
}

/// Without the `jemalloc` feature there is no jemalloc to ask.
#[cfg(not(feature = "jemalloc"))]
pub fn read_jemalloc_stats() -> Option<JemallocStats> {
    None
}

/// mimalloc's `mi_process_info`: lock-free (atomic loads of its committed
/// counters, one `getrusage`).
#[cfg(feature = "mimalloc")]
pub fn read_mimalloc_stats() -> Option<MimallocStats> {
    let (mut commit, mut peak_commit, mut peak_rss, mut faults) = (0usize, 0usize, 0usize, 0usize);
    // SAFETY: every out-pointer is either NULL (allowed: "all parameters
    // are optional") or a valid, writable usize of ours.
    unsafe {
        libmimalloc_sys::mi_process_info(
            core::ptr::null_mut(),
            core::ptr::null_mut(),
            core::ptr::null_mut(),
            core::ptr::null_mut(),
            &mut peak_rss,
            &mut commit,
            &mut peak_commit,
            &mut faults,
        )
    };
    Some(MimallocStats {
        committed: commit as u64,
        peak_committed: peak_commit as u64,
        peak_rss: peak_rss as u64,
        page_faults: faults as u64,
    })
}

/// Without the `mimalloc` feature there is no mimalloc to ask.
#[cfg(not(feature = "mimalloc"))]
pub fn read_mimalloc_stats() -> Option<MimallocStats> {
    None
}

/// glibc's `mallinfo2` (glibc 2.33 and later): it locks each arena in turn
/// and walks its free lists.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn read_glibc_stats() -> Option<GlibcStats> {
    // SAFETY: no preconditions; returns a plain struct by value.
    let m = unsafe { libc::mallinfo2() };
    Some(GlibcStats {
        in_use: (m.uordblks as u64).saturating_add(m.hblkhd as u64),
        free: m.fordblks as u64,
        arena: m.arena as u64,
        mmapped: m.hblkhd as u64,
        releasable: m.keepcost as u64,
    })
}

/// Not glibc: no `mallinfo2`.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn read_glibc_stats() -> Option<GlibcStats> {
    None
}
