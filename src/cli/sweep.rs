//! `backscope sweep`'s flags and subcommands, and their conversion into `backscope::commands::sweep`'s options.

use std::path::PathBuf;

use backscope::commands::sweep::{
    ExportOptions, ImportOptions, ReportOptions, Resume, RunOptions, SweepCommand, SweepFlags, TimeoutSpec,
    MAX_TEMPERATURE, MAX_TIMEOUT_S,
};
use clap::{Args, Subcommand};

use super::db::DbFlag;
use super::numbers;

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true, after_long_help = AFTER_HELP)]
pub struct SweepArgs {
    #[command(subcommand)]
    pub action: Option<SweepAction>,
    // Boxed: the run flags are many, and `Command` should not be as large as its largest subcommand.
    #[command(flatten)]
    pub run: Box<RunArgs>,
}

const AFTER_HELP: &str = "\
Examples:
  The investigation's replay (two Ollama services on one GPU):
    backscope sweep --endpoint rocm=http://127.0.0.1:11435 --endpoint vulkan=http://127.0.0.1:11434 \\
        --model qwen3.5:2b --num-gpu 0,1,2,-1 --num-predict 512 --epochs 1
  Servers backscope starts (CPU vs Vulkan from one llama.cpp build):
    backscope sweep --server cpu=llama-server:--device,none --server vulkan=llama-server:--device,Vulkan0 \\
        --env vulkan:GGML_VK_VISIBLE_DEVICES=0 --llama-bin ~/llama.cpp/build/bin --model tiny.gguf --num-gpu 0,1,-1
  Everything else (per-endpoint programs, ports, prompts from files, pass-through options): --spec FILE.toml,
  documented in docs/sweep.md.";

#[derive(Debug, Subcommand)]
pub enum SweepAction {
    /// Print stored records as JSON Lines (one record per line, the layout of result.json).
    Export(ExportArgs),
    /// Store llama-bench `-o json` / `-o jsonl` output as records of a new run.
    Import(ImportArgs),
    /// Print the table and claims of a stored run again.
    Report(ReportArgs),
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Sweep spec in TOML: the full form (docs/sweep.md). Flags add endpoints to it and replace the lists they give.
    #[arg(long, value_name = "FILE")]
    pub spec: Option<PathBuf>,
    /// A server backscope does not start, as NAME=URL (http://127.0.0.1:11434). Its API — Ollama or llama-server —
    /// is detected (/api/version, /props, /health).
    #[arg(long = "endpoint", value_name = "NAME=URL")]
    pub endpoints: Vec<String>,
    /// A server backscope starts, supervises and stops, as NAME=PRESET[:ARG,ARG,…]. PRESET is llama-server (gets
    /// `-m MODEL --host 127.0.0.1 --port P -ngl N -lv 4 --metrics`) or ollama (`ollama serve` with OLLAMA_HOST);
    /// the ARGs, split at commas and never given to a shell, are appended: cpu=llama-server:--device,none
    #[arg(long = "server", value_name = "NAME=PRESET[:ARGS]")]
    pub servers: Vec<String>,
    /// Environment variable for a managed server, as NAME:KEY=VALUE (vulkan:GGML_VK_VISIBLE_DEVICES=0,
    /// rocm:HSA_OVERRIDE_GFX_VERSION=9.0.6, ol:OLLAMA_VULKAN=1).
    #[arg(long = "env", value_name = "NAME:KEY=VALUE")]
    pub env: Vec<String>,
    /// The program of a managed server, as NAME=PATH (default: llama-server in --llama-bin, else on PATH; ollama on PATH).
    #[arg(long = "program", value_name = "NAME=PATH")]
    pub programs: Vec<String>,
    /// Directory holding llama-server (a llama.cpp build's bin directory).
    #[arg(long, value_name = "DIR")]
    pub llama_bin: Option<PathBuf>,
    /// Model: an Ollama name (qwen3.5:2b), or a GGUF file for managed llama-server. Repeat or separate with commas.
    #[arg(long = "model", short = 'm', value_delimiter = ',', value_name = "MODEL")]
    pub models: Vec<String>,
    /// num_gpu values: the number of model LAYERS offloaded to the GPU, not a number of GPUs; -1 lets the runtime
    /// decide. Ollama gets it per request (options.num_gpu). llama-server takes it at start (-ngl N), so each new value
    /// restarts a managed llama-server; -1 omits -ngl (llama.cpp's default, auto). Default: -1.
    #[arg(long = "num-gpu", value_delimiter = ',', allow_negative_numbers = true, value_name = "N,…")]
    pub num_gpu: Vec<i64>,
    /// Tokens to generate per request (a list sweeps them). Default: 128.
    #[arg(long = "num-predict", value_delimiter = ',', value_name = "N,…")]
    pub num_predict: Vec<i64>,
    /// A prompt (repeatable). Default: "Why is the sky blue?".
    #[arg(long = "prompt", value_name = "TEXT")]
    pub prompts: Vec<String>,
    /// A prompt read from a file (repeatable).
    #[arg(long = "prompt-file", value_name = "FILE")]
    pub prompt_files: Vec<PathBuf>,
    /// A generated prompt of about N tokens (common words; the server-reported count is recorded).
    #[arg(long = "prompt-tokens", value_delimiter = ',', value_name = "N,…")]
    pub prompt_tokens: Vec<u32>,
    /// Passes over the whole grid. Each pass runs every endpoint in turn, so several passes interleave the endpoints
    /// over time and drift (heat, other load) does not favour one. Default: 1.
    #[arg(long)]
    pub epochs: Option<u32>,
    /// Consecutive repetitions of each cell within a pass. Default: 1.
    #[arg(long)]
    pub repetitions: Option<u32>,
    /// Sampling temperature. Default: 0 (greedy), so runs are comparable.
    #[arg(long, allow_negative_numbers = true, value_parser = numbers::decimal(-MAX_TEMPERATURE, MAX_TEMPERATURE))]
    pub temperature: Option<f64>,
    /// Sampling seed. Default: 42.
    #[arg(long)]
    pub seed: Option<i64>,
    /// Pass-through option KEY=VALUE (repeatable): Ollama `options`, or top-level llama.cpp request fields. VALUE is
    /// read as JSON when it parses (num_ctx=4096, stop=["\n"]), else as a string.
    #[arg(long = "option", value_name = "KEY=VALUE")]
    pub options: Vec<String>,
    /// Ask for one JSON body instead of a stream (then there is no time to first token).
    #[arg(long)]
    pub no_stream: bool,
    /// Seconds to connect. Default: 5.
    #[arg(long, value_name = "S", value_parser = numbers::seconds(MAX_TIMEOUT_S))]
    pub connect_timeout: Option<f64>,
    /// Seconds of silence before a request counts as hung (model loading included). Default: 300.
    #[arg(long, value_name = "S", value_parser = numbers::seconds(MAX_TIMEOUT_S))]
    pub read_timeout: Option<f64>,
    /// Seconds for a whole request. Default: 1800.
    #[arg(long, value_name = "S", value_parser = numbers::seconds(MAX_TIMEOUT_S))]
    pub request_timeout: Option<f64>,
    /// Seconds for a managed server to become ready (GET /health or /api/version answers 200). Default: 300.
    #[arg(long, value_name = "S", value_parser = numbers::seconds(MAX_TIMEOUT_S))]
    pub ready_timeout: Option<f64>,
    /// Seconds between SIGTERM and SIGKILL when stopping a managed server. Default: 10.
    #[arg(long, value_name = "S", value_parser = numbers::seconds(MAX_TIMEOUT_S))]
    pub grace: Option<f64>,
    /// Where records go.
    #[command(flatten)]
    pub db: DbFlag,
    /// Where run directories are created (one per run, named by its run id).
    #[arg(long, default_value = "backscope-runs", value_name = "DIR")]
    pub runs_dir: PathBuf,
    /// Continue an interrupted run: its stored plan, skipping recorded cells. RUN_ID defaults to the latest sweep in
    /// --db. Other sweep flags are refused (the plan is the run's).
    #[arg(long, value_name = "RUN_ID", num_args = 0..=1, default_missing_value = "latest")]
    pub resume: Option<String>,
    /// No progress bar and no table; print only the run id line.
    #[arg(long, short = 'q')]
    pub quiet: bool,
    /// Output of the run: text (the table and claims), --json (events as JSON Lines while it runs: run_started,
    /// server_ready, first_token, cell_finished with the record, run_finished with the claims), markdown or html
    /// (the report, e.g. with -o report.html).
    #[command(flatten)]
    pub output: super::output::OutputArgs,
    /// Print the resolved endpoints, server command lines and cells, then exit without running anything.
    #[arg(long)]
    pub dry_run: bool,
    /// With --resume on a shared PostgreSQL --db: continue a run that another host owns, moving it to this host
    /// (only when that host no longer runs it).
    #[arg(long, requires = "resume")]
    pub take_over: bool,
    /// With --resume: start what the stored run names (its servers' programs, arguments and environment, the
    /// observer it preloads) although this command line does not give it. Without it such a resume shows the
    /// stored commands and exits 2. A run of external endpoints only starts nothing and needs no --yes.
    #[arg(long, requires = "resume")]
    pub yes: bool,
    /// Join each request to the GPU kernels that ran during it: managed servers (and the runners they start) get the
    /// dispatch observer (LD_PRELOAD, as `backscope trace`), and each record gets the kernel launches of its time
    /// window. CUDA and HIP launches are observed, and Vulkan dispatches (through backscope's Vulkan layer, enabled with
    /// the Vulkan loader's environment); CPU work is not.
    #[arg(long)]
    pub trace: bool,
    /// The observer library for --trace (default: $BACKSCOPE_OBSERVER_SO, else next to the backscope executable or
    /// in its ../lib/backscope).
    #[arg(long, value_name = "PATH")]
    pub observer: Option<PathBuf>,
    /// The Vulkan layer library for --trace (default: $BACKSCOPE_VKLAYER_SO, else next to the backscope executable
    /// or in its ../lib/backscope).
    #[arg(long, value_name = "PATH")]
    pub vklayer: Option<PathBuf>,
    /// Trace directory of an external endpoint, as NAME=DIR: where its server, started with the environment of
    /// `backscope trace --env --dir DIR`, writes trace files (implies --trace).
    #[arg(long = "trace-dir", value_name = "NAME=DIR")]
    pub trace_dirs: Vec<String>,
    /// Observer window length for managed servers with --trace, in ms. Default: 20.
    #[arg(long, value_name = "MS")]
    pub trace_interval_ms: Option<u64>,
}

#[derive(Debug, Args)]
pub struct ExportArgs {
    /// JSON Lines (the format; accepted for clarity).
    #[arg(long)]
    pub jsonl: bool,
    #[command(flatten)]
    pub db: DbFlag,
    /// Only this run (repeatable); default: every run in the database.
    #[arg(long = "run", value_name = "RUN_ID")]
    pub runs: Vec<String>,
    /// Write to FILE instead of standard output.
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct ImportArgs {
    /// llama-bench output files (-o json or -o jsonl).
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
    #[command(flatten)]
    pub db: DbFlag,
    #[arg(long, default_value = "backscope-runs", value_name = "DIR")]
    pub runs_dir: PathBuf,
    /// Endpoint name the records get.
    #[arg(long, default_value = "llama-bench")]
    pub endpoint: String,
}

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// The run (default: the latest).
    pub run_id: Option<String>,
    #[command(flatten)]
    pub db: DbFlag,
    /// Output: text (the default), --json (the run's claims), markdown, html.
    #[command(flatten)]
    pub output: super::output::OutputArgs,
}

impl From<SweepArgs> for SweepCommand {
    fn from(a: SweepArgs) -> Self {
        match a.action {
            Some(SweepAction::Export(e)) => {
                SweepCommand::Export(ExportOptions { db: e.db.into(), runs: e.runs, output: e.output })
            }
            Some(SweepAction::Import(i)) => SweepCommand::Import(ImportOptions {
                files: i.files,
                db: i.db.into(),
                runs_dir: i.runs_dir,
                endpoint: i.endpoint,
            }),
            Some(SweepAction::Report(r)) => {
                SweepCommand::Report(ReportOptions { run_id: r.run_id, db: r.db.into(), output: r.output.into() })
            }
            None => SweepCommand::Run(Box::new((*a.run).into())),
        }
    }
}

impl From<RunArgs> for RunOptions {
    fn from(a: RunArgs) -> Self {
        let flags = SweepFlags {
            endpoints: a.endpoints,
            servers: a.servers,
            env: a.env,
            programs: a.programs,
            llama_bin: a.llama_bin,
            models: a.models,
            num_gpu: a.num_gpu,
            num_predict: a.num_predict,
            prompts: a.prompts,
            prompt_files: a.prompt_files,
            prompt_tokens: a.prompt_tokens,
            epochs: a.epochs,
            repetitions: a.repetitions,
            temperature: a.temperature,
            seed: a.seed,
            options: a.options,
            no_stream: a.no_stream,
            timeouts: TimeoutSpec {
                connect_s: a.connect_timeout,
                read_s: a.read_timeout,
                request_s: a.request_timeout,
                ready_s: a.ready_timeout,
                grace_s: a.grace,
            },
            trace: a.trace,
            observer: a.observer,
            vklayer: a.vklayer,
            trace_dirs: a.trace_dirs,
            trace_interval_ms: a.trace_interval_ms,
        };
        RunOptions {
            spec: a.spec,
            flags,
            db: a.db.into(),
            runs_dir: a.runs_dir,
            // `--resume` without a value means the latest sweep.
            resume: a.resume.map(|r| if r == "latest" { Resume::Latest } else { Resume::Run(r) }),
            quiet: a.quiet,
            output: a.output.into(),
            dry_run: a.dry_run,
            take_over: a.take_over,
            yes: a.yes,
        }
    }
}
