//! A call stack on one line, as `report --top` and `demo` show it:
//! `[6 std frames] ← edit_distance::levenshtein_naive (edit_distance.rs:45)
//! ← …`, leaf first.
//!
//! A line has room for a handful of frames, so it spends them on the
//! program's own code: each function is named by the last parts of its
//! path (never cut inside its own name), with the file and line debug
//! info gives, and every run of the standard library's frames (iterator
//! adapters, closures of `std`, the start-up code before `main`) is shown
//! as a count.

use crate::stacks::MergedStack;
use crate::symbolize::Frame;

/// The program's frames shown before `… (N more)`.
const FRAMES_SHOWN: usize = 5;

/// `leaf ← caller ← …`, after `program: ` when the stacks come from
/// several programs (then each stack names the one that made it).
pub fn stack_line(s: &MergedStack) -> String {
    let frames = frames_line(&s.frames);
    match &s.program {
        Some(program) => format!("{program}: {frames}"),
        None => frames,
    }
}

/// Frames listed leaf first, as `leaf ← caller ← …`: runs of
/// standard-library and start-up frames as `[N std frames]`, up to
/// [`FRAMES_SHOWN`] of the others by [`frame_label`], then `… (N more)`
/// if any of the program's frames are left.
fn frames_line(frames: &[Frame]) -> String {
    let collapsed: Vec<bool> = (0..frames.len())
        .map(|i| is_standard_library(&frames[i].function) || is_start_up(frames, i))
        .collect();
    // A stack of nothing but the standard library (a buffer std allocates
    // for itself) is shown by name: a bare count would say nothing.
    let collapse = !collapsed.iter().all(|&c| c);
    let mut parts = Vec::new();
    let mut shown = 0;
    let mut i = 0;
    while i < frames.len() {
        // Past the frames shown the rest is counted, unless it is all
        // standard library: then its run says as much.
        let rest_collapses = collapse && collapsed[i..].iter().all(|&c| c);
        if shown == FRAMES_SHOWN && !rest_collapses {
            parts.push(format!("… ({} more)", frames.len() - i));
            break;
        }
        if collapse && collapsed[i] {
            let run = collapsed[i..].iter().take_while(|&&c| c).count();
            parts.push(format!(
                "[{run} std frame{}]",
                if run == 1 { "" } else { "s" }
            ));
            i += run;
        } else {
            parts.push(frame_label(&frames[i]));
            shown += 1;
            i += 1;
        }
    }
    parts.join(" ← ")
}

/// `name (file.rs:12)`: the short name, whether it was inlined into its
/// caller, and where the call is, as far as debug info tells.
fn frame_label(f: &Frame) -> String {
    let name = short_name(&f.function);
    match (f.inlined, source_location(f)) {
        (false, None) => name,
        (true, None) => format!("{name} (inlined)"),
        (false, Some(at)) => format!("{name} ({at})"),
        (true, Some(at)) => format!("{name} (inlined, {at})"),
    }
}

/// `file.rs:12`, the file without its directories (the function's name
/// already says where it is), except a `mod.rs`, which every module
/// directory has: `raw_vec/mod.rs:433`.
fn source_location(f: &Frame) -> Option<String> {
    let path = f.file.as_deref()?;
    let mut parts = path.rsplit('/');
    let file = parts.next().unwrap_or(path);
    let file = match (file, parts.next()) {
        ("mod.rs", Some(dir)) => format!("{dir}/mod.rs"),
        _ => file.to_string(),
    };
    Some(match f.line {
        Some(line) => format!("{file}:{line}"),
        None => file,
    })
}

/// A function's name without the module path before it: its own name and
/// its parent's (`edit_distance::levenshtein_naive`, `Vec<T,A>::push`,
/// `<Row as Clone>::clone`), the closures and lambdas it holds kept with
/// it (`edit_distance::naive::{{closure}}`), and every path inside its
/// generic parameters, qualified type or C++ argument list cut to its
/// last part. A name whose brackets do not pair up (C++'s `operator<`) is
/// kept whole.
pub fn short_name(name: &str) -> String {
    let Some(segments) = path_segments(name) else {
        return name.to_string();
    };
    // From the end, two segments that are not in braces: closures
    // (`{{closure}}`, `{closure#0}`), shims and C++ lambdas
    // (`{lambda()#1}`) are parts of the function they are in, not names.
    let mut named = 0;
    let mut from = segments.len();
    while from > 0 && named < 2 {
        from -= 1;
        if !segments[from].starts_with('{') {
            named += 1;
        }
    }
    last_parts_only(&segments[from..].join("::"))
}

/// The `::`-separated parts of a path, outside brackets: `<A as B>::f`
/// is `<A as B>` and `f`, a turbofish (`parse::<T>`) stays with its
/// function. `None` if the brackets do not pair up.
fn path_segments(name: &str) -> Option<Vec<&str>> {
    let bytes = name.as_bytes();
    let mut depth = 0usize;
    let mut segments = Vec::new();
    let mut start = 0;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'<' | b'(' | b'[' => depth += 1,
            // The arrow of `Fn(&str) -> bool` closes nothing.
            b'>' if i > 0 && bytes[i - 1] == b'-' => {}
            b'>' | b')' | b']' => depth = depth.checked_sub(1)?,
            b':' if depth == 0 && bytes.get(i + 1) == Some(&b':') => {
                if bytes.get(i + 2) != Some(&b'<') {
                    segments.push(&name[start..i]);
                    start = i + 2;
                }
                i += 2;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    (depth == 0).then(|| {
        segments.push(&name[start..]);
        segments
    })
}

/// `s` with every path inside its brackets cut to its last part:
/// `<T as alloc::vec::spec_from_elem::SpecFromElem>` becomes
/// `<T as SpecFromElem>`; the `::` outside brackets, and a turbofish's
/// `::<`, stay.
fn last_parts_only(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut depth = 0usize;
    // Where, in `out`, the path being read began.
    let mut path_start = 0;
    let mut rest = s;
    while let Some(c) = rest.chars().next() {
        if depth > 0 && rest.starts_with("::") && !rest[2..].starts_with('<') {
            out.truncate(path_start);
            rest = &rest[2..];
            continue;
        }
        match c {
            '<' | '(' | '[' => depth += 1,
            '>' if out.ends_with('-') => {}
            '>' | ')' | ']' => depth = depth.saturating_sub(1),
            _ => {}
        }
        out.push(c);
        if !(c.is_alphanumeric() || c == '_' || c == ':') {
            path_start = out.len();
        }
        rest = &rest[c.len_utf8()..];
    }
    out
}

/// Whether a frame is the standard library's (Rust's `alloc`, `core`,
/// `std`; C++'s `std` and libstdc++'s `__gnu_cxx`): the plumbing between
/// the program's calls, which a one-line stack counts rather than names.
fn is_standard_library(function: &str) -> bool {
    let std_path = |p: &str| {
        ["alloc::", "core::", "std::", "__gnu_cxx::"]
            .iter()
            .any(|s| p.starts_with(s))
    };
    let Some(inner) = function.strip_prefix('<') else {
        return std_path(function);
    };
    // `<Type as Trait>::f`: the standard library's when the trait is, and
    // the type is too (behind any reference or pointer: `<&dyn
    // core::ops::Fn<()> as core::ops::FnOnce<()>>::call_once`) or is a
    // generic parameter (`<T as SpecFromElem>`).
    match inner.split_once(" as ") {
        Some((ty, tr)) => {
            let ty = referent(ty);
            std_path(tr) && (std_path(ty) || !ty.contains("::"))
        }
        // `<str>::to_lowercase`, `<[T]>::to_vec`: inherent methods of
        // primitive types, which only the standard library defines.
        None => std_path(inner) || is_primitive(inner),
    }
}

/// The type behind references, pointers and `dyn`: `&mut dyn Fn()` is `Fn()`.
fn referent(mut ty: &str) -> &str {
    loop {
        let rest = ["&", "mut ", "dyn ", "*const ", "*mut "]
            .iter()
            .find_map(|p| ty.strip_prefix(p));
        match rest {
            Some(rest) => ty = rest.trim_start(),
            None => return ty,
        }
    }
}

/// Whether `<…>::f` (given without the `<`) is a method of a primitive type.
fn is_primitive(inner: &str) -> bool {
    let ty = inner.split_once(">::").map_or(inner, |(ty, _)| ty);
    ty.starts_with('[')
        || ty.starts_with('*')
        || matches!(
            ty,
            "str"
                | "bool"
                | "char"
                | "f32"
                | "f64"
                | "u8"
                | "u16"
                | "u32"
                | "u64"
                | "u128"
                | "usize"
                | "i8"
                | "i16"
                | "i32"
                | "i64"
                | "i128"
                | "isize"
        )
}

/// Whether frame `i` of `frames` (leaf first) is code that starts a
/// process or a thread before the program's own: the C runtime's and
/// libc's (`_start`, `__libc_start_main`, `start_thread`, `clone3`), and
/// the `main` rustc writes for a Rust program, which only calls
/// `std::rt::lang_start` (a C or C++ `main` is the program's).
fn is_start_up(frames: &[Frame], i: usize) -> bool {
    let f = frames[i].function.as_str();
    matches!(
        f,
        "_start"
            | "__libc_start_main"
            | "__libc_start_main_impl"
            | "__libc_start_call_main"
            | "start_thread"
            | "clone"
            | "clone3"
            | "__clone"
            | "__clone3"
    ) || (f == "main" && i > 0 && frames[i - 1].function.starts_with("std::rt::lang_start"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stacks::Values;

    fn frame(function: &str, at: Option<(&str, u32)>) -> Frame {
        Frame {
            function: function.into(),
            file: at.map(|(f, _)| f.into()),
            line: at.map(|(_, l)| l),
            module: None,
            inlined: false,
        }
    }

    fn line_of(frames: Vec<Frame>) -> String {
        stack_line(&MergedStack {
            frames,
            program: None,
            values: Values::default(),
        })
    }

    #[test]
    fn standard_library_frames_are_recognised() {
        for f in [
            "alloc::alloc::alloc",
            "<alloc::alloc::Global>::alloc_impl",
            "<T as alloc::vec::spec_from_elem::SpecFromElem>::from_elem",
            "<alloc::vec::Vec<T> as core::iter::traits::collect::FromIterator<T>>::from_iter",
            "std::vector<int, std::allocator<int> >::_M_realloc_insert",
            "<str>::to_lowercase",
            "<[u8]>::to_vec",
            "core::iter::adapters::map::map_fold::{{closure}}",
            "std::rt::lang_start::{{closure}}",
            "std::panicking::catch_unwind::do_call",
            "<&dyn core::ops::function::Fn<(), Output = i32> + core::marker::Sync as \
             core::ops::function::FnOnce<()>>::call_once",
            "<&mut F as core::ops::function::FnMut<A>>::call_mut",
        ] {
            assert!(is_standard_library(f), "{f}");
        }
        for f in [
            "allocmux_workloads::edit_distance::levenshtein_naive",
            "<app::Row as core::clone::Clone>::clone",
            "<&app::Row as core::fmt::Debug>::fmt",
            "main",
            "allocate_block",
            "<app::Strings>::push",
        ] {
            assert!(!is_standard_library(f), "{f}");
        }
    }

    #[test]
    fn names_lose_their_module_path_but_never_their_own_name() {
        for (long, short) in [
            (
                "allocmux_workloads::edit_distance::levenshtein_naive",
                "edit_distance::levenshtein_naive",
            ),
            (
                "allocmux_workloads::edit_distance::naive::{{closure}}",
                "edit_distance::naive::{{closure}}",
            ),
            ("app::cli::parse::{closure#0}", "cli::parse::{closure#0}"),
            ("allocmux_cli::cmd::workload::run", "workload::run"),
            ("allocmux::main", "allocmux::main"),
            ("leaf", "leaf"),
            (
                "alloc::vec::Vec<T,A>::with_capacity_in",
                "Vec<T,A>::with_capacity_in",
            ),
            (
                "<app::model::Row as core::clone::Clone>::clone",
                "<Row as Clone>::clone",
            ),
            (
                "<T as alloc::vec::spec_from_elem::SpecFromElem>::from_elem",
                "<T as SpecFromElem>::from_elem",
            ),
            (
                "app::json::parse::<app::json::Value>",
                "json::parse::<Value>",
            ),
            (
                "app::Table<alloc::string::String>::insert",
                "Table<String>::insert",
            ),
            (
                "<&dyn core::ops::function::Fn(&str) -> bool as core::ops::function::FnOnce<(&str,)>>::call_once",
                "<&dyn Fn(&str) -> bool as FnOnce<(&str,)>>::call_once",
            ),
            // C++: argument lists, lambdas, operators whose brackets do
            // not pair up.
            (
                "fixture::Parser::parse(std::__cxx11::basic_string<char> const&)",
                "Parser::parse(basic_string<char> const&)",
            ),
            (
                "main::{lambda()#1}::operator()() const",
                "main::{lambda()#1}::operator()() const",
            ),
            (
                "geo::operator<(geo::P, geo::P)",
                "geo::operator<(geo::P, geo::P)",
            ),
            ("operator new(unsigned long)", "operator new(unsigned long)"),
            ("libgone.so+0x1a2b", "libgone.so+0x1a2b"),
            ("[unknown]", "[unknown]"),
        ] {
            assert_eq!(short_name(long), short, "{long}");
        }
        // A long name of the program's own is kept whole, however long.
        let long = "app::a_function_whose_name_is_much_longer_than_any_column_would_allow";
        let line = line_of(vec![frame(long, None)]);
        assert_eq!(
            line,
            "app::a_function_whose_name_is_much_longer_than_any_column_would_allow"
        );
    }

    /// The demo's top stack, as the symbolizer gives it (leaf first).
    fn demo_stack() -> Vec<Frame> {
        let std = |f: &str| frame(f, Some(("/rustc/5980761/library/core/src/lib.rs", 1)));
        let own = |f: &str, file: &str, line| frame(f, Some((file, line)));
        let mut inlined = std("alloc::vec::Vec<T,A>::with_capacity_in");
        inlined.inlined = true;
        vec![
            std("<alloc::raw_vec::RawVecInner>::try_allocate_in"),
            inlined,
            std("alloc::vec::from_elem"),
            own(
                "allocmux_workloads::edit_distance::levenshtein_naive",
                "/src/workloads/src/edit_distance.rs",
                45,
            ),
            own(
                "allocmux_workloads::edit_distance::naive::{{closure}}",
                "/src/workloads/src/edit_distance.rs",
                21,
            ),
            std("core::iter::adapters::map::map_fold::{{closure}}"),
            std(
                "<core::iter::adapters::zip::Zip<A,B> as core::iter::traits::iterator::Iterator>::fold",
            ),
            std("<u64 as core::iter::traits::accum::Sum>::sum"),
            own(
                "allocmux_workloads::edit_distance::naive",
                "/src/workloads/src/edit_distance.rs",
                22,
            ),
            own(
                "allocmux_cli::cmd::workload::run",
                "/src/flamegraph/src/cmd/workload.rs",
                13,
            ),
            std("core::ops::function::FnOnce::call_once"),
            own("allocmux::main", "/src/flamegraph/src/main.rs", 17),
            std("std::sys::backtrace::__rust_begin_short_backtrace"),
            std("std::rt::lang_start::{{closure}}"),
            std("std::panicking::catch_unwind::do_call"),
            std("std::rt::lang_start_internal"),
            std("std::rt::lang_start"),
            frame("main", None),
            frame(
                "__libc_start_call_main",
                Some(("./csu/../sysdeps/nptl/libc_start_call_main.h", 58)),
            ),
            frame(
                "__libc_start_main_impl",
                Some(("./csu/../csu/libc-start.c", 360)),
            ),
            frame("_start", None),
        ]
    }

    #[test]
    fn standard_library_and_start_up_runs_are_counted_and_files_lines_shown() {
        assert_eq!(
            line_of(demo_stack()),
            "[3 std frames] ← edit_distance::levenshtein_naive (edit_distance.rs:45) \
             ← edit_distance::naive::{{closure}} (edit_distance.rs:21) ← [3 std frames] \
             ← edit_distance::naive (edit_distance.rs:22) ← workload::run (workload.rs:13) \
             ← [1 std frame] ← allocmux::main (main.rs:17) ← [9 std frames]"
        );
        // Past the frames shown, the rest is counted.
        let mut deep = demo_stack();
        deep.insert(3, frame("app::inner", None));
        assert!(
            line_of(deep).ends_with("← workload::run (workload.rs:13) ← … (11 more)"),
            "five of the program's frames, then a count"
        );
        // The program first, when the stacks come from several.
        let line = stack_line(&MergedStack {
            frames: demo_stack(),
            program: Some("cc1".into()),
            values: Values::default(),
        });
        assert!(
            line.starts_with("cc1: [3 std frames] ← edit_distance::"),
            "{line}"
        );
        // A C main is the program's; an inlined frame says so.
        let mut helper = frame("inlined_helper", Some(("/src/stacks.c", 33)));
        helper.inlined = true;
        let c = vec![
            frame("leaf", Some(("/src/stacks.c", 20))),
            helper,
            frame("main", Some(("/src/stacks.c", 50))),
            frame("__libc_start_call_main", None),
        ];
        assert_eq!(
            line_of(c),
            "leaf (stacks.c:20) ← inlined_helper (inlined, stacks.c:33) ← main (stacks.c:50) \
             ← [1 std frame]"
        );
        // Nothing but the standard library: named, not counted.
        let only_std = vec![
            frame("alloc::raw_vec::finish_grow", None),
            frame("std::io::stdio::stdout", None),
        ];
        assert_eq!(line_of(only_std), "raw_vec::finish_grow ← stdio::stdout");
        // A module's `mod.rs` keeps its directory.
        let f = frame("app::store::open", Some(("/src/app/src/store/mod.rs", 7)));
        assert_eq!(line_of(vec![f]), "store::open (store/mod.rs:7)");
    }
}
