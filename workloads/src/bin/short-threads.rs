//! `short-threads [SIZE]`: the workload of that name; see `allocmux_workloads::ALL`.

fn main() -> std::process::ExitCode {
    allocmux_workloads::cli::main(Some("short-threads"))
}
