//! A larson-like server simulation (after Larson and Krishnan's benchmark,
//! as mimalloc-bench runs it, written here from its description): worker
//! threads each own a table of objects of random sizes and repeatedly
//! replace a random one (free it, allocate a new one); after each round a
//! worker hands its whole table to the next worker and takes over the
//! previous one's, as a server hands connections between threads, so
//! objects are freed by threads other than the ones that allocated them.

use std::sync::mpsc;
use std::thread;

use crate::rng::{XorShift, mix};

/// Worker threads.
pub const THREADS: u64 = 4;

/// Objects in each table.
const SLOTS: usize = 1_000;

/// Rounds (hand-overs) per run.
const ROUNDS: u64 = 8;

/// An object: a buffer whose first byte records which worker filled it.
type Object = Vec<u8>;

/// About `n` replacements in all, spread over the workers and rounds.
pub fn run(n: u64) -> u64 {
    let per_round = (n / (THREADS * ROUNDS)).max(1);
    // Worker i sends to worker i + 1 (a ring).
    let (txs, rxs): (Vec<_>, Vec<_>) = (0..THREADS)
        .map(|_| mpsc::sync_channel::<Vec<Object>>(1))
        .unzip();
    let mut rxs: Vec<Option<_>> = rxs.into_iter().map(Some).collect();
    let handles: Vec<_> = (0..THREADS)
        .map(|i| {
            let tx = txs[((i + 1) % THREADS) as usize].clone();
            let rx = rxs[i as usize].take().expect("one receiver each");
            thread::spawn(move || worker(i, per_round, tx, rx))
        })
        .collect();
    drop(txs);
    handles
        .into_iter()
        .map(|h| h.join().expect("workload threads do not panic"))
        .fold(0, mix)
}

#[inline(never)]
fn worker(
    id: u64,
    per_round: u64,
    tx: mpsc::SyncSender<Vec<Object>>,
    rx: mpsc::Receiver<Vec<Object>>,
) -> u64 {
    let mut r = XorShift::new(id + 1_000);
    let mut table: Vec<Object> = (0..SLOTS).map(|_| new_object(&mut r, id)).collect();
    let mut sum = 0;
    for round in 0..ROUNDS {
        let mut r = XorShift::new(id * 1_000 + round);
        for _ in 0..per_round {
            let slot = r.below(SLOTS as u64) as usize;
            let old = std::mem::replace(&mut table[slot], new_object(&mut r, id));
            sum = mix(sum, old.len() as u64 | u64::from(old[0]) << 32);
        }
        tx.send(table).expect("the next worker is alive");
        table = rx.recv().expect("the previous worker is alive");
    }
    for old in table {
        sum = mix(sum, old.len() as u64 | u64::from(old[0]) << 32);
    }
    sum
}

fn new_object(r: &mut XorShift, id: u64) -> Object {
    let mut v = vec![0u8; r.size(8, 1_000)];
    v[0] = id as u8;
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_despite_threads() {
        assert_eq!(run(40_000), run(40_000));
        assert_ne!(run(40_000), run(80_000));
    }
}
