//! The typed records `scan` produces, which the scan report gathers. Their JSON form (`--json`) is documented in
//! `docs/scan-json.md`; the report's `SCHEMA` changes whenever a field is removed or changes meaning.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Serialize;

/// Something that went wrong with one input; the scan went on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Problem {
    pub path: String,
    /// Byte offset in the file, where the problem has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offset: Option<u64>,
    pub severity: Severity,
    pub message: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Error,
    Warning,
}

/// One file that is an ELF or carries GPU code.
#[derive(Clone, Debug, Serialize)]
pub struct FileRecord {
    pub path: String,
    pub size: u64,
    /// `elf`, `amdgpu-code-object`, `offload-bundle`, `compressed-bundle`, `cuda-fatbin`, `cubin`.
    pub format: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub elf: Option<ElfSummary>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backend: Option<Backend>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub amdgpu: Option<AmdGpuCode>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cuda: Option<CudaCode>,
    /// The SPIR-V shaders a ggml-vulkan build embeds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vulkan: Option<VulkanCode>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub dependencies: Vec<Dependency>,
}

impl FileRecord {
    pub fn file_name(&self) -> &str {
        self.path.rsplit('/').next().unwrap_or(&self.path)
    }

    pub fn has_gpu_code(&self) -> bool {
        self.amdgpu.as_ref().is_some_and(|a| !a.code_objects.is_empty())
            || self.cuda.as_ref().is_some_and(|c| !c.entries.is_empty())
            || self.vulkan.as_ref().is_some_and(|v| v.shaders > 0)
    }
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct ElfSummary {
    pub class: u8,
    pub machine: u16,
    pub e_type: u16,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub soname: Option<String>,
    pub needed: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub rpath: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub runpath: Vec<String>,
    /// `.comment` strings: the compilers that built it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub compilers: Vec<String>,
}

/// Which ggml backend a file is, and how that was decided.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Backend {
    /// `hip`, `cuda`, `vulkan`, `cpu`, `metal`, `sycl`, `opencl`, `musa`, `cann`, `blas`, `rpc`, or `ggml` for the
    /// core library.
    pub name: String,
    pub by: BackendEvidence,
    /// What the content check found (e.g. the exported `ggml_backend_cuda_reg` plus a `.hip_fatbin`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content_evidence: Option<String>,
}

/// How a file's backend was decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum BackendEvidence {
    /// Its file name only (`libggml-vulkan.so`).
    #[serde(rename = "name")]
    Name,
    /// What it exports (`ggml_backend_vk_reg`), against its name or without one.
    #[serde(rename = "content")]
    Content,
    /// Name and content agree.
    #[serde(rename = "name+content")]
    NameAndContent,
}

impl BackendEvidence {
    /// The spelling in JSON and tables.
    pub fn as_str(self) -> &'static str {
        match self {
            BackendEvidence::Name => "name",
            BackendEvidence::Content => "content",
            BackendEvidence::NameAndContent => "name+content",
        }
    }
}

impl std::fmt::Display for BackendEvidence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where a section lies in its file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SectionRef {
    pub name: String,
    pub offset: u64,
    pub size: u64,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct AmdGpuCode {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub section: Option<SectionRef>,
    pub bundles: u64,
    pub compressed_bundles: u64,
    pub code_objects: Vec<CodeObjectRecord>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Compression {
    /// `ccob-v1`…`ccob-v3`, `lz4`, `zstd`.
    pub format: String,
    /// `zlib`, `zstd`, `lz4`.
    pub method: &'static str,
    pub compressed_size: u64,
    pub uncompressed_size: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct CodeObjectRecord {
    /// File offset of the bundle (or CCOB) that holds this code object.
    pub bundle_offset: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bundle_compression: Option<Compression>,
    /// The bundle entry ID, e.g. `hipv4-amdgcn-amd-amdhsa--gfx90a`; empty for a standalone code object.
    pub entry_id: String,
    /// Canonical target ID from the ELF header (`gfx90a`, `gfx90a:sramecc+:xnack-`).
    pub target: String,
    pub processor: String,
    /// Where the code object's bytes start: a file offset when `in_file`, else an offset inside the
    /// decompressed bundle.
    pub offset: u64,
    pub in_file: bool,
    /// The entry has the same offset and size as an earlier entry of its bundle: the same code object under
    /// another entry ID. It was decoded once; this record repeats the counts, and the per-kernel records are
    /// on the first one only.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub alias: bool,
    pub size: u64,
    pub code_object_version: u8,
    pub kernel_count: u64,
    /// Kernels per family (`MMVQ`, `MMQ`, `FA-tile`, `vendor-BLAS`, `other`, …).
    pub families: BTreeMap<String, u64>,
    /// ggml types of the MMVQ/MMQ kernels (`Q4_K`, `Q8_0`, …) with their counts.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub ggml_types: BTreeMap<String, u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernels: Option<Vec<KernelRecord>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One kernel with its resources. AMD and NVIDIA report different resources, so each field is optional.
#[derive(Clone, Debug, Default, Serialize)]
pub struct KernelRecord {
    pub name: String,
    /// Shared by all records of the same name (a ggml HIP library repeats each name in every target).
    pub demangled: Arc<str>,
    pub family: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ggml_type: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sgpr: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vgpr: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agpr: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sgpr_spills: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vgpr_spills: Option<u64>,
    /// AMD: static LDS bytes. NVIDIA: static shared memory bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shared_bytes: Option<u64>,
    /// AMD: scratch bytes per work-item. NVIDIA: per-thread stack frame bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scratch_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wavefront_size: Option<u64>,
    /// AMD `.max_flat_workgroup_size`; NVIDIA `__launch_bounds__` threads (x·y·z).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_threads: Option<u64>,
    /// AMD kernarg segment bytes; NVIDIA parameter bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub arg_bytes: Option<u64>,
    /// NVIDIA registers per thread.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub registers: Option<u64>,
}

/// The SPIR-V shaders embedded in a host library (ggml-vulkan's `NAME_data`/`NAME_len` arrays).
#[derive(Clone, Debug, Default, Serialize)]
pub struct VulkanCode {
    pub shaders: u64,
    /// Their bytes, together.
    pub bytes: u64,
    /// Shaders per op family (`matmul`, `mul_mat_vec`, `flash_attn`, …).
    pub families: BTreeMap<String, u64>,
    /// Shaders per build variant: `q8_1` (integer dot), `cm1`/`cm2` (cooperative matrix), `bf16`, `subgroup`,
    /// `f16acc`. A shader can count in several.
    pub variants: BTreeMap<String, u64>,
    /// Each shader, with `--kernels`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub entries: Option<Vec<VulkanShaderRecord>>,
}

#[derive(Clone, Debug, Serialize)]
pub struct VulkanShaderRecord {
    /// The array's name without `_data`.
    pub name: String,
    pub family: String,
    /// File offset of the SPIR-V module.
    pub offset: u64,
    pub size: u64,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct CudaCode {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub section: Option<SectionRef>,
    pub containers: u64,
    pub entries: Vec<CudaEntryRecord>,
}

#[derive(Clone, Debug, Serialize)]
pub struct CudaEntryRecord {
    /// File offset of the entry header.
    pub offset: u64,
    /// `cubin`, `ptx` or `kind-N`.
    pub kind: String,
    /// `sm_90` for cubins, `compute_90` for PTX.
    pub target: String,
    pub sm: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compression: Option<Compression>,
    pub size: u64,
    pub kernel_count: u64,
    pub families: BTreeMap<String, u64>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub ggml_types: BTreeMap<String, u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub toolkit: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernels: Option<Vec<KernelRecord>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One `DT_NEEDED` entry and where the dynamic loader would find it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Dependency {
    pub name: String,
    /// The library that needs it (the file itself at depth 1).
    pub needed_by: String,
    pub depth: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resolved: Option<String>,
    /// `rpath`, `ld_library_path`, `runpath`, `ld.so.conf`, `default`, `tree` (a directory of the scanned tree,
    /// as Ollama's `LD_LIBRARY_PATH` makes visible), `path` (name with a slash), or `missing`.
    pub via: String,
}

/// A vendor BLAS kernel library directory (`rocblas/library`, `hipblaslt/library`).
#[derive(Clone, Debug, Serialize)]
pub struct VendorBlasDir {
    pub path: String,
    /// `rocblas` or `hipblaslt`.
    pub library: String,
    pub files: u64,
    /// Per arch (from file names, e.g. `TensileLibrary_lazy_gfx906.dat`): file count.
    pub files_per_arch: BTreeMap<String, u64>,
    /// Per arch: code object files (`.co`, `.hsaco`) among them.
    pub code_objects_per_arch: BTreeMap<String, u64>,
    /// Per arch: the fallback libraries (`*_fallback_gfx900.dat`) some Tensile builds need.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub fallback_per_arch: BTreeMap<String, u64>,
}

/// A MIOpen performance/kernel database file.
#[derive(Clone, Debug, Serialize)]
pub struct MiopenDb {
    pub path: String,
    pub arch: String,
    pub size: u64,
    /// Line count for text databases.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lines: Option<u64>,
}

/// One cell of the GPU arch × library matrix.
#[derive(Clone, Debug, Serialize)]
pub struct CoverageCell {
    pub arch: String,
    pub library: String,
    /// `ggml-kernels`, `vendor-blas`, `gpu-code` (other GPU code), `ptx-only`.
    pub content: &'static str,
    pub code_objects: u64,
    pub kernels: u64,
    pub families: BTreeMap<String, u64>,
}

/// `--arch`: what each library can do on one GPU.
#[derive(Clone, Debug, Serialize)]
pub struct ArchAnswer {
    pub arch: String,
    pub libraries: Vec<LibraryAnswer>,
    pub vendor_blas: Vec<VendorBlasAnswer>,
}

#[derive(Clone, Debug, Serialize)]
pub struct LibraryAnswer {
    pub path: String,
    /// `ggml-kernels`, `vendor-blas`, `gpu-code`, `depends-on-mode`, `jit-from-ptx`, `nothing`.
    pub verdict: &'static str,
    /// Families present for this arch (ggml or vendor).
    pub families: BTreeMap<String, u64>,
    /// Targets the library does carry (to show what is there when the arch is missing).
    pub targets_present: Vec<String>,
    /// Offsets of code objects that run on the arch (first few).
    pub evidence_offsets: Vec<u64>,
    pub note: String,
}

#[derive(Clone, Debug, Serialize)]
pub struct VendorBlasAnswer {
    pub path: String,
    pub library: String,
    pub files_for_arch: u64,
    pub code_objects_for_arch: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backend_evidence_keeps_the_spelling_of_docs_scan_json() {
        // docs/scan-json.md: `by` (`name`, `content`, `name+content`).
        for (e, s) in [
            (BackendEvidence::Name, "name"),
            (BackendEvidence::Content, "content"),
            (BackendEvidence::NameAndContent, "name+content"),
        ] {
            assert_eq!(serde_json::to_value(e).unwrap(), s);
            assert_eq!(e.to_string(), s);
        }
    }
}
