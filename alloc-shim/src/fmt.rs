//! Formatting without allocating: into fixed buffers, bytes shown as
//! text, errno as words, and the shim's one-line warnings on stderr.

use core::ffi::c_int;
use core::fmt::Write as _;

/// `fmt::Write` into a fixed buffer; fails instead of truncating.
pub struct SliceWriter<'a> {
    pub buf: &'a mut [u8],
    pub len: usize,
}

impl core::fmt::Write for SliceWriter<'_> {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        let end = self
            .len
            .checked_add(s.len())
            .filter(|&e| e <= self.buf.len())
            .ok_or(core::fmt::Error)?;
        self.buf[self.len..end].copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

/// Builds a NUL-terminated path in a fixed buffer.
pub struct PathBuf<'a>(SliceWriter<'a>);

impl<'a> PathBuf<'a> {
    pub fn new(buf: &'a mut [u8]) -> Self {
        PathBuf(SliceWriter { buf, len: 0 })
    }
    pub fn push(&mut self, bytes: &[u8]) -> Option<()> {
        let end = self
            .0
            .len
            .checked_add(bytes.len())
            .filter(|&e| e < self.0.buf.len())?;
        self.0.buf[self.0.len..end].copy_from_slice(bytes);
        self.0.len = end;
        Some(())
    }
    /// NUL-terminates; returns the length without the NUL.
    pub fn finish(self) -> Option<usize> {
        let len = self.0.len;
        *self.0.buf.get_mut(len)? = 0;
        Some(len)
    }
}

impl core::fmt::Write for PathBuf<'_> {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        self.push(s.as_bytes()).ok_or(core::fmt::Error)
    }
}

/// Bytes shown lossily.
pub struct Bytes<'a>(pub &'a [u8]);
impl<'a> Bytes<'a> {
    /// The valid UTF-8 prefix (for quoting a bad value in a warning).
    pub fn to_str_lossy(&self) -> &'a str {
        self.0.utf8_chunks().next().map_or("", |c| c.valid())
    }
}
impl core::fmt::Display for Bytes<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        for chunk in self.0.utf8_chunks() {
            f.write_str(chunk.valid())?;
            if !chunk.invalid().is_empty() {
                f.write_str("\u{FFFD}")?;
            }
        }
        Ok(())
    }
}

/// An errno shown as text.
pub struct Errno(pub c_int);
impl core::fmt::Display for Errno {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let mut buf = [0u8; 128];
        // SAFETY: the XSI strerror_r writes a NUL-terminated message into buf.
        let ok = unsafe { libc::strerror_r(self.0, buf.as_mut_ptr().cast(), buf.len()) } == 0;
        let len = buf.iter().position(|&b| b == 0).unwrap_or(0);
        if ok && len > 0 {
            Bytes(&buf[..len]).fmt(f)
        } else {
            write!(f, "error {}", self.0)
        }
    }
}

/// One line on stderr, prefixed `allocmux: `. Formatting goes into a stack
/// buffer; nothing allocates.
pub fn warn(args: core::fmt::Arguments<'_>) {
    let mut buf = [0u8; 512];
    let mut w = SliceWriter {
        buf: &mut buf,
        len: 0,
    };
    if writeln!(w, "allocmux: {args}").is_err() {
        // Too long: keep what fits, ending in a newline.
        w.len = w.buf.len();
        w.buf[w.len - 1] = b'\n';
    }
    let len = w.len;
    crate::fd::write_all(2, &buf[..len]);
}
