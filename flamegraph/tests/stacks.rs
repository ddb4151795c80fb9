//! Call-stack views (`export`, `diff`, `report --top`, `flame`) on
//! synthetic profiles whose frames are real return addresses into a C
//! fixture built with `-O2 -g` (no frame pointers), so the real symbolizer
//! is exercised: function names, inlined frames, plumbing trimmed, exact
//! values per weight; pprof checked with `go tool pprof`, SVGs parsed as
//! XML. Golden files are rewritten with `ALLOCMUX_BLESS=1`.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use allocmux_format::SiteCounts;
use allocmux_format::profile::{self, Module, ProcessProfile, Stack, StackMode, Stacks};
use serde_json::Value;

use crate::common;
use common::*;

/// The fixture, built once (non-PIE: its addresses are its ELF virtual
/// addresses, bias 0), and the return addresses it printed for its two
/// allocation paths: [alloc site in leaf, leaf's caller, that one's caller].
struct Fixture {
    bin: PathBuf,
    middle: [u64; 3],
    outer: [u64; 3],
}

fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/stacks.c");
        let bin = compile("cc", src, &["-O2", "-g", "-fomit-frame-pointer", "-no-pie"]);
        let out = ok(Command::new(&bin).output().unwrap());
        let mut paths = text(&out.stdout)
            .lines()
            .map(|l| {
                let w: Vec<u64> = l
                    .split(' ')
                    .skip(1)
                    .map(|a| u64::from_str_radix(a.trim_start_matches("0x"), 16).unwrap())
                    .collect();
                [w[0], w[1], w[2]]
            })
            .collect::<Vec<_>>()
            .into_iter();
        Fixture {
            bin,
            middle: paths.next().unwrap(),
            outer: paths.next().unwrap(),
        }
    })
}

fn module(path: &Path, start: u64, end: u64, bias: u64) -> Module {
    Module {
        start,
        end,
        file_offset: 0,
        bias,
        build_id: String::new(),
        path: path.display().to_string(),
    }
}

fn fixture_module() -> Module {
    module(&fixture().bin, 0x400000, 0x500000, 0)
}

/// allocs, bytes, ticks (3 per ns in [`process`]), peak bytes, live bytes.
fn counts(allocs: u64, bytes: u64, ticks: u64, peak_bytes: u64, live_bytes: u64) -> SiteCounts {
    SiteCounts {
        samples: allocs,
        allocs,
        bytes,
        ticks,
        peak_allocs: u64::from(peak_bytes > 0),
        peak_bytes,
        live_allocs: u64::from(live_bytes > 0),
        live_bytes,
        temporary: 0,
    }
}

/// An exited process of `argv`, running 1 ms at 3 TSC ticks per ns.
fn process(pid: u32, argv: &str, modules: Vec<Module>, stacks: Vec<Stack>) -> ProcessProfile {
    let text = format!(
        "allocmux-profile 1\nprocess\npid {pid}\nppid 1\nexe /bin/x\nargv {argv}\nallocator jemalloc\n\
         state exited\nclock_start 0 0\nclock_end 3000000 1000000\ncalls malloc 40\nend\n"
    );
    let mut p = profile::parse(&text).unwrap().remove(0);
    p.stacks = Stacks {
        mode: StackMode::Exact,
        exact_first: 0,
        lost: 0,
        degraded: 0,
        modules,
        stacks,
        temporary_counted: true,
        lifetime_ticks_per_us: 0,
    };
    p
}

fn stack(frames: &[u64], c: SiteCounts) -> Stack {
    Stack {
        frames: frames.to_vec(),
        counts: c,
        lifetimes: Default::default(),
    }
}

fn write_profile(dir: &Path, name: &str, procs: &[ProcessProfile]) -> PathBuf {
    let p = dir.join(name);
    fs::write(&p, profile::to_string(procs)).unwrap();
    p
}

/// The two fixture paths: main;middle;leaf and main;outer;inlined_helper;leaf.
fn fixture_profile(dir: &Path) -> PathBuf {
    let f = fixture();
    let p = process(
        42,
        "stacks",
        vec![fixture_module()],
        vec![
            stack(&f.middle, counts(3, 96, 3000, 64, 32)),
            stack(&f.outer, counts(1, 4096, 300, 0, 4096)),
        ],
    );
    write_profile(dir, "fixture.prof", &[p])
}

fn export(profile: &Path, format: &str, weight: &str) -> String {
    let out = ok(run(allocmux()
        .args(["export", "--format", format, "--weight", weight, "-o", "-"])
        .arg(profile)));
    text(&out.stdout)
}

#[test]
fn folded_export_names_the_functions_with_exact_values_per_weight() {
    let dir = tempfile::tempdir().unwrap();
    let prof = fixture_profile(dir.path());
    let expect = [
        ("count", 3, 1),
        ("bytes", 96, 4096),
        ("time", 1000, 100), // ticks / 3 per ns
        ("peak", 64, 0),
        ("leaked", 32, 4096),
    ];
    for (weight, middle, outer) in expect {
        let folded = export(&prof, "folded", weight);
        let mut want = vec![format!("main;middle;leaf {middle}")];
        if outer > 0 {
            want.push(format!("main;outer;inlined_helper_[i];leaf {outer}"));
        }
        want.sort();
        let got: Vec<&str> = folded.lines().collect();
        assert_eq!(got, want, "--weight {weight}");
    }
}

#[test]
fn identical_stacks_merge_across_processes_and_addresses() {
    let dir = tempfile::tempdir().unwrap();
    let f = fixture();
    // A second process with the same binary loaded elsewhere (a PIE would
    // be) and the call sites at other addresses inside the same functions.
    let moved = module(&f.bin, 0x7000_0000, 0x7010_0000, 0x7000_0000 - 0x400000);
    let shift = |a: &[u64; 3]| a.map(|x| x + 0x7000_0000 - 0x400000);
    let p1 = process(
        1,
        "stacks",
        vec![fixture_module()],
        vec![stack(&f.middle, counts(2, 20, 0, 0, 0))],
    );
    let p2 = process(
        2,
        "stacks",
        vec![moved],
        vec![stack(&shift(&f.middle), counts(5, 50, 0, 0, 0))],
    );
    let prof = write_profile(dir.path(), "two.prof", &[p1, p2]);
    assert_eq!(export(&prof, "folded", "count"), "main;middle;leaf 7\n");
}

/// Stacks of several programs in one profile (one run of `cc`, which runs
/// cc1 and as): each program's stacks are rooted at `[name]` in the folded
/// lines, merged only with its own, and named in `report --top` and the
/// JSON. The processes of one program are one.
#[test]
fn stacks_of_several_programs_are_rooted_at_their_program() {
    let dir = tempfile::tempdir().unwrap();
    let f = fixture();
    let procs = [
        process(
            1,
            "cc1",
            vec![fixture_module()],
            vec![stack(&f.middle, counts(3, 30, 0, 0, 0))],
        ),
        process(
            2,
            "as",
            vec![fixture_module()],
            vec![
                stack(&f.middle, counts(4, 40, 0, 0, 0)),
                stack(&f.outer, counts(1, 10, 0, 0, 0)),
            ],
        ),
        process(
            3,
            "/usr/lib/gcc/x86_64-linux-gnu/12/cc1",
            vec![fixture_module()],
            vec![stack(&f.middle, counts(2, 20, 0, 0, 0))],
        ),
    ];
    let prof = write_profile(dir.path(), "cc.prof", &procs);
    assert_eq!(
        export(&prof, "folded", "count"),
        "[as];main;middle;leaf 4\n\
         [as];main;outer;inlined_helper_[i];leaf 1\n\
         [cc1];main;middle;leaf 5\n"
    );
    let v: Value = serde_json::from_str(&export(&prof, "json", "count")).unwrap();
    let programs: Vec<(&str, u64)> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["program"].as_str().unwrap(),
                s["values"]["count"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(programs, [("cc1", 5), ("as", 4), ("as", 1)]);
    let out = ok(run(allocmux().args(["report", "--top", "3"]).arg(&prof)));
    let s = text(&out.stdout);
    let count: Vec<&str> = s
        .split("top 3 stacks by allocations")
        .nth(1)
        .unwrap()
        .lines()
        .skip(1)
        .take(3)
        .map(|l| l.split("%  ").nth(1).unwrap())
        .collect();
    assert!(count[0].starts_with("cc1: leaf (stacks.c:"), "{s}");
    assert!(count[1].starts_with("as: leaf (stacks.c:"), "{s}");
    assert!(count[2].starts_with("as: leaf (stacks.c:"), "{s}");
    assert!(count[2].contains("inlined_helper"), "{s}");
}

#[test]
fn shim_frames_are_trimmed_from_the_leaf_end() {
    let dir = tempfile::tempdir().unwrap();
    let f = fixture();
    // Any ELF file will do as the shim: only its name decides.
    let shim = dir.path().join("liballocmux_shim.so");
    fs::copy(&f.bin, &shim).unwrap();
    let bias = 0x7f00_0000_0000;
    let shim_frame = bias + 0x401001;
    let mut frames = vec![shim_frame];
    frames.extend(f.middle);
    let p = process(
        3,
        "stacks",
        vec![
            fixture_module(),
            module(&shim, bias + 0x400000, bias + 0x500000, bias),
        ],
        vec![stack(&frames, counts(4, 40, 0, 0, 0))],
    );
    let prof = write_profile(dir.path(), "shim.prof", &[p]);
    let out = run(allocmux()
        .args([
            "export", "--format", "folded", "--weight", "count", "-o", "-",
        ])
        .arg(&prof));
    assert_eq!(text(&ok(out).stdout), "main;middle;leaf 4\n");
}

/// The allocmux binary is Rust: its allocator shims (which recent rustc
/// names `__rustc::__rust_alloc`, `__rustc::__rdl_alloc`) are trimmed, and
/// its functions are demangled without their hash.
#[test]
fn rust_allocator_glue_is_trimmed_and_names_are_demangled() {
    let bin = Path::new(env!("CARGO_BIN_EXE_allocmux"));
    let nm = ok(Command::new("nm").arg("-C").arg(bin).output().unwrap());
    let addr_of = |pred: &dyn Fn(&str) -> bool| -> u64 {
        text(&nm.stdout)
            .lines()
            .find_map(|l| {
                let mut w = l.splitn(3, ' ');
                let (a, _, name) = (w.next()?, w.next()?, w.next()?);
                pred(name).then(|| u64::from_str_radix(a, 16).ok())?
            })
            .expect("symbol in the allocmux binary")
    };
    let rust_alloc = addr_of(&|n| n == "__rustc::__rust_alloc" || n == "__rust_alloc");
    let rdl_alloc = addr_of(&|n| n == "__rustc::__rdl_alloc" || n == "__rdl_alloc");
    let run = addr_of(&|n| n == "allocmux_cli::run" || n.starts_with("allocmux_cli::run::h"));
    // A PIE's ELF addresses used as they are: bias 0, one big mapping.
    let m = module(bin, 0, 0x1_0000_0000, 0);
    let p = process(
        6,
        "allocmux",
        vec![m],
        vec![stack(
            &[rdl_alloc + 5, rust_alloc + 5, run + 5],
            counts(9, 90, 0, 0, 0),
        )],
    );
    let dir = tempfile::tempdir().unwrap();
    let prof = write_profile(dir.path(), "rust.prof", &[p]);
    assert_eq!(export(&prof, "folded", "count"), "allocmux_cli::run 9\n");
}

#[test]
fn json_export_lists_frames_leaf_first_with_files_lines_and_every_weight() {
    let dir = tempfile::tempdir().unwrap();
    let prof = fixture_profile(dir.path());
    let v: Value = serde_json::from_str(&export(&prof, "json", "count")).unwrap();
    let stacks = v.as_array().unwrap();
    assert_eq!(stacks.len(), 2);
    let first = &stacks[0]; // the larger count: main;middle;leaf
    let names: Vec<&str> = first["frames"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["function"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["leaf", "middle", "main"]);
    let leaf = &first["frames"][0];
    assert!(
        leaf["file"].as_str().unwrap().ends_with("stacks.c"),
        "{leaf}"
    );
    assert!(leaf["line"].as_u64().unwrap() > 0);
    assert_eq!(leaf["module"], fixture().bin.display().to_string());
    assert_eq!(
        first["values"],
        serde_json::json!({"count": 3, "bytes": 96, "time": 1000, "peak": 64, "leaked": 32, "temporary": 0})
    );
    let inlined: Vec<bool> = stacks[1]["frames"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["inlined"].as_bool().unwrap())
        .collect();
    assert_eq!(inlined, [false, true, false, false]);
}

/// Stacks into a module that no longer exists and into no module at all:
/// the names are stable (`libgone.so+0x…`, `[unknown]`), so the folded
/// output is compared with a golden file.
#[test]
fn folded_golden_without_symbols() {
    let dir = tempfile::tempdir().unwrap();
    let gone = module(
        Path::new("/nonexistent/allocmux-test/libgone.so"),
        0x7f10_0000_0000,
        0x7f10_0010_0000,
        0x7f10_0000_0000,
    );
    let at = |off: u64| 0x7f10_0000_0000 + off;
    let procs = [
        process(
            10,
            "jit --fast",
            vec![gone.clone()],
            vec![
                stack(&[at(0x1234), at(0x2000), 0x1000], counts(10, 1000, 0, 0, 0)),
                stack(&[at(0x1234), at(0x3000)], counts(5, 500, 0, 0, 0)),
                stack(&[0xdead, 0xbeef], counts(2, 64, 0, 0, 0)),
                stack(&[at(0x5000)], counts(0, 0, 0, 0, 0)), // all zero: left out
            ],
        ),
        process(
            11,
            "jit --fast",
            vec![gone],
            vec![stack(&[at(0x1234), at(0x3000)], counts(1, 100, 0, 0, 0))],
        ),
    ];
    let prof = write_profile(dir.path(), "gone.prof", &procs);
    let out = ok(run(allocmux()
        .args(["export", "--format", "folded", "-o", "-"])
        .arg(&prof)));
    let err = text(&out.stderr);
    assert_eq!(
        err.matches("no longer exists").count(),
        1,
        "one warning per module: {err}"
    );
    golden("gone.folded", &text(&out.stdout));
}

fn golden(name: &str, got: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name);
    if std::env::var_os("ALLOCMUX_BLESS").is_some() {
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(&path, got).unwrap();
    }
    let want = fs::read_to_string(&path)
        .unwrap_or_else(|_| panic!("{} missing: run with ALLOCMUX_BLESS=1", path.display()));
    assert_eq!(got, want, "{name} differs (ALLOCMUX_BLESS=1 rewrites it)");
}

#[test]
fn pprof_export_reads_in_go_tool_pprof() {
    if Command::new("go").arg("version").output().is_err() {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must have go (golang-go)"
        );
        eprintln!("skipping: go is not installed, so `go tool pprof` cannot check the export");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let prof = fixture_profile(dir.path());
    let pb = dir.path().join("out.pb.gz");
    ok(run(allocmux()
        .args(["export", "--format", "pprof", "-o"])
        .arg(&pb)
        .arg(&prof)));
    let top = |index: &str| {
        let out = Command::new("go")
            .args(["tool", "pprof", "-top", "-sample_index", index])
            .arg(&pb)
            .env("PPROF_BINARY_PATH", dir.path()) // no binary lookups
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out.stderr));
        text(&out.stdout)
    };
    // -top: header lines, then rows "flat flat% sum% cum cum% name"; the
    // first row is the function with the largest flat value.
    let first_row = |report: &str| -> (String, String) {
        let row = report
            .lines()
            .skip_while(|l| !l.trim_start().starts_with("flat"))
            .nth(1)
            .unwrap_or_else(|| panic!("no rows in {report}"))
            .to_string();
        let w: Vec<&str> = row.split_whitespace().collect();
        (w[0].to_string(), w[5..].join(" "))
    };
    let objects = top("alloc_objects");
    assert_eq!(
        first_row(&objects),
        ("4".to_string(), "leaf".to_string()),
        "{objects}"
    );
    assert!(objects.contains("middle"), "{objects}");
    // In use: only the inlined path keeps 4 KiB; its leaf frame is `leaf`,
    // and inlined_helper is a frame of its own (a Line of the location).
    let inuse = top("inuse_space");
    assert_eq!(first_row(&inuse).1, "leaf", "{inuse}");
    assert!(inuse.contains("4.03kB") || inuse.contains("4kB"), "{inuse}");
    let traces = Command::new("go")
        .args(["tool", "pprof", "-traces", "-sample_index", "inuse_space"])
        .arg(&pb)
        .output()
        .unwrap();
    let traces = text(&traces.stdout);
    assert!(
        traces.contains("inlined_helper") && traces.contains("(inline)"),
        "{traces}"
    );
}

/// The text of every `<title>` of the frames ("leaf (96 bytes, 2.3%)").
fn frame_titles(doc: &roxmltree::Document<'_>) -> Vec<String> {
    doc.descendants()
        .filter(|n| n.has_tag_name("title"))
        .filter_map(|n| n.text().map(String::from))
        .collect()
}

#[test]
fn svg_export_is_xml_with_the_functions_and_the_title() {
    let dir = tempfile::tempdir().unwrap();
    let prof = fixture_profile(dir.path());
    let svg = dir.path().join("f.svg");
    ok(run(allocmux()
        .args(["export", "--format", "svg", "-o"])
        .arg(&svg)
        .arg(&prof)));
    let svg = fs::read_to_string(&svg).unwrap();
    let doc = parse_svg(&svg);
    let all_text: String = doc
        .descendants()
        .filter_map(|n| n.text())
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        all_text.contains("stacks — jemalloc — bytes requested (every allocation) — total 4.1 KiB"),
        "{all_text}"
    );
    let titles = frame_titles(&doc);
    for f in ["main", "middle", "leaf", "outer", "inlined_helper"] {
        assert!(
            titles.iter().any(|t| t.starts_with(&format!("{f} ("))),
            "{f} missing from {titles:?}"
        );
    }
    assert!(
        titles.iter().any(|t| t.starts_with("middle (96 bytes")),
        "{titles:?}"
    );
}

#[test]
fn diff_draws_a_differential_flamegraph() {
    let dir = tempfile::tempdir().unwrap();
    let f = fixture();
    let base = write_profile(
        dir.path(),
        "base.prof",
        &[process(
            1,
            "stacks",
            vec![fixture_module()],
            vec![
                stack(&f.middle, counts(1, 1000, 0, 0, 0)),
                stack(&f.outer, counts(1, 1000, 0, 0, 0)),
            ],
        )],
    );
    let new = write_profile(
        dir.path(),
        "new.prof",
        &[process(
            2,
            "stacks",
            vec![fixture_module()],
            vec![
                stack(&f.middle, counts(1, 3000, 0, 0, 0)),
                stack(&f.outer, counts(1, 500, 0, 0, 0)),
            ],
        )],
    );
    let svg = dir.path().join("d.svg");
    ok(run(allocmux()
        .arg("diff")
        .arg(&base)
        .arg(&new)
        .arg("-o")
        .arg(&svg)));
    let svg = fs::read_to_string(&svg).unwrap();
    let doc = parse_svg(&svg);
    let titles = frame_titles(&doc);
    // inferno's differential titles: "name (value, share; +delta%)", the
    // delta being the frame's own (self) change, so the leaves carry it.
    let leaves: Vec<&String> = titles.iter().filter(|t| t.starts_with("leaf (")).collect();
    assert!(
        leaves
            .iter()
            .any(|t| t.starts_with("leaf (3,000 bytes") && t.contains("; +")),
        "the leaf under middle grew: {leaves:?}"
    );
    assert!(
        leaves
            .iter()
            .any(|t| t.starts_with("leaf (500 bytes") && t.contains("; -")),
        "the leaf under outer shrank: {leaves:?}"
    );
    assert!(svg.contains("base.prof → "), "title names both profiles");
    assert!(svg.contains("new.prof — bytes requested — total 2.0 KiB → 3.4 KiB"));
    assert!(
        !titles.iter().any(|t| t.starts_with('[')),
        "one program: no root frame: {titles:?}"
    );
}

/// A profile of one program against one where it also ran a helper: both
/// are rooted by program, so the program's own stacks still line up.
#[test]
fn diff_roots_both_profiles_when_either_has_several_programs() {
    let dir = tempfile::tempdir().unwrap();
    let f = fixture();
    let stacks = || {
        process(
            1,
            "stacks",
            vec![fixture_module()],
            vec![stack(&f.middle, counts(1, 1000, 0, 0, 0))],
        )
    };
    let base = write_profile(dir.path(), "base.prof", &[stacks()]);
    let helper = process(
        2,
        "helper",
        vec![fixture_module()],
        vec![stack(&f.outer, counts(1, 500, 0, 0, 0))],
    );
    let new = write_profile(dir.path(), "new.prof", &[stacks(), helper]);
    let svg = dir.path().join("d.svg");
    ok(run(allocmux()
        .arg("diff")
        .arg(&base)
        .arg(&new)
        .arg("-o")
        .arg(&svg)));
    let titles = frame_titles(&parse_svg(&fs::read_to_string(&svg).unwrap()));
    let title = |name: &str| {
        titles
            .iter()
            .find(|t| t.starts_with(&format!("{name} (")))
            .unwrap_or_else(|| panic!("no {name} in {titles:?}"))
            .clone()
    };
    // The program's stack is the same in both: no change on its frames.
    assert!(
        title("[stacks]").starts_with("[stacks] (1,000 bytes"),
        "{titles:?}"
    );
    assert!(!title("middle").contains("; +"), "{titles:?}");
    assert!(
        title("[helper]").starts_with("[helper] (500 bytes"),
        "{titles:?}"
    );
}

#[test]
fn report_lists_top_stacks_per_weight_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let f = fixture();
    let p = process(
        5,
        "stacks",
        vec![fixture_module()],
        vec![
            stack(&f.middle, counts(100, 1000, 0, 0, 0)),
            stack(&f.outer, counts(10, 5000, 0, 0, 0)),
            stack(&f.middle[1..], counts(1, 10, 0, 0, 0)), // main;middle
        ],
    );
    let prof = write_profile(dir.path(), "r.prof", &[p]);
    let out = ok(run(allocmux().args(["report", "--top", "2"]).arg(&prof)));
    let s = text(&out.stdout);
    let section = |head: &str| -> Vec<String> {
        s.split(head)
            .nth(1)
            .unwrap_or_else(|| panic!("no {head:?} in {s}"))
            .lines()
            .skip(1)
            .take_while(|l| !l.is_empty())
            .map(String::from)
            .collect()
    };
    let out = ok(run(allocmux()
        .args(["report", "--json", "--top", "1"])
        .arg(&prof)));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let top = &v["top_stacks"];
    // Each frame at the file and line the JSON gives it.
    let line_of = |frames: &Value| -> String {
        frames
            .as_array()
            .unwrap()
            .iter()
            .map(|f| {
                let inlined = if f["inlined"].as_bool().unwrap() {
                    "inlined, "
                } else {
                    ""
                };
                let (function, line) = (f["function"].as_str().unwrap(), &f["line"]);
                format!("{function} ({inlined}stacks.c:{line})")
            })
            .collect::<Vec<_>>()
            .join(" ← ")
    };
    let (middle, outer) = (
        line_of(&top["count"][0]["frames"]),
        line_of(&top["bytes"][0]["frames"]),
    );
    assert!(
        middle.starts_with("leaf (stacks.c:")
            && middle.contains(" ← middle (stacks.c:")
            && middle.contains(" ← main (stacks.c:"),
        "{middle}"
    );
    let count = section("top 2 stacks by allocations");
    assert_eq!(count.len(), 2, "{s}");
    assert!(count[0].ends_with(&format!("90.1%  {middle}")), "{s}");
    let bytes = section("top 2 stacks by bytes requested");
    assert!(bytes[0].ends_with(&outer), "{s}");
    assert!(
        outer.contains(" ← inlined_helper (inlined, stacks.c:"),
        "{outer}"
    );
    assert!(bytes[1].ends_with(&middle), "{s}");

    assert_eq!(top["count"][0]["value"], 100);
    assert_eq!(top["bytes"][0]["value"], 5000);
    assert_eq!(top["bytes"][0]["frames"][2]["function"], "outer");
    assert_eq!(top["leaked"].as_array().unwrap().len(), 0);
    assert!(!s.contains("warning"), "{s}");
}

/// A Rust program (allocmux's bundled workload, built with debug info):
/// `report --top` spends each line on the program's own functions, named
/// whole without their crate and module path, at their file and line, with
/// the standard library's allocation plumbing, iterator adapters and
/// start-up code counted as `[N std frames]`.
#[test]
fn report_lines_of_a_rust_program_show_its_own_functions_at_their_lines() {
    let dir = tempfile::tempdir().unwrap();
    let prof = dir.path().join("workload.prof");
    ok(run(allocmux()
        .args(["run", "--stacks", "exact", "-o"])
        .arg(&prof)
        .arg("--")
        .arg(env!("CARGO_BIN_EXE_allocmux"))
        .args(["__workload", "edit-distance", "2000"])));
    let out = ok(run(allocmux().args(["report", "--top", "3"]).arg(&prof)));
    let s = text(&out.stdout);
    let lines: Vec<&str> = s
        .split("top 3 stacks by allocations")
        .nth(1)
        .unwrap_or_else(|| panic!("no top stacks in {s}"))
        .lines()
        .skip(1)
        .take_while(|l| !l.is_empty())
        .collect();
    assert_eq!(lines.len(), 3, "{s}");
    assert!(
        lines
            .iter()
            .any(|l| l.split("%  ").nth(1).is_some_and(|stack| {
                stack.starts_with('[')
                    && stack.contains(
                        " std frames] ← edit_distance::levenshtein_naive (edit_distance.rs:",
                    )
            })),
        "the allocating function, whole, at its line: {s}"
    );
    for line in &lines {
        for hidden in [
            "allocmux_workloads::",
            "core::iter",
            "std::rt",
            "__libc_start",
            "_start",
        ] {
            assert!(!line.contains(hidden), "{hidden:?} in {line}");
        }
        // `…` only counts the frames left out; no name is cut.
        assert_eq!(
            line.matches('…').count(),
            line.matches("… (").count(),
            "{line}"
        );
    }
}

/// Stacks recorded short of memory: `report` says so in one line, and the
/// flamegraph's subtitle too.
#[test]
fn report_warns_when_the_recorder_ran_short_of_memory() {
    let dir = tempfile::tempdir().unwrap();
    let f = fixture();
    let mut procs = Vec::new();
    for (pid, degraded) in [(5, 12), (6, 0), (7, 3)] {
        let mut p = process(
            pid,
            "stacks",
            vec![fixture_module()],
            vec![stack(&f.middle, counts(100, 1000, 0, 0, 0))],
        );
        p.stacks.lost = 2;
        p.stacks.degraded = degraded;
        procs.push(p);
    }
    let prof = write_profile(dir.path(), "short.prof", &procs);
    assert!(
        fs::read_to_string(&prof)
            .unwrap()
            .contains("stacks_degraded 12\n")
    );
    let out = ok(run(allocmux().args(["report", "--top", "1"]).arg(&prof)));
    let s = text(&out.stdout);
    let warnings: Vec<&str> = s.lines().filter(|l| l.contains("warning")).collect();
    assert_eq!(
        warnings,
        [
            "  warning: the recorder ran short of memory in 2 processes and dropped 15 stacks, \
          blocks or lines: the stack figures are incomplete"
        ],
        "{s}"
    );
    assert!(s.contains("6 allocations without a stack"), "{s}");
    let svg = dir.path().join("short.svg");
    ok(run(allocmux()
        .args(["export", "--format", "svg", "-o"])
        .arg(&svg)
        .arg(&prof)));
    let svg = fs::read_to_string(&svg).unwrap();
    assert!(
        svg.contains("incomplete: the recorder ran short of memory"),
        "the subtitle says so"
    );
}

/// One line on stderr that names the problem, a non-zero exit, no panic.
fn assert_clear_error(out: &Output, code: i32, needle: &str) {
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "{err}");
    assert!(err.contains(needle), "expected {needle:?} in {err:?}");
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
}

#[test]
fn bad_input_to_the_stack_commands_is_refused_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let prof = fixture_profile(dir.path());
    let no_stacks = dir.path().join("plain.prof");
    fs::write(
        &no_stacks,
        "allocmux-profile 1\nprocess\npid 1\nstate exited\nend\n",
    )
    .unwrap();
    let export = |args: &[&str], p: &Path| run(allocmux().arg("export").args(args).arg(p));
    // Usage errors end with clap's usage lines; the first names the problem.
    let usage = |out: &Output, needle: &str| {
        assert_eq!(out.status.code(), Some(2));
        assert!(text(&out.stderr).contains(needle), "{}", text(&out.stderr));
    };
    usage(
        &export(
            &["--format", "folded", "--weight", "heap", "-o", "-"],
            &prof,
        ),
        "invalid value 'heap' for '--weight <WEIGHT>'",
    );
    usage(
        &export(&["--format", "csv", "-o", "-"], &prof),
        "invalid value 'csv' for '--format <FORMAT>'",
    );
    usage(
        &run(allocmux().args(["run", "--stacks", "all", "--", "true"])),
        "invalid value 'all'",
    );
    usage(
        &run(allocmux().args(["run", "--sample-bytes", "0", "--", "true"])),
        "--sample-bytes",
    );
    usage(
        &run(allocmux().args(["flame", "--exact", "--stacks", "sample", "--", "true"])),
        "cannot be used with",
    );
    assert_clear_error(
        &run(allocmux().args([
            "run",
            "--stacks",
            "exact",
            "--sample-bytes",
            "9",
            "--",
            "true",
        ])),
        2,
        "--sample-bytes applies to --stacks sample",
    );
    assert_clear_error(
        &export(&["--format", "folded", "-o", "-"], &no_stacks),
        1,
        "has no call stacks",
    );
    assert_clear_error(
        &export(&["--format", "pprof", "-o", "-"], &prof),
        2,
        "pprof output is binary",
    );
    assert_clear_error(
        &export(
            &["--format", "json", "-o", "-"],
            &dir.path().join("missing.prof"),
        ),
        1,
        "cannot read profile",
    );
    // An existing output is kept; a failed export leaves no file behind.
    let kept = dir.path().join("kept.folded");
    fs::write(&kept, "precious").unwrap();
    let out = run(allocmux()
        .args(["export", "--format", "folded", "-o"])
        .arg(&kept)
        .arg(&prof));
    assert_clear_error(&out, 1, "already exists");
    assert_eq!(fs::read_to_string(&kept).unwrap(), "precious");
    let fresh = dir.path().join("fresh.folded");
    let out = run(allocmux()
        .args(["export", "--format", "folded", "-o"])
        .arg(&fresh)
        .arg(&no_stacks));
    assert_clear_error(&out, 1, "has no call stacks");
    assert!(!fresh.exists(), "no empty output is left behind");
    let svg = dir.path().join("d.svg");
    assert_clear_error(
        &run(allocmux()
            .arg("diff")
            .arg(&prof)
            .arg(&no_stacks)
            .arg("-o")
            .arg(&svg)),
        1,
        "has no call stacks",
    );
    assert!(!svg.exists());
}

#[test]
fn run_passes_the_stack_settings_to_the_shim() {
    let env = |args: &[&str]| {
        let out = ok(run(allocmux().arg("run").args(args).args([
            "--",
            "sh",
            "-c",
            "echo \"$ALLOCMUX_STACKS $ALLOCMUX_SAMPLE_BYTES $ALLOCMUX_EXACT_FIRST\"",
        ])));
        text(&out.stdout)
    };
    assert_eq!(env(&["--stacks", "exact"]), "exact  \n");
    assert_eq!(env(&["--sample-bytes", "4096"]), "sample 4096 0\n");
    assert_eq!(env(&["--stacks", "off"]), "off  \n");
    assert_eq!(env(&["--stacks", "auto"]), "sample 524288 250000\n");
    assert_eq!(
        env(&["--stacks", "auto", "--sample-bytes", "4096"]),
        "sample 4096 250000\n"
    );
}

#[test]
fn flame_refuses_an_existing_output_before_running_the_program() {
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("keep.svg");
    fs::write(&svg, "precious").unwrap();
    let marker = dir.path().join("ran");
    let out = run(allocmux()
        .args(["flame", "-o"])
        .arg(&svg)
        .args(["--", "touch"])
        .arg(&marker));
    assert_clear_error(
        &out,
        1,
        "already exists; choose another name or pass --force",
    );
    assert!(!marker.exists(), "the program must not run");
    assert_eq!(fs::read_to_string(&svg).unwrap(), "precious");
}

/// Sampling from the start, a program that allocates far less than one
/// sample interval gets a hint, not an empty picture (`ls /` allocates
/// about 80 KiB: at a sample every 10^12 bytes, none is taken).
#[test]
fn flame_with_nothing_sampled_says_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("t.svg");
    let out = run(allocmux()
        .args([
            "flame",
            "--stacks",
            "sample",
            "--sample-bytes",
            "1000000000000",
            "-o",
        ])
        .arg(&svg)
        .args(["--", "ls", "/"]));
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    // The run's summary comes first, then one line of error.
    let last = err.lines().last().unwrap_or("");
    assert!(
        last.starts_with("allocmux: nothing to draw") && last.contains("--exact"),
        "{err}"
    );
    assert!(!svg.exists(), "no empty SVG is left behind");
}

/// By default a short program's flamegraph has every allocation (`ls /`
/// makes a few hundred, far below one sample interval), says so, and
/// marks nothing as an estimate; a program that makes none says that.
#[test]
fn flame_draws_a_short_program_whole() {
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("ls.svg");
    let out = ok(run(allocmux()
        .args(["flame", "--weight", "count", "-o"])
        .arg(&svg)
        .args(["--", "ls", "/"])));
    let err = text(&out.stderr);
    assert!(
        err.ends_with("  stacks recorded: every allocation\n"),
        "{err}"
    );
    let svg = fs::read_to_string(&svg).unwrap();
    let frames = frame_titles(&parse_svg(&svg));
    assert!(frames.len() > 3, "{frames:?}");
    assert!(
        !svg.contains('≈'),
        "exact figures are not marked as estimates"
    );

    let out = run(allocmux()
        .args(["flame", "-o"])
        .arg(dir.path().join("true.svg"))
        .args(["--", "true"]));
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.ends_with("\nallocmux: nothing to draw: `true` made no allocation\n"),
        "{err}"
    );
}

/// A program that makes more allocations than the exact prefix has its
/// first ones exactly and a sample after them, and says so.
#[test]
fn flame_samples_a_long_program_after_its_first_allocations() {
    if !Path::new("/usr/bin/python3").exists() {
        assert!(std::env::var_os("CI").is_none(), "CI must have python3");
        eprintln!("skipping: no /usr/bin/python3");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("long.svg");
    // 400,000 blocks through malloc (python3's own small-object heap
    // off), past the 250,000.
    let out = ok(run(allocmux()
        .args(["flame", "--weight", "count", "-o"])
        .arg(&svg)
        .env("PYTHONMALLOC", "malloc")
        .args(["--", "/usr/bin/python3", "-c"])
        .arg("x = [bytearray(100) for _ in range(400000)]")));
    let err = text(&out.stderr);
    assert!(
        err.contains(
            "  stacks recorded: every allocation of the first 250,000, then sampled every \
             512.0 KiB: figures marked ≈ are estimates\n"
        ),
        "{err}"
    );
    let svg = fs::read_to_string(&svg).unwrap();
    assert!(svg.contains('≈'), "the title marks the estimate");
    let titles = frame_titles(&parse_svg(&svg));
    assert!(titles.len() > 3, "{titles:?}");
}

/// End to end through the shim: the fixture, built without frame
/// pointers, drawn from exact stacks, names its functions.
#[test]
fn flame_runs_the_program_and_draws_its_stacks() {
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("f.svg");
    let out = ok(run(allocmux()
        .args([
            "flame", "--exact", "--weight", "count", "-a", "mimalloc", "-o",
        ])
        .arg(&svg)
        .arg("--")
        .arg(&fixture().bin)));
    let err = text(&out.stderr);
    assert!(
        text(&out.stdout).starts_with("middle 0x"),
        "program output kept"
    );
    assert!(err.contains("under mimalloc exited with status 0"), "{err}");
    let svg = fs::read_to_string(&svg).unwrap();
    let titles = frame_titles(&parse_svg(&svg));
    for f in ["main", "middle", "leaf"] {
        assert!(
            titles.iter().any(|t| t.starts_with(&format!("{f} ("))),
            "{f}: {titles:?}"
        );
    }
    assert!(
        !titles.iter().any(|t| t.starts_with('[')),
        "one program: no root frame: {titles:?}"
    );
    assert!(svg.contains("— mimalloc — allocations (every allocation) — total"));
}

/// `cc -c` runs three programs (the driver, cc1, as): the flamegraph roots
/// each one's stacks at its name, and `report --top` says which program
/// each stack is from.
#[test]
fn a_compilers_programs_are_told_apart() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("x.c");
    fs::write(&src, "int twice(int x) { return 2 * x; }\n").unwrap();
    let cc = |args: &[&str], object: &str| {
        let mut c = allocmux();
        c.args(args)
            .args(["--", "cc", "-c"])
            .arg(&src)
            .arg("-o")
            .arg(dir.path().join(object));
        ok(run(&mut c))
    };
    let svg = dir.path().join("cc.svg");
    cc(
        &[
            "flame",
            "--exact",
            "--weight",
            "count",
            "-o",
            svg.to_str().unwrap(),
        ],
        "a.o",
    );
    let titles = frame_titles(&parse_svg(&fs::read_to_string(&svg).unwrap()));
    for root in ["[cc1] (", "[as] ("] {
        assert!(
            titles.iter().any(|t| t.starts_with(root)),
            "{root}: {titles:?}"
        );
    }
    let prof = dir.path().join("cc.prof");
    cc(
        &["run", "--stacks", "exact", "-o", prof.to_str().unwrap()],
        "b.o",
    );
    for line in export(&prof, "folded", "count").lines() {
        assert!(line.starts_with('['), "every stack has its program: {line}");
    }
    let out = ok(run(allocmux().args(["report", "--top", "20"]).arg(&prof)));
    let s = text(&out.stdout);
    let count = s.split("stacks by allocations").nth(1).unwrap();
    assert!(count.contains("%  cc1: "), "{s}");
    assert!(count.contains("%  as: "), "{s}");
}

/// A real interpreter: python3's flamegraph reaches into its allocating
/// functions. Debian's python3 is stripped of static symbols, so the
/// exported ones are what can be named (the rest show as `python3.11+0x…`).
#[test]
fn python_flamegraph_shows_the_interpreter_allocating() {
    let python = Path::new("/usr/bin/python3");
    if !python.exists() {
        assert!(std::env::var_os("CI").is_none(), "CI must have python3");
        eprintln!("skipping: no /usr/bin/python3");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("py.svg");
    let script = "import json\nd = {str(i): [i] * (i % 30) for i in range(50000)}\nprint(len(json.dumps(d)))\n";
    ok(run(allocmux()
        .args([
            "flame",
            "--weight",
            "bytes",
            "--sample-bytes",
            "16384",
            "-o",
        ])
        .arg(&svg)
        .arg("--")
        .arg(python)
        .args(["-c", script])
        .env("PYTHONMALLOC", "malloc")));
    let svg = fs::read_to_string(&svg).unwrap();
    let titles = frame_titles(&parse_svg(&svg));
    let has = |f: &str| titles.iter().any(|t| t.starts_with(&format!("{f} (")));
    assert!(has("_PyEval_EvalFrameDefault"), "{titles:?}");
    assert!(
        [
            "PyList_Append",
            "_PyUnicode_JoinArray",
            "PyUnicode_New",
            "PyDict_SetItem"
        ]
        .iter()
        .any(|f| has(f)),
        "no allocating interpreter function among {titles:?}"
    );
    assert!(svg.contains("python3"), "the title names the command");
}
