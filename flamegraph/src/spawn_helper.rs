//! The small process every program is started from, so that the figures
//! the kernel keeps of it are the program's own.
//!
//! Linux carries a process's peak resident size across `exec`: a program
//! spawned straight from the CLI (tens of MiB by then, text pages
//! included) starts with the CLI's peak as its own, in its `getrusage`, in
//! `wait4`'s figures and so in every max RSS allocmux prints. So the CLI
//! runs itself again as the spawn helper (`/proc/self/exe` with argv[0]
//! [`ARG0`]): fresh from `exec`, before it has grown, the spawn helper forks
//! (a real `fork`, which copies only its few written pages) and the child
//! execs the program. The spawn helper waits for it and leaves the program's
//! pid, how it ended, its resource usage and its wall time in a result
//! file the CLI reads.
//!
//! The spawn helper itself is never preloaded: it is started without
//! `LD_PRELOAD`, and sets the program's.

use std::ffi::OsString;
use std::fs;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::time::Instant;

use anyhow::{Context, Result, bail};

use crate::sys::{self, ChildExit};

/// The spawn helper's argv[0], which is how the binary knows to be one. A
/// space keeps it from being any command's name.
pub const ARG0: &str = "allocmux spawn-helper";

/// How a program run through the spawn helper ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Launched {
    /// The program's pid.
    pub pid: u32,
    /// How it ended, with its own resource usage.
    pub exit: ChildExit,
    /// Wall time from just before its fork to its end.
    pub wall_ns: u64,
}

/// Set by [`serve_if_asked`] in a binary that can be the spawn helper (the
/// `allocmux` binary calls it first thing). Another program using this
/// crate as a library cannot: it starts programs itself.
static CAN_LAUNCH: AtomicBool = AtomicBool::new(false);

/// A program about to be started: set its environment, working directory
/// and standard streams on [`Start::cmd`], then [`Start::wait`].
#[derive(Debug)]
pub struct Start {
    /// The command to set up: the spawn helper's, whose settings reach the
    /// program, or the program's own.
    pub cmd: Command,
    /// Where the spawn helper writes how the program ended; none when the
    /// program is started straight from this process.
    result: Option<tempfile::NamedTempFile>,
}

/// Prepares to start `program` (with `arg0` and `args`) and `preload` as
/// its `LD_PRELOAD` (none: unset): through the spawn helper when this binary
/// can be one, else from this process (whose peak RSS the program then
/// starts with).
pub fn start(
    preload: Option<&OsString>,
    program: &Path,
    arg0: &str,
    args: &[String],
) -> Result<Start> {
    if !CAN_LAUNCH.load(Relaxed) {
        let mut cmd = Command::new(program);
        cmd.arg0(arg0).args(args);
        match preload {
            Some(p) => cmd.env("LD_PRELOAD", p),
            None => cmd.env_remove("LD_PRELOAD"),
        };
        return Ok(Start { cmd, result: None });
    }
    let result = tempfile::NamedTempFile::with_prefix("allocmux-launch-")
        .context("creating a temporary file for the spawn helper")?;
    let mut cmd = Command::new("/proc/self/exe");
    cmd.arg0(ARG0)
        .arg(result.path())
        .arg(preload.cloned().unwrap_or_default())
        .arg(program)
        .arg(arg0)
        .args(args)
        .env_remove("LD_PRELOAD");
    Ok(Start {
        cmd,
        result: Some(result),
    })
}

impl Start {
    /// Starts the program and waits for it to end.
    pub fn wait(mut self) -> Result<Launched> {
        let Some(result) = self.result else {
            let start = Instant::now();
            let (pid, exit) = sys::spawn_and_wait(&mut self.cmd)?;
            let wall_ns = start.elapsed().as_nanos() as u64;
            return Ok(Launched { pid, exit, wall_ns });
        };
        let helper = self.cmd.spawn()?;
        let helper_exit = {
            // The spawn helper passes a SIGTERM or SIGHUP on to the program.
            let signals = sys::ChildSignals::new();
            signals.child_started(helper.id());
            sys::wait_child(helper.id())?
        };
        read_result(result.path(), helper_exit)
    }
}

/// Reads what the spawn helper wrote to `result` once it has ended with
/// `helper` (its own status, which says why when there is no result).
fn read_result(result: &Path, helper: ChildExit) -> Result<Launched> {
    let text = fs::read_to_string(result).unwrap_or_default();
    if let Some(why) = text.strip_prefix(FAILED) {
        bail!("{}", why.trim_end());
    }
    match parse(&text) {
        Some(l) => Ok(l),
        None => bail!(
            "the spawn helper {}, without saying how the program ended",
            crate::sys::how_it_ended(&helper)
        ),
    }
}

/// How a result file starts when the program could not be started; the
/// reason follows.
const FAILED: &str = "failed: ";

/// Runs the spawn helper if this process is one (argv[0] is [`ARG0`]),
/// returning its exit status; `None` for the CLI, which from then on
/// starts programs through the spawn helper.
pub fn serve_if_asked() -> Option<i32> {
    let mut args = std::env::args_os();
    if args.next()? != ARG0 {
        CAN_LAUNCH.store(true, Relaxed);
        return None;
    }
    let args: Vec<OsString> = args.collect();
    let [result, preload, program, arg0, rest @ ..] = &args[..] else {
        crate::error::say("spawn-helper: usage: RESULT PRELOAD PROGRAM ARG0 [ARGS...]");
        return Some(2);
    };
    let result = PathBuf::from(result);
    let text = match run(preload, Path::new(program), arg0, rest) {
        Ok(launched) => format(&launched),
        Err(e) => format!("{FAILED}{e:#}\n").into_bytes(),
    };
    match fs::write(&result, text) {
        Ok(()) => Some(0),
        Err(e) => {
            crate::error::say(format_args!(
                "spawn-helper: writing {}: {e}",
                result.display()
            ));
            Some(1)
        }
    }
}

/// Runs the program with `LD_PRELOAD` set to `preload` (unset when
/// empty) and waits for it.
fn run(preload: &OsString, program: &Path, arg0: &OsString, args: &[OsString]) -> Result<Launched> {
    let mut cmd = Command::new(program);
    cmd.arg0(arg0).args(args);
    if preload.is_empty() {
        cmd.env_remove("LD_PRELOAD");
    } else {
        cmd.env("LD_PRELOAD", preload);
    }
    let start = Instant::now();
    // Unadorned: the CLI says what it was starting.
    let (pid, exit) = sys::spawn_and_wait(&mut cmd)?;
    let wall_ns = start.elapsed().as_nanos() as u64;
    Ok(Launched { pid, exit, wall_ns })
}

/// One line: pid, exit code, signal (-1 for none), user, sys, max RSS,
/// wall.
fn format(l: &Launched) -> Vec<u8> {
    let e = &l.exit;
    format!(
        "{} {} {} {} {} {} {}\n",
        l.pid,
        e.code.unwrap_or(-1),
        e.signal.unwrap_or(-1),
        e.user_ns,
        e.sys_ns,
        e.max_rss_bytes,
        l.wall_ns
    )
    .into_bytes()
}

fn parse(text: &str) -> Option<Launched> {
    let f: Vec<i64> = text
        .split_whitespace()
        .map(str::parse)
        .collect::<Result<_, _>>()
        .ok()?;
    let [pid, code, signal, user, sys, rss, wall] = f[..] else {
        return None;
    };
    let some = |v: i64| (v >= 0).then_some(v as i32);
    Some(Launched {
        pid: pid as u32,
        exit: ChildExit {
            code: some(code),
            signal: some(signal),
            user_ns: user as u64,
            sys_ns: sys as u64,
            max_rss_bytes: rss as u64,
        },
        wall_ns: wall as u64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_result_line_round_trips() {
        for exit in [
            ChildExit {
                code: Some(5),
                signal: None,
                user_ns: 1,
                sys_ns: 2,
                max_rss_bytes: 3 << 20,
            },
            ChildExit {
                code: None,
                signal: Some(9),
                user_ns: 0,
                sys_ns: 0,
                max_rss_bytes: 0,
            },
        ] {
            let l = Launched {
                pid: 42,
                exit,
                wall_ns: 7,
            };
            let text = String::from_utf8(format(&l)).unwrap();
            assert_eq!(parse(&text), Some(l));
        }
        assert_eq!(parse(""), None);
        assert_eq!(parse("1 2 3"), None);
    }
}
