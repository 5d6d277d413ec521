//! A spin lock that a forked child can reset, shared by both observers.
//!
//! `std::sync::Mutex` is not used because a child created by `fork` while another thread holds a
//! mutex inherits it locked forever; this lock can be released in the child's `pthread_atfork`
//! handler. The observers take it on cold paths only (registration, graph and object bookkeeping,
//! trace writing), never on a launch's or a dispatch's path.

use std::cell::UnsafeCell;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, Ordering};

/// A test-and-test-and-set lock that yields the CPU after a short spin.
pub struct SpinLock<T> {
    locked: AtomicBool,
    value: UnsafeCell<T>,
}

// SAFETY: the lock hands out at most one `&mut T` at a time (the `locked` flag is taken with an
// Acquire CAS and released with a Release store), so sharing the lock across threads is sound when
// `T` can be sent between threads.
unsafe impl<T: Send> Sync for SpinLock<T> {}

impl<T> std::fmt::Debug for SpinLock<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpinLock").field("locked", &self.is_locked()).finish_non_exhaustive()
    }
}

impl<T> SpinLock<T> {
    pub const fn new(value: T) -> Self {
        SpinLock { locked: AtomicBool::new(false), value: UnsafeCell::new(value) }
    }

    pub fn lock(&self) -> SpinGuard<'_, T> {
        self.acquire();
        SpinGuard { lock: self }
    }

    /// Takes the lock only if it is free now (used where waiting is not worth it).
    pub fn try_lock(&self) -> Option<SpinGuard<'_, T>> {
        if self.locked.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed).is_ok() {
            Some(SpinGuard { lock: self })
        } else {
            None
        }
    }

    fn acquire(&self) {
        let mut spins = 0u32;
        loop {
            if !self.locked.load(Ordering::Relaxed)
                && self.locked.compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed).is_ok()
            {
                return;
            }
            spins = spins.saturating_add(1);
            if spins < 64 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }

    /// Locks without a guard; paired with [`SpinLock::release_for_fork`]. Used by a
    /// `pthread_atfork` prepare handler so that no other thread is inside the data at fork time.
    pub fn acquire_for_fork(&self) {
        self.acquire();
    }

    /// Releases a lock taken by [`SpinLock::acquire_for_fork`] (in the parent and in the child after
    /// `fork`), or one that a thread which no longer exists held in a forked child. The value may be
    /// half-updated if that thread was inside it; the caller decides whether to use it.
    pub fn release_for_fork(&self) {
        self.locked.store(false, Ordering::Release);
    }

    pub fn is_locked(&self) -> bool {
        self.locked.load(Ordering::Relaxed)
    }

    /// Access to the value while this thread holds the lock through `acquire_for_fork`, in the
    /// single-threaded child right after `fork`.
    ///
    /// # Safety
    /// The caller must be the only thread that can touch the value (the forked child's atfork
    /// handler, with the lock taken or abandoned) and must not keep the reference.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn get_unchecked_mut(&self) -> &mut T {
        // SAFETY: exclusive access is the caller's obligation (see above).
        unsafe { &mut *self.value.get() }
    }
}

pub struct SpinGuard<'a, T> {
    lock: &'a SpinLock<T>,
}

impl<T> std::fmt::Debug for SpinGuard<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpinGuard").finish_non_exhaustive()
    }
}

impl<T> Deref for SpinGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the guard exists only while this thread holds the lock.
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> DerefMut for SpinGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: the guard exists only while this thread holds the lock, and `&mut self` makes
        // this the only reference handed out by the guard.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T> Drop for SpinGuard<'_, T> {
    fn drop(&mut self) {
        self.lock.locked.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn counts_exactly_under_contention() {
        let lock = Arc::new(SpinLock::new(0u64));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let lock = Arc::clone(&lock);
                std::thread::spawn(move || (0..10_000).for_each(|_| *lock.lock() += 1))
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().unwrap());
        assert_eq!(*lock.lock(), 40_000);
    }

    #[test]
    fn try_lock_fails_while_held() {
        let lock = SpinLock::new(());
        let guard = lock.lock();
        assert!(lock.try_lock().is_none());
        drop(guard);
        assert!(lock.try_lock().is_some());
    }

    #[test]
    fn a_lock_abandoned_at_fork_can_be_released() {
        let lock = SpinLock::new(1u32);
        lock.acquire_for_fork();
        assert!(lock.is_locked() && lock.try_lock().is_none());
        lock.release_for_fork();
        assert!(!lock.is_locked());
        assert_eq!(*lock.lock(), 1);
    }
}
