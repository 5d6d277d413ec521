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

/// A quick test that a text holds none of a set of literal patterns, several times cheaper per line than the packed
/// searcher: most lines hold none, and only the others are searched. It may answer that a text can hold one that does
/// not; it never answers that a text holds none when it holds one.
///
/// A pattern of at least [`Prefilter::LONG`] (15) bytes is known by eight 8-byte grams: those that begin at the eight
/// places `b`, `b + 1`, …, `b + 7` of a 15-byte stretch of it (the stretch of least common bytes). The test reads the
/// text's 8 bytes at every eighth place (0, 8, 16, …) and looks their hash up in a bit set of the grams' hashes. Where
/// the pattern occurs, at `s`, its stretch covers the text from `s + b` to `s + b + 15`, and the first place in it that
/// is a multiple of eight, `i` (at most `s + b + 7`), has its 8 bytes within the stretch: they are the gram that begins
/// at `i - s` of the pattern, one of the eight. A shorter pattern is looked for whole.
#[derive(Debug)]
pub(crate) struct Prefilter {
    grams: Box<[u64; Prefilter::GRAM_BITS / 64]>,
    /// The patterns too short for grams, each with the index of its least common byte.
    short: Vec<(Vec<u8>, usize)>,
}

impl Prefilter {
    /// Bytes of a gram, and how far apart the places of the text read are.
    const GRAM: usize = 8;
    pub(crate) const LONG: usize = 2 * Prefilter::GRAM - 1;
    const GRAM_BITS: usize = 1 << 16;

    pub(crate) fn new(patterns: &[&str]) -> Prefilter {
        let mut grams = Box::new([0u64; Prefilter::GRAM_BITS / 64]);
        let mut short = Vec::new();
        for p in patterns.iter().map(|p| p.as_bytes()) {
            if p.len() < Prefilter::LONG {
                short.push((p.to_vec(), rarest_byte(p)));
                continue;
            }
            let commonness =
                |at: usize| p[at..at + Prefilter::LONG].iter().map(|&b| u32::from(COMMONNESS[usize::from(b)]));
            let stretch =
                (0..=p.len() - Prefilter::LONG).rev().min_by_key(|&at| commonness(at).sum::<u32>()).unwrap_or(0);
            for gram in p[stretch..stretch + Prefilter::LONG].windows(Prefilter::GRAM) {
                for bit in Prefilter::bits(gram) {
                    grams[bit / 64] |= 1 << (bit % 64);
                }
            }
        }
        Prefilter { grams, short }
    }

    /// The two bits of a gram (two, so that a gram common in logs, such as eight spaces, that shares one bit with a
    /// pattern's gram seldom shares both).
    fn bits(gram: &[u8]) -> [usize; 2] {
        let word = u64::from_le_bytes(gram.try_into().unwrap_or([0; 8]));
        let hash = word.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        [(hash >> 48) as usize, (hash >> 32) as usize & 0xffff]
    }

    fn has(&self, bit: usize) -> bool {
        self.grams[bit / 64] & (1 << (bit % 64)) != 0
    }

    /// Whether `text` may hold one of the patterns (`false`: it holds none).
    pub(crate) fn may_hold(&self, text: &[u8]) -> bool {
        for gram in text.chunks_exact(Prefilter::GRAM) {
            let [first, second] = Prefilter::bits(gram);
            if self.has(first) && self.has(second) {
                return true;
            }
        }
        self.short.iter().any(|(p, anchor)| find_anchored(text, p, *anchor).is_some())
    }
}

/// How many bytes [`find_byte_near`] and [`find_either_near`] read a word at a time before they hand the rest to
/// `memchr`.
const NEAR: usize = 32;

/// A word of `0x01` bytes and one of `0x80` bytes: a byte of the word `x` is zero exactly where `(x - ONES) & !x & HIGH`
/// has its high bit, or above such a byte (a borrow), so that its lowest set bit is the first zero byte.
const ONES: u64 = u64::from_le_bytes([0x01; 8]);
const HIGH: u64 = u64::from_le_bytes([0x80; 8]);

/// The high bits of the bytes of `word` equal to the byte repeated in `splat` (and maybe of some above the first such
/// byte: only the lowest set bit is exact).
#[inline(always)]
fn equal_bytes(word: u64, splat: u64) -> u64 {
    let x = word ^ splat;
    x.wrapping_sub(ONES) & !x & HIGH
}

/// The first position of `a` or `b` in `h`, where one is expected within the first few words (the end of a function name,
/// of a prefix's first word): eight bytes a step there costs a few operations, where a `memchr` call costs tens before
/// its first vector; beyond [`NEAR`] bytes, `memchr2` takes over.
#[inline]
pub(crate) fn find_either_near(a: u8, b: u8, h: &[u8]) -> Option<usize> {
    let (splat_a, splat_b) = (u64::from_le_bytes([a; 8]), u64::from_le_bytes([b; 8]));
    let near = &h[..h.len().min(NEAR)];
    let mut words = near.chunks_exact(8);
    let mut at = 0;
    for w in &mut words {
        let word = u64::from_le_bytes(w.try_into().unwrap_or([0; 8]));
        let found = equal_bytes(word, splat_a) | equal_bytes(word, splat_b);
        if found != 0 {
            return Some(at + found.trailing_zeros() as usize / 8);
        }
        at += 8;
    }
    if let Some(p) = words.remainder().iter().position(|&c| c == a || c == b) {
        return Some(at + p);
    }
    memchr::memchr2(a, b, h.get(NEAR..)?).map(|p| p + NEAR)
}

/// [`find_either_near`] for one byte.
#[inline]
pub(crate) fn find_byte_near(a: u8, h: &[u8]) -> Option<usize> {
    find_either_near(a, a, h)
}

/// The first position of `needle` in `h`. The needles of the rules are short literals searched in one line: finding
/// one byte of the needle with `memchr` and comparing the rest costs less than building a `memmem` searcher for each
/// call (which the hot path did once per rule and line). The byte looked for is the needle's least common one in logs
/// (the space that begins ` library=` is in every line many times, its `y` seldom), so that few places are compared;
/// for a literal needle the choice is made when the call is compiled. Work is bounded by `h.len() × needle.len()`.
#[inline(always)]
pub(crate) fn find_in(h: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() {
        return Some(0);
    }
    find_anchored(h, needle, rarest_byte(needle))
}

/// A needle searched many times, its least common byte chosen once (when the constant is compiled).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Needle {
    bytes: &'static [u8],
    anchor: usize,
}

impl Needle {
    pub(crate) const fn new(needle: &'static str) -> Needle {
        Needle { bytes: needle.as_bytes(), anchor: rarest_byte(needle.as_bytes()) }
    }

    pub(crate) const fn len(&self) -> usize {
        self.bytes.len()
    }

    /// The first position of the needle in `h` (as [`find_in`]).
    pub(crate) fn find(&self, h: &[u8]) -> Option<usize> {
        if self.bytes.is_empty() {
            return Some(0);
        }
        find_anchored(h, self.bytes, self.anchor)
    }

    /// [`Needle::find`] in `h` whose bytes are `set`: a text without the needle's least common byte is not searched.
    pub(crate) fn find_with(&self, h: &[u8], set: &ByteSet) -> Option<usize> {
        match self.bytes.get(self.anchor) {
            Some(&b) if !set.has(b) => None,
            _ => self.find(h),
        }
    }
}

/// The set of bytes a text holds, for asking of many needles whether each can be in it.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct ByteSet([u64; 4]);

impl ByteSet {
    pub(crate) fn of(text: &[u8]) -> ByteSet {
        let mut set = [0u64; 4];
        for &b in text {
            set[usize::from(b >> 6)] |= 1 << (b & 63);
        }
        ByteSet(set)
    }

    pub(crate) fn has(&self, b: u8) -> bool {
        self.0[usize::from(b >> 6)] & (1 << (b & 63)) != 0
    }
}

/// Bytes that are common in logs, the most common first (their frequency in the corpus of pasted logs and the
/// fixtures, down to about one in a thousand: the capitals of `INFO` and of C and Go names, brackets, `|`); a byte
/// not listed is rarer than any listed. A needle's anchor is its least common byte, so the more of the common bytes
/// are ranked, the fewer places `memchr` stops at (`Input: {` is looked for by its `{`, not by the `I` of every `INFO`).
const COMMON_BYTES: &[u8] = b" eaol0tsrimn:1cd.2_pu=g5346f-87b/9xv[h\"k,Iy|]MPwADCUG)(L\\OFNTSBERzVq+";

/// How common each byte is: its rank from the end of [`COMMON_BYTES`], 0 for the rest.
const COMMONNESS: [u8; 256] = {
    let mut rank = [0u8; 256];
    let mut i = 0;
    while i < COMMON_BYTES.len() {
        rank[COMMON_BYTES[i] as usize] = (COMMON_BYTES.len() - i) as u8;
        i += 1;
    }
    rank
};

/// The index of the least common byte of `needle` (the first of equals; 0 when it is empty).
#[inline(always)]
const fn rarest_byte(needle: &[u8]) -> usize {
    let mut best = 0;
    let mut i = 1;
    while i < needle.len() {
        if COMMONNESS[needle[i] as usize] < COMMONNESS[needle[best] as usize] {
            best = i;
        }
        i += 1;
    }
    best
}

/// [`find_in`] with the byte at `anchor` of `needle` as the one `memchr` looks for: its places in `h` come in order,
/// and so do the needle's starts they give, so the first that matches is the first match.
fn find_anchored(h: &[u8], needle: &[u8], anchor: usize) -> Option<usize> {
    let byte = needle[anchor];
    let mut from = anchor;
    while let Some(p) = memchr::memchr(byte, h.get(from..)?) {
        let at = from + p - anchor;
        if h[at..].starts_with(needle) {
            return Some(at);
        }
        from += p + 1;
    }
    None
}

/// Every line of the logs the repository holds (the corpus and this crate's fixtures), for tests that check a rule
/// against all of them.
#[cfg(test)]
pub(crate) fn repository_log_lines() -> Vec<Vec<u8>> {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let mut lines = Vec::new();
    for dir in ["tests/data/logs-corpus", "crates/logs/tests/data"] {
        for entry in std::fs::read_dir(format!("{root}/{dir}")).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "log") {
                lines.extend(std::fs::read(&path).unwrap().split(|&b| b == b'\n').map(<[u8]>::to_vec));
            }
        }
    }
    lines
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
        // Needles whose least common byte is not their first (the one `memchr` looks for), near both ends.
        let line = b"level=INFO source=gpu.go:319 msg=\"x\" id=0 library=cuda variant=v12 libdirs=ollama,cuda_v12";
        for needle in [&b" library="[..], b"y=", b"Ly", b"le", b"v12", b"a_v12", b"level=I", b" id=0 l", b"x=", b"yy"] {
            assert_eq!(find_in(line, needle), memchr::memmem::find(line, needle), "{needle:?}");
            assert_eq!(find_in(&line[1..], needle), memchr::memmem::find(&line[1..], needle), "{needle:?}");
        }
        assert_eq!(find_in(b"", b"a"), None);
    }

    /// The word-at-a-time searches agree with `memchr` and `memchr2`: the byte at every place, before and after the
    /// words they read, next to bytes one less and one more than it (the borrow of the zero-byte test), or absent.
    #[test]
    fn near_searches_agree_with_memchr() {
        for len in 0..80 {
            for at in 0..=len {
                for (a, b) in [(b' ', b':'), (b':', b' '), (0, 1), (0x80, 0xff), (b'x', b'x')] {
                    for fill in [b'.', a.wrapping_sub(1), a.wrapping_add(1), b.wrapping_sub(1), 0, 0xff] {
                        let mut h = vec![fill; len];
                        if at < len {
                            h[at] = a;
                            if at + 1 < len {
                                h[at + 1] = a.wrapping_add(1);
                            }
                        }
                        for k in (at + 2..len).step_by(7) {
                            h[k] = b;
                        }
                        assert_eq!(find_either_near(a, b, &h), memchr::memchr2(a, b, &h), "{h:?}");
                        assert_eq!(find_byte_near(a, &h), memchr::memchr(a, &h), "{h:?}");
                        assert_eq!(find_byte_near(b, &h), memchr::memchr(b, &h), "{h:?}");
                    }
                }
            }
        }
    }

    /// The prefilter never tells a line that holds a milestone pattern that it holds none: on every line of the logs of
    /// the tests and the corpus, and on each pattern placed at every alignment in text and cut at either end.
    #[test]
    fn the_prefilter_passes_every_line_that_holds_a_pattern() {
        let table = crate::milestones::table();
        let patterns: Vec<&str> = table.rows.iter().map(|r| r.pattern.as_str()).collect();
        let prefilter = Prefilter::new(&patterns);
        let searcher = Patterns::new(&patterns).unwrap();
        let mut lines = repository_log_lines();
        // Most lines of real logs hold no pattern: the prefilter must let most of them go.
        let passed = lines.iter().filter(|l| prefilter.may_hold(l)).count();
        assert!(passed < lines.len() / 3, "{passed} of {}", lines.len());
        for p in &patterns {
            for pad in 0..9 {
                lines.push(format!("{}{p}", "x".repeat(pad)).into_bytes());
                lines.push(format!("{}{p} tail", "time=2025 ".repeat(pad)).into_bytes());
                lines.push(p.as_bytes()[pad.min(p.len())..].to_vec());
                lines.push(p.as_bytes()[..p.len() - pad.min(p.len())].to_vec());
            }
        }
        let mut held = 0;
        for line in &lines {
            if searcher.find(line).is_some() {
                held += 1;
                assert!(prefilter.may_hold(line), "{}", String::from_utf8_lossy(line));
            }
        }
        assert!(held > 300, "{held}");
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
        let mut lines = repository_log_lines();
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
