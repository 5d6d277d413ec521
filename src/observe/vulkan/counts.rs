//! What GGML_VK_PERF_LOGGER counts against what the Vulkan layer counts, and the accounting between them.
//!
//! The perf logger (ggml-vulkan.cpp, ggml_backend_vk_graph_compute and vk_perf_logger) writes one timestamp per
//! graph node it enqueues, a fused group of nodes counting once, and prints per distinct name
//! `NAME: COUNT x AVG us = TOTAL us`, NAME being `[FUSION ]NODE…` (get_node_fusion_name: the node's op, `_VEC` for a
//! MUL_MAT with at most mul_mat_vec_max_cols columns or a MUL_MAT_ID with one token, its shape; a unary node by its
//! unary op). The layer counts dispatches (`vkCmdDispatch*`). For dense models the two agree per op: each node
//! runs its main pipeline once (helpers apart). Mixture-of-experts nodes do not:
//! - a MUL_MAT_ID node whose ids have at most `mul_mat_id_vec_max_tokens` rows runs `mul_mat_vec_id_*` once per
//!   token (ggml_vk_mul_mat_vec_id_q_f16), so an 8-token prompt gives 8 dispatches per node;
//! - a MUL_MAT_ID node with more tokens runs `count_experts` and then one `matmul_id_*` (ggml_vk_mul_mat_id_q_f16);
//! - a fused `TOPK_MOE_*` group is named by the perf logger after its first node (SOFT_MAX, ARGSORT or a unary
//!   op, depending on the fusion mode) but runs one `topk_moe_*` dispatch.
//!
//! The data file says which case each pipeline is (`dispatches`) and which fusions count as their own op
//! (`[[fusion]]`); this module turns both sides into the expected and the observed dispatches per op.

use std::collections::BTreeMap;

use super::{describe, graph, Dispatches};

/// One distinct name of the perf logger's output, its counts summed over every block printed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PerfEntry {
    /// The whole name as printed (`MUL_MAT_ID q4_K m=512 n=2 k=256 n_expert=8 batch=8`).
    pub name: String,
    /// The fusion name, when the node is a fused group (`RMS_NORM_MUL`).
    pub fusion: Option<String>,
    /// The op it counts as against pipelines' `op`: the node's op with MUL_MAT_ID_VEC read as MUL_MAT_ID (the same
    /// pipelines run both), or the fusion's op where the data file gives one.
    pub op: String,
    /// MUL_MAT_ID: the tokens (ids rows) of the node, its `batch=` (1 without); else 1.
    pub tokens: u64,
    /// MUL_MAT, MUL_MAT_ID: the weights' ggml type as printed (`q4_K`, `bf16`).
    pub weight_type: Option<String>,
    /// Nodes of this name.
    pub count: u64,
}

/// Longest perf logger line read; longer lines are not its.
const MAX_LINE: usize = 4096;

fn op_token(token: &str) -> Option<&str> {
    let op = token.split('(').next().unwrap_or("");
    (!op.is_empty() && op.bytes().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == b'_')).then_some(op)
}

/// The perf logger's entries in `text` (other lines, such as llama-bench's, are skipped), per distinct name.
pub fn parse_perf_logger(text: &str) -> Vec<PerfEntry> {
    let mut by_name: BTreeMap<&str, u64> = BTreeMap::new();
    for line in text.lines().filter(|l| l.len() <= MAX_LINE) {
        let Some((name, rest)) = line.split_once(": ") else { continue };
        let Some(count) = rest.split_once(" x ").and_then(|(c, _)| c.parse::<u64>().ok()) else { continue };
        if name.split(' ').next().and_then(op_token).is_some() {
            let n = by_name.entry(name).or_default();
            *n = n.saturating_add(count);
        }
    }
    by_name.into_iter().map(|(name, count)| entry(name, count)).collect()
}

fn entry(name: &str, count: u64) -> PerfEntry {
    let tokens: Vec<&str> = name.split(' ').collect();
    let first = tokens.first().and_then(|t| op_token(t)).unwrap_or_default();
    // A fused group is `FUSION NODE…`: the node is the second token when that is an op name too.
    let (fusion, node) = match tokens.get(1).and_then(|t| op_token(t)) {
        Some(node) => (Some(first), node),
        None => (None, first),
    };
    let fused_op = fusion.and_then(|f| graph().fusion_op(f));
    let op = match (fused_op, node) {
        (Some(op), _) => op,
        (None, "MUL_MAT_ID_VEC") => "MUL_MAT_ID",
        (None, node) => node,
    };
    let batch = name.split(' ').find_map(|t| t.strip_prefix("batch=")?.parse::<u64>().ok());
    // `[FUSION ]MUL_MAT… TYPE m=…`: the token after the node's op.
    let weight_type = node
        .starts_with("MUL_MAT")
        .then(|| tokens.get(usize::from(fusion.is_some()) + 1))
        .flatten()
        .filter(|t| !t.contains('='))
        .map(|t| t.to_string());
    PerfEntry {
        name: name.to_string(),
        fusion: fusion.map(str::to_string),
        op: op.to_string(),
        tokens: if op == "MUL_MAT_ID" { batch.unwrap_or(1) } else { 1 },
        weight_type,
        count,
    }
}

/// Nodes and dispatches of one op, both sides in the terms of [`Dispatches`].
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct OpAccount {
    /// Perf logger entries (graph nodes, a fused group once).
    pub nodes: u64,
    /// Of those, MUL_MAT_ID nodes on the per-token vector path, and their tokens summed.
    pub vector_nodes: u64,
    pub vector_tokens: u64,
    /// The layer's dispatches of the op's main pipelines (one per node; for MUL_MAT_ID, one per matrix-path node).
    pub node_dispatches: u64,
    /// The layer's per-token dispatches (`mul_mat_vec_id_*`).
    pub token_dispatches: u64,
    /// The layer's once-per-matrix-node dispatches (`count_experts`).
    pub matrix_node_dispatches: u64,
    /// The layer's helper dispatches (at most one per node).
    pub helper_dispatches: u64,
    /// The nodes that may issue them: the op's own, or for matmul helpers every matmul node.
    pub helper_bound: u64,
}

/// The ops whose nodes issue the matmul helpers (quantize_q8_1, dequant, split_k_reduce, all `op = "MUL_MAT"` in
/// the data file): ggml_vk_mul_mat_q_f16, ggml_vk_mul_mat_vec_q_f16, ggml_vk_mul_mat_id_q_f16 and
/// ggml_vk_mul_mat_vec_id_q_f16 each quantize or dequantize their inputs (ggml-vulkan.cpp:7556, :7833).
const MATMUL_OPS: [&str; 3] = ["MUL_MAT", "MUL_MAT_VEC", "MUL_MAT_ID"];

impl OpAccount {
    /// Nodes not on the per-token path: each runs one main dispatch.
    pub fn expected_node_dispatches(&self) -> u64 {
        self.nodes - self.vector_nodes
    }

    /// Whether the layer's dispatches are what the nodes issue.
    pub fn equal(&self) -> bool {
        self.node_dispatches == self.expected_node_dispatches()
            && self.token_dispatches == self.vector_tokens
            && (self.matrix_node_dispatches == 0 || self.matrix_node_dispatches == self.expected_node_dispatches())
            && self.helper_dispatches <= self.helper_bound
    }
}

/// Both sides per op, and the pipelines without an op.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Accounting {
    pub ops: BTreeMap<String, OpAccount>,
    /// Pipelines (name, dispatches) the data file gives no op: they cannot be accounted for.
    pub unmapped: Vec<(String, u64)>,
}

/// Accounts the perf logger's `entries` against the layer's `dispatches` (pipeline name, dispatches) of the same
/// run.
pub fn account<'a>(entries: &[PerfEntry], dispatches: impl IntoIterator<Item = (&'a str, u64)>) -> Accounting {
    let g = graph();
    let excluded = |t: &Option<String>| t.as_ref().is_some_and(|t| g.mul_mat_id_vec_excluded_types.contains(t));
    let mut acc = Accounting::default();
    for e in entries {
        let a = acc.ops.entry(e.op.clone()).or_default();
        // Counts come from files: a hostile one saturates rather than overflows.
        a.nodes = a.nodes.saturating_add(e.count);
        if e.op == "MUL_MAT_ID" && e.tokens <= g.mul_mat_id_vec_max_tokens && !excluded(&e.weight_type) {
            a.vector_nodes = a.vector_nodes.saturating_add(e.count);
            a.vector_tokens = a.vector_tokens.saturating_add(e.count.saturating_mul(e.tokens));
        }
    }
    for (name, n) in dispatches {
        let d = describe(name, None);
        let Some(op) = d.op else {
            acc.unmapped.push((name.to_string(), n));
            continue;
        };
        let a = acc.ops.entry(op.to_string()).or_default();
        let into = match d.dispatches {
            Dispatches::Node => &mut a.node_dispatches,
            Dispatches::Token => &mut a.token_dispatches,
            Dispatches::MatrixNode => &mut a.matrix_node_dispatches,
            Dispatches::Helper => &mut a.helper_dispatches,
        };
        *into = into.saturating_add(n);
    }
    let matmul_nodes = MATMUL_OPS.iter().filter_map(|op| acc.ops.get(*op)).fold(0u64, |n, a| n.saturating_add(a.nodes));
    for (op, a) in acc.ops.iter_mut() {
        a.helper_bound = if op == "MUL_MAT" { matmul_nodes } else { a.nodes };
    }
    acc
}

impl Accounting {
    pub fn equal(&self) -> bool {
        self.unmapped.is_empty() && self.ops.values().all(OpAccount::equal)
    }

    /// One line: `EQUAL after accounting: N per-token dispatches for M nodes, …` or what differs.
    pub fn headline(&self) -> String {
        let sum = |f: fn(&OpAccount) -> u64| self.ops.values().map(f).sum::<u64>();
        let nodes = sum(|a| a.nodes);
        let dispatches =
            sum(|a| a.node_dispatches + a.token_dispatches + a.matrix_node_dispatches + a.helper_dispatches);
        let detail = format!(
            "{nodes} perf-logger nodes, {dispatches} layer dispatches: {} per-token dispatches for {} MUL_MAT_ID \
             nodes, {} count_experts for the matrix-path ones, {} helper dispatches",
            sum(|a| a.token_dispatches),
            sum(|a| a.vector_nodes),
            sum(|a| a.matrix_node_dispatches),
            sum(|a| a.helper_dispatches),
        );
        if self.equal() {
            return format!("EQUAL after accounting: {detail}");
        }
        let differing: Vec<&str> = self.ops.iter().filter(|(_, a)| !a.equal()).map(|(op, _)| op.as_str()).collect();
        let unmapped: Vec<&str> = self.unmapped.iter().map(|(n, _)| n.as_str()).collect();
        format!(
            "DIFFERENT after accounting ({detail}): ops {}{}",
            differing.join(", "),
            if unmapped.is_empty() { String::new() } else { format!("; no op for {}", unmapped.join(", ")) }
        )
    }

    /// A line per op: nodes, what they should dispatch, what the layer saw.
    pub fn lines(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (op, a) in &self.ops {
            let mut line = format!(
                "{op:22} nodes {:6}   main dispatches {:6} (expected {:6})",
                a.nodes,
                a.node_dispatches,
                a.expected_node_dispatches()
            );
            if a.vector_nodes > 0 || a.token_dispatches > 0 {
                line += &format!(
                    "   per-token {:6} (expected {} for {} vector-path nodes)",
                    a.token_dispatches, a.vector_tokens, a.vector_nodes
                );
            }
            if a.matrix_node_dispatches > 0 {
                line += &format!("   count_experts {}", a.matrix_node_dispatches);
            }
            if a.helper_dispatches > 0 {
                line += &format!("   + {} helper (at most {})", a.helper_dispatches, a.helper_bound);
            }
            if !a.equal() {
                line += "   <-- differs";
            }
            out.push(line);
        }
        for (name, n) in &self.unmapped {
            out.push(format!("{name}: {n} dispatches, no op in data/vulkan_pipelines.toml"));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lines as vk_perf_logger::print_timings writes them (the format of ggml-vulkan.cpp:16419-16420, names of
    /// get_node_fusion_name), from a real 8-token prompt of a 2-layer, 8-expert model on lavapipe.
    const PERF_8_TOKENS: &str = "\
----------------
Vulkan Timings:
ADD: 6 x 80.909 us = 485.454 us
GLU: 2 x 133.393 us = 266.787 us
MUL: 1 x 151.506 us = 151.506 us
MUL_MAT_ID q4_K m=256 n=2 k=512 n_expert=8 batch=8: 1 x 5003.48 us = 5003.48 us (0.837458 GFLOPS/s)
MUL_MAT_ID q4_K m=512 n=2 k=256 n_expert=8 batch=8: 2 x 8896.6 us = 17793.2 us (0.470529 GFLOPS/s)
MUL_MAT_ID_MUL MUL_MAT_ID_VEC q6_K m=256 n=2 k=512 n_expert=8: 1 x 1586.24 us = 1586.24 us (0.330201 GFLOPS/s)
MUL_MAT_ID_VEC q4_K m=512 n=2 k=256 n_expert=8: 2 x 1071.13 us = 2142.26 us (0.488517 GFLOPS/s)
RMS_NORM_MUL RMS_NORM(256,8,1,1): 3 x 6960.65 us = 20882 us
TOPK_MOE_EARLY_SOFTMAX_NORM SOFT_MAX: 2 x 65.367 us = 130.734 us
Total time: 239954 us.
";

    #[test]
    fn perf_logger_entries_name_their_node_fusion_and_tokens() {
        let e = parse_perf_logger(PERF_8_TOKENS);
        let find = |prefix: &str| e.iter().find(|x| x.name.starts_with(prefix)).unwrap();
        assert_eq!(e.len(), 9, "{e:#?}");
        let id8 = find("MUL_MAT_ID q4_K m=512");
        assert_eq!((id8.op.as_str(), id8.tokens, id8.count, id8.fusion.as_deref()), ("MUL_MAT_ID", 8, 2, None));
        let fused = find("MUL_MAT_ID_MUL");
        assert_eq!(
            (fused.op.as_str(), fused.tokens, fused.fusion.as_deref()),
            ("MUL_MAT_ID", 1, Some("MUL_MAT_ID_MUL"))
        );
        assert_eq!(find("RMS_NORM_MUL").op, "RMS_NORM");
        assert_eq!((id8.weight_type.as_deref(), fused.weight_type.as_deref()), (Some("q4_K"), Some("q6_K")));
        // The fused top-k group counts as its own op, not as the SOFT_MAX it is named after.
        assert_eq!(find("TOPK_MOE").op, "TOPK_MOE");
        assert!(!e.iter().any(|x| x.name.starts_with("Total")));
    }

    #[test]
    fn moe_dispatches_equal_nodes_after_accounting() {
        let entries = parse_perf_logger(PERF_8_TOKENS);
        // What the layer saw for that block: 3 nodes × 8 tokens + 3 one-token nodes of mul_mat_vec_id.
        let layer = [
            ("mul_mat_vec_id_q4_k_f32", 26),
            ("mul_mat_vec_id_q6_k_f32", 1),
            ("add_f32_f32_f32_norepeat", 4),
            ("add_rms_f32_f32_f32_norepeat", 2),
            ("swiglu_f32", 2),
            ("mul_f32_f32_f32", 1),
            ("rms_norm_mul_f32", 3),
            ("topk_moe_f32_3", 2),
        ];
        let acc = account(&entries, layer);
        assert!(acc.equal(), "{}\n{}", acc.headline(), acc.lines().join("\n"));
        let id = &acc.ops["MUL_MAT_ID"];
        assert_eq!((id.nodes, id.vector_nodes, id.vector_tokens, id.token_dispatches), (6, 6, 27, 27));
        assert!(acc.headline().starts_with(
            "EQUAL after accounting: 20 perf-logger nodes, 41 layer dispatches: 27 \
                                            per-token dispatches for 6 MUL_MAT_ID nodes"
        ));
        // One per-token dispatch short, or a pipeline without an op, is a difference.
        let short = account(&entries, layer.iter().map(|&(n, c)| (n, if c == 26 { 25 } else { c })));
        assert!(!short.equal() && short.headline().contains("ops MUL_MAT_ID"), "{}", short.headline());
        let unknown = account(&entries, layer.iter().copied().chain([("spirv:00ff", 1)]));
        assert!(!unknown.equal() && unknown.headline().contains("no op for spirv:00ff"));
    }

    #[test]
    fn hostile_counts_saturate() {
        let entries = parse_perf_logger(&format!(
            "MUL_MAT_ID q4_K m=1 n=2 k=3 n_expert=8 batch=8: {0} x 1 us = 1 us\nMUL_MAT_ID q4_K m=1 n=2 k=3 \
             n_expert=8 batch=7: {0} x 1 us = 1 us\n",
            u64::MAX
        ));
        let acc = account(&entries, [("mul_mat_vec_id_q4_k_f32", u64::MAX), ("mul_mat_vec_id_q6_k_f32", u64::MAX)]);
        assert_eq!(acc.ops["MUL_MAT_ID"].vector_tokens, u64::MAX);
        assert!(acc.headline().contains(&u64::MAX.to_string()));
    }

    #[test]
    fn matrix_path_nodes_run_count_experts_once_each() {
        // 64 tokens: above mul_mat_id_vec_max_tokens, every MUL_MAT_ID node takes the matrix path.
        let entries = parse_perf_logger(
            "MUL_MAT_ID q4_K m=512 n=2 k=256 n_expert=8 batch=64: 4 x 1 us = 4 us\n\
             MUL_MAT_ID q4_K m=256 n=2 k=512 n_expert=8 batch=64: 2 x 1 us = 2 us\n",
        );
        let layer = [("matmul_id_quant_f32_f16acc_aligned_1", 6), ("count_experts", 6)];
        assert!(account(&entries, layer).equal());
        let missing = account(&entries, [("matmul_id_quant_f32_f16acc_aligned_1", 6), ("count_experts", 5)]);
        assert!(!missing.equal());
        // Matmul helpers: at most one per matmul node, MUL_MAT_ID ones included.
        let helped = account(&entries, layer.iter().copied().chain([("quantize_q8_1_x4", 6)]));
        assert_eq!((helped.ops["MUL_MAT"].helper_dispatches, helped.ops["MUL_MAT"].helper_bound), (6, 6));
        assert!(helped.equal());
        assert!(!account(&entries, layer.iter().copied().chain([("quantize_q8_1_x4", 7)])).equal());
        // BF16 experts take the matrix path even for one token (ggml_vk_use_mul_mat_vec_id).
        let bf16 = parse_perf_logger("MUL_MAT_ID_VEC bf16 m=512 n=2 k=256 n_expert=8: 3 x 1 us = 3 us\n");
        assert!(account(&bf16, [("matmul_id_bf16_0", 3), ("count_experts", 3)]).equal());
    }
}
