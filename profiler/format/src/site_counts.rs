//! [`SiteCounts`]: the figures of one call stack.

/// What the allocations made from one call stack did. In `sample` mode
/// every figure but `samples` is an estimate (see the profile format).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SiteCounts {
    /// Allocations recorded with this stack (sampled ones in `sample` mode).
    pub samples: u64,
    /// Allocation calls.
    pub allocs: u64,
    /// Bytes requested by them.
    pub bytes: u64,
    /// Allocator time of those calls and of the `free`s of their blocks, in TSC ticks.
    pub ticks: u64,
    /// Blocks from this stack live when the process's live bytes peaked.
    pub peak_allocs: u64,
    /// Their bytes.
    pub peak_bytes: u64,
    /// Blocks from this stack still live (at exit, for a finished process).
    pub live_allocs: u64,
    /// Their bytes.
    pub live_bytes: u64,
    /// Temporary allocations: blocks from this stack freed by the thread
    /// that allocated them before it allocated anything else (heaptrack's
    /// definition, per thread; a `realloc` is not such a free). Counted
    /// with exact stacks only, 0 otherwise.
    pub temporary: u64,
}

impl SiteCounts {
    /// How many figures a stack has.
    pub const FIELDS: usize = 9;

    /// How many figures a stack line of format version 1 has (no
    /// `temporary`).
    pub const FIELDS_V1: usize = 8;

    /// The figures in the order of a profile's `stack` line: samples,
    /// allocs, bytes, ticks, peak allocs and bytes, live allocs and bytes,
    /// temporary allocations.
    pub fn fields(&self) -> [u64; Self::FIELDS] {
        [
            self.samples,
            self.allocs,
            self.bytes,
            self.ticks,
            self.peak_allocs,
            self.peak_bytes,
            self.live_allocs,
            self.live_bytes,
            self.temporary,
        ]
    }

    /// The inverse of [`fields`](Self::fields).
    pub fn from_fields(f: [u64; Self::FIELDS]) -> Self {
        let [
            samples,
            allocs,
            bytes,
            ticks,
            peak_allocs,
            peak_bytes,
            live_allocs,
            live_bytes,
            temporary,
        ] = f;
        SiteCounts {
            samples,
            allocs,
            bytes,
            ticks,
            peak_allocs,
            peak_bytes,
            live_allocs,
            live_bytes,
            temporary,
        }
    }

    /// Adds another stack's figures (the same stack from another process).
    pub fn add(&mut self, o: &SiteCounts) {
        let mut f = self.fields();
        for (a, b) in f.iter_mut().zip(o.fields()) {
            *a = a.saturating_add(b);
        }
        *self = Self::from_fields(f);
    }
}
