//! The trace file as a writer sees it: created under the names of [`crate::naming`] (exclusively,
//! so no trace is ever overwritten), a header that is always written whole, then lines written
//! within the byte budget, and a `truncated` record when the budget is spent or a write fails
//! (`docs/trace-format.md`, "Truncated").
//!
//! Every writer of the format behaves the same at the file's edges, so this lives here. It uses std
//! only (no locks of its own; the caller serialises its use) and allocates only when a trace is cut.
//! A writer whose file has a second writer (the CUDA/HIP observer's crash handler writes records
//! into it from a signal handler) says so through [`CoWriter`].

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::{FileExt, OpenOptionsExt};

use crate::clock::now_ns;
use crate::env::Destination;
use crate::record;

/// Bytes kept free under the budget for the `truncated` record (its longest form is far shorter).
pub const CUT_RECORD_RESERVE: u64 = 512;
/// How far back from the end a write error may cut the file to make room for the `truncated`
/// record, and how many line boundaries it tries.
pub const CUT_BACK_BYTES: u64 = 64 * 1024;
pub const CUT_BACK_TRIES: usize = 16;

/// Why a writer stops before its process ends.
#[derive(Debug)]
pub enum Stop {
    /// The byte budget is spent; the `truncated` record was written.
    Budget,
    /// A write failed (see [`TraceSink::record_write_error`]).
    Failed(io::Error),
}

impl From<io::Error> for Stop {
    fn from(error: io::Error) -> Stop {
        Stop::Failed(error)
    }
}

/// Another writer of the same file, beside the sink: its bytes count against the budget, and it must
/// stop before the sink writes the `truncated` record, which nothing may follow.
pub trait CoWriter {
    /// Bytes it has added to the file.
    fn written(&self) -> u64;
    /// Stops it for good; returns once it writes nothing more.
    fn finish(&self);
}

/// The sink is the file's only writer.
#[derive(Clone, Copy, Debug)]
pub struct Alone;

impl CoWriter for Alone {
    fn written(&self) -> u64 {
        0
    }
    fn finish(&self) {}
}

/// An open trace file.
#[derive(Debug)]
pub struct TraceSink {
    file: File,
    path: String,
    /// A regular file (not a device or FIFO named by `BACKSCOPE_TRACE_FILE`): only then can it be
    /// cut back after a write error.
    regular: bool,
    max_bytes: u64,
    /// Bytes written, and where the header ends (a cut never goes below it).
    written: u64,
    header_end: u64,
    /// The OS error of the last failed write (the error passed on carries the path instead).
    write_errno: Option<i32>,
}

impl TraceSink {
    /// Creates the trace file of process `pid` at `destination`; `max_bytes` is its budget (0: none).
    pub fn create(destination: &Destination, pid: u32, max_bytes: u64) -> io::Result<TraceSink> {
        let (file, path) = match destination {
            Destination::Dir(dir) => {
                create_first_free(|out, attempt| crate::naming::dir_candidate(out, dir.as_bytes(), pid, attempt))?
            }
            Destination::File(pattern) => open_file_destination(pattern, pid)?,
        };
        let regular = file.metadata().is_ok_and(|m| m.is_file());
        Ok(TraceSink { file, path, regular, max_bytes, written: 0, header_end: 0, write_errno: None })
    }

    pub fn path(&self) -> &str {
        &self.path
    }

    /// Bytes written so far.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// Writes the header, whole even when it alone is longer than the budget.
    pub fn write_header(&mut self, header: &[u8]) -> io::Result<()> {
        self.write_bytes(header)?;
        self.header_end = self.written;
        Ok(())
    }

    /// Writes whole lines within the budget: when they do not all fit, the whole lines that do,
    /// then the `truncated` record, and [`Stop::Budget`]; nothing may be written after it.
    pub fn write_lines(&mut self, lines: &[u8]) -> Result<(), Stop> {
        self.write_lines_beside(lines, &Alone)
    }

    /// [`TraceSink::write_lines`] in a file that `other` writes into too: its bytes count against
    /// the budget, and it is finished before the `truncated` record.
    pub fn write_lines_beside(&mut self, lines: &[u8], other: &impl CoWriter) -> Result<(), Stop> {
        if self.max_bytes == 0 {
            return Ok(self.write_bytes(lines)?);
        }
        let size = self.written + other.written();
        let room = self.max_bytes.saturating_sub(CUT_RECORD_RESERVE).saturating_sub(size);
        if lines.len() as u64 <= room {
            return Ok(self.write_bytes(lines)?);
        }
        // `room` is below `lines.len()`, so it fits in usize.
        let fitting = &lines[..room as usize];
        let keep = fitting.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        self.write_bytes(&lines[..keep])?;
        other.finish();
        let mut cut = Vec::with_capacity(CUT_RECORD_RESERVE as usize);
        let size = self.written + other.written();
        record::truncated_budget(&mut cut, now_ns(), size, self.max_bytes);
        self.write_bytes(&cut)?;
        Err(Stop::Budget)
    }

    /// Writes `bytes` at the end of the file, counting what reached it (also when a write fails
    /// halfway).
    fn write_bytes(&mut self, mut bytes: &[u8]) -> io::Result<()> {
        while !bytes.is_empty() {
            match self.file.write(bytes) {
                Ok(0) => return Err(with_path(io::ErrorKind::WriteZero.into(), &self.path)),
                Ok(n) => {
                    self.written += n as u64;
                    bytes = &bytes[n..];
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.write_errno = e.raw_os_error();
                    return Err(with_path(e, &self.path));
                }
            }
        }
        Ok(())
    }

    /// After a failed write: cuts the file back to a line boundary where a `truncated` record fits
    /// and writes it there. Each try gives up one more line from the end (a full disk may have room
    /// only inside blocks the file already holds), at most [`CUT_BACK_TRIES`] lines and
    /// [`CUT_BACK_BYTES`] bytes, never the header.
    pub fn record_write_error(&mut self, error: &io::Error) {
        self.record_write_error_beside(error, &Alone);
    }

    /// [`TraceSink::record_write_error`] in a file that `other` writes into too: it is finished
    /// first, and the cut starts from the file's real size.
    pub fn record_write_error_beside(&mut self, error: &io::Error, other: &impl CoWriter) {
        // Without a whole header there is no trace to end with a record.
        if !self.regular || self.header_end == 0 {
            return;
        }
        other.finish();
        self.written = self.file.metadata().map_or(self.written, |m| m.len());
        let reason = self
            .write_errno
            .map_or_else(|| error.kind().to_string(), |code| io::Error::from_raw_os_error(code).to_string());
        let tail_start = self.written.saturating_sub(CUT_BACK_BYTES).max(self.header_end);
        let mut tail = vec![0u8; self.written.saturating_sub(tail_start) as usize];
        let read = self.file.read_at(&mut tail, tail_start).unwrap_or(0);
        tail.truncate(read);
        let boundaries = tail
            .iter()
            .enumerate()
            .rev()
            .filter(|&(_, &b)| b == b'\n')
            .map(|(i, _)| tail_start + i as u64 + 1)
            .chain(std::iter::once(self.header_end))
            .take(CUT_BACK_TRIES);
        for end in boundaries {
            let mut cut = Vec::with_capacity(256);
            record::truncated_write_error(&mut cut, now_ns(), end, &reason);
            if self.file.set_len(end).is_ok() && self.file.write_all_at(&cut, end).is_ok() {
                self.written = end + cut.len() as u64;
                return;
            }
        }
    }
}

impl AsRawFd for TraceSink {
    fn as_raw_fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }
}

/// Creates the first free candidate name, exclusively: never overwrite a trace (pid reuse, or the
/// image an `exec` replaced). Readable too: after a write error the tail is read back to find the
/// last whole line.
fn create_first_free(candidate: impl Fn(&mut Vec<u8>, u32) -> bool) -> io::Result<(File, String)> {
    let mut attempt = 0;
    let mut first = String::new();
    loop {
        let mut name = Vec::new();
        if !candidate(&mut name, attempt) {
            return Err(io::Error::other(format!("{first}: it and {attempt} alternative names exist already")));
        }
        let path = String::from_utf8_lossy(&name).into_owned();
        if attempt == 0 {
            first = path.clone();
        }
        match std::fs::OpenOptions::new().read(true).write(true).create_new(true).mode(0o644).open(&path) {
            Ok(file) => return Ok((file, path)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => attempt += 1,
            Err(e) => return Err(with_path(e, &path)),
        }
    }
}

/// `BACKSCOPE_TRACE_FILE`: every process gets a file of its own, created exclusively. An existing
/// device or FIFO (`/dev/stderr`) is written as it is: it is a sink, not a file to claim.
fn open_file_destination(pattern: &str, pid: u32) -> io::Result<(File, String)> {
    let mut expanded = Vec::new();
    crate::naming::expand_pattern(&mut expanded, pattern.as_bytes(), pid);
    let path = String::from_utf8_lossy(&expanded).into_owned();
    if std::fs::metadata(&path).is_ok_and(|m| !m.is_file() && !m.is_dir()) {
        let file = std::fs::OpenOptions::new().append(true).open(&path).map_err(|e| with_path(e, &path))?;
        return Ok((file, path));
    }
    create_first_free(|out, attempt| crate::naming::file_candidate(out, pattern.as_bytes(), pid, attempt))
}

fn with_path(error: io::Error, path: &str) -> io::Error {
    io::Error::new(error.kind(), format!("{path}: {error}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(tag: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("backscope-trace-sink-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn creates_a_new_name_when_the_first_is_taken() {
        let dir = temp_dir("names");
        let destination = Destination::Dir(dir.to_str().unwrap().to_string());
        let a = TraceSink::create(&destination, 7, 0).unwrap();
        let b = TraceSink::create(&destination, 7, 0).unwrap();
        assert!(a.path().ends_with("/trace-7.jsonl") && b.path().ends_with("/trace-7.1.jsonl"));
        let missing = Destination::Dir(dir.join("absent").to_str().unwrap().to_string());
        let error = TraceSink::create(&missing, 7, 0).unwrap_err();
        assert!(error.to_string().contains("absent/trace-7.jsonl"), "{error}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_budget_keeps_whole_lines_and_ends_with_the_truncated_record() {
        let dir = temp_dir("budget");
        let destination = Destination::Dir(dir.to_str().unwrap().to_string());
        let mut sink = TraceSink::create(&destination, 8, 1024).unwrap();
        let header = format!("{{\"format\":\"{}\"}}\n", "h".repeat(40));
        sink.write_header(header.as_bytes()).unwrap();
        let line = format!("{{\"window\":[1,2],\"pad\":\"{}\"}}\n", "x".repeat(60));
        let mut stopped = false;
        for _ in 0..20 {
            match sink.write_lines(line.as_bytes()) {
                Ok(()) => {}
                Err(Stop::Budget) => {
                    stopped = true;
                    break;
                }
                Err(Stop::Failed(e)) => panic!("{e}"),
            }
        }
        assert!(stopped);
        let text = std::fs::read_to_string(sink.path()).unwrap();
        assert!(text.len() as u64 <= 1024, "{}", text.len());
        let last = text.lines().last().unwrap();
        assert!(last.starts_with("{\"truncated\":\"budget\""), "{last}");
        assert!(text.lines().all(|l| l.starts_with('{') && l.ends_with('}')), "whole lines only");
        assert_eq!(
            text.lines().filter(|l| l.starts_with("{\"window\"")).count(),
            (1024 - 512 - header.len()) / line.len()
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_failed_write_cuts_back_to_a_whole_line_and_says_why() {
        // /dev/full fails every write with ENOSPC, but it is not a regular file: nothing to cut.
        let mut full = TraceSink::create(&Destination::File("/dev/full".into()), 9, 0).unwrap();
        let error = full.write_header(b"{\"format\":1}\n").unwrap_err();
        assert_eq!(error.raw_os_error(), None, "the error passed on carries the path");
        assert!(error.to_string().starts_with("/dev/full: "), "{error}");
        full.record_write_error(&error);
        // A regular file whose last write failed halfway: the cut goes back to the last whole line.
        let dir = temp_dir("cut");
        let mut sink = TraceSink::create(&Destination::Dir(dir.to_str().unwrap().to_string()), 10, 0).unwrap();
        sink.write_header(b"{\"format\":\"backscope-trace\"}\n").unwrap();
        sink.write_lines(b"{\"window\":[1,2]}\n{\"window\":[2,3]").unwrap();
        sink.write_errno = Some(28);
        sink.record_write_error(&io::Error::from_raw_os_error(28));
        let text = std::fs::read_to_string(sink.path()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert_eq!(lines[1], "{\"window\":[1,2]}");
        assert!(lines[2].starts_with("{\"truncated\":\"write_error\""), "{}", lines[2]);
        assert!(lines[2].contains("No space left on device"), "{}", lines[2]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
