//! Layers 1 and 2, from backscope's knowledge files: the ROCm release's official GPU list, and the runtime's build
//! targets (Ollama's CMake regex and release presets).

use super::logs::processor;
use super::rows::{newest_rocm, rule, version_key, Layer, LayerRow, OllamaRelease, Status};
use crate::evidence::Confidence;
use crate::gpu::arch::DeviceArch;
use crate::gpu::knowledge::{self};

pub(super) fn vendor_policy(arch: &DeviceArch, rocm: Option<&str>) -> LayerRow {
    let layer = Layer::VendorPolicy;
    let DeviceArch::Amd { id } = arch else {
        return LayerRow::no_input(
            layer,
            "backscope has no NVIDIA support-policy table (which CUDA releases support which compute capability)",
        );
    };
    let p = processor(id);
    let support = knowledge::rocm_support();
    let file = knowledge::ROCM_SUPPORT_FILE;
    let src = |version: &str| {
        support
            .release
            .iter()
            .find(|r| r.versions.iter().any(|v| v == version))
            .map(|r| rule(file, format!("ROCm {version}"), &r.source))
    };
    use knowledge::rocm::Support;
    let row = match rocm {
        Some(v) => match support.support(v, p) {
            Support::Listed { .. } => {
                LayerRow::new(layer, Status::Allows, Confidence::Inferred, format!("ROCm {v}'s official GPU list includes {p}"))
            }
            Support::NotListed { .. } => LayerRow::new(
                layer,
                Status::Blocks,
                Confidence::Inferred,
                format!("ROCm {v}'s official GPU list does not include {p}: not officially supported (a policy statement, not a statement about code)"),
            ),
            Support::NoData => {
                return LayerRow::no_input(
                    layer,
                    &format!("backscope has no support list for ROCm {v} (it has {})", known_rocm().join(", ")),
                )
                .basis("knowledge")
                .sources([rule(file, "releases covered", "see the file header")]);
            }
        }
        .sources(src(v)),
        None => {
            let newest = newest_rocm();
            let listing = support.releases_listing(p);
            let listed_newest = listing.contains(&newest.as_str());
            let finding = if listed_newest {
                format!("officially supported by ROCm {newest}, the newest release in backscope's data")
            } else if listing.is_empty() {
                format!(
                    "listed by no ROCm release in backscope's data ({} … {newest}): not officially supported (a policy statement, not a statement about code)",
                    known_rocm().first().cloned().unwrap_or_default()
                )
            } else {
                format!(
                    "not listed by ROCm {newest}, the newest release in backscope's data; listed by {}",
                    listing.join(", ")
                )
            };
            let status = if listed_newest { Status::Allows } else { Status::Blocks };
            LayerRow::new(layer, status, Confidence::Inferred, finding)
                .sources(src(&newest))
                .sources(listing.last().and_then(|v| src(v)))
        }
    };
    row.basis("knowledge")
}

pub(super) fn known_rocm() -> Vec<String> {
    let mut v: Vec<String> =
        knowledge::rocm_support().release.iter().flat_map(|r| r.versions.iter().cloned()).collect();
    v.sort_by_key(|x| version_key(x));
    v
}

pub(super) fn build_targets(arch: &DeviceArch, ollama: &OllamaRelease) -> LayerRow {
    let layer = Layer::BuildTargets;
    let OllamaRelease::Release { tag, newest } = ollama else {
        return LayerRow::no_input(
            layer,
            "not an Ollama runtime (--ollama none): its build targets are what layer 4 reads from its binaries",
        );
    };
    let DeviceArch::Amd { id } = arch else {
        return LayerRow::no_input(layer, "backscope has no data on Ollama's CUDA architecture lists");
    };
    let p = processor(id);
    let data = knowledge::ollama_amdgpu();
    let file = knowledge::OLLAMA_AMDGPU_FILE;
    let newest_note = if *newest {
        format!(" ({tag} is the newest release in backscope's data; --ollama picks another)")
    } else {
        String::new()
    };
    let which = tag.clone();
    let Some(preset) = data.preset_at(tag) else {
        return LayerRow::no_input(
            layer,
            &format!("backscope has no target data for Ollama {which} (it covers v0.5.8 and later)"),
        )
        .basis("knowledge");
    };
    let built: Vec<&str> = preset.targets.iter().map(String::as_str).filter(|t| processor(t) == p).collect();
    let mut finding = if built.is_empty() {
        format!(
            "Ollama {which}'s Linux release build (preset '{}', ROCm {}) does not target {p}: its ROCm backend has no code for it",
            preset.preset, preset.rocm
        )
    } else {
        format!(
            "Ollama {which}'s Linux release build (preset '{}', ROCm {}) targets {}",
            preset.preset,
            preset.rocm,
            built.join(", ")
        )
    };
    let mut sources = vec![rule(file, &preset.id, &preset.source)];
    if let Some(f) = data.filter_at(tag) {
        let keeps = f.apply(&[p]).map(|k| !k.is_empty()).unwrap_or(false);
        finding.push_str(&format!(
            "; a local build's default filter {} {p}",
            if keeps { format!("`{}` keeps", f.regex) } else { format!("`{}` drops", f.regex) }
        ));
        sources.push(rule(file, &f.id, &f.source));
    }
    finding.push_str(&newest_note);
    let status = if built.is_empty() { Status::Blocks } else { Status::Allows };
    LayerRow::new(layer, status, Confidence::Inferred, finding).basis("knowledge").sources(sources)
}
