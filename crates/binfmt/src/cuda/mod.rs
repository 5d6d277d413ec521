//! NVIDIA: CUDA fatbin containers, their entries, cubins and PTX.

pub mod cubin;
pub mod fatbin;
pub mod ptx;
