//! Escaping for each output format. Every string in a document may come from a binary, a log or a server (kernel
//! names, model names, log lines, paths), so every renderer passes every string through one of these, and every
//! message to standard error through [`message`].
//!
//! A hazard — a character that changes how text is shown rather than being shown — is written visibly, as an
//! escape a reader can recognise and report (`\x1b`, `\u{202e}`), in every format: text, Markdown, HTML and
//! messages. HTML could keep bidi marks inside escaped text, but a mark that is not shown still reorders what is,
//! and a reader comparing a report with a terminal should see the same characters; so HTML shows them too.

use std::fmt::Write as _;

/// Characters that change how text is shown rather than being shown:
/// - C0 and C1 controls and DEL: ESC starts terminal escape sequences (screen clear `ESC[2J`, window title
///   `ESC]0;…BEL`, clipboard `ESC]52;…`), U+009B is a one-byte CSI, CR and BS overwrite what was printed;
/// - the bidirectional marks, embeddings, overrides and isolates (ALM U+061C, LRM U+200E, RLM U+200F,
///   U+202A–U+202E, U+2066–U+2069), which reorder what a reader sees;
/// - the line and paragraph separators U+2028/U+2029, which some terminals and editors break lines at;
/// - every other format character (Unicode general category Cf: zero-width space and joiners U+200B–U+200D, word
///   joiner and invisible operators U+2060–U+2064, the BOM U+FEFF, the soft hyphen, tag characters…): invisible,
///   zero columns wide to one program and one to another, so they shift table columns and hide text.
fn is_hazard(c: char) -> bool {
    c.is_control() || matches!(c, '\u{2028}' | '\u{2029}') || is_format(c)
}

/// Unicode general category Cf (format characters), Unicode 15.1 (DerivedGeneralCategory.txt).
fn is_format(c: char) -> bool {
    matches!(
        c,
        '\u{ad}'
            | '\u{600}'..='\u{605}'
            | '\u{61c}'
            | '\u{6dd}'
            | '\u{70f}'
            | '\u{890}'..='\u{891}'
            | '\u{8e2}'
            | '\u{180e}'
            | '\u{200b}'..='\u{200f}'
            | '\u{202a}'..='\u{202e}'
            | '\u{2060}'..='\u{2064}'
            | '\u{2066}'..='\u{206f}'
            | '\u{feff}'
            | '\u{fff9}'..='\u{fffb}'
            | '\u{110bd}'
            | '\u{110cd}'
            | '\u{13430}'..='\u{1343f}'
            | '\u{1bca0}'..='\u{1bca3}'
            | '\u{1d173}'..='\u{1d17a}'
            | '\u{e0001}'
            | '\u{e0020}'..='\u{e007f}'
    )
}

/// A hazard as a visible escape: `\xHH` for C0 controls and DEL, `\u{HHHH}` for the others (C1 controls, bidi
/// and format characters, line separators). Plain ASCII, one column per character.
fn push_visible(out: &mut String, c: char) {
    let _ = if u32::from(c) < 0x80 {
        write!(out, "\\x{:02x}", u32::from(c))
    } else {
        write!(out, "\\u{{{:x}}}", u32::from(c))
    };
}

/// `s` with every hazard but the characters `keep` allows written visibly, and `map` applied to those kept.
fn escaped(s: &str, keep: impl Fn(char) -> Option<char>) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match keep(c) {
            Some(k) => out.push(k),
            None if is_hazard(c) => push_visible(&mut out, c),
            None => out.push(c),
        }
    }
    out
}

/// Text for a terminal: a tab becomes a space, a newline a space, every other hazard a visible escape (`\x1b`,
/// `\u{202e}`), so nothing in the text can move the cursor, change colours, rewrite the title or the clipboard,
/// reorder what was printed or shift a table's columns.
pub fn printable(s: &str) -> String {
    if !s.chars().any(is_hazard) {
        return s.to_string();
    }
    escaped(s, |c| matches!(c, '\t' | '\n').then_some(' '))
}

/// A message for standard error (warnings, notes, the final error, a child's output line): every hazard but the
/// tab written visibly, the newline included, so a name from a file can neither drive the terminal nor forge a
/// line of its own.
pub fn message(s: &str) -> String {
    if !s.chars().any(|c| c != '\t' && is_hazard(c)) {
        return s.to_string();
    }
    escaped(s, |c| (c == '\t').then_some(c))
}

/// Lines for a terminal: each line made [`printable`], the line breaks kept.
pub fn printable_lines(s: &str) -> String {
    s.lines().map(printable).collect::<Vec<_>>().join("\n")
}

/// Text for HTML character data and attribute values: the five markup characters as entities, hazards as visible
/// escapes (newlines and tabs are kept, for `<pre>`).
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
            c if is_hazard(c) => push_visible(&mut out, c),
            c => out.push(c),
        }
    }
    out
}

/// Text for Markdown paragraphs, list items and table cells (CommonMark with GitHub's tables): characters that
/// start inline markup anywhere are backslash-escaped (emphasis, code, links, raw HTML, entities, table cells,
/// strikethrough, math, and `:` so that no `scheme:` becomes an autolink), and so is a block marker at the start
/// (`#`, `-`, `+`, `=`, `>`, `1.`). A newline becomes a space (inside a cell it would end the table row; inside a
/// paragraph it could start a heading or a list), and hazards become visible escapes (a backslash before `x` or
/// `u` is shown as it is).
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
            c if is_hazard(c) => push_visible(&mut out, c),
            c => out.push(c),
        }
    }
    out
}

/// A Markdown code span: a backtick fence longer than any run of backticks inside, with a space of padding when
/// the content starts or ends with a backtick. In a table cell `|` must still be escaped (GitHub splits cells
/// before it parses code spans) and a newline still ends the row.
pub fn markdown_code(s: &str, in_table: bool) -> String {
    let clean = escaped(s, |c| matches!(c, '\n' | '\r' | '\t').then_some(' '));
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

/// A line of a fenced code block: hazards become visible escapes; nothing else needs escaping inside the fence.
pub fn markdown_pre(s: &str) -> String {
    escaped(s, |c| (c == '\t').then_some(c))
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
        assert_eq!(p, r"kernel\x1b[2J\x1b]0;title\x07name\x0d\u{202e}gpj.exe\u{9b}31m tab line");
        assert_eq!(printable("plain ✓ text"), "plain ✓ text");
    }

    #[test]
    fn bidi_separators_and_invisible_characters_are_shown_not_obeyed() {
        // ALM, LRM, RLM, the embeddings/overrides and isolates, the line and paragraph separators, the BOM, the
        // zero-width space/joiners, the word joiner, the soft hyphen and a tag character: each as its code point.
        let all = [
            '\u{61c}',
            '\u{200e}',
            '\u{200f}',
            '\u{202a}',
            '\u{202b}',
            '\u{202c}',
            '\u{202d}',
            '\u{202e}',
            '\u{2066}',
            '\u{2067}',
            '\u{2068}',
            '\u{2069}',
            '\u{2028}',
            '\u{2029}',
            '\u{feff}',
            '\u{200b}',
            '\u{200c}',
            '\u{200d}',
            '\u{2060}',
            '\u{ad}',
            '\u{e0041}',
        ];
        for c in all {
            let want = format!("a\\u{{{:x}}}b", u32::from(c));
            let s = format!("a{c}b");
            assert_eq!(printable(&s), want);
            assert_eq!(message(&s), want);
            assert_eq!(html(&s), want);
            assert_eq!(markdown(&s), want);
            assert_eq!(markdown_pre(&s), want);
            assert_eq!(markdown_code(&s, true), format!("`{want}`"));
        }
        // Letters of right-to-left scripts and other visible characters are text, not hazards.
        for s in ["שלום עולם", "مرحبا", "漢字", "Ünïcödé ✓ …", "e\u{301}"] {
            assert_eq!(printable(s), s);
            assert_eq!(message(s), s);
        }
    }

    #[test]
    fn messages_cannot_drive_the_terminal_or_forge_a_line() {
        let name = "blk.0\x1b]0;pwned\x07\x1b[2J\x1b]52;c;ZXZpbA==\x07\u{9b}31m\nbackscope: all good\there";
        assert_eq!(
            message(name),
            r"blk.0\x1b]0;pwned\x07\x1b[2J\x1b]52;c;ZXZpbA==\x07\u{9b}31m\x0abackscope: all good".to_string()
                + "\there"
        );
        assert_eq!(message("cannot open /tmp/a b.log: No such file"), "cannot open /tmp/a b.log: No such file");
    }

    #[test]
    fn html_escapes_markup_and_quotes() {
        assert_eq!(
            html("</table><script>alert('x')</script> & \"q\""),
            "&lt;/table&gt;&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &quot;q&quot;"
        );
        assert_eq!(html("a\x1bb\nc"), "a\\x1bb\nc");
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
