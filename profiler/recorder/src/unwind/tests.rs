use super::*;

/// Captures `depth` frames of itself below the caller, with learned
/// steps if `replay`, else with framehop alone.
#[inline(never)]
fn deeper(
    u: &mut StackUnwinder,
    stack: Range<u64>,
    depth: u32,
    out: &mut Vec<u64>,
    replay: bool,
) -> usize {
    // black_box after each call: no tail calls, one frame per level.
    let n = if depth == 0 {
        let mut buf = frame_buf();
        let frames = if replay {
            u.capture(stack, &mut buf)
        } else {
            u.capture_framehop_only(stack, &mut buf)
        };
        out.clear();
        out.extend_from_slice(frames);
        frames.len()
    } else {
        deeper(u, stack, depth - 1, out, replay)
    };
    core::hint::black_box(n)
}

/// Rule caches are made while memory lasts, and the unwinder works
/// with however many there are: with none it takes no stack.
#[test]
fn rule_caches_stop_where_memory_runs_short() {
    let asked = core::cell::Cell::new(0);
    let short_after_three = || {
        asked.set(asked.get() + 1);
        asked.get() > 3
    };
    let mut u = StackUnwinder::new(false);
    u.install(generation(), loaded_modules());
    u.caches = new_caches(short_after_three);
    assert_eq!(u.caches.len(), 3);
    let stack = thread_stack().unwrap();
    let mut out = Vec::new();
    for replay in [false, true] {
        let n = deeper(&mut u, stack.clone(), 5, &mut out, replay);
        assert!(n > 5, "{replay}: {out:x?}");
    }
    u.caches = new_caches(|| true);
    assert!(u.caches.is_empty());
    assert_eq!(deeper(&mut u, stack, 5, &mut out, true), 0);
}

#[test]
fn captures_the_callers() {
    let mut u = StackUnwinder::new(false);
    u.install(generation(), loaded_modules());
    assert!(
        u.modules()
            .iter()
            .any(|m| m.range.contains(&(deeper as *const () as u64)))
    );
    let stack = thread_stack().unwrap();
    let mut out = Vec::new();
    let n5 = deeper(&mut u, stack.clone(), 5, &mut out, true);
    let n10 = deeper(&mut u, stack, 10, &mut out, true);
    // Five more frames of `deeper`, and the stack reaches past it.
    assert_eq!(n10, n5 + 5, "{:x?}", &out[..n10]);
    let in_deeper = |a: u64| {
        let f = deeper as *const () as u64;
        a > f && a < f + 4096
    };
    assert!(
        out[..11].iter().all(|&a| in_deeper(a)),
        "{:x?}",
        &out[..n10]
    );
    assert!(!in_deeper(out[11]));
}

impl StackUnwinder {
    /// [`StackUnwinder::capture`] with framehop unwinding every frame.
    #[inline(never)]
    fn capture_framehop_only<'b>(&mut self, stack: Range<u64>, out: &'b mut FrameBuf) -> &'b [u64] {
        self.unwind(stack, out, false, false)
    }
}

#[test]
fn replayed_steps_give_framehops_stacks() {
    let mut u = StackUnwinder::new(false);
    u.install(generation(), loaded_modules());
    let stack = thread_stack().unwrap();
    let mut previous = None;
    for depth in [3, 0, 7, 3, 12, 12, 1] {
        // Both captures from one call site, so all frames but the first
        // (where `deeper` calls the capture) are the same: `deeper`,
        // this test, the test harness, std, libc.
        let [replayed, plain] = [true, false].map(|replay| {
            let mut out = Vec::new();
            deeper(&mut u, stack.clone(), depth, &mut out, replay);
            out
        });
        assert_eq!(
            replayed[1..],
            plain[1..],
            "depth {depth}: {replayed:x?} against {plain:x?}"
        );
        assert!(replayed.len() > depth as usize + 3, "{replayed:x?}");
        // Only the second capture at depth 12 is the one before it
        // again (framehop's captures leave the last stack alone).
        let repeat = u.repeat().expect("a capture with the last stacks");
        assert_eq!(repeat.same, previous == Some(depth), "depth {depth}");
        previous = Some(depth);
    }
    assert!(u.replayed > 20, "{} frames replayed", u.replayed);
}

/// Calls [`deeper`] from its own frame: two instances have the same
/// frame size, so the frames inside them are at the same stack
/// addresses and differ only in the return address into each.
#[inline(never)]
fn from<const SITE: u32>(
    u: &mut StackUnwinder,
    stack: Range<u64>,
    out: &mut Vec<u64>,
    replay: bool,
) {
    core::hint::black_box(deeper(u, stack, 4, out, replay));
}

#[test]
fn frames_of_the_last_stack_are_checked_not_trusted() {
    let mut u = StackUnwinder::new(false);
    u.install(generation(), loaded_modules());
    let stack = thread_stack().unwrap();
    let mut seen = Vec::new();
    for round in 0..6 {
        // The same inner frames at the same addresses, under a
        // different caller every other round; from one call site, so
        // that only the first frame differs from framehop's.
        let [replayed, plain] = [true, false].map(|replay| {
            let mut out = Vec::new();
            if round % 2 == 0 {
                from::<1>(&mut u, stack.clone(), &mut out, replay);
            } else {
                from::<2>(&mut u, stack.clone(), &mut out, replay);
            }
            out
        });
        assert_eq!(
            replayed[1..],
            plain[1..],
            "round {round}: {replayed:x?} against {plain:x?}"
        );
        seen.push(replayed);
    }
    assert_ne!(seen[0][1..], seen[1][1..], "the callers differ");
    assert_eq!(seen[0][1..], seen[2][1..]);
    assert!(u.reused > 0, "nothing was taken from the last stack");
}

#[test]
fn a_new_step_table_is_empty() {
    let mut steps = Steps::new().unwrap();
    assert!(steps.slots.iter().all(|&slot| slot == (0, Step::Unknown)));
    assert_eq!(*steps.slot(0x1234), (0, Step::Unknown));
}

#[test]
fn learns_affine_steps_and_leaves_the_rest_to_framehop() {
    let mut u = StackUnwinder::new(false);
    u.install(generation(), loaded_modules());
    // A return address into `deeper` (the instruction after its call to
    // itself): an ordinary Rust frame, affine in the stack pointer.
    let stack = thread_stack().unwrap();
    let mut out = Vec::new();
    deeper(&mut u, stack, 2, &mut out, true);
    let unwinder = u.unwinder.as_ref().unwrap();
    let ret = out[1];
    let address = FrameAddress::from_return_address(ret).unwrap();
    let step = learn(unwinder, &mut CacheX86_64::new_in(), address);
    assert!(
        matches!(step, Step::Affine { cfa_on_bp: false, cfa_by_8, .. } if cfa_by_8 > 0),
        "{step:?}"
    );
    // No module holds address 16: framehop falls back to frame
    // pointers there, which is affine in the frame pointer.
    let nowhere = FrameAddress::from_return_address(16).unwrap();
    let step = learn(unwinder, &mut CacheX86_64::new_in(), nowhere);
    assert_eq!(
        step,
        Step::Affine {
            cfa_on_bp: true,
            cfa_by_8: 2,
            bp_saved: true,
            bp_on_bp: true,
            bp_by_8: 0
        }
    );
}

/// The unwinder and both captures of [`unwinds_through_a_signal_frame`],
/// handed to and from its signal handler.
static SIGNALLED: std::sync::Mutex<Option<SignalCaptures>> = std::sync::Mutex::new(None);

/// The unwinder, its capture with learned steps, and framehop's own.
type SignalCaptures = (StackUnwinder, Vec<u64>, Vec<u64>);

#[inline(never)]
fn capture_both(u: &mut StackUnwinder, replayed: &mut Vec<u64>, plain: &mut Vec<u64>) {
    let stack = thread_stack().unwrap();
    let mut buf = frame_buf();
    replayed.extend_from_slice(u.capture(stack.clone(), &mut buf));
    plain.extend_from_slice(u.capture_framehop_only(stack, &mut buf));
}

extern "C" fn on_signal(_: libc::c_int) {
    let mut state = SIGNALLED.lock().unwrap();
    let (u, replayed, plain) = state.as_mut().unwrap();
    capture_both(u, replayed, plain);
}

#[inline(never)]
fn raise_here() -> usize {
    // SAFETY: the handler is installed; raise returns after it runs.
    unsafe { libc::raise(libc::SIGUSR1) };
    core::hint::black_box(raise_here as *const () as usize)
}

#[test]
fn unwinds_through_a_signal_frame() {
    let mut u = StackUnwinder::new(false);
    u.install(generation(), loaded_modules());
    *SIGNALLED.lock().unwrap() = Some((u, Vec::new(), Vec::new()));
    // SAFETY: a plain handler for a signal nothing else in the test
    // binary uses; it is raised synchronously below.
    unsafe { libc::signal(libc::SIGUSR1, on_signal as *const () as usize) };
    // Twice: the second time every step is already learned.
    for _ in 0..2 {
        {
            let mut state = SIGNALLED.lock().unwrap();
            let (_, replayed, plain) = state.as_mut().unwrap();
            replayed.clear();
            plain.clear();
        }
        raise_here();
        let state = SIGNALLED.lock().unwrap();
        let (u, replayed, plain) = state.as_ref().unwrap();
        // The first frame is the call site inside `capture_both`, which
        // differs; from the handler out the frames are the same.
        assert_eq!(
            replayed[1..],
            plain[1..],
            "{replayed:x?} against {plain:x?}"
        );
        // The handler returns to the kernel's trampoline; the frames
        // outside it are those the signal interrupted: `raise` in libc,
        // then the call in `raise_here` (a few bytes in: it is short).
        let t = replayed
            .iter()
            .position(|&a| is_sigreturn(u.modules(), a))
            .unwrap_or_else(|| panic!("no signal frame: {replayed:x?}"));
        let f = raise_here as *const () as u64;
        let in_raise_here = |a: u64| a > f && a < f + 64;
        let in_here = |a: u64| {
            u.modules()
                .iter()
                .any(|m| m.range.contains(&a) && m.range.contains(&f))
        };
        assert!(
            !in_here(replayed[t + 1]) && replayed[t + 2..].iter().any(|&a| in_raise_here(a)),
            "the frames the signal interrupted are missing: {replayed:x?}"
        );
    }
}

#[test]
fn reads_the_build_id_and_eh_frame() {
    let (infos, _) = loaded_modules();
    let libc_mod = infos
        .iter()
        .find(|m| m.path.windows(4).any(|w| w == b"libc"))
        .expect("libc is loaded");
    assert_eq!(
        libc_mod.build_id.len(),
        20,
        "Debian builds carry a SHA-1 build id"
    );
    let g = generation();
    assert!(g.0 > 0, "{g:?}");
}
