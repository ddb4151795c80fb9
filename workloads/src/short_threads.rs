//! Many short-lived threads: threads started four at a time, each
//! allocating and freeing a few hundred objects of mixed sizes and handing
//! a few back to the parent, which frees them after the thread has exited.
//! Per-thread allocator state (glibc's arenas and tcache, jemalloc's and
//! mimalloc's thread caches and heaps) is set up and torn down thousands
//! of times.

use std::thread;

use crate::rng::{XorShift, mix};

/// Threads running at once.
pub const AT_ONCE: u64 = 4;

/// Objects each thread allocates.
const OBJECTS: u64 = 200;

/// `n` threads in all.
pub fn run(n: u64) -> u64 {
    let mut sum = 0;
    let mut started = 0;
    while started < n {
        let wave = (n - started).min(AT_ONCE);
        let handles: Vec<_> = (started..started + wave)
            .map(|i| thread::spawn(move || work(i)))
            .collect();
        for h in handles {
            let (s, kept) = h.join().expect("workload threads do not panic");
            sum = mix(sum, s);
            // Freed here, by a thread other than the one (now gone) that
            // allocated them.
            for k in kept {
                sum = mix(sum, k.len() as u64);
            }
        }
        started += wave;
    }
    sum
}

#[inline(never)]
fn work(i: u64) -> (u64, Vec<Vec<u8>>) {
    let mut r = XorShift::new(i + 7);
    let mut live: Vec<Vec<u8>> = Vec::new();
    let mut kept = Vec::new();
    let mut sum = 0;
    for j in 0..OBJECTS {
        live.push(vec![j as u8; r.size(16, 2048)]);
        if r.below(3) == 0 {
            let old = live.swap_remove(r.below(live.len() as u64) as usize);
            sum = mix(sum, old.len() as u64);
        }
        if r.below(50) == 0
            && let Some(k) = live.pop()
        {
            kept.push(k);
        }
    }
    sum = mix(sum, live.iter().map(|v| v.len() as u64).sum());
    (sum, kept)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic() {
        assert_eq!(run(9), run(9));
        assert_ne!(run(9), run(8));
    }
}
