//! Helpers shared by the shim's integration tests: compiling the C fixtures,
//! running programs with and without the shim preloaded, and reading the
//! profiles they leave.
//!
//! Every process a test starts goes through [`Spawned`] (directly or via
//! [`run`]): it runs in its own process group, and if it is still running
//! after [`TIMEOUT`] the whole group is killed and the test fails, so no
//! test can hang. A `Spawned` dropped during a panic kills its group too.
#![allow(dead_code, unused_macros)] // each test binary uses a different subset

use std::borrow::Cow;
use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::{Arc, Mutex, OnceLock, mpsc};
use std::time::{Duration, Instant};

pub use allocmux::Func;
pub use allocmux::profile::{ProcessProfile, State};

/// Every backend the shim can forward to.
pub const BACKENDS: [&str; 3] = ["system", "jemalloc", "mimalloc"];

/// The longest any spawned process may run.
pub const TIMEOUT: Duration = Duration::from_secs(120);

/// How long a process's output pipes may stay open after it exited (a
/// background grandchild could hold them).
const PIPE_GRACE: Duration = Duration::from_secs(30);

/// Generates one `#[test]` per backend for each named `fn(backend: &str)`:
/// `per_backend!(f)` makes `f::system`, `f::jemalloc` and `f::mimalloc`.
macro_rules! per_backend {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[test]
            fn system() {
                super::$name("system")
            }
            #[test]
            fn jemalloc() {
                super::$name("jemalloc")
            }
            #[test]
            fn mimalloc() {
                super::$name("mimalloc")
            }
        }
    )*};
}

/// The freshly built shim.
pub fn shim() -> &'static str {
    allocmux_cli::shim::BUILT_PATH
}

/// A fixture's source file.
pub fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// Where this test binary puts compiled fixtures: one directory per test
/// binary under cargo's scratch space, reused (and overwritten) by each run.
fn build_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let exe = std::env::current_exe().expect("the test binary's path");
        let stem = exe
            .file_stem()
            .expect("the test binary has a name")
            .to_string_lossy()
            .into_owned();
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join("allocmux-shim-fixtures")
            .join(stem);
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
        dir
    })
}

/// Compiles `tests/fixtures/<name>` with `cc -O2 -pthread` (once per test binary).
pub fn compile_c(name: &str) -> PathBuf {
    compile("cc", name, &["-O2", "-pthread"])
}

/// Compiles `tests/fixtures/<name>` with `c++ -std=c++17 -O2 -pthread`.
pub fn compile_cxx(name: &str) -> PathBuf {
    compile("c++", name, &["-std=c++17", "-O2", "-pthread"])
}

/// Compiles a fixture with the given compiler and flags (placed after the
/// source, so libraries may be among them), once per test binary: tests
/// asking concurrently for the same build wait for the first one.
pub fn compile(compiler: &str, name: &str, flags: &[&str]) -> PathBuf {
    type Cache = Mutex<HashMap<String, Arc<OnceLock<PathBuf>>>>;
    static CACHE: OnceLock<Cache> = OnceLock::new();
    let key = format!("{compiler} {name} {}", flags.join(" "));
    let cell = CACHE
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .entry(key.clone())
        .or_default()
        .clone();
    cell.get_or_init(|| {
        let source = fixture(name);
        let stem = Path::new(name).file_stem().unwrap().to_string_lossy();
        let out = build_dir().join(format!("{stem}-{:08x}", fnv(&key) as u32));
        // Build under a private name, then rename: a concurrent run of the
        // same test binary never sees a half-written executable.
        let tmp = out.with_extension(format!("{}.tmp", std::process::id()));
        let mut cmd = Command::new(compiler);
        cmd.arg(&source).arg("-o").arg(&tmp).args(flags);
        scrub(&mut cmd);
        let o = run(&mut cmd, None);
        assert!(
            o.status.success(),
            "compiling {} with {compiler} failed ({}):\n{}",
            source.display(),
            o.status,
            text(&o.stderr)
        );
        std::fs::rename(&tmp, &out).unwrap_or_else(|e| panic!("renaming {}: {e}", tmp.display()));
        out
    })
    .clone()
}

fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    })
}

/// Removes what would change the shim's behaviour from a command's
/// environment: an inherited `LD_PRELOAD` and every `ALLOCMUX_*` variable.
pub fn scrub(cmd: &mut Command) -> &mut Command {
    cmd.env_remove("LD_PRELOAD");
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("ALLOCMUX_") {
            cmd.env_remove(key);
        }
    }
    cmd
}

/// Scrubs the environment, then preloads the shim with `backend`, writing
/// profiles to `output` (a template: `%p` becomes the pid).
pub fn preload<'a>(cmd: &'a mut Command, backend: &str, output: Option<&Path>) -> &'a mut Command {
    scrub(cmd)
        .env("LD_PRELOAD", shim())
        .env("ALLOCMUX_ALLOCATOR", backend);
    if let Some(output) = output {
        cmd.env("ALLOCMUX_OUTPUT", output);
    }
    cmd
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

/// Runs a command without the shim (scrubbed environment): the reference.
pub fn run_reference(cmd: &mut Command, input: Option<&[u8]>) -> Output {
    run(scrub(cmd), input)
}

/// Runs a command under the shim with `backend`, profiles going to a fresh
/// directory as `<dir>/%p.prof`, plus `env`; returns the output and every
/// profile written.
pub fn run_under(
    backend: &str,
    cmd: &mut Command,
    env: &[(&str, &str)],
) -> (Output, Vec<ProcessProfile>) {
    let (out, files) = run_under_with(backend, cmd, env, None);
    (out, files.into_iter().map(|(_, p)| p).collect())
}

/// One line per profile file (name and summary), for assertion messages.
pub fn listing(files: &[(String, ProcessProfile)]) -> String {
    files
        .iter()
        .map(|(f, p)| format!("  {f}: {}", summary(p)))
        .collect::<Vec<_>>()
        .join("\n")
}

/// [`run_under`] with stdin input, returning each profile with its file name.
pub fn run_under_with(
    backend: &str,
    cmd: &mut Command,
    env: &[(&str, &str)],
    input: Option<&[u8]>,
) -> (Output, Vec<(String, ProcessProfile)>) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    preload(cmd, backend, Some(&dir.path().join("%p.prof")));
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = run(cmd, input);
    let profiles = read_profiles(dir.path());
    (out, profiles)
}

/// Parses every file in `dir` as a profile of exactly one process, sorted
/// by file name. A leftover temporary file or an unreadable profile fails
/// the test.
pub fn read_profiles(dir: &Path) -> Vec<(String, ProcessProfile)> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("listing {}: {e}", dir.display()))
        .map(|e| {
            e.expect("a directory entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    names.sort();
    names
        .into_iter()
        .map(|name| {
            assert!(
                !is_temporary(&name),
                "the shim left a temporary file {name} in {}",
                dir.display()
            );
            let p = read_profile(&dir.join(&name));
            (name, p)
        })
        .collect()
}

/// Whether a file name is one of the shim's temporary names (`PATH.tmp`,
/// `PATH.tmp1`, `PATH.tmp2`, ...), which a rename must have replaced.
pub fn is_temporary(name: &str) -> bool {
    name.rsplit_once(".tmp")
        .is_some_and(|(_, n)| n.bytes().all(|b| b.is_ascii_digit()))
}

/// Parses one profile file holding exactly one process.
pub fn read_profile(path: &Path) -> ProcessProfile {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("reading the profile {}: {e}", path.display()));
    let mut procs = allocmux::profile::parse(&text).unwrap_or_else(|e| {
        panic!(
            "the profile {} does not parse: {e}\n--- content ---\n{text}",
            path.display()
        )
    });
    assert_eq!(
        procs.len(),
        1,
        "the profile {} should hold one process:\n{text}",
        path.display()
    );
    procs.pop().unwrap()
}

/// Bytes as text for messages, shortened if long.
pub fn text(bytes: &[u8]) -> Cow<'_, str> {
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

/// A one-line summary of a profile, for messages.
pub fn summary(p: &ProcessProfile) -> String {
    let calls: Vec<String> = Func::ALL
        .iter()
        .filter(|&&f| p.totals.calls_of(f) != 0)
        .map(|&f| format!("{} {}", f.name(), p.totals.calls_of(f)))
        .collect();
    format!(
        "pid {} ppid {} argv {:?} allocator {} state {:?} threads {} calls [{}] requested {} allocated {} freed {}",
        p.pid,
        p.ppid,
        p.argv,
        p.allocator,
        p.state,
        p.threads,
        calls.join(", "),
        p.totals.bytes_requested,
        p.totals.bytes_allocated,
        p.totals.bytes_freed
    )
}

/// What is wanted of a result and does not hold: each check is whether it
/// holds and what it wants, so a test reports every failed want at once.
pub fn unmet<W: Into<String>>(checks: impl IntoIterator<Item = (bool, W)>) -> Vec<String> {
    checks
        .into_iter()
        .filter(|(holds, _)| !holds)
        .map(|(_, want)| want.into())
        .collect()
}

/// `a - b` of two counters, signed.
pub fn delta(a: u64, b: u64) -> i128 {
    a as i128 - b as i128
}

/// Finds a program needed by a test. If it is missing: on CI (`CI` set)
/// the test fails naming the package to install; elsewhere it prints
/// `skipping: <program> not installed` and the caller returns.
pub fn require(program: &str, package: &str) -> Option<PathBuf> {
    let found = if program.contains('/') {
        Some(PathBuf::from(program)).filter(|p| is_executable(p))
    } else {
        std::env::var_os("PATH").and_then(|path| {
            std::env::split_paths(&path)
                .map(|d| d.join(program))
                .find(|p| is_executable(p))
        })
    };
    if found.is_none() {
        if std::env::var_os("CI").is_some() {
            panic!(
                "{program} is not installed: install the `{package}` package (CI must run every test)"
            );
        }
        eprintln!("skipping: {program} not installed");
    }
    found
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}
