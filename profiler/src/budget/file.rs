//! The baseline file ([`BUDGETS_FILE`](super::BUDGETS_FILE)): TOML, one
//! table per named budget with its four figures, read and written with the
//! `toml` crate (serde). Any TOML that says the same reads the same
//! (comments, quoted names, `9_120`); the file is written sorted by name,
//! under a comment that says what it is.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use allocmux_recorder::process;

use super::Figures;

/// The file's entries, by name.
pub(super) type Entries = BTreeMap<String, Figures>;

/// Serialises blessing within the process (threads of one test binary);
/// the directory lock serialises processes.
static BLESSING: Mutex<()> = Mutex::new(());

/// The file's entries; none if it does not exist.
pub(super) fn read_file(path: &Path) -> io::Result<Entries> {
    match fs::read_to_string(path) {
        Ok(text) => parse(&text).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Entries::new()),
        Err(e) => Err(e),
    }
}

/// Records `got` as the entry `name`, keeping every other entry: under a
/// lock on the file's directory (other processes) and a mutex (other
/// threads), read, change, and replace the file whole. True if it changed.
pub(super) fn bless(path: &Path, name: &str, got: Figures) -> io::Result<bool> {
    let _threads = BLESSING.lock().unwrap_or_else(|e| e.into_inner());
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let _processes = process::DirLock::exclusive(&dir)?;
    let mut entries = read_file(path)?;
    if entries.insert(name.to_owned(), got) == Some(got) {
        return Ok(false);
    }
    let text = render(&entries).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".tmp{}", std::process::id()));
    let tmp = PathBuf::from(tmp);
    fs::write(&tmp, text)?;
    fs::rename(&tmp, path).inspect_err(|_| {
        let _ = fs::remove_file(&tmp);
    })?;
    Ok(true)
}

const HEADER: &str = "\
# Allocation budgets: what each named allocmux::Budget::baseline allocated
# when last recorded. A test fails when a figure goes up;
# `ALLOCMUX_BLESS=1 cargo test` records the figures of now.
";

/// The file's text: the header, then one table per entry.
fn render(entries: &Entries) -> Result<String, toml::ser::Error> {
    Ok(format!("{HEADER}\n{}", toml::to_string(entries)?))
}

/// Reads the file's text; the error names the line and what is wrong.
fn parse(text: &str) -> Result<Entries, toml::de::Error> {
    toml::from_str(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn figures(a: u64, b: u64, p: u64, l: u64) -> Figures {
        Figures {
            allocs: a,
            bytes: b,
            peak_bytes: p,
            leaked_bytes: l,
        }
    }

    #[test]
    fn the_file_reads_back_what_was_written() {
        let entries = Entries::from([
            ("parse".to_owned(), figures(3, 120, 96, 0)),
            ("with \"quotes\" and \\".to_owned(), figures(0, 0, 0, 0)),
            ("c d".to_owned(), figures(1, 2, 3, 4)),
        ]);
        let text = render(&entries).unwrap();
        assert!(text.starts_with(HEADER), "{text}");
        assert!(
            text.contains(
                "\n[parse]\nallocs = 3\nbytes = 120\npeak_bytes = 96\nleaked_bytes = 0\n"
            ),
            "{text}"
        );
        assert!(text.contains("\n[\"c d\"]\nallocs = 1\n"), "{text}");
        assert_eq!(parse(&text).unwrap(), entries);
    }

    /// The file as the documentation shows it, and as the hand-written
    /// reader before the `toml` crate took it (comments, quoted names,
    /// digits grouped with `_`).
    #[test]
    fn the_documented_form_reads() {
        let text = "# budgets\n\n[render]\nallocs = 42\nbytes = 9_120\n\
                    peak_bytes = 4096\nleaked_bytes = 0\n\n\
                    [\"c d\"]   # spaced\nallocs = 1\nbytes = 2\npeak_bytes = 3\nleaked_bytes = 4\n";
        assert_eq!(
            parse(text).unwrap(),
            Entries::from([
                ("render".to_owned(), figures(42, 9120, 4096, 0)),
                ("c d".to_owned(), figures(1, 2, 3, 4)),
            ])
        );
    }

    #[test]
    fn a_broken_file_is_an_error_naming_the_line() {
        let e = parse("[a]\nallocs = 1\nbytes = x\n").unwrap_err();
        assert!(e.to_string().contains("line 3"), "{e}");
        let e = parse("[a]\nallocs = 1\n").unwrap_err().to_string();
        assert!(e.contains("missing field `bytes`"), "{e}");
        let e = parse("[a]\nallocs = 1\nbytes = 1\npeak_bytes = 1\nleaked_bytes = 1\nfrees = 1\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown field `frees`"), "{e}");
        assert!(parse("allocs = 1\n").is_err());
        assert!(parse("[a]\nallocs = -1\n").is_err());
        let e = parse("[a]\n[a]\n").unwrap_err().to_string();
        assert!(e.contains("line 2"), "{e}");
    }
}
