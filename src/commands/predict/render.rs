//! What `predict` prints: one report, or with `--run` how many records were compared and then each record's report
//! under its own heading.

use std::io::Write;

use super::command::{PredictOutput, RunPredictions};
use super::cuda;
use super::report::Report;
use crate::output::{Block, Document, Render, Text};

impl Render for PredictOutput {
    fn write_json(&self, out: &mut dyn Write) -> std::io::Result<()> {
        serde_json::to_writer(&mut *out, self)?;
        writeln!(out)
    }

    fn document(&self) -> Document {
        match self {
            PredictOutput::One(r) => Render::document(&**r),
            PredictOutput::Run(run) => run_document(run),
        }
    }
}

/// `predict --run`: how many records were compared, then each record's report under its own heading.
fn run_document(run: &RunPredictions) -> Document {
    let mut doc = Document::new(format!("backscope predict --run {}", run.run_id));
    doc.paragraph(format!("Sweep run {} ({}): {} traced record(s) compared", run.run_id, run.db, run.cells.len()));
    for c in &run.cells {
        doc.heading(
            2,
            format!(
                "record {} ({}): endpoint {}, model {}, num_gpu {} [{}]",
                c.seq, c.cell_key, c.endpoint, c.model, c.num_gpu, c.file
            ),
        );
        match &c.report {
            Report::Cuda(r) => doc.blocks.extend(cuda::render::blocks(r, 1)),
            Report::Vulkan(r) => doc.blocks.extend(Render::document(&**r).blocks),
        }
    }
    if !run.skipped.is_empty() {
        doc.heading(2, "Records left out");
        doc.push(Block::List(run.skipped.iter().map(|k| Text::plain(k.as_str())).collect()));
    }
    doc
}
