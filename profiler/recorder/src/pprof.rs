//! Live heap profiles in pprof's `profile.proto`, as Go's
//! `net/http/pprof` serves them, encoded straight from a stack
//! [`Snapshot`] inside the recorded process.
//!
//! The profile stays a recording: its locations are addresses (the call
//! instruction, return address − 1) in mappings with their file's path,
//! offset and GNU build id, and the client symbolizes them (`go tool
//! pprof` from the binaries on its machine, Parca through debuginfod or
//! uploaded debug info). Nothing is looked up in the process.
//!
//! The sample types are Go's, in Go's order, so a scrape configuration
//! written for a Go service reads it unchanged: `alloc_objects/count`,
//! `alloc_space/bytes`, `inuse_objects/count`, `inuse_space/bytes`; then
//! allocmux's `alloc_time/nanoseconds` (the allocator time of the
//! allocations and of the frees of their blocks). Sampled figures are
//! already scaled to unbiased estimates, each allocation by its own
//! size's weight, so large allocations are not over-counted (the fault of
//! Go's per-stack average scaling, golang/go#26618).
//!
//! The encoder is hand-written (the format's varints and length prefixes)
//! so that every buffer grows fallibly: out of memory, a profile is not
//! served, and the process goes on.

use crate::stacks::Snapshot;
use crate::unwind::{MAX_FRAMES, ModuleInfo};
use allocmux_format::SiteCounts;
use allocmux_format::profile::StackMode;

pub use crate::protobuf::NoMemory;
use crate::protobuf::Pb;

/// Which of Go's two heap endpoints: the same samples, a different
/// default sample type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `/debug/pprof/heap`: opens on `inuse_space`.
    Heap,
    /// `/debug/pprof/allocs`: opens on `alloc_space`.
    Allocs,
}

/// The stacks' figures at the start of a delta profile (`?seconds=N`),
/// by stack index, unresolved ([`Snapshot::unresolved`]): the calls
/// charged the mean are priced at the end's mean, as the end's are, so
/// that a stack's time in the delta is that of its calls in it.
#[derive(Debug, Default)]
pub struct Baseline {
    counts: Vec<(SiteCounts, f64)>,
}

impl Baseline {
    /// An empty baseline.
    pub const fn new() -> Self {
        Baseline { counts: Vec::new() }
    }

    /// Keeps the figures of every stack in `snap`.
    pub fn keep(&mut self, snap: &Snapshot) -> Result<(), NoMemory> {
        self.counts.clear();
        self.counts.try_reserve(snap.len()).map_err(|_| NoMemory)?;
        self.counts
            .extend((0..snap.len()).map(|i| snap.unresolved(i)));
        Ok(())
    }

    /// The figures stack `i` had, unresolved ([`Snapshot::unresolved`]),
    /// `None` if it did not exist yet.
    pub(crate) fn unresolved(&self, i: usize) -> Option<(SiteCounts, f64)> {
        self.counts.get(i).copied()
    }
}

/// What the profile covers besides its stacks.
#[derive(Clone, Copy, Debug)]
pub struct Meta {
    /// Which endpoint.
    pub kind: Kind,
    /// Wall-clock time of the profile (`time_nanos`), ns since the epoch.
    pub time_ns: u64,
    /// The delta's length (`duration_nanos`), 0 for a whole-run profile.
    pub duration_ns: u64,
    /// TSC ticks per ns, to turn allocator time into ns (`None`: the
    /// time is left out as 0).
    pub ticks_per_ns: Option<f64>,
}

/// The string table's fixed entries, by index.
const STRINGS: [&str; 8] = [
    "",
    "alloc_objects",
    "count",
    "alloc_space",
    "bytes",
    "inuse_objects",
    "inuse_space",
    "alloc_time",
];
const S_ALLOC_OBJECTS: u64 = 1;
const S_COUNT: u64 = 2;
const S_ALLOC_SPACE: u64 = 3;
const S_BYTES: u64 = 4;
const S_INUSE_OBJECTS: u64 = 5;
const S_INUSE_SPACE: u64 = 6;
const S_ALLOC_TIME: u64 = 7;
/// Strings written after the fixed ones: `nanoseconds`, `space`.
const S_NANOSECONDS: u64 = 8;
const S_SPACE: u64 = 9;
/// The first string of the mappings: two each (path, build id).
const S_MAPPINGS: u64 = 10;

/// Encodes the profile of `snap` (minus `base`, for a delta) into `out`,
/// replacing what it held. Stacks whose figures are all zero are left out.
pub fn encode(
    snap: &Snapshot,
    base: Option<&Baseline>,
    meta: &Meta,
    out: &mut Vec<u8>,
) -> Result<(), NoMemory> {
    out.clear();
    let mut pb = Pb { out };
    let (mut scratch_buf, mut packed_buf, mut hex_buf) = (Vec::new(), Vec::new(), Vec::new());
    let mut scratch = Pb {
        out: &mut scratch_buf,
    };
    let mut packed = Pb {
        out: &mut packed_buf,
    };
    let mut buf = [0u64; MAX_FRAMES];

    // Sample types and the period.
    for (ty, unit) in [
        (S_ALLOC_OBJECTS, S_COUNT),
        (S_ALLOC_SPACE, S_BYTES),
        (S_INUSE_OBJECTS, S_COUNT),
        (S_INUSE_SPACE, S_BYTES),
        (S_ALLOC_TIME, S_NANOSECONDS),
    ] {
        scratch.clear();
        scratch.varint_field(1, ty)?;
        scratch.varint_field(2, unit)?;
        pb.message(1, scratch.bytes())?;
    }

    // Addresses, sorted and deduplicated: a location's id is its rank.
    let values = |i: usize| values(snap, base, meta, i);
    let addresses = call_addresses(snap, |i| values(i) != [0; 5])?;
    let location_id = |a: u64| addresses.binary_search(&a).map_or(0, |k| k as u64 + 1);

    // Samples: a stack's locations, leaf first, and its values.
    for i in 0..snap.len() {
        let v = values(i);
        if v == [0; 5] {
            continue;
        }
        scratch.clear();
        packed.clear();
        for &a in snap.frames(i, &mut buf) {
            packed.varint(location_id(call_address(a)))?;
        }
        scratch.message(1, packed.bytes())?;
        packed.clear();
        for x in v {
            packed.varint(x as u64)?; // int64: two's complement
        }
        scratch.message(2, packed.bytes())?;
        pb.message(2, scratch.bytes())?;
    }

    // Mappings, ids from 1 in the snapshot's order; the locations find
    // theirs by start address.
    let modules = snap.modules();
    for (k, m) in modules.iter().enumerate() {
        scratch.clear();
        mapping(&mut scratch, k as u64 + 1, m)?;
        pb.message(3, scratch.bytes())?;
    }
    let ranges = ModuleRanges::new(modules)?;
    for (k, &a) in addresses.iter().enumerate() {
        scratch.clear();
        scratch.varint_field(1, k as u64 + 1)?;
        scratch.varint_field(2, ranges.index_of(a))?;
        scratch.varint_field(3, a)?;
        pb.message(4, scratch.bytes())?;
    }

    // The string table: the fixed strings, then each mapping's.
    for s in STRINGS {
        pb.bytes_field(6, s.as_bytes())?;
    }
    pb.bytes_field(6, b"nanoseconds")?;
    pb.bytes_field(6, b"space")?;
    debug_assert_eq!(S_MAPPINGS, STRINGS.len() as u64 + 2);
    let mut hex = Pb { out: &mut hex_buf };
    for m in modules {
        pb.bytes_field(6, &m.path)?;
        hex.clear();
        for b in &m.build_id {
            let digits = b"0123456789abcdef";
            hex.raw(&[digits[(b >> 4) as usize], digits[(b & 15) as usize]])?;
        }
        pb.bytes_field(6, hex.bytes())?;
    }

    pb.varint_field(9, meta.time_ns)?;
    pb.varint_field(10, meta.duration_ns)?;
    scratch.clear();
    scratch.varint_field(1, S_SPACE)?;
    scratch.varint_field(2, S_BYTES)?;
    pb.message(11, scratch.bytes())?;
    let period = match snap.mode() {
        StackMode::Sample { mean_bytes } => mean_bytes,
        StackMode::Off | StackMode::Exact => 1,
    };
    pb.varint_field(12, period)?;
    let default = match meta.kind {
        Kind::Heap => S_INUSE_SPACE,
        Kind::Allocs => S_ALLOC_SPACE,
    };
    pb.varint_field(14, default)?;
    Ok(())
}

/// The call instruction of a return address: the location pprof wants.
pub(crate) fn call_address(return_address: u64) -> u64 {
    return_address.saturating_sub(1)
}

/// The call addresses of the stacks of `snap` that `kept` keeps, sorted
/// and each once: the locations of a profile, a location's index its rank.
pub(crate) fn call_addresses(
    snap: &Snapshot,
    kept: impl Fn(usize) -> bool,
) -> Result<Vec<u64>, NoMemory> {
    let mut buf = [0u64; MAX_FRAMES];
    let mut addresses: Vec<u64> = Vec::new();
    for i in (0..snap.len()).filter(|&i| kept(i)) {
        let frames = snap.frames(i, &mut buf);
        addresses.try_reserve(frames.len()).map_err(|_| NoMemory)?;
        addresses.extend(frames.iter().map(|&a| call_address(a)));
    }
    addresses.sort_unstable();
    addresses.dedup();
    Ok(addresses)
}

/// The values of stack `i`, in the sample types' order.
fn values(snap: &Snapshot, base: Option<&Baseline>, meta: &Meta, i: usize) -> [i64; 5] {
    let now = snap.counts(i);
    let then = base
        .and_then(|b| b.counts.get(i))
        .map(|&(mut then, mean_calls)| {
            then.ticks = then.ticks.saturating_add(snap.mean_ticks(mean_calls));
            then
        })
        .unwrap_or_default();
    let d = |a: u64, b: u64| a as i64 - b as i64;
    let ticks = d(now.ticks, then.ticks);
    let ns = meta
        .ticks_per_ns
        .filter(|&t| t > 0.0)
        .map_or(0, |t| (ticks as f64 / t) as i64);
    [
        d(now.allocs, then.allocs),
        d(now.bytes, then.bytes),
        d(now.live_allocs, then.live_allocs),
        d(now.live_bytes, then.live_bytes),
        ns,
    ]
}

/// The page size mappings are aligned to, in the address space and in
/// the file (x86-64's and AArch64's smallest).
const PAGE: u64 = 4096;

/// A `Mapping` message.
fn mapping(pb: &mut Pb<'_>, id: u64, m: &ModuleInfo) -> Result<(), NoMemory> {
    let strings = S_MAPPINGS + 2 * (id - 1);
    let (start, limit, offset) = page_aligned(m);
    pb.varint_field(1, id)?;
    pb.varint_field(2, start)?;
    pb.varint_field(3, limit)?;
    pb.varint_field(4, offset)?;
    pb.varint_field(5, strings)?;
    if !m.build_id.is_empty() {
        pb.varint_field(6, strings + 1)?;
    }
    Ok(())
}

/// A module's start, limit and file offset as `/proc/self/maps` shows
/// them, page-aligned: pprof matches a mapping to the file's program
/// headers by its page offset (a segment need not start on a page in the
/// file, and lld's do not). The start minus the offset, which places the
/// file, stays the same.
pub(crate) fn page_aligned(m: &ModuleInfo) -> (u64, u64, u64) {
    let slack = m.range.start % PAGE;
    (
        m.range.start - slack,
        m.range.end,
        m.file_offset.saturating_sub(slack),
    )
}

/// The modules' ranges by start address, to find the module of an
/// address.
pub(crate) struct ModuleRanges {
    /// Start, end and index from 1 in the snapshot's order.
    by_start: Vec<(u64, u64, u64)>,
}

impl ModuleRanges {
    pub(crate) fn new(modules: &[ModuleInfo]) -> Result<Self, NoMemory> {
        let mut by_start = Vec::new();
        by_start.try_reserve(modules.len()).map_err(|_| NoMemory)?;
        by_start.extend(
            (modules.iter().enumerate()).map(|(k, m)| (m.range.start, m.range.end, k as u64 + 1)),
        );
        by_start.sort_unstable();
        Ok(ModuleRanges { by_start })
    }

    /// The index from 1 of the module `a` is in (of the last to start
    /// at or before it), 0 if none.
    pub(crate) fn index_of(&self, a: u64) -> u64 {
        let k = self.by_start.partition_point(|&(start, _, _)| start <= a);
        match k.checked_sub(1).map(|k| self.by_start[k]) {
            Some((_, end, id)) if a < end => id,
            _ => 0,
        }
    }
}
