//! backscope: evidence about which GPU backend and kernel path a local LLM runtime really uses.
//!
//! Data flows one way: bytes, runs and logs are decoded into typed records (`scan`), records become
//! claims in one evidence model (`evidence`), and claims are rendered (`render`).
//!
//! Each command has a `run` taking an options value ([`scan::run`], [`sweep::run`], [`synth::run`],
//! [`tracecmd::run`]) and returning its exit status ([`exit`]); the `backscope` binary fills the options from the
//! command line.

pub mod evidence;
pub mod exit;
pub mod kernels;
mod knowledge;
pub mod output;
mod render;
pub mod scan;
pub mod sweep;
pub mod synth;
pub mod trace;
pub mod tracecmd;
