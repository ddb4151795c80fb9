//! Whether a command can be profiled through `LD_PRELOAD` at all, checked
//! before it runs so the user hears why instead of getting an empty report.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow, bail};

use crate::elf::{self, Arch, InCode};

/// Why a command cannot be run or profiled.
#[derive(Debug)]
pub enum TargetError {
    /// Not found on PATH or at the given path.
    NotFound(String),
    /// Exists but is not executable.
    NotExecutable(PathBuf),
    /// A path to a directory (as a shell says, status 126).
    IsDirectory(PathBuf),
    /// An empty command (`run -- ""`): a usage error.
    Empty,
}

impl std::fmt::Display for TargetError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TargetError::NotFound(c) => write!(f, "command not found: {c}"),
            TargetError::NotExecutable(p) => {
                write!(f, "{} is not executable (chmod +x it?)", p.display())
            }
            TargetError::IsDirectory(p) => write!(f, "{} is a directory", p.display()),
            TargetError::Empty => f.write_str("the command is empty"),
        }
    }
}

impl std::error::Error for TargetError {}

/// Finds `cmd` as a shell would: a path if it has a slash, else on PATH.
pub fn resolve(cmd: &str) -> Result<PathBuf> {
    if cmd.is_empty() {
        return Err(TargetError::Empty.into());
    }
    let candidates: Vec<PathBuf> = if cmd.contains('/') {
        // A path is run as it is (a directory on PATH is passed over, as
        // a shell passes it over).
        let path = PathBuf::from(cmd);
        if path.is_dir() {
            return Err(TargetError::IsDirectory(path).into());
        }
        vec![path]
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

/// The ELF program the kernel runs for a command: the command itself, or
/// for a script its interpreter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Program {
    /// Its path.
    pub path: PathBuf,
    /// Its word size and machine, which the shim's must match.
    pub arch: Arch,
    /// Dynamically linked (it names an interpreter): a loader runs for it
    /// and can preload.
    pub dynamic: bool,
    /// What the `allocmux` crate inside it does, if it is built with it.
    pub in_code: InCode,
}

/// Checks that `path` will load the shim: a dynamically linked ELF (or a
/// script whose interpreter is one), not setuid or setgid. Returns the ELF
/// program that will run, when that is known, for the caller to match
/// against the shim's architecture.
pub fn check_preloadable(path: &Path) -> Result<Option<Program>> {
    let program = inspect(path)?;
    if let Some(p) = &program {
        check_dynamic(p)?;
    }
    Ok(program)
}

/// The ELF program that will run for `path`, as [`check_preloadable`]
/// finds it, refusing setuid and setgid files but not a statically linked
/// program (which a run that preloads nothing can still run).
pub fn inspect(path: &Path) -> Result<Option<Program>> {
    check_one(path, 0)
}

/// Refuses a statically linked program: no loader runs for it, so
/// nothing preloaded reaches its `malloc`.
pub fn check_dynamic(p: &Program) -> Result<()> {
    if !p.dynamic {
        bail!(
            "{} is statically linked: LD_PRELOAD cannot reach its malloc, so it cannot be profiled \
             (build it dynamically linked, or for Rust use the allocmux library's #[global_allocator])",
            p.path.display()
        );
    }
    Ok(())
}

fn check_one(path: &Path, depth: u32) -> Result<Option<Program>> {
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
            return Ok(None); // let the kernel judge long interpreter chains
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
    // Not ELF and not a script, or a damaged ELF: let exec report it.
    let Some(Ok(elf)) = elf::read(&data) else {
        return Ok(None);
    };
    Ok(Some(Program {
        path: path.to_path_buf(),
        arch: elf.arch,
        dynamic: elf.interpreter,
        in_code: elf.in_code,
    }))
}

/// Why `program` (as an `exec` named it) left no profile: what the checks
/// `allocmux` makes of its own targets find, or, when they find nothing,
/// the causes that remain.
pub fn why_unprofiled(program: &str) -> String {
    let checked = resolve(program).and_then(|path| {
        check_preloadable(&path)?;
        Ok(path)
    });
    match checked {
        Ok(path) => format!(
            "{} left no profile (its environment dropped LD_PRELOAD, or it was killed as it \
             started)",
            path.display()
        ),
        Err(e) => {
            let e = format!("{e:#}");
            e.split(" (").next().unwrap_or(&e).to_string()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_commands_on_path() {
        assert!(resolve("sh").unwrap().is_absolute());
        let e = resolve("no-such-command-allocmux").unwrap_err().to_string();
        assert_eq!(e, "command not found: no-such-command-allocmux");
        let e = resolve("/tmp").unwrap_err().to_string();
        assert_eq!(e, "/tmp is a directory");
        assert!(resolve("").is_err());
    }

    #[test]
    fn accepts_dynamic_binaries_and_scripts() {
        let sh = check_preloadable(Path::new("/bin/sh")).unwrap().unwrap();
        assert_eq!(sh.path, Path::new("/bin/sh"));
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("s");
        fs::write(&script, "#!/bin/sh\necho hi\n").unwrap();
        let run_by = check_preloadable(&script).unwrap().unwrap();
        assert_eq!(run_by, sh, "a script is run by its interpreter");
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
