//! Reading the kernel log while a traced run goes on.
//!
//! [`Capture::start`] opens `/dev/kmsg` non-blocking and seeks to its end (`SEEK_END`: the next read returns the first
//! record written after this moment), then a thread reads what is new every [`POLL`]: each `read()` returns one record;
//! `EAGAIN` means no more for now; `EPIPE` means the kernel overwrote records before they were read (the next read
//! goes on from the oldest one left) — counted, never an error. Only the kernel's own records (facility 0) that the
//! logs crate classifies as GPU-driver lines are kept, at most [`MAX_KEPT_LINES`] lines and [`MAX_KEPT_BYTES`] bytes of
//! text; each is appended to the stored file ([`super::stored`]) as it is read, so a run killed halfway keeps what
//! was read. The file is created with the first kept line, or with the first problem; a run with neither leaves none.
//!
//! Where `/dev/kmsg` cannot be opened (not root with `kernel.dmesg_restrict=1`, a container without it), the capture
//! says why once (the stored file's `unreadable` line, and [`Capture::unreadable`]) and the run goes on.
//!
//! `BACKSCOPE_KMSG=PATH` reads a file in /dev/kmsg's record format instead (the tests' way to play a GPU driver's
//! lines without writing them into the host's real kernel log): records appended to it after the start are read as
//! they come, one record per line and its dictionary lines after it.

use std::fs::File;
use std::io::{ErrorKind, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use super::record::{KernelLine, MAX_TEXT};
use super::stored::{self, End, Header, StoredRecord};

/// The environment variable naming a file to read instead of `/dev/kmsg`.
pub const SOURCE_ENV: &str = "BACKSCOPE_KMSG";
/// The kernel's log.
pub const KMSG: &str = "/dev/kmsg";
/// GPU-driver lines kept at most; later ones are counted (`over_cap`).
pub const MAX_KEPT_LINES: u64 = 1000;
/// Bytes of text kept at most.
pub const MAX_KEPT_BYTES: u64 = 512 << 10;
/// How often the thread reads what is new.
pub const POLL: Duration = Duration::from_millis(100);
/// Records read at most in one pass: the kernel's buffer holds a few thousand; a pass never runs unbounded.
const MAX_RECORDS_PER_PASS: usize = 100_000;
/// Bytes read at most in one pass from a followed file.
const MAX_FOLLOW_BYTES: usize = 4 << 20;

/// Where records come from, positioned where the capture began.
enum Source {
    /// `/dev/kmsg`: one record per read.
    Kmsg(File),
    /// A file in the same format, followed as it grows; `pending` holds a record not yet ended by its newline.
    Follow { file: File, pending: Vec<u8> },
}

/// A reader of the kernel log (or of a file in its format) from the moment it was opened.
pub struct Reader {
    source: Source,
    name: String,
    /// The kernel said records were overwritten before they were read (`EPIPE`).
    pub overwritten: bool,
    /// Records read that are not records (counted with the others, never kept).
    pub malformed: u64,
}

/// Why `/dev/kmsg` could not be opened, in words: the error, and the setting that decides it.
fn unreadable_reason(path: &str, e: &std::io::Error) -> String {
    let restrict = std::fs::read_to_string("/proc/sys/kernel/dmesg_restrict").ok();
    let why = match (e.kind(), restrict.as_deref().map(str::trim)) {
        (ErrorKind::PermissionDenied, Some("1")) => {
            " (kernel.dmesg_restrict is 1: reading the kernel log needs root or CAP_SYSLOG)"
        }
        (ErrorKind::PermissionDenied, _) => " (reading the kernel log needs root or CAP_SYSLOG)",
        _ => "",
    };
    format!("{path}: {e}{why}")
}

impl Reader {
    /// Opens `path` non-blocking, positioned at its end: `/dev/kmsg` (`follow` false: `SEEK_END` puts the reader after
    /// the last record), or a file in its format that is followed as it grows (`follow`: a regular file from its end,
    /// a FIFO as it is written). `Err`: why it cannot be read, in words.
    pub fn open(path: &str, follow: bool) -> Result<Reader, String> {
        Reader::open_at(path, follow, true)
    }

    /// [`Reader::open`] positioned at the oldest record the kernel still holds (the start of a file in its format):
    /// reading the kernel's lines after the fact.
    pub fn open_from_start(path: &str, follow: bool) -> Result<Reader, String> {
        Reader::open_at(path, follow, false)
    }

    fn open_at(path: &str, follow: bool, at_end: bool) -> Result<Reader, String> {
        use std::os::unix::fs::OpenOptionsExt;
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(path)
            .map_err(|e| unreadable_reason(path, &e))?;
        if at_end {
            match file.seek(SeekFrom::End(0)) {
                Ok(_) => {}
                Err(e) if follow && e.raw_os_error() == Some(libc::ESPIPE) => {}
                Err(e) => return Err(format!("{path}: cannot seek to its end: {e}")),
            }
        }
        let source = if follow { Source::Follow { file, pending: Vec::new() } } else { Source::Kmsg(file) };
        Ok(Reader { source, name: path.to_string(), overwritten: false, malformed: 0 })
    }

    /// Where it reads.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Every record available now, each given to `each`. `Err`: reading failed and must stop (why, in words).
    pub fn read(&mut self, each: &mut dyn FnMut(&logs::kmsg::KmsgRecord<'_>)) -> Result<(), String> {
        match &mut self.source {
            Source::Kmsg(f) => {
                // The kernel's records are at most 8 KiB with their dictionary (CONSOLE_EXT_LOG_MAX); a smaller
                // buffer is EINVAL.
                let mut buf = vec![0u8; 16 << 10];
                for _ in 0..MAX_RECORDS_PER_PASS {
                    match f.read(&mut buf) {
                        Ok(0) => return Ok(()),
                        Ok(n) => match logs::kmsg::parse_record(&buf[..n]) {
                            Ok(r) => each(&r),
                            Err(_) => self.malformed += 1,
                        },
                        Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(()),
                        Err(e) if e.kind() == ErrorKind::Interrupted => {}
                        // Records were overwritten; the next read goes on from the oldest left, and the gap in the
                        // sequence numbers counts them.
                        Err(e) if e.raw_os_error() == Some(libc::EPIPE) => self.overwritten = true,
                        Err(e) => return Err(format!("{}: {e}", self.name)),
                    }
                }
                Ok(())
            }
            Source::Follow { file, pending } => {
                let mut chunk = vec![0u8; 64 << 10];
                let mut read = 0;
                while read < MAX_FOLLOW_BYTES {
                    match file.read(&mut chunk) {
                        Ok(0) => break,
                        Ok(n) => {
                            pending.extend_from_slice(&chunk[..n]);
                            read += n;
                        }
                        Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                        Err(e) if e.kind() == ErrorKind::Interrupted => {}
                        Err(e) => return Err(format!("{}: {e}", self.name)),
                    }
                }
                let Some(cut) = pending.iter().rposition(|&b| b == b'\n') else { return Ok(()) };
                let complete: Vec<u8> = pending.drain(..=cut).collect();
                for (_, r) in logs::kmsg::Records::new(&complete) {
                    match r {
                        Ok(r) => each(&r),
                        Err(_) => self.malformed += 1,
                    }
                }
                Ok(())
            }
        }
    }
}

/// What is kept of the records read, and the counts: the same for a capture beside a run and for a reading after
/// the fact ([`super::after_the_fact`]).
#[derive(Default)]
pub struct Keeper {
    /// The counts so far (`usec` is left to the reader).
    pub end: End,
    last_seq: Option<u64>,
    kept_bytes: u64,
}

impl Keeper {
    /// One record read (its sequence number, whether the kernel wrote it, its text): counted, a gap in the sequence
    /// numbers counted as lost, and its text returned when it is to be kept: the kernel's own line (facility 0), a
    /// GPU-driver line by the logs crate's classifier, within [`MAX_KEPT_LINES`] and [`MAX_KEPT_BYTES`] (beyond them,
    /// counted as `over_cap`).
    pub fn take(&mut self, seq: u64, from_kernel: bool, text: &[u8]) -> Option<String> {
        self.end.records += 1;
        if let Some(last) = self.last_seq {
            if seq > last.saturating_add(1) {
                self.end.lost = self.end.lost.saturating_add(seq - last - 1);
            }
        }
        self.last_seq = Some(seq);
        if !from_kernel {
            return None;
        }
        let text = String::from_utf8_lossy(&text[..text.len().min(MAX_TEXT)]).into_owned();
        super::record::classify(&text)?;
        if self.end.kept >= MAX_KEPT_LINES || self.kept_bytes + text.len() as u64 > MAX_KEPT_BYTES {
            self.end.over_cap += 1;
            return None;
        }
        self.end.kept += 1;
        self.kept_bytes += text.len() as u64;
        Some(text)
    }
}

/// The capture's state, behind a lock: the thread and [`Capture::drain`] read through it.
struct State {
    /// `None`: not readable (see `unreadable`), or reading stopped (see `read_error`).
    reader: Option<Reader>,
    source_name: String,
    out_path: PathBuf,
    /// How kept lines cite the stored file.
    cited: String,
    out: Option<File>,
    /// Lines written to the stored file.
    out_lines: u64,
    write_error: Option<String>,
    started_usec: u64,
    keeper: Keeper,
    unreadable: Option<String>,
    read_error: Option<String>,
    /// Lines kept since the last [`Capture::take_new`].
    new_lines: Vec<KernelLine>,
}

struct Shared {
    stop: AtomicBool,
    state: Mutex<State>,
}

/// A capture running beside a traced run.
pub struct Capture {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

/// CLOCK_MONOTONIC in µs.
fn monotonic_usec() -> u64 {
    trace_format::clock::now_ns() / 1000
}

impl State {
    /// The stored file, created with its header on first use.
    fn out(&mut self) -> Option<&mut File> {
        if self.out.is_none() && self.write_error.is_none() {
            let header = Header {
                kernel_log: stored::VERSION,
                source: self.source_name.clone(),
                started_usec: self.started_usec,
            };
            let made = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.out_path)
                .and_then(|mut f| f.write_all(stored::line(&header).as_bytes()).map(|()| f));
            match made {
                Ok(f) => {
                    // Appending to an earlier capture's file (a resumed sweep): count the lines already there.
                    self.out_lines = std::fs::read(&self.out_path)
                        .map(|b| b.iter().filter(|&&c| c == b'\n').count() as u64)
                        .unwrap_or(1);
                    self.out = Some(f);
                }
                Err(e) => self.write_error = Some(format!("{}: {e}", self.out_path.display())),
            }
        }
        self.out.as_mut()
    }

    /// Appends one stored line; its line number in the file.
    fn write(&mut self, text: &str) -> Option<u64> {
        let f = self.out()?;
        match f.write_all(text.as_bytes()) {
            Ok(()) => {
                self.out_lines += 1;
                Some(self.out_lines)
            }
            Err(e) => {
                self.write_error = Some(format!("{}: {e}", self.out_path.display()));
                None
            }
        }
    }

    /// One record read: counted, and kept (stored, and joined in this run) when [`Keeper::take`] keeps it.
    fn take(&mut self, r: &logs::kmsg::KmsgRecord<'_>) {
        let Some(text) = self.keeper.take(r.seq, r.from_kernel(), r.text) else { return };
        let device = r.get(b"DEVICE").map(|d| String::from_utf8_lossy(d).into_owned());
        let stored =
            StoredRecord { seq: r.seq, usec: r.usec, level: r.level, text: text.clone(), device: device.clone() };
        // A line that could not be written is still joined in this run; its line number is then 0.
        let line = self.write(&stored::line(&stored)).unwrap_or(0);
        if let Some(k) = KernelLine::new(self.cited.clone(), line, (r.seq, r.usec, r.level), text, device) {
            self.new_lines.push(k);
        }
    }

    /// Reads every record available now.
    fn drain(&mut self) {
        let Some(mut reader) = self.reader.take() else { return };
        let result = reader.read(&mut |r| self.take(r));
        self.keeper.end.overwritten |= reader.overwritten;
        match result {
            Ok(()) => self.reader = Some(reader),
            Err(e) => self.read_error = Some(e),
        }
    }
}

impl Shared {
    fn drain(&self) {
        if let Ok(mut s) = self.state.lock() {
            s.drain();
        }
    }
}

/// Spawns the reading thread with every signal blocked in it. `trace` and `sweep` take SIGINT and SIGTERM with
/// `sigtimedwait` in the thread that blocked them; a process-directed signal goes to any thread that does not block it,
/// and this thread, started first, would otherwise take it with the default action and end backscope before its
/// summary.
fn spawn_without_signals(f: impl FnOnce() + Send + 'static) -> std::io::Result<JoinHandle<()>> {
    // SAFETY: sigset_t is plain data, initialised by sigfillset before use; pthread_sigmask changes this thread's mask
    // only, and the old mask is put back before returning (the new thread keeps the full one it inherited).
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_BLOCK, &all, &mut old);
        let spawned = std::thread::Builder::new().name("kernel-log".into()).spawn(f);
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        spawned
    }
}

impl Capture {
    /// Starts reading the kernel log (or the file [`SOURCE_ENV`] names) from now, storing kept lines in `out`, which
    /// claims cite as `cited`. Never fails: an unreadable log is said in the stored file and by [`Capture::unreadable`].
    pub fn start(out: &Path, cited: &str) -> Capture {
        match std::env::var(SOURCE_ENV) {
            Ok(p) if !p.is_empty() => Capture::start_from(out, cited, Some(&p)),
            _ => Capture::start_from(out, cited, None),
        }
    }

    /// [`Capture::start`] reading `follow` (a file in /dev/kmsg's format, followed as it grows) instead of
    /// `/dev/kmsg` when given.
    pub fn start_from(out: &Path, cited: &str, follow: Option<&str>) -> Capture {
        let source_name = follow.unwrap_or(KMSG).to_string();
        let opened = Reader::open(&source_name, follow.is_some());
        let mut state = State {
            reader: None,
            source_name,
            out_path: out.to_path_buf(),
            cited: cited.to_string(),
            out: None,
            out_lines: 0,
            write_error: None,
            started_usec: monotonic_usec(),
            keeper: Keeper::default(),
            unreadable: None,
            read_error: None,
            new_lines: Vec::new(),
        };
        match opened {
            Ok(r) => state.reader = Some(r),
            Err(why) => {
                state.write(&stored::line(&serde_json::json!({ "unreadable": why })));
                state.unreadable = Some(why);
            }
        }
        let readable = state.unreadable.is_none();
        let shared = Arc::new(Shared { stop: AtomicBool::new(false), state: Mutex::new(state) });
        let thread = readable.then(|| {
            let s = Arc::clone(&shared);
            spawn_without_signals(move || {
                while !s.stop.load(Ordering::Relaxed) {
                    s.drain();
                    std::thread::park_timeout(POLL);
                }
            })
            .ok()
        });
        Capture { shared, thread: thread.flatten() }
    }

    /// Why the kernel log could not be read, if it could not.
    pub fn unreadable(&self) -> Option<String> {
        self.shared.state.lock().ok().and_then(|s| s.unreadable.clone())
    }

    /// Reads what is new now (before a join that must see every line up to this moment).
    pub fn drain(&self) {
        self.shared.drain();
    }

    /// The lines kept since the last call, after reading what is new.
    pub fn take_new(&self) -> Vec<KernelLine> {
        let Ok(mut s) = self.shared.state.lock() else { return Vec::new() };
        s.drain();
        std::mem::take(&mut s.new_lines)
    }

    /// Stops reading (after a last pass) and writes the end line when the stored file exists or something is worth
    /// saying (records lost, reading stopped). Returns the counts.
    pub fn finish(mut self) -> End {
        self.stop_thread();
        let Ok(mut s) = self.shared.state.lock() else { return End::default() };
        s.drain();
        s.keeper.end.usec = monotonic_usec();
        if let Some(e) = s.read_error.clone() {
            s.write(&stored::line(&serde_json::json!({ "read_error": e })));
        }
        if s.out.is_some() || s.keeper.end.lost > 0 || s.keeper.end.overwritten || s.keeper.end.over_cap > 0 {
            let end = serde_json::json!({ "end": s.keeper.end });
            s.write(&stored::line(&end));
        }
        s.keeper.end.clone()
    }

    fn stop_thread(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        self.stop_thread();
    }
}
