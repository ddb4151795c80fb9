//! The marks a Rust program built with the `allocmux` crate carries in its
//! ELF file, so that the command line can tell, from the file alone, that
//! the program switches its allocator in code and records itself.
//!
//! Each mark is a NUL-terminated name in the section [`SECTION`]; the
//! linker gathers them there from the code that uses them, so a program
//! carries a mark only when that code is linked in: [`SWITCHABLE`] when
//! `allocmux::Switchable` chooses its allocator, [`COUNTING`] when
//! `allocmux::Counting` is its global allocator. Section headers survive
//! `strip`, so a stripped release build is read the same.

/// The section's name.
pub const SECTION: &str = ".allocmux_marks";

/// The program's allocator is an `allocmux::Switchable`: the environment
/// (`ALLOCMUX_ALLOCATOR`) picks it, with no preloaded library.
pub const SWITCHABLE: &str = "switchable";

/// The program's global allocator is an `allocmux::Counting`: it writes
/// the shim's profile itself when `ALLOCMUX_OUTPUT` asks and no shim is
/// preloaded.
pub const COUNTING: &str = "counting";

/// The marks in a section's contents, in order (empty names skipped: the
/// linker may pad between them).
pub fn read(section: &[u8]) -> impl Iterator<Item = &[u8]> {
    section.split(|&b| b == 0).filter(|name| !name.is_empty())
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_names_between_nuls_and_padding() {
        let marks: Vec<&[u8]> = super::read(b"switchable\0\0\0\0\0\0counting\0").collect();
        assert_eq!(marks, [&b"switchable"[..], b"counting"]);
        assert_eq!(super::read(b"").count(), 0);
    }
}
