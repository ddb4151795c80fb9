//! allocmux's environment variables: their names, and [`Settings`], the
//! one reading of them that the shim, `allocmux::Profiler` and
//! `allocmux::Switchable` share (and the command line, to know what a
//! child will do).
//!
//! Everything here takes the values' bytes and allocates nothing, so the
//! shim can read its settings inside the process's first `malloc`.
//!
//! # Defaults that differ on purpose
//!
//! [`Settings::from_env`] takes the [`Reader`], and only these differ:
//!
//! | setting | shim | `Profiler` |
//! |---|---|---|
//! | `ALLOCMUX_STACKS` unset | off, or sample when `ALLOCMUX_HTTP` or `ALLOCMUX_OTLP` is set (the endpoint serves stacks, pushes carry them) | sample (a profiler exists to record stacks) |
//! | `ALLOCMUX_SAMPLE_BYTES` | 1 to [`MAX_SAMPLE_BYTES`] | any positive number |
//!
//! The shim sits under every program of a run, where stacks cost, so it
//! records none unless asked. Every other default is the same for both:
//! the system allocator, exact recording (sampled when serving sampled
//! stacks), [`DEFAULT_SAMPLE_BYTES`], [`DEFAULT_TIME_SAMPLE_MEAN`], no
//! exact prefix, no output template, no endpoint. An empty value counts as
//! unset; an invalid one gets the default, and [`Settings::problems`] says
//! so, once, in the reader's words.

use core::fmt;
use core::net::{Ipv4Addr, SocketAddr};

use crate::Backend;
use crate::profile::StackMode;

/// Which allocator the shim and `allocmux::Switchable` use.
pub const ALLOCATOR: &str = "ALLOCMUX_ALLOCATOR";
/// Whether and how call stacks are recorded: `off`, `sample`, `exact`.
pub const STACKS: &str = "ALLOCMUX_STACKS";
/// Mean bytes between sampled allocations in `sample` mode.
pub const SAMPLE_BYTES: &str = "ALLOCMUX_SAMPLE_BYTES";
/// In `sample` mode, how many allocations are recorded exactly before
/// sampling starts (0, the default: none).
pub const EXACT_FIRST: &str = "ALLOCMUX_EXACT_FIRST";
/// Mean calls between two timed allocator calls.
pub const TIME_SAMPLE: &str = "ALLOCMUX_TIME_SAMPLE";
/// The profile's path template (`%p` for the pid, `%%` for `%`).
pub const OUTPUT: &str = "ALLOCMUX_OUTPUT";
/// `ADDR:PORT` of the live `/debug/pprof` endpoint (port 0: any free one).
pub const HTTP: &str = "ALLOCMUX_HTTP";
/// The recording level: `exact` (or `on`), `sampled`, or `off` (the shim
/// only forwards to the allocator, recording nothing).
pub const RECORD: &str = "ALLOCMUX_RECORD";
/// Push OTLP profiles to an OpenTelemetry Collector: its URL
/// (`http://ADDR:PORT[/PATH]`), or `on` for the one the `OTEL_EXPORTER_OTLP_*`
/// variables name.
pub const OTLP: &str = "ALLOCMUX_OTLP";
/// Seconds between two OTLP pushes.
pub const OTLP_INTERVAL: &str = "ALLOCMUX_OTLP_INTERVAL";
/// Seconds between two OTLP pushes when `ALLOCMUX_OTLP_INTERVAL` does not
/// say.
pub const DEFAULT_OTLP_INTERVAL_S: u64 = 60;
/// The longest `ALLOCMUX_OTLP_INTERVAL`: a day.
pub const MAX_OTLP_INTERVAL_S: u64 = 86_400;

/// How much the shim records per call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Level {
    /// Nothing: the allocator switch alone.
    Off,
    /// Only the stack sample: every figure estimated from it (live
    /// profiles, cheap enough to leave on).
    Sampled,
    /// Every call counted exactly.
    Exact,
}

/// Mean bytes between sampled allocations when `ALLOCMUX_SAMPLE_BYTES` does
/// not say: jemalloc's `lg_prof_sample` default.
pub const DEFAULT_SAMPLE_BYTES: u64 = 512 * 1024;
/// The largest `ALLOCMUX_SAMPLE_BYTES` the shim takes.
pub const MAX_SAMPLE_BYTES: u64 = 1 << 40;
/// The largest `ALLOCMUX_EXACT_FIRST`.
pub const MAX_EXACT_FIRST: u64 = 1 << 40;

/// The largest `ALLOCMUX_TIME_SAMPLE`.
pub const MAX_TIME_SAMPLE: u64 = 1 << 30;
/// Mean calls between two timed allocator calls when `ALLOCMUX_TIME_SAMPLE`
/// does not say.
pub const DEFAULT_TIME_SAMPLE_MEAN: u32 = 256;

/// Who reads the settings: the defaults that differ on purpose (see the
/// module's table).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reader {
    /// The preload shim (and `allocmux::Switchable`, which reads only the
    /// allocator).
    Shim,
    /// `allocmux::Profiler`.
    Profiler,
}

/// Every allocmux setting, read from the environment at once with the
/// defaults of one [`Reader`].
#[derive(Clone, Copy, Debug)]
pub struct Settings<'a> {
    /// `ALLOCMUX_ALLOCATOR`.
    pub allocator: Backend,
    /// `ALLOCMUX_RECORD`, or where it is unset, `sampled` for a process
    /// serving `/debug/pprof` whose stacks are sampled, else `exact`.
    pub level: Level,
    /// `ALLOCMUX_STACKS`, sampling every `ALLOCMUX_SAMPLE_BYTES` on average.
    pub stacks: StackMode,
    /// `ALLOCMUX_SAMPLE_BYTES`: the mean bytes between samples, whatever
    /// the stack mode (a direct shim of sampled hooks samples at it).
    pub sample_bytes: u64,
    /// `ALLOCMUX_EXACT_FIRST`: in sample mode, the allocations recorded
    /// exactly before sampling starts.
    pub exact_first: u64,
    /// `ALLOCMUX_TIME_SAMPLE`.
    pub time_sample_mean: u32,
    /// `ALLOCMUX_OUTPUT`, the profile's path template.
    pub output: Option<&'a [u8]>,
    /// `ALLOCMUX_HTTP`, the live endpoint's address as given (see
    /// [`parse_http_address`]).
    pub http: Option<&'a [u8]>,
    /// `ALLOCMUX_OTLP`, as given.
    pub otlp: Option<&'a [u8]>,
    /// `ALLOCMUX_OTLP_INTERVAL`.
    pub otlp_interval_s: u64,
    problems: [Option<Problem<'a>>; PROBLEM_SLOTS],
}

/// One slot per variable that can hold a bad value.
const PROBLEM_SLOTS: usize = 7;

/// A value a [`Settings`] could not use, and what it took instead.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Problem<'a> {
    /// The variable's name.
    pub name: &'static str,
    /// Its value.
    pub value: &'a [u8],
    /// What the value should have been.
    pub expected: Expected,
    /// What the setting is instead.
    pub using: Using,
}

/// What a setting is when its value cannot be used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Using {
    /// A value or phrase: `system`, `off`, `the default`.
    Word(&'static str),
    /// A number.
    Number(u64),
}

impl fmt::Display for Using {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Using::Word(w) => f.write_str(w),
            Using::Number(n) => write!(f, "{n}"),
        }
    }
}

/// What a variable takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expected {
    /// One of these words.
    Word(&'static str),
    /// A whole number in this range.
    Number(u64, u64),
}

/// One line, as the shim and the `Profiler` print it after `allocmux: `:
/// `unknown ALLOCMUX_STACKS="all" (expected off, sample or exact); using off`.
impl fmt::Display for Problem<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The valid UTF-8 prefix: quoting allocates nothing.
        let shown = self.value.utf8_chunks().next().map_or("", |c| c.valid());
        match self.expected {
            Expected::Word(words) => write!(
                f,
                "unknown {}={shown:?} (expected {words}); using {}",
                self.name, self.using
            ),
            Expected::Number(min, max) => write!(
                f,
                "{}={shown:?} is not a whole number from {min} to {max}; using {}",
                self.name, self.using
            ),
        }
    }
}

impl<'a> Settings<'a> {
    /// Reads every setting through `var` (a variable's value by name, `None`
    /// if unset), with `reader`'s defaults. Allocates nothing.
    pub fn from_env(reader: Reader, var: impl Fn(&str) -> Option<&'a [u8]>) -> Settings<'a> {
        let var = |name: &str| var(name).filter(|v| !v.is_empty());
        let mut problems = [None; PROBLEM_SLOTS];
        let mut slots = problems.iter_mut();
        let mut complain = |name, value, expected, using| {
            if let Some(slot) = slots.next() {
                *slot = Some(Problem {
                    name,
                    value,
                    expected,
                    using,
                });
            }
        };

        let allocator = match var(ALLOCATOR) {
            None => Backend::System,
            Some(v) => Backend::from_name(v).unwrap_or_else(|| {
                let words = Expected::Word("system, jemalloc or mimalloc");
                complain(ALLOCATOR, v, words, Using::Word("system"));
                Backend::System
            }),
        };
        let max_sample_bytes = match reader {
            Reader::Shim => MAX_SAMPLE_BYTES,
            Reader::Profiler => u64::MAX,
        };
        let mut number = |name, min, max, default: u64| match var(name) {
            None => default,
            Some(v) => parse_number(v, min, max).unwrap_or_else(|| {
                complain(name, v, Expected::Number(min, max), Using::Number(default));
                default
            }),
        };
        let sample_bytes = number(SAMPLE_BYTES, 1, max_sample_bytes, DEFAULT_SAMPLE_BYTES);
        let exact_first = number(EXACT_FIRST, 0, MAX_EXACT_FIRST, 0);
        let time_sample_mean = number(
            TIME_SAMPLE,
            1,
            MAX_TIME_SAMPLE,
            DEFAULT_TIME_SAMPLE_MEAN as u64,
        ) as u32;
        let otlp_interval_s = number(
            OTLP_INTERVAL,
            1,
            MAX_OTLP_INTERVAL_S,
            DEFAULT_OTLP_INTERVAL_S,
        );
        let mean_bytes = sample_bytes;
        let http = var(HTTP);
        let otlp = var(OTLP);
        // Serving or pushing profiles: stacks are what they carry.
        let live = http.is_some() || otlp.is_some();
        let default_stacks = match (reader, live) {
            (Reader::Profiler, _) | (Reader::Shim, true) => StackMode::Sample { mean_bytes },
            (Reader::Shim, false) => StackMode::Off,
        };
        let stacks = match var(STACKS) {
            None => default_stacks,
            Some(v) => StackMode::from_env_value(v, mean_bytes).unwrap_or_else(|| {
                let using = Using::Word(default_stacks.env_value());
                complain(STACKS, v, Expected::Word("off, sample or exact"), using);
                default_stacks
            }),
        };
        let sampled_stacks = matches!(stacks, StackMode::Sample { .. });
        let default_level = if live && exact_first == 0 && sampled_stacks {
            Level::Sampled
        } else {
            Level::Exact
        };
        let level = match var(RECORD) {
            None => default_level,
            Some(v) => parse_record(v).unwrap_or_else(|| {
                let words = Expected::Word("exact, sampled or off");
                complain(RECORD, v, words, Using::Word("the default"));
                default_level
            }),
        };
        Settings {
            allocator,
            level,
            stacks,
            sample_bytes,
            exact_first,
            time_sample_mean,
            output: var(OUTPUT),
            http,
            otlp,
            otlp_interval_s,
            problems,
        }
    }

    /// The values that could not be used, each once, in the order read.
    pub fn problems(&self) -> impl Iterator<Item = &Problem<'a>> {
        self.problems.iter().flatten()
    }

    /// The stack mode of the hooks the shim installs: [`Settings::stacks`],
    /// but exact mode's where sample mode records an exact prefix first
    /// (exact mode's hooks record it), and sample mode's at the sampled
    /// level. The command line picks the library to preload by it.
    pub fn hooks_mode(&self) -> StackMode {
        match (self.level, self.stacks) {
            (Level::Sampled, _) => StackMode::Sample {
                mean_bytes: self.sample_bytes,
            },
            (_, StackMode::Sample { .. }) if self.exact_first > 0 => StackMode::Exact,
            (_, mode) => mode,
        }
    }
}

impl StackMode {
    /// The mode an `ALLOCMUX_STACKS` value names (`off`, `sample`, `exact`),
    /// sampling with `mean_bytes`; `None` for anything else.
    pub fn from_env_value(value: &[u8], mean_bytes: u64) -> Option<StackMode> {
        match value {
            b"off" => Some(StackMode::Off),
            b"sample" => Some(StackMode::Sample { mean_bytes }),
            b"exact" => Some(StackMode::Exact),
            _ => None,
        }
    }

    /// The `ALLOCMUX_STACKS` value that names this mode.
    pub const fn env_value(self) -> &'static str {
        match self {
            StackMode::Off => "off",
            StackMode::Sample { .. } => "sample",
            StackMode::Exact => "exact",
        }
    }
}

/// The socket address an `ALLOCMUX_HTTP` value names: `ADDR:PORT`,
/// `[IPv6]:PORT` or `localhost:PORT` (port 0: any free one). core's
/// parser allocates nothing.
pub fn parse_http_address(value: &[u8]) -> Option<SocketAddr> {
    let spec = core::str::from_utf8(value).ok()?;
    match spec.strip_prefix("localhost:") {
        Some(port) => Some(SocketAddr::new(
            Ipv4Addr::LOCALHOST.into(),
            port.parse().ok()?,
        )),
        None => spec.parse().ok(),
    }
}

impl Level {
    /// Its `ALLOCMUX_RECORD` value.
    pub const fn name(self) -> &'static str {
        match self {
            Level::Off => "off",
            Level::Sampled => "sampled",
            Level::Exact => "exact",
        }
    }
}

/// The level an `ALLOCMUX_RECORD` value names (`on` is `exact`); `None`
/// for anything else.
pub fn parse_record(value: &[u8]) -> Option<Level> {
    match value.trim_ascii() {
        b"on" | b"exact" => Some(Level::Exact),
        b"sampled" => Some(Level::Sampled),
        b"off" => Some(Level::Off),
        _ => None,
    }
}

/// A whole number from `min` to `max`, surrounding white space allowed, as
/// the numeric variables take them.
pub fn parse_number(value: &[u8], min: u64, max: u64) -> Option<u64> {
    core::str::from_utf8(value)
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .filter(|n| (min..=max).contains(n))
}

/// Expands `%p` (the pid) and `%%` in an output template into `out`, left
/// without a terminator; other `%` sequences stay as they are. `None` if the
/// result does not fit with one byte to spare (for a terminator).
pub fn expand_output_template(template: &[u8], pid: u32, out: &mut [u8]) -> Option<usize> {
    let mut len = 0;
    let mut put = |bytes: &[u8], len: &mut usize| -> Option<()> {
        let end = len.checked_add(bytes.len()).filter(|&e| e < out.len())?;
        out[*len..end].copy_from_slice(bytes);
        *len = end;
        Some(())
    };
    let mut i = 0;
    while i < template.len() {
        match (template[i], template.get(i + 1)) {
            (b'%', Some(b'p')) => {
                let mut digits = [0u8; 10];
                let mut n = pid;
                let mut d = digits.len();
                loop {
                    d -= 1;
                    digits[d] = b'0' + (n % 10) as u8;
                    n /= 10;
                    if n == 0 {
                        break;
                    }
                }
                put(&digits[d..], &mut len)?;
                i += 2;
            }
            (b'%', Some(b'%')) => {
                put(b"%", &mut len)?;
                i += 2;
            }
            (c, _) => {
                put(&[c], &mut len)?;
                i += 1;
            }
        }
    }
    Some(len)
}

/// The room [`expand_output_template`] needs for any pid: a `%p` (two bytes)
/// becomes at most ten digits, and one byte stays spare.
pub const fn expanded_template_capacity(template_len: usize) -> usize {
    template_len * 5 + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expand(t: &str, pid: u32) -> String {
        let mut out = [0u8; 64];
        let n = expand_output_template(t.as_bytes(), pid, &mut out).unwrap();
        String::from_utf8(out[..n].to_vec()).unwrap()
    }

    #[test]
    fn templates() {
        assert_eq!(expand("/tmp/a.%p.prof", 4242), "/tmp/a.4242.prof");
        assert_eq!(expand("%p%p", 0), "00");
        assert_eq!(expand("100%%-%x-%", 7), "100%-%x-%");
        assert!(expand_output_template(&[b'a'; 64], 1, &mut [0u8; 64]).is_none());
        let t = b"%p%p%p";
        let mut out = [0u8; expanded_template_capacity(6)];
        assert_eq!(expand_output_template(t, u32::MAX, &mut out), Some(30));
    }

    #[test]
    fn stack_modes() {
        assert_eq!(StackMode::from_env_value(b"off", 8), Some(StackMode::Off));
        assert_eq!(
            StackMode::from_env_value(b"sample", 8),
            Some(StackMode::Sample { mean_bytes: 8 })
        );
        assert_eq!(
            StackMode::from_env_value(b"exact", 8),
            Some(StackMode::Exact)
        );
        assert_eq!(StackMode::from_env_value(b"", 8), None);
        assert_eq!(StackMode::from_env_value(b"all", 8), None);
    }

    #[test]
    fn numbers() {
        assert_eq!(parse_number(b" 42\n", 1, 100), Some(42));
        assert_eq!(parse_number(b"0", 1, 100), None);
        assert_eq!(parse_number(b"101", 1, 100), None);
        assert_eq!(parse_number(b"-1", 1, 100), None);
        assert_eq!(parse_number(b"\xff", 1, 100), None);
    }
}
