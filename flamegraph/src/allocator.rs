//! What `-a` names: one of the allocators allocmux carries, or any
//! allocator library by path (`NAME=PATH`), checked before anything runs.

use std::fmt;
use std::path::{Path, PathBuf};

use allocmux_format::Backend;

use crate::elf::{self, Kind};

/// The allocator a program runs on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Allocator {
    /// One of [`Backend::BUILT_IN`].
    BuiltIn(Backend),
    /// `NAME=PATH`: a preloadable allocator library (tcmalloc, a build of
    /// one's own). A run that records nothing preloads it alone; a
    /// recorded run preloads the shim in front of it, whose `next`
    /// backend forwards to it.
    Library {
        /// What the reports call it.
        name: String,
        /// The library, as an absolute path.
        path: PathBuf,
    },
}

impl Allocator {
    /// The shim's backend for it.
    pub fn backend(&self) -> Backend {
        match self {
            Allocator::BuiltIn(b) => *b,
            Allocator::Library { .. } => Backend::Next,
        }
    }

    /// Its name in reports.
    pub fn name(&self) -> &str {
        match self {
            Allocator::BuiltIn(b) => b.name(),
            Allocator::Library { name, .. } => name,
        }
    }

    /// The library to preload after the shim, if it is one.
    pub fn library(&self) -> Option<&Path> {
        match self {
            Allocator::BuiltIn(_) => None,
            Allocator::Library { path, .. } => Some(path),
        }
    }

    /// Parses `-a`'s value: a built-in allocator's name (`glibc` is
    /// `system`), or `NAME=PATH`, whose library must be an ELF shared
    /// library for this machine that defines the functions the shim
    /// forwards to ([`elf::NEXT_FUNCTIONS`]).
    pub fn parse(arg: &str) -> Result<Allocator, String> {
        let Some((name, path)) = arg.split_once('=') else {
            return match Backend::from_name(arg.as_bytes()) {
                // The empty name is the shim's `system`, not a choice on
                // a command line.
                Some(b) if b != Backend::Next && !arg.is_empty() => Ok(Allocator::BuiltIn(b)),
                _ => Err(format!(
                    "unknown allocator {arg:?}: expected system, jemalloc, mimalloc, or \
                     NAME=PATH for an allocator library (as \
                     tcmalloc=/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4)"
                )),
            };
        };
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c))
        {
            return Err("NAME in NAME=PATH is letters, digits, `_`, `.` and `-`".into());
        }
        if Backend::from_name(name.as_bytes()).is_some() {
            return Err(format!(
                "{name} is a built-in allocator's name; call the library something else (as \
                 debian-{name})"
            ));
        }
        let path = std::path::absolute(path).map_err(|e| format!("{path}: {e}"))?;
        check_library(&path).map_err(|why| format!("{}: {why}", path.display()))?;
        Ok(Allocator::Library {
            name: name.to_string(),
            path,
        })
    }
}

impl fmt::Display for Allocator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why `path` cannot serve as an allocator library, if it cannot.
fn check_library(path: &Path) -> Result<(), String> {
    let text = path.to_str().ok_or("the path is not UTF-8 text")?;
    if text.contains([':', ' ']) {
        // LD_PRELOAD separates libraries with both.
        return Err("LD_PRELOAD cannot name a path with `:` or a space".into());
    }
    let data = std::fs::read(path).map_err(|e| e.to_string())?;
    let lib = match elf::read(&data) {
        None => return Err("not an ELF file".into()),
        Some(Err(why)) => return Err(format!("damaged ELF file ({why})")),
        Some(Ok(lib)) => lib,
    };
    match lib.kind {
        Kind::SharedLibrary => {}
        Kind::Executable => return Err("a program, not a shared library".into()),
        Kind::Other => return Err("not a shared library".into()),
    }
    let shim = crate::shim::embedded_elf();
    if lib.arch != shim.arch {
        return Err(format!(
            "built for {}, but the shim for {}",
            lib.arch, shim.arch
        ));
    }
    let lacks = lib.lacks_for_next();
    if !lacks.is_empty() {
        return Err(format!(
            "not an allocator library the shim can forward to: it does not define {}",
            lacks.join(", ")
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn built_in_names_and_bad_values() {
        assert_eq!(
            Allocator::parse("jemalloc"),
            Ok(Allocator::BuiltIn(Backend::Jemalloc))
        );
        assert_eq!(
            Allocator::parse("glibc"),
            Ok(Allocator::BuiltIn(Backend::System))
        );
        for bad in ["tcmalloc", "next", "", "=/lib/x.so", "a b=/lib/x.so"] {
            assert!(Allocator::parse(bad).is_err(), "{bad}");
        }
        let e = Allocator::parse("jemalloc=/usr/lib/x.so").unwrap_err();
        assert!(e.contains("built-in allocator's name"), "{e}");
        let e = Allocator::parse("x=/nonexistent/lib.so").unwrap_err();
        assert!(e.contains("No such file"), "{e}");
        // A program, not a library.
        let e = Allocator::parse("sh=/bin/sh").unwrap_err();
        assert!(e.contains("not a shared library"), "{e}");
    }
}
