//! A spin lock that never allocates and knows its holder, for the
//! registry, the stack table and the shim's writer.
//!
//! Knowing the holder is what makes the recorder safe around `fork` from
//! anywhere, signal handlers included. No lock is held across `fork`: a
//! `fork` prepare handler that took the recorder's locks would make every
//! thread that then waits for one of them wait on the forking thread, which
//! itself waits inside `fork` for the program's stdio and malloc locks,
//! some of them held by exactly those threads (a hang), and could not take
//! a lock the forking thread itself holds (a signal handler's `fork` that
//! interrupted the recorder: a hang). Instead, the child looks at each lock
//! as the fork left it ([`SpinLock::after_fork_in_child`]): free, its data
//! is consistent; held by the forking thread, an interrupted frame of the
//! child's own thread holds it and will release it; held by another
//! thread, that thread does not exist in the child and its change may be
//! half done, so the child frees the lock and rebuilds the data.

use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicUsize, Ordering};

/// A test-and-test-and-set spin lock that yields to the scheduler while
/// contended. Only held for short, allocation-free sections. The lock word
/// is the holder's `pthread_self()` (never 0), so whether the calling
/// thread holds it is one load.
#[derive(Debug)]
pub struct SpinLock<T> {
    holder: AtomicUsize,
    value: UnsafeCell<T>,
}

// SAFETY: access to `value` is serialised by `holder`.
unsafe impl<T: Send> Sync for SpinLock<T> {}

/// Proof of holding a [`SpinLock`]; unlocks on drop.
#[derive(Debug)]
pub struct SpinGuard<'a, T> {
    lock: &'a SpinLock<T>,
}

/// How a `fork` left a lock, as seen in the child (see
/// [`SpinLock::after_fork_in_child`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AtFork {
    /// Nobody held it: its data is consistent.
    Free,
    /// The forking thread held it: a frame the signal handler that forked
    /// interrupted, which goes on in the child if the handler returns.
    HeldHere,
    /// Another thread held it: freed now; its data may be half changed and
    /// must be rebuilt before use.
    Orphaned,
}

/// The calling thread's identity: its `pthread_self()`, the same in a
/// `fork` child as in the thread of the parent that forked it.
#[inline]
fn this_thread() -> usize {
    // SAFETY: pthread_self has no preconditions and never fails.
    unsafe { libc::pthread_self() as usize }
}

/// Spins before the first yield of a contended `lock`.
const SPINS: u32 = 64;

impl<T> SpinLock<T> {
    /// A new, unlocked lock.
    pub const fn new(value: T) -> Self {
        SpinLock {
            holder: AtomicUsize::new(0),
            value: UnsafeCell::new(value),
        }
    }

    fn try_as(&self, me: usize) -> Option<SpinGuard<'_, T>> {
        if self.holder.load(Ordering::Relaxed) == 0
            && self
                .holder
                .compare_exchange_weak(0, me, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        {
            Some(SpinGuard { lock: self })
        } else {
            None
        }
    }

    /// Takes the lock, spinning and then yielding while another thread has
    /// it. Only for callers that may wait as long as it takes: never a
    /// thread that may already hold it (a signal handler's), nor one that
    /// holds a lock of the program while it waits.
    pub fn lock(&self) -> SpinGuard<'_, T> {
        let me = this_thread();
        let mut spins = 0u32;
        loop {
            if let Some(g) = self.try_as(me) {
                return g;
            }
            spins = spins.saturating_add(1);
            pause(spins);
        }
    }

    /// Whether the calling thread holds the lock.
    pub fn held_here(&self) -> bool {
        self.holder.load(Ordering::Relaxed) == this_thread()
    }

    /// Takes the lock if it is free.
    pub fn try_lock(&self) -> Option<SpinGuard<'_, T>> {
        self.holder
            .compare_exchange(0, this_thread(), Ordering::Acquire, Ordering::Relaxed)
            .ok()
            .map(|_| SpinGuard { lock: self })
    }

    /// Takes the lock, waiting for another thread as [`lock`](Self::lock)
    /// does, or returns `None` at once if the calling thread holds it (a
    /// signal handler that interrupted a holder), where waiting would never
    /// end.
    pub fn lock_unless_held_here(&self) -> Option<SpinGuard<'_, T>> {
        self.lock_within(u32::MAX)
    }

    /// Takes the lock within about `yields` yields to the scheduler (after
    /// a short spin), or returns `None`: at once if the calling thread
    /// holds it. For the allocation path, which may run while the program
    /// holds its own locks, so that no wait of the recorder's can close a
    /// cycle with them; the caller then records less, and counts it.
    pub fn lock_within(&self, yields: u32) -> Option<SpinGuard<'_, T>> {
        let me = this_thread();
        let mut spins = 0u32;
        loop {
            if let Some(g) = self.try_as(me) {
                return Some(g);
            }
            if self.holder.load(Ordering::Relaxed) == me {
                return None;
            }
            spins = spins.saturating_add(1);
            if spins > SPINS.saturating_add(yields) {
                return None;
            }
            pause(spins);
        }
    }

    /// Whether the calling thread holds the lock.
    #[inline]
    pub fn is_held_here(&self) -> bool {
        self.holder.load(Ordering::Relaxed) == this_thread()
    }

    /// In a `fork` child, from its `fork` handler: how the fork left this
    /// lock (see [`AtFork`]), freeing it if the thread that held it is
    /// gone.
    ///
    /// # Safety
    /// Only in the child of a `fork`, before any other thread exists in it;
    /// on [`AtFork::Orphaned`] the caller must rebuild the data before it
    /// is used (without dropping it: it may be half changed).
    pub unsafe fn after_fork_in_child(&self) -> AtFork {
        match self.holder.load(Ordering::Relaxed) {
            0 => AtFork::Free,
            h if h == this_thread() => AtFork::HeldHere,
            _ => {
                self.holder.store(0, Ordering::Release);
                AtFork::Orphaned
            }
        }
    }

    /// The data, bypassing the lock: for a `fork` child rebuilding the
    /// data of an [`AtFork::Orphaned`] lock, and for a reader that found
    /// the lock held by its own interrupted frame. Dereferencing it is the
    /// caller's responsibility.
    pub fn as_ptr(&self) -> *mut T {
        self.value.get()
    }
}

/// One step of waiting: a CPU pause for the first spins, then a yield.
fn pause(spins: u32) {
    if spins < SPINS {
        core::hint::spin_loop();
    } else {
        // SAFETY: sched_yield has no preconditions.
        unsafe { libc::sched_yield() };
    }
}

impl<T> core::ops::Deref for SpinGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the guard proves exclusive access.
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> core::ops::DerefMut for SpinGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: the guard proves exclusive access.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T> Drop for SpinGuard<'_, T> {
    fn drop(&mut self) {
        self.lock.holder.store(0, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_holder_is_told_apart_from_other_threads() {
        let lock = SpinLock::new(0u32);
        let g = lock.lock();
        assert!(lock.lock_within(10).is_none(), "held here: no wait");
        assert!(lock.lock_unless_held_here().is_none());
        std::thread::scope(|s| {
            s.spawn(|| assert!(lock.lock_within(3).is_none(), "held elsewhere: bounded"));
        });
        drop(g);
        assert!(lock.lock_within(0).is_some());
        assert!(lock.lock_unless_held_here().is_some());
    }
}
