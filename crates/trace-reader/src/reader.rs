//! Reading trace files: [`Reader`] takes one line at a time (a whole file, or the lines a growing
//! file gained since the last look) and keeps the header, the kernel table and the records read;
//! [`TraceFile::parse`] and [`TraceFile::read`] run it over a whole file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use format::record::kind;
use format::{FORMAT, MIN_VERSION, VERSION};

use crate::records::{
    Crash, Device, End, Header, KernelDef, RawCrash, RawWindow, SignalReturned, Truncated, Warning, Window,
};

/// A trace file that could not be read: which file, which line (1-based) if one, and what was
/// wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceError {
    pub path: Option<PathBuf>,
    pub line: Option<usize>,
    pub message: String,
}

impl TraceError {
    pub(crate) fn at(line: usize, message: impl Into<String>) -> TraceError {
        TraceError { path: None, line: Some(line), message: message.into() }
    }

    pub(crate) fn whole(message: impl Into<String>) -> TraceError {
        TraceError { path: None, line: None, message: message.into() }
    }

    fn in_file(mut self, path: Option<&Path>) -> TraceError {
        if self.path.is_none() {
            self.path = path.map(Path::to_path_buf);
        }
        self
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

/// One parsed trace file (one process).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceFile {
    pub path: Option<PathBuf>,
    pub header: Header,
    /// Kernel definitions by id.
    pub kernels: BTreeMap<u32, KernelDef>,
    /// Devices by id (Vulkan, version 3).
    pub devices: BTreeMap<u32, Device>,
    pub windows: Vec<Window>,
    pub warnings: Vec<Warning>,
    /// Fatal signals the observer caught, in order (version 3).
    pub crashes: Vec<Crash>,
    /// `None` when the process ended without the exit flush (killed, crashed, `_exit`, still
    /// running), or when the trace was cut.
    pub end: Option<End>,
    /// The observer stopped writing this trace early (budget or write error): counts are lower
    /// bounds.
    pub truncated: Option<Truncated>,
    /// The last line was cut short (no newline: the process died mid-write) and was dropped.
    pub partial_last_line: bool,
    /// Lines of a kind this reader does not know (written by a newer observer), skipped.
    pub unknown_lines: usize,
}

enum Line {
    Header(Header),
    Kernel(KernelDef),
    Window(Window),
    Warning(Warning),
    End(End),
    Truncated(Truncated),
    Crash(Crash),
    SignalReturned(u32),
    Device(Device),
    Unknown,
}

fn parse_line(line: &str) -> Result<Line, String> {
    let value: serde_json::Value = serde_json::from_str(line).map_err(|e| format!("not JSON: {e}"))?;
    let object = value.as_object().ok_or("not a JSON object")?;
    let Some(kind) = kind::ALL.into_iter().find(|k| object.contains_key(*k)) else { return Ok(Line::Unknown) };
    let record = |e: serde_json::Error| match kind {
        kind::HEADER => format!("header: {e}"),
        kind::END => format!("end record: {e}"),
        kind => format!("{kind} record: {e}"),
    };
    Ok(match kind {
        kind::HEADER => Line::Header(serde_json::from_value(value).map_err(record)?),
        kind::KERNEL => Line::Kernel(serde_json::from_value(value).map_err(record)?),
        kind::WINDOW => Line::Window(serde_json::from_value::<RawWindow>(value).map_err(record)?.into()),
        kind::WARNING => Line::Warning(serde_json::from_value(value).map_err(record)?),
        kind::END => Line::End(serde_json::from_value(value).map_err(record)?),
        kind::TRUNCATED => Line::Truncated(serde_json::from_value(value).map_err(record)?),
        kind::CRASH => Line::Crash(serde_json::from_value::<RawCrash>(value).map_err(record)?.into()),
        kind::SIGNAL_RETURNED => {
            Line::SignalReturned(serde_json::from_value::<SignalReturned>(value).map_err(record)?.signal_returned)
        }
        kind::DEVICE => Line::Device(serde_json::from_value(value).map_err(record)?),
        _ => Line::Unknown,
    })
}

/// Reads a trace line by line, keeping what it has read: the header, the kernel and device tables,
/// windows, warnings, crashes and the final record. Only whole lines may be fed (without their
/// newline); a line that cannot be read is an error naming its number and changes nothing, so a
/// caller that sees a growing file's last line half-written can stop there and feed it whole later.
#[derive(Clone, Debug)]
pub struct Reader {
    path: Option<PathBuf>,
    lines: usize,
    has_header: bool,
    trace: TraceFile,
}

impl Default for Reader {
    fn default() -> Self {
        Reader::new(None)
    }
}

impl Reader {
    /// A reader for the file at `path` (named in errors), or for text of no file.
    pub fn new(path: Option<&Path>) -> Reader {
        Reader {
            path: path.map(Path::to_path_buf),
            lines: 0,
            has_header: false,
            trace: TraceFile {
                path: path.map(Path::to_path_buf),
                header: Header::default(),
                kernels: BTreeMap::new(),
                devices: BTreeMap::new(),
                windows: Vec::new(),
                warnings: Vec::new(),
                crashes: Vec::new(),
                end: None,
                truncated: None,
                partial_last_line: false,
                unknown_lines: 0,
            },
        }
    }

    /// Lines fed so far (the number of the last one).
    pub fn lines(&self) -> usize {
        self.lines
    }

    /// What has been read, once the header has.
    pub fn trace(&self) -> Option<&TraceFile> {
        self.has_header.then_some(&self.trace)
    }

    /// What has been read, for pruning (the sweep forgets windows that no request can overlap any
    /// more); `None` before the header.
    pub fn trace_mut(&mut self) -> Option<&mut TraceFile> {
        self.has_header.then_some(&mut self.trace)
    }

    /// Reads one whole line (without its newline).
    pub fn feed(&mut self, line: &str) -> Result<(), TraceError> {
        self.lines += 1;
        if line.trim().is_empty() {
            return Ok(());
        }
        let number = self.lines;
        parse_line(line)
            .and_then(|parsed| self.apply(parsed))
            .map_err(|message| TraceError::at(number, message).in_file(self.path.as_deref()))
    }

    /// Marks the line after the last one fed as cut short and dropped.
    pub fn mark_partial_last_line(&mut self) {
        self.trace.partial_last_line = true;
    }

    /// The trace read; an error when no header was.
    pub fn finish(self) -> Result<TraceFile, TraceError> {
        if !self.has_header {
            return Err(TraceError::whole("empty trace: no header").in_file(self.path.as_deref()));
        }
        Ok(self.trace)
    }

    fn apply(&mut self, parsed: Line) -> Result<(), String> {
        let trace = &mut self.trace;
        if !matches!(parsed, Line::Unknown) {
            if trace.end.is_some() {
                return Err("record after the end record".into());
            }
            if trace.truncated.is_some() {
                return Err("record after the truncated record".into());
            }
        }
        match parsed {
            Line::Header(h) => {
                if self.has_header {
                    return Err("second header (two processes wrote to one file: an observer older than trace format 2 with BACKSCOPE_TRACE_FILE without %p)".into());
                }
                if h.format != FORMAT {
                    return Err(format!("format is {:?}, expected {FORMAT:?}", h.format));
                }
                if !(MIN_VERSION..=VERSION).contains(&h.version) {
                    return Err(format!(
                        "trace format version {} is not supported (this reader knows {MIN_VERSION} to {VERSION})",
                        h.version
                    ));
                }
                trace.header = h;
                self.has_header = true;
            }
            _ if !self.has_header => return Err("the first record must be the header".into()),
            Line::Kernel(def) => {
                if let Some(previous) = trace.kernels.get(&def.id) {
                    if previous != &def {
                        return Err(format!("kernel {} defined twice, differently", def.id));
                    }
                }
                if let Some(device) = def.device.filter(|d| !trace.devices.contains_key(d)) {
                    return Err(format!("kernel {} names device {device}, which is not defined before it", def.id));
                }
                trace.kernels.insert(def.id, def);
            }
            Line::Window(window) => {
                if window.t1 < window.t0 {
                    return Err("window ends before it starts".into());
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
                check_defined(&trace.kernels, ids)?;
                trace.windows.push(window);
            }
            Line::Warning(warning) => trace.warnings.push(warning),
            Line::End(end) => trace.end = Some(end),
            Line::Truncated(truncated) => trace.truncated = Some(truncated),
            Line::Crash(crash) => {
                check_defined(&trace.kernels, crash.threads.iter().flat_map(|t| &t.launches).map(|l| l.kernel))?;
                trace.crashes.push(crash);
            }
            Line::SignalReturned(seq) => match trace.crashes.iter_mut().rev().find(|c| c.seq == seq) {
                Some(crash) => crash.returned = true,
                None => return Err(format!("signal_returned names crash {seq}, which is not before it")),
            },
            Line::Device(device) => {
                if let Some(previous) = trace.devices.get(&device.id) {
                    if previous != &device {
                        return Err(format!("device {} defined twice, differently", device.id));
                    }
                }
                trace.devices.insert(device.id, device);
            }
            Line::Unknown => trace.unknown_lines += 1,
        }
        Ok(())
    }
}

fn check_defined(kernels: &BTreeMap<u32, KernelDef>, ids: impl IntoIterator<Item = u32>) -> Result<(), String> {
    for id in ids {
        if !kernels.contains_key(&id) {
            return Err(format!("kernel {id} is used before its definition"));
        }
    }
    Ok(())
}

impl TraceFile {
    /// Parses the text of one trace file. A last line without its newline that cannot be read is
    /// what a process killed mid-write leaves: it is dropped and flagged in `partial_last_line`.
    pub fn parse(text: &str) -> Result<TraceFile, TraceError> {
        Self::parse_in(text, None)
    }

    fn parse_in(text: &str, path: Option<&Path>) -> Result<TraceFile, TraceError> {
        let complete_last_line = text.ends_with('\n');
        let mut reader = Reader::new(path);
        let mut lines = text.lines().peekable();
        while let Some(line) = lines.next() {
            match reader.feed(line) {
                Ok(()) => {}
                Err(_) if lines.peek().is_none() && !complete_last_line => {
                    reader.mark_partial_last_line();
                    break;
                }
                Err(e) => return Err(e),
            }
        }
        reader.finish()
    }

    /// Reads and parses one trace file.
    pub fn read(path: &Path) -> Result<TraceFile, TraceError> {
        let bytes = read_regular(path, MAX_TRACE_BYTES).map_err(|e| TraceError::whole(e).in_file(Some(path)))?;
        Self::parse_in(&String::from_utf8_lossy(&bytes), Some(path))
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

    /// The crash that ended the process: the last crash record, unless the program's handler
    /// returned from it or the process reached its exit flush afterwards.
    pub fn fatal_crash(&self) -> Option<&Crash> {
        self.crashes.last().filter(|c| !c.returned && self.end.is_none())
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
        let mut shapes: BTreeMap<u32, BTreeMap<Shape, u64>> = BTreeMap::new();
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

use crate::records::Shape;

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

    /// Whether the instant `t` lies in the range.
    pub fn includes_instant(&self, t: u64) -> bool {
        match *self {
            Range::All => true,
            Range::Within(t0, t1) | Range::Overlapping(t0, t1) => (t0..=t1).contains(&t),
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

fn sorted_shapes(per_shape: BTreeMap<Shape, u64>) -> Vec<(Shape, u64)> {
    let mut shapes: Vec<(Shape, u64)> = per_shape.into_iter().collect();
    shapes.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    shapes
}

/// Merges per-kernel stats that share (api, name); also used across several trace files.
pub fn merge_by_name(stats: impl IntoIterator<Item = KernelStats>) -> BTreeMap<(String, String), KernelStats> {
    let mut merged: BTreeMap<(String, String), KernelStats> = BTreeMap::new();
    let mut shapes: BTreeMap<(String, String), BTreeMap<Shape, u64>> = BTreeMap::new();
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

/// The most a trace file is read: an observer stops writing at its byte budget, 1 GiB per process unless
/// `BACKSCOPE_TRACE_MAX_BYTES` raised it, so a larger "trace" is something else (a link to `/dev/zero`, a planted
/// file) and is refused instead of read until memory runs out.
pub const MAX_TRACE_BYTES: u64 = format::env::DEFAULT_MAX_BYTES;

/// The bytes of a regular file of at most `limit` bytes. A FIFO, a device (a link to `/dev/zero`), a socket or a
/// directory is refused without blocking: the path is checked with `stat`, opened with `O_NONBLOCK` (a FIFO swapped
/// in between cannot make the open wait) and checked again on what was opened. (The binary's `inputs` module does
/// the same for its own inputs; this crate stands alone.)
fn read_regular(path: &Path, limit: u64) -> Result<Vec<u8>, String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let kind = |m: &std::fs::Metadata| {
        use std::os::unix::fs::FileTypeExt;
        let t = m.file_type();
        if t.is_fifo() {
            "a FIFO"
        } else if t.is_char_device() {
            "a character device"
        } else if t.is_block_device() {
            "a block device"
        } else if t.is_socket() {
            "a socket"
        } else if t.is_dir() {
            "a directory"
        } else {
            "not a regular file"
        }
    };
    let not_regular =
        |m: &std::fs::Metadata| format!("is {}, not a regular file: only regular trace files are read", kind(m));
    let meta = std::fs::metadata(path).map_err(|e| format!("cannot read: {e}"))?;
    if !meta.is_file() {
        return Err(not_regular(&meta));
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| format!("cannot read: {e}"))?;
    let opened = file.metadata().map_err(|e| format!("cannot read: {e}"))?;
    if !opened.is_file() {
        return Err(not_regular(&opened));
    }
    let too_large = || format!("is larger than {limit} bytes, the most an observer writes for one process by default");
    if opened.len() > limit {
        return Err(too_large());
    }
    // O_NONBLOCK does not apply to regular files: reads below block as usual. The limit holds for a file that grows.
    let mut bytes = Vec::with_capacity(opened.len() as usize);
    file.take(limit + 1).read_to_end(&mut bytes).map_err(|e| format!("cannot read: {e}"))?;
    if bytes.len() as u64 > limit {
        return Err(too_large());
    }
    Ok(bytes)
}

/// The traces of one directory: those that could be read, ordered by pid and path, and the files
/// that could not.
#[derive(Clone, Debug, Default)]
pub struct DirTraces {
    pub traces: Vec<TraceFile>,
    pub problems: Vec<TraceError>,
}

/// Reads every `trace-*.jsonl` file of a directory. A file that cannot be read or parsed is
/// reported in [`DirTraces::problems`] and the others are kept; only a directory that cannot be
/// listed is an error.
pub fn read_dir(dir: &Path) -> std::io::Result<DirTraces> {
    let listing = |e: std::io::Error| std::io::Error::new(e.kind(), format!("listing {}: {e}", dir.display()));
    let mut out = DirTraces::default();
    let mut paths = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(listing)? {
        let path = entry.map_err(listing)?.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        if format::naming::is_trace_file_name(name) {
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
