//! A scan report as a document: with `--arch`, the answer for that GPU first (its verdict claim, then what each
//! library can do on it); then the other claims; then the tables (libraries, the arch × library coverage,
//! dependencies, vendor BLAS directories, kernels with `--kernels`, the instruction mix with `--disasm`), problems,
//! and what was scanned.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;

use super::records::{ArchAnswer, Dependency, FileRecord, KernelRecord};
use super::scan_report::ScanReport;
use crate::evidence::Claim;
use crate::output::{Collapse, Column, Document, Render, Span, Table, Text};

/// Rows terminal output shows of the long tables (`--all`: every row).
const LIBRARY_ROWS: usize = 20;
const COVERAGE_ROWS: usize = 24;
const KERNEL_ROWS: usize = 40;
const PROBLEM_ROWS: usize = 50;
/// Claims terminal output shows after an `--arch` answer (the inventory of every library; `--all`: every claim).
const CLAIMS_AFTER_ANSWER: usize = 12;

/// Verdicts in the order the `--arch` table lists them: what can run on the GPU first, "nothing" last.
fn verdict_rank(verdict: &str) -> u8 {
    match verdict {
        "ggml-kernels" => 0,
        "jit-from-ptx" => 1,
        "depends-on-mode" => 2,
        "vendor-blas" => 3,
        "gpu-code" => 4,
        _ => 5,
    }
}

/// What `backscope scan` prints.
#[derive(Debug)]
pub struct ScanView<'a> {
    pub report: &'a ScanReport,
    /// The per-kernel table (`--kernels`).
    pub kernels: bool,
}

impl Render for ScanView<'_> {
    fn write_json(&self, out: &mut dyn Write) -> std::io::Result<()> {
        // serde_json writes a few bytes at a time; a concrete buffer here keeps those writes inlined instead of
        // one dynamic call each (a scan with --kernels is millions of them), and passes `out` 64 KiB at a time.
        let mut buffered = std::io::BufWriter::with_capacity(1 << 16, out);
        serde_json::to_writer(&mut buffered, self.report)?;
        writeln!(buffered)?;
        buffered.flush()
    }

    fn document(&self) -> Document {
        document(self.report, self.kernels)
    }
}

fn top_families(f: &BTreeMap<String, u64>, n: usize) -> String {
    let mut v: Vec<_> = f.iter().filter(|(k, _)| k.as_str() != "other").collect();
    v.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    let mut s: Vec<String> = v.iter().take(n).map(|(k, c)| format!("{k} {c}")).collect();
    if v.len() > n {
        s.push("…".into());
    }
    s.join(", ")
}

fn file_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// A file's name, linked to the file where the format links.
fn file_cell(path: &str) -> Text {
    Text(vec![Span::Link { text: file_name(path).to_string(), target: path.to_string() }])
}

pub fn document(report: &ScanReport, kernels: bool) -> Document {
    let title = match &report.arch {
        Some(a) => format!("backscope scan --arch {a}: {}", report.roots.join(" ")),
        None => format!("backscope scan: {}", report.roots.join(" ")),
    };
    let mut doc = Document::new(title);
    let arch_prefix = report.arch_answer.as_ref().map(|a| format!("scan.arch.{}.", a.arch));
    let is_arch_claim = |id: &str| arch_prefix.as_deref().is_some_and(|p| id.starts_with(p));
    if let Some(a) = &report.arch_answer {
        let arch_claims: Vec<_> = report.claims.iter().filter(|c| is_arch_claim(&c.id)).cloned().collect();
        arch_section(&mut doc, a, arch_claims);
    }
    let other: Vec<_> = report.claims.iter().filter(|c| !is_arch_claim(&c.id)).cloned().collect();
    if !other.is_empty() {
        doc.heading(2, "Claims");
        let list = crate::output::ClaimList::new(other);
        doc.push(if report.arch_answer.is_some() { list.collapse(CLAIMS_AFTER_ANSWER) } else { list });
    }
    let gpu_files: Vec<_> = report.files.iter().filter(|f| f.has_gpu_code() || f.backend.is_some()).collect();
    if !gpu_files.is_empty() {
        doc.heading(2, "Libraries");
        doc.push(library_table(&gpu_files));
    }
    if !report.coverage.is_empty() {
        doc.heading(2, "Coverage (GPU arch × library)");
        doc.push(coverage_table(report));
    }
    let deps: Vec<_> = report
        .files
        .iter()
        .filter(|f| f.backend.is_some())
        .flat_map(|f| f.dependencies.iter().map(move |d| (f, d)))
        .filter(|(_, d)| d.resolved.is_none() || (d.depth == 1 && !matches!(d.via.as_str(), "ld.so.conf" | "default")))
        .collect();
    if !deps.is_empty() {
        doc.heading(2, "Dependencies of ggml backends (missing ones, and direct ones found outside the system dirs)");
        doc.push(dependency_table(&deps));
    }
    if !report.vendor_blas.is_empty() {
        doc.heading(2, "Vendor BLAS libraries");
        doc.push(vendor_table(report));
    }
    if kernels {
        doc.heading(2, "Kernels");
        doc.push(kernel_table(report));
    }
    if let Some(d) = &report.disasm {
        doc.blocks.extend(crate::gpu::binaries::disasm::view::blocks(d, kernels || d.kernel_pattern.is_some()));
    }
    if !report.problems.is_empty() {
        doc.heading(2, format!("Problems ({})", report.problems.len()));
        doc.push(problem_table(report));
    }
    let s = &report.stats;
    doc.paragraph(format!(
        "scanned {} files ({} with records, {:.1} MB) in {:.0} ms",
        s.files_seen,
        s.files_with_records,
        s.bytes_scanned as f64 / 1e6,
        s.elapsed_ms
    ));
    doc
}

/// The answer for `--arch`: the verdict over all libraries first, then each library's, and their table.
fn arch_section(doc: &mut Document, a: &ArchAnswer, mut arch_claims: Vec<Claim>) {
    doc.heading(2, format!("On {}", a.arch));
    arch_claims.sort_by_key(|c| !c.id.ends_with(".summary"));
    doc.claims(&arch_claims);
    let mut t = Table::new(vec![
        Column::label("library"),
        Column::keep("verdict"),
        Column::text("families"),
        Column::text("note"),
    ])
    .collapse(Collapse::Head(LIBRARY_ROWS));
    let mut rows: Vec<(u8, Vec<Text>)> = a
        .libraries
        .iter()
        .map(|l| {
            let row =
                vec![file_cell(&l.path), l.verdict.into(), top_families(&l.families, 6).into(), l.note.clone().into()];
            (verdict_rank(l.verdict), row)
        })
        .collect();
    for v in &a.vendor_blas {
        let verdict = if v.files_for_arch > 0 { "vendor-blas" } else { "nothing" };
        let row = vec![
            format!("{} ({})", v.library, v.path).into(),
            verdict.into(),
            format!("{} files, {} code objects", v.files_for_arch, v.code_objects_for_arch).into(),
            Text::default(),
        ];
        rows.push((verdict_rank(verdict), row));
    }
    // Stable: within a verdict, the scan's order.
    rows.sort_by_key(|(rank, _)| *rank);
    for (_, row) in rows {
        t.row_text(row);
    }
    doc.push(t);
}

/// Each file with GPU code or a ggml backend: what code it carries, for which targets, and its main families.
fn library_table(gpu_files: &[&FileRecord]) -> Table {
    let mut t = Table::new(vec![
        Column::label("library"),
        Column::text("backend"),
        Column::text("GPU code"),
        Column::text("targets"),
        Column::number("kernels"),
        Column::text("main families"),
    ])
    .collapse(Collapse::Head(LIBRARY_ROWS));
    for f in gpu_files {
        let mut targets = BTreeSet::new();
        let mut kernels = 0;
        let mut fams = BTreeMap::new();
        let mut code = String::new();
        if let Some(a) = &f.amdgpu {
            code = format!(
                "{} bundles{}, {} code objects",
                a.bundles,
                if a.compressed_bundles > 0 { format!(" ({} CCOB)", a.compressed_bundles) } else { String::new() },
                a.code_objects.len()
            );
            for co in &a.code_objects {
                targets.insert(co.target.clone());
                kernels += co.kernel_count;
                for (k, v) in &co.families {
                    *fams.entry(k.clone()).or_default() += v;
                }
            }
        }
        if let Some(v) = &f.vulkan {
            let variants: Vec<String> = v.variants.iter().map(|(k, n)| format!("{k} {n}")).collect();
            code = format!(
                "{} SPIR-V shaders{}",
                v.shaders,
                if variants.is_empty() { String::new() } else { format!(" ({})", variants.join(", ")) }
            );
            targets.insert("spirv".to_string());
            kernels += v.shaders;
            for (k, n) in &v.families {
                *fams.entry(k.clone()).or_default() += n;
            }
        }
        if let Some(c) = &f.cuda {
            code = format!("{} fatbin containers, {} entries", c.containers, c.entries.len());
            for e in &c.entries {
                targets.insert(e.target.clone());
                kernels += e.kernel_count;
                for (k, v) in &e.families {
                    *fams.entry(k.clone()).or_default() += v;
                }
            }
        }
        let backend = f.backend.as_ref().map(|b| format!("{} ({})", b.name, b.by)).unwrap_or_else(|| "-".into());
        t.row_text(vec![
            file_cell(&f.path),
            backend.into(),
            code.into(),
            targets.into_iter().collect::<Vec<_>>().join(" ").into(),
            kernels.to_string().into(),
            top_families(&fams, 5).into(),
        ]);
    }
    t
}

/// The GPU arch × library matrix.
fn coverage_table(report: &ScanReport) -> Table {
    let mut t = Table::new(vec![
        Column::keep("arch"),
        Column::label("library"),
        Column::keep("content"),
        Column::number("code objects"),
        Column::number("kernels"),
        Column::text("families"),
    ])
    .collapse(Collapse::Head(COVERAGE_ROWS));
    for c in &report.coverage {
        t.row([
            c.arch.clone(),
            c.library.clone(),
            c.content.to_string(),
            c.code_objects.to_string(),
            c.kernels.to_string(),
            top_families(&c.families, 6),
        ]);
    }
    t
}

/// Dependencies of ggml backends that are missing, or direct ones found outside the system directories.
fn dependency_table(deps: &[(&FileRecord, &Dependency)]) -> Table {
    let mut t = Table::new(vec![
        Column::label("library"),
        Column::label("needs"),
        Column::label("needed by"),
        Column::label("resolved"),
        Column::keep("via"),
    ])
    .collapse(Collapse::Head(LIBRARY_ROWS));
    for (f, d) in deps {
        t.row([
            file_name(&f.path).to_string(),
            d.name.clone(),
            file_name(&d.needed_by).to_string(),
            d.resolved.clone().unwrap_or_else(|| "NOT FOUND".into()),
            d.via.clone(),
        ]);
    }
    t
}

/// Vendor BLAS library directories and their files per arch.
fn vendor_table(report: &ScanReport) -> Table {
    let mut t =
        Table::new(vec![Column::label("vendor library dir"), Column::number("files"), Column::text("files per arch")]);
    for v in &report.vendor_blas {
        let per: Vec<String> = v.files_per_arch.iter().map(|(a, n)| format!("{a} {n}")).collect();
        t.row([format!("{} ({})", v.library, v.path), v.files.to_string(), per.join(", ")]);
    }
    t
}

/// What could not be decoded, by file and offset.
fn problem_table(report: &ScanReport) -> Table {
    let mut t = Table::new(vec![
        Column::keep("severity"),
        Column::label("file"),
        Column::keep("offset"),
        Column::text("problem"),
    ])
    .collapse(Collapse::Head(PROBLEM_ROWS));
    for p in &report.problems {
        t.row([
            format!("{:?}", p.severity),
            p.path.clone(),
            p.offset.map(|o| format!("{o:#x}")).unwrap_or_default(),
            p.message.clone(),
        ]);
    }
    t
}

fn kernel_table(report: &ScanReport) -> Table {
    let mut t = Table::new(vec![
        Column::label("library"),
        Column::keep("target"),
        Column::label("kernel"),
        Column::keep("family"),
        Column::keep("type"),
        Column::number("VGPR"),
        Column::number("SGPR"),
        Column::number("AGPR"),
        Column::number("spills v/s"),
        Column::number("LDS/smem"),
        Column::number("scratch"),
        Column::number("wave"),
        Column::number("max WG"),
        Column::number("regs"),
    ])
    .collapse(Collapse::Head(KERNEL_ROWS));
    let mut add = |lib: &str, target: &str, k: &KernelRecord| {
        let opt = |v: Option<u64>| v.map(|v| v.to_string()).unwrap_or_else(|| "-".into());
        let spills = match (k.vgpr_spills, k.sgpr_spills) {
            (None, None) => "-".to_string(),
            (v, s) => format!("{}/{}", opt(v), opt(s)),
        };
        t.row([
            lib.to_string(),
            target.to_string(),
            k.demangled.to_string(),
            k.family.to_string(),
            k.ggml_type.unwrap_or("-").to_string(),
            opt(k.vgpr),
            opt(k.sgpr),
            opt(k.agpr),
            spills,
            opt(k.shared_bytes),
            opt(k.scratch_bytes),
            opt(k.wavefront_size),
            opt(k.max_threads),
            opt(k.registers),
        ]);
    };
    for f in &report.files {
        if let Some(a) = &f.amdgpu {
            for co in &a.code_objects {
                for k in co.kernels.iter().flatten() {
                    add(file_name(&f.path), &co.target, k);
                }
            }
        }
        if let Some(c) = &f.cuda {
            for e in &c.entries {
                for k in e.kernels.iter().flatten() {
                    add(file_name(&f.path), &e.target, k);
                }
            }
        }
    }
    t
}
