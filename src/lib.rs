//! backscope: evidence about which GPU backend and kernel path a local LLM runtime really uses.
//!
//! Data flows one way: bytes, runs and logs are decoded into typed records (`scan`), records become
//! claims in one evidence model (`evidence`), and results are rendered through one output layer (`output`).
//!
//! Each command has a `run` taking an options value ([`scan::run`], [`sweep::run`], [`synth::run`],
//! [`tracecmd::run`], [`maps::run`]) and returning its exit status ([`exit`]); the `backscope` binary fills the options from the
//! command line.

// Only the output layer writes to standard output and standard error (see `output`); a print macro anywhere else
// would bypass its buffering, escaping and closed-pipe handling.
#![warn(clippy::print_stdout, clippy::print_stderr, clippy::dbg_macro)]

pub mod bisect;
pub mod builds;
pub mod cache;
pub mod doctor;
pub mod evidence;
pub mod exit;
pub mod gate;
pub mod gguf_file;
pub mod gpucode;
pub mod inputs;
pub mod kernel_log;
pub mod kernels;
pub mod knowledge;
pub mod logfacts;
pub mod logscmd;
pub mod maps;
pub mod observe;
pub mod output;
pub mod predict;
pub mod proc;
pub mod push;
pub mod report;
pub mod run;
pub mod scan;
pub mod support_matrix;
pub mod sweep;
pub mod synth;
/// Reading trace files: the `backscope-trace-reader` crate.
pub use trace_reader as trace;
pub mod trace_summary;
pub mod tracecmd;
pub mod vulkan;
pub mod vulkan_capability;
pub mod vulkan_profile;
