//! The report's tables of top stacks: for each weight, the N stacks with
//! the largest value, their share of the total, and the stack on one line
//! ([`crate::stack_line`]).

use std::io::{self, Write};

use crate::json::{StackJson, TopStackJson, TopStacksJson};
use crate::stack_line::stack_line;
use crate::stacks::{MergedStack, StackSet, Weight};
use crate::units::share;

fn top(merged: &[MergedStack], w: Weight, n: usize) -> Vec<&MergedStack> {
    let mut v: Vec<&MergedStack> = merged.iter().filter(|s| w.of(&s.values) > 0).collect();
    // `merged` is already sorted by frames within equal values; a stable
    // sort keeps that order for ties.
    v.sort_by_key(|s| std::cmp::Reverse(w.of(&s.values)));
    v.truncate(n);
    v
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
    // Temporaries are told with exact stacks only: not listed otherwise.
    for weight in Weight::ALL.into_iter().filter(|&w| set.measures(w)) {
        let rows = top(&merged, weight, n);
        let t = weight.of(&total);
        writeln!(
            w,
            "\n  top {} stack{} by {} (total {})",
            rows.len(),
            if rows.len() == 1 { "" } else { "s" },
            set.describe(weight),
            set.show_total(weight)
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
        .filter(|&&w| set.measures(w))
        .map(|&weight| {
            let t = weight.of(&total);
            let rows = top(&merged, weight, n)
                .into_iter()
                .map(|s| {
                    let v = weight.of(&s.values);
                    TopStackJson {
                        value: v,
                        share: share(v, t),
                        stack: StackJson::new(s, set),
                    }
                })
                .collect();
            (weight.name(), rows)
        })
        .collect()
}
