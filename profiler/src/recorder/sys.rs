//! The one process figure the profile needs that std lacks: the peak
//! resident size (`getrusage`).

/// The peak resident set size of this process so far, in bytes.
pub(crate) fn max_rss_bytes() -> u64 {
    // SAFETY: `getrusage` only writes the `rusage` it is given, and an
    // all-zero `rusage` (plain integers) is a valid value to hand it.
    let ru = unsafe {
        let mut ru: libc::rusage = core::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut ru);
        ru
    };
    (ru.ru_maxrss.max(0) as u64) * 1024
}
