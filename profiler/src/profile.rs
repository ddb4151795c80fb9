//! The allocmux profile format: writer and reader.
//!
//! A profile is UTF-8 text, one `key value` pair per line, so it can be
//! written without allocating from inside `malloc` and read by people:
//!
//! ```text
//! allocmux-profile 1          format name and version: the first line
//! process                     one section per process; a file may hold many
//! pid 4242
//! ppid 4200
//! exe /usr/bin/python3        percent-escaped bytes (%20 for space, %25 for %)
//! argv python3 -c pass        percent-escaped arguments separated by spaces
//! allocator jemalloc          system | jemalloc | mimalloc
//! state exited                running (a periodic flush) | exited (written at exit)
//! threads 3                   threads that made an allocation call
//! clock_start 1000 500        TSC ticks and CLOCK_MONOTONIC ns at start-up
//! clock_end 3000 1500         the same when the section was written
//! cpu_ns 900                  CPU time of the process (user + system)
//! max_rss_bytes 4096000
//! time_sample_mean 256        one call in this many (on average) is timed
//! calls malloc 10             one line per function with a non-zero count
//! failed_calls 0
//! bytes_requested 800
//! bytes_allocated 960         usable sizes of blocks handed out
//! bytes_freed 960             usable sizes of blocks freed
//! peak_live_bytes 480
//! timed_calls 1               calls timed by the random sample ...
//! timed_ticks 25              ... and their durations in TSC ticks (each stands for time_sample_mean calls)
//! exact_calls 2               calls always timed (large blocks, each thread's first calls) ...
//! exact_ticks 900             ... and their durations in TSC ticks (each stands for itself)
//! size_hist 7 10              request-size bucket (see `stats::SIZE_BUCKETS`) and count
//! end                         closes the section; a section without it is truncated
//! ```
//!
//! Readers ignore keys they do not know (later minor additions), refuse a
//! higher version number, and reject a section that does not end with `end`.

use core::fmt::{self, Write};

use crate::stats::{Func, SIZE_BUCKETS, Totals};

/// The format version this crate writes and the highest it reads.
pub const FORMAT_VERSION: u32 = 1;
/// The first word of every profile.
pub const MAGIC: &str = "allocmux-profile";

/// Whether a process section was written while the process ran or at its exit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// A periodic flush: the process was still running (or died without
    /// reaching its exit handlers, e.g. by SIGKILL or `_exit`).
    Running,
    /// Written by the exit handler: complete.
    Exited,
}

impl State {
    fn name(self) -> &'static str {
        match self {
            State::Running => "running",
            State::Exited => "exited",
        }
    }
}

/// The non-counter facts of a process section, borrowed so the shim can
/// write them from static buffers.
#[derive(Clone, Copy, Debug)]
pub struct Header<'a> {
    /// Process id.
    pub pid: u32,
    /// Parent process id.
    pub ppid: u32,
    /// Path of the executable (bytes, as the kernel reports it).
    pub exe: &'a [u8],
    /// The arguments, each terminated by NUL, as in `/proc/self/cmdline`.
    pub cmdline: &'a [u8],
    /// Backend name.
    pub allocator: &'a str,
    /// Running or exited.
    pub state: State,
    /// Threads that made an allocation call.
    pub threads: u64,
    /// TSC and monotonic clock at start-up.
    pub clock_start: crate::recorder::ClockPair,
    /// TSC and monotonic clock when written.
    pub clock_end: crate::recorder::ClockPair,
    /// CPU time used by the process so far.
    pub cpu_ns: u64,
    /// Peak resident set size so far.
    pub max_rss_bytes: u64,
    /// Mean calls per timed call.
    pub time_sample_mean: u32,
}

/// Writes the file header line.
pub fn write_magic<W: Write>(w: &mut W) -> fmt::Result {
    writeln!(w, "{MAGIC} {FORMAT_VERSION}")
}

/// Writes one process section.
pub fn write_process<W: Write>(w: &mut W, h: &Header<'_>, t: &Totals) -> fmt::Result {
    w.write_str("process\n")?;
    writeln!(w, "pid {}", h.pid)?;
    writeln!(w, "ppid {}", h.ppid)?;
    w.write_str("exe ")?;
    write_escaped(w, h.exe)?;
    w.write_str("\nargv")?;
    for arg in h.cmdline.split(|&b| b == 0).filter(|a| !a.is_empty()) {
        w.write_char(' ')?;
        write_escaped(w, arg)?;
    }
    writeln!(w)?;
    writeln!(w, "allocator {}", h.allocator)?;
    writeln!(w, "state {}", h.state.name())?;
    writeln!(w, "threads {}", h.threads)?;
    writeln!(
        w,
        "clock_start {} {}",
        h.clock_start.tsc, h.clock_start.mono_ns
    )?;
    writeln!(w, "clock_end {} {}", h.clock_end.tsc, h.clock_end.mono_ns)?;
    writeln!(w, "cpu_ns {}", h.cpu_ns)?;
    writeln!(w, "max_rss_bytes {}", h.max_rss_bytes)?;
    writeln!(w, "time_sample_mean {}", h.time_sample_mean)?;
    for f in Func::ALL {
        let n = t.calls_of(f);
        if n != 0 {
            writeln!(w, "calls {} {}", f.name(), n)?;
        }
    }
    writeln!(w, "failed_calls {}", t.failed_calls)?;
    writeln!(w, "bytes_requested {}", t.bytes_requested)?;
    writeln!(w, "bytes_allocated {}", t.bytes_allocated)?;
    writeln!(w, "bytes_freed {}", t.bytes_freed)?;
    writeln!(w, "peak_live_bytes {}", t.peak_live_bytes)?;
    writeln!(w, "timed_calls {}", t.timed_calls)?;
    writeln!(w, "timed_ticks {}", t.timed_ticks)?;
    writeln!(w, "exact_calls {}", t.exact_calls)?;
    writeln!(w, "exact_ticks {}", t.exact_ticks)?;
    for (b, &n) in t.size_hist.iter().enumerate() {
        if n != 0 {
            writeln!(w, "size_hist {b} {n}")?;
        }
    }
    w.write_str("end\n")
}

/// Writes bytes with everything but printable ASCII (and `%`) as `%XX`.
fn write_escaped<W: Write>(w: &mut W, bytes: &[u8]) -> fmt::Result {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for &b in bytes {
        if b.is_ascii_graphic() && b != b'%' {
            w.write_char(b as char)?;
        } else {
            w.write_char('%')?;
            w.write_char(HEX[(b >> 4) as usize] as char)?;
            w.write_char(HEX[(b & 15) as usize] as char)?;
        }
    }
    Ok(())
}

fn unescape(s: &str) -> Result<Vec<u8>, String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = s
                .get(i + 1..i + 3)
                .ok_or_else(|| format!("bad escape in {s:?}"))?;
            out.push(u8::from_str_radix(hex, 16).map_err(|_| format!("bad escape in {s:?}"))?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    Ok(out)
}

/// One process, as read back from a profile.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct ProcessProfile {
    /// Process id.
    pub pid: u32,
    /// Parent process id.
    pub ppid: u32,
    /// Executable path (lossily decoded).
    pub exe: String,
    /// Arguments (lossily decoded).
    pub argv: Vec<String>,
    /// Backend name.
    pub allocator: String,
    /// Running or exited.
    pub state: State,
    /// Threads that made an allocation call.
    pub threads: u64,
    /// Clocks at start-up.
    pub clock_start: crate::recorder::ClockPair,
    /// Clocks when written.
    pub clock_end: crate::recorder::ClockPair,
    /// CPU time so far.
    pub cpu_ns: u64,
    /// Peak RSS so far.
    pub max_rss_bytes: u64,
    /// Mean calls per timed call.
    pub time_sample_mean: u32,
    /// The counters.
    pub totals: Totals,
}

impl ProcessProfile {
    /// Wall time from the shim's start-up in the process to the last write.
    pub fn wall_ns(&self) -> u64 {
        self.clock_end
            .mono_ns
            .saturating_sub(self.clock_start.mono_ns)
    }

    /// TSC ticks per nanosecond over this process's lifetime, if measurable.
    pub fn ticks_per_ns(&self) -> Option<f64> {
        let dt = self.clock_end.tsc.checked_sub(self.clock_start.tsc)?;
        let dns = self
            .clock_end
            .mono_ns
            .checked_sub(self.clock_start.mono_ns)?;
        (dns >= 100_000 && dt > 0).then(|| dt as f64 / dns as f64)
    }

    /// Estimated time spent inside the allocator, in ns: the always-timed
    /// calls' ticks plus the sampled calls' ticks scaled by the sampling
    /// rate (a stratified, unbiased estimate), converted with `ticks_per_ns`
    /// (pass a rate measured over a longer span when one is known).
    pub fn allocator_ns(&self, ticks_per_ns: f64) -> u64 {
        if ticks_per_ns <= 0.0 {
            return 0;
        }
        let t = &self.totals;
        let ticks = t.exact_ticks as f64 + t.timed_ticks as f64 * self.time_sample_mean as f64;
        (ticks / ticks_per_ns) as u64
    }

    /// Writes this process back as a profile section.
    pub fn write<W: Write>(&self, w: &mut W) -> fmt::Result {
        let mut cmdline = Vec::new();
        for a in &self.argv {
            cmdline.extend_from_slice(a.as_bytes());
            cmdline.push(0);
        }
        let h = Header {
            pid: self.pid,
            ppid: self.ppid,
            exe: self.exe.as_bytes(),
            cmdline: &cmdline,
            allocator: &self.allocator,
            state: self.state,
            threads: self.threads,
            clock_start: self.clock_start,
            clock_end: self.clock_end,
            cpu_ns: self.cpu_ns,
            max_rss_bytes: self.max_rss_bytes,
            time_sample_mean: self.time_sample_mean,
        };
        write_process(w, &h, &self.totals)
    }
}

/// Why a profile could not be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseError {
    /// 1-based line number, 0 for the file as a whole.
    pub line: usize,
    /// What is wrong, in words.
    pub message: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            f.write_str(&self.message)
        } else {
            write!(f, "line {}: {}", self.line, self.message)
        }
    }
}

impl std::error::Error for ParseError {}

/// Serialises processes as one profile file.
pub fn to_string(procs: &[ProcessProfile]) -> String {
    let mut s = String::new();
    // Writing into a String cannot fail.
    let _ = write_magic(&mut s);
    for p in procs {
        let _ = p.write(&mut s);
    }
    s
}

/// Reads a profile file: one or more process sections.
pub fn parse(text: &str) -> Result<Vec<ProcessProfile>, ParseError> {
    let err = |line: usize, message: String| ParseError { line, message };
    let mut lines = text.lines().enumerate().map(|(i, l)| (i + 1, l));
    let Some((_, first)) = lines.next() else {
        return Err(err(
            0,
            "the file is empty (the process may have died before its first flush)".into(),
        ));
    };
    let mut words = first.split_whitespace();
    if words.next() != Some(MAGIC) {
        return Err(err(
            1,
            "not an allocmux profile (no `allocmux-profile` header)".into(),
        ));
    }
    let version: u32 = words
        .next()
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| err(1, "the header has no version number".into()))?;
    if version > FORMAT_VERSION {
        return Err(err(
            1,
            format!(
                "profile format version {version} is newer than this allocmux reads ({FORMAT_VERSION}); upgrade allocmux"
            ),
        ));
    }
    let mut procs = Vec::new();
    let mut cur: Option<ProcessProfile> = None;
    for (n, line) in lines {
        let line = line.trim_end();
        if line.is_empty() {
            continue;
        }
        let (key, rest) = line.split_once(' ').unwrap_or((line, ""));
        let Some(p) = cur.as_mut() else {
            if key == "process" {
                cur = Some(empty_process());
                continue;
            }
            return Err(err(n, format!("expected `process`, found {key:?}")));
        };
        let num = |s: &str| -> Result<u64, ParseError> {
            s.trim()
                .parse::<u64>()
                .map_err(|_| err(n, format!("`{key}` needs a number, found {s:?}")))
        };
        let pair = |s: &str| -> Result<crate::recorder::ClockPair, ParseError> {
            let (a, b) = s
                .split_once(' ')
                .ok_or_else(|| err(n, format!("`{key}` needs two numbers")))?;
            Ok(crate::recorder::ClockPair {
                tsc: num(a)?,
                mono_ns: num(b)?,
            })
        };
        let t = &mut p.totals;
        match key {
            "end" => procs.push(cur.take().expect("section is open")),
            "process" => return Err(err(n, "a process section is missing its `end` line".into())),
            "pid" => p.pid = num(rest)? as u32,
            "ppid" => p.ppid = num(rest)? as u32,
            "exe" => {
                p.exe =
                    String::from_utf8_lossy(&unescape(rest).map_err(|m| err(n, m))?).into_owned()
            }
            "argv" => {
                p.argv = rest
                    .split(' ')
                    .filter(|a| !a.is_empty())
                    .map(|a| unescape(a).map(|b| String::from_utf8_lossy(&b).into_owned()))
                    .collect::<Result<_, _>>()
                    .map_err(|m| err(n, m))?
            }
            "allocator" => p.allocator = rest.to_string(),
            "state" => {
                p.state = match rest {
                    "running" => State::Running,
                    "exited" => State::Exited,
                    other => return Err(err(n, format!("unknown state {other:?}"))),
                }
            }
            "threads" => p.threads = num(rest)?,
            "clock_start" => p.clock_start = pair(rest)?,
            "clock_end" => p.clock_end = pair(rest)?,
            "cpu_ns" => p.cpu_ns = num(rest)?,
            "max_rss_bytes" => p.max_rss_bytes = num(rest)?,
            "time_sample_mean" => p.time_sample_mean = num(rest)?.clamp(1, u32::MAX as u64) as u32,
            "calls" => {
                let (name, v) = rest
                    .split_once(' ')
                    .ok_or_else(|| err(n, "`calls` needs a name and a number".into()))?;
                // A function this version does not know is skipped, like any unknown key.
                if let Some(f) = Func::from_name(name) {
                    t.calls[f as usize] = num(v)?;
                }
            }
            "failed_calls" => t.failed_calls = num(rest)?,
            "bytes_requested" => t.bytes_requested = num(rest)?,
            "bytes_allocated" => t.bytes_allocated = num(rest)?,
            "bytes_freed" => t.bytes_freed = num(rest)?,
            "peak_live_bytes" => t.peak_live_bytes = num(rest)?,
            "timed_calls" => t.timed_calls = num(rest)?,
            "timed_ticks" => t.timed_ticks = num(rest)?,
            "exact_calls" => t.exact_calls = num(rest)?,
            "exact_ticks" => t.exact_ticks = num(rest)?,
            "size_hist" => {
                let (b, v) = rest
                    .split_once(' ')
                    .ok_or_else(|| err(n, "`size_hist` needs a bucket and a number".into()))?;
                let b = num(b)? as usize;
                if b >= SIZE_BUCKETS {
                    return Err(err(n, format!("size bucket {b} out of range")));
                }
                t.size_hist[b] = num(v)?;
            }
            _ => {} // a key from a later minor revision
        }
    }
    if cur.is_some() {
        return Err(err(
            0,
            "the profile is truncated: its last process section has no `end` line".into(),
        ));
    }
    if procs.is_empty() {
        return Err(err(0, "the profile holds no process section".into()));
    }
    Ok(procs)
}

fn empty_process() -> ProcessProfile {
    ProcessProfile {
        pid: 0,
        ppid: 0,
        exe: String::new(),
        argv: Vec::new(),
        allocator: String::new(),
        state: State::Running,
        threads: 0,
        clock_start: Default::default(),
        clock_end: Default::default(),
        cpu_ns: 0,
        max_rss_bytes: 0,
        time_sample_mean: 1,
        totals: Totals::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recorder::ClockPair;

    fn sample() -> ProcessProfile {
        let mut t = Totals::default();
        t.calls[Func::Malloc as usize] = 10;
        t.calls[Func::Free as usize] = 9;
        t.bytes_requested = 800;
        t.bytes_allocated = 960;
        t.bytes_freed = 864;
        t.peak_live_bytes = 480;
        t.timed_calls = 2;
        t.timed_ticks = 50;
        t.exact_calls = 1;
        t.exact_ticks = 300;
        t.size_hist[7] = 10;
        ProcessProfile {
            pid: 42,
            ppid: 1,
            exe: "/usr/bin/my prog".into(),
            argv: vec!["my prog".into(), "-x".into(), "100%".into()],
            allocator: "jemalloc".into(),
            state: State::Exited,
            threads: 2,
            clock_start: ClockPair {
                tsc: 1000,
                mono_ns: 0,
            },
            clock_end: ClockPair {
                tsc: 3_001_000,
                mono_ns: 1_000_000,
            },
            cpu_ns: 900_000,
            max_rss_bytes: 4 << 20,
            time_sample_mean: 256,
            totals: t,
        }
    }

    #[test]
    fn round_trips() {
        let p = sample();
        let text = to_string(&[p.clone(), p.clone()]);
        assert!(text.starts_with("allocmux-profile 1\nprocess\npid 42\n"));
        assert!(text.contains("exe /usr/bin/my%20prog\nargv my%20prog -x 100%25\n"));
        assert_eq!(parse(&text).unwrap(), vec![p.clone(), p]);
    }

    #[test]
    fn derived_figures() {
        let p = sample();
        assert_eq!(p.wall_ns(), 1_000_000);
        assert_eq!(p.ticks_per_ns(), Some(3.0));
        assert_eq!(p.allocator_ns(3.0), (300 + 50 * 256) / 3);
        assert_eq!(p.totals.live_bytes(), 96);
    }

    #[test]
    fn rejects_bad_input_with_reasons() {
        let full = to_string(&[sample()]);
        let cases = [
            ("", "empty"),
            ("hello\n", "not an allocmux profile"),
            ("allocmux-profile 2\n", "newer"),
            ("allocmux-profile\n", "no version"),
            (&full[..full.len() - 4], "truncated"),
            ("allocmux-profile 1\n", "no process section"),
            (
                "allocmux-profile 1\nprocess\npid x\nend\n",
                "`pid` needs a number",
            ),
            (
                "allocmux-profile 1\nprocess\nsize_hist 99 1\nend\n",
                "out of range",
            ),
            ("allocmux-profile 1\npid 3\n", "expected `process`"),
        ];
        for (text, want) in cases {
            let e = parse(text).unwrap_err().to_string();
            assert!(e.contains(want), "{text:?}: {e}");
        }
    }

    #[test]
    fn ignores_unknown_keys_and_functions() {
        let text = to_string(&[sample()])
            .replace("threads 2\n", "threads 2\nfuture_key 7\ncalls mmap 3\n");
        assert_eq!(parse(&text).unwrap(), vec![sample()]);
    }
}
