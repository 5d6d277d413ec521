//! The Vulkan layer (`crates/vklayer`) under real programs on Mesa's lavapipe: dispatch counts, crashes, the black box,
//! impersonation, capability claims, the pipeline map.

mod blackbox;
mod capability;
mod crash;
mod impersonate;
mod layer;
mod moe;
mod pipelines_map;
