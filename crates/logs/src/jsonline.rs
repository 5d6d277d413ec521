//! Log lines written as one JSON object each, read back into the text the classifier knows.
//!
//! Two producers are common in pasted logs:
//! - llama-server's JSON log format (`--log-format json`, the default of 2024 builds and of Ollama's embedded server
//!   then): `{"tid":"14964","timestamp":1717067190,"level":"INFO","function":"init","line":715,"msg":"new slot",…}`
//!   (ollama/ollama v0.1.45 `llm/ext_server/utils.hpp` `server_log`);
//! - apps that wrap each line of Ollama's output in a pino record: `{"level":50,"time":…,"msg":"time=… level=ERROR …\n"}`
//!   (Msty, ollama/ollama issue 11418).
//!
//! [`decode`] writes `function: msg` (the shape of llama.cpp's own text lines, which the classifier reads by their
//! function tag) or the bare `msg` into a reused buffer. It reads one flat object: string, number and literal values,
//! nested objects and arrays skipped whole. Work is linear in the line, there is no recursion, and nothing but the
//! caller's buffer is written. A line that is not such an object is left alone (`false`).

/// Decode `line` (a whole message, outer prefixes removed) into `out`. Returns whether it was a JSON log record with
/// a message; `out` is then the text to classify.
pub fn decode(line: &[u8], out: &mut Vec<u8>) -> bool {
    let body = line.trim_ascii();
    if body.len() < 2 || body[0] != b'{' || body[body.len() - 1] != b'}' {
        return false;
    }
    let mut msg: Option<&[u8]> = None;
    let mut function: Option<&[u8]> = None;
    let mut i = 1;
    loop {
        i = skip_ws(body, i);
        match body.get(i) {
            Some(b'}') => break,
            Some(b'"') => {}
            _ => return false,
        }
        let Some((key, after_key)) = string_token(body, i) else { return false };
        i = skip_ws(body, after_key);
        if body.get(i) != Some(&b':') {
            return false;
        }
        i = skip_ws(body, i + 1);
        let value_start = i;
        let Some(after_value) = skip_value(body, i) else { return false };
        let value = &body[value_start..after_value];
        match key {
            b"msg" | b"message" if value.first() == Some(&b'"') => msg = Some(value),
            b"function" if value.first() == Some(&b'"') => function = Some(value),
            _ => {}
        }
        i = skip_ws(body, after_value);
        match body.get(i) {
            Some(b',') => i += 1,
            Some(b'}') => break,
            _ => return false,
        }
    }
    // Nothing may follow the object's closing brace.
    if i + 1 != body.len() {
        return false;
    }
    let Some(msg) = msg else { return false };
    out.clear();
    if let Some(f) = function {
        unescape(&f[1..f.len() - 1], out);
        out.extend_from_slice(b": ");
    }
    unescape(&msg[1..msg.len() - 1], out);
    // A wrapped line keeps its own newline inside the string.
    while out.last().is_some_and(|b| matches!(b, b'\n' | b'\r')) {
        out.pop();
    }
    true
}

fn skip_ws(s: &[u8], mut i: usize) -> usize {
    while s.get(i).is_some_and(|b| matches!(b, b' ' | b'\t' | b'\r' | b'\n')) {
        i += 1;
    }
    i
}

/// The string token at `i` (which is a `"`): its content, escapes undecoded, and the index after its closing quote.
fn string_token(s: &[u8], i: usize) -> Option<(&[u8], usize)> {
    let mut j = i + 1;
    loop {
        match *s.get(j)? {
            b'"' => return Some((&s[i + 1..j], j + 1)),
            b'\\' => j += 2,
            _ => j += 1,
        }
    }
}

/// The index after the JSON value that starts at `i`: a string, or anything else up to the `,` or `}` that ends it at
/// the object's level (nested objects and arrays counted, strings inside them skipped).
fn skip_value(s: &[u8], i: usize) -> Option<usize> {
    if s.get(i) == Some(&b'"') {
        return string_token(s, i).map(|(_, end)| end);
    }
    let mut depth = 0usize;
    let mut j = i;
    while let Some(&b) = s.get(j) {
        match b {
            b'"' => {
                j = string_token(s, j)?.1;
                continue;
            }
            b'{' | b'[' => depth += 1,
            b'}' | b']' if depth > 0 => depth -= 1,
            b',' | b'}' if depth == 0 => break,
            _ => {}
        }
        j += 1;
    }
    (j > i && depth == 0).then_some(j)
}

/// Append the JSON string content `s` (without its quotes) to `out` with its escapes decoded. An escape that is not
/// valid JSON is copied as written; a lone surrogate becomes U+FFFD.
fn unescape(s: &[u8], out: &mut Vec<u8>) {
    let mut i = 0;
    while i < s.len() {
        let Some(at) = memchr::memchr(b'\\', &s[i..]) else {
            out.extend_from_slice(&s[i..]);
            return;
        };
        out.extend_from_slice(&s[i..i + at]);
        i += at;
        let Some(&e) = s.get(i + 1) else {
            out.push(b'\\');
            return;
        };
        let simple = match e {
            b'"' => Some(b'"'),
            b'\\' => Some(b'\\'),
            b'/' => Some(b'/'),
            b'b' => Some(0x08),
            b'f' => Some(0x0c),
            b'n' => Some(b'\n'),
            b'r' => Some(b'\r'),
            b't' => Some(b'\t'),
            _ => None,
        };
        if let Some(c) = simple {
            out.push(c);
            i += 2;
            continue;
        }
        if e == b'u' {
            if let Some(unit) = hex4(s, i + 2) {
                let mut used = 6;
                let c = if (0xD800..0xDC00).contains(&unit) {
                    match (s.get(i + 6..i + 8), hex4(s, i + 8)) {
                        (Some(b"\\u"), Some(low)) if (0xDC00..0xE000).contains(&low) => {
                            used = 12;
                            char::from_u32(0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00))
                        }
                        _ => None,
                    }
                } else {
                    char::from_u32(unit)
                };
                let mut buf = [0u8; 4];
                out.extend_from_slice(c.unwrap_or('\u{FFFD}').encode_utf8(&mut buf).as_bytes());
                i += used;
                continue;
            }
        }
        out.push(b'\\');
        i += 1;
    }
}

fn hex4(s: &[u8], i: usize) -> Option<u32> {
    let digits = s.get(i..i + 4)?;
    digits.iter().try_fold(0u32, |v, &b| Some(v * 16 + char::from(b).to_digit(16)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(line: &str) -> Option<String> {
        let mut out = Vec::new();
        decode(line.as_bytes(), &mut out).then(|| String::from_utf8(out).unwrap())
    }

    #[test]
    fn llama_server_records_read_as_function_and_message() {
        // ggml-org/llama.cpp issue 7637 (a Windows build of 2024, JSON log format).
        let line = r#"{"tid":"14964","timestamp":1717067190,"level":"INFO","function":"main","line":3065,"msg":"chat template","chat_example":"[INST] You are a helpful assistant\nHello [/INST]Hi there</s>[INST] How are you? [/INST]","built_in":false}"#;
        assert_eq!(text(line).as_deref(), Some("main: chat template"));
    }

    #[test]
    fn a_wrapped_slog_line_loses_its_escapes_and_newline() {
        // ollama/ollama issue 11418 (Msty's pino records around Ollama's lines).
        let line = r#"{"level":50,"time":1752516972565,"pid":10104,"hostname":"Ryzen7","msg":"time=2025-07-14T19:16:12.565+01:00 level=ERROR source=server.go:449 msg=\"llama runner terminated\" error=\"exit status 0xc0000409\"\n"}"#;
        assert_eq!(
            text(line).as_deref(),
            Some(
                r#"time=2025-07-14T19:16:12.565+01:00 level=ERROR source=server.go:449 msg="llama runner terminated" error="exit status 0xc0000409""#
            )
        );
    }

    #[test]
    fn escapes_and_nested_values() {
        let line = r#"{"a":{"b":[1,{"c":"}"}]},"msg":"x\u00e9\ud83d\ude00\t\"y\"\\","z":null}"#;
        assert_eq!(text(line).as_deref(), Some("x\u{e9}\u{1F600}\t\"y\"\\"));
        // A lone surrogate, an unknown escape, a cut \u.
        assert_eq!(text(r#"{"msg":"\ud800 \q \u12"}"#).as_deref(), Some("\u{FFFD} \\q \\u12"));
    }

    #[test]
    fn what_is_not_a_record_is_left_alone() {
        for line in [
            "{",
            "{}",
            r#"{"level":"INFO"}"#,
            r#"{"msg":1}"#,
            r#"{"msg":"x"} trailing"#,
            r#"{"msg":"unterminated}"#,
            r#"{"msg" "x"}"#,
            "{not json}",
            "[1,2]",
            "ggml_vulkan: 0 = {x}",
        ] {
            assert_eq!(text(line), None, "{line}");
        }
    }
}
