//! The stack table: every distinct stack ([`Sites`]) with its running
//! sums, and the recorder's shared state under one lock.

use super::*;

/// A growth step of the site table is one chunk of 2,048 sites (368 KiB),
/// of the frame store one of 65,536 return addresses (512 KiB).
pub(super) const SITE_CHUNK: usize = 2048;
pub(super) const FRAME_CHUNK: usize = 65_536;
/// A snapshot's stacks, 2,048 (352 KiB) a chunk.
pub(super) const COPY_CHUNK: usize = 2048;
/// Shards of the stack index (see [`Sharded`]): at most 14.7 million
/// distinct stacks.
pub(super) const INDEX_SHARDS: usize = 256;
/// The end of a chain of sites whose stacks have the same hash.
pub(super) const NO_SITE: u32 = u32::MAX;
/// No growth step of the recorder's tables may allocate more than this.
pub(super) const MAX_STEP_BYTES: usize = 5 << 20;
const _: () = assert!(
    max_shard_bytes::<usize, Block>() <= MAX_STEP_BYTES
        && max_shard_bytes::<u64, u32>() <= MAX_STEP_BYTES
        && SITE_CHUNK * size_of::<Site>() <= MAX_STEP_BYTES
        && FRAME_CHUNK * 8 <= MAX_STEP_BYTES
        && COPY_CHUNK * size_of::<Copied>() <= MAX_STEP_BYTES
        && BLOCK_SHARDS * size_of::<crate::tables::FastMap<usize, Block>>() <= MAX_STEP_BYTES
);

/// One distinct stack: where its return addresses are, and its running
/// sums (estimates, hence floats).
#[derive(Clone, Copy)]
pub(super) struct Site {
    pub(super) samples: u64,
    pub(super) allocs: f64,
    pub(super) bytes: f64,
    /// Allocator ticks charged as such ([`Charge::Ticks`]).
    pub(super) ticks: f64,
    /// Calls charged the process's mean time per timed call
    /// ([`Charge::Mean`]), weighted: their ticks are resolved when the
    /// profile is written, with the mean it carries.
    pub(super) mean_calls: f64,
    pub(super) live_allocs: f64,
    pub(super) live_bytes: f64,
    pub(super) peak_allocs: f64,
    pub(super) peak_bytes: f64,
    /// Blocks freed as temporary allocations (see [`SiteCounts::temporary`]).
    pub(super) temporary: f64,
    /// Blocks freed, by the decade of their lifetime (see
    /// [`Lifetimes`]), and the sum of those lifetimes in TSC ticks.
    pub(super) lifetimes: [f64; DECADES],
    pub(super) lifetime_ticks: f64,
    /// The operation number of this site's last change (see `Sites::touch`).
    pub(super) stamp: u64,
    /// Where its return addresses start in `Sites::frames`, and how many.
    pub(super) frames_at: u64,
    pub(super) depth: u32,
    /// The next older site whose stack has the same hash, or `NO_SITE`.
    pub(super) next: u32,
    /// The other half of its stack's fingerprint ([`StackHash::check`]).
    pub(super) check: u64,
}

impl Site {
    pub(super) fn new(frames_at: u64, depth: u32, next: u32, check: u64) -> Self {
        Site {
            samples: 0,
            allocs: 0.0,
            bytes: 0.0,
            ticks: 0.0,
            mean_calls: 0.0,
            live_allocs: 0.0,
            live_bytes: 0.0,
            peak_allocs: 0.0,
            peak_bytes: 0.0,
            temporary: 0.0,
            lifetimes: [0.0; DECADES],
            lifetime_ticks: 0.0,
            stamp: 0,
            frames_at,
            depth,
            next,
            check,
        }
    }
}

/// The stacks seen, the tracked blocks, and the peak bookkeeping.
///
/// Every table grows in small, fallible steps ([`Chunks`], [`Sharded`]), so
/// the recorder never asks for much memory at once and never aborts for
/// lack of it: what cannot be stored is dropped and counted in `degraded`
/// (a new stack also in `lost`). The largest single allocation, at any
/// size the tables can reach, is a block-map shard at its bound,
/// `max_shard_bytes::<usize, Block>()` = 4,325,392 bytes (4.1 MiB); then
/// a stack-index shard (2.1 MiB), a frame chunk, the block map's page-map
/// root or a page-map leaf (512 KiB), a site chunk (368 KiB), a copy chunk
/// (352 KiB) and the block map's 2,048 shard headers (64 KiB). The
/// `sites_never_allocate_more_than_a_shard_at_once` test holds them to it.
///
/// Each stack's return addresses are stored once, in the frame store; the
/// index maps a stack's hash to its newest site, and sites with the same
/// hash are chained.
pub(super) struct Sites {
    pub(super) index: Sharded<u64, u32, INDEX_SHARDS>,
    pub(super) frames: Chunks<u64, FRAME_CHUNK>,
    pub(super) sites: Chunks<Site, SITE_CHUNK>,
    pub(super) blocks: BlockMap,
    /// Estimated live bytes of all tracked blocks, and their highest value.
    pub(super) live: f64,
    pub(super) peak: f64,
    /// Operations so far, and the number of the one that set the peak.
    pub(super) ops: u64,
    pub(super) peak_op: u64,
    /// Allocations recorded without a stack.
    pub(super) lost: u64,
    /// What was dropped for lack of memory: stacks not stored (or not
    /// taken once the shim's heap was short), blocks not tracked, modules
    /// not kept, snapshots not refreshed.
    pub(super) degraded: u64,
    /// Mean bytes between samples (0: exact).
    pub(super) mean: u64,
    /// The variances of the estimated totals of allocations and bytes,
    /// summed over the samples: an allocation sampled with probability `p`
    /// adds `(1 - p) / p²` to a count's (`w (w - 1)`, with `w = 1/p`), `n²`
    /// times that to a byte total's.
    pub(super) var_allocs: f64,
    pub(super) var_bytes: f64,
    /// The site of the latest stack captured in each of the unwinder's
    /// last-stack slots (see [`StackUnwinder::repeat`]), `NO_SITE` if none:
    /// kept here so that a new table starts with none.
    pub(super) last_site: [u32; last_stack::SLOTS],
    /// The TSC ticks a µs lifetimes are bucketed with, and the decades'
    /// bounds in ticks; 0 until [`set_lifetime_clock`](Self::set_lifetime_clock):
    /// no lifetime is counted.
    pub(super) ticks_per_us: u64,
    pub(super) decade_bounds: [u64; DECADES - 1],
}

impl Default for Sites {
    fn default() -> Self {
        Sites::with_mean(0)
    }
}

impl Sites {
    /// Empty tables for recording with `mean` bytes between samples (0:
    /// exact).
    pub(super) const fn with_mean(mean: u64) -> Self {
        Sites {
            index: Sharded::new(),
            frames: Chunks::new(),
            sites: Chunks::new(),
            blocks: BlockMap::new(mean == 0),
            live: 0.0,
            peak: 0.0,
            ops: 0,
            peak_op: 0,
            lost: 0,
            degraded: 0,
            mean,
            var_allocs: 0.0,
            var_bytes: 0.0,
            last_site: [NO_SITE; last_stack::SLOTS],
            ticks_per_us: 0,
            decade_bounds: [0; DECADES - 1],
        }
    }

    /// Counts the lifetimes of the blocks freed from now on, bucketed in
    /// decades for a TSC of `ticks_per_us` ticks a µs (0: none counted).
    pub(super) fn set_lifetime_clock(&mut self, ticks_per_us: u64) {
        self.ticks_per_us = ticks_per_us;
        self.decade_bounds = lifetimes::decade_bounds_ticks(ticks_per_us);
    }

    /// The site of `frames` (at most `MAX_FRAMES`), added if it is new;
    /// `None` if it is new and there is no memory to store it.
    ///
    /// A stack is known by its 128-bit fingerprint ([`StackHash`]) and its
    /// depth, not by comparing its frames with the stored ones: the
    /// comparison read the stored frames, several cache lines a lookup
    /// that the program's own memory traffic had evicted since, and it was
    /// a third of exact mode's stack-table time (docs/performance.md). Two
    /// distinct stacks are merged only if both 64-bit halves collide.
    #[inline(always)] // into `alloc`, its one caller on the hot path
    pub(super) fn site(&mut self, frames: &[u64]) -> Option<u32> {
        let StackHash { hash, check } = StackHash::of(frames);
        let head = self.index.get(hash).copied();
        let mut i = head.unwrap_or(NO_SITE);
        while i != NO_SITE {
            let s = self.sites.get(i as usize);
            if s.check == check && s.depth as usize == frames.len() {
                debug_assert!(self.has_frames(i, frames), "a fingerprint collision");
                return Some(i);
            }
            i = s.next;
        }
        let new = self.sites.len();
        let room = if may_grow() {
            self.sites.try_reserve(1)
                && self.frames.try_reserve(frames.len())
                && (head.is_some() || self.index.make_room(hash))
        } else {
            self.sites.has_room(1)
                && self.frames.has_room(frames.len())
                && (head.is_some() || self.index.has_room(hash))
        };
        if !room || new >= NO_SITE as usize {
            return None;
        }
        let at = self.frames.len() as u64;
        self.frames.extend_from_slice(frames);
        let next = head.unwrap_or(NO_SITE);
        self.sites
            .push(Site::new(at, frames.len() as u32, next, check));
        match self.index.get_mut(hash) {
            Some(head) => *head = new as u32,
            None => {
                self.index.insert(hash, new as u32);
            }
        }
        Some(new as u32)
    }

    /// Whether site `i`'s stored frames are `frames` (a check for debug
    /// builds).
    pub(super) fn has_frames(&self, i: u32, frames: &[u64]) -> bool {
        let s = self.sites.get(i as usize);
        let (a, b) = self.frames.slices(s.frames_at as usize, s.depth as usize);
        a.len() + b.len() == frames.len() && *a == frames[..a.len()] && *b == frames[a.len()..]
    }

    /// Prepares site `i` for a change of its live figures, keeping the
    /// per-site value at the peak exact in O(1): a site untouched since the
    /// operation that set the peak still holds its peak value as its live
    /// value, so that value is saved before the first change after a peak.
    pub(super) fn touch(&mut self, i: u32) -> &mut Site {
        self.ops += 1;
        let peak_op = self.peak_op;
        let s = self.sites.get_mut(i as usize);
        if s.stamp <= peak_op {
            s.peak_allocs = s.live_allocs;
            s.peak_bytes = s.live_bytes;
        }
        s.stamp = self.ops;
        s
    }

    /// Enters the block at `addr` of `size` requested bytes, handed out
    /// at TSC `now` by a call from `frames`, which charges its stack
    /// `charge`.
    pub(super) fn alloc(
        &mut self,
        addr: usize,
        size: u64,
        frames: &[u64],
        charge: impl Into<Charge>,
        repeat: Option<Repeat>,
        now: u64,
    ) {
        // (Slots are below `SLOTS`, a power of two: the mask only spares a
        // bounds check.)
        let slot = repeat.map(|r| r.slot % last_stack::SLOTS);
        let site = match (repeat, slot.map(|i| self.last_site[i])) {
            // The same stack as the last one captured in its slot: the
            // same site, found without hashing the frames again.
            (Some(Repeat { same: true, .. }), Some(i)) if i != NO_SITE => {
                debug_assert!(self.has_frames(i, frames), "a repeated stack differs");
                Some(i)
            }
            _ => self.site(frames),
        };
        if let Some(slot) = slot {
            self.last_site[slot] = site.unwrap_or(NO_SITE);
        }
        let Some(i) = site else {
            // No memory for a new stack: the allocation goes without one.
            self.lost += 1;
            self.degraded += 1;
            return;
        };
        // A block that cannot be tracked (no memory for its entry) counts
        // as an allocation of its stack but not as live: its free would
        // not be seen.
        // As the block keeps it, so that its free takes off what this adds.
        let w = weight(size, self.mean) as f32;
        let inserted = self.blocks.insert(
            addr,
            Block {
                site: i,
                weight: w,
                size,
                born: now,
            },
            may_grow(),
        );
        let w = f64::from(w);
        self.var_allocs += w * (w - 1.0);
        self.var_bytes += (size as f64) * (size as f64) * w * (w - 1.0);
        let s = self.touch(i);
        s.samples += 1;
        s.allocs += w;
        s.bytes += w * size as f64;
        s.charge(w, charge.into());
        if inserted == Inserted::NoRoom {
            self.degraded += 1;
            return;
        }
        s.live_allocs += w;
        s.live_bytes += w * size as f64;
        self.live += w * size as f64;
        if self.live > self.peak {
            self.peak = self.live;
            self.peak_op = self.ops;
        }
        if let Inserted::Replaced(old, also) = inserted {
            // The allocator handed out a block we thought live: its free
            // was not seen (freed before recording began, or by a path
            // around the hooks). Forget the stale one.
            self.forget(old, Charge::Ticks(0), None);
            if let Some(also) = also {
                self.forget(also, Charge::Ticks(0), None);
            }
        } else if MODE.load(Relaxed) == MODE_SAMPLE {
            let slot = filter_slot(addr);
            let v = slot.load(Relaxed);
            if v < u8::MAX {
                slot.store(v + 1, Relaxed);
            }
        }
    }

    /// The release of the block at `addr`, if tracked, at TSC `now`, whose
    /// call charges its stack `ticks(requested size)`.
    pub(super) fn free<C: Into<Charge>>(
        &mut self,
        addr: usize,
        now: u64,
        ticks: impl FnOnce(u64) -> C,
    ) {
        self.free_noting(
            addr,
            Freed {
                at: now,
                temporary: false,
            },
            ticks,
        );
    }

    /// [`free`](Self::free), with what is known of the release.
    pub(super) fn free_noting<C: Into<Charge>>(
        &mut self,
        addr: usize,
        freed: Freed,
        ticks: impl FnOnce(u64) -> C,
    ) {
        let Some(b) = self.blocks.remove(addr) else {
            return; // a filter false positive, or an untracked block
        };
        let ticks = ticks(b.size).into();
        if MODE.load(Relaxed) == MODE_SAMPLE {
            let slot = filter_slot(addr);
            let v = slot.load(Relaxed);
            if v != u8::MAX && v != 0 {
                slot.store(v - 1, Relaxed);
            }
        }
        self.forget(b, ticks, Some(freed));
    }

    /// Takes tracked block `b` out of its site's live figures, charging
    /// `charge`; with `freed`, the release seen (not a block found stale),
    /// counts its lifetime and, if so, its temporary allocation.
    pub(super) fn forget(&mut self, b: Block, charge: Charge, freed: Option<Freed>) {
        let w = f64::from(b.weight);
        // The lifetime and its decade, before the site is borrowed.
        let lived = match freed {
            Some(f) if self.ticks_per_us != 0 => {
                let ticks = f.at.saturating_sub(b.born);
                Some((ticks, lifetimes::decade_of(ticks, &self.decade_bounds)))
            }
            Some(_) | None => None,
        };
        let s = self.touch(b.site);
        if freed.is_some_and(|f| f.temporary) {
            s.temporary += w;
            // Under the stack lock: no other writer, no atomic add needed.
            TEMPORARIES.store(TEMPORARIES.load(Relaxed) + 1, Relaxed);
        }
        if let Some((ticks, decade)) = lived {
            if let Some(n) = s.lifetimes.get_mut(decade) {
                *n += w;
            }
            // Through i64, one instruction (a lifetime is under 2^63
            // ticks); from u64 it takes several.
            s.lifetime_ticks += w * (ticks as i64) as f64;
        }
        s.live_allocs -= w;
        s.live_bytes -= w * b.size as f64;
        s.charge(w, charge);
        self.live -= w * b.size as f64;
    }

    /// The figures of site `i`, its ticks those charged as such
    /// ([`Charge::Ticks`]; its calls charged the mean are `mean_calls`).
    pub(super) fn counts(&self, i: usize) -> SiteCounts {
        let s = self.sites.get(i);
        let at_peak = s.stamp <= self.peak_op;
        let (pa, pb) = if at_peak {
            (s.live_allocs, s.live_bytes)
        } else {
            (s.peak_allocs, s.peak_bytes)
        };
        let n = |x: f64| x.max(0.0).round() as u64;
        SiteCounts {
            samples: s.samples,
            allocs: n(s.allocs),
            bytes: n(s.bytes),
            ticks: n(s.ticks),
            peak_allocs: n(pa),
            peak_bytes: n(pb),
            live_allocs: n(s.live_allocs),
            live_bytes: n(s.live_bytes),
            temporary: n(s.temporary),
        }
    }

    /// The lifetimes of site `i`'s freed blocks.
    pub(super) fn lifetimes(&self, i: usize) -> Lifetimes {
        let s = self.sites.get(i);
        let n = |x: f64| x.max(0.0).round() as u64;
        Lifetimes {
            freed: s.lifetimes.map(n),
            ticks: n(s.lifetime_ticks),
        }
    }
}

/// What is known of the release of a tracked block.
#[derive(Clone, Copy, Debug)]
pub(super) struct Freed {
    /// The TSC at the release.
    pub(super) at: u64,
    /// Whether it was a temporary allocation (see [`SiteCounts::temporary`]).
    pub(super) temporary: bool,
}

impl Site {
    /// Charges `charge` for a call of weight `w`.
    #[inline(always)]
    fn charge(&mut self, w: f64, charge: Charge) {
        match charge {
            Charge::Ticks(ticks) => self.ticks += w * ticks as f64,
            Charge::Mean => self.mean_calls += w,
        }
    }
}

/// Whether the stack table and block map may allocate: not once the
/// shim's heap is short (see [`mark_short_of_memory`]).
#[inline]
pub(super) fn may_grow() -> bool {
    !is_short_of_memory()
}

/// Everything behind the stack lock.
pub(super) struct State {
    pub(super) unwinder: StackUnwinder,
    pub(super) sites: Sites,
    /// Every module seen since start-up (unloaded ones too: their stacks
    /// stay in the profile and still need symbolizing).
    pub(super) modules: Vec<unwind::ModuleInfo>,
    /// Allocations left to record exactly before sampling starts (see
    /// [`configure`]).
    pub(super) exact_left: u64,
    /// The filter's counts as they are rebuilt when sampling starts after
    /// an exact prefix: here, in static memory, rather than 16 KiB on the
    /// stack of whichever program thread makes the switch.
    pub(super) filter_counts: [u8; 1 << FILTER_BITS],
}

impl State {
    /// Adds the modules not seen yet; one that cannot be copied for lack
    /// of memory is left out (and counted), to be tried again at the next
    /// change of the loaded modules.
    pub(super) fn remember_modules(&mut self, found: &[unwind::ModuleInfo]) {
        for m in found {
            if self
                .modules
                .iter()
                .any(|k| k.range == m.range && k.path == m.path)
            {
                continue;
            }
            match try_clone_module(m) {
                Some(copy) if self.modules.try_reserve(1).is_ok() => self.modules.push(copy),
                _ => self.sites.degraded += 1,
            }
        }
    }
}

/// A copy of `bytes`, or `None` if there is no memory for it.
pub(super) fn try_copy(bytes: &[u8]) -> Option<Vec<u8>> {
    let mut v = Vec::new();
    v.try_reserve_exact(bytes.len()).ok()?;
    v.extend_from_slice(bytes);
    Some(v)
}

/// A copy of `m`, or `None` if there is no memory for it.
pub(super) fn try_clone_module(m: &unwind::ModuleInfo) -> Option<unwind::ModuleInfo> {
    Some(unwind::ModuleInfo {
        range: m.range.clone(),
        file_offset: m.file_offset,
        bias: m.bias,
        build_id: try_copy(&m.build_id)?,
        path: try_copy(&m.path)?,
    })
}

/// Copies of `modules`, or `None` if there is no memory for them.
pub(super) fn try_clone_modules(modules: &[unwind::ModuleInfo]) -> Option<Vec<unwind::ModuleInfo>> {
    let mut v = Vec::new();
    v.try_reserve_exact(modules.len()).ok()?;
    for m in modules {
        v.push(try_clone_module(m)?);
    }
    Some(v)
}

pub(super) static STATE: SpinLock<State> = SpinLock::new(State {
    unwinder: StackUnwinder::new(false),
    sites: Sites::with_mean(0),
    modules: Vec::new(),
    exact_left: 0,
    filter_counts: [0; 1 << FILTER_BITS],
});

/// Set once the shim's heap had to draw on its emergency reserve (see
/// [`mark_short_of_memory`]).
pub(super) static SHORT_OF_MEMORY: AtomicBool = AtomicBool::new(false);

/// Tells the stack recorder that the memory it allocates from has run
/// out: the shim's heap calls it when it has to draw on its emergency
/// reserve. From then on no new stack is taken (taking one may allocate:
/// the unwinder's module list), each counted as dropped, and the stack
/// table and block map use only the room they have, so the reserve is
/// left to the allocations that cannot fail soft. Lock-free and
/// allocation-free: callable from inside an allocator.
pub fn mark_short_of_memory() {
    SHORT_OF_MEMORY.store(true, Relaxed);
}

/// Whether [`mark_short_of_memory`] was called.
#[inline]
pub fn is_short_of_memory() -> bool {
    SHORT_OF_MEMORY.load(Relaxed)
}

/// What a recorded call changes in the tables. Benchmark builds replace
/// these (see `bench_builds.rs`).
#[cfg(not(any(allocmux_bench = "no_tables", allocmux_bench = "stack_table_only")))]
impl State {
    /// Enters a call that released the tracked block at `released` and
    /// handed out `new` (of `size` requested bytes) with the stack
    /// `frames`, at TSC `now`; either may be 0 (none). The release was a
    /// temporary allocation when `temporary`. `charge(size)` is what a
    /// block's stack is charged for the call: the new block's when there
    /// is one (the call is an allocation), else the freed block's.
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
        if released != 0 {
            let freed = Freed { at: now, temporary };
            self.sites.free_noting(released, freed, |size| {
                if new != 0 {
                    Charge::Ticks(0)
                } else {
                    charge(size)
                }
            });
        }
        if new != 0 {
            if frames.is_empty() {
                self.sites.lost += 1;
                self.sites.degraded += starved as u64;
            } else {
                self.sites
                    .alloc(new, size, frames, charge(size), repeat, now);
            }
        }
    }

    /// Enters the release of the tracked block at `ptr` at TSC `now`, its
    /// stack charged `charge(size)`.
    #[inline(always)]
    pub(super) fn enter_release(&mut self, ptr: usize, now: u64, charge: impl Fn(u64) -> Charge) {
        self.sites.free(ptr, now, charge);
    }
}
