//! The live `/debug/pprof` endpoint (`ALLOCMUX_HTTP`): its socket, opened
//! at start-up so the address is known (and taken) before the program
//! runs, and served by the flusher thread between its writes
//! (`allocmux_recorder::http` speaks the protocol).
//!
//! The descriptors live in atomics, not with the thread, so that a `fork`
//! child can close them whatever the parent's thread was doing: a child
//! serves nothing (it would race its parent for the same connections),
//! and `exec` closes them too (they are close-on-exec). A process started
//! by `exec` reads `ALLOCMUX_HTTP` afresh: with port 0 it serves on a port
//! of its own.

use core::ffi::c_int;
use core::sync::atomic::{AtomicI32, Ordering::Relaxed};

use allocmux_recorder::http::{BindError, Listener, Server};

use crate::fmt::{Bytes, warn};

/// The listening socket, or -1.
static LISTEN_FD: AtomicI32 = AtomicI32::new(-1);
/// The connection of a delta profile under way, or -1.
static PENDING_FD: AtomicI32 = AtomicI32::new(-1);
/// An eventfd that wakes the serving thread from its `poll`, or -1.
static WAKE_FD: AtomicI32 = AtomicI32::new(-1);

/// Opens the endpoint at `spec`. On success writes the address it listens
/// on into `address` and returns its length, and with port 0 (the kernel
/// chose) says it on stderr, once. On failure says why on stderr, once,
/// and the program runs on without it.
pub fn open(spec: &[u8], address: &mut [u8; 64]) -> usize {
    let listener = match Listener::bind(spec) {
        Ok(l) => l,
        Err(e) => {
            let spec = Bytes(spec);
            match e {
                BindError::BadAddress => warn(format_args!(
                    "ALLOCMUX_HTTP={:?} is not ADDR:PORT (for example 127.0.0.1:6060); nothing is served",
                    spec.to_str_lossy()
                )),
                BindError::InUse => warn(format_args!(
                    "ALLOCMUX_HTTP={:?}: the address is in use; nothing is served",
                    spec.to_str_lossy()
                )),
                BindError::Os(errno) => warn(format_args!(
                    "ALLOCMUX_HTTP={:?}: cannot listen (errno {errno}); nothing is served",
                    spec.to_str_lossy()
                )),
            }
            return 0;
        }
    };
    // SAFETY: eventfd with valid flags.
    let wake = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    if wake < 0 {
        warn(format_args!(
            "ALLOCMUX_HTTP: no eventfd for the serving thread; nothing is served"
        ));
        return 0;
    }
    let n = listener.local_address(address);
    if spec.ends_with(b":0") {
        let shown = core::str::from_utf8(&address[..n]).unwrap_or("?");
        warn(format_args!("serving /debug/pprof on http://{shown}"));
    }
    WAKE_FD.store(wake, Relaxed);
    LISTEN_FD.store(listener.into_fd(), Relaxed);
    n
}

/// Whether the endpoint is open in this process.
pub fn is_open() -> bool {
    LISTEN_FD.load(Relaxed) >= 0
}

/// The server, for the flusher thread that serves it; `None` if the
/// endpoint is not open. Give it back with [`give_back`].
pub fn server() -> Option<Server> {
    let fd = LISTEN_FD.load(Relaxed);
    (fd >= 0).then(|| Server::new(Listener::from_fd(fd)))
}

/// The serving thread is ending (a change of credentials restarts it):
/// the socket stays open for the next one; a delta profile under way is
/// dropped.
pub fn give_back(server: Server) {
    let _ = server.into_listener_fd();
    PENDING_FD.store(-1, Relaxed);
}

/// Keeps the descriptor of a delta profile under way where a `fork`
/// child finds it.
pub fn note_pending(server: &Server) {
    PENDING_FD.store(server.pending_fd().unwrap_or(-1), Relaxed);
}

/// Waits until `deadline_ns` (`CLOCK_MONOTONIC`), a connection, or
/// [`wake`]; serves the connection if one came.
pub fn wait_and_serve(server: &mut Server, deadline_ns: u64, ticks_per_ns: Option<f64>) {
    let now = allocmux_recorder::monotonic_ns();
    let ms = deadline_ns
        .saturating_sub(now)
        .div_ceil(1_000_000)
        .min(i32::MAX as u64) as c_int;
    let mut fds = [
        libc::pollfd {
            fd: server.fd(),
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: WAKE_FD.load(Relaxed),
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    // SAFETY: polls two valid pollfds.
    if unsafe { libc::poll(fds.as_mut_ptr(), 2, ms) } <= 0 {
        return;
    }
    if fds[1].revents != 0 {
        let mut count = 0u64;
        // SAFETY: reads the eventfd's 8-byte counter (non-blocking).
        unsafe { libc::read(fds[1].fd, (&raw mut count).cast(), 8) };
    }
    if fds[0].revents != 0 {
        server.serve_one(ticks_per_ns);
        note_pending(server);
    }
}

/// Wakes the serving thread from [`wait_and_serve`].
pub fn wake() {
    let fd = WAKE_FD.load(Relaxed);
    if fd >= 0 {
        let one = 1u64;
        // SAFETY: writes 8 bytes to an eventfd (non-blocking).
        unsafe { libc::write(fd, (&raw const one).cast(), 8) };
    }
}

/// `fork` child handler: the child serves nothing; its copies of the
/// parent's descriptors are closed.
pub fn after_fork_child() {
    for fd in [&LISTEN_FD, &PENDING_FD, &WAKE_FD] {
        let fd = fd.swap(-1, Relaxed);
        if fd >= 0 {
            // SAFETY: the child's copy of a descriptor the shim owns.
            unsafe { libc::close(fd) };
        }
    }
}
