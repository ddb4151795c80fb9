//! Where the CLI's output files go: an [`OutputFile`] claimed before the
//! work, written whole or not at all, and removed again if dropped
//! unwritten; and a [`JsonOut`], the destination of a `--json` report.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde::Serialize;

/// An output file that is checked (and created) before the program runs, so
/// a bad path fails fast and nothing existing is overwritten unasked.
///
/// A regular file is written whole or not at all: through a new temporary
/// file in the same directory (created exclusively, never following a
/// symlink) and a rename. A character device, FIFO or socket that already
/// exists (`/dev/stdout`, `/dev/null`, a pipe) holds nothing to lose, so it
/// is written in place without `--force`. Dropped without a
/// [`write`](Self::write), the claim removes the file it created, so an
/// error (a refused target, a failed run) leaves no empty file behind to
/// block the next attempt.
#[derive(Debug)]
pub struct OutputFile {
    path: PathBuf,
    /// Whether `claim` created the file (so dropping the claim unwritten
    /// removes it).
    created: bool,
    /// An existing device, FIFO or socket, written in place.
    stream: bool,
    /// Whether anything was written (then the file stays).
    written: std::cell::Cell<bool>,
}

impl OutputFile {
    /// [`claim`](Self::claim) for an output that is optional: `None`
    /// claims nothing.
    pub fn claim_if(path: Option<&Path>, force: bool, what: &str) -> Result<Option<OutputFile>> {
        path.map(|p| OutputFile::claim(p, force, what)).transpose()
    }

    /// Claims `path`: refuses an existing file unless `force`, a
    /// directory always, and a path whose directory cannot take the
    /// temporary file the write goes through.
    pub fn claim(path: &Path, force: bool, what: &str) -> Result<OutputFile> {
        match fs::metadata(path) {
            Ok(m) if m.is_dir() => bail!(
                "the {what} {} is a directory; name a file in it instead",
                path.display()
            ),
            Ok(m) if !m.is_file() => {
                return Ok(OutputFile {
                    path: path.to_path_buf(),
                    created: false,
                    stream: true,
                    written: false.into(),
                });
            }
            _ => {}
        }
        let existed = fs::symlink_metadata(path).is_ok();
        let mut opts = fs::OpenOptions::new();
        opts.write(true);
        if force {
            opts.create(true).truncate(false);
        } else {
            opts.create_new(true);
        }
        match opts.open(path) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                bail!(
                    "{what} {} already exists; choose another name or pass --force to overwrite it",
                    path.display()
                )
            }
            Err(e) => {
                return Err(e)
                    .with_context(|| format!("cannot write the {what} {}", path.display()));
            }
        }
        let out = OutputFile {
            path: path.to_path_buf(),
            created: !existed,
            stream: false,
            written: false.into(),
        };
        // An existing file (with --force) in a directory that is not
        // writable would fail only at the end, after the program ran.
        if existed {
            out.temporary().with_context(|| {
                format!(
                    "cannot write the {what} {}: its directory does not take new files",
                    path.display()
                )
            })?;
        }
        Ok(out)
    }

    /// A new, empty temporary file beside the output.
    fn temporary(&self) -> std::io::Result<tempfile::NamedTempFile> {
        use std::os::unix::fs::PermissionsExt;
        let dir = match self.path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        tempfile::Builder::new()
            .prefix(".allocmux-")
            .suffix(".tmp")
            // As `fs::write` creates files: 0666 less the umask.
            .permissions(fs::Permissions::from_mode(0o666))
            .tempfile_in(dir)
    }

    /// Where the output goes.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Replaces the file's contents (writes to a device or FIFO).
    pub fn write(&self, bytes: &[u8]) -> Result<()> {
        if self.stream {
            self.written.set(true);
            return fs::OpenOptions::new()
                .write(true)
                .open(&self.path)
                .and_then(|mut f| f.write_all(bytes))
                .with_context(|| format!("writing {}", self.path.display()));
        }
        let mut tmp = self
            .temporary()
            .with_context(|| format!("writing {}", self.path.display()))?;
        tmp.write_all(bytes)
            .with_context(|| format!("writing {}", tmp.path().display()))?;
        tmp.persist(&self.path)
            .with_context(|| format!("writing {}", self.path.display()))?;
        self.written.set(true);
        Ok(())
    }

    /// The file opened for writing from its start (for output that is
    /// streamed, such as `compare --log`); the claim is then kept.
    pub fn into_file(self) -> Result<fs::File> {
        self.written.set(true);
        fs::OpenOptions::new()
            .write(true)
            .truncate(!self.stream)
            .open(&self.path)
            .with_context(|| format!("opening {}", self.path.display()))
    }
}

/// Giving a claim up unwritten (an error after the claim, or nothing to
/// write) removes the file if `claim` created it; an existing file, claimed
/// with `--force`, keeps its contents.
impl Drop for OutputFile {
    fn drop(&mut self) {
        if self.created && !self.written.get() {
            let _ = fs::remove_file(&self.path);
        }
    }
}

/// Where a `--json FILE` report goes: `-` is stdout, anything else a
/// claimed [`OutputFile`].
#[derive(Debug)]
pub enum JsonOut {
    /// Standard output.
    Stdout,
    /// A file, claimed before the work.
    File(OutputFile),
}

impl JsonOut {
    /// The destination `--json PATH` names, claiming the file (`-` is
    /// stdout).
    pub fn claim(path: &Path, force: bool) -> Result<JsonOut> {
        if path.as_os_str() == "-" {
            Ok(JsonOut::Stdout)
        } else {
            Ok(JsonOut::File(OutputFile::claim(
                path,
                force,
                "JSON report",
            )?))
        }
    }

    /// Writes `doc` as pretty-printed JSON with a final newline.
    pub fn write(self, doc: &impl Serialize) -> Result<()> {
        let text = crate::json::to_pretty(doc);
        match self {
            JsonOut::Stdout => std::io::stdout()
                .lock()
                .write_all(text.as_bytes())
                .context("writing JSON to stdout"),
            JsonOut::File(f) => f.write(text.as_bytes()),
        }
    }
}
