//! A light scan of PTX text: `.version`, `.target` and kernel (`.entry`) names.
//!
//! PTX is text but the input may not be valid UTF-8 (or may be garbage): the scan never fails, it
//! only reports what it can read. Directives are recognised at the start of a line (after blanks and
//! linking directives such as `.visible`), which is where ptxas-accepted PTX and every compiler-emitted
//! file put them; `//` comments are ignored.

/// Most kernel names collected from one PTX file.
pub const MAX_ENTRIES: usize = 1 << 20;

/// What [`parse`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ptx<'a> {
    /// The PTX ISA version, e.g. `"8.8"`.
    pub version: Option<&'a str>,
    /// The first target, e.g. `"sm_90a"` (further `.target` options such as `debug` are not included).
    pub target: Option<&'a str>,
    /// Kernel names (mangled), in file order, at most [`MAX_ENTRIES`].
    pub entries: Vec<&'a str>,
    /// True when more than [`MAX_ENTRIES`] kernels were present.
    pub truncated: bool,
}

/// Scan PTX text. Trailing NUL padding (as in fatbin payloads) is fine.
pub fn parse(text: &[u8]) -> Ptx<'_> {
    let mut ptx = Ptx::default();
    for line in (Lines { rest: Some(text) }) {
        // Every directive we want starts the line (after blanks) with '.'; most lines are instructions.
        let Some(first_byte) = line.iter().position(|&b| b != b' ' && b != b'\t') else { continue };
        let line = line.get(first_byte..).unwrap_or(line);
        if line.first() != Some(&b'.') {
            continue;
        }
        let line = strip_comment(line);
        let mut tokens = Tokens { rest: line };
        let Some(first) = tokens.next() else { continue };
        match first {
            b".version" if ptx.version.is_none() => ptx.version = tokens.next().and_then(as_str),
            b".target" if ptx.target.is_none() => ptx.target = tokens.next().and_then(as_str),
            _ => {
                let mut tok = first;
                // Linking directives may precede `.entry`: `.visible .entry`, `.weak .entry`.
                while matches!(tok, b".visible" | b".weak" | b".common") {
                    match tokens.next() {
                        Some(t) => tok = t,
                        None => break,
                    }
                }
                if tok == b".entry" {
                    if let Some(name) = tokens.next().and_then(as_str) {
                        if ptx.entries.len() < MAX_ENTRIES {
                            ptx.entries.push(name);
                        } else {
                            ptx.truncated = true;
                        }
                    }
                }
            }
        }
    }
    ptx
}

/// Lines of `text`, split at `\n` with a word-at-a-time search (PTX files reach tens of MB).
struct Lines<'a> {
    rest: Option<&'a [u8]>,
}

impl<'a> Iterator for Lines<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        let rest = self.rest?;
        match find_newline(rest) {
            Some(p) => {
                self.rest = rest.get(p + 1..);
                rest.get(..p)
            }
            None => {
                self.rest = None;
                Some(rest)
            }
        }
    }
}

/// Position of the first `\n`, eight bytes at a time: a byte of `w ^ NL` is zero where `w` has a newline,
/// and `(x - 0x01..) & !x & 0x80..` sets the high bit of the lowest zero byte exactly.
fn find_newline(hay: &[u8]) -> Option<usize> {
    const LO: u64 = 0x0101_0101_0101_0101;
    const HI: u64 = 0x8080_8080_8080_8080;
    const NL: u64 = LO * b'\n' as u64;
    let mut chunks = hay.chunks_exact(8);
    let mut base = 0usize;
    for chunk in &mut chunks {
        let word = u64::from_le_bytes(chunk.try_into().unwrap_or([0; 8]));
        let x = word ^ NL;
        let found = x.wrapping_sub(LO) & !x & HI;
        if found != 0 {
            return Some(base + (found.trailing_zeros() / 8) as usize);
        }
        base += 8;
    }
    chunks.remainder().iter().position(|&b| b == b'\n').map(|p| base + p)
}

fn strip_comment(line: &[u8]) -> &[u8] {
    match line.windows(2).position(|w| w == b"//") {
        Some(p) => line.get(..p).unwrap_or(line),
        None => line,
    }
}

fn as_str(token: &[u8]) -> Option<&str> {
    std::str::from_utf8(token).ok().filter(|s| !s.is_empty())
}

/// Splits a line into tokens at blanks, commas, `(` and `;` (which end a name but are not returned).
struct Tokens<'a> {
    rest: &'a [u8],
}

fn is_separator(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | b'\0' | b',' | b'(' | b')' | b';' | b'{')
}

impl<'a> Iterator for Tokens<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        let start = self.rest.iter().position(|&b| !is_separator(b))?;
        let rest = self.rest.get(start..)?;
        let len = rest.iter().position(|&b| is_separator(b)).unwrap_or(rest.len());
        let (token, tail) = rest.split_at(len);
        self.rest = tail;
        Some(token)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_target_entries() {
        let text =
            b"//\n// Generated by NVIDIA NVVM Compiler\n//\n\n.version 8.8\n.target sm_90a\n.address_size 64\n\n\
            .global .align 1 .b8 table[2];\n\n\t// .globl\t_Z3fooPf\n\
            .visible .entry _Z3fooPf(\n\t.param .u64 p\n)\n{\n\tret;\n}\n\
            .entry _ZL3barv()\n{\n}\n  .weak .entry w (\n.func (.reg .b32 r) helper()\n\
            // .entry commented_out(\n.visible .func .entry_like()\n.extern .entry declared(\n\0\0\0\0";
        let ptx = parse(text);
        assert_eq!(ptx.version, Some("8.8"));
        assert_eq!(ptx.target, Some("sm_90a"));
        assert_eq!(ptx.entries, ["_Z3fooPf", "_ZL3barv", "w"]);
        assert!(!ptx.truncated);
    }

    #[test]
    fn target_options_and_crlf() {
        let ptx = parse(b".version 7.0\r\n.target sm_52, debug\r\n.entry k(\r\n");
        assert_eq!((ptx.version, ptx.target), (Some("7.0"), Some("sm_52")));
        assert_eq!(ptx.entries, ["k"]);
    }

    #[test]
    fn garbage_never_fails() {
        assert_eq!(parse(b""), Ptx::default());
        assert_eq!(parse(b"\xff\xfe\x00\x01.version\n.target\n.entry\n.visible\n"), Ptx::default());
        let ptx = parse(b".version \xff\xff\n.target sm_\xc3\x28\n.entry \xff(\n.entry ok(");
        assert_eq!((ptx.version, ptx.target), (None, None));
        assert_eq!(ptx.entries, ["ok"]);
        let noise: Vec<u8> = (0..10_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8).collect();
        let _ = parse(&noise);
    }

    #[test]
    fn newline_search_matches_naive() {
        let text = b"a\nbb\n\n0123456789abcdef\nxyz";
        let lines: Vec<&[u8]> = Lines { rest: Some(&text[..]) }.collect();
        let naive: Vec<&[u8]> = text.split(|&b| b == b'\n').collect();
        assert_eq!(lines, naive);
        for i in 0..40 {
            let mut v = vec![b'x'; 40];
            v[i] = b'\n';
            assert_eq!(find_newline(&v), Some(i));
            // Bytes next to '\n' in value (0x0b, 0x09) and high bytes must not match.
            v[i] = 0x0b;
            assert_eq!(find_newline(&v), None);
            v[i] = 0x8a;
            assert_eq!(find_newline(&v), None);
        }
    }
}
