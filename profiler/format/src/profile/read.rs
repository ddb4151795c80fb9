//! Reading profiles back: [`parse`]. Each line is read by its key: the
//! keys with lines of their own by [`Section::read`] (one arm per [`Key`],
//! no catch-all), the totals by `read_total`, generated from the list of
//! keys; a key this version does not know is skipped.

use super::escape::{decode_hex, unescape};
use super::keys::{Key, for_each_profile_key};
use super::{
    AllocatorReading, FORMAT_VERSION, MAGIC, Module, ParseError, ProcessProfile, Recording, Stack,
    StackMode, Stacks, State,
};
use crate::func::Func;
use crate::lifetimes::{DECADES, Lifetimes};
use crate::site_counts::SiteCounts;
use crate::timeline::{Timeline, TimelinePoint};
use crate::totals::{SIZE_BUCKETS, Totals};
use crate::{AllocatorStats, Backend};

/// Reads a profile file: one or more process sections.
pub fn parse(text: &str) -> Result<Vec<ProcessProfile>, ParseError> {
    parse_sections(text).map_err(|e| {
        // A file cut in the middle of its last line (a copy or a download
        // cut short; the shim itself only ever renames complete files)
        // fails on that line: say what happened rather than what the half
        // line lacks.
        if e.line > 1 && !text.ends_with('\n') && e.line == text.lines().count() {
            ParseError {
                line: e.line,
                message: format!(
                    "the profile is truncated: its last line is cut short ({})",
                    e.message
                ),
            }
        } else {
            e
        }
    })
}

/// `read_total`, from the list of keys.
macro_rules! define_read_total {
    (
        lines { $($line:ident => $Variant:ident,)* }
        per_function { $($(#[$fm:meta])* $f:ident,)* }
        per_process { $($(#[$pm:meta])* $p:ident,)* }
        per_size_bucket { $($(#[$bm:meta])* $b:ident,)* }
    ) => {
        /// Reads a line of totals into `t`; skips a key that is not one
        /// (a key from a later minor revision).
        fn read_total(t: &mut Totals, l: &Line<'_>) -> Result<(), ParseError> {
            match l.key {
                $(
                    stringify!($f) => {
                        let (name, v) = l.two("a name and a number")?;
                        // A function this version does not know is skipped,
                        // like any unknown key.
                        if let Some(f) = Func::from_name(name) {
                            t.$f[f as usize] = l.num_of(v)?;
                        }
                    }
                )*
                $(stringify!($p) => t.$p = l.num()?,)*
                $(
                    stringify!($b) => {
                        let (b, v) = l.two("a bucket and a number")?;
                        let b = l.num_of(b)? as usize;
                        if b >= SIZE_BUCKETS {
                            return Err(l.err(format!("size bucket {b} out of range")));
                        }
                        t.$b[b] = l.num_of(v)?;
                    }
                )*
                _ => {}
            }
            Ok(())
        }
    };
}

for_each_profile_key!(define_read_total);

fn parse_sections(text: &str) -> Result<Vec<ProcessProfile>, ParseError> {
    let mut lines = text.lines().enumerate().map(|(i, l)| (i + 1, l));
    let Some((_, first)) = lines.next() else {
        return Err(ParseError {
            line: 0,
            message: "the file is empty (the process may have died before its first flush)".into(),
        });
    };
    let version = read_magic(first)?;
    let mut procs = Vec::new();
    let mut open: Option<Section> = None;
    for (n, line) in lines {
        let line = line.trim_end();
        if line.is_empty() {
            continue;
        }
        let (key, rest) = line.split_once(' ').unwrap_or((line, ""));
        let l = Line { n, key, rest };
        let Some(section) = open.as_mut() else {
            if key == Key::Process.name() {
                open = Some(Section::new(version));
                continue;
            }
            return Err(l.err(format!("expected `process`, found {key:?}")));
        };
        match Key::from_name(key) {
            Some(k) => {
                if section.read(k, &l)? {
                    procs.push(open.take().expect("section is open").finish());
                }
            }
            None => read_total(&mut section.p.totals, &l)?,
        }
    }
    if open.is_some() {
        return Err(ParseError {
            line: 0,
            message: "the profile is truncated: its last process section has no `end` line".into(),
        });
    }
    if procs.is_empty() {
        return Err(ParseError {
            line: 0,
            message: "the profile holds no process section".into(),
        });
    }
    Ok(procs)
}

/// Checks the header line: the magic word and a version this crate reads.
fn read_magic(first: &str) -> Result<u32, ParseError> {
    let err = |message: String| ParseError { line: 1, message };
    let mut words = first.split_whitespace();
    if words.next() != Some(MAGIC) {
        return Err(err(
            "not an allocmux profile (no `allocmux-profile` header)".into(),
        ));
    }
    let version: u32 = words
        .next()
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| err("the header has no version number".into()))?;
    if version > FORMAT_VERSION {
        return Err(err(format!(
            "profile format version {version} is newer than this allocmux reads ({FORMAT_VERSION}); upgrade allocmux"
        )));
    }
    Ok(version)
}

/// One line of a section: its number (1-based), its key and the rest.
struct Line<'a> {
    n: usize,
    key: &'a str,
    rest: &'a str,
}

impl Line<'_> {
    fn err(&self, message: impl Into<String>) -> ParseError {
        ParseError {
            line: self.n,
            message: message.into(),
        }
    }

    /// `s` as a number.
    fn num_of(&self, s: &str) -> Result<u64, ParseError> {
        s.trim()
            .parse::<u64>()
            .map_err(|_| self.err(format!("`{}` needs a number, found {s:?}", self.key)))
    }

    /// The rest of the line as a number.
    fn num(&self) -> Result<u64, ParseError> {
        self.num_of(self.rest)
    }

    /// `s` as a process id.
    fn pid_of(&self, s: &str) -> Result<u32, ParseError> {
        s.trim()
            .parse::<u32>()
            .map_err(|_| self.err(format!("`{}` needs a process id, found {s:?}", self.key)))
    }

    /// The rest of the line split at its first space; `what` says what the
    /// two words are, for the error.
    fn two(&self, what: &str) -> Result<(&str, &str), ParseError> {
        self.rest
            .split_once(' ')
            .ok_or_else(|| self.err(format!("`{}` needs {what}", self.key)))
    }

    /// The rest of the line as two numbers.
    fn pair(&self) -> Result<(u64, u64), ParseError> {
        let (a, b) = self.two("two numbers")?;
        Ok((self.num_of(a)?, self.num_of(b)?))
    }

    /// `s` unescaped, lossily decoded.
    fn text_of(&self, s: &str) -> Result<String, ParseError> {
        Ok(String::from_utf8_lossy(&unescape(s).map_err(|m| self.err(m))?).into_owned())
    }
}

/// The process section being read, and its allocator readings' lines.
struct Section {
    p: ProcessProfile,
    /// The latest reading (`allocator_stats`), made into an
    /// `AllocatorReading` at `end` (when its `allocator` is known).
    latest: ReadingLines,
    /// The reading nearest the peak (`allocator_stats_at_peak`), the same.
    at_peak: ReadingLines,
    /// How many figures a `stack` line has in the file's format version.
    stack_fields: usize,
    /// A `stacks_temporary_counted 0` line was read.
    temporary_uncounted: bool,
}

impl Section {
    fn new(version: u32) -> Self {
        Section {
            p: empty_process(),
            latest: ReadingLines::default(),
            at_peak: ReadingLines::default(),
            stack_fields: if version < 2 {
                SiteCounts::FIELDS_V1
            } else {
                SiteCounts::FIELDS
            },
            temporary_uncounted: false,
        }
    }

    /// Reads a line with a key of its own; `true` when it closes the section.
    fn read(&mut self, k: Key, l: &Line<'_>) -> Result<bool, ParseError> {
        let p = &mut self.p;
        match k {
            Key::End => return Ok(true),
            Key::Process => return Err(l.err("a process section is missing its `end` line")),
            Key::Pid => p.pid = l.pid_of(l.rest)?,
            Key::Ppid => p.ppid = l.pid_of(l.rest)?,
            Key::Exe => p.exe = l.text_of(l.rest)?,
            Key::Argv => {
                p.argv = l
                    .rest
                    .split(' ')
                    .filter(|a| !a.is_empty())
                    .map(|a| l.text_of(a))
                    .collect::<Result<_, _>>()?
            }
            Key::Allocator => p.allocator = l.rest.to_string(),
            Key::State => {
                p.state = match l.rest {
                    "running" => State::Running,
                    "exited" => State::Exited,
                    other => return Err(l.err(format!("unknown state {other:?}"))),
                }
            }
            Key::Threads => p.threads = l.num()?,
            Key::ClockStart => p.clock_start = clock(l)?,
            Key::ClockEnd => p.clock_end = clock(l)?,
            Key::CpuNs => p.cpu_ns = l.num()?,
            Key::MaxRssBytes => p.max_rss_bytes = l.num()?,
            Key::TimeSampleMean => p.time_sample_mean = l.num()?.clamp(1, u32::MAX as u64) as u32,
            // Empty is none, as the writer has it (it writes no line).
            Key::Http => p.http = Some(l.text_of(l.rest)?).filter(|s| !s.is_empty()),
            Key::Exec => p.exec = Some(l.text_of(l.rest)?).filter(|s| !s.is_empty()),
            Key::Recording => p.recording = recording(l)?,
            Key::UnprofiledChild => {
                let (child, program) = l.two("a pid and a program")?;
                p.unprofiled_children
                    .push((l.pid_of(child)?, l.text_of(program)?));
            }
            Key::AllocatorStats => self.latest.at = Some(l.pair()?),
            Key::AllocatorStatsAtPeak => self.at_peak.at = Some(l.pair()?),
            Key::AllocatorStat => self.latest.field(l, Key::AllocatorStats)?,
            Key::AllocatorStatAtPeak => self.at_peak.field(l, Key::AllocatorStatsAtPeak)?,
            Key::Timeline => p.timeline.interval_ns = l.num()?,
            Key::Tl => p.timeline.points.push(timeline_point(&p.timeline, l)?),
            Key::TimelineTemporary => timeline_temporary(&mut p.timeline, l)?,
            Key::Stacks => p.stacks.mode = stack_mode(l)?,
            Key::StacksExactFirst => stacks_open(&mut p.stacks, l)?.exact_first = l.num()?,
            Key::StacksLost => stacks_open(&mut p.stacks, l)?.lost = l.num()?,
            Key::StacksDegraded => stacks_open(&mut p.stacks, l)?.degraded = l.num()?,
            Key::StacksTemporaryCounted => {
                stacks_open(&mut p.stacks, l)?;
                self.temporary_uncounted = l.num()? == 0;
            }
            Key::Module => {
                let m = module(l)?;
                stacks_open(&mut p.stacks, l)?.modules.push(m);
            }
            Key::Stack => {
                let s = stack(l, self.stack_fields)?;
                stacks_open(&mut p.stacks, l)?.stacks.push(s);
            }
            Key::StacksLifetimes => {
                stacks_open(&mut p.stacks, l)?.lifetime_ticks_per_us = l.num()?;
            }
            Key::Lifetimes => {
                let Some(s) = stacks_open(&mut p.stacks, l)?.stacks.last_mut() else {
                    return Err(l.err("a `lifetimes` line before any `stack` line"));
                };
                s.lifetimes = lifetimes(l)?;
            }
        }
        Ok(false)
    }

    /// The process read, at its `end` line.
    fn finish(self) -> ProcessProfile {
        let mut p = self.p;
        p.stacks.temporary_counted = self.stack_fields == SiteCounts::FIELDS
            && p.stacks.mode == StackMode::Exact
            && !self.temporary_uncounted;
        if p.timeline.points.is_empty() {
            // A `timeline` line without points is no timeline (the
            // writer writes none): read it as such.
            p.timeline = Timeline::default();
        }
        let backend = Backend::from_name(p.allocator.as_bytes());
        p.allocator_stats = self.latest.reading(backend);
        // The same reading twice is one, as the writer writes it.
        p.allocator_stats_at_peak = self
            .at_peak
            .reading(backend)
            .filter(|r| Some(r) != p.allocator_stats.as_ref());
        p
    }
}

/// The stacks, once their `stacks` line has said how they were recorded.
fn stacks_open<'s>(stacks: &'s mut Stacks, l: &Line<'_>) -> Result<&'s mut Stacks, ParseError> {
    if stacks.mode == StackMode::Off {
        return Err(l.err(format!("a `{}` line before the `stacks` line", l.key)));
    }
    Ok(stacks)
}

fn clock(l: &Line<'_>) -> Result<super::ClockPair, ParseError> {
    let (tsc, mono_ns) = l.pair()?;
    Ok(super::ClockPair { tsc, mono_ns })
}

/// `recording exact` or `recording sampled VARIANCE VARIANCE`.
fn recording(l: &Line<'_>) -> Result<Recording, ParseError> {
    let f: Vec<&str> = l.rest.split(' ').collect();
    let variance = |v: &str| {
        v.parse::<f64>()
            .ok()
            .filter(|x| x.is_finite() && *x >= 0.0)
            .ok_or_else(|| l.err(format!("bad variance {v:?}")))
    };
    Ok(match f[..] {
        ["exact"] => Recording::Exact,
        ["sampled", a, b] => Recording::Sampled {
            allocations_variance: variance(a)?,
            bytes_variance: variance(b)?,
        },
        _ => return Err(l.err(format!("bad recording line {:?}", l.rest))),
    })
}

/// `stacks sample MEAN_BYTES`, `stacks exact 1` or `stacks off`.
fn stack_mode(l: &Line<'_>) -> Result<StackMode, ParseError> {
    let (mode, v) = l.rest.split_once(' ').unwrap_or((l.rest, ""));
    Ok(match mode {
        "sample" => StackMode::Sample {
            mean_bytes: l.num_of(v)?.max(1),
        },
        "exact" => StackMode::Exact,
        "off" => StackMode::Off,
        other => return Err(l.err(format!("unknown stack mode {other:?}"))),
    })
}

/// `module START END OFFSET BIAS BUILD_ID PATH`.
fn module(l: &Line<'_>) -> Result<Module, ParseError> {
    let f: Vec<&str> = l.rest.splitn(6, ' ').collect();
    let [start, end, off, bias, id, path] = f[..] else {
        return Err(l.err("`module` needs six fields"));
    };
    let hex = |s: &str| {
        u64::from_str_radix(s, 16)
            .map_err(|_| l.err(format!("`module` needs hex numbers, found {s:?}")))
    };
    // Lower case, as written, so a profile reads back the same.
    let build_id = if id == "-" {
        String::new()
    } else {
        id.to_ascii_lowercase()
    };
    if decode_hex(&build_id).is_none() {
        return Err(l.err(format!("bad build id {id:?}")));
    }
    Ok(Module {
        start: hex(start)?,
        end: hex(end)?,
        file_offset: hex(off)?,
        bias: hex(bias)?,
        build_id,
        path: l.text_of(path)?,
    })
}

/// `stack FIGURES... ADDRESSES...`.
fn stack(l: &Line<'_>, fields: usize) -> Result<Stack, ParseError> {
    let mut c = [0u64; SiteCounts::FIELDS];
    let mut words = l.rest;
    for v in &mut c[..fields] {
        words = words.trim_start_matches(' ');
        let (word, after) = words.split_once(' ').unwrap_or((words, ""));
        if word.is_empty() {
            return Err(l.err(format!("`stack` needs {fields} figures and its addresses")));
        }
        *v = l.num_of(word)?;
        words = after;
    }
    let frames = hex_words(words).map_err(|a| l.err(format!("bad stack address {a:?}")))?;
    if frames.is_empty() {
        return Err(l.err("a `stack` has no addresses"));
    }
    Ok(Stack {
        frames,
        counts: SiteCounts::from_fields(c),
        lifetimes: Lifetimes::default(),
    })
}

/// `lifetimes FREED_PER_DECADE... TICKS`.
fn lifetimes(l: &Line<'_>) -> Result<Lifetimes, ParseError> {
    const NEEDS: &str = "`lifetimes` needs a count per decade (9) and the sum of ticks";
    let mut f = l.rest.split(' ').filter(|w| !w.is_empty());
    let mut v = [0u64; DECADES + 1];
    for x in &mut v {
        *x = l.num_of(f.next().ok_or_else(|| l.err(NEEDS))?)?;
    }
    if f.next().is_some() {
        return Err(l.err(NEEDS));
    }
    let mut freed = [0u64; DECADES];
    freed.copy_from_slice(&v[..DECADES]);
    Ok(Lifetimes {
        freed,
        ticks: v[DECADES],
    })
}

/// `tl T_NS LIVE_BYTES RSS_BYTES`, in time order after the points so far.
fn timeline_point(timeline: &Timeline, l: &Line<'_>) -> Result<TimelinePoint, ParseError> {
    const NEEDS: &str = "`tl` needs three numbers: ns since start-up, live bytes, resident bytes";
    let mut f = l.rest.split(' ').filter(|w| !w.is_empty());
    let mut v = [0u64; 3];
    for x in &mut v {
        *x = l.num_of(f.next().ok_or_else(|| l.err(NEEDS))?)?;
    }
    if f.next().is_some() {
        return Err(l.err(NEEDS));
    }
    let [t_ns, live_bytes, rss_bytes] = v;
    if timeline.points.last().is_some_and(|p| p.t_ns > t_ns) {
        return Err(l.err(format!(
            "timeline point at {t_ns} ns comes after a later one"
        )));
    }
    Ok(TimelinePoint {
        t_ns,
        live_bytes,
        rss_bytes,
        temporary: 0,
    })
}

/// `timeline_temporary N...`: one count per `tl` point read, in order.
fn timeline_temporary(timeline: &mut Timeline, l: &Line<'_>) -> Result<(), ParseError> {
    let counts = l
        .rest
        .split(' ')
        .filter(|w| !w.is_empty())
        .map(|w| l.num_of(w))
        .collect::<Result<Vec<u64>, _>>()?;
    if counts.len() != timeline.points.len() {
        return Err(l.err(format!(
            "`timeline_temporary` has {} counts for {} timeline points",
            counts.len(),
            timeline.points.len()
        )));
    }
    for (p, n) in timeline.points.iter_mut().zip(counts) {
        p.temporary = n;
    }
    timeline.temporary_counted = true;
    Ok(())
}

/// One allocator reading's lines as parsed so far: its header line's time
/// and live bytes, and its figures by name.
#[derive(Default)]
struct ReadingLines {
    at: Option<(u64, u64)>,
    fields: Vec<(String, u64)>,
}

impl ReadingLines {
    /// The reading, if its header line was there and `backend` is one this
    /// version knows (else its figures cannot be named).
    fn reading(&self, backend: Option<Backend>) -> Option<AllocatorReading> {
        let ((t_ns, live_bytes), backend) = self.at.zip(backend)?;
        Some(AllocatorReading {
            t_ns,
            live_bytes,
            stats: AllocatorStats::from_fields(
                backend,
                self.fields.iter().map(|(k, v)| (k.as_str(), *v)),
            )?,
        })
    }

    /// Reads one of the reading's `STAT NAME VALUE` lines, which must come
    /// after its `header` line.
    fn field(&mut self, l: &Line<'_>, header: Key) -> Result<(), ParseError> {
        if self.at.is_none() {
            return Err(l.err(format!(
                "`{}` comes before its `{}` line",
                l.key,
                header.name()
            )));
        }
        let (name, v) = l.two("a name and a number")?;
        self.fields.push((name.to_string(), l.num_of(v)?));
        Ok(())
    }
}

/// What each byte is to [`hex_words`]: a hex digit's value, [`SPACE`] or
/// [`NOT_HEX`].
const HEX_DIGITS: [u8; 256] = {
    let mut t = [NOT_HEX; 256];
    let mut b = 0;
    while b < 256 {
        t[b] = match b as u8 {
            c @ b'0'..=b'9' => c - b'0',
            c @ b'a'..=b'f' => c - b'a' + 10,
            c @ b'A'..=b'F' => c - b'A' + 10,
            b' ' => SPACE,
            _ => NOT_HEX,
        };
        b += 1;
    }
    t
};
const SPACE: u8 = 16;
const NOT_HEX: u8 = 17;

/// The hex numbers of `s`, separated by spaces (a stack's addresses), or
/// the first word that is not one (at most 16 hex digits). A byte loop
/// over a table rather than `split` and `from_str_radix`: a deep-stacked
/// profile is mostly addresses, and reading them was the most of parsing
/// it.
pub(super) fn hex_words(s: &str) -> Result<Vec<u64>, &str> {
    let bytes = s.as_bytes();
    // The writer writes 12 digits and a space for most addresses.
    let mut out = Vec::with_capacity(bytes.len() / 13 + 1);
    let mut i = 0;
    while i < bytes.len() {
        let start = i;
        let mut v: u64 = 0;
        while i < bytes.len() {
            let d = HEX_DIGITS[usize::from(bytes[i])];
            if d >= SPACE {
                if d == NOT_HEX {
                    let end = s[start..].find(' ').map_or(s.len(), |e| start + e);
                    return Err(&s[start..end]);
                }
                break;
            }
            v = v << 4 | u64::from(d);
            i += 1;
        }
        match i - start {
            0 => {}
            1..=16 => out.push(v),
            _ => return Err(&s[start..i]),
        }
        i += 1; // the space, or past the end
    }
    Ok(out)
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
        http: None,
        exec: None,
        unprofiled_children: Vec::new(),
        recording: Recording::Exact,
        totals: Totals::default(),
        stacks: Stacks::default(),
        timeline: Timeline::default(),
        allocator_stats: None,
        allocator_stats_at_peak: None,
    }
}
