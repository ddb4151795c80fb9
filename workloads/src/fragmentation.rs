//! Fragmentation: objects of mixed sizes (16 B to 64 KiB, mostly small),
//! allocated interleaved, most short-lived and about 1 in 8 long-lived. The
//! short-lived ones die soon and leave holes between the long-lived ones,
//! which stay until they are replaced much later, so the heap's pages stay
//! partly used: peak resident memory ends up well above peak live bytes,
//! by how much depending on the allocator.

use crate::rng::{XorShift, mix};

/// Long-lived objects kept (replaced at random once the table is full).
const LONG: usize = 4_096;

/// Short-lived objects kept (a ring: each lives for this many
/// allocations).
const SHORT: usize = 64;

/// `n` objects allocated in all.
pub fn run(n: u64) -> u64 {
    let mut r = XorShift::new(53);
    let mut long: Vec<Vec<u8>> = Vec::with_capacity(LONG);
    let mut short: Vec<Vec<u8>> = Vec::with_capacity(SHORT);
    let mut sum = 0;
    let retire = |sum: &mut u64, old: Vec<u8>| {
        *sum = mix(*sum, old.len() as u64 | u64::from(old[old.len() - 1]) << 32);
    };
    for i in 0..n {
        let size = r.size(16, 64 * 1024);
        // Every byte written, so the pages are really resident.
        let obj = vec![(i % 251) as u8; size];
        if r.below(8) == 0 {
            if long.len() < LONG {
                long.push(obj);
            } else {
                let slot = r.below(LONG as u64) as usize;
                retire(&mut sum, std::mem::replace(&mut long[slot], obj));
            }
        } else if short.len() < SHORT {
            short.push(obj);
        } else {
            let slot = (i % SHORT as u64) as usize;
            retire(&mut sum, std::mem::replace(&mut short[slot], obj));
        }
    }
    for old in long.into_iter().chain(short) {
        retire(&mut sum, old);
    }
    sum
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic() {
        assert_eq!(run(5_000), run(5_000));
        assert_ne!(run(5_000), run(5_001));
    }
}
