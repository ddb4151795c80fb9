//! A cache's read path: rows in a `HashMap<String, Row>`, looked up by keys
//! that arrive as `&str` (cut from a request log). [`owned`] builds an
//! owned `String` from each key before looking it up (`map.get(&key.to_string())`,
//! one allocation and free per lookup, the habit `HashMap<String, _>`
//! invites); [`borrowed`] looks up the `&str` itself (`String: Borrow<str>`),
//! allocating nothing. Keys are 20 to 60 bytes, like real cache keys.

use std::collections::HashMap;

use crate::rng::{XorShift, mix};

/// A cached row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Row {
    /// The row's id.
    pub id: u64,
    /// Some number the read path uses.
    pub score: u32,
    /// Some text the row holds.
    pub name: String,
}

/// Keys in the cache.
const ROWS: u64 = 10_000;

/// A key like `tenant-0042/user-00123456/profile`.
fn key(r: &mut XorShift, id: u64) -> String {
    let kinds = [
        "profile",
        "settings",
        "session-token",
        "avatar",
        "recent-orders",
    ];
    let kind = kinds[(id % kinds.len() as u64) as usize];
    let tenant = id % 97;
    let mut k = format!("tenant-{tenant:04}/user-{id:08}/{kind}");
    if r.below(4) == 0 {
        k.push_str("/v2/compact");
    }
    k
}

/// The cache and the request log: `ROWS` rows and `lookups` keys (about 1
/// in 10 missing), one per line.
pub fn setup(lookups: u64) -> (HashMap<String, Row>, String) {
    let mut r = XorShift::new(23);
    let mut map = HashMap::with_capacity(ROWS as usize);
    let mut keys = Vec::with_capacity(ROWS as usize);
    for id in 0..ROWS {
        let k = key(&mut r, id);
        let row = Row {
            id,
            score: r.below(1000) as u32,
            name: format!("user {id}"),
        };
        keys.push(k.clone());
        map.insert(k, row);
    }
    // The log repeats at most 1 << 16 requests, so it stays small at any size.
    let mut log = String::new();
    for _ in 0..lookups.min(1 << 16) {
        if r.below(10) == 0 {
            log.push_str("tenant-0000/user-99999999/missing");
        } else {
            log.push_str(&keys[r.below(ROWS) as usize]);
        }
        log.push('\n');
    }
    (map, log)
}

/// The requests: the log's lines, cycled to `n`.
fn requests(log: &str, n: u64) -> impl Iterator<Item = &str> {
    log.lines().cycle().take(n as usize)
}

/// What a hit contributes to the checksum.
fn hit(row: &Row) -> u64 {
    row.id << 10 | u64::from(row.score)
}

/// One lookup with an owned key built from the request.
#[inline(never)]
pub fn lookup_owned<'m>(map: &'m HashMap<String, Row>, key: &str) -> Option<&'m Row> {
    let key: String = key.to_string();
    map.get(&key)
}

/// One lookup with the borrowed key.
#[inline(never)]
pub fn lookup_borrowed<'m>(map: &'m HashMap<String, Row>, key: &str) -> Option<&'m Row> {
    map.get(key)
}

fn run(n: u64, lookup: for<'m> fn(&'m HashMap<String, Row>, &str) -> Option<&'m Row>) -> u64 {
    let (map, log) = setup(n);
    let mut sum = 0;
    for k in requests(&log, n) {
        sum = mix(sum, lookup(&map, k).map_or(u64::MAX, hit));
    }
    sum
}

/// `n` lookups, an owned `String` key built for each.
pub fn owned(n: u64) -> u64 {
    run(n, lookup_owned)
}

/// `n` lookups by `&str`.
pub fn borrowed(n: u64) -> u64 {
    run(n, lookup_borrowed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owned_and_borrowed_find_the_same_rows() {
        assert_eq!(owned(20_000), borrowed(20_000));
        let (map, log) = setup(1_000);
        let lens: Vec<usize> = log.lines().map(str::len).collect();
        assert!(lens.iter().all(|l| (20..=64).contains(l)), "{lens:?}");
        let misses = log.lines().filter(|k| !map.contains_key(*k)).count();
        assert!((50..200).contains(&misses), "{misses} misses in 1000");
    }
}
