//! `allocmux`: parse, run, and turn errors into one line on stderr.

use clap::Parser;

fn main() {
    let cli = allocmux_cli::cli::Cli::parse();
    match allocmux_cli::cli::run(cli) {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            // A closed stdout (`allocmux report x | head`) is not an error.
            if e.chain().any(|c| {
                c.downcast_ref::<std::io::Error>()
                    .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            }) {
                std::process::exit(0);
            }
            eprintln!("allocmux: {e:#}");
            let code = match e.downcast_ref::<allocmux_cli::target::TargetError>() {
                Some(allocmux_cli::target::TargetError::NotFound(_)) => 127,
                Some(allocmux_cli::target::TargetError::NotExecutable(_)) => 126,
                None => 1,
            };
            std::process::exit(code);
        }
    }
}
