//! The live `/debug/pprof` endpoint (`ALLOCMUX_HTTP`), scraped over HTTP
//! by `go tool pprof`, a client nobody here wrote: what it reports,
//! sampled and exact, for one process and a fleet of two; and that bad
//! requests, a taken port and `fork` leave the program's output and exit
//! status as they were.

use crate::common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

use common::*;

/// The fixture under the shim, serving on a port of its own.
struct Served {
    spawned: Spawned,
    stdin: ChildStdin,
    stdout: Receiver<String>,
    stderr: Receiver<String>,
    /// `http://127.0.0.1:PORT`, from the shim's line on stderr.
    url: String,
}

/// How long a fixture's answer to a command may take.
const ANSWER: Duration = Duration::from_secs(60);

/// Lines of a pipe, on a channel.
fn lines(pipe: impl Read + Send + 'static) -> Receiver<String> {
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        for line in BufReader::new(pipe).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// The fixture, with debug information: `go tool pprof` symbolizes with
/// `addr2line`, from DWARF.
fn served() -> std::path::PathBuf {
    compile("cc", "served.c", &["-O2", "-g", "-pthread"])
}

/// Starts the fixture under `backend` with `env`, serving on port 0, and
/// waits for its address and its "ready".
fn serve(backend: &str, env: &[(&str, &str)]) -> Served {
    let exe = served();
    let mut cmd = Command::new(&exe);
    cmd.env("ALLOCMUX_HTTP", "127.0.0.1:0");
    for (k, v) in env {
        cmd.env(k, v);
    }
    preload(&mut cmd, backend, None);
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut spawned = Spawned::spawn(&mut cmd);
    let stdin = spawned.child.stdin.take().unwrap();
    let stdout = lines(spawned.child.stdout.take().unwrap());
    let stderr = lines(spawned.child.stderr.take().unwrap());
    let first = stderr
        .recv_timeout(ANSWER)
        .expect("the shim's line on stderr");
    let url = first
        .strip_prefix("allocmux: serving /debug/pprof on ")
        .unwrap_or_else(|| panic!("not the serving line: {first:?}"))
        .to_string();
    let mut s = Served {
        spawned,
        stdin,
        stdout,
        stderr,
        url,
    };
    assert_eq!(s.line(), "ready", "{backend}");
    s
}

impl Served {
    /// The next line the program prints.
    fn line(&mut self) -> String {
        self.stdout
            .recv_timeout(ANSWER)
            .unwrap_or_else(|_| panic!("{}: no line on stdout", self.spawned.what()))
    }

    /// Sends a command; the program's answer.
    fn say(&mut self, command: &str) -> String {
        writeln!(self.stdin, "{command}").unwrap();
        self.stdin.flush().unwrap();
        self.line()
    }

    /// The URL of a path on the endpoint.
    fn at(&self, path: &str) -> String {
        format!("{}{path}", self.url)
    }

    /// `host:port`, for raw connections.
    fn host(&self) -> &str {
        self.url.strip_prefix("http://").unwrap()
    }

    /// Tells the program to exit; asserts it did with status 0, and that
    /// nothing more came on stderr than the shim's summaries (no profile
    /// is written) and on stdout nothing more.
    fn finish(mut self) {
        writeln!(self.stdin, "exit").unwrap();
        drop(self.stdin);
        let status = self.spawned.wait();
        assert!(status.success(), "{}: {status}", self.spawned.what());
        let more: Vec<String> = self.stderr.iter().collect();
        assert!(
            more.iter().all(|l| l.starts_with("allocmux: pid ")),
            "more on stderr: {more:?}"
        );
        let out: Vec<String> = self.stdout.iter().collect();
        assert!(out.is_empty(), "more on stdout: {out:?}");
    }
}

/// `go tool pprof ARGS`: its standard output (it must succeed).
fn pprof(args: &[&str]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new("go")
        .args(["tool", "pprof"])
        .args(args)
        // Where it saves the profiles it fetches.
        .env("PPROF_TMPDIR", dir.path())
        .output()
        .expect("go tool pprof runs");
    assert!(
        out.status.success(),
        "go tool pprof {args:?}: {}",
        text(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The first row of `-top` (the largest flat value): its function.
fn top_function(report: &str) -> String {
    report
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("flat"))
        .nth(1)
        .and_then(|row| row.split_whitespace().last())
        .unwrap_or_else(|| panic!("no rows in {report}"))
        .to_string()
}

/// `Type: ...` of a `-top` report.
fn sample_type(report: &str) -> &str {
    report
        .lines()
        .find_map(|l| l.strip_prefix("Type: "))
        .unwrap_or_else(|| panic!("no type in {report}"))
}

/// A `-raw` report's values summed per leaf function, and in all: for
/// each sample type in order, `(function → sum, total)`.
fn raw_sums(raw: &str) -> (Vec<(String, Vec<i64>)>, Vec<i64>) {
    let mut lines = raw.lines();
    lines.by_ref().find(|l| l.starts_with("Samples:"));
    lines.next(); // the sample types
    let mut samples = Vec::new();
    for l in lines.by_ref() {
        if l.starts_with("Locations") {
            break;
        }
        let Some((values, locations)) = l.split_once(':') else {
            continue; // a label line
        };
        let values: Vec<i64> = values
            .split_whitespace()
            .map(|v| v.parse().unwrap())
            .collect();
        let leaf: u64 = locations
            .split_whitespace()
            .next()
            .map_or(0, |v| v.parse().unwrap());
        samples.push((values, leaf));
    }
    // Locations: "     2: 0x5616300931a2 M=1 make_blocks /tmp/served.c:8:0 s=0"
    let mut names = std::collections::HashMap::new();
    for l in lines {
        if l.starts_with("Mappings") {
            break;
        }
        let Some((id, rest)) = l.trim_start().split_once(": ") else {
            continue;
        };
        let name = rest.split_whitespace().nth(2).unwrap_or("?");
        if let Ok(id) = id.parse::<u64>() {
            names.entry(id).or_insert_with(|| name.to_string());
        }
    }
    let width = samples.first().map_or(0, |s| s.0.len());
    let mut total = vec![0i64; width];
    let mut per: Vec<(String, Vec<i64>)> = Vec::new();
    for (values, leaf) in samples {
        let name = names.get(&leaf).cloned().unwrap_or_default();
        let at = match per.iter().position(|(n, _)| *n == name) {
            Some(i) => i,
            None => {
                per.push((name, vec![0; width]));
                per.len() - 1
            }
        };
        for (i, v) in values.iter().enumerate() {
            per[at].1[i] += v;
            total[i] += v;
        }
    }
    (per, total)
}

/// The sums of `function` in [`raw_sums`]'s result.
fn of<'a>(per: &'a [(String, Vec<i64>)], function: &str) -> &'a [i64] {
    per.iter()
        .find(|(n, _)| n == function)
        .map(|(_, v)| v.as_slice())
        .unwrap_or_else(|| panic!("no {function} in {per:?}"))
}

/// Sample types by index, as served.
const ALLOC_OBJECTS: usize = 0;
const ALLOC_SPACE: usize = 1;
const INUSE_SPACE: usize = 3;

/// The allocating function is on top for `alloc_space`; in-use space
/// falls to nothing once the program frees its blocks; each endpoint
/// opens on Go's default sample type.
fn scraped_by_go_tool_pprof(backend: &str) {
    let mut s = serve(backend, &[]);
    let heap = s.at("/debug/pprof/heap");
    let report = pprof(&["-top", &heap]);
    assert_eq!(sample_type(&report), "inuse_space", "{report}");
    assert_eq!(top_function(&report), "make_blocks", "{report}");
    let allocs = pprof(&["-top", &s.at("/debug/pprof/allocs")]);
    assert_eq!(sample_type(&allocs), "alloc_space", "{allocs}");
    assert_eq!(top_function(&allocs), "make_blocks", "{allocs}");
    let (_, before) = raw_sums(&pprof(&["-raw", &heap]));
    assert_eq!(s.say("free"), "freed");
    let (_, after) = raw_sums(&pprof(&["-raw", &heap]));
    assert!(
        before[INUSE_SPACE] > 100_000_000 && after[INUSE_SPACE] < before[INUSE_SPACE] / 100,
        "{backend}: in use {} before the frees, {} after",
        before[INUSE_SPACE],
        after[INUSE_SPACE]
    );
    s.finish();
}

per_backend!(scraped_by_go_tool_pprof);

/// Sampled (512 KiB on average) estimates against the sizes the fixture
/// allocates: 16 blocks of 4 MiB are nearly always sampled, each with a
/// weight of almost 1, so their estimate is within 1% (a per-stack
/// average scaling would over-count them, golang/go#26618); 100,000
/// blocks of 1,000 bytes give about 190 samples (a standard error of
/// 7%), 10,000 of 4,000 bytes about 76 (11%): held within 4 standard
/// errors. Exact mode serves the exact figures.
#[test]
fn sampled_estimates_match_the_known_sizes() {
    let s = serve("system", &[]);
    let (per, _) = raw_sums(&pprof(&["-raw", &s.at("/debug/pprof/heap")]));
    let within = |function: &str, truth: f64, rel: f64| {
        let got = of(&per, function)[ALLOC_SPACE] as f64;
        assert!(
            (got - truth).abs() <= rel * truth,
            "{function}: {got} bytes estimated, {truth} allocated (±{}%)",
            rel * 100.0
        );
    };
    within("make_large", 16.0 * 4194304.0, 0.01);
    within("make_blocks", 100_000_000.0, 0.28);
    within("churn", 40_000_000.0, 0.44);
    s.finish();

    let s = serve("system", &[("ALLOCMUX_STACKS", "exact")]);
    let (per, _) = raw_sums(&pprof(&["-raw", &s.at("/debug/pprof/heap")]));
    for (function, objects, bytes) in [
        ("make_large", 16, 16 * 4194304),
        ("make_blocks", 100_000, 100_000_000),
        ("churn", 10_000, 40_000_000),
    ] {
        let v = of(&per, function);
        assert_eq!(
            (v[ALLOC_OBJECTS], v[ALLOC_SPACE]),
            (objects, bytes),
            "{function}"
        );
    }
    s.finish();
}

/// A fleet of two processes scraped and merged in one `go tool pprof`
/// call: its totals are the sum of each process's.
#[test]
fn a_fleet_of_two_merges() {
    let exact = [("ALLOCMUX_STACKS", "exact")];
    let (a, b) = (serve("system", &exact), serve("mimalloc", &exact));
    let (ua, ub) = (a.at("/debug/pprof/allocs"), b.at("/debug/pprof/allocs"));
    let (_, ta) = raw_sums(&pprof(&["-raw", &ua]));
    let (_, tb) = raw_sums(&pprof(&["-raw", &ub]));
    let (_, both) = raw_sums(&pprof(&["-raw", &ua, &ub]));
    assert!(ta[ALLOC_OBJECTS] >= 110_016, "{ta:?}");
    for i in [ALLOC_OBJECTS, ALLOC_SPACE] {
        assert_eq!(both[i], ta[i] + tb[i], "sample type {i}: {ta:?} + {tb:?}");
    }
    a.finish();
    b.finish();
}

/// A delta profile (`?seconds=N`) holds what was allocated during its
/// seconds only. The request is sent on a connection of the test's own,
/// then a plain one on another, and its answer awaited: the server
/// serves connections one at a time in the order they came, so by then
/// it has taken the delta's baseline. The program then churns, and the
/// answer, saved, is read by `go tool pprof`.
///
/// The window ends `N` seconds after the baseline, which came after the
/// test's clock read `start` (the same monotonic clock): a churn seen done
/// before `start + N` lies wholly inside it, whatever the schedule. One
/// that was not (a machine too slow for 3 s) proves nothing either way,
/// and is tried again with a longer window.
#[test]
fn a_delta_profile_covers_only_its_seconds() {
    let mut s = serve("system", &[("ALLOCMUX_STACKS", "exact")]);
    let mut attempts = [3u64, 15, 60].into_iter();
    let body = loop {
        let seconds = attempts
            .next()
            .expect("no churn of 10,000 blocks done within 60 s");
        let start = Instant::now();
        let mut c = TcpStream::connect(s.host()).unwrap();
        let request = format!("GET /debug/pprof/allocs?seconds={seconds} HTTP/1.1\r\n\r\n");
        c.write_all(request.as_bytes()).unwrap();
        assert_eq!(
            status_of(s.host(), b"GET /debug/pprof/ HTTP/1.1\r\n\r\n"),
            Some(200),
            "the index, served after the delta's baseline"
        );
        assert_eq!(s.say("churn"), "churned");
        let inside = start.elapsed() < Duration::from_secs(seconds);
        c.set_read_timeout(Some(Duration::from_secs(seconds + 60)))
            .unwrap();
        let mut answer = Vec::new();
        c.read_to_end(&mut answer).unwrap();
        if inside {
            break answer;
        }
        eprintln!("the churn took longer than the window of {seconds} s: again");
    };
    let body = body
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|at| &body[at + 4..])
        .expect("an HTTP answer");
    let dir = tempfile::tempdir().unwrap();
    let saved = dir.path().join("delta.pb");
    std::fs::write(&saved, body).unwrap();
    let (per, total) = raw_sums(&pprof(&["-raw", saved.to_str().unwrap()]));
    let churn = of(&per, "churn");
    assert_eq!(
        (churn[ALLOC_OBJECTS], churn[ALLOC_SPACE]),
        (10_000, 40_000_000)
    );
    assert_eq!(total[ALLOC_OBJECTS], 10_000, "{per:?}");
    s.finish();
}

/// Sends `request` on a new connection; the status code answered, or
/// `None` if the connection was closed without one.
fn status_of(host: &str, request: &[u8]) -> Option<u16> {
    let mut c = TcpStream::connect(host).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let _ = c.write_all(request);
    let mut answer = Vec::new();
    let _ = c.read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer);
    answer
        .strip_prefix("HTTP/1.1 ")
        .and_then(|r| r.get(..3))
        .and_then(|c| c.parse().ok())
}

/// Garbage, a 1 MB header, unknown paths and methods, a slow client, an
/// idle one and many at once get errors or their profile, and the
/// program's output and exit status stay as they were.
fn bad_requests_change_nothing(backend: &str) {
    let mut s = serve(backend, &[]);
    let host = s.host().to_string();
    let cases: [(&[u8], Option<u16>); 7] = [
        (
            b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03garbage\r\n\r\n",
            Some(400),
        ),
        (b"GET /debug/pprof/heap HTTP/1.1\r\nX: \r\n\r\n", Some(200)),
        (b"GET /etc/passwd HTTP/1.1\r\n\r\n", Some(404)),
        (b"DELETE /debug/pprof/heap HTTP/1.1\r\n\r\n", Some(405)),
        (
            b"GET /debug/pprof/heap?seconds=-1 HTTP/1.1\r\n\r\n",
            Some(400),
        ),
        (b"GET /debug/pprof/heap?debug=1 HTTP/1.1\r\n\r\n", Some(400)),
        // A request cut short: the server waits its second, then 408.
        (b"GET /debug/pprof/heap HTTP/1.1\r\n", Some(408)),
    ];
    for (request, want) in cases {
        assert_eq!(
            status_of(&host, request),
            want,
            "{}",
            String::from_utf8_lossy(request)
        );
    }
    // A 1 MB header: refused once 8 KiB have come.
    let mut big = b"GET /debug/pprof/heap HTTP/1.1\r\nX: ".to_vec();
    big.resize(1 << 20, b'a');
    assert_eq!(status_of(&host, &big), Some(431));
    // An idle connection is dropped without a word.
    assert_eq!(status_of(&host, b""), None);
    // Many at once: each is served in turn.
    let many: Vec<_> = (0..40)
        .map(|_| {
            let host = host.clone();
            std::thread::spawn(move || {
                status_of(
                    &host,
                    b"GET /debug/pprof/allocs HTTP/1.1\r\nHost: x\r\n\r\n",
                )
            })
        })
        .collect();
    for t in many {
        assert_eq!(t.join().unwrap(), Some(200));
    }
    // And the endpoint still serves a real client.
    let report = pprof(&["-top", &s.at("/debug/pprof/heap")]);
    assert_eq!(top_function(&report), "make_blocks", "{report}");
    assert_eq!(s.say("free"), "freed");
    s.finish();
}

per_backend!(bad_requests_change_nothing);

/// A port already taken is reported once on stderr and the program runs
/// on unchanged; an address that is not one is reported too.
#[test]
fn a_taken_port_is_reported_and_the_program_runs_on() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let exe = served();
    for (spec, said) in [
        (
            format!("127.0.0.1:{port}"),
            "the address is in use; nothing is served",
        ),
        ("localhost".to_string(), "is not ADDR:PORT"),
    ] {
        let out = run(
            preload(
                Command::new(&exe).env("ALLOCMUX_HTTP", &spec),
                "system",
                None,
            ),
            Some(b"free\nexit\n"),
        );
        assert!(out.status.success(), "{spec}: {}", text(&out.stderr));
        assert_eq!(text(&out.stdout), "ready\nfreed\n", "{spec}");
        let stderr = text(&out.stderr).into_owned();
        assert_eq!(stderr.matches(said).count(), 1, "{spec}: {stderr}");
    }
}

/// A forked child does not keep the parent's listening socket (it would
/// race its parent for connections); the parent serves on.
fn a_forked_child_does_not_serve(backend: &str) {
    let mut s = serve(backend, &[]);
    assert_eq!(s.say("fork"), "child sockets 0", "{backend}");
    assert_eq!(s.line(), "forked");
    let report = pprof(&["-top", &s.at("/debug/pprof/heap")]);
    assert_eq!(top_function(&report), "make_blocks", "{report}");
    s.finish();
}

per_backend!(a_forked_child_does_not_serve);
