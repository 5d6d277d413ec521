//! The resolved plan: every endpoint with its program, arguments and API, the models, prompt texts and settings of
//! a sweep, checked and with defaults filled in ([`resolve`]). It is stored with the run as JSON, so `--resume`
//! replays exactly the same cells in the same order even if the TOML file or the flags changed since; its serialized
//! shape is what runs of earlier versions stored. The cells are expanded from it in [`super::cells`].

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::presets::Preset;
use super::spec::{EndpointSpec, ModelEntry, PromptSpec, SpecFile};
use crate::output::shell::{shell_line, shell_quoted};
use crate::run::format::record::Api;

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
/// Default observer window for sweeps: shorter than `backscope trace`'s 50 ms, so a request's join waits less and
/// windows straddling a request boundary are shorter.
pub const DEFAULT_TRACE_INTERVAL_MS: u64 = 20;
/// The documented maxima of the sweep's numbers (docs/commands.md), checked for flags and spec files alike: a timeout
/// becomes a deadline (`now + d`, which a huge value overflows), epochs and repetitions a loop, a generated prompt an
/// allocation. Seven days; a thousand passes; 100,000 layers; ten million tokens to generate; a prompt of 2^20
/// tokens (about 6 MB); an observer window of an hour.
pub const MAX_TIMEOUT_S: f64 = 7.0 * 24.0 * 3600.0;
pub const MAX_EPOCHS: u32 = 1000;
pub const MAX_REPETITIONS: u32 = 1000;
pub const MAX_NUM_GPU: i64 = 100_000;
pub const MAX_NUM_PREDICT: i64 = 10_000_000;
pub const MAX_PROMPT_TOKENS: u32 = 1 << 20;
pub const MAX_TRACE_INTERVAL_MS: u64 = 3_600_000;
/// Sampling temperatures beyond this are typos (llama.cpp reads any value ≤ 0 as greedy).
pub const MAX_TEMPERATURE: f64 = 1000.0;
/// Most cells in one sweep: each is at least one request to a server, so a million is weeks of work, and more is a
/// typo or a rewritten row whose schedule would not fit in memory.
pub const MAX_CELLS: usize = 1_000_000;

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
pub struct Endpoint {
    pub name: String,
    pub kind: EndpointKind,
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
            EndpointKind::Managed { preset, api, args, .. } => preset.num_gpu_settable(*api, args),
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
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
pub struct Model {
    pub label: String,
    pub ollama: String,
    pub gguf: String,
}

impl Model {
    fn of(entry: &ModelEntry) -> Model {
        match entry {
            ModelEntry::Name(n) => Model { label: n.clone(), ollama: n.clone(), gguf: n.clone() },
            ModelEntry::Table { name, ollama, gguf } => Model {
                label: name.clone(),
                ollama: ollama.clone().unwrap_or_else(|| name.clone()),
                gguf: gguf.clone().unwrap_or_else(|| name.clone()),
            },
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

/// How requests are joined to observed kernel launches.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TracePlan {
    /// The observer library loaded into managed servers (`None` when every traced endpoint is external).
    pub observer: Option<PathBuf>,
    /// Window length given to managed servers' observers.
    pub interval_ms: u64,
    /// The directory of the Vulkan layer's manifest, for managed servers (`None`: Vulkan is not observed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vulkan_manifest: Option<PathBuf>,
    /// External endpoints' trace directories, by endpoint name.
    #[serde(default)]
    pub dirs: BTreeMap<String, PathBuf>,
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

/// Resolve a merged spec (its paths already absolute) into a plan. `detect` is asked for the API of external
/// endpoints whose `api` is not set (it may answer `None` when the endpoint does not answer yet; cells then detect
/// it themselves). Mistakes are refused in the order the spec lists things, each with what to do.
pub fn resolve(spec: &SpecFile, detect: &mut dyn FnMut(&str) -> Option<Api>) -> Result<Plan> {
    if spec.endpoints.is_empty() {
        bail!("no endpoints: give --endpoint NAME=URL (an Ollama or llama-server you run) or --server NAME=llama-server (one backscope starts), or a --spec file");
    }
    let timeouts = timeouts(spec)?;
    let mut endpoints = Vec::new();
    for e in &spec.endpoints {
        validate_name(&e.name)?;
        if endpoints.iter().any(|x: &Endpoint| x.name == e.name) {
            bail!("two endpoints are named `{}`; names must be unique", e.name);
        }
        endpoints.push(Endpoint { name: e.name.clone(), kind: endpoint_kind(e, spec, &timeouts, detect)? });
    }
    let models = models(spec)?;
    let prompts = prompts(spec)?;
    let num_gpu = if spec.num_gpu.is_empty() { vec![-1] } else { spec.num_gpu.clone() };
    if let Some(bad) = num_gpu.iter().find(|&&n| !(-1..=MAX_NUM_GPU).contains(&n)) {
        bail!("num_gpu {bad}: use a layer count from 0 to {MAX_NUM_GPU}, or -1 to let the runtime decide");
    }
    let num_predict = if spec.num_predict.is_empty() { vec![DEFAULT_NUM_PREDICT] } else { spec.num_predict.clone() };
    if let Some(bad) = num_predict.iter().find(|&&n| !(1..=MAX_NUM_PREDICT).contains(&n)) {
        bail!("num_predict {bad}: generate from 1 to {MAX_NUM_PREDICT} tokens");
    }
    for list in [&num_gpu, &num_predict] {
        let mut seen = BTreeSet::new();
        if let Some(x) = list.iter().find(|&x| !seen.insert(x)) {
            bail!("value {x} is listed twice in a num_gpu/num_predict list");
        }
    }
    let trace = trace(spec, &endpoints)?;
    let epochs = spec.epochs.unwrap_or(1);
    let repetitions = spec.repetitions.unwrap_or(1);
    if !(1..=MAX_EPOCHS).contains(&epochs) {
        bail!("epochs {epochs}: give 1 to {MAX_EPOCHS} passes");
    }
    if !(1..=MAX_REPETITIONS).contains(&repetitions) {
        bail!("repetitions {repetitions}: give 1 to {MAX_REPETITIONS}");
    }
    if let Some(t) = spec.temperature.filter(|t| !(-MAX_TEMPERATURE..=MAX_TEMPERATURE).contains(t)) {
        bail!("temperature {t}: give a number from -{MAX_TEMPERATURE} to {MAX_TEMPERATURE}");
    }
    let plan = Plan {
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
    };
    // The one check a stored plan goes through on `--resume` too: what passes here is what a resume accepts.
    plan.check()?;
    Ok(plan)
}

fn timeouts(spec: &SpecFile) -> Result<Timeouts> {
    let t = &spec.timeouts;
    let timeouts = Timeouts {
        connect_s: t.connect_s.unwrap_or(DEFAULT_CONNECT_S),
        read_s: t.read_s.unwrap_or(DEFAULT_READ_S),
        request_s: t.request_s.unwrap_or(DEFAULT_REQUEST_S),
        ready_s: t.ready_s.unwrap_or(DEFAULT_READY_S),
        grace_s: t.grace_s.unwrap_or(DEFAULT_GRACE_S),
    };
    check_timeouts(&timeouts)?;
    Ok(timeouts)
}

/// A timeout becomes a `Duration` and a deadline (`now + d`): NaN, infinities and huge values are refused here.
fn check_seconds(what: &str, v: f64) -> Result<()> {
    if !(v > 0.0 && v <= MAX_TIMEOUT_S) {
        bail!("the {what} timeout must be a positive number of seconds up to {MAX_TIMEOUT_S} (7 days), not {v}");
    }
    Ok(())
}

fn check_timeouts(t: &Timeouts) -> Result<()> {
    for (what, v) in [
        ("connect", t.connect_s),
        ("read", t.read_s),
        ("request", t.request_s),
        ("ready", t.ready_s),
        ("grace", t.grace_s),
    ] {
        check_seconds(what, v)?;
    }
    Ok(())
}

impl Plan {
    /// Every check a plan passes: its shape ([`Plan::check_shape`]) and its numbers ([`Plan::check_limits`]). A new
    /// plan passes it when it is resolved, a stored one again on `--resume`, so a row rewritten in the store gets
    /// no further than the same spec given as flags would.
    pub fn check(&self) -> Result<()> {
        // The limits first: a value out of range is named as such, not as the cells it multiplies to.
        self.check_limits()?;
        self.check_shape()
    }

    /// What [`resolve`] makes of a spec and a rewritten row could break: endpoint names (they name files and
    /// directories of the run), plain-HTTP URLs, unique models and prompts, lists that are not empty nor repeat a
    /// value, and the cells they multiply to.
    pub fn check_shape(&self) -> Result<()> {
        if self.endpoints.is_empty() {
            bail!("field `endpoints`: no endpoint");
        }
        let mut names = BTreeSet::new();
        for e in &self.endpoints {
            validate_name(&e.name).context("field `endpoints`")?;
            if !names.insert(&e.name) {
                bail!("field `endpoints`: two endpoints are named `{}`; names must be unique", e.name);
            }
            match &e.kind {
                EndpointKind::External { url, .. } if !url.starts_with("http://") => {
                    bail!("field `endpoints`: endpoint `{}`: `{url}` is not an http:// URL", e.name)
                }
                EndpointKind::Managed { program, .. } if program.as_os_str().is_empty() => {
                    bail!("field `endpoints`: endpoint `{}` names no program", e.name)
                }
                _ => {}
            }
        }
        if self.models.is_empty() {
            bail!("field `models`: no model");
        }
        let mut labels = BTreeSet::new();
        if let Some(m) = self.models.iter().find(|m| !labels.insert(&m.label)) {
            bail!("field `models`: model `{}` is listed twice", m.label);
        }
        if self.prompts.is_empty() {
            bail!("field `prompts`: no prompt");
        }
        let mut prompt_names = BTreeSet::new();
        if let Some(p) = self.prompts.iter().find(|p| !prompt_names.insert(&p.name)) {
            bail!("field `prompts`: two prompts are named `{}`", p.name);
        }
        if let Some(n) =
            self.prompts.iter().filter_map(|p| p.target_tokens).find(|n| !(1..=MAX_PROMPT_TOKENS).contains(n))
        {
            bail!("field `prompts`: prompt_tokens {n}: give 1 to {MAX_PROMPT_TOKENS} tokens");
        }
        for (field, list) in [("num_gpu", &self.num_gpu), ("num_predict", &self.num_predict)] {
            let mut seen = BTreeSet::new();
            if list.is_empty() {
                bail!("field `{field}`: an empty list");
            }
            if let Some(x) = list.iter().find(|&x| !seen.insert(x)) {
                bail!("field `{field}`: value {x} is listed twice");
            }
        }
        let cells = [self.endpoints.len(), self.models.len(), self.num_gpu.len(), self.prompts.len()]
            .into_iter()
            .chain([self.num_predict.len(), self.epochs as usize, self.repetitions as usize])
            .try_fold(1usize, usize::checked_mul);
        if cells.is_none_or(|n| n > MAX_CELLS) {
            bail!(
                "the endpoints, models, num_gpu, prompts, num_predict, epochs and repetitions multiply to more than \
                 {MAX_CELLS} cells; split the sweep"
            );
        }
        if !(-MAX_TEMPERATURE..=MAX_TEMPERATURE).contains(&self.temperature) {
            bail!(
                "field `temperature`: {}: give a number from -{MAX_TEMPERATURE} to {MAX_TEMPERATURE}",
                self.temperature
            );
        }
        if self.trace.as_ref().is_some_and(|t| t.interval_ms == 0) {
            bail!("field `trace_interval_ms`: 0; it must be at least 1");
        }
        Ok(())
    }

    /// Whether the plan starts any program: a managed server (its program, arguments and environment, and with
    /// `--trace` the observer library preloaded into it and the Vulkan layer it loads). A plan of external
    /// endpoints only starts nothing: it sends its requests over HTTP to the URLs it names.
    pub fn starts_programs(&self) -> bool {
        self.endpoints.iter().any(Endpoint::is_managed)
    }

    /// What of the plan decides which code runs, as `(what, value)` lines with every argument shell-quoted: each
    /// managed server's command line and environment, the observer library and the Vulkan layer directory.
    pub fn what_runs(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for e in &self.endpoints {
            if let EndpointKind::Managed { program, args, env, .. } = &e.kind {
                let argv: Vec<String> =
                    std::iter::once(program.to_string_lossy().into_owned()).chain(args.iter().cloned()).collect();
                out.push((format!("server `{}`", e.name), shell_line(&argv)));
                if !env.is_empty() {
                    let env: Vec<String> = env.iter().map(|(k, v)| format!("{k}={v}")).collect();
                    out.push((format!("server `{}` env", e.name), shell_line(&env)));
                }
            }
        }
        if let Some(t) = self.trace.as_ref().filter(|_| self.starts_programs()) {
            if let Some(observer) = &t.observer {
                out.push(("observer (LD_PRELOAD)".into(), shell_quoted(&observer.to_string_lossy())));
            }
            if let Some(layer) = &t.vulkan_manifest {
                out.push(("Vulkan layer dir".into(), shell_quoted(&layer.to_string_lossy())));
            }
        }
        out
    }

    /// The numeric limits every new plan passes, checked again on a plan read back for `--resume`: a stored row is
    /// data someone may have rewritten, and a timeout, a loop count or a window from it must not reach a deadline
    /// or a loop the flags would have refused.
    pub fn check_limits(&self) -> Result<()> {
        check_timeouts(&self.timeouts)?;
        for e in &self.endpoints {
            if let EndpointKind::Managed { ready_timeout_s, .. } = &e.kind {
                check_seconds(&format!("endpoint `{}` ready", e.name), *ready_timeout_s)?;
            }
        }
        if !(1..=MAX_EPOCHS).contains(&self.epochs) {
            bail!("field `epochs`: {}: give 1 to {MAX_EPOCHS} passes", self.epochs);
        }
        if !(1..=MAX_REPETITIONS).contains(&self.repetitions) {
            bail!("field `repetitions`: {}: give 1 to {MAX_REPETITIONS}", self.repetitions);
        }
        if let Some(n) = self.num_gpu.iter().find(|n| !(-1..=MAX_NUM_GPU).contains(*n)) {
            bail!("num_gpu {n}: use a layer count from 0 to {MAX_NUM_GPU}, or -1 to let the runtime decide");
        }
        if let Some(n) = self.num_predict.iter().find(|n| !(1..=MAX_NUM_PREDICT).contains(*n)) {
            bail!("num_predict {n}: generate from 1 to {MAX_NUM_PREDICT} tokens");
        }
        if let Some(t) = self.trace.as_ref().filter(|t| t.interval_ms > MAX_TRACE_INTERVAL_MS) {
            bail!("trace_interval_ms {}: at most {MAX_TRACE_INTERVAL_MS} (an hour)", t.interval_ms);
        }
        Ok(())
    }
}

fn endpoint_kind(
    e: &EndpointSpec,
    spec: &SpecFile,
    timeouts: &Timeouts,
    detect: &mut dyn FnMut(&str) -> Option<Api>,
) -> Result<EndpointKind> {
    match (&e.url, e.server) {
        (Some(_), Some(_)) => bail!(
            "endpoint `{}` has both `url` and `server`: an endpoint is either external or started by backscope",
            e.name
        ),
        (None, None) => {
            bail!("endpoint `{}` needs `url` (external) or `server` (llama-server, ollama, command)", e.name)
        }
        (Some(url), None) => {
            if url.starts_with("https://") {
                bail!("endpoint `{}`: {url}: backscope speaks plain HTTP only (local servers); use http://", e.name);
            }
            if !url.starts_with("http://") {
                bail!("endpoint `{}`: `{url}` is not an http:// URL (e.g. http://127.0.0.1:11434)", e.name);
            }
            if !e.args.is_empty() || !e.env.is_empty() || e.program.is_some() || e.port.is_some() {
                bail!("endpoint `{}` is external (`url`): args, env, program and port apply only to servers backscope starts", e.name);
            }
            let api = e.api.or_else(|| detect(url));
            Ok(EndpointKind::External { url: url.trim_end_matches('/').to_string(), api, log_file: e.log_file.clone() })
        }
        (None, Some(preset)) => {
            if e.trace_dir.is_some() {
                bail!("endpoint `{}`: `trace_dir` is for external endpoints; backscope gives the servers it starts a trace directory in the run directory", e.name);
            }
            let Some(program) = e.program.clone().or_else(|| preset.default_program(spec.llama_bin.as_deref())) else {
                bail!("endpoint `{}`: a `command` server needs `program`", e.name)
            };
            let Some(api) = preset.api(e.api) else {
                let asked = e.api.map(|a| a.to_string()).unwrap_or_default();
                bail!("endpoint `{}`: the {preset:?} preset speaks its own API, not {asked}", e.name)
            };
            Ok(EndpointKind::Managed {
                preset,
                api,
                program,
                args: e.args.clone(),
                env: e.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
                port: e.port,
                ready_timeout_s: {
                    let s = e.ready_timeout_s.unwrap_or(timeouts.ready_s);
                    check_seconds(&format!("endpoint `{}` ready", e.name), s)?;
                    s
                },
            })
        }
    }
}

fn models(spec: &SpecFile) -> Result<Vec<Model>> {
    if spec.models.is_empty() {
        bail!("no model: give --model (an Ollama name like qwen3.5:2b, or a GGUF path for llama-server)");
    }
    let models: Vec<Model> = spec.models.iter().map(Model::of).collect();
    let mut labels = BTreeSet::new();
    if let Some(m) = models.iter().find(|m| !labels.insert(&m.label)) {
        bail!("model `{}` is listed twice", m.label);
    }
    Ok(models)
}

/// The largest prompt file read. The longest context windows of local models (128k–1M tokens) are a few MB of text;
/// 16 MiB holds any prompt a server accepts, and refuses `/dev/zero` or a wrong file before memory runs out.
pub const MAX_PROMPT_FILE_BYTES: u64 = 16 << 20;

fn prompts(spec: &SpecFile) -> Result<Vec<Prompt>> {
    let default =
        [PromptSpec { name: Some("default".into()), text: Some(DEFAULT_PROMPT.into()), ..Default::default() }];
    let specs = if spec.prompts.is_empty() { &default[..] } else { &spec.prompts[..] };
    let mut prompts: Vec<Prompt> = Vec::new();
    for (i, p) in specs.iter().enumerate() {
        let (default_name, text, target) = match (&p.text, &p.file, p.tokens) {
            (Some(t), None, None) => (format!("text{}", i + 1), t.clone(), None),
            (None, Some(f), None) => {
                let t = crate::host::inputs::read_text_limited(f, MAX_PROMPT_FILE_BYTES)
                    .context("cannot read the prompt file")?;
                let stem = f.file_stem().map(|s| s.to_string_lossy().into_owned());
                (stem.unwrap_or_else(|| format!("file{}", i + 1)), t, None)
            }
            (None, None, Some(n)) if (1..=MAX_PROMPT_TOKENS).contains(&n) => {
                (format!("{n}tok"), prompt_of_tokens(n), Some(n))
            }
            (None, None, Some(n)) => {
                bail!("prompt {}: prompt_tokens {n}: give 1 to {MAX_PROMPT_TOKENS} tokens", i + 1)
            }
            _ => bail!("prompt {}: give exactly one of `text`, `file` or `tokens`", i + 1),
        };
        let name = p.name.clone().unwrap_or(default_name);
        if prompts.iter().any(|x| x.name == name) {
            bail!("two prompts are named `{name}`; give them distinct `name`s");
        }
        prompts.push(Prompt { name, text, target_tokens: target });
    }
    Ok(prompts)
}

fn trace(spec: &SpecFile, endpoints: &[Endpoint]) -> Result<Option<TracePlan>> {
    if spec.trace != Some(true) {
        if spec.endpoints.iter().any(|e| e.trace_dir.is_some()) || spec.observer.is_some() || spec.vklayer.is_some() {
            bail!("`trace_dir`, `observer` and `vklayer` need `trace = true` (--trace)");
        }
        return Ok(None);
    }
    let dirs: BTreeMap<String, PathBuf> =
        spec.endpoints.iter().filter_map(|e| e.trace_dir.as_ref().map(|d| (e.name.clone(), d.clone()))).collect();
    let observer = if endpoints.iter().any(Endpoint::is_managed) {
        Some(crate::observe::observers::find_observer(spec.observer.as_deref())?)
    } else {
        None
    };
    // The layer is optional unless named: without it CUDA and HIP are still observed.
    let vulkan_manifest = if observer.is_none() {
        None
    } else {
        crate::observe::observers::optional_manifest_dir(spec.vklayer.as_deref())?
    };
    let interval_ms = spec.trace_interval_ms.unwrap_or(DEFAULT_TRACE_INTERVAL_MS);
    if interval_ms == 0 {
        bail!("trace_interval_ms must be at least 1: with 0 the observer writes only at exit and no request could be joined");
    }
    if interval_ms > MAX_TRACE_INTERVAL_MS {
        bail!("trace_interval_ms {interval_ms}: at most {MAX_TRACE_INTERVAL_MS} (an hour)");
    }
    Ok(Some(TracePlan { observer, interval_ms, vulkan_manifest, dirs }))
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::commands::sweep::flags::SweepFlags;

    fn plan_of(f: impl FnOnce(&mut SweepFlags)) -> Result<Plan> {
        let mut flags = SweepFlags::default();
        f(&mut flags);
        let spec = flags.merge_onto(SpecFile::default(), Path::new("/cwd"))?;
        resolve(&spec, &mut |_| None)
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
        let p = resolve(&spec, &mut |_| None).unwrap();
        assert_eq!(p.prompts[1].name, "64tok");
        assert_eq!(p.prompts[1].text.split(' ').count(), 64);
        assert_eq!(p.options["num_ctx"], 2048);
        assert_eq!(p.request["keep_alive"], "1m");
        assert_eq!(p.timeouts.ready_s, 30.0);
        assert_eq!(p.timeouts.read_s, DEFAULT_READ_S);
        assert_eq!((p.temperature, p.seed, p.stream, p.epochs, p.repetitions), (0.5, 7, false, 2, 3));
        let e = &p.endpoints[0];
        assert_eq!(e.model_name(&p.models[1]), "/m/qwen.gguf");
        assert_eq!(e.api(), Some(Api::OpenAi));
        assert!(!e.num_gpu_settable(), "a command without {{num_gpu}} that is not Ollama cannot vary it");
    }

    /// A plan read back for `--resume` passes the limits a new one does: a rewritten row's NaN or huge timeout,
    /// endless epochs or huge layer count is refused before any deadline or loop sees it.
    #[test]
    fn a_stored_plan_out_of_limits_is_refused() {
        let ok = plan_of(|f| {
            f.endpoints = vec!["a=http://x".into()];
            f.servers = vec!["b=llama-server".into()];
            f.llama_bin = Some("/llama/bin".into());
            f.models = vec!["/m.gguf".into()];
        })
        .unwrap();
        ok.check_limits().unwrap();
        let refused = |f: &dyn Fn(&mut Plan)| {
            let mut p = ok.clone();
            f(&mut p);
            format!("{:#}", p.check_limits().unwrap_err())
        };
        assert!(refused(&|p| p.timeouts.request_s = f64::NAN).contains("request timeout"));
        assert!(refused(&|p| p.timeouts.grace_s = 1e300).contains("grace timeout"));
        assert!(refused(&|p| p.epochs = u32::MAX).contains("epochs"));
        assert!(refused(&|p| p.num_gpu = vec![i64::MIN]).contains("num_gpu"));
        let managed = |p: &mut Plan| {
            for e in &mut p.endpoints {
                if let EndpointKind::Managed { ready_timeout_s, .. } = &mut e.kind {
                    *ready_timeout_s = f64::INFINITY;
                }
            }
        };
        assert!(refused(&managed).contains("endpoint `b` ready"));
    }

    #[test]
    fn mistakes_are_refused_with_what_to_do() {
        /// The error of a plan with one model and what `f` adds.
        fn err(f: impl FnOnce(&mut SweepFlags)) -> String {
            let e = plan_of(|x| {
                x.models = vec!["m".into()];
                f(x)
            })
            .unwrap_err();
            format!("{e:#}")
        }
        fn ngl(f: &mut SweepFlags, n: Vec<i64>) {
            f.endpoints = vec!["a=http://x".into()];
            f.num_gpu = n
        }
        assert!(err(|_| {}).contains("no endpoints"));
        assert!(err(|f| f.endpoints = vec!["a=https://x".into()]).contains("plain HTTP"));
        assert!(err(|f| f.endpoints = vec!["a=ftp://x".into()]).contains("not an http:// URL"));
        assert!(err(|f| f.endpoints = vec!["a b=http://x".into()]).contains("letters, digits"));
        assert!(err(|f| f.endpoints = vec!["a=http://x".into(), "a=http://y".into()]).contains("unique"));
        assert!(err(|f| f.servers = vec!["a=command".into()]).contains("needs `program`"));
        assert!(err(|f| ngl(f, vec![-2])).contains("-1 to let"));
        assert!(err(|f| ngl(f, vec![1, 1])).contains("twice"));
        assert!(err(|f| {
            ngl(f, vec![0]);
            f.epochs = Some(0)
        })
        .contains("give 1 to 1000"));
        // The documented maxima: a huge value is a loop, a deadline or an allocation that never ends.
        assert!(err(|f| {
            ngl(f, vec![0]);
            f.repetitions = Some(u32::MAX)
        })
        .contains("give 1 to 1000"));
        assert!(err(|f| {
            ngl(f, vec![0]);
            f.timeouts.request_s = Some(1e300)
        })
        .contains("up to 604800"));
        assert!(err(|f| ngl(f, vec![i64::MAX])).contains("from 0 to 100000"));
        assert!(err(|f| {
            ngl(f, vec![0]);
            f.prompt_tokens = vec![u32::MAX]
        })
        .contains("give 1 to 1048576"));
        assert!(err(|f| {
            ngl(f, vec![0]);
            f.timeouts.read_s = Some(-1.0)
        })
        .contains("read timeout must be a positive number"));
        assert!(err(|f| {
            ngl(f, vec![0]);
            f.prompt_files = vec!["/nonexistent/p.txt".into()]
        })
        .contains("cannot read the prompt file: cannot read /nonexistent/p.txt"));
        let no_model = plan_of(|f| f.endpoints = vec!["a=http://x".into()]).unwrap_err();
        assert!(format!("{no_model:#}").contains("no model"));
    }

    #[test]
    fn a_preset_keeps_its_own_api() {
        let spec: SpecFile = toml::from_str(
            "models = [\"m\"]\n[[endpoints]]\nname = \"ls\"\nserver = \"llama-server\"\napi = \"ollama\"\n",
        )
        .unwrap();
        let e = format!("{:#}", resolve(&spec, &mut |_| None).unwrap_err());
        assert_eq!(e, "endpoint `ls`: the LlamaServer preset speaks its own API, not ollama");
    }

    #[test]
    fn token_prompts_are_deterministic_and_varied() {
        let a = prompt_of_tokens(200);
        assert_eq!(a, prompt_of_tokens(200));
        assert_eq!(a.split(' ').count(), 200);
        let distinct: BTreeSet<&str> = a.split(' ').collect();
        assert_eq!(distinct.len(), 64);
        assert!(prompt_of_tokens(1).split(' ').count() == 1);
    }

    #[test]
    fn plans_round_trip_through_json_for_resume() {
        let p = plan_of(|f| {
            f.servers = vec!["cpu=llama-server:--device,none".into()];
            f.endpoints = vec!["o=http://127.0.0.1:1".into()];
            f.models = vec!["m.gguf".into()];
        })
        .unwrap();
        let back: Plan = serde_json::from_str(&serde_json::to_string(&p).unwrap()).unwrap();
        assert_eq!(back, p);
    }
}
