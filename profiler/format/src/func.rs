//! [`Func`]: the malloc family, listed once in
//! [`for_each_malloc_function!`](crate::for_each_malloc_function).

/// The malloc family, listed once: each function's C name, its [`Func`]
/// variant (also the name of the shim's body type for it) and its C
/// signature. `for_each_malloc_function!(callback)` expands to
/// `callback! { [] name => Variant (arg: Type, ...) -> Ret; ... }`, and
/// `for_each_malloc_function!(callback, extra tokens)` passes the extra
/// tokens inside the brackets. [`Func`] is generated from it here; the
/// shim generates its exports and hook tables from it. Internal to
/// allocmux's own shim.
#[doc(hidden)]
#[macro_export]
macro_rules! for_each_malloc_function {
    ($callback:ident $(, $($extra:tt)*)?) => {
        $callback! {
            [$($($extra)*)?]
            malloc => Malloc (size: usize) -> *mut ::core::ffi::c_void;
            free => Free (ptr: *mut ::core::ffi::c_void);
            calloc => Calloc (count: usize, size: usize) -> *mut ::core::ffi::c_void;
            realloc => Realloc (ptr: *mut ::core::ffi::c_void, size: usize) -> *mut ::core::ffi::c_void;
            aligned_alloc => AlignedAlloc (alignment: usize, size: usize) -> *mut ::core::ffi::c_void;
            malloc_usable_size => MallocUsableSize (ptr: *mut ::core::ffi::c_void) -> usize;
            memalign => Memalign (alignment: usize, size: usize) -> *mut ::core::ffi::c_void;
            posix_memalign => PosixMemalign (
                out: *mut *mut ::core::ffi::c_void,
                alignment: usize,
                size: usize
            ) -> ::core::ffi::c_int;
            pvalloc => Pvalloc (size: usize) -> *mut ::core::ffi::c_void;
            valloc => Valloc (size: usize) -> *mut ::core::ffi::c_void;
        }
    };
}

/// [`Func`], [`FUNC_COUNT`], [`Func::ALL`] and [`Func::name`] from the table.
macro_rules! define_func {
    ([] $($name:ident => $Variant:ident ($($arg:ident : $ty:ty),*) $(-> $ret:ty)?;)*) => {
        /// An exported allocation function of the malloc family.
        ///
        /// The order is part of the profile format only through [`Func::name`]: the
        /// file names functions, never their index.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[repr(u8)]
        pub enum Func {
            $(
                #[doc = concat!("`", stringify!($name), "(", stringify!($($arg),*), ")`")]
                $Variant,
            )*
        }

        /// Number of [`Func`] variants.
        pub const FUNC_COUNT: usize = [$(stringify!($name)),*].len();

        impl Func {
            /// Every function, in declaration order.
            pub const ALL: [Func; FUNC_COUNT] = [$(Func::$Variant),*];

            /// The C name of the function, as used in profiles and reports.
            pub const fn name(self) -> &'static str {
                match self {
                    $(Func::$Variant => stringify!($name),)*
                }
            }
        }
    };
}

crate::for_each_malloc_function!(define_func);

impl Func {
    /// Looks a function up by its C name.
    pub fn from_name(name: &str) -> Option<Func> {
        Func::ALL.into_iter().find(|f| f.name() == name)
    }

    /// Whether a call of this function hands out a new block.
    pub const fn allocates(self) -> bool {
        !matches!(self, Func::Free | Func::MallocUsableSize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for f in Func::ALL {
            assert_eq!(Func::from_name(f.name()), Some(f));
            assert_eq!(Func::ALL[f as usize], f);
        }
        assert_eq!(Func::from_name("mmap"), None);
    }
}
