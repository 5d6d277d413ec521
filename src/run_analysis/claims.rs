//! The report's claims, from a run's statistics: the timing of each kind of failure with its verdict, the pattern
//! across num_gpu, endpoint-vs-endpoint ratios, the backend each group ran on (from its log), what the successful
//! requests measured, the kernels per request of traced groups, outliers, and the phase and signature of each
//! crash (from the failed cells' logs).

use std::path::Path;

use super::aggregate::{Group, Metric, Ratio, RecordRef, RunStats, Varies};
use super::stats::{self, Verdict};
use crate::evidence::{Claim, Confidence, Source};
use crate::run::format::record::{Record, RecordTrace};
use crate::run::format::run_dir::RunDir;
use crate::run_analysis::forensics;

/// Record sources listed under a claim that counts many records.
const REFS_SHOWN: usize = 8;

/// The file whose constants the statistical claims rest on.
const STATS_FILE: &str = "src/run_analysis/stats.rs";

fn id_part(s: &str) -> String {
    crate::run::format::paths::sanitize(s)
}

fn base_id(g: &Group) -> String {
    format!(
        "report.{}.{}.ngl{}.{}.n{}",
        id_part(&g.endpoint),
        id_part(&g.model),
        g.num_gpu,
        id_part(&g.prompt),
        g.num_predict
    )
}

fn run_sources(run_id: &str, refs: &[RecordRef]) -> Vec<Source> {
    refs.iter().map(|r| Source::Run { run_id: run_id.to_string(), file: Some(r.file.clone()) }).collect()
}

/// Seconds from milliseconds, three decimals: the resolution the investigation reported crash times at.
pub fn secs(ms: f64) -> String {
    format!("{:.3} s", ms / 1000.0)
}

/// `2.653 s ± 0.059 s`, or `2.653 s` for one value.
pub fn mean_sd(s: &stats::Summary) -> String {
    match s.sd {
        Some(sd) => format!("{} ± {}", secs(s.mean), secs(sd)),
        None => secs(s.mean),
    }
}

pub fn percent(x: f64) -> String {
    format!("{:.1}%", x * 100.0)
}

/// The claims of a run: `run_id` and `run_dir` address its records and logs.
pub fn claims(s: &RunStats, run_id: &str, run_dir: &Path) -> Vec<Claim> {
    let mut out = Vec::new();
    // What failed first: when and how (timing with its verdict, then the phase and signature from the logs).
    for g in &s.groups {
        out.extend(timing_claims(g, &s.varies, run_id));
        let failed: Vec<&Record> = g.failed_records.iter().collect();
        out.extend(forensics::point_claims(&failed, &base_id(g), &g.place(&s.varies), &g.endpoint, run_dir));
        out.extend(trace_crash_claims(&failed, &base_id(g), &g.place(&s.varies), &g.endpoint, run_id, run_dir));
    }
    out.extend(pattern_claims(s, run_id));
    // What ran, then how fast compared with the other endpoints (decode: the pivot's rate; the ratio table has the
    // prompt rates too).
    for g in &s.groups {
        out.push(backend_claim(g, &g.place(&s.varies), &base_id(g), run_id, run_dir));
        out.extend(vram_claim(g, &g.place(&s.varies), &base_id(g), run_id));
    }
    out.extend(s.ratios.iter().filter(|r| r.metric == Metric::DecodeTps).filter_map(|r| ratio_claim(r, s, run_id)));
    for g in &s.groups {
        let (at, base) = (g.place(&s.varies), base_id(g));
        out.extend(ok_claim(g, &at, &base, run_id));
        out.extend(kernel_claim(g, &at, &base, run_id, run_dir));
        out.extend(outlier_claims(g, &at, &base, run_id));
    }
    // Where a traced Vulkan device offers what the build's shaders lack.
    out.extend(crate::run_analysis::vulkan::run_claims("report.vulkan.capability", run_dir));
    // What kept the kernel's GPU-driver lines from being read or kept in full (`sweep --trace`).
    let kernel_log = RunDir::new(run_dir).kernel_log_path();
    if let Some(log) = crate::observe::kernel_log::stored::read_dir(run_dir, &kernel_log.display().to_string()) {
        out.extend(crate::observe::kernel_log::join::limits_claim(&log, "report.kernel_log"));
    }
    out
}

/// With `--trace`: what the first failed run's trace recorded as it died — the observer's and the Vulkan layer's
/// crash record (the last kernels launched, the last Vulkan dispatches submitted), a Vulkan device loss and a hang — with
/// how many of the failed runs kept carry one.
fn trace_crash_claims(
    failed: &[&Record],
    base: &str,
    at: &str,
    endpoint: &str,
    run_id: &str,
    run_dir: &Path,
) -> Vec<Claim> {
    let in_run = |f: &str| in_run(run_dir, f);
    let run = |r: &Record| Source::Run { run_id: run_id.to_string(), file: Some(r.file.clone()) };
    // The first failed run whose trace holds such a record (`pick`), and how many failed runs hold one.
    fn first<'r, T>(
        failed: &[&'r Record],
        pick: impl Fn(&'r RecordTrace) -> Option<&'r T>,
    ) -> (usize, Option<(&'r Record, &'r T)>) {
        let mut with = failed.iter().filter_map(|r| Some((*r, pick(r.trace.as_ref()?)?)));
        let first = with.next();
        (first.map_or(0, |_| 1 + with.count()), first)
    }
    // The claim placed in its group: which endpoint, cell and run, and how many failed runs carry such a record.
    let placed = |mut claim: Claim, r: &Record, n: usize, what: &str| {
        claim.statement = format!(
            "`{endpoint}` at {at}, run e{}r{} ({n} of the {} failed runs kept have a {what} in their trace): {}",
            r.epoch,
            r.repetition,
            failed.len(),
            claim.statement
        );
        claim
    };
    let mut out = Vec::new();
    if let (n, Some((r, crash))) = first(failed, |t| t.crashes.last()) {
        let mut claim = crash.claim(format!("{base}.trace_crash"), crash.sources(in_run));
        claim.sources.push(run(r));
        out.push(placed(claim, r, n, "crash record"));
    }
    if let (n, Some((r, lost))) = first(failed, |t| t.device_lost.first()) {
        let source =
            Source::file(in_run(&lost.file), None, None, "backscope-trace file: device_lost record (Vulkan layer)");
        out.push(placed(
            lost.claim(format!("{base}.trace_device_lost"), vec![source, run(r)]),
            r,
            n,
            "device_lost record",
        ));
    }
    if let (n, Some((r, hang))) = first(failed, |t| t.hangs.first()) {
        let source =
            Source::file(in_run(&hang.file), None, None, "backscope-trace file: hang_ms record (Vulkan layer)");
        out.push(placed(hang.claim(format!("{base}.trace_hang"), vec![source, run(r)]), r, n, "hang record"));
    }
    if let (n, Some((r, t))) = first(failed, |t| (!t.kernel.is_empty()).then_some(t)) {
        for claim in trace_kernel_claims(t, base, &in_run) {
            let mut claim = placed(claim, r, n, "kernel GPU-driver line");
            claim.sources.push(run(r));
            out.push(claim);
        }
    }
    out
}

/// The kernel's GPU-driver lines a failed request's record carries, as incidents joined to the server's traced
/// processes and to the record's crash, device-lost and hang records (the claims above name them).
fn trace_kernel_claims(t: &RecordTrace, base: &str, in_run: &dyn Fn(&str) -> String) -> Vec<Claim> {
    use crate::observe::kernel_log::join::{self, Failure};
    let mut failures = Vec::new();
    if let Some(c) = t.crashes.last() {
        let what = format!("crash ({})", c.signal);
        failures.push(Failure { pid: c.pid, at_ns: c.at_ns, what, claim: format!("{base}.trace_crash") });
    }
    if let Some(d) = t.device_lost.first() {
        let what = format!("VK_ERROR_DEVICE_LOST ({})", d.call);
        failures.push(Failure { pid: d.pid, at_ns: d.at_ns, what, claim: format!("{base}.trace_device_lost") });
    }
    if let Some(h) = t.hangs.first() {
        let what = "stalled GPU work (the layer's hang watcher)".to_string();
        failures.push(Failure { pid: h.pid, at_ns: h.at_ns, what, claim: format!("{base}.trace_hang") });
    }
    // The server's processes with a trace file in the window, and those whose failure records the trace holds (a
    // process that only crashed has no window).
    let mut traced: Vec<(u32, String)> = t.processes.iter().map(|p| (p.pid, p.exe.clone())).collect();
    let recorded = t.crashes.iter().map(|c| (c.pid, &c.exe));
    let recorded =
        recorded.chain(t.device_lost.iter().map(|d| (d.pid, &d.exe))).chain(t.hangs.iter().map(|h| (h.pid, &h.exe)));
    for (pid, exe) in recorded {
        if !traced.iter().any(|(p, _)| *p == pid) {
            traced.push((pid, exe.clone()));
        }
    }
    let joined = join::join(&t.kernel, &traced, &failures);
    joined
        .iter()
        .take(4)
        .enumerate()
        .map(|(i, j)| {
            let id = if joined.len() == 1 {
                format!("{base}.trace_kernel")
            } else {
                format!("{base}.trace_kernel.{}", i + 1)
            };
            let mut claim = j.claim(id, &failures, &|_, _| None);
            for s in &mut claim.sources {
                if let Source::LogLine { path, .. } = s {
                    *path = in_run(path);
                }
            }
            claim
        })
        .collect()
}

fn cv_rule() -> Source {
    Source::Rule {
        file: STATS_FILE.into(),
        rule: format!("CV_DETERMINISTIC = {:.2}, at least {} timed failures", stats::CV_DETERMINISTIC, stats::MIN_VERDICT_N),
        upstream: "a failure at a fixed point of the work varies as the work does (a few percent); one at a random moment spreads over the request: CV 1/√3 ≈ 0.58 for a uniform moment, 1 for an exponential waiting time".into(),
    }
}

/// Per kind of failure: how often, after how long, and whether at the same point every time.
fn timing_claims(g: &Group, varies: &Varies, run_id: &str) -> Vec<Claim> {
    let at = g.place(varies);
    let mut out = Vec::new();
    for (k, f) in g.failure_timing.iter().enumerate() {
        let id = format!("{}.timing.{}", base_id(g), k + 1);
        let Some(ttf) = &f.ttf_ms else {
            out.push(
                Claim::new(
                    id,
                    Confidence::Limited,
                    format!(
                        "`{}` at {at}: {} in {}/{} runs; no time to failure was recorded",
                        g.endpoint, f.outcome, f.n, g.n
                    ),
                )
                .with_sources(run_sources(run_id, &f.refs)),
            );
            continue;
        };
        let spread = match f.cv {
            Some(cv) => format!(" (CV {})", percent(cv)),
            None => String::new(),
        };
        let context = match f.ok_wall_cv {
            Some(cv) if f.verdict != Verdict::TooFew => {
                format!("; the successful requests at this point vary by {} in wall time", percent(cv))
            }
            _ => String::new(),
        };
        let statement = format!(
            "`{}` at {at}: {} in {}/{} runs after {}{spread}: {}{context}",
            g.endpoint,
            f.outcome,
            f.n,
            g.n,
            mean_sd(ttf),
            match f.verdict {
                Verdict::TooFew =>
                    format!("{} ({} timed, {} needed)", Verdict::TooFew.words(), f.timed, stats::MIN_VERDICT_N),
                v => v.words().to_string(),
            }
        );
        let confidence = if f.verdict == Verdict::TooFew { Confidence::Unresolved } else { Confidence::Inferred };
        let mut sources = run_sources(run_id, &f.refs);
        sources.push(cv_rule());
        out.push(Claim::new(id, confidence, statement).with_sources(sources));
    }
    out
}

/// An endpoint that works with nothing offloaded and fails at every num_gpu that offloads: the failure is in its
/// GPU path. Inferred: the pattern is observed, the cause is not.
fn pattern_claims(s: &RunStats, run_id: &str) -> Vec<Claim> {
    let mut out = Vec::new();
    // The groups of each (endpoint, model, prompt, num_predict), in the order the first of them ran.
    let mut order: Vec<(&str, &str, &str, i64)> = Vec::new();
    let mut by_key: std::collections::HashMap<(&str, &str, &str, i64), Vec<&Group>> = std::collections::HashMap::new();
    for g in &s.groups {
        let key = (g.endpoint.as_str(), g.model.as_str(), g.prompt.as_str(), g.num_predict);
        by_key
            .entry(key)
            .or_insert_with(|| {
                order.push(key);
                Vec::new()
            })
            .push(g);
    }
    for key in order {
        let same = &by_key[&key];
        let zero_ok = same.iter().any(|h| h.num_gpu == 0 && h.n > 0 && h.ok == h.n);
        let offload: Vec<&&Group> = same.iter().filter(|h| h.num_gpu != 0).collect();
        if !zero_ok || offload.is_empty() || !offload.iter().all(|h| h.ok == 0 && h.n > 0) {
            continue;
        }
        let values: Vec<String> = offload.iter().map(|h| h.num_gpu.to_string()).collect();
        let mut sources: Vec<Source> = offload
            .iter()
            .filter_map(|h| h.failure_timing.first().and_then(|f| f.refs.first()))
            .map(|r| Source::Run { run_id: run_id.into(), file: Some(r.file.clone()) })
            .collect();
        sources.extend(
            same.iter()
                .filter(|h| h.num_gpu == 0)
                .filter_map(|h| h.ok_refs.first())
                .map(|r| Source::Run { run_id: run_id.into(), file: Some(r.file.clone()) }),
        );
        let g = same[0];
        let mut at = String::new();
        if s.varies.model {
            at.push_str(&format!(" with model {}", g.model));
        }
        if s.varies.prompt || s.varies.num_predict {
            at.push_str(&format!(" (prompt {}, num_predict {})", g.prompt, g.num_predict));
        }
        out.push(
            Claim::new(
                format!("report.{}.{}.{}.n{}.offload_pattern", id_part(&g.endpoint), id_part(&g.model), id_part(&g.prompt), g.num_predict),
                Confidence::Inferred,
                format!(
                    "`{}`{at} works with no layers offloaded (num_gpu=0) and fails at every other num_gpu tried ({}): the failure is in its GPU path, not in the model or the server",
                    g.endpoint,
                    values.join(", ")
                ),
            )
            .with_sources(sources),
        );
    }
    out
}

/// The place of a ratio in words.
fn ratio_place(r: &Ratio, varies: &Varies) -> String {
    let mut s = format!("num_gpu={}", r.num_gpu);
    if varies.model {
        s.push_str(&format!(", model {}", r.model));
    }
    if varies.prompt {
        s.push_str(&format!(", prompt {}", r.prompt));
    }
    if varies.num_predict {
        s.push_str(&format!(", num_predict {}", r.num_predict));
    }
    s
}

/// `2.05×`, with three significant digits for small and large ratios alike.
pub fn times(x: f64) -> String {
    if x >= 10.0 {
        format!("{x:.1}×")
    } else if x >= 0.1 || x == 0.0 {
        format!("{x:.2}×")
    } else {
        let digits = (2.0 - x.log10().floor()).clamp(3.0, 12.0) as usize;
        format!("{x:.digits$}×")
    }
}

fn ratio_claim(r: &Ratio, s: &RunStats, run_id: &str) -> Option<Claim> {
    let num = s.group(&r.numerator, &r.model, r.num_gpu, &r.prompt, r.num_predict)?;
    let den = s.group(&r.denominator, &r.model, r.num_gpu, &r.prompt, r.num_predict)?;
    let at = ratio_place(r, &s.varies);
    let id = format!(
        "report.ratio.{}.{}_over_{}.{}.ngl{}.{}.n{}",
        match r.metric {
            super::aggregate::Metric::DecodeTps => "decode",
            super::aggregate::Metric::PromptTps => "prompt",
        },
        id_part(&r.numerator),
        id_part(&r.denominator),
        id_part(&r.model),
        r.num_gpu,
        id_part(&r.prompt),
        r.num_predict
    );
    let medians = format!(
        "medians {:.1} vs {:.1} t/s over {} and {} requests",
        stats::median(num.samples(r.metric))?,
        stats::median(den.samples(r.metric))?,
        r.n_numerator,
        r.n_denominator
    );
    // One record a side: the rest of each side is in the ok claim of its group.
    let mut sources = run_sources(run_id, &num.ok_refs[..num.ok_refs.len().min(1)]);
    sources.extend(run_sources(run_id, &den.ok_refs[..den.ok_refs.len().min(1)]));
    let (confidence, statement) = match &r.welch {
        Some(w) => {
            let reading = if w.low > 1.0 {
                "faster"
            } else if w.high < 1.0 {
                "slower"
            } else {
                "not shown to differ"
            };
            let df = w.df.map(|d| format!(", {d:.1} df")).unwrap_or_default();
            sources.push(Source::Rule {
                file: STATS_FILE.into(),
                rule: "welch_log_ratio".into(),
                upstream: "Welch's t interval on the logarithms of the rates (B. L. Welch, Biometrika 34, 1947), Satterthwaite's degrees of freedom".into(),
            });
            (
                Confidence::Inferred,
                format!(
                    "At {at}, `{}` over `{}` in {}: {} (ratio of geometric means; {:.0}% CI {}–{}, Welch on logs{df}) — {reading}; {medians}",
                    r.numerator,
                    r.denominator,
                    r.metric.words(),
                    times(w.ratio),
                    w.level * 100.0,
                    times(w.low),
                    times(w.high),
                ),
            )
        }
        None => (
            Confidence::Limited,
            format!(
                "At {at}, `{}` over `{}` in {}: {} (ratio of the medians; no confidence interval with fewer than two requests a side); {medians}",
                r.numerator,
                r.denominator,
                r.metric.words(),
                times(r.median_ratio),
            ),
        ),
    };
    Some(Claim::new(id, confidence, statement).with_sources(sources))
}

/// What ran the group's cells, from their server logs; Unresolved when no log said.
fn backend_claim(g: &Group, at: &str, base: &str, run_id: &str, run_dir: &Path) -> Claim {
    let id = format!("{base}.backend");
    let Some(r) = g.backend_record.as_deref() else {
        let never_started =
            g.ok == 0 && g.failed_records.iter().all(|r| r.phase == Some(crate::run::format::record::Phase::Start));
        let why = if never_started {
            "no backend to identify — the server never became ready"
        } else {
            "no server log named a device or an offload line (an external server needs its `log_file` in the spec; a managed one logs them at -lv 4)"
        };
        let refs: Vec<RecordRef> =
            g.ok_refs.iter().chain(g.failure_timing.iter().flat_map(|f| &f.refs)).take(1).cloned().collect();
        return Claim::new(id, Confidence::Unresolved, format!("`{}` at {at}: {why}", g.endpoint))
            .with_sources(run_sources(run_id, &refs));
    };
    let backend = g.backend_text().unwrap_or_default();
    let counted: usize = g.backends.iter().map(|b| b.cells).sum();
    let of = if counted == g.n { String::new() } else { format!(" ({counted} of {} cells name one)", g.n) };
    let statement = match g.backends.as_slice() {
        [b] if b.backend == "CPU" => {
            let devices = r.backend.as_ref().map(|f| f.devices.clone()).unwrap_or_default();
            // The offload line counts layers assigned, not where they ran: a CPU run may still read n/m.
            let line = b.offloaded.map(|(n, m)| format!(" (the log's offload line reads {n}/{m})")).unwrap_or_default();
            if devices.is_empty() {
                format!("`{}` at {at} ran on the CPU: no GPU device was in use{line}{of}", g.endpoint)
            } else {
                format!(
                    "`{}` at {at} ran on the CPU: {} was available but no layer was offloaded{line}{of}",
                    g.endpoint,
                    devices.join(", ")
                )
            }
        }
        [_] => format!("`{}` at {at} ran on {backend}{of}", g.endpoint),
        _ => format!("`{}` at {at} ran on different backends in different cells: {backend}{of}", g.endpoint),
    };
    let mut sources: Vec<Source> = r
        .backend
        .iter()
        .flat_map(|b| b.evidence.iter().take(6))
        .map(|e| {
            // `join` keeps an absolute path as it is.
            Source::LogLine { path: run_dir.join(&e.file).display().to_string(), line: e.line, text: e.text.clone() }
        })
        .collect();
    sources.push(Source::Run { run_id: run_id.into(), file: Some(r.file.clone()) });
    Claim::new(id, Confidence::Confirmed, statement).with_sources(sources)
}

/// Without a log that names the backend: how much of the loaded model Ollama reports in GPU memory (`/api/ps`),
/// from the first kept record that has that report. Inferred: memory placement, not which library ran.
fn vram_claim(g: &Group, at: &str, base: &str, run_id: &str) -> Option<Claim> {
    if g.backend_record.is_some() {
        return None;
    }
    let (r, fraction) = g.first_ok.as_deref().into_iter().chain(g.failed_records.iter()).find_map(|r| {
        let fraction = r.extra.get("ollama_ps")?.get("vram_fraction")?.as_f64()?;
        Some((r, fraction))
    })?;
    Some(
        Claim::new(
            format!("{base}.vram"),
            Confidence::Inferred,
            format!(
                "`{}` at {at}: Ollama reports {:.0}% of the loaded model in GPU memory (/api/ps size_vram/size); which backend library ran is not in that report",
                g.endpoint,
                fraction * 100.0
            ),
        )
        .with_source(Source::Run { run_id: run_id.into(), file: Some(r.file.clone()) }),
    )
}

/// What the group's successful requests measured: rates from the server's own counts and durations, wall times
/// of warm and cold requests apart.
fn ok_claim(g: &Group, at: &str, base: &str, run_id: &str) -> Option<Claim> {
    if g.ok == 0 {
        return None;
    }
    let mut parts = Vec::new();
    if let Some(d) = &g.decode_tps {
        parts.push(format!("decode {:.1} t/s (median of {}, MAD {:.1})", d.median, d.n, d.mad));
    }
    if let Some(p) = &g.prompt_tps {
        parts.push(format!("prompt {:.1} t/s (median of {}, MAD {:.1})", p.median, p.n, p.mad));
    }
    if let Some(w) = &g.wall_ms.warm {
        parts.push(format!("warm requests {} median, {} (n {})", secs(w.median), mean_sd(w), w.n));
    }
    if let Some(c) = &g.wall_ms.cold {
        let load = g
            .load_ms
            .cold
            .map(|l| format!(", of which model load {} (server-reported median)", secs(l.median)))
            .unwrap_or_default();
        parts.push(format!("cold requests {} median (n {}){load}", secs(c.median), c.n));
    }
    let measured = if parts.is_empty() { String::new() } else { format!(": {}", parts.join("; ")) };
    Some(
        Claim::new(
            format!("{base}.ok"),
            Confidence::Confirmed,
            format!("`{}` completed {}/{} runs at {at}{measured}", g.endpoint, g.ok, g.n),
        )
        .with_sources(run_sources(run_id, &g.ok_refs)),
    )
}

/// The kernels per request of a traced group. Silence proves nothing where the observer was not mapped into the
/// server or a trace was cut before its request ended; a cut trace's counts are lower bounds and what it does not
/// show may have run after the cut.
fn kernel_claim(g: &Group, at: &str, base: &str, run_id: &str, run_dir: &Path) -> Option<Claim> {
    let k = g.kernels.as_ref()?;
    let mut fams: Vec<(&String, &f64)> = k.families.iter().filter(|(_, n)| **n > 0.0).collect();
    fams.sort_by(|a, b| b.1.total_cmp(a.1).then_with(|| a.0.cmp(b.0)));
    let mut sources: Vec<Source> = k
        .files
        .iter()
        .map(|f| Source::file(in_run(run_dir, f), None, None, "backscope-trace file: windows overlapping the requests"))
        .collect();
    sources.extend(run_sources(run_id, &k.refs));
    let head = format!("`{}` at {at}: kernels per request (median of {} traced requests)", g.endpoint, k.traced);
    let nothing = k.families.is_empty();
    if nothing && k.unobserved > 0 {
        let statement = format!(
            "{head}: no kernel launch was observed, but the observer was not mapped into the server in {} of them (a static or setuid program ignores LD_PRELOAD)",
            k.unobserved
        );
        return Some(Claim::new(format!("{base}.kernels"), Confidence::Unresolved, statement).with_sources(sources));
    }
    if nothing && k.cut > 0 {
        let statement = format!(
            "{head}: no kernel launch was counted, but {} of the traces were cut before their request ended, so the launches during the requests are unknown",
            k.cut
        );
        return Some(Claim::new(format!("{base}.kernels"), Confidence::Unresolved, statement).with_sources(sources));
    }
    let families = if fams.is_empty() {
        if k.vulkan_layer == k.traced {
            "no CUDA/HIP kernel launch and no Vulkan dispatch (CPU work is not observed)".to_string()
        } else {
            "no CUDA/HIP kernel launch (Vulkan and CPU work are not observed)".to_string()
        }
    } else {
        fams.iter().take(8).map(|(f, n)| format!("{f} {n:.0}")).collect::<Vec<_>>().join(", ")
    };
    let launches = k.launches.map(|l| format!(", {:.0} launches in all", l.median)).unwrap_or_default();
    let matmul = if k.vulkan_kernels {
        crate::gpu::kernels::VULKAN_MATMUL_FAMILIES
    } else {
        crate::gpu::kernels::MATMUL_FAMILIES
    };
    let absent: Vec<&str> = matmul.iter().copied().filter(|f| !k.families.contains_key(*f)).collect();
    let absent = if fams.is_empty() || absent.is_empty() || k.cut > 0 {
        String::new()
    } else {
        format!(" and no {} in any of them", absent.join(", no "))
    };
    let (confidence, lower) = if k.cut > 0 {
        (
            Confidence::Limited,
            format!("; {} of the traces were cut before their request ended, so these are lower bounds", k.cut),
        )
    } else {
        (Confidence::Confirmed, String::new())
    };
    let precision =
        if k.interval_ms > 0 { format!(" [join precision: windows of {} ms]", k.interval_ms) } else { String::new() };
    Some(
        Claim::new(
            format!("{base}.kernels"),
            confidence,
            format!("{head}: {families}{launches}{absent}{lower}{precision}"),
        )
        .with_sources(sources),
    )
}

/// A path a record names, as a reader finds it: relative ones are under the run directory.
fn in_run(run_dir: &Path, f: &str) -> String {
    let path = Path::new(f);
    if path.is_absolute() {
        f.to_string()
    } else {
        run_dir.join(path).display().to_string()
    }
}

/// Outliers claimed one by one per group; the rest are counted in one claim (the outliers table lists them all).
const OUTLIER_CLAIMS: usize = 5;

fn outlier_claims(g: &Group, at: &str, base: &str, run_id: &str) -> Vec<Claim> {
    let mut out = Vec::new();
    if g.outliers.len() > OUTLIER_CLAIMS {
        let rest = &g.outliers[OUTLIER_CLAIMS..];
        out.push(
            Claim::new(
                format!("{base}.outliers"),
                Confidence::Confirmed,
                format!(
                    "`{}` at {at}: {} requests are wall-time outliers (|modified z-score| > {}); the first {OUTLIER_CLAIMS} follow, the outliers table lists every one",
                    g.endpoint,
                    g.outliers.len(),
                    stats::OUTLIER_THRESHOLD
                ),
            )
            .with_sources(rest.iter().take(REFS_SHOWN).map(|o| Source::Run { run_id: run_id.into(), file: Some(o.file.clone()) })),
        );
    }
    for o in g.outliers.iter().take(OUTLIER_CLAIMS) {
        let (kind, n, median) = if o.cold {
            ("cold", g.wall_ms.cold.map_or(0, |s| s.n), g.wall_ms.cold.map(|s| s.median))
        } else {
            ("warm", g.wall_ms.warm.map_or(0, |s| s.n), g.wall_ms.warm.map(|s| s.median))
        };
        out.push(
            Claim::new(
                format!("{base}.outlier.{}", o.seq),
                Confidence::Confirmed,
                format!(
                    "`{}` at {at}: request {} took {}, an outlier among the {n} {kind} requests (median {}; modified z-score {:.1}, |z| > {})",
                    g.endpoint,
                    o.seq,
                    secs(o.wall_ms),
                    median.map(secs).unwrap_or_default(),
                    o.z,
                    stats::OUTLIER_THRESHOLD
                ),
            )
            .with_sources([
                Source::Run { run_id: run_id.into(), file: Some(o.file.clone()) },
                Source::Rule {
                    file: STATS_FILE.into(),
                    rule: format!("OUTLIER_THRESHOLD = {}", stats::OUTLIER_THRESHOLD),
                    upstream: "Iglewicz and Hoaglin (1993): modified z-score 0.6745 (x − median) / MAD; NIST/SEMATECH e-Handbook §1.3.5.17".into(),
                },
            ]),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::aggregate::of_records;
    use super::*;

    use crate::run_analysis::test_records::measured as rec;

    #[test]
    fn the_investigations_crash_gets_its_verdict_and_the_pattern_its_claim() {
        let mut records = vec![rec("vk", 0, 0, true, 100.0), rec("vk", 0, 1, true, 102.0)];
        for (i, t) in [2594.0, 2653.0, 2712.0].into_iter().enumerate() {
            records.push(rec("vk", 1, 2 + i as u64, false, t));
        }
        let s = of_records(&records).unwrap();
        let cl = claims(&s, "r", Path::new("/runs/r"));
        let timing = cl.iter().find(|c| c.id.ends_with(".timing.1")).unwrap();
        assert_eq!(timing.confidence, Confidence::Inferred);
        assert!(
            timing.statement.starts_with("`vk` at num_gpu=1: crash SIGSEGV in 3/3 runs after 2.653 s ± 0.059 s (CV 2.2%): deterministic, not a race"),
            "{}",
            timing.statement
        );
        assert!(timing
            .sources
            .iter()
            .any(|s| matches!(s, Source::Rule { rule, .. } if rule.starts_with("CV_DETERMINISTIC"))));
        assert!(cl.iter().any(|c| c.id.ends_with(".offload_pattern") && c.confidence == Confidence::Inferred));
        let backend = cl.iter().find(|c| c.id.ends_with("ngl1.p.n8.backend")).unwrap();
        assert_eq!(backend.confidence, Confidence::Unresolved);
    }

    /// A traced Vulkan crash as `sweep --trace` records it (the merged summary of the observer's and the layer's
    /// crash records, tracecmd::CrashSummary) reaches the report as a Confirmed claim of its group.
    #[test]
    fn a_traced_crash_record_of_a_failed_run_is_a_claim_of_its_group() {
        let crash: crate::observe::trace_summary::crashes::CrashSummary = serde_json::from_value(serde_json::json!({
            "pid": 77, "exe": "/bin/llama-server", "file": "traces/s001-vk/trace-77.jsonl", "signal": "SIGSEGV",
            "code": 1, "addr": 0, "at_ns": 5000, "tid": 77, "fatal": true, "flushed": true,
            "threads": [{"tid": 77, "kernels": []}],
            "vulkan": [{"queue": 0, "device": "AMD Radeon RX Vega", "submits": 40, "dispatches": [
                {"name": "matmul_q4_k_f32_l", "family": "matmul", "op": "MUL_MAT", "dispatches": 2,
                 "grid": [8, 2, 1], "block": [256, 1, 1], "submits": [39, 40]}]}],
            "vulkan_file": "traces/s001-vk/trace-77.1.jsonl"
        }))
        .unwrap();
        let mut records = vec![rec("vk", 1, 0, false, 2600.0), rec("vk", 1, 1, false, 2650.0)];
        records[1].trace = Some(crate::run::format::record::RecordTrace {
            dir: "traces/s001-vk".into(),
            files: vec![],
            window_ns: [0, 1],
            interval_ms: 20,
            spill_ns: [0, 0],
            observer_loaded: Some(true),
            vulkan_layer: Some(true),
            total_launches: 2,
            failed_launches: 0,
            families: Default::default(),
            kernels: vec![],
            distinct_kernels: 1,
            processes: vec![],
            cut: vec![],
            crashes: vec![crash],
            device_lost: vec![],
            hangs: vec![],
            kernel: vec![],
            notes: vec![],
        });
        let s = of_records(&records).unwrap();
        let cl = claims(&s, "r", Path::new("/runs/r"));
        let c = cl.iter().find(|c| c.id.ends_with(".trace_crash")).expect("a trace crash claim");
        assert_eq!(c.confidence, Confidence::Confirmed);
        assert!(
            c.statement.starts_with(
                "`vk` at num_gpu=1, run e1r1 (1 of the 2 failed runs kept have a crash record in their trace): pid 77"
            ),
            "{}",
            c.statement
        );
        assert!(
            c.statement.contains("the last Vulkan dispatches before the crash were: queue 0 (AMD Radeon RX Vega), submissions 39–40 of 40: 2× matmul_q4_k_f32_l (MUL_MAT) [8,2,1]"),
            "{}",
            c.statement
        );
        assert_eq!(c.sources.len(), 3, "{:?}", c.sources);
        assert!(cl.iter().all(|c| !c.id.ends_with(".trace_device_lost")));
    }

    /// A hang the layer's watcher recorded during a failed run (a Vega's device loss begins as one) reaches the report
    /// with what the GPU's markers said was in flight: Confirmed by markers, Inferred by submission.
    #[test]
    fn a_traced_hang_of_a_failed_run_names_what_was_in_flight() {
        let hang = |by: &str, exact: bool| -> crate::observe::trace_summary::crashes::HangSummary {
            serde_json::from_value(serde_json::json!({
                "pid": 77, "exe": "/bin/llama-server", "file": "traces/s001-vk/trace-77.jsonl", "stalled_ms": 10000,
                "at_ns": 5000,
                "vulkan": [{"queue": 0, "device": "AMD Radeon RX Vega", "submits": 40, "dispatches": [],
                    "progress": {"by": by, "exact": exact, "completed": 57, "pending": true, "not_started": 40,
                        "in_flight": [{"name": "matmul_q4_k_f32_l", "op": "MUL_MAT", "submit": 40, "index": 58,
                            "grid": [8, 2, 1]}]}}]
            }))
            .unwrap()
        };
        for (by, exact, confidence, words) in [
            ("buffer_marker", true, Confidence::Confirmed, "in flight: matmul_q4_k_f32_l (MUL_MAT) [8,2,1] (dispatch 58 of submission 40) (57 completed before it, 40 not started; by the GPU's own completion markers)"),
            ("submission", false, Confidence::Inferred, "unfinished: one or more of matmul_q4_k_f32_l (MUL_MAT) [8,2,1]"),
        ] {
            let mut records = vec![rec("vk", 1, 0, false, 2600.0)];
            let mut trace = traced(0, true, 2).trace.unwrap();
            trace.hangs = vec![hang(by, exact)];
            records[0].trace = Some(trace);
            let s = of_records(&records).unwrap();
            let cl = claims(&s, "r", Path::new("/runs/r"));
            let c = cl.iter().find(|c| c.id.ends_with(".trace_hang")).expect("a trace hang claim");
            assert_eq!(c.confidence, confidence, "{}", c.statement);
            assert!(c.statement.contains("GPU work made no progress for 10.0 s while pending"), "{}", c.statement);
            assert!(c.statement.contains(words), "{}", c.statement);
        }
    }

    /// A failed run whose record carries the kernel's amdgpu lines naming the server's pid: the report joins them to its
    /// hang record and cites them in the run directory's kernel-log.jsonl.
    #[test]
    fn the_kernel_lines_of_a_failed_run_join_its_hang_record() {
        let mut records = vec![rec("vk", 1, 0, false, 2600.0)];
        let mut trace = traced(0, true, 2).trace.unwrap();
        trace.hangs = vec![serde_json::from_value(serde_json::json!({
            "pid": 42, "exe": "/bin/llama-server", "file": "traces/s001-cuda/trace-42.jsonl", "stalled_ms": 2000,
            "at_ns": 12_000_000_000u64, "vulkan": []
        }))
        .unwrap()];
        // ggml-org/llama.cpp#21724's kernel lines (turn 8), the pid the server's.
        let line = |n: u64, usec: u64, text: &str| {
            crate::observe::kernel_log::record::KernelLine::new(
                "kernel-log.jsonl".into(),
                n,
                (n, usec, 3),
                text.into(),
                None,
            )
            .unwrap()
        };
        trace.kernel = vec![
            line(2, 10_000_000, "amdgpu 0000:c2:00.0: ring gfx_0.0.0 timeout, signaled seq=166926, emitted seq=166928"),
            line(3, 10_000_050, "amdgpu 0000:c2:00.0:  Process llama-server pid 42 thread llama-server pid 42"),
            line(4, 10_000_100, "amdgpu 0000:c2:00.0: Ring gfx_0.0.0 reset succeeded"),
        ];
        records[0].trace = Some(trace);
        let s = of_records(&records).unwrap();
        let cl = claims(&s, "r", Path::new("/runs/r"));
        let c = cl.iter().find(|c| c.id.ends_with(".trace_kernel")).expect("a kernel claim");
        assert_eq!(c.confidence, Confidence::Confirmed);
        assert!(
            c.statement.contains("(1 of the 1 failed runs kept have a kernel GPU-driver line in their trace): The kernel's GPU driver reported a GPU job timeout on ring gfx_0.0.0 naming pid 42 (llama-server), a traced process (/bin/llama-server)")
                && c.statement.contains("2.000 s before pid 42's stalled GPU work (the layer's hang watcher) (report.vk.m.ngl1.p.n8.trace_hang); the GPU was reset"),
            "{}",
            c.statement
        );
        assert!(
            matches!(&c.sources[0], Source::LogLine { path, line: 2, .. } if path == "/runs/r/kernel-log.jsonl"),
            "{:?}",
            c.sources
        );
    }

    #[test]
    fn two_crashes_are_too_few_for_a_verdict() {
        let s = of_records(&[rec("vk", 1, 0, false, 2000.0), rec("vk", 1, 1, false, 2600.0)]).unwrap();
        let cl = claims(&s, "r", Path::new("/runs/r"));
        let timing = cl.iter().find(|c| c.id.ends_with(".timing.1")).unwrap();
        assert_eq!(timing.confidence, Confidence::Unresolved);
        assert!(timing.statement.contains("too few timed crashes to tell (2 timed, 3 needed)"), "{}", timing.statement);
    }

    #[test]
    fn a_ratio_claim_reads_its_interval() {
        let mut records = Vec::new();
        for (i, w) in [100.0, 110.0, 90.0].into_iter().enumerate() {
            records.push(rec("cpu", 0, i as u64, true, w));
        }
        for (i, w) in [400.0, 420.0, 380.0].into_iter().enumerate() {
            records.push(rec("vk", 0, 10 + i as u64, true, w));
        }
        let s = of_records(&records).unwrap();
        let cl = claims(&s, "r", Path::new("/runs/r"));
        let r = cl.iter().find(|c| c.id.starts_with("report.ratio.decode.vk_over_cpu")).unwrap();
        assert_eq!(r.confidence, Confidence::Inferred);
        assert!(r.statement.contains("— faster; medians 40.0 vs 10.0 t/s over 3 and 3 requests"), "{}", r.statement);
        assert!(!cl.iter().any(|c| c.id.starts_with("report.ratio.prompt")), "prompt ratios are in the table only");
    }

    /// A traced request whose server had the observer unmapped (or mapped), with `launches` kernels counted.
    fn traced(seq: u64, observer_loaded: bool, launches: u64) -> Record {
        let mut r = rec("cuda", 99, seq, true, 100.0);
        r.trace = Some(crate::run::format::record::RecordTrace {
            dir: "traces/s001-cuda".into(),
            files: vec![],
            window_ns: [0, 1],
            interval_ms: 20,
            spill_ns: [0, 0],
            observer_loaded: Some(observer_loaded),
            vulkan_layer: None,
            total_launches: launches,
            failed_launches: 0,
            families: if launches > 0 { [("MMVQ".to_string(), launches)].into() } else { Default::default() },
            kernels: vec![],
            distinct_kernels: u64::from(launches > 0),
            processes: vec![crate::run::format::record::TraceProcess {
                pid: 42,
                ppid: 1,
                exe: "/bin/llama-server".into(),
                file: "traces/s001-cuda/trace-42.jsonl".into(),
                launches,
            }],
            cut: vec![],
            crashes: vec![],
            device_lost: vec![],
            hangs: vec![],
            kernel: vec![],
            notes: vec![],
        });
        r
    }

    #[test]
    fn silence_under_an_unmapped_observer_is_unresolved() {
        // A static or setuid server ignores LD_PRELOAD: no launch counted proves nothing.
        let s = of_records(&[traced(0, false, 0), traced(1, false, 0)]).unwrap();
        let cl = claims(&s, "r", Path::new("/runs/r"));
        let k = cl.iter().find(|c| c.id == "report.cuda.m.ngl99.p.n8.kernels").unwrap();
        assert_eq!(k.confidence, Confidence::Unresolved, "{}", k.statement);
        assert!(k.statement.contains("the observer was not mapped into the server in 2 of them"), "{}", k.statement);
        // The trace file is cited once for both requests, under the run directory, before the records.
        assert!(
            matches!(&k.sources[0], Source::File { path, .. } if path == "/runs/r/traces/s001-cuda/trace-42.jsonl")
        );
        assert_eq!(k.sources.iter().filter(|s| matches!(s, Source::File { .. })).count(), 1);
        // Mapped, the same silence is a finding; launches name the matmul families no request used.
        let s = of_records(&[traced(0, true, 0)]).unwrap();
        let k = claims(&s, "r", Path::new("/runs/r")).into_iter().find(|c| c.id.ends_with(".kernels")).unwrap();
        assert_eq!(k.confidence, Confidence::Confirmed);
        let s = of_records(&[traced(0, true, 800), traced(1, true, 820)]).unwrap();
        let k = claims(&s, "r", Path::new("/runs/r")).into_iter().find(|c| c.id.ends_with(".kernels")).unwrap();
        assert!(
            k.statement.ends_with(
                "MMVQ 810, 810 launches in all and no MMQ, no MMVF, no MMF in any of them [join precision: windows of 20 ms]"
            ),
            "{}",
            k.statement
        );
    }

    #[test]
    fn ollamas_vram_share_is_claimed_only_without_log_facts() {
        let mut r = rec("ollama", -1, 0, true, 100.0);
        r.extra.insert("ollama_ps".into(), serde_json::json!({"size": 2, "size_vram": 1, "vram_fraction": 0.5}));
        let s = of_records(std::slice::from_ref(&r)).unwrap();
        let cl = claims(&s, "r", Path::new("/runs/r"));
        let vram = cl.iter().find(|c| c.id == "report.ollama.m.ngl-1.p.n8.vram").unwrap();
        assert_eq!(vram.confidence, Confidence::Inferred);
        assert!(vram.statement.contains("Ollama reports 50% of the loaded model in GPU memory"), "{}", vram.statement);
        r.backend = Some(crate::run::format::record::BackendFacts {
            backend: "CUDA0 (NVIDIA H100)".into(),
            offloaded: Some((29, 29)),
            ..Default::default()
        });
        let s = of_records(&[r]).unwrap();
        let cl = claims(&s, "r", Path::new("/runs/r"));
        assert!(cl.iter().all(|c| !c.id.ends_with(".vram")), "the log names the backend: {cl:?}");
        let b = cl.iter().find(|c| c.id.ends_with(".backend")).unwrap();
        assert!(b.statement.ends_with("ran on CUDA0 (NVIDIA H100) (29/29 layers)"), "{}", b.statement);
    }

    #[test]
    fn ratios_keep_three_significant_digits() {
        assert_eq!(times(9.4213), "9.42×");
        assert_eq!(times(67.71), "67.7×");
        assert_eq!(times(0.1304), "0.13×");
        assert_eq!(times(0.04123), "0.0412×");
        assert_eq!(times(0.001234), "0.00123×");
    }
}
