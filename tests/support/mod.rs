//! Helpers shared by the integration tests: fixtures, running the binary and independent tools, the bounded runner,
//! sweeps and their fault injectors, throw-away PostgreSQL clusters, HIP and Vulkan test programs, synthesized models,
//! the real llama.cpp builds bisect runs, and independent checks of rendered output.

pub(crate) mod bounded;
pub(crate) mod builds;
pub(crate) mod hip;
pub(crate) mod layer_programs;
pub(crate) mod models;
pub(crate) mod output;
pub(crate) mod postgres;
pub(crate) mod scan_inputs;
pub(crate) mod sweep;
pub(crate) mod util;
pub(crate) mod wal;
