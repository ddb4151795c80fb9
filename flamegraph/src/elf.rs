//! The few facts about an ELF file that decide whether the loader will
//! preload a library into a program, read from its headers: word size and
//! machine (they must match), what kind of file it is (ld.so preloads
//! shared libraries only, and refuses position-independent executables),
//! whether it names an interpreter (a program without one is statically
//! linked, and no loader runs for it), and whether it defines `malloc`.

use std::fmt;

use allocmux_format::marks;
use object::elf;
use object::read::elf::{Dyn as _, FileHeader, ProgramHeader as _, SectionHeader as _, Sym as _};
use object::{Endianness, FileKind};

/// Word size and machine: a library is preloaded only into a program
/// that has the same.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Arch {
    /// 32 or 64.
    pub bits: u8,
    /// `e_machine`.
    pub machine: u16,
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self.machine {
            elf::EM_X86_64 => "x86-64",
            elf::EM_386 => "i386",
            elf::EM_AARCH64 => "AArch64",
            elf::EM_ARM => "ARM",
            elf::EM_RISCV => "RISC-V",
            elf::EM_PPC64 => "PowerPC64",
            elf::EM_PPC => "PowerPC",
            elf::EM_S390 => "s390",
            elf::EM_MIPS => "MIPS",
            elf::EM_LOONGARCH => "LoongArch",
            other => return write!(f, "{}-bit machine {other}", self.bits),
        };
        write!(f, "{}-bit {name}", self.bits)
    }
}

/// What the loader would make of the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A shared library (`ET_DYN` without `DF_1_PIE`).
    SharedLibrary,
    /// A program: `ET_EXEC`, or `ET_DYN` marked `DF_1_PIE`.
    Executable,
    /// An object file, a core dump or something else.
    Other,
}

/// The facts, for one file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Elf {
    /// Word size and machine.
    pub arch: Arch,
    /// Library, program or other.
    pub kind: Kind,
    /// Names an interpreter (`PT_INTERP`): dynamically linked.
    pub interpreter: bool,
    /// Exports a definition of `malloc` in its dynamic symbol table.
    pub defines_malloc: bool,
    /// Which of [`NEXT_FUNCTIONS`] it exports definitions of: bit `i`
    /// for `NEXT_FUNCTIONS[i]`.
    pub next_functions: u8,
    /// What the `allocmux` crate inside it does, from its marks.
    pub in_code: InCode,
}

/// What a Rust program built with the `allocmux` crate does with its
/// allocations, from the marks it carries (`allocmux_format::marks`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InCode {
    /// Its allocator is `allocmux::Switchable`: the environment picks it,
    /// and a preloaded allocator would see none of its allocations.
    pub switchable: bool,
    /// Its global allocator is `allocmux::Counting`: it writes its own
    /// profile when asked as the shim is.
    pub counting: bool,
}

impl InCode {
    /// Why a run of `program`, which carries these marks, cannot be
    /// recorded, if it cannot: it switches its allocator in code (a
    /// preloaded shim would see none of its allocations under jemalloc or
    /// mimalloc) and nothing in it counts.
    pub fn unrecordable(&self, program: &std::path::Path) -> Option<String> {
        (self.switchable && !self.counting).then(|| {
            format!(
                "{} switches its allocator in code (allocmux::Switchable) and counts nothing",
                program.display()
            )
        })
    }
}

/// The functions an allocator library must define to serve a program
/// behind the shim (its `next` backend): the malloc family the shim
/// forwards to, and `malloc_usable_size`, which tells the sizes of the
/// blocks it takes back.
pub const NEXT_FUNCTIONS: [&str; 6] = [
    "malloc",
    "free",
    "calloc",
    "realloc",
    "memalign",
    "malloc_usable_size",
];

impl Elf {
    /// The [`NEXT_FUNCTIONS`] it does not define.
    pub fn lacks_for_next(&self) -> Vec<&'static str> {
        NEXT_FUNCTIONS
            .iter()
            .enumerate()
            .filter(|(i, _)| self.next_functions & (1 << i) == 0)
            .map(|(_, name)| *name)
            .collect()
    }
}

/// Reads the facts from a whole file: `None` if it is not ELF,
/// an error (what is wrong, in object's words) if it is ELF but its
/// headers are damaged.
pub fn read(data: &[u8]) -> Option<Result<Elf, String>> {
    aligned(data, read_aligned)
}

/// `f` on `data`, or on an aligned copy of it: object reads the headers in
/// place, as the structs they are, so they must be aligned as those are (8
/// bytes at most). A file read into a Vec is in practice; bytes from
/// include_bytes! need not be.
pub fn aligned<R>(data: &[u8], f: impl FnOnce(&[u8]) -> R) -> R {
    if data.as_ptr().align_offset(8) == 0 {
        return f(data);
    }
    let mut words = vec![0u64; data.len().div_ceil(8)];
    object::pod::bytes_of_slice_mut(&mut words)[..data.len()].copy_from_slice(data);
    f(&object::pod::bytes_of_slice(&words)[..data.len()])
}

fn read_aligned(data: &[u8]) -> Option<Result<Elf, String>> {
    let facts = match FileKind::parse(data) {
        Ok(FileKind::Elf32) => facts::<elf::FileHeader32<Endianness>>(data),
        Ok(FileKind::Elf64) => facts::<elf::FileHeader64<Endianness>>(data),
        _ if data.starts_with(b"\x7fELF") => return Some(Err("unknown ELF class".into())),
        _ => return None,
    };
    Some(facts.map_err(|e| e.to_string()))
}

fn facts<H: FileHeader<Endian = Endianness>>(data: &[u8]) -> Result<Elf, object::Error> {
    let header = H::parse(data)?;
    let endian = header.endian()?;
    let arch = Arch {
        bits: if header.is_class_64() { 64 } else { 32 },
        machine: header.e_machine(endian),
    };
    let phdrs = header.program_headers(endian, data)?;
    let interpreter = phdrs.iter().any(|p| p.p_type(endian) == elf::PT_INTERP);
    let mut pie = false;
    for p in phdrs {
        if let Some(dynamic) = p.dynamic(endian, data)? {
            pie |= dynamic.iter().any(|d| {
                d.tag32(endian) == Some(elf::DT_FLAGS_1)
                    && d.val32(endian).is_some_and(|v| v & elf::DF_1_PIE != 0)
            });
        }
    }
    // glibc's rule (since 2.30): ET_DYN is a library unless flagged PIE.
    let kind = match header.e_type(endian) {
        elf::ET_DYN if !pie => Kind::SharedLibrary,
        elf::ET_DYN | elf::ET_EXEC => Kind::Executable,
        _ => Kind::Other,
    };
    let sections = header.sections(endian, data)?;
    let dynsym = sections.symbols(endian, data, elf::SHT_DYNSYM)?;
    let strings = dynsym.strings();
    let mut next_functions = 0u8;
    for s in dynsym.iter().filter(|s| {
        !s.is_undefined(endian) && matches!(s.st_type(), elf::STT_FUNC | elf::STT_GNU_IFUNC)
    }) {
        if let Some(i) = NEXT_FUNCTIONS
            .iter()
            .position(|f| s.name(endian, strings) == Ok(f.as_bytes()))
        {
            next_functions |= 1 << i;
        }
    }
    let mut in_code = InCode::default();
    if let Some((_, section)) = sections.section_by_name(endian, marks::SECTION.as_bytes()) {
        for mark in marks::read(section.data(endian, data)?) {
            in_code.switchable |= mark == marks::SWITCHABLE.as_bytes();
            in_code.counting |= mark == marks::COUNTING.as_bytes();
        }
    }
    Ok(Elf {
        arch,
        kind,
        interpreter,
        defines_malloc: next_functions & 1 != 0,
        next_functions,
        in_code,
    })
}

/// A minimal ELF file with only a header and, if `interp` is given, a
/// `PT_INTERP` program header: enough for [`read`], not for the loader.
/// For tests of foreign and damaged files (there is no 32-bit toolchain
/// to build a real one with on most machines).
pub fn minimal(bits: u8, machine: u16, e_type: u16, interp: Option<&str>) -> Vec<u8> {
    let (ehsize, phentsize) = if bits == 64 { (64u16, 56u16) } else { (52, 32) };
    let word = |v: u64, out: &mut Vec<u8>| {
        if bits == 64 {
            out.extend_from_slice(&v.to_le_bytes());
        } else {
            out.extend_from_slice(&(v as u32).to_le_bytes());
        }
    };
    let class = if bits == 64 {
        elf::ELFCLASS64
    } else {
        elf::ELFCLASS32
    };
    let mut out = vec![0x7f, b'E', b'L', b'F', class, elf::ELFDATA2LSB, 1];
    out.resize(16, 0);
    out.extend_from_slice(&e_type.to_le_bytes());
    out.extend_from_slice(&machine.to_le_bytes());
    out.extend_from_slice(&1u32.to_le_bytes()); // e_version
    word(0, &mut out); // e_entry
    word(if interp.is_some() { ehsize as u64 } else { 0 }, &mut out); // e_phoff
    word(0, &mut out); // e_shoff
    out.extend_from_slice(&0u32.to_le_bytes()); // e_flags
    out.extend_from_slice(&ehsize.to_le_bytes());
    out.extend_from_slice(&phentsize.to_le_bytes());
    out.extend_from_slice(&u16::from(interp.is_some()).to_le_bytes()); // e_phnum
    out.extend_from_slice(&(if bits == 64 { 64u16 } else { 40 }).to_le_bytes()); // e_shentsize
    out.extend_from_slice(&[0; 4]); // e_shnum, e_shstrndx
    if let Some(interp) = interp {
        let offset = (ehsize + phentsize) as u64;
        let size = interp.len() as u64 + 1;
        out.extend_from_slice(&elf::PT_INTERP.to_le_bytes());
        if bits == 64 {
            out.extend_from_slice(&elf::PF_R.to_le_bytes());
        }
        for v in [offset, 0, 0, size, size] {
            word(v, &mut out); // offset, vaddr, paddr, filesz, memsz
        }
        if bits == 32 {
            out.extend_from_slice(&elf::PF_R.to_le_bytes());
        }
        word(1, &mut out); // align
        out.extend_from_slice(interp.as_bytes());
        out.push(0);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const X86_64: Arch = Arch {
        bits: 64,
        machine: elf::EM_X86_64,
    };

    #[test]
    fn reads_a_program_and_the_shim() {
        let sh = read(&std::fs::read("/bin/sh").unwrap()).unwrap().unwrap();
        assert_eq!(sh.kind, Kind::Executable, "Debian builds sh as a PIE");
        assert!(sh.interpreter);
        assert!(!sh.defines_malloc);
        assert_eq!(sh.in_code, InCode::default());
        let shim = read(crate::shim::EMBEDDED).unwrap().unwrap();
        assert_eq!(shim.kind, Kind::SharedLibrary);
        assert!(shim.defines_malloc);
        // include_bytes! data has no alignment; object needs the headers
        // aligned, so an unlucky link once made this read fail.
        let mut shifted = vec![0u8; crate::shim::EMBEDDED.len() + 1];
        shifted[1..].copy_from_slice(crate::shim::EMBEDDED);
        assert_eq!(read(&shifted[1..]).unwrap().unwrap(), shim);
        if cfg!(target_arch = "x86_64") {
            assert_eq!(shim.arch, X86_64);
            assert_eq!(sh.arch, X86_64);
        }
    }

    /// Only a program that switches in code without counting cannot be
    /// recorded; the reason names it.
    #[test]
    fn a_switch_without_counting_is_unrecordable() {
        let app = std::path::Path::new("./app");
        let marks = |switchable, counting| InCode {
            switchable,
            counting,
        };
        let why = marks(true, false).unrecordable(app).unwrap();
        assert!(
            why.starts_with("./app switches its allocator in code"),
            "{why}"
        );
        for (s, c) in [(true, true), (false, true), (false, false)] {
            assert_eq!(marks(s, c).unrecordable(app), None, "{s} {c}");
        }
    }

    #[test]
    fn reads_minimal_foreign_files() {
        let exe = minimal(32, elf::EM_386, elf::ET_EXEC, Some("/lib/ld-linux.so.2"));
        let e = read(&exe).unwrap().unwrap();
        assert_eq!(e.arch.to_string(), "32-bit i386");
        assert_eq!(e.kind, Kind::Executable);
        assert!(e.interpreter);
        let lib = minimal(64, elf::EM_AARCH64, elf::ET_DYN, None);
        let l = read(&lib).unwrap().unwrap();
        assert_eq!(l.arch.to_string(), "64-bit AArch64");
        assert_eq!(l.kind, Kind::SharedLibrary);
        assert!(!l.interpreter && !l.defines_malloc);
        assert!(read(b"#!/bin/sh\n").is_none());
        assert!(read(b"\x7fELF\x02\x01").unwrap().is_err(), "cut short");
    }
}
