//! Bad input to every subcommand, table-driven: unknown
//! allocator names and weights, empty commands, missing, unreadable,
//! corrupt, truncated, empty and newer-version profiles, unwritable and
//! existing output paths, static and setuid targets.
//!
//! Each case must give exactly one line on stderr that starts with
//! `allocmux: ` and names the problem, a non-zero exit status, no panic or
//! backtrace, nothing on stdout, and leave its directory exactly as it was:
//! every file there before has its content, no file was added (no empty
//! claim left behind), and the command given to `run`, `flame` or
//! `compare` never ran (it would have created a marker file).

use allocmux_format::profile::FORMAT_VERSION;
use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::common;
use common::*;

/// The command every run-like case is given: it leaves `ran` behind.
const MARK: [&str; 4] = ["--", "sh", "-c", "touch ran"];

/// A profile with exact stacks of a real run (`sh -c true`), made once.
fn good_profile() -> &'static str {
    static TEXT: OnceLock<String> = OnceLock::new();
    TEXT.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("good.prof");
        ok(run(allocmux()
            .args(["run", "--stacks", "exact", "-o"])
            .arg(&p)
            .args(["--", "sh", "-c", "true"])));
        fs::read_to_string(&p).unwrap()
    })
}

/// A statically linked program that would leave `ran` behind, built once.
fn static_marker() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap().keep();
        static_program(
            &dir,
            "static-marker",
            "#include <stdio.h>\nint main(void) { return fopen(\"ran\", \"w\") == 0; }\n",
        )
    })
}

fn running_as_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Sets up the files the cases refer to, by name, in `dir`.
fn populate(dir: &Path) {
    let good = good_profile();
    let w = |name: &str, body: &[u8]| fs::write(dir.join(name), body).unwrap();
    w("good.prof", good.as_bytes());
    w("empty.prof", b"");
    w("binary.prof", &[0x7f, b'E', b'L', b'F', 0xff, 0xfe, 0, 1]);
    w("text.prof", b"hello, world\n");
    w("utf16.prof", &[0xff, 0xfe, b'a', 0]);
    w("cut.prof", &good.as_bytes()[..good.len() / 2]);
    w(
        "newer.prof",
        good.replacen(
            &format!("allocmux-profile {FORMAT_VERSION}"),
            &format!("allocmux-profile {}", FORMAT_VERSION + 1),
            1,
        )
        .as_bytes(),
    );
    w("locked.prof", good.as_bytes());
    fs::set_permissions(dir.join("locked.prof"), fs::Permissions::from_mode(0o000)).unwrap();
    fs::create_dir(dir.join("adir")).unwrap();
    // A regular file where a directory is expected: nothing can be created
    // "in" it, whoever runs the test (root included).
    w("notadir", b"a file, not a directory");
    for name in [
        "precious.prof",
        "precious.json",
        "precious.svg",
        "precious.folded",
        "precious.log",
    ] {
        w(name, b"written before; must survive");
    }
    // A setuid copy of the shell: refused before it could run the marker.
    fs::copy("/bin/sh", dir.join("suid-sh")).unwrap();
    fs::set_permissions(dir.join("suid-sh"), fs::Permissions::from_mode(0o4755)).unwrap();
    fs::copy(static_marker(), dir.join("static-marker")).unwrap();
    w("not-executable", b"#!/bin/sh\ntouch ran\n");
}

/// Every file in `dir` (recursively) with its content, and its mode.
fn contents(dir: &Path) -> BTreeMap<PathBuf, (u32, Vec<u8>)> {
    let mut out = BTreeMap::new();
    for e in fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let p = e.path();
        let meta = fs::symlink_metadata(&p).unwrap();
        if meta.is_dir() {
            out.extend(contents(&p));
            out.insert(p, (meta.permissions().mode(), vec![]));
        } else {
            // Read through a copy of the permissions (locked.prof is 000).
            let mode = meta.permissions().mode();
            fs::set_permissions(&p, fs::Permissions::from_mode(mode | 0o400)).unwrap();
            let body = fs::read(&p).unwrap();
            fs::set_permissions(&p, fs::Permissions::from_mode(mode)).unwrap();
            out.insert(p, (mode, body));
        }
    }
    out
}

/// One bad command line: its arguments (run in the case's directory), the
/// exit status wanted, and a phrase the error line must contain (or one
/// of several, separated by `|`).
struct Case {
    args: Vec<String>,
    code: i32,
    needle: &'static str,
}

fn case(args: &[&str], code: i32, needle: &'static str) -> Case {
    Case {
        args: args.iter().map(|s| s.to_string()).collect(),
        code,
        needle,
    }
}

/// `args` followed by the marker command.
fn marked(args: &[&str]) -> Vec<&'static str> {
    args.iter()
        .map(|s| -> &'static str { Box::leak(s.to_string().into_boxed_str()) })
        .chain(MARK)
        .collect()
}

fn cases() -> Vec<Case> {
    let mut v = Vec::new();
    let run_like: [&[&str]; 3] = [&["run"], &["flame"], &["compare"]];

    // Unknown allocator names.
    for a in ["tcmalloc", "", "System", "jemalloc,", "next"] {
        let expected = "expected system, jemalloc, mimalloc, or NAME=PATH";
        v.push(case(&marked(&["run", "-a", a]), 2, expected));
        v.push(case(&marked(&["flame", "-a", a]), 2, expected));
    }
    for a in [
        "tcmalloc",
        "system,tcmalloc",
        "",
        "system,,jemalloc",
        "system,next",
    ] {
        let expected = "expected system, jemalloc, mimalloc, or NAME=PATH";
        v.push(case(&marked(&["compare", "-a", a]), 2, expected));
    }
    // OTLP destinations the shim cannot push to, and intervals out of range.
    for url in [
        "https://127.0.0.1:4318",
        "collector.example:4318",
        "http://collector.example:4318",
        "http://127.0.0.1:99999",
        "",
    ] {
        v.push(case(&marked(&["run", "--otlp", url]), 2, "expected"));
        v.push(case(&["preload", "--otlp", url], 2, "expected"));
    }
    for secs in ["0", "86401", "-1", "soon"] {
        v.push(case(
            &marked(&["run", "--otlp", "--otlp-interval", secs]),
            2,
            "--otlp-interval",
        ));
    }
    v.push(case(&marked(&["run", "--otlp-interval", "5"]), 2, "--otlp"));
    v.push(case(
        &marked(&["run", "--record", "off", "--otlp"]),
        2,
        "cannot be used with '--otlp",
    ));
    // Bad weights, formats, modes and numbers.
    for w in ["heavy", "", "Bytes", "count,bytes"] {
        v.push(case(
            &marked(&["flame", "--weight", w]),
            2,
            "possible values",
        ));
        v.push(case(
            &[
                "export",
                "good.prof",
                "--format",
                "folded",
                "--weight",
                w,
                "-o",
                "out.folded",
            ],
            2,
            "possible values",
        ));
        v.push(case(
            &[
                "diff",
                "good.prof",
                "good.prof",
                "--weight",
                w,
                "-o",
                "out.svg",
            ],
            2,
            "possible values",
        ));
    }
    v.push(case(
        &["export", "good.prof", "--format", "xml", "-o", "out.xml"],
        2,
        "invalid value",
    ));
    v.push(case(
        &marked(&["run", "--stacks", "always"]),
        2,
        "invalid value",
    ));
    v.push(case(
        &marked(&["flame", "--stacks", "off"]),
        2,
        "invalid value",
    ));
    // Past the shim's largest mean (2^40): refused here, not replaced
    // by the shim's default with a warning.
    for n in ["1099511627777", "18446744073709551615"] {
        for sub in ["run", "flame"] {
            v.push(case(
                &marked(&[sub, "--sample-bytes", n]),
                2,
                "not in 1..=1099511627776",
            ));
        }
        v.push(case(
            &["preload", "--sample-bytes", n],
            2,
            "not in 1..=1099511627776",
        ));
    }
    for n in ["0", "-5", "lots", "99999999999999999999999"] {
        v.push(case(
            &marked(&["run", "--sample-bytes", n]),
            2,
            "invalid value",
        ));
        v.push(case(
            &marked(&["flame", "--sample-bytes", n]),
            2,
            "invalid value",
        ));
        v.push(case(&marked(&["compare", "-n", n]), 2, "invalid value"));
        if n != "0" {
            // `--top 0` is valid (no stacks listed); a negative number
            // reads as an unknown flag.
            v.push(case(
                &["report", "good.prof", "--top", n],
                2,
                "invalid value",
            ));
        }
    }
    v.push(case(
        &marked(&["compare", "-n", "1001"]),
        2,
        "invalid value",
    ));
    v.push(case(
        &marked(&["compare", "--warmup", "-1"]),
        2,
        "invalid value",
    ));
    v.push(case(
        &marked(&["run", "--stacks", "exact", "--sample-bytes", "4096"]),
        2,
        "--sample-bytes applies to --stacks sample",
    ));
    v.push(case(
        &marked(&["run", "--bogus-flag"]),
        2,
        "unexpected argument",
    ));
    v.push(case(&["frobnicate"], 2, "unrecognized subcommand"));

    // Empty commands.
    for sub in run_like {
        let sub = sub[0];
        v.push(case(&[sub], 2, "required"));
        v.push(case(&[sub, "--"], 2, "required"));
        v.push(case(&[sub, "--", ""], 2, "the command is empty"));
        v.push(case(
            &[sub, "--", "no-such-program-xyz"],
            127,
            "command not found",
        ));
        v.push(case(
            &[sub, "--", "./not-executable"],
            126,
            "is not executable",
        ));
        v.push(case(&[sub, "--", "/tmp"], 126, "/tmp is a directory"));
    }
    for args in [
        &["report"][..],
        &["export", "--format", "folded", "-o", "out.folded"],
        &["diff", "good.prof", "-o", "out.svg"],
    ] {
        v.push(case(args, 2, "required"));
    }

    // An output that is an input, or two outputs on one path: refused even
    // with --force, before anything is written (the directory is checked
    // unchanged, so good.prof survives).
    let is_input = "is the profile this command reads";
    for args in [
        &["report", "good.prof", "--html", "good.prof", "--force"][..],
        &["report", "good.prof", "--plot", "./good.prof", "--force"],
        &[
            "export",
            "good.prof",
            "--format",
            "json",
            "-o",
            "good.prof",
            "--force",
        ],
        &[
            "diff",
            "good.prof",
            "good.prof",
            "--html",
            "good.prof",
            "--force",
        ],
    ] {
        v.push(case(args, 2, is_input));
    }
    v.push(case(
        &marked(&["run", "-o", "same.out", "--html", "same.out"]),
        2,
        "the profile and the HTML report would both be written to same.out",
    ));
    v.push(case(
        &marked(&["flame", "-o", "same.out", "--html", "./same.out", "--force"]),
        2,
        "would both be written to",
    ));

    // Bad profiles, for every subcommand that reads one, in each place.
    let mut profiles = vec![
        ("nope.prof", "cannot read profile nope.prof"),
        ("adir", "cannot read profile adir"),
        ("empty.prof", "empty"),
        ("binary.prof", "not an allocmux profile"),
        ("text.prof", "not an allocmux profile"),
        ("utf16.prof", "not text"),
        ("cut.prof", "truncated"),
        ("newer.prof", "newer than this allocmux reads"),
    ];
    if !running_as_root() {
        // Root reads a mode-000 file; the directory case above stands for
        // an unreadable profile then.
        profiles.push(("locked.prof", "Permission denied"));
    }
    for (bad, needle) in profiles {
        v.push(case(&["report", bad], 1, needle));
        v.push(case(&["report", "good.prof", bad], 1, needle));
        v.push(case(&["report", bad, "--json"], 1, needle));
        v.push(case(&["report", bad, "--plot", "out.svg"], 1, needle));
        for format in ["folded", "pprof", "json", "svg"] {
            v.push(case(
                &["export", "good.prof", bad, "--format", format, "-o", "out"],
                1,
                needle,
            ));
        }
        v.push(case(
            &["export", bad, "--format", "folded", "-o", "-"],
            1,
            needle,
        ));
        v.push(case(
            &["diff", bad, "good.prof", "-o", "out.svg"],
            1,
            needle,
        ));
        v.push(case(
            &["diff", "good.prof", bad, "-o", "out.svg"],
            1,
            needle,
        ));
    }

    // Outputs that cannot be written: refused before the program runs.
    let unwritable = [
        ("notadir/out", "Not a directory"),
        ("no/such/dir/out", "No such file or directory"),
        ("adir", "is a directory"),
    ];
    for (path, needle) in unwritable {
        v.push(case(&marked(&["run", "-o", path]), 1, needle));
        v.push(case(&marked(&["run", "--json", path]), 1, needle));
        v.push(case(&marked(&["run", "--force", "-o", path]), 1, needle));
        v.push(case(&marked(&["flame", "-o", path]), 1, needle));
        v.push(case(&marked(&["flame", "--force", "-o", path]), 1, needle));
        v.push(case(&marked(&["compare", "--json", path]), 1, needle));
        v.push(case(&marked(&["compare", "--plot", path]), 1, needle));
        v.push(case(&marked(&["compare", "--log", path]), 1, needle));
        v.push(case(&["report", "good.prof", "--plot", path], 1, needle));
        // The HTML report, on each command that writes one.
        v.push(case(&marked(&["run", "--html", path]), 1, needle));
        v.push(case(&marked(&["flame", "--html", path]), 1, needle));
        v.push(case(&marked(&["compare", "--html", path]), 1, needle));
        v.push(case(&["report", "good.prof", "--html", path], 1, needle));
        v.push(case(
            &["diff", "good.prof", "good.prof", "--html", path],
            1,
            needle,
        ));
        v.push(case(
            &["export", "good.prof", "--format", "folded", "-o", path],
            1,
            needle,
        ));
        v.push(case(
            &["diff", "good.prof", "good.prof", "-o", path],
            1,
            needle,
        ));
    }
    // A claim for one output is given up when a later one fails.
    v.push(case(
        &marked(&["run", "--json", "fresh.json", "-o", "notadir/x"]),
        1,
        "Not a directory",
    ));

    // Existing outputs: kept, not overwritten, without --force.
    let exists = "already exists; choose another name or pass --force";
    v.push(case(&marked(&["run", "-o", "precious.prof"]), 1, exists));
    v.push(case(
        &marked(&["run", "--json", "precious.json"]),
        1,
        exists,
    ));
    v.push(case(&marked(&["flame", "-o", "precious.svg"]), 1, exists));
    v.push(case(
        &marked(&["compare", "--json", "precious.json"]),
        1,
        exists,
    ));
    v.push(case(
        &marked(&["compare", "--plot", "precious.svg"]),
        1,
        exists,
    ));
    v.push(case(
        &marked(&["compare", "--log", "precious.log"]),
        1,
        exists,
    ));
    v.push(case(
        &["report", "good.prof", "--plot", "precious.svg"],
        1,
        exists,
    ));
    v.push(case(
        &[
            "export",
            "good.prof",
            "--format",
            "folded",
            "-o",
            "precious.folded",
        ],
        1,
        exists,
    ));
    v.push(case(
        &["diff", "good.prof", "good.prof", "-o", "precious.svg"],
        1,
        exists,
    ));

    // The demo's output directory.
    v.push(case(
        &["demo", "-o", "notadir"],
        1,
        "notadir is not a directory",
    ));
    v.push(case(&["demo", "-o", "notadir/sub"], 1, "Not a directory"));
    v.push(case(&["demo", "--rounds", "0"], 2, "invalid value"));
    v.push(case(
        &["__workload", "no-such-workload"],
        2,
        "unknown workload",
    ));
    v.push(case(
        &["compare", "-a", "system,system", "--", "true"],
        2,
        "listed twice",
    ));

    // Targets LD_PRELOAD cannot reach.
    for sub in run_like {
        let sub = sub[0];
        v.push(case(
            &[sub, "--", "./static-marker"],
            1,
            "statically linked",
        ));
        v.push(case(
            &[sub, "--", "./suid-sh", "-c", "touch ran"],
            1,
            "setuid or setgid",
        ));
        // ... with outputs claimed first: the claims are given up.
        let with_outputs: &[&str] = match sub {
            "run" => &["run", "-o", "new.prof", "--json", "new.json"],
            "flame" => &["flame", "-o", "new.svg"],
            _ => &["compare", "--json", "new.json", "--plot", "new.svg"],
        };
        let mut args = with_outputs.to_vec();
        args.extend(["--", "./static-marker"]);
        v.push(case(&args, 1, "statically linked"));
    }
    v
}

#[test]
fn every_bad_input_gets_one_line_and_changes_nothing() {
    let root = tempfile::tempdir().unwrap();
    let mut failures = Vec::new();
    let all = cases();
    for (i, c) in all.iter().enumerate() {
        let dir = root.path().join(format!("case{i}"));
        fs::create_dir(&dir).unwrap();
        populate(&dir);
        let before = contents(&dir);
        let out = run(allocmux()
            .args(&c.args)
            .current_dir(&dir)
            .env("RUST_BACKTRACE", "1"));
        let err = text(&out.stderr);
        let mut wrong = Vec::new();
        if out.status.code() != Some(c.code) {
            wrong.push(format!("exit status {:?}, want {}", out.status, c.code));
        }
        if err.lines().count() != 1 || !err.ends_with('\n') {
            wrong.push("not exactly one line on stderr".to_string());
        }
        if !err.starts_with("allocmux: ") {
            wrong.push("stderr does not start with `allocmux: `".to_string());
        }
        if !c.needle.split('|').any(|n| err.contains(n)) {
            wrong.push(format!("no {:?} in the message", c.needle));
        }
        if err.contains("panicked") || err.contains("backtrace") {
            wrong.push("a panic".to_string());
        }
        if !out.stdout.is_empty() {
            wrong.push(format!("stdout: {:?}", text(&out.stdout)));
        }
        if dir.join("ran").exists() {
            wrong.push("the program ran".to_string());
        }
        let after = contents(&dir);
        if after != before {
            let changed: Vec<_> = before
                .keys()
                .chain(after.keys())
                .filter(|k| before.get(*k) != after.get(*k))
                .map(|k| k.strip_prefix(&dir).unwrap().display().to_string())
                .collect();
            wrong.push(format!("files changed, added or removed: {changed:?}"));
        }
        if !wrong.is_empty() {
            failures.push(format!(
                "allocmux {}\n    {}\n    stderr: {err:?}",
                shell(&c.args),
                wrong.join("; ")
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} bad inputs were not handled cleanly:\n{}",
        failures.len(),
        all.len(),
        failures.join("\n")
    );
}

fn shell(args: &[String]) -> String {
    args.iter()
        .map(|a| {
            if a.is_empty() || a.contains(' ') {
                format!("'{a}'")
            } else {
                a.clone()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// An output that is a device or a pipe holds nothing to lose: it is
/// written in place, without `--force`, and never replaced by a file.
#[test]
fn device_outputs_are_written_in_place() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("good.prof"), good_profile()).unwrap();
    let out = ok(run(allocmux()
        .args([
            "export",
            "good.prof",
            "--format",
            "folded",
            "-o",
            "/dev/stdout",
        ])
        .current_dir(dir.path())));
    assert!(
        text(&out.stdout).contains(';') || !text(&out.stdout).is_empty(),
        "folded stacks on stdout: {:?}",
        text(&out.stdout)
    );
    ok(run(allocmux()
        .args(["report", "good.prof", "--plot", "/dev/null"])
        .current_dir(dir.path())));
    let null = fs::symlink_metadata("/dev/null").unwrap();
    assert!(!null.is_file(), "/dev/null was replaced by a regular file");
    assert_eq!(
        fs::read_dir(dir.path()).unwrap().count(),
        1,
        "no temporary file is left"
    );
}

/// With `--force`, an existing file is replaced whole; a stray file named
/// like a temporary one beside it is someone else's and stays.
#[test]
fn forced_outputs_replace_only_the_named_file() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    fs::write(d.join("good.prof"), good_profile()).unwrap();
    fs::write(d.join("out.folded"), "old").unwrap();
    fs::write(d.join("out.allocmux-tmp"), "someone else's").unwrap();
    ok(run(allocmux()
        .args([
            "export",
            "good.prof",
            "--format",
            "folded",
            "-o",
            "out.folded",
            "--force",
        ])
        .current_dir(d)));
    assert_ne!(fs::read_to_string(d.join("out.folded")).unwrap(), "old");
    assert_eq!(
        fs::read_to_string(d.join("out.allocmux-tmp")).unwrap(),
        "someone else's"
    );
    let mut names: Vec<String> = fs::read_dir(d)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["good.prof", "out.allocmux-tmp", "out.folded"]);
}
