//! Knowledge that lives in data files (`data/*.toml`), each row with its upstream source, compiled into
//! the binary so that a release carries the tables it was tested with.
//!
//! - [`ggml_types`], [`kernel_families`]: ggml's type enum and how kernel names map to code paths.
//! - [`archs`]: GPU architectures as ggml reads them (`data/gpu_archs.toml`).
//! - [`rocm`]: ROCm's official support list per release (`data/rocm_support.toml`).
//! - [`ollama`]: Ollama's AMD build targets per release (`data/ollama_amdgpu.toml`).
//! - [`dispatch`]: ggml's matmul and flash-attention selection rules per ggml version
//!   (`data/ggml_dispatch_*.toml`).

pub mod archs;
pub mod dispatch;
mod dispatch_files;
pub mod nvidia_products;
pub mod ollama;
pub mod rocm;
pub mod vulkan_dispatch;

#[cfg(test)]
mod data_tests;

use std::collections::BTreeMap;
use std::sync::OnceLock;

use serde::de::Error as _;
use serde::{Deserialize, Deserializer};

use self::dispatch_files::DISPATCH_FILES;
pub use self::dispatch_files::{dispatch_file, dispatch_version, dispatch_versions, DEFAULT_GGML_VERSION};

pub const GGML_TYPES_FILE: &str = "data/ggml_types.toml";
pub const KERNEL_FAMILIES_FILE: &str = "data/kernel_families.toml";
pub const GPU_ARCHS_FILE: &str = "data/gpu_archs.toml";
pub const ROCM_SUPPORT_FILE: &str = "data/rocm_support.toml";
pub const OLLAMA_AMDGPU_FILE: &str = "data/ollama_amdgpu.toml";

/// The rules of a ggml version (name or alias).
pub fn dispatch(name: &str) -> Option<&'static dispatch::rules::Dispatch> {
    static T: OnceLock<Vec<dispatch::rules::Dispatch>> = OnceLock::new();
    let all = T.get_or_init(|| {
        DISPATCH_FILES
            .iter()
            // Part of the binary and checked by unit tests, so a parse failure is a build defect.
            .map(|(_, file, text)| toml::from_str(text).unwrap_or_else(|e| panic!("{file} parses: {e}")))
            .collect()
    });
    let v = dispatch_version(name)?;
    all.iter().find(|d| d.version == v)
}

pub fn gpu_archs() -> &'static archs::GpuArchs {
    static T: OnceLock<archs::GpuArchs> = OnceLock::new();
    T.get_or_init(|| {
        toml::from_str(include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/data/gpu_archs.toml")))
            .expect("data/gpu_archs.toml parses")
    })
}

pub fn rocm_support() -> &'static rocm::RocmSupport {
    static T: OnceLock<rocm::RocmSupport> = OnceLock::new();
    T.get_or_init(|| {
        toml::from_str(include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/data/rocm_support.toml")))
            .expect("data/rocm_support.toml parses")
    })
}

pub fn ollama_amdgpu() -> &'static ollama::OllamaTargets {
    static T: OnceLock<ollama::OllamaTargets> = OnceLock::new();
    T.get_or_init(|| {
        toml::from_str(include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/data/ollama_amdgpu.toml")))
            .expect("data/ollama_amdgpu.toml parses")
    })
}

#[derive(Debug, Deserialize)]
pub struct GgmlTypes {
    /// Where the table comes from upstream. Required, so that a table without its source does not load; nothing
    /// reads it at run time.
    #[allow(dead_code)]
    pub source: String,
    /// Names by enum value. TOML keys are strings; they are parsed once here rather than formatting the
    /// value for every lookup (a scan looks up a type for every kernel).
    #[serde(deserialize_with = "numeric_keys")]
    types: BTreeMap<u32, String>,
}

fn numeric_keys<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<u32, String>, D::Error> {
    BTreeMap::<String, String>::deserialize(d)?
        .into_iter()
        .map(|(key, name)| match key.parse() {
            Ok(value) => Ok((value, name)),
            Err(_) => Err(D::Error::custom(format!("ggml type value `{key}` is not a number"))),
        })
        .collect()
}

impl GgmlTypes {
    pub fn name(&self, value: u32) -> Option<&str> {
        self.types.get(&value).map(String::as_str)
    }

    /// The same, borrowed for `'static` (the table lives in a `OnceLock` for the whole run).
    pub fn name_static(&'static self, value: u32) -> Option<&'static str> {
        self.name(value)
    }
}

#[derive(Debug, Deserialize)]
pub struct FamilyRule {
    pub family: String,
    /// The vendor library whose kernels the rule matches (vendor-BLAS rules).
    #[serde(default)]
    pub library: Option<String>,
    #[serde(default)]
    pub name: Vec<String>,
    #[serde(default)]
    pub prefix: Vec<String>,
    #[serde(default)]
    pub contains: Vec<String>,
    /// Where the rule comes from upstream. Required, so that a rule without its source does not load; nothing
    /// reads it at run time.
    #[allow(dead_code)]
    pub source: String,
}

#[derive(Debug, Deserialize)]
pub struct KernelFamilies {
    pub rule: Vec<FamilyRule>,
}

pub fn ggml_types() -> &'static GgmlTypes {
    static T: OnceLock<GgmlTypes> = OnceLock::new();
    // The file is part of the binary and checked by a unit test, so a parse failure is a build defect.
    T.get_or_init(|| {
        toml::from_str(include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/data/ggml_types.toml")))
            .expect("data/ggml_types.toml parses")
    })
}

pub fn kernel_families() -> &'static KernelFamilies {
    static T: OnceLock<KernelFamilies> = OnceLock::new();
    T.get_or_init(|| {
        toml::from_str(include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/data/kernel_families.toml")))
            .expect("data/kernel_families.toml parses")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_files_parse_and_carry_sources() {
        let t = ggml_types();
        assert_eq!(t.name(12), Some("Q4_K"));
        assert_eq!(t.name(4), None, "removed type");
        let f = kernel_families();
        assert!(f.rule.len() >= 10);
        assert!(f.rule.iter().all(|r| !r.source.is_empty() && (!r.name.is_empty() || !r.prefix.is_empty())));
    }

    /// The enum values must match the ggml.h of the llama.cpp sdist when it is present (the fixture
    /// script unpacks it); the header is the independent source of the table.
    #[test]
    fn ggml_types_match_ggml_h_when_available() {
        let header = crate::host::cache::llama_cpp_source().unwrap().join("ggml/include/ggml.h");
        let text = std::fs::read_to_string(&header)
            .unwrap_or_else(|e| panic!("{}: {e}; run scripts/fixtures.sh first", header.display()));
        let mut seen = 0;
        for line in text.lines() {
            let l = line.trim();
            let Some(rest) = l.strip_prefix("GGML_TYPE_") else { continue };
            let Some((name, value)) = rest.split_once('=') else { continue };
            let value: u32 = match value.trim().trim_end_matches(',').split(',').next().unwrap().trim().parse() {
                Ok(v) => v,
                Err(_) => continue,
            };
            if name.trim() == "COUNT" {
                continue;
            }
            assert_eq!(ggml_types().name(value), Some(name.trim()), "value {value}");
            seen += 1;
        }
        assert_eq!(seen, 35, "every live GGML_TYPE_ in ggml.h is in the table");
    }

    /// The GGUF reader's size table (crates/gguf, from gguf-py constants.py) and this ggml type table (from
    /// ggml.h) agree on every name and on which values exist.
    #[test]
    fn gguf_type_table_matches_knowledge_file() {
        let known = ggml_types();
        for (t, info) in gguf::GgmlType::all() {
            assert_eq!(known.name(t.0), Some(info.name), "ggml type {}", t.0);
        }
        for v in 0..64u32 {
            assert_eq!(known.name(v).is_some(), gguf::GgmlType(v).info().is_some(), "ggml type {v}");
        }
    }
}
