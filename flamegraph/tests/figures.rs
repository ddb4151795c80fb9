//! The figures allocmux prints are the program's: its own peak RSS (not
//! the CLI's, which Linux would carry across `exec`), its own exit status
//! whatever becomes of the report, its own input under `compare`, and its
//! own stdout kept out of `run --json -`.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::OnceLock;

use serde_json::Value;

use crate::common;
use common::*;

/// A program that maps and touches `argv[1]` MiB, unmaps it, and prints
/// its own peak RSS as `getrusage` gives it (KiB). Mapped directly, so
/// that its resident size drops again under every allocator: the exit
/// path (and, recorded, the shim's exit profile) touches a few more pages
/// after the program has measured, which must stay below the peak for the
/// two figures to be comparable.
const SELF_RSS: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/resource.h>
int main(int argc, char **argv) {
    size_t n = (size_t)atol(argc > 1 ? argv[1] : "0") << 20;
    if (n) {
        volatile char *p = mmap(0, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) return 2;
        for (size_t i = 0; i < n; i += 4096) p[i] = 1;
        munmap((void *)p, n);
    }
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("%ld\n", ru.ru_maxrss);
    return 0;
}
"#;

fn self_rss() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap().keep();
        c_program(&dir, "self_rss", SELF_RSS, &["-O2"])
    })
}

/// Fails unless the command's stderr holds `needle`.
fn assert_said(out: &std::process::Output, needle: &str) {
    let err = text(&out.stderr);
    assert!(err.contains(needle), "no {needle:?} in: {err}");
}

/// What each run of a `compare --log` wrote, its header lines left out.
fn runs_output(log: &Path) -> Vec<String> {
    fs::read_to_string(log)
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with("==>"))
        .map(|l| l.trim().to_string())
        .collect()
}

/// `allocmux run --json - -- COMMAND`, which must succeed: its output and
/// the JSON report.
fn run_json(command: &[&str]) -> (std::process::Output, Value) {
    let out = ok(run(allocmux()
        .args(["run", "--json", "-", "--"])
        .args(command)));
    let doc = json_of(&out.stdout);
    (out, doc)
}

/// The program's self-measured peak (KiB) is the one `run` reports, within
/// a page or two when recorded (the JSON's bytes) and within the printed
/// precision when not, under every allocator. A program that maps
/// nothing peaks far below the CLI's own size, which Linux carried into
/// every program before.
#[test]
fn max_rss_is_the_programs_own() {
    let dir = tempfile::tempdir().unwrap();
    for allocator in ["system", "jemalloc", "mimalloc"] {
        for record in ["on", "off"] {
            for mib in ["0", "24"] {
                let (own_kib, reported_kib) = rss_of_run(dir.path(), allocator, record, mib);
                let what = format!(
                    "{allocator}, recording {record}, {mib} MiB: the program saw {own_kib} KiB, \
                     run says {reported_kib} KiB"
                );
                if mib == "0" {
                    assert!(reported_kib < 12.0 * 1024.0, "{what}");
                    continue;
                }
                let tolerance = if record == "on" { 8.0 } else { 0.06 * 1024.0 };
                assert!((reported_kib - own_kib as f64).abs() <= tolerance, "{what}");
            }
        }
    }
}

/// The program's own peak and `run`'s, in KiB.
fn rss_of_run(dir: &Path, allocator: &str, record: &str, mib: &str) -> (u64, f64) {
    let json = dir.join(format!("{allocator}-{record}-{mib}.json"));
    let mut cmd = allocmux();
    cmd.args(["run", "-a", allocator]);
    if record == "on" {
        cmd.arg("--json").arg(&json);
    } else {
        cmd.args(["--record", "off"]);
    }
    let out = ok(run(cmd.arg("--").arg(self_rss()).arg(mib)));
    let own_kib: u64 = text(&out.stdout).trim().parse().unwrap();
    if record == "on" {
        let doc = json_of(&fs::read(&json).unwrap());
        let bytes = doc["processes"][0]["max_rss_bytes"].as_u64().unwrap();
        return (own_kib, bytes as f64 / 1024.0);
    }
    // `max RSS 23.5 MiB`: the unrecorded run's summary line.
    let err = text(&out.stderr);
    let figure = err
        .split("max RSS ")
        .nth(1)
        .unwrap_or_else(|| panic!("no max RSS in {err}"));
    let mut words = figure.split_whitespace();
    let n: f64 = words.next().unwrap().parse().unwrap();
    let kib = match words.next().unwrap() {
        "KiB" => n,
        "MiB" => n * 1024.0,
        unit => panic!("unit {unit} in {err}"),
    };
    (own_kib, kib)
}

/// `compare`'s memory column is each allocator's own: a program that
/// touches 24 MiB peaks above that under each, and one that touches
/// nothing far below it (it had a floor of the CLI's size before).
#[test]
fn compare_memory_is_the_programs_own() {
    let out = ok(run(allocmux()
        .args(["compare", "-n", "6", "--warmup", "0", "--json", "-", "--"])
        .arg(self_rss())
        .arg("0")));
    let doc = json_of(&out.stdout);
    for a in doc["allocators"].as_array().unwrap() {
        let median = a["figures"]["max_rss_bytes"]["median"].as_f64().unwrap();
        assert!(
            median < 12.0 * 1048576.0,
            "{}: max RSS {median} for a program that allocates nothing",
            a["allocator"]
        );
    }
}

/// The program's exit status passes through when the summary cannot be
/// written: a closed stderr (a pipe to a program that has ended) and a
/// full one.
#[test]
fn exit_status_survives_an_unwritable_report() {
    // stderr into a pipe whose reader is gone.
    let mut child = allocmux()
        .args(["run", "--", "sh", "-c", "exit 5"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stderr.take());
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(5), "stderr closed");

    let full = fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    for args in [
        &["run", "--", "sh", "-c", "exit 5"][..],
        &["run", "--record", "off", "--", "sh", "-c", "exit 5"][..],
    ] {
        let out = allocmux()
            .args(args)
            .stderr(full.try_clone().unwrap())
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(5),
            "{args:?} with stderr on /dev/full"
        );
    }

    // A JSON report that cannot be written is said, and the status stands.
    let out = run(allocmux().args(["run", "--json", "/dev/full", "--", "sh", "-c", "exit 6"]));
    assert_eq!(out.status.code(), Some(6));
    let err = text(&out.stderr);
    assert!(
        err.contains("allocmux: the program ran, but"),
        "the failure is said: {err}"
    );
}

/// `run --json -`: stdout holds the JSON alone; the program's stdout goes
/// to stderr.
#[test]
fn run_json_to_stdout_keeps_the_programs_output_out() {
    let (out, doc) = run_json(&["sh", "-c", "echo from-the-program"]);
    assert_eq!(doc["exit_code"], 0, "{doc}");
    assert_said(&out, "from-the-program");
}

/// `compare --input FILE` feeds every run that file; `--input -` feeds
/// every run what stdin held; a file on stdin without `--input` is
/// refused, and a pipe is warned of.
#[test]
fn compare_feeds_each_run_its_input() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("lines.txt");
    fs::write(&input, "a\nb\nc\n").unwrap();
    let log = dir.path().join("cmp.log");
    // Each run appends what it read to the log: every run must see it all.
    ok(run(allocmux()
        .args([
            "compare",
            "-n",
            "6",
            "--warmup",
            "0",
            "-a",
            "system,mimalloc",
        ])
        .arg("--input")
        .arg(&input)
        .arg("--log")
        .arg(&log)
        .args(["--", "wc", "-l"])));
    // Six timing runs and two recorded ones (rounds 1 and 4) of each.
    let counts = runs_output(&log);
    assert_eq!(counts.len(), 16, "{counts:?}");
    assert!(counts.iter().all(|c| c == "3"), "{counts:?}");

    let log2 = dir.path().join("cmp2.log");
    ok(run(allocmux()
        .args(["compare", "-n", "6", "--warmup", "0", "-a", "system"])
        .args(["--input", "-", "--log"])
        .arg(&log2)
        .args(["--", "wc", "-l"])
        .stdin(fs::File::open(&input).unwrap())));
    let counts = runs_output(&log2);
    assert_eq!(counts.len(), 8, "{counts:?}");
    assert!(counts.iter().all(|c| c == "3"), "{counts:?}");

    let refused = allocmux()
        .args(["compare", "-n", "6", "--", "wc", "-l"])
        .stdin(fs::File::open(&input).unwrap())
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(1));
    assert_said(&refused, "pass it with --input FILE");

    let mut piped = allocmux()
        .args([
            "compare", "-n", "6", "--warmup", "0", "-a", "system", "--", "true",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(piped.stdin.take());
    let out = piped.wait_with_output().unwrap();
    assert!(out.status.success());
    assert_said(&out, "warning: stdin is a pipe");
}

/// `run --stacks` without `-o` says that the stacks it records are thrown
/// away; with `-o` it keeps them and says nothing of it.
#[test]
fn run_says_when_recorded_stacks_are_thrown_away() {
    let out = ok(run(
        allocmux().args(["run", "--stacks", "exact", "--", "true"])
    ));
    assert_said(&out, "call stacks are recorded but thrown away");
    let dir = tempfile::tempdir().unwrap();
    let out = ok(run(allocmux()
        .args(["run", "--stacks", "exact", "-o"])
        .arg(dir.path().join("kept.prof"))
        .args(["--", "true"])));
    assert!(!text(&out.stderr).contains("thrown away"));
}

/// A program that runs `sh -c 'kill -9 $$'` in a child that cannot make
/// threads: the child refuses itself the `clone` and `clone3` system calls
/// (seccomp, with `EPERM`) and `exec`s the shell, whose shim then starts
/// no writer thread. So the shell is killed before any periodic write on
/// any schedule, leaving its start-up profile alone. Exit status 0 when
/// the shell died of SIGKILL, else 1 with a FAIL line.
const KILLED_WITHOUT_WRITER: &str = r#"
#define _GNU_SOURCE
#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#ifndef SYS_clone3
#define SYS_clone3 435
#endif
int main(void) {
    pid_t c = fork();
    if (c < 0) { printf("FAIL killed_without_writer: fork\n"); return 1; }
    if (c == 0) {
        struct sock_filter filter[] = {
            BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
            BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_clone, 2, 0),
            BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_clone3, 1, 0),
            BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
            BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
        };
        struct sock_fprog prog = {sizeof filter / sizeof filter[0], filter};
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) ||
            prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog)) {
            dprintf(1, "FAIL killed_without_writer: seccomp\n");
            _exit(1);
        }
        execl("/bin/sh", "sh", "-c", "kill -9 $$", (char *)0);
        dprintf(1, "FAIL killed_without_writer: exec\n");
        _exit(1);
    }
    int st;
    while (waitpid(c, &st, 0) < 0)
        ;
    if (!WIFSIGNALED(st) || WTERMSIG(st) != SIGKILL) {
        printf("FAIL killed_without_writer: the shell's status is %d, not SIGKILL\n", st);
        return 1;
    }
    return 0;
}
"#;

/// When the shim's first periodic write comes (the flusher's interval,
/// `alloc-shim/src/flusher.rs`): a running profile that covers less has
/// no write but the start-up one.
const FIRST_PERIODIC_WRITE_NS: u64 = 500_000_000;

/// A process killed before the shim's first periodic write left only its
/// start-up profile: its figures are unknown, not zero. The report's rule,
/// on profiles of the three kinds (a start-up profile, a running one that
/// covers the first periodic write's time with no call, an exit profile);
/// then end to end, with a shell killed while its shim has no writer
/// thread, so that no periodic write can have come whatever the schedule.
#[test]
fn a_process_killed_before_its_first_write_is_unknown_not_zero() {
    let dir = tempfile::tempdir().unwrap();
    // Times in ns since boot, the TSC at 1 tick per ns.
    let section = |pid: u32, name: &str, state: &str, covered_ns: u64, calls: u64| {
        let (start, end) = (1_000_000_000, 1_000_000_000 + covered_ns);
        let counts = if calls == 0 {
            String::new()
        } else {
            format!(
                "calls malloc {calls}\ncalls free {calls}\nbytes_requested {}\n\
                 bytes_allocated {}\nbytes_freed {}\npeak_live_bytes 64\n",
                16 * calls,
                16 * calls,
                16 * calls
            )
        };
        format!(
            "process\npid {pid}\nppid 100\nargv {name}\nallocator system\nstate {state}\n\
             clock_start {start} {start}\nclock_end {end} {end}\n{counts}end\n"
        )
    };
    let prof = dir.path().join("synthetic.prof");
    fs::write(
        &prof,
        [
            "allocmux-profile 1\n".to_string(),
            section(100, "parent", "exited", 900_000_000, 5),
            section(101, "early", "running", 1_000_000, 0),
            section(102, "idle", "running", FIRST_PERIODIC_WRITE_NS, 0),
        ]
        .concat(),
    )
    .unwrap();
    let doc = json_of(&ok(run(allocmux().args(["report", "--json"]).arg(&prof))).stdout);
    let known = |name: &str| {
        doc["processes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["argv"][0] == name)
            .unwrap_or_else(|| panic!("no {name} in {doc}"))["figures_known"]
            .clone()
    };
    assert_eq!(known("early"), false, "{doc}");
    // Its zeros cover a periodic write's time: figures.
    assert_eq!(known("idle"), true, "{doc}");
    assert_eq!(known("parent"), true, "{doc}");
    let report = text(&ok(run(allocmux().arg("report").arg(&prof))).stdout);
    let row = |name: &str| -> &str {
        report
            .lines()
            .find(|l| l.contains(name))
            .unwrap_or_else(|| panic!("no {name} row in {report}"))
    };
    assert!(
        !row("early?").contains(" 0 "),
        "no zeros for what is unknown: {report}"
    );
    assert!(!row("idle*").contains('?'), "{report}");
    assert!(report.contains("what it allocated is unknown"), "{report}");

    // End to end: the killed shell's profile is its start-up one, as the
    // shim wrote it (running, no call), and the report reads it.
    let prof = dir.path().join("run.prof");
    let out = ok(run(allocmux()
        .args(["run", "-o"])
        .arg(&prof)
        .args(["--json", "-", "--"])
        .arg(killed_without_writer())));
    let doc = json_of(&out.stdout);
    let is_shell = |argv: &[String]| argv == ["sh", "-c", "kill -9 $$"];
    let profiles = allocmux_format::profile::parse(&fs::read_to_string(&prof).unwrap()).unwrap();
    let shell = profiles
        .iter()
        .find(|p| is_shell(&p.argv))
        .unwrap_or_else(|| panic!("no profile of the shell: {doc}"));
    assert_eq!(shell.state, allocmux_format::profile::State::Running);
    assert_eq!(shell.totals.total_calls(), 0, "{doc}");
    let procs = doc["processes"].as_array().unwrap();
    let json_argv =
        |p: &Value| -> Vec<String> { serde_json::from_value(p["argv"].clone()).unwrap() };
    let shell_json = procs
        .iter()
        .find(|p| is_shell(&json_argv(p)))
        .unwrap_or_else(|| panic!("no shell in {doc}"));
    // Unknown, unless writing the start-up profile itself took as long as
    // the interval of the periodic writes (a stalled machine): then its
    // zeros cover that time, as the idle process's above.
    let covered_ns = shell.clock_end.mono_ns - shell.clock_start.mono_ns;
    let unknown = covered_ns < FIRST_PERIODIC_WRITE_NS;
    assert_eq!(shell_json["figures_known"], !unknown, "{shell_json}");
    // The program that waited for it ended as always.
    let parent = procs
        .iter()
        .find(|p| p["pid"] != shell_json["pid"])
        .unwrap_or_else(|| panic!("no parent in {doc}"));
    assert_eq!(parent["figures_known"], true, "{parent}");
    if unknown {
        let err = text(&out.stderr);
        let row = err
            .lines()
            .find(|l| l.contains("sh?"))
            .unwrap_or_else(|| panic!("no sh? row in {err}"));
        assert!(!row.contains(" 0 "), "no zeros for what is unknown: {row}");
        assert!(err.contains("what it allocated is unknown"), "{err}");
    }
}

fn killed_without_writer() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap().keep();
        c_program(
            &dir,
            "killed_without_writer",
            KILLED_WITHOUT_WRITER,
            &["-O2"],
        )
    })
}

/// Figures scaled up from sampled stacks are marked as estimates (`≈`),
/// exact ones are not; `diff`'s legend says what its percentages are.
#[test]
fn sampled_figures_are_marked_as_estimates() {
    let dir = tempfile::tempdir().unwrap();
    let prof = |name: &str, stacks: &[&str]| {
        let path = dir.path().join(name);
        ok(run(allocmux()
            .arg("run")
            .args(stacks)
            .arg("-o")
            .arg(&path)
            .args([
                "--",
                "sh",
                "-c",
                "seq 1 30000 | sort -n > /dev/null",
            ])));
        path
    };
    let sampled = prof("s.prof", &["--stacks", "sample", "--sample-bytes", "1024"]);
    let exact = prof("e.prof", &["--stacks", "exact"]);
    // The heading and the lines of `report`'s section for `heading`.
    let section = |p: &Path, heading: &str| -> Vec<String> {
        let out = ok(run(allocmux().args(["report", "--top", "3"]).arg(p)));
        let out = text(&out.stdout);
        let lines: Vec<String> = out
            .lines()
            .skip_while(|l| !l.contains(&format!("top 3 stacks by {heading} ")))
            .take_while(|l| !l.trim().is_empty())
            .map(str::to_string)
            .collect();
        assert!(lines.len() >= 2, "no {heading} section in {out}");
        lines
    };
    let s = section(&sampled, "allocations");
    assert!(s[0].contains("(total ≈"), "{s:?}");
    assert!(
        s[0].contains("(95% interval "),
        "a sampled count has its interval: {s:?}"
    );
    assert!(s[1..].iter().all(|l| l.trim().starts_with('≈')), "{s:?}");
    let e = section(&exact, "allocations");
    assert!(!e.concat().contains('≈'), "exact counts are counts: {e:?}");
    // Allocator time is an estimate in every mode.
    let t = section(&exact, "time in the allocator");
    assert!(t[0].contains("(total ≈"), "{t:?}");

    // The JSON export says which values are estimates.
    let estimated = |p: &Path| -> Value {
        let out = ok(run(allocmux()
            .args(["export", "--format", "json", "-o", "-"])
            .arg(p)));
        json_of(&out.stdout)[0]["estimated"].clone()
    };
    assert_eq!(
        estimated(&sampled),
        serde_json::json!(["count", "bytes", "time", "peak", "leaked"])
    );
    assert_eq!(estimated(&exact), serde_json::json!(["time"]));

    let svg = dir.path().join("d.svg");
    ok(run(allocmux()
        .arg("diff")
        .arg(&exact)
        .arg(&sampled)
        .arg("-o")
        .arg(&svg)));
    let svg = fs::read_to_string(&svg).unwrap();
    assert!(svg.contains("as a share of the new total, not its own growth"));
}

/// The recorder's own memory is not in the allocator statistics reported
/// as the program's: `gcc -c` reads about the same glibc figures with
/// exact stacks (megabytes of tables) as with none.
#[test]
fn the_recorders_memory_is_not_the_programs_heap() {
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("x.c");
    fs::write(&source, "int main(void) { return 0; }\n").unwrap();
    let in_use = |stacks: &str| -> Vec<(String, u64)> {
        let json = dir.path().join(format!("{stacks}.json"));
        let prof = dir.path().join(format!("{stacks}.prof"));
        ok(run(allocmux()
            .args(["run", "--stacks", stacks, "-o"])
            .arg(&prof)
            .arg("--json")
            .arg(&json)
            .args(["--", "gcc", "-c"])
            .arg(&source)
            .arg("-o")
            .arg(dir.path().join("x.o"))));
        let doc = json_of(&fs::read(&json).unwrap());
        doc["processes"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|p| {
                let figure = p["allocator_stats"]["figures"]["in_use"].as_u64()?;
                Some((p["argv"][0].as_str()?.to_string(), figure))
            })
            .collect()
    };
    let off = in_use("off");
    let exact = in_use("exact");
    let driver = |v: &[(String, u64)]| {
        v.iter()
            .find(|(name, _)| name == "gcc")
            .unwrap_or_else(|| panic!("no gcc in {v:?}"))
            .1
    };
    let (off, exact) = (driver(&off), driver(&exact));
    assert!(
        exact <= off + off / 10 + (32 << 10),
        "glibc's in-use bytes of gcc: {off} without stacks, {exact} with exact stacks"
    );
}

/// A program that allocates about 40 MiB in blocks of 64 B to 1 KiB,
/// holds them, frees them all and exits: on its main thread (`main`) or
/// on a second one (`thread`), which lets the shim's writer thread read
/// glibc's statistics while it runs.
///
/// It holds its heap until the event the test checks, not for a time: a
/// reading of the allocator's statistics with at least 4/5 of its blocks'
/// bytes live, in the running profile the shim flushes to
/// `$ALLOCMUX_OUTPUT` (`%p` its pid). The shim promises one on any
/// schedule once the heap stops growing: a read is asked whenever the live
/// bytes reach 5/4 of the reading nearest the peak so far, so the last one
/// had more than 4/5 of the final heap. Meanwhile it mallocs and frees
/// small blocks, as a program that goes on working does: under jemalloc,
/// and glibc without a second thread, a thread of the program makes that
/// read inside one of its calls (the writer thread may not). Its blocks'
/// bytes are their usable sizes, as the shim counts live bytes. Gives up
/// after 120 s with a FAIL line and status 1.
///
/// It allocates in batches of 1,000 blocks with a 1 ms sleep between:
/// the shim spaces its reads by 1,000 times the shorter of the last two
/// (`STATS_DUTY` in `alloc-shim/src/flusher.rs`), and under glibc with a
/// second thread the writer thread's read waits for the arena's lock. On a
/// loaded machine a thread allocating without a pause is often preempted
/// holding it, which made two reads in a row take 25–100 ms, and held the
/// reading of the whole heap off for 25 s to over 100 s. A thread that
/// sleeps between short batches is seldom preempted inside a call, and
/// soon runs again when it is (the scheduler favours a thread that slept).
const HELD_THEN_FREED: &str = r#"
#define _GNU_SOURCE
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#define BLOCKS 80000
static void *blocks[BLOCKS];
static void *volatile sink;
static char profile[1 << 20];
static unsigned long long mono_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000ULL + ts.tv_nsec / 1000000;
}
/* Whether a line of the profile starting with `key` ("\nallocator_stats "
 * or "\nallocator_stats_at_peak ", followed by T_NS LIVE) has LIVE >=
 * `live`. */
static int has_live(const char *key, unsigned long long live) {
    for (char *line = strstr(profile, key); line; line = strstr(line + 1, key)) {
        unsigned long long t, bytes;
        if (sscanf(line + strlen(key), "%llu %llu", &t, &bytes) == 2 && bytes >= live)
            return 1;
    }
    return 0;
}
/* Whether the profile at `path` has a reading with `live` bytes live (the
 * shim replaces the file whole, so a read sees one write or another). */
static int has_reading(const char *path, unsigned long long live) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return 0;
    ssize_t n = read(fd, profile, sizeof profile - 1);
    close(fd);
    if (n <= 0) return 0;
    profile[n] = 0;
    return has_live("\nallocator_stats ", live) || has_live("\nallocator_stats_at_peak ", live);
}
static void *work(void *arg) {
    unsigned long long heap = 0;
    for (int i = 0; i < BLOCKS; i++) {
        blocks[i] = malloc(64 + (i * 37) % 961);
        if (!blocks[i]) exit(2);
        memset(blocks[i], 1, 64);
        heap += malloc_usable_size(blocks[i]);
        if (i % 1000 == 999) {
            struct timespec ts = {0, 1000 * 1000};
            nanosleep(&ts, NULL);
        }
    }
    const char *out = getenv("ALLOCMUX_OUTPUT");
    const char *p = out ? strstr(out, "%p") : NULL;
    if (!p) {
        printf("FAIL held_then_freed: ALLOCMUX_OUTPUT has no %%p\n");
        exit(1);
    }
    char path[4096];
    snprintf(path, sizeof path, "%.*s%d%s", (int)(p - out), out, (int)getpid(), p + 2);
    unsigned long long give_up = mono_ms() + 120000;
    while (!has_reading(path, heap / 5 * 4)) {
        if (mono_ms() > give_up) {
            printf("FAIL held_then_freed: no allocator reading with %llu bytes live "
                   "in the profile after 120 s\n", heap / 5 * 4);
            exit(1);
        }
        for (int j = 0; j < 1000; j++) {
            sink = malloc(16);
            free(sink);
        }
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    for (int i = 0; i < BLOCKS; i++) free(blocks[i]);
    return arg;
}
int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "thread")) {
        pthread_t t;
        if (pthread_create(&t, NULL, work, NULL)) return 3;
        pthread_join(t, NULL);
    } else {
        work(NULL);
    }
    return 0;
}
"#;

fn held_then_freed() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap().keep();
        c_program(
            &dir,
            "held_then_freed",
            HELD_THEN_FREED,
            &["-O2", "-pthread"],
        )
    })
}

/// A program that frees its heap before exit has its heap overhead
/// measured near its peak, not at exit with almost nothing live: the
/// allocator's statistics are read as the heap grows (by the writer
/// thread, or by a thread of the program where the writer thread may not
/// read them: jemalloc, glibc before the program has a second thread), and
/// the report keeps the exit reading's statistics line beside the ratio
/// from the reading with the most live bytes. mimalloc's figures give no
/// ratio, which the report says.
#[test]
fn heap_overhead_is_measured_near_the_peak() {
    let exe = held_then_freed().to_str().unwrap();
    // The six runs at once: each holds its heap until the shim has read it.
    let runs: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = ["system", "jemalloc", "mimalloc"]
            .into_iter()
            .flat_map(|backend| ["main", "thread"].map(|on| (backend, on)))
            .map(|(backend, on)| {
                s.spawn(move || {
                    let out =
                        ok(run(allocmux().args([
                            "run", "-a", backend, "--json", "-", "--", exe, on,
                        ])));
                    (backend, on, out)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (backend, on, out) in runs {
        let doc = json_of(&out.stdout);
        let p = &doc["processes"][0];
        let err = text(&out.stderr);
        let context = format!("{backend} {on}: {err}");
        let peak = p["peak_live_bytes"].as_u64().unwrap();
        assert!(peak >= 40 << 20, "{context}");
        // The exit reading: its statistics line, with almost nothing live.
        let latest = &p["allocator_stats"];
        assert!(
            latest["live_bytes"].as_u64().unwrap() < 1 << 20,
            "{context}"
        );
        let name = if backend == "system" {
            "glibc"
        } else {
            backend
        };
        assert!(err.contains(&format!("\n  {name}: ")), "{context}");
        let overhead = err
            .lines()
            .find(|l| l.starts_with("  heap overhead"))
            .unwrap_or_else(|| panic!("no overhead line: {context}"));
        // Read as the heap grew, near its peak.
        let nearest = &p["allocator_stats_at_peak"];
        assert!(
            nearest["live_bytes"].as_u64().unwrap() >= peak / 2,
            "{context}"
        );
        if backend == "mimalloc" {
            assert!(p["heap_overhead"].is_null(), "{context}");
            assert!(overhead.contains("not measured (mimalloc"), "{context}");
            continue;
        }
        let x = p["heap_overhead"].as_f64().unwrap();
        assert_eq!(nearest["overhead"].as_f64(), Some(x), "{context}");
        assert!((0.99..3.0).contains(&x), "{context}");
        assert!(
            overhead.starts_with(&format!("  heap overhead {x:.2}x near the peak: ")),
            "{context}"
        );
    }
}

/// A program that spawns each of its arguments with `posix_spawnp` and
/// waits for it.
const SPAWN: &str = r#"
#include <spawn.h>
#include <stdio.h>
#include <sys/wait.h>
extern char **environ;
int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        pid_t pid;
        char *args[] = {argv[i], 0};
        int r = posix_spawnp(&pid, argv[i], 0, 0, args, environ);
        if (r) { printf("posix_spawnp %s: %d\n", argv[i], r); return 1; }
        int st;
        waitpid(pid, &st, 0);
    }
    return 0;
}
"#;

/// A program the shim cannot reach (statically linked), started by a
/// profiled process, is named with the reason instead of vanishing: run by
/// bash (fork, then exec), by dash (vfork, then exec), by `posix_spawnp`,
/// and by `exec` in the main process itself.
#[test]
fn unprofilable_children_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let stat = static_binary(dir.path());
    let spawn = c_program(dir.path(), "spawn", SPAWN, &["-O2"]);
    let stat = stat.to_str().unwrap();
    let spawn = spawn.to_str().unwrap();
    let cases: [&[&str]; 4] = [
        &["bash", "-c", &format!("{stat}; true")],
        &["dash", "-c", &format!("{stat}; true")],
        &[spawn, stat, "true"],
        &["sh", "-c", &format!("exec {stat}")],
    ];
    for command in cases {
        let (out, doc) = run_json(command);
        let unprofiled = doc["unprofiled"].as_array().unwrap();
        assert_eq!(unprofiled.len(), 1, "{command:?}: {doc}");
        assert_eq!(unprofiled[0]["program"], stat);
        assert!(
            unprofiled[0]["reason"]
                .as_str()
                .unwrap()
                .contains("statically linked"),
            "{doc}"
        );
        assert_said(&out, &format!("not profiled: pid {}", unprofiled[0]["pid"]));
    }
    // A dynamically linked program started the same way is profiled, so
    // nothing is said.
    let (_, doc) = run_json(&["bash", "-c", "ls / > /dev/null; true"]);
    assert_eq!(doc["unprofiled"], serde_json::json!([]));
}

/// One `malloc(16)` and exit: under glibc's first 132 KiB arena, or
/// jemalloc's MiBs of metadata, a ratio would read in the thousands; the
/// report says the heap was too small to measure, in the text and the
/// JSON.
#[test]
fn a_tiny_heap_has_no_overhead_ratio() {
    let dir = tempfile::tempdir().unwrap();
    let exe = c_program(
        dir.path(),
        "one_malloc",
        "#include <stdlib.h>\nint main(void) { void *volatile p = malloc(16); (void)p; return 0; }\n",
        &["-O2"],
    );
    for backend in ["system", "jemalloc"] {
        let out = ok(run(allocmux()
            .args(["run", "-a", backend, "--json", "-", "--"])
            .arg(&exe)));
        let err = text(&out.stderr);
        let doc = json_of(&out.stdout);
        let p = &doc["processes"][0];
        assert_eq!(p["allocation_calls"], 1, "{backend}: {err}");
        assert!(p["heap_overhead"].is_null(), "{backend}: {doc}");
        let line = err
            .lines()
            .find(|l| l.starts_with("  heap overhead"))
            .unwrap_or_else(|| panic!("no overhead line under {backend}: {err}"));
        assert!(
            line.starts_with("  heap overhead: not measured: the heap peaked at "),
            "{backend}: {line}"
        );
    }
}

/// A program that allocates and then dies of a signal before its first
/// periodic write: `flame` has nothing to draw, and says that what it
/// allocated is unknown, not that it made no allocation; the program's
/// status stands.
#[test]
fn flame_of_a_crashed_program_says_unknown() {
    let dir = tempfile::tempdir().unwrap();
    let exe = c_program(
        dir.path(),
        "segv",
        "#include <stdlib.h>\n#include <string.h>\n\
         int main(void) {\n  for (int i = 0; i < 1000; i++) {\n\
         char *volatile p = malloc(100);\n    memset(p, 1, 100);\n    free(p);\n  }\n\
         *(volatile int *)0 = 1;\n  return 0;\n}\n",
        &["-O0"],
    );
    let svg = dir.path().join("s.svg");
    let out = run(allocmux()
        .arg("flame")
        .arg("-o")
        .arg(&svg)
        .arg("--")
        .arg(&exe));
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("signal 11 (SIGSEGV)"), "{err}");
    assert!(
        err.contains("nothing to draw: what ") && err.contains(" allocated is unknown, not none"),
        "{err}"
    );
    assert!(!err.contains("made no allocation"), "{err}");
    assert!(!svg.exists());
}

/// Temporary allocations, counted with exact stacks: each thread's loop of
/// `malloc` then `free` of the same block is one per iteration, whatever
/// the other thread does meanwhile (the definition is per thread); blocks
/// kept while others are allocated are not, nor is a block `realloc`
/// moves. Per process, in total and per stack, in the text, the JSON, the
/// top stacks and a folded export by `--weight temporary`; not counted
/// (null) with sampled stacks.
#[test]
fn temporary_allocations_are_counted_per_thread() {
    const SOURCE: &str = r#"
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
static void *volatile keep;
__attribute__((noinline)) void churn(int n) {
    for (int i = 0; i < n; i++) {
        char *p = malloc(64);
        memset(p, 1, 64);
        keep = p;
        free(p);
    }
}
__attribute__((noinline)) void kept(int n) {
    void **v = malloc(n * sizeof(void *));
    for (int i = 0; i < n; i++) v[i] = malloc(32);
    for (int i = 0; i < n; i++) free(v[i]);
    free(v);
}
__attribute__((noinline)) void grown(void) {
    char *p = malloc(16);
    for (int i = 1; i <= 10; i++) p = realloc(p, 4096 * i);
    keep = p;
}
static void *worker(void *arg) { churn(2000); return arg; }
int main(void) {
    pthread_t t;
    pthread_create(&t, 0, worker, 0);
    churn(1000);
    pthread_join(t, 0);
    kept(100);
    grown();
    return 0;
}
"#;
    let dir = tempfile::tempdir().unwrap();
    let exe = c_program(
        dir.path(),
        "temporaries",
        SOURCE,
        &["-O1", "-g", "-pthread"],
    );
    let prof = dir.path().join("t.prof");
    let out = ok(run(allocmux()
        .args(["run", "--stacks", "exact", "--json", "-", "-o"])
        .arg(&prof)
        .arg("--")
        .arg(&exe)));
    let doc = json_of(&out.stdout);
    let err = text(&out.stderr);
    assert_eq!(doc["processes"][0]["temporary_allocations"], 3000, "{err}");
    assert_eq!(doc["total"]["temporary_allocations"], 3000, "{err}");
    assert!(
        err.contains("  temporary: 3,000 of "),
        "the summary says it: {err}"
    );
    // By stack: all of them from churn, none from kept or grown.
    let folded = text(
        &ok(run(allocmux().arg("export").arg(&prof).args([
            "--format",
            "folded",
            "--weight",
            "temporary",
            "-o",
            "-",
        ])))
        .stdout,
    );
    let by = |name: &str| -> u64 {
        folded
            .lines()
            .filter(|l| l.contains(name))
            .map(|l| l.rsplit_once(' ').unwrap().1.parse::<u64>().unwrap())
            .sum()
    };
    assert_eq!(by(";churn"), 3000, "{folded}");
    assert_eq!(by(";kept") + by(";grown"), 0, "{folded}");
    let report = text(&ok(run(allocmux().args(["report", "--top", "1"]).arg(&prof))).stdout);
    assert!(
        report.contains("top 1 stack by temporary allocations (total 3,000 allocations)"),
        "{report}"
    );
    // The advice names the stack with the most (the worker's loop), with
    // the figure, in the text and JSON.
    assert!(
        report.contains("what to change: 2,000 allocations (")
            && report.contains(
                "are temporary ones from churn (temporaries.c:8) ← worker (temporaries.c:"
            ),
        "{report}"
    );
    let doc = json_of(&ok(run(allocmux().args(["report", "--json"]).arg(&prof))).stdout);
    assert_eq!(doc["advice"]["weight"], "temporary", "{doc}");
    assert_eq!(doc["advice"]["value"], 2000, "{doc}");
    // A limit on them, the way a CI job puts one: over it, status 23 and
    // the stack behind it; at it, status 0.
    let out = run(allocmux()
        .args(["run", "--limit", "temporary=2999", "--"])
        .arg(&exe));
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(23), "{err}");
    assert!(
        err.contains("allocmux: limit exceeded: temporary 3,000 > 2,999")
            && err.contains("churn (temporaries.c:8)"),
        "{err}"
    );
    let out = ok(run(allocmux()
        .args(["run", "--limit", "temporary=3000", "--"])
        .arg(&exe)));
    assert!(
        text(&out.stderr).contains("allocmux: within limits: temporary 3,000 ≤ 3,000"),
        "{}",
        text(&out.stderr)
    );
    // Sampled stacks do not see every allocation: not counted.
    let out = ok(run(allocmux()
        .args(["run", "--stacks", "sample", "--json", "-", "--"])
        .arg(&exe)));
    let doc = json_of(&out.stdout);
    assert!(
        doc["processes"][0]["temporary_allocations"].is_null(),
        "{doc}"
    );
    assert!(!text(&out.stderr).contains("temporary:"));
}

/// Lifetimes by decade, on a C fixture, asserting only what holds on any
/// schedule: every freed block is counted once, in some decade; a block
/// held across a 300 ms sleep lands at 100 ms or more (a lifetime has a
/// floor the sleep sets, not a ceiling: preemption only lengthens it); a
/// block never freed is in no decade but counted as never freed.
#[test]
fn lifetimes_are_counted_by_decade_on_any_schedule() {
    const SOURCE: &str = r#"
#include <stdlib.h>
#include <unistd.h>
static void *volatile keep;
__attribute__((noinline)) void brief(int n) {
    for (int i = 0; i < n; i++) { keep = malloc(40); free(keep); }
}
__attribute__((noinline)) void *held(void) { return malloc(56); }
__attribute__((noinline)) void *forever(void) { return malloc(72); }
int main(void) {
    void *h[5];
    for (int i = 0; i < 5; i++) h[i] = held();
    brief(2000);
    keep = forever();
    usleep(300 * 1000);
    for (int i = 0; i < 5; i++) free(h[i]);
    return 0;
}
"#;
    let dir = tempfile::tempdir().unwrap();
    let exe = c_program(dir.path(), "lifetimes", SOURCE, &["-O1", "-g"]);
    let prof = dir.path().join("l.prof");
    let out = ok(run(allocmux()
        .args(["run", "--stacks", "exact", "-o"])
        .arg(&prof)
        .arg("--")
        .arg(&exe)));
    assert!(
        text(&out.stderr).contains("  lifetimes: "),
        "the summary has a line: {}",
        text(&out.stderr)
    );
    let stacks = json_of(
        &ok(run(allocmux()
            .arg("export")
            .arg(&prof)
            .args(["--format", "json", "-o", "-"])))
        .stdout,
    );
    let of = |name: &str| -> &serde_json::Value {
        let s = stacks
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["frames"][0]["function"] == name)
            .unwrap_or_else(|| panic!("no stack from {name}: {stacks}"));
        &s["lifetimes"]
    };
    let freed = |l: &serde_json::Value, from: usize| -> u64 {
        l["decades"].as_array().unwrap()[from..]
            .iter()
            .map(|d| d["freed"].as_u64().unwrap())
            .sum()
    };
    let brief = of("brief");
    assert_eq!(brief["freed"], 2000, "{brief}");
    assert_eq!(freed(brief, 0), 2000, "{brief}");
    assert_eq!(brief["never_freed"], 0, "{brief}");
    let held = of("held");
    assert_eq!(held["freed"], 5, "{held}");
    // 300 ms or more: the decades from 100 ms on (the seventh and after).
    assert_eq!(freed(held, 6), 5, "{held}");
    assert!(held["mean_ns"].as_f64().unwrap() >= 3e8, "{held}");
    assert_eq!(held["short_lived"], 0, "{held}");
    let forever = of("forever");
    assert_eq!(forever["freed"], 0, "{forever}");
    assert_eq!(forever["never_freed"], 1, "{forever}");
    assert!(forever["mean_ns"].is_null(), "{forever}");
    // The decades' bounds, as documented: 1 µs to 10 s, then none.
    let bounds: Vec<serde_json::Value> = brief["decades"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["below_ns"].clone())
        .collect();
    assert_eq!(bounds.len(), 9);
    assert_eq!(bounds[0], 1000);
    assert_eq!(bounds[7], 10_000_000_000u64);
    assert!(bounds[8].is_null());
    // The report's JSON has the process's and the total's.
    let doc = json_of(&ok(run(allocmux().args(["report", "--json"]).arg(&prof))).stdout);
    let total = &doc["total"]["lifetimes"];
    assert!(total["freed"].as_u64().unwrap() >= 2005, "{total}");
    assert_eq!(total, &doc["processes"][0]["lifetimes"]);
    // Sampled stacks weigh the sampled blocks' lifetimes: estimates,
    // marked so in the summary.
    let out = ok(run(allocmux()
        .args(["run", "--stacks", "sample", "--sample-bytes", "64", "--"])
        .arg(&exe)));
    assert!(
        text(&out.stderr).contains("  lifetimes: ≈"),
        "{}",
        text(&out.stderr)
    );
}

/// Temporary allocations in a real interpreter: each `bytearray(1000)`
/// made and dropped as a statement mallocs the object, then its buffer,
/// and frees the buffer first: one temporary allocation per iteration
/// (its object, freed next, follows another free). The count of a run of
/// 3,000 iterations less that of a run of none is 3,000, give or take
/// the interpreter's own few (under `PYTHONHASHSEED=0` they repeat).
#[test]
fn python_temporaries_are_one_per_dropped_buffer() {
    if !Path::new("/usr/bin/python3").exists() {
        assert!(std::env::var_os("CI").is_none(), "CI must have python3");
        eprintln!("skipping: no /usr/bin/python3");
        return;
    }
    let temporaries = |n: u32| -> u64 {
        let out = ok(run(allocmux()
            .args(["run", "--stacks", "exact", "--json", "-", "--"])
            .args(["/usr/bin/python3", "-c"])
            .arg(format!("for i in range({n}):\n    bytearray(1000)\n"))
            .env("PYTHONMALLOC", "malloc")
            .env("PYTHONHASHSEED", "0")));
        json_of(&out.stdout)["total"]["temporary_allocations"]
            .as_u64()
            .unwrap()
    };
    let (none, some) = (temporaries(0), temporaries(3000));
    let added = some.saturating_sub(none);
    assert!((2990..=3010).contains(&added), "{none} then {some}");
}

/// With no temporaries to speak of, the advice names the largest leak:
/// 32 blocks of 64 KiB (2 MiB) kept to the end from one function, with
/// its figure; the runtimes' own start-up blocks (stdio's buffer) are left
/// out by the default suppressions, as `report --leaks` leaves them out.
#[test]
fn the_advice_names_the_largest_leak() {
    const SOURCE: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
static void *kept[32];
__attribute__((noinline)) void leak_big(void) {
    for (int i = 0; i < 32; i++) {
        kept[i] = malloc(65536);
        memset(kept[i], 1, 65536);
    }
}
int main(void) {
    leak_big();
    printf("%p\n", kept[0]);
    return 0;
}
"#;
    let dir = tempfile::tempdir().unwrap();
    let exe = c_program(dir.path(), "leaky", SOURCE, &["-O1", "-g"]);
    let prof = dir.path().join("l.prof");
    ok(run(allocmux()
        .args(["run", "--stacks", "exact", "-o"])
        .arg(&prof)
        .arg("--")
        .arg(&exe)));
    let report = text(&ok(run(allocmux().args(["report", "--top", "1"]).arg(&prof))).stdout);
    assert!(
        report.contains(
            "what to change: the largest leak is 2.0 MiB in 32 blocks still live at exit, \
             from leak_big (leaky.c:"
        ),
        "{report}"
    );
    let doc = json_of(&ok(run(allocmux().args(["report", "--json"]).arg(&prof))).stdout);
    assert_eq!(doc["advice"]["weight"], "leaked", "{doc}");
    assert_eq!(doc["advice"]["value"], 32 * 65536, "{doc}");
}
