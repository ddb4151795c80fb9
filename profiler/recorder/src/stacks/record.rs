//! Recording one call's stack: [`enter_stacks`] (exact mode and the
//! prefix), `stacked` (the call made, timed and its stack captured under
//! the table's lock), and the capture itself.

use super::*;

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

/// What a stack is charged for one recorded call: `Ticks`, a time of its
/// own, or `Mean`, one call at the process's mean time per timed call,
/// which the profile writer resolves ([`Snapshot::take`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Charge {
    /// This many TSC ticks (in exact mode, the time sample's weighted
    /// ticks of the call; else as measured).
    Ticks(u64),
    /// One call at the process's mean time per timed call (the
    /// profile's `timed_ticks / timed_calls`) when the profile is written.
    Mean,
}

impl From<u64> for Charge {
    fn from(ticks: u64) -> Self {
        Charge::Ticks(ticks)
    }
}

/// What a stack is charged for a sampled call made larger or aligned
/// ([`StackBody::PROMOTES`]), or for the release of a block so made, of
/// `size` requested bytes, which measured `measured` ticks. Such a call is
/// not the program's: a 4 KiB block is served and freed by other paths
/// than a 100-byte one, so its stack would be charged for work the program
/// never asked for (on the churn, the stacks' times came to 7 times the
/// process's under glibc). It is charged instead one call at the process's
/// mean time per timed call, resolved when the profile is written
/// ([`Charge::Mean`]), which is what the process total charges each call:
/// the stacks' times then add up to the process's sampled time as their
/// estimated calls add up to its calls, whatever the calls took, and a
/// stack's time is its calls' share of it. (Charged the thread's mean so
/// far, one preempted call moved the charge of every later sample, and the
/// stacks' sum read up to 1.8 times the process's under load.) Blocks
/// large enough to be timed for themselves ([`EXACT_TIMING_BYTES`]) keep
/// their measured time.
pub(super) fn promoted_call_ticks(size: u64, measured: u64) -> Charge {
    if size >= crate::thread::EXACT_TIMING_BYTES as u64 {
        Charge::Ticks(measured)
    } else {
        Charge::Mean
    }
}

#[cold]
#[inline(never)]
#[allow(improper_ctypes_definitions)] // called from Rust only; extern "C" so it cannot unwind
pub(super) unsafe extern "C" fn stacked<B: StackBody>(
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
            promoted_call_ticks(size, ticks)
        } else {
            Charge::Ticks(ticks)
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
    // Every allocation is seen here in exact mode only (in sample mode the
    // thread's unsampled ones are not), so only there are temporaries told.
    let temporary = MEAN_BYTES.load(Relaxed) == 0
        && st.note_blocks(released, new, B::RELEASES && body.request().is_none());
    record_call(st, sample, released, new, size, temporary, charge);
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
/// block at `released` (a temporary allocation of its stack when
/// `temporary`) and the new block at `new` (of `size` requested bytes)
/// with the calling thread's stack, `charge(size)` being what a block's
/// stack is charged for the call. Either may be 0 (none). Called
/// by the thread that made the call, marked busy, right after it.
#[inline(always)]
pub(super) fn record_call(
    st: &StackThread,
    sample: bool,
    released: usize,
    new: usize,
    size: u64,
    temporary: bool,
    charge: impl Fn(u64) -> Charge,
) {
    if released == 0 && new == 0 {
        return;
    }
    // The call's time: the new block's birth, the released one's death.
    let now = Tsc::now_unordered();
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
    if sample {
        count_exact_prefix(&mut s);
    }
    s.enter_call(
        released, new, frames, size, starved, repeat, temporary, now, charge,
    );
}

/// After a sample under [`enter_sampled`], where the thread's byte window
/// finds the sampled requests: puts the next sampling point the gap just
/// drawn after the bytes requested so far.
#[inline(always)]
pub(super) fn resample(t: &ThreadState, st: &StackThread) {
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
pub(super) unsafe fn timed_call<B: StackBody>(t: &ThreadState, body: B) -> (B::Out, u64) {
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
pub(super) fn sampled_ticks_since(start: u64) -> u64 {
    Tsc::now()
        .wrapping_sub(start)
        .saturating_sub(crate::thread::tsc_overhead())
        .min(crate::thread::MAX_SAMPLED_TICKS)
}

/// Unwinds the calling thread, whose stack mapping is `stack`, into `buf`
/// with the lock held, returning the lock (`None` if it had to be let go
/// to read the module list and could not be taken again), the frames
/// found (none if that is not possible) and whether they repeat the
/// thread's last stack (see [`StackUnwinder::repeat`]). `generation` is
/// the loader's, read before the lock was taken. Inlined: a frame of its
/// own would be one more for every capture to unwind.
#[inline(always)]
pub(super) fn capture<'l, 'b>(
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
