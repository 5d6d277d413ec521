//! Reading trace files: [`Reader`] takes one line at a time (a whole file, or the lines a growing
//! file gained since the last look) and keeps the header, the kernel table and the records read;
//! [`TraceFile::parse`] and [`TraceFile::read`] run it over a whole file.
//!
//! A trace can be large (the observer's budget is 1 GiB per process) while what a summary needs is
//! small: per-kernel totals. [`TraceFile::read_folded`] (and [`read_dir`]) stream the file one line
//! at a time and fold every window into one as it is read, so memory follows the kernel and shape
//! tables, not the file: a 507 MB trace took 1.8 GB when every window was kept.
//!
//! [`read_dir`]: crate::read_dir

use std::collections::BTreeMap;
use std::io::{BufRead, Read};
use std::path::{Path, PathBuf};

use format::record::kind;
use format::{FORMAT, MAX_VERSION, MIN_VERSION};

use crate::records::{
    Crash, Device, DeviceLost, End, Hang, Header, KernelDef, RawCrash, RawWindow, Rotated, Sequence, Shape, ShapeCount,
    SignalReturned, Truncated, Warning, Window,
};
use crate::segments::{Segment, Segments};

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
    /// Vulkan calls that returned `VK_ERROR_DEVICE_LOST`, in order (the Vulkan layer's records).
    pub device_lost: Vec<DeviceLost>,
    /// The hang watcher's records, in order (the Vulkan layer's black box).
    pub hangs: Vec<Hang>,
    /// The Vulkan layer's dispatch sequences by id (the order of dispatches; see [`TraceFile::order_recorded`]).
    pub sequences: BTreeMap<u32, Sequence>,
    /// `None` when the process ended without the exit flush (killed, crashed, `_exit`, still
    /// running), or when the trace was cut.
    pub end: Option<End>,
    /// The observer stopped writing this trace early (budget or write error): counts are lower
    /// bounds.
    pub truncated: Option<Truncated>,
    /// A rotating trace's segment ends here and the trace goes on in the next file (version 4): neither cut nor
    /// partial.
    pub rotated: Option<Rotated>,
    /// The segments of a rotating trace read as this one ([`read_dir`](crate::read_dir) joins a process's segments),
    /// when it rotates.
    pub segments: Option<Segments>,
    /// `signal_returned` records of a rotating trace's segment that name a crash of an earlier segment (applied
    /// when the segments are joined; at most [`MAX_KEPT`]).
    pub earlier_returns: Vec<u32>,
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
    DeviceLost(DeviceLost),
    Hang(Hang),
    Rotated(Rotated),
    Sequence(Sequence),
    Unknown,
}

fn parse_line(line: &str) -> Result<Line, String> {
    // Window lines are nearly all of a trace: the observer writes their kind first, and they are read straight
    // into their record instead of through a generic JSON value (half the time). A line that also names a kind
    // that ranks before it (header, kernel), or that does not read so, takes the general path below.
    let window_first =
        line.strip_prefix("{\"").and_then(|l| l.strip_prefix(kind::WINDOW)).is_some_and(|l| l.starts_with("\":"));
    if window_first && !line.contains("\"header\"") && !line.contains("\"kernel\"") {
        if let Ok(window) = serde_json::from_str::<RawWindow>(line) {
            return Ok(Line::Window(window.into()));
        }
    }
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
        kind::ROTATED => Line::Rotated(serde_json::from_value(value).map_err(record)?),
        kind::CRASH => Line::Crash(serde_json::from_value::<RawCrash>(value).map_err(record)?.into()),
        kind::SIGNAL_RETURNED => {
            Line::SignalReturned(serde_json::from_value::<SignalReturned>(value).map_err(record)?.signal_returned)
        }
        kind::DEVICE => Line::Device(serde_json::from_value(value).map_err(record)?),
        kind::DEVICE_LOST => Line::DeviceLost(serde_json::from_value(value).map_err(record)?),
        kind::HANG => Line::Hang(serde_json::from_value(value).map_err(record)?),
        kind::SEQUENCE => Line::Sequence(serde_json::from_value(value).map_err(record)?),
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
    /// Set by [`Reader::folding`]: windows are summed here instead of kept.
    folded: Option<Box<Folded>>,
}

/// The longest line [`TraceFile::read`] takes (a window line of every kernel of a large program is a
/// few MB); a longer one is an error, not an allocation the size of the file.
pub const MAX_LINE: usize = 64 << 20;
/// Warnings and crash records a folding reader keeps (the first warnings, the last crashes); the
/// rest are counted in one warning of code [`LEFT_OUT`].
pub const MAX_KEPT: usize = 256;

/// The kernels a record's queues name as in flight.
fn in_flight_kernels(queues: &[crate::records::QueueAtLoss]) -> impl Iterator<Item = u32> + '_ {
    queues.iter().filter_map(|q| q.progress.as_ref()).flat_map(|p| &p.in_flight).map(|d| d.kernel)
}
/// The code of the warning a folding reader adds when it left warnings or crash records out.
pub const LEFT_OUT: &str = "records_left_out";

/// Every window of a trace summed into one (see [`Reader::folding`]).
#[derive(Clone, Debug, Default)]
pub(crate) struct Folded {
    any: bool,
    t0: u64,
    t1: u64,
    counts: BTreeMap<u32, u64>,
    errors: BTreeMap<u32, u64>,
    graph: BTreeMap<u32, u64>,
    captured: BTreeMap<u32, u64>,
    other_shapes: BTreeMap<u32, u64>,
    shapes: BTreeMap<(u32, Shape), u64>,
    sequences: BTreeMap<u32, u64>,
    scalars: [u64; 5],
    warnings_left_out: u64,
    crashes_left_out: u64,
}

impl Folded {
    /// `windows` summed into one; `None` for none.
    pub(crate) fn all(windows: impl IntoIterator<Item = Window>) -> Option<Window> {
        let mut folded = Folded::default();
        windows.into_iter().for_each(|w| folded.add(w));
        folded.window()
    }

    fn add(&mut self, w: Window) {
        let sum = |map: &mut BTreeMap<u32, u64>, list: Vec<(u32, u64)>| {
            for (id, n) in list {
                let v = map.entry(id).or_insert(0);
                *v = v.saturating_add(n);
            }
        };
        (self.t0, self.t1) = if self.any { (self.t0.min(w.t0), self.t1.max(w.t1)) } else { (w.t0, w.t1) };
        self.any = true;
        sum(&mut self.counts, w.counts);
        sum(&mut self.errors, w.errors);
        sum(&mut self.graph, w.graph);
        sum(&mut self.captured, w.captured);
        sum(&mut self.other_shapes, w.other_shapes);
        sum(&mut self.sequences, w.sequences);
        for s in w.shapes {
            let v = self.shapes.entry((s.kernel, s.shape)).or_insert(0);
            *v = v.saturating_add(s.launches);
        }
        let scalars =
            [w.graph_launches, w.unknown_graph_launches, w.unattributed_captures, w.expired_captures, w.submits];
        for (total, n) in self.scalars.iter_mut().zip(scalars) {
            *total = total.saturating_add(n);
        }
    }

    /// The one window, when there was any.
    fn window(&self) -> Option<Window> {
        let list = |map: &BTreeMap<u32, u64>| map.iter().map(|(&id, &n)| (id, n)).collect();
        let [graph_launches, unknown_graph_launches, unattributed_captures, expired_captures, submits] = self.scalars;
        self.any.then(|| Window {
            t0: self.t0,
            t1: self.t1,
            counts: list(&self.counts),
            errors: list(&self.errors),
            graph: list(&self.graph),
            captured: list(&self.captured),
            shapes: self
                .shapes
                .iter()
                .map(|(&(kernel, shape), &launches)| ShapeCount { kernel, shape, launches })
                .collect(),
            other_shapes: list(&self.other_shapes),
            graph_launches,
            unknown_graph_launches,
            unattributed_captures,
            expired_captures,
            submits,
            sequences: list(&self.sequences),
        })
    }
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
                device_lost: Vec::new(),
                hangs: Vec::new(),
                sequences: BTreeMap::new(),
                end: None,
                truncated: None,
                rotated: None,
                segments: None,
                earlier_returns: Vec::new(),
                partial_last_line: false,
                unknown_lines: 0,
            },
            folded: None,
        }
    }

    /// A reader that sums every window into one as it reads (its [`TraceFile::windows`] holds that one
    /// window, spanning them all, once finished), keeps the first [`MAX_KEPT`] warnings and the last
    /// [`MAX_KEPT`] crash records, and counts the rest in a [`LEFT_OUT`] warning: what a summary over
    /// [`Range::All`] needs, in memory that follows the kernel and shape tables instead of the file.
    pub fn folding(path: Option<&Path>) -> Reader {
        Reader { folded: Some(Box::default()), ..Reader::new(path) }
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
    pub fn finish(mut self) -> Result<TraceFile, TraceError> {
        if !self.has_header {
            return Err(TraceError::whole("empty trace: no header").in_file(self.path.as_deref()));
        }
        if let Some(folded) = self.folded.take() {
            self.trace.windows.extend(folded.window());
            let (warnings, crashes) = (folded.warnings_left_out, folded.crashes_left_out);
            if warnings + crashes > 0 {
                self.trace.warnings.push(Warning {
                    code: LEFT_OUT.into(),
                    detail: format!(
                        "backscope kept the first {MAX_KEPT} warnings and the last {MAX_KEPT} crash records; \
                         {warnings} warnings and {crashes} crash records were left out"
                    ),
                });
            }
        }
        self.trace.segments = Segments::of_one(&self.trace);
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
            if trace.rotated.is_some() {
                return Err("record after the rotated record".into());
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
                if !(MIN_VERSION..=MAX_VERSION).contains(&h.version) {
                    return Err(format!(
                        "trace format version {} is not supported (this reader knows {MIN_VERSION} to {MAX_VERSION})",
                        h.version
                    ));
                }
                if h.segment.is_some() && h.segments_kept.is_none_or(|k| k < 2) {
                    return Err(
                        "header: a segment of a rotating trace keeps at least 2 segments (segments_kept)".into()
                    );
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
                if let Some(&(id, _)) =
                    window.sequences.iter().find(|(id, _)| *id != 0 && !trace.sequences.contains_key(id))
                {
                    return Err(format!("sequence {id} is counted before its definition"));
                }
                match &mut self.folded {
                    Some(folded) => folded.add(window),
                    None => trace.windows.push(window),
                }
            }
            Line::Warning(warning) => match &mut self.folded {
                Some(folded) if trace.warnings.len() >= MAX_KEPT => folded.warnings_left_out += 1,
                _ => trace.warnings.push(warning),
            },
            Line::End(end) => trace.end = Some(end),
            Line::Truncated(truncated) => trace.truncated = Some(truncated),
            Line::Rotated(rotated) => {
                if trace.header.segment.is_none() {
                    return Err("rotated record in a trace that does not rotate (no segment in its header)".into());
                }
                trace.rotated = Some(rotated);
            }
            Line::Crash(crash) => {
                check_defined(&trace.kernels, crash.threads.iter().flat_map(|t| &t.launches).map(|l| l.kernel))?;
                check_defined(&trace.kernels, crash.queues.iter().flat_map(|q| &q.dispatches).map(|d| d.kernel))?;
                if let Some(folded) = self.folded.as_mut().filter(|_| trace.crashes.len() >= MAX_KEPT) {
                    // The last ones are kept: the last says whether the process died of it.
                    trace.crashes.remove(0);
                    folded.crashes_left_out += 1;
                }
                trace.crashes.push(crash);
            }
            Line::SignalReturned(seq) => match trace.crashes.iter_mut().rev().find(|c| c.seq == seq) {
                Some(crash) => crash.returned = true,
                // A folding reader may have left that crash out (it keeps the last ones).
                None if self.folded.as_ref().is_some_and(|f| f.crashes_left_out > 0) => {}
                // A rotating trace's crash may be in an earlier segment.
                None if trace.header.segment.is_some_and(|k| k > 0) => {
                    if trace.earlier_returns.len() < MAX_KEPT {
                        trace.earlier_returns.push(seq);
                    }
                }
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
            Line::DeviceLost(lost) => {
                check_defined(&trace.kernels, lost.queues.iter().flat_map(|q| &q.dispatches).map(|d| d.kernel))?;
                check_defined(&trace.kernels, in_flight_kernels(&lost.queues))?;
                // Bounded by the layer (8 per process); a folding reader keeps the first ones too.
                if self.folded.is_none() || trace.device_lost.len() < MAX_KEPT {
                    trace.device_lost.push(lost);
                }
            }
            Line::Hang(hang) => {
                check_defined(&trace.kernels, hang.queues.iter().flat_map(|q| &q.dispatches).map(|d| d.kernel))?;
                check_defined(&trace.kernels, in_flight_kernels(&hang.queues))?;
                // Bounded by the layer (8 per process); a folding reader keeps the first ones too.
                if self.folded.is_none() || trace.hangs.len() < MAX_KEPT {
                    trace.hangs.push(hang);
                }
            }
            Line::Sequence(sequence) => {
                if sequence.id == 0 {
                    return Err("sequence 0 is defined, but 0 counts the submissions whose order was not kept".into());
                }
                if let Some(previous) = trace.sequences.get(&sequence.id) {
                    if previous != &sequence {
                        return Err(format!("sequence {} defined twice, differently", sequence.id));
                    }
                }
                check_defined(&trace.kernels, sequence.runs.iter().map(|&(kernel, _)| kernel))?;
                trace.sequences.insert(sequence.id, sequence);
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
        Self::parse_with(text, Reader::new(None))
    }

    /// [`TraceFile::parse`] with the windows folded into one ([`Reader::folding`]).
    pub fn parse_folded(text: &str) -> Result<TraceFile, TraceError> {
        Self::parse_with(text, Reader::folding(None))
    }

    fn parse_with(text: &str, reader: Reader) -> Result<TraceFile, TraceError> {
        Self::stream(text.as_bytes(), reader).map_err(|e| match e {
            Streamed::Io(e) => TraceError::whole(format!("cannot read: {e}")),
            Streamed::Trace(e) => e,
        })
    }

    /// Reads and parses one trace file, one line at a time, keeping every window.
    pub fn read(path: &Path) -> Result<TraceFile, TraceError> {
        Self::read_with(path, Reader::new(Some(path)))
    }

    /// Reads one trace file with its windows folded into one ([`Reader::folding`]): for summaries
    /// over [`Range::All`], in memory that does not grow with the file.
    pub fn read_folded(path: &Path) -> Result<TraceFile, TraceError> {
        Self::read_with(path, Reader::folding(Some(path)))
    }

    fn read_with(path: &Path, reader: Reader) -> Result<TraceFile, TraceError> {
        let cannot = |e: std::io::Error| TraceError::whole(format!("cannot read: {e}")).in_file(Some(path));
        let file = open_regular(path, MAX_TRACE_BYTES).map_err(|e| TraceError::whole(e).in_file(Some(path)))?;
        // One byte past the limit is read, so that a file that grew past it while being read is told apart.
        let mut input = std::io::BufReader::with_capacity(1 << 20, file.take(MAX_TRACE_BYTES + 1));
        let trace = Self::stream(&mut input, reader).map_err(|e| match e {
            Streamed::Io(e) => cannot(e),
            Streamed::Trace(e) => e,
        })?;
        if input.get_ref().limit() == 0 {
            return Err(TraceError::whole(too_large(MAX_TRACE_BYTES)).in_file(Some(path)));
        }
        Ok(trace)
    }

    /// Feeds `input` to `reader` line by line (at most [`MAX_LINE`] bytes each), with
    /// [`TraceFile::parse`]'s rule for a last line without its newline.
    fn stream(mut input: impl BufRead, mut reader: Reader) -> Result<TraceFile, Streamed> {
        let mut line = Vec::new();
        loop {
            line.clear();
            let n = input.by_ref().take(MAX_LINE as u64 + 1).read_until(b'\n', &mut line).map_err(Streamed::Io)?;
            if n == 0 {
                break;
            }
            let complete = line.last() == Some(&b'\n');
            if !complete && line.len() > MAX_LINE {
                let number = reader.lines() + 1;
                let message = format!("line longer than {} MiB (not a trace line)", MAX_LINE >> 20);
                return Err(Streamed::Trace(TraceError::at(number, message).in_file(reader.path.as_deref())));
            }
            let mut text: &[u8] = &line;
            text = text.strip_suffix(b"\n").unwrap_or(text);
            text = text.strip_suffix(b"\r").unwrap_or(text);
            match reader.feed(&String::from_utf8_lossy(text)) {
                Ok(()) => {}
                Err(_) if !complete => {
                    reader.mark_partial_last_line();
                    break;
                }
                Err(e) => return Err(Streamed::Trace(e)),
            }
        }
        reader.finish().map_err(Streamed::Trace)
    }

    pub fn pid(&self) -> u32 {
        self.header.pid
    }

    /// The files this trace names, which a reader of it may open: the objects its Vulkan pipelines' SPIR-V came
    /// from (`spirv_object`), each once, in kernel order. They are whatever the process under test (or whoever
    /// wrote the file) put there — a device, a FIFO, a huge sparse file — so a caller opens them only through a
    /// bounded, non-blocking door (the binary's `inputs::ReadBudget`).
    pub fn named_files(&self) -> Vec<&str> {
        let mut seen = std::collections::BTreeSet::new();
        self.kernels.values().filter_map(|k| k.spirv_object.as_deref()).filter(|o| seen.insert(*o)).collect()
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

    /// Whether nothing more will be appended: the end record, a `truncated` record or (for a rotating trace's
    /// segment) a `rotated` record is there.
    pub fn is_finished(&self) -> bool {
        self.end.is_some() || self.truncated.is_some() || self.rotated.is_some()
    }

    /// The file that holds a record of `at_ns`: for a rotating trace's joined segments, the segment open then;
    /// else the trace's file.
    pub fn path_at(&self, at_ns: u64) -> Option<PathBuf> {
        match self.segments.as_ref().and_then(|s| s.file_at(at_ns)) {
            Some(path) => Some(path.to_path_buf()),
            None => self.path.clone(),
        }
    }

    /// The earlier segments of a rotating trace that were not read (deleted by the rotation, or missing), when
    /// some were: the counts are then those since [`Segments::since_ns`], lower bounds for the process.
    pub fn rotated_away(&self) -> Option<&Segments> {
        self.segments.as_ref().filter(|s| s.first_index() > 0 || !s.missing().is_empty())
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
                        let total = field(s);
                        *total = total.saturating_add(n);
                    }
                }
            };
            add(&window.counts, |s| &mut s.launches);
            add(&window.errors, |s| &mut s.errors);
            add(&window.graph, |s| &mut s.graph);
            add(&window.captured, |s| &mut s.captured);
            add(&window.other_shapes, |s| &mut s.other_shapes);
            for s in &window.shapes {
                let total = shapes.entry(s.kernel).or_default().entry(s.shape).or_insert(0);
                *total = total.saturating_add(s.launches);
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

    /// Whether the writer recorded the order of dispatches (the Vulkan layer's `sequence` records): a trace of an
    /// older layer, or with order recording off, says nothing about order, which is not the same as an empty one.
    pub fn order_recorded(&self) -> bool {
        self.header.max_sequences > 0
    }

    /// Submissions per dispatch sequence in the selected windows (id 0: submissions whose order was not kept), for
    /// every sequence counted there.
    pub fn sequence_submissions(&self, range: Range) -> BTreeMap<u32, u64> {
        let mut out = BTreeMap::new();
        for &(id, n) in self.windows_in(range).flat_map(|w| &w.sequences) {
            let total: &mut u64 = out.entry(id).or_insert(0);
            *total = total.saturating_add(n);
        }
        out
    }

    /// Executions of all kernels in the selected windows.
    pub fn total_launches(&self, range: Range) -> u64 {
        self.windows_in(range).flat_map(|w| &w.counts).fold(0, |total, &(_, n)| total.saturating_add(n))
    }

    /// Graph launches (`…GraphLaunch` calls) in the selected windows.
    pub fn graph_launches(&self, range: Range) -> u64 {
        self.windows_in(range).fold(0, |total, w| total.saturating_add(w.graph_launches))
    }
}

/// Why [`TraceFile::stream`] stopped.
enum Streamed {
    Io(std::io::Error),
    Trace(TraceError),
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
            let total = per_shape.entry(shape).or_insert(0);
            *total = total.saturating_add(n);
        }
        let entry = merged.entry(key).or_insert_with(|| KernelStats {
            name: s.name.clone(),
            api: s.api.clone(),
            ..Default::default()
        });
        entry.ids.extend(&s.ids);
        entry.launches = entry.launches.saturating_add(s.launches);
        entry.errors = entry.errors.saturating_add(s.errors);
        entry.graph = entry.graph.saturating_add(s.graph);
        entry.captured = entry.captured.saturating_add(s.captured);
        entry.other_shapes = entry.other_shapes.saturating_add(s.other_shapes);
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

fn too_large(limit: u64) -> String {
    format!("is larger than {limit} bytes, the most an observer writes for one process by default")
}

/// A regular file of at most `limit` bytes, opened for reading. A FIFO, a device (a link to `/dev/zero`), a socket
/// or a directory is refused without blocking: the path is checked with `stat`, opened with `O_NONBLOCK` (a FIFO
/// swapped in between cannot make the open wait) and checked again on what was opened. (The binary's `inputs`
/// module does the same for its own inputs; this crate stands alone.)
fn open_regular(path: &Path, limit: u64) -> Result<std::fs::File, String> {
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
    if opened.len() > limit {
        return Err(too_large(limit));
    }
    // O_NONBLOCK does not apply to regular files: reads block as usual.
    Ok(file)
}

impl Segments {
    /// The segments of a trace read alone: its own, when it is a rotating trace's segment.
    pub(crate) fn of_one(trace: &TraceFile) -> Option<Segments> {
        let index = trace.header.segment?;
        Some(Segments {
            present: vec![Segment {
                index,
                path: trace.path.clone(),
                rotated_at_ns: trace.rotated.as_ref().map(|r| r.at_ns),
            }],
            kept: trace.header.segments_kept.unwrap_or(0),
            segment_max_bytes: trace.header.segment_max_bytes.unwrap_or(0),
            since_ns: trace.windows.first().map(|w| w.t0),
            continues_in: trace.rotated.as_ref().map(|r| r.next.clone()),
        })
    }
}
