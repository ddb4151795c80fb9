//! The report's tables of top stacks: for each weight, the N stacks with
//! the largest value, their share of the total, and the stack as
//! `leaf ← caller ← caller`.

use std::io::{self, Write};

use crate::json::{StackJson, TopStackJson, TopStacksJson};
use crate::report::share;
use crate::stacks::{MergedStack, StackSet, Weight};

/// Frames shown per stack before `← …`.
const FRAMES_SHOWN: usize = 5;
/// Characters shown of one function name.
const NAME_WIDTH: usize = 48;

fn top(merged: &[MergedStack], w: Weight, n: usize) -> Vec<&MergedStack> {
    let mut v: Vec<&MergedStack> = merged.iter().filter(|s| w.of(&s.values) > 0).collect();
    // `merged` is already sorted by frames within equal values; a stable
    // sort keeps that order for ties.
    v.sort_by_key(|s| std::cmp::Reverse(w.of(&s.values)));
    v.truncate(n);
    v
}

/// Whether a frame is the standard library's (Rust's `alloc`, `core`,
/// `std`; C++'s `std`): the plumbing between a program's call and the
/// allocator, which a one-line stack skips to reach the program's code.
fn is_standard_library(function: &str) -> bool {
    let std_path = |p: &str| {
        ["alloc::", "core::", "std::"]
            .iter()
            .any(|s| p.starts_with(s))
    };
    let Some(inner) = function.strip_prefix('<') else {
        return std_path(function);
    };
    // `<Type as Trait>::f`: the standard library's when the trait is, and
    // the type is too or is a generic parameter (`<T as SpecFromElem>`).
    match inner.split_once(" as ") {
        Some((ty, tr)) => std_path(tr) && (std_path(ty) || !ty.contains("::")),
        // `<str>::to_lowercase`, `<[T]>::to_vec`: inherent methods of
        // primitive types, which only the standard library defines.
        None => std_path(inner) || is_primitive(inner),
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

/// `leaf ← caller ← …`, names shortened, inlined frames marked. A leading
/// run of standard-library frames is shown as a count, so the line starts
/// at the program's own code.
pub fn stack_line(s: &MergedStack) -> String {
    let skipped = s
        .frames
        .iter()
        .take_while(|f| is_standard_library(&f.function))
        .count();
    let skipped = if skipped == s.frames.len() {
        0
    } else {
        skipped
    };
    let mut parts: Vec<String> = s
        .frames
        .iter()
        .skip(skipped)
        .take(FRAMES_SHOWN)
        .map(|f| {
            let name = if f.inlined {
                format!("{} (inlined)", f.function)
            } else {
                f.function.clone()
            };
            if name.chars().count() > NAME_WIDTH {
                name.chars()
                    .take(NAME_WIDTH - 1)
                    .chain(['…'])
                    .collect::<String>()
            } else {
                name
            }
        })
        .collect();
    let shown = skipped + parts.len();
    if s.frames.len() > shown {
        parts.push(format!("… ({} more)", s.frames.len() - shown));
    }
    if skipped > 0 {
        parts.insert(0, format!("[{skipped} std frames]"));
    }
    parts.join(" ← ")
}

/// Writes one table per weight of the `n` largest stacks.
pub fn write_human(set: &StackSet<'_>, n: usize, w: &mut dyn Write) -> io::Result<()> {
    let merged = set.merged(Weight::Bytes);
    let total = set.total();
    let mode = set.mode_description();
    writeln!(
        w,
        "\n  call stacks: {} distinct, {}{}",
        merged.len(),
        if mode.is_empty() { "recorded" } else { &mode },
        match set.lost() {
            0 => String::new(),
            l => format!(", {l} allocations without a stack"),
        }
    )?;
    if let Some(warning) = degraded_warning(set) {
        writeln!(w, "  warning: {warning}")?;
    }
    for weight in Weight::ALL {
        let rows = top(&merged, weight, n);
        let t = weight.of(&total);
        writeln!(
            w,
            "\n  top {} stack{} by {} (total {})",
            rows.len(),
            if rows.len() == 1 { "" } else { "s" },
            set.describe(weight),
            set.show(weight, t)
        )?;
        if rows.is_empty() {
            writeln!(w, "    (none)")?;
            continue;
        }
        for s in rows {
            let v = weight.of(&s.values);
            writeln!(
                w,
                "  {:>22} {:>6.1}%  {}",
                set.show(weight, v),
                100.0 * share(v, t),
                stack_line(s)
            )?;
        }
    }
    Ok(())
}

/// The warning for stacks recorded short of memory, if they were: the
/// recorder dropped stacks, blocks or lines it had no memory for, so the
/// figures are incomplete.
pub fn degraded_warning(set: &StackSet<'_>) -> Option<String> {
    match set.degraded() {
        (0, _) => None,
        (dropped, procs) => Some(format!(
            "the recorder ran short of memory in {procs} process{} and dropped {dropped} \
             stacks, blocks or lines: the stack figures are incomplete",
            if procs == 1 { "" } else { "es" }
        )),
    }
}

/// `top_stacks`: per weight name, the `n` largest stacks with value,
/// share, frames (leaf first) and every weight's value.
pub fn to_json(set: &StackSet<'_>, n: usize) -> TopStacksJson {
    let merged = set.merged(Weight::Bytes);
    let total = set.total();
    Weight::ALL
        .iter()
        .map(|&weight| {
            let t = weight.of(&total);
            let rows = top(&merged, weight, n)
                .into_iter()
                .map(|s| {
                    let v = weight.of(&s.values);
                    TopStackJson {
                        value: v,
                        share: share(v, t),
                        stack: StackJson::from(s),
                    }
                })
                .collect();
            (weight.name(), rows)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

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
        ] {
            assert!(is_standard_library(f), "{f}");
        }
        for f in [
            "allocmux_workloads::edit_distance::levenshtein_naive",
            "<app::Row as core::clone::Clone>::clone",
            "main",
            "allocate_block",
            "<app::Strings>::push",
        ] {
            assert!(!is_standard_library(f), "{f}");
        }
    }
}
