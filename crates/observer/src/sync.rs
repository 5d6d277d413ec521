//! The per-thread state a hook reaches with one thread-local lookup (the re-entrancy flag and the
//! link to the thread's crash-locus ring). The observer's lock is `format::spin::SpinLock`, shared
//! with the Vulkan layer.

use std::cell::Cell;

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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

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
        use format::runtime::thread_token;
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
