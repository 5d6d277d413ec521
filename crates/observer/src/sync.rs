//! The two synchronisation tools of the observer: a spin lock that a forked child can reset, and the
//! per-thread state a hook reaches with one thread-local lookup (the re-entrancy flag and the link to
//! the thread's crash-locus ring).
//!
//! `std::sync::Mutex` is not used because a child created by `fork` while another thread holds a
//! mutex inherits it locked forever; the spin lock below can be force-released in the child's
//! `pthread_atfork` handler. It only guards cold paths (registration, graph bookkeeping, trace
//! writing), never the per-launch hot path.

use std::cell::{Cell, UnsafeCell};
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
                // SAFETY: sched_yield has no preconditions.
                unsafe { libc::sched_yield() };
            }
        }
    }

    /// Locks without a guard; paired with [`SpinLock::release_for_fork`]. Used by the
    /// `pthread_atfork` prepare handler so that no other thread is inside the data at fork time.
    pub fn acquire_for_fork(&self) {
        self.acquire();
    }

    /// Releases a lock taken by [`SpinLock::acquire_for_fork`] (in the parent and in the child after
    /// `fork`), or one that a thread which no longer exists held in a forked child.
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

/// What the observer keeps per thread.
pub struct ThreadState {
    in_hook: Cell<bool>,
    ring: crate::locus::ThreadRing,
}

thread_local! {
    // `const` initialiser and no destructor: the access compiles to a plain TLS load and can never
    // fail, not even while the thread is being torn down.
    static THREAD: ThreadState = const { ThreadState { in_hook: Cell::new(false), ring: crate::locus::ThreadRing::new() } };
}

impl ThreadState {
    /// This thread's crash-locus ring, once the observer runs (claimed at the first call then);
    /// `None` before, or when every ring is taken.
    #[inline(always)]
    pub fn ring(&self) -> Option<&'static crate::locus::Ring> {
        self.ring.get()
    }
}

/// Marks this thread as being inside an observer hook until dropped.
///
/// A runtime may call its own exported entry points (CUDA 13's `__cudaLaunchKernel` is reported to
/// go through `cudaLaunchKernel`), and the observer itself calls runtime functions such as
/// `cudaFuncGetName`; a nested hook on the same thread must forward without counting, or one
/// launch would be counted twice.
///
/// The scope keeps a pointer to this thread's state, so that the crash-locus bookkeeping and leaving
/// the scope cost no second TLS lookup (in a shared library every lookup is a call into the dynamic
/// loader). A raw pointer makes the scope neither `Send` nor `Sync`: it never leaves the hook call on
/// the thread that made it.
pub struct HookScope(*const ThreadState);

impl HookScope {
    /// `None` when this thread is already inside a hook: the caller forwards without observing.
    #[inline(always)]
    pub fn enter() -> Option<HookScope> {
        THREAD
            .try_with(|state| {
                if state.in_hook.get() {
                    None
                } else {
                    state.in_hook.set(true);
                    Some(HookScope(state as *const ThreadState))
                }
            })
            .ok()
            .flatten()
    }

    /// This thread's state.
    #[inline(always)]
    pub fn thread(&self) -> &ThreadState {
        // SAFETY: the pointer is this thread's `THREAD`, taken in `enter` during the same hook call;
        // the thread (and so its TLS) is alive while one of its calls is running.
        unsafe { &*self.0 }
    }

    /// The thread is about to forward the hooked call `name`: the crash locus names it until
    /// [`HookScope::call_ends`].
    #[inline(always)]
    pub fn call_begins(&self, name: &'static &'static str) -> Option<&'static crate::locus::Ring> {
        let ring = self.thread().ring()?;
        ring.call_begins(name);
        Some(ring)
    }
}

impl Drop for HookScope {
    #[inline(always)]
    fn drop(&mut self) {
        // SAFETY: as in `thread`: this thread's state, alive during the hook call.
        unsafe { (*self.0).in_hook.set(false) };
    }
}

/// A number that no other running thread has: `pthread_self()`, which on Linux is the address of
/// the thread's control block, read from the thread pointer without touching TLS tables (a TLS
/// lookup from a shared library is a call into the dynamic loader). Never 0. A thread that starts
/// after another ended may get the same number; thread exit and creation order all memory
/// accesses of the old thread before those of the new one, which is all that
/// [`crate::registry::Counter`] needs.
#[inline(always)]
pub fn thread_token() -> usize {
    // SAFETY: pthread_self has no preconditions and cannot fail.
    unsafe { libc::pthread_self() as usize }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn spin_lock_counts_exactly_under_contention() {
        let lock = Arc::new(SpinLock::new(0u64));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let lock = Arc::clone(&lock);
                std::thread::spawn(move || {
                    for _ in 0..10_000 {
                        *lock.lock() += 1;
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
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
    fn hook_scope_is_not_reentrant_on_one_thread() {
        let outer = HookScope::enter();
        assert!(outer.is_some());
        assert!(HookScope::enter().is_none());
        // Another thread has its own flag.
        assert!(std::thread::spawn(|| HookScope::enter().is_some()).join().unwrap());
        drop(outer);
        assert!(HookScope::enter().is_some());
    }

    #[test]
    fn thread_tokens_differ_between_live_threads() {
        let here = thread_token();
        assert_ne!(here, 0);
        assert_eq!(here, thread_token());
        let barrier = Arc::new(std::sync::Barrier::new(2));
        let b = Arc::clone(&barrier);
        let other = std::thread::spawn(move || {
            let token = thread_token();
            b.wait();
            token
        });
        barrier.wait();
        assert_ne!(other.join().unwrap(), here);
    }
}
