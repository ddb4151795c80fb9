//! Where the preload shim comes from: `ALLOCMUX_SHIM` if set, else the copy
//! embedded in this binary, written once to a per-user cache directory under
//! a name derived from its contents (so versions never overwrite each other
//! and a half-written file is never used), or, when that directory cannot
//! be written, to a private temporary directory for the one run. For a
//! backend and stack mode that has one, the copy written is the direct
//! shim made from the embedded one ([`crate::direct_shim`]), whose exports
//! are that mode's hooks; `ALLOCMUX_SHIM` is used as it is.
//!
//! What can be known before the program runs is checked here: the file is
//! an ELF shared library for the program's machine and defines `malloc`.
//! What only the loader knows (a noexec mount, a missing dependency) shows
//! after the run as a main process without a profile; [`probe`] then asks
//! the loader why.

use std::borrow::Cow;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use allocmux_format::Backend;
use allocmux_format::direct::DirectTable;
use allocmux_format::profile::StackMode;
use allocmux_format::settings::Level;
use anyhow::{Context, Result, anyhow, bail};

use crate::elf::{self, Elf, Kind};
use crate::target::Program;

/// The shim built alongside this binary.
pub const EMBEDDED: &[u8] = include_bytes!(env!("ALLOCMUX_EMBEDDED_SHIM"));

/// Path of the shim as built by the build script (for tests in this
/// workspace; an installed binary uses [`locate`]).
pub const BUILT_PATH: &str = env!("ALLOCMUX_EMBEDDED_SHIM");

/// The file name the build gives the shim.
pub const FILE_NAME: &str = "liballocmux_shim.so";

/// What to do about a bad `ALLOCMUX_SHIM`.
const ENV_FIX: &str =
    "point it at liballocmux_shim.so, or unset it to use the shim built into allocmux";

/// Where a shim came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    /// `ALLOCMUX_SHIM`.
    Env,
    /// The embedded shim, in the cache directory.
    Cache,
    /// The embedded shim, in a temporary directory because the cache
    /// directory could not be written (why, in words).
    Temporary(String),
}

/// The shim to preload, ready on disk.
#[derive(Debug)]
pub struct Shim {
    /// Where it is.
    pub path: PathBuf,
    /// Where it came from.
    pub origin: Origin,
    elf: Elf,
    /// Keeps a temporary copy on disk until the run is over.
    _temp: Option<tempfile::TempDir>,
}

impl Shim {
    /// A line for the user when the shim is not where it will be next
    /// time (the cache could not be written).
    pub fn note(&self) -> Option<String> {
        match &self.origin {
            Origin::Temporary(why) => Some(format!(
                "cannot keep the shim in the cache ({why}); using a temporary copy for this run \
                 (set XDG_CACHE_HOME to a writable directory to keep it)"
            )),
            _ => None,
        }
    }

    /// Checks that the loader can preload this shim into `program` (when
    /// the program is a known ELF) and that it is an allocmux shim at all.
    pub fn check_fits(&self, program: Option<&Program>) -> Result<()> {
        if let Some(p) = program.filter(|p| p.arch != self.elf.arch) {
            let (parch, sarch) = (p.arch, self.elf.arch);
            if self.origin == Origin::Env {
                bail!(
                    "ALLOCMUX_SHIM={} is built for {sarch} but {} is a {parch} program, and the \
                     loader preloads only libraries built for the program's machine; point \
                     ALLOCMUX_SHIM at a {parch} build of liballocmux_shim.so, or unset it",
                    self.path.display(),
                    p.path.display()
                );
            }
            bail!(
                "{} is a {parch} program and this allocmux's shim is {sarch}: the loader cannot \
                 preload it, so it cannot be profiled (use an allocmux built for {parch}, or set \
                 ALLOCMUX_SHIM to a {parch} build of liballocmux_shim.so)",
                p.path.display()
            );
        }
        if !self.elf.defines_malloc {
            bail!(
                "ALLOCMUX_SHIM={} does not define malloc, so it is not the allocmux shim; {ENV_FIX}",
                self.path.display()
            );
        }
        Ok(())
    }
}

/// The library a run with `backend` at `level` with stacks in `mode`
/// preloads: the embedded shim, or the direct shim made from it for them,
/// and the name it is written under (which starts with the embedded
/// shim's: the symbolizer knows the shim's frames by it).
pub fn library(
    backend: Backend,
    level: Level,
    mode: StackMode,
) -> Result<(Cow<'static, [u8]>, String)> {
    let Some(t) = DirectTable::serving(backend, level, mode) else {
        return Ok((
            Cow::Borrowed(EMBEDDED),
            cache_name("liballocmux_shim", EMBEDDED),
        ));
    };
    let bytes = crate::direct_shim::make(EMBEDDED, &t)
        .map_err(|e| anyhow!("making the {} shim: {e}", t.name))?;
    let name = cache_name(&format!("liballocmux_shim-{}", t.name), &bytes);
    Ok((Cow::Owned(bytes), name))
}

/// The file name of a shim library in the cache: its stem and a tag of
/// its content, so versions never overwrite each other.
fn cache_name(stem: &str, bytes: &[u8]) -> String {
    format!("{stem}-{:016x}.so", fnv1a(bytes))
}

/// The forwarder of `backend` (see `allocmux_format::direct`): a
/// direct shim whose exports forward to the backend and record nothing;
/// none under glibc, whose forwarder is no preload at all.
pub fn forwarder_library(backend: Backend) -> Result<Option<(Vec<u8>, String)>> {
    let Some(t) = DirectTable::forwarding(backend) else {
        return Ok(None);
    };
    let bytes = crate::direct_shim::make(EMBEDDED, &t)
        .map_err(|e| anyhow!("making the {} shim: {e}", t.name))?;
    let name = cache_name(&format!("liballocmux_shim-{}", t.name), &bytes);
    Ok(Some((bytes, name)))
}

/// The library an unrecorded run under `backend` preloads, if any:
/// `ALLOCMUX_SHIM` if set (run with `ALLOCMUX_RECORD=off`), else
/// [`forwarder_library`], written out if need be.
pub fn locate_forwarder(backend: Backend) -> Result<Option<Shim>> {
    if std::env::var_os("ALLOCMUX_SHIM").is_some_and(|v| !v.is_empty()) {
        return locate(backend, Level::Off, StackMode::Off).map(Some);
    }
    match forwarder_library(backend)? {
        None => Ok(None),
        Some((bytes, name)) => write_out(Cow::Owned(bytes), name).map(Some),
    }
}

/// Finds the shim for a run with `backend` at `level` with stacks in
/// `mode`: `ALLOCMUX_SHIM` if set and not empty (checked to be an ELF
/// shared library), else [`library`], written out if need be.
pub fn locate(backend: Backend, level: Level, mode: StackMode) -> Result<Shim> {
    if let Some(p) = std::env::var_os("ALLOCMUX_SHIM").filter(|v| !v.is_empty()) {
        let path = PathBuf::from(p);
        let elf = check_env_shim(&path)?;
        return Ok(Shim {
            path,
            origin: Origin::Env,
            elf,
            _temp: None,
        });
    }
    let (bytes, name) = library(backend, level, mode)?;
    write_out(bytes, name)
}

/// The facts of the embedded shim's ELF file (its machine, above all).
pub fn embedded_elf() -> elf::Elf {
    elf::read(EMBEDDED)
        .and_then(Result::ok)
        .expect("the build embeds the ELF shim it built")
}

/// The shim library `bytes` as a file named `name`: in the cache, or else
/// in a private temporary directory.
fn write_out(bytes: Cow<'static, [u8]>, name: String) -> Result<Shim> {
    let elf = embedded_elf();
    let cache_err = match cache_dir() {
        Some(cache) => match extract(&cache, &bytes, &name) {
            Ok(path) => {
                // The embedded shim too, for a hand-written `LD_PRELOAD`
                // (the README's) to find in the cache after any run.
                if let Cow::Owned(_) = bytes {
                    let _ = extract(&cache, EMBEDDED, &cache_name("liballocmux_shim", EMBEDDED));
                }
                return Ok(Shim {
                    path,
                    origin: Origin::Cache,
                    elf,
                    _temp: None,
                });
            }
            Err(e) => e,
        },
        None => anyhow!("neither XDG_CACHE_HOME nor HOME is set"),
    };
    // A private directory (mode 0700, random name) of our own: nobody else
    // can plant a library there, which a fixed name in /tmp would allow.
    let temp = tempfile::Builder::new()
        .prefix("allocmux-shim-")
        .tempdir()
        .map_err(anyhow::Error::from)
        .and_then(|t| extract(t.path(), &bytes, &name).map(|p| (t, p)));
    match temp {
        Ok((t, path)) => Ok(Shim {
            path,
            origin: Origin::Temporary(format!("{cache_err:#}")),
            elf,
            _temp: Some(t),
        }),
        Err(temp_err) => Err(anyhow!(
            "cannot write the shim to disk: {cache_err:#}, and a temporary directory failed too \
             ({temp_err:#}); set XDG_CACHE_HOME to a writable directory, or ALLOCMUX_SHIM to a \
             copy of liballocmux_shim.so"
        )),
    }
}

/// What `ALLOCMUX_SHIM` names, if it is a shared library.
fn check_env_shim(path: &Path) -> Result<Elf> {
    let shown = path.display();
    let meta = match fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            bail!("ALLOCMUX_SHIM={shown} does not exist; {ENV_FIX}")
        }
        Err(e) => bail!("cannot read ALLOCMUX_SHIM={shown} ({e}); {ENV_FIX}"),
    };
    if meta.is_dir() {
        let inside = path.join(FILE_NAME);
        if inside.is_file() {
            bail!(
                "ALLOCMUX_SHIM={shown} is a directory, not the shim library; set it to {}",
                inside.display()
            );
        }
        bail!("ALLOCMUX_SHIM={shown} is a directory, not the shim library; {ENV_FIX}");
    }
    let data = fs::read(path)
        .map_err(|e| anyhow!("cannot read ALLOCMUX_SHIM={shown} ({e}); {ENV_FIX}"))?;
    match elf::read(&data) {
        None => bail!("ALLOCMUX_SHIM={shown} is not a shared library (not an ELF file); {ENV_FIX}"),
        Some(Err(why)) => bail!("ALLOCMUX_SHIM={shown} is a damaged ELF file ({why}); {ENV_FIX}"),
        Some(Ok(e)) => match e.kind {
            Kind::SharedLibrary => Ok(e),
            Kind::Executable => {
                bail!("ALLOCMUX_SHIM={shown} is a program, not a shared library; {ENV_FIX}")
            }
            Kind::Other => {
                bail!("ALLOCMUX_SHIM={shown} is an ELF file but not a shared library; {ENV_FIX}")
            }
        },
    }
}

/// `$XDG_CACHE_HOME/allocmux`, else `~/.cache/allocmux` (the XDG spec
/// says to ignore a relative XDG_CACHE_HOME). Never a fixed name in the
/// shared temporary directory: another user could plant a library there
/// under the name allocmux would preload.
fn cache_dir() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .filter(|v| v.is_absolute())
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .map(|h| PathBuf::from(h).join(".cache"))
        })?;
    Some(base.join("allocmux"))
}

/// Writes a shim library (`bytes`, named `name` after its content, see
/// [`library`]) into `dir`, once, and returns its path.
pub fn extract(dir: &Path, bytes: &[u8], name: &str) -> Result<PathBuf> {
    let path = dir.join(name);
    if fs::metadata(&path).is_ok_and(|m| m.len() == bytes.len() as u64) {
        return Ok(path);
    }
    fs::create_dir_all(dir).with_context(|| format!("creating the directory {}", dir.display()))?;
    let mut tmp = tempfile_in(dir)?;
    // Synced before the rename: after a crash, a file under the final name
    // must not be the right size but still unwritten (the size is all the
    // check above looks at).
    let written = tmp.1.write_all(bytes).and_then(|()| tmp.1.sync_all());
    drop(tmp.1);
    let installed = written
        .with_context(|| format!("writing the shim into {}", dir.display()))
        .and_then(|()| {
            fs::rename(&tmp.0, &path)
                .with_context(|| format!("installing the shim as {}", path.display()))
        });
    if installed.is_err() {
        // A full disk must not leave a 2 MB partial file behind.
        let _ = fs::remove_file(&tmp.0);
    }
    installed.map(|()| path)
}

fn tempfile_in(dir: &Path) -> Result<(PathBuf, fs::File)> {
    for i in 0..100 {
        let p = dir.join(format!(".shim-{}-{i}.tmp", std::process::id()));
        match fs::OpenOptions::new().write(true).create_new(true).open(&p) {
            Ok(f) => return Ok((p, f)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => {
                return Err(e).with_context(|| format!("creating a file in {}", dir.display()));
            }
        }
    }
    bail!("could not create a temporary file in {}", dir.display())
}

/// 64-bit FNV-1a: a content tag for the cache file name, not security.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    })
}

/// What the loader makes of a shim when it is preloaded into a known-good
/// program (this allocmux binary, printing its version).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Probe {
    /// The loader refused it or failed on it, in its own words.
    Refused(String),
    /// It loads but wrote no profile: not an allocmux shim.
    Silent,
    /// It loads and records.
    Works,
    /// The probe could not tell (why).
    Unknown(String),
}

/// How long the probe may take: it only prints a version.
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// Preloads `shim` into `allocmux --version` and reports what happened,
/// to explain after the fact why a run recorded nothing (with `quiet`
/// runs, the loader's own message went nowhere).
pub fn probe(shim: &Path) -> Probe {
    match try_probe(shim) {
        Ok(p) => p,
        Err(e) => Probe::Unknown(format!("{e:#}")),
    }
}

fn try_probe(shim: &Path) -> Result<Probe> {
    let exe = std::env::current_exe().context("finding the allocmux executable")?;
    let dir = tempfile::Builder::new()
        .prefix("allocmux-probe-")
        .tempdir()
        .context("creating a temporary directory")?;
    let stderr_path = dir.path().join("stderr");
    let stderr = fs::File::create(&stderr_path).context("creating a file for stderr")?;
    let mut child = Command::new(exe)
        .arg("--version")
        .env("LD_PRELOAD", shim)
        .env("ALLOCMUX_OUTPUT", dir.path().join("%p.prof"))
        .env_remove("ALLOCMUX_STACKS")
        .env_remove("ALLOCMUX_ALLOCATOR")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .context("starting allocmux --version")?;
    let deadline = Instant::now() + PROBE_TIMEOUT;
    let status = loop {
        if let Some(s) = child.try_wait().context("waiting for allocmux --version")? {
            break s;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            bail!("allocmux --version with the shim preloaded did not finish");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let err = fs::read_to_string(&stderr_path).unwrap_or_default();
    if let Some(reason) = loader_complaint(&err) {
        return Ok(Probe::Refused(reason));
    }
    if let Some(sig) = std::os::unix::process::ExitStatusExt::signal(&status) {
        return Ok(Probe::Refused(format!(
            "a program with it preloaded died of signal {sig}"
        )));
    }
    let profiled = fs::read_dir(dir.path())
        .context("reading the probe's directory")?
        .filter_map(|e| e.ok())
        .any(|e| e.file_name().to_string_lossy().ends_with(".prof"));
    Ok(if profiled {
        Probe::Works
    } else {
        Probe::Silent
    })
}

/// The reason in ld.so's message about a preload, if it printed one:
/// `ERROR: ld.so: object 'X' from LD_PRELOAD cannot be preloaded (REASON): ignored.`
/// for a library it skips, `PROG: error while loading shared libraries: REASON`
/// when it gives up on the program.
pub fn loader_complaint(stderr: &str) -> Option<String> {
    stderr.lines().find_map(|line| {
        if let Some((_, rest)) = line.split_once("cannot be preloaded (") {
            let reason = rest.strip_suffix("): ignored.").unwrap_or(rest);
            return Some(reason.to_string());
        }
        line.split_once("error while loading shared libraries: ")
            .map(|(_, reason)| reason.to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_loaders_complaints() {
        assert_eq!(
            loader_complaint(
                "hello\nERROR: ld.so: object '/tmp/t' from LD_PRELOAD cannot be preloaded \
                 (cannot dynamically load position-independent executable): ignored.\n"
            )
            .as_deref(),
            Some("cannot dynamically load position-independent executable")
        );
        assert_eq!(
            loader_complaint(
                "/bin/true: error while loading shared libraries: libmissing.so: cannot open \
                 shared object file: No such file or directory\n"
            )
            .as_deref(),
            Some("libmissing.so: cannot open shared object file: No such file or directory")
        );
        assert_eq!(
            loader_complaint("allocmux: 1 process, 40 allocations\n"),
            None
        );
    }

    #[test]
    fn the_embedded_shim_loads_and_records() {
        let dir = tempfile::tempdir().unwrap();
        let (bytes, name) = library(Backend::Mimalloc, Level::Exact, StackMode::Off).unwrap();
        assert_eq!(bytes, EMBEDDED);
        let path = extract(dir.path(), &bytes, &name).unwrap();
        assert_eq!(fs::read(&path).unwrap(), EMBEDDED);
        assert_eq!(
            extract(dir.path(), &bytes, &name).unwrap(),
            path,
            "written once"
        );
        // The unit-test binary is not allocmux, but it is a dynamically
        // linked program that exits when given an unknown flag.
        assert_eq!(probe(&path), Probe::Works);
    }

    #[test]
    fn direct_shims_load_and_record_under_their_own_names() {
        let dir = tempfile::tempdir().unwrap();
        let mut names = Vec::new();
        for backend in [Backend::System, Backend::Jemalloc] {
            for mode in [StackMode::Off, StackMode::Sample { mean_bytes: 4096 }] {
                let (bytes, name) = library(backend, Level::Exact, mode).unwrap();
                assert_ne!(bytes, EMBEDDED);
                assert!(name.starts_with("liballocmux_shim-"), "{name}");
                let path = extract(dir.path(), &bytes, &name).unwrap();
                assert_eq!(probe(&path), Probe::Works, "{name}");
                names.push(name);
            }
        }
        for backend in Backend::BUILT_IN {
            let sampled = StackMode::Sample { mean_bytes: 4096 };
            let (bytes, name) = library(backend, Level::Sampled, sampled).unwrap();
            assert!(name.contains("_sampled_level-"), "{name}");
            let path = extract(dir.path(), &bytes, &name).unwrap();
            assert_eq!(probe(&path), Probe::Works, "{name}");
            names.push(name);
        }
        names.dedup();
        assert_eq!(names.len(), 7);
        let (bytes, exact) = library(Backend::System, Level::Exact, StackMode::Exact).unwrap();
        assert_eq!(bytes, EMBEDDED);
        assert!(!names.contains(&exact));
    }
}
