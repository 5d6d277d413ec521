//! From a run's records to its statistics, in one pass and bounded memory: each record is read from its JSON
//! text into a borrowed view of the fields the statistics need ([`RecordView`]) and folded into its group; only a
//! few whole records per group are kept (the first successful one, for the backend it ran on and a healthy
//! timeline; the first failed ones, for their log slices). A group is the cells that differ only in epoch and
//! repetition: endpoint × model × num_gpu × prompt × num_predict.
//!
//! Requests are split into cold and warm. A request is cold when its server had not served this model with
//! these load options before it: the first request of a server process (a managed server's start number
//! changed), or the first after the endpoint switched model or num_gpu (Ollama reloads the model then). Its wall
//! time holds what a warm request does not (a model load, first-use compilation of shaders and kernels), so
//! the two are summarised apart and outliers are looked for within each.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use super::stats::{self, RatioCi, Summary, Verdict};
use crate::run::format::record::{ErrorClass, Record, Status};

/// Failed records kept whole per group (their log slices are read for the crash phase and the timelines).
pub const FAILED_KEPT: usize = 32;
/// Record addresses kept per group and kind, for claim sources.
const REFS_KEPT: usize = 8;

/// The fields of a stored record the statistics read, borrowed from its JSON where it has no escapes.
#[derive(Debug, Deserialize)]
struct RecordView<'a> {
    #[serde(borrow)]
    run_id: Cow<'a, str>,
    seq: u64,
    #[serde(borrow)]
    file: Cow<'a, str>,
    #[serde(borrow)]
    endpoint: Cow<'a, str>,
    #[serde(borrow)]
    model: Cow<'a, str>,
    num_gpu: i64,
    #[serde(borrow)]
    prompt: Cow<'a, str>,
    num_predict: i64,
    status: Status,
    #[serde(default)]
    error_class: Option<ErrorClass>,
    #[serde(default, borrow)]
    signal: Option<Cow<'a, str>>,
    #[serde(default)]
    exit_code: Option<i32>,
    #[serde(default)]
    http_status: Option<u16>,
    #[serde(default)]
    wall_ms: Option<f64>,
    #[serde(default)]
    ttft_ms: Option<f64>,
    #[serde(default)]
    ttf_ms: Option<f64>,
    #[serde(default)]
    server_timings: TimingsView,
    #[serde(default)]
    prompt_tps: Option<f64>,
    #[serde(default)]
    decode_tps: Option<f64>,
    #[serde(default)]
    prompt_count_includes_cache: bool,
    #[serde(default, borrow)]
    backend: Option<BackendView<'a>>,
    #[serde(default)]
    server: Option<ServerView>,
    #[serde(default, borrow)]
    trace: Option<TraceView<'a>>,
}

#[derive(Debug, Default, Deserialize)]
struct TimingsView {
    #[serde(default)]
    load_ms: Option<f64>,
    #[serde(default)]
    prompt_n: Option<u64>,
    #[serde(default)]
    decode_n: Option<u64>,
}

#[derive(Debug, Deserialize)]
struct BackendView<'a> {
    #[serde(borrow)]
    backend: Cow<'a, str>,
    #[serde(default)]
    offloaded: Option<(u32, u32)>,
}

#[derive(Debug, Deserialize)]
struct ServerView {
    start_no: u32,
}

#[derive(Debug, Deserialize)]
struct TraceView<'a> {
    total_launches: u64,
    /// Whether the server ran with the Vulkan layer (so Vulkan dispatches were counted too).
    #[serde(default)]
    vulkan_layer: Option<bool>,
    #[serde(borrow)]
    families: BTreeMap<Cow<'a, str>, u64>,
    #[serde(default)]
    cut: Vec<serde::de::IgnoredAny>,
    #[serde(default)]
    observer_loaded: Option<bool>,
    #[serde(default)]
    interval_ms: u64,
    #[serde(default, borrow)]
    kernels: Vec<TraceKernelView<'a>>,
    #[serde(default, borrow)]
    processes: Vec<TraceProcessView<'a>>,
    #[serde(default, borrow)]
    dir: Cow<'a, str>,
}

#[derive(Debug, Deserialize)]
struct TraceKernelView<'a> {
    #[serde(borrow)]
    api: Cow<'a, str>,
}

#[derive(Debug, Deserialize)]
struct TraceProcessView<'a> {
    #[serde(borrow)]
    file: Cow<'a, str>,
    launches: u64,
}

impl RecordView<'_> {
    fn is_ok(&self) -> bool {
        self.status == Status::Ok
    }

    /// The outcome as the sweep's table names it (`Record::outcome`).
    fn outcome(&self) -> String {
        crate::run::format::record::outcome(
            self.status,
            self.error_class,
            self.signal.as_deref(),
            self.exit_code,
            self.http_status,
        )
    }
}

/// A record's address: its run and its `result.json` (relative to the run directory).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RecordRef {
    pub seq: u64,
    pub file: String,
}

/// A backend a group's cells ran on, from their server logs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct BackendSeen {
    /// `CPU`, or the device that held offloaded layers.
    pub backend: String,
    /// Layers offloaded / layers, as the log says.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offloaded: Option<(u32, u32)>,
    pub cells: usize,
}

/// A request whose wall time is an outlier among its group's requests of the same kind (cold or warm).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Outlier {
    pub seq: u64,
    pub file: String,
    pub wall_ms: f64,
    /// Its modified z-score.
    pub z: f64,
    pub cold: bool,
}

/// The times to failure of one outcome of a group (`crash SIGSEGV`, `read_timeout`, …) and their verdict.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FailureTiming {
    pub outcome: String,
    /// The error class (`crash`, `eof`, …).
    pub class: String,
    pub n: usize,
    /// Of those, the ones whose time to failure is recorded.
    pub timed: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttf_ms: Option<Summary>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cv: Option<f64>,
    pub verdict: Verdict,
    /// The CV of the same group's successful wall times, for comparison (how much the work itself varies).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ok_wall_cv: Option<f64>,
    #[serde(skip)]
    pub times_ms: Vec<f64>,
    #[serde(skip)]
    pub refs: Vec<RecordRef>,
}

/// Kernel launches per request, for groups swept with `--trace`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct KernelStats {
    /// Requests with a trace.
    pub traced: usize,
    /// Of those, requests whose trace the observer stopped writing early (counts are lower bounds).
    pub cut: usize,
    /// Of those, requests traced with the Vulkan layer as well (Vulkan dispatches counted as launches).
    #[serde(default)]
    pub vulkan_layer: usize,
    /// Launches per request.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub launches: Option<Summary>,
    /// Median launches per request, by ggml kernel family (0 counted for requests without that family).
    pub families: BTreeMap<String, f64>,
    #[serde(skip)]
    pub refs: Vec<RecordRef>,
    /// Requests traced although the observer was not mapped into their server (a static or setuid program ignores
    /// `LD_PRELOAD`): their silence proves nothing.
    #[serde(skip)]
    pub unobserved: usize,
    /// Whether any traced kernel was a Vulkan dispatch (so the Vulkan matmul families are the ones to miss).
    #[serde(skip)]
    pub vulkan_kernels: bool,
    /// The observer's window length (ms), the precision of the join of requests to trace windows (the largest).
    #[serde(skip)]
    pub interval_ms: u64,
    /// Trace files (relative to the run directory, or absolute) of the processes that launched during the first
    /// traced requests; the trace directory where no process wrote one.
    #[serde(skip)]
    pub files: Vec<String>,
}

/// Summaries of a group's requests of one kind.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Timing {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub warm: Option<Summary>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cold: Option<Summary>,
}

/// The statistics of one group of cells.
#[derive(Clone, Debug, Serialize)]
pub struct Group {
    pub endpoint: String,
    pub model: String,
    pub num_gpu: i64,
    pub prompt: String,
    pub num_predict: i64,
    pub n: usize,
    pub ok: usize,
    /// Failed cells by error class.
    pub failed: BTreeMap<String, usize>,
    /// Failed cells by outcome (`crash SIGSEGV`, `http_status 500`).
    pub outcomes: BTreeMap<String, usize>,
    /// What the server logs say ran the cells (not what was asked for).
    pub backends: Vec<BackendSeen>,
    /// Client-side wall time of the successful requests (ms), warm and cold apart.
    pub wall_ms: Timing,
    /// The server's own model load time (ms), where it reports one (Ollama's `load_duration`).
    pub load_ms: Timing,
    /// Tokens/s from the server's own counts and durations, successful requests.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_tps: Option<Summary>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decode_tps: Option<Summary>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttft_ms: Option<Summary>,
    pub outliers: Vec<Outlier>,
    pub failure_timing: Vec<FailureTiming>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernels: Option<KernelStats>,
    /// Position of the group's first cell in the plan.
    pub first_seq: u64,
    /// The first successful record, whole (its backend evidence, its log slice).
    #[serde(skip)]
    pub first_ok: Option<Box<Record>>,
    /// The record whose backend facts the group's claim cites: the first successful one with facts, else the first
    /// with facts.
    #[serde(skip)]
    pub backend_record: Option<Box<Record>>,
    /// The first [`FAILED_KEPT`] failed records, whole.
    #[serde(skip)]
    pub failed_records: Vec<Record>,
    /// Addresses of the first successful records.
    #[serde(skip)]
    pub ok_refs: Vec<RecordRef>,
    #[serde(skip)]
    decode_samples: Vec<f64>,
    #[serde(skip)]
    prompt_samples: Vec<f64>,
}

impl Group {
    /// Where the group sits in the sweep, in words: `num_gpu=1` and whatever else varies.
    pub fn place(&self, varies: &Varies) -> String {
        let mut s = format!("num_gpu={}", self.num_gpu);
        if varies.model {
            s.push_str(&format!(", model {}", self.model));
        }
        if varies.prompt {
            s.push_str(&format!(", prompt {}", self.prompt));
        }
        if varies.num_predict {
            s.push_str(&format!(", num_predict {}", self.num_predict));
        }
        s
    }

    /// The backends as one phrase: `Vulkan0 (…) 5/5 layers`, or each with its cell count when they differ.
    pub fn backend_text(&self) -> Option<String> {
        let one = |b: &BackendSeen| match b.offloaded {
            Some((n, m)) if b.backend != "CPU" => format!("{} ({n}/{m} layers)", b.backend),
            _ => b.backend.clone(),
        };
        match self.backends.as_slice() {
            [] => None,
            [b] => Some(one(b)),
            many => Some(many.iter().map(|b| format!("{} ×{}", one(b), b.cells)).collect::<Vec<_>>().join("; ")),
        }
    }

    pub fn samples(&self, metric: Metric) -> &[f64] {
        match metric {
            Metric::DecodeTps => &self.decode_samples,
            Metric::PromptTps => &self.prompt_samples,
        }
    }
}

/// Which sweep dimensions besides endpoint and num_gpu take more than one value in the run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Varies {
    pub model: bool,
    pub prompt: bool,
    pub num_predict: bool,
}

/// A rate compared between endpoints.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    DecodeTps,
    PromptTps,
}

impl Metric {
    pub fn words(self) -> &'static str {
        match self {
            Metric::DecodeTps => "decode t/s",
            Metric::PromptTps => "prompt t/s",
        }
    }
}

/// One endpoint's rate over another's at the same model, num_gpu, prompt and num_predict.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Ratio {
    pub metric: Metric,
    pub model: String,
    pub num_gpu: i64,
    pub prompt: String,
    pub num_predict: i64,
    pub numerator: String,
    pub denominator: String,
    pub n_numerator: usize,
    pub n_denominator: usize,
    /// Ratio of the medians (what the pivot shows divided).
    pub median_ratio: f64,
    /// Ratio of geometric means with Welch's interval on the logs; none with fewer than two values a side.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub welch: Option<RatioCi>,
}

/// The statistics of a run.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RunStats {
    pub cells: usize,
    pub ok: usize,
    pub failed: usize,
    /// Endpoints in the order their first cell ran.
    pub endpoints: Vec<String>,
    pub varies: Varies,
    /// Groups in the order their first cell ran.
    pub groups: Vec<Group>,
    pub ratios: Vec<Ratio>,
    /// Error classes of the failed cells, for the hints a view prints once per class.
    #[serde(skip)]
    pub error_classes: std::collections::BTreeSet<ErrorClass>,
    /// Whether a record's prompt token count includes cached tokens (Ollama's `prompt_eval_count`), so that prompt
    /// rates of repeated prompts are overstated.
    #[serde(skip)]
    pub prompt_count_includes_cache: bool,
    /// Where each place's group is in `groups`: lookups by place stay constant-time when a run has tens of
    /// thousands of places (an import of a llama-bench sweep over prompt sizes).
    #[serde(skip)]
    by_place: HashMap<Key, usize>,
}

impl RunStats {
    /// The group of a place, by its indices.
    pub fn group(&self, endpoint: &str, model: &str, num_gpu: i64, prompt: &str, num_predict: i64) -> Option<&Group> {
        let key = (endpoint.to_string(), model.to_string(), num_gpu, prompt.to_string(), num_predict);
        self.by_place.get(&key).and_then(|&i| self.groups.get(i))
    }
}

type Key = (String, String, i64, String, i64);
/// A backend and its offload, as a log states them.
type BackendKey = (String, Option<(u32, u32)>);

/// What the previous request of an endpoint left loaded.
struct Loaded {
    model: String,
    num_gpu: i64,
    start_no: Option<u32>,
}

/// A group while records are folded in.
struct Acc {
    group: Group,
    warm: Vec<(f64, RecordRef)>,
    cold: Vec<(f64, RecordRef)>,
    warm_load: Vec<f64>,
    cold_load: Vec<f64>,
    ttft: Vec<f64>,
    failures: BTreeMap<String, FailureTiming>,
    /// Cells per (backend, offloaded), with the seq of the first.
    backends: BTreeMap<BackendKey, (usize, u64)>,
    launches: Vec<f64>,
    /// Launches per family per traced request (0 where a request had none of the family).
    families: BTreeMap<String, Vec<u64>>,
}

/// Folds records, one at a time, into a run's statistics.
#[derive(Default)]
pub struct Aggregator {
    index: HashMap<Key, usize>,
    accs: Vec<Acc>,
    loaded: HashMap<String, Loaded>,
    endpoints: Vec<String>,
    cells: usize,
    ok: usize,
    error_classes: std::collections::BTreeSet<ErrorClass>,
    prompt_count_includes_cache: bool,
    run_id: Option<String>,
    /// Values not believed (negative or infinite times and rates, token counts no server reports), each naming
    /// its record and field; the first [`PROBLEMS_KEPT`], then a count.
    problems: Vec<String>,
    problems_more: usize,
}

/// Problems listed by name; past these, only counted.
const PROBLEMS_KEPT: usize = 100;
/// Largest token count believed: llama.cpp and Ollama count tokens in 32 bits.
const MAX_TOKENS: u64 = u32::MAX as u64;

impl std::fmt::Debug for Aggregator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Aggregator").field("cells", &self.cells).field("groups", &self.accs.len()).finish()
    }
}

impl Aggregator {
    pub fn new() -> Self {
        Aggregator::default()
    }

    /// The run id of the records folded so far (the first record's).
    pub fn run_id(&self) -> Option<&str> {
        self.run_id.as_deref()
    }

    /// Folds one record, given as its stored JSON text. Records must come in plan order (by `seq`): which
    /// requests are cold depends on what ran before them.
    pub fn add_json(&mut self, json: &str) -> Result<()> {
        let v: RecordView<'_> =
            serde_json::from_str(json).context("a record does not parse (written by another backscope version?)")?;
        if self.run_id.is_none() {
            self.run_id = Some(v.run_id.to_string());
        }
        self.cells += 1;
        self.prompt_count_includes_cache |= v.prompt_count_includes_cache;
        let v = self.sane(v);
        let index = self.group_index(&v);
        let cold = self.is_cold(&v);
        let acc = &mut self.accs[index];
        acc.group.n += 1;
        if let Some(b) = &v.backend {
            let e = acc.backends.entry((b.backend.to_string(), b.offloaded)).or_insert((0, v.seq));
            e.0 += 1;
            let better = acc.group.backend_record.as_ref().is_none_or(|r| !r.is_ok() && v.is_ok());
            if better {
                acc.group.backend_record = Some(Box::new(parse_whole(json)?));
            }
        }
        if let Some(t) = &v.trace {
            acc.add_trace(t, RecordRef { seq: v.seq, file: v.file.to_string() });
        }
        if v.is_ok() {
            self.ok += 1;
            acc.add_ok(&v, json, cold)?;
        } else {
            if let Some(c) = v.error_class {
                self.error_classes.insert(c);
            }
            acc.add_failed(&v, json)?;
        }
        Ok(())
    }

    /// The index of the record's group, a new group when its place is new.
    fn group_index(&mut self, v: &RecordView<'_>) -> usize {
        let key: Key = (v.endpoint.to_string(), v.model.to_string(), v.num_gpu, v.prompt.to_string(), v.num_predict);
        if let Some(i) = self.index.get(&key) {
            return *i;
        }
        if !self.endpoints.iter().any(|e| e == &key.0) {
            self.endpoints.push(key.0.clone());
        }
        self.accs.push(Acc::new(&key, v.seq));
        self.index.insert(key, self.accs.len() - 1);
        self.accs.len() - 1
    }

    /// Whether the record's request was cold (see the module's comment), and what it leaves loaded.
    fn is_cold(&mut self, v: &RecordView<'_>) -> bool {
        let start_no = v.server.as_ref().map(|s| s.start_no);
        let cold = match self.loaded.get(v.endpoint.as_ref()) {
            None => true,
            Some(l) => l.model != v.model || l.num_gpu != v.num_gpu || (start_no.is_some() && l.start_no != start_no),
        };
        if v.is_ok() || start_no.is_some() {
            self.loaded
                .insert(v.endpoint.to_string(), Loaded { model: v.model.to_string(), num_gpu: v.num_gpu, start_no });
        }
        cold
    }

    /// `v` with the values that cannot be measurements left out, each a problem: a time or a rate that is
    /// negative or not finite (JSON has no NaN, but 1e999 reads as infinity), a token count past what a server
    /// counts (its rates rest on it, so they go too), a num_predict below -1 (-1 is "until the model stops").
    fn sane<'a>(&mut self, mut v: RecordView<'a>) -> RecordView<'a> {
        let record = format!("record {} (seq {})", v.file, v.seq);
        let mut flag = |field: &str, value: String, rule: &str| {
            if self.problems.len() < PROBLEMS_KEPT {
                self.problems
                    .push(format!("{record}: {field} is {value}, not {rule}; the value is left out of the statistics"));
            } else {
                self.problems_more += 1;
            }
        };
        let mut time = |field: &str, x: &mut Option<f64>, rule: &str| {
            if let Some(t) = *x {
                if !t.is_finite() || t < 0.0 {
                    flag(field, t.to_string(), rule);
                    *x = None;
                }
            }
        };
        time("wall_ms", &mut v.wall_ms, "a duration (a finite number ≥ 0)");
        time("ttft_ms", &mut v.ttft_ms, "a duration (a finite number ≥ 0)");
        time("ttf_ms", &mut v.ttf_ms, "a duration (a finite number ≥ 0)");
        time("server_timings.load_ms", &mut v.server_timings.load_ms, "a duration (a finite number ≥ 0)");
        time("prompt_tps", &mut v.prompt_tps, "a rate (a finite number ≥ 0)");
        time("decode_tps", &mut v.decode_tps, "a rate (a finite number ≥ 0)");
        for (field, n) in [
            ("server_timings.prompt_n", v.server_timings.prompt_n),
            ("server_timings.decode_n", v.server_timings.decode_n),
        ] {
            if n.is_some_and(|n| n > MAX_TOKENS) {
                flag(field, n.unwrap_or_default().to_string(), "a token count (at most 2^32 - 1)");
                if field.ends_with("prompt_n") {
                    v.prompt_tps = None;
                } else {
                    v.decode_tps = None;
                }
            }
        }
        if v.num_predict < -1 {
            flag("num_predict", v.num_predict.to_string(), "a token limit (-1 or more)");
        }
        v
    }

    /// The statistics of everything folded in, and the values that were not believed.
    pub fn finish_with_problems(mut self) -> (RunStats, Vec<String>) {
        let mut problems = std::mem::take(&mut self.problems);
        if self.problems_more > 0 {
            problems.push(format!("{} more values not believed (not listed)", self.problems_more));
        }
        (self.finish(), problems)
    }

    /// The statistics of everything folded in.
    pub fn finish(self) -> RunStats {
        let groups: Vec<Group> = self.accs.into_iter().map(Acc::finish).collect();
        let distinct =
            |f: &dyn Fn(&Group) -> String| groups.iter().map(f).collect::<std::collections::BTreeSet<_>>().len() > 1;
        let varies = Varies {
            model: distinct(&|g| g.model.clone()),
            prompt: distinct(&|g| g.prompt.clone()),
            num_predict: distinct(&|g| g.num_predict.to_string()),
        };
        let ratios = ratios(&groups, &self.endpoints);
        let by_place = groups.iter().enumerate().map(|(i, g)| (place_key(g), i)).collect();
        RunStats {
            cells: self.cells,
            ok: self.ok,
            failed: self.cells - self.ok,
            endpoints: self.endpoints,
            varies,
            groups,
            ratios,
            error_classes: self.error_classes,
            prompt_count_includes_cache: self.prompt_count_includes_cache,
            by_place,
        }
    }
}

fn place_key(g: &Group) -> Key {
    (g.endpoint.clone(), g.model.clone(), g.num_gpu, g.prompt.clone(), g.num_predict)
}

fn parse_whole(json: &str) -> Result<Record> {
    serde_json::from_str(json).context("a record does not parse (written by another backscope version?)")
}

impl Acc {
    fn new(key: &Key, seq: u64) -> Acc {
        Acc {
            group: Group {
                endpoint: key.0.clone(),
                model: key.1.clone(),
                num_gpu: key.2,
                prompt: key.3.clone(),
                num_predict: key.4,
                n: 0,
                ok: 0,
                failed: BTreeMap::new(),
                outcomes: BTreeMap::new(),
                backends: Vec::new(),
                wall_ms: Timing::default(),
                load_ms: Timing::default(),
                prompt_tps: None,
                decode_tps: None,
                ttft_ms: None,
                outliers: Vec::new(),
                failure_timing: Vec::new(),
                kernels: None,
                first_seq: seq,
                first_ok: None,
                backend_record: None,
                failed_records: Vec::new(),
                ok_refs: Vec::new(),
                decode_samples: Vec::new(),
                prompt_samples: Vec::new(),
            },
            warm: Vec::new(),
            cold: Vec::new(),
            warm_load: Vec::new(),
            cold_load: Vec::new(),
            ttft: Vec::new(),
            failures: BTreeMap::new(),
            backends: BTreeMap::new(),
            launches: Vec::new(),
            families: BTreeMap::new(),
        }
    }

    /// A traced request: its launches, per family, and where its trace files are.
    fn add_trace(&mut self, t: &TraceView<'_>, address: RecordRef) {
        self.launches.push(t.total_launches as f64);
        let traced = self.launches.len();
        for (family, n) in &t.families {
            let counts = self.families.entry(family.to_string()).or_default();
            // Requests before the first one with this family had none of it.
            counts.resize(traced - 1, 0);
            counts.push(*n);
        }
        let kernels = self.group.kernels.get_or_insert_with(|| KernelStats {
            traced: 0,
            cut: 0,
            vulkan_layer: 0,
            launches: None,
            families: BTreeMap::new(),
            refs: Vec::new(),
            unobserved: 0,
            vulkan_kernels: false,
            interval_ms: 0,
            files: Vec::new(),
        });
        kernels.traced += 1;
        kernels.cut += usize::from(!t.cut.is_empty());
        kernels.vulkan_layer += usize::from(t.vulkan_layer == Some(true));
        kernels.unobserved += usize::from(t.observer_loaded == Some(false));
        kernels.vulkan_kernels |= t.kernels.iter().any(|k| k.api == trace_format::record::api::VULKAN);
        kernels.interval_ms = kernels.interval_ms.max(t.interval_ms);
        if kernels.refs.len() < REFS_KEPT {
            kernels.refs.push(address);
        }
        // The processes that launched during the request; without any, those observed at all; without a file,
        // the directory that stayed empty.
        let launched = t.processes.iter().filter(|p| p.launches > 0 || t.total_launches == 0).map(|p| &p.file);
        let mut files: Vec<&str> = launched.map(|f| f.as_ref()).collect();
        if t.processes.is_empty() && !t.dir.is_empty() {
            files.push(t.dir.as_ref());
        }
        for f in files {
            if kernels.files.len() < REFS_KEPT && !kernels.files.iter().any(|k| k == f) {
                kernels.files.push(f.to_string());
            }
        }
    }

    /// A successful request: its times and rates, cold or warm.
    fn add_ok(&mut self, v: &RecordView<'_>, json: &str, cold: bool) -> Result<()> {
        let address = RecordRef { seq: v.seq, file: v.file.to_string() };
        self.group.ok += 1;
        if self.group.first_ok.is_none() {
            self.group.first_ok = Some(Box::new(parse_whole(json)?));
        }
        if self.group.ok_refs.len() < REFS_KEPT {
            self.group.ok_refs.push(address.clone());
        }
        if let Some(w) = v.wall_ms {
            if cold { &mut self.cold } else { &mut self.warm }.push((w, address));
        }
        if let Some(l) = v.server_timings.load_ms {
            if cold { &mut self.cold_load } else { &mut self.warm_load }.push(l);
        }
        if let Some(x) = v.decode_tps {
            self.group.decode_samples.push(x);
        }
        if let Some(x) = v.prompt_tps {
            self.group.prompt_samples.push(x);
        }
        if let Some(x) = v.ttft_ms {
            self.ttft.push(x);
        }
        Ok(())
    }

    /// A failed request: counted by class and outcome, its time to failure, and the record kept whole while few.
    fn add_failed(&mut self, v: &RecordView<'_>, json: &str) -> Result<()> {
        let class = v.error_class.map_or("fail", |c| c.as_str());
        *self.group.failed.entry(class.to_string()).or_insert(0) += 1;
        let outcome = v.outcome();
        *self.group.outcomes.entry(outcome.clone()).or_insert(0) += 1;
        let f = self.failures.entry(outcome.clone()).or_insert_with(|| FailureTiming {
            outcome,
            class: class.to_string(),
            n: 0,
            timed: 0,
            ttf_ms: None,
            cv: None,
            verdict: Verdict::TooFew,
            ok_wall_cv: None,
            times_ms: Vec::new(),
            refs: Vec::new(),
        });
        f.n += 1;
        if let Some(t) = v.ttf_ms {
            f.times_ms.push(t);
        }
        if f.refs.len() < REFS_KEPT {
            f.refs.push(RecordRef { seq: v.seq, file: v.file.to_string() });
        }
        if self.group.failed_records.len() < FAILED_KEPT {
            self.group.failed_records.push(parse_whole(json)?);
        }
        Ok(())
    }

    fn finish(self) -> Group {
        let Acc { mut group, warm, cold, warm_load, cold_load, ttft, failures, backends, launches, families } = self;
        let values = |v: &[(f64, RecordRef)]| v.iter().map(|(w, _)| *w).collect::<Vec<f64>>();
        let (warm_ms, cold_ms) = (values(&warm), values(&cold));
        group.wall_ms = Timing { warm: stats::summarize(&warm_ms), cold: stats::summarize(&cold_ms) };
        group.load_ms = Timing { warm: stats::summarize(&warm_load), cold: stats::summarize(&cold_load) };
        group.prompt_tps = stats::summarize(&group.prompt_samples);
        group.decode_tps = stats::summarize(&group.decode_samples);
        group.ttft_ms = stats::summarize(&ttft);
        for (set, is_cold) in [(&warm, false), (&cold, true)] {
            let ms = values(set);
            for (i, z) in stats::outliers(&ms) {
                let (wall_ms, r) = &set[i];
                group.outliers.push(Outlier { seq: r.seq, file: r.file.clone(), wall_ms: *wall_ms, z, cold: is_cold });
            }
        }
        group.outliers.sort_by_key(|o| o.seq);
        let mut all_ok = warm_ms;
        all_ok.extend(cold_ms);
        let ok_wall_cv = stats::cv(&all_ok);
        group.failure_timing = failures
            .into_values()
            .map(|mut f| {
                f.timed = f.times_ms.len();
                f.ttf_ms = stats::summarize(&f.times_ms);
                let (verdict, cv) = stats::timing_verdict(&f.times_ms);
                f.verdict = verdict;
                f.cv = cv;
                f.ok_wall_cv = ok_wall_cv;
                f
            })
            .collect();
        let mut seen: Vec<(BackendSeen, u64)> = backends
            .into_iter()
            .map(|((backend, offloaded), (cells, first))| (BackendSeen { backend, offloaded, cells }, first))
            .collect();
        seen.sort_by_key(|(_, first)| *first);
        group.backends = seen.into_iter().map(|(b, _)| b).collect();
        if let Some(k) = group.kernels.as_mut() {
            k.launches = stats::summarize(&launches);
            for (family, mut counts) in families {
                counts.resize(k.traced, 0);
                let counts: Vec<f64> = counts.into_iter().map(|n| n as f64).collect();
                if let Some(m) = stats::median(&counts) {
                    k.families.insert(family, m);
                }
            }
        }
        group
    }
}

/// Every pair of endpoints compared at every place both ran, for both rates: the later endpoint over the
/// earlier (in the order they first ran).
/// A place of a run, borrowed: model, num_gpu, prompt, num_predict.
type Place<'a> = (&'a str, i64, &'a str, i64);

fn ratios(groups: &[Group], endpoints: &[String]) -> Vec<Ratio> {
    // Places in the order they first ran, and each (endpoint, place)'s group: maps, since a run may hold tens of
    // thousands of places.
    let mut places: Vec<Place> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let mut at: HashMap<(&str, Place), &Group> = HashMap::new();
    for g in groups {
        let p = (g.model.as_str(), g.num_gpu, g.prompt.as_str(), g.num_predict);
        if seen.insert(p) {
            places.push(p);
        }
        at.entry((g.endpoint.as_str(), p)).or_insert(g);
    }
    let find = |e: &str, p: &Place| at.get(&(e, *p)).copied();
    let mut out = Vec::new();
    for metric in [Metric::DecodeTps, Metric::PromptTps] {
        for p in &places {
            for (i, den) in endpoints.iter().enumerate() {
                for num in &endpoints[i + 1..] {
                    let (Some(a), Some(b)) = (find(num, p), find(den, p)) else { continue };
                    let (xa, xb) = (a.samples(metric), b.samples(metric));
                    let (Some(ma), Some(mb)) = (stats::median(xa), stats::median(xb)) else { continue };
                    if mb <= 0.0 {
                        continue;
                    }
                    out.push(Ratio {
                        metric,
                        model: p.0.to_string(),
                        num_gpu: p.1,
                        prompt: p.2.to_string(),
                        num_predict: p.3,
                        numerator: num.clone(),
                        denominator: den.clone(),
                        n_numerator: xa.len(),
                        n_denominator: xb.len(),
                        median_ratio: ma / mb,
                        welch: stats::welch_log_ratio(xa, xb, 0.95),
                    });
                }
            }
        }
    }
    out
}

/// Folds `records` (in plan order) into statistics; for tests and for callers that hold records already.
pub fn of_records(records: &[Record]) -> Result<RunStats> {
    let mut agg = Aggregator::new();
    for r in records {
        agg.add_json(&serde_json::to_string(r)?)?;
    }
    Ok(agg.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::format::record::{BackendFacts, RecordTrace, ServerRef};

    use crate::run_analysis::test_records::cell as rec;

    fn ok(ep: &str, ngl: i64, seq: u64, start_no: u32, wall: f64, decode: f64) -> Record {
        let mut r = rec(ep, ngl, seq);
        r.wall_ms = Some(wall);
        r.decode_tps = Some(decode);
        r.prompt_tps = Some(decode * 10.0);
        r.server = Some(ServerRef { pid: 1, port: 1, argv: vec![], log: "servers/s.log".into(), start_no });
        r
    }

    fn crash(ep: &str, ngl: i64, seq: u64, ttf: f64) -> Record {
        let mut r = rec(ep, ngl, seq);
        r.status = Status::Fail;
        r.error_class = Some(ErrorClass::Crash);
        r.signal = Some("SIGSEGV".into());
        r.ttf_ms = Some(ttf);
        r
    }

    #[test]
    fn groups_count_outcomes_and_split_cold_from_warm() {
        let mut records = vec![
            // cpu, one server for num_gpu 0: the first request is cold, the rest warm; one warm one is slow.
            ok("cpu", 0, 0, 1, 900.0, 10.0),
            ok("cpu", 0, 1, 1, 500.0, 10.5),
            ok("cpu", 0, 2, 1, 505.0, 9.5),
            ok("cpu", 0, 3, 1, 498.0, 10.0),
            ok("cpu", 0, 4, 1, 2000.0, 10.0),
            ok("cpu", 0, 5, 1, 502.0, 10.0),
            // vk at num_gpu 1 crashes three times, about 2.65 s in; its server restarts after each crash.
            crash("vk", 1, 6, 2600.0),
            crash("vk", 1, 7, 2650.0),
            crash("vk", 1, 8, 2700.0),
            // vk at num_gpu 0: a new server start (cold), then warm.
            ok("vk", 0, 9, 4, 800.0, 5.0),
            ok("vk", 0, 10, 4, 400.0, 5.0),
        ];
        records[6].error_class = Some(ErrorClass::Crash);
        records[9].backend = Some(BackendFacts { backend: "CPU".into(), ..Default::default() });
        records[10].backend = Some(BackendFacts { backend: "CPU".into(), ..Default::default() });
        let s = of_records(&records).unwrap();
        assert_eq!((s.cells, s.ok, s.failed), (11, 8, 3));
        assert_eq!(s.endpoints, ["cpu", "vk"]);
        assert_eq!(s.groups.len(), 3);
        let cpu = &s.groups[0];
        assert_eq!((cpu.n, cpu.ok), (6, 6));
        let cold = cpu.wall_ms.cold.unwrap();
        assert_eq!((cold.n, cold.median), (1, 900.0));
        let warm = cpu.wall_ms.warm.unwrap();
        // Warm: 500 505 498 2000 502 → median 502, deviations 2 3 4 1498 0 → MAD 3; M(2000) = 0.6745·1498/3.
        assert_eq!((warm.n, warm.median, warm.mad), (5, 502.0, 3.0));
        assert_eq!(cpu.outliers.len(), 1);
        assert_eq!((cpu.outliers[0].seq, cpu.outliers[0].cold), (4, false));
        assert!((cpu.outliers[0].z - 0.6745 * 1498.0 / 3.0).abs() < 1e-9);
        let vk1 = &s.groups[1];
        assert_eq!((vk1.n, vk1.ok, vk1.failed.get("crash")), (3, 0, Some(&3)));
        assert_eq!(vk1.outcomes.get("crash SIGSEGV"), Some(&3));
        let ft = &vk1.failure_timing[0];
        assert_eq!((ft.n, ft.timed, ft.verdict), (3, 3, Verdict::Deterministic));
        // mean 2650, sd 50: CV = 50/2650.
        assert!((ft.cv.unwrap() - 50.0 / 2650.0).abs() < 1e-12, "{ft:?}");
        assert_eq!(vk1.failed_records.len(), 3);
        let vk0 = &s.groups[2];
        assert_eq!((vk0.wall_ms.cold.unwrap().n, vk0.wall_ms.warm.unwrap().n), (1, 1));
        assert_eq!(vk0.backends, vec![BackendSeen { backend: "CPU".into(), offloaded: None, cells: 2 }]);
        assert_eq!(vk0.backend_record.as_ref().unwrap().seq, 9);
    }

    /// What the views print once per run: the hint of each error class that occurred, and the note on Ollama's
    /// prompt counts.
    #[test]
    fn run_level_facts_for_the_views() {
        let mut timeout = crash("x", 0, 1, 300_000.0);
        timeout.error_class = Some(ErrorClass::ReadTimeout);
        let records = [ok("x", 0, 0, 1, 100.0, 10.0), timeout, crash("x", 0, 2, 2000.0)];
        let s = of_records(&records).unwrap();
        assert_eq!(s.error_classes.iter().copied().collect::<Vec<_>>(), [ErrorClass::Crash, ErrorClass::ReadTimeout]);
        assert!(!s.prompt_count_includes_cache);
        let mut cached = ok("x", 0, 3, 1, 100.0, 10.0);
        cached.prompt_count_includes_cache = true;
        assert!(of_records(&[cached]).unwrap().prompt_count_includes_cache);
    }

    #[test]
    fn a_model_or_num_gpu_switch_makes_the_next_request_cold_without_server_identity() {
        // An external Ollama: no server record; the endpoint switches num_gpu and back.
        let plain = |ngl: i64, seq: u64, wall: f64| {
            let mut r = rec("ollama", ngl, seq);
            r.wall_ms = Some(wall);
            r
        };
        let s =
            of_records(&[plain(0, 0, 5000.0), plain(0, 1, 300.0), plain(1, 2, 6000.0), plain(0, 3, 5100.0)]).unwrap();
        let g0 = &s.groups[0];
        assert_eq!((g0.wall_ms.cold.unwrap().n, g0.wall_ms.warm.unwrap().n), (2, 1));
        assert_eq!(g0.wall_ms.cold.unwrap().median, 5050.0);
    }

    #[test]
    fn ratios_pair_endpoints_at_the_same_place() {
        let mut records = Vec::new();
        for (i, x) in [10.0, 11.0, 9.0].into_iter().enumerate() {
            records.push(ok("cpu", 0, i as u64, 1, 100.0, x));
        }
        for (i, x) in [20.0, 22.0, 18.0, 21.0].into_iter().enumerate() {
            records.push(ok("vk", 0, 10 + i as u64, 1, 100.0, x));
        }
        records.push(ok("vk", 1, 20, 2, 100.0, 30.0));
        let s = of_records(&records).unwrap();
        let decode: Vec<&Ratio> = s.ratios.iter().filter(|r| r.metric == Metric::DecodeTps).collect();
        assert_eq!(decode.len(), 1, "num_gpu=1 has no cpu cell to compare: {decode:?}");
        let r = decode[0];
        assert_eq!((r.numerator.as_str(), r.denominator.as_str(), r.n_numerator, r.n_denominator), ("vk", "cpu", 4, 3));
        assert!((r.median_ratio - 20.5 / 10.0).abs() < 1e-12);
        let w = r.welch.unwrap();
        assert!(w.low < w.ratio && w.ratio < w.high);
        assert_eq!(w, stats::welch_log_ratio(&[20.0, 22.0, 18.0, 21.0], &[10.0, 11.0, 9.0], 0.95).unwrap());
    }

    #[test]
    fn kernels_per_request_count_absent_families_as_zero() {
        let traced = |seq: u64, fams: &[(&str, u64)]| {
            let mut r = ok("cuda", -1, seq, 1, 100.0, 50.0);
            r.trace = Some(RecordTrace {
                dir: "traces".into(),
                files: vec![],
                window_ns: [0, 1],
                interval_ms: 20,
                spill_ns: [0, 0],
                observer_loaded: Some(true),
                vulkan_layer: None,
                total_launches: fams.iter().map(|(_, n)| n).sum(),
                failed_launches: 0,
                families: fams.iter().map(|(f, n)| (f.to_string(), *n)).collect(),
                kernels: vec![],
                distinct_kernels: fams.len() as u64,
                processes: vec![],
                cut: vec![],
                crashes: vec![],
                device_lost: vec![],
                hangs: vec![],
                kernel: vec![],
                notes: vec![],
            });
            r
        };
        let s = of_records(&[
            traced(0, &[("MMVQ", 800), ("MMQ", 40)]),
            traced(1, &[("MMVQ", 820)]),
            traced(2, &[("MMVQ", 810), ("MMQ", 44)]),
        ])
        .unwrap();
        let k = s.groups[0].kernels.as_ref().unwrap();
        assert_eq!((k.traced, k.cut), (3, 0));
        assert_eq!(k.families["MMVQ"], 810.0);
        assert_eq!(k.families["MMQ"], 40.0, "median of 40, 0, 44");
        assert_eq!(k.launches.unwrap().median, 840.0, "820, 840, 854");
    }
}
