//! What `scan --disasm` found, in the form `scan --json` prints: per code object and per kernel, the instruction
//! mix. Its own file, so that the scan's records can hold it without depending on the disassembly itself.

use std::collections::BTreeMap;

use serde::Serialize;

use super::classes::Vendor;
use super::tools::Tool;

/// The `disasm` part of a scan report (docs/scan-json.md).
#[derive(Clone, Debug, Default, Serialize)]
pub struct DisasmReport {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernel_pattern: Option<String>,
    /// The disassemblers used.
    pub tools: Vec<Tool>,
    pub code_objects: Vec<CodeObjectMix>,
    pub stats: DisasmStats,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct DisasmStats {
    /// Code objects and cubins selected (by `--arch`) for disassembly.
    pub selected: u64,
    /// Skipped because no kernel in them matches `--kernel`.
    pub no_matching_kernel: u64,
    pub disassembled: u64,
    pub from_cache: u64,
    pub failed: u64,
    /// Not disassembled because no disassembler for their vendor was found.
    pub no_tool: u64,
    pub kernels: u64,
    pub instructions: u64,
    /// Disassemblers run at once (rayon's thread count).
    pub parallel: u64,
    pub elapsed_ms: f64,
}

/// One disassembled code object (AMD) or cubin (NVIDIA).
#[derive(Clone, Debug, Serialize)]
pub struct CodeObjectMix {
    pub path: String,
    pub vendor: Vendor,
    /// `gfx942`, `gfx90a:xnack-`, `sm_75`.
    pub target: String,
    /// As in the scan's record: a file offset when `in_file`, else an offset in the decompressed container.
    pub offset: u64,
    pub in_file: bool,
    /// The compressed bundle (AMD) or the fatbin entry header (NVIDIA) holding it, when not `in_file`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container_offset: Option<u64>,
    pub size: u64,
    pub sha256: String,
    pub cached: bool,
    /// The disassembler's output was longer than its budget ([`output_budget`]): counts are lower bounds.
    pub truncated: bool,
    /// Every instruction in the code object (kernels, device functions, padding).
    pub instructions: u64,
    /// Instructions in functions that are not kernels (non-inlined device functions such as printf helpers).
    pub other_functions: u64,
    pub kernels: Vec<KernelMix>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One kernel's instruction mix.
#[derive(Clone, Debug, Serialize)]
pub struct KernelMix {
    pub name: String,
    pub demangled: String,
    pub family: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ggml_type: Option<&'static str>,
    pub instructions: u64,
    /// Instructions per broad class (data/instruction_classes.toml); they add up to `instructions`.
    pub classes: BTreeMap<String, u64>,
    /// Path-deciding instructions per kind, every kind of the vendor listed (0 = absent).
    pub paths: BTreeMap<String, u64>,
    /// The path-deciding instructions by mnemonic (`v_mfma_i32_16x16x32_i8`: 224).
    pub path_mnemonics: BTreeMap<String, u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wavefront_size: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sgpr: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vgpr: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agpr: Option<u64>,
    /// NVIDIA registers per thread.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub registers: Option<u64>,
}
