//! Markdown (CommonMark with GitHub's tables): for bug reports and documents. Every row of every table is shown;
//! charts appear as their fallback blocks (a table of the plotted values), since Markdown viewers do not run
//! inline SVG.

use std::fmt::Write as _;

use super::doc::{Align, Block, ClaimList, Document, Excerpt, Span, Table, Text};
use super::escape::{markdown, markdown_cell, markdown_code, markdown_fence, markdown_pre, url_path};
use super::source::{source_line, Markup};

pub fn render(doc: &Document) -> String {
    let mut out = String::new();
    if !doc.title.is_empty() {
        let _ = writeln!(out, "# {}\n", markdown(&doc.title));
    }
    for block in &doc.blocks {
        block_markdown(&mut out, block);
        out.push('\n');
    }
    out
}

fn block_markdown(out: &mut String, block: &Block) {
    match block {
        Block::Heading { level, text } => {
            let _ = writeln!(out, "{} {}", "#".repeat(usize::from(*level)), markdown(text));
        }
        Block::Paragraph(t) => {
            let _ = writeln!(out, "{}", inline(t, false));
        }
        Block::List(items) => {
            for item in items {
                let _ = writeln!(out, "- {}", inline(item, false));
            }
        }
        Block::Facts(facts) => {
            for (k, v) in facts {
                let _ = writeln!(out, "- **{}**: {}", markdown(k), inline(v, false));
            }
        }
        Block::Table(t) => table_markdown(out, t),
        Block::Claims(list) => claims_markdown(out, list),
        Block::Excerpt(e) => excerpt_markdown(out, e),
        Block::Chart(c) => {
            let _ = writeln!(out, "**{}**\n", markdown(&c.title));
            for b in &c.fallback {
                block_markdown(out, b);
                out.push('\n');
            }
        }
    }
}

/// Inline text; `in_table` escapes what would end a table cell inside code spans too.
pub fn inline(t: &Text, in_table: bool) -> String {
    let mut s = String::new();
    for span in &t.0 {
        match span {
            Span::Plain(p) if in_table => s.push_str(&markdown_cell(p)),
            Span::Plain(p) => s.push_str(&markdown(p)),
            Span::Code(c) => s.push_str(&markdown_code(c, in_table)),
            Span::Strong(p) => {
                let _ = write!(s, "**{}**", markdown(p));
            }
            Span::Link { text, target } => {
                let _ = write!(s, "[{}]({})", markdown(text), url_path(target));
            }
        }
    }
    s
}

fn table_markdown(out: &mut String, t: &Table) {
    if t.columns.is_empty() {
        return;
    }
    let header: Vec<String> = t.columns.iter().map(|c| markdown_cell(&c.header)).collect();
    let _ = writeln!(out, "| {} |", header.join(" | "));
    let rule: Vec<&str> = t.columns.iter().map(|c| if c.align == Align::Right { "---:" } else { "---" }).collect();
    let _ = writeln!(out, "|{}|", rule.join("|"));
    for row in &t.rows {
        let cells: Vec<String> = row.iter().map(|c| inline(c, true)).collect();
        let _ = writeln!(out, "| {} |", cells.join(" | "));
    }
    if t.rows.is_empty() {
        let _ = writeln!(out, "\n*(no rows)*");
    }
}

fn claims_markdown(out: &mut String, list: &ClaimList) {
    for c in &list.claims {
        let _ = writeln!(out, "- **{}** {}", c.confidence, inline(&Text::with_code_spans(&c.statement), false));
        for s in &c.sources {
            let _ = writeln!(out, "  - ← {}", source_line(s, list, &SOURCE_MARKUP));
        }
    }
}

/// How Markdown writes a source line: brackets escaped, so that a rule's name never reads as a link.
const SOURCE_MARKUP: Markup = Markup {
    text: markdown,
    code: |s| markdown_code(s, false),
    link: |text, path| format!("[{}]({})", markdown(text), url_path(path)),
    brackets: ("\\[", "\\]"),
};

fn excerpt_markdown(out: &mut String, e: &Excerpt) {
    match (&e.caption, &e.file) {
        (Some(c), Some(f)) => {
            let _ = writeln!(out, "*{}* ({})\n", markdown(c), markdown_code(f, false));
        }
        (Some(c), None) => {
            let _ = writeln!(out, "*{}*\n", markdown(c));
        }
        (None, Some(f)) => {
            let _ = writeln!(out, "{}\n", markdown_code(f, false));
        }
        (None, None) => {}
    }
    let number_width = e.line_numbers.iter().map(|n| n.to_string().len()).max().unwrap_or(0);
    let lines: Vec<String> = e
        .lines
        .iter()
        .enumerate()
        .map(|(i, l)| match e.line_numbers.get(i) {
            Some(n) => format!("{n:>number_width$} │ {}", markdown_pre(l)),
            None => markdown_pre(l),
        })
        .collect();
    let fence = markdown_fence(&lines);
    let _ = writeln!(out, "{fence}text");
    for l in &lines {
        let _ = writeln!(out, "{l}");
    }
    let _ = writeln!(out, "{fence}");
}

#[cfg(test)]
mod tests {
    use super::super::doc::Column;
    use super::*;
    use crate::evidence::{Claim, Confidence, Source};

    #[test]
    fn a_hostile_cell_stays_in_its_cell() {
        let mut t = Table::new(vec![Column::label("model"), Column::number("n")]);
        t.row(["a|b\n| x | y |\n`<script>`</table>", "1"]);
        t.row_text(vec![Text::code("k|`v`"), Text::plain("2")]);
        let mut s = String::new();
        table_markdown(&mut s, &t);
        let lines: Vec<&str> = s.lines().collect();
        assert_eq!(lines.len(), 4, "header, rule, two rows: {s}");
        assert_eq!(lines[1], "|---|---:|");
        // Every unescaped pipe is a cell border: three per row of two cells.
        for l in &lines[2..] {
            let borders = l.match_indices('|').filter(|(i, _)| *i == 0 || l.as_bytes()[i - 1] != b'\\').count();
            assert_eq!(borders, 3, "{l}");
            assert!(!l.contains("<script>"), "{l}");
        }
    }

    #[test]
    fn claims_link_absolute_files_and_quote_log_lines() {
        let c = Claim::new("x", Confidence::Inferred, "`vk` crashed <b>").with_sources([
            Source::LogLine { path: "/runs/r 1/s.log".into(), line: 4, text: "SIGSEGV `x` <i>".into() },
            Source::Run { run_id: "r1".into(), file: Some("cells/1/result.json".into()) },
        ]);
        let mut s = String::new();
        claims_markdown(&mut s, &ClaimList::new(vec![c]).with_run_dir("r1", "/runs/r 1"));
        assert!(s.starts_with("- **Inferred** `vk` crashed \\<b\\>\n"), "{s}");
        assert!(s.contains("[/runs/r 1/s.log\\:4](/runs/r%201/s.log): ``SIGSEGV `x` <i>``"), "{s}");
        assert!(s.contains("run r1: [cells/1/result.json](/runs/r%201/cells/1/result.json)"), "{s}");
    }
}
