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
//! rare false positives) take the lock and look the block up.
//!
//! Everything else, the unwinder, the stack table and the block map, sits
//! behind one spin lock, taken only by sampled calls, frees of tracked
//! blocks and the profile writer.

use core::cell::Cell;
use core::fmt::{self, Write};
use core::hash::{BuildHasherDefault, Hasher};
use core::ops::Range;
use core::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering::Relaxed};
use std::collections::HashMap;

use super::clock::Tsc;
use super::lock::SpinLock;
use super::thread::{Body, ThreadState, enter};
use super::unwind::{self, StackUnwinder};
use crate::profile::{self, ModuleRef, StackMode};
use crate::stats::SiteCounts;

/// What a hooked call does to blocks, for stack recording. Implemented by
/// the shim's bodies (and the Rust wrapper's) next to their [`Body`].
pub trait StackBody: Body + Copy {
    /// The bytes requested, for calls that hand out a block.
    fn request(&self) -> Option<usize>;
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
}

/// A thread's stack-sampling state; all-zero is a valid fresh state.
#[derive(Debug)]
#[repr(C)]
pub struct StackThread {
    /// Bytes left before the next sampled allocation; a call subtracts
    /// its size and is sampled when the result is negative.
    countdown: Cell<i64>,
    rng: Cell<u64>,
    /// This thread's stack (lowest address, one past the highest), found
    /// at its first sample; `stack_hi == 0` until then.
    stack_lo: Cell<u64>,
    stack_hi: Cell<u64>,
    /// Inside the stack recorder: calls made from here (by the unwinder,
    /// the tables, the allocator) are recorded without stacks.
    busy: Cell<bool>,
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
        }
    }

    /// Counts `size` requested bytes; true if this allocation is sampled.
    #[inline(always)]
    fn take(&self, size: usize) -> bool {
        let c = self.countdown.get().wrapping_sub(size as i64);
        self.countdown.set(c);
        c < 0
    }

    /// Whether the countdown has been drawn for this thread yet.
    fn armed(&self) -> bool {
        self.rng.get() != 0
    }

    /// Draws the gap to the next sampled byte (`mean` 0: exact mode).
    fn rearm(&self, mean: u64) {
        let mut x = self.rng.get();
        if x == 0 {
            x = Tsc::now() ^ (self as *const StackThread as u64).rotate_left(29) | 1;
        }
        if mean == 0 {
            self.rng.set(x);
            self.countdown.set(-1); // exact: every allocation
            return;
        }
        let u = super::random::next_uniform(&mut x);
        self.rng.set(x);
        let gap = -(u.ln()) * mean as f64;
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
static MODE: AtomicU8 = AtomicU8::new(MODE_OFF);
static CONFIGURED: AtomicBool = AtomicBool::new(false);
const MODE_OFF: u8 = 0;
const MODE_SAMPLE: u8 = 1;
const MODE_EXACT: u8 = 2;

/// Allocations made from inside the recorder (looking up a thread's stack
/// bounds allocates), counted but without a stack. Lock-free: the lock may
/// be held by the very thread that makes them.
static UNSTACKED: AtomicU64 = AtomicU64::new(0);

/// Counting filter over tracked block addresses: a free whose slot is 0
/// cannot be of a tracked block. Saturated slots stay saturated (false
/// positives only). Exact mode saturates every slot.
const FILTER_BITS: u32 = 14;
static FILTER: [AtomicU8; 1 << FILTER_BITS] = [const { AtomicU8::new(0) }; 1 << FILTER_BITS];

#[inline(always)]
fn filter_slot(addr: usize) -> &'static AtomicU8 {
    let h = ((addr as u64) >> 4).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - FILTER_BITS);
    &FILTER[h as usize]
}

/// Whether `addr` may be a tracked block (never false for one that is).
#[inline(always)]
fn maybe_tracked(addr: usize) -> bool {
    filter_slot(addr).load(Relaxed) != 0
}

/// Turns stack recording on. Call once, before the hooks that use
/// [`enter_stacks`] are installed. `skip_own_module` leaves the frames of
/// the module holding this code out of every stack (the shim's).
pub fn configure(mode: StackMode, skip_own_module: bool) {
    // Threads racing through their first call all configure the same;
    // the first one does it.
    if CONFIGURED.swap(true, Relaxed) {
        return;
    }
    let mut st = STATE.lock();
    st.unwinder = StackUnwinder::new(skip_own_module);
    match mode {
        StackMode::Off => MODE.store(MODE_OFF, Relaxed),
        StackMode::Sample { mean_bytes } => {
            st.sites.mean = mean_bytes.max(1);
            MEAN_BYTES.store(mean_bytes.max(1), Relaxed);
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
    let old = body.released();
    if sample || (old != 0 && maybe_tracked(old)) {
        // SAFETY: forwarded from the caller.
        unsafe { stacked(t, st, body, sample) }
    } else {
        // SAFETY: forwarded from the caller.
        unsafe { enter(t, body) }
    }
}

#[cold]
#[inline(never)]
#[allow(improper_ctypes_definitions)] // called from Rust only; extern "C" so it cannot unwind
unsafe extern "C" fn stacked<B: StackBody>(
    t: &ThreadState,
    st: &StackThread,
    body: B,
    mut sample: bool,
) -> B::Out {
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
    let mut buf = unwind::frame_buf();
    let frames = if sample { capture(st, &mut buf) } else { &[] };
    let start = Tsc::now();
    // SAFETY: forwarded from the caller.
    let out = unsafe { enter(t, body) };
    let ticks = Tsc::now()
        .wrapping_sub(start)
        .saturating_sub(super::thread::tsc_overhead())
        // Weighted by the stack sample's weight: capped like the time sample.
        .min(super::thread::MAX_SAMPLED_TICKS);
    let old = body.released();
    let released = if old != 0 && body.did_release(&out) {
        old
    } else {
        0
    };
    let new = if sample { body.handed_out(&out) } else { 0 };
    if released != 0 || new != 0 {
        let mut s = STATE.lock();
        if released != 0 {
            // The call's time goes to the new block's stack when there is
            // one (it is an allocation), else to the freed block's.
            s.sites.free(released, if new != 0 { 0 } else { ticks });
        }
        if new != 0 {
            let size = body.request().unwrap_or(0) as u64;
            if frames.is_empty() {
                s.sites.lost += 1;
            } else {
                s.sites.alloc(new, size, frames, ticks);
            }
        }
    }
    if sample {
        st.rearm(MEAN_BYTES.load(Relaxed));
    } else {
        st.countdown.set(resume);
    }
    st.busy.set(false);
    out
}

/// Unwinds the calling thread into `buf`, returning the frames found (none
/// if that is not possible).
fn capture<'b>(st: &StackThread, buf: &'b mut unwind::FrameBuf) -> &'b [u64] {
    let Some(stack) = st.stack() else { return &[] };
    // Outside the lock: it takes the loader's lock (see `unwind`).
    let generation = unwind::generation();
    let mut s = STATE.lock();
    if !s.unwinder.is_current(generation) {
        drop(s);
        let modules = unwind::loaded_modules();
        s = STATE.lock();
        s.remember_modules(&modules.0);
        s.unwinder.install(generation, modules);
    }
    s.unwinder.capture(stack, buf)
}

#[derive(Default)]
struct AddrHasher(u64);

impl Hasher for AddrHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        // A stack key arrives here as one slice of whole words.
        let mut words = bytes.chunks_exact(8);
        for w in &mut words {
            self.write_u64(u64::from_ne_bytes(w.try_into().expect("8 bytes")));
        }
        for &b in words.remainder() {
            self.write_u64(b as u64);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x517C_C1B7_2722_0A95);
    }
    fn write_usize(&mut self, v: usize) {
        self.write_u64(v as u64);
    }
}

type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<AddrHasher>>;

/// One distinct stack's running sums (estimates, hence floats).
#[derive(Default)]
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
}

/// A tracked live block.
#[derive(Clone, Copy)]
struct Block {
    site: u32,
    size: u64,
}

/// The stacks seen, the tracked blocks, and the peak bookkeeping.
#[derive(Default)]
struct Sites {
    index: FastMap<Box<[u64]>, u32>,
    frames: Vec<Box<[u64]>>,
    sites: Vec<Site>,
    blocks: FastMap<usize, Block>,
    /// Estimated live bytes of all tracked blocks, and their highest value.
    live: f64,
    peak: f64,
    /// Operations so far, and the number of the one that set the peak.
    ops: u64,
    peak_op: u64,
    lost: u64,
    /// Mean bytes between samples (0: exact).
    mean: u64,
}

impl Sites {
    fn site(&mut self, frames: &[u64]) -> u32 {
        if let Some(&i) = self.index.get(frames) {
            return i;
        }
        let i = self.sites.len() as u32;
        self.frames.push(frames.into());
        self.index.insert(frames.into(), i);
        self.sites.push(Site::default());
        i
    }

    /// Prepares site `i` for a change of its live figures, keeping the
    /// per-site value at the peak exact in O(1): a site untouched since the
    /// operation that set the peak still holds its peak value as its live
    /// value, so that value is saved before the first change after a peak.
    fn touch(&mut self, i: u32) -> &mut Site {
        self.ops += 1;
        let peak_op = self.peak_op;
        let s = &mut self.sites[i as usize];
        if s.stamp <= peak_op {
            s.peak_allocs = s.live_allocs;
            s.peak_bytes = s.live_bytes;
        }
        s.stamp = self.ops;
        s
    }

    fn alloc(&mut self, addr: usize, size: u64, frames: &[u64], ticks: u64) {
        let i = self.site(frames);
        let w = weight(size, self.mean);
        let s = self.touch(i);
        s.samples += 1;
        s.allocs += w;
        s.bytes += w * size as f64;
        s.ticks += w * ticks as f64;
        s.live_allocs += w;
        s.live_bytes += w * size as f64;
        self.live += w * size as f64;
        if self.live > self.peak {
            self.peak = self.live;
            self.peak_op = self.ops;
        }
        if let Some(old) = self.blocks.insert(addr, Block { site: i, size }) {
            // The allocator handed out a block we thought live: its free
            // was not seen (freed before recording began, or by a path
            // around the hooks). Forget the stale one.
            self.forget(old, 0);
        } else if MODE.load(Relaxed) == MODE_SAMPLE {
            let slot = filter_slot(addr);
            let v = slot.load(Relaxed);
            if v < u8::MAX {
                slot.store(v + 1, Relaxed);
            }
        }
    }

    fn free(&mut self, addr: usize, ticks: u64) {
        let Some(b) = self.blocks.remove(&addr) else {
            return; // a filter false positive, or an untracked block
        };
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
        let w = weight(b.size, self.mean);
        let s = self.touch(b.site);
        s.live_allocs -= w;
        s.live_bytes -= w * b.size as f64;
        s.ticks += w * ticks as f64;
        self.live -= w * b.size as f64;
    }

    fn counts(&self, i: usize) -> SiteCounts {
        let s = &self.sites[i];
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

/// Everything behind the stack lock.
struct State {
    unwinder: StackUnwinder,
    sites: Sites,
    /// Every module seen since start-up (unloaded ones too: their stacks
    /// stay in the profile and still need symbolizing).
    modules: Vec<unwind::ModuleInfo>,
}

impl State {
    fn remember_modules(&mut self, found: &[unwind::ModuleInfo]) {
        for m in found {
            if !self
                .modules
                .iter()
                .any(|k| k.range == m.range && k.path == m.path)
            {
                self.modules.push(m.clone());
            }
        }
    }
}

static STATE: SpinLock<State> = SpinLock::new(State {
    unwinder: StackUnwinder::new(false),
    sites: Sites {
        index: HashMap::with_hasher(BuildHasherDefault::new()),
        frames: Vec::new(),
        sites: Vec::new(),
        blocks: HashMap::with_hasher(BuildHasherDefault::new()),
        live: 0.0,
        peak: 0.0,
        ops: 0,
        peak_op: 0,
        lost: 0,
        mean: 0,
    },
    modules: Vec::new(),
});

/// A copy of the stack table, taken under the lock and written out after
/// it is released, so a large profile never stalls the allocating threads
/// while it is formatted. Keep one and reuse it: its buffers stay allocated.
#[derive(Debug, Default)]
pub struct Snapshot {
    mode: StackMode,
    lost: u64,
    modules: Vec<unwind::ModuleInfo>,
    counts: Vec<SiteCounts>,
    /// Each stack's frames, one after the other; `ends[i]` closes stack `i`.
    frames: Vec<u64>,
    ends: Vec<usize>,
}

impl Snapshot {
    /// An empty copy.
    pub const fn new() -> Self {
        Snapshot {
            mode: StackMode::Off,
            lost: 0,
            modules: Vec::new(),
            counts: Vec::new(),
            frames: Vec::new(),
            ends: Vec::new(),
        }
    }

    /// Copies the current stacks (nothing when stacks are off). If the
    /// stack lock stays taken (the caller may be a signal handler that
    /// interrupted this very thread inside the recorder, on its way to
    /// `_exit`), the previous copy is kept rather than waiting forever.
    pub fn take(&mut self) {
        self.mode = mode();
        if self.mode == StackMode::Off {
            return; // `write` writes nothing then
        }
        let Some(s) = lock_bounded() else { return };
        self.counts.clear();
        self.frames.clear();
        self.ends.clear();
        self.lost = s.sites.lost + UNSTACKED.load(Relaxed);
        if self.modules.len() != s.modules.len() {
            self.modules.clone_from(&s.modules);
        }
        for (i, frames) in s.sites.frames.iter().enumerate() {
            self.counts.push(s.sites.counts(i));
            self.frames.extend_from_slice(frames);
            self.ends.push(self.frames.len());
        }
    }

    /// Writes the stack lines of the profile (mode, modules, one line per
    /// stack).
    pub fn write<W: Write>(&self, w: &mut W) -> fmt::Result {
        if self.mode == StackMode::Off {
            return Ok(());
        }
        profile::write_stack_mode(w, self.mode, self.lost, 0)?;
        for m in &self.modules {
            profile::write_module(
                w,
                &ModuleRef {
                    start: m.range.start,
                    end: m.range.end,
                    file_offset: m.file_offset,
                    bias: m.bias,
                    build_id: &m.build_id,
                    path: &m.path,
                },
            )?;
        }
        let mut start = 0;
        for (c, &end) in self.counts.iter().zip(&self.ends) {
            profile::write_stack(w, c, &self.frames[start..end])?;
            start = end;
        }
        Ok(())
    }
}

/// The stack lock, if it can be had within about a thousand yields.
fn lock_bounded() -> Option<super::lock::SpinGuard<'static, State>> {
    for _ in 0..1000 {
        if let Some(g) = STATE.try_lock() {
            return Some(g);
        }
        std::thread::yield_now();
    }
    None
}

/// `fork` prepare handler: hold the stack lock so the child gets it consistent.
pub fn before_fork() {
    STATE.lock_and_forget();
}

/// `fork` parent handler.
pub fn after_fork_parent() {
    // SAFETY: `before_fork` took the lock in this thread and forgot the guard.
    unsafe { STATE.force_unlock() };
}

/// `fork` child handler: the child starts with no stacks and no tracked
/// blocks (it frees its parent's blocks untracked), and the same modules.
pub fn after_fork_child() {
    // SAFETY: as in `after_fork_parent`; the child has no other thread.
    unsafe { STATE.force_unlock() };
    UNSTACKED.store(0, Relaxed);
    let mut s = STATE.lock();
    s.sites = Sites {
        mean: s.sites.mean,
        ..Sites::default()
    };
    if MODE.load(Relaxed) == MODE_SAMPLE {
        for slot in &FILTER {
            slot.store(0, Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
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
        s.alloc(0x100, 10, &a, 5);
        s.alloc(0x200, 20, &b, 5);
        s.alloc(0x300, 30, &a, 5); // peak: a 40 (2 blocks), b 20
        s.free(0x300, 7);
        s.free(0x200, 1);
        s.alloc(0x400, 15, &b, 2); // live 25 < 60: no new peak
        s.free(0x999, 1); // unknown: ignored
        let (ca, cb) = (s.counts(0), s.counts(1));
        assert_eq!((ca.allocs, ca.bytes, ca.ticks), (2, 40, 17));
        assert_eq!((ca.peak_allocs, ca.peak_bytes), (2, 40));
        assert_eq!((ca.live_allocs, ca.live_bytes), (1, 10));
        assert_eq!((cb.allocs, cb.bytes, cb.ticks), (2, 35, 8));
        assert_eq!((cb.peak_allocs, cb.peak_bytes), (1, 20));
        assert_eq!((cb.live_allocs, cb.live_bytes), (1, 15));
        assert_eq!(s.frames.len(), 2);
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
}
