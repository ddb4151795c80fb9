//! Benchmark builds of the recorder (`--cfg allocmux_bench="no_tables"` or
//! `"stack_table_only"`, built by `scripts/stacks_overhead.py`): the
//! tables' work left out, all of it or all but finding the stack's site,
//! to measure what it costs (docs/performance.md). They replace
//! [`State::enter_call`] and [`State::enter_release`] of `table.rs`.

use super::*;

impl State {
    /// Does none of the tables' work (but finding the site in
    /// `stack_table_only` builds), keeping its inputs alive.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    pub(super) fn enter_call(
        &mut self,
        released: usize,
        new: usize,
        frames: &[u64],
        size: u64,
        starved: bool,
        repeat: Option<Repeat>,
        temporary: bool,
        now: u64,
        charge: impl Fn(u64) -> Charge,
    ) {
        #[cfg(allocmux_bench = "stack_table_only")]
        if new != 0 && !frames.is_empty() {
            core::hint::black_box(self.sites.site(frames));
        }
        core::hint::black_box((
            self, released, new, frames, size, starved, repeat, temporary, now, &charge,
        ));
    }

    /// Releases nothing.
    #[inline(always)]
    pub(super) fn enter_release(&mut self, ptr: usize, now: u64, charge: impl Fn(u64) -> Charge) {
        core::hint::black_box((self, ptr, now, &charge));
    }
}
