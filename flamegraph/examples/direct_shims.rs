//! Writes the direct shims made from a shim library, for the benchmark
//! scripts, which build the shim themselves (sometimes with benchmark-only
//! settings) and preload it by hand:
//!
//! ```text
//! cargo run --release -p allocmux-cli --example direct_shims -- SHIM.so DIR
//! ```
//!
//! writes `DIR/liballocmux_shim-TABLE.so` for every table with a direct
//! shim (`system`, `system_sampled`, `jemalloc`, `jemalloc_sampled`) and
//! prints their paths, one per line.

use std::path::PathBuf;
use std::process::ExitCode;

use allocmux_format::direct::TABLES;

fn main() -> ExitCode {
    let args: Vec<PathBuf> = std::env::args_os().skip(1).map(PathBuf::from).collect();
    let [shim, dir] = args.as_slice() else {
        eprintln!("usage: direct_shims SHIM.so DIR");
        return ExitCode::from(2);
    };
    let universal = match std::fs::read(shim) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("direct_shims: cannot read {}: {e}", shim.display());
            return ExitCode::FAILURE;
        }
    };
    for table in TABLES {
        let path = dir.join(format!("liballocmux_shim-{}.so", table.name));
        let written = allocmux_cli::direct_shim::make(&universal, &table)
            .and_then(|bytes| std::fs::write(&path, bytes).map_err(|e| e.to_string()));
        if let Err(e) = written {
            eprintln!("direct_shims: {}: {e}", path.display());
            return ExitCode::FAILURE;
        }
        println!("{}", path.display());
    }
    ExitCode::SUCCESS
}
