//! Offline symbolization of the return addresses a profile records, and the
//! trimming of allocation plumbing from the leaf end of a stack.
//!
//! The recorder stores raw return addresses and the process's module map;
//! everything slow (DWARF, demangling, inline expansion) happens here, in
//! the CLI, after the program has ended (the heaptrack split). One
//! [`Symbolizer`] keeps blazesym's parsed files and its own per-address
//! results, so the processes of one run (which share their executables and
//! libraries) are symbolized once, and all the addresses of one module are
//! sent to blazesym in one batch.
//!
//! An address is looked up as `addr - 1 - bias`: a return address points
//! after the call, and the byte before it is inside the call instruction,
//! whose file, line and inline chain are the ones wanted.
//!
//! What cannot be resolved is still named: an address in a module whose
//! file has no symbol for it (or no longer exists, or was rebuilt since
//! the run: its build id differs) becomes `libfoo.so+0x1a2b`, the ELF
//! virtual address of the return address in that file; an address outside
//! every module (JIT code, a module the recorder missed) becomes
//! `[unknown]`.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::rc::Rc;

use crate::demangle::demangle;
use allocmux_format::profile::Module;
use blazesym::symbolize::source::{Elf, Source};
use blazesym::symbolize::{CodeInfo, Input, Symbolized};
use rustc_hash::FxHashMap;

/// One frame of a symbolized stack: a function, or a function inlined
/// into another at the same address.
///
/// The fields are in sorted order, as JSON writes every object's keys:
/// stack exports serialise frames directly ([`crate::json::to_pretty_declared`]).
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub struct Frame {
    /// Source file, where debug info gives one.
    pub file: Option<String>,
    /// Demangled function name, or `module+0xoffset`, or `[unknown]`.
    pub function: String,
    /// Whether this frame was inlined into the next one (its caller) at
    /// the same address.
    pub inlined: bool,
    /// Line in `file` of the call (or, at the leaf, of the allocating call).
    pub line: Option<u32>,
    /// Path of the module the address lies in, if any.
    pub module: Option<String>,
}

/// The name shown for an address outside every module.
pub const UNKNOWN: &str = "[unknown]";

impl Frame {
    fn bare(function: String, module: Option<&Module>) -> Frame {
        Frame {
            function,
            file: None,
            line: None,
            module: module.map(|m| m.path.clone()),
            inlined: false,
        }
    }

    /// The file name of the module, without its directory.
    pub fn module_name(&self) -> Option<&str> {
        self.module
            .as_deref()
            .map(|p| p.rsplit('/').next().unwrap_or(p))
    }

    /// Whether this frame is allocation plumbing rather than the program:
    /// see [`trim_count`].
    pub fn is_plumbing(&self) -> bool {
        if self
            .module_name()
            .is_some_and(|m| m.starts_with("liballocmux_shim"))
        {
            return true;
        }
        // rustc 1.9x mangles the allocator shims into a `__rustc` namespace.
        let f = self.function.as_str();
        let f = f.strip_prefix("__rustc::").unwrap_or(f);
        matches!(f, "__rust_alloc" | "__rust_alloc_zeroed" | "__rust_realloc")
            || f.starts_with("__rdl_")
            || f.starts_with("__rg_")
            || f.starts_with("allocmux::")
            || f.starts_with("<allocmux::")
            || f.starts_with("allocmux_recorder::")
            || f.starts_with("<allocmux_recorder::")
            // A global allocator's own code: System's, jemallocator's,
            // mimalloc's `GlobalAlloc` impls and std's helpers under them.
            || f.contains(" as core::alloc::global::GlobalAlloc>::")
            || f.starts_with("std::sys::alloc::")
            || (f.starts_with("std::sys::pal::") && f.contains("::alloc::"))
    }
}

/// What one address resolved to: its frames, innermost first (so that a
/// stack of them stays leaf first).
pub type Resolved = Rc<[Frame]>;

/// How many frames to drop from the leaf end of a stack (frames listed
/// leaf first): the leading run of plumbing frames, i.e. frames from the
/// preload shim (a module whose file name starts with `liballocmux_shim`)
/// and Rust's global-allocator glue (`__rust_alloc`, `__rust_alloc_zeroed`,
/// `__rust_realloc`, `__rdl_*`, `__rg_*`, also under the `__rustc::`
/// namespace newer rustc puts them in, anything in the `allocmux` and
/// `allocmux_recorder` crates,
/// and any `GlobalAlloc` implementation with std's helpers below it, such
/// as `<std::alloc::System as GlobalAlloc>::alloc` (inlined into
/// `__rdl_alloc`, it is where the `malloc` call is) or
/// `<allocmux::Counting<A> as GlobalAlloc>::alloc`).
/// The program's own requests stay: a C function's call to `malloc`,
/// `operator new`, Rust's `alloc::alloc::*` and `alloc::raw_vec::...`.
/// Only the leaf end is trimmed, and never the whole stack: a stack made
/// only of plumbing is kept as it is.
pub fn trim_count<'a>(frames: impl IntoIterator<Item = &'a Frame>) -> usize {
    frames
        .into_iter()
        .position(|f| !f.is_plumbing())
        .unwrap_or(0)
}

/// Symbolizes addresses offline, caching per module file and address.
pub struct Symbolizer {
    inner: blazesym::symbolize::Symbolizer,
    /// (module, return address's ELF virtual address) → frames; the module
    /// is its index in `module_ids`, so that no address's key copies or
    /// hashes a path.
    cache: FxHashMap<(usize, u64), Resolved>,
    /// (module path, build id) → its index, for `cache`'s keys.
    module_ids: HashMap<(String, String), usize>,
    /// Whether a (module path, build id) can be read and matches.
    usable: HashMap<(String, String), bool>,
    unknown: Resolved,
    warned: HashSet<String>,
    warnings: Vec<String>,
    quiet: bool,
}

impl std::fmt::Debug for Symbolizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Symbolizer")
            .field("cached", &self.cache.len())
            .field("warnings", &self.warnings)
            .finish_non_exhaustive()
    }
}

impl Default for Symbolizer {
    fn default() -> Self {
        Self::new()
    }
}

impl Symbolizer {
    /// A symbolizer that demangles, reads DWARF (file, line, inlined
    /// functions) and prints each warning once on stderr.
    pub fn new() -> Symbolizer {
        let inner = blazesym::symbolize::Symbolizer::builder()
            .enable_code_info(true)
            .enable_inlined_fns(true)
            // Every name, inlined ones too, is demangled alike by
            // `crate::demangle`.
            .enable_demangling(false)
            .build();
        Symbolizer {
            inner,
            cache: FxHashMap::default(),
            module_ids: HashMap::new(),
            usable: HashMap::new(),
            unknown: Rc::from(vec![Frame::bare(UNKNOWN.into(), None)]),
            warned: HashSet::new(),
            warnings: Vec::new(),
            quiet: false,
        }
    }

    /// Keeps warnings (see [`Symbolizer::warnings`]) instead of printing them.
    pub fn quiet(mut self) -> Symbolizer {
        self.quiet = true;
        self
    }

    /// The warnings given so far, each once.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    fn warn_once(&mut self, key: &str, message: String) {
        if self.warned.insert(key.to_string()) {
            if !self.quiet {
                crate::error::say(format_args!("warning: {message}"));
            }
            self.warnings.push(message);
        }
    }

    /// Resolves return addresses of one process, whose module map is
    /// `modules`; the result is in the order of `addrs`.
    pub fn resolve(&mut self, modules: &[Module], addrs: &[u64]) -> Vec<Resolved> {
        // The byte before a return address is inside the call; a call that
        // ends a mapping has its return address one past the mapping's end.
        let module_of = |a: u64| modules.iter().position(|m| m.contains(a.wrapping_sub(1)));
        let ids: Vec<usize> = modules.iter().map(|m| self.module_id(m)).collect();
        let mut todo: HashMap<usize, Vec<u64>> = HashMap::new();
        for &a in addrs {
            if let Some(i) = module_of(a)
                && !self
                    .cache
                    .contains_key(&(ids[i], a.wrapping_sub(modules[i].bias)))
            {
                todo.entry(i).or_default().push(a);
            }
        }
        let mut batches: Vec<_> = todo.into_iter().collect();
        batches.sort_by_key(|(i, _)| *i);
        for (i, mut batch) in batches {
            batch.sort_unstable();
            batch.dedup();
            self.resolve_module(&modules[i], ids[i], &batch);
        }
        addrs
            .iter()
            .map(|&a| match module_of(a) {
                Some(i) => {
                    let m = &modules[i];
                    self.cache
                        .get(&(ids[i], a.wrapping_sub(m.bias)))
                        .cloned()
                        .unwrap_or_else(|| fallback(m, a))
                }
                None => self.unknown.clone(),
            })
            .collect()
    }

    /// The index of module `m` (by path and build id) in `cache`'s keys.
    fn module_id(&mut self, m: &Module) -> usize {
        let next = self.module_ids.len();
        *self
            .module_ids
            .entry((m.path.clone(), m.build_id.clone()))
            .or_insert(next)
    }

    /// Resolves sorted, distinct addresses of module `m`, whose index is
    /// `id`, in one batch.
    fn resolve_module(&mut self, m: &Module, id: usize, addrs: &[u64]) {
        let syms = if self.module_usable(m) {
            let offsets: Vec<u64> = addrs
                .iter()
                .map(|&a| a.wrapping_sub(1).wrapping_sub(m.bias))
                .collect();
            let src = Source::Elf(Elf::new(&m.path));
            match self.inner.symbolize(&src, Input::VirtOffset(&offsets)) {
                Ok(syms) => syms.into_iter().map(|s| frames_of(s, m)).collect(),
                Err(e) => {
                    self.warn_once(
                        &m.path,
                        format!(
                            "cannot symbolize {}: {e}; its frames are shown as {}+0xOFFSET",
                            m.path,
                            basename(&m.path)
                        ),
                    );
                    vec![None; addrs.len()]
                }
            }
        } else {
            vec![None; addrs.len()]
        };
        for (&a, frames) in addrs.iter().zip(syms) {
            let frames = frames.unwrap_or_else(|| fallback(m, a));
            self.cache.insert((id, a.wrapping_sub(m.bias)), frames);
        }
    }

    /// Whether the module's file is there and is the one the process ran
    /// (same build id, when the profile recorded one); warns once if not.
    fn module_usable(&mut self, m: &Module) -> bool {
        let key = (m.path.clone(), m.build_id.clone());
        if let Some(&ok) = self.usable.get(&key) {
            return ok;
        }
        let name = basename(&m.path);
        let problem = if !m.path.starts_with('/') {
            // `[vdso]` and the like: nothing to read, nothing to warn about.
            Some(None)
        } else if !Path::new(&m.path).is_file() {
            Some(Some(format!(
                "module {} no longer exists; its frames are shown as {name}+0xOFFSET",
                m.path
            )))
        } else if m.build_id.is_empty() {
            None
        } else {
            match blazesym::helper::read_elf_build_id(&m.path) {
                Ok(Some(id)) if hex(&id) == m.build_id => None,
                Ok(_) => Some(Some(format!(
                    "module {} was rebuilt since it was profiled (its build id differs); \
                     its frames are shown as {name}+0xOFFSET",
                    m.path
                ))),
                Err(e) => Some(Some(format!(
                    "cannot read module {}: {e}; its frames are shown as {name}+0xOFFSET",
                    m.path
                ))),
            }
        };
        let ok = problem.is_none();
        if let Some(Some(message)) = problem {
            self.warn_once(&m.path, message);
        }
        self.usable.insert(key, ok);
        ok
    }
}

fn basename(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `module+0xVADDR` for an address the module's file does not name.
fn fallback(m: &Module, addr: u64) -> Resolved {
    let name = format!("{}+0x{:x}", basename(&m.path), addr.wrapping_sub(m.bias));
    Rc::from(vec![Frame::bare(name, Some(m))])
}

fn location(ci: Option<&CodeInfo<'_>>) -> (Option<String>, Option<u32>) {
    match ci {
        Some(ci) => (Some(ci.to_path().display().to_string()), ci.line),
        None => (None, None),
    }
}

/// The frames blazesym found for one address, innermost first.
fn frames_of(s: Symbolized<'_>, m: &Module) -> Option<Resolved> {
    let Symbolized::Sym(sym) = s else {
        return None;
    };
    if sym.name.is_empty() {
        return None;
    }
    let mut frames = Vec::with_capacity(1 + sym.inlined.len());
    // blazesym lists inlined functions outermost first; each one's code
    // info is the location inside it (the innermost's is the address's own).
    for f in sym.inlined.iter().rev() {
        let (file, line) = location(f.code_info.as_ref());
        frames.push(Frame {
            function: demangle(&f.name),
            file,
            line,
            module: Some(m.path.clone()),
            inlined: true,
        });
    }
    let (file, line) = location(sym.code_info.as_deref());
    frames.push(Frame {
        function: demangle(&sym.name),
        file,
        line,
        module: Some(m.path.clone()),
        inlined: false,
    });
    Some(Rc::from(frames))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(function: &str, module: Option<&str>) -> Frame {
        Frame {
            function: function.into(),
            file: None,
            line: None,
            module: module.map(String::from),
            inlined: false,
        }
    }

    #[test]
    fn plumbing_is_trimmed_from_the_leaf_end_only() {
        let shim = Some("/home/u/.cache/allocmux/liballocmux_shim-1a2b.so");
        let stack = [
            frame("malloc", shim),
            frame(
                "<std::alloc::System as core::alloc::global::GlobalAlloc>::alloc",
                Some("/bin/app"),
            ),
            frame("std::sys::alloc::unix::aligned_malloc", Some("/bin/app")),
            frame("__rust_alloc", Some("/bin/app")),
            frame("__rustc::__rdl_alloc", Some("/bin/app")),
            frame(
                "<allocmux_recorder::wrapper::Counting<A> as core::alloc::global::GlobalAlloc>::alloc",
                Some("/bin/app"),
            ),
            frame("alloc::raw_vec::RawVec<T,A>::grow_one", Some("/bin/app")),
            frame("__rust_alloc", Some("/bin/app")), // not at the leaf end: kept
            frame("main", Some("/bin/app")),
        ];
        assert_eq!(trim_count(&stack), 6);
        let cxx = [
            frame(
                "operator new(unsigned long)",
                Some("/usr/lib/libstdc++.so.6"),
            ),
            frame("main", None),
        ];
        assert_eq!(trim_count(&cxx), 0);
        assert_eq!(trim_count(&stack[..2]), 0, "never the whole stack");
        assert!(!frame("allocmux_cli::run", None).is_plumbing());
        assert!(!frame("__rust_alloc_error_handler", None).is_plumbing());
    }

    #[test]
    fn unmapped_and_missing_modules_fall_back_with_one_warning() {
        let gone = Module {
            start: 0x1000,
            end: 0x2000,
            file_offset: 0,
            bias: 0x800,
            build_id: String::new(),
            path: "/no/such/dir/libgone.so".into(),
        };
        let mut s = Symbolizer::new().quiet();
        let r = s.resolve(
            std::slice::from_ref(&gone),
            &[0x1100, 0x1200, 0x9000, 0x2000],
        );
        let names: Vec<&str> = r.iter().map(|f| f[0].function.as_str()).collect();
        // 0x2000 is one past the end: the call before it is in the module.
        assert_eq!(
            names,
            [
                "libgone.so+0x900",
                "libgone.so+0xa00",
                "[unknown]",
                "libgone.so+0x1800"
            ]
        );
        s.resolve(std::slice::from_ref(&gone), &[0x1300]);
        assert_eq!(s.warnings().len(), 1, "{:?}", s.warnings());
        assert!(s.warnings()[0].contains("no longer exists"));
    }
}
