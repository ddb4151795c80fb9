//! The profile file: claiming this process's name (`%p`, then `.1`,
//! `.2`, ...), and replacing its contents whole through a temporary file
//! and a rename, so a reader (or a SIGKILL mid-write) never sees half a
//! file and a descriptor the program takes over is never written.
//!
//! Where the file system allows it, the temporary file has no name while
//! it is written (`O_TMPFILE`) and is given one just before the rename: a
//! process killed mid-write (SIGKILL, the OOM killer) then leaves nothing
//! beside its profile, where a named temporary file would stay behind. Only
//! a kill between the `linkat` and the `rename` can still leave one.

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
        /// Whether temporary files beside it can be written nameless (see
        /// the module's docs), as a trial at the claim showed.
        nameless: bool,
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
/// several processes) `.1`, `.2`, ... are tried. `scratch` is working
/// room for the trial of nameless files (kept off the stack, which may be
/// a signal handler's small alternate one in a `fork` child).
pub fn claim(
    template: &[u8],
    pid: u32,
    path: &mut [u8; PATH_MAX],
    scratch: &mut [u8; PATH_MAX],
) -> Claim {
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
            return Claim::File {
                path_len: plen,
                nameless: nameless_works(&path[..=plen], scratch),
            };
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
/// beside it (nameless until written, if `nameless`), renamed over it only
/// if every write succeeded and the descriptor stayed the shim's;
/// otherwise the temporary file is removed. `tmp` holds the temporary
/// file's name. `None` if no temporary file could be created (nothing was
/// attempted), else whether the file was replaced. A nameless file that
/// cannot be named after all (`/proc` gone since the claim's trial: a
/// `chroot`) is copied into a named one, and `nameless` turns false for
/// the writes to come.
pub fn replace(
    path: &[u8; PATH_MAX],
    path_len: usize,
    nameless: &mut bool,
    tmp: &mut [u8; PATH_MAX],
    write: impl FnOnce(&Temporary) -> bool,
) -> Option<bool> {
    let path = &path[..=path_len];
    // `tmp` is free until the file is named: it holds the directory's
    // path meanwhile, which the stack (a signal handler's alternate one,
    // at an `_exit`) may have no room for.
    let nameless_fd = if *nameless {
        create_nameless(path, tmp)
    } else {
        None
    };
    let fd = match nameless_fd {
        Some(fd) => fd,
        None => create_temporary(&path[..path_len], tmp)?,
    };
    let file = Temporary {
        fd,
        id: fd_identity(fd),
    };
    let ok = write(&file);
    // A descriptor the program replaced meanwhile (closed and reopened,
    // or `dup2`'d over) is the program's: neither written nor closed.
    let ours = file.is_ours();
    let named = match nameless_fd {
        None => true,
        Some(_) if !(ok && ours) => false,
        Some(fd) => {
            link_temporary(fd, &path[..path_len], tmp) || {
                *nameless = false;
                copy_to_temporary(fd, &path[..path_len], tmp)
            }
        }
    };
    // SAFETY: fd is ours (checked); `tmp` is NUL-terminated by
    // `create_temporary` or `link_temporary` once it names a file, and
    // `path` at `path_len` by the caller's claim.
    unsafe {
        if ours {
            libc::close(fd);
        }
        if !named {
            // Nameless and never named: closing it removed it.
            return Some(false);
        }
        if ok && ours && libc::rename(tmp.as_ptr().cast(), path.as_ptr().cast()) == 0 {
            return Some(true);
        }
        libc::unlink(tmp.as_ptr().cast());
    }
    Some(false)
}

/// Copies what was written to the nameless file `fd` into a new named
/// temporary file beside `path` (its name left in `tmp`); false, with no
/// file left, if any step fails.
fn copy_to_temporary(fd: c_int, path: &[u8], tmp: &mut [u8; PATH_MAX]) -> bool {
    let Some(out) = create_temporary(path, tmp) else {
        return false;
    };
    // Small: this runs on whatever stack the write does (see `replace`),
    // and only where naming failed.
    let mut buf = [0u8; 512];
    let mut offset = 0;
    let copied = loop {
        // SAFETY: `buf` is valid for its length; fd is ours.
        let n = unsafe { libc::pread(fd, buf.as_mut_ptr().cast(), buf.len(), offset) };
        if n < 0 && errno() == libc::EINTR {
            continue;
        }
        if n <= 0 {
            break n == 0;
        }
        if !write_all(out, &buf[..n as usize]) {
            break false;
        }
        offset += n as libc::off_t;
    };
    // SAFETY: `out` is ours; `tmp` names it (NUL-terminated).
    unsafe {
        libc::close(out);
        if !copied {
            libc::unlink(tmp.as_ptr().cast());
        }
    }
    copied
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

/// Creates a new temporary file next to the profile, `PATH.tmp` or, if that
/// name is taken, `PATH.tmp1` ... : exclusively and without following a
/// symlink, so an existing file there is never truncated, and one planted
/// there does not stop the profile from being written. Leaves the name,
/// NUL-terminated, in `tmp`.
fn create_temporary(path: &[u8], tmp: &mut [u8; PATH_MAX]) -> Option<c_int> {
    // SAFETY: `name` is NUL-terminated by `temporary_names`.
    temporary_names(path, tmp, |name| unsafe { create_new(name) })
}

/// Calls `try_name` with `PATH.tmp`, `PATH.tmp1`, ... (NUL-terminated, in
/// `tmp`) until it returns a descriptor (or 0: done), or fails otherwise
/// than with `EEXIST`.
fn temporary_names(
    path: &[u8],
    tmp: &mut [u8; PATH_MAX],
    mut try_name: impl FnMut(&[u8; PATH_MAX]) -> c_int,
) -> Option<c_int> {
    for attempt in 0..16u32 {
        let mut name = PathBuf::new(tmp);
        name.push(path)?;
        name.push(b".tmp")?;
        if attempt > 0 {
            write!(name, "{attempt}").ok()?;
        }
        name.finish()?;
        let fd = try_name(tmp);
        if fd >= 0 {
            return Some(fd);
        }
        if errno() != libc::EEXIST {
            return None;
        }
    }
    None
}

/// Opens a file with no name in the directory of `path` (NUL-terminated),
/// for writing and reading back (see [`copy_to_temporary`]): `O_TMPFILE`,
/// which some file systems refuse. `dir` is room for the directory's path.
fn create_nameless(path: &[u8], dir: &mut [u8; PATH_MAX]) -> Option<c_int> {
    let name = &path[..path.len() - 1];
    let parent = match name.iter().rposition(|&b| b == b'/') {
        Some(0) => &b"/"[..],
        Some(i) => &name[..i],
        None => &b"."[..],
    };
    let mut d = PathBuf::new(dir);
    d.push(parent)?;
    d.finish()?;
    // SAFETY: `dir` is NUL-terminated by `finish`; open(2) only reads it.
    let fd = unsafe {
        libc::open(
            dir.as_ptr().cast(),
            libc::O_TMPFILE | libc::O_RDWR | libc::O_CLOEXEC,
            0o644,
        )
    };
    (fd >= 0).then_some(fd)
}

/// Gives the nameless file `fd` the first free temporary name beside
/// `path` (left in `tmp`), through `/proc/thread-self/fd`: `linkat` by
/// descriptor alone (`AT_EMPTY_PATH`) needs a capability the program may
/// not have, and `/proc/self/fd` is empty once `main`'s thread has left
/// through `pthread_exit` (its directory is the zombie leader's). Like
/// `O_EXCL`, it never replaces an existing name.
fn link_temporary(fd: c_int, path: &[u8], tmp: &mut [u8; PATH_MAX]) -> bool {
    let mut proc_path = [0u8; 40];
    let mut p = PathBuf::new(&mut proc_path);
    if write!(p, "/proc/thread-self/fd/{fd}").is_err() || p.finish().is_none() {
        return false;
    }
    temporary_names(path, tmp, |name| {
        // SAFETY: both paths are NUL-terminated; linkat(2) only reads them.
        let r = unsafe {
            libc::linkat(
                libc::AT_FDCWD,
                proc_path.as_ptr().cast(),
                libc::AT_FDCWD,
                name.as_ptr().cast(),
                libc::AT_SYMLINK_FOLLOW,
            )
        };
        if r == 0 { 0 } else { -1 }
    })
    .is_some()
}

/// Whether a nameless file made beside `path` (NUL-terminated) can be
/// given a name there: tried once when a process claims its profile, so
/// that a file system or a `/proc` that cannot do it costs no write
/// (which cannot be redone by the time the link fails).
fn nameless_works(path: &[u8], tmp: &mut [u8; PATH_MAX]) -> bool {
    let Some(fd) = create_nameless(path, tmp) else {
        return false;
    };
    let linked = link_temporary(fd, &path[..path.len() - 1], tmp);
    // SAFETY: fd is ours; `tmp` names the link when `linked`.
    unsafe {
        libc::close(fd);
        if linked {
            libc::unlink(tmp.as_ptr().cast());
        }
    }
    linked
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names in `dir`, sorted.
    fn names(dir: &std::path::Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    /// `dir/p.prof`, the tests' profile, as bytes without a NUL.
    fn profile_path(dir: &std::path::Path) -> Vec<u8> {
        dir.join("p.prof").into_os_string().into_encoded_bytes()
    }

    /// Claims `dir/p.prof` and replaces it with `text`, returning what the
    /// directory held while the text was being written.
    fn replace_in(dir: &std::path::Path, nameless: Option<bool>, text: &str) -> Vec<String> {
        let mut path = [0u8; PATH_MAX];
        let Claim::File {
            path_len,
            nameless: works,
        } = claim(&profile_path(dir), 1, &mut path, &mut [0; PATH_MAX])
        else {
            panic!("no claim in {}", dir.display());
        };
        let mut seen = Vec::new();
        let mut tmp = [0u8; PATH_MAX];
        let mut nameless = nameless.unwrap_or(works);
        let replaced = replace(&path, path_len, &mut nameless, &mut tmp, |f| {
            seen = names(dir);
            f.write(text.as_bytes())
        });
        assert_eq!(replaced, Some(true));
        seen
    }

    /// A write in progress has no name beside the profile where the file
    /// system allows it (as the test's does), so a process killed
    /// mid-write leaves nothing; named temporaries, the fallback, show.
    #[test]
    fn a_write_under_way_leaves_no_name_where_it_can() {
        let dir = tempfile::tempdir().unwrap();
        let during = replace_in(dir.path(), None, "first\n");
        assert_eq!(
            during,
            ["p.prof"],
            "the claim's probe found O_TMPFILE usable"
        );
        assert_eq!(names(dir.path()), ["p.prof"]);
        assert_eq!(
            std::fs::read_to_string(dir.path().join("p.prof")).unwrap(),
            "first\n"
        );

        let dir = tempfile::tempdir().unwrap();
        let during = replace_in(dir.path(), Some(false), "named\n");
        assert_eq!(during, ["p.prof", "p.prof.tmp"]);
        assert_eq!(names(dir.path()), ["p.prof"]);
        assert_eq!(
            std::fs::read_to_string(dir.path().join("p.prof")).unwrap(),
            "named\n"
        );
    }

    /// The nameless file takes the next free temporary name, never an
    /// existing one's, and a replace that fails removes it.
    #[test]
    fn a_nameless_file_never_takes_an_existing_name() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("p.prof.tmp"), "planted").unwrap();
        replace_in(dir.path(), Some(true), "mine\n");
        assert_eq!(names(dir.path()), ["p.prof", "p.prof.tmp"]);
        assert_eq!(
            std::fs::read_to_string(dir.path().join("p.prof.tmp")).unwrap(),
            "planted"
        );
        assert_eq!(
            std::fs::read_to_string(dir.path().join("p.prof")).unwrap(),
            "mine\n"
        );

        let mut path = [0u8; PATH_MAX];
        let p = profile_path(dir.path());
        path[..p.len()].copy_from_slice(&p);
        let mut tmp = [0u8; PATH_MAX];
        assert_eq!(
            replace(&path, p.len(), &mut true, &mut tmp, |_| false),
            Some(false)
        );
        assert_eq!(names(dir.path()), ["p.prof", "p.prof.tmp"]);
        assert_eq!(
            std::fs::read_to_string(dir.path().join("p.prof")).unwrap(),
            "mine\n"
        );
    }

    /// A nameless file that cannot be named (a `chroot` since the claim,
    /// say) is copied whole into a named temporary file.
    #[test]
    fn a_nameless_file_is_copied_when_it_cannot_be_named() {
        let dir = tempfile::tempdir().unwrap();
        let mut path = profile_path(dir.path());
        path.push(0);
        let mut scratch = [0u8; PATH_MAX];
        let fd =
            create_nameless(&path, &mut scratch).expect("O_TMPFILE works in the test's directory");
        let text: Vec<u8> = (0..20_000u32).map(|i| b'a' + (i % 26) as u8).collect();
        assert!(write_all(fd, &text));
        let mut tmp = [0u8; PATH_MAX];
        assert!(copy_to_temporary(fd, &path[..path.len() - 1], &mut tmp));
        // SAFETY: fd is this test's.
        unsafe { libc::close(fd) };
        assert_eq!(names(dir.path()), ["p.prof.tmp"]);
        assert_eq!(std::fs::read(dir.path().join("p.prof.tmp")).unwrap(), text);
    }
}
