//! `workload-mimalloc NAME [SIZE]`: a bundled workload with mimalloc linked in.

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    allocmux_workloads::cli::main(None)
}
