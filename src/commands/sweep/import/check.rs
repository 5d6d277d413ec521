//! Reading and checking llama-bench output before an import creates anything: every input read once with a byte
//! limit, every test object found (`-o json` arrays and `-o jsonl` lines alike) and checked, each problem named
//! with its file, line and field.

use std::io::Read;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde_json::{Map, Value};

use crate::host::inputs;

/// Most bytes one import reads, all its files together. llama-bench prints about 1 KB per test (its samples
/// included), so this is far more than any real run of it — 60,000 tests of a full sweep — and what the parsed
/// tests cost stays a few hundred MB at most.
pub const MAX_IMPORT_BYTES: u64 = 64 << 20;
/// Most tests one import stores. A llama-bench invocation runs one test per combination of its parameter lists;
/// 100,000 is more than a week of them, and keeps an import within seconds.
pub const MAX_TESTS: usize = 100_000;
/// Most tokens one test may claim for `n_prompt`, `n_gen` or `n_depth`: 2^24 (16.7 million), beyond every
/// context window llama.cpp can allocate on today's hardware. More is a corrupt or hand-made file.
pub const MAX_TOKENS: u64 = 1 << 24;
/// Most tokens per second a test may claim: far beyond any hardware; more is a corrupt file.
pub const MAX_TOKENS_PER_S: f64 = 1e9;
/// Problems listed before an import gives up listing them.
const MAX_PROBLEMS: usize = 10;

/// Fields every llama-bench test has; without them the input is not llama-bench output.
const REQUIRED: [&str; 4] = ["n_prompt", "n_gen", "avg_ns", "avg_ts"];

/// One input as read: how it was named, and its bytes.
#[derive(Debug)]
pub struct Input {
    pub path: PathBuf,
    pub bytes: Vec<u8>,
}

impl Input {
    pub(super) fn name(&self) -> String {
        if self.path == Path::new("-") {
            "standard input".into()
        } else {
            self.path.display().to_string()
        }
    }
}

/// Where a test is in its input (both 1-based).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct At {
    pub(super) test: usize,
    pub(super) line: usize,
}

/// Read every input once: `-` is standard input, an anonymous pipe (`<(…)`) is read as it comes, a named FIFO,
/// a device or a directory is refused without blocking; all of them together at most [`MAX_IMPORT_BYTES`].
pub fn read_inputs(files: &[PathBuf]) -> Result<Vec<Input>> {
    let mut left = MAX_IMPORT_BYTES;
    let mut out = Vec::new();
    for path in files {
        let stream = inputs::open_stream(path)?;
        let too_large = |path: &Path| {
            anyhow::anyhow!(
                "{}: more than the {} MiB one import reads{}; split the llama-bench output into several imports",
                path.display(),
                MAX_IMPORT_BYTES >> 20,
                if files.len() > 1 { " (all its files together)" } else { "" }
            )
        };
        // A regular file says its size: one too large is refused before a byte of it is read.
        if std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.len() > left) {
            return Err(too_large(path));
        }
        let mut bytes = Vec::new();
        stream
            .take(left.saturating_add(1))
            .read_to_end(&mut bytes)
            .with_context(|| format!("cannot read {}", path.display()))?;
        if bytes.len() as u64 > left {
            return Err(too_large(path));
        }
        left -= bytes.len() as u64;
        out.push(Input { path: path.clone(), bytes });
    }
    Ok(out)
}

/// Calls `f` with each test object's text in `bytes` (llama-bench `-o json` or `-o jsonl`) and where it is,
/// without parsing more than one object at a time. Errors are about the shape only (an unclosed array).
pub(super) fn each_object(bytes: &[u8], mut f: impl FnMut(At, &[u8]) -> ControlFlow<()>) -> Result<()> {
    let start = bytes.iter().position(|b| !b.is_ascii_whitespace()).unwrap_or(bytes.len());
    let mut lines_before = bytes[..start].iter().filter(|&&b| b == b'\n').count();
    let mut test = 0;
    if bytes.get(start) != Some(&b'[') {
        // JSON Lines: one object per line; blank lines are skipped.
        for (i, line) in bytes.split(|&b| b == b'\n').enumerate() {
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            test += 1;
            if f(At { test, line: i + 1 }, line).is_break() {
                return Ok(());
            }
        }
        return Ok(());
    }
    // One JSON array: split at the commas between its elements (outside strings, at depth 1) and hand each
    // element on by itself, so that its line is known and only one is parsed at a time.
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    let mut element: Option<usize> = None;
    let mut counted = start;
    let mut emit = |from: usize, to: usize, test: &mut usize| {
        lines_before += bytes[counted..from].iter().filter(|&&b| b == b'\n').count();
        counted = from;
        *test += 1;
        f(At { test: *test, line: lines_before + 1 }, &bytes[from..to])
    };
    for (i, &b) in bytes.iter().enumerate().skip(start) {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        if depth == 1 && element.is_none() && !b.is_ascii_whitespace() && !matches!(b, b',' | b']') {
            element = Some(i);
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => depth += 1,
            b']' | b'}' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    if let Some(from) = element.take() {
                        if emit(from, i, &mut test).is_break() {
                            return Ok(());
                        }
                    }
                    if !bytes[i + 1..].iter().all(u8::is_ascii_whitespace) {
                        bail!("llama-bench -o json output: text after the closing `]` of the array");
                    }
                    return Ok(());
                }
            }
            b',' if depth == 1 => {
                // `[,` or `,,` is an empty element, which the parser refuses with its line.
                let from = element.take().unwrap_or(i);
                if emit(from, i, &mut test).is_break() {
                    return Ok(());
                }
            }
            _ => {}
        }
    }
    bail!("llama-bench -o json output: the JSON array is not closed (cut short?)")
}

/// A token such as `nan` or `-inf` where a number belongs: llama-bench prints non-finite values that way (C++'s
/// `std::to_string`), which is not JSON. The field and the token, for the message.
pub(super) fn non_finite_field(text: &[u8]) -> Option<(String, String)> {
    let text = String::from_utf8_lossy(text);
    for (colon, _) in text.match_indices(':') {
        let value = text[colon + 1..].trim_start();
        let token: String =
            value.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '+' || *c == '.').collect();
        let bare = token.trim_start_matches(['-', '+']).to_ascii_lowercase();
        if !matches!(bare.as_str(), "nan" | "inf" | "infinity") {
            continue;
        }
        // The key: the quoted string just before the colon.
        let before = text[..colon].trim_end();
        let key = before.strip_suffix('"').and_then(|k| k.rfind('"').map(|q| k[q + 1..].to_string()));
        return Some((key.unwrap_or_else(|| "?".into()), token));
    }
    None
}

/// One test object parsed from its text, or why it is not one.
pub(super) fn parse_object(text: &[u8]) -> Result<Map<String, Value>, String> {
    match serde_json::from_slice::<Value>(text) {
        Ok(Value::Object(o)) => Ok(o),
        Ok(_) => Err("expected a JSON object (one llama-bench test)".into()),
        Err(e) => Err(match non_finite_field(text) {
            Some((field, token)) => format!("`{field}` is `{token}`, which is no number (expected a finite value)"),
            None => format!("not JSON ({e}); is this llama-bench -o json/jsonl output?"),
        }),
    }
}

/// What is wrong with one test's values, each problem naming its field. Empty when the test can be stored.
pub(super) fn problems(o: &Map<String, Value>) -> Vec<String> {
    let mut out = Vec::new();
    for required in REQUIRED {
        if !o.contains_key(required) {
            out.push(format!("no `{required}` field; is this llama-bench -o json/jsonl output?"));
        }
    }
    for field in ["n_prompt", "n_gen", "n_depth"] {
        match o.get(field) {
            None => {}
            Some(v) if v.as_u64().is_some_and(|n| n <= MAX_TOKENS) => {}
            Some(v) => out.push(format!("`{field}` is {v}, expected a whole number of tokens from 0 to {MAX_TOKENS}")),
        }
    }
    if let Some(v) = o.get("n_gpu_layers").filter(|v| v.as_i64().is_none_or(|n| n < -1)) {
        out.push(format!("`n_gpu_layers` is {v}, expected a whole number of layers (or -1)"));
    }
    let number = |field: &str, max: f64, what: &str, out: &mut Vec<String>| match o.get(field) {
        None => {}
        Some(v) if v.as_f64().is_some_and(|x| x.is_finite() && (0.0..=max).contains(&x)) => {}
        Some(v) => out.push(format!("`{field}` is {v}, expected {what}")),
    };
    let tps = format!("tokens per second from 0 to {MAX_TOKENS_PER_S:e}");
    let ns = "a duration in nanoseconds, 0 or more";
    number("avg_ts", MAX_TOKENS_PER_S, &tps, &mut out);
    number("stddev_ts", MAX_TOKENS_PER_S, &tps, &mut out);
    number("avg_ns", f64::MAX, ns, &mut out);
    number("stddev_ns", f64::MAX, ns, &mut out);
    for (field, max, what) in [("samples_ts", MAX_TOKENS_PER_S, tps.as_str()), ("samples_ns", f64::MAX, ns)] {
        match o.get(field) {
            None => {}
            Some(Value::Array(samples)) => {
                if let Some((i, v)) = samples
                    .iter()
                    .enumerate()
                    .find(|(_, v)| !v.as_f64().is_some_and(|x| x.is_finite() && (0.0..=max).contains(&x)))
                {
                    out.push(format!("`{field}[{i}]` is {v}, expected {what}"));
                }
            }
            Some(v) => out.push(format!("`{field}` is {}, expected an array of samples", short(v))),
        }
    }
    out
}

/// A value for a message: at most 80 characters of its JSON.
pub(super) fn short(v: &Value) -> String {
    let s = v.to_string();
    match s.char_indices().nth(80) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s,
    }
}

/// Check every test of the inputs, as [`super::import`] does before it creates anything: the number of tests, or every
/// problem (up to [`MAX_PROBLEMS`]) with its file, line and field.
pub fn check(inputs: &[Input]) -> Result<usize> {
    let mut total = 0usize;
    let mut found: Vec<String> = Vec::new();
    let mut more = 0usize;
    for input in inputs {
        let name = input.name();
        let mut in_file = 0usize;
        let mut over_cap = None;
        each_object(&input.bytes, |at, text| {
            in_file += 1;
            if total + in_file > MAX_TESTS {
                over_cap = Some(at);
                return ControlFlow::Break(());
            }
            let issues = match parse_object(text) {
                Ok(o) => problems(&o),
                Err(e) => vec![e],
            };
            for issue in issues {
                if found.len() < MAX_PROBLEMS {
                    found.push(format!("{name}, line {} (test {}): {issue}", at.line, at.test));
                } else {
                    more += 1;
                }
            }
            ControlFlow::Continue(())
        })
        .with_context(|| name.clone())?;
        if let Some(at) = over_cap {
            bail!(
                "{name}: more than {MAX_TESTS} llama-bench tests in one import (test {} at line {} is one too many); \
                 split the output and import the parts separately",
                total + in_file,
                at.line
            );
        }
        if in_file == 0 {
            found.push(format!("{name}: no llama-bench tests in the input"));
        }
        total += in_file;
    }
    if !found.is_empty() {
        let mut message =
            format!("nothing imported; the input is not llama-bench output as recorded:\n  {}", found.join("\n  "));
        if more > 0 {
            message.push_str(&format!("\n  … and {more} more problems"));
        }
        bail!(message);
    }
    Ok(total)
}
