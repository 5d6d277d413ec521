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

mod crash;
mod dl;
mod ffi;
mod glibc_dlsym;
mod graphs;
pub mod hooks;
mod locus;
mod observe;
mod real;
mod registry;
mod start;
mod state;
mod sync;
mod writer;

/// Environment variables that configure the observer (defined by the trace format crate).
pub use format::env;
