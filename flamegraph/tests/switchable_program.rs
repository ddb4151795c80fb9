//! A Rust program that switches its allocator in code
//! (`Counting<Switchable>`, this test binary) under `compare` and `run`:
//! no preload in its runs, the allocator picked by the environment, and
//! its recorded runs counted exactly by the program itself, with stacks.
//!
//! The binary is both the tests (run by cargo, without harness: the
//! program's counts must not mix with a harness's threads) and the
//! program they run (when `PROGRAM` is set), which prints the allocator
//! it uses and what was preloaded, then makes [`BLOCKS`] allocations.

mod common;

use std::process::Command;

use allocmux::{Counting, Switchable};
use allocmux_cli::elf::{self, InCode};
use common::{allocmux, ok, text};

#[global_allocator]
static ALLOC: Counting<Switchable> = Counting::new(Switchable::new());

/// Set for the program's role (not an `ALLOCMUX_` name: those are not
/// passed to timing runs).
const PROGRAM: &str = "SWITCHABLE_TEST_PROGRAM";

/// The allocations the program makes itself (its start-up and printing
/// make a few dozen more, the same in every run).
const BLOCKS: u64 = 20_000;

/// One allocation per block (and one for the vector): boxes on purpose.
#[allow(clippy::vec_box)]
#[inline(never)]
fn make_blocks() -> Vec<Box<[u8; 64]>> {
    (0..BLOCKS)
        .map(|_| std::hint::black_box(Box::new([1u8; 64])))
        .collect()
}

fn program() {
    let preload = std::env::var("LD_PRELOAD").unwrap_or_default();
    println!(
        "program: allocator {} preload [{preload}]",
        ALLOC.inner().backend().name()
    );
    drop(make_blocks());
    if std::env::var_os(PROGRAM).is_some_and(|v| v == "fork") {
        // SAFETY: one thread; the child only allocates, frees and exits.
        match unsafe { libc::fork() } {
            0 => {
                drop(make_blocks());
                // `exit` runs the `atexit` handler the child inherited.
                // SAFETY: ends the child as a C program does.
                unsafe { libc::exit(0) }
            }
            pid => {
                let mut status = 0;
                // SAFETY: waits for the child just forked.
                unsafe { libc::waitpid(pid, &mut status, 0) };
            }
        }
    }
}

fn main() {
    if std::env::var_os(PROGRAM).is_some() {
        return program();
    }
    let tests: [(&str, fn()); 6] = [
        (
            "the_binary_carries_both_marks",
            the_binary_carries_both_marks,
        ),
        (
            "compare_preloads_nothing_and_counts_exactly",
            compare_preloads_nothing_and_counts_exactly,
        ),
        (
            "run_records_the_programs_own_stacks",
            run_records_the_programs_own_stacks,
        ),
        (
            "an_allocator_library_is_preloaded_alone_as_next",
            an_allocator_library_is_preloaded_alone_as_next,
        ),
        (
            "what_only_the_shim_does_is_refused",
            what_only_the_shim_does_is_refused,
        ),
        (
            "a_forked_child_writes_its_own_profile",
            a_forked_child_writes_its_own_profile,
        ),
    ];
    for (name, test) in tests {
        test();
        println!("test {name} ... ok");
    }
    println!("{} passed", tests.len());
}

/// `allocmux` with this binary's program role.
fn allocmux_on_program() -> Command {
    let mut c = allocmux();
    c.env(PROGRAM, "1");
    c
}

/// Runs `cmd`, failing the test (with its output) unless it succeeds.
fn succeed(cmd: &mut Command) -> std::process::Output {
    ok(cmd.output().unwrap())
}

fn this_binary() -> String {
    std::env::current_exe().unwrap().display().to_string()
}

fn the_binary_carries_both_marks() {
    let facts = elf::read(&std::fs::read(this_binary()).unwrap())
        .unwrap()
        .unwrap();
    let both = InCode {
        switchable: true,
        counting: true,
    };
    assert_eq!(facts.in_code, both);
    // strip keeps section headers, and with them the marks.
    let dir = tempfile::tempdir().unwrap();
    let stripped = dir.path().join("stripped");
    succeed(
        Command::new("strip")
            .arg("-o")
            .arg(&stripped)
            .arg(this_binary()),
    );
    let facts = elf::read(&std::fs::read(&stripped).unwrap())
        .unwrap()
        .unwrap();
    assert_eq!(facts.in_code, both);
}

/// The program's lines in a log, with the allocator of the run each
/// follows (`==> ... under NAME[, recorded]`).
fn program_lines(log: &str) -> Vec<(String, String)> {
    let mut under = String::new();
    let mut lines = Vec::new();
    for line in log.lines() {
        if let Some(rest) = line.strip_prefix("==> ") {
            let name = rest.rsplit(" under ").next().unwrap();
            under = name.trim_end_matches(", recorded").to_string();
        } else if line.starts_with("program: ") {
            lines.push((under.clone(), line.to_string()));
        }
    }
    lines
}

fn compare_preloads_nothing_and_counts_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let (log, json) = (dir.path().join("log"), dir.path().join("c.json"));
    succeed(
        allocmux_on_program()
            .args([
                "compare",
                "-n",
                "6",
                "-a",
                "system,jemalloc,mimalloc",
                "--log",
            ])
            .arg(&log)
            .arg("--json")
            .arg(&json)
            .arg("--")
            .arg(this_binary()),
    );
    // Every run, timing and recorded: the allocator asked for, picked by
    // the program, with nothing preloaded.
    let lines = program_lines(&std::fs::read_to_string(&log).unwrap());
    // Per allocator: a warm-up run, 6 timing runs, 2 recorded runs.
    assert_eq!(lines.len(), 3 * (1 + 6 + 2), "{lines:?}");
    for (under, line) in &lines {
        assert_eq!(*line, format!("program: allocator {under} preload []"));
    }
    // The recorded runs count the program's own allocations, the same
    // under every allocator (the program does the same in each).
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let counts: Vec<u64> = v["runs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["recorded"] == true)
        .map(|r| r["allocation_calls"].as_u64().unwrap())
        .collect();
    assert_eq!(counts.len(), 6, "{v}");
    assert!(
        counts.iter().all(|&c| c == counts[0]) && (BLOCKS..BLOCKS + 200).contains(&counts[0]),
        "{counts:?}"
    );
}

fn run_records_the_programs_own_stacks() {
    let dir = tempfile::tempdir().unwrap();
    let prof = dir.path().join("p.prof");
    let out = succeed(
        allocmux_on_program()
            .args(["run", "-a", "mimalloc", "--stacks", "exact", "-o"])
            .arg(&prof)
            .args(["--json", "-", "--"])
            .arg(this_binary()),
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let calls = v["total"]["allocation_calls"].as_u64().unwrap();
    assert!((BLOCKS..BLOCKS + 200).contains(&calls), "{v}");
    assert!(
        text(&out.stderr).contains("program: allocator mimalloc preload []"),
        "{}",
        text(&out.stderr)
    );
    let folded = succeed(
        allocmux()
            .args(["export", "--format", "folded", "-o", "-"])
            .arg(&prof),
    );
    // Bytes by stack: the blocks and the vector that holds them, exactly;
    // and no stack of the recorder's own (its profile writing).
    let folded = text(&folded.stdout);
    let bytes = |frame: &str| {
        folded
            .lines()
            .filter(|l| l.contains(frame))
            .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
            .sum::<u64>()
    };
    assert_eq!(bytes("make_blocks"), BLOCKS * (64 + 8), "{folded}");
    assert_eq!(bytes("profile_file"), 0, "{folded}");
}

fn an_allocator_library_is_preloaded_alone_as_next() {
    let Some(library) = allocmux_testkit::next_library() else {
        eprintln!("skipped: no {}", allocmux_testkit::NEXT_LIBRARY);
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    succeed(
        allocmux_on_program()
            .args(["compare", "-n", "6", "-a"])
            .arg(format!("system,tcmalloc={}", library.display()))
            .arg("--log")
            .arg(&log)
            .arg("--")
            .arg(this_binary()),
    );
    let lines = program_lines(&std::fs::read_to_string(&log).unwrap());
    assert_eq!(lines.len(), 2 * (1 + 6 + 2), "{lines:?}");
    for (under, line) in &lines {
        let expected = if under == "tcmalloc" {
            format!("program: allocator next preload [{}]", library.display())
        } else {
            "program: allocator system preload []".to_string()
        };
        assert_eq!(*line, expected);
    }
}

fn what_only_the_shim_does_is_refused() {
    for args in [&["--record", "sampled"][..], &["--http", "127.0.0.1:0"]] {
        let out = allocmux_on_program()
            .arg("run")
            .args(args)
            .arg("--")
            .arg(this_binary())
            .output()
            .unwrap();
        let err = text(&out.stderr);
        assert!(!out.status.success(), "{args:?}: {err}");
        assert!(
            err.contains("switches its allocator in code and records itself")
                && !err.contains("program: "),
            "{args:?}: {err}"
        );
    }
}

/// A child forked without `exec` inherits the recording and its exit
/// handler: it writes a profile of its own pid, not over its parent's.
fn a_forked_child_writes_its_own_profile() {
    let out = succeed(
        allocmux()
            .env(PROGRAM, "fork")
            .args(["run", "--json", "-", "--"])
            .arg(this_binary()),
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let processes = v["processes"].as_array().unwrap();
    assert_eq!(processes.len(), 2, "{v}");
    let pids: Vec<&serde_json::Value> = processes.iter().map(|p| &p["pid"]).collect();
    for p in processes {
        let calls = p["allocation_calls"].as_u64().unwrap();
        // The child (its parent in the run) counts from its parent's
        // counts, as under the shim: its own blocks come on top.
        let child = pids.contains(&&p["ppid"]);
        let least = if child { 2 * BLOCKS } else { BLOCKS };
        assert!(calls >= least && calls < least + 200, "{v}");
    }
}
