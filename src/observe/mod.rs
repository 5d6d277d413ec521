//! The observation floor: how a program is observed ([`observers`]: the CUDA/HIP observer library and the Vulkan
//! layer), what the traces say ran ([`trace_summary`], [`vulkan`]), what the kernel's log said meanwhile
//! ([`kernel_log`]) and what a server's own log says ([`logfacts`]).

pub mod kernel_log;
pub mod logfacts;
pub mod observers;
pub mod trace_summary;
pub mod vulkan;
