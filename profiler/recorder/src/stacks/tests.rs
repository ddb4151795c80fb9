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
    s.alloc(0x100, 10, &a, 5, None, 0);
    s.alloc(0x200, 20, &b, 5, None, 0);
    s.alloc(0x300, 30, &a, 5, None, 0); // peak: a 40 (2 blocks), b 20
    s.free(0x300, 0, |_| 7);
    s.free(0x200, 0, |_| 1);
    s.alloc(0x400, 15, &b, 2, None, 0); // live 25 < 60: no new peak
    s.free(0x999, 0, |_| 1); // unknown: ignored
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
/// (4.1 MiB) however many blocks and stacks there are; one doubling
/// table of 300,000 blocks would ask for 13 MB at once.
#[test]
fn sites_never_allocate_more_than_a_shard_at_once() {
    let mut s = Sites::default();
    let stacks: Vec<Vec<u64>> = (0..5000).map(|i| stack(i, 40)).collect();
    let ((), largest) = test_alloc::largest_allocation(|| {
        for b in 0..300_000usize {
            s.alloc(
                0x7f00_0000_0000 + b * 32,
                24,
                &stacks[b % 5000],
                10,
                None,
                0,
            );
        }
        for b in (0..300_000usize).step_by(2) {
            s.free(0x7f00_0000_0000 + b * 32, 0, |_| 10);
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
                0,
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
    s.alloc(0x1000, 100, &a, 1, None, 0);
    // Four blocks under the page-map leaf of the first, which need no
    // room, and four in the next leaf (a MiB on), which does.
    let same: Vec<usize> = (1..=4)
        .map(|i| 0x1000 + i * 32)
        .chain((0..4).map(|i| 0x1000 + (1 << 20) + i * 32))
        .collect();
    test_alloc::without_memory(|| {
        s.alloc(0x2000, 100, &b, 1, None, 0); // a new stack: no room
        for &addr in &same {
            s.alloc(addr, 10, &a, 1, None, 0);
        }
    });
    assert_eq!(s.sites.len(), 1);
    assert_eq!((s.lost, s.degraded), (1, 5));
    let c = s.counts(0);
    assert_eq!((c.allocs, c.bytes), (9, 180));
    assert_eq!((c.live_allocs, c.live_bytes), (5, 140));
    // Freeing them all leaves only the first block live.
    for &addr in &same {
        s.free(addr, 0, |_| 0);
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
            mean_calls: site.mean_calls,
            lifetimes: sites.lifetimes(i),
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
                temporary: 12_345,
            },
            vec![0xf, 0x10, u64::MAX, 0x5555_0000_1234],
        ),
    ] {
        for lifetimes in [
            Lifetimes::default(),
            Lifetimes {
                freed: [1, 0, 22, 333, 0, 0, 0, 0, u64::MAX],
                ticks: 9_876_543_210,
            },
        ] {
            let mut text = String::new();
            profile::write_stack(&mut text, &counts, &lifetimes, &frames).unwrap();
            assert_eq!(
                stack_line_len(&counts, &lifetimes, frames.iter()),
                text.len(),
                "{text}"
            );
        }
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
            0,
        );
    }
    let snap = snapshot_of(&mut sites, vec![module("/bin/a"), module("/lib/b.so")]);
    let section = |stack_lines: &str| {
        format!(
            "allocmux-profile {}
process
{stack_lines}end
",
            profile::FORMAT_VERSION
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
    s.alloc(0x1000, 8, &a, 1, first(3), 0);
    s.alloc(0x2000, 8, &b, 1, first(4), 0);
    // Slot 3's stack again: its site, without a lookup; slot 4's too.
    s.alloc(0x3000, 8, &a, 1, again(3), 0);
    s.alloc(0x4000, 8, &b, 1, again(4), 0);
    let counts = |s: &Sites, i: u32| s.sites.get(i as usize).allocs;
    assert_eq!((counts(&s, 0), counts(&s, 1)), (2.0, 2.0));
    // A new table knows no slot's site: it looks the stack up.
    let mut fresh = Sites::default();
    fresh.alloc(0x1000, 8, &b, 1, again(3), 0);
    assert_eq!(fresh.sites.len(), 1);
    assert_eq!(fresh.last_site[3], 0);
}

/// A sampled call made larger is charged one call at the process's mean
/// time per timed call, whatever it measured; a block large enough to be
/// timed for itself keeps its time.
#[test]
fn promoted_calls_are_charged_the_mean_unless_large() {
    let large = crate::thread::EXACT_TIMING_BYTES as u64;
    assert_eq!(promoted_call_ticks(100, 7), Charge::Mean);
    assert_eq!(promoted_call_ticks(large - 1, 1 << 30), Charge::Mean);
    assert_eq!(promoted_call_ticks(large, 7), Charge::Ticks(7));
}

/// The calls charged the mean are priced when the profile is written, at
/// the process's mean time per timed call then: the stacks' times are
/// their estimated calls times that mean, plus what was charged as such,
/// however long any one call took, and a delta prices its start at its
/// end's mean.
#[test]
fn calls_charged_the_mean_are_priced_when_written() {
    let mut sites = Sites::with_mean(1000);
    let (a, b) = (stack(1, 3), stack(2, 4));
    // Two sampled blocks on `a` (weights w(100), w(300)), one freed; one on
    // `b` charged 70 ticks of its own, freed at the mean.
    sites.alloc(0x1000, 100, &a, Charge::Mean, None, 0);
    sites.alloc(0x2000, 300, &a, Charge::Mean, None, 0);
    sites.free(0x1000, 0, |_| Charge::Mean);
    sites.alloc(0x3000, 200_000, &b, Charge::Ticks(70), None, 0);
    sites.free(0x3000, 0, |_| Charge::Mean);
    // As the table keeps them (a block's weight is an f32).
    let w = |size| f64::from(weight(size, 1000) as f32);
    let (w1, w3, wb) = (w(100), w(300), w(200_000));
    let mut snap = snapshot_of(&mut sites, Vec::new());
    assert_eq!(snap.counts(0).ticks, 0, "nothing timed: the mean is 0");
    let mut totals = Totals::default();
    totals.timed_calls = 4;
    totals.timed_ticks = 4 * 250;
    totals.exact_ticks = 1 << 40; // stands for itself: not in the mean
    snap.call_ticks = mean_call_ticks(&totals);
    assert_eq!(snap.call_ticks, 250.0);
    let ticks_a = ((2.0 * w1 + w3) * 250.0).round() as u64;
    let ticks_b = (wb * 70.0).round() as u64 + (wb * 250.0).round() as u64;
    assert_eq!(
        (snap.counts(0).ticks, snap.counts(1).ticks),
        (ticks_a, ticks_b)
    );
    // Written as priced.
    let mut text = String::new();
    snap.write(&mut text).unwrap();
    let section = format!(
        "allocmux-profile {}\nprocess\n{text}end\n",
        profile::FORMAT_VERSION
    );
    let p = &profile::parse(&section).unwrap()[0];
    let written: Vec<u64> = p.stacks.stacks.iter().map(|s| s.counts.ticks).collect();
    assert_eq!(written, [ticks_a, ticks_b]);
    // A delta's start, kept unresolved, is priced at the end's mean.
    let (then, calls) = snap.unresolved(0);
    assert_eq!((then.ticks, calls), (0, 2.0 * w1 + w3));
    snap.call_ticks = 1000.0;
    assert_eq!(
        then.ticks + snap.mean_ticks(calls),
        ((2.0 * w1 + w3) * 1000.0).round() as u64
    );
}

/// A freed block's lifetime is counted in its decade, with the sum of
/// lifetimes; a block still live, or one found stale when its address is
/// handed out again (its free unseen), is not.
#[test]
fn freed_blocks_are_counted_by_the_decade_of_their_lifetime() {
    let mut s = Sites::default();
    let a = stack(1, 5);
    // 1,000 ticks a µs.
    s.set_lifetime_clock(1_000);
    s.alloc(0x1000, 16, &a, 1, None, 10_000);
    s.alloc(0x2000, 16, &a, 1, None, 10_000);
    s.alloc(0x3000, 16, &a, 1, None, 10_000);
    s.alloc(0x4000, 16, &a, 1, None, 10_000);
    s.free(0x1000, 10_500, |_| 1); // 0.5 µs
    s.free(0x2000, 10_000 + 5_000_000, |_| 1); // 5 ms
    s.alloc(0x3000, 16, &a, 1, None, 99_000_000); // 0x3000's free unseen
    let l = s.lifetimes(0);
    assert_eq!(l.freed, [1, 0, 0, 0, 1, 0, 0, 0, 0]);
    assert_eq!(l.ticks, 500 + 5_000_000);
    assert_eq!(s.counts(0).live_allocs, 2, "0x3000 (again) and 0x4000");
    // Before the clock is set, nothing is counted.
    let mut off = Sites::default();
    off.alloc(0x1000, 16, &a, 1, None, 0);
    off.free(0x1000, 500, |_| 1);
    assert!(off.lifetimes(0).is_empty());
}

impl Snapshot {
    /// A copy holding `stacks` (figures, and return addresses innermost
    /// first) and `modules`, for the encoders' tests.
    pub(crate) fn of_stacks(
        mode: StackMode,
        modules: Vec<unwind::ModuleInfo>,
        stacks: &[(SiteCounts, &[u64])],
    ) -> Snapshot {
        let mut snap = Snapshot::new();
        snap.mode = mode;
        snap.modules = modules;
        assert!(snap.stacks.try_reserve_total(stacks.len()));
        let depth: usize = stacks.iter().map(|(_, f)| f.len()).sum();
        assert!(snap.frames.try_reserve_total(depth));
        for &(counts, frames) in stacks {
            snap.stacks.push(Copied {
                counts,
                mean_calls: 0.0,
                lifetimes: Lifetimes::default(),
                frames_at: snap.frames.len() as u64,
                depth: frames.len() as u32,
            });
            snap.frames.extend_from_slice(frames);
        }
        snap
    }
}
