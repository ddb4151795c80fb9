//! The figures of a comparison: per allocator, the median and spread of
//! each measure; against the baseline, intervals for speed and memory;
//! between every two allocators, the interval of speed the verdict reads;
//! and the verdict. Figures only: rendered as a table by [`super::table`],
//! as JSON by [`crate::json::CompareJson`], as a chart by [`super::plot`].

use super::{Comparison, RunRecord};
use crate::allocator::Allocator;
use crate::stats::{Interval, Spread, fewest_pairs, paired_ratio};

/// Width of a speed interval (high over low) above which the runs are
/// called too noisy to resolve the differences allocators usually make.
pub const NOISY_WIDTH: f64 = 1.10;

/// A measure of a run: of every timing run, or of every recorded one
/// ([`Figure::from_recorded_runs`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Figure {
    /// Wall time.
    Wall,
    /// User CPU time.
    User,
    /// System CPU time.
    Sys,
    /// Peak RSS.
    MaxRss,
    /// Allocation calls.
    AllocationCalls,
    /// Time inside the allocator.
    AllocatorTime,
    /// Allocator time over CPU time.
    AllocatorShare,
}

impl Figure {
    /// Every figure, in table order.
    pub const ALL: [Figure; 7] = [
        Figure::Wall,
        Figure::User,
        Figure::Sys,
        Figure::MaxRss,
        Figure::AllocationCalls,
        Figure::AllocatorTime,
        Figure::AllocatorShare,
    ];

    /// Whether recorded runs give it (else the timing runs do, which
    /// record nothing: see `compare`'s module docs).
    pub fn from_recorded_runs(self) -> bool {
        matches!(
            self,
            Figure::AllocationCalls | Figure::AllocatorTime | Figure::AllocatorShare
        )
    }

    /// Its JSON key (the names `allocmux run --json` uses).
    pub fn key(self) -> &'static str {
        match self {
            Figure::Wall => "wall_ns",
            Figure::User => "user_ns",
            Figure::Sys => "sys_ns",
            Figure::MaxRss => "max_rss_bytes",
            Figure::AllocationCalls => "allocation_calls",
            Figure::AllocatorTime => "allocator_ns",
            Figure::AllocatorShare => "allocator_time_share",
        }
    }
}

/// One allocator's figures.
#[derive(Clone, Debug)]
pub struct AllocatorSummary {
    /// The allocator.
    pub allocator: Allocator,
    /// Measured timing runs.
    pub runs: usize,
    /// Measured recorded runs.
    pub recorded_runs: usize,
    /// Median and spread of every figure, in [`Figure::ALL`] order (each
    /// over the runs that give it).
    pub figures: Vec<(Figure, Spread)>,
    /// How many times faster than the baseline (wall time); `None` for the
    /// baseline itself or with fewer than two rounds.
    pub speedup: Option<Interval>,
    /// Peak RSS over the baseline's.
    pub memory: Option<Interval>,
}

impl AllocatorSummary {
    /// The spread of one figure.
    pub fn spread(&self, f: Figure) -> Spread {
        self.figure(f).expect("every figure is summarised")
    }

    /// The spread of figure `f`, if its runs were made (a comparison
    /// without recorded runs has no figures of theirs).
    pub fn figure(&self, f: Figure) -> Option<Spread> {
        self.figures.iter().find(|(g, _)| *g == f).map(|&(_, s)| s)
    }
}

/// Two allocators' wall times over the paired rounds: the interval the
/// verdict reads to tell them apart.
#[derive(Clone, Debug, PartialEq)]
pub struct Pair {
    /// The later of the two in the allocators' order (so never the baseline).
    pub a: Allocator,
    /// The earlier one.
    pub b: Allocator,
    /// How many times faster `a` is than `b`: `b`'s wall time over `a`'s.
    pub speedup: Interval,
}

impl Pair {
    /// Whether the interval, at `level`, excludes 1: one of the two is
    /// clearly faster.
    pub fn clear(&self, level: f64) -> bool {
        clearly_faster(&self.speedup, level) || clearly_faster(&self.speedup.recip(), level)
    }
}

/// The verdict's one rule: an allocator is clearly faster than another
/// when the interval of its speedup over the other has the confidence
/// asked for (one from too few rounds has less) and lies above 1.
fn clearly_faster(speedup: &Interval, level: f64) -> bool {
    speedup.confidence >= level - 1e-9 && speedup.above(1.0)
}

/// Which allocator is fastest, as far as the runs can tell.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    /// One allocator's wall time is lower than every other's, with every
    /// interval of its speedup excluding 1.
    Winner {
        /// The winner.
        winner: Allocator,
        /// Its speedup over each other allocator.
        margins: Vec<(Allocator, Interval)>,
    },
    /// No allocator beats all others clearly.
    NoClearWinner {
        /// The allocators no other one clearly beats.
        leaders: Vec<Allocator>,
        /// The allocators some other one clearly beats, each with those
        /// that do.
        behind: Vec<(Allocator, Vec<Allocator>)>,
    },
    /// Only one allocator was run.
    Alone,
    /// Too few rounds for an interval at the level asked for.
    TooFewRounds,
}

/// The summary of a comparison.
#[derive(Clone, Debug)]
pub struct Summary {
    /// Measured rounds.
    pub rounds: usize,
    /// Per allocator, baseline first.
    pub per_allocator: Vec<AllocatorSummary>,
    /// Every two allocators, in the allocators' order of the later one,
    /// then of the earlier (those with the baseline first, as in
    /// `per_allocator`); none with fewer than two rounds.
    pub pairs: Vec<Pair>,
    /// The verdict.
    pub verdict: Verdict,
    /// What the reader should know before trusting the verdict.
    pub warnings: Vec<String>,
}

impl Summary {
    /// Summarises the measured rounds of `cmp`.
    pub fn new(cmp: &Comparison) -> Summary {
        let level = cmp.level;
        let measured = |a: &Allocator, recorded: bool| -> Vec<&RunRecord> {
            let mut runs: Vec<&RunRecord> = cmp
                .runs
                .iter()
                .filter(|r| !r.warmup && r.allocator == *a && r.recorded == recorded)
                .collect();
            runs.sort_by_key(|r| r.round);
            runs
        };
        let by_alloc: Vec<Vec<&RunRecord>> =
            cmp.allocators.iter().map(|a| measured(a, false)).collect();
        let recorded: Vec<Vec<&RunRecord>> =
            cmp.allocators.iter().map(|a| measured(a, true)).collect();
        // Only complete rounds pair up (every round is complete unless a run failed).
        let rounds = by_alloc.iter().map(Vec::len).min().unwrap_or(0);
        let recorded_rounds = recorded.iter().map(Vec::len).min().unwrap_or(0);
        let values = |i: usize, f: Figure| -> Vec<f64> {
            let (runs, n) = if f.from_recorded_runs() {
                (&recorded[i], recorded_rounds)
            } else {
                (&by_alloc[i], rounds)
            };
            runs[..n].iter().map(|r| r.figure(f)).collect()
        };
        // Each pair's interval, of the later allocator against the earlier
        // as against the baseline, computed once: the verdict and the
        // printed pairs read the same one. faster[i][j]: how many times
        // faster allocator i is than j.
        let n = cmp.allocators.len();
        let mut pairs = Vec::new();
        let mut faster: Vec<Vec<Option<Interval>>> = vec![vec![None; n]; n];
        for (a, b) in (1..n).flat_map(|a| (0..a).map(move |b| (a, b))) {
            let wall = |i| values(i, Figure::Wall);
            let Some(speedup) = paired_ratio(&wall(b), &wall(a), level) else {
                continue;
            };
            faster[a][b] = Some(speedup);
            faster[b][a] = Some(speedup.recip());
            pairs.push(Pair {
                a: cmp.allocators[a].clone(),
                b: cmp.allocators[b].clone(),
                speedup,
            });
        }
        let per_allocator: Vec<AllocatorSummary> = cmp
            .allocators
            .iter()
            .enumerate()
            .map(|(i, allocator)| AllocatorSummary {
                allocator: allocator.clone(),
                runs: rounds,
                recorded_runs: recorded_rounds,
                figures: Figure::ALL
                    .iter()
                    .filter(|f| rounds > 0 && (recorded_rounds > 0 || !f.from_recorded_runs()))
                    .map(|&f| (f, Spread::of(&values(i, f))))
                    .collect(),
                speedup: faster[i][0],
                memory: (i != 0)
                    .then(|| {
                        paired_ratio(
                            &values(i, Figure::MaxRss),
                            &values(0, Figure::MaxRss),
                            level,
                        )
                    })
                    .flatten(),
            })
            .collect();
        let clearly_faster =
            |i: usize, j: usize| faster[i][j].is_some_and(|iv| clearly_faster(&iv, level));
        let verdict = if n < 2 {
            Verdict::Alone
        } else if rounds < fewest_pairs(level) {
            Verdict::TooFewRounds
        } else if let Some(w) = (0..n).find(|&i| (0..n).all(|j| j == i || clearly_faster(i, j))) {
            Verdict::Winner {
                winner: cmp.allocators[w].clone(),
                margins: (0..n)
                    .filter(|&j| j != w)
                    .map(|j| {
                        (
                            cmp.allocators[j].clone(),
                            faster[w][j].expect("a clear interval"),
                        )
                    })
                    .collect(),
            }
        } else {
            let (leaders, behind): (Vec<usize>, Vec<usize>) =
                (0..n).partition(|&i| !(0..n).any(|j| clearly_faster(j, i)));
            Verdict::NoClearWinner {
                leaders: leaders.iter().map(|&i| cmp.allocators[i].clone()).collect(),
                behind: behind
                    .iter()
                    .map(|&i| {
                        let by = (0..n).filter(|&j| clearly_faster(j, i));
                        (
                            cmp.allocators[i].clone(),
                            by.map(|j| cmp.allocators[j].clone()).collect(),
                        )
                    })
                    .collect(),
            }
        };
        let mut warnings = Vec::new();
        if verdict == Verdict::TooFewRounds {
            let need = fewest_pairs(level);
            warnings.push(format!(
                "{rounds} round{} cannot give {} intervals; run at least {need} (-n {need})",
                if rounds == 1 { "" } else { "s" },
                percent(level)
            ));
        }
        // Noise that the pairing cancels (a slow round for all) does not
        // matter; what is left shows in the width of the intervals.
        let widest = (0..n)
            .flat_map(|i| (0..n).map(move |j| (i, j)))
            .filter_map(|(i, j)| faster[i][j].map(|iv| (i, iv.high / iv.low)))
            .max_by(|a, b| a.1.total_cmp(&b.1));
        if let Some((i, width)) = widest.filter(|&(_, w)| w > NOISY_WIDTH) {
            warnings.push(format!(
                "the runs are noisy: an interval involving {} spans {:.0}%, so smaller \
                 differences cannot be told apart; quiet the machine or add rounds (-n)",
                cmp.allocators[i].name(),
                (width - 1.0) * 100.0
            ));
        }
        Summary {
            rounds,
            per_allocator,
            pairs,
            verdict,
            warnings,
        }
    }

    /// The pairs whose intervals the verdict's words rest on, when they
    /// are not in its line: every pair when there is no clear winner (a
    /// winner's line has its intervals against every other allocator).
    pub fn verdict_pairs(&self) -> &[Pair] {
        match self.verdict {
            Verdict::NoClearWinner { .. } => &self.pairs,
            _ => &[],
        }
    }

    /// The verdict in one line, at `level`: the winner with its intervals,
    /// or which allocators tie and which are clearly slower than which.
    pub fn verdict_line(&self, level: f64) -> String {
        let pct = percent(level);
        match &self.verdict {
            Verdict::Alone => "one allocator only: nothing to compare".to_string(),
            Verdict::TooFewRounds => format!(
                "none: {} round{} cannot tell the allocators apart at {pct}",
                self.rounds,
                if self.rounds == 1 { "" } else { "s" }
            ),
            Verdict::Winner { winner, margins } => {
                let parts: Vec<String> = margins
                    .iter()
                    .map(|(other, iv)| {
                        format!(
                            "{:.2}× ({:.2}–{:.2}) faster than {}",
                            iv.estimate,
                            iv.low,
                            iv.high,
                            other.name()
                        )
                    })
                    .collect();
                format!(
                    "{} is fastest: {} ({pct} intervals)",
                    winner.name(),
                    join_and(&parts)
                )
            }
            Verdict::NoClearWinner { leaders, behind } => {
                let names = |v: &[Allocator]| {
                    join_and(&v.iter().map(|a| a.name().to_string()).collect::<Vec<_>>())
                };
                let mut claims = vec![match leaders.as_slice() {
                    // Every allocator is clearly slower than another (the
                    // intervals need not be transitive): the claims below.
                    [] => "no clear winner".to_string(),
                    // The others are all behind it, but one it does not
                    // clearly beat (or it would win).
                    [leader] => {
                        let not_beaten: Vec<Allocator> = behind
                            .iter()
                            .filter(|(_, by)| !by.contains(leader))
                            .map(|(a, _)| a.clone())
                            .collect();
                        format!(
                            "no clear winner: {} is not clearly faster than {}",
                            leader.name(),
                            names(&not_beaten)
                        )
                    }
                    [_, _] => format!(
                        "no clear winner between {}: their {pct} interval includes 1",
                        names(leaders)
                    ),
                    _ => format!(
                        "no clear winner between {}: each pair's {pct} interval includes 1",
                        names(leaders)
                    ),
                }];
                for (slower, by) in behind {
                    claims.push(format!(
                        "{} is clearly slower than {}",
                        slower.name(),
                        names(by)
                    ));
                }
                claims.join("; ")
            }
        }
    }
}

/// A confidence level as a percentage: "95%", or "99.7%" for the stricter
/// level of `--stop-early`'s looks (which "100%" would overstate).
pub(super) fn percent(level: f64) -> String {
    let p = format!("{:.1}", level * 100.0);
    format!("{}%", p.strip_suffix(".0").unwrap_or(&p))
}

fn join_and(parts: &[String]) -> String {
    match parts {
        [] => String::new(),
        [one] => one.clone(),
        [rest @ .., last] => format!("{} and {last}", rest.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::LEVEL;
    use crate::compare::write_human;

    /// A comparison whose timing runs' wall times are `base` scaled per
    /// allocator, with the same per-round drift for all; its recorded runs
    /// (as `compare` schedules them) take longer, in another ratio, as
    /// recording costs each allocator differently, and count 1,000,000
    /// allocations.
    fn comparison(factors: &[(Allocator, f64)], rounds: usize) -> Comparison {
        let mut runs = Vec::new();
        for round in 1..=rounds {
            let drift = 1.0 + 0.05 * ((round * 7 % 5) as f64 - 2.0);
            let recorded_round = (round - 1) % crate::compare::RECORD_EVERY == 0;
            for recorded in [false, true] {
                if recorded && !recorded_round {
                    continue;
                }
                for (k, (allocator, f)) in factors.iter().enumerate() {
                    let (allocator, f) = (allocator.clone(), *f);
                    // A little independent noise, different per allocator.
                    let noise = 1.0 + 0.002 * (((round + k) * 3 % 5) as f64 - 2.0);
                    let cost = if recorded { 1.5 + k as f64 } else { 1.0 };
                    runs.push(RunRecord {
                        round,
                        warmup: false,
                        recorded,
                        allocator,
                        wall_ns: (1e9 * f * drift * noise * cost) as u64,
                        user_ns: (9e8 * f * cost) as u64,
                        sys_ns: 1e7 as u64,
                        max_rss_bytes: if recorded { 60 << 20 } else { 50 << 20 },
                        allocation_calls: if recorded { 1_000_000 } else { 0 },
                        allocator_ns: if recorded { (1e8 * f) as u64 } else { 0 },
                        profiles: vec![],
                    });
                }
            }
        }
        Comparison {
            command: vec!["prog".into()],
            allocators: factors.iter().map(|(a, _)| a.clone()).collect(),
            runs,
            warmup: 0,
            rounds_planned: rounds,
            stopped_early: false,
            level: LEVEL,
            unrecorded: None,
        }
    }

    use allocmux_format::Backend;

    const SYSTEM: Allocator = Allocator::BuiltIn(Backend::System);
    const JEMALLOC: Allocator = Allocator::BuiltIn(Backend::Jemalloc);
    const MIMALLOC: Allocator = Allocator::BuiltIn(Backend::Mimalloc);

    #[test]
    fn identical_allocators_have_no_clear_winner() {
        let cmp = comparison(&[(SYSTEM, 1.0), (JEMALLOC, 1.0), (MIMALLOC, 1.0)], 10);
        let s = Summary::new(&cmp);
        assert!(
            matches!(&s.verdict, Verdict::NoClearWinner { leaders, behind }
                if leaders.len() == 3 && behind.is_empty()),
            "{:?}",
            s.verdict
        );
        assert!(s.verdict_line(LEVEL).starts_with("no clear winner"));
        let sp = s.per_allocator[1].speedup.unwrap();
        assert!(sp.low < 1.0 && sp.high > 1.0, "{sp:?}");
    }

    #[test]
    fn a_well_separated_allocator_wins() {
        let cmp = comparison(&[(SYSTEM, 1.0), (JEMALLOC, 0.8), (MIMALLOC, 0.7)], 10);
        let s = Summary::new(&cmp);
        let Verdict::Winner { winner, margins } = &s.verdict else {
            panic!("{:?}", s.verdict)
        };
        assert_eq!(*winner, MIMALLOC);
        let over_system = margins.iter().find(|(a, _)| *a == SYSTEM).unwrap().1;
        assert!(
            (over_system.estimate - 1.0 / 0.7).abs() < 0.02,
            "{over_system:?}"
        );
        let line = s.verdict_line(LEVEL);
        assert!(line.starts_with("mimalloc is fastest: 1.43×"), "{line}");
        assert!(line.contains("faster than jemalloc"), "{line}");
        assert!(s.warnings.is_empty(), "{:?}", s.warnings);
        let j = &s.per_allocator[1];
        assert!((j.speedup.unwrap().estimate - 1.25).abs() < 0.01);
        assert_eq!(j.memory.unwrap().estimate, 1.0);
    }

    #[test]
    fn two_leaders_tie_and_the_third_is_behind() {
        let cmp = comparison(&[(SYSTEM, 1.3), (JEMALLOC, 1.0), (MIMALLOC, 1.0)], 10);
        let s = Summary::new(&cmp);
        assert_eq!(
            s.verdict,
            Verdict::NoClearWinner {
                leaders: vec![JEMALLOC, MIMALLOC],
                behind: vec![(SYSTEM, vec![JEMALLOC, MIMALLOC])]
            }
        );
        assert_eq!(
            s.verdict_line(LEVEL),
            "no clear winner between jemalloc and mimalloc: their 95% interval includes 1; \
             system is clearly slower than jemalloc and mimalloc"
        );
    }

    /// Sets the wall time of every timing run: `walls[k]` for the k-th
    /// allocator, round by round.
    fn with_walls(cmp: &mut Comparison, walls: &[[u64; 6]]) {
        for r in cmp.runs.iter_mut().filter(|r| !r.recorded) {
            let k = cmp
                .allocators
                .iter()
                .position(|a| *a == r.allocator)
                .unwrap();
            r.wall_ns = walls[k][r.round - 1] * 1_000_000;
        }
    }

    /// The case where the verdict rested on a pair it did not show:
    /// jemalloc ties with the baseline but is clearly slower than mimalloc,
    /// which also ties with the baseline. The line says than whom, and the
    /// report prints that pair's interval under it.
    #[test]
    fn a_verdict_without_a_winner_shows_every_pair_it_rests_on() {
        let mut cmp = comparison(&[(SYSTEM, 1.0), (JEMALLOC, 1.0), (MIMALLOC, 1.0)], 6);
        with_walls(
            &mut cmp,
            &[
                [100, 100, 100, 100, 100, 100],
                [95, 95, 95, 115, 115, 95],
                [90, 90, 90, 110, 110, 90],
            ],
        );
        let s = Summary::new(&cmp);
        assert_eq!(
            s.verdict,
            Verdict::NoClearWinner {
                leaders: vec![SYSTEM, MIMALLOC],
                behind: vec![(JEMALLOC, vec![MIMALLOC])]
            }
        );
        assert_eq!(
            s.verdict_line(LEVEL),
            "no clear winner between system and mimalloc: their 95% interval includes 1; \
             jemalloc is clearly slower than mimalloc"
        );
        let pairs: Vec<(Allocator, Allocator, bool)> = s
            .verdict_pairs()
            .iter()
            .map(|p| (p.a.clone(), p.b.clone(), p.clear(LEVEL)))
            .collect();
        assert_eq!(
            pairs,
            [
                (JEMALLOC, SYSTEM, false),
                (MIMALLOC, SYSTEM, false),
                (MIMALLOC, JEMALLOC, true)
            ]
        );
        // The pair with the baseline reads as the table above has it.
        assert_eq!(s.pairs[0].speedup, s.per_allocator[1].speedup.unwrap());
        let mut out = Vec::new();
        write_human(&cmp, &s, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        let shown = s.pairs[2].speedup;
        let line = format!(
            "    mimalloc vs jemalloc  {:.2}× faster ({:.2}–{:.2})\n",
            shown.estimate, shown.low, shown.high
        );
        assert!(shown.low > 1.0, "{shown:?}");
        assert!(text.contains(&line), "{line:?} in {text}");
        assert!(
            text.contains("  the pairs it rests on: wall time, 95% intervals as above\n"),
            "{text}"
        );
        for pair in ["jemalloc vs system", "mimalloc vs system"] {
            assert!(
                text.contains(&format!("    {pair:<21} ")),
                "{pair} in {text}"
            );
        }
    }

    /// A winner's line has its intervals against every other allocator,
    /// so nothing is printed under it.
    #[test]
    fn a_winner_rests_on_the_intervals_of_its_own_line() {
        let cmp = comparison(&[(SYSTEM, 1.0), (JEMALLOC, 0.8), (MIMALLOC, 0.7)], 10);
        let s = Summary::new(&cmp);
        assert_eq!(s.pairs.len(), 3);
        assert!(s.verdict_pairs().is_empty());
        let mut out = Vec::new();
        write_human(&cmp, &s, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(!text.contains("rests on"), "{text}");
    }

    /// The claims of a verdict whose leaders the pairs leave one or none.
    #[test]
    fn a_verdict_says_who_is_slower_than_whom() {
        let summary = |leaders, behind| Summary {
            rounds: 10,
            per_allocator: vec![],
            pairs: vec![],
            verdict: Verdict::NoClearWinner { leaders, behind },
            warnings: vec![],
        };
        let one_leader = summary(
            vec![MIMALLOC],
            vec![(JEMALLOC, vec![MIMALLOC]), (SYSTEM, vec![JEMALLOC])],
        );
        assert_eq!(
            one_leader.verdict_line(LEVEL),
            "no clear winner: mimalloc is not clearly faster than system; \
             jemalloc is clearly slower than mimalloc; system is clearly slower than jemalloc"
        );
        let a_cycle = summary(
            vec![],
            vec![
                (SYSTEM, vec![MIMALLOC]),
                (JEMALLOC, vec![SYSTEM]),
                (MIMALLOC, vec![JEMALLOC]),
            ],
        );
        assert!(
            a_cycle
                .verdict_line(LEVEL)
                .starts_with("no clear winner; system is clearly slower than mimalloc; "),
            "{}",
            a_cycle.verdict_line(LEVEL)
        );
        let all_tied = summary(vec![SYSTEM, JEMALLOC, MIMALLOC], vec![]);
        assert_eq!(
            all_tied.verdict_line(0.99),
            "no clear winner between system, jemalloc and mimalloc: each pair's 99% interval \
             includes 1"
        );
    }

    #[test]
    fn stricter_levels_are_not_rounded_up_to_100() {
        assert_eq!(percent(0.95), "95%");
        assert_eq!(percent(1.0 - 0.05 / 15.0), "99.7%");
    }

    #[test]
    fn too_few_rounds_name_no_winner_and_say_why() {
        let cmp = comparison(&[(SYSTEM, 1.0), (MIMALLOC, 0.5)], 5);
        let s = Summary::new(&cmp);
        assert_eq!(s.verdict, Verdict::TooFewRounds);
        assert!(s.warnings[0].contains("-n 6"), "{:?}", s.warnings);
        assert_eq!(
            s.verdict_line(LEVEL),
            "none: 5 rounds cannot tell the allocators apart at 95%"
        );
    }

    #[test]
    fn noisy_runs_are_flagged() {
        let mut cmp = comparison(&[(SYSTEM, 1.0), (MIMALLOC, 1.0)], 8);
        for (i, r) in cmp.runs.iter_mut().enumerate() {
            if r.allocator == MIMALLOC {
                r.wall_ns = r.wall_ns * (1 + (i as u64 % 3)) / 2;
            }
        }
        let s = Summary::new(&cmp);
        assert!(
            s.warnings.iter().any(|w| w.contains("noisy")),
            "{:?}",
            s.warnings
        );
    }

    /// A program that cannot be recorded is compared on its timing runs
    /// alone: the verdict stands, and the figures only recording measures
    /// are said to be unknown, with the reason, in the table and the JSON.
    #[test]
    fn a_comparison_without_recorded_runs_says_its_counts_are_unknown() {
        let mut cmp = comparison(&[(SYSTEM, 1.0), (JEMALLOC, 0.8)], 6);
        cmp.runs.retain(|r| !r.recorded);
        cmp.unrecorded = Some("./app counts nothing".into());
        let s = Summary::new(&cmp);
        assert!(
            matches!(s.verdict, Verdict::Winner { .. }),
            "{:?}",
            s.verdict
        );
        let mut out = Vec::new();
        write_human(&cmp, &s, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.contains("share: not measured (./app counts nothing)"),
            "{text}"
        );
        let row = text
            .lines()
            .find(|l| l.trim_start().starts_with("jemalloc"))
            .unwrap();
        let tail: Vec<&str> = row.split_whitespace().rev().take(3).collect();
        assert_eq!(tail, ["?", "?", "?"], "{row:?}");
        let v = serde_json::to_value(crate::json::CompareJson::new(&cmp, &s)).unwrap();
        let j = &v["allocators"][1]["figures"];
        assert!(
            j.get("wall_ns").is_some() && j.get("allocation_calls").is_none(),
            "{j}"
        );
    }

    #[test]
    fn json_has_every_run_and_summary() {
        let cmp = comparison(&[(SYSTEM, 1.0), (JEMALLOC, 0.8)], 6);
        let s = Summary::new(&cmp);
        let v = serde_json::to_value(crate::json::CompareJson::new(&cmp, &s)).unwrap();
        // 6 rounds of 2 timing runs, and 2 recorded runs in rounds 1 and 4.
        assert_eq!(v["runs"].as_array().unwrap().len(), 16);
        for run in v["runs"].as_array().unwrap() {
            let recorded = run["recorded"].as_bool().unwrap();
            assert!(run["wall_ns"].as_u64().unwrap() > 0, "{run}");
            assert_eq!(run.get("allocation_calls").is_some(), recorded, "{run}");
        }
        assert_eq!(v["verdict"]["winner"], "jemalloc");
        let j = &v["allocators"][1];
        assert!(j["figures"]["wall_ns"]["median"].as_f64().unwrap() > 0.0);
        assert!(j["speedup_vs_baseline"]["low"].as_f64().unwrap() > 1.0);
        assert_eq!(
            v["allocators"][0]["speedup_vs_baseline"],
            serde_json::Value::Null
        );
        assert_eq!(
            v["pairs"],
            serde_json::json!([{
                "a": "jemalloc",
                "b": "system",
                "figure": "wall_ns",
                "ratio": j["speedup_vs_baseline"]["estimate"],
                "low": j["speedup_vs_baseline"]["low"],
                "high": j["speedup_vs_baseline"]["high"],
                "confidence": j["speedup_vs_baseline"]["confidence"],
                "clear": true,
            }])
        );
        let mut out = Vec::new();
        write_human(&cmp, &s, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("jemalloc is fastest"), "{text}");
        assert!(text.contains("1.25× faster"), "{text}");
        assert!(text.contains("2 recorded runs of each"), "{text}");
    }

    /// Times and memory come from the timing runs alone, counts and the
    /// allocator's time from the recorded runs alone, whose times (slower,
    /// and in another ratio) change no figure.
    #[test]
    fn each_figure_comes_from_the_runs_that_give_it() {
        let cmp = comparison(&[(SYSTEM, 1.0), (MIMALLOC, 0.8)], 7);
        let s = Summary::new(&cmp);
        let mi = &s.per_allocator[1];
        assert_eq!((mi.runs, mi.recorded_runs), (7, 3));
        assert_eq!(mi.spread(Figure::MaxRss).median, (50u64 << 20) as f64);
        assert_eq!(mi.spread(Figure::AllocationCalls).median, 1e6);
        assert_eq!(mi.spread(Figure::AllocatorTime).median, 8e7);
        // Shown with the range of its recorded runs.
        let mut out = Vec::new();
        write_human(&cmp, &s, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("alloc time (range)"), "{text}");
        let row = text
            .lines()
            .find(|l| l.trim_start().starts_with("mimalloc"))
            .unwrap();
        assert!(row.contains(" 80.00 ms (80.00–80.00) "), "{row}");
        let speedup = mi.speedup.unwrap();
        assert!((speedup.estimate - 1.25).abs() < 0.01, "{speedup:?}");
        let timing_medians: Vec<f64> = [SYSTEM, MIMALLOC]
            .iter()
            .map(|a| {
                let mut w: Vec<f64> = cmp
                    .runs
                    .iter()
                    .filter(|r| r.allocator == *a && !r.recorded)
                    .map(|r| r.wall_ns as f64)
                    .collect();
                w.sort_by(f64::total_cmp);
                w[w.len() / 2]
            })
            .collect();
        assert_eq!(
            s.per_allocator[0].spread(Figure::Wall).median,
            timing_medians[0]
        );
        assert_eq!(mi.spread(Figure::Wall).median, timing_medians[1]);
    }
}
