//! AMD: AMDGPU code objects, processors and target IDs, and the kernel metadata note.

pub mod code_object;
pub mod metadata;
pub mod target;
