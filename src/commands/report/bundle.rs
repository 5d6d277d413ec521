//! The evidence bundle (`backscope report --bundle DIR|FILE.tar.gz`): one directory or archive to attach to an
//! upstream bug report. It holds the report (Markdown, HTML, JSON), the environment (versions, GPUs, drivers,
//! environment overrides, what each server program said about itself), the discovery lines of the server logs,
//! the failing cells with their records, log slices and timelines, the logs of the servers involved, and the
//! scan facts of the runtime's libraries when the run's plan names where they are.
//!
//! Nothing secret leaves: every text file goes through [`super::redact`] (JSON structurally, then every file by
//! the shapes of secrets), and the README says how many values were replaced. Files are copied only from inside
//! the run directory (a record's paths are relative to it; one that climbs out is left out), each up to a size
//! cap, and the bundle as a whole too.

use std::collections::BTreeSet;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde_json::Value;

use super::input::{lexically_inside, read_run_json, run_file};
use super::timeline::{self, CellTimeline};
use super::view::ReportView;
use crate::evidence::Source;
use crate::output::redact;
use crate::output::{self, Column, Document, Excerpt, Format, Render, Table, Text};
use crate::run::format::record::Record;
use crate::run::format::run_dir::RunDir;

/// Largest file copied into a bundle; a larger one is listed as left out.
const FILE_CAP: u64 = 16 << 20;
/// Largest bundle, before compression.
const TOTAL_CAP: u64 = 256 << 20;
/// Failing cells whose record, slice and timeline go in.
const FAILED_CELLS: usize = 64;
/// Discovery lines kept per server log.
const DISCOVERY_LINES: usize = 40;
/// Most files of a runtime's directory scanned, and most bytes: a llama.cpp `bin` holds a dozen libraries, an
/// Ollama `lib/ollama` a few dozen (some of hundreds of MB).
const SCAN_FILES: usize = 64;
const SCAN_BYTES: u64 = 8 << 30;

/// One file of the bundle.
#[derive(Debug)]
struct Entry {
    /// Path inside the bundle (relative, `/`-separated, no `..`).
    path: String,
    bytes: Vec<u8>,
    what: String,
}

/// What was written.
#[derive(Debug)]
pub struct Written {
    pub path: PathBuf,
    pub files: usize,
    pub bytes: u64,
    pub redacted: usize,
    pub left_out: Vec<String>,
}

#[derive(Debug, Default)]
struct Builder {
    entries: Vec<Entry>,
    total: u64,
    redacted: usize,
    left_out: Vec<String>,
}

impl Builder {
    /// Adds a text file, redacted.
    fn text(&mut self, path: &str, text: &str, what: impl Into<String>) {
        let (clean, n) = redact::text(text);
        self.redacted += n;
        self.push(path, clean.into_bytes(), what.into());
    }

    /// Adds a JSON file, redacted structurally and then as text.
    fn json(&mut self, path: &str, mut v: Value, what: impl Into<String>) {
        self.redacted += redact::json(&mut v);
        let text = serde_json::to_string_pretty(&v).unwrap_or_default();
        self.text(path, &(text + "\n"), what);
    }

    fn push(&mut self, path: &str, bytes: Vec<u8>, what: String) {
        // Every name is checked here, whoever built it: nothing is written outside the bundle.
        if lexically_inside(path).is_none_or(|p| bundle_path(&p) != path) {
            self.left_out.push(format!("{path} (not a path inside the bundle)"));
            return;
        }
        if self.entries.iter().any(|e| e.path == path) {
            return;
        }
        if self.total + bytes.len() as u64 > TOTAL_CAP {
            self.left_out.push(format!(
                "{path} ({} bytes: the bundle would pass {} MiB)",
                bytes.len(),
                TOTAL_CAP >> 20
            ));
            return;
        }
        self.total += bytes.len() as u64;
        self.entries.push(Entry { path: path.to_string(), bytes, what });
    }

    /// Copies a file of the run directory (`rel` relative to it) to the same relative path in the bundle: only a
    /// regular file that is inside the run directory with its symlinks resolved ([`run_file`]), up to [`FILE_CAP`].
    fn copy(&mut self, run_dir: &Path, rel: &str, what: impl Into<String>) {
        let path = match run_file(run_dir, rel) {
            Ok(p) => p,
            Err(why) => {
                self.left_out.push(why);
                return;
            }
        };
        let Some(inside) = lexically_inside(rel) else { return };
        match crate::host::inputs::read_limited(&path, FILE_CAP) {
            Ok(bytes) => {
                // A record is JSON: redacted by its structure (a command line's `"--api-key", "…"`) first.
                let json = rel.ends_with(".json").then(|| serde_json::from_slice::<Value>(&bytes).ok()).flatten();
                match json {
                    Some(v) => self.json(&bundle_path(&inside), v, what),
                    None => self.text(&bundle_path(&inside), &String::from_utf8_lossy(&bytes), what),
                }
            }
            Err(e) => self.left_out.push(e.to_string()),
        }
    }
}

fn bundle_path(p: &Path) -> String {
    p.components().map(|c| c.as_os_str().to_string_lossy().into_owned()).collect::<Vec<_>>().join("/")
}

fn markdown(doc: &Document) -> String {
    output::render_document(doc, Format::Markdown, output::text::Layout { width: 100, all: true })
}

/// The runtime files of one directory the bundle scans.
#[derive(Debug, PartialEq)]
pub struct LibraryFiles {
    pub dir: PathBuf,
    pub files: Vec<PathBuf>,
    pub endpoints: Vec<String>,
}

/// The runtime files the plan names, by directory, with notes on what was not scanned. A run's plan can name any
/// program (`program: "/"` is only text in a JSON file), so the scan is held to what a runtime is: the program
/// itself when it is a regular file, and the shared libraries (`*.so*`, regular files) beside it — a llama.cpp
/// build's `bin` holds its `libggml-*.so` — plus, for Ollama, those of `lib/ollama` beside its `bin` and of that
/// directory's own subdirectories (`cuda_v12/`, `rocm/`), one level deep. Nothing else is walked, and at most
/// [`SCAN_FILES`] files and [`SCAN_BYTES`] bytes are scanned in all.
pub fn library_files(plan: Option<&Value>) -> (Vec<LibraryFiles>, Vec<String>) {
    let mut out: Vec<LibraryFiles> = Vec::new();
    let mut notes = Vec::new();
    let Some(endpoints) = plan.and_then(|p| p.get("endpoints")).and_then(Value::as_array) else { return (out, notes) };
    let (mut count, mut bytes) = (0usize, 0u64);
    let mut seen: BTreeSet<PathBuf> = BTreeSet::new();
    for e in endpoints {
        let name = e.get("name").and_then(Value::as_str).unwrap_or("endpoint").to_string();
        let kind = e.get("kind");
        let Some(program) = kind.and_then(|k| k.get("program")).and_then(Value::as_str) else { continue };
        if !Path::new(program).is_absolute() {
            continue;
        }
        let program = match std::fs::canonicalize(program) {
            Ok(p) if p.is_file() => p,
            _ => {
                notes.push(format!("{program} (endpoint {name}'s program is not a regular file: nothing scanned)"));
                continue;
            }
        };
        let Some(bin) = program.parent() else { continue };
        let preset = kind.and_then(|k| k.get("preset")).and_then(Value::as_str).unwrap_or("");
        let mut dirs: Vec<(PathBuf, Vec<PathBuf>)> = vec![(bin.to_path_buf(), vec![program.clone()])];
        if preset == "ollama" {
            if let Some(prefix) = bin.parent() {
                dirs.insert(0, (prefix.join("lib/ollama"), Vec::new()));
            }
        }
        for (dir, mut files) in dirs {
            let depth = if dir.ends_with("lib/ollama") { 1 } else { 0 };
            shared_libraries(&dir, depth, &mut files);
            let (mut kept, mut past) = (Vec::new(), Vec::new());
            for f in files {
                if !seen.insert(f.clone()) {
                    continue;
                }
                let size = std::fs::metadata(&f).map_or(0, |m| m.len());
                if count >= SCAN_FILES || bytes + size > SCAN_BYTES {
                    past.push(f);
                    continue;
                }
                count += 1;
                bytes += size;
                kept.push(f);
            }
            if let Some(first) = past.first() {
                notes.push(format!(
                    "{} and {} more file(s) of {} (past the scan budget of {SCAN_FILES} files and {} GiB)",
                    first.display(),
                    past.len() - 1,
                    dir.display(),
                    SCAN_BYTES >> 30
                ));
            }
            match out.iter_mut().find(|l| l.dir == dir) {
                Some(l) => {
                    l.files.extend(kept);
                    if !l.endpoints.contains(&name) {
                        l.endpoints.push(name.clone());
                    }
                }
                None if !kept.is_empty() => out.push(LibraryFiles { dir, files: kept, endpoints: vec![name.clone()] }),
                None => {}
            }
        }
    }
    (out, notes)
}

/// The shared libraries directly in `dir` (regular files whose name holds `.so`), sorted by name, and those of its
/// subdirectories down to `depth` levels.
fn shared_libraries(dir: &Path, depth: usize, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let mut names: Vec<(String, std::fs::FileType)> =
        entries.flatten().filter_map(|e| Some((e.file_name().to_str()?.to_string(), e.file_type().ok()?))).collect();
    names.sort_by(|a, b| a.0.cmp(&b.0));
    let mut subdirs = Vec::new();
    for (name, t) in names {
        let path = dir.join(&name);
        if t.is_dir() {
            subdirs.push(path);
        } else if name.contains(".so") && std::fs::metadata(&path).is_ok_and(|m| m.is_file()) {
            out.push(path);
        }
    }
    if depth > 0 {
        for d in subdirs {
            shared_libraries(&d, depth - 1, out);
        }
    }
}

/// The environment snapshot as a document: versions, host, GPUs, drivers, overrides, and what each server
/// program said about itself (`--version`, `--list-devices`).
fn environment_doc(env: &Value, run: &Value) -> Document {
    let mut doc = Document::new("Environment of the run");
    let s = |v: &Value| match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    };
    let mut facts: Vec<(String, Text)> = vec![
        ("backscope".into(), s(&env["backscope_version"]).into()),
        ("captured".into(), s(&env["captured_at"]).into()),
        ("OS".into(), s(&env["os"]).into()),
        (
            "kernel".into(),
            format!(
                "{} {} ({})",
                s(&env["uname"]["sysname"]),
                s(&env["uname"]["release"]),
                s(&env["uname"]["machine"])
            )
            .into(),
        ),
        ("CPU".into(), format!("{} ({} logical)", s(&env["cpu"]["model"]), s(&env["cpu"]["logical_cpus"])).into()),
        ("memory".into(), format!("{} KiB", s(&env["memory_total_kib"])).into()),
        ("NVIDIA driver".into(), s(&env["drivers"]["nvidia"]).into()),
        ("amdgpu driver".into(), s(&env["drivers"]["amdgpu"]).into()),
        ("device nodes".into(), s(&env["device_nodes"]).into()),
    ];
    if let Some(argv) = run.get("argv").and_then(Value::as_array) {
        let line: Vec<String> = argv.iter().map(s).collect();
        facts.push(("command".into(), Text::code(line.join(" "))));
    }
    doc.push(output::Block::Facts(facts));
    doc.heading(2, "GPUs (/sys/class/drm)");
    let mut gpus = Table::new(vec![
        Column::keep("card"),
        Column::keep("vendor"),
        Column::keep("device"),
        Column::keep("driver"),
        Column::text("product"),
        Column::number("VRAM bytes"),
    ]);
    for g in env["gpus"].as_array().into_iter().flatten() {
        gpus.row([
            s(&g["card"]),
            s(&g["vendor"]),
            s(&g["device"]),
            s(&g["driver"]),
            s(&g["product"]),
            s(&g["vram_total_bytes"]),
        ]);
    }
    doc.push(gpus);
    doc.heading(2, "Environment variables that steer runtimes");
    let env_lines: Vec<String> =
        env["env"].as_object().into_iter().flatten().map(|(k, v)| format!("{k}={}", s(v))).collect();
    if env_lines.is_empty() {
        doc.paragraph("none set");
    } else {
        doc.push(Excerpt::verbatim(env_lines));
    }
    for (name, e) in env["endpoints"].as_object().into_iter().flatten() {
        doc.heading(2, format!("Endpoint {name}"));
        let mut facts: Vec<(String, Text)> = Vec::new();
        for key in ["preset", "program", "url", "api", "log_file"] {
            if let Some(v) = e.get(key).filter(|v| !v.is_null()) {
                facts.push((key.into(), Text::code(s(v))));
            }
        }
        let overrides: Vec<String> =
            e["env"].as_object().into_iter().flatten().map(|(k, v)| format!("{k}={}", s(v))).collect();
        if !overrides.is_empty() {
            facts.push(("environment overrides".into(), Text::code(overrides.join(" "))));
        }
        doc.push(output::Block::Facts(facts));
        for probe in e["probes"].as_array().into_iter().flatten() {
            let argv: Vec<String> = probe["argv"].as_array().into_iter().flatten().map(s).collect();
            let out = probe.get("output").or(probe.get("error")).map(s).unwrap_or_default();
            doc.push(Excerpt {
                caption: Some(format!("{} ({})", argv.join(" "), s(&probe["exit"]))),
                lines: out.lines().map(str::to_string).collect(),
                verbatim: true,
                ..Default::default()
            });
        }
    }
    for tool in env["tools"].as_array().into_iter().flatten() {
        let argv: Vec<String> = tool["argv"].as_array().into_iter().flatten().map(s).collect();
        doc.heading(2, argv.join(" "));
        let out = tool.get("output").or(tool.get("error")).map(s).unwrap_or_default();
        doc.push(Excerpt::verbatim(out.lines().map(str::to_string)));
    }
    doc
}

/// Discovery lines of each server log: backends loaded, devices found, layers offloaded, flash attention,
/// inference compute.
fn discovery_doc(run_dir: &Path, logs: &[String], redacted: &mut usize) -> Document {
    let mut doc = Document::new("Discovery lines of the server logs");
    doc.paragraph("What each server said about its backends, devices and offload, with the line numbers of its log (read by backscope-logs).");
    for rel in logs {
        let Ok(path) = run_file(run_dir, rel) else { continue };
        let Ok(crate::host::inputs::Input { file, .. }) = crate::host::inputs::open_input(&path) else { continue };
        let Ok(report) = logs::analyze_reader(file, logs::Limits::default()) else { continue };
        let f = &report.facts;
        let mut wanted: BTreeSet<u64> = BTreeSet::new();
        wanted.extend(f.backends.iter().map(|b| b.line));
        wanted.extend(f.devices.iter().map(|d| d.line));
        wanted.extend(f.offload.iter().map(|o| o.line));
        wanted.extend(f.flash_attention.iter().map(|a| a.line));
        wanted.extend(f.graph.iter().map(|g| g.line));
        wanted.extend(
            report
                .timeline
                .iter()
                .filter(|e| e.kind.contains("discovery") || e.kind.contains("compute"))
                .map(|e| e.line),
        );
        let picked: Vec<&logs::analysis::TimelineEntry> =
            report.timeline.iter().filter(|e| wanted.contains(&e.line)).take(DISCOVERY_LINES).collect();
        doc.heading(2, rel.clone());
        if picked.is_empty() {
            doc.paragraph("no discovery line recognised");
            continue;
        }
        doc.push(Excerpt {
            file: Some(rel.clone()),
            line_numbers: picked.iter().map(|e| e.line).collect(),
            // Redacted before Markdown escapes them (`:` becomes `\:`, and the shapes no longer read).
            lines: picked
                .iter()
                .map(|e| {
                    let (line, n) = redact::text(&e.raw);
                    *redacted += n;
                    line
                })
                .collect(),
            ..Default::default()
        });
    }
    doc
}

/// A cell's timeline as a document of its own.
fn timeline_doc(t: &CellTimeline) -> Document {
    let mut doc = Document::new(format!("Cell {} — {} at num_gpu={}: {}", t.seq, t.endpoint, t.num_gpu, t.outcome));
    let mut facts: Vec<(String, Text)> = vec![("log".into(), Text::code(&t.log))];
    if let Some(c) = &t.crash {
        facts.push(("crash".into(), format!("{} (line {})", c.what, c.line).into()));
        facts.push(("phase".into(), format!("{} — {}", c.phase, c.phase_rule).into()));
        facts.push(("signature".into(), Text::code(&c.signature).and_plain(format!(" {}", c.signature_text))));
    }
    doc.push(output::Block::Facts(facts));
    let mut table =
        Table::new(vec![Column::number("time"), Column::number("line"), Column::keep("event"), Column::text("what")]);
    for (i, e) in t.entries.iter().enumerate() {
        if t.elided_at == Some(i) {
            table.row(["…".to_string(), "…".into(), "…".into(), format!("{} entries not kept", t.elided)]);
        }
        table.row([
            e.t.map_or("-".into(), |t| format!("+{t:.3}s")),
            e.line.to_string(),
            e.kind.clone(),
            e.summary.clone(),
        ]);
    }
    doc.push(table);
    doc
}

/// A copy of the report whose log and file paths under the run directory are relative to it (the bundle keeps
/// the run directory's layout, so that is where a reader of the bundle finds them), and whose texts from logs and
/// records are redacted one by one: once rendered, a log line's quotes are `&quot;` in HTML and its JSON is
/// escaped in JSON, where the shapes of secrets no longer read as they do in the log.
fn relocated(view: &ReportView, redacted: &mut usize) -> ReportView {
    let prefix = format!("{}/", view.run.run_dir.trim_end_matches('/'));
    let strip = |p: &mut String| {
        if let Some(rel) = p.strip_prefix(&prefix) {
            *p = rel.to_string();
        }
    };
    let mut v = view.clone();
    for c in &mut v.claims {
        for s in &mut c.sources {
            if let Source::File { path, .. } | Source::LogLine { path, .. } = s {
                strip(path);
            }
        }
    }
    for t in &mut v.timelines {
        strip(&mut t.log);
        if let Some(s) = t.slice.as_mut() {
            strip(s);
        }
    }
    for c in &mut v.claims {
        if let Ok(mut value) = serde_json::to_value(&*c) {
            let n = redact::json(&mut value);
            if n > 0 {
                if let Ok(back) = serde_json::from_value(value) {
                    *c = back;
                    *redacted += n;
                }
            }
        }
    }
    for t in &mut v.timelines {
        *redacted += redact_timeline(t);
    }
    let mut clean = |s: &mut String| {
        let (c, n) = redact::text(s);
        if n > 0 {
            *s = c;
            *redacted += n;
        }
    };
    v.problems.iter_mut().for_each(&mut clean);
    v
}

/// Redacts the texts of a timeline that come from its log (each entry, the crash), before a renderer escapes them;
/// returns how many values were replaced.
fn redact_timeline(t: &mut CellTimeline) -> usize {
    let mut n = 0;
    let mut clean = |s: &mut String| {
        let (c, k) = redact::text(s);
        if k > 0 {
            *s = c;
            n += k;
        }
    };
    for e in &mut t.entries {
        clean(&mut e.summary);
    }
    if let Some(c) = t.crash.as_mut() {
        clean(&mut c.what);
        clean(&mut c.signature_text);
    }
    n
}

/// Builds the bundle of `view` and writes it to `dest`: a directory (created; refused if it holds anything), or
/// an archive when the name ends in `.tar.gz` or `.tgz`.
pub fn write(view: &ReportView, dest: &Path) -> Result<Written> {
    let name = dest.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let archive = name.ends_with(".tar.gz") || name.ends_with(".tgz");
    if !archive && dest.exists() && std::fs::read_dir(dest).map(|mut d| d.next().is_some()).unwrap_or(true) {
        bail!(
            "{}: the bundle directory exists and is not empty; name a new directory or a FILE.tar.gz",
            dest.display()
        );
    }
    let b = build(view)?;
    let files = b.entries.len();
    let bytes = b.total;
    let (redacted, left_out) = (b.redacted, b.left_out.clone());
    if archive {
        write_archive(
            &b.entries,
            dest,
            &format!("backscope-evidence-{}", crate::run::format::paths::sanitize(&view.run.run_id)),
        )?;
    } else {
        write_dir(&b.entries, dest)?;
    }
    Ok(Written { path: dest.to_path_buf(), files, bytes, redacted, left_out })
}

fn build(view: &ReportView) -> Result<Builder> {
    let run_dir = PathBuf::from(&view.run.run_dir);
    let mut b = Builder::default();
    let layout = output::text::Layout { width: 100, all: true };
    let here = relocated(view, &mut b.redacted);
    let doc = here.document();
    b.text("report.md", &output::render_document(&doc, Format::Markdown, layout), "the report (Markdown)");
    b.text(
        "report.html",
        &output::render_document(&doc, Format::Html, layout),
        "the report: one self-contained HTML file",
    );
    let mut json = Vec::new();
    here.write_json(&mut json).context("writing the report's JSON")?;
    b.text(
        "report.json",
        &String::from_utf8_lossy(&json),
        "the report's JSON (docs/report-json.md), log paths relative to the bundle",
    );
    let mut unread = Vec::new();
    let env = read_run_json(&run_dir, RunDir::ENV_JSON, &mut unread);
    let run = read_run_json(&run_dir, RunDir::RUN_JSON, &mut unread);
    b.left_out.extend(unread);
    if let Some(env) = &env {
        let mut env = env.clone();
        b.redacted += redact::json(&mut env);
        let mut run_clean = run.clone().unwrap_or(Value::Null);
        b.redacted += redact::json(&mut run_clean);
        b.text(
            "environment.md",
            &markdown(&environment_doc(&env, &run_clean)),
            "versions, GPUs, drivers, environment overrides, what each server program said about itself",
        );
        b.json(RunDir::ENV_JSON, env, "the run's environment snapshot");
    }
    if let Some(run) = run {
        b.json(RunDir::RUN_JSON, run, "the run: its command line and plan");
    }
    if RunDir::new(&run_dir).claims_path().is_file() {
        b.copy(&run_dir, RunDir::CLAIMS_JSON, "the sweep's own claims");
    }
    // Server logs: those of failing cells and those the backend claims cite.
    let failed: Vec<&Record> =
        view.stats.groups.iter().flat_map(|g| g.failed_records.iter()).take(FAILED_CELLS).collect();
    let mut server_logs: Vec<String> = Vec::new();
    let mut add_log = |l: &str| {
        if !server_logs.iter().any(|x| x == l) {
            server_logs.push(l.to_string());
        }
    };
    for r in &failed {
        if let Some(s) = r.server.as_ref().filter(|s| !s.log.is_empty()) {
            add_log(&s.log);
        }
    }
    for g in &view.stats.groups {
        for r in g.backend_record.iter().chain(g.first_ok.iter()) {
            if let Some(s) = r.server.as_ref().filter(|s| !s.log.is_empty()) {
                add_log(&s.log);
            }
            for e in r.backend.iter().flat_map(|b| &b.evidence) {
                if !Path::new(&e.file).is_absolute() {
                    add_log(&e.file);
                }
            }
        }
    }
    let mut redacted = 0;
    let discovery = discovery_doc(&run_dir, &server_logs, &mut redacted);
    b.redacted += redacted;
    b.text("discovery.md", &markdown(&discovery), "the backend, device and offload lines of each server log");
    for l in &server_logs {
        b.copy(&run_dir, l, "a server's whole log");
    }
    // Failing cells: record, log slice, timeline.
    for r in &failed {
        b.copy(&run_dir, &r.file, "a failing cell's record");
        // The timeline goes beside the record, so the record's path must be one inside the run (the copy above
        // said why it is not).
        let Some(record) = lexically_inside(&r.file) else { continue };
        let dir = record.parent().map(bundle_path).unwrap_or_default();
        if let Some(slice) = &r.log_slice {
            b.copy(&run_dir, slice, "a failing cell's log slice (the server log written while it ran)");
        }
        if let Some(mut t) = timeline::of_record(r, &run_dir) {
            // The logs are in the bundle under the run directory's layout.
            let prefix = format!("{}/", run_dir.display());
            for p in std::iter::once(&mut t.log).chain(t.slice.as_mut()) {
                if let Some(rel) = p.strip_prefix(&prefix) {
                    *p = rel.to_string();
                }
            }
            let path =
                if dir.is_empty() { format!("cells/{}-timeline.md", r.seq) } else { format!("{dir}/timeline.md") };
            b.redacted += redact_timeline(&mut t);
            b.text(&path, &markdown(&timeline_doc(&t)), "a failing cell's timeline, crash phase and signature");
        }
    }
    // The runtime's libraries.
    let (scans, notes) = library_files(view.run.plan.as_ref());
    b.left_out.extend(notes);
    for lib in scans {
        let report = crate::gpu::binaries::scan(&crate::gpu::binaries::ScanOptions {
            paths: lib.files.clone(),
            ..Default::default()
        });
        let scan_view = crate::gpu::binaries::ScanView { report: &report, kernels: false };
        let dir = lib.dir.display().to_string();
        let stem = format!("scan/{}", crate::run::format::paths::sanitize(&dir.replace('/', "_")));
        let used_by = lib.endpoints.join(", ");
        let mut json = Vec::new();
        scan_view.write_json(&mut json).context("writing the scan's JSON")?;
        let what = format!("scan of {} files of {dir} (used by {used_by}", lib.files.len());
        b.text(&format!("{stem}.json"), &String::from_utf8_lossy(&json), format!("{what}; docs/scan-json.md)"));
        b.text(
            &format!("{stem}.md"),
            &markdown(&scan_view.document()),
            format!("{what}): GPU code, ggml backends, dependencies"),
        );
    }
    readme(&mut b, view);
    Ok(b)
}

fn readme(b: &mut Builder, view: &ReportView) {
    let mut doc = Document::new(format!("backscope evidence bundle: run {}", view.run.run_id));
    doc.paragraph(format!(
        "Written by backscope {} from run {} ({} cells, {} ok, {} failed). Start with report.html or report.md; every claim names its source file, and the files are here under the same paths as in the run directory.",
        env!("CARGO_PKG_VERSION"),
        view.run.run_id,
        view.stats.cells,
        view.stats.ok,
        view.stats.failed
    ));
    doc.paragraph(format!(
        "Secrets: values that looked like tokens, keys or passwords were replaced by {} ({} replaced).",
        redact::REDACTED,
        b.redacted
    ));
    let mut t = Table::new(vec![Column::label("file"), Column::number("bytes"), Column::text("what")]);
    for e in &b.entries {
        t.row([e.path.clone(), e.bytes.len().to_string(), e.what.clone()]);
    }
    doc.heading(2, "Files");
    doc.push(t);
    if !b.left_out.is_empty() {
        doc.heading(2, "Left out");
        doc.push(output::Block::List(b.left_out.iter().map(|l| Text::plain(l.clone())).collect()));
    }
    let text = markdown(&doc);
    b.text("README.md", &text, "this list");
}

/// Writes the bundle into a new directory beside `dest`, then renames it to `dest` (which may exist empty): a
/// bundle that fails halfway leaves nothing behind, and every file is created by this function inside it.
fn write_dir(entries: &[Entry], dest: &Path) -> Result<()> {
    let parent = dest.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let tmp = tempfile::Builder::new()
        .prefix(".backscope-bundle-")
        .tempdir_in(parent)
        .with_context(|| format!("cannot write in {}", parent.display()))?;
    for e in entries {
        let path = tmp.path().join(&e.path);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        }
        std::fs::write(&path, &e.bytes).with_context(|| format!("cannot write {}", path.display()))?;
    }
    std::fs::rename(tmp.path(), dest).with_context(|| format!("cannot write {}", dest.display()))?;
    // Renamed: nothing is left at the temporary path for the guard to remove.
    let _ = tmp.keep();
    Ok(())
}

fn write_archive(entries: &[Entry], dest: &Path, root: &str) -> Result<()> {
    let dir = dest.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let tmp = tempfile::NamedTempFile::new_in(dir).with_context(|| format!("cannot write in {}", dir.display()))?;
    let gz = flate2::write::GzEncoder::new(std::io::BufWriter::new(tmp.reopen()?), flate2::Compression::default());
    let mut tar = tar::Builder::new(gz);
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    for e in entries {
        let mut h = tar::Header::new_gnu();
        h.set_size(e.bytes.len() as u64);
        h.set_mode(0o644);
        h.set_mtime(now);
        h.set_entry_type(tar::EntryType::Regular);
        tar.append_data(&mut h, format!("{root}/{}", e.path), e.bytes.as_slice())
            .with_context(|| format!("cannot add {} to the archive", e.path))?;
    }
    let mut out =
        tar.into_inner().context("cannot finish the archive")?.finish().context("cannot finish the archive")?;
    out.flush()?;
    drop(out);
    tmp.persist(dest).with_context(|| format!("cannot write {}", dest.display()))?;
    Ok(())
}
