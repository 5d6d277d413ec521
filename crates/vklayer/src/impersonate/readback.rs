//! Results ggml's host code reads back to decide what to do next. Under impersonation every shader is empty, so an
//! output is whatever its buffer held before. Almost always that is harmless: ggml never looks at the numbers. One
//! result it does look at is the routed expert ids of a MoE layer. When the layer's weights stay in CPU memory and
//! its batch is offloaded to the GPU, ggml's scheduler reads the ids back to copy only the experts in use
//! (ggml-backend.cpp:1883-1892) and stops at `GGML_ASSERT(id >= 0 && id < n_expert)` on garbage.
//!
//! So the pipelines that compute such ids (`READ_BACK`, by the debug name ggml gives them) get their bound storage
//! buffers zero-filled before each dispatch: every id is then expert 0, a valid id. The choices ggml makes for
//! the dispatches do not change: only which expert's weights the scheduler copies does. That is a host-to-device
//! transfer, not a dispatch.
//!
//! What is tracked, only while impersonating: the storage-buffer ranges written into each descriptor set
//! (`vkUpdateDescriptorSets`), the compute pipeline and set 0 each command buffer has bound, and which pipelines are
//! named as readback ones.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

use ash::vk;
use ash::vk::Handle;

/// Debug-name prefixes of ggml-vulkan's pipelines whose output is the expert ids: the fused router (`topk_moe_f32_N`)
/// and the unfused sort (`argsort_f32…`, `topk_f32…`).
const READ_BACK: [&[u8]; 3] = [b"topk_moe", b"argsort", b"topk"];

/// Most descriptor sets tracked: ggml allocates them in pools of 256 and reuses them, so a run has hundreds to a few
/// thousand. A program that makes more is not ggml, and the rest are simply not zero-filled.
const MAX_SETS: usize = 1 << 16;
/// Most bindings of one set kept (ggml's `MAX_PARAMETER_COUNT` is 12).
const MAX_BINDINGS: usize = 32;

/// One storage-buffer binding: the buffer, the offset and the range ggml wrote into the set.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Range {
    pub buffer: u64,
    pub offset: u64,
    pub range: u64,
}

struct Tracked {
    readback: BTreeSet<u64>,
    sets: BTreeMap<u64, Vec<Range>>,
    /// Per command buffer: its compute pipeline is a readback one; its bound set 0.
    bound: BTreeMap<u64, (bool, u64)>,
}

static TRACKED: Mutex<Tracked> =
    Mutex::new(Tracked { readback: BTreeSet::new(), sets: BTreeMap::new(), bound: BTreeMap::new() });

fn with<T>(f: impl FnOnce(&mut Tracked) -> T) -> T {
    let mut t = TRACKED.lock().unwrap_or_else(|e| e.into_inner());
    f(&mut t)
}

/// Whether a pipeline's debug name makes it a readback one.
pub fn is_readback_name(name: &[u8]) -> bool {
    READ_BACK.iter().any(|p| name.starts_with(p))
}

/// `vkSetDebugUtilsObjectNameEXT` on a pipeline.
pub fn pipeline_named(pipeline: u64, name: &[u8]) {
    if is_readback_name(name) {
        with(|t| t.readback.insert(pipeline));
    }
}

/// `vkDestroyPipeline`: a new pipeline may get the handle.
pub fn pipeline_destroyed(pipeline: u64) {
    with(|t| t.readback.remove(&pipeline));
}

/// A storage-buffer write of `vkUpdateDescriptorSets`: `infos` from binding `first` of `set` on.
pub fn descriptors_written(set: u64, first: u32, infos: &[vk::DescriptorBufferInfo]) {
    with(|t| {
        if t.sets.len() >= MAX_SETS && !t.sets.contains_key(&set) {
            return;
        }
        let ranges = t.sets.entry(set).or_default();
        // A write from binding 0 is a new dispatch's whole set (ggml writes all its parameters at once); bindings
        // of the set's earlier use by a pipeline with more parameters may name buffers since destroyed.
        if first == 0 {
            ranges.clear();
        }
        for (i, info) in infos.iter().enumerate() {
            let at = first as usize + i;
            if at >= MAX_BINDINGS {
                break;
            }
            if ranges.len() <= at {
                ranges.resize(at + 1, Range::default());
            }
            ranges[at] = Range { buffer: info.buffer.as_raw(), offset: info.offset, range: info.range };
        }
    });
}

/// `vkCmdBindPipeline` at the compute bind point.
pub fn pipeline_bound(cb: u64, pipeline: u64) {
    with(|t| {
        let readback = t.readback.contains(&pipeline);
        t.bound.entry(cb).or_default().0 = readback;
    });
}

/// `vkCmdBindDescriptorSets` at the compute bind point, from set `first` on.
pub fn sets_bound(cb: u64, first: u32, sets: &[u64]) {
    if let (0, Some(&set)) = (first, sets.first()) {
        with(|t| t.bound.entry(cb).or_default().1 = set);
    }
}

/// `vkFreeCommandBuffers` / pool destruction.
pub fn command_buffer_gone(cb: u64) {
    with(|t| t.bound.remove(&cb));
}

/// What to zero before a dispatch recorded into `cb`: the bound set's storage ranges when the bound pipeline is a
/// readback one, as `vkCmdFillBuffer` takes them (offset and size multiples of 4; `VK_WHOLE_SIZE` kept).
pub fn to_zero(cb: u64) -> Vec<Range> {
    with(|t| {
        let Some(&(true, set)) = t.bound.get(&cb) else { return Vec::new() };
        let ranges = t.sets.get(&set).map(Vec::as_slice).unwrap_or_default();
        ranges
            .iter()
            .filter(|r| r.buffer != 0 && r.offset % 4 == 0)
            .map(|r| Range { range: if r.range == vk::WHOLE_SIZE { r.range } else { r.range & !3 }, ..*r })
            .filter(|r| r.range != 0)
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_readback_pipeline_bound_with_its_set_is_zeroed() {
        assert!(is_readback_name(b"topk_moe_f32_3") && is_readback_name(b"argsort_f32"));
        assert!(!is_readback_name(b"matmul_id_subgroup_q4_k_f32") && !is_readback_name(b"mul_mat_vec_q8_0_f32_f32"));
        let (cb, router, matmul, set) = (0xc0ffee_u64, 0x1001_u64, 0x1002_u64, 0x5e7_u64);
        pipeline_named(router, b"topk_moe_f32_3");
        pipeline_named(matmul, b"matmul_id_subgroup_q4_k_f32");
        let info = |buffer: u64, offset: u64, range: u64| vk::DescriptorBufferInfo {
            buffer: vk::Buffer::from_raw(buffer),
            offset,
            range,
        };
        descriptors_written(set, 0, &[info(7, 0, 4096), info(8, 256, 66), info(9, 2, 64)]);
        descriptors_written(set, 3, &[info(10, 0, vk::WHOLE_SIZE)]);
        sets_bound(cb, 0, &[set]);
        pipeline_bound(cb, matmul);
        assert!(to_zero(cb).is_empty(), "a pipeline whose output the host does not read is left alone");
        pipeline_bound(cb, router);
        let zero = to_zero(cb);
        // Range 66 is cut to 64; the binding at offset 2 cannot be filled and is left out.
        let expected = [(7, 0, 4096), (8, 256, 64), (10, 0, vk::WHOLE_SIZE)];
        assert_eq!(zero.iter().map(|r| (r.buffer, r.offset, r.range)).collect::<Vec<_>>(), expected);
        // The set written again from binding 0 for a pipeline with fewer parameters keeps only those.
        descriptors_written(set, 0, &[info(11, 0, 128)]);
        assert_eq!(to_zero(cb).iter().map(|r| (r.buffer, r.offset, r.range)).collect::<Vec<_>>(), [(11, 0, 128)]);
        pipeline_destroyed(router);
        pipeline_bound(cb, router);
        assert!(to_zero(cb).is_empty(), "a destroyed pipeline's handle is no longer a readback one");
        command_buffer_gone(cb);
    }
}
