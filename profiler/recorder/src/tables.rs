//! The stack recorder's tables, built so that memory running out costs
//! recording, never the process: every growth step is small and fallible.
//!
//! A `Vec` or a `HashMap` that doubles asks for the whole table again at
//! each step: at a million tracked blocks a block map of 2^20 buckets asks
//! for 26 MB at once, and if that fails, Rust aborts. Here:
//!
//! - [`Chunks`] is a sequence kept in fixed-size chunks of `N` elements,
//!   allocated one at a time: a growth step is one chunk (plus, rarely, the
//!   list of chunks, 24 bytes a chunk), whatever the length.
//! - [`Sharded`] is a hash map split into `S` small `HashMap`s by a hash of
//!   the key, each holding at most [`SHARD_MAX_ITEMS`] entries, so a
//!   shard's doubling moves at most one `S`-th of the table and never
//!   allocates more than [`max_shard_bytes`] (4.1 MiB for the 32-byte
//!   entries of the block map). A full shard refuses new keys.
//!
//! Every step is taken with `try_reserve`, before the insert that needs it:
//! when memory runs out the caller is told (`false`), and drops what it
//! cannot record, counting it; nothing here panics or aborts for lack of
//! memory. A caller that must not allocate at all (the recorder once the
//! shim's heap is short) asks `has_room` instead, which never allocates. Lookups stay O(1): a shift and an index to find a chunk or a
//! shard, then what `Vec` or `HashMap` does.

use core::hash::{BuildHasherDefault, Hash, Hasher};
use std::collections::HashMap;

/// The hasher of the recorder's maps: keys are addresses, or stack hashes
/// already mixed, so one multiply per word is enough.
#[derive(Default)]
pub struct AddrHasher(u64);

impl Hasher for AddrHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        let mut words = bytes.chunks_exact(8);
        for w in &mut words {
            self.write_u64(u64::from_ne_bytes(w.try_into().expect("8 bytes")));
        }
        for &b in words.remainder() {
            self.write_u64(b as u64);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x517C_C1B7_2722_0A95);
    }
    fn write_usize(&mut self, v: usize) {
        self.write_u64(v as u64);
    }
}

/// A `HashMap` with [`AddrHasher`].
pub type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<AddrHasher>>;

/// A sequence of `Copy` values in chunks of `N`, each holding `N` values
/// before the next is begun, and kept (also by [`clear`](Self::clear), so
/// a buffer refilled again and again allocates nothing once it has grown).
/// The last chunk grows by doubling up to `N`, so a short sequence takes
/// little memory (which matters where only the heap's leftovers are to be
/// had: at the kernel's limit on mappings nothing large can be mapped).
///
/// Growth is explicit and fallible: [`try_reserve`](Self::try_reserve)
/// first, then [`push`](Self::push) or
/// [`extend_from_slice`](Self::extend_from_slice) within what was
/// reserved. The largest single allocation is one chunk, `N *
/// size_of::<T>()` bytes, or the list of chunks, 24 bytes a chunk.
#[derive(Debug)]
pub struct Chunks<T, const N: usize> {
    chunks: Vec<Vec<T>>,
    len: usize,
}

impl<T: Copy, const N: usize> Default for Chunks<T, N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Copy, const N: usize> Chunks<T, N> {
    const NONEMPTY: () = assert!(N > 0);

    /// An empty sequence (no allocation).
    pub const fn new() -> Self {
        let () = Self::NONEMPTY;
        Chunks {
            chunks: Vec::new(),
            len: 0,
        }
    }

    /// The number of values.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are none.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Makes room for `additional` more values, a chunk at a time; false
    /// if memory ran out (and nothing is kept of this attempt).
    pub fn try_reserve(&mut self, additional: usize) -> bool {
        let Some(total) = self.len.checked_add(additional) else {
            return false;
        };
        self.try_reserve_total(total)
    }

    /// Makes room for `total` values in all, without touching the values
    /// held now; false if memory ran out. A failed attempt gives back the
    /// chunks it added: memory is short then.
    pub fn try_reserve_total(&mut self, total: usize) -> bool {
        let need = total.div_ceil(N);
        let had = self.chunks.len();
        if need > had && self.chunks.try_reserve(need - had).is_err() {
            return false;
        }
        // Chunks before the one `len` is in are full.
        for c in self.len / N..need {
            if c == self.chunks.len() {
                self.chunks.push(Vec::new()); // within the list's room
            }
            let chunk = &mut self.chunks[c];
            let want = (total - c * N).min(N);
            if chunk.capacity() < want {
                let target = want.max(chunk.capacity() * 2).min(N);
                if chunk.try_reserve_exact(target - chunk.len()).is_err() {
                    self.chunks.truncate(had.max(c));
                    return false;
                }
            }
        }
        true
    }

    /// Whether `additional` more values fit without allocating.
    #[inline]
    pub fn has_room(&self, additional: usize) -> bool {
        let Some(total) = self.len.checked_add(additional) else {
            return false;
        };
        (self.len / N..total.div_ceil(N)).all(|c| {
            self.chunks
                .get(c)
                .is_some_and(|chunk| chunk.capacity() >= (total - c * N).min(N))
        })
    }

    /// Appends `x` within reserved room (see [`try_reserve`](Self::try_reserve)).
    ///
    /// # Panics
    /// Without room: reserving is the caller's job, and it is a bug to skip it.
    #[inline]
    pub fn push(&mut self, x: T) {
        let chunk = &mut self.chunks[self.len / N];
        debug_assert!(chunk.len() < chunk.capacity(), "push within reserved room");
        chunk.push(x);
        self.len += 1;
    }

    /// Appends `xs` within reserved room; the values may span chunks.
    ///
    /// # Panics
    /// Without room, as [`push`](Self::push).
    pub fn extend_from_slice(&mut self, mut xs: &[T]) {
        while !xs.is_empty() {
            let chunk = &mut self.chunks[self.len / N];
            let n = xs.len().min(N - chunk.len());
            debug_assert!(chunk.len() + n <= chunk.capacity());
            chunk.extend_from_slice(&xs[..n]);
            self.len += n;
            xs = &xs[n..];
        }
    }

    /// The value at `i`.
    ///
    /// # Panics
    /// If `i` is out of bounds.
    #[inline]
    pub fn get(&self, i: usize) -> &T {
        &self.chunks[i / N][i % N]
    }

    /// The value at `i`, to change.
    ///
    /// # Panics
    /// If `i` is out of bounds.
    #[inline]
    pub fn get_mut(&mut self, i: usize) -> &mut T {
        &mut self.chunks[i / N][i % N]
    }

    /// The values `start..start + len` as one or two slices (two when they
    /// span a chunk boundary; `len` must not exceed `N`).
    ///
    /// # Panics
    /// If the range is out of bounds or longer than a chunk.
    #[inline]
    pub fn slices(&self, start: usize, len: usize) -> (&[T], &[T]) {
        assert!(len <= N && start + len <= self.len, "range within bounds");
        let (c, at) = (start / N, start % N);
        if at + len <= N {
            (&self.chunks[c][at..at + len], &[])
        } else {
            let first = N - at;
            (&self.chunks[c][at..], &self.chunks[c + 1][..len - first])
        }
    }

    /// The values, chunk by chunk.
    pub fn as_slices(&self) -> impl Iterator<Item = &[T]> {
        self.chunks
            .iter()
            .map(|c| c.as_slice())
            .take_while(|c| !c.is_empty())
    }

    /// Removes every value and keeps the chunks.
    pub fn clear(&mut self) {
        for c in &mut self.chunks {
            if c.is_empty() {
                break;
            }
            c.clear();
        }
        self.len = 0;
    }
}

/// How a key of a [`Sharded`] map picks its shard: 64 well-mixed bits, of
/// which the top ones are used.
pub trait Spread: Copy + Eq + Hash {
    /// The bits the shard is taken from.
    fn spread(self) -> u64;
}

impl Spread for usize {
    /// Block addresses: a multiplicative hash of the address above its
    /// 16-byte alignment (the in-shard hasher multiplies by another
    /// constant, so a shard's keys still spread over its buckets).
    #[inline(always)]
    fn spread(self) -> u64 {
        ((self as u64) >> 4).wrapping_mul(0x9E37_79B9_7F4A_7C15)
    }
}

impl Spread for u64 {
    /// Stack hashes, mixed already (see [`StackHash`]).
    #[inline(always)]
    fn spread(self) -> u64 {
        self
    }
}

/// Entries one shard of a [`Sharded`] map may hold: 7/8 of 2^16, so a
/// shard's table never has more than 2^17 buckets. (A `HashMap` grows when
/// an insert finds no free bucket: past 7/8 of its buckets, or earlier when
/// removals left tombstones. With at most 57,344 entries, a table of 2^16
/// buckets that fills with tombstones grows to 2^17, and one of 2^17 is
/// then at most half full and is rehashed in place, without allocating.)
pub const SHARD_MAX_ITEMS: usize = 57_344;

/// The largest allocation one shard of a map of `(K, V)` entries makes:
/// its table at 2^17 buckets, an entry and a control byte each, plus a
/// group of control bytes.
pub const fn max_shard_bytes<K, V>() -> usize {
    (1 << 17) * (size_of::<(K, V)>() + 1) + 16
}

/// A hash map split into `S` shards (a power of two) by the top bits of
/// the key's [`Spread`], each a small `HashMap` of at most
/// [`SHARD_MAX_ITEMS`] entries: a growth step allocates at most
/// [`max_shard_bytes`] (4.1 MiB for the block map's 32-byte entries, 2.1
/// MiB for the stack index's 16), and the map holds at most `S *
/// SHARD_MAX_ITEMS` entries. The shards themselves, 32 bytes each, are
/// allocated at the first insert.
///
/// Inserting is two steps, so that no insert can allocate behind the
/// caller's back: [`make_room`](Self::make_room), fallible, then
/// [`insert`](Self::insert).
pub struct Sharded<K, V, const S: usize> {
    shards: Vec<FastMap<K, V>>,
}

impl<K: Spread, V, const S: usize> Default for Sharded<K, V, S> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: Spread, V, const S: usize> Sharded<K, V, S> {
    const SHIFT: u32 = {
        assert!(S.is_power_of_two() && S > 1);
        64 - S.trailing_zeros()
    };

    /// An empty map (no allocation).
    pub const fn new() -> Self {
        let _ = Self::SHIFT;
        Sharded { shards: Vec::new() }
    }

    #[inline(always)]
    fn shard(&self, k: K) -> Option<&FastMap<K, V>> {
        self.shards.get((k.spread() >> Self::SHIFT) as usize)
    }

    #[inline(always)]
    fn shard_mut(&mut self, k: K) -> Option<&mut FastMap<K, V>> {
        self.shards.get_mut((k.spread() >> Self::SHIFT) as usize)
    }

    /// The number of entries (a walk over the shards: for tests).
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.shards.iter().map(|m| m.len()).sum()
    }

    /// Calls `f` with every key (never allocates).
    pub fn for_each_key(&self, mut f: impl FnMut(K)) {
        for m in &self.shards {
            m.keys().for_each(|&k| f(k));
        }
    }

    /// The value of `k`.
    #[inline]
    pub fn get(&self, k: K) -> Option<&V> {
        self.shard(k)?.get(&k)
    }

    /// The value of `k`, to change.
    #[inline]
    pub fn get_mut(&mut self, k: K) -> Option<&mut V> {
        self.shard_mut(k)?.get_mut(&k)
    }

    /// Removes `k`, returning its value (never allocates).
    #[inline]
    pub fn remove(&mut self, k: K) -> Option<V> {
        self.shard_mut(k)?.remove(&k)
    }

    /// Makes sure [`insert`](Self::insert) of `k` will not allocate: true
    /// if `k` is there, its shard has a free bucket, or one could be made
    /// within the shard's bounds; false if memory ran out or the shard is
    /// full.
    #[inline]
    pub fn make_room(&mut self, k: K) -> bool {
        if self.shards.is_empty() && !self.allocate_shards() {
            return false;
        }
        let Some(m) = self.shard_mut(k) else {
            return false;
        };
        if m.len() < m.capacity() || m.contains_key(&k) {
            return true;
        }
        m.len() < SHARD_MAX_ITEMS && m.try_reserve(1).is_ok()
    }

    /// Whether [`insert`](Self::insert) of `k` could be done without
    /// allocating: `k` is there or its shard has a free bucket.
    #[inline]
    pub fn has_room(&self, k: K) -> bool {
        self.shard(k)
            .is_some_and(|m| m.len() < m.capacity() || m.contains_key(&k))
    }

    #[cold]
    fn allocate_shards(&mut self) -> bool {
        if self.shards.try_reserve_exact(S).is_err() {
            return false;
        }
        self.shards.resize_with(S, FastMap::default);
        true
    }

    /// Inserts `k` (replacing and returning its old value), after
    /// [`make_room`](Self::make_room) or [`has_room`](Self::has_room) said
    /// yes; never allocates.
    ///
    /// # Panics
    /// If there was no room: a bug in the caller.
    #[inline]
    pub fn insert(&mut self, k: K, v: V) -> Option<V> {
        let m = self.shard_mut(k).expect("make_room allocated the shards");
        if m.len() < m.capacity() {
            // A free bucket: `HashMap::insert` (which reserves room for
            // one more before it looks) cannot allocate.
            return m.insert(k, v);
        }
        // A full shard: `k` is there (`make_room` said so).
        let old = m.get_mut(&k).expect("insert after make_room");
        Some(core::mem::replace(old, v))
    }
}

/// A stack's 128-bit fingerprint: two independent 64-bit hashes of its
/// return addresses. `hash` finds the stack in the index (its top bits
/// choose the shard); `check` tells it from another stack with the same
/// `hash`.
///
/// Each half folds the addresses in four interleaved lanes (address `i`
/// into lane `i % 4`), with its own multiplier and seeds, then combines
/// the lanes and finishes with a 64-bit mixer, so that every bit depends
/// on every address. Four lanes because each fold is a multiply whose
/// result the next fold of its lane waits for: one lane would be a chain
/// of 45 multiplies on a 45-frame stack, where eight chains run side by
/// side.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StackHash {
    pub hash: u64,
    pub check: u64,
}

impl StackHash {
    /// Hashes `frames`.
    #[inline]
    pub fn of(frames: &[u64]) -> Self {
        const K1: u64 = 0x517C_C1B7_2722_0A95;
        const K2: u64 = 0x9E37_79B9_7F4A_7C15;
        let f1 = |h: u64, v: u64| (h.rotate_left(5) ^ v).wrapping_mul(K1);
        let f2 = |h: u64, v: u64| (h.rotate_left(23) ^ v).wrapping_mul(K2);
        let n = frames.len() as u64;
        let mut x = [n, 1, 2, 3];
        let mut y = [!n, 5, 6, 7];
        let mut quads = frames.chunks_exact(4);
        for q in &mut quads {
            for l in 0..4 {
                x[l] = f1(x[l], q[l]);
                y[l] = f2(y[l], q[l]);
            }
        }
        for (l, &v) in quads.remainder().iter().enumerate() {
            x[l] = f1(x[l], v);
            y[l] = f2(y[l], v);
        }
        let join =
            |z: [u64; 4]| z[0] ^ z[1].rotate_left(16) ^ z[2].rotate_left(32) ^ z[3].rotate_left(48);
        StackHash {
            hash: murmur3_mix(join(x)),
            check: splitmix_mix(join(y)),
        }
    }
}

/// MurmurHash3's 64-bit finalizer.
#[inline(always)]
fn murmur3_mix(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

/// SplitMix64's finalizer (different constants and shifts from
/// [`murmur3_mix`], so the two halves are mixed independently).
#[inline(always)]
fn splitmix_mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Types that are valid when all their bytes are zero.
///
/// # Safety
/// All-zero bytes must be a valid value of the type.
pub unsafe trait Zeroable {}

/// A zeroed `T` on the heap, or `None` if memory ran out. Zeroed by the
/// allocator, not copied through the stack: a table may be hundreds of
/// KiB, and pages fresh from the kernel (already zero) stay untouched
/// until used.
#[cold]
pub fn zeroed_box<T: Zeroable>() -> Option<Box<T>> {
    let layout = std::alloc::Layout::new::<T>();
    const { assert!(size_of::<T>() > 0) };
    // SAFETY: the layout's size is not zero.
    let p = unsafe { std::alloc::alloc_zeroed(layout) }.cast::<T>();
    // SAFETY: `p` is from the global allocator with `T`'s layout, and all
    // zero it is a valid `T` (`Zeroable`); the box frees it with the same
    // layout.
    (!p.is_null()).then(|| unsafe { Box::from_raw(p) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_alloc::{self, largest_allocation};

    #[test]
    fn chunks_grow_a_chunk_at_a_time() {
        let mut c: Chunks<u64, 1024> = Chunks::new();
        let ((), largest) = largest_allocation(|| {
            for i in 0..100_000u64 {
                assert!(c.try_reserve(1));
                c.push(i);
            }
        });
        assert_eq!(largest, 1024 * 8);
        assert_eq!(c.len(), 100_000);
        assert_eq!((*c.get(0), *c.get(1023), *c.get(1024)), (0, 1023, 1024));
        *c.get_mut(5) = 7;
        assert_eq!(*c.get(5), 7);
        // Across a chunk boundary.
        let (a, b) = c.slices(1020, 8);
        assert_eq!(
            (a, b),
            (&[1020, 1021, 1022, 1023][..], &[1024, 1025, 1026, 1027][..])
        );
        let (a, b) = c.slices(0, 3);
        assert_eq!((a.len(), b.len()), (3, 0));
        let total: usize = c.as_slices().map(|s| s.len()).sum();
        assert_eq!(total, 100_000);
        // Cleared, the chunks stay: refilling allocates nothing.
        c.clear();
        assert!(c.is_empty() && c.as_slices().next().is_none());
        let ((), largest) = largest_allocation(|| {
            assert!(c.try_reserve_total(100_000));
            c.extend_from_slice(&[9; 3000]);
        });
        assert_eq!(largest, 0);
        assert_eq!((c.len(), *c.get(2999)), (3000, 9));
    }

    /// A short sequence takes little memory: its last chunk doubles up to
    /// the full size.
    #[test]
    fn chunks_start_small() {
        let mut c: Chunks<u32, 4096> = Chunks::new();
        let ((), largest) = largest_allocation(|| {
            for i in 0..100 {
                assert!(c.try_reserve(1));
                c.push(i);
            }
        });
        assert_eq!(largest, 128 * 4);
        for i in 100..10_000 {
            assert!(c.try_reserve(1));
            c.push(i);
        }
        assert!((0..10_000).all(|i| *c.get(i as usize) == i));
        let ((), largest) = largest_allocation(|| assert!(c.try_reserve(100_000)));
        assert_eq!(largest, 4096 * 4);
    }

    #[test]
    fn chunks_refuse_what_cannot_exist() {
        let mut c: Chunks<u64, 8> = Chunks::new();
        assert!(!c.has_room(1));
        assert!(!c.try_reserve(usize::MAX / 2));
        assert!(c.try_reserve(3));
        assert!(c.has_room(3) && !c.has_room(4) && !c.has_room(usize::MAX));
        assert!(c.try_reserve(4) && c.has_room(6), "doubled: room for 6");
        assert!(c.try_reserve(9) && c.has_room(9) && !c.has_room(10));
        c.push(1);
        assert!(!c.try_reserve(usize::MAX));
        assert_eq!(c.len(), 1);
        // Without memory: refused, and what the attempt took is given back.
        let mut big: Chunks<u64, 1024> = Chunks::new();
        assert!(big.try_reserve(10));
        assert!(!test_alloc::without_memory(|| big.try_reserve(5000)));
        assert_eq!(big.chunks.len(), 1);
    }

    /// Keys that all land in shard 0 of a map with `S` shards.
    fn shard0_keys<const S: usize>() -> impl Iterator<Item = usize> {
        (0usize..)
            .map(|i| i * 16)
            .filter(|&k| (k.spread() >> (64 - S.trailing_zeros())) == 0)
    }

    #[test]
    fn a_shard_is_bounded_and_refuses_past_its_limit() {
        let mut m: Sharded<usize, (u32, u64), 64> = Sharded::new();
        let keys: Vec<usize> = shard0_keys::<64>().take(SHARD_MAX_ITEMS + 100).collect();
        assert!(!m.has_room(keys[0]), "no shards yet");
        let ((), largest) = largest_allocation(|| {
            for (i, &k) in keys.iter().enumerate() {
                let room = m.make_room(k);
                assert_eq!(room, i < SHARD_MAX_ITEMS, "key {i}");
                if room {
                    assert!(m.insert(k, (i as u32, 0)).is_none());
                }
            }
            // Churn: removals leave tombstones; the shard never grows past
            // its bound for them.
            for round in 0..4 {
                for &k in &keys[..SHARD_MAX_ITEMS / 2] {
                    assert!(m.remove(k).is_some());
                }
                for &k in &keys[..SHARD_MAX_ITEMS / 2] {
                    assert!(m.make_room(k), "round {round}");
                    m.insert(k, (round, 1));
                }
            }
        });
        let bound = max_shard_bytes::<usize, (u32, u64)>();
        assert!(largest <= bound, "{largest} > {bound}");
        assert!(bound < 4 << 20, "{bound}");
        assert_eq!(m.len(), SHARD_MAX_ITEMS);
        // A key already there can always be replaced.
        assert!(m.has_room(keys[0]) && m.make_room(keys[0]));
        assert!(!m.has_room(keys[SHARD_MAX_ITEMS]));
        assert_eq!(m.insert(keys[0], (9, 9)), Some((3, 1)));
        assert_eq!(m.get(keys[0]), Some(&(9, 9)));
        *m.get_mut(keys[1]).unwrap() = (8, 8);
        assert_eq!(m.get(keys[1]), Some(&(8, 8)));
        assert_eq!(m.get(1), None);
        assert_eq!(m.remove(keys[0]), Some((9, 9)));
        assert_eq!((m.remove(keys[0]), m.len()), (None, SHARD_MAX_ITEMS - 1));
    }

    /// Each half of the fingerprint depends on every frame and on the
    /// depth: changing any one frame of a deep stack, or dropping its last,
    /// changes both halves.
    #[test]
    fn both_fingerprint_halves_see_every_frame() {
        let base: Vec<u64> = (0..45).map(|i| 0x5555_0000_1000 + i * 0x40).collect();
        let h = StackHash::of(&base);
        assert_ne!(h.hash, h.check);
        for i in 0..base.len() {
            let mut f = base.clone();
            f[i] ^= 0x10;
            let g = StackHash::of(&f);
            assert!(g.hash != h.hash && g.check != h.check, "frame {i}");
        }
        let g = StackHash::of(&base[..44]);
        assert!(g.hash != h.hash && g.check != h.check, "a prefix");
        // Frames moved between lanes.
        let mut swapped = base.clone();
        swapped.swap(0, 1);
        let g = StackHash::of(&swapped);
        assert!(g.hash != h.hash && g.check != h.check, "two frames swapped");
    }

    #[test]
    fn keys_spread_over_the_shards() {
        let mut m: Sharded<usize, u32, 256> = Sharded::new();
        for i in 0..256 * 64 {
            let k = 0x5555_0000_0000 + i * 48;
            assert!(m.make_room(k));
            m.insert(k, i as u32);
        }
        let sizes: Vec<usize> = m.shards.iter().map(|s| s.len()).collect();
        let (lo, hi) = (sizes.iter().min().unwrap(), sizes.iter().max().unwrap());
        assert!(*lo >= 32 && *hi <= 112, "shard sizes from {lo} to {hi}");
        let mut s: Sharded<u64, u32, 256> = Sharded::new();
        let mut counts = [0u32; 256];
        for i in 0..256 * 64u64 {
            let h = StackHash::of(&[0x40_1000 + i * 8, 0x40_2000]).hash;
            counts[(h >> 56) as usize] += 1;
            assert!(s.make_room(h));
            s.insert(h, i as u32);
        }
        assert!(
            counts.iter().all(|&c| (24..=112).contains(&c)),
            "{counts:?}"
        );
    }
}
