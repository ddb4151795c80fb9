//! Readings of the process itself that allocate nothing, so the shim can
//! take them from any context it runs in.

/// The page size, from the auxiliary vector (no system call, no
/// allocation); 4096 if the kernel did not pass it.
#[inline]
pub fn page_size() -> usize {
    // SAFETY: getauxval has no preconditions and only reads the auxiliary
    // vector ld.so saved at start-up.
    match unsafe { libc::getauxval(libc::AT_PAGESZ) } as usize {
        0 => 4096,
        n => n,
    }
}

/// The peak resident set size of this process so far, in bytes.
pub fn max_rss_bytes() -> u64 {
    // SAFETY: `getrusage` fills the zeroed struct it is given and reads
    // nothing else.
    let ru = unsafe {
        let mut ru: libc::rusage = core::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut ru);
        ru
    };
    (ru.ru_maxrss.max(0) as u64) * 1024
}
