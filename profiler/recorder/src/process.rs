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

/// An exclusive `flock` on a directory, held until dropped: what lets
/// processes that rewrite a file in it (by renaming a new one over it)
/// take turns, since a lock on the file itself would stay with the file
/// that was renamed away. Not used on any allocator path.
#[derive(Debug)]
pub struct DirLock {
    _held: std::fs::File,
}

impl DirLock {
    /// Waits for, and takes, the lock on `dir`.
    pub fn exclusive(dir: &std::path::Path) -> std::io::Result<DirLock> {
        use std::os::fd::AsRawFd;
        let f = std::fs::File::open(dir)?;
        loop {
            // SAFETY: `flock` on a descriptor this function owns; it
            // reads and writes no memory of ours.
            if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) } == 0 {
                return Ok(DirLock { _held: f });
            }
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }
}
// Closing the descriptor (dropping the `File`) releases the lock.
