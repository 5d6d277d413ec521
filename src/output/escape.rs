//! Escaping for each output format. Every string in a document may come from a binary, a log or a server (kernel
//! names, model names, log lines, paths), so every renderer passes every string through one of these.

/// Characters that change how text is shown rather than being shown: C0 and C1 controls (ESC starts terminal
/// escape sequences; CR and BS overwrite what was printed) and the Unicode bidirectional overrides and isolates,
/// which reorder what a reader sees.
fn is_hazard(c: char) -> bool {
    c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// Text for a terminal: a tab becomes a space, a newline a space, every other hazard `�`, so nothing in the text
/// can move the cursor, change colours, rewrite the title or reorder what was printed.
pub fn printable(s: &str) -> String {
    if !s.chars().any(is_hazard) {
        return s.to_string();
    }
    s.chars()
        .map(|c| match c {
            '\t' | '\n' => ' ',
            c if is_hazard(c) => '\u{fffd}',
            c => c,
        })
        .collect()
}

/// Lines for a terminal: each line made [`printable`], the line breaks kept.
pub fn printable_lines(s: &str) -> String {
    s.lines().map(printable).collect::<Vec<_>>().join("\n")
}

/// Text for HTML character data and attribute values: the five markup characters as entities, hazards as `�`
/// (newlines and tabs are kept, for `<pre>`).
pub fn html(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + s.len() / 8);
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            '\n' | '\t' => out.push(c),
            c if is_hazard(c) => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
}

/// Text for Markdown paragraphs, list items and table cells (CommonMark with GitHub's tables): characters that
/// start inline markup anywhere are backslash-escaped (emphasis, code, links, raw HTML, entities, table cells,
/// strikethrough, math, and `:` so that no `scheme:` becomes an autolink), and so is a block marker at the start
/// (`#`, `-`, `+`, `=`, `>`, `1.`). A newline becomes a space (inside a cell it would end the table row; inside a
/// paragraph it could start a heading or a list), and hazards become `�`.
pub fn markdown(s: &str) -> String {
    markdown_escaped(s, true)
}

/// [`markdown`] for a table cell, which holds inline content only: block markers at its start need no escape
/// (`-1` stays `-1`).
pub fn markdown_cell(s: &str) -> String {
    markdown_escaped(s, false)
}

fn markdown_escaped(s: &str, block_context: bool) -> String {
    let mut out = String::with_capacity(s.len() + s.len() / 8);
    // Markdown ignores up to three leading spaces before a block marker; a run of digits followed by `.` or `)`
    // starts an ordered list.
    let first = s.chars().take_while(|c| *c == ' ').count();
    let digits_end = first + s.chars().skip(first).take_while(char::is_ascii_digit).count();
    // `12.` starts a list only when a space or the end follows (`41.5` is a number).
    let list_marker = digits_end > first && s.chars().nth(digits_end + 1).is_none_or(|c| c == ' ' || c == '\t');
    for (i, c) in s.chars().enumerate() {
        let block_start = block_context
            && ((i == first && matches!(c, '#' | '-' | '+' | '=' | '>'))
                || (i == digits_end && list_marker && matches!(c, '.' | ')')));
        match c {
            '\\' | '`' | '*' | '_' | '[' | ']' | '<' | '>' | '|' | '~' | '&' | '$' | ':' => {
                out.push('\\');
                out.push(c);
            }
            _ if block_start => {
                out.push('\\');
                out.push(c);
            }
            '\n' | '\r' | '\t' => out.push(' '),
            c if is_hazard(c) => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
}

/// A Markdown code span: a backtick fence longer than any run of backticks inside, with a space of padding when
/// the content starts or ends with a backtick. In a table cell `|` must still be escaped (GitHub splits cells
/// before it parses code spans) and a newline still ends the row.
pub fn markdown_code(s: &str, in_table: bool) -> String {
    let clean: String = s
        .chars()
        .map(|c| match c {
            '\n' | '\r' | '\t' => ' ',
            c if is_hazard(c) => '\u{fffd}',
            c => c,
        })
        .collect();
    let clean = if in_table { clean.replace('|', "\\|") } else { clean };
    let longest = clean.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat(longest + 1);
    let pad = if clean.starts_with('`') || clean.ends_with('`') || clean.is_empty() { " " } else { "" };
    format!("{fence}{pad}{clean}{pad}{fence}")
}

/// The fence of a fenced code block holding `lines`: backticks, longer than any run of backticks at the start of
/// a line (at least three).
pub fn markdown_fence(lines: &[String]) -> String {
    let longest = lines.iter().map(|l| l.trim_start().chars().take_while(|c| *c == '`').count()).max().unwrap_or(0);
    "`".repeat((longest + 1).max(3))
}

/// A line of a fenced code block: hazards become `�`; nothing else needs escaping inside the fence.
pub fn markdown_pre(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c == '\t' {
                c
            } else if is_hazard(c) {
                '\u{fffd}'
            } else {
                c
            }
        })
        .collect()
}

/// A local path as a link target for HTML `href` and Markdown link destinations: percent-encoded except for
/// unreserved characters and `/`, so it has no scheme (a `:` is encoded), no fragment or query, and no character
/// that ends the attribute or the destination. It can only name a file relative to the document or, for an
/// absolute path, a file on the reader's own machine.
pub fn url_path(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for b in path.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'/' | b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminal_text_cannot_drive_the_terminal() {
        let hostile = "kernel\x1b[2J\x1b]0;title\x07name\r\u{202e}gpj.exe\u{9b}31m\ttab\nline";
        let p = printable(hostile);
        assert!(!p.chars().any(|c| c.is_control()), "{p:?}");
        assert!(!p.contains('\u{202e}'));
        assert_eq!(p, "kernel\u{fffd}[2J\u{fffd}]0;title\u{fffd}name\u{fffd}\u{fffd}gpj.exe\u{fffd}31m tab line");
        assert_eq!(printable("plain ✓ text"), "plain ✓ text");
    }

    #[test]
    fn html_escapes_markup_and_quotes() {
        assert_eq!(
            html("</table><script>alert('x')</script> & \"q\""),
            "&lt;/table&gt;&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &quot;q&quot;"
        );
        assert_eq!(html("a\x1bb\nc"), "a\u{fffd}b\nc");
    }

    #[test]
    fn markdown_escapes_every_breaker() {
        let s = markdown("a|b\n# h `c` <script> *e* [l](u) &lt; http://x");
        assert_eq!(s, r"a\|b # h \`c\` \<script\> \*e\* \[l\](u) \&lt; http\://x");
        assert_eq!(markdown("# title"), r"\# title");
        assert_eq!(markdown("12. item"), r"12\. item");
        assert_eq!(markdown("41.5"), "41.5");
        assert_eq!(markdown("7)"), r"7\)");
        assert_eq!(markdown_cell("-1"), "-1");
        assert_eq!(markdown_cell("a|b"), r"a\|b");
        assert_eq!(markdown("  + x"), r"  \+ x");
        assert_eq!(markdown("- x - y 1.5"), r"\- x - y 1.5");
        assert_eq!(markdown_code("x|y", true), r"`x\|y`");
        assert_eq!(markdown_code("a `b` c", false), "``a `b` c``");
        assert_eq!(markdown_code("`edge", false), "`` `edge ``");
        assert_eq!(markdown_fence(&["```inner".into(), "x".into()]), "````");
    }

    #[test]
    fn link_targets_have_no_scheme_and_no_breakers() {
        assert_eq!(url_path("/runs/a b/x.log"), "/runs/a%20b/x.log");
        assert_eq!(url_path("javascript:alert(1)"), "javascript%3Aalert%281%29");
        assert_eq!(url_path("x\"><script>"), "x%22%3E%3Cscript%3E");
        assert_eq!(url_path("/gfx#9?.co"), "/gfx%239%3F.co");
        assert_eq!(url_path("é"), "%C3%A9");
    }
}
