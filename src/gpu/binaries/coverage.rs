//! From records to answers: the GPU arch × library matrix, the `--arch` verdict for one card, and the
//! claims (statement + confidence + sources) every output format shows.

use std::collections::{BTreeMap, BTreeSet};

use binfmt::amdgpu::target::{compat, Compat, Feature, TargetId};

use super::records::*;
use super::scan_report::ScanReport;
use crate::evidence::{Claim, Confidence, Source};
use crate::gpu::arch::{cubin_runs_on, DeviceArch};

/// Families that are ggml's own kernels (as opposed to vendor BLAS or unclassified code).
fn is_ggml_family(f: &str) -> bool {
    !matches!(f, "other" | "vendor-BLAS")
}

fn content_of(families: &BTreeMap<String, u64>) -> &'static str {
    if families.iter().any(|(f, n)| *n > 0 && matches!(f.as_str(), "MMVQ" | "MMQ" | "MMVF" | "MMF")) {
        "ggml-kernels"
    } else if families.keys().any(|f| f == "vendor-BLAS") {
        "vendor-blas"
    } else if families.keys().any(|f| is_ggml_family(f)) {
        "ggml-kernels"
    } else {
        "gpu-code"
    }
}

fn add_families(into: &mut BTreeMap<String, u64>, from: &BTreeMap<String, u64>) {
    for (k, v) in from {
        *into.entry(k.clone()).or_default() += v;
    }
}

pub fn matrix(files: &[FileRecord], vendor: &[VendorBlasDir]) -> Vec<CoverageCell> {
    let mut cells: BTreeMap<(String, String), CoverageCell> = BTreeMap::new();
    for f in files {
        let library = f.file_name().to_string();
        let mut add = |arch: &str, kernels: u64, families: &BTreeMap<String, u64>| {
            let cell = cells.entry((arch.to_string(), library.clone())).or_insert_with(|| CoverageCell {
                arch: arch.to_string(),
                library: library.clone(),
                content: "gpu-code",
                code_objects: 0,
                kernels: 0,
                families: BTreeMap::new(),
            });
            cell.code_objects += 1;
            cell.kernels += kernels;
            add_families(&mut cell.families, families);
        };
        if let Some(a) = &f.amdgpu {
            for co in &a.code_objects {
                add(&co.processor, co.kernel_count, &co.families);
            }
        }
        if let Some(c) = &f.cuda {
            for e in &c.entries {
                add(&e.target, e.kernel_count, &e.families);
            }
        }
    }
    for v in vendor {
        for (arch, n) in &v.files_per_arch {
            let library = format!("{} ({})", v.library, v.path);
            cells.insert(
                (arch.clone(), library.clone()),
                CoverageCell {
                    arch: arch.clone(),
                    library,
                    content: "vendor-blas",
                    code_objects: v.code_objects_per_arch.get(arch).copied().unwrap_or(0),
                    kernels: 0,
                    families: BTreeMap::from([("files".to_string(), *n)]),
                },
            );
        }
    }
    let mut out: Vec<CoverageCell> = cells.into_values().collect();
    for c in &mut out {
        if c.content != "vendor-blas" {
            c.content = if c.arch.starts_with("compute_") { "ptx-only" } else { content_of(&c.families) };
        }
    }
    out
}

/// What each library can run on `arch`.
pub fn answer(arch: &DeviceArch, files: &[FileRecord], vendor: &[VendorBlasDir]) -> ArchAnswer {
    let mut libraries = Vec::new();
    for f in files.iter().filter(|f| f.has_gpu_code()) {
        let mut families = BTreeMap::new();
        let mut present = BTreeSet::new();
        let mut offsets = Vec::new();
        let mut depends: Option<&'static str> = None;
        let mut jit = false;
        let mut runs = false;
        match arch {
            DeviceArch::Amd { id } => {
                let Some(a) = &f.amdgpu else { continue };
                let device = TargetId::parse(id);
                for co in &a.code_objects {
                    present.insert(co.target.clone());
                    match compat(&TargetId::parse(&co.target), &device) {
                        Compat::Runs => {
                            runs = true;
                            add_families(&mut families, &co.families);
                            if offsets.len() < 5 {
                                offsets.push(if co.in_file { co.offset } else { co.bundle_offset });
                            }
                        }
                        Compat::DependsOnMode { feature } => depends = Some(feature),
                        Compat::No => {}
                    }
                }
            }
            DeviceArch::Nvidia { sm } => {
                let Some(c) = &f.cuda else { continue };
                for e in &c.entries {
                    present.insert(e.target.clone());
                    if e.kind == "cubin" && cubin_runs_on(e.sm, *sm) {
                        runs = true;
                        add_families(&mut families, &e.families);
                        if offsets.len() < 5 {
                            offsets.push(e.offset);
                        }
                    } else if e.kind == "ptx" && e.sm <= *sm {
                        jit = true;
                        if !runs {
                            add_families(&mut families, &e.families);
                        }
                    }
                }
            }
            DeviceArch::Unknown(_) => continue,
        }
        let targets_present: Vec<String> = present.into_iter().collect();
        let (verdict, note) = if runs {
            let v = content_of(&families);
            (v, format!("code objects built for {} run here", arch.label()))
        } else if let Some(feature) = depends {
            (
                "depends-on-mode",
                format!(
                    "code exists only for a specific {feature} mode; state it in --arch (e.g. {}:{feature}-)",
                    arch.label()
                ),
            )
        } else if jit {
            (
                "jit-from-ptx",
                format!("no {} cubin; the driver must JIT-compile PTX for an older compute capability", arch.label()),
            )
        } else {
            ("nothing", format!("no code for {}; carries {}", arch.label(), targets_present.join(", ")))
        };
        libraries.push(LibraryAnswer {
            path: f.path.clone(),
            verdict,
            families,
            targets_present,
            evidence_offsets: offsets,
            note,
        });
    }
    let vendor_blas = match arch {
        DeviceArch::Amd { id } => {
            let device = TargetId::parse(id);
            vendor
                .iter()
                .map(|v| {
                    let matching = |m: &BTreeMap<String, u64>| -> u64 {
                        m.iter()
                            .filter(|(a, _)| {
                                compat(
                                    &TargetId::parse(a),
                                    &TargetId { xnack: Feature::Any, sramecc: Feature::Any, ..device },
                                ) != Compat::No
                            })
                            .map(|(_, n)| n)
                            .sum()
                    };
                    VendorBlasAnswer {
                        path: v.path.clone(),
                        library: v.library.clone(),
                        files_for_arch: matching(&v.files_per_arch),
                        code_objects_for_arch: matching(&v.code_objects_per_arch),
                    }
                })
                .collect()
        }
        _ => Vec::new(),
    };
    ArchAnswer { arch: arch.label(), libraries, vendor_blas }
}

fn families_text(families: &BTreeMap<String, u64>) -> String {
    let mut v: Vec<_> = families.iter().collect();
    v.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    v.iter().map(|(f, n)| format!("{f} {n}")).collect::<Vec<_>>().join(", ")
}

fn section_source(f: &FileRecord, section: &Option<SectionRef>, what: &str) -> Source {
    match section {
        Some(s) => Source::file(&f.path, Some(s.offset), Some(s.size), format!("{} section ({what})", s.name)),
        None => Source::file(&f.path, Some(0), Some(f.size), what.to_string()),
    }
}

/// The claims of a scan: per file (backend, GPU code, dependencies that do not resolve), per library for the
/// `--arch` asked about, and what could not be decoded.
pub fn claims(report: &ScanReport) -> Vec<Claim> {
    let mut out = Vec::new();
    for f in &report.files {
        file_claims(f, &mut out);
    }
    if let Some(ans) = &report.arch_answer {
        arch_claims(report, ans, &mut out);
    }
    out.extend(limited_claim(report));
    out
}

/// What one file is: a ggml backend, AMDGPU or CUDA code per target, and dependencies that do not resolve.
fn file_claims(f: &FileRecord, out: &mut Vec<Claim>) {
    let name = f.file_name();
    if let Some(b) = &f.backend {
        let (confidence, how) = match b.by {
            BackendEvidence::NameAndContent | BackendEvidence::Content => {
                (Confidence::Confirmed, b.content_evidence.clone().unwrap_or_default())
            }
            BackendEvidence::Name => (Confidence::Inferred, "file name only".to_string()),
        };
        out.push(
            Claim::new(
                format!("scan.backend.{name}"),
                confidence,
                match b.name.as_str() {
                    "ggml" | "ggml-base" => format!("{name} is ggml's core library `{}` ({how})", b.name),
                    _ => format!("{name} is the ggml `{}` backend ({how})", b.name),
                },
            )
            .with_source(Source::file(&f.path, None, None, "ELF dynamic symbols and sections")),
        );
    }
    if let Some(a) = &f.amdgpu {
        let mut per_target: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
        for co in &a.code_objects {
            let e = per_target.entry(co.target.as_str()).or_default();
            e.0 += 1;
            e.1 += co.kernel_count;
        }
        let targets: Vec<String> =
            per_target.iter().map(|(t, (n, k))| format!("{t} ({n} code objects, {k} kernels)")).collect();
        let compressed = if a.compressed_bundles > 0 {
            format!(", {} of them compressed (CCOB)", a.compressed_bundles)
        } else {
            String::new()
        };
        out.push(
            Claim::new(
                format!("scan.amdgpu.{name}"),
                Confidence::Confirmed,
                format!(
                    "{name} carries AMDGPU code for {} target(s) in {} bundle(s){compressed}: {}",
                    per_target.len(),
                    a.bundles,
                    targets.join("; ")
                ),
            )
            .with_source(section_source(f, &a.section, "clang offload bundles")),
        );
    }
    if let Some(c) = &f.cuda {
        let mut per_target: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
        for e in &c.entries {
            let t = per_target.entry(e.target.as_str()).or_default();
            t.0 += 1;
            t.1 += e.kernel_count;
        }
        let targets: Vec<String> =
            per_target.iter().map(|(t, (n, k))| format!("{t} ({n} entries, {k} kernels)")).collect();
        out.push(
            Claim::new(
                format!("scan.cuda.{name}"),
                Confidence::Confirmed,
                format!("{name} carries CUDA code in {} fatbin container(s): {}", c.containers, targets.join("; ")),
            )
            .with_source(section_source(f, &c.section, "CUDA fatbin containers")),
        );
    }
    let missing: Vec<&Dependency> = f.dependencies.iter().filter(|d| d.resolved.is_none()).collect();
    if f.backend.is_some() && !missing.is_empty() {
        let names: Vec<String> = missing
            .iter()
            .map(|d| format!("{} (needed by {})", d.name, d.needed_by.rsplit('/').next().unwrap_or("")))
            .collect();
        out.push(
            Claim::new(
                format!("scan.deps.{name}"),
                Confidence::Inferred,
                format!(
                    "{name} cannot be loaded as installed here: {} not found on its RPATH/RUNPATH, ld.so.conf, the default directories or the scanned tree (an LD_LIBRARY_PATH set at run time could still provide them)",
                    names.join(", ")
                ),
            )
            .with_sources(missing.iter().take(8).map(|d| Source::file(&d.needed_by, None, None, format!("DT_NEEDED {}", d.name)))),
        );
    }
}

/// Per library, whether it can run on `ans.arch`; per vendor BLAS directory, its files for the arch; and, when
/// no library carries ggml code for it, the one-line summary of what is left.
fn arch_claims(report: &ScanReport, ans: &ArchAnswer, out: &mut Vec<Claim>) {
    let in_vendor_dir = |p: &str| report.vendor_blas.iter().any(|v| p.starts_with(&format!("{}/", v.path)));
    let mut any_ggml = false;
    for lib in &ans.libraries {
        // Files of a vendor BLAS directory are summarised by the directory's claim below.
        if lib.verdict == "nothing" && in_vendor_dir(&lib.path) {
            continue;
        }
        any_ggml |= lib.verdict == "ggml-kernels";
        out.push(library_claim(report, ans, lib));
    }
    for v in &ans.vendor_blas {
        out.push(
            Claim::new(
                format!("scan.arch.{}.vendor.{}", ans.arch, v.library),
                Confidence::Confirmed,
                format!(
                    "{} library dir {} has {} file(s) for {} ({} code object files)",
                    v.library, v.path, v.files_for_arch, ans.arch, v.code_objects_for_arch
                ),
            )
            .with_source(Source::file(&v.path, None, None, "file names per gfx arch")),
        );
    }
    if !any_ggml {
        out.push(arch_summary_claim(ans));
    }
}

/// Whether one library can run on the arch, with the offsets of its code objects for it.
fn library_claim(report: &ScanReport, ans: &ArchAnswer, lib: &LibraryAnswer) -> Claim {
    let name = lib.path.rsplit('/').next().unwrap_or(&lib.path);
    let f = report.files.iter().find(|f| f.path == lib.path);
    let base_source = f.map(|f| match (&f.amdgpu, &f.cuda) {
        (Some(a), _) => section_source(f, &a.section, "offload bundles"),
        (_, Some(c)) => section_source(f, &c.section, "fatbin containers"),
        _ => Source::file(&f.path, None, None, "file"),
    });
    let offsets = lib
        .evidence_offsets
        .iter()
        .map(|o| Source::file(&lib.path, Some(*o), None, format!("code object for {}", ans.arch)));
    let (confidence, statement) = match lib.verdict {
        "ggml-kernels" => (
            Confidence::Confirmed,
            format!("On {}, {name} can run ggml GPU kernels: {}", ans.arch, families_text(&lib.families)),
        ),
        "vendor-blas" => (
            Confidence::Confirmed,
            format!("On {}, {name} carries vendor BLAS kernels only ({})", ans.arch, families_text(&lib.families)),
        ),
        "gpu-code" => (
            Confidence::Confirmed,
            format!(
                "On {}, {name} carries GPU code that is neither ggml's nor a known BLAS ({})",
                ans.arch,
                families_text(&lib.families)
            ),
        ),
        "depends-on-mode" => (Confidence::Unresolved, format!("On {}, {name}: {}", ans.arch, lib.note)),
        "jit-from-ptx" => (
            Confidence::Inferred,
            format!(
                "On {}, {name} has no native cubin; it runs only if the driver JIT-compiles its PTX ({})",
                ans.arch,
                families_text(&lib.families)
            ),
        ),
        _ => (
            Confidence::Confirmed,
            format!(
                "{name} carries no code for {}; it carries {}. On {} it cannot run any of its GPU kernels",
                ans.arch,
                lib.targets_present.join(", "),
                ans.arch
            ),
        ),
    };
    Claim::new(format!("scan.arch.{}.{name}", ans.arch), confidence, statement)
        .with_sources(base_source)
        .with_sources(offsets)
}

/// The one-line answer for an arch that no scanned library carries ggml code for: what is left, by library.
fn arch_summary_claim(ans: &ArchAnswer) -> Claim {
    let named = |verdict: &str| -> Vec<&str> {
        ans.libraries
            .iter()
            .filter(|l| l.verdict == verdict)
            .map(|l| l.path.rsplit('/').next().unwrap_or(&l.path))
            .collect()
    };
    let mut parts = vec![format!("On {}, no scanned library carries ggml code built for it", ans.arch)];
    let by_mode = named("depends-on-mode");
    if !by_mode.is_empty() {
        parts.push(format!(
            "{} {} code only for a specific xnack/sramecc mode: give it in --arch (e.g. {}:xnack-) to decide",
            by_mode.join(", "),
            if by_mode.len() == 1 { "carries" } else { "carry" },
            ans.arch
        ));
    }
    let by_jit = named("jit-from-ptx");
    if !by_jit.is_empty() {
        parts.push(format!(
            "{} can run only through PTX JIT compilation by the driver (slow first load; fails if the driver is older than the PTX)",
            by_jit.join(", ")
        ));
    }
    let mut vendor: Vec<&str> = named("vendor-blas");
    vendor.extend(ans.vendor_blas.iter().filter(|v| v.files_for_arch > 0).map(|v| v.library.as_str()));
    vendor.dedup();
    if !vendor.is_empty() {
        parts.push(format!(
            "vendor BLAS kernels exist for it ({}): BLAS is the only GPU matrix path they offer",
            vendor.join(", ")
        ));
    }
    if parts.len() == 1 {
        parts.push(
            "nothing scanned carries GPU kernels for it: a runtime from these files would fall back to another backend or the CPU"
                .into(),
        );
    }
    Claim::new(format!("scan.arch.{}.summary", ans.arch), Confidence::Inferred, parts.join("; ")).with_source(
        Source::Rule {
            file: "src/gpu/binaries/coverage.rs".into(),
            rule: "no ggml code object compatible with the arch".into(),
            upstream: "clang offload bundle target matching (AMDGPUUsage target IDs, generic processors)".into(),
        },
    )
}

/// The items that could not be decoded, which every count above leaves out.
fn limited_claim(report: &ScanReport) -> Option<Claim> {
    let errors: Vec<&Problem> = report.problems.iter().filter(|p| p.severity == Severity::Error).collect();
    if errors.is_empty() {
        return None;
    }
    Some(
        Claim::new(
            "scan.limited",
            Confidence::Limited,
            format!("{} item(s) could not be decoded; the counts above leave them out", errors.len()),
        )
        .with_sources(errors.iter().take(8).map(|p| Source::file(&p.path, p.offset, None, p.message.clone()))),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_device_archs() {
        assert_eq!(DeviceArch::parse("gfx900"), DeviceArch::Amd { id: "gfx900".into() });
        assert_eq!(DeviceArch::parse("sm_86"), DeviceArch::Nvidia { sm: 86 });
        assert_eq!(DeviceArch::parse("8.6"), DeviceArch::Nvidia { sm: 86 });
        assert_eq!(DeviceArch::parse("120"), DeviceArch::Nvidia { sm: 120 });
        assert!(matches!(DeviceArch::parse("banana"), DeviceArch::Unknown(_)));
    }
}
