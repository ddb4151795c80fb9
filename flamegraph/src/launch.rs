//! Runs a command under the shim and gathers the profiles of every process
//! it started.

use std::fs;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use allocmux_format::profile::{self, ProcessProfile, StackMode, State};
use allocmux_format::settings as env;
use anyhow::{Context, Result, bail};

use crate::allocator::Allocator;
use crate::elf::InCode;
use crate::shim::{Origin, Probe, Shim};
use crate::sys::{self, ChildExit};
use crate::target;

/// How a run records call stacks, as the CLI asks the shim to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StackRecording {
    /// The mode.
    pub mode: StackMode,
    /// In sample mode, the allocations whose stacks are all recorded
    /// before sampling starts (0: none).
    pub exact_first: u64,
}

/// How many allocations `flame` and `--stacks auto` record exactly before
/// they sample: about as many as exact recording takes a tenth of a second
/// for (0.3 µs an allocation and its free; docs/recording.md says how it
/// was measured). A program that makes fewer, `ls` or a short compiler
/// run, gets every stack; a longer one pays that once and then what
/// sampling costs.
pub const DEFAULT_EXACT_FIRST: u64 = 250_000;

impl StackRecording {
    /// Stacks in `mode`, with no exact prefix.
    pub const fn only(mode: StackMode) -> Self {
        StackRecording {
            mode,
            exact_first: 0,
        }
    }

    /// Every stack of the first [`DEFAULT_EXACT_FIRST`] allocations, then a
    /// sample every `mean_bytes` on average.
    pub const fn auto(mean_bytes: u64) -> Self {
        StackRecording {
            mode: StackMode::Sample { mean_bytes },
            exact_first: DEFAULT_EXACT_FIRST,
        }
    }

    /// The shim's settings for it, as environment variables.
    pub fn env(self) -> Vec<(String, String)> {
        let mut vars = vec![(env::STACKS.to_string(), self.mode.env_value().to_string())];
        if let StackMode::Sample { mean_bytes } = self.mode {
            vars.push((env::SAMPLE_BYTES.to_string(), mean_bytes.to_string()));
            vars.push((env::EXACT_FIRST.to_string(), self.exact_first.to_string()));
        }
        vars
    }
}

/// What to run and how.
#[derive(Debug)]
pub struct Launch<'a> {
    /// Program and arguments.
    pub command: &'a [String],
    /// The allocator.
    pub allocator: Allocator,
    /// Whether to record: else the program runs under the backend's
    /// forwarder (no profile, no thread, no counting), under an allocator
    /// library alone, or, under glibc, with no preload at all.
    pub record: bool,
    /// Where the program's standard streams go.
    pub output: Output,
    /// A file each run reads as its stdin from the start, over what
    /// `output` gives it.
    pub input: Option<&'a Path>,
    /// Extra environment for the program.
    pub env: Vec<(String, String)>,
}

/// The recording level and the stack mode of the hooks the shim will
/// install for a program whose environment is this process's with
/// `overrides` over it: the library to preload serves them.
pub fn shim_hooks(overrides: &[(String, String)]) -> (env::Level, StackMode) {
    let names = [
        env::STACKS,
        env::SAMPLE_BYTES,
        env::HTTP,
        env::OTLP,
        env::EXACT_FIRST,
        env::RECORD,
    ];
    let vars: Vec<(&str, Vec<u8>)> = names
        .into_iter()
        .filter_map(|name| {
            let value = match overrides.iter().rev().find(|(k, _)| k == name) {
                Some((_, v)) => v.clone().into_bytes(),
                None => std::env::var_os(name)?.into_vec(),
            };
            Some((name, value))
        })
        .collect();
    let var = |name: &str| {
        vars.iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.as_slice())
    };
    {
        let settings = env::Settings::from_env(env::Reader::Shim, var);
        (settings.level, settings.hooks_mode())
    }
}

/// `LD_PRELOAD` for a program run under `libraries` (the shim, then an
/// allocator library behind it; or that library alone): them first, in
/// order, then what this process's `LD_PRELOAD` holds.
pub fn preload_value(libraries: &[&Path]) -> std::ffi::OsString {
    let mut preload = std::ffi::OsString::new();
    let old = std::env::var_os("LD_PRELOAD").filter(|v| !v.is_empty());
    for part in libraries
        .iter()
        .map(|l| l.as_os_str())
        .chain(old.as_deref())
    {
        if !preload.is_empty() {
            preload.push(":");
        }
        preload.push(part);
    }
    preload
}

/// Where a launched program's standard streams go.
#[derive(Debug)]
pub enum Output {
    /// The program keeps this process's stdin, stdout and stderr (`run`).
    Inherit,
    /// The program keeps stdin and stderr, and its stdout goes to this
    /// process's stderr (`run --json -`, whose stdout is the JSON's).
    StdoutToStderr,
    /// stdin is empty, stdout and stderr are discarded (as hyperfine does).
    Discard,
    /// stdin is empty, stdout and stderr are appended to this file.
    Log(fs::File),
}

/// The outcome of one run.
#[derive(Debug)]
pub struct Outcome {
    /// How the main process ended.
    pub exit: ChildExit,
    /// Wall time around the run.
    pub wall_ns: u64,
    /// Every profile left by the process tree.
    pub profiles: Vec<ProcessProfile>,
    /// Profile files that could not be read, with the reason.
    pub unreadable: Vec<(PathBuf, String)>,
    /// The program that was run.
    pub program: PathBuf,
    /// The pid of the main process.
    pub main_pid: u32,
    /// The shim that was preloaded (kept, with any temporary copy, for
    /// [`Outcome::check_recorded`]); none for an unrecorded run under
    /// glibc, and for a program that switches its allocator in code.
    pub shim: Option<Shim>,
    /// What the `allocmux` crate in the program does, if it has it.
    pub in_code: InCode,
}

impl Outcome {
    /// Says on stderr which profile files could not be read (the run's
    /// figures then leave those processes out).
    pub fn warn_unreadable(&self) {
        for (path, why) in &self.unreadable {
            crate::error::say(format_args!(
                "skipped unreadable profile {}: {why}",
                path.display()
            ));
        }
    }

    /// The report of this run of `command` under `allocator`.
    pub fn report(&self, command: &[String], allocator: &str) -> crate::report::Report {
        let info = crate::report::RunInfo {
            command: command.to_vec(),
            allocator: allocator.to_string(),
            exit: self.exit,
            wall_ns: self.wall_ns,
        };
        crate::report::Report::new(self.profiles.clone(), Some(info))
    }

    /// Whether the shim ran in the main process: it writes the process's
    /// profile as soon as it starts, so a profile (even an unreadable one)
    /// is the sign.
    pub fn main_recorded(&self) -> bool {
        let own_file = format!("{}.prof", self.main_pid);
        self.profiles.iter().any(|p| p.pid == self.main_pid)
            || self.unreadable.iter().any(|(path, _)| {
                path.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with(&own_file))
            })
    }

    /// An error that says plainly why, when the shim did not run in the
    /// main process (the loader printed its reason on the program's
    /// stderr, which a quiet run discards, so it is asked again).
    pub fn check_recorded(&self) -> Result<()> {
        if self.main_recorded() {
            return Ok(());
        }
        let program = self.program.display();
        if self.in_code.counting && self.in_code.switchable {
            bail!(
                "nothing was recorded: {program} records itself (allocmux::Counting) but wrote \
                 no profile (it ended without running its exit handlers, or ALLOCMUX_OUTPUT \
                 did not reach it)"
            );
        }
        let Some(shim) = &self.shim else {
            bail!("nothing was recorded: the run preloaded no shim (recording was off)");
        };
        let path = shim.path.display();
        let what = if self.profiles.is_empty() {
            format!("nothing was recorded: {program} ran without the allocmux shim")
        } else {
            format!(
                "{program} ran without the allocmux shim (only processes it started were recorded)"
            )
        };
        let probe = crate::shim::probe(&shim.path);
        let why = match &probe {
            Probe::Refused(reason) => {
                format!("the loader could not preload the shim {path} ({reason})")
            }
            Probe::Silent => {
                format!("the shim {path} loads but records nothing, so it is not the allocmux shim")
            }
            Probe::Works => format!(
                "the shim {path} works, but the loader did not preload it into {program} \
                 (a program with file capabilities runs in secure mode, which ignores \
                 LD_PRELOAD: run a copy without them)"
            ),
            Probe::Unknown(e) => format!(
                "the loader did not preload the shim {path} into it (checking why failed: {e})"
            ),
        };
        let fix = match (&probe, &shim.origin) {
            (Probe::Works, _) => String::new(),
            (_, Origin::Env) => "; point ALLOCMUX_SHIM at a liballocmux_shim.so built with this \
                                 allocmux, or unset it"
                .to_string(),
            (Probe::Refused(r), _) if r.contains("failed to map segment") => {
                "; its directory may be on a filesystem mounted noexec: set XDG_CACHE_HOME to a \
                 writable directory elsewhere, or ALLOCMUX_SHIM to a copy of liballocmux_shim.so"
                    .to_string()
            }
            (_, Origin::Cache) => format!(
                "; delete {path} for allocmux to write it again, or set ALLOCMUX_SHIM to a copy \
                 of liballocmux_shim.so"
            ),
            (_, Origin::Temporary(_)) => {
                "; set ALLOCMUX_SHIM to a copy of liballocmux_shim.so".to_string()
            }
        };
        bail!("{what}: {why}{fix}")
    }
}

/// How long to wait, after the main process ends, for profiles still marked
/// running whose processes are alive (background children finishing up).
const STRAGGLER_WAIT: Duration = Duration::from_secs(2);

/// Runs the command under the shim in the foreground, as `run` and `flame`
/// do: it keeps this process's standard streams (`output` is
/// [`Output::Inherit`] or [`Output::StdoutToStderr`]), and profiles that
/// could not be read are named on stderr.
pub fn in_foreground(
    command: &[String],
    allocator: Allocator,
    env: Vec<(String, String)>,
    output: Output,
) -> Result<Outcome> {
    let outcome = launch(&Launch {
        command,
        allocator,
        record: true,
        output,
        input: None,
        env,
    })?;
    outcome.warn_unreadable();
    Ok(outcome)
}

/// Runs the command under the shim and gathers its profiles (none when
/// it does not record). A program that switches its allocator in code
/// (`allocmux::Switchable`, see [`InCode`]) gets no shim: the environment
/// picks its allocator, and when recorded, it records itself
/// (`allocmux::Counting`), told the shim's way.
pub fn launch(l: &Launch<'_>) -> Result<Outcome> {
    let program = target::resolve(&l.command[0])?;
    let runs = target::inspect(&program)?;
    let in_code = runs.as_ref().map(|p| p.in_code).unwrap_or_default();
    let backend = l.allocator.backend();
    let library = l.allocator.library();
    if l.record && in_code.switchable {
        check_records_itself(&program, in_code, &l.env)?;
    }
    let shim = if in_code.switchable {
        None // the program's own switch
    } else if l.record {
        let (level, mode) = shim_hooks(&l.env);
        Some(crate::shim::locate(backend, level, mode)?)
    } else if library.is_some() {
        None // the library alone is the switch
    } else {
        crate::shim::locate_forwarder(backend)?
    };
    if let Some(shim) = &shim {
        shim.check_fits(runs.as_ref())?;
        if let Some(note) = shim.note() {
            crate::error::say(note);
        }
    } else if let Some(library) = library {
        // Of the shim's machine (checked when `-a` was read), so the
        // shim's answer is the library's.
        if let Some(p) = runs
            .as_ref()
            .filter(|p| p.arch != crate::shim::embedded_elf().arch)
        {
            bail!(
                "{} is a {} program and {} is not: the loader cannot preload it",
                p.path.display(),
                p.arch,
                library.display()
            );
        }
    }
    let dir = l
        .record
        .then(|| {
            tempfile::Builder::new()
                .prefix("allocmux-")
                .tempdir()
                .context("creating a temporary directory for the profiles")
        })
        .transpose()?;
    let libraries: Vec<&Path> = shim
        .iter()
        .map(|s| s.path.as_path())
        .chain(library)
        .collect();
    if let Some(p) = runs.as_ref().filter(|_| !libraries.is_empty()) {
        target::check_dynamic(p)?;
    }
    let preload = (!libraries.is_empty()).then(|| preload_value(&libraries));
    let mut start = crate::spawn_helper::start(
        preload.or_else(|| std::env::var_os("LD_PRELOAD")).as_ref(),
        &program,
        &l.command[0],
        &l.command[1..],
    )?;
    let cmd = &mut start.cmd;
    if let Some(dir) = &dir {
        cmd.env(env::OUTPUT, dir.path().join("%p.prof"));
    } else {
        // What a user's environment asks of the shim is not for a run
        // that only forwards; `ALLOCMUX_SHIM`'s universal library reads
        // whether to record from the environment.
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("ALLOCMUX_") {
                cmd.env_remove(name);
            }
        }
        if shim.is_some() {
            cmd.env(env::RECORD, "off");
        }
    }
    // Told to every run, preloaded or not, so that a script can say which
    // allocator it runs under.
    cmd.env(env::ALLOCATOR, backend.name());
    cmd.envs(l.env.iter().map(|(k, v)| (k, v)));
    match &l.output {
        Output::Inherit => {}
        Output::StdoutToStderr => {
            cmd.stdout(std::io::stderr());
        }
        Output::Discard => {
            cmd.stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null());
        }
        Output::Log(f) => {
            let out = f
                .try_clone()
                .context("sharing the log file with the program")?;
            let err = f
                .try_clone()
                .context("sharing the log file with the program")?;
            cmd.stdin(Stdio::null()).stdout(out).stderr(err);
        }
    }
    if let Some(input) = l.input {
        let f = fs::File::open(input)
            .with_context(|| format!("opening the input {}", input.display()))?;
        cmd.stdin(f);
    }
    let launched = start
        .wait()
        .with_context(|| format!("starting {}", program.display()))?;
    let (exit, wall_ns, main_pid) = (launched.exit, launched.wall_ns, launched.pid);
    let (profiles, unreadable) = match &dir {
        Some(dir) => gather(dir.path(), Instant::now() + STRAGGLER_WAIT)?,
        None => (Vec::new(), Vec::new()),
    };
    Ok(Outcome {
        exit,
        wall_ns,
        profiles,
        unreadable,
        program,
        main_pid,
        shim,
        in_code,
    })
}

/// Refuses to record a program that switches its allocator in code when
/// it cannot record itself, or not as asked: without `Counting` nothing in
/// it counts (a preloaded shim would see none of its allocations under
/// jemalloc or mimalloc), and what only the shim does (the sampled level,
/// the live endpoint) it does not do.
fn check_records_itself(program: &Path, in_code: InCode, env: &[(String, String)]) -> Result<()> {
    if let Some(why) = in_code.unrecordable(program) {
        bail!(
            "{why}: make its global allocator allocmux::Counting<allocmux::Switchable> for \
             allocmux to record it (a preloaded shim would see none of its allocations)"
        );
    }
    let program = program.display();
    let (level, _) = shim_hooks(env);
    // As the shim reads them: an empty value is no endpoint, no push.
    let set = |name: &str| match env.iter().rev().find(|(k, _)| k == name) {
        Some((_, v)) => !v.is_empty(),
        None => std::env::var_os(name).is_some_and(|v| !v.is_empty()),
    };
    if level != env::Level::Exact || set(env::HTTP) || set(env::OTLP) {
        bail!(
            "{program} switches its allocator in code and records itself (allocmux::Counting), \
             which counts every call, serves no live endpoint and pushes nothing: leave out \
             --record sampled, --http and --otlp, or serve /debug/pprof from the program with \
             allocmux::Profiler"
        );
    }
    Ok(())
}

/// Profiles read from a directory, and the files that could not be read
/// with the reason.
pub type Gathered = (Vec<ProcessProfile>, Vec<(PathBuf, String)>);

/// Reads every profile in `dir`, waiting until `deadline` for those whose
/// process is still alive and has not written its exit profile.
pub fn gather(dir: &Path, deadline: Instant) -> Result<Gathered> {
    loop {
        let (profiles, unreadable) = read_dir(dir)?;
        let waiting = profiles
            .iter()
            .any(|p| p.state == State::Running && sys::process_alive(p.pid));
        if !waiting || Instant::now() >= deadline {
            return Ok((profiles, unreadable));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn read_dir(dir: &Path) -> Result<Gathered> {
    let mut profiles = Vec::new();
    let mut unreadable = Vec::new();
    let mut entries: Vec<PathBuf> = fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| !p.to_string_lossy().ends_with(".tmp"))
        .collect();
    entries.sort();
    for path in entries {
        let text = match fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) => {
                unreadable.push((path, e.to_string()));
                continue;
            }
        };
        match profile::parse(&text) {
            Ok(mut p) => profiles.append(&mut p),
            Err(e) => unreadable.push((path, e.to_string())),
        }
    }
    Ok((profiles, unreadable))
}
