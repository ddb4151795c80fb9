//! Configuration from the environment, read once, without allocating.
//!
//! Bad values are reported once on stderr in plain words and replaced by the
//! safe default; the host program is never stopped for them.

use core::ffi::{CStr, c_char};

unsafe extern "C" {
    static environ: *const *const c_char;
}

/// `ALLOCMUX_ALLOCATOR`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Allocator {
    /// glibc (the default).
    System,
    /// jemalloc.
    Jemalloc,
    /// mimalloc.
    Mimalloc,
}

/// `ALLOCMUX_STACKS`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stacks {
    /// No call stacks (the default).
    Off,
    /// Sampled by allocated bytes.
    Sample,
    /// Every allocation.
    Exact,
}

/// The settings the constructor reads.
#[derive(Debug)]
pub struct Config {
    /// The profile path template, if output to a file is wanted.
    pub output: Option<&'static [u8]>,
    /// Mean calls between timed calls.
    pub time_sample_mean: u32,
}

/// Whether the process runs in secure-execution mode (setuid, setgid or
/// file capabilities): then the shim records and writes nothing.
pub fn secure_execution() -> bool {
    // SAFETY: getauxval has no preconditions.
    unsafe { libc::getauxval(libc::AT_SECURE) != 0 }
}

/// The backend named by `ALLOCMUX_ALLOCATOR`, silently `System` if unset or
/// unknown (the constructor reports unknown names). Called at the first
/// allocation, possibly before libc has set `environ`.
pub fn allocator() -> Allocator {
    // SAFETY: reading the `environ` pointer itself.
    let env = unsafe { environ };
    let env = if env.is_null() {
        initial_environment()
    } else {
        env
    };
    parse_allocator(lookup(env, b"ALLOCMUX_ALLOCATOR").unwrap_or(b"")).unwrap_or(Allocator::System)
}

/// The stack mode from `ALLOCMUX_STACKS` and `ALLOCMUX_SAMPLE_BYTES`,
/// silently `Off` for anything unknown (the constructor reports bad
/// values). Read at the first allocation, with the backend.
pub fn stack_mode() -> allocmux::profile::StackMode {
    use allocmux::profile::StackMode;
    // SAFETY: reading the `environ` pointer itself.
    let env = unsafe { environ };
    let env = if env.is_null() {
        initial_environment()
    } else {
        env
    };
    match lookup(env, b"ALLOCMUX_STACKS") {
        Some(b"sample") => StackMode::Sample {
            mean_bytes: parse_number(lookup(env, b"ALLOCMUX_SAMPLE_BYTES"), 1, MAX_SAMPLE_BYTES)
                .unwrap_or(DEFAULT_SAMPLE_BYTES),
        },
        Some(b"exact") => StackMode::Exact,
        _ => StackMode::Off,
    }
}

const DEFAULT_SAMPLE_BYTES: u64 = 524_288;
const MAX_SAMPLE_BYTES: u64 = 1 << 40;

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

fn parse_allocator(v: &[u8]) -> Option<Allocator> {
    match v {
        b"system" | b"glibc" | b"" => Some(Allocator::System),
        b"jemalloc" => Some(Allocator::Jemalloc),
        b"mimalloc" => Some(Allocator::Mimalloc),
        _ => None,
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

    if let Some(v) = get(b"ALLOCMUX_ALLOCATOR") {
        if parse_allocator(v).is_none() {
            warn(format_args!(
                "unknown ALLOCMUX_ALLOCATOR={:?} (expected system, jemalloc or mimalloc); using system",
                crate::runtime::Bytes(v).to_str_lossy()
            ));
        }
    }
    // The stack settings take effect at the first allocation
    // (`stack_mode`); here they are only checked, to warn once.
    let _stacks = match get(b"ALLOCMUX_STACKS") {
        None | Some(b"off") => Stacks::Off,
        Some(b"sample") => Stacks::Sample,
        Some(b"exact") => Stacks::Exact,
        Some(v) => {
            warn(format_args!(
                "unknown ALLOCMUX_STACKS={:?} (expected off, sample or exact); using off",
                crate::runtime::Bytes(v).to_str_lossy()
            ));
            Stacks::Off
        }
    };
    let _sample_bytes = number(
        get(b"ALLOCMUX_SAMPLE_BYTES"),
        "ALLOCMUX_SAMPLE_BYTES",
        DEFAULT_SAMPLE_BYTES,
        1,
        MAX_SAMPLE_BYTES,
    );
    let time_sample_mean = number(
        get(b"ALLOCMUX_TIME_SAMPLE"),
        "ALLOCMUX_TIME_SAMPLE",
        allocmux::recorder::DEFAULT_TIME_SAMPLE_MEAN as u64,
        1,
        1 << 30,
    ) as u32;
    let output = get(b"ALLOCMUX_OUTPUT").filter(|v| {
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
    }
}

fn parse_number(v: Option<&[u8]>, min: u64, max: u64) -> Option<u64> {
    core::str::from_utf8(v?)
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .filter(|n| (min..=max).contains(n))
}

fn number(v: Option<&[u8]>, name: &str, default: u64, min: u64, max: u64) -> u64 {
    let Some(v) = v else { return default };
    match parse_number(Some(v), min, max) {
        Some(n) => n,
        None => {
            warn(format_args!(
                "{name}={:?} is not a whole number from {min} to {max}; using {default}",
                crate::runtime::Bytes(v).to_str_lossy()
            ));
            default
        }
    }
}

/// Expands `%p` (pid) and `%%` in an output template into `out`, which is
/// left without a terminator; other `%` sequences stay as they are.
pub fn expand_template(template: &[u8], pid: u32, out: &mut [u8]) -> Option<usize> {
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

/// One line on stderr, prefixed `allocmux: `. Formatting goes into a stack
/// buffer; nothing allocates.
pub fn warn(args: core::fmt::Arguments<'_>) {
    use core::fmt::Write;
    let mut buf = [0u8; 512];
    let mut w = crate::runtime::SliceWriter {
        buf: &mut buf,
        len: 0,
    };
    if writeln!(w, "allocmux: {args}").is_err() {
        // Too long: keep what fits, ending in a newline.
        w.len = w.buf.len();
        w.buf[w.len - 1] = b'\n';
    }
    let len = w.len;
    crate::runtime::write_all(2, &buf[..len]);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expand(t: &str, pid: u32) -> String {
        let mut out = [0u8; 64];
        let n = expand_template(t.as_bytes(), pid, &mut out).unwrap();
        String::from_utf8(out[..n].to_vec()).unwrap()
    }

    #[test]
    fn templates() {
        assert_eq!(expand("/tmp/a.%p.prof", 4242), "/tmp/a.4242.prof");
        assert_eq!(expand("%p%p", 0), "00");
        assert_eq!(expand("100%%-%x-%", 7), "100%-%x-%");
        assert!(expand_template(&[b'a'; 64], 1, &mut [0u8; 64]).is_none());
    }

    #[test]
    fn allocator_names() {
        assert_eq!(parse_allocator(b"jemalloc"), Some(Allocator::Jemalloc));
        assert_eq!(parse_allocator(b"mimalloc"), Some(Allocator::Mimalloc));
        assert_eq!(parse_allocator(b"system"), Some(Allocator::System));
        assert_eq!(parse_allocator(b"tcmalloc"), None);
    }

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
