//! Allocation budgets under `cargo test`'s threads: several budgets in one
//! binary, passing and failing independently and exactly; a failure names
//! the function that allocated; leaks; the baseline file's round trip.

use std::hint::black_box;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Barrier;

use allocmux::{BLESS_ENV, Budget};

#[global_allocator]
static ALLOC: allocmux::Counting<std::alloc::System> = allocmux::Counting::new(std::alloc::System);

/// Three allocations of 100 bytes each, freed before it returns.
#[inline(never)]
fn three_blocks() -> usize {
    let v: Vec<Box<[u8; 100]>> = (0..3).map(|_| Box::new([0u8; 100])).collect::<Vec<_>>();
    // The Vec itself is a fourth allocation: 3 pointers.
    black_box(&v).len()
}

#[inline(never)]
fn leak_64() {
    black_box(Box::leak(Box::new([7u8; 64])));
}

#[inline(never)]
fn make_names(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("name-{i:04}")).collect()
}

#[test]
fn a_budget_that_holds_passes_with_exact_figures() {
    let checked = Budget::new()
        .allocs(4)
        .bytes(324)
        .peak_bytes(324)
        .leaked_bytes(0)
        .check(three_blocks);
    let s = checked.stats;
    assert_eq!(
        (s.allocs, s.bytes_allocated, s.peak_live_bytes),
        (4, 324, 324)
    );
    assert_eq!(s.live_bytes, 0);
}

#[test]
fn each_figure_fails_by_itself_at_one_below() {
    for (budget, what) in [
        (
            Budget::new().allocs(3),
            "allocation calls: 4 calls, budget 3 calls",
        ),
        (
            Budget::new().bytes(323),
            "bytes requested: 324 B, budget 323 B",
        ),
        (
            Budget::new().peak_bytes(323),
            "peak live bytes: 324 B, budget 323 B",
        ),
    ] {
        let e = budget.try_check(three_blocks).unwrap_err().to_string();
        assert!(e.contains(what), "{e}");
    }
}

/// Many budgets at once on threads of their own, one of each pair over:
/// each sees its own thread's allocations only.
#[test]
fn budgets_in_parallel_threads_pass_and_fail_independently() {
    const PAIRS: usize = 4;
    let barrier = Barrier::new(2 * PAIRS);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..2 * PAIRS)
            .map(|i| {
                let barrier = &barrier;
                s.spawn(move || {
                    barrier.wait();
                    let n = 10 + i;
                    // `make_names(n)`: the Vec once, and n strings.
                    let allowed = if i % 2 == 0 { n as u64 + 1 } else { n as u64 };
                    let r = Budget::new().allocs(allowed).try_check(|| make_names(n));
                    (i, n, r)
                })
            })
            .collect();
        for h in handles {
            let (i, n, r) = h.join().unwrap();
            if i % 2 == 0 {
                let c = r.unwrap_or_else(|e| panic!("budget {i} should pass: {e}"));
                assert_eq!(c.stats.allocs, n as u64 + 1);
            } else {
                let e = r.expect_err("over by one").to_string();
                let want = format!("allocation calls: {} calls, budget {n} calls", n + 1);
                assert!(e.contains(&want), "{e}");
            }
        }
    });
}

#[test]
fn a_failing_budget_names_the_function_that_allocated() {
    let e = Budget::new()
        .allocs(5)
        .try_check(|| make_names(20))
        .unwrap_err()
        .to_string();
    assert!(e.lines().count() <= 20, "too long:\n{e}");
    let first_stack = e
        .lines()
        .find(|l| l.contains(" × "))
        .unwrap_or_else(|| panic!("no stack in:\n{e}"));
    // The 20 strings come from `make_names`, through `format!`: the
    // program's frame is shown, not the standard library's.
    assert!(
        first_stack.contains("budget::make_names") && first_stack.contains("tests/budget.rs:"),
        "{e}"
    );
    assert!(first_stack.trim_start().starts_with("20 ×"), "{e}");
    assert!(!e.contains("alloc::alloc::"), "{e}");
}

#[test]
fn a_leak_budget_catches_box_leak() {
    let e = Budget::new()
        .leaked_bytes(0)
        .try_check(leak_64)
        .unwrap_err()
        .to_string();
    assert!(e.contains("bytes leaked: 64 B, budget 0 B"), "{e}");
    assert!(e.contains("still live at return"), "{e}");
    assert!(e.contains("budget::leak_64"), "{e}");
    // What the closure returns is dropped inside the span: not a leak.
    Budget::new().leaked_bytes(0).check(|| make_names(3));
}

#[test]
fn check_panics_with_the_message() {
    let r = std::panic::catch_unwind(|| {
        Budget::new().allocs(0).check(|| make_names(1));
    });
    let e = r.expect_err("over budget");
    let msg = e.downcast_ref::<String>().expect("a formatted message");
    assert!(
        msg.starts_with("allocmux: allocation budget exceeded"),
        "{msg}"
    );
}

/// The baseline half of a budget, run by `the_baseline_file_round_trip`
/// in a child process of this binary with the environment it needs (and
/// nothing when run otherwise).
#[test]
#[ignore = "a child process of the_baseline_file_round_trip"]
fn baseline_child() {
    let (Ok(file), Ok(name), Ok(n)) = (
        std::env::var("BUDGET_TEST_FILE"),
        std::env::var("BUDGET_TEST_NAME"),
        std::env::var("BUDGET_TEST_N"),
    ) else {
        return;
    };
    Budget::baseline(name)
        .baseline_file(file)
        .check(|| make_names(n.parse().unwrap()));
}

/// Runs `baseline_child` for `name` with `make_names(n)`, blessing or not.
fn child(file: &Path, name: &str, n: usize, bless: bool) -> Command {
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.args(["baseline_child", "--exact", "--ignored", "--nocapture"])
        .env("BUDGET_TEST_FILE", file)
        .env("BUDGET_TEST_NAME", name)
        .env("BUDGET_TEST_N", n.to_string())
        .env_remove(BLESS_ENV);
    if bless {
        c.env(BLESS_ENV, "1");
    }
    c
}

/// Exit status and stderr of a child.
fn run(mut c: Command) -> (bool, String) {
    let out = c.output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Fail when there is no entry, bless, pass, fail on an increase, report a
/// decrease, bless it; processes blessing at once keep each other's
/// entries.
#[test]
fn the_baseline_file_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("allocmux-budgets.toml");

    let (ok, err) = run(child(&file, "names", 5, false));
    assert!(!ok && err.contains("no baseline \"names\""), "{err}");
    assert!(!file.exists());

    // Four processes blessing four entries at once.
    let children: Vec<_> = ["names", "a", "b", "c d"]
        .iter()
        .map(|name| {
            let mut c = child(&file, name, 5, true);
            c.stdout(Stdio::null()).stderr(Stdio::null());
            c.spawn().unwrap()
        })
        .collect();
    for c in children {
        assert!(c.wait_with_output().unwrap().status.success());
    }
    let text = std::fs::read_to_string(&file).unwrap();
    for entry in ["[names]\nallocs = 6\n", "[a]\n", "[b]\n", "[\"c d\"]\n"] {
        assert!(text.contains(entry), "{entry:?} missing:\n{text}");
    }

    let (ok, err) = run(child(&file, "names", 5, false));
    assert!(ok && !err.contains("allocmux"), "{err}");

    let (ok, err) = run(child(&file, "names", 6, false));
    assert!(
        !ok && err.contains("allocation calls: 7 calls, baseline 6 calls"),
        "{err}"
    );
    assert!(err.contains("budget::make_names"), "{err}");

    let (ok, err) = run(child(&file, "names", 4, false));
    assert!(ok, "{err}");
    assert!(
        err.contains("budget \"names\" is below its baseline") && err.contains("allocs 6 -> 5"),
        "{err}"
    );

    assert!(run(child(&file, "names", 4, true)).0);
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.contains("[names]\nallocs = 5\n"), "{text}");
    assert!(text.contains("[\"c d\"]\nallocs = 6\n"), "{text}");
    let (ok, err) = run(child(&file, "names", 4, false));
    assert!(ok && !err.contains("below"), "{err}");
}
