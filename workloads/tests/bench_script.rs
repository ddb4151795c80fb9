//! `scripts/bench.sh --smoke`: the benchmark script runs end to end on two
//! workloads at a tiny size, one round of every part but `counting`, and
//! writes well-formed Markdown and SVG. No timings are checked; this only
//! keeps the script from rotting as the CLI and the workloads change.

use std::path::Path;
use std::process::Command;

use allocmux_testkit::{compile, shim};

use crate::common;
use common::bin_dir;

/// Skips (or, on CI, fails) when something the script needs is missing.
fn missing(what: &str) -> bool {
    if Path::new(what).exists()
        || Command::new("sh")
            .args(["-c", &format!("command -v {what}")])
            .output()
            .is_ok_and(|o| o.status.success())
    {
        return false;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "the bench script's smoke test needs {what} on CI"
    );
    eprintln!("skipping: the bench script's smoke test needs {what}");
    true
}

/// Every Markdown table row has as many cells as its header.
fn check_tables(md: &str) {
    let mut header: Option<usize> = None;
    for line in md.lines() {
        if line.starts_with('|') {
            let cells = line.matches('|').count();
            match header {
                None => header = Some(cells),
                Some(n) => assert_eq!(cells, n, "a table row of the wrong width: {line}"),
            }
        } else {
            header = None;
        }
    }
}

#[test]
fn bench_script_smoke() {
    let bin_dir = bin_dir();
    // `cargo test --workspace` builds the CLI's binary next to the workloads'.
    let allocmux = bin_dir.join("allocmux");
    let jemalloc = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2";
    let needed = [
        allocmux.to_str().unwrap(),
        jemalloc,
        "python3",
        "heaptrack",
        "heaptrack_print",
        "valgrind",
    ];
    if needed.iter().any(|w| missing(w)) {
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let md = dir.path().join("BENCHMARKS.md");
    let svgs = dir.path().join("svg");
    let out = Command::new("bash")
        .arg(root.join("scripts/bench.sh"))
        .arg("--smoke")
        .arg("--bin-dir")
        .arg(bin_dir)
        .arg("--allocmux")
        .arg(&allocmux)
        .arg("--shim")
        .arg(shim())
        .arg("--out")
        .arg(&md)
        .arg("--svg-dir")
        .arg(&svgs)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "bench.sh --smoke failed: {err}");
    let text = std::fs::read_to_string(&md).unwrap();
    for heading in [
        "## Machine",
        "## The goals",
        "## Which allocator: `compare` against plain runs",
        "## Overhead of allocmux's modes against the bare allocator",
        "## Exact stacks against heaptrack, end to end",
        "## Instructions (callgrind), single-threaded workloads",
    ] {
        assert!(text.contains(heading), "no {heading:?} in:\n{text}");
    }
    // Python writes a non-finite ratio as `nan` or `inf` (`| inf (IQR ...`).
    for bad in ["nan", " inf ", "(inf", "–inf"] {
        assert!(!text.contains(bad), "{bad:?} in:\n{text}");
    }
    check_tables(&text);
    for chart in ["compare", "overhead", "heaptrack", "callgrind"] {
        let svg = std::fs::read_to_string(svgs.join(format!("{chart}.svg"))).unwrap();
        assert!(
            svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""),
            "{chart}"
        );
        assert!(svg.trim_end().ends_with("</svg>"), "{chart}");
        assert!(svg.contains("<rect") && !svg.contains("NaN"), "{chart}");
        assert!(
            text.contains(&format!("svg/{chart}.svg")),
            "{chart} not linked"
        );
    }
}

/// `scripts/ideal_shim.c`, the floor `scripts/shim_overhead.py --floors`
/// measures the shim against, is only a fair floor if programs run under it
/// as they do bare: built both ways (for glibc, with the chunk-header
/// sizes; over Debian's jemalloc, without), it must leave the 2-thread
/// churn's output and a python3 run's output unchanged.
#[test]
fn ideal_shim_keeps_programs_working() {
    let jemalloc = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2";
    if ["gcc", "python3", jemalloc].iter().any(|w| missing(w)) {
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    // Preloaded by path, so the libraries need no `.so` name.
    let churn = compile("gcc", root.join("scripts/churn.c"), &["-O2", "-pthread"]);
    let src = root.join("scripts/ideal_shim.c");
    let glibc = compile("gcc", &src, &["-O2", "-fPIC", "-shared", "-DSIZES", "-ldl"]);
    let over_jemalloc = compile("gcc", &src, &["-O2", "-fPIC", "-shared", "-ldl"]);

    let py = "import json; d = {i: [str(i) * 8, {'k': i}] for i in range(20000)}; print(len(json.dumps(d)))";
    let programs: [&[&str]; 2] = [
        &[churn.to_str().unwrap(), "2", "200000"],
        &["python3", "-c", py],
    ];
    for program in programs {
        let run = |preload: Option<String>| {
            let mut c = Command::new(program[0]);
            c.args(&program[1..]).env_remove("LD_PRELOAD");
            if let Some(p) = preload {
                c.env("LD_PRELOAD", p);
            }
            let o = c.output().unwrap();
            assert!(
                o.status.success(),
                "{program:?}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
            assert!(
                o.stderr.is_empty(),
                "{program:?}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
            o.stdout
        };
        let bare = run(None);
        assert!(!bare.is_empty());
        assert_eq!(
            run(Some(glibc.display().to_string())),
            bare,
            "{program:?} under the glibc floor"
        );
        assert_eq!(
            run(Some(format!("{}:{jemalloc}", over_jemalloc.display()))),
            bare,
            "{program:?} under the jemalloc floor"
        );
    }
}

/// `scripts/studies/jemalloc_sampling_cost.py` measures jemalloc's own sampler
/// with a one-frame backtrace hook (`scripts/studies/jemalloc_prof_hook.c`): the
/// hook must really be installed when jemalloc profiles (and refused, with
/// a message, when it does not), and the script must print its four rows.
#[test]
fn jemalloc_sampling_cost_script_runs() {
    let jemalloc = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2";
    if ["gcc", "python3", "valgrind", jemalloc]
        .iter()
        .any(|w| missing(w))
    {
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let churn = compile("gcc", root.join("scripts/churn.c"), &["-O2", "-pthread"]);
    let hook = compile(
        "gcc",
        root.join("scripts/studies/jemalloc_prof_hook.c"),
        &["-O2", "-fPIC", "-shared", jemalloc],
    );
    let run = |conf: &str| {
        let o = Command::new(&churn)
            .args(["1", "20000"])
            .env("LD_PRELOAD", format!("{jemalloc} {}", hook.display()))
            .env("MALLOC_CONF", conf)
            .output()
            .unwrap();
        assert!(o.status.success());
        String::from_utf8_lossy(&o.stderr).into_owned()
    };
    assert_eq!(run("prof:true,prof_active:true,lg_prof_sample:12"), "");
    assert!(run("prof:false").contains("mallctl failed"));

    let out = Command::new("python3")
        .arg(root.join("scripts/studies/jemalloc_sampling_cost.py"))
        .args(["--pairs", "2000"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    check_tables(&text);
    for row in [
        "| bare |",
        "| prof inactive |",
        "| prof, libgcc backtraces |",
        "| prof, one-frame backtraces |",
    ] {
        assert!(text.contains(row), "{row} missing from:\n{text}");
    }
}

/// `scripts/studies/shadow_stack.sh` compares a shadow stack's cost a frame with
/// the recorder's check: its program exits with an error unless every
/// trampoline return popped the shadow stack back to empty and every kept
/// frame passed its check, so a run that prints its tables measured what
/// it says. Three stack shapes, each with its three hooks and its net.
#[test]
fn shadow_stack_script_runs() {
    if missing("gcc") {
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out_file = dir.path().join("shadow-stack.md");
    let o = Command::new("bash")
        .arg(root.join("scripts/studies/shadow_stack.sh"))
        .args([out_file.to_str().unwrap(), "20000", "3"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = std::fs::read_to_string(&out_file).unwrap();
    check_tables(&text);
    for heading in [
        "### 18 new frames over 27 kept",
        "### 4 new frames over 40 kept",
        "### 1 new frame over 44 kept",
    ] {
        assert!(text.contains(heading), "{heading} missing from:\n{text}");
    }
    for row in [
        "| plain |",
        "| check |",
        "| shadow |",
        "| a checked kept frame",
    ] {
        assert_eq!(text.matches(row).count(), 3, "{row} in:\n{text}");
    }
    assert_eq!(text.matches(": net ").count(), 3, "{text}");
}
