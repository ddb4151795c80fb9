//! The program's marks (`allocmux_format::marks`): each a name the code
//! it stands for puts in the marks section from inline assembly, with a
//! reference to it from that code, so the linker keeps the name exactly
//! when that code is linked in (`--gc-sections` drops a section nothing
//! reaches). A `static` would not do: rustc keeps every static with a
//! `link_section`, used or not. Machines other than x86-64 and AArch64
//! carry no marks (the command line then preloads, as for any program).

/// The instruction that loads the address of label `2` (in another
/// section) into `{tmp}`: the reference that keeps a mark.
#[cfg(target_arch = "x86_64")]
macro_rules! load_label_2 {
    () => {
        "lea {tmp}, [rip + 2b]"
    };
}
#[cfg(target_arch = "aarch64")]
macro_rules! load_label_2 {
    () => {
        "adrp {tmp}, 2b"
    };
}

/// Puts `$name` in the marks section and references it (`$unique`
/// tells the marks' input sections apart).
macro_rules! mark {
    ($name:literal, $unique:literal) => {
        // SAFETY: the assembly adds a string to a data section and loads
        // its address into a scratch register: no memory, stack or flag
        // of the program's is touched.
        #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
        unsafe {
            core::arch::asm!(
                // The section is `allocmux_format::marks::SECTION`, one of
                // its own (`unique`): the linker keeps or drops each input
                // section whole, and another mark of the same object file
                // must not keep this one.
                concat!(".pushsection .allocmux_marks,\"a\",%progbits,unique,", $unique),
                "2:",
                concat!(".asciz \"", $name, "\""),
                ".popsection",
                load_label_2!(),
                tmp = out(reg) _,
                options(nostack, nomem, preserves_flags),
            )
        }
    };
}

/// Marks the program `switchable`: called by `Switchable`'s choice.
#[inline(never)]
pub fn switchable() {
    mark!("switchable", 1);
}

/// Marks the program `counting`: called when a `Counting` first registers.
#[inline(never)]
pub fn counting() {
    mark!("counting", 2);
}
