//! The kernels, pipelines and devices of a summary: one row per kernel merged across processes, its short name, the
//! ggml family totals and the devices the traces name.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::gpu::kernels;
use crate::observe::vulkan::{self, Shaders};
use crate::trace::{KernelStats, TraceFile};

/// One kernel as observed, merged across processes: a row of `backscope trace`'s summary and of a sweep record's
/// trace section (`sweep::record::TraceKernel`), both built from [`Aggregate`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObservedKernel {
    /// As the runtime knows it (mangled for C++ kernels).
    pub name: String,
    pub demangled: String,
    /// `cuda`, `cu`, `hip`, `hip_module`, `vulkan`.
    pub api: String,
    /// ggml family (MMVQ, MMQ, …) from `crate::gpu::kernels::describe`.
    pub family: String,
    /// The vendor library of a vendor-BLAS kernel (`cuBLASLt`, `CUTLASS`, `rocBLAS/Tensile`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub library: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ggml_type: Option<String>,
    /// Launches: direct launch calls plus kernels run by replays of captured graphs (failed calls included).
    pub launches: u64,
    /// Of those, kernels run through graph replays.
    #[serde(default)]
    pub graph: u64,
    /// Of those, launch calls that returned an error (the kernel did not run).
    #[serde(default)]
    pub errors: u64,
    /// The most frequent (grid, block) shapes with their counts; sweep records leave them out. For a Vulkan
    /// pipeline: workgroup counts and the workgroup size.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shapes: Vec<([u32; 3], [u32; 3], u64)>,
    /// Vulkan: the shaders embedded in libggml-vulkan.so that the pipeline's SPIR-V matched.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shaders: Vec<String>,
    /// Vulkan: matmul tile and alignment, coopmat or subgroup variant, in words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant: Option<String>,
    /// Vulkan: the ggml op the pipeline computes, as GGML_VK_PERF_LOGGER names the graph node (data/vulkan_pipelines.toml).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub op: Option<String>,
    /// Vulkan: a dispatch a node issues besides its main pipeline (split-k reductions and the like).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub helper: bool,
}

/// How a kernel or pipeline name reads: what to show, its family and ggml type, and (Vulkan) its variant.
pub struct RowName {
    pub shown: String,
    pub family: String,
    /// The vendor library of a vendor-BLAS kernel.
    pub library: Option<String>,
    pub ggml_type: Option<String>,
    pub variant: Option<String>,
    pub op: Option<String>,
    pub helper: bool,
}

impl RowName {
    /// CUDA/HIP kernels by their (mangled) name (`crate::gpu::kernels`), Vulkan pipelines by name and the shaders their
    /// SPIR-V matched (`crate::observe::vulkan`).
    pub fn of(api: &str, name: &str, shaders: &[String]) -> RowName {
        if api == trace_format::record::api::VULKAN {
            let d = vulkan::describe(name, shaders.first().map(String::as_str));
            return RowName {
                shown: name.to_string(),
                family: d.family.to_string(),
                library: None,
                ggml_type: d.ggml_type.map(str::to_string),
                variant: d.variant,
                op: d.op.map(str::to_string),
                helper: d.helper,
            };
        }
        let d = kernels::describe(name);
        RowName {
            shown: d.demangled,
            family: d.family.to_string(),
            library: d.library.map(str::to_string),
            ggml_type: d.ggml_type.map(str::to_string),
            variant: None,
            op: None,
            helper: false,
        }
    }
}

impl ObservedKernel {
    /// A row for one aggregated kernel, classified by name (Vulkan pipelines also by the shaders `shaders` says
    /// they ran), with its `shapes` most frequent shapes.
    pub fn new(stats: KernelStats, shapes: usize, shader_names: &Shaders) -> ObservedKernel {
        let run = if stats.api == trace_format::record::api::VULKAN { shader_names.of(&stats.name) } else { &[] };
        let d = RowName::of(&stats.api, &stats.name, run);
        ObservedKernel {
            demangled: d.shown,
            family: d.family,
            library: d.library,
            ggml_type: d.ggml_type,
            api: stats.api,
            launches: stats.launches,
            graph: stats.graph,
            errors: stats.errors,
            shapes: stats.shapes.iter().take(shapes).map(|(sh, n)| (sh.grid, sh.block, *n)).collect(),
            shaders: run.to_vec(),
            variant: d.variant,
            op: d.op,
            helper: d.helper,
            name: stats.name,
        }
    }
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct FamilyTotal {
    pub family: String,
    pub kernels: u64,
    pub launches: u64,
    pub graph: u64,
    pub errors: u64,
}

/// A Vulkan device the layer described (a `device` record), with the processes that used it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceSummary {
    pub pids: Vec<u32>,
    pub name: String,
    pub driver: String,
    pub driver_info: String,
    /// `major.minor.patch`.
    pub api_version: String,
    pub vendor_id: u32,
    pub device_id: u32,
    pub device_type: String,
    pub subgroup_size: u32,
    pub subgroup_size_min: u32,
    pub subgroup_size_max: u32,
    pub integer_dot: bool,
    pub cooperative_matrix: bool,
    /// The shader cores as ggml-vulkan reads them (SMs, active CUs), and the extension that gave them; absent in
    /// traces of layers that did not record them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shader_core_count: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shader_core_count_from: Option<String>,
    pub flags: BTreeMap<String, bool>,
    /// The device answered as a profile (`backscope trace --impersonate`): which, and the device that really ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub impersonated: Option<trace_reader::Impersonated>,
}

impl DeviceSummary {
    /// The devices of `traces`, one per distinct device, in order of first appearance.
    pub fn of<'a>(traces: impl IntoIterator<Item = &'a TraceFile>) -> Vec<DeviceSummary> {
        let mut out: Vec<DeviceSummary> = Vec::new();
        for t in traces {
            for d in t.devices.values() {
                let same = |s: &&mut DeviceSummary| {
                    s.name == d.name
                        && s.driver_info == d.driver_info
                        && (s.vendor_id, s.device_id) == (d.vendor_id, d.device_id)
                };
                if let Some(s) = out.iter_mut().find(same) {
                    if !s.pids.contains(&t.pid()) {
                        s.pids.push(t.pid());
                    }
                    continue;
                }
                out.push(DeviceSummary {
                    pids: vec![t.pid()],
                    name: d.name.clone(),
                    driver: d.driver.clone(),
                    driver_info: d.driver_info.clone(),
                    api_version: format!("{}.{}.{}", d.api_version[0], d.api_version[1], d.api_version[2]),
                    vendor_id: d.vendor_id,
                    device_id: d.device_id,
                    device_type: d.device_type.clone(),
                    subgroup_size: d.subgroup_size,
                    subgroup_size_min: d.subgroup_size_min,
                    subgroup_size_max: d.subgroup_size_max,
                    integer_dot: d.integer_dot,
                    cooperative_matrix: d.cooperative_matrix,
                    shader_core_count: d.shader_core_count,
                    shader_core_count_from: d.shader_core_count_from.clone(),
                    flags: d.flags.clone(),
                    impersonated: d.impersonated.clone(),
                });
            }
        }
        out
    }

    /// The claim sentence: what the device offers of what ggml-vulkan chooses its shaders by.
    pub fn statement(&self) -> String {
        let yes = |b: bool| if b { "offered" } else { "not offered" };
        let flag = |f: &str| match self.flags.get(f) {
            Some(true) => "yes",
            Some(false) => "no",
            None => "unknown",
        };
        let sizes = if self.subgroup_size_min > 0 {
            format!(" ({}–{} with subgroup size control)", self.subgroup_size_min, self.subgroup_size_max)
        } else {
            String::new()
        };
        let impersonated = match &self.impersonated {
            Some(i) => format!(
                " [impersonated: profile {} answered ggml's device queries; the work ran on {} ({}) with empty shaders]",
                i.profile, i.real_name, i.real_driver
            ),
            None => String::new(),
        };
        format!(
            "Vulkan device {} (driver {}, {}; vendor {:#06x}, device {:#06x}, {}, Vulkan {}) was used by pid {}: subgroup \
             size {}{sizes}, integer dot product {}, cooperative matrix {}, FP16 shaders {}, subgroup arithmetic {} \
             (the device's side of ggml-vulkan's `int dot` and `matrix cores`; ggml also needs shaders built for them)\
             {impersonated}",
            self.name,
            self.driver,
            self.driver_info,
            self.vendor_id,
            self.device_id,
            self.device_type,
            self.api_version,
            self.pids.iter().map(u32::to_string).collect::<Vec<_>>().join(", "),
            self.subgroup_size,
            yes(self.integer_dot),
            yes(self.cooperative_matrix),
            flag("fp16"),
            flag("subgroup_arithmetic"),
        )
    }
}

pub fn short_name(demangled: &str) -> String {
    let mut s: String = demangled.chars().take(70).collect();
    if demangled.chars().count() > 70 {
        s.push('…');
    }
    s
}
