//! The streaming parser: bytes in, one [`Event`] per line out.

use std::io::Read;

use memchr::memchr;
use serde::Serialize;

use crate::classify::{classify, Context};
use crate::error::Error;
use crate::event::{Event, LineFlags};
use crate::limits::Limits;
use crate::lines::{LineSplitter, RawLine};
use crate::prefix;
use crate::time::{Clock, Timestamp};

/// Size of the blocks [`Parser::parse_reader`] reads.
pub const READ_BLOCK: usize = 256 << 10;

/// Counts over the whole input, for a reader to judge how much of it the events cover.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Stats {
    pub bytes: u64,
    pub lines: u64,
    /// Lines longer than the cap, cut (their rest was skipped).
    pub truncated_lines: u64,
    pub invalid_utf8_lines: u64,
    /// Lines that carried ANSI escape sequences (removed before classification).
    pub ansi_lines: u64,
    /// Lines with NUL bytes after the binary probe window.
    pub nul_lines: u64,
    /// Timestamps that were present but could not be read (the line was still classified).
    pub bad_timestamps: u64,
}

/// Incremental parser: [`feed`](Parser::feed) chunks of any size, then [`finish`](Parser::finish).
///
/// Memory is bounded by [`Limits::max_line`] (one assembled line and one ANSI-free copy of it) whatever
/// the input; events borrow from the chunk or from that buffer and are valid during the callback only.
#[derive(Debug)]
pub struct Parser {
    splitter: LineSplitter,
    ctx: Context,
    scratch: Vec<u8>,
    /// The message of a JSON log record, decoded ([`crate::jsonline`]).
    json: Vec<u8>,
    stats: Stats,
}

impl Parser {
    pub fn new(limits: Limits) -> Self {
        Parser {
            splitter: LineSplitter::new(&limits),
            ctx: Context::default(),
            scratch: Vec::new(),
            json: Vec::new(),
            stats: Stats::default(),
        }
    }

    /// Parse `chunk`, calling `sink` for each line it completes.
    pub fn feed<F: FnMut(&Event<'_>)>(&mut self, chunk: &[u8], mut sink: F) -> Result<(), Error> {
        let Parser { splitter, ctx, scratch, json, stats } = self;
        splitter.feed(chunk, |raw| line(ctx, scratch, json, stats, raw, &mut sink))
    }

    /// Parse the last line (one without a final newline) and return the counts.
    pub fn finish<F: FnMut(&Event<'_>)>(&mut self, mut sink: F) -> Result<Stats, Error> {
        let Parser { splitter, ctx, scratch, json, stats } = self;
        splitter.finish(|raw| line(ctx, scratch, json, stats, raw, &mut sink))?;
        stats.bytes = splitter.bytes();
        stats.lines = splitter.lines();
        Ok(*stats)
    }

    /// Parse everything `reader` yields.
    pub fn parse_reader<R: Read, F: FnMut(&Event<'_>)>(reader: R, limits: Limits, mut sink: F) -> Result<Stats, Error> {
        let mut reader = reader;
        let mut parser = Parser::new(limits);
        let mut block = vec![0u8; READ_BLOCK];
        loop {
            let n = match reader.read(&mut block) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(Error::Io(e)),
            };
            parser.feed(&block[..n], &mut sink)?;
        }
        parser.finish(sink)
    }
}

fn line<F: FnMut(&Event<'_>)>(
    ctx: &mut Context,
    scratch: &mut Vec<u8>,
    json: &mut Vec<u8>,
    stats: &mut Stats,
    raw: RawLine<'_>,
    sink: &mut F,
) {
    let bytes = raw.bytes;
    let mut flags = LineFlags { truncated: raw.truncated, ..LineFlags::default() };
    if raw.truncated {
        stats.truncated_lines += 1;
    }
    // Almost every line is plain ASCII without NUL or ESC: one pass over its words tells, and only a line that has
    // one of them is looked at again for which.
    let (nul, esc) = if plain_ascii(bytes) {
        (false, false)
    } else {
        if !bytes.is_ascii() && std::str::from_utf8(bytes).is_err() {
            flags.invalid_utf8 = true;
            stats.invalid_utf8_lines += 1;
        }
        (memchr(0, bytes).is_some(), memchr(0x1b, bytes).is_some())
    };
    if nul {
        flags.nul = true;
        stats.nul_lines += 1;
    }
    let text: &[u8] = if esc {
        flags.ansi = true;
        stats.ansi_lines += 1;
        strip_ansi(bytes, scratch);
        scratch
    } else {
        bytes
    };
    let prefixed = prefix::strip(text);
    // A JSON log record is read as the message it carries.
    let message: &[u8] = if prefixed.message.first() == Some(&b'{') && crate::jsonline::decode(prefixed.message, json) {
        json
    } else {
        prefixed.message
    };
    let classified = classify(message, ctx);
    if classified.bad_timestamp {
        flags.bad_timestamp = true;
        stats.bad_timestamps += 1;
    }
    let time = match (prefixed.time, classified.time) {
        (Some(outer), Some(inner)) => Some(refine(outer, inner)),
        (outer, inner) => outer.or(inner),
    };
    let event = Event {
        line: raw.number,
        offset: raw.offset,
        time,
        raw: bytes,
        text: message,
        flags,
        kind: classified.kind,
        before: classified.before,
    };
    sink(&event);
}

/// Whether `bytes` is ASCII with neither NUL nor ESC, a word of eight bytes to a step without branches (a byte of the
/// word `x` is zero exactly when `(x - 0x01…) & !x & 0x80…` is nonzero, and equal to ESC when that holds for
/// `x ^ 0x1b…`); a last short word is read again from the end, or padded.
#[inline]
fn plain_ascii(bytes: &[u8]) -> bool {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGH: u64 = u64::from_ne_bytes([0x80; 8]);
    const ESC: u64 = u64::from_ne_bytes([0x1b; 8]);
    let zero_byte = |x: u64| x.wrapping_sub(ONES) & !x;
    let special = |x: u64| x | zero_byte(x) | zero_byte(x ^ ESC);
    let word = |w: &[u8]| u64::from_ne_bytes(w.try_into().unwrap_or([0; 8]));
    let words = bytes.chunks_exact(8);
    let tail = match words.remainder() {
        [] => 0,
        _ if bytes.len() >= 8 => special(word(&bytes[bytes.len() - 8..])),
        rest => {
            let mut padded = [b' '; 8];
            padded[..rest.len()].copy_from_slice(rest);
            special(u64::from_ne_bytes(padded))
        }
    };
    words.fold(tail, |acc, w| acc | special(word(w))) & HIGH == 0
}

/// The outer timestamp decides the clock of the line (so all lines of one log share it); when an inner
/// civil timestamp falls within the outer one's second, it lends its sub-second digits.
fn refine(outer: Timestamp, inner: Timestamp) -> Timestamp {
    if inner.clock != Clock::Civil || outer.clock == Clock::Elapsed || outer.micros % 1_000_000 != 0 {
        return outer;
    }
    let delta = inner.time_of_day() - outer.time_of_day();
    if (0..1_000_000).contains(&delta) {
        Timestamp { clock: outer.clock, micros: outer.micros + delta }
    } else {
        outer
    }
}

/// Copy `src` into `dst` without ANSI escape sequences (CSI `ESC [ … final`, OSC `ESC ] … BEL|ESC \`,
/// and two-byte `ESC x`). Work is linear in `src`; `dst` is reused.
pub fn strip_ansi(src: &[u8], dst: &mut Vec<u8>) {
    dst.clear();
    let mut i = 0;
    while i < src.len() {
        let Some(esc) = next_escape(&src[i..]) else {
            dst.extend_from_slice(&src[i..]);
            return;
        };
        dst.extend_from_slice(&src[i..i + esc]);
        i += esc + 1;
        match src.get(i) {
            Some(b'[') => {
                i += 1;
                while let Some(&b) = src.get(i) {
                    i += 1;
                    if (0x40..=0x7e).contains(&b) {
                        break;
                    }
                }
            }
            Some(b']') => {
                i += 1;
                while let Some(&b) = src.get(i) {
                    i += 1;
                    if b == 0x07 {
                        break;
                    }
                    if b == 0x1b && src.get(i) == Some(&b'\\') {
                        i += 1;
                        break;
                    }
                }
            }
            Some(_) => i += 1,
            None => {}
        }
    }
}

/// The first ESC of `s`. Escape sequences come in clusters (a colour set, a few bytes, the colour reset): the next one
/// is looked for a word at a time in the next few words, and beyond them with `memchr`.
fn next_escape(s: &[u8]) -> Option<usize> {
    crate::patterns::find_byte_near(0x1b, s)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The next escape is the one the byte-by-byte scan of the near bytes, then `memchr`, found: an ESC at every place
    /// of lines around the near words' length, alone and in a cluster.
    #[test]
    fn the_next_escape_is_where_the_scan_before_found_it() {
        fn before(s: &[u8]) -> Option<usize> {
            const NEAR: usize = 16;
            let near = &s[..s.len().min(NEAR)];
            match near.iter().position(|&b| b == 0x1b) {
                Some(at) => Some(at),
                None if s.len() > NEAR => memchr(0x1b, &s[NEAR..]).map(|at| at + NEAR),
                None => None,
            }
        }
        for len in 0..80 {
            for at in 0..=len {
                let mut line = vec![b'm'; len];
                if at < len {
                    line[at] = 0x1b;
                }
                assert_eq!(next_escape(&line), before(&line), "{line:?}");
                for k in (at + 3..len).step_by(5) {
                    line[k] = 0x1b;
                }
                assert_eq!(next_escape(&line), before(&line), "{line:?}");
            }
        }
    }

    #[test]
    fn ansi_sequences_are_removed() {
        let mut out = Vec::new();
        strip_ansi(b"\x1b[34m0.00.177.887\x1b[0m \x1b[32mI \x1b[0mload_backend: x\x1b]0;title\x07!\x1b", &mut out);
        assert_eq!(out, b"0.00.177.887 I load_backend: x!");
    }

    #[test]
    fn plain_ascii_is_ascii_without_nul_or_esc() {
        let naive = |b: &[u8]| b.iter().all(|&c| c.is_ascii() && c != 0 && c != 0x1b);
        for len in 0..40 {
            for at in 0..len {
                for special in [0u8, 0x1b, 0x80, 0xff, 0x01, 0x1a, 0x1c, 0x7f, b' '] {
                    let mut line = vec![b'a'; len];
                    line[at] = special;
                    assert_eq!(plain_ascii(&line), naive(&line), "{line:?}");
                }
            }
        }
    }

    #[test]
    fn refine_takes_subseconds_from_the_same_second_only() {
        let outer = Timestamp { clock: Clock::Journal, micros: 10 * 86_400_000_000 + 3_600_000_000 };
        let inner = Timestamp::civil(20_000 * 86_400_000_000 + 3_600_283_000);
        assert_eq!(refine(outer, inner).micros - outer.micros, 283_000);
        let other_hour = Timestamp::civil(20_000 * 86_400_000_000 + 7_200_283_000);
        assert_eq!(refine(outer, other_hour), outer);
    }
}
