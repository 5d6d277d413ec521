//! The sweep spec: a TOML file (the full form, [`SpecFile`]) and the equivalent command-line flags, merged and
//! resolved into a [`Plan`] — endpoints with their argv, prompt texts, settings — and expanded into [`Cell`]s.
//!
//! The resolved plan is stored with the run, so `--resume` replays exactly the same cells in the same order even
//! if the TOML file or the flags changed since.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::record::Api;

/// Defaults, in seconds. Read: a cold model load on a slow backend sends no byte for minutes (Ollama loads the
/// model inside the request). Ready: llama-server loads the model before `/health` turns 200.
pub const DEFAULT_CONNECT_S: f64 = 5.0;
pub const DEFAULT_READ_S: f64 = 300.0;
pub const DEFAULT_REQUEST_S: f64 = 1800.0;
pub const DEFAULT_READY_S: f64 = 300.0;
pub const DEFAULT_GRACE_S: f64 = 10.0;
pub const DEFAULT_SEED: i64 = 42;
pub const DEFAULT_NUM_PREDICT: i64 = 128;
pub const DEFAULT_PROMPT: &str = "Why is the sky blue?";

/// The TOML file. Every list replaces the default; flags add endpoints and replace lists they give.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SpecFile {
    #[serde(default)]
    pub endpoints: Vec<EndpointSpec>,
    #[serde(default)]
    pub models: Vec<ModelEntry>,
    #[serde(default)]
    pub num_gpu: Vec<i64>,
    #[serde(default)]
    pub prompts: Vec<PromptSpec>,
    #[serde(default)]
    pub num_predict: Vec<i64>,
    pub epochs: Option<u32>,
    pub repetitions: Option<u32>,
    pub temperature: Option<f64>,
    pub seed: Option<i64>,
    pub stream: Option<bool>,
    pub llama_bin: Option<PathBuf>,
    /// Pass-through options: Ollama `options`, top-level request fields for llama.cpp.
    #[serde(default)]
    pub options: Map<String, Value>,
    /// Pass-through top-level request fields (`raw`, `keep_alive`, `think`).
    #[serde(default)]
    pub request: Map<String, Value>,
    #[serde(default)]
    pub timeouts: TimeoutSpec,
    /// Observe GPU kernel launches per request (`--trace`): managed servers get the dispatch observer through
    /// `LD_PRELOAD`; external endpoints are read from their `trace_dir`.
    pub trace: Option<bool>,
    /// The observer library (default: found like `backscope trace` finds it).
    pub observer: Option<PathBuf>,
    /// The observer's window length for managed servers (default 20 ms).
    pub trace_interval_ms: Option<u64>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TimeoutSpec {
    pub connect_s: Option<f64>,
    pub read_s: Option<f64>,
    pub request_s: Option<f64>,
    pub ready_s: Option<f64>,
    pub grace_s: Option<f64>,
}

/// One endpoint: `url` for one backscope does not start, `server` for one it starts.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct EndpointSpec {
    pub name: String,
    pub url: Option<String>,
    /// `ollama`, `llama.cpp` or `openai`; detected for external endpoints when absent.
    pub api: Option<Api>,
    /// `llama-server`, `ollama` or `command`.
    pub server: Option<Preset>,
    pub program: Option<PathBuf>,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Fixed port for a managed server (default: a free one).
    pub port: Option<u16>,
    /// For an external endpoint: a log file its server writes to, sliced per cell like a managed server's log.
    pub log_file: Option<PathBuf>,
    pub ready_timeout_s: Option<f64>,
    /// For an external endpoint with `trace`: the directory its observed server writes trace files to (what
    /// `backscope trace --env --dir DIR` set up).
    pub trace_dir: Option<PathBuf>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
pub enum Preset {
    /// llama.cpp's server: backscope adds `-m MODEL --host 127.0.0.1 --port P [-ngl N] -lv 4 --metrics`.
    #[serde(rename = "llama-server")]
    LlamaServer,
    /// `ollama serve` with `OLLAMA_HOST=127.0.0.1:P`; num_gpu and the model go in each request.
    #[serde(rename = "ollama")]
    Ollama,
    /// Any program; `{port}`, `{host}`, `{model}` and `{num_gpu}` in its args are substituted.
    #[serde(rename = "command")]
    Command,
}

impl Preset {
    fn parse(s: &str) -> Result<Preset> {
        Ok(match s {
            "llama-server" => Preset::LlamaServer,
            "ollama" => Preset::Ollama,
            "command" => Preset::Command,
            other => bail!("unknown server preset `{other}`: use llama-server, ollama, or command (with --program)"),
        })
    }
}

/// A model: one name for every endpoint, or a label with the name Ollama knows and the GGUF file llama-server loads.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(untagged)]
pub enum ModelEntry {
    Name(String),
    Table { name: String, ollama: Option<String>, gguf: Option<String> },
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
pub struct Model {
    pub label: String,
    pub ollama: String,
    pub gguf: String,
}

impl ModelEntry {
    fn resolve(&self) -> Model {
        match self {
            ModelEntry::Name(n) => Model { label: n.clone(), ollama: n.clone(), gguf: n.clone() },
            ModelEntry::Table { name, ollama, gguf } => Model {
                label: name.clone(),
                ollama: ollama.clone().unwrap_or_else(|| name.clone()),
                gguf: gguf.clone().unwrap_or_else(|| name.clone()),
            },
        }
    }
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PromptSpec {
    pub name: Option<String>,
    pub text: Option<String>,
    pub file: Option<PathBuf>,
    /// A prompt of about this many tokens (see [`prompt_of_tokens`]).
    pub tokens: Option<u32>,
}

/// The command-line form (the subset of flags that describe the sweep).
#[derive(Clone, Debug, Default)]
pub struct FlagSpec {
    pub endpoints: Vec<String>,
    pub servers: Vec<String>,
    pub env: Vec<String>,
    pub programs: Vec<String>,
    pub llama_bin: Option<PathBuf>,
    pub models: Vec<String>,
    pub num_gpu: Vec<i64>,
    pub num_predict: Vec<i64>,
    pub prompts: Vec<String>,
    pub prompt_files: Vec<PathBuf>,
    pub prompt_tokens: Vec<u32>,
    pub epochs: Option<u32>,
    pub repetitions: Option<u32>,
    pub temperature: Option<f64>,
    pub seed: Option<i64>,
    pub options: Vec<String>,
    pub no_stream: bool,
    pub timeouts: TimeoutSpec,
    pub trace: bool,
    pub observer: Option<PathBuf>,
    /// `NAME=DIR`: trace directory of an external endpoint.
    pub trace_dirs: Vec<String>,
    pub trace_interval_ms: Option<u64>,
}

impl FlagSpec {
    /// Whether any flag that shapes the sweep was given (`--resume` takes the stored plan and refuses them).
    pub fn is_empty(&self) -> bool {
        self.endpoints.is_empty()
            && self.servers.is_empty()
            && self.env.is_empty()
            && self.programs.is_empty()
            && self.llama_bin.is_none()
            && self.models.is_empty()
            && self.num_gpu.is_empty()
            && self.num_predict.is_empty()
            && self.prompts.is_empty()
            && self.prompt_files.is_empty()
            && self.prompt_tokens.is_empty()
            && self.epochs.is_none()
            && self.repetitions.is_none()
            && self.temperature.is_none()
            && self.seed.is_none()
            && self.options.is_empty()
            && !self.no_stream
            && self.timeouts == TimeoutSpec::default()
            && !self.trace
            && self.observer.is_none()
            && self.trace_dirs.is_empty()
            && self.trace_interval_ms.is_none()
    }
}

/// Merge flags onto a spec file: endpoints and `--server`s are added, lists given on the command line replace the
/// file's, scalars override.
pub fn merge(mut spec: SpecFile, flags: &FlagSpec) -> Result<SpecFile> {
    for e in &flags.endpoints {
        let (name, url) = e.split_once('=').with_context(|| format!("--endpoint {e}: expected NAME=URL"))?;
        spec.endpoints.push(EndpointSpec { name: name.into(), url: Some(url.into()), ..Default::default() });
    }
    for s in &flags.servers {
        let (name, rest) =
            s.split_once('=').with_context(|| format!("--server {s}: expected NAME=PRESET[:ARG,ARG…]"))?;
        let (preset, args) = match rest.split_once(':') {
            Some((p, a)) => (p, a.split(',').filter(|x| !x.is_empty()).map(str::to_string).collect()),
            None => (rest, Vec::new()),
        };
        spec.endpoints.push(EndpointSpec {
            name: name.into(),
            server: Some(Preset::parse(preset).with_context(|| format!("--server {s}"))?),
            args,
            ..Default::default()
        });
    }
    for e in &flags.env {
        let (name, kv) = e.split_once(':').with_context(|| format!("--env {e}: expected NAME:KEY=VALUE"))?;
        let (k, v) = kv.split_once('=').with_context(|| format!("--env {e}: expected NAME:KEY=VALUE"))?;
        let ep = spec
            .endpoints
            .iter_mut()
            .find(|x| x.name == name)
            .with_context(|| format!("--env {e}: no endpoint named `{name}` (define it with --server first)"))?;
        ep.env.insert(k.into(), v.into());
    }
    for p in &flags.programs {
        let (name, path) = p.split_once('=').with_context(|| format!("--program {p}: expected NAME=PATH"))?;
        let ep = spec
            .endpoints
            .iter_mut()
            .find(|x| x.name == name)
            .with_context(|| format!("--program {p}: no endpoint named `{name}`"))?;
        ep.program = Some(path.into());
    }
    if flags.llama_bin.is_some() {
        spec.llama_bin = flags.llama_bin.clone();
    }
    if !flags.models.is_empty() {
        spec.models = flags.models.iter().map(|m| ModelEntry::Name(m.clone())).collect();
    }
    if !flags.num_gpu.is_empty() {
        spec.num_gpu = flags.num_gpu.clone();
    }
    if !flags.num_predict.is_empty() {
        spec.num_predict = flags.num_predict.clone();
    }
    if !flags.prompts.is_empty() || !flags.prompt_files.is_empty() || !flags.prompt_tokens.is_empty() {
        spec.prompts = flags
            .prompts
            .iter()
            .map(|t| PromptSpec { text: Some(t.clone()), ..Default::default() })
            .chain(flags.prompt_files.iter().map(|f| PromptSpec { file: Some(f.clone()), ..Default::default() }))
            .chain(flags.prompt_tokens.iter().map(|&n| PromptSpec { tokens: Some(n), ..Default::default() }))
            .collect();
    }
    spec.epochs = flags.epochs.or(spec.epochs);
    spec.repetitions = flags.repetitions.or(spec.repetitions);
    spec.temperature = flags.temperature.or(spec.temperature);
    spec.seed = flags.seed.or(spec.seed);
    if flags.no_stream {
        spec.stream = Some(false);
    }
    for o in &flags.options {
        let (k, v) = o.split_once('=').with_context(|| format!("--option {o}: expected KEY=VALUE"))?;
        // `num_ctx=4096` is a number, `stop=["\n"]` a list; anything that is not JSON is a string.
        let value = serde_json::from_str(v).unwrap_or_else(|_| Value::String(v.to_string()));
        spec.options.insert(k.into(), value);
    }
    let t = &flags.timeouts;
    let s = &mut spec.timeouts;
    s.connect_s = t.connect_s.or(s.connect_s);
    s.read_s = t.read_s.or(s.read_s);
    s.request_s = t.request_s.or(s.request_s);
    s.ready_s = t.ready_s.or(s.ready_s);
    s.grace_s = t.grace_s.or(s.grace_s);
    for d in &flags.trace_dirs {
        let (name, dir) = d.split_once('=').with_context(|| format!("--trace-dir {d}: expected NAME=DIR"))?;
        let ep = spec.endpoints.iter_mut().find(|x| x.name == name).with_context(|| {
            format!("--trace-dir {d}: no endpoint named `{name}` (define it with --endpoint first)")
        })?;
        ep.trace_dir = Some(dir.into());
    }
    if flags.trace || !flags.trace_dirs.is_empty() {
        spec.trace = Some(true);
    }
    if flags.observer.is_some() {
        spec.observer = flags.observer.clone();
    }
    spec.trace_interval_ms = flags.trace_interval_ms.or(spec.trace_interval_ms);
    Ok(spec)
}

pub fn read_spec_file(path: &Path) -> Result<SpecFile> {
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read sweep spec {}", path.display()))?;
    toml::from_str(&text).with_context(|| format!("{} is not a valid sweep spec (see docs/sweep.md)", path.display()))
}

/// Timeouts in seconds, all set.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Timeouts {
    pub connect_s: f64,
    pub read_s: f64,
    pub request_s: f64,
    pub ready_s: f64,
    pub grace_s: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum EndpointKind {
    External {
        url: String,
        /// Known from the spec, or detected when the run was created; `None` = detect per cell.
        api: Option<Api>,
        log_file: Option<PathBuf>,
    },
    Managed {
        preset: Preset,
        api: Api,
        program: PathBuf,
        args: Vec<String>,
        env: Vec<(String, String)>,
        port: Option<u16>,
        ready_timeout_s: f64,
    },
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Endpoint {
    pub name: String,
    pub kind: EndpointKind,
}

impl Endpoint {
    pub fn is_managed(&self) -> bool {
        matches!(self.kind, EndpointKind::Managed { .. })
    }

    /// The API, when known before the first request.
    pub fn api(&self) -> Option<Api> {
        match &self.kind {
            EndpointKind::External { api, .. } => *api,
            EndpointKind::Managed { api, .. } => Some(*api),
        }
    }

    /// Whether num_gpu can be chosen per cell: per request (Ollama) or per server start (managed llama-server).
    /// An external llama-server runs with the `-ngl` it was started with.
    pub fn num_gpu_settable(&self) -> bool {
        match &self.kind {
            EndpointKind::External { api, .. } => matches!(api, None | Some(Api::Ollama)),
            EndpointKind::Managed { preset: Preset::Command, args, api, .. } => {
                *api == Api::Ollama || args.iter().any(|a| a.contains("{num_gpu}"))
            }
            EndpointKind::Managed { .. } => true,
        }
    }

    /// The model name this endpoint understands.
    pub fn model_name<'a>(&self, m: &'a Model) -> &'a str {
        match self.api() {
            Some(Api::Ollama) | None => &m.ollama,
            _ if self.is_managed() => &m.gguf,
            _ => &m.label,
        }
    }

    /// The argv and environment of a managed server for one model, num_gpu and port. `None` for external ones.
    pub fn server_process(&self, model: &Model, num_gpu: i64, port: u16) -> Option<super::supervise::ProcessSpec> {
        let EndpointKind::Managed { preset, program, args, env, .. } = &self.kind else { return None };
        let mut argv: Vec<String> = Vec::new();
        let mut envs = env.clone();
        match preset {
            Preset::LlamaServer => {
                argv.extend([
                    "-m".into(),
                    model.gguf.clone(),
                    "--host".into(),
                    "127.0.0.1".into(),
                    "--port".into(),
                    port.to_string(),
                ]);
                // -1 = runtime decides: no flag, so llama.cpp's default (`auto`, fit to memory) applies, as Ollama does.
                if num_gpu >= 0 {
                    argv.extend(["-ngl".into(), num_gpu.to_string()]);
                }
                // -lv 4 makes llama-server log `using device …` and `offloaded N/M layers` (the backend evidence).
                argv.extend(["-lv".into(), "4".into(), "--metrics".into()]);
                argv.extend(args.iter().cloned());
            }
            Preset::Ollama => {
                argv.push("serve".into());
                argv.extend(args.iter().cloned());
                envs.retain(|(k, _)| k != "OLLAMA_HOST");
                envs.push(("OLLAMA_HOST".into(), format!("127.0.0.1:{port}")));
            }
            Preset::Command => {
                argv.extend(args.iter().map(|a| {
                    a.replace("{port}", &port.to_string())
                        .replace("{host}", "127.0.0.1")
                        .replace("{model}", &model.gguf)
                        .replace("{num_gpu}", &num_gpu.to_string())
                }));
            }
        }
        Some(super::supervise::ProcessSpec { program: program.clone(), args: argv, env: envs })
    }

    /// Cells that share this key run on the same server process; a new key means a (re)start. llama-server takes
    /// the model and -ngl at start, Ollama per request.
    pub fn server_key(&self, model: &Model, num_gpu: i64) -> String {
        match &self.kind {
            EndpointKind::Managed { preset: Preset::LlamaServer, .. } => {
                format!("{}|{}|{num_gpu}", self.name, model.gguf)
            }
            EndpointKind::Managed { preset: Preset::Command, args, .. } => {
                let m = if args.iter().any(|a| a.contains("{model}")) { model.gguf.as_str() } else { "" };
                let n = if args.iter().any(|a| a.contains("{num_gpu}")) { num_gpu.to_string() } else { String::new() };
                format!("{}|{m}|{n}", self.name)
            }
            _ => self.name.clone(),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Prompt {
    pub name: String,
    pub text: String,
    /// The requested size, for `tokens = N` prompts.
    pub target_tokens: Option<u32>,
}

/// Everything a run needs, resolved; stored with the run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    pub endpoints: Vec<Endpoint>,
    pub models: Vec<Model>,
    pub num_gpu: Vec<i64>,
    pub prompts: Vec<Prompt>,
    pub num_predict: Vec<i64>,
    pub epochs: u32,
    pub repetitions: u32,
    pub temperature: f64,
    pub seed: i64,
    pub stream: bool,
    pub options: Map<String, Value>,
    pub request: Map<String, Value>,
    pub timeouts: Timeouts,
    /// Per-request kernel observation (`--trace`); absent in plans of runs without it (and of older versions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<TracePlan>,
}

/// Default observer window for sweeps: shorter than `backscope trace`'s 50 ms, so a request's join waits less and
/// windows straddling a request boundary are shorter.
pub const DEFAULT_TRACE_INTERVAL_MS: u64 = 20;

/// How requests are joined to observed kernel launches.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TracePlan {
    /// The observer library loaded into managed servers (`None` when every traced endpoint is external).
    pub observer: Option<PathBuf>,
    /// Window length given to managed servers' observers.
    pub interval_ms: u64,
    /// External endpoints' trace directories, by endpoint name.
    #[serde(default)]
    pub dirs: BTreeMap<String, PathBuf>,
}

/// One request of the plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cell {
    pub seq: u64,
    pub endpoint: usize,
    pub model: usize,
    pub num_gpu: i64,
    pub prompt: usize,
    pub num_predict: i64,
    pub epoch: u32,
    pub repetition: u32,
}

impl Plan {
    /// All cells, in execution order: epoch, endpoint, model, num_gpu, prompt, num_predict, repetition. Endpoints
    /// inside epochs keep a managed server running across its cells and, with several epochs, interleave the
    /// endpoints over time so drift (thermal, other load) does not favour one.
    pub fn cells(&self) -> Vec<Cell> {
        let mut out = Vec::new();
        for epoch in 1..=self.epochs {
            for (e, ep) in self.endpoints.iter().enumerate() {
                // An endpoint that cannot set num_gpu gets one cell per combination, recorded as -1 ("as started").
                let ngl: Vec<i64> = if ep.num_gpu_settable() { self.num_gpu.clone() } else { vec![-1] };
                for m in 0..self.models.len() {
                    for &num_gpu in &ngl {
                        for p in 0..self.prompts.len() {
                            for &num_predict in &self.num_predict {
                                for repetition in 1..=self.repetitions {
                                    out.push(Cell {
                                        seq: out.len() as u64,
                                        endpoint: e,
                                        model: m,
                                        num_gpu,
                                        prompt: p,
                                        num_predict,
                                        epoch,
                                        repetition,
                                    });
                                }
                            }
                        }
                    }
                }
            }
        }
        out
    }

    /// The stable key of a cell: what `--resume` matches on.
    pub fn cell_key(&self, c: &Cell) -> String {
        format!(
            "{}|{}|ngl={}|{}|n={}|e{}|r{}",
            self.endpoints[c.endpoint].name,
            self.models[c.model].label,
            c.num_gpu,
            self.prompts[c.prompt].name,
            c.num_predict,
            c.epoch,
            c.repetition
        )
    }

    /// The cell's directory inside the run directory.
    pub fn cell_dir(&self, c: &Cell) -> String {
        format!(
            "cells/{:05}-{}-ngl{}-e{}r{}",
            c.seq,
            sanitize(&self.endpoints[c.endpoint].name),
            c.num_gpu,
            c.epoch,
            c.repetition
        )
    }
}

/// File-name-safe: letters, digits, `.`, `_`, `-`; everything else becomes `_`.
pub fn sanitize(s: &str) -> String {
    let t: String = s.chars().map(|c| if c.is_ascii_alphanumeric() || "._-".contains(c) { c } else { '_' }).collect();
    t.chars().take(60).collect()
}

/// A prompt of about `n` tokens: common English words, deterministic, each a single token in the BPE and
/// SentencePiece vocabularies of current models (with its leading space). Tokenizers differ, so the count the
/// server reports is recorded per cell (`prompt_n`).
pub fn prompt_of_tokens(n: u32) -> String {
    const WORDS: [&str; 64] = [
        "the", "of", "and", "to", "in", "is", "you", "that", "it", "he", "was", "for", "on", "are", "as", "with",
        "his", "they", "at", "be", "this", "have", "from", "or", "one", "had", "by", "word", "but", "not", "what",
        "all", "were", "we", "when", "your", "can", "said", "there", "use", "an", "each", "which", "she", "do", "how",
        "their", "if", "will", "up", "other", "about", "out", "many", "then", "them", "these", "so", "some", "her",
        "would", "make", "like", "him",
    ];
    // A stride coprime to 64 walks every word before repeating; the offset changes the order per lap, so the text
    // is not one short cycle that a prompt cache or a repetition penalty would treat specially.
    (0..n as usize).map(|i| WORDS[(i * 37 + i / 64) % 64]).collect::<Vec<_>>().join(" ")
}

fn validate_name(name: &str) -> Result<()> {
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || "._-".contains(c)) {
        bail!("endpoint name `{name}`: use letters, digits, `.`, `_` and `-` only (it names files and table rows)");
    }
    Ok(())
}

/// Resolve a merged spec into a plan. `detect` is asked for the API of external endpoints whose `api` is not set
/// (it may answer `None` when the endpoint does not answer yet; cells then detect it themselves).
pub fn resolve(spec: &SpecFile, base_dir: &Path, detect: &mut dyn FnMut(&str) -> Option<Api>) -> Result<Plan> {
    if spec.endpoints.is_empty() {
        bail!("no endpoints: give --endpoint NAME=URL (an Ollama or llama-server you run) or --server NAME=llama-server (one backscope starts), or a --spec file");
    }
    let timeouts = Timeouts {
        connect_s: spec.timeouts.connect_s.unwrap_or(DEFAULT_CONNECT_S),
        read_s: spec.timeouts.read_s.unwrap_or(DEFAULT_READ_S),
        request_s: spec.timeouts.request_s.unwrap_or(DEFAULT_REQUEST_S),
        ready_s: spec.timeouts.ready_s.unwrap_or(DEFAULT_READY_S),
        grace_s: spec.timeouts.grace_s.unwrap_or(DEFAULT_GRACE_S),
    };
    for (what, v) in [
        ("connect", timeouts.connect_s),
        ("read", timeouts.read_s),
        ("request", timeouts.request_s),
        ("ready", timeouts.ready_s),
        ("grace", timeouts.grace_s),
    ] {
        if !(v > 0.0 && v.is_finite()) {
            bail!("the {what} timeout must be a positive number of seconds, not {v}");
        }
    }
    let mut endpoints = Vec::new();
    for e in &spec.endpoints {
        validate_name(&e.name)?;
        if endpoints.iter().any(|x: &Endpoint| x.name == e.name) {
            bail!("two endpoints are named `{}`; names must be unique", e.name);
        }
        let kind = match (&e.url, e.server) {
            (Some(_), Some(_)) => bail!(
                "endpoint `{}` has both `url` and `server`: an endpoint is either external or started by backscope",
                e.name
            ),
            (None, None) => {
                bail!("endpoint `{}` needs `url` (external) or `server` (llama-server, ollama, command)", e.name)
            }
            (Some(url), None) => {
                if url.starts_with("https://") {
                    bail!(
                        "endpoint `{}`: {url}: backscope speaks plain HTTP only (local servers); use http://",
                        e.name
                    );
                }
                if !url.starts_with("http://") {
                    bail!("endpoint `{}`: `{url}` is not an http:// URL (e.g. http://127.0.0.1:11434)", e.name);
                }
                if !e.args.is_empty() || !e.env.is_empty() || e.program.is_some() || e.port.is_some() {
                    bail!("endpoint `{}` is external (`url`): args, env, program and port apply only to servers backscope starts", e.name);
                }
                let api = e.api.or_else(|| detect(url));
                EndpointKind::External {
                    url: url.trim_end_matches('/').to_string(),
                    api,
                    log_file: e.log_file.as_ref().map(|p| base_dir.join(p)),
                }
            }
            (None, Some(preset)) => {
                if e.trace_dir.is_some() {
                    bail!("endpoint `{}`: `trace_dir` is for external endpoints; backscope gives the servers it starts a trace directory in the run directory", e.name);
                }
                let program = match (&e.program, preset) {
                    (Some(p), _) => p.clone(),
                    (None, Preset::LlamaServer) => match &spec.llama_bin {
                        Some(dir) => base_dir.join(dir).join("llama-server"),
                        None => PathBuf::from("llama-server"),
                    },
                    (None, Preset::Ollama) => PathBuf::from("ollama"),
                    (None, Preset::Command) => bail!("endpoint `{}`: a `command` server needs `program`", e.name),
                };
                let api = match (preset, e.api) {
                    (Preset::LlamaServer, None | Some(Api::LlamaCpp)) => Api::LlamaCpp,
                    (Preset::Ollama, None | Some(Api::Ollama)) => Api::Ollama,
                    (Preset::Command, a) => a.unwrap_or(Api::LlamaCpp),
                    (_, Some(a)) => bail!("endpoint `{}`: the {preset:?} preset speaks its own API, not {a}", e.name),
                };
                EndpointKind::Managed {
                    preset,
                    api,
                    program,
                    args: e.args.clone(),
                    env: e.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
                    port: e.port,
                    ready_timeout_s: e.ready_timeout_s.unwrap_or(timeouts.ready_s),
                }
            }
        };
        endpoints.push(Endpoint { name: e.name.clone(), kind });
    }
    if spec.models.is_empty() {
        bail!("no model: give --model (an Ollama name like qwen3.5:2b, or a GGUF path for llama-server)");
    }
    let models: Vec<Model> = spec.models.iter().map(ModelEntry::resolve).collect();
    let mut labels = std::collections::BTreeSet::new();
    for m in &models {
        if !labels.insert(m.label.clone()) {
            bail!("model `{}` is listed twice", m.label);
        }
    }
    let mut prompts = Vec::new();
    let specs = if spec.prompts.is_empty() {
        vec![PromptSpec { name: Some("default".into()), text: Some(DEFAULT_PROMPT.into()), ..Default::default() }]
    } else {
        spec.prompts.clone()
    };
    for (i, p) in specs.iter().enumerate() {
        let (default_name, text, target) = match (&p.text, &p.file, p.tokens) {
            (Some(t), None, None) => (format!("text{}", i + 1), t.clone(), None),
            (None, Some(f), None) => {
                let path = base_dir.join(f);
                let t = std::fs::read_to_string(&path)
                    .with_context(|| format!("cannot read prompt file {}", path.display()))?;
                (
                    f.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| format!("file{}", i + 1)),
                    t,
                    None,
                )
            }
            (None, None, Some(n)) if n > 0 => (format!("{n}tok"), prompt_of_tokens(n), Some(n)),
            (None, None, Some(_)) => bail!("prompt {}: `tokens` must be at least 1", i + 1),
            _ => bail!("prompt {}: give exactly one of `text`, `file` or `tokens`", i + 1),
        };
        let name = p.name.clone().unwrap_or(default_name);
        if prompts.iter().any(|x: &Prompt| x.name == name) {
            bail!("two prompts are named `{name}`; give them distinct `name`s");
        }
        prompts.push(Prompt { name, text, target_tokens: target });
    }
    let num_gpu = if spec.num_gpu.is_empty() { vec![-1] } else { spec.num_gpu.clone() };
    if let Some(bad) = num_gpu.iter().find(|&&n| n < -1) {
        bail!("num_gpu {bad}: use a layer count ≥ 0, or -1 to let the runtime decide");
    }
    let num_predict = if spec.num_predict.is_empty() { vec![DEFAULT_NUM_PREDICT] } else { spec.num_predict.clone() };
    if let Some(bad) = num_predict.iter().find(|&&n| n < 1) {
        bail!("num_predict {bad}: generate at least one token");
    }
    let dedup = |v: &[i64]| -> Result<()> {
        let mut s = std::collections::BTreeSet::new();
        for x in v {
            if !s.insert(x) {
                bail!("value {x} is listed twice in a num_gpu/num_predict list");
            }
        }
        Ok(())
    };
    dedup(&num_gpu)?;
    dedup(&num_predict)?;
    let trace = if spec.trace == Some(true) {
        let dirs: BTreeMap<String, PathBuf> = spec
            .endpoints
            .iter()
            .filter_map(|e| e.trace_dir.as_ref().map(|d| (e.name.clone(), base_dir.join(d))))
            .collect();
        let observer = if endpoints.iter().any(Endpoint::is_managed) {
            Some(crate::tracecmd::find_observer(spec.observer.as_deref().map(|p| base_dir.join(p)).as_deref())?)
        } else {
            None
        };
        let interval_ms = spec.trace_interval_ms.unwrap_or(DEFAULT_TRACE_INTERVAL_MS);
        if interval_ms == 0 {
            bail!("trace_interval_ms must be at least 1: with 0 the observer writes only at exit and no request could be joined");
        }
        Some(TracePlan { observer, interval_ms, dirs })
    } else {
        if spec.endpoints.iter().any(|e| e.trace_dir.is_some()) || spec.observer.is_some() {
            bail!("`trace_dir` and `observer` need `trace = true` (--trace)");
        }
        None
    };
    let epochs = spec.epochs.unwrap_or(1);
    let repetitions = spec.repetitions.unwrap_or(1);
    if epochs == 0 || repetitions == 0 {
        bail!("epochs and repetitions must be at least 1");
    }
    Ok(Plan {
        endpoints,
        models,
        num_gpu,
        prompts,
        num_predict,
        epochs,
        repetitions,
        temperature: spec.temperature.unwrap_or(0.0),
        seed: spec.seed.unwrap_or(DEFAULT_SEED),
        stream: spec.stream.unwrap_or(true),
        options: spec.options.clone(),
        request: spec.request.clone(),
        timeouts,
        trace,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags_of(f: impl FnOnce(&mut FlagSpec)) -> FlagSpec {
        let mut x = FlagSpec::default();
        f(&mut x);
        x
    }

    fn plan(spec: SpecFile) -> Plan {
        resolve(&spec, Path::new("/base"), &mut |_| None).unwrap()
    }

    #[test]
    fn the_investigations_replay_is_one_command() {
        let f = flags_of(|f| {
            f.endpoints = vec!["rocm=http://127.0.0.1:11435".into(), "vulkan=http://127.0.0.1:11434".into()];
            f.models = vec!["qwen3.5:2b".into()];
            f.num_gpu = vec![0, 1, 2, -1];
            f.num_predict = vec![512];
            f.epochs = Some(1);
        });
        let p = plan(merge(SpecFile::default(), &f).unwrap());
        let cells = p.cells();
        assert_eq!(cells.len(), 8);
        assert_eq!(p.cell_key(&cells[0]), "rocm|qwen3.5:2b|ngl=0|default|n=512|e1|r1");
        assert_eq!(p.cell_key(&cells[7]), "vulkan|qwen3.5:2b|ngl=-1|default|n=512|e1|r1");
        assert_eq!(p.cell_dir(&cells[7]), "cells/00007-vulkan-ngl-1-e1r1");
        assert_eq!((p.temperature, p.seed, p.stream), (0.0, 42, true));
        assert!(p.endpoints.iter().all(|e| !e.is_managed()));
    }

    #[test]
    fn managed_flags_build_argv_vectors_without_a_shell() {
        let f = flags_of(|f| {
            f.servers = vec!["cpu=llama-server:--device,none".into(), "vulkan=llama-server:--device,Vulkan0".into()];
            f.env = vec!["vulkan:GGML_VK_VISIBLE_DEVICES=0".into()];
            f.llama_bin = Some("/opt/llama/bin".into());
            f.models = vec!["tiny.gguf".into()];
            f.num_gpu = vec![0, 1, -1];
        });
        let p = plan(merge(SpecFile::default(), &f).unwrap());
        let vk = &p.endpoints[1];
        let m = &p.models[0];
        let ps = vk.server_process(m, 1, 4242).unwrap();
        assert_eq!(ps.program, PathBuf::from("/opt/llama/bin/llama-server"));
        assert_eq!(
            ps.args,
            [
                "-m",
                "tiny.gguf",
                "--host",
                "127.0.0.1",
                "--port",
                "4242",
                "-ngl",
                "1",
                "-lv",
                "4",
                "--metrics",
                "--device",
                "Vulkan0"
            ]
        );
        assert_eq!(ps.env, vec![("GGML_VK_VISIBLE_DEVICES".to_string(), "0".to_string())]);
        let auto = vk.server_process(m, -1, 4242).unwrap();
        assert!(!auto.args.contains(&"-ngl".to_string()), "-1 leaves -ngl to llama.cpp (auto)");
        assert_ne!(vk.server_key(m, 0), vk.server_key(m, 1), "a new num_gpu restarts llama-server");
        assert_eq!(p.cells().len(), 6);
    }

    #[test]
    fn ollama_preset_sets_its_host_and_keeps_one_server_across_num_gpu() {
        let spec: SpecFile = toml::from_str(
            r#"
            models = ["qwen3.5:2b"]
            num_gpu = [0, 1]
            [[endpoints]]
            name = "vk"
            server = "ollama"
            env = { OLLAMA_VULKAN = "1", OLLAMA_HOST = "0.0.0.0:1" }
            "#,
        )
        .unwrap();
        let p = plan(spec);
        let e = &p.endpoints[0];
        let ps = e.server_process(&p.models[0], 1, 5555).unwrap();
        assert_eq!(ps.args, ["serve"]);
        assert!(ps.env.contains(&("OLLAMA_HOST".into(), "127.0.0.1:5555".into())));
        assert!(ps.env.contains(&("OLLAMA_VULKAN".into(), "1".into())));
        assert_eq!(ps.env.iter().filter(|(k, _)| k == "OLLAMA_HOST").count(), 1);
        assert_eq!(e.server_key(&p.models[0], 0), e.server_key(&p.models[0], 1));
        assert_eq!(e.model_name(&p.models[0]), "qwen3.5:2b");
    }

    #[test]
    fn full_toml_form() {
        let spec: SpecFile = toml::from_str(
            r#"
            num_gpu = [0, -1]
            num_predict = [4, 16]
            epochs = 2
            repetitions = 3
            temperature = 0.5
            seed = 7
            stream = false
            models = ["a", { name = "qwen", ollama = "qwen3.5:2b", gguf = "/m/qwen.gguf" }]
            [options]
            num_ctx = 2048
            [request]
            keep_alive = "1m"
            [timeouts]
            ready_s = 30
            [[prompts]]
            name = "short"
            text = "Hello"
            [[prompts]]
            tokens = 64
            [[endpoints]]
            name = "x"
            server = "command"
            program = "python3"
            args = ["-m", "http.server", "{port}"]
            api = "openai"
            "#,
        )
        .unwrap();
        let p = plan(spec);
        // models × prompts × num_predict × epochs × repetitions; one num_gpu (-1): this command cannot vary it.
        assert_eq!(p.cells().len(), 2 * 2 * 2 * 2 * 3);
        assert_eq!(p.prompts[1].name, "64tok");
        assert_eq!(p.prompts[1].text.split(' ').count(), 64);
        assert_eq!(p.options["num_ctx"], 2048);
        assert_eq!(p.timeouts.ready_s, 30.0);
        assert_eq!(p.timeouts.read_s, DEFAULT_READ_S);
        let e = &p.endpoints[0];
        assert_eq!(e.server_process(&p.models[1], 0, 9).unwrap().args, ["-m", "http.server", "9"]);
        assert_eq!(e.model_name(&p.models[1]), "/m/qwen.gguf");
        assert!(!e.num_gpu_settable(), "a command without {{num_gpu}} that is not Ollama cannot vary it");
    }

    #[test]
    fn external_llama_server_runs_as_started() {
        let spec = merge(
            SpecFile::default(),
            &flags_of(|f| {
                f.endpoints = vec!["ls=http://127.0.0.1:8080/".into(), "ol=http://127.0.0.1:11434".into()];
                f.models = vec!["m".into()];
                f.num_gpu = vec![0, 99];
            }),
        )
        .unwrap();
        let p = resolve(&spec, Path::new("."), &mut |url| (url.contains("8080")).then_some(Api::LlamaCpp)).unwrap();
        let cells = p.cells();
        assert_eq!(cells.iter().filter(|c| c.endpoint == 0).map(|c| c.num_gpu).collect::<Vec<_>>(), vec![-1]);
        assert_eq!(cells.iter().filter(|c| c.endpoint == 1).count(), 2);
        assert_eq!(
            p.endpoints[0].kind,
            EndpointKind::External { url: "http://127.0.0.1:8080".into(), api: Some(Api::LlamaCpp), log_file: None }
        );
    }

    #[test]
    fn mistakes_are_refused_with_what_to_do() {
        let err = |f: FlagSpec| {
            merge(SpecFile::default(), &f)
                .and_then(|s| resolve(&s, Path::new("."), &mut |_| None))
                .map(|_| ())
                .map_err(|e| format!("{e:#}"))
                .unwrap_err()
        };
        let base = |f: &mut FlagSpec| f.models = vec!["m".into()];
        assert!(err(flags_of(base)).contains("no endpoints"));
        assert!(err(flags_of(|f| {
            base(f);
            f.endpoints = vec!["a".into()]
        }))
        .contains("NAME=URL"));
        assert!(err(flags_of(|f| {
            base(f);
            f.endpoints = vec!["a=https://x".into()]
        }))
        .contains("plain HTTP"));
        assert!(err(flags_of(|f| {
            base(f);
            f.endpoints = vec!["a b=http://x".into()]
        }))
        .contains("letters, digits"));
        assert!(err(flags_of(|f| {
            base(f);
            f.endpoints = vec!["a=http://x".into(), "a=http://y".into()]
        }))
        .contains("unique"));
        assert!(err(flags_of(|f| {
            base(f);
            f.servers = vec!["a=vllm".into()]
        }))
        .contains("unknown server preset"));
        assert!(err(flags_of(|f| {
            base(f);
            f.env = vec!["a:K=V".into()]
        }))
        .contains("no endpoint named"));
        assert!(err(flags_of(|f| {
            base(f);
            f.endpoints = vec!["a=http://x".into()];
            f.num_gpu = vec![-2]
        }))
        .contains("-1 to let"));
        assert!(err(flags_of(|f| {
            base(f);
            f.endpoints = vec!["a=http://x".into()];
            f.num_gpu = vec![1, 1]
        }))
        .contains("twice"));
        assert!(err(flags_of(|f| { f.endpoints = vec!["a=http://x".into()] })).contains("no model"));
    }

    #[test]
    fn option_values_are_json_when_they_parse() {
        let s = merge(
            SpecFile::default(),
            &flags_of(|f| f.options = vec!["num_ctx=4096".into(), "stop=[\"\\n\"]".into(), "mode=fast".into()]),
        )
        .unwrap();
        assert_eq!(s.options["num_ctx"], 4096);
        assert_eq!(s.options["stop"], serde_json::json!(["\n"]));
        assert_eq!(s.options["mode"], "fast");
    }

    #[test]
    fn token_prompts_are_deterministic_and_varied() {
        let a = prompt_of_tokens(200);
        assert_eq!(a, prompt_of_tokens(200));
        assert_eq!(a.split(' ').count(), 200);
        let distinct: std::collections::BTreeSet<&str> = a.split(' ').collect();
        assert_eq!(distinct.len(), 64);
        assert!(prompt_of_tokens(1).split(' ').count() == 1);
    }

    #[test]
    fn plans_round_trip_through_json_for_resume() {
        let f = flags_of(|f| {
            f.servers = vec!["cpu=llama-server:--device,none".into()];
            f.endpoints = vec!["o=http://127.0.0.1:1".into()];
            f.models = vec!["m.gguf".into()];
        });
        let p = plan(merge(SpecFile::default(), &f).unwrap());
        let back: Plan = serde_json::from_str(&serde_json::to_string(&p).unwrap()).unwrap();
        assert_eq!(back, p);
        assert_eq!(back.cells(), p.cells());
    }
}
