//! Server log reading: which backend served a cell, and the line that names a crash or a start failure.
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

use super::record::{BackendFacts, LogRef};

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

/// Scan a log. Backend facts use every line up to the end of `bytes` (the model was loaded before the cell's
/// window); crash, load-error and bind lines are taken only from lines starting at or after `window_start`.
/// `file` is how the log is named in the evidence (relative to the run directory).
pub fn scan_log(bytes: &[u8], file: &str, window_start: u64) -> LogScan {
    let text = String::from_utf8_lossy(bytes);
    let mut out = LogScan::default();
    let mut facts = BackendFacts::default();
    let mut pending_devices: Vec<(String, LogRef)> = Vec::new();
    let mut used_devices: Vec<(String, LogRef)> = Vec::new();
    let mut offload_line: Option<LogRef> = None;
    let mut buffers: Vec<(String, LogRef)> = Vec::new();
    let mut tail: Vec<String> = Vec::new();
    let mut offset = 0u64;
    for (i, raw_line) in text.split_inclusive('\n').enumerate() {
        let line_start = offset;
        offset += raw_line.len() as u64;
        let line = raw_line.trim_end_matches(['\n', '\r']);
        let lineno = i as u64 + 1;
        let r = || LogRef { file: file.to_string(), line: lineno, text: super::api::truncate(line.trim(), 300) };
        if let Some(dev) = using_device(line) {
            pending_devices.push((dev, r()));
        }
        if let Some((n, m)) = offloaded(line) {
            facts.offloaded = Some((n, m));
            offload_line = Some(r());
            // A model (re)load: the devices logged since the previous load belong to this one.
            if !pending_devices.is_empty() {
                used_devices = std::mem::take(&mut pending_devices);
            }
            buffers.clear();
        }
        if let Some(name) = loaded_backend(line) {
            if !facts.loaded_backends.contains(&name) {
                facts.loaded_backends.push(name);
                facts.evidence.push(r());
            }
        }
        if let Some(buf) = model_buffer(line) {
            buffers.push((buf, r()));
        }
        if line_start < window_start {
            continue;
        }
        if !line.trim().is_empty() {
            tail.push(super::api::truncate(line.trim(), 300));
            if tail.len() > 8 {
                tail.remove(0);
            }
        }
        if out.crash.is_none() && is_crash_line(line) {
            out.crash = Some(r());
        }
        if out.load_error.is_none() && is_load_error(line) {
            out.load_error = Some(r());
        }
        if out.bind_error.is_none() && is_bind_error(line) {
            out.bind_error = Some(r());
        }
    }
    if used_devices.is_empty() {
        used_devices = pending_devices;
    }
    out.tail = tail;
    facts.devices = used_devices.iter().map(|(d, _)| d.clone()).collect();
    let gpu_buffers: Vec<&(String, LogRef)> = buffers.iter().filter(|(n, _)| !n.starts_with("CPU")).collect();
    facts.backend = match (used_devices.first(), facts.offloaded) {
        (Some((dev, _)), Some((n, _))) if n > 0 => dev.clone(),
        (Some((dev, _)), None) => format!("{dev} (offload not logged)"),
        (_, Some(_)) => "CPU".to_string(),
        (None, None) if !buffers.is_empty() && gpu_buffers.is_empty() => "CPU".to_string(),
        (None, None) => String::new(),
    };
    facts.evidence.extend(used_devices.into_iter().map(|(_, r)| r));
    facts.evidence.extend(offload_line);
    facts.evidence.extend(buffers.into_iter().map(|(_, r)| r));
    if !facts.backend.is_empty() {
        out.backend = Some(facts);
    }
    out
}

/// `… using device NAME (DESCRIPTION) (ID) - F MiB free` → `NAME (DESCRIPTION)`; the description can hold
/// parentheses (`llvmpipe (LLVM 15.0.6, 256 bits)`), so the parentheses are balanced.
fn using_device(line: &str) -> Option<String> {
    let at = line.find("using device ")?;
    if line[..at].contains("already") {
        return None; // "skipping device … - already using device …"
    }
    let rest = &line[at + "using device ".len()..];
    let name: String = rest.chars().take_while(|c| !c.is_whitespace()).collect();
    if name.is_empty() {
        return None;
    }
    let after = rest[name.len()..].trim_start();
    match balanced_parens(after) {
        Some(desc) => Some(format!("{name} ({desc})")),
        None => Some(name),
    }
}

fn balanced_parens(s: &str) -> Option<&str> {
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

/// `offloaded N/M layers to GPU` (llama.cpp and Ollama's Go engine).
fn offloaded(line: &str) -> Option<(u32, u32)> {
    let at = line.find("offloaded ")?;
    let rest = &line[at + "offloaded ".len()..];
    let (frac, tail) = rest.split_once(' ')?;
    if !tail.starts_with("layers to GPU") {
        return None;
    }
    let (n, m) = frac.split_once('/')?;
    Some((n.parse().ok()?, m.parse().ok()?))
}

/// `load_backend: loaded Vulkan backend from /…/libggml-vulkan.so` → `Vulkan`.
fn loaded_backend(line: &str) -> Option<String> {
    let at = line.find("load_backend: loaded ")?;
    let rest = &line[at + "load_backend: loaded ".len()..];
    let (name, tail) = rest.split_once(' ')?;
    tail.starts_with("backend").then(|| name.to_string())
}

/// `load_tensors: Vulkan0 model buffer size = 12.00 MiB` → `Vulkan0 12.00 MiB`.
fn model_buffer(line: &str) -> Option<String> {
    let at = line.find(" model buffer size = ")?;
    let name = line[..at].rsplit([' ', ':']).next()?.trim();
    if name.is_empty() {
        return None;
    }
    let size = line[at + " model buffer size = ".len()..].trim();
    Some(format!("{name} {size}"))
}

fn is_crash_line(line: &str) -> bool {
    super::api::signal_in_text(line).is_some()
        || ["GGML_ASSERT", "terminate called", "core dumped", "process has terminated", "llama-server terminated"]
            .iter()
            .any(|p| line.contains(p))
}

fn is_load_error(line: &str) -> bool {
    ["error loading model", "failed to load model", "unable to load model", "failed to open", "out of memory"]
        .iter()
        .any(|p| line.contains(p))
}

fn is_bind_error(line: &str) -> bool {
    line.contains("couldn't bind") || line.contains("address already in use")
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let log = "using device CUDA0 (NVIDIA H100) (0000:01:00.0) - 80000 MiB free\noffloaded 5/5 layers to GPU\nusing device ROCm0 (AMD Radeon Pro VII) (0000:03:00.0) - 16000 MiB free\noffloaded 2/5 layers to GPU\n";
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
        assert_eq!(
            using_device(
                "x: skipping device Vulkan1 (a) with id 1 - already using device Vulkan0 (b) with the same id"
            ),
            None
        );
        assert_eq!(
            using_device("using device CUDA0 (NVIDIA H200) (0000:01:00.0) - 1 MiB free").as_deref(),
            Some("CUDA0 (NVIDIA H200)")
        );
    }

    #[test]
    fn invalid_utf8_and_empty_logs() {
        assert_eq!(scan_log(b"", "l", 0), LogScan::default());
        let s = scan_log(b"\xff\xfe offloaded 3/5 layers to GPU\n", "l", 0);
        assert_eq!(s.backend.unwrap().offloaded, Some((3, 5)));
    }
}
