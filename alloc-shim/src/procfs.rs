//! Readings of `/proc/self`, into fixed buffers.

/// The resident set size now, from `/proc/self/statm` (its second field,
/// in pages), or 0 if it cannot be read. Opened and closed each time: a
/// descriptor kept open could be closed or reused by the program (shells
/// and daemons close every descriptor they do not know).
pub fn rss_bytes() -> u64 {
    let page_size = allocmux::recorder::process::page_size() as u64;
    // Seven numbers: 128 bytes hold them whole, and the kernel produces
    // them in one read, so one read (not a loop to end of file, whose
    // second, empty read is a system call on every sample) is enough.
    let mut buf = [0u8; 128];
    // SAFETY: NUL-terminated path, valid buffer, fd closed after use.
    let n = unsafe {
        let fd = libc::open(
            c"/proc/self/statm".as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        );
        if fd < 0 {
            return 0;
        }
        let n = libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
        libc::close(fd);
        n.max(0) as usize
    };
    let pages = buf[..n]
        .split(|&b| b == b' ')
        .nth(1)
        .and_then(|f| core::str::from_utf8(f).ok()?.parse::<u64>().ok());
    pages.unwrap_or(0).saturating_mul(page_size)
}

/// The target of a symbolic link, into `buf`; its length (0 if unreadable).
pub fn read_link(path: &core::ffi::CStr, buf: &mut [u8]) -> usize {
    // SAFETY: NUL-terminated path, valid buffer.
    let n = unsafe { libc::readlink(path.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    n.max(0) as usize
}

/// A whole small file, into `buf` (as much as fits); its length.
pub fn read_file(path: &core::ffi::CStr, buf: &mut [u8]) -> usize {
    // SAFETY: NUL-terminated path, valid buffer, fd closed after use.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return 0;
        }
        let mut len = 0;
        while len < buf.len() {
            let n = libc::read(fd, buf[len..].as_mut_ptr().cast(), buf.len() - len);
            if n <= 0 {
                break;
            }
            len += n as usize;
        }
        libc::close(fd);
        len
    }
}
