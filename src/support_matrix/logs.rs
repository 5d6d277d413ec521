//! What a runtime log says about one GPU: the lines the gate's recognition, artifact and execution layers rest on,
//! read with the `backscope-logs` parser (typed events, one per line) and its analyzer (crash incidents and their
//! phase). Every fact keeps its line number and text, so that a row can cite `file:line`.

use std::path::Path;

use ::logs::event::{lossy, EventKind, TimingKind};
use ::logs::{Analyzer, Limits, Parser, Phase};
use anyhow::{Context, Result};
use serde::Serialize;

use crate::evidence::Source;
use crate::gpu::arch::DeviceArch;

/// Facts kept per kind; a log repeating a line thousands of times adds nothing past the first ones.
const MAX_FACTS: usize = 64;
/// Characters of a line kept as its text in a source.
const LINE_CHARS: usize = 300;

/// One log line the gate uses.
#[derive(Clone, Debug, Serialize)]
pub struct LogFact {
    pub line: u64,
    pub text: String,
    #[serde(flatten)]
    pub kind: FactKind,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "fact", rename_all = "snake_case")]
pub enum FactKind {
    /// `ggml_cuda_init`'s `Device N: NAME, gfx900:xnack- (0x900), …` or `…, compute capability 8.6, …`.
    Device { index: u32, name: String, arch: Option<String>, compute_capability: Option<String> },
    /// Ollama's `inference compute … library=ROCm compute=gfx906 …`.
    InferenceCompute { library: Option<String>, compute: Option<String>, name: Option<String> },
    /// `amdgpu is not supported (supported types:[…]) gpu_type=gfx1150`.
    UnsupportedGpu { gpu: Option<String>, supported: Option<String>, reason: Option<String> },
    /// `failure during GPU discovery … error="runner crashed"`.
    DiscoveryFailure { error: Option<String> },
    /// `rocBLAS error: Cannot read …TensileLibrary.dat … for GPU arch : gfx906`, `rocblaslt error: …`.
    BlasError { library: String, arch: Option<String> },
    /// `load_backend: loaded ROCm backend from …`.
    BackendLoaded { backend: String, path: String },
    /// `offloaded N/M layers to GPU`.
    Offloaded { offloaded: u32, total: u32 },
    /// A finished request: llama.cpp's `eval time = …`, or an HTTP 2xx on an inference route.
    RequestDone,
}

/// A crash incident of the log (from the analyzer), with what the gate needs.
#[derive(Clone, Debug, Serialize)]
pub struct CrashFact {
    pub line: u64,
    pub text: String,
    pub phase: Phase,
    pub phase_rule: String,
    /// The signal the runtime reported (`SIGSEGV`), if any.
    pub signal: Option<String>,
    /// Kinds of the lines that make up the incident (`discovery_failure`, `blas_error`, `runner_terminated`, …).
    pub kinds: Vec<String>,
}

impl CrashFact {
    /// A process died or aborted (as opposed to an incident made only of error messages the runtime survived,
    /// such as a hipBLASLt lookup failure).
    pub fn is_death(&self) -> bool {
        self.signal.is_some()
            || self.kinds.iter().any(|k| {
                matches!(
                    k.as_str(),
                    "runner_terminated" | "ggml_assert" | "abort" | "process_crash" | "go_fatal" | "cpp_terminate"
                )
            })
    }
}

/// What one log file says.
#[derive(Clone, Debug, Serialize)]
pub struct LogEvidence {
    pub path: String,
    pub lines: u64,
    /// `ollama`, `ollama-go-runner`, `llama.cpp`, `unknown` (the analyzer's reading).
    pub flavor: &'static str,
    pub facts: Vec<LogFact>,
    pub crashes: Vec<CrashFact>,
}

fn cut(s: &str) -> String {
    match s.char_indices().nth(LINE_CHARS) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

fn text(b: &[u8]) -> String {
    lossy(b).into_owned()
}

/// Whether an HTTP path is an inference route of Ollama or llama-server.
fn inference_route(path: &[u8]) -> bool {
    let p = path.split(|&b| b == b'?').next().unwrap_or(path);
    matches!(
        p,
        b"/api/generate"
            | b"/api/chat"
            | b"/completion"
            | b"/completions"
            | b"/v1/completions"
            | b"/v1/chat/completions"
    )
}

impl LogEvidence {
    /// Read and analyse a log file (bounded memory whatever its size; see `logs::Limits`).
    pub fn read(path: &Path) -> Result<LogEvidence> {
        // A regular file or a pipe (`<(journalctl …)`), read once; a named FIFO or a device is refused instead of
        // waited on.
        let file =
            crate::host::inputs::open_stream(path).with_context(|| format!("cannot open log {}", path.display()))?;
        let limits = Limits::default();
        let mut analyzer = Analyzer::new(limits);
        let mut facts: Vec<LogFact> = Vec::new();
        let mut per_kind = [0usize; 9];
        let stats = Parser::parse_reader(file, limits, |e| {
            analyzer.event(e);
            let kind = match e.kind {
                EventKind::GpuDevice(d) => Some((
                    0,
                    FactKind::Device {
                        index: d.index,
                        name: text(d.name),
                        arch: d.arch.map(text),
                        compute_capability: d.compute_capability.map(text),
                    },
                )),
                EventKind::InferenceCompute(ic) => Some((
                    1,
                    FactKind::InferenceCompute {
                        library: ic.library.map(text),
                        compute: ic.compute.map(text),
                        name: ic.name.or(ic.description).map(text),
                    },
                )),
                EventKind::UnsupportedGpu { gpu, supported, message } => Some((
                    2,
                    FactKind::UnsupportedGpu {
                        gpu: gpu.map(text),
                        supported: supported.map(text),
                        reason: Some(cut(&::logs::slog::unquote(message))),
                    },
                )),
                EventKind::DiscoveryFailure { error, .. } => {
                    Some((3, FactKind::DiscoveryFailure { error: error.map(text) }))
                }
                EventKind::BlasError { library, arch, .. } => {
                    Some((4, FactKind::BlasError { library: text(library), arch: arch.map(text) }))
                }
                EventKind::BackendLoaded { backend, path } => {
                    Some((5, FactKind::BackendLoaded { backend: text(backend), path: text(path) }))
                }
                EventKind::LayersOffloaded { offloaded, total } => Some((6, FactKind::Offloaded { offloaded, total })),
                EventKind::Timing { which: TimingKind::Eval, .. } => Some((7, FactKind::RequestDone)),
                EventKind::HttpRequest { status, path, .. }
                    if (200..300).contains(&status) && inference_route(path) =>
                {
                    Some((8, FactKind::RequestDone))
                }
                _ => None,
            };
            if let Some((slot, kind)) = kind {
                if per_kind[slot] < MAX_FACTS {
                    per_kind[slot] += 1;
                    facts.push(LogFact { line: e.line, text: cut(lossy(e.text).trim()), kind });
                }
            }
        })
        .with_context(|| format!("{}: not a readable log", path.display()))?;
        let report = analyzer.finish(stats);
        let crashes = report
            .crashes
            .iter()
            .map(|c| {
                let first = c.causes.first();
                CrashFact {
                    line: c.line,
                    text: first.map(|l| cut(&l.text)).unwrap_or_default(),
                    phase: c.phase,
                    phase_rule: c.phase_rule.clone(),
                    signal: c.signal.as_ref().map(|s| s.name.clone()),
                    kinds: c.causes.iter().chain(&c.consequences).map(|l| l.kind.to_string()).collect(),
                }
            })
            .collect();
        Ok(LogEvidence {
            path: path.display().to_string(),
            lines: report.stats.lines,
            flavor: report.flavor,
            facts,
            crashes,
        })
    }

    pub fn source(&self, line: u64, text: &str) -> Source {
        Source::LogLine { path: self.path.clone(), line, text: text.to_string() }
    }

    pub fn fact_source(&self, f: &LogFact) -> Source {
        self.source(f.line, &f.text)
    }
}

/// Whether a GPU name from a log (`gfx900:xnack-`, `gfx1030`, `8.6`) is the gate's GPU.
pub fn same_gpu(logged: &str, arch: &DeviceArch) -> bool {
    match (DeviceArch::parse(logged), arch) {
        (DeviceArch::Amd { id: a }, DeviceArch::Amd { id: b }) => processor(&a) == processor(b),
        (DeviceArch::Nvidia { sm: a }, DeviceArch::Nvidia { sm: b }) => a == *b,
        _ => false,
    }
}

/// The processor of an AMD target ID (`gfx90a:xnack-` → `gfx90a`).
pub fn processor(target: &str) -> &str {
    target.split(':').next().unwrap_or(target)
}
