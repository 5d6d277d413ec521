//! Vulkan pipelines as backscope reads them from the Vulkan layer's traces (`crates/vklayer`): which ggml code
//! path a pipeline is (`data/vulkan_pipelines.toml`), which shader embedded in `libggml-vulkan.so` a `spirv:<hash>`
//! pipeline runs. How a command is run with the layer enabled is [`crate::observe::observers`]'s.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde::Deserialize;

use crate::trace::TraceFile;

pub mod capability;
pub mod counts;
pub mod dispatch_record;
pub mod profile;

pub const PIPELINES_FILE: &str = "data/vulkan_pipelines.toml";
/// The environment variable that makes ggml-vulkan name its pipelines (`vkSetDebugUtilsObjectNameEXT`).
pub const GGML_DEBUG_MARKERS: &str = "GGML_VK_DEBUG_MARKERS";

#[derive(Debug, Deserialize)]
struct RuleText {
    family: String,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    shader: Option<String>,
    #[serde(default)]
    op: Option<String>,
    #[serde(default)]
    helper: bool,
    #[serde(default)]
    dispatches: Option<Dispatches>,
    /// Where the rule comes from upstream; required so that a rule without one does not load.
    #[allow(dead_code)]
    source: String,
}

/// A fused group of graph nodes that GGML_VK_PERF_LOGGER names by its fusion name rather than its first node.
#[derive(Debug, Deserialize)]
struct FusionText {
    name: String,
    op: String,
    #[allow(dead_code)]
    source: String,
}

/// What ggml-vulkan's graph compute decides per node, as the dispatch accounting needs it.
#[derive(Debug, Deserialize)]
struct GraphText {
    mul_mat_id_vec_max_tokens: u64,
    mul_mat_id_vec_excluded_types: Vec<String>,
    #[allow(dead_code)]
    source: String,
}

#[derive(Debug, Deserialize)]
struct PipelinesText {
    types: Vec<String>,
    graph: GraphText,
    #[serde(default)]
    fusion: Vec<FusionText>,
    rule: Vec<RuleText>,
}

/// How many dispatches of a pipeline one graph node (a GGML_VK_PERF_LOGGER entry) of its op issues.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Dispatches {
    /// One per node: the node's main pipeline.
    #[default]
    Node,
    /// One per token of a MUL_MAT_ID node on the vector path (ids with at most
    /// [`Graph::mul_mat_id_vec_max_tokens`] rows): ggml_vk_mul_mat_vec_id_q_f16 loops over the tokens.
    Token,
    /// At most one per node: a helper (activation quantization, weight dequantization, split-k reduction), which
    /// ggml skips when the previous node left what it needs.
    Helper,
    /// Exactly one per MUL_MAT_ID node on the matrix path (more tokens than the vector path takes):
    /// count_experts.
    MatrixNode,
}

/// ggml-vulkan's per-node decisions that the dispatch accounting needs (`[graph]` of the data file).
#[derive(Debug)]
pub struct Graph {
    /// A MUL_MAT_ID node whose ids have at most this many rows (tokens) runs the per-token vector path.
    pub mul_mat_id_vec_max_tokens: u64,
    /// Expert weight types (as ggml_type_name spells them) that take the matrix path at any token count.
    pub mul_mat_id_vec_excluded_types: Vec<String>,
    fusions: Vec<(regex_lite::Regex, String)>,
}

impl Graph {
    /// The op a fused group named `fusion` by the perf logger counts as, when it is not its first node's.
    pub fn fusion_op(&self, fusion: &str) -> Option<&str> {
        self.fusions.iter().find(|(re, _)| re.is_match(fusion)).map(|(_, op)| op.as_str())
    }
}

/// One rule of `data/vulkan_pipelines.toml`, its patterns compiled.
#[derive(Debug)]
pub struct Rule {
    pub family: String,
    name: Option<regex_lite::Regex>,
    shader: Option<regex_lite::Regex>,
    /// The op, or `{OP}`: the name's `op` group, upper-cased (ggml's op and unary-op names are the pipeline name
    /// prefixes upper-cased).
    pub op: Option<String>,
    pub helper: bool,
    pub dispatches: Dispatches,
}

struct Pipelines {
    rules: Vec<Rule>,
    graph: Graph,
}

fn pipelines() -> &'static Pipelines {
    static PIPELINES: OnceLock<Pipelines> = OnceLock::new();
    PIPELINES.get_or_init(|| {
        // The file is part of the binary and checked by unit tests: a parse failure is a build defect.
        let text: PipelinesText =
            toml::from_str(include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/data/vulkan_pipelines.toml")))
                .expect("data/vulkan_pipelines.toml parses");
        let types = text.types.join("|");
        let compile = |p: &str| {
            regex_lite::Regex::new(&p.replace("{type}", &types))
                .unwrap_or_else(|e| panic!("data/vulkan_pipelines.toml: pattern {p}: {e}"))
        };
        let rules = text
            .rule
            .iter()
            .map(|r| Rule {
                family: r.family.clone(),
                name: r.name.as_deref().map(compile),
                shader: r.shader.as_deref().map(compile),
                op: r.op.clone(),
                helper: r.helper,
                dispatches: r.dispatches.unwrap_or(if r.helper { Dispatches::Helper } else { Dispatches::Node }),
            })
            .collect();
        let fusions = text.fusion.iter().map(|f| (compile(&f.name), f.op.clone())).collect();
        let graph = Graph {
            mul_mat_id_vec_max_tokens: text.graph.mul_mat_id_vec_max_tokens,
            mul_mat_id_vec_excluded_types: text.graph.mul_mat_id_vec_excluded_types,
            fusions,
        };
        Pipelines { rules, graph }
    })
}

/// The rules, in order.
pub fn rules() -> &'static [Rule] {
    &pipelines().rules
}

/// ggml-vulkan's per-node decisions (`[graph]` and `[[fusion]]` of the data file).
pub fn graph() -> &'static Graph {
    &pipelines().graph
}

/// Upper-cased op names built from pipeline names, interned (a handful: ggml has about 130 op names).
fn intern_op(op: String) -> &'static str {
    static OPS: std::sync::Mutex<BTreeSet<&'static str>> = std::sync::Mutex::new(BTreeSet::new());
    let mut ops = OPS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(known) = ops.get(op.as_str()) {
        return known;
    }
    let leaked: &'static str = Box::leak(op.into_boxed_str());
    ops.insert(leaked);
    leaked
}

/// What backscope knows about one Vulkan pipeline name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PipelineName {
    pub family: &'static str,
    /// The ggml op it computes, as GGML_VK_PERF_LOGGER names the node.
    pub op: Option<&'static str>,
    /// A dispatch a node issues besides its main pipeline.
    pub helper: bool,
    /// How many dispatches of it one node issues.
    pub dispatches: Dispatches,
    /// The ggml type of its weights or input (`Q4_K`), from the name.
    pub ggml_type: Option<&'static str>,
    /// Matmul tile and alignment, and the shader's variant (coopmat, subgroup), in words.
    pub variant: Option<String>,
}

/// The family of pipelines no rule matches.
pub const OTHER: &str = "other";

/// Classifies the pipeline `name` (a debug name, a shader name, or `spirv:<hash>`); `shader` is the embedded
/// shader its SPIR-V hash matched, if one did.
pub fn describe(name: &str, shader: Option<&str>) -> PipelineName {
    for rule in rules() {
        let captures = match &rule.name {
            Some(re) => match re.captures(name) {
                Some(c) => Some(c),
                None => continue,
            },
            None => None,
        };
        if let Some(re) = &rule.shader {
            if !shader.is_some_and(|s| re.is_match(s)) {
                continue;
            }
        }
        let group = |g: &str| captures.as_ref().and_then(|c| c.name(g)).map(|m| m.as_str());
        let ggml_type = group("type").and_then(gguf::GgmlType::from_name).and_then(|t| t.info()).map(|i| i.name);
        let mut variant = Vec::new();
        if let Some(tile) = group("tile") {
            variant.push(match tile {
                "s" | "m" | "l" => format!("tile {tile}"),
                // 11434 numbers the device's enabled tiles, smallest first (create_mm_pipelines).
                i => format!("tile #{i} of the enabled s/m/l"),
            });
        }
        if group("aligned").is_some() {
            variant.push("aligned".to_string());
        }
        if let Some(s) = shader {
            for (suffix, words) in [
                ("_cm2", "coopmat2"),
                ("_cm1", "coopmat"),
                ("_subgroup_no_shmem", "subgroup, no shared memory"),
                ("_subgroup", "subgroup"),
            ] {
                if s.ends_with(suffix) {
                    variant.push(words.to_string());
                    break;
                }
            }
        }
        let op = match rule.op.as_deref() {
            Some("{OP}") => group("op").map(|o| intern_op(o.to_ascii_uppercase())),
            op => op,
        };
        return PipelineName {
            family: rule.family.as_str(),
            op,
            helper: rule.helper,
            dispatches: rule.dispatches,
            ggml_type,
            variant: (!variant.is_empty()).then(|| variant.join(", ")),
        };
    }
    PipelineName {
        family: OTHER,
        op: None,
        helper: false,
        dispatches: Dispatches::Node,
        ggml_type: None,
        variant: None,
    }
}

/// The shaders that pipelines' SPIR-V hashes matched: `libggml-vulkan.so`'s embedded shaders, hashed as the
/// layer hashes modules (`trace_format::spirv::module_hash`). Built from the libraries the traces name (a
/// pipeline's `spirv_object`), each read once.
#[derive(Debug, Default)]
pub struct ShaderIndex {
    by_hash: HashMap<String, String>,
    /// Libraries read: path, and what came of it.
    pub libraries: Vec<(PathBuf, Library)>,
    /// The traces named more than [`MAX_LIBRARIES`] libraries; the others were not looked at.
    pub libraries_left_out: bool,
}

/// Libraries looked at for one index: a trace names the one libggml-vulkan its process loaded, a sweep's servers a
/// few builds; a trace naming thousands is not a program's (and each is a path to check).
pub const MAX_LIBRARIES: usize = 64;

/// What reading one library gave.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Library {
    /// This many embedded shaders.
    Shaders(usize),
    /// No symbol table (a stripped library): its shaders have no names.
    Stripped,
    /// It could not be read.
    Unreadable(String),
}

/// Largest library read for shaders (libggml-vulkan.so of llama.cpp 11434 is 29 MB).
const MAX_LIBRARY_BYTES: u64 = 1 << 30;

impl ShaderIndex {
    /// Reads the libraries `traces` name that are not read yet.
    pub fn add_traces<'a>(&mut self, traces: impl IntoIterator<Item = &'a TraceFile>) {
        let wanted: BTreeSet<PathBuf> = traces.into_iter().flat_map(|t| t.named_files()).map(PathBuf::from).collect();
        for path in wanted {
            self.add_library(&path);
        }
    }

    /// Reads `path` too, unless it was read already: a library the caller knows the pipelines came from (`predict
    /// --vulkan-lib`), for traces whose recorded library path does not exist on this machine (traces copied from
    /// another). A SPIR-V hash matches only the shader it was computed from, so a library that is not the traced one
    /// names nothing.
    pub fn add_library(&mut self, path: &Path) {
        if self.libraries.len() >= MAX_LIBRARIES {
            self.libraries_left_out |= !self.libraries.iter().any(|(p, _)| p == path);
            return;
        }
        if !self.libraries.iter().any(|(p, _)| p == path) {
            let outcome = self.read_library(path);
            self.libraries.push((path.to_path_buf(), outcome));
        }
    }

    fn read_library(&mut self, path: &Path) -> Library {
        // Mapped, within the command's budget: a trace may name any path (a device, a FIFO, a sparse file of any
        // size, many of them); the decoder reads the symbol table and the shaders, not the whole file.
        let mapped = match crate::host::inputs::ReadBudget::command().map(path, MAX_LIBRARY_BYTES) {
            Ok(m) => m,
            Err(e) => return Library::Unreadable(e.to_string()),
        };
        let shaders = binfmt::spirv::embedded_shaders(mapped.bytes());
        if let Some(at) = mapped.cut_at() {
            return Library::Unreadable(format!("cut short at byte {at} while it was read (the file changed)"));
        }
        match shaders {
            Ok(shaders) if shaders.is_empty() => Library::Stripped,
            Ok(shaders) => {
                for s in &shaders {
                    let hash = trace_format::spirv::hex(trace_format::spirv::module_hash(s.code));
                    let hash = String::from_utf8_lossy(&hash).into_owned();
                    // Two arrays with the same code (aliases) keep the first name.
                    self.by_hash.entry(hash).or_insert_with(|| s.name.to_string());
                }
                Library::Shaders(shaders.len())
            }
            Err(e) => Library::Unreadable(e.to_string()),
        }
    }

    /// The shader with SPIR-V hash `hash`.
    pub fn shader(&self, hash: &str) -> Option<&str> {
        self.by_hash.get(hash).map(String::as_str)
    }

    /// Renames the trace's `spirv:<hash>` pipelines after the shaders their hashes matched, so that pipelines
    /// running one shader are one row.
    pub fn name_pipelines(&self, trace: &mut TraceFile) {
        for k in trace.kernels.values_mut().filter(|k| k.api == "vulkan") {
            if let Some(shader) = k.name.strip_prefix("spirv:").and_then(|h| self.shader(h)) {
                k.name = shader.to_string();
            }
        }
    }

    /// The shaders behind the Vulkan pipelines of `traces`, by pipeline name (after [`ShaderIndex::name_pipelines`]).
    pub fn shaders_by_name<'a>(&self, traces: impl IntoIterator<Item = &'a TraceFile>) -> Shaders {
        let mut by_name: HashMap<String, Vec<String>> = HashMap::new();
        for k in traces.into_iter().flat_map(|t| t.kernels.values()).filter(|k| k.api == "vulkan") {
            if let Some(shader) = k.spirv_hash.as_deref().and_then(|h| self.shader(h)) {
                let list = by_name.entry(k.name.clone()).or_default();
                if !list.iter().any(|s| s == shader) {
                    list.push(shader.to_string());
                }
            }
        }
        for list in by_name.values_mut() {
            list.sort_unstable();
        }
        Shaders { by_name }
    }

    /// Pipelines still named `spirv:<hash>` in `traces`, and why: for the claim that says so.
    pub fn unnamed<'a>(&self, traces: impl IntoIterator<Item = &'a TraceFile>) -> usize {
        traces
            .into_iter()
            .flat_map(|t| t.kernels.values())
            .filter(|k| k.api == "vulkan" && k.name.starts_with("spirv:"))
            .count()
    }
}

/// The shaders behind Vulkan pipelines, by pipeline name: what [`describe`] is told about a row.
#[derive(Debug, Default)]
pub struct Shaders {
    by_name: HashMap<String, Vec<String>>,
}

impl Shaders {
    /// The shaders pipelines named `name` ran (several when pipelines share a name).
    pub fn of(&self, name: &str) -> &[String] {
        self.by_name.get(name).map(Vec::as_slice).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a trace names is opened through the floor: a FIFO is refused without waiting for a writer (a `sweep
    /// --trace` whose server writes such a trace used to hang), /dev/zero without reading it, and past
    /// [`MAX_LIBRARIES`] paths the rest are not looked at.
    #[test]
    fn the_index_refuses_fifos_and_devices_and_stops_looking_after_its_bound() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("libggml-vulkan.so");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid C string.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let mut index = ShaderIndex::default();
        index.add_library(&fifo);
        index.add_library(Path::new("/dev/zero"));
        let why = |i: usize| match &index.libraries[i].1 {
            Library::Unreadable(why) => why.clone(),
            other => panic!("{other:?}"),
        };
        assert!(why(0).contains("is a FIFO, not a regular file"), "{}", why(0));
        assert!(why(1).contains("/dev/zero is a character device"), "{}", why(1));
        for i in 0..MAX_LIBRARIES {
            index.add_library(&dir.path().join(format!("absent-{i}.so")));
        }
        assert_eq!(index.libraries.len(), MAX_LIBRARIES);
        assert!(index.libraries_left_out);
    }

    #[test]
    fn every_rule_compiles_and_names_a_source() {
        assert!(rules().len() > 20);
        let text: PipelinesText =
            toml::from_str(include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/data/vulkan_pipelines.toml"))).unwrap();
        assert!(text.rule.iter().all(|r| !r.source.is_empty() && (r.name.is_some() || r.shader.is_some())));
        // An op taken from the name needs the group it is taken from.
        for r in text.rule.iter().filter(|r| r.op.as_deref() == Some("{OP}")) {
            assert!(r.name.as_deref().is_some_and(|n| n.contains("(?P<op>")), "{:?}", r.name);
        }
        assert!(text.fusion.iter().all(|f| !f.source.is_empty()) && !text.graph.source.is_empty());
        for t in &text.types {
            assert!(gguf::GgmlType::from_name(t).is_some() || t == "q8_1", "type {t} is not a ggml type");
        }
    }

    /// Pipeline names ggml-vulkan 11434 gives (ggml-vulkan.cpp, ggml_vk_load_shaders), and shader names of its
    /// vulkan-shaders-gen, as the layer saw them on lavapipe.
    #[test]
    fn classifies_ggml_vulkan_names() {
        let cases = [
            ("mul_mat_vec_f16_f32_f32", None, "MMV", Some("MUL_MAT_VEC"), Some("F16")),
            ("mul_mat_vec_q4_k_q8_1_f32", None, "MMVQ", Some("MUL_MAT_VEC"), Some("Q4_K")),
            ("mul_mat_vec_id_q4_k_q8_1_f32", None, "MMVQ", Some("MUL_MAT_ID"), Some("Q4_K")),
            ("mul_mat_vec_q6_k_f32_f32_subgroup_no_shmem", None, "MMV", Some("MUL_MAT_VEC"), Some("Q6_K")),
            ("matmul_f16_aligned_2", None, "MM", Some("MUL_MAT"), Some("F16")),
            ("matmul_q4_k_f32_1", None, "MM", Some("MUL_MAT"), Some("Q4_K")),
            ("matmul_q4_0_q8_1_aligned_0", None, "MMQ", Some("MUL_MAT"), Some("Q4_0")),
            ("matmul_quant_f32_f16acc_aligned_0", None, "MM", Some("MUL_MAT"), None),
            ("matmul_f16_aligned_1", Some("matmul_f16_cm2"), "MM-coopmat2", Some("MUL_MAT"), None),
            ("matmul_f16_aligned_1", Some("matmul_f16_cm1"), "MM-coopmat", Some("MUL_MAT"), None),
            ("flash_attn_f32_f16_aligned", None, "FA", Some("FLASH_ATTN_EXT"), None),
            ("flash_attn_f32_f16_aligned_f16acc_cm2", None, "FA-coopmat2", Some("FLASH_ATTN_EXT"), None),
            ("fa_split_k_reduce", None, "FA-support", Some("FLASH_ATTN_EXT"), None),
            ("split_k_reduce", None, "MM-support", Some("MUL_MAT"), None),
            ("quantize_q8_1_x4_subgroup", None, "quantize", Some("MUL_MAT"), None),
            ("dequant_q4_k", None, "dequantize", Some("MUL_MAT"), Some("Q4_K")),
            ("rms_norm_mul_f32", None, "norm", Some("RMS_NORM"), None),
            ("rms_norm_mul_rope_f32_f16", None, "norm", Some("RMS_NORM"), None),
            ("rope_norm_f32_f16", None, "RoPE", Some("ROPE"), None),
            ("soft_max_f32_wg512", None, "softmax", Some("SOFT_MAX"), None),
            ("add_rms_f32_f32_f32_norepeat", None, "elementwise", Some("ADD"), None),
            ("swiglu_f32", None, "elementwise", Some("GLU"), None),
            ("get_rows_q4_k_f32", None, "copy", Some("GET_ROWS"), Some("Q4_K")),
            ("set_rows_f32_f16_i64", None, "copy", Some("SET_ROWS"), None),
            ("spirv:0123456789abcdef", None, OTHER, None, None),
            // Mixture of experts (ggml_vk_mul_mat_id_q_f16, ggml_vk_mul_mat_vec_id_q_f16, ggml_vk_topk_moe).
            ("matmul_id_subgroup_quant_f32_f16acc_aligned_1", None, "MM", Some("MUL_MAT_ID"), None),
            ("matmul_id_quant_f32_f16acc_aligned_1", None, "MM", Some("MUL_MAT_ID"), None),
            ("matmul_id_q4_k_q8_1_1", None, "MMQ", Some("MUL_MAT_ID"), Some("Q4_K")),
            (
                "matmul_id_subgroup_f16_aligned_0",
                Some("matmul_id_subgroup_f16_cm1"),
                "MM-coopmat",
                Some("MUL_MAT_ID"),
                None,
            ),
            ("count_experts", None, "MoE-routing", Some("MUL_MAT_ID"), None),
            ("topk_moe_f32_3", None, "MoE-routing", Some("TOPK_MOE"), None),
            // Ops from the name: unary ops as GGML_VK_PERF_LOGGER names them (ggml_unary_op_name), plain ops.
            ("silu_f32", None, "elementwise", Some("SILU"), None),
            ("gelu_erf_f16", None, "elementwise", Some("GELU_ERF"), None),
            ("silu_mul_b_f32_norepeat", None, "elementwise", Some("SILU"), None),
            ("sqrt_f32", None, "elementwise", Some("SQRT"), None),
            ("silu_back_f32", None, "elementwise", Some("SILU_BACK"), None),
            ("pad_reflect_1d_f32", None, "copy", Some("PAD_REFLECT_1D"), None),
            ("conv2d_dw_whcn_f32", None, "conv", Some("CONV_2D_DW"), None),
            ("argsort_large_f32_2", None, "sort", Some("ARGSORT"), None),
        ];
        for (name, shader, family, op, ty) in cases {
            let d = describe(name, shader);
            assert_eq!((d.family, d.op, d.ggml_type), (family, op, ty), "{name} ({shader:?})");
        }
        assert_eq!(
            describe("matmul_f16_aligned_2", None).variant.as_deref(),
            Some("tile #2 of the enabled s/m/l, aligned")
        );
        assert_eq!(describe("matmul_f32_f32_l", None).variant.as_deref(), Some("tile l"));
        assert_eq!(
            describe("matmul_quant_f32_f16acc_aligned_0", Some("matmul_quant_f32_f16acc")).variant.as_deref(),
            Some("tile #0 of the enabled s/m/l, aligned")
        );
        assert!(describe("fa_split_k_reduce", None).helper && !describe("flash_attn_f32_f16", None).helper);
        let dispatches = |n: &str| describe(n, None).dispatches;
        assert_eq!(dispatches("mul_mat_vec_id_q4_k_f32"), Dispatches::Token);
        assert_eq!(dispatches("count_experts"), Dispatches::MatrixNode);
        assert_eq!(dispatches("quantize_q8_1_x4"), Dispatches::Helper);
        assert_eq!(dispatches("matmul_id_quant_f32_aligned_0"), Dispatches::Node);
        assert_eq!(graph().fusion_op("TOPK_MOE_LATE_SOFTMAX"), Some("TOPK_MOE"));
        assert_eq!(graph().fusion_op("RMS_NORM_MUL"), None, "a fused norm is its first node's");
    }
}
