//! The forwarders: what `compare`'s timing runs and `run --record off`
//! preload under jemalloc and mimalloc (direct shims whose exports are
//! the backend's unrecorded hooks), and `ALLOCMUX_RECORD=off` for the
//! shim as built. A process under them has the backend's heap and nothing
//! of the recorder: no profile, even with `ALLOCMUX_OUTPUT` set, no
//! thread, and `malloc` bound to the forwarding hook itself.

use crate::common;

use std::path::Path;
use std::process::Command;

use common::*;

/// Runs the `forwarded` fixture with `library` preloaded, `env` set and
/// profiles asked for; its output, and the files left in the profile
/// directory.
fn forwarded(library: &Path, table: &str, env: &[(&str, &str)]) -> (String, String, usize) {
    let exe = compile("cc", "forwarded.c", &["-O2", "-ldl"]);
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(&exe);
    cmd.arg(table).envs(env.iter().copied());
    scrub(&mut cmd)
        .env("LD_PRELOAD", library)
        .env("ALLOCMUX_OUTPUT", dir.path().join("%p.prof"));
    let out = run(&mut cmd, None);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let files = std::fs::read_dir(dir.path()).unwrap().count();
    (
        text(&out.stdout).into_owned(),
        text(&out.stderr).into_owned(),
        files,
    )
}

fn forwarder_records_nothing(backend: &str) {
    let library = forwarder_for(backend).expect("jemalloc and mimalloc have a forwarder");
    let table = format!("{backend}_forward");
    // What the environment asks of a recording shim changes nothing.
    let env = [
        ("ALLOCMUX_ALLOCATOR", "system"),
        ("ALLOCMUX_STACKS", "exact"),
        ("ALLOCMUX_HTTP", "127.0.0.1:0"),
    ];
    let (stdout, stderr, files) = forwarded(&library, &table, &env);
    assert_eq!(
        stdout, "threads 1\nhook yes\nusable 8\n",
        "{backend}'s forwarder: one thread, malloc its hook, the backend's blocks"
    );
    assert_eq!(files, 0, "{backend}'s forwarder wrote a profile");
    assert_eq!(stderr, "", "{backend}'s forwarder said something");
}

#[test]
fn the_jemalloc_forwarder_records_nothing() {
    forwarder_records_nothing("jemalloc");
}

#[test]
fn the_mimalloc_forwarder_records_nothing() {
    forwarder_records_nothing("mimalloc");
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
        let (stdout, stderr, files) = forwarded(shim, "none", &env);
        assert_eq!(stdout, "threads 1\nhook no\nusable 8\n", "{backend}");
        assert_eq!((files, stderr.as_str()), (0, ""), "{backend}");
    }
    let env = [
        ("ALLOCMUX_ALLOCATOR", "mimalloc"),
        ("ALLOCMUX_RECORD", "of"),
    ];
    let (stdout, stderr, files) = forwarded(shim, "none", &env);
    assert!(stdout.contains("usable 8"), "{stdout}");
    assert!(
        stderr.contains(
            "unknown ALLOCMUX_RECORD=\"of\" (expected exact, sampled or off); using the default"
        ),
        "{stderr}"
    );
    assert_eq!(files, 1, "a recorded run writes its profile");
}
