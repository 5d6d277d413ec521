//! Where the model ran, as the log tells it: the backends (from library paths such as `cuda_v13/`, `rocm_v5/`,
//! `libggml-vulkan`, `libggml-hip`, from device initialisation, from the op or the runtime that failed), the GPUs
//! the runtime dropped and why, whether the model was served on the CPU and because of what, and the facts that
//! contradict each other (the offload line says N/N while every model buffer is on the CPU).
//!
//! [`Placement`] is filled line by line from typed events (bounded lists) and judged once at the end
//! ([`Placement::judge`]) from the offload and buffer facts.

use serde::Serialize;

use crate::event::BufferKind;
use crate::facts::{Buffer, Offload};

/// A backend the log shows, and how it shows it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BackendSeen {
    /// `CUDA`, `ROCm`, `Vulkan`, `Metal`, `CPU`, or `CUDA/ROCm` where ggml's shared CUDA/HIP code does not say which.
    pub backend: String,
    /// How: `library path`, `device initialisation`, `inference compute`, `failing op`, `GPU runtime error`…
    pub how: String,
    /// The path or text that tells it.
    pub evidence: String,
    pub line: u64,
}

/// A GPU the runtime found and did not use.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FilteredGpu {
    /// The GPU as the line names it (`gfx1031`, a compute capability `6.1`, a device name), when it does.
    pub gpu: Option<String>,
    /// The line's reason, as written (`dropping ROCm device — no rocblas support for gfx target`).
    pub reason: String,
    /// What the build supports, when the line says (`[gfx1030 gfx1100]`, `750,800,860`).
    pub supported: Option<String>,
    pub line: u64,
}

/// A line a verdict rests on, with what it says.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Reason {
    pub text: String,
    pub line: u64,
}

/// The model was served on the CPU: the lines that show it, and those that say why.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CpuServed {
    pub shown_by: Vec<Reason>,
    /// Discovery failures and dropped GPUs (empty: the log does not say why).
    pub because: Vec<Reason>,
}

/// Facts that cannot all be true.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Contradiction {
    pub text: String,
    pub lines: Vec<u64>,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct Placement {
    pub backends: Vec<BackendSeen>,
    pub filtered_gpus: Vec<FilteredGpu>,
    /// GPU-discovery failures (they can leave the runtime without a GPU).
    pub discovery_failures: Vec<Reason>,
    /// Lines where a GPU backend says it found no device (`ggml_cuda_init: failed to initialize CUDA: no
    /// CUDA-capable device is detected`, `ggml_vulkan: No devices found`).
    pub no_device: Vec<Reason>,
    /// Ollama's `inference compute` said `library=cpu`.
    #[serde(skip)]
    pub inference_cpu: Option<u64>,
    pub cpu_served: Option<CpuServed>,
    pub contradictions: Vec<Contradiction>,
    /// Ollama's scheduler's record of the runner: its size and how much of it is in GPU memory (`runner.size="35.7
    /// GiB" runner.vram="35.7 GiB"`, O `server/sched.go` runner log values); the last such line.
    pub scheduler_memory: Option<SchedulerMemory>,
    /// The GPU offload a front end asked for (LM Studio's `Num Offload Layers: max`, its estimate for `raw num offload
    /// layers '0'`): a setting, not where the layers went. The last such line.
    pub requested_offload: Option<Reason>,
}

/// How much of a runner Ollama's scheduler counts in GPU memory.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SchedulerMemory {
    pub size: String,
    pub vram: String,
    pub line: u64,
}

impl SchedulerMemory {
    /// `all`, `none` or `part` of the runner in GPU memory, when both sizes read.
    pub fn share(&self) -> Option<&'static str> {
        let (size, vram) = (size_mib(&self.size)?, size_mib(&self.vram)?);
        Some(if vram <= 0.0 {
            "none"
        } else if vram >= size {
            "all"
        } else {
            "part"
        })
    }
}

/// `35.7 GiB`, `0 B`, `512.0 MiB` in MiB.
pub fn size_mib(s: &str) -> Option<f64> {
    let s = s.trim();
    let split = s.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
    let value: f64 = s[..split].parse().ok()?;
    let factor = match s[split..].trim() {
        "B" => 1.0 / (1024.0 * 1024.0),
        "KiB" | "KB" => 1.0 / 1024.0,
        "MiB" | "MB" => 1.0,
        "GiB" | "GB" => 1024.0,
        "TiB" | "TB" => 1024.0 * 1024.0,
        _ => return None,
    };
    Some(value * factor)
}

/// What a library path or runner directory says of its backend (lower case), GPU backends before the CPU. KoboldCpp
/// names its builds after the BLAS they use: koboldcpp_cublas (CUDA), koboldcpp_hipblas (ROCm), koboldcpp_vulkan
/// (LostRuins/koboldcpp koboldcpp.py `lib_cublas`, `lib_hipblas`, `lib_vulkan`).
const PATH_NAMES: [(&str, &[&str]); 5] = [
    ("CUDA", &["cuda_v", "ggml-cuda", "libcudart", "cuda_jetpack", "koboldcpp_cublas"]),
    ("ROCm", &["rocm", "ggml-hip", "libhipblas", "librocblas", "koboldcpp_hipblas"]),
    ("Vulkan", &["vulkan"]),
    ("Metal", &["ggml-metal", "metal_"]),
    ("CPU", &["cpu_avx", "ggml-cpu", "/cpu/"]),
];

/// The letter pairs `cu`, `cp`, `ro`, `hi`, `vu`, `me` that `path` holds, in any case, as bits (1, 2, 4, 8, 16, 32):
/// every name of [`PATH_NAMES`] holds one of its backend's ([`PATH_PAIRS`]), and most words of a command line (a
/// model's blob path, a flag) hold none, so one pass over the bytes spares them the searches, and a path that holds
/// `cu` only is searched for CUDA's names only.
fn backend_pairs(path: &[u8]) -> u8 {
    let mut bits = 0;
    for w in path.windows(2) {
        bits |= match (w[0] | 0x20, w[1] | 0x20) {
            (b'c', b'u') => 1,
            (b'c', b'p') => 2,
            (b'r', b'o') => 4,
            (b'h', b'i') => 8,
            (b'v', b'u') => 16,
            (b'm', b'e') => 32,
            _ => 0,
        };
    }
    bits
}

/// For each backend of [`PATH_NAMES`], the pairs of [`backend_pairs`] one of which each of its names holds.
const PATH_PAIRS: [u8; 5] = [1, 4 | 8, 16, 32, 2];

/// The backend a library path or runner directory names (`…/cuda_v13/libggml-cuda.so`, `rocm_v5/`,
/// `libggml-vulkan.so`, `ggml-hip.dll`), GPU backends before the CPU.
pub fn backend_of_path(path: &str) -> Option<&'static str> {
    let pairs = backend_pairs(path.as_bytes());
    if pairs == 0 {
        return None;
    }
    let p = path.to_ascii_lowercase();
    PATH_NAMES
        .iter()
        .zip(PATH_PAIRS)
        .find(|((_, names), need)| pairs & need != 0 && names.iter().any(|n| p.contains(n)))
        .map(|((backend, _), _)| *backend)
}

/// The backend a ggml device name belongs to (`CUDA0`, `ROCm1`, `Vulkan0`, `Metal`, `SYCL0`); host buffers
/// (`CPU`, `CUDA_Host`) name none.
pub fn backend_of_device(device: &str) -> Option<&'static str> {
    let name = device.trim_end_matches(|c: char| c.is_ascii_digit());
    if name.len() == device.len() && name != "Metal" {
        return None;
    }
    match name {
        "CUDA" => Some("CUDA"),
        "ROCm" | "HIP" => Some("ROCm"),
        "Vulkan" => Some("Vulkan"),
        "Metal" | "MTL" => Some("Metal"),
        "SYCL" => Some("SYCL"),
        _ => None,
    }
}

/// One spelling per backend (Ollama writes `library=cuda` in some releases, `CUDA` in others).
fn canonical_name(backend: &str) -> &str {
    const NAMES: [(&str, &str); 6] =
        [("cuda", "CUDA"), ("rocm", "ROCm"), ("hip", "ROCm"), ("vulkan", "Vulkan"), ("metal", "Metal"), ("cpu", "CPU")];
    NAMES.iter().find(|(k, _)| k.eq_ignore_ascii_case(backend)).map_or(backend, |(_, v)| v)
}

/// Devices ggml names for host memory (`CPU`, `CPU_Mapped`, `CPU_REPACK`, `CPU_AARCH64`); pinned host buffers of
/// a GPU backend (`CUDA_Host`) are host memory too but belong to a GPU run.
pub fn is_cpu_device(device: &str) -> bool {
    device == "CPU" || device.starts_with("CPU_") || device.eq_ignore_ascii_case("cpu")
}

impl Placement {
    pub fn backend(&mut self, backend: &str, how: &str, evidence: String, line: u64, cap: usize) {
        self.backend_with(backend, how, || evidence, line, cap);
    }

    /// [`Placement::backend`] with the evidence made only when the backend is new for `how`: the hot path (a
    /// buffer line, a milestone) names the same backend again and again.
    pub fn backend_with(&mut self, backend: &str, how: &str, evidence: impl FnOnce() -> String, line: u64, cap: usize) {
        let name = canonical_name(backend);
        if self.backends.iter().any(|b| b.backend == name && b.how == how) || self.backends.len() >= cap {
            return;
        }
        self.backends.push(BackendSeen { backend: name.to_string(), how: how.to_string(), evidence: evidence(), line });
    }

    pub fn filtered(&mut self, gpu: FilteredGpu, cap: usize) {
        let known = self.filtered_gpus.iter().any(|g| g.gpu == gpu.gpu && g.reason == gpu.reason);
        if !known && self.filtered_gpus.len() < cap {
            self.filtered_gpus.push(gpu);
        }
    }

    /// Judge, from the facts gathered and the last offload and the model buffers, whether the model was served
    /// on the CPU, and what contradicts what.
    pub fn judge(&mut self, offload: Option<&Offload>, buffers: &[Buffer]) {
        // ggml's CUDA code serves both NVIDIA and AMD (HIP): a line from it says "CUDA/ROCm" until another line of the
        // log names one of the two.
        let cuda = self.backends.iter().any(|b| b.backend == "CUDA");
        let rocm = self.backends.iter().any(|b| b.backend == "ROCm");
        if cuda != rocm {
            let known = if cuda { "CUDA" } else { "ROCm" };
            for b in self.backends.iter_mut().filter(|b| b.backend == "CUDA/ROCm") {
                b.backend = known.to_string();
            }
        }
        let model: Vec<&Buffer> = buffers.iter().filter(|b| b.kind == BufferKind::Model).collect();
        let all_cpu = !model.is_empty() && model.iter().all(|b| is_cpu_device(&b.device));
        let mut shown_by = Vec::new();
        if let Some(o) = offload.filter(|o| o.offloaded == 0 && o.total > 0) {
            shown_by.push(Reason { text: format!("offloaded 0/{} layers to GPU", o.total), line: o.line });
        }
        if all_cpu {
            for b in &model {
                shown_by.push(Reason { text: format!("{} model buffer {:.2} MiB", b.device, b.mib), line: b.line });
            }
        }
        if let Some(line) = self.inference_cpu {
            shown_by.push(Reason { text: "inference compute: library=cpu".into(), line });
        }
        if let Some(m) = self.scheduler_memory.as_ref().filter(|m| m.share() == Some("none")) {
            shown_by.push(Reason { text: format!("runner.vram={} of runner.size={}", m.vram, m.size), line: m.line });
        }
        if let Some(o) = offload.filter(|o| o.offloaded > 0 && all_cpu) {
            let mut lines = vec![o.line];
            lines.extend(model.iter().map(|b| b.line));
            self.contradictions.push(Contradiction {
                text: format!(
                    "the offload line says {}/{} layers went to the GPU, but every model buffer is on the CPU ({})",
                    o.offloaded,
                    o.total,
                    model.iter().map(|b| b.device.as_str()).collect::<Vec<_>>().join(", ")
                ),
                lines,
            });
        }
        // A printed offload is not a GPU that ran it when a backend found no device and no other backend found one,
        // and no model buffer is on a GPU.
        let device_found = self.backends.iter().any(|b| b.how == "device initialisation");
        let gpu_buffer = model.iter().any(|b| !is_cpu_device(&b.device));
        if let (Some(o), Some(none)) = (offload.filter(|o| o.offloaded > 0), self.no_device.first()) {
            if !device_found && !gpu_buffer {
                self.contradictions.push(Contradiction {
                    text: format!(
                        "the offload line says {}/{} layers went to the GPU, but line {} says {} and no line shows a GPU device found or a model buffer on a GPU",
                        o.offloaded, o.total, none.line, none.text
                    ),
                    lines: vec![o.line, none.line],
                });
            }
        }
        if shown_by.is_empty() {
            return;
        }
        let mut because: Vec<Reason> = self.discovery_failures.clone();
        because.extend(self.filtered_gpus.iter().map(|g| Reason {
            text: match &g.gpu {
                Some(gpu) => format!("{gpu}: {}", g.reason),
                None => g.reason.clone(),
            },
            line: g.line,
        }));
        self.cpu_served = Some(CpuServed { shown_by, because });
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_path_name_holds_a_pair_the_quick_test_looks_for() {
        for ((_, names), need) in super::PATH_NAMES.iter().zip(super::PATH_PAIRS) {
            for name in names.iter() {
                assert!(super::backend_pairs(name.as_bytes()) & need != 0, "{name}");
                assert!(super::backend_pairs(name.to_ascii_uppercase().as_bytes()) & need != 0, "{name}");
            }
        }
        // A model blob path names no backend and holds none of the pairs.
        assert_eq!(
            super::backend_pairs(b"/usr/share/ollama/.ollama/models/blobs/sha256-6a0746a1ec1aef3e7ec53868f2"),
            0
        );
    }

    use super::*;

    #[test]
    fn backends_from_paths() {
        // Directory names of Ollama's bundles (O `discover/runner.go:67`: cuda_v12, cuda_v13, rocm_v7_2, vulkan),
        // the ggml backend libraries (L `ggml/src/ggml-backend-reg.cpp`), and the 2024 runner dirs (rocm_v5).
        assert_eq!(backend_of_path("/usr/lib/ollama/cuda_v13/libggml-cuda.so"), Some("CUDA"));
        assert_eq!(backend_of_path("/tmp/ollama800487147/rocm_v5/libext_server.so"), Some("ROCm"));
        assert_eq!(backend_of_path("C:\\Program Files\\Ollama\\lib\\ollama\\ggml-hip.dll"), Some("ROCm"));
        assert_eq!(backend_of_path("/app/libggml-vulkan.so"), Some("Vulkan"));
        assert_eq!(backend_of_path("/usr/lib/ollama/libggml-cpu-haswell.so"), Some("CPU"));
        assert_eq!(backend_of_path("/home/me/models/llama.gguf"), None);
        // Buffer device names (L src/llama-model.cpp `… model buffer size`): the device, not host memory.
        assert_eq!(backend_of_device("CUDA0"), Some("CUDA"));
        assert_eq!(backend_of_device("ROCm1"), Some("ROCm"));
        assert_eq!(backend_of_device("Vulkan0"), Some("Vulkan"));
        assert_eq!(backend_of_device("CUDA_Host"), None);
        assert_eq!(backend_of_device("CPU_Mapped"), None);
    }

    fn buffer(device: &str, line: u64) -> Buffer {
        Buffer { device: device.into(), kind: BufferKind::Model, mib: 100.0, line }
    }

    #[test]
    fn cpu_verdicts_and_contradictions() {
        let mut p = Placement::default();
        p.filtered(
            FilteredGpu {
                gpu: Some("gfx1031".into()),
                reason: "removing unsupported or overlapping GPU combination".into(),
                supported: None,
                line: 3,
            },
            8,
        );
        p.judge(Some(&Offload { offloaded: 0, total: 33, line: 9 }), &[buffer("CPU_Mapped", 10)]);
        let cpu = p.cpu_served.as_ref().unwrap();
        assert_eq!(cpu.shown_by.iter().map(|r| r.line).collect::<Vec<_>>(), vec![9, 10]);
        assert_eq!(cpu.because[0].line, 3);
        assert!(p.contradictions.is_empty());

        let mut p = Placement::default();
        p.judge(Some(&Offload { offloaded: 33, total: 33, line: 9 }), &[buffer("CPU", 10)]);
        assert_eq!(p.contradictions[0].lines, vec![9, 10]);
        assert!(p.cpu_served.as_ref().unwrap().because.is_empty());

        // A normal GPU run: the CPU keeps the embeddings next to the GPU's weights.
        let mut p = Placement::default();
        p.judge(Some(&Offload { offloaded: 33, total: 33, line: 9 }), &[buffer("CPU_Mapped", 10), buffer("CUDA0", 11)]);
        assert!(p.cpu_served.is_none() && p.contradictions.is_empty());
    }
}
