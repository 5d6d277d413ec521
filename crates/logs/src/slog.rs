//! Go `log/slog` text lines: `time=… level=INFO source=server.go:596 msg="…" key=value key="quoted"`.
//!
//! The reader borrows: values come back as the raw bytes between the quotes (escapes untouched), and
//! [`unquote`] decodes one when a consumer needs the text. Quoting follows Go's `strconv.Quote`, which
//! slog uses for keys and values that need it (`"model layers"=37`, `error="Post \"http://…\": EOF"`).

use std::borrow::Cow;

/// One `key=value` pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pair<'a> {
    pub key: &'a [u8],
    /// Raw value: for a quoted value, the bytes between the quotes with escapes as written.
    pub value: &'a [u8],
    pub quoted: bool,
}

/// Iterator over the pairs of a slog line.
#[derive(Clone, Debug)]
pub struct Pairs<'a> {
    rest: &'a [u8],
}

pub fn pairs(line: &[u8]) -> Pairs<'_> {
    Pairs { rest: line }
}

/// The end of a quoted string starting after its opening quote: index of the closing quote. Quoted values run long
/// (error texts, command lines): `memchr2` jumps to the next quote or backslash instead of stepping byte by byte.
fn closing_quote(s: &[u8]) -> Option<usize> {
    let mut i = 0;
    while let Some(at) = s.get(i..).and_then(|rest| memchr::memchr2(b'\\', b'"', rest)) {
        let at = i + at;
        if s[at] == b'"' {
            return Some(at);
        }
        // A backslash escapes the byte after it.
        i = at + 2;
    }
    None
}

/// Where a bare key ends: its `=`, or a space. Keys are a few bytes (`time`, `level`, `msg`): a byte loop over them
/// costs less than `memchr2`'s set-up, which only a longer run (a bare word of text) is left to.
fn key_end(s: &[u8]) -> usize {
    const SHORT: usize = 16;
    match s[..s.len().min(SHORT)].iter().position(|&b| b == b'=' || b == b' ') {
        Some(i) => i,
        None if s.len() > SHORT => memchr::memchr2(b'=', b' ', &s[SHORT..]).map_or(s.len(), |i| i + SHORT),
        None => s.len(),
    }
}

impl<'a> Iterator for Pairs<'a> {
    type Item = Pair<'a>;

    fn next(&mut self) -> Option<Pair<'a>> {
        loop {
            let start = self.rest.iter().position(|&b| b != b' ')?;
            let s = &self.rest[start..];
            // Key.
            let (key, after_key) = if let Some(inner) = s.strip_prefix(b"\"") {
                let end = closing_quote(inner)?;
                (&inner[..end], &inner[end + 1..])
            } else {
                let end = key_end(s);
                (&s[..end], &s[end..])
            };
            let Some(value_start) = after_key.strip_prefix(b"=") else {
                // A bare word (not slog's form): skip it.
                self.rest = after_key;
                if key.is_empty() {
                    // Unbalanced quote or stray bytes: nothing more can be read reliably.
                    self.rest = &[];
                    return None;
                }
                continue;
            };
            if let Some(inner) = value_start.strip_prefix(b"\"") {
                let Some(end) = closing_quote(inner) else {
                    // Unterminated (a cut line): take what there is.
                    self.rest = &[];
                    return Some(Pair { key, value: inner, quoted: true });
                };
                self.rest = &inner[end + 1..];
                return Some(Pair { key, value: &inner[..end], quoted: true });
            }
            // A bare value is a word (a time, a level, `server.go:596`): its end is within the first words.
            let end = crate::patterns::find_byte_near(b' ', value_start).unwrap_or(value_start.len());
            self.rest = &value_start[end..];
            return Some(Pair { key, value: &value_start[..end], quoted: false });
        }
    }
}

/// The fields a classifier needs from one slog line, found in one pass.
#[derive(Clone, Copy, Debug, Default)]
pub struct Record<'a> {
    pub time: Option<&'a [u8]>,
    pub level: Option<&'a [u8]>,
    pub msg: Option<&'a [u8]>,
    pub msg_quoted: bool,
    /// The line after the `msg` pair, where only `time`, `level` and `source` came before it: any other key's first
    /// occurrence is in this part.
    pub after_msg: Option<&'a [u8]>,
}

/// Read `time`, `level` and `msg` (they come first in slog's output, so the scan stops at `msg`).
pub fn record(line: &[u8]) -> Record<'_> {
    let mut r = Record::default();
    let mut only_header = true;
    let mut it = pairs(line);
    while let Some(p) = it.next() {
        match p.key {
            b"time" => r.time = Some(p.value),
            b"level" => r.level = Some(p.value),
            b"source" => {}
            b"msg" => {
                r.msg = Some(p.value);
                r.msg_quoted = p.quoted;
                r.after_msg = only_header.then_some(it.rest);
                break;
            }
            _ => only_header = false,
        }
    }
    r
}

impl<'a> Record<'a> {
    /// [`get`] on the record's `line`: a key other than the header's is looked for after `msg` only, where the pairs
    /// before it were the header's (each `get` would otherwise read the time, level, source and message again).
    pub fn get(&self, line: &'a [u8], key: &[u8]) -> Option<&'a [u8]> {
        match self.after_msg {
            Some(rest) if !matches!(key, b"time" | b"level" | b"source" | b"msg") => get(rest, key),
            _ => get(line, key),
        }
    }
}

/// The value of `key` (first occurrence), raw.
pub fn get<'a>(line: &'a [u8], key: &[u8]) -> Option<&'a [u8]> {
    pairs(line).find(|p| p.key == key).map(|p| p.value)
}

/// Decode Go's quoting escapes in a raw quoted value (`\"`, `\\`, `\n`, `\t`, `\xNN`, `\uNNNN`).
pub fn unquote(raw: &[u8]) -> Cow<'_, str> {
    if !raw.contains(&b'\\') {
        return String::from_utf8_lossy(raw);
    }
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        let b = raw[i];
        if b != b'\\' || i + 1 >= raw.len() {
            out.push(b);
            i += 1;
            continue;
        }
        let e = raw[i + 1];
        i += 2;
        match e {
            b'n' => out.push(b'\n'),
            b't' => out.push(b'\t'),
            b'r' => out.push(b'\r'),
            b'x' | b'u' | b'U' => {
                let n = match e {
                    b'x' => 2,
                    b'u' => 4,
                    _ => 8,
                };
                let hex = raw.get(i..i + n).and_then(|h| std::str::from_utf8(h).ok());
                match hex.and_then(|h| u32::from_str_radix(h, 16).ok()) {
                    Some(v) if e == b'x' => {
                        out.push(v as u8);
                        i += n;
                    }
                    Some(v) => {
                        let c = char::from_u32(v).unwrap_or(char::REPLACEMENT_CHARACTER);
                        let mut buf = [0u8; 4];
                        out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                        i += n;
                    }
                    None => {
                        out.push(b'\\');
                        out.push(e);
                    }
                }
            }
            other => out.push(other),
        }
    }
    Cow::Owned(String::from_utf8_lossy(&out).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_of_a_real_line() {
        // ollama/ollama issue 14983.
        let line = br#"time=2026-03-20T16:36:39.720-04:00 level=ERROR source=server.go:1610 msg="post predict" error="Post \"http://127.0.0.1:49576/completion\": EOF""#;
        let got: Vec<_> = pairs(line).map(|p| (p.key, p.value, p.quoted)).collect();
        assert_eq!(got[0], (&b"time"[..], &b"2026-03-20T16:36:39.720-04:00"[..], false));
        assert_eq!(got[3], (&b"msg"[..], &b"post predict"[..], true));
        assert_eq!(got[4].0, b"error");
        assert_eq!(unquote(got[4].1), "Post \"http://127.0.0.1:49576/completion\": EOF");
        let r = record(line);
        assert_eq!((r.level, r.msg), (Some(&b"ERROR"[..]), Some(&b"post predict"[..])));
    }

    #[test]
    fn quoted_keys_and_bare_words() {
        // ollama/ollama issue 15930 (`"model layers"=37`).
        let line = br#"msg="loading model" "model layers"=37 requested=-1 stray"#;
        let got: Vec<_> = pairs(line).map(|p| (p.key.to_vec(), p.value.to_vec())).collect();
        assert_eq!(got[1], (b"model layers".to_vec(), b"37".to_vec()));
        assert_eq!(got[2], (b"requested".to_vec(), b"-1".to_vec()));
        assert_eq!(got.len(), 3);
    }

    #[test]
    fn a_record_finds_the_same_values_as_the_whole_line() {
        let lines: [&[u8]; 6] = [
            br#"time=2026-03-20T16:36:39.720-04:00 level=ERROR source=server.go:1610 msg="post predict" error="x" msg=y"#,
            br#"time=t level=INFO error=early msg="m" error=late id=3"#,
            br#"level=INFO time=t msg=m library=cuda time=again source=s level=WARN"#,
            br#"time=t stray level=INFO msg="unterminated"#,
            br#"time=t msg="a " b" error="e" "quoted key"=1 error=second"#,
            br#"time=t level=INFO source=x error=e"#,
        ];
        for line in lines {
            let r = record(line);
            for key in [&b"time"[..], b"level", b"source", b"msg", b"error", b"id", b"library", b"quoted key", b"none"]
            {
                assert_eq!(r.get(line, key), get(line, key), "{} {}", lossy(line), lossy(key));
            }
        }
    }

    fn lossy(b: &[u8]) -> Cow<'_, str> {
        String::from_utf8_lossy(b)
    }

    #[test]
    fn cut_and_broken_lines_end_the_iteration() {
        assert_eq!(pairs(br#"msg="unterminated"#).count(), 1);
        assert_eq!(pairs(br#""key"#).count(), 0);
        assert_eq!(unquote(br"a\x41\u00e9\q"), "aAéq");
    }
}
