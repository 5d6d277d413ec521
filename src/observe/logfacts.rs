//! Facts drawn from server logs for any command that cites them (`logs`, `report`'s timelines, the sweep's
//! forensics and backend facts): the one-phrase description of a crash, the text of cited log lines, and what each
//! line of a running server's log says ([`ServerLines`]). A ground-floor module over `crates/logs`, so that no
//! command reaches into another's internals for them and no command classifies log lines with matchers of its own.

use std::path::Path;

use logs::analysis::Crash;
use logs::Limits;

use crate::evidence::{Claim, Source};
use crate::output::text::truncate;

/// Fills in the text of every `LogLine` source that cites `name` without its text, by reading `path` again
/// (streamed, each line capped as the parser caps it). Errors leave the texts empty.
pub fn fill_line_texts(claims: &mut [Claim], path: &Path, name: &str) {
    let wanted: std::collections::BTreeSet<u64> = claims
        .iter()
        .flat_map(|c| &c.sources)
        .filter_map(|s| match s {
            Source::LogLine { path: p, line, text } if p == name && text.is_empty() => Some(*line),
            _ => None,
        })
        .collect();
    let Some(&last) = wanted.last() else { return };
    // Only a regular file (a FIFO swapped in since the first read would block here).
    let Ok(crate::host::inputs::Input { file, .. }) = crate::host::inputs::open_input(path) else { return };
    let mut found = std::collections::BTreeMap::new();
    let _ = logs::Parser::parse_reader(file, Limits::default(), |e| {
        if e.line <= last && wanted.contains(&e.line) {
            found.insert(e.line, truncate(&String::from_utf8_lossy(e.raw), 300));
        }
    });
    for c in claims.iter_mut() {
        for s in &mut c.sources {
            if let Source::LogLine { path: p, line, text } = s {
                if p == name && text.is_empty() {
                    if let Some(t) = found.get(line) {
                        *text = t.clone();
                    }
                }
            }
        }
    }
}

/// When the crash was written, in parentheses: its own time, or the bracket of a time its first line inherits
/// from the lines around it (never a point: the line has no timestamp).
pub fn crash_time(c: &Crash) -> String {
    logs::render::time_words(c.t, c.t_bounds).map(|w| format!(" ({w})")).unwrap_or_default()
}

/// What a crash was, in words: the signal with its addresses, else its first cause, else its first consequence.
pub fn crash_what(c: &Crash) -> String {
    if let Some(s) = &c.signal {
        let mut w = if s.name.is_empty() { "a signal".to_string() } else { s.name.clone() };
        if let Some((_, meaning)) = logs::signature::windows_status(&s.name) {
            w += &format!(" — {meaning}");
        }
        if !s.description.is_empty() {
            w += &format!(" ({})", s.description);
        }
        if let Some(pc) = &s.pc {
            w += &format!(" PC={pc}");
        }
        if let Some(addr) = &s.addr {
            w += &format!(" addr={addr}");
        }
        if s.in_foreign_code {
            w += ", in C/C++ code called from Go (signal arrived during cgo execution)";
        }
        return w;
    }
    c.causes.first().or(c.consequences.first()).map(|l| truncate(&l.text, 200)).unwrap_or_else(|| "a failure".into())
}

/// What one line of a server's log says that a supervisor of the server reads as it runs: the devices and offload
/// that tell which backend serves (`sweep`'s backend facts), and the lines that say why a server died, failed to
/// load its model or could not listen. crates/logs classifies the line; this names the classes a supervisor acts
/// on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServerLine {
    /// `using device Vulkan0 (llvmpipe (LLVM 15.0.6, 256 bits)) (unknown id) - 7927 MiB free` →
    /// `Vulkan0 (llvmpipe (LLVM 15.0.6, 256 bits))`: the name and its description, without the id.
    DeviceUsed(String),
    /// `offloaded N/M layers to GPU`.
    Offloaded(u32, u32),
    /// `load_backend: loaded Vulkan backend from …` → `Vulkan`.
    BackendLoaded(String),
    /// A model buffer and the device that holds it (`CPU_Mapped`, `Vulkan0`).
    ModelBuffer(String),
    /// A line that names a crash: a signal, an assertion, an abort, an uncaught exception, a process killed by a
    /// signal, a runner that terminated.
    Crash,
    /// A line that says why the model did not load (a load error, memory that could not be had).
    LoadFailed,
    /// The server could not listen on its port.
    BindFailed,
    Other,
}

/// Reads a server log's lines one at a time into [`ServerLine`]s, with crates/logs' state from line to line (a
/// Go stack dump's frames are frames, not facts).
#[derive(Clone, Debug, Default)]
pub struct ServerLines {
    context: logs::classify::Context,
    scratch: Vec<u8>,
}

impl ServerLines {
    /// What `line` (one line, without its newline) says; prefixes and ANSI colours are read as the parser reads
    /// them.
    pub fn read(&mut self, line: &[u8]) -> ServerLine {
        use logs::EventKind as K;
        let text = if line.contains(&0x1b) {
            logs::strip_ansi(line, &mut self.scratch);
            self.scratch.as_slice()
        } else {
            line
        };
        let message = logs::prefix::strip(text).message;
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        match logs::classify::classify(message, &mut self.context).kind {
            K::DeviceUsed { device, description, .. } => {
                let description = String::from_utf8_lossy(description);
                match first_parenthesised(&description) {
                    Some(d) => ServerLine::DeviceUsed(format!("{} ({d})", text(device))),
                    None => ServerLine::DeviceUsed(text(device)),
                }
            }
            K::LayersOffloaded { offloaded, total } => ServerLine::Offloaded(offloaded, total),
            K::BackendLoaded { backend, .. } => ServerLine::BackendLoaded(text(backend)),
            K::BufferSize { device, buffer: logs::event::BufferKind::Model, .. } => {
                ServerLine::ModelBuffer(text(device))
            }
            K::Signal { .. }
            | K::GgmlAssert { .. }
            | K::Abort { .. }
            | K::CppTerminate { .. }
            | K::ProcessCrash { .. }
            | K::RunnerTerminated { .. } => ServerLine::Crash,
            K::LoadError { .. } | K::OutOfMemory { .. } | K::GpuError { .. } => ServerLine::LoadFailed,
            K::BindFailed { .. } => ServerLine::BindFailed,
            _ => ServerLine::Other,
        }
    }
}

/// The first parenthesised group of `s`, parentheses inside it balanced: `(llvmpipe (LLVM 15.0.6, 256 bits)) (id)`
/// → `llvmpipe (LLVM 15.0.6, 256 bits)`.
fn first_parenthesised(s: &str) -> Option<&str> {
    let s = s.trim_start();
    if !s.starts_with('(') {
        return None;
    }
    let mut depth = 0usize;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 {
                    return Some(&s[1..i]);
                }
            }
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(line: &str) -> ServerLine {
        ServerLines::default().read(line.as_bytes())
    }

    /// Lines of llama-server 11434 at `-lv 4` on lavapipe (the sweep tests' real servers print them).
    #[test]
    fn a_vulkan_servers_devices_offload_and_buffers() {
        assert_eq!(
            read("0.00.020.000 I llama_model_load_from_file_impl: using device Vulkan0 (llvmpipe (LLVM 15.0.6, 256 bits)) (unknown id) - 7927 MiB free"),
            ServerLine::DeviceUsed("Vulkan0 (llvmpipe (LLVM 15.0.6, 256 bits))".into())
        );
        assert_eq!(read("0.00.177.887 I load_tensors: offloaded 5/5 layers to GPU"), ServerLine::Offloaded(5, 5));
        assert_eq!(
            read("0.00.010.001 I load_backend: loaded Vulkan backend from /x/libggml-vulkan.so"),
            ServerLine::BackendLoaded("Vulkan".into())
        );
        assert_eq!(
            read("load_tensors:   CPU_Mapped model buffer size =    36.26 MiB"),
            ServerLine::ModelBuffer("CPU_Mapped".into())
        );
        assert_eq!(read("load_tensors: Vulkan0 KV buffer size =    12.00 MiB"), ServerLine::Other);
    }

    /// Lines from the logs corpus (tests/data/logs-corpus) and llama-server's own output.
    #[test]
    fn crash_load_and_bind_lines() {
        assert_eq!(
            read(
                r#"time=2025-07-14T12:30:35.398-04:00 level=ERROR source=server.go:449 msg="llama runner terminated" error="signal: segmentation fault""#
            ),
            ServerLine::Crash
        );
        assert_eq!(read("SIGSEGV: segmentation violation"), ServerLine::Crash);
        assert_eq!(read("Segmentation fault (core dumped)"), ServerLine::Crash);
        assert_eq!(read("0.03.000.000 E ggml_vulkan: GGML_ASSERT(ok) failed"), ServerLine::Crash);
        assert_eq!(read("llama_model_load: error loading model: No such file"), ServerLine::LoadFailed);
        assert_eq!(
            read("ggml_backend_cuda_buffer_type_alloc_buffer: allocating 35533.34 MiB on device 0: cudaMalloc failed: out of memory"),
            ServerLine::LoadFailed
        );
        assert_eq!(
            read(
                "0.00.160.307 E srv         start: couldn't bind HTTP server socket, hostname: 127.0.0.1, port: 40503"
            ),
            ServerLine::BindFailed
        );
        assert_eq!(read("0.01.000.000 I main: server is listening on http://127.0.0.1:4242"), ServerLine::Other);
    }

    #[test]
    fn ansi_colours_do_not_hide_a_fact() {
        assert_eq!(read("\u{1b}[32mload_tensors: offloaded 2/5 layers to GPU\u{1b}[0m"), ServerLine::Offloaded(2, 5));
    }
}
