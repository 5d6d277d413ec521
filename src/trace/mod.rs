//! Reader for the dispatch observer's trace files (`backscope-trace` versions 1 and 2, JSON Lines;
//! the format is specified in `docs/trace-format.md`).
//!
//! [`TraceFile::parse`] turns one file into typed records. It tolerates what a killed process
//! leaves behind: a last line cut short (no trailing newline) is dropped and flagged in
//! [`TraceFile::partial_last_line`], and a missing end record leaves [`TraceFile::end`] empty. A
//! trace the observer stopped writing (byte budget spent, write error) ends with a `truncated`
//! record ([`TraceFile::truncated`]): its counts are lower bounds. Anything else malformed is a
//! [`TraceError`] naming the file and line; [`read_dir`] reports such files and keeps the others.
//!
//! [`TraceFile::kernel_stats`] aggregates per kernel (launches, errors, graph replays, captures and
//! the grid/block histogram) over all windows or a time range; [`TraceFile::stats_by_name`] merges
//! kernels that share a name (one name can be registered by several libraries).
//!
//! Only `serde`, `serde_json`, `anyhow` and `std` are used, so that the observer crate's tests can
//! include this file as well.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

/// Value of the header's `format` field.
pub const FORMAT: &str = "backscope-trace";
/// The newest format version this reader understands. Version 2 added the `truncated` record,
/// `max_bytes` in the header and `expired_captures` in windows; version 1 files read the same way
/// (they have none of these).
pub const VERSION: u32 = 2;
/// The oldest version this reader understands.
pub const MIN_VERSION: u32 = 1;

/// A trace file that could not be read: which file, which line (1-based) if one, and what was
/// wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceError {
    pub path: Option<PathBuf>,
    pub line: Option<usize>,
    pub message: String,
}

impl TraceError {
    fn at(line: usize, message: impl Into<String>) -> TraceError {
        TraceError { path: None, line: Some(line), message: message.into() }
    }

    fn whole(message: impl Into<String>) -> TraceError {
        TraceError { path: None, line: None, message: message.into() }
    }
}

impl std::fmt::Display for TraceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(path) = &self.path {
            write!(f, "{}", path.display())?;
            if let Some(line) = self.line {
                write!(f, ":{line}")?;
            }
            write!(f, ": ")?;
        } else if let Some(line) = self.line {
            write!(f, "line {line}: ")?;
        }
        f.write_str(&self.message)
    }
}

impl std::error::Error for TraceError {}

/// First line of a trace file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Header {
    pub format: String,
    pub version: u32,
    pub pid: u32,
    pub ppid: u32,
    pub exe: String,
    #[serde(default)]
    pub cmdline: Vec<String>,
    /// Always `"monotonic"`: CLOCK_MONOTONIC nanoseconds.
    pub clock: String,
    pub start_ns: u64,
    #[serde(default)]
    pub interval_ms: u64,
    #[serde(default)]
    pub shape_buckets: u32,
    #[serde(default)]
    pub max_kernels: u32,
    /// The byte budget of the file (`BACKSCOPE_TRACE_MAX_BYTES`); 0: none, or a version 1 file.
    #[serde(default)]
    pub max_bytes: u64,
    #[serde(default)]
    pub observer: String,
}

/// A kernel definition line: `{"kernel":ID,"name":…,"api":…,"source":…}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelDef {
    #[serde(rename = "kernel")]
    pub id: u32,
    /// The name as the runtime knows it (mangled for C++ kernels).
    pub name: String,
    /// `cuda`, `cu`, `hip`, `hip_module` or `overflow`.
    pub api: String,
    /// `register`, `get_function`, `runtime`, `synthetic` or `none`.
    #[serde(default)]
    pub source: String,
}

/// Grid and block dimensions of a launch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Shape {
    pub grid: [u32; 3],
    pub block: [u32; 3],
}

/// Launches of one kernel with one shape in one window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShapeCount {
    pub kernel: u32,
    pub shape: Shape,
    pub launches: u64,
}

/// A window line: what happened in `[t0, t1]` (CLOCK_MONOTONIC ns). Per-kernel lists hold only
/// kernels with a non-zero value.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Window {
    pub t0: u64,
    pub t1: u64,
    /// Executions per kernel: direct launches plus graph replays.
    pub counts: Vec<(u32, u64)>,
    /// Of `counts`, launches whose launch call returned an error.
    pub errors: Vec<(u32, u64)>,
    /// Of `counts`, executions that came from graph replays.
    pub graph: Vec<(u32, u64)>,
    /// Launches recorded into a stream capture (not executions).
    pub captured: Vec<(u32, u64)>,
    pub shapes: Vec<ShapeCount>,
    /// Executions whose shape was not among the kernel's first distinct shapes.
    pub other_shapes: Vec<(u32, u64)>,
    pub graph_launches: u64,
    pub unknown_graph_launches: u64,
    pub unattributed_captures: u64,
    /// Capture records dropped because the capture ended where no hook saw it.
    pub expired_captures: u64,
}

/// A warning line: `{"warning":CODE,"detail":…}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Warning {
    #[serde(rename = "warning")]
    pub code: String,
    #[serde(default)]
    pub detail: String,
}

/// The last line of a complete trace.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct End {
    pub end_ns: u64,
    pub reason: String,
}

/// The last line of a trace the observer stopped writing before the process ended:
/// `{"truncated":"budget"|"write_error","at_ns":…,"bytes":…,…}`. Launches after `at_ns` (and those
/// of the window being written then) are not in the file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Truncated {
    /// `budget` (the file reached `max_bytes`) or `write_error`.
    #[serde(rename = "truncated")]
    pub reason: String,
    pub at_ns: u64,
    /// Size of the file before this record.
    pub bytes: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_bytes: Option<u64>,
    /// For `write_error`: the system's message (`No space left on device (os error 28)`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Truncated {
    /// Why the trace stops, for people: "its budget of 65536 bytes was spent", "writing failed
    /// (No space left on device (os error 28))".
    pub fn why(&self) -> String {
        match (self.reason.as_str(), self.max_bytes, &self.error) {
            ("budget", Some(max), _) => format!("its budget of {max} bytes (BACKSCOPE_TRACE_MAX_BYTES) was spent"),
            ("write_error", _, Some(error)) => format!("writing failed ({error})"),
            (reason, _, _) => format!("the observer stopped writing ({reason})"),
        }
    }
}

/// One parsed trace file (one process).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceFile {
    pub path: Option<PathBuf>,
    pub header: Header,
    /// Kernel definitions by id.
    pub kernels: BTreeMap<u32, KernelDef>,
    pub windows: Vec<Window>,
    pub warnings: Vec<Warning>,
    /// `None` when the process ended without the exit flush (killed, `_exit`, still running), or
    /// when the trace was cut.
    pub end: Option<End>,
    /// The observer stopped writing this trace early (budget or write error): counts are lower
    /// bounds.
    pub truncated: Option<Truncated>,
    /// The last line was cut short (no newline: the process died mid-write) and was dropped.
    pub partial_last_line: bool,
    /// Lines of a kind this reader does not know (written by a newer observer), skipped.
    pub unknown_lines: usize,
}

/// Which windows an aggregation includes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Range {
    All,
    /// Windows lying entirely inside `[t0, t1]`.
    Within(u64, u64),
    /// Windows that overlap `[t0, t1]` at all.
    Overlapping(u64, u64),
}

impl Range {
    pub fn includes(&self, window: &Window) -> bool {
        match *self {
            Range::All => true,
            Range::Within(t0, t1) => window.t0 >= t0 && window.t1 <= t1,
            Range::Overlapping(t0, t1) => window.t0 <= t1 && window.t1 >= t0,
        }
    }
}

/// Totals of one kernel over a set of windows.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KernelStats {
    /// Kernel ids merged into this entry (one, unless merged by name).
    pub ids: Vec<u32>,
    pub name: String,
    pub api: String,
    pub launches: u64,
    pub errors: u64,
    pub graph: u64,
    pub captured: u64,
    /// Launch count per shape, most frequent first.
    pub shapes: Vec<(Shape, u64)>,
    pub other_shapes: u64,
}

// Raw window line as written; the tuples are the compact arrays of the format.
#[derive(Deserialize)]
struct RawWindow {
    window: (u64, u64),
    #[serde(default)]
    counts: Vec<(u32, u64)>,
    #[serde(default)]
    errors: Vec<(u32, u64)>,
    #[serde(default)]
    graph: Vec<(u32, u64)>,
    #[serde(default)]
    captured: Vec<(u32, u64)>,
    #[serde(default)]
    shapes: Vec<(u32, [u32; 3], [u32; 3], u64)>,
    #[serde(default)]
    other_shapes: Vec<(u32, u64)>,
    #[serde(default)]
    graph_launches: u64,
    #[serde(default)]
    unknown_graph_launches: u64,
    #[serde(default)]
    unattributed_captures: u64,
    #[serde(default)]
    expired_captures: u64,
}

impl From<RawWindow> for Window {
    fn from(raw: RawWindow) -> Window {
        Window {
            t0: raw.window.0,
            t1: raw.window.1,
            counts: raw.counts,
            errors: raw.errors,
            graph: raw.graph,
            captured: raw.captured,
            shapes: raw
                .shapes
                .into_iter()
                .map(|(kernel, grid, block, launches)| ShapeCount { kernel, shape: Shape { grid, block }, launches })
                .collect(),
            other_shapes: raw.other_shapes,
            graph_launches: raw.graph_launches,
            unknown_graph_launches: raw.unknown_graph_launches,
            unattributed_captures: raw.unattributed_captures,
            expired_captures: raw.expired_captures,
        }
    }
}

enum Line {
    Header(Header),
    Kernel(KernelDef),
    Window(Window),
    Warning(Warning),
    End(End),
    Truncated(Truncated),
    Unknown,
}

fn parse_line(line: &str) -> std::result::Result<Line, String> {
    let value: serde_json::Value = serde_json::from_str(line).map_err(|e| format!("not JSON: {e}"))?;
    let object = value.as_object().ok_or("not a JSON object")?;
    let kind = ["format", "kernel", "window", "warning", "end_ns", "truncated"]
        .into_iter()
        .find(|k| object.contains_key(*k))
        .unwrap_or("unknown");
    let record = |e: serde_json::Error| match kind {
        "format" => format!("header: {e}"),
        "end_ns" => format!("end record: {e}"),
        kind => format!("{kind} record: {e}"),
    };
    let line = if object.contains_key("format") {
        Line::Header(serde_json::from_value(value).map_err(record)?)
    } else if object.contains_key("kernel") {
        Line::Kernel(serde_json::from_value(value).map_err(record)?)
    } else if object.contains_key("window") {
        Line::Window(serde_json::from_value::<RawWindow>(value).map_err(record)?.into())
    } else if object.contains_key("warning") {
        Line::Warning(serde_json::from_value(value).map_err(record)?)
    } else if object.contains_key("end_ns") {
        Line::End(serde_json::from_value(value).map_err(record)?)
    } else if object.contains_key("truncated") {
        Line::Truncated(serde_json::from_value(value).map_err(record)?)
    } else {
        Line::Unknown
    };
    Ok(line)
}

impl TraceFile {
    /// Parses the text of one trace file.
    pub fn parse(text: &str) -> std::result::Result<TraceFile, TraceError> {
        let complete_last_line = text.ends_with('\n');
        let lines: Vec<&str> = text.lines().collect();
        let mut header: Option<Header> = None;
        let mut trace = TraceFile {
            path: None,
            header: Header {
                format: String::new(),
                version: 0,
                pid: 0,
                ppid: 0,
                exe: String::new(),
                cmdline: Vec::new(),
                clock: String::new(),
                start_ns: 0,
                interval_ms: 0,
                shape_buckets: 0,
                max_kernels: 0,
                max_bytes: 0,
                observer: String::new(),
            },
            kernels: BTreeMap::new(),
            windows: Vec::new(),
            warnings: Vec::new(),
            end: None,
            truncated: None,
            partial_last_line: false,
            unknown_lines: 0,
        };
        for (index, line) in lines.iter().enumerate() {
            let number = index + 1;
            if line.trim().is_empty() {
                continue;
            }
            let parsed = match parse_line(line) {
                Ok(parsed) => parsed,
                // A process killed mid-write leaves a partial last line without its newline.
                Err(_) if number == lines.len() && !complete_last_line => {
                    trace.partial_last_line = true;
                    break;
                }
                Err(e) => return Err(TraceError::at(number, e)),
            };
            if !matches!(parsed, Line::Unknown) {
                if trace.end.is_some() {
                    return Err(TraceError::at(number, "record after the end record"));
                }
                if trace.truncated.is_some() {
                    return Err(TraceError::at(number, "record after the truncated record"));
                }
            }
            match parsed {
                Line::Header(h) => {
                    if header.is_some() {
                        return Err(TraceError::at(
                            number,
                            "second header (two processes wrote to one file: an observer older than trace format 2 with BACKSCOPE_TRACE_FILE without %p)",
                        ));
                    }
                    if h.format != FORMAT {
                        return Err(TraceError::at(number, format!("format is {:?}, expected {FORMAT:?}", h.format)));
                    }
                    if !(MIN_VERSION..=VERSION).contains(&h.version) {
                        return Err(TraceError::at(
                            number,
                            format!(
                                "trace format version {} is not supported (this reader knows {MIN_VERSION} to {VERSION})",
                                h.version
                            ),
                        ));
                    }
                    header = Some(h);
                }
                _ if header.is_none() => return Err(TraceError::at(number, "the first record must be the header")),
                Line::Kernel(def) => {
                    if let Some(previous) = trace.kernels.get(&def.id) {
                        if previous != &def {
                            return Err(TraceError::at(
                                number,
                                format!("kernel {} defined twice, differently", def.id),
                            ));
                        }
                    }
                    trace.kernels.insert(def.id, def);
                }
                Line::Window(window) => {
                    if window.t1 < window.t0 {
                        return Err(TraceError::at(number, "window ends before it starts"));
                    }
                    let ids = window
                        .counts
                        .iter()
                        .chain(&window.errors)
                        .chain(&window.graph)
                        .chain(&window.captured)
                        .chain(&window.other_shapes)
                        .map(|&(id, _)| id)
                        .chain(window.shapes.iter().map(|s| s.kernel));
                    for id in ids {
                        if !trace.kernels.contains_key(&id) {
                            return Err(TraceError::at(number, format!("kernel {id} is used before its definition")));
                        }
                    }
                    trace.windows.push(window);
                }
                Line::Warning(warning) => trace.warnings.push(warning),
                Line::End(end) => trace.end = Some(end),
                Line::Truncated(truncated) => trace.truncated = Some(truncated),
                Line::Unknown => trace.unknown_lines += 1,
            }
        }
        trace.header = header.ok_or_else(|| TraceError::whole("empty trace: no header"))?;
        Ok(trace)
    }

    /// Reads and parses one trace file.
    pub fn read(path: &Path) -> std::result::Result<TraceFile, TraceError> {
        let with_path = |mut e: TraceError| {
            e.path = Some(path.to_path_buf());
            e
        };
        let bytes = std::fs::read(path).map_err(|e| with_path(TraceError::whole(format!("cannot read: {e}"))))?;
        let text = String::from_utf8_lossy(&bytes);
        let mut trace = TraceFile::parse(&text).map_err(with_path)?;
        trace.path = Some(path.to_path_buf());
        Ok(trace)
    }

    pub fn pid(&self) -> u32 {
        self.header.pid
    }

    /// Whether the process reached its exit flush.
    pub fn is_complete(&self) -> bool {
        self.end.is_some()
    }

    /// Whether the observer stopped writing early (budget or write error): the counts of this
    /// trace are lower bounds.
    pub fn is_cut(&self) -> bool {
        self.truncated.is_some()
    }

    /// Whether nothing more will be appended: the end record or a `truncated` record is there.
    pub fn is_finished(&self) -> bool {
        self.end.is_some() || self.truncated.is_some()
    }

    /// The windows that `range` selects.
    pub fn windows_in(&self, range: Range) -> impl Iterator<Item = &Window> {
        self.windows.iter().filter(move |w| range.includes(w))
    }

    /// Per-kernel totals over the selected windows, for every defined kernel (also those with no
    /// launch in the range), ordered by id.
    pub fn kernel_stats(&self, range: Range) -> Vec<KernelStats> {
        let mut stats: BTreeMap<u32, KernelStats> = self
            .kernels
            .values()
            .map(|k| {
                let entry =
                    KernelStats { ids: vec![k.id], name: k.name.clone(), api: k.api.clone(), ..Default::default() };
                (k.id, entry)
            })
            .collect();
        let mut shapes: HashMap<u32, HashMap<Shape, u64>> = HashMap::new();
        for window in self.windows_in(range) {
            let mut add = |list: &[(u32, u64)], field: fn(&mut KernelStats) -> &mut u64| {
                for &(id, n) in list {
                    if let Some(s) = stats.get_mut(&id) {
                        *field(s) += n;
                    }
                }
            };
            add(&window.counts, |s| &mut s.launches);
            add(&window.errors, |s| &mut s.errors);
            add(&window.graph, |s| &mut s.graph);
            add(&window.captured, |s| &mut s.captured);
            add(&window.other_shapes, |s| &mut s.other_shapes);
            for s in &window.shapes {
                *shapes.entry(s.kernel).or_default().entry(s.shape).or_insert(0) += s.launches;
            }
        }
        for (id, per_shape) in shapes {
            if let Some(s) = stats.get_mut(&id) {
                s.shapes = sorted_shapes(per_shape);
            }
        }
        stats.into_values().collect()
    }

    /// Like [`TraceFile::kernel_stats`], merged by (api, name).
    pub fn stats_by_name(&self, range: Range) -> BTreeMap<(String, String), KernelStats> {
        merge_by_name(self.kernel_stats(range))
    }

    /// Executions of all kernels in the selected windows.
    pub fn total_launches(&self, range: Range) -> u64 {
        self.windows_in(range).flat_map(|w| &w.counts).map(|&(_, n)| n).sum()
    }

    /// Graph launches (`…GraphLaunch` calls) in the selected windows.
    pub fn graph_launches(&self, range: Range) -> u64 {
        self.windows_in(range).map(|w| w.graph_launches).sum()
    }
}

fn sorted_shapes(per_shape: HashMap<Shape, u64>) -> Vec<(Shape, u64)> {
    let mut shapes: Vec<(Shape, u64)> = per_shape.into_iter().collect();
    shapes.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    shapes
}

/// Merges per-kernel stats that share (api, name); also used across several trace files.
pub fn merge_by_name(stats: impl IntoIterator<Item = KernelStats>) -> BTreeMap<(String, String), KernelStats> {
    let mut merged: BTreeMap<(String, String), KernelStats> = BTreeMap::new();
    let mut shapes: HashMap<(String, String), HashMap<Shape, u64>> = HashMap::new();
    for s in stats {
        let key = (s.api.clone(), s.name.clone());
        let per_shape = shapes.entry(key.clone()).or_default();
        for &(shape, n) in &s.shapes {
            *per_shape.entry(shape).or_insert(0) += n;
        }
        let entry = merged.entry(key).or_insert_with(|| KernelStats {
            name: s.name.clone(),
            api: s.api.clone(),
            ..Default::default()
        });
        entry.ids.extend(&s.ids);
        entry.launches += s.launches;
        entry.errors += s.errors;
        entry.graph += s.graph;
        entry.captured += s.captured;
        entry.other_shapes += s.other_shapes;
    }
    for (key, per_shape) in shapes {
        if let Some(entry) = merged.get_mut(&key) {
            entry.shapes = sorted_shapes(per_shape);
        }
    }
    merged
}

/// The traces of one directory: those that could be read, ordered by pid and path, and the files
/// that could not.
#[derive(Clone, Debug, Default)]
pub struct DirTraces {
    pub traces: Vec<TraceFile>,
    pub problems: Vec<TraceError>,
}

/// Whether `name` is a trace file name: `trace-*.jsonl`.
pub fn is_trace_file_name(name: &str) -> bool {
    name.starts_with("trace-") && name.ends_with(".jsonl")
}

/// Reads every `trace-*.jsonl` file of a directory. A file that cannot be read or parsed is
/// reported in [`DirTraces::problems`] and the others are kept; only a directory that cannot be
/// listed is an error.
pub fn read_dir(dir: &Path) -> Result<DirTraces> {
    let mut out = DirTraces::default();
    let mut paths = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))? {
        let path = entry.with_context(|| format!("listing {}", dir.display()))?.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        if is_trace_file_name(name) {
            paths.push(path);
        }
    }
    paths.sort();
    for path in paths {
        match TraceFile::read(&path) {
            Ok(trace) => out.traces.push(trace),
            Err(problem) => out.problems.push(problem),
        }
    }
    out.traces.sort_by(|a, b| (a.pid(), &a.path).cmp(&(b.pid(), &b.path)));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: &str = r#"{"format":"backscope-trace","version":1,"pid":42,"ppid":1,"exe":"/usr/bin/llama-server","cmdline":["llama-server","-m","x.gguf"],"clock":"monotonic","start_ns":1000,"interval_ms":50,"shape_buckets":8,"max_kernels":1048576,"observer":"0.1.0"}"#;

    fn sample() -> String {
        [
            HEADER,
            r#"{"kernel":1,"name":"_Z7add_onePfi","api":"hip","source":"register"}"#,
            r#"{"kernel":2,"name":"_Z8scale_byILi3EEvPf","api":"hip","source":"register"}"#,
            r#"{"window":[1000,2000],"counts":[[1,3]],"errors":[[1,1]],"shapes":[[1,[1,1,1],[64,1,1],3]]}"#,
            r#"{"kernel":3,"name":"_Z7add_onePfi","api":"hip","source":"register"}"#,
            r#"{"window":[2000,3000],"counts":[[1,2],[2,5],[3,1]],"graph":[[2,4]],"captured":[[2,1]],"shapes":[[1,[1,1,1],[64,1,1],1],[1,[2,1,1],[64,1,1],1],[2,[4,2,1],[32,4,1],5],[3,[1,1,1],[64,1,1],1]],"graph_launches":4}"#,
            r#"{"warning":"unknown_graph_exec","detail":"…"}"#,
            r#"{"window":[3000,4000],"counts":[[2,1]],"other_shapes":[[2,1]],"unknown_graph_launches":2}"#,
            r#"{"end_ns":4100,"reason":"exit"}"#,
        ]
        .join("\n")
            + "\n"
    }

    #[test]
    fn parses_every_record_kind() {
        let trace = TraceFile::parse(&sample()).unwrap();
        assert_eq!(trace.pid(), 42);
        assert_eq!(trace.header.cmdline, ["llama-server", "-m", "x.gguf"]);
        assert_eq!(trace.kernels.len(), 3);
        assert_eq!(trace.kernels[&2].name, "_Z8scale_byILi3EEvPf");
        assert_eq!(trace.windows.len(), 3);
        assert_eq!(
            trace.windows[1].shapes[2],
            ShapeCount { kernel: 2, shape: Shape { grid: [4, 2, 1], block: [32, 4, 1] }, launches: 5 }
        );
        assert_eq!(trace.windows[1].graph_launches, 4);
        assert_eq!(trace.warnings[0].code, "unknown_graph_exec");
        assert_eq!(trace.end, Some(End { end_ns: 4100, reason: "exit".into() }));
        assert!(trace.is_complete() && trace.is_finished());
        assert!(!trace.partial_last_line && !trace.is_cut());
    }

    #[test]
    fn aggregates_per_kernel_over_all_windows() {
        let trace = TraceFile::parse(&sample()).unwrap();
        let stats = trace.kernel_stats(Range::All);
        assert_eq!(stats.len(), 3);
        let a = &stats[0];
        assert_eq!((a.launches, a.errors, a.graph), (5, 1, 0));
        assert_eq!(
            a.shapes,
            vec![(Shape { grid: [1, 1, 1], block: [64, 1, 1] }, 4), (Shape { grid: [2, 1, 1], block: [64, 1, 1] }, 1)]
        );
        let b = &stats[1];
        assert_eq!((b.launches, b.graph, b.captured, b.other_shapes), (6, 4, 1, 1));
        assert_eq!(trace.total_launches(Range::All), 12);
        assert_eq!(trace.graph_launches(Range::All), 4);
    }

    #[test]
    fn aggregates_per_time_range() {
        let trace = TraceFile::parse(&sample()).unwrap();
        let within = trace.kernel_stats(Range::Within(2000, 3000));
        assert_eq!(within.iter().map(|s| s.launches).collect::<Vec<_>>(), [2, 5, 1]);
        // [2500, 3500] lies inside no window but overlaps two.
        assert_eq!(trace.total_launches(Range::Within(2500, 3500)), 0);
        assert_eq!(trace.total_launches(Range::Overlapping(2500, 3500)), 9);
        assert_eq!(trace.windows_in(Range::Overlapping(0, 999)).count(), 0);
    }

    #[test]
    fn merges_kernels_that_share_a_name() {
        let trace = TraceFile::parse(&sample()).unwrap();
        let by_name = trace.stats_by_name(Range::All);
        let add_one = &by_name[&("hip".to_string(), "_Z7add_onePfi".to_string())];
        assert_eq!(add_one.ids, [1, 3]);
        assert_eq!(add_one.launches, 6);
        assert_eq!(add_one.shapes[0], (Shape { grid: [1, 1, 1], block: [64, 1, 1] }, 5));
    }

    #[test]
    fn tolerates_a_partial_last_line() {
        let full = sample();
        // Cut inside the final window line (drop the end record and part of the window).
        let cut = full.find(r#""unknown_graph_launches""#).unwrap();
        let trace = TraceFile::parse(&full[..cut]).unwrap();
        assert!(trace.partial_last_line);
        assert!(!trace.is_complete() && !trace.is_cut());
        assert_eq!(trace.windows.len(), 2);
        // A killed process that had written only whole lines: no end record, no partial line.
        let whole_lines: String = full.lines().take(4).map(|l| format!("{l}\n")).collect();
        let trace = TraceFile::parse(&whole_lines).unwrap();
        assert!(!trace.partial_last_line && !trace.is_complete());
        assert_eq!(trace.windows.len(), 1);
    }

    #[test]
    fn rejects_corruption_that_is_not_truncation() {
        let broken = sample().replace(r#"{"window":[1000,2000]"#, r#"{"window":[1000,"#);
        let error = TraceFile::parse(&broken).unwrap_err();
        assert_eq!(error.line, Some(4), "{error}");
        assert!(error.message.starts_with("not JSON"), "{error}");
        assert!(error.to_string().starts_with("line 4: "), "{error}");
        let undefined = sample().replace(r#""counts":[[1,3]]"#, r#""counts":[[9,3]]"#);
        assert!(format!("{:#}", TraceFile::parse(&undefined).unwrap_err()).contains("kernel 9"));
        let twice = format!("{HEADER}\n{}", sample());
        assert!(format!("{:#}", TraceFile::parse(&twice).unwrap_err()).contains("second header"));
        let newer = sample().replace(r#""version":1"#, r#""version":3"#);
        assert!(format!("{:#}", TraceFile::parse(&newer).unwrap_err()).contains("version 3"));
        let bad_window = sample()
            .replace(r#"{"window":[1000,2000],"counts":[[1,3]]"#, r#"{"window":[1000,2000],"counts":[[1,"x"]]"#);
        let error = TraceFile::parse(&bad_window).unwrap_err();
        assert_eq!(error.line, Some(4));
        assert!(error.message.starts_with("window record: "), "{error}");
        assert!(TraceFile::parse("").is_err());
        let headless = r#"{"kernel":1,"name":"k","api":"hip"}"#.to_string() + "\n";
        assert!(TraceFile::parse(&headless).is_err());
    }

    #[test]
    fn skips_unknown_record_kinds() {
        let text = sample().replace(r#"{"warning""#, "{\"future_record\":true}\n{\"warning\"");
        let trace = TraceFile::parse(&text).unwrap();
        assert_eq!(trace.unknown_lines, 1);
    }

    /// A version 2 trace that the observer cut when its budget was spent: the same records as a
    /// version 1 file, then the `truncated` record instead of the end record.
    fn cut_sample() -> String {
        let v2_header = HEADER
            .replace(r#""version":1"#, r#""version":2"#)
            .replace(r#""max_kernels":1048576"#, r#""max_kernels":1048576,"max_bytes":65536"#);
        [
            v2_header.as_str(),
            r#"{"kernel":1,"name":"_Z7add_onePfi","api":"hip","source":"register"}"#,
            r#"{"window":[1000,2000],"counts":[[1,3]],"shapes":[[1,[1,1,1],[64,1,1],3]],"expired_captures":2}"#,
            r#"{"truncated":"budget","at_ns":2500,"bytes":65100,"max_bytes":65536}"#,
        ]
        .join("\n")
            + "\n"
    }

    #[test]
    fn reads_version_1_and_version_2_files() {
        let v1 = TraceFile::parse(&sample()).unwrap();
        assert_eq!((v1.header.version, v1.header.max_bytes), (1, 0));
        assert!(v1.windows.iter().all(|w| w.expired_captures == 0));
        let v2 = TraceFile::parse(&cut_sample()).unwrap();
        assert_eq!((v2.header.version, v2.header.max_bytes), (2, 65536));
        assert_eq!(v2.windows[0].expired_captures, 2);
        assert_eq!(v2.total_launches(Range::All), 3);
        let cut = v2.truncated.as_ref().unwrap();
        assert_eq!((cut.reason.as_str(), cut.at_ns, cut.bytes, cut.max_bytes), ("budget", 2500, 65100, Some(65536)));
        assert_eq!(cut.why(), "its budget of 65536 bytes (BACKSCOPE_TRACE_MAX_BYTES) was spent");
        assert!(v2.is_cut() && v2.is_finished() && !v2.is_complete());
        let write_error = cut_sample().replace(
            r#"{"truncated":"budget","at_ns":2500,"bytes":65100,"max_bytes":65536}"#,
            r#"{"truncated":"write_error","at_ns":2500,"bytes":900,"error":"No space left on device (os error 28)"}"#,
        );
        let cut = TraceFile::parse(&write_error).unwrap().truncated.unwrap();
        assert_eq!(cut.why(), "writing failed (No space left on device (os error 28))");
        // Nothing may follow the truncated record but records of unknown kinds.
        let after = format!("{}{}\n", cut_sample(), r#"{"window":[3000,4000],"counts":[[1,1]]}"#);
        let error = TraceFile::parse(&after).unwrap_err();
        assert_eq!((error.line, error.message.as_str()), (Some(5), "record after the truncated record"));
        assert!(TraceFile::parse(&format!("{}{{\"later\":1}}\n", cut_sample())).is_ok());
    }

    #[test]
    fn reads_a_directory_of_traces_and_reports_bad_files() {
        let dir = std::env::temp_dir().join(format!("backscope-trace-reader-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("trace-42.jsonl"), sample()).unwrap();
        std::fs::write(dir.join("trace-7.jsonl"), sample().replace(r#""pid":42"#, r#""pid":7"#)).unwrap();
        std::fs::write(dir.join("trace-8.jsonl"), sample().replace(r#""counts":[[2,1]]"#, r#""counts":[[2,"#)).unwrap();
        std::fs::write(dir.join("notes.txt"), "not a trace").unwrap();
        let read = read_dir(&dir).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(read.traces.iter().map(TraceFile::pid).collect::<Vec<_>>(), [7, 42]);
        assert!(read.traces[0].path.as_ref().unwrap().ends_with("trace-7.jsonl"));
        assert_eq!(read.problems.len(), 1);
        let problem = &read.problems[0];
        assert!(problem.path.as_ref().unwrap().ends_with("trace-8.jsonl"));
        assert_eq!(problem.line, Some(8));
        assert!(problem.to_string().contains("trace-8.jsonl:8: not JSON"), "{problem}");
    }
}
