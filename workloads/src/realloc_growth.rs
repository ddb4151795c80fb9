//! Realloc growth of many vectors: 256 vectors at a time grow one element
//! at a time, in turn, to random lengths of up to 16 Ki elements (the
//! pattern of building many collections at once without `with_capacity`),
//! so their doublings interleave and the allocator decides between growing
//! in place and moving. Then they are dropped and the next 256 start.

use crate::rng::{XorShift, mix};

/// Vectors growing at once.
const LIVE: usize = 256;

/// `n` vectors grown in all.
pub fn run(n: u64) -> u64 {
    let mut r = XorShift::new(41);
    let mut sum = 0;
    let mut left = n;
    while left > 0 {
        let batch = left.min(LIVE as u64) as usize;
        left -= batch as u64;
        let targets: Vec<usize> = (0..batch).map(|_| r.size(1, 16 * 1024)).collect();
        sum = mix(sum, grow(&targets));
    }
    sum
}

/// Grows one vector per target, round-robin, to its target length.
#[inline(never)]
fn grow(targets: &[usize]) -> u64 {
    let mut vecs: Vec<Vec<u32>> = targets.iter().map(|_| Vec::new()).collect();
    let longest = targets.iter().copied().max().unwrap_or(0);
    for step in 0..longest {
        for (v, &t) in vecs.iter_mut().zip(targets) {
            if step < t {
                v.push(step as u32);
            }
        }
    }
    vecs.iter()
        .map(|v| v.len() as u64 ^ u64::from(v[v.len() - 1]) << 20)
        .fold(0, mix)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_vector_reaches_its_length() {
        assert_eq!(grow(&[1, 3]), mix(mix(0, 1), 3 ^ 2 << 20));
        assert_eq!(run(300), run(300));
        assert_ne!(run(300), run(301));
    }
}
