//! `backscope trace`: the CUDA/HIP observer on real programs, signals, where it finds its libraries, hostile traces,
//! the kernel-log capture.

mod cli;
mod hostile;
mod kernel_log;
mod libraries;
mod signals;
