//! Plain-text tables and claim lines for the commands that have not moved to the output layer yet
//! (`predict`, `gate`, `doctor`, `maps`); `output` renders everything else.

use std::fmt::Write as _;

use comfy_table::presets::UTF8_FULL_CONDENSED;
use comfy_table::{ContentArrangement, Table};

use crate::evidence::Claim;

/// The table style of every human output.
pub(crate) fn table(header: &[&str]) -> Table {
    let mut t = Table::new();
    t.load_style(UTF8_FULL_CONDENSED).set_content_arrangement(ContentArrangement::Dynamic).set_header(header.to_vec());
    t
}

pub fn claims(out: &mut String, claims: &[Claim]) {
    for c in claims {
        let _ = writeln!(out, "[{}] {}", c.confidence, c.statement);
        for s in &c.sources {
            let _ = writeln!(out, "    ← {s}");
        }
    }
}
