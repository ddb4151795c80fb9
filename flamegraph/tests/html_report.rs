//! The HTML report (`--html`) in a real browser: a C program with known
//! allocation sites runs under the CLI, its page is written by `report`,
//! `flame`, `compare` and `diff`, and headless Chromium (Debian's, driven
//! by playwright-core from `tests/browser/`, `node tests/browser/check_report.cjs`)
//! loads each file from disk with every non-file request blocked and
//! counted. The driver acts on each view and says what the DOM shows;
//! this test asserts on it: no request, no console or page error, switching
//! the weight changes the frames' widths, a search marks frames, inverting
//! changes the layout, a function lists its callers, the timeline marks
//! the peak. Screenshots of each view are kept in
//! `target/html-report-shots/`.
//!
//! Without chromium, node or playwright-core (`npm ci` in
//! `flamegraph/tests/browser`) the browser part is skipped with a message,
//! except under CI, which must have them.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::common;
use common::*;

/// Small blocks by count, one large leaked block by bytes: the two weights
/// draw `small_blocks` and `big_block` in opposite proportions.
const PROGRAM: &str = r#"
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void *volatile keep;

__attribute__((noinline)) void small_blocks(int n)
{
    for (int i = 0; i < n; i++) {
        char *p = malloc(16);
        keep = p; /* or the compiler drops the malloc and free */
        free(p);
    }
}

__attribute__((noinline)) void big_block(size_t size)
{
    char *p = malloc(size);
    memset(p, 1, size);
    keep = p;
}

__attribute__((noinline)) void outer(int n, size_t size)
{
    small_blocks(n);
    big_block(size);
}

__attribute__((noinline)) void *long_lived(void)
{
    return malloc(32);
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 5000;
    void *held[4];
    outer(n, 8u << 20);
    for (int i = 0; i < 4; i++)
        held[i] = long_lived();
    usleep(600 * 1000); /* a timeline point or two with the block live */
    for (int i = 0; i < 4; i++)
        free(held[i]); /* after 0.6 s: in the 100 ms to 1 s decade */
    return 0;
}
"#;

fn program(dir: &Path) -> PathBuf {
    c_program(dir, "html_fixture", PROGRAM, &["-O1", "-g"])
}

/// Where the screenshots go: `target/html-report-shots/` of this build.
fn shots_dir(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    // target/debug/deps/integration-HASH
    let target = exe.ancestors().nth(3).unwrap().to_path_buf();
    let dir = target.join("html-report-shots").join(name);
    fs::create_dir_all(&dir).unwrap();
    dir
}

/// The browser driver, or why there is none (a skip outside CI).
fn driver() -> Option<(PathBuf, PathBuf)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser");
    let chromium = std::env::var_os("CHROMIUM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/chromium"));
    let missing = if !chromium.exists() {
        Some(format!("no chromium at {}", chromium.display()))
    } else if Command::new("node").arg("--version").output().is_err() {
        Some("no node on PATH".to_string())
    } else if !dir.join("node_modules/playwright-core").exists() {
        Some(format!(
            "playwright-core is not installed (run `npm ci` in {})",
            dir.display()
        ))
    } else {
        None
    };
    match missing {
        None => Some((dir.join("check_report.cjs"), chromium)),
        Some(why) => {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI must be able to run the HTML report's browser test: {why}"
            );
            eprintln!("skipping the browser test of the HTML report: {why}");
            None
        }
    }
}

/// Loads `html` in the browser in `mode` and returns what the driver saw,
/// after checking that the page fetched nothing and raised no error.
fn browse(mode: &str, html: &Path, shots: &str, search: &str) -> Option<Value> {
    let (script, chromium) = driver()?;
    let out = Command::new("node")
        .arg(&script)
        .args([mode, html.to_str().unwrap()])
        .arg(shots_dir(shots))
        .arg(search)
        .env("CHROMIUM", chromium)
        .output()
        .expect("node runs");
    assert!(
        out.status.success(),
        "the browser driver failed on {}:\n{}",
        html.display(),
        text(&out.stderr)
    );
    let seen: Value = serde_json::from_slice(&out.stdout).expect("the driver prints JSON");
    assert_eq!(seen["blocked"], serde_json::json!([]), "network requests");
    assert_eq!(
        seen["console_errors"],
        serde_json::json!([]),
        "console errors"
    );
    assert_eq!(seen["page_errors"], serde_json::json!([]), "page errors");
    Some(seen)
}

/// A frame's width, 0 when it is too narrow to be drawn (under a pixel).
fn width_or_0(widths: &Value, name: &str) -> f64 {
    widths[name].as_f64().unwrap_or(0.0)
}

fn width(widths: &Value, name: &str) -> f64 {
    widths[name]
        .as_f64()
        .unwrap_or_else(|| panic!("no frame {name} among {widths}"))
}

fn names(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap_or_else(|| panic!("not a list: {v}"))
        .iter()
        .map(|s| s.as_str().unwrap().to_string())
        .collect()
}

#[test]
fn report_html_views_work_in_a_browser() {
    let dir = tempfile::tempdir().unwrap();
    let prog = program(dir.path());
    let prof = dir.path().join("p.prof");
    ok(allocmux()
        .args(["run", "--stacks", "exact", "-o"])
        .arg(&prof)
        .arg("--")
        .arg(&prog)
        .output()
        .unwrap());
    let html = dir.path().join("report.html");
    let out = ok(allocmux()
        .args(["report", "--top", "0", "--html"])
        .arg(&html)
        .arg(&prof)
        .output()
        .unwrap());
    assert!(
        text(&out.stderr).contains("HTML report written to"),
        "{}",
        text(&out.stderr)
    );
    let page = fs::read_to_string(&html).unwrap();
    assert!(page.len() < 3 << 20, "{} bytes", page.len());
    assert!(page.contains("big_block"), "the data names the functions");

    let Some(seen) = browse("profile", &html, "report", "big_block") else {
        return;
    };
    assert_eq!(
        names(&seen["tabs"]),
        ["tab-summary", "tab-flame", "tab-functions", "tab-timeline"]
    );
    let f = &seen["flame"];
    // Bytes: the 8 MiB block outweighs 5,000 blocks of 16 bytes; count:
    // the other way round. The same frames, redrawn in place.
    let (small, big) = ("small_blocks", "big_block");
    assert!(
        width(&f["bytes"], big) > 10.0 * width_or_0(&f["bytes"], small),
        "{f}"
    );
    assert!(
        width(&f["count"], small) > 10.0 * width_or_0(&f["count"], big),
        "{f}"
    );
    // Leaked: only the large block is live at exit.
    assert_eq!(width_or_0(&f["leaked"], small), 0.0, "{f}");
    assert!(width(&f["leaked"], big) > 100.0, "{f}");
    // Temporary: every small block is freed at once, the large one never.
    let options = f["weight_options"].as_array().unwrap();
    assert_eq!(options.len(), 6, "{f}");
    assert_eq!(options[5][1], false, "measured with exact stacks: {f}");
    assert!(width(&f["temporary"], small) > 100.0, "{f}");
    assert_eq!(width_or_0(&f["temporary"], big), 0.0, "{f}");
    assert!(
        f["total_temporary"]
            .as_str()
            .unwrap()
            .contains("5,000 allocations"),
        "{f}"
    );
    assert!(f["total"].as_str().unwrap().contains("bytes requested"));
    assert!(f["total_count"].as_str().unwrap().contains("allocations"));
    // Search marks the frames it matches, and only those.
    let marked = names(&f["search_marked"]);
    assert!(
        !marked.is_empty() && marked.iter().all(|n| n == big),
        "{marked:?}"
    );
    assert!(
        f["search_details"]
            .as_str()
            .unwrap()
            .contains("1 frames match"),
        "{f}"
    );
    // Inverted (bottom-up): the allocating functions are the roots.
    let top_down = names(&f["first_level"]);
    let bottom_up = names(&f["inverted_first_level"]);
    assert!(!top_down.contains(&big.to_string()), "{top_down:?}");
    assert!(
        bottom_up.contains(&big.to_string()) && bottom_up.contains(&small.to_string()),
        "{bottom_up:?}"
    );
    // Hover and click give the frame's figures.
    assert!(f["hover"].as_str().unwrap().starts_with(big), "{f}");
    let clicked = f["clicked"].as_str().unwrap();
    assert!(
        clicked.contains(big) && clicked.contains("8.0 MiB"),
        "{clicked}"
    );

    let fns = &seen["functions"];
    assert_ne!(
        fns["by_total"], fns["by_self"],
        "sorting by self reorders: {fns}"
    );
    assert_eq!(fns["self_header"], "desc");
    // The bytes weight: big_block allocates the most itself.
    assert_eq!(names(&fns["by_self"])[0], big, "{fns}");
    assert_eq!(names(&fns["callers"]), ["outer"], "{fns}");
    assert_eq!(names(&fns["callees"]), Vec::<String>::new(), "{fns}");
    // Lifetimes, asserting what holds on any schedule (a lifetime has a
    // floor, not a ceiling: a preempted thread lengthens some): the page
    // sorts by short-lived share, highest first; long_lived's four blocks
    // live 0.6 s or more (0%), so it comes first the other way round;
    // big_block frees nothing (no figure, last either way); small_blocks
    // frees its 5,000 at once, nearly all short-lived.
    let cells = fns["short_lived_cells"].as_array().unwrap();
    let cell = |name: &str| {
        cells
            .iter()
            .find(|c| c[0] == name)
            .map(|c| c[1].as_str().unwrap().to_string())
    };
    let share = |name: &str| -> f64 {
        let c = cell(name).unwrap_or_else(|| panic!("no {name} among {fns}"));
        c.trim_end_matches('%').parse().unwrap()
    };
    let first = names(&fns["by_short_lived"])[0].clone();
    assert!(share(&first) >= share(small), "{fns}");
    assert_eq!(names(&fns["by_short_lived_asc"])[0], "long_lived", "{fns}");
    assert_eq!(cell(big).as_deref(), Some("-"), "{fns}");
    let histogram: Vec<Vec<String>> = fns["long_lived_histogram"]
        .as_array()
        .unwrap()
        .iter()
        .map(names)
        .collect();
    assert_eq!(histogram.len(), 10, "nine decades and never freed: {fns}");
    for row in &histogram {
        // 0.6 s or more: from the 100 ms–1 s decade on.
        if !["<1s", "<10s", "≥10s"].contains(&row[0].as_str()) {
            assert_eq!(row[1], "0", "{histogram:?}");
        }
    }
    let held: u64 = histogram[6..9]
        .iter()
        .map(|r| r[1].parse::<u64>().unwrap())
        .sum();
    assert_eq!(held, 4, "{histogram:?}");

    let t = &seen["timeline"];
    let peaks = t["peaks"].as_array().unwrap();
    assert_eq!(peaks.len(), 1, "{t}");
    assert!(peaks[0].as_u64().unwrap() >= 8 << 20, "{t}");
    assert!(names(&t["peak_labels"])[0].starts_with("peak 8."), "{t}");
    assert!(t["histogram_rows"].as_u64().unwrap() >= 2, "{t}");
    // Temporaries over time: the one process's count so far ends at the
    // 5,000 small blocks (and any of the C runtime's own).
    let temporary_lines = t["temporary_lines"].as_array().unwrap();
    assert_eq!(temporary_lines.len(), 1, "{t}");
    let last = temporary_lines[0].as_u64().unwrap();
    assert!((5_000..5_010).contains(&last), "{t}");

    let rows = seen["summary"]["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "one process and the total");
    let temporaries = names(&seen["summary"]["temporaries"]);
    assert!(
        temporaries.len() == 1 && temporaries[0].starts_with("temporary: 5,000 of 5,00"),
        "{temporaries:?}"
    );
    // 5,000 blocks freed at once, 4 after 0.6 s or more, the large one
    // never: counts, whatever the schedule did to the lifetimes.
    let line = names(&seen["summary"]["lifetimes_line"]);
    assert!(
        line.len() == 1 && line[0].starts_with("5,004 blocks freed, "),
        "{line:?}"
    );
    let all: Vec<Vec<String>> = seen["summary"]["lifetimes_histogram"]
        .as_array()
        .unwrap()
        .iter()
        .map(names)
        .collect();
    let count = |r: &Vec<String>| r[1].replace(',', "").parse::<u64>().unwrap();
    let row = |label: &str| all.iter().find(|r| r[0] == label).map(count).unwrap();
    let freed: u64 = all
        .iter()
        .filter(|r| r[0] != "never freed")
        .map(count)
        .sum();
    assert_eq!(freed, 5_004, "{all:?}");
    assert!(row("<1s") + row("<10s") + row("≥10s") >= 4, "{all:?}");
    assert!(row("never freed") >= 1, "the large block at least: {all:?}");
    let total = names(&rows[1]);
    assert_eq!(total[0], "total");
    // 5,000 small blocks and one large one.
    assert!(total[3].starts_with("5,00"), "{total:?}");
    assert!(names(&seen["summary"]["calls"]).contains(&"malloc".to_string()));
}

#[test]
fn sampled_profiles_say_so_and_mark_estimates() {
    let dir = tempfile::tempdir().unwrap();
    let prog = program(dir.path());
    let html = dir.path().join("flame.html");
    let out = ok(allocmux()
        .args([
            "flame",
            "--stacks",
            "sample",
            "--sample-bytes",
            "4096",
            "--weight",
            "count",
            "--html",
        ])
        .arg(&html)
        .arg("--")
        .arg(&prog)
        .current_dir(dir.path())
        .output()
        .unwrap());
    // With --html alone, no SVG is written.
    assert!(!dir.path().join("allocmux.svg").exists());
    assert!(text(&out.stderr).contains("HTML report written to"));
    let Some(seen) = browse("profile", &html, "sampled", "big_block") else {
        return;
    };
    // The page opens on flame's --weight.
    let opened = seen["flame"]["total"].as_str().unwrap();
    assert!(opened.starts_with("allocations: total ≈"), "{opened}");
    let notes = names(&seen["notes"]).join("\n");
    assert!(notes.contains("sampled every 4.0 KiB"), "{notes}");
    // Sampled stacks do not count temporary allocations: offered, disabled.
    let options = seen["flame"]["weight_options"].as_array().unwrap();
    assert_eq!(options[5][1], true, "{seen}");
    assert!(
        options[5][0].as_str().unwrap().contains("not measured"),
        "{seen}"
    );
    assert!(notes.contains("estimates, marked ≈"), "{notes}");
    assert!(
        seen["flame"]["total"].as_str().unwrap().contains("≈"),
        "{seen}"
    );
    // Nor over time: no chart of them.
    assert_eq!(
        seen["timeline"]["temporary_lines"],
        serde_json::json!([]),
        "{seen}"
    );

    // The sampled level: every figure of the summary is an estimate, and
    // allocator time is not estimated.
    let html = dir.path().join("run.html");
    ok(allocmux()
        .args(["run", "--record", "sampled", "--html"])
        .arg(&html)
        .arg("--")
        .arg(&prog)
        .output()
        .unwrap());
    let Some(seen) = browse("profile", &html, "sampled-level", "big_block") else {
        return;
    };
    let notes = names(&seen["notes"]).join("\n");
    assert!(notes.contains("recorded at the sampled level"), "{notes}");
    for row in seen["summary"]["rows"].as_array().unwrap() {
        let row = names(row);
        assert!(
            row[3].starts_with('≈') && row[5].starts_with('≈'),
            "{row:?}"
        );
        assert_eq!(row[8], "-", "allocator time: {row:?}");
    }
}

#[test]
fn diff_and_compare_pages_work_in_a_browser() {
    let dir = tempfile::tempdir().unwrap();
    let prog = program(dir.path());
    let profile = |n: &str| {
        let prof = dir.path().join(format!("{n}.prof"));
        ok(allocmux()
            .args(["run", "--stacks", "exact", "-o"])
            .arg(&prof)
            .arg("--")
            .arg(&prog)
            .arg(n)
            .output()
            .unwrap());
        prof
    };
    let (base, new) = (profile("100"), profile("5000"));
    let html = dir.path().join("diff.html");
    ok(allocmux()
        .args(["diff", "--weight", "count"])
        .arg(&base)
        .arg(&new)
        .arg("--html")
        .arg(&html)
        .output()
        .unwrap());
    let compared = dir.path().join("compare.html");
    ok(allocmux()
        .args(["compare", "-n", "6", "--warmup", "0", "--html"])
        .arg(&compared)
        .arg("--")
        .arg(&prog)
        .arg("10")
        .output()
        .unwrap());
    let Some(seen) = browse("diff", &html, "diff", "") else {
        return;
    };
    assert!(seen["diff_frames"].as_u64().unwrap() > 3, "{seen}");
    let titles = names(&seen["diff_titles"]).join("\n");
    assert!(titles.contains("small_blocks"), "{titles}");
    // Both profiles' summaries: the new run made 50 times the blocks.
    let summary: Vec<Vec<String>> = seen["diff_summary"]
        .as_array()
        .unwrap()
        .iter()
        .map(names)
        .collect();
    let row = |name: &str| {
        summary
            .iter()
            .find(|r| r[0] == name)
            .unwrap_or_else(|| panic!("no {name} row: {summary:?}"))
            .clone()
    };
    assert_eq!(row("processes")[1..3], ["1", "1"], "{summary:?}");
    let allocations = row("allocations");
    let count = |s: &str| s.replace(',', "").parse::<u64>().unwrap();
    assert!(
        count(&allocations[2]) > count(&allocations[1]),
        "{summary:?}"
    );
    assert!(allocations[3].starts_with('+'), "{summary:?}");
    // The root frame is in view as the page opens.
    let top = seen["diff_root_top"]
        .as_f64()
        .expect("the root frame is drawn");
    let height = seen["viewport_height"].as_f64().unwrap();
    assert!(
        top >= 0.0 && top < height,
        "root at {top} of {height}: {seen}"
    );
    let Some(seen) = browse("compare", &compared, "compare", "") else {
        return;
    };
    assert!(
        seen["verdict"].as_str().unwrap().starts_with("Verdict: "),
        "{seen}"
    );
    let table = seen["table"].as_str().unwrap();
    for a in ["system", "jemalloc", "mimalloc"] {
        assert!(table.contains(a), "{table}");
    }
    assert_eq!(seen["chart_width"], 1000, "the chart decodes: {seen}");
    let rows: Vec<Vec<String>> = seen["side_by_side"]
        .as_array()
        .unwrap()
        .iter()
        .map(names)
        .collect();
    assert_eq!(
        rows.iter().map(|r| r[0].as_str()).collect::<Vec<_>>(),
        ["system", "jemalloc", "mimalloc"]
    );
    // The baseline has no ratio to itself; the others have intervals.
    assert_eq!(rows[0][3], "-");
    assert!(
        rows[1][3].contains("× (") && rows[2][4].contains("× ("),
        "{rows:?}"
    );
}

#[test]
fn an_unwritable_html_path_is_refused_before_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let out = allocmux()
        .args(["flame", "--html", "/nonexistent-dir/r.html", "--", "touch"])
        .arg(&marker)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("/nonexistent-dir/r.html"), "{err}");
    assert!(!marker.exists(), "the program must not run");
}

/// A process killed before its first periodic write left zeros that are
/// not figures: the page says `?` for it and for the totals over it, and
/// why, not `0`; and no empty table of calls.
#[test]
fn a_process_killed_early_is_unknown_on_the_page() {
    let dir = tempfile::tempdir().unwrap();
    let exe = c_program(
        dir.path(),
        "killed_early",
        "#include <signal.h>\n#include <stdlib.h>\n#include <string.h>\n\
         int main(void) {\n  for (int i = 0; i < 1000; i++) {\n\
         char *volatile p = malloc(8000);\n    memset(p, 1, 8000);\n  }\n\
         raise(SIGKILL);\n  return 0;\n}\n",
        &["-O1"],
    );
    let html = dir.path().join("killed.html");
    let out = allocmux()
        .args(["run", "--html"])
        .arg(&html)
        .arg("--")
        .arg(&exe)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(128 + 9), "{}", text(&out.stderr));
    let Some(seen) = browse("summary", &html, "killed", "") else {
        return;
    };
    let rows: Vec<Vec<String>> = seen["rows"].as_array().unwrap().iter().map(names).collect();
    assert_eq!(rows.len(), 2, "the process and the total: {rows:?}");
    assert_eq!(rows[0][1], "killed_early?", "{rows:?}");
    for row in &rows {
        // allocations .. at exit: unknown, not zero.
        for cell in &row[3..8] {
            assert_eq!(cell, "?", "{rows:?}");
        }
    }
    // The process's max RSS was read as it started: unknown. The run's is
    // the kernel's, of the whole tree: known.
    assert_eq!(rows[0][10], "?", "{rows:?}");
    assert!(rows[1][10].ends_with("MiB"), "{rows:?}");
    let hints = names(&seen["hints"]).join("\n");
    assert!(
        hints.contains("what it allocated is unknown, not zero"),
        "{hints}"
    );
    assert!(
        hints.contains("Unknown: no process wrote its figures."),
        "{hints}"
    );
    assert_eq!(seen["calls_tables"], 0, "{seen}");
}
