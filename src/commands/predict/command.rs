//! The `predict` command body: where the prompt length and the observed kernels come from (flags, a trace, a
//! sweep database), one prediction per observation, printed through the output layer.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::Serialize;

use super::cuda::{self, prediction::CudaReport};
use super::model::{self, ModelWeights};
use super::options::{Backend, Batch, DeviceSource, ObservedSource, PredictOptions, PromptFromRun, WeightSource};
use super::placement::{GpuBackend, NumGpu, PlacementOptions};
use super::report::{self, Report};
use super::vulkan;
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
    /// `--prompt-tokens N` or `--ne11 N`: the prediction's own batch.
    Flags,
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
    Verify(vulkan::verify::Verify),
}

/// Whose rules predict the records of `--run`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordBackend {
    /// `--backend` was given: the prediction's, for every record.
    Given,
    /// Each record's own GPU backend's: a CUDA/HIP record by ggml-cuda's rules (the prediction's, with `--arch`), a
    /// Vulkan one by ggml-vulkan's for the command's [`VulkanFlags`].
    Own,
}

/// The Vulkan device and library the flags name beside ggml-cuda's rules (with `--backend vulkan` they are the
/// prediction's own): what a Vulkan record of `--run` is predicted for, and inputs `-o` must not replace.
#[derive(Clone, Debug)]
pub struct VulkanFlags {
    /// `--device`; else each record's own trace.
    pub device: DeviceSource,
    /// `--vulkan-lib`.
    pub library: Option<PathBuf>,
}

/// One `backscope predict` invocation.
#[derive(Clone, Debug)]
pub struct PredictCommand {
    /// The prediction the flags describe: `--backend`'s rules (ggml-cuda for `--arch` by default), the weights, the
    /// tokens, the ggml version, the placement (`--num-gpu`, `--no-op-offload`). With `--from-run` its prompt is the
    /// run's; with `--run` each record fills in what the flags leave open (its prompt and decode counts, its model,
    /// its num_gpu, offloaded layers and backend).
    pub prediction: PredictOptions,
    /// Where the token count comes from: `prediction.batch`, or a run's records.
    pub batch: BatchFrom,
    pub observation: Observation,
    /// Whose rules predict a record of `--run`.
    pub records: RecordBackend,
    pub vulkan: VulkanFlags,
    /// `--cell`: one record of the run (position or key).
    pub cell: Option<String>,
    /// The sweep database (`--db`).
    pub db: DbValue,
    /// Format (JSON: docs/predict.md) and destination.
    pub output: OutputOptions,
}

impl PredictCommand {
    /// A command with the defaults of the command line: the prediction's own batch, no observation, each record of a
    /// run by its own backend's rules.
    pub fn new(prediction: PredictOptions) -> Self {
        PredictCommand {
            prediction,
            batch: BatchFrom::Flags,
            observation: Observation::None,
            records: RecordBackend::Own,
            vulkan: VulkanFlags { device: DeviceSource::EachRecord, library: None },
            cell: None,
            db: DbValue::sqlite(PathBuf::from(crate::run::format::target::DEFAULT_DB)),
            output: OutputOptions::default(),
        }
    }

    /// The prediction for `batch`.
    fn options(&self, batch: Batch) -> PredictOptions {
        PredictOptions { batch, ..self.prediction.clone() }
    }
}

/// One traced record of a sweep run and the prediction checked against it.
#[derive(Clone, Debug, Serialize)]
pub struct CellPrediction {
    pub cell_key: String,
    pub seq: u64,
    pub endpoint: String,
    pub model: String,
    /// The record's num_gpu (its JSON key and -1 for auto, as the sweep record writes it).
    pub num_gpu: NumGpu,
    /// The record's `result.json`, relative to the run directory.
    pub file: String,
    /// By ggml-cuda's rules (CUDA/HIP) or ggml-vulkan's, each in its own schema.
    pub report: Report,
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
    One(Box<CudaReport>),
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
        let model = match &self.prediction.weights {
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
        let (device, library) = self.vulkan_flags();
        let device_dir = match device {
            DeviceSource::TraceDir(dir) => Some(dir).filter(|d| d.is_dir()),
            _ => None,
        };
        Inputs::none()
            .maybe(model)
            .maybe(observed)
            .maybe(run_path.as_ref())
            .maybe(reads_db.then_some(self.db.given()))
            .maybe(device_dir)
            .maybe(library.as_ref())
    }
}

/// What the records of one `--run` share: where they came from and the models they name, read once each.
struct RunContext {
    /// The database or run directory, for sources.
    source: String,
    run_id: String,
    /// The run directory the records' relative paths (trace directories) are under.
    run_dir: PathBuf,
    models: std::collections::HashMap<String, Result<ModelWeights, String>>,
}

impl PredictCommand {
    /// The Vulkan device and library the flags name (`--device`, `--vulkan-lib`), for a Vulkan prediction.
    fn vulkan_flags(&self) -> (&DeviceSource, &Option<PathBuf>) {
        match &self.prediction.backend {
            Backend::Vulkan { device, library } => (device, library),
            Backend::Cuda { .. } => (&self.vulkan.device, &self.vulkan.library),
        }
    }

    /// Whether `--backend vulkan` was given.
    fn vulkan_given(&self) -> bool {
        matches!((&self.prediction.backend, &self.records), (Backend::Vulkan { .. }, RecordBackend::Given))
    }
}

/// Whether a record is predicted by ggml-vulkan's rules: with `--backend`, as it says; else when the record's own GPU
/// backend is Vulkan.
fn record_is_vulkan(cmd: &PredictCommand, placement: &PlacementOptions) -> bool {
    match cmd.records {
        RecordBackend::Given => matches!(cmd.prediction.backend, Backend::Vulkan { .. }),
        RecordBackend::Own => placement.backend == GpuBackend::Vulkan,
    }
}

/// What one record gives every prediction: its prompt count, its model's weights, its decode count, its placement;
/// and whether ggml-vulkan's rules predict it. `Err` is the reason the record is left out.
fn record_options(
    cmd: &PredictCommand,
    r: &Record,
    ctx: &mut RunContext,
) -> std::result::Result<(PredictOptions, bool), String> {
    let why = |s: String| format!("record {} ({}): {s}", r.seq, short(&r.cell_key));
    let (batch, from_run) = match &cmd.batch {
        BatchFrom::Flags => (cmd.prediction.batch, None),
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
            .or_insert_with(|| model::of_record(&r.model).map_err(|e| format!("{e:#}")));
        match weights {
            Ok(w) => o.weights = WeightSource::Weights(w.clone()),
            Err(e) => return Err(why(format!("its model (field `model`): {e}"))),
        }
    }
    o.prompt_from_run = from_run;
    let vulkan_given = cmd.vulkan_given();
    o.placement = placement_of_record(r, &cmd.prediction.placement, vulkan_given);
    if vulkan_given {
        o.placement.backend = GpuBackend::Vulkan;
    }
    let vulkan = record_is_vulkan(cmd, &o.placement);
    if o.decode_tokens.is_none() {
        o.decode_tokens = if vulkan {
            // Dispatches are counted per request on Vulkan, so the decode is its steps: llama-server samples the
            // first token from the prompt's logits and releases the slot without evaluating the last one it
            // samples (tools/server/server-context.cpp:4222-4229, 11434).
            r.server_timings.decode_n.map(|n| n.saturating_sub(1)).or((r.num_predict == 0).then_some(0))
        } else {
            // The tokens the request generated; a prompt-only request (llama-bench pp) generated none.
            r.server_timings.decode_n.or((r.num_predict == 0).then_some(0))
        };
    }
    let all_logged = r.backend.as_ref().and_then(|f| f.offloaded).is_some_and(|(n, m)| n >= m);
    if matches!(o.weights, WeightSource::Single { .. }) && all_logged && cmd.prediction.placement.num_gpu.is_none() {
        // `offloaded M/M layers`: every layer, which a single weight can be placed by.
        o.placement.num_gpu = Some(NumGpu::AUTO);
    }
    if let (WeightSource::Single { .. }, Some(NumGpu::Layers(n @ 1..))) = (&o.weights, o.placement.num_gpu) {
        // Which layers a count places depends on the model's layers, which a single --type lacks.
        return Err(why(format!(
            "num_gpu {n} offloads some layers only, and --type has none: give --model, or --num-gpu -1 / 0"
        )));
    }
    Ok((o, vulkan))
}

/// The device a Vulkan record is predicted for: `--device`, else the record's own trace directory (the layer's
/// device record of the server that answered it).
fn record_device(
    device: &DeviceSource,
    r: &Record,
    trace: &RecordTrace,
    run_dir: &Path,
) -> Result<DeviceSource, String> {
    if !matches!(device, DeviceSource::EachRecord) {
        return Ok(device.clone());
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
) -> Result<std::result::Result<Report, String>> {
    let (mut o, vulkan) = match record_options(cmd, r, ctx) {
        Ok(x) => x,
        Err(why) => return Ok(Err(why)),
    };
    let source = format!("{}: run {}, {}", ctx.source, ctx.run_id, r.file);
    let context = || format!("record {} ({})", r.seq, short(&r.cell_key));
    if vulkan {
        let (device, library) = cmd.vulkan_flags();
        let device = match record_device(device, r, trace, &ctx.run_dir) {
            Ok(d) => d,
            Err(why) => return Ok(Err(why)),
        };
        o.backend = Backend::Vulkan { device, library: library.clone() };
        let observed = vulkan::observed::from_record_trace(trace, &source, &ctx.run_id);
        o.observed = Some(ObservedSource::LoadedVulkan(observed));
        return Ok(Ok(report::run(&o).with_context(context)?));
    }
    match &o.backend {
        Backend::Cuda { arch, .. } if !arch.is_empty() => {}
        _ => {
            return Ok(Err(format!(
                "record {} ({}): a CUDA/HIP record needs --arch (or --backend vulkan --device for a Vulkan one)",
                r.seq,
                short(&r.cell_key)
            )))
        }
    }
    let observed = cuda::observed::from_record_trace(trace, &source, Some(ctx.run_id.clone()));
    o.observed = Some(ObservedSource::Loaded(observed));
    Ok(Ok(report::run(&o).with_context(context)?))
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
                num_gpu: NumGpu::from_count(r.num_gpu),
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
        BatchFrom::Flags => cmd.prediction.clone(),
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
    Ok(PredictOutput::One(Box::new(cuda::run(&o)?)))
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
    if p.num_gpu.is_none() {
        let logged = r.backend.as_ref().and_then(|f| f.offloaded).map(|(n, _)| NumGpu::Layers(u64::from(n)));
        // The sweep record keeps num_gpu as the count it sent (-1: auto); auto without the log line is what a
        // prediction assumes anyway: every layer, no placement verdicts.
        let recorded = match NumGpu::from_count(r.num_gpu) {
            NumGpu::Auto(_) => None,
            layers => Some(layers),
        };
        p.num_gpu = logged.or(recorded);
    }
    p
}

/// The options of a Vulkan prediction (`--backend vulkan`).
fn vulkan_options(cmd: &PredictCommand) -> Result<PredictOptions> {
    let device = match &cmd.prediction.backend {
        Backend::Vulkan { device: DeviceSource::EachRecord, .. } | Backend::Cuda { .. } => {
            bail!("--backend vulkan needs --device: a profile of data/vulkan_devices.toml or a trace directory")
        }
        Backend::Vulkan { device, .. } => device,
    };
    if cmd.batch != BatchFrom::Flags {
        bail!("--backend vulkan: say how many tokens with --prompt-tokens N or --ne11 N");
    }
    let mut o = cmd.prediction.clone();
    o.observed = observed_source(&cmd.observation);
    match &cmd.observation {
        Observation::Verify(v) => vulkan::verify::observe(o, &device_arg(device), v),
        _ => Ok(o),
    }
}

/// `--device` as given.
fn device_arg(device: &DeviceSource) -> String {
    match device {
        DeviceSource::Profile(id) => id.clone(),
        DeviceSource::TraceDir(dir) => dir.display().to_string(),
        DeviceSource::EachRecord => String::new(),
    }
}

/// Predict and print. A contradiction between prediction and observation is a finding, not an error: exit 0.
pub fn run(cmd: &PredictCommand) -> Result<u8> {
    let vulkan = matches!(cmd.prediction.backend, Backend::Vulkan { .. });
    if vulkan && !matches!(cmd.observation, Observation::Run(_)) {
        let report = vulkan::run(&vulkan_options(cmd)?)?;
        let mut out = Output::open(&cmd.output, &cmd.inputs())?;
        out.emit(&report)?;
        out.finish()?;
        return Ok(exit::OK);
    }
    if let Observation::Verify(_) = &cmd.observation {
        bail!("--verify runs ggml-vulkan impersonating a device: give --backend vulkan --device PROFILE");
    }
    let no_arch = matches!(&cmd.prediction.backend, Backend::Cuda { arch, .. } if arch.is_empty());
    if no_arch && !matches!(cmd.observation, Observation::Run(_)) {
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
        assert_eq!((p.backend, p.gpu_device, p.num_gpu), (GpuBackend::Vulkan, true, Some(NumGpu::Layers(5))));
        // num_gpu 0 on a Vulkan server: the device is in use (op offload can reach it), no layer offloaded.
        let zero = record(0, Some(("CPU", &["Vulkan0 (llvmpipe)"], Some((0, 5)))));
        let p = placement_of_record(&zero, &flags, false);
        assert_eq!((p.backend, p.gpu_device, p.num_gpu), (GpuBackend::Vulkan, true, Some(NumGpu::Layers(0))));
        let cpu = record(3, Some(("CPU", &[], Some((3, 5)))));
        assert!(!placement_of_record(&cpu, &flags, false).gpu_device);
        let rocm = record(7, Some(("ROCm0 (gfx906)", &["ROCm0 (AMD Radeon VII)"], None)));
        let p = placement_of_record(&rocm, &flags, false);
        assert_eq!((p.backend, p.num_gpu), (GpuBackend::Hip, Some(NumGpu::Layers(7))));
        // No log facts: the record's num_gpu; -1 (auto) is left to the default (all, no placement verdicts).
        assert_eq!(placement_of_record(&record(4, None), &flags, false).num_gpu, Some(NumGpu::Layers(4)));
        assert_eq!(placement_of_record(&record(-1, None), &flags, false).num_gpu, None);
        // Flags win over the record.
        let given = PlacementOptions { num_gpu: Some(NumGpu::Layers(2)), backend: GpuBackend::Cuda, ..flags };
        let p = placement_of_record(&vk, &given, true);
        assert_eq!((p.backend, p.num_gpu), (GpuBackend::Cuda, Some(NumGpu::Layers(2))));
    }
}
