//! The trace writer: turns the counters into JSON Lines (format in `docs/trace-format.md`, records
//! written by the format crate's writers).
//!
//! It runs on its own thread every `BACKSCOPE_TRACE_INTERVAL_MS` and once at exit (a `.fini_array`
//! destructor, which runs after the program's `atexit` handlers and destructors), never on a hook's
//! path. Each flush writes the definitions of kernels registered since the last flush, then one
//! window line with what changed since the last flush (deltas), if anything did.
//!
//! The file has a byte budget (`BACKSCOPE_TRACE_MAX_BYTES`): the flush that would pass it writes
//! the whole lines that fit and a `truncated` record, and the trace ends there. A failed write
//! (full disk, file size limit) ends it too; for a regular file the writer cuts the file back to
//! its last whole line, giving up lines from the end until the `truncated` record fits, so that a
//! reader learns why the trace stops instead of taking it for a killed process.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};

use format::clock::now_ns;
use format::record::{self, ShapeCount};

use crate::graphs;
use crate::registry::{self, Shape, ShapeCounts, SHAPE_BUCKETS};
use crate::state::{self, Destination};
use crate::sync::SpinLock;

/// The header's `writer`: which program wrote the trace.
const WRITER_NAME: &str = "backscope-observer";
/// Bytes gathered before a `write`; always cut at a line boundary.
const WRITE_CHUNK: usize = 64 * 1024;
/// Bytes kept free under the budget for the `truncated` record (its longest form is far shorter).
const CUT_RECORD_RESERVE: u64 = 512;
/// How far back from the end a write error may cut the file to make room for the `truncated`
/// record, and how many line boundaries it tries.
const CUT_BACK_BYTES: u64 = 64 * 1024;
const CUT_BACK_TRIES: usize = 16;

fn getpid() -> i32 {
    // SAFETY: getpid has no preconditions.
    unsafe { libc::getpid() }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Flush {
    Window,
    Exit,
}

/// Why the writer stops before the process ends.
#[derive(Debug)]
enum Stop {
    /// The byte budget is spent; the `truncated` record is written.
    Budget,
    /// Writing failed.
    Failed(io::Error),
}

impl From<io::Error> for Stop {
    fn from(error: io::Error) -> Stop {
        Stop::Failed(error)
    }
}

/// Counter values at the last flush, per slot: launches, errors, graph, captured.
type Counters = [u64; 4];

struct Writer {
    /// The process this state belongs to. A child that inherited it without going through our
    /// atfork handler (raw `clone`) must not write into the parent's file.
    owner_pid: i32,
    file: Option<File>,
    path: String,
    /// The file is a regular file (not a device or pipe named by `BACKSCOPE_TRACE_FILE`): only
    /// then can it be cut back after a write error.
    regular: bool,
    /// Bytes written to the file, and where the header ends (a cut never goes below it).
    written: u64,
    header_end: u64,
    /// The OS error of the last failed write (the error passed on carries the path instead).
    write_errno: Option<i32>,
    /// No more output: closed at exit, the budget spent, or writing failed.
    done: bool,
    /// Slots `1..defined` have their definition line written.
    defined: u32,
    overflow_defined: bool,
    last: Vec<Counters>,
    last_shapes: HashMap<u32, ([u64; SHAPE_BUCKETS], u64)>,
    last_graph: [u64; 4],
    last_t: u64,
    warned: HashSet<&'static str>,
    buf: Vec<u8>,
}

static WRITER: SpinLock<Option<Writer>> = SpinLock::new(None);

impl Writer {
    fn new() -> Writer {
        Writer {
            owner_pid: getpid(),
            file: None,
            path: String::new(),
            regular: false,
            written: 0,
            header_end: 0,
            write_errno: None,
            done: false,
            defined: 1,
            overflow_defined: false,
            last: Vec::new(),
            last_shapes: HashMap::new(),
            last_graph: [0; 4],
            last_t: state::start_ns(),
            warned: HashSet::new(),
            buf: Vec::with_capacity(WRITE_CHUNK),
        }
    }

    /// Creates the file and writes the header, which the budget never cuts.
    fn open(&mut self) -> io::Result<()> {
        let config = state::config().ok_or_else(|| io::Error::other("no configuration"))?;
        let pid = getpid();
        let (file, path) = match &config.destination {
            Destination::Dir(dir) => open_new_in_dir(dir, pid)?,
            Destination::File(pattern) => open_file_destination(pattern, pid)?,
        };
        self.regular = file.metadata().is_ok_and(|m| m.is_file());
        self.file = Some(file);
        self.path = path;
        self.header(config.interval_ms, pid);
        let header = std::mem::take(&mut self.buf);
        let written = self.write_bytes(&header);
        self.buf = header;
        self.buf.clear();
        written?;
        self.header_end = self.written;
        Ok(())
    }

    fn header(&mut self, interval_ms: u64, pid: i32) {
        // SAFETY: getppid has no preconditions.
        let ppid = unsafe { libc::getppid() };
        let exe =
            std::fs::read_link("/proc/self/exe").map(|p| p.into_os_string().into_encoded_bytes()).unwrap_or_default();
        let cmdline = std::fs::read("/proc/self/cmdline").unwrap_or_default();
        let header = record::Header {
            pid: pid as u32,
            ppid: ppid as u32,
            exe: &exe,
            cmdline: &cmdline,
            start_ns: self.last_t,
            interval_ms,
            shape_buckets: SHAPE_BUCKETS as u32,
            max_kernels: registry::max_kernels(),
            max_bytes: state::config().map_or(0, |c| c.max_bytes),
            observer: env!("CARGO_PKG_VERSION"),
            writer: WRITER_NAME,
        };
        record::header(&mut self.buf, &header);
    }

    fn definitions(&mut self) -> Result<(), Stop> {
        let count = registry::slot_count();
        while self.defined < count {
            let id = self.defined;
            if let Some(meta) = registry::slot(id).and_then(|s| s.meta()) {
                let def = record::KernelDef::new(id, meta.name.as_bytes(), meta.api.as_str(), meta.source.as_str());
                record::kernel(&mut self.buf, &def);
            }
            self.defined += 1;
            self.write_if_large()?;
        }
        let overflow_used = registry::slot(registry::OVERFLOW_SLOT).is_some_and(|s| s.shape_counts().launches() > 0);
        if !self.overflow_defined && (registry::overflowed() || overflow_used) {
            self.overflow_defined = true;
            let def = record::KernelDef::new(
                registry::OVERFLOW_SLOT,
                b"(overflow)",
                record::api::OVERFLOW,
                record::source::NONE,
            );
            record::kernel(&mut self.buf, &def);
            let detail = format!(
                "more than {} distinct kernels ({}); the others are counted as kernel 0",
                registry::max_kernels(),
                format::env::MAX_KERNELS
            );
            self.warning(record::warning::KERNEL_TABLE_FULL, &detail);
        }
        Ok(())
    }

    fn warning(&mut self, code: &'static str, detail: &str) {
        if self.warned.insert(code) {
            record::warning_record(&mut self.buf, code, detail);
        }
    }

    /// One window line with the deltas since the last flush; nothing if nothing changed.
    fn window(&mut self) {
        // Only kernels whose definition is written: one registered after the definition pass is
        // counted in the next window, after its definition.
        let count = self.defined as usize;
        if self.last.len() < count {
            self.last.resize(count, [0; 4]);
        }
        let mut lists: [Vec<(u32, u64)>; 4] = Default::default();
        let mut shapes: Vec<ShapeCount> = Vec::new();
        let mut other_shapes: Vec<(u32, u64)> = Vec::new();
        let first = if self.overflow_defined { 0 } else { 1 };
        for id in first..count as u32 {
            let Some(slot) = registry::slot(id) else { continue };
            let shape_counts = slot.shape_counts();
            let now = [shape_counts.launches(), slot.errors.load(), slot.graph.load(), slot.captured.load(RELAXED)];
            let before = std::mem::replace(&mut self.last[id as usize], now);
            for (list, (n, b)) in lists.iter_mut().zip(now.iter().zip(before)) {
                if *n != b {
                    list.push((id, n.wrapping_sub(b)));
                }
            }
            if now[0] != before[0] {
                self.shape_deltas(id, &shape_counts, &mut shapes, &mut other_shapes);
            }
        }
        let graph_now = [
            graphs::graph_launches(),
            graphs::unknown_graph_launches(),
            graphs::unattributed_captures(),
            graphs::expired_captures(),
        ];
        let graph_delta: Vec<u64> = graph_now.iter().zip(self.last_graph).map(|(n, b)| n.wrapping_sub(b)).collect();
        self.last_graph = graph_now;
        if graph_delta[1] > 0 {
            self.warning(
                record::warning::UNKNOWN_GRAPH_EXEC,
                "graph launches of execs whose graph was not captured under observation; their kernels are not counted",
            );
        }
        if graph_delta[2] > 0 {
            self.warning(
                record::warning::UNATTRIBUTED_CAPTURE,
                "launches recorded into a capture that could not be told apart from another; not counted on replay",
            );
        }
        if graph_delta[3] > 0 {
            self.warning(
                record::warning::STALE_CAPTURE,
                "a stream capture ended where no hook saw it (an unhooked EndCapture or stream destroy); its record \
                 expired, later launches on its stream count as executed, and replays of its graph are \
                 unknown_graph_launches",
            );
        }
        // t1 is read after the scan: every launch counted here happened before t1.
        let t0 = self.last_t;
        let t1 = now_ns().max(t0);
        self.last_t = t1;
        let empty = lists.iter().all(Vec::is_empty) && graph_delta.iter().all(|&d| d == 0);
        if empty && shapes.is_empty() && other_shapes.is_empty() {
            return;
        }
        let [counts, errors, graph, captured] = &lists;
        let window = record::Window {
            t0,
            t1,
            counts,
            errors,
            graph,
            captured,
            shapes: &shapes,
            other_shapes: &other_shapes,
            graph_launches: graph_delta[0],
            unknown_graph_launches: graph_delta[1],
            unattributed_captures: graph_delta[2],
            expired_captures: graph_delta[3],
            submits: 0,
        };
        record::window(&mut self.buf, &window);
    }

    /// Per-shape deltas of kernel `id` since its last window, from `counts` (the same reading
    /// that gave the window's launch count, so the two always agree).
    fn shape_deltas(
        &mut self,
        id: u32,
        counts: &ShapeCounts,
        shapes: &mut Vec<ShapeCount>,
        other: &mut Vec<(u32, u64)>,
    ) {
        let (last_entries, last_other) = self.last_shapes.entry(id).or_insert(([0; SHAPE_BUCKETS], 0));
        let mut merged: Vec<(Shape, u64)> = Vec::new();
        for (entry, last) in counts.entries.iter().zip(last_entries.iter_mut()) {
            let Some((shape, n)) = *entry else { continue };
            let delta = n.wrapping_sub(*last);
            *last = n;
            if delta == 0 {
                continue;
            }
            // Two threads racing on a new shape can claim two entries for it: merge them.
            match merged.iter_mut().find(|(s, _)| *s == shape) {
                Some((_, m)) => *m += delta,
                None => merged.push((shape, delta)),
            }
        }
        shapes.extend(merged.into_iter().map(|(s, count)| ShapeCount {
            kernel: id,
            grid: s.grid,
            block: s.block,
            count,
        }));
        if counts.other != *last_other {
            other.push((id, counts.other.wrapping_sub(*last_other)));
            *last_other = counts.other;
        }
    }

    fn write_if_large(&mut self) -> Result<(), Stop> {
        if self.buf.len() >= WRITE_CHUNK {
            self.write_out()?;
        }
        Ok(())
    }

    /// Writes the gathered lines within the budget: when they do not all fit, the whole lines
    /// that do, then the `truncated` record, and the writer stops.
    fn write_out(&mut self) -> Result<(), Stop> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let lines = std::mem::take(&mut self.buf);
        let result = self.write_budgeted(&lines);
        self.buf = lines;
        self.buf.clear();
        result
    }

    fn write_budgeted(&mut self, lines: &[u8]) -> Result<(), Stop> {
        let max_bytes = state::config().map_or(0, |c| c.max_bytes);
        if max_bytes == 0 {
            return Ok(self.write_bytes(lines)?);
        }
        let room = max_bytes.saturating_sub(CUT_RECORD_RESERVE).saturating_sub(self.written);
        if lines.len() as u64 <= room {
            return Ok(self.write_bytes(lines)?);
        }
        // `room` is below `lines.len()`, so it fits in usize.
        let fitting = &lines[..room as usize];
        let keep = fitting.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        self.write_bytes(&lines[..keep])?;
        let mut cut = Vec::with_capacity(CUT_RECORD_RESERVE as usize);
        record::truncated_budget(&mut cut, now_ns(), self.written, max_bytes);
        self.write_bytes(&cut)?;
        Err(Stop::Budget)
    }

    /// Writes `bytes` at the end of the file, counting what reached it (also when a write fails
    /// halfway).
    fn write_bytes(&mut self, mut bytes: &[u8]) -> io::Result<()> {
        let file = self.file.as_mut().ok_or_else(|| io::Error::other("trace file not open"))?;
        while !bytes.is_empty() {
            match file.write(bytes) {
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

    /// After a failed write: cuts the file back to a line boundary where a `truncated` record
    /// fits and writes it there. Each try gives up one more line from the end (a full disk may
    /// have room only inside blocks the file already holds), at most [`CUT_BACK_TRIES`] lines and
    /// [`CUT_BACK_BYTES`] bytes, never the header.
    fn record_write_error(&mut self, error: &io::Error) {
        // Without a whole header there is no trace to end with a record.
        let Some(file) = self.file.as_ref().filter(|_| self.regular && self.header_end > 0) else { return };
        let reason = self
            .write_errno
            .map_or_else(|| error.kind().to_string(), |code| io::Error::from_raw_os_error(code).to_string());
        let tail_start = self.written.saturating_sub(CUT_BACK_BYTES).max(self.header_end);
        let mut tail = vec![0u8; (self.written - tail_start.min(self.written)) as usize];
        let read = file.read_at(&mut tail, tail_start).unwrap_or(0);
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
            if file.set_len(end).is_ok() && file.write_all_at(&cut, end).is_ok() {
                self.written = end + cut.len() as u64;
                return;
            }
        }
    }

    fn flush(&mut self, kind: Flush) -> Result<(), Stop> {
        if self.file.is_none() {
            self.open()?;
        }
        self.definitions()?;
        self.window();
        if kind == Flush::Exit {
            record::end(&mut self.buf, now_ns());
        }
        self.write_out()
    }
}

const RELAXED: std::sync::atomic::Ordering = std::sync::atomic::Ordering::Relaxed;

/// Creates the first free candidate name (`format::naming`), exclusively: never overwrite a trace
/// (pid reuse, or the image an `exec` replaced). Readable too: after a write error the tail is read
/// back to find the last whole line.
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

fn open_new_in_dir(dir: &str, pid: i32) -> io::Result<(File, String)> {
    create_first_free(|out, attempt| format::naming::dir_candidate(out, dir.as_bytes(), pid as u32, attempt))
}

/// `BACKSCOPE_TRACE_FILE`: every process gets a file of its own, created exclusively (names in
/// `format::naming`). An existing device or FIFO (`/dev/stderr`) is written as it is: it is a sink,
/// not a file to claim.
fn open_file_destination(pattern: &str, pid: i32) -> io::Result<(File, String)> {
    let mut expanded = Vec::new();
    format::naming::expand_pattern(&mut expanded, pattern.as_bytes(), pid as u32);
    let path = String::from_utf8_lossy(&expanded).into_owned();
    if std::fs::metadata(&path).is_ok_and(|m| !m.is_file() && !m.is_dir()) {
        let file = std::fs::OpenOptions::new().append(true).open(&path).map_err(|e| with_path(e, &path))?;
        return Ok((file, path));
    }
    create_first_free(|out, attempt| format::naming::file_candidate(out, pattern.as_bytes(), pid as u32, attempt))
}

fn with_path(error: io::Error, path: &str) -> io::Error {
    io::Error::new(error.kind(), format!("{path}: {error}"))
}

/// Flushes; returns false once the writer is finished (exit flush done, or failed).
fn flush(kind: Flush) -> bool {
    let mut guard = WRITER.lock();
    let writer = guard.get_or_insert_with(Writer::new);
    if writer.done {
        return false;
    }
    if writer.owner_pid != getpid() {
        return false;
    }
    match writer.flush(kind) {
        Ok(()) => {
            if kind == Flush::Exit {
                writer.done = true;
            }
            !writer.done
        }
        Err(Stop::Budget) => {
            // Counting goes on (it costs nothing worth saving), so that a child forked later
            // starts its own trace with its own budget.
            writer.done = true;
            writer.file = None;
            state::note(format_args!(
                "the trace reached its budget of {} bytes (BACKSCOPE_TRACE_MAX_BYTES) and was cut; the program continues",
                state::config().map_or(0, |c| c.max_bytes)
            ));
            false
        }
        Err(Stop::Failed(e)) => {
            writer.record_write_error(&e);
            writer.done = true;
            writer.file = None;
            state::disable(format_args!("cannot write the trace ({e}); observer disabled, the program continues"));
            false
        }
    }
}

/// Starts the periodic writer thread.
pub fn spawn_thread(interval_ms: u64) {
    // The thread inherits the creating thread's signal mask: block everything around the spawn so
    // that the host's signal handlers never run on the observer's thread (a Go runtime, for one,
    // expects signals on its own threads).
    // SAFETY: sigset_t is plain data initialised by sigfillset/pthread_sigmask before use.
    let mut all: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let mut previous: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: valid sigset pointers; only this thread's mask changes, and it is restored below.
    unsafe {
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_BLOCK, &all, &mut previous);
    }
    let spawned = std::thread::Builder::new()
        .name("backscope-obs".into())
        .stack_size(256 * 1024)
        .spawn(move || writer_loop(interval_ms));
    // SAFETY: restores the mask saved above.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &previous, std::ptr::null_mut()) };
    if spawned.is_err() {
        // Without the thread there are no periodic windows, but the exit flush still writes
        // everything as one window.
        state::note(format_args!("could not start the writer thread; the trace will be written at exit only"));
    }
}

fn writer_loop(interval_ms: u64) {
    state::pin_in_memory();
    let interval = interval_ms.saturating_mul(1_000_000).max(1);
    let mut next = now_ns().saturating_add(interval);
    loop {
        let now = now_ns();
        if next > now {
            std::thread::sleep(std::time::Duration::from_nanos(next - now));
        }
        // Fixed cadence; after a stall, restart from now rather than catching up.
        next = next.saturating_add(interval).max(now_ns().saturating_add(1));
        if !state::is_on() {
            return;
        }
        let mut open = true;
        state::guarded(|| open = flush(Flush::Window));
        if !open {
            return;
        }
        graphs::reclaim_if_idle();
    }
}

/// In a forked child (single-threaded): drop the parent's writer state. Its lock may have been held
/// by the parent's writer thread, which does not exist here; then the state may be half-updated and
/// is leaked rather than dropped.
pub fn reset_in_child() {
    let was_locked = WRITER.is_locked();
    WRITER.release_for_fork();
    // SAFETY: atfork child handler: the only thread of the process, and no reference is kept.
    let state = unsafe { WRITER.get_unchecked_mut() };
    if let Some(old) = state.take() {
        if was_locked {
            std::mem::forget(old);
        } else {
            drop(old); // closes the child's copy of the parent's descriptor
        }
    }
}

/// Final flush at process exit.
#[cfg(not(test))]
#[used]
#[link_section = ".fini_array"]
static FLUSH_AT_EXIT: extern "C" fn() = flush_at_exit;

#[cfg_attr(test, allow(dead_code))]
extern "C" fn flush_at_exit() {
    let _ = std::panic::catch_unwind(|| {
        if state::is_on() {
            flush(Flush::Exit);
        }
    });
}
