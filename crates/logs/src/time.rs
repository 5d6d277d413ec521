//! Timestamps as they appear in runtime logs, parsed without allocation.
//!
//! Logs mix clocks: Go's slog `time=2025-11-13T10:01:52.283+08:00`, Gin's `2025/08/28 - 10:25:21`, the
//! Go standard logger's `2024/01/26 09:54:31`, a journal's `Nov 13 10:01:52` (no year, month name in the
//! machine's locale), Docker's `2024-05-15T00:39:40.172587575Z`, and llama.cpp's `0.00.177.887` (minutes,
//! seconds, milliseconds and microseconds since the process started). A [`Timestamp`] keeps which clock a
//! value came from ([`Clock`]): only values of one clock can be subtracted, and the timeline picks one.
//!
//! Wall-clock values are kept as *civil* time, the digits as written: a UTC offset is read but not
//! applied, because Ollama writes slog times with the local offset and Gin and journal times in local
//! time without one, and the three must line up in one timeline.

use serde::Serialize;

/// Which clock a timestamp was read from; values of different clocks cannot be compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Clock {
    /// A full civil date and time (slog, Gin, Go's logger, Docker's prefixes).
    Civil,
    /// A syslog/journal prefix: month (when its name could be read) and day, no year.
    Journal,
    /// llama.cpp's log prefix: time since the process started.
    Elapsed,
}

/// A timestamp in microseconds on its [`Clock`].
///
/// `Civil`: microseconds since 1970-01-01T00:00:00 in the time written (no offset applied).
/// `Journal`: `(month * 31 + day) * 86400 s` plus the time of day, month 0 when its name was not
/// recognised; differences are right within a month. `Elapsed`: microseconds since the process started.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct Timestamp {
    pub clock: Clock,
    pub micros: i64,
}

impl Timestamp {
    pub const fn civil(micros: i64) -> Self {
        Timestamp { clock: Clock::Civil, micros }
    }

    /// Microseconds since midnight of the written day (not meaningful for [`Clock::Elapsed`]).
    pub fn time_of_day(self) -> i64 {
        self.micros.rem_euclid(86_400_000_000)
    }
}

const MICROS_PER_SEC: i64 = 1_000_000;

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's `days_from_civil`).
pub fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(month);
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// A small cursor over ASCII digits; every reader returns `None` on anything unexpected.
struct Digits<'a> {
    s: &'a [u8],
    pos: usize,
}

impl<'a> Digits<'a> {
    fn new(s: &'a [u8]) -> Self {
        Digits { s, pos: 0 }
    }

    /// Exactly `n` digits.
    fn fixed(&mut self, n: usize) -> Option<u32> {
        let part = self.s.get(self.pos..self.pos.checked_add(n)?)?;
        let mut v = 0u32;
        for &b in part {
            if !b.is_ascii_digit() {
                return None;
            }
            v = v * 10 + u32::from(b - b'0');
        }
        self.pos += n;
        Some(v)
    }

    /// One to `max` digits.
    fn up_to(&mut self, max: usize) -> Option<u32> {
        let mut v = 0u32;
        let mut n = 0;
        while n < max {
            match self.s.get(self.pos) {
                Some(b) if b.is_ascii_digit() => {
                    v = v * 10 + u32::from(b - b'0');
                    self.pos += 1;
                    n += 1;
                }
                _ => break,
            }
        }
        (n > 0).then_some(v)
    }

    fn byte(&mut self, want: u8) -> Option<()> {
        (self.s.get(self.pos) == Some(&want)).then(|| self.pos += 1)
    }

    fn peek(&self) -> Option<u8> {
        self.s.get(self.pos).copied()
    }

    /// A fraction after '.', as microseconds (digits past the sixth are read and dropped).
    fn fraction_micros(&mut self) -> i64 {
        if self.byte(b'.').is_none() {
            return 0;
        }
        let mut micros = 0i64;
        let mut scale = 100_000i64;
        while let Some(b) = self.peek().filter(u8::is_ascii_digit) {
            micros += i64::from(b - b'0') * scale;
            scale /= 10;
            self.pos += 1;
        }
        micros
    }

    fn rest(&self) -> &'a [u8] {
        self.s.get(self.pos..).unwrap_or(&[])
    }
}

fn valid_date(month: u32, day: u32) -> bool {
    (1..=12).contains(&month) && (1..=31).contains(&day)
}

fn valid_time(h: u32, m: u32, s: u32) -> bool {
    h < 24 && m < 60 && s < 61
}

/// `HH:MM:SS[.frac]` at the cursor, as microseconds of the day.
fn clock_time(d: &mut Digits<'_>) -> Option<i64> {
    let h = d.fixed(2)?;
    d.byte(b':')?;
    let mi = d.fixed(2)?;
    d.byte(b':')?;
    let s = d.fixed(2)?;
    if !valid_time(h, mi, s) {
        return None;
    }
    let frac = d.fraction_micros();
    Some((i64::from(h) * 3600 + i64::from(mi) * 60 + i64::from(s)) * MICROS_PER_SEC + frac)
}

/// RFC 3339 as Go and Docker write it: `2025-11-13T10:01:52.283+08:00`, `…Z`, or with a space instead
/// of `T`. Returns the timestamp and the bytes after it (the offset, when present, is consumed).
pub fn parse_rfc3339(s: &[u8]) -> Option<(Timestamp, &[u8])> {
    let mut d = Digits::new(s);
    let y = d.fixed(4)?;
    d.byte(b'-')?;
    let mo = d.fixed(2)?;
    d.byte(b'-')?;
    let day = d.fixed(2)?;
    if !valid_date(mo, day) {
        return None;
    }
    match d.peek() {
        Some(b'T' | b' ') => d.pos += 1,
        _ => return None,
    }
    let tod = clock_time(&mut d)?;
    match d.peek() {
        Some(b'Z') => d.pos += 1,
        Some(b'+' | b'-') => {
            // `+08:00` (Go) or `+0800` (journald's short-iso).
            d.pos += 1;
            d.fixed(2)?;
            let _ = d.byte(b':');
            d.fixed(2)?;
        }
        _ => {}
    }
    let days = days_from_civil(i64::from(y), mo, day);
    Some((Timestamp::civil(days * 86_400 * MICROS_PER_SEC + tod), d.rest()))
}

/// `YYYY/MM/DD HH:MM:SS` (Go's standard logger) or `YYYY/MM/DD - HH:MM:SS` (Gin).
pub fn parse_slash_date(s: &[u8]) -> Option<(Timestamp, &[u8])> {
    let mut d = Digits::new(s);
    let y = d.fixed(4)?;
    d.byte(b'/')?;
    let mo = d.fixed(2)?;
    d.byte(b'/')?;
    let day = d.fixed(2)?;
    if !valid_date(mo, day) {
        return None;
    }
    d.byte(b' ')?;
    if d.peek() == Some(b'-') {
        d.pos += 1;
        d.byte(b' ')?;
    }
    let tod = clock_time(&mut d)?;
    let days = days_from_civil(i64::from(y), mo, day);
    Some((Timestamp::civil(days * 86_400 * MICROS_PER_SEC + tod), d.rest()))
}

/// llama.cpp's prefix `M.SS.mmm.uuu` (minutes since start, seconds, milliseconds, microseconds). Nearly every line of
/// a llama.cpp log starts with it: after the minutes, the 11 bytes of `.SS.mmm.uuu` are read at their fixed places at
/// once rather than one by one through a cursor.
pub fn parse_llama_elapsed(s: &[u8]) -> Option<(Timestamp, &[u8])> {
    // One to nine digits of minutes (a tenth digit where a dot belongs is no prefix).
    let mut minutes = 0u32;
    let mut m = 0;
    while let Some(&b) = s.get(m).filter(|b| b.is_ascii_digit()) {
        if m == 9 {
            return None;
        }
        minutes = minutes * 10 + u32::from(b - b'0');
        m += 1;
    }
    if m == 0 {
        return None;
    }
    let t: &[u8; 11] = s.get(m..m + 11)?.try_into().ok()?;
    if t[0] != b'.' || t[3] != b'.' || t[7] != b'.' {
        return None;
    }
    let d = |i: usize| u32::from(t[i].wrapping_sub(b'0'));
    let digits = [d(1), d(2), d(4), d(5), d(6), d(8), d(9), d(10)];
    if digits.iter().any(|&v| v > 9) {
        return None;
    }
    let secs = digits[0] * 10 + digits[1];
    let (ms, us) = (digits[2] * 100 + digits[3] * 10 + digits[4], digits[5] * 100 + digits[6] * 10 + digits[7]);
    if secs >= 60 {
        return None;
    }
    let micros = (i64::from(minutes) * 60 + i64::from(secs)) * MICROS_PER_SEC + i64::from(ms) * 1000 + i64::from(us);
    Some((Timestamp { clock: Clock::Elapsed, micros }, &s[m + 11..]))
}

/// The month of a journal date token: English abbreviations (any case, `Sep`/`Sept`), or a leading
/// number as locales such as `7月` write it. Unknown names give 0: the date is then read by day only.
pub fn journal_month(token: &[u8]) -> u32 {
    // The first three bytes in lower case, matched at once (a journal line names its month on every line).
    if let Some(&[a, b, c]) = token.get(..3) {
        let month = match [a, b, c].map(|x| x.to_ascii_lowercase()) {
            [b'j', b'a', b'n'] => 1,
            [b'f', b'e', b'b'] => 2,
            [b'm', b'a', b'r'] => 3,
            [b'a', b'p', b'r'] => 4,
            [b'm', b'a', b'y'] => 5,
            [b'j', b'u', b'n'] => 6,
            [b'j', b'u', b'l'] => 7,
            [b'a', b'u', b'g'] => 8,
            [b's', b'e', b'p'] => 9,
            [b'o', b'c', b't'] => 10,
            [b'n', b'o', b'v'] => 11,
            [b'd', b'e', b'c'] => 12,
            _ => 0,
        };
        if month > 0 {
            return month;
        }
    }
    let mut d = Digits::new(token);
    match d.up_to(2) {
        Some(m) if (1..=12).contains(&m) && !matches!(d.peek(), Some(b'.' | b'/' | b'-')) => m,
        _ => 0,
    }
}

/// A journal timestamp from its month token, day and `HH:MM:SS` token.
pub fn journal_timestamp(month: u32, day: u32, time: &[u8]) -> Option<Timestamp> {
    clock_token(time).map(|tod| journal_timestamp_at(month, day, tod))
}

/// [`journal_timestamp`] of a time of day already read (by [`clock_token`]).
pub(crate) fn journal_timestamp_at(month: u32, day: u32, tod: i64) -> Timestamp {
    let day_index = i64::from(month) * 31 + i64::from(day);
    Timestamp { clock: Clock::Journal, micros: day_index * 86_400 * MICROS_PER_SEC + tod }
}

/// Whether a token is `HH:MM:SS` (optionally with a fraction).
pub fn is_clock_token(token: &[u8]) -> bool {
    clock_token(token).is_some()
}

/// A token that is `HH:MM:SS` (optionally with a fraction) as microseconds of the day.
pub(crate) fn clock_token(token: &[u8]) -> Option<i64> {
    let mut d = Digits::new(token);
    let tod = clock_time(&mut d)?;
    d.rest().is_empty().then_some(tod)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn days_from_civil_matches_known_dates() {
        // Unix epoch and two dates whose day numbers `date -d … +%s` / 86400 gives.
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
        assert_eq!(days_from_civil(2025, 11, 13), 20_405);
    }

    #[test]
    fn rfc3339_forms() {
        let (a, rest) = parse_rfc3339(b"2025-11-13T10:01:52.283+08:00 level").unwrap();
        assert_eq!(rest, b" level");
        let (b, _) = parse_rfc3339(b"2025-11-13T10:01:53Z").unwrap();
        assert_eq!(b.micros - a.micros, 717_000);
        let (c, _) = parse_rfc3339(b"2024-05-15T00:39:40.172587575Z x").unwrap();
        assert_eq!(c.time_of_day(), (39 * 60 + 40) * 1_000_000 + 172_587);
        assert!(parse_rfc3339(b"2025-13-13T10:01:52Z").is_none());
        assert!(parse_rfc3339(b"2025-11-13T25:01:52Z").is_none());
        assert!(parse_rfc3339(b"2025-11-1").is_none());
        let (d, rest) = parse_rfc3339(b"2025-11-13T10:01:52+0800 host").unwrap();
        assert_eq!((d.micros - a.micros, rest), (-283_000, &b" host"[..]));
    }

    #[test]
    fn gin_and_go_log_dates() {
        let (gin, rest) = parse_slash_date(b"2025/08/28 - 10:25:21 | 200").unwrap();
        assert_eq!(rest, b" | 200");
        let (golog, _) = parse_slash_date(b"2025/08/28 10:25:22 x").unwrap();
        assert_eq!(golog.micros - gin.micros, 1_000_000);
    }

    #[test]
    fn llama_elapsed_prefix() {
        let (t, rest) = parse_llama_elapsed(b"0.00.177.887 I x").unwrap();
        assert_eq!(t, Timestamp { clock: Clock::Elapsed, micros: 177_887 });
        assert_eq!(rest, b" I x");
        let (t, _) = parse_llama_elapsed(b"12.05.000.001 W").unwrap();
        assert_eq!(t.micros, (12 * 60 + 5) * 1_000_000 + 1);
        assert!(parse_llama_elapsed(b"0.61.000.000").is_none());
        // Nine digits of minutes at most; every field whole, with its dot.
        assert_eq!(parse_llama_elapsed(b"123456789.00.000.001").unwrap().0.micros, 123_456_789 * 60_000_000 + 1);
        for bad in [&b"1234567890.00.000.001"[..], b"0.00.000.00", b"0.00.000.0x1", b".00.000.001", b"0.00,000.001"] {
            assert!(parse_llama_elapsed(bad).is_none(), "{bad:?}");
        }
        assert_eq!(parse_llama_elapsed(b"0.00.000.001").unwrap().1, b"");
    }

    #[test]
    fn journal_months() {
        assert_eq!(journal_month(b"Nov"), 11);
        assert_eq!(journal_month(b"sept"), 9);
        assert_eq!(journal_month("7月".as_bytes()), 7);
        assert_eq!(journal_month(b"sie"), 0);
        assert_eq!(journal_month(b"06.05"), 0);
        let a = journal_timestamp(8, 28, b"10:25:21").unwrap();
        let b = journal_timestamp(8, 28, b"10:25:27").unwrap();
        assert_eq!(b.micros - a.micros, 6_000_000);
        assert!(journal_timestamp(8, 28, b"10:25").is_none());
    }
}
