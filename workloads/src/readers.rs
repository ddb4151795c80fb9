//! Buffered readers per stream: thousands of short, small in-memory
//! streams (a few hundred bytes to a few KiB, like requests, small files
//! or pipe messages), each read through its own `BufReader` with the
//! default 8 KiB buffer ([`per_stream`]: one 8 KiB allocation and free per
//! stream, mostly unused), or all through one buffer allocated once
//! ([`reused`]). Both count the same lines and bytes.

use std::io::{BufRead, BufReader, Read};

use crate::rng::{XorShift, mix, words};

/// The text the streams are cut from: lines of words.
fn corpus() -> String {
    let mut text = String::with_capacity(64 * 1024);
    let mut r = XorShift::new(5);
    for w in words(u64::MAX, 9) {
        text.push_str(&w);
        text.push(if r.below(8) == 0 { '\n' } else { ' ' });
        if text.len() >= 64 * 1024 {
            break;
        }
    }
    text
}

/// The `n` streams: where each starts in the corpus and how long it is.
fn streams(n: u64, corpus_len: usize) -> impl Iterator<Item = (usize, usize)> {
    let mut r = XorShift::new(17);
    (0..n).map(move |_| {
        let len = r.size(64, 6 * 1024);
        let start = r.below((corpus_len - len) as u64) as usize;
        (start, len)
    })
}

/// What both versions compute for a stream: its lines and bytes, folded.
#[derive(Default)]
struct Tally {
    lines: u64,
    bytes: u64,
    sum: u64,
}

impl Tally {
    fn feed(&mut self, chunk: &[u8]) {
        self.lines += chunk.iter().filter(|&&b| b == b'\n').count() as u64;
        self.bytes += chunk.len() as u64;
    }

    fn end_stream(&mut self) {
        self.sum = mix(self.sum, self.lines << 32 | self.bytes);
        self.lines = 0;
        self.bytes = 0;
    }
}

/// `n` streams, each read through a new `BufReader` (8 KiB buffer).
pub fn per_stream(n: u64) -> u64 {
    let text = corpus();
    let mut tally = Tally::default();
    for (start, len) in streams(n, text.len()) {
        let stream = &text.as_bytes()[start..start + len];
        read_buffered(BufReader::new(stream), &mut tally);
        tally.end_stream();
    }
    tally.sum
}

#[inline(never)]
fn read_buffered(mut reader: impl BufRead, tally: &mut Tally) {
    loop {
        let chunk = reader.fill_buf().expect("in-memory reads do not fail");
        if chunk.is_empty() {
            return;
        }
        let n = chunk.len();
        tally.feed(chunk);
        reader.consume(n);
    }
}

/// `n` streams, all read through one 8 KiB buffer allocated once.
pub fn reused(n: u64) -> u64 {
    let text = corpus();
    let mut tally = Tally::default();
    let mut buf = vec![0u8; 8 * 1024];
    for (start, len) in streams(n, text.len()) {
        let stream = &text.as_bytes()[start..start + len];
        read_into(stream, &mut buf, &mut tally);
        tally.end_stream();
    }
    tally.sum
}

#[inline(never)]
fn read_into(mut reader: impl Read, buf: &mut [u8], tally: &mut Tally) {
    loop {
        let n = reader.read(buf).expect("in-memory reads do not fail");
        if n == 0 {
            return;
        }
        tally.feed(&buf[..n]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_read_the_same_lines_and_bytes() {
        assert_eq!(per_stream(2_000), reused(2_000));
        assert_ne!(reused(2_000), reused(1_999));
        let text = corpus();
        assert!(text.len() >= 64 * 1024 && text.contains('\n'));
        assert!(streams(1_000, text.len()).all(|(s, l)| s + l <= text.len() && l >= 64));
    }
}
