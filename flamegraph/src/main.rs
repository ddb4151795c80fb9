//! `allocmux`: parse, run, and turn errors into an exit status and one line
//! on stderr.

use std::io::Write;

use clap::Parser;

use allocmux_cli::ErrorKind;
use allocmux_cli::args::Cli;

fn main() {
    // Before anything grows this process: see the spawn helper's docs.
    if let Some(code) = allocmux_cli::spawn_helper::serve_if_asked() {
        std::process::exit(code);
    }
    let cli = match Cli::try_parse().and_then(|cli| cli.check().map(|()| cli)) {
        Ok(cli) => cli,
        Err(e) => usage_error(e),
    };
    let result = cli
        .into_command()
        .map_err(allocmux_cli::Error::from)
        .and_then(allocmux_cli::run);
    match result {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            // A closed stdout (`allocmux report x | head`) is not an error.
            if e.kind() != ErrorKind::BrokenPipe {
                allocmux_cli::error::say(&e);
            }
            std::process::exit(e.exit_code());
        }
    }
}

/// A command line clap refused: help and version are printed as clap
/// prints them; a usage error becomes one line on stderr, as every other
/// error is, naming the subcommand's `--help`, and exit status 2.
fn usage_error(e: clap::Error) -> ! {
    use clap::error::ErrorKind;
    if matches!(
        e.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        e.exit();
    }
    let first_arg = std::env::args().nth(1);
    let line = allocmux_cli::args::usage_line(&e, first_arg.as_deref());
    let _ = writeln!(std::io::stderr(), "{line}");
    std::process::exit(2);
}
