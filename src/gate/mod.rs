//! `gate`: whether one GPU can run a runtime's GPU path, as a matrix of layers that are kept apart because they
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

mod filter;
pub mod logs;
mod render;
pub mod runs;

use std::path::{Path, PathBuf};

use anyhow::{bail, Result};
use serde::Serialize;

use self::logs::{processor, same_gpu, FactKind, LogEvidence};
use self::runs::RunGroup;
use crate::evidence::{Claim, Confidence, Source};
use crate::gpucode::coverage::{self, DeviceArch};
use crate::gpucode::{ArchAnswer, ScanOptions, ScanReport};
use crate::knowledge::{self, ollama::parse_release};
use crate::run::db::SweepDb;
use crate::run::record::Record;

pub const SCHEMA: &str = "backscope.gate/1";

/// Sources cited per row.
const ROW_SOURCES: usize = 8;

/// Options of [`run`].
#[derive(Clone, Debug, Default)]
pub struct GateOptions {
    /// `gfx900`, `gfx906:xnack-`, `gfx1201`, `sm_86`.
    pub arch: String,
    /// Install trees to scan (an Ollama lib dir, /opt/rocm/lib, a llama.cpp build).
    pub install: Vec<PathBuf>,
    /// A sweep database whose runs are taken to be on this GPU.
    pub runs: Option<PathBuf>,
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

/// The layers, in the order a request meets them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Layer {
    VendorPolicy,
    BuildTargets,
    ShippedArtifacts,
    Binaries,
    Recognition,
    Execution,
    DeviceFilter,
}

impl Layer {
    pub const ALL: [Layer; 7] = [
        Layer::VendorPolicy,
        Layer::BuildTargets,
        Layer::ShippedArtifacts,
        Layer::Binaries,
        Layer::Recognition,
        Layer::Execution,
        Layer::DeviceFilter,
    ];

    pub fn number(self) -> u8 {
        self as u8 + 1
    }

    pub fn title(self) -> &'static str {
        match self {
            Layer::VendorPolicy => "vendor support policy",
            Layer::BuildTargets => "runtime build-target filter",
            Layer::ShippedArtifacts => "shipped artifacts",
            Layer::Binaries => "binaries",
            Layer::Recognition => "runtime recognition",
            Layer::Execution => "runtime execution",
            Layer::DeviceFilter => "Ollama device filter",
        }
    }

    fn id(self) -> &'static str {
        match self {
            Layer::VendorPolicy => "policy",
            Layer::BuildTargets => "build",
            Layer::ShippedArtifacts => "artifacts",
            Layer::Binaries => "binaries",
            Layer::Recognition => "recognition",
            Layer::Execution => "execution",
            Layer::DeviceFilter => "device_filter",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Status {
    Blocks,
    Allows,
    Unknown,
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Status::Blocks => "Blocks",
            Status::Allows => "Allows",
            Status::Unknown => "Unknown",
        })
    }
}

/// One row of the matrix.
#[derive(Clone, Debug, Serialize)]
pub struct LayerRow {
    pub layer: Layer,
    pub number: u8,
    pub title: &'static str,
    pub status: Status,
    pub confidence: Confidence,
    pub finding: String,
    /// The inputs the row rests on: `knowledge`, `install scan`, `log`, `sweep runs`; empty when it had none.
    pub basis: Vec<&'static str>,
    pub sources: Vec<Source>,
}

impl LayerRow {
    fn new(layer: Layer, status: Status, confidence: Confidence, finding: impl Into<String>) -> Self {
        LayerRow {
            layer,
            number: layer.number(),
            title: layer.title(),
            status,
            confidence,
            finding: finding.into(),
            basis: Vec::new(),
            sources: Vec::new(),
        }
    }

    /// A row the inputs given cannot fill: which input would.
    fn no_input(layer: Layer, what: &str) -> Self {
        LayerRow::new(layer, Status::Unknown, Confidence::Unresolved, what)
    }

    fn basis(mut self, b: &'static str) -> Self {
        if !self.basis.contains(&b) {
            self.basis.push(b);
        }
        self
    }

    fn sources(mut self, s: impl IntoIterator<Item = Source>) -> Self {
        for src in s {
            if self.sources.len() < ROW_SOURCES && !self.sources.contains(&src) {
                self.sources.push(src);
            }
        }
        self
    }
}

/// A failure a log shows, and the layer that explains it.
#[derive(Clone, Debug, Serialize)]
pub struct Explanation {
    pub event: String,
    pub source: Source,
    /// `None`: no layer explains it on the evidence given.
    pub explained_by: Option<Layer>,
    pub confidence: Confidence,
    pub reason: String,
}

/// What the gate was given.
#[derive(Clone, Debug, Default, Serialize)]
pub struct GateInputs {
    pub install: Vec<String>,
    pub logs: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runs: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub run_ids: Vec<String>,
    /// The Ollama release layer 2 used (`none` when not Ollama).
    pub ollama: String,
    /// The ROCm release layer 1 used, when one was named.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rocm: Option<String>,
}

/// Everything `gate` says, in the form `--json` prints.
#[derive(Clone, Debug, Serialize)]
pub struct GateReport {
    pub schema: &'static str,
    pub arch: String,
    /// `amd` or `nvidia`.
    pub vendor: &'static str,
    /// The family from data/gpu_archs.toml, when backscope knows the arch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub family: Option<String>,
    pub inputs: GateInputs,
    pub layers: Vec<LayerRow>,
    /// One line that keeps the layers apart.
    pub verdict: String,
    pub explanations: Vec<Explanation>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub run_groups: Vec<RunGroup>,
    pub claims: Vec<Claim>,
}

/// Which Ollama release layer 2 judges.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OllamaRelease {
    /// A release tag; `newest` says it was the default, not a choice.
    Release { tag: String, newest: bool },
    /// The runtime is not Ollama.
    NotOllama,
}

impl OllamaRelease {
    /// `None` → the newest release in the data; `none` → not Ollama; else a tag (`v0.12.5` or `0.12.5`).
    pub fn from_option(o: Option<&str>) -> Result<OllamaRelease> {
        match o.map(str::trim) {
            None => Ok(OllamaRelease::Release { tag: newest_ollama(), newest: true }),
            Some(v) if v.eq_ignore_ascii_case("none") => Ok(OllamaRelease::NotOllama),
            Some(v) => match parse_release(v) {
                Some([a, b, c]) => Ok(OllamaRelease::Release { tag: format!("v{a}.{b}.{c}"), newest: false }),
                None => bail!("--ollama {v}: not a release tag (v0.12.5), nor `none`"),
            },
        }
    }

    fn label(&self) -> String {
        match self {
            OllamaRelease::Release { tag, .. } => tag.clone(),
            OllamaRelease::NotOllama => "none".into(),
        }
    }
}

/// The newest Ollama release the target data covers.
pub fn newest_ollama() -> String {
    let t = knowledge::ollama_amdgpu();
    t.preset
        .iter()
        .map(|p| p.last.as_str())
        .chain(t.filter.iter().map(|f| f.last.as_str()))
        .max_by_key(|v| parse_release(v).unwrap_or([0; 3]))
        .unwrap_or("v0.0.0")
        .to_string()
}

fn version_key(v: &str) -> Vec<u64> {
    v.split('.').map(|p| p.parse().unwrap_or(0)).collect()
}

/// The newest ROCm release the support data covers.
pub fn newest_rocm() -> String {
    knowledge::rocm_support()
        .release
        .iter()
        .flat_map(|r| r.versions.iter())
        .max_by_key(|v| version_key(v))
        .cloned()
        .unwrap_or_default()
}

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

fn rule(file: &str, rule: impl Into<String>, upstream: &str) -> Source {
    Source::Rule { file: file.into(), rule: rule.into(), upstream: upstream.into() }
}

fn vendor_policy(arch: &DeviceArch, rocm: Option<&str>) -> LayerRow {
    let layer = Layer::VendorPolicy;
    let DeviceArch::Amd { id } = arch else {
        return LayerRow::no_input(
            layer,
            "backscope has no NVIDIA support-policy table (which CUDA releases support which compute capability)",
        );
    };
    let p = processor(id);
    let support = knowledge::rocm_support();
    let file = knowledge::ROCM_SUPPORT_FILE;
    let src = |version: &str| {
        support
            .release
            .iter()
            .find(|r| r.versions.iter().any(|v| v == version))
            .map(|r| rule(file, format!("ROCm {version}"), &r.source))
    };
    use knowledge::rocm::Support;
    let row = match rocm {
        Some(v) => match support.support(v, p) {
            Support::Listed { .. } => {
                LayerRow::new(layer, Status::Allows, Confidence::Inferred, format!("ROCm {v}'s official GPU list includes {p}"))
            }
            Support::NotListed { .. } => LayerRow::new(
                layer,
                Status::Blocks,
                Confidence::Inferred,
                format!("ROCm {v}'s official GPU list does not include {p}: not officially supported (a policy statement, not a statement about code)"),
            ),
            Support::NoData => {
                return LayerRow::no_input(
                    layer,
                    &format!("backscope has no support list for ROCm {v} (it has {})", known_rocm().join(", ")),
                )
                .basis("knowledge")
                .sources([rule(file, "releases covered", "see the file header")]);
            }
        }
        .sources(src(v)),
        None => {
            let newest = newest_rocm();
            let listing = support.releases_listing(p);
            let listed_newest = listing.contains(&newest.as_str());
            let finding = if listed_newest {
                format!("officially supported by ROCm {newest}, the newest release in backscope's data")
            } else if listing.is_empty() {
                format!(
                    "listed by no ROCm release in backscope's data ({} … {newest}): not officially supported (a policy statement, not a statement about code)",
                    known_rocm().first().cloned().unwrap_or_default()
                )
            } else {
                format!(
                    "not listed by ROCm {newest}, the newest release in backscope's data; listed by {}",
                    listing.join(", ")
                )
            };
            let status = if listed_newest { Status::Allows } else { Status::Blocks };
            LayerRow::new(layer, status, Confidence::Inferred, finding)
                .sources(src(&newest))
                .sources(listing.last().and_then(|v| src(v)))
        }
    };
    row.basis("knowledge")
}

fn known_rocm() -> Vec<String> {
    let mut v: Vec<String> =
        knowledge::rocm_support().release.iter().flat_map(|r| r.versions.iter().cloned()).collect();
    v.sort_by_key(|x| version_key(x));
    v
}

fn build_targets(arch: &DeviceArch, ollama: &OllamaRelease) -> LayerRow {
    let layer = Layer::BuildTargets;
    let OllamaRelease::Release { tag, newest } = ollama else {
        return LayerRow::no_input(
            layer,
            "not an Ollama runtime (--ollama none): its build targets are what layer 4 reads from its binaries",
        );
    };
    let DeviceArch::Amd { id } = arch else {
        return LayerRow::no_input(layer, "backscope has no data on Ollama's CUDA architecture lists");
    };
    let p = processor(id);
    let data = knowledge::ollama_amdgpu();
    let file = knowledge::OLLAMA_AMDGPU_FILE;
    let newest_note = if *newest {
        format!(" ({tag} is the newest release in backscope's data; --ollama picks another)")
    } else {
        String::new()
    };
    let which = tag.clone();
    let Some(preset) = data.preset_at(tag) else {
        return LayerRow::no_input(
            layer,
            &format!("backscope has no target data for Ollama {which} (it covers v0.5.8 and later)"),
        )
        .basis("knowledge");
    };
    let built: Vec<&str> = preset.targets.iter().map(String::as_str).filter(|t| processor(t) == p).collect();
    let mut finding = if built.is_empty() {
        format!(
            "Ollama {which}'s Linux release build (preset '{}', ROCm {}) does not target {p}: its ROCm backend has no code for it",
            preset.preset, preset.rocm
        )
    } else {
        format!(
            "Ollama {which}'s Linux release build (preset '{}', ROCm {}) targets {}",
            preset.preset,
            preset.rocm,
            built.join(", ")
        )
    };
    let mut sources = vec![rule(file, &preset.id, &preset.source)];
    if let Some(f) = data.filter_at(tag) {
        let keeps = f.apply(&[p]).map(|k| !k.is_empty()).unwrap_or(false);
        finding.push_str(&format!(
            "; a local build's default filter {} {p}",
            if keeps { format!("`{}` keeps", f.regex) } else { format!("`{}` drops", f.regex) }
        ));
        sources.push(rule(file, &f.id, &f.source));
    }
    finding.push_str(&newest_note);
    let status = if built.is_empty() { Status::Blocks } else { Status::Allows };
    LayerRow::new(layer, status, Confidence::Inferred, finding).basis("knowledge").sources(sources)
}

/// MIOpen database arch names carry the CU count after the processor (`gfx90a68.kdb`, `gfx906_60.HIP.fdb.txt`).
fn miopen_arch_matches(db_arch: &str, p: &str) -> bool {
    db_arch
        .strip_prefix(p)
        .is_some_and(|rest| rest.is_empty() || rest.bytes().all(|b| b.is_ascii_digit()) && rest.len() == 2)
}

/// Up to `n` files of a vendor library directory that are for processor `p`.
fn files_for(dir: &str, p: &str, n: usize) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|name| crate::gpucode::tree::arch_in_name(name).is_some_and(|a| a == p))
        .collect();
    names.sort();
    names.truncate(n);
    names.into_iter().map(|n| Path::new(dir).join(n).display().to_string()).collect()
}

fn is_rocblas(library: &str) -> bool {
    let l = library.to_ascii_lowercase();
    l.contains("rocblas") && !l.contains("rocblaslt")
}

fn shipped_artifacts(arch: &DeviceArch, scan: Option<&ScanReport>, logs: &[LogEvidence]) -> LayerRow {
    let layer = Layer::ShippedArtifacts;
    let DeviceArch::Amd { id } = arch else {
        return LayerRow::no_input(
            layer,
            "per-arch vendor library data (Tensile files) is an AMD matter; not checked for NVIDIA",
        );
    };
    let p = processor(id);
    // A rocBLAS error in a log is rocBLAS's own statement that the install lacks its library for the arch.
    let mut rocblas_errors = Vec::new();
    let mut blaslt_errors = Vec::new();
    for log in logs {
        for f in &log.facts {
            if let FactKind::BlasError { library, arch: Some(a) } = &f.kind {
                if same_gpu(a, arch) {
                    if is_rocblas(library) { &mut rocblas_errors } else { &mut blaslt_errors }.push(log.fact_source(f));
                }
            }
        }
    }
    let mut notes = Vec::new();
    let mut scan_sources = Vec::new();
    let (mut rocblas_with, mut rocblas_without) = (Vec::new(), Vec::new());
    if let Some(scan) = scan {
        for v in &scan.vendor_blas {
            let n = v.files_per_arch.get(p).copied().unwrap_or(0);
            let co = v.code_objects_per_arch.get(p).copied().unwrap_or(0);
            let fallback = v.fallback_per_arch.get(p).copied().unwrap_or(0);
            if n > 0 {
                for f in files_for(&v.path, p, 3) {
                    scan_sources.push(Source::file(f, None, None, format!("{} library file for {p}", v.library)));
                }
            } else {
                let others: Vec<&str> = v.files_per_arch.keys().map(String::as_str).collect();
                scan_sources.push(Source::file(
                    &v.path,
                    None,
                    None,
                    format!("{} library dir: files for {}", v.library, others.join(", ")),
                ));
            }
            let text = if n > 0 {
                format!(
                    "{} {} ships {n} file(s) for {p} ({co} code object(s){})",
                    v.library,
                    v.path,
                    if fallback > 0 { format!(", {fallback} fallback") } else { String::new() }
                )
            } else {
                format!("{} {} ships nothing for {p}", v.library, v.path)
            };
            if v.library == "rocblas" {
                if n > 0 { &mut rocblas_with } else { &mut rocblas_without }.push(text);
            } else {
                notes.push(text);
            }
        }
        let dbs: Vec<_> = scan.miopen.iter().filter(|d| miopen_arch_matches(&d.arch, p)).collect();
        if !dbs.is_empty() {
            let lines: u64 = dbs.iter().filter_map(|d| d.lines).sum();
            notes.push(format!("MIOpen ships {} database file(s) for {p} ({lines} lines)", dbs.len()));
            for d in dbs.iter().take(2) {
                scan_sources.push(Source::file(&d.path, None, Some(d.size), format!("MIOpen database for {}", d.arch)));
            }
        }
    }
    let tail = if notes.is_empty() { String::new() } else { format!("; {}", notes.join("; ")) };
    let row = if !rocblas_errors.is_empty() {
        LayerRow::new(
            layer,
            Status::Blocks,
            Confidence::Confirmed,
            format!(
                "rocBLAS reported that the runtime's install has no Tensile library for {p}: its GEMMs (ggml's BLAS path) cannot run there{}{tail}",
                if rocblas_with.is_empty() {
                    String::new()
                } else {
                    format!("; the scanned install differs ({}): the log's runtime used another rocBLAS", rocblas_with.join("; "))
                }
            ),
        )
        .basis("log")
        .sources(rocblas_errors)
    } else if !rocblas_with.is_empty() {
        LayerRow::new(layer, Status::Allows, Confidence::Confirmed, format!("{}{tail}", rocblas_with.join("; ")))
    } else if !rocblas_without.is_empty() {
        LayerRow::new(
            layer,
            Status::Blocks,
            Confidence::Confirmed,
            format!(
                "{}: rocBLAS would fail with 'Cannot read …TensileLibrary.dat … for GPU arch : {p}'{tail}",
                rocblas_without.join("; ")
            ),
        )
    } else if !blaslt_errors.is_empty() {
        LayerRow::new(
            layer,
            Status::Unknown,
            Confidence::Confirmed,
            format!("hipBLASLt reported that the install has no Tensile library for {p}; the log alone does not show whether that stopped the runtime (rocBLAS is ggml's GEMM path){tail}"),
        )
        .basis("log")
        .sources(blaslt_errors.clone())
    } else if scan.is_some() {
        let msg = if notes.is_empty() {
            "no rocBLAS library directory in the scanned tree (the runtime may use the system's)".to_string()
        } else {
            format!("no rocBLAS library directory in the scanned tree{tail}")
        };
        LayerRow::new(layer, Status::Unknown, Confidence::Unresolved, msg)
    } else {
        return LayerRow::no_input(layer, "no install scanned (--install DIR) and no rocBLAS error in a log");
    };
    let row = if scan.is_some() && (!scan_sources.is_empty() || row.basis.is_empty()) {
        row.basis("install scan")
    } else {
        row
    };
    row.sources(blaslt_errors).sources(scan_sources)
}

/// Libraries inside vendor BLAS directories are layer 3's business, not the runtime's binaries.
fn in_vendor_dir(scan: &ScanReport, path: &str) -> bool {
    scan.vendor_blas.iter().any(|v| path.starts_with(&format!("{}/", v.path)))
}

/// Layer 4, and whether it judged ggml GPU backends (rather than other GPU code, such as a vendor library).
fn binaries(arch: &DeviceArch, scan: Option<&ScanReport>) -> (LayerRow, bool) {
    let layer = Layer::Binaries;
    let Some(scan) = scan else { return (LayerRow::no_input(layer, "no install scanned (--install DIR)"), false) };
    let answer: ArchAnswer = match &scan.arch_answer {
        Some(a) if a.arch == arch.label() => a.clone(),
        _ => coverage::answer(arch, &scan.files, &scan.vendor_blas),
    };
    let gpu_backend = |path: &str| {
        scan.files
            .iter()
            .find(|f| f.path == path)
            .and_then(|f| f.backend.as_ref())
            .is_some_and(|b| matches!(b.name.as_str(), "hip" | "cuda" | "musa"))
    };
    let libs: Vec<_> = answer.libraries.iter().filter(|l| !in_vendor_dir(scan, &l.path)).collect();
    let backends: Vec<_> = libs.iter().copied().filter(|l| gpu_backend(&l.path)).collect();
    let ggml = !backends.is_empty();
    let (judged, what) = if ggml { (backends, "ggml GPU backend") } else { (libs, "GPU code") };
    if judged.is_empty() {
        let row = LayerRow::new(
            layer,
            Status::Unknown,
            Confidence::Unresolved,
            format!("the scanned tree ({}) has no GPU code outside vendor library directories", scan.roots.join(", ")),
        )
        .basis("install scan")
        .sources(scan.roots.iter().map(|r| Source::file(r, None, None, "scanned tree")));
        return (row, false);
    }
    let mut sources = Vec::new();
    let mut parts = Vec::new();
    let (mut runs, mut jit, mut mode, mut nothing) = (0, 0, 0, 0);
    for l in &judged {
        let name = l.path.rsplit('/').next().unwrap_or(&l.path);
        match l.verdict {
            "nothing" => {
                nothing += 1;
                parts.push(format!(
                    "{name} ({what}) has no code object for {}; it carries {}",
                    arch.label(),
                    l.targets_present.join(", ")
                ));
                let f = scan.files.iter().find(|f| f.path == l.path);
                let section = f.and_then(|f| {
                    f.amdgpu
                        .as_ref()
                        .and_then(|a| a.section.clone())
                        .or_else(|| f.cuda.as_ref().and_then(|c| c.section.clone()))
                });
                sources.push(match section {
                    Some(s) => Source::file(
                        &l.path,
                        Some(s.offset),
                        Some(s.size),
                        format!("{} section: code objects for {} only", s.name, l.targets_present.join(", ")),
                    ),
                    None => Source::file(
                        &l.path,
                        None,
                        None,
                        format!("code objects for {} only", l.targets_present.join(", ")),
                    ),
                });
            }
            "depends-on-mode" => {
                mode += 1;
                parts.push(format!("{name}: {}", l.note));
                sources.push(Source::file(
                    &l.path,
                    None,
                    None,
                    format!("code objects for {}", l.targets_present.join(", ")),
                ));
            }
            "jit-from-ptx" => {
                jit += 1;
                parts.push(format!("{name} ({what}) has only PTX the driver must JIT-compile for {}", arch.label()));
                sources.push(Source::file(&l.path, None, None, "PTX for an older compute capability"));
            }
            _ => {
                runs += 1;
                let kinds: Vec<String> = l
                    .families
                    .iter()
                    .filter(|(f, _)| f.as_str() != "other")
                    .take(4)
                    .map(|(f, n)| format!("{f} {n}"))
                    .collect();
                parts.push(format!(
                    "{name} ({what}) carries code objects that run on {}{}",
                    arch.label(),
                    if kinds.is_empty() { String::new() } else { format!(" ({})", kinds.join(", ")) }
                ));
                sources.extend(
                    l.evidence_offsets
                        .iter()
                        .take(2)
                        .map(|o| Source::file(&l.path, Some(*o), None, format!("code object for {}", arch.label()))),
                );
            }
        }
    }
    let (status, confidence) = if runs > 0 {
        (Status::Allows, Confidence::Confirmed)
    } else if jit > 0 {
        (Status::Allows, Confidence::Inferred)
    } else if mode > 0 {
        (Status::Unknown, Confidence::Unresolved)
    } else {
        debug_assert!(nothing > 0);
        (Status::Blocks, Confidence::Confirmed)
    };
    (LayerRow::new(layer, status, confidence, parts.join("; ")).basis("install scan").sources(sources), ggml)
}

fn recognition(arch: &DeviceArch, logs: &[LogEvidence]) -> LayerRow {
    let layer = Layer::Recognition;
    if logs.is_empty() {
        return LayerRow::no_input(layer, "no runtime log (--log FILE)");
    }
    let label = arch.label();
    let (mut seen, mut refused, mut failed, mut cpu_only, mut others) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut other_names = Vec::new();
    let mut gpu_compute = false;
    for log in logs {
        for f in &log.facts {
            match &f.kind {
                FactKind::Device { arch: a, compute_capability: cc, .. } => {
                    let name = a.as_deref().or(cc.as_deref()).unwrap_or("");
                    if same_gpu(name, arch) {
                        seen.push(log.fact_source(f));
                    } else if !name.is_empty() {
                        others.push(log.fact_source(f));
                        other_names.push(name.to_string());
                    }
                }
                FactKind::InferenceCompute { library, compute, .. } => {
                    let lib = library.as_deref().unwrap_or("");
                    if lib.eq_ignore_ascii_case("cpu") {
                        cpu_only.push(log.fact_source(f));
                    } else {
                        gpu_compute = true;
                        match compute.as_deref() {
                            Some(c) if same_gpu(c, arch) => seen.push(log.fact_source(f)),
                            Some(c) if !c.is_empty() => {
                                others.push(log.fact_source(f));
                                other_names.push(c.to_string());
                            }
                            _ => {}
                        }
                    }
                }
                FactKind::UnsupportedGpu { gpu, .. } if gpu.as_deref().is_none_or(|g| same_gpu(g, arch)) => {
                    refused.push(log.fact_source(f));
                }
                FactKind::DiscoveryFailure { .. } => failed.push(log.fact_source(f)),
                _ => {}
            }
        }
    }
    other_names.sort();
    other_names.dedup();
    let row = if !refused.is_empty() {
        LayerRow::new(
            layer,
            Status::Blocks,
            Confidence::Confirmed,
            format!("the runtime refused the GPU as unsupported ({label})"),
        )
        .sources(refused)
    } else if !seen.is_empty() {
        LayerRow::new(layer, Status::Allows, Confidence::Confirmed, format!("the runtime listed the GPU as {label}"))
            .sources(seen)
    } else if !failed.is_empty() {
        let fell_back = !cpu_only.is_empty() && !gpu_compute;
        LayerRow::new(
            layer,
            Status::Blocks,
            if fell_back { Confidence::Confirmed } else { Confidence::Inferred },
            format!(
                "GPU discovery failed{}; the log does not name the GPU, which is taken to be {label} as given",
                if fell_back { " and the runtime fell back to the CPU" } else { "" }
            ),
        )
        .sources(failed)
        .sources(cpu_only)
    } else if !others.is_empty() {
        LayerRow::new(
            layer,
            Status::Unknown,
            Confidence::Unresolved,
            format!("the log's GPUs are {}, not {label}", other_names.join(", ")),
        )
        .sources(others)
    } else if !cpu_only.is_empty() {
        LayerRow::new(layer, Status::Blocks, Confidence::Inferred, "the runtime found no GPU and uses the CPU")
            .sources(cpu_only)
    } else {
        LayerRow::new(
            layer,
            Status::Unknown,
            Confidence::Unresolved,
            "the log has no device, inference-compute or discovery line",
        )
        .sources(logs.iter().map(|l| Source::file(&l.path, None, None, format!("{} lines read", l.lines))))
    };
    row.basis("log")
}

fn execution(
    arch: &DeviceArch,
    logs: &[LogEvidence],
    records: Option<(&str, &[Record])>,
    groups: &[RunGroup],
) -> LayerRow {
    let layer = Layer::Execution;
    if logs.is_empty() && records.is_none() {
        return LayerRow::no_input(layer, "no runs (--runs DB) and no runtime log (--log FILE)");
    }
    let gpu_kind = match arch {
        DeviceArch::Amd { .. } => "rocm",
        _ => "cuda",
    };
    let mut allows = Vec::new();
    let mut blocks = Vec::new();
    let mut sources_ok = Vec::new();
    let mut sources_bad = Vec::new();
    let mut basis = Vec::new();
    let mut other_gpu = Vec::new();
    let mut notes: Vec<String> = Vec::new();
    if let Some((db, _)) = records {
        basis.push("sweep runs");
        notes.push(format!("the runs in {db} are taken to be on {}", arch.label()));
        for g in groups.iter().filter(|g| g.num_gpu != 0) {
            let failures: Vec<String> = g.outcomes.iter().map(|(o, n)| format!("{n} {o}")).collect();
            let text = format!(
                "{}{} at num_gpu {}: {} ok, {} failed{}",
                g.backend,
                if g.devices.is_empty() { String::new() } else { format!(" [{}]", g.devices.join("; ")) },
                g.num_gpu,
                g.ok,
                g.failed,
                if failures.is_empty() { String::new() } else { format!(" ({})", failures.join(", ")) }
            );
            if g.backend == gpu_kind {
                if g.ok > 0 {
                    allows.push(text);
                    sources_ok.extend(g.sources.iter().cloned());
                } else {
                    blocks.push(text);
                    sources_bad.extend(g.sources.iter().cloned());
                }
            } else if g.backend == "unknown" && g.failed > 0 {
                blocks.push(format!("{text} (backend not recorded)"));
                sources_bad.extend(g.sources.iter().cloned());
            } else if g.backend != "cpu" && g.ok > 0 {
                other_gpu.push(text);
            }
        }
        if groups.is_empty() {
            blocks.push(format!("{db} has no records"));
        }
    }
    for log in logs {
        basis.push("log");
        let offloaded =
            log.facts.iter().any(|f| matches!(f.kind, FactKind::Offloaded { offloaded, .. } if offloaded > 0));
        let on_gpu = log.facts.iter().any(|f| match &f.kind {
            FactKind::Device { arch: a, compute_capability: cc, .. } => {
                a.as_deref().or(cc.as_deref()).is_some_and(|n| same_gpu(n, arch))
            }
            FactKind::InferenceCompute { compute: Some(c), .. } => same_gpu(c, arch),
            _ => false,
        });
        let done: Vec<_> = log.facts.iter().filter(|f| f.kind == FactKind::RequestDone).collect();
        if offloaded && on_gpu && !done.is_empty() {
            allows.push(format!("{}: {} request(s) finished with layers offloaded to the GPU", log.path, done.len()));
            sources_ok.extend(done.iter().take(2).map(|f| log.fact_source(f)));
            sources_ok.extend(
                log.facts
                    .iter()
                    .filter(|f| matches!(f.kind, FactKind::Offloaded { .. }))
                    .take(1)
                    .map(|f| log.fact_source(f)),
            );
        }
        for c in log.crashes.iter().filter(|c| c.is_death()) {
            blocks.push(format!(
                "{}:{}: the runtime died during {}{}",
                log.path,
                c.line,
                c.phase.label(),
                c.signal.as_ref().map(|s| format!(" ({s})")).unwrap_or_default()
            ));
            sources_bad.push(log.source(c.line, &c.text));
        }
    }
    let mut other = if other_gpu.is_empty() {
        String::new()
    } else {
        format!("; other GPU backends ran ({}): a path layers 1-4 do not concern", other_gpu.join("; "))
    };
    for n in notes {
        other.push_str(&format!(" ({n})"));
    }
    let mut row = if !allows.is_empty() {
        let failed = if blocks.is_empty() { String::new() } else { format!("; failures too: {}", blocks.join("; ")) };
        LayerRow::new(layer, Status::Allows, Confidence::Confirmed, format!("{}{failed}{other}", allows.join("; ")))
            .sources(sources_ok)
            .sources(sources_bad)
    } else if !blocks.is_empty() {
        LayerRow::new(layer, Status::Blocks, Confidence::Confirmed, format!("{}{other}", blocks.join("; ")))
            .sources(sources_bad)
    } else {
        let mut missing = Vec::new();
        if records.is_some() {
            missing.push(format!("no {gpu_kind} cell with layers on the GPU"));
        }
        if !logs.is_empty() {
            missing.push("no finished GPU request and no crash in the log".to_string());
        }
        LayerRow::new(layer, Status::Unknown, Confidence::Unresolved, format!("{}{other}", missing.join("; ")))
    };
    for b in basis {
        row = row.basis(b);
    }
    row
}

/// The layer that explains a failure: the first of the given layers that blocks.
fn first_blocking(rows: &[LayerRow], candidates: &[Layer]) -> Option<Layer> {
    candidates.iter().copied().find(|l| rows.iter().any(|r| r.layer == *l && r.status == Status::Blocks))
}

fn explain(arch: &DeviceArch, logs: &[LogEvidence], rows: &[LayerRow]) -> Vec<Explanation> {
    let mut out = Vec::new();
    let label = arch.label();
    for log in logs {
        for f in &log.facts {
            let source = log.fact_source(f);
            match &f.kind {
                FactKind::BlasError { library, arch: a } => {
                    let p = a.as_deref().unwrap_or("?");
                    let other = a.as_deref().is_some_and(|a| !same_gpu(a, arch));
                    out.push(Explanation {
                        event: format!("{library} has no library for {p}"),
                        source,
                        explained_by: Some(Layer::ShippedArtifacts),
                        confidence: Confidence::Confirmed,
                        reason: format!(
                            "the vendor library names the missing per-arch file itself: a shipped-artifact gap, not a code-object or policy question{}",
                            if other { format!(" (the log's arch {p} is not {label}: an override or another GPU)") } else { String::new() }
                        ),
                    });
                }
                FactKind::UnsupportedGpu { gpu, reason: Some(r), .. } if filter::is_filter_reason(r) => {
                    out.push(Explanation {
                        event: format!("Ollama dropped {} at discovery: {r}", gpu.as_deref().unwrap_or("the GPU")),
                        source,
                        explained_by: Some(Layer::DeviceFilter),
                        confidence: Confidence::Confirmed,
                        reason: "Ollama's own device check (layer 7) names the missing file or arch itself".into(),
                    });
                }
                FactKind::UnsupportedGpu { gpu, supported, .. } => {
                    let by = first_blocking(rows, &[Layer::BuildTargets]);
                    out.push(Explanation {
                        event: format!(
                            "the runtime refused {} (supported: {})",
                            gpu.as_deref().unwrap_or("the GPU"),
                            supported.as_deref().unwrap_or("?")
                        ),
                        source,
                        explained_by: by.or(Some(Layer::Recognition)),
                        confidence: if by.is_some() { Confidence::Inferred } else { Confidence::Confirmed },
                        reason: match by {
                            Some(_) => {
                                "the runtime's build does not target the GPU (layer 2), so its own list refuses it"
                                    .into()
                            }
                            None => "the runtime's supported-type list refuses it (layer 5 itself)".into(),
                        },
                    });
                }
                FactKind::DiscoveryFailure { error } => {
                    let by = first_blocking(rows, &[Layer::Binaries, Layer::ShippedArtifacts, Layer::BuildTargets]);
                    out.push(Explanation {
                        event: format!("GPU discovery failed ({})", error.as_deref().unwrap_or("no error given")),
                        source,
                        explained_by: by,
                        confidence: if by.is_some() { Confidence::Inferred } else { Confidence::Unresolved },
                        reason: match by {
                            Some(Layer::Binaries) => format!("the runtime's GPU library has no code object for {label} (layer 4): initialising the device in the discovery runner fails"),
                            Some(Layer::ShippedArtifacts) => format!("the install's rocBLAS has no Tensile library for {label} (layer 3): Ollama's discovery initialises rocBLAS (GGML_CUDA_INIT=1) and that fails"),
                            Some(_) => format!("the runtime's build does not target {label} (layer 2): its ROCm library has no code object for it"),
                            None => "no layer blocks on the evidence given; scan the runtime's install (--install) to check layers 3 and 4".into(),
                        },
                    });
                }
                _ => {}
            }
        }
        for c in log.crashes.iter().filter(|c| c.is_death() && !c.kinds.iter().any(|k| k == "discovery_failure")) {
            let by = first_blocking(rows, &[Layer::Binaries, Layer::ShippedArtifacts]);
            out.push(Explanation {
                event: format!("the runtime died during {}{}", c.phase.label(), c.signal.as_ref().map(|s| format!(" ({s})")).unwrap_or_default()),
                source: log.source(c.line, &c.text),
                explained_by: by,
                confidence: if by.is_some() { Confidence::Inferred } else { Confidence::Unresolved },
                reason: match by {
                    Some(l) => format!("layer {} ({}) blocks {label}; the crash is consistent with it", l.number(), l.title()),
                    None => "no layer blocks on the evidence given: the cause is past what the gate checks (see `backscope` log analysis)".into(),
                },
            });
        }
    }
    out
}

fn phrase(r: &LayerRow) -> &'static str {
    match (r.layer, r.status) {
        (Layer::VendorPolicy, Status::Blocks) => "not officially supported",
        (Layer::VendorPolicy, Status::Allows) => "officially supported",
        (Layer::VendorPolicy, Status::Unknown) => "support policy unknown",
        (Layer::BuildTargets, Status::Blocks) => "not a build target of the runtime",
        (Layer::BuildTargets, Status::Allows) => "a build target of the runtime",
        (Layer::BuildTargets, Status::Unknown) => "build targets unknown",
        (Layer::ShippedArtifacts, Status::Blocks) => "vendor libraries ship nothing for it",
        (Layer::ShippedArtifacts, Status::Allows) => "vendor libraries ship data for it",
        (Layer::ShippedArtifacts, Status::Unknown) => "vendor artifacts unknown",
        (Layer::Binaries, Status::Blocks) => "no code object for it in the binaries",
        (Layer::Binaries, Status::Allows) if r.confidence != Confidence::Confirmed => {
            "only PTX for it in the binaries (driver JIT)"
        }
        (Layer::Binaries, Status::Allows) => "code objects for it in the binaries",
        (Layer::Binaries, Status::Unknown) => "binaries not judged",
        (Layer::Recognition, Status::Blocks) => "not recognised by the runtime",
        (Layer::Recognition, Status::Allows) => "recognised by the runtime",
        (Layer::Recognition, Status::Unknown) => "recognition not observed",
        (Layer::Execution, Status::Blocks) => "runs failed",
        (Layer::Execution, Status::Allows) => "runs succeeded",
        (Layer::Execution, Status::Unknown) => "execution not observed",
        (Layer::DeviceFilter, Status::Blocks) => "dropped by Ollama's device filter",
        (Layer::DeviceFilter, Status::Allows) => "kept by Ollama's device filter",
        (Layer::DeviceFilter, Status::Unknown) => "Ollama's device filter not judged",
    }
}

/// The one-line verdict. `ggml_scanned`: layer 4 judged the runtime's own ggml GPU libraries, whose content then
/// outranks what layer 2's data says a release build targets (the install may be another build).
fn verdict(label: &str, rows: &[LayerRow], ggml_scanned: bool) -> String {
    let parts: Vec<String> = rows.iter().map(|r| format!("({}) {}", r.number, phrase(r))).collect();
    let status = |l: Layer| rows.iter().find(|r| r.layer == l).map(|r| r.status).unwrap_or(Status::Unknown);
    // What the binaries and the install show outranks what the knowledge files say about them.
    let priority = |l: Layer| match l {
        Layer::Binaries => 0,
        Layer::ShippedArtifacts => 1,
        _ => 2,
    };
    let mut blocking: Vec<&LayerRow> = rows
        .iter()
        .filter(|r| {
            matches!(r.layer, Layer::BuildTargets | Layer::ShippedArtifacts | Layer::Binaries | Layer::DeviceFilter)
                && r.status == Status::Blocks
        })
        .collect();
    let binaries_allow = status(Layer::Binaries) == Status::Allows && ggml_scanned;
    let overruled = binaries_allow && status(Layer::BuildTargets) == Status::Blocks;
    if overruled {
        blocking.retain(|r| r.layer != Layer::BuildTargets);
    }
    blocking.sort_by_key(|r| (r.confidence, priority(r.layer)));
    let policy_blocks = status(Layer::VendorPolicy) == Status::Blocks;
    let conclusion = if status(Layer::Execution) == Status::Allows {
        if policy_blocks {
            "executable (runs succeeded) although not officially supported".to_string()
        } else {
            "executable: runs succeeded".to_string()
        }
    } else if let Some(b) = blocking.first() {
        let also: Vec<String> = blocking[1..].iter().map(|r| format!("{} ({})", r.number, r.title)).collect();
        format!(
            "not executable through this runtime's GPU path: layer {} ({}) blocks it{}",
            b.number,
            b.title,
            if also.is_empty() { String::new() } else { format!(", and so does layer {}", also.join(", ")) }
        )
    } else if status(Layer::Execution) == Status::Blocks {
        "runs failed although no earlier layer blocks: the cause is past what the gate checks".to_string()
    } else if policy_blocks {
        "not officially supported, which alone does not make it non-executable: no other layer blocks on the evidence given".to_string()
    } else {
        "no layer blocks on the evidence given".to_string()
    };
    let note = if overruled {
        " (the scanned binaries carry code for it although layer 2's release build does not target it: another build)"
    } else {
        ""
    };
    format!("{label}: {} => {conclusion}{note}", parts.join("; "))
}

fn claims(label: &str, rows: &[LayerRow], explanations: &[Explanation], verdict_line: &str) -> Vec<Claim> {
    let mut out: Vec<Claim> = rows
        .iter()
        .map(|r| {
            Claim::new(
                format!("gate.{label}.{}", r.layer.id()),
                r.confidence,
                format!("Layer {} ({}) {}: {}", r.number, r.title, r.status, r.finding),
            )
            .with_sources(r.sources.iter().cloned())
        })
        .collect();
    for (i, e) in explanations.iter().enumerate() {
        let by = match e.explained_by {
            Some(l) => format!("explained by layer {} ({}): {}", l.number(), l.title(), e.reason),
            None => format!("not explained by any layer: {}", e.reason),
        };
        out.push(
            Claim::new(format!("gate.{label}.explain.{i}"), e.confidence, format!("{}: {by}", e.event))
                .with_source(e.source.clone()),
        );
    }
    let mut decisive: Vec<Source> =
        rows.iter().filter(|r| r.status != Status::Unknown).filter_map(|r| r.sources.first().cloned()).collect();
    if decisive.is_empty() {
        // Every layer lacked input: the verdict rests on the rule that such layers are Unknown.
        decisive.push(Source::Rule {
            file: "src/gate/mod.rs".into(),
            rule: "a layer without input is Unknown".into(),
            upstream: "the gate's inputs (--install, --log, --runs) and knowledge files".into(),
        });
    }
    out.push(Claim::new(format!("gate.{label}.verdict"), Confidence::Inferred, verdict_line).with_sources(decisive));
    out
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
    let (binaries_row, ggml_scanned) = binaries(&arch, i.scan);
    let rows = vec![
        vendor_policy(&arch, i.rocm),
        build_targets(&arch, i.ollama),
        shipped_artifacts(&arch, i.scan, i.logs),
        binaries_row,
        recognition(&arch, i.logs),
        execution(&arch, i.logs, i.records, &groups),
        filter::device_filter(&arch, i.scan, i.logs, i.ollama),
    ];
    let explanations = explain(&arch, i.logs, &rows);
    let verdict_line = verdict(&label, &rows, ggml_scanned);
    let claims = claims(&label, &rows, &explanations, &verdict_line);
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
        crate::gpucode::scan(&ScanOptions {
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
    let inputs = crate::output::Inputs::none().paths(&o.install).paths(&o.logs).maybe(o.runs.as_ref());
    let mut out = crate::output::Output::open(&cmd.output, &inputs)?;
    out.emit(&gate(&cmd.options)?)?;
    out.finish()?;
    Ok(crate::exit::OK)
}

#[cfg(test)]
mod tests;
