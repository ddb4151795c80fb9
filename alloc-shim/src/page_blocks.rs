//! Blocks that are anonymous mappings of their own: the shim heap's blocks
//! for whoever holds the writer, and for the flusher when it runs as a
//! thread glibc does not know of (see `raw_thread`), neither of which may
//! enter glibc's heap (see `heap`). Made, resized and given back by system
//! calls alone, so any thread may free or resize one (the exit path reuses
//! the flusher's buffers), and recognised by their address: a block starts
//! [`HEADER`] bytes into its mapping, where the header holds the mapping's
//! length and a check word.
//!
//! A page per block is wasteful for small blocks, but the writer makes few
//! (its staging buffers, reused from one write to the next, and a copy of
//! the module list when it changes).

use core::alloc::Layout;

const PAGE: usize = 4096;
/// The header's size, which is also the largest alignment served.
const HEADER: usize = 64;
/// Mixed with the block's address into the check word, so no other block's
/// bytes can pass for a header by chance.
const MAGIC: usize = 0x616c_6c6f_636d_7578;

/// A block for `layout`, or null (no memory, or an alignment over 64).
pub fn allocate(layout: Layout) -> *mut u8 {
    let Some(len) = mapping_len(layout.size()) else {
        return core::ptr::null_mut();
    };
    if layout.align() > HEADER {
        return core::ptr::null_mut();
    }
    // SAFETY: a fresh anonymous mapping.
    let base = unsafe {
        libc::mmap(
            core::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if base == libc::MAP_FAILED {
        return core::ptr::null_mut();
    }
    // SAFETY: the mapping is `len` >= PAGE bytes, writable, page-aligned.
    unsafe { finish(base.cast(), len) }
}

/// Whether `ptr`, a live block of the shim heap's, is one of these.
pub fn holds(ptr: *mut u8) -> bool {
    let addr = ptr as usize;
    // SAFETY: a block at offset HEADER of a page has that page's first
    // bytes before it, on the same page as the block itself, so they are
    // mapped and readable whoever made the block.
    addr % PAGE == HEADER && unsafe { ((addr - HEADER) as *const usize).read() } == MAGIC ^ addr
}

/// Gives the block back.
///
/// # Safety
/// `ptr` is a live block of these ([`holds`]), not used afterwards.
pub unsafe fn free(ptr: *mut u8) {
    // SAFETY: the caller's block: its mapping starts HEADER bytes before it
    // and is as long as the header says.
    unsafe {
        let base = ptr.sub(HEADER);
        libc::munmap(base.cast(), base.cast::<usize>().add(1).read());
    }
}

/// The block resized to `new_size` bytes (moved if it must be, its bytes
/// kept), or null with the block unchanged.
///
/// # Safety
/// `ptr` is a live block of these ([`holds`]); on success it is not used
/// afterwards.
pub unsafe fn resize(ptr: *mut u8, new_size: usize) -> *mut u8 {
    let Some(new_len) = mapping_len(new_size) else {
        return core::ptr::null_mut();
    };
    // SAFETY: the caller's block, whose header gives its mapping; mremap
    // keeps the bytes and the mapping's properties.
    unsafe {
        let base = ptr.sub(HEADER);
        let len = base.cast::<usize>().add(1).read();
        let moved = libc::mremap(base.cast(), len, new_len, libc::MREMAP_MAYMOVE);
        if moved == libc::MAP_FAILED {
            return core::ptr::null_mut();
        }
        finish(moved.cast(), new_len)
    }
}

/// The length of the mapping for a block of `size` bytes.
fn mapping_len(size: usize) -> Option<usize> {
    Some(size.checked_add(HEADER + PAGE - 1)? / PAGE * PAGE)
}

/// Writes the header of the mapping at `base` and returns its block.
///
/// # Safety
/// `base` starts a writable, page-aligned mapping of `len` bytes.
unsafe fn finish(base: *mut u8, len: usize) -> *mut u8 {
    // SAFETY: the caller's mapping, at least a page long.
    unsafe {
        let block = base.add(HEADER);
        base.cast::<usize>().write(MAGIC ^ block as usize);
        base.cast::<usize>().add(1).write(len);
        block
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A block is recognised, keeps its bytes through growth (moving) and
    /// shrinking, honours alignments up to 64, and is given back; a
    /// glibc block is not taken for one.
    #[test]
    fn blocks_are_mappings_recognised_by_their_header() {
        let p = allocate(Layout::from_size_align(100, 64).unwrap());
        assert!(!p.is_null() && holds(p) && (p as usize).is_multiple_of(64));
        // SAFETY: `p` is a 100-byte block, resized and freed once.
        unsafe {
            p.write_bytes(0x7e, 100);
            let q = resize(p, 3 * PAGE);
            assert!(!q.is_null() && holds(q));
            assert!((0..100).all(|i| *q.add(i) == 0x7e));
            q.add(3 * PAGE - 1).write(1);
            let r = resize(q, 10);
            assert!(holds(r) && (0..10).all(|i| *r.add(i) == 0x7e));
            free(r);
        }
        assert!(allocate(Layout::from_size_align(8, 128).unwrap()).is_null());
        let other = Box::into_raw(Box::new([0u8; 64]));
        assert!(!holds(other.cast()));
        // SAFETY: from the Box above.
        drop(unsafe { Box::from_raw(other) });
    }
}
