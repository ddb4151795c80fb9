//! Writing profiles. The shim writes from inside the host's `malloc`, so
//! nothing here allocates but [`to_string`] and [`ProcessProfile::write`]
//! (which the readers' side uses).

use core::fmt::{self, Write};

use super::escape::{decode_hex, write_escaped};
use super::keys::{Key, for_each_profile_key};
use super::{
    AllocatorReading, FORMAT_VERSION, Header, MAGIC, ModuleRef, ProcessProfile, Recording,
    StackMode,
};
use crate::func::Func;
use crate::lifetimes::Lifetimes;
use crate::site_counts::SiteCounts;
use crate::timeline::TimelinePoint;
use crate::totals::Totals;

/// `write_totals`, from the list of keys.
macro_rules! define_write_totals {
    (
        lines { $($line:ident => $Variant:ident,)* }
        per_function { $($(#[$fm:meta])* $f:ident,)* }
        per_process { $($(#[$pm:meta])* $p:ident,)* }
        per_size_bucket { $($(#[$bm:meta])* $b:ident,)* }
    ) => {
        /// Writes the totals' lines, in the list's order: a line per
        /// function and per size bucket whose figure is not 0, a line
        /// per per-process total.
        fn write_totals<W: Write>(w: &mut W, t: &Totals) -> fmt::Result {
            $(
                for f in Func::ALL {
                    let n = t.$f[f as usize];
                    if n != 0 {
                        writeln!(w, concat!(stringify!($f), " {} {}"), f.name(), n)?;
                    }
                }
            )*
            $(writeln!(w, concat!(stringify!($p), " {}"), t.$p)?;)*
            $(
                for (b, &n) in t.$b.iter().enumerate() {
                    if n != 0 {
                        writeln!(w, concat!(stringify!($b), " {} {}"), b, n)?;
                    }
                }
            )*
            Ok(())
        }
    };
}

for_each_profile_key!(define_write_totals);

/// Writes that child `pid` ran `program`, which the shim could not reach
/// (statically linked, set-id), so it left no profile of its own.
pub fn write_unprofiled_child<W: Write>(w: &mut W, pid: u32, program: &[u8]) -> fmt::Result {
    write!(w, "{} {pid} ", Key::UnprofiledChild.name())?;
    write_escaped(w, program)?;
    writeln!(w)
}

/// Writes the file header line.
pub fn write_magic<W: Write>(w: &mut W) -> fmt::Result {
    writeln!(w, "{MAGIC} {FORMAT_VERSION}")
}

/// Opens a process section and writes its header and counters; stack
/// lines may follow, then [`write_end`] closes it.
pub fn write_counters<W: Write>(w: &mut W, h: &Header<'_>, t: &Totals) -> fmt::Result {
    writeln!(w, "{}", Key::Process.name())?;
    writeln!(w, "{} {}", Key::Pid.name(), h.pid)?;
    writeln!(w, "{} {}", Key::Ppid.name(), h.ppid)?;
    write!(w, "{} ", Key::Exe.name())?;
    write_escaped(w, h.exe)?;
    write!(w, "\n{}", Key::Argv.name())?;
    for arg in h.cmdline.split(|&b| b == 0).filter(|a| !a.is_empty()) {
        w.write_char(' ')?;
        write_escaped(w, arg)?;
    }
    writeln!(w)?;
    writeln!(w, "{} {}", Key::Allocator.name(), h.allocator)?;
    writeln!(w, "{} {}", Key::State.name(), h.state.name())?;
    writeln!(w, "{} {}", Key::Threads.name(), h.threads)?;
    for (k, c) in [
        (Key::ClockStart, h.clock_start),
        (Key::ClockEnd, h.clock_end),
    ] {
        writeln!(w, "{} {} {}", k.name(), c.tsc, c.mono_ns)?;
    }
    writeln!(w, "{} {}", Key::CpuNs.name(), h.cpu_ns)?;
    writeln!(w, "{} {}", Key::MaxRssBytes.name(), h.max_rss_bytes)?;
    writeln!(w, "{} {}", Key::TimeSampleMean.name(), h.time_sample_mean)?;
    for (k, v) in [(Key::Http, h.http), (Key::Exec, h.exec)] {
        if !v.is_empty() {
            write!(w, "{} ", k.name())?;
            write_escaped(w, v)?;
            writeln!(w)?;
        }
    }
    if let Recording::Sampled {
        allocations_variance,
        bytes_variance,
    } = h.recording
    {
        writeln!(
            w,
            "{} sampled {allocations_variance:e} {bytes_variance:e}",
            Key::Recording.name()
        )?;
    }
    write_totals(w, t)
}

/// Closes a process section.
pub fn write_end<W: Write>(w: &mut W) -> fmt::Result {
    writeln!(w, "{}", Key::End.name())
}

/// Writes the allocator's statistics: the latest reading (the
/// `allocator_stats` line, then one `allocator_stat` line per figure), then
/// the one with the most live bytes (`allocator_stats_at_peak` and
/// `allocator_stat_at_peak`) unless it is the same. Goes after
/// [`write_counters`].
pub fn write_allocator_stats<W: Write>(
    w: &mut W,
    latest: Option<&AllocatorReading>,
    at_peak: Option<&AllocatorReading>,
) -> fmt::Result {
    if let Some(r) = latest {
        write_reading(w, Key::AllocatorStats, Key::AllocatorStat, r)?;
    }
    match at_peak {
        Some(r) if Some(r) != latest => {
            write_reading(w, Key::AllocatorStatsAtPeak, Key::AllocatorStatAtPeak, r)
        }
        _ => Ok(()),
    }
}

/// One reading: its `HEADER T LIVE` line, then a `STAT NAME VALUE` line per
/// figure.
fn write_reading<W: Write>(w: &mut W, header: Key, stat: Key, r: &AllocatorReading) -> fmt::Result {
    writeln!(w, "{} {} {}", header.name(), r.t_ns, r.live_bytes)?;
    for (name, v) in r.stats.fields() {
        writeln!(w, "{} {name} {v}", stat.name())?;
    }
    Ok(())
}

/// Writes the stack-recording mode line, the count of allocations
/// recorded exactly before sampling started (when not 0), the count of
/// lost stacks and, when not 0, the count of what was dropped for lack of
/// memory.
pub fn write_stack_mode<W: Write>(
    w: &mut W,
    mode: StackMode,
    exact_first: u64,
    lost: u64,
    degraded: u64,
    temporary_counted: bool,
    lifetime_ticks_per_us: u64,
) -> fmt::Result {
    match mode {
        StackMode::Off => return Ok(()),
        StackMode::Sample { mean_bytes } => {
            writeln!(w, "{} sample {mean_bytes}", Key::Stacks.name())?
        }
        StackMode::Exact => writeln!(w, "{} exact 1", Key::Stacks.name())?,
    }
    if exact_first > 0 {
        writeln!(w, "{} {exact_first}", Key::StacksExactFirst.name())?;
    }
    writeln!(w, "{} {lost}", Key::StacksLost.name())?;
    if degraded > 0 {
        writeln!(w, "{} {degraded}", Key::StacksDegraded.name())?;
    }
    // Exact stacks count their temporary allocations unless this says
    // otherwise (a profile read from format version 1, written again).
    if mode == StackMode::Exact && !temporary_counted {
        writeln!(w, "{} 0", Key::StacksTemporaryCounted.name())?;
    }
    if lifetime_ticks_per_us > 0 {
        writeln!(w, "{} {lifetime_ticks_per_us}", Key::StacksLifetimes.name())?;
    }
    Ok(())
}

/// Writes one module line (`build_id` as raw bytes, empty if none).
pub fn write_module<W: Write>(w: &mut W, m: &ModuleRef<'_>) -> fmt::Result {
    write!(
        w,
        "{} {:x} {:x} {:x} {:x} ",
        Key::Module.name(),
        m.start,
        m.end,
        m.file_offset,
        m.bias
    )?;
    if m.build_id.is_empty() {
        w.write_char('-')?;
    }
    for b in m.build_id {
        write!(w, "{b:02x}")?;
    }
    w.write_char(' ')?;
    write_escaped(w, m.path)?;
    w.write_char('\n')
}

/// Writes one stack line: its figures, then its return addresses, the
/// allocating call site first; then its `lifetimes` line, unless none is
/// counted. Formats the numbers itself: the shim writes every stack on
/// every flush, and `core::fmt` costs several times more.
pub fn write_stack<W: Write>(
    w: &mut W,
    c: &SiteCounts,
    lifetimes: &Lifetimes,
    frames: &[u64],
) -> fmt::Result {
    let mut line = LineBuf::default();
    line.push_str(w, Key::Stack.name())?;
    for v in c.fields() {
        line.number::<10, _>(w, v)?;
    }
    for &f in frames {
        line.number::<16, _>(w, f)?;
    }
    line.push_str(w, "\n")?;
    if !lifetimes.is_empty() {
        line.push_str(w, Key::Lifetimes.name())?;
        for v in lifetimes.freed {
            line.number::<10, _>(w, v)?;
        }
        line.number::<10, _>(w, lifetimes.ticks)?;
        line.push_str(w, "\n")?;
    }
    line.flush(w)
}

/// Writes a memory timeline: the `timeline` line with the sampling
/// interval, then one `tl` line per point (nothing for no points), then,
/// when `temporary_counted`, the `timeline_temporary` line. Formats the
/// numbers itself, as [`write_stack`] does: the shim writes up to
/// [`crate::timeline::CAPACITY`] points on every flush.
pub fn write_timeline<W: Write>(
    w: &mut W,
    interval_ns: u64,
    points: &[TimelinePoint],
    temporary_counted: bool,
) -> fmt::Result {
    if points.is_empty() {
        return Ok(());
    }
    let mut line = LineBuf::default();
    line.push_str(w, Key::Timeline.name())?;
    line.number::<10, _>(w, interval_ns)?;
    line.push_str(w, "\n")?;
    for p in points {
        line.push_str(w, Key::Tl.name())?;
        line.number::<10, _>(w, p.t_ns)?;
        line.number::<10, _>(w, p.live_bytes)?;
        line.number::<10, _>(w, p.rss_bytes)?;
        line.push_str(w, "\n")?;
    }
    if temporary_counted {
        line.push_str(w, Key::TimelineTemporary.name())?;
        for p in points {
            line.number::<10, _>(w, p.temporary)?;
        }
        line.push_str(w, "\n")?;
    }
    line.flush(w)
}

/// A line assembled in a fixed buffer and handed to the writer in few
/// pieces (each `write_str` checks UTF-8 and dispatches dynamically).
struct LineBuf {
    buf: [u8; 512],
    len: usize,
}

impl Default for LineBuf {
    fn default() -> Self {
        LineBuf {
            buf: [0; 512],
            len: 0,
        }
    }
}

impl LineBuf {
    fn flush<W: Write>(&mut self, w: &mut W) -> fmt::Result {
        // Only ASCII was put in.
        let s = core::str::from_utf8(&self.buf[..self.len]).map_err(|_| fmt::Error)?;
        w.write_str(s)?;
        self.len = 0;
        Ok(())
    }

    fn push_str<W: Write>(&mut self, w: &mut W, s: &str) -> fmt::Result {
        if self.len + s.len() > self.buf.len() {
            self.flush(w)?;
        }
        if s.len() > self.buf.len() {
            return w.write_str(s);
        }
        self.buf[self.len..self.len + s.len()].copy_from_slice(s.as_bytes());
        self.len += s.len();
        Ok(())
    }

    /// Appends a space and `v` in base `BASE`, 10 or 16 (lowercase). The
    /// base is a constant so that each digit costs a multiply or a shift,
    /// not a division: a deep-stacked profile is mostly numbers, and the
    /// process's exit waits for it to be written.
    fn number<const BASE: u64, W: Write>(&mut self, w: &mut W, mut v: u64) -> fmt::Result {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        const { assert!(BASE == 10 || BASE == 16) };
        let mut digits = [0u8; 21];
        let mut i = digits.len();
        loop {
            i -= 1;
            digits[i] = DIGITS[(v % BASE) as usize];
            v /= BASE;
            if v == 0 {
                break;
            }
        }
        i -= 1;
        digits[i] = b' ';
        let piece = &digits[i..];
        if self.len + piece.len() > self.buf.len() {
            self.flush(w)?;
        }
        self.buf[self.len..self.len + piece.len()].copy_from_slice(piece);
        self.len += piece.len();
        Ok(())
    }
}

impl ProcessProfile {
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
            http: self.http.as_deref().unwrap_or("").as_bytes(),
            exec: self.exec.as_deref().unwrap_or("").as_bytes(),
            recording: self.recording,
        };
        write_counters(w, &h, &self.totals)?;
        write_allocator_stats(
            w,
            self.allocator_stats.as_ref(),
            self.allocator_stats_at_peak.as_ref(),
        )?;
        for (child, program) in &self.unprofiled_children {
            write_unprofiled_child(w, *child, program.as_bytes())?;
        }
        write_timeline(
            w,
            self.timeline.interval_ns,
            &self.timeline.points,
            self.timeline.temporary_counted,
        )?;
        let st = &self.stacks;
        write_stack_mode(
            w,
            st.mode,
            st.exact_first,
            st.lost,
            st.degraded,
            st.temporary_counted,
            st.lifetime_ticks_per_us,
        )?;
        for m in &st.modules {
            let build_id = decode_hex(&m.build_id).unwrap_or_default();
            write_module(
                w,
                &ModuleRef {
                    start: m.start,
                    end: m.end,
                    file_offset: m.file_offset,
                    bias: m.bias,
                    build_id: &build_id,
                    path: m.path.as_bytes(),
                },
            )?;
        }
        for s in &st.stacks {
            write_stack(w, &s.counts, &s.lifetimes, &s.frames)?;
        }
        write_end(w)
    }
}

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
