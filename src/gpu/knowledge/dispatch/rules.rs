//! The rule tables of one ggml version as `data/ggml_dispatch_*.toml` writes them: a predicate's ordered rules
//! (`when` → `then`), the named constants, build flags and flash-attention parameters they refer to.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

/// The two vendors ggml's CUDA backend serves (HIP builds the same sources for AMD).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Vendor {
    Nvidia,
    Amd,
}

/// A condition: every field that is set must hold (AND). `any` holds if one of its conditions does; `not`
/// negates. Names refer to the file's constants, classes, features and build flags.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct When {
    pub vendor: Option<Vendor>,
    /// cc equals one of these constants.
    #[serde(default)]
    pub cc: Vec<String>,
    pub cc_ge: Option<String>,
    pub cc_lt: Option<String>,
    /// Member of one of these classes.
    #[serde(default)]
    pub class: Vec<String>,
    /// Every one of these features is available.
    #[serde(default)]
    pub feature: Vec<String>,
    /// Every one of these build flags is set.
    #[serde(default)]
    pub build_flag: Vec<String>,
    /// The weight type is one of these (ggml type names).
    #[serde(default)]
    pub types: Vec<String>,
    pub quantized: Option<bool>,
    pub ne11_le: Option<u64>,
    pub ne11_lt: Option<u64>,
    pub ne11_gt: Option<u64>,
    pub ne11_eq: Option<u64>,
    pub experts_gt: Option<u64>,
    pub experts_ge: Option<u64>,
    pub smem_per_block_lt: Option<u64>,
    /// ne01 <= 512 or the weight is a single matrix (mmvf.cu `src0_small`).
    pub src0_small: Option<bool>,
    pub ne00_even: Option<bool>,
    /// ne00 is a multiple of warp_size * 4 / type_size (mmf.cu row tiles).
    pub ne00_fits_warp: Option<bool>,
    pub ne01_multiple_of: Option<u64>,
    pub ne01_gt: Option<u64>,
    pub mul_mat_id: Option<bool>,
    /// The version's MMF predicate answers this for the same inputs.
    pub mmf: Option<bool>,
    #[serde(default)]
    pub head_dim: Vec<u64>,
    pub head_dim_le: Option<u64>,
    pub head_dim_lt: Option<u64>,
    pub head_dim_gt: Option<u64>,
    pub head_dim_multiple_of: Option<u64>,
    #[serde(default)]
    pub dv: Vec<u64>,
    pub dv_eq_dk: Option<bool>,
    #[serde(default)]
    pub kv_types: Vec<String>,
    pub kv_quantized: Option<bool>,
    pub gqa_ge: Option<u64>,
    pub gqa_gt: Option<u64>,
    pub gqa_multiple_of: Option<u64>,
    pub kv_len_ge: Option<u64>,
    pub kv_len_multiple_of: Option<u64>,
    pub tokens_gqa_eff_le: Option<u64>,
    pub tokens_gqa_eff_gt: Option<u64>,
    /// The version's `fattn.gqa_opt` condition holds.
    pub gqa_opt: Option<bool>,
    /// The version's `fattn.vector_kernel` condition holds.
    pub vector_kernel: Option<bool>,
    #[serde(default)]
    pub any: Vec<When>,
    pub not: Option<Box<When>>,
}

/// What a rule decides.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Then {
    #[serde(rename = "use")]
    pub use_: Option<bool>,
    /// Use iff this condition holds.
    pub use_if: Option<When>,
    /// Use iff ne11 <= this (or the per-type value).
    pub ne11_le: Option<u64>,
    #[serde(default)]
    pub ne11_le_by_type: BTreeMap<String, u64>,
    pub ne11_lt: Option<u64>,
    /// With `ne11_le`: also requires `src0_small`.
    pub src0_small: Option<bool>,
    /// A kernel family (a name from data/kernel_families.toml, or "none" for flash attention).
    pub kernel: Option<String>,
    /// The vendor-BLAS compute type ("weight": the weight's own type).
    pub compute: Option<String>,
    /// The answer depends on run-time data backscope does not have.
    pub undecided: Option<String>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    pub id: String,
    #[serde(default)]
    pub when: When,
    pub then: Then,
    pub source: String,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Constant {
    pub name: String,
    pub value: u64,
    pub source: String,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Named {
    pub name: String,
    pub when: When,
    pub source: String,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BuildFlag {
    pub name: String,
    pub default: bool,
    pub source: String,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GqaEffMax {
    pub default: u64,
    #[serde(default)]
    pub by_head_dim: BTreeMap<String, u64>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FattnParams {
    pub gqa_opt: When,
    pub gqa_opt_source: String,
    pub vector_kernel: When,
    pub vector_kernel_source: String,
    pub gqa_eff_max: GqaEffMax,
    pub gqa_eff_source: String,
}

/// One ggml version's selection rules.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Dispatch {
    pub version: String,
    pub name: String,
    pub source_root: String,
    pub mmvq_max_batch: u64,
    pub mmvq_max_batch_source: String,
    pub constant: Vec<Constant>,
    pub class: Vec<Named>,
    pub build_flag: Vec<BuildFlag>,
    pub feature: Vec<Named>,
    pub mmvf: Vec<Rule>,
    pub mmf: Vec<Rule>,
    pub mmvq: Vec<Rule>,
    pub mmq: Vec<Rule>,
    pub mmid_vec: Vec<Rule>,
    pub blas_compute: Vec<Rule>,
    pub fattn: FattnParams,
    pub fattn_rule: Vec<Rule>,
}

/// Every name a condition refers to, for the data-file checks.
pub fn referenced_names(w: &When, out: &mut BTreeMap<&'static str, BTreeSet<String>>) {
    let mut add = |kind: &'static str, names: &[String]| {
        out.entry(kind).or_default().extend(names.iter().cloned());
    };
    add("constant", &w.cc);
    add("constant", &w.cc_ge.iter().cloned().collect::<Vec<_>>());
    add("constant", &w.cc_lt.iter().cloned().collect::<Vec<_>>());
    add("class", &w.class);
    add("feature", &w.feature);
    add("build_flag", &w.build_flag);
    add("type", &w.types);
    add("type", &w.kv_types);
    for a in &w.any {
        referenced_names(a, out);
    }
    if let Some(n) = &w.not {
        referenced_names(n, out);
    }
}

impl Dispatch {
    /// Every rule table with its name.
    pub fn tables(&self) -> [(&'static str, &[Rule]); 7] {
        [
            ("mmvf", &self.mmvf),
            ("mmf", &self.mmf),
            ("mmvq", &self.mmvq),
            ("mmq", &self.mmq),
            ("mmid_vec", &self.mmid_vec),
            ("blas_compute", &self.blas_compute),
            ("fattn", &self.fattn_rule),
        ]
    }
}
