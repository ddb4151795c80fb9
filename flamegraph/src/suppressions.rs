//! Leak suppressions in LeakSanitizer's format, and the defaults shipped
//! with allocmux: which leaked stacks `report --leaks` and `run --limit
//! leaked` leave out. Figures only: the files are read by the commands.
//!
//! A file holds `leak:PATTERN` lines, `#` comments and blank lines (other
//! kinds, `race:` and the rest, are refused with their line number). A
//! pattern matches a stack when it matches any frame's function name, the
//! path or file name of the module (shared library) the frame is in, or
//! the path or file name of its source file, by LSan's glob rules: `*` is
//! any run of characters, a leading `^` anchors at the start, a trailing
//! `$` at the end, and a pattern is otherwise found anywhere in the name.

use std::fmt;

use crate::symbolize::Frame;

/// The default suppressions: the C and C++ runtimes' own start-up blocks,
/// live at exit in every program that uses them
/// (`flamegraph/assets/default.supp`).
pub const DEFAULTS: &str = include_str!("../assets/default.supp");

/// Where a list of patterns comes from, as the report names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    /// The defaults shipped with allocmux.
    Defaults,
    /// A file given with `--suppressions`, as named on the command line.
    File(String),
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Defaults => f.write_str("the defaults"),
            Origin::File(name) => f.write_str(name),
        }
    }
}

/// The patterns of one file (or of the defaults).
#[derive(Clone, Debug)]
pub struct SuppressionList {
    /// Where they come from.
    pub origin: Origin,
    /// The patterns of its `leak:` lines, in order.
    pub patterns: Vec<String>,
}

/// Every list in use: the defaults (unless turned off), then each file.
#[derive(Clone, Debug, Default)]
pub struct Suppressions {
    /// The lists, in the order they were given.
    pub lists: Vec<SuppressionList>,
}

/// A line of a suppression file that is not a leak suppression, a
/// comment or blank.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseError {
    /// 1-based line number.
    pub line: usize,
    /// What is wrong with it.
    pub what: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.what)
    }
}

impl std::error::Error for ParseError {}

/// The patterns of a suppression file's text.
pub fn parse(text: &str) -> Result<Vec<String>, ParseError> {
    let mut patterns = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let err = |what: String| ParseError { line: i + 1, what };
        match line.split_once(':') {
            Some(("leak", pattern)) if !pattern.trim().is_empty() => {
                patterns.push(pattern.trim().to_string());
            }
            Some(("leak", _)) => {
                return Err(err(
                    "`leak:` without a pattern (it would hide every leak)".into()
                ));
            }
            Some((kind, _)) if !kind.is_empty() && kind.bytes().all(is_kind_byte) => {
                return Err(err(format!(
                    "`{kind}:` is not a leak suppression: only `leak:PATTERN` lines, \
                     `#` comments and blank lines are read"
                )));
            }
            _ => {
                return Err(err(format!(
                    "`{line}` is not a suppression: expected `leak:PATTERN`"
                )));
            }
        }
    }
    Ok(patterns)
}

/// A byte of a suppression kind's name (`leak`, `race`,
/// `interceptor_via_fun`, ...).
fn is_kind_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

impl Suppressions {
    /// The defaults, if `defaults`, and nothing else yet.
    pub fn new(defaults: bool) -> Suppressions {
        let mut s = Suppressions::default();
        if defaults {
            s.lists.push(SuppressionList {
                origin: Origin::Defaults,
                patterns: parse(DEFAULTS).expect("the default suppressions parse"),
            });
        }
        s
    }

    /// Adds the patterns of a file.
    pub fn add(&mut self, origin: Origin, patterns: Vec<String>) {
        self.lists.push(SuppressionList { origin, patterns });
    }

    /// The index (in [`Suppressions::lists`]) of the first list with a
    /// pattern matching the stack `frames` (leaf first), if any.
    pub fn matching(&self, frames: &[Frame]) -> Option<usize> {
        self.lists
            .iter()
            .position(|list| list.patterns.iter().any(|p| stack_matches(p, frames)))
    }
}

/// What separates the parts of a pattern that matches adjacent frames.
pub const CALLED_BY: &str = " <- ";

/// Whether `pattern` matches the stack `frames` (leaf first): any frame,
/// or for `A <- B <- ...` a run of adjacent frames, one per part.
pub fn stack_matches(pattern: &str, frames: &[Frame]) -> bool {
    let parts: Vec<&str> = pattern.split(CALLED_BY).map(str::trim).collect();
    frames.windows(parts.len()).any(|run| {
        run.iter()
            .zip(&parts)
            .all(|(f, part)| frame_matches(part, f))
    })
}

/// Whether `pattern` matches the frame's function name, its module's
/// path or file name, or its source file's path or file name.
pub fn frame_matches(pattern: &str, f: &Frame) -> bool {
    let base = |path: &str| path.rsplit('/').next().unwrap_or(path).to_string();
    let mut names: Vec<String> = vec![f.function.clone()];
    for path in [&f.module, &f.file].into_iter().flatten() {
        names.push(path.clone());
        names.push(base(path));
    }
    names.iter().any(|n| glob_matches(pattern, n))
}

/// LSan's pattern rules: `*` matches any run of characters (none too), a
/// leading `^` anchors the pattern at the start of `name`, a trailing `$`
/// at its end; without them the pattern may match anywhere. An empty name
/// matches nothing.
pub fn glob_matches(pattern: &str, name: &str) -> bool {
    if name.is_empty() {
        return false;
    }
    let (anchored_start, p) = match pattern.strip_prefix('^') {
        Some(rest) => (true, rest),
        None => (false, pattern),
    };
    let (anchored_end, p) = match p.strip_suffix('$') {
        Some(rest) => (true, rest),
        None => (false, p),
    };
    let mut parts: Vec<&str> = p.split('*').collect();
    // An unanchored side is a `*` there.
    if !anchored_start {
        parts.insert(0, "");
    }
    if !anchored_end {
        parts.push("");
    }
    wildcard(&parts, name)
}

/// Whether `name` is `parts` joined by runs of any characters: the first
/// part a prefix, the last a suffix, the others found in order between
/// them (leftmost first, which is enough: a later run can only match
/// where an earlier one could).
fn wildcard(parts: &[&str], name: &str) -> bool {
    let (first, rest) = match parts.split_first() {
        Some(x) => x,
        None => return name.is_empty(),
    };
    let Some(mut at) = name.strip_prefix(first).map(|r| name.len() - r.len()) else {
        return false;
    };
    let Some((last, middle)) = rest.split_last() else {
        // No `*` at all: the whole name.
        return at == name.len();
    };
    for part in middle {
        match name[at..].find(part) {
            Some(i) => at += i + part.len(),
            None => return false,
        }
    }
    name.len() - at >= last.len() && name.ends_with(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pattern_is_found_anywhere_unless_anchored() {
        assert!(glob_matches("leak_here", "leak_here"));
        assert!(glob_matches("here", "leak_here_too"));
        assert!(!glob_matches("there", "leak_here"));
        assert!(glob_matches("^leak", "leak_here"));
        assert!(!glob_matches("^here", "leak_here"));
        assert!(glob_matches("here$", "leak_here"));
        assert!(!glob_matches("leak$", "leak_here"));
        assert!(glob_matches("^leak_here$", "leak_here"));
        assert!(!glob_matches("^leak_her$", "leak_here"));
        // Nothing matches an empty name (LSan's rule).
        assert!(!glob_matches("x", ""));
    }

    #[test]
    fn a_star_is_any_run_of_characters() {
        assert!(glob_matches("lib*.so", "/usr/lib/libstdc++.so.6"));
        assert!(glob_matches("^lib*.so.6$", "libstdc++.so.6"));
        assert!(glob_matches("^lib*$", "lib"));
        assert!(glob_matches("a*b*c", "xxaxxbxxcxx"));
        assert!(!glob_matches("a*c*b", "abc"));
        assert!(glob_matches("*", "anything"));
        assert!(glob_matches("^*$", "anything"));
        // The end anchor after a star: any later occurrence counts, not
        // only the first.
        assert!(glob_matches("foo$", "foofoo"));
        assert!(glob_matches("^f*o$", "foofoo"));
        // Prefix and suffix may not overlap.
        assert!(!glob_matches("^ab*ba$", "aba"));
        assert!(glob_matches("^ab*ba$", "abba"));
    }

    #[test]
    fn frames_match_by_function_module_or_file() {
        let f = Frame {
            file: Some("/src/app/leaky.c".into()),
            function: "leak_here".into(),
            inlined: false,
            line: Some(5),
            module: Some("/usr/lib/x86_64-linux-gnu/libleaky.so.1".into()),
        };
        assert!(frame_matches("leak_here", &f));
        assert!(frame_matches("^libleaky.so", &f));
        assert!(frame_matches("^/usr/lib/", &f));
        assert!(frame_matches("^leaky.c$", &f));
        assert!(frame_matches("app/leaky.c", &f));
        assert!(!frame_matches("^main$", &f));
    }

    fn frame(function: &str, module: &str) -> Frame {
        Frame {
            file: None,
            function: function.into(),
            inlined: false,
            line: None,
            module: Some(module.into()),
        }
    }

    #[test]
    fn called_by_matches_adjacent_frames() {
        let ld = "/lib64/ld-linux-x86-64.so.2";
        let cxx = "/usr/lib/x86_64-linux-gnu/libstdc++.so.6";
        // libstdc++'s own initializer, run by the loader.
        let pool = [
            frame("libstdc++.so.6+0xa57ba", cxx),
            frame("call_init", ld),
            frame("_dl_init", ld),
        ];
        // Another library's initializer, allocating through libstdc++.
        let other = [
            frame("operator new(unsigned long)", cxx),
            frame("foo_init", "/usr/lib/libfoo.so.1"),
            frame("call_init", ld),
            frame("_dl_init", ld),
        ];
        let p = "^libstdc++.so <- ^ld-linux";
        assert!(stack_matches(p, &pool));
        assert!(!stack_matches(p, &other));
        assert!(stack_matches("libstdc++", &other));
        assert!(stack_matches("foo_init <- call_init <- _dl_init", &other));
        assert!(!stack_matches("foo_init <- _dl_init", &other));
        assert!(!stack_matches("a <- b", &[]));
    }

    #[test]
    fn the_defaults_hide_only_the_runtimes_own_blocks() {
        let s = Suppressions::new(true);
        let ld = "/lib64/ld-linux-x86-64.so.2";
        let cxx = "/usr/lib/x86_64-linux-gnu/libstdc++.so.6";
        let libc = "/usr/lib/x86_64-linux-gnu/libc.so.6";
        let pool = [
            frame("libstdc++.so.6+0xa57ba", cxx),
            frame("call_init", ld),
            frame("_dl_init", ld),
        ];
        let stdio = [
            frame("__GI__IO_file_doallocate", libc),
            frame("_IO_new_file_overflow", libc),
            frame("main", "/tmp/prog"),
        ];
        let program = [frame("leak_here", "/tmp/prog"), frame("main", "/tmp/prog")];
        let in_a_library_init = [
            frame("operator new(unsigned long)", cxx),
            frame("foo_init", "/usr/lib/libfoo.so.1"),
            frame("call_init", ld),
            frame("_dl_init", ld),
        ];
        assert_eq!(s.matching(&pool), Some(0));
        assert_eq!(s.matching(&stdio), Some(0));
        assert_eq!(s.matching(&program), None);
        assert_eq!(s.matching(&in_a_library_init), None);
    }

    #[test]
    fn files_hold_leak_lines_comments_and_blanks() {
        let text = "# a comment\n\n  leak:leak_here  \nleak:^libfoo.so$\n   # indented comment\n";
        assert_eq!(parse(text).unwrap(), vec!["leak_here", "^libfoo.so$"]);
        assert_eq!(parse("").unwrap(), Vec::<String>::new());
    }

    #[test]
    fn other_kinds_are_refused_with_their_line() {
        let e = parse("leak:a\n# c\nrace:b\n").unwrap_err();
        assert_eq!(e.line, 3);
        assert!(
            e.to_string()
                .starts_with("line 3: `race:` is not a leak suppression")
        );
        assert_eq!(parse("leak_here\n").unwrap_err().line, 1);
        assert_eq!(parse("\nleak:\n").unwrap_err().line, 2);
        assert_eq!(parse("interceptor_via_fun:x\n").unwrap_err().line, 1);
    }

    #[test]
    fn the_defaults_parse() {
        let s = Suppressions::new(true);
        assert_eq!(s.lists.len(), 1);
        assert!(!s.lists[0].patterns.is_empty());
        assert!(Suppressions::new(false).lists.is_empty());
    }
}
