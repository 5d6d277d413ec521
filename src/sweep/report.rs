//! From records to what people read: points (cells that differ only in epoch and repetition), their statistics
//! (medians of rates, mean ± sd of time to failure), the table, and claims in the evidence model.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use super::tracejoin;
use crate::evidence::{Claim, Confidence, Source};
use crate::output::{Block, ClaimList, Collapse, Column, Document, Render, Table};
use crate::run::forensics;
use crate::run::record::{ErrorClass, Record, Status};
use crate::run::stats::{mean, mean_sd_seconds, median, sample_sd};

/// Most run-record sources listed under one claim; the rest are in the database.
const MAX_RUN_SOURCES: usize = 8;

/// A point with its records, in plan order.
pub type PointRecords<'a> = (Point, Vec<&'a Record>);

/// Records that differ only in epoch and repetition.
#[derive(Clone, Debug, Serialize)]
pub struct Point {
    pub endpoint: String,
    pub model: String,
    pub num_gpu: i64,
    pub prompt: String,
    pub num_predict: i64,
    pub runs: usize,
    pub ok: usize,
    /// Failures by outcome (`crash SIGSEGV`, `read_timeout`, …) with their counts.
    pub failures: BTreeMap<String, usize>,
    pub backend: Option<String>,
    pub offloaded: Option<(u32, u32)>,
    pub prompt_tps: Option<f64>,
    pub decode_tps: Option<f64>,
    pub ttft_ms: Option<f64>,
    /// Time to failure of the failed runs: mean and sample sd, in ms.
    pub ttf_mean_ms: Option<f64>,
    pub ttf_sd_ms: Option<f64>,
    #[serde(skip)]
    first_seq: u64,
}

pub fn points(records: &[Record]) -> Vec<PointRecords<'_>> {
    let mut groups: BTreeMap<(String, String, i64, String, i64), Vec<&Record>> = BTreeMap::new();
    for r in records {
        groups
            .entry((r.endpoint.clone(), r.model.clone(), r.num_gpu, r.prompt.clone(), r.num_predict))
            .or_default()
            .push(r);
    }
    let mut out: Vec<PointRecords<'_>> = groups
        .into_iter()
        .map(|((endpoint, model, num_gpu, prompt, num_predict), mut recs)| {
            recs.sort_by_key(|r| r.seq);
            let ok: Vec<&&Record> = recs.iter().filter(|r| r.is_ok()).collect();
            let mut failures = BTreeMap::new();
            for r in recs.iter().filter(|r| !r.is_ok()) {
                *failures.entry(r.outcome()).or_insert(0) += 1;
            }
            let ttf: Vec<f64> = recs.iter().filter(|r| !r.is_ok()).filter_map(|r| r.ttf_ms).collect();
            let collect = |f: fn(&Record) -> Option<f64>| -> Vec<f64> { ok.iter().filter_map(|r| f(r)).collect() };
            // Prefer the backend seen by a successful run; a failed start has no log of a loaded model.
            let facts = ok
                .iter()
                .chain(recs.iter().filter(|r| !r.is_ok()).collect::<Vec<_>>().iter())
                .find_map(|r| r.backend.as_ref());
            let point = Point {
                endpoint,
                model,
                num_gpu,
                prompt,
                num_predict,
                runs: recs.len(),
                ok: ok.len(),
                failures,
                backend: facts.map(|b| b.backend.clone()),
                offloaded: facts.and_then(|b| b.offloaded),
                prompt_tps: median(&collect(|r| r.prompt_tps)),
                decode_tps: median(&collect(|r| r.decode_tps)),
                ttft_ms: median(&collect(|r| r.ttft_ms)),
                ttf_mean_ms: mean(&ttf),
                ttf_sd_ms: sample_sd(&ttf),
                first_seq: recs.first().map(|r| r.seq).unwrap_or(0),
            };
            (point, recs)
        })
        .collect();
    out.sort_by_key(|(p, _)| p.first_seq);
    out
}

fn status_text(p: &Point) -> String {
    let mut parts = Vec::new();
    if p.ok > 0 {
        parts.push(format!("ok {}/{}", p.ok, p.runs));
    }
    for (outcome, n) in &p.failures {
        parts.push(format!("{outcome} {n}/{}", p.runs));
    }
    parts.join(", ")
}

fn backend_text(p: &Point) -> String {
    match (&p.backend, p.offloaded) {
        (Some(b), Some((n, m))) => format!("{} {n}/{m}", shorten(b, 40)),
        (Some(b), None) => shorten(b, 40),
        (None, _) => "-".into(),
    }
}

fn shorten(s: &str, max: usize) -> String {
    super::api::truncate(s, max)
}

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map(|x| format!("{x:.digits$}")).unwrap_or_else(|| "-".into())
}

/// Rows of the points table terminal output shows (`--all`: every row).
const POINT_ROWS: usize = 60;

/// The table of points. Model, prompt and num_predict columns appear only when they vary.
pub fn table(pts: &[PointRecords<'_>]) -> Table {
    let varies =
        |f: fn(&Point) -> String| pts.iter().map(|(p, _)| f(p)).collect::<std::collections::BTreeSet<_>>().len() > 1;
    let show_model = varies(|p| p.model.clone());
    let show_prompt = varies(|p| p.prompt.clone());
    let show_n = varies(|p| p.num_predict.to_string());
    let mut columns = vec![Column::label("endpoint"), Column::text("backend (from log)")];
    if show_model {
        columns.push(Column::label("model"));
    }
    columns.push(Column::number("num_gpu"));
    if show_prompt {
        columns.push(Column::text("prompt"));
    }
    if show_n {
        columns.push(Column::number("n_predict"));
    }
    columns.extend([
        Column::text("status"),
        Column::number("prompt t/s"),
        Column::number("decode t/s"),
        Column::number("TTFT ms"),
        Column::keep("time to failure"),
    ]);
    let traced = pts.iter().any(|(_, recs)| recs.iter().any(|r| r.trace.is_some()));
    if traced {
        columns.push(Column::text("kernels (per request)"));
    }
    let mut t = Table::new(columns).collapse(Collapse::Head(POINT_ROWS));
    for (p, recs) in pts {
        let mut row = vec![p.endpoint.clone(), backend_text(p)];
        if show_model {
            row.push(p.model.clone());
        }
        row.push(p.num_gpu.to_string());
        if show_prompt {
            row.push(p.prompt.clone());
        }
        if show_n {
            row.push(p.num_predict.to_string());
        }
        let ttf: Vec<f64> = recs.iter().filter(|r| !r.is_ok()).filter_map(|r| r.ttf_ms).collect();
        row.extend([
            status_text(p),
            opt(p.prompt_tps, 1),
            opt(p.decode_tps, 1),
            opt(p.ttft_ms, 0),
            mean_sd_seconds(&ttf).unwrap_or_else(|| "-".into()),
        ]);
        if traced {
            row.push(kernels_text(recs));
        }
        t.row(row);
    }
    t
}

/// The point's kernel families per request, from the first traced record; `(varies)` when its requests differ.
fn kernels_text(recs: &[&Record]) -> String {
    let traced: Vec<&crate::run::record::RecordTrace> = recs.iter().filter_map(|r| r.trace.as_ref()).collect();
    let Some(first) = traced.first() else { return "-".into() };
    let mut text = shorten(&tracejoin::families_text(first), 60);
    if traced.iter().any(|t| t.families != first.families) {
        text.push_str(" (varies)");
    }
    if traced.iter().any(|t| !t.cut.is_empty()) {
        text.push_str(" (trace cut: lower bounds)");
    }
    text
}

/// The demangled name with its ggml type spelled out: `mul_mat_vec_q<(ggml_type)12, 8>` → `mul_mat_vec_q<Q4_K, 8>`.
fn typed_name(k: &crate::run::record::TraceKernel) -> String {
    let (Some(t), Some(at)) = (&k.ggml_type, k.demangled.find("(ggml_type)")) else { return k.demangled.clone() };
    let rest = &k.demangled[at + "(ggml_type)".len()..];
    let digits = rest.chars().take_while(char::is_ascii_digit).count();
    format!("{}{t}{}", &k.demangled[..at], &rest[digits..])
}

/// One claim per traced request: what ran during it, from the observer's windows joined to the request's.
fn trace_claim(r: &Record, base_id: &str, at: &str, run_dir: &std::path::Path) -> Option<Claim> {
    let t = r.trace.as_ref()?;
    let file_path = |f: &str| {
        let p = std::path::Path::new(f);
        if p.is_absolute() {
            f.to_string()
        } else {
            run_dir.join(p).display().to_string()
        }
    };
    let request = format!("request e{}r{} of `{}` at {at}", r.epoch, r.repetition, r.endpoint);
    let mut sources: Vec<Source> = t
        .processes
        .iter()
        // The processes that launched during the request; without any, those that were observed at all.
        .filter(|p| p.launches > 0 || t.total_launches == 0)
        .take(6)
        .map(|p| {
            Source::file(
                file_path(&p.file),
                None,
                None,
                format!("backscope-trace of pid {} ({}): windows overlapping the request", p.pid, p.exe),
            )
        })
        .collect();
    if t.processes.is_empty() {
        let what = if t.vulkan_layer == Some(true) {
            "trace directory (no trace file: no process touched CUDA or HIP or created a Vulkan device)"
        } else {
            "trace directory (no trace file: no process touched CUDA or HIP)"
        };
        sources.push(Source::file(file_path(&t.dir), None, None, what));
    }
    sources.push(Source::Run { run_id: r.run_id.clone(), file: Some(r.file.clone()) });
    let id = format!("{base_id}.e{}r{}.kernels", r.epoch, r.repetition);
    let precision = format!("windows of {} ms", t.interval_ms);
    // A trace the observer stopped writing (its byte budget, a failed write) before the request ended counts only
    // the launches before the cut: its counts are lower bounds and its silence proves nothing.
    let cut = (!t.cut.is_empty())
        .then(|| format!("the observer stopped writing {} before the request ended", t.cut.join(", ")));
    if t.total_launches == 0 {
        let (confidence, statement) = match (t.observer_loaded, &cut) {
            (Some(false), _) => (
                Confidence::Unresolved,
                format!("{request}: no kernel launch was observed, but the observer was not mapped into the server (a static or setuid program ignores LD_PRELOAD)"),
            ),
            (_, Some(cut)) => (
                Confidence::Unresolved,
                format!("{request}: no kernel launch was counted, but {cut}, so the launches during the request are unknown"),
            ),
            _ if t.vulkan_layer == Some(true) => (
                Confidence::Confirmed,
                format!("{request}: no CUDA/HIP kernel launch was observed and no Vulkan dispatch during the request (CPU work is not observed: a CPU backend looks like this)"),
            ),
            _ => (
                Confidence::Confirmed,
                format!("{request}: no CUDA/HIP kernel launch was observed during the request (Vulkan and CPU work are not observed: a CPU or Vulkan backend looks like this)"),
            ),
        };
        return Some(Claim::new(id, confidence, statement).with_sources(sources));
    }
    let top: Vec<String> =
        t.kernels.iter().take(3).map(|k| format!("{} {} launches", k.launches, shorten(&typed_name(k), 60))).collect();
    let vulkan = t.kernels.iter().any(|k| k.api == trace_format::record::api::VULKAN);
    let matmul = if vulkan { crate::kernels::VULKAN_MATMUL_FAMILIES } else { crate::kernels::MATMUL_FAMILIES };
    let absent: Vec<&str> = matmul.iter().copied().filter(|f| !t.families.contains_key(*f)).collect();
    let absent = match &cut {
        // What a cut trace does not show may have run after the cut.
        Some(_) => String::new(),
        None if absent.is_empty() => String::new(),
        None => format!(" and no {}", absent.join(", no ")),
    };
    let failed = if t.failed_launches > 0 {
        format!("; {} of the launches failed (the runtime returned an error, nothing ran)", t.failed_launches)
    } else {
        String::new()
    };
    let spill = if t.spill_ns[0] > 0 || t.spill_ns[1] > 0 {
        format!(
            ", counted windows reach {:.1} ms before and {:.1} ms after it",
            t.spill_ns[0] as f64 / 1e6,
            t.spill_ns[1] as f64 / 1e6
        )
    } else {
        String::new()
    };
    let (confidence, at_least, lower) = match &cut {
        Some(cut) => (Confidence::Limited, "at least ", format!("; these counts are lower bounds: {cut}")),
        None => (Confidence::Confirmed, "", String::new()),
    };
    let statement = format!(
        "{request} ran {at_least}{} kernel launches in {} process(es): {} ({}){absent}{failed}{lower} [join precision: {precision}{spill}]",
        t.total_launches,
        t.processes.iter().filter(|p| p.launches > 0).count(),
        top.join(", "),
        tracejoin::families_text(t),
    );
    Some(Claim::new(id, confidence, statement).with_sources(sources))
}

/// One claim per crash record the observer or the Vulkan layer wrote during a traced request (the signal, the call in
/// flight, the last kernels each thread launched and the last Vulkan dispatches), and one per device-lost record.
fn trace_crash_claims(r: &Record, base_id: &str, at: &str, run_dir: &std::path::Path) -> Vec<Claim> {
    let Some(t) = r.trace.as_ref() else { return Vec::new() };
    let request = format!("request e{}r{} of `{}` at {at}", r.epoch, r.repetition, r.endpoint);
    t.crashes
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let in_run = |f: &str| {
                let path = std::path::Path::new(f);
                if path.is_absolute() {
                    f.to_string()
                } else {
                    run_dir.join(path).display().to_string()
                }
            };
            let mut sources = c.sources(in_run);
            sources.push(Source::Run { run_id: r.run_id.clone(), file: Some(r.file.clone()) });
            let suffix = if t.crashes.len() > 1 { format!(".{}", i + 1) } else { String::new() };
            let id = format!("{base_id}.e{}r{}.trace_crash{suffix}", r.epoch, r.repetition);
            let mut claim = c.claim(id, sources);
            claim.statement = format!("{request}: {}", claim.statement);
            claim
        })
        .chain(t.device_lost.iter().enumerate().map(|(i, d)| {
            let path = std::path::Path::new(&d.file);
            let file = if path.is_absolute() { d.file.clone() } else { run_dir.join(path).display().to_string() };
            let sources = vec![
                Source::file(file, None, None, "backscope-trace file: device_lost record (Vulkan layer)"),
                Source::Run { run_id: r.run_id.clone(), file: Some(r.file.clone()) },
            ];
            let suffix = if t.device_lost.len() > 1 { format!(".{}", i + 1) } else { String::new() };
            let id = format!("{base_id}.e{}r{}.trace_device_lost{suffix}", r.epoch, r.repetition);
            let mut claim = d.claim(id, sources);
            claim.statement = format!("{request}: {}", claim.statement);
            claim
        }))
        .collect()
}

fn run_sources(recs: &[&Record], pick: impl Fn(&Record) -> bool) -> Vec<Source> {
    recs.iter()
        .filter(|r| pick(r))
        .take(MAX_RUN_SOURCES)
        .map(|r| Source::Run { run_id: r.run_id.clone(), file: Some(r.file.clone()) })
        .collect()
}

fn id_part(s: &str) -> String {
    crate::run::paths::sanitize(s)
}

fn where_text(p: &Point, multi_model: bool, multi_prompt: bool) -> String {
    let mut s = format!("num_gpu={}", p.num_gpu);
    if multi_model {
        let _ = write!(s, ", model {}", p.model);
    }
    if multi_prompt {
        let _ = write!(s, ", prompt {}, num_predict {}", p.prompt, p.num_predict);
    }
    s
}

/// Claims about a run's records. Log lines are cited by their path under `run_dir` (records keep paths relative to
/// the run directory so that a run directory can be moved; claims are for reading, so they say where the file is).
pub fn claims(records: &[Record], run_dir: &std::path::Path) -> Vec<Claim> {
    let log_path = |f: &str| run_dir.join(f).display().to_string();
    let pts = points(records);
    let multi_model = pts.iter().map(|(p, _)| &p.model).collect::<std::collections::BTreeSet<_>>().len() > 1;
    let multi_prompt =
        pts.iter().map(|(p, _)| (&p.prompt, p.num_predict)).collect::<std::collections::BTreeSet<_>>().len() > 1;
    let mut out = Vec::new();
    for (p, recs) in &pts {
        let base_id = format!(
            "sweep.{}.{}.ngl{}.{}.n{}",
            id_part(&p.endpoint),
            id_part(&p.model),
            p.num_gpu,
            id_part(&p.prompt),
            p.num_predict
        );
        let at = where_text(p, multi_model, multi_prompt);
        // Failures, one claim per kind of outcome.
        for (outcome, n) in &p.failures {
            let failed: Vec<&Record> = recs.iter().copied().filter(|r| !r.is_ok() && &r.outcome() == outcome).collect();
            let ttf: Vec<f64> = failed.iter().filter_map(|r| r.ttf_ms).collect();
            let after = mean_sd_seconds(&ttf).map(|s| format!(" after {s}")).unwrap_or_default();
            let first = failed[0];
            let phase = if first.phase == Some(crate::run::record::Phase::Start) { " while starting" } else { "" };
            let http = first.http_status.filter(|s| *s >= 400).map(|s| format!(" (HTTP {s})")).unwrap_or_default();
            let statement = match first.error_class {
                Some(ErrorClass::Crash) => format!(
                    "`{}` crashed with {}{phase} at {at}{after} in {n}/{} runs{http}; the signal was read from the {}",
                    p.endpoint,
                    first.signal.as_deref().unwrap_or("a signal"),
                    p.runs,
                    first.signal_source.as_deref().unwrap_or("record")
                ),
                Some(c) => format!(
                    "`{}` failed with {}{phase} at {at}{after} in {n}/{} runs{http}: {}",
                    p.endpoint,
                    first.outcome(),
                    p.runs,
                    c.hint()
                ),
                None => format!("`{}` failed at {at} in {n}/{} runs", p.endpoint, p.runs),
            };
            let mut sources = run_sources(&failed, |_| true);
            for r in failed.iter().filter_map(|r| r.failure_line.as_ref()).take(2) {
                sources.push(Source::LogLine { path: log_path(&r.file), line: r.line, text: r.text.clone() });
            }
            let class = first.error_class.map(|c| c.as_str()).unwrap_or("fail");
            out.push(Claim::new(format!("{base_id}.{class}"), Confidence::Confirmed, statement).with_sources(sources));
        }
        // Successes, with the medians.
        if p.ok > 0 {
            let mut rates = Vec::new();
            if let Some(v) = p.decode_tps {
                rates.push(format!("decode {v:.1} t/s"));
            }
            if let Some(v) = p.prompt_tps {
                rates.push(format!("prompt {v:.1} t/s"));
            }
            if let Some(v) = p.ttft_ms {
                rates.push(format!("first token after {v:.0} ms"));
            }
            let rates = if rates.is_empty() { String::new() } else { format!(": {} (medians)", rates.join(", ")) };
            out.push(
                Claim::new(
                    format!("{base_id}.ok"),
                    Confidence::Confirmed,
                    format!("`{}` completed {}/{} runs at {at}{rates}", p.endpoint, p.ok, p.runs),
                )
                .with_sources(run_sources(recs, Record::is_ok)),
            );
        }
        // The failed runs' log slices: the phase of the crash and its signature.
        out.extend(forensics::point_claims(recs, &base_id, &at, &p.endpoint, run_dir));
        // With --trace: what each request launched, and the last kernels before a crash during it.
        out.extend(recs.iter().filter_map(|r| trace_claim(r, &base_id, &at, run_dir)));
        out.extend(recs.iter().flat_map(|r| trace_crash_claims(r, &base_id, &at, run_dir)));
        // The backend, from the server log.
        let facts_rec = recs
            .iter()
            .find(|r| r.is_ok() && r.backend.is_some())
            .or_else(|| recs.iter().find(|r| r.backend.is_some()));
        match facts_rec.and_then(|r| r.backend.as_ref().map(|b| (r, b))) {
            Some((r, b)) => {
                let statement = if b.backend == "CPU" {
                    let requested = b
                        .offloaded
                        .map(|(n, m)| format!(" (the log's offload line reads {n}/{m})"))
                        .unwrap_or_default();
                    if b.devices.is_empty() {
                        format!("`{}` at {at} ran on the CPU: no GPU device was in use{requested}", p.endpoint)
                    } else {
                        format!(
                            "`{}` at {at} ran on the CPU: {} was available but no layer was offloaded{requested}",
                            p.endpoint,
                            b.devices.join(", ")
                        )
                    }
                } else {
                    let layers =
                        b.offloaded.map(|(n, m)| format!(" with {n}/{m} layers offloaded")).unwrap_or_default();
                    format!("`{}` at {at} ran on {}{layers}", p.endpoint, b.backend)
                };
                let mut sources: Vec<Source> = b
                    .evidence
                    .iter()
                    .take(6)
                    .map(|e| Source::LogLine { path: log_path(&e.file), line: e.line, text: e.text.clone() })
                    .collect();
                sources.push(Source::Run { run_id: r.run_id.clone(), file: Some(r.file.clone()) });
                out.push(
                    Claim::new(format!("{base_id}.backend"), Confidence::Confirmed, statement).with_sources(sources),
                );
            }
            None => {
                if let Some(ps) = recs.iter().find_map(|r| r.extra.get("ollama_ps").map(|ps| (r, ps))) {
                    let (r, ps) = ps;
                    if let Some(frac) = ps.get("vram_fraction").and_then(|v| v.as_f64()) {
                        out.push(
                            Claim::new(
                                format!("{base_id}.vram"),
                                Confidence::Inferred,
                                format!(
                                    "`{}` at {at}: Ollama reports {:.0}% of the loaded model in GPU memory (/api/ps size_vram/size); which backend library ran is not in that report",
                                    p.endpoint,
                                    frac * 100.0
                                ),
                            )
                            .with_source(Source::Run { run_id: r.run_id.clone(), file: Some(r.file.clone()) }),
                        );
                    }
                }
                let managed = recs.iter().any(|r| r.managed);
                let never_started = recs.iter().all(|r| r.phase == Some(crate::run::record::Phase::Start));
                let statement = if never_started {
                    format!("`{}` at {at}: no backend to identify — the server never became ready", p.endpoint)
                } else if managed {
                    format!(
                        "`{}` at {at}: the server log names no device or offload line (was it started with -lv 4?)",
                        p.endpoint
                    )
                } else {
                    format!("`{}` at {at}: backend not identified — backscope reads no log of an external server unless its `log_file` is given in the spec", p.endpoint)
                };
                out.push(
                    Claim::new(format!("{base_id}.backend"), Confidence::Unresolved, statement)
                        .with_sources(run_sources(recs, |_| true).into_iter().take(1)),
                );
            }
        }
    }
    out.extend(pattern_claims(&pts));
    out
}

/// Across num_gpu: an endpoint that works with nothing offloaded and fails whenever layers are offloaded points at
/// its GPU path, not at the model or the server. Inferred: the pattern is observed, the cause is not.
fn pattern_claims(pts: &[PointRecords<'_>]) -> Vec<Claim> {
    let mut by_ep: BTreeMap<(&str, &str), Vec<&PointRecords<'_>>> = BTreeMap::new();
    for pr in pts {
        by_ep.entry((pr.0.endpoint.as_str(), pr.0.model.as_str())).or_default().push(pr);
    }
    let mut out = Vec::new();
    for ((ep, model), group) in by_ep {
        let zero_ok = group.iter().any(|(p, _)| p.num_gpu == 0 && p.ok == p.runs && p.runs > 0);
        let offload: Vec<&&PointRecords<'_>> = group.iter().filter(|(p, _)| p.num_gpu != 0).collect();
        let all_fail = !offload.is_empty() && offload.iter().all(|(p, _)| p.ok == 0 && p.runs > 0);
        if zero_ok && all_fail {
            let values: Vec<String> = offload
                .iter()
                .map(|(p, _)| p.num_gpu.to_string())
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .collect();
            let sources: Vec<Source> = offload
                .iter()
                .flat_map(|(_, recs)| recs.iter().take(1))
                .chain(group.iter().filter(|(p, _)| p.num_gpu == 0).flat_map(|(_, r)| r.iter().take(1)))
                .map(|r| Source::Run { run_id: r.run_id.clone(), file: Some(r.file.clone()) })
                .collect();
            out.push(
                Claim::new(
                    format!("sweep.{}.{}.offload_pattern", id_part(ep), id_part(model)),
                    Confidence::Inferred,
                    format!("`{ep}` works with no layers offloaded (num_gpu=0) and fails at every other num_gpu tried ({}): the failure is in its GPU path, not in the model or the server", values.join(", ")),
                )
                .with_sources(sources),
            );
        }
    }
    out
}

/// A run's report: what `sweep` prints at the end and `sweep report` prints again. Its JSON is the claims
/// (`{"run", "status", "claims"}`); the document is the summary line, the table of points, a hint per error class
/// that occurred, and the claims.
#[derive(Debug)]
pub struct RunReport<'a> {
    pub run_id: &'a str,
    pub run_dir: &'a str,
    /// `running`, `finished`, `interrupted`.
    pub status: &'a str,
    pub records: &'a [Record],
    pub claims: &'a [Claim],
}

impl Render for RunReport<'_> {
    fn write_json(&self, out: &mut dyn std::io::Write) -> std::io::Result<()> {
        let v = serde_json::json!({"run": self.run_id, "status": self.status, "claims": self.claims});
        serde_json::to_writer(&mut *out, &v)?;
        writeln!(out)
    }

    fn document(&self) -> Document {
        document(self.run_id, self.run_dir, self.records, self.claims)
    }
}

/// The whole human-readable report of a run.
pub fn document(run_id: &str, run_dir: &str, records: &[Record], claims: &[Claim]) -> Document {
    let pts = points(records);
    let ok = records.iter().filter(|r| r.status == Status::Ok).count();
    let mut doc = Document::new(format!("backscope sweep: run {run_id}"));
    doc.paragraph(format!(
        "run {run_id}: {} cells, {ok} ok, {} failed — records in {run_dir}",
        records.len(),
        records.len() - ok
    ));
    if !pts.is_empty() {
        doc.push(table(&pts));
    }
    let mut notes: Vec<crate::output::Text> = Vec::new();
    let classes: std::collections::BTreeSet<ErrorClass> = records.iter().filter_map(|r| r.error_class).collect();
    for c in classes {
        notes.push(format!("{c}: {}", c.hint()).into());
    }
    if records.iter().any(|r| r.prompt_count_includes_cache) {
        notes.push("note: Ollama's prompt_eval_count includes cached prompt tokens while its duration covers only the new ones; prompt t/s of repeated prompts is overstated".into());
    }
    if !notes.is_empty() {
        doc.push(Block::List(notes));
    }
    doc.heading(2, "Claims");
    doc.push(ClaimList::new(claims.to_vec()).with_run_dir(run_id, run_dir));
    doc
}

/// The report as terminal text at a width that wraps nothing (for tests that look for whole statements).
#[cfg(test)]
pub fn render(run_id: &str, run_dir: &str, records: &[Record], claims: &[Claim]) -> String {
    let layout = crate::output::text::Layout { width: crate::output::term::MAX_WIDTH, all: true };
    crate::output::text::render(&document(run_id, run_dir, records, claims), layout)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::record::{BackendFacts, LogRef, Phase, RunSource, RECORD_SCHEMA};

    fn rec(ep: &str, ngl: i64, seq: u64, ok: bool) -> Record {
        Record {
            schema: RECORD_SCHEMA,
            run_id: "r".into(),
            cell_key: format!("{ep}|m|ngl={ngl}|p|n=512|e1|r{seq}"),
            seq,
            source: RunSource::Sweep,
            file: format!("cells/{seq:05}-{ep}/result.json"),
            endpoint: ep.into(),
            model: "qwen3.5:2b".into(),
            num_gpu: ngl,
            prompt: "p".into(),
            num_predict: 512,
            epoch: 1,
            repetition: seq as u32,
            stream: true,
            started_at: String::new(),
            status: if ok { Status::Ok } else { Status::Fail },
            error_class: (!ok).then_some(ErrorClass::Crash),
            phase: (!ok).then_some(Phase::Request),
            http_status: Some(if ok { 200 } else { 500 }),
            signal: (!ok).then(|| "SIGSEGV".into()),
            signal_source: (!ok).then(|| "error body".into()),
            wall_ms: Some(1000.0),
            ttft_ms: ok.then_some(100.0),
            prompt_count_includes_cache: true,
            prompt_tps: ok.then_some(500.0),
            decode_tps: ok.then_some(50.0),
            ..Default::default()
        }
    }

    #[test]
    fn the_investigations_finding_as_a_claim() {
        let mut records = vec![rec("rocm", 1, 0, true), rec("vulkan", 0, 1, true)];
        for (i, t) in [2590.0, 2650.0, 2710.0].into_iter().enumerate() {
            let mut r = rec("vulkan", 1, 10 + i as u64, false);
            r.ttf_ms = Some(t);
            r.failure_line = Some(LogRef {
                file: "servers/s002-vulkan.log".into(),
                line: 40,
                text: "SIGSEGV: segmentation violation".into(),
            });
            records.push(r);
        }
        let cl = claims(&records, std::path::Path::new("/runs/r"));
        let crash = cl.iter().find(|c| c.id.ends_with(".crash")).unwrap();
        assert_eq!(crash.confidence, Confidence::Confirmed);
        assert!(
            crash
                .statement
                .starts_with("`vulkan` crashed with SIGSEGV at num_gpu=1 after 2.65 ± 0.06 s in 3/3 runs (HTTP 500)"),
            "{}",
            crash.statement
        );
        assert!(crash.sources.iter().any(|s| matches!(s, Source::Run { file: Some(f), .. } if f.contains("vulkan"))));
        assert!(crash
            .sources
            .iter()
            .any(|s| matches!(s, Source::LogLine { line: 40, path, .. } if path == "/runs/r/servers/s002-vulkan.log")));
        let pattern = cl.iter().find(|c| c.id.ends_with("offload_pattern")).unwrap();
        assert_eq!(pattern.confidence, Confidence::Inferred);
        assert!(pattern.statement.contains("`vulkan` works with no layers offloaded"));
        let text = render("r", "runs/r", &records, &cl);
        assert!(text.contains("crash SIGSEGV 3/3"), "{text}");
        assert!(text.contains("2.65 ± 0.06 s"), "{text}");
        assert!(text.contains("prompt_eval_count includes cached"), "{text}");
    }

    #[test]
    fn backend_claims_from_log_facts_and_unresolved_without_them() {
        let mut a = rec("vk", 1, 0, true);
        a.managed = true;
        a.backend = Some(BackendFacts {
            backend: "Vulkan0 (llvmpipe (LLVM 15.0.6, 256 bits))".into(),
            devices: vec!["Vulkan0 (llvmpipe (LLVM 15.0.6, 256 bits))".into()],
            offloaded: Some((5, 5)),
            loaded_backends: vec![],
            evidence: vec![LogRef {
                file: "servers/s001-vk.log".into(),
                line: 3,
                text: "using device Vulkan0 …".into(),
            }],
        });
        let mut c = rec("cpu", 1, 1, true);
        c.backend = Some(BackendFacts { backend: "CPU".into(), offloaded: Some((1, 5)), ..Default::default() });
        let ext = rec("ext", -1, 2, true);
        let cl = claims(&[a, c, ext], std::path::Path::new("/runs/r"));
        let vk = cl.iter().find(|c| c.id.starts_with("sweep.vk.") && c.id.ends_with(".backend")).unwrap();
        assert_eq!(
            vk.statement,
            "`vk` at num_gpu=1 ran on Vulkan0 (llvmpipe (LLVM 15.0.6, 256 bits)) with 5/5 layers offloaded"
        );
        assert!(matches!(&vk.sources[0], Source::LogLine { line: 3, .. }));
        let cpu = cl.iter().find(|c| c.id.starts_with("sweep.cpu.") && c.id.ends_with(".backend")).unwrap();
        assert!(
            cpu.statement.contains("ran on the CPU: no GPU device was in use (the log's offload line reads 1/5)"),
            "{}",
            cpu.statement
        );
        let ext = cl.iter().find(|c| c.id.starts_with("sweep.ext.") && c.id.ends_with(".backend")).unwrap();
        assert_eq!(ext.confidence, Confidence::Unresolved);
        assert!(ext.statement.contains("unless its `log_file` is given"), "{}", ext.statement);
        let mut dead = rec("dead", 0, 3, false);
        dead.managed = true;
        dead.phase = Some(Phase::Start);
        let cl = claims(&[dead], std::path::Path::new("/runs/r"));
        let c = cl.iter().find(|c| c.id.ends_with(".backend")).unwrap();
        assert!(c.statement.ends_with("no backend to identify — the server never became ready"), "{}", c.statement);
    }

    #[test]
    fn mixed_outcomes_are_counted_per_kind() {
        let mut r2 = rec("x", 2, 1, false);
        r2.error_class = Some(ErrorClass::ReadTimeout);
        r2.signal = None;
        r2.ttf_ms = Some(300_000.0);
        let records = [rec("x", 2, 0, true), r2, rec("x", 2, 2, false)];
        let pts = points(&records);
        assert_eq!(pts.len(), 1);
        assert_eq!(status_text(&pts[0].0), "ok 1/3, crash SIGSEGV 1/3, read_timeout 1/3");
        let layout = crate::output::text::Layout { width: 120, all: false };
        let mut doc = Document::default();
        doc.push(table(&pts));
        let t = crate::output::text::render(&doc, layout);
        assert!(t.contains("300.00 s"), "{t}");
    }
}
