//! Reading the allocators' own statistics ([`read`]).
//!
//! None of them allocates through `malloc` (jemalloc's control interface
//! uses its internal metadata allocator, glibc's `mallinfo2` and mimalloc's
//! `mi_process_info` fill caller-owned values), so the shim can read them
//! from its writer thread. They do take locks: jemalloc its `ctl` mutex and
//! arena statistics mutexes, glibc every arena's mutex. So they must not run
//! in a signal handler, or where the caller holds a lock that an allocating
//! thread (or a `fork`'s atfork handler) may be waiting for while holding
//! one of those: read first, then take your own locks.

use allocmux_format::{AllocatorStats, Backend, GlibcStats, JemallocStats, MimallocStats};

/// Reads the statistics of `backend`, or `None` if this build does not
/// have it (the `jemalloc` and `mimalloc` features), its statistics
/// cannot be read (jemalloc built without `stats`), or, for the system
/// allocator, the C library is not glibc.
///
/// jemalloc's and mimalloc's are the static builds that
/// [`Switchable`](crate::Switchable), tikv-jemallocator and the mimalloc
/// crate use (tikv-jemalloc-sys's `_rjem_` symbols, libmimalloc-sys);
/// reading one the process does not allocate with gives its (small)
/// start-up figures, and initialises it if nothing had. Glibc's figures
/// cover everything glibc's malloc serves in the process, Rust's
/// `System` and C code alike.
///
/// Costs a few microseconds (jemalloc refreshes its totals over its
/// arenas; glibc walks its free lists under its arena locks); not for a
/// hot path. See docs/recording.md for the measured figures.
pub fn read(backend: Backend) -> Option<AllocatorStats> {
    match backend {
        Backend::System => read_glibc_stats().map(AllocatorStats::System),
        Backend::Jemalloc => read_jemalloc_stats().map(AllocatorStats::Jemalloc),
        Backend::Mimalloc => read_mimalloc_stats().map(AllocatorStats::Mimalloc),
        // Whatever library it is, allocmux knows no way to ask it.
        Backend::Next => None,
    }
}

/// jemalloc's totals after advancing its epoch (they are cached per epoch),
/// through tikv-jemalloc-ctl, which calls tikv-jemalloc-sys's
/// `_rjem_mallctl`: the jemalloc `Switchable`, tikv-jemallocator and the
/// shim allocate from.
#[cfg(feature = "jemalloc")]
pub fn read_jemalloc_stats() -> Option<JemallocStats> {
    use tikv_jemalloc_ctl::{epoch, stats};
    epoch::advance().ok()?;
    // Built field by field: the type is `#[non_exhaustive]` in
    // allocmux-format.
    let mut reading = JemallocStats::default();
    reading.allocated = stats::allocated::read().ok()? as u64;
    reading.active = stats::active::read().ok()? as u64;
    reading.resident = stats::resident::read().ok()? as u64;
    reading.mapped = stats::mapped::read().ok()? as u64;
    reading.retained = stats::retained::read().ok()? as u64;
    Some(reading)
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
    // Built field by field: the type is `#[non_exhaustive]` in
    // allocmux-format.
    let mut reading = MimallocStats::default();
    reading.committed = commit as u64;
    reading.peak_committed = peak_commit as u64;
    reading.peak_rss = peak_rss as u64;
    reading.page_faults = faults as u64;
    Some(reading)
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
    // Built field by field: the type is `#[non_exhaustive]` in
    // allocmux-format.
    let mut reading = GlibcStats::default();
    reading.in_use = (m.uordblks as u64).saturating_add(m.hblkhd as u64);
    reading.free = m.fordblks as u64;
    reading.arena = m.arena as u64;
    reading.mmapped = m.hblkhd as u64;
    reading.releasable = m.keepcost as u64;
    Some(reading)
}

/// Not glibc: no `mallinfo2`.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn read_glibc_stats() -> Option<GlibcStats> {
    None
}
