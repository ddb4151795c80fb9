//! `report --leaks` as text: the stacks of blocks live at exit, each with
//! its bytes and blocks on one line ([`crate::stack_line`]), and what the
//! suppressions left out.

use std::io::{self, Write};

use crate::leaks::Leaks;
use crate::stack_line::stack_line;
use crate::suppressions::Origin;
use crate::units::{Bytes, Count};

/// At most this many stacks are listed; `--json` has them all.
const SHOWN: usize = 50;

/// `N block(s)`.
fn blocks(n: u64) -> String {
    format!("{} block{}", Count(n), if n == 1 { "" } else { "s" })
}

/// Writes the leaks section.
pub fn write_human(l: &Leaks, w: &mut dyn Write) -> io::Result<()> {
    let about = if l.estimated { "≈" } else { "" };
    if l.leaks.is_empty() {
        writeln!(w, "\n  leaks: none (no block live at exit)")?;
    } else {
        writeln!(
            w,
            "\n  leaks: {about}{} ({about}{}) live at exit, from {} stack{}",
            blocks(l.blocks()),
            Bytes(l.bytes()),
            Count(l.leaks.len() as u64),
            if l.leaks.len() == 1 { "" } else { "s" }
        )?;
    }
    if l.still_running > 0 {
        writeln!(
            w,
            "  {} process{} still running at {} last write: {} blocks were live then, \
             not necessarily at exit",
            l.still_running,
            if l.still_running == 1 {
                " was"
            } else {
                "es were"
            },
            if l.still_running == 1 { "its" } else { "their" },
            if l.still_running == 1 { "its" } else { "their" },
        )?;
    }
    if l.lost > 0 {
        writeln!(
            w,
            "  {} allocation{} without a stack: {} blocks are in no figure here",
            Count(l.lost),
            if l.lost == 1 { "" } else { "s" },
            if l.lost == 1 { "its" } else { "their" }
        )?;
    }
    if l.estimated {
        writeln!(
            w,
            "  figures marked ≈ are estimates from sampled stacks (`--stacks exact` counts every block)"
        )?;
    }
    for leak in l.leaks.iter().take(SHOWN) {
        writeln!(
            w,
            "  {:>12} {:>16}  {}",
            format!("{about}{}", Bytes(leak.bytes)),
            format!("{about}{}", blocks(leak.blocks)),
            stack_line(&leak.stack)
        )?;
    }
    if l.leaks.len() > SHOWN {
        writeln!(
            w,
            "  ... and {} more stacks (see --json for all)",
            l.leaks.len() - SHOWN
        )?;
    }
    for s in &l.suppressed {
        if s.origin == Origin::Defaults && s.stacks == 0 {
            continue;
        }
        writeln!(
            w,
            "  {about}{} leaked block{} ({about}{}) in {} stack{} suppressed by {}",
            Count(s.blocks),
            if s.blocks == 1 { "" } else { "s" },
            Bytes(s.bytes),
            Count(s.stacks),
            if s.stacks == 1 { "" } else { "s" },
            s.origin
        )?;
    }
    Ok(())
}
