//! `allocmux compare` end to end: the table, the JSON, the chart, the
//! pairs a verdict rests on, early stopping, hidden and logged output, the
//! runs that stop it and the rounds it refuses.

use std::fs;

use serde_json::Value;

use crate::common;
use common::*;

const ALLOCATORS: [&str; 3] = ["system", "jemalloc", "mimalloc"];

/// The bundled allocation-heavy workload: Levenshtein distances with fresh
/// vectors per call, the case where the allocator choice shows.
fn workload() -> Vec<String> {
    vec![
        env!("CARGO_BIN_EXE_allocmux").to_string(),
        "__workload".into(),
        "edit-distance".into(),
        "20000".into(),
    ]
}

fn json_file(path: &std::path::Path) -> Value {
    let text = fs::read_to_string(path).expect("the JSON file was written");
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

#[test]
fn compare_reports_every_allocator_with_intervals_and_a_verdict() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("cmp.json");
    let svg = dir.path().join("cmp.svg");
    let out = ok(run(allocmux()
        .args(["compare", "-n", "6", "--warmup", "1", "--json"])
        .arg(&json)
        .arg("--plot")
        .arg(&svg)
        .arg("--")
        .args(workload())));
    let table = text(&out.stdout);
    assert!(
        !table.contains("edit-distance 5"),
        "the program's own output is hidden: {table}"
    );
    for a in ALLOCATORS {
        assert!(
            table.lines().any(|l| l.trim_start().starts_with(a)),
            "{a} row in {table}"
        );
    }
    for needle in [
        "wall (IQR)",
        "against system",
        "signed-rank intervals",
        "verdict: ",
    ] {
        assert!(table.contains(needle), "{needle:?} in {table}");
    }

    let v = json_file(&json);
    assert_eq!(v["baseline"], "system");
    assert_eq!(v["rounds"], 6);
    let runs = v["runs"].as_array().unwrap();
    assert_eq!(
        runs.len(),
        3 * 7 + 3 * 2,
        "6 rounds and a warm-up round of 3 allocators, and recorded runs in rounds 1 and 4"
    );
    assert_eq!(runs.iter().filter(|r| r["warmup"] == true).count(), 3);
    // Timing runs record nothing: no counts; recorded runs give them.
    let (recorded, timing): (Vec<&Value>, Vec<&Value>) =
        runs.iter().partition(|r| r["recorded"] == true);
    assert_eq!(recorded.len(), 6);
    assert!(
        recorded.iter().all(|r| r["warmup"] == false),
        "{recorded:?}"
    );
    let recorded_rounds: Vec<u64> = recorded
        .iter()
        .map(|r| r["round"].as_u64().unwrap())
        .collect();
    assert_eq!(recorded_rounds, [1, 1, 1, 4, 4, 4]);
    for r in &timing {
        assert!(r.get("allocation_calls").is_none(), "{r}");
        assert!(r["wall_ns"].as_u64().unwrap() > 0, "{r}");
    }
    // Interleaved: each round runs every allocator before the next round.
    let order: Vec<&str> = runs
        .iter()
        .take(6)
        .map(|r| r["allocator"].as_str().unwrap())
        .collect();
    assert_eq!(order, [ALLOCATORS, ALLOCATORS].concat());
    let calls: Vec<u64> = recorded
        .iter()
        .map(|r| r["allocation_calls"].as_u64().unwrap())
        .collect();
    assert!(
        calls[0] > 20_000,
        "the workload allocates per pair: {calls:?}"
    );
    assert!(
        calls.iter().all(|&c| c == calls[0]),
        "the same program makes the same calls under every allocator: {calls:?}"
    );
    let summaries = v["allocators"].as_array().unwrap();
    assert_eq!(summaries.len(), 3);
    for (s, name) in summaries.iter().zip(ALLOCATORS) {
        assert_eq!(s["allocator"], name);
        assert_eq!(s["runs"], 6);
        assert_eq!(s["recorded_runs"], 2);
        let wall = &s["figures"]["wall_ns"];
        let (q1, med, q3) = (
            wall["q1"].as_f64().unwrap(),
            wall["median"].as_f64().unwrap(),
            wall["q3"].as_f64().unwrap(),
        );
        assert!(0.0 < q1 && q1 <= med && med <= q3, "{wall}");
        assert!(s["figures"]["max_rss_bytes"]["median"].as_f64().unwrap() > 1e6);
        assert!(
            s["figures"]["allocator_time_share"]["median"]
                .as_f64()
                .unwrap()
                > 0.0
        );
        if name == "system" {
            assert_eq!(s["speedup_vs_baseline"], Value::Null);
            continue;
        }
        for key in ["speedup_vs_baseline", "max_rss_vs_baseline"] {
            let iv = &s[key];
            let (lo, est, hi) = (
                iv["low"].as_f64().unwrap(),
                iv["estimate"].as_f64().unwrap(),
                iv["high"].as_f64().unwrap(),
            );
            assert!(0.0 < lo && lo <= est && est <= hi, "{key}: {iv}");
            assert!(iv["confidence"].as_f64().unwrap() >= 0.95, "{iv}");
        }
    }
    let pairs = v["pairs"].as_array().unwrap();
    let names: Vec<(&str, &str)> = pairs
        .iter()
        .map(|p| (p["a"].as_str().unwrap(), p["b"].as_str().unwrap()))
        .collect();
    assert_eq!(
        names,
        [
            ("jemalloc", "system"),
            ("mimalloc", "system"),
            ("mimalloc", "jemalloc")
        ]
    );
    for p in pairs {
        assert_eq!(p["figure"], "wall_ns");
        let (lo, ratio, hi) = (
            p["low"].as_f64().unwrap(),
            p["ratio"].as_f64().unwrap(),
            p["high"].as_f64().unwrap(),
        );
        assert!(0.0 < lo && lo <= ratio && ratio <= hi, "{p}");
        assert!(p["clear"].is_boolean(), "{p}");
    }
    let verdict = &v["verdict"];
    let text_line = verdict["text"].as_str().unwrap();
    assert!(table.contains(text_line), "{text_line} in {table}");
    match verdict["winner"].as_str() {
        Some(w) => assert!(
            text_line.starts_with(&format!("{w} is fastest")),
            "{verdict}"
        ),
        None => assert!(text_line.starts_with("no clear winner"), "{verdict}"),
    }

    let chart = fs::read_to_string(&svg).unwrap();
    let doc = parse_svg(&chart);
    let texts: Vec<&str> = doc
        .descendants()
        .filter(|n| n.has_tag_name("text"))
        .filter_map(|n| n.text())
        .collect();
    for needle in [
        "wall time",
        "peak RSS",
        "system",
        "jemalloc",
        "mimalloc",
        "memory over time, the median run of each allocator",
        "resident (RSS)",
    ] {
        assert!(
            texts.iter().any(|t| t.contains(needle)),
            "{needle:?} in the chart's text: {texts:?}"
        );
    }
    let dots = doc
        .descendants()
        .filter(|n| n.has_tag_name("circle"))
        .count();
    assert!(dots >= 2 * 18, "a dot per run per panel, found {dots}");
}

/// `--stop-early` end to end: whatever the timings, the comparison stops
/// only on a clear winner, at a look that can reach the stricter level of
/// the looks, and says so in the table and the JSON; otherwise it runs
/// every round. When it stops is decided by the wall times, which a
/// machine's hiccups change: the unit tests of `compare::stops_early` feed
/// it synthetic ones. Here the baseline sleeps 0.2 s more every round, so
/// that it usually stops early.
#[test]
fn a_clear_winner_stops_the_comparison_early() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("cmp.json");
    let out = ok(run(allocmux()
        .args([
            "compare",
            "-a",
            "mimalloc,system",
            "-n",
            "20",
            "--warmup",
            "0",
            "--stop-early",
            "--json",
        ])
        .arg(&json)
        .args([
            "--",
            "sh",
            "-c",
            r#"[ "$ALLOCMUX_ALLOCATOR" = system ] && sleep 0.2; true"#,
        ])));
    let v = json_file(&json);
    let table = text(&out.stdout);
    assert_eq!(
        v["baseline"], "system",
        "system is the baseline wherever listed"
    );
    // 15 looks (rounds 6..=20) share the 5%.
    let level = v["confidence_level"].as_f64().unwrap();
    assert!((level - (1.0 - 0.05 / 15.0)).abs() < 1e-9, "{level}");
    assert_eq!(v["rounds_planned"], 20, "{v}");
    let rounds = v["rounds"].as_u64().unwrap();
    let timing_runs = v["runs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["recorded"] == false)
        .count();
    assert_eq!(timing_runs as u64, 2 * rounds, "{v}");
    let winner = v["verdict"]["winner"].as_str();
    if v["stopped_early"] == true {
        // The first round that can reach 1 − 0.05/15 is the 10th (1 − 2⁻⁹).
        assert!((10..20).contains(&rounds), "stopped after {rounds} rounds");
        let winner = winner.unwrap_or_else(|| panic!("stopped without a winner: {v}"));
        // Its interval against the other reaches the looks' level and
        // excludes 1.
        let pair = &v["pairs"][0];
        assert!(
            pair["confidence"].as_f64().unwrap() >= level - 1e-9,
            "{pair}"
        );
        assert_eq!(pair["clear"], true, "{pair}");
        assert!(table.contains("stopped early of 20"), "{table}");
        assert!(
            table.contains(&format!("verdict: {winner} is fastest")),
            "{table}"
        );
    } else {
        assert_eq!(rounds, 20, "{v}");
        assert!(!table.contains("stopped early"), "{table}");
    }
}

#[test]
fn output_is_hidden_or_logged() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("programs.log");
    let out = ok(run(allocmux()
        .args([
            "compare",
            "-a",
            "system,mimalloc",
            "-n",
            "6",
            "--warmup",
            "0",
            "--log",
        ])
        .arg(&log)
        .args([
            "--",
            "sh",
            "-c",
            "echo out-$ALLOCMUX_ALLOCATOR; echo err >&2",
        ])));
    let table = text(&out.stdout);
    assert!(!table.contains("out-system"), "{table}");
    assert!(!text(&out.stderr).contains("err\n"));
    let logged = fs::read_to_string(&log).unwrap();
    assert!(
        logged.contains("out-system\nerr\n") && logged.contains("out-mimalloc\nerr\n"),
        "{logged}"
    );
    assert!(logged.contains("round 1 under mimalloc"), "{logged}");
    assert!(logged.contains("round 6 under mimalloc"), "{logged}");
}

#[test]
fn a_failing_run_stops_the_comparison_naming_the_allocator() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("cmp.json");
    let out = run(allocmux()
        .args(["compare", "-n", "6", "--json"])
        .arg(&json)
        .args([
            "--",
            "sh",
            "-c",
            r#"[ "$ALLOCMUX_ALLOCATOR" != jemalloc ] || exit 3"#,
        ]));
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("failed under jemalloc in warm-up round 1 (exit status 3)"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
    assert!(!json.exists(), "no half report is left behind");

    let killed = run(allocmux().args(["compare", "-n", "6", "--", "sh", "-c", "kill -9 $$"]));
    let err = text(&killed.stderr);
    assert!(
        err.contains("failed under system in warm-up round 1 (killed by SIGKILL (9))"),
        "{err}"
    );
}

#[test]
fn unpreloadable_targets_and_bad_arguments_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let stat = static_binary(dir.path());
    let out = run(allocmux().args(["compare", "--"]).arg(&stat));
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("statically linked"),
        "{}",
        text(&out.stderr)
    );

    let out = run(allocmux().args(["compare", "-a", "system,tcmalloc", "--", "true"]));
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("invalid value 'tcmalloc'"));
    let out = run(allocmux().args(["compare", "-a", "system,system", "--", "true"]));
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("listed twice"));
    let out = run(allocmux().args(["compare", "-n", "0", "--", "true"]));
    assert_eq!(out.status.code(), Some(2));
}

/// Fewer rounds than give a 95% interval would print intervals of less
/// under a 95% header: refused before anything runs, naming the fewest.
#[test]
fn fewer_rounds_than_a_95_percent_interval_needs_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let ran = dir.path().join("ran");
    let program = ["--", "touch", ran.to_str().unwrap()];
    for args in [
        vec!["compare", "-n", "1"],
        vec!["compare", "-n", "5"],
        vec!["compare", "-n", "5", "--stop-early"],
        vec!["demo", "--rounds", "5"],
    ] {
        let is_demo = args[0] == "demo";
        let out = run(allocmux()
            .current_dir(dir.path())
            .args(&args)
            .args(if is_demo { &[][..] } else { &program[..] }));
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = text(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        let n = args[2];
        let s = if n == "1" { "" } else { "s" };
        assert!(
            err.contains(&format!(
                "{n} round{s} cannot give a 95% interval; the fewest that can are 6"
            )),
            "{args:?}: {err}"
        );
        assert!(out.stdout.is_empty(), "{args:?}");
        assert!(!ran.exists(), "{args:?} ran the program");
    }
}

/// The verdict and the pairs it rests on, end to end: whatever the
/// timings, the verdict follows from the pairs' intervals in the JSON, and
/// a verdict without a winner prints every pair under it as the JSON has
/// it (a winner's line holds its own intervals). Which verdict the runs
/// give depends on their wall times, which a machine's hiccups change: the
/// reported case (jemalloc and mimalloc each tie with the baseline, but
/// mimalloc is faster than jemalloc in every round, so the verdict rests
/// on a pair the table against the baseline does not have) is the unit
/// test `a_verdict_without_a_winner_shows_every_pair_it_rests_on` in
/// `compare::summary`, with synthetic times. The sleeps here make it the
/// usual outcome.
#[test]
fn the_verdict_prints_the_pairs_it_rests_on() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("cmp.json");
    // Each allocator counts its runs; in its timing runs of rounds 3 and
    // 6 (its 4th and 8th runs, after the recorded runs of rounds 1 and 4)
    // mimalloc and jemalloc are slower than system, in the others faster,
    // and mimalloc 0.1 s faster than jemalloc every time.
    let script = r#"f="$1/$ALLOCMUX_ALLOCATOR"; echo >> "$f"; n=$(wc -l < "$f")
        slow=$(( n % 4 == 0 ))
        case "$ALLOCMUX_ALLOCATOR" in
          system) sleep 0.3 ;;
          mimalloc) if [ $slow = 1 ]; then sleep 0.5; else sleep 0.1; fi ;;
          jemalloc) if [ $slow = 1 ]; then sleep 0.6; else sleep 0.2; fi ;;
        esac"#;
    let out = ok(run(allocmux()
        .args(["compare", "-n", "6", "--warmup", "0", "--json"])
        .arg(&json)
        .args(["--", "sh", "-c", script, "sh"])
        .arg(dir.path())));
    let table = text(&out.stdout);
    let v = json_file(&json);
    let level = v["confidence_level"].as_f64().unwrap();
    let pairs = v["pairs"].as_array().unwrap();
    let names: Vec<(&str, &str)> = pairs
        .iter()
        .map(|p| (p["a"].as_str().unwrap(), p["b"].as_str().unwrap()))
        .collect();
    assert_eq!(
        names,
        [
            ("jemalloc", "system"),
            ("mimalloc", "system"),
            ("mimalloc", "jemalloc")
        ]
    );
    // Who is clearly faster than whom, by the pairs.
    let mut beats: Vec<(&str, &str)> = Vec::new();
    for p in pairs {
        let (a, b) = (p["a"].as_str().unwrap(), p["b"].as_str().unwrap());
        let (ratio, low, high) = (
            p["ratio"].as_f64().unwrap(),
            p["low"].as_f64().unwrap(),
            p["high"].as_f64().unwrap(),
        );
        assert!(p["confidence"].as_f64().unwrap() >= level - 1e-9, "{p}");
        assert!(0.0 < low && low <= ratio && ratio <= high, "{p}");
        assert_eq!(p["clear"], low > 1.0 || high < 1.0, "{p}");
        if low > 1.0 {
            beats.push((a, b));
        } else if high < 1.0 {
            beats.push((b, a));
        }
    }
    let leaders: Vec<&str> = ALLOCATORS
        .into_iter()
        .filter(|x| !beats.iter().any(|&(_, slower)| slower == *x))
        .collect();
    let verdict = &v["verdict"];
    let line = verdict["text"].as_str().unwrap();
    assert!(
        table.contains(&format!("\n  verdict: {line}\n")),
        "{line:?} in {table}"
    );
    let after_verdict = table.split("verdict: ").nth(1).unwrap();
    let winner = ALLOCATORS.into_iter().find(|x| {
        ALLOCATORS
            .into_iter()
            .all(|y| y == *x || beats.contains(&(*x, y)))
    });
    assert_eq!(verdict["winner"].as_str(), winner, "{verdict}");
    if let Some(w) = winner {
        assert_eq!(verdict["leaders"], serde_json::json!([w]), "{verdict}");
        assert!(line.starts_with(&format!("{w} is fastest: ")), "{line}");
        assert!(!after_verdict.contains("rests on"), "{table}");
        return;
    }
    assert_eq!(verdict["leaders"], serde_json::json!(leaders), "{verdict}");
    // Each claim of who is slower than whom is one of the pairs.
    for (faster, slower) in &beats {
        assert!(
            line.contains(&format!("{slower} is clearly slower than ")),
            "{slower} behind {faster}: {line}"
        );
    }
    assert!(
        after_verdict.contains("  the pairs it rests on: wall time, 95% intervals as above\n"),
        "{table}"
    );
    for p in pairs {
        let (a, b) = (p["a"].as_str().unwrap(), p["b"].as_str().unwrap());
        let (ratio, low, high) = (
            p["ratio"].as_f64().unwrap(),
            p["low"].as_f64().unwrap(),
            p["high"].as_f64().unwrap(),
        );
        // Printed under the verdict as faster or slower, as in the table.
        let words = if ratio >= 1.0 {
            format!("{ratio:.2}× faster ({low:.2}–{high:.2})")
        } else {
            format!(
                "{:.2}× slower ({:.2}–{:.2})",
                1.0 / ratio,
                1.0 / high,
                1.0 / low
            )
        };
        let line = format!("    {:<21} {words}\n", format!("{a} vs {b}"));
        assert!(after_verdict.contains(&line), "{line:?} in {table}");
    }
}

#[test]
fn without_n_a_quick_program_gets_the_most_default_rounds() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("cmp.json");
    ok(run(allocmux()
        .args([
            "compare",
            "-a",
            "system,mimalloc",
            "--warmup",
            "0",
            "--json",
        ])
        .arg(&json)
        .args(["--", "true"])));
    let v = json_file(&json);
    let runs = v["runs"].as_array().unwrap();
    // As many rounds as fit in about a minute after the first round's
    // timing runs, 6 to 10: 10 for `true`, whose runs take milliseconds
    // (the first round would have to take over 6 s for fewer).
    let first_round_ns: u64 = runs
        .iter()
        .filter(|r| r["round"] == 1 && r["recorded"] == false)
        .map(|r| r["wall_ns"].as_u64().unwrap())
        .sum();
    let fit = (60_000_000_000 / first_round_ns.max(1)).clamp(6, 10);
    assert_eq!(v["rounds"], fit, "the first round took {first_round_ns} ns");
    // And recorded runs in rounds 1, 4, 7, ... .
    assert_eq!(runs.len() as u64, 2 * fit + 2 * fit.div_ceil(3));
}

/// The timing runs preload the allocator's forwarder (nothing under
/// glibc) and ask for no profile; the recorded runs preload the shim and
/// write one: what each run's environment says, from the log. (As
/// installed: `ALLOCMUX_SHIM` would be preloaded in every run.)
#[test]
fn timing_runs_preload_the_forwarder_and_recorded_runs_the_shim() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("programs.log");
    ok(run(allocmux_embedded()
        .args(["compare", "-a", "system,mimalloc,jemalloc", "-n", "6", "--warmup", "0"])
        .arg("--log")
        .arg(&log)
        .args([
            "--",
            "sh",
            "-c",
            "echo \"preload=${LD_PRELOAD##*/} record=$ALLOCMUX_RECORD output=${ALLOCMUX_OUTPUT:+yes}\"",
        ])));
    let logged = fs::read_to_string(&log).unwrap();
    let runs: Vec<&str> = logged.split("==> ").skip(1).collect();
    assert_eq!(runs.len(), 6 * 3 + 2 * 3, "{logged}");
    // Round 1: its timing runs, then its recorded ones.
    for (run, (name, recorded)) in runs.iter().zip([
        ("system", false),
        ("mimalloc", false),
        ("jemalloc", false),
        ("system", true),
        ("mimalloc", true),
        ("jemalloc", true),
    ]) {
        let head = format!(
            "round 1 under {name}{}\n",
            if recorded { ", recorded" } else { "" }
        );
        assert!(run.contains(&head), "{head:?} in {run}");
        let line = run.lines().nth(1).unwrap();
        if recorded {
            assert!(line.starts_with("preload=liballocmux_shim"), "{line}");
            assert!(!line.contains("_forward-"), "{line}");
            assert!(line.ends_with("record= output=yes"), "{line}");
        } else if name == "system" {
            assert_eq!(
                line, "preload= record= output=",
                "glibc's timing run preloads nothing"
            );
        } else {
            assert!(
                line.starts_with(&format!("preload=liballocmux_shim-{name}_forward-")),
                "{line}"
            );
            assert!(line.ends_with("record=off output="), "{line}");
        }
    }
}
