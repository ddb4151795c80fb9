//! `allocmux`: parse, run, and turn errors into one line on stderr.

use clap::{CommandFactory, Parser};

fn main() {
    let cli = match allocmux_cli::cli::Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => usage_error(e),
    };
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
            eprintln!("allocmux: {}", one_line(&format!("{e:#}")));
            let code = match e.downcast_ref::<allocmux_cli::target::TargetError>() {
                Some(allocmux_cli::target::TargetError::NotFound(_)) => 127,
                Some(allocmux_cli::target::TargetError::NotExecutable(_)) => 126,
                None => 1,
            };
            std::process::exit(code);
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
    // clap's message: "error: WHAT", details indented on the next lines,
    // then "Usage: ..." and "For more information, try '--help'.".
    let rendered = e.render().to_string();
    let mut parts = Vec::new();
    for line in rendered.lines() {
        let line = line.trim();
        if line.starts_with("Usage:") || line.starts_with("For more information") {
            break;
        }
        if !line.is_empty() {
            parts.push(line.strip_prefix("error:").unwrap_or(line).trim());
        }
    }
    let sub = std::env::args().nth(1).filter(|a| {
        allocmux_cli::cli::Cli::command()
            .find_subcommand(a)
            .is_some()
    });
    let help = match sub {
        Some(s) => format!("allocmux {s} --help"),
        None => "allocmux --help".to_string(),
    };
    eprintln!("allocmux: {} (see `{help}`)", parts.join(" "));
    std::process::exit(2);
}

/// An error's text on one line: any line break inside a message (a
/// library's multi-line error) becomes a space.
fn one_line(s: &str) -> String {
    s.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}
