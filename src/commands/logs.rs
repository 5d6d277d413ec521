//! `backscope logs FILE|-`: the log forensics of `backscope-logs` (a timeline, the facts a log states, each crash
//! with its phase and signature) as claims citing `file:line`, through the output layer.
//!
//! The log is streamed (standard input too) in bounded memory: the parser keeps one line of at most
//! `Limits::max_line` bytes, and the report keeps bounded lists. A binary file is refused with the offset of the
//! NUL byte that gave it away; an over-long line is cut and said so (a Limited claim).

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use anyhow::Result;
use logs::analysis::{Crash, Report, TimelineEntry};
use logs::{analyze_reader, Limits, Phase};
use serde::Serialize;

use crate::evidence::{Claim, Confidence, Source};
use crate::exit;
use crate::observe::logfacts::{crash_time, crash_what, fill_line_texts};
use crate::output::text::truncate;
use crate::output::{Collapse, Column, Document, Excerpt, Output, OutputOptions, Render, Table, Text};

/// JSON schema of `backscope logs --json`.
pub const SCHEMA: &str = "backscope.logs-command/1";

/// One `backscope logs` invocation.
#[derive(Clone, Debug, Default)]
pub struct LogsOptions {
    /// The log; `-` reads standard input.
    pub input: PathBuf,
    pub output: OutputOptions,
}

/// How a log is named in claims: its absolute path, or `<stdin>`.
fn source_name(input: &Path) -> String {
    if input == Path::new("-") {
        return "<stdin>".into();
    }
    std::path::absolute(input).unwrap_or_else(|_| input.to_path_buf()).display().to_string()
}

pub fn run(opts: &LogsOptions) -> Result<u8> {
    let name = source_name(&opts.input);
    // A regular file is read twice (the second time for the lines claims cite); anything else — standard input, a
    // pipe (`<(…)`) — once, since it cannot be read again. A named FIFO is refused: its open would wait for a writer.
    let regular = opts.input != Path::new("-") && std::fs::metadata(&opts.input).is_ok_and(|m| m.is_file());
    let reader: Box<dyn Read> = if opts.input == Path::new("-") {
        Box::new(std::io::stdin().lock())
    } else if std::fs::metadata(&opts.input).is_ok_and(|m| m.is_dir()) {
        anyhow::bail!("{} is a directory: give a log file, or - for standard input", opts.input.display());
    } else {
        crate::host::inputs::open_stream(&opts.input)?
    };
    let mut out = Output::open(&opts.output, &crate::output::Inputs::none().path(&opts.input))?;
    let report = analyze_reader(reader, Limits::default()).map_err(|e| anyhow::anyhow!("{}: {e}", name))?;
    // A script reads the verdict from the status without --json: 0 no crash, 1 a crash, 2 (an error) unreadable.
    let status = if report.crashes_total > 0 { exit::CRASH_FOUND } else { exit::OK };
    let mut view = LogsView::new(name, report);
    if regular {
        // Lines the timeline did not keep are read again for the claims that cite them.
        fill_line_texts(&mut view.claims, &opts.input, &view.input);
    }
    match out.emit(&view).and_then(|()| out.finish()) {
        // A reader that closed the pipe early (`| head`) still gets the verdict in the status.
        Err(e) if crate::output::is_broken_pipe(&e) => Ok(status),
        Err(e) => Err(e),
        Ok(()) => Ok(status),
    }
}

/// A log's analysis and the claims it supports.
#[derive(Debug, Serialize)]
struct LogsView {
    pub schema: &'static str,
    /// The log's absolute path, or `<stdin>`.
    pub input: String,
    pub claims: Vec<Claim>,
    pub report: Report,
}

impl LogsView {
    pub fn new(input: String, report: Report) -> Self {
        let claims = claims(&report, &input);
        LogsView { schema: SCHEMA, input, claims, report }
    }
}

impl Render for LogsView {
    fn write_json(&self, out: &mut dyn Write) -> std::io::Result<()> {
        serde_json::to_writer(&mut *out, self)?;
        writeln!(out)
    }

    fn document(&self) -> Document {
        document(self)
    }
}

/// The raw text of line `line`, where the report kept it: the timeline, or a crash's first line and its causes.
fn line_text(r: &Report, line: u64) -> Option<&str> {
    if let Some(e) = r.timeline.iter().find(|e| e.line == line) {
        return Some(e.raw.as_str());
    }
    r.crashes.iter().find_map(|c| {
        if c.line == line && !c.raw.is_empty() {
            return Some(c.raw.as_str());
        }
        c.causes.iter().chain(&c.consequences).find(|x| x.line == line && !x.raw.is_empty()).map(|x| x.raw.as_str())
    })
}

/// A source citing line `line` of the log, quoted as it is written there. A line the report did not keep gets an
/// empty text, which [`fill_line_texts`] fills by reading the file again: a quote is never another line's text nor
/// a summary.
fn log_line(r: &Report, file: &str, line: u64) -> Source {
    let text = line_text(r, line).unwrap_or("");
    Source::LogLine { path: file.to_string(), line, text: truncate(text, 300) }
}

/// The claims about a crash: what happened (Confirmed, from the lines), its phase (Inferred: the rule is an
/// inference from the lines it cites), and its signature. `id` prefixes the claim ids; `file` names the log.
fn crash_claims(r: &Report, c: &Crash, file: &str, id: &str) -> Vec<Claim> {
    let mut out = Vec::new();
    let mut sources = vec![log_line(r, file, c.line)];
    if let Some(s) = &c.signal {
        if s.line != c.line && s.line > 0 {
            sources.push(log_line(r, file, s.line));
        }
    }
    for cause in c.causes.iter().filter(|x| x.line > 0 && x.line != c.line).take(3) {
        sources.push(log_line(r, file, cause.line));
    }
    for q in c.consequences.iter().filter(|x| x.line > 0).take(2) {
        sources.push(log_line(r, file, q.line));
    }
    let from_caller = c.causes.iter().chain(&c.consequences).find(|x| x.line == 0);
    let caller = from_caller.map(|x| format!("; the supervisor saw {}", x.text)).unwrap_or_default();
    let frames =
        if c.signature.frames.is_empty() { String::new() } else { format!(" in {}", c.signature.frames.join(" > ")) };
    let op = c.op.as_ref().map(|o| format!(", while running op {} (line {})", o.value, o.line)).unwrap_or_default();
    // A Windows status the runner exited with names its failure (0xc0000409 a fail-fast, 0xc0000135 a missing DLL…)
    // even where another line is the crash's first cause.
    let status = c
        .causes
        .iter()
        .chain(&c.consequences)
        .find_map(|x| logs::signature::windows_status(&x.raw).map(|s| (x.line, s)))
        .filter(|_| c.signal.as_ref().is_none_or(|s| logs::signature::windows_status(&s.name).is_none()))
        .map(|(line, (code, meaning))| format!("; line {line}: exit status {code}, {meaning}"))
        .unwrap_or_default();
    let repeated = c.causes.iter().filter(|x| x.count > 1).map(|x| repeat_words(c, x)).collect::<String>();
    out.push(
        Claim::new(
            id.to_string(),
            Confidence::Confirmed,
            format!(
                "The log shows a crash at line {}{}: {}{op}{frames}{status}{repeated}{caller}",
                c.line,
                crash_time(c),
                crash_what(c)
            ),
        )
        .with_sources(sources),
    );
    if c.attempts.len() > 1 {
        out.push(attempts_claim(r, c, file, id));
    }
    if let Some(claim) = gpu_driver_claim(r, c, file, id) {
        out.push(claim);
    }
    if let Some(claim) = cpu_feature_claim(r, c, file, id) {
        out.push(claim);
    }
    let phase_sources: Vec<Source> = c.phase_lines.iter().take(6).map(|l| log_line(r, file, *l)).collect::<Vec<_>>();
    let confidence = if c.phase == Phase::Unknown { Confidence::Unresolved } else { Confidence::Inferred };
    out.push(
        Claim::new(
            format!("{id}.phase"),
            confidence,
            format!("The crash at line {} happened during {}: {}", c.line, phase_words(c.phase), c.phase_rule),
        )
        .with_sources(phase_sources),
    );
    out.push(
        Claim::new(
            format!("{id}.signature"),
            Confidence::Confirmed,
            format!(
                "Crash signature {} (the crash with addresses and numbers left out, so identical crashes group): {}",
                c.signature.id,
                if c.signature.text.is_empty() { "(nothing to normalise)" } else { &c.signature.text }
            ),
        )
        .with_source(log_line(r, file, c.line)),
    );
    out
}

/// How often a failure line was printed, and what the repeats were when the log tells: lines one after another are
/// threads that hit the same failure at once; the attempts of a retry loop each print theirs; repeats apart from
/// each other are said as such, without a guess.
fn repeat_words(c: &Crash, x: &logs::analysis::CrashLine) -> String {
    let what = if c.attempts.len() > 1 {
        "once per allocation attempt".to_string()
    } else if x.last + 1 == x.line + x.count {
        "on consecutive lines: threads that hit the same failure".to_string()
    } else {
        format!(
            "between lines {} and {}, not one after another: retries or threads, the log does not say",
            x.line, x.last
        )
    };
    format!("; line {}'s failure was printed {} times ({what})", x.line, x.count)
}

/// The kernel's side of a GPU failure (amdgpu lines pasted beside the runner's log), joined to the runner's crash in
/// the same incident: "the GPU job of pid N timed out on ring X and the GPU was reset; the runner then crashed with …".
/// The kernel lines are facts; that they are the runner's failure is an inference from their order (and the process
/// the kernel names), so a joined claim is Inferred.
fn gpu_driver_claim(r: &Report, c: &Crash, file: &str, id: &str) -> Option<Claim> {
    use logs::event::GpuDriverEvent as G;
    let k = &c.gpu_driver;
    let first = |e: G| k.iter().find(|d| d.event == e);
    let timeout = first(G::RingTimeout);
    let fault = first(G::PageFault);
    let (hang, xid) = (first(G::Hang), first(G::Xid));
    let process = k.iter().find(|d| d.pid.is_some() || d.process.is_some());
    if timeout.is_none()
        && fault.is_none()
        && hang.is_none()
        && xid.is_none()
        && first(G::Coredump).is_none()
        && first(G::ResetBegin).is_none()
    {
        return None;
    }
    let who = match process {
        Some(d) => format!(
            " of {}{}",
            d.process.as_deref().map(|p| format!("process {p} ")).unwrap_or_default(),
            d.pid.map(|p| format!("pid {p}")).unwrap_or_default()
        )
        .trim_end()
        .to_string(),
        None => String::new(),
    };
    let mut parts = Vec::new();
    if let Some(t) = timeout {
        let ring = t.ring.as_deref().map(|r| format!(" on ring {r}")).unwrap_or_default();
        parts.push(format!("the GPU job{who} timed out{ring} (line {})", t.line));
    }
    if let Some(f) = fault {
        parts.push(format!("the GPU faulted on a page{who} (line {})", f.line));
    }
    if let Some(h) = hang {
        parts.push(format!("the GPU hung in the job{who} (line {})", h.line));
    }
    if let Some(x) = xid {
        parts.push(format!("NVIDIA's driver reported Xid {}{who} (line {})", x.code.unwrap_or(0), x.line));
    }
    if let Some(d) = first(G::Coredump) {
        parts.push(format!("the driver wrote a device coredump (line {})", d.line));
    }
    match (first(G::ResetSucceeded), first(G::ResetFailed), first(G::ResetBegin)) {
        (_, Some(f), _) => parts.push(format!("the GPU reset failed (line {})", f.line)),
        (Some(s), _, _) => parts.push(format!("the GPU was reset (line {})", s.line)),
        (None, None, Some(b)) => parts.push(format!("a GPU reset began (line {})", b.line)),
        _ => {}
    }
    let runner = c.causes.iter().chain(&c.consequences).find(|x| x.kind != "gpu_driver");
    let (confidence, then) = match runner {
        Some(x) => (Confidence::Inferred, format!("; the runner then crashed with {} (line {})", x.text, x.line)),
        None => (Confidence::Confirmed, "; the runner's own crash lines are not in this log".to_string()),
    };
    let mut sources: Vec<Source> = k.iter().take(5).map(|d| log_line(r, file, d.line)).collect();
    if let Some(x) = runner {
        sources.push(log_line(r, file, x.line));
    }
    Some(
        Claim::new(
            format!("{id}.gpu_driver"),
            confidence,
            format!("The kernel's GPU driver: {}{then}", parts.join(", ")),
        )
        .with_sources(sources),
    )
}

/// An allocation retry loop gathered into one incident: each attempt with its GPU layers.
fn attempts_claim(r: &Report, c: &Crash, file: &str, id: &str) -> Claim {
    let steps: Vec<String> = c
        .attempts
        .iter()
        .map(|a| {
            let layers = a.gpu_layers.map_or("? GPU layers".to_string(), |n| format!("{n} GPU layers"));
            format!("{layers} → {} (line {})", a.text, a.line)
        })
        .collect();
    let mut sources = Vec::new();
    for a in c.attempts.iter().take(4) {
        if let Some(l) = a.request_line {
            sources.push(log_line(r, file, l));
        }
        sources.push(log_line(r, file, a.line));
    }
    Claim::new(
        format!("{id}.attempts"),
        Confidence::Confirmed,
        format!(
            "The crash at line {} is a retry loop of {} allocation attempts, each with fewer GPU layers, all failing for memory: {}",
            c.line,
            c.attempts.len(),
            steps.join("; ")
        ),
    )
    .with_sources(sources)
}

/// A SIGILL with the Go runtime's `instruction bytes:` dump: the CPU met an instruction it does not have (the
/// runtime was built for CPU features this machine lacks). The leading byte tells the encoding: 0x62 begins an
/// EVEX (AVX-512) instruction in 64-bit code, 0xc4/0xc5 a VEX (AVX/AVX2/FMA) one (Intel SDM vol. 2, chapter 2).
fn cpu_feature_claim(r: &Report, c: &Crash, file: &str, id: &str) -> Option<Claim> {
    let s = c.signal.as_ref().filter(|s| s.name == "SIGILL")?;
    let bytes = s.instruction_bytes.as_ref()?;
    let first = bytes.value.split_whitespace().next().unwrap_or_default().to_ascii_lowercase();
    let family = match first.as_str() {
        "0x62" => " (0x62 begins an EVEX-encoded instruction: AVX-512)",
        "0xc4" | "0xc5" => " (0xc4/0xc5 begin a VEX-encoded instruction: AVX, AVX2 or FMA)",
        _ => "",
    };
    Some(
        Claim::new(
            format!("{id}.cpu_feature"),
            Confidence::Inferred,
            format!(
                "The crash at line {} is an illegal instruction in host code (instruction bytes {}{family}): the runtime was built for a CPU feature this CPU lacks — a CPU-feature mismatch, not a GPU fault",
                c.line, bytes.value
            ),
        )
        .with_sources([log_line(r, file, s.line), log_line(r, file, bytes.line)]),
    )
}

fn phase_words(p: Phase) -> &'static str {
    match p {
        Phase::Discovery => "GPU discovery",
        Phase::Load => "model loading",
        Phase::FirstCompute => "the first compute on the model",
        Phase::Decode => "decoding (a request had already computed)",
        Phase::Unknown => "an unknown phase",
    }
}

fn claims(r: &Report, file: &str) -> Vec<Claim> {
    let mut out = Vec::new();
    for (i, c) in r.crashes.iter().enumerate() {
        out.extend(crash_claims(r, c, file, &format!("logs.crash.{}", i + 1)));
    }
    for g in r.signatures.iter().filter(|g| g.count > 1) {
        let lines: Vec<String> = g.crash_lines.iter().map(|l| l.to_string()).collect();
        out.push(
            Claim::new(
                format!("logs.signature.{}", g.id),
                Confidence::Confirmed,
                format!("{} crashes share signature {} (lines {}): {}", g.count, g.id, lines.join(", "), g.text),
            )
            .with_sources(g.crash_lines.iter().take(6).map(|l| log_line(r, file, *l))),
        );
    }
    if r.crashes_dropped > 0 {
        let ungrouped = if r.signatures_dropped > 0 {
            format!("; {} of them have signatures beyond the {} listed", r.signatures_dropped, r.signatures.len())
        } else {
            String::new()
        };
        out.push(Claim::new(
            "logs.crashes_dropped",
            Confidence::Limited,
            format!(
                "The log shows {} crashes; the first {} are shown in detail, the other {} are counted and grouped by signature but not kept{ungrouped}",
                r.crashes_total,
                r.crashes.len(),
                r.crashes_dropped
            ),
        ));
    }
    if r.crashes.is_empty() {
        out.push(ending_claim(r, file));
    }
    out.extend(placement_claims(r, file));
    for b in &r.facts.backends {
        out.push(
            Claim::new(
                format!("logs.backend.{}", b.name),
                Confidence::Confirmed,
                format!("The runtime loaded its {} backend from {}", b.name, b.path),
            )
            .with_source(log_line(r, file, b.line)),
        );
    }
    for d in &r.facts.devices {
        let detail = [
            d.arch.clone(),
            d.compute_capability.as_ref().map(|c| format!("compute capability {c}")),
            d.driver.clone(),
            d.vram_mib.map(|v| format!("{v} MiB")),
        ]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join(", ");
        let detail = if detail.is_empty() { String::new() } else { format!(" ({detail})") };
        out.push(
            Claim::new(
                format!("logs.device.{}{}", d.backend, d.index),
                Confidence::Confirmed,
                format!("The log lists {} device {}: {}{detail}", d.backend, d.index, d.name),
            )
            .with_source(log_line(r, file, d.line)),
        );
    }
    if let Some(o) = &r.facts.offload {
        let what = if o.offloaded == 0 {
            format!("No layer was offloaded to a GPU (0/{} layers): the model ran on the CPU", o.total)
        } else {
            format!("{}/{} layers were offloaded to the GPU", o.offloaded, o.total)
        };
        // A printed offload the log itself contradicts (no device found, every model buffer on the CPU) is not a
        // fact: the claim names both lines.
        let against: Vec<&logs::placement::Contradiction> =
            r.facts.placement.contradictions.iter().filter(|x| x.lines.contains(&o.line)).collect();
        let claim = if against.is_empty() {
            Claim::new("logs.offload", Confidence::Confirmed, what).with_source(log_line(r, file, o.line))
        } else {
            let mut lines: Vec<u64> = against.iter().flat_map(|x| x.lines.iter().copied()).collect();
            lines.sort_unstable();
            lines.dedup();
            let texts: Vec<&str> = against.iter().map(|x| x.text.as_str()).collect();
            Claim::new(
                "logs.offload",
                Confidence::Inferred,
                format!("Line {} says {what}, but {}", o.line, texts.join("; and ")),
            )
            .with_sources(lines.iter().take(6).map(|l| log_line(r, file, *l)))
        };
        out.push(claim);
    }
    let limited = |set: &logs::analysis::LineSet| -> Vec<Source> {
        set.ranges.iter().take(4).map(|(a, _)| log_line(r, file, *a)).collect()
    };
    if r.truncated.count > 0 {
        out.push(
            Claim::new(
                "logs.truncated",
                Confidence::Limited,
                format!(
                    "{} line(s) were longer than {} KiB: only their beginning was read, the rest skipped ({})",
                    r.truncated.count,
                    Limits::default().max_line >> 10,
                    line_ranges(&r.truncated)
                ),
            )
            .with_sources(limited(&r.truncated)),
        );
    }
    if r.bad_timestamps.count > 0 {
        out.push(
            Claim::new(
                "logs.bad_timestamps",
                Confidence::Limited,
                format!(
                    "{} timestamp(s) could not be read; those lines take the time of the line before ({})",
                    r.bad_timestamps.count,
                    line_ranges(&r.bad_timestamps)
                ),
            )
            .with_sources(limited(&r.bad_timestamps)),
        );
    }
    out
}

/// The claim about a log without a crash: how it ends (in order, mid-request), or that backscope could not read it
/// as a runtime's log.
fn ending_claim(r: &Report, file: &str) -> Claim {
    let e = &r.ending;
    if let Some(line) = e.request_in_progress {
        let mut sources = vec![log_line(r, file, line)];
        sources.extend(e.phase_lines.iter().take(4).map(|l| log_line(r, file, *l)));
        Claim::new(
            "logs.ending",
            Confidence::Unresolved,
            format!(
                "The log shows no crash, but it ends (line {}) while the request begun at line {line} was in progress: if the process died there, the log says nothing of it; such a death would fall in {}: {}",
                e.last_line,
                phase_words(e.phase),
                e.phase_rule
            ),
        )
        .with_sources(sources)
    } else if let Some(line) = e.orderly_shutdown {
        Claim::new(
            "logs.ending",
            Confidence::Confirmed,
            format!("The log shows no crash; the server shut down in order at line {line}"),
        )
        .with_source(log_line(r, file, line))
    } else if r.flavor == "unknown" {
        // No line was recognised as Ollama or llama.cpp output: "no crash" would be a claim about a log that was not read.
        Claim::new(
            "logs.ending",
            Confidence::Unresolved,
            format!(
                "backscope recognised none of the {} lines as Ollama or llama.cpp output ({} not recognised): it cannot say whether this log shows a crash",
                r.stats.lines, r.other.count
            ),
        )
    } else if let Some(start) = e.start_line {
        Claim::new(
            "logs.ending",
            Confidence::Confirmed,
            format!(
                "The log shows no crash in its {} lines, from the runtime's start or its model load (line {start}) to its end",
                r.stats.lines
            ),
        )
        .with_source(log_line(r, file, start))
    } else {
        // A fragment: what came before its first line (the start, a crash already under way) is not in it.
        let span = match (r.timeline.first().and_then(|x| x.t), r.timeline.last().and_then(|x| x.t)) {
            (Some(a), Some(b)) if b > a => format!(", {:.1} s of the log's time", b - a),
            _ => String::new(),
        };
        Claim::new(
            "logs.ending",
            Confidence::Inferred,
            format!(
                "This fragment shows no crash in lines 1–{}{span}; it does not show the runtime starting or loading a model, so it covers only that stretch: what came before its first line is not in it",
                r.stats.lines
            ),
        )
    }
}

/// Where the model ran: each GPU backend with how the log shows it, the GPUs the runtime dropped and why, "served on
/// the CPU because …", and facts that contradict each other.
fn placement_claims(r: &Report, file: &str) -> Vec<Claim> {
    let p = &r.facts.placement;
    let mut out = Vec::new();
    let mut gpu_backends: Vec<&str> = Vec::new();
    for b in p.backends.iter().filter(|b| b.backend != "CPU" && !b.backend.eq_ignore_ascii_case("cpu")) {
        if !gpu_backends.contains(&b.backend.as_str()) {
            gpu_backends.push(&b.backend);
        }
    }
    for backend in gpu_backends {
        let seen: Vec<&logs::placement::BackendSeen> = p.backends.iter().filter(|b| b.backend == backend).collect();
        let how: Vec<String> = seen.iter().map(|b| format!("{} `{}` (line {})", b.how, b.evidence, b.line)).collect();
        // A line that names the backend outright (its library, its devices, its buffers) confirms it; an error's
        // wording alone does not (ggml's HIP build printed "CUDA error" before mid-2024).
        let direct = [
            "library path",
            "runner library path",
            "device initialisation",
            "inference compute",
            "buffer",
            "ggml_vulkan lines",
            "crashing frame's library",
            "Ollama's scheduler record",
        ];
        let confidence = if seen.iter().any(|b| direct.contains(&b.how.as_str())) && !backend.contains('/') {
            Confidence::Confirmed
        } else {
            Confidence::Inferred
        };
        // One claim per backend: `logs.backend.NAME` when no library line already states it, else `logs.where.NAME`.
        let loaded = r.facts.backends.iter().any(|b| b.name == backend);
        let id = if loaded { format!("logs.where.{backend}") } else { format!("logs.backend.{backend}") };
        out.push(
            Claim::new(id, confidence, format!("The log shows the {backend} backend: {}", how.join("; ")))
                .with_sources(seen.iter().take(4).map(|b| log_line(r, file, b.line))),
        );
    }
    for (i, g) in p.filtered_gpus.iter().enumerate() {
        let gpu = g.gpu.as_deref().map(|g| format!(" {g}")).unwrap_or_default();
        let supported = g.supported.as_deref().map(|s| format!(" (the build supports {s})")).unwrap_or_default();
        out.push(
            Claim::new(
                format!("logs.gpu_dropped.{}", i + 1),
                Confidence::Confirmed,
                format!("The runtime did not use GPU{gpu}: {}{supported}", g.reason),
            )
            .with_source(log_line(r, file, g.line)),
        );
    }
    if let Some(cpu) = &p.cpu_served {
        let shown: Vec<String> = cpu.shown_by.iter().map(|x| format!("{} (line {})", x.text, x.line)).collect();
        let mut sources: Vec<Source> = cpu.shown_by.iter().take(4).map(|x| log_line(r, file, x.line)).collect();
        let (confidence, because) = if cpu.because.is_empty() {
            (Confidence::Confirmed, "; the log does not say why no GPU served it".to_string())
        } else {
            sources.extend(cpu.because.iter().take(4).map(|x| log_line(r, file, x.line)));
            let why: Vec<String> = cpu.because.iter().map(|x| format!("{} (line {})", x.text, x.line)).collect();
            // The causal link between a dropped GPU and the CPU serving is an inference from the two lines.
            (Confidence::Inferred, format!(", because {}", why.join("; ")))
        };
        out.push(
            Claim::new(
                "logs.served_on_cpu",
                confidence,
                format!("The model was served on the CPU: {}{because}", shown.join(", ")),
            )
            .with_sources(sources),
        );
    }
    if let Some(m) = &p.scheduler_memory {
        let share = match m.share() {
            Some("all") => ": all of it in GPU memory, the model ran on the GPU",
            Some("none") => ": none of it in GPU memory, the model ran on the CPU",
            Some(_) => ": part of it in GPU memory, the model was split between the GPU and the CPU",
            None => "",
        };
        out.push(
            Claim::new(
                "logs.scheduler_memory",
                Confidence::Confirmed,
                format!("Ollama's scheduler records the runner at {} with {} in GPU memory{share}", m.size, m.vram),
            )
            .with_source(log_line(r, file, m.line)),
        );
    }
    if let Some(o) = &p.requested_offload {
        out.push(
            Claim::new(
                "logs.offload_requested",
                Confidence::Inferred,
                format!(
                    "The front end's GPU offload setting is {}: what it asked for, not where the layers went",
                    o.text
                ),
            )
            .with_source(log_line(r, file, o.line)),
        );
    }
    for (i, h) in r.facts.handled.iter().enumerate() {
        out.push(
            Claim::new(
                format!("logs.handled.{}", i + 1),
                Confidence::Inferred,
                format!(
                    "Not a crash: {} (line {}) was followed by {} (line {}), and nothing failed after it in the log",
                    h.failure, h.line, h.retry, h.retry_line
                ),
            )
            .with_sources([log_line(r, file, h.line), log_line(r, file, h.retry_line)]),
        );
    }
    for (i, x) in p.contradictions.iter().enumerate() {
        out.push(
            Claim::new(
                format!("logs.contradiction.{}", i + 1),
                Confidence::Confirmed,
                format!("The log contradicts itself: {}", x.text),
            )
            .with_sources(x.lines.iter().take(6).map(|l| log_line(r, file, *l))),
        );
    }
    out
}

fn line_ranges(set: &logs::analysis::LineSet) -> String {
    let mut parts: Vec<String> = set
        .ranges
        .iter()
        .take(8)
        .map(|(a, b)| if a == b { format!("line {a}") } else { format!("lines {a}–{b}") })
        .collect();
    let more = set.count.saturating_sub(set.ranges.iter().take(8).map(|(a, b)| b - a + 1).sum::<u64>());
    if more > 0 {
        parts.push(format!("{more} more"));
    }
    parts.join(", ")
}

fn human_bytes(n: u64) -> String {
    match n {
        n if n >= 1 << 30 => format!("{:.1} GiB", n as f64 / f64::from(1u32 << 30)),
        n if n >= 1 << 20 => format!("{:.1} MiB", n as f64 / f64::from(1u32 << 20)),
        n if n >= 1 << 10 => format!("{:.1} KiB", n as f64 / 1024.0),
        n => format!("{n} B"),
    }
}

/// Timeline rows terminal output shows: the start, and more of the end, where crashes are.
const TIMELINE_HEAD: usize = 12;
const TIMELINE_TAIL: usize = 28;

fn document(v: &LogsView) -> Document {
    let r = &v.report;
    let mut doc = Document::new(format!("backscope logs: {}", v.input));
    let verdict = match (r.crashes_total, r.crashes.first()) {
        (0, _) => "no crash".to_string(),
        (1, Some(c)) => format!("1 crash, in {}", phase_words(c.phase)),
        (n, _) => {
            let at_least = if r.signatures_dropped > 0 { "at least " } else { "" };
            let shown = if r.crashes_dropped > 0 {
                format!(", the first {} shown in detail", r.crashes.len())
            } else {
                String::new()
            };
            format!("{n} crashes ({at_least}{} distinct signatures){shown}", r.signatures.len())
        }
    };
    doc.paragraph(format!(
        "{}: {} lines ({}), {} log; {verdict}",
        v.input,
        r.stats.lines,
        human_bytes(r.stats.bytes),
        r.flavor
    ));
    doc.heading(2, "Claims");
    doc.claims(&v.claims);
    for (i, c) in r.crashes.iter().enumerate() {
        crash_section(&mut doc, r, c, i + 1, &v.input);
    }
    facts_section(&mut doc, r);
    doc.heading(2, "Timeline");
    let clock = match r.clock {
        Some(c) => {
            format!("times relative to the first timestamp ({c:?} clock); in parentheses: the time of the last earlier timestamp, for a line without one of its own (it was written at or after it; --json gives the bracket as t_bounds)")
        }
        None => "the log has no timestamps".to_string(),
    };
    doc.paragraph(clock);
    let mut t =
        Table::new(vec![Column::number("time"), Column::number("line"), Column::keep("event"), Column::text("what")])
            .collapse(Collapse::HeadTail(TIMELINE_HEAD, TIMELINE_TAIL));
    for (i, e) in r.timeline.iter().enumerate() {
        if r.timeline_elided_at == Some(i) {
            t.row(["…".to_string(), "…".into(), "…".into(), format!("{} entries not kept", r.timeline_elided)]);
        }
        t.row([logs::render::time_cell(e), e.line.to_string(), e.kind.to_string(), e.summary.clone()]);
    }
    doc.push(t);
    let s = &r.stats;
    doc.paragraph(Text::with_code_spans(&format!(
        "{} lines read: {} not recognised (kept as `other`), {} cut at {} KiB, {} with unreadable timestamps, {} with escape sequences, {} not valid UTF-8",
        s.lines,
        r.other.count,
        s.truncated_lines,
        Limits::default().max_line >> 10,
        s.bad_timestamps,
        s.ansi_lines,
        s.invalid_utf8_lines
    )));
    doc
}

fn crash_section(doc: &mut Document, r: &Report, c: &Crash, n: usize, file: &str) {
    doc.heading(3, format!("Crash {n}: line {}{}, {}", c.line, crash_time(c), phase_words(c.phase)));
    let mut facts: Vec<(String, Text)> = vec![
        ("phase".into(), format!("{} — {}", c.phase.label(), c.phase_rule).into()),
        ("what".into(), crash_what(c).into()),
        ("signature".into(), Text::code(&c.signature.id).and_plain(format!(" {}", c.signature.text))),
    ];
    if !c.phase_lines.is_empty() {
        let lines: Vec<String> = c.phase_lines.iter().map(|l| l.to_string()).collect();
        facts.push(("phase rests on lines".into(), lines.join(", ").into()));
    }
    if let Some(g) = c.goroutine {
        facts.push(("crashing goroutine".into(), g.to_string().into()));
    }
    facts.push(("lines".into(), format!("{}–{}", c.line, c.last_line).into()));
    doc.push(crate::output::Block::Facts(facts));
    let lines: Vec<Text> = c
        .causes
        .iter()
        .map(|x| Text::plain(format!("cause, line {}: ", x.line)).and_code(&x.text))
        .chain(c.consequences.iter().map(|x| Text::plain(format!("then, line {}: ", x.line)).and_code(&x.text)))
        .collect();
    if !lines.is_empty() {
        doc.push(crate::output::Block::List(lines));
    }
    if !c.frames.is_empty() {
        let mut t = Table::new(vec![Column::number("line"), Column::label("frame"), Column::label("source")])
            .collapse(Collapse::Head(12));
        for f in &c.frames {
            t.row([f.line.to_string(), f.function.clone(), f.source.clone().unwrap_or_default()]);
        }
        if c.frames_dropped > 0 {
            t.row([String::new(), format!("… {} more frames not kept", c.frames_dropped), String::new()]);
        }
        doc.push(t);
    }
    // The lines around the crash the timeline kept (stack frames are in the table above).
    let before = r.timeline.iter().filter(|e| e.line < c.line).count().saturating_sub(4);
    let near: Vec<&TimelineEntry> = r
        .timeline
        .iter()
        .enumerate()
        .filter(|(i, e)| *i >= before && e.line <= c.last_line)
        .map(|(_, e)| e)
        .take(24)
        .collect();
    if !near.is_empty() {
        doc.push(Excerpt {
            caption: Some("The log around the crash".into()),
            file: Some(file.to_string()),
            line_numbers: near.iter().map(|e| e.line).collect(),
            lines: near.iter().map(|e| e.raw.clone()).collect(),
            verbatim: false,
        });
    }
}

fn facts_section(doc: &mut Document, r: &Report) {
    let f = &r.facts;
    let mut facts: Vec<(String, Text)> = vec![("flavor".into(), r.flavor.into())];
    for b in &f.backends {
        facts.push((format!("backend {}", b.name), format!("{} (line {})", b.path, b.line).into()));
    }
    if let Some(o) = &f.offload {
        facts.push(("offloaded".into(), format!("{}/{} layers (line {})", o.offloaded, o.total, o.line).into()));
    }
    if let Some(fa) = &f.flash_attention {
        facts.push(("flash attention".into(), format!("{} (line {})", fa.value, fa.line).into()));
    }
    if let Some(g) = &f.graph {
        let n = |v: Option<u64>| v.map_or_else(|| "?".to_string(), |v| v.to_string());
        facts.push(("graph".into(), format!("{} nodes, {} splits (line {})", n(g.nodes), n(g.splits), g.line).into()));
    }
    for s in &f.runner_started_s {
        facts.push(("runner started".into(), format!("in {:.2} s (line {})", s.value, s.line).into()));
    }
    if !f.http_status.is_empty() {
        let statuses: Vec<String> = f.http_status.iter().map(|(s, n)| format!("{s} ×{n}")).collect();
        facts.push(("HTTP responses".into(), statuses.join(", ").into()));
    }
    for ic in &f.inference_compute {
        let v: Vec<String> = ic.iter().map(|(k, v)| format!("{k}={v}")).collect();
        facts.push(("inference compute".into(), v.join(" ").into()));
    }
    doc.heading(2, "What the log states");
    doc.push(crate::output::Block::Facts(facts));
    if !f.devices.is_empty() {
        let mut t = Table::new(vec![
            Column::keep("backend"),
            Column::number("#"),
            Column::label("device"),
            Column::text("arch / compute / driver"),
            Column::keep("VMM"),
            Column::number("wave/warp"),
            Column::number("line"),
        ]);
        for d in &f.devices {
            let detail = [d.arch.clone(), d.compute_capability.clone(), d.driver.clone()]
                .into_iter()
                .flatten()
                .collect::<Vec<_>>()
                .join(", ");
            let yes_no = |b: Option<bool>| b.map_or("-", |b| if b { "yes" } else { "no" }).to_string();
            t.row([
                d.backend.clone(),
                d.index.to_string(),
                d.name.clone(),
                detail,
                yes_no(d.vmm),
                d.wave_size.or(d.warp_size).map_or_else(|| "-".to_string(), |w| w.to_string()),
                d.line.to_string(),
            ]);
        }
        doc.heading(3, "Devices");
        doc.push(t);
    }
    if !f.buffers.is_empty() {
        let mut t = Table::new(vec![
            Column::keep("device"),
            Column::keep("buffer"),
            Column::number("MiB"),
            Column::number("line"),
        ]);
        for b in &f.buffers {
            t.row([
                b.device.clone(),
                format!("{:?}", b.kind).to_lowercase(),
                format!("{:.2}", b.mib),
                b.line.to_string(),
            ]);
        }
        doc.heading(3, "Buffers");
        doc.push(t);
    }
    if !f.timings.is_empty() {
        let mut t = Table::new(vec![
            Column::keep("timing"),
            Column::number("ms"),
            Column::number("tokens"),
            Column::number("line"),
        ]);
        for x in &f.timings {
            t.row([
                format!("{:?}", x.which),
                format!("{:.2}", x.ms),
                x.tokens.map_or_else(String::new, |n| n.to_string()),
                x.line.to_string(),
            ]);
        }
        doc.heading(3, "Timings");
        doc.push(t);
    }
}
