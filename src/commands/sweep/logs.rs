//! Server log reading: which backend served a cell, and the line that names a crash or a start failure. What each
//! line says is crates/logs' reading of it (`crate::observe::logfacts::ServerLines`); this module is the sweep's plumbing
//! around it: reading a growing log once across cells, slicing each cell's window, and deciding the backend from
//! the facts.
//!
//! Formats, as llama.cpp 11434 and Ollama print them: llama-server at `-lv 4` writes
//! `llama_model_load_from_file_impl: using device Vulkan0 (llvmpipe (LLVM 15.0.6, 256 bits)) (unknown id) - 7927
//! MiB free`, `load_tensors: offloaded 5/5 layers to GPU`, `load_tensors: Vulkan0 model buffer size = 12.00 MiB`,
//! `load_backend: loaded Vulkan backend from …`, optionally prefixed by a timestamp and level letter
//! (`0.00.177.887 I `). Ollama forwards these lines raw and adds its own `key=value` lines.
//!
//! The offload line alone is not evidence of a GPU: llama.cpp prints `offloaded N/M` from the requested layer count
//! whenever a GPU backend has a device (`llama_supports_gpu_offload()`, `src/llama-model.cpp`), even one that
//! `--device` kept away from the model. Observed with 11434: `GGML_VK_VISIBLE_DEVICES=0 llama-server --device none
//! -ngl 3` logs `offloaded 3/5 layers to GPU` and then only a `CPU_Mapped model buffer`. A cell counts as served by
//! a GPU only when a device was in use (`using device …`) and layers were offloaded to it.
//!
//! A verbose server writes megabytes per request, and a long sweep has hundreds of cells: a log is therefore read
//! once, front to back, by a [`LogReader`] that the sweep keeps per log between cells; each cell reads only the
//! bytes appended since the previous one, and the same pass writes the cell's slice of the log.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use crate::observe::logfacts::{ServerLine, ServerLines};
use crate::run::format::record::{BackendFacts, LogRef};

/// Most bytes of one line kept for matching; the rest of a longer line is counted, not held. Every line the scan
/// looks for is a few hundred bytes at most.
const MAX_LINE: usize = 64 << 10;
/// Most lines of one kind (devices, model buffers, backend libraries) kept as evidence.
const MAX_FACT_LINES: usize = 64;
/// Lines of the window's end kept for error messages.
const TAIL_LINES: usize = 8;
/// Longest quote of a line.
const QUOTE_CHARS: usize = 300;
/// Bytes read from the log at a time.
const CHUNK: usize = 64 << 10;

/// What a log says, for one cell.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LogScan {
    pub backend: Option<BackendFacts>,
    /// The first line in the window that names a crash (signal, assert, terminated runner).
    pub crash: Option<LogRef>,
    /// The first line in the window that says why loading failed (model file, memory).
    pub load_error: Option<LogRef>,
    /// The port could not be bound.
    pub bind_error: Option<LogRef>,
    /// The last non-empty lines of the window, for error messages.
    pub tail: Vec<String>,
}

/// Backend facts gathered over every line read so far (the model was loaded before any cell's window).
#[derive(Clone, Debug, Default)]
struct Facts {
    /// `using device` lines since the last offload line, and those the last offload line adopted.
    pending_devices: Vec<(String, LogRef)>,
    used_devices: Vec<(String, LogRef)>,
    offloaded: Option<(u32, u32)>,
    offload_line: Option<LogRef>,
    /// Model buffers of the current load.
    buffers: Vec<(String, LogRef)>,
    loaded_backends: Vec<String>,
    backend_lines: Vec<LogRef>,
}

fn push_capped<T>(v: &mut Vec<T>, item: T) {
    if v.len() < MAX_FACT_LINES {
        v.push(item);
    }
}

impl Facts {
    fn line(&mut self, what: &ServerLine, r: &dyn Fn() -> LogRef) {
        match what {
            ServerLine::DeviceUsed(dev) => push_capped(&mut self.pending_devices, (dev.clone(), r())),
            ServerLine::Offloaded(n, m) => {
                self.offloaded = Some((*n, *m));
                self.offload_line = Some(r());
                // A model (re)load: the devices logged since the previous load belong to this one.
                if !self.pending_devices.is_empty() {
                    self.used_devices = std::mem::take(&mut self.pending_devices);
                }
                self.buffers.clear();
            }
            ServerLine::BackendLoaded(name)
                if !self.loaded_backends.contains(name) && self.loaded_backends.len() < MAX_FACT_LINES =>
            {
                self.loaded_backends.push(name.clone());
                self.backend_lines.push(r());
            }
            ServerLine::ModelBuffer(device) => push_capped(&mut self.buffers, (device.clone(), r())),
            _ => {}
        }
    }

    fn result(&self) -> Option<BackendFacts> {
        let used = if self.used_devices.is_empty() { &self.pending_devices } else { &self.used_devices };
        let mut facts = BackendFacts {
            devices: used.iter().map(|(d, _)| d.clone()).collect(),
            offloaded: self.offloaded,
            loaded_backends: self.loaded_backends.clone(),
            evidence: self.backend_lines.clone(),
            ..Default::default()
        };
        let cpu_buffers_only = !self.buffers.is_empty() && self.buffers.iter().all(|(n, _)| n.starts_with("CPU"));
        facts.backend = match (used.first(), self.offloaded) {
            (Some((dev, _)), Some((n, _))) if n > 0 => dev.clone(),
            (Some((dev, _)), None) => format!("{dev} (offload not logged)"),
            (_, Some(_)) => "CPU".to_string(),
            (None, None) if cpu_buffers_only => "CPU".to_string(),
            (None, None) => return None,
        };
        facts.evidence.extend(used.iter().map(|(_, r)| r.clone()));
        facts.evidence.extend(self.offload_line.clone());
        facts.evidence.extend(self.buffers.iter().map(|(_, r)| r.clone()));
        Some(facts)
    }
}

/// The lines of one cell's window: the first crash, load-error and bind lines, and the last lines.
#[derive(Debug, Default)]
struct Window {
    crash: Option<LogRef>,
    load_error: Option<LogRef>,
    bind_error: Option<LogRef>,
    tail: VecDeque<String>,
}

impl Window {
    fn line(&mut self, line: &str, what: &ServerLine, r: &dyn Fn() -> LogRef) {
        if !line.trim().is_empty() {
            if self.tail.len() == TAIL_LINES {
                self.tail.pop_front();
            }
            self.tail.push_back(super::api::truncate(line.trim(), QUOTE_CHARS));
        }
        let first = match what {
            ServerLine::Crash => &mut self.crash,
            ServerLine::LoadFailed => &mut self.load_error,
            ServerLine::BindFailed => &mut self.bind_error,
            _ => return,
        };
        if first.is_none() {
            *first = Some(r());
        }
    }
}

#[cfg(test)]
thread_local! {
    /// Log bytes read on this thread: how the tests see that a cell reads only what was appended.
    static READ_ON_THREAD: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Log bytes [`LogReader`]s read on the calling thread so far.
#[cfg(test)]
pub fn bytes_read_on_this_thread() -> u64 {
    READ_ON_THREAD.with(|c| c.get())
}

/// A server log read front to back across the cells of a sweep: each cell reads only the bytes appended since the
/// previous read, and the backend facts carry over. What it holds is bounded whatever the log: one line of at most
/// [`MAX_LINE`] bytes, capped lists of fact lines, and the window's first matches and last lines.
#[derive(Debug)]
pub struct LogReader {
    path: PathBuf,
    /// How lines are cited (the run-relative name of a managed server's log, or the log's own path).
    label: String,
    /// Bytes read so far end here.
    read_to: u64,
    /// The incomplete line at `read_to`: its first byte's offset and up to [`MAX_LINE`] of its bytes.
    line_start: u64,
    partial: Vec<u8>,
    /// Complete lines read.
    lines: u64,
    facts: Facts,
    /// crates/logs' reading of each line, with its state from line to line.
    classes: ServerLines,
}

impl LogReader {
    /// A reader of the whole log at `path`, citing it as `label`.
    pub fn new(path: &Path, label: &str) -> LogReader {
        LogReader::starting_at(path, 0, label)
    }

    /// A reader of the log from byte `origin` on; line 1 is the line starting there.
    pub fn starting_at(path: &Path, origin: u64, label: &str) -> LogReader {
        LogReader {
            path: path.to_path_buf(),
            label: label.to_string(),
            read_to: origin,
            line_start: origin,
            partial: Vec::new(),
            lines: 0,
            facts: Facts::default(),
            classes: ServerLines::default(),
        }
    }

    /// Where the next read starts.
    pub fn position(&self) -> u64 {
        self.read_to
    }

    /// Bytes held in memory for the incomplete line.
    #[cfg(test)]
    pub fn held_bytes(&self) -> usize {
        self.partial.capacity()
    }

    /// Read the log up to byte `end` and say what it holds for the window of lines starting at or after
    /// `window_start`: backend facts from every line so far, crash and error lines and the tail from the window.
    /// The bytes read from `window_start` on are also written to `slice`. A log that shrank (rotated, truncated)
    /// is read again from its start.
    pub fn advance(&mut self, end: u64, window_start: u64, mut slice: Option<&mut dyn Write>) -> io::Result<LogScan> {
        let mut f = File::open(&self.path)?;
        let len = f.metadata()?.len();
        if len < self.read_to {
            *self = LogReader::new(&self.path, &self.label);
        }
        let end = end.min(len);
        let mut window = Window::default();
        if end > self.read_to {
            f.seek(SeekFrom::Start(self.read_to))?;
            let mut buf = vec![0u8; CHUNK];
            while self.read_to < end {
                let want = (end - self.read_to).min(CHUNK as u64) as usize;
                let n = f.read(&mut buf[..want])?;
                if n == 0 {
                    break;
                }
                #[cfg(test)]
                READ_ON_THREAD.with(|c| c.set(c.get() + n as u64));
                let at = self.read_to;
                if let Some(out) = slice.as_mut() {
                    let skip = window_start.saturating_sub(at).min(n as u64) as usize;
                    out.write_all(&buf[skip..n])?;
                }
                self.feed(&buf[..n], window_start, &mut window);
            }
        }
        Ok(self.scan(window_start, window))
    }

    /// Feed bytes that follow `read_to`.
    fn feed(&mut self, bytes: &[u8], window_start: u64, window: &mut Window) {
        let mut rest = bytes;
        while !rest.is_empty() {
            let (piece, newline) = match rest.iter().position(|&b| b == b'\n') {
                Some(i) => (&rest[..i], true),
                None => (rest, false),
            };
            let room = MAX_LINE.saturating_sub(self.partial.len());
            self.partial.extend_from_slice(&piece[..piece.len().min(room)]);
            let used = piece.len() + usize::from(newline);
            self.read_to += used as u64;
            rest = &rest[used..];
            if newline {
                self.lines += 1;
                let line = std::mem::take(&mut self.partial);
                self.line(&line, self.lines, self.line_start >= window_start, window);
                self.partial = line;
                self.partial.clear();
                self.line_start = self.read_to;
            }
        }
    }

    fn line(&mut self, bytes: &[u8], lineno: u64, in_window: bool, window: &mut Window) {
        let bytes = bytes.strip_suffix(b"\r").unwrap_or(bytes);
        let what = self.classes.read(bytes);
        let text = String::from_utf8_lossy(bytes);
        let line = text.as_ref();
        let r =
            || LogRef { file: self.label.clone(), line: lineno, text: super::api::truncate(line.trim(), QUOTE_CHARS) };
        self.facts.line(&what, &r);
        if in_window {
            window.line(line, &what, &r);
        }
    }

    /// The scan as of now. An incomplete last line counts as a line of this window (a crash message may lack its
    /// newline); it is read again, completed, by the next call, but only for the backend facts.
    fn scan(&self, window_start: u64, mut window: Window) -> LogScan {
        let mut facts = self.facts.clone();
        if !self.partial.is_empty() {
            let bytes = self.partial.strip_suffix(b"\r").unwrap_or(&self.partial);
            // A copy of the line-to-line state: the completed line is read again by the next call.
            let what = self.classes.clone().read(bytes);
            let text = String::from_utf8_lossy(bytes);
            let line = text.as_ref();
            let r = || LogRef {
                file: self.label.clone(),
                line: self.lines + 1,
                text: super::api::truncate(line.trim(), QUOTE_CHARS),
            };
            facts.line(&what, &r);
            if self.line_start >= window_start {
                window.line(line, &what, &r);
            }
        }
        LogScan {
            backend: facts.result(),
            crash: window.crash,
            load_error: window.load_error,
            bind_error: window.bind_error,
            tail: window.tail.into(),
        }
    }
}

/// Scan a whole log held in memory, as a [`LogReader`] would read it (the tests' shorthand). `file` is how the log
/// is named in the evidence.
#[cfg(test)]
pub fn scan_log(bytes: &[u8], file: &str, window_start: u64) -> LogScan {
    let mut reader = LogReader::new(Path::new(""), file);
    let mut window = Window::default();
    reader.feed(bytes, window_start, &mut window);
    reader.scan(window_start, window)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    // Lines in the shapes llama-server 11434 prints at -lv 4 (seen in the logs of the sweep tests' real servers).
    const VULKAN_LOG: &str = "\
0.00.010.001 I load_backend: loaded Vulkan backend from /x/libggml-vulkan.so
0.00.010.002 I load_backend: loaded CPU backend from /x/libggml-cpu.so
0.00.020.000 I llama_model_load_from_file_impl: using device Vulkan0 (llvmpipe (LLVM 15.0.6, 256 bits)) (unknown id) - 7927 MiB free
0.00.177.886 I load_tensors: offloading 4 repeating layers to GPU
0.00.177.887 I load_tensors: offloaded 5/5 layers to GPU
0.00.177.900 I load_tensors:      Vulkan0 model buffer size =    12.00 MiB
0.00.177.901 I load_tensors:   CPU_Mapped model buffer size =    15.63 MiB
0.01.000.000 I main: server is listening on http://127.0.0.1:4242
";

    #[test]
    fn vulkan_device_with_layers_offloaded() {
        let s = scan_log(VULKAN_LOG.as_bytes(), "servers/s001-vulkan.log", 0);
        let b = s.backend.unwrap();
        assert_eq!(b.backend, "Vulkan0 (llvmpipe (LLVM 15.0.6, 256 bits))");
        assert_eq!(b.offloaded, Some((5, 5)));
        assert_eq!(b.loaded_backends, vec!["Vulkan", "CPU"]);
        let lines: Vec<u64> = b.evidence.iter().map(|e| e.line).collect();
        assert_eq!(lines, vec![1, 2, 3, 5, 6, 7]);
        assert!(b.evidence.iter().all(|e| e.file == "servers/s001-vulkan.log"));
        assert!(s.crash.is_none() && s.bind_error.is_none());
    }

    #[test]
    fn device_present_but_no_layers_offloaded_is_cpu() {
        let log = VULKAN_LOG.replace("offloaded 5/5", "offloaded 0/5");
        assert_eq!(scan_log(log.as_bytes(), "l", 0).backend.unwrap().backend, "CPU");
    }

    #[test]
    fn offload_line_without_a_device_is_cpu() {
        // As llama-server 11434 logs it with a Vulkan device registered but `--device none -ngl 1`.
        let log =
            "load_tensors: offloaded 1/5 layers to GPU\nload_tensors:   CPU_Mapped model buffer size =    36.26 MiB\n";
        let b = scan_log(log.as_bytes(), "l", 0).backend.unwrap();
        assert_eq!(b.backend, "CPU");
        assert_eq!(b.offloaded, Some((1, 5)));
        assert!(b.devices.is_empty());
    }

    #[test]
    fn a_reload_replaces_the_previous_device_set() {
        let log = "llama_model_load_from_file_impl: using device CUDA0 (NVIDIA H100) (0000:01:00.0) - 80000 MiB free\n\
                   load_tensors: offloaded 5/5 layers to GPU\n\
                   llama_model_load_from_file_impl: using device ROCm0 (AMD Radeon Pro VII) (0000:03:00.0) - 16000 MiB free\n\
                   load_tensors: offloaded 2/5 layers to GPU\n";
        let b = scan_log(log.as_bytes(), "l", 0).backend.unwrap();
        assert_eq!(b.backend, "ROCm0 (AMD Radeon Pro VII)");
        assert_eq!(b.offloaded, Some((2, 5)));
        assert_eq!(b.devices.len(), 1);
    }

    #[test]
    fn crash_and_bind_lines_only_inside_the_window() {
        let head = "time=1 level=INFO msg=\"starting\"\n";
        let log = format!(
            "{head}time=2 level=ERROR source=server.go msg=\"llama-server terminated\" error=\"signal: segmentation fault\" exit=unknown\n"
        );
        let s = scan_log(log.as_bytes(), "l", head.len() as u64);
        assert_eq!(s.crash.as_ref().unwrap().line, 2);
        assert!(s.backend.is_none());
        let s = scan_log(log.as_bytes(), "l", log.len() as u64);
        assert!(s.crash.is_none(), "lines before the window do not belong to this cell");
        let b = scan_log(b"main: couldn't bind HTTP server socket, hostname: 127.0.0.1, port: 8080\n", "l", 0);
        assert_eq!(b.bind_error.unwrap().line, 1);
        let e = scan_log(b"llama_model_load: error loading model: No such file\n", "l", 0);
        assert!(e.load_error.is_some());
        assert_eq!(e.tail, vec!["llama_model_load: error loading model: No such file"]);
    }

    #[test]
    fn skipping_duplicate_devices_is_not_a_use() {
        // llama.cpp 11434 src/llama.cpp:248 prints the skip after the use of the device it keeps.
        let log = "llama_model_load_from_file_impl: using device Vulkan0 (b) (0000:03:00.0) - 1 MiB free\n\
                   llama_model_load_from_file_impl: skipping device Vulkan1 (a) with id 0000:03:00.0 - already using device Vulkan0 (b) with the same id\n\
                   load_tensors: offloaded 5/5 layers to GPU\n";
        let b = scan_log(log.as_bytes(), "l", 0).backend.unwrap();
        assert_eq!((b.backend.as_str(), b.devices.len()), ("Vulkan0 (b)", 1), "{b:?}");
    }

    /// A log that grows while it is read: `cells` windows of `noise` bytes each, with a crash line in one.
    struct Growing {
        dir: tempfile::TempDir,
        path: std::path::PathBuf,
    }

    impl Growing {
        fn new(head: &str) -> Growing {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("server.log");
            std::fs::write(&path, head).unwrap();
            Growing { dir, path }
        }

        fn append(&self, bytes: &[u8]) -> (u64, u64) {
            let start = std::fs::metadata(&self.path).unwrap().len();
            std::fs::OpenOptions::new().append(true).open(&self.path).unwrap().write_all(bytes).unwrap();
            (start, start + bytes.len() as u64)
        }

        /// The 1-based line number of the first line containing `needle`, counted independently of the reader.
        fn line_of(&self, needle: &str) -> u64 {
            let text = String::from_utf8_lossy(&std::fs::read(&self.path).unwrap()).into_owned();
            text.lines().position(|l| l.contains(needle)).unwrap() as u64 + 1
        }
    }

    #[test]
    fn a_growing_log_is_read_once_and_keeps_its_backend_facts() {
        let log = Growing::new(VULKAN_LOG);
        let mut reader = LogReader::new(&log.path, "servers/s001-vulkan.log");
        let noise = "0.02.000.000 I slot update_slots: id  0 | task 7 | prompt processing progress\n".repeat(4096);
        let crash_cell = 17;
        for cell in 0..30 {
            let mut window = noise.clone();
            if cell == crash_cell {
                window.push_str("0.03.000.000 E ggml_vulkan: GGML_ASSERT(ok) failed\n");
            }
            let (start, end) = log.append(window.as_bytes());
            let before = bytes_read_on_this_thread();
            let mut slice = Vec::new();
            let scan = reader.advance(end, start, Some(&mut slice)).unwrap();
            let read = bytes_read_on_this_thread() - before;
            let head = if cell == 0 { VULKAN_LOG.len() as u64 } else { 0 };
            assert_eq!(read, head + window.len() as u64, "cell {cell} reads what was appended since the last cell");
            assert_eq!(slice, window.as_bytes(), "cell {cell}: the slice is the window");
            let b = scan.backend.unwrap();
            assert_eq!(b.backend, "Vulkan0 (llvmpipe (LLVM 15.0.6, 256 bits))", "cell {cell}");
            assert_eq!(b.evidence.iter().map(|e| e.line).collect::<Vec<_>>(), [1, 2, 3, 5, 6, 7]);
            if cell == crash_cell {
                let crash = scan.crash.unwrap();
                assert_eq!(crash.line, log.line_of("GGML_ASSERT"));
                assert_eq!(crash.text, "0.03.000.000 E ggml_vulkan: GGML_ASSERT(ok) failed");
                assert_eq!(scan.tail.last().map(String::as_str), Some(crash.text.as_str()));
            } else {
                assert!(scan.crash.is_none(), "cell {cell}: a crash belongs to its own window only");
            }
            assert_eq!(scan.tail.len(), TAIL_LINES);
        }
    }

    #[test]
    fn one_huge_line_is_counted_not_held() {
        let log = Growing::new("");
        let mut reader = LogReader::new(&log.path, "l");
        // 8 MiB without a newline, read in one window, then the line's end and a crash line in the next.
        let (start, end) = log.append(&vec![b'x'; 8 << 20]);
        let scan = reader.advance(end, start, None).unwrap();
        assert!(reader.held_bytes() <= 2 * MAX_LINE, "held {} bytes", reader.held_bytes());
        assert_eq!(scan.tail.len(), 1, "the incomplete line is the window's last line");
        assert!(scan.tail[0].ends_with('…'), "quoted, shortened");
        let (start, end) = log.append(b"xx\nSegmentation fault (core dumped)\n");
        let scan = reader.advance(end, start, None).unwrap();
        assert!(reader.held_bytes() <= 2 * MAX_LINE);
        assert_eq!(scan.crash.map(|c| c.line), Some(2));
        assert_eq!(scan.tail, ["Segmentation fault (core dumped)"], "the huge line began before this window");
    }

    #[test]
    fn a_line_without_its_newline_yet_counts_once() {
        let log = Growing::new("");
        let mut reader = LogReader::new(&log.path, "l");
        let (start, end) = log.append(b"ok\nSegmentation fault (core dumped)");
        let scan = reader.advance(end, start, None).unwrap();
        assert_eq!(scan.crash.map(|c| c.line), Some(2), "a crash message without its newline is seen");
        let (start, end) = log.append(b"\nnext\n");
        let scan = reader.advance(end, start, None).unwrap();
        assert!(scan.crash.is_none(), "the completed line belongs to the earlier window");
        assert_eq!(scan.tail, ["next"]);
    }

    #[test]
    fn windows_are_byte_offsets_even_after_invalid_utf8() {
        // Each invalid byte decodes to a 3-byte U+FFFD: offsets taken from decoded text would drift.
        let log = Growing::new("\u{1}");
        let bad = b"\xff\xfe\xfd\xfc load\n";
        let (_, _) = log.append(bad);
        let (start, end) = log.append(b"GGML_ASSERT(x) failed\n");
        let mut reader = LogReader::new(&log.path, "l");
        let scan = reader.advance(end, start, None).unwrap();
        assert_eq!(scan.crash.map(|c| c.line), Some(2));
        assert_eq!(scan.tail, ["GGML_ASSERT(x) failed"]);
        let (start, end) = log.append(b"after\n");
        assert_eq!(
            reader.advance(end, start + 1, None).unwrap().tail,
            Vec::<String>::new(),
            "a line starting before the window is not in it"
        );
    }

    #[test]
    fn a_log_that_shrank_is_read_again_from_its_start() {
        let log = Growing::new(VULKAN_LOG);
        let mut reader = LogReader::new(&log.path, "l");
        let len = VULKAN_LOG.len() as u64;
        assert!(reader.advance(len, len, None).unwrap().backend.is_some());
        std::fs::write(&log.path, "load_tensors: offloaded 0/5 layers to GPU\n").unwrap();
        let scan = reader.advance(u64::MAX, 0, None).unwrap();
        assert_eq!(scan.backend.unwrap().backend, "CPU", "the rotated log's facts, not the old ones");
        assert_eq!(reader.position(), 42);
        drop(log.dir);
    }

    #[test]
    fn invalid_utf8_and_empty_logs() {
        assert_eq!(scan_log(b"", "l", 0), LogScan::default());
        let s = scan_log(b"\xff\xfe load\nload_tensors: offloaded 3/5 layers to GPU \xff\n", "l", 0);
        assert_eq!(s.backend.unwrap().offloaded, Some((3, 5)));
    }
}
