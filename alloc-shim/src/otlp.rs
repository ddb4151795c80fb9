//! Pushing the allocation profile to an OpenTelemetry Collector: OTLP
//! profiles (`profiles/v1development`) over HTTP, protobuf, every
//! `ALLOCMUX_OTLP_INTERVAL` seconds and once more at exit.
//!
//! Where to push is said the way OpenTelemetry SDKs are told
//! (`OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT`, else
//! `OTEL_EXPORTER_OTLP_ENDPOINT` plus `/v1development/profiles`, else
//! `http://localhost:4318/v1development/profiles`; `OTEL_SERVICE_NAME`,
//! `OTEL_RESOURCE_ATTRIBUTES`), once `ALLOCMUX_OTLP` asks for it: `on`, or
//! the Collector's URL itself (what `allocmux run --otlp URL` sets).
//!
//! It is built for a process it must not disturb:
//!
//! - the pushes are made by the flusher thread (allocmux's own), never by
//!   a program thread, but for the last one, at exit;
//! - the socket is non-blocking and close-on-exec, written with
//!   `MSG_NOSIGNAL`, and a push is given up after [`PUSH_MS`] (the exit
//!   push after [`EXIT_PUSH_MS`]): a Collector that never answers delays
//!   the flusher's next write by that much, at most;
//! - what it allocates (the request's buffers, the copy of the stacks and
//!   the figures of the last push) is allocmux's own memory, grown
//!   fallibly and bounded by the number of distinct stacks, not by time;
//! - a push that fails keeps the figures of the last one that went
//!   through as its starting point, so the next push covers both
//!   intervals: a Collector down for a while loses nothing but the pushes
//!   themselves. The first failure, and the recovery, are said once on
//!   stderr.
//!
//! Only plain `http://` to a numeric address or `localhost` is spoken (no
//! TLS, no name lookup, which would call the program's resolver inside its
//! process): a Collector (or an agent) on the same host or network.

use core::ffi::c_int;
use core::fmt::Write as _;
use core::sync::atomic::{AtomicBool, Ordering::Relaxed};

use allocmux_format::settings as env;
use allocmux_recorder::otlp::{self, AttrValue, Attribute, PushMeta};
use allocmux_recorder::pprof::Baseline;
use allocmux_recorder::stacks::Snapshot;
use allocmux_recorder::{self as recorder, AtFork, SpinLock};

use crate::config::OtlpSettings;
use crate::fmt::{Bytes, SliceWriter, warn};

/// How long a periodic push may take, connection to answer.
pub const PUSH_MS: u64 = 5_000;
/// How long the exit push may hold the exiting thread.
pub const EXIT_PUSH_MS: u64 = 1_000;
/// The OTLP/HTTP path of profiles.
const PROFILES_PATH: &[u8] = b"/v1development/profiles";
/// The SDKs' default endpoint.
const DEFAULT_ENDPOINT: &[u8] = b"http://localhost:4318";

/// Where and how to push, read at start-up.
#[derive(Clone, Copy)]
struct Target {
    /// The Collector's socket address.
    addr: libc::sockaddr_storage,
    addr_len: libc::socklen_t,
    /// `Host:` header value and the request path.
    host: Fixed<128>,
    path: Fixed<512>,
    /// Seconds between pushes.
    interval_s: u64,
    /// `OTEL_SERVICE_NAME` and `OTEL_RESOURCE_ATTRIBUTES` as given,
    /// copied at start-up: the program may change its environment.
    service: Fixed<256>,
    resource_attributes: Fixed<2048>,
}

/// The pusher: set up at start-up when pushing is on, used by the flusher
/// thread and at exit.
static PUSHER: SpinLock<Option<Pusher>> = SpinLock::new(None);
/// A copy of the pusher's target, set once at start-up: what a `fork`
/// child rebuilds its pusher from when the parent's was mid-push.
static TARGET: SpinLock<Option<Target>> = SpinLock::new(None);
/// Whether pushing is on in this process.
static ON: AtomicBool = AtomicBool::new(false);

/// The state of pushes.
pub struct Pusher {
    target: Target,
    snapshot: Snapshot,
    /// The figures of the last push that went through (its start for
    /// the next), and when it was made (ns since the epoch).
    baseline: Baseline,
    since_unix_ns: u64,
    /// The next periodic push, on the monotonic clock.
    due_ns: u64,
    request: Vec<u8>,
    body: Vec<u8>,
    /// The last push failed (said once until one goes through).
    failing: bool,
    /// The executable's path and the host's name, read once.
    exe: Fixed<4096>,
    host_name: Fixed<256>,
    /// `unknown_service:` and the executable's name: the SDKs' service
    /// name when none is given.
    unknown_service: Fixed<512>,
}

/// Sets pushing up from `cfg`, saying once on stderr why it is off when
/// it was asked for and cannot be done. Whether it is on.
pub fn configure(cfg: &OtlpSettings) -> bool {
    let url: Fixed<512> = match cfg.asked {
        b"on" | b"1" | b"true" => match (cfg.profiles_endpoint, cfg.endpoint) {
            (Some(full), _) => Fixed::of(&[full]),
            (None, Some(base)) => Fixed::of(&[trim_slash(base), PROFILES_PATH]),
            (None, None) => Fixed::of(&[DEFAULT_ENDPOINT, PROFILES_PATH]),
        },
        url => Fixed::of(&[url]),
    };
    match parse_url(url.bytes()) {
        Some(target) => {
            let target = Target {
                interval_s: cfg.interval_s,
                service: Fixed::of(&[cfg.service_name.unwrap_or_default()]),
                resource_attributes: Fixed::of(&[cfg.resource_attributes.unwrap_or_default()]),
                ..target
            };
            *TARGET.lock() = Some(target);
            *PUSHER.lock() = Some(Pusher::new(target));
            ON.store(true, Relaxed);
            true
        }
        None => {
            warn(format_args!(
                "{}: cannot push to {:?}: expected http://ADDRESS:PORT[/PATH] with a numeric \
                 address or localhost (no https, no name lookup); nothing is pushed",
                env::OTLP,
                Bytes(url.bytes()).to_str_lossy()
            ));
            false
        }
    }
}

/// Whether pushing is on in this process.
pub fn is_on() -> bool {
    ON.load(Relaxed)
}

/// When the next periodic push is due (monotonic ns), if pushing is on.
pub fn due_ns() -> Option<u64> {
    if !is_on() {
        return None;
    }
    PUSHER
        .lock_within(100)
        .and_then(|p| p.as_ref().map(|p| p.due_ns))
}

/// The periodic push, if due: from the flusher thread.
pub fn push_if_due() {
    if !is_on() {
        return;
    }
    let Some(mut p) = PUSHER.lock_within(100) else {
        return;
    };
    let Some(p) = p.as_mut() else { return };
    let now = recorder::monotonic_ns();
    if now < p.due_ns {
        return;
    }
    p.push(PUSH_MS);
    p.due_ns = recorder::monotonic_ns() + p.target.interval_s * 1_000_000_000;
}

/// The last push, at exit, on the exiting thread: within
/// [`EXIT_PUSH_MS`], waiting first for a push the flusher is making (its
/// figures end earlier: the last interval would go unpushed), and giving
/// up when that one takes all the time.
pub fn push_at_exit() {
    if !is_on() {
        return;
    }
    let deadline = recorder::monotonic_ns() + EXIT_PUSH_MS * 1_000_000;
    let mut p = loop {
        if let Some(p) = PUSHER.try_lock() {
            break p;
        }
        if recorder::monotonic_ns() >= deadline {
            return;
        }
        let ms = libc::timespec {
            tv_sec: 0,
            tv_nsec: 1_000_000,
        };
        // SAFETY: sleeps a millisecond; a null remainder is allowed.
        unsafe { libc::nanosleep(&ms, core::ptr::null_mut()) };
    };
    if let Some(p) = p.as_mut() {
        let left_ms = deadline.saturating_sub(recorder::monotonic_ns()) / 1_000_000;
        p.push(left_ms.max(1));
    }
}

/// In a `fork` child: its own pushes, from its own start (the parent's
/// figures are its parent's). A pusher the parent's flusher was using at
/// the fork (its state may be half changed) is left as it is, unfreed,
/// and made again from the target; one this very thread was using (the
/// fork came from a signal handler that interrupted its exit push) is
/// left to that frame, and the child pushes nothing.
pub fn after_fork_child() {
    if !is_on() {
        return;
    }
    // SAFETY: this is the child of a fork, still with one thread.
    match unsafe { PUSHER.after_fork_in_child() } {
        AtFork::HeldHere => ON.store(false, Relaxed),
        AtFork::Orphaned => {
            let target = *TARGET.lock();
            // SAFETY: one thread, and the lock is free: no other access.
            // The old pusher is overwritten without being dropped.
            unsafe { core::ptr::write(PUSHER.as_ptr(), target.map(Pusher::new)) };
        }
        AtFork::Free => {
            if let Some(p) = PUSHER.lock().as_mut() {
                p.baseline = Baseline::new();
                p.since_unix_ns = wall_ns();
                p.due_ns = recorder::monotonic_ns() + p.target.interval_s * 1_000_000_000;
                p.failing = false;
            }
        }
    }
}

impl Pusher {
    fn new(target: Target) -> Pusher {
        let due_ns = recorder::monotonic_ns() + target.interval_s * 1_000_000_000;
        let mut exe = Fixed::default();
        exe.len = crate::procfs::read_link(c"/proc/self/exe", &mut exe.buf);
        let name = exe
            .bytes()
            .rsplit(|&b| b == b'/')
            .next()
            .unwrap_or_default();
        let unknown_service = Fixed::of(&[b"unknown_service:", name]);
        Pusher {
            target,
            snapshot: Snapshot::new(),
            baseline: Baseline::new(),
            since_unix_ns: wall_ns(),
            due_ns,
            request: Vec::new(),
            body: Vec::new(),
            failing: false,
            exe,
            host_name: host_name(),
            unknown_service,
        }
    }

    /// Takes the stacks, encodes the interval since the last push that
    /// went through, and sends it within `limit_ms`.
    fn push(&mut self, limit_ms: u64) {
        self.snapshot.take(&recorder::snapshot(None));
        let now = wall_ns();
        let meta = PushMeta {
            time_unix_ns: now,
            duration_ns: now.saturating_sub(self.since_unix_ns),
        };
        // The request's buffer, apart while the attributes borrow the rest.
        let mut body = core::mem::take(&mut self.body);
        let mut decoded = Vec::new();
        let encoded = match self.resource(&mut decoded) {
            Some(attributes) => otlp::encode_request(
                &self.snapshot,
                Some(&self.baseline),
                &attributes,
                &meta,
                &mut body,
            )
            .is_ok(),
            None => false,
        };
        self.body = body;
        if !encoded {
            self.failed(format_args!("no memory for the request"));
            return;
        }
        match post(&self.target, &self.body, &mut self.request, limit_ms) {
            Ok(status) if (200..300).contains(&status) => {
                if self.failing {
                    warn(format_args!(
                        "OTLP pushes to {} go through again",
                        self.target.host
                    ));
                    self.failing = false;
                }
                self.advance(now);
            }
            Ok(status) if (400..500).contains(&status) && status != 408 && status != 429 => {
                // The Collector refuses this request for good: sending it
                // again would be refused again.
                self.failed(format_args!(
                    "the Collector refused a push (HTTP {status}); its interval is dropped"
                ));
                self.advance(now);
            }
            Ok(status) => self.failed(format_args!(
                "the Collector answered HTTP {status}; the next push covers this interval"
            )),
            Err(why) => self.failed(format_args!("{why}; the next push covers this interval")),
        }
    }

    /// The push went through (or was refused for good): the next starts here.
    fn advance(&mut self, now_unix_ns: u64) {
        if self.baseline.keep(&self.snapshot).is_ok() {
            self.since_unix_ns = now_unix_ns;
        }
    }

    fn failed(&mut self, why: core::fmt::Arguments<'_>) {
        if !self.failing {
            warn(format_args!(
                "cannot push to the OpenTelemetry Collector at {}: {why}",
                self.target.host
            ));
            self.failing = true;
        }
    }
}

impl Pusher {
    /// The resource attributes of a push: the service (`OTEL_SERVICE_NAME`,
    /// else `unknown_service:` and the executable's name, as the SDKs
    /// name it), the process, the host, the allocator, then each of
    /// `OTEL_RESOURCE_ATTRIBUTES` (`key=value,...`, percent-decoded into
    /// `decoded`), which may override them. `None` without memory.
    fn resource<'a>(&'a self, decoded: &'a mut Vec<u8>) -> Option<Vec<Attribute<'a>>> {
        let exe = self.exe.bytes();
        let exe_name = exe.rsplit(|&b| b == b'/').next().unwrap_or(exe);
        // SAFETY: getpid has no preconditions.
        let pid = i64::from(unsafe { libc::getpid() });
        let given = self.target.resource_attributes.bytes();
        decoded.try_reserve(given.len()).ok()?;
        let mut pairs: Vec<(core::ops::Range<usize>, core::ops::Range<usize>)> = Vec::new();
        for item in given.split(|&b| b == b',') {
            let Some(eq) = item.iter().position(|&b| b == b'=') else {
                continue;
            };
            let key = percent_decode(trim(&item[..eq]), decoded);
            let value = percent_decode(trim(&item[eq + 1..]), decoded);
            if !key.is_empty() {
                pairs.try_reserve(1).ok()?;
                pairs.push((key, value));
            }
        }
        let decoded: &'a [u8] = decoded;
        let mut out: Vec<Attribute<'a>> = Vec::new();
        out.try_reserve(6 + pairs.len()).ok()?;
        let service = self.target.service.bytes();
        if !service.is_empty() {
            out.push(Attribute {
                key: b"service.name",
                value: AttrValue::Str(service),
            });
        } else {
            // OTEL_RESOURCE_ATTRIBUTES may name it (below, replacing this).
            out.push(Attribute {
                key: b"service.name",
                value: AttrValue::Str(self.unknown_service.bytes()),
            });
        }
        out.push(Attribute {
            key: b"process.pid",
            value: AttrValue::Int(pid),
        });
        out.push(Attribute {
            key: b"process.executable.name",
            value: AttrValue::Str(exe_name),
        });
        out.push(Attribute {
            key: b"process.executable.path",
            value: AttrValue::Str(exe),
        });
        out.push(Attribute {
            key: b"host.name",
            value: AttrValue::Str(self.host_name.bytes()),
        });
        out.push(Attribute {
            key: b"allocmux.allocator",
            value: AttrValue::Str(crate::choice::current().backend.name().as_bytes()),
        });
        for (k, v) in pairs {
            let key = &decoded[k];
            // A later value of the same key wins, as in the SDKs.
            out.retain(|a| a.key != key);
            out.push(Attribute {
                key,
                value: AttrValue::Str(&decoded[v]),
            });
        }
        Some(out)
    }
}

/// `b` less spaces at both ends.
fn trim(b: &[u8]) -> &[u8] {
    let start = b.iter().position(|&c| c != b' ').unwrap_or(b.len());
    let end = b.iter().rposition(|&c| c != b' ').map_or(start, |e| e + 1);
    &b[start..end]
}

/// Appends `b`, percent-decoded, to `out` (which has room); where it is.
fn percent_decode(b: &[u8], out: &mut Vec<u8>) -> core::ops::Range<usize> {
    let start = out.len();
    let hex = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    let mut i = 0;
    while i < b.len() {
        match (
            b[i],
            b.get(i + 1).copied().and_then(hex),
            b.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(h), Some(l)) => {
                out.push(h << 4 | l);
                i += 3;
            }
            (c, _, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    start..out.len()
}

/// The host's name (`uname`'s node name).
fn host_name() -> Fixed<256> {
    // SAFETY: a zeroed utsname is a valid out-parameter.
    let mut u: libc::utsname = unsafe { core::mem::zeroed() };
    let mut f = Fixed::default();
    // SAFETY: uname fills the structure given.
    if unsafe { libc::uname(&mut u) } == 0 {
        let name: &[u8] = nul_terminated_bytes(&u.nodename);
        f.push(name);
    }
    f
}

/// The NUL-terminated `c_char` array's bytes.
fn nul_terminated_bytes(chars: &[libc::c_char]) -> &[u8] {
    let n = chars.iter().position(|&c| c == 0).unwrap_or(chars.len());
    // SAFETY: c_char and u8 have the same size and alignment.
    unsafe { core::slice::from_raw_parts(chars.as_ptr().cast(), n) }
}

/// The wall clock, ns since the epoch.
fn wall_ns() -> u64 {
    recorder::clock_ns(libc::CLOCK_REALTIME)
}

fn trim_slash(b: &[u8]) -> &[u8] {
    b.strip_suffix(b"/").unwrap_or(b)
}

/// A byte string in a fixed buffer (what does not fit is cut).
#[derive(Clone, Copy)]
struct Fixed<const N: usize> {
    buf: [u8; N],
    len: usize,
}

impl<const N: usize> Default for Fixed<N> {
    fn default() -> Self {
        Fixed {
            buf: [0; N],
            len: 0,
        }
    }
}

impl<const N: usize> Fixed<N> {
    fn of(parts: &[&[u8]]) -> Self {
        let mut f = Fixed::default();
        for p in parts {
            f.push(p);
        }
        f
    }

    fn push(&mut self, b: &[u8]) {
        let n = b.len().min(N - self.len);
        self.buf[self.len..self.len + n].copy_from_slice(&b[..n]);
        self.len += n;
    }

    fn bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

impl<const N: usize> core::fmt::Display for Fixed<N> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(core::str::from_utf8(self.bytes()).unwrap_or("?"))
    }
}

/// `http://HOST[:PORT][/PATH]`, HOST an IPv4 address, `[IPv6]` or
/// `localhost`; PORT 4318 when absent; PATH the profiles path when absent
/// or `/`.
fn parse_url(url: &[u8]) -> Option<Target> {
    let rest = url.strip_prefix(b"http://")?;
    let (authority, path) = match rest.iter().position(|&b| b == b'/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, &b""[..]),
    };
    let has_port = match authority.iter().rposition(|&b| b == b':') {
        Some(i) => !authority[..i].ends_with(b"]") || authority.starts_with(b"["),
        None => false,
    } && !(authority.starts_with(b"[") && authority.ends_with(b"]"));
    let spec: Fixed<128> = if has_port {
        Fixed::of(&[authority])
    } else {
        Fixed::of(&[authority, b":4318"])
    };
    let (addr, addr_len) = recorder::http::socket_address(spec.bytes())?;
    let path: Fixed<512> = if path.is_empty() || path == b"/" {
        Fixed::of(&[PROFILES_PATH])
    } else {
        Fixed::of(&[path])
    };
    Some(Target {
        addr,
        addr_len,
        host: spec,
        path,
        interval_s: 60,
        service: Fixed::default(),
        resource_attributes: Fixed::default(),
    })
}

/// Sends `body` as an OTLP/HTTP protobuf request to `t` within `limit_ms`,
/// building the request in `request`; the answer's HTTP status.
fn post(
    t: &Target,
    body: &[u8],
    request: &mut Vec<u8>,
    limit_ms: u64,
) -> Result<u16, &'static str> {
    let deadline = recorder::monotonic_ns() + limit_ms * 1_000_000;
    request.clear();
    let mut head = Fixed::<1024>::default();
    head.push(b"POST ");
    head.push(t.path.bytes());
    head.push(b" HTTP/1.1\r\nHost: ");
    head.push(t.host.bytes());
    head.push(b"\r\nContent-Type: application/x-protobuf\r\nUser-Agent: allocmux/");
    head.push(env!("CARGO_PKG_VERSION").as_bytes());
    head.push(b"\r\nConnection: close\r\nContent-Length: ");
    let mut digits = [0u8; 20];
    let mut length = SliceWriter {
        buf: &mut digits,
        len: 0,
    };
    // 20 digits hold any usize: cannot fail.
    let _ = write!(length, "{}", body.len());
    let n = length.len;
    head.push(&digits[..n]);
    head.push(b"\r\n\r\n");
    request
        .try_reserve(head.len + body.len())
        .map_err(|_| "no memory for the request")?;
    request.extend_from_slice(head.bytes());
    request.extend_from_slice(body);
    let sock = Socket::connect(t, deadline)?;
    sock.send_all(request, deadline)?;
    sock.read_status(deadline)
}

/// A connected non-blocking socket, closed when dropped.
struct Socket(c_int);

impl Drop for Socket {
    fn drop(&mut self) {
        // SAFETY: closes the descriptor this value owns.
        unsafe { libc::close(self.0) };
    }
}

impl Socket {
    fn connect(t: &Target, deadline: u64) -> Result<Socket, &'static str> {
        // SAFETY: a plain socket call.
        let fd = unsafe {
            libc::socket(
                t.addr.ss_family as c_int,
                libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                0,
            )
        };
        if fd < 0 {
            return Err("no socket");
        }
        let sock = Socket(fd);
        // SAFETY: connects the socket this function owns to an address of
        // the length given.
        let r = unsafe { libc::connect(fd, (&raw const t.addr).cast(), t.addr_len) };
        if r != 0 && errno() != libc::EINPROGRESS {
            return Err("cannot connect");
        }
        sock.wait(libc::POLLOUT, deadline)?;
        let mut err: c_int = 0;
        let mut len = size_of::<c_int>() as libc::socklen_t;
        // SAFETY: reads an int socket option into a local of that size.
        unsafe {
            libc::getsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_ERROR,
                (&raw mut err).cast(),
                &mut len,
            )
        };
        if err != 0 {
            return Err("cannot connect");
        }
        Ok(sock)
    }

    /// Waits until the socket is ready for `events`, or the deadline.
    fn wait(&self, events: i16, deadline: u64) -> Result<(), &'static str> {
        let left = deadline.saturating_sub(recorder::monotonic_ns());
        if left == 0 {
            return Err("no answer in time");
        }
        let mut fd = libc::pollfd {
            fd: self.0,
            events,
            revents: 0,
        };
        let ms = left.div_ceil(1_000_000).min(i32::MAX as u64) as c_int;
        // SAFETY: polls one valid pollfd.
        match unsafe { libc::poll(&mut fd, 1, ms) } {
            n if n > 0 => Ok(()),
            0 => Err("no answer in time"),
            _ if errno() == libc::EINTR => Ok(()),
            _ => Err("the connection failed"),
        }
    }

    fn send_all(&self, mut data: &[u8], deadline: u64) -> Result<(), &'static str> {
        while !data.is_empty() {
            // SAFETY: sends from a live slice of the length given.
            let n =
                unsafe { libc::send(self.0, data.as_ptr().cast(), data.len(), libc::MSG_NOSIGNAL) };
            if n > 0 {
                data = &data[n as usize..];
            } else if n < 0 && matches!(errno(), libc::EAGAIN | libc::EINTR) {
                self.wait(libc::POLLOUT, deadline)?;
            } else {
                return Err("the connection failed");
            }
        }
        Ok(())
    }

    /// Reads the answer's status line (`HTTP/1.1 200 ...`).
    fn read_status(&self, deadline: u64) -> Result<u16, &'static str> {
        let mut buf = [0u8; 64];
        let mut len = 0;
        while len < buf.len() {
            // SAFETY: reads into the unused part of a live buffer.
            let n =
                unsafe { libc::recv(self.0, buf[len..].as_mut_ptr().cast(), buf.len() - len, 0) };
            if n > 0 {
                len += n as usize;
                if buf[..len].contains(&b'\n') {
                    break;
                }
            } else if n == 0 {
                break;
            } else if matches!(errno(), libc::EAGAIN | libc::EINTR) {
                self.wait(libc::POLLIN, deadline)?;
            } else {
                return Err("the connection failed");
            }
        }
        status_of(&buf[..len]).ok_or("not an HTTP answer")
    }
}

/// The status of an HTTP/1.x status line.
fn status_of(line: &[u8]) -> Option<u16> {
    let rest = line.strip_prefix(b"HTTP/1.")?;
    let code = rest.get(2..5)?;
    if rest.get(1) != Some(&b' ') || !code.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(code.iter().fold(0u16, |a, &d| a * 10 + u16::from(d - b'0')))
}

fn errno() -> c_int {
    // SAFETY: the calling thread's errno.
    unsafe { *libc::__errno_location() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_read_or_refused() {
        let t = parse_url(b"http://127.0.0.1:14318").unwrap();
        assert_eq!(t.host.bytes(), b"127.0.0.1:14318");
        assert_eq!(t.path.bytes(), PROFILES_PATH);
        let t = parse_url(b"http://localhost/custom/path").unwrap();
        assert_eq!(t.host.bytes(), b"localhost:4318");
        assert_eq!(t.path.bytes(), b"/custom/path");
        let t = parse_url(b"http://[::1]:4318/").unwrap();
        assert_eq!(t.host.bytes(), b"[::1]:4318");
        assert!(parse_url(b"http://[::1]").is_some());
        for bad in [
            &b"https://127.0.0.1:4318"[..],
            b"collector:4318",
            b"http://collector.example:4318",
            b"http://127.0.0.1:99999",
        ] {
            assert!(parse_url(bad).is_none(), "{:?}", Bytes(bad).to_str_lossy());
        }
    }

    #[test]
    fn status_lines_are_read() {
        assert_eq!(status_of(b"HTTP/1.1 200 OK\r\n"), Some(200));
        assert_eq!(status_of(b"HTTP/1.0 503 x"), Some(503));
        assert_eq!(status_of(b"HTTP/2 200"), None);
        assert_eq!(status_of(b"garbage"), None);
    }
}
