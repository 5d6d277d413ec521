//! The Vulkan layer (`crates/vklayer`) under real programs on Mesa's lavapipe: dispatch counts, crashes, the black box, impersonation, capability claims, the pipeline map.

pub(crate) mod blackbox;
pub(crate) mod capability;
pub(crate) mod crash;
pub(crate) mod impersonate;
pub(crate) mod layer;
pub(crate) mod moe;
pub(crate) mod pipelines_map;
