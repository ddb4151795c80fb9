//! `allocmux __workload` (hidden): runs one bundled workload, the program
//! `demo` profiles, so that the demo needs nothing but this binary.

use anyhow::Result;

/// Runs workload `name` at `size` (else its default) and prints its name
/// and result.
pub fn run(name: &str, size: Option<u64>) -> Result<i32> {
    let Some(w) = allocmux_workloads::find(name) else {
        let names: Vec<&str> = allocmux_workloads::ALL.iter().map(|w| w.name).collect();
        return Err(crate::error::usage(format_args!(
            "unknown workload {name:?} (known: {})",
            names.join(", ")
        )));
    };
    println!("{} {}", w.name, (w.run)(size.unwrap_or(w.default_size)));
    Ok(0)
}
