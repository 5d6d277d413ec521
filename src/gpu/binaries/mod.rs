//! GPU code in files: read GPU binaries and runtime install trees into typed records, then into claims. The
//! engine under `backscope scan`, and under every command that needs to know what an install contains (`gate`,
//! `doctor`'s runtimes, `maps`' mapped libraries, `report --bundle`, `predict`'s device arch).
//!
//! The pipeline: [`walk`] finds files (no symlink loops, no links out of the roots unless asked, unreadable
//! files reported), [`gpu`] decodes each file's GPU code (AMD offload bundles, CUDA fatbins, standalone code
//! objects) through memory maps that survive truncation ([`input`]),
//! [`tree`] adds the install-tree view (which files are ggml backends, how their `DT_NEEDED` chains
//! resolve, vendor BLAS library directories), and [`coverage`] turns it all into a GPU arch × library
//! matrix, an answer for one `--arch`, and [`Claim`]s; [`disasm`] adds instruction mixes. Everything hostile
//! input could multiply is bounded by the budgets of [`limits`]; reaching one is a problem in the report, not a
//! failure. [`scan_report`] gathers the records, the matrix, the claims and the disassembly into one
//! [`ScanReport`]; [`view`] is its one rendering.

pub mod coverage;
pub mod demangle;
pub mod disasm;
pub mod gpu;
pub mod vulkan;
/// How a scan opens and maps files: the ground-floor [`crate::host::inputs`], which every command uses.
pub use crate::host::inputs as input;
pub mod limits;
pub mod records;
pub mod scan_report;
pub mod tree;
pub mod view;
pub mod walk;

use std::path::PathBuf;
use std::time::Instant;

use rayon::prelude::*;

pub use records::*;
pub use scan_report::{ScanReport, ScanStats, SCHEMA};
pub use view::ScanView;

/// What to scan and how.
#[derive(Clone, Debug, Default)]
pub struct ScanOptions {
    pub paths: Vec<PathBuf>,
    /// Answer for one GPU: `gfx900`, `gfx90a:xnack-`, `sm_86`, `8.6`.
    pub arch: Option<String>,
    /// Keep per-kernel records (names, demangled names, resources).
    pub kernels: bool,
    /// Extra directories the dynamic loader would search (as `LD_LIBRARY_PATH` would add).
    pub library_path: Vec<PathBuf>,
    /// Disassemble the selected code objects (`--disasm`) and report each kernel's instruction mix.
    pub disasm: Option<disasm::DisasmOptions>,
    /// Follow symlinks whose target lies outside every path of `paths` (by default they are reported).
    pub follow_outside: bool,
    /// Budgets on work and memory.
    pub limits: limits::ScanLimits,
}

/// Run a scan. Problems with single files are recorded in the report; the scan itself does not fail.
pub fn scan(opts: &ScanOptions) -> ScanReport {
    let started = Instant::now();
    let mut problems = Vec::new();
    let walked = walk::walk(&opts.paths, opts.follow_outside, &mut problems);
    let results: Vec<(Option<FileRecord>, Vec<Problem>)> =
        walked.files.par_iter().map(|path| gpu::scan_file(path, opts.kernels, &opts.limits)).collect();
    let mut files = Vec::new();
    let mut bytes = 0u64;
    for (record, mut file_problems) in results {
        problems.append(&mut file_problems);
        if let Some(r) = record {
            bytes += r.size;
            files.push(r);
        }
    }
    files.sort_by(|a, b| a.path.cmp(&b.path));
    if opts.kernels {
        demangle::fill_demangled(&mut files, &opts.limits, &mut problems);
    }
    let vendor_blas = tree::vendor_blas_dirs(&walked.files);
    let miopen = tree::miopen_dbs(&walked.files, &mut problems);
    tree::resolve_dependencies(&mut files, &opts.library_path, &opts.limits, &mut problems);
    let arch = opts.arch.as_deref().map(crate::gpu::arch::DeviceArch::parse);
    let coverage = coverage::matrix(&files, &vendor_blas);
    let arch_answer = arch.as_ref().map(|a| coverage::answer(a, &files, &vendor_blas));
    let mut report = ScanReport {
        schema: SCHEMA,
        roots: opts.paths.iter().map(|p| p.display().to_string()).collect(),
        arch: opts.arch.clone(),
        files,
        vendor_blas,
        miopen,
        coverage,
        arch_answer,
        claims: Vec::new(),
        problems,
        stats: ScanStats::default(),
        disasm: None,
    };
    report.claims = coverage::claims(&report);
    if let Some(d) = &opts.disasm {
        let outcome = disasm::disassemble(&report.files, arch.as_ref(), d);
        report.claims.extend(outcome.claims);
        report.problems.extend(outcome.problems);
        report.disasm = Some(outcome.report);
    }
    report.problems.sort_by(|a, b| (&a.path, a.offset).cmp(&(&b.path, b.offset)));
    report.stats = ScanStats {
        files_seen: walked.files.len() as u64,
        files_with_records: report.files.len() as u64,
        bytes_scanned: bytes,
        elapsed_ms: started.elapsed().as_secs_f64() * 1e3,
    };
    report
}
