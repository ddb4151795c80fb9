//! The profile file: claiming this process's name (`%p`, then `.1`,
//! `.2`, ...), and replacing its contents whole through a temporary file
//! and a rename, so a reader (or a SIGKILL mid-write) never sees half a
//! file and a descriptor the program takes over is never written.

use core::ffi::c_int;
use core::fmt::Write as _;

use allocmux_format::settings::expand_output_template;

use crate::fd::{errno, fd_identity, write_all};
use crate::fmt::{Bytes, Errno, PathBuf, warn};

/// The longest path the shim writes, with its NUL.
pub const PATH_MAX: usize = 4096;

/// What [`claim`] got for this process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Claim {
    /// The profile file, created empty; its path (NUL-terminated in the
    /// caller's buffer) is this long.
    File {
        /// The path's length without the NUL.
        path_len: usize,
    },
    /// `ALLOCMUX_OUTPUT` is the null device: nothing is written, not even
    /// the summary line that stands in for a profile that cannot be.
    NullDevice,
    /// No file could be had (the reason was reported on stderr).
    Unavailable,
}

/// Creates this process's profile file without following symlinks or
/// replacing anything: `%p` in the template becomes the pid, and if that
/// name is taken (an `exec` in the same process, or a fixed name shared by
/// several processes) `.1`, `.2`, ... are tried.
pub fn claim(template: &[u8], pid: u32, path: &mut [u8; PATH_MAX]) -> Claim {
    let mut base = [0u8; PATH_MAX];
    let Some(len) = expand_output_template(template, pid, &mut base) else {
        warn(format_args!(
            "ALLOCMUX_OUTPUT is too long; no profile will be written"
        ));
        return Claim::Unavailable;
    };
    if is_null_device(&base[..len]) {
        return Claim::NullDevice;
    }
    for attempt in 0..100u32 {
        let mut name = PathBuf::new(path);
        let _ = name.push(&base[..len]);
        if attempt > 0 {
            let _ = write!(name, ".{attempt}");
        }
        let Some(plen) = name.finish() else { break };
        // SAFETY: `path` is NUL-terminated by `finish`.
        let fd = unsafe { create_new(path) };
        if fd >= 0 {
            // SAFETY: fd is ours.
            unsafe { libc::close(fd) };
            return Claim::File { path_len: plen };
        }
        if errno() != libc::EEXIST {
            warn(format_args!(
                "cannot create the profile {}: {}; nothing will be written",
                Bytes(&path[..plen]),
                Errno(errno())
            ));
            return Claim::Unavailable;
        }
    }
    warn(format_args!(
        "no free profile name for ALLOCMUX_OUTPUT; nothing will be written"
    ));
    Claim::Unavailable
}

/// Whether `path` names the null device itself (character device 1:3, not
/// a link to it): `ALLOCMUX_OUTPUT=/dev/null` asks for nothing to be kept,
/// where any other existing path gets the next free name beside it (which
/// for `/dev/null` would create `/dev/null.1` as root).
fn is_null_device(path: &[u8]) -> bool {
    let mut z = [0u8; PATH_MAX];
    if path.len() >= z.len() {
        return false;
    }
    z[..path.len()].copy_from_slice(path);
    // SAFETY: `z` is NUL-terminated; valid out-pointer.
    unsafe {
        let mut st: libc::stat = core::mem::zeroed();
        libc::lstat(z.as_ptr().cast(), &mut st) == 0
            && st.st_mode & libc::S_IFMT == libc::S_IFCHR
            && st.st_rdev == libc::makedev(1, 3)
    }
}

/// Replaces the file at `path[..path_len]` (NUL-terminated there, as
/// [`claim`] leaves it) with what `write` puts into a new temporary file
/// beside it, renamed over it only if every write succeeded and the
/// descriptor stayed the shim's; otherwise the temporary file is removed.
/// `tmp` holds the temporary file's name. `None` if no temporary file
/// could be created (nothing was attempted), else whether the file was
/// replaced.
pub fn replace(
    path: &[u8; PATH_MAX],
    path_len: usize,
    tmp: &mut [u8; PATH_MAX],
    write: impl FnOnce(&Temporary) -> bool,
) -> Option<bool> {
    let fd = create_temporary(&path[..path_len], tmp)?;
    let file = Temporary {
        fd,
        id: fd_identity(fd),
    };
    let ok = write(&file);
    // A descriptor the program replaced meanwhile (closed and reopened,
    // or `dup2`'d over) is the program's: neither written nor closed.
    let ours = file.is_ours();
    // SAFETY: fd is ours (checked); `tmp` is NUL-terminated by
    // `create_temporary`, and `path` at `path_len` by the caller's claim.
    unsafe {
        if ours {
            libc::close(fd);
        }
        if ok && ours {
            libc::rename(tmp.as_ptr().cast(), path.as_ptr().cast());
        } else {
            libc::unlink(tmp.as_ptr().cast());
        }
    }
    Some(ok && ours)
}

/// The temporary file of a write under way, with the identity (device and
/// inode) it had when created. A program may close every descriptor it
/// does not know (daemons, `closefrom`) or `dup2` one of its own over any
/// number, from another thread while the writer writes: each write first
/// checks that the descriptor is still the file the shim created, so the
/// shim never writes into (nor closes) a file of the program's. What is
/// left is the window between that check and the write.
pub struct Temporary {
    fd: c_int,
    id: Option<(u64, u64)>,
}

impl Temporary {
    /// Whether the descriptor still refers to the file created.
    fn is_ours(&self) -> bool {
        self.id.is_some() && fd_identity(self.fd) == self.id
    }
    /// Writes all of `bytes`, if the descriptor is still this file.
    pub fn write(&self, bytes: &[u8]) -> bool {
        self.is_ours() && write_all(self.fd, bytes)
    }
}

/// `fmt::Write` to the temporary file through a fixed buffer.
pub struct FdWriter<'a> {
    /// The file written to.
    pub file: &'a Temporary,
    /// The staging buffer.
    pub buf: &'a mut [u8],
    /// Bytes staged in `buf`.
    pub len: usize,
}

impl FdWriter<'_> {
    /// Writes out what is staged; false if the write failed.
    pub fn flush(&mut self) -> bool {
        let ok = self.file.write(&self.buf[..self.len]);
        self.len = 0;
        ok
    }
}

impl core::fmt::Write for FdWriter<'_> {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        if self.len + s.len() > self.buf.len() && !self.flush() {
            return Err(core::fmt::Error);
        }
        if s.len() > self.buf.len() {
            return self
                .file
                .write(s.as_bytes())
                .then_some(())
                .ok_or(core::fmt::Error);
        }
        self.buf[self.len..self.len + s.len()].copy_from_slice(s.as_bytes());
        self.len += s.len();
        Ok(())
    }
}

/// Creates a new temporary file next to the profile, `PATH.tmp` or, if that
/// name is taken, `PATH.tmp1` ... : exclusively and without following a
/// symlink, so an existing file there is never truncated, and one planted
/// there does not stop the profile from being written. Leaves the name,
/// NUL-terminated, in `tmp`.
/// Creates `path` for writing only if nothing (not even a dangling link) is
/// there yet: a profile never replaces or follows anything it did not
/// create. Returns the descriptor, or -1 with `errno` set.
///
/// # Safety
/// `path` holds a NUL-terminated path.
unsafe fn create_new(path: &[u8]) -> c_int {
    // SAFETY: the caller's NUL-terminated path; open(2) only reads it.
    unsafe {
        libc::open(
            path.as_ptr().cast(),
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            0o644,
        )
    }
}

fn create_temporary(path: &[u8], tmp: &mut [u8; PATH_MAX]) -> Option<c_int> {
    for attempt in 0..16u32 {
        let mut name = PathBuf::new(tmp);
        name.push(path)?;
        name.push(b".tmp")?;
        if attempt > 0 {
            write!(name, "{attempt}").ok()?;
        }
        name.finish()?;
        // SAFETY: `tmp` is NUL-terminated by `finish`.
        let fd = unsafe { create_new(tmp) };
        if fd >= 0 {
            return Some(fd);
        }
        if errno() != libc::EEXIST {
            return None;
        }
    }
    None
}
