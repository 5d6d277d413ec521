//! The layer's readers of what the program it is loaded into hands it, reachable from outside the crate for the
//! fuzz targets (`fuzz/fuzz_targets/spirv_module.rs`, `vulkan_profile.rs`) and their replay in `tests/`. Not an API:
//! the layer's one interface is the loader's.
//!
//! What is read: the SPIR-V of every `vkCreateShaderModule` (hashed, walked for the workgroup size), the
//! specialization data of every compute pipeline, and the device profile file `BACKSCOPE_VK_IMPERSONATE` names.
//! A panic in any of them would switch observation off in a user's process (`state::guarded`), and an unbounded
//! allocation would grow that process: both are what the fuzz targets look for.

pub use crate::impersonate::answers::{features, flexible_dimensions, properties, FlexibleDimensionsProperties};
pub use crate::impersonate::flat_json::{
    parse as parse_flat_json, Value as FlatJsonValue, MAX_BYTES as MAX_PROFILE_BYTES, MAX_ITEMS as MAX_PROFILE_ITEMS,
};
pub use crate::impersonate::profile::{parse as parse_profile, Profile};
pub use crate::shader::{specialization_value, LocalSize};
