//! backscope: evidence about which GPU backend and kernel path a local LLM runtime really uses.
//!
//! Data flows one way: bytes, runs and logs are decoded into typed records, records become claims in one evidence
//! model ([`evidence`]), and results are rendered through one output layer ([`output`]).
//!
//! The tree says which is which. [`commands`] holds one folder or file per subcommand (its options, its `run`, its
//! view); a command never names another command. Everything else is the floor the commands stand on, grouped by
//! domain, and never names a command:
//! - [`gpu`]: GPU architectures, the GPU-binary engine, kernel names and the knowledge tables;
//! - [`observe`]: what observation says: the observers and how to enable them, trace summaries, Vulkan pipelines
//!   and profiles, the kernel log, facts from server logs;
//! - [`host`]: the machine: processes, file inputs, the cache, who this host is;
//! - [`run`]: the run format, its stores and its reader; [`run_analysis`]: what is said about a run (aggregation,
//!   statistics, claims, crash forensics, bisect verdicts);
//! - [`builds`]: llama.cpp builds; [`support_matrix`]: the gate's matrix; [`output`], [`evidence`], [`exit`],
//!   [`gguf_file`].
//!
//! Each command has a `run` taking an options value and returning its exit status ([`exit`]); the `backscope`
//! binary fills the options from the command line.

// Only the output layer writes to standard output and standard error (see `output`); a print macro anywhere else
// would bypass its buffering, escaping and closed-pipe handling.
#![warn(clippy::print_stdout, clippy::print_stderr, clippy::dbg_macro)]

pub mod builds;
pub mod commands;
pub mod evidence;
pub mod exit;
pub mod gguf_file;
pub mod gpu;
pub mod host;
pub mod observe;
pub mod output;
pub mod run;
pub mod run_analysis;
pub mod support_matrix;
/// Reading trace files: the `backscope-trace-reader` crate.
pub use trace_reader as trace;
