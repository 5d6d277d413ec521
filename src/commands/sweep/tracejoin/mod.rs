//! `sweep --trace`: joining each request's time window to the dispatch observer's trace windows.
//!
//! A managed server runs with the observer preloaded and `BACKSCOPE_TRACE_DIR` set to a directory of its own in the
//! run directory (`traces/sNNN-NAME/`, named like its log); its children (Ollama's runners) inherit both. Every
//! process that touches CUDA or HIP writes `trace-<pid>.jsonl`: windows of `interval_ms` with the launches per
//! kernel, timed by CLOCK_MONOTONIC (docs/trace-format.md). The sweep reads the same clock just before it sends a
//! request (`t0`) and once the response is complete (`t1`), waits until the observer has flushed past `t1`, and
//! sums the kernels of every window overlapping `[t0, t1]` across the server's processes.
//!
//! Precision: a launch counted in a window happened inside that window, so the join is exact to one window length.
//! A window that began before `t0` may hold launches from just before the request (the end of the previous
//! request, when requests follow each other closely); the record's `spill_ns` says how far the counted windows
//! reach outside the request. With one request at a time and idle gaps (the sweep commits each cell before the
//! next), that is rare.
//!
//! Trace files grow for as long as a server runs, so they are followed: each call feeds the trace reader only the
//! lines appended since the last one, and windows that ended before a request began are forgotten.
//!
//! A rotating trace's segments (a service traced with `BACKSCOPE_TRACE_ROTATE`) are followed as files of their own and
//! joined into one process for each request; a segment that was rotated and deleted is forgotten.
//!
//! A server that dies of a signal while the observer is loaded leaves a `crash` record; a request during which one
//! arrived carries it (`RecordTrace::crashes`) with the last kernels each thread launched.

use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::Duration;

use trace_format::env;

use crate::observe::vulkan::ShaderIndex;
use crate::run::format::record::{
    RecordTrace, TraceCrash, TraceDeviceLost, TraceKernel, TraceProcess, TRACE_TOP_KERNELS,
};
use crate::trace::{Aggregate, Range, Reader, TraceFile};

/// Longest extra wait, beyond two windows, for the observer's flush after a request.
pub const FLUSH_SLACK: Duration = Duration::from_millis(200);
/// Polling interval while waiting for the flush.
const POLL: Duration = Duration::from_millis(5);

/// CLOCK_MONOTONIC in nanoseconds: the observer's clock.
pub use trace_format::clock::now_ns as monotonic_ns;

/// Whether `observer` (its file name) is mapped into process `pid`; `None` when /proc cannot tell.
pub fn observer_mapped(pid: u32, observer: &Path) -> Option<bool> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).ok()?;
    let name = observer.file_name()?.to_str()?;
    Some(maps.lines().any(|l| l.ends_with(name)))
}

/// `LD_PRELOAD`, `BACKSCOPE_TRACE_DIR` and `BACKSCOPE_TRACE_INTERVAL_MS` for a managed server. An `LD_PRELOAD` the
/// endpoint sets, or else the one backscope runs with, is kept after the observer.
pub fn server_env(
    env: &mut Vec<(String, String)>,
    observer: &Path,
    dir: &Path,
    interval_ms: u64,
    inherited_preload: Option<String>,
) {
    let existing = env
        .iter()
        .find(|(k, _)| k == "LD_PRELOAD")
        .map(|(_, v)| v.clone())
        .or(inherited_preload)
        .filter(|v| !v.is_empty());
    let preload = match existing {
        Some(e) => format!("{}:{e}", observer.display()),
        None => observer.display().to_string(),
    };
    let set = ["LD_PRELOAD", env::TRACE_DIR.name(), env::TRACE_INTERVAL_MS.name()];
    env.retain(|(k, _)| !set.contains(&k.as_str()));
    env.push(("LD_PRELOAD".into(), preload));
    env.push((env::TRACE_DIR.name().into(), dir.display().to_string()));
    env.push((env::TRACE_INTERVAL_MS.name().into(), interval_ms.to_string()));
}

/// The Vulkan layer's variables for a managed server (`crate::observe::observers::layer_env`): what the endpoint sets, else what
/// backscope runs with (`inherited`), keeps its place after the layer's.
pub fn vulkan_server_env(
    env: &mut Vec<(String, String)>,
    manifest_dir: &Path,
    inherited: impl Fn(&str) -> Option<String>,
) {
    let existing = |k: &str| env.iter().find(|(name, _)| name == k).map(|(_, v)| v.clone()).or_else(|| inherited(k));
    let vars = crate::observe::observers::layer_env(manifest_dir, existing);
    env.retain(|(k, _)| !vars.iter().any(|(name, _)| name == k));
    env.extend(vars);
}

/// One trace file, read as it grows.
struct FileCache {
    /// Bytes read so far (always at a line boundary).
    consumed: u64,
    /// Keeps the header and kernel table that later lines refer to.
    reader: Reader,
    /// Why the file could not be read; it is then skipped.
    error: Option<String>,
}

/// The trace directory of one server (or of an external endpoint), read incrementally.
pub struct TraceDir {
    pub dir: PathBuf,
    files: BTreeMap<PathBuf, FileCache>,
    /// The shaders of the libraries the Vulkan traces name, read once.
    shaders: ShaderIndex,
}

impl TraceDir {
    pub fn new(dir: PathBuf) -> TraceDir {
        TraceDir { dir, files: BTreeMap::new(), shaders: ShaderIndex::default() }
    }

    /// The shader index of this directory's Vulkan traces.
    pub fn shaders(&self) -> &ShaderIndex {
        &self.shaders
    }

    /// Read what the observers appended since the last call (and any new file).
    pub fn refresh(&mut self) {
        let Ok(rd) = std::fs::read_dir(&self.dir) else { return };
        let mut fed = false;
        let mut listed = std::collections::BTreeSet::new();
        for entry in rd.flatten() {
            let path = entry.path();
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            if trace_format::naming::is_trace_file_name(name) {
                listed.insert(path.clone());
                let cache = self.files.entry(path.clone()).or_insert_with(|| FileCache {
                    consumed: 0,
                    reader: Reader::new(Some(&path)),
                    error: None,
                });
                fed |= update(&path, cache);
            }
        }
        // A rotating trace deletes its oldest segments (docs/trace-format.md, "Rotating traces"): one that ended
        // with its `rotated` record and is gone is forgotten, so that a service traced for days does not pile up.
        self.files.retain(|path, c| listed.contains(path) || c.reader.trace().is_none_or(|t| t.rotated.is_none()));
        // `wait_for` polls every few milliseconds; with no new line there is no new pipeline to name.
        if !fed {
            return;
        }
        // Vulkan pipelines without a debug name are named after the shader their SPIR-V matched.
        self.shaders.add_traces(self.files.values().filter_map(|c| c.reader.trace()));
        for c in self.files.values_mut() {
            if let Some(t) = c.reader.trace_mut() {
                self.shaders.name_pipelines(t);
            }
        }
    }

    /// The parsed traces, by path.
    pub fn traces(&self) -> impl Iterator<Item = &TraceFile> {
        self.files.values().filter_map(|c| c.reader.trace())
    }

    pub fn paths(&self) -> impl Iterator<Item = &PathBuf> {
        self.files.keys()
    }

    pub fn errors(&self) -> impl Iterator<Item = (&PathBuf, &String)> {
        self.files.iter().filter_map(|(p, c)| c.error.as_ref().map(|e| (p, e)))
    }

    /// Whether every file has been flushed past `t` (a window ending at or after it, or the end or truncated record).
    pub fn caught_up(&self, t: u64) -> bool {
        self.traces().all(|tr| tr.is_finished() || tr.windows.last().is_some_and(|w| w.t1 >= t))
    }

    /// The longest window length among the files' headers.
    pub fn interval_ms(&self) -> Option<u64> {
        self.traces().map(|t| t.header.interval_ms).max()
    }

    /// Wait until the observers have written what happened up to `t1`: every file has a window ending at or after
    /// `t1` (or its end record) and one window length has passed, so that a process that launched its first kernel
    /// just before `t1` has created its file. A process idle since before `t1` writes no further window, so the
    /// wait is bounded by two window lengths plus [`FLUSH_SLACK`]. Returns false when the bound ended it.
    pub fn wait_for(&mut self, t1: u64, interval_ms: u64) -> bool {
        let interval = interval_ms * 1_000_000;
        let settle = t1 + interval + 10_000_000;
        let bound = t1 + 2 * interval + FLUSH_SLACK.as_nanos() as u64;
        loop {
            self.refresh();
            let now = monotonic_ns();
            if now >= settle && self.caught_up(t1) {
                return true;
            }
            if now >= bound {
                return false;
            }
            std::thread::sleep(POLL);
        }
    }

    /// Forget windows that ended before `t`: later requests cannot overlap them.
    pub fn forget_before(&mut self, t: u64) {
        for c in self.files.values_mut() {
            if let Some(tr) = c.reader.trace_mut() {
                tr.windows.retain(|w| w.t1 >= t);
                tr.crashes.retain(|c| c.at_ns >= t);
                tr.device_lost.retain(|d| d.at_ns >= t);
            }
        }
    }
}

/// Feeds the lines appended to `path` since the last call; whether any line was fed.
fn update(path: &Path, cache: &mut FileCache) -> bool {
    if cache.error.is_some() {
        return false;
    }
    // A regular file only: a FIFO named like a trace would block this open, and the sweep with it.
    let Ok(crate::host::inputs::Input { file: mut f, .. }) = crate::host::inputs::open_input(path) else {
        return false;
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    if len <= cache.consumed {
        return false;
    }
    let mut bytes = Vec::new();
    if f.seek(SeekFrom::Start(cache.consumed)).is_err() || f.read_to_end(&mut bytes).is_err() {
        return false;
    }
    // Only whole lines: the observer writes whole lines, but a reader may catch a write halfway.
    let Some(cut) = bytes.iter().rposition(|&b| b == b'\n') else { return false };
    let chunk = String::from_utf8_lossy(&bytes[..cut]);
    for line in chunk.split('\n') {
        if let Err(e) = cache.reader.feed(line) {
            cache.error = Some(e.to_string());
            // The lines before the bad one were fed.
            return true;
        }
    }
    cache.consumed += cut as u64 + 1;
    true
}

/// Sum the kernels of every window overlapping `[t0, t1]` across `traces` (the processes of one server).
/// `label` turns a trace file's path into the path the record cites.
#[cfg(test)]
pub fn join(
    dir: &str,
    files: Vec<String>,
    traces: &[&TraceFile],
    label: &dyn Fn(&Path) -> String,
    window: [u64; 2],
    interval_ms: u64,
) -> RecordTrace {
    join_with(dir, files, traces, &ShaderIndex::default(), label, window, interval_ms)
}

/// [`join`], Vulkan pipelines described with the shaders `shaders` matched.
pub fn join_with(
    dir: &str,
    files: Vec<String>,
    traces: &[&TraceFile],
    shaders: &ShaderIndex,
    label: &dyn Fn(&Path) -> String,
    window: [u64; 2],
    interval_ms: u64,
) -> RecordTrace {
    let [t0, t1] = window;
    let shader_names = shaders.shaders_by_name(traces.iter().copied());
    let all = Aggregate::of(traces.iter().copied(), Range::Overlapping(t0, t1));
    let mut notes = Vec::new();
    let mut cut = Vec::new();
    let mut processes = Vec::new();
    for p in &all.processes {
        let file = p.path.as_deref().map(label).unwrap_or_default();
        if let Some(c) = p.cut.as_ref().filter(|c| c.at_ns <= t1) {
            notes.push(format!(
                "{file}: the observer stopped writing this trace before the request ended ({}); launches after that are not counted, so its counts are lower bounds",
                c.why()
            ));
            cut.push(file.clone());
        }
        if p.launches > 0 && p.unknown_graph_launches > 0 {
            notes.push(format!(
                "{file}: graph launches of graphs not captured under observation; their kernels are not counted"
            ));
        }
        processes.push(TraceProcess { pid: p.pid, ppid: p.ppid, exe: p.exe.clone(), file, launches: p.launches });
    }
    let crashes: Vec<TraceCrash> =
        TraceCrash::all_of(&all.crashes, |c| c.path.as_deref().map(label).unwrap_or_default());
    let device_lost: Vec<TraceDeviceLost> = all
        .device_lost
        .iter()
        .map(|d| TraceDeviceLost::new(d, d.path.as_deref().map(label).unwrap_or_default()))
        .collect();
    let hangs: Vec<crate::run::format::record::TraceHang> = all
        .hangs
        .iter()
        .map(|h| crate::run::format::record::TraceHang::new(h, h.path.as_deref().map(label).unwrap_or_default()))
        .collect();
    let mut kernels: Vec<TraceKernel> =
        all.kernels.into_iter().map(|s| TraceKernel::new(s, 0, &shader_names)).collect();
    let mut families: BTreeMap<String, u64> = BTreeMap::new();
    for k in &kernels {
        *families.entry(k.family.clone()).or_insert(0) += k.launches;
    }
    let distinct_kernels = kernels.len() as u64;
    kernels.truncate(TRACE_TOP_KERNELS);
    RecordTrace {
        dir: dir.to_string(),
        files,
        window_ns: window,
        interval_ms,
        spill_ns: all.spill_ns,
        observer_loaded: None,
        vulkan_layer: None,
        total_launches: all.total_launches,
        failed_launches: all.failed_launches,
        families,
        kernels,
        distinct_kernels,
        processes,
        cut,
        crashes,
        device_lost,
        hangs,
        kernel: Vec::new(),
        notes,
    }
}

/// Read, wait for the flush and join: what the runner calls after each request.
pub fn observe(
    td: &mut TraceDir,
    dir_label: &str,
    label: &dyn Fn(&Path) -> String,
    window: [u64; 2],
    interval_ms: u64,
) -> RecordTrace {
    let caught_up = td.wait_for(window[1], interval_ms);
    let interval_ms = td.interval_ms().unwrap_or(interval_ms);
    let files: Vec<String> = td.paths().map(|p| label(p)).collect();
    // The segments of a rotating trace are one process's (trace_reader::join_segments).
    let rotating = td.traces().any(|t| t.header.segment.is_some());
    let (joined, segment_problems) =
        if rotating { crate::trace::join_segments(td.traces().cloned().collect()) } else { Default::default() };
    let traces: Vec<&TraceFile> = if rotating { joined.iter().collect() } else { td.traces().collect() };
    let mut rec = join_with(dir_label, files, &traces, td.shaders(), label, window, interval_ms);
    for e in &segment_problems {
        rec.notes.push(format!("{}: {}; skipped", e.path.as_deref().map(label).unwrap_or_default(), e.message));
    }
    for (p, e) in td.errors() {
        rec.notes.push(format!("{}: not readable as a trace ({e}); skipped", label(p)));
    }
    if !caught_up && !traces.is_empty() {
        let behind: Vec<String> = traces
            .iter()
            // A process that died of a signal wrote its last window with the crash record.
            .filter(|t| {
                !t.is_finished() && t.fatal_crash().is_none() && t.windows.last().is_none_or(|w| w.t1 < window[1])
            })
            .filter_map(|t| t.path.as_deref().map(label))
            .collect();
        // Usual for a process idle since before the request ended (it writes no empty window); a process that
        // died without its exit flush loses its last window.
        if traces.iter().any(|t| !t.is_finished() && t.pid() > 0) && !behind.is_empty() {
            rec.notes.push(format!(
                "no window ends after the request in {}: the process was idle after its last launch, or stopped without flushing (waited {} ms)",
                behind.join(", "),
                (2 * interval_ms) + FLUSH_SLACK.as_millis() as u64
            ));
        }
    }
    td.forget_before(window[0]);
    rec
}

#[cfg(test)]
mod tests;
