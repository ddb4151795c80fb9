//! `workload-glibc NAME [SIZE]`: a bundled workload with glibc linked in.

// glibc: Rust's default `System` allocator.

fn main() -> std::process::ExitCode {
    allocmux_workloads::cli::main(None)
}
