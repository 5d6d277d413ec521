//! Byte-string helpers of the rules: searching, trimming, and the numbers, flags and sizes logs print. Every one is
//! bounded by the length of its input and allocates nothing.

use memchr::memchr_iter;

#[inline(always)]
pub(super) fn find(h: &[u8], needle: &[u8]) -> Option<usize> {
    crate::patterns::find_in(h, needle)
}

/// Position of the first `: ` (found with `memchr`, linear whatever the input).
pub(super) fn colon_space(s: &[u8]) -> Option<usize> {
    memchr_iter(b':', s).find(|&i| s.get(i + 1) == Some(&b' '))
}

#[inline(always)]
pub(super) fn after<'a>(h: &'a [u8], needle: &[u8]) -> Option<&'a [u8]> {
    find(h, needle).map(|i| &h[i + needle.len()..])
}

pub(super) fn trim(s: &[u8]) -> &[u8] {
    s.trim_ascii()
}

pub(super) fn trim_start(s: &[u8]) -> &[u8] {
    s.trim_ascii_start()
}

/// Leading decimal digits as a number (saturating), and the rest.
pub(super) fn leading_u64(s: &[u8]) -> Option<(u64, &[u8])> {
    let n = s.iter().take_while(|b| b.is_ascii_digit()).count();
    if n == 0 {
        return None;
    }
    let v = s[..n].iter().fold(0u64, |v, &b| v.saturating_mul(10).saturating_add(u64::from(b - b'0')));
    Some((v, &s[n..]))
}

pub(super) fn leading_u32(s: &[u8]) -> Option<(u32, &[u8])> {
    leading_u64(s).map(|(v, rest)| (u32::try_from(v).unwrap_or(u32::MAX), rest))
}

/// A leading decimal number such as `12.34` or `-1`, and the rest.
pub(super) fn leading_f64(s: &[u8]) -> Option<(f64, &[u8])> {
    let n =
        s.iter().enumerate().take_while(|&(i, &b)| b.is_ascii_digit() || b == b'.' || (i == 0 && b == b'-')).count();
    let v: f64 = std::str::from_utf8(&s[..n]).ok()?.parse().ok()?;
    Some((v, &s[n..]))
}

pub(super) fn yes_no(s: &[u8]) -> Option<bool> {
    match trim(s) {
        b"yes" | b"1" | b"true" => Some(true),
        b"no" | b"0" | b"false" => Some(false),
        _ => None,
    }
}

/// A size such as `552.2 MiB` or `1.0 GiB` in MiB.
pub(super) fn size_mib(s: &[u8]) -> Option<f64> {
    let (v, rest) = leading_f64(trim(s))?;
    let factor = match trim(rest) {
        b"B" => 1.0 / (1024.0 * 1024.0),
        b"KiB" | b"KB" => 1.0 / 1024.0,
        b"MiB" | b"MB" | b"" => 1.0,
        b"GiB" | b"GB" => 1024.0,
        b"TiB" => 1024.0 * 1024.0,
        _ => return None,
    };
    Some(v * factor)
}
