//! The profile of a process recorded by `Counting` (not the shim's: that
//! has its own writer, which allocates nothing), as text and as a file:
//! what `allocmux::Profiler` writes, and what a program records by itself
//! when `ALLOCMUX_OUTPUT` asks (`from_env`).

use std::ffi::OsString;
use std::fs;
use std::io::{self, Write as _};
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};

use allocmux_format::Backend;
use allocmux_format::profile::{self, AllocatorReading, Header, State};
use allocmux_format::settings as env;

/// Writes the profile (see [`text`]) to `path`, replacing the file whole
/// (a temporary file renamed over it), so a reader never sees half. The
/// writing is the recorder's own work: its allocations are counted, with
/// no stack of theirs recorded.
pub fn write(path: &Path, state: State, http: &str) -> io::Result<()> {
    crate::with_stack_thread(|st| st.as_recorder(|| write_now(path, state, http)))
}

fn write_now(path: &Path, state: State, http: &str) -> io::Result<()> {
    let text = text(state, http);
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".tmp{}", std::process::id()));
    let tmp = PathBuf::from(tmp);
    let written = fs::File::create(&tmp).and_then(|mut f| {
        f.write_all(text.as_bytes())?;
        f.sync_data()
    });
    match written.and_then(|()| fs::rename(&tmp, path)) {
        Ok(()) => Ok(()),
        Err(e) => {
            let _ = fs::remove_file(&tmp);
            Err(io::Error::new(
                e.kind(),
                format!("writing the profile {}: {e}", path.display()),
            ))
        }
    }
}

/// Whether allocmux's preload shim is loaded (then it owns `ALLOCMUX_OUTPUT`).
pub fn shim_preloaded() -> bool {
    fs::read_to_string("/proc/self/maps").is_ok_and(|m| m.contains("liballocmux_shim"))
}

/// `%p` becomes the pid and `%%` a `%`, as in the shim's output names.
pub fn expand_pid(template: &[u8], pid: u32) -> PathBuf {
    let mut out = vec![0; env::expanded_template_capacity(template.len())];
    let len = env::expand_output_template(template, pid, &mut out)
        .expect("the buffer has room for any pid");
    out.truncate(len);
    PathBuf::from(OsString::from_vec(out))
}

/// The whole profile of this process, as text.
pub fn text(state: State, http: &str) -> String {
    let totals = crate::with_thread(|t| crate::snapshot(Some(t)));
    let exe = fs::read_link("/proc/self/exe")
        .map(|p| p.into_os_string().into_vec())
        .unwrap_or_default();
    let cmdline = fs::read("/proc/self/cmdline").unwrap_or_default();
    let header = Header {
        pid: std::process::id(),
        ppid: std::os::unix::process::parent_id(),
        exe: &exe,
        cmdline: &cmdline,
        allocator: crate::inner_allocator_name(),
        state,
        threads: crate::threads_seen(),
        clock_start: crate::clock_start(),
        clock_end: crate::read_clocks(),
        cpu_ns: crate::clock_ns(libc::CLOCK_PROCESS_CPUTIME_ID),
        max_rss_bytes: crate::process::max_rss_bytes(),
        time_sample_mean: crate::time_sample_mean(),
        http: http.as_bytes(),
        exec: b"",
        recording: profile::Recording::Exact,
    };
    // The allocator's own figures, when it is one allocmux knows.
    let allocator = Backend::from_name(header.allocator.as_bytes())
        .and_then(crate::allocator_stats::read)
        .map(|stats| {
            let t_ns = header
                .clock_end
                .mono_ns
                .saturating_sub(header.clock_start.mono_ns);
            AllocatorReading::new(t_ns, totals.live_bytes(), stats)
        });
    let mut snapshot = crate::stacks::Snapshot::new();
    // Copying the table holds the stack lock while it allocates: as the
    // recorder's own work, those allocations do not ask for the lock again.
    crate::with_stack_thread(|st| st.as_recorder(|| snapshot.take(&totals)));
    let mut text = String::new();
    // Writing into a String cannot fail.
    let _ = profile::write_magic(&mut text)
        .and_then(|()| profile::write_counters(&mut text, &header, &totals))
        .and_then(|()| profile::write_allocator_stats(&mut text, allocator.as_ref(), None))
        .and_then(|()| snapshot.write(&mut text))
        .and_then(|()| profile::write_end(&mut text));
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_names_expand_the_pid_as_the_shims_do() {
        let e = |s: &str| expand_pid(s.as_bytes(), 4242);
        assert_eq!(e("/tmp/a.%p.prof"), PathBuf::from("/tmp/a.4242.prof"));
        assert_eq!(e("100%%-%x-%"), PathBuf::from("100%-%x-%"));
    }
}
