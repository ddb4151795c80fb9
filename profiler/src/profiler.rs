//! [`Profiler`]: call stacks of a Rust program's allocations, written in
//! the profile format every allocmux command reads.
//!
//! It needs [`Counting`](crate::Counting) as the global allocator: the
//! wrapper records each allocation's stack through the same recorder the
//! shim uses (the byte-sampling countdown, the in-process unwinder, the
//! stack table), and the profiler turns that on and writes the result.

use std::io;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::thread::JoinHandle;

use allocmux_format::profile::{StackMode, State};
use allocmux_format::settings as env;
use allocmux_recorder::http::{BindError, Listener, Server};
use allocmux_recorder::{self as recorder, profile_file, stacks};

/// Mean bytes between sampled allocations when neither the builder nor
/// `ALLOCMUX_SAMPLE_BYTES` says: jemalloc's `lg_prof_sample` default, as
/// the shim's.
pub const DEFAULT_SAMPLE_BYTES: u64 = env::DEFAULT_SAMPLE_BYTES;

/// The file written when neither the builder nor `ALLOCMUX_OUTPUT` names one.
pub const DEFAULT_FILE: &str = "allocmux.prof";

/// Set by the first [`ProfilerBuilder::build`]: the stack table is
/// process-wide, so one profiler per process.
static STARTED: AtomicBool = AtomicBool::new(false);

/// Records the call stacks of the program's allocations while it lives,
/// and writes them, with the process's counts, as an allocmux profile when
/// dropped: `allocmux report`, `flame` (through `export --format svg`),
/// `export` and `diff` read it as they read the shim's.
///
/// ```no_run
/// #[global_allocator]
/// static ALLOC: allocmux::Counting<std::alloc::System> =
///     allocmux::Counting::new(std::alloc::System);
///
/// fn main() {
///     let _profiler = allocmux::Profiler::builder().exact().build();
///     let words: Vec<String> = (0..10_000).map(|i| i.to_string()).collect();
///     # drop(words);
///     // `_profiler` drops here and writes allocmux.prof
/// }
/// ```
///
/// ```text
/// $ allocmux export --format svg -o flame.svg allocmux.prof
/// $ allocmux report allocmux.prof
/// ```
///
/// By default it samples (one allocation per 512 KiB allocated, on
/// average, with unbiased scaled estimates) and writes `allocmux.prof` in
/// the current directory; `ALLOCMUX_STACKS`, `ALLOCMUX_SAMPLE_BYTES` and
/// `ALLOCMUX_OUTPUT` (`%p` for the pid) set the same as for the shim, and
/// the builder's settings win over them.
///
/// One profiler per process: building a second one panics. Stacks stop
/// being recorded when it is dropped.
#[derive(Debug)]
pub struct Profiler {
    /// Where the profile goes; `None` when it must not be written (see
    /// [`ProfilerBuilder::build`]).
    path: Option<PathBuf>,
    mode: StackMode,
    /// The `/debug/pprof` endpoint's thread, if one serves.
    serving: Option<Serving>,
}

/// The thread that serves `/debug/pprof` (see [`ProfilerBuilder::serve`]).
#[derive(Debug)]
struct Serving {
    address: String,
    stop: Arc<AtomicBool>,
    thread: JoinHandle<()>,
}

/// Settings for a [`Profiler`]; from [`Profiler::builder`].
#[derive(Debug, Default, Clone)]
#[must_use = "call .build() to start profiling"]
pub struct ProfilerBuilder {
    mode: Option<StackMode>,
    file: Option<PathBuf>,
    serve: Option<String>,
}

impl ProfilerBuilder {
    /// Records a sample of allocations: one per `mean_bytes` allocated on
    /// average (a Poisson process over bytes, so large allocations are
    /// nearly always taken), each counted with the weight that makes
    /// every per-stack figure an unbiased estimate. Cheap enough to leave
    /// on. `mean_bytes` of 0 is taken as 1.
    pub fn sample_bytes(mut self, mean_bytes: u64) -> Self {
        self.mode = Some(StackMode::Sample {
            mean_bytes: mean_bytes.max(1),
        });
        self
    }

    /// Records every allocation's stack: exact counts per stack, at a
    /// cost of an unwind per allocation.
    pub fn exact(mut self) -> Self {
        self.mode = Some(StackMode::Exact);
        self
    }

    /// Writes the profile to `path` (instead of `ALLOCMUX_OUTPUT` or
    /// `allocmux.prof`).
    pub fn file(mut self, path: impl Into<PathBuf>) -> Self {
        self.file = Some(path.into());
        self
    }

    /// Serves the live profile at `/debug/pprof/heap` and
    /// `/debug/pprof/allocs` on `address` (`ADDR:PORT`; port 0 picks a free
    /// one, see [`Profiler::http_address`]), as the shim does with
    /// `ALLOCMUX_HTTP` and Go's `net/http/pprof` does: `go tool pprof`,
    /// Parca and Grafana Alloy scrape it. Bind it to loopback unless the
    /// network is trusted. One thread of allocmux's own serves one request
    /// at a time, its allocations unrecorded; if the address cannot be
    /// used, [`build`](Self::build) says so on stderr and the program runs
    /// on without it.
    ///
    /// ```no_run
    /// # #[global_allocator]
    /// # static ALLOC: allocmux::Counting<std::alloc::System> =
    /// #     allocmux::Counting::new(std::alloc::System);
    /// let profiler = allocmux::Profiler::builder().serve("127.0.0.1:6060").build();
    /// // go tool pprof -top http://127.0.0.1:6060/debug/pprof/heap
    /// # drop(profiler);
    /// ```
    pub fn serve(mut self, address: impl Into<String>) -> Self {
        self.serve = Some(address.into());
        self
    }

    /// Starts recording stacks.
    ///
    /// It warns on stderr, once, if no [`Counting`](crate::Counting) is
    /// the global allocator (nothing could be recorded), and if the output
    /// comes from `ALLOCMUX_OUTPUT` while allocmux's preload shim is in the
    /// process too: the shim already writes that file, with every
    /// allocation of the process, so the profiler records but does not
    /// write there.
    ///
    /// # Panics
    /// If a profiler was already started in this process.
    pub fn build(self) -> Profiler {
        assert!(
            !STARTED.swap(true, SeqCst),
            "allocmux: a Profiler was already started in this process (one per process)"
        );
        // A program that records itself because `ALLOCMUX_OUTPUT` asked
        // (see the crate docs) hands that recording to this profiler.
        recorder::from_env::hand_over();
        // An allocation, so that a `Counting` global allocator has
        // certainly registered by the check below.
        drop(std::hint::black_box(Box::new(0u64)));
        if !recorder::is_counting() {
            eprintln!(
                "allocmux: warning: Profiler: allocmux::Counting is not the global allocator, \
                 so no allocation can be recorded"
            );
        }
        let vars = ProfilerEnv::read();
        let settings = vars.settings();
        let mode = self.mode.unwrap_or_else(|| {
            for problem in settings.problems() {
                eprintln!("allocmux: warning: Profiler: {problem}");
            }
            settings.stacks
        });
        let path = match self.file {
            Some(p) => Some(p),
            None => match settings.output {
                Some(_) if profile_file::shim_preloaded() => {
                    eprintln!(
                        "allocmux: warning: Profiler: the allocmux shim is preloaded and writes \
                         ALLOCMUX_OUTPUT; the Profiler will not write it too"
                    );
                    None
                }
                Some(template) => Some(profile_file::expand_pid(template, std::process::id())),
                None => Some(PathBuf::from(DEFAULT_FILE)),
            },
        };
        if mode != StackMode::Off {
            recorder::start_stacks(mode, 0);
        }
        let serving = self.serve.and_then(|a| start_serving(&a));
        Profiler {
            path,
            mode,
            serving,
        }
    }
}

impl Profiler {
    /// A profiler with the default settings (sampling, `allocmux.prof`,
    /// or as the environment says): `Profiler::builder().build()`.
    pub fn new() -> Profiler {
        Profiler::builder().build()
    }

    /// Settings for a profiler.
    pub fn builder() -> ProfilerBuilder {
        ProfilerBuilder::default()
    }

    /// Where the profile will be written (`None`: not written, see
    /// [`ProfilerBuilder::build`]).
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// How stacks are recorded.
    pub fn mode(&self) -> StackMode {
        self.mode
    }

    /// The address `/debug/pprof` is served on (`127.0.0.1:43117`), if
    /// [`ProfilerBuilder::serve`] asked and it could be opened.
    pub fn http_address(&self) -> Option<&str> {
        self.serving.as_ref().map(|s| s.address.as_str())
    }

    /// Writes the profile now, marked as a process still running; the
    /// profile written on drop replaces it. The file is replaced whole (a
    /// temporary file renamed over it), so a reader never sees half.
    pub fn write(&self) -> io::Result<()> {
        self.write_as(State::Running)
    }

    fn write_as(&self, state: State) -> io::Result<()> {
        match &self.path {
            Some(path) => profile_file::write(path, state, self.http_address().unwrap_or("")),
            None => Ok(()),
        }
    }
}

impl Default for Profiler {
    fn default() -> Self {
        Profiler::new()
    }
}

impl Drop for Profiler {
    /// Writes the final profile and stops recording stacks. An error is
    /// reported on stderr (a destructor cannot return it).
    fn drop(&mut self) {
        let result = self.write_as(State::Exited);
        if let Some(s) = self.serving.take() {
            s.stop.store(true, SeqCst);
            let _ = s.thread.join();
        }
        stacks::stop();
        if let Err(e) = result {
            eprintln!("allocmux: {e}");
        }
    }
}

/// How often the serving thread looks at its stop flag.
const SERVE_POLL_MS: u64 = 100;

/// Opens the endpoint and starts its thread; `None`, said on stderr, if
/// the address cannot be used.
fn start_serving(address: &str) -> Option<Serving> {
    let listener = match Listener::bind(address.as_bytes()) {
        Ok(l) => l,
        Err(e) => {
            let why = match e {
                BindError::BadAddress => "not ADDR:PORT (for example 127.0.0.1:6060)".to_string(),
                BindError::InUse => "the address is in use".to_string(),
                BindError::Os(errno) => io::Error::from_raw_os_error(errno).to_string(),
            };
            eprintln!("allocmux: warning: Profiler: cannot serve on {address:?}: {why}");
            return None;
        }
    };
    let mut text = [0u8; 64];
    let n = listener.local_address(&mut text);
    let shown = String::from_utf8_lossy(&text[..n]).into_owned();
    if address.ends_with(":0") {
        eprintln!("allocmux: serving /debug/pprof on http://{shown}");
    }
    let stop = Arc::new(AtomicBool::new(false));
    let stopped = Arc::clone(&stop);
    let thread = std::thread::Builder::new()
        .name("allocmux-pprof".into())
        .spawn(move || serve(Server::new(listener), &stopped))
        .ok()?;
    Some(Serving {
        address: shown,
        stop,
        thread,
    })
}

/// The serving thread: its allocations are allocmux's, not the program's.
fn serve(mut server: Server, stop: &AtomicBool) {
    recorder::own_thread();
    let ticks_per_ns = || recorder::read_clocks().ticks_per_ns_since(recorder::clock_start());
    server.serve_until(stop, SERVE_POLL_MS, ticks_per_ns);
}

/// The variables a `Profiler` reads (`ALLOCMUX_STACKS`,
/// `ALLOCMUX_SAMPLE_BYTES`, `ALLOCMUX_OUTPUT`), read once when it is built.
struct ProfilerEnv(Vec<(&'static str, Vec<u8>)>);

impl ProfilerEnv {
    fn read() -> ProfilerEnv {
        let vars = [env::STACKS, env::SAMPLE_BYTES, env::OUTPUT]
            .into_iter()
            .filter_map(|name| Some((name, std::env::var_os(name)?.into_vec())))
            .collect();
        ProfilerEnv(vars)
    }

    /// The settings with a `Profiler`'s defaults (sampling unless told
    /// otherwise; see [`env::Settings`]).
    fn settings(&self) -> env::Settings<'_> {
        env::Settings::from_env(env::Reader::Profiler, |name| {
            self.0
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.as_slice())
        })
    }
}
