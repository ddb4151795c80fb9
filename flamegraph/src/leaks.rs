//! What leaked: the stacks of the blocks still live at exit (the `leaked`
//! weight of a [`StackSet`]), with their blocks and requested bytes,
//! largest first, once the suppressions have left out what they match,
//! and what each list of suppressions hid. Figures only, no input or
//! output: `report --leaks` and `run --limit leaked` render them.

use crate::stacks::{MergedStack, StackSet, Weight};
use crate::suppressions::{Origin, Suppressions};

/// One stack of blocks live at exit.
#[derive(Clone, Debug)]
pub struct Leak {
    /// The stack (leaf first) and all its figures.
    pub stack: MergedStack,
    /// Blocks from it live at exit.
    pub blocks: u64,
    /// Their requested bytes.
    pub bytes: u64,
}

/// What one list of suppressions hid.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Suppressed {
    /// The list: the defaults, or a file.
    pub origin: Origin,
    /// Stacks left out.
    pub stacks: u64,
    /// Their blocks live at exit.
    pub blocks: u64,
    /// Their requested bytes.
    pub bytes: u64,
}

/// The leaks of a stack set.
#[derive(Clone, Debug)]
pub struct Leaks {
    /// The stacks not suppressed, most bytes first (ties: more blocks
    /// first, then by frames).
    pub leaks: Vec<Leak>,
    /// Per list of suppressions, in the order given (lists that hid
    /// nothing too), what it hid; a stack two lists match is counted
    /// under the first.
    pub suppressed: Vec<Suppressed>,
    /// Processes still running (or ended without exit handlers) at their
    /// last write: their blocks were live then, not necessarily at exit.
    pub still_running: usize,
    /// Whether the figures are estimates (sampled stacks).
    pub estimated: bool,
    /// Allocations whose stack could not be recorded: their blocks are in
    /// no figure here.
    pub lost: u64,
}

impl Leaks {
    /// The leaks of `set` once `suppressions` have left out theirs.
    pub fn new(set: &StackSet<'_>, suppressions: &Suppressions) -> Leaks {
        let mut suppressed: Vec<Suppressed> = suppressions
            .lists
            .iter()
            .map(|l| Suppressed {
                origin: l.origin.clone(),
                stacks: 0,
                blocks: 0,
                bytes: 0,
            })
            .collect();
        let mut leaks = Vec::new();
        for stack in set.merged(Weight::Leaked) {
            let (blocks, bytes) = (stack.values.live_allocs, stack.values.live_bytes);
            if blocks == 0 && bytes == 0 {
                continue;
            }
            match suppressions.matching(&stack.frames) {
                Some(i) => {
                    let s = &mut suppressed[i];
                    s.stacks += 1;
                    s.blocks += blocks;
                    s.bytes += bytes;
                }
                None => leaks.push(Leak {
                    stack,
                    blocks,
                    bytes,
                }),
            }
        }
        // `merged` sorted by bytes, then frames; blocks break ties first.
        leaks.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(b.blocks.cmp(&a.blocks)));
        Leaks {
            leaks,
            suppressed,
            still_running: set.running(),
            estimated: set.estimates(Weight::Leaked),
            lost: set.lost(),
        }
    }

    /// Blocks live at exit, suppressed ones left out.
    pub fn blocks(&self) -> u64 {
        self.leaks.iter().map(|l| l.blocks).sum()
    }

    /// Their requested bytes.
    pub fn bytes(&self) -> u64 {
        self.leaks.iter().map(|l| l.bytes).sum()
    }
}
