//! The recorder's own memory fails soft: programs that run the process out
//! of memory, and get NULL from their own `malloc` and go on, finish under
//! the shim as they do without it, under every backend and stack mode.
//! The profile is written, with counts that add up, and says when
//! recording was cut short (`stacks_degraded`).
//!
//! The fixture, `recorder_memory.c`, runs out two ways: threads under an
//! address-space limit (`RLIMIT_AS`), where the recorder's tables and the
//! program's blocks compete for the same few megabytes, and a process at
//! the kernel's limit on memory mappings (`vm.max_map_count`), where no
//! allocator can map anything new and the profile is written at exit
//! with the limit still reached. Before the recorder failed soft, both
//! ended in `memory allocation of N bytes failed` and SIGABRT (with stacks
//! recorded), after the program's own success line.

use crate::common;

use std::path::PathBuf;
use std::process::Command;

use allocmux_format::profile::StackMode;
use common::*;

fn fixture() -> PathBuf {
    compile_c("recorder_memory.c")
}

const STACK_MODES: [&str; 3] = ["off", "sample", "exact"];

/// What the fixture said it did: allocation calls and NULLs.
struct Said {
    allocations: u64,
    nulls: u64,
}

/// Runs the fixture with `args` under `backend` and stack mode `stacks`,
/// plus `env`; checks that it finished as it does without the shim, and
/// that its profile is whole and adds up. Returns the profile and what
/// the fixture said.
fn run_case(
    backend: &str,
    stacks: &str,
    args: &[&str],
    env: &[(&str, &str)],
) -> (ProcessProfile, Said) {
    let what = format!("recorder_memory {args:?} under {backend} with stacks {stacks}");
    let mut env = env.to_vec();
    env.push(("ALLOCMUX_STACKS", stacks));
    let (out, files) = run_under_with(backend, Command::new(fixture()).args(args), &env, None);
    let line = text(&out.stdout);
    assert!(
        out.status.success()
            && line.starts_with(&format!("recorder_memory {}: ", args[0]))
            && line.ends_with(", ok\n"),
        "{what}: {}\nstdout: {line}\nstderr: {}",
        out.status,
        text(&out.stderr)
    );
    assert!(
        !text(&out.stderr).contains("memory allocation of"),
        "{what}: {}",
        text(&out.stderr)
    );
    // "... N allocations, M NULL, ok"
    let number_before = |word: &str| -> u64 {
        let at = line.find(word).unwrap_or_else(|| panic!("{what}: {line}"));
        let digits = line[..at].trim_end().rsplit(' ').next().unwrap();
        digits.parse().unwrap_or_else(|_| panic!("{what}: {line}"))
    };
    let said = Said {
        allocations: number_before(" allocations"),
        nulls: number_before(" NULL"),
    };
    assert_eq!(files.len(), 1, "{what}: one profile:\n{}", listing(&files));
    let p = files.into_iter().next().unwrap().1;
    let facts = facts(&what, &p);
    assert_eq!(p.state, State::Exited, "{facts}");
    // Every call counted, whatever the recorder dropped: the fixture's,
    // and a few hundred of libc's own.
    let calls = p.totals.allocation_calls();
    assert!(
        calls >= said.allocations && calls <= said.allocations + 5_000,
        "{facts}: {calls} allocation calls for the fixture's {}",
        said.allocations
    );
    let want_mode = match stacks {
        "off" => StackMode::Off,
        "exact" => StackMode::Exact,
        _ => StackMode::Sample {
            mean_bytes: allocmux_format::settings::DEFAULT_SAMPLE_BYTES,
        },
    };
    assert_eq!(p.stacks.mode, want_mode, "{facts}");
    let st = &p.stacks;
    if stacks == "off" {
        assert!(st.stacks.is_empty() && st.degraded == 0, "{facts}");
    }
    if stacks == "exact" {
        // Each successful allocation is on a stack or lost (a NULL from a
        // small request is neither, nor counted as failed); one that was
        // dropped for lack of memory is also counted as degraded, and
        // this fixture loses stacks for no other reason.
        let on_stacks: u64 = st.stacks.iter().map(|s| s.counts.allocs).sum();
        let succeeded = calls - p.totals.failed_calls;
        assert!(
            on_stacks + st.lost <= succeeded,
            "{facts}: {on_stacks} on stacks + {} lost > {succeeded} allocations",
            st.lost
        );
        if st.degraded == 0 {
            assert!(
                on_stacks + st.lost + said.nulls >= succeeded,
                "{facts}: {on_stacks} on stacks + {} lost, {} NULL, of {succeeded}",
                st.lost,
                said.nulls
            );
        }
        assert!(st.lost == 0 || st.degraded > 0, "{facts}");
        // The stacks of the allocations made before memory ran out, as
        // the writer's last copy of the stack table holds them. A copy
        // there is no memory for leaves the previous one, and there is
        // none when no flush came before the limit (the flusher's timing
        // decides: under load it may not run) and the exit's found no
        // room: then the profile has no stacks, and says it is degraded.
        assert!(!st.stacks.is_empty() || st.degraded > 0, "{facts}");
    }
    (p, said)
}

/// The profile's figures, for messages.
fn facts(what: &str, p: &ProcessProfile) -> String {
    format!(
        "{what}: {} stacks: {} distinct, {} lost, {} degraded",
        summary(p),
        p.stacks.stacks.len(),
        p.stacks.lost,
        p.stacks.degraded
    )
}

/// Threads allocate under an address-space limit until malloc says no,
/// then free everything: the program finishes, under every stack mode,
/// and its profile adds up (`run_case`). glibc's heap is the shim's own
/// heap too, so under the system allocator the recorder competes with the
/// program for the last megabytes; whether it runs out as well depends on
/// where the limit falls (in exact mode its block map takes a 256 KiB
/// leaf when the heap first reaches a new MiB), so that is not asserted
/// here: the mappings case below runs it out, and the unit tests of the
/// block map and the stack table run each out on its own.
/// (mimalloc's threads may not run out: their segments were reserved
/// before the limit.)
fn address_space_limit(backend: &str) {
    for stacks in STACK_MODES {
        let (_, said) = run_case(backend, stacks, &["rlimit", "4", "64"], &[]);
        assert!(
            said.nulls > 0 || backend == "mimalloc",
            "{backend}, {stacks}: the limit was reached"
        );
    }
}

/// A process at the kernel's limit on mappings allocates and frees from
/// many stacks, and exits with the limit still reached: the program
/// finishes and the exit profile is written. With every block tracked
/// the recorder runs out in the heap the program fills (nothing new can
/// be mapped), and the profile says so. (Under mimalloc the recorder's
/// heap is mimalloc's, which still holds the 64 MiB the program gave back
/// before the limit: the recorder may grow in it, and then `run_case` has
/// checked that nothing was lost.)
fn mapping_count_limit(backend: &str) {
    for stacks in STACK_MODES {
        let (p, said) = run_case(backend, stacks, &["maps"], &[]);
        assert!(said.allocations == 300_000, "{backend}, {stacks}");
        if stacks == "exact" && backend != "mimalloc" {
            assert!(
                p.stacks.degraded > 0,
                "the recorder ran out: {}",
                facts(backend, &p)
            );
        }
    }
}

per_backend!(address_space_limit, mapping_count_limit);
