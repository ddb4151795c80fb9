//! What to change, from the data: the one stack where a change would
//! matter most, with its figure. First the stack with the most temporary
//! allocations (blocks made and freed at once, which a reused buffer
//! removes), then the largest leak once the default suppressions have
//! left out the runtimes' own start-up blocks (as `report --leaks` does),
//! then the stack with the most time in the allocator; each only when it
//! is a real share of its total.

use crate::leaks::Leaks;
use crate::stack_line::stack_line;
use crate::stacks::{MergedStack, StackSet, Weight};
use crate::suppressions::Suppressions;
use crate::units::{Bytes, Count, share};

/// The share of its total a stack must reach to be named.
const MIN_SHARE: f64 = 0.10;
/// Fewer temporary allocations than this are not worth a change.
const MIN_TEMPORARY: u64 = 1_000;
/// A leak smaller than this is start-up state more often than a bug.
const MIN_LEAK_BYTES: u64 = 1 << 20;

/// One piece of advice: what it is about and the sentence that says it.
#[derive(Clone, Debug, PartialEq)]
pub struct Advice {
    /// The weight it reads.
    pub weight: Weight,
    /// The stack's figure of that weight.
    pub value: u64,
    /// Its share of the weight's total.
    pub share: f64,
    /// The stack, on one line (leaf first).
    pub stack: String,
    /// The advice in words, naming the stack and the figure.
    pub text: String,
}

/// The advice the stacks give, if any stack stands out.
pub fn advise(set: &StackSet<'_>) -> Option<Advice> {
    let total = set.total();
    let top = |w: Weight| -> Option<(MergedStack, u64, f64)> {
        let s = set.merged(w).into_iter().next()?;
        let v = w.of(&s.values);
        let t = w.of(&total);
        (v > 0).then(|| (s, v, share(v, t)))
    };
    if set.measures(Weight::Temporary)
        && let Some((s, v, _)) = top(Weight::Temporary)
    {
        let of_all = share(v, total.allocs);
        if v >= MIN_TEMPORARY && of_all >= MIN_SHARE {
            let line = stack_line(&s);
            return Some(Advice {
                weight: Weight::Temporary,
                value: v,
                share: of_all,
                text: format!(
                    "{} allocations ({:.0}% of all) are temporary ones from {line}: each block \
                     is freed before its thread allocates again, so one buffer made once and \
                     reused there would remove them",
                    Count(v),
                    100.0 * of_all
                ),
                stack: line,
            });
        }
    }
    if set.running() == 0 {
        let leaks = Leaks::new(set, &Suppressions::new(true));
        if let Some(l) = leaks.leaks.first() {
            let sh = share(l.bytes, total.live_bytes);
            if l.bytes >= MIN_LEAK_BYTES && sh >= MIN_SHARE {
                let line = stack_line(&l.stack);
                return Some(Advice {
                    weight: Weight::Leaked,
                    value: l.bytes,
                    share: sh,
                    text: format!(
                        "the largest leak is {} in {} blocks still live at exit, from {line}",
                        Bytes(l.bytes),
                        Count(l.blocks)
                    ),
                    stack: line,
                });
            }
        }
    }
    let (s, v, sh) = top(Weight::Time)?;
    (sh >= MIN_SHARE).then(|| {
        let line = stack_line(&s);
        Advice {
            weight: Weight::Time,
            value: v,
            share: sh,
            text: format!(
                "the most time in the allocator, {} ({:.0}% of it), goes to {line}",
                set.show(Weight::Time, v),
                100.0 * sh
            ),
            stack: line,
        }
    })
}
