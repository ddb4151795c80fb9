//! The few process-control calls the CLI needs that std lacks (`wait4`
//! with resource usage, signal dispositions and passing signals on, a
//! liveness probe), kept here so
//! that every other module of the crate is safe Rust.
#![allow(unsafe_code)]

use std::io;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::sync::atomic::{AtomicI32, Ordering::SeqCst};

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

/// The signals a [`ChildSignals`] passes on to the child: a request to
/// stop addressed to the tool (`kill PID`, a service manager, `timeout`,
/// a closed terminal) is for the program it runs, which then ends the way
/// it chooses while the tool stays to report it and remove its temporary
/// files.
const PASSED_ON: [libc::c_int; 2] = [libc::SIGTERM, libc::SIGHUP];

/// The pid [`PASSED_ON`] signals go to; 0 until the child is known.
static CHILD: AtomicI32 = AtomicI32::new(0);
/// A [`PASSED_ON`] signal that came before the child was known.
static PENDING: AtomicI32 = AtomicI32::new(0);

extern "C" fn pass_on(signal: libc::c_int) {
    match CHILD.load(SeqCst) {
        0 => PENDING.store(signal, SeqCst),
        // SAFETY: `kill` is async-signal-safe. The pid is this process's
        // child, reaped at most a moment before (`Drop` forgets it right
        // after the wait), and the kernel reuses a pid only once the
        // whole pid range has gone round.
        pid => unsafe {
            libc::kill(pid, signal);
        },
    }
}

/// While alive, SIGINT and SIGQUIT are ignored by this process, as `time`
/// and `system(3)` do (a Ctrl-C reaches the child, in the same process
/// group, and the tool survives to report how the child ended), and
/// SIGTERM and SIGHUP are passed on to the child named by
/// [`ChildSignals::child_started`]. A child sent the signal by its group
/// as well gets it twice, which ends a program as once does.
#[derive(Debug)]
pub struct ChildSignals {
    old_int: libc::sighandler_t,
    old_quit: libc::sighandler_t,
    old_passed_on: [libc::sighandler_t; 2],
}

impl ChildSignals {
    /// Starts ignoring and passing on.
    pub fn new() -> Self {
        CHILD.store(0, SeqCst);
        PENDING.store(0, SeqCst);
        let handler = pass_on as extern "C" fn(libc::c_int) as libc::sighandler_t;
        // SAFETY: SIG_IGN installs no code, and `pass_on` only reads
        // atomics and calls `kill`, both async-signal-safe; the old
        // dispositions are kept to be restored on drop.
        unsafe {
            ChildSignals {
                old_int: libc::signal(libc::SIGINT, libc::SIG_IGN),
                old_quit: libc::signal(libc::SIGQUIT, libc::SIG_IGN),
                // A signal ignored before (`nohup`'s SIGHUP) stays ignored:
                // nothing is passed on, and the child inherits the ignoring.
                old_passed_on: PASSED_ON.map(|s| match libc::signal(s, handler) {
                    libc::SIG_IGN => {
                        libc::signal(s, libc::SIG_IGN);
                        libc::SIG_IGN
                    }
                    old => old,
                }),
            }
        }
    }

    /// Names the child the signals go to, and sends it one that came
    /// before.
    pub fn child_started(&self, pid: u32) {
        CHILD.store(pid as i32, SeqCst);
        let early = PENDING.swap(0, SeqCst);
        if early != 0 {
            pass_on(early);
        }
    }

    /// Gives this process's dispositions back, in a child about to `exec`
    /// (exec resets handlers, not ignored signals: one ignored before
    /// stays ignored for the program, as without the tool).
    ///
    /// # Safety
    /// Only async-signal-safe calls: fit for a `pre_exec` hook.
    unsafe fn restore(
        old_int: libc::sighandler_t,
        old_quit: libc::sighandler_t,
        old_passed_on: [libc::sighandler_t; 2],
    ) {
        // SAFETY: `signal` is async-signal-safe, and each disposition is
        // one `signal` returned for the same signal.
        unsafe {
            libc::signal(libc::SIGINT, old_int);
            libc::signal(libc::SIGQUIT, old_quit);
            for (s, old) in PASSED_ON.into_iter().zip(old_passed_on) {
                libc::signal(s, old);
            }
        }
    }
}

impl Default for ChildSignals {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for ChildSignals {
    fn drop(&mut self) {
        // SAFETY: the dispositions restored are the ones `signal` returned
        // in `new`, so they are valid for these signals.
        unsafe { Self::restore(self.old_int, self.old_quit, self.old_passed_on) }
        CHILD.store(0, SeqCst);
        let late = PENDING.swap(0, SeqCst);
        if late != 0 {
            // A stop request that found no child: this process's own again.
            // SAFETY: `raise` sends the signal to this thread, now with
            // its old disposition.
            unsafe {
                libc::raise(late);
            }
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

/// Starts `cmd` with a real `fork` and waits for it, with SIGINT and
/// SIGQUIT ignored and SIGTERM and SIGHUP passed on meanwhile (as
/// [`ChildSignals`]) while the child gets back the dispositions this
/// process had. Returns its pid and how it ended.
///
/// A real `fork`, not the `vfork` behind `posix_spawn`: a child that
/// shares this process's memory starts its program with this process's
/// peak RSS as its own, while a forked one starts from the pages it
/// copied. std forks (rather than spawning) whenever a `pre_exec` hook is
/// set, which restoring the signals needs anyway.
pub fn spawn_and_wait(cmd: &mut Command) -> io::Result<(u32, ChildExit)> {
    let signals = ChildSignals::new();
    let (old_int, old_quit, old_passed_on) =
        (signals.old_int, signals.old_quit, signals.old_passed_on);
    // SAFETY: the hook runs in the forked child before `exec`, where only
    // async-signal-safe calls are allowed, which `restore` makes.
    unsafe {
        cmd.pre_exec(move || {
            ChildSignals::restore(old_int, old_quit, old_passed_on);
            Ok(())
        });
    }
    let child = cmd.spawn()?;
    signals.child_started(child.id());
    let exit = wait_child(child.id())?;
    drop(signals);
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

/// How a program ended, as `run` says it: "exited with status 3", "was
/// killed by signal 9 (SIGKILL)".
pub fn how_it_ended(exit: &ChildExit) -> String {
    match (exit.code, exit.signal) {
        (Some(c), _) => format!("exited with status {c}"),
        (None, Some(s)) => format!("was killed by signal {s} ({})", signal_name(s)),
        _ => "ended".to_string(),
    }
}

/// The usual name of a signal number.
pub fn signal_name(s: i32) -> &'static str {
    match s {
        1 => "SIGHUP",
        2 => "SIGINT",
        3 => "SIGQUIT",
        4 => "SIGILL",
        6 => "SIGABRT",
        7 => "SIGBUS",
        8 => "SIGFPE",
        9 => "SIGKILL",
        11 => "SIGSEGV",
        13 => "SIGPIPE",
        14 => "SIGALRM",
        15 => "SIGTERM",
        _ => "signal",
    }
}
