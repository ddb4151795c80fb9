//! `allocmux compare`: runs one command under several allocators,
//! interleaved round by round, and says which is faster with intervals
//! honest enough to act on.
//!
//! Two kinds of run, so that recording does not change what is compared:
//! every round times each allocator with nothing of allocmux's recording
//! (its forwarder, or under glibc no preload at all), which gives wall,
//! user and sys time and max RSS; every [`RECORD_EVERY`]-th round, from
//! the first, also runs each allocator recorded, which gives the
//! allocation counts, the allocator's time and share, its statistics and
//! the memory timeline. Recording costs each allocator differently, so
//! timing a recorded run would understate the fastest one.

pub mod plot;
mod summary;
mod table;

use std::io::Write;

use anyhow::{Context, Result, bail};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use allocmux_format::Backend;
use allocmux_format::profile::ProcessProfile;

use crate::allocator::Allocator;
use crate::launch::{self, Launch, Output};
use crate::units::shell_words;

pub use summary::{AllocatorSummary, Figure, Pair, Summary, Verdict};
pub use table::write_human;

/// The confidence level of the reported intervals.
pub const LEVEL: f64 = 0.95;

/// The fewest measured rounds, those whose signed-rank interval can reach
/// [`LEVEL`] at all ([`crate::stats::fewest_pairs`]): `-n` refuses fewer,
/// whose intervals would fall short of the level they are printed under,
/// and `--stop-early` first looks after this many.
pub const MIN_ROUNDS: usize = 6;

/// Most rounds `-n` takes.
pub const MAX_ROUNDS: usize = 1000;

/// Rounds with recorded runs: the first measured round and every this
/// many after it (see the module docs). Their figures (counts, allocator
/// time) vary little from run to run, so a few runs give their medians;
/// one in three keeps them to about a third of the time.
pub const RECORD_EVERY: usize = 3;

/// Most rounds run when `-n` is not given.
pub const DEFAULT_MAX_ROUNDS: usize = 10;

/// About how long a comparison without `-n` may take (past the first round).
const DEFAULT_BUDGET_NS: u64 = 60_000_000_000;

/// What to compare and how.
#[derive(Debug)]
pub struct Options {
    /// The command and its arguments.
    pub command: Vec<String>,
    /// The allocators, in the order they run within a round; the first is
    /// the baseline of the ratios (`system` when present, moved to the front).
    pub allocators: Vec<Allocator>,
    /// Measured rounds (the most, with `stop_early`); `None` chooses from
    /// how long the first round takes (see [`default_rounds`]).
    pub rounds: Option<usize>,
    /// Unmeasured rounds first, to warm caches and the page cache.
    pub warmup: usize,
    /// Stop once the verdict is clear (see [`looks_level`]).
    pub stop_early: bool,
    /// Append the programs' output to this file instead of discarding it.
    pub log: Option<std::fs::File>,
    /// The file every run reads as its stdin (else an empty stdin).
    pub input: Option<std::path::PathBuf>,
    /// Extra environment for the program (stack recording, for example).
    pub env: Vec<(String, String)>,
    /// Why the program cannot be recorded, if it cannot: then only timing
    /// runs are made, and the figures of recorded runs are not measured.
    pub unrecorded: Option<String>,
}

/// One run of the command under one allocator.
#[derive(Clone, Debug)]
pub struct RunRecord {
    /// Round number, from 1 (warm-up rounds have their own numbers).
    pub round: usize,
    /// Whether this was a warm-up run (not in the statistics).
    pub warmup: bool,
    /// Whether this run was recorded (its counts and allocator time are
    /// figures; its times are not, see the module docs) or a timing run.
    pub recorded: bool,
    /// The allocator.
    pub allocator: Allocator,
    /// Wall time around the run.
    pub wall_ns: u64,
    /// User CPU time of the process tree (the kernel's accounting).
    pub user_ns: u64,
    /// System CPU time of the process tree.
    pub sys_ns: u64,
    /// Peak resident set size of the main process (the kernel's).
    pub max_rss_bytes: u64,
    /// Allocation calls (malloc, calloc, realloc, ...) of all processes
    /// (recorded runs only).
    pub allocation_calls: u64,
    /// Estimated time inside the allocator, all processes (recorded runs
    /// only).
    pub allocator_ns: u64,
    /// The processes' profiles, for the timeline plot (recorded runs only).
    pub profiles: Vec<ProcessProfile>,
}

impl RunRecord {
    /// Share of the CPU time spent in the allocator.
    pub fn allocator_share(&self) -> f64 {
        crate::units::share(self.allocator_ns, self.user_ns + self.sys_ns)
    }

    /// Whether this run gives figure `f`: a timing run gives times and
    /// memory, a recorded run what only recording measures.
    pub fn gives(&self, f: Figure) -> bool {
        self.recorded == f.from_recorded_runs()
    }

    /// The value of one figure.
    pub fn figure(&self, f: Figure) -> f64 {
        match f {
            Figure::Wall => self.wall_ns as f64,
            Figure::User => self.user_ns as f64,
            Figure::Sys => self.sys_ns as f64,
            Figure::MaxRss => self.max_rss_bytes as f64,
            Figure::AllocationCalls => self.allocation_calls as f64,
            Figure::AllocatorTime => self.allocator_ns as f64,
            Figure::AllocatorShare => self.allocator_share(),
        }
    }
}

/// Everything a comparison measured.
#[derive(Debug)]
pub struct Comparison {
    /// The command.
    pub command: Vec<String>,
    /// The allocators, baseline first.
    pub allocators: Vec<Allocator>,
    /// Every run, warm-up runs included, in the order they ran.
    pub runs: Vec<RunRecord>,
    /// Warm-up rounds asked for.
    pub warmup: usize,
    /// Measured rounds asked for.
    pub rounds_planned: usize,
    /// Whether the comparison stopped before `rounds_planned` because the
    /// verdict was clear.
    pub stopped_early: bool,
    /// The confidence level of the intervals: [`LEVEL`], or the stricter
    /// per-look level when `--stop-early` looked more than once.
    pub level: f64,
    /// Why no run was recorded, if none could be ([`Options::unrecorded`]).
    pub unrecorded: Option<String>,
}

/// Rounds when none are asked for: as many as fit in about a minute
/// after the first round took `round_ns`, at least [`MIN_ROUNDS`] (the
/// fewest that give a 95% interval) and at most [`DEFAULT_MAX_ROUNDS`].
pub fn default_rounds(round_ns: u64) -> usize {
    let fit = DEFAULT_BUDGET_NS / round_ns.max(1);
    (fit as usize).clamp(MIN_ROUNDS, DEFAULT_MAX_ROUNDS)
}

/// The level each look uses with `--stop-early` over at most `rounds`
/// rounds: the 5% error is split evenly over the looks (Bonferroni), one
/// after each round from [`MIN_ROUNDS`], so looking after every round
/// cannot turn noise into a winner more often than a single look would.
pub fn looks_level(rounds: usize) -> f64 {
    let looks = rounds.saturating_sub(MIN_ROUNDS - 1).max(1);
    1.0 - (1.0 - LEVEL) / looks as f64
}

/// Why `rounds` measured rounds cannot be asked for, if they cannot: fewer
/// than [`MIN_ROUNDS`] or more than [`MAX_ROUNDS`] (`-n` is refused with
/// this message).
pub fn check_rounds(rounds: usize) -> Result<(), String> {
    if rounds < MIN_ROUNDS {
        Err(format!(
            "{rounds} round{} cannot give a {:.0}% interval; the fewest that can are {MIN_ROUNDS}",
            if rounds == 1 { "" } else { "s" },
            LEVEL * 100.0
        ))
    } else if rounds > MAX_ROUNDS {
        Err(format!("at most {MAX_ROUNDS} rounds"))
    } else {
        Ok(())
    }
}

/// Runs the comparison, with a progress bar on stderr when it is a terminal.
pub fn run(mut opts: Options) -> Result<Comparison> {
    if let Some(rounds) = opts.rounds {
        check_rounds(rounds).map_err(crate::error::usage)?;
    }
    if opts.allocators.is_empty() {
        return Err(crate::error::usage(
            "no allocator to compare; name them with -a system,jemalloc,mimalloc",
        ));
    }
    let mut seen: Vec<&str> = Vec::new();
    for a in &opts.allocators {
        // By name: the reports tell the allocators apart by it.
        if seen.contains(&a.name()) {
            return Err(crate::error::usage(format_args!(
                "allocator {} is listed twice in -a",
                a.name()
            )));
        }
        seen.push(a.name());
    }
    if let Some(i) = opts
        .allocators
        .iter()
        .position(|a| *a == Allocator::BuiltIn(Backend::System))
    {
        opts.allocators[..=i].rotate_right(1);
    }
    // Until the first round has shown how long one takes, plan for the most.
    let mut rounds = opts.rounds.unwrap_or(DEFAULT_MAX_ROUNDS);
    let per_round = opts.allocators.len();
    let bar = ProgressBar::with_draw_target(
        Some(((opts.warmup + rounds) * per_round) as u64),
        ProgressDrawTarget::stderr(),
    );
    bar.set_style(
        ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} runs, {elapsed} · {msg}")
            .expect("a valid template")
            .progress_chars("=> "),
    );
    bar.set_prefix("allocmux compare");
    let mut cmp = Comparison {
        command: opts.command.clone(),
        allocators: opts.allocators.clone(),
        runs: Vec::new(),
        warmup: opts.warmup,
        rounds_planned: rounds,
        stopped_early: false,
        level: LEVEL,
        unrecorded: opts.unrecorded.clone(),
    };
    let mut round = 0;
    while round < opts.warmup + rounds {
        round += 1;
        let warmup = round <= opts.warmup;
        let measured = round.saturating_sub(opts.warmup);
        let record = !warmup && (measured - 1) % RECORD_EVERY == 0 && opts.unrecorded.is_none();
        let kinds: &[bool] = if record { &[false, true] } else { &[false] };
        for &recorded in kinds {
            for alloc in &opts.allocators {
                bar.set_message(match (warmup, recorded) {
                    (true, _) => format!("warm-up, {}", alloc.name()),
                    (false, false) => format!("round {measured} of {rounds}, {}", alloc.name()),
                    (false, true) => {
                        format!("round {measured} of {rounds}, {} recorded", alloc.name())
                    }
                });
                let rec = run_once(&opts, alloc, round, warmup, recorded);
                bar.inc(1);
                match rec {
                    Ok(r) => cmp.runs.push(r),
                    Err(e) => {
                        bar.finish_and_clear();
                        return Err(e);
                    }
                }
            }
        }
        if round == 1 && opts.rounds.is_none() {
            // The timing runs of the round; recorded ones come in a third
            // of the rounds, at a cost the budget leaves room for.
            let took: u64 = cmp
                .runs
                .iter()
                .filter(|r| !r.recorded)
                .map(|r| r.wall_ns)
                .sum();
            rounds = default_rounds(took);
            bar.set_length(((opts.warmup + rounds) * per_round) as u64);
        }
        if opts.stop_early {
            cmp.level = looks_level(rounds);
            if stops_early(&cmp, measured, rounds) {
                cmp.stopped_early = true;
                break;
            }
        }
    }
    cmp.rounds_planned = rounds;
    bar.finish_and_clear();
    Ok(cmp)
}

/// Whether `--stop-early` ends the comparison `cmp` (its intervals at
/// the level of the looks) after `measured` of at most `rounds` measured
/// rounds: when its verdict names a winner before the last round. Never
/// before [`MIN_ROUNDS`], whose intervals cannot reach the level (their
/// summary would name no winner anyway).
fn stops_early(cmp: &Comparison, measured: usize, rounds: usize) -> bool {
    measured >= MIN_ROUNDS
        && measured < rounds
        && matches!(Summary::new(cmp).verdict, Verdict::Winner { .. })
}

fn run_once(
    opts: &Options,
    alloc: &Allocator,
    round: usize,
    warmup: bool,
    recorded: bool,
) -> Result<RunRecord> {
    // Warm-up rounds count 1..=warmup, measured rounds from 1 again.
    let round = if warmup { round } else { round - opts.warmup };
    let output = match &opts.log {
        Some(f) => {
            let mut f = f.try_clone().context("writing the log")?;
            writeln!(
                f,
                "==> allocmux compare: {} round {round}{} under {}{}",
                shell_words(&opts.command),
                if warmup { " (warm-up)" } else { "" },
                alloc.name(),
                if recorded { ", recorded" } else { "" }
            )
            .context("writing the log")?;
            Output::Log(f)
        }
        None => Output::Discard,
    };
    let out = launch::launch(&Launch {
        command: &opts.command,
        allocator: alloc.clone(),
        record: recorded,
        output,
        input: opts.input.as_deref(),
        env: if recorded {
            opts.env.clone()
        } else {
            Vec::new()
        },
    })?;
    if out.exit.code != Some(0) {
        let how = match (out.exit.code, out.exit.signal) {
            (Some(c), _) => format!("exit status {c}"),
            (None, Some(s)) => format!("killed by {} ({s})", crate::sys::signal_name(s)),
            (None, None) => "an unknown status".to_string(),
        };
        let see = if opts.log.is_some() {
            "its output is in the log"
        } else {
            "pass --log FILE to keep its output, or run it with `allocmux run`"
        };
        bail!(
            "`{}` failed under {} in {} {round}{} ({how}); the comparison stopped ({see})",
            shell_words(&opts.command),
            alloc.name(),
            if warmup { "warm-up round" } else { "round" },
            if recorded { ", recorded" } else { "" },
        );
    }
    let mut rec = RunRecord {
        round,
        warmup,
        recorded,
        allocator: alloc.clone(),
        wall_ns: out.wall_ns,
        user_ns: out.exit.user_ns,
        sys_ns: out.exit.sys_ns,
        max_rss_bytes: out.exit.max_rss_bytes,
        allocation_calls: 0,
        allocator_ns: 0,
        profiles: Vec::new(),
    };
    if recorded {
        out.check_recorded()?;
        let report = out.report(&opts.command, alloc.name());
        let t = report.total();
        rec.allocation_calls = t.totals.allocation_calls();
        rec.allocator_ns = t.allocator_ns;
        rec.profiles = report.processes.into_iter().map(|p| p.profile).collect();
    }
    Ok(rec)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_rounds_fit_a_minute() {
        assert_eq!(default_rounds(1_000_000), DEFAULT_MAX_ROUNDS);
        assert_eq!(default_rounds(7_500_000_000), 8);
        assert_eq!(default_rounds(30_000_000_000), MIN_ROUNDS);
        assert_eq!(default_rounds(0), DEFAULT_MAX_ROUNDS);
    }

    #[test]
    fn the_fewest_rounds_reach_the_level() {
        assert_eq!(MIN_ROUNDS, crate::stats::fewest_pairs(LEVEL));
    }

    /// With `--stop-early`, no look before [`MIN_ROUNDS`], and the last
    /// round can always reach the stricter level of the looks: a winner
    /// that is clear at the end is never lost to the correction.
    #[test]
    fn every_look_level_is_reached_by_the_last_round() {
        for rounds in MIN_ROUNDS..=MAX_ROUNDS {
            let need = crate::stats::fewest_pairs(looks_level(rounds));
            assert!((MIN_ROUNDS..=rounds).contains(&need), "-n {rounds}: {need}");
        }
    }

    /// The comparison after `walls[0].len()` measured rounds, each
    /// allocator's timing runs taking `walls[k][r]` ms in round `r + 1`,
    /// with its intervals at the level of `--stop-early`'s looks over at
    /// most `rounds` rounds.
    fn timed(allocators: &[Allocator], walls: &[Vec<u64>], rounds: usize) -> Comparison {
        let runs = (0..walls[0].len())
            .flat_map(|r| {
                allocators
                    .iter()
                    .zip(walls)
                    .map(move |(allocator, w)| RunRecord {
                        round: r + 1,
                        warmup: false,
                        recorded: false,
                        allocator: allocator.clone(),
                        wall_ns: w[r] * 1_000_000,
                        user_ns: w[r] * 900_000,
                        sys_ns: 1_000_000,
                        max_rss_bytes: 50 << 20,
                        allocation_calls: 0,
                        allocator_ns: 0,
                        profiles: vec![],
                    })
            })
            .collect();
        Comparison {
            command: vec!["prog".into()],
            allocators: allocators.to_vec(),
            runs,
            warmup: 0,
            rounds_planned: rounds,
            stopped_early: false,
            level: looks_level(rounds),
            unrecorded: None,
        }
    }

    /// After which measured round `--stop-early` ends a comparison of at
    /// most `rounds` rounds with these wall times (as in [`timed`]), if it
    /// does: it looks after every round, as `run` does.
    fn first_stop(allocators: &[Allocator], walls: &[Vec<u64>], rounds: usize) -> Option<usize> {
        (1..=rounds).find(|&measured| {
            let so_far: Vec<Vec<u64>> = walls.iter().map(|w| w[..measured].to_vec()).collect();
            stops_early(&timed(allocators, &so_far, rounds), measured, rounds)
        })
    }

    /// Wall times of `rounds` rounds: `base` ms, give or take up to 20 ms
    /// that vary from round to round (differently for each `seed`).
    fn jittered(base: u64, seed: usize, rounds: usize) -> Vec<u64> {
        (0..rounds)
            .map(|r| base + ((r * 7 + seed * 3) % 5) as u64 * 10)
            .collect()
    }

    const SYSTEM: Allocator = Allocator::BuiltIn(Backend::System);
    const JEMALLOC: Allocator = Allocator::BuiltIn(Backend::Jemalloc);
    const MIMALLOC: Allocator = Allocator::BuiltIn(Backend::Mimalloc);

    /// An allocator faster in every round stops the comparison at the first
    /// look whose interval can reach the stricter level of the looks: over
    /// at most 20 rounds, 15 looks share the 5%, and the 10th round is the
    /// first that can reach 1 − 0.05/15 (1 − 2⁻⁹).
    #[test]
    fn a_winner_of_every_round_stops_at_the_first_look_that_can_tell() {
        let walls = [jittered(300, 0, 20), jittered(100, 1, 20)];
        let stop = first_stop(&[SYSTEM, MIMALLOC], &walls, 20);
        assert_eq!(stop, Some(10));
        assert_eq!(stop, Some(crate::stats::fewest_pairs(looks_level(20))));
        // The verdict it stopped on names the winner at the looks' level.
        let so_far: Vec<Vec<u64>> = walls.iter().map(|w| w[..10].to_vec()).collect();
        let s = Summary::new(&timed(&[SYSTEM, MIMALLOC], &so_far, 20));
        assert!(
            matches!(
                s.verdict,
                Verdict::Winner {
                    winner: MIMALLOC,
                    ..
                }
            ),
            "{:?}",
            s.verdict
        );
        // With three allocators, the winner must beat both.
        let walls = [
            jittered(300, 0, 20),
            jittered(200, 1, 20),
            jittered(100, 2, 20),
        ];
        assert_eq!(
            first_stop(&[SYSTEM, JEMALLOC, MIMALLOC], &walls, 20),
            Some(10)
        );
    }

    /// A round the winner loses puts the stop off; losing every other
    /// round, or being faster than one allocator but not the other, never
    /// stops the comparison.
    #[test]
    fn a_lost_round_delays_the_stop_and_a_tie_never_stops() {
        let mut walls = [jittered(300, 0, 20), jittered(100, 1, 20)];
        walls[1][2] = 400;
        let stop = first_stop(&[SYSTEM, MIMALLOC], &walls, 20);
        assert!(stop.is_some_and(|m| m > 10), "{stop:?}");
        let alternating: Vec<u64> = (0..20)
            .map(|r| if r % 2 == 0 { 100 } else { 500 })
            .collect();
        let walls = [jittered(300, 0, 20), alternating];
        assert_eq!(first_stop(&[SYSTEM, MIMALLOC], &walls, 20), None);
        let walls = [
            jittered(300, 0, 20),
            jittered(100, 1, 20),
            jittered(100, 2, 20),
        ];
        assert_eq!(first_stop(&[SYSTEM, JEMALLOC, MIMALLOC], &walls, 20), None);
    }

    /// The last round is no early stop, and no look comes before
    /// [`MIN_ROUNDS`]: with `-n 6` a comparison always runs its 6 rounds.
    #[test]
    fn the_last_round_is_not_an_early_stop() {
        let walls = [jittered(300, 0, 6), jittered(100, 1, 6)];
        assert_eq!(first_stop(&[SYSTEM, MIMALLOC], &walls, 6), None);
        // At the 6th round the verdict is clear all the same.
        let s = Summary::new(&timed(&[SYSTEM, MIMALLOC], &walls, 6));
        assert!(
            matches!(s.verdict, Verdict::Winner { .. }),
            "{:?}",
            s.verdict
        );
    }

    #[test]
    fn looks_split_the_error() {
        assert_eq!(looks_level(1), LEVEL);
        assert_eq!(looks_level(6), LEVEL);
        assert!((looks_level(10) - 0.99).abs() < 1e-12);
    }
}
