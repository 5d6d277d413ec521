//! The Vulkan layer (`crates/vklayer`) under real programs on Mesa's lavapipe: dispatch counts, crashes, the black box,
//! impersonation, capability claims, the pipeline map, which commands the layer hooks.

mod blackbox;
mod capability;
mod crash;
mod hooks;
mod impersonate;
mod layer;
mod moe;
mod pipelines_map;
