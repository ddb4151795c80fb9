//! The `/debug/pprof` endpoint: a minimal HTTP/1.1 server for Go's heap
//! profile URLs, run by a thread of allocmux's own inside the profiled
//! process (the shim's flusher, or a `allocmux::Profiler`'s
//! server thread).
//!
//! It is built for a process it must not disturb:
//!
//! - one connection at a time, on the one thread, closed after its answer;
//!   a request must arrive whole within [`REQUEST_MS`] and fit in
//!   [`MAX_REQUEST`] bytes, and the answer is written within
//!   [`RESPONSE_MS`], or the connection is dropped;
//! - anything but `GET` of a known path gets a 4xx and changes nothing;
//! - sockets are non-blocking and close-on-exec, written with
//!   `MSG_NOSIGNAL` (a client that hangs up raises no `SIGPIPE`);
//! - the only allocations are the profile's own buffers, which grow
//!   fallibly: out of memory the answer is a 503.
//!
//! A delta profile (`?seconds=N`) parks its connection with a copy of the
//! figures at its start, and is answered when it is due; meanwhile other
//! requests are served, and a second delta gets a 503.

use core::ffi::c_int;
use core::fmt::{self, Write as _};
use core::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use core::sync::atomic::{AtomicBool, Ordering::Relaxed};

use crate::pprof::{self, Baseline, Kind, Meta};
use crate::stacks::Snapshot;
use allocmux_format::settings as env;

use crate::monotonic_ns;

/// The longest request (request line and headers) read.
pub const MAX_REQUEST: usize = 8192;
/// How long a client has to send its request, from its connection.
pub const REQUEST_MS: u64 = 1000;
/// How long the answer may take to write.
pub const RESPONSE_MS: u64 = 5000;
/// The longest delta profile served.
pub const MAX_SECONDS: u64 = 3600;
/// Connections waiting to be served before the kernel refuses more.
const BACKLOG: c_int = 16;

/// Why the endpoint could not be opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BindError {
    /// Not `ADDR:PORT` with a numeric IPv4 or `[IPv6]` address (or
    /// `localhost`) and a port up to 65535.
    BadAddress,
    /// The address is in use (another process serves there).
    InUse,
    /// Another error of `socket`, `bind` or `listen`: its `errno`.
    Os(c_int),
}

/// A listening socket.
#[derive(Debug)]
pub struct Listener {
    fd: c_int,
}

impl Listener {
    /// Opens a listening socket on `spec` (`ADDR:PORT`; port 0 lets the
    /// kernel pick one): non-blocking, close-on-exec.
    pub fn bind(spec: &[u8]) -> Result<Listener, BindError> {
        let (storage, len) = parse_address(spec).ok_or(BindError::BadAddress)?;
        // SAFETY: plain socket calls on a socket this function owns, with
        // an address of the length given.
        unsafe {
            let fd = libc::socket(
                storage.ss_family as c_int,
                libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                0,
            );
            if fd < 0 {
                return Err(BindError::Os(errno()));
            }
            let one: c_int = 1;
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_REUSEADDR,
                (&raw const one).cast(),
                size_of::<c_int>() as libc::socklen_t,
            );
            let sa = (&raw const storage).cast::<libc::sockaddr>();
            if libc::bind(fd, sa, len) != 0 || libc::listen(fd, BACKLOG) != 0 {
                let e = errno();
                libc::close(fd);
                return Err(if e == libc::EADDRINUSE {
                    BindError::InUse
                } else {
                    BindError::Os(e)
                });
            }
            Ok(Listener { fd })
        }
    }

    /// Takes over a listening socket made by [`Listener::bind`].
    pub fn from_fd(fd: c_int) -> Listener {
        Listener { fd }
    }

    /// The socket, to poll for connections.
    pub fn fd(&self) -> c_int {
        self.fd
    }

    /// Gives the socket up without closing it.
    pub fn into_fd(self) -> c_int {
        let fd = self.fd;
        core::mem::forget(self);
        fd
    }

    /// Writes the address the socket listens on (`127.0.0.1:43117`,
    /// `[::1]:43117`) into `out`; its length.
    pub fn local_address(&self, out: &mut [u8; 64]) -> usize {
        // SAFETY: getsockname fills at most `len` bytes of `storage`.
        let mut storage: libc::sockaddr_storage = unsafe { core::mem::zeroed() };
        let mut len = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        // SAFETY: as above.
        if unsafe { libc::getsockname(self.fd, (&raw mut storage).cast(), &mut len) } != 0 {
            return 0;
        }
        format_address(&storage, out)
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        // SAFETY: the listener owns its descriptor.
        unsafe { libc::close(self.fd) };
    }
}

/// The endpoint's state on the thread that serves it: the listener, the
/// delta profile under way, and the buffers a profile is built in (kept
/// between requests).
#[derive(Debug)]
pub struct Server {
    listener: Listener,
    pending: Option<Pending>,
    snapshot: Snapshot,
    baseline: Baseline,
    body: Vec<u8>,
}

/// A delta profile under way: its connection and when it is due.
#[derive(Debug)]
struct Pending {
    fd: c_int,
    kind: Kind,
    start_ns: u64,
    due_ns: u64,
}

impl Server {
    /// A server on `listener`.
    pub fn new(listener: Listener) -> Server {
        Server {
            listener,
            pending: None,
            snapshot: Snapshot::new(),
            baseline: Baseline::new(),
            body: Vec::new(),
        }
    }

    /// The listening socket, to poll for connections.
    pub fn fd(&self) -> c_int {
        self.listener.fd()
    }

    /// When the delta profile under way is due (`CLOCK_MONOTONIC` ns).
    pub fn due_ns(&self) -> Option<u64> {
        self.pending.as_ref().map(|p| p.due_ns)
    }

    /// The descriptor of the delta profile's connection, if one waits: a
    /// `fork` child closes it.
    pub fn pending_fd(&self) -> Option<c_int> {
        self.pending.as_ref().map(|p| p.fd)
    }

    /// Gives the listening socket back without closing it (the server's
    /// thread is ending, another will serve it); a waiting delta
    /// connection is closed.
    pub fn into_listener_fd(mut self) -> c_int {
        if let Some(p) = self.pending.take() {
            close(p.fd);
        }
        let Server { listener, .. } = self;
        listener.into_fd()
    }

    /// Serves one waiting connection, if any (the listener polled
    /// readable). `ticks_per_ns` turns allocator time into ns.
    pub fn serve_one(&mut self, ticks_per_ns: Option<f64>) {
        // SAFETY: accept4 on the listening socket, no address wanted.
        let fd = unsafe {
            libc::accept4(
                self.listener.fd(),
                core::ptr::null_mut(),
                core::ptr::null_mut(),
                libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            )
        };
        if fd < 0 {
            return;
        }
        let start = monotonic_ns();
        let mut buf = [0u8; MAX_REQUEST];
        let answer = match read_request(fd, &mut buf, start + REQUEST_MS * 1_000_000) {
            Err(None) => {
                close(fd); // hung up, or too slow to say anything
                return;
            }
            Err(Some(status)) => Answer::Error(status),
            Ok((head, len)) => match route(&buf[..head]) {
                // Read the addresses posted (and drop them) before the
                // answer, or closing with them unread resets the
                // connection under the client's reading.
                Answer::NoSymbols => {
                    let posted = content_length(&buf[..head]).saturating_sub((len - head) as u64);
                    if posted > MAX_POSTED {
                        Answer::Error(Status::TooLarge)
                    } else if drain(fd, posted, start + REQUEST_MS * 1_000_000) {
                        Answer::NoSymbols
                    } else {
                        close(fd);
                        return;
                    }
                }
                answer @ (Answer::Profile { .. } | Answer::Index | Answer::Error(_)) => answer,
            },
        };
        match answer {
            Answer::Error(e) => respond_error(fd, e),
            Answer::NoSymbols => respond(fd, 200, "text/plain; charset=utf-8", b"num_symbols: 0\n"),
            Answer::Index => respond(fd, 200, "text/plain; charset=utf-8", INDEX.as_bytes()),
            Answer::Profile { kind, seconds: 0 } => {
                self.snapshot.take(&crate::snapshot(None));
                let meta = Meta {
                    kind,
                    time_ns: wall_ns(),
                    duration_ns: 0,
                    ticks_per_ns,
                };
                self.send_profile(fd, None, &meta);
            }
            Answer::Profile { kind, seconds } => {
                if self.pending.is_some() {
                    respond_error(fd, Status::Busy);
                    return;
                }
                self.snapshot.take(&crate::snapshot(None));
                if self.baseline.keep(&self.snapshot).is_err() {
                    respond_error(fd, Status::NoMemory);
                    return;
                }
                self.pending = Some(Pending {
                    fd,
                    kind,
                    start_ns: monotonic_ns(),
                    due_ns: monotonic_ns() + seconds * 1_000_000_000,
                });
            }
        }
    }

    /// Answers the delta profile under way if it is due.
    pub fn finish_due(&mut self, ticks_per_ns: Option<f64>) {
        let now = monotonic_ns();
        let Some(p) = self.pending.take_if(|p| now >= p.due_ns) else {
            return;
        };
        self.snapshot.take(&crate::snapshot(None));
        let meta = Meta {
            kind: p.kind,
            time_ns: wall_ns(),
            duration_ns: now - p.start_ns,
            ticks_per_ns,
        };
        let base = core::mem::take(&mut self.baseline);
        self.send_profile(p.fd, Some(&base), &meta);
        self.baseline = base;
    }

    /// Serves until `stop` is set, which it looks at every `poll_ms`:
    /// the loop of a thread that does nothing else.
    pub fn serve_until(
        &mut self,
        stop: &AtomicBool,
        poll_ms: u64,
        ticks_per_ns: impl Fn() -> Option<f64>,
    ) {
        while !stop.load(Relaxed) {
            let now = monotonic_ns();
            let wait_ms = self
                .due_ns()
                .map_or(u64::MAX, |d| d.saturating_sub(now).div_ceil(1_000_000))
                .min(poll_ms);
            if wait_for(self.fd(), libc::POLLIN, now + wait_ms * 1_000_000) {
                self.serve_one(ticks_per_ns());
            }
            self.finish_due(ticks_per_ns());
        }
    }

    fn send_profile(&mut self, fd: c_int, base: Option<&Baseline>, meta: &Meta) {
        match pprof::encode(&self.snapshot, base, meta, &mut self.body) {
            Ok(()) => respond(fd, 200, "application/octet-stream", &self.body),
            Err(_) => respond_error(fd, Status::NoMemory),
        }
        // A large profile's buffer is not kept for the process's life.
        if self.body.capacity() > 1 << 20 {
            self.body = Vec::new();
        }
    }
}

/// The answer a request asks for.
#[derive(Debug, PartialEq, Eq)]
enum Answer {
    Profile {
        kind: Kind,
        seconds: u64,
    },
    Index,
    /// `/debug/pprof/symbol`, which `go tool pprof` asks for the
    /// addresses it could not symbolize from its own files: none are
    /// symbolized here (the process stays a recorder), which the client
    /// takes as a plain answer rather than an error.
    NoSymbols,
    Error(Status),
}

/// The most a client may post to `/debug/pprof/symbol` (its addresses).
const MAX_POSTED: u64 = 16 << 20;

/// The error answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    BadRequest(&'static str),
    NotFound,
    MethodNotAllowed,
    TooLarge,
    Timeout,
    Busy,
    NoMemory,
}

const INDEX: &str = "allocmux: allocation profiles of this process (pprof protobuf)\n\
/debug/pprof/heap    in-use and allocated space, default inuse_space\n\
/debug/pprof/allocs  the same, default alloc_space\n\
?seconds=N           only what was allocated in the next N seconds\n";

/// Reads a request until its blank line: the length of its head (line
/// and headers, up to the blank line) and of what was read in `buf`, an
/// error status to answer, or `None` to drop the connection without a
/// word.
fn read_request(
    fd: c_int,
    buf: &mut [u8; MAX_REQUEST],
    deadline: u64,
) -> Result<(usize, usize), Option<Status>> {
    let mut len = 0;
    loop {
        if let Some(end) = buf[..len].windows(4).position(|w| w == b"\r\n\r\n") {
            return Ok((end + 4, len));
        }
        if len == buf.len() {
            return Err(Some(Status::TooLarge));
        }
        // SAFETY: reads into the unused end of `buf`.
        let n = unsafe { libc::recv(fd, buf[len..].as_mut_ptr().cast(), buf.len() - len, 0) };
        if n > 0 {
            len += n as usize;
            continue;
        }
        if n == 0 {
            return Err(None);
        }
        match errno() {
            libc::EINTR => continue,
            libc::EAGAIN => {
                if !wait_for(fd, libc::POLLIN, deadline) {
                    return Err(if len == 0 {
                        None
                    } else {
                        Some(Status::Timeout)
                    });
                }
            }
            _ => return Err(None),
        }
    }
}

/// The `Content-Length` of a request head, 0 if it has none.
fn content_length(head: &[u8]) -> u64 {
    head.split(|&b| b == b'\n')
        .filter_map(|line| {
            let colon = line.iter().position(|&b| b == b':')?;
            let (name, value) = (&line[..colon], &line[colon + 1..]);
            name.eq_ignore_ascii_case(b"content-length")
                .then(|| number(value.trim_ascii()))
                .flatten()
        })
        .next()
        .unwrap_or(0)
}

/// Reads and drops `n` bytes by `deadline`; whether it could.
fn drain(fd: c_int, mut n: u64, deadline: u64) -> bool {
    let mut buf = [0u8; 4096];
    while n > 0 {
        let want = buf.len().min(n as usize);
        // SAFETY: reads into a local buffer.
        let got = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), want, 0) };
        if got > 0 {
            n -= got as u64;
            continue;
        }
        if got == 0 {
            return false;
        }
        match errno() {
            libc::EINTR => {}
            libc::EAGAIN => {
                if !wait_for(fd, libc::POLLIN, deadline) {
                    return false;
                }
            }
            _ => return false,
        }
    }
    true
}

/// What a request (its line and headers) asks for.
fn route(request: &[u8]) -> Answer {
    let line = request.split(|&b| b == b'\r').next().unwrap_or(b"");
    let mut parts = line.split(|&b| b == b' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Answer::Error(Status::BadRequest("not an HTTP request line"));
    };
    if !version.starts_with(b"HTTP/1.") {
        return Answer::Error(Status::BadRequest("not HTTP/1.x"));
    }
    let (path, query) = match target.iter().position(|&b| b == b'?') {
        Some(q) => (&target[..q], &target[q + 1..]),
        None => (target, &b""[..]),
    };
    if path == b"/debug/pprof/symbol" && (method == b"GET" || method == b"POST") {
        return Answer::NoSymbols;
    }
    if method != b"GET" {
        return Answer::Error(Status::MethodNotAllowed);
    }
    let kind = match path {
        b"/debug/pprof/heap" => Kind::Heap,
        b"/debug/pprof/allocs" => Kind::Allocs,
        b"/debug/pprof" | b"/debug/pprof/" => return Answer::Index,
        _ => return Answer::Error(Status::NotFound),
    };
    let mut seconds = 0;
    for param in query.split(|&b| b == b'&') {
        let (key, value) = match param.iter().position(|&b| b == b'=') {
            Some(e) => (&param[..e], &param[e + 1..]),
            None => (param, &b""[..]),
        };
        match key {
            b"seconds" => match number(value) {
                Some(n) if (1..=MAX_SECONDS).contains(&n) => seconds = n,
                _ => return Answer::Error(Status::BadRequest("seconds: 1 to 3600")),
            },
            b"debug" if number(value) != Some(0) => {
                return Answer::Error(Status::BadRequest(
                    "only debug=0 (the protobuf) is served; read it with go tool pprof",
                ));
            }
            // `gc=1` (a Go runtime GC first) means nothing here; other
            // parameters are ignored, as Go does.
            _ => {}
        }
    }
    Answer::Profile { kind, seconds }
}

/// A decimal number, as the environment's are read.
fn number(s: &[u8]) -> Option<u64> {
    env::parse_number(s, 0, u64::MAX)
}

fn respond_error(fd: c_int, status: Status) {
    let (code, text): (u16, &str) = match status {
        Status::BadRequest(why) => (400, why),
        Status::NotFound => (
            404,
            "not found: try /debug/pprof/heap or /debug/pprof/allocs",
        ),
        Status::MethodNotAllowed => (405, "only GET"),
        Status::TooLarge => (431, "request too large"),
        Status::Timeout => (408, "request not received in time"),
        Status::Busy => (503, "a delta profile is already being taken"),
        Status::NoMemory => (503, "no memory for the profile"),
    };
    let mut body = [0u8; 128];
    let n = text.len().min(body.len() - 1);
    body[..n].copy_from_slice(&text.as_bytes()[..n]);
    body[n] = b'\n';
    respond(fd, code, "text/plain; charset=utf-8", &body[..n + 1]);
}

/// Writes a whole answer and closes the connection.
fn respond(fd: c_int, code: u16, content_type: &str, body: &[u8]) {
    let reason = match code {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        431 => "Request Header Fields Too Large",
        _ => "Service Unavailable",
    };
    let mut head = Head::default();
    head.push(b"HTTP/1.1 ");
    head.number(u64::from(code));
    head.push(b" ");
    head.push(reason.as_bytes());
    head.push(b"\r\nContent-Type: ");
    head.push(content_type.as_bytes());
    if code == 405 {
        head.push(b"\r\nAllow: GET");
    }
    head.push(b"\r\nContent-Length: ");
    head.number(body.len() as u64);
    head.push(b"\r\nConnection: close\r\n\r\n");
    let deadline = monotonic_ns() + RESPONSE_MS * 1_000_000;
    if send_all(fd, head.bytes(), deadline) {
        send_all(fd, body, deadline);
    }
    close(fd);
}

/// An answer's status line and headers, built without allocating.
struct Head {
    buf: [u8; 256],
    len: usize,
}

impl Default for Head {
    fn default() -> Self {
        Head {
            buf: [0; 256],
            len: 0,
        }
    }
}

impl Head {
    fn push(&mut self, b: &[u8]) {
        let n = b.len().min(self.buf.len() - self.len);
        self.buf[self.len..self.len + n].copy_from_slice(&b[..n]);
        self.len += n;
    }

    fn number(&mut self, mut v: u64) {
        let mut digits = [0u8; 20];
        let mut i = digits.len();
        loop {
            i -= 1;
            digits[i] = b'0' + (v % 10) as u8;
            v /= 10;
            if v == 0 {
                break;
            }
        }
        self.push(&digits[i..]);
    }

    fn bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

/// Sends all of `b` by `deadline`; whether it could.
fn send_all(fd: c_int, mut b: &[u8], deadline: u64) -> bool {
    while !b.is_empty() {
        // SAFETY: sends from a live slice; MSG_NOSIGNAL: no SIGPIPE.
        let n = unsafe { libc::send(fd, b.as_ptr().cast(), b.len(), libc::MSG_NOSIGNAL) };
        if n > 0 {
            b = &b[n as usize..];
            continue;
        }
        match errno() {
            libc::EINTR => {}
            libc::EAGAIN => {
                if !wait_for(fd, libc::POLLOUT, deadline) {
                    return false;
                }
            }
            _ => return false,
        }
    }
    true
}

/// Waits until `fd` is ready for `events` or `deadline` passes; whether
/// it is ready.
fn wait_for(fd: c_int, events: libc::c_short, deadline: u64) -> bool {
    loop {
        let now = monotonic_ns();
        if now >= deadline {
            return false;
        }
        let mut p = libc::pollfd {
            fd,
            events,
            revents: 0,
        };
        let ms = (deadline - now).div_ceil(1_000_000).min(i32::MAX as u64) as c_int;
        // SAFETY: polls one valid pollfd.
        let r = unsafe { libc::poll(&mut p, 1, ms) };
        if r > 0 {
            return true;
        }
        if r < 0 && errno() != libc::EINTR {
            return false;
        }
    }
}

fn close(fd: c_int) {
    // SAFETY: closes a descriptor the server owns.
    unsafe { libc::close(fd) };
}

fn errno() -> c_int {
    // SAFETY: the calling thread's errno.
    unsafe { *libc::__errno_location() }
}

/// The wall clock, ns since the epoch.
fn wall_ns() -> u64 {
    crate::clock_ns(libc::CLOCK_REALTIME)
}

/// The socket address `spec` names (`ADDR:PORT`, see
/// [`env::parse_http_address`]), as the C structure and its length: for
/// the OTLP pushes' Collector too.
pub fn socket_address(spec: &[u8]) -> Option<(libc::sockaddr_storage, libc::socklen_t)> {
    parse_address(spec)
}

/// The socket address `spec` names (see [`env::parse_http_address`]), as
/// the C structure and its length.
fn parse_address(spec: &[u8]) -> Option<(libc::sockaddr_storage, libc::socklen_t)> {
    let addr = env::parse_http_address(spec)?;
    // SAFETY: a zeroed sockaddr_storage is a valid (unspecified) address.
    let mut storage: libc::sockaddr_storage = unsafe { core::mem::zeroed() };
    match addr {
        SocketAddr::V4(a) => {
            // SAFETY: sockaddr_storage is large enough and aligned for a
            // sockaddr_in.
            let sa = unsafe { &mut *(&raw mut storage).cast::<libc::sockaddr_in>() };
            sa.sin_family = libc::AF_INET as libc::sa_family_t;
            sa.sin_port = a.port().to_be();
            sa.sin_addr.s_addr = u32::from_ne_bytes(a.ip().octets());
            Some((storage, size_of::<libc::sockaddr_in>() as libc::socklen_t))
        }
        SocketAddr::V6(a) => {
            // SAFETY: as above, for a sockaddr_in6.
            let sa = unsafe { &mut *(&raw mut storage).cast::<libc::sockaddr_in6>() };
            sa.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            sa.sin6_port = a.port().to_be();
            sa.sin6_addr.s6_addr = a.ip().octets();
            Some((storage, size_of::<libc::sockaddr_in6>() as libc::socklen_t))
        }
    }
}

/// `ADDR:PORT` of a socket address into `out`; its length.
fn format_address(storage: &libc::sockaddr_storage, out: &mut [u8; 64]) -> usize {
    let addr = match storage.ss_family as c_int {
        libc::AF_INET => {
            // SAFETY: the family says it is a sockaddr_in.
            let sa = unsafe { &*(&raw const *storage).cast::<libc::sockaddr_in>() };
            let ip = Ipv4Addr::from(sa.sin_addr.s_addr.to_ne_bytes());
            SocketAddr::new(ip.into(), u16::from_be(sa.sin_port))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says it is a sockaddr_in6.
            let sa = unsafe { &*(&raw const *storage).cast::<libc::sockaddr_in6>() };
            let ip = Ipv6Addr::from(sa.sin6_addr.s6_addr);
            SocketAddr::new(ip.into(), u16::from_be(sa.sin6_port))
        }
        _ => return 0,
    };
    let mut w = Fixed { buf: out, len: 0 };
    let _ = write!(w, "{addr}");
    w.len
}

/// A `fmt::Write` into a fixed buffer (what does not fit is dropped).
struct Fixed<'a> {
    buf: &'a mut [u8; 64],
    len: usize,
}

impl fmt::Write for Fixed<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let n = s.len().min(self.buf.len() - self.len);
        self.buf[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
        self.len += n;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_go_paths_and_refuses_the_rest() {
        let r = |s: &str| route(s.as_bytes());
        assert_eq!(
            r("GET /debug/pprof/heap HTTP/1.1\r\n"),
            Answer::Profile {
                kind: Kind::Heap,
                seconds: 0
            }
        );
        assert_eq!(
            r("GET /debug/pprof/allocs?seconds=5&gc=1 HTTP/1.0\r\n"),
            Answer::Profile {
                kind: Kind::Allocs,
                seconds: 5
            }
        );
        assert_eq!(r("GET /debug/pprof/ HTTP/1.1\r\n"), Answer::Index);
        assert_eq!(
            r("GET /debug/pprof/profile HTTP/1.1\r\n"),
            Answer::Error(Status::NotFound)
        );
        assert_eq!(
            r("POST /debug/pprof/heap HTTP/1.1\r\n"),
            Answer::Error(Status::MethodNotAllowed)
        );
        for bad in [
            "GET /debug/pprof/heap?seconds=0 HTTP/1.1\r\n",
            "GET /debug/pprof/heap?seconds=3601 HTTP/1.1\r\n",
            "GET /debug/pprof/heap?seconds=x HTTP/1.1\r\n",
            "GET /debug/pprof/heap?debug=1 HTTP/1.1\r\n",
            "GET /debug/pprof/heap SPDY/3\r\n",
            "\u{1}\u{2}garbage\r\n",
            "GET  /debug/pprof/heap HTTP/1.1\r\n",
        ] {
            assert!(
                matches!(r(bad), Answer::Error(Status::BadRequest(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn parses_and_formats_addresses() {
        for bad in [
            "",
            "127.0.0.1",
            "127.0.0.1:65536",
            "host:80",
            "[::1:80",
            "1.2.3.4:-1",
        ] {
            assert!(parse_address(bad.as_bytes()).is_none(), "{bad}");
        }
        for (spec, shown) in [
            ("127.0.0.1:0", "127.0.0.1:"),
            ("localhost:0", "127.0.0.1:"),
            ("[::1]:0", "[::1]:"),
        ] {
            let l = match Listener::bind(spec.as_bytes()) {
                Ok(l) => l,
                Err(BindError::Os(_)) if spec.starts_with('[') => continue, // no IPv6 here
                Err(e) => panic!("{spec}: {e:?}"),
            };
            let mut out = [0u8; 64];
            let n = l.local_address(&mut out);
            let text = std::str::from_utf8(&out[..n]).unwrap();
            assert!(text.starts_with(shown), "{text}");
            let port: u16 = text[shown.len()..].parse().unwrap();
            assert_ne!(port, 0);
            // The same port again is taken.
            assert_eq!(
                Listener::bind(text.as_bytes()).unwrap_err(),
                BindError::InUse
            );
        }
    }
}
