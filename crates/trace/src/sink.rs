//! The trace file as a writer sees it: created under the names of [`crate::naming`] (exclusively,
//! so no trace is ever overwritten), a header that is always written whole, then lines written
//! within the byte budget, and a `truncated` record when the budget is spent or a write fails
//! (`docs/trace-format.md`, "Truncated").
//!
//! A rotating trace (`BACKSCOPE_TRACE_ROTATE=N`, [`TraceSink::create_rotating`]) splits the budget into N
//! segment files instead: when a segment is full it ends with a `rotated` record, the next one begins with its
//! own header and every definition written so far (kernels, devices, warnings: what later records refer to), and
//! the segment N back is deleted, so that at most N files, within the budget together, hold the newest records
//! (`docs/trace-format.md`, "Rotating traces"). Without it nothing changes, byte for byte.
//!
//! Every writer of the format behaves the same at the file's edges, so this lives here. It uses std
//! only (no locks of its own; the caller serialises its use) and allocates only when a trace is cut
//! or rotates. A writer whose file has a second writer (the crash handler writes records into it from
//! a signal handler) says so through [`CoWriter`].

use std::collections::VecDeque;
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

/// The smallest segment of a rotating trace: fewer segments are kept when the budget would make them smaller.
pub const MIN_SEGMENT_BYTES: u64 = 16 * 1024;
/// The most segments a rotating trace keeps.
pub const MAX_SEGMENTS: u32 = 64;
/// Room a segment keeps free beyond the writer's lines for the crash handler's record (its buffer's size), at most
/// a quarter of the segment: the handler cannot start a new segment, so a full one would lose the record.
pub const SEGMENT_CRASH_ROOM: u64 = 64 * 1024;

/// Segments kept and each one's budget for a trace of `max_bytes` (0: no limit) asked to rotate through `keep`
/// segments; `None` when it does not rotate (`keep` below 2, no budget, or a budget too small for two segments of
/// [`MIN_SEGMENT_BYTES`]).
pub fn rotation_plan(max_bytes: u64, keep: u32) -> Option<(u32, u64)> {
    if keep < 2 || max_bytes == 0 {
        return None;
    }
    let fitting = (max_bytes / MIN_SEGMENT_BYTES).min(MAX_SEGMENTS.into()) as u32;
    let keep = keep.min(fitting);
    (keep >= 2).then(|| (keep, max_bytes / u64::from(keep)))
}

/// Writes the header of segment `Some(segment)` of a rotating trace, or the one header of a trace that does not
/// rotate (`None`).
pub type HeaderWriter = Box<dyn Fn(&mut Vec<u8>, Option<record::Segment<'_>>) + Send>;

/// The header writer of this process's trace: `header` as the library fills it, with the process's parent,
/// executable and command line read now (every segment repeats the same ones) and each file's segment.
pub fn process_header(header: record::Header<'static>) -> HeaderWriter {
    // SAFETY: getppid has no preconditions.
    let ppid = unsafe { libc::getppid() } as u32;
    let exe = std::fs::read_link("/proc/self/exe").map(|p| p.into_os_string().into_encoded_bytes()).unwrap_or_default();
    let cmdline = std::fs::read("/proc/self/cmdline").unwrap_or_default();
    Box::new(move |out, segment| {
        record::header(out, &record::Header { ppid, exe: &exe, cmdline: &cmdline, segment, ..header })
    })
}

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
/// stop before the sink writes the `truncated` record, which nothing may follow; in a rotating trace it
/// moves to the next segment with the sink.
pub trait CoWriter {
    /// Bytes it has added to the file (to the current segment).
    fn written(&self) -> u64;
    /// Stops it for good; returns once it writes nothing more.
    fn finish(&self);
    /// The segment is about to end with its `rotated` record: stops writing into it, and returns once nothing
    /// more is written there. [`CoWriter::resume`] or [`CoWriter::finish`] follows.
    fn pause(&self) {}
    /// The next segment is open at `fd` (its header and definitions written: `written` bytes), with a budget of
    /// `max_bytes`: writes go there from now on, and `written` starts again from 0.
    fn resume(&self, _fd: RawFd, _max_bytes: u64, _written: u64) {}
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
    /// Why the next segment could not be started, for the `truncated` record.
    rotation_error: Option<String>,
    rotation: Option<Box<Rotation>>,
}

/// The state of a rotating trace.
struct Rotation {
    keep: u32,
    segment_max: u64,
    /// Kept free for the crash handler in each segment ([`SEGMENT_CRASH_ROOM`]).
    crash_room: u64,
    /// The segment being written (from 0).
    index: u32,
    /// Segment 0's path, which later segments are named after.
    first: String,
    /// The segments on disk, oldest first; the last is the one being written.
    kept: VecDeque<String>,
    header: HeaderWriter,
    /// Every definition line written so far, which each new segment repeats.
    preamble: Vec<u8>,
    /// Where the current segment's header and definitions end: a segment holding no more cannot make room by
    /// rotating.
    fresh_end: u64,
}

impl std::fmt::Debug for Rotation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rotation")
            .field("keep", &self.keep)
            .field("segment_max", &self.segment_max)
            .field("index", &self.index)
            .field("kept", &self.kept)
            .field("preamble_bytes", &self.preamble.len())
            .finish_non_exhaustive()
    }
}

/// The record kinds a later segment repeats: what other records refer to (kernel ids, device ids, the Vulkan layer's
/// dispatch sequences) or what appears once per file (warnings).
const REPEATED_KINDS: [&str; 4] =
    [record::kind::KERNEL, record::kind::DEVICE, record::kind::SEQUENCE, record::kind::WARNING];

/// Whether `line` is a record whose kind key is `kind`, written first (as every writer of this crate does).
fn is_kind(line: &[u8], kind: &str) -> bool {
    line.strip_prefix(b"{\"").and_then(|l| l.strip_prefix(kind.as_bytes())).is_some_and(|l| l.starts_with(b"\":"))
}

/// The length of the whole lines of `lines` within `room` bytes.
fn whole_lines(lines: &[u8], room: u64) -> usize {
    let fitting = &lines[..(room.min(lines.len() as u64)) as usize];
    fitting.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1)
}

/// The file name of `path` (a segment names its neighbours without their directory).
fn file_name(path: &str) -> &[u8] {
    path.rsplit('/').next().unwrap_or(path).as_bytes()
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
        Ok(TraceSink {
            file,
            path,
            regular,
            max_bytes,
            written: 0,
            header_end: 0,
            write_errno: None,
            rotation_error: None,
            rotation: None,
        })
    }

    /// [`TraceSink::create`] for a trace asked to rotate through `keep` segments ([`rotation_plan`]): it rotates
    /// when the plan allows and the file is a regular one whose name leaves room for the `rotated` record;
    /// otherwise it is the plain trace `create` makes. Write its header with [`TraceSink::write_header_with`].
    pub fn create_rotating(destination: &Destination, pid: u32, max_bytes: u64, keep: u32) -> io::Result<TraceSink> {
        let mut sink = TraceSink::create(destination, pid, max_bytes)?;
        let Some((keep, segment_max)) = rotation_plan(max_bytes, keep) else { return Ok(sink) };
        // The longest name a segment can get must leave the `rotated` record within the reserve.
        let mut longest = Vec::new();
        crate::naming::segment_candidate(&mut longest, sink.path.as_bytes(), u32::MAX, crate::naming::MAX_CANDIDATES);
        let mut end = Vec::new();
        record::rotated(&mut end, file_name(&String::from_utf8_lossy(&longest)), u64::MAX, u64::MAX);
        if sink.regular && (end.len() as u64) < CUT_RECORD_RESERVE {
            sink.rotation = Some(Box::new(Rotation {
                keep,
                segment_max,
                crash_room: SEGMENT_CRASH_ROOM.min(segment_max / 4),
                index: 0,
                first: sink.path.clone(),
                kept: VecDeque::from([sink.path.clone()]),
                header: Box::new(|_, _| {}),
                preamble: Vec::new(),
                fresh_end: 0,
            }));
        }
        Ok(sink)
    }

    /// The path of the file being written (the current segment's, when the trace rotates).
    pub fn path(&self) -> &str {
        &self.path
    }

    /// What the file being written may hold: the budget, or one segment's when the trace rotates (0: no limit).
    pub fn budget(&self) -> u64 {
        self.rotation.as_ref().map_or(self.max_bytes, |r| r.segment_max)
    }

    /// Segments kept and the current one's number, when the trace rotates.
    pub fn segments(&self) -> Option<(u32, u32)> {
        self.rotation.as_ref().map(|r| (r.keep, r.index))
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

    /// Writes the header `header` makes: segment 0's when the trace rotates (`header` is kept for the later
    /// segments' headers), else the plain header, exactly as [`TraceSink::write_header`] would.
    pub fn write_header_with(&mut self, header: HeaderWriter) -> io::Result<()> {
        let mut bytes = Vec::new();
        match self.rotation.as_mut() {
            Some(r) => {
                let first = record::Segment { index: 0, keep: r.keep, max_bytes: r.segment_max, previous: b"" };
                header(&mut bytes, Some(first));
                r.header = header;
            }
            None => header(&mut bytes, None),
        }
        self.write_header(&bytes)?;
        if let Some(r) = self.rotation.as_mut() {
            r.fresh_end = self.written;
        }
        Ok(())
    }

    /// Writes whole lines within the budget: when they do not all fit, the whole lines that do,
    /// then the `truncated` record, and [`Stop::Budget`]; nothing may be written after it.
    pub fn write_lines(&mut self, lines: &[u8]) -> Result<(), Stop> {
        self.write_lines_beside(lines, &Alone)
    }

    /// [`TraceSink::write_lines`] in a file that `other` writes into too: its bytes count against
    /// the budget, and it is finished before the `truncated` record.
    ///
    /// In a rotating trace, the lines that do not fit the current segment (which keeps room for the `rotated`
    /// record and for a crash record) go into the next one; only a line that does not fit even a segment holding
    /// nothing but its header and definitions ends the trace as above.
    pub fn write_lines_beside(&mut self, lines: &[u8], other: &impl CoWriter) -> Result<(), Stop> {
        if self.max_bytes == 0 {
            return Ok(self.write_bytes(lines)?);
        }
        if let Some(mut rotation) = self.rotation.take() {
            let result = self.write_rotating(&mut rotation, lines, other);
            self.rotation = Some(rotation);
            return result;
        }
        let size = self.written + other.written();
        let room = self.max_bytes.saturating_sub(CUT_RECORD_RESERVE).saturating_sub(size);
        if lines.len() as u64 <= room {
            return Ok(self.write_bytes(lines)?);
        }
        self.cut(lines, room, self.max_bytes, other)
    }

    /// Writes the whole lines of `lines` within `room`, then (the other writer finished) the `truncated` record of
    /// a spent budget `max_bytes`: [`Stop::Budget`].
    fn cut(&mut self, lines: &[u8], room: u64, max_bytes: u64, other: &impl CoWriter) -> Result<(), Stop> {
        let keep = whole_lines(lines, room);
        self.write_bytes(&lines[..keep])?;
        other.finish();
        let mut cut = Vec::with_capacity(CUT_RECORD_RESERVE as usize);
        let size = self.written + other.written();
        record::truncated_budget(&mut cut, now_ns(), size, max_bytes);
        self.write_bytes(&cut)?;
        Err(Stop::Budget)
    }

    /// [`TraceSink::write_lines_beside`] of a rotating trace. Each pass writes at least one line or starts a
    /// segment, and a fresh segment that takes no line ends the trace, so it ends.
    fn write_rotating(&mut self, r: &mut Rotation, mut lines: &[u8], other: &impl CoWriter) -> Result<(), Stop> {
        loop {
            let size = self.written + other.written();
            let room = r.segment_max.saturating_sub(CUT_RECORD_RESERVE + r.crash_room).saturating_sub(size);
            let keep = if lines.len() as u64 <= room { lines.len() } else { whole_lines(lines, room) };
            self.write_bytes(&lines[..keep])?;
            remember(r, &lines[..keep]);
            lines = &lines[keep..];
            if lines.is_empty() {
                return Ok(());
            }
            if keep == 0 && size == r.fresh_end {
                return self.cut(lines, room, r.segment_max, other);
            }
            self.rotate(r, other)?;
        }
    }

    /// Ends the current segment with the `rotated` record and goes on in the next: deletes the oldest segment
    /// kept (so that at most `keep` exist), creates the next exclusively, moves the crash handler over once it
    /// is written there, and writes its header and every definition so far. A failed creation is a write error
    /// of the current segment; definitions that would leave a segment no room end the trace at its budget.
    fn rotate(&mut self, r: &mut Rotation, other: &impl CoWriter) -> Result<(), Stop> {
        let next = r.index + 1;
        let mut header = Vec::new();
        let previous = file_name(&self.path);
        (r.header)(
            &mut header,
            Some(record::Segment { index: next, keep: r.keep, max_bytes: r.segment_max, previous }),
        );
        if (header.len() + r.preamble.len()) as u64 + CUT_RECORD_RESERVE + r.crash_room >= r.segment_max {
            return self.cut(&[], 0, r.segment_max, other);
        }
        if r.kept.len() >= r.keep as usize {
            if let Some(oldest) = r.kept.pop_front() {
                // Already gone (someone removed it) is as good.
                let _ = std::fs::remove_file(&oldest);
            }
        }
        let first = r.first.as_bytes();
        let (file, path) =
            create_first_free(|out, attempt| crate::naming::segment_candidate(out, first, next, attempt)).map_err(
                |e| {
                    self.rotation_error = Some(format!("cannot start the next segment ({e})"));
                    Stop::Failed(e)
                },
            )?;
        other.pause();
        let mut end = Vec::with_capacity(CUT_RECORD_RESERVE as usize);
        record::rotated(&mut end, file_name(&path), now_ns(), self.written + other.written());
        if let Err(e) = self.write_bytes(&end) {
            drop(file);
            let _ = std::fs::remove_file(&path);
            return Err(Stop::Failed(e));
        }
        self.file = file;
        self.path = path.clone();
        (self.written, self.header_end, self.write_errno) = (0, 0, None);
        r.kept.push_back(path);
        r.index = next;
        self.write_header(&header)?;
        self.write_bytes(&r.preamble)?;
        r.fresh_end = self.written;
        other.resume(self.file.as_raw_fd(), r.segment_max, self.written);
        Ok(())
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
        let reason = match (self.rotation_error.take(), self.write_errno) {
            (Some(why), _) => why,
            (None, Some(code)) => io::Error::from_raw_os_error(code).to_string(),
            (None, None) => error.kind().to_string(),
        };
        let tail_start = self.written.saturating_sub(CUT_BACK_BYTES).max(self.header_end);
        let mut tail = vec![0u8; self.written.saturating_sub(tail_start) as usize];
        let read = read_fully_at(&mut tail, tail_start, |buf, at| self.file.read_at(buf, at));
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

/// Fills `buf` from `offset` on through `read_at`, which may return fewer bytes than asked (a
/// positional read is allowed to stop short; Miri's file model does): a tail read once and cut short
/// would hold no line end, and the cut would fall back to the header, dropping every recorded line.
/// Returns how many bytes were read before the end of the file or an error.
fn read_fully_at(buf: &mut [u8], offset: u64, mut read_at: impl FnMut(&mut [u8], u64) -> io::Result<usize>) -> usize {
    let mut read = 0;
    while read < buf.len() {
        match read_at(&mut buf[read..], offset + read as u64) {
            Ok(0) => break,
            Ok(n) => read += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    read
}

/// Keeps the lines of `lines` that a later segment repeats.
fn remember(r: &mut Rotation, lines: &[u8]) {
    for line in lines.split_inclusive(|&b| b == b'\n') {
        if REPEATED_KINDS.iter().any(|kind| is_kind(line, kind)) {
            r.preamble.extend_from_slice(line);
        }
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
    fn a_tail_read_in_short_pieces_is_read_whole() {
        let file: Vec<u8> = (0..100u8).collect();
        let mut calls = 0;
        let mut buf = [0u8; 40];
        // At most 7 bytes a call, one call interrupted: all 40 bytes from offset 50 arrive in order.
        let n = read_fully_at(&mut buf, 50, |b, at| {
            calls += 1;
            if calls == 2 {
                return Err(io::Error::from(io::ErrorKind::Interrupted));
            }
            let at = at as usize;
            let n = b.len().min(7).min(file.len().saturating_sub(at));
            b[..n].copy_from_slice(&file[at..at + n]);
            Ok(n)
        });
        assert_eq!((n, &buf[..]), (40, &file[50..90]));
        // Past the end of the file it stops with what there was; on an error, likewise.
        let mut buf = [0u8; 40];
        let n = read_fully_at(&mut buf, 80, |b, at| {
            let at = at as usize;
            let n = b.len().min(7).min(file.len().saturating_sub(at));
            b[..n].copy_from_slice(&file[at..at + n]);
            Ok(n)
        });
        assert_eq!((n, &buf[..n]), (20, &file[80..]));
        let mut first = true;
        let n = read_fully_at(&mut buf, 0, |b, _| {
            if std::mem::take(&mut first) {
                b[..3].copy_from_slice(b"abc");
                Ok(3)
            } else {
                Err(io::Error::other("gone"))
            }
        });
        assert_eq!((n, &buf[..n]), (3, &b"abc"[..]));
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

    /// The header a writer makes, with the segment fields when the trace rotates.
    fn test_header() -> HeaderWriter {
        Box::new(|out, segment| {
            record::header(
                out,
                &record::Header {
                    pid: 11,
                    ppid: 1,
                    exe: b"/bin/t",
                    cmdline: b"t\0",
                    start_ns: 5,
                    interval_ms: 50,
                    shape_buckets: 8,
                    max_kernels: 16,
                    max_bytes: 64 * 1024,
                    observer: "0",
                    writer: "test",
                    max_sequences: 0,
                    segment,
                },
            )
        })
    }

    /// A second writer that remembers when it was paused and resumed.
    #[derive(Default)]
    struct Recorder {
        written: std::cell::Cell<u64>,
        calls: std::cell::RefCell<Vec<String>>,
    }

    impl CoWriter for Recorder {
        fn written(&self) -> u64 {
            self.written.get()
        }
        fn finish(&self) {
            self.calls.borrow_mut().push("finish".into());
        }
        fn pause(&self) {
            self.calls.borrow_mut().push("pause".into());
        }
        fn resume(&self, _fd: RawFd, max_bytes: u64, written: u64) {
            self.written.set(0);
            self.calls.borrow_mut().push(format!("resume {max_bytes} {written}"));
        }
    }

    fn window_line(i: usize) -> String {
        format!("{{\"window\":[{i},{}],\"counts\":[[1,1]],\"pad\":\"{}\"}}\n", i + 1, "x".repeat(300))
    }

    fn names_in(dir: &std::path::Path) -> Vec<String> {
        let mut names: Vec<String> =
            std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        names.sort();
        names
    }

    #[test]
    fn the_rotation_plan_keeps_segments_of_at_least_the_minimum() {
        assert_eq!(rotation_plan(64 * 1024, 3), Some((3, 21845)));
        assert_eq!(rotation_plan(1 << 30, 4), Some((4, 1 << 28)));
        assert_eq!(rotation_plan(1 << 30, 1), None, "1: no rotation");
        assert_eq!(rotation_plan(0, 4), None, "no budget: nothing to rotate for");
        assert_eq!(rotation_plan(40 * 1024, 8), Some((2, 20 * 1024)), "fewer, larger segments");
        assert_eq!(rotation_plan(20 * 1024, 8), None, "not two segments of the minimum");
        assert_eq!(rotation_plan(u64::MAX, u32::MAX), Some((MAX_SEGMENTS, u64::MAX / u64::from(MAX_SEGMENTS))));
    }

    #[test]
    fn without_rotation_the_header_and_lines_are_the_plain_ones() {
        let dir = temp_dir("plain");
        let destination = Destination::Dir(dir.to_str().unwrap().to_string());
        let mut plain = TraceSink::create(&destination, 12, 4096).unwrap();
        let mut header = Vec::new();
        test_header()(&mut header, None);
        plain.write_header(&header).unwrap();
        let mut asked = TraceSink::create_rotating(&destination, 13, 4096, 1).unwrap();
        asked.write_header_with(test_header()).unwrap();
        assert_eq!((asked.segments(), asked.budget()), (None, 4096));
        for sink in [&mut plain, &mut asked] {
            for i in 0..20 {
                if sink.write_lines(window_line(i).as_bytes()).is_err() {
                    break;
                }
            }
        }
        let text = |s: &TraceSink| std::fs::read_to_string(s.path()).unwrap();
        let without_times =
            |t: String| t.lines().map(|l| l.split("\"at_ns\"").next().unwrap().to_string()).collect::<Vec<_>>();
        assert_eq!(without_times(text(&plain)), without_times(text(&asked)));
        assert!(text(&asked).starts_with("{\"format\":\"backscope-trace\",\"version\":3,"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_rotating_trace_keeps_its_newest_segments_each_with_its_definitions() {
        let dir = temp_dir("rotate");
        let destination = Destination::Dir(dir.to_str().unwrap().to_string());
        let max = 64 * 1024;
        let mut sink = TraceSink::create_rotating(&destination, 14, max, 3).unwrap();
        sink.write_header_with(test_header()).unwrap();
        let segment_max = max / 3;
        assert_eq!((sink.segments(), sink.budget()), (Some((3, 0)), segment_max));
        let other = Recorder::default();
        let definitions = "{\"device\":0,\"api\":\"vulkan\"}\n{\"kernel\":1,\"name\":\"k\",\"api\":\"vulkan\",\"source\":\"none\",\"device\":0}\n";
        sink.write_lines_beside(definitions.as_bytes(), &other).unwrap();
        for i in 0..400 {
            sink.write_lines_beside(window_line(i).as_bytes(), &other).unwrap();
            if i == 200 {
                // A kernel, a Vulkan dispatch sequence naming it, a warning: each later segment repeats all three.
                let late = "{\"kernel\":2,\"name\":\"late\",\"api\":\"vulkan\",\"source\":\"none\",\"device\":0}\n\
                            {\"sequence\":1,\"first_ns\":7,\"runs\":[[1,1],[2,3]]}\n{\"warning\":\"w\",\"detail\":\"d\"}\n";
                sink.write_lines_beside(late.as_bytes(), &other).unwrap();
            }
        }
        let (_, index) = sink.segments().unwrap();
        assert!(index >= 6, "{index} segments written");
        let names = names_in(&dir);
        assert_eq!(names.len(), 3, "{names:?}");
        let expected: Vec<String> = (index - 2..=index).map(|k| format!("trace-14.s{k}.jsonl")).collect();
        assert_eq!(names, expected);
        let mut total = 0;
        for (k, name) in (index - 2..=index).zip(&names) {
            let text = std::fs::read_to_string(dir.join(name)).unwrap();
            total += text.len() as u64;
            assert!(
                text.len() as u64 <= segment_max - SEGMENT_CRASH_ROOM.min(segment_max / 4),
                "{name}: {}",
                text.len()
            );
            let lines: Vec<&str> = text.lines().collect();
            assert!(lines[0].starts_with("{\"format\":\"backscope-trace\",\"version\":4,"), "{}", lines[0]);
            let previous = format!("\"segment\":{k},\"segments_kept\":3,\"segment_max_bytes\":{segment_max},\"previous\":\"trace-14.s{}.jsonl\"}}", k - 1);
            let previous = previous.replace("trace-14.s0.jsonl", "trace-14.jsonl");
            assert!(lines[0].ends_with(&previous), "{}", lines[0]);
            // Every definition so far comes before any window: the segment reads alone.
            assert!(lines[1].starts_with("{\"device\":0"), "{}", lines[1]);
            assert!(lines[2].starts_with("{\"kernel\":1"), "{}", lines[2]);
            if k > 3 {
                assert!(lines[3].starts_with("{\"kernel\":2") && lines[4].starts_with("{\"sequence\":1"), "{text}");
                assert!(lines[5].starts_with("{\"warning\""), "{text}");
            }
            let last = lines.last().unwrap();
            if k < index {
                assert!(last.starts_with(&format!("{{\"rotated\":\"trace-14.s{}.jsonl\",\"at_ns\":", k + 1)), "{last}");
                let bytes: u64 = last.split("\"bytes\":").nth(1).unwrap().trim_end_matches('}').parse().unwrap();
                assert_eq!(bytes, (text.len() - last.len() - 1) as u64);
            } else {
                assert!(last.starts_with("{\"window\""), "{last}");
            }
            assert!(lines.iter().all(|l| l.starts_with('{') && l.ends_with('}')));
        }
        assert!(total <= max, "{total}");
        let calls = other.calls.borrow();
        assert_eq!(calls.len() as u32, 2 * index, "a pause and a resume per rotation: {calls:?}");
        assert!(calls.iter().skip(1).step_by(2).all(|c| c.starts_with(&format!("resume {segment_max} "))), "{calls:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_segment_is_full_exactly_at_its_budget_less_the_reserves() {
        let dir = temp_dir("edges");
        let destination = Destination::Dir(dir.to_str().unwrap().to_string());
        let mut sink = TraceSink::create_rotating(&destination, 15, 64 * 1024, 2).unwrap();
        sink.write_header_with(test_header()).unwrap();
        let segment_max = 32 * 1024;
        let room = segment_max - CUT_RECORD_RESERVE - SEGMENT_CRASH_ROOM.min(segment_max / 4) - sink.written();
        let other = Recorder::default();
        other.written.set(100);
        // Lines that fill the room to the byte (the other writer's bytes count too): no rotation.
        let fill = |n: u64| format!("{{\"window\":[1,2],\"pad\":\"{}\"}}\n", "x".repeat(n as usize - 26));
        assert_eq!(fill(64).len(), 64);
        sink.write_lines_beside(fill(room - 100).as_bytes(), &other).unwrap();
        assert_eq!(sink.segments(), Some((2, 0)));
        // One byte more goes to the next segment, whole.
        sink.write_lines_beside(b"\n", &other).unwrap();
        assert_eq!(sink.segments(), Some((2, 1)));
        assert_eq!(std::fs::read_to_string(sink.path()).unwrap().lines().count(), 2, "header, then the empty line");
        // A line longer than a fresh segment's room ends the trace at the budget, as a plain trace's would.
        let huge = fill(segment_max);
        match sink.write_lines_beside(huge.as_bytes(), &other) {
            Err(Stop::Budget) => {}
            other => panic!("{other:?}"),
        }
        let text = std::fs::read_to_string(sink.path()).unwrap();
        let last = text.lines().last().unwrap();
        assert!(last.starts_with("{\"truncated\":\"budget\""), "{last}");
        assert!(last.ends_with(&format!("\"max_bytes\":{segment_max}}}")), "{last}");
        assert!(other.calls.borrow().ends_with(&["finish".to_string()]));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_failed_open_of_the_next_segment_ends_the_trace_as_a_write_error() {
        let dir = temp_dir("failed-open");
        let destination = Destination::Dir(dir.to_str().unwrap().to_string());
        let mut sink = TraceSink::create_rotating(&destination, 16, 64 * 1024, 2).unwrap();
        sink.write_header_with(test_header()).unwrap();
        // Every name segment 1 could take exists already (a root test cannot count on permissions).
        for attempt in 0..crate::naming::MAX_CANDIDATES {
            let mut name = Vec::new();
            crate::naming::segment_candidate(&mut name, sink.path().as_bytes(), 1, attempt);
            std::fs::write(String::from_utf8(name).unwrap(), "").unwrap();
        }
        let other = Recorder::default();
        let mut stop = None;
        for i in 0..200 {
            if let Err(e) = sink.write_lines_beside(window_line(i).as_bytes(), &other) {
                stop = Some(e);
                break;
            }
        }
        let Some(Stop::Failed(error)) = stop else { panic!("{stop:?}") };
        assert!(error.to_string().contains("alternative names exist already"), "{error}");
        assert!(other.calls.borrow().is_empty(), "the crash handler was never paused");
        let first = sink.path().to_string();
        sink.record_write_error_beside(&error, &other);
        let text = std::fs::read_to_string(&first).unwrap();
        let last = text.lines().last().unwrap();
        assert!(last.starts_with("{\"truncated\":\"write_error\""), "{last}");
        assert!(last.contains("cannot start the next segment") && last.contains("trace-16.s1.jsonl"), "{last}");
        assert!(text.lines().all(|l| l.starts_with('{') && l.ends_with('}')));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn definitions_that_fill_a_segment_end_the_trace_at_its_budget() {
        let dir = temp_dir("no-room");
        let destination = Destination::Dir(dir.to_str().unwrap().to_string());
        let mut sink = TraceSink::create_rotating(&destination, 17, 32 * 1024, 2).unwrap();
        sink.write_header_with(test_header()).unwrap();
        let other = Recorder::default();
        let mut result = Ok(());
        for id in 0..200 {
            let name = "n".repeat(100);
            let line = format!("{{\"kernel\":{id},\"name\":\"{name}\",\"api\":\"cuda\",\"source\":\"register\"}}\n");
            result = sink.write_lines_beside(line.as_bytes(), &other);
            if result.is_err() {
                break;
            }
        }
        // Segment 1 holds segment 0's definitions and cannot take one more: no third segment, which would hold
        // no more.
        assert!(matches!(result, Err(Stop::Budget)), "{result:?}");
        assert_eq!(sink.segments(), Some((2, 1)));
        assert_eq!(names_in(&dir), ["trace-17.jsonl", "trace-17.s1.jsonl"]);
        let text = std::fs::read_to_string(sink.path()).unwrap();
        assert!(text.lines().last().unwrap().starts_with("{\"truncated\":\"budget\""));
        assert!(text.len() as u64 <= 16 * 1024);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
