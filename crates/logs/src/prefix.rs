//! The outer layers a log line picks up on its way to a file, stripped before the line is classified.
//!
//! Recognised, in any stacking order (at most [`MAX_LAYERS`] layers):
//! - Docker Compose: `ollama  | `, `open-webui-ollama-1  | ` (container name of up to
//!   [`MAX_COMPOSE_NAME`] bytes, spaces, `| `);
//! - Docker `--timestamps`: `2024-05-15T00:39:40.172587575Z `; Docker Desktop: `2025-03-05 09:00:31 `;
//!   journald `-o short-iso`: `2025-11-13T10:01:52+0800 host ollama[1067]: `;
//! - syslog/journal: `Nov 13 10:01:52 host ollama[1067]: ` (the month name may be in any locale, e.g.
//!   `sie 28`, `7月 24`, `06.05`: only English abbreviations and numbers are read as months);
//! - Go's standard logger (Ollama before 0.1.30): `2024/01/26 09:54:31 `;
//! - the terminal spinner Ollama's CLI draws (`⠋ `, Unicode Braille patterns) when a user pastes the
//!   server's output from the same terminal;
//! - llama.cpp's `common_log` prefix: `0.00.177.887 I ` (elapsed time and level letter).
//!
//! The outermost timestamp is the one the timeline uses (see [`crate::Parser`]); the message that
//! remains is what [`crate::classify`] reads.

use crate::time::{
    clock_token, is_clock_token, journal_month, journal_timestamp_at, parse_llama_elapsed, parse_rfc3339,
    parse_slash_date, Timestamp,
};

/// Most prefix layers stripped from one line.
pub const MAX_LAYERS: usize = 4;

/// A line with its outer layers removed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Prefixed<'a> {
    pub message: &'a [u8],
    /// The outermost timestamp found.
    pub time: Option<Timestamp>,
}

/// Strip the outer layers of `line`.
pub fn strip(line: &[u8]) -> Prefixed<'_> {
    let mut message = line;
    let mut time = None;
    for _ in 0..MAX_LAYERS {
        let (rest, stamp) = match strip_one(message) {
            Some(step) => step,
            None => break,
        };
        if time.is_none() {
            time = stamp;
        }
        message = rest;
    }
    Prefixed { message, time }
}

fn strip_one(s: &[u8]) -> Option<(&[u8], Option<Timestamp>)> {
    let first = *s.first()?;
    if first.is_ascii_digit() {
        // A date's year is four digits and then its separator: the fifth byte tells which form can follow (neither
        // of them for llama.cpp's `M.SS.mmm.uuu`, whose fifth byte is a digit or a dot).
        let separator = s.get(4).copied();
        if let Some((t, rest)) = separator.filter(|&b| b == b'-').and_then(|_| parse_rfc3339(s)) {
            // LM Studio's developer log writes the level after the time and the message on the next line:
            // `2025-08-07 16:44:58 [DEBUG]` alone on its line.
            if let Some(level) = rest.strip_prefix(b" ").or_else(|| rest.strip_prefix(b"  ")) {
                if let Some(after) = strip_level(level.trim_ascii_start()) {
                    return Some((after, Some(t)));
                }
            }
            let rest = rest.strip_prefix(b" ")?;
            // journald's short-iso output: the host and the program follow the time.
            let rest = strip_host_ident(rest, true).unwrap_or(rest);
            return Some((rest, Some(t)));
        }
        if let Some((t, rest)) = separator.filter(|&b| b == b'/').and_then(|_| parse_slash_date(s)) {
            return Some((rest.strip_prefix(b" ")?, Some(t)));
        }
        if let Some((t, rest)) = parse_llama_elapsed(s) {
            // `M.SS.mmm.uuu L ` with L the level letter.
            if let [b' ', level, b' ', tail @ ..] = rest {
                if matches!(level, b'I' | b'W' | b'E' | b'D' | b'T') {
                    return Some((tail, Some(t)));
                }
            }
            if rest.is_empty() || rest == b" " {
                return Some((&[], Some(t)));
            }
        }
    }
    if let Some(rest) = strip_spinner(s) {
        return Some((rest, None));
    }
    if first == b'[' {
        if let Some(step) = strip_bracketed_time(s) {
            return Some(step);
        }
        if let Some(rest) = strip_level(s) {
            return Some((rest, None));
        }
        return strip_bracketed(s).map(|rest| (rest, None));
    }
    // NVIDIA compute-sanitizer writes `=========` and an indent before every line of its report.
    if first == b'=' && s.starts_with(b"=========") {
        let rest = &s[9..];
        return Some((trim_spaces(rest), None));
    }
    // Both remaining forms have a first word followed by spaces and then `|` (Compose, a service name of
    // up to MAX_COMPOSE_NAME bytes) or a digit (a journal's day or time, after a short word): anything
    // else is a message.
    let space = crate::patterns::find_byte_near(b' ', s.get(..s.len().min(MAX_COMPOSE_NAME + 1))?)?;
    let after_spaces = s[space..].iter().find(|&&b| b != b' ')?;
    if *after_spaces == b'|' {
        return strip_compose(s).map(|rest| (rest, None));
    }
    if space < JOURNAL_FIRST_WORD && after_spaces.is_ascii_digit() {
        return strip_journal(s);
    }
    None
}

/// Longest first word (a month name or a `DD.MM` date) before a journal line's day or time, plus one.
const JOURNAL_FIRST_WORD: usize = 16;

/// Longest Docker Compose prefix name read, in bytes. Compose writes the container's name (project,
/// service and replica number: `open-webui-ollama-1`) padded with spaces to the longest name of the
/// project, so the name has no fixed length: project and service names are chosen by users and grow
/// long (`my-company-open-webui-stack-ollama-gpu-1`). A bound is still needed: it keeps the search for the
/// `|` short on every line whatever the log, and a first word of more than 128 bytes before ` | ` is far
/// more likely the log's own text than a container name.
pub const MAX_COMPOSE_NAME: usize = 128;

/// Ollama's CLI spinner: a Braille pattern (U+2800–U+28FF, UTF-8 `E2 A0..A3 xx`) and a space.
fn strip_spinner(s: &[u8]) -> Option<&[u8]> {
    match s {
        [0xE2, 0xA0..=0xA3, 0x80..=0xBF, b' ', rest @ ..] => Some(rest),
        _ => None,
    }
}

/// A bracketed prefix that carries no time of the log's clock: llama-server's router and the tools that run it
/// print a child's output behind its pid (`[38593] `); a log viewer's own clock (`[7:35:56 PM] `); the kernel's
/// seconds since boot in `dmesg` output (`[   34.965321] `).
fn strip_bracketed(s: &[u8]) -> Option<&[u8]> {
    let close = memchr::memchr(b']', s.get(..s.len().min(24))?)?;
    let inner = &s[1..close];
    let rest = s[close + 1..].strip_prefix(b" ")?;
    let digits =
        |t: &[u8], len: std::ops::RangeInclusive<usize>| len.contains(&t.len()) && t.iter().all(u8::is_ascii_digit);
    let pid = digits(inner, 1..=10);
    // A 12-hour clock writes the hour in one or two digits: `7:35:56 PM`.
    let clock = inner.strip_suffix(b" AM").or_else(|| inner.strip_suffix(b" PM")).is_some_and(|c| {
        let hour = c.iter().position(|&b| b == b':').unwrap_or(c.len());
        digits(&c[..hour], 1..=2) && is_clock_token(&[b"0".as_slice(), c].concat()[hour.saturating_sub(1)..])
    });
    let uptime = {
        let t = trim_spaces(inner);
        let dot = t.iter().position(|&b| b == b'.').unwrap_or(t.len());
        dot < t.len() && digits(&t[..dot], 1..=10) && digits(&t[dot + 1..], 6..=6)
    };
    (pid || clock || uptime).then_some(rest)
}

/// A date and time in brackets, then a level: LM Studio's engine log `[2025-10-09 11:58:09][DEBUG] ` and its app log
/// `[2026-01-01 16:01:39.279] [error] `; the level bracket is optional.
fn strip_bracketed_time(s: &[u8]) -> Option<(&[u8], Option<Timestamp>)> {
    let inner = s.get(1..)?;
    if !inner.first().is_some_and(u8::is_ascii_digit) {
        return None;
    }
    let (t, rest) = parse_rfc3339(inner)?;
    let rest = rest.strip_prefix(b"]")?;
    let rest = rest.strip_prefix(b" ").unwrap_or(rest);
    Some((strip_level(rest).unwrap_or(rest), Some(t)))
}

/// A log level in brackets and the space after it (`[DEBUG] `, `[error] `, `[WARN]` ending the line).
fn strip_level(s: &[u8]) -> Option<&[u8]> {
    const LEVELS: [&[u8]; 8] = [b"DEBUG", b"INFO", b"WARN", b"WARNING", b"ERROR", b"TRACE", b"VERBOSE", b"FATAL"];
    let inner = s.strip_prefix(b"[")?;
    let close = memchr::memchr(b']', inner.get(..inner.len().min(9))?)?;
    let word = trim_spaces(&inner[..close]);
    if !LEVELS.iter().any(|l| l.eq_ignore_ascii_case(word)) {
        return None;
    }
    let rest = &inner[close + 1..];
    match rest {
        [] => Some(rest),
        [b' ', tail @ ..] => Some(tail),
        _ => None,
    }
}

/// Split off the next space-separated token (any run of spaces separates).
fn token(s: &[u8]) -> Option<(&[u8], &[u8])> {
    let s = trim_spaces(s);
    if s.is_empty() {
        return None;
    }
    let end = s.iter().position(|&b| b == b' ').unwrap_or(s.len());
    Some((&s[..end], &s[end..]))
}

fn trim_spaces(s: &[u8]) -> &[u8] {
    let start = s.iter().position(|&b| b != b' ').unwrap_or(s.len());
    &s[start..]
}

/// `host ident[pid]: ` (or `host ident: ` unless `need_pid`); returns the message after it.
fn strip_host_ident(s: &[u8], need_pid: bool) -> Option<&[u8]> {
    let (host, rest) = token(s)?;
    // One pass over the short host word (two `contains` would be two `memchr` calls).
    if host.iter().any(|&b| b == b':' || b == b'=') {
        return None;
    }
    let (ident, rest) = token(rest)?;
    let name = ident.strip_suffix(b":")?;
    let name = match name.strip_suffix(b"]") {
        Some(inner) => {
            let open = inner.iter().rposition(|&b| b == b'[')?;
            let pid = &inner[open + 1..];
            if pid.is_empty() || !pid.iter().all(u8::is_ascii_digit) {
                return None;
            }
            &inner[..open]
        }
        None if need_pid => return None,
        None => name,
    };
    if name.is_empty()
        || !name.iter().all(|&b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'@' | b'/'))
    {
        return None;
    }
    // One space separates the ident from the message; further spaces are the message's own.
    Some(rest.strip_prefix(b" ").unwrap_or(rest))
}

/// `MON DAY HH:MM:SS host ident[pid]: ` or `DD.MM HH:MM:SS host ident[pid]: `.
fn strip_journal(s: &[u8]) -> Option<(&[u8], Option<Timestamp>)> {
    let (date1, rest) = token(s)?;
    if date1.len() > 12 || date1.contains(&b'=') || date1.contains(&b':') || date1.contains(&b'[') {
        return None;
    }
    let (second, rest2) = token(rest)?;
    // The time of day is read once: the test that a token is one gives its value.
    let (month, day, tod, rest) = if let Some(tod) = clock_token(second) {
        let (day, month) = day_dot_month(date1)?;
        (month, day, tod, rest2)
    } else {
        if second.len() > 2 || !second.iter().all(u8::is_ascii_digit) {
            return None;
        }
        let (clock, rest3) = token(rest2)?;
        let tod = clock_token(clock)?;
        let day = second.iter().fold(0u32, |v, &b| v * 10 + u32::from(b - b'0'));
        (journal_month(date1), day, tod, rest3)
    };
    let message = strip_host_ident(rest, false)?;
    Some((message, Some(journal_timestamp_at(month, day, tod))))
}

/// A journal date written as one token, `DD.MM` (day first, as the locales that use dots write it).
fn day_dot_month(token: &[u8]) -> Option<(u32, u32)> {
    let dot = token.iter().position(|&b| b == b'.')?;
    let (d, m) = (&token[..dot], &token[dot + 1..]);
    let num = |t: &[u8]| -> Option<u32> {
        (!t.is_empty() && t.len() <= 2 && t.iter().all(u8::is_ascii_digit))
            .then(|| t.iter().fold(0u32, |v, &b| v * 10 + u32::from(b - b'0')))
    };
    let (day, month) = (num(d)?, num(m)?);
    ((1..=31).contains(&day) && (1..=12).contains(&month)).then_some((day, month))
}

/// Docker Compose's `service  | ` (the name padded to the project's longest, then ` | `): a name of
/// `[A-Za-z0-9._-]`, at most [`MAX_COMPOSE_NAME`] bytes, one or more spaces, and `|` followed by a space or
/// the end of the line (an empty log line, its trailing space trimmed by a paste).
fn strip_compose(s: &[u8]) -> Option<&[u8]> {
    let name_end = s.iter().position(|&b| !(b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.')))?;
    if name_end == 0 || name_end > MAX_COMPOSE_NAME {
        return None;
    }
    let after = &s[name_end..];
    let spaces = after.iter().position(|&b| b != b' ')?;
    if spaces == 0 {
        return None;
    }
    let rest = after[spaces..].strip_prefix(b"|")?;
    match rest {
        [] => Some(rest),
        [b' ', message @ ..] => Some(message),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::Clock;

    fn msg(line: &str) -> (String, Option<Clock>) {
        let p = strip(line.as_bytes());
        (String::from_utf8_lossy(p.message).into_owned(), p.time.map(|t| t.clock))
    }

    #[test]
    fn bracketed_prefixes_without_a_log_clock() {
        // ggml-org/llama.cpp#21724 (comment by SteelPh0enix, 2026-05-08): a viewer's 12-hour clock, a journal line with
        // a Polish month and llm-router's `[pid] ` before llama-server's output.
        let line =
            "[7:35:56 PM] maj 08 19:35:55 RX-78-FPC llm-router[15732]: [38593] radv/amdgpu: The CS has been cancelled";
        assert_eq!(msg(line), ("radv/amdgpu: The CS has been cancelled".into(), Some(Clock::Journal)));
        // ROCm/legacy-rocm-build#6127: dmesg's seconds since boot.
        assert_eq!(
            msg("[   34.965321] amdgpu 0000:03:00.0: amdgpu: ring comp_1.1.0 timeout, signaled seq=7, emitted seq=9").0,
            "amdgpu 0000:03:00.0: amdgpu: ring comp_1.1.0 timeout, signaled seq=7, emitted seq=9"
        );
        // Not prefixes: Gin's tag, gdb's thread notes, a bracket that is the message's own, an hour past 12 digits.
        for line in ["[GIN] 2025/03/08 - 03:20:41 | 500 |", "[New LWP 2214]", "[1234567890123] x", "[123:35:56 PM] x"] {
            assert_eq!(msg(line).0, line, "{line}");
        }
    }

    #[test]
    fn journal_lines_from_issues() {
        // Lines as quoted in ollama/ollama issues 13070, 12106, 10977 and 5904.
        assert_eq!(
            msg("Nov 13 10:01:52 adamDesktopLinux ollama[1067]:   Device 0: AMD Radeon RX 6700 XT, gfx1030"),
            ("  Device 0: AMD Radeon RX 6700 XT, gfx1030".into(), Some(Clock::Journal))
        );
        assert_eq!(
            msg("sie 28 10:25:27 razer ollama[49992]: SIGSEGV: segmentation violation"),
            ("SIGSEGV: segmentation violation".into(), Some(Clock::Journal))
        );
        assert_eq!(
            msg("06.05 13:15:31 ASTOR ollama[2690]: runtime.goexit({})"),
            ("runtime.goexit({})".into(), Some(Clock::Journal))
        );
        assert_eq!(
            msg("7月 24 15:40:33 buaa-KVM ollama[458186]: time=2024-07-24T15:40:33.873+08:00 level=INFO"),
            ("time=2024-07-24T15:40:33.873+08:00 level=INFO".into(), Some(Clock::Journal))
        );
    }

    #[test]
    fn docker_and_compose_prefixes() {
        assert_eq!(
            msg("2024-05-15T00:39:40.172587575Z llm_load_vocab: missing pre-tokenizer type"),
            ("llm_load_vocab: missing pre-tokenizer type".into(), Some(Clock::Civil))
        );
        assert_eq!(msg("2025-03-05 09:00:31 SIGABRT: abort"), ("SIGABRT: abort".into(), Some(Clock::Civil)));
        assert_eq!(
            msg("ollama  | time=2025-12-03T03:16:50.172Z level=INFO"),
            ("time=2025-12-03T03:16:50.172Z level=INFO".into(), None)
        );
    }

    #[test]
    fn compose_names_of_any_length_up_to_the_bound() {
        // Compose v2 pads every container name to the project's longest and writes ` | ` after it.
        let long = "a".repeat(MAX_COMPOSE_NAME);
        for prefix in [
            "open-webui-ollama-1  | ".to_string(),
            "my-company-open-webui-stack-ollama-gpu-1 | ".to_string(),
            format!("{long} | "),
        ] {
            let line = format!("{prefix}time=2025-12-03T03:16:50.172Z level=INFO");
            assert_eq!(msg(&line), ("time=2025-12-03T03:16:50.172Z level=INFO".into(), None), "{line}");
        }
        // An empty log line whose trailing space a paste trimmed.
        assert_eq!(msg("open-webui-ollama-1  |"), (String::new(), None));
        // Compose outside a journal: both layers go, the journal's time is kept.
        assert_eq!(
            msg("open-webui-ollama-1  | Nov 13 10:01:52 host ollama[1067]: SIGSEGV: segmentation violation"),
            ("SIGSEGV: segmentation violation".into(), Some(Clock::Journal))
        );
        // One byte over the bound, a `|` not followed by a space, or no space before it: not a prefix.
        for line in [
            format!("{long}a | SIGSEGV: segmentation violation"),
            "open-webui-ollama-1  |SIGSEGV".to_string(),
            "open-webui-ollama-1| SIGSEGV".to_string(),
        ] {
            assert_eq!(msg(&line), (line.clone(), None), "{line}");
        }
    }

    #[test]
    fn llama_prefix_spinner_and_go_log() {
        assert_eq!(msg("0.00.177.887 I load_backend: loaded"), ("load_backend: loaded".into(), Some(Clock::Elapsed)));
        assert_eq!(msg("⠋ load_tensors: offloading"), ("load_tensors: offloading".into(), None));
        assert_eq!(
            msg("2024/01/26 09:54:31 images.go:857: INFO total blobs: 0"),
            ("images.go:857: INFO total blobs: 0".into(), Some(Clock::Civil))
        );
    }

    #[test]
    fn messages_that_only_look_like_prefixes_stay_whole() {
        for line in [
            "load_tensors: offloaded 23/23 layers to GPU",
            "time=2025-02-26T00:25:18.930Z level=INFO source=server.go:596 msg=x",
            "[GIN] 2025/08/28 - 10:25:21 | 200 | 17.696002893s |       127.0.0.1 | POST     \"/api/generate\"",
            "ggml_vulkan: 0 = Intel(R) UHD Graphics 620 (KBL GT2) (Intel open-source Mesa driver) | uma: 1",
            "goroutine 29 gp=0xc000585dc0 m=0 mp=0x64b1b235c780 [syscall]:",
            "12: 0x7f3a0000 ggml_abort",
        ] {
            assert_eq!(msg(line), (line.to_string(), None), "{line}");
        }
    }
}
