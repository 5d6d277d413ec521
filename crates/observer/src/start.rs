//! Starting the observer in a process (at the first hook call that observes): configuration, the
//! kernel table and, once per process image, each module's fork handlers; once observation is on,
//! the writer thread. The one module that knows them all, so that `state` knows none of them.

use std::sync::atomic::{AtomicBool, Ordering};

use format::fork::{self, ForkHandlers};

use crate::{crash, graphs, locus, registry, state, writer};

/// Work done once per process image (inherited by forked children): tables, fork handlers.
static IMAGE_READY: AtomicBool = AtomicBool::new(false);

/// Whether launches should be observed; starts the observer at the first call. The hot path is
/// one atomic load (`state::active_with`).
#[inline(always)]
pub fn active() -> bool {
    state::active_with(start, started)
}

/// Start-up work done while other threads wait: nothing here may take the dynamic loader's lock (no
/// dlopen/dlsym/dladdr, no thread creation), because a waiting thread may hold it (a library
/// constructor registering kernels). Returns the window interval.
fn start() -> Result<u64, &'static str> {
    let config = state::configure()?;
    if !IMAGE_READY.load(Ordering::Acquire) {
        registry::init(config.max_kernels);
        // In the order a child runs them: the locks first (prepare handlers run in reverse, so the
        // registry's lock is taken before the graphs'), then each module's per-process state, and
        // the state last, which makes the child start its own trace.
        let handlers: [ForkHandlers; 8] = [
            graphs::FORK_LOCK,
            registry::FORK_LOCK,
            writer::FORK,
            registry::FORK_RESET,
            graphs::FORK_RESET,
            crash::FORK,
            locus::FORK,
            state::FORK,
        ];
        for handlers in handlers {
            fork::register(handlers).map_err(|_| "pthread_atfork failed; not observing")?;
        }
        IMAGE_READY.store(true, Ordering::Release);
    }
    locus::OPEN_WINDOW_T0.store(state::start_ns(), Ordering::Relaxed);
    Ok(config.interval_ms)
}

/// Observation is on: the writer thread (with interval 0 it only serves the crash handler's flush
/// requests).
fn started(interval_ms: u64) {
    writer::spawn_thread(interval_ms);
}
