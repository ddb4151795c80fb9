//! Readings of `/proc/self`, into fixed buffers.

/// The resident set size now, from `/proc/self/statm` (its second field,
/// in pages), or 0 if it cannot be read. Opened and closed each time: a
/// descriptor kept open could be closed or reused by the program (shells
/// and daemons close every descriptor they do not know).
pub fn rss_bytes() -> u64 {
    let page_size = allocmux_recorder::process::page_size() as u64;
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

/// Whether every other thread of the process has ended: its main thread is
/// a zombie (it left through `pthread_exit`) and so is every task in
/// `/proc/self/task` but the calling one. The common answer, no, costs one
/// read of `/proc/self/stat`.
pub fn only_thread_left() -> bool {
    if !is_zombie(c"/proc/self/stat") {
        return false;
    }
    // SAFETY: gettid has no preconditions.
    let me = unsafe { libc::gettid() } as u64;
    // SAFETY: NUL-terminated path; the descriptor is closed below.
    let dir = unsafe {
        libc::open(
            c"/proc/self/task".as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if dir < 0 {
        return false;
    }
    let mut others_ended = true;
    let mut buf = [0u8; 4096];
    'read: loop {
        // SAFETY: a valid buffer for the directory's entries.
        let n = unsafe { libc::syscall(libc::SYS_getdents64, dir, buf.as_mut_ptr(), buf.len()) };
        if n <= 0 {
            others_ended &= n == 0;
            break;
        }
        // linux_dirent64: inode (8 bytes), offset (8), record length (2),
        // type (1), then the NUL-terminated name.
        let mut at = 0;
        while at + 19 < n as usize {
            let reclen = u16::from_ne_bytes([buf[at + 16], buf[at + 17]]) as usize;
            let name = &buf[at + 19..at + reclen.max(19)];
            let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())];
            if let Some(tid) = core::str::from_utf8(name)
                .ok()
                .and_then(|s| s.parse::<u64>().ok())
                && tid != me
                && !task_is_zombie(tid)
            {
                others_ended = false;
                break 'read;
            }
            if reclen == 0 {
                break;
            }
            at += reclen;
        }
    }
    // SAFETY: the descriptor opened above.
    unsafe { libc::close(dir) };
    others_ended
}

/// Whether task `tid` of this process has ended (or cannot be read: it is
/// gone).
fn task_is_zombie(tid: u64) -> bool {
    use core::fmt::Write as _;
    let mut path = [0u8; 64];
    let mut w = crate::fmt::SliceWriter {
        buf: &mut path,
        len: 0,
    };
    // "/proc/self/task/" and 20 digits fit, with the NUL.
    let _ = write!(w, "/proc/self/task/{tid}/stat\0");
    let len = w.len;
    match core::ffi::CStr::from_bytes_with_nul(&path[..len]) {
        Ok(p) => is_zombie(p),
        Err(_) => false,
    }
}

/// Whether the `stat` file at `path` says its task is a zombie or dead
/// (its third field, after the parenthesised name), or cannot be read.
fn is_zombie(path: &core::ffi::CStr) -> bool {
    let mut buf = [0u8; 512];
    let n = read_file(path, &mut buf);
    let Some(close) = buf[..n].iter().rposition(|&b| b == b')') else {
        return n == 0;
    };
    matches!(buf.get(close + 2), Some(b'Z' | b'X'))
}
