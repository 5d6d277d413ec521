//! The `backscope-trace` format, defined once for every program that writes or reads it: the CUDA/HIP
//! dispatch observer (`crates/observer`), a Vulkan layer, `backscope trace` and `sweep --trace` (through
//! `backscope-trace-reader`). The format itself is specified in `docs/trace-format.md`.
//!
//! What lives here:
//! * [`FORMAT`], [`VERSION`] and [`MIN_VERSION`];
//! * [`env`]: the environment variables that configure an observer, with their defaults;
//! * [`naming`]: trace file names (`trace-<pid>.jsonl`, the `BACKSCOPE_TRACE_FILE` pattern);
//! * [`clock`]: the trace clock, `CLOCK_MONOTONIC` nanoseconds;
//! * [`record`]: record kinds, field names, and one writer per record, over [`json`]'s
//!   allocation-free JSON output (usable from a signal handler with a fixed buffer);
//! * [`sink`]: the trace file on the writer's side (exclusive creation, the byte budget, the
//!   `truncated` record);
//! * [`slots`]: the lock-free chunked table of counter slots both observers count into;
//! * [`spin`]: the fork-safe spin lock both observers take on their cold paths;
//! * [`spirv`]: the SPIR-V walk and module hash that name Vulkan pipelines without a debug name;
//! * [`vulkan`]: the Vulkan layer's name, library file and manifest;
//! * the runtime both observer libraries share (each cdylib links its own copy, with its own statics):
//!   [`crash`] (the fatal-signal handler: flush request, record, chaining), [`fork`] (one table of fork
//!   handlers that each module registers into), [`writer`] (the writer thread, shape deltas, a trace that
//!   stops early) and [`runtime`] (stderr lines, panics, pinning the library, thread ids).
//!
//! The crate depends on libc only; the format part takes no lock.

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_debug_implementations)]

pub mod clock;
pub mod crash;
pub mod env;
pub mod fork;
pub mod json;
pub mod naming;
pub mod profile_form;
pub mod record;
pub mod runtime;
pub mod sink;
pub mod slots;
pub mod spin;
pub mod spirv;
pub mod vulkan;
pub mod writer;

/// Value of the header's `format` field.
pub const FORMAT: &str = "backscope-trace";

/// The version written. 3 added the `crash`, `signal_returned` and `device` records, Vulkan pipelines
/// as kernels (`api` `vulkan`, with `device`, `spirv_hash`, `local_size` and `stats`), `submits` in
/// windows and `writer` in the header. A reader that knows only 2 would take a crashed process for
/// one killed without a word and read Vulkan workgroup counts as CUDA grids, so it must refuse.
/// 2 added the `truncated` record, `max_bytes` in the header and `expired_captures` in windows.
pub const VERSION: u32 = 3;

/// The version the segments of a rotating trace carry (`BACKSCOPE_TRACE_ROTATE`; a trace that does not rotate is
/// written as [`VERSION`]). 4 added the `rotated` record and the header's `segment`, `segments_kept`,
/// `segment_max_bytes` and `previous`: a later segment's counts start where the segment before it ended, so a
/// reader that knows only 3 would take them for the whole process's, and must refuse.
pub const ROTATING_VERSION: u32 = 4;

/// The newest version a reader of this crate's era reads.
pub const MAX_VERSION: u32 = ROTATING_VERSION;

/// The header's `writer` of the CUDA/HIP dispatch observer (`crates/observer`); the Vulkan layer's is
/// [`vulkan::WRITER_NAME`].
pub const OBSERVER_WRITER_NAME: &str = "backscope-observer";

/// The oldest version a reader of this crate's era must still read.
pub const MIN_VERSION: u32 = 1;
