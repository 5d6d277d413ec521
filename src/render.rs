//! Human-readable output: tables for people; `--json` output is the records themselves (serde).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use comfy_table::presets::UTF8_FULL_CONDENSED;
use comfy_table::{ContentArrangement, Table};

use crate::disasm::{DisasmReport, KernelMix};
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
    if let Some(d) = &report.disasm {
        disasm(&mut out, d, kernels || d.kernel_pattern.is_some());
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

/// Broad classes shown as columns (JSON has them all, atomics and `other` included).
const MIX_COLUMNS: [(&str, &str); 9] = [
    ("vector-alu", "VALU"),
    ("fma", "FMA"),
    ("matrix", "matrix"),
    ("scalar", "scalar"),
    ("lds", "LDS"),
    ("global-load", "load"),
    ("global-store", "store"),
    ("branch", "branch"),
    ("wait", "wait"),
];

fn mix_header<'a>(first: &[&'a str]) -> Vec<&'a str> {
    let mut h = first.to_vec();
    h.push("instrs");
    h.extend(MIX_COLUMNS.iter().map(|(_, label)| *label));
    h.push("path-deciding instructions");
    h
}

fn path_text(paths: &BTreeMap<String, u64>, mnemonics: &BTreeMap<String, u64>) -> String {
    let present: Vec<String> = paths.iter().filter(|(_, n)| **n > 0).map(|(p, n)| format!("{p} {n}")).collect();
    if present.is_empty() {
        return "none".into();
    }
    let mut m: Vec<_> = mnemonics.iter().collect();
    m.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    let shown: Vec<String> = m.iter().take(3).map(|(k, n)| format!("{k} {n}")).collect();
    format!("{} ({}{})", present.join(", "), shown.join(", "), if m.len() > 3 { ", …" } else { "" })
}

fn mix_row(mut row: Vec<String>, k: &KernelMix) -> Vec<String> {
    row.push(k.instructions.to_string());
    row.extend(MIX_COLUMNS.iter().map(|(class, _)| k.classes.get(*class).copied().unwrap_or(0).to_string()));
    row.push(path_text(&k.paths, &k.path_mnemonics));
    row
}

/// `--disasm`: per kernel when asked for kernels (or a `--kernel` pattern), else summed per library, target and
/// family.
fn disasm(out: &mut String, d: &DisasmReport, per_kernel: bool) {
    if per_kernel {
        let mut t = table(&mix_header(&["library", "target", "kernel", "family"]));
        for co in &d.code_objects {
            for k in &co.kernels {
                let row =
                    vec![short(&co.path).to_string(), co.target.clone(), k.demangled.clone(), k.family.to_string()];
                t.add_row(mix_row(row, k));
            }
        }
        let _ = writeln!(out, "Instruction mix per kernel (disassembly)\n{t}\n");
    } else {
        let mut groups: BTreeMap<(&str, &str, &str), (u64, KernelMix)> = BTreeMap::new();
        for co in &d.code_objects {
            for k in &co.kernels {
                let (n, sum) = groups.entry((short(&co.path), co.target.as_str(), k.family)).or_insert_with(|| {
                    (
                        0,
                        KernelMix {
                            classes: BTreeMap::new(),
                            paths: BTreeMap::new(),
                            path_mnemonics: BTreeMap::new(),
                            instructions: 0,
                            ..k.clone()
                        },
                    )
                });
                *n += 1;
                sum.instructions += k.instructions;
                for (map, from) in [
                    (&mut sum.classes, &k.classes),
                    (&mut sum.paths, &k.paths),
                    (&mut sum.path_mnemonics, &k.path_mnemonics),
                ] {
                    for (key, v) in from {
                        *map.entry(key.clone()).or_default() += v;
                    }
                }
            }
        }
        let mut t = table(&mix_header(&["library", "target", "family", "kernels"]));
        for ((lib, target, family), (n, sum)) in &groups {
            t.add_row(mix_row(vec![lib.to_string(), target.to_string(), family.to_string(), n.to_string()], sum));
        }
        let _ = writeln!(
            out,
            "Instruction mix per family (disassembly; --kernels or --kernel PATTERN for each kernel)\n{t}\n"
        );
    }
    let s = &d.stats;
    let tools: Vec<String> = d.tools.iter().map(|t| format!("{} ({})", t.path.display(), t.version)).collect();
    let _ = writeln!(
        out,
        "disassembled {} code objects ({} from the cache, {} failed, {} without a matching kernel) with {} in {:.1} s, {} at a time\n",
        s.disassembled + s.from_cache,
        s.from_cache,
        s.failed,
        s.no_matching_kernel,
        if tools.is_empty() { "no disassembler".to_string() } else { tools.join(", ") },
        s.elapsed_ms / 1e3,
        s.parallel
    );
}
