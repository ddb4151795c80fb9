//! The real secure-execution (AT_SECURE) path: a set-user-ID program run by
//! an unprivileged user with the shim preloaded. The shim must serve its
//! allocations (forwarding to glibc) and record, write and print nothing.
//!
//! glibc preloads a library into a secure-execution process only if it is
//! named without a slash, sits in a system library directory and has the
//! set-user-ID bit; so the test installs a copy of the shim there (removed
//! again by a guard) and therefore runs only as root (CI runs as root).

use crate::common;

use std::ffi::CString;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::*;

const NOBODY: u32 = 65534;

/// Removes the installed copy of the shim, however the test ends.
struct Installed(PathBuf);

impl Drop for Installed {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Skips (or, on CI, fails) a test that cannot run here: false.
fn cannot_run(why: &str) -> bool {
    if std::env::var_os("CI").is_some() {
        panic!("secure-execution test cannot run on CI: {why}");
    }
    eprintln!("skipping: {why}");
    false
}

fn nosuid(path: &Path) -> bool {
    let c = CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: statvfs is plain data; a zeroed value is valid to overwrite.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a valid out-pointer.
    let rc = unsafe { libc::statvfs(c.as_ptr(), &mut st) };
    rc != 0 || st.f_flag & libc::ST_NOSUID != 0
}

/// Whether `nobody` can reach files in `dir` (every directory up to the
/// root is world-searchable).
fn world_reachable(dir: &Path) -> bool {
    dir.ancestors().all(|d| {
        std::fs::metadata(d).is_ok_and(|m| m.is_dir() && m.permissions().mode() & 0o001 != 0)
    })
}

/// A directory for the set-user-ID program: on a filesystem mounted
/// without nosuid, reachable by `nobody`.
fn setuid_capable_base() -> Option<PathBuf> {
    [
        std::env::temp_dir(),
        PathBuf::from("/var/tmp"),
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")),
    ]
    .into_iter()
    .find(|d| d.is_dir() && !nosuid(d) && world_reachable(d))
}

/// Removes copies left by earlier runs that died before their guard ran
/// (the pid in the name no longer exists).
fn remove_stale_copies(libdir: &Path) {
    let Ok(entries) = std::fs::read_dir(libdir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix("liballocmux-test-")
            .and_then(|r| r.strip_suffix(".so"))
        else {
            continue;
        };
        if pid.bytes().all(|b| b.is_ascii_digit()) && !Path::new("/proc").join(pid).exists() {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// The `key=value` lines secure.c prints.
fn field<'a>(out: &'a str, key: &str) -> Option<&'a str> {
    out.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
}

fn show(out: &Output) -> String {
    format!(
        "status {}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    )
}

#[test]
fn setuid_program_is_served_but_not_recorded() {
    // The universal library, and a direct shim (whose exports are one
    // table's hooks, and which serves its own backend, unrecorded).
    let direct = shim_for(
        Command::new("true").env("ALLOCMUX_STACKS", "off"),
        "jemalloc",
    );
    assert_ne!(direct, Path::new(shim()));
    for library in [Path::new(shim()), &direct] {
        if !served_but_not_recorded(library) {
            return;
        }
    }
}

/// Runs the test with `library` installed as the shim; false if it could
/// not run here (and said why).
fn served_but_not_recorded(library: &Path) -> bool {
    if !is_root() {
        eprintln!(
            "skipping: the secure-execution test needs root (to install a set-user-ID library)"
        );
        return false;
    }
    let Some(setpriv) = require("setpriv", "util-linux") else {
        return false;
    };
    let Some(env) = require("/usr/bin/env", "coreutils") else {
        return false;
    };
    if !cfg!(target_arch = "x86_64") {
        eprintln!("skipping: the secure-execution test knows only x86-64's library directory");
        return false;
    }
    let libdir = Path::new("/usr/lib/x86_64-linux-gnu");
    if !libdir.is_dir() {
        return cannot_run("there is no /usr/lib/x86_64-linux-gnu to install the test library in");
    }
    let Some(base) = setuid_capable_base() else {
        return cannot_run(
            "no temporary directory on a filesystem that allows set-user-ID programs",
        );
    };
    remove_stale_copies(libdir);

    // The shim, as a set-user-ID library in the system directory.
    let lib_name = format!("liballocmux-test-{}.so", std::process::id());
    let installed = Installed(libdir.join(&lib_name));
    std::fs::copy(library, &installed.0)
        .unwrap_or_else(|e| panic!("installing the shim as {}: {e}", installed.0.display()));
    std::fs::set_permissions(&installed.0, std::fs::Permissions::from_mode(0o4755)).unwrap();

    // The program, set-user-ID root, and a copy without the bit.
    let exe = compile("cc", "secure.c", &["-O2", "-fPIE", "-pie", "-ldl"]);
    let dir = tempfile::Builder::new()
        .prefix("allocmux-secure-")
        .tempdir_in(&base)
        .unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let setuid_exe = dir.path().join("secure");
    let plain_exe = dir.path().join("plain");
    for (path, mode) in [(&setuid_exe, 0o4755), (&plain_exe, 0o755)] {
        std::fs::copy(&exe, path).unwrap();
        std::os::unix::fs::chown(path, Some(0), Some(0))
            .unwrap_or_else(|e| panic!("chown root:root {}: {e}", path.display()));
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    // World-writable, so nothing but the shim's own decision keeps a
    // profile out of it.
    let out_dir = dir.path().join("out");
    std::fs::create_dir(&out_dir).unwrap();
    std::fs::set_permissions(&out_dir, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let template = out_dir.join("%p.prof");

    // As nobody; only the final program gets the preload (through env), so
    // setpriv itself is not profiled.
    let as_nobody = |vars: &[String]| -> Output {
        let mut cmd = Command::new(&setpriv);
        cmd.arg(format!("--reuid={NOBODY}"))
            .arg(format!("--regid={NOBODY}"))
            .arg("--clear-groups")
            .arg(&env)
            .args(vars)
            .arg(&setuid_exe);
        run(scrub(&mut cmd), None)
    };
    let preload_var = format!("LD_PRELOAD={lib_name}");
    let out = as_nobody(&[
        preload_var.clone(),
        format!("ALLOCMUX_OUTPUT={}", template.display()),
        "ALLOCMUX_ALLOCATOR=jemalloc".into(),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if field(&stdout, "secure") == Some("0") {
        return cannot_run(&format!(
            "set-user-ID does not take effect here (nosuid or no_new_privs?): {}",
            show(&out)
        ));
    }
    assert!(
        out.status.success(),
        "the set-user-ID program failed under the shim: {}",
        show(&out)
    );
    assert_eq!(field(&stdout, "secure"), Some("1"), "{}", show(&out));
    assert_eq!(
        field(&stdout, "shim"),
        Some("1"),
        "glibc did not preload the shim into the secure process (malloc from {:?}), so this test \
         proves nothing: {}",
        field(&stdout, "malloc_lib"),
        show(&out)
    );
    let written: Vec<_> = std::fs::read_dir(&out_dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(
        written.is_empty(),
        "the shim wrote {written:?} in secure-execution mode (ALLOCMUX_OUTPUT must be ignored)"
    );
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("allocmux"),
        "the shim printed in secure-execution mode: {}",
        show(&out)
    );

    // Without ALLOCMUX_OUTPUT and with a bad setting: still not a word.
    let out = as_nobody(&[preload_var, "ALLOCMUX_ALLOCATOR=bogus".into()]);
    assert!(out.status.success(), "{}", show(&out));
    assert_eq!(
        field(&String::from_utf8_lossy(&out.stdout), "shim"),
        Some("1"),
        "{}",
        show(&out)
    );
    assert!(
        out.stderr.is_empty(),
        "in secure-execution mode the shim must print no summary and no warning: {}",
        show(&out)
    );

    // The control: the same program without the set-user-ID bit, as root,
    // with the same preload, is recorded.
    let mut cmd = Command::new(&plain_exe);
    scrub(&mut cmd)
        .env("LD_PRELOAD", &lib_name)
        .env("ALLOCMUX_OUTPUT", &template);
    let out = run(&mut cmd, None);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{}", show(&out));
    assert_eq!(
        (field(&stdout, "secure"), field(&stdout, "shim")),
        (Some("0"), Some("1")),
        "the control run: {}",
        show(&out)
    );
    let profiles = read_profiles(&out_dir);
    assert_eq!(
        profiles.len(),
        1,
        "the control run (no set-user-ID) should write one profile: {:?}",
        profiles
            .iter()
            .map(|(f, p)| format!("{f}: {}", summary(p)))
            .collect::<Vec<_>>()
    );
    let p = &profiles[0].1;
    assert!(
        p.state == State::Exited && p.totals.calls_of(Func::Malloc) >= 100,
        "the control run's profile: {}",
        summary(p)
    );
    drop(installed);
    assert!(!libdir.join(&lib_name).exists());
    true
}
