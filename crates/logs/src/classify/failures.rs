//! Lines that say something failed: signals, assertions, aborts, GPU and BLAS errors, runner failures, and the markers
//! that can appear anywhere in a line.

use crate::event::EventKind;

use super::devices::gfx_token;
use super::markers::Marked;
use super::text::{after, find, leading_u32, leading_u64, trim};

/// `SIGSEGV: segmentation violation`.
pub(super) fn go_signal(msg: &[u8]) -> Option<EventKind<'_>> {
    let colon = msg.iter().position(|&b| b == b':')?;
    let name = &msg[..colon];
    if name.len() < 4 || !name.starts_with(b"SIG") || !name[3..].iter().all(u8::is_ascii_uppercase) {
        return None;
    }
    Some(EventKind::Signal { signal: name, description: trim(&msg[colon + 1..]) })
}

/// `PC=0x7f27a8e24c47 m=0 sigcode=1 addr=0x206a03fb4` (after `PC=`).
pub(super) fn signal_context(rest: &[u8]) -> EventKind<'_> {
    let pc_end = rest.iter().position(|&b| b == b' ').unwrap_or(rest.len());
    let pc = Some(&rest[..pc_end]);
    let mut addr = None;
    let mut sigcode = None;
    for word in rest[pc_end..].split(|&b| b == b' ') {
        if let Some(v) = word.strip_prefix(b"addr=") {
            addr = Some(v);
        } else if let Some(v) = word.strip_prefix(b"sigcode=") {
            sigcode = Some(v);
        }
    }
    EventKind::SignalContext { pc, addr, sigcode }
}

/// `… for GPU arch : gfx1103`, or the arch in a `TensileLibrary_lazy_gfx1201.dat` file name.
pub(super) fn blas_arch(message: &[u8]) -> Option<&[u8]> {
    if let Some(rest) = after(message, b"GPU arch : ").or_else(|| after(message, b"GPU arch: ")) {
        let t = trim(rest);
        let end = t.iter().position(|&b| b == b' ').unwrap_or(t.len());
        return Some(&t[..end]).filter(|a| !a.is_empty());
    }
    let lib = after(message, b"TensileLibrary")?;
    gfx_token(lib).map(|g| g.strip_suffix(b".dat").unwrap_or(g)).map(|g| {
        let end = g.iter().position(|&b| b == b'.').unwrap_or(g.len());
        &g[..end]
    })
}

/// Ollama's user-facing failure texts (`Error: …` on the CLI, also inside slog `error=` values).
/// Python's `ctypes` turns a Windows exception raised in the native code it called into `OSError` (CPython
/// `Modules/_ctypes/callproc.c` SetException): `OSError: exception: access violation reading 0x…`, `… writing …`,
/// `exception: stack overflow`, `exception: integer divide by zero`, `exception code 0xc000001d`, and for a status it
/// does not name `OSError: [WinError -1073741795] Windows Error 0xc000001d`. KoboldCpp's launcher prints it when its
/// native library crashes. The signal is the Windows status code the text names.
pub(super) fn python_os_error(msg: &[u8]) -> Option<EventKind<'_>> {
    let rest = msg.strip_prefix(b"OSError: ")?;
    let named: &[(&[u8], &'static str)] = &[
        (b"exception: access violation", "0xc0000005"),
        (b"exception: stack overflow", "0xc00000fd"),
        (b"exception: integer divide by zero", "0xc0000094"),
    ];
    if let Some((_, code)) = named.iter().find(|(p, _)| rest.starts_with(p)) {
        return Some(EventKind::Signal { signal: code.as_bytes(), description: rest });
    }
    let code = if let Some(n) = rest.strip_prefix(b"[WinError -") {
        // The status as a negative 32-bit number: -1073741795 is 0xc000001d.
        let (v, _) = leading_u64(n)?;
        u32::try_from(v).ok().map(|v| 0u32.wrapping_sub(v))
    } else {
        let hex = after(rest, b"exception code 0x")?;
        let digits = hex.iter().take_while(|b| b.is_ascii_hexdigit()).count();
        u32::from_str_radix(std::str::from_utf8(&hex[..digits]).ok()?, 16).ok()
    }?;
    let code = crate::signature::WINDOWS_STATUS
        .iter()
        .map(|(c, _)| *c)
        .find(|c| u32::from_str_radix(&c[2..], 16).ok() == Some(code))
        .unwrap_or("exception");
    Some(EventKind::Signal { signal: code.as_bytes(), description: rest })
}

/// NVIDIA compute-sanitizer's report of a failed CUDA call: `Program hit cudaErrorIllegalAddress (error 700) due to
/// "an illegal memory access was encountered" on CUDA API call to cudaLaunchKernel.` (its `=========` prefix is
/// stripped before).
pub(super) fn sanitizer_error(msg: &[u8]) -> Option<EventKind<'_>> {
    let rest = msg.strip_prefix(b"Program hit cuda")?;
    let message = after(rest, b"due to \"").and_then(|m| m.iter().position(|&b| b == b'"').map(|end| &m[..end]));
    Some(EventKind::GpuError { api: b"CUDA", message: message.unwrap_or(msg) })
}

pub(super) fn runner_failure(message: &[u8]) -> Option<EventKind<'_>> {
    if find(message, b"process has terminated").is_some() {
        return Some(EventKind::RunnerTerminated { error: message });
    }
    // The 2023 runner (`llama.go`): `llama runner exited with error: signal: illegal instruction`.
    if let Some(error) = after(message, b"llama runner exited with error: ") {
        return Some(EventKind::RunnerTerminated { error });
    }
    if find(message, b"unexpectedly stopped").is_some() {
        return Some(EventKind::CompletionError { message });
    }
    if find(message, b"POST predict").is_some() || find(message, b"post predict").is_some() {
        return Some(EventKind::PostPredictError { error: Some(message) });
    }
    None
}

/// `path/file.c:123: GGML_ASSERT(cond) failed` or another `ggml_abort` message (`fatal error`).
pub(super) fn abort_line<'a>(tag: &'a [u8], text: &'a [u8]) -> Option<EventKind<'a>> {
    // The tag ends in the line number: most tags (function names) are told apart by their last byte.
    if !tag.last().is_some_and(u8::is_ascii_digit) {
        return None;
    }
    let colon = tag.iter().rposition(|&b| b == b':')?;
    let (file, line) = (&tag[..colon], &tag[colon + 1..]);
    let (line, tail) = leading_u32(line)?;
    if !tail.is_empty() || file.ends_with(b".go") {
        return None;
    }
    let dot = file.iter().rposition(|&b| b == b'.')?;
    let ext = &file[dot + 1..];
    if ext.is_empty() || ext.len() > 4 || !ext.iter().all(u8::is_ascii_alphanumeric) {
        return None;
    }
    if let Some(cond) = text.strip_prefix(b"GGML_ASSERT(") {
        let end = cond.iter().rposition(|&b| b == b')').unwrap_or(cond.len());
        return Some(EventKind::GgmlAssert { file, line, condition: &cond[..end] });
    }
    Some(EventKind::Abort { file, line, message: trim(text) })
}

/// Markers that can appear anywhere in a line no other rule claimed.
pub(super) fn anywhere<'a>(msg: &'a [u8], marked: &Marked<'_>) -> Option<EventKind<'a>> {
    // The first bytes of the longer prefixes below: a message that begins with none of them skips their comparisons.
    let crash_prefix = matches!(msg.first(), Some(b'S' | b'A' | b'z' | b'[' | b'f' | b'd' | b'm' | b'c' | b'r'));
    if crash_prefix && (msg.starts_with(b"Segmentation fault") || msg.starts_with(b"Aborted")) {
        return Some(EventKind::ProcessCrash { message: trim(msg) });
    }
    if marked.get() && (find(msg, b"couldn't bind").is_some() || find(msg, b"address already in use").is_some()) {
        return Some(EventKind::BindFailed { message: trim(msg) });
    }
    // The shell's report of a child killed by a signal: `zsh: abort      ./run-server`, `zsh: segmentation fault …`.
    if let Some(rest) = msg.strip_prefix(b"zsh: ") {
        const SIGNALS: &[&[u8]] = &[b"abort", b"segmentation fault", b"illegal hardware instruction", b"bus error"];
        if SIGNALS.iter().any(|s| rest.starts_with(s)) {
            return Some(EventKind::ProcessCrash { message: trim(msg) });
        }
    }
    // gdb attached to the process: ggml's backtrace printer does that from ggml_abort and from its uncaught-exception
    // handler (L ggml/src/ggml.c:194-226, :253-269), both on the way to abort().
    if crash_prefix && msg.starts_with(b"[Inferior ") && msg.ends_with(b" detached]") {
        return Some(EventKind::Abort { file: b"", line: 0, message: trim(msg) });
    }
    // glibc's heap checks abort the process with one of these (malloc/malloc.c `malloc_printerr` messages).
    const HEAP_ABORTS: &[&[u8]] = &[
        b"free(): ",
        b"double free or corruption",
        b"malloc(): ",
        b"munmap_chunk(): ",
        b"corrupted size vs. prev_size",
        b"realloc(): ",
    ];
    if crash_prefix && HEAP_ABORTS.iter().any(|p| msg.starts_with(p)) {
        return Some(EventKind::ProcessCrash { message: trim(msg) });
    }
    if !marked.get() {
        return None;
    }
    if let Some(abort) = named_abort(msg) {
        return Some(abort);
    }
    if let Some(kind) = supervisor_report(msg) {
        return Some(kind);
    }
    if let Some(at) = find(msg, b"GGML_ASSERT(") {
        let cond = &msg[at + 12..];
        let end = cond.iter().rposition(|&b| b == b')').unwrap_or(cond.len());
        // `FILE:LINE: ` just before the assertion, whatever text a paste glued before it (`Assistant: HelloC:\…\ggml-
        // vulkan.cpp:6078: GGML_ASSERT(…)`): the file says which backend's code failed.
        let (file, line) = assert_location(&msg[..at]).unwrap_or((b"", 0));
        return Some(EventKind::GgmlAssert { file, line, condition: &cond[..end] });
    }
    if find(msg, b"ErrorDeviceLost").is_some() || find(msg, b"VK_ERROR_DEVICE_LOST").is_some() {
        return Some(EventKind::DeviceLost { message: trim(msg) });
    }
    // glibc's assert(): `prog: file.cpp:1094: func: Assertion `found' failed.`
    if let Some(at) = find(msg, b": Assertion `") {
        let cond = &msg[at + 13..];
        let end = cond.iter().rposition(|&b| b == b'\'').unwrap_or(cond.len());
        return Some(EventKind::GgmlAssert { file: b"", line: 0, condition: &cond[..end] });
    }
    // A pinned-memory failure is a warning: llama.cpp falls back to pageable host memory and goes on
    // (L ggml/src/ggml-cuda/ggml-cuda.cu ggml_cuda_host_malloc).
    if find(msg, b"of pinned memory").is_some() {
        return None;
    }
    if find(msg, b"out of memory").is_some()
        || find(msg, b"ErrorOutOfDeviceMemory").is_some()
        || find(msg, b"unable to allocate").is_some()
        || find(msg, b"failed to allocate").is_some()
    {
        return Some(EventKind::OutOfMemory { message: trim(msg) });
    }
    // The 2023 runner (v0.1.17 llm/llama.go:459): `error starting llama runner: …` — it died before it was ready.
    if let Some(error) = after(msg, b"error starting llama runner: ") {
        return Some(EventKind::LoadError { error });
    }
    if let Some(kind) = runner_failure(msg) {
        return Some(kind);
    }
    if find(msg, b" segfault at ").is_some() {
        return Some(EventKind::ProcessCrash { message: trim(msg) });
    }
    None
}

/// The `FILE:LINE:` that ends `head` (the text before an assertion), the file being the last word of it.
pub(super) fn assert_location(head: &[u8]) -> Option<(&[u8], u32)> {
    let head = head.trim_ascii_end().strip_suffix(b":")?;
    let colon = head.iter().rposition(|&b| b == b':')?;
    let (line, rest) = leading_u32(&head[colon + 1..])?;
    if !rest.is_empty() {
        return None;
    }
    let word = &head[..colon];
    let file = &word[word.iter().rposition(|&b| b == b' ' || b == b'"').map_or(0, |i| i + 1)..];
    (file.contains(&b'.') && !file.is_empty()).then_some((file, line))
}

/// What a supervisor says of a process it ran: LM Studio's app log (`The model has crashed without additional
/// information. (Exit code: 18446744072635812000)`, `Error: Failed to load model.`), systemd (`Main process exited,
/// code=dumped, status=11/SEGV`) and systemd-coredump (`Process 14750 (python) of user 0 dumped core.`).
pub(super) fn supervisor_report(msg: &[u8]) -> Option<EventKind<'_>> {
    if let Some(at) = find(msg, b"crashed without additional information") {
        let error = find(&msg[at..], b"(Exit code: ").map_or(&msg[at..], |i| &msg[at + i + 1..]);
        let error = error.strip_suffix(b")").unwrap_or(error);
        return Some(EventKind::RunnerTerminated { error: trim(error) });
    }
    if let Some(at) = find(msg, b"Error: Failed to load model") {
        return Some(EventKind::LoadError { error: trim(&msg[at + 7..]) });
    }
    if let Some(status) = after(msg, b"Main process exited, code=") {
        // `code=exited, status=0/SUCCESS` is a clean exit.
        if !status.starts_with(b"exited, status=0/") {
            return Some(EventKind::ProcessCrash { message: trim(msg) });
        }
    }
    if msg.starts_with(b"Process ") && find(msg, b" dumped core").is_some() {
        return Some(EventKind::ProcessCrash { message: trim(msg) });
    }
    None
}

/// `llama.cpp abort:97: message`: LM Studio's engine log names the file and line of a `ggml_abort` as a word, ` abort:`,
/// the line and the message (lmstudio-ai/lmstudio-bug-tracker issue 297 quotes it).
pub(super) fn named_abort(msg: &[u8]) -> Option<EventKind<'_>> {
    let at = find(msg, b" abort:")?;
    let (line, rest) = leading_u32(&msg[at + 7..])?;
    let message = rest.strip_prefix(b": ").or_else(|| rest.strip_prefix(b":"))?;
    let head = &msg[..at];
    let file = &head[head.iter().rposition(|&b| b == b' ').map_or(0, |i| i + 1)..];
    if file.is_empty() || !file.contains(&b'.') {
        return None;
    }
    if let Some(cond) = find(message, b"GGML_ASSERT(").map(|i| &message[i + 12..]) {
        let end = cond.iter().rposition(|&b| b == b')').unwrap_or(cond.len());
        return Some(EventKind::GgmlAssert { file, line, condition: &cond[..end] });
    }
    Some(EventKind::Abort { file, line, message: trim(message) })
}
