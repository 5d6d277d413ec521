//! The capability claims of a sweep run's Vulkan traces: every device the Vulkan layer recorded below the run's
//! `traces/`, held against the libraries its pipelines came from (`crate::observe::vulkan::capability`), with ggml's
//! own device line from the server log of the same start.

use std::path::{Path, PathBuf};

use crate::evidence::Claim;
use crate::observe::vulkan::capability;
use crate::run::format::run_dir::RunDir;

/// Trace directories read below a sweep run's `traces/`, and Vulkan traces kept in all (one per server process;
/// each costs its kernel table, so thousands of planted files do not add up).
const MAX_RUN_TRACE_DIRS: usize = 256;
const MAX_RUN_TRACES: usize = 4096;

/// Capability claims for the Vulkan traces of a sweep run (`RUN_DIR/traces/*/trace-*.jsonl`): every device
/// recorded, against the libraries its pipelines came from, with the dispatches of all traced requests.
pub fn run_claims(id_prefix: &str, run_dir: &Path) -> Vec<Claim> {
    let run_dir = RunDir::new(run_dir);
    let Ok(listing) = std::fs::read_dir(run_dir.traces_dir()) else { return Vec::new() };
    let mut dirs: Vec<PathBuf> =
        listing.flatten().map(|e| e.path()).filter(|p| p.is_dir()).take(MAX_RUN_TRACE_DIRS).collect();
    dirs.sort();
    let mut traces = Vec::new();
    let mut ggml_lines = Vec::new();
    for d in dirs {
        if traces.len() >= MAX_RUN_TRACES {
            break;
        }
        let Ok(read) = crate::trace::read_dir_folded(&d) else { continue };
        let before = traces.len();
        traces.extend(read.traces.into_iter().filter(|t| t.devices.values().any(|d| d.api == "vulkan")));
        // The server's log of the same start (`servers/sNNN-NAME.log` beside `traces/sNNN-NAME`) holds ggml's
        // device line.
        if traces.len() > before && ggml_lines.len() < capability::MAX_VULKANINFO_DEVICES {
            if let Some(log) = run_dir.server_log_of_trace(&d) {
                ggml_lines.extend(capability::log_device_lines(&log));
            }
        }
    }
    if traces.is_empty() {
        return Vec::new();
    }
    let observed: Vec<(String, u64)> = crate::trace::Aggregate::of(&traces, crate::trace::Range::All)
        .kernels
        .into_iter()
        .filter(|k| k.api == "vulkan")
        .map(|k| (k.name, k.launches))
        .collect();
    capability::trace_claims(id_prefix, &traces, &observed, &ggml_lines)
}
