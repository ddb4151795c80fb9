//! `bounded-string-inline [SIZE]`: the workload of that name; see `allocmux_workloads::ALL`.

fn main() -> std::process::ExitCode {
    allocmux_workloads::cli::main(Some("bounded-string-inline"))
}
