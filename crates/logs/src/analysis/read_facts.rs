//! The facts a line states: backends, devices, offload, buffers, timings, and where the model ran.

use std::collections::BTreeMap;

use crate::event::{lossy, Event, EventKind};
use crate::patterns::Needle;
use crate::placement::{backend_of_path, FilteredGpu, Reason};
use crate::slog::unquote;

use super::state::Analyzer;
use super::summary::summary;
use super::text::{after_bytes, clip, find_bytes};
use crate::facts::{Backend, Buffer, Device, Graph, Offload, Sourced, Timing};

impl Analyzer {
    /// An Ollama line no rule claims may still name the backend: a `library=ROCm` field (`msg="gpu memory"`), the
    /// library directories it uses (a `…/lib/ollama/cuda_v13` directory in any field).
    pub(super) fn slog_backend_hints(&mut self, e: &Event<'_>) {
        let cap = self.limits.max_facts;
        let field = find_bytes(e.text, b" library=").is_some();
        let path = find_bytes(e.text, b"lib/ollama/").is_some();
        if !(field || path) || says_not_used(e.text) {
            return;
        }
        if let Some(lib) = crate::slog::get(e.text, b"library").filter(|_| field) {
            let lib = lossy(lib).into_owned();
            if !lib.eq_ignore_ascii_case("cpu") && !lib.is_empty() {
                self.facts.placement.backend_with(
                    &lib,
                    "Ollama's library field",
                    || format!("library={lib}"),
                    e.line,
                    cap,
                );
            }
        }
        if path {
            let line = lossy(e.text);
            let found = line
                .split([' ', '"', '[', ']', '='])
                .filter(|w| find_bytes(w.as_bytes(), b"lib/ollama/").is_some())
                .find_map(|w| backend_of_path(w).filter(|b| *b != "CPU").map(|b| (b, w.to_string())));
            if let Some((b, w)) = found {
                self.facts.placement.backend_with(b, "runner library path", || clip(w), e.line, cap);
            }
        }
    }

    /// Ollama's scheduler logs each runner with its inference library, size and GPU memory (`runner.inference="[{ID:0
    /// Library:Vulkan}]" runner.size="2.3 GiB" runner.vram="2.3 GiB"`, older releases `runner.inference=cuda`), and the
    /// devices a runner enumerated (`msg="runner enumerated devices" devices="[{DeviceID:{ID:… Library:CUDA} Name:CUDA0
    /// Description:NVIDIA GeForce RTX 4070 FilterID: …}]"`, O `discover/runner.go`).
    pub(super) fn scheduler_hints(&mut self, e: &Event<'_>) {
        let cap = self.limits.max_facts;
        let text = e.text;
        let runner = find_bytes(text, b" runner.").is_some();
        if !runner && find_bytes(text, b" devices=\"[{").is_none() {
            return;
        }
        if let Some(inference) = crate::slog::get(text, b"runner.inference").filter(|_| runner) {
            let value = lossy(inference).into_owned();
            let mut libraries: Vec<&str> =
                value.split("Library:").skip(1).map(|l| l.split(['}', ' ']).next().unwrap_or("")).collect();
            if libraries.is_empty() {
                libraries.push(value.as_str());
            }
            for lib in libraries.into_iter().filter(|l| !l.is_empty() && !l.eq_ignore_ascii_case("cpu")) {
                let evidence = || format!("runner.inference={}", clip(value.clone()));
                self.facts.placement.backend_with(lib, "Ollama's scheduler record", evidence, e.line, cap);
            }
        }
        if let (Some(size), Some(vram)) =
            (crate::slog::get(text, b"runner.size"), crate::slog::get(text, b"runner.vram"))
        {
            self.facts.placement.scheduler_memory = Some(crate::placement::SchedulerMemory {
                size: unquote(size).into_owned(),
                vram: unquote(vram).into_owned(),
                line: e.line,
            });
        }
        if let Some(devices) = crate::slog::get(text, b"devices").filter(|d| d.starts_with(b"[{")) {
            let devices = unquote(devices).into_owned();
            for entry in devices.split("Name:").skip(1).take(cap) {
                let name = entry.split(' ').next().unwrap_or("");
                let Some(description) =
                    entry.split_once("Description:").and_then(|(_, d)| d.split(" FilterID:").next())
                else {
                    continue;
                };
                let Some(backend) = crate::placement::backend_of_device(name) else { continue };
                let digits = name.bytes().rev().take_while(u8::is_ascii_digit).count();
                let index = name[name.len() - digits..].parse().unwrap_or(0);
                let dev = Device {
                    backend: backend.to_string(),
                    index,
                    name: clip(description.to_string()),
                    line: e.line,
                    ..Device::default()
                };
                push_device(&mut self.facts.devices, dev, cap);
            }
        }
    }

    /// Settings a front end logs before it loads a model: LM Studio's resolved GPU offload (`  Num Offload Layers: 39`
    /// in its `Resolved GPU config options:` block, `… with raw num offload layers '0' and context length …` in its
    /// estimate).
    pub(super) fn front_end_hints(&mut self, e: &Event<'_>) {
        let text = e.text;
        if !matches!(text.first(), Some(b' ' | b'[')) {
            return;
        }
        let setting = if let Some(n) = text.strip_prefix(b"  Num Offload Layers: ") {
            Some(format!("Num Offload Layers: {}", lossy(n.trim_ascii())))
        } else if text
            .trim_ascii_start()
            .starts_with(b"[LM Studio] Model load size estimate with raw num offload layers '")
        {
            let n = after_bytes(text, b"layers '").and_then(|r| r.split(|&b| b == b'\'').next()).unwrap_or_default();
            Some(format!("raw num offload layers '{}' (LM Studio's load estimate)", lossy(n)))
        } else {
            None
        };
        if let Some(text) = setting {
            self.facts.placement.requested_offload = Some(crate::placement::Reason { text: clip(text), line: e.line });
        }
    }

    /// The call that failed, as the line after a CUDA-named error prints it: `hipMalloc((void **) &ptr, size)` says the
    /// build is HIP (ROCm), whatever name the error line used (ggml's HIP build printed `CUDA error` before mid-2024).
    pub(super) fn failed_call_hints(&mut self, e: &Event<'_>) {
        let call = e.text.trim_ascii_start();
        if !call.starts_with(b"hip") {
            return;
        }
        let api = call.iter().take_while(|b| b.is_ascii_alphanumeric() || **b == b'_').count();
        if api > 3 && call.get(api) == Some(&b'(') {
            let cap = self.limits.max_facts;
            let what = || format!("{} failed", lossy(&call[..api]));
            self.facts.placement.backend_with("ROCm", "failing HIP call", what, e.line, cap);
        }
    }

    /// What a line says about where the model ran.
    pub(super) fn placement(&mut self, e: &Event<'_>, slog_line: bool) {
        use EventKind::*;
        let text =
            |b: &[u8]| -> String { clip(if slog_line { unquote(b).into_owned() } else { lossy(b).into_owned() }) };
        let cap = self.limits.max_facts;
        let gpu = if self.gpu_backend.is_empty() { "CUDA/ROCm" } else { self.gpu_backend.as_str() };
        let p = &mut self.facts.placement;
        match e.kind {
            BackendLoaded { backend, path } => {
                p.backend_with(&lossy(backend), "library path", || text(path), e.line, cap)
            }
            BufferSize { device, .. } => {
                let d = lossy(device);
                if let Some(b) = crate::placement::backend_of_device(&d) {
                    p.backend_with(b, "buffer", || format!("{} buffer", text(device)), e.line, cap);
                }
            }
            NativeFrame(f) if f.module.is_some_and(|m| GPU_LIBRARY_HINTS.iter().any(|h| h.find(m).is_some())) => {
                if let Some(b) = f.module.map(text).as_deref().and_then(backend_of_path).filter(|b| *b != "CPU") {
                    p.backend_with(b, "crashing frame's library", || text(f.module.unwrap_or_default()), e.line, cap);
                }
            }
            VulkanDevice(_) | DevicesFound { .. } | DeviceLost { .. } | OutOfMemory { .. }
                if e.text.starts_with(b"ggml_vulkan: ") =>
            {
                p.backend_with("Vulkan", "ggml_vulkan lines", || clip(lossy(e.text).into_owned()), e.line, cap)
            }
            GgmlAssert { file, .. } | Abort { file, .. } if find_bytes(file, b"ggml-cuda").is_some() => {
                p.backend_with(gpu, "failing ggml-cuda code", || text(file), e.line, cap)
            }
            GgmlAssert { file, .. } | Abort { file, .. } if find_bytes(file, b"ggml-vulkan").is_some() => {
                p.backend_with("Vulkan", "failing ggml-vulkan code", || text(file), e.line, cap)
            }
            // Only a line with a path (or a KoboldCpp library name) can name one.
            Milestone { .. } | RunnerStarting { .. }
                if memchr::memchr2(b'/', b'\\', e.text).is_some() || find_bytes(e.text, b"koboldcpp_").is_some() =>
            {
                let found = path_words(e.text).find_map(|w| {
                    let w = lossy(w);
                    backend_of_path(&w).map(|b| (b, w))
                });
                if let Some((backend, path)) = found.filter(|_| !says_not_used(e.text)) {
                    p.backend_with(backend, "runner library path", || clip(path.into_owned()), e.line, cap);
                }
            }
            InferenceCompute(ic) => {
                if let Some(lib) = ic.library {
                    let lib = text(lib);
                    if lib.eq_ignore_ascii_case("cpu") {
                        p.inference_cpu.get_or_insert(e.line);
                    }
                    p.backend_with(&lib, "inference compute", || format!("library={lib}"), e.line, cap);
                }
            }
            DevicesFound { backend, count } if count > 0 => p.backend_with(
                &text(backend),
                "device initialisation",
                || format!("{count} device(s) found"),
                e.line,
                cap,
            ),
            DevicesFound { backend, .. } if p.no_device.len() < cap => p.no_device.push(Reason {
                text: format!("{} found no device: {}", text(backend), clip(lossy(e.text).into_owned())),
                line: e.line,
            }),
            OpFailed { op } => p.backend_with(
                gpu,
                "failing op",
                || format!("{} failed in ggml_cuda_compute_forward", text(op)),
                e.line,
                cap,
            ),
            GpuError { api, message } => {
                let api = text(api);
                // ggml's HIP build reported its errors as "CUDA" before mid-2024: the devices the log found name it.
                let backend = if api == "HIP" {
                    "ROCm".to_string()
                } else if api == "CUDA" && gpu != "CUDA" {
                    // `CUDA/ROCm` until a line of the log says which ([`Placement::judge`]).
                    gpu.to_string()
                } else {
                    api.clone()
                };
                p.backend_with(&backend, "GPU runtime error", || format!("{api} error: {}", text(message)), e.line, cap)
            }
            BlasError { library, .. } => {
                p.backend_with("ROCm", "BLAS library error", || format!("{} error", text(library)), e.line, cap)
            }
            // ROCr's hang report (`HW Exception by GPU node-N … reason :GPU Hang`) is ROCm's; every other is Vulkan's.
            DeviceLost { message } if message.starts_with(b"HW Exception") => {
                p.backend_with("ROCm", "ROCm runtime", || summary(&e.kind, slog_line), e.line, cap)
            }
            DeviceLost { .. } => p.backend_with("Vulkan", "device lost", || summary(&e.kind, slog_line), e.line, cap),
            UnsupportedGpu { gpu, supported, message } => {
                let gpu = FilteredGpu {
                    gpu: gpu.map(text),
                    reason: text(message),
                    supported: supported.map(text),
                    line: e.line,
                };
                p.filtered(gpu, cap);
            }
            OutOfMemory { message } | LoadError { error: message } => {
                // `unable to allocate CUDA0 buffer`: the device the allocation was for.
                let m = text(message);
                let found = m
                    .split([' ', '"', ':', ','])
                    .find_map(|w| crate::placement::backend_of_device(w).map(|b| (b, w.to_string())));
                if let Some((b, w)) = found {
                    p.backend_with(b, "device named in a line", || format!("{w} in: {m}"), e.line, cap);
                }
            }
            DiscoveryFailure { .. } if p.discovery_failures.len() < cap => {
                p.discovery_failures.push(Reason { text: summary(&e.kind, slog_line), line: e.line });
            }
            _ => {}
        }
    }

    pub(super) fn facts(&mut self, e: &Event<'_>, slog_line: bool) {
        use EventKind::*;
        self.placement(e, slog_line);
        let text = |b: &[u8]| -> String {
            if slog_line {
                unquote(b).into_owned()
            } else {
                lossy(b).into_owned()
            }
        };
        let cap = self.limits.max_facts;
        let f = &mut self.facts;
        match e.kind {
            BackendLoaded { backend, path } => {
                let known = f.backends.iter().any(|b| b.name.as_bytes() == backend && b.path.as_bytes() == path);
                if f.backends.len() < cap && !known {
                    f.backends.push(Backend { name: text(backend), path: text(path), line: e.line });
                }
            }
            DevicesFound { backend, count } if count > 0 && self.gpu_backend.as_bytes() != backend => {
                self.gpu_backend = text(backend)
            }
            GpuDevice(d) if seen_device(&mut f.devices, None, d.index, d.name, e.line) => {}
            VulkanDevice(v) if seen_device(&mut f.devices, Some("Vulkan"), v.index, v.name, e.line) => {}
            GpuDevice(d) => {
                let backend = if !self.gpu_backend.is_empty() && self.gpu_backend != "Vulkan" {
                    self.gpu_backend.clone()
                } else if d.arch.is_some() || is_amd_name(d.name) {
                    // An AMD GPU in a `Device N:` list is a HIP build's (CUDA lists NVIDIA GPUs only), whatever
                    // the list's header said or whether it was pasted.
                    "ROCm".to_string()
                } else {
                    "CUDA".to_string()
                };
                let dev = Device {
                    backend,
                    index: d.index,
                    name: text(d.name),
                    arch: d.arch.map(text),
                    compute_capability: d.compute_capability.map(text),
                    vmm: d.vmm,
                    wave_size: d.wave_size,
                    vram_mib: d.vram_mib,
                    line: e.line,
                    ..Device::default()
                };
                push_device(&mut f.devices, dev, cap);
            }
            VulkanDevice(v) => {
                let dev = Device {
                    backend: "Vulkan".to_string(),
                    index: v.index,
                    name: text(v.name),
                    driver: v.driver.map(text),
                    uma: v.uma,
                    fp16: v.fp16,
                    warp_size: v.warp_size,
                    int_dot: v.int_dot,
                    matrix_cores: v.matrix_cores.map(text),
                    line: e.line,
                    ..Device::default()
                };
                push_device(&mut f.devices, dev, cap);
            }
            DeviceListed { device, description, total_mib, .. } => {
                let name = text(device);
                let digits = name.bytes().rev().take_while(u8::is_ascii_digit).count();
                let (backend, index) = name.split_at(name.len() - digits);
                let dev = Device {
                    backend: backend.to_string(),
                    index: index.parse().unwrap_or(0),
                    name: text(description),
                    vram_mib: total_mib,
                    line: e.line,
                    ..Device::default()
                };
                push_device(&mut f.devices, dev, cap);
            }
            InferenceCompute(ic) if f.inference_compute.len() < cap => {
                let mut m = BTreeMap::new();
                let fields = [
                    ("id", ic.id),
                    ("library", ic.library),
                    ("compute", ic.compute),
                    ("name", ic.name),
                    ("description", ic.description),
                    ("libdirs", ic.libdirs),
                    ("driver", ic.driver),
                    ("type", ic.device_type),
                    ("total", ic.total),
                    ("available", ic.available),
                ];
                for (k, v) in fields {
                    if let Some(v) = v {
                        m.insert(k, text(v));
                    }
                }
                m.insert("line", e.line.to_string());
                f.inference_compute.push(m);
            }
            LayersOffloaded { offloaded, total } => f.offload = Some(Offload { offloaded, total, line: e.line }),
            FlashAttention { setting } => match f.flash_attention.as_mut() {
                Some(fa) if fa.value.as_bytes() == setting => fa.line = e.line,
                _ => f.flash_attention = Some(Sourced { value: text(setting), line: e.line }),
            },
            Graph { nodes, splits } => {
                let prev = f.graph.take();
                f.graph = Some(self::Graph {
                    nodes: nodes.or(prev.as_ref().and_then(|g| g.nodes)),
                    splits: splits.or(prev.as_ref().and_then(|g| g.splits)),
                    line: e.line,
                });
            }
            BufferSize { device, buffer, mib } => {
                if let Some(b) = f.buffers.iter_mut().find(|b| b.device.as_bytes() == device && b.kind == buffer) {
                    b.mib = mib;
                    b.line = e.line;
                } else if f.buffers.len() < cap {
                    f.buffers.push(Buffer { device: text(device), kind: buffer, mib, line: e.line });
                }
            }
            RunnerStarted { seconds } if f.runner_started_s.len() < cap => {
                f.runner_started_s.push(Sourced { value: seconds, line: e.line });
            }
            HttpRequest { status, .. } => *f.http_status.entry(status).or_insert(0) += 1,
            Timing { which, ms, tokens } => {
                if f.timings.len() >= cap {
                    f.timings.pop_front();
                }
                f.timings.push_back(self::Timing { which, ms, tokens, line: e.line });
            }
            _ => {}
        }
    }
}

/// Substrings of a library path that can name a GPU backend ([`backend_of_path`] decides): a frame's module is only
/// read for the backend when it has one.
pub(super) const GPU_LIBRARY_HINTS: [Needle; 6] = [
    Needle::new("cuda"),
    Needle::new("rocm"),
    Needle::new("hip"),
    Needle::new("vulkan"),
    Needle::new("ggml-"),
    Needle::new("koboldcpp_"),
];

/// A line that names a library or device only to say it is not used (`skipping …`, `… skipped at user's request`,
/// `disabled`): no evidence that the backend ran.
/// The words of a line (split at spaces, quotes and `=`) that can be a library's path: with a `/` or `\\`, or a
/// KoboldCpp library name. Split as bytes, and only those words made text: the separators are ASCII, which no invalid
/// UTF-8 sequence holds, so the words are those of the line made text first (the code before split that, a character
/// at a time, for every milestone line with a path).
fn path_words(text: &[u8]) -> impl Iterator<Item = &[u8]> {
    text.split(|&b| matches!(b, b' ' | b'"' | b'='))
        .filter(|w| w.contains(&b'/') || w.contains(&b'\\') || w.starts_with(b"koboldcpp_"))
}

pub(super) fn says_not_used(text: &[u8]) -> bool {
    const WORDS: [Needle; 6] = [
        Needle::new("skipping"),
        Needle::new("skipped"),
        Needle::new("Skipping"),
        Needle::new("not loading"),
        Needle::new("at user's request"),
        Needle::new("ignoring"),
    ];
    WORDS.iter().any(|w| w.find(text).is_some())
}

/// A GPU name of AMD's (`AMD Radeon RX 6700 XT`, `Radeon RX 580`, `AMD Instinct MI100`).
pub(super) fn is_amd_name(name: &[u8]) -> bool {
    name.starts_with(b"AMD ") || name.starts_with(b"Radeon") || find_bytes(name, b" Radeon").is_some()
}

/// Whether a device is already listed (by index and name, and backend when given); updates its line.
pub(super) fn seen_device(devices: &mut [Device], backend: Option<&str>, index: u32, name: &[u8], line: u64) -> bool {
    let found = devices
        .iter_mut()
        .find(|d| d.index == index && d.name.as_bytes() == name && backend.is_none_or(|b| d.backend == b));
    match found {
        Some(d) => {
            d.line = line;
            true
        }
        None => false,
    }
}

pub(super) fn push_device(devices: &mut Vec<Device>, dev: Device, cap: usize) {
    if let Some(d) = devices.iter_mut().find(|d| d.backend == dev.backend && d.index == dev.index && d.name == dev.name)
    {
        d.line = dev.line;
        return;
    }
    if devices.len() < cap {
        devices.push(dev);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The path words, and the backend the first of them names, are those of the code before: the line made text, then
    /// split a character at a time. On every line of the logs and on lines with invalid UTF-8 and separators around it.
    #[test]
    fn path_words_are_those_of_the_line_as_text() {
        fn before(text: &[u8]) -> (Vec<String>, Option<(&'static str, String)>) {
            let line = lossy(text);
            let words: Vec<&str> = line
                .split([' ', '"', '='])
                .filter(|w| w.contains('/') || w.contains('\\') || w.starts_with("koboldcpp_"))
                .collect();
            let found = words.iter().find_map(|w| backend_of_path(w).map(|b| (b, w.to_string())));
            (words.iter().map(|w| w.to_string()).collect(), found)
        }
        fn after(text: &[u8]) -> (Vec<String>, Option<(&'static str, String)>) {
            let words: Vec<String> = path_words(text).map(|w| lossy(w).into_owned()).collect();
            let found = path_words(text).find_map(|w| {
                let w = lossy(w);
                backend_of_path(&w).map(|b| (b, w.into_owned()))
            });
            (words, found)
        }
        let mut lines = crate::patterns::repository_log_lines();
        for bad in [&b"\xff"[..], b"\xe2\x82", b"\xc3", b"\xf0\x9f\x98"] {
            for sep in [" ", "\"", "=", "/", ""] {
                let mut line = b"library=/usr/lib/ollama/cuda_v12".to_vec();
                line.extend_from_slice(bad);
                line.extend_from_slice(sep.as_bytes());
                line.extend_from_slice(b"koboldcpp_cublas.so x/");
                line.extend_from_slice(bad);
                lines.push(line);
            }
        }
        let mut with_backend = 0;
        for line in &lines {
            let (words, found) = after(line);
            with_backend += usize::from(found.is_some());
            assert_eq!((words, found), before(line), "{}", String::from_utf8_lossy(line));
        }
        assert!(with_backend > 10, "{with_backend}");
    }
}
