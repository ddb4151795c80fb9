//! Whether a command can be profiled through `LD_PRELOAD` at all, checked
//! before it runs so the user hears why instead of getting an empty report.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow, bail};
use object::read::elf::{ElfFile64, ProgramHeader as _};
use object::{Endianness, elf};

/// Why a command cannot be run or profiled.
#[derive(Debug)]
pub enum TargetError {
    /// Not found on PATH or at the given path.
    NotFound(String),
    /// Exists but is not executable.
    NotExecutable(PathBuf),
}

impl std::fmt::Display for TargetError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TargetError::NotFound(c) => write!(f, "command not found: {c}"),
            TargetError::NotExecutable(p) => {
                write!(f, "{} is not executable (chmod +x it?)", p.display())
            }
        }
    }
}

impl std::error::Error for TargetError {}

/// Finds `cmd` as a shell would: a path if it has a slash, else on PATH.
pub fn resolve(cmd: &str) -> Result<PathBuf> {
    if cmd.is_empty() {
        bail!("the command is empty");
    }
    let candidates: Vec<PathBuf> = if cmd.contains('/') {
        vec![PathBuf::from(cmd)]
    } else {
        std::env::var_os("PATH")
            .map(|p| std::env::split_paths(&p).map(|d| d.join(cmd)).collect())
            .unwrap_or_default()
    };
    let mut not_exec = None;
    for c in candidates {
        if let Ok(m) = fs::metadata(&c) {
            if m.is_file() && m.permissions().mode() & 0o111 != 0 {
                return Ok(c);
            }
            if m.is_file() {
                not_exec.get_or_insert(c);
            }
        }
    }
    Err(match not_exec {
        Some(p) => TargetError::NotExecutable(p).into(),
        None => TargetError::NotFound(cmd.to_string()).into(),
    })
}

/// Checks that `path` will load the shim: a dynamically linked ELF (or a
/// script whose interpreter is one), not setuid or setgid.
pub fn check_preloadable(path: &Path) -> Result<()> {
    check_one(path, 0)
}

fn check_one(path: &Path, depth: u32) -> Result<()> {
    let meta = fs::metadata(path).with_context(|| format!("reading {}", path.display()))?;
    if meta.permissions().mode() & 0o6000 != 0 {
        bail!(
            "{} is setuid or setgid: the loader ignores LD_PRELOAD for it, so it cannot be profiled \
             (run a copy without the set-id bit, or profile it as the owning user)",
            path.display()
        );
    }
    let data = fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    if let Some(rest) = data.strip_prefix(b"#!") {
        if depth > 2 {
            return Ok(()); // let the kernel judge long interpreter chains
        }
        let line = rest.split(|&b| b == b'\n').next().unwrap_or_default();
        let line = String::from_utf8_lossy(line);
        let interp = line
            .split_whitespace()
            .next()
            .ok_or_else(|| anyhow!("{} has an empty #! line", path.display()))?;
        return check_one(Path::new(interp), depth + 1)
            .with_context(|| format!("{} is a script run by {interp}", path.display()));
    }
    if !data.starts_with(b"\x7fELF") {
        return Ok(()); // not ELF and not a script: let exec report it
    }
    let Ok(elf) = ElfFile64::<Endianness>::parse(&*data) else {
        return Ok(()); // 32-bit or unusual: the loader will tell
    };
    let endian = elf.endian();
    let has_interp = elf
        .elf_program_headers()
        .iter()
        .any(|ph| ph.p_type(endian) == elf::PT_INTERP);
    if !has_interp {
        bail!(
            "{} is statically linked: LD_PRELOAD cannot reach its malloc, so it cannot be profiled \
             (build it dynamically linked, or for Rust use the allocmux library's #[global_allocator])",
            path.display()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_commands_on_path() {
        assert!(resolve("sh").unwrap().is_absolute());
        let e = resolve("no-such-command-allocmux").unwrap_err().to_string();
        assert_eq!(e, "command not found: no-such-command-allocmux");
        assert!(resolve("").is_err());
    }

    #[test]
    fn accepts_dynamic_binaries_and_scripts() {
        check_preloadable(Path::new("/bin/sh")).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("s");
        fs::write(&script, "#!/bin/sh\necho hi\n").unwrap();
        check_preloadable(&script).unwrap();
    }

    #[test]
    fn refuses_setuid() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("suid");
        fs::copy("/bin/true", &p).unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(0o4755)).unwrap();
        let e = check_preloadable(&p).unwrap_err().to_string();
        assert!(e.contains("setuid"), "{e}");
    }
}
