//! Where the preload shim comes from: `ALLOCMUX_SHIM` if set, else the copy
//! embedded in this binary, written once to a per-user cache directory under
//! a name derived from its contents (so versions never overwrite each other
//! and a half-written file is never used).

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

/// The shim built alongside this binary.
pub const EMBEDDED: &[u8] = include_bytes!(env!("ALLOCMUX_EMBEDDED_SHIM"));

/// Path of the shim as built by the build script (for tests in this
/// workspace; an installed binary uses [`locate`]).
pub const BUILT_PATH: &str = env!("ALLOCMUX_EMBEDDED_SHIM");

/// The shim to preload, ready on disk.
pub fn locate() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("ALLOCMUX_SHIM") {
        let p = PathBuf::from(p);
        if !p.is_file() {
            bail!(
                "ALLOCMUX_SHIM={} is not a file; unset it to use the shim built into allocmux",
                p.display()
            );
        }
        return Ok(p);
    }
    extract(&cache_dir()?)
}

fn cache_dir() -> Result<PathBuf> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .map(|h| PathBuf::from(h).join(".cache"))
        })
        .unwrap_or_else(std::env::temp_dir);
    Ok(base.join("allocmux"))
}

/// Writes the embedded shim into `dir` (once per content) and returns its path.
pub fn extract(dir: &Path) -> Result<PathBuf> {
    let path = dir.join(format!("liballocmux_shim-{:016x}.so", fnv1a(EMBEDDED)));
    if fs::metadata(&path).is_ok_and(|m| m.len() == EMBEDDED.len() as u64) {
        return Ok(path);
    }
    fs::create_dir_all(dir)
        .with_context(|| format!("creating the shim cache directory {}", dir.display()))?;
    let mut tmp = tempfile_in(dir)?;
    tmp.1
        .write_all(EMBEDDED)
        .with_context(|| format!("writing the shim into {}", dir.display()))?;
    drop(tmp.1);
    fs::rename(&tmp.0, &path)
        .with_context(|| format!("installing the shim as {}", path.display()))?;
    Ok(path)
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
