//! The forwarders: what `compare`'s timing runs and `run --record off`
//! preload under jemalloc and mimalloc (direct shims whose `malloc` and
//! `free` are the allocator's own functions and whose other exports are
//! the backend's unrecorded hooks), and `ALLOCMUX_RECORD=off`
//! for the shim as built. A process under them has the backend's heap and
//! nothing of the recorder: no profile, even with `ALLOCMUX_OUTPUT` set,
//! no thread, and, under a forwarder, `malloc` bound to the allocator's
//! own `malloc`.

use crate::common;

use std::path::Path;
use std::process::Command;

use common::*;
use object::{Object, ObjectSymbol};

/// What the `forwarded` fixture saw with `library` preloaded and `env`
/// set: its output with the address of the `malloc` it was bound to
/// replaced by the names of `library`'s symbols there, what it said on
/// stderr, and how many files it left where profiles were asked for.
fn forwarded(library: &Path, env: &[(&str, &str)]) -> (String, String, usize) {
    let exe = compile("cc", "forwarded.c", &["-O2", "-ldl"]);
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(&exe);
    cmd.envs(env.iter().copied());
    scrub(&mut cmd)
        .env("LD_PRELOAD", library)
        .env("ALLOCMUX_OUTPUT", dir.path().join("%p.prof"));
    let out = run(&mut cmd, None);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let files = std::fs::read_dir(dir.path()).unwrap().count();
    let stdout = text(&out.stdout)
        .lines()
        .map(|line| match line.strip_prefix("malloc ") {
            Some(at) => format!("malloc {}", names_at(library, at)),
            None => line.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n");
    (stdout, text(&out.stderr).into_owned(), files)
}

/// `OBJECT+0xOFFSET` named by the functions of `library` at that offset
/// (sorted, space-separated), when OBJECT is `library`; else as it is.
fn names_at(library: &Path, at: &str) -> String {
    let (object, offset) = at.rsplit_once("+0x").expect("OBJECT+0xOFFSET");
    if Path::new(object).canonicalize().ok() != library.canonicalize().ok() {
        return at.to_string();
    }
    let offset = u64::from_str_radix(offset, 16).unwrap();
    let data = std::fs::read(library).unwrap();
    let file = object::File::parse(&*data).unwrap();
    let mut names: Vec<String> = file
        .symbols()
        .chain(file.dynamic_symbols())
        .filter(|s| s.address() == offset && s.kind() == object::SymbolKind::Text)
        .filter_map(|s| s.name().ok().map(str::to_string))
        .collect();
    names.sort();
    names.dedup();
    names.join(" ")
}

fn forwarder_records_nothing(backend: &str, own_malloc: &str) {
    let library = forwarder_for(backend).expect("jemalloc and mimalloc have a forwarder");
    // What the environment asks of a recording shim changes nothing.
    let env = [
        ("ALLOCMUX_ALLOCATOR", "system"),
        ("ALLOCMUX_STACKS", "exact"),
        ("ALLOCMUX_HTTP", "127.0.0.1:0"),
    ];
    let (stdout, stderr, files) = forwarded(&library, &env);
    let mut bound = [own_malloc, "malloc"];
    bound.sort();
    assert_eq!(
        stdout,
        format!("threads 1\nmalloc {}\nusable 8", bound.join(" ")),
        "{backend}'s forwarder: one thread, malloc the allocator's own, the backend's blocks"
    );
    assert_eq!(files, 0, "{backend}'s forwarder wrote a profile");
    assert_eq!(stderr, "", "{backend}'s forwarder said something");
}

#[test]
fn the_jemalloc_forwarder_records_nothing() {
    forwarder_records_nothing("jemalloc", "_rjem_malloc");
}

#[test]
fn the_mimalloc_forwarder_records_nothing() {
    forwarder_records_nothing("mimalloc", "mi_malloc");
}

#[test]
fn glibc_has_no_forwarder() {
    assert_eq!(forwarder_for("system"), None);
}

/// The shim as built, with `ALLOCMUX_RECORD=off`: the backend's blocks,
/// nothing written, no thread; an unknown value records, with a warning.
#[test]
fn record_off_forwards_with_the_shim_as_built() {
    let shim = Path::new(shim());
    for backend in ["jemalloc", "mimalloc"] {
        let env = [("ALLOCMUX_ALLOCATOR", backend), ("ALLOCMUX_RECORD", "off")];
        let (stdout, stderr, files) = forwarded(shim, &env);
        // `malloc` is the export that jumps through the table in force.
        assert_eq!(stdout, "threads 1\nmalloc malloc\nusable 8", "{backend}");
        assert_eq!((files, stderr.as_str()), (0, ""), "{backend}");
    }
    let env = [
        ("ALLOCMUX_ALLOCATOR", "mimalloc"),
        ("ALLOCMUX_RECORD", "of"),
    ];
    let (stdout, stderr, files) = forwarded(shim, &env);
    assert!(stdout.contains("usable 8"), "{stdout}");
    assert!(
        stderr.contains(
            "unknown ALLOCMUX_RECORD=\"of\" (expected exact, sampled or off); using the default"
        ),
        "{stderr}"
    );
    assert_eq!(files, 1, "a recorded run writes its profile");
}
