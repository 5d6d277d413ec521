//! backscope: evidence about which GPU backend and kernel path a local LLM runtime really uses.
//!
//! Data flows one way: bytes, runs and logs are decoded into typed records (`scan`), records become
//! claims in one evidence model (`evidence`), and claims are rendered (`render`).

pub mod cli;
pub mod evidence;
pub mod kernels;
pub mod knowledge;
pub mod predict;
pub mod render;
pub mod scan;
pub mod sweep;
pub mod synth;
pub mod trace;
pub mod tracecmd;
