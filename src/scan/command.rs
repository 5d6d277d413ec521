//! The `scan` command body: scan, then print the report as text or JSON.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};

use super::{scan, ScanOptions, Severity};
use crate::{exit, render};

/// One `backscope scan` invocation.
#[derive(Clone, Debug, Default)]
pub struct ScanCommand {
    pub options: ScanOptions,
    /// The records and claims as JSON (docs/scan-json.md) instead of tables.
    pub json: bool,
    /// A file instead of standard output.
    pub output: Option<PathBuf>,
}

/// Scan and print. Exits [`exit::PROBLEMS`] when some input could not be decoded.
pub fn run(cmd: &ScanCommand) -> Result<u8> {
    for p in &cmd.options.paths {
        if !p.exists() && std::fs::symlink_metadata(p).is_err() {
            bail!("{}: no such file or directory", p.display());
        }
    }
    if let Some(d) = &cmd.options.disasm {
        crate::disasm::check_named_tools(d)?;
    }
    let report = scan(&cmd.options);
    // Stdout is line-buffered with a small buffer; a kernel table in JSON is one multi-MB line.
    let sink: Box<dyn Write> = match &cmd.output {
        Some(path) => {
            Box::new(std::fs::File::create(path).with_context(|| format!("cannot create {}", path.display()))?)
        }
        None => Box::new(std::io::stdout().lock()),
    };
    let mut out = std::io::BufWriter::with_capacity(1 << 20, sink);
    if cmd.json {
        serde_json::to_writer(&mut out, &report)?;
        writeln!(out)?;
    } else {
        out.write_all(render::scan(&report, cmd.options.kernels).as_bytes())?;
    }
    out.flush()?;
    let errors = report.problems.iter().any(|p| p.severity == Severity::Error);
    Ok(if errors { exit::PROBLEMS } else { exit::OK })
}
