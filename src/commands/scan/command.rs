//! The `scan` command body: scan, then print the report through the output layer.

use anyhow::{bail, Result};

use crate::exit;
use crate::gpu::binaries::{scan, ScanOptions, ScanView, Severity};
use crate::output::{Output, OutputOptions};

/// One `backscope scan` invocation.
#[derive(Clone, Debug, Default)]
pub struct ScanCommand {
    pub options: ScanOptions,
    /// Format (JSON: docs/scan-json.md) and destination.
    pub output: OutputOptions,
}

/// Scan and print. Exits [`exit::PROBLEMS`] when some input could not be decoded.
pub fn run(cmd: &ScanCommand) -> Result<u8> {
    for p in &cmd.options.paths {
        if !p.exists() && std::fs::symlink_metadata(p).is_err() {
            bail!("{}: no such file or directory", p.display());
        }
    }
    if let Some(d) = &cmd.options.disasm {
        crate::gpu::binaries::disasm::check_named_tools(d)?;
    }
    let inputs = crate::output::Inputs::none().paths(&cmd.options.paths).paths(&cmd.options.library_path);
    let mut out = Output::open(&cmd.output, &inputs)?;
    let report = scan(&cmd.options);
    out.emit(&ScanView { report: &report, kernels: cmd.options.kernels })?;
    out.finish()?;
    let errors = report.problems.iter().any(|p| p.severity == Severity::Error);
    Ok(if errors { exit::PROBLEMS } else { exit::OK })
}
