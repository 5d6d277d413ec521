//! `gate`: whether one GPU can run a runtime's GPU path, as the matrix of layers in [`crate::support_matrix`]. This
//! command reads the inputs its options name (scans the install trees, reads the logs, opens the sweep database),
//! has the matrix judge them, and prints the report.

mod render;

use std::path::PathBuf;

use anyhow::{bail, Result};

use crate::evidence::{Claim, Confidence, Source};
use crate::gpu::arch::DeviceArch;
use crate::gpu::binaries::{ScanOptions, ScanReport};
use crate::run::format::target::DbValue;
use crate::run::read::db::SweepDb;
use crate::support_matrix::logs::LogEvidence;
use crate::support_matrix::{evaluate, GateReport, Inputs, OllamaRelease};

/// Options of [`run`].
#[derive(Clone, Debug, Default)]
pub struct GateOptions {
    /// `gfx900`, `gfx906:xnack-`, `gfx1201`, `sm_86`.
    pub arch: String,
    /// Install trees to scan (an Ollama lib dir, /opt/rocm/lib, a llama.cpp build).
    pub install: Vec<PathBuf>,
    /// A sweep database whose runs are taken to be on this GPU.
    pub runs: Option<DbValue>,
    /// Only these runs of the database (all when empty).
    pub run_ids: Vec<String>,
    /// Runtime logs (Ollama server log, llama-server output).
    pub logs: Vec<PathBuf>,
    /// The Ollama release whose targets apply (`v0.12.5`); `None`: the newest in the data; `none`: not Ollama.
    pub ollama: Option<String>,
    /// The ROCm release whose support list applies; `None`: the newest in the data.
    pub rocm: Option<String>,
}

/// One `backscope gate` invocation.
#[derive(Clone, Debug, Default)]
pub struct GateCommand {
    pub options: GateOptions,
    /// Format (JSON: schema backscope.gate/1) and destination.
    pub output: crate::output::OutputOptions,
}

/// Read the inputs the options name, then judge.
pub fn gate(opts: &GateOptions) -> Result<GateReport> {
    let arch = DeviceArch::parse(&opts.arch);
    if matches!(arch, DeviceArch::Unknown(_)) {
        bail!("`{}` is not a GPU arch: AMD targets are gfxNNN (gfx900, gfx90a:xnack-), NVIDIA sm_NN or N.N", opts.arch);
    }
    let ollama = OllamaRelease::from_option(opts.ollama.as_deref())?;
    for p in &opts.install {
        if !p.exists() {
            bail!("--install {}: no such file or directory", p.display());
        }
    }
    let scan = (!opts.install.is_empty()).then(|| {
        crate::gpu::binaries::scan(&ScanOptions {
            paths: opts.install.clone(),
            arch: Some(opts.arch.clone()),
            ..Default::default()
        })
    });
    let logs = opts.logs.iter().map(|p| LogEvidence::read(p)).collect::<Result<Vec<_>>>()?;
    let (db_path, records) = match &opts.runs {
        Some(p) => {
            let db = SweepDb::open(p)?;
            let records = if opts.run_ids.is_empty() {
                db.all_records()?
            } else {
                let mut all = Vec::new();
                for id in &opts.run_ids {
                    all.extend(db.records(id)?);
                }
                all
            };
            (Some(db.path().to_string()), records)
        }
        None => (None, Vec::new()),
    };
    let mut report = evaluate(&Inputs {
        arch: &opts.arch,
        scan: scan.as_ref(),
        logs: &logs,
        records: db_path.as_deref().map(|d| (d, records.as_slice())),
        ollama: &ollama,
        rocm: opts.rocm.as_deref(),
    })?;
    report.inputs.run_ids = opts.run_ids.clone();
    if let Some(claim) = scan.as_ref().and_then(scan_problems_claim) {
        report.claims.push(claim);
    }
    Ok(report)
}

/// The install scan's problems (a budget reached, a file that could not be read) limit what layers 3 and 4 rest
/// on: said as one Limited claim with the first few, each naming its file, instead of being dropped.
fn scan_problems_claim(scan: &ScanReport) -> Option<Claim> {
    const SHOWN: usize = 3;
    if scan.problems.is_empty() {
        return None;
    }
    let first: Vec<String> = scan
        .problems
        .iter()
        .take(SHOWN)
        .map(|p| format!("{}: {}", p.path, crate::output::text::truncate(&p.message, 240)))
        .collect();
    let more = scan.problems.len().saturating_sub(SHOWN);
    let statement = format!(
        "The scan of the install met {} problem(s), so layers 3 and 4 rest on what it could read: {}{}",
        scan.problems.len(),
        first.join("; "),
        if more > 0 { format!("; and {more} more (backscope scan --json lists them)") } else { String::new() }
    );
    let sources: Vec<Source> = scan
        .problems
        .iter()
        .take(SHOWN)
        .map(|p| Source::file(p.path.clone(), p.offset, None, "scan problem"))
        .collect();
    Some(Claim::new("gate.scan_problems", Confidence::Limited, statement).with_sources(sources))
}

/// Judge and print.
pub fn run(cmd: &GateCommand) -> Result<u8> {
    let o = &cmd.options;
    let inputs =
        crate::output::Inputs::none().paths(&o.install).paths(&o.logs).maybe(o.runs.as_ref().map(DbValue::given));
    let mut out = crate::output::Output::open(&cmd.output, &inputs)?;
    out.emit(&gate(&cmd.options)?)?;
    out.finish()?;
    Ok(crate::exit::OK)
}
