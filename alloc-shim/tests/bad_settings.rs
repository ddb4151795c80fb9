//! Bad settings: the shim's environment, table-driven, under every
//! backend: each `ALLOCMUX_*` variable the shim reads set to garbage,
//! empty, huge (100 KB: one environment string may hold at most 128 KiB),
//! overflowing, negative or non-UTF-8 values, and `ALLOCMUX_OUTPUT` set to
//! hostile paths (`%` sequences other than `%p`, a trailing `%`, many
//! `%p`s, a directory, a path in a missing directory, a symlink planted to
//! another file, a FIFO, an existing file).
//!
//! Every case: the program's stdout and exit status are those of the run
//! without the shim, stderr holds at most one line from the shim (plus the
//! summary line when no profile is written), the documented default is
//! used, and the files in the output directory are exactly the expected
//! ones: nothing followed through a symlink, nothing clobbered.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::process::Command;

use crate::common;
use common::*;

use allocmux_format::profile::StackMode;

/// 100 KB: far beyond any sane value, within the kernel's 128 KiB limit
/// for one environment string.
fn huge(c: char) -> String {
    std::iter::repeat_n(c, 100_000).collect()
}

/// What a bad value must leave in the profile.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Want {
    /// The backend asked for by the test (the bad value is elsewhere).
    Backend,
    /// The system allocator (the default for a bad `ALLOCMUX_ALLOCATOR`).
    System,
    /// No stacks (the default for a bad `ALLOCMUX_STACKS`).
    StacksOff,
    /// Sampled stacks at the default mean (a bad `ALLOCMUX_SAMPLE_BYTES`).
    DefaultSampleBytes,
    /// The default time-sampling mean (a bad `ALLOCMUX_TIME_SAMPLE`).
    DefaultTimeSample,
}

/// Environment settings: (variable, value) pairs.
type Settings = Vec<(&'static str, OsString)>;

/// Settings with bad values: (the settings, whether a warning is due,
/// what the profile must show).
fn bad_settings() -> Vec<(Settings, bool, Want)> {
    let s = |v: &str| OsString::from(v);
    let bytes = |v: &[u8]| OsStr::from_bytes(v).to_owned();
    let mut v = Vec::new();
    let garbage = || {
        vec![
            (s("tcmalloc"), true),
            (s(""), false),
            (s(&huge('x')), true),
            (s("jemalloc\nALLOCMUX_STACKS=exact"), true),
            (bytes(b"\xff\xfe\x80"), true),
            (s("-1"), true),
            (s("%p%n%s"), true),
        ]
    };
    for (value, warns) in garbage() {
        v.push((vec![("ALLOCMUX_ALLOCATOR", value)], warns, Want::System));
    }
    for (value, warns) in garbage() {
        v.push((vec![("ALLOCMUX_STACKS", value)], warns, Want::StacksOff));
    }
    v.push((vec![("ALLOCMUX_STACKS", s("EXACT"))], true, Want::StacksOff));
    let numbers = || {
        vec![
            (s("abc"), true),
            (s(""), false),
            (s("0"), true),
            (s("-1"), true),
            (s("-9223372036854775808"), true),
            (s("18446744073709551616"), true), // u64::MAX + 1
            (s("99999999999999999999999999999999"), true),
            (s(&huge('9')), true),
            (s("1e6"), true),
            (s("0x1000"), true),
            (s("4096 bytes"), true),
            (bytes(b"12\xff"), true),
        ]
    };
    for (value, warns) in numbers() {
        v.push((
            vec![
                ("ALLOCMUX_STACKS", s("sample")),
                ("ALLOCMUX_SAMPLE_BYTES", value),
            ],
            warns,
            Want::DefaultSampleBytes,
        ));
    }
    for (value, warns) in numbers() {
        v.push((
            vec![("ALLOCMUX_TIME_SAMPLE", value)],
            warns,
            Want::DefaultTimeSample,
        ));
    }
    // Out of range but a number: above the maxima.
    v.push((
        vec![("ALLOCMUX_TIME_SAMPLE", s("1073741825"))],
        true,
        Want::DefaultTimeSample,
    ));
    v.push((
        vec![
            ("ALLOCMUX_STACKS", s("sample")),
            ("ALLOCMUX_SAMPLE_BYTES", s("1099511627777")),
        ],
        true,
        Want::DefaultSampleBytes,
    ));
    // An exact prefix that is not a number is none: sampling from the
    // start (a valid one would leave this short run's stacks exact).
    for value in ["lots", "-1", "1099511627777"] {
        v.push((
            vec![
                ("ALLOCMUX_STACKS", s("sample")),
                ("ALLOCMUX_EXACT_FIRST", s(value)),
            ],
            true,
            Want::DefaultSampleBytes,
        ));
    }
    // An unknown variable of ours is ignored.
    v.push((
        vec![("ALLOCMUX_NO_SUCH_SETTING", s("1"))],
        false,
        Want::Backend,
    ));
    v
}

/// The shim's lines on stderr, checked: the program's own stderr is
/// untouched before them and every other line is the shim's.
fn shim_lines(stderr: &[u8], what: &str) -> Vec<String> {
    let err = String::from_utf8_lossy(stderr);
    assert!(
        !err.contains("panicked") && !err.contains("Segmentation"),
        "{what}: {err}"
    );
    let lines: Vec<String> = err.lines().map(str::to_string).collect();
    assert!(
        lines.iter().all(|l| l.starts_with("allocmux: ")),
        "{what}: stderr has lines not from the shim (counts writes none):\n{}",
        text(stderr)
    );
    lines
}

const COUNTS_OUT: &str = "counts: 10 iterations, checksum 10\n";

fn bad_values_warn_once_and_fall_back(backend: &str) {
    let exe = compile_c("counts.c");
    let default_time = allocmux_recorder::DEFAULT_TIME_SAMPLE_MEAN;
    for (settings, warns, want) in bad_settings() {
        let shown: Vec<String> = settings
            .iter()
            .map(|(k, v)| {
                let v = v.to_string_lossy();
                let v = if v.len() > 40 {
                    format!("{}... ({} bytes)", &v[..20], v.len())
                } else {
                    v.into_owned()
                };
                format!("{k}={v:?}")
            })
            .collect();
        let what = format!("{backend} with {}", shown.join(" "));
        let env: Vec<(&str, &OsStr)> = settings.iter().map(|(k, v)| (*k, v.as_os_str())).collect();
        let dir = tempfile::tempdir().unwrap();
        let mut cmd = Command::new(&exe);
        cmd.arg("10");
        // The universal library, which takes its backend and mode from
        // these variables (a direct shim's are its table's).
        preload(&mut cmd, backend, Some(&dir.path().join("%p.prof"))).env("LD_PRELOAD", shim());
        for (k, v) in &env {
            cmd.env(k, v);
        }
        let out = run(&mut cmd, None);
        assert!(out.status.success(), "{what}: {}", out.status);
        assert_eq!(text(&out.stdout), COUNTS_OUT, "{what}: stdout");
        let lines = shim_lines(&out.stderr, &what);
        assert_eq!(
            lines.len(),
            warns as usize,
            "{what}: want {} warning line(s), got {lines:#?}",
            warns as usize
        );
        if let Some(l) = lines.first() {
            assert!(
                l.contains(settings.last().unwrap().0) && l.len() <= 512,
                "{what}: the warning should name the variable, in at most 512 bytes: {l:?}"
            );
        }
        let profiles = read_profiles(dir.path());
        assert_eq!(profiles.len(), 1, "{what}: {}", listing(&profiles));
        let p = &profiles[0].1;
        let backend_used = if want == Want::System {
            "system"
        } else {
            backend
        };
        assert_eq!(p.allocator, backend_used, "{what}: {}", summary(p));
        assert_eq!(p.state, State::Exited, "{what}");
        assert!(p.totals.calls_of(Func::Malloc) >= 10, "{what}");
        match want {
            Want::StacksOff | Want::System | Want::Backend => {
                assert_eq!(p.stacks.mode, StackMode::Off, "{what}")
            }
            Want::DefaultSampleBytes => assert_eq!(
                p.stacks.mode,
                StackMode::Sample {
                    mean_bytes: 524_288
                },
                "{what}"
            ),
            Want::DefaultTimeSample => {}
        }
        let time_sample = p.time_sample_mean;
        assert_eq!(time_sample, default_time, "{what}: time sample mean");
    }
}

/// What `ALLOCMUX_OUTPUT` is set to, relative to a fresh directory `D`
/// (`{D}` in the template), what is there before the run, and what must be
/// there after it.
struct OutputCase {
    name: &'static str,
    template: String,
    setup: fn(&Path),
    /// Whether the shim may say one line about it (it cannot write).
    warns: bool,
    /// Profiles expected: file names in `D` (`{pid}` for the pid).
    profiles: Vec<String>,
    /// Other files that must be in `D` afterwards, with their content
    /// (`None`: not a regular file, left as it was).
    others: Vec<(&'static str, Option<&'static str>)>,
}

fn output_cases(d: &Path) -> Vec<OutputCase> {
    let at = |s: &str| format!("{}/{s}", d.display());
    let none: fn(&Path) = |_| {};
    vec![
        OutputCase {
            name: "other % sequences and a trailing %",
            template: at("a%x%s%n%d%%b%"),
            setup: none,
            warns: false,
            profiles: vec!["a%x%s%n%d%b%".into()],
            others: vec![],
        },
        OutputCase {
            name: "a few %p",
            template: at("%p.%p.prof"),
            setup: none,
            warns: false,
            profiles: vec!["{pid}.{pid}.prof".into()],
            others: vec![],
        },
        OutputCase {
            name: "many %p: a name too long for the file system",
            template: at(&"%p".repeat(200)),
            setup: none,
            warns: true,
            profiles: vec![],
            others: vec![],
        },
        OutputCase {
            name: "many %p: a path too long for PATH_MAX",
            template: at(&"%p/".repeat(1300)),
            setup: none,
            warns: true,
            profiles: vec![],
            others: vec![],
        },
        OutputCase {
            name: "100 KB of path",
            template: at(&huge('p')),
            setup: none,
            warns: true,
            profiles: vec![],
            others: vec![],
        },
        OutputCase {
            name: "an existing directory",
            template: at("adir"),
            setup: |d| std::fs::create_dir(d.join("adir")).unwrap(),
            warns: false,
            profiles: vec!["adir.1".into()],
            others: vec![("adir", None)],
        },
        OutputCase {
            name: "a directory, with a trailing slash",
            template: at("adir/"),
            setup: |d| std::fs::create_dir(d.join("adir")).unwrap(),
            warns: true,
            profiles: vec![],
            others: vec![("adir", None)],
        },
        OutputCase {
            name: "a path in a missing directory",
            template: at("no/such/dir/%p.prof"),
            setup: none,
            warns: true,
            profiles: vec![],
            others: vec![],
        },
        OutputCase {
            name: "a path under a regular file",
            template: at("file/%p.prof"),
            setup: |d| std::fs::write(d.join("file"), "mine").unwrap(),
            warns: true,
            profiles: vec![],
            others: vec![("file", Some("mine"))],
        },
        OutputCase {
            name: "a symlink planted to another file",
            template: at("shared.prof"),
            setup: |d| {
                std::fs::write(d.join("victim"), "victim's").unwrap();
                std::os::unix::fs::symlink(d.join("victim"), d.join("shared.prof")).unwrap();
            },
            warns: false,
            profiles: vec!["shared.prof.1".into()],
            others: vec![("victim", Some("victim's")), ("shared.prof", None)],
        },
        OutputCase {
            name: "a dangling symlink planted to a file to create",
            template: at("shared.prof"),
            setup: |d| {
                std::os::unix::fs::symlink(d.join("created"), d.join("shared.prof")).unwrap();
            },
            warns: false,
            profiles: vec!["shared.prof.1".into()],
            others: vec![("shared.prof", None)],
        },
        OutputCase {
            name: "symlinks planted at the next names too",
            template: at("s.prof"),
            setup: |d| {
                std::fs::write(d.join("victim"), "victim's").unwrap();
                std::os::unix::fs::symlink(d.join("victim"), d.join("s.prof")).unwrap();
                std::os::unix::fs::symlink(d.join("victim"), d.join("s.prof.1")).unwrap();
                std::os::unix::fs::symlink(d.join("victim"), d.join("s.prof.tmp")).unwrap();
            },
            warns: false,
            profiles: vec!["s.prof.2".into()],
            others: vec![
                ("victim", Some("victim's")),
                ("s.prof", None),
                ("s.prof.1", None),
                ("s.prof.tmp", None),
            ],
        },
        OutputCase {
            name: "a FIFO (opening it for writing would block)",
            template: at("fifo"),
            setup: |d| {
                let p = std::ffi::CString::new(d.join("fifo").as_os_str().as_bytes()).unwrap();
                // SAFETY: a valid NUL-terminated path.
                assert_eq!(unsafe { libc::mkfifo(p.as_ptr(), 0o644) }, 0);
            },
            warns: false,
            profiles: vec!["fifo.1".into()],
            others: vec![("fifo", None)],
        },
        OutputCase {
            name: "an existing file",
            template: at("taken.prof"),
            setup: |d| std::fs::write(d.join("taken.prof"), "precious").unwrap(),
            warns: false,
            profiles: vec!["taken.prof.1".into()],
            others: vec![("taken.prof", Some("precious"))],
        },
        OutputCase {
            name: "a relative path",
            template: "rel-%p.prof".into(),
            setup: none,
            warns: false,
            profiles: vec!["rel-{pid}.prof".into()],
            others: vec![],
        },
    ]
}

fn hostile_output_paths_are_safe(backend: &str) {
    let exe = compile_c("counts.c");
    let probe = tempfile::tempdir().unwrap();
    for case in output_cases(probe.path()) {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let case = output_cases(d)
            .into_iter()
            .find(|c| c.name == case.name)
            .unwrap();
        (case.setup)(d);
        let what = format!("{backend}, ALLOCMUX_OUTPUT {}", case.name);
        let mut cmd = Command::new(&exe);
        cmd.arg("10").current_dir(d);
        preload(&mut cmd, backend, None).env("ALLOCMUX_OUTPUT", &case.template);
        let (pid, out) = run_with_pid(&mut cmd, None);
        assert!(out.status.success(), "{what}: {}", out.status);
        assert_eq!(text(&out.stdout), COUNTS_OUT, "{what}: stdout");
        let lines = shim_lines(&out.stderr, &what);
        let (warnings, summaries): (Vec<&String>, Vec<&String>) = lines
            .iter()
            .partition(|l| !l.starts_with(&format!("allocmux: pid {pid} ")));
        assert!(
            warnings.len() == case.warns as usize,
            "{what}: want {} warning(s), got {lines:#?}",
            case.warns as usize
        );
        // A profile that cannot be written is replaced by the one-line
        // summary at exit, as when no output is set.
        assert_eq!(
            summaries.len(),
            case.warns as usize,
            "{what}: the summary line stands for the profile only when none is written: {lines:#?}"
        );

        let mut expected: Vec<String> = case
            .profiles
            .iter()
            .map(|p| p.replace("{pid}", &pid.to_string()))
            .collect();
        expected.extend(case.others.iter().map(|(n, _)| n.to_string()));
        expected.sort();
        let mut found: Vec<String> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        found.sort();
        assert_eq!(found, expected, "{what}: the files in the directory");
        for name in &case.profiles {
            let name = name.replace("{pid}", &pid.to_string());
            let p = read_profile(&d.join(&name));
            assert_eq!(
                (p.pid, p.state, p.allocator.as_str()),
                (pid, State::Exited, backend),
                "{what}: {name}"
            );
        }
        for (name, content) in &case.others {
            let meta = std::fs::symlink_metadata(d.join(name)).unwrap();
            match content {
                Some(c) => assert_eq!(
                    std::fs::read_to_string(d.join(name)).unwrap(),
                    *c,
                    "{what}: {name} changed"
                ),
                None => assert!(!meta.is_file(), "{what}: {name} became a file"),
            }
        }
    }
}

/// `ALLOCMUX_OUTPUT=/dev/null` keeps nothing, silently: no warning, no
/// summary line, and no `/dev/null.1` beside the device (as root the shim
/// could create one there, as it takes the next free name of any other
/// existing path). A fork child and an exec'd image (the `sh -c`) too.
fn null_device_output_keeps_nothing(backend: &str) {
    let exe = compile_c("counts.c");
    let leftovers = || {
        (1..4)
            .filter(|i| Path::new(&format!("/dev/null.{i}")).exists())
            .count()
    };
    let before = leftovers();
    let what = format!("{backend}, ALLOCMUX_OUTPUT=/dev/null");
    let script = format!("{} 10; {} 10 >/dev/null", exe.display(), exe.display());
    let mut cmd = Command::new("sh");
    cmd.args(["-c", &script]);
    preload(&mut cmd, backend, None).env("ALLOCMUX_OUTPUT", "/dev/null");
    let (_, out) = run_with_pid(&mut cmd, None);
    assert!(out.status.success(), "{what}: {}", out.status);
    assert_eq!(text(&out.stdout), COUNTS_OUT, "{what}: stdout");
    let lines = shim_lines(&out.stderr, &what);
    assert!(
        lines.is_empty(),
        "{what}: want no line from the shim: {lines:#?}"
    );
    assert_eq!(
        leftovers(),
        before,
        "{what}: files appeared beside /dev/null"
    );
}

per_backend!(
    bad_values_warn_once_and_fall_back,
    hostile_output_paths_are_safe,
    null_device_output_keeps_nothing
);
