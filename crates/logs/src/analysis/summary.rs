//! The timeline's words for an event: one line per event, clipped.

use std::borrow::Cow;

use crate::event::{lossy, BufferKind, EventKind, GpuDriverEvent, TimingKind};
use crate::signature;
use crate::slog::unquote;

use super::text::{clip, decimal, find_bytes, joined};

/// A signal name a pager cut (`signal: illegal ins>`, `less` marks a cut line with `>`): which name it begins.
pub(super) fn cut_signal_note(error: &[u8]) -> String {
    const NAMES: [&str; 6] =
        ["segmentation fault", "illegal instruction", "aborted", "bus error", "floating point exception", "killed"];
    let Some(cut) = error.strip_suffix(b">") else { return String::new() };
    let Some(at) = find_bytes(cut, b"signal: ") else { return String::new() };
    let head = String::from_utf8_lossy(&cut[at + 8..]).into_owned();
    match NAMES.iter().find(|n| head.len() >= 3 && n.starts_with(head.as_str()) && n.len() > head.len()) {
        Some(name) => format!(" (the line is cut; the signal's name begins as {name} does)"),
        None => String::new(),
    }
}

/// ` (STATUS_ACCESS_VIOLATION: access violation)` for a text holding a Windows status code the table names.
pub(super) fn status_note(text: &str) -> String {
    if let Some((code, name)) = signature::windows_status(text) {
        return format!(" ({code} is {name})");
    }
    signature::rounded_exit_code(text).unwrap_or_default()
}

/// `ring gfx_0.0.0 timeout (a GPU job did not finish)`, `process llama-server pid 12519`, `GPU reset begin`…
pub(super) fn gpu_driver_summary(d: &crate::event::GpuDriver<'_>, t: &dyn Fn(&[u8]) -> String) -> String {
    let ring = d.ring.map(|r| format!(" on ring {}", t(r))).unwrap_or_default();
    let who = match (d.process.map(t), d.pid) {
        (Some(p), Some(pid)) => format!(" of process {p} pid {pid}"),
        (None, Some(pid)) => format!(" of pid {pid}"),
        (Some(p), None) => format!(" of process {p}"),
        (None, None) => String::new(),
    };
    match d.event {
        GpuDriverEvent::RingTimeout => format!("GPU driver: a GPU job timed out{ring}"),
        GpuDriverEvent::Process => {
            format!("GPU driver: the job was that{}", if who.is_empty() { " of an unnamed process" } else { &who })
        }
        GpuDriverEvent::ResetBegin => format!("GPU driver: reset begins{ring}"),
        GpuDriverEvent::ResetSucceeded => format!("GPU driver: reset succeeded{ring}"),
        GpuDriverEvent::ResetFailed => format!("GPU driver: reset failed{ring}"),
        GpuDriverEvent::Coredump => "GPU driver: a device coredump was written".into(),
        GpuDriverEvent::PageFault => format!("GPU driver: GPU page fault{who}"),
        GpuDriverEvent::Xid => format!("GPU driver: NVIDIA Xid {}{who}", d.code.unwrap_or(0)),
        GpuDriverEvent::Hang => format!("GPU driver: a GPU hang{who}"),
    }
}

/// `model load (ollama-new-engine): GPULayers 37`.
pub(super) fn milestone_summary(index: u16, number: Option<u32>) -> String {
    let Some(m) = crate::milestones::table().get(index) else { return "milestone".into() };
    // Joined from its pieces (each milestone line of a crash's phase makes one; `format!` cost several times the copy).
    let (label, era) = (m.meaning.label(), m.era.as_str());
    let mut digits = [0; 10];
    match number {
        Some(n) => {
            let key = m.number_after.as_deref().unwrap_or("").trim_end_matches(':');
            joined(&[label, " (", era, "): ", key, " ", decimal(n, &mut digits)])
        }
        None => joined(&[label, " (", era, ")"]),
    }
}

/// `device 0: NAME, gfx900:xnack-, wave size 64, VMM no` (the timeline's words for a CUDA/ROCm device line).
pub(super) fn gpu_device_summary(d: &crate::event::GpuDevice<'_>, t: &dyn Fn(&[u8]) -> String) -> String {
    let mut s = format!("device {}: {}", d.index, t(d.name));
    if let Some(a) = d.arch {
        s += &format!(", {}", t(a));
    }
    if let Some(cc) = d.compute_capability {
        s += &format!(", compute capability {}", t(cc));
    }
    if let Some(w) = d.wave_size {
        s += &format!(", wave size {w}");
    }
    if let Some(v) = d.vmm {
        s += &format!(", VMM {}", if v { "yes" } else { "no" });
    }
    s
}

/// `Vulkan device 0: NAME (DRIVER), uma 0, fp16 1, warp size 64, int dot 0, matrix cores none`.
pub(super) fn vulkan_device_summary(v: &crate::event::VulkanDevice<'_>, t: &dyn Fn(&[u8]) -> String) -> String {
    let mut s = format!("Vulkan device {}: {}", v.index, t(v.name));
    if let Some(d) = v.driver {
        s += &format!(" ({})", t(d));
    }
    let flag = |name: &str, v: Option<bool>| v.map(|b| format!(", {name} {}", u8::from(b))).unwrap_or_default();
    s += &flag("uma", v.uma);
    s += &flag("fp16", v.fp16);
    if let Some(w) = v.warp_size {
        s += &format!(", warp size {w}");
    }
    s += &flag("int dot", v.int_dot);
    if let Some(m) = v.matrix_cores {
        s += &format!(", matrix cores {}", t(m));
    }
    s
}

pub(super) fn buffer_word(buffer: BufferKind) -> &'static str {
    match buffer {
        BufferKind::Model => "model",
        BufferKind::Kv => "KV",
        BufferKind::Compute => "compute",
        BufferKind::Output => "output",
    }
}

/// A field of an event as text (a slog value unquoted), borrowed where it is valid UTF-8 without escapes (almost
/// always): a summary writes the words around it once, with no copy of each field made first.
fn field_text(b: &[u8], slog_line: bool) -> Cow<'_, str> {
    if slog_line {
        unquote(b)
    } else {
        lossy(b)
    }
}

/// A one-line description of an event for the timeline.
pub fn summary<'a>(kind: &EventKind<'a>, slog_line: bool) -> String {
    use EventKind::*;
    let t = |b: &'a [u8]| field_text(b, slog_line);
    let owned = |b: &[u8]| -> String { field_text(b, slog_line).into_owned() };
    let opt = |b: Option<&'a [u8]>| b.map(t).unwrap_or_default();
    let s = match *kind {
        BackendLoaded { backend, path } => format!("{} backend loaded from {}", t(backend), t(path)),
        DevicesFound { backend, count } => format!("{count} {} device(s) found", t(backend)),
        GpuDevice(d) => gpu_device_summary(&d, &owned),
        VulkanDevice(v) => vulkan_device_summary(&v, &owned),
        DeviceListed { device, description, total_mib, free_mib } => {
            let mem = match (total_mib, free_mib) {
                (Some(t), Some(f)) => format!(" ({t} MiB, {f} MiB free)"),
                _ => String::new(),
            };
            format!("device available: {} {}{mem}", t(device), t(description))
        }
        DeviceUsed { device, description, free_mib } => {
            let free = free_mib.map(|f| format!(", {f} MiB free")).unwrap_or_default();
            format!("using device {} {}{free}", t(device), t(description))
        }
        InferenceCompute(ic) => format!(
            "inference compute: library={} compute={} name={} description={}",
            opt(ic.library),
            opt(ic.compute),
            opt(ic.name),
            opt(ic.description)
        ),
        RunnerStarting { cmd, with_model } => {
            format!("{} starting: {}", if with_model { "runner" } else { "discovery runner" }, t(cmd))
        }
        ModelLoading { path } => {
            format!("model load begins{}", path.map(|p| format!(": {}", t(p))).unwrap_or_default())
        }
        LayersOffloaded { offloaded, total } => format!("offloaded {offloaded}/{total} layers to GPU"),
        FlashAttention { setting } => format!("flash attention: {}", t(setting)),
        Graph { nodes, splits } => {
            let n = nodes.map(|v| format!("nodes {v}")).unwrap_or_default();
            let s = splits.map(|v| format!("splits {v}")).unwrap_or_default();
            format!("graph: {}", [n, s].into_iter().filter(|x| !x.is_empty()).collect::<Vec<_>>().join(", "))
        }
        BufferSize { device, buffer, mib } => format!("{} {} buffer {mib:.2} MiB", t(device), buffer_word(buffer)),
        Warmup => "warm-up run begins".into(),
        RunnerStarted { seconds } => format!("runner started in {seconds} s"),
        ServerReady => "server ready".into(),
        RequestStarted { task } => format!("task {} started", task.map_or("?".into(), |v| v.to_string())),
        PromptDone { task } => format!("task {} prompt done", task.map_or("?".into(), |v| v.to_string())),
        RequestDone { task } => format!("task {} done", task.map_or("?".into(), |v| v.to_string())),
        Progress { task, decoding, tokens } => format!(
            "task {} {} {} tokens",
            task.map_or("?".into(), |v| v.to_string()),
            if decoding { "decoding: generated" } else { "prompt: processed" },
            tokens.map_or("?".into(), |v| v.to_string())
        ),
        Shutdown => "orderly shutdown".into(),
        Timing { which, ms, tokens } => {
            let w = match which {
                TimingKind::PromptEval => "prompt eval",
                TimingKind::Eval => "eval",
                TimingKind::Total => "total",
            };
            format!("{w} {ms} ms{}", tokens.map(|n| format!(" / {n} tokens")).unwrap_or_default())
        }
        HttpRequest { status, method, path, latency } => format!(
            "HTTP {status} {} {}{}",
            t(method),
            t(path),
            latency.map(|l| format!(" ({})", t(l))).unwrap_or_default()
        ),
        DiscoveryFailure { error, detail } => format!(
            "GPU discovery failed{}{}",
            error.map(|e| format!(": {}", t(e))).unwrap_or_default(),
            detail.map(|d| format!(" ({})", t(d))).unwrap_or_default()
        ),
        UnsupportedGpu { gpu, supported, message } => format!(
            "unsupported GPU{}: {}{}",
            gpu.map(|g| format!(" {}", t(g))).unwrap_or_default(),
            t(message),
            supported.map(|s| format!(" (supported: {})", t(s))).unwrap_or_default()
        ),
        BlasError { library, message, arch } => {
            format!(
                "{} error: {}{}",
                t(library),
                t(message),
                arch.map(|a| format!(" [arch {}]", t(a))).unwrap_or_default()
            )
        }
        Signal { signal, description } => {
            let signal = t(signal);
            joined(&[&signal, &status_note(&signal), ": ", &t(description)])
        }
        SignalContext { pc, addr, sigcode } => [("PC", pc), ("addr", addr), ("sigcode", sigcode)]
            .iter()
            .filter_map(|(k, v)| v.map(|v| format!("{k}={}", t(v))))
            .collect::<Vec<_>>()
            .join(" "),
        SignalInForeignCode => "signal arrived during cgo execution (in C/C++ code)".into(),
        GoFatal { .. }
        | GgmlAssert { .. }
        | Abort { .. }
        | GpuError { .. }
        | GpuErrorLocation { .. }
        | DeviceLost { .. }
        | CppTerminate { .. }
        | OutOfMemory { .. } => failure_summary(kind, slog_line).unwrap_or_default(),
        ProcessCrash { message } => owned(message),
        PostPredictError { error } => {
            format!("post predict failed{}", error.map(|e| format!(": {}", t(e))).unwrap_or_default())
        }
        RunnerTerminated { error } => {
            let text = t(error);
            joined(&["runner terminated: ", &text, &status_note(&text), &cut_signal_note(error)])
        }
        LoadError { error } => joined(&["model load failed: ", &t(error)]),
        BindFailed { message } => joined(&["the server could not listen: ", &t(message)]),
        CompletionError { message } => joined(&["completion failed: ", &t(message)]),
        Diagnostic { level, msg } => format!("{}: {}", t(level), t(msg)),
        Milestone { index, number } => milestone_summary(index, number),
        OpFailed { op } => joined(&["op ", &t(op), " failed on the GPU"]),
        InstructionBytes { bytes } => format!("instruction bytes at PC: {}", t(bytes)),
        Goroutine { id, state } => format!("goroutine {id} [{}]", t(state)),
        GoFrame { function } => owned(function),
        GoFrameSource { file, line } => joined(&[&t(file), ":", decimal(line, &mut [0; 10])]),
        GoCreatedBy { function } => format!("created by {}", t(function)),
        GoTraceDetail => "trace detail".into(),
        NativeFrame(f) => {
            signature::native_function(f.module.map(|m| lossy(m)).as_deref(), f.symbol.map(|s| lossy(s)).as_deref())
                .unwrap_or_else(|| "abort machinery".into())
        }
        GpuDriver(d) => gpu_driver_summary(&d, &owned),
        RegisterDump => "a register of a Go crash dump".into(),
        Other => String::new(),
    };
    clip(s)
}

/// [`summary`]'s words for the failures a crash's cause lines carry (an answer for every event of these kinds, `None` for
/// the others).
fn failure_summary<'a>(kind: &EventKind<'a>, slog_line: bool) -> Option<String> {
    use EventKind::*;
    let t = |b: &'a [u8]| field_text(b, slog_line);
    Some(match *kind {
        GoFatal { message } => joined(&["Go fatal: ", &t(message)]),
        GgmlAssert { file: b"", condition, .. } => joined(&["GGML_ASSERT(", &t(condition), ") failed"]),
        GgmlAssert { file, line, condition } => {
            joined(&["GGML_ASSERT(", &t(condition), ") failed at ", &t(file), ":", decimal(line, &mut [0; 10])])
        }
        Abort { file: b"", message, .. } => joined(&["abort: ", &t(message)]),
        Abort { file, line, message } => {
            joined(&["abort at ", &t(file), ":", decimal(line, &mut [0; 10]), ": ", &t(message)])
        }
        GpuError { api, message } => joined(&[&t(api), " error: ", &t(message)]),
        GpuErrorLocation { device, function, file, line } => joined(&[
            "in ",
            &t(function),
            " at ",
            &t(file),
            ":",
            decimal(line, &mut [0; 10]),
            &device.map(|d| format!(" (device {d})")).unwrap_or_default(),
        ]),
        DeviceLost { message } if message.starts_with(b"HW Exception") => {
            joined(&["GPU hang reported by the ROCm runtime: ", &t(message)])
        }
        DeviceLost { message } => joined(&["Vulkan device lost: ", &t(message)]),
        CppTerminate { exception } => joined(&["C++ exception: ", &t(exception)]),
        OutOfMemory { message } => joined(&["out of memory: ", &t(message)]),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every row of the milestone table, with and without a number, reads as the `format!` it replaced wrote it.
    #[test]
    fn milestone_summaries_read_as_format_wrote_them() {
        let before = |index: u16, number: Option<u32>| {
            let Some(m) = crate::milestones::table().get(index) else { return "milestone".to_string() };
            let number =
                number.map(|n| format!(": {} {n}", m.number_after.as_deref().unwrap_or("").trim_end_matches(':')));
            format!("{} ({}){}", m.meaning.label(), m.era, number.unwrap_or_default())
        };
        let rows = u16::try_from(crate::milestones::parse(crate::milestones::SOURCE).unwrap().len()).unwrap();
        for index in 0..=rows {
            for number in [None, Some(0), Some(37), Some(u32::MAX)] {
                assert_eq!(milestone_summary(index, number), before(index, number), "{index} {number:?}");
            }
        }
    }
}
