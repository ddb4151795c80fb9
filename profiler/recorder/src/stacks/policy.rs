//! The sampling policy: the mode and mean the process records with, the
//! exact prefix before sampling starts, each sample's weight, and the
//! address filter that tells a `free` whether its block may be a recorded
//! one.

use super::*;

/// Mean bytes between samples; 0 in exact mode.
pub(super) static MEAN_BYTES: AtomicU64 = AtomicU64::new(0);
/// Allocations recorded exactly before sampling starts ([`configure`]'s
/// `exact_first`; 0: none), and the mean sampling then uses.
pub(super) static EXACT_FIRST: AtomicU64 = AtomicU64::new(0);
pub(super) static MEAN_AFTER_EXACT: AtomicU64 = AtomicU64::new(0);
/// The allocations this process recorded exactly before it started
/// sampling; 0 until it did (and in a `fork` child of a process that had:
/// its table starts empty, in sample mode).
pub(super) static EXACT_RECORDED: AtomicU64 = AtomicU64::new(0);
/// Whether sampled blocks are made larger or aligned (sample mode under
/// the shim's [`enter_sampled`] hooks, which are not installed while an
/// `exact_first` prefix is recorded through [`enter_stacks`]).
pub(super) static SAMPLES_ENLARGED: AtomicBool = AtomicBool::new(false);
pub(super) static MODE: AtomicU8 = AtomicU8::new(MODE_OFF);
pub(super) static CONFIGURED: AtomicBool = AtomicBool::new(false);
pub(super) const MODE_OFF: u8 = 0;
pub(super) const MODE_SAMPLE: u8 = 1;
pub(super) const MODE_EXACT: u8 = 2;

/// Allocations made from inside the recorder (looking up a thread's stack
/// bounds allocates), counted but without a stack. Lock-free: the lock may
/// be held by the very thread that makes them.
pub(super) static UNSTACKED: AtomicU64 = AtomicU64::new(0);

/// Sampled allocations left out of the stack table because its lock
/// stayed taken (see `WAIT_YIELDS`), or because their block could not be
/// made recognisable at its release (see [`enter_sampled`]): counted as
/// lost.
pub(super) static UNRECORDED: AtomicU64 = AtomicU64::new(0);

/// How long a hooked call waits for the stack table's lock, in yields to
/// the scheduler, before it leaves its stack out (counted as lost). A
/// hooked call may come while the program holds a lock of its own (a
/// stream's, inside `getline`), and the lock's holder may be a frame this
/// very thread's signal handler interrupted (then the call gives up at
/// once): an unbounded wait could close a cycle with the program's locks.
/// Normally the lock is held for microseconds; the bound is high enough
/// that threads contending in exact mode on a loaded machine never hit it
/// (1,000 yields did, and lost stacks).
pub(super) const WAIT_YIELDS: u32 = 100_000;

/// Whether the unwinder leaves the recorder's own module out of stacks,
/// as configured: a `fork` child that rebuilds the unwinder needs it.
pub(super) static SKIP_OWN_MODULE: AtomicBool = AtomicBool::new(false);

/// Counting filter over tracked block addresses: a free whose slot is 0
/// cannot be of a tracked block. Saturated slots stay saturated (false
/// positives only). Exact mode saturates every slot.
pub(super) const FILTER_BITS: u32 = 14;
pub(super) static FILTER: [AtomicU8; 1 << FILTER_BITS] =
    [const { AtomicU8::new(0) }; 1 << FILTER_BITS];

/// A block's slot: the top bits of the low 32 bits of its address times an
/// odd constant (Fibonacci hashing), one multiply by an immediate and a
/// shift. The address is not shifted past its alignment zeros first (the
/// product's top bits mix the bits above them anyway), and its high half
/// is left out (blocks 4 GiB apart share a slot, a false positive at
/// worst): every `free` pays for this check while sampling, and the two
/// cost three of its nine instructions.
#[inline(always)]
pub(super) fn filter_slot(addr: usize) -> &'static AtomicU8 {
    &FILTER[filter_index(addr)]
}

#[inline(always)]
pub(super) fn filter_index(addr: usize) -> usize {
    ((addr as u32).wrapping_mul(0x9E37_79B1) >> (32 - FILTER_BITS)) as usize
}

/// Whether `addr` is aligned as [`StackBody::ALIGNS_SAMPLED`] aligns
/// sampled blocks. On x86-64, one `test` of its low bits and a branch:
/// LLVM makes the mask test a copy and a shift (the address must stay in
/// its register for the jump to the allocator), one instruction more on
/// every `free`.
#[inline(always)]
pub(super) fn is_sampled_aligned(addr: usize) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        let mut aligned = false;
        // SAFETY: a register test and a branch to the label; no memory.
        unsafe {
            core::arch::asm!(
                "test {a:e}, {mask}",
                "jz {yes}",
                a = in(reg) addr,
                mask = const SAMPLED_BLOCK_BYTES - 1,
                yes = label {
                    aligned = true;
                },
                options(nomem, nostack),
            );
        }
        aligned
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        addr % SAMPLED_BLOCK_BYTES == 0
    }
}

/// Whether `addr` may be a tracked block (never false for one that is).
#[inline(always)]
pub(super) fn maybe_tracked(addr: usize) -> bool {
    filter_slot(addr).load(Relaxed) != 0
}

/// Turns stack recording on. Call once, before the hooks that use
/// [`enter_stacks`] are installed. `skip_own_module` leaves the frames of
/// the module holding this code out of every stack (the shim's).
///
/// In sample mode, `exact_first` > 0 records the first `exact_first`
/// allocations of the process exactly, as exact mode does, and samples
/// from then on, so a short program's stacks are all there and a long
/// one's cost what sampling costs (`allocmux flame`'s default). Calls then
/// go through [`enter_stacks`] throughout (the shim's sampled hooks make
/// sampled blocks larger, which blocks recorded before the switch are
/// not). The profile says which it was: exact mode if the program never
/// got that far, else sample mode with `stacks_exact_first`.
pub fn configure(mode: StackMode, skip_own_module: bool, exact_first: u64) {
    // Threads racing through their first call all configure the same;
    // the first one does it.
    if CONFIGURED.swap(true, Relaxed) {
        return;
    }
    SKIP_OWN_MODULE.store(skip_own_module, Relaxed);
    // Measured before the lock is taken: it spins for 50 µs.
    let ticks_per_us = match mode {
        StackMode::Off => 0,
        StackMode::Exact | StackMode::Sample { .. } => crate::clock::ticks_per_us(),
    };
    let mut st = STATE.lock();
    st.unwinder = StackUnwinder::new(skip_own_module);
    let mode = match mode {
        StackMode::Sample { mean_bytes } if exact_first > 0 => {
            EXACT_FIRST.store(exact_first, Relaxed);
            MEAN_AFTER_EXACT.store(mean_bytes.max(1), Relaxed);
            st.exact_left = exact_first;
            StackMode::Exact
        }
        mode @ (StackMode::Off | StackMode::Exact | StackMode::Sample { .. }) => mode,
    };
    match mode {
        StackMode::Off => MODE.store(MODE_OFF, Relaxed),
        StackMode::Sample { mean_bytes } => {
            st.sites = Sites::with_mean(mean_bytes.max(1));
            MEAN_BYTES.store(mean_bytes.max(1), Relaxed);
            SAMPLES_ENLARGED.store(true, Relaxed);
            MODE.store(MODE_SAMPLE, Relaxed);
        }
        StackMode::Exact => {
            MEAN_BYTES.store(0, Relaxed);
            for slot in &FILTER {
                slot.store(u8::MAX, Relaxed);
            }
            MODE.store(MODE_EXACT, Relaxed);
        }
    }
    LIFETIME_TICKS_PER_US.store(ticks_per_us, Relaxed);
    st.sites.set_lifetime_clock(ticks_per_us);
}

/// Temporary allocations counted so far in the process, for the
/// timeline: changed only under the stack lock (one writer at a time),
/// read by the timeline's sampler without it.
pub(super) static TEMPORARIES: AtomicU64 = AtomicU64::new(0);

/// Temporary allocations so far, when they are counted (exact stacks);
/// `None` otherwise. Lock-free: for the timeline's sampler.
pub fn temporaries_so_far() -> Option<u64> {
    (mode() == StackMode::Exact).then(|| TEMPORARIES.load(Relaxed))
}

/// The TSC ticks a µs blocks' lifetimes are bucketed with (0 until
/// [`configure`]): kept for the tables a fork child starts afresh.
pub(super) static LIFETIME_TICKS_PER_US: AtomicU64 = AtomicU64::new(0);

/// At the sampled level, where nothing is counted per call, the process's
/// totals as the stack samples estimate them, in the profile's form (see
/// [`Recording::Sampled`](allocmux_format::profile::Recording::Sampled)), with their
/// variances; `None` if this thread holds the stack lock (a signal handler
/// that interrupted it). Allocates nothing.
pub fn estimated_totals() -> Option<(Totals, allocmux_format::profile::Recording)> {
    let s = STATE.lock_unless_held_here()?;
    let sites = &s.sites;
    let (mut allocs, mut bytes, mut live_allocs) = (0.0, 0.0, 0.0);
    for i in 0..sites.sites.len() {
        let site = sites.sites.get(i);
        allocs += site.allocs;
        bytes += site.bytes;
        live_allocs += site.live_allocs;
    }
    let n = |x: f64| x.max(0.0).round() as u64;
    let mut t = Totals::default();
    t.calls[Func::Malloc as usize] = n(allocs);
    t.calls[Func::Free as usize] = n(allocs - live_allocs);
    t.bytes_requested = n(bytes);
    t.bytes_allocated = n(bytes);
    t.bytes_freed = n(bytes - sites.live);
    t.peak_live_bytes = n(sites.peak);
    // Not the allocator time: one timed call in thousands, weighted by
    // thousands, gave 245 to 692 ms for the 287 ms that exact recording's
    // time sample measures on the same program (python3 building a
    // 200,000-key dict). Each stack keeps its share of the sampled calls'
    // time (its `ticks`); the total is not estimated.
    let recording = allocmux_format::profile::Recording::Sampled {
        allocations_variance: sites.var_allocs,
        bytes_variance: sites.var_bytes,
    };
    Some((t, recording))
}

/// Whether stacks are being recorded: one relaxed load, for a global
/// allocator deciding per call between [`enter_stacks`] and
/// [`enter`](super::enter).
#[inline(always)]
pub fn is_on() -> bool {
    MODE.load(Relaxed) != MODE_OFF
}

/// Stops recording stacks (what was recorded stays, for a last
/// [`Snapshot`]); calls from then on go through the plain path.
pub fn stop() {
    MODE.store(MODE_OFF, Relaxed);
}

/// How many allocations were recorded exactly before sampling started
/// (see [`configure`]): 0 if sampling has not started after an exact
/// prefix.
pub fn exact_first() -> u64 {
    EXACT_RECORDED.load(Relaxed)
}

/// Counts one allocation of an exact prefix (see [`configure`]), and
/// starts sampling after the last one: from then on the stack table
/// weights new blocks by their sampling probability, and the filter,
/// saturated in exact mode, counts the blocks tracked so far, so that only
/// their frees (and later sampled blocks') look them up. Under the lock,
/// where every change to the table is made: a free racing the switch
/// found a saturated slot and waits here, and finds its block after.
pub(super) fn count_exact_prefix(s: &mut State) {
    if s.exact_left == 0 || MEAN_BYTES.load(Relaxed) != 0 {
        return;
    }
    s.exact_left -= 1;
    if s.exact_left > 0 {
        return;
    }
    let mean = MEAN_AFTER_EXACT.load(Relaxed);
    let State {
        sites,
        filter_counts: counts,
        ..
    } = s;
    sites.mean = mean;
    sites.blocks.stop_paging();
    counts.fill(0);
    sites.blocks.for_each_address(|addr| {
        let h = filter_index(addr);
        counts[h] = counts[h].saturating_add(1);
    });
    for (slot, &n) in FILTER.iter().zip(counts.iter()) {
        slot.store(n, Relaxed);
    }
    MEAN_BYTES.store(mean, Relaxed);
    EXACT_RECORDED.store(EXACT_FIRST.load(Relaxed), Relaxed);
    MODE.store(MODE_SAMPLE, Relaxed);
}

/// The mode set by [`configure`].
pub fn mode() -> StackMode {
    match MODE.load(Relaxed) {
        MODE_SAMPLE => StackMode::Sample {
            mean_bytes: MEAN_BYTES.load(Relaxed),
        },
        MODE_EXACT => StackMode::Exact,
        _ => StackMode::Off,
    }
}

/// The weight of a sampled allocation of `size` bytes: 1 / P(sampled),
/// with `mean` bytes between samples (0: exact mode, weight 1).
pub(super) fn weight(size: u64, mean: u64) -> f64 {
    if mean == 0 {
        return 1.0;
    }
    let p = -(-(size as f64) / mean as f64).exp_m1();
    if p > 0.0 { 1.0 / p } else { 1.0 }
}
