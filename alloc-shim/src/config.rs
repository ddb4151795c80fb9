//! Configuration from the environment, read once, without allocating.
//!
//! Bad values are reported once on stderr in plain words and replaced by the
//! safe default; the host program is never stopped for them.

use core::ffi::{CStr, c_char};

use allocmux_format::settings::{Reader, Settings};

use crate::fmt::warn;

unsafe extern "C" {
    static environ: *const *const c_char;
}

/// The settings the constructor reads.
#[derive(Debug)]
pub struct Config {
    /// The profile path template, if output to a file is wanted.
    pub output: Option<&'static [u8]>,
    /// Where to serve the live `/debug/pprof` endpoint, if anywhere.
    pub http: Option<&'static [u8]>,
    /// Whether and where to push OTLP profiles.
    pub otlp: Option<OtlpSettings>,
}

/// `ALLOCMUX_OTLP` and what it reads with it (see `otlp`).
#[derive(Debug, Clone, Copy)]
pub struct OtlpSettings {
    /// `ALLOCMUX_OTLP`: a URL, or `on`.
    pub asked: &'static [u8],
    /// `ALLOCMUX_OTLP_INTERVAL`, in seconds.
    pub interval_s: u64,
    /// The OpenTelemetry SDKs' variables.
    pub profiles_endpoint: Option<&'static [u8]>,
    pub endpoint: Option<&'static [u8]>,
    pub service_name: Option<&'static [u8]>,
    pub resource_attributes: Option<&'static [u8]>,
}

/// Whether the process runs in secure-execution mode (setuid, setgid or
/// file capabilities): then the shim records and writes nothing.
pub fn secure_execution() -> bool {
    // SAFETY: getauxval has no preconditions.
    unsafe { libc::getauxval(libc::AT_SECURE) != 0 }
}

/// The shim's settings from the environment as it is now (see
/// [`Settings`] for the defaults), silent about bad values: the
/// constructor reports them ([`read`]). Called at the first allocation,
/// possibly before libc has set `environ`.
pub fn settings() -> Settings<'static> {
    let env = environment_now();
    Settings::from_env(Reader::Shim, |name| lookup(env, name.as_bytes()))
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
    let settings = Settings::from_env(Reader::Shim, |name| lookup(env, name.as_bytes()));
    for problem in settings.problems() {
        warn(format_args!("{problem}"));
    }
    let output = settings.output.filter(|v| {
        let ok = v.len() < 4000;
        if !ok {
            warn(format_args!(
                "ALLOCMUX_OUTPUT is longer than 4000 bytes; no profile will be written"
            ));
        }
        ok
    });
    let var = |name: &str| lookup(env, name.as_bytes()).filter(|v| !v.is_empty());
    Config {
        output,
        http: settings.http,
        otlp: settings.otlp.map(|asked| OtlpSettings {
            asked,
            interval_s: settings.otlp_interval_s,
            profiles_endpoint: var("OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT"),
            endpoint: var("OTEL_EXPORTER_OTLP_ENDPOINT"),
            service_name: var("OTEL_SERVICE_NAME"),
            resource_attributes: var("OTEL_RESOURCE_ATTRIBUTES"),
        }),
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
