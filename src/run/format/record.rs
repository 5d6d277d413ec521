//! What one sweep cell leaves behind: a [`Record`] (serde; stored as `result.json`, as a row in SQLite and as a
//! line of the JSONL export) and the classification of its outcome ([`ErrorClass`]).

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

/// Version of the record layout. Bumped when a field changes meaning; added optional fields do not bump it.
pub const RECORD_SCHEMA: u32 = 1;

/// Which HTTP API an endpoint speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Api {
    /// Ollama: `/api/generate`, `/api/ps`, `/api/version`, `/api/show`.
    Ollama,
    /// llama.cpp's llama-server: `/completion`, `/props`, `/health`, `/metrics`.
    #[serde(rename = "llama.cpp", alias = "llama_cpp", alias = "llama-server")]
    LlamaCpp,
    /// Any OpenAI-compatible server: `/v1/completions` (the fallback when `/completion` is missing).
    #[serde(rename = "openai")]
    OpenAi,
}

impl Api {
    pub fn as_str(self) -> &'static str {
        match self {
            Api::Ollama => "ollama",
            Api::LlamaCpp => "llama.cpp",
            Api::OpenAi => "openai",
        }
    }
}

impl fmt::Display for Api {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where a run's records came from: a sweep backscope ran, or llama-bench output it imported.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum RunSource {
    #[default]
    #[serde(rename = "sweep")]
    Sweep,
    #[serde(rename = "llama-bench")]
    LlamaBench,
}

impl RunSource {
    /// The stored spelling (JSON, SQLite).
    pub fn as_str(self) -> &'static str {
        match self {
            RunSource::Sweep => "sweep",
            RunSource::LlamaBench => "llama-bench",
        }
    }

    pub fn parse(s: &str) -> Option<RunSource> {
        [RunSource::Sweep, RunSource::LlamaBench].into_iter().find(|x| x.as_str() == s)
    }
}

impl fmt::Display for RunSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Ok,
    Fail,
}

/// A record is a failure until a response proves otherwise.
impl Default for Status {
    fn default() -> Self {
        Status::Fail
    }
}

/// Why a cell failed. Each class has a stable name (`as_str`, used in SQLite, JSON and the table) and a hint
/// that says what to look at.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorClass {
    /// The server (or, for Ollama, its runner) died from a signal: SIGSEGV, SIGABRT, … The record says where the
    /// signal was read (`signal_source`).
    Crash,
    /// A managed server exited with an exit code while starting or serving.
    ServerExit,
    /// The HTTP status was not 2xx and no crash could be attributed.
    HttpStatus,
    /// A 2xx response whose stream carried an `error` object.
    ServerError,
    /// Nothing listened on the port.
    ConnectionRefused,
    /// The connection was reset or aborted.
    ConnectionReset,
    /// The connection closed before a complete response (no final chunk, short body).
    Eof,
    /// Connecting took longer than the connect timeout.
    ConnectTimeout,
    /// No byte arrived for longer than the read timeout (a hung request).
    ReadTimeout,
    /// The whole request took longer than the request timeout.
    TotalTimeout,
    /// The peer did not speak HTTP/1.1.
    Protocol,
    /// HTTP was fine but the body is not what the API returns (invalid JSON, no final chunk fields).
    InvalidResponse,
    /// The body exceeded the size cap.
    Oversize,
    /// A managed server did not answer its readiness check in time.
    NotReady,
    /// The port a managed server was to listen on was taken.
    PortInUse,
    /// The server program could not be started at all.
    SpawnFailed,
}

impl ErrorClass {
    #[cfg(test)]
    pub const ALL: [ErrorClass; 16] = [
        ErrorClass::Crash,
        ErrorClass::ServerExit,
        ErrorClass::HttpStatus,
        ErrorClass::ServerError,
        ErrorClass::ConnectionRefused,
        ErrorClass::ConnectionReset,
        ErrorClass::Eof,
        ErrorClass::ConnectTimeout,
        ErrorClass::ReadTimeout,
        ErrorClass::TotalTimeout,
        ErrorClass::Protocol,
        ErrorClass::InvalidResponse,
        ErrorClass::Oversize,
        ErrorClass::NotReady,
        ErrorClass::PortInUse,
        ErrorClass::SpawnFailed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ErrorClass::Crash => "crash",
            ErrorClass::ServerExit => "server_exit",
            ErrorClass::HttpStatus => "http_status",
            ErrorClass::ServerError => "server_error",
            ErrorClass::ConnectionRefused => "connection_refused",
            ErrorClass::ConnectionReset => "connection_reset",
            ErrorClass::Eof => "eof",
            ErrorClass::ConnectTimeout => "connect_timeout",
            ErrorClass::ReadTimeout => "read_timeout",
            ErrorClass::TotalTimeout => "total_timeout",
            ErrorClass::Protocol => "protocol",
            ErrorClass::InvalidResponse => "invalid_response",
            ErrorClass::Oversize => "oversize",
            ErrorClass::NotReady => "not_ready",
            ErrorClass::PortInUse => "port_in_use",
            ErrorClass::SpawnFailed => "spawn_failed",
        }
    }

    /// What to look at next; printed under the table for every class that occurred.
    pub fn hint(self) -> &'static str {
        match self {
            ErrorClass::Crash => "the server log slice of the cell shows the last lines before the signal",
            ErrorClass::ServerExit => "the server log says why it exited (model path, flags, out of memory)",
            ErrorClass::HttpStatus => "the error body is in the record's `error` field",
            ErrorClass::ServerError => "the server reported an error inside a 200 stream; see `error`",
            ErrorClass::ConnectionRefused => "is the server running on that port? (`--endpoint NAME=URL`)",
            ErrorClass::ConnectionReset => "the server dropped the connection; check its log or service journal",
            ErrorClass::Eof => {
                "the server closed the connection mid-response; a crash of an external server looks like this"
            }
            ErrorClass::ConnectTimeout => {
                "the port accepted nothing in time; raise --connect-timeout or check a firewall"
            }
            ErrorClass::ReadTimeout => {
                "the server went silent; raise --read-timeout for slow backends (model load counts)"
            }
            ErrorClass::TotalTimeout => "raise --request-timeout or lower --num-predict",
            ErrorClass::Protocol => "something other than an HTTP server answers on that port",
            ErrorClass::InvalidResponse => {
                "the endpoint is not the API backscope expected; set `api` for it in the spec"
            }
            ErrorClass::Oversize => "the response exceeded the body cap; something other than a generation answered",
            ErrorClass::NotReady => "raise --ready-timeout (large models load slowly) or read the server log",
            ErrorClass::PortInUse => "another process holds the port; drop the fixed `port` or stop that process",
            ErrorClass::SpawnFailed => {
                "the server program was not found or not executable; check --llama-bin/--program"
            }
        }
    }
}

impl fmt::Display for ErrorClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Whether a cell failed while its server was starting or while the request ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    Start,
    Request,
}

/// Durations and counts as the server reported them, normalised to milliseconds. Ollama reports integer
/// nanoseconds; llama.cpp reports milliseconds in `timings`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ServerTimings {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub load_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_ms: Option<f64>,
    /// Prompt tokens as reported. For Ollama (`prompt_eval_count`) this includes tokens served from the prompt
    /// cache, while `prompt_ms` covers only the new ones (see [`Record::prompt_count_includes_cache`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_n: Option<u64>,
    /// Prompt tokens served from the cache (llama.cpp `timings.cache_n`); Ollama does not report it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_n: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decode_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decode_n: Option<u64>,
    /// Why generation stopped (`done_reason`, `stop_type`, `finish_reason`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<String>,
}

/// One line of a server log that backs a claim: the file (relative to the run directory; absolute for the `log_file`
/// of an external endpoint) and the 1-based line.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogRef {
    pub file: String,
    pub line: u64,
    pub text: String,
}

/// What the server log says about the backend that served a cell.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackendFacts {
    /// `CPU`, or the device that holds offloaded layers, e.g. `Vulkan0 (llvmpipe (LLVM 15.0.6, 256 bits))`.
    pub backend: String,
    /// `using device …` lines: devices the model was placed on.
    pub devices: Vec<String>,
    /// `offloaded N/M layers to GPU`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offloaded: Option<(u32, u32)>,
    /// `load_backend: loaded X backend from …` lines: backend libraries the runtime loaded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub loaded_backends: Vec<String>,
    /// The log lines behind the above.
    pub evidence: Vec<LogRef>,
}

/// The managed server process that served a cell.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerRef {
    pub pid: u32,
    pub port: u16,
    /// argv as started (no shell).
    pub argv: Vec<String>,
    /// Its full log, relative to the run directory.
    pub log: String,
    /// Which start of this endpoint in the run (1 = first); a higher number after a crash means a restart.
    pub start_no: u32,
}

/// One cell: one request (or one failed attempt to start the server for it).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Record {
    pub schema: u32,
    pub run_id: String,
    /// Stable key of the cell within its run: endpoint|model|num_gpu|prompt|num_predict|epoch|repetition.
    pub cell_key: String,
    /// Position in the run's plan (0-based).
    pub seq: u64,
    /// `sweep`, or `llama-bench` for imported results.
    pub source: RunSource,
    /// This record's `result.json`, relative to the run directory: with `run_id` it addresses the record.
    pub file: String,
    pub endpoint: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api: Option<Api>,
    pub managed: bool,
    pub model: String,
    /// Layers offloaded to the GPU as requested (-1 = the runtime decides); not a GPU count.
    pub num_gpu: i64,
    pub prompt: String,
    pub num_predict: i64,
    pub epoch: u32,
    pub repetition: u32,
    pub stream: bool,
    /// UTC, RFC 3339.
    pub started_at: String,
    pub status: Status,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_class: Option<ErrorClass>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http_status: Option<u16>,
    /// `SIGSEGV`, `SIGABRT`, … when a crash was seen.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signal: Option<String>,
    /// Where the signal was read: `wait status` (backscope reaped the process), `error body` (Ollama's 500
    /// message), or `server log`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signal_source: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// Client-side time from sending the request to the last byte, milliseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wall_ms: Option<f64>,
    /// Client-side time to the first generated token (streaming only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttft_ms: Option<f64>,
    /// Time to failure: from the request (phase `request`) or the server spawn (phase `start`) to the failure.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttf_ms: Option<f64>,
    pub server_timings: ServerTimings,
    /// True for Ollama: its prompt token count includes cached prompt tokens while its prompt duration covers
    /// only the evaluated ones, so prompt tokens/s is overstated when the prompt cache hit.
    pub prompt_count_includes_cache: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_tps: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decode_tps: Option<f64>,
    /// Characters of generated text (response plus thinking, if the model thinks).
    pub response_chars: u64,
    /// HTTP body bytes received.
    pub body_bytes: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backend: Option<BackendFacts>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server: Option<ServerRef>,
    /// The server log written while this cell ran, relative to the run directory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_slice: Option<String>,
    /// The server log line that names the failure: a crash, a model load error, a port bind error.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure_line: Option<LogRef>,
    /// Extra facts: Ollama `/api/ps` entry (size, size_vram), llama.cpp `/metrics` counters, llama-bench fields.
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub extra: serde_json::Map<String, serde_json::Value>,
    /// With `--trace`: the GPU kernels launched while this request ran (see [`RecordTrace`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<RecordTrace>,
}

/// One kernel as observed during a request, merged across the server's processes: the same row as
/// `backscope trace`'s summary (its `shapes` left out).
pub type TraceKernel = crate::observe::trace_summary::kernels::ObservedKernel;

/// A fatal signal the observer recorded during a request, with the last kernels before it.
pub type TraceCrash = crate::observe::trace_summary::crashes::CrashSummary;

/// A Vulkan call that returned `VK_ERROR_DEVICE_LOST` during a request (the Vulkan layer's record), with each
/// queue's last dispatches before it.
pub type TraceDeviceLost = crate::observe::trace_summary::crashes::DeviceLostSummary;

/// The Vulkan layer's hang watcher saw pending GPU work make no progress during a request, with what was in flight.
pub type TraceHang = crate::observe::trace_summary::crashes::HangSummary;

/// One process of the server as seen by the observer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceProcess {
    pub pid: u32,
    pub ppid: u32,
    pub exe: String,
    /// Its trace file (relative to the run directory for managed servers; absolute for external ones).
    pub file: String,
    /// Launches during the request's window.
    pub launches: u64,
}

/// The join of a request's time window to the dispatch observer's trace windows.
///
/// `window_ns` is the request in CLOCK_MONOTONIC ns: `[t0, t1]` = just before sending, after the response
/// completed. Every observer window overlapping it is counted. A window that began before `t0` (or ended after `t1`)
/// may hold launches from just outside the request; `spill_ns` says by how much the counted windows reach beyond
/// it, and `interval_ms` bounds that: the join is exact to one window length.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordTrace {
    /// The trace directory (relative to the run directory for managed servers; absolute for external ones).
    pub dir: String,
    /// Every trace file in it at the time of the join.
    pub files: Vec<String>,
    pub window_ns: [u64; 2],
    /// The observer's window length (ms): the precision of the join.
    pub interval_ms: u64,
    /// How far the counted windows with launches reach before `t0` and after `t1` (ns).
    pub spill_ns: [u64; 2],
    /// Whether the observer library was mapped into the managed server (read from /proc/PID/maps once it was
    /// ready); absent for external endpoints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observer_loaded: Option<bool>,
    /// Whether the managed server ran with the Vulkan layer enabled (its environment), so that Vulkan dispatches
    /// count as launches; absent for external endpoints and before the layer existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vulkan_layer: Option<bool>,
    pub total_launches: u64,
    pub failed_launches: u64,
    /// Launches per family, over all kernels (not just the listed top ones).
    pub families: BTreeMap<String, u64>,
    /// The most launched kernels, most first (at most [`TRACE_TOP_KERNELS`]).
    pub kernels: Vec<TraceKernel>,
    /// Distinct kernels launched (also those beyond the top list).
    pub distinct_kernels: u64,
    pub processes: Vec<TraceProcess>,
    /// Trace files the observer stopped writing (a `truncated` record, docs/trace-format.md) before the request
    /// ended: the launches they count for it are lower bounds, and a kernel they do not show may still have run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cut: Vec<String>,
    /// Fatal signals (`crash` records) that arrived during the request, with the last kernels before each.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub crashes: Vec<TraceCrash>,
    /// `VK_ERROR_DEVICE_LOST` returns (the Vulkan layer's `device_lost` records) during the request.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub device_lost: Vec<TraceDeviceLost>,
    /// The Vulkan layer's `hang_ms` records during the request.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hangs: Vec<TraceHang>,
    /// The kernel's GPU-driver lines read since the previous request ended (the run directory's `kernel-log.jsonl`,
    /// whose lines they cite): a ring timeout, the process it names, a reset, an Xid.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kernel: Vec<crate::observe::kernel_log::record::KernelLine>,
    /// Problems: unreadable trace files, the wait for the observer's flush that ran out, processes that ended
    /// without the exit flush.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// Kernels listed per record.
pub const TRACE_TOP_KERNELS: usize = 20;

impl Record {
    pub fn is_ok(&self) -> bool {
        self.status == Status::Ok
    }

    /// Short outcome for tables and progress: `ok`, `crash SIGSEGV`, `http_status 500`, …
    pub fn outcome(&self) -> String {
        outcome(self.status, self.error_class, self.signal.as_deref(), self.exit_code, self.http_status)
    }
}

/// Tokens per second from a count and milliseconds; none when either is missing or the time is zero.
pub fn tokens_per_second(n: Option<u64>, ms: Option<f64>) -> Option<f64> {
    match (n, ms) {
        (Some(n), Some(ms)) if ms > 0.0 && n > 0 => Some(n as f64 * 1000.0 / ms),
        _ => None,
    }
}

/// A record's short outcome from its fields (see [`Record::outcome`]); readers that borrow a record's fields
/// rather than parse it whole (the report's aggregation) name outcomes the same way through this.
pub fn outcome(
    status: Status,
    error_class: Option<ErrorClass>,
    signal: Option<&str>,
    exit_code: Option<i32>,
    http_status: Option<u16>,
) -> String {
    match (status, error_class) {
        (Status::Ok, _) => "ok".into(),
        (Status::Fail, Some(ErrorClass::Crash)) => format!("crash {}", signal.unwrap_or("(signal unknown)")),
        (Status::Fail, Some(ErrorClass::ServerExit)) => {
            format!("server_exit {}", exit_code.map(|c| c.to_string()).unwrap_or_default())
        }
        (Status::Fail, Some(ErrorClass::HttpStatus)) => {
            format!("http_status {}", http_status.map(|c| c.to_string()).unwrap_or_default())
        }
        (Status::Fail, Some(c)) => c.as_str().to_string(),
        (Status::Fail, None) => "fail".into(),
    }
}

/// Every stored record text `for_each` hands over, parsed, in its order (both stores' `records`).
pub(crate) fn parse_records(
    for_each: impl FnOnce(&mut dyn FnMut(&str) -> anyhow::Result<()>) -> anyhow::Result<u64>,
) -> anyhow::Result<Vec<Record>> {
    use anyhow::Context;
    let mut out = Vec::new();
    for_each(&mut |json| {
        out.push(
            serde_json::from_str(json)
                .context("the stored record does not parse (written by another backscope version?)")?,
        );
        Ok(())
    })?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_classes_round_trip_through_their_names() {
        let mut names = std::collections::BTreeSet::new();
        for c in ErrorClass::ALL {
            let json = serde_json::to_string(&c).unwrap();
            assert_eq!(json, format!("\"{}\"", c.as_str()));
            assert_eq!(serde_json::from_str::<ErrorClass>(&json).unwrap(), c);
            assert!(names.insert(c.as_str()), "{c} named twice");
            assert!(!c.hint().is_empty());
        }
        assert!(serde_json::from_str::<ErrorClass>("\"nonsense\"").is_err());
    }

    #[test]
    fn api_names_accept_the_spellings_people_use() {
        for s in ["\"llama.cpp\"", "\"llama_cpp\"", "\"llama-server\""] {
            assert_eq!(serde_json::from_str::<Api>(s).unwrap(), Api::LlamaCpp);
        }
        assert_eq!(serde_json::to_string(&Api::OpenAi).unwrap(), "\"openai\"");
    }

    #[test]
    fn tokens_per_second_guards_zero_and_missing() {
        assert_eq!(tokens_per_second(Some(259), Some(4232.71)).map(|v| (v * 100.0).round() / 100.0), Some(61.19));
        assert_eq!(tokens_per_second(Some(10), Some(0.0)), None);
        assert_eq!(tokens_per_second(None, Some(1.0)), None);
        assert_eq!(tokens_per_second(Some(0), Some(1.0)), None);
    }
}
