//! Matched runs as execution evidence: the cells of sweep runs grouped by the backend that served them and by
//! num_gpu, with how many succeeded and failed and the records behind each count.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::evidence::Source;
use crate::run::format::record::Record;

/// Records cited per group.
const CITED: usize = 4;

/// Which kind of backend served a cell, from the backend the server log named (`BackendFacts::backend`:
/// `CPU`, `ROCm0 (AMD Radeon …)`, `Vulkan0 (…)`, `CUDA (NVIDIA H100 …)` for imported llama-bench results).
pub fn backend_kind(r: &Record) -> &'static str {
    let Some(b) = r.backend.as_ref().map(|b| b.backend.as_str()) else { return "unknown" };
    let l = b.to_ascii_lowercase();
    if l.starts_with("rocm") || l.starts_with("hip") {
        "rocm"
    } else if l.starts_with("cuda") {
        "cuda"
    } else if l.starts_with("vulkan") {
        "vulkan"
    } else if l.starts_with("metal") || l.starts_with("mtl") {
        "metal"
    } else if l.starts_with("cpu") {
        "cpu"
    } else {
        "unknown"
    }
}

/// Cells of one backend kind and num_gpu.
#[derive(Clone, Debug, Serialize)]
pub struct RunGroup {
    pub backend: &'static str,
    /// Layers offloaded as requested (-1: the runtime decides), not a GPU count.
    pub num_gpu: i64,
    pub ok: u64,
    pub failed: u64,
    /// Failures by outcome (`crash SIGSEGV`, `timeout`, …).
    pub outcomes: BTreeMap<String, u64>,
    pub run_ids: Vec<String>,
    /// The backends as the records name them (`CUDA (NVIDIA H100 80GB HBM3)`, `ROCm0 (AMD Radeon VII)`).
    pub devices: Vec<String>,
    /// Records cited (run id, result.json).
    pub sources: Vec<Source>,
}

/// Group records by (backend kind, num_gpu), in a stable order.
pub fn group(records: &[Record]) -> Vec<RunGroup> {
    let mut groups: BTreeMap<(&'static str, i64), RunGroup> = BTreeMap::new();
    for r in records {
        let kind = backend_kind(r);
        let g = groups.entry((kind, r.num_gpu)).or_insert_with(|| RunGroup {
            backend: kind,
            num_gpu: r.num_gpu,
            ok: 0,
            failed: 0,
            outcomes: BTreeMap::new(),
            run_ids: Vec::new(),
            devices: Vec::new(),
            sources: Vec::new(),
        });
        if let Some(b) = &r.backend {
            if g.devices.len() < CITED && !g.devices.contains(&b.backend) {
                g.devices.push(b.backend.clone());
            }
        }
        if r.is_ok() {
            g.ok += 1;
        } else {
            g.failed += 1;
            *g.outcomes.entry(r.outcome()).or_default() += 1;
        }
        if !g.run_ids.contains(&r.run_id) {
            g.run_ids.push(r.run_id.clone());
        }
        if g.sources.len() < CITED {
            g.sources.push(Source::Run { run_id: r.run_id.clone(), file: Some(r.file.clone()) });
        }
    }
    groups.into_values().collect()
}
