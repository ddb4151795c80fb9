//! The `allocmux` binary, run as a user would: exit statuses, the summary,
//! the JSON report and profile files, and one clear line for each kind of
//! bad input.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use serde_json::Value;

use crate::common;
use common::*;

/// Compiles a C fixture of the shim's tests.
fn compile_shim_fixture(name: &str) -> PathBuf {
    compile("cc", name, &["-O2"])
}

/// The exact-count fixture of the shim's tests, compiled once.
fn counts_fixture() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| compile_shim_fixture("counts.c"))
}

/// The shim's memory-timeline fixture, compiled once.
fn timeline_fixture() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| compile_shim_fixture("timeline.c"))
}

/// The checksum the counts fixture printed (its stdout must be untouched).
fn checksum(out: &Output) -> String {
    text(&out.stdout)
        .trim_end()
        .rsplit(' ')
        .next()
        .unwrap()
        .to_string()
}

fn json_of(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", text(&out.stdout)))
}

#[test]
fn run_keeps_output_and_exit_status_and_summarises_on_stderr() {
    let out = run(allocmux().args(["run", "--", "sh", "-c", "echo hello; echo oops >&2; exit 7"]));
    assert_eq!(out.status.code(), Some(7));
    assert_eq!(text(&out.stdout), "hello\n");
    let err = text(&out.stderr);
    assert!(
        err.starts_with("oops\n"),
        "the program's stderr comes first, untouched: {err}"
    );
    assert!(err.contains("under system exited with status 7"), "{err}");
    // dash leaves through _exit, which the shim hooks to write its profile.
    assert!(err.contains("calls: malloc"), "{err}");
    assert!(
        !err.contains("sh*"),
        "dash's profile should be complete: {err}"
    );
}

/// Whether the process `pid` catches `signal` (its `SigCgt` mask in
/// /proc), which is when a signal sent to it is handled rather than
/// ending it.
fn catches(pid: u32, signal: u32) -> bool {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("SigCgt:"))
        .and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok())
        .is_some_and(|mask| mask & (1 << (signal - 1)) != 0)
}

/// `kill PID` of allocmux (a service manager's stop, `timeout`) reaches
/// the program, which ends as it chooses; allocmux reports it, keeps its
/// exit status and profile, and leaves no temporary file behind.
#[test]
fn a_stop_request_to_allocmux_is_passed_on_to_the_program() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    let tmp = tempfile::tempdir().unwrap();
    let out_dir = tempfile::tempdir().unwrap();
    let profile = out_dir.path().join("stopped.prof");
    for signal in [libc::SIGTERM, libc::SIGHUP] {
        let mut cli = allocmux()
            .args(["run", "-o"])
            .arg(&profile)
            .args([
                "--force",
                "--",
                "sh",
                "-c",
                "trap 'echo stopped; exit 3' TERM HUP; echo ready; i=0; \
                 while [ $i -lt 2400 ]; do sleep 0.05; i=$((i + 1)); done; exit 9",
            ])
            .env("TMPDIR", tmp.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(cli.stdout.take().unwrap()).lines();
        assert_eq!(lines.next().unwrap().unwrap(), "ready");
        // The program runs, so the spawn helper is waiting on it with its
        // handler set; allocmux sets its own just after starting the
        // spawn helper, which this waits for rather than for a time (the
        // bounds, here and in the program's loop, only end a wait that a
        // broken build would make endless, leaving no program behind).
        let started = std::time::Instant::now();
        while !catches(cli.id(), signal as u32) {
            assert!(
                started.elapsed().as_secs() < 60,
                "allocmux never caught signal {signal}"
            );
            std::thread::yield_now();
        }
        // SAFETY: signals the allocmux child this test started and has not
        // yet waited for.
        assert_eq!(unsafe { libc::kill(cli.id() as i32, signal) }, 0);
        assert_eq!(lines.next().unwrap().unwrap(), "stopped");
        let out = cli.wait_with_output().unwrap();
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(3), "signal {signal}: {err}");
        assert!(
            err.contains("exited with status 3"),
            "signal {signal}: {err}"
        );
        assert!(profile.is_file(), "signal {signal}: no profile\n{err}");
        let left: Vec<_> = fs::read_dir(tmp.path()).unwrap().collect();
        assert!(left.is_empty(), "signal {signal}: left in TMPDIR: {left:?}");
    }
}

/// A stop signal allocmux was started with ignored (`nohup`'s SIGHUP)
/// stays ignored, by allocmux and by the program, as without it.
#[test]
fn an_ignored_stop_signal_stays_ignored_for_the_program() {
    for (trap, ignored) in [("trap '' HUP;", true), ("", false)] {
        let script = format!("{trap} exec \"$0\" run -- grep SigIgn /proc/self/status",);
        let out = ok(run(Command::new("sh")
            .args(["-c", &script, env!("CARGO_BIN_EXE_allocmux")])
            .env("ALLOCMUX_SHIM", shim())));
        let line = text(&out.stdout);
        let mask = line
            .trim()
            .strip_prefix("SigIgn:")
            .and_then(|m| u64::from_str_radix(m.trim(), 16).ok())
            .unwrap_or_else(|| panic!("{line}"));
        assert_eq!(mask & 1 != 0, ignored, "{trap:?}: {line}");
    }
}

#[test]
fn run_reports_death_by_signal_as_128_plus_signal() {
    for (sig, code, name) in [
        (15, 143, "SIGTERM"),
        (11, 139, "SIGSEGV"),
        (6, 134, "SIGABRT"),
    ] {
        let out = run(allocmux().args(["run", "--", "sh", "-c", &format!("kill -{sig} $$")]));
        assert_eq!(out.status.code(), Some(code), "{}", text(&out.stderr));
        let err = text(&out.stderr);
        assert!(
            err.contains(&format!("killed by signal {sig} ({name})")),
            "{err}"
        );
        // The killed shell's last profile is still shown, as a running
        // one: its row is marked `?` if it was killed before its first
        // periodic write (nothing is known of what it allocated), `*` if
        // after (figures of that write). Which one depends on the schedule;
        // `figures.rs` shows the `?` deterministically.
        let rows: Vec<&str> = err
            .lines()
            .filter(|l| l.trim_start().starts_with(|c: char| c.is_ascii_digit()))
            .collect();
        assert!(
            err.contains("1 process")
                && rows.len() == 1
                && (rows[0].contains("sh?") || rows[0].contains("sh*")),
            "the killed shell's profile, marked ? or *:\n{err}"
        );
    }
}

#[test]
fn json_report_has_the_design_keys_and_exact_counts() {
    let fixture = counts_fixture().to_str().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let report = |n: &str| {
        let json = dir.path().join(format!("{n}.json"));
        let out = run(allocmux()
            .args(["run", "-a", "jemalloc", "--json"])
            .arg(&json)
            .args(["--", fixture, n]));
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert_eq!(
            text(&out.stdout),
            format!("counts: {n} iterations, checksum {}\n", checksum(&out))
        );
        serde_json::from_slice::<Value>(&fs::read(&json).unwrap()).unwrap()
    };
    let (zero, thousand) = (report("0"), report("1000"));
    for key in [
        "allocator",
        "calls",
        "bytes_allocated",
        "bytes_freed",
        "peak_live_bytes",
        "live_bytes_at_exit",
        "allocator_ns",
        "allocator_time_share",
        "cpu_ns",
        "wall_ns",
        "max_rss_bytes",
    ] {
        assert!(thousand["total"].get(key).is_some(), "total lacks {key}");
        assert!(
            thousand["processes"][0].get(key).is_some(),
            "process lacks {key}"
        );
    }
    assert_eq!(thousand["total"]["allocator"], "jemalloc");
    assert_eq!(thousand["exit_status"], 0);
    let calls = |v: &Value, f: &str| v["total"]["calls"][f].as_u64().unwrap();
    let per_iteration = [
        ("malloc", 1),
        ("calloc", 1),
        ("realloc", 1),
        ("aligned_alloc", 1),
        ("malloc_usable_size", 1),
        ("memalign", 1),
        ("posix_memalign", 1),
        ("pvalloc", 1),
        ("valloc", 1),
        ("free", 7),
    ];
    for (f, n) in per_iteration {
        assert_eq!(calls(&thousand, f) - calls(&zero, f), 1000 * n, "{f}");
    }
    // Its one free(NULL) per iteration, apart from the frees.
    let null_frees = |v: &Value| v["total"]["null_frees"].as_u64().unwrap();
    assert_eq!(null_frees(&thousand) - null_frees(&zero), 1000);
    let bytes = |v: &Value| v["total"]["bytes_requested"].as_u64().unwrap();
    assert_eq!(bytes(&thousand) - bytes(&zero), 1000 * 1176);
}

/// `free(NULL)` is counted apart from the frees: `run` shows it under the
/// table, and `report --json` carries it as `null_frees`, per process and
/// in the total, with `calls.free` the frees of blocks alone.
#[test]
fn run_and_report_count_free_null_apart() {
    let fixture = compile_shim_fixture("null_frees.c");
    let dir = tempfile::tempdir().unwrap();
    let record = |blocks: u64, nulls: u64| {
        let prof = dir.path().join(format!("{blocks}-{nulls}.prof"));
        let out = run(allocmux()
            .args(["run", "-o"])
            .arg(&prof)
            .arg("--")
            .arg(&fixture)
            .args([blocks.to_string(), nulls.to_string()]));
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert_eq!(
            text(&out.stdout),
            format!("null_frees: {blocks} blocks, {nulls} free(NULL)\n")
        );
        let json = json_of(&run(allocmux().args(["report", "--json"]).arg(&prof)));
        (text(&out.stderr), json)
    };
    let (_, zero) = record(0, 0);
    let (summary, json) = record(700, 1000);
    let figure = |v: &Value, part: &str, key: &str| {
        let f = &v[part];
        let f = if part == "processes" { &f[0] } else { f };
        match key {
            "free" => f["calls"]["free"].as_u64(),
            _ => f[key].as_u64(),
        }
        .unwrap_or_else(|| panic!("no {key} in {part}: {v}"))
    };
    for part in ["total", "processes"] {
        assert_eq!(
            (
                figure(&json, part, "free") - figure(&zero, part, "free"),
                figure(&json, part, "null_frees") - figure(&zero, part, "null_frees"),
            ),
            (700, 1000),
            "{part}: {json}"
        );
    }
    let null_frees = figure(&json, "total", "null_frees");
    let line = summary
        .lines()
        .find(|l| l.contains("free(NULL)"))
        .unwrap_or_else(|| panic!("no free(NULL) line in the summary:\n{summary}"));
    assert_eq!(
        line.trim_start(),
        format!(
            "free(NULL) calls (no-ops, not in frees): {}",
            allocmux_cli::units::Count(null_frees)
        ),
        "{summary}"
    );
}

/// The shim's allocator-statistics fixture, compiled once.
fn allocstats_fixture() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| compile_shim_fixture("allocstats.c"))
}

/// `allocmux report` shows the backend's own figures and the heap's
/// overhead, in words and in JSON, for a program holding 32 MiB.
#[test]
fn report_shows_the_allocators_own_statistics() {
    let dir = tempfile::tempdir().unwrap();
    let fixture = allocstats_fixture().to_str().unwrap();
    for (backend, line) in [
        ("jemalloc", "  jemalloc: "),
        ("system", "  glibc: "),
        ("mimalloc", "  mimalloc: "),
    ] {
        let prof = dir.path().join(format!("{backend}.prof"));
        let out = run(allocmux()
            .args(["run", "-a", backend, "-o"])
            .arg(&prof)
            .args(["--", fixture, "exit"]));
        assert!(out.status.success(), "{}", text(&out.stderr));
        let human = text(&run(allocmux().arg("report").arg(&prof)).stdout);
        let figures = human
            .lines()
            .find(|l| l.starts_with(line))
            .unwrap_or_else(|| panic!("no `{line}` line under {backend}:\n{human}"));
        let overhead = human
            .lines()
            .find(|l| l.starts_with("  heap overhead"))
            .unwrap_or_else(|| panic!("no overhead line under {backend}:\n{human}"));
        let json = json_of(&run(allocmux().args(["report", "--json"]).arg(&prof)));
        let stats = &json["processes"][0]["allocator_stats"];
        assert_eq!(stats["backend"], backend, "{stats}");
        assert!(stats["live_bytes"].as_u64().unwrap() >= 32 << 20, "{stats}");
        match backend {
            "jemalloc" => {
                for word in ["allocated", "active", "resident", "mapped", "retained"] {
                    assert!(figures.contains(word), "{figures}");
                    assert!(stats["figures"][word].is_u64(), "{stats}");
                }
                assert!(stats["figures"]["resident"].as_u64().unwrap() >= 32 << 20);
            }
            "system" => {
                assert!(stats["figures"]["mmapped"].as_u64().unwrap() >= 32 << 20);
            }
            _ => {
                assert!(stats["figures"]["committed"].as_u64().unwrap() >= 32 << 20);
                assert!(overhead.contains("not measured"), "{overhead}");
                assert!(stats["overhead"].is_null(), "{stats}");
                continue;
            }
        }
        assert!(stats["overhead"].as_f64().unwrap() >= 0.99, "{stats}");
        // The line prints the ratio of the reading with the most live
        // bytes: the exit's, or one made as the heap grew, which came
        // first depending on the schedule.
        let x = json["processes"][0]["heap_overhead"].as_f64().unwrap();
        assert!(x >= 0.99, "{json}");
        assert!(overhead.contains(&format!("{x:.2}x")), "{overhead}");
    }
}

#[test]
fn saved_profile_round_trips_through_report() {
    let dir = tempfile::tempdir().unwrap();
    let prof = dir.path().join("run.prof");
    let fixture = counts_fixture().to_str().unwrap();
    let json = dir.path().join("run.json");
    let out = run(allocmux()
        .args(["run", "-a", "mimalloc", "-o"])
        .arg(&prof)
        .arg("--json")
        .arg(&json)
        .args(["--", fixture, "300"]));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("profile saved to"),
        "{}",
        text(&out.stderr)
    );
    let live: Value = serde_json::from_slice(&fs::read(&json).unwrap()).unwrap();
    let rep = run(allocmux().args(["report", "--json"]).arg(&prof));
    assert!(rep.status.success(), "{}", text(&rep.stderr));
    let saved = json_of(&rep);
    for key in [
        "calls",
        "bytes_requested",
        "bytes_allocated",
        "bytes_freed",
        "peak_live_bytes",
        "allocator_ns",
    ] {
        assert_eq!(saved["total"][key], live["total"][key], "{key}");
    }
    let human = run(allocmux().arg("report").arg(&prof));
    assert!(
        text(&human.stdout).contains("1 process under mimalloc"),
        "{}",
        text(&human.stdout)
    );
}

#[test]
fn every_process_of_a_pipeline_is_profiled() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    let out = run(allocmux().arg("run").arg("--json").arg(&json).args([
        "--",
        "bash",
        "-c",
        "seq 1 3000 | sort -n | tail -1",
    ]));
    assert!(out.status.success());
    assert_eq!(text(&out.stdout), "3000\n");
    let v: Value = serde_json::from_slice(&fs::read(&json).unwrap()).unwrap();
    assert_eq!(v["exit_status"], 0);
    let programs: Vec<String> = v["processes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            p["argv"][0]
                .as_str()
                .unwrap_or("")
                .rsplit('/')
                .next()
                .unwrap()
                .to_string()
        })
        .collect();
    for p in ["bash", "seq", "sort", "tail"] {
        assert!(
            programs.iter().any(|x| x == p),
            "{p} missing from {programs:?}"
        );
    }
}

/// One line on stderr that names the problem, a non-zero exit, no panic.
fn assert_clear_error(out: &Output, code: i32, needle: &str) {
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "{err}");
    assert!(err.contains(needle), "expected {needle:?} in {err:?}");
    assert!(!err.contains("panicked"), "{err}");
}

/// A profile of `timeline fork` (a parent holding 64 MiB, a forked child
/// holding 1 MiB) saved by `allocmux run -o`, and its processes in start
/// order.
fn timeline_profile(dir: &Path) -> (PathBuf, Vec<allocmux_format::profile::ProcessProfile>) {
    let prof = dir.join("run.prof");
    ok(run(allocmux()
        .args(["run", "-o"])
        .arg(&prof)
        .arg("--")
        .arg(timeline_fixture())
        .arg("fork")));
    let mut procs = allocmux_format::profile::parse(&fs::read_to_string(&prof).unwrap()).unwrap();
    assert_eq!(procs.len(), 2, "the parent and its fork child");
    procs.sort_by_key(|p| p.clock_start.mono_ns);
    (prof, procs)
}

/// The trimmed texts of an SVG, which must be well-formed XML.
fn svg_texts(svg: &str) -> Vec<String> {
    let doc = roxmltree::Document::parse(svg)
        .unwrap_or_else(|e| panic!("the plot is not well-formed XML ({e}):\n{svg}"));
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    doc.descendants()
        .filter(|n| n.has_tag_name("text"))
        .filter_map(|n| n.text())
        .map(|t| t.trim().to_string())
        .collect()
}

#[test]
fn report_plot_draws_live_and_resident_memory_per_process() {
    let dir = tempfile::tempdir().unwrap();
    let (prof, procs) = timeline_profile(dir.path());
    let svg_path = dir.path().join("memory.svg");
    let out = ok(run(allocmux()
        .arg("report")
        .arg(&prof)
        .arg("--plot")
        .arg(&svg_path)));
    // The report itself is still printed.
    assert!(
        text(&out.stdout).contains("2 processes under system"),
        "{}",
        text(&out.stdout)
    );
    assert!(
        text(&out.stderr).contains(&format!(
            "memory timeline of 2 processes written to {}",
            svg_path.display()
        )),
        "{}",
        text(&out.stderr)
    );
    let svg = fs::read_to_string(&svg_path).unwrap();
    let texts = svg_texts(&svg);
    let has = |want: &str| texts.iter().any(|t| t == want);
    let mut missing: Vec<String> = procs
        .iter()
        .map(|p| format!("pid {} timeline", p.pid))
        .chain(
            [
                "live heap",
                "resident (RSS)",
                "seconds since start",
                "60 MiB",
            ]
            .map(String::from),
        )
        .filter(|want| !has(want))
        .collect();
    if !texts
        .iter()
        .any(|t| t.contains("timeline fork") && t.contains("system"))
    {
        missing.push("a title with the command and allocator".into());
    }
    assert!(
        missing.is_empty(),
        "the plot lacks {missing:?}; its texts: {texts:?}"
    );
    // Each process's live heap is a line through its samples, in its own
    // colour (the parent's first: it started first); the mesh, the axes
    // and the resident size's dashes are other polylines. Each timeline
    // has at least its start-up and exit points, however few samples the
    // schedule let the writer thread take between them.
    let doc = roxmltree::Document::parse(&svg).unwrap();
    let longest_in = |color: &str| {
        doc.descendants()
            .filter(|n| n.has_tag_name("polyline") && n.attribute("stroke") == Some(color))
            .map(|n| {
                n.attribute("points")
                    .unwrap_or("")
                    .split_whitespace()
                    .count()
            })
            .max()
            .unwrap_or(0)
    };
    for (p, color) in procs.iter().zip(["#4E79A7", "#F28E2B"]) {
        let samples = p.timeline.points.len();
        let longest = longest_in(color);
        assert!(
            samples >= 2 && longest == samples,
            "pid {}'s live line ({color}) should have a vertex per sample ({samples}), the longest line has {longest}",
            p.pid
        );
    }
}

#[test]
fn report_plot_keeps_an_existing_file_unless_forced() {
    let dir = tempfile::tempdir().unwrap();
    let (prof, _) = timeline_profile(dir.path());
    let svg_path = dir.path().join("taken.svg");
    fs::write(&svg_path, "precious").unwrap();
    let refused = run(allocmux()
        .arg("report")
        .arg(&prof)
        .arg("--plot")
        .arg(&svg_path));
    assert_clear_error(
        &refused,
        1,
        "already exists; choose another name or pass --force",
    );
    assert!(
        refused.stdout.is_empty(),
        "nothing is done before the claim"
    );
    assert_eq!(fs::read_to_string(&svg_path).unwrap(), "precious");
    ok(run(allocmux()
        .arg("report")
        .arg(&prof)
        .arg("--plot")
        .arg(&svg_path)
        .arg("--force")));
    svg_texts(&fs::read_to_string(&svg_path).unwrap());
}

#[test]
fn report_plot_of_a_profile_without_timeline_says_how_to_get_one() {
    let dir = tempfile::tempdir().unwrap();
    // As written before timelines existed.
    let old = dir.path().join("old.prof");
    fs::write(
        &old,
        "allocmux-profile 1\nprocess\npid 7\nargv prog\nallocator system\ncalls malloc 3\nend\n",
    )
    .unwrap();
    let svg_path = dir.path().join("old.svg");
    let out = run(allocmux()
        .arg("report")
        .arg(&old)
        .arg("--plot")
        .arg(&svg_path));
    assert_clear_error(&out, 1, "has no memory timeline");
    let err = text(&out.stderr);
    assert!(
        err.contains("allocmux run -o PROFILE -- CMD") && err.contains("ALLOCMUX_OUTPUT"),
        "the error should name the fix: {err}"
    );
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(
        !svg_path.exists(),
        "no empty plot file is left behind after the error"
    );
    // Without --plot the same profile still reports.
    ok(run(allocmux().arg("report").arg(&old)));
}

/// Compiles C source into a shared library (with extra linker arguments).
fn shared_library(dir: &Path, name: &str, src: &str, link: &[&str]) -> PathBuf {
    let flags = [&["-shared", "-fPIC"], link].concat();
    c_program(dir, &format!("{name}.so"), src, &flags)
}

/// A `malloc` and `free` that forward to glibc and record nothing: a
/// library the loader preloads happily but that is not the shim.
const NOT_THE_SHIM: &str = "#include <stddef.h>\n\
    void *__libc_malloc(size_t); void __libc_free(void *);\n\
    void *malloc(size_t n) { return __libc_malloc(n); }\n\
    void free(void *p) { __libc_free(p); }\n";

/// A command that leaves a mark if it runs.
fn marking(dir: &Path) -> (Vec<String>, PathBuf) {
    let mark = dir.join("ran");
    let cmd = vec![
        "sh".to_string(),
        "-c".to_string(),
        format!("touch '{}'", mark.display()),
    ];
    (cmd, mark)
}

#[test]
fn a_bad_allocmux_shim_is_refused_before_the_program_runs() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (cmd, mark) = marking(d);
    let text_file = d.join("notes.txt");
    fs::write(&text_file, "not a library\n").unwrap();
    let program = d.join("true-copy.so");
    fs::copy("/bin/true", &program).unwrap();
    let lib32 = d.join("lib32.so");
    fs::write(
        &lib32,
        allocmux_cli::elf::minimal(32, 3 /* EM_386 */, 3 /* ET_DYN */, None),
    )
    .unwrap();
    let no_malloc = shared_library(d, "plain", "int plain(void) { return 1; }\n", &[]);
    let shim_dir = d.join("shim-dir");
    fs::create_dir(&shim_dir).unwrap();
    let empty_dir = d.join("empty-dir");
    fs::create_dir(&empty_dir).unwrap();
    fs::copy(shim(), shim_dir.join("liballocmux_shim.so")).unwrap();
    let cases = [
        (d.join("missing.so"), "missing.so does not exist"),
        (
            empty_dir.clone(),
            "empty-dir is a directory, not the shim library",
        ),
        (
            shim_dir.clone(),
            &*format!("set it to {}/liballocmux_shim.so", shim_dir.display()),
        ),
        (
            text_file,
            "notes.txt is not a shared library (not an ELF file)",
        ),
        (program, "true-copy.so is a program, not a shared library"),
        (lib32, "lib32.so is built for 32-bit i386 but"),
        (no_malloc, "plain.so does not define malloc"),
    ];
    for (shim, needle) in cases {
        let out = run(allocmux()
            .env("ALLOCMUX_SHIM", &shim)
            .arg("run")
            .arg("--")
            .args(&cmd));
        assert_clear_error(&out, 1, needle);
        assert_clear_error(&out, 1, "ALLOCMUX_SHIM=");
        assert!(
            !mark.exists(),
            "the program ran with ALLOCMUX_SHIM={shim:?}"
        );
    }
}

#[test]
fn a_program_for_another_machine_is_refused_before_running() {
    let dir = tempfile::tempdir().unwrap();
    let prog = dir.path().join("prog32");
    fs::write(
        &prog,
        allocmux_cli::elf::minimal(
            32,
            3, /* EM_386 */
            2, /* ET_EXEC */
            Some("/lib/ld-linux.so.2"),
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(&prog, fs::Permissions::from_mode(0o755)).unwrap();
    assert_clear_error(
        &run(allocmux_embedded()
            .env("XDG_CACHE_HOME", dir.path())
            .arg("run")
            .arg("--")
            .arg(&prog)),
        1,
        "prog32 is a 32-bit i386 program and this allocmux's shim is",
    );
}

#[test]
fn a_shim_that_records_nothing_gives_no_report_but_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let fake = shared_library(d, "fake", NOT_THE_SHIM, &[]);
    let json = d.join("r.json");
    let prof = d.join("r.prof");
    let out = run(allocmux()
        .env("ALLOCMUX_SHIM", &fake)
        .args(["run", "--json"])
        .arg(&json)
        .arg("-o")
        .arg(&prof)
        .args(["--", "sh", "-c", "echo ran; exit 3"]));
    // The program ran: `run` exits as it did, after saying what went wrong.
    assert_clear_error(&out, 3, "nothing was recorded");
    assert_clear_error(&out, 3, "fake.so loads but records nothing");
    assert_eq!(text(&out.stdout), "ran\n");
    let err = text(&out.stderr);
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(
        !err.contains("exited with status"),
        "no empty report: {err}"
    );
    assert!(!json.exists() && !prof.exists(), "no empty report files");

    let svg = d.join("f.svg");
    let out = run(allocmux()
        .env("ALLOCMUX_SHIM", &fake)
        .args(["flame", "-o"])
        .arg(&svg)
        .args(["--", "true"]));
    assert_clear_error(&out, 1, "cannot draw a flamegraph: nothing was recorded");
    assert!(!svg.exists());
}

#[test]
fn a_shim_the_loader_cannot_load_is_named_with_the_loaders_reason() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // Linked against a library that is then removed: the loader gives up
    // on every program it is preloaded into (status 127).
    let dep = shared_library(
        d,
        "libgone-allocmux-test",
        "int gone(void) { return 1; }\n",
        &[],
    );
    let src = format!("{NOT_THE_SHIM}int gone(void);\nint use_it(void) {{ return gone(); }}\n");
    let broken = shared_library(d, "broken", &src, &["-L.", "-lgone-allocmux-test"]);
    fs::remove_file(dep).unwrap();
    let (cmd, mark) = marking(d);
    let out = run(allocmux()
        .env("ALLOCMUX_SHIM", &broken)
        .arg("run")
        .arg("--")
        .args(&cmd));
    assert!(!mark.exists());
    assert_clear_error(&out, 127, "nothing was recorded");
    assert_clear_error(
        &out,
        127,
        &format!(
            "the loader could not preload the shim {} (libgone-allocmux-test.so: cannot open \
             shared object file",
            broken.display()
        ),
    );
    assert_clear_error(&out, 127, "point ALLOCMUX_SHIM at a liballocmux_shim.so");
}

#[test]
fn the_embedded_shim_is_cached_once_and_falls_back_to_a_temporary_copy() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("xdg");
    let cached = || -> Vec<PathBuf> {
        fs::read_dir(cache.join("allocmux"))
            .map(|d| d.map(|e| e.unwrap().path()).collect())
            .unwrap_or_default()
    };
    for _ in 0..2 {
        let out = ok(run(allocmux_embedded()
            .env("XDG_CACHE_HOME", &cache)
            .args(["run", "--", "true"])));
        assert!(text(&out.stderr).contains("under system exited with status 0"));
        let files = cached();
        // `run` with stacks off under glibc preloads that mode's direct
        // shim; the embedded shim is cached beside it, for a hand-written
        // LD_PRELOAD.
        let direct = shim_for(&Command::new("true"), "system");
        assert_eq!(files.len(), 2, "{files:?}");
        for (want, what) in [
            (direct.as_path(), "the direct shim"),
            (Path::new(shim()), "the shim"),
        ] {
            let found = files
                .iter()
                .any(|f| fs::read(f).unwrap() == fs::read(want).unwrap());
            assert!(found, "{what} is not in the cache: {files:?}");
        }
        assert!(files.iter().any(|f| f.file_name() == direct.file_name()));
    }

    // /dev/null is no directory, not even for root: the cache cannot be made.
    let out = ok(run(allocmux_embedded()
        .env_remove("XDG_CACHE_HOME")
        .env("HOME", "/dev/null")
        .args(["run", "--", "true"])));
    let err = text(&out.stderr);
    assert!(
        err.starts_with(
            "allocmux: cannot keep the shim in the cache (creating the directory \
             /dev/null/.cache/allocmux: Not a directory"
        ),
        "{err}"
    );
    assert!(err.contains("using a temporary copy for this run"), "{err}");
    assert!(err.contains("under system exited with status 0"), "{err}");

    assert_clear_error(
        &run(allocmux_embedded()
            .env_remove("XDG_CACHE_HOME")
            .env("HOME", "/dev/null")
            .env("TMPDIR", "/dev/null")
            .args(["run", "--", "true"])),
        1,
        "cannot write the shim to disk",
    );
}

/// `run --record off` switches the allocator and records nothing: the
/// program's output and status pass through, it sees the forwarder (no
/// preload under glibc) and no profile path, and `run` says what `time`
/// would. It takes none of the recording options. (As installed: with
/// `ALLOCMUX_SHIM`, that library is preloaded, with `ALLOCMUX_RECORD=off`.)
#[test]
fn run_with_recording_off_only_switches_the_allocator() {
    let script = "echo \"preload=${LD_PRELOAD##*/} record=$ALLOCMUX_RECORD output=$ALLOCMUX_OUTPUT\"; exit 4";
    for (allocator, preload) in [
        ("system", "preload= record= output=".to_string()),
        (
            "mimalloc",
            "preload=liballocmux_shim-mimalloc_forward-".to_string(),
        ),
        (
            "jemalloc",
            "preload=liballocmux_shim-jemalloc_forward-".to_string(),
        ),
    ] {
        let out = run(allocmux_embedded().args([
            "run", "--record", "off", "-a", allocator, "--", "sh", "-c", script,
        ]));
        assert_eq!(out.status.code(), Some(4), "{}", text(&out.stderr));
        let stdout = text(&out.stdout);
        assert!(stdout.starts_with(&preload), "{allocator}: {stdout}");
        if allocator != "system" {
            assert!(stdout.ends_with("record=off output=\n"), "{stdout}");
        }
        let err = text(&out.stderr);
        assert!(
            err.contains(&format!(
                "under {allocator}, nothing recorded, exited with status 4"
            )),
            "{err}"
        );
        assert!(err.contains("max RSS"), "{err}");
        assert_eq!(err.lines().count(), 2, "{err}");
    }
    for option in [
        &["-o", "x.prof"][..],
        &["--stacks", "exact"],
        &["--json", "-"],
    ] {
        let out = run(allocmux()
            .args(["run", "--record", "off"])
            .args(option)
            .args(["--", "true"]));
        assert_clear_error(&out, 2, "cannot be used with");
    }
}
