//! `sweep --dry-run`: what a schedule would run, in words — each endpoint, the command lines of the servers it
//! would start (with port 0 for the port chosen at start), the trace settings, and every cell key.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use super::cells::{Schedule, Target};

pub fn describe(schedule: &Schedule) -> String {
    let mut out = String::new();
    // Endpoints in plan order: the order of their first cells.
    let mut endpoints: Vec<&str> = Vec::new();
    for c in &schedule.cells {
        if !endpoints.contains(&c.endpoint.as_str()) {
            endpoints.push(&c.endpoint);
        }
    }
    for name in endpoints {
        let cells: Vec<&Target> = schedule.cells.iter().filter(|c| c.endpoint == name).map(|c| &c.target).collect();
        match cells[0] {
            Target::External(x) => {
                let api = x.api.map(|a| a.to_string()).unwrap_or_else(|| "detected per cell".into());
                let _ = writeln!(out, "endpoint {name}: external {} (api: {api})", x.url);
                if let Some(l) = &x.log_file {
                    let _ = writeln!(out, "  log file: {}", l.display());
                }
                if let Some(d) = &x.trace_dir {
                    let _ = writeln!(out, "  --trace: trace files read from {}", d.display());
                }
            }
            Target::Managed(first) => {
                let _ = writeln!(out, "endpoint {name}: managed {:?}", first.launch.preset);
                let mut seen = BTreeSet::new();
                for t in &cells {
                    let Target::Managed(m) = t else { continue };
                    let ps = m.launch.process(0);
                    let env: String = ps.env.iter().map(|(k, v)| format!("{k}={v} ")).collect();
                    let line = format!("{env}{}", ps.argv().join(" "));
                    if seen.insert(line.clone()) {
                        let _ = writeln!(out, "  {line}");
                    }
                }
                let _ = writeln!(out, "  (port 0 stands for the free port chosen at start)");
                if let Some(o) = &schedule.observer {
                    let _ = writeln!(
                        out,
                        "  --trace: LD_PRELOAD={} BACKSCOPE_TRACE_DIR=<run dir>/traces/sNNN-{} BACKSCOPE_TRACE_INTERVAL_MS={}",
                        o.library.display(),
                        first.file_stem,
                        o.interval_ms
                    );
                    if let Some(manifest) = &o.vulkan_manifest {
                        let vars = crate::observe::observers::layer_env(manifest, |_| None);
                        let vars: Vec<String> = vars.iter().map(|(k, v)| format!("{k}={v}")).collect();
                        let _ = writeln!(out, "  --trace (Vulkan): {}", vars.join(" "));
                    }
                }
            }
        }
    }
    let _ = writeln!(out, "{} cells:", schedule.cells.len());
    for c in &schedule.cells {
        let _ = writeln!(out, "  {:5} {}", c.seq, c.key);
    }
    out
}
