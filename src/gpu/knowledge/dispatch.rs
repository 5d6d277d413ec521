//! ggml's kernel selection for matrix multiplications and flash attention, per ggml version, as data
//! (`data/ggml_dispatch_*.toml`) plus the one thing that is code here: the order in which ggml consults its
//! predicates (`ggml_cuda_mul_mat`, `ggml_cuda_mul_mat_id`).
//!
//! Each predicate (`should_use_mmvq`, `should_use_mmq`, …) is an ordered rule table: the first rule whose
//! condition holds decides, as the `if (…) return …;` chain it restates does. Conditions are evaluated in
//! three-valued logic: an input backscope does not have (a weight's row length when only `--type` was given)
//! makes a condition unknown, and a table then decides only if both outcomes of that condition lead to the same
//! answer; otherwise the prediction says it is undecided and why.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use serde::Serialize;

pub mod rules;

use rules::{Dispatch, Named, Rule, Vendor, When};

/// The device as ggml sees it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Device {
    /// `gfx1201`, `sm_86`.
    pub label: String,
    pub vendor: Vendor,
    /// ggml's compute capability number (100*major+10*minor, or 0x1000000 + the gfx digits).
    pub cc: u64,
    pub warp_size: u64,
    pub smem_per_block: u64,
}

/// One matrix multiplication: the weight (src0) against `ne11` activation columns. Every fact a rule can read
/// is a field, so equal queries get equal predictions (`predict` memoises on it).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct MatmulQuery {
    pub weight_type: String,
    pub quantized: bool,
    /// Bytes per element of float types (F32 4, F16/BF16 2); 0 for quantized types.
    pub type_size: u64,
    /// Row length (K, src0->ne[0]); `None` when unknown.
    pub ne00: Option<u64>,
    /// Rows (N, src0->ne[1]).
    pub ne01: Option<u64>,
    /// Experts for MUL_MAT_ID (src0->ne[2]); 0 for a plain MUL_MAT.
    pub experts: u64,
    /// Columns: tokens in the ubatch that reach this weight.
    pub ne11: u64,
    pub mul_mat_id: bool,
}

/// One FLASH_ATTN_EXT node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct AttentionQuery {
    pub head_dim: u64,
    pub dv: u64,
    pub gqa: u64,
    pub kv_type: String,
    pub kv_quantized: bool,
    pub kv_len: u64,
    /// Query rows (Q->ne[1]): tokens in the ubatch.
    pub tokens: u64,
}

/// One rule consulted on the way to a decision.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Check {
    /// `mmvq`, `mmq`, …
    pub table: &'static str,
    pub rule: String,
    /// Whether the rule's condition held; `None`: unknown (a missing input).
    pub held: Option<bool>,
    /// The inputs the condition read, with their values.
    pub inputs: String,
    /// What the rule decided, when it decided.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decided: Option<String>,
    pub source: String,
}

/// A rule by id with its citation, for reports.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RuleRef {
    pub version: String,
    pub table: String,
    pub id: String,
    pub source: String,
}

impl RuleRef {
    /// The data file the rule lives in, for evidence sources.
    pub fn file(&self) -> String {
        super::dispatch_files::dispatch_file(&self.version).unwrap_or("data/ggml_dispatch_*.toml").to_string()
    }
}

/// A decision of one table.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Decision {
    Use(bool),
    Kernel(String),
    Compute(String),
    Undecided(String),
}

impl Decision {
    fn text(&self) -> String {
        match self {
            Decision::Use(b) => if *b { "yes" } else { "no" }.to_string(),
            Decision::Kernel(k) => k.clone(),
            Decision::Compute(c) => format!("compute {c}"),
            Decision::Undecided(why) => format!("undecided: {why}"),
        }
    }
}

/// Result of a table, with the rule that decided.
#[derive(Clone, Debug)]
struct Outcome {
    decision: Decision,
    rule: Option<RuleRef>,
}

/// The predicted kernel family of one matmul and how it was reached.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct MatmulPrediction {
    /// `MMVQ`, `MMQ`, `MMVF`, `MMF`, `BLAS` (dequantize/convert + vendor GEMM) or `MMID-loop` (MUL_MAT_ID's
    /// per-expert fallback); `None` when undecided.
    pub family: Option<String>,
    /// The rule that decided (for BLAS: the last predicate's rule that said no).
    pub rule: Option<RuleRef>,
    /// For BLAS: the compute type the weights are converted to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub blas_compute: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub undecided: Option<String>,
    pub path: Vec<Check>,
}

/// The predicted flash-attention kernel.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct AttentionPrediction {
    /// `FA-vec`, `FA-tile`, `FA-mma`, `FA-wmma`; `None`: no kernel supports the shape (FA is not offered) or
    /// undecided.
    pub family: Option<String>,
    pub rule: Option<RuleRef>,
    pub gqa_eff: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub undecided: Option<String>,
    pub path: Vec<Check>,
}

/// How deep nested class/feature references may go (the data files use two levels).
const MAX_DEPTH: u32 = 8;
/// Unknown conditions explored per table before giving up (each doubles the work).
const MAX_UNKNOWN_BRANCHES: u32 = 6;

/// Inputs conditions read; `None`: not known for this query.
#[derive(Clone, Debug, Default)]
struct Facts<'q> {
    weight_type: Option<&'q str>,
    quantized: Option<bool>,
    type_size: Option<u64>,
    ne00: Option<u64>,
    ne01: Option<u64>,
    src0_small: Option<bool>,
    ne11: Option<u64>,
    experts: Option<u64>,
    mul_mat_id: Option<bool>,
    warp_size: Option<u64>,
    head_dim: Option<u64>,
    dv: Option<u64>,
    kv_type: Option<&'q str>,
    kv_quantized: Option<bool>,
    gqa: Option<u64>,
    kv_len: Option<u64>,
    gqa_eff: Option<u64>,
}

/// AND in three-valued logic.
fn and(terms: impl IntoIterator<Item = Option<bool>>) -> Option<bool> {
    let mut unknown = false;
    for t in terms {
        match t {
            Some(false) => return Some(false),
            None => unknown = true,
            Some(true) => {}
        }
    }
    if unknown {
        None
    } else {
        Some(true)
    }
}

fn tri(v: Option<bool>) -> &'static str {
    match v {
        Some(true) => "✓",
        Some(false) => "✗",
        None => "?",
    }
}

/// A predicate's own value, as distinct from whether a condition on it holds (✓/✗).
fn yes_no(v: Option<bool>) -> &'static str {
    match v {
        Some(true) => "yes",
        Some(false) => "no",
        None => "unknown",
    }
}

fn opt<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map(|v| v.to_string()).unwrap_or_else(|| "unknown".into())
}

/// Evaluation state: the version, the device and the build flags that are set.
pub struct Evaluator<'a> {
    pub dispatch: &'a Dispatch,
    pub device: &'a Device,
    pub flags: BTreeSet<String>,
    shapes: ShapeClasses,
}

/// What the rules of one version can tell apart in a weight's row length (ne00) and row count (ne01), so that
/// weights that differ only in what no rule reads share one evaluation ([`Evaluator::matmul_key`]). Derived from
/// the conditions themselves: ne00 is read only modulo (`ne00_even`, `ne00_fits_warp`: a divisor of
/// 4 × warp size), ne01 modulo `ne01_multiple_of` and against `ne01_gt` and `src0_small`'s 512.
#[derive(Clone, Copy, Debug)]
struct ShapeClasses {
    /// A multiple of every ne00 divisor a rule can test; 0: keep ne00 as it is.
    ne00_modulus: u64,
    /// The largest ne01 bound a rule compares with.
    ne01_bound: u64,
    /// A multiple of every `ne01_multiple_of`; 0: keep ne01 as it is.
    ne01_modulus: u64,
}

fn lcm(a: u64, b: u64) -> Option<u64> {
    fn gcd(a: u64, b: u64) -> u64 {
        if b == 0 {
            a
        } else {
            gcd(b, a % b)
        }
    }
    match (a, b) {
        (0, _) | (_, 0) => Some(0),
        _ => (a / gcd(a, b)).checked_mul(b),
    }
}

impl ShapeClasses {
    fn of(dispatch: &Dispatch, device: &Device) -> ShapeClasses {
        fn walk(w: &When, bounds: &mut Vec<u64>, moduli: &mut Vec<u64>) {
            bounds.extend(w.ne01_gt);
            moduli.extend(w.ne01_multiple_of);
            w.any.iter().for_each(|a| walk(a, bounds, moduli));
            if let Some(n) = &w.not {
                walk(n, bounds, moduli);
            }
        }
        // src0_small reads ne01 <= 512 (matmul_facts).
        let (mut bounds, mut moduli) = (vec![512], Vec::new());
        let rules = dispatch.tables().into_iter().flat_map(|(_, rules)| rules.iter());
        for r in rules {
            walk(&r.when, &mut bounds, &mut moduli);
            if let Some(w) = &r.then.use_if {
                walk(w, &mut bounds, &mut moduli);
            }
        }
        for n in dispatch.class.iter().chain(&dispatch.feature) {
            walk(&n.when, &mut bounds, &mut moduli);
        }
        // ne00_fits_warp's step is warp × (4 / type_size), warp being the device's or 32 (MUL_MAT_ID); ne00_even's 2.
        let ne00_modulus = [2, 4 * 32, 4 * device.warp_size].into_iter().try_fold(1, lcm).unwrap_or(0);
        // Moduli beyond 2^20 would not shrink anything worth it; a zero modulus would test nothing.
        let ne01_modulus = moduli.into_iter().try_fold(1, lcm).filter(|&m| m <= 1 << 20).unwrap_or(0);
        ShapeClasses { ne00_modulus, ne01_bound: bounds.into_iter().max().unwrap_or(0), ne01_modulus }
    }
}

impl<'a> Evaluator<'a> {
    /// Flags at their defaults plus `set` (flag names the caller wants on).
    pub fn new(dispatch: &'a Dispatch, device: &'a Device, set: &[String]) -> Self {
        let mut flags: BTreeSet<String> =
            dispatch.build_flag.iter().filter(|f| f.default).map(|f| f.name.clone()).collect();
        flags.extend(set.iter().cloned());
        Evaluator { dispatch, device, flags, shapes: ShapeClasses::of(dispatch, device) }
    }

    /// A query that every rule of this version answers as it answers `q`, with ne00 and ne01 reduced to the
    /// smallest representatives of what the rules can tell apart in them ([`ShapeClasses`]): the memo key of
    /// `predict`, where a model's tensors differ in shape but not in path. Only the decision paths (`explain`)
    /// show the values themselves, so a caller that keeps them must key on `q` itself.
    pub fn matmul_key(&self, q: &MatmulQuery) -> MatmulQuery {
        let ShapeClasses { ne00_modulus, ne01_bound, ne01_modulus } = self.shapes;
        // Congruent to v modulo m and above `above`: the smallest such value, when v itself is larger.
        let reduce = |v: u64, m: u64, above: u64| -> u64 {
            match above.checked_add(1) {
                Some(base) if m > 0 && v > base => base + (v - base) % m,
                _ => v,
            }
        };
        let mut key = q.clone();
        key.ne00 = q.ne00.map(|v| reduce(v, ne00_modulus, 0));
        key.ne01 = q.ne01.map(|v| reduce(v, ne01_modulus, ne01_bound));
        key
    }

    fn constant(&self, name: &str) -> Option<u64> {
        self.dispatch.constant.iter().find(|c| c.name == name).map(|c| c.value)
    }

    fn cmp_cc(&self, name: &str, f: impl Fn(u64, u64) -> bool) -> Option<bool> {
        self.constant(name).map(|v| f(self.device.cc, v))
    }

    /// Whether the device is in class `name` (GGML_CUDA_CC_IS_*).
    pub fn class(&self, name: &str) -> Option<bool> {
        self.named(&self.dispatch.class, name, 0)
    }

    /// Whether feature `name` is available (the *_available() helpers).
    pub fn feature(&self, name: &str) -> Option<bool> {
        self.named(&self.dispatch.feature, name, 0)
    }

    fn named(&self, table: &[Named], name: &str, depth: u32) -> Option<bool> {
        if depth > MAX_DEPTH {
            return None;
        }
        let n = table.iter().find(|n| n.name == name)?;
        let facts = Facts::default();
        self.eval(&n.when, &facts, depth + 1, &mut String::new())
    }

    /// Evaluate `w`; append `name value ✓/✗` terms to `out`.
    fn eval(&self, w: &When, f: &Facts<'_>, depth: u32, out: &mut String) -> Option<bool> {
        if depth > MAX_DEPTH {
            return None;
        }
        let mut t = Terms { out, values: Vec::new() };
        self.device_terms(w, depth, &mut t);
        self.matmul_terms(w, f, depth, &mut t);
        self.attention_terms(w, f, depth, &mut t);
        self.nested_terms(w, f, depth, &mut t);
        and(t.values)
    }

    /// The device's and the build's terms: vendor, compute capability, class, features, build flags.
    fn device_terms(&self, w: &When, depth: u32, t: &mut Terms<'_>) {
        if let Some(v) = w.vendor {
            let r = Some(self.device.vendor == v);
            t.note(format!("vendor {v:?}"), r);
        }
        if !w.cc.is_empty() {
            let r =
                w.cc.iter()
                    .map(|c| self.constant(c).map(|v| v == self.device.cc))
                    .try_fold(false, |a, b| Some(a || b?));
            t.note(format!("cc {:#x} in [{}]", self.device.cc, w.cc.join(", ")), r);
        }
        if let Some(c) = &w.cc_ge {
            t.note(format!("cc {:#x} >= {c}", self.device.cc), self.cmp_cc(c, |a, b| a >= b));
        }
        if let Some(c) = &w.cc_lt {
            t.note(format!("cc {:#x} < {c}", self.device.cc), self.cmp_cc(c, |a, b| a < b));
        }
        if !w.class.is_empty() {
            let mut r = Some(false);
            for c in &w.class {
                match self.named(&self.dispatch.class, c, depth) {
                    Some(true) => {
                        r = Some(true);
                        break;
                    }
                    None => r = None,
                    Some(false) => {}
                }
            }
            t.note(format!("class {}", w.class.join("|")), r);
        }
        for feat in &w.feature {
            let r = self.named(&self.dispatch.feature, feat, depth);
            t.note(feat.clone(), r);
        }
        for flag in &w.build_flag {
            let r = Some(self.flags.contains(flag));
            t.note(flag.clone(), r);
        }
    }

    /// The matrix multiplication's terms: weight type, batch, experts, shapes, and the MMF table.
    fn matmul_terms(&self, w: &When, f: &Facts<'_>, depth: u32, t: &mut Terms<'_>) {
        if !w.types.is_empty() {
            let r = f.weight_type.map(|t| w.types.iter().any(|x| x == t));
            t.note(format!("type {} in [{}]", opt(f.weight_type), w.types.join(", ")), r);
        }
        if let Some(q) = w.quantized {
            t.note(format!("quantized {}", opt(f.quantized)), f.quantized.map(|v| v == q));
        }
        if let Some(n) = w.ne11_le {
            t.num(f.ne11, "ne11", "<=", n);
        }
        if let Some(n) = w.ne11_lt {
            t.num(f.ne11, "ne11", "<", n);
        }
        if let Some(n) = w.ne11_gt {
            t.num(f.ne11, "ne11", ">", n);
        }
        if let Some(n) = w.ne11_eq {
            t.num(f.ne11, "ne11", "==", n);
        }
        if let Some(n) = w.experts_gt {
            t.num(f.experts, "experts", ">", n);
        }
        if let Some(n) = w.experts_ge {
            t.num(f.experts, "experts", ">=", n);
        }
        if let Some(n) = w.smem_per_block_lt {
            t.num(Some(self.device.smem_per_block), "smem_per_block", "<", n);
        }
        if let Some(b) = w.src0_small {
            t.note(format!("src0_small {}", opt(f.src0_small)), f.src0_small.map(|v| v == b));
        }
        if let Some(b) = w.ne00_even {
            let v = f.ne00.map(|n| n.is_multiple_of(2));
            t.note(format!("ne00 {} even", opt(f.ne00)), v.map(|v| v == b));
        }
        if let Some(b) = w.ne00_fits_warp {
            // mmf.cu: src0_ne[0] % (warp_size * (4/type_size)); the quotient is integer division as in C.
            let step = match (f.warp_size, f.type_size) {
                (Some(w), Some(ts)) if ts > 0 && ts <= 4 => Some(w * (4 / ts)),
                _ => None,
            };
            let v = f.ne00.zip(step).map(|(n, s)| s != 0 && n.is_multiple_of(s));
            t.note(format!("ne00 {} % {} == 0", opt(f.ne00), opt(step)), v.map(|v| v == b));
        }
        if let Some(n) = w.ne01_multiple_of {
            t.num(f.ne01, "ne01", "%", n);
        }
        if let Some(n) = w.ne01_gt {
            t.num(f.ne01, "ne01", ">", n);
        }
        if let Some(b) = w.mul_mat_id {
            t.note(format!("mul_mat_id {}", opt(f.mul_mat_id)), f.mul_mat_id.map(|v| v == b));
        }
        // The MMF table is the costly term; a condition that already failed does not need it.
        if let (Some(b), false) = (w.mmf, t.values.contains(&Some(false))) {
            let mut inner = Vec::new();
            let mmf = self.table("mmf", &self.dispatch.mmf, f, depth + 1, &mut inner, 0);
            let v = match mmf.decision {
                Decision::Use(u) => Some(u),
                _ => None,
            };
            t.note(format!("mmf {}", yes_no(v)), v.map(|v| v == b));
        }
    }

    /// Flash attention's terms: head sizes, KV cache type and length, GQA, and its helper conditions.
    fn attention_terms(&self, w: &When, f: &Facts<'_>, depth: u32, t: &mut Terms<'_>) {
        if !w.head_dim.is_empty() {
            let r = f.head_dim.map(|d| w.head_dim.contains(&d));
            let list: Vec<String> = w.head_dim.iter().map(u64::to_string).collect();
            t.note(format!("head_dim {} in [{}]", opt(f.head_dim), list.join(", ")), r);
        }
        if let Some(n) = w.head_dim_le {
            t.num(f.head_dim, "head_dim", "<=", n);
        }
        if let Some(n) = w.head_dim_lt {
            t.num(f.head_dim, "head_dim", "<", n);
        }
        if let Some(n) = w.head_dim_gt {
            t.num(f.head_dim, "head_dim", ">", n);
        }
        if let Some(n) = w.head_dim_multiple_of {
            t.num(f.head_dim, "head_dim", "%", n);
        }
        if !w.dv.is_empty() {
            let r = f.dv.map(|d| w.dv.contains(&d));
            t.note(format!("dv {}", opt(f.dv)), r);
        }
        if let Some(b) = w.dv_eq_dk {
            let r = f.dv.zip(f.head_dim).map(|(a, b)| a == b);
            t.note(format!("dv {} == head_dim {}", opt(f.dv), opt(f.head_dim)), r.map(|v| v == b));
        }
        if !w.kv_types.is_empty() {
            let r = f.kv_type.map(|t| w.kv_types.iter().any(|x| x == t));
            t.note(format!("kv_type {}", opt(f.kv_type)), r);
        }
        if let Some(b) = w.kv_quantized {
            t.note(format!("kv_quantized {}", opt(f.kv_quantized)), f.kv_quantized.map(|v| v == b));
        }
        if let Some(n) = w.gqa_ge {
            t.num(f.gqa, "gqa", ">=", n);
        }
        if let Some(n) = w.gqa_gt {
            t.num(f.gqa, "gqa", ">", n);
        }
        if let Some(n) = w.gqa_multiple_of {
            t.num(f.gqa, "gqa", "%", n);
        }
        if let Some(n) = w.kv_len_ge {
            t.num(f.kv_len, "kv_len", ">=", n);
        }
        if let Some(n) = w.kv_len_multiple_of {
            t.num(f.kv_len, "kv_len", "%", n);
        }
        let tokens_eff = f.ne11.zip(f.gqa_eff).map(|(t, g)| t.saturating_mul(g));
        if let Some(n) = w.tokens_gqa_eff_le {
            t.num(tokens_eff, "tokens*gqa_eff", "<=", n);
        }
        if let Some(n) = w.tokens_gqa_eff_gt {
            t.num(tokens_eff, "tokens*gqa_eff", ">", n);
        }
        if let Some(b) = w.gqa_opt {
            let v = self.eval(&self.dispatch.fattn.gqa_opt, f, depth + 1, &mut String::new());
            t.note(format!("gqa_opt {}", yes_no(v)), v.map(|v| v == b));
        }
        if let Some(b) = w.vector_kernel {
            let v = self.eval(&self.dispatch.fattn.vector_kernel, f, depth + 1, &mut String::new());
            t.note(format!("vector_kernel {}", yes_no(v)), v.map(|v| v == b));
        }
    }

    /// `any` and `not`: conditions inside the condition.
    fn nested_terms(&self, w: &When, f: &Facts<'_>, depth: u32, t: &mut Terms<'_>) {
        if !w.any.is_empty() {
            let mut inner = String::new();
            let mut r = Some(false);
            for a in &w.any {
                if !inner.is_empty() {
                    inner.push_str(" | ");
                }
                let mut part = String::new();
                let v = self.eval(a, f, depth + 1, &mut part);
                inner.push_str(&part);
                match v {
                    Some(true) => r = Some(true),
                    None if r != Some(true) => r = None,
                    _ => {}
                }
            }
            t.note(format!("any({inner})"), r);
        }
        if let Some(n) = &w.not {
            let mut inner = String::new();
            let v = self.eval(n, f, depth + 1, &mut inner).map(|v| !v);
            t.note(format!("not({inner})"), v);
        }
    }

    /// What rule `r` decides, given that its condition held.
    fn then(&self, r: &Rule, f: &Facts<'_>, depth: u32) -> Decision {
        let t = &r.then;
        if let Some(why) = &t.undecided {
            return Decision::Undecided(why.clone());
        }
        if let Some(c) = &t.compute {
            return Decision::Compute(c.clone());
        }
        if let Some(u) = t.use_ {
            return Decision::Use(u);
        }
        if let Some(w) = &t.use_if {
            return match self.eval(w, f, depth + 1, &mut String::new()) {
                Some(v) => Decision::Use(v),
                None => Decision::Undecided(format!("rule {} reads an unknown input", r.id)),
            };
        }
        let limit = t.ne11_le.map(|n| f.weight_type.and_then(|ty| t.ne11_le_by_type.get(ty).copied()).unwrap_or(n));
        let within = match (limit, t.ne11_lt, f.ne11) {
            (Some(n), _, Some(v)) => Some(v <= n),
            (None, Some(n), Some(v)) => Some(v < n),
            (None, None, _) => Some(true),
            (_, _, None) => None,
        };
        let small = match t.src0_small {
            Some(want) => f.src0_small.map(|s| s == want),
            None => Some(true),
        };
        let Some(ok) = and([within, small]) else {
            return Decision::Undecided(format!("rule {} reads an unknown input", r.id));
        };
        match &t.kernel {
            Some(k) if ok => Decision::Kernel(k.clone()),
            Some(_) => Decision::Use(false),
            None => Decision::Use(ok),
        }
    }

    /// Walk `rules` in order; the first rule whose condition holds decides. An unknown condition explores both
    /// branches (bounded by `MAX_UNKNOWN_BRANCHES`) and decides only if they agree.
    fn table(
        &self,
        name: &'static str,
        rules: &[Rule],
        f: &Facts<'_>,
        depth: u32,
        path: &mut Vec<Check>,
        unknowns: u32,
    ) -> Outcome {
        self.table_from(name, rules, 0, f, depth, path, unknowns)
    }

    #[allow(clippy::too_many_arguments)]
    fn table_from(
        &self,
        name: &'static str,
        rules: &[Rule],
        start: usize,
        f: &Facts<'_>,
        depth: u32,
        path: &mut Vec<Check>,
        unknowns: u32,
    ) -> Outcome {
        let rref = |r: &Rule| RuleRef {
            version: self.dispatch.version.clone(),
            table: name.to_string(),
            id: r.id.clone(),
            source: r.source.clone(),
        };
        for (i, r) in rules.iter().enumerate().skip(start) {
            let mut inputs = String::new();
            let held = self.eval(&r.when, f, depth, &mut inputs);
            match held {
                Some(false) => path.push(Check {
                    table: name,
                    rule: r.id.clone(),
                    held,
                    inputs,
                    decided: None,
                    source: r.source.clone(),
                }),
                Some(true) => {
                    let d = self.then(r, f, depth);
                    path.push(Check {
                        table: name,
                        rule: r.id.clone(),
                        held,
                        inputs,
                        decided: Some(d.text()),
                        source: r.source.clone(),
                    });
                    return Outcome { decision: d, rule: Some(rref(r)) };
                }
                None => {
                    let if_held = self.then(r, f, depth);
                    let unknown_inputs = inputs.clone();
                    path.push(Check {
                        table: name,
                        rule: r.id.clone(),
                        held,
                        inputs,
                        decided: Some(format!("{} if it held", if_held.text())),
                        source: r.source.clone(),
                    });
                    if unknowns >= MAX_UNKNOWN_BRANCHES {
                        return Outcome {
                            decision: Decision::Undecided(format!("too many unknown inputs in {name}")),
                            rule: Some(rref(r)),
                        };
                    }
                    let mut rest = Vec::new();
                    let otherwise = self.table_from(name, rules, i + 1, f, depth, &mut rest, unknowns + 1);
                    path.extend(rest);
                    if otherwise.decision == if_held {
                        return Outcome { decision: if_held, rule: otherwise.rule };
                    }
                    return Outcome {
                        decision: Decision::Undecided(format!(
                            "{name} rule {} reads an input that is not known ({}); it decides {} if it holds, {} otherwise",
                            r.id,
                            unknown_inputs,
                            if_held.text(),
                            otherwise.decision.text()
                        )),
                        rule: Some(rref(r)),
                    };
                }
            }
        }
        // Every table ends in a rule without condition; an empty or open-ended table is a data error the tests
        // catch, so reaching this is "no".
        Outcome { decision: Decision::Use(false), rule: None }
    }

    fn matmul_facts<'q>(&self, q: &'q MatmulQuery, warp_size: u64) -> Facts<'q> {
        Facts {
            weight_type: Some(&q.weight_type),
            quantized: Some(q.quantized),
            type_size: Some(q.type_size),
            ne00: q.ne00,
            ne01: q.ne01,
            // A weight is one matrix (ne02*ne03 == 1) unless it stacks experts (mmvf.cu:829).
            src0_small: if q.experts <= 1 { Some(true) } else { q.ne01.map(|n| n <= 512) },
            ne11: Some(q.ne11),
            experts: Some(q.experts),
            mul_mat_id: Some(q.mul_mat_id),
            warp_size: Some(warp_size),
            ..Facts::default()
        }
    }

    /// The kernel family ggml picks for a matmul: for MUL_MAT the order of ggml_cuda_mul_mat (MMVF, MMF, MMVQ,
    /// MMQ, else vendor BLAS); for MUL_MAT_ID that of ggml_cuda_mul_mat_id (vector kernels for few tokens, MMQ,
    /// MMF, else the per-expert loop). Where each version cites its lines: the data files' headers.
    pub fn matmul(&self, q: &MatmulQuery) -> MatmulPrediction {
        let mut path = Vec::new();
        let undecided = |why: String, rule: Option<RuleRef>, path: Vec<Check>| MatmulPrediction {
            family: None,
            rule,
            blas_compute: None,
            undecided: Some(why),
            path,
        };
        if q.mul_mat_id {
            // MUL_MAT_ID checks MMF with WARP_SIZE (32), not the device's warp size (ggml-cuda.cu:2000).
            let f = self.matmul_facts(q, 32);
            let vec = self.table("mmid_vec", &self.dispatch.mmid_vec, &f, 0, &mut path, 0);
            match vec.decision {
                Decision::Kernel(k) => {
                    return MatmulPrediction {
                        family: Some(k),
                        rule: vec.rule,
                        blas_compute: None,
                        undecided: None,
                        path,
                    }
                }
                Decision::Undecided(why) => return undecided(why, vec.rule, path),
                _ => {}
            }
            let mmq = self.table("mmq", &self.dispatch.mmq, &f, 0, &mut path, 0);
            match mmq.decision {
                Decision::Use(true) => {
                    return MatmulPrediction {
                        family: Some("MMQ".into()),
                        rule: mmq.rule,
                        blas_compute: None,
                        undecided: None,
                        path,
                    }
                }
                Decision::Undecided(why) => return undecided(why, mmq.rule, path),
                _ => {}
            }
            let mmf = self.table("mmf", &self.dispatch.mmf, &f, 0, &mut path, 0);
            return match mmf.decision {
                Decision::Use(true) => MatmulPrediction {
                    family: Some("MMF".into()),
                    rule: mmf.rule,
                    blas_compute: None,
                    undecided: None,
                    path,
                },
                Decision::Undecided(why) => undecided(why, mmf.rule, path),
                _ => {
                    let last = if q.quantized { mmq.rule } else { mmf.rule };
                    MatmulPrediction {
                        family: Some("MMID-loop".into()),
                        rule: last,
                        blas_compute: None,
                        undecided: None,
                        path,
                    }
                }
            };
        }
        let f = self.matmul_facts(q, self.device.warp_size);
        let steps: [(&'static str, &Vec<Rule>, &str); 4] = [
            ("mmvf", &self.dispatch.mmvf, "MMVF"),
            ("mmf", &self.dispatch.mmf, "MMF"),
            ("mmvq", &self.dispatch.mmvq, "MMVQ"),
            ("mmq", &self.dispatch.mmq, "MMQ"),
        ];
        let mut said_no = BTreeMap::new();
        for (table, rules, family) in steps {
            let o = self.table(table, rules, &f, 0, &mut path, 0);
            match o.decision {
                Decision::Use(true) => {
                    return MatmulPrediction {
                        family: Some(family.into()),
                        rule: o.rule,
                        blas_compute: None,
                        undecided: None,
                        path,
                    }
                }
                Decision::Undecided(why) => return undecided(why, o.rule, path),
                _ => {
                    said_no.insert(table, o.rule);
                }
            }
        }
        // Vendor BLAS: cite the predicate that would have taken this weight type (MMQ for quantized, MMF for
        // float) and said no.
        let rule = said_no.remove(if q.quantized { "mmq" } else { "mmf" }).flatten();
        let compute = self.table("blas_compute", &self.dispatch.blas_compute, &f, 0, &mut path, 0);
        let blas_compute = match compute.decision {
            Decision::Compute(c) if c == "weight" => Some(q.weight_type.clone()),
            Decision::Compute(c) => Some(c),
            _ => None,
        };
        MatmulPrediction { family: Some("BLAS".into()), rule, blas_compute, undecided: None, path }
    }

    /// The flash-attention kernel ggml_cuda_get_best_fattn_kernel picks (`None` family: none supports the shape).
    pub fn attention(&self, q: &AttentionQuery) -> AttentionPrediction {
        let fa = &self.dispatch.fattn;
        let max = fa.gqa_eff_max.by_head_dim.get(&q.head_dim.to_string()).copied().unwrap_or(fa.gqa_eff_max.default);
        // gqa_ratio_eff doubles while it divides gqa_ratio (fattn.cu; max_bias == 0 assumed).
        let mut gqa_eff = 1u64;
        while q.gqa > 0 && q.gqa.is_multiple_of(2 * gqa_eff) && gqa_eff < max {
            gqa_eff *= 2;
        }
        let f = Facts {
            head_dim: Some(q.head_dim),
            dv: Some(q.dv),
            kv_type: Some(&q.kv_type),
            kv_quantized: Some(q.kv_quantized),
            gqa: Some(q.gqa),
            kv_len: Some(q.kv_len),
            ne11: Some(q.tokens),
            gqa_eff: Some(gqa_eff),
            ..Facts::default()
        };
        let mut path = Vec::new();
        let o = self.table("fattn", &self.dispatch.fattn_rule, &f, 0, &mut path, 0);
        let (family, undecided) = match o.decision {
            Decision::Kernel(k) if k == "none" => (None, None),
            Decision::Kernel(k) => (Some(k), None),
            Decision::Undecided(why) => (None, Some(why)),
            other => (None, Some(format!("unexpected decision {}", other.text()))),
        };
        AttentionPrediction { family, rule: o.rule, gqa_eff, undecided, path }
    }
}

/// The terms of one condition as they are evaluated: each one's value, and its `name value ✓/✗` text appended to
/// `out`.
struct Terms<'o> {
    out: &'o mut String,
    values: Vec<Option<bool>>,
}

impl Terms<'_> {
    fn note(&mut self, text: String, v: Option<bool>) {
        if !self.out.is_empty() {
            self.out.push_str(", ");
        }
        let _ = write!(self.out, "{text} {}", tri(v));
        self.values.push(v);
    }

    /// A numeric comparison `what op n` (`%`: `what` is a multiple of `n`); unknown when `v` is.
    fn num(&mut self, v: Option<u64>, what: &str, op: &str, n: u64) {
        let r = v.map(|v| match op {
            "<=" => v <= n,
            "<" => v < n,
            ">" => v > n,
            ">=" => v >= n,
            "==" => v == n,
            "%" => n != 0 && v.is_multiple_of(n),
            _ => false,
        });
        let text =
            if op == "%" { format!("{what} {} % {n} == 0", opt(v)) } else { format!("{what} {} {op} {n}", opt(v)) };
        self.note(text, r);
    }
}
