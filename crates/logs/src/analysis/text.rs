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

/// The pieces written one after the other into a string sized for them. A crash's cause lines each get a summary
/// like `GGML_ASSERT(…) failed at FILE:LINE`: `format!` pays for its formatting machinery (a padding check per
/// piece) and grows its buffer as it goes, where the pieces only need copying.
pub(super) fn joined(pieces: &[&str]) -> String {
    let mut s = String::with_capacity(pieces.iter().map(|p| p.len()).sum());
    for p in pieces {
        s.push_str(p);
    }
    s
}

/// `n` in decimal, written into `buf` (as `{n}` formats it), for [`joined`].
pub(super) fn decimal(n: u32, buf: &mut [u8; 10]) -> &str {
    let mut at = buf.len();
    let mut n = n;
    loop {
        at -= 1;
        buf[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    // Only ASCII digits were written.
    std::str::from_utf8(&buf[at..]).unwrap_or_default()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn joined_and_decimal_write_what_format_writes() {
        let mut buf = [0; 10];
        for n in [0, 7, 10, 99, 1234, u32::MAX] {
            assert_eq!(decimal(n, &mut buf), n.to_string());
        }
        assert_eq!(
            joined(&["abort at ", "a.c", ":", decimal(12, &mut buf), ": x"]),
            format!("abort at {}:{}: x", "a.c", 12)
        );
        assert_eq!(joined(&[]), "");
    }
}
