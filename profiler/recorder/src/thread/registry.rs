//! The registry of threads: registering at a thread's first allocation,
//! retiring at its exit (a pthread key destructor), the shared counters of
//! threads that cannot count on their own, the process's live and peak
//! bytes, the sums a snapshot reads, and the state after `fork`.

use super::*;

/// A thread's recording state while paused (see [`ThreadState::pause`]).
#[derive(Debug)]
#[must_use = "pass it to `resume`, or the thread stays unrecorded"]
pub struct Paused {
    pub(super) status: u8,
    pub(super) countdown: [i32; FUNC_COUNT],
    pub(super) bytes_left: u64,
}

pub(super) struct Registry {
    pub(super) head: *mut ThreadState,
}

// SAFETY: the pointers are only followed under the registry lock, and each
// points at a registered thread's state, unlinked before that thread ends.
unsafe impl Send for Registry {}

pub(super) static REGISTRY: SpinLock<Registry> = SpinLock::new(Registry {
    head: ptr::null_mut(),
});
/// Totals of exited threads and of calls recorded in the `Shared` scope.
pub(super) static SHARED: Counters = Counters::new();
pub(super) static GLOBAL_LIVE: AtomicI64 = AtomicI64::new(0);
pub(super) static GLOBAL_PEAK: AtomicI64 = AtomicI64::new(0);
pub(super) static THREADS_SEEN: AtomicU64 = AtomicU64::new(0);
pub(super) static TSC_OVERHEAD: AtomicU64 = AtomicU64::new(0);
pub(super) static TIME_SAMPLE_MEAN: AtomicU32 = AtomicU32::new(DEFAULT_TIME_SAMPLE_MEAN);
/// ln(1 - 1/DEFAULT_TIME_SAMPLE_MEAN), valid before `set_time_sample_mean`
/// runs (allocations come before the shim's constructor).
pub(super) static LN_Q_BITS: AtomicU64 = AtomicU64::new(0xbf70_0805_5958_8b35);
/// The pthread key whose destructor retires a thread; `u32::MAX` while
/// not yet created, `u32::MAX - 1` if creation failed.
pub(super) static THREAD_KEY: AtomicU32 = AtomicU32::new(KEY_UNSET);
pub(super) const KEY_UNSET: u32 = u32::MAX;
pub(super) const KEY_FAILED: u32 = u32::MAX - 1;
pub(super) const KEY_CREATING: u32 = u32::MAX - 2;

/// How long a thread's registration waits for the registry (in yields to
/// the scheduler) before the thread counts unlinked and links later.
pub(super) const REGISTER_YIELDS: u32 = 1000;

pub use allocmux_format::settings::DEFAULT_TIME_SAMPLE_MEAN;

/// Sets the mean number of calls between timed calls (1 times every call),
/// and measures the cost of a clock read to subtract from each timing.
/// Call once, before threads allocate (the shim does it at start-up).
pub fn set_time_sample_mean(mean: u32) {
    let mean = mean.max(1);
    TIME_SAMPLE_MEAN.store(mean, Relaxed);
    let p = 1.0 / mean as f64;
    LN_Q_BITS.store((1.0 - p).ln().to_bits(), Relaxed);
    TSC_OVERHEAD.store(Tsc::overhead(), Relaxed);
}

/// The calibrated cost of one pair of clock reads, in ticks, to subtract
/// from a timing.
pub fn tsc_overhead() -> u64 {
    TSC_OVERHEAD.load(Relaxed)
}

/// The mean number of calls between timed calls, so that the sum of timed
/// ticks times this mean estimates the allocator's total time.
pub fn time_sample_mean() -> u32 {
    TIME_SAMPLE_MEAN.load(Relaxed)
}

/// Threads of the program that have made an allocation call in this
/// process, including those counting on the shared counters because they
/// could not register.
pub fn threads_seen() -> u64 {
    THREADS_SEEN.load(Relaxed)
}

pub(super) unsafe extern "C" fn on_thread_exit(state: *mut libc::c_void) {
    // SAFETY: the key's value is the exiting thread's own state, set by
    // `register`, and the thread is still running its destructors.
    unsafe { retire_thread(&*(state as *const ThreadState)) }
}

pub(super) fn thread_key() -> Option<libc::pthread_key_t> {
    loop {
        match THREAD_KEY.load(Relaxed) {
            KEY_FAILED => return None,
            KEY_CREATING => core::hint::spin_loop(),
            KEY_UNSET => {
                if THREAD_KEY
                    .compare_exchange(KEY_UNSET, KEY_CREATING, Relaxed, Relaxed)
                    .is_ok()
                {
                    let stored = match create_last_inline_key() {
                        Some(key) if key < KEY_CREATING => key,
                        _ => KEY_FAILED,
                    };
                    THREAD_KEY.store(stored, Relaxed);
                }
            }
            key => return Some(key),
        }
    }
}

/// The number of pthread keys glibc keeps in the thread descriptor; a
/// thread's first `pthread_setspecific` of a higher key allocates.
pub(super) const INLINE_KEYS: libc::pthread_key_t = 32;

/// Creates the thread-exit key as the last one glibc keeps in the thread
/// descriptor (number 31) if it is free, else the lowest free one.
///
/// glibc runs key destructors in rounds (at most four), each visiting the
/// keys in order of their numbers and calling the destructor of every key
/// whose value is set *at the visit*. A thread whose first allocation comes
/// in another key's destructor registers then and sets this key: with a
/// number above the program's keys, this key is visited later in the same
/// round and retires the thread even in the last round. With a low number,
/// a registration in the last round left the thread linked after its exit,
/// its state in a stack that glibc unmaps (the writer then read unmapped
/// memory: `hostile last-round` in the shim's tests). Only keys numbered
/// 32 and up, which a program creates after 31 others, still run after it.
pub(super) fn create_last_inline_key() -> Option<libc::pthread_key_t> {
    let mut made = [0 as libc::pthread_key_t; INLINE_KEYS as usize];
    let mut n = 0;
    let mut chosen = None;
    while n < made.len() {
        let mut key: libc::pthread_key_t = 0;
        // SAFETY: valid out-pointer and destructor; pthread_key_create
        // does not allocate.
        if unsafe { libc::pthread_key_create(&mut key, Some(on_thread_exit)) } != 0 {
            break;
        }
        made[n] = key;
        n += 1;
        if key >= INLINE_KEYS - 1 {
            break;
        }
    }
    if n > 0 {
        // The key numbered 31, or failing that the first one made (the
        // lowest free number, as before).
        let keep = if made[n - 1] == INLINE_KEYS - 1 {
            n - 1
        } else {
            0
        };
        chosen = Some(made[keep]);
        for (i, &k) in made[..n].iter().enumerate() {
            if i != keep {
                // SAFETY: a key made above and never set.
                unsafe { libc::pthread_key_delete(k) };
            }
        }
    }
    chosen
}

/// Creates the thread-exit key now, before the program's (see
/// `create_last_inline_key`).
pub fn prepare_thread_key() -> bool {
    thread_key().is_some()
}

pub(super) fn register(t: &ThreadState, external: Option<[*mut u64; 2]>) -> bool {
    t.status.set(BUSY);
    // Counted whether or not registration succeeds: a thread that falls
    // back to the shared counters is still one of the program's threads.
    THREADS_SEEN.fetch_add(1, Relaxed);
    if let Some(ext) = external {
        for (slot, p) in t.external.iter().zip(ext) {
            slot.store(p, Relaxed);
        }
    }
    t.rebase_external();
    let Some(key) = thread_key() else {
        t.status.set(UNTRACKED);
        return false;
    };
    t.rng
        .set(Tsc::now() ^ (t as *const ThreadState as u64).rotate_left(32) | 1);
    t.linked.set(false);
    // Bounded: a thread's first allocation may come while it holds a lock
    // of the program's (a stream's, in `getline`), so it must not wait on a
    // registry that a signal handler's interrupted frame holds. Past the
    // bound (usually a holder preempted, or its virtual CPU descheduled)
    // it counts on its own counters unlinked and links later.
    if let Some(mut reg) = REGISTRY.lock_within(REGISTER_YIELDS)
        && !link(&mut reg, t)
    {
        return false;
    }
    // SAFETY: `key` is a live key; a non-NULL value arms the destructor.
    if unsafe { libc::pthread_setspecific(key, t as *const ThreadState as *const libc::c_void) }
        != 0
    {
        retire_thread(t);
        return false;
    }
    t.status.set(ACTIVE);
    true
}

/// Puts `t` at the head of the registry and marks it linked; or, if it is
/// in the list already (see [`is_linked`]), leaves it there and makes the
/// thread count on the shared counters from now on (the stale entry still
/// adds what the state counted so far). Returns whether it linked.
pub(super) fn link(reg: &mut Registry, t: &ThreadState) -> bool {
    let me = t as *const ThreadState as *mut ThreadState;
    if is_linked(reg, me) {
        t.status.set(UNTRACKED);
        return false;
    }
    t.prev.store(ptr::null_mut(), Relaxed);
    t.next.store(reg.head, Relaxed);
    if !reg.head.is_null() {
        // SAFETY: registered states stay valid while linked (lock held).
        unsafe { (*reg.head).prev.store(me, Relaxed) };
    }
    reg.head = me;
    t.linked.set(true);
    true
}

/// Links a thread that registered without the registry (see `register`),
/// if the registry is free now; else a later slow call tries again. Never
/// waits, for the reason `register` waits only so long.
#[cold]
#[inline(never)]
pub(super) fn link_later(t: &ThreadState) {
    if let Some(mut reg) = REGISTRY.try_lock() {
        link(&mut reg, t);
    }
}

/// Whether `me` is already in the registry: a state left there by a dead
/// thread that allocated after its key destructors had run (so nothing
/// unlinked it), whose TLS block a new thread now has. Linking it again
/// would make a cycle; one walk per thread start rules that out.
pub(super) fn is_linked(reg: &Registry, me: *mut ThreadState) -> bool {
    let mut p = reg.head;
    while !p.is_null() {
        if p == me {
            return true;
        }
        // SAFETY: linked states are valid while the lock is held.
        p = unsafe { (*p).next.load(Relaxed) };
    }
    false
}

/// Folds an exiting thread's counts into the shared totals and unlinks it
/// (if it linked). Calls the thread makes afterwards (from later
/// destructors) are recorded on the shared counters. Runs from the pthread
/// key destructor.
pub fn retire_thread(t: &ThreadState) {
    let status = t.status.get();
    if status != ACTIVE && status != BUSY {
        return;
    }
    t.status.set(BUSY);
    t.note_external();
    t.publish();
    let (ext_alloc, ext_freed) = t.external_bytes();
    {
        let mut reg = REGISTRY.lock();
        if t.linked.replace(false) {
            let next = t.next.load(Relaxed);
            let prev = t.prev.load(Relaxed);
            // SAFETY: neighbours are registered states, valid while linked.
            unsafe {
                if !next.is_null() {
                    (*next).prev.store(prev, Relaxed);
                }
                if prev.is_null() {
                    if core::ptr::eq(reg.head, t) {
                        reg.head = next;
                    }
                } else {
                    (*prev).next.store(next, Relaxed);
                }
            }
        }
        SHARED.absorb(&t.counters);
        for f in Func::ALL {
            SHARED.add_calls(f, t.calls(f as usize));
        }
        SHARED.request::<true>(t.requested_bytes() as usize);
        SHARED.allocated::<true>(ext_alloc as usize);
        SHARED.freed::<true>(ext_freed as usize);
    }
    t.status.set(RETIRED);
    t.reset_calls();
}

/// The process totals so far: the shared counters plus every live thread's.
///
/// `current`, if given and registered, first publishes its live bytes, so a
/// single-threaded program's peak is exact at exit; and if it is not linked
/// into the registry yet (see `register`), its own counts are added, so a
/// thread's snapshot always has its own calls.
pub fn snapshot(current: Option<&ThreadState>) -> Totals {
    let mut tot = Totals::default();
    if let Some(t) = current
        && t.status.get() == ACTIVE
    {
        t.check_peak();
        t.publish();
        if !t.linked.get() {
            // Not in the walk below yet: its own calls are still counted.
            t.add_to(&mut tot);
        }
    }
    {
        // Held by this very thread only when a signal handler that
        // interrupted a registration or a retirement takes the snapshot
        // (on its way to `_exit`): the list is then read without the lock,
        // which is safe because links are only followed through `next`,
        // set before a state is published at the head; the thread being
        // retired may be missed.
        let _reg = REGISTRY.lock_unless_held_here();
        // SAFETY: either the lock is held, or only this thread's
        // interrupted frame changes the list (see above).
        let reg = unsafe { &*REGISTRY.as_ptr() };
        SHARED.add_to(&mut tot);
        let mut p = reg.head;
        while !p.is_null() {
            // SAFETY: linked states are valid while the lock is held.
            unsafe {
                (*p).add_to(&mut tot);
                p = (*p).next.load(Relaxed);
            }
        }
    }
    let live = tot.bytes_allocated as i64 - tot.bytes_freed as i64;
    tot.peak_live_bytes = GLOBAL_PEAK.load(Relaxed).max(live).max(0) as u64;
    super::null_frees_apart(&mut tot);
    tot
}

/// The process's high-water mark of live heap bytes so far, as the
/// profile's `peak_live_bytes` has it (without the calls in flight).
pub fn peak_live_bytes() -> u64 {
    GLOBAL_PEAK.load(Relaxed).max(0) as u64
}

/// The process's live heap bytes now: what every thread allocated minus
/// what it freed, summed over the registry and the shared counters (0 if
/// more was freed than allocated, as in a forked child freeing its
/// parent's blocks).
///
/// For a periodic sampler such as the memory timeline, not for the
/// allocation path: it takes the registry lock and reads a few counters per
/// registered thread. It is exact up to the calls in flight, unlike the
/// published global count behind the peak, which a thread updates only at
/// its sampled calls and large allocations (a thread that frees a large
/// block and then sleeps would otherwise look as if it still held it).
pub fn live_bytes() -> u64 {
    // Under the lock: a retiring thread moves its counts to SHARED there.
    // Without it (0) if this thread holds it: a signal handler's timeline
    // sample that interrupted a registration.
    let Some(reg) = REGISTRY.lock_unless_held_here() else {
        return 0;
    };
    let (mut allocated, mut freed) = (SHARED.bytes_allocated(), SHARED.bytes_freed());
    let mut p = reg.head;
    while !p.is_null() {
        // SAFETY: linked states are valid while the lock is held.
        let t = unsafe { &*p };
        let (ext_alloc, ext_freed) = t.external_bytes();
        allocated += t.counters.bytes_allocated() + ext_alloc;
        freed += t.counters.bytes_freed() + ext_freed;
        p = t.next.load(Relaxed);
    }
    drop(reg);
    allocated.saturating_sub(freed)
}

/// `fork` child handler of a recorder whose child keeps its parent's
/// counts as its history (the Rust wrapper): only frees the registry if a
/// thread that no longer exists held it. The list stays walkable whatever
/// step of linking or unlinking that thread was at, since it is only
/// followed through `next`; a thread it was retiring may be missed.
pub fn after_fork_child_keeping_counts() {
    // SAFETY: this is the child of a fork, still with one thread.
    unsafe { REGISTRY.after_fork_in_child() };
}

/// `fork` child handler: the child starts from zero, with the forking
/// thread (`current`) as its only thread. Nothing is held across the fork
/// (see `SpinLock`); if the registry was being changed by
/// an interrupted frame of this very thread (the fork came from a signal
/// handler), it is left to that frame, and the child's figures include
/// its parent's.
pub fn after_fork_child(current: &ThreadState) {
    // SAFETY: this is the child of a fork, still with one thread.
    if unsafe { REGISTRY.after_fork_in_child() } == AtFork::HeldHere {
        return;
    }
    let mut reg = REGISTRY.lock();
    reg.head = ptr::null_mut();
    SHARED.reset();
    GLOBAL_LIVE.store(0, Relaxed);
    GLOBAL_PEAK.store(0, Relaxed);
    // The forking thread has made calls unless it is allocmux's own.
    let seen = !matches!(current.status.get(), FRESH | IGNORED);
    THREADS_SEEN.store(seen as u64, Relaxed);
    if current.status.get() == ACTIVE {
        current.reset();
        current.next.store(ptr::null_mut(), Relaxed);
        current.prev.store(ptr::null_mut(), Relaxed);
        reg.head = current as *const ThreadState as *mut ThreadState;
        current.linked.set(true);
    }
}
