//! No file-import circle in the trace crate or in the two observers that build on it: file A names a path into
//! file B (`use crate::b::…`, `crate::b::f()`, `super::b`) and B, directly or through other files, into A. The
//! definition is the one the main crate's floor check uses for `src/` (issue 17); `#[cfg(test)] mod tests` blocks
//! are left out (a unit test may reach anywhere), and a path into a module's own file is no edge.
//!
//! The observer once had a 10-file circle: `state.rs` called every module's reset after `fork`, and every module
//! asked `state` whether it observes. Fork handlers are now registered in `trace_format::fork`'s table.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A file's module path (`["hooks", "cuda"]` for `src/hooks/cuda.rs` and for `src/hooks/cuda/mod.rs`).
type ModPath = Vec<String>;

fn module_files(src: &Path) -> BTreeMap<ModPath, PathBuf> {
    let mut out = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().map(Result::unwrap) {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().and_then(|e| e.to_str()) != Some("rs") {
                continue;
            }
            let rel = path.strip_prefix(src).unwrap();
            let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
            let file = parts.pop().unwrap();
            match file.as_str() {
                "lib.rs" | "main.rs" | "mod.rs" => {}
                other => parts.push(other.trim_end_matches(".rs").to_string()),
            }
            out.insert(parts, path);
        }
    }
    out
}

/// The source without comments, string and char literals, and `#[cfg(test)] mod … { … }` blocks.
fn code_of(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < bytes.len() {
        match (bytes[i], bytes.get(i + 1).copied()) {
            (b'/', Some(b'/')) => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    i += 1;
                }
            }
            (b'/', Some(b'*')) => {
                let end = text[i + 2..].find("*/").map_or(bytes.len(), |e| i + 2 + e + 2);
                i = end;
            }
            (b'"', _) => {
                i += 1;
                while i < bytes.len() && bytes[i] != b'"' {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
                out.push_str("\"\"");
            }
            (b'\'', _) if bytes.get(i + 2) == Some(&b'\'') || bytes.get(i + 1) == Some(&b'\\') => {
                // A char literal ('x', '\n', '\''); a lifetime has no closing quote.
                let end = text[i + 2..].find('\'').map_or(bytes.len(), |e| i + 2 + e + 1);
                i = end;
            }
            _ => {
                let c = text[i..].chars().next().unwrap();
                out.push(c);
                i += c.len_utf8();
            }
        }
    }
    strip_test_modules(&out)
}

fn strip_test_modules(code: &str) -> String {
    let mut out = code.to_string();
    while let Some(at) = out.find("#[cfg(test)]") {
        let rest = &out[at + "#[cfg(test)]".len()..];
        let trimmed = rest.trim_start();
        if !(trimmed.starts_with("mod ") || trimmed.starts_with("pub mod ") || trimmed.starts_with("pub(crate) mod ")) {
            out.replace_range(at..at + "#[cfg(test)]".len(), "");
            continue;
        }
        let open = at + out[at..].find('{').unwrap_or(out.len() - at);
        let (mut depth, mut end) = (0usize, out.len());
        for (k, c) in out[open..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = open + k + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        out.replace_range(at..end, "");
    }
    out
}

#[derive(Clone, Debug, PartialEq)]
enum Token {
    Ident(String),
    Sep,
    Open,
    Close,
    Comma,
    Other,
}

fn tokens(code: &str) -> Vec<Token> {
    let chars: Vec<char> = code.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_alphanumeric() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            out.push(Token::Ident(chars[start..i].iter().collect()));
            continue;
        }
        out.push(match c {
            ':' if chars.get(i + 1) == Some(&':') => {
                i += 1;
                Token::Sep
            }
            '{' => Token::Open,
            '}' => Token::Close,
            ',' => Token::Comma,
            c if c.is_whitespace() => {
                i += 1;
                continue;
            }
            _ => Token::Other,
        });
        i += 1;
    }
    out
}

/// The paths of a use-tree starting at `t[*i]` (after a `::`), each appended to `prefix`.
fn use_tree(t: &[Token], i: &mut usize, prefix: &ModPath, out: &mut Vec<ModPath>) {
    let mut path = prefix.clone();
    loop {
        match t.get(*i) {
            Some(Token::Ident(name)) => {
                path.push(name.clone());
                *i += 1;
                if t.get(*i) == Some(&Token::Sep) {
                    *i += 1;
                    continue;
                }
                out.push(path);
                return;
            }
            Some(Token::Open) => {
                *i += 1;
                loop {
                    match t.get(*i) {
                        Some(Token::Close) => {
                            *i += 1;
                            break;
                        }
                        Some(Token::Comma) => *i += 1,
                        None => return,
                        _ => {
                            let before = *i;
                            use_tree(t, i, &path, out);
                            if *i == before {
                                *i += 1;
                            }
                        }
                    }
                }
                return;
            }
            _ => {
                out.push(path);
                return;
            }
        }
    }
}

/// The module paths file `me` names through `crate::` and `super::`.
fn named_paths(me: &ModPath, is_mod_file: bool, code: &str) -> Vec<ModPath> {
    let t = tokens(code);
    let mut out = Vec::new();
    let mut i = 0;
    while i < t.len() {
        let start = match &t[i] {
            Token::Ident(s) if s == "crate" && t.get(i + 1) == Some(&Token::Sep) => Some(Vec::new()),
            Token::Ident(s) if s == "super" && t.get(i + 1) == Some(&Token::Sep) => {
                // `super` of a file module: its parent; of a `mod.rs`/`lib.rs`: the parent of its directory.
                let mut base = me.clone();
                if !(is_mod_file && base.is_empty()) {
                    base.pop();
                }
                Some(base)
            }
            _ => None,
        };
        match start {
            Some(mut prefix) => {
                i += 2;
                while let (Some(Token::Ident(s)), Some(Token::Sep)) = (t.get(i), t.get(i + 1)) {
                    if s != "super" {
                        break;
                    }
                    prefix.pop();
                    i += 2;
                }
                use_tree(&t, &mut i, &prefix, &mut out);
            }
            None => i += 1,
        }
    }
    out
}

/// File-to-file edges of the crate at `src`.
fn edges(src: &Path) -> BTreeMap<ModPath, BTreeSet<ModPath>> {
    let files = module_files(src);
    let mut graph: BTreeMap<ModPath, BTreeSet<ModPath>> = BTreeMap::new();
    for (module, path) in &files {
        let name = path.file_name().unwrap().to_string_lossy();
        let is_mod_file = matches!(name.as_ref(), "mod.rs" | "lib.rs" | "main.rs");
        let code = code_of(&std::fs::read_to_string(path).unwrap());
        let targets = graph.entry(module.clone()).or_default();
        for named in named_paths(module, is_mod_file, &code) {
            // The longest prefix of the path that is a file of the crate.
            let target = (1..=named.len()).rev().map(|n| named[..n].to_vec()).find(|p| files.contains_key(p));
            if let Some(target) = target.filter(|t| t != module) {
                targets.insert(target);
            }
        }
    }
    graph
}

/// Strongly connected components of more than one file (Tarjan).
fn circles(graph: &BTreeMap<ModPath, BTreeSet<ModPath>>) -> Vec<Vec<ModPath>> {
    struct Walk<'a> {
        graph: &'a BTreeMap<ModPath, BTreeSet<ModPath>>,
        index: BTreeMap<&'a ModPath, usize>,
        low: BTreeMap<&'a ModPath, usize>,
        stack: Vec<&'a ModPath>,
        on_stack: BTreeSet<&'a ModPath>,
        found: Vec<Vec<ModPath>>,
    }
    impl<'a> Walk<'a> {
        fn visit(&mut self, v: &'a ModPath) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            self.on_stack.insert(v);
            for w in self.graph.get(v).into_iter().flatten() {
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let low = self.low[v].min(self.low[w]);
                    self.low.insert(v, low);
                } else if self.on_stack.contains(w) {
                    let low = self.low[v].min(self.index[w]);
                    self.low.insert(v, low);
                }
            }
            if self.low[v] == self.index[v] {
                let mut component = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    component.push(w.clone());
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort();
                    self.found.push(component);
                }
            }
        }
    }
    let mut walk = Walk {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for v in graph.keys() {
        if !walk.index.contains_key(v) {
            walk.visit(v);
        }
    }
    walk.found
}

fn crate_src(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(name).join("src")
}

fn show(circles: &[Vec<ModPath>]) -> String {
    circles
        .iter()
        .map(|c| c.iter().map(|m| if m.is_empty() { "lib".to_string() } else { m.join("/") }).collect::<Vec<_>>())
        .map(|c| format!("[{}]", c.join(", ")))
        .collect::<Vec<_>>()
        .join("; ")
}

#[test]
fn the_checker_finds_a_circle_through_crate_and_super_paths_and_ignores_tests() {
    let dir = std::env::temp_dir().join(format!("import-circles-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("hooks")).unwrap();
    let write = |p: &str, text: &str| std::fs::write(dir.join(p), text).unwrap();
    write("lib.rs", "mod a; mod b; mod hooks;");
    write("a.rs", "use crate::hooks::{cuda::launch, other};\n// crate::b::x in a comment is no edge\n");
    write("b.rs", "fn f() { let s = \"crate::a::y\"; }\n#[cfg(test)]\nmod tests { use crate::a; }\n");
    write("hooks/mod.rs", "pub mod cuda;");
    write("hooks/cuda.rs", "pub fn launch() { super::super::b::g(); }");
    let graph = edges(&dir);
    let hooks = |m: &[&str]| m.iter().map(|s| s.to_string()).collect::<ModPath>();
    assert_eq!(graph[&hooks(&["a"])], BTreeSet::from([hooks(&["hooks"]), hooks(&["hooks", "cuda"])]));
    assert!(circles(&graph).is_empty(), "{}", show(&circles(&graph)));
    write("b.rs", "use crate::{x, a::y};");
    let found = circles(&edges(&dir));
    assert_eq!(show(&found), "[a, b, hooks/cuda]");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn no_file_import_circle_in_the_trace_crate_and_the_observers() {
    let mut report = Vec::new();
    for name in ["trace", "observer", "vklayer"] {
        let found = circles(&edges(&crate_src(name)));
        if !found.is_empty() {
            report.push(format!("crates/{name}: {}", show(&found)));
        }
    }
    assert!(report.is_empty(), "file-import circles:\n{}", report.join("\n"));
}
