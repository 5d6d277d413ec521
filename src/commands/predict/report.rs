//! A prediction's report by either backend's rules, each in its own schema (`backscope.predict/1`,
//! `backscope.predict-vulkan/1`), and the one entry that makes it.

use anyhow::Result;
use serde::Serialize;

use super::cuda::{self, prediction::CudaReport};
use super::options::{Backend, PredictOptions};
use super::vulkan::{self, prediction::VulkanReport};

/// A prediction by ggml-cuda's rules (CUDA/HIP) or ggml-vulkan's.
#[derive(Clone, Debug, Serialize)]
#[serde(untagged)]
pub enum Report {
    Cuda(Box<CudaReport>),
    Vulkan(Box<VulkanReport>),
}

/// Predict by the rules of `opts.backend`, and compare with the observation when `opts.observed` is set.
pub fn run(opts: &PredictOptions) -> Result<Report> {
    Ok(match opts.backend {
        Backend::Cuda { .. } => Report::Cuda(Box::new(cuda::run(opts)?)),
        Backend::Vulkan { .. } => Report::Vulkan(Box::new(vulkan::run(opts)?)),
    })
}
