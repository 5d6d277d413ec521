//! One table of fork handlers per observer library: each module that keeps locks or per-process state registers
//! what it does around `fork` here, instead of one module that knows them all (the CUDA/HIP observer's `state.rs`
//! once called every module's reset, and so imported every module while every module imported it).
//!
//! The table is static (no allocation, no lock on the fork path) and holds [`MAX_HANDLERS`] entries; the first
//! registration installs one `pthread_atfork` triple for the whole table. As `pthread_atfork` orders its own
//! handlers, `prepare` handlers run in the reverse order of registration (so that a module registered later, which
//! may take its locks while holding an earlier module's, releases first) and `parent`/`child` handlers in the order
//! of registration. Every handler runs under `catch_unwind`: a panic never unwinds into libc.
//!
//! Each cdylib that links this crate has its own copy of the table.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use crate::spin::SpinLock;

/// Entries the table holds (the observers register about ten).
pub const MAX_HANDLERS: usize = 32;

/// What one module does around `fork`; a `None` does nothing.
#[derive(Clone, Copy, Debug)]
pub struct ForkHandlers {
    /// Before `fork`, in the parent: take the locks whose data the child must find consistent.
    pub prepare: Option<fn()>,
    /// After `fork`, in the parent: release them.
    pub parent: Option<fn()>,
    /// After `fork`, in the (single-threaded) child: release or abandon locks, drop the parent's state.
    pub child: Option<fn()>,
}

impl ForkHandlers {
    /// Only a child handler.
    pub const fn child(child: fn()) -> ForkHandlers {
        ForkHandlers { prepare: None, parent: None, child: Some(child) }
    }
}

/// Why a registration failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ForkError {
    /// More than [`MAX_HANDLERS`] registrations.
    TableFull,
    /// `pthread_atfork` failed (out of memory).
    AtforkFailed,
}

struct Entry {
    prepare: AtomicUsize,
    parent: AtomicUsize,
    child: AtomicUsize,
}

static TABLE: [Entry; MAX_HANDLERS] =
    [const { Entry { prepare: AtomicUsize::new(0), parent: AtomicUsize::new(0), child: AtomicUsize::new(0) } };
        MAX_HANDLERS];
/// Entries filled; each is complete before the count covers it.
static COUNT: AtomicUsize = AtomicUsize::new(0);
static INSTALLED: AtomicBool = AtomicBool::new(false);
/// Serialises registrations (cold: at start-up).
static REGISTERING: SpinLock<()> = SpinLock::new(());

fn as_word(f: Option<fn()>) -> usize {
    f.map_or(0, |f| f as usize)
}

/// Adds `handlers` to the table. Register each module's handlers once per process image (a prepare handler that
/// runs twice would wait on its own lock); as a second guard, handlers equal to registered ones (by address) are not
/// added again.
pub fn register(handlers: ForkHandlers) -> Result<(), ForkError> {
    let _registering = REGISTERING.lock();
    let words = [as_word(handlers.prepare), as_word(handlers.parent), as_word(handlers.child)];
    let count = COUNT.load(Ordering::Acquire);
    let known = TABLE[..count].iter().any(|e| {
        [e.prepare.load(Ordering::Relaxed), e.parent.load(Ordering::Relaxed), e.child.load(Ordering::Relaxed)] == words
    });
    if known {
        return Ok(());
    }
    let entry = TABLE.get(count).ok_or(ForkError::TableFull)?;
    entry.prepare.store(words[0], Ordering::Relaxed);
    entry.parent.store(words[1], Ordering::Relaxed);
    entry.child.store(words[2], Ordering::Relaxed);
    COUNT.store(count + 1, Ordering::Release);
    if !INSTALLED.load(Ordering::Acquire) {
        // SAFETY: the three functions are `extern "C" fn()` that never unwind.
        if unsafe { libc::pthread_atfork(Some(on_prepare), Some(on_parent), Some(on_child)) } != 0 {
            return Err(ForkError::AtforkFailed);
        }
        INSTALLED.store(true, Ordering::Release);
    }
    Ok(())
}

fn call(word: usize) {
    if word != 0 {
        // SAFETY: a non-zero word was stored from a `fn()` by `register`.
        let f: fn() = unsafe { std::mem::transmute::<usize, fn()>(word) };
        let _ = std::panic::catch_unwind(f);
    }
}

fn entries() -> &'static [Entry] {
    &TABLE[..COUNT.load(Ordering::Acquire).min(MAX_HANDLERS)]
}

extern "C" fn on_prepare() {
    entries().iter().rev().for_each(|e| call(e.prepare.load(Ordering::Relaxed)));
}

extern "C" fn on_parent() {
    entries().iter().for_each(|e| call(e.parent.load(Ordering::Relaxed)));
}

extern "C" fn on_child() {
    REGISTERING.release_for_fork();
    entries().iter().for_each(|e| call(e.child.load(Ordering::Relaxed)));
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;

    static ORDER: SpinLock<Vec<&'static str>> = SpinLock::new(Vec::new());
    static CHILD_RAN: AtomicU32 = AtomicU32::new(0);

    fn prepare_a() {
        ORDER.lock().push("prepare a");
    }
    fn prepare_b() {
        ORDER.lock().push("prepare b");
    }
    fn parent_a() {
        ORDER.lock().push("parent a");
    }
    fn parent_b() {
        ORDER.lock().push("parent b");
    }
    fn child_b() {
        CHILD_RAN.fetch_add(1, Ordering::Relaxed);
    }

    #[test]
    fn handlers_run_around_fork_in_pthread_atfork_order_and_register_once() {
        let a = ForkHandlers { prepare: Some(prepare_a), parent: Some(parent_a), child: None };
        let b = ForkHandlers { prepare: Some(prepare_b), parent: Some(parent_b), child: Some(child_b) };
        register(a).unwrap();
        register(b).unwrap();
        register(a).unwrap();
        let count = COUNT.load(Ordering::Acquire);
        assert_eq!(entries().len(), count);
        // SAFETY: fork in a test; the child only calls async-signal-safe functions before _exit.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // The child handler ran in the child (counted there), and a second registration of `a` added nothing.
            let ok = CHILD_RAN.load(Ordering::Relaxed) == 1;
            // SAFETY: ends the child without running the test harness's exit handlers.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        let mut status = 0;
        // SAFETY: waits for the child forked above.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert_eq!(status, 0, "the child handler ran once in the child");
        assert_eq!(CHILD_RAN.load(Ordering::Relaxed), 0, "not in the parent");
        let order = ORDER.lock().clone();
        assert_eq!(order, ["prepare b", "prepare a", "parent a", "parent b"]);
    }
}
