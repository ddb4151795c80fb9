//! The profile's keys, listed once.
//!
//! [`for_each_profile_key!`] is the one list of the keys a process section
//! may hold (the module documentation of [`crate::profile`] says what each
//! line holds). Everything that must agree on them is generated from it:
//!
//! - [`Key`] (here): the keys whose lines the writer and the reader handle
//!   one by one; the reader's `match` on it has no `_` arm, so a key added
//!   to the list does not compile until it is read;
//! - [`KEYS`] (here): every key, for the fuzzing of what reads profiles;
//! - [`Totals`](crate::Totals) (in `totals.rs`): a field per total, with
//!   its `Default` and `add`;
//! - the writing (`write.rs`) and reading (`read.rs`) of the totals' lines.
//!
//! A new per-process figure is a line in `per_process` plus the code that
//! counts it; a new figure per function, one in `per_function`.

/// The keys of a process section: `for_each_profile_key!(callback)`
/// expands to
///
/// ```text
/// callback! {
///     lines { name => Variant, ... }
///     per_function { /// doc
///                    name, ... }
///     per_process { /// doc
///                   name, ... }
///     per_size_bucket { /// doc
///                       name, ... }
/// }
/// ```
///
/// - `lines`: keys with a line of their own ([`Key`]), in the order the
///   writer writes them.
/// - `per_function`: a `[u64; FUNC_COUNT]` field of `Totals`, written as
///   one `name FUNCTION N` line per function whose figure is not 0.
/// - `per_process`: a `u64` field of `Totals`, written as a `name N` line
///   in every section (a reader that finds none reads 0).
/// - `per_size_bucket`: a `[u64; SIZE_BUCKETS]` field of `Totals`, written
///   as one `name BUCKET N` line per bucket that is not 0.
///
/// The totals are written in this order, after the header lines and before
/// the allocator's statistics. Adding a key keeps existing profiles
/// readable (readers skip keys they do not know, and read a total that is
/// not there as 0).
macro_rules! for_each_profile_key {
    ($callback:ident) => {
        $callback! {
            lines {
                process => Process,
                pid => Pid,
                ppid => Ppid,
                exe => Exe,
                argv => Argv,
                allocator => Allocator,
                state => State,
                threads => Threads,
                clock_start => ClockStart,
                clock_end => ClockEnd,
                cpu_ns => CpuNs,
                max_rss_bytes => MaxRssBytes,
                time_sample_mean => TimeSampleMean,
                http => Http,
                exec => Exec,
                recording => Recording,
                allocator_stats => AllocatorStats,
                allocator_stat => AllocatorStat,
                allocator_stats_at_peak => AllocatorStatsAtPeak,
                allocator_stat_at_peak => AllocatorStatAtPeak,
                unprofiled_child => UnprofiledChild,
                timeline => Timeline,
                tl => Tl,
                timeline_temporary => TimelineTemporary,
                stacks => Stacks,
                stacks_exact_first => StacksExactFirst,
                stacks_lost => StacksLost,
                stacks_degraded => StacksDegraded,
                stacks_temporary_counted => StacksTemporaryCounted,
                stacks_lifetimes => StacksLifetimes,
                module => Module,
                stack => Stack,
                lifetimes => Lifetimes,
                end => End,
            }
            per_function {
                /// Calls per function, indexed by `Func as usize`.
                calls,
            }
            per_process {
                /// Calls that failed (returned NULL or an error code).
                failed_calls,
                /// `free(NULL)` calls: no-ops (C17 7.22.3.3), counted apart, not
                /// in `calls[Free]`, which counts the frees of blocks.
                null_frees,
                /// Sum of requested sizes of successful allocations.
                bytes_requested,
                /// Sum of usable sizes of the blocks handed out.
                bytes_allocated,
                /// Sum of usable sizes of the blocks freed (including by `realloc`).
                bytes_freed,
                /// Highest live byte count seen (usable sizes).
                peak_live_bytes,
                /// Calls timed because the random sample picked them (each stands for
                /// `time_sample_mean` calls).
                timed_calls,
                /// Sum of those calls' durations, in TSC ticks.
                timed_ticks,
                /// Sum of the squares of those durations (ticks²), for the estimate's
                /// interval; 0 in profiles written before it was recorded.
                timed_ticks_sq,
                /// Calls timed because every call of their kind is (blocks of at least
                /// `EXACT_TIMING_BYTES`, each thread's first calls): each stands for itself.
                exact_calls,
                /// Sum of those calls' durations, in TSC ticks.
                exact_ticks,
            }
            per_size_bucket {
                /// Request-size histogram, see [`SIZE_BUCKETS`]: requests of
                /// `EXACT_TIMING_BYTES` and more are all counted; smaller ones are
                /// counted at the timed calls, each weighted by the sampling mean (an
                /// unbiased estimate, exact with `ALLOCMUX_TIME_SAMPLE=1`).
                size_hist,
            }
        }
    };
}
pub(crate) use for_each_profile_key;

/// [`Key`] and [`KEYS`] from the list.
macro_rules! define_keys {
    (
        lines { $($line:ident => $Variant:ident,)* }
        per_function { $($(#[$fm:meta])* $f:ident,)* }
        per_process { $($(#[$pm:meta])* $p:ident,)* }
        per_size_bucket { $($(#[$bm:meta])* $b:ident,)* }
    ) => {
        /// A key with a line of its own in a process section (the totals'
        /// keys are [`Totals`](crate::Totals)'s fields).
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum Key {
            $(
                #[doc = concat!("`", stringify!($line), "`")]
                $Variant,
            )*
        }

        impl Key {
            /// The key as written.
            pub const fn name(self) -> &'static str {
                match self {
                    $(Key::$Variant => stringify!($line),)*
                }
            }

            /// The key written as `name`, if it has a line of its own.
            pub fn from_name(name: &str) -> Option<Key> {
                match name {
                    $(stringify!($line) => Some(Key::$Variant),)*
                    _ => None,
                }
            }
        }

        /// Every key a profile may hold: the header's first word
        /// ([`MAGIC`](super::MAGIC)), then the keys of a process section.
        pub const KEYS: &[&str] = &[
            super::MAGIC,
            $(stringify!($line),)*
            $(stringify!($f),)*
            $(stringify!($p),)*
            $(stringify!($b),)*
        ];
    };
}

for_each_profile_key!(define_keys);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_distinct_and_round_trip() {
        for (i, k) in KEYS.iter().enumerate() {
            assert!(!KEYS[..i].contains(k), "{k} is listed twice");
            assert!(
                k.bytes()
                    .all(|b| b.is_ascii_lowercase() || b == b'_' || b == b'-'),
                "{k}"
            );
        }
        for k in KEYS.iter().filter_map(|k| Key::from_name(k)) {
            assert_eq!(Key::from_name(k.name()), Some(k));
        }
        assert_eq!(Key::from_name("calls"), None);
    }
}
