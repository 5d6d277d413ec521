//! backscope's dispatch observer: an `LD_PRELOAD` library that counts GPU kernel launches by
//! kernel name inside a process, without changing what the process does.
//!
//! It interposes on the CUDA runtime/driver and HIP launch, registration and graph entry points
//! (module `hooks`), forwards every call unchanged to the real runtime found behind it (`real`),
//! counts launches per kernel with their grid/block shapes (`registry`), follows stream capture so
//! that graph replays count the kernels they run (`graphs`), and writes the counts as time windows
//! to a JSON Lines trace file per process, within a byte budget (`writer`, format in
//! `docs/trace-format.md`).
//!
//! Rules the code keeps:
//! * no panic crosses into C: every observation runs under `catch_unwind` and a panic switches the
//!   observer off (`state::guarded`);
//! * the real function is always called with the caller's arguments, and its result returned;
//! * after a kernel's first launch, a launch takes no lock and allocates nothing;
//! * fork-safe: locks are taken around `fork`, a child gets its own counters, file and thread;
//! * output problems produce one line on stderr and switch the observer off.

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks)]

mod ffi;
mod graphs;
pub mod hooks;
mod observe;
mod real;
mod registry;
mod state;
mod sync;
mod writer;

/// Environment variables that configure the observer.
pub mod env {
    /// Directory for `trace-<pid>.jsonl` files.
    pub const TRACE_DIR: &str = "BACKSCOPE_TRACE_DIR";
    /// Exact trace path (`%p` becomes the pid); overrides `TRACE_DIR`.
    pub const TRACE_FILE: &str = "BACKSCOPE_TRACE_FILE";
    /// Window length in milliseconds (default 50; 0 = write at exit only).
    pub const TRACE_INTERVAL_MS: &str = "BACKSCOPE_TRACE_INTERVAL_MS";
    /// Most distinct kernels tracked before the overflow slot is used (default 1,048,576).
    pub const MAX_KERNELS: &str = "BACKSCOPE_MAX_KERNELS";
    /// Most bytes of one process's trace file (default 1 GiB; `0`: no limit; `K`/`M`/`G` suffixes).
    pub const TRACE_MAX_BYTES: &str = "BACKSCOPE_TRACE_MAX_BYTES";
    /// Test-only: `1` makes kernel registration panic inside the observer (fault injection).
    pub const TEST_INJECT_PANIC: &str = "BACKSCOPE_TEST_INJECT_PANIC";
}

#[cfg(test)]
mod tests {
    #[test]
    fn env_names_match_what_the_observer_reads() {
        assert_eq!(crate::state::ENV_TRACE_DIR.to_str().unwrap(), super::env::TRACE_DIR);
        assert_eq!(crate::state::ENV_TRACE_FILE.to_str().unwrap(), super::env::TRACE_FILE);
        assert_eq!(crate::state::ENV_INTERVAL_MS.to_str().unwrap(), super::env::TRACE_INTERVAL_MS);
        assert_eq!(crate::state::ENV_MAX_KERNELS.to_str().unwrap(), super::env::MAX_KERNELS);
        assert_eq!(crate::state::ENV_MAX_BYTES.to_str().unwrap(), super::env::TRACE_MAX_BYTES);
        assert_eq!(crate::state::ENV_TEST_INJECT_PANIC.to_str().unwrap(), super::env::TEST_INJECT_PANIC);
    }
}
