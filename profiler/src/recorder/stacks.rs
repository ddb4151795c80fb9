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
//! At the sampled level ([`enter_live`]) nothing else is recorded per call:
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
use crate::profile::{self, ModuleRef, StackMode};
use crate::stats::{Func, SiteCounts, Totals};

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
    /// in sample mode they are charged the thread's mean time per timed
    /// call (`promoted_call_ticks`).
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
    /// [`enter_live`], where every release tells sampled blocks by their
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
        }
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

/// Mean bytes between samples; 0 in exact mode.
static MEAN_BYTES: AtomicU64 = AtomicU64::new(0);
/// Allocations recorded exactly before sampling starts ([`configure`]'s
/// `exact_first`; 0: none), and the mean sampling then uses.
static EXACT_FIRST: AtomicU64 = AtomicU64::new(0);
static MEAN_AFTER_EXACT: AtomicU64 = AtomicU64::new(0);
/// The allocations this process recorded exactly before it started
/// sampling; 0 until it did (and in a `fork` child of a process that had:
/// its table starts empty, in sample mode).
static EXACT_RECORDED: AtomicU64 = AtomicU64::new(0);
/// Whether sampled blocks are made larger or aligned (sample mode under
/// the shim's [`enter_sampled`] hooks, which are not installed while an
/// `exact_first` prefix is recorded through [`enter_stacks`]).
static SAMPLES_ENLARGED: AtomicBool = AtomicBool::new(false);
static MODE: AtomicU8 = AtomicU8::new(MODE_OFF);
static CONFIGURED: AtomicBool = AtomicBool::new(false);
const MODE_OFF: u8 = 0;
const MODE_SAMPLE: u8 = 1;
const MODE_EXACT: u8 = 2;

/// Allocations made from inside the recorder (looking up a thread's stack
/// bounds allocates), counted but without a stack. Lock-free: the lock may
/// be held by the very thread that makes them.
static UNSTACKED: AtomicU64 = AtomicU64::new(0);

/// Sampled allocations left out of the stack table because its lock
/// stayed taken (see `WAIT_YIELDS`), or because their block could not be
/// made recognisable at its release (see [`enter_sampled`]): counted as
/// lost.
static UNRECORDED: AtomicU64 = AtomicU64::new(0);

/// How long a hooked call waits for the stack table's lock, in yields to
/// the scheduler, before it leaves its stack out (counted as lost). A
/// hooked call may come while the program holds a lock of its own (a
/// stream's, inside `getline`), and the lock's holder may be a frame this
/// very thread's signal handler interrupted (then the call gives up at
/// once): an unbounded wait could close a cycle with the program's locks.
/// Normally the lock is held for microseconds; the bound is high enough
/// that threads contending in exact mode on a loaded machine never hit it
/// (1,000 yields did, and lost stacks).
const WAIT_YIELDS: u32 = 100_000;

/// Whether the unwinder leaves the recorder's own module out of stacks,
/// as configured: a `fork` child that rebuilds the unwinder needs it.
static SKIP_OWN_MODULE: AtomicBool = AtomicBool::new(false);

/// Counting filter over tracked block addresses: a free whose slot is 0
/// cannot be of a tracked block. Saturated slots stay saturated (false
/// positives only). Exact mode saturates every slot.
const FILTER_BITS: u32 = 14;
static FILTER: [AtomicU8; 1 << FILTER_BITS] = [const { AtomicU8::new(0) }; 1 << FILTER_BITS];

/// A block's slot: the top bits of the low 32 bits of its address times an
/// odd constant (Fibonacci hashing), one multiply by an immediate and a
/// shift. The address is not shifted past its alignment zeros first (the
/// product's top bits mix the bits above them anyway), and its high half
/// is left out (blocks 4 GiB apart share a slot, a false positive at
/// worst): every `free` pays for this check while sampling, and the two
/// cost three of its nine instructions.
#[inline(always)]
fn filter_slot(addr: usize) -> &'static AtomicU8 {
    &FILTER[filter_index(addr)]
}

#[inline(always)]
fn filter_index(addr: usize) -> usize {
    ((addr as u32).wrapping_mul(0x9E37_79B1) >> (32 - FILTER_BITS)) as usize
}

/// Whether `addr` is aligned as [`StackBody::ALIGNS_SAMPLED`] aligns
/// sampled blocks. On x86-64, one `test` of its low bits and a branch:
/// LLVM makes the mask test a copy and a shift (the address must stay in
/// its register for the jump to the allocator), one instruction more on
/// every `free`.
#[inline(always)]
fn is_sampled_aligned(addr: usize) -> bool {
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
fn maybe_tracked(addr: usize) -> bool {
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
    let mut st = STATE.lock();
    st.unwinder = StackUnwinder::new(skip_own_module);
    let mode = match mode {
        StackMode::Sample { mean_bytes } if exact_first > 0 => {
            EXACT_FIRST.store(exact_first, Relaxed);
            MEAN_AFTER_EXACT.store(mean_bytes.max(1), Relaxed);
            st.exact_left = exact_first;
            StackMode::Exact
        }
        mode => mode,
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
}

/// At the sampled level, where nothing is counted per call, the process's
/// totals as the stack samples estimate them, in the profile's form (see
/// [`Recording::Sampled`](crate::profile::Recording::Sampled)), with their
/// variances; `None` if this thread holds the stack lock (a signal handler
/// that interrupted it). Allocates nothing.
pub fn estimated_totals() -> Option<(Totals, crate::profile::Recording)> {
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
    let recording = crate::profile::Recording::Sampled {
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
fn count_exact_prefix(s: &mut State) {
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
fn weight(size: u64, mean: u64) -> f64 {
    if mean == 0 {
        return 1.0;
    }
    let p = -(-(size as f64) / mean as f64).exp_m1();
    if p > 0.0 { 1.0 / p } else { 1.0 }
}

/// Runs one hooked call with stack recording: [`enter`] plus, for the
/// calls the sampler picks and the frees of tracked blocks, the stack work
/// out of line.
///
/// # Safety
/// As for [`enter`]; `st` must be the calling thread's own state.
#[inline(always)]
pub unsafe fn enter_stacks<B: StackBody>(t: &ThreadState, st: &StackThread, body: B) -> B::Out {
    let sample = match body.request() {
        Some(n) => st.take(n),
        None => false,
    };
    // No test for NULL (`free(NULL)`): its slot is usually clear, and when
    // it is not, `stacked` finds nothing released and only the time is lost.
    if sample || (B::RELEASES && maybe_tracked(body.released())) {
        // SAFETY: forwarded from the caller.
        unsafe { stacked(body, t, st, sample) }
    } else {
        // SAFETY: forwarded from the caller.
        unsafe { enter(t, body) }
    }
}

/// Methods of a wrapping [`Scope`] that pass the call on to `self.inner`.
macro_rules! delegate_scope {
    ($($method:ident),*) => { $(delegate_scope!(@ $method);)* };
    (@ time) => {
        #[inline(always)]
        fn time<R>(&self, size: usize, op: impl FnOnce() -> R) -> R {
            self.inner.time(size, op)
        }
    };
    (@ allocated) => {
        #[inline(always)]
        fn allocated(&self, usable: usize) {
            self.inner.allocated(usable)
        }
    };
    (@ freed) => {
        #[inline(always)]
        fn freed(&self, usable: usize) {
            self.inner.freed(usable)
        }
    };
    (@ call) => {
        #[inline(always)]
        fn call(&self, f: Func) {
            self.inner.call(f)
        }
    };
    (@ in_place) => {
        #[inline(always)]
        fn in_place(&self) {
            self.inner.in_place()
        }
    };
    (@ fail_untimed) => {
        #[inline(always)]
        fn fail_untimed(&self, f: Func) {
            self.inner.fail_untimed(f)
        }
    };
    (@ release) => {
        #[inline(always)]
        fn release<R>(&self, ptr: usize, usable: usize, op: impl FnOnce() -> R) -> R {
            self.inner.release(ptr, usable, op)
        }
    };
}

/// [`enter_stacks`] for sample mode, on states the hook may reach from the
/// thread pointer.
///
/// Which allocations are sampled costs a request nothing over stacks off:
/// the thread's byte countdown, which counts its requested bytes and finds
/// its large requests (`ThreadState::take_bytes`), is armed no further than
/// the next sampling point, so the subtraction that counts a request also
/// tells whether it may be sampled. A request it takes is counted already
/// when the call runs (the body's scope records the rest, `COUNTED`); one
/// it does not take goes out of line (`request_out_of_window`), where the
/// sampling point, the window's end and large requests are told apart.
///
/// Where the body reports the size of every block it frees
/// ([`StackBody::RELEASES_BY_SIZE`], [`StackBody::PROMOTES`]: the shim on
/// glibc and mimalloc), a sampled allocation asks the allocator for at
/// least [`SAMPLED_BLOCK_BYTES`] (its stack, weight and requested bytes
/// stay the original request's), so a `free` of a smaller block cannot
/// release a tracked one, and the test a `free` makes anyway, whether its
/// block is large enough to be timed for itself, moves down to that size:
/// only the frees of blocks that large look in the filter, out of line,
/// and a `free` costs what it costs with stacks off. Where the `free`
/// learns no sizes ([`StackBody::ALIGNS_SAMPLED`]: the shim on jemalloc),
/// a sampled block is also aligned to that size, and only releases of
/// blocks so aligned look in the filter: an unsampled `free` pays one test
/// of its address. Other releases (`realloc` on glibc and mimalloc) look
/// in the filter, as under [`enter_stacks`].
/// `t` and `st` are the calling thread's states, by address or, in the
/// shim on x86-64, from the thread pointer ([`OwnState`], [`OwnStacks`]),
/// whose fast path then reaches them with `%fs`-relative instructions.
///
/// # Safety
/// As for [`enter_stacks`]; the mode must be sample mode.
#[inline(always)]
pub unsafe fn enter_sampled<B, T, S>(t: T, st: S, body: B) -> B::Out
where
    B: StackBody,
    T: OwnState<'static>,
    S: OwnStacks,
{
    let Some(n) = body.request() else {
        // SAFETY: forwarded from the caller.
        return unsafe { unsampled::<B, T, S, false>(body, t, st) };
    };
    // The thread's byte countdown counts the request, and its window ends
    // no further than the next sampling point: a request it takes is not
    // sampled, and one it does not take (the window's end, a sample, a
    // large block, a thread not yet registered) goes out of line.
    if !t.take_bytes(n) {
        // SAFETY: forwarded from the caller.
        return unsafe { request_out_of_window(body, t, st) };
    }
    // SAFETY: forwarded from the caller.
    unsafe { unsampled::<B, T, S, true>(body, t, st) }
}

/// An unsampled call under [`enter_sampled`], its request (if any) counted
/// already on the byte countdown or not (`COUNTED`): the free of a block
/// that may be tracked goes to [`stacked`], the rest to [`enter`] with the
/// release test of [`SizeChecked`].
///
/// # Safety
/// As for [`enter_sampled`].
#[inline(always)]
unsafe fn unsampled<B, T, S, const COUNTED: bool>(body: B, t: T, st: S) -> B::Out
where
    B: StackBody,
    T: OwnState<'static>,
    S: OwnStacks,
{
    if may_release_tracked(&body) {
        if COUNTED {
            // `stacked` counts the request as it makes the call.
            t.state().untake_bytes(body.request().unwrap_or(0));
        }
        // SAFETY: forwarded from the caller.
        return unsafe { stacked(body, t.state(), st.stacks(), false) };
    }
    // SAFETY: forwarded from the caller.
    unsafe {
        t.enter(SizeChecked::<B, S, T, COUNTED> {
            body,
            stacks: st,
            state: t,
        })
    }
}

/// Whether an unsampled call under [`enter_sampled`] may release a tracked
/// block where its size does not tell (see there): then it goes to
/// [`stacked`].
#[inline(always)]
fn may_release_tracked<B: StackBody>(body: &B) -> bool {
    if !B::RELEASES || B::RELEASES_BY_SIZE {
        return false;
    }
    let old = body.released();
    // Under `ALIGNS_SAMPLED`, the test of the address's low bits is the
    // whole cost of an unsampled `free`: the filter, out of line.
    (!B::ALIGNS_SAMPLED || is_sampled_aligned(old)) && maybe_tracked(old)
}

/// A request the thread's byte window did not take (see [`enter_sampled`]),
/// taken back: sampled if it crosses the sampling point, else counted the
/// usual way, with the window armed again. A thread's first request here
/// draws its first sampling gap.
#[cold]
#[inline(never)]
#[allow(improper_ctypes_definitions)] // called from Rust only; extern "C" so it cannot unwind
unsafe extern "C" fn request_out_of_window<B, T, S>(body: B, t: T, st: S) -> B::Out
where
    B: StackBody,
    T: OwnState<'static>,
    S: OwnStacks,
{
    let n = body.request().unwrap_or(0);
    let (state, stacks) = (t.state(), st.stacks());
    state.first_sight::<B>();
    state.untake_bytes(n);
    if state.may_sample() && !stacks.busy.get() {
        if !state.samples_bytes() {
            // The thread's first request (which also registers it): its
            // first gap, for this request to be sampled as likely as any.
            stacks.rearm(MEAN_BYTES.load(Relaxed));
            state.sample_after(stacks.countdown.get().max(0) as u64);
        }
        if state.sample_due(n) {
            // SAFETY: forwarded from the caller.
            return unsafe {
                if B::PROMOTES {
                    sampled_promoted(body, state, stacks)
                } else {
                    stacked(body, state, stacks, true)
                }
            };
        }
        state.reopen_window();
    }
    // SAFETY: forwarded from the caller.
    unsafe { unsampled::<B, T, S, false>(body, t, st) }
}

/// One hooked call at the sampled recording level (the live level: see
/// `docs/recording.md`), where nothing is counted exactly: an allocation
/// pays the thread's byte countdown to its next sample (one subtraction
/// and a branch), a release one test of its address's low bits, and a
/// release of a block so aligned one load of the filter more. Only a
/// sampled allocation, and the release of a block the filter may hold, go
/// out of line ([`live_sampled`]). Every call runs under `plain`, a scope
/// that records nothing. A sampled block is made at least
/// [`SAMPLED_BLOCK_BYTES`] long and aligned to that, under every backend
/// ([`StackBody::run_aligned`]), so that the test of the address finds
/// it; the test replaces the `free`'s test for NULL (an address that
/// fails it is not NULL), so a release of an unaligned block costs what
/// it costs without recording.
///
/// # Safety
/// The caller's arguments, with the C function's contract; `st` is the
/// calling thread's; the mode is sample mode.
#[inline(always)]
pub unsafe fn enter_live<B: StackBody, S: OwnStacks, U: Scope>(st: S, body: B, plain: U) -> B::Out {
    let sampled = match body.request() {
        Some(n) => st.take(n),
        None => false,
    };
    if sampled {
        // SAFETY: forwarded from the caller.
        return unsafe { live_sampled(body, st.stacks(), plain, true) };
    }
    if B::RELEASES {
        let old = body.released();
        if !is_sampled_aligned(old) {
            // SAFETY: an address with a low bit set is not NULL: the
            // body's own test for NULL (a `free(NULL)`) can go.
            unsafe { core::hint::assert_unchecked(old != 0) };
        } else if maybe_tracked(old) {
            // Aligned and in the filter; an aligned block that is not
            // (the first block of an allocator's page: one in 16 to 256
            // of small blocks) costs the filter's load, inline.
            // SAFETY: forwarded from the caller.
            return unsafe { live_sampled(body, st.stacks(), plain, false) };
        }
    }
    // SAFETY: forwarded from the caller.
    unsafe { body.run(&plain) }
}

/// A sampled call, or the release of a block aligned as sampled ones are,
/// at the live level (see [`enter_live`]): a release the filter says is
/// not of a tracked block runs plainly; the rest are timed, and entered in
/// the tables as [`stacked`] enters them.
#[cold]
#[inline(never)]
#[allow(improper_ctypes_definitions)] // called from Rust only; extern "C" so it cannot unwind
unsafe extern "C" fn live_sampled<B: StackBody, U: Scope>(
    body: B,
    st: &StackThread,
    plain: U,
    mut sample: bool,
) -> B::Out {
    if sample && !st.armed() {
        // A new thread's countdown starts at zero: draw its first gap, and
        // decide again (see `stacked`).
        st.rearm(MEAN_BYTES.load(Relaxed));
        sample = st.take(body.request().unwrap_or(0));
    }
    let old = body.released();
    let releases_tracked = B::RELEASES && old != 0 && maybe_tracked(old);
    if (!sample && !releases_tracked) || st.busy.get() {
        // Neither sampled nor the release of a tracked block; or a call
        // from inside the recorder, which is not the program's.
        // SAFETY: forwarded from the caller.
        return unsafe { body.run(&plain) };
    }
    st.busy.set(true);
    // While busy, every allocation comes here, and runs plainly.
    let resume = st.countdown.replace(-1);
    let start = Tsc::now();
    let fell_back = Cell::new(false);
    let promoted = Promoted::<B, true>::new(body, &fell_back);
    // SAFETY: forwarded from the caller; a sampled call made aligned has
    // the original's contract, with a larger size and alignment.
    let out = unsafe {
        if sample {
            promoted.run(&plain)
        } else {
            body.run(&plain)
        }
    };
    let ticks = sampled_ticks_since(start);
    let released = if releases_tracked && body.did_release(&out) {
        old
    } else {
        0
    };
    // A sampled block that could not be made aligned is not tracked
    // (counted as lost): its release would not be told.
    let new = if sample { promoted.handed_out(&out) } else { 0 };
    let size = body.request().unwrap_or(0) as u64;
    record_call(st, sample, released, new, size, |_| ticks);
    if sample {
        st.rearm(MEAN_BYTES.load(Relaxed));
    } else {
        st.countdown.set(resume);
    }
    st.busy.set(false);
    out
}

/// A thread's own [`StackThread`] as a hook reaches it: by its address, or
/// on x86-64 from the thread pointer ([`FsStacks`]).
pub trait OwnStacks: Copy {
    /// The state's address.
    fn stacks(self) -> &'static StackThread;

    /// [`StackThread::take`]: counts `size` requested bytes down; true if
    /// this allocation is sampled.
    #[inline(always)]
    fn take(self, size: usize) -> bool {
        self.stacks().take(size)
    }
}

impl OwnStacks for &'static StackThread {
    #[inline(always)]
    fn stacks(self) -> &'static StackThread {
        self
    }
}

/// The calling thread's [`StackThread`] at `AT` bytes into a block of
/// static TLS, the block named by its offset from the thread pointer
/// (x86-64, initial-exec; see [`FsState`](super::FsState)). Like
/// `FsState`, it holds nothing: the hook passes nothing for it, and the
/// state's address is made only off the fast path.
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy, Debug)]
pub struct FsStacks<L, const AT: usize>(core::marker::PhantomData<L>);

#[cfg(target_arch = "x86_64")]
impl<L: TlsBlock, const AT: usize> FsStacks<L, AT> {
    /// The state `AT` bytes into block `L`.
    ///
    /// # Safety
    /// Every thread that uses it must have its own `StackThread` there.
    #[inline(always)]
    pub const unsafe fn new() -> Self {
        FsStacks(core::marker::PhantomData)
    }
}

#[cfg(target_arch = "x86_64")]
impl<L: TlsBlock, const AT: usize> OwnStacks for FsStacks<L, AT> {
    #[inline(always)]
    fn stacks(self) -> &'static StackThread {
        // SAFETY: the state is there (`new`), the calling thread's own.
        unsafe { &*(super::thread::tls_address(L::offset() + AT) as *const StackThread) }
    }

    /// One `%fs`-relative `sub` and a branch on its sign: the state's
    /// address takes two instructions more to make (the thread pointer's
    /// load and an add), on every allocation of the sampled level.
    #[inline(always)]
    fn take(self, size: usize) -> bool {
        let mut sampled = false;
        // SAFETY: the operand is the state's countdown, this thread's own
        // `Cell<i64>` (`new`), which only this thread touches; the label
        // only sets a flag.
        unsafe {
            core::arch::asm!(
                "sub qword ptr fs:[{o} + {at}], {v}",
                "js {crossed}",
                o = in(reg) L::offset(),
                at = const AT + core::mem::offset_of!(StackThread, countdown),
                v = in(reg) size,
                crossed = label {
                    sampled = true;
                },
                options(nostack),
            );
        }
        sampled
    }
}

/// A sampled call under [`enter_sampled`], promoted out of line: the hook
/// passes its arguments on as it received them.
#[cold]
#[inline(never)]
#[allow(improper_ctypes_definitions)] // called from Rust only; extern "C" so it cannot unwind
unsafe extern "C" fn sampled_promoted<B: StackBody>(
    body: B,
    t: &ThreadState,
    st: &StackThread,
) -> B::Out {
    let fell_back = Cell::new(false);
    // SAFETY: forwarded from the caller; the promoted call has the
    // original's contract, with a larger size.
    unsafe { stacked(Promoted::<B>::new(body, &fell_back), t, st, true) }
}

/// A sampled allocation asking for at least [`SAMPLED_BLOCK_BYTES`] (see
/// [`enter_sampled`]); recorded as the original request, and made as the
/// original if the larger one fails.
/// `ALIGNED`: the block is aligned too, whatever the backend (the sampled
/// level, see [`enter_live`]).
#[derive(Clone, Copy)]
struct Promoted<'a, B, const ALIGNED: bool = false> {
    call: B,
    original: B,
    requested: usize,
    /// Set when the larger call failed and the original was made instead.
    fell_back: &'a Cell<bool>,
}

impl<'a, B: StackBody, const ALIGNED: bool> Promoted<'a, B, ALIGNED> {
    #[inline(always)]
    fn new(body: B, fell_back: &'a Cell<bool>) -> Self {
        Promoted {
            requested: body.request().unwrap_or(0),
            call: body.promoted(|n| n.max(SAMPLED_BLOCK_BYTES)),
            original: body,
            fell_back,
        }
    }
}

impl<B: StackBody, const ALIGNED: bool> Body for Promoted<'_, B, ALIGNED> {
    type Out = B::Out;
    const FUNC: Func = B::FUNC;
    #[inline(always)]
    unsafe fn run<S: Scope>(self, s: &S) -> B::Out {
        let changed =
            ALIGNED || B::ALIGNS_SAMPLED || self.call.request() != self.original.request();
        let scope = AsRequested {
            inner: *s,
            requested: self.requested,
            quiet_failure: changed,
        };
        // SAFETY: the errno location of the calling thread.
        let errno = unsafe { *libc::__errno_location() };
        // SAFETY: the caller's contract, for the promoted call.
        let out = unsafe {
            if ALIGNED {
                self.call.run_aligned(&scope)
            } else {
                self.call.run_promoted(&scope)
            }
        };
        if !changed || self.call.handed_out(&out) != 0 {
            return out;
        }
        // The larger (or aligned) block failed where the program's own
        // request may not: make that one, as without stacks, untracked.
        // SAFETY: as above.
        unsafe { *libc::__errno_location() = errno };
        self.fell_back.set(true);
        let scope = AsRequested {
            quiet_failure: false,
            ..scope
        };
        // SAFETY: the caller's contract, for the program's own call.
        unsafe { self.original.run(&scope) }
    }
    fn external_counters(&self) -> Option<[*mut u64; 2]> {
        self.call.external_counters()
    }
}

impl<B: StackBody, const ALIGNED: bool> StackBody for Promoted<'_, B, ALIGNED> {
    const PROMOTES: bool = B::PROMOTES;
    const RELEASES: bool = B::RELEASES;
    const RELEASES_BY_SIZE: bool = B::RELEASES_BY_SIZE;
    const ALIGNS_SAMPLED: bool = B::ALIGNS_SAMPLED;
    fn request(&self) -> Option<usize> {
        self.call.request().map(|_| self.requested)
    }
    fn released(&self) -> usize {
        self.call.released()
    }
    fn did_release(&self, out: &Self::Out) -> bool {
        self.call.did_release(out)
    }
    fn handed_out(&self, out: &Self::Out) -> usize {
        // A block whose release would not be told apart would never be
        // seen freed: not tracked, and counted as lost (a zero-byte
        // request, or the original made after the promoted one failed).
        // (A promoted call under `ALIGNS_SAMPLED` that succeeded gave an
        // aligned block.)
        let p = self.call.handed_out(out);
        let recognisable = !self.fell_back.get()
            && self
                .call
                .request()
                .is_some_and(|n| n >= SAMPLED_BLOCK_BYTES);
        if p != 0 && !recognisable {
            UNRECORDED.fetch_add(1, Relaxed);
            return 0;
        }
        p
    }
}

/// The scope a promoted call runs under: the original request's bytes,
/// and no failure recorded for a larger call, which is followed by the
/// program's own.
#[derive(Clone, Copy)]
struct AsRequested<S> {
    inner: S,
    requested: usize,
    quiet_failure: bool,
}

impl<S: Scope> Scope for AsRequested<S> {
    const NEEDS_SIZES: bool = S::NEEDS_SIZES;
    const RECORDS: bool = S::RECORDS;
    #[inline(always)]
    fn alloc(&self, f: Func, _promoted: usize) {
        self.inner.alloc(f, self.requested)
    }
    #[inline(always)]
    fn fail(&self, f: Func) {
        if !self.quiet_failure {
            self.inner.fail(f)
        }
    }
    delegate_scope!(time, allocated, freed, call, in_place, release);
}

/// A call under [`enter_sampled`] that was not sampled: a `free` of a block
/// of [`SAMPLED_BLOCK_BYTES`] or more looks in the filter.
/// `COUNTED`: the request's bytes are counted already, on the thread's
/// byte countdown (see [`enter_sampled`]).
#[derive(Clone, Copy)]
struct SizeChecked<B, T, U, const COUNTED: bool> {
    body: B,
    stacks: T,
    state: U,
}

impl<B: StackBody, T: OwnStacks, U: OwnState<'static>, const COUNTED: bool> Body
    for SizeChecked<B, T, U, COUNTED>
{
    type Out = B::Out;
    const FUNC: Func = B::FUNC;
    #[inline(always)]
    unsafe fn run<S: Scope>(self, s: &S) -> B::Out {
        let s = ReleaseChecked::<S, T, U, COUNTED> {
            inner: *s,
            stacks: self.stacks,
            state: self.state,
            // Made here, not carried in the body: the call's slow path
            // then receives the hook's arguments alone.
            requested: self.body.request().unwrap_or(0),
        };
        // SAFETY: the caller's contract.
        unsafe { self.body.run(&s) }
    }
    fn external_counters(&self) -> Option<[*mut u64; 2]> {
        self.body.external_counters()
    }
}

/// The scope of a [`SizeChecked`] call.
#[derive(Clone, Copy)]
struct ReleaseChecked<S, T, U, const COUNTED: bool> {
    inner: S,
    stacks: T,
    /// The thread's recorder state, for the time of a sampled block's
    /// release (see [`promoted_call_ticks`]), and to take a counted
    /// request's bytes back when the call fails.
    state: U,
    requested: usize,
}

impl<S: Scope, T: OwnStacks, U: OwnState<'static>, const COUNTED: bool> Scope
    for ReleaseChecked<S, T, U, COUNTED>
{
    const NEEDS_SIZES: bool = S::NEEDS_SIZES;
    #[inline(always)]
    fn release<R>(&self, ptr: usize, usable: usize, op: impl FnOnce() -> R) -> R {
        if usable < SAMPLED_BLOCK_BYTES {
            self.inner.release(ptr, usable, op)
        } else {
            // The block's address first, where the hook received it.
            let (stacks, state) = (self.stacks.stacks(), self.state.state());
            release_large(ptr, usable, self.inner, stacks, state, op)
        }
    }
    #[inline(always)]
    fn alloc(&self, f: Func, requested: usize) {
        if COUNTED {
            self.inner.alloc_counted(f, requested)
        } else {
            self.inner.alloc(f, requested)
        }
    }
    #[inline(always)]
    fn alloc_untimed<R>(
        &self,
        f: Func,
        requested: usize,
        untimed: impl FnOnce() -> R,
        usual: impl FnOnce() -> R,
    ) -> R {
        if COUNTED {
            self.inner.counted_untimed(f, requested, untimed, usual)
        } else {
            self.inner.alloc_untimed(f, requested, untimed, usual)
        }
    }
    #[inline(always)]
    fn fail(&self, f: Func) {
        if COUNTED {
            // The usual way counts a request only once its call succeeds
            // (`alloc`).
            self.state.state().untake_bytes(self.requested);
        }
        self.inner.fail(f)
    }
    delegate_scope!(time, allocated, freed, call, in_place, fail_untimed);
}

/// The `free` of a block that may be a sampled one (see [`enter_sampled`]):
/// if the filter says it may be tracked, the call is timed for the block's
/// stack, as [`stacked`] times it, and the block is let go of.
#[cold]
#[inline(never)]
#[allow(improper_ctypes_definitions)] // called from Rust only; extern "C" so it cannot unwind
extern "C" fn release_large<S: Scope, R, F: FnOnce() -> R>(
    ptr: usize,
    usable: usize,
    s: S,
    st: &StackThread,
    t: &ThreadState,
    op: F,
) -> R {
    if !maybe_tracked(ptr) || st.busy.get() {
        return s.release(ptr, usable, op);
    }
    st.busy.set(true);
    let start = Tsc::now();
    let out = s.release(ptr, usable, op);
    let ticks = Tsc::now()
        .wrapping_sub(start)
        .saturating_sub(super::thread::tsc_overhead())
        .min(super::thread::MAX_SAMPLED_TICKS);
    match STATE.lock_within(WAIT_YIELDS) {
        #[cfg(not(any(allocmux_bench = "no_tables", allocmux_bench = "stack_table_only")))]
        Some(mut s) => s
            .sites
            .free(ptr, |size| promoted_call_ticks(size, ticks, t)),
        #[cfg(any(allocmux_bench = "no_tables", allocmux_bench = "stack_table_only"))]
        Some(s) => {
            core::hint::black_box((s, ticks));
        }
        // As in `stacked`: the block stays in the table until its address
        // is handed out again.
        None => {}
    }
    st.busy.set(false);
    out
}

/// The allocator time a stack is given for a sampled call made larger or
/// aligned ([`StackBody::PROMOTES`]), or for the release of a block so
/// made, of `size` requested bytes, which measured `measured` ticks. Such a
/// call is not the program's: a 4 KiB block is served and freed by other
/// paths than a 100-byte one, so its stack would be charged for work the
/// program never asked for (on the churn, the stacks' times came to 7
/// times the process's under glibc). It is given instead the thread's mean time
/// per call as the time sample has measured it so far, which is what the
/// process total charges each call: the stacks' times then add up to the
/// process's, and a stack's time is its calls' share of it. Blocks large
/// enough to be timed for themselves ([`EXACT_TIMING_BYTES`]) keep their
/// measured time, and so does a call before the thread's first timed one.
fn promoted_call_ticks(size: u64, measured: u64, t: &ThreadState) -> u64 {
    if size >= super::thread::EXACT_TIMING_BYTES as u64 {
        return measured;
    }
    t.mean_sampled_ticks().unwrap_or(measured)
}

#[cold]
#[inline(never)]
#[allow(improper_ctypes_definitions)] // called from Rust only; extern "C" so it cannot unwind
unsafe extern "C" fn stacked<B: StackBody>(
    body: B,
    t: &ThreadState,
    st: &StackThread,
    mut sample: bool,
) -> B::Out {
    t.first_sight::<B>();
    if sample && !st.armed() {
        // A new thread's countdown starts at zero, which would sample its
        // first allocation for certain while weighting it as a rare one:
        // draw its first gap, and decide again.
        st.rearm(MEAN_BYTES.load(Relaxed));
        sample = st.take(body.request().unwrap_or(0));
        let old = body.released();
        if !sample && (old == 0 || !maybe_tracked(old)) {
            // SAFETY: forwarded from the caller.
            return unsafe { enter(t, body) };
        }
    }
    if st.busy.get() {
        // A call from inside the recorder: recorded without a stack.
        if body.request().is_some() {
            UNSTACKED.fetch_add(1, Relaxed);
        }
        // SAFETY: forwarded from the caller.
        return unsafe { enter(t, body) };
    }
    st.busy.set(true);
    // While busy, every allocation comes here (and is counted above).
    let resume = st.countdown.replace(-1);
    // SAFETY: forwarded from the caller.
    let (out, ticks) = unsafe { timed_call(t, body) };
    // What the stack of a block of `size` requested bytes is charged for
    // this call: its measured time, but for sampled blocks made larger or
    // aligned (sample mode under the shim; see `promoted_call_ticks`).
    let promoted = B::PROMOTES && SAMPLES_ENLARGED.load(Relaxed);
    let charge = |size: u64| {
        if promoted {
            promoted_call_ticks(size, ticks, t)
        } else {
            ticks
        }
    };
    let old = body.released();
    let released = if old != 0 && body.did_release(&out) {
        old
    } else {
        0
    };
    let new = if sample { body.handed_out(&out) } else { 0 };
    let size = body.request().unwrap_or(0) as u64;
    record_call(st, sample, released, new, size, charge);
    if sample {
        st.rearm(MEAN_BYTES.load(Relaxed));
        resample(t, st);
    } else {
        st.countdown.set(resume);
    }
    st.busy.set(false);
    out
}

/// Enters what a recorded call did in the tables: the release of a tracked
/// block at `released` and the new block at `new` (of `size` requested
/// bytes) with the calling thread's stack, `charge(size)` being the
/// allocator time a block's stack is given for the call. Either may be 0
/// (none). Called by the thread that made the call, marked busy, right
/// after it.
#[inline(always)]
fn record_call(
    st: &StackThread,
    sample: bool,
    released: usize,
    new: usize,
    size: u64,
    charge: impl Fn(u64) -> u64,
) {
    if released == 0 && new == 0 {
        return;
    }
    // The stack is taken after the call (the frames above this one are the
    // same), under the lock the tables are updated under: one acquisition.
    // Short of memory, no new stack is taken (it may allocate): dropped.
    let starved = new != 0 && is_short_of_memory();
    let take_stack = new != 0 && !starved;
    // Outside the lock: the loader's generation may take the loader's lock
    // (see `loader`), and a thread's first look at its stack bounds reads
    // /proc/self/maps.
    let to_capture = if take_stack {
        st.stack().map(|stack| (stack, unwind::generation()))
    } else {
        None
    };
    let locked = STATE.lock_within(WAIT_YIELDS);
    let mut buf = unwind::frame_buf();
    let (locked, frames, repeat) = match (locked, to_capture) {
        (Some(s), Some((stack, g))) => capture(s, stack, g, &mut buf),
        (locked, _) => (locked, &[][..], None),
    };
    let Some(mut s) = locked else {
        // Not recorded rather than waited for (see `WAIT_YIELDS`): a new
        // block's stack is lost; a freed tracked block stays in the table
        // until its address is handed out again.
        if new != 0 {
            UNRECORDED.fetch_add(1, Relaxed);
        }
        return;
    };
    // Benchmark builds that leave out the tables' work, to measure what it
    // costs (docs/performance.md): all of it, or all but finding the
    // stack's site.
    #[cfg(any(allocmux_bench = "no_tables", allocmux_bench = "stack_table_only"))]
    {
        #[cfg(allocmux_bench = "stack_table_only")]
        if new != 0 && !frames.is_empty() {
            core::hint::black_box(s.sites.site(frames));
        }
        core::hint::black_box((&mut s, released, frames, size, starved, repeat, &charge));
    }
    if sample {
        count_exact_prefix(&mut s);
    }
    #[cfg(not(any(allocmux_bench = "no_tables", allocmux_bench = "stack_table_only")))]
    {
        if released != 0 {
            // The call's time goes to the new block's stack when there is
            // one (it is an allocation), else to the freed block's.
            s.sites
                .free(released, |size| if new != 0 { 0 } else { charge(size) });
        }
        if new != 0 {
            if frames.is_empty() {
                s.sites.lost += 1;
                s.sites.degraded += starved as u64;
            } else {
                s.sites.alloc(new, size, frames, charge(size), repeat);
            }
        }
    }
}

/// After a sample under [`enter_sampled`], where the thread's byte window
/// finds the sampled requests: puts the next sampling point the gap just
/// drawn after the bytes requested so far.
#[inline(always)]
fn resample(t: &ThreadState, st: &StackThread) {
    if t.samples_bytes() {
        t.sample_after(st.countdown.get().max(0) as u64);
    }
}

/// Runs a recorded call, returning its allocator time for its stack.
///
/// In exact mode that is the time the process's time sample measured, if
/// it picked this call (see [`ThreadState::take_timed`]), weighted as the
/// process total weighs it: each stack's time is then an unbiased estimate,
/// the stacks' times add up to the process's (but for the calls no stack
/// takes), and the every-call clock reads that were a quarter of exact
/// mode's overhead are gone (docs/performance.md). In sample mode, where
/// one call in thousands is recorded, each is timed here, so a stack's
/// time rests on all its recorded calls, not on a 1-in-256 subset of them.
///
/// # Safety
/// As for [`enter`].
#[inline(always)]
unsafe fn timed_call<B: StackBody>(t: &ThreadState, body: B) -> (B::Out, u64) {
    if MEAN_BYTES.load(Relaxed) == 0 {
        t.take_timed();
        // SAFETY: forwarded from the caller.
        let out = unsafe { enter(t, body) };
        (out, t.take_timed())
    } else {
        let start = Tsc::now();
        // SAFETY: forwarded from the caller.
        let out = unsafe { enter(t, body) };
        (out, sampled_ticks_since(start))
    }
}

/// The ticks of a sampled call that started at TSC `start`, less the
/// clock's own cost. Weighted by the stack sample's weight, so capped like
/// the time sample.
fn sampled_ticks_since(start: u64) -> u64 {
    Tsc::now()
        .wrapping_sub(start)
        .saturating_sub(super::thread::tsc_overhead())
        .min(super::thread::MAX_SAMPLED_TICKS)
}

/// Unwinds the calling thread, whose stack mapping is `stack`, into `buf`
/// with the lock held, returning the lock (`None` if it had to be let go
/// to read the module list and could not be taken again), the frames
/// found (none if that is not possible) and whether they repeat the
/// thread's last stack (see [`StackUnwinder::repeat`]). `generation` is
/// the loader's, read before the lock was taken. Inlined: a frame of its
/// own would be one more for every capture to unwind.
#[inline(always)]
fn capture<'l, 'b>(
    mut s: SpinGuard<'l, State>,
    stack: Range<u64>,
    generation: unwind::Generation,
    buf: &'b mut unwind::FrameBuf,
) -> (Option<SpinGuard<'l, State>>, &'b [u64], Option<Repeat>) {
    if !s.unwinder.is_current(generation) {
        // Reading the module list takes the loader's lock: not while
        // holding this one.
        drop(s);
        let modules = unwind::loaded_modules();
        let Some(again) = STATE.lock_within(WAIT_YIELDS) else {
            return (None, &[], None);
        };
        s = again;
        s.remember_modules(&modules.0);
        s.unwinder.install(generation, modules);
    }
    let frames = s.unwinder.capture(stack, buf);
    let repeat = s.unwinder.repeat();
    (Some(s), frames, repeat)
}

/// A growth step of the site table is one chunk of 4,096 sites (384 KiB),
/// of the frame store one of 65,536 return addresses (512 KiB).
const SITE_CHUNK: usize = 4096;
const FRAME_CHUNK: usize = 65_536;
/// A snapshot's stacks, 4,096 (320 KiB) a chunk.
const COPY_CHUNK: usize = 4096;
/// Shards of the stack index (see [`Sharded`]): at most 14.7 million
/// distinct stacks.
const INDEX_SHARDS: usize = 256;
/// The end of a chain of sites whose stacks have the same hash.
const NO_SITE: u32 = u32::MAX;
/// No growth step of the recorder's tables may allocate more than this.
const MAX_STEP_BYTES: usize = 4 << 20;
const _: () = assert!(
    max_shard_bytes::<usize, Block>() <= MAX_STEP_BYTES
        && max_shard_bytes::<u64, u32>() <= MAX_STEP_BYTES
        && SITE_CHUNK * size_of::<Site>() <= MAX_STEP_BYTES
        && FRAME_CHUNK * 8 <= MAX_STEP_BYTES
        && COPY_CHUNK * size_of::<Copied>() <= MAX_STEP_BYTES
        && BLOCK_SHARDS * size_of::<super::tables::FastMap<usize, Block>>() <= MAX_STEP_BYTES
);

/// One distinct stack: where its return addresses are, and its running
/// sums (estimates, hence floats).
#[derive(Clone, Copy)]
struct Site {
    samples: u64,
    allocs: f64,
    bytes: f64,
    ticks: f64,
    live_allocs: f64,
    live_bytes: f64,
    peak_allocs: f64,
    peak_bytes: f64,
    /// The operation number of this site's last change (see `Sites::touch`).
    stamp: u64,
    /// Where its return addresses start in `Sites::frames`, and how many.
    frames_at: u64,
    depth: u32,
    /// The next older site whose stack has the same hash, or `NO_SITE`.
    next: u32,
    /// The other half of its stack's fingerprint ([`StackHash::check`]).
    check: u64,
}

impl Site {
    fn new(frames_at: u64, depth: u32, next: u32, check: u64) -> Self {
        Site {
            samples: 0,
            allocs: 0.0,
            bytes: 0.0,
            ticks: 0.0,
            live_allocs: 0.0,
            live_bytes: 0.0,
            peak_allocs: 0.0,
            peak_bytes: 0.0,
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
/// `max_shard_bytes::<usize, Block>()` = 3,276,816 bytes (3.1 MiB); then
/// a stack-index shard (2.1 MiB), a frame chunk or the block map's
/// page-map root (512 KiB), a site chunk (384 KiB), a page-map leaf (256
/// KiB) and the block map's 2,048 shard headers (64 KiB). The
/// `sites_never_allocate_more_than_a_shard_at_once` test holds them to it.
///
/// Each stack's return addresses are stored once, in the frame store; the
/// index maps a stack's hash to its newest site, and sites with the same
/// hash are chained.
struct Sites {
    index: Sharded<u64, u32, INDEX_SHARDS>,
    frames: Chunks<u64, FRAME_CHUNK>,
    sites: Chunks<Site, SITE_CHUNK>,
    blocks: BlockMap,
    /// Estimated live bytes of all tracked blocks, and their highest value.
    live: f64,
    peak: f64,
    /// Operations so far, and the number of the one that set the peak.
    ops: u64,
    peak_op: u64,
    /// Allocations recorded without a stack.
    lost: u64,
    /// What was dropped for lack of memory: stacks not stored (or not
    /// taken once the shim's heap was short), blocks not tracked, modules
    /// not kept, snapshots not refreshed.
    degraded: u64,
    /// Mean bytes between samples (0: exact).
    mean: u64,
    /// The variances of the estimated totals of allocations and bytes,
    /// summed over the samples: an allocation sampled with probability `p`
    /// adds `(1 - p) / p²` to a count's (`w (w - 1)`, with `w = 1/p`), `n²`
    /// times that to a byte total's.
    var_allocs: f64,
    var_bytes: f64,
    /// The site of the latest stack captured in each of the unwinder's
    /// last-stack slots (see [`StackUnwinder::repeat`]), `NO_SITE` if none:
    /// kept here so that a new table starts with none.
    last_site: [u32; last_stack::SLOTS],
}

impl Default for Sites {
    fn default() -> Self {
        Sites::with_mean(0)
    }
}

impl Sites {
    /// Empty tables for recording with `mean` bytes between samples (0:
    /// exact).
    const fn with_mean(mean: u64) -> Self {
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
        }
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
    fn site(&mut self, frames: &[u64]) -> Option<u32> {
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
    fn has_frames(&self, i: u32, frames: &[u64]) -> bool {
        let s = self.sites.get(i as usize);
        let (a, b) = self.frames.slices(s.frames_at as usize, s.depth as usize);
        a.len() + b.len() == frames.len() && *a == frames[..a.len()] && *b == frames[a.len()..]
    }

    /// Prepares site `i` for a change of its live figures, keeping the
    /// per-site value at the peak exact in O(1): a site untouched since the
    /// operation that set the peak still holds its peak value as its live
    /// value, so that value is saved before the first change after a peak.
    fn touch(&mut self, i: u32) -> &mut Site {
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

    fn alloc(
        &mut self,
        addr: usize,
        size: u64,
        frames: &[u64],
        ticks: u64,
        repeat: Option<Repeat>,
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
        s.ticks += w * ticks as f64;
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
            self.forget(old, 0);
            if let Some(also) = also {
                self.forget(also, 0);
            }
        } else if MODE.load(Relaxed) == MODE_SAMPLE {
            let slot = filter_slot(addr);
            let v = slot.load(Relaxed);
            if v < u8::MAX {
                slot.store(v + 1, Relaxed);
            }
        }
    }

    /// The release of the block at `addr`, if tracked, whose call took
    /// `ticks(requested size)` for its stack.
    fn free(&mut self, addr: usize, ticks: impl FnOnce(u64) -> u64) {
        let Some(b) = self.blocks.remove(addr) else {
            return; // a filter false positive, or an untracked block
        };
        let ticks = ticks(b.size);
        if MODE.load(Relaxed) == MODE_SAMPLE {
            let slot = filter_slot(addr);
            let v = slot.load(Relaxed);
            if v != u8::MAX && v != 0 {
                slot.store(v - 1, Relaxed);
            }
        }
        self.forget(b, ticks);
    }

    fn forget(&mut self, b: Block, ticks: u64) {
        let w = f64::from(b.weight);
        let s = self.touch(b.site);
        s.live_allocs -= w;
        s.live_bytes -= w * b.size as f64;
        s.ticks += w * ticks as f64;
        self.live -= w * b.size as f64;
    }

    fn counts(&self, i: usize) -> SiteCounts {
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
        }
    }
}

/// Whether the stack table and block map may allocate: not once the
/// shim's heap is short (see [`mark_short_of_memory`]).
#[inline]
fn may_grow() -> bool {
    !is_short_of_memory()
}

/// Everything behind the stack lock.
struct State {
    unwinder: StackUnwinder,
    sites: Sites,
    /// Every module seen since start-up (unloaded ones too: their stacks
    /// stay in the profile and still need symbolizing).
    modules: Vec<unwind::ModuleInfo>,
    /// Allocations left to record exactly before sampling starts (see
    /// [`configure`]).
    exact_left: u64,
    /// The filter's counts as they are rebuilt when sampling starts after
    /// an exact prefix: here, in static memory, rather than 16 KiB on the
    /// stack of whichever program thread makes the switch.
    filter_counts: [u8; 1 << FILTER_BITS],
}

impl State {
    /// Adds the modules not seen yet; one that cannot be copied for lack
    /// of memory is left out (and counted), to be tried again at the next
    /// change of the loaded modules.
    fn remember_modules(&mut self, found: &[unwind::ModuleInfo]) {
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
fn try_copy(bytes: &[u8]) -> Option<Vec<u8>> {
    let mut v = Vec::new();
    v.try_reserve_exact(bytes.len()).ok()?;
    v.extend_from_slice(bytes);
    Some(v)
}

/// A copy of `m`, or `None` if there is no memory for it.
fn try_clone_module(m: &unwind::ModuleInfo) -> Option<unwind::ModuleInfo> {
    Some(unwind::ModuleInfo {
        range: m.range.clone(),
        file_offset: m.file_offset,
        bias: m.bias,
        build_id: try_copy(&m.build_id)?,
        path: try_copy(&m.path)?,
    })
}

/// Copies of `modules`, or `None` if there is no memory for them.
fn try_clone_modules(modules: &[unwind::ModuleInfo]) -> Option<Vec<unwind::ModuleInfo>> {
    let mut v = Vec::new();
    v.try_reserve_exact(modules.len()).ok()?;
    for m in modules {
        v.push(try_clone_module(m)?);
    }
    Some(v)
}

static STATE: SpinLock<State> = SpinLock::new(State {
    unwinder: StackUnwinder::new(false),
    sites: Sites::with_mean(0),
    modules: Vec::new(),
    exact_left: 0,
    filter_counts: [0; 1 << FILTER_BITS],
});

/// Set once the shim's heap had to draw on its emergency reserve (see
/// [`mark_short_of_memory`]).
static SHORT_OF_MEMORY: AtomicBool = AtomicBool::new(false);

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

/// One stack of a [`Snapshot`]: its figures, and where its return
/// addresses are in the snapshot's frame store.
#[derive(Clone, Copy, Debug)]
struct Copied {
    counts: SiteCounts,
    frames_at: u64,
    depth: u32,
}

/// A copy of the stack table, taken under the lock and written out after
/// it is released, so a large profile never stalls the allocating threads
/// while it is formatted. Keep one and reuse it: its buffers stay
/// allocated. They are chunked like the recorder's tables, so a copy of
/// any size allocates at most 512 KiB at a time, and fallibly: a copy
/// there is no memory for keeps the previous one.
#[derive(Debug, Default)]
pub struct Snapshot {
    mode: StackMode,
    exact_first: u64,
    lost: u64,
    degraded: u64,
    modules: Vec<unwind::ModuleInfo>,
    stacks: Chunks<Copied, COPY_CHUNK>,
    frames: Chunks<u64, FRAME_CHUNK>,
}

/// Room for the `stacks`, `stacks_lost` and `stacks_degraded` lines and
/// the section's `end`, which are written even when nothing else fits.
const HEAD_ROOM: usize = 128;

impl Snapshot {
    /// An empty copy.
    pub const fn new() -> Self {
        Snapshot {
            mode: StackMode::Off,
            exact_first: 0,
            lost: 0,
            degraded: 0,
            modules: Vec::new(),
            stacks: Chunks::new(),
            frames: Chunks::new(),
        }
    }

    /// Copies the current stacks (nothing when stacks are off). If this
    /// very thread holds the stack lock (the caller is a signal handler
    /// that interrupted it inside the recorder, on its way to `_exit`),
    /// the previous copy is kept rather than waiting forever.
    /// So it is if there is no memory for the copy: its room is reserved
    /// before anything is copied, and then only the counts of lost and
    /// degraded recording are brought up to date (the stale copy counted
    /// as degraded). The room is asked for even once the recorder is short
    /// of memory: by the exit profile the program may have given much
    /// back, and the copy's chunks are larger than anything the shim's
    /// emergency reserve serves, so they cannot empty it.
    pub fn take(&mut self) {
        self.mode = mode();
        if self.mode == StackMode::Off {
            return; // `write` writes nothing then
        }
        let Some(mut s) = STATE.lock_unless_held_here() else {
            return;
        };
        // Again under the lock, where sampling starts after an exact
        // prefix: the mode and the prefix agree.
        self.mode = mode();
        self.exact_first = exact_first();
        let mut modules = None;
        let mut room = true;
        if self.modules.len() != s.modules.len() {
            modules = try_clone_modules(&s.modules);
            room = modules.is_some();
        }
        room = room
            && self.stacks.try_reserve_total(s.sites.sites.len())
            && self.frames.try_reserve_total(s.sites.frames.len());
        if !room {
            s.sites.degraded += 1;
        }
        self.lost = s.sites.lost + UNSTACKED.load(Relaxed) + UNRECORDED.load(Relaxed);
        self.degraded = s.sites.degraded + is_short_of_memory() as u64;
        if !room {
            return;
        }
        if let Some(m) = modules {
            self.modules = m;
        }
        self.stacks.clear();
        self.frames.clear();
        for chunk in s.sites.frames.as_slices() {
            self.frames.extend_from_slice(chunk);
        }
        for i in 0..s.sites.sites.len() {
            let site = s.sites.sites.get(i);
            self.stacks.push(Copied {
                counts: s.sites.counts(i),
                frames_at: site.frames_at,
                depth: site.depth,
            });
        }
    }

    /// The stack mode the copy was taken in.
    pub fn mode(&self) -> StackMode {
        self.mode
    }

    /// How many stacks the copy holds. Stack `i` of one copy is stack `i`
    /// of every later copy of the same process: the table only grows.
    pub fn len(&self) -> usize {
        self.stacks.len()
    }

    /// Whether the copy holds no stack.
    pub fn is_empty(&self) -> bool {
        self.stacks.len() == 0
    }

    /// The figures of stack `i`.
    pub fn counts(&self, i: usize) -> SiteCounts {
        self.stacks.get(i).counts
    }

    /// The return addresses of stack `i`, innermost first, gathered into
    /// `buf`.
    pub fn frames<'b>(&self, i: usize, buf: &'b mut [u64; unwind::MAX_FRAMES]) -> &'b [u64] {
        self.frames_of(self.stacks.get(i), buf)
    }

    /// Every module seen since start-up, unloaded ones too.
    pub fn modules(&self) -> &[unwind::ModuleInfo] {
        &self.modules
    }

    /// The length of `c`'s line.
    fn line_len(&self, c: &Copied) -> usize {
        let (a, b) = self.frames.slices(c.frames_at as usize, c.depth as usize);
        stack_line_len(&c.counts, a.iter().chain(b))
    }

    /// The return addresses of `c`, gathered into `buf`.
    fn frames_of<'b>(&self, c: &Copied, buf: &'b mut [u64; unwind::MAX_FRAMES]) -> &'b [u64] {
        let (a, b) = self.frames.slices(c.frames_at as usize, c.depth as usize);
        buf[..a.len()].copy_from_slice(a);
        buf[a.len()..a.len() + b.len()].copy_from_slice(b);
        &buf[..a.len() + b.len()]
    }

    /// Appends the stack lines of the profile to `out`: the mode, the
    /// counts of lost and degraded recording, the modules, one line per
    /// stack.
    ///
    /// Their room is reserved first, fallibly. If there is not enough
    /// memory, what fits in the room `out` has already is written (the
    /// modules, then the stacks, in order) and what does not is left out
    /// and counted in `stacks_degraded`: the profile stays whole and says
    /// it is short. Only the first lines and the section's `end`, some
    /// hundred bytes, may allocate then.
    pub fn write(&self, out: &mut String) -> fmt::Result {
        if self.mode == StackMode::Off {
            return Ok(());
        }
        let module_lens = || self.modules.iter().map(module_line_len);
        let stack_lens = || (0..self.stacks.len()).map(|i| self.line_len(self.stacks.get(i)));
        let need = HEAD_ROOM + module_lens().sum::<usize>() + stack_lens().sum::<usize>();
        let (mut modules, mut stacks) = (self.modules.len(), self.stacks.len());
        if out.try_reserve(need).is_err() && out.try_reserve_exact(need).is_err() {
            // Whatever fits in the room there is, in order, after the
            // first lines and the `end` (which get their room if it can
            // be had).
            let _ = out.try_reserve_exact(HEAD_ROOM);
            let mut room = (out.capacity() - out.len()).saturating_sub(HEAD_ROOM);
            let mut fits = |len: usize| {
                let yes = len <= room;
                if yes {
                    room -= len;
                }
                yes
            };
            modules = module_lens().take_while(|&len| fits(len)).count();
            stacks = if modules < self.modules.len() {
                0
            } else {
                stack_lens().take_while(|&len| fits(len)).count()
            };
        }
        let left_out = (self.modules.len() - modules + self.stacks.len() - stacks) as u64;
        profile::write_stack_mode(
            out,
            self.mode,
            self.exact_first,
            self.lost,
            self.degraded + left_out,
        )?;
        for m in &self.modules[..modules] {
            profile::write_module(out, &module_ref(m))?;
        }
        let mut buf = [0u64; unwind::MAX_FRAMES];
        for i in 0..stacks {
            let c = self.stacks.get(i);
            profile::write_stack(out, &c.counts, self.frames_of(c, &mut buf))?;
        }
        Ok(())
    }
}

/// A module as the profile writer takes it.
fn module_ref(m: &unwind::ModuleInfo) -> ModuleRef<'_> {
    ModuleRef {
        start: m.range.start,
        end: m.range.end,
        file_offset: m.file_offset,
        bias: m.bias,
        build_id: &m.build_id,
        path: &m.path,
    }
}

/// The length of a module's line, as written.
fn module_line_len(m: &unwind::ModuleInfo) -> usize {
    struct Count(usize);
    impl Write for Count {
        fn write_str(&mut self, s: &str) -> fmt::Result {
            self.0 += s.len();
            Ok(())
        }
    }
    let mut n = Count(0);
    let _ = profile::write_module(&mut n, &module_ref(m));
    n.0
}

/// The length of a stack's line, as [`profile::write_stack`] writes it:
/// `stack`, its figures in decimal and its addresses in hex, each after a
/// space, and the newline.
fn stack_line_len<'f>(c: &SiteCounts, frames: impl Iterator<Item = &'f u64>) -> usize {
    let dec = |v: u64| v.checked_ilog10().map_or(1, |l| l as usize + 1);
    let hex = |v: u64| (64 - v.leading_zeros() as usize).div_ceil(4).max(1);
    5 + c.fields().iter().map(|&v| 1 + dec(v)).sum::<usize>()
        + frames.map(|&f| 1 + hex(f)).sum::<usize>()
        + 1
}

/// `fork` child handler of a recorder whose child keeps its parent's
/// stacks as its history (the Rust wrapper): the table is kept unless a
/// thread that no longer exists was changing it; then it is rebuilt from
/// nothing, as in [`after_fork_child`].
pub fn after_fork_child_keeping_stacks() {
    // SAFETY: this is the child of a fork, still with one thread.
    if unsafe { STATE.after_fork_in_child() } == AtFork::Orphaned {
        rebuild_orphaned_state();
    }
}

/// Replaces a stack table that a thread gone with the fork was changing.
fn rebuild_orphaned_state() {
    let fresh = State {
        unwinder: StackUnwinder::new(SKIP_OWN_MODULE.load(Relaxed)),
        sites: Sites::with_mean(MEAN_BYTES.load(Relaxed)),
        modules: Vec::new(),
        exact_left: 0,
        filter_counts: [0; 1 << FILTER_BITS],
    };
    // SAFETY: only from a fork child's handler, with one thread and the lock
    // free: no other access. The old state is overwritten without being
    // dropped: it may be half changed.
    unsafe { core::ptr::write(STATE.as_ptr(), fresh) };
}

/// `fork` child handler: the child starts with no stacks and no tracked
/// blocks (it frees its parent's blocks untracked), and the same modules.
/// Nothing is held across the fork (see [`SpinLock`]): a table another
/// thread was changing is rebuilt from nothing, its memory left as it is;
/// one that an interrupted frame of this very thread is changing (the
/// fork came from a signal handler) is left to that frame, and the child's
/// stacks then include its parent's.
pub fn after_fork_child() {
    // SAFETY: this is the child of a fork, still with one thread.
    match unsafe { STATE.after_fork_in_child() } {
        AtFork::HeldHere => return,
        AtFork::Orphaned => rebuild_orphaned_state(),
        AtFork::Free => {}
    }
    UNSTACKED.store(0, Relaxed);
    UNRECORDED.store(0, Relaxed);
    let mut s = STATE.lock();
    let fresh = Sites::with_mean(MEAN_BYTES.load(Relaxed));
    // Forgotten, not freed: a fork from a signal handler may have
    // interrupted the heap this memory came from in the middle of a change.
    core::mem::forget(core::mem::replace(&mut s.sites, fresh));
    if MODE.load(Relaxed) == MODE_SAMPLE {
        for slot in &FILTER {
            slot.store(0, Relaxed);
        }
        EXACT_RECORDED.store(0, Relaxed);
    } else {
        // Still in an exact prefix (if any): the child's own starts over.
        s.exact_left = EXACT_FIRST.load(Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_alloc;
    use super::*;

    #[test]
    fn weights_undo_the_sampling_probability() {
        // A block much larger than the mean is nearly always sampled.
        assert!((weight(1 << 20, 1024) - 1.0).abs() < 1e-9);
        // One of 1/1024 of the mean is sampled about 1/1024 of the time.
        assert!(
            (weight(1, 1024) - 1024.5).abs() < 0.01,
            "{}",
            weight(1, 1024)
        );
        assert_eq!(weight(1, 0), 1.0);
    }

    #[test]
    fn sites_keep_exact_figures_at_the_peak() {
        let mut s = Sites::default();
        let (a, b) = ([1u64, 2][..].to_vec(), [3u64][..].to_vec());
        s.alloc(0x100, 10, &a, 5, None);
        s.alloc(0x200, 20, &b, 5, None);
        s.alloc(0x300, 30, &a, 5, None); // peak: a 40 (2 blocks), b 20
        s.free(0x300, |_| 7);
        s.free(0x200, |_| 1);
        s.alloc(0x400, 15, &b, 2, None); // live 25 < 60: no new peak
        s.free(0x999, |_| 1); // unknown: ignored
        let (ca, cb) = (s.counts(0), s.counts(1));
        assert_eq!((ca.allocs, ca.bytes, ca.ticks), (2, 40, 17));
        assert_eq!((ca.peak_allocs, ca.peak_bytes), (2, 40));
        assert_eq!((ca.live_allocs, ca.live_bytes), (1, 10));
        assert_eq!((cb.allocs, cb.bytes, cb.ticks), (2, 35, 8));
        assert_eq!((cb.peak_allocs, cb.peak_bytes), (1, 20));
        assert_eq!((cb.live_allocs, cb.live_bytes), (1, 15));
        assert_eq!((s.sites.len(), s.frames.len()), (2, 3));
        assert_eq!((s.lost, s.degraded), (0, 0));
    }

    /// Stacks of `depth` frames, distinct for distinct `i`.
    fn stack(i: u64, depth: usize) -> Vec<u64> {
        (0..depth as u64)
            .map(|d| 0x5555_0000_1000 + d * 0x40 + (i << 12) * (d == 0) as u64)
            .collect()
    }

    #[test]
    fn stacks_are_found_again_and_kept_once() {
        let mut s = Sites::default();
        let stacks: Vec<Vec<u64>> = (0..3000)
            .map(|i| stack(i, 1 + (i % 128) as usize))
            .collect();
        for round in 0..2 {
            for (i, f) in stacks.iter().enumerate() {
                assert_eq!(s.site(f), Some(i as u32), "round {round}");
            }
        }
        // Prefixes of a stack are other stacks.
        assert_eq!(s.site(&stacks[200][..3]), Some(3000));
        assert_eq!(s.sites.len(), 3001);
        let words: usize = stacks.iter().map(|f| f.len()).sum();
        assert_eq!(s.frames.len(), words + 3);
        // Sites whose stacks share a hash are told apart by the other half
        // of their fingerprint: chain `a` behind `b` under `a`'s hash, as a
        // collision would.
        let (a, b) = (stack(5, 4), stack(6, 4));
        let (ia, ib) = (s.site(&a).unwrap(), s.site(&b).unwrap());
        assert_eq!((ia, ib), (3001, 3002));
        *s.index.get_mut(StackHash::of(&a).hash).unwrap() = ib;
        s.sites.get_mut(ib as usize).next = ia;
        assert_eq!(s.site(&a), Some(ia));
        assert_eq!(s.site(&b), Some(ib));
        assert_eq!(s.sites.len(), 3003);
    }

    /// The tables' largest single allocation stays within a shard's bound
    /// (3.1 MiB) however many blocks and stacks there are; one doubling
    /// table of 300,000 blocks would ask for 13 MB at once.
    #[test]
    fn sites_never_allocate_more_than_a_shard_at_once() {
        let mut s = Sites::default();
        let stacks: Vec<Vec<u64>> = (0..5000).map(|i| stack(i, 40)).collect();
        let ((), largest) = test_alloc::largest_allocation(|| {
            for b in 0..300_000usize {
                s.alloc(0x7f00_0000_0000 + b * 32, 24, &stacks[b % 5000], 10, None);
            }
            for b in (0..300_000usize).step_by(2) {
                s.free(0x7f00_0000_0000 + b * 32, |_| 10);
            }
        });
        assert!(largest <= MAX_STEP_BYTES, "{largest}");
        assert_eq!(
            largest,
            FRAME_CHUNK * 8,
            "the largest step is a frame chunk"
        );
        assert_eq!((s.blocks.len(), s.sites.len()), (150_000, 5000));
        assert_eq!((s.lost, s.degraded), (0, 0));
    }

    /// Measures what the tables allocate for 10 million live blocks (slow:
    /// run with `cargo test --release -p allocmux --lib -- --ignored
    /// ten_million --nocapture`).
    #[test]
    #[ignore]
    fn ten_million_blocks() {
        let mut s = Sites::default();
        let stacks: Vec<Vec<u64>> = (0..100_000).map(|i| stack(i, 30)).collect();
        let n = 10_000_000usize;
        let ((), largest) = test_alloc::largest_allocation(|| {
            for b in 0..n {
                s.alloc(
                    0x7f00_0000_0000 + b * 48,
                    32,
                    &stacks[b % stacks.len()],
                    10,
                    None,
                );
            }
        });
        println!(
            "{n} blocks, {} stacks: largest single allocation {largest} bytes",
            s.sites.len()
        );
        assert!(largest <= MAX_STEP_BYTES);
        assert_eq!((s.blocks.len(), s.degraded), (n, 0));
    }

    /// Without memory, a new stack is lost and a block that needs room is
    /// untracked, each counted as degraded; the figures stay consistent
    /// and nothing aborts.
    #[test]
    fn without_memory_stacks_and_blocks_are_dropped_and_counted() {
        let mut s = Sites::default();
        let (a, b) = (stack(1, 5), stack(2, 5));
        s.alloc(0x1000, 100, &a, 1, None);
        // Four blocks under the page-map leaf of the first, which need no
        // room, and four in the next leaf (a MiB on), which does.
        let same: Vec<usize> = (1..=4)
            .map(|i| 0x1000 + i * 32)
            .chain((0..4).map(|i| 0x1000 + (1 << 20) + i * 32))
            .collect();
        test_alloc::without_memory(|| {
            s.alloc(0x2000, 100, &b, 1, None); // a new stack: no room
            for &addr in &same {
                s.alloc(addr, 10, &a, 1, None);
            }
        });
        assert_eq!(s.sites.len(), 1);
        assert_eq!((s.lost, s.degraded), (1, 5));
        let c = s.counts(0);
        assert_eq!((c.allocs, c.bytes), (9, 180));
        assert_eq!((c.live_allocs, c.live_bytes), (5, 140));
        // Freeing them all leaves only the first block live.
        for &addr in &same {
            s.free(addr, |_| 0);
        }
        let c = s.counts(0);
        assert_eq!((c.live_allocs, c.live_bytes), (1, 100));
        assert_eq!(s.live, 100.0);
    }

    fn snapshot_of(sites: &mut Sites, modules: Vec<unwind::ModuleInfo>) -> Snapshot {
        let mut snap = Snapshot::new();
        snap.mode = StackMode::Exact;
        snap.lost = sites.lost;
        snap.degraded = sites.degraded;
        snap.modules = modules;
        assert!(snap.stacks.try_reserve_total(sites.sites.len()));
        assert!(snap.frames.try_reserve_total(sites.frames.len()));
        for c in sites.frames.as_slices() {
            snap.frames.extend_from_slice(c);
        }
        for i in 0..sites.sites.len() {
            let site = sites.sites.get(i);
            snap.stacks.push(Copied {
                counts: sites.counts(i),
                frames_at: site.frames_at,
                depth: site.depth,
            });
        }
        snap
    }

    fn module(path: &str) -> unwind::ModuleInfo {
        unwind::ModuleInfo {
            range: 0x5555_0000_0000..0x5555_0010_0000,
            file_offset: 0x1000,
            bias: 0x5555_0000_0000,
            build_id: vec![0xab; 20],
            path: path.as_bytes().to_vec(),
        }
    }

    #[test]
    fn line_lengths_are_exact() {
        for (counts, frames) in [
            (SiteCounts::default(), vec![1u64]),
            (
                SiteCounts {
                    samples: 9,
                    allocs: 10,
                    bytes: u64::MAX,
                    ticks: 99,
                    peak_allocs: 100,
                    peak_bytes: 1,
                    live_allocs: 999_999,
                    live_bytes: 1_000_000,
                },
                vec![0xf, 0x10, u64::MAX, 0x5555_0000_1234],
            ),
        ] {
            let mut text = String::new();
            profile::write_stack(&mut text, &counts, &frames).unwrap();
            assert_eq!(stack_line_len(&counts, frames.iter()), text.len(), "{text}");
        }
        let m = module("/usr/lib/with space/%odd\n");
        let mut text = String::new();
        profile::write_module(&mut text, &module_ref(&m)).unwrap();
        assert_eq!(module_line_len(&m), text.len(), "{text}");
    }

    /// A snapshot writes what `profile` reads back; without memory for all
    /// its lines it writes those that fit in the room it has, and counts
    /// the rest as degraded.
    #[test]
    fn snapshots_write_whole_or_what_fits() {
        let mut sites = Sites::default();
        for i in 0..40 {
            sites.alloc(
                0x1000 + i * 64,
                8 + i as u64,
                &stack(i as u64, 20 + i),
                1,
                None,
            );
        }
        let snap = snapshot_of(&mut sites, vec![module("/bin/a"), module("/lib/b.so")]);
        let section = |stack_lines: &str| {
            format!(
                "allocmux-profile 1
process
{stack_lines}end
"
            )
        };
        let mut whole = String::new();
        snap.write(&mut whole).unwrap();
        let p = &profile::parse(&section(&whole)).unwrap()[0];
        assert_eq!((p.stacks.stacks.len(), p.stacks.modules.len()), (40, 2));
        assert_eq!((p.stacks.lost, p.stacks.degraded), (0, 0));
        assert!(
            !whole.contains("stacks_degraded"),
            "written only when not 0"
        );
        for (i, st) in p.stacks.stacks.iter().enumerate() {
            assert_eq!(st.frames, stack(i as u64, 20 + i));
            assert_eq!(st.counts, sites.counts(i));
        }
        // Room for the first lines, the modules and five stacks only.
        let lines: Vec<&str> = whole.lines().collect();
        let fits: usize = lines[2..2 + 2 + 5].iter().map(|l| l.len() + 1).sum();
        let mut out = String::with_capacity(fits + HEAD_ROOM);
        test_alloc::without_memory(|| snap.write(&mut out)).unwrap();
        let p = &profile::parse(&section(&out)).unwrap()[0];
        assert_eq!((p.stacks.stacks.len(), p.stacks.modules.len()), (5, 2));
        assert_eq!(p.stacks.degraded, 35, "{out}");
        assert_eq!(
            p.stacks.stacks[..],
            profile::parse(&section(&whole)).unwrap()[0].stacks.stacks[..5]
        );
        // Room for nothing but the first lines: still a readable section.
        let mut out = String::with_capacity(HEAD_ROOM);
        test_alloc::without_memory(|| snap.write(&mut out)).unwrap();
        let p = &profile::parse(&section(&out)).unwrap()[0];
        assert_eq!((p.stacks.stacks.len(), p.stacks.degraded), (0, 42));
    }

    #[test]
    fn byte_sampling_is_poisson_with_the_set_mean() {
        let t = StackThread::new();
        t.rearm(4096);
        let (mut sampled, mut est_bytes, mut est_calls) = (0u64, 0.0, 0.0);
        let calls = 400_000u64;
        for i in 0..calls {
            let size = 16 + (i % 7) * 100;
            if t.take(size as usize) {
                sampled += 1;
                est_bytes += weight(size, 4096) * size as f64;
                est_calls += weight(size, 4096);
                t.rearm(4096);
            }
        }
        let bytes: u64 = (0..calls).map(|i| 16 + (i % 7) * 100).sum();
        // Each allocation is sampled with probability 1 - exp(-size / mean).
        let expected: f64 = (0..calls)
            .map(|i| -(-((16 + (i % 7) * 100) as f64) / 4096.0).exp_m1())
            .sum();
        assert!(
            (sampled as f64 / expected - 1.0).abs() < 0.05,
            "{sampled} vs {expected}"
        );
        assert!(
            (est_bytes / bytes as f64 - 1.0).abs() < 0.05,
            "{est_bytes} vs {bytes}"
        );
        assert!(
            (est_calls / calls as f64 - 1.0).abs() < 0.05,
            "{est_calls} vs {calls}"
        );
    }
    #[test]
    fn a_repeated_stack_goes_to_the_site_it_went_to_last() {
        let mut s = Sites::default();
        let a = [0x10, 0x20, 0x30];
        let b = [0x11, 0x21];
        let first = |slot| Some(Repeat { slot, same: false });
        let again = |slot| Some(Repeat { slot, same: true });
        s.alloc(0x1000, 8, &a, 1, first(3));
        s.alloc(0x2000, 8, &b, 1, first(4));
        // Slot 3's stack again: its site, without a lookup; slot 4's too.
        s.alloc(0x3000, 8, &a, 1, again(3));
        s.alloc(0x4000, 8, &b, 1, again(4));
        let counts = |s: &Sites, i: u32| s.sites.get(i as usize).allocs;
        assert_eq!((counts(&s, 0), counts(&s, 1)), (2.0, 2.0));
        // A new table knows no slot's site: it looks the stack up.
        let mut fresh = Sites::default();
        fresh.alloc(0x1000, 8, &b, 1, again(3));
        assert_eq!(fresh.sites.len(), 1);
        assert_eq!(fresh.last_site[3], 0);
    }
}
