//! The CUDA/HIP kernels a prediction is compared with: loaded from a trace directory, a `backscope trace --json`
//! summary or a sweep record's trace, each kernel classified from its name (family, ggml type, column count).

use std::path::Path;

use anyhow::{bail, Context, Result};

use super::super::observed::{Observed, ObservedKernel, ReadAs};
use super::super::options::ObservedSource;
use crate::gpu::kernels;
use crate::run::format::record::RecordTrace;

/// The largest `trace --json` summary or record `result.json` read: both are summaries (kernel totals, not
/// launches) of a few hundred KB at most; 64 MiB is generous and refuses `/dev/zero` or a wrong file.
const MAX_OBSERVED_JSON_BYTES: u64 = 64 << 20;

/// Load observed kernels from a trace directory, a `trace --json` summary or a sweep record.
pub fn load(src: &ObservedSource) -> Result<Observed> {
    match src {
        ObservedSource::TraceDir(dir) => from_trace_dir(dir),
        ObservedSource::TraceSummary(path) => {
            let text = crate::host::inputs::read_text_limited(path, MAX_OBSERVED_JSON_BYTES)?;
            let v: serde_json::Value =
                serde_json::from_str(text.trim()).with_context(|| format!("{}: not JSON", path.display()))?;
            from_summary_json(&v, &path.display().to_string())
        }
        ObservedSource::SweepRecord(path) => {
            let text = crate::host::inputs::read_text_limited(path, MAX_OBSERVED_JSON_BYTES)?;
            let v: serde_json::Value =
                serde_json::from_str(text.trim()).with_context(|| format!("{}: not JSON", path.display()))?;
            from_record_json(&v, &path.display().to_string())
        }
        ObservedSource::Loaded(o) => Ok(o.clone()),
        ObservedSource::LoadedVulkan(_) | ObservedSource::Verified(_) => {
            bail!("Vulkan pipelines cannot be compared with a CUDA/HIP prediction")
        }
    }
}

pub fn from_trace_dir(dir: &Path) -> Result<Observed> {
    let read = crate::trace::read_dir_folded(dir)?;
    let no_trace = read.traces.is_empty();
    let summary = crate::observe::trace_summary::summarise(dir, read.traces, &read.problems, None);
    let mut notes: Vec<String> =
        summary.problems.iter().map(|p| format!("unreadable trace file left out: {p}")).collect();
    if no_trace {
        notes.push(format!("no trace file in {}", dir.display()));
    }
    Ok(Observed {
        kind: "trace-dir".into(),
        path: dir.display().to_string(),
        run_id: None,
        files: summary.processes.iter().map(|p| p.file.clone()).collect(),
        kernels: summary.kernels.iter().map(|k| classify(&k.name, k.launches.saturating_sub(k.errors))).collect(),
        complete: true,
        counts_lower_bound: summary.counts_are_lower_bounds,
        notes,
    })
}

/// A `backscope trace --json` summary (schema backscope.trace-summary/1).
pub fn from_summary_json(v: &serde_json::Value, path: &str) -> Result<Observed> {
    let Some(kernels) = v.get("kernels").and_then(|k| k.as_array()) else {
        bail!("{path}: no `kernels` array: not a `backscope trace --json` summary");
    };
    let mut out = Vec::new();
    for (i, k) in kernels.iter().enumerate() {
        let name = k.get("name").and_then(|n| n.as_str());
        let launches = k.get("launches").and_then(|n| n.as_u64());
        let (Some(name), Some(launches)) = (name, launches) else {
            bail!("{path}: kernels[{i}] lacks a name or a launch count");
        };
        let errors = k.get("errors").and_then(|n| n.as_u64()).unwrap_or(0);
        out.push(classify(name, launches.saturating_sub(errors)));
    }
    let files = v
        .get("processes")
        .and_then(|p| p.as_array())
        .map(|ps| ps.iter().filter_map(|p| p.get("file")?.as_str().map(str::to_string)).collect())
        .unwrap_or_default();
    Ok(Observed {
        kind: "trace-summary".into(),
        path: path.to_string(),
        run_id: None,
        files,
        kernels: out,
        complete: true,
        counts_lower_bound: v.get("counts_are_lower_bounds").and_then(|b| b.as_bool()).unwrap_or(false),
        notes: Vec::new(),
    })
}

/// A sweep record (its `trace` field) or a bare `RecordTrace`.
pub fn from_record_json(v: &serde_json::Value, path: &str) -> Result<Observed> {
    let run_id = v.get("run_id").and_then(|r| r.as_str()).map(str::to_string);
    let trace_value = v.get("trace").unwrap_or(v);
    if trace_value.is_null() {
        bail!("{path}: the record has no trace (run the sweep with --trace)");
    }
    let t: RecordTrace = serde_json::from_value(trace_value.clone())
        .with_context(|| format!("{path}: not a sweep record with a `trace` field, nor a record trace"))?;
    Ok(from_record_trace(&t, path, run_id))
}

pub fn from_record_trace(t: &RecordTrace, path: &str, run_id: Option<String>) -> Observed {
    let kernels: Vec<ObservedKernel> =
        t.kernels.iter().map(|k| classify(&k.name, k.launches.saturating_sub(k.errors))).collect();
    // Where the record says that neither the dispatch observer nor the Vulkan layer was in the server, an empty
    // kernel list is no evidence that nothing ran on the GPU.
    let blind = t.observer_loaded == Some(false) && t.vulkan_layer != Some(true);
    let complete = t.distinct_kernels <= kernels.len() as u64 && !blind;
    let mut notes = t.notes.clone();
    if blind {
        notes.push("neither the dispatch observer nor the Vulkan layer was loaded in the server".into());
    }
    if !complete {
        notes.push(format!(
            "the record lists the {} most launched of {} distinct kernels: a kernel missing from the list may still have run",
            kernels.len(),
            t.distinct_kernels
        ));
    }
    Observed {
        kind: "sweep-record".into(),
        path: path.to_string(),
        run_id,
        files: t.files.clone(),
        kernels,
        complete,
        counts_lower_bound: false,
        notes,
    }
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
        read_as: ReadAs::CudaKernel,
        name: name.to_string(),
        demangled: d.demangled,
        shaders: Vec::new(),
        family: d.family.to_string(),
        ggml_type,
        ncols,
        op: None,
        helper: false,
        launches,
    }
}

#[cfg(test)]
#[path = "observed_tests.rs"]
mod tests;
