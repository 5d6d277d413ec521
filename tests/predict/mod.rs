//! `backscope predict`: the CUDA/HIP and Vulkan rules against real dispatches, placement, runs, hostile inputs.

pub(crate) mod cli;
pub(crate) mod hostile;
pub(crate) mod placement;
pub(crate) mod rules;
pub(crate) mod verify_build;
pub(crate) mod vulkan;
pub(crate) mod vulkan_run;
