//! Splitting a byte stream into lines in bounded memory.
//!
//! Lines wholly inside a chunk are handed out as borrowed slices (found with `memchr`, no copy); only a
//! line split across chunks is assembled in a buffer, and that buffer never grows past the line cap: the
//! rest of an over-long line is counted and skipped, and the line is flagged as truncated. A single
//! 1 GB line therefore costs the cap, not a gigabyte.

use memchr::memchr;

use crate::error::Error;
use crate::Limits;

/// One line as split: its number, where it starts, its bytes (without `\n` or a trailing `\r`).
#[derive(Clone, Copy, Debug)]
pub struct RawLine<'a> {
    pub number: u64,
    pub offset: u64,
    pub bytes: &'a [u8],
    pub truncated: bool,
}

/// Incremental line splitter.
#[derive(Debug)]
pub struct LineSplitter {
    max_line: usize,
    binary_probe: u64,
    /// Bytes of a line begun in an earlier chunk (at most `max_line`).
    pending: Vec<u8>,
    /// The pending line ran past the cap; its remaining bytes are being skipped.
    pending_truncated: bool,
    /// A line is in progress (pending may be empty if it is all skipped bytes or nothing yet).
    in_line: bool,
    line_start: u64,
    next_number: u64,
    consumed: u64,
    failed: bool,
    /// The first `binary_probe` bytes are still being collected.
    probing: bool,
    probe: Vec<u8>,
}

impl LineSplitter {
    pub fn new(limits: &Limits) -> Self {
        LineSplitter {
            max_line: limits.max_line.max(1),
            binary_probe: limits.binary_probe as u64,
            pending: Vec::new(),
            pending_truncated: false,
            in_line: false,
            line_start: 0,
            next_number: 1,
            consumed: 0,
            failed: false,
            probing: limits.binary_probe > 0,
            probe: Vec::new(),
        }
    }

    /// Bytes consumed so far.
    pub fn bytes(&self) -> u64 {
        self.consumed
    }

    /// Lines handed out so far.
    pub fn lines(&self) -> u64 {
        self.next_number - 1
    }

    /// Split `chunk`, calling `f` for every line it completes.
    ///
    /// Fails, and stays failed, when a NUL byte occurs within the first `binary_probe` bytes of the
    /// stream: that input is a binary file, not a log.
    ///
    /// Nothing is handed out before the probe window has been checked: the first `binary_probe` bytes
    /// are held back until they are complete, so a binary file yields no lines however it is chunked.
    pub fn feed<F: FnMut(RawLine<'_>)>(&mut self, chunk: &[u8], mut f: F) -> Result<(), Error> {
        if self.failed {
            return Err(Error::Fused);
        }
        let mut chunk = chunk;
        if self.probing {
            let want = self.binary_probe.saturating_sub(self.probe.len() as u64);
            let take = usize::try_from(want).unwrap_or(usize::MAX).min(chunk.len());
            self.probe.extend_from_slice(&chunk[..take]);
            chunk = &chunk[take..];
            if (self.probe.len() as u64) < self.binary_probe {
                return Ok(());
            }
            self.end_probe(&mut f)?;
        }
        self.split(chunk, f);
        Ok(())
    }

    /// Check the held-back probe bytes for NUL, then split them.
    fn end_probe<F: FnMut(RawLine<'_>)>(&mut self, f: &mut F) -> Result<(), Error> {
        self.probing = false;
        let probe = std::mem::take(&mut self.probe);
        if let Some(at) = memchr(0, &probe) {
            self.failed = true;
            return Err(Error::Binary { offset: at as u64 });
        }
        self.split(&probe, f);
        Ok(())
    }

    fn split<F: FnMut(RawLine<'_>)>(&mut self, chunk: &[u8], mut f: F) {
        let base = self.consumed;
        let mut pos = 0usize;
        while pos < chunk.len() {
            let rest = &chunk[pos..];
            match memchr(b'\n', rest) {
                Some(nl) => {
                    let body = &rest[..nl];
                    if self.in_line {
                        self.append(body);
                        let bytes = std::mem::take(&mut self.pending);
                        f(self.finish_line(&bytes));
                        self.pending = bytes;
                        self.pending.clear();
                    } else {
                        self.line_start = base + pos as u64;
                        let truncated = body.len() > self.max_line;
                        let bytes = if truncated { &body[..self.max_line] } else { body };
                        let line = RawLine {
                            number: self.next_number,
                            offset: self.line_start,
                            bytes: trim_cr(bytes, truncated),
                            truncated,
                        };
                        self.next_number += 1;
                        f(line);
                    }
                    pos += nl + 1;
                }
                None => {
                    if !self.in_line {
                        self.in_line = true;
                        self.line_start = base + pos as u64;
                    }
                    self.append(rest);
                    pos = chunk.len();
                }
            }
        }
        self.consumed += chunk.len() as u64;
    }

    /// Hand out a last line that has no newline.
    pub fn finish<F: FnMut(RawLine<'_>)>(&mut self, mut f: F) -> Result<(), Error> {
        if self.failed {
            return Err(Error::Fused);
        }
        if self.probing {
            self.end_probe(&mut f)?;
        }
        if self.in_line {
            let bytes = std::mem::take(&mut self.pending);
            f(self.finish_line(&bytes));
        }
        self.failed = true;
        Ok(())
    }

    fn append(&mut self, part: &[u8]) {
        let room = self.max_line - self.pending.len();
        if part.len() > room {
            self.pending_truncated = true;
        }
        self.pending.extend_from_slice(&part[..part.len().min(room)]);
    }

    /// The pending line as a [`RawLine`]; resets the in-line state.
    fn finish_line<'b>(&mut self, bytes: &'b [u8]) -> RawLine<'b> {
        let truncated = self.pending_truncated;
        let line =
            RawLine { number: self.next_number, offset: self.line_start, bytes: trim_cr(bytes, truncated), truncated };
        self.next_number += 1;
        self.in_line = false;
        self.pending_truncated = false;
        line
    }
}

/// Drop a trailing `\r` (CRLF logs); a truncated line keeps its bytes as cut.
fn trim_cr(bytes: &[u8], truncated: bool) -> &[u8] {
    match bytes.split_last() {
        Some((b'\r', head)) if !truncated => head,
        _ => bytes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(chunks: &[&[u8]], max_line: usize) -> Vec<(u64, u64, Vec<u8>, bool)> {
        let limits = Limits { max_line, ..Limits::default() };
        let mut s = LineSplitter::new(&limits);
        let mut out = Vec::new();
        for c in chunks {
            s.feed(c, |l| out.push((l.number, l.offset, l.bytes.to_vec(), l.truncated))).unwrap();
        }
        s.finish(|l| out.push((l.number, l.offset, l.bytes.to_vec(), l.truncated))).unwrap();
        out
    }

    #[test]
    fn chunk_boundaries_do_not_change_lines() {
        let whole = split(&[b"ab\r\ncd\n\nlast"], 100);
        let bytewise: Vec<&[u8]> = b"ab\r\ncd\n\nlast".chunks(1).collect();
        assert_eq!(whole, split(&bytewise, 100));
        assert_eq!(
            whole,
            vec![
                (1, 0, b"ab".to_vec(), false),
                (2, 4, b"cd".to_vec(), false),
                (3, 7, b"".to_vec(), false),
                (4, 8, b"last".to_vec(), false)
            ]
        );
    }

    #[test]
    fn long_lines_are_cut_in_both_paths() {
        let whole = split(&[b"0123456789\nab\n"], 4);
        assert_eq!(whole[0], (1, 0, b"0123".to_vec(), true));
        assert_eq!(whole[1], (2, 11, b"ab".to_vec(), false));
        let pieces = split(&[b"012", b"3456", b"789\nab\n"], 4);
        assert_eq!(whole, pieces);
    }

    #[test]
    fn nul_in_the_probe_window_is_an_error() {
        let limits = Limits { binary_probe: 8, ..Limits::default() };
        let mut s = LineSplitter::new(&limits);
        s.feed(b"abc\0", |_| {}).unwrap();
        assert!(matches!(s.finish(|_| {}), Err(Error::Binary { offset: 3 })));
        assert!(matches!(s.feed(b"x", |_| {}), Err(Error::Fused)));
        let mut late = LineSplitter::new(&limits);
        late.feed(b"12345678", |_| {}).unwrap();
        late.feed(b"\0\n", |_| {}).unwrap();
        // Lines before a NUL in the window are not handed out, however the input is chunked.
        let mut split = LineSplitter::new(&limits);
        let mut lines = 0;
        split.feed(b"a\nb\n", |_| lines += 1).unwrap();
        split.feed(b"c\0", |_| lines += 1).unwrap();
        assert!(matches!(split.finish(|_| lines += 1), Err(Error::Binary { offset: 5 })));
        assert_eq!(lines, 0);
    }
}
