//! `predict`: which GPU kernel (ggml's CUDA/HIP backend: [`cuda`]) or pipeline (ggml-vulkan: [`vulkan`]) each weight
//! of a model runs, per phase of a request (each prefill ubatch, the rows that see one token after the last layer's
//! gather, decode), by the rules of one ggml version for one GPU arch or Vulkan device; and, given what a trace
//! observed, whether the observation confirms or contradicts each prediction. Both backends plan the same phases
//! (`phases`), place the weights the same way ([`placement`]) and group them the same way ([`groups`]); each
//! folder holds its rules, its report (`prediction`), what it observes, its comparison and its rendering.
//!
//! How a prompt becomes ubatches (llama.cpp 11434; shared/reference notes §3): a `llama_decode` of N tokens is
//! split into ubatches of `n_ubatch` (default 512) contiguous tokens, so the matmuls see ne11 = 512, 512, …, the
//! remainder (src/llama-batch.cpp split_simple). Only the last token produces logits: in the last layer the rows
//! are gathered after attention (src/models/llama.cpp:174-176, src/llama-graph.cpp:2569-2589), so the last
//! layer's FFN and the output head see ne11 = 1 in the final ubatch and nothing in earlier ones (empty nodes are
//! skipped). Each decode step is one token (ne11 = 1 with one sequence).

// `mod.rs` only calls down: what the children share (options, the model, the phase plan, the weight groups, the
// placement, the observations, the verdicts) lives in its own file, each backend in its own folder, so that no child
// reaches back up into this one.
pub mod command;
pub mod cuda;
pub mod groups;
pub mod model;
pub mod observed;
mod options;
mod phases;
pub mod placement;
mod render;
mod report;
pub mod verdict;
pub mod vulkan;

pub use cuda::prediction::CudaReport;
pub use groups::{Phase, WeightGroup};
pub use model::{AttentionShape, MatmulOp, ModelSummary, ModelWeights, WeightTensor};
pub use observed::{Observed, ObservedKernel, ReadAs, VkObservation};
pub use options::{
    Backend, Batch, DeviceSource, FlashAttn, ObservedSource, PredictOptions, PromptFromRun, Verified, VerifyingBuild,
    WeightSource, DEFAULT_UBATCH, MAX_TOKENS,
};
pub use phases::TokensInfo;
pub use placement::{GpuBackend, NumGpu, Offload, Placed, PlacementOptions, Where};
pub use report::{run, Report};
pub use verdict::Verdict;
pub use vulkan::prediction::VulkanReport;
