//! backscope's Vulkan layer: counts compute dispatches per pipeline inside a process, without
//! changing what the process does, and writes them to a backscope trace file
//! (`docs/trace-format.md`: `device` records, Vulkan pipelines as kernels, windows of dispatches).
//!
//! The Vulkan loader loads it as an explicit layer (`VK_LAYER_BACKSCOPE_dispatch`, enabled through
//! `VK_ADD_LAYER_PATH` and `VK_INSTANCE_LAYERS`, which `backscope trace` and `sweep --trace` set).
//! It implements the loader–layer interface version 2 (`api`, `loader`): instance and device
//! dispatch tables keyed by the handles' dispatch keys (`dispatch`), each call forwarded to the next
//! link. It follows shader modules (SPIR-V hash, workgroup size) and compute pipelines (named by
//! `vkSetDebugUtilsObjectNameEXT`, as ggml-vulkan does with `GGML_VK_DEBUG_MARKERS`, else
//! `spirv:<hash>`) in `pipelines`, records the dispatches of each command buffer (`commands`) and
//! counts them when the buffer is submitted; `writer` turns the counts into windows. `locus` keeps
//! each queue's last submitted dispatches (with the text of the debug label regions each was recorded
//! in, which `labels` keeps per command buffer) and each thread's Vulkan call in flight, which `crash`
//! writes into the trace on a fatal signal and `writer` on `VK_ERROR_DEVICE_LOST`. `order` keeps each distinct
//! sequence of pipelines a submitted command buffer dispatched (the order within a graph) and counts its submissions.
//!
//! Rules the code keeps:
//! * every call is forwarded with the caller's arguments and its result returned; the one change
//!   the layer makes is to turn driver pipeline statistics on where a device offers them (`device`);
//! * no panic crosses into C: observation runs under `state::guarded`, and a panic switches it off;
//! * recording a dispatch or a debug label takes no lock, looks up nothing but the command buffer and,
//!   once a command buffer has recorded its largest batch, allocates nothing; counting a submission,
//!   and remembering its last dispatches, takes no lock;
//! * the crash handler is async-signal-safe and chains to the program's own handler (or the default
//!   action), so the program's crash report and exit status stay what they would be without the layer;
//! * problems produce one line on stderr and switch observation off; calls are still forwarded.

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks)]

pub mod api;
mod blackbox;
mod commands;
mod crash;
mod device;
mod dispatch;
mod fault;
mod flag;
#[doc(hidden)]
pub mod fuzzing;
mod handles;
mod impersonate;
mod labels;
mod loader;
mod locus;
mod order;
mod pipelines;
mod progress;
mod shader;
mod start;
mod state;
mod switch;
mod writer;
