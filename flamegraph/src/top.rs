//! The report's tables of top stacks: for each weight, the N stacks with
//! the largest value, their share of the total, and the stack as
//! `leaf ← caller ← caller`.

use std::io::{self, Write};

use serde_json::{Value, json};

use crate::export::{frame_json, values_json};
use crate::stacks::{MergedStack, StackSet, Weight};

/// Frames shown per stack before `← …`.
const FRAMES_SHOWN: usize = 5;
/// Characters shown of one function name.
const NAME_WIDTH: usize = 48;

fn share(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

fn top(merged: &[MergedStack], w: Weight, n: usize) -> Vec<&MergedStack> {
    let mut v: Vec<&MergedStack> = merged.iter().filter(|s| w.of(&s.values) > 0).collect();
    // `merged` is already sorted by frames within equal values; a stable
    // sort keeps that order for ties.
    v.sort_by_key(|s| std::cmp::Reverse(w.of(&s.values)));
    v.truncate(n);
    v
}

/// `leaf ← caller ← …`, names shortened, inlined frames marked.
pub fn stack_line(s: &MergedStack) -> String {
    let mut parts: Vec<String> = s
        .frames
        .iter()
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
    if s.frames.len() > FRAMES_SHOWN {
        parts.push(format!("… ({} more)", s.frames.len() - FRAMES_SHOWN));
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

/// `top_stacks`: per weight name, the `n` largest stacks with value,
/// share, frames (leaf first) and every weight's value.
pub fn to_json(set: &StackSet<'_>, n: usize) -> Value {
    let merged = set.merged(Weight::Bytes);
    let total = set.total();
    Value::Object(
        Weight::ALL
            .iter()
            .map(|&weight| {
                let t = weight.of(&total);
                let rows: Vec<Value> = top(&merged, weight, n)
                    .into_iter()
                    .map(|s| {
                        let v = weight.of(&s.values);
                        json!({
                            "value": v,
                            "share": share(v, t),
                            "frames": s.frames.iter().map(frame_json).collect::<Vec<_>>(),
                            "values": values_json(s),
                        })
                    })
                    .collect();
                (weight.name().to_string(), Value::Array(rows))
            })
            .collect(),
    )
}
