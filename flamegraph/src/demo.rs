//! `allocmux demo`: the whole product on a bundled workload, no arguments,
//! no network. It runs this binary's own allocation-heavy workload under
//! each allocator and shows what allocmux reports for each.

use std::path::Path;

use anyhow::{Context, Result};

use crate::cli::OutputFile;
use crate::launch::{self, Allocator, Launch};
use crate::report::{Bytes, Count, Dur, Report, RunInfo};

const WORKLOAD: &str = "edit-distance";

/// Runs the demo, writing one profile per allocator into `dir`.
pub fn run(dir: &Path, size: Option<u64>) -> Result<i32> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let exe = std::env::current_exe().context("finding the allocmux executable")?;
    let w = allocmux_workloads::find(WORKLOAD).expect("the demo workload exists");
    let size = size.unwrap_or(w.default_size);
    let command = vec![
        exe.to_string_lossy().into_owned(),
        "__workload".into(),
        WORKLOAD.into(),
        size.to_string(),
    ];
    println!(
        "allocmux demo: `{WORKLOAD}` ({}), size {size}, under each allocator\n",
        w.about
    );
    println!(
        "  {:<10} {:>10} {:>12} {:>12} {:>11} {:>11} {:>7} {:>10}",
        "allocator",
        "wall",
        "allocations",
        "allocated",
        "peak live",
        "alloc time",
        "share",
        "max RSS"
    );
    for alloc in [Allocator::System, Allocator::Jemalloc, Allocator::Mimalloc] {
        let out = launch::launch(&Launch {
            command: &command,
            allocator: alloc,
            quiet: true,
            env: vec![],
        })?;
        out.check_recorded()?;
        anyhow::ensure!(
            out.exit.code == Some(0),
            "the demo workload failed under {} ({:?})",
            alloc.name(),
            out.exit
        );
        let path = dir.join(format!("allocmux-demo-{}.prof", alloc.name()));
        OutputFile::claim(&path, true, "profile")?
            .write(allocmux::profile::to_string(&out.profiles).as_bytes())?;
        let info = RunInfo {
            command: command.clone(),
            allocator: alloc.name().into(),
            exit: out.exit,
            wall_ns: out.wall_ns,
        };
        let report = Report::new(out.profiles, Some(info));
        let t = report.total();
        println!(
            "  {:<10} {:>10} {:>12} {:>12} {:>11} {:>11} {:>6.1}% {:>10}",
            alloc.name(),
            Dur(t.wall_ns),
            Count(t.totals.allocation_calls()),
            Bytes(t.totals.bytes_allocated),
            Bytes(t.totals.peak_live_bytes),
            Dur(t.allocator_ns),
            100.0 * t.allocator_ns as f64 / t.cpu_ns.max(1) as f64,
            Bytes(t.max_rss_bytes),
        );
    }
    println!(
        "\n  Profiles written to {}/allocmux-demo-{{system,jemalloc,mimalloc}}.prof;\n  \
         `allocmux report FILE` shows one in full. Single runs on a shared machine are noisy:\n  \
         the wall times above are one sample each, not a verdict.",
        dir.display()
    );
    Ok(0)
}
