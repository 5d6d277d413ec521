//! The `predict` command body: where the prompt length and the observed kernels come from (flags, a trace, a
//! sweep database), one prediction per observation, printed through the output layer.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::Serialize;

use super::compare::vulkan as vkcompare;
use super::vulkan::{DeviceSource, VulkanOptions, VulkanReport};
use super::{compare, Batch, FlashAttn, ObservedSource, PredictOptions, PredictReport, PromptFromRun};
use super::{GpuBackend, PlacementOptions, WeightSource, DEFAULT_UBATCH};
use crate::exit;
use crate::output::{Inputs, Output, OutputOptions};
use crate::run::format::record::{Record, RecordTrace};
use crate::run::format::target::DbValue;
use crate::run::read::db::{select_cells, SweepDb};

/// Schema of the JSON `predict --run` prints: one prediction per traced record of a sweep run.
pub const RUN_SCHEMA: &str = "backscope.predict-run/1";

/// Where the tokens the matmuls see come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BatchFrom {
    /// `--prompt-tokens N` or `--ne11 N`.
    Given(Batch),
    /// `--from-run RUN`: the prompt token count a record of that run reports.
    Run(String),
    /// Neither: each record of `--run` gives its own count.
    EachRecord,
}

/// Where the observed kernels come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Observation {
    None,
    /// `--trace DIR`.
    TraceDir(PathBuf),
    /// `--trace-json FILE`.
    TraceJson(PathBuf),
    /// `--record FILE`: a sweep record's `result.json`.
    RecordFile(PathBuf),
    /// `--run RUN|DB|RUN_DIR`: every record of the run that carries a trace (a run id in `--db`, a database's
    /// latest run, or a run directory's `cells/*/result.json`).
    Run(String),
    /// `--verify [LLAMA_BENCH] [--build SPEC]` (Vulkan): the case run through llama-bench impersonating `--device`,
    /// traced.
    Verify(super::vulkan::verify::Verify),
}

/// Which ggml backend's rules predict (`--backend`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Backend {
    /// ggml-cuda (CUDA and HIP): `--arch`.
    #[default]
    Cuda,
    /// ggml-vulkan: `--device PROFILE|TRACE_DIR` ([`super::vulkan`]).
    Vulkan,
}

/// One `backscope predict` invocation.
#[derive(Clone, Debug)]
pub struct PredictCommand {
    pub backend: Backend,
    /// `--device` (Vulkan): a profile id of data/vulkan_devices.toml or a trace directory.
    pub device: Option<String>,
    /// `--vulkan-lib`: the libggml-vulkan.so whose embedded shaders tell the build's glslc support.
    pub vulkan_lib: Option<PathBuf>,
    pub arch: String,
    pub weights: WeightSource,
    pub batch: BatchFrom,
    pub decode_tokens: Option<u64>,
    pub ubatch: u64,
    pub ggml: String,
    pub explain: bool,
    pub kv_type: String,
    pub flash_attn: FlashAttn,
    pub build_flags: Vec<String>,
    pub observation: Observation,
    /// `--num-gpu`, `--no-op-offload`, and the backend: with `--run`, each record's own num_gpu, offloaded layers
    /// and backend replace what the flags leave unset.
    pub placement: PlacementOptions,
    /// Whether `--backend` was given (else a record's backend decides).
    pub backend_given: bool,
    /// `--cell`: one record of the run (position or key).
    pub cell: Option<String>,
    /// The sweep database (`--db`).
    pub db: DbValue,
    /// Format (JSON: docs/predict.md) and destination.
    pub output: OutputOptions,
}

impl PredictCommand {
    /// A command with the defaults of the command line.
    pub fn new(arch: impl Into<String>, weights: WeightSource, batch: BatchFrom) -> Self {
        PredictCommand {
            backend: Backend::Cuda,
            device: None,
            vulkan_lib: None,
            arch: arch.into(),
            weights,
            batch,
            decode_tokens: None,
            ubatch: DEFAULT_UBATCH,
            ggml: crate::gpu::knowledge::DEFAULT_GGML_VERSION.to_string(),
            explain: false,
            kv_type: "F16".into(),
            flash_attn: FlashAttn::Auto,
            build_flags: Vec::new(),
            observation: Observation::None,
            placement: PlacementOptions::default(),
            backend_given: false,
            cell: None,
            db: DbValue::sqlite(PathBuf::from(crate::run::format::target::DEFAULT_DB)),
            output: OutputOptions::default(),
        }
    }

    fn options(&self, batch: Batch) -> PredictOptions {
        let mut o = PredictOptions::new(self.arch.clone(), self.weights.clone(), batch);
        o.decode_tokens = self.decode_tokens;
        o.ubatch = self.ubatch;
        o.ggml = self.ggml.clone();
        o.explain = self.explain;
        o.kv_type = self.kv_type.clone();
        o.flash_attn = self.flash_attn;
        o.build_flags = self.build_flags.clone();
        o.placement = self.placement.clone();
        o
    }
}

/// One traced record of a sweep run and the prediction checked against it.
#[derive(Clone, Debug, Serialize)]
pub struct CellPrediction {
    pub cell_key: String,
    pub seq: u64,
    pub endpoint: String,
    pub model: String,
    pub num_gpu: i64,
    /// The record's `result.json`, relative to the run directory.
    pub file: String,
    pub report: CellReport,
}

/// A record's prediction: by ggml-cuda's rules (CUDA/HIP) or ggml-vulkan's, each in its own schema.
#[derive(Clone, Debug, Serialize)]
#[serde(untagged)]
pub enum CellReport {
    Cuda(Box<PredictReport>),
    Vulkan(Box<VulkanReport>),
}

/// `predict --run`: one prediction per traced record.
#[derive(Clone, Debug, Serialize)]
pub struct RunPredictions {
    pub schema: &'static str,
    pub db: String,
    pub run_id: String,
    pub cells: Vec<CellPrediction>,
    /// Records left out, with the reason (no trace, no prompt count).
    pub skipped: Vec<String>,
}

/// What `predict` prints.
#[derive(Clone, Debug, Serialize)]
#[serde(untagged)]
pub enum PredictOutput {
    One(Box<PredictReport>),
    Run(RunPredictions),
}

/// The prompt count a run's records report, when they agree; the prompt-cache caveat travels with it.
fn prompt_from_records(run_id: &str, records: &[&Record]) -> Result<PromptFromRun> {
    let counted: Vec<PromptFromRun> = records.iter().filter_map(|r| PromptFromRun::from_record(r)).collect();
    let Some(first) = counted.first() else {
        bail!("no record of run {run_id} reports a prompt token count (failed requests report none)");
    };
    let mut distinct: Vec<u64> = counted.iter().map(|p| p.prompt_tokens).collect();
    distinct.sort_unstable();
    distinct.dedup();
    if distinct.len() > 1 {
        let cells: Vec<String> = records
            .iter()
            .filter_map(|r| Some(format!("{} ({}: {})", r.seq, r.prompt, r.server_timings.prompt_n?)))
            .take(8)
            .collect();
        bail!(
            "the records of run {run_id} report different prompt token counts ({}); pick one with --cell: {}",
            distinct.iter().map(u64::to_string).collect::<Vec<_>>().join(", "),
            cells.join(", ")
        );
    }
    Ok(PromptFromRun {
        run_id: run_id.to_string(),
        prompt_tokens: first.prompt_tokens,
        includes_cache: counted.iter().any(|p| p.includes_cache),
    })
}

impl PredictCommand {
    /// The files and directories this prediction reads, which its `-o` must not replace.
    pub fn inputs(&self) -> Inputs {
        let model = match &self.weights {
            WeightSource::Model(p) => Some(p),
            _ => None,
        };
        let observed = match &self.observation {
            Observation::TraceDir(p) | Observation::TraceJson(p) | Observation::RecordFile(p) => Some(p),
            Observation::None | Observation::Run(_) => None,
            Observation::Verify(v) => v.llama_bench.as_ref(),
        };
        // `--run` names a database file or run directory itself, or a run in `--db`.
        let run_path = match &self.observation {
            Observation::Run(arg) if std::path::Path::new(arg).exists() => Some(PathBuf::from(arg)),
            _ => None,
        };
        let reads_db = (matches!(self.observation, Observation::Run(_)) && run_path.is_none())
            || matches!(self.batch, BatchFrom::Run(_));
        let device_dir = self.device.as_ref().map(PathBuf::from).filter(|p| p.is_dir());
        Inputs::none()
            .maybe(model)
            .maybe(observed)
            .maybe(run_path.as_ref())
            .maybe(reads_db.then_some(self.db.given()))
            .maybe(device_dir.as_ref())
            .maybe(self.vulkan_lib.as_ref())
    }
}

/// What the records of one `--run` share: where they came from and the models they name, read once each.
struct RunContext {
    /// The database or run directory, for sources.
    source: String,
    run_id: String,
    /// The run directory the records' relative paths (trace directories) are under.
    run_dir: PathBuf,
    models: std::collections::HashMap<String, Result<super::ModelWeights, String>>,
}

/// Which rules predict a record: `--backend` when given, else the record's own GPU backend (Vulkan or CUDA/HIP).
fn record_backend(cmd: &PredictCommand, placement: &PlacementOptions) -> Backend {
    if cmd.backend_given {
        cmd.backend
    } else if placement.backend == GpuBackend::Vulkan {
        Backend::Vulkan
    } else {
        Backend::Cuda
    }
}

/// What one record gives every prediction: its prompt count, its model's weights, its decode count, its placement.
/// `Err` is the reason the record is left out.
fn record_options(
    cmd: &PredictCommand,
    r: &Record,
    ctx: &mut RunContext,
) -> std::result::Result<(PredictOptions, Backend), String> {
    let why = |s: String| format!("record {} ({}): {s}", r.seq, short(&r.cell_key));
    let (batch, from_run) = match &cmd.batch {
        BatchFrom::Given(b) => (*b, None),
        _ => match PromptFromRun::from_record(r) {
            Some(p) => (Batch::PromptTokens(p.prompt_tokens), Some(p)),
            None => {
                return Err(why(format!(
                    "no prompt token count (server_timings.prompt_n; {}): give --prompt-tokens",
                    r.outcome()
                )))
            }
        },
    };
    let mut o = cmd.options(batch);
    if let WeightSource::EachRecord = o.weights {
        let weights = ctx
            .models
            .entry(r.model.clone())
            .or_insert_with(|| super::model::of_record(&r.model).map_err(|e| format!("{e:#}")));
        match weights {
            Ok(w) => o.weights = WeightSource::Weights(w.clone()),
            Err(e) => return Err(why(format!("its model (field `model`): {e}"))),
        }
    }
    o.prompt_from_run = from_run;
    let vulkan_given = cmd.backend_given && cmd.backend == Backend::Vulkan;
    o.placement = placement_of_record(r, &cmd.placement, vulkan_given);
    if vulkan_given {
        o.placement.backend = GpuBackend::Vulkan;
    }
    let backend = record_backend(cmd, &o.placement);
    if o.decode_tokens.is_none() {
        o.decode_tokens = match backend {
            // The tokens the request generated; a prompt-only request (llama-bench pp) generated none.
            Backend::Cuda => r.server_timings.decode_n.or((r.num_predict == 0).then_some(0)),
            // Dispatches are counted per request on Vulkan, so the decode is its steps: llama-server samples the
            // first token from the prompt's logits and releases the slot without evaluating the last one it
            // samples (tools/server/server-context.cpp:4222-4229, 11434).
            Backend::Vulkan => {
                r.server_timings.decode_n.map(|n| n.saturating_sub(1)).or((r.num_predict == 0).then_some(0))
            }
        };
    }
    let all_logged = r.backend.as_ref().and_then(|f| f.offloaded).is_some_and(|(n, m)| n >= m);
    if matches!(o.weights, WeightSource::Single { .. }) && all_logged && cmd.placement.n_gpu_layers.is_none() {
        // `offloaded M/M layers`: every layer, which a single weight can be placed by.
        o.placement.n_gpu_layers = Some(-1);
    }
    if let (WeightSource::Single { .. }, Some(n @ 1..)) = (&o.weights, o.placement.n_gpu_layers) {
        // Which layers a count places depends on the model's layers, which a single --type lacks.
        return Err(why(format!(
            "num_gpu {n} offloads some layers only, and --type has none: give --model, or --num-gpu -1 / 0"
        )));
    }
    Ok((o, backend))
}

/// The device a Vulkan record is predicted for: `--device`, else the record's own trace directory (the layer's
/// device record of the server that answered it).
fn record_device(
    cmd: &PredictCommand,
    r: &Record,
    trace: &RecordTrace,
    run_dir: &Path,
) -> Result<DeviceSource, String> {
    if let Some(d) = &cmd.device {
        return Ok(DeviceSource::parse(d));
    }
    // A record names its trace directory relative to the run; a record is anyone's file, so anything else (an
    // absolute path, `..`, a link out of the run) is not read.
    let dir = match crate::run::read::input::lexically_inside(&trace.dir).map(|rel| run_dir.join(rel)) {
        Some(dir) if crate::host::inputs::resolved_inside(run_dir, &dir) => dir,
        _ => {
            return Err(format!(
                "record {} ({}): its trace directory `{}` is not a directory inside the run {}: give --device",
                r.seq,
                short(&r.cell_key),
                short(&trace.dir),
                run_dir.display()
            ))
        }
    };
    // The server's trace files (its device record) are there also when this request dispatched nothing.
    if std::fs::read_dir(&dir).is_ok_and(|mut entries| entries.next().is_some()) {
        return Ok(DeviceSource::TraceDir(dir));
    }
    Err(format!(
        "record {} ({}): its trace directory {} holds no trace file with the layer's device record: give --device",
        r.seq,
        short(&r.cell_key),
        dir.display()
    ))
}

/// One traced record's prediction and comparison; `Ok(Err(why))` leaves the record out.
fn predict_record(
    cmd: &PredictCommand,
    r: &Record,
    trace: &RecordTrace,
    ctx: &mut RunContext,
) -> Result<std::result::Result<CellReport, String>> {
    let (o, backend) = match record_options(cmd, r, ctx) {
        Ok(x) => x,
        Err(why) => return Ok(Err(why)),
    };
    let source = format!("{}: run {}, {}", ctx.source, ctx.run_id, r.file);
    let context = || format!("record {} ({})", r.seq, short(&r.cell_key));
    match backend {
        Backend::Cuda => {
            if cmd.arch.is_empty() {
                return Ok(Err(format!(
                    "record {} ({}): a CUDA/HIP record needs --arch (or --backend vulkan --device for a Vulkan one)",
                    r.seq,
                    short(&r.cell_key)
                )));
            }
            let mut o = o;
            let observed = compare::from_record_trace(trace, &source, Some(ctx.run_id.clone()));
            o.observed = Some(ObservedSource::Loaded(observed));
            let report = super::run(&o).with_context(context)?;
            Ok(Ok(CellReport::Cuda(Box::new(report))))
        }
        Backend::Vulkan => {
            let device = match record_device(cmd, r, trace, &ctx.run_dir) {
                Ok(d) => d,
                Err(why) => return Ok(Err(why)),
            };
            let mut v = VulkanOptions::new(device, o.weights, o.batch);
            v.library = cmd.vulkan_lib.clone();
            v.decode_tokens = o.decode_tokens;
            v.ubatch = o.ubatch;
            v.kv_type = o.kv_type;
            v.flash_attn = o.flash_attn;
            v.explain = o.explain;
            v.placement = o.placement;
            v.prompt_from_run = o.prompt_from_run;
            v.ggml = o.ggml;
            let observed = vkcompare::from_record_trace(trace, &source, &ctx.run_id);
            v.observed = Some(ObservedSource::LoadedVulkan(observed));
            let report = super::vulkan::run(&v).with_context(context)?;
            Ok(Ok(CellReport::Vulkan(Box::new(report))))
        }
    }
}

/// `predict --run`: one prediction per traced record of the run, the records read one at a time (as `report` reads
/// them: [`crate::run::read::input`]), so that memory follows one record and the predictions, not the run. A record
/// that cannot be read, parsed or predicted is left out with the reason, naming it; only a run with no record
/// predicted fails.
fn predict_run(cmd: &PredictCommand, arg: &str) -> Result<PredictOutput> {
    if matches!(cmd.batch, BatchFrom::Run(_)) {
        bail!("--run already takes each record's prompt token count; --from-run is for a run without traces");
    }
    let (input, run) = run_input(arg, &cmd.db);
    let mut problems = Vec::new();
    let (meta, records) = crate::run::read::input::open(&input, run.as_deref(), &mut problems)?;
    let source = meta.db.clone().unwrap_or_else(|| meta.run_dir.clone());
    let mut ctx = RunContext { source, run_id: meta.run_id, run_dir: meta.run_dir.into(), models: Default::default() };
    let mut cells = Vec::new();
    let mut skipped = Vec::new();
    // With --cell: whether it named a record, else the first few cells (for the error that lists them).
    let (mut selected, mut cell_names) = (false, Vec::new());
    let run_id = ctx.run_id.clone();
    records.for_each(&run_id, &mut problems, |json| {
        let r: Record = serde_json::from_str(json).context("not a sweep record")?;
        if let Some(sel) = cmd.cell.as_deref() {
            if !crate::run::read::db::cell_selected(&r, sel) {
                if cell_names.len() < 8 {
                    cell_names.push(format!("{} ({})", r.seq, short(&r.cell_key)));
                }
                return Ok(());
            }
            selected = true;
        }
        let Some(trace) = &r.trace else {
            skipped.push(format!(
                "{} ({}): no trace (the run was not recorded with --trace)",
                r.seq,
                short(&r.cell_key)
            ));
            return Ok(());
        };
        match predict_record(cmd, &r, trace, &mut ctx) {
            Ok(Ok(report)) => cells.push(CellPrediction {
                cell_key: r.cell_key.clone(),
                seq: r.seq,
                endpoint: r.endpoint.clone(),
                model: r.model.clone(),
                num_gpu: r.num_gpu,
                file: r.file.clone(),
                report,
            }),
            Ok(Err(why)) => skipped.push(why),
            Err(e) => skipped.push(format!("{e:#}; this record is left out")),
        }
        Ok(())
    })?;
    if let (Some(sel), false) = (cmd.cell.as_deref(), selected) {
        bail!("no cell `{sel}` in the run (cells are named by position or key: {})", cell_names.join(", "));
    }
    skipped.extend(problems);
    if cells.is_empty() {
        // The first reasons: a run of thousands of bad records needs no thousand-line error.
        const SHOWN: usize = 8;
        let mut reasons: Vec<&str> = skipped.iter().take(SHOWN).map(String::as_str).collect();
        let more = skipped.len().saturating_sub(SHOWN);
        let more = format!("and {more} more");
        if skipped.len() > SHOWN {
            reasons.push(&more);
        }
        bail!("run {} has no record to compare with: {}", ctx.run_id, reasons.join("; "));
    }
    Ok(PredictOutput::Run(RunPredictions { schema: RUN_SCHEMA, db: ctx.source, run_id: ctx.run_id, cells, skipped }))
}

/// A record's text field for a message: a cell key is a few dozen bytes, but a record is anyone's file.
fn short(text: &str) -> &str {
    const MAX: usize = 200;
    match text.char_indices().nth(MAX) {
        Some((at, _)) => &text[..at],
        None => text,
    }
}

/// Run the prediction(s) the command asks for.
pub fn predict(cmd: &PredictCommand) -> Result<PredictOutput> {
    if let Observation::Run(arg) = &cmd.observation {
        return predict_run(cmd, arg);
    }
    let mut o = match &cmd.batch {
        BatchFrom::Given(b) => cmd.options(*b),
        BatchFrom::Run(run_id) => {
            let db = SweepDb::open(&cmd.db)?;
            let records = db.records(run_id)?;
            let from = prompt_from_records(run_id, &select_cells(&records, cmd.cell.as_deref())?)?;
            let mut o = cmd.options(Batch::PromptTokens(from.prompt_tokens));
            o.prompt_from_run = Some(from);
            o
        }
        BatchFrom::EachRecord => bail!("say how many tokens: --prompt-tokens N, --ne11 N, --from-run RUN or --run RUN"),
    };
    o.observed = observed_source(&cmd.observation);
    Ok(PredictOutput::One(Box::new(super::run(&o)?)))
}

/// The observation of a single prediction (not `--run`).
fn observed_source(o: &Observation) -> Option<ObservedSource> {
    match o {
        Observation::None | Observation::Run(_) | Observation::Verify(_) => None,
        Observation::TraceDir(d) => Some(ObservedSource::TraceDir(d.clone())),
        Observation::TraceJson(f) => Some(ObservedSource::TraceSummary(f.clone())),
        Observation::RecordFile(f) => Some(ObservedSource::SweepRecord(f.clone())),
    }
}

/// What `--run ARG` reads: a run directory, or a database file (its latest run), or else a run id in the database
/// `db`. Returns what to open and the run to pick in it. ARG is a database only when it names an existing file, so
/// it is read as one here, not where the command line was.
fn run_input(arg: &str, db: &DbValue) -> (DbValue, Option<String>) {
    let path = Path::new(arg);
    if path.is_dir() || path.is_file() {
        (DbValue::read(path.to_path_buf()), None)
    } else {
        (db.clone(), Some(arg.to_string()))
    }
}

/// The placement a record's own facts give, where the flags leave it open: its GPU backend and whether a GPU
/// device held the model (the server log's `using device …` lines), and its layer count (the log's `offloaded N/M
/// layers`, which is min(n_gpu_layers, n_layer + 1), else the record's num_gpu; -1 is llama.cpp's and Ollama's
/// "auto", predicted as every layer, as without placement).
pub fn placement_of_record(r: &Record, flags: &PlacementOptions, backend_given: bool) -> PlacementOptions {
    let mut p = flags.clone();
    if let Some(facts) = &r.backend {
        match facts.devices.iter().find_map(|d| GpuBackend::parse(d)) {
            Some(b) if !backend_given => p.backend = b,
            Some(_) => {}
            None if facts.devices.is_empty() && facts.backend == "CPU" => p.gpu_device = false,
            None => {}
        }
    }
    if p.n_gpu_layers.is_none() {
        let logged = r.backend.as_ref().and_then(|f| f.offloaded).map(|(n, _)| i64::from(n));
        // -1 (auto) without the log line is what a prediction assumes anyway: every layer, no placement verdicts.
        p.n_gpu_layers = logged.or((r.num_gpu >= 0).then_some(r.num_gpu));
    }
    p
}

/// The options of a Vulkan prediction (`--backend vulkan`).
fn vulkan_options(cmd: &PredictCommand) -> Result<VulkanOptions> {
    let Some(device) = &cmd.device else {
        bail!("--backend vulkan needs --device: a profile of data/vulkan_devices.toml or a trace directory");
    };
    let batch = match &cmd.batch {
        BatchFrom::Given(b) => *b,
        _ => bail!("--backend vulkan: say how many tokens with --prompt-tokens N or --ne11 N"),
    };
    let mut o = VulkanOptions::new(DeviceSource::parse(device), cmd.weights.clone(), batch);
    o.library = cmd.vulkan_lib.clone();
    o.decode_tokens = cmd.decode_tokens;
    o.ubatch = cmd.ubatch;
    o.kv_type = cmd.kv_type.clone();
    o.flash_attn = cmd.flash_attn;
    o.explain = cmd.explain;
    o.observed = observed_source(&cmd.observation);
    o.placement = PlacementOptions { backend: GpuBackend::Vulkan, ..cmd.placement.clone() };
    o.ggml = cmd.ggml.clone();
    match &cmd.observation {
        Observation::Verify(v) => super::vulkan::verify::observe(o, device, v),
        _ => Ok(o),
    }
}

/// Predict and print. A contradiction between prediction and observation is a finding, not an error: exit 0.
pub fn run(cmd: &PredictCommand) -> Result<u8> {
    if cmd.backend == Backend::Vulkan && !matches!(cmd.observation, Observation::Run(_)) {
        let report = super::vulkan::run(&vulkan_options(cmd)?)?;
        let mut out = Output::open(&cmd.output, &cmd.inputs())?;
        out.emit(&report)?;
        out.finish()?;
        return Ok(exit::OK);
    }
    if let Observation::Verify(_) = &cmd.observation {
        bail!("--verify runs ggml-vulkan impersonating a device: give --backend vulkan --device PROFILE");
    }
    if cmd.arch.is_empty() && !matches!(cmd.observation, Observation::Run(_)) {
        bail!("say which GPU: --arch gfx1201|sm_86|… (or --backend vulkan --device PROFILE|TRACE_DIR)");
    }
    let mut out = Output::open(&cmd.output, &cmd.inputs())?;
    out.emit(&predict(cmd)?)?;
    out.finish()?;
    Ok(exit::OK)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::format::record::BackendFacts;

    /// The log facts of a record: backend, devices in use, `offloaded N/M`.
    type Facts<'a> = (&'a str, &'a [&'a str], Option<(u32, u32)>);

    fn record(num_gpu: i64, backend: Option<Facts<'_>>) -> Record {
        Record {
            num_gpu,
            backend: backend.map(|(b, devices, offloaded)| BackendFacts {
                backend: b.into(),
                devices: devices.iter().map(|d| d.to_string()).collect(),
                offloaded,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// Log lines as llama.cpp 11434 prints them (src/commands/sweep/logs.rs): `using device Vulkan0 (…)`, `offloaded 5/5
    /// layers to GPU`; `--device none` leaves no device in use and a CPU backend.
    #[test]
    fn a_record_gives_backend_gpu_device_and_layers() {
        let flags = PlacementOptions::default();
        let vk =
            record(-1, Some(("Vulkan0 (llvmpipe)", &["Vulkan0 (llvmpipe (LLVM 15.0.6, 256 bits))"], Some((5, 5)))));
        let p = placement_of_record(&vk, &flags, false);
        assert_eq!((p.backend, p.gpu_device, p.n_gpu_layers), (GpuBackend::Vulkan, true, Some(5)));
        // num_gpu 0 on a Vulkan server: the device is in use (op offload can reach it), no layer offloaded.
        let zero = record(0, Some(("CPU", &["Vulkan0 (llvmpipe)"], Some((0, 5)))));
        let p = placement_of_record(&zero, &flags, false);
        assert_eq!((p.backend, p.gpu_device, p.n_gpu_layers), (GpuBackend::Vulkan, true, Some(0)));
        let cpu = record(3, Some(("CPU", &[], Some((3, 5)))));
        assert!(!placement_of_record(&cpu, &flags, false).gpu_device);
        let rocm = record(7, Some(("ROCm0 (gfx906)", &["ROCm0 (AMD Radeon VII)"], None)));
        let p = placement_of_record(&rocm, &flags, false);
        assert_eq!((p.backend, p.n_gpu_layers), (GpuBackend::Hip, Some(7)));
        // No log facts: the record's num_gpu; -1 (auto) is left to the default (all, no placement verdicts).
        assert_eq!(placement_of_record(&record(4, None), &flags, false).n_gpu_layers, Some(4));
        assert_eq!(placement_of_record(&record(-1, None), &flags, false).n_gpu_layers, None);
        // Flags win over the record.
        let given = PlacementOptions { n_gpu_layers: Some(2), backend: GpuBackend::Cuda, ..flags };
        let p = placement_of_record(&vk, &given, true);
        assert_eq!((p.backend, p.n_gpu_layers), (GpuBackend::Cuda, Some(2)));
    }
}
