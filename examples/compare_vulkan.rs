//! Compares `backscope trace --json` of a Vulkan llama.cpp run with ggml-vulkan's own GGML_VK_PERF_LOGGER output
//! of the same run, through the accounting of `backscope::observe::vulkan::counts` (graph nodes against dispatches:
//! per-token MUL_MAT_ID dispatches, count_experts, helpers, fused top-k groups). The GPU validation
//! (bench/gpu/validate_vulkan.sh) runs it; the lavapipe tests use the same module.
//!
//!     cargo build --release --example compare_vulkan
//!     compare_vulkan SUMMARY.json PERF.log [SUMMARY.json PERF.log …]
//!
//! SUMMARY.json: the trace's `--json` output (its last line is read). PERF.log: the run's standard error, holding
//! the perf logger's `Vulkan Timings:` blocks. Prints a headline and a line per op for each pair, then one JSON line
//! (a list: per pair its files, `equal`, `headline`, the per-op accounting, unmapped pipelines and the devices).
//! Exit status 1 when a pair differs, 2 when a file cannot be read.

use std::path::Path;
use std::process::ExitCode;

use anyhow::{anyhow, Context, Result};
use backscope::observe::vulkan::counts::{account, parse_perf_logger};
use serde_json::{json, Value};

/// Largest file read (a trace summary or a perf log of a long run).
const MAX_BYTES: u64 = 256 << 20;

fn compare(summary_path: &Path, perf_path: &Path) -> Result<Value> {
    let text = backscope::host::inputs::read_text_limited(summary_path, MAX_BYTES)?;
    let last = text.trim_end().rsplit('\n').next().unwrap_or_default();
    let summary: Value =
        serde_json::from_str(last).with_context(|| format!("{}: last line is no JSON", summary_path.display()))?;
    let kernels = summary["kernels"].as_array().ok_or_else(|| {
        anyhow!("{}: no `kernels` list (a `backscope trace --json` summary?)", summary_path.display())
    })?;
    let rows: Vec<(&str, u64)> = kernels
        .iter()
        .filter(|k| k["api"] == "vulkan")
        .filter_map(|k| Some((k["name"].as_str()?, k["launches"].as_u64()?)))
        .collect();
    let perf = backscope::host::inputs::read_text_limited(perf_path, MAX_BYTES)?;
    let entries = parse_perf_logger(&perf);
    let acc = account(&entries, rows);
    println!("{}: {}", summary_path.display(), acc.headline());
    for line in acc.lines() {
        println!("  {line}");
    }
    let devices = summary.get("devices").cloned().unwrap_or(Value::Null);
    for d in devices.as_array().into_iter().flatten() {
        println!(
            "  device {} ({} {}): int dot {}, coopmat {}, subgroup {}",
            d["name"], d["driver"], d["driver_info"], d["integer_dot"], d["cooperative_matrix"], d["subgroup_size"]
        );
    }
    Ok(json!({
        "summary": summary_path.display().to_string(),
        "perf_log": perf_path.display().to_string(),
        "equal": acc.equal(),
        "headline": acc.headline(),
        "ops": acc.ops,
        "unmapped": acc.unmapped,
        "devices": devices,
    }))
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.is_empty() || !args.len().is_multiple_of(2) {
        eprintln!("usage: compare_vulkan SUMMARY.json PERF.log [SUMMARY.json PERF.log …]");
        return ExitCode::from(2);
    }
    let (mut results, mut all_equal) = (Vec::new(), true);
    for pair in args.chunks(2) {
        match compare(Path::new(&pair[0]), Path::new(&pair[1])) {
            Ok(r) => {
                all_equal &= r["equal"] == true;
                results.push(r);
            }
            Err(e) => {
                eprintln!("compare_vulkan: {e:#}");
                return ExitCode::from(2);
            }
        }
    }
    println!("{}", Value::Array(results));
    if all_equal {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
