//! The one JSON shape the layer reads: a flat object whose values are strings, unsigned integers, booleans, or
//! arrays of strings or of unsigned integers (a device profile, see `profile`). A hand parser, because the layer
//! links no JSON library (it runs inside other programs, and `backscope-trace` keeps it free of allocator-hungry
//! dependencies); anything outside that shape is an error naming the byte offset and what was expected.

use std::collections::BTreeMap;

/// Largest profile file read, most keys and most items of one array: defined where backscope's check reads them too.
pub use format::profile_form::{MAX_BYTES, MAX_ITEMS};

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    Str(String),
    Num(u64),
    Bool(bool),
    Strs(Vec<String>),
    Nums(Vec<u64>),
}

#[derive(Debug, PartialEq, Eq)]
pub struct Error {
    pub offset: usize,
    pub expected: &'static str,
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "at byte {}: expected {}", self.offset, self.expected)
    }
}

struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Cursor<'_> {
    fn fail<T>(&self, expected: &'static str) -> Result<T, Error> {
        Err(Error { offset: self.at, expected })
    }

    fn skip_space(&mut self) {
        // JSON's four (RFC 8259 `ws`); not the form feed `is_ascii_whitespace` also takes.
        while self.bytes.get(self.at).is_some_and(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\r')) {
            self.at += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.skip_space();
        self.bytes.get(self.at).copied()
    }

    fn eat(&mut self, byte: u8, expected: &'static str) -> Result<(), Error> {
        if self.peek() != Some(byte) {
            return self.fail(expected);
        }
        self.at += 1;
        Ok(())
    }

    fn string(&mut self) -> Result<String, Error> {
        self.eat(b'"', "a string")?;
        let mut out = Vec::new();
        loop {
            let Some(&b) = self.bytes.get(self.at) else { return self.fail("the end of a string") };
            self.at += 1;
            match b {
                b'"' => break,
                b'\\' => {
                    let Some(&e) = self.bytes.get(self.at) else { return self.fail("an escape") };
                    self.at += 1;
                    match e {
                        b'"' | b'\\' | b'/' => out.push(e),
                        b'b' => out.push(0x08),
                        b'f' => out.push(0x0c),
                        b'n' => out.push(b'\n'),
                        b't' => out.push(b'\t'),
                        b'r' => out.push(b'\r'),
                        b'u' => {
                            let Some(c) = self.unicode_escape() else {
                                return self
                                    .fail("four hex digits of a \\u escape, a surrogate only as half of a pair");
                            };
                            out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes());
                        }
                        _ => return self.fail("one of the escapes \\\" \\\\ \\/ \\b \\f \\n \\t \\r \\u"),
                    }
                }
                0..=0x1f => return self.fail("no control character inside a string"),
                _ => out.push(b),
            }
        }
        String::from_utf8(out).or_else(|_| self.fail("UTF-8 text"))
    }

    /// Four hex digits after `\u`, and a second escape after them when they are a high surrogate (JSON writes a
    /// character outside the Basic Multilingual Plane as a UTF-16 pair).
    fn unicode_escape(&mut self) -> Option<char> {
        let unit = |at: usize| -> Option<u32> {
            let hex = self.bytes.get(at..at + 4)?;
            // Digits only: `from_str_radix` would also take a leading `+`.
            if !hex.iter().all(u8::is_ascii_hexdigit) {
                return None;
            }
            u32::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()
        };
        let first = unit(self.at)?;
        if !(0xd800..0xdc00).contains(&first) {
            let c = char::from_u32(first)?;
            self.at += 4;
            return Some(c);
        }
        let second = (self.bytes.get(self.at + 4..self.at + 6) == Some(b"\\u")).then(|| unit(self.at + 6)).flatten()?;
        if !(0xdc00..0xe000).contains(&second) {
            return None;
        }
        self.at += 10;
        char::from_u32(0x10000 + ((first - 0xd800) << 10) + (second - 0xdc00))
    }

    fn number(&mut self) -> Result<u64, Error> {
        self.skip_space();
        let start = self.at;
        while self.bytes.get(self.at).is_some_and(u8::is_ascii_digit) {
            self.at += 1;
        }
        let digits = std::str::from_utf8(&self.bytes[start..self.at]).unwrap_or_default();
        match digits.parse::<u64>() {
            // JSON writes no leading zero (RFC 8259 `int`).
            Ok(n) if !(digits.len() > 1 && digits.starts_with('0')) => Ok(n),
            _ => {
                self.at = start;
                self.fail("an unsigned integer below 2^64")
            }
        }
    }

    fn word(&mut self, word: &'static [u8]) -> bool {
        if self.bytes[self.at..].starts_with(word) {
            self.at += word.len();
            return true;
        }
        false
    }

    fn array(&mut self) -> Result<Value, Error> {
        self.eat(b'[', "[")?;
        if self.peek() == Some(b']') {
            self.at += 1;
            return Ok(Value::Strs(Vec::new()));
        }
        let mut value = match self.peek() {
            Some(b'"') => Value::Strs(Vec::new()),
            Some(b'0'..=b'9') => Value::Nums(Vec::new()),
            _ => return self.fail("a string or an unsigned integer as an array's first item"),
        };
        loop {
            match &mut value {
                Value::Strs(items) if items.len() < MAX_ITEMS => items.push(self.string()?),
                Value::Nums(items) if items.len() < MAX_ITEMS => items.push(self.number()?),
                _ => return self.fail("at most 8192 items of one kind in an array"),
            }
            match self.peek() {
                Some(b',') => self.at += 1,
                Some(b']') => {
                    self.at += 1;
                    return Ok(value);
                }
                _ => return self.fail(", or ] in an array"),
            }
        }
    }

    fn value(&mut self) -> Result<Value, Error> {
        match self.peek() {
            Some(b'"') => self.string().map(Value::Str),
            Some(b'0'..=b'9') => self.number().map(Value::Num),
            Some(b'[') => self.array(),
            Some(b't') if self.word(b"true") => Ok(Value::Bool(true)),
            Some(b'f') if self.word(b"false") => Ok(Value::Bool(false)),
            _ => self.fail("a string, an unsigned integer, true, false or an array (the profile is flat)"),
        }
    }
}

/// The keys and values of a flat JSON object. A key given twice is an error (which value was meant?).
pub fn parse(bytes: &[u8]) -> Result<BTreeMap<String, Value>, Error> {
    if bytes.len() > MAX_BYTES {
        return Err(Error { offset: MAX_BYTES, expected: "a profile of at most 1 MiB" });
    }
    let mut c = Cursor { bytes, at: 0 };
    let mut out = BTreeMap::new();
    c.eat(b'{', "{ (a profile is one JSON object)")?;
    if c.peek() == Some(b'}') {
        c.at += 1;
    } else {
        loop {
            c.skip_space();
            let key_at = c.at;
            let key = c.string()?;
            c.eat(b':', ":")?;
            let value = c.value()?;
            if out.len() >= MAX_ITEMS {
                return c.fail("at most 8192 keys");
            }
            if out.insert(key, value).is_some() {
                return Err(Error { offset: key_at, expected: "each key once" });
            }
            match c.peek() {
                Some(b',') => c.at += 1,
                Some(b'}') => {
                    c.at += 1;
                    break;
                }
                _ => return c.fail(", or } after a value"),
            }
        }
    }
    if c.peek().is_some() {
        return c.fail("nothing after the object");
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_every_value_kind_and_escapes() {
        let map = parse(
            br#" {"a": "x\"y\u00e9", "n": 18446744073709551615, "t": true, "f": false,
            "s": ["p", "q"], "u": [1, 2, 65535], "e": []} "#,
        )
        .unwrap();
        assert_eq!(map["a"], Value::Str("x\"y\u{e9}".into()));
        assert_eq!(map["n"], Value::Num(u64::MAX));
        assert_eq!((map["t"].clone(), map["f"].clone()), (Value::Bool(true), Value::Bool(false)));
        assert_eq!(map["s"], Value::Strs(vec!["p".into(), "q".into()]));
        assert_eq!(map["u"], Value::Nums(vec![1, 2, 65535]));
        assert_eq!(map["e"], Value::Strs(vec![]));
    }

    #[test]
    fn reads_json_as_rfc_8259_writes_it() {
        // RFC 8259 section 7: a character outside the Basic Multilingual Plane is escaped as a UTF-16 surrogate pair
        // ("\ud834\udd1e" is U+1D11E, the RFC's own example); \b and \f are escapes like \n.
        let map = parse(br#"{"g": "\ud834\udd1e", "c": "\b\f", "z": 0}"#).unwrap();
        assert_eq!(map["g"], Value::Str("\u{1d11e}".into()));
        assert_eq!(map["c"], Value::Str("\u{8}\u{c}".into()));
        assert_eq!(map["z"], Value::Num(0));
        // Section 6: no leading zero; section 7: a lone surrogate is no character (the offset is its hex digits');
        // section 2: four whitespace bytes (space, tab, line feed, carriage return), not the form feed.
        for (text, offset) in [
            (&br#"{"a": 01}"#[..], 6),
            (br#"{"a": "\ud834"}"#, 9),
            (br#"{"a": "\udd1e\ud834"}"#, 9),
            (br#"{"a": "\ud834\u0041"}"#, 9),
            (br#"{"a": "\u+041"}"#, 9),
            (b"\x0c{}", 0),
        ] {
            let err = parse(text).unwrap_err();
            assert_eq!(err.offset, offset, "{}: {err}", String::from_utf8_lossy(text));
        }
    }

    #[test]
    fn rejects_what_is_not_a_flat_object_with_the_offset() {
        let cases: [(&[u8], usize); 9] = [
            (b"", 0),
            (b"[1]", 0),
            (br#"{"a": {"b": 1}}"#, 6),
            (br#"{"a": -1}"#, 6),
            (br#"{"a": 1.5}"#, 7),
            (br#"{"a": 18446744073709551616}"#, 6),
            (br#"{"a": 1, "a": 2}"#, 9),
            (br#"{"a": ["x", 1]}"#, 12),
            (br#"{"a": "unterminated"#, 19),
        ];
        for (text, offset) in cases {
            let err = parse(text).unwrap_err();
            assert_eq!(err.offset, offset, "{}: {err}", String::from_utf8_lossy(text));
        }
        assert!(parse(&vec![b' '; MAX_BYTES + 1]).is_err());
        let many = format!("{{\"a\": [{}1]}}", "1,".repeat(MAX_ITEMS));
        assert!(parse(many.as_bytes()).unwrap_err().expected.contains("8192"));
    }
}
