//! A real service under live profiles: Debian's `redis-server` started by
//! `allocmux run --http` under each backend (the sampled level, the shim
//! the CLI writes to its cache), loaded by `redis-benchmark` while `go tool
//! pprof` scrapes its endpoint every second (and at least twice, however
//! quickly the benchmark ends). No request may fail, every key written
//! must read back, every scrape must be a profile, and the run must end
//! with its report. The waits give up after minutes, not seconds: a
//! loaded machine may take long to start a server or answer.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long a wait for the server (or its replies) lasts before the test
/// fails: far beyond what a loaded machine takes.
const PATIENCE: Duration = Duration::from_secs(120);
/// Scrapes at most: the scraper stops then even if the benchmark runs on.
const MOST_SCRAPES: usize = 600;

use crate::common;
use common::*;

/// A port nobody listens on now (the kernel's pick, released).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Sends inline commands, pipelined, and reads one reply each: a status
/// or error line, or a bulk string (its length line, then the value).
fn pipeline(port: u16, commands: &[String]) -> Vec<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    let text: String = commands.iter().map(|c| format!("{c}\r\n")).collect();
    s.write_all(text.as_bytes()).unwrap();
    let mut r = BufReader::new(s);
    let mut replies = Vec::new();
    for _ in commands {
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        let line = line.trim_end().to_string();
        if let Some(len) = line.strip_prefix('$') {
            let len: i64 = len.parse().unwrap();
            if len < 0 {
                replies.push("(nil)".to_string());
                continue;
            }
            let mut value = vec![0u8; len as usize + 2];
            r.read_exact(&mut value).unwrap();
            value.truncate(len as usize);
            replies.push(String::from_utf8(value).unwrap());
        } else {
            replies.push(line);
        }
    }
    replies
}

/// Waits until the server answers `PING`.
fn wait_ready(port: u16) {
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) {
            let mut reply = [0u8; 7];
            if s.write_all(b"PING\r\n").is_ok()
                && s.read_exact(&mut reply).is_ok()
                && &reply == b"+PONG\r\n"
            {
                return;
            }
        }
        assert!(
            Instant::now() < deadline,
            "redis-server never answered on {port}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn redis_under_live_profiles(backend: &str) {
    let Some(server) = require("/usr/bin/redis-server", "redis-server") else {
        return;
    };
    let Some(bench) = require("/usr/bin/redis-benchmark", "redis-tools") else {
        return;
    };
    let Some(go) = require("go", "golang-go") else {
        return;
    };
    let cache = tempfile::tempdir().unwrap();
    let pprof_dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut child = allocmux_embedded()
        .env("XDG_CACHE_HOME", cache.path())
        .args(["run", "-a", backend, "--http", "127.0.0.1:0", "--"])
        .arg(&server)
        .args([
            "--port",
            &port.to_string(),
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The shim says where it serves; the rest of stderr is kept for the end.
    let (tx, rx) = mpsc::channel();
    let stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut all = String::new();
        for line in BufReader::new(stderr).lines() {
            let line = line.unwrap();
            if let Some(at) = line.split("serving /debug/pprof on ").nth(1) {
                let _ = tx.send(at.to_string());
            }
            all.push_str(&line);
            all.push('\n');
        }
        all
    });
    let endpoint = rx
        .recv_timeout(PATIENCE)
        .unwrap_or_else(|_| panic!("{backend}: the endpoint never said where it serves"));
    wait_ready(port);

    let keys = 5_000;
    let sets: Vec<String> = (0..keys)
        .map(|i| format!("SET key:{i} value:{i}"))
        .collect();
    assert!(
        pipeline(port, &sets).iter().all(|r| r == "+OK"),
        "{backend}: a SET failed"
    );

    // Scrape every second while the benchmark loads the server, and until
    // there are two scrapes: a fast machine may end the benchmark within
    // the first second.
    let done = Arc::new(AtomicBool::new(false));
    let scraper = {
        let (done, url) = (done.clone(), format!("{endpoint}/debug/pprof/heap"));
        let tmp = pprof_dir.path().to_path_buf();
        std::thread::spawn(move || {
            let mut scrapes = Vec::new();
            while scrapes.len() < MOST_SCRAPES
                && !(done.load(Ordering::Relaxed) && scrapes.len() >= 2)
            {
                let start = Instant::now();
                let out = Command::new(&go)
                    .args(["tool", "pprof", "-timeout", "120", "-top", &url])
                    .env("PPROF_TMPDIR", &tmp)
                    .output()
                    .unwrap();
                scrapes.push(out);
                std::thread::sleep(Duration::from_secs(1).saturating_sub(start.elapsed()));
            }
            scrapes
        })
    };
    // redis-benchmark (7.0) stops at the first error reply, with a failure
    // status: a success means no request failed.
    let load = Command::new(&bench)
        .args(["-p", &port.to_string(), "-n", "100000", "-c", "20", "--csv"])
        .args(["-t", "set,get,incr,lpush,lpop"])
        .output()
        .unwrap();
    done.store(true, Ordering::Relaxed);
    let scrapes = scraper.join().unwrap();

    let out = text(&load.stdout);
    assert!(
        load.status.success(),
        "{backend}: a request failed: {out}{}",
        text(&load.stderr)
    );
    for test in ["SET", "GET", "INCR", "LPUSH", "LPOP"] {
        let rps = out
            .lines()
            .find_map(|l| l.strip_prefix(&format!("\"{test}\",\"")))
            .and_then(|r| r.split('"').next())
            .and_then(|r| r.parse::<f64>().ok());
        assert!(rps.is_some_and(|r| r > 0.0), "{backend}: {test}: {out}");
    }
    assert!(scrapes.len() >= 2, "{backend}: {} scrapes", scrapes.len());
    for s in &scrapes {
        assert!(
            s.status.success() && text(&s.stdout).contains("Type: inuse_space"),
            "{backend}: a scrape failed: {}\n{}",
            text(&s.stdout),
            text(&s.stderr)
        );
    }

    let gets: Vec<String> = (0..keys).map(|i| format!("GET key:{i}")).collect();
    let values = pipeline(port, &gets);
    for (i, v) in values.iter().enumerate() {
        assert_eq!(v, &format!("value:{i}"), "{backend}: key:{i}");
    }

    // A shutdown is the connection's end, not a reply.
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.write_all(b"SHUTDOWN NOSAVE\r\n").unwrap();
    let status = child.wait().unwrap();
    let stderr = reader.join().unwrap();
    assert!(status.success(), "{backend}: {status}\n{stderr}");
    assert!(
        stderr.contains("exited with status 0") && stderr.contains("sampled level"),
        "{backend}: the report: {stderr}"
    );
}

#[test]
fn redis_under_live_profiles_system() {
    redis_under_live_profiles("system");
}

#[test]
fn redis_under_live_profiles_jemalloc() {
    redis_under_live_profiles("jemalloc");
}

#[test]
fn redis_under_live_profiles_mimalloc() {
    redis_under_live_profiles("mimalloc");
}
