//! Processes started by tests: each runs in its own process group, and if
//! it is still running after [`TIMEOUT`] the whole group is killed and the
//! test fails, so no test can hang. A [`Spawned`] dropped during a panic
//! kills its group too.

use std::borrow::Cow;
use std::ffi::OsStr;
use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The longest any spawned process may run.
pub const TIMEOUT: Duration = Duration::from_secs(120);

/// How long a process's output pipes may stay open after it exited (a
/// background grandchild could hold them).
const PIPE_GRACE: Duration = Duration::from_secs(30);

/// Removes what would change the shim's behaviour from a command's
/// environment: an inherited `LD_PRELOAD` and every inherited `ALLOCMUX_*`
/// variable (those set on `cmd` stay).
pub fn scrub(cmd: &mut Command) -> &mut Command {
    if set_on(cmd, "LD_PRELOAD").is_none() {
        cmd.env_remove("LD_PRELOAD");
    }
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("ALLOCMUX_") && set_on(cmd, &key).is_none() {
            cmd.env_remove(key);
        }
    }
    cmd
}

/// The value of `name` set on `cmd` (not inherited, not removed).
pub fn set_on(cmd: &Command, name: impl AsRef<OsStr>) -> Option<&OsStr> {
    let name = name.as_ref();
    cmd.get_envs()
        .find(|(k, _)| *k == name)
        .and_then(|(_, v)| v)
}

/// A process started by a test, in its own process group, killed with its
/// group if the test lets go of it (or panics) while it still runs.
#[derive(Debug)]
pub struct Spawned {
    pub child: Child,
    what: String,
    reaped: bool,
    deadline: Instant,
}

impl Spawned {
    /// Spawns `cmd` (stdio as the caller set it up) in a new process group.
    pub fn spawn(cmd: &mut Command) -> Spawned {
        #[cfg(feature = "shim")]
        crate::shim::check_preload(cmd);
        let what = describe(cmd);
        cmd.process_group(0);
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
        Spawned {
            child,
            what,
            reaped: false,
            deadline: Instant::now() + TIMEOUT,
        }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits up to 60 s for the first line of the child's piped stdout
    /// (a fixture's "ready") and asserts it is `want`.
    pub fn expect_first_line(&mut self, want: &str) {
        use std::io::BufRead;
        let stdout = self.child.stdout.take().expect("stdout piped");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = std::io::BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let line = rx
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| panic!("{} did not print {want:?} within 60 s", self.what));
        assert_eq!(line, want, "the first line of {}", self.what);
    }

    /// What was started, for messages.
    pub fn what(&self) -> &str {
        &self.what
    }

    /// Sends `sig` to the whole process group (only while it is not reaped:
    /// afterwards the id may belong to someone else).
    pub fn signal_group(&self, sig: libc::c_int) {
        if !self.reaped {
            // SAFETY: kill has no memory-safety preconditions; the group id
            // is our unreaped child's pid, so the group is ours.
            unsafe { libc::kill(-(self.child.id() as libc::pid_t), sig) };
        }
    }

    /// The thread stacks of every process in the group, for a hang's
    /// report: gdb's backtraces where gdb is installed, else each thread's
    /// name, state and system call from `/proc`. Call it before killing
    /// the group.
    pub fn group_stacks(&self) -> String {
        if self.reaped {
            return String::new();
        }
        let group = self.child.id().to_string();
        let mut report = String::new();
        for pid in processes_in_group(&group) {
            let gdb = Command::new("gdb")
                .args(["-batch", "-nx", "-p", &pid])
                .args(["-ex", "thread apply all bt 30"])
                .stdin(Stdio::null())
                .output();
            report += &format!("--- process {pid}\n");
            match gdb {
                Ok(out) if out.status.success() => {
                    let text = String::from_utf8_lossy(&out.stdout);
                    for line in text.lines().filter(|l| !l.starts_with('[')) {
                        report += line;
                        report.push('\n');
                    }
                }
                _ => report += &proc_threads(&pid),
            }
        }
        report
    }

    /// Waits for the process to exit; kills its group and panics if it is
    /// still running at the deadline ([`TIMEOUT`] after it started).
    pub fn wait(&mut self) -> ExitStatus {
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) => {
                    self.reaped = true;
                    return status;
                }
                Ok(None) => {}
                Err(e) => panic!("waiting for {}: {e}", self.what),
            }
            if Instant::now() >= self.deadline {
                self.signal_group(libc::SIGKILL);
                let _ = self.child.wait();
                self.reaped = true;
                panic!(
                    "{} was still running after {} s: killed (a hang or deadlock)",
                    self.what,
                    TIMEOUT.as_secs()
                );
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        if !self.reaped {
            self.signal_group(libc::SIGKILL);
            let _ = self.child.wait();
        }
    }
}

/// Reads a pipe to its end on a thread; the result arrives on the channel.
pub fn drain(mut pipe: impl Read + Send + 'static) -> mpsc::Receiver<Vec<u8>> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = pipe.read_to_end(&mut buf);
        let _ = tx.send(buf);
    });
    rx
}

/// Runs a command to completion with a timeout, feeding it `input` (or
/// /dev/null) and capturing stdout and stderr. Returns its pid too.
pub fn run_with_pid(cmd: &mut Command, input: Option<&[u8]>) -> (u32, Output) {
    cmd.stdin(if input.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let mut p = Spawned::spawn(cmd);
    if let Some(data) = input {
        let mut stdin = p.child.stdin.take().expect("stdin is piped");
        let data = data.to_vec();
        // A program that stops reading early gets EPIPE here, which is fine.
        std::thread::spawn(move || {
            let _ = stdin.write_all(&data);
        });
    }
    let out = drain(p.child.stdout.take().expect("stdout is piped"));
    let err = drain(p.child.stderr.take().expect("stderr is piped"));
    let status = p.wait();
    let collect = |rx: mpsc::Receiver<Vec<u8>>, name: &str| {
        rx.recv_timeout(PIPE_GRACE).unwrap_or_else(|_| {
            panic!(
                "the {name} of {} was still open {} s after it exited",
                p.what(),
                PIPE_GRACE.as_secs()
            )
        })
    };
    let stdout = collect(out, "stdout");
    let stderr = collect(err, "stderr");
    (
        p.pid(),
        Output {
            status,
            stdout,
            stderr,
        },
    )
}

/// [`run_with_pid`] without the pid.
pub fn run(cmd: &mut Command, input: Option<&[u8]>) -> Output {
    run_with_pid(cmd, input).1
}

/// Bytes as text, lossily and whole.
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Bytes as text for messages, shortened if long (the shim's tests print
/// outputs that can run to megabytes).
pub fn shortened(bytes: &[u8]) -> Cow<'_, str> {
    const MAX: usize = 6000;
    if bytes.len() <= MAX {
        String::from_utf8_lossy(bytes)
    } else {
        Cow::Owned(format!(
            "{}\n... ({} more bytes)",
            String::from_utf8_lossy(&bytes[..MAX]),
            bytes.len() - MAX
        ))
    }
}

/// A command line for messages.
pub fn describe(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for a in cmd.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

/// The output of a run that must have succeeded.
pub fn ok(out: Output) -> Output {
    ok_as("the command", out)
}

/// The output of a run that must have succeeded, naming what ran in the
/// failure message.
pub fn ok_as(what: &str, out: Output) -> Output {
    assert!(
        out.status.success(),
        "{what}: status {:?}\nstdout: {}\nstderr: {}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    out
}

/// The ids of the processes whose process group is `group`.
fn processes_in_group(group: &str) -> Vec<String> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut pids: Vec<String> = dir
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|pid| pid.bytes().all(|b| b.is_ascii_digit()))
        .filter(|pid| {
            // `pid (comm) state ppid pgrp ...`: the fields after the
            // command name, which may hold spaces and parentheses.
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|stat| {
                    let rest = &stat[stat.rfind(')')? + 2..];
                    rest.split(' ').nth(2).map(|g| g == group)
                })
                .unwrap_or(false)
        })
        .collect();
    pids.sort_by_key(|p| p.parse::<u64>().unwrap_or(0));
    pids
}

/// Each thread of `pid`: its name, state and current system call.
fn proc_threads(pid: &str) -> String {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return String::new();
    };
    let mut out = String::new();
    for task in tasks.flatten() {
        let path = task.path();
        let read = |f: &str| std::fs::read_to_string(path.join(f)).unwrap_or_default();
        let state = read("status")
            .lines()
            .find(|l| l.starts_with("State:"))
            .unwrap_or_default()
            .to_string();
        out += &format!(
            "thread {} {:?}: {state}, syscall {}\n",
            task.file_name().to_string_lossy(),
            read("comm").trim(),
            read("syscall").trim()
        );
    }
    out
}
