//! Device impersonation: with `BACKSCOPE_VK_IMPERSONATE` naming a profile file (`profile`), every physical device
//! of the process answers ggml-vulkan's device queries from the profile instead of the driver, so that ggml's host
//! code picks the pipelines it would pick on the profiled device while the work runs on the real one (lavapipe, in
//! practice). What ggml chose is then what the trace records, under ggml's own pipeline names.
//!
//! What changes in the calls (`api::physical` and the device hooks):
//! * answered from the profile: `vkGetPhysicalDeviceProperties(2)` (the core properties and limits, subgroup,
//!   Vulkan 1.1/1.2, driver, float controls, subgroup size control, integer dot product, maintenance 3/4, AMD
//!   shader core (1 and 2) and NVIDIA SM builtins structures), `vkGetPhysicalDeviceFeatures(2)` (every structure of
//!   `feature_table`), `vkEnumerateDeviceExtensionProperties`, `vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR`
//!   and `vkGetPhysicalDeviceCooperativeMatrixFlexibleDimensionsPropertiesNV` (no entries);
//! * left to the real device: memory properties and heaps, queue families, formats, and any property structure not
//!   listed above (the layer overwrites after the driver answered);
//! * `vkCreateDevice`: extensions the real device lacks are dropped, feature structures it does not know are unlinked
//!   and the others are ANDed with what it offers;
//! * every shader module becomes an empty compute shader (`EMPTY_SHADER`), so nothing the profiled device could run
//!   and the real one cannot reaches the driver; pipelines lose their required subgroup size, their stage and
//!   pipeline flags and their extension structures; dispatches are clamped to the real device's workgroup-count
//!   limits when forwarded (the trace records what ggml asked for). Results are garbage; choices are ggml's.
//! * the few extensions whose use needs the real device (`NEEDS_REAL`) are withheld when it lacks them;
//! * the outputs of the pipelines whose results ggml's host code reads back to decide (the MoE router's expert ids)
//!   are zero-filled before each dispatch (`readback`), so that a valid id comes back.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

pub mod answers;
mod create;
mod feature_table;
pub mod flat_json;
pub mod profile;
pub mod readback;

pub use create::{device_create_info, pipeline_create_infos, RealDevice};
pub use profile::Profile;

static PROFILE: OnceLock<Option<Profile>> = OnceLock::new();

/// Why the named profile could not be used, when it could not (set once, read by `vkCreateInstance`).
static FAILURE: OnceLock<String> = OnceLock::new();

/// The profile this process impersonates, if `BACKSCOPE_VK_IMPERSONATE` names one that could be read.
pub fn active() -> Option<&'static Profile> {
    PROFILE.get_or_init(load).as_ref()
}

/// [`active`], as the recording hooks ask it at every dispatch.
static IMPERSONATING: &crate::flag::OnceFlag = &crate::flag::IMPERSONATING;

/// Whether a profile is impersonated: one relaxed load once known (the recording hooks' fast path when the layer does
/// not observe).
#[inline(always)]
pub fn impersonating() -> bool {
    IMPERSONATING.get(|| active().is_some())
}

/// Whether `BACKSCOPE_VK_IMPERSONATE` is set at all (a profile that cannot be read then fails instance creation
/// instead of letting the program run as the real device, which would pass a real run off as an impersonated one).
pub fn requested() -> bool {
    format::env::get(format::env::VK_IMPERSONATE).is_some_and(|v| !v.is_empty())
}

/// Why the requested profile is not active (`None` when it is, or none was requested).
pub fn failure() -> Option<&'static str> {
    active();
    FAILURE.get().map(String::as_str)
}

fn load() -> Option<Profile> {
    let path = format::env::get(format::env::VK_IMPERSONATE).filter(|p| !p.is_empty())?;
    let read = || -> Result<Profile, String> {
        use std::io::Read;
        let file = std::fs::File::open(&path).map_err(|e| format!("cannot open {path}: {e}"))?;
        let mut bytes = Vec::new();
        file.take(flat_json::MAX_BYTES as u64 + 1).read_to_end(&mut bytes).map_err(|e| format!("{path}: {e}"))?;
        profile::parse(&bytes).map_err(|e| format!("{path}: {e}"))
    };
    match read() {
        Ok(profile) => Some(profile),
        Err(why) => {
            let _ = FAILURE.set(why);
            None
        }
    }
}

/// Extensions whose use goes beyond queries and device creation: the application would call commands of them
/// (pipeline statistics, fault reports, host-pointer imports) or chain structures into other queries (memory budget)
/// that the real device cannot answer. The profile's claim of them is withheld where the real device lacks them;
/// none of them changes which pipeline ggml-vulkan picks.
const NEEDS_REAL: [&str; 4] = [
    "VK_KHR_pipeline_executable_properties",
    "VK_EXT_device_fault",
    "VK_EXT_external_memory_host",
    "VK_EXT_memory_budget",
];

/// Whether the profile's extension `name` is withheld from the application (see [`NEEDS_REAL`]).
pub fn hidden(name: &str, real_extensions: &[Vec<u8>]) -> bool {
    NEEDS_REAL.contains(&name) && !real_extensions.iter().any(|e| e == name.as_bytes())
}

/// An empty compute shader: SPIR-V 1.0, one `main` with local size 1×1×1 that returns at once. Every module an
/// impersonating process creates is replaced by it (specialization constants the pipeline sets for IDs the module
/// does not declare are ignored, as the Vulkan specification allows).
pub const EMPTY_SHADER: [u32; 35] = [
    0x0723_0203,     // magic number
    0x0001_0000,     // SPIR-V version 1.0
    0,               // generator: none registered
    5,               // id bound: ids 1..=4 are used
    0,               // schema
    (2 << 16) | 17,  // OpCapability (2 words)
    1,               //   Shader
    (3 << 16) | 14,  // OpMemoryModel (3 words)
    0,               //   Logical addressing
    1,               //   GLSL450 memory model
    (5 << 16) | 15,  // OpEntryPoint (5 words)
    5,               //   execution model GLCompute
    1,               //   function id %1
    0x6e69_616d,     //   "main", little-endian bytes m a i n
    0,               //   its NUL terminator and padding
    (6 << 16) | 16,  // OpExecutionMode (6 words)
    1,               //   for %1
    17,              //   LocalSize
    1,               //   x
    1,               //   y
    1,               //   z
    (2 << 16) | 19,  // OpTypeVoid (2 words)
    2,               //   result %2
    (3 << 16) | 33,  // OpTypeFunction (3 words)
    3,               //   result %3
    2,               //   returning %2 (void), no parameters
    (5 << 16) | 54,  // OpFunction (5 words)
    2,               //   result type %2 (void)
    1,               //   result id %1
    0,               //   function control None
    3,               //   function type %3
    (2 << 16) | 248, // OpLabel (2 words)
    4,               //   result %4
    (1 << 16) | 253, // OpReturn
    (1 << 16) | 56,  // OpFunctionEnd
];

/// The real device's `maxComputeWorkGroupCount`, recorded at `vkCreateDevice` (0: not known, nothing is clamped).
static REAL_GROUP_COUNT: [AtomicU32; 3] = [AtomicU32::new(0), AtomicU32::new(0), AtomicU32::new(0)];

pub fn set_real_group_count(limits: [u32; 3]) {
    for (slot, v) in REAL_GROUP_COUNT.iter().zip(limits) {
        slot.store(v, Ordering::Relaxed);
    }
}

/// A dispatch's workgroup counts within what the real device takes (the profiled device may take more); unchanged
/// when nothing is impersonated (the program then keeps to the real device's limits itself).
#[inline(always)]
pub fn clamp_groups(x: u32, y: u32, z: u32) -> (u32, u32, u32) {
    if !impersonating() {
        return (x, y, z);
    }
    clamp_to_real(x, y, z)
}

fn clamp_to_real(x: u32, y: u32, z: u32) -> (u32, u32, u32) {
    let clamp = |v: u32, i: usize| {
        let max = REAL_GROUP_COUNT[i].load(Ordering::Relaxed);
        if max == 0 {
            v
        } else {
            v.min(max)
        }
    };
    (clamp(x, 0), clamp(y, 1), clamp(z, 2))
}

/// Before a dispatch into `cb` on device `d`: when impersonating and the bound pipeline's output is read back by the
/// host ([`readback`]), zero-fill its bound storage ranges and make the fill visible to what follows.
pub fn zero_readback_outputs(cb: ash::vk::CommandBuffer, d: &crate::dispatch::DeviceDispatch) {
    use ash::vk::{self, Handle};
    if !impersonating() {
        return;
    }
    let (Some(fill), Some(barrier)) = (d.cmd_fill_buffer, d.cmd_pipeline_barrier) else { return };
    let ranges = readback::to_zero(cb.as_raw());
    if ranges.is_empty() {
        return;
    }
    for r in &ranges {
        // SAFETY: a buffer, offset and range the application bound for this dispatch; offset and size are
        // multiples of 4 or VK_WHOLE_SIZE (`readback::to_zero`); ggml's buffers allow transfers.
        unsafe { fill(cb, vk::Buffer::from_raw(r.buffer), r.offset, r.range, 0) };
    }
    let memory = vk::MemoryBarrier::default()
        .src_access_mask(vk::AccessFlags::TRANSFER_WRITE)
        .dst_access_mask(vk::AccessFlags::MEMORY_READ | vk::AccessFlags::MEMORY_WRITE);
    // SAFETY: one global memory barrier recorded into the application's command buffer, outside any render pass
    // (compute only).
    unsafe {
        barrier(
            cb,
            vk::PipelineStageFlags::TRANSFER,
            vk::PipelineStageFlags::ALL_COMMANDS,
            vk::DependencyFlags::empty(),
            1,
            &memory,
            0,
            std::ptr::null(),
            0,
            std::ptr::null(),
        )
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_empty_shader_is_well_formed_spirv() {
        let words = &EMPTY_SHADER[..];
        assert_eq!(words[0], 0x0723_0203);
        // Walk the instructions from the header on: each word count must land exactly on the next one, and the
        // ids used stay below the bound.
        let (mut at, mut opcodes) = (5, Vec::new());
        while at < words.len() {
            let count = (words[at] >> 16) as usize;
            assert!(count > 0 && at + count <= words.len(), "instruction at word {at}");
            opcodes.push(words[at] & 0xffff);
            at += count;
        }
        assert_eq!(at, words.len());
        assert_eq!(opcodes, [17, 14, 15, 16, 19, 33, 54, 248, 253, 56]);
        // The entry point's name is "main" with its terminator.
        let name: Vec<u8> = words[13..15].iter().flat_map(|w| w.to_le_bytes()).collect();
        assert_eq!(&name, b"main\0\0\0\0");
        // The module our own hasher and local-size reader see is a compute module of local size 1.
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        assert_eq!(crate::shader::LocalSize::parse(&bytes).resolve(b"main", |_| None), Some([1, 1, 1]));
    }

    #[test]
    fn dispatches_are_clamped_only_to_a_known_limit() {
        assert_eq!(clamp_to_real(70000, 1, 1), (70000, 1, 1));
        set_real_group_count([65535, 65535, 65535]);
        assert_eq!(clamp_to_real(70000, 3, 65536), (65535, 3, 65535));
        if !impersonating() {
            assert_eq!(clamp_groups(70000, 3, 65536), (70000, 3, 65536), "nothing impersonated: as the program asked");
        }
        set_real_group_count([0, 0, 0]);
    }
}
