//! `run --limit`: the figures a CI job can put a ceiling on, how a limit
//! is written (`allocs=N`, `peak=SIZE`, `leaked=SIZE`), and the verdict of
//! a run against its limits. Figures only, no input or output: `run`
//! renders the verdict ([`crate::limit_report`]).
//!
//! A new figure is one variant of [`LimitKey`]: the compiler then asks
//! for its name, unit, stacks and value in the `match`es below.

use std::fmt;

use crate::leaks::Leaks;
use crate::report::TotalFigures;
use crate::stacks::Weight;

/// The exit status of `run` when the program succeeded but a figure
/// exceeded its limit: LeakSanitizer's, and none of those `allocmux`
/// itself ends with (1, 2, 126, 127, 128 + a signal).
pub const EXCEEDED_STATUS: i32 = 23;

/// A figure a limit can be put on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LimitKey {
    /// Allocation calls of every process (the report's `allocs`).
    Allocs,
    /// Peak live bytes: the report total's `peak live`, the sum of the
    /// processes' peaks.
    Peak,
    /// Requested bytes live at exit, suppressions applied (from every
    /// stack, recorded exactly).
    Leaked,
    /// Temporary allocations of every process (counted with every stack
    /// recorded exactly).
    Temporary,
}

impl LimitKey {
    /// Every key, in the order verdicts are listed.
    pub const ALL: [LimitKey; 4] = [
        LimitKey::Allocs,
        LimitKey::Peak,
        LimitKey::Leaked,
        LimitKey::Temporary,
    ];

    /// Its name in `--limit NAME=VALUE`.
    pub fn name(self) -> &'static str {
        match self {
            LimitKey::Allocs => "allocs",
            LimitKey::Peak => "peak",
            LimitKey::Leaked => "leaked",
            LimitKey::Temporary => "temporary",
        }
    }

    /// Whether its values are sizes (`10KiB`) rather than counts.
    pub fn is_size(self) -> bool {
        match self {
            LimitKey::Allocs | LimitKey::Temporary => false,
            LimitKey::Peak | LimitKey::Leaked => true,
        }
    }

    /// Whether judging it needs every stack of the run.
    pub fn needs_exact_stacks(self) -> bool {
        match self {
            LimitKey::Allocs | LimitKey::Peak => false,
            LimitKey::Leaked | LimitKey::Temporary => true,
        }
    }

    /// The weight of the stacks shown behind it when it is exceeded.
    pub fn weight(self) -> Weight {
        match self {
            LimitKey::Allocs => Weight::Count,
            LimitKey::Peak => Weight::Peak,
            LimitKey::Leaked => Weight::Leaked,
            LimitKey::Temporary => Weight::Temporary,
        }
    }

    /// The run's value of it: from the report's totals, and for `leaked`
    /// from the leaks (`None` without them).
    pub fn value(self, total: &TotalFigures, leaks: Option<&Leaks>) -> Option<u64> {
        match self {
            LimitKey::Allocs => Some(total.totals.allocation_calls()),
            LimitKey::Peak => Some(total.totals.peak_live_bytes),
            LimitKey::Leaked => leaks.map(Leaks::bytes),
            LimitKey::Temporary => total.temporary_allocations,
        }
    }

    /// The key named `name`.
    pub fn from_name(name: &str) -> Option<LimitKey> {
        LimitKey::ALL.into_iter().find(|k| k.name() == name)
    }
}

/// One limit: a key and the most it may be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limit {
    /// The figure.
    pub key: LimitKey,
    /// Its largest allowed value (in bytes for sizes).
    pub max: u64,
}

impl Limit {
    /// Parses `NAME=VALUE`: a count for `allocs`, a size for the others.
    pub fn parse(s: &str) -> Result<Limit, String> {
        let names = || {
            LimitKey::ALL
                .iter()
                .map(|k| k.name())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let Some((name, value)) = s.split_once('=') else {
            return Err(format!(
                "expected NAME=VALUE, such as allocs=10000 or peak=5MiB (names: {})",
                names()
            ));
        };
        let key = LimitKey::from_name(name.trim())
            .ok_or_else(|| format!("unknown limit `{name}` (names: {})", names()))?;
        let value = value.trim();
        let max = if key.is_size() {
            parse_size(value)?
        } else {
            parse_count(value)?
        };
        Ok(Limit { key, max })
    }
}

/// A count: digits, `_` or `,` allowed between them (`10_000`, `10,000`
/// cannot be given in one `--limit` list, whose items `,` separates).
fn parse_count(s: &str) -> Result<u64, String> {
    let digits: String = s.chars().filter(|&c| c != '_').collect();
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("`{s}` is not a count (such as 10000)"));
    }
    digits
        .parse()
        .map_err(|_| format!("`{s}` is too large a count"))
}

/// A size in bytes: a count, optionally followed by a binary unit, `KiB`,
/// `MiB`, `GiB` (or `K`, `M`, `G`, `KB`, `MB`, `GB`, also binary), or `B`.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (number, unit) = s.split_at(split);
    let bad = || format!("`{s}` is not a size (such as 123, 10KiB, 5MiB or 1GiB)");
    if number.is_empty() {
        return Err(bad());
    }
    let shift = match unit.trim() {
        "" | "B" => 0,
        "K" | "KB" | "KiB" | "k" | "kB" | "kiB" => 10,
        "M" | "MB" | "MiB" => 20,
        "G" | "GB" | "GiB" => 30,
        _ => return Err(bad()),
    };
    let n: u64 = number.parse().map_err(|_| bad())?;
    n.checked_mul(1 << shift)
        .ok_or_else(|| format!("`{s}` is too large a size"))
}

/// A figure of the run against its limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Judged {
    /// The limit.
    pub limit: Limit,
    /// The run's value.
    pub value: u64,
}

impl Judged {
    /// Whether the value is over the limit.
    pub fn exceeded(&self) -> bool {
        self.value > self.limit.max
    }
}

/// Why some limit could not be judged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NotJudged(pub LimitKey);

impl fmt::Display for NotJudged {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the limit on {} could not be judged: no call stacks were recorded",
            self.0.name()
        )
    }
}

impl std::error::Error for NotJudged {}

/// Every limit against the run's figures, in [`LimitKey::ALL`]'s order.
pub fn judge(
    limits: &[Limit],
    total: &TotalFigures,
    leaks: Option<&Leaks>,
) -> Result<Vec<Judged>, NotJudged> {
    let mut limits = limits.to_vec();
    limits.sort_by_key(|l| l.key);
    limits
        .into_iter()
        .map(|limit| {
            let value = limit.key.value(total, leaks).ok_or(NotJudged(limit.key))?;
            Ok(Judged { limit, value })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_parse() {
        assert_eq!(
            Limit::parse("allocs=10000"),
            Ok(Limit {
                key: LimitKey::Allocs,
                max: 10_000
            })
        );
        assert_eq!(Limit::parse("allocs=10_000").unwrap().max, 10_000);
        assert_eq!(Limit::parse("peak=123").unwrap().max, 123);
        assert_eq!(Limit::parse("peak=10KiB").unwrap().max, 10 << 10);
        assert_eq!(Limit::parse("peak=5MiB").unwrap().max, 5 << 20);
        assert_eq!(Limit::parse("leaked=1GiB").unwrap().max, 1 << 30);
        assert_eq!(Limit::parse("leaked=2K").unwrap().max, 2048);
        assert_eq!(Limit::parse("leaked=3M").unwrap().max, 3 << 20);
        assert_eq!(Limit::parse("leaked=1G").unwrap().max, 1 << 30);
        assert_eq!(Limit::parse("leaked=0").unwrap().max, 0);
        assert_eq!(Limit::parse("peak=7B").unwrap().max, 7);
    }

    #[test]
    fn bad_limits_are_refused() {
        for bad in [
            "allocs",
            "allocz=1",
            "temporary=1KiB",
            "allocs=",
            "allocs=-1",
            "allocs=1.5",
            "allocs=10KiB",
            "peak=5 MiB!",
            "peak=5TiB",
            "peak=MiB",
            "peak=1.5MiB",
            "peak=99999999999999GiB",
            "allocs=99999999999999999999999",
        ] {
            assert!(Limit::parse(bad).is_err(), "{bad}");
        }
        assert!(
            Limit::parse("allocz=1")
                .unwrap_err()
                .contains("allocs, peak, leaked")
        );
    }

    #[test]
    fn over_the_limit_is_exceeded_at_it_is_not() {
        let j = |value, max| Judged {
            limit: Limit {
                key: LimitKey::Allocs,
                max,
            },
            value,
        };
        assert!(!j(100, 100).exceeded());
        assert!(j(101, 100).exceeded());
    }
}
