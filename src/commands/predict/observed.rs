//! What was observed to compare a prediction with: the CUDA/HIP kernels a trace saw, each classified from its name
//! (family, ggml type, column count), and the Vulkan pipelines the layer saw. Loading them is `compare`'s.

use serde::{Deserialize, Serialize};

use crate::gpu::kernels;

/// One observed kernel, classified from its name.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObservedKernel {
    pub name: String,
    pub demangled: String,
    pub family: String,
    /// The weight type: the `ggml_type` template argument (MMVQ, MMQ), the element type (MMVF, MMF: `__half` is
    /// F16) or the type in a conversion kernel's name (`dequantize_block_q4_K`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ggml_type: Option<String>,
    /// Columns of a vector kernel (`ncols_dst`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ncols: Option<u64>,
    pub launches: u64,
}

/// Observed kernels from one source.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Observed {
    /// `trace-dir`, `trace-summary`, `sweep-record`.
    pub kind: String,
    pub path: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// The trace files behind it.
    pub files: Vec<String>,
    pub kernels: Vec<ObservedKernel>,
    /// Every launched kernel is in `kernels` (false for a sweep record's top list).
    pub complete: bool,
    /// A trace was cut: counts are lower bounds (presence still holds).
    pub counts_lower_bound: bool,
    pub notes: Vec<String>,
}

/// Template arguments of a demangled name, split at the top level: `f<a, g<b, c>, d>` → `a`, `g<b, c>`, `d`.
fn template_args(demangled: &str) -> Vec<&str> {
    let Some(open) = demangled.find('<') else { return Vec::new() };
    let Some(inner) = demangled.get(open + 1..demangled.rfind('>').unwrap_or(demangled.len())) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let (mut depth, mut start) = (0i32, 0usize);
    for (i, c) in inner.char_indices() {
        match c {
            '<' | '(' => depth += 1,
            '>' | ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(inner[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(inner[start..].trim());
    out
}

/// The ggml type of a float element type as it appears in a template argument. MMF reads F16 and BF16 weights two
/// at a time, so its kernels are instantiated on the pair types (`half2`, `nv_bfloat162`; mmf.cu:104-127 of
/// llama.cpp 11434), MMVF on the scalar ones.
fn float_type(arg: &str) -> Option<&'static str> {
    match arg {
        "float" => Some("F32"),
        "__half" | "half" | "__half2" | "half2" => Some("F16"),
        "__hip_bfloat16" | "nv_bfloat16" | "__nv_bfloat16" | "__hip_bfloat162" | "nv_bfloat162" | "__nv_bfloat162" => {
            Some("BF16")
        }
        _ => None,
    }
}

/// The ggml type a conversion kernel's name spells: the Itanium `<length><identifier>` names in the mangled name
/// (`21dequantize_block_q4_K`, or `15dequantize_q8_0` as the template argument of the generic
/// `dequantize_block`) whose identifier is `dequantize_block_T`, `dequantize_row_T` or `dequantize_T` for a ggml
/// type T.
fn type_in_name(raw: &str) -> Option<String> {
    let bytes = raw.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if !bytes[i].is_ascii_digit() || (i > 0 && bytes[i - 1].is_ascii_digit()) {
            i += 1;
            continue;
        }
        let digits = bytes[i..].iter().take_while(|b| b.is_ascii_digit()).count();
        let len: Option<usize> = if digits <= 4 { raw[i..i + digits].parse().ok() } else { None };
        let ident = len.and_then(|n| raw.get(i + digits..(i + digits).checked_add(n)?));
        if let Some(ident) = ident {
            let suffix =
                ["dequantize_block_", "dequantize_row_", "dequantize_"].iter().find_map(|p| ident.strip_prefix(p));
            if let Some(t) = suffix.and_then(gguf::GgmlType::from_name) {
                return Some(t.to_string());
            }
        }
        i += digits;
    }
    None
}

/// Classify a kernel name (the observed family is recomputed from the name, not trusted from the file).
pub fn classify(name: &str, launches: u64) -> ObservedKernel {
    let d = kernels::describe(name);
    let args = template_args(&d.demangled);
    let (ggml_type, ncols) = match d.family {
        "MMVQ" => {
            (d.ggml_type.map(str::to_string), (d.base == "mul_mat_vec_q").then(|| args.get(1)?.parse().ok()).flatten())
        }
        "MMQ" => (d.ggml_type.map(str::to_string), None),
        "MMVF" => (
            args.first().and_then(|a| float_type(a)).map(str::to_string),
            (d.base == "mul_mat_vec_f").then(|| args.get(2)?.parse().ok()).flatten(),
        ),
        "MMF" => (args.first().and_then(|a| float_type(a)).map(str::to_string), None),
        "dequantize" => (type_in_name(name), None),
        _ => (d.ggml_type.map(str::to_string), None),
    };
    ObservedKernel {
        name: name.to_string(),
        demangled: d.demangled,
        family: d.family.to_string(),
        ggml_type,
        ncols,
        launches,
    }
}

/// One observed Vulkan pipeline.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct VkObserved {
    pub name: String,
    /// The embedded shaders behind it, when the trace knows them.
    pub shaders: Vec<String>,
    pub family: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub op: Option<String>,
    pub helper: bool,
    pub launches: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct VkObservation {
    pub kind: String,
    pub path: String,
    pub files: Vec<String>,
    pub pipelines: Vec<VkObserved>,
    /// The dispatches of one request (a sweep record's trace window): counts are judged.
    pub per_request: bool,
    /// Every pipeline that ran is listed (a record lists the most dispatched only).
    pub complete: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

#[cfg(test)]
#[path = "observed_tests.rs"]
mod tests;
