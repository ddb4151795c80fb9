//! Raw descriptor operations the writer needs, allocating nothing.

use core::ffi::c_int;

/// This thread's `errno`.
pub fn errno() -> c_int {
    // SAFETY: reads this thread's errno.
    unsafe { *libc::__errno_location() }
}

/// The (device, inode) identity of an open descriptor, to tell later
/// whether it still refers to the same file.
pub fn fd_identity(fd: c_int) -> Option<(u64, u64)> {
    // SAFETY: valid out-pointer.
    unsafe {
        let mut st: libc::stat = core::mem::zeroed();
        (libc::fstat(fd, &mut st) == 0).then_some((st.st_dev, st.st_ino))
    }
}

/// Writes all of `bytes`, retrying on `EINTR`; false if the descriptor
/// fails or takes nothing.
pub fn write_all(fd: c_int, mut bytes: &[u8]) -> bool {
    while !bytes.is_empty() {
        // SAFETY: valid buffer.
        let n = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
        if n < 0 && errno() == libc::EINTR {
            continue;
        }
        if n <= 0 {
            return false;
        }
        bytes = &bytes[n as usize..];
    }
    true
}
