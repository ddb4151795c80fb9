//! `workload-jemalloc NAME [SIZE]`: a bundled workload with jemalloc linked in.

#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> std::process::ExitCode {
    allocmux_workloads::cli::main(None)
}
