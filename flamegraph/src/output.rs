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

/// Refuses a command line whose outputs would overwrite one of its inputs
/// (`report big.prof --html big.prof`) or each other (`run -o x --html x`):
/// with `--force` either would lose a file the user meant to keep. Paths
/// are compared by what they name (an existing file by its inode, so a
/// symlink or `./x` is caught; a new one by its directory's real path and
/// its name); `-` and devices, FIFOs and sockets (`/dev/null`, a pipe)
/// hold nothing to lose and are passed over.
pub fn check_distinct(inputs: &[(&str, &Path)], outputs: &[(&str, Option<&Path>)]) -> Result<()> {
    let outputs: Vec<(&str, &Path, FileKey)> = outputs
        .iter()
        .filter_map(|&(what, p)| p.map(|p| (what, p)))
        .filter_map(|(what, p)| FileKey::of(p).map(|k| (what, p, k)))
        .collect();
    for &(what, path, ref key) in &outputs {
        if let Some((input, _)) = inputs
            .iter()
            .find(|(_, p)| FileKey::of(p).as_ref() == Some(key))
        {
            return Err(crate::error::usage(format_args!(
                "the {what} {} is the {input} this command reads; name another file",
                path.display()
            )));
        }
    }
    for (i, &(first, path, ref key)) in outputs.iter().enumerate() {
        if let Some((second, _, _)) = outputs[i + 1..].iter().find(|(_, _, k)| k == key) {
            return Err(crate::error::usage(format_args!(
                "the {first} and the {second} would both be written to {}; name two files",
                path.display()
            )));
        }
    }
    Ok(())
}

/// What a path names, for [`check_distinct`].
#[derive(Debug, PartialEq, Eq)]
enum FileKey {
    /// An existing regular file (or directory), by device and inode.
    Existing(u64, u64),
    /// A file yet to be created: its directory's canonical path and name.
    New(PathBuf),
}

impl FileKey {
    fn of(path: &Path) -> Option<FileKey> {
        use std::os::unix::fs::MetadataExt;
        if path.as_os_str() == "-" {
            return None;
        }
        match fs::metadata(path) {
            Ok(m) if m.is_file() || m.is_dir() => Some(FileKey::Existing(m.dev(), m.ino())),
            Ok(_) => None,
            Err(_) => {
                let dir = match path.parent() {
                    Some(d) if !d.as_os_str().is_empty() => d,
                    _ => Path::new("."),
                };
                let dir = fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
                Some(FileKey::New(dir.join(path.file_name()?)))
            }
        }
    }
}
