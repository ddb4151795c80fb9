//! `run --limit`'s verdict as text, for stderr: one line per exceeded
//! limit with the stacks behind it, or one line saying every figure is
//! within its limit.

use std::io::{self, Write};

use crate::leaks::Leaks;
use crate::limits::{Judged, LimitKey};
use crate::stack_line::stack_line;
use crate::stacks::StackSet;
use crate::units::{Bytes, Count};

/// Stacks shown behind an exceeded limit.
const STACKS_SHOWN: usize = 3;

/// A value of `key` in words, and the limit's: sizes in binary units,
/// with the exact bytes when the units would show two values alike.
fn values(key: LimitKey, value: u64, max: u64) -> (String, String) {
    if !key.is_size() {
        return (Count(value).to_string(), Count(max).to_string());
    }
    let (v, m) = (Bytes(value).to_string(), Bytes(max).to_string());
    if v == m && value != max {
        (
            format!("{v} ({} bytes)", Count(value)),
            format!("{m} ({} bytes)", Count(max)),
        )
    } else {
        (v, m)
    }
}

/// Writes the verdict: for each exceeded limit, `allocmux: limit
/// exceeded: NAME VALUE > LIMIT` and the largest stacks behind it (from
/// `set`, when stacks were recorded, and for `leaked` from `leaks`); when
/// none is, `allocmux: within limits: NAME VALUE ≤ LIMIT, ...`.
pub fn write_human(
    judged: &[Judged],
    set: Option<&StackSet<'_>>,
    leaks: Option<&Leaks>,
    w: &mut dyn Write,
) -> io::Result<()> {
    let exceeded: Vec<&Judged> = judged.iter().filter(|j| j.exceeded()).collect();
    if exceeded.is_empty() {
        let parts: Vec<String> = judged
            .iter()
            .map(|j| {
                let (v, m) = values(j.limit.key, j.value, j.limit.max);
                format!("{} {v} ≤ {m}", j.limit.key.name())
            })
            .collect();
        return writeln!(w, "allocmux: within limits: {}", parts.join(", "));
    }
    for j in exceeded {
        let key = j.limit.key;
        let (v, m) = values(key, j.value, j.limit.max);
        writeln!(w, "allocmux: limit exceeded: {} {v} > {m}", key.name())?;
        match (key, leaks, set) {
            (LimitKey::Leaked, Some(leaks), _) => {
                for leak in leaks.leaks.iter().take(STACKS_SHOWN) {
                    writeln!(
                        w,
                        "  {:>12} {:>14}  {}",
                        Bytes(leak.bytes).to_string(),
                        format!(
                            "{} block{}",
                            Count(leak.blocks),
                            if leak.blocks == 1 { "" } else { "s" }
                        ),
                        stack_line(&leak.stack)
                    )?;
                }
            }
            (_, _, Some(set)) => {
                let weight = key.weight();
                for s in set
                    .merged(weight)
                    .iter()
                    .filter(|s| weight.of(&s.values) > 0)
                    .take(STACKS_SHOWN)
                {
                    writeln!(
                        w,
                        "  {:>22}  {}",
                        set.show(weight, weight.of(&s.values)),
                        stack_line(s)
                    )?;
                }
            }
            (_, _, None) => writeln!(
                w,
                "  (record its stacks to see where: `allocmux run --stacks exact --limit ...`)"
            )?,
        }
    }
    Ok(())
}
