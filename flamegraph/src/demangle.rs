//! Function names as people read them: Rust's and C++'s mangled symbols
//! demangled the same way for every frame, inlined ones too.
//!
//! blazesym demangles the names it reports only with the compilation
//! unit's language, and its C++ demangler (cpp_demangle) refuses some of
//! what GCC emits for templates constrained with `enable_if` (a function
//! inlined from `<memory>`: `std::make_shared` stayed `_ZSt11make_shared…`).
//! So the symbolizer asks blazesym for the names as they are and demangles
//! here: Rust's first (its manglings are unambiguous), then C++'s without
//! the return type (`std::vector<int>::_M_realloc_insert<int const&>(…)`,
//! not `void std::vector…`: the name, then the parameters, as in pprof and
//! heaptrack); and for a C++ symbol cpp_demangle cannot read whole, its
//! name and template arguments alone.

use cpp_demangle::{DemangleOptions, Symbol};

/// `name` demangled, or as it is when it is not a mangled name.
pub fn demangle(name: &str) -> String {
    if let Ok(d) = rustc_demangle::try_demangle(name) {
        // `{:#}`: without the hash suffix.
        return format!("{d:#}");
    }
    if !name.starts_with("_Z") {
        return name.to_string();
    }
    let options = DemangleOptions::new()
        .no_return_type()
        .hide_expression_literal_types();
    Symbol::new(name)
        .ok()
        .and_then(|s| s.demangle_with_options(&options).ok())
        .or_else(|| name_only(name))
        .unwrap_or_else(|| name.to_string())
}

/// The function's name and template arguments, without its signature
/// (which is what cpp_demangle could not read). The encoding is
/// `_Z<name><signature>`, and a name (nested `N…E`, or with template
/// arguments `I…E`) ends in `E`: so each prefix of the symbol that ends
/// in `E` is tried, longest first, as a function of no parameters (`v`,
/// or `vv` for a template's return type and parameters), and the first
/// that reads is shown without return type or parameters. A longer prefix
/// that reads takes in part of the signature at most, which is not shown.
fn name_only(mangled: &str) -> Option<String> {
    let rest = mangled.strip_prefix("_Z")?;
    let options = DemangleOptions::new()
        .no_return_type()
        .no_params()
        .hide_expression_literal_types();
    rest.char_indices()
        .filter(|&(_, c)| c == 'E')
        .map(|(i, _)| &rest[..=i])
        .rev()
        .find_map(|prefix| {
            ["vv", "v"].iter().find_map(|signature| {
                let stand_in = format!("_Z{prefix}{signature}");
                Symbol::new(stand_in.as_str())
                    .ok()?
                    .demangle_with_options(&options)
                    .ok()
            })
        })
}

#[cfg(test)]
mod tests {
    use super::demangle;

    #[test]
    fn rust_and_cpp_names_are_demangled_without_return_types() {
        assert_eq!(
            demangle("_ZN4core3ptr13drop_in_place17h0123456789abcdefE"),
            "core::ptr::drop_in_place"
        );
        assert_eq!(
            demangle(
                "_ZNSt6vectorIiSaIiEE17_M_realloc_insertIJRKiEEEvN9__gnu_cxx17__normal_iteratorIPiS1_EEDpOT_"
            ),
            "std::vector<int, std::allocator<int> >::_M_realloc_insert<int const&>\
             (__gnu_cxx::__normal_iterator<int*, std::vector<int, std::allocator<int> > >, int const&)"
        );
        assert_eq!(demangle("_Znwm"), "operator new(unsigned long)");
        assert_eq!(demangle("_ZN3foo3barEv"), "foo::bar()");
        // Not mangled: as it is.
        assert_eq!(demangle("main"), "main");
        assert_eq!(demangle("_Z!bad"), "_Z!bad");
    }

    /// GCC's `std::make_shared<int>(int&)`, whose `enable_if` return type
    /// cpp_demangle cannot read: its name and template arguments.
    #[test]
    fn a_signature_the_demangler_cannot_read_leaves_the_name() {
        assert_eq!(
            demangle(
                "_ZSt11make_sharedIiJRiEESt10shared_ptrINSt9enable_ifIXntsrSt8is_arrayIT_E5valueES4_E4typeEEDpOT0_"
            ),
            "std::make_shared<int, int&>"
        );
    }
}
