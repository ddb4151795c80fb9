//! Call stacks of allocations: which calls get a stack, and what is kept
//! per distinct stack.
//!
//! The decision is a per-thread countdown over requested bytes (jemalloc's
//! `lg_prof_sample` scheme): each allocation subtracts its size, and the one
//! that takes the countdown below zero is sampled, after which a new gap is
//! drawn from an exponential distribution with the mean sample interval. The
//! sampled points are then a Poisson process over bytes, so an allocation of
//! `n` bytes is sampled with probability `p = 1 - exp(-n / mean)`,
//! independently of every other, and counting it with weight `1 / p` makes
//! every per-stack sum (calls, bytes, time, live bytes) an unbiased
//! estimate. In `exact` mode every allocation is taken, with weight 1.
//!
//! Unsampled allocations pay one subtraction on the thread's countdown.
//! Unsampled frees pay one load from a small counting filter of the
//! addresses of tracked blocks; only frees that hit it (tracked blocks, and
//! rare false positives) take the lock and look the block up. Where the
//! shim's hooks learn the size of every block they free anyway (glibc,
//! mimalloc), its sample mode makes each sampled block at least
//! [`SAMPLED_BLOCK_BYTES`] long instead, so that frees of smaller blocks,
//! nearly all of them, pay nothing; where they do not (jemalloc), it also
//! aligns them to that size, so that frees pay one test of the address
//! (see [`enter_sampled`]).
//!
//! At the sampled level ([`enter_sampled_level`]) nothing else is recorded per call:
//! the countdown alone decides, every sampled block is aligned to
//! [`SAMPLED_BLOCK_BYTES`] under every backend, and a `free` tests its
//! address's low bits before anything else.
//!
//! Everything else, the unwinder, the stack table and the block map, sits
//! behind one spin lock, taken only by sampled calls, frees of tracked
//! blocks and the profile writer.
//!
//! The recorder's own memory fails soft: its tables grow in small fallible
//! steps (see `tables`), a stack or block there is no memory for is
//! dropped and counted (`stacks_degraded` in the profile), and once the
//! shim's heap reports that it is short ([`mark_short_of_memory`]) no new
//! stack is taken at all.

use core::cell::Cell;
use core::fmt::{self, Write};
use core::ops::Range;
use core::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering::Relaxed};

use super::block_map::{BLOCK_SHARDS, Block, BlockMap, Inserted};
use super::clock::Tsc;
use super::last_stack::{self, Repeat};
use super::lock::{AtFork, SpinGuard, SpinLock};
use super::tables::{Chunks, Sharded, StackHash, max_shard_bytes};
#[cfg(target_arch = "x86_64")]
use super::thread::TlsBlock;
use super::thread::{Body, OwnState, Scope, ThreadState, enter};
use super::unwind::{self, StackUnwinder};
use allocmux_format::lifetimes::{self, DECADES};
use allocmux_format::profile::{self, ModuleRef, StackMode};
use allocmux_format::{Func, Lifetimes, SiteCounts, Totals};

#[cfg(any(allocmux_bench = "no_tables", allocmux_bench = "stack_table_only"))]
mod bench_builds;
mod policy;
mod record;
mod sampled;
mod snapshot;
mod table;
#[cfg(test)]
mod tests;

pub use policy::*;
pub use record::*;
pub use sampled::*;
pub use snapshot::*;
pub use table::*;

/// What a hooked call does to blocks, for stack recording. Implemented by
/// the shim's bodies (and the Rust wrapper's) next to their [`Body`].
pub trait StackBody: Body + Copy {
    /// The bytes requested, for calls that hand out a block.
    fn request(&self) -> Option<usize>;
    /// Whether calls of this function can release a block (`free`,
    /// `realloc`): only theirs look their block up in the filter of
    /// tracked blocks.
    const RELEASES: bool = false;
    /// The block this call releases if it succeeds (`free`, `realloc`), or 0.
    fn released(&self) -> usize {
        0
    }
    /// Whether the call, with this result, released [`released`](Self::released).
    fn did_release(&self, _out: &Self::Out) -> bool {
        true
    }
    /// The block the call handed out, given its result, or 0.
    fn handed_out(&self, out: &Self::Out) -> usize;
    /// Whether the body reports the size of the block it releases to
    /// [`Scope::release`] (a `free` on an allocator without byte counters
    /// of its own): [`enter_sampled`] then tells a sampled block's release
    /// by that size, with no look at the filter.
    const RELEASES_BY_SIZE: bool = false;
    /// Whether [`enter_sampled`] makes this call's sampled blocks
    /// recognisable at their release: at least [`SAMPLED_BLOCK_BYTES`]
    /// long, where the backend's `free` reports block sizes
    /// ([`RELEASES_BY_SIZE`](Self::RELEASES_BY_SIZE)), and also aligned to
    /// that many bytes where it does not
    /// ([`ALIGNS_SAMPLED`](Self::ALIGNS_SAMPLED)); for a call that only
    /// releases (`free`), whether the blocks it releases were so made. The
    /// shim's bodies do; the Rust wrapper's, whose frees are told block
    /// sizes, do not need to. Such calls are not timed for their stacks:
    /// in sample mode they are charged the process's mean time per timed
    /// call, resolved when the profile is written (`promoted_call_ticks`).
    const PROMOTES: bool = false;
    /// Whether sampled blocks are aligned to [`SAMPLED_BLOCK_BYTES`]
    /// ([`run_promoted`](Self::run_promoted)) and a release tells them by
    /// their address, looking in the filter only for blocks so aligned:
    /// for a backend whose `free` learns no block sizes (jemalloc, which
    /// counts bytes itself).
    const ALIGNS_SAMPLED: bool = false;
    /// The same call asking the allocator for `to(size)` bytes instead of
    /// its request's `size` (a sampled allocation under
    /// [`enter_sampled`]); the scope is still told the original request.
    /// Calls that hand out nothing keep the default, themselves.
    fn promoted(self, _to: impl Fn(usize) -> usize) -> Self {
        self
    }
    /// Runs a [`promoted`](Self::promoted) call: as [`Body::run`], but
    /// where [`ALIGNS_SAMPLED`](Self::ALIGNS_SAMPLED), the block is
    /// aligned to [`SAMPLED_BLOCK_BYTES`].
    ///
    /// # Safety
    /// As for [`Body::run`].
    #[inline(always)]
    unsafe fn run_promoted<S: Scope>(self, s: &S) -> Self::Out {
        // SAFETY: forwarded from the caller.
        unsafe { self.run(s) }
    }
    /// Runs a [`promoted`](Self::promoted) call with the block aligned to
    /// [`SAMPLED_BLOCK_BYTES`], whatever the backend (the sampled level,
    /// [`enter_sampled_level`], where every release tells sampled blocks by their
    /// address). Calls that hand out nothing keep the default.
    ///
    /// # Safety
    /// As for [`Body::run`].
    #[inline(always)]
    unsafe fn run_aligned<S: Scope>(self, s: &S) -> Self::Out {
        // SAFETY: forwarded from the caller.
        unsafe { self.run(s) }
    }
}

/// In sample mode under [`enter_sampled`], the least size a sampled block
/// is given (a larger request keeps its own), and, under
/// [`StackBody::ALIGNS_SAMPLED`], its alignment. One page: in a process whose
/// live heap is `L` bytes, sampled blocks (about `L / mean` of them live)
/// hold at most `L * 4096 / mean` bytes more than the program asked for,
/// 0.8% at the default 512 KiB between samples.
pub const SAMPLED_BLOCK_BYTES: usize = 4096;

/// A thread's stack-sampling state; all-zero is a valid fresh state.
#[derive(Debug)]
#[repr(C)]
pub struct StackThread {
    /// Bytes left before the next sampled allocation; a call subtracts
    /// its size and is sampled when the result is negative. Under
    /// [`enter_sampled`], where the thread's byte window finds the sampled
    /// requests instead (`ThreadState::sample_after`), the last gap drawn.
    countdown: Cell<i64>,
    rng: Cell<u64>,
    /// This thread's stack (lowest address, one past the highest), found
    /// at its first sample; `stack_hi == 0` until then.
    stack_lo: Cell<u64>,
    stack_hi: Cell<u64>,
    /// Inside the stack recorder: calls made from here (by the unwinder,
    /// the tables, the allocator) are recorded without stacks.
    busy: Cell<bool>,
    /// Whether the countdown was last drawn in exact mode (every
    /// allocation): after a switch to sampling ([`configure`]'s
    /// `exact_first`) it is drawn again before it decides.
    drawn_exact: Cell<bool>,
    /// The block this thread allocated last, if no block has been released
    /// since (0: none): a `free` of it is a temporary allocation.
    last_block: Cell<usize>,
}

// SAFETY: only the owning thread touches its state.
unsafe impl Sync for StackThread {}

impl Default for StackThread {
    fn default() -> Self {
        Self::new()
    }
}

impl StackThread {
    /// A fresh state.
    pub const fn new() -> Self {
        StackThread {
            countdown: Cell::new(0),
            rng: Cell::new(0),
            stack_lo: Cell::new(0),
            stack_hi: Cell::new(0),
            busy: Cell::new(false),
            drawn_exact: Cell::new(false),
            last_block: Cell::new(0),
        }
    }

    /// Notes a call of this thread that released `released` and handed
    /// out `new` (either 0: none), and says whether the release ends a
    /// temporary allocation: `freed` (a `free`, not a `realloc`, whose
    /// data lives on) of the block the thread allocated last, with no
    /// allocation or release of the thread's in between (heaptrack's
    /// definition, per thread). Owner only.
    #[inline(always)]
    fn note_blocks(&self, released: usize, new: usize, freed: bool) -> bool {
        let temporary = freed && released != 0 && released == self.last_block.get();
        if released != 0 || new != 0 {
            self.last_block.set(new);
        }
        temporary
    }

    /// Counts `size` requested bytes; true if this allocation is sampled.
    #[inline(always)]
    fn take(&self, size: usize) -> bool {
        let c = self.countdown.get().wrapping_sub(size as i64);
        self.countdown.set(c);
        c < 0
    }

    /// Takes no sample until [`resume`](Self::resume): returns the byte
    /// countdown, which is kept out of reach meanwhile (see
    /// [`ThreadState::pause`](super::ThreadState::pause)). Owner only.
    pub fn pause(&self) -> i64 {
        self.countdown.replace(i64::MAX)
    }

    /// Samples again, from the countdown [`pause`](Self::pause) returned.
    pub fn resume(&self, countdown: i64) {
        self.countdown.set(countdown);
    }

    /// Whether the countdown has been drawn for this thread, at the mean
    /// in force.
    fn armed(&self) -> bool {
        self.rng.get() != 0 && !(self.drawn_exact.get() && MEAN_BYTES.load(Relaxed) != 0)
    }

    /// Draws the gap to the next sampled byte (`mean` 0: exact mode, where
    /// every allocation is sampled: inline, as it follows each one).
    #[inline(always)]
    fn rearm(&self, mean: u64) {
        if mean == 0 && self.rng.get() != 0 {
            self.countdown.set(-1);
        } else {
            self.draw(mean);
        }
    }

    /// [`rearm`](Self::rearm) when a gap is drawn (sample mode), or the
    /// thread's random state is seeded (its first allocation).
    #[inline(never)]
    fn draw(&self, mean: u64) {
        let mut x = self.rng.get();
        if x == 0 {
            x = Tsc::now() ^ (self as *const StackThread as u64).rotate_left(29) | 1;
        }
        self.drawn_exact.set(mean == 0);
        if mean == 0 {
            self.rng.set(x);
            self.countdown.set(-1); // exact: every allocation
            return;
        }
        let u = super::random::next_uniform(&mut x);
        self.rng.set(x);
        let gap = -super::random::ln(u) * mean as f64;
        self.countdown.set(gap.min(i64::MAX as f64 / 2.0) as i64);
    }

    /// Runs `f` as the recorder's own work: allocations it makes get no
    /// stack and take no stack lock, so `f` may hold that lock (as
    /// [`Snapshot::take`] does) while it allocates through a global
    /// allocator that records stacks, which is what the Rust wrapper's
    /// profile writer needs (the shim's own heap bypasses its hooks).
    pub fn as_recorder<R>(&self, f: impl FnOnce() -> R) -> R {
        struct Restore<'a>(&'a Cell<bool>, bool);
        impl Drop for Restore<'_> {
            fn drop(&mut self) {
                self.0.set(self.1);
            }
        }
        let _restore = Restore(&self.busy, self.busy.replace(true));
        f()
    }

    fn stack(&self) -> Option<Range<u64>> {
        if self.stack_hi.get() == 0 {
            let r = unwind::thread_stack()?;
            self.stack_lo.set(r.start);
            self.stack_hi.set(r.end);
        }
        Some(self.stack_lo.get()..self.stack_hi.get())
    }
}
