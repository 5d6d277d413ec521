//! GPU architectures (`data/gpu_archs.toml`): what the hardware has, as ggml reads it, and the device ggml's
//! dispatch sees for an `--arch` argument.

use serde::{Deserialize, Serialize};

use super::dispatch::rules::Vendor;
use super::dispatch::Device;
use crate::gpu::arch::DeviceArch;

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct AmdArch {
    pub id: String,
    pub family: String,
    pub products: String,
    pub wave: u64,
    pub int8_dot: String,
    pub fp16_dot2: bool,
    pub fp16_dual: bool,
    pub matrix: String,
    pub ggml_cc: u64,
    pub smem_per_block: u64,
    pub source: String,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct NvidiaArch {
    pub sm: u64,
    pub generation: String,
    pub products: String,
    pub dp4a: bool,
    pub tensor_cores: String,
    pub fast_fp16: bool,
    pub smem_per_block: u64,
    pub source: String,
}

impl NvidiaArch {
    /// ggml's compute capability: 100*major + 10*minor (ggml-cuda.cu:344).
    pub fn ggml_cc(&self) -> u64 {
        self.sm * 10
    }
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuArchs {
    pub amd: Vec<AmdArch>,
    pub nvidia: Vec<NvidiaArch>,
}

/// A known architecture row.
#[derive(Clone, Copy, Debug)]
pub enum ArchRow<'a> {
    Amd(&'a AmdArch),
    Nvidia(&'a NvidiaArch),
}

impl ArchRow<'_> {
    pub fn label(&self) -> String {
        match self {
            ArchRow::Amd(a) => a.id.clone(),
            ArchRow::Nvidia(n) => format!("sm_{}", n.sm),
        }
    }

    pub fn family(&self) -> &str {
        match self {
            ArchRow::Amd(a) => &a.family,
            ArchRow::Nvidia(n) => &n.generation,
        }
    }

    pub fn source(&self) -> &str {
        match self {
            ArchRow::Amd(a) => &a.source,
            ArchRow::Nvidia(n) => &n.source,
        }
    }

    /// The device as ggml's CUDA/HIP backend sees it.
    pub fn device(&self) -> Device {
        match self {
            ArchRow::Amd(a) => Device {
                label: a.id.clone(),
                vendor: Vendor::Amd,
                cc: a.ggml_cc,
                warp_size: a.wave,
                smem_per_block: a.smem_per_block,
            },
            ArchRow::Nvidia(n) => Device {
                label: format!("sm_{}", n.sm),
                vendor: Vendor::Nvidia,
                cc: n.ggml_cc(),
                warp_size: 32,
                smem_per_block: n.smem_per_block,
            },
        }
    }
}

impl GpuArchs {
    /// The row for an `--arch` argument (`gfx900`, `gfx90a:xnack-`, `sm_86`, `8.6`); target features are
    /// ignored, as ggml's ggml_cuda_parse_id cuts them off.
    pub fn find(&self, arch: &DeviceArch) -> Option<ArchRow<'_>> {
        match arch {
            DeviceArch::Amd { id } => {
                let processor = id.split(':').next().unwrap_or(id);
                self.amd.iter().find(|a| a.id == processor).map(ArchRow::Amd)
            }
            DeviceArch::Nvidia { sm } => self.nvidia.iter().find(|n| n.sm == u64::from(*sm)).map(ArchRow::Nvidia),
            DeviceArch::Unknown(_) => None,
        }
    }

    /// Every id, for error messages.
    pub fn known(&self) -> Vec<String> {
        self.amd.iter().map(|a| a.id.clone()).chain(self.nvidia.iter().map(|n| format!("sm_{}", n.sm))).collect()
    }
}

/// ggml's compute-capability number for a gfx name, as ggml_cuda_parse_id computes it (ggml-cuda.cu:171-218):
/// strip `gfx` and any `:feature`, the last two hex digits are minor and stepping, the rest the major version.
/// `None` for names it would reject (fewer than three digits, not hex) and for generic targets.
pub fn ggml_cc_of_gfx(name: &str) -> Option<u64> {
    let digits = name.strip_prefix("gfx")?.split(':').next()?;
    if digits.len() < 3 || digits.len() > 8 || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let (major, minor) = digits.split_at(digits.len() - 2);
    let major = u64::from_str_radix(major, 16).ok()?;
    let minor = u64::from_str_radix(minor, 16).ok()?;
    Some(0x100_0000 + major * 0x100 + minor)
}

/// The ISA a KFD `gfx_target_version` names: major·10000 + minor·100 + stepping, written as LLVM writes the
/// processor (`gfx` + major in decimal + minor and stepping as one hex digit each): 90006 → gfx906, 90010 →
/// gfx90a, 100300 → gfx1030 (Linux drivers/gpu/drm/amd/amdkfd/kfd_device.c, the gfx_target_version table).
pub fn gfx_target_of(version: u64) -> Option<String> {
    let (major, minor, stepping) = (version / 10000, (version / 100) % 100, version % 100);
    if major == 0 || minor > 15 || stepping > 15 {
        return None;
    }
    Some(format!("gfx{major}{minor:x}{stepping:x}"))
}
