//! Layer 4, binaries: whether the runtime's GPU libraries contain code objects for the GPU.

use super::artifacts::in_vendor_dir;
use super::rows::{Layer, LayerRow, Status};
use crate::evidence::{Confidence, Source};
use crate::gpu::arch::DeviceArch;
use crate::gpu::binaries::coverage;
use crate::gpu::binaries::{ArchAnswer, ScanReport};

/// Layer 4, and whether it judged ggml GPU backends (rather than other GPU code, such as a vendor library).
pub(super) fn binaries(arch: &DeviceArch, scan: Option<&ScanReport>) -> (LayerRow, bool) {
    let layer = Layer::Binaries;
    let Some(scan) = scan else { return (LayerRow::no_input(layer, "no install scanned (--install DIR)"), false) };
    let answer: ArchAnswer = match &scan.arch_answer {
        Some(a) if a.arch == arch.label() => a.clone(),
        _ => coverage::answer(arch, &scan.files, &scan.vendor_blas),
    };
    let gpu_backend = |path: &str| {
        scan.files
            .iter()
            .find(|f| f.path == path)
            .and_then(|f| f.backend.as_ref())
            .is_some_and(|b| matches!(b.name.as_str(), "hip" | "cuda" | "musa"))
    };
    let libs: Vec<_> = answer.libraries.iter().filter(|l| !in_vendor_dir(scan, &l.path)).collect();
    let backends: Vec<_> = libs.iter().copied().filter(|l| gpu_backend(&l.path)).collect();
    let ggml = !backends.is_empty();
    let (judged, what) = if ggml { (backends, "ggml GPU backend") } else { (libs, "GPU code") };
    if judged.is_empty() {
        let row = LayerRow::new(
            layer,
            Status::Unknown,
            Confidence::Unresolved,
            format!("the scanned tree ({}) has no GPU code outside vendor library directories", scan.roots.join(", ")),
        )
        .basis("install scan")
        .sources(scan.roots.iter().map(|r| Source::file(r, None, None, "scanned tree")));
        return (row, false);
    }
    let mut sources = Vec::new();
    let mut parts = Vec::new();
    let (mut runs, mut jit, mut mode, mut nothing) = (0, 0, 0, 0);
    for l in &judged {
        let name = l.path.rsplit('/').next().unwrap_or(&l.path);
        match l.verdict {
            "nothing" => {
                nothing += 1;
                parts.push(format!(
                    "{name} ({what}) has no code object for {}; it carries {}",
                    arch.label(),
                    l.targets_present.join(", ")
                ));
                let f = scan.files.iter().find(|f| f.path == l.path);
                let section = f.and_then(|f| {
                    f.amdgpu
                        .as_ref()
                        .and_then(|a| a.section.clone())
                        .or_else(|| f.cuda.as_ref().and_then(|c| c.section.clone()))
                });
                sources.push(match section {
                    Some(s) => Source::file(
                        &l.path,
                        Some(s.offset),
                        Some(s.size),
                        format!("{} section: code objects for {} only", s.name, l.targets_present.join(", ")),
                    ),
                    None => Source::file(
                        &l.path,
                        None,
                        None,
                        format!("code objects for {} only", l.targets_present.join(", ")),
                    ),
                });
            }
            "depends-on-mode" => {
                mode += 1;
                parts.push(format!("{name}: {}", l.note));
                sources.push(Source::file(
                    &l.path,
                    None,
                    None,
                    format!("code objects for {}", l.targets_present.join(", ")),
                ));
            }
            "jit-from-ptx" => {
                jit += 1;
                parts.push(format!("{name} ({what}) has only PTX the driver must JIT-compile for {}", arch.label()));
                sources.push(Source::file(&l.path, None, None, "PTX for an older compute capability"));
            }
            _ => {
                runs += 1;
                let kinds: Vec<String> = l
                    .families
                    .iter()
                    .filter(|(f, _)| f.as_str() != "other")
                    .take(4)
                    .map(|(f, n)| format!("{f} {n}"))
                    .collect();
                parts.push(format!(
                    "{name} ({what}) carries code objects that run on {}{}",
                    arch.label(),
                    if kinds.is_empty() { String::new() } else { format!(" ({})", kinds.join(", ")) }
                ));
                sources.extend(
                    l.evidence_offsets
                        .iter()
                        .take(2)
                        .map(|o| Source::file(&l.path, Some(*o), None, format!("code object for {}", arch.label()))),
                );
            }
        }
    }
    let (status, confidence) = if runs > 0 {
        (Status::Allows, Confidence::Confirmed)
    } else if jit > 0 {
        (Status::Allows, Confidence::Inferred)
    } else if mode > 0 {
        (Status::Unknown, Confidence::Unresolved)
    } else {
        debug_assert!(nothing > 0);
        (Status::Blocks, Confidence::Confirmed)
    };
    (LayerRow::new(layer, status, confidence, parts.join("; ")).basis("install scan").sources(sources), ggml)
}
