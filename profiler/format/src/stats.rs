//! Plain-value statistics shared by the recorder, the profile format and the
//! reports: which function was called, and the totals of one process.

/// The malloc family, listed once: each function's C name, its [`Func`]
/// variant (also the name of the shim's body type for it) and its C
/// signature. `for_each_malloc_function!(callback)` expands to
/// `callback! { [] name => Variant (arg: Type, ...) -> Ret; ... }`, and
/// `for_each_malloc_function!(callback, extra tokens)` passes the extra
/// tokens inside the brackets. [`Func`] is generated from it here; the
/// shim generates its exports and hook tables from it. Internal to
/// allocmux's own shim.
#[doc(hidden)]
#[macro_export]
macro_rules! for_each_malloc_function {
    ($callback:ident $(, $($extra:tt)*)?) => {
        $callback! {
            [$($($extra)*)?]
            malloc => Malloc (size: usize) -> *mut ::core::ffi::c_void;
            free => Free (ptr: *mut ::core::ffi::c_void);
            calloc => Calloc (count: usize, size: usize) -> *mut ::core::ffi::c_void;
            realloc => Realloc (ptr: *mut ::core::ffi::c_void, size: usize) -> *mut ::core::ffi::c_void;
            aligned_alloc => AlignedAlloc (alignment: usize, size: usize) -> *mut ::core::ffi::c_void;
            malloc_usable_size => MallocUsableSize (ptr: *mut ::core::ffi::c_void) -> usize;
            memalign => Memalign (alignment: usize, size: usize) -> *mut ::core::ffi::c_void;
            posix_memalign => PosixMemalign (
                out: *mut *mut ::core::ffi::c_void,
                alignment: usize,
                size: usize
            ) -> ::core::ffi::c_int;
            pvalloc => Pvalloc (size: usize) -> *mut ::core::ffi::c_void;
            valloc => Valloc (size: usize) -> *mut ::core::ffi::c_void;
        }
    };
}

/// [`Func`], [`FUNC_COUNT`], [`Func::ALL`] and [`Func::name`] from the table.
macro_rules! define_func {
    ([] $($name:ident => $Variant:ident ($($arg:ident : $ty:ty),*) $(-> $ret:ty)?;)*) => {
        /// An exported allocation function of the malloc family.
        ///
        /// The order is part of the profile format only through [`Func::name`]: the
        /// file names functions, never their index.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[repr(u8)]
        pub enum Func {
            $(
                #[doc = concat!("`", stringify!($name), "(", stringify!($($arg),*), ")`")]
                $Variant,
            )*
        }

        /// Number of [`Func`] variants.
        pub const FUNC_COUNT: usize = [$(stringify!($name)),*].len();

        impl Func {
            /// Every function, in declaration order.
            pub const ALL: [Func; FUNC_COUNT] = [$(Func::$Variant),*];

            /// The C name of the function, as used in profiles and reports.
            pub const fn name(self) -> &'static str {
                match self {
                    $(Func::$Variant => stringify!($name),)*
                }
            }
        }
    };
}

crate::for_each_malloc_function!(define_func);

impl Func {
    /// Looks a function up by its C name.
    pub fn from_name(name: &str) -> Option<Func> {
        Func::ALL.into_iter().find(|f| f.name() == name)
    }

    /// Whether a call of this function hands out a new block.
    pub const fn allocates(self) -> bool {
        !matches!(self, Func::Free | Func::MallocUsableSize)
    }
}

/// Number of buckets of the request-size histogram.
///
/// Bucket 0 counts zero-byte requests; bucket `k` (1 ≤ k < 47) counts requests
/// of `2^(k-1)` to `2^k - 1` bytes; the last bucket counts everything from
/// 64 TiB up (requests that no allocator here can satisfy).
pub const SIZE_BUCKETS: usize = 48;

/// Requests of at least this many bytes are counted one by one, in the
/// histogram and in allocator time: each stands for itself. Smaller ones
/// are counted at the timed calls, a sample weighted by its mean, so their
/// histogram counts are estimates.
pub const EXACT_TIMING_BYTES: usize = 64 * 1024;

/// The histogram bucket of a request of `size` bytes.
#[inline(always)]
pub const fn size_bucket(size: usize) -> usize {
    let b = (usize::BITS - size.leading_zeros()) as usize;
    if b < SIZE_BUCKETS {
        b
    } else {
        SIZE_BUCKETS - 1
    }
}

/// The smallest request size that falls in `bucket`.
pub const fn bucket_floor(bucket: usize) -> u64 {
    if bucket == 0 { 0 } else { 1u64 << (bucket - 1) }
}

/// Everything counted for one process (or a sum of processes).
///
/// Byte figures of blocks are *usable* sizes as the backend reports them
/// (`malloc_usable_size`), because only those can be matched at `free`;
/// `bytes_requested` is the sum of the sizes the program asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Totals {
    /// Calls per function, indexed by `Func as usize`.
    pub calls: [u64; FUNC_COUNT],
    /// Calls that failed (returned NULL or an error code).
    pub failed_calls: u64,
    /// Sum of requested sizes of successful allocations.
    pub bytes_requested: u64,
    /// Sum of usable sizes of the blocks handed out.
    pub bytes_allocated: u64,
    /// Sum of usable sizes of the blocks freed (including by `realloc`).
    pub bytes_freed: u64,
    /// Highest live byte count seen (usable sizes).
    pub peak_live_bytes: u64,
    /// Calls timed because the random sample picked them (each stands for
    /// `time_sample_mean` calls).
    pub timed_calls: u64,
    /// Sum of those calls' durations, in TSC ticks.
    pub timed_ticks: u64,
    /// Sum of the squares of those durations (ticks²), for the estimate's
    /// interval; 0 in profiles written before it was recorded.
    pub timed_ticks_sq: u64,
    /// Calls timed because every call of their kind is (blocks of at least
    /// `EXACT_TIMING_BYTES`, each thread's first calls): each stands for itself.
    pub exact_calls: u64,
    /// Sum of those calls' durations, in TSC ticks.
    pub exact_ticks: u64,
    /// Request-size histogram, see [`SIZE_BUCKETS`]: requests of
    /// `EXACT_TIMING_BYTES` and more are all counted; smaller ones are
    /// counted at the timed calls, each weighted by the sampling mean (an
    /// unbiased estimate, exact with `ALLOCMUX_TIME_SAMPLE=1`).
    pub size_hist: [u64; SIZE_BUCKETS],
    /// `realloc` calls that returned the block they were given (resized in
    /// place). Counted by the Rust wrapper (`allocmux::Counting`); the shim
    /// and the profile format do not carry it (0 there).
    pub reallocs_in_place: u64,
}

impl Default for Totals {
    fn default() -> Self {
        Totals {
            calls: [0; FUNC_COUNT],
            failed_calls: 0,
            bytes_requested: 0,
            bytes_allocated: 0,
            bytes_freed: 0,
            peak_live_bytes: 0,
            timed_calls: 0,
            timed_ticks: 0,
            timed_ticks_sq: 0,
            exact_calls: 0,
            exact_ticks: 0,
            size_hist: [0; SIZE_BUCKETS],
            reallocs_in_place: 0,
        }
    }
}

impl Totals {
    /// Estimated TSC ticks spent inside the allocator: the always-timed
    /// calls' ticks plus the sampled calls' ticks scaled by the sampling
    /// mean (a stratified, unbiased estimate). Divide by
    /// [`ClockPair::ticks_per_ns_since`](crate::profile::ClockPair::ticks_per_ns_since)
    /// for nanoseconds.
    pub fn estimated_allocator_ticks(&self, time_sample_mean: u32) -> f64 {
        self.exact_ticks as f64 + self.timed_ticks as f64 * time_sample_mean as f64
    }

    /// Half the width of a 95% confidence interval of
    /// [`estimated_allocator_ticks`](Self::estimated_allocator_ticks), in
    /// TSC ticks: `1.96 * sqrt((1 - q) * sum(t²)) / q` over the sampled
    /// calls' ticks `t`, with `q = 1 / time_sample_mean` the probability
    /// that a call is timed (the variance of a Horvitz-Thompson total under
    /// independent sampling; the always-timed calls add none). 0 when every
    /// call is timed; `None` when the profile carries no sum of squares
    /// (written before it was recorded) although calls were sampled.
    pub fn allocator_ticks_margin(&self, time_sample_mean: u32) -> Option<f64> {
        if time_sample_mean <= 1 {
            return Some(0.0);
        }
        if self.timed_ticks_sq == 0 && self.timed_ticks > 0 {
            return None;
        }
        let m = time_sample_mean as f64;
        Some(1.96 * ((1.0 - 1.0 / m) * self.timed_ticks_sq as f64).sqrt() * m)
    }

    /// Calls of one function.
    pub fn calls_of(&self, f: Func) -> u64 {
        self.calls[f as usize]
    }

    /// All calls of all functions.
    pub fn total_calls(&self) -> u64 {
        self.calls.iter().fold(0, |a, &b| a.saturating_add(b))
    }

    /// Calls that hand out a block (everything but `free` and `malloc_usable_size`).
    pub fn allocation_calls(&self) -> u64 {
        Func::ALL
            .iter()
            .filter(|f| f.allocates())
            .map(|&f| self.calls_of(f))
            .fold(0, u64::saturating_add)
    }

    /// Bytes allocated and not yet freed (0 if more was freed than allocated,
    /// as in a forked child that frees its parent's blocks).
    pub fn live_bytes(&self) -> u64 {
        self.bytes_allocated.saturating_sub(self.bytes_freed)
    }

    /// Adds another set of totals into this one. Peaks add up, so the sum of
    /// several processes' peaks is an upper bound of their combined peak.
    pub fn add(&mut self, o: &Totals) {
        for (a, b) in self.calls.iter_mut().zip(o.calls) {
            *a = a.saturating_add(b);
        }
        for (a, b) in self.size_hist.iter_mut().zip(o.size_hist) {
            *a = a.saturating_add(b);
        }
        self.failed_calls = self.failed_calls.saturating_add(o.failed_calls);
        self.bytes_requested = self.bytes_requested.saturating_add(o.bytes_requested);
        self.bytes_allocated = self.bytes_allocated.saturating_add(o.bytes_allocated);
        self.bytes_freed = self.bytes_freed.saturating_add(o.bytes_freed);
        self.peak_live_bytes = self.peak_live_bytes.saturating_add(o.peak_live_bytes);
        self.timed_calls = self.timed_calls.saturating_add(o.timed_calls);
        self.timed_ticks = self.timed_ticks.saturating_add(o.timed_ticks);
        self.timed_ticks_sq = self.timed_ticks_sq.saturating_add(o.timed_ticks_sq);
        self.exact_calls = self.exact_calls.saturating_add(o.exact_calls);
        self.exact_ticks = self.exact_ticks.saturating_add(o.exact_ticks);
        self.reallocs_in_place = self.reallocs_in_place.saturating_add(o.reallocs_in_place);
    }
}

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
}

impl SiteCounts {
    /// How many figures a stack has.
    pub const FIELDS: usize = 8;

    /// The figures in the order of a profile's `stack` line: samples,
    /// allocs, bytes, ticks, peak allocs and bytes, live allocs and bytes.
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

/// A byte count shown in binary units ("512 B", "1.5 KiB", "2.0 GiB"),
/// honouring width and alignment. Formats without allocating, so the shim
/// can use it inside the host process.
#[derive(Clone, Copy, Debug)]
pub struct ByteSize(pub u64);

impl core::fmt::Display for ByteSize {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        use core::fmt::Write;
        struct Buf([u8; 32], usize);
        impl Write for Buf {
            fn write_str(&mut self, s: &str) -> core::fmt::Result {
                let end = self.1 + s.len();
                self.0
                    .get_mut(self.1..end)
                    .ok_or(core::fmt::Error)?
                    .copy_from_slice(s.as_bytes());
                self.1 = end;
                Ok(())
            }
        }
        const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
        let mut v = self.0 as f64;
        let mut u = 0;
        while v >= 1024.0 && u + 1 < UNITS.len() {
            v /= 1024.0;
            u += 1;
        }
        let mut buf = Buf([0; 32], 0);
        if u == 0 {
            write!(buf, "{} B", self.0)?;
        } else {
            write!(buf, "{v:.1} {}", UNITS[u])?;
        }
        // Only ASCII was written.
        f.pad(core::str::from_utf8(&buf.0[..buf.1]).map_err(|_| core::fmt::Error)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_sizes() {
        assert_eq!(ByteSize(1023).to_string(), "1023 B");
        assert_eq!(ByteSize(1536).to_string(), "1.5 KiB");
        assert_eq!(ByteSize(3 << 30).to_string(), "3.0 GiB");
        assert_eq!(format!("{:>8}", ByteSize(1536)), " 1.5 KiB");
        assert_eq!(ByteSize(u64::MAX).to_string(), "16777216.0 TiB");
    }

    #[test]
    fn buckets_are_powers_of_two() {
        assert_eq!(size_bucket(0), 0);
        assert_eq!(size_bucket(1), 1);
        assert_eq!(size_bucket(2), 2);
        assert_eq!(size_bucket(3), 2);
        assert_eq!(size_bucket(4), 3);
        assert_eq!(size_bucket(4095), 12);
        assert_eq!(size_bucket(4096), 13);
        assert_eq!(size_bucket(usize::MAX), SIZE_BUCKETS - 1);
        for b in 1..SIZE_BUCKETS - 1 {
            assert_eq!(size_bucket(bucket_floor(b) as usize), b);
            assert_eq!(size_bucket(bucket_floor(b + 1) as usize - 1), b);
        }
    }

    #[test]
    fn names_round_trip() {
        for f in Func::ALL {
            assert_eq!(Func::from_name(f.name()), Some(f));
            assert_eq!(Func::ALL[f as usize], f);
        }
        assert_eq!(Func::from_name("mmap"), None);
    }
}
