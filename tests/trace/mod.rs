//! `backscope trace`: the CUDA/HIP observer on real programs, hostile traces, the kernel-log capture.

mod cli;
mod hostile;
mod kernel_log;
mod libraries;
mod signals;
