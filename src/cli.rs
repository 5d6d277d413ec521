//! Command-line definitions (clap). Kept apart from `main.rs` so that help text and flags are in one place.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "backscope",
    version,
    about = "Evidence about which GPU backend and kernel path a local LLM runtime really uses"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Read GPU binaries and runtime install trees: which GPU archs each library carries code for, which ggml
    /// kernel families, what their dependencies resolve to, and (with --arch) what runs on one GPU.
    Scan(ScanArgs),
    /// Run a model across endpoints (Ollama, llama-server; external or started by backscope), num_gpu values
    /// (layers offloaded to the GPU, not a GPU count), prompts and repetitions, surviving crashes, and record
    /// every cell (SQLite + a run directory).
    Sweep(crate::sweep::SweepArgs),
    /// Write a GGUF model with random weights, real tokenizer metadata and the tensor shapes/types of a real model,
    /// so the same kernels dispatch without downloading weights.
    Synth(crate::synth::SynthArgs),
    /// Run a command under the dispatch observer and report which GPU kernels really ran.
    Trace(crate::tracecmd::TraceArgs),
}

#[derive(Debug, Args)]
pub struct ScanArgs {
    /// Files or directories: an Ollama lib dir (/usr/lib/ollama), a llama.cpp build dir, /opt/rocm/lib,
    /// an unpacked wheel, a single libggml-hip.so or .hsaco/.co file.
    #[arg(required = true)]
    pub paths: Vec<PathBuf>,
    /// Answer for one GPU: gfx900, gfx906, gfx90a:xnack-, gfx1201, sm_86 (or 8.6).
    #[arg(long)]
    pub arch: Option<String>,
    /// Per-kernel table with resources (registers, spills, LDS/shared memory, scratch, workgroup size).
    #[arg(long)]
    pub kernels: bool,
    /// Print the records and claims as JSON (schema: docs/scan-json.md).
    #[arg(long)]
    pub json: bool,
    /// Write the output to this file instead of standard output.
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Extra library directories for dependency resolution, searched where ld.so searches LD_LIBRARY_PATH.
    #[arg(long = "library-path", value_name = "DIR")]
    pub library_path: Vec<PathBuf>,
    /// Follow symlinks that lead outside the given paths (by default they are reported and not followed, so
    /// that a link to / or /proc/self/root does not walk the whole file system).
    #[arg(long)]
    pub follow_outside: bool,
}
