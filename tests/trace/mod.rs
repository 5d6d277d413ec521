//! `backscope trace`: the CUDA/HIP observer on real programs, hostile traces, the kernel-log capture.

pub(crate) mod cli;
pub(crate) mod hostile;
pub(crate) mod kernel_log;
pub(crate) mod libraries;
pub(crate) mod signals;
