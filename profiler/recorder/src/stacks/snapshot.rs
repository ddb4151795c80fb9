//! A copy of the stack table taken under its lock and written after
//! ([`Snapshot`]), and the table after `fork`.

use super::*;

/// One stack of a [`Snapshot`]: its figures, and where its return
/// addresses are in the snapshot's frame store.
#[derive(Clone, Copy, Debug)]
pub(super) struct Copied {
    /// Its ticks only those charged as such (see `mean_calls`).
    pub(super) counts: SiteCounts,
    /// Its weighted calls charged the process's mean time per timed call
    /// ([`Charge::Mean`]).
    pub(super) mean_calls: f64,
    /// Its freed blocks' lifetimes.
    pub(super) lifetimes: Lifetimes,
    pub(super) frames_at: u64,
    pub(super) depth: u32,
}

/// A copy of the stack table, taken under the lock and written out after
/// it is released, so a large profile never stalls the allocating threads
/// while it is formatted. Keep one and reuse it: its buffers stay
/// allocated. They are chunked like the recorder's tables, so a copy of
/// any size allocates at most 512 KiB at a time, and fallibly: a copy
/// there is no memory for keeps the previous one.
#[derive(Debug, Default)]
pub struct Snapshot {
    pub(super) mode: StackMode,
    pub(super) exact_first: u64,
    pub(super) lost: u64,
    pub(super) degraded: u64,
    /// The process's mean TSC ticks per timed call when the copy was
    /// taken (0 if none was timed): what a call charged
    /// [`Charge::Mean`] counts for.
    pub(super) call_ticks: f64,
    /// The TSC ticks a µs lifetimes were bucketed with (0: not counted).
    pub(super) lifetime_ticks_per_us: u64,
    pub(super) modules: Vec<unwind::ModuleInfo>,
    pub(super) stacks: Chunks<Copied, COPY_CHUNK>,
    pub(super) frames: Chunks<u64, FRAME_CHUNK>,
}

/// Room for the `stacks`, `stacks_exact_first`, `stacks_lost`,
/// `stacks_degraded` and `stacks_lifetimes` lines and the section's `end`,
/// which are written even when nothing else fits.
pub(super) const HEAD_ROOM: usize = 192;

impl Snapshot {
    /// An empty copy.
    pub const fn new() -> Self {
        Snapshot {
            mode: StackMode::Off,
            exact_first: 0,
            lost: 0,
            degraded: 0,
            call_ticks: 0.0,
            lifetime_ticks_per_us: 0,
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
    ///
    /// `totals` are the process's, as the profile written from the copy
    /// carries them: a stack's calls charged the mean
    /// ([`Charge::Mean`], sampled calls made larger in sample mode) count
    /// for their `timed_ticks / timed_calls` each, so that the stacks'
    /// times add up to the process's sampled time as the stacks' estimated
    /// calls add up to its calls, whatever any one call took.
    pub fn take(&mut self, totals: &Totals) {
        self.call_ticks = mean_call_ticks(totals);
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
        self.lifetime_ticks_per_us = s.sites.ticks_per_us;
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
                mean_calls: site.mean_calls,
                lifetimes: s.sites.lifetimes(i),
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

    /// The figures of stack `i`, as the profile writes them.
    pub fn counts(&self, i: usize) -> SiteCounts {
        self.resolved(self.stacks.get(i))
    }

    /// The figures of stack `i` with only the ticks charged as such, and
    /// its weighted calls charged the mean ([`Charge::Mean`]): for a
    /// delta, whose start is priced at the end's mean.
    pub(crate) fn unresolved(&self, i: usize) -> (SiteCounts, f64) {
        let c = self.stacks.get(i);
        (c.counts, c.mean_calls)
    }

    /// `calls` charged the mean, in ticks at this copy's mean.
    pub(crate) fn mean_ticks(&self, calls: f64) -> u64 {
        (calls * self.call_ticks).max(0.0).round() as u64
    }

    /// `c`'s figures, its calls charged the mean priced at this copy's.
    pub(super) fn resolved(&self, c: &Copied) -> SiteCounts {
        let mut counts = c.counts;
        counts.ticks = counts.ticks.saturating_add(self.mean_ticks(c.mean_calls));
        counts
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
    pub(super) fn line_len(&self, c: &Copied) -> usize {
        let (a, b) = self.frames.slices(c.frames_at as usize, c.depth as usize);
        stack_line_len(&self.resolved(c), &c.lifetimes, a.iter().chain(b))
    }

    /// The return addresses of `c`, gathered into `buf`.
    pub(super) fn frames_of<'b>(
        &self,
        c: &Copied,
        buf: &'b mut [u64; unwind::MAX_FRAMES],
    ) -> &'b [u64] {
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
            // Exact stacks see every allocation, so count temporaries.
            true,
            self.lifetime_ticks_per_us,
        )?;
        for m in &self.modules[..modules] {
            profile::write_module(out, &module_ref(m))?;
        }
        let mut buf = [0u64; unwind::MAX_FRAMES];
        for i in 0..stacks {
            let c = self.stacks.get(i);
            let frames = self.frames_of(c, &mut buf);
            profile::write_stack(out, &self.resolved(c), &c.lifetimes, frames)?;
        }
        Ok(())
    }
}

/// The mean TSC ticks per call of the calls the process's time sample
/// timed (capped as the process total caps them), 0 if none was.
pub(super) fn mean_call_ticks(t: &Totals) -> f64 {
    if t.timed_calls == 0 {
        0.0
    } else {
        t.timed_ticks as f64 / t.timed_calls as f64
    }
}

/// A module as the profile writer takes it.
pub(super) fn module_ref(m: &unwind::ModuleInfo) -> ModuleRef<'_> {
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
pub(super) fn module_line_len(m: &unwind::ModuleInfo) -> usize {
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

/// The length of a stack's lines, as [`profile::write_stack`] writes
/// them: `stack`, its figures in decimal and its addresses in hex, each
/// after a space, and the newline; then, if any lifetime is counted,
/// `lifetimes` and its figures likewise.
pub(super) fn stack_line_len<'f>(
    c: &SiteCounts,
    lifetimes: &Lifetimes,
    frames: impl Iterator<Item = &'f u64>,
) -> usize {
    let dec = |v: u64| v.checked_ilog10().map_or(1, |l| l as usize + 1);
    let hex = |v: u64| (64 - v.leading_zeros() as usize).div_ceil(4).max(1);
    let stack = 5
        + c.fields().iter().map(|&v| 1 + dec(v)).sum::<usize>()
        + frames.map(|&f| 1 + hex(f)).sum::<usize>()
        + 1;
    let lifetimes = if lifetimes.is_empty() {
        0
    } else {
        9 + lifetimes.freed.iter().map(|&v| 1 + dec(v)).sum::<usize>()
            + 1
            + dec(lifetimes.ticks)
            + 1
    };
    stack + lifetimes
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

/// Empty tables for the mode and lifetime clock configured.
fn fresh_sites() -> Sites {
    let mut sites = Sites::with_mean(MEAN_BYTES.load(Relaxed));
    sites.set_lifetime_clock(LIFETIME_TICKS_PER_US.load(Relaxed));
    sites
}

/// Replaces a stack table that a thread gone with the fork was changing.
pub(super) fn rebuild_orphaned_state() {
    let fresh = State {
        unwinder: StackUnwinder::new(SKIP_OWN_MODULE.load(Relaxed)),
        sites: fresh_sites(),
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
    TEMPORARIES.store(0, Relaxed);
    let mut s = STATE.lock();
    let fresh = fresh_sites();
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
