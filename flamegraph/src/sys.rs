//! The few process-control calls the CLI needs that std lacks (`wait4`
//! with resource usage, signal dispositions, a liveness probe), kept here so
//! that every other module of the crate is safe Rust.
#![allow(unsafe_code)]

use std::io;
use std::os::unix::process::CommandExt;
use std::process::Command;

/// How a waited-for child ended, with its resource usage (its own plus that
/// of the descendants it reaped).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChildExit {
    /// Exit code, if it exited.
    pub code: Option<i32>,
    /// Signal number, if a signal killed it.
    pub signal: Option<i32>,
    /// User CPU time in ns.
    pub user_ns: u64,
    /// System CPU time in ns.
    pub sys_ns: u64,
    /// Peak resident set size in bytes.
    pub max_rss_bytes: u64,
}

impl ChildExit {
    /// The exit status a shell would report: the code, or 128 + signal.
    pub fn shell_status(&self) -> i32 {
        match (self.code, self.signal) {
            (Some(c), _) => c,
            (None, Some(s)) => 128 + s,
            (None, None) => 1,
        }
    }
}

/// Waits for child `pid` to end, retrying on EINTR (`wait4`).
pub fn wait_child(pid: u32) -> io::Result<ChildExit> {
    let mut status = 0;
    // SAFETY: `rusage` is plain integers, so all-zero is a valid value for
    // `wait4` to overwrite.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: both out-pointers point at live locals of the right type,
        // and `pid` is a child this process spawned and has not reaped.
        let r = unsafe { libc::wait4(pid as libc::pid_t, &mut status, 0, &mut ru) };
        if r >= 0 {
            break;
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
    let tv = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1000;
    Ok(ChildExit {
        code: libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status)),
        signal: libc::WIFSIGNALED(status).then(|| libc::WTERMSIG(status)),
        user_ns: tv(ru.ru_utime),
        sys_ns: tv(ru.ru_stime),
        max_rss_bytes: ru.ru_maxrss as u64 * 1024,
    })
}

/// While alive, SIGINT and SIGQUIT are ignored by this process, as `time`
/// and `system(3)` do: a Ctrl-C reaches the child (same process group) and
/// the tool survives to report how the child ended.
#[derive(Debug)]
pub struct IgnoreInterrupts {
    old_int: libc::sighandler_t,
    old_quit: libc::sighandler_t,
}

impl IgnoreInterrupts {
    /// Starts ignoring.
    pub fn new() -> Self {
        // SAFETY: `signal` with SIG_IGN installs no handler code, and
        // SIGINT and SIGQUIT may be ignored; the old dispositions are kept
        // to be restored on drop.
        unsafe {
            IgnoreInterrupts {
                old_int: libc::signal(libc::SIGINT, libc::SIG_IGN),
                old_quit: libc::signal(libc::SIGQUIT, libc::SIG_IGN),
            }
        }
    }
}

impl Default for IgnoreInterrupts {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for IgnoreInterrupts {
    fn drop(&mut self) {
        // SAFETY: the dispositions restored are the ones `signal` returned
        // in `new`, so they are valid for these signals.
        unsafe {
            libc::signal(libc::SIGINT, self.old_int);
            libc::signal(libc::SIGQUIT, self.old_quit);
        }
    }
}

/// Whether a process with this pid exists (signal 0).
pub fn process_alive(pid: u32) -> bool {
    // SAFETY: `kill` with signal 0 sends nothing; it only checks that the
    // process exists and may be signalled.
    let r = unsafe { libc::kill(pid as libc::pid_t, 0) };
    r == 0 || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// Starts `cmd` with a real `fork` and waits for it, ignoring SIGINT and
/// SIGQUIT meanwhile (as [`IgnoreInterrupts`]) while the child gets back
/// the dispositions this process had. Returns its pid and how it ended.
///
/// A real `fork`, not the `vfork` behind `posix_spawn`: a child that
/// shares this process's memory starts its program with this process's
/// peak RSS as its own, while a forked one starts from the pages it
/// copied. std forks (rather than spawning) whenever a `pre_exec` hook is
/// set, which restoring the signals needs anyway.
pub fn spawn_and_wait(cmd: &mut Command) -> io::Result<(u32, ChildExit)> {
    let ignore = IgnoreInterrupts::new();
    let (old_int, old_quit) = (ignore.old_int, ignore.old_quit);
    // SAFETY: the hook runs in the forked child before `exec`, where only
    // async-signal-safe calls are allowed; `signal` is one, and it
    // restores dispositions `signal` itself returned.
    unsafe {
        cmd.pre_exec(move || {
            libc::signal(libc::SIGINT, old_int);
            libc::signal(libc::SIGQUIT, old_quit);
            Ok(())
        });
    }
    let child = cmd.spawn()?;
    let exit = wait_child(child.id())?;
    drop(ignore);
    Ok((child.id(), exit))
}

/// What this process's stdin is, as far as a command that does not pass
/// it on cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StdinKind {
    /// A regular file of this many bytes.
    File { len: u64 },
    /// A pipe or socket.
    Pipe,
    /// A terminal, `/dev/null` or another device, or closed.
    Other,
}

/// What stdin is (`fstat` of descriptor 0).
pub fn stdin_kind() -> StdinKind {
    // SAFETY: `stat` is plain integers, so all-zero is a valid value for
    // `fstat` to overwrite.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: the out-pointer points at a live local of the right type;
    // a closed descriptor 0 only makes fstat fail.
    if unsafe { libc::fstat(0, &mut st) } != 0 {
        return StdinKind::Other;
    }
    match st.st_mode & libc::S_IFMT {
        libc::S_IFREG => StdinKind::File {
            len: st.st_size.max(0) as u64,
        },
        libc::S_IFIFO | libc::S_IFSOCK => StdinKind::Pipe,
        _ => StdinKind::Other,
    }
}
