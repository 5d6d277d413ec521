//! Checks of what the output layer renders, by readers independent of it: line widths, Markdown through a
//! CommonMark reader (pulldown-cmark, GitHub tables on), HTML tables and text, hostile text kept inert, and HTML
//! pages loaded in headless Chromium (its DOM and its network log).

use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::Value;

/// Every line of `text` fits `width` columns (the text is box drawing, ASCII and `…`/`×`/`→`: one column each).
pub fn assert_fits(text: &str, width: usize) {
    for (i, l) in text.lines().enumerate() {
        assert!(l.chars().count() <= width, "line {} is {} columns wide (> {width}): {l:?}", i + 1, l.chars().count());
    }
}

/// Hostile text: markup that would end a table or run a script, a Markdown table breaker, a newline, ANSI colour
/// and title-setting escape sequences.
pub const HOSTILE: &str = "</table><script>alert(1)</script> a|b\nnext \u{1b}[31mred\u{1b}[0m \u{1b}]0;pwned\u{7}";

/// The checks every rendering of hostile input must pass.
pub fn assert_inert(text: &str, markdown: &str, html: &str) {
    for (name, out) in [("text", text), ("markdown", markdown), ("html", html)] {
        assert!(!out.contains('\u{1b}') && !out.contains('\u{7}'), "{name}: an escape sequence got through");
    }
    // HTML: the hostile markup is text; every table that opens closes once.
    let body = &html[html.find("<body>").expect("a body")..];
    assert!(!body.to_lowercase().contains("<script"), "html: {body}");
    assert!(body.contains("&lt;/table&gt;&lt;script&gt;alert(1)&lt;/script&gt;"), "html: {body}");
    assert_eq!(body.matches("<table>").count(), body.matches("</table>").count(), "html: {body}");
    // Markdown, read by an independent CommonMark reader: no script element, no table broken out of.
    let mut rendered = String::new();
    let parser = pulldown_cmark::Parser::new_ext(markdown, pulldown_cmark::Options::ENABLE_TABLES);
    pulldown_cmark::html::push_html(&mut rendered, parser);
    assert!(!rendered.to_lowercase().contains("<script"), "markdown rendered: {rendered}");
    assert!(rendered.contains("&lt;/table&gt;&lt;script&gt;"), "markdown rendered: {rendered}");
    for table in rendered.split("<table>").skip(1) {
        let table = &table[..table.find("</table>").expect("the table closes")];
        let columns = table.matches("<th>").count() + table.matches("<th ").count();
        for row in table.split("<tr>").skip(2) {
            assert_eq!(row.matches("<td").count(), columns, "a row with a different cell count: {row}\n{markdown}");
        }
    }
}

/// Chromium run headless on a local page, with the flags that keep it from phoning home.
fn chromium(profile: &Path) -> Command {
    let mut c = Command::new("chromium");
    c.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--hide-scrollbars",
    ])
    .arg(format!("--user-data-dir={}", profile.display()))
    .stdin(Stdio::null());
    c
}

/// Requests the page itself made, from Chromium's network log: URL requests whose initiator is an origin (a
/// page loaded from a file has the opaque origin `null`). Chromium's own background requests have none.
fn page_requests(net_log: &Path) -> Vec<String> {
    // Chromium's network service may still be finishing the file when the browser process has exited (seen on a
    // loaded machine): wait for it to be whole, a bounded while.
    let mut tries = 0;
    let log: Value = loop {
        let text = std::fs::read_to_string(net_log).unwrap_or_default();
        match serde_json::from_str(&text) {
            Ok(v) => break v,
            Err(_) if tries < 60 => {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(250));
            }
            Err(e) => panic!("{}: not whole after 15 s: {e}", net_log.display()),
        }
    };
    let start_job = log["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"].as_u64().unwrap();
    log["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"].as_u64() == Some(start_job))
        .filter(|e| e["params"]["initiator"].as_str().is_some_and(|i| i != "not an origin"))
        .filter_map(|e| e["params"]["url"].as_str().map(str::to_string))
        .filter(|u| !u.starts_with("file:"))
        .collect()
}

/// Loads `page` in Chromium: its DOM, the requests it made, and a screenshot written to `shot`.
pub fn load_in_chromium(page: &Path, shot: &Path) -> (String, Vec<String>) {
    let profile = tempfile::tempdir().unwrap();
    let net = profile.path().join("net.json");
    let url = format!("file://{}", page.display());
    let out = chromium(profile.path())
        .arg(format!("--log-net-log={}", net.display()))
        .arg("--dump-dom")
        .arg(&url)
        .output()
        .unwrap_or_else(|e| panic!("cannot run chromium ({e}): bash scripts/install-deps.sh installs it"));
    assert!(out.status.success(), "chromium --dump-dom: {}", String::from_utf8_lossy(&out.stderr));
    let dom = String::from_utf8_lossy(&out.stdout).into_owned();
    let out = chromium(profile.path())
        .args(["--window-size=1280,2400", &format!("--screenshot={}", shot.display()), &url])
        .output()
        .unwrap();
    assert!(out.status.success() && shot.is_file(), "chromium --screenshot: {}", String::from_utf8_lossy(&out.stderr));
    (dom, page_requests(&net))
}

/// Every `src`, `href`, `srcset`, `action` and CSS `url(…)` in the page names nothing with a scheme or a host.
pub fn assert_no_external_reference(html: &str) {
    let lower = html.to_lowercase();
    for attr in ["src=", "href=", "srcset=", "action=", "url(", "@import"] {
        for (at, _) in lower.match_indices(attr) {
            let value = lower[at + attr.len()..].trim_start_matches(['"', '\'', ' ']);
            let value: String = value.chars().take_while(|c| !matches!(c, '"' | '\'' | ')' | ' ' | '>')).collect();
            assert!(
                !value.contains(':') && !value.starts_with("//"),
                "{attr}{value}: a reference that leaves the page"
            );
        }
    }
}

/// Markdown as an independent CommonMark reader (GitHub tables on) renders it to HTML.
pub fn commonmark(markdown: &str) -> String {
    let mut html = String::new();
    let parser = pulldown_cmark::Parser::new_ext(markdown, pulldown_cmark::Options::ENABLE_TABLES);
    pulldown_cmark::html::push_html(&mut html, parser);
    html
}

/// HTML as text: tags removed, the entities `&amp;`, `&lt;`, `&gt;`, `&quot;` and `&#39;` decoded.
pub fn html_text(cell: &str) -> String {
    let mut out = String::new();
    let mut in_tag = false;
    for c in cell.chars() {
        match c {
            '<' => in_tag = true,
            '>' => in_tag = false,
            c if !in_tag => out.push(c),
            _ => {}
        }
    }
    out.replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", "\"").replace("&#39;", "'").replace("&amp;", "&")
}

/// The tables of an HTML page (pulldown-cmark's or backscope's): each one's header cells and body rows, the cells
/// as their text (tags removed, the entities `&amp;`, `&lt;`, `&gt;`, `&quot;` and `&#39;` decoded).
pub fn html_tables(html: &str) -> Vec<(Vec<String>, Vec<Vec<String>>)> {
    /// The cells `<tag>…</tag>` or `<tag attributes>…</tag>` of a row, in order.
    fn cells(row: &str, tag: &str) -> Vec<String> {
        let (open, close) = (format!("<{tag}"), format!("</{tag}>"));
        let mut out = Vec::new();
        let mut rest = row;
        while let Some(at) = rest.find(&open) {
            let after = &rest[at + open.len()..];
            if !after.starts_with(['>', ' ']) {
                rest = after;
                continue;
            }
            let body = &after[after.find('>').unwrap() + 1..];
            let end = body.find(&close).expect("the cell closes");
            out.push(html_text(&body[..end]));
            rest = &body[end..];
        }
        out
    }
    html.split("<table>")
        .skip(1)
        .map(|t| {
            let t = &t[..t.find("</table>").expect("the table closes")];
            let (head, body) = t.split_once("</thead>").unwrap_or((t, ""));
            let rows = body.split("<tr>").skip(1).map(|r| cells(r, "td")).collect();
            (cells(head, "th"), rows)
        })
        .collect()
}
