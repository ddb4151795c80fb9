//! The stack recorder's map of tracked live blocks: a block's address to
//! its site and size, so that its free can take it out of its site's live
//! figures.
//!
//! In exact mode every allocation enters this map and every free leaves
//! it, and the live set can be millions of blocks. A hash map spreads
//! neighbouring addresses over its whole table, so once the table is
//! larger than the caches nearly every insert and remove waits on memory:
//! under callgrind's cache model, the block map's lookups were 3 of the
//! recorder's 5 first-level cache misses per allocation on the python3
//! workload, and in wall time the block map was two fifths of exact mode's
//! overhead there (see docs/performance.md). Allocators hand out
//! neighbouring addresses close together in time (a glibc heap grows by
//! carving its top; jemalloc and mimalloc fill a page of one size class at
//! a time) and programs free them close together too.
//!
//! So in exact mode small blocks are kept in a [`PageMap`]: a radix tree
//! indexed by the address itself, as tcmalloc's and jemalloc's own page
//! maps are, where a block's entry sits next to its neighbours' and is
//! found in three dependent loads with no hashing, probing or tombstones.
//! Its leaves cost 16 bytes per 32 bytes of the address range they cover,
//! which is why the blocks it takes are bounded in size ([`SMALL_MAX`])
//! and why sampled recording, which tracks one block in thousands, keeps
//! every block in the hash map instead. Every other block (larger, not
//! 16-byte aligned, above 2^48, or any block when sampling) goes to a
//! [`Sharded`] hash map.
//!
//! Both grow only in small fallible steps, as the recorder's tables must
//! (see [`tables`](super::tables)): the largest is a page-map node, 512
//! KiB, or a hash-map shard, 4.1 MiB.

use super::tables::{Sharded, Zeroable, zeroed_box};

/// A tracked live block.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Block {
    pub site: u32,
    /// Its sampling weight (1 / the probability it was sampled; 1 in exact
    /// mode), kept so its free need not work it out again: in the padding
    /// after `site`, so a block stays 16 bytes.
    pub weight: f32,
    pub size: u64,
    /// The TSC when it was handed out, for its lifetime.
    pub born: u64,
}

/// The largest block the page map takes, in bytes: larger ones are fewer,
/// and their entries would leave most of a leaf unused.
pub const SMALL_MAX: u64 = 1024;

/// Shards of the hash map (see [`Sharded`]): at most 117 million blocks.
pub const BLOCK_SHARDS: usize = 2048;

/// What [`BlockMap::insert`] did.
#[derive(Debug, PartialEq)]
pub enum Inserted {
    /// The block was entered.
    New,
    /// The block was entered in place of this one, at the same address:
    /// the allocator handed out a block thought live, whose free was not
    /// seen. Rarely two: one in each table.
    Replaced(Block, Option<Block>),
    /// No room: memory ran out, or room was needed and growing was not
    /// allowed. The block is not tracked.
    NoRoom,
}

/// Tracked blocks by address: small ones in a page map (exact mode), the
/// others in a hash map.
pub struct BlockMap {
    pages: PageMap,
    others: Sharded<usize, Block, BLOCK_SHARDS>,
    /// Whether the page map may hold blocks (exact mode, and after it).
    paged: bool,
    /// Whether new small blocks go to the page map (exact mode: its
    /// entries have no room for a sampled block's weight).
    paging: bool,
}

impl BlockMap {
    /// An empty map (no allocation); `paged`: small blocks go to the page
    /// map.
    pub const fn new(paged: bool) -> Self {
        BlockMap {
            pages: PageMap::new(),
            others: Sharded::new(),
            paged,
            paging: paged,
        }
    }

    /// Sends every new block to the hash map from now on (sampling starts,
    /// and a sampled block has a weight the page map cannot keep); the
    /// blocks in the page map stay there, and are found at their free.
    pub fn stop_paging(&mut self) {
        self.paging = false;
    }

    /// The number of blocks (a walk over both tables: for tests).
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.pages.len() + self.others.len()
    }

    /// Enters block `b` at `addr`. With `grow` false, nothing is allocated:
    /// a block that would need room is refused.
    ///
    /// An entry at `addr` in the page map is replaced whichever table the
    /// new block goes to. One in the hash map is replaced only by a block
    /// that goes there too: a small block is not looked up in the hash map
    /// (that lookup is the cost the page map avoids), so a large block
    /// whose free was not seen stays counted live until a large block is
    /// handed out at its address again, as any block whose free was not
    /// seen stays until its address is reused.
    #[inline]
    pub fn insert(&mut self, addr: usize, b: Block, grow: bool) -> Inserted {
        let paged_here = self.paged && PageMap::covers(addr);
        if paged_here && self.paging && b.size <= SMALL_MAX {
            let Some(slot) = self.pages.slot_mut(addr, grow) else {
                return Inserted::NoRoom;
            };
            if let Some(old) = slot.take_if_at(addr) {
                *slot = Slot::of(b, addr);
                return match old {
                    Some(old) => Inserted::Replaced(old, None),
                    None => Inserted::New,
                };
            }
            // The slot holds a live block 16 bytes away: this one is
            // hashed.
        }
        let room = if grow {
            self.others.make_room(addr)
        } else {
            self.others.has_room(addr)
        };
        if !room {
            return Inserted::NoRoom;
        }
        // A small block at this address whose free was not seen: large
        // blocks are few, so they look.
        let stale_small = if paged_here {
            self.pages.remove(addr)
        } else {
            None
        };
        match (self.others.insert(addr, b), stale_small) {
            (Some(old), also) => Inserted::Replaced(old, also),
            (None, Some(old)) => Inserted::Replaced(old, None),
            (None, None) => Inserted::New,
        }
    }

    /// Calls `f` with the address of every block (never allocates).
    pub fn for_each_address(&self, mut f: impl FnMut(usize)) {
        self.pages.for_each_address(&mut f);
        self.others.for_each_key(f);
    }

    /// Removes the block at `addr`, if it is tracked (never allocates).
    #[inline]
    pub fn remove(&mut self, addr: usize) -> Option<Block> {
        let found = if self.paged {
            self.pages.remove(addr)
        } else {
            None
        };
        found.or_else(|| self.others.remove(addr))
    }
}

/// A page map's entry, for the 32 bytes of addresses from a multiple of
/// 32: a block's site plus one (0: no block), its size (at most
/// [`SMALL_MAX`]), which of the two 16-byte boundaries it starts at, and
/// the TSC when it was handed out (its lifetime's start: half the entry,
/// which doubled the map's size, 8 bytes of map per 32 bytes of address
/// range to 16). All zero is empty, so nodes are allocated zeroed.
///
/// A slot per 32 bytes rather than 16 halves the map: glibc's blocks
/// start at least 32 bytes apart (its smallest chunk), so each has a slot
/// of its own. jemalloc's and mimalloc's 16-byte blocks can share one;
/// the second is then hashed.
#[derive(Clone, Copy, Default)]
#[repr(C)]
struct Slot {
    site_plus_one: u32,
    size: u16,
    /// Bit 4 of the block's address.
    upper: u16,
    born: u64,
}

const _: () = assert!(SMALL_MAX <= u16::MAX as u64);

impl Slot {
    fn of(b: Block, addr: usize) -> Self {
        debug_assert!(b.size <= SMALL_MAX && b.site < u32::MAX);
        Slot {
            site_plus_one: b.site + 1,
            size: b.size as u16,
            upper: Self::upper(addr),
            born: b.born,
        }
    }

    #[inline(always)]
    fn upper(addr: usize) -> u16 {
        ((addr >> 4) & 1) as u16
    }

    /// If the slot is empty, `Some(None)`; if it holds the block at
    /// `addr`, that block, leaving the slot empty; if it holds another
    /// (16 bytes away), `None`.
    #[inline(always)]
    fn take_if_at(&mut self, addr: usize) -> Option<Option<Block>> {
        if self.site_plus_one == 0 {
            return Some(None);
        }
        if self.upper != Self::upper(addr) {
            return None;
        }
        let s = core::mem::take(self);
        Some(Some(Block {
            site: s.site_plus_one - 1,
            weight: 1.0, // exact mode
            size: s.size as u64,
            born: s.born,
        }))
    }
}

/// Bits of an address a page map covers, and how they are split: a slot
/// per 32 bytes, a leaf per MiB (32,768 slots, 512 KiB), a middle node per
/// 4 GiB (4,096 leaves, 32 KiB), a root of 65,536 middle nodes (512 KiB).
/// Blocks start at 16-byte boundaries under every allocator the shim runs
/// except for 8-byte requests under jemalloc and mimalloc, which go to the
/// hash map.
///
/// Leaves are large so that they are few: a leaf is allocated when the
/// program's heap first reaches a new MiB, from the heap the recorder
/// shares with the program under glibc, and smaller leaves (32 KiB, one
/// per 128 KiB) broke up the program's heap finely enough that, in a
/// process at its limit of mappings, the exit profile's text found no
/// room in it. At 512 KiB they are also above glibc's default threshold
/// for mapping a request on its own, where pages never written (a leaf
/// over a sparse range) cost no memory.
const SLOT_SHIFT: u32 = 5;
const LEAF_BITS: u32 = 15;
const MID_BITS: u32 = 12;
const ROOT_BITS: u32 = 16;
const ADDRESS_BITS: u32 = SLOT_SHIFT + LEAF_BITS + MID_BITS + ROOT_BITS;
const _: () = assert!(ADDRESS_BITS == 48);

type Leaf = [Slot; 1 << LEAF_BITS];
type Mid = [Option<Box<Leaf>>; 1 << MID_BITS];
type Root = [Option<Box<Mid>>; 1 << ROOT_BITS];

/// A radix tree of [`Slot`]s indexed by address. Nodes are allocated the
/// first time a block is entered under them, and kept: as a hash map keeps
/// its table at its largest, the map keeps the nodes of every range that
/// held a small block.
struct PageMap {
    root: Option<Box<Root>>,
}

impl PageMap {
    const fn new() -> Self {
        PageMap { root: None }
    }

    /// Whether `addr` can have a slot: 16-byte aligned, below 2^48.
    #[inline(always)]
    fn covers(addr: usize) -> bool {
        (addr as u64) & 15 == 0 && (addr as u64) >> ADDRESS_BITS == 0
    }

    #[inline(always)]
    fn indices(addr: usize) -> (usize, usize, usize) {
        let a = addr as u64;
        let slot = (a >> SLOT_SHIFT) & ((1 << LEAF_BITS) - 1);
        let leaf = (a >> (SLOT_SHIFT + LEAF_BITS)) & ((1 << MID_BITS) - 1);
        let mid = a >> (SLOT_SHIFT + LEAF_BITS + MID_BITS);
        (mid as usize, leaf as usize, slot as usize)
    }

    /// The slot of `addr` (which it [covers](Self::covers)), allocating
    /// the nodes on its path if `grow`; `None` if they are missing and
    /// cannot be had.
    #[inline]
    fn slot_mut(&mut self, addr: usize, grow: bool) -> Option<&mut Slot> {
        let (m, l, s) = Self::indices(addr);
        let root = match &mut self.root {
            Some(r) => r,
            r => r.insert(grow.then(zeroed_box::<Root>)??),
        };
        let mid = match &mut root[m] {
            Some(mid) => mid,
            mid => mid.insert(grow.then(zeroed_box::<Mid>)??),
        };
        let leaf = match &mut mid[l] {
            Some(leaf) => leaf,
            leaf => leaf.insert(grow.then(zeroed_box::<Leaf>)??),
        };
        Some(&mut leaf[s])
    }

    /// The number of blocks (a walk over every node: for tests).
    #[cfg(test)]
    fn len(&self) -> usize {
        let mids = self.root.iter().flat_map(|r| r.iter().flatten());
        let slots = mids
            .flat_map(|mid| mid.iter().flatten())
            .flat_map(|leaf| leaf.iter());
        slots.filter(|s| s.site_plus_one != 0).count()
    }

    /// Calls `f` with the address of every block.
    fn for_each_address(&self, f: &mut impl FnMut(usize)) {
        let Some(root) = &self.root else { return };
        for (m, mid) in root.iter().enumerate() {
            let Some(mid) = mid else { continue };
            for (l, leaf) in mid.iter().enumerate() {
                let Some(leaf) = leaf else { continue };
                let base =
                    (m << (SLOT_SHIFT + LEAF_BITS + MID_BITS)) | (l << (SLOT_SHIFT + LEAF_BITS));
                for (s, slot) in leaf.iter().enumerate() {
                    if slot.site_plus_one != 0 {
                        f(base | (s << SLOT_SHIFT) | (usize::from(slot.upper) << 4));
                    }
                }
            }
        }
    }

    /// Removes the block at `addr`, if there is one here.
    #[inline]
    fn remove(&mut self, addr: usize) -> Option<Block> {
        if !Self::covers(addr) {
            return None;
        }
        let (m, l, s) = Self::indices(addr);
        let leaf = self.root.as_mut()?[m].as_mut()?[l].as_mut()?;
        leaf[s].take_if_at(addr)?
    }
}

// SAFETY: `Slot` is integers.
unsafe impl Zeroable for Leaf {}
// SAFETY: an all-zero `Option<Box<_>>` is `None` (the null-pointer
// optimisation, guaranteed for `Box`).
unsafe impl Zeroable for Mid {}
// SAFETY: as for `Mid`.
unsafe impl Zeroable for Root {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_alloc::{self, largest_allocation};

    fn block(site: u32, size: u64) -> Block {
        Block {
            site,
            weight: 1.0,
            size,
            // Told apart by block, so that a round trip shows it is kept.
            born: 1_000 + u64::from(site),
        }
    }

    #[test]
    fn small_blocks_are_paged_and_found_again() {
        let mut m = BlockMap::new(true);
        let base = 0x5555_0000_0000usize;
        for i in 0..10_000 {
            assert_eq!(
                m.insert(base + i * 32, block(i as u32, 24), true),
                Inserted::New
            );
        }
        assert_eq!(m.len(), 10_000);
        assert!(m.others.len() == 0, "all small and aligned: none hashed");
        assert_eq!(m.remove(base + 32 * 77), Some(block(77, 24)));
        assert_eq!(m.remove(base + 32 * 77), None);
        assert_eq!(m.remove(base + 32 * 77 + 16), None, "between blocks");
        // Its free not seen, a block at a live address replaces the old.
        assert_eq!(
            m.insert(base, block(9, 8), true),
            Inserted::Replaced(block(0, 24), None)
        );
        assert_eq!(m.len(), 9_999);
        assert_eq!(m.remove(base), Some(block(9, 8)));
        // Site 0 and the largest site are told apart from an empty slot.
        assert_eq!(
            m.insert(base + 16, block(u32::MAX - 1, 1), true),
            Inserted::New
        );
        assert_eq!(m.remove(base + 16), Some(block(u32::MAX - 1, 1)));
    }

    #[test]
    fn a_block_16_bytes_from_a_live_one_is_hashed() {
        let mut m = BlockMap::new(true);
        let a = 0x5555_0000_1000usize;
        assert_eq!(m.insert(a, block(1, 16), true), Inserted::New);
        assert_eq!(m.insert(a + 16, block(2, 16), true), Inserted::New);
        assert_eq!(m.others.len(), 1, "the second shares the first's slot");
        assert_eq!(m.remove(a + 16), Some(block(2, 16)));
        assert_eq!(m.remove(a), Some(block(1, 16)));
        // Either way round.
        assert_eq!(m.insert(a + 16, block(3, 16), true), Inserted::New);
        assert_eq!(m.insert(a, block(4, 16), true), Inserted::New);
        assert_eq!((m.pages.len(), m.others.len()), (1, 1));
        assert_eq!(m.remove(a), Some(block(4, 16)));
        assert_eq!(m.remove(a + 16), Some(block(3, 16)));
        assert_eq!((m.remove(a), m.remove(a + 16), m.len()), (None, None, 0));
    }

    #[test]
    fn after_paging_stops_new_blocks_keep_their_weight() {
        let mut m = BlockMap::new(true);
        let (old, new) = (0x5555_0000_0000usize, 0x5555_0000_1000usize);
        assert_eq!(m.insert(old, block(1, 64), true), Inserted::New);
        m.stop_paging();
        let sampled = Block {
            site: 2,
            weight: 41.5,
            size: 64,
            born: 77,
        };
        assert_eq!(m.insert(new, sampled, true), Inserted::New);
        assert_eq!((m.pages.len(), m.others.len()), (1, 1));
        assert_eq!(m.remove(new), Some(sampled));
        assert_eq!(
            m.remove(old),
            Some(block(1, 64)),
            "still found in the page map"
        );
        // A paged block whose free was not seen is replaced all the same.
        assert_eq!(m.insert(old, block(3, 64), true), Inserted::New);
        assert_eq!(
            m.insert(old, block(4, 64), true),
            Inserted::Replaced(block(3, 64), None)
        );
    }

    #[test]
    fn every_address_is_walked() {
        let mut m = BlockMap::new(true);
        let mut addrs = vec![
            0x5555_0000_0000usize,
            0x5555_0000_0010, // shares the first one's slot: hashed
            0x5555_0001_0000 + 32 * 9,
            0x7f00_0000_0008, // 8-byte aligned: hashed
            0x7fff_ffff_ffe0,
        ];
        for (i, &a) in addrs.iter().enumerate() {
            assert_eq!(m.insert(a, block(i as u32, 16), true), Inserted::New);
        }
        let mut seen = Vec::new();
        m.for_each_address(|a| seen.push(a));
        seen.sort_unstable();
        addrs.sort_unstable();
        assert_eq!(seen, addrs);
    }

    #[test]
    fn other_blocks_are_hashed() {
        let mut m = BlockMap::new(true);
        let cases = [
            (0x7f00_0000_0000usize, SMALL_MAX + 1), // large
            (0x7f00_0000_0008, 8),                  // 8-byte aligned
            (1 << 48, 16),                          // above the page map
            (usize::MAX - 15, 16),
        ];
        for (i, &(addr, size)) in cases.iter().enumerate() {
            assert_eq!(m.insert(addr, block(i as u32, size), true), Inserted::New);
        }
        assert_eq!((m.len(), m.others.len()), (4, 4));
        assert!(m.pages.root.is_none(), "no page-map node for them");
        for (i, &(addr, size)) in cases.iter().enumerate() {
            assert_eq!(m.remove(addr), Some(block(i as u32, size)));
        }
        assert_eq!(m.len(), 0);
    }

    #[test]
    fn a_large_block_replaces_a_small_one_at_its_address() {
        let mut m = BlockMap::new(true);
        let a = 0x6000_0000_0000usize;
        assert_eq!(m.insert(a, block(1, 64), true), Inserted::New);
        assert_eq!(
            m.insert(a, block(2, 1 << 20), true),
            Inserted::Replaced(block(1, 64), None)
        );
        assert_eq!(m.len(), 1);
        assert_eq!(m.remove(a), Some(block(2, 1 << 20)));
        assert_eq!((m.remove(a), m.len()), (None, 0));
    }

    /// Both tables may hold a block at one address whose free was not
    /// seen (a small block hashed beside a live neighbour, then a small
    /// block paged there): a large block there replaces both.
    #[test]
    fn a_large_block_replaces_stale_blocks_in_both_tables() {
        let mut m = BlockMap::new(true);
        let a = 0x6000_0000_0010usize;
        assert_eq!(m.insert(a - 16, block(1, 16), true), Inserted::New);
        assert_eq!(m.insert(a, block(2, 16), true), Inserted::New); // hashed
        assert_eq!(m.remove(a - 16), Some(block(1, 16)));
        assert_eq!(m.insert(a, block(3, 16), true), Inserted::New); // paged
        assert_eq!(
            m.insert(a, block(4, 4096), true),
            Inserted::Replaced(block(2, 16), Some(block(3, 16)))
        );
        assert_eq!(m.len(), 1);
        assert_eq!(m.remove(a), Some(block(4, 4096)));
    }

    #[test]
    fn sampling_hashes_every_block() {
        let mut m = BlockMap::new(false);
        assert_eq!(m.insert(0x1000, block(3, 16), true), Inserted::New);
        assert!(m.pages.root.is_none());
        assert_eq!(m.remove(0x1000), Some(block(3, 16)));
    }

    /// Nodes are allocated on first use, each at most 512 KiB; without
    /// memory, or without leave to grow, a block needing a node is refused
    /// and one under existing nodes is not.
    #[test]
    fn nodes_grow_in_bounded_fallible_steps() {
        let mut m = BlockMap::new(true);
        let a = 0x7100_0000_0000usize;
        assert_eq!(m.insert(a, block(0, 16), false), Inserted::NoRoom);
        let (r, largest) = largest_allocation(|| m.insert(a, block(0, 16), true));
        assert_eq!(r, Inserted::New);
        assert_eq!(largest, 512 << 10);
        assert_eq!(m.insert(a + 32, block(0, 16), false), Inserted::New);
        let far = a + (1 << 20); // the next leaf
        assert_eq!(m.insert(far, block(0, 16), false), Inserted::NoRoom);
        assert_eq!(
            test_alloc::without_memory(|| m.insert(far, block(0, 16), true)),
            Inserted::NoRoom
        );
        let (r, largest) = largest_allocation(|| m.insert(far, block(0, 16), true));
        assert_eq!((r, largest), (Inserted::New, 512 << 10));
        assert_eq!(m.len(), 3);
        assert_eq!(m.remove(far), Some(block(0, 16)));
    }
}
