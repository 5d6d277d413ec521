//! Splitting a byte stream into lines in bounded memory.
//!
//! Lines wholly inside a chunk are handed out as borrowed slices (found with `memchr`, no copy); only a
//! line split across chunks is assembled in a buffer, and that buffer never grows past the line cap: the
//! rest of an over-long line is counted and skipped, and the line is flagged as truncated. A single
//! 1 GB line therefore costs the cap, not a gigabyte.
//!
//! A line ends at `\n`, at `\r\n` (one end, not two) and at a lone `\r` (old Mac files, some Windows pastes, and
//! progress output that rewrites its line): a log whose lines end in CR alone is as many lines as it shows, not one.

use memchr::{memchr, memchr2};

use crate::error::Error;
use crate::limits::Limits;

/// One line as split: its number, where it starts, its bytes (without its `\n`, `\r\n` or `\r`).
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
    /// The last line ended in `\r`: a `\n` right after it (in this chunk or the next) is the same line end.
    after_cr: bool,
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
            after_cr: false,
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
        if self.after_cr && !chunk.is_empty() {
            self.after_cr = false;
            if chunk[0] == b'\n' {
                pos = 1;
            }
        }
        while pos < chunk.len() {
            let rest = &chunk[pos..];
            match memchr2(b'\n', b'\r', rest) {
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
                        let line = RawLine { number: self.next_number, offset: self.line_start, bytes, truncated };
                        self.next_number += 1;
                        f(line);
                    }
                    pos += nl + 1;
                    if rest[nl] == b'\r' {
                        match rest.get(nl + 1) {
                            Some(b'\n') => pos += 1,
                            Some(_) => {}
                            None => self.after_cr = true,
                        }
                    }
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
        let line = RawLine { number: self.next_number, offset: self.line_start, bytes, truncated };
        self.next_number += 1;
        self.in_line = false;
        self.pending_truncated = false;
        line
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
    fn a_lone_cr_ends_a_line_and_crlf_is_one_end_however_chunked() {
        // CR-only (old Mac, pastes, progress output), CRLF, LF and a CR right before the end, mixed.
        let input: &[u8] = b"a\rbb\r\ncc\n\r\rdd\r\n\nlast\r";
        let expected = vec![
            (1, 0, b"a".to_vec(), false),
            (2, 2, b"bb".to_vec(), false),
            (3, 6, b"cc".to_vec(), false),
            (4, 9, b"".to_vec(), false),
            (5, 10, b"".to_vec(), false),
            (6, 11, b"dd".to_vec(), false),
            (7, 15, b"".to_vec(), false),
            (8, 16, b"last".to_vec(), false),
        ];
        assert_eq!(split(&[input], 100), expected);
        for size in 1..input.len() {
            let pieces: Vec<&[u8]> = input.chunks(size).collect();
            assert_eq!(split(&pieces, 100), expected, "chunks of {size}");
        }
        // The CR of a CRLF at the end of one chunk, its LF at the start of the next, on the pending path too.
        assert_eq!(split(&[b"xy\r", b"\nz"], 100), vec![(1, 0, b"xy".to_vec(), false), (2, 4, b"z".to_vec(), false)]);
        assert_eq!(split(&[b"x", b"y\r", b"\n", b"z"], 100), split(&[b"xy\r\nz"], 100));
    }

    #[test]
    fn cr_ends_over_long_lines_too() {
        let whole = split(&[b"0123456789\rab\r\n"], 4);
        assert_eq!(whole, vec![(1, 0, b"0123".to_vec(), true), (2, 11, b"ab".to_vec(), false)]);
        assert_eq!(whole, split(&[b"012", b"3456", b"789\r", b"ab\r", b"\n"], 4));
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
