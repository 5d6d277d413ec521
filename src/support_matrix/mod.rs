//! The gate matrix: whether one GPU can run a runtime's GPU path, as a matrix of layers that are kept apart because they
//! answer different questions (the investigation's finding: "not officially supported" and "not executable" are
//! different claims):
//!
//! 1. **vendor support policy** — the ROCm release's official GPU list (`data/rocm_support.toml`);
//! 2. **build-target filter** — whether the runtime's build targets the GPU (Ollama's CMake regex and release
//!    presets, `data/ollama_amdgpu.toml`);
//! 3. **shipped artifacts** — whether the vendor libraries in the install carry per-arch data for it (rocBLAS
//!    Tensile files, MIOpen databases), from a scan of the install or a rocBLAS error in a log;
//! 4. **binaries** — whether the runtime's GPU libraries contain code objects for it (`scan` with the arch);
//! 5. **runtime recognition** — whether the runtime saw and accepted the GPU (log lines: device lines,
//!    `inference compute`, unsupported-GPU and discovery-failure lines);
//! 6. **runtime execution** — whether requests ran on it (sweep cells per backend and num_gpu, crashes and
//!    finished requests in a log);
//! 7. **Ollama device filter** — whether Ollama's own discovery checks keep the GPU (a ROCm card needs
//!    `rocblas/library/TensileLibrary_lazy_<gfx>.dat`, a CUDA card's compute capability must be in the build's
//!    compiled archs), predicted from the install tree and confirmed by the log line that drops it ([`filter`]).
//!    It acts at discovery, between layers 4 and 5; it is numbered last so that the other numbers stay stable.
//!
//! Each row is Blocks / Allows / Unknown with a confidence and its sources. Layers 1 and 2 come from backscope's
//! knowledge files (Inferred: a cited table, not an observation of this machine); 3 to 6 need inputs and are
//! Unknown without them. A failure in a log (a discovery crash, a rocBLAS missing-arch error) is attributed to the
//! layer that explains it.
//!
//! This is the evaluation that `gate` and `doctor` share: [`evaluate`] takes inputs already read (a scan, logs,
//! sweep records) and returns a [`GateReport`]; reading the inputs a command line names is `gate`'s job.

mod artifacts;
mod binaries;
mod execution;
mod filter;
pub mod logs;
mod policy;
mod recognition;
mod rows;
pub mod runs;
mod verdict;

use anyhow::{bail, Result};

use self::logs::LogEvidence;
pub use self::rows::{
    newest_ollama, newest_rocm, Explanation, GateInputs, GateReport, Layer, LayerRow, OllamaRelease, Status,
};
use crate::gpu::arch::DeviceArch;
use crate::gpu::binaries::ScanReport;
use crate::gpu::knowledge;
use crate::run::format::record::Record;

pub const SCHEMA: &str = "backscope.gate/1";

/// What [`evaluate`] judges from.
#[derive(Clone, Copy, Debug)]
pub struct Inputs<'a> {
    pub arch: &'a str,
    pub scan: Option<&'a ScanReport>,
    pub logs: &'a [LogEvidence],
    /// The database path and the records taken to be on this GPU.
    pub records: Option<(&'a str, &'a [Record])>,
    pub ollama: &'a OllamaRelease,
    pub rocm: Option<&'a str>,
}

/// Judge every layer from the inputs at hand.
pub fn evaluate(i: &Inputs<'_>) -> Result<GateReport> {
    let arch = DeviceArch::parse(i.arch);
    let vendor = match arch {
        DeviceArch::Amd { .. } => "amd",
        DeviceArch::Nvidia { .. } => "nvidia",
        DeviceArch::Unknown(_) => bail!("`{}` is not a GPU arch: AMD targets are gfxNNN, NVIDIA sm_NN or N.N", i.arch),
    };
    let label = arch.label();
    let family = knowledge::gpu_archs().find(&arch).map(|r| r.family().to_string());
    let groups = i.records.map(|(_, r)| runs::group(r)).unwrap_or_default();
    let (binaries_row, ggml_scanned) = binaries::binaries(&arch, i.scan);
    let rows = vec![
        policy::vendor_policy(&arch, i.rocm),
        policy::build_targets(&arch, i.ollama),
        artifacts::shipped_artifacts(&arch, i.scan, i.logs),
        binaries_row,
        recognition::recognition(&arch, i.logs),
        execution::execution(&arch, i.logs, i.records, &groups),
        filter::device_filter(&arch, i.scan, i.logs, i.ollama),
    ];
    let explanations = verdict::explain(&arch, i.logs, &rows);
    let verdict_line = verdict::verdict(&label, &rows, ggml_scanned);
    let claims = verdict::claims(&label, &rows, &explanations, &verdict_line);
    Ok(GateReport {
        schema: SCHEMA,
        arch: label,
        vendor,
        family,
        inputs: GateInputs {
            install: i.scan.map(|s| s.roots.clone()).unwrap_or_default(),
            logs: i.logs.iter().map(|l| l.path.clone()).collect(),
            runs: i.records.map(|(db, _)| db.to_string()),
            run_ids: Vec::new(),
            ollama: i.ollama.label(),
            rocm: i.rocm.map(str::to_string),
        },
        layers: rows,
        verdict: verdict_line,
        explanations,
        run_groups: groups,
        claims,
    })
}

#[cfg(test)]
mod tests;
