//! Layer 7, Ollama's device filter: since v0.30 (`9db4bdbad`, llama-server as the runner) Ollama drops a GPU at
//! discovery with checks of its own, before any code runs on it, and then serves on the CPU:
//! - an AMD card whose gfx target has no `rocblas/library/TensileLibrary_lazy_<gfx>.dat` in the ROCm library
//!   directory (O `discover/amd.go:115-125` lists the files, `:470` logs `dropping ROCm device — no rocblas support
//!   for gfx target … gfx_target=gfxNNNN`);
//! - a CUDA card whose compute capability is not in the CUDA build's compiled architectures (the `CUDA : ARCHS =`
//!   list of llama-server's system info; O `discover/llama_server.go:292-305`, logs `skipping CUDA device — compute
//!   capability not in compiled architectures … cc=NN0 archs=…`).
//!
//! The install tree predicts it (the Tensile file exists or not; the CUDA backend's fatbin carries the card's sm or
//! not: both the real and the virtual architectures are in the ARCHS list); the log's line confirms it.

use std::path::Path;

use super::logs::{processor, same_gpu, FactKind, LogEvidence};
use super::rows::{Layer, LayerRow, OllamaRelease, Status};
use crate::evidence::{Confidence, Source};
use crate::gpu::arch::DeviceArch;
use crate::gpu::binaries::ScanReport;

/// The first release with these checks, and the commit that brought them (llama-server as the runner).
const FIRST_RELEASE: [u64; 3] = [0, 30, 0];
const INTRODUCED: &str = "9db4bdbad";

/// Upstream of the rule, for the sources.
const AMD_RULE: &str = "ollama/ollama fb30760 discover/amd.go:115-125, :470";
const CUDA_RULE: &str = "ollama/ollama fb30760 discover/llama_server.go:292-305";

/// The GPU a filter line names, as the gate parses GPUs: `gfx1031`, or `cc=610` as `6.1`.
fn logged_gpu(gpu: &str) -> String {
    let digits = gpu.trim();
    if digits.len() >= 3 && digits.bytes().all(|b| b.is_ascii_digit()) {
        let n: u32 = digits.parse().unwrap_or(0);
        return format!("{}.{}", n / 100, (n / 10) % 10);
    }
    digits.to_string()
}

/// Whether a dropped-GPU line is one of Ollama's device-filter lines.
pub fn is_filter_reason(reason: &str) -> bool {
    reason.contains("no rocblas support for gfx target")
        || reason.contains("compute capability not in compiled architectures")
}

/// What the install predicts: `Some((kept, finding, sources))`, or `None` when the scan cannot tell.
fn predicted(arch: &DeviceArch, scan: &ScanReport) -> Option<(bool, String, Vec<Source>)> {
    match arch {
        DeviceArch::Amd { id } => {
            let p = processor(id);
            let dirs: Vec<&str> =
                scan.vendor_blas.iter().filter(|v| v.library == "rocblas").map(|v| v.path.as_str()).collect();
            if dirs.is_empty() {
                return None;
            }
            let file = format!("TensileLibrary_lazy_{p}.dat");
            let found: Vec<String> = dirs
                .iter()
                .map(|d| Path::new(d).join(&file))
                .filter(|f| f.is_file())
                .map(|f| f.display().to_string())
                .collect();
            if let Some(f) = found.first() {
                let src = Source::file(f, None, None, format!("the file Ollama's filter looks for ({p})"));
                Some((true, format!("{f} exists: Ollama's ROCm filter keeps {p}"), vec![src]))
            } else {
                let srcs = dirs
                    .iter()
                    .take(3)
                    .map(|d| Source::file(*d, None, None, format!("rocBLAS library dir: no {file}")))
                    .collect();
                Some((
                    false,
                    format!("no {file} in {}: Ollama drops {p} at discovery and serves on the CPU", dirs.join(", ")),
                    srcs,
                ))
            }
        }
        DeviceArch::Nvidia { sm } => {
            let cuda: Vec<_> = scan
                .files
                .iter()
                .filter(|f| f.backend.as_ref().is_some_and(|b| b.name == "cuda"))
                .filter_map(|f| f.cuda.as_ref().map(|c| (f, c)))
                .collect();
            if cuda.is_empty() {
                return None;
            }
            let mut archs: Vec<u32> = cuda.iter().flat_map(|(_, c)| c.entries.iter().map(|e| e.sm)).collect();
            archs.sort_unstable();
            archs.dedup();
            let list = archs.iter().map(|a| format!("{a}0")).collect::<Vec<_>>().join(",");
            let srcs = cuda
                .iter()
                .take(2)
                .map(|(f, _)| Source::file(&f.path, None, None, format!("CUDA backend compiled for {list}")))
                .collect();
            let kept = archs.contains(sm);
            let finding = if kept {
                format!("the CUDA backend is compiled for sm_{sm} (archs {list}): Ollama's CUDA filter keeps the card")
            } else {
                format!("the CUDA backend's compiled archs ({list}) do not include {sm}0: Ollama skips the card at discovery and serves on the CPU")
            };
            Some((kept, finding, srcs))
        }
        DeviceArch::Unknown(_) => None,
    }
}

/// The layer's row.
pub fn device_filter(
    arch: &DeviceArch,
    scan: Option<&ScanReport>,
    logs: &[LogEvidence],
    ollama: &OllamaRelease,
) -> LayerRow {
    let layer = Layer::DeviceFilter;
    match ollama {
        OllamaRelease::NotOllama => {
            return LayerRow::no_input(layer, "not an Ollama runtime (--ollama none): no Ollama device filter applies");
        }
        OllamaRelease::Release { tag, .. }
            if crate::gpu::knowledge::ollama::parse_release(tag).is_some_and(|v| v < FIRST_RELEASE) =>
        {
            return LayerRow::no_input(
                layer,
                &format!("Ollama {tag} predates these discovery checks (v0.30.0, {INTRODUCED}): its GPUs are judged by layers 2 to 5"),
            );
        }
        _ => {}
    }
    let rule_src = |amd: bool| Source::Rule {
        file: "ollama source".into(),
        rule: if amd { "ROCm device filter".into() } else { "CUDA device filter".into() },
        upstream: if amd { AMD_RULE.into() } else { CUDA_RULE.into() },
    };
    let amd = matches!(arch, DeviceArch::Amd { .. });
    // The log's own line confirms it.
    let mut dropped = Vec::new();
    let mut kept = Vec::new();
    for log in logs {
        for f in &log.facts {
            match &f.kind {
                FactKind::UnsupportedGpu { gpu: Some(g), reason: Some(r), .. }
                    if is_filter_reason(r) && same_gpu(&logged_gpu(g), arch) =>
                {
                    dropped.push(log.fact_source(f));
                }
                FactKind::InferenceCompute { library, compute: Some(c), .. }
                    if !library.as_deref().is_some_and(|l| l.eq_ignore_ascii_case("cpu")) && same_gpu(c, arch) =>
                {
                    kept.push(log.fact_source(f));
                }
                _ => {}
            }
        }
    }
    let prediction = scan.and_then(|s| predicted(arch, s));
    let label = arch.label();
    let row = if !dropped.is_empty() {
        let also = match &prediction {
            Some((false, finding, _)) => format!("; the install agrees: {finding}"),
            Some((true, _, _)) => "; the scanned install would keep it: the log's runtime used another install".into(),
            None => String::new(),
        };
        LayerRow::new(
            layer,
            Status::Blocks,
            Confidence::Confirmed,
            format!(
                "Ollama dropped {label} at discovery with its own check (its log says so): it serves on the CPU{also}"
            ),
        )
        .basis("log")
        .sources(dropped)
    } else if let Some((keeps, finding, srcs)) = prediction {
        let (status, confidence) =
            if keeps { (Status::Allows, Confidence::Inferred) } else { (Status::Blocks, Confidence::Inferred) };
        let seen =
            if kept.is_empty() { String::new() } else { "; the log shows Ollama using it (inference compute)".into() };
        LayerRow::new(layer, status, confidence, format!("{finding}{seen}"))
            .basis("install scan")
            .sources(srcs)
            .sources(kept)
    } else if !kept.is_empty() {
        LayerRow::new(
            layer,
            Status::Allows,
            Confidence::Confirmed,
            format!("Ollama kept {label}: it lists it as an inference compute device"),
        )
        .basis("log")
        .sources(kept)
    } else {
        return LayerRow::no_input(
            layer,
            if amd {
                "no install scanned (--install DIR with lib/ollama/rocm…) and no Ollama discovery line for it in a log"
            } else {
                "no install scanned (--install DIR with the CUDA backend) and no Ollama discovery line for it in a log"
            },
        );
    };
    row.sources([rule_src(amd)])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cc_numbers_read_as_compute_capabilities() {
        // O discover/llama_server.go:242 formats cc.arch as "%d%d0" (major, minor): 6.1 → "610".
        assert_eq!(logged_gpu("610"), "6.1");
        assert_eq!(logged_gpu("1200"), "12.0");
        assert_eq!(logged_gpu("gfx1031"), "gfx1031");
        assert!(is_filter_reason("dropping ROCm device — no rocblas support for gfx target"));
        assert!(!is_filter_reason("amdgpu is not supported (supported types:[gfx1030])"));
    }
}
