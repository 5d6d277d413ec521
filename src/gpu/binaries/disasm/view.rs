//! `scan --disasm` in the scan's document: the instruction mix summed per library, target and family (per kernel
//! with `--kernels` or a `--kernel` pattern) with the path-deciding instructions, then one line on what was
//! disassembled, with what and how fast. `--json` has every kernel with every class; the tables show the broad
//! classes.

use std::collections::BTreeMap;

use super::report::{DisasmReport, KernelMix};
use crate::output::{Block, Collapse, Column, Document, Table};

/// Rows terminal output shows (`--all`: every row).
const MIX_ROWS: usize = 40;

/// Broad classes shown as columns, with their headers (JSON has them all, atomics and `other` included).
const MIX_COLUMNS: [(&str, &str); 9] = [
    ("vector-alu", "VALU"),
    ("fma", "FMA"),
    ("matrix", "matrix"),
    ("scalar", "scalar"),
    ("lds", "LDS"),
    ("global-load", "load"),
    ("global-store", "store"),
    ("branch", "branch"),
    ("wait", "wait"),
];

/// The instruction counts of one kernel, or of several summed.
#[derive(Default)]
struct Mix {
    instructions: u64,
    classes: BTreeMap<String, u64>,
    paths: BTreeMap<String, u64>,
    path_mnemonics: BTreeMap<String, u64>,
}

impl Mix {
    fn add(&mut self, k: &KernelMix) {
        self.instructions += k.instructions;
        for (sum, from) in [
            (&mut self.classes, &k.classes),
            (&mut self.paths, &k.paths),
            (&mut self.path_mnemonics, &k.path_mnemonics),
        ] {
            for (key, n) in from {
                *sum.entry(key.clone()).or_default() += n;
            }
        }
    }

    /// The path-deciding kinds present with their counts, and the three most frequent such mnemonics; `None`
    /// when there are none.
    fn path_text(&self) -> Option<String> {
        let present: Vec<String> =
            self.paths.iter().filter(|(_, n)| **n > 0).map(|(p, n)| format!("{p} {n}")).collect();
        if present.is_empty() {
            return None;
        }
        let mut m: Vec<_> = self.path_mnemonics.iter().collect();
        m.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        let shown: Vec<String> = m.iter().take(3).map(|(k, n)| format!("{k} {n}")).collect();
        Some(format!("{} ({}{})", present.join(", "), shown.join(", "), if m.len() > 3 { ", …" } else { "" }))
    }

    fn cells(&self) -> Vec<String> {
        let mut row = vec![self.instructions.to_string()];
        row.extend(MIX_COLUMNS.iter().map(|(class, _)| self.classes.get(*class).copied().unwrap_or(0).to_string()));
        row
    }
}

/// The counts table: the columns naming a row, the instruction count, then one column per broad class.
fn counts_table(first: Vec<Column>) -> Table {
    let mut columns = first;
    columns.push(Column::number("instrs"));
    columns.extend(MIX_COLUMNS.iter().map(|(_, header)| Column::number(*header)));
    Table::new(columns).collapse(Collapse::Head(MIX_ROWS))
}

fn file_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// One library and target: its rows (a family or a kernel, with the cells naming it) and their mixes.
type Group = Vec<(Vec<String>, Mix)>;

/// The blocks `--disasm` adds to a scan's document: per library and target, a table of counts per broad class
/// and one of the path-deciding instructions of the rows that have any. (One table with both would not fit a
/// terminal: ten columns of counts in the millions leave no room for the mnemonics.)
pub fn blocks(d: &DisasmReport, per_kernel: bool) -> Vec<Block> {
    let mut groups: BTreeMap<(&str, &str), Group> = BTreeMap::new();
    if per_kernel {
        for co in &d.code_objects {
            let group = groups.entry((file_name(&co.path), co.target.as_str())).or_default();
            for k in &co.kernels {
                let mut mix = Mix::default();
                mix.add(k);
                group.push((vec![k.demangled.clone(), k.family.to_string()], mix));
            }
        }
    } else {
        let mut families: BTreeMap<(&str, &str, &str), (u64, Mix)> = BTreeMap::new();
        for co in &d.code_objects {
            for k in &co.kernels {
                let (n, mix) = families.entry((file_name(&co.path), co.target.as_str(), k.family)).or_default();
                *n += 1;
                mix.add(k);
            }
        }
        for ((library, target, family), (n, mix)) in families {
            groups.entry((library, target)).or_default().push((vec![family.to_string(), n.to_string()], mix));
        }
    }
    let mut doc = Document::default();
    doc.heading(
        2,
        if per_kernel {
            "Instruction mix per kernel (disassembly)"
        } else {
            "Instruction mix per family (disassembly; --kernels or --kernel PATTERN for each kernel)"
        },
    );
    for ((library, target), rows) in &groups {
        doc.heading(3, format!("{library}, {target}"));
        let naming = if per_kernel {
            vec![Column::label("kernel"), Column::keep("family")]
        } else {
            vec![Column::keep("family"), Column::number("kernels")]
        };
        let mut counts = counts_table(naming);
        let mut paths = Table::new(vec![
            if per_kernel { Column::label("kernel") } else { Column::keep("family") },
            Column::text("path-deciding instructions"),
        ])
        .collapse(Collapse::Head(MIX_ROWS));
        for (naming, mix) in rows {
            let mut row = naming.clone();
            row.extend(mix.cells());
            counts.row(row);
            if let Some(text) = mix.path_text() {
                paths.row([naming[0].clone(), text]);
            }
        }
        doc.push(counts);
        if paths.rows.is_empty() {
            doc.paragraph("path-deciding instructions: none");
        } else {
            doc.push(paths);
        }
    }
    let s = &d.stats;
    let tools: Vec<String> = d.tools.iter().map(|t| format!("{} ({})", t.path.display(), t.version)).collect();
    doc.paragraph(format!(
        "disassembled {} code objects ({} from the cache, {} failed, {} without a matching kernel) with {} in {:.1} s, {} at a time",
        s.disassembled + s.from_cache,
        s.from_cache,
        s.failed,
        s.no_matching_kernel,
        if tools.is_empty() { "no disassembler".to_string() } else { tools.join(", ") },
        s.elapsed_ms / 1e3,
        s.parallel
    ));
    doc.blocks
}
