//! OTLP pushes into a real OpenTelemetry Collector: the one
//! `scripts/otelcol/` builds (the core OTLP receiver, the contrib file
//! exporter writing each request it receives as one JSON line), started
//! here on a free port. Real programs run under `allocmux run --otlp` (a C
//! fixture with known sampled stacks, python3) and `allocmux preload
//! --otlp` (redis-server under redis-benchmark), and the test reads what
//! the Collector received: the resource, the sample types, totals that
//! agree with the process's own profile, stacks whose leaf is the
//! fixture's allocating function. Then the Collector stopped mid-run and
//! started again (the program unaffected, nothing lost), and a Collector
//! that never answers (the program unaffected, its end delayed by the
//! exit push's limit at most).
//!
//! The Collector is `ALLOCMUX_OTELCOL`, else `target/otelcol/allocmux-otelcol`,
//! else built there by `scripts/otelcol/build.sh` (Go 1.26 or later and
//! the module proxy; minutes the first time). Without one the tests skip
//! with a message, except under CI, which builds it (`.ci/run`).

use std::io::Read;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common;
use common::*;

/// The Collector binary, built if need be; `None` (a skip) outside CI
/// when it cannot be had.
fn collector_binary() -> Option<PathBuf> {
    static BIN: OnceLock<Option<PathBuf>> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Some(p) = std::env::var_os("ALLOCMUX_OTELCOL") {
            return Some(PathBuf::from(p));
        }
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        let bin = root.join("target/otelcol/allocmux-otelcol");
        if bin.exists() {
            return Some(bin);
        }
        let built = Command::new("bash")
            .arg(root.join("scripts/otelcol/build.sh"))
            .arg(&bin)
            .output();
        match built {
            Ok(o) if o.status.success() => Some(bin),
            Ok(o) => {
                skip_unless_ci(&format!(
                    "scripts/otelcol/build.sh failed: {}",
                    text(&o.stderr)
                ));
                None
            }
            Err(e) => {
                skip_unless_ci(&format!("cannot run scripts/otelcol/build.sh: {e}"));
                None
            }
        }
    })
    .clone()
}

fn skip_unless_ci(why: &str) {
    assert!(
        std::env::var_os("CI").is_none(),
        "CI must run the OpenTelemetry Collector tests: {why}"
    );
    eprintln!("skipping the OpenTelemetry Collector tests: {why}");
}

/// A free TCP port on 127.0.0.1 (bound, then released for the Collector).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A running Collector, its port, and the file its exporter writes.
struct Collector {
    child: Option<Child>,
    port: u16,
    out: PathBuf,
    log: PathBuf,
}

impl Collector {
    /// Starts the Collector on `port` (0: a free one), writing what it
    /// receives to `out`; waits until it accepts connections.
    fn start(bin: &Path, port: u16, out: &Path) -> Collector {
        let port = if port == 0 { free_port() } else { port };
        let config = Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .unwrap()
            .join("scripts/otelcol/config.yaml");
        let log = out.with_extension("log");
        let child = Command::new(bin)
            .arg(format!("--config={}", config.display()))
            .env("OTELCOL_HTTP_PORT", port.to_string())
            .env("OTELCOL_PROFILES_OUT", out)
            .env("OTELCOL_DEBUG_VERBOSITY", "basic")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("the Collector starts");
        let c = Collector {
            child: Some(child),
            port,
            out: out.to_path_buf(),
            log,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "the Collector did not listen within 60 s:\n{}",
                c.log_text()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        c
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Stops it (SIGTERM, then waits for it to flush and exit).
    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SAFETY: signals a child of this process.
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
            let _ = child.wait();
        }
    }

    /// The requests received so far, as the file exporter wrote them: its
    /// whole lines (one being written is not yet one).
    fn requests(&self) -> Vec<Push> {
        let text = std::fs::read_to_string(&self.out).unwrap_or_default();
        let whole = text.rfind('\n').map_or("", |end| &text[..end]);
        whole
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| Push::of(&serde_json::from_str(l).expect("a JSON line")))
            .collect()
    }

    /// Waits until `enough` holds of the requests so far (at most 60 s).
    fn wait_for(&self, what: &str, enough: impl Fn(&[Push]) -> bool) -> Vec<Push> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let r = self.requests();
            if enough(&r) {
                return r;
            }
            assert!(
                Instant::now() < deadline,
                "{what}: not received within 60 s; received {r:#?}\n{}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        self.stop();
    }
}

/// One push as the Collector received it: its resource and, per sample
/// type, the stacks (leaf first: mapping file and address) and values.
#[derive(Debug, Clone)]
struct Push {
    resource: Vec<(String, String)>,
    /// Per profile: its sample type `name/unit` and its samples.
    profiles: Vec<(String, Vec<Sample>)>,
}

#[derive(Debug, Clone)]
struct Sample {
    /// `(mapping file, address)`, leaf first.
    frames: Vec<(String, u64)>,
    value: i64,
}

impl Push {
    /// Reads one line of the file exporter (OTLP/JSON, strings by index
    /// into the dictionary's table).
    fn of(doc: &Value) -> Push {
        let dict = &doc["dictionary"];
        let strings: Vec<String> = dict["stringTable"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|s| s.as_str().unwrap_or("").to_string())
                    .collect()
            })
            .unwrap_or_default();
        let string = |v: &Value| {
            v.as_u64()
                .and_then(|i| strings.get(i as usize).cloned())
                .unwrap_or_default()
        };
        let num = |v: &Value| -> i64 {
            v.as_i64()
                .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
                .unwrap_or(0)
        };
        let table = |name: &str| dict[name].as_array().cloned().unwrap_or_default();
        let (stacks, locations, mappings) = (
            table("stackTable"),
            table("locationTable"),
            table("mappingTable"),
        );
        let mut push = Push {
            resource: Vec::new(),
            profiles: Vec::new(),
        };
        for rp in doc["resourceProfiles"].as_array().unwrap() {
            for a in rp["resource"]["attributes"]
                .as_array()
                .into_iter()
                .flatten()
            {
                let key = a["key"]
                    .as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| string(&a["keyStrindex"]));
                let v = &a["value"];
                let value = if let Some(s) = v["stringValue"].as_str() {
                    s.to_string()
                } else if !v["stringValueStrindex"].is_null() {
                    string(&v["stringValueStrindex"])
                } else {
                    num(&v["intValue"]).to_string()
                };
                push.resource.push((key, value));
            }
            for sp in rp["scopeProfiles"].as_array().into_iter().flatten() {
                for p in sp["profiles"].as_array().into_iter().flatten() {
                    let ty = format!(
                        "{}/{}",
                        string(&p["sampleType"]["typeStrindex"]),
                        string(&p["sampleType"]["unitStrindex"])
                    );
                    let samples = p["samples"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(|s| {
                            let stack = &stacks[s["stackIndex"].as_u64().unwrap_or(0) as usize];
                            let frames = stack["locationIndices"]
                                .as_array()
                                .into_iter()
                                .flatten()
                                .map(|i| {
                                    let l = &locations[i.as_u64().unwrap() as usize];
                                    let m =
                                        &mappings[l["mappingIndex"].as_u64().unwrap_or(0) as usize];
                                    (string(&m["filenameStrindex"]), num(&l["address"]) as u64)
                                })
                                .collect();
                            let value = s["values"].as_array().into_iter().flatten().map(num).sum();
                            Sample { frames, value }
                        })
                        .collect();
                    push.profiles.push((ty, samples));
                }
            }
        }
        push
    }

    fn attribute(&self, key: &str) -> Option<&str> {
        self.resource
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// The sum of the values of the sample type `ty` (`alloc_space/bytes`).
    fn total(&self, ty: &str) -> i64 {
        self.profiles
            .iter()
            .filter(|(t, _)| t == ty)
            .flat_map(|(_, s)| s.iter().map(|s| s.value))
            .sum()
    }

    fn sample_types(&self) -> Vec<String> {
        self.profiles.iter().map(|(t, _)| t.clone()).collect()
    }
}

/// Whether the pushes of `pid` among `pushes` add up to `bytes` of
/// allocations, within 1% (the exit push comes before the exit profile,
/// which may add the C runtime's last few blocks).
fn within_1_percent(pushes: &[Push], pid: u32, bytes: i64) -> bool {
    let pushed: i64 = of_pid(pushes, pid)
        .iter()
        .map(|p| p.total("alloc_space/bytes"))
        .sum();
    (pushed - bytes).abs() * 100 <= bytes
}

/// The pushes of the process `pid` among `pushes`.
fn of_pid(pushes: &[Push], pid: u32) -> Vec<Push> {
    pushes
        .iter()
        .filter(|p| p.attribute("process.pid") == Some(&pid.to_string()))
        .cloned()
        .collect()
}

/// Allocates 64 KiB blocks from `grow` for about `argv[1]` tenths of a
/// second (a few each tenth, half of them kept), so that pushes a second
/// apart each carry some; non-PIE so that its addresses are the file's.
const FIXTURE: &str = r#"
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <stdio.h>
void *kept[4096];
int nkept;
__attribute__((noinline)) void *grow(size_t n) {
    void *p = malloc(n);
    memset(p, 1, n);
    __asm__ volatile("" : : "r"(p) : "memory");
    return p;
}
int main(int argc, char **argv) {
    int tenths = argc > 1 ? atoi(argv[1]) : 20;
    for (int t = 0; t < tenths; t++) {
        for (int i = 0; i < 16; i++) {
            void *p = grow(64 << 10);
            if (i % 2 && nkept < 4096) kept[nkept++] = p; else free(p);
        }
        usleep(100 * 1000);
    }
    printf("done %d\n", nkept);
    return 0;
}
"#;

fn fixture(dir: &Path) -> PathBuf {
    c_program(
        dir,
        "otlp_fixture",
        FIXTURE,
        &["-O1", "-g", "-no-pie", "-fno-pie"],
    )
}

/// `allocmux run --otlp URL --otlp-interval 1 -o PROFILE -- CMD...`,
/// sampling every 64 KiB, with the resource named; its output.
fn run_pushing(url: &str, prof: &Path, cmd: &[&str]) -> std::process::Output {
    run(allocmux()
        .args([
            "run",
            "--otlp",
            url,
            "--otlp-interval",
            "1",
            "--sample-bytes",
            "65536",
            "-o",
        ])
        .arg(prof)
        .arg("--")
        .args(cmd)
        .env("OTEL_SERVICE_NAME", "fixture-service")
        .env(
            "OTEL_RESOURCE_ATTRIBUTES",
            "deployment.environment=test,team=mem%20ory",
        ))
}

/// The pid and the sum of the stacks' estimated bytes (and live bytes) of
/// the one process in `prof`.
fn profile_figures(prof: &Path) -> (u32, i64, i64) {
    let p = allocmux_format::profile::parse(&std::fs::read_to_string(prof).unwrap())
        .unwrap()
        .remove(0);
    let bytes = p.stacks.stacks.iter().map(|s| s.counts.bytes as i64).sum();
    let live = p
        .stacks
        .stacks
        .iter()
        .map(|s| s.counts.live_bytes as i64)
        .sum();
    (p.pid, bytes, live)
}

/// The function at `addr` of the non-PIE `exe` (addr2line).
fn function_at(exe: &Path, addr: u64) -> String {
    let out = Command::new("addr2line")
        .args(["-f", "-e"])
        .arg(exe)
        .arg(format!("{addr:#x}"))
        .output()
        .expect("addr2line runs");
    text(&out.stdout).lines().next().unwrap_or("").to_string()
}

#[test]
fn a_c_program_s_pushes_reach_the_collector() {
    let Some(bin) = collector_binary() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let exe = fixture(dir.path());
    let c = Collector::start(&bin, 0, &dir.path().join("received.jsonl"));
    let prof = dir.path().join("p.prof");
    let out = ok(run_pushing(&c.url(), &prof, &[exe.to_str().unwrap(), "25"]));
    assert!(
        text(&out.stdout).starts_with("done "),
        "the program's output is its own"
    );
    let (pid, bytes, live) = profile_figures(&prof);
    // Periodic pushes (a second apart over 2.5 s) and the one at exit,
    // which the file exporter may write a moment after the program ends.
    let pushes = of_pid(
        &c.wait_for("the pushes", |r| {
            r.len() >= 3 && within_1_percent(r, pid, bytes)
        }),
        pid,
    );
    assert!(pushes.len() >= 3, "{pushes:#?}");
    let first = &pushes[0];
    assert_eq!(first.attribute("service.name"), Some("fixture-service"));
    assert_eq!(first.attribute("deployment.environment"), Some("test"));
    assert_eq!(first.attribute("team"), Some("mem ory"), "percent-decoded");
    assert_eq!(
        first.attribute("process.executable.name"),
        Some("otlp_fixture")
    );
    assert_eq!(
        first.attribute("process.executable.path"),
        Some(exe.to_str().unwrap())
    );
    assert_eq!(first.attribute("allocmux.allocator"), Some("system"));
    assert!(first.attribute("host.name").is_some_and(|h| !h.is_empty()));
    assert_eq!(
        first.sample_types(),
        [
            "alloc_objects/count",
            "alloc_space/bytes",
            "inuse_objects/count",
            "inuse_space/bytes"
        ]
    );
    // Each push is its interval's allocations: together, the process's.
    // The exit push comes before the exit profile, which may add the C
    // runtime's last few blocks: within 1%.
    let pushed: i64 = pushes.iter().map(|p| p.total("alloc_space/bytes")).sum();
    assert!(
        (pushed - bytes).abs() * 100 <= bytes,
        "pushed {pushed} bytes, the profile has {bytes}"
    );
    // The live heap is a reading, not a delta: the last push's is the
    // profile's at exit.
    let last_live = pushes.last().unwrap().total("inuse_space/bytes");
    assert!(
        (last_live - live).abs() * 100 <= live.max(1),
        "live {last_live} pushed, {live} in the profile"
    );
    // The stacks: the heaviest's leaf is `grow`, in the fixture.
    let heaviest = pushes
        .iter()
        .flat_map(|p| p.profiles.iter().filter(|(t, _)| t == "alloc_space/bytes"))
        .flat_map(|(_, s)| s.iter())
        .max_by_key(|s| s.value)
        .expect("a sample");
    let (file, leaf) = &heaviest.frames[0];
    assert_eq!(file, exe.to_str().unwrap(), "{heaviest:?}");
    assert_eq!(function_at(&exe, *leaf), "grow", "{heaviest:?}");
}

#[test]
fn python3_pushes_reach_the_collector() {
    let Some(bin) = collector_binary() else {
        return;
    };
    if !Path::new("/usr/bin/python3").exists() {
        assert!(std::env::var_os("CI").is_none(), "CI must have python3");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let c = Collector::start(&bin, 0, &dir.path().join("received.jsonl"));
    let prof = dir.path().join("p.prof");
    let out = ok(run_pushing(
        &c.url(),
        &prof,
        &[
            "/usr/bin/python3",
            "-c",
            "import time\nkeep = []\nfor i in range(15):\n    keep.append(bytearray(1 << 20))\n    time.sleep(0.1)\nprint('ok')",
        ],
    ));
    assert_eq!(text(&out.stdout), "ok\n");
    let (pid, bytes, _) = profile_figures(&prof);
    let pushes = of_pid(
        &c.wait_for("python3's pushes", |r| {
            r.len() >= 2 && within_1_percent(r, pid, bytes)
        }),
        pid,
    );
    assert!(pushes.len() >= 2, "{pushes:#?}");
    assert_eq!(
        pushes[0]
            .attribute("process.executable.name")
            .map(|n| n.starts_with("python3")),
        Some(true)
    );
    let pushed: i64 = pushes.iter().map(|p| p.total("alloc_space/bytes")).sum();
    assert!(
        pushed >= 15 << 20,
        "15 MiB of bytearrays at least: {pushed}"
    );
    assert!(
        (pushed - bytes).abs() * 100 <= bytes,
        "pushed {pushed}, profile {bytes}"
    );
}

#[test]
fn redis_server_under_redis_benchmark_pushes() {
    let Some(bin) = collector_binary() else {
        return;
    };
    let (server, benchmark) = (
        Path::new("/usr/bin/redis-server"),
        Path::new("/usr/bin/redis-benchmark"),
    );
    if !server.exists() || !benchmark.exists() {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must have redis-server and redis-benchmark"
        );
        eprintln!("skipping: no redis-server or redis-benchmark");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let c = Collector::start(&bin, 0, &dir.path().join("received.jsonl"));
    let vars = ok(run(allocmux().args([
        "preload",
        "--otlp",
        &c.url(),
        "--otlp-interval",
        "1",
    ])));
    let port = free_port();
    let mut redis = Command::new(server);
    for line in text(&vars.stdout).lines() {
        let (k, v) = line.split_once('=').unwrap();
        redis.env(k, v);
    }
    let mut redis = redis
        .args([
            "--port",
            &port.to_string(),
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .env("OTEL_SERVICE_NAME", "redis")
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "redis-server did not listen");
        std::thread::sleep(Duration::from_millis(50));
    }
    ok(run(Command::new(benchmark).args([
        "-p",
        &port.to_string(),
        "-n",
        "20000",
        "-d",
        "1000",
        "-t",
        "set,get,lpush",
        "-q",
    ])));
    // The benchmark's keys stay live in the server: a push after it shows
    // allocations and a live heap (pushes come a second apart).
    let is_redis = |p: &Push| p.attribute("service.name") == Some("redis");
    let pushes = c.wait_for("redis-server's pushes with its live heap", |r| {
        r.iter().any(|p| {
            is_redis(p) && p.total("alloc_space/bytes") > 0 && p.total("inuse_space/bytes") > 0
        })
    });
    // SAFETY: signals a child of this process.
    unsafe { libc::kill(redis.id() as i32, libc::SIGTERM) };
    assert!(redis.wait().unwrap().success());
    let redis_pushes: Vec<&Push> = pushes.iter().filter(|p| is_redis(p)).collect();
    // The executable as the kernel names it (Debian's redis-server is a
    // link to redis-check-rdb).
    let real = std::fs::canonicalize(server).unwrap();
    assert_eq!(
        redis_pushes[0].attribute("process.executable.path"),
        real.to_str()
    );
}

/// A process that forks: the child pushes its own profile under its own
/// pid, from its own start (none of its parent's allocations before the
/// fork), and the parent goes on pushing its own.
#[test]
fn a_forked_child_pushes_its_own_profile() {
    let Some(bin) = collector_binary() else {
        return;
    };
    const FORKING: &str = r#"
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>
__attribute__((noinline)) void *grow(size_t n) {
    void *p = malloc(n);
    memset(p, 1, n);
    __asm__ volatile("" : : "r"(p) : "memory");
    return p;
}
int main(void) {
    for (int i = 0; i < 64; i++) free(grow(1 << 20)); /* 64 MiB before the fork */
    pid_t child = fork();
    for (int t = 0; t < 15; t++) {
        for (int i = 0; i < 4; i++) free(grow(64 << 10)); /* 256 KiB a tenth */
        usleep(100 * 1000);
    }
    if (child == 0) _exit(0);
    waitpid(child, 0, 0);
    return 0;
}
"#;
    let dir = tempfile::tempdir().unwrap();
    let exe = c_program(dir.path(), "forking", FORKING, &["-O1", "-g"]);
    let c = Collector::start(&bin, 0, &dir.path().join("received.jsonl"));
    let prof = dir.path().join("p.prof");
    ok(run_pushing(&c.url(), &prof, &[exe.to_str().unwrap()]));
    let pushes = c.wait_for("two processes' pushes", |r| {
        let mut pids: Vec<&str> = r
            .iter()
            .filter_map(|p| p.attribute("process.pid"))
            .collect();
        pids.sort_unstable();
        pids.dedup();
        pids.len() >= 2
    });
    let mut by_pid: std::collections::BTreeMap<String, i64> = Default::default();
    for p in &pushes {
        *by_pid
            .entry(p.attribute("process.pid").unwrap().to_string())
            .or_default() += p.total("alloc_space/bytes");
    }
    assert_eq!(by_pid.len(), 2, "{by_pid:?}");
    let (small, large) = {
        let mut v: Vec<i64> = by_pid.values().copied().collect();
        v.sort_unstable();
        (v[0], v[1])
    };
    // The parent's include the 64 MiB before the fork; the child's are
    // its 3.75 MiB alone (sampled every 64 KiB: an estimate, well under 64).
    assert!(large >= 60 << 20, "{by_pid:?}");
    assert!(small > 0 && small < 20 << 20, "{by_pid:?}");
}

/// The Collector stopped after the first push and started again on the
/// same port: the program runs on unaffected, says once that it cannot
/// push and once that it can again, and the pushes after the gap cover
/// the missed intervals: together every byte of the profile.
#[test]
fn a_collector_down_for_a_while_loses_nothing() {
    let Some(bin) = collector_binary() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let exe = fixture(dir.path());
    let mut c = Collector::start(&bin, 0, &dir.path().join("before.jsonl"));
    let prof = dir.path().join("p.prof");
    let url = c.url();
    let port = c.port;
    let program = {
        let (exe, prof, url) = (exe.clone(), prof.clone(), url.clone());
        std::thread::spawn(move || run_pushing(&url, &prof, &[exe.to_str().unwrap(), "70"]))
    };
    c.wait_for("the first push", |r| !r.is_empty());
    c.stop();
    let before = c.requests();
    // Long enough for a push or two to fail, however the flusher is
    // scheduled (they are due a second apart).
    std::thread::sleep(Duration::from_millis(2500));
    let after = Collector::start(&bin, port, &dir.path().join("after.jsonl"));
    let out = ok(program.join().unwrap());
    assert!(text(&out.stdout).starts_with("done "));
    let err = text(&out.stderr);
    assert_eq!(
        err.matches("cannot push to the OpenTelemetry Collector")
            .count(),
        1,
        "{err}"
    );
    assert_eq!(err.matches("go through again").count(), 1, "{err}");
    let (pid, bytes, _) = profile_figures(&prof);
    // The exit push may be written a moment after the program ends.
    let before_bytes: i64 = of_pid(&before, pid)
        .iter()
        .map(|p| p.total("alloc_space/bytes"))
        .sum();
    let after_pushes = after.wait_for("the pushes after the gap", |r| {
        let sum: i64 = of_pid(r, pid)
            .iter()
            .map(|p| p.total("alloc_space/bytes"))
            .sum();
        (before_bytes + sum - bytes).abs() * 100 <= bytes
    });
    let received: Vec<Push> = of_pid(&before, pid)
        .into_iter()
        .chain(of_pid(&after_pushes, pid))
        .collect();
    let pushed: i64 = received.iter().map(|p| p.total("alloc_space/bytes")).sum();
    assert!(
        (pushed - bytes).abs() * 100 <= bytes,
        "pushed {pushed} across the gap, the profile has {bytes}"
    );
}

/// A Collector that accepts connections and never answers: the program's
/// output and status are its own, and its end waits for the exit push's
/// limit (1 s) at most. (The flusher's own push, still waiting on its 5 s
/// limit when the program ends, holds the exit push off for that second,
/// no more: it is then given up, and the flusher ends with the process.)
#[test]
fn a_collector_that_never_answers_costs_the_program_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let exe = fixture(dir.path());
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", silent.local_addr().unwrap());
    // Accepts, reads, never writes: every connection held open.
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for s in silent.incoming().flatten() {
            let mut s2 = s.try_clone().unwrap();
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while s2.read(&mut buf).is_ok_and(|n| n > 0) {}
            });
            held.push(s);
        }
    });
    let prof = dir.path().join("p.prof");
    let bare_start = Instant::now();
    ok(run(Command::new(&exe).arg("15")));
    let bare = bare_start.elapsed();
    let start = Instant::now();
    let out = ok(run_pushing(&url, &prof, &[exe.to_str().unwrap(), "15"]));
    let took = start.elapsed();
    assert!(text(&out.stdout).starts_with("done "));
    // The program's own 1.5 s, plus the exit push's 1 s at most, plus the
    // CLI's own start and report: generous for a loaded machine, far below
    // the periodic pushes' 5 s limits added up.
    assert!(
        took < bare + Duration::from_secs(4),
        "{took:?} against {bare:?} bare"
    );
}
