//! Text helpers of the analysis: clipping what is quoted, finding a needle, reading a Go duration.

/// Longest summary text kept per timeline entry or cause (characters).
pub(super) const SUMMARY_CHARS: usize = 300;

pub(super) fn clip(mut s: String) -> String {
    // A text of no more bytes than the limit has no more characters either: most summaries end here.
    if s.len() > SUMMARY_CHARS && s.chars().count() > SUMMARY_CHARS {
        let cut = s.char_indices().nth(SUMMARY_CHARS).map_or(s.len(), |(i, _)| i);
        s.truncate(cut);
        s.push('…');
    }
    s
}

#[inline(always)]
pub(super) fn find_bytes(h: &[u8], needle: &[u8]) -> Option<usize> {
    crate::patterns::find_in(h, needle)
}

#[inline(always)]
pub(super) fn after_bytes<'a>(h: &'a [u8], needle: &[u8]) -> Option<&'a [u8]> {
    find_bytes(h, needle).map(|i| &h[i + needle.len()..])
}

/// A Go `time.Duration` as Gin prints it (`2.345678s`, `1m2.5s`, `567.8ms`, `35.141µs`), in seconds.
pub fn go_duration_s(text: &[u8]) -> Option<f64> {
    let s = std::str::from_utf8(text).ok()?.trim();
    let mut total = 0.0;
    let mut rest = s;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let n = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
        let value: f64 = rest[..n].parse().ok()?;
        rest = &rest[n..];
        let (factor, len) =
            [("h", 3600.0), ("ms", 1e-3), ("m", 60.0), ("s", 1.0), ("µs", 1e-6), ("us", 1e-6), ("ns", 1e-9)]
                .iter()
                .find(|(u, _)| rest.starts_with(u))
                .map(|(u, f)| (*f, u.len()))?;
        total += value * factor;
        rest = &rest[len..];
    }
    Some(total)
}
