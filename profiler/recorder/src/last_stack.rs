//! The last stack each thread captured, kept so that the next capture
//! checks the frames it shares with it instead of unwinding them again.
//!
//! Unwinding walks a chain of states (step key, stack pointer, frame
//! pointer). Each state follows from the one before by that one's step,
//! a function of its key alone (learned once, see `unwind::learn`), applied
//! to its registers and to at most two stack words: the return address
//! below the canonical frame address and, for a step that restores it, the
//! saved frame pointer. So when a capture reaches a state of the thread's
//! last stack (same key, same stack pointer, and the same frame pointer
//! unless no step from there on reads it before restoring it), and each of
//! those words still holds what it held, every state after it is the last
//! stack's, exactly. Checking a frame is a load and a compare (two where
//! a later step reads the saved frame pointer), from memory the thread has
//! just used, where unwinding it is a lookup in a large table of steps and
//! the step's replay.
//!
//! Only affine steps are checked this way. A state whose step is not (a
//! signal frame, a step framehop evaluates every time) is handed back to
//! the unwinder, and the check resumes at the state after it if that is the
//! last stack's next one.
//!
//! The stacks are kept by the unwinder, under the stack lock, in a few
//! slots picked by the thread's stack address, not in each thread: a
//! thread's static TLS is carved out of its stack, and a program with
//! small thread stacks should not lose 4 KiB of each to this. A slot holds
//! whichever thread used it last; since every reused frame is checked
//! against the capturing thread's own stack, a slot's owner only decides
//! how often there is something to reuse, never what is found.

use core::mem::MaybeUninit;
use core::ops::Range;

use super::tables::Zeroable;
use super::unwind::MAX_FRAMES;

/// Threads whose last stacks are kept; more share slots and reuse less.
pub const SLOTS: usize = 16;

/// States a stack may have: one per frame, plus the first and the last.
const STATES: usize = MAX_FRAMES + 2;

/// Flags in [`State::link`] (the rest is a word address, a multiple of 8).
/// The step from this state is not affine: it is unwound, never checked.
const STOP: u64 = 1;
/// The step from this state reads the frame pointer.
const USES_BP: u64 = 2;
/// The frames from this state on depend on its frame pointer: a state of
/// a new capture is this one only if its frame pointer is the same.
const BP_LIVE: u64 = 4;
const FLAGS: u64 = 7;

/// One state of an unwound stack.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct State {
    /// The step key: the return address (the first state's is marked
    /// `unwind::NOT_RETURN`).
    pub key: u64,
    /// The stack pointer.
    pub sp: u64,
    /// The frame pointer.
    pub bp: u64,
    /// The address of the word the step from here restores the frame
    /// pointer from (0 if it keeps it), with the flags above.
    link: u64,
}

impl State {
    /// A state whose affine step restores the frame pointer from the word
    /// at `saved_bp_at` (if any) and reads the frame pointer if `uses_bp`.
    pub fn affine(key: u64, sp: u64, bp: u64, saved_bp_at: Option<u64>, uses_bp: bool) -> State {
        let link = match saved_bp_at {
            // A step's reads are checked for alignment before it succeeds,
            // but a last state's step may have failed on a misaligned one.
            Some(at) if at & FLAGS != 0 => STOP | USES_BP,
            Some(at) => at,
            None => 0,
        } | if uses_bp { USES_BP } else { 0 };
        State { key, sp, bp, link }
    }

    /// A state whose step is not affine.
    pub fn unwound(key: u64, sp: u64, bp: u64) -> State {
        State {
            key,
            sp,
            bp,
            link: STOP | USES_BP,
        }
    }

    fn saved_bp_at(&self) -> u64 {
        self.link & !FLAGS
    }

    /// Whether a state reached by a new capture is this one.
    #[inline(always)]
    fn is(&self, key: u64, sp: u64, bp: u64) -> bool {
        self.key == key && self.sp == sp && (self.link & BP_LIVE == 0 || self.bp == bp)
    }
}

/// A thread's last stack.
struct LastStack {
    /// The stack mapping of the thread that filled it; empty if none did.
    owner: Range<u64>,
    /// The states in use.
    n: usize,
    /// The return addresses the capture that left them gave.
    frames: usize,
    /// Outermost first, so that a capture that shares the outer states
    /// rewrites only the inner ones.
    states: [State; STATES],
}

/// The unwinder's last stacks, and room for the states of the capture
/// under way.
pub struct LastStacks {
    slots: [LastStack; SLOTS],
    /// The capture's own states, innermost first.
    fresh: [State; STATES],
}

// SAFETY: all-zero bytes are empty slots (owner `0..0`, no states) and
// states of integers.
unsafe impl Zeroable for LastStacks {}

// The memory docs/guarantees.md counts for the last stacks (70 KiB).
const _: () = assert!(size_of::<LastStacks>() <= 70 * 1024);

impl LastStacks {
    /// Starts a capture of the thread whose stack mapping is `stack`.
    pub fn reuse(&mut self, stack: Range<u64>) -> Reuse<'_> {
        let slot = ((stack.start >> 12).wrapping_mul(0x9e37_79b9_7f4a_7c15)
            >> (64 - SLOTS.trailing_zeros())) as usize
            % SLOTS;
        let last = &mut self.slots[slot];
        if last.owner != stack {
            last.owner = stack;
            last.n = 0;
        }
        let below = last.n;
        let probe_sp = match below {
            0 => u64::MAX,
            n => last.states[n - 1].sp,
        };
        Reuse {
            slot,
            last,
            fresh: &mut self.fresh,
            fresh_n: 0,
            below,
            probe_sp,
            matched: None,
            expect: None,
            followed_sp: 0,
            diverged: false,
            reused: 0,
        }
    }
}

/// Which last stack a capture used, and whether it gave the same return
/// addresses as that stack's capture before it: then it is the same call
/// stack, and the stack table need not look it up again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Repeat {
    /// The last stack's slot, below [`SLOTS`].
    pub slot: usize,
    /// The same return addresses as the slot's capture before.
    pub same: bool,
}

/// What [`Reuse::follow`] found at a state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Follow {
    /// The state is not the last stack's: unwind its step.
    New,
    /// The state was the last stack's, and the frames after it that still
    /// hold were emitted: unwind the step from the state it moved to.
    Moved,
    /// As `Moved`, and the frame buffer is full.
    Full,
}

/// One capture's use of its thread's last stack: [`follow`](Self::follow)
/// at each state past the leaf before its step, [`record`](Self::record)
/// after it, and [`finish`](Self::finish) at the end.
pub struct Reuse<'a> {
    /// Which of the [`SLOTS`] the last stack is in.
    slot: usize,
    last: &'a mut LastStack,
    fresh: &'a mut [State; STATES],
    fresh_n: usize,
    /// The last stack's states at or above this index have a stack pointer
    /// below the capture's current one (states only move up the stack).
    below: usize,
    /// No state of the last stack is left with a stack pointer below this
    /// (`u64::MAX`: none is left to look at): a state below it needs no
    /// look.
    probe_sp: u64,
    /// The last stack's state the capture first reached.
    matched: Option<usize>,
    /// After a check stopped: the index of the state the capture should
    /// reach next, past the step it unwinds itself.
    expect: Option<usize>,
    /// The stack pointer of the state `follow` last looked at: the unwinder
    /// may ask twice about one state (its replay loop, then its general
    /// one).
    followed_sp: u64,
    /// The capture left the last stack after reaching it: what it unwound
    /// since has no place in it.
    diverged: bool,
    /// Frames taken from the last stack (for tests and tuning).
    pub reused: u64,
}

impl Reuse<'_> {
    /// Looks for the capture's state `(key, sp, bp)` in the last stack. If
    /// it is there, writes the return addresses of the frames after it
    /// that still hold to `room` (the frame buffer's unused part), reading
    /// stack words through `read` (which refuses what is outside the
    /// thread's stack), and moves the state to the first one it could not
    /// check. Returns what it did and how many addresses it wrote.
    #[inline(always)]
    pub fn follow(
        &mut self,
        state: (&mut u64, &mut u64, &mut u64),
        read: &impl Fn(u64) -> Option<u64>,
        room: &mut [MaybeUninit<u64>],
    ) -> (Follow, usize) {
        if *state.1 < self.probe_sp {
            return (Follow::New, 0);
        }
        self.look(state, read, room)
    }

    /// [`follow`](Self::follow) at a state that may be the last stack's:
    /// out of line, so that the unwinder's loop keeps its registers.
    #[inline(never)]
    fn look(
        &mut self,
        (key, sp, bp): (&mut u64, &mut u64, &mut u64),
        read: &impl Fn(u64) -> Option<u64>,
        room: &mut [MaybeUninit<u64>],
    ) -> (Follow, usize) {
        if *sp == self.followed_sp || self.diverged {
            return (Follow::New, 0);
        }
        self.followed_sp = *sp;
        let states = &self.last.states[..self.last.n];
        let at = match self.expect {
            None if self.matched.is_none() => {
                while self.below > 0 && states[self.below - 1].sp < *sp {
                    self.below -= 1;
                }
                match self.below.checked_sub(1) {
                    Some(i) if states[i].is(*key, *sp, *bp) => {
                        self.matched = Some(i);
                        i
                    }
                    Some(i) => {
                        self.probe_sp = states[i].sp;
                        return (Follow::New, 0);
                    }
                    None => {
                        self.probe_sp = u64::MAX;
                        return (Follow::New, 0);
                    }
                }
            }
            Some(i) if states[i].is(*key, *sp, *bp) => i,
            // Off the last stack after a check stopped.
            _ => {
                self.diverged = true;
                self.probe_sp = u64::MAX;
                return (Follow::New, 0);
            }
        };
        // Each step from the last stack's state `k` to the one outside it,
        // `k - 1`, holds if the return address it read still holds, and
        // the saved frame pointer it read, where that matters (`finish`
        // keeps its address only then): one frame per state outside `at`,
        // as many as there is room for.
        let limit = at.min(room.len());
        let mut written = 0;
        let mut stop = false;
        while written < limit {
            let k = at - written;
            // SAFETY: `0 < k <= at < states.len()`; indexing without the
            // bounds checks keeps this loop, the one a reused frame costs,
            // to its loads and compares.
            let (link, outer) =
                unsafe { (states.get_unchecked(k).link, states.get_unchecked(k - 1)) };
            if link & STOP != 0 {
                stop = true;
                break;
            }
            // SAFETY: the word below the outer state's stack pointer is in
            // this thread's stack: a step read it when the last stack was
            // taken, in this same stack mapping (the slot's owner), so it
            // is aligned and below the mapping's end; and it is above the
            // state this capture is at (a step moves the stack pointer up),
            // so at or above the capture's own stack pointer.
            let ret = unsafe { core::ptr::read_volatile(outer.sp.wrapping_sub(8) as *const u64) };
            if ret != outer.key {
                break;
            }
            // A saved frame pointer's word may be anywhere a step's rule
            // says: checked.
            let saved = link & !FLAGS;
            if saved != 0 && read(saved) != Some(outer.bp) {
                break;
            }
            // SAFETY: `written < limit <= room.len()`.
            unsafe { room.get_unchecked_mut(written) }.write(outer.key);
            written += 1;
        }
        let k = at - written;
        self.reused += written as u64;
        if k != at {
            let s = &states[k];
            (*key, *sp, *bp) = (s.key, s.sp, s.bp);
            self.followed_sp = s.sp;
        }
        // Past a step the unwinder takes itself, the state after it should
        // be the last stack's next one. A word that no longer holds leaves
        // the last stack for good; at its end there is nothing more.
        match k.checked_sub(1) {
            Some(next) if stop => {
                self.expect = Some(next);
                self.probe_sp = states[next].sp;
            }
            _ => {
                self.diverged = k != 0 && written < room.len();
                self.expect = None;
                self.probe_sp = u64::MAX;
            }
        }
        let full = written == room.len();
        (if full { Follow::Full } else { Follow::Moved }, written)
    }

    /// Records a state the capture unwound itself, past the leaf.
    #[inline(always)]
    pub fn record(&mut self, s: State) {
        if self.matched.is_some() {
            return;
        }
        if let Some(slot) = self.fresh.get_mut(self.fresh_n) {
            *slot = s;
        }
        self.fresh_n += 1;
    }

    /// Makes this capture, which gave `frames` return addresses, the
    /// thread's last stack: its own states inside the last stack's states
    /// it reached, or only its own if it reached none. Nothing is kept of a
    /// capture that left the last stack after reaching it, or that had more
    /// states than fit.
    ///
    /// Returns its slot and whether its return addresses are the last
    /// stack's, all of them: its first state past the leaf was the last
    /// stack's first, every state after that was the last stack's, and
    /// there were as many.
    pub fn finish(self, frames: usize) -> Repeat {
        let first = self.last.n.checked_sub(1);
        let same = self.matched.is_some()
            && self.matched == first
            && self.fresh_n == 0
            && !self.diverged
            && frames == self.last.frames;
        let repeat = Repeat {
            slot: self.slot,
            same,
        };
        self.last.frames = frames;
        let start = match self.matched {
            None => 0,
            Some(i) => i + 1,
        };
        let n = start + self.fresh_n;
        if self.diverged || n > STATES {
            self.last.n = 0;
            return repeat;
        }
        let states = &mut self.last.states;
        for (to, from) in states[start..n]
            .iter_mut()
            .zip(self.fresh[..self.fresh_n].iter().rev())
        {
            *to = *from;
        }
        // A state's frame pointer matters if its step reads it, or if the
        // step passes it on unchanged to a state where it matters. Past the
        // outermost state nothing is known: it matters.
        let mut live = match start {
            0 => true,
            i => states[i - 1].link & BP_LIVE != 0,
        };
        for s in &mut states[start..n] {
            // A saved frame pointer no state outside reads need not be
            // checked: forget where it was (which, for the liveness of the
            // states inside, is the same as keeping it).
            if s.saved_bp_at() != 0 && !live {
                s.link &= FLAGS;
            }
            live = s.link & USES_BP != 0 || (s.saved_bp_at() == 0 && live);
            s.link = (s.link & !BP_LIVE) | if live { BP_LIVE } else { 0 };
        }
        self.last.n = n;
        repeat
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tables::zeroed_box;

    /// A stack of `depth` frames laid out in `words` (at least `4 * depth`
    /// of them), whose steps each add 4 words to the stack pointer and keep
    /// the frame pointer: writes the return addresses and gives the states.
    fn chain(words: &mut [u64], depth: usize, key_of: impl Fn(usize) -> u64) -> Vec<State> {
        let base = words.as_ptr() as u64;
        let mut states = Vec::new();
        for i in 0..depth {
            let sp = base + 32 * i as u64;
            states.push(State::affine(key_of(i), sp, 0, None, false));
            // The return address below the next state's stack pointer.
            words[4 * (i + 1) - 1] = key_of(i + 1);
        }
        states
    }

    fn range(words: &[u64]) -> Range<u64> {
        let base = words.as_ptr() as u64;
        base..base + 8 * words.len() as u64
    }

    /// Captures `states` innermost first as the unwinder would: follow,
    /// then (for a new state) record and step to the next one.
    fn capture(stacks: &mut LastStacks, states: &[State], words: &[u64]) -> (Vec<u64>, u64) {
        let stack = range(words);
        let read = |a: u64| {
            stack
                .contains(&a)
                .then(|| words[((a - stack.start) / 8) as usize])
        };
        let mut reuse = stacks.reuse(stack.clone());
        let mut out = Vec::new();
        let mut room = [MaybeUninit::uninit(); 64];
        let mut i = 0;
        while i < states.len() {
            let s = states[i];
            let (mut key, mut sp, mut bp) = (s.key, s.sp, s.bp);
            let (follow, n) = reuse.follow((&mut key, &mut sp, &mut bp), &read, &mut room);
            // SAFETY: `follow` wrote the first `n`.
            out.extend(room[..n].iter().map(|a| unsafe { a.assume_init() }));
            if follow == Follow::Moved {
                i = states.iter().position(|s| s.sp == sp).unwrap();
            } else {
                reuse.record(states[i]);
            }
            if i + 1 < states.len() {
                out.push(states[i + 1].key);
            }
            i += 1;
        }
        let reused = reuse.reused;
        reuse.finish(out.len());
        (out, reused)
    }

    #[test]
    fn reuses_the_outer_frames_that_still_hold() {
        let mut stacks = zeroed_box::<LastStacks>().unwrap();
        let mut words = vec![0u64; 48];
        let states = chain(&mut words, 10, |i| 0x1000 + i as u64);
        let all: Vec<u64> = (1..10).map(|i| 0x1000 + i).collect();
        let (first, reused) = capture(&mut stacks, &states, &words);
        assert_eq!((first, reused), (all.clone(), 0));
        // The same stack again: every frame after the first state is
        // checked, none unwound.
        let (again, reused) = capture(&mut stacks, &states, &words);
        assert_eq!((again, reused), (all.clone(), 9));
        // A different return address in the middle: the frames outside it
        // are not taken on trust.
        let states2 = chain(&mut words, 10, |i| {
            if i == 6 { 0x2222 } else { 0x1000 + i as u64 }
        });
        let want: Vec<u64> = states2[1..].iter().map(|s| s.key).collect();
        let (got, reused) = capture(&mut stacks, &states2, &words);
        assert_eq!(got, want);
        assert_eq!(reused, 5, "frames 1 to 5 are the last stack's");
        // That capture left the last stack, which is then dropped, and
        // the next one starts over.
        let (got, reused) = capture(&mut stacks, &states2, &words);
        assert_eq!((got, reused), (want.clone(), 0));
        let (got, reused) = capture(&mut stacks, &states2, &words);
        assert_eq!((got, reused), (want, 9));
    }

    #[test]
    fn the_frame_pointer_matters_only_where_a_step_reads_it() {
        let mut s = zeroed_box::<LastStacks>().unwrap();
        let mut reuse = s.reuse(0x1000..0x2000);
        reuse.record(State::affine(3, 30, 7, None, false));
        reuse.record(State::affine(2, 40, 7, Some(48), false));
        reuse.record(State::affine(1, 50, 9, None, true));
        reuse.finish(2);
        let last = &s
            .slots
            .iter()
            .find(|l| l.owner == (0x1000..0x2000))
            .unwrap();
        let live: Vec<bool> = last.states[..3]
            .iter()
            .map(|st| st.link & BP_LIVE != 0)
            .collect();
        // Outermost first: it reads its frame pointer; the one inside it
        // restores it from the stack; the innermost passes on a frame
        // pointer nothing reads.
        assert_eq!(live, [true, false, false]);
        assert!(last.states[2].is(3, 30, 12345));
        assert!(!last.states[0].is(1, 50, 12345));
    }
}
