//! `backscope sweep`: crash-isolated matched runs of one model across endpoints and num_gpu values.
//!
//! The pipeline: flags and/or a TOML spec ([`spec`]) resolve into a [`spec::Plan`] stored with the run; the
//! [`runner`] walks its cells, starting and supervising servers ([`supervise`]), talking HTTP ([`http`], [`api`]),
//! reading server logs ([`logs`]), committing each cell to SQLite and the run directory ([`store`]) and telling
//! [`events`] sinks (progress bar, `--json`) as it goes; [`report`] turns the records into the table and claims.
//! `export`, `import` (llama-bench) and `report` work on the database.

pub mod api;
pub mod envsnap;
pub mod events;
pub mod http;
pub mod import;
pub mod logs;
pub mod record;
pub mod report;
pub mod runner;
pub mod spec;
pub mod stats;
pub mod store;
pub mod supervise;
pub mod tracejoin;

#[cfg(test)]
mod ollama_docs;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use serde_json::json;

use events::{Event, JsonLines, Progress, Sink, Sinks};
use spec::{FlagSpec, Plan, SpecFile, TimeoutSpec};
use store::{RunRow, Store};

/// Every cell recorded, all ok.
pub const EXIT_OK: u8 = 0;
/// Every cell recorded, some failed (crashes, timeouts, …: see the table).
pub const EXIT_FAILED_CELLS: u8 = 1;
/// Interrupted (Ctrl-C, SIGTERM): completed cells are recorded; `--resume` continues.
pub const EXIT_INTERRUPTED: u8 = 130;

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
    #[arg(long)]
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
    #[arg(long, value_name = "S")]
    pub connect_timeout: Option<f64>,
    /// Seconds of silence before a request counts as hung (model loading included). Default: 300.
    #[arg(long, value_name = "S")]
    pub read_timeout: Option<f64>,
    /// Seconds for a whole request. Default: 1800.
    #[arg(long, value_name = "S")]
    pub request_timeout: Option<f64>,
    /// Seconds for a managed server to become ready (GET /health or /api/version answers 200). Default: 300.
    #[arg(long, value_name = "S")]
    pub ready_timeout: Option<f64>,
    /// Seconds between SIGTERM and SIGKILL when stopping a managed server. Default: 10.
    #[arg(long, value_name = "S")]
    pub grace: Option<f64>,
    /// SQLite database for the records (created if missing).
    #[arg(long, default_value = "backscope.db", value_name = "FILE")]
    pub db: PathBuf,
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
    /// Print events as JSON Lines on standard output (run_started, server_ready, first_token, cell_finished with the
    /// record, run_finished with the claims) instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Print the resolved endpoints, server command lines and cells, then exit without running anything.
    #[arg(long)]
    pub dry_run: bool,
    /// Join each request to the GPU kernels that ran during it: managed servers (and the runners they start) get the
    /// dispatch observer (LD_PRELOAD, as `backscope trace`), and each record gets the kernel launches of its time
    /// window. CUDA and HIP launches are observed; Vulkan and CPU work are not.
    #[arg(long)]
    pub trace: bool,
    /// The observer library for --trace (default: $BACKSCOPE_OBSERVER_SO, else next to the backscope executable).
    #[arg(long, value_name = "PATH")]
    pub observer: Option<PathBuf>,
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
    #[arg(long, default_value = "backscope.db", value_name = "FILE")]
    pub db: PathBuf,
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
    #[arg(long, default_value = "backscope.db", value_name = "FILE")]
    pub db: PathBuf,
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
    #[arg(long, default_value = "backscope.db", value_name = "FILE")]
    pub db: PathBuf,
    /// Print the records' claims as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: SweepArgs) -> Result<u8> {
    match args.action {
        Some(SweepAction::Export(a)) => export(a),
        Some(SweepAction::Import(a)) => import(a),
        Some(SweepAction::Report(a)) => report_cmd(a),
        None => sweep(*args.run),
    }
}

fn absolute(p: &Path) -> PathBuf {
    if p.is_absolute() {
        return p.to_path_buf();
    }
    match std::env::current_dir() {
        Ok(d) => join_clean(&d, p),
        Err(_) => p.to_path_buf(),
    }
}

/// `base` joined with `p`, dropping `.` components so stored paths read cleanly (`/a/./b` → `/a/b`).
fn join_clean(base: &Path, p: &Path) -> PathBuf {
    let mut out = base.to_path_buf();
    for c in p.components() {
        match c {
            std::path::Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// Relative paths in a spec file are relative to the file; on the command line, to the working directory. Both
/// become absolute before the plan is stored, so `--resume` works from any directory.
fn absolutize_spec(spec: &mut SpecFile, base: &Path) {
    let abs = |p: &Path| if p.is_absolute() { p.to_path_buf() } else { join_clean(base, p) };
    spec.llama_bin = spec.llama_bin.as_deref().map(abs);
    for p in &mut spec.prompts {
        p.file = p.file.as_deref().map(abs);
    }
    for e in &mut spec.endpoints {
        // A bare program name is looked up on PATH; only paths are made absolute.
        e.program = e.program.as_deref().map(|p| if p.components().count() > 1 { abs(p) } else { p.to_path_buf() });
        e.log_file = e.log_file.as_deref().map(abs);
        e.trace_dir = e.trace_dir.as_deref().map(abs);
    }
    spec.observer = spec.observer.as_deref().map(abs);
    absolutize_models(&mut spec.models, base);
}

/// A model that names an existing file keeps its label as written (tables and cell keys stay short) and gets the
/// absolute path as the file llama-server loads.
fn absolutize_models(models: &mut [spec::ModelEntry], base: &Path) {
    for m in models {
        match m {
            spec::ModelEntry::Name(n) if base.join(&*n).is_file() => {
                *m = spec::ModelEntry::Table {
                    name: n.clone(),
                    ollama: None,
                    gguf: Some(join_clean(base, Path::new(n.as_str())).display().to_string()),
                }
            }
            spec::ModelEntry::Table { gguf: Some(g), .. } if base.join(&*g).is_file() => {
                *g = join_clean(base, Path::new(g.as_str())).display().to_string()
            }
            _ => {}
        }
    }
}

impl RunArgs {
    fn flag_spec(&self) -> FlagSpec {
        FlagSpec {
            endpoints: self.endpoints.clone(),
            servers: self.servers.clone(),
            env: self.env.clone(),
            programs: self.programs.clone(),
            llama_bin: self.llama_bin.clone(),
            models: self.models.clone(),
            num_gpu: self.num_gpu.clone(),
            num_predict: self.num_predict.clone(),
            prompts: self.prompts.clone(),
            prompt_files: self.prompt_files.clone(),
            prompt_tokens: self.prompt_tokens.clone(),
            epochs: self.epochs,
            repetitions: self.repetitions,
            temperature: self.temperature,
            seed: self.seed,
            options: self.options.clone(),
            no_stream: self.no_stream,
            timeouts: TimeoutSpec {
                connect_s: self.connect_timeout,
                read_s: self.read_timeout,
                request_s: self.request_timeout,
                ready_s: self.ready_timeout,
                grace_s: self.grace,
            },
            trace: self.trace,
            observer: self.observer.as_ref().map(|p| absolute(p)),
            trace_dirs: self
                .trace_dirs
                .iter()
                .map(|d| match d.split_once('=') {
                    Some((n, dir)) => format!("{n}={}", absolute(Path::new(dir)).display()),
                    None => d.clone(),
                })
                .collect(),
            trace_interval_ms: self.trace_interval_ms,
        }
    }
}

/// Build the plan from the spec file and flags.
fn plan_from_args(run: &RunArgs) -> Result<Plan> {
    let mut spec_file = match &run.spec {
        Some(p) => {
            let mut s = spec::read_spec_file(p)?;
            absolutize_spec(&mut s, &absolute(p.parent().unwrap_or(Path::new("."))));
            s
        }
        None => SpecFile::default(),
    };
    let flags = run.flag_spec();
    // Flag paths are relative to the working directory: absolutize them through an otherwise empty spec.
    let mut flag_paths = SpecFile { llama_bin: flags.llama_bin.clone(), ..Default::default() };
    absolutize_spec(&mut flag_paths, &absolute(Path::new(".")));
    let mut flags = flags;
    flags.llama_bin = flag_paths.llama_bin;
    flags.prompt_files = flags.prompt_files.iter().map(|p| absolute(p)).collect();
    flags.programs = flags
        .programs
        .iter()
        .map(|p| match p.split_once('=') {
            Some((n, path)) if Path::new(path).components().count() > 1 => {
                format!("{n}={}", absolute(Path::new(path)).display())
            }
            _ => p.clone(),
        })
        .collect();
    spec_file = spec::merge(spec_file, &flags)?;
    if !flags.models.is_empty() {
        absolutize_models(&mut spec_file.models, &absolute(Path::new(".")));
    }
    // External endpoints without an `api` are asked now, so that a llama-server (which cannot change -ngl per
    // request) gets one cell per combination instead of one per num_gpu value. Unreachable ones are asked again
    // per cell.
    let timeouts =
        http::Timeouts { connect: Duration::from_secs(2), read: Duration::from_secs(5), total: Duration::from_secs(5) };
    spec::resolve(&spec_file, Path::new("."), &mut |url| {
        http::detect_api(&http::HttpClient::new(url, timeouts), Duration::from_secs(5)).ok().map(|(api, _)| api)
    })
}

fn dry_run(plan: &Plan) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    for e in &plan.endpoints {
        match &e.kind {
            spec::EndpointKind::External { url, api, log_file } => {
                let _ = writeln!(
                    out,
                    "endpoint {}: external {url} (api: {})",
                    e.name,
                    api.map(|a| a.to_string()).unwrap_or_else(|| "detected per cell".into())
                );
                if let Some(l) = log_file {
                    let _ = writeln!(out, "  log file: {}", l.display());
                }
                if let Some(d) = plan.trace.as_ref().and_then(|t| t.dirs.get(&e.name)) {
                    let _ = writeln!(out, "  --trace: trace files read from {}", d.display());
                }
            }
            spec::EndpointKind::Managed { preset, .. } => {
                let _ = writeln!(out, "endpoint {}: managed {preset:?}", e.name);
                let mut seen = std::collections::BTreeSet::new();
                for m in &plan.models {
                    for &n in &plan.num_gpu {
                        if let Some(ps) = e.server_process(m, n, 0) {
                            let line = format!(
                                "{}{}",
                                ps.env.iter().map(|(k, v)| format!("{k}={v} ")).collect::<String>(),
                                ps.argv().join(" ")
                            );
                            if seen.insert(line.clone()) {
                                let _ = writeln!(out, "  {line}");
                            }
                        }
                    }
                }
                let _ = writeln!(out, "  (port 0 stands for the free port chosen at start)");
                if let Some(spec::TracePlan { observer: Some(o), interval_ms, .. }) = &plan.trace {
                    let _ = writeln!(
                        out,
                        "  --trace: LD_PRELOAD={} BACKSCOPE_TRACE_DIR=<run dir>/traces/sNNN-{} BACKSCOPE_TRACE_INTERVAL_MS={interval_ms}",
                        o.display(),
                        spec::sanitize(&e.name)
                    );
                }
            }
        }
    }
    let cells = plan.cells();
    let _ = writeln!(out, "{} cells:", cells.len());
    for c in &cells {
        let _ = writeln!(out, "  {:5} {}", c.seq, plan.cell_key(c));
    }
    out
}

fn sweep(run: RunArgs) -> Result<u8> {
    let flags = run.flag_spec();
    if run.resume.is_some() && (run.spec.is_some() || !flags.is_empty()) {
        bail!("--resume continues a run with its stored plan; drop --spec and the other sweep flags (keep --db, --quiet, --json)");
    }
    if run.resume.is_none() && run.spec.is_none() && flags.is_empty() {
        bail!("nothing to sweep: give --endpoint NAME=URL or --server NAME=llama-server with --model (see --help), a --spec file, or --resume");
    }
    let mut store = Store::open(&run.db)?;
    let (run_id, run_dir, plan, resumed) = match &run.resume {
        Some(which) => {
            let row = if which == "latest" {
                store.latest_sweep_run()?.with_context(|| format!("no sweep run in {} to resume", run.db.display()))?
            } else {
                store.run(which)?.with_context(|| format!("no run {which} in {}", run.db.display()))?
            };
            if row.source != "sweep" {
                bail!("run {} holds imported {} records; only sweeps can be resumed", row.run_id, row.source);
            }
            let plan: Plan = serde_json::from_str(&row.plan_json)
                .context("the stored plan does not parse (written by another backscope version?)")?;
            (row.run_id, PathBuf::from(row.run_dir), plan, true)
        }
        None => {
            let plan = plan_from_args(&run)?;
            if run.dry_run {
                print!("{}", dry_run(&plan));
                return Ok(EXIT_OK);
            }
            let run_id = store::new_run_id();
            let run_dir = absolute(&run.runs_dir.join(&run_id));
            std::fs::create_dir_all(&run_dir)
                .with_context(|| format!("cannot create the run directory {}", run_dir.display()))?;
            let plan_json = serde_json::to_string(&plan)?;
            store.create_run(&RunRow {
                run_id: run_id.clone(),
                created_at: store::utc_now(),
                finished_at: None,
                status: "running".into(),
                source: "sweep".into(),
                run_dir: run_dir.display().to_string(),
                plan_json,
                cells_total: plan.cells().len() as u64,
                backscope_version: env!("CARGO_PKG_VERSION").into(),
            })?;
            let argv: Vec<String> = std::env::args().collect();
            let meta = json!({"run_id": run_id, "created_at": store::utc_now(), "db": absolute(&run.db), "argv": argv, "plan": plan});
            store::write_atomic(&run_dir.join("run.json"), &serde_json::to_vec_pretty(&meta)?)?;
            store::write_atomic(&run_dir.join("env.json"), &serde_json::to_vec_pretty(&envsnap::snapshot(&plan))?)?;
            (run_id, run_dir, plan, false)
        }
    };
    if run.dry_run {
        print!("{}", dry_run(&plan));
        return Ok(EXIT_OK);
    }
    let interrupt = supervise::Interrupt::install().context("cannot install the Ctrl-C handler")?;
    let cells_total = plan.cells().len() as u64;
    let cells_done = store.completed_keys(&run_id)?.len() as u64;
    let mut sinks = Sinks::default();
    sinks.0.push(Box::new(Progress::new(cells_total, cells_done, !run.quiet)));
    if run.json {
        sinks.0.push(Box::new(JsonLines::new(std::io::stdout())));
    }
    let run_dir_s = run_dir.display().to_string();
    let db_s = run.db.display().to_string();
    sinks.event(&Event::RunStarted {
        run_id: &run_id,
        run_dir: &run_dir_s,
        db: &db_s,
        cells_total,
        cells_done,
        resumed,
    });
    store.set_run_status(&run_id, "running")?;
    let end = {
        let mut ctx = runner::RunContext {
            plan: &plan,
            run_id: &run_id,
            run_dir: &run_dir,
            store: &mut store,
            sink: &mut sinks,
            interrupt,
        };
        runner::execute(&mut ctx)?
    };
    let records = store.records(&run_id)?;
    let claims = report::claims(&records, &run_dir);
    let status = match end {
        runner::RunEnd::Finished => "finished",
        runner::RunEnd::Interrupted => "interrupted",
    };
    store.set_run_status(&run_id, status)?;
    store::write_atomic(&run_dir.join("claims.json"), &serde_json::to_vec_pretty(&claims)?)?;
    let ok = records.iter().filter(|r| r.is_ok()).count() as u64;
    let failed = records.len() as u64 - ok;
    sinks.event(&Event::RunFinished { run_id: &run_id, status, cells_ok: ok, cells_failed: failed, claims: &claims });
    drop(sinks);
    let mut stdout = std::io::stdout().lock();
    if run.quiet && !run.json {
        writeln!(
            stdout,
            "run {run_id}: {} of {cells_total} cells recorded, {ok} ok, {failed} failed ({status})",
            records.len()
        )?;
    } else if !run.json {
        stdout.write_all(report::render(&run_id, &run_dir_s, &records, &claims).as_bytes())?;
    }
    stdout.flush()?;
    if matches!(end, runner::RunEnd::Interrupted) {
        eprintln!(
            "backscope: interrupted; {} of {cells_total} cells are recorded. Continue with: backscope sweep --resume {run_id} --db {}",
            records.len(),
            run.db.display()
        );
        return Ok(EXIT_INTERRUPTED);
    }
    Ok(if failed > 0 { EXIT_FAILED_CELLS } else { EXIT_OK })
}

fn export(a: ExportArgs) -> Result<u8> {
    if !a.db.exists() {
        bail!("{} does not exist: run a sweep first or pass --db", a.db.display());
    }
    let store = Store::open(&a.db)?;
    let lines = store.record_json(&a.runs)?;
    let sink: Box<dyn Write> = match &a.output {
        Some(p) => Box::new(std::fs::File::create(p).with_context(|| format!("cannot create {}", p.display()))?),
        None => Box::new(std::io::stdout().lock()),
    };
    let mut out = std::io::BufWriter::new(sink);
    for l in lines {
        writeln!(out, "{l}")?;
    }
    out.flush()?;
    Ok(EXIT_OK)
}

fn import(a: ImportArgs) -> Result<u8> {
    let mut tests = Vec::new();
    for f in &a.files {
        let text = std::fs::read_to_string(f).with_context(|| format!("cannot read {}", f.display()))?;
        tests.extend(import::parse_bench(&text).with_context(|| f.display().to_string())?);
    }
    let mut store = Store::open(&a.db)?;
    let run_id = store::new_run_id();
    let run_dir = absolute(&a.runs_dir.join(&run_id));
    std::fs::create_dir_all(run_dir.join("input"))?;
    for f in &a.files {
        let name = f.file_name().map(|n| n.to_os_string()).unwrap_or_else(|| "input".into());
        std::fs::copy(f, run_dir.join("input").join(name)).with_context(|| format!("cannot copy {}", f.display()))?;
    }
    let records = import::to_records(&tests, &run_id, &a.endpoint);
    let files: Vec<String> = a.files.iter().map(|f| absolute(f).display().to_string()).collect();
    store.create_run(&RunRow {
        run_id: run_id.clone(),
        created_at: store::utc_now(),
        finished_at: None,
        status: "running".into(),
        source: "llama-bench".into(),
        run_dir: run_dir.display().to_string(),
        plan_json: json!({"imported_from": files}).to_string(),
        cells_total: records.len() as u64,
        backscope_version: env!("CARGO_PKG_VERSION").into(),
    })?;
    for r in &records {
        store::commit_record(&mut store, &run_dir, r)?;
    }
    store.set_run_status(&run_id, "finished")?;
    println!(
        "run {run_id}: imported {} llama-bench tests into {} ({})",
        records.len(),
        a.db.display(),
        run_dir.display()
    );
    Ok(EXIT_OK)
}

fn report_cmd(a: ReportArgs) -> Result<u8> {
    if !a.db.exists() {
        bail!("{} does not exist: run a sweep first or pass --db", a.db.display());
    }
    let store = Store::open(&a.db)?;
    let row = match &a.run_id {
        Some(id) => store.run(id)?.with_context(|| format!("no run {id} in {}", a.db.display()))?,
        None => store.runs()?.pop().with_context(|| format!("no runs in {}", a.db.display()))?,
    };
    let records = store.records(&row.run_id)?;
    let claims = report::claims(&records, Path::new(&row.run_dir));
    if a.json {
        println!("{}", serde_json::to_string(&json!({"run": row.run_id, "status": row.status, "claims": claims}))?);
    } else {
        print!("{}", report::render(&row.run_id, &row.run_dir, &records, &claims));
    }
    Ok(EXIT_OK)
}
