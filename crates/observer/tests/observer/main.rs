//! Integration tests of the dispatch observer: real programs run under `LD_PRELOAD`.
//!
//! * `hip_runtime`: a HIP program built with hipcc at test time, run against the real HIP runtime
//!   (no GPU here: registration runs, launches return errors).
//! * `fake_runtime`: C programs built with gcc at test time that `dlopen` a backend linked against a
//!   test-double runtime (`c/fake_runtime.c`): dlopen after start, threads, fork/exec, graphs,
//!   100,000 kernels, every CUDA and HIP entry point.
//! * `faults`: unwritable output, full disk, no runtime, no configuration.
//!
//! Traces are read with the trace reader crate (`backscope-trace-reader`).

use trace_reader as trace;

mod common;
mod fake_runtime;
mod faults;
mod hip_runtime;
