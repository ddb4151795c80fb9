//! `workload-switchable NAME [SIZE]`: a bundled workload with allocmux's
//! `Switchable` linked in, the allocator chosen by `ALLOCMUX_ALLOCATOR`
//! (`system`, `jemalloc`, `mimalloc`): what its dispatch costs against
//! each allocator linked in alone.

#[global_allocator]
static ALLOC: allocmux::Switchable = allocmux::Switchable::new();

fn main() -> std::process::ExitCode {
    allocmux_workloads::cli::main(None)
}
