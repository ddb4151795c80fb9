//! The workload binaries' command line: `NAME [SIZE]` for each workload's
//! own binary, `allocmux-workload NAME [SIZE]` for any of them. The
//! checksum goes to stdout as `NAME CHECKSUM` (as `allocmux __workload`
//! prints it); a usage error is one line and the usage on stderr, exit
//! status 2.

use std::process::ExitCode;

use crate::{ALL, Workload, find};

/// What a command line asks for.
#[derive(Debug)]
pub enum Action {
    /// Run the workload at this size.
    Run(&'static Workload, u64),
    /// Print this help text.
    Help(String),
}

impl PartialEq for Action {
    fn eq(&self, other: &Action) -> bool {
        match (self, other) {
            (Action::Run(a, x), Action::Run(b, y)) => a.name == b.name && x == y,
            (Action::Help(a), Action::Help(b)) => a == b,
            _ => false,
        }
    }
}

/// Parses the arguments (without the program name) of `bin`'s own binary,
/// or of `allocmux-workload` if `bin` is `None`. The error is the message
/// to print, usage included.
pub fn parse(bin: Option<&'static Workload>, args: &[String]) -> Result<Action, String> {
    let mut args = args.iter().map(String::as_str);
    if args.clone().any(|a| a == "-h" || a == "--help") {
        return Ok(Action::Help(usage(bin)));
    }
    let w = match bin {
        Some(w) => w,
        None => match args.next() {
            Some(name) => {
                find(name).ok_or_else(|| format!("unknown workload {name:?}\n{}", usage(None)))?
            }
            None => return Err(format!("no workload named\n{}", usage(None))),
        },
    };
    let size = match args.next() {
        None => w.default_size,
        Some(s) => s.replace('_', "").parse::<u64>().map_err(|_| {
            format!(
                "bad SIZE {s:?}: expected a whole number of {}\n{}",
                w.unit,
                usage(bin)
            )
        })?,
    };
    if let Some(extra) = args.next() {
        return Err(format!("unexpected argument {extra:?}\n{}", usage(bin)));
    }
    Ok(Action::Run(w, size))
}

/// The usage text of `bin`'s binary, or of `allocmux-workload`.
pub fn usage(bin: Option<&Workload>) -> String {
    match bin {
        Some(w) => format!(
            "usage: {} [SIZE]\n{}.\nSIZE: {} (default {}). Prints `{} CHECKSUM`.",
            w.name, w.about, w.unit, w.default_size, w.name
        ),
        None => {
            let mut s = String::from(
                "usage: allocmux-workload NAME [SIZE]\nRuns a workload and prints `NAME CHECKSUM`. Workloads (SIZE counts, default):\n",
            );
            for w in ALL {
                s.push_str(&format!(
                    "  {:<22} {} ({}, {})\n",
                    w.name, w.about, w.unit, w.default_size
                ));
            }
            s.pop();
            s
        }
    }
}

/// `main` of `bin`'s own binary (`None`: of `allocmux-workload`).
pub fn main(bin: Option<&str>) -> ExitCode {
    let bin = bin.map(|name| find(name).expect("a binary of a known workload"));
    let args: Vec<String> = std::env::args().skip(1).collect();
    let prog = bin.map_or("allocmux-workload", |w| w.name);
    match parse(bin, &args) {
        Ok(Action::Run(w, size)) => {
            println!("{} {}", w.name, (w.run)(size));
            ExitCode::SUCCESS
        }
        Ok(Action::Help(text)) => {
            println!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{prog}: {e}");
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn sizes_names_and_errors() {
        let ed = find("edit-distance").unwrap();
        assert_eq!(parse(Some(ed), &[]), Ok(Action::Run(ed, 300_000)));
        assert_eq!(
            parse(Some(ed), &args(&["1_000"])),
            Ok(Action::Run(ed, 1_000))
        );
        let lr = find("larson").unwrap();
        assert_eq!(parse(None, &args(&["larson", "7"])), Ok(Action::Run(lr, 7)));
        assert_eq!(
            parse(None, &args(&["larson"])),
            Ok(Action::Run(lr, lr.default_size))
        );

        let e = parse(Some(ed), &args(&["-5"])).unwrap_err();
        assert!(e.starts_with("bad SIZE \"-5\": expected a whole number of word pairs\nusage: edit-distance [SIZE]"), "{e}");
        let e = parse(Some(ed), &args(&["5", "6"])).unwrap_err();
        assert!(e.starts_with("unexpected argument \"6\""), "{e}");
        let e = parse(None, &args(&["nope", "5"])).unwrap_err();
        assert!(
            e.starts_with("unknown workload \"nope\"\nusage: allocmux-workload NAME [SIZE]"),
            "{e}"
        );
        assert!(
            e.contains("  short-threads "),
            "the usage lists the workloads: {e}"
        );
        assert!(
            parse(None, &[])
                .unwrap_err()
                .starts_with("no workload named")
        );
        assert!(
            matches!(parse(None, &args(&["--help"])), Ok(Action::Help(h)) if h.contains("fragmentation"))
        );
        assert!(
            matches!(parse(Some(lr), &args(&["3", "-h"])), Ok(Action::Help(h)) if h.starts_with("usage: larson [SIZE]"))
        );
    }
}
