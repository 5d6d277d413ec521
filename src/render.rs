//! Human-readable output: tables for people; `--json` output is the records themselves (serde).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use comfy_table::presets::UTF8_FULL_CONDENSED;
use comfy_table::{ContentArrangement, Table};

use crate::evidence::Claim;
use crate::scan::{KernelRecord, ScanReport};

/// The table style of every human output.
pub(crate) fn table(header: &[&str]) -> Table {
    let mut t = Table::new();
    t.load_style(UTF8_FULL_CONDENSED).set_content_arrangement(ContentArrangement::Dynamic).set_header(header.to_vec());
    t
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

fn short(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

pub fn claims(out: &mut String, claims: &[Claim]) {
    for c in claims {
        let _ = writeln!(out, "[{}] {}", c.confidence, c.statement);
        for s in &c.sources {
            let _ = writeln!(out, "    ← {s}");
        }
    }
}

pub fn scan(report: &ScanReport, kernels: bool) -> String {
    let mut out = String::new();
    let gpu_files: Vec<_> = report.files.iter().filter(|f| f.has_gpu_code() || f.backend.is_some()).collect();
    if !gpu_files.is_empty() {
        let mut t = table(&["library", "backend", "GPU code", "targets", "kernels", "main families"]);
        for f in &gpu_files {
            let mut targets = std::collections::BTreeSet::new();
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
            t.add_row(vec![
                short(&f.path).to_string(),
                backend,
                code,
                targets.into_iter().collect::<Vec<_>>().join(" "),
                kernels.to_string(),
                top_families(&fams, 5),
            ]);
        }
        let _ = writeln!(out, "Libraries\n{t}\n");
    }
    if !report.coverage.is_empty() {
        let mut t = table(&["arch", "library", "content", "code objects", "kernels", "families"]);
        for c in &report.coverage {
            t.add_row(vec![
                c.arch.clone(),
                short(&c.library).to_string(),
                c.content.to_string(),
                c.code_objects.to_string(),
                c.kernels.to_string(),
                top_families(&c.families, 6),
            ]);
        }
        let _ = writeln!(out, "Coverage (GPU arch × library)\n{t}\n");
    }
    if let Some(a) = &report.arch_answer {
        let mut t = table(&["library", "verdict", "families", "note"]);
        for l in &a.libraries {
            t.add_row(vec![
                short(&l.path).to_string(),
                l.verdict.to_string(),
                top_families(&l.families, 6),
                l.note.clone(),
            ]);
        }
        for v in &a.vendor_blas {
            t.add_row(vec![
                format!("{} ({})", v.library, v.path),
                if v.files_for_arch > 0 { "vendor-blas" } else { "nothing" }.into(),
                format!("{} files, {} code objects", v.files_for_arch, v.code_objects_for_arch),
                String::new(),
            ]);
        }
        let _ = writeln!(out, "On {}\n{t}\n", a.arch);
    }
    let deps: Vec<_> = report
        .files
        .iter()
        .filter(|f| f.backend.is_some())
        .flat_map(|f| f.dependencies.iter().map(move |d| (f, d)))
        .filter(|(_, d)| d.resolved.is_none() || (d.depth == 1 && !matches!(d.via.as_str(), "ld.so.conf" | "default")))
        .collect();
    if !deps.is_empty() {
        let mut t = table(&["library", "needs", "needed by", "resolved", "via"]);
        for (f, d) in deps {
            t.add_row(vec![
                short(&f.path).to_string(),
                d.name.clone(),
                short(&d.needed_by).to_string(),
                d.resolved.clone().unwrap_or_else(|| "NOT FOUND".into()),
                d.via.clone(),
            ]);
        }
        let _ = writeln!(
            out,
            "Dependencies of ggml backends (missing ones, and direct ones found outside the system dirs)\n{t}\n"
        );
    }
    if !report.vendor_blas.is_empty() {
        let mut t = table(&["vendor library dir", "files", "files per arch"]);
        for v in &report.vendor_blas {
            let per: Vec<String> = v.files_per_arch.iter().map(|(a, n)| format!("{a} {n}")).collect();
            t.add_row(vec![format!("{} ({})", v.library, v.path), v.files.to_string(), per.join(", ")]);
        }
        let _ = writeln!(out, "Vendor BLAS libraries\n{t}\n");
    }
    if kernels {
        let mut t = table(&[
            "library",
            "target",
            "kernel",
            "family",
            "type",
            "VGPR",
            "SGPR",
            "AGPR",
            "spills v/s",
            "LDS/smem",
            "scratch",
            "wave",
            "max WG",
            "regs",
        ]);
        let mut add = |lib: &str, target: &str, k: &KernelRecord| {
            let opt = |v: Option<u64>| v.map(|v| v.to_string()).unwrap_or_else(|| "-".into());
            let spills = match (k.vgpr_spills, k.sgpr_spills) {
                (None, None) => "-".to_string(),
                (v, s) => format!("{}/{}", opt(v), opt(s)),
            };
            t.add_row(vec![
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
                        add(short(&f.path), &co.target, k);
                    }
                }
            }
            if let Some(c) = &f.cuda {
                for e in &c.entries {
                    for k in e.kernels.iter().flatten() {
                        add(short(&f.path), &e.target, k);
                    }
                }
            }
        }
        let _ = writeln!(out, "Kernels\n{t}\n");
    }
    let _ = writeln!(out, "Claims");
    claims(&mut out, &report.claims);
    if !report.problems.is_empty() {
        let _ = writeln!(out, "\nProblems ({})", report.problems.len());
        for p in report.problems.iter().take(50) {
            let at = p.offset.map(|o| format!(" @ {o:#x}")).unwrap_or_default();
            let _ = writeln!(out, "  {:?}: {}{at}: {}", p.severity, p.path, p.message);
        }
        if report.problems.len() > 50 {
            let _ = writeln!(out, "  … {} more (see --json)", report.problems.len() - 50);
        }
    }
    let s = &report.stats;
    let _ = writeln!(
        out,
        "\nscanned {} files ({} with records, {:.1} MB) in {:.0} ms",
        s.files_seen,
        s.files_with_records,
        s.bytes_scanned as f64 / 1e6,
        s.elapsed_ms
    );
    out
}
