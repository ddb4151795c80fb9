//! Producer/consumer with cross-thread frees: producer threads allocate
//! messages (buffers of 16 B to 4 KiB) and send them in batches over a
//! channel; consumer threads read and free them. Every block is freed by a
//! thread other than the one that allocated it, which allocators handle
//! very differently (glibc's arenas, jemalloc's and mimalloc's remote-free
//! paths).

use std::sync::mpsc;
use std::thread;

use crate::rng::{XorShift, mix};

/// Producer/consumer pairs.
pub const PAIRS: u64 = 2;

/// Messages per batch sent.
const BATCH: usize = 32;

/// In flight per channel, in batches: a bound, so producers cannot run
/// ahead and the live set stays small.
const DEPTH: usize = 16;

/// `n` messages in all, split between the pairs.
pub fn run(n: u64) -> u64 {
    let mut handles = Vec::new();
    for p in 0..PAIRS {
        let count = n / PAIRS + u64::from(p < n % PAIRS);
        let (tx, rx) = mpsc::sync_channel::<Vec<Vec<u8>>>(DEPTH);
        handles.push(thread::spawn(move || produce(p, count, tx)));
        handles.push(thread::spawn(move || consume(rx)));
    }
    handles
        .into_iter()
        .map(|h| h.join().expect("workload threads do not panic"))
        .fold(0, mix)
}

#[inline(never)]
fn produce(seed: u64, count: u64, tx: mpsc::SyncSender<Vec<Vec<u8>>>) -> u64 {
    let mut r = XorShift::new(seed + 100);
    let mut batch = Vec::with_capacity(BATCH);
    let mut sent = 0;
    for i in 0..count {
        let len = r.size(16, 4096);
        batch.push(vec![(i % 251) as u8; len]);
        sent += len as u64;
        if batch.len() == BATCH {
            tx.send(std::mem::replace(&mut batch, Vec::with_capacity(BATCH)))
                .expect("the consumer is alive");
        }
    }
    if !batch.is_empty() {
        tx.send(batch).expect("the consumer is alive");
    }
    sent
}

#[inline(never)]
fn consume(rx: mpsc::Receiver<Vec<Vec<u8>>>) -> u64 {
    let mut sum = 0;
    for batch in rx {
        for msg in batch {
            sum = mix(sum, msg.len() as u64 | u64::from(msg[msg.len() / 2]) << 32);
        }
    }
    sum
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_despite_threads() {
        assert_eq!(run(3_001), run(3_001));
        assert_ne!(run(3_001), run(3_000));
        assert_eq!(run(0), run(0));
    }
}
