//! Terminal text: every line fits the width (tables give way column by column, prose wraps at spaces, paths are
//! shortened in the middle), long tables are collapsed unless `--all`, and every string is made printable first.
//!
//! Only verbatim excerpts (lines meant to be copied) may run past the width.

use comfy_table::presets::UTF8_FULL_CONDENSED;
use comfy_table::{CellAlignment, ColumnConstraint, ContentArrangement, Width};
use unicode_width::UnicodeWidthStr;

use super::doc::{Align, Block, ClaimList, Collapse, Document, Excerpt, Fit, Table};
use super::escape::printable;
use crate::evidence::Source;

/// How terminal text is laid out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub width: usize,
    /// Show every row of collapsed tables.
    pub all: bool,
}

/// Narrowest a wrapped or shortened column is made before the table is shown as a list instead.
const MIN_WRAP: usize = 8;
const MIN_MIDDLE: usize = 12;
/// Longest word a wrapped column is kept wide enough for; longer words are split.
const MAX_WORD: usize = 16;

pub fn render(doc: &Document, layout: Layout) -> String {
    let mut out = String::new();
    let mut previous: Option<&Block> = None;
    for block in &doc.blocks {
        // A blank line between blocks, none between a heading and what it heads.
        if previous.is_some_and(|p| !matches!(p, Block::Heading { .. })) {
            out.push('\n');
        }
        block_text(&mut out, block, layout);
        previous = Some(block);
    }
    out
}

fn block_text(out: &mut String, block: &Block, layout: Layout) {
    let width = layout.width;
    match block {
        Block::Heading { text, .. } => {
            out.push_str(&wrap(&printable(text), width, 0, 0));
        }
        Block::Paragraph(t) => out.push_str(&wrap(&printable(&t.flat()), width, 0, 0)),
        Block::List(items) => {
            for item in items {
                out.push_str(&wrap(&format!("  - {}", printable(&item.flat())), width, 0, 4));
            }
        }
        Block::Facts(facts) => {
            let key_width = facts.iter().map(|(k, _)| display_width(&printable(k))).max().unwrap_or(0).min(24);
            for (k, v) in facts {
                let k = printable(k);
                let pad = key_width.saturating_sub(display_width(&k));
                let line = format!("  {k}{}  {}", " ".repeat(pad), printable(&v.flat()));
                out.push_str(&wrap(&line, width, 0, key_width + 4));
            }
        }
        Block::Table(t) => out.push_str(&table_text(t, layout)),
        Block::Claims(list) => out.push_str(&claims_text(list, width, layout.all)),
        Block::Excerpt(e) => out.push_str(&excerpt_text(e, width)),
        Block::Chart(c) => {
            out.push_str(&wrap(&printable(&c.title), width, 0, 0));
            for (i, b) in c.fallback.iter().enumerate() {
                if i > 0 {
                    out.push('\n');
                }
                block_text(out, b, layout);
            }
        }
    }
}

pub fn display_width(s: &str) -> usize {
    UnicodeWidthStr::width(s)
}

/// `s` cut to at most `max` columns, keeping its start and its end (where file names are) around a `…`.
pub fn shorten_middle(s: &str, max: usize) -> String {
    if display_width(s) <= max {
        return s.to_string();
    }
    if max <= 1 {
        return "…".chars().take(max).collect();
    }
    let budget = max - 1;
    let head_budget = budget / 3;
    let tail_budget = budget - head_budget;
    let mut head = String::new();
    let mut used = 0;
    for c in s.chars() {
        let w = char_width(c);
        if used + w > head_budget {
            break;
        }
        head.push(c);
        used += w;
    }
    let mut tail: Vec<char> = Vec::new();
    let mut used = 0;
    for c in s.chars().rev() {
        let w = char_width(c);
        if used + w > tail_budget {
            break;
        }
        tail.push(c);
        used += w;
    }
    tail.reverse();
    format!("{head}…{}", tail.into_iter().collect::<String>())
}

/// `s` cut at the end to at most `max` columns, with `…` when cut.
pub fn shorten_end(s: &str, max: usize) -> String {
    if display_width(s) <= max {
        return s.to_string();
    }
    let mut out = String::new();
    let mut used = 0;
    for c in s.chars() {
        let w = char_width(c);
        if used + w + 1 > max {
            break;
        }
        out.push(c);
        used += w;
    }
    out.push('…');
    out
}

fn char_width(c: char) -> usize {
    unicode_width::UnicodeWidthChar::width(c).unwrap_or(0)
}

/// Word-wraps `s` (already printable) to `width` columns: the first line indented by `first` plus the spaces `s`
/// starts with, the others by `rest`. Runs of spaces inside a line are kept; words longer than a line are split.
/// Ends with a newline.
///
/// Linear in the length of `s`: each word is measured once, and a word longer than a line is cut in one pass
/// over its characters (an unbreakable 64 KiB token in a log line must not cost its length squared).
pub fn wrap(s: &str, width: usize, first: usize, rest: usize) -> String {
    let lead = s.len() - s.trim_start_matches(' ').len();
    let mut out = String::with_capacity(s.len() + s.len() / width.max(1) * (rest + 1) + first + 1);
    let mut line = Line { text: " ".repeat(first + lead), width: first + lead, has_word: false };
    let min_room = 8;
    for word in s[lead..].split(' ') {
        if word.is_empty() {
            // A second space in a run: kept inside a line, dropped at a line break.
            if line.has_word && line.width < width {
                line.text.push(' ');
                line.width += 1;
            }
            continue;
        }
        let w = display_width(word);
        let space = usize::from(line.has_word);
        if line.width + space + w > width {
            let room = width.saturating_sub(line.width + space);
            if line.has_word && (w <= width.saturating_sub(rest) || room < min_room) {
                // The word fits on a new line, or too little room is left to split it here.
                line.flush(&mut out, rest);
            }
        }
        let space = usize::from(line.has_word);
        if line.width + space + w <= width {
            line.push_word(word, w);
            continue;
        }
        // A word longer than a whole line: cut it at the columns left, then at every full line.
        if line.has_word {
            line.text.push(' ');
            line.width += 1;
        }
        let mut room = width.saturating_sub(line.width).max(1);
        let (mut from, mut used) = (0, 0);
        for (i, c) in word.char_indices() {
            let cw = char_width(c);
            if used + cw > room && i > from {
                line.text.push_str(&word[from..i]);
                line.flush(&mut out, rest);
                room = width.saturating_sub(rest).max(1);
                (from, used) = (i, 0);
            }
            used += cw;
        }
        line.text.push_str(&word[from..]);
        line.width += used;
        line.has_word = true;
    }
    if line.has_word || out.is_empty() {
        out.push_str(line.text.trim_end());
        out.push('\n');
    }
    out
}

/// The line [`wrap`] is filling.
struct Line {
    text: String,
    width: usize,
    has_word: bool,
}

impl Line {
    fn push_word(&mut self, word: &str, w: usize) {
        if self.has_word {
            self.text.push(' ');
            self.width += 1;
        }
        self.text.push_str(word);
        self.width += w;
        self.has_word = true;
    }

    /// Ends the line (trailing spaces dropped) and starts the next one, indented by `rest`.
    fn flush(&mut self, out: &mut String, rest: usize) {
        out.push_str(self.text.trim_end());
        out.push('\n');
        self.text.clear();
        self.text.extend(std::iter::repeat_n(' ', rest));
        self.width = rest;
        self.has_word = false;
    }
}

/// Column widths (content only) that fit `avail`, or `None` when even the narrowest layout does not. Every
/// column starts at its minimum; the columns left over go first to labels (up to `label_cap` each), then to every
/// column up to its natural width, evenly (the narrowest column grows first).
fn fit_columns(
    natural: &[usize],
    minimum: &[usize],
    labels: &[bool],
    label_cap: usize,
    avail: usize,
) -> Option<Vec<usize>> {
    if natural.iter().sum::<usize>() <= avail {
        return Some(natural.to_vec());
    }
    if minimum.iter().sum::<usize>() > avail {
        return None;
    }
    let mut widths = minimum.to_vec();
    let mut spare = avail - widths.iter().sum::<usize>();
    let label_targets: Vec<usize> = natural
        .iter()
        .zip(labels)
        .zip(minimum)
        .map(|((n, l), m)| if *l { (*n).min(label_cap).max(*m) } else { *m })
        .collect();
    grow_evenly(&mut widths, &label_targets, &mut spare);
    grow_evenly(&mut widths, natural, &mut spare);
    Some(widths)
}

/// Hands out `spare` columns one at a time to the narrowest column still below its target.
fn grow_evenly(widths: &mut [usize], targets: &[usize], spare: &mut usize) {
    while *spare > 0 {
        let Some(i) = (0..widths.len()).filter(|&i| widths[i] < targets[i]).min_by_key(|&i| widths[i]) else { break };
        widths[i] += 1;
        *spare -= 1;
    }
}

fn table_text(t: &Table, layout: Layout) -> String {
    let (visible, left_out) = t.visible_rows(layout.all);
    let cells: Vec<Vec<String>> =
        visible.iter().map(|&i| t.rows[i].iter().map(|c| printable(&c.flat())).collect()).collect();
    let headers: Vec<String> = t.columns.iter().map(|c| printable(&c.header)).collect();
    let n = t.columns.len();
    let mut out = String::new();
    if n == 0 {
        return out;
    }
    let longest_word = |s: &str| s.split(' ').map(display_width).max().unwrap_or(0);
    let natural: Vec<usize> = (0..n)
        .map(|c| cells.iter().map(|r| display_width(&r[c])).chain([display_width(&headers[c])]).max().unwrap_or(0))
        .collect();
    let minimum: Vec<usize> = (0..n)
        .map(|c| {
            let content = cells.iter().map(|r| display_width(&r[c])).max().unwrap_or(0);
            // A wrapped column is not narrower than its longest word (up to a point): words split only when long.
            let word = cells.iter().map(|r| longest_word(&r[c])).max().unwrap_or(0).min(MAX_WORD);
            let floor = match t.columns[c].fit {
                Fit::Keep => content,
                Fit::Wrap => content.min(word.max(MIN_WRAP)),
                Fit::Middle => content.min(MIN_MIDDLE),
            };
            floor.max(longest_word(&headers[c]).min(MIN_WRAP)).max(1)
        })
        .collect();
    // Borders: one per column plus one; padding: one space each side of every cell.
    let avail = layout.width.saturating_sub(3 * n + 1);
    // Labels first: a label column gets its whole width (up to two fifths of the table) before prose columns
    // grow past their narrowest.
    let label_cap = (avail * 2 / 5).max(MIN_MIDDLE);
    let labels: Vec<bool> = t.columns.iter().map(|c| c.fit == Fit::Middle).collect();
    let widths = fit_columns(&natural, &minimum, &labels, label_cap, avail);
    let Some(widths) = widths else {
        return table_as_list(t, &headers, &cells, &visible, left_out, layout.width);
    };
    let mut table = comfy_table::Table::new();
    table.load_style(UTF8_FULL_CONDENSED).set_content_arrangement(ContentArrangement::Dynamic);
    table.set_width(u16::try_from(layout.width).unwrap_or(u16::MAX));
    table.set_header(headers.iter().map(comfy_table::Cell::new).collect::<Vec<_>>());
    let gap_at = left_out.filter(|_| matches!(t.collapse, Some(Collapse::HeadTail(..)))).map(|(at, _)| at);
    for (pos, row) in cells.iter().enumerate() {
        if gap_at == Some(pos) {
            table.add_row(vec!["…"; n]);
        }
        let row: Vec<comfy_table::Cell> = row
            .iter()
            .enumerate()
            .map(|(c, text)| {
                let text = match t.columns[c].fit {
                    Fit::Middle => shorten_middle(text, widths[c]),
                    // Wrapped here, in one pass, rather than by comfy-table, which cuts a long word one line at a
                    // time and measures the rest again after each cut (quadratic in an unbreakable token).
                    Fit::Wrap if display_width(text) > widths[c] => {
                        let mut lines = wrap(text, widths[c], 0, 0);
                        lines.pop();
                        lines
                    }
                    _ => text.clone(),
                };
                let cell = comfy_table::Cell::new(text);
                match t.columns[c].align {
                    Align::Right => cell.set_alignment(CellAlignment::Right),
                    Align::Left => cell,
                }
            })
            .collect();
        table.add_row(row);
    }
    for (c, w) in widths.iter().enumerate() {
        if let Some(column) = table.column_mut(c) {
            let fixed = u16::try_from(w + 2).unwrap_or(u16::MAX);
            column.set_constraint(ColumnConstraint::Absolute(Width::Fixed(fixed)));
        }
    }
    out.push_str(&table.to_string());
    out.push('\n');
    out.push_str(&left_out_note(t, left_out, layout.width));
    out
}

fn left_out_note(t: &Table, left_out: Option<(usize, usize)>, width: usize) -> String {
    match (left_out, t.collapse) {
        (Some((_, n)), Some(Collapse::HeadTail(..))) => {
            wrap(&format!("… {n} rows not shown, where the table shows … (--all to show)"), width, 0, 2)
        }
        (Some((_, n)), _) => wrap(&format!("… {n} more rows (--all to show)"), width, 0, 2),
        (None, _) => String::new(),
    }
}

/// A table too wide for the terminal even at its narrowest: one block of `header  value` lines per row.
fn table_as_list(
    t: &Table,
    headers: &[String],
    cells: &[Vec<String>],
    visible: &[usize],
    left_out: Option<(usize, usize)>,
    width: usize,
) -> String {
    let mut out = String::new();
    let key_width = headers.iter().map(|h| display_width(h)).max().unwrap_or(0).min(20);
    for (pos, row) in cells.iter().enumerate() {
        if let Some((at, n)) = left_out {
            if at == pos && matches!(t.collapse, Some(Collapse::HeadTail(..))) {
                out.push_str(&format!("… {n} rows …\n\n"));
            }
        }
        out.push_str(&format!("[{}]\n", visible[pos] + 1));
        for (h, v) in headers.iter().zip(row) {
            let h = shorten_end(h, key_width);
            let pad = key_width.saturating_sub(display_width(&h));
            out.push_str(&wrap(&format!("  {h}{}  {v}", " ".repeat(pad)), width, 0, key_width + 4));
        }
    }
    out.push_str(&left_out_note(t, left_out, width));
    out
}

fn claims_text(list: &ClaimList, width: usize, all: bool) -> String {
    let mut out = String::new();
    let shown = match list.collapse {
        Some(n) if !all => n.min(list.claims.len()),
        _ => list.claims.len(),
    };
    for c in &list.claims[..shown] {
        out.push_str(&wrap(&format!("[{}] {}", c.confidence, printable(&c.statement)), width, 0, 4));
        for s in &c.sources {
            out.push_str(&source_text(s, width));
        }
    }
    if shown < list.claims.len() {
        out.push_str(&wrap(&format!("… {} more claims (--all to show)", list.claims.len() - shown), width, 0, 2));
    }
    out
}

/// `    ← SOURCE`, its path shortened in the middle to leave room for what follows, the rest wrapped.
fn source_text(s: &Source, width: usize) -> String {
    let path_max = ((width.saturating_sub(6)) * 3 / 5).max(24);
    let path = |p: &str| shorten_middle(&printable(p), path_max);
    let text = match s {
        Source::File { path: p, offset: Some(o), length: Some(l), what } => {
            format!("{} @ {o:#x} (+{l:#x}): {}", path(p), printable(what))
        }
        Source::File { path: p, offset: Some(o), what, .. } => format!("{} @ {o:#x}: {}", path(p), printable(what)),
        Source::File { path: p, what, .. } => format!("{}: {}", path(p), printable(what)),
        Source::LogLine { path: p, line, text } => format!("{}:{line}: {}", path(p), printable(text)),
        Source::Run { run_id, file: Some(f) } => format!("run {}: {}", printable(run_id), path(f)),
        other => printable(&other.to_string()),
    };
    wrap(&format!("    ← {text}"), width, 0, 6)
}

fn excerpt_text(e: &Excerpt, width: usize) -> String {
    let mut out = String::new();
    match (&e.caption, &e.file) {
        (Some(c), Some(f)) => out.push_str(&wrap(&format!("{} ({})", printable(c), printable(f)), width, 0, 2)),
        (Some(c), None) => out.push_str(&wrap(&printable(c), width, 0, 2)),
        (None, Some(f)) => out.push_str(&wrap(&printable(f), width, 0, 2)),
        (None, None) => {}
    }
    let number_width = e.line_numbers.iter().map(|n| n.to_string().len()).max().unwrap_or(0);
    for (i, line) in e.lines.iter().enumerate() {
        let mut shown = printable(line);
        if let Some(n) = e.line_numbers.get(i) {
            shown = format!("{n:>number_width$} │ {shown}");
        }
        if !e.verbatim {
            shown = shorten_end(&shown, width);
        }
        out.push_str(shown.trim_end());
        out.push('\n');
    }
    out
}

/// `s` cut to `max_chars` characters, with `…` after them when something was cut: for text kept in records and
/// claims (quoted log lines, error bodies). [`shorten_end`] fits a width in terminal columns instead.
pub fn truncate(s: &str, max_chars: usize) -> String {
    if s.chars().count() <= max_chars {
        return s.to_string();
    }
    let mut t: String = s.chars().take(max_chars).collect();
    t.push('…');
    t
}

#[cfg(test)]
mod tests {
    use super::super::doc::Column;
    use super::*;
    use crate::evidence::{Claim, Confidence};

    fn lines_fit(s: &str, width: usize) {
        for l in s.lines() {
            assert!(display_width(l) <= width, "{} > {width}: {l:?}\n{s}", display_width(l));
        }
    }

    #[test]
    fn middle_shortening_keeps_the_file_name() {
        let p = "/root/.cache/backscope/fixtures/unpacked/librocblas0/usr/lib/x86_64-linux-gnu/rocblas/2.47.0/library";
        let s = shorten_middle(p, 36);
        assert_eq!(display_width(&s), 36);
        assert!(s.starts_with("/root/.cach") && s.ends_with("rocblas/2.47.0/library"), "{s}");
        assert_eq!(shorten_middle("short", 36), "short");
        assert_eq!(shorten_end("abcdef", 4), "abc…");
    }

    #[test]
    fn wrap_splits_at_spaces_and_splits_only_words_longer_than_a_line() {
        assert_eq!(wrap("aaa bbb ccc", 7, 0, 2), "aaa bbb\n  ccc\n");
        let long = format!("see {}", "x".repeat(25));
        let w = wrap(&long, 10, 0, 0);
        lines_fit(&w, 10);
        assert_eq!(w.replace(['\n', ' '], ""), format!("see{}", "x".repeat(25)));
        assert_eq!(wrap("", 10, 0, 0), "\n");
        assert_eq!(wrap("  key   value", 40, 0, 8), "  key   value\n", "leading and inner runs of spaces stay");
        assert_eq!(wrap("  key   value value", 16, 0, 8), "  key   value\n        value\n");
    }

    #[test]
    fn wrap_is_linear_in_an_unbreakable_token() {
        // A 256 KiB token (a log line without spaces) at 100 columns: the old wrap measured and copied the rest of
        // the token at every cut (2600 cuts × 256 KiB), seconds even for this one; now one pass.
        let token: String = (0..256 * 1024).map(|i| char::from(b'a' + (i % 26) as u8)).collect();
        let text = format!("path {token} end");
        let started = std::time::Instant::now();
        let w = wrap(&text, 100, 0, 6);
        assert!(started.elapsed() < std::time::Duration::from_secs(2), "{:?}", started.elapsed());
        lines_fit(&w, 100);
        assert_eq!(w.replace(['\n', ' '], ""), format!("path{token}end"));
        // `path ` and 95 columns of the token, then 94 a line after the 6-column indent; ` end` fits on the last.
        assert_eq!(w.lines().count(), 1 + (token.len() - 95).div_ceil(94));
        assert!(w.ends_with(" end\n"), "{}", &w[w.len() - 120..]);
        // Wide characters are cut between characters, never past the width.
        let wide = "漢".repeat(1000);
        let w = wrap(&wide, 41, 0, 0);
        lines_fit(&w, 41);
        assert_eq!(w.lines().next().unwrap().chars().count(), 20);
    }

    #[test]
    fn a_wide_table_fits_by_wrapping_and_shortening_and_keeps_numbers_whole() {
        let mut t = Table::new(vec![Column::label("library"), Column::text("families"), Column::number("kernels")]);
        t.row([
            "rocblas (/root/.cache/backscope/fixtures/unpacked/librocblas0/usr/lib/x86_64-linux-gnu/rocblas/2.47.0/library)",
            "MMF 6912, MMQ 4224, FA-support 2790, FA-tile 1098, MMVF 1056, quantize 120, dequantize 77",
            "1234567",
        ]);
        for width in [60, 80, 120] {
            let s = table_text(&t, Layout { width, all: false });
            lines_fit(&s, width);
            assert!(s.contains("1234567"), "{s}");
            assert!(s.contains("library)"), "the end of the label stays: {s}");
            assert!(s.contains("│ rocbla"), "the start of the label stays: {s}");
        }
    }

    #[test]
    fn bidi_and_invisible_characters_cannot_shift_a_tables_columns() {
        // RLM, LRM, ALM, RLO, RLI, PDI, LS, PS, BOM, ZWSP, ZWJ, WJ: each in a label, a wrapped and a kept cell.
        let hazards = "\u{200f}\u{200e}\u{61c}\u{202e}\u{2067}\u{2069}\u{2028}\u{2029}\u{feff}\u{200b}\u{200d}\u{2060}";
        let mut t = Table::new(vec![Column::label("name"), Column::text("what"), Column::keep("kind")]);
        t.row(["plain name", "plain words", "plain"]);
        for c in hazards.chars() {
            t.row([format!("name{c}x"), format!("some{c} words{c}{c}"), format!("{c}k")]);
        }
        for width in [60, 200] {
            let s = table_text(&t, Layout { width, all: true });
            assert!(!s.chars().any(|c| hazards.contains(c)), "{s}");
            let widths: Vec<usize> = s.lines().map(display_width).collect();
            assert!(widths.iter().all(|w| *w == widths[0]), "{widths:?}\n{s}");
            assert!(s.contains(r"name\u{200f}x"), "{s}");
        }
    }

    #[test]
    fn a_table_that_cannot_fit_becomes_a_list() {
        let cols = (0..14).map(|i| Column::number(format!("column{i}"))).collect();
        let mut t = Table::new(cols);
        t.row((0..14).map(|i| format!("{}", 1_000_000 + i)));
        let s = table_text(&t, Layout { width: 60, all: false });
        lines_fit(&s, 60);
        assert!(s.starts_with("[1]\n  column0 "), "{s}");
        assert!(s.contains("1000013"), "{s}");
    }

    #[test]
    fn collapsed_tables_say_how_many_rows_are_left_out() {
        let mut t = Table::new(vec![Column::number("n")]).collapse(Collapse::Head(3));
        for i in 0..10 {
            t.row([i.to_string()]);
        }
        let s = table_text(&t, Layout { width: 80, all: false });
        assert!(s.contains("… 7 more rows (--all to show)"), "{s}");
        assert!(!s.contains(" 5 "), "{s}");
        let s = table_text(&t, Layout { width: 80, all: true });
        assert!(s.contains(" 9 ") && !s.contains("more rows"), "{s}");
    }

    #[test]
    fn claims_wrap_and_sources_keep_their_file_names() {
        let c = Claim::new("x", Confidence::Confirmed, "word ".repeat(40)).with_source(Source::LogLine {
            path: format!("/{}/servers/s006-vulkan.log", "deep/".repeat(20)),
            line: 51,
            text: "llama_model_load_from_file_impl: using device Vulkan0 (llvmpipe (LLVM 15.0.6, 256 bits))".into(),
        });
        let s = claims_text(&ClaimList::new(vec![c.clone(), c]).collapse(1), 80, false);
        assert!(s.ends_with("… 1 more claims (--all to show)\n"), "{s}");
        lines_fit(&s, 80);
        assert!(s.starts_with("[Confirmed] word word"), "{s}");
        assert!(s.contains("    ← /deep/") && s.contains("/servers/s006-vulkan.log:51:"), "{s}");
        assert!(
            s.contains("\n      llama_model_load_from_file_impl: using device"),
            "the log text wraps under it: {s}"
        );
    }

    #[test]
    fn excerpts_are_cut_to_the_width_unless_verbatim() {
        let line = format!("export LD_PRELOAD={}", "/x".repeat(60));
        let e = Excerpt { lines: vec![line.clone()], ..Default::default() };
        lines_fit(&excerpt_text(&e, 40), 40);
        assert_eq!(excerpt_text(&Excerpt::verbatim([line.clone()]), 40), format!("{line}\n"));
    }
}
