//! Where each weight's matrix multiplication runs: which weights llama.cpp keeps in GPU memory for a number of
//! offloaded layers (`-ngl`, Ollama's num_gpu), and which matmuls of CPU-resident weights ggml's scheduler still
//! runs on the GPU (op offload at large batches), per phase of a request. The rules, their thresholds and their
//! sources are `data/ggml_placement_11434.toml`; this module applies them in ggml's order.
//!
//! Per weight and phase: a weight in GPU memory runs on the GPU (`weight-on-gpu`). A weight in CPU memory runs on
//! the GPU when op offload is on and the phase's batch (the op's ne[1] for MUL_MAT, ne[2] for MUL_MAT_ID: the
//! tokens of the ubatch) reaches the backend's minimum (`op-offload`, 32 by default), else on the CPU
//! (`op-offload-small-batch`, `op-offload-off`). Without a GPU device nothing runs on the GPU (`no-gpu-device`).

use std::sync::OnceLock;

use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};

use super::model::{MatmulOp, WeightTensor};
use super::observed::ObservedKernel;
use crate::evidence::Source;

pub const PLACEMENT_FILE: &str = "data/ggml_placement_11434.toml";

/// One placement rule of the data file.
#[derive(Clone, Debug, Deserialize)]
pub struct Rule {
    pub id: String,
    pub statement: String,
    pub source: String,
}

/// A GPU backend's op-offload facts.
#[derive(Clone, Debug, Deserialize)]
pub struct BackendRow {
    pub name: String,
    pub min_batch: u64,
    pub min_batch_env: String,
    pub mul_mat_batch_dim: u8,
    pub mul_mat_id_batch_dim: u8,
    pub get_rows_offloads: bool,
    pub source: String,
}

#[derive(Clone, Debug, Deserialize)]
pub struct PlacementData {
    pub version: String,
    pub source_root: String,
    pub rule: Vec<Rule>,
    pub backend: Vec<BackendRow>,
}

impl PlacementData {
    pub fn rule(&self, id: &str) -> &Rule {
        self.rule.iter().find(|r| r.id == id).unwrap_or_else(|| panic!("{PLACEMENT_FILE} has no rule `{id}`"))
    }

    pub fn backend(&self, b: GpuBackend) -> &BackendRow {
        let name = b.as_str();
        self.backend
            .iter()
            .find(|r| r.name == name)
            .unwrap_or_else(|| panic!("{PLACEMENT_FILE} has no backend `{name}`"))
    }
}

/// The placement rules (embedded).
pub fn data() -> &'static PlacementData {
    static D: OnceLock<PlacementData> = OnceLock::new();
    D.get_or_init(|| {
        toml::from_str(include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/data/ggml_placement_11434.toml")))
            .expect("data/ggml_placement_11434.toml parses")
    })
}

/// The evidence source of a placement rule.
pub fn rule_source(id: &str) -> Source {
    let r = data().rule(id);
    Source::Rule { file: PLACEMENT_FILE.into(), rule: r.id.clone(), upstream: r.source.clone() }
}

/// The GPU backend llama.cpp runs on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GpuBackend {
    #[default]
    Cuda,
    Hip,
    Vulkan,
}

impl GpuBackend {
    pub fn as_str(self) -> &'static str {
        match self {
            GpuBackend::Cuda => "cuda",
            GpuBackend::Hip => "hip",
            GpuBackend::Vulkan => "vulkan",
        }
    }

    /// The backend of a device or backend name as llama.cpp's log spells it (`CUDA0 (NVIDIA H100)`, `ROCm0`,
    /// `Vulkan0 (llvmpipe …)`, ggml_backend_reg names `CUDA`, `ROCm`, `HIP`, `Vulkan`), or a plain `cuda`/`hip`/
    /// `rocm`/`vulkan`. `None` for the CPU and anything else.
    pub fn parse(name: &str) -> Option<GpuBackend> {
        let lower = name.trim().to_ascii_lowercase();
        let head: String = lower.chars().take_while(|c| c.is_ascii_alphabetic()).collect();
        match head.as_str() {
            "cuda" => Some(GpuBackend::Cuda),
            "rocm" | "hip" => Some(GpuBackend::Hip),
            "vulkan" => Some(GpuBackend::Vulkan),
            _ => None,
        }
    }
}

/// Where a weight lives or its op runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum Where {
    #[serde(rename = "GPU")]
    Gpu,
    #[serde(rename = "CPU")]
    Cpu,
}

impl std::fmt::Display for Where {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Where::Gpu => "GPU",
            Where::Cpu => "CPU",
        })
    }
}

/// How many layers are offloaded to the GPU: llama.cpp's n_gpu_layers (`-ngl`), Ollama's num_gpu.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NumGpu {
    /// Every layer and the output layer: a negative count (llama.cpp takes any as n_layer + 1; Ollama writes -1). The
    /// count is kept as given, so that the report says back what was asked.
    Auto(i64),
    /// This many: the last repeating layers, and from one on the output layer.
    Layers(u64),
}

impl NumGpu {
    /// Every layer, as llama.cpp and Ollama write it.
    pub const AUTO: NumGpu = NumGpu::Auto(-1);

    /// A count as llama.cpp and Ollama spell it: a negative one is [`NumGpu::Auto`].
    pub fn from_count(n: i64) -> NumGpu {
        u64::try_from(n).map_or(NumGpu::Auto(n), NumGpu::Layers)
    }

    /// As llama.cpp and Ollama spell it: negative for [`NumGpu::Auto`].
    pub fn count(self) -> i64 {
        match self {
            NumGpu::Auto(n) => n,
            NumGpu::Layers(n) => i64::try_from(n).unwrap_or(i64::MAX),
        }
    }
}

impl std::fmt::Display for NumGpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.count())
    }
}

impl Serialize for NumGpu {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_i64(self.count())
    }
}

/// What decides placement (`predict`'s options).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlacementOptions {
    /// Layers offloaded; `None`: not given, every layer (every weight on the GPU, as a prediction without placement
    /// assumes, with no placement verdicts).
    pub num_gpu: Option<NumGpu>,
    /// Whether the runtime has a GPU device at all (a CPU-only server: no).
    pub gpu_device: bool,
    pub backend: GpuBackend,
    /// llama.cpp's op_offload (off with --no-op-offload).
    pub op_offload: bool,
    /// GGML_OP_OFFLOAD_MIN_BATCH when set; else the backend's default.
    pub min_batch: Option<u64>,
}

impl Default for PlacementOptions {
    fn default() -> Self {
        PlacementOptions {
            num_gpu: None,
            gpu_device: true,
            backend: GpuBackend::Cuda,
            op_offload: true,
            min_batch: None,
        }
    }
}

/// The offload the options give for a model of `n_layer` repeating layers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Offload {
    pub backend: GpuBackend,
    /// As given (None: all), under llama.cpp's name.
    #[serde(rename = "n_gpu_layers", skip_serializing_if = "Option::is_none")]
    pub num_gpu: Option<NumGpu>,
    /// n_gpu_layers as llama.cpp counts it (0 ..= n_layer + 1): the repeating layers on the GPU plus the output layer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub effective: Option<u64>,
    /// First repeating layer on the GPU (i_gpu_start); layers from it to n_layer - 1 are on the GPU.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_gpu_layer: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repeating_on_gpu: Option<u64>,
    pub output_on_gpu: bool,
    pub gpu_device: bool,
    pub op_offload: bool,
    /// Minimum batch (tokens) at which a CPU-resident weight's matmul is offloaded.
    pub min_batch: u64,
    /// The rules this offload rests on, with their upstream lines.
    pub rules: Vec<String>,
}

impl Offload {
    /// Apply the layer-count rules to a model of `n_layer` repeating layers (`None`: unknown, as for `--type`).
    pub fn new(opts: &PlacementOptions, n_layer: Option<u64>) -> Result<Offload> {
        let d = data();
        let min_batch = opts.min_batch.unwrap_or(d.backend(opts.backend).min_batch);
        let mut rules = vec!["input-layer-cpu".to_string()];
        let (effective, first, output_on_gpu) = if !opts.gpu_device {
            rules.push("no-gpu-device".into());
            (Some(0), None, false)
        } else {
            match (opts.num_gpu, n_layer) {
                (None | Some(NumGpu::Auto(_)), n) => {
                    rules.push("ngl-negative-all".into());
                    (n.map(|n| n + 1), Some(0), true)
                }
                (Some(NumGpu::Layers(0)), _) => {
                    rules.extend(["repeating-layers".into(), "output-layer".into()]);
                    (Some(0), None, false)
                }
                (Some(NumGpu::Layers(layers)), Some(n)) => {
                    rules.extend(["repeating-layers".into(), "output-layer".into()]);
                    // i_gpu_start = max(n_layer + 1 - n_gpu_layers, 0); the output layer is index n_layer.
                    let start = (n + 1).saturating_sub(layers);
                    (Some(layers.min(n + 1)), Some(start), true)
                }
                (Some(NumGpu::Layers(layers)), None) => bail!(
                    "--num-gpu {layers} places some layers only: that needs a model's layers (--model), not a single --type"
                ),
            }
        };
        let repeating_on_gpu = match (first, n_layer) {
            (Some(f), Some(n)) => Some(n.saturating_sub(f)),
            (None, _) => Some(0),
            (Some(_), None) => None,
        };
        if opts.gpu_device {
            rules.push(if opts.op_offload { "op-offload".into() } else { "op-offload-off".into() });
        }
        Ok(Offload {
            backend: opts.backend,
            num_gpu: opts.num_gpu,
            effective,
            first_gpu_layer: first,
            repeating_on_gpu,
            output_on_gpu,
            gpu_device: opts.gpu_device,
            op_offload: opts.op_offload && opts.gpu_device,
            min_batch,
            rules,
        })
    }

    /// Where a weight lives, with the rule that says so.
    pub fn resident(&self, t: &WeightTensor) -> (Where, &'static str) {
        if !self.gpu_device {
            return (Where::Cpu, "no-gpu-device");
        }
        if t.head {
            let rule = if t.name.starts_with("token_embd") { "tied-output" } else { "output-layer" };
            return (if self.output_on_gpu { Where::Gpu } else { Where::Cpu }, rule);
        }
        let rule = match self.num_gpu {
            None | Some(NumGpu::Auto(_)) => "ngl-negative-all",
            Some(NumGpu::Layers(_)) => "repeating-layers",
        };
        match (self.first_gpu_layer, t.layer) {
            (None, _) => (Where::Cpu, rule),
            (Some(first), Some(il)) => (if il >= first { Where::Gpu } else { Where::Cpu }, rule),
            // A weight without a layer index (a single --type) is offloaded only when everything is.
            (Some(first), None) => (if first == 0 { Where::Gpu } else { Where::Cpu }, rule),
        }
    }

    /// Where a weight's matmul runs in a phase whose ops see `tokens` tokens, with the deciding rule.
    pub fn runs_on(&self, t: &WeightTensor, tokens: u64) -> Placed {
        let (resident, resident_rule) = self.resident(t);
        let (runs_on, rule) = match resident {
            Where::Gpu => (Where::Gpu, "weight-on-gpu"),
            Where::Cpu if !self.gpu_device => (Where::Cpu, "no-gpu-device"),
            Where::Cpu if !self.op_offload => (Where::Cpu, "op-offload-off"),
            // get_op_batch_size: MUL_MAT's ne[1] and MUL_MAT_ID's ne[2] are both the ubatch's tokens here.
            Where::Cpu if tokens >= self.min_batch => (Where::Gpu, "op-offload"),
            Where::Cpu => (Where::Cpu, "op-offload-small-batch"),
        };
        Placed { resident, resident_rule, runs_on, rule }
    }

    /// One line for the report's assumptions.
    pub fn describe(&self, n_layer: Option<u64>) -> String {
        let backend = self.backend.as_str();
        if !self.gpu_device {
            return "no GPU device: every weight in CPU memory, every matmul on the CPU".into();
        }
        let layers = match (self.first_gpu_layer, n_layer) {
            (Some(0), _) => "every layer and the output layer on the GPU".to_string(),
            (None, _) => "no layer on the GPU (-ngl 0): every weight in CPU memory".to_string(),
            (Some(f), Some(n)) if f >= n => "the output layer only on the GPU".to_string(),
            (Some(f), Some(n)) => format!("repeating layers {f}-{} and the output layer on the GPU", n - 1),
            (Some(_), None) => "some layers on the GPU".into(),
        };
        let given = match self.num_gpu {
            None => "all layers (no num_gpu given)".to_string(),
            Some(n) => format!("n_gpu_layers {n}"),
        };
        let offload = if self.op_offload {
            format!(
                "matmuls of CPU-resident weights run on the {backend} GPU at batches of {} tokens or more (op offload)",
                self.min_batch
            )
        } else {
            "op offload off: CPU-resident weights run on the CPU at every batch".into()
        };
        format!("placement ({backend}, {given}): {layers}; the token embedding stays on the CPU; {offload}")
    }
}

/// Where one weight lives and where its matmul runs in one phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Placed {
    pub resident: Where,
    pub resident_rule: &'static str,
    pub runs_on: Where,
    /// The rule that decided where it runs.
    pub rule: &'static str,
}

/// A matmul kernel (CUDA/HIP) or pipeline (Vulkan) observed on the GPU: its weight type, column count when the
/// kernel encodes it, and for Vulkan the ggml op its pipeline computes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuMatmul {
    pub ggml_type: Option<String>,
    pub ncols: Option<u64>,
    /// `MUL_MAT`, `MUL_MAT_VEC`, `MUL_MAT_ID` for a Vulkan pipeline; `None` for a CUDA/HIP kernel.
    pub vulkan_op: Option<&'static str>,
}

/// Column counts up to which ggml-vulkan multiplies with its vector pipelines (mul_mat_vec_max_cols,
/// ggml/src/ggml-vulkan/ggml-vulkan-types.h:383; the choice in ggml_vk_mul_mat, ggml-vulkan.cpp:7296-7301).
pub const VULKAN_VEC_MAX_COLS: u64 = 8;

/// The GPU matmul an observed kernel is, if it is one: a CUDA/HIP matmul family, vendor BLAS or ggml's
/// conversion kernels, or a Vulkan pipeline whose op is a matmul (not a helper dispatch).
pub fn gpu_matmul(k: &ObservedKernel) -> Option<GpuMatmul> {
    if k.launches == 0 {
        return None;
    }
    if crate::gpu::kernels::MATMUL_FAMILIES.contains(&k.family.as_str()) || k.family == "vendor-BLAS" {
        return Some(GpuMatmul { ggml_type: k.ggml_type.clone(), ncols: k.ncols, vulkan_op: None });
    }
    let v = crate::observe::vulkan::describe(&k.name, None);
    match v.op {
        Some(op @ ("MUL_MAT" | "MUL_MAT_VEC" | "MUL_MAT_ID")) if !v.helper => {
            Some(GpuMatmul { ggml_type: v.ggml_type.map(str::to_string), ncols: None, vulkan_op: Some(op) })
        }
        _ => None,
    }
}

impl GpuMatmul {
    /// Whether this kernel could be the matmul of a weight of `ggml_type` at `ne11` columns with `op`: the same
    /// type; a CUDA vector kernel's column count equal to ne11; a Vulkan pipeline of the op ggml-vulkan picks for
    /// ne11 (vector up to 8 columns).
    pub fn fits(&self, ggml_type: &str, ne11: u64, op: MatmulOp) -> bool {
        // ggml-vulkan's generic quantized matmul (`matmul_quant_*`) names no type: it may be any.
        let untyped_vulkan = self.vulkan_op.is_some() && self.ggml_type.is_none();
        if !untyped_vulkan && self.ggml_type.as_deref() != Some(ggml_type) {
            return false;
        }
        if let (Some(n), false) = (self.ncols, op == MatmulOp::MulMatId) {
            if n != ne11 {
                return false;
            }
        }
        match (self.vulkan_op, op) {
            (None, _) => true,
            (Some(v), MatmulOp::MulMatId) => v == "MUL_MAT_ID",
            (Some(v), MatmulOp::MulMat) => v == if ne11 <= VULKAN_VEC_MAX_COLS { "MUL_MAT_VEC" } else { "MUL_MAT" },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::observed::ReadAs;
    use super::*;

    fn tensor(name: &str, layer: Option<u64>, head: bool) -> WeightTensor {
        WeightTensor {
            name: name.into(),
            ggml_type: "Q4_K".into(),
            ne00: Some(64),
            ne01: Some(64),
            experts: 0,
            op: MatmulOp::MulMat,
            after_gather: head,
            layer,
            head,
        }
    }

    fn opts(ngl: Option<i64>) -> PlacementOptions {
        PlacementOptions { num_gpu: ngl.map(NumGpu::from_count), ..PlacementOptions::default() }
    }

    /// The rows name the upstream lines that the shared notes and this module restate; the thresholds are
    /// read from the file, and equal what the cited lines say (`: 32;` in each backend's registration).
    #[test]
    fn data_file_rows_cite_their_lines() {
        let d = data();
        assert_eq!(d.version, "11434");
        for r in &d.rule {
            assert!(r.source.contains(':'), "{}: {}", r.id, r.source);
        }
        for b in &d.backend {
            assert_eq!((b.min_batch, b.mul_mat_batch_dim, b.mul_mat_id_batch_dim), (32, 1, 2), "{}", b.name);
            assert!(!b.get_rows_offloads);
            assert_eq!(b.min_batch_env, "GGML_OP_OFFLOAD_MIN_BATCH");
        }
        assert!(d.backend(GpuBackend::Vulkan).source.contains("ggml-vulkan-debug.cpp:766-779"));
        assert!(d.rule("repeating-layers").source.contains("src/llama-model.cpp:1591"));
        assert!(d.rule("op-offload").source.contains("ggml-backend.cpp:1107-1116"));
    }

    /// src/llama-model.cpp:1591-1616: i_gpu_start = max(n_layer + 1 - ngl, 0), layer il on the GPU iff
    /// il >= i_gpu_start, the output layer being il = n_layer. A 22-layer model:
    #[test]
    fn layers_follow_i_gpu_start() {
        let n = Some(22);
        let cases: &[(Option<i64>, u64, Option<u64>, bool)] = &[
            // ngl, layer probed, expected first GPU layer, output on GPU
            (Some(0), 21, None, false),
            (Some(1), 21, Some(22), true),  // only the output layer
            (Some(10), 13, Some(13), true), // 9 repeating layers (13-21) and the output
            (Some(22), 1, Some(1), true),
            (Some(23), 0, Some(0), true),
            (Some(99), 0, Some(0), true),
            (Some(-1), 0, Some(0), true), // llama_model::n_gpu_layers: negative = n_layer + 1
            (None, 0, Some(0), true),
        ];
        for &(ngl, _, first, output) in cases {
            let o = Offload::new(&opts(ngl), n).unwrap();
            assert_eq!((o.first_gpu_layer, o.output_on_gpu), (first, output), "ngl {ngl:?}");
        }
        let o = Offload::new(&opts(Some(10)), n).unwrap();
        assert_eq!(o.repeating_on_gpu, Some(9));
        assert_eq!(o.resident(&tensor("blk.12.ffn_up.weight", Some(12), false)), (Where::Cpu, "repeating-layers"));
        assert_eq!(o.resident(&tensor("blk.13.ffn_up.weight", Some(13), false)), (Where::Gpu, "repeating-layers"));
        assert_eq!(o.resident(&tensor("output.weight", None, true)), (Where::Gpu, "output-layer"));
        // Tied embeddings: the head is token_embd created as an output-layer tensor (llama-model-loader.cpp:1162-1168).
        let o0 = Offload::new(&opts(Some(0)), n).unwrap();
        assert_eq!(o0.resident(&tensor("token_embd.weight", None, true)), (Where::Cpu, "tied-output"));
        assert_eq!(o.resident(&tensor("token_embd.weight", None, true)), (Where::Gpu, "tied-output"));
    }

    /// ggml-backend.cpp:1107-1116 with ggml-cuda.cu:5739-5757 / ggml-vulkan-debug.cpp:766-779: a CPU-resident
    /// weight's MUL_MAT goes to the GPU when ne[1] >= 32 and op offload is on.
    #[test]
    fn op_offload_at_32_tokens_unless_switched_off() {
        let w = tensor("blk.0.attn_q.weight", Some(0), false);
        for backend in [GpuBackend::Cuda, GpuBackend::Hip, GpuBackend::Vulkan] {
            let o = Offload::new(&PlacementOptions { backend, ..opts(Some(0)) }, Some(22)).unwrap();
            assert_eq!((o.runs_on(&w, 31).runs_on, o.runs_on(&w, 31).rule), (Where::Cpu, "op-offload-small-batch"));
            assert_eq!((o.runs_on(&w, 32).runs_on, o.runs_on(&w, 32).rule), (Where::Gpu, "op-offload"));
            assert_eq!(o.runs_on(&w, 1).resident, Where::Cpu);
        }
        let off = Offload::new(&PlacementOptions { op_offload: false, ..opts(Some(0)) }, Some(22)).unwrap();
        assert_eq!((off.runs_on(&w, 512).runs_on, off.runs_on(&w, 512).rule), (Where::Cpu, "op-offload-off"));
        let env = Offload::new(&PlacementOptions { min_batch: Some(100), ..opts(Some(0)) }, Some(22)).unwrap();
        assert_eq!(env.runs_on(&w, 64).runs_on, Where::Cpu);
        let cpu_only = Offload::new(&PlacementOptions { gpu_device: false, ..opts(Some(99)) }, Some(22)).unwrap();
        assert_eq!(cpu_only.runs_on(&w, 512).rule, "no-gpu-device");
        // GPU-resident weights run on the GPU at one token.
        let all = Offload::new(&opts(None), Some(22)).unwrap();
        assert_eq!(all.runs_on(&w, 1).rule, "weight-on-gpu");
    }

    #[test]
    fn backends_parse_from_log_names() {
        assert_eq!(GpuBackend::parse("CUDA0 (NVIDIA H100 80GB HBM3)"), Some(GpuBackend::Cuda));
        assert_eq!(GpuBackend::parse("ROCm0"), Some(GpuBackend::Hip));
        assert_eq!(GpuBackend::parse("Vulkan0 (llvmpipe (LLVM 15.0.6, 256 bits))"), Some(GpuBackend::Vulkan));
        assert_eq!(GpuBackend::parse("CPU"), None);
        assert!(Offload::new(&opts(Some(3)), None).is_err());
    }

    #[test]
    fn vulkan_pipelines_fit_by_op_and_type() {
        let k = |name: &str| ObservedKernel {
            read_as: ReadAs::CudaKernel,
            name: name.into(),
            demangled: name.into(),
            shaders: Vec::new(),
            family: "other".into(),
            ggml_type: None,
            ncols: None,
            op: None,
            helper: false,
            launches: 3,
        };
        let vec = gpu_matmul(&k("mul_mat_vec_q4_k_f32_f32")).expect("a Vulkan vector matmul");
        assert_eq!((vec.vulkan_op, vec.ggml_type.as_deref()), (Some("MUL_MAT_VEC"), Some("Q4_K")));
        assert!(vec.fits("Q4_K", 1, MatmulOp::MulMat) && vec.fits("Q4_K", 8, MatmulOp::MulMat));
        assert!(!vec.fits("Q4_K", 9, MatmulOp::MulMat) && !vec.fits("Q6_K", 1, MatmulOp::MulMat));
        assert!(gpu_matmul(&k("rms_norm_f32")).is_none());
    }
}
