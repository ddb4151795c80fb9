//! A bounded string, on the heap and inline: a domain name (at most 253
//! bytes) held as a `String` ([`HeapName`], one allocation per value) or
//! as `[MaybeUninit<u8>; 253]` and a length ([`InlineName`], none), each
//! constructed with validation ([`HeapName::new`]) or without it
//! ([`HeapName::new_unvalidated`], which checks only the length).
//!
//! `measure` shows 1 allocation per heap construction and 0 per inline
//! one; the benches compare the four constructions with
//! `std::hint::black_box` (a volatile-read `black_box` once made exactly
//! this comparison misleading).

use std::fmt;
use std::mem::MaybeUninit;

use crate::rng::{XorShift, mix, words};

/// The longest domain name, in bytes (RFC 1035's 255 octets on the wire,
/// less the length prefix and the root label).
pub const MAX_LEN: usize = 253;

/// The longest label (the text between dots).
pub const MAX_LABEL: usize = 63;

/// Why a string is not a domain name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NameError {
    /// Longer than [`MAX_LEN`] bytes.
    TooLong,
    /// Empty, or a label that is empty, longer than [`MAX_LABEL`], starts
    /// or ends with `-`, or holds something other than ASCII letters,
    /// digits and `-`.
    BadLabel,
}

impl fmt::Display for NameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NameError::TooLong => "longer than 253 bytes",
            NameError::BadLabel => "not a sequence of valid labels",
        })
    }
}

impl std::error::Error for NameError {}

/// Checks that `s` is a host name: dot-separated labels of 1 to 63 ASCII
/// letters, digits and hyphens, not starting or ending with a hyphen, at
/// most 253 bytes in all.
pub fn validate(s: &str) -> Result<(), NameError> {
    if s.len() > MAX_LEN {
        return Err(NameError::TooLong);
    }
    for label in s.split('.') {
        let b = label.as_bytes();
        let ok = !b.is_empty()
            && b.len() <= MAX_LABEL
            && b[0] != b'-'
            && b[b.len() - 1] != b'-'
            && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'-');
        if !ok {
            return Err(NameError::BadLabel);
        }
    }
    Ok(())
}

/// A domain name in a `String`: one allocation per value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeapName(String);

impl HeapName {
    /// `s` as a domain name, if [`validate`] accepts it.
    #[inline(never)]
    pub fn new(s: &str) -> Result<HeapName, NameError> {
        validate(s)?;
        Ok(HeapName(s.to_owned()))
    }

    /// `s` as a domain name without checking its labels (only its length).
    #[inline(never)]
    pub fn new_unvalidated(s: &str) -> Result<HeapName, NameError> {
        if s.len() > MAX_LEN {
            return Err(NameError::TooLong);
        }
        Ok(HeapName(s.to_owned()))
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A domain name held inline: 254 bytes wherever the value is, no
/// allocation. Only the first `len` bytes are ever written or read.
#[derive(Clone, Copy)]
pub struct InlineName {
    len: u8,
    bytes: [MaybeUninit<u8>; MAX_LEN],
}

impl InlineName {
    /// `s` as a domain name, if [`validate`] accepts it.
    #[inline(never)]
    pub fn new(s: &str) -> Result<InlineName, NameError> {
        validate(s)?;
        Ok(InlineName::copy(s))
    }

    /// `s` as a domain name without checking its labels (only its length,
    /// which the buffer needs).
    #[inline(never)]
    pub fn new_unvalidated(s: &str) -> Result<InlineName, NameError> {
        if s.len() > MAX_LEN {
            return Err(NameError::TooLong);
        }
        Ok(InlineName::copy(s))
    }

    /// Copies `s` (at most `MAX_LEN` bytes, checked by the callers) in,
    /// leaving the rest of the buffer uninitialised.
    fn copy(s: &str) -> InlineName {
        debug_assert!(s.len() <= MAX_LEN);
        let mut bytes = [MaybeUninit::uninit(); MAX_LEN];
        for (d, &b) in bytes.iter_mut().zip(s.as_bytes()) {
            d.write(b);
        }
        InlineName {
            len: s.len() as u8,
            bytes,
        }
    }

    /// The name's bytes.
    #[allow(unsafe_code)]
    pub fn as_bytes(&self) -> &[u8] {
        let init = &self.bytes[..usize::from(self.len)];
        // SAFETY: `copy` wrote the first `len` bytes (and nothing changes
        // them afterwards), and `MaybeUninit<u8>` has the size, alignment
        // and validity of `u8` once initialised.
        unsafe { std::slice::from_raw_parts(init.as_ptr().cast::<u8>(), init.len()) }
    }

    /// The name (its bytes were copied from a `&str`, so they are UTF-8).
    pub fn as_str(&self) -> &str {
        std::str::from_utf8(self.as_bytes()).expect("copied from a &str")
    }
}

impl PartialEq for InlineName {
    fn eq(&self, other: &InlineName) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl Eq for InlineName {}

impl fmt::Debug for InlineName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("InlineName").field(&self.as_str()).finish()
    }
}

/// Domain names to construct from: mostly valid ones of 10 to 80 bytes,
/// some long, about 1 in 16 invalid.
pub fn sample_names(n: usize, seed: u64) -> Vec<String> {
    let mut r = XorShift::new(seed);
    let mut w = words(u64::MAX, seed ^ 0x5eed);
    let tlds = ["com", "org", "net", "io", "example"];
    (0..n)
        .map(|_| {
            let labels = match r.below(16) {
                0 => 12 + r.below(20),
                _ => 1 + r.below(4),
            };
            let mut s = String::new();
            for _ in 0..labels {
                s.push_str(&w.next().expect("endless"));
                s.push('.');
            }
            s.push_str(tlds[r.below(tlds.len() as u64) as usize]);
            match r.below(16) {
                0 => s.insert(0, '-'),
                1 => s.insert_str(0, "under_score."),
                _ => {}
            }
            s
        })
        .collect()
}

/// Names kept alive at once: constructed into a batch, read, then dropped.
const BATCH: usize = 64;

/// The checksum of one constructed name.
fn name_sum(b: &[u8]) -> u64 {
    b.len() as u64 | u64::from(b[0]) << 16 | u64::from(b[b.len() - 1]) << 24
}

/// Generic driver: `n` validated constructions from a pool of names, in
/// batches of 64 that are read and dropped together.
fn construct<T>(n: u64, new: fn(&str) -> Result<T, NameError>, bytes: fn(&T) -> &[u8]) -> u64 {
    let pool = sample_names(512, 42);
    let mut batch: Vec<T> = Vec::with_capacity(BATCH);
    let (mut sum, mut errors) = (0u64, 0u64);
    let mut flush = |batch: &mut Vec<T>| {
        for name in batch.drain(..) {
            sum = mix(sum, name_sum(bytes(&name)));
        }
    };
    for i in 0..n {
        match new(&pool[(i % pool.len() as u64) as usize]) {
            Ok(name) => batch.push(name),
            Err(_) => errors += 1,
        }
        if batch.len() == BATCH {
            flush(&mut batch);
        }
    }
    flush(&mut batch);
    mix(sum, errors)
}

/// `n` validated [`HeapName`] constructions: one allocation each.
pub fn heap(n: u64) -> u64 {
    construct(n, HeapName::new, |h| h.as_str().as_bytes())
}

/// `n` validated [`InlineName`] constructions: no allocation.
pub fn inline(n: u64) -> u64 {
    construct(n, InlineName::new, InlineName::as_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation() {
        for ok in [
            "example.com",
            "a",
            "x-1.b2.io",
            &"a".repeat(63),
            &["abc"; 63].join("."),
        ] {
            assert_eq!(validate(ok), Ok(()), "{ok}");
        }
        for (bad, e) in [
            ("", NameError::BadLabel),
            ("a..b", NameError::BadLabel),
            ("-a.com", NameError::BadLabel),
            ("a-.com", NameError::BadLabel),
            ("under_score.com", NameError::BadLabel),
            ("é.com", NameError::BadLabel),
            (&"a".repeat(64), NameError::BadLabel),
            (&["abc"; 64].join("."), NameError::TooLong),
        ] {
            assert_eq!(validate(bad), Err(e), "{bad}");
        }
    }

    #[test]
    fn inline_and_heap_hold_the_same_name() {
        for s in sample_names(300, 3) {
            let h = HeapName::new(&s);
            let i = InlineName::new(&s);
            assert_eq!(h.is_ok(), i.is_ok(), "{s}");
            if let (Ok(h), Ok(i)) = (h, i) {
                assert_eq!(h.as_str(), i.as_str());
            }
            let h = HeapName::new_unvalidated(&s).unwrap();
            let i = InlineName::new_unvalidated(&s).unwrap();
            assert_eq!(h.as_str(), s);
            assert_eq!(i.as_str(), s);
        }
        let longest = "a".repeat(MAX_LEN);
        assert_eq!(
            InlineName::new_unvalidated(&longest).unwrap().as_str(),
            longest
        );
        let too_long = "a".repeat(MAX_LEN + 1);
        assert_eq!(
            InlineName::new_unvalidated(&too_long),
            Err(NameError::TooLong)
        );
        assert_eq!(
            HeapName::new_unvalidated(&too_long),
            Err(NameError::TooLong)
        );
        assert_eq!(
            format!("{:?}", InlineName::new("a.b").unwrap()),
            "InlineName(\"a.b\")"
        );
    }

    #[test]
    fn the_pool_has_valid_invalid_and_long_names() {
        let pool = sample_names(512, 42);
        let invalid = pool.iter().filter(|s| validate(s).is_err()).count();
        assert!((10..100).contains(&invalid), "{invalid} invalid of 512");
        assert!(pool.iter().any(|s| s.len() > 100));
        assert_eq!(heap(5_000), inline(5_000));
        assert_ne!(heap(5_000), heap(5_001));
    }
}
