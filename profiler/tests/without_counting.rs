//! Without `Counting` as the global allocator every count reads 0, which
//! a budget or a benchmark would take for a result: both refuse, saying
//! what to add.

#[test]
fn a_budget_panics_saying_counting_is_missing() {
    let r = std::panic::catch_unwind(|| {
        allocmux::Budget::new().allocs(0).check(|| vec![1u8; 10]);
    });
    let e = r.expect_err("no Counting");
    let msg = e.downcast_ref::<String>().unwrap();
    assert!(msg.contains("allocmux::Budget"), "{msg}");
    assert!(msg.contains("is not the global allocator"), "{msg}");
    assert!(msg.contains("#[global_allocator]"), "{msg}");
}

#[test]
fn a_criterion_measurement_panics_saying_counting_is_missing() {
    use criterion::measurement::Measurement;
    let r = std::panic::catch_unwind(|| allocmux::criterion::Allocations.start());
    let e = r.expect_err("no Counting");
    let msg = e.downcast_ref::<String>().unwrap();
    assert!(msg.contains("allocmux::criterion::Allocations"), "{msg}");
    assert!(msg.contains("is not the global allocator"), "{msg}");
}
