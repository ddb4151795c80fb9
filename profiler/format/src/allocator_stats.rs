//! What the allocator itself says about the memory it holds:
//! [`AllocatorStats`], as read from jemalloc (`stats.*`), mimalloc
//! (`mi_process_info`) or glibc (`mallinfo2`) by `allocmux-recorder`, and
//! as kept in profiles.
//!
//! [`Counts`](crate::Counts) counts what the program asked for; these figures
//! say what that cost the allocator: the pages it keeps active, resident or
//! mapped around the program's live blocks. The gap between the two is
//! fragmentation and caching, and it differs from allocator to allocator.

use core::fmt;

use crate::Backend;
use crate::byte_size::ByteSize;

/// One reading of an allocator's own statistics: process-wide figures, in
/// bytes unless said otherwise, each in the allocator's own terms (so the
/// three kinds differ in fields). [`AllocatorStats::held_bytes`] is what
/// the allocator holds for the heap, where that can be told.
///
/// A Rust program reads them with `allocmux::read_allocator_stats`, or
/// `Switchable::allocator_stats` for the allocator in use (see the
/// `allocmux` crate's documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum AllocatorStats {
    /// glibc's malloc, from `mallinfo2()`.
    System(GlibcStats),
    /// jemalloc, from its `stats.*` controls after advancing `epoch`.
    Jemalloc(JemallocStats),
    /// mimalloc, from `mi_process_info()`.
    Mimalloc(MimallocStats),
}

/// jemalloc's statistics (`stats.allocated`, `.active`, `.resident`,
/// `.mapped`, `.retained`), as fresh as the read: the read advances
/// jemalloc's `epoch`, which refreshes its cached totals.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct JemallocStats {
    /// Bytes in blocks the program holds (usable sizes: each request
    /// rounded up to its size class).
    pub allocated: u64,
    /// Bytes in active pages: pages that hold at least one live block.
    /// `active - allocated` is free space inside them.
    pub active: u64,
    /// Bytes in resident pages the allocator maps: active pages, its
    /// metadata, and dirty pages freed but not yet returned to the kernel
    /// (an upper bound: some may never have been touched).
    pub resident: u64,
    /// Bytes in active extents mapped by the allocator (larger than
    /// `active`: includes metadata and dirty extents).
    pub mapped: u64,
    /// Bytes of virtual memory kept (not unmapped) for reuse, not resident.
    pub retained: u64,
}

/// mimalloc's process information (`mi_process_info`), which on Linux is
/// mimalloc's own count of committed memory plus the process's figures
/// from `getrusage` (its current RSS is estimated as the committed bytes,
/// so it is not repeated here). The libmimalloc-sys crate exposes nothing
/// finer (mimalloc keeps per-page statistics only in its debug builds).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct MimallocStats {
    /// Bytes mimalloc has committed (read/write accessible) now: an upper
    /// bound on what it holds. On Linux with overcommit (the default) it
    /// commits what it reserves whole, untouched pages included: 32 MiB
    /// segments in a small program, a 1 GiB arena in a larger one.
    pub committed: u64,
    /// The most it ever had committed.
    pub peak_committed: u64,
    /// The process's peak resident set size (`ru_maxrss`), not mimalloc's alone.
    pub peak_rss: u64,
    /// The process's major page faults so far (a count, not bytes).
    pub page_faults: u64,
}

/// glibc's statistics (`mallinfo2`): its arenas (the `brk` heap and the
/// per-thread arenas) and the large blocks it serves with their own `mmap`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct GlibcStats {
    /// Bytes in blocks in use: `uordblks + hblkhd` (chunk sizes, headers
    /// included, plus the mmapped blocks).
    pub in_use: u64,
    /// Bytes free inside the arenas (`fordblks`: free chunks, the top
    /// chunk and fast bins).
    pub free: u64,
    /// Bytes of the arenas, used and free (`arena`).
    pub arena: u64,
    /// Bytes in blocks served by their own `mmap` (`hblkhd`).
    pub mmapped: u64,
    /// Bytes at the top of the main heap that `malloc_trim` could give
    /// back (`keepcost`).
    pub releasable: u64,
}

impl GlibcStats {
    /// These figures without blocks that are not the program's (the
    /// preloaded recorder's own): `arena_bytes` of chunks in the arenas and
    /// `mmapped_bytes` in chunks glibc mapped on its own, as `mallinfo2`
    /// counts them (chunk sizes, headers included). The space such blocks
    /// left free between the program's is not told apart.
    pub fn without(self, arena_bytes: u64, mmapped_bytes: u64) -> GlibcStats {
        GlibcStats {
            in_use: self
                .in_use
                .saturating_sub(arena_bytes.saturating_add(mmapped_bytes)),
            arena: self.arena.saturating_sub(arena_bytes),
            mmapped: self.mmapped.saturating_sub(mmapped_bytes),
            ..self
        }
    }
}

impl AllocatorStats {
    /// The allocator these figures come from.
    pub fn backend(&self) -> Backend {
        match self {
            AllocatorStats::System(_) => Backend::System,
            AllocatorStats::Jemalloc(_) => Backend::Jemalloc,
            AllocatorStats::Mimalloc(_) => Backend::Mimalloc,
        }
    }

    /// What the allocator holds for the heap, comparable across
    /// allocators: jemalloc's `resident`, glibc's `arena + mmapped`.
    /// Divided by the program's live bytes it gives the heap's overhead
    /// ([`AllocatorStats::overhead`]). `None` for mimalloc: its committed
    /// bytes are no such figure on Linux, where it commits what it reserves
    /// whole (32 MiB segments, 1 GiB arenas) when the kernel overcommits,
    /// as it does by default.
    pub fn held_bytes(&self) -> Option<u64> {
        match self {
            AllocatorStats::System(g) => Some(g.arena.saturating_add(g.mmapped)),
            AllocatorStats::Jemalloc(j) => Some(j.resident),
            AllocatorStats::Mimalloc(_) => None,
        }
    }

    /// The name of [`AllocatorStats::held_bytes`]'s figure, as the
    /// allocator calls it: `resident`, `arena + mmapped`; `None` where
    /// there is no such figure.
    pub fn held_name(&self) -> Option<&'static str> {
        match self {
            AllocatorStats::System(_) => Some("arena + mmapped"),
            AllocatorStats::Jemalloc(_) => Some("resident"),
            AllocatorStats::Mimalloc(_) => None,
        }
    }

    /// What the allocator counts as in use by the program, where it counts
    /// it: jemalloc's `allocated`, glibc's `in_use`; `None` for mimalloc
    /// (its process information has no such figure).
    pub fn allocated_bytes(&self) -> Option<u64> {
        match self {
            AllocatorStats::System(g) => Some(g.in_use),
            AllocatorStats::Jemalloc(j) => Some(j.allocated),
            AllocatorStats::Mimalloc(_) => None,
        }
    }

    /// [`held_bytes`](AllocatorStats::held_bytes) per live byte of the
    /// program (`live_bytes`, e.g. [`Counts::live_bytes`](crate::Counts)
    /// from a snapshot taken with the reading): 1.0 would be a heap with
    /// no free space, no metadata and no cached pages; `None` for no live
    /// bytes, or for mimalloc (see `held_bytes`).
    pub fn overhead(&self, live_bytes: u64) -> Option<f64> {
        let held = self.held_bytes()?;
        (live_bytes > 0).then(|| held as f64 / live_bytes as f64)
    }

    /// The figures as `(name, value)` pairs, in display order; the names
    /// are the field names, and the ones the profile format uses.
    pub fn fields(&self) -> impl Iterator<Item = (&'static str, u64)> + use<> {
        let pairs: [(&'static str, u64); 5] = match *self {
            AllocatorStats::System(g) => [
                ("in_use", g.in_use),
                ("free", g.free),
                ("arena", g.arena),
                ("mmapped", g.mmapped),
                ("releasable", g.releasable),
            ],
            AllocatorStats::Jemalloc(j) => [
                ("allocated", j.allocated),
                ("active", j.active),
                ("resident", j.resident),
                ("mapped", j.mapped),
                ("retained", j.retained),
            ],
            AllocatorStats::Mimalloc(m) => [
                ("committed", m.committed),
                ("peak_committed", m.peak_committed),
                ("peak_rss", m.peak_rss),
                ("page_faults", m.page_faults),
                ("", 0),
            ],
        };
        pairs.into_iter().filter(|(name, _)| !name.is_empty())
    }

    /// The statistics of `backend` from `(name, value)` pairs as
    /// [`fields`](AllocatorStats::fields) gives them: unknown names are
    /// ignored (a later version's additions), missing ones read as 0.
    /// None for [`Backend::Next`], whose statistics allocmux cannot read.
    pub fn from_fields<'a>(
        backend: Backend,
        fields: impl IntoIterator<Item = (&'a str, u64)>,
    ) -> Option<AllocatorStats> {
        let mut s = match backend {
            Backend::System => AllocatorStats::System(GlibcStats::default()),
            Backend::Jemalloc => AllocatorStats::Jemalloc(JemallocStats::default()),
            Backend::Mimalloc => AllocatorStats::Mimalloc(MimallocStats::default()),
            Backend::Next => return None,
        };
        for (name, v) in fields {
            let slot = match (&mut s, name) {
                (AllocatorStats::System(g), "in_use") => &mut g.in_use,
                (AllocatorStats::System(g), "free") => &mut g.free,
                (AllocatorStats::System(g), "arena") => &mut g.arena,
                (AllocatorStats::System(g), "mmapped") => &mut g.mmapped,
                (AllocatorStats::System(g), "releasable") => &mut g.releasable,
                (AllocatorStats::Jemalloc(j), "allocated") => &mut j.allocated,
                (AllocatorStats::Jemalloc(j), "active") => &mut j.active,
                (AllocatorStats::Jemalloc(j), "resident") => &mut j.resident,
                (AllocatorStats::Jemalloc(j), "mapped") => &mut j.mapped,
                (AllocatorStats::Jemalloc(j), "retained") => &mut j.retained,
                (AllocatorStats::Mimalloc(m), "committed") => &mut m.committed,
                (AllocatorStats::Mimalloc(m), "peak_committed") => &mut m.peak_committed,
                (AllocatorStats::Mimalloc(m), "peak_rss") => &mut m.peak_rss,
                (AllocatorStats::Mimalloc(m), "page_faults") => &mut m.page_faults,
                _ => continue,
            };
            *slot = v;
        }
        Some(s)
    }
}

/// One line: `jemalloc: 12.0 MiB allocated, 13.1 MiB active, 20.0 MiB
/// resident, 32.0 MiB mapped, 0 B retained`.
impl fmt::Display for AllocatorStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AllocatorStats::System(g) => g.fmt(f),
            AllocatorStats::Jemalloc(j) => j.fmt(f),
            AllocatorStats::Mimalloc(m) => m.fmt(f),
        }
    }
}

impl fmt::Display for JemallocStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "jemalloc: {} allocated, {} active, {} resident, {} mapped, {} retained",
            ByteSize(self.allocated),
            ByteSize(self.active),
            ByteSize(self.resident),
            ByteSize(self.mapped),
            ByteSize(self.retained),
        )
    }
}

impl fmt::Display for MimallocStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "mimalloc: {} committed (peak {}); process peak RSS {}, {} major page faults",
            ByteSize(self.committed),
            ByteSize(self.peak_committed),
            ByteSize(self.peak_rss),
            self.page_faults,
        )
    }
}

impl fmt::Display for GlibcStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "glibc: {} in use, {} free, {} in arenas, {} mmapped, {} releasable",
            ByteSize(self.in_use),
            ByteSize(self.free),
            ByteSize(self.arena),
            ByteSize(self.mmapped),
            ByteSize(self.releasable),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_round_trip_and_display() {
        let j = AllocatorStats::Jemalloc(JemallocStats {
            allocated: 12 << 20,
            active: 13 << 20,
            resident: 20 << 20,
            mapped: 32 << 20,
            retained: 0,
        });
        assert_eq!(
            j.to_string(),
            "jemalloc: 12.0 MiB allocated, 13.0 MiB active, 20.0 MiB resident, 32.0 MiB mapped, 0 B retained"
        );
        let m = AllocatorStats::Mimalloc(MimallocStats {
            committed: 1 << 20,
            peak_committed: 2 << 20,
            peak_rss: 3 << 20,
            page_faults: 4,
        });
        let g = AllocatorStats::System(GlibcStats {
            in_use: 1,
            free: 2,
            arena: 3,
            mmapped: 4,
            releasable: 5,
        });
        for s in [j, m, g] {
            let pairs: Vec<_> = s.fields().collect();
            assert_eq!(AllocatorStats::from_fields(s.backend(), pairs), Some(s));
        }
        assert_eq!(AllocatorStats::from_fields(Backend::Next, []), None);
        assert_eq!(m.fields().count(), 4);
        assert_eq!((g.held_bytes(), g.allocated_bytes()), (Some(7), Some(1)));
        assert_eq!((m.held_bytes(), m.allocated_bytes()), (None, None));
        assert_eq!(m.overhead(1), None);
        assert_eq!(j.overhead(10 << 20), Some(2.0));
        assert_eq!(j.overhead(0), None);
        // Unknown names (a later version's) are skipped, missing ones are 0.
        let back = AllocatorStats::from_fields(
            Backend::Jemalloc,
            [("active", 5), ("dirty", 9), ("in_use", 7)],
        );
        assert_eq!(
            back,
            Some(AllocatorStats::Jemalloc(JemallocStats {
                active: 5,
                ..Default::default()
            }))
        );
    }
}
