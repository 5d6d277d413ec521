//! GPUs from the kernel's own files, no tool and no privilege needed: the DRM class in sysfs (PCI vendor and
//! device ids, the driver, card and render nodes), AMD's KFD topology (`gfx_target_version`, the ISA the card
//! runs) and the NVIDIA driver's `/proc/driver/nvidia` (model, bus location, driver version).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::host::{read_small, Host};
use crate::gpu::knowledge::archs::gfx_target_of;

/// Entries read per directory: a guard against a pathological tree, far above any real machine's GPU count.
const MAX_ENTRIES: usize = 256;

/// One GPU (a PCI display device) as the kernel presents it.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Gpu {
    /// `amd`, `nvidia`, `intel`, or `other`.
    pub vendor: &'static str,
    /// PCI vendor and device id (`0x1002`, `0x66af`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pci_id: Option<(String, String)>,
    /// PCI slot (`0000:03:00.0`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slot: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub driver: Option<String>,
    /// DRM nodes (`card0`, `renderD128`).
    pub nodes: Vec<String>,
    /// AMD: the ISA from KFD's `gfx_target_version` (`gfx906`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gfx_target: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gfx_target_version: Option<u64>,
    /// The KFD topology node that describes it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kfd_node: Option<String>,
    /// NVIDIA: `Model:` of the driver's information file, or a tool's name for it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// NVIDIA: compute capability (`9.0`), from nvidia-smi when it ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compute_capability: Option<String>,
    /// The files each fact was read from.
    pub sources: Vec<String>,
}

impl Gpu {
    /// The arch `gate` and `predict` take: `gfx906`, `sm_90`.
    pub fn arch(&self) -> Option<String> {
        if let Some(g) = &self.gfx_target {
            return Some(g.clone());
        }
        let cc = self.compute_capability.as_deref()?;
        let (major, minor) = cc.split_once('.')?;
        Some(format!("sm_{}{}", major.trim().parse::<u32>().ok()?, minor.trim().parse::<u32>().ok()?))
    }

    pub fn label(&self) -> String {
        let id = self.pci_id.as_ref().map(|(v, d)| format!("{v}:{d}")).unwrap_or_default();
        let name = self.model.clone().or_else(|| self.gfx_target.clone()).unwrap_or_else(|| self.vendor.to_string());
        match &self.slot {
            Some(s) => format!("{name} [{id}] at {s}"),
            None => format!("{name} [{id}]"),
        }
    }
}

fn vendor_name(id: &str) -> &'static str {
    match id.to_ascii_lowercase().as_str() {
        "0x1002" => "amd",
        "0x10de" => "nvidia",
        "0x8086" => "intel",
        _ => "other",
    }
}

/// `KEY=value` lines of a sysfs `uevent` file.
fn uevent(text: &str, key: &str) -> Option<String> {
    text.lines().find_map(|l| l.strip_prefix(key)?.strip_prefix('=').map(|v| v.trim().to_string()))
}

fn sorted_entries(dir: &Path) -> Vec<(String, PathBuf)> {
    let mut v: Vec<(String, PathBuf)> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .take(MAX_ENTRIES)
        .filter_map(|e| Some((e.file_name().into_string().ok()?, e.path())))
        .collect();
    v.sort();
    v
}

/// `card<N>` and `renderD<N>` (connectors such as `card0-DP-1` are not devices).
fn is_node(name: &str) -> bool {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    name.strip_prefix("card").is_some_and(digits) || name.strip_prefix("renderD").is_some_and(digits)
}

/// What the GPU probe read, including where it found nothing (the sources of a "no GPU" claim).
#[derive(Clone, Debug, Default, Serialize)]
pub struct GpuProbe {
    pub gpus: Vec<Gpu>,
    /// Each place looked at and what it held.
    pub looked: Vec<(String, String)>,
    /// NVIDIA driver version (`/proc/driver/nvidia/version`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nvidia_driver: Option<String>,
}

/// The driver version in `/proc/driver/nvidia/version`'s first line
/// (`NVRM version: NVIDIA UNIX x86_64 Kernel Module  384.98  Thu Oct 26 …`, or `… Open Kernel Module for x86_64  565.57.01  …`).
pub fn nvidia_driver_version(text: &str) -> Option<String> {
    let line = text.lines().find(|l| l.starts_with("NVRM version:"))?;
    line.split_whitespace()
        .find(|w| {
            let parts: Vec<&str> = w.split('.').collect();
            parts.len() >= 2 && parts.iter().all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
        })
        .map(str::to_string)
}

/// Probe the DRM class, the KFD topology and /proc/driver/nvidia under the host's root.
pub fn probe(host: &Host) -> GpuProbe {
    let mut out = GpuProbe::default();
    let mut by_slot: BTreeMap<String, Gpu> = BTreeMap::new();
    let drm = host.path("/sys/class/drm");
    let nodes: Vec<(String, PathBuf)> = sorted_entries(&drm).into_iter().filter(|(n, _)| is_node(n)).collect();
    out.looked.push((
        drm.display().to_string(),
        if !drm.exists() {
            "absent".into()
        } else if nodes.is_empty() {
            "no card or render node".into()
        } else {
            format!("{} node(s)", nodes.len())
        },
    ));
    for (name, path) in &nodes {
        let dev = path.join("device");
        let vendor = read_small(&dev.join("vendor")).map(|s| s.trim().to_string());
        let device = read_small(&dev.join("device")).map(|s| s.trim().to_string());
        let ue = read_small(&dev.join("uevent")).unwrap_or_default();
        let slot = uevent(&ue, "PCI_SLOT_NAME");
        let driver = uevent(&ue, "DRIVER")
            .or_else(|| std::fs::read_link(dev.join("driver")).ok()?.file_name()?.to_str().map(str::to_string));
        let key = slot.clone().unwrap_or_else(|| name.clone());
        let g = by_slot.entry(key).or_default();
        if let (Some(v), Some(d)) = (vendor, device) {
            g.vendor = vendor_name(&v);
            g.pci_id = Some((v, d));
            g.sources.push(dev.join("vendor").display().to_string());
        } else if g.vendor.is_empty() {
            g.vendor = "other";
        }
        g.slot = g.slot.take().or(slot);
        g.driver = g.driver.take().or(driver);
        g.nodes.push(name.clone());
    }

    // KFD: one node per agent; CPU nodes have gfx_target_version 0.
    let kfd = host.path("/sys/class/kfd/kfd/topology/nodes");
    let mut kfd_gpus = 0;
    for (name, path) in sorted_entries(&kfd) {
        let props_path = path.join("properties");
        let Some(props) = read_small(&props_path) else { continue };
        let get = |k: &str| {
            props.lines().find_map(|l| {
                let (key, v) = l.split_once(' ')?;
                (key == k).then(|| v.trim().parse::<u64>().ok()).flatten()
            })
        };
        let Some(version) = get("gfx_target_version").filter(|v| *v != 0) else { continue };
        kfd_gpus += 1;
        let render = get("drm_render_minor").map(|m| format!("renderD{m}"));
        let target = gfx_target_of(version);
        let slot =
            by_slot.iter().find(|(_, g)| render.as_ref().is_some_and(|r| g.nodes.contains(r))).map(|(k, _)| k.clone());
        let g = match slot {
            Some(k) => by_slot.get_mut(&k).expect("key just found"),
            None => by_slot.entry(format!("kfd-{name}")).or_insert_with(|| Gpu {
                vendor: "amd",
                nodes: render.iter().cloned().collect(),
                ..Gpu::default()
            }),
        };
        g.gfx_target = target;
        g.gfx_target_version = Some(version);
        g.kfd_node = Some(name.clone());
        g.sources.push(props_path.display().to_string());
    }
    out.looked.push((
        kfd.display().to_string(),
        if !kfd.exists() { "absent".into() } else { format!("{kfd_gpus} GPU node(s)") },
    ));

    // NVIDIA's proprietary and open kernel modules both publish these files.
    let nv = host.path("/proc/driver/nvidia/gpus");
    let nv_entries = sorted_entries(&nv);
    out.looked.push((
        nv.display().to_string(),
        if !nv.exists() { "absent".into() } else { format!("{} GPU(s)", nv_entries.len()) },
    ));
    for (bus, path) in nv_entries {
        let info_path = path.join("information");
        let Some(info) = read_small(&info_path) else { continue };
        let field = |k: &str| {
            info.lines().find_map(|l| {
                let (key, v) = l.split_once(':')?;
                (key.trim() == k).then(|| v.trim().to_string())
            })
        };
        let slot = field("Bus Location").unwrap_or(bus).to_ascii_lowercase();
        let g = by_slot.entry(slot.clone()).or_default();
        g.vendor = "nvidia";
        g.slot = Some(slot);
        g.model = field("Model");
        g.sources.push(info_path.display().to_string());
    }
    let version_path = host.path("/proc/driver/nvidia/version");
    if let Some(text) = read_small(&version_path) {
        out.nvidia_driver = nvidia_driver_version(&text);
        out.looked.push((version_path.display().to_string(), text.lines().next().unwrap_or("").trim().to_string()));
    }
    out.gpus = by_slot.into_values().collect();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kfd_versions_name_the_llvm_processors() {
        // kfd_device.c: Vega10 90000, Vega20 90006, Arcturus 90008, Aldebaran 90010, Renoir 90012, Navi21 100300,
        // and the LLVM processor names of those chips (AMDGPUUsage).
        for (v, name) in [
            (90000, "gfx900"),
            (90006, "gfx906"),
            (90008, "gfx908"),
            (90010, "gfx90a"),
            (90012, "gfx90c"),
            // An MI300X's node, as ROCm/rocm-cli#343 quotes it.
            (90402, "gfx942"),
            (100300, "gfx1030"),
            (110000, "gfx1100"),
            (120001, "gfx1201"),
        ] {
            assert_eq!(gfx_target_of(v).as_deref(), Some(name), "{v}");
        }
        assert_eq!(gfx_target_of(0), None);
        assert_eq!(gfx_target_of(91600), None, "minor above one hex digit");
    }

    #[test]
    fn nvidia_version_lines_of_both_kernel_modules() {
        // Lines as quoted in public issues: the proprietary module (dylanaraps/neofetch#876), the open module
        // (nix-community/nixGL#186) and a Jetson's (nix-community/nixGL#139).
        let cases = [
            ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  384.98  Thu Oct 26 15:16:01 PDT 2017\nGCC version:  gcc version 7.2.0 (Ubuntu 7.2.0-8ubuntu3) \n", "384.98"),
            ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  565.57.01  Release Build  (dvs-builder@U16-A24-9-2)  Thu Oct 10 12:15:00 UTC 2024\nGCC version:  gcc version 13.3.0 (Ubuntu 13.3.0-6ubuntu2~24.04)\n", "565.57.01"),
            ("NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  35.3.1  Release Build  (buildbrain@mobile-u64-6289-d7000)  Sun Mar 19 08:09:33 PDT 2023\n", "35.3.1"),
        ];
        for (text, want) in cases {
            assert_eq!(nvidia_driver_version(text).as_deref(), Some(want), "{text}");
        }
        assert_eq!(nvidia_driver_version("nothing"), None);
    }

    #[test]
    fn only_card_and_render_nodes_are_devices() {
        assert!(is_node("card0") && is_node("renderD128"));
        assert!(!is_node("card0-DP-1") && !is_node("version") && !is_node("card"));
    }
}
