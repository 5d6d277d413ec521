//! `backscope trace`'s flags, and their conversion into `backscope::commands::trace::TraceOptions`.

use std::path::PathBuf;

use backscope::commands::trace::TraceOptions;
use clap::Args;

#[derive(Debug, Args)]
pub struct TraceArgs {
    /// The observer library (default: $BACKSCOPE_OBSERVER_SO, else next to the backscope executable or in its
    /// ../lib/backscope, where the Debian package installs it).
    #[arg(long, value_name = "PATH")]
    pub observer: Option<PathBuf>,
    /// The Vulkan layer library (default: $BACKSCOPE_VKLAYER_SO, else next to the backscope executable or in its
    /// ../lib/backscope). The layer is enabled through the Vulkan loader's VK_ADD_LAYER_PATH (VK_LAYER_PATH when
    /// another backscope's layer is installed system-wide) and VK_INSTANCE_LAYERS.
    #[arg(long, value_name = "PATH")]
    pub vklayer: Option<PathBuf>,
    /// ggml-vulkan's debug labels (GGML_VK_DEBUG_MARKERS=1): pipelines named by ggml and each dispatch's graph node
    /// (`MUL_MAT blk.0.attn_q`). They cost ggml string building per dispatch (7% of decode on an H200, BENCHMARKS.md).
    /// Default: on for a command (a diagnosis), off for --env (a service left traced); without them pipelines are
    /// named from the library's embedded shaders where it has symbols, else by SPIR-V hash.
    #[arg(long, value_name = "on|off", value_parser = ["on", "off"])]
    pub labels: Option<String>,
    /// Directory for the trace files (default: a new directory under the system temp dir; with --env,
    /// /var/tmp/backscope-traces-UID, private to you). Must be empty or new.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Length of a trace time window in milliseconds (at most 3600000: an hour; 0: one window, written at exit).
    /// Default: 50 for a command; 1000 with --env (a service left traced for days: a twentieth of the bytes).
    #[arg(long, value_parser = clap::value_parser!(u64).range(0..=3_600_000))]
    pub interval_ms: Option<u64>,
    /// Byte budget of one process's trace (BACKSCOPE_TRACE_MAX_BYTES; K/M/G/T suffixes, powers of 1024; 0: no
    /// limit). Default: the observers' 1G (printed with --env).
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub max_bytes: Option<u64>,
    /// Rotate each process's trace through N segment files (BACKSCOPE_TRACE_ROTATE, N >= 2; 0 or 1: one file, cut at
    /// the budget): the budget is split among them and the oldest is deleted when a new one begins, so that a crash,
    /// device loss or hang after days is still recorded. Default: 4 with --env, none for a command.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(0..=64))]
    pub rotate: Option<u32>,
    /// Turn ggml's CUDA graphs off in the traced command (GGML_CUDA_DISABLE_GRAPHS=1). The observer attributes graph
    /// replays to their captured kernels either way; this makes every launch a direct one.
    #[arg(long)]
    pub no_graphs: bool,
    /// Print the environment lines that observe a service (e.g. `ollama serve`), then exit.
    #[arg(long, conflicts_with = "read")]
    pub env: bool,
    /// With --env: print a systemd drop-in for the given unit instead (e.g. ollama.service).
    #[arg(long, value_name = "UNIT", requires = "env")]
    pub systemd: Option<String>,
    /// Summarise the trace files already in DIR instead of running a command.
    #[arg(long, value_name = "DIR")]
    pub read: Option<PathBuf>,
    /// Output: text (the default), --json (the summary: docs/trace-format.md), markdown, html.
    #[command(flatten)]
    pub output: super::output::OutputArgs,
    /// Rows of the per-kernel table (0 = all).
    #[arg(long, default_value_t = 40)]
    pub top: usize,
    /// Run as if on another GPU: every Vulkan device answers ggml-vulkan's device queries from PROFILE (an id of
    /// data/vulkan_profiles/, e.g. gfx900-radv, or a profile / `vulkaninfo --json` / gpuinfo.org profile file), so the
    /// trace records the pipelines ggml picks for that device. Shaders are replaced by empty ones: numbers are garbage.
    #[arg(long, value_name = "PROFILE", conflicts_with_all = ["read", "env"])]
    pub impersonate: Option<String>,
    /// The command to run, after `--`.
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// A byte count as `BACKSCOPE_TRACE_MAX_BYTES` takes it.
fn parse_size(text: &str) -> Result<u64, String> {
    trace_format::env::parse_bytes(text)
        .ok_or_else(|| format!("{text:?} is not a byte count (digits with an optional K, M, G or T suffix)"))
}

impl From<TraceArgs> for TraceOptions {
    fn from(a: TraceArgs) -> Self {
        TraceOptions {
            observer: a.observer,
            vklayer: a.vklayer,
            labels: a.labels.map(|l| l == "on"),
            dir: a.dir,
            interval_ms: a.interval_ms,
            max_bytes: a.max_bytes,
            rotate: a.rotate,
            no_graphs: a.no_graphs,
            env: a.env,
            systemd: a.systemd,
            read: a.read,
            output: a.output.into(),
            top: a.top,
            impersonate: a.impersonate,
            command: a.command,
        }
    }
}
