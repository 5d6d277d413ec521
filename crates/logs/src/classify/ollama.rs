//! Ollama's own lines: slog records (`time=… level=… source=… msg=…`) and Gin's request log.

use crate::event::{BufferKind, EventKind, InferenceCompute};
use crate::slog;
use crate::time::{parse_rfc3339, parse_slash_date};

use super::classified::Classified;
use super::devices::{gfx_token, offloaded};
use super::markers::MARKERS;
use super::text::{find, leading_f64, leading_u32, leading_u64, size_mib, trim};

pub(super) fn slog_line(msg: &[u8]) -> Classified<'_> {
    let rec = slog::record(msg);
    let (time, bad_timestamp) = match rec.time.map(parse_rfc3339) {
        Some(Some((t, []))) => (Some(t), false),
        Some(_) => (None, true),
        None => (None, false),
    };
    let kind =
        rec.msg.and_then(|m| slog_message(msg, &rec, m, rec.level.unwrap_or_default())).unwrap_or(EventKind::Other);
    Classified { kind, time, bad_timestamp, before: None }
}

pub(super) fn slog_message<'a>(
    line: &'a [u8],
    rec: &slog::Record<'a>,
    msg: &'a [u8],
    level: &'a [u8],
) -> Option<EventKind<'a>> {
    let get = |key: &[u8]| rec.get(line, key);
    let kind = match msg {
        b"inference compute" => EventKind::InferenceCompute(InferenceCompute {
            id: get(b"id"),
            library: get(b"library"),
            compute: get(b"compute"),
            name: get(b"name"),
            description: get(b"description"),
            libdirs: get(b"libdirs"),
            driver: get(b"driver"),
            device_type: get(b"type"),
            total: get(b"total"),
            available: get(b"available"),
        }),
        b"starting runner" | b"starting llama server" | b"starting llama-server" => {
            let cmd = get(b"cmd").unwrap_or_default();
            EventKind::RunnerStarting { cmd, with_model: find(cmd, b"--model").is_some() }
        }
        b"loading model" | b"loading model via llama-server" => EventKind::ModelLoading { path: get(b"model") },
        b"failure during GPU discovery" | b"failure during llama-server GPU discovery" => {
            EventKind::DiscoveryFailure { error: get(b"error"), detail: get(b"detail") }
        }
        b"post predict" => EventKind::PostPredictError { error: get(b"error") },
        b"llama runner terminated" | b"llama-server terminated" => {
            EventKind::RunnerTerminated { error: get(b"error").unwrap_or_default() }
        }
        // O `llm/llama_server.go` (v0.30+): the runner died while loading.
        b"Load failed" | b"load failed" => EventKind::LoadError { error: get(b"error").unwrap_or(msg) },
        b"error loading llama server" | b"error loading llama-server" | b"error loading model" => {
            EventKind::LoadError { error: get(b"error").unwrap_or_default() }
        }
        b"llama-server completion error" | b"completion error" => {
            EventKind::CompletionError { message: get(b"error").unwrap_or(msg) }
        }
        // Devices current Ollama drops with its own checks (O `discover/amd.go:470`,
        // `discover/llama_server.go:299`, `discover/runner.go:190`).
        b"dropping ROCm device \xe2\x80\x94 no rocblas support for gfx target" => {
            EventKind::UnsupportedGpu { gpu: get(b"gfx_target"), supported: get(b"supported"), message: msg }
        }
        b"skipping CUDA device \xe2\x80\x94 compute capability not in compiled architectures" => {
            EventKind::UnsupportedGpu { gpu: get(b"cc"), supported: get(b"archs"), message: msg }
        }
        // O24 `discover/gpu.go` (v0.5.0 `discover/gpu.go:386`): no GPU left after discovery's checks.
        b"no compatible GPUs were discovered" => EventKind::UnsupportedGpu { gpu: None, supported: None, message: msg },
        b"removing unsupported or overlapping GPU combination" => {
            EventKind::UnsupportedGpu { gpu: get(b"compute"), supported: None, message: msg }
        }
        b"enabling flash attention" => EventKind::FlashAttention { setting: b"enabled" },
        b"compute graph" => {
            let nodes = get(b"nodes").and_then(|v| leading_u64(v)).map(|x| x.0);
            let splits = get(b"splits").and_then(|v| leading_u64(v)).map(|x| x.0);
            match (nodes, splits, get(b"size")) {
                (None, None, Some(size)) => EventKind::BufferSize {
                    device: get(b"backend").or(get(b"device")).unwrap_or_default(),
                    buffer: BufferKind::Compute,
                    mib: size_mib(size)?,
                },
                _ => EventKind::Graph { nodes, splits },
            }
        }
        b"model weights" => EventKind::BufferSize {
            device: get(b"buffer").or(get(b"device")).unwrap_or_default(),
            buffer: BufferKind::Model,
            mib: size_mib(get(b"size")?)?,
        },
        b"kv cache" => EventKind::BufferSize {
            device: get(b"device").or(get(b"buffer")).unwrap_or_default(),
            buffer: BufferKind::Kv,
            mib: size_mib(get(b"size")?)?,
        },
        _ => return slog_message_text(line, rec, msg, level),
    };
    Some(kind)
}

/// slog messages recognised by their text rather than an exact value.
pub(super) fn slog_message_text<'a>(
    line: &'a [u8],
    rec: &slog::Record<'a>,
    msg: &'a [u8],
    level: &'a [u8],
) -> Option<EventKind<'a>> {
    let get = |key: &[u8]| rec.get(line, key);
    if let Some(rest) =
        msg.strip_prefix(b"llama runner started in ").or_else(|| msg.strip_prefix(b"llama-server started in "))
    {
        return Some(EventKind::RunnerStarted { seconds: leading_f64(rest)?.0 });
    }
    // The server's memory plan: `msg="offload to cpu" layers.model=25 layers.offload=0` (v0.5.0 `llm/memory.go:356-366`:
    // "offload to " + the library), `msg=offload library=cuda …` later; the runner's own offload line follows and wins.
    if msg == b"offload" || msg.starts_with(b"offload to ") {
        let model = get(b"layers.model").and_then(|v| leading_u32(v)).map(|x| x.0);
        let offload = get(b"layers.offload").and_then(|v| leading_u32(v)).map(|x| x.0);
        if let (Some(offloaded), Some(total)) = (offload, model) {
            return Some(EventKind::LayersOffloaded { offloaded, total });
        }
    }
    let marked = MARKERS.find(msg).is_some();
    if let Some((offloaded, total)) = if marked { offloaded(msg) } else { None } {
        return Some(EventKind::LayersOffloaded { offloaded, total });
    }
    if marked
        && (msg.starts_with(b"amdgpu") && find(msg, b"not supported").is_some() || find(msg, b"unsupported").is_some())
    {
        let supported = get(b"supported_types").or_else(|| {
            let start = find(msg, b"[")?;
            let end = msg.iter().rposition(|&b| b == b']')?;
            (end > start).then(|| &msg[start..=end])
        });
        let gpu = get(b"gpu_type").or_else(|| gfx_token(msg));
        return Some(EventKind::UnsupportedGpu { gpu, supported, message: msg });
    }
    // The Windows tray app supervising `ollama serve` (its app.log, `source=server.go:113`, ollama/ollama issue 3362):
    // `server crash 1 - exit code 1 - respawning`.
    if msg.starts_with(b"server crash ") && find(msg, b" exit code ").is_some() {
        return Some(EventKind::ProcessCrash { message: msg });
    }
    if level == b"ERROR" || level == b"WARN" {
        return Some(EventKind::Diagnostic { level, msg });
    }
    None
}

/// `[GIN] 2025/08/28 - 10:25:21 | 200 | 17.696002893s |       127.0.0.1 | POST     "/api/generate"`.
pub(super) fn gin(rest: &[u8]) -> Classified<'_> {
    let parsed = parse_slash_date(rest);
    let (time, bad_timestamp) = match parsed {
        Some((t, _)) => (Some(t), false),
        None => (None, true),
    };
    let mut fields = rest.split(|&b| b == b'|').map(trim);
    let _date = fields.next();
    let status = fields.next().and_then(|s| leading_u32(s)).and_then(|(v, tail)| tail.is_empty().then_some(v));
    let latency = fields.next();
    let _client = fields.next();
    let request = fields.next().unwrap_or_default();
    let kind = match status.and_then(|s| u16::try_from(s).ok()) {
        Some(status) => {
            let method_end = request.iter().position(|&b| b == b' ').unwrap_or(request.len());
            let path = trim(&request[method_end..]);
            let path = path.strip_prefix(b"\"").and_then(|p| p.strip_suffix(b"\"")).unwrap_or(path);
            EventKind::HttpRequest { status, method: &request[..method_end], path, latency }
        }
        None => EventKind::Other,
    };
    Classified { kind, time, bad_timestamp, before: None }
}
