//! The document every command's result becomes before it is rendered: headings, paragraphs, tables, claim lists,
//! definition lists, preformatted excerpts and charts. It is plain data and says nothing about a format: the
//! renderers ([`super::text`], [`super::markdown`], [`super::html`]) decide how each block looks and escape every
//! string for their format. Strings in a document are raw (they may hold control characters, markup, table
//! breakers from a log or a binary); no builder escapes anything.

use crate::evidence::Claim;

/// A whole document: a title (the HTML `<title>` and first heading; text output leaves it out, a terminal user
/// knows what they ran) and its blocks in reading order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Document {
    pub title: String,
    pub blocks: Vec<Block>,
}

impl Document {
    pub fn new(title: impl Into<String>) -> Self {
        Document { title: title.into(), blocks: Vec::new() }
    }

    pub fn push(&mut self, block: impl Into<Block>) -> &mut Self {
        self.blocks.push(block.into());
        self
    }

    pub fn heading(&mut self, level: u8, text: impl Into<String>) -> &mut Self {
        self.push(Block::Heading { level: level.clamp(2, 4), text: text.into() })
    }

    pub fn paragraph(&mut self, text: impl Into<Text>) -> &mut Self {
        self.push(Block::Paragraph(text.into()))
    }

    pub fn claims(&mut self, claims: &[Claim]) -> &mut Self {
        self.push(Block::Claims(ClaimList::new(claims.to_vec())))
    }
}

/// One block of a document.
#[derive(Clone, Debug, PartialEq)]
pub enum Block {
    /// A section heading; level 2 to 4 (level 1 is the document title).
    Heading {
        level: u8,
        text: String,
    },
    Paragraph(Text),
    /// A bulleted list.
    List(Vec<Text>),
    /// Terms and their values (`offloaded: 23/23 layers`).
    Facts(Vec<(String, Text)>),
    Table(Table),
    Claims(ClaimList),
    /// Lines shown as written: a log excerpt, command lines to copy.
    Excerpt(Excerpt),
    Chart(Chart),
}

impl From<Table> for Block {
    fn from(t: Table) -> Self {
        Block::Table(t)
    }
}

impl From<Excerpt> for Block {
    fn from(e: Excerpt) -> Self {
        Block::Excerpt(e)
    }
}

impl From<ClaimList> for Block {
    fn from(c: ClaimList) -> Self {
        Block::Claims(c)
    }
}

impl From<Chart> for Block {
    fn from(c: Chart) -> Self {
        Block::Chart(c)
    }
}

/// Inline text: a run of spans.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Text(pub Vec<Span>);

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Span {
    Plain(String),
    /// An identifier, a kernel name, a command: monospace where the format has it.
    Code(String),
    Strong(String),
    /// A link to a local file (an absolute path, or one relative to where the document is written). Renderers
    /// that cannot link show the text.
    Link {
        text: String,
        target: String,
    },
}

impl Text {
    pub fn plain(s: impl Into<String>) -> Self {
        Text(vec![Span::Plain(s.into())])
    }

    pub fn code(s: impl Into<String>) -> Self {
        Text(vec![Span::Code(s.into())])
    }

    #[must_use]
    pub fn and(mut self, span: Span) -> Self {
        self.0.push(span);
        self
    }

    #[must_use]
    pub fn and_plain(self, s: impl Into<String>) -> Self {
        self.and(Span::Plain(s.into()))
    }

    #[must_use]
    pub fn and_code(self, s: impl Into<String>) -> Self {
        self.and(Span::Code(s.into()))
    }

    /// Prose with `backquoted` parts as code spans (the convention of claim statements); unbalanced backquotes
    /// stay as they are.
    pub fn with_code_spans(s: &str) -> Self {
        let parts: Vec<&str> = s.split('`').collect();
        if parts.len().is_multiple_of(2) {
            return Text::plain(s);
        }
        let spans = parts
            .iter()
            .enumerate()
            .filter(|(_, p)| !p.is_empty())
            .map(|(i, p)| if i % 2 == 1 { Span::Code((*p).to_string()) } else { Span::Plain((*p).to_string()) })
            .collect();
        Text(spans)
    }

    /// The text without markup, as a terminal shows it (not yet made printable).
    pub fn flat(&self) -> String {
        let mut s = String::new();
        for span in &self.0 {
            match span {
                Span::Plain(t) | Span::Code(t) | Span::Strong(t) | Span::Link { text: t, .. } => s.push_str(t),
            }
        }
        s
    }
}

impl From<String> for Text {
    fn from(s: String) -> Self {
        Text::plain(s)
    }
}

impl From<&str> for Text {
    fn from(s: &str) -> Self {
        Text::plain(s)
    }
}

/// How a column gives way when a table is wider than the terminal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fit {
    /// Never narrower than its content (numbers, short codes).
    Keep,
    /// Wrapped at spaces (prose, lists of families).
    Wrap,
    /// Shortened in the middle with `…`, so that both the start and the file name at the end stay readable.
    Middle,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Align {
    Left,
    Right,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Column {
    pub header: String,
    pub fit: Fit,
    pub align: Align,
}

impl Column {
    /// A text column that wraps.
    pub fn text(header: impl Into<String>) -> Self {
        Column { header: header.into(), fit: Fit::Wrap, align: Align::Left }
    }

    /// A label or path, shortened in the middle.
    pub fn label(header: impl Into<String>) -> Self {
        Column { header: header.into(), fit: Fit::Middle, align: Align::Left }
    }

    /// A number: kept whole, right-aligned.
    pub fn number(header: impl Into<String>) -> Self {
        Column { header: header.into(), fit: Fit::Keep, align: Align::Right }
    }

    /// A short value kept whole, left-aligned.
    pub fn keep(header: impl Into<String>) -> Self {
        Column { header: header.into(), fit: Fit::Keep, align: Align::Left }
    }
}

/// Which rows of a long table terminal output shows (Markdown and HTML show every row; `--all` too).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Collapse {
    /// The first N rows.
    Head(usize),
    /// The first and the last N rows (a timeline, whose end is where a crash is).
    HeadTail(usize, usize),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Table {
    pub columns: Vec<Column>,
    pub rows: Vec<Vec<Text>>,
    pub collapse: Option<Collapse>,
}

impl Table {
    pub fn new(columns: Vec<Column>) -> Self {
        Table { columns, rows: Vec::new(), collapse: None }
    }

    #[must_use]
    pub fn collapse(mut self, c: Collapse) -> Self {
        self.collapse = Some(c);
        self
    }

    /// Add a row of plain cells; a short row is padded with empty cells, a long one cut to the columns.
    pub fn row<S: Into<Text>>(&mut self, cells: impl IntoIterator<Item = S>) {
        self.row_text(cells.into_iter().map(Into::into).collect());
    }

    pub fn row_text(&mut self, mut cells: Vec<Text>) {
        cells.resize(self.columns.len(), Text::default());
        self.rows.push(cells);
    }

    /// The rows terminal output shows: indices of the kept rows, and where the left-out ones were.
    pub fn visible_rows(&self, all: bool) -> (Vec<usize>, Option<(usize, usize)>) {
        let n = self.rows.len();
        let (head, tail) = match (all, self.collapse) {
            (false, Some(Collapse::Head(h))) => (h, 0),
            (false, Some(Collapse::HeadTail(h, t))) => (h, t),
            _ => (n, 0),
        };
        if head + tail >= n {
            return ((0..n).collect(), None);
        }
        let kept: Vec<usize> = (0..head).chain(n - tail..n).collect();
        (kept, Some((head, n - head - tail)))
    }
}

/// A claim list; `run_dirs` maps run ids to their directories so that renderers can link run-record sources.
/// `collapse`: terminal output shows the first N claims unless `--all` (documents show every claim).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClaimList {
    pub claims: Vec<Claim>,
    pub run_dirs: Vec<(String, String)>,
    pub collapse: Option<usize>,
}

impl ClaimList {
    pub fn new(claims: Vec<Claim>) -> Self {
        ClaimList { claims, run_dirs: Vec::new(), collapse: None }
    }

    #[must_use]
    pub fn collapse(mut self, n: usize) -> Self {
        self.collapse = Some(n);
        self
    }

    #[must_use]
    pub fn with_run_dir(mut self, run_id: impl Into<String>, dir: impl Into<String>) -> Self {
        self.run_dirs.push((run_id.into(), dir.into()));
        self
    }

    pub fn run_dir(&self, run_id: &str) -> Option<&str> {
        self.run_dirs.iter().find(|(id, _)| id == run_id).map(|(_, d)| d.as_str())
    }
}

/// Lines shown as written (escaped for the format, never reflowed). `file` and `first_line` say where an excerpt
/// of a log comes from; `verbatim` lines are meant to be copied (environment lines, command lines) and are never
/// cut to the terminal width, while other excerpts are.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Excerpt {
    pub caption: Option<String>,
    pub file: Option<String>,
    /// The line number of each line in `file`, when known.
    pub line_numbers: Vec<u64>,
    pub lines: Vec<String>,
    pub verbatim: bool,
}

impl Excerpt {
    /// Lines to copy as they are.
    pub fn verbatim(lines: impl IntoIterator<Item = String>) -> Self {
        Excerpt { lines: lines.into_iter().collect(), verbatim: true, ..Default::default() }
    }
}

/// A chart: SVG for HTML, and blocks that say the same for text and Markdown (a table of the plotted values).
#[derive(Clone, Debug, PartialEq)]
pub struct Chart {
    pub title: String,
    pub svg: Svg,
    pub fallback: Vec<Block>,
}

/// SVG markup checked to be inert: it loads nothing, runs nothing. Only [`Svg::new`] makes one, so an HTML
/// renderer can embed it as it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Svg(String);

/// Why markup was refused as a chart.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("chart SVG refused at byte {offset}: {what}")]
pub struct SvgError {
    pub offset: usize,
    pub what: &'static str,
}

impl Svg {
    /// Accepts markup that is one `<svg>` element and holds nothing that runs or fetches: no `<script>`,
    /// `<foreignObject>`, `<image>`, `<iframe>`, no event-handler attribute (`on…=`), no `javascript:`, no
    /// `@import`, and `href` / `url(…)` only to fragments in the same document (`#id`). Text drawn from data must
    /// already be escaped by whatever produced the markup; this check is the second line.
    pub fn new(markup: impl Into<String>) -> Result<Svg, SvgError> {
        let markup = markup.into();
        let lower = markup.to_ascii_lowercase();
        let start = lower.trim_start();
        let start = start.strip_prefix("<?xml").map_or(start, |rest| rest.split_once("?>").map_or("", |(_, r)| r));
        if !start.trim_start().starts_with("<svg") {
            return Err(SvgError { offset: 0, what: "expected markup that starts with an <svg> element" });
        }
        const FORBIDDEN: &[(&str, &str)] = &[
            ("<script", "a <script> element"),
            ("<foreignobject", "a <foreignObject> element"),
            ("<image", "an <image> element (it fetches)"),
            ("<iframe", "an <iframe> element"),
            ("<object", "an <object> element"),
            ("<embed", "an <embed> element"),
            ("javascript:", "a javascript: URL"),
            ("@import", "a CSS @import"),
        ];
        for (needle, what) in FORBIDDEN {
            if let Some(offset) = lower.find(needle) {
                return Err(SvgError { offset, what });
            }
        }
        for (at, _) in lower.match_indices("href") {
            let rest = lower[at + 4..].trim_start();
            let Some(value) = rest.strip_prefix('=') else { continue };
            let value = value.trim_start().trim_start_matches(['"', '\'']);
            if !value.starts_with('#') {
                return Err(SvgError { offset: at, what: "an href to something other than a #fragment" });
            }
        }
        for (at, _) in lower.match_indices("url(") {
            let value = lower[at + 4..].trim_start().trim_start_matches(['"', '\'']);
            if !value.starts_with('#') {
                return Err(SvgError { offset: at, what: "a url(…) to something other than a #fragment" });
            }
        }
        // An event handler is an attribute named on…: whitespace, `on`, letters, optional space, `=`.
        let bytes = lower.as_bytes();
        for (at, _) in lower.match_indices("on") {
            let before = at.checked_sub(1).and_then(|i| bytes.get(i));
            if !before.is_some_and(|b| b.is_ascii_whitespace() || *b == b'/' || *b == b'"' || *b == b'\'') {
                continue;
            }
            let name_end =
                bytes[at + 2..].iter().position(|b| !b.is_ascii_alphabetic()).map_or(bytes.len(), |p| at + 2 + p);
            if name_end == at + 2 {
                continue;
            }
            let after = lower[name_end..].trim_start();
            if after.starts_with('=') && inside_tag(&lower, at) {
                return Err(SvgError { offset: at, what: "an event-handler attribute (on…=)" });
            }
        }
        Ok(Svg(markup))
    }

    pub fn markup(&self) -> &str {
        &self.0
    }
}

/// Whether byte `at` is inside a tag (after a `<` with no `>` between), not in character data.
fn inside_tag(lower: &str, at: usize) -> bool {
    let before = &lower[..at];
    match (before.rfind('<'), before.rfind('>')) {
        (Some(open), Some(close)) => open > close,
        (Some(_), None) => true,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inert_svg_is_accepted_and_active_content_refused() {
        let ok = r##"<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"><defs><linearGradient id="g"/></defs><rect fill="url(#g)" width="5" height="5"/><use href="#g"/><text x="1" y="9">onion = 3 &lt;b&gt;</text></svg>"##;
        assert!(Svg::new(ok).is_ok(), "{:?}", Svg::new(ok));
        for (bad, what) in [
            ("<svg><script>alert(1)</script></svg>", "<script>"),
            ("<svg><rect onclick=\"x()\"/></svg>", "event-handler"),
            ("<svg><rect\nONLOAD = 'x()'/></svg>", "event-handler"),
            ("<svg><image href=\"http://example.com/a.png\"/></svg>", "<image>"),
            ("<svg><a href=\"https://example.com\">x</a></svg>", "href"),
            ("<svg><rect style=\"fill:url(http://e.x/p)\"/></svg>", "url("),
            ("<svg><style>@import 'http://e.x/c.css';</style></svg>", "@import"),
            ("<svg><foreignObject><div/></foreignObject></svg>", "foreignObject"),
            ("<div>not svg</div>", "starts with an <svg>"),
        ] {
            let e = Svg::new(bad).expect_err(bad);
            assert!(e.what.contains(what), "{bad}: {e}");
        }
    }

    #[test]
    fn backquotes_become_code_spans_when_balanced() {
        assert_eq!(
            Text::with_code_spans("`vk` ran `x`."),
            Text(vec![
                Span::Code("vk".into()),
                Span::Plain(" ran ".into()),
                Span::Code("x".into()),
                Span::Plain(".".into())
            ])
        );
        assert_eq!(Text::with_code_spans("a ` b"), Text::plain("a ` b"));
    }

    #[test]
    fn collapsed_rows_keep_head_and_tail() {
        let mut t = Table::new(vec![Column::number("n")]);
        for i in 0..10 {
            t.row([i.to_string()]);
        }
        assert_eq!(t.visible_rows(false), ((0..10).collect(), None), "no collapse set");
        let t = t.collapse(Collapse::HeadTail(2, 3));
        assert_eq!(t.visible_rows(false), (vec![0, 1, 7, 8, 9], Some((2, 5))));
        assert_eq!(t.visible_rows(true).1, None, "--all shows every row");
        let t = t.collapse(Collapse::Head(4));
        assert_eq!(t.visible_rows(false), (vec![0, 1, 2, 3], Some((4, 6))));
        let t = t.collapse(Collapse::Head(10));
        assert_eq!(t.visible_rows(false).1, None, "exactly the limit: nothing left out");
    }
}
