//! `Counting<mimalloc::MiMalloc>` as the global allocator: the
//! same exact counts as with the system allocator, and the blocks really
//! come from mimalloc.

mod common;

use allocmux::Counting;
use mimalloc::MiMalloc;

unsafe extern "C" {
    /// Whether mimalloc manages `p` (libmimalloc-sys declares it only with
    /// its `extended` feature; the symbol is in the library it links).
    fn mi_is_in_heap_region(p: *const std::ffi::c_void) -> bool;
}

#[global_allocator]
static ALLOC: Counting<MiMalloc> = Counting::new(MiMalloc);

#[test]
fn allocations_go_to_mimalloc() {
    let (b, s) = allocmux::measure(|| std::hint::black_box(vec![0u8; 10_000]));
    // SAFETY: mimalloc answers for any address.
    assert!(unsafe { mi_is_in_heap_region(b.as_ptr().cast()) });
    assert_eq!((s.allocs, s.bytes_allocated), (1, 10_000), "{s}");
    drop(b);
}

// The scenarios every global allocator must count exactly.
common::scenarios!();
