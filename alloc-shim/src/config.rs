//! Configuration from the environment, read once, without allocating.
//!
//! Bad values are reported once on stderr in plain words and replaced by the
//! safe default; the host program is never stopped for them.

use core::ffi::{CStr, c_char};

use allocmux::Backend;
use allocmux::profile::StackMode;
use allocmux::recorder::env::{self, DEFAULT_SAMPLE_BYTES, MAX_SAMPLE_BYTES, parse_number};

use crate::fmt::{Bytes, warn};

unsafe extern "C" {
    static environ: *const *const c_char;
}

/// The settings the constructor reads.
#[derive(Debug)]
pub struct Config {
    /// The profile path template, if output to a file is wanted.
    pub output: Option<&'static [u8]>,
    /// Mean calls between timed calls.
    pub time_sample_mean: u32,
    /// Where to serve the live `/debug/pprof` endpoint, if anywhere.
    pub http: Option<&'static [u8]>,
}

/// Whether the process runs in secure-execution mode (setuid, setgid or
/// file capabilities): then the shim records and writes nothing.
pub fn secure_execution() -> bool {
    // SAFETY: getauxval has no preconditions.
    unsafe { libc::getauxval(libc::AT_SECURE) != 0 }
}

/// The backend named by `ALLOCMUX_ALLOCATOR`, silently the system
/// allocator if unset or unknown (the constructor reports unknown names).
/// Called at the first allocation, possibly before libc has set `environ`.
pub fn allocator() -> Backend {
    let env = environment_now();
    Backend::from_name(lookup(env, env::ALLOCATOR.as_bytes()).unwrap_or(b""))
        .unwrap_or(Backend::System)
}

/// The recording level (`ALLOCMUX_RECORD`, defaulting by
/// `allocmux::recorder::env::shim_record_level`; the constructor reports
/// bad values). Read at the first allocation.
pub fn record_level() -> env::Level {
    let env = environment_now();
    env::shim_record_level(|name| lookup(env, name.as_bytes()))
}

/// The stack mode from `ALLOCMUX_STACKS` and `ALLOCMUX_SAMPLE_BYTES`,
/// silently `Off` for anything unknown (the constructor reports bad
/// values). Read at the first allocation, with the backend. Off by
/// default, unlike a `Profiler`'s (see `allocmux::recorder::env`), except
/// that a process serving `/debug/pprof` (`ALLOCMUX_HTTP`) samples, as Go
/// does, since the endpoint serves stacks.
pub fn stack_mode() -> StackMode {
    let env = environment_now();
    env::shim_stack_mode(|name| lookup(env, name.as_bytes()))
}

/// Sample mode at `ALLOCMUX_SAMPLE_BYTES`, whatever `ALLOCMUX_STACKS`
/// says: a direct shim of sampled hooks samples.
pub fn sample_mode() -> StackMode {
    let env = environment_now();
    StackMode::Sample {
        mean_bytes: env::shim_sample_bytes(lookup(env, env::SAMPLE_BYTES.as_bytes())),
    }
}

/// How many allocations sample mode records exactly first
/// (`ALLOCMUX_EXACT_FIRST`; see `allocmux::recorder::stacks::configure`),
/// silently 0 if unset or invalid (the constructor reports bad values).
pub fn exact_first() -> u64 {
    let env = environment_now();
    env::shim_exact_first(lookup(env, env::EXACT_FIRST.as_bytes()))
}

/// The environment block: `environ`, or before libc has set it, the one
/// the process started with.
fn environment_now() -> *const *const c_char {
    // SAFETY: reading the `environ` pointer itself.
    let env = unsafe { environ };
    if env.is_null() {
        initial_environment()
    } else {
        env
    }
}

/// The environment the process started with, found from the start of its
/// stack (`argc`, `argv`, NULL, `envp`): used only for allocations made
/// before libc's own start-up has set `environ`.
fn initial_environment() -> *const *const c_char {
    unsafe extern "C" {
        static __libc_stack_end: *const usize;
    }
    // SAFETY: ld.so sets __libc_stack_end to the initial stack, which holds
    // argc followed by argv's pointers, a NULL, and the environment.
    unsafe {
        let sp = __libc_stack_end;
        if sp.is_null() {
            return core::ptr::null();
        }
        let argc = *sp;
        sp.add(1 + argc + 1) as *const *const c_char
    }
}

/// Finds `NAME=value` in a NULL-terminated environment block.
fn lookup(env: *const *const c_char, name: &[u8]) -> Option<&'static [u8]> {
    if env.is_null() {
        return None;
    }
    let mut p = env;
    // SAFETY: the block is NULL-terminated and its strings NUL-terminated,
    // and they live as long as the process.
    unsafe {
        while !(*p).is_null() {
            let entry = CStr::from_ptr(*p).to_bytes();
            if entry.len() > name.len() && entry.starts_with(name) && entry[name.len()] == b'=' {
                return Some(&entry[name.len() + 1..]);
            }
            p = p.add(1);
        }
    }
    None
}

/// Reads every setting from the environment the constructor was given,
/// warning once about each value it cannot use.
pub fn read(envp: *const *const c_char) -> Config {
    let env = if envp.is_null() {
        // SAFETY: reading the `environ` pointer itself.
        unsafe { environ }
    } else {
        envp
    };
    let get = |name: &[u8]| lookup(env, name).filter(|v| !v.is_empty());

    if let Some(v) = get(env::ALLOCATOR.as_bytes())
        && Backend::from_name(v).is_none()
    {
        warn(format_args!(
            "unknown ALLOCMUX_ALLOCATOR={:?} (expected system, jemalloc or mimalloc); using system",
            Bytes(v).to_str_lossy()
        ));
    }
    if let Some(v) = get(env::RECORD.as_bytes())
        && env::parse_record(v).is_none()
    {
        warn(format_args!(
            "unknown ALLOCMUX_RECORD={:?} (expected exact, sampled or off); using the default",
            Bytes(v).to_str_lossy()
        ));
    }
    // The stack settings take effect at the first allocation
    // (`stack_mode`); here they are only checked, to warn once.
    if let Some(v) = get(env::STACKS.as_bytes())
        && StackMode::from_env_value(v, DEFAULT_SAMPLE_BYTES).is_none()
    {
        warn(format_args!(
            "unknown ALLOCMUX_STACKS={:?} (expected off, sample or exact); using off",
            Bytes(v).to_str_lossy()
        ));
    }
    let _exact_first = number(
        get(env::EXACT_FIRST.as_bytes()),
        env::EXACT_FIRST,
        0,
        0,
        env::MAX_EXACT_FIRST,
    );
    let _sample_bytes = number(
        get(env::SAMPLE_BYTES.as_bytes()),
        env::SAMPLE_BYTES,
        DEFAULT_SAMPLE_BYTES,
        1,
        MAX_SAMPLE_BYTES,
    );
    let time_sample_mean = number(
        get(env::TIME_SAMPLE.as_bytes()),
        env::TIME_SAMPLE,
        allocmux::recorder::DEFAULT_TIME_SAMPLE_MEAN as u64,
        1,
        env::MAX_TIME_SAMPLE,
    ) as u32;
    let output = get(env::OUTPUT.as_bytes()).filter(|v| {
        let ok = v.len() < 4000;
        if !ok {
            warn(format_args!(
                "ALLOCMUX_OUTPUT is longer than 4000 bytes; no profile will be written"
            ));
        }
        ok
    });
    Config {
        output,
        time_sample_mean,
        http: get(env::HTTP.as_bytes()),
    }
}

fn number(v: Option<&[u8]>, name: &str, default: u64, min: u64, max: u64) -> u64 {
    let Some(v) = v else { return default };
    match parse_number(v, min, max) {
        Some(n) => n,
        None => {
            warn(format_args!(
                "{name}={:?} is not a whole number from {min} to {max}; using {default}",
                Bytes(v).to_str_lossy()
            ));
            default
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn environment_lookup() {
        let entries = [
            c"A=1".as_ptr(),
            c"ALLOCMUX_X=yes".as_ptr(),
            c"ALLOCMUX_XY=no".as_ptr(),
            core::ptr::null(),
        ];
        assert_eq!(lookup(entries.as_ptr(), b"ALLOCMUX_X"), Some(&b"yes"[..]));
        assert_eq!(lookup(entries.as_ptr(), b"ALLOCMUX_XY"), Some(&b"no"[..]));
        assert_eq!(lookup(entries.as_ptr(), b"ALLOCMUX"), None);
    }
}
