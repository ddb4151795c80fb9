use super::*;

struct Alloc(usize);
impl Body for Alloc {
    type Out = ();
    const FUNC: Func = Func::Malloc;
    unsafe fn run<S: Scope>(self, s: &S) {
        s.time(self.0, || ());
        s.allocated(self.0);
        s.alloc(Func::Malloc, self.0);
    }
}
struct Free(usize);
impl Body for Free {
    type Out = ();
    const FUNC: Func = Func::Free;
    unsafe fn run<S: Scope>(self, s: &S) {
        s.call(Func::Free);
        s.freed(self.0);
    }
}

/// `free(NULL)`, as the shim's `free` body records it.
struct NullFree;
impl Body for NullFree {
    type Out = ();
    const FUNC: Func = Func::Free;
    unsafe fn run<S: Scope>(self, s: &S) {
        s.call(Func::Free);
        s.null_free();
    }
}

#[test]
fn the_byte_countdown_counts_every_request_and_sees_every_large_one() {
    let t = ThreadState::new();
    let owned = Owned(&t);
    let (mut want, mut untimed, mut large) = (0u64, 0, 0);
    // Small requests across many windows, some landing exactly on a
    // window's end, large ones between them (one exactly at the
    // threshold, one whose subtraction wraps the countdown far below
    // zero), through both ways a body records a request.
    let sizes = (0..20_000u64)
        .map(|i| (i * 7919) % 3000)
        .chain([EXACT_TIMING_BYTES as u64 - 1, 1])
        .chain([EXACT_TIMING_BYTES as u64, 5 << 20, u64::MAX / 2, 0, 16]);
    for (i, n) in sizes.enumerate() {
        let n = n as usize;
        if i % 2 == 0 {
            owned.alloc(Func::Malloc, n);
            want = want.wrapping_add(n as u64);
        } else if owned.alloc_untimed(Func::Malloc, n, || true, || false) {
            assert!(
                n < EXACT_TIMING_BYTES,
                "a request of {n} bytes went untimed"
            );
            untimed += 1;
            want = want.wrapping_add(n as u64);
        } else {
            // The usual way counts it.
            assert!(
                n >= EXACT_TIMING_BYTES,
                "a request of {n} bytes was not untimed"
            );
            owned.alloc(Func::Malloc, n);
            want = want.wrapping_add(n as u64);
        }
        if n >= EXACT_TIMING_BYTES {
            large += 1;
        }
        assert_eq!(t.requested_bytes(), want, "after request {i} ({n} bytes)");
        let left = t.bytes_left.load(Relaxed);
        assert!(
            (1..=EXACT_TIMING_BYTES as u64).contains(&left),
            "{left} left"
        );
    }
    assert!(untimed > 9_000);
    let mut totals = Totals::default();
    t.add_to(&mut totals);
    assert_eq!(totals.bytes_requested, want);
    // Every large request made its histogram entry (the small ones'
    // come from timed calls, none here).
    assert_eq!(totals.size_hist.iter().sum::<u64>(), large);
}

#[test]
fn a_preempted_sampled_call_counts_at_most_the_cap() {
    // A 2 ms call, as a thread preempted inside a small malloc sees it.
    struct Slow;
    impl Body for Slow {
        type Out = ();
        const FUNC: Func = Func::Malloc;
        unsafe fn run<S: Scope>(self, s: &S) {
            s.time(16, || {
                std::thread::sleep(std::time::Duration::from_millis(2))
            });
        }
    }
    let t = ThreadState::new();
    // SAFETY: `Slow` touches nothing; the state is private to the test.
    unsafe { Slow.run(&Sampled(&t)) };
    let mut totals = Totals::default();
    t.counters.add_to(&mut totals);
    assert_eq!(totals.timed_calls, 1);
    assert_eq!(totals.timed_ticks, MAX_SAMPLED_TICKS);
}

// One test owns the process-wide registry; the others use private states.
#[test]
fn counts_peak_and_thread_exit() {
    set_time_sample_mean(4);
    std::thread::spawn(|| {
        // Lives as long as the thread, as TLS does: the exit hook reads it.
        let t: &ThreadState = Box::leak(Box::new(ThreadState::new()));
        for _ in 0..1000 {
            // SAFETY: `t` stands for this thread's state.
            unsafe { enter(t, Alloc(100)) };
        }
        // SAFETY: `t` stands for this thread's state.
        unsafe { enter(t, Alloc(1 << 20)) };
        assert_eq!(live_bytes(), 100_000 + (1 << 20));
        // SAFETY: `t` stands for this thread's state.
        unsafe { enter(t, Free(1 << 20)) };
        // A large free is not published to the global count until a
        // sampled call, but the sum over threads sees it at once.
        assert_eq!(live_bytes(), 100_000);
        for _ in 0..1000 {
            // SAFETY: `t` stands for this thread's state.
            unsafe { enter(t, Free(100)) };
            // `free(NULL)`, counted apart from the frees of blocks, on
            // the fast path and at the sampled calls alike.
            // SAFETY: as above.
            unsafe { enter(t, NullFree) };
        }
        let s = snapshot(Some(t));
        assert_eq!(s.calls_of(Func::Malloc), 1001);
        assert_eq!(s.calls_of(Func::Free), 1001);
        assert_eq!(s.null_frees, 1000);
        let own = t.own_totals();
        assert_eq!((own.calls_of(Func::Free), own.null_frees), (1001, 1000));
        assert_eq!(s.bytes_allocated, 100_000 + (1 << 20));
        assert_eq!(s.live_bytes(), 0);
        assert_eq!(s.peak_live_bytes, 100_000 + (1 << 20));
        // The thread's first malloc and the 1 MiB one are timed exactly
        // (this test's Free body times nothing), a sample of the rest.
        assert_eq!(s.exact_calls, 2);
        assert!(
            s.timed_calls > 0 && s.timed_calls < 1000,
            "{}",
            s.timed_calls
        );
        retire_thread(t);
        // After the exit hook, calls land on the shared counters.
        // SAFETY: `t` stands for this thread's state.
        unsafe { enter(t, Alloc(8)) };
        // SAFETY: as above.
        unsafe { enter(t, NullFree) };
        let s = snapshot(None);
        assert_eq!(s.calls_of(Func::Malloc), 1002);
        assert_eq!((s.calls_of(Func::Free), s.null_frees), (1001, 1001));
        assert_eq!(s.bytes_allocated, 100_008 + (1 << 20));
        // The retired thread's counts are in the shared ones.
        assert_eq!(live_bytes(), 8);
    })
    .join()
    .unwrap();
    assert_eq!(threads_seen(), 1);

    // A thread that cannot take the registry in time (its holder was
    // preempted) counts on its own counters from its first call, and
    // links at a later slow call once the registry is free.
    let unlinked_thread = |calls_after_release: u64| {
        let before = snapshot(None).calls_of(Func::Malloc);
        let (to_main, from_thread) = std::sync::mpsc::channel();
        let (to_thread, from_main) = std::sync::mpsc::channel::<()>();
        let held = REGISTRY.lock();
        let thread = std::thread::spawn(move || {
            let t: &ThreadState = Box::leak(Box::new(ThreadState::new()));
            // SAFETY: `t` stands for this thread's state.
            unsafe { enter(t, Alloc(8)) };
            to_main.send(t).unwrap();
            from_main.recv().unwrap();
            let mut calls = 1;
            while calls < 1 + calls_after_release {
                // SAFETY: `t` stands for this thread's state.
                unsafe { enter(t, Alloc(8)) };
                calls += 1;
            }
            assert_eq!(snapshot(Some(t)).calls_of(Func::Malloc), before + calls);
            (calls, t.linked.get())
        });
        let t = from_thread.recv().unwrap();
        assert_eq!(t.status.get(), ACTIVE);
        assert!(!t.linked.get());
        assert_eq!(t.own_totals().calls_of(Func::Malloc), 1);
        // Read while this thread holds the registry: the unlinked
        // thread's call is not in the walk yet.
        assert_eq!(snapshot(None).calls_of(Func::Malloc), before);
        drop(held);
        to_thread.send(()).unwrap();
        let (calls, linked) = thread.join().unwrap();
        // Linked or not, its exit hook folded every call in.
        assert_eq!(snapshot(None).calls_of(Func::Malloc), before + calls);
        linked
    };
    // Exits before another slow call: retired without ever linking.
    assert!(!unlinked_thread(0));
    // With a mean gap of 4, a few hundred calls reach the slow path.
    assert!(unlinked_thread(400));
    assert_eq!(threads_seen(), 3);
}

#[test]
fn default_sampling_constant_matches_default_mean() {
    let want = (1.0f64 - 1.0 / DEFAULT_TIME_SAMPLE_MEAN as f64).ln();
    assert_eq!(f64::from_bits(0xbf70_0805_5958_8b35), want);
}

#[test]
fn countdown_is_geometric_with_the_set_mean() {
    let mut rng = 12345;
    let ln_q = (1.0f64 - 1.0 / 64.0).ln();
    let n = 200_000;
    let gaps: Vec<u32> = (0..n).map(|_| geometric_gap(&mut rng, 64, ln_q)).collect();
    let mean = gaps.iter().map(|&g| g as f64).sum::<f64>() / n as f64;
    assert!((mean - 64.0).abs() < 1.0, "mean gap {mean}");
    // Memoryless: P(gap = 1) = 1/64.
    let ones = gaps.iter().filter(|&&g| g == 1).count() as f64 / n as f64;
    assert!((ones - 1.0 / 64.0).abs() < 0.002, "P(gap=1) = {ones}");
    assert_eq!(geometric_gap(&mut rng, 1, 0.0), 1);
}
