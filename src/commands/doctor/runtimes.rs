//! Runtimes installed on the usual paths — Ollama's lib dirs, ROCm, CUDA, llama.cpp builds on PATH — and a
//! bounded scan of them: only the ggml GPU backend libraries are decoded (`scan::scan`), and vendor BLAS library
//! directories are listed, not read (a ROCm rocBLAS directory holds gigabytes of kernels; their names say the
//! arch).

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::host::{read_small, Host};
use crate::gpu::binaries::{self as scan, ScanOptions, ScanReport};

/// Directories walked below a runtime root, and entries read per directory.
const MAX_DEPTH: usize = 4;
const MAX_ENTRIES: usize = 512;
/// ggml backend libraries decoded at most.
const MAX_LIBRARIES: usize = 32;

/// One runtime install found.
#[derive(Clone, Debug, Serialize)]
pub struct Runtime {
    /// `ollama`, `rocm`, `cuda`, `llama.cpp`.
    pub kind: &'static str,
    pub path: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Where the version was read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version_source: Option<String>,
    /// ggml GPU backend libraries (HIP, CUDA) under it.
    pub ggml_libraries: Vec<String>,
    /// Vendor BLAS library directories (`rocblas/library`, `hipblaslt/library`).
    pub vendor_dirs: Vec<String>,
}

/// Files and directories below `root`, breadth-first, bounded in depth and width.
fn walk(root: &Path) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let (mut files, mut dirs) = (Vec::new(), Vec::new());
    let mut level = vec![root.to_path_buf()];
    for _ in 0..MAX_DEPTH {
        let mut next = Vec::new();
        for d in &level {
            let mut entries: Vec<PathBuf> =
                std::fs::read_dir(d).into_iter().flatten().flatten().take(MAX_ENTRIES).map(|e| e.path()).collect();
            entries.sort();
            for p in entries {
                // symlink_metadata: a link to a directory is not followed (no loops, no escaping the root).
                match std::fs::symlink_metadata(&p) {
                    Ok(m) if m.is_dir() => {
                        dirs.push(p.clone());
                        next.push(p);
                    }
                    Ok(_) => files.push(p),
                    Err(_) => {}
                }
            }
        }
        level = next;
    }
    (files, dirs)
}

fn is_ggml_gpu_library(p: &Path) -> bool {
    p.file_name().and_then(|n| n.to_str()).is_some_and(|n| {
        (n.starts_with("libggml-hip") || n.starts_with("libggml-cuda") || n.starts_with("libggml-musa"))
            && n.contains(".so")
    })
}

fn vendor_dir(p: &Path) -> bool {
    p.file_name().is_some_and(|n| n == "library")
        && p.parent().and_then(|d| d.file_name()).and_then(|n| n.to_str()).is_some_and(|n| {
            let l = n.to_ascii_lowercase();
            l.starts_with("rocblas") || l.starts_with("hipblaslt")
        })
}

fn runtime_at(kind: &'static str, path: PathBuf) -> Runtime {
    let (files, dirs) = walk(&path);
    Runtime {
        kind,
        path: path.display().to_string(),
        version: None,
        version_source: None,
        ggml_libraries: files.iter().filter(|f| is_ggml_gpu_library(f)).map(|f| f.display().to_string()).collect(),
        vendor_dirs: dirs.iter().filter(|d| vendor_dir(d)).map(|d| d.display().to_string()).collect(),
    }
}

/// What was looked for and not found, for the "no runtime" claim.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RuntimeProbe {
    pub runtimes: Vec<Runtime>,
    pub absent: Vec<String>,
}

/// Look on the usual paths, and for llama.cpp programs in the PATH directories.
pub fn find(host: &Host, path_var: Option<&str>) -> RuntimeProbe {
    let mut out = RuntimeProbe::default();
    for (kind, p) in [
        ("ollama", "/usr/lib/ollama"),
        ("ollama", "/usr/local/lib/ollama"),
        ("rocm", "/opt/rocm"),
        ("cuda", "/usr/local/cuda"),
    ] {
        let dir = host.path(p);
        if !dir.is_dir() {
            out.absent.push(dir.display().to_string());
            continue;
        }
        let mut r = runtime_at(kind, dir.clone());
        match kind {
            "rocm" => {
                let f = dir.join(".info/version");
                r.version = read_small(&f).map(|v| v.trim().to_string()).filter(|v| !v.is_empty());
                r.version_source = r.version.as_ref().map(|_| f.display().to_string());
                // ROCm's own rocBLAS lives in lib/rocblas/library; the walk may have stopped above it.
                let lib = dir.join("lib/rocblas/library");
                if lib.is_dir() && !r.vendor_dirs.contains(&lib.display().to_string()) {
                    r.vendor_dirs.push(lib.display().to_string());
                }
            }
            "cuda" => {
                let f = dir.join("version.json");
                r.version = read_small(&f)
                    .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
                    .and_then(|v| v.get("cuda")?.get("version")?.as_str().map(str::to_string));
                r.version_source = r.version.as_ref().map(|_| f.display().to_string());
            }
            _ => {}
        }
        out.runtimes.push(r);
    }
    let mut seen = Vec::new();
    for dir in path_var.unwrap_or("").split(':').filter(|d| !d.is_empty()) {
        let d = host.path(dir);
        if seen.contains(&d) {
            continue;
        }
        seen.push(d.clone());
        let has = |n: &str| d.join(n).is_file();
        if has("llama-server") || has("llama-cli") || has("llama-bench") {
            let mut r = Runtime {
                kind: "llama.cpp",
                path: d.display().to_string(),
                version: None,
                version_source: None,
                ggml_libraries: Vec::new(),
                vendor_dirs: Vec::new(),
            };
            // Shared builds put the backends next to the programs or in ../lib.
            for lib_dir in [d.clone(), d.join("../lib")] {
                let mut libs: Vec<PathBuf> = std::fs::read_dir(&lib_dir)
                    .into_iter()
                    .flatten()
                    .flatten()
                    .take(MAX_ENTRIES)
                    .map(|e| e.path())
                    .filter(|p| is_ggml_gpu_library(p))
                    .collect();
                libs.sort();
                r.ggml_libraries.extend(libs.iter().map(|p| p.display().to_string()));
            }
            out.runtimes.push(r);
        }
    }
    out
}

/// Scan the ggml GPU libraries of the runtimes found (at most `MAX_LIBRARIES`) and list their vendor BLAS
/// directories. `None` when there is nothing to scan.
pub fn scan_runtimes(runtimes: &[Runtime]) -> Option<ScanReport> {
    let libs: Vec<PathBuf> =
        runtimes.iter().flat_map(|r| r.ggml_libraries.iter()).take(MAX_LIBRARIES).map(PathBuf::from).collect();
    let vendor: Vec<PathBuf> = runtimes.iter().flat_map(|r| r.vendor_dirs.iter()).map(PathBuf::from).collect();
    if libs.is_empty() && vendor.is_empty() {
        return None;
    }
    let mut report = scan::scan(&ScanOptions { paths: libs, ..Default::default() });
    let listed: Vec<PathBuf> =
        vendor.iter().flat_map(|d| std::fs::read_dir(d).into_iter().flatten().flatten().map(|e| e.path())).collect();
    report.vendor_blas = scan::tree::vendor_blas_dirs(&listed);
    report.roots.extend(vendor.iter().map(|d| d.display().to_string()));
    Some(report)
}
