//! `backscope synth`: write a llama-architecture GGUF with random weights and real tokenizer metadata.
//! Owned by the synth work (issue 3).

use anyhow::Result;
use clap::Args;

#[derive(Debug, Args)]
pub struct SynthArgs {}

pub fn run(_args: SynthArgs) -> Result<u8> {
    anyhow::bail!("synth is not implemented yet")
}
