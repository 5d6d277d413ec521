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
//! A server that dies of a signal while the observer is loaded leaves a `crash` record; a request during which one
//! arrived carries it (`RecordTrace::crashes`) with the last kernels each thread launched.

use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::Duration;

use trace_format::env;

use crate::run::record::{RecordTrace, TraceCrash, TraceDeviceLost, TraceKernel, TraceProcess, TRACE_TOP_KERNELS};
use crate::trace::{Aggregate, Range, Reader, TraceFile};
use crate::vulkan::ShaderIndex;

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

/// The Vulkan layer's variables for a managed server (`crate::observe::layer_env`): what the endpoint sets, else what
/// backscope runs with (`inherited`), keeps its place after the layer's.
pub fn vulkan_server_env(
    env: &mut Vec<(String, String)>,
    manifest_dir: &Path,
    inherited: impl Fn(&str) -> Option<String>,
) {
    let existing = |k: &str| env.iter().find(|(name, _)| name == k).map(|(_, v)| v.clone()).or_else(|| inherited(k));
    let vars = crate::observe::layer_env(manifest_dir, existing);
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
        for entry in rd.flatten() {
            let path = entry.path();
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            if trace_format::naming::is_trace_file_name(name) {
                let cache = self.files.entry(path.clone()).or_insert_with(|| FileCache {
                    consumed: 0,
                    reader: Reader::new(Some(&path)),
                    error: None,
                });
                fed |= update(&path, cache);
            }
        }
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
    let Ok(crate::inputs::Input { file: mut f, .. }) = crate::inputs::open_input(path) else { return false };
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
        notes,
    }
}

/// Families by launches, most first: `MMVQ 264, quantize 264`; `none` without launches.
pub fn families_text(t: &RecordTrace) -> String {
    if t.families.is_empty() {
        return "none".into();
    }
    let mut f: Vec<(&String, &u64)> = t.families.iter().collect();
    f.sort_by(|a, b| b.1.cmp(a.1).then_with(|| a.0.cmp(b.0)));
    f.iter().map(|(name, n)| format!("{name} {n}")).collect::<Vec<_>>().join(", ")
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
    let traces: Vec<&TraceFile> = td.traces().collect();
    let mut rec = join_with(dir_label, files, &traces, td.shaders(), label, window, interval_ms);
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
mod tests {
    use super::*;

    fn header(pid: u32, ppid: u32, exe: &str) -> String {
        format!(
            r#"{{"format":"backscope-trace","version":1,"pid":{pid},"ppid":{ppid},"exe":"{exe}","cmdline":[],"clock":"monotonic","start_ns":1000,"interval_ms":20,"shape_buckets":8,"max_kernels":1048576,"observer":"0.1.0"}}"#
        )
    }

    const MMVQ: &str = "_Z13mul_mat_vec_qIL9ggml_type12ELi1EEvPKvS2_PKiPfj";
    const MMQ: &str = "_ZL9mul_mat_qIL9ggml_type12ELi64ELb0EEvPKcPKiPfi";
    const QUANT: &str = "_Z13quantize_q8_1PKfPvllllllj";

    /// Server process 42: MMVQ + quantize in windows [1000,2000] (before), [2000,3000] (straddles t0=2500),
    /// [3000,4000] (inside), [6000,7000] (after). Runner 43 (child of 42): MMQ in [3500,4500].
    fn server_trace() -> String {
        [
            header(42, 1, "/usr/bin/llama-server"),
            format!(r#"{{"kernel":1,"name":"{MMVQ}","api":"cuda","source":"register"}}"#),
            format!(r#"{{"kernel":2,"name":"{QUANT}","api":"cuda","source":"register"}}"#),
            r#"{"window":[1000,2000],"counts":[[1,100]]}"#.into(),
            r#"{"window":[2000,3000],"counts":[[1,10],[2,10]],"graph":[[1,4]]}"#.into(),
            r#"{"window":[3000,4000],"counts":[[1,254],[2,254]],"errors":[[2,1]]}"#.into(),
            r#"{"window":[6000,7000],"counts":[[1,999]]}"#.into(),
        ]
        .join("\n")
            + "\n"
    }

    fn runner_trace() -> String {
        [
            header(43, 42, "/usr/lib/ollama/runner"),
            format!(r#"{{"kernel":1,"name":"{MMQ}","api":"cuda","source":"register"}}"#),
            format!(r#"{{"kernel":2,"name":"{MMVQ}","api":"cuda","source":"register"}}"#),
            r#"{"window":[3500,4500],"counts":[[1,7],[2,6]]}"#.into(),
        ]
        .join("\n")
            + "\n"
    }

    fn label(p: &Path) -> String {
        p.display().to_string()
    }

    #[test]
    fn joins_partially_overlapping_windows_across_processes() {
        let a = TraceFile::parse(&server_trace()).unwrap();
        let b = TraceFile::parse(&runner_trace()).unwrap();
        let j = join("traces/s001-x", vec![], &[&a, &b], &label, [2500, 4200], 20);
        // [2000,3000] straddles t0 and counts; [1000,2000] and [6000,7000] do not.
        let mmvq = j.kernels.iter().find(|k| k.family == "MMVQ").unwrap();
        assert_eq!(mmvq.launches, 10 + 254 + 6, "both processes' launches of one kernel name merge");
        assert_eq!(mmvq.graph, 4);
        assert_eq!(mmvq.ggml_type.as_deref(), Some("Q4_K"));
        assert!(mmvq.demangled.starts_with("mul_mat_vec_q<"), "{}", mmvq.demangled);
        assert_eq!(j.families.get("MMQ"), Some(&7));
        assert_eq!(j.total_launches, 270 + 264 + 7);
        assert_eq!(j.failed_launches, 1);
        assert_eq!(j.distinct_kernels, 3);
        assert_eq!(j.kernels[0].launches, 270, "most launched first");
        // The straddling window began 500 ns before t0; the runner's ran 300 ns past t1.
        assert_eq!(j.spill_ns, [500, 300]);
        assert_eq!(
            j.processes.iter().map(|p| (p.pid, p.ppid, p.launches)).collect::<Vec<_>>(),
            [(42, 1, 528), (43, 42, 13)]
        );
        assert_eq!(families_text(&j), "MMVQ 270, quantize 264, MMQ 7");
        // A request entirely inside one window: exact to one window.
        let j = join("d", vec![], &[&a], &label, [3100, 3200], 20);
        assert_eq!(j.total_launches, 508);
        assert_eq!(j.spill_ns, [100, 800]);
        // A request in an idle gap: nothing.
        let j = join("d", vec![], &[&a, &b], &label, [5000, 5500], 20);
        assert_eq!((j.total_launches, j.kernels.len(), families_text(&j).as_str()), (0, 0, "none"));
    }

    #[test]
    fn traced_records_get_a_claim_and_a_kernels_column() {
        let a = TraceFile {
            path: Some(PathBuf::from("/runs/r/traces/s001-cuda/trace-42.jsonl")),
            ..TraceFile::parse(&server_trace()).unwrap()
        };
        let label = |p: &Path| p.strip_prefix("/runs/r").unwrap().display().to_string();
        let mut rec = crate::run::store::tests::record("r", "cuda|m|ngl=99|p|n=1|e1|r3", 2);
        rec.endpoint = "cuda".into();
        rec.num_gpu = 99;
        rec.repetition = 3;
        rec.trace = Some(join("traces/s001-cuda", vec![], &[&a], &label, [3100, 3900], 20));
        let mut cpu = crate::run::store::tests::record("r", "cpu|m|ngl=0|p|n=1|e1|r1", 3);
        cpu.endpoint = "cpu".into();
        cpu.trace = Some(RecordTrace {
            observer_loaded: Some(true),
            ..join("traces/s002-cpu", vec![], &[], &label, [5000, 6000], 20)
        });
        let claims = crate::sweep::report::claims(&[rec.clone(), cpu.clone()], Path::new("/runs/r"));
        let k: Vec<&crate::evidence::Claim> = claims.iter().filter(|c| c.id.ends_with(".kernels")).collect();
        assert_eq!(k.len(), 2);
        assert_eq!(k[0].confidence, crate::evidence::Confidence::Confirmed);
        assert!(
            k[0].statement.starts_with(
                "request e1r3 of `cuda` at num_gpu=99 ran 508 kernel launches in 1 process(es): 254 mul_mat_vec_q<Q4_K, 1> launches"
            ),
            "{}",
            k[0].statement
        );
        assert!(k[0].statement.contains("(MMVQ 254, quantize 254) and no MMQ, no MMVF, no MMF"), "{}", k[0].statement);
        assert!(
            matches!(&k[0].sources[0], crate::evidence::Source::File { path, .. } if path == "/runs/r/traces/s001-cuda/trace-42.jsonl")
        );
        assert!(k[1].statement.contains("no CUDA/HIP kernel launch was observed"), "{}", k[1].statement);
        let text = crate::sweep::report::render("r", "/runs/r", &[rec, cpu], &claims);
        assert!(text.contains("kernels (per request)") && text.contains("MMVQ 254, quantize 254"), "{text}");
    }

    #[test]
    fn no_trace_file_gives_an_empty_join() {
        let j = join("traces/s001-cpu", vec![], &[], &label, [1, 2], 20);
        assert_eq!(j.total_launches, 0);
        assert!(j.processes.is_empty() && j.files.is_empty());
        let dir = tempfile::tempdir().unwrap();
        let mut td = TraceDir::new(dir.path().join("missing"));
        let t1 = monotonic_ns();
        let j = observe(&mut td, "x", &label, [t1 - 1000, t1], 5);
        assert_eq!(j.total_launches, 0);
        assert!(j.notes.is_empty(), "{:?}", j.notes);
    }

    #[test]
    fn reads_growing_files_incrementally_and_tolerates_a_cut_last_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("trace-42.jsonl");
        let full = server_trace();
        // First the header, definitions and two windows, then half of the third window's line.
        let cut = full.find(r#"{"window":[3000"#).unwrap();
        std::fs::write(&path, format!("{}{}", &full[..cut], r#"{"window":[3000,40"#)).unwrap();
        let mut td = TraceDir::new(dir.path().to_path_buf());
        td.refresh();
        let t = td.traces().next().unwrap();
        assert_eq!(t.windows.len(), 2, "the cut line waits for its end");
        assert!(!td.caught_up(3500));
        std::fs::write(&path, &full).unwrap();
        std::fs::write(dir.path().join("trace-43.jsonl"), runner_trace()).unwrap();
        td.refresh();
        assert_eq!(td.traces().map(|t| t.windows.len()).collect::<Vec<_>>(), [4, 1]);
        assert!(td.caught_up(4500));
        let files: Vec<String> = td.paths().map(|p| label(p)).collect();
        let traces: Vec<&TraceFile> = td.traces().collect();
        let j = join("d", files, &traces, &label, [2500, 4200], 20);
        assert_eq!(j.total_launches, 270 + 264 + 7, "the same as parsing whole files");
        assert_eq!(j.files.len(), 2);
        // A later chunk that uses kernels defined in an earlier one, and the end record.
        let more = format!(
            "{full}{}\n{}\n",
            r#"{"window":[7000,8000],"counts":[[2,5]]}"#, r#"{"end_ns":8100,"reason":"exit"}"#
        );
        std::fs::write(&path, more).unwrap();
        td.refresh();
        td.forget_before(7500);
        let t = td.traces().next().unwrap();
        assert_eq!(t.windows.len(), 1);
        assert!(t.end.is_some());
        // A file that is not a trace is reported, not fatal.
        std::fs::write(dir.path().join("trace-9.jsonl"), "not json\n").unwrap();
        td.refresh();
        assert_eq!(td.errors().count(), 1);
    }

    #[test]
    fn a_cut_trace_counts_as_flushed_and_its_counts_are_noted_as_lower_bounds() {
        let cut = format!(
            "{}{}\n",
            server_trace().replace(r#""version":1"#, r#""version":2"#),
            r#"{"truncated":"budget","at_ns":7500,"bytes":900,"max_bytes":1024}"#
        );
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("trace-42.jsonl"), cut).unwrap();
        let mut td = TraceDir::new(dir.path().to_path_buf());
        td.refresh();
        // Nothing more will be written: no request after the cut waits for a flush that never comes.
        assert!(td.caught_up(1_000_000));
        let traces: Vec<&TraceFile> = td.traces().collect();
        let before = join("d", vec![], &traces, &label, [3100, 3900], 20);
        assert!(before.notes.is_empty(), "a request before the cut is complete: {:?}", before.notes);
        let after = join("d", vec![], &traces, &label, [8000, 9000], 20);
        assert_eq!(after.total_launches, 0);
        assert_eq!(after.notes.len(), 1);
        assert!(after.notes[0].contains("budget of 1024 bytes") && after.notes[0].contains("lower bounds"));
        assert!(before.cut.is_empty());
        assert_eq!(after.cut, [dir.path().join("trace-42.jsonl").display().to_string()]);
    }

    #[test]
    fn claims_from_a_cut_trace_are_lower_bounds_and_never_claim_absence() {
        let cut = format!(
            "{}{}\n",
            server_trace().replace(r#""version":1"#, r#""version":2"#),
            r#"{"truncated":"budget","at_ns":7500,"bytes":900,"max_bytes":1024}"#
        );
        let mut t = TraceFile::parse(&cut).unwrap();
        t.path = Some(PathBuf::from("/runs/r/traces/s001-cuda/trace-42.jsonl"));
        let label = |p: &Path| p.strip_prefix("/runs/r").unwrap().display().to_string();
        let rec = |rep: u32, window: [u64; 2]| {
            let mut r = crate::run::store::tests::record("r", &format!("cuda|m|ngl=99|p|n=1|e1|r{rep}"), rep as u64);
            r.endpoint = "cuda".into();
            r.repetition = rep;
            r.trace = Some(join("traces/s001-cuda", vec![], &[&t], &label, window, 20));
            r
        };
        // Before the cut, across it (the window [6000,7000] counts, the cut at 7500 comes before the end), after it.
        let records = [rec(1, [3100, 3900]), rec(2, [6500, 8000]), rec(3, [8000, 9000])];
        let claims = crate::sweep::report::claims(&records, Path::new("/runs/r"));
        let k: Vec<&crate::evidence::Claim> = claims.iter().filter(|c| c.id.ends_with(".kernels")).collect();
        use crate::evidence::Confidence;
        assert_eq!(k[0].confidence, Confidence::Confirmed);
        assert!(k[0].statement.contains(" ran 508 kernel launches") && k[0].statement.contains("and no MMQ"));
        assert_eq!(k[1].confidence, Confidence::Limited, "{}", k[1].statement);
        assert!(k[1].statement.contains(" ran at least 999 kernel launches"), "{}", k[1].statement);
        assert!(!k[1].statement.contains("no MMQ"), "absence is not established by a cut trace: {}", k[1].statement);
        assert!(
            k[1].statement.contains("lower bounds: the observer stopped writing traces/s001-cuda/trace-42.jsonl"),
            "{}",
            k[1].statement
        );
        assert_eq!(k[2].confidence, Confidence::Unresolved, "{}", k[2].statement);
        assert!(!k[2].statement.contains("no CUDA/HIP kernel launch was observed"), "{}", k[2].statement);
        assert!(k[2].statement.contains("launches during the request are unknown"), "{}", k[2].statement);
        let text = crate::sweep::report::render("r", "/runs/r", &records, &claims);
        assert!(text.contains("(trace cut: lower bounds)"), "{text}");
    }

    /// A Vulkan server process that lost its device and then aborted, as the observer and the Vulkan layer write
    /// it (the layer's lines as crates/vklayer writes them, tests/vulkan_crash.rs runs it for real).
    #[test]
    fn a_vulkan_crash_and_a_lost_device_join_their_request_as_one_crash_claim_and_a_device_lost_claim() {
        let header = |writer: &str| {
            format!(
                r#"{{"format":"backscope-trace","version":3,"pid":77,"ppid":1,"exe":"/bin/llama-server","cmdline":[],"clock":"monotonic","start_ns":1000,"interval_ms":20,"shape_buckets":8,"max_kernels":1024,"max_bytes":0,"observer":"0.1.0","writer":"{writer}"}}"#
            )
        };
        let observer = format!(
            "{}\n{}\n",
            header("backscope-observer"),
            r#"{"crash":6,"signal":"SIGABRT","code":-6,"addr":0,"sender_pid":77,"at_ns":5000,"seq":1,"tid":77,"flushed":false,"threads":[{"tid":77,"launches":[]}]}"#
        );
        let queues = r#""queues":[{"queue":0,"device":0,"submits":9,"dispatches":[[1,8,[8,2,1],1],[2,9,[1,1,1],1]]}]"#;
        let layer = [
            header("backscope-vklayer"),
            r#"{"device":0,"api":"vulkan","name":"AMD Radeon RX Vega (RADV VEGA10)"}"#.to_string(),
            r#"{"kernel":1,"name":"matmul_q4_k_f32_l","api":"vulkan","source":"debug_name","device":0}"#.to_string(),
            r#"{"kernel":2,"name":"add_f32","api":"vulkan","source":"debug_name","device":0}"#.to_string(),
            r#"{"window":[1000,4000],"counts":[[1,8],[2,9]],"submits":9}"#.to_string(),
            format!(r#"{{"device_lost":"vkWaitForFences","result":-4,"at_ns":4500,"seq":1,"tid":78,{queues}}}"#),
            format!(
                r#"{{"crash":6,"signal":"SIGABRT","code":-6,"addr":0,"sender_pid":77,"at_ns":4990,"seq":1,"tid":77,"flushed":true,"threads":[{{"tid":77,"launches":[]}},{{"tid":78,"in_flight":"vkWaitForFences","launches":[]}}],{queues}}}"#
            ),
        ]
        .join("\n");
        let mut a = TraceFile::parse(&observer).unwrap();
        a.path = Some(PathBuf::from("/runs/r/traces/s001-vk/trace-77.jsonl"));
        let mut b = TraceFile::parse(&layer).unwrap();
        b.path = Some(PathBuf::from("/runs/r/traces/s001-vk/trace-77.1.jsonl"));
        let label = |p: &Path| p.strip_prefix("/runs/r").unwrap().display().to_string();
        let mut rec = crate::run::store::tests::record("r", "vk|m|ngl=1|p|n=1|e1|r1", 1);
        rec.endpoint = "vk".into();
        rec.trace = Some(join("traces/s001-vk", vec![], &[&a, &b], &label, [3000, 6000], 20));
        let t = rec.trace.as_ref().unwrap();
        assert_eq!(
            t.crashes.len(),
            1,
            "the observer's and the layer's records of one signal are one: {:#?}",
            t.crashes
        );
        assert_eq!(t.crashes[0].vulkan_file.as_deref(), Some("traces/s001-vk/trace-77.1.jsonl"));
        assert_eq!(t.crashes[0].threads[1].in_flight.as_deref(), Some("vkWaitForFences"));
        assert_eq!(t.device_lost.len(), 1);
        let claims = crate::sweep::report::claims(&[rec.clone()], Path::new("/runs/r"));
        let crash = claims.iter().find(|c| c.id.ends_with(".trace_crash")).expect("a crash claim");
        assert_eq!(crash.confidence, crate::evidence::Confidence::Confirmed);
        assert!(
            crash.statement.contains(
                "the last Vulkan dispatches before the crash were: queue 0 (AMD Radeon RX Vega (RADV VEGA10)), \
                 submissions 8–9 of 9: 1× matmul_q4_k_f32_l"
            ) && crash.statement.ends_with("1× add_f32 (ADD) [1,1,1]; the last: add_f32 (ADD)"),
            "{}",
            crash.statement
        );
        assert_eq!(crash.sources.len(), 3, "both trace files and the run: {:?}", crash.sources);
        let lost = claims.iter().find(|c| c.id.ends_with(".trace_device_lost")).expect("a device-lost claim");
        assert!(
            lost.statement
                .contains("pid 77 (/bin/llama-server): vkWaitForFences returned VK_ERROR_DEVICE_LOST in thread 78"),
            "{}",
            lost.statement
        );
        // A request that began after both records carries neither.
        let later = join("traces/s001-vk", vec![], &[&a, &b], &label, [7000, 8000], 20);
        assert!(later.crashes.is_empty() && later.device_lost.is_empty());
    }

    #[test]
    fn server_env_preloads_the_observer_before_an_existing_preload() {
        let mut env = vec![("LD_PRELOAD".to_string(), "/lib/a.so".to_string()), ("X".into(), "1".into())];
        server_env(&mut env, Path::new("/o/libbackscope_observer.so"), Path::new("/r/traces/s001-x"), 20, None);
        assert!(env.contains(&("LD_PRELOAD".into(), "/o/libbackscope_observer.so:/lib/a.so".into())));
        assert!(env.contains(&("BACKSCOPE_TRACE_DIR".into(), "/r/traces/s001-x".into())));
        assert!(env.contains(&("BACKSCOPE_TRACE_INTERVAL_MS".into(), "20".into())));
        let mut env = Vec::new();
        server_env(&mut env, Path::new("/o/l.so"), Path::new("/d"), 5, Some("/lib/b.so".into()));
        assert_eq!(env[0], ("LD_PRELOAD".into(), "/o/l.so:/lib/b.so".into()));
        assert!(monotonic_ns() > 0);
    }
}
