//! `backscope sweep`: crash-isolated matched runs of one model across endpoints and num_gpu values.
//! Owned by the sweep work (issue 3).

use anyhow::Result;
use clap::Args;

#[derive(Debug, Args)]
pub struct SweepArgs {}

pub fn run(_args: SweepArgs) -> Result<u8> {
    anyhow::bail!("sweep is not implemented yet")
}
