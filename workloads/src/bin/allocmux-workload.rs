//! `allocmux-workload NAME [SIZE]`: any workload by name.

fn main() -> std::process::ExitCode {
    allocmux_workloads::cli::main(None)
}
