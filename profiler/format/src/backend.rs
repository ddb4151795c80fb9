//! [`Backend`]: the allocators allocmux switches between, named once for
//! the shim, `allocmux::Switchable`, the allocator statistics
//! and the command line.

use core::fmt;
use core::str::FromStr;

/// One of the allocators allocmux can run a program on.
///
/// Not `#[non_exhaustive]`: the shim, the recorder and the command line
/// match on it exhaustively, so that a new backend cannot be half handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Backend {
    /// The system allocator (`std::alloc::System`: glibc's malloc).
    System,
    /// jemalloc 5.3 (tikv-jemalloc-sys, the `jemalloc` feature).
    Jemalloc,
    /// mimalloc 2.x (libmimalloc-sys, the `mimalloc` feature).
    Mimalloc,
    /// The next `malloc` in the link order: in the shim, the allocator
    /// library preloaded after it (`LD_PRELOAD="SHIM LIBRARY"`, found
    /// with `dlsym(RTLD_NEXT)`), glibc's if there is none; in a Rust
    /// program, the process's `malloc` (`std::alloc::System`), which is
    /// such a library when one is preloaded. Not one of
    /// [`Backend::BUILT_IN`]: what it is depends on the process.
    Next,
}

impl Backend {
    /// The allocators allocmux carries, in the order the tools list them.
    pub const BUILT_IN: [Backend; 3] = [Backend::System, Backend::Jemalloc, Backend::Mimalloc];

    /// The name `ALLOCMUX_ALLOCATOR` and profiles use: `system`,
    /// `jemalloc`, `mimalloc`, `next`.
    pub const fn name(self) -> &'static str {
        match self {
            Backend::System => "system",
            Backend::Jemalloc => "jemalloc",
            Backend::Mimalloc => "mimalloc",
            Backend::Next => "next",
        }
    }

    /// Parses a value of `ALLOCMUX_ALLOCATOR` as the shim does (`glibc` and
    /// the empty string mean the system allocator). Allocates nothing: the
    /// shim calls it inside the process's first `malloc`.
    pub fn from_name(name: &[u8]) -> Option<Backend> {
        match name {
            b"system" | b"glibc" | b"" => Some(Backend::System),
            b"jemalloc" => Some(Backend::Jemalloc),
            b"mimalloc" => Some(Backend::Mimalloc),
            b"next" => Some(Backend::Next),
            _ => None,
        }
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A name that is not an allocator allocmux knows (see
/// [`Backend::from_name`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownBackend {
    name: String,
}

impl UnknownBackend {
    /// The name as given.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl fmt::Display for UnknownBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown allocator {:?} (expected system, jemalloc, mimalloc or next)",
            self.name
        )
    }
}

impl std::error::Error for UnknownBackend {}

impl FromStr for Backend {
    type Err = UnknownBackend;

    /// The names [`Backend::from_name`] takes.
    fn from_str(s: &str) -> Result<Backend, UnknownBackend> {
        Backend::from_name(s.as_bytes()).ok_or_else(|| UnknownBackend { name: s.to_owned() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for b in Backend::BUILT_IN.into_iter().chain([Backend::Next]) {
            assert_eq!(b.name().parse::<Backend>(), Ok(b));
            assert_eq!(b.to_string(), b.name());
        }
        assert_eq!("glibc".parse::<Backend>(), Ok(Backend::System));
        assert_eq!("".parse::<Backend>(), Ok(Backend::System));
        let e = "tcmalloc".parse::<Backend>().unwrap_err();
        assert_eq!(e.name(), "tcmalloc");
    }
}
