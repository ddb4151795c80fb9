//! The values of allocmux's environment variables, parsed once for the shim
//! and for [`Profiler`](crate::Profiler).
//!
//! Every parser here takes the value's bytes and allocates nothing, so the
//! shim can call it inside the process's first `malloc`. Where a variable is
//! unset, empty or invalid is the caller's business: the defaults differ on
//! purpose. The shim records no stacks unless `ALLOCMUX_STACKS` asks (it sits
//! under every program of a run, and stacks cost), while a `Profiler` exists
//! to record stacks, so it samples unless told otherwise. The shim also caps
//! `ALLOCMUX_SAMPLE_BYTES` at [`MAX_SAMPLE_BYTES`]; a `Profiler` takes any
//! positive number.

use core::net::{Ipv4Addr, SocketAddr};

use crate::profile::StackMode;

/// Which allocator the shim and [`Switchable`](crate::Switchable) use.
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

/// The shim's exact prefix from the value of `ALLOCMUX_EXACT_FIRST`: 0
/// (none) where it is unset or invalid.
pub fn shim_exact_first(value: Option<&[u8]>) -> u64 {
    value
        .and_then(|v| parse_number(v, 0, MAX_EXACT_FIRST))
        .unwrap_or(0)
}
/// The largest `ALLOCMUX_TIME_SAMPLE`.
pub const MAX_TIME_SAMPLE: u64 = 1 << 30;

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

/// The shim's stack mode, from its variables as `var` looks them up:
/// `ALLOCMUX_STACKS`, sampling every `ALLOCMUX_SAMPLE_BYTES` on average;
/// where `ALLOCMUX_STACKS` is unset or invalid, off, or sample when
/// `ALLOCMUX_HTTP` asks for a live endpoint (which serves sampled stacks).
/// The CLI resolves a child's mode with it too, to pick the library that
/// serves that mode.
pub fn shim_stack_mode<'a>(var: impl Fn(&str) -> Option<&'a [u8]>) -> StackMode {
    let mean_bytes = shim_sample_bytes(var(SAMPLE_BYTES));
    let default = match var(HTTP) {
        Some(v) if !v.is_empty() => StackMode::Sample { mean_bytes },
        _ => StackMode::Off,
    };
    var(STACKS)
        .and_then(|v| StackMode::from_env_value(v, mean_bytes))
        .unwrap_or(default)
}

/// The stack mode of the hooks the shim installs for its variables (as
/// `var` looks them up): [`shim_stack_mode`], but exact mode's where sample
/// mode records an exact prefix first (`ALLOCMUX_EXACT_FIRST`), which
/// exact mode's hooks record. The CLI picks the library to preload by it.
pub fn shim_hooks_mode<'a>(var: impl Fn(&str) -> Option<&'a [u8]>) -> StackMode {
    if shim_record_level(&var) == Level::Sampled {
        return StackMode::Sample {
            mean_bytes: shim_sample_bytes(var(SAMPLE_BYTES)),
        };
    }
    match shim_stack_mode(&var) {
        StackMode::Sample { .. } if shim_exact_first(var(EXACT_FIRST)) > 0 => StackMode::Exact,
        mode => mode,
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

/// The shim's recording level, from its variables as `var` looks them up:
/// `ALLOCMUX_RECORD`, or where it is unset or invalid, `sampled` for a
/// process serving `/debug/pprof` (`ALLOCMUX_HTTP`) whose stacks are
/// sampled (the default there, see [`shim_stack_mode`]), else `exact`.
pub fn shim_record_level<'a>(var: impl Fn(&str) -> Option<&'a [u8]>) -> Level {
    if let Some(level) = var(RECORD).and_then(parse_record) {
        return level;
    }
    let serving = var(HTTP).is_some_and(|v| !v.is_empty());
    let sampled_stacks = matches!(shim_stack_mode(&var), StackMode::Sample { .. })
        && shim_exact_first(var(EXACT_FIRST)) == 0;
    if serving && sampled_stacks {
        Level::Sampled
    } else {
        Level::Exact
    }
}

/// The shim's mean bytes between samples from the value of
/// `ALLOCMUX_SAMPLE_BYTES`: [`DEFAULT_SAMPLE_BYTES`] where it is unset or
/// invalid.
pub fn shim_sample_bytes(value: Option<&[u8]>) -> u64 {
    value
        .and_then(|v| parse_number(v, 1, MAX_SAMPLE_BYTES))
        .unwrap_or(DEFAULT_SAMPLE_BYTES)
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
