//! HTML: one self-contained file. The CSS is inline, charts are inline SVG, there is no JavaScript, and a
//! Content-Security-Policy forbids the page to load anything at all, so opening it fetches nothing even if some
//! markup slipped through.

use std::fmt::Write as _;

use super::doc::{Align, Block, ClaimList, Document, Excerpt, Span, Table, Text};
use super::escape::{html, url_path};
use super::source::{source_line, Markup};
use crate::evidence::Confidence;

/// Nothing may be loaded: no scripts, no fonts, no images, no connections; inline styles only.
pub const CSP: &str =
    "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'";

const STYLE: &str = r#"
:root { color-scheme: light dark; --fg: #1d1f23; --bg: #ffffff; --muted: #5b6270; --line: #d8dce3;
  --head: #f2f4f7; --code: #f4f5f7; --ok: #1e7d3a; --inf: #1f5fb4; --unres: #a05a00; --lim: #6b6f76; }
@media (prefers-color-scheme: dark) { :root { --fg: #e4e6ea; --bg: #16181c; --muted: #9aa1ad; --line: #343943;
  --head: #20242b; --code: #22262d; --ok: #4cc071; --inf: #6aa5ff; --unres: #e8a54b; --lim: #a4a8ae; } }
body { margin: 0; background: var(--bg); color: var(--fg);
  font: 15px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, "Noto Sans", sans-serif; }
main { max-width: 1200px; margin: 0 auto; padding: 24px 28px 48px; }
h1 { font-size: 1.6em; margin: 0 0 .6em; } h2 { font-size: 1.25em; margin: 1.6em 0 .5em; border-bottom: 1px solid var(--line); }
h3, h4 { font-size: 1.05em; margin: 1.2em 0 .4em; }
code, pre { font-family: ui-monospace, "SFMono-Regular", Menlo, Consolas, "DejaVu Sans Mono", monospace; font-size: .88em; }
code { background: var(--code); padding: 0 .25em; border-radius: 3px; overflow-wrap: anywhere; unicode-bidi: isolate; }
a { color: var(--inf); overflow-wrap: anywhere; }
.table-wrap { overflow-x: auto; margin: .4em 0 1em; }
table { border-collapse: collapse; font-size: .92em; }
th, td { border: 1px solid var(--line); padding: .25em .6em; vertical-align: top; text-align: left; }
th { background: var(--head); font-weight: 600; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
tbody tr:nth-child(even) td { background: color-mix(in srgb, var(--head) 45%, transparent); }
ul.claims { list-style: none; padding-left: 0; }
li.claim { margin: .5em 0; padding: .35em .6em; border-left: 4px solid var(--line); }
li.claim.confirmed { border-color: var(--ok); } li.claim.inferred { border-color: var(--inf); }
li.claim.unresolved { border-color: var(--unres); } li.claim.limited { border-color: var(--lim); }
.badge { display: inline-block; min-width: 6.5em; margin-right: .5em; padding: 0 .45em; border-radius: 3px;
  color: #fff; font-size: .8em; font-weight: 700; text-align: center; letter-spacing: .02em; }
.badge.confirmed { background: var(--ok); } .badge.inferred { background: var(--inf); }
.badge.unresolved { background: var(--unres); } .badge.limited { background: var(--lim); }
ul.sources { margin: .2em 0 0 1.2em; padding: 0; color: var(--muted); font-size: .9em; list-style: "← "; }
dl.facts { display: grid; grid-template-columns: max-content auto; gap: .15em 1em; }
dl.facts dt { font-weight: 600; } dl.facts dd { margin: 0; }
figure { margin: .6em 0 1.2em; } figcaption { color: var(--muted); font-size: .9em; margin-bottom: .3em; }
pre { background: var(--code); padding: .6em .8em; overflow-x: auto; border-radius: 4px; line-height: 1.4; }
pre .ln { color: var(--muted); user-select: none; }
figure.chart svg { max-width: 100%; height: auto; }
footer { margin-top: 3em; color: var(--muted); font-size: .85em; }
"#;

pub fn render(doc: &Document) -> String {
    let mut out = String::with_capacity(16 << 10);
    let title = html(&doc.title);
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta http-equiv=\"Content-Security-Policy\" content=\"{CSP}\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <meta name=\"generator\" content=\"backscope {}\">\n<title>{title}</title>\n<style>{STYLE}</style>\n\
         </head>\n<body>\n<main>\n<h1>{title}</h1>\n",
        env!("CARGO_PKG_VERSION")
    );
    for block in &doc.blocks {
        block_html(&mut out, block);
    }
    let _ = write!(
        out,
        "<footer>Written by backscope {}. Every claim carries its confidence (Confirmed, Inferred, Unresolved, \
         Limited) and its sources.</footer>\n</main>\n</body>\n</html>\n",
        env!("CARGO_PKG_VERSION")
    );
    out
}

fn block_html(out: &mut String, block: &Block) {
    match block {
        Block::Heading { level, text } => {
            let _ = writeln!(out, "<h{level}>{}</h{level}>", html(text));
        }
        Block::Paragraph(t) => {
            let _ = writeln!(out, "<p>{}</p>", inline(t));
        }
        Block::List(items) => {
            out.push_str("<ul>\n");
            for item in items {
                let _ = writeln!(out, "<li>{}</li>", inline(item));
            }
            out.push_str("</ul>\n");
        }
        Block::Facts(facts) => {
            out.push_str("<dl class=\"facts\">\n");
            for (k, v) in facts {
                let _ = writeln!(out, "<dt>{}</dt><dd>{}</dd>", html(k), inline(v));
            }
            out.push_str("</dl>\n");
        }
        Block::Table(t) => table_html(out, t),
        Block::Claims(list) => claims_html(out, list),
        Block::Excerpt(e) => excerpt_html(out, e),
        Block::Chart(c) => {
            let _ = writeln!(
                out,
                "<figure class=\"chart\">\n<figcaption>{}</figcaption>\n{}\n</figure>",
                html(&c.title),
                c.svg.markup()
            );
        }
    }
}

pub fn inline(t: &Text) -> String {
    let mut s = String::new();
    for span in &t.0 {
        match span {
            Span::Plain(p) => s.push_str(&html(p)),
            Span::Code(c) => {
                let _ = write!(s, "<code>{}</code>", html(c));
            }
            Span::Strong(p) => {
                let _ = write!(s, "<strong>{}</strong>", html(p));
            }
            Span::Link { text, target } => {
                let _ = write!(s, "<a href=\"{}\">{}</a>", url_path(target), html(text));
            }
        }
    }
    s
}

fn table_html(out: &mut String, t: &Table) {
    let class = |a: Align| if a == Align::Right { " class=\"num\"" } else { "" };
    out.push_str("<div class=\"table-wrap\"><table>\n<thead><tr>");
    for c in &t.columns {
        let _ = write!(out, "<th{}>{}</th>", class(c.align), html(&c.header));
    }
    out.push_str("</tr></thead>\n<tbody>\n");
    for row in &t.rows {
        out.push_str("<tr>");
        for (cell, col) in row.iter().zip(&t.columns) {
            let _ = write!(out, "<td{}>{}</td>", class(col.align), inline(cell));
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</tbody>\n</table></div>\n");
}

fn badge_class(c: Confidence) -> &'static str {
    match c {
        Confidence::Confirmed => "confirmed",
        Confidence::Inferred => "inferred",
        Confidence::Unresolved => "unresolved",
        Confidence::Limited => "limited",
    }
}

fn claims_html(out: &mut String, list: &ClaimList) {
    out.push_str("<ul class=\"claims\">\n");
    for c in &list.claims {
        let class = badge_class(c.confidence);
        let _ = write!(
            out,
            "<li class=\"claim {class}\" id=\"{}\"><span class=\"badge {class}\">{}</span>{}",
            html(&format!("claim-{}", c.id)),
            c.confidence,
            inline(&Text::with_code_spans(&c.statement))
        );
        if !c.sources.is_empty() {
            out.push_str("\n<ul class=\"sources\">\n");
            for s in &c.sources {
                let _ = writeln!(out, "<li>{}</li>", source_line(s, list, &SOURCE_MARKUP));
            }
            out.push_str("</ul>");
        }
        out.push_str("</li>\n");
    }
    out.push_str("</ul>\n");
}

/// How HTML writes a source line.
const SOURCE_MARKUP: Markup = Markup {
    text: html,
    code: |s| format!("<code>{}</code>", html(s)),
    link: |text, path| format!("<a href=\"{}\">{}</a>", url_path(path), html(text)),
    brackets: ("[", "]"),
};

fn excerpt_html(out: &mut String, e: &Excerpt) {
    out.push_str("<figure class=\"excerpt\">\n");
    match (&e.caption, &e.file) {
        (Some(c), Some(f)) => {
            let _ = writeln!(out, "<figcaption>{} (<code>{}</code>)</figcaption>", html(c), html(f));
        }
        (Some(c), None) => {
            let _ = writeln!(out, "<figcaption>{}</figcaption>", html(c));
        }
        (None, Some(f)) => {
            let _ = writeln!(out, "<figcaption><code>{}</code></figcaption>", html(f));
        }
        (None, None) => {}
    }
    out.push_str("<pre>");
    let number_width = e.line_numbers.iter().map(|n| n.to_string().len()).max().unwrap_or(0);
    for (i, line) in e.lines.iter().enumerate() {
        if let Some(n) = e.line_numbers.get(i) {
            let _ = write!(out, "<span class=\"ln\">{n:>number_width$} │ </span>");
        }
        out.push_str(&html(line));
        out.push('\n');
    }
    out.push_str("</pre>\n</figure>\n");
}

#[cfg(test)]
mod tests {
    use super::super::doc::Column;
    use super::*;
    use crate::evidence::{Claim, Source};

    #[test]
    fn hostile_strings_are_text_not_markup() {
        let mut doc = Document::new("model <script>alert(1)</script>");
        let mut t = Table::new(vec![Column::label("kernel"), Column::number("n")]);
        t.row(["</table><script>x()</script>", "1"]);
        doc.push(t);
        doc.push(Block::Claims(ClaimList::new(vec![Claim::new("a\"b", Confidence::Limited, "<img src=x>")
            .with_source(Source::LogLine { path: "/l\"><a.log".into(), line: 2, text: "</pre>".into() })])));
        doc.push(Excerpt { lines: vec!["</pre><script>".into()], ..Default::default() });
        let page = render(&doc);
        let body = &page[page.find("<body>").unwrap()..];
        assert!(!body.contains("<script"), "{body}");
        assert!(!body.contains("<img"), "{body}");
        assert_eq!(body.matches("</table>").count(), 1, "{body}");
        assert_eq!(body.matches("</pre>").count(), 1, "{body}");
        assert!(body.contains("href=\"/l%22%3E%3Ca.log\""), "{body}");
        assert!(body.contains("id=\"claim-a&quot;b\""), "{body}");
        assert!(page.contains(CSP));
    }
}
