//! `allocmux demo` end to end: it compares the allocators, records stacks,
//! and writes charts and flamegraphs that a browser really draws.

use std::fs;
use std::path::Path;
use std::process::Command;

use serde_json::Value;

use crate::common;
use common::*;

/// Screenshots `svg` in headless Chromium into `png`; `None` (after saying
/// so) when Chromium is not installed, which CI does not allow.
fn screenshot(svg: &Path, png: &Path, profile_dir: &Path) -> Option<()> {
    let chromium = ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|c| {
            Command::new(c)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        });
    let Some(chromium) = chromium else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must install Debian's chromium for the screenshot test"
        );
        eprintln!("skipping the screenshot: no chromium on this machine");
        return None;
    };
    // The flags the machine's notes give for headless Chromium as root on a
    // closed network.
    let out = Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            "--window-size=1200,800",
        ])
        .arg(format!("--user-data-dir={}", profile_dir.display()))
        .arg(format!("--screenshot={}", png.display()))
        .arg(format!("file://{}", svg.display()))
        .output()
        .expect("chromium runs");
    assert!(
        png.exists(),
        "chromium wrote no screenshot of {}: {}",
        svg.display(),
        text(&out.stderr)
    );
    Some(())
}

/// Share of pixels that are not the background (the corner pixel's colour),
/// and the number of distinct colours.
fn ink(png: &Path) -> (f64, usize) {
    let decoder = png::Decoder::new(std::io::BufReader::new(fs::File::open(png).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buf).unwrap();
    let px = info.color_type.samples();
    let pixels: Vec<&[u8]> = buf[..info.buffer_size()].chunks(px).collect();
    let background = pixels[0];
    let inked = pixels.iter().filter(|p| **p != background).count();
    let mut colours: Vec<&[u8]> = pixels.clone();
    colours.sort_unstable();
    colours.dedup();
    (inked as f64 / pixels.len() as f64, colours.len())
}

#[test]
fn demo_compares_records_and_draws() {
    let dir = tempfile::tempdir().unwrap();
    let out = ok(run(allocmux()
        .args(["demo", "--size", "20000", "--rounds", "6", "-o"])
        .arg(dir.path())));
    let stdout = text(&out.stdout);
    for needle in [
        "against system",
        "verdict: ",
        "The top stack by count",
        "levenshtein_naive",
        "What to change: ",
        "allocmux-demo-compare.svg",
        "allocmux-demo-flame-time.svg",
    ] {
        assert!(stdout.contains(needle), "{needle:?} in {stdout}");
    }
    let file = |name: &str| dir.path().join(format!("allocmux-demo-{name}"));

    let v: Value =
        serde_json::from_str(&fs::read_to_string(file("compare.json")).unwrap()).unwrap();
    assert_eq!(v["rounds"], 6);
    let names: Vec<&str> = v["allocators"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["allocator"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["system", "jemalloc", "mimalloc"]);

    for name in [
        "compare.svg",
        "flame-count.svg",
        "flame-bytes.svg",
        "flame-time.svg",
    ] {
        parse_svg(&fs::read_to_string(file(name)).unwrap());
    }
    let count = fs::read_to_string(file("flame-count.svg")).unwrap();
    assert!(
        count.contains("levenshtein_naive"),
        "the flamegraph by count shows the function that allocates"
    );

    // The profile with stacks reads back through the CLI.
    let rep = ok(run(allocmux()
        .args(["report", "--json"])
        .arg(file("stacks.prof"))));
    let rep: Value = serde_json::from_slice(&rep.stdout).unwrap();
    assert!(rep["total"]["calls"]["malloc"].as_u64().unwrap() > 20_000);

    // A browser draws them: not blank, more than a couple of colours.
    let shots = tempfile::tempdir().unwrap();
    for name in ["compare.svg", "flame-count.svg"] {
        let png = shots.path().join(format!("{name}.png"));
        if screenshot(&file(name), &png, &shots.path().join("chromium")).is_none() {
            return;
        }
        let (share, colours) = ink(&png);
        assert!(
            share > 0.02 && colours > 8,
            "{name} looks blank in Chromium: {:.1}% inked, {colours} colours",
            share * 100.0
        );
    }
}

#[test]
fn demo_refuses_an_unusable_directory() {
    let dir = tempfile::tempdir().unwrap();
    let blocker = dir.path().join("file");
    fs::write(&blocker, "not a directory").unwrap();
    let out = run(allocmux().args(["demo", "-o"]).arg(&blocker));
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(err.contains("is not a directory"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(fs::read_to_string(&blocker).unwrap(), "not a directory");
}
