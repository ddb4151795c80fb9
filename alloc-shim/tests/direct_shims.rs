//! Direct shims (`allocmux_format::direct`): the library `allocmux run`
//! preloads for stacks off and sampled stacks under glibc and jemalloc, and
//! for the sampled level under every backend, whose exports are one hook
//! table's functions. The rest of the suite runs
//! through them wherever it preloads with `preload` or `run_under`; here,
//! what is theirs alone: the table decides the backend and mode whatever
//! the environment says, and they count as the universal library does.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use allocmux_format::direct::TABLES;
use allocmux_format::profile::StackMode;
use common::*;

/// The direct shim of `backend` with stacks `stacks` (`off`, `sample`).
fn direct(backend: &str, stacks: &str) -> PathBuf {
    let path = shim_for(Command::new("true").env("ALLOCMUX_STACKS", stacks), backend);
    assert_ne!(
        path,
        Path::new(shim()),
        "{backend} {stacks} has a direct shim"
    );
    path
}

/// Runs `counts 200` with `library` preloaded and `env`; its one profile.
fn counts(library: &Path, env: &[(&str, &str)]) -> ProcessProfile {
    let exe = compile_c("counts.c");
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(&exe);
    cmd.arg("200").envs(env.iter().copied());
    scrub(&mut cmd)
        .env("LD_PRELOAD", library)
        .env("ALLOCMUX_OUTPUT", dir.path().join("%p.prof"));
    let out = run(&mut cmd, None);
    assert!(
        out.status.success(),
        "{}: {}",
        library.display(),
        text(&out.stderr)
    );
    assert_eq!(text(&out.stdout), "counts: 200 iterations, checksum 200\n");
    let profiles = read_profiles(dir.path());
    assert_eq!(profiles.len(), 1, "{}", library.display());
    profiles.into_iter().next().unwrap().1
}

#[test]
fn a_direct_shim_serves_its_tables_backend_and_mode_whatever_the_environment_says() {
    let dir = tempfile::tempdir().unwrap();
    for table in TABLES
        .into_iter()
        .filter(|t| t.recorded && !t.sampled_level)
    {
        let stacks = if table.sampled { "sample" } else { "off" };
        // A copy under another name: `run` refuses a direct shim whose
        // table is not what the environment asks for, as a test's mistake.
        let copy = dir.path().join(format!("{}.so", table.name));
        std::fs::copy(direct(table.backend.name(), stacks), &copy).unwrap();
        let other = if table.backend.name() == "system" {
            "jemalloc"
        } else {
            "system"
        };
        let against = if table.sampled { "off" } else { "exact" };
        let p = counts(
            &copy,
            &[
                ("ALLOCMUX_ALLOCATOR", other),
                ("ALLOCMUX_STACKS", against),
                ("ALLOCMUX_SAMPLE_BYTES", "4096"),
            ],
        );
        assert_eq!(p.allocator, table.backend.name(), "{}", table.name);
        let want = if table.sampled {
            // The environment's rate is kept: only its mode is overruled.
            StackMode::Sample { mean_bytes: 4096 }
        } else {
            StackMode::Off
        };
        assert_eq!(p.stacks.mode, want, "{}", table.name);
        if table.sampled {
            assert!(
                !p.stacks.stacks.is_empty(),
                "{}: no stack sampled",
                table.name
            );
        }
    }
}

#[test]
fn direct_and_universal_shims_count_alike() {
    for table in TABLES
        .into_iter()
        .filter(|t| t.recorded && !t.sampled_level)
    {
        let backend = table.backend.name();
        let stacks = if table.sampled { "sample" } else { "off" };
        let env = [("ALLOCMUX_ALLOCATOR", backend), ("ALLOCMUX_STACKS", stacks)];
        let universal = counts(Path::new(shim()), &env);
        let direct = counts(&direct(backend, stacks), &env);
        for p in [&universal, &direct] {
            assert_eq!(p.allocator, backend, "{}", table.name);
        }
        assert_eq!(
            direct.totals.calls, universal.totals.calls,
            "{}: calls per function",
            table.name
        );
        assert_eq!(
            direct.totals.bytes_requested, universal.totals.bytes_requested,
            "{}: bytes requested",
            table.name
        );
        // Sampled blocks are served larger or aligned, at random.
        if !table.sampled {
            assert_eq!(
                direct.totals.bytes_allocated, universal.totals.bytes_allocated,
                "{}: bytes allocated",
                table.name
            );
        }
    }
}

/// The sampled level's direct shims: the table's backend whatever the
/// environment says, and its level: estimates only, from sampled stacks.
#[test]
fn a_sampled_level_direct_shim_records_the_stack_sample_alone() {
    let dir = tempfile::tempdir().unwrap();
    for table in TABLES.into_iter().filter(|t| t.sampled_level) {
        let backend = table.backend.name();
        let library = shim_for(
            Command::new("true").env("ALLOCMUX_RECORD", "sampled"),
            backend,
        );
        assert!(
            library
                .to_string_lossy()
                .contains(&format!("{}-", table.name)),
            "{}: {}",
            table.name,
            library.display()
        );
        // A copy under another name, as above.
        let copy = dir.path().join(format!("{}.so", table.name));
        std::fs::copy(&library, &copy).unwrap();
        let other = if backend == "system" {
            "jemalloc"
        } else {
            "system"
        };
        let p = counts(
            &copy,
            &[
                ("ALLOCMUX_ALLOCATOR", other),
                ("ALLOCMUX_RECORD", "exact"),
                ("ALLOCMUX_SAMPLE_BYTES", "64"),
            ],
        );
        assert_eq!(p.allocator, backend, "{}", table.name);
        assert!(
            matches!(
                p.recording,
                allocmux_format::profile::Recording::Sampled { .. }
            ),
            "{}: {:?}",
            table.name,
            p.recording
        );
        assert_eq!(p.stacks.mode, StackMode::Sample { mean_bytes: 64 });
        assert!(
            !p.stacks.stacks.is_empty(),
            "{}: no stack sampled",
            table.name
        );
        assert!(
            p.totals.calls_of(Func::Malloc) > 0,
            "{}: no estimate",
            table.name
        );
    }
}
