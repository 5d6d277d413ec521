//! `backscope trace -- CMD ARGS…`: run a command under the dispatch observer and summarise its trace files.

use anyhow::Result;
use clap::Args;

#[derive(Debug, Args)]
pub struct TraceArgs {}

pub fn run(_args: TraceArgs) -> Result<u8> {
    anyhow::bail!("trace is not implemented yet")
}
