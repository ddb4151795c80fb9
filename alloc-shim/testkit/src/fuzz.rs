//! Random edits of real profiles, for fuzzing what reads them: the
//! profile reader (`profiler/tests/fuzz_profile.rs`) and the CLI's report
//! (`flamegraph/tests/fuzz_report.rs`).

use proptest::prelude::*;

/// Real profiles (`corpus/`, kept in this crate): the shim under python3 (sampled stacks, a timeline),
/// bash with forks and execs (mimalloc, four processes), an exact-stacks
/// pipeline, a Rust program's `Profiler`.
pub const CORPUS: &[(&str, &str)] = &[
    (
        "python3-sample",
        include_str!("../corpus/python3-sample.prof"),
    ),
    (
        "bash-fork-exec",
        include_str!("../corpus/bash-fork-exec.prof"),
    ),
    ("sort-exact", include_str!("../corpus/sort-exact.prof")),
    (
        "rust-profiler-sample",
        include_str!("../corpus/rust-profiler-sample.prof"),
    ),
];

/// The number of random cases: `ALLOCMUX_FUZZ_CASES`, else `default`.
pub fn cases(default: u32) -> u32 {
    std::env::var("ALLOCMUX_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// One change to a profile's text.
#[derive(Clone, Debug)]
pub enum Edit {
    /// Sets the byte at this fraction of the text.
    Byte(f64, u8),
    /// Cuts the text at this fraction.
    Truncate(f64),
    DeleteLine(f64),
    DuplicateLine(f64),
    SwapLines(f64, f64),
    /// Inserts a made-up line.
    InsertLine(f64, String),
    /// Replaces the n-th number-like word with this one.
    Number(f64, &'static str),
}

const NUMBERS: &[&str] = &[
    "0",
    "-1",
    "1",
    "18446744073709551615",
    "18446744073709551616",
    "9223372036854775808",
    "4294967296",
    "ffffffffffffffff",
    "1e9",
    "",
    "nan",
    "0x10",
    "+5",
];

/// The keys of made-up lines: every key of the format (from its one
/// list), and one it does not have.
fn keys() -> Vec<&'static str> {
    let mut keys = allocmux_format::profile::KEYS.to_vec();
    keys.push("unknown_key");
    keys
}

/// A random [`Edit`].
pub fn edit() -> impl Strategy<Value = Edit> {
    let frac = 0.0..1.0f64;
    let line = (
        prop::sample::select(keys()),
        prop::collection::vec(prop::sample::select(NUMBERS), 0..12),
    )
        .prop_map(|(k, words)| {
            let mut l = k.to_string();
            for w in words {
                l.push(' ');
                l.push_str(w);
            }
            l
        });
    prop_oneof![
        (frac.clone(), any::<u8>()).prop_map(|(f, b)| Edit::Byte(f, b)),
        frac.clone().prop_map(Edit::Truncate),
        frac.clone().prop_map(Edit::DeleteLine),
        frac.clone().prop_map(Edit::DuplicateLine),
        (frac.clone(), frac.clone()).prop_map(|(a, b)| Edit::SwapLines(a, b)),
        (frac.clone(), line).prop_map(|(f, l)| Edit::InsertLine(f, l)),
        (frac, prop::sample::select(NUMBERS)).prop_map(|(f, n)| Edit::Number(f, n)),
    ]
}

fn at(f: f64, len: usize) -> usize {
    ((f * len as f64) as usize).min(len.saturating_sub(1))
}

/// `text` with `edits` applied in order (each one that does not fit the
/// text as it then is, such as deleting a line of an empty text, does nothing).
pub fn apply(text: &str, edits: &[Edit]) -> String {
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    for e in edits {
        let n = lines.len();
        match e {
            Edit::Byte(f, b) => {
                let mut bytes = lines.join("\n").into_bytes();
                if !bytes.is_empty() {
                    let i = at(*f, bytes.len());
                    bytes[i] = *b;
                }
                let joined = String::from_utf8_lossy(&bytes).into_owned();
                lines = joined.lines().map(str::to_string).collect();
            }
            Edit::Truncate(f) => {
                let joined = lines.join("\n");
                let mut cut = at(*f, joined.len() + 1);
                while !joined.is_char_boundary(cut) {
                    cut -= 1;
                }
                lines = joined[..cut].lines().map(str::to_string).collect();
            }
            Edit::DeleteLine(f) if n > 0 => {
                lines.remove(at(*f, n));
            }
            Edit::DuplicateLine(f) if n > 0 => {
                let i = at(*f, n);
                lines.insert(i, lines[i].clone());
            }
            Edit::SwapLines(a, b) if n > 0 => lines.swap(at(*a, n), at(*b, n)),
            Edit::InsertLine(f, l) => lines.insert(at(*f, n + 1), l.clone()),
            Edit::Number(f, num) => {
                let words: Vec<(usize, usize)> = lines
                    .iter()
                    .enumerate()
                    .flat_map(|(i, l)| {
                        l.split(' ')
                            .enumerate()
                            .filter(|(_, w)| {
                                w.bytes().all(|c| c.is_ascii_hexdigit()) && !w.is_empty()
                            })
                            .map(move |(j, _)| (i, j))
                    })
                    .collect();
                if !words.is_empty() {
                    let (i, j) = words[at(*f, words.len())];
                    let mut parts: Vec<&str> = lines[i].split(' ').collect();
                    parts[j] = num;
                    lines[i] = parts.join(" ");
                }
            }
            _ => {}
        }
    }
    let mut out = lines.join("\n");
    out.push('\n');
    out
}
