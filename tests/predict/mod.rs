//! `backscope predict`: the CUDA/HIP and Vulkan rules against real dispatches, placement, runs, hostile inputs.

mod cli;
mod hostile;
mod placement;
mod rules;
mod verify_build;
mod vulkan;
mod vulkan_run;
