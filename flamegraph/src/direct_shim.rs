//! Direct shims, made from the shim as built: the same library with each
//! malloc-family export's dynamic symbol pointed at one hook table's
//! function and the table's marker byte set (see
//! `allocmux_format::direct`). The loader binds the program's `malloc`
//! to the hook itself, so a call skips the universal library's jump
//! through the table in force. A forwarder's `malloc` and `free` go
//! further: they are the allocator's own functions
//! ([`DirectTable::entry_point`]), so a call costs what it costs under the
//! allocator's own library.
//!
//! Only the two fields of existing dynamic-symbol entries (value and size)
//! and one byte of read-only data change: no section, segment or string
//! moves, and the symbol hash tables, which are keyed by name, stay valid.

use allocmux_format::Func;
use allocmux_format::direct::{self, DirectTable};
use object::read::elf::{ElfFile64, FileHeader};
use object::{Endian, Endianness, Object, ObjectSection, ObjectSymbol, SymbolKind};

/// The size of one ELF64 symbol-table entry, and where its value and size
/// are in it.
const SYM_SIZE: usize = 24;
const ST_VALUE: usize = 8;
const ST_SIZE: usize = 16;

/// `universal` (the shim as built) made the direct shim of `table`.
pub fn make(universal: &[u8], table: &DirectTable) -> Result<Vec<u8>, String> {
    crate::elf::aligned(universal, |data| make_aligned(data, table))
}

fn make_aligned(universal: &[u8], table: &DirectTable) -> Result<Vec<u8>, String> {
    let file = ElfFile64::<Endianness>::parse(universal)
        .map_err(|e| format!("the shim is not a 64-bit ELF file ({e})"))?;
    let endian = file.elf_header().endian().map_err(|e| e.to_string())?;
    let dynsym = file
        .section_by_name(".dynsym")
        .and_then(|s| s.file_range())
        .ok_or("the shim has no dynamic symbol table")?
        .0 as usize;
    // Each dynamic symbol's entry index, value and size, by name.
    let symbols: Vec<(String, usize, u64, u64)> = file
        .dynamic_symbols()
        .filter_map(|s| {
            let name = s.name().ok()?.to_string();
            Some((name, s.index().0, s.address(), s.size()))
        })
        .collect();
    let find = |name: &str| {
        symbols
            .iter()
            .find(|s| s.0 == name)
            .ok_or_else(|| format!("the shim does not export {name}"))
    };
    let mut out = universal.to_vec();
    for func in Func::ALL {
        let (_, entry, _, _) = find(func.name())?;
        let (_, _, hook, hook_size) = find(&direct::hook_symbol(table.name, func.name()))?;
        let (value, size) = table
            .entry_point(func)
            .and_then(|name| static_function(&file, name))
            .unwrap_or((*hook, *hook_size));
        let at = dynsym + entry * SYM_SIZE;
        out[at + ST_VALUE..at + ST_VALUE + 8].copy_from_slice(&endian.write_u64_bytes(value));
        out[at + ST_SIZE..at + ST_SIZE + 8].copy_from_slice(&endian.write_u64_bytes(size));
    }
    let (_, _, marker, _) = find(direct::MARKER)?;
    let offset = file
        .sections()
        .find(|s| (s.address()..s.address() + s.size()).contains(marker))
        .and_then(|s| Some(s.file_range()?.0 + (marker - s.address())))
        .ok_or("the shim's table marker is not stored in the file")? as usize;
    match out.get_mut(offset) {
        Some(byte) if *byte == direct::UNIVERSAL => *byte = table.code,
        _ => return Err("the shim's table marker does not hold the value it is built with".into()),
    }
    Ok(out)
}

/// The address and size of the function `name` defined in the file, from
/// its static symbol table (where the allocators' own functions are:
/// they are not exported).
fn static_function(file: &ElfFile64<Endianness>, name: &str) -> Option<(u64, u64)> {
    file.symbols()
        .find(|s| s.name() == Ok(name) && s.kind() == SymbolKind::Text && s.is_definition())
        .map(|s| (s.address(), s.size()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use allocmux_format::Backend;
    use allocmux_format::direct::TABLES;

    #[test]
    fn the_forwarders_malloc_and_free_are_the_allocators_own() {
        let cases = [
            (
                Backend::Jemalloc,
                "_rjem_",
                &[Func::Malloc, Func::Free, Func::Calloc][..],
            ),
            (Backend::Mimalloc, "mi_", &[Func::Malloc, Func::Free][..]),
        ];
        for (backend, prefix, own) in cases {
            let table = DirectTable::forwarding(backend).unwrap();
            let direct = make(crate::shim::EMBEDDED, &table).unwrap();
            for func in Func::ALL {
                let bound = value(&direct, func.name());
                let hook = value(
                    crate::shim::EMBEDDED,
                    &direct::hook_symbol(table.name, func.name()),
                );
                if own.contains(&func) {
                    let entry = format!("{prefix}{}", func.name());
                    let entry = static_value(crate::shim::EMBEDDED, &entry);
                    assert_eq!(bound, entry, "{} {}", table.name, func.name());
                } else {
                    assert_eq!(bound, hook, "{} {}", table.name, func.name());
                }
            }
        }
    }

    /// The dynamic symbol `name`'s value in `data`.
    fn value(data: &[u8], name: &str) -> u64 {
        crate::elf::aligned(data, |data| {
            let file = ElfFile64::<Endianness>::parse(data).unwrap();
            file.dynamic_symbols()
                .find(|s| s.name() == Ok(name))
                .unwrap_or_else(|| panic!("{name} is not exported"))
                .address()
        })
    }

    /// The function `name`'s address in `data`'s static symbol table.
    fn static_value(data: &[u8], name: &str) -> u64 {
        crate::elf::aligned(data, |data| {
            let file = ElfFile64::<Endianness>::parse(data).unwrap();
            static_function(&file, name)
                .unwrap_or_else(|| panic!("the shim has no function {name}"))
                .0
        })
    }

    #[test]
    fn every_export_of_a_direct_shim_is_its_tables_hook_or_the_allocators_own() {
        let universal = crate::shim::EMBEDDED;
        for table in TABLES {
            let direct = make(universal, &table).unwrap();
            assert_eq!(direct.len(), universal.len());
            for func in Func::ALL {
                let name = func.name();
                let hook = value(universal, &direct::hook_symbol(table.name, name));
                assert_ne!(value(universal, name), hook, "{name}");
                let bound = match table.entry_point(func) {
                    None => hook,
                    Some(entry) => static_value(universal, entry),
                };
                assert_eq!(value(&direct, name), bound, "{} {name}", table.name);
            }
            // The bytes that differ: 10 symbols' values and sizes (at most
            // 16 bytes each) and the marker.
            let changed = universal
                .iter()
                .zip(&direct)
                .filter(|(a, b)| a != b)
                .count();
            assert!(changed <= 10 * 16 + 1, "{changed} bytes changed");
        }
    }

    #[test]
    fn a_direct_shim_cannot_be_made_twice_or_from_something_else() {
        let table = TABLES[0];
        let direct = make(crate::shim::EMBEDDED, &table).unwrap();
        assert!(make(&direct, &table).unwrap_err().contains("marker"));
        assert!(make(b"not an ELF file", &table).is_err());
    }
}
