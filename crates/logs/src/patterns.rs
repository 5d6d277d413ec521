//! Searching a line for literal needles: one pass for a set of patterns ([`Patterns`]), and a single needle
//! ([`find_in`]).

/// A set of literal patterns searched in one pass, leftmost-first (the first listed wins among matches at one place).
/// The SIMD packed searcher (Teddy) is several times faster per line than an Aho-Corasick DFA over the same
/// patterns, whose prefilter finds too many candidates in log text; the DFA is kept for a set the packed searcher
/// cannot take (too many patterns, or no SIMD on this CPU). Teddy's 16-bucket form (fat, AVX2) is asked for first:
/// log text is mostly lower-case letters, which share their high nibbles, so the 8 buckets of the slim form let
/// through many more false candidates (a third more instructions per line for the marker set).
#[derive(Debug)]
pub(crate) enum Patterns {
    Packed(aho_corasick::packed::Searcher),
    Automaton(aho_corasick::AhoCorasick),
}

impl Patterns {
    pub(crate) fn new(patterns: &[&str]) -> Result<Self, aho_corasick::BuildError> {
        let packed = |fat| {
            aho_corasick::packed::Config::new()
                .match_kind(aho_corasick::packed::MatchKind::LeftmostFirst)
                .only_teddy_fat(fat)
                .builder()
                .extend(patterns)
                .build()
        };
        match packed(Some(true)).or_else(|| packed(None)) {
            Some(p) => Ok(Patterns::Packed(p)),
            None => aho_corasick::AhoCorasick::builder()
                .kind(Some(aho_corasick::AhoCorasickKind::DFA))
                .match_kind(aho_corasick::MatchKind::LeftmostFirst)
                .build(patterns)
                .map(Patterns::Automaton),
        }
    }

    /// The index of the leftmost match's pattern and where it starts.
    pub(crate) fn find(&self, h: &[u8]) -> Option<(usize, usize)> {
        let m = match self {
            Patterns::Packed(p) => p.find(h)?,
            Patterns::Automaton(a) => a.find(h)?,
        };
        Some((m.pattern().as_usize(), m.start()))
    }
}

/// The first position of `needle` in `h`. The needles of the rules are short literals searched in one line: finding
/// their first byte with `memchr` and comparing the rest costs less than building a `memmem` searcher for each call
/// (which the hot path did once per rule and line). Work is bounded by `h.len() × needle.len()`.
pub(crate) fn find_in(h: &[u8], needle: &[u8]) -> Option<usize> {
    let Some((&first, rest)) = needle.split_first() else { return Some(0) };
    let mut from = 0;
    while let Some(p) = memchr::memchr(first, h.get(from..)?) {
        let at = from + p;
        if h[at + 1..].starts_with(rest) {
            return Some(at);
        }
        from = at + 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn find_in_agrees_with_memmem() {
        let hay = b"aab abab ab\xffb aba";
        for needle in
            [&b""[..], b"a", b"ab", b"aba", b"b a", b"\xffb", b"abab ab", b"zz", b"aba ", b"aab abab ab\xffb aba!"]
        {
            assert_eq!(find_in(hay, needle), memchr::memmem::find(hay, needle), "{needle:?}");
        }
        assert_eq!(find_in(b"", b"a"), None);
    }

    /// The packed searcher and the automaton it stands in for find the same leftmost-first match: on every line of
    /// the logs of the tests and the corpus, and on patterns run together, overlapping and cut.
    #[test]
    fn packed_patterns_agree_with_the_automaton() {
        let table = crate::milestones::table();
        let patterns: Vec<&str> = table.rows.iter().map(|r| r.pattern.as_str()).collect();
        let packed = Patterns::new(&patterns).unwrap();
        assert!(matches!(packed, Patterns::Packed(_)), "this CPU's packed searcher takes the milestones");
        let automaton = Patterns::Automaton(
            aho_corasick::AhoCorasick::builder()
                .match_kind(aho_corasick::MatchKind::LeftmostFirst)
                .build(&patterns)
                .unwrap(),
        );
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
        let mut lines: Vec<Vec<u8>> = Vec::new();
        for dir in ["tests/data/logs-corpus", "crates/logs/tests/data"] {
            for entry in std::fs::read_dir(format!("{root}/{dir}")).unwrap() {
                let path = entry.unwrap().path();
                if path.extension().is_some_and(|e| e == "log") {
                    lines.extend(std::fs::read(&path).unwrap().split(|&b| b == b'\n').map(<[u8]>::to_vec));
                }
            }
        }
        for (a, b) in patterns.iter().zip(patterns.iter().skip(1)) {
            lines.push(format!("x {a}{b}").into_bytes());
            lines.push(format!("{b}{a}").into_bytes());
            lines.push(format!("{}{b}", &a[..a.len() / 2]).into_bytes());
            lines.push(a.as_bytes()[..a.len() - 1].to_vec());
        }
        let mut found = 0;
        for line in &lines {
            let got = packed.find(line);
            assert_eq!(got, automaton.find(line), "{}", String::from_utf8_lossy(line));
            found += usize::from(got.is_some());
        }
        assert!(found > 100, "{found}");
    }
}
