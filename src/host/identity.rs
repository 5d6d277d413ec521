//! Who this host is: its identity, stored with every run (SQLite and PostgreSQL alike) so that a report over many
//! hosts can group by GPU. Read from the running kernel only — `/proc/sys/kernel`, the DRM devices in sysfs, AMD's
//! KFD topology (`gfx_target_version`), `/proc/driver/nvidia` — with bounded reads; nothing here fails: what cannot
//! be read is left out. The ISA of each GPU is named by the GPU floor's tables, which stand on this floor, so the
//! caller hands them in ([`ArchNames`]; `crate::run::format::host::this_host` is the probe with them).
//!
//! `host_id` is the name runs are owned by in a shared database: the host name, or `BACKSCOPE_HOST_ID` when set
//! (two hosts that share a name, containers, and the tests that play two hosts on one machine).

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

/// Files here are a few lines; anything bigger is not what this module expects.
const SYSFS_LIMIT: u64 = 64 << 10;
/// No host has more GPUs than this; a bigger directory listing is cut.
const MAX_DEVICES: usize = 64;

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostIdentity {
    /// The name runs are owned by (`BACKSCOPE_HOST_ID`, else the host name).
    pub host_id: String,
    pub hostname: String,
    /// `uname -r`.
    pub kernel: String,
    pub gpus: Vec<HostGpu>,
    /// Driver and runtime versions the host reports: `nvidia` (the kernel module), `amdgpu`, `rocm`.
    pub runtimes: BTreeMap<String, String>,
    pub backscope_version: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostGpu {
    /// `amd`, `nvidia`, `intel` or the PCI vendor id.
    pub vendor: String,
    /// The product name where the driver gives one (`NVIDIA H100 80GB HBM3`, amdgpu's `product_name`).
    pub name: Option<String>,
    /// The ISA: `gfx906` for AMD (from KFD); for NVIDIA the compute capability (`sm_90`) looked up from the product
    /// name (`data/nvidia_products.toml`: the driver lists no capability), `None` for a product the table lacks.
    pub arch: Option<String>,
    /// The kernel driver bound to the device (`amdgpu`, `nvidia`, `i915`).
    pub driver: Option<String>,
    /// PCI address.
    pub pci: Option<String>,
}

/// How the probe names a GPU's ISA from what the kernel reports.
#[derive(Clone, Copy)]
pub struct ArchNames {
    /// KFD's `gfx_target_version` → the gfx ISA (`90006` → `gfx906`).
    pub amd: fn(u64) -> Option<String>,
    /// The NVIDIA driver's product name → the compute capability (`NVIDIA H100 80GB HBM3` → `sm_90`).
    pub nvidia: fn(&str) -> Option<String>,
}

/// The host name the kernel reports.
fn hostname() -> String {
    read_trim(Path::new("/proc/sys/kernel/hostname")).unwrap_or_else(|| "unknown-host".into())
}

/// The name runs are owned by on a host called `hostname`: `BACKSCOPE_HOST_ID` when set, else the host name.
fn host_id_of(hostname: &str) -> String {
    let host_id = std::env::var("BACKSCOPE_HOST_ID").ok().filter(|s| !s.trim().is_empty());
    host_id.map(|s| s.trim().to_string()).unwrap_or_else(|| hostname.to_string())
}

/// The name this host's runs are owned by ([`HostIdentity::host_id`]), without probing its GPUs.
pub fn host_id() -> String {
    host_id_of(&hostname())
}

impl HostIdentity {
    /// This host, now, its GPUs' ISAs named by `names`.
    pub fn probe(names: ArchNames) -> HostIdentity {
        let hostname = hostname();
        let mut gpus = drm_gpus(Path::new("/sys/class/drm"));
        fill_amd_archs(&mut gpus, Path::new("/sys/class/kfd/kfd/topology/nodes"), names.amd);
        fill_nvidia_names(&mut gpus, Path::new("/proc/driver/nvidia/gpus"), names.nvidia);
        HostIdentity {
            host_id: host_id_of(&hostname),
            hostname,
            kernel: read_trim(Path::new("/proc/sys/kernel/osrelease")).unwrap_or_default(),
            gpus,
            runtimes: runtimes(),
            backscope_version: env!("CARGO_PKG_VERSION").into(),
        }
    }

    /// The GPUs as a report groups them: the archs (or names, or vendors) joined, `no GPU` for none.
    pub fn gpu_label(&self) -> String {
        let mut labels: Vec<String> = self
            .gpus
            .iter()
            .map(|g| g.arch.clone().or_else(|| g.name.clone()).unwrap_or_else(|| g.vendor.clone()))
            .collect();
        labels.sort();
        labels.dedup();
        if labels.is_empty() {
            "no GPU".into()
        } else {
            labels.join("+")
        }
    }
}

fn read_trim(path: &Path) -> Option<String> {
    let text = crate::host::inputs::read_text_limited(path, SYSFS_LIMIT).ok()?;
    Some(text.trim().to_string()).filter(|s| !s.is_empty())
}

fn sorted_entries(dir: &Path) -> Vec<std::path::PathBuf> {
    let Ok(rd) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut v: Vec<_> = rd.flatten().take(4 * MAX_DEVICES).map(|e| e.path()).collect();
    v.sort();
    v
}

fn vendor_name(id: &str) -> String {
    match id {
        "0x1002" => "amd".into(),
        "0x10de" => "nvidia".into(),
        "0x8086" => "intel".into(),
        other => other.into(),
    }
}

/// DRM cards (`cardN`, not their connectors `cardN-DP-1`): vendor, driver, PCI address, amdgpu's product name.
fn drm_gpus(drm: &Path) -> Vec<HostGpu> {
    let mut out = Vec::new();
    for card in sorted_entries(drm) {
        let name = card.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        if !name.starts_with("card") || name.contains('-') || out.len() >= MAX_DEVICES {
            continue;
        }
        let dev = card.join("device");
        let link_name =
            |p: &Path| std::fs::read_link(p).ok().and_then(|l| l.file_name().map(|f| f.to_string_lossy().into()));
        out.push(HostGpu {
            vendor: read_trim(&dev.join("vendor")).map(|v| vendor_name(&v)).unwrap_or_else(|| "unknown".into()),
            name: read_trim(&dev.join("product_name")),
            arch: None,
            driver: link_name(&dev.join("driver")),
            pci: link_name(&dev),
        });
    }
    out
}

/// KFD topology nodes with a `gfx_target_version` (CPU nodes have 0) give AMD GPUs their ISA, matched to DRM cards
/// in order; KFD nodes without a DRM card (rare) are added.
fn fill_amd_archs(gpus: &mut Vec<HostGpu>, nodes: &Path, gfx_target_of: fn(u64) -> Option<String>) {
    let mut archs = Vec::new();
    for node in sorted_by_number(nodes) {
        let Some(props) = read_trim(&node.join("properties")) else { continue };
        let version = props
            .lines()
            .find_map(|l| l.strip_prefix("gfx_target_version "))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .filter(|v| *v != 0);
        if let Some(arch) = version.and_then(gfx_target_of) {
            archs.push(arch);
        }
    }
    let amd: Vec<usize> = (0..gpus.len()).filter(|&i| gpus[i].vendor == "amd").collect();
    for (n, arch) in archs.into_iter().enumerate() {
        match amd.get(n) {
            Some(&i) => gpus[i].arch = Some(arch),
            None if gpus.len() < MAX_DEVICES => {
                gpus.push(HostGpu { vendor: "amd".into(), arch: Some(arch), ..Default::default() })
            }
            None => {}
        }
    }
}

/// KFD nodes are numbered directories: sorted by number, not by name (10 after 9).
fn sorted_by_number(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut v = sorted_entries(dir);
    v.sort_by_key(|p| p.file_name().and_then(|n| n.to_str()).and_then(|n| n.parse::<u64>().ok()).unwrap_or(u64::MAX));
    v.truncate(MAX_DEVICES);
    v
}

/// `/proc/driver/nvidia/gpus/<pci>/information` names each NVIDIA GPU (`Model: NVIDIA H100 80GB HBM3`), matched
/// to its DRM card by PCI address; a GPU without a DRM card is added. That file has no compute capability, so the
/// arch comes from the product name.
fn fill_nvidia_names(gpus: &mut Vec<HostGpu>, dir: &Path, arch_of: fn(&str) -> Option<String>) {
    for gpu_dir in sorted_entries(dir) {
        let Some(info) = read_trim(&gpu_dir.join("information")) else { continue };
        let model = info.lines().find_map(|l| l.strip_prefix("Model:")).map(|m| m.trim().to_string());
        let pci = gpu_dir.file_name().map(|f| f.to_string_lossy().to_ascii_lowercase());
        let known = gpus.iter().position(|g| g.vendor == "nvidia" && g.pci.is_some() && g.pci == pci);
        let arch = model.as_deref().and_then(arch_of);
        match known {
            Some(i) => {
                gpus[i].name = model;
                gpus[i].arch = arch;
            }
            // A container may see the driver's GPUs without their DRM cards.
            None if gpus.len() < MAX_DEVICES => {
                gpus.push(HostGpu { vendor: "nvidia".into(), name: model, arch, driver: Some("nvidia".into()), pci })
            }
            None => {}
        }
    }
}

/// Driver and runtime versions: the NVIDIA kernel module, amdgpu's module version, ROCm's install.
fn runtimes() -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    if let Some(v) = read_trim(Path::new("/proc/driver/nvidia/version")) {
        // `NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 …`
        if let Some(ver) = v.lines().next().and_then(|l| {
            l.split_whitespace().find(|w| w.chars().next().is_some_and(|c| c.is_ascii_digit()) && w.contains('.'))
        }) {
            out.insert("nvidia".into(), ver.to_string());
        }
    }
    if let Some(v) = read_trim(Path::new("/sys/module/amdgpu/version")) {
        out.insert("amdgpu".into(), v);
    }
    if let Some(v) = read_trim(Path::new("/opt/rocm/.info/version")) {
        out.insert("rocm".into(), v);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names a run's probe uses (`crate::run::format::host::this_host`).
    const GPU_TABLES: ArchNames = ArchNames {
        amd: crate::gpu::knowledge::archs::gfx_target_of,
        nvidia: crate::gpu::knowledge::nvidia_products::arch_of,
    };

    #[test]
    fn the_running_kernel_names_this_host() {
        let h = HostIdentity::probe(GPU_TABLES);
        // Independent sources: uname(2) through libc.
        let mut u: libc::utsname = unsafe { std::mem::zeroed() };
        assert_eq!(unsafe { libc::uname(&mut u) }, 0);
        let field =
            |f: &[libc::c_char]| -> String { f.iter().take_while(|&&c| c != 0).map(|&c| c as u8 as char).collect() };
        assert_eq!(h.hostname, field(&u.nodename));
        assert_eq!(h.kernel, field(&u.release));
        if std::env::var_os("BACKSCOPE_HOST_ID").is_none() {
            assert_eq!(h.host_id, h.hostname);
        }
    }

    #[test]
    fn kfd_nodes_give_amd_cards_their_isa() {
        let dir = tempfile::tempdir().unwrap();
        let drm = dir.path().join("drm");
        for (card, vendor) in [("card0", "0x1002"), ("card1", "0x1002"), ("card0-DP-1", "0x1002")] {
            std::fs::create_dir_all(drm.join(card).join("device")).unwrap();
            std::fs::write(drm.join(card).join("device/vendor"), format!("{vendor}\n")).unwrap();
        }
        let nodes = dir.path().join("nodes");
        // Node 0 is the CPU; 10 sorts after 2 by number. Values from kfd_device.c's table: gfx906 = 90006,
        // gfx1201 = 120001.
        for (n, v) in [("0", 0u64), ("2", 90006), ("10", 120001)] {
            std::fs::create_dir_all(nodes.join(n)).unwrap();
            std::fs::write(nodes.join(n).join("properties"), format!("cpu_cores_count 0\ngfx_target_version {v}\n"))
                .unwrap();
        }
        let mut gpus = drm_gpus(&drm);
        assert_eq!(gpus.len(), 2, "connectors are no cards");
        fill_amd_archs(&mut gpus, &nodes, GPU_TABLES.amd);
        let archs: Vec<_> = gpus.iter().map(|g| g.arch.as_deref()).collect();
        assert_eq!(archs, [Some("gfx906"), Some("gfx1201")]);
        // The driver's own listing: a GPU with a DRM card gets its name, one without is added.
        let nv = dir.path().join("nvidia");
        for (pci, model) in [("0000:18:00.0", "NVIDIA H100 80GB HBM3"), ("0000:2a:00.0", "NVIDIA H100 80GB HBM3")] {
            std::fs::create_dir_all(nv.join(pci)).unwrap();
            std::fs::write(nv.join(pci).join("information"), format!("Model: \t\t {model}\nIRQ: 1\n")).unwrap();
        }
        let mut nv_gpus =
            vec![HostGpu { vendor: "nvidia".into(), pci: Some("0000:18:00.0".into()), ..Default::default() }];
        fill_nvidia_names(&mut nv_gpus, &nv, GPU_TABLES.nvidia);
        let names: Vec<_> = nv_gpus.iter().map(|g| (g.pci.as_deref(), g.name.as_deref())).collect();
        assert_eq!(
            names,
            [
                (Some("0000:18:00.0"), Some("NVIDIA H100 80GB HBM3")),
                (Some("0000:2a:00.0"), Some("NVIDIA H100 80GB HBM3"))
            ]
        );
        // H100: compute capability 9.0 on NVIDIA's CUDA GPUs list, both for the card with and without a DRM node.
        let nv_archs: Vec<_> = nv_gpus.iter().map(|g| g.arch.as_deref()).collect();
        assert_eq!(nv_archs, [Some("sm_90"), Some("sm_90")]);
        let h = HostIdentity { gpus, ..Default::default() };
        assert_eq!(h.gpu_label(), "gfx1201+gfx906");
        assert_eq!(HostIdentity::default().gpu_label(), "no GPU");
    }
}
