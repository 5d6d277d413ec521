//! ggml-vulkan's pipeline selection as data (`data/ggml_vulkan_11434.toml`) and device profiles
//! (`data/vulkan_devices.toml`), with the small evaluator that reads them: ordered first-match tables over named
//! facts, each table's value becoming a fact for the tables after it. What stays code here is arithmetic the
//! rules cannot say as comparisons: the shared-memory test that enables the s/m/l tiles
//! (ggml_vk_matmul_shmem_support), the tile alignment of K, the split-k count (ggml_vk_guess_split_k) and how a
//! pipeline's debug name is composed from the decided values (create_mm_pipelines, the mul_mat_vec loops).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::OnceLock;

use anyhow::{anyhow, bail, Result};
use serde::{Deserialize, Serialize};

/// The rules of the default version (llama.cpp 11434).
pub const RULES_FILE: &str = "data/ggml_vulkan_11434.toml";
pub const DEVICES_FILE: &str = "data/vulkan_devices.toml";

/// A named fact: the device's, the build's or the matmul's.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(untagged)]
pub enum Fact {
    Bool(bool),
    Int(i64),
    Str(String),
}

impl fmt::Display for Fact {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fact::Bool(b) => write!(f, "{b}"),
            Fact::Int(i) => write!(f, "{i}"),
            Fact::Str(s) => write!(f, "{s}"),
        }
    }
}

impl Fact {
    fn of(v: &toml::Value) -> Option<Fact> {
        match v {
            toml::Value::Boolean(b) => Some(Fact::Bool(*b)),
            toml::Value::Integer(i) => Some(Fact::Int(*i)),
            toml::Value::String(s) => Some(Fact::Str(s.clone())),
            _ => None,
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Fact::Bool(b) => Some(*b),
            _ => None,
        }
    }

    pub fn as_int(&self) -> Option<i64> {
        match self {
            Fact::Int(i) => Some(*i),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Fact::Str(s) => Some(s),
            _ => None,
        }
    }
}

pub type Facts = BTreeMap<String, Fact>;

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    pub id: String,
    #[serde(default)]
    pub when: BTreeMap<String, toml::Value>,
    pub then: toml::Value,
    pub source: String,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Table {
    /// The data file the table was read from (a delta's tables are its own, the rest its base's).
    #[serde(skip)]
    pub file: &'static str,
    pub name: String,
    pub doc: String,
    pub source: String,
    pub rule: Vec<Rule>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VendorRow {
    pub name: String,
    pub id: u32,
    pub source: String,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BuildFlagRow {
    /// The fact it sets (`glslc_integer_dot`).
    pub name: String,
    pub define: String,
    /// A regular expression over embedded shader names: a match proves the define.
    pub shader: String,
    pub source: String,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TileRow {
    pub name: String,
    pub bm: u64,
    pub bn: u64,
    pub bk: u64,
    pub align: u64,
    /// The tile's columns (wg_denoms[1]), which split-k compares N with.
    pub wg_n: u64,
    pub source: String,
}

/// One of the coopmat2 branch's tile configurations (its own warptiles and wg_denoms, set where
/// ggml_vk_load_shaders starts): the tile's rows and columns (wg_denoms[0], [1]) and alignment, per class of
/// pipeline: `f16` (tc_mm: F16 weights, and F32 weights converted to F16), `quant` (tc_mmq / tc_mmq_k, which are
/// equal) and `id` (tc_mmqid: every MUL_MAT_ID).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Coopmat2TileRow {
    pub name: String,
    pub class: String,
    pub bm: u64,
    pub bn: u64,
    pub align: u64,
    pub source: String,
}

impl Coopmat2TileRow {
    fn as_tile(&self) -> TileRow {
        TileRow {
            name: self.name.clone(),
            bm: self.bm,
            bn: self.bn,
            bk: 0,
            align: self.align,
            wg_n: self.bn,
            source: self.source.clone(),
        }
    }
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LutRow {
    pub types: Vec<String>,
    pub bytes: u64,
    pub source: String,
}

/// How a version names its matrix pipelines and which helper dispatches it issues: code in ggml, a choice here.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PipelineNaming {
    /// `index`: a tile's pipeline ends in its index among the enabled tiles (`_1`); `letter`: in the tile's
    /// name (`_m`).
    pub tile_suffix: String,
    /// `shared`: non-lookup-table quant types share `matmul_quant_*`; `per_type`: each type has `matmul_<type>_*`.
    pub quant: String,
    /// Whether MUL_MAT_ID's matrix path dispatches `count_experts` first.
    pub count_experts: bool,
    pub source: String,
}

/// The rules of one ggml version.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VulkanRules {
    /// The data file the rules came from (for messages and claims' sources).
    #[serde(skip)]
    pub file: &'static str,
    pub version: String,
    pub name: String,
    pub source_root: String,
    pub mul_mat_vec_max_cols: u64,
    pub mul_mat_vec_max_cols_source: String,
    pub naming: PipelineNaming,
    pub vendor: Vec<VendorRow>,
    pub build_flag: Vec<BuildFlagRow>,
    pub tile: Vec<TileRow>,
    #[serde(default)]
    pub coopmat2_tile: Vec<Coopmat2TileRow>,
    pub lut: Vec<LutRow>,
    pub device_table: Vec<Table>,
    pub matmul_table: Vec<Table>,
    pub attention_table: Vec<Table>,
}

/// One device profile (data/vulkan_devices.toml): facts by name, plus its label and source.
#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct DeviceProfile {
    pub id: String,
    pub label: String,
    /// A substring of the Vulkan device name that selects this profile for a traced device.
    #[serde(rename = "match")]
    pub match_name: String,
    pub source: String,
    #[serde(flatten)]
    pub facts: BTreeMap<String, toml::Value>,
}

#[derive(Deserialize)]
struct DevicesText {
    device: Vec<DeviceProfile>,
}

/// A version's rules written as changes to another version's: each table here replaces the base's table of the
/// same name (which must exist), the rest is the base's.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct VulkanRulesDelta {
    version: String,
    name: String,
    source_root: String,
    /// The version whose rules these change.
    base: String,
    naming: Option<PipelineNaming>,
    #[serde(default)]
    device_table: Vec<Table>,
    #[serde(default)]
    matmul_table: Vec<Table>,
    #[serde(default)]
    attention_table: Vec<Table>,
}

/// The ggml versions with Vulkan rules: (version id, data file, file text). The first is the default and the
/// base of the others' deltas.
const RULES_FILES: &[(&str, &str, &str)] = &[
    ("11434", RULES_FILE, include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/data/ggml_vulkan_11434.toml"))),
    (
        "ollama-v0.17.4",
        "data/ggml_vulkan_ollama_v0.17.4.toml",
        include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/data/ggml_vulkan_ollama_v0.17.4.toml")),
    ),
];

/// Other spellings of the versions in [`RULES_FILES`] (those of the CUDA rules' versions are accepted too, where
/// they name a version listed here).
const RULES_ALIASES: &[(&str, &str)] =
    &[("o17", "ollama-v0.17.4"), ("ollama-0.17.4", "ollama-v0.17.4"), ("v0.17.4", "ollama-v0.17.4")];

/// The versions with Vulkan rules, for messages.
pub fn versions() -> Vec<&'static str> {
    RULES_FILES.iter().map(|(v, _, _)| *v).collect()
}

/// The canonical id of a version name or alias that has Vulkan rules.
pub fn version_id(name: &str) -> Option<&'static str> {
    let n = name.trim().to_ascii_lowercase();
    let listed = |v: &str| RULES_FILES.iter().map(|(id, _, _)| *id).find(|id| *id == v);
    listed(&n)
        .or_else(|| RULES_ALIASES.iter().find(|(a, _)| *a == n).map(|(_, v)| *v))
        .or_else(|| crate::gpu::knowledge::dispatch_version(&n).and_then(listed))
}

/// Replaces `base`'s tables by the delta's tables of the same name.
fn apply_tables(file: &str, kind: &str, base: &mut [Table], delta: Vec<Table>) -> Result<()> {
    for t in delta {
        let slot = base
            .iter_mut()
            .find(|b| b.name == t.name)
            .ok_or_else(|| anyhow!("{file}: {kind} {} replaces no table of the base version's rules", t.name))?;
        *slot = t;
    }
    Ok(())
}

/// Parses one rules file (a full set, or a delta over the default version's).
fn parse_rules(file: &'static str, text: &str) -> Result<VulkanRules> {
    let value: toml::Table = toml::from_str(text).map_err(|e| anyhow!("{file}: {e}"))?;
    if !value.contains_key("base") {
        return parse_full(file, text);
    }
    let mut d: VulkanRulesDelta = toml::from_str(text).map_err(|e| anyhow!("{file}: {e}"))?;
    for t in d.device_table.iter_mut().chain(&mut d.matmul_table).chain(&mut d.attention_table) {
        t.file = file;
    }
    let (_, base_file, base_text) = RULES_FILES
        .iter()
        .find(|(v, _, _)| *v == d.base)
        .ok_or_else(|| anyhow!("{file}: base {} is not a version with Vulkan rules", d.base))?;
    if RULES_FILES.iter().any(|(v, f, _)| *v == d.base && *f == file) {
        bail!("{file}: a delta cannot be its own base");
    }
    let mut r = parse_full(base_file, base_text)?;
    apply_tables(file, "device_table", &mut r.device_table, d.device_table)?;
    apply_tables(file, "matmul_table", &mut r.matmul_table, d.matmul_table)?;
    apply_tables(file, "attention_table", &mut r.attention_table, d.attention_table)?;
    if let Some(n) = d.naming {
        r.naming = n;
    }
    r.file = file;
    r.version = d.version;
    r.name = d.name;
    r.source_root = d.source_root;
    Ok(r)
}

/// A full set of rules, each table marked with the file.
fn parse_full(file: &'static str, text: &str) -> Result<VulkanRules> {
    let mut r: VulkanRules = toml::from_str(text).map_err(|e| anyhow!("{file}: {e}"))?;
    r.file = file;
    for t in r.device_table.iter_mut().chain(&mut r.matmul_table).chain(&mut r.attention_table) {
        t.file = file;
    }
    Ok(r)
}

/// Every version's rules, parsed once.
fn all_rules() -> &'static [Result<VulkanRules, String>] {
    static ALL: OnceLock<Vec<Result<VulkanRules, String>>> = OnceLock::new();
    ALL.get_or_init(|| RULES_FILES.iter().map(|(_, f, t)| parse_rules(f, t).map_err(|e| format!("{e:#}"))).collect())
}

/// The rules of a version name or alias; an error lists the versions there are Vulkan rules for.
pub fn rules_for(name: &str) -> Result<&'static VulkanRules> {
    let Some(id) = version_id(name) else {
        bail!("no ggml-vulkan rules for ggml version {name:?}; Vulkan rules exist for: {}", versions().join(", "));
    };
    let i = RULES_FILES.iter().position(|(v, _, _)| *v == id).unwrap_or(0);
    all_rules()[i].as_ref().map_err(|e| anyhow!("{e}"))
}

/// The default version's rules (the file is part of the binary and checked by unit tests: a parse failure is a
/// build defect).
pub fn rules() -> &'static VulkanRules {
    all_rules()[0].as_ref().expect("data/ggml_vulkan_11434.toml parses")
}

/// The device profiles.
pub fn profiles() -> &'static [DeviceProfile] {
    static PROFILES: OnceLock<Vec<DeviceProfile>> = OnceLock::new();
    PROFILES.get_or_init(|| {
        let t: DevicesText =
            toml::from_str(include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/data/vulkan_devices.toml")))
                .expect("data/vulkan_devices.toml parses");
        t.device
    })
}

pub fn profile(id: &str) -> Option<&'static DeviceProfile> {
    profiles().iter().find(|p| p.id.eq_ignore_ascii_case(id))
}

/// The facts every device has, at the value a profile that does not name them means (an extension not offered,
/// no count known).
const DEVICE_DEFAULTS: &[(&str, Fact)] = &[
    ("subgroup_size_control", Fact::Bool(false)),
    ("subgroup_arithmetic", Fact::Bool(false)),
    ("fp16_offered", Fact::Bool(false)),
    ("integer_dot_offered", Fact::Bool(false)),
    ("int_dot_accelerated", Fact::Bool(false)),
    ("int_dot_mixed_signedness_accelerated", Fact::Bool(false)),
    ("coopmat_offered", Fact::Bool(false)),
    ("coopmat2_offered", Fact::Bool(false)),
    ("coopmat_acc_f16_offered", Fact::Bool(false)),
    ("coopmat_int_offered", Fact::Bool(false)),
    ("coopmat_bf16_offered", Fact::Bool(false)),
    ("amd_shader_core_properties", Fact::Bool(false)),
    ("wavefronts_per_simd", Fact::Int(0)),
    ("shader_float8", Fact::Bool(false)),
    ("warps_per_sm", Fact::Int(0)),
    ("shader_core_count", Fact::Int(0)),
    // False only where neither the trace's device record nor a profile gave the count: split-k is then undecided.
    ("shader_core_count_known", Fact::Bool(true)),
    ("disable_f16_env", Fact::Bool(false)),
    ("disable_integer_dot_env", Fact::Bool(false)),
    ("disable_coopmat_env", Fact::Bool(false)),
    ("disable_coopmat2_env", Fact::Bool(false)),
    ("disable_bfloat16_env", Fact::Bool(false)),
    ("mmvq_mode", Fact::Str(String::new())),
];

/// The facts of a device nothing is known about beyond what a caller adds: every extension not offered.
pub fn default_facts() -> Facts {
    DEVICE_DEFAULTS.iter().map(|(k, v)| (k.to_string(), v.clone())).collect()
}

impl DeviceProfile {
    /// The profile's facts, with defaults for what it does not say and `vendor` named from `vendor_id`.
    pub fn facts(&self) -> Result<Facts> {
        let mut facts = default_facts();
        for (k, v) in &self.facts {
            let f = Fact::of(v)
                .ok_or_else(|| anyhow!("{DEVICES_FILE}: {}: fact {k} is not a bool, integer or string", self.id))?;
            facts.insert(k.clone(), f);
        }
        let vendor_id = facts.get("vendor_id").and_then(Fact::as_int).unwrap_or(0);
        facts.insert("vendor".into(), Fact::Str(vendor_name(vendor_id)));
        Ok(facts)
    }
}

/// ggml's vendor name for a PCI vendor id (`OTHER` for Mesa's CPU device and the rest).
pub fn vendor_name(id: i64) -> String {
    rules().vendor.iter().find(|v| i64::from(v.id) == id).map(|v| v.name.clone()).unwrap_or_else(|| "OTHER".into())
}

/// The build facts from the shader names a libggml-vulkan embeds: each `build_flag` is set iff some name matches.
pub fn build_facts<'a>(shader_names: impl IntoIterator<Item = &'a str> + Clone) -> Result<Facts> {
    let mut out = Facts::new();
    for flag in &rules().build_flag {
        let re = regex_lite::Regex::new(&flag.shader)
            .map_err(|e| anyhow!("{RULES_FILE}: build_flag {}: pattern {}: {e}", flag.name, flag.shader))?;
        let set = shader_names.clone().into_iter().any(|n| re.is_match(n));
        out.insert(flag.name.clone(), Fact::Bool(set));
    }
    Ok(out)
}

impl VulkanRules {
    /// Evaluates the device tables: the device's and build's facts plus each table's value.
    pub fn device_decisions(&self, mut facts: Facts) -> Result<(Facts, Vec<Decision>)> {
        let mut out = Vec::new();
        for t in &self.device_table {
            let d = decide(t, &facts)?;
            facts.insert(t.name.clone(), d.value.clone());
            out.push(d);
        }
        Ok((facts, out))
    }

    /// Predicts one matmul on a device whose tables [`VulkanRules::device_decisions`] evaluated.
    pub fn matmul(&self, device: &Facts, q: &VkMatmulQuery) -> Result<VkMatmulPrediction> {
        matmul_with(self, device, q)
    }

    /// One FLASH_ATTN_EXT node's pipeline family; `gqa_ratio` is the query heads per KV head (1 without
    /// grouped-query attention), which ggml takes as the rows of a few-token node (ggml-vulkan.cpp 8117-8128).
    pub fn attention(
        &self,
        device: &Facts,
        tokens: u64,
        kv_type: &str,
        gqa_ratio: u64,
    ) -> Result<(String, Vec<Decision>)> {
        let mut facts = device.clone();
        facts.insert("tokens".into(), Fact::Int(i64::try_from(tokens).unwrap_or(i64::MAX)));
        facts.insert("gqa_ratio".into(), Fact::Int(i64::try_from(gqa_ratio).unwrap_or(i64::MAX)));
        facts.insert("kv_type".into(), Fact::Str(kv_type.to_string()));
        let mut path = Vec::new();
        for t in &self.attention_table {
            let d = decide(t, &facts)?;
            facts.insert(t.name.clone(), d.value.clone());
            path.push(d);
        }
        let family = path.last().map(|d| d.value.to_string()).unwrap_or_else(|| "FA".into());
        Ok((family, path))
    }
}

/// One table's decision, with the rule that made it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Decision {
    /// The data file of the deciding table.
    #[serde(skip)]
    pub file: &'static str,
    pub table: String,
    pub value: Fact,
    pub rule: String,
    pub source: String,
    /// The facts the deciding rule read, with their values.
    pub inputs: String,
}

/// The fact a `when` key reads and how: (fact, operator).
fn split_key(key: &str) -> (&str, &'static str) {
    for op in ["_not_multiple_of", "_multiple_of", "_not_in", "_in", "_le", "_lt", "_ge", "_gt"] {
        if let Some(fact) = key.strip_suffix(op) {
            return (fact, op);
        }
    }
    (key, "")
}

fn holds(file: &str, table: &str, rule: &Rule, key: &str, expected: &toml::Value, facts: &Facts) -> Result<bool> {
    let (name, op) = split_key(key);
    let fact = facts
        .get(name)
        .ok_or_else(|| anyhow!("{file}: table {table}, rule {}: reads fact `{name}`, which is not known", rule.id))?;
    let bad =
        || anyhow!("{file}: table {table}, rule {}: `{key}` = {expected} does not fit fact {name} = {fact}", rule.id);
    let list = || -> Result<Vec<Fact>> {
        expected.as_array().ok_or_else(bad)?.iter().map(|v| Fact::of(v).ok_or_else(bad)).collect()
    };
    let int = || -> Result<(i64, i64)> { Ok((fact.as_int().ok_or_else(bad)?, expected.as_integer().ok_or_else(bad)?)) };
    Ok(match op {
        "" => &Fact::of(expected).ok_or_else(bad)? == fact,
        "_in" => list()?.contains(fact),
        "_not_in" => !list()?.contains(fact),
        "_le" => int().map(|(a, b)| a <= b)?,
        "_lt" => int().map(|(a, b)| a < b)?,
        "_ge" => int().map(|(a, b)| a >= b)?,
        "_gt" => int().map(|(a, b)| a > b)?,
        "_multiple_of" => int().map(|(a, b)| b != 0 && a % b == 0)?,
        "_not_multiple_of" => int().map(|(a, b)| b != 0 && a % b != 0)?,
        _ => unreachable!("split_key returns these"),
    })
}

/// The first rule of `table` whose condition holds; its value (`=FACT` reads another fact).
pub fn decide(table: &Table, facts: &Facts) -> Result<Decision> {
    let file = table.file;
    for rule in &table.rule {
        let mut all = true;
        for (k, v) in &rule.when {
            if !holds(file, &table.name, rule, k, v, facts)? {
                all = false;
                break;
            }
        }
        if !all {
            continue;
        }
        let value = match &rule.then {
            toml::Value::String(s) if s.starts_with('=') => facts
                .get(&s[1..])
                .cloned()
                .ok_or_else(|| anyhow!("{file}: table {}, rule {}: `{s}` names no fact", table.name, rule.id))?,
            v => Fact::of(v)
                .ok_or_else(|| anyhow!("{file}: table {}, rule {}: `then` is not a value", table.name, rule.id))?,
        };
        let inputs = rule
            .when
            .keys()
            .map(|k| {
                let name = split_key(k).0;
                format!("{name}={}", facts.get(name).map(Fact::to_string).unwrap_or_default())
            })
            .collect::<Vec<_>>()
            .join(", ");
        return Ok(Decision {
            file: table.file,
            table: table.name.clone(),
            value,
            rule: rule.id.clone(),
            source: rule.source.clone(),
            inputs,
        });
    }
    bail!("{file}: table {}: no rule holds (its last rule must be unconditional)", table.name)
}

/// One MUL_MAT or MUL_MAT_ID node.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct VkMatmulQuery {
    pub weight_type: String,
    /// K (src0->ne[0]).
    pub ne00: u64,
    /// M (src0->ne[1]).
    pub ne01: u64,
    /// N: columns, or tokens for MUL_MAT_ID.
    pub ne11: u64,
    pub mul_mat_id: bool,
}

/// The predicted pipeline of one matmul.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct VkMatmulPrediction {
    /// A family of data/vulkan_pipelines.toml: MMV, MMVQ, MM, MMQ, MM-coopmat, MM-coopmat2.
    pub family: String,
    /// The ggml op the perf logger names the node by (MUL_MAT_VEC, MUL_MAT, MUL_MAT_ID).
    pub op: String,
    /// The pipeline's debug name where the rules decide it (`matmul_f16_f32_f16acc_aligned_2`); `None` for the
    /// coopmat paths, whose names backscope does not compose.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pipeline: Option<String>,
    /// The embedded shader of a mat-vec pipeline (its reduction variant).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shader: Option<String>,
    /// Tile (s/m/l) of a matrix pipeline and its index among the enabled tiles.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tile: Option<String>,
    pub aligned: bool,
    pub f16acc: bool,
    pub split_k: u64,
    /// Dispatches besides the main pipeline: `quantize_q8_1*`, `split_k_reduce`.
    pub helpers: Vec<String>,
    /// Dispatches per node (MUL_MAT_ID's vector path issues one per token).
    pub dispatches_per_node: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub undecided: Option<String>,
    /// Why whether ggml splits K (a `split_k_reduce` dispatch) is not decided: the shader core count is unknown.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub split_k_undecided: Option<String>,
    /// The decisions, table by table.
    pub path: Vec<Decision>,
}

fn fact_bool(facts: &Facts, name: &str) -> bool {
    facts.get(name).and_then(Fact::as_bool).unwrap_or(false)
}

fn fact_int(facts: &Facts, name: &str) -> u64 {
    facts.get(name).and_then(Fact::as_int).and_then(|i| u64::try_from(i).ok()).unwrap_or(0)
}

fn fact_str<'f>(facts: &'f Facts, name: &str) -> &'f str {
    facts.get(name).and_then(Fact::as_str).unwrap_or("")
}

/// Which of the s/m/l tiles the device enables for a weight type: those the vendor switch allows (`allowed`, the
/// `vendor_tiles` table's value: tile names, 4780-4857) that also pass the shared-memory test
/// (ggml_vk_matmul_shmem_support, 1427-1485, applied at 1893-1915: a tile that does not fit disables it and the
/// larger ones). create_mm_pipelines numbers the pipelines by their index in this list (filter_tc, 2256-2273).
pub fn enabled_tiles<'r>(rules: &'r VulkanRules, device: &Facts, weight_type: &str, allowed: &str) -> Vec<&'r TileRow> {
    let coopmat = fact_bool(device, "coopmat");
    let pad = if coopmat { 8 } else { 1 };
    let type_size = if fact_bool(device, "fp16") { 2 } else { 4 };
    let lut = rules.lut.iter().find(|l| l.types.iter().any(|t| t == weight_type)).map_or(0, |l| l.bytes);
    let shared = fact_int(device, "shared_memory");
    let mut out = Vec::new();
    for t in &rules.tile {
        let need = (t.bm + t.bn) * (t.bk + pad) * type_size + lut;
        if shared > 0 && need > shared {
            break;
        }
        if allowed.contains(t.name.as_str()) {
            out.push(t);
        }
    }
    out
}

/// ggml_vk_guess_split_k (5863-5900) for M = ne01, N = ne11, K = ne00 with `tile`'s N and M sizes.
pub fn split_k(cores: u64, tile: &TileRow, q: &VkMatmulQuery) -> u64 {
    if cores == 0 || q.ne11 < tile.wg_n || q.ne00 < 2048 {
        return 1;
    }
    let tiles = q.ne01.div_ceil(tile.bm).saturating_mul(q.ne11.div_ceil(tile.bn)).max(1);
    let mut split = if tiles <= cores / 2 {
        cores / tiles
    } else if tiles <= cores * 2 / 3 {
        3
    } else {
        1
    };
    split = split.clamp(1, 8);
    while split > 1 {
        let k_split = q.ne00.div_ceil(split).div_ceil(256).saturating_mul(256);
        if k_split.saturating_mul(split - 1) < q.ne00 {
            break;
        }
        split -= 1;
    }
    split
}

/// Types whose matrix pipelines have one shader per type (the lookup-table types, FOR_EACH_LUT_TYPE, 2192-2207);
/// the others share `matmul_quant_*` with the type as a specialization constant (2187-2190, 2629-2631).
const LUT_TYPES: &[&str] =
    &["IQ1_S", "IQ1_M", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ4_XS", "IQ4_NL", "MXFP4", "NVFP4"];

/// [`VulkanRules::matmul`]: the matmul tables in order; the `vendor_tiles` table's value picks the tiles the
/// tile selector then chooses among.
fn matmul_with(r: &VulkanRules, device: &Facts, q: &VkMatmulQuery) -> Result<VkMatmulPrediction> {
    let mut facts = device.clone();
    let int = |v: u64| Fact::Int(i64::try_from(v).unwrap_or(i64::MAX));
    facts.insert("weight_type".into(), Fact::Str(q.weight_type.clone()));
    facts.insert("ne00".into(), int(q.ne00));
    facts.insert("ne01".into(), int(q.ne01));
    facts.insert("ne11".into(), int(q.ne11));
    // quantize_y's `(ne11 * ne10) % 4 == 0` (6677, 6324-6325, 7401, 7714): B's row length times its rows. For
    // MUL_MAT B's rows are the columns N; MUL_MAT_ID's B rows (src1->ne[1], experts per token or 1) are not in
    // the query, so its rule reads K alone (see the rules file).
    facts.insert("ne10_ne11".into(), int(q.ne00.saturating_mul(q.ne11)));
    facts.insert("mul_mat_id".into(), Fact::Bool(q.mul_mat_id));
    let mut path = Vec::new();
    let cm2_tiles = coopmat2_tiles(r, q);
    let mut tiles: Vec<&TileRow> = Vec::new();
    let mut tile: Option<&TileRow> = None;
    let mut undecided = None;
    for t in &r.matmul_table {
        let d = decide(t, &facts)?;
        if t.name == "vendor_tiles" {
            tiles = enabled_tiles(r, device, &q.weight_type, &d.value.to_string());
            facts.insert("tiles_enabled".into(), int(tiles.len() as u64));
        }
        if t.name == "tile_selector" {
            let index = match &d.value {
                Fact::Int(i) => usize::try_from(*i).unwrap_or(0),
                Fact::Str(s) if s == "last" => tiles.len().saturating_sub(1),
                Fact::Str(s) if s == "coopmat2" => {
                    // The lookup-table types' tiles go through filter_tc (2256-2273): those the vendor switch
                    // left on (4781-4857; the shared-memory test of 1890-1915 is the other branch's).
                    let allowed = fact_str(&facts, "vendor_tiles");
                    let lut = LUT_TYPES.contains(&q.weight_type.as_str());
                    tiles = cm2_tiles.iter().filter(|t| !lut || allowed.contains(t.name.as_str())).collect();
                    facts.insert("tiles_enabled".into(), int(tiles.len() as u64));
                    if !q.mul_mat_id && tiles.len() > 2 && !fact_bool(&facts, "shader_core_count_known") {
                        undecided = Some(COOPMAT2_TILE_UNDECIDED.to_string());
                        0
                    } else {
                        coopmat2_tile_index(&tiles, q, fact_int(&facts, "shader_core_count"))
                    }
                }
                Fact::Str(s) => {
                    undecided = Some(s.strip_prefix("undecided:").unwrap_or(s).to_string());
                    0
                }
                Fact::Bool(_) => 0,
            };
            // ggml_vk_guess_matmul_pipeline_map clamps the selector's index to the enabled tiles (5991-5992).
            let index = index.min(tiles.len().saturating_sub(1));
            tile = tiles.get(index).copied();
            facts.insert("tile_index".into(), int(index as u64));
            let aligned = tile.is_some_and(|t| q.ne00.is_multiple_of(t.align));
            facts.insert("ne00_tile_aligned".into(), Fact::Bool(aligned));
        }
        facts.insert(t.name.clone(), d.value.clone());
        path.push(d);
    }
    Ok(compose(&r.naming, &facts, q, tile, &tiles, undecided, path))
}

/// The coopmat2 branch's tiles for a matmul (ggml_vk_load_shaders): MUL_MAT_ID's tc_mmqid, F16 (and F32, converted
/// to F16, 6315-6316) weights' tc_mm, the quants' tc_mmq / tc_mmq_k. The branch passes them unfiltered (2297-2331,
/// 2345-2359), except for the lookup-table types (see the tile selection).
fn coopmat2_tiles(r: &VulkanRules, q: &VkMatmulQuery) -> Vec<TileRow> {
    let class = if q.mul_mat_id {
        "id"
    } else if matches!(q.weight_type.as_str(), "F16" | "F32") {
        "f16"
    } else {
        "quant"
    };
    r.coopmat2_tile.iter().filter(|t| t.class == class).map(Coopmat2TileRow::as_tile).collect()
}

/// The coopmat2 tile selectors (2828-2861): for MUL_MAT, the large tile when N passes the medium tile's columns
/// and the medium or large tiling oversubscribes the shader cores (or the large one leaves them mostly idle while
/// the medium one does not), else the medium tile when M and N pass the small tile's, else the small one; for
/// MUL_MAT_ID, by N alone against the medium and small tiles' columns. Two tiles: by N against the first's columns.
fn coopmat2_tile_index(tiles: &[&TileRow], q: &VkMatmulQuery, cores: u64) -> usize {
    let (m, n) = (q.ne01, q.ne11);
    match tiles {
        [] | [_] => 0,
        [s, _] => usize::from(n > s.bn),
        [s, med, .., large] => {
            let last = tiles.len() - 1;
            if q.mul_mat_id {
                return if n > med.bn {
                    last
                } else if n > s.bn {
                    1
                } else {
                    0
                };
            }
            let count = |t: &TileRow| m.div_ceil(t.bm).saturating_mul(n.div_ceil(t.bn));
            let (tiles_l, tiles_m) = (count(large), count(med));
            let prefer_large = tiles_m > cores || tiles_l > cores || (tiles_l <= cores / 3 && tiles_m > cores / 2);
            if n > med.bn && prefer_large {
                last
            } else if m > s.bm && n > s.bn {
                1
            } else {
                0
            }
        }
    }
}

/// The coopmat2 branch's pipeline name stem for a weight type (2287-2331; MUL_MAT_ID 2345-2381): F16 (and F32,
/// converted) `f16`, Q4_K and Q5_K their own shaders, the other non-lookup-table quants the shared `quant`, the
/// lookup-table types theirs; always with an F16 B (`_f16`). `None` for BF16 (its pipelines depend on bf16 support).
fn coopmat2_stem(weight_type: &str) -> Option<String> {
    let t = weight_type.to_ascii_lowercase();
    match weight_type {
        "F16" | "F32" => Some("f16".into()),
        "BF16" => None,
        "Q4_K" | "Q5_K" => Some(format!("{t}_f16")),
        w if LUT_TYPES.contains(&w) => Some(format!("{t}_f16")),
        _ => Some("quant_f16".into()),
    }
}

/// The family, pipeline name and helper dispatches from the decided facts.
fn compose(
    naming: &PipelineNaming,
    facts: &Facts,
    q: &VkMatmulQuery,
    tile: Option<&TileRow>,
    tiles: &[&TileRow],
    undecided: Option<String>,
    path: Vec<Decision>,
) -> VkMatmulPrediction {
    let t = q.weight_type.to_ascii_lowercase();
    let quantize_y = fact_bool(facts, "quantize_y");
    let f16acc = fact_bool(facts, "f16acc");
    let aligned = fact_bool(facts, "aligned");
    let acc = if f16acc { "_f16acc" } else { "" };
    let index = fact_int(facts, "tile_index");
    let quantized = !matches!(q.weight_type.as_str(), "F32" | "F16" | "BF16");
    let mut helpers = Vec::new();
    if quantize_y {
        // ggml_vk_get_quantize_pipeline returns pipeline_quantize_q8_1_x4 for Q8_1 (6227-6233, named at 3246-3249).
        helpers.push("quantize_q8_1_x4".into());
    }
    let (family, op, pipeline, shader, dispatches) = match fact_str(facts, "path") {
        "vec" | "vec_id" => {
            let id = fact_str(facts, "path") == "vec_id";
            let stem = if id { "mul_mat_vec_id_" } else { "mul_mat_vec_" };
            let name = if quantize_y {
                format!("{stem}{t}_q8_1_f32")
            } else if id {
                format!("{stem}{t}_f32")
            } else {
                format!("{stem}{t}_f32_f32")
            };
            let suffix = fact_str(facts, "mmv_shader");
            let shader = (!quantize_y).then(|| {
                let base = if id { format!("mul_mat_vec_id_{t}_f32_f32") } else { format!("mul_mat_vec_{t}_f32_f32") };
                format!("{base}{suffix}")
            });
            // ggml_vk_mul_mat_vec_id_q_f16 dispatches once per token of the ubatch (the loop over ids->ne[1] at 7887-7895).
            let per_node = if id { q.ne11.max(1) } else { 1 };
            let op = if id { "MUL_MAT_ID" } else { "MUL_MAT_VEC" };
            (if quantize_y { "MMVQ" } else { "MMV" }, op, Some(name), shader, per_node)
        }
        p => {
            let id = p == "mat_id";
            let op = if id { "MUL_MAT_ID" } else { "MUL_MAT" };
            let coopmat2 = fact_bool(facts, "coopmat2");
            let coopmat = fact_bool(facts, "coopmat");
            let family = if quantize_y {
                "MMQ"
            } else if coopmat2 {
                "MM-coopmat2"
            } else if coopmat {
                "MM-coopmat"
            } else {
                "MM"
            };
            // create_mm_pipelines' names on the fp16 subgroup path (2617-2654; MUL_MAT_ID 2660-2700).
            let stem = match (id, fact_bool(facts, "matmul_id_subgroup")) {
                (false, _) => "matmul_",
                (true, true) => "matmul_id_subgroup_",
                (true, false) => "matmul_id_",
            };
            let cm2_name = (coopmat2 && !quantize_y && undecided.is_none())
                .then(|| coopmat2_stem(&q.weight_type))
                .flatten()
                .map(|stem| {
                    let prefix = if id { "matmul_id_subgroup_" } else { "matmul_" };
                    format!("{prefix}{stem}{acc}{}_{index}", if aligned { "_aligned" } else { "" })
                });
            let name = cm2_name.or_else(|| {
                (!coopmat2 && !coopmat && fact_bool(facts, "fp16") && undecided.is_none()).then(|| {
                    let base = if quantize_y {
                        format!("{stem}{t}_q8_1")
                    } else if q.weight_type == "F32" {
                        format!("{stem}f32_f32")
                    } else if q.weight_type == "F16" {
                        format!("{stem}f16_f32{acc}")
                    } else if quantized && (naming.quant == "per_type" || LUT_TYPES.contains(&q.weight_type.as_str())) {
                        format!("{stem}{t}_f32{acc}")
                    } else {
                        format!("{stem}quant_f32{acc}")
                    };
                    let suffix = match (naming.tile_suffix.as_str(), tile) {
                        ("letter", Some(tile)) => tile.name.clone(),
                        _ => index.to_string(),
                    };
                    format!("{base}{}_{suffix}", if aligned { "_aligned" } else { "" })
                })
            });
            (family, op, name, None, 1)
        }
    };
    let split = match (fact_bool(facts, "split_k_possible"), tile) {
        (true, Some(tile)) => split_k(fact_int(facts, "shader_core_count"), tile, q),
        _ => 1,
    };
    // N below the tile's columns never splits (5871), whatever the core count.
    let split_k_undecided = (fact_str(facts, "split_k_possible") == "undecided"
        && tile.is_some_and(|t| q.ne11 >= t.wg_n))
    .then(|| SPLIT_K_UNDECIDED.to_string());
    if split > 1 {
        helpers.push("split_k_reduce".into());
    }
    // ggml_vk_mul_mat_id_q_f16 counts each expert's rows (count_experts, dispatched at 7577-7590) before it
    // quantizes B (7628-7637) and multiplies (7659), whatever the weight type; the vector path does not (7887).
    if naming.count_experts && op == "MUL_MAT_ID" && !matches!(family, "MMV" | "MMVQ") {
        helpers.insert(0, "count_experts".into());
    }
    let tile_name = (matches!(family, "MM" | "MMQ" | "MM-coopmat" | "MM-coopmat2") && undecided.is_none())
        .then(|| {
            tile.map(|t| {
                format!("{} (#{index} of {})", t.name, tiles.iter().map(|t| t.name.as_str()).collect::<String>())
            })
        })
        .flatten();
    VkMatmulPrediction {
        family: family.to_string(),
        op: op.to_string(),
        pipeline,
        shader,
        tile: tile_name,
        aligned,
        f16acc,
        split_k: split,
        helpers,
        dispatches_per_node: dispatches,
        undecided,
        split_k_undecided,
        path,
    }
}

/// Why a coopmat2 matmul's tile (and so its pipeline name) is left open.
pub const COOPMAT2_TILE_UNDECIDED: &str = "the coopmat2 tile selector compares tile counts with the shader core count \
     (2828-2861), which the trace does not record (and no device profile gives)";

/// Why a split-k item is left open.
pub const SPLIT_K_UNDECIDED: &str =
    "depends on the shader core count, which the trace does not record (and no device profile gives)";

#[cfg(test)]
#[path = "vulkan_dispatch_tests.rs"]
mod tests;
