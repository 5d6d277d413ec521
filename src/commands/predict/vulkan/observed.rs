//! The Vulkan pipelines a prediction is compared with: loaded from a trace directory, a `backscope trace --json`
//! summary or a sweep record's trace, each pipeline classified from its debug name and the shaders behind it.

use std::path::Path;

use anyhow::{bail, Context, Result};

use super::super::observed::{ObservedKernel, ReadAs, VkObservation};
use super::super::options::ObservedSource;
use crate::run::format::record::RecordTrace;

/// A pipeline named `name` (the shaders behind it, when the trace knows them) that ran `launches` times.
fn observed(name: &str, shaders: Vec<String>, launches: u64) -> ObservedKernel {
    let d = crate::observe::vulkan::describe(name, shaders.first().map(String::as_str));
    ObservedKernel {
        read_as: ReadAs::VulkanPipeline,
        name: name.to_string(),
        demangled: name.to_string(),
        shaders,
        family: d.family.to_string(),
        ggml_type: d.ggml_type.map(str::to_string),
        ncols: None,
        op: d.op.map(str::to_string),
        helper: d.helper,
        launches,
    }
}

/// The largest `trace --json` summary or record read.
const MAX_JSON_BYTES: u64 = 64 << 20;

/// The Vulkan pipelines of a sweep record's trace: one request's dispatches (`path` names the record).
pub fn from_record_trace(t: &RecordTrace, path: &str, run_id: &str) -> VkObservation {
    let pipelines: Vec<ObservedKernel> = t
        .kernels
        .iter()
        .filter(|k| k.api == "vulkan")
        .map(|k| observed(&k.name, k.shaders.clone(), k.launches.saturating_sub(k.errors)))
        .collect();
    let mut notes = t.notes.clone();
    let complete = t.distinct_kernels <= t.kernels.len() as u64 && t.cut.is_empty();
    if !complete {
        notes.push(format!(
            "the record lists the {} most dispatched of {} distinct pipelines{}: a pipeline missing from the list may \
             still have run",
            t.kernels.len(),
            t.distinct_kernels,
            if t.cut.is_empty() { "" } else { " and a trace was cut" }
        ));
    }
    if t.vulkan_layer == Some(false) {
        notes.push("the server ran without the Vulkan layer: its dispatches were not observed".into());
    }
    VkObservation {
        kind: "sweep-record".into(),
        path: path.to_string(),
        files: t.files.clone(),
        pipelines,
        per_request: complete && t.vulkan_layer != Some(false),
        complete: complete && t.vulkan_layer != Some(false),
        run_id: Some(run_id.to_string()),
        notes,
    }
}

/// Loads the observed Vulkan pipelines; `library`, the build the pipelines came from when the caller knows it, also
/// names their shaders where the trace's recorded library path is not on this machine.
pub fn load(src: &ObservedSource, library: Option<&Path>) -> Result<VkObservation> {
    match src {
        ObservedSource::TraceDir(dir) => from_trace_dir(dir, library),
        ObservedSource::Verified(v) => from_trace_dir(&v.trace, library),
        ObservedSource::TraceSummary(path) | ObservedSource::SweepRecord(path) => load_json(path),
        ObservedSource::LoadedVulkan(o) => Ok(o.clone()),
        ObservedSource::Loaded(_) => bail!("a loaded CUDA/HIP observation cannot be compared with a Vulkan prediction"),
    }
}

/// The Vulkan pipelines of a trace directory; `library` names their shaders as in [`load`].
fn from_trace_dir(dir: &Path, library: Option<&Path>) -> Result<VkObservation> {
    let read = crate::trace::read_dir_folded(dir).with_context(|| format!("reading {}", dir.display()))?;
    let libraries: Vec<&Path> = library.into_iter().collect();
    let summary =
        crate::observe::trace_summary::summarise_with_libraries(dir, read.traces, &read.problems, None, &libraries);
    Ok(VkObservation {
        kind: "trace-dir".into(),
        path: dir.display().to_string(),
        files: summary.processes.iter().map(|p| p.file.clone()).collect(),
        pipelines: summary
            .kernels
            .iter()
            .filter(|k| k.api == "vulkan")
            .map(|k| observed(&k.name, k.shaders.clone(), k.launches.saturating_sub(k.errors)))
            .collect(),
        per_request: false,
        complete: true,
        run_id: None,
        // The shader libraries the traces name that were not read (a device, a FIFO, past the read budget):
        // the pipelines from them keep their spirv:<hash> names.
        notes: summary
            .claims
            .iter()
            .filter(|c| c.id == crate::observe::trace_summary::claims::LIBRARIES_SKIPPED)
            .map(|c| c.statement.clone())
            .collect(),
    })
}

/// A `backscope trace --json` summary, or a sweep record (or its `trace` field): a record's trace is one request.
fn load_json(path: &Path) -> Result<VkObservation> {
    let text = crate::host::inputs::read_text_limited(path, MAX_JSON_BYTES)?;
    let v: serde_json::Value =
        serde_json::from_str(text.trim()).with_context(|| format!("{}: not JSON", path.display()))?;
    let record_trace = v.get("trace").filter(|t| t.get("window_ns").is_some()).or(v.get("window_ns").map(|_| &v));
    if let Some(t) = record_trace {
        let t: RecordTrace = serde_json::from_value(t.clone())
            .with_context(|| format!("{}: a sweep record's `trace` that does not parse", path.display()))?;
        let run_id = v.get("run_id").and_then(|r| r.as_str()).unwrap_or_default();
        return Ok(from_record_trace(&t, &path.display().to_string(), run_id));
    }
    let Some(kernels) = v.get("kernels").and_then(|k| k.as_array()) else {
        bail!(
            "{}: no `kernels` array (a `backscope trace --json` summary or a sweep record with a trace)",
            path.display()
        );
    };
    let mut pipelines = Vec::new();
    for (i, k) in kernels.iter().enumerate() {
        let (Some(name), Some(n)) =
            (k.get("name").and_then(|n| n.as_str()), k.get("launches").and_then(|n| n.as_u64()))
        else {
            bail!("{}: kernels[{i}] lacks a name or a launch count", path.display());
        };
        let shaders = k
            .get("shaders")
            .and_then(|s| s.as_array())
            .map(|a| a.iter().filter_map(|s| s.as_str().map(str::to_string)).collect())
            .unwrap_or_default();
        let errors = k.get("errors").and_then(|n| n.as_u64()).unwrap_or(0);
        pipelines.push(observed(name, shaders, n.saturating_sub(errors)));
    }
    Ok(VkObservation {
        kind: "trace-summary".into(),
        path: path.display().to_string(),
        files: Vec::new(),
        pipelines,
        per_request: false,
        complete: true,
        run_id: None,
        notes: Vec::new(),
    })
}
