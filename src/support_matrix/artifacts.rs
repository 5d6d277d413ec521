//! Layer 3, shipped artifacts: whether the vendor libraries in the install carry per-arch data for the GPU (rocBLAS
//! Tensile files, MIOpen databases), from a scan of the install or a rocBLAS error in a log.

use std::path::Path;

use super::logs::{processor, same_gpu, FactKind, LogEvidence};
use super::rows::{Layer, LayerRow, Status};
use crate::evidence::{Confidence, Source};
use crate::gpu::arch::DeviceArch;
use crate::gpu::binaries::ScanReport;

/// MIOpen database arch names carry the CU count after the processor (`gfx90a68.kdb`, `gfx906_60.HIP.fdb.txt`).
pub(super) fn miopen_arch_matches(db_arch: &str, p: &str) -> bool {
    db_arch
        .strip_prefix(p)
        .is_some_and(|rest| rest.is_empty() || rest.bytes().all(|b| b.is_ascii_digit()) && rest.len() == 2)
}

/// Up to `n` files of a vendor library directory that are for processor `p`.
pub(super) fn files_for(dir: &str, p: &str, n: usize) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|name| crate::gpu::binaries::tree::arch_in_name(name).is_some_and(|a| a == p))
        .collect();
    names.sort();
    names.truncate(n);
    names.into_iter().map(|n| Path::new(dir).join(n).display().to_string()).collect()
}

pub(super) fn is_rocblas(library: &str) -> bool {
    let l = library.to_ascii_lowercase();
    l.contains("rocblas") && !l.contains("rocblaslt")
}

pub(super) fn shipped_artifacts(arch: &DeviceArch, scan: Option<&ScanReport>, logs: &[LogEvidence]) -> LayerRow {
    let layer = Layer::ShippedArtifacts;
    let DeviceArch::Amd { id } = arch else {
        return LayerRow::no_input(
            layer,
            "per-arch vendor library data (Tensile files) is an AMD matter; not checked for NVIDIA",
        );
    };
    let p = processor(id);
    // A rocBLAS error in a log is rocBLAS's own statement that the install lacks its library for the arch.
    let mut rocblas_errors = Vec::new();
    let mut blaslt_errors = Vec::new();
    for log in logs {
        for f in &log.facts {
            if let FactKind::BlasError { library, arch: Some(a) } = &f.kind {
                if same_gpu(a, arch) {
                    if is_rocblas(library) { &mut rocblas_errors } else { &mut blaslt_errors }.push(log.fact_source(f));
                }
            }
        }
    }
    let mut notes = Vec::new();
    let mut scan_sources = Vec::new();
    let (mut rocblas_with, mut rocblas_without) = (Vec::new(), Vec::new());
    if let Some(scan) = scan {
        for v in &scan.vendor_blas {
            let n = v.files_per_arch.get(p).copied().unwrap_or(0);
            let co = v.code_objects_per_arch.get(p).copied().unwrap_or(0);
            let fallback = v.fallback_per_arch.get(p).copied().unwrap_or(0);
            if n > 0 {
                for f in files_for(&v.path, p, 3) {
                    scan_sources.push(Source::file(f, None, None, format!("{} library file for {p}", v.library)));
                }
            } else {
                let others: Vec<&str> = v.files_per_arch.keys().map(String::as_str).collect();
                scan_sources.push(Source::file(
                    &v.path,
                    None,
                    None,
                    format!("{} library dir: files for {}", v.library, others.join(", ")),
                ));
            }
            let text = if n > 0 {
                format!(
                    "{} {} ships {n} file(s) for {p} ({co} code object(s){})",
                    v.library,
                    v.path,
                    if fallback > 0 { format!(", {fallback} fallback") } else { String::new() }
                )
            } else {
                format!("{} {} ships nothing for {p}", v.library, v.path)
            };
            if v.library == "rocblas" {
                if n > 0 { &mut rocblas_with } else { &mut rocblas_without }.push(text);
            } else {
                notes.push(text);
            }
        }
        let dbs: Vec<_> = scan.miopen.iter().filter(|d| miopen_arch_matches(&d.arch, p)).collect();
        if !dbs.is_empty() {
            let lines: u64 = dbs.iter().filter_map(|d| d.lines).sum();
            notes.push(format!("MIOpen ships {} database file(s) for {p} ({lines} lines)", dbs.len()));
            for d in dbs.iter().take(2) {
                scan_sources.push(Source::file(&d.path, None, Some(d.size), format!("MIOpen database for {}", d.arch)));
            }
        }
    }
    let tail = if notes.is_empty() { String::new() } else { format!("; {}", notes.join("; ")) };
    let row = if !rocblas_errors.is_empty() {
        LayerRow::new(
            layer,
            Status::Blocks,
            Confidence::Confirmed,
            format!(
                "rocBLAS reported that the runtime's install has no Tensile library for {p}: its GEMMs (ggml's BLAS path) cannot run there{}{tail}",
                if rocblas_with.is_empty() {
                    String::new()
                } else {
                    format!("; the scanned install differs ({}): the log's runtime used another rocBLAS", rocblas_with.join("; "))
                }
            ),
        )
        .basis("log")
        .sources(rocblas_errors)
    } else if !rocblas_with.is_empty() {
        LayerRow::new(layer, Status::Allows, Confidence::Confirmed, format!("{}{tail}", rocblas_with.join("; ")))
    } else if !rocblas_without.is_empty() {
        LayerRow::new(
            layer,
            Status::Blocks,
            Confidence::Confirmed,
            format!(
                "{}: rocBLAS would fail with 'Cannot read …TensileLibrary.dat … for GPU arch : {p}'{tail}",
                rocblas_without.join("; ")
            ),
        )
    } else if !blaslt_errors.is_empty() {
        LayerRow::new(
            layer,
            Status::Unknown,
            Confidence::Confirmed,
            format!("hipBLASLt reported that the install has no Tensile library for {p}; the log alone does not show whether that stopped the runtime (rocBLAS is ggml's GEMM path){tail}"),
        )
        .basis("log")
        .sources(blaslt_errors.clone())
    } else if scan.is_some() {
        let msg = if notes.is_empty() {
            "no rocBLAS library directory in the scanned tree (the runtime may use the system's)".to_string()
        } else {
            format!("no rocBLAS library directory in the scanned tree{tail}")
        };
        LayerRow::new(layer, Status::Unknown, Confidence::Unresolved, msg)
    } else {
        return LayerRow::no_input(layer, "no install scanned (--install DIR) and no rocBLAS error in a log");
    };
    let row = if scan.is_some() && (!scan_sources.is_empty() || row.basis.is_empty()) {
        row.basis("install scan")
    } else {
        row
    };
    row.sources(blaslt_errors).sources(scan_sources)
}

/// Libraries inside vendor BLAS directories are layer 3's business, not the runtime's binaries.
pub(super) fn in_vendor_dir(scan: &ScanReport, path: &str) -> bool {
    scan.vendor_blas.iter().any(|v| path.starts_with(&format!("{}/", v.path)))
}
