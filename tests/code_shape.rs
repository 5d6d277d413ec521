//! Three rules about the shape of the code, checked on the source text of every crate of the workspace (`src/` and
//! each `crates/*/src/`):
//! - no function over [`MAX_FN_LINES`] lines outside tests, except those on [`STILL_LONG`], a list that only shrinks;
//! - no file over [`MAX_FILE_LINES`] lines, not counting a trailing `#[cfg(test)]` module (test modules in their own
//!   file are not counted at all), except those on [`STILL_OVER`], a list that only shrinks;
//! - no import circle between files of one crate: the graph file → file of `use` paths and of `crate::`, `super::`,
//!   `self::` paths in code (a `mod x;` declaration is not an edge), with no strongly connected component of more
//!   than one file, except those on [`STILL_CIRCLES`], a list that only shrinks. Each crate is its own graph: its
//!   `crate::` paths resolve inside it, and a path into another crate of the workspace is no edge.
//!
//! The circle rule is kept at file level: a parent `mod.rs` that calls `child::f` and a child that uses `super::Type`
//! are a circle too. The cure is the one used for `doctor/` and `support_matrix/`: what the children share (types,
//! the host reader) gets its own file, and `mod.rs` only calls down. A path through a re-export resolves to the file
//! that re-exports (write the defining module's path instead); `super::` inside an inline non-test module resolves as
//! if written at the file's top level.
//!
//! The reader is a small lexer, not a parser: comments and the contents of string and char literals are blanked
//! (one space per character, newlines kept), so that braces, `fn` and paths are code; items under `#[cfg(test)]`
//! (test modules inline or in their own file) are blanked too.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The longest a function body may be, in lines from its `{` to its `}`.
const MAX_FN_LINES: usize = 150;

/// Functions over [`MAX_FN_LINES`] in folders that other work is splitting: (file under the workspace, fn name).
/// A listed function that is now short, or gone, fails the test: the list only shrinks.
const STILL_LONG: &[(&str, &str)] = &[];

/// The most lines a source file may have, not counting a trailing `#[cfg(test)]` module.
const MAX_FILE_LINES: usize = 1000;

/// Files over [`MAX_FILE_LINES`] that other work is splitting: (file under the workspace, its counted lines when
/// listed). A listed file that is now at most [`MAX_FILE_LINES`] lines, or gone, fails the test, and so does one that
/// grew past its listed length: the list only shrinks.
const STILL_OVER: &[(&str, usize)] = &[
    // One file a line, so that each split takes its own line off.
];

/// Import circles inside folders that other work is reshaping, each as its files (sorted, under the workspace). A
/// listed circle that no longer exists as listed fails the test: the list only shrinks.
const STILL_CIRCLES: &[&[&str]] = &[];

/// Rooms of one folder that still import each other, as `folder: [rooms]` the way the test prints them. A listed
/// entry that no longer holds fails the test: the list only shrinks.
const STILL_BACK_UP: &[&str] = &[];

// ---------------------------------------------------------------------------------------------------------------
// Lexing

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

fn blank(c: char) -> char {
    if c == '\n' {
        '\n'
    } else {
        ' '
    }
}

/// `text` with comments and the contents of string, raw string, byte string and char literals blanked, one char for
/// one char (so offsets and lines stay those of `text`). Lifetimes and labels (`'a`) are kept.
fn code_only(text: &str) -> Vec<char> {
    let c: Vec<char> = text.chars().collect();
    let n = c.len();
    let at = |i: usize| c.get(i).copied().unwrap_or('\0');
    let mut out = Vec::with_capacity(n);
    let mut i = 0;
    while i < n {
        let ch = c[i];
        let prev_ident = i > 0 && is_ident(c[i - 1]);
        if ch == '/' && at(i + 1) == '/' {
            while i < n && c[i] != '\n' {
                out.push(' ');
                i += 1;
            }
        } else if ch == '/' && at(i + 1) == '*' {
            // Block comments nest in Rust.
            let mut depth = 0usize;
            loop {
                if i >= n {
                    break;
                }
                if c[i] == '/' && at(i + 1) == '*' {
                    depth += 1;
                    out.extend("  ".chars());
                    i += 2;
                } else if c[i] == '*' && at(i + 1) == '/' {
                    depth -= 1;
                    out.extend("  ".chars());
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(blank(c[i]));
                    i += 1;
                }
            }
        } else if !prev_ident && (ch == 'r' || (ch == 'b' && at(i + 1) == 'r')) && {
            let j = i + if ch == 'b' { 2 } else { 1 };
            let mut k = j;
            while at(k) == '#' {
                k += 1;
            }
            at(k) == '"'
        } {
            // r"…", r#"…"#, br#"…"#: ends at a quote followed by as many hashes as opened it.
            let j = i + if ch == 'b' { 2 } else { 1 };
            let mut hashes = 0;
            while at(j + hashes) == '#' {
                hashes += 1;
            }
            let start = j + hashes + 1;
            out.extend(std::iter::repeat_n(' ', start - i - 1));
            out.push('"');
            i = start;
            while i < n {
                if c[i] == '"' && (0..hashes).all(|h| at(i + 1 + h) == '#') {
                    out.push('"');
                    out.extend(std::iter::repeat_n(' ', hashes));
                    i += 1 + hashes;
                    break;
                }
                out.push(blank(c[i]));
                i += 1;
            }
        } else if ch == '"' {
            out.push('"');
            i += 1;
            while i < n {
                if c[i] == '\\' {
                    out.push(' ');
                    out.push(blank(at(i + 1)));
                    i += 2;
                } else if c[i] == '"' {
                    out.push('"');
                    i += 1;
                    break;
                } else {
                    out.push(blank(c[i]));
                    i += 1;
                }
            }
        } else if ch == '\'' && (at(i + 1) == '\\' || (at(i + 2) == '\'' && at(i + 1) != '\'')) {
            // A char literal: `'x'`, `'{'`, `'\''`, `'\u{7f}'`; otherwise `'a` is a lifetime or a label.
            out.push('\'');
            i += 1;
            if c[i] == '\\' {
                out.extend("  ".chars());
                i += 2;
            }
            while i < n && c[i] != '\'' {
                out.push(' ');
                i += 1;
            }
            if i < n {
                out.push('\'');
                i += 1;
            }
        } else {
            out.push(ch);
            i += 1;
        }
    }
    out
}

/// The index of the `}` that closes the `{` at `open`, or the end.
fn matching_brace(code: &[char], open: usize) -> usize {
    let mut depth = 0usize;
    for (i, &ch) in code.iter().enumerate().skip(open) {
        if ch == '{' {
            depth += 1;
        } else if ch == '}' {
            depth -= 1;
            if depth == 0 {
                return i;
            }
        }
    }
    code.len().saturating_sub(1)
}

/// The first `{` or `;` from `from` outside parentheses and brackets: where an item's body starts or it ends.
fn item_end_or_body(code: &[char], from: usize) -> Option<(usize, char)> {
    let mut depth = 0i32;
    for (i, &ch) in code.iter().enumerate().skip(from) {
        match ch {
            '(' | '[' => depth += 1,
            ')' | ']' => depth -= 1,
            '{' | ';' if depth <= 0 => return Some((i, ch)),
            _ => {}
        }
    }
    None
}

fn line_of(code: &[char], at: usize) -> usize {
    code[..at].iter().filter(|c| **c == '\n').count() + 1
}

/// Whether the keyword `word` starts at `i` (not inside a longer identifier).
fn word_at(code: &[char], i: usize, word: &str) -> bool {
    let w: Vec<char> = word.chars().collect();
    code.len() >= i + w.len()
        && code[i..i + w.len()] == w[..]
        && (i == 0 || !is_ident(code[i - 1]))
        && code.get(i + w.len()).is_none_or(|c| !is_ident(*c))
}

fn ident_at(code: &[char], mut i: usize) -> (String, usize) {
    let mut s = String::new();
    while i < code.len() && is_ident(code[i]) {
        s.push(code[i]);
        i += 1;
    }
    (s, i)
}

fn skip_space(code: &[char], mut i: usize) -> usize {
    while i < code.len() && code[i].is_whitespace() {
        i += 1;
    }
    i
}

/// What `#[cfg(test)]` items a file declares: their text is blanked in `code`; the names (and `#[path]`s, read from
/// `original`) of test modules kept in their own files are returned.
fn blank_test_items(code: &mut [char], original: &[char]) -> Vec<String> {
    let attr: Vec<char> = "#[cfg(test)]".chars().collect();
    let mut files = Vec::new();
    let (mut i, mut previous_end) = (0, 0);
    while i + attr.len() <= code.len() {
        if code[i..i + attr.len()] != attr[..] {
            i += 1;
            continue;
        }
        // A `#[path = "…"]` among the item's attributes names the file.
        let window_start =
            code[..i].iter().rposition(|c| *c == ';' || *c == '}').map_or(0, |p| p + 1).max(previous_end);
        let Some((end, ch)) = item_end_or_body(code, i + attr.len()) else { break };
        let item: String = code[i..end].iter().collect();
        let path_attr = {
            let around: String = original[window_start..end].iter().collect();
            around.rfind("#[path = \"").map(|p| around[p + 10..].split('"').next().unwrap_or("").to_string())
        };
        let last = if ch == '{' { matching_brace(code, end) } else { end };
        if ch == ';' {
            if let Some(m) = item.split_whitespace().skip_while(|w| *w != "mod").nth(1) {
                files.push(path_attr.unwrap_or_else(|| format!("{}.rs", m.trim_end_matches(';'))));
            }
        }
        for c in &mut code[i..=last] {
            *c = blank(*c);
        }
        i = last + 1;
        previous_end = i;
    }
    files
}

// ---------------------------------------------------------------------------------------------------------------
// Files

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let p = entry.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// The directory a file's child modules live in: `a/` for `a/mod.rs`, `lib.rs`, `main.rs`; `a/b/` for `a/b.rs`.
fn child_dir(file: &Path) -> PathBuf {
    let name = file.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let dir = file.parent().unwrap_or(Path::new(""));
    if matches!(name, "mod.rs" | "lib.rs" | "main.rs") {
        dir.to_path_buf()
    } else {
        dir.join(name.trim_end_matches(".rs"))
    }
}

/// A source file with its test items blanked; `None` for a test module's own file.
struct Source {
    path: PathBuf,
    code: Vec<char>,
}

/// Every `.rs` file under `roots`, read, test items blanked, test modules' own files left out.
fn sources(roots: &[PathBuf]) -> Vec<Source> {
    let mut files = Vec::new();
    for r in roots {
        rust_files(r, &mut files);
    }
    files.sort();
    let mut test_files = BTreeSet::new();
    let mut out = Vec::new();
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap();
        let original: Vec<char> = text.chars().collect();
        let mut code = code_only(&text);
        let dir = child_dir(&path);
        for f in blank_test_items(&mut code, &original) {
            let plain = dir.join(&f);
            // `#[path]` is relative to the file's own directory.
            test_files.insert(path.parent().unwrap().join(&f));
            test_files.insert(plain.clone());
            test_files.insert(dir.join(f.trim_end_matches(".rs")).join("mod.rs"));
        }
        out.push(Source { path, code });
    }
    // A test module's folder (`tests/mod.rs` and what it declares) is test code too.
    out.retain(|s| {
        !test_files.contains(&s.path)
            && !test_files.iter().any(|t| {
                t.file_name().is_some_and(|n| n == "mod.rs") && t.parent().is_some_and(|d| s.path.starts_with(d))
            })
    });
    out
}

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

// ---------------------------------------------------------------------------------------------------------------
// Function length

/// Each `fn` with a body in `code`: (name, line of `fn`, lines from its `{` to its `}`).
fn functions(code: &[char]) -> Vec<(String, usize, usize)> {
    let mut out = Vec::new();
    for i in 0..code.len() {
        if !word_at(code, i, "fn") {
            continue;
        }
        let (name, after) = ident_at(code, skip_space(code, i + 2));
        // `fn(u8) -> u8` is a type, not an item.
        if name.is_empty() || after == i + 2 && !code[i + 2].is_whitespace() {
            continue;
        }
        let Some((open, '{')) = item_end_or_body(code, after) else { continue };
        let close = matching_brace(code, open);
        out.push((name, line_of(code, i), line_of(code, close) - line_of(code, open) + 1));
    }
    out
}

fn long_functions() -> BTreeMap<(String, String), usize> {
    let ws = workspace();
    let mut long = BTreeMap::new();
    for s in sources(&crate_roots()) {
        let file = s.path.strip_prefix(&ws).unwrap().display().to_string();
        for (name, _, lines) in functions(&s.code) {
            if lines > MAX_FN_LINES {
                long.insert((file.clone(), name), lines);
            }
        }
    }
    long
}

#[test]
fn no_function_over_150_lines_outside_tests() {
    let long = long_functions();
    let listed: BTreeSet<(String, String)> = STILL_LONG.iter().map(|(f, n)| (f.to_string(), n.to_string())).collect();
    let new: Vec<_> = long.iter().filter(|(k, _)| !listed.contains(*k)).collect();
    assert!(new.is_empty(), "functions over {MAX_FN_LINES} lines (split them one function per section): {new:#?}");
    let short: Vec<_> = listed.iter().filter(|k| !long.contains_key(*k)).collect();
    assert!(short.is_empty(), "no longer over {MAX_FN_LINES} lines: take {short:?} off STILL_LONG");
}

// ---------------------------------------------------------------------------------------------------------------
// File length

/// The lines of a file that count: all of them, less a trailing `#[cfg(test)]` module (from its attribute's line to
/// the end of the file).
fn counted_lines(text: &str) -> usize {
    let total = text.lines().count();
    let code = code_only(text);
    let attr: Vec<char> = "#[cfg(test)]".chars().collect();
    let Some(at) = (0..code.len().saturating_sub(attr.len() - 1)).rev().find(|&i| code[i..i + attr.len()] == attr[..])
    else {
        return total;
    };
    let is_mod = {
        let rest: String = code[at + attr.len()..].iter().collect();
        let words: Vec<&str> = rest.split_whitespace().take(2).collect();
        matches!(words.as_slice(), ["mod", ..] | ["pub" | "pub(crate)" | "pub(super)", "mod"])
    };
    let Some((open, '{')) = item_end_or_body(&code, at + attr.len()) else { return total };
    let close = matching_brace(&code, open);
    if !is_mod || code[close + 1..].iter().any(|c| !c.is_whitespace()) {
        return total;
    }
    line_of(&code, at) - 1
}

/// Files over [`MAX_FILE_LINES`] counted lines, under the workspace, with their counted lines.
fn long_files() -> BTreeMap<String, usize> {
    let ws = workspace();
    let mut long = BTreeMap::new();
    for s in sources(&crate_roots()) {
        let lines = counted_lines(&std::fs::read_to_string(&s.path).unwrap());
        if lines > MAX_FILE_LINES {
            long.insert(s.path.strip_prefix(&ws).unwrap().display().to_string(), lines);
        }
    }
    long
}

#[test]
fn no_file_over_1000_lines_outside_tests() {
    let long = long_files();
    let listed: BTreeMap<String, usize> = STILL_OVER.iter().map(|(f, n)| (f.to_string(), *n)).collect();
    let new: Vec<_> = long.iter().filter(|(f, _)| !listed.contains_key(*f)).collect();
    assert!(new.is_empty(), "files over {MAX_FILE_LINES} lines (split them by job): {new:#?}");
    let grew: Vec<_> = long.iter().filter(|(f, n)| listed.get(*f).is_some_and(|l| *n > l)).collect();
    assert!(grew.is_empty(), "listed files that grew (STILL_OVER only shrinks; split them instead): {grew:#?}");
    let short: Vec<_> = listed.keys().filter(|f| !long.contains_key(*f)).collect();
    assert!(short.is_empty(), "no longer over {MAX_FILE_LINES} lines: take {short:?} off STILL_OVER");
}

// ---------------------------------------------------------------------------------------------------------------
// Import graph

/// A file's module path under `src/`: `a/b.rs` and `a/b/mod.rs` are `[a, b]`; `lib.rs` and `main.rs` are `[]`.
fn module_path(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap();
    let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    let last = parts.pop().unwrap_or_default();
    if !matches!(last.as_str(), "mod.rs" | "lib.rs" | "main.rs") {
        parts.push(last.trim_end_matches(".rs").to_string());
    }
    parts
}

/// The file that defines the module a path names, or the deepest file on the way (an item or an inline module
/// lives in its module's file).
fn file_of(src: &Path, files: &BTreeSet<PathBuf>, path: &[String]) -> PathBuf {
    for k in (1..=path.len()).rev() {
        let base: PathBuf = path[..k].iter().collect();
        for candidate in [src.join(&base).with_extension("rs"), src.join(&base).join("mod.rs")] {
            if files.contains(&candidate) {
                return candidate;
            }
        }
    }
    // An item of the crate root: `lib.rs`, or `main.rs` in a crate that is only a binary.
    let lib = src.join("lib.rs");
    if files.contains(&lib) {
        lib
    } else {
        src.join("main.rs")
    }
}

/// The paths a `use` tree names, each with the name it binds: `a::{self, b::c as d}` → `[a] a`, `[a, b, c] d`.
fn expand_use(tree: &str) -> Vec<(Vec<String>, String)> {
    fn split_top(s: &str) -> Vec<&str> {
        let (mut depth, mut start, mut out) = (0, 0, Vec::new());
        for (i, ch) in s.char_indices() {
            match ch {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    out.push(&s[start..i]);
                    start = i + 1;
                }
                _ => {}
            }
        }
        out.push(&s[start..]);
        out
    }
    fn go(prefix: &[String], tree: &str, out: &mut Vec<(Vec<String>, String)>) {
        let tree = tree.trim();
        if tree.is_empty() {
            return;
        }
        if let Some(open) = tree.find('{') {
            let head: Vec<String> =
                tree[..open].split("::").map(str::trim).filter(|s| !s.is_empty()).map(String::from).collect();
            let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
            let mut p = prefix.to_vec();
            p.extend(head);
            for part in split_top(inner) {
                go(&p, part, out);
            }
            return;
        }
        let (path, alias) = match tree.split_once(" as ") {
            Some((p, a)) => (p.trim(), Some(a.trim().to_string())),
            None => (tree, None),
        };
        let mut p = prefix.to_vec();
        p.extend(path.split("::").map(str::trim).filter(|s| !s.is_empty()).map(String::from));
        if p.last().is_some_and(|l| l == "self") {
            p.pop();
        }
        if p.last().is_some_and(|l| l == "*") {
            p.pop();
            out.push((p, String::new()));
            return;
        }
        let name = alias.unwrap_or_else(|| p.last().cloned().unwrap_or_default());
        out.push((p, name));
    }
    let mut out = Vec::new();
    go(&[], tree, &mut out);
    out
}

/// A path as written in a file at `here`, made absolute; `None` for one outside the crate.
fn absolute(here: &[String], aliases: &BTreeMap<String, Vec<String>>, path: &[String]) -> Option<Vec<String>> {
    let first = path.first()?;
    match first.as_str() {
        "crate" => Some(path[1..].to_vec()),
        "self" => Some(here.iter().chain(&path[1..]).cloned().collect()),
        "super" => {
            let ups = path.iter().take_while(|s| *s == "super").count();
            let base = here.get(..here.len().checked_sub(ups)?)?;
            Some(base.iter().chain(&path[ups..]).cloned().collect())
        }
        _ => aliases.get(first).map(|abs| abs.iter().chain(&path[1..]).cloned().collect()),
    }
}

/// The `a::b::c` paths in code: each run of identifiers joined by `::`, not preceded by `::`, an identifier or `$`.
fn code_paths(code: &[char]) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < code.len() {
        let starts = is_ident(code[i])
            && !code[i].is_ascii_digit()
            && (i == 0 || !(is_ident(code[i - 1]) || code[i - 1] == '$' || code[i - 1] == ':'));
        if !starts {
            i += 1;
            continue;
        }
        let mut path = Vec::new();
        let mut j = i;
        loop {
            let (seg, after) = ident_at(code, j);
            if seg.is_empty() {
                break;
            }
            path.push(seg);
            j = after;
            if code.get(j) == Some(&':')
                && code.get(j + 1) == Some(&':')
                && code.get(j + 2).is_some_and(|c| is_ident(*c))
            {
                j += 2;
            } else {
                break;
            }
        }
        if path.len() > 1 {
            out.push(path);
        }
        i = j.max(i + 1);
    }
    out
}

/// The `use` trees of a file (the text between `use` and `;`), and the child modules it declares by `mod x;`.
fn uses_and_mods(code: &[char]) -> (Vec<String>, Vec<String>) {
    let (mut uses, mut mods) = (Vec::new(), Vec::new());
    for i in 0..code.len() {
        if word_at(code, i, "use") {
            if let Some(end) = code[i..].iter().position(|c| *c == ';') {
                uses.push(
                    code[i + 3..i + end].iter().collect::<String>().split_whitespace().collect::<Vec<_>>().join(" "),
                );
            }
        } else if word_at(code, i, "mod") {
            let (name, after) = ident_at(code, skip_space(code, i + 3));
            if !name.is_empty() && matches!(code.get(skip_space(code, after)), Some(';') | Some('{')) {
                mods.push(name);
            }
        }
    }
    (uses, mods)
}

/// The import graph of the crate whose source root is `src`: file → the files its paths name. `crate::` paths
/// resolve inside that crate; a path into another crate of the workspace is no edge.
fn import_graph(src: &Path) -> BTreeMap<PathBuf, BTreeSet<PathBuf>> {
    let sources = sources(&[src.to_path_buf()]);
    let files: BTreeSet<PathBuf> = sources.iter().map(|s| s.path.clone()).collect();
    let mut graph = BTreeMap::new();
    for s in &sources {
        let here = module_path(src, &s.path);
        let (uses, mods) = uses_and_mods(&s.code);
        let mut aliases: BTreeMap<String, Vec<String>> =
            mods.iter().map(|m| (m.clone(), here.iter().chain([m]).cloned().collect())).collect();
        let mut named = Vec::new();
        for tree in &uses {
            // `::logs::…` is an outside crate.
            let tree = tree.trim_start_matches("pub(crate) ").trim_start_matches("pub ");
            if tree.starts_with("::") {
                continue;
            }
            for (path, name) in expand_use(tree) {
                let Some(abs) = absolute(&here, &aliases, &path) else { continue };
                if !name.is_empty() {
                    aliases.insert(name, abs.clone());
                }
                named.push(abs);
            }
        }
        for path in code_paths(&s.code) {
            if let Some(abs) = absolute(&here, &aliases, &path) {
                named.push(abs);
            }
        }
        let to: BTreeSet<PathBuf> = named.iter().map(|p| file_of(src, &files, p)).filter(|f| *f != s.path).collect();
        graph.insert(s.path.clone(), to);
    }
    graph
}

/// The source roots of the workspace's crates: `src/` and each `crates/*/src/`, each its own import graph.
fn crate_roots() -> Vec<PathBuf> {
    let ws = workspace();
    let mut roots = vec![ws.join("src")];
    let mut crates: Vec<PathBuf> = std::fs::read_dir(ws.join("crates"))
        .unwrap()
        .flatten()
        .map(|e| e.path().join("src"))
        .filter(|p| p.is_dir())
        .collect();
    crates.sort();
    roots.extend(crates);
    roots
}

/// Strongly connected components of more than one node (Tarjan's algorithm), each sorted.
fn circles(graph: &BTreeMap<PathBuf, BTreeSet<PathBuf>>) -> Vec<Vec<PathBuf>> {
    struct State<'g> {
        graph: &'g BTreeMap<PathBuf, BTreeSet<PathBuf>>,
        index: BTreeMap<&'g PathBuf, usize>,
        low: BTreeMap<&'g PathBuf, usize>,
        stack: Vec<&'g PathBuf>,
        on_stack: BTreeSet<&'g PathBuf>,
        out: Vec<Vec<PathBuf>>,
    }
    fn visit<'g>(s: &mut State<'g>, v: &'g PathBuf) {
        let n = s.index.len();
        s.index.insert(v, n);
        s.low.insert(v, n);
        s.stack.push(v);
        s.on_stack.insert(v);
        for w in s.graph.get(v).into_iter().flatten() {
            if !s.graph.contains_key(w) {
                continue;
            }
            if !s.index.contains_key(w) {
                visit(s, w);
                let lw = s.low[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(lw);
            } else if s.on_stack.contains(w) {
                let iw = s.index[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(iw);
            }
        }
        if s.low[v] == s.index[v] {
            let mut component = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                component.push(w.clone());
                if w == v {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                s.out.push(component);
            }
        }
    }
    let mut s = State {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in graph.keys() {
        if !s.index.contains_key(v) {
            visit(&mut s, v);
        }
    }
    s.out.sort();
    s.out
}

#[test]
fn no_import_circle_between_files_of_a_crate() {
    let ws = workspace();
    let found: Vec<Vec<String>> = crate_roots()
        .iter()
        .flat_map(|src| circles(&import_graph(src)))
        .map(|c| c.iter().map(|f| f.strip_prefix(&ws).unwrap().display().to_string()).collect())
        .collect();
    let listed: Vec<Vec<String>> = STILL_CIRCLES.iter().map(|c| c.iter().map(|f| f.to_string()).collect()).collect();
    let new: Vec<_> = found.iter().filter(|c| !listed.contains(c)).collect();
    assert!(
        new.is_empty(),
        "import circles between files of a crate (move what both sides use to its own file): {new:#?}"
    );
    let gone: Vec<_> = listed.iter().filter(|c| !found.contains(c)).collect();
    assert!(gone.is_empty(), "no longer a circle as listed: take {gone:?} off STILL_CIRCLES");
}

/// The room graphs of a crate: for each folder, its entries (a file `x.rs` and a folder `x/` are one room, `x`; the
/// folder's own `mod.rs`, `lib.rs` or `main.rs` is its face, no room) with an arrow from room A to room B when a file
/// in A imports a file in B.
fn room_graphs(src: &Path, graph: &BTreeMap<PathBuf, BTreeSet<PathBuf>>) -> BTreeMap<PathBuf, RoomGraph> {
    fn room(folder: &Path, file: &Path) -> Option<PathBuf> {
        let first = file.strip_prefix(folder).ok()?.components().next()?.as_os_str().to_str()?;
        if matches!(first, "mod.rs" | "lib.rs" | "main.rs") {
            return None;
        }
        Some(folder.join(first.trim_end_matches(".rs")))
    }
    let mut out: BTreeMap<PathBuf, RoomGraph> = BTreeMap::new();
    for (from, tos) in graph {
        for to in tos {
            // Every folder holding both files, from the crate's root down.
            let mut folder = src.to_path_buf();
            while let (Some(a), Some(b)) = (room(&folder, from), room(&folder, to)) {
                if a != b {
                    out.entry(folder.clone()).or_default().entry(a).or_default().insert(b);
                    break;
                }
                folder = a;
            }
        }
    }
    for rooms in out.values_mut() {
        let targets: Vec<PathBuf> = rooms.values().flatten().cloned().collect();
        for t in targets {
            rooms.entry(t).or_default();
        }
    }
    out
}

type RoomGraph = BTreeMap<PathBuf, BTreeSet<PathBuf>>;

/// Floors inside every folder: the rooms of one folder import one way only, so that each stands above what it
/// imports. Two rooms that import each other, directly or through others, mean an arrow runs back up; the cure is
/// the file rule's: what both use moves down into a room of its own. Exceptions only on [`STILL_BACK_UP`].
#[test]
fn no_arrow_runs_back_up_between_the_rooms_of_a_folder() {
    let ws = workspace();
    let mut found = Vec::new();
    for src in crate_roots() {
        for (folder, rooms) in room_graphs(&src, &import_graph(&src)) {
            for c in circles(&rooms) {
                let names: Vec<String> = c.iter().map(|r| r.strip_prefix(&ws).unwrap().display().to_string()).collect();
                found.push(format!("{}: {names:?}", folder.strip_prefix(&ws).unwrap().display()));
            }
        }
    }
    let new: Vec<&String> = found.iter().filter(|f| !STILL_BACK_UP.contains(&f.as_str())).collect();
    assert!(new.is_empty(), "rooms of one folder that import each other (an arrow back up): {new:#?}");
    let gone: Vec<&&str> = STILL_BACK_UP.iter().filter(|l| !found.iter().any(|f| f == *l)).collect();
    assert!(gone.is_empty(), "no longer rooms that import each other: take {gone:?} off STILL_BACK_UP");
}

#[test]
fn rooms_join_a_file_and_its_folder_and_leave_the_face_out() {
    let src = PathBuf::from("/w/src");
    let f = |p: &str| src.join(p);
    let graph = BTreeMap::from([
        (f("a.rs"), BTreeSet::from([f("b/x.rs")])),
        (f("a/inner.rs"), BTreeSet::from([f("a.rs")])),
        (f("b/x.rs"), BTreeSet::from([f("b/y.rs"), f("lib.rs")])),
        (f("b/y.rs"), BTreeSet::from([f("a/inner.rs")])),
        (f("lib.rs"), BTreeSet::from([f("a.rs")])),
    ]);
    let rooms = room_graphs(&src, &graph);
    // At the root: a → b and b → a (b/y.rs names a/inner.rs): one circle of two rooms, the face left out.
    assert_eq!(circles(&rooms[&src]), vec![vec![f("a"), f("b")]]);
    // Inside b: x → y only; inside a: inner → a's own file is the face, no room.
    assert_eq!(rooms[&f("b")][&f("b/x")], BTreeSet::from([f("b/y")]));
    assert!(!rooms.contains_key(&f("a")));
}

// ---------------------------------------------------------------------------------------------------------------
// The reader on tricky text

fn code(text: &str) -> String {
    code_only(text).into_iter().collect()
}

#[test]
fn the_lexer_blanks_comments_strings_and_chars_and_keeps_lifetimes() {
    assert_eq!(code("a // { b\nc"), "a       \nc");
    assert_eq!(code("a /* { /* } */ { */ b"), format!("a {} b", " ".repeat(17)));
    assert_eq!(code(r#"f("{ \" }", '{', '\'', '}')"#), r#"f("      ", ' ', '  ', ' ')"#);
    assert_eq!(code(r###"x(r#"a "} b"#, br"{")"###), r###"x(  "      " ,   " ")"###);
    assert_eq!(
        code("fn f<'a>(x: &'a str) -> &'a str { 'outer: loop {} }"),
        "fn f<'a>(x: &'a str) -> &'a str { 'outer: loop {} }"
    );
    assert_eq!(code("let c = b'{'; let u = '\\u{7b}';"), "let c = b' '; let u = '      ';");
    // A raw identifier is not a raw string; a string keeps its newlines.
    assert_eq!(code("r#type \"a\nb\""), "r#type \" \n \"");
    // Offsets stay those of the text, multi-byte characters included.
    assert_eq!(code_only("\"é{\" {").len(), "\"é{\" {".chars().count());
}

#[test]
fn the_measurer_counts_body_lines_and_skips_types_and_declarations() {
    let text = "fn short() -> [u8; 2] { [b'}', 1] }\n\
                trait T { fn declared(&self); }\n\
                fn long(f: fn(u8) -> u8) -> impl Fn() {\n    let s = \"}\";\n    // }\n    move || {}\n}\n";
    let found = functions(&code_only(text));
    assert_eq!(
        found,
        vec![("short".to_string(), 1, 1), ("long".to_string(), 3, 5)],
        "declared has no body; fn(u8) is a type"
    );
}

#[test]
fn test_items_are_blanked_and_test_files_named() {
    let text = "fn a() {}\n#[cfg(test)]\nmod tests {\n    fn b() { let _ = \"}\"; }\n}\n#[cfg(test)]\n#[path = \"x_tests.rs\"]\nmod t;\n#[cfg(test)]\nmod more;\nfn c() {}\n";
    let original: Vec<char> = text.chars().collect();
    let mut c = code_only(text);
    let files = blank_test_items(&mut c, &original);
    assert_eq!(files, vec!["x_tests.rs".to_string(), "more.rs".to_string()]);
    let names: Vec<String> = functions(&c).into_iter().map(|f| f.0).collect();
    assert_eq!(names, vec!["a", "c"]);
}

#[test]
fn use_trees_expand_to_paths_with_the_names_they_bind() {
    let got = expand_use("crate::gate::{self, logs::{processor as p, LogEvidence}, *}");
    let want: Vec<(Vec<String>, String)> = vec![
        (vec!["crate".into(), "gate".into()], "gate".into()),
        (vec!["crate".into(), "gate".into(), "logs".into(), "processor".into()], "p".into()),
        (vec!["crate".into(), "gate".into(), "logs".into(), "LogEvidence".into()], "LogEvidence".into()),
        (vec!["crate".into(), "gate".into()], String::new()),
    ];
    assert_eq!(got, want);
    let here: Vec<String> = vec!["gate".into(), "filter".into()];
    let aliases = BTreeMap::new();
    let sup = absolute(&here, &aliases, &["super".into(), "logs".into(), "x".into()]);
    assert_eq!(sup, Some(vec!["gate".to_string(), "logs".into(), "x".into()]));
    assert_eq!(absolute(&here, &aliases, &["std".into(), "fs".into()]), None);
}

#[test]
fn code_paths_are_runs_of_identifiers() {
    let c = code_only("let x = crate::a::b(y::z::<u8>(), ::ext::q, $crate::m::n); // crate::c::d");
    assert_eq!(
        code_paths(&c),
        vec![vec!["crate".to_string(), "a".into(), "b".into()], vec!["y".to_string(), "z".into()]]
    );
}

#[test]
fn a_crate_graph_follows_crate_and_super_paths_and_leaves_out_tests_and_text() {
    let dir = std::env::temp_dir().join(format!("code-shape-graph-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("hooks")).unwrap();
    let write = |p: &str, text: &str| std::fs::write(dir.join(p), text).unwrap();
    write("lib.rs", "mod a; mod b; mod hooks;");
    write("a.rs", "use crate::hooks::{cuda::launch, other};\n// crate::b::x in a comment is no edge\n");
    write("b.rs", "fn f() { let s = \"crate::a::y\"; }\n#[cfg(test)]\nmod tests { use crate::a; }\n");
    write("hooks/mod.rs", "pub mod cuda;");
    write("hooks/cuda.rs", "pub fn launch() { super::super::b::g(); }");
    let files = |names: &[&str]| names.iter().map(|n| dir.join(n)).collect::<BTreeSet<PathBuf>>();
    let graph = import_graph(&dir);
    assert_eq!(graph[&dir.join("a.rs")], files(&["hooks/cuda.rs", "hooks/mod.rs"]));
    assert_eq!(graph[&dir.join("hooks/cuda.rs")], files(&["b.rs"]));
    assert!(graph[&dir.join("b.rs")].is_empty(), "a string and a test module are no edges");
    assert!(circles(&graph).is_empty(), "{:?}", circles(&graph));
    // An item of the crate root resolves to lib.rs.
    write("b.rs", "use crate::{x, a::y};");
    let graph = import_graph(&dir);
    assert_eq!(graph[&dir.join("b.rs")], files(&["a.rs", "lib.rs"]));
    let found: Vec<BTreeSet<PathBuf>> = circles(&graph).into_iter().map(|c| c.into_iter().collect()).collect();
    assert_eq!(found, vec![files(&["a.rs", "b.rs", "hooks/cuda.rs"])]);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_trailing_test_module_does_not_count_toward_a_files_length() {
    let body = "fn a() {}\n// #[cfg(test)] in a comment\nfn b() { let _ = \"#[cfg(test)]\"; }\n";
    assert_eq!(counted_lines(body), 3);
    let tests = "#[cfg(test)]\nmod tests {\n    #[test]\n    fn t() { let _ = \"}\"; }\n}\n";
    assert_eq!(counted_lines(&format!("{body}\n{tests}")), 4);
    assert_eq!(counted_lines(&format!("{body}{tests}")), 3);
    // A test module with code after it, or an out-of-line one, leaves the count alone.
    assert_eq!(counted_lines(&format!("{body}{tests}fn c() {{}}\n")), 9);
    assert_eq!(counted_lines(&format!("{body}#[cfg(test)]\nmod tests;\n")), 5);
    // A test-only helper that is not a module counts.
    assert_eq!(counted_lines(&format!("{body}#[cfg(test)]\nfn helper() {{}}\n")), 5);
}

#[test]
fn circles_are_components_of_more_than_one_file() {
    let g: BTreeMap<PathBuf, BTreeSet<PathBuf>> =
        [("a", vec!["b"]), ("b", vec!["c"]), ("c", vec!["a", "d"]), ("d", vec![]), ("e", vec!["e"])]
            .into_iter()
            .map(|(k, v)| (PathBuf::from(k), v.into_iter().map(PathBuf::from).collect()))
            .collect();
    assert_eq!(circles(&g), vec![vec![PathBuf::from("a"), PathBuf::from("b"), PathBuf::from("c")]]);
}
