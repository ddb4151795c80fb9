//! `allocmux demo`: the whole product on a bundled workload, no arguments,
//! no network. It compares the three allocators on this binary's own
//! allocation-heavy workload, records where it allocates, and draws both.

use std::path::PathBuf;

use allocmux_format::Backend;
use allocmux_format::profile::StackMode;
use anyhow::{Context, Result};

use crate::allocator::Allocator;
use crate::compare::{self, Summary};
use crate::json::CompareJson;
use crate::launch::{self, Launch, Output};
use crate::output::OutputFile;
use crate::stacks::{StackSet, Weight};
use crate::symbolize::Symbolizer;
use crate::units::shell_words;

const WORKLOAD: &str = "edit-distance";

/// Word pairs per run: about 0.3 s per run on a 2-core machine,
/// so the whole demo (48 runs and a stack recording) takes about 20 s
/// (22 s by `time allocmux demo` on a shared 2-core VM).
const DEFAULT_SIZE: u64 = 500_000;

/// Rounds of the comparison: enough for 95% intervals with room to spare.
const DEFAULT_ROUNDS: usize = 15;

/// What the demo can be told: where its files go, and (hidden options,
/// for the tests) how big and how long.
#[derive(Debug)]
pub struct DemoOptions {
    /// Directory for the demo's profiles and reports.
    pub dir: PathBuf,
    /// Word pairs per run.
    pub size: Option<u64>,
    /// Rounds of the comparison.
    pub rounds: Option<usize>,
}

/// Runs the demo, writing its charts, flamegraphs and profile into
/// `opts.dir`.
pub fn run(opts: &DemoOptions) -> Result<i32> {
    let dir = opts.dir.as_path();
    if dir.exists() && !dir.is_dir() {
        anyhow::bail!(
            "{} is not a directory; name one for the demo's files with -o DIR",
            dir.display()
        );
    }
    std::fs::create_dir_all(dir)
        .with_context(|| format!("creating the directory {}", dir.display()))?;
    let exe = std::env::current_exe().context("finding the allocmux executable")?;
    let w = allocmux_workloads::find(WORKLOAD).expect("the demo workload exists");
    let size = opts.size.unwrap_or(DEFAULT_SIZE);
    let command = vec![
        exe.to_string_lossy().into_owned(),
        "__workload".into(),
        WORKLOAD.into(),
        size.to_string(),
    ];
    let file = |name: &str| dir.join(format!("allocmux-demo-{name}"));
    // Claim every output before the work, so a bad directory fails at once.
    let outputs = [
        "compare.svg",
        "compare.json",
        "flame-count.svg",
        "flame-bytes.svg",
        "flame-time.svg",
        "stacks.prof",
    ]
    .map(|name| OutputFile::claim(&file(name), true, "demo output"));
    let [
        compare_svg,
        compare_json,
        flame_count,
        flame_bytes,
        flame_time,
        profile,
    ] = outputs;
    let (compare_svg, compare_json, profile) = (compare_svg?, compare_json?, profile?);
    let flames = [
        (Weight::Count, flame_count?),
        (Weight::Bytes, flame_bytes?),
        (Weight::Time, flame_time?),
    ];

    println!(
        "allocmux demo: the bundled `{WORKLOAD}` workload ({}), {size} word pairs.\n\
         1. Which allocator? It runs under system (glibc), jemalloc and mimalloc, interleaved.\n",
        w.about
    );
    let cmp = compare::run(compare::Options {
        command: command.clone(),
        allocators: Backend::BUILT_IN.map(Allocator::BuiltIn).to_vec(),
        rounds: Some(opts.rounds.unwrap_or(DEFAULT_ROUNDS)),
        warmup: 1,
        stop_early: false,
        log: None,
        input: None,
        env: vec![],
        unrecorded: None,
    })?;
    let summary = Summary::new(&cmp);
    compare::write_human(&cmp, &summary, &mut std::io::stdout().lock())?;
    let title = format!("allocmux demo: {WORKLOAD} {size}, three allocators");
    compare_svg.write(compare::plot::svg(&cmp, &summary, &title)?.as_bytes())?;
    compare_json.write(crate::json::to_pretty(&CompareJson::new(&cmp, &summary)).as_bytes())?;

    println!("\n2. Where from? One more run under system, with a sample of call stacks.");
    let out = launch::launch(&Launch {
        command: &command,
        allocator: Allocator::BuiltIn(Backend::System),
        record: true,
        output: Output::Discard,
        input: None,
        // Every stack: the workload's millions of allocations take about
        // a second more so, and the counts, temporaries and advice are
        // exact.
        env: launch::StackRecording::only(StackMode::Exact).env(),
    })?;
    anyhow::ensure!(
        out.exit.code == Some(0),
        "the demo workload failed while recording stacks ({:?})",
        out.exit
    );
    out.check_recorded()?;
    profile.write(allocmux_format::profile::to_string(&out.profiles).as_bytes())?;
    let report = out.report(&command, "system");
    let mut sym = Symbolizer::new();
    let set = StackSet::build(&out.profiles, &mut sym)
        .map_err(|e| anyhow::anyhow!("the demo recorded no call stacks: {e}"))?;
    let mut written: Vec<(Weight, PathBuf)> = Vec::new();
    for (weight, file) in flames {
        let title = format!("allocmux demo: {} — system", shell_words(&command[1..]));
        let svg = crate::render::flamegraph(
            &set.folded(weight),
            &crate::render::labels(&set, weight, title),
        )?;
        file.write(&svg)?;
        written.push((weight, file.path().to_path_buf()));
    }
    let top = set
        .merged(Weight::Count)
        .into_iter()
        .next()
        .map(|s| {
            let share = 100.0 * s.values.allocs as f64 / set.total().allocs.max(1) as f64;
            format!(
                "The top stack by count, {share:.0}% of the calls, is\n    {}",
                crate::stack_line::stack_line(&s)
            )
        })
        .unwrap_or_default();
    let t = report.total();

    println!(
        "\nWhat the pictures show (all in {}):",
        dir.canonicalize().unwrap_or(dir.to_path_buf()).display()
    );
    println!(
        "  {}  time and peak memory per allocator: every run a dot, the box its middle half,\n\
         {:>w$}  the bar its median. The verdict above names a winner only when its 95% interval\n\
         {:>w$}  excludes the others. Every figure is in {}.",
        compare_svg.path().display(),
        "",
        "",
        compare_json.path().display(),
        w = compare_svg.path().display().to_string().len(),
    );
    for (weight, path) in &written {
        println!("  {}  flamegraph of {}", path.display(), weight.describe());
    }
    // What to change, as the profile says it (`report` prints the same).
    let advice = crate::advice::advise(&set)
        .map(|a| format!("  What to change: {}.\n", a.text))
        .unwrap_or_default();
    println!(
        "  Open the SVGs in a browser: click a frame to zoom, Ctrl+F to search.\n\n  \
         The workload made {} allocation calls; {:.0}% of its CPU time went into glibc's allocator.\n  \
         {top}\n\
         {advice}\n  \
         Next: `allocmux report {}` for the full profile, `allocmux compare -- YOUR_PROGRAM`\n  \
         and `allocmux flame -- YOUR_PROGRAM` for your own.",
        crate::units::Count(t.totals.allocation_calls()),
        100.0 * t.allocator_ns as f64 / t.cpu_ns.max(1) as f64,
        profile.path().display(),
    );
    Ok(0)
}
