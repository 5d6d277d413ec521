//! llama.cpp, ggml and Go runtime lines by their shape: the first byte, a `function: ` or `module: ` tag, an
//! indented line, then the generic forms; each shape hands the message to the rules of its job.

use crate::event::EventKind;

use super::devices::{
    buffer_size, device_listed, device_used, dxgi_discrete_gpu, flash_attention, gpu_device, graph, model_path,
    offloaded, vulkan_line,
};
use super::failures::{
    abort_line, anywhere, blas_arch, go_signal, python_os_error, runner_failure, sanitizer_error, signal_context,
};
use super::kernel::{gpu_driver_line, nvidia_xid};
use super::markers::Marked;
use super::server::{llama_server_slot, llama_server_srv, timing};
use super::text::{after, colon_space, find, leading_u32, leading_u64, trim, trim_start};
use super::trace::{go_register, goroutine, headerless_go_line, native_frame, python_frame, sanitizer_frame};

/// The first bytes [`by_first_byte`] has rules for (its match arms, in order): a message that begins with another
/// (`llama_…`, `load_…`, `slot …`, `print_info`, most of a log) skips the call.
const FIRST_BYTE_RULES: [bool; 256] = {
    let mut table = [false; 256];
    let bytes = b" \tSPOHDEadr[ixNgc#/f*";
    let mut i = 0;
    while i < bytes.len() {
        table[bytes[i] as usize] = true;
        i += 1;
    }
    table
};

/// The rules a message's first byte selects. `Some(answer)` is the answer for the whole message (an indented line is
/// read by [`indented`] alone); `None` lets the other rules look.
pub(super) fn by_first_byte<'a>(msg: &'a [u8], first: u8, marked: &Marked<'_>) -> Option<Option<EventKind<'a>>> {
    match first {
        b' ' | b'\t' => return Some(headerless_go_line(msg).or_else(|| indented(msg, marked))),
        b'S' => {
            if let Some(sig) = go_signal(msg) {
                return Some(Some(sig));
            }
        }
        b'P' => {
            if let Some(rest) = msg.strip_prefix(b"PC=") {
                return Some(Some(signal_context(rest)));
            }
            if let Some(kind) = sanitizer_error(msg) {
                return Some(Some(kind));
            }
        }
        b'O' => {
            if let Some(kind) = python_os_error(msg) {
                return Some(Some(kind));
            }
        }
        b'H' => {
            if let Some(frame) = msg.strip_prefix(b"Host Frame:").and_then(sanitizer_frame) {
                return Some(Some(EventKind::NativeFrame(frame)));
            }
            // ROCr (the ROCm runtime) reports a GPU hang or fault: `HW Exception by GPU node-1 (Agent handle: 0x…)
            // reason :GPU Hang` (ROCR-Runtime `core/runtime/runtime.cpp` HwExceptionHandler).
            if msg.starts_with(b"HW Exception by GPU node-") {
                // A hang is the GPU's context lost to a reset, as a lost Vulkan device is; other reasons (a memory
                // violation) are errors of the runtime.
                if find(msg, b"GPU Hang").is_some() {
                    return Some(Some(EventKind::DeviceLost { message: trim(msg) }));
                }
                let reason = after(msg, b"reason :").or_else(|| after(msg, b"reason: ")).map_or(msg, trim);
                return Some(Some(EventKind::GpuError { api: b"ROCm", message: reason }));
            }
        }
        b'D' => {
            // A CUDA/ROCm device line whose indent a journal's single separator space ate (`ollama: Device 0: …`).
            if let Some(device) = msg.strip_prefix(b"Device ").and_then(gpu_device) {
                return Some(Some(EventKind::GpuDevice(device)));
            }
            if let Some(kind) = dxgi_discrete_gpu(msg) {
                return Some(Some(kind));
            }
        }
        b'E' => {
            if let Some(rest) = msg.strip_prefix(b"Exception 0x") {
                let end = rest.iter().position(|&b| b == b' ').unwrap_or(rest.len());
                let args = trim(&rest[end..]);
                // Go's runtime prints the code and hexadecimal words only (`Exception 0xc0000005 0x8 0x7ffa… 0x7ffa…`,
                // `runtime/signal_windows.go`); a sentence that begins with the same words is a person's.
                let hex_word = |w: &[u8]| w.strip_prefix(b"0x").is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit));
                if args.split(|&b| b == b' ').filter(|w| !w.is_empty()).all(hex_word) {
                    // `Exception 0x` is 12 bytes: the code follows it whole (`Exception 0xc0000005`).
                    return Some(Some(EventKind::Signal { signal: &msg[..12 + end], description: args }));
                }
                return Some(Some(EventKind::Other));
            }
        }
        b'a' | b'd' | b'r' | b'[' | b'i' | b'x' => {
            if let Some(kind) = gpu_driver_line(msg) {
                return Some(Some(kind));
            }
        }
        b'N' => {
            if let Some(kind) = nvidia_xid(msg) {
                return Some(Some(kind));
            }
        }
        b'g' => {
            if let Some(g) = goroutine(msg) {
                return Some(Some(g));
            }
        }
        b'c' => {
            if let Some(created) = headerless_go_line(msg) {
                return Some(Some(created));
            }
        }
        b'#' | b'/' | b'f' | b'*' => {
            if let Some(frame) = native_frame(msg) {
                return Some(Some(EventKind::NativeFrame(frame)));
            }
        }
        _ => {}
    }
    None
}

/// The rules of a message by its shape. Each rule below that needs a literal at the start of the message only runs
/// where the first byte is that literal's (most lines of a log begin with none of them, and pay for none).
pub(super) fn structured(msg: &[u8]) -> Option<EventKind<'_>> {
    let first = *msg.first()?;
    let marked = &Marked::new(msg);
    if FIRST_BYTE_RULES[usize::from(first)] {
        if let Some(answer) = by_first_byte(msg, first, marked) {
            return answer;
        }
    }
    if first == b'i' {
        if let Some(bytes) = msg.strip_prefix(b"instruction bytes:") {
            return Some(EventKind::InstructionBytes { bytes: trim(bytes) });
        }
    }
    if go_register(msg) {
        return Some(EventKind::RegisterDump);
    }
    if first == b'[' {
        if let Some(frame) = headerless_go_line(msg) {
            return Some(frame);
        }
    }
    // glibc frames wherever the module path starts (a library found through the loader path has no directory,
    // a paste may keep a prefix of its own): `libggml-base.so.0(ggml_print_backtrace+0x204) [0x7f…]`.
    if msg.ends_with(b"]") && (find(msg, b") [0x").is_some() || find(msg, b")[0x").is_some()) {
        if let Some(frame) = native_frame(msg) {
            return Some(EventKind::NativeFrame(frame));
        }
    }
    match first {
        b's' => {
            if let Some(rest) = msg.strip_prefix(b"signal arrived during ") {
                if rest.starts_with(b"cgo execution") || rest.starts_with(b"external code execution") {
                    return Some(EventKind::SignalInForeignCode);
                }
            }
        }
        b'G' => {
            if let Some(rest) = msg.strip_prefix(b"GGML_ASSERT: ") {
                // The older form (llama.cpp before 2024-06): `GGML_ASSERT: path/file.cu:60: !"CUDA error"`.
                let split = find(rest, b": ")?;
                let loc = &rest[..split];
                let colon = loc.iter().rposition(|&b| b == b':')?;
                let line = leading_u32(&loc[colon + 1..]).map_or(0, |x| x.0);
                return Some(EventKind::GgmlAssert { file: &loc[..colon], line, condition: trim(&rest[split + 2..]) });
            }
        }
        b'f' | b'p' => {
            if let Some(message) = msg.strip_prefix(b"fatal error: ").or_else(|| msg.strip_prefix(b"panic: ")) {
                return Some(EventKind::GoFatal { message });
            }
        }
        b't' => {
            if let Some(rest) = msg.strip_prefix(b"terminate called after throwing an instance of ") {
                let exception = trim(rest).trim_ascii();
                let exception = exception.strip_prefix(b"'").and_then(|e| e.strip_suffix(b"'")).unwrap_or(exception);
                return Some(EventKind::CppTerminate { exception });
            }
        }
        b'E' => {
            if let Some(message) = msg.strip_prefix(b"Error: ") {
                if let Some(kind) = runner_failure(message) {
                    return Some(kind);
                }
                // A wrapper that puts `Error: ` before each line of the runtime's stderr: the line after it is read as
                // it would be without (once: an `Error: Error: …` line is not unwrapped twice).
                if !message.is_empty() && !trim_start(message).starts_with(b"Error: ") {
                    return structured(message);
                }
            }
        }
        b'C' | b'R' | b'M' | b'H' | b'r' | b'h' | b'T' => {
            // The 2023 form: `CUDA error 3 at …/ggml-cuda.cu:5661: initialization error` (the code, the place, the
            // text).
            if let Some(rest) = msg.strip_prefix(b"CUDA error ").filter(|r| r.first().is_some_and(u8::is_ascii_digit)) {
                if let Some(at) = find(rest, b" at ") {
                    let place = &rest[at + 4..];
                    let message = colon_space(place).map_or(place, |i| &place[i + 2..]);
                    return Some(EventKind::GpuError { api: b"CUDA", message: trim(message) });
                }
            }
            if let Some(kind) = api_error(msg) {
                return Some(kind);
            }
        }
        _ => {}
    }
    // A module tag is two to five lowercase letters.
    if first.is_ascii_lowercase() {
        if let Some((module, text)) = module_tag(msg) {
            return match module {
                b"slot" => llama_server_slot(text),
                b"srv" => llama_server_srv(text),
                _ => tagged(text, marked).or_else(|| generic(text, marked)).or_else(|| anywhere(text, marked)),
            };
        }
    }
    tagged(msg, marked).or_else(|| anywhere(msg, marked))
}

/// `CUDA error: …`, `rocBLAS error: …`: one word (a GPU runtime's or BLAS library's name), then ` error: `.
fn api_error(msg: &[u8]) -> Option<EventKind<'_>> {
    let api_end = msg[..msg.len().min(12)].iter().position(|&b| b == b' ')?;
    let message = msg[api_end..].strip_prefix(b" error: ")?;
    let api = &msg[..api_end];
    match api {
        b"CUDA" | b"ROCm" | b"MUSA" | b"HIP" => Some(EventKind::GpuError { api, message }),
        b"rocBLAS" | b"rocblaslt" | b"hipBLASLt" | b"hipBLAS" | b"Tensile" => {
            Some(EventKind::BlasError { library: api, message, arch: blas_arch(message) })
        }
        _ => None,
    }
}

/// llama.cpp's newer `common_log` lines carry a module and a 12-column function name before the text:
/// `srv  llama_server: model loaded`, `slot launch_slot_: id  3 | task 0 | …`, `cmn  common_init_: …`.
/// Returns the module and the text after the function name.
pub(super) fn module_tag(msg: &[u8]) -> Option<(&[u8], &[u8])> {
    let module_len = msg.iter().take(6).take_while(|b| b.is_ascii_lowercase()).count();
    if !(2..=5).contains(&module_len) || msg.get(module_len) != Some(&b' ') {
        return None;
    }
    let rest = trim_start(&msg[module_len..]);
    // The function name is padded to 12 columns and often longer: a word at a time reaches its end.
    let function_len = crate::patterns::find_either_near(b' ', b':', rest)?;
    let text = rest[function_len..].strip_prefix(b": ")?;
    (function_len > 0).then_some((&msg[..module_len], text))
}

/// Lines that begin with whitespace: CUDA/ROCm device lines and GPU error details.
pub(super) fn indented<'a>(msg: &'a [u8], marked: &Marked<'_>) -> Option<EventKind<'a>> {
    let s = trim_start(msg);
    if let Some(rest) = s.strip_prefix(b"Device ") {
        return gpu_device(rest).map(EventKind::GpuDevice);
    }
    if let Some(rest) = s.strip_prefix(b"current device: ") {
        let (device, rest) = match rest.strip_prefix(b"-") {
            Some(r) => leading_u64(r).map(|(v, r)| (Some(-(v.min(i64::MAX as u64) as i64)), r))?,
            None => leading_u64(rest).map(|(v, r)| (Some(v.min(i64::MAX as u64) as i64), r))?,
        };
        let rest = after(rest, b"in function ")?;
        let at = find(rest, b" at ")?;
        let loc = &rest[at + 4..];
        let colon = loc.iter().rposition(|&b| b == b':')?;
        let line = leading_u32(&loc[colon + 1..]).map_or(0, |x| x.0);
        return Some(EventKind::GpuErrorLocation { device, function: &rest[..at], file: &loc[..colon], line });
    }
    if let Some(rest) = s.strip_prefix(b"what():") {
        let what = trim(rest);
        if find(what, b"DeviceLost").is_some() {
            return Some(EventKind::DeviceLost { message: what });
        }
        if find(what, b"OutOfDeviceMemory").is_some() || find(what, b"OutOfHostMemory").is_some() {
            return Some(EventKind::OutOfMemory { message: what });
        }
        return Some(EventKind::CppTerminate { exception: what });
    }
    if let Some(frame) = native_frame(s) {
        return Some(EventKind::NativeFrame(frame));
    }
    if let Some(frame) = python_frame(s) {
        return Some(EventKind::NativeFrame(frame));
    }
    device_listed(s).or_else(|| anywhere(s, marked))
}

/// `function: text` lines of llama.cpp and ggml, and `file.c:123: message` aborts.
pub(super) fn tagged<'a>(msg: &'a [u8], marked: &Marked<'_>) -> Option<EventKind<'a>> {
    let colon = tag_end(&msg[..msg.len().min(256)])?;
    let tag = &msg[..colon];
    let text = &msg[colon + 2..];
    match tag {
        b"load_backend" => {
            let rest = text.strip_prefix(b"loaded ")?;
            let at = find(rest, b" backend from ")?;
            return Some(EventKind::BackendLoaded { backend: &rest[..at], path: trim(&rest[at + 14..]) });
        }
        // `ggml_cuda_init: failed to initialize CUDA: no CUDA-capable device is detected` (L ggml-cuda.cu
        // `ggml_cuda_init`): the backend found no device, and the runtime goes on without it.
        b"ggml_cuda_init" | b"ggml_init_cublas" if text.starts_with(b"failed to initialize ") => {
            let api = &text[21..];
            let end = api.iter().position(|&b| b == b':' || b == b' ').unwrap_or(api.len());
            return Some(EventKind::DevicesFound { backend: &api[..end], count: 0 });
        }
        // `ggml_init_cublas` is the name llama.cpp's CUDA/HIP backend printed before 2024-03.
        b"ggml_cuda_init" | b"ggml_init_cublas" => {
            let rest = text.strip_prefix(b"found ")?;
            let (count, rest) = leading_u32(rest)?;
            let rest = trim_start(rest);
            let end = rest.iter().position(|&b| b == b' ').unwrap_or(rest.len());
            return Some(EventKind::DevicesFound { backend: &rest[..end], count });
        }
        b"ggml_vulkan" => return vulkan_line(text),
        b"llama_model_loader" if text.starts_with(b"loaded meta data") => {
            return Some(EventKind::ModelLoading { path: after(text, b" from ").map(model_path) });
        }
        // Model metadata and vocabulary dumps: their values are data (a model may be named anything),
        // never events.
        b"llama_model_loader"
        | b"print_info"
        | b"llm_load_print_meta"
        | b"load"
        | b"llm_load_vocab"
        | b"system_info"
        | b"common_memory_breakdown_print" => return Some(EventKind::Other),
        b"llama_model_load" | b"llama_load_model_from_file" | b"llama_model_load_from_file_impl" => {
            if let Some(error) = text.strip_prefix(b"error loading model: ") {
                return Some(EventKind::LoadError { error });
            }
        }
        b"llama_perf_context_print" => return timing(text),
        b"ggml_cuda_compute_forward" => {
            if let Some(op) = text.strip_suffix(b" failed") {
                return Some(EventKind::OpFailed { op: trim(op) });
            }
        }
        b"main" if text.starts_with(b"server is listening on") || text.starts_with(b"model loaded") => {
            return Some(EventKind::ServerReady);
        }
        _ => {}
    }
    generic(text, marked).or_else(|| abort_line(tag, text))
}

/// Where a `tag: ` ends: the first `: `, when no space comes before it.
fn tag_end(s: &[u8]) -> Option<usize> {
    // A word at a time over the tag's letters (a function name of a dozen bytes and more) to its `:` or a space.
    let mut from = 0;
    while let Some(p) = crate::patterns::find_either_near(b' ', b':', &s[from..]) {
        let i = from + p;
        if s[i] == b' ' {
            return None;
        }
        if s.get(i + 1) == Some(&b' ') {
            return Some(i);
        }
        from = i + 1;
    }
    None
}

/// Texts recognised whatever function printed them.
pub(super) fn generic<'a>(text: &'a [u8], marked: &Marked<'_>) -> Option<EventKind<'a>> {
    if text.starts_with(b"warming up the model") {
        return Some(EventKind::Warmup);
    }
    // llama-server of 2024 (its JSON records read as `main: unable to load model`; ollama/ollama v0.1.45
    // llm/ext_server/server.cpp `LOG_ERROR("unable to load model", …)`).
    if text.starts_with(b"unable to load model") {
        return Some(EventKind::LoadError { error: text });
    }
    if marked.get() {
        // `skipping device Vulkan1 (…) with id X - already using device Vulkan0 (…) with the same id`
        // (L src/llama.cpp:248) names a device that is not used, then one whose use was logged before.
        if let Some(rest) = after(text, b"using device ").filter(|_| !text.starts_with(b"skipping device ")) {
            return device_used(rest);
        }
        if find(text, b"couldn't bind").is_some() || find(text, b"address already in use").is_some() {
            return Some(EventKind::BindFailed { message: trim(text) });
        }
        if let Some((offloaded, total)) = offloaded(text) {
            return Some(EventKind::LayersOffloaded { offloaded, total });
        }
        if let Some(kind) = buffer_size(text) {
            return Some(kind);
        }
    }
    settings_or_listing(text)
}

/// The flash-attention setting, the graph's size, or a listed device: each begins (after spaces) with its own byte, and
/// a text that begins with none of them is read by none.
fn settings_or_listing(text: &[u8]) -> Option<EventKind<'_>> {
    let t = trim_start(text);
    match t.first()? {
        b'f' | b'F' => flash_attention(text),
        b'g' => graph(text),
        b'-' => device_listed(t.strip_prefix(b"- ")?),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tag_end_is_the_first_colon_and_space_before_any_space() {
        let naive = |s: &[u8]| -> Option<usize> {
            for (i, &b) in s.iter().enumerate() {
                match b {
                    b' ' => return None,
                    b':' if s.get(i + 1) == Some(&b' ') => return Some(i),
                    _ => {}
                }
            }
            None
        };
        for s in [
            &b"load_backend: loaded"[..],
            b"ggml-vulkan.cpp:4367: GGML_ASSERT(x) failed",
            b"C:\\path\\file.cpp:12: x",
            b"no tag here: x",
            b"tag:nospace",
            b"x:",
            b": x",
            b"a::b: c",
            b"",
        ] {
            assert_eq!(tag_end(s), naive(s), "{}", String::from_utf8_lossy(s));
        }
    }

    /// The settings and listings are read as when each rule was tried in turn: on every message of the logs (after
    /// their prefixes and tags) and on texts of each form, indented, cut and with another first byte.
    #[test]
    fn settings_and_listings_read_as_each_rule_in_turn() {
        fn before(text: &[u8]) -> Option<EventKind<'_>> {
            if let Some(kind) = flash_attention(text) {
                return Some(kind);
            }
            if let Some(kind) = graph(text) {
                return Some(kind);
            }
            if let Some(listing) = trim_start(text).strip_prefix(b"- ") {
                return device_listed(listing);
            }
            None
        }
        let mut texts: Vec<Vec<u8>> = Vec::new();
        for line in crate::patterns::repository_log_lines() {
            let message = crate::prefix::strip(&line).message;
            let text = tag_end(message).map_or(message, |at| &message[at + 2..]);
            texts.push(text.to_vec());
            texts.push(message.to_vec());
        }
        for form in [
            "flash_attn = auto",
            "flash_attn    = 1",
            "flash_attn",
            "Flash Attention was auto, set to enabled",
            "Flash Attention enabled",
            "graph nodes  = 1030",
            "graph splits = 2 (with bs=512), 1 (with bs=1)",
            "graph: nodes = 1030, splits = 2",
            "graph (pp bs=512, tg bs=1): nodes = 1030 / 1030, splits = 2 / 2",
            "graphics",
            "- CPU     : AMD EPYC (24105 MiB, 24105 MiB free)",
            "- Vulkan0 : llvmpipe (LLVM 15.0.6, 256 bits) (7927 MiB, 7927 MiB free)",
            "- kv   0: general.architecture str = llama",
            "-x",
            "",
        ] {
            for indent in ["", " ", "   ", "\t"] {
                let text = format!("{indent}{form}");
                for cut in 0..text.len().min(12) {
                    texts.push(text.as_bytes()[..text.len() - cut].to_vec());
                }
                texts.push(format!("x{text}").into_bytes());
            }
        }
        let mut read = 0;
        for text in &texts {
            let got = settings_or_listing(text);
            read += usize::from(got.is_some());
            assert_eq!(got, before(text), "{}", String::from_utf8_lossy(text));
        }
        assert!(read > 40, "{read}");
    }

    /// Each arm of [`by_first_byte`] answers for a line of its kind, and the table lets that line's first byte in.
    #[test]
    fn the_first_byte_table_admits_every_arm() {
        let lines: [&[u8]; 24] = [
            b"  Device 0: NVIDIA GeForce RTX 4060 Ti, compute capability 8.9, VMM: yes",
            b"\tgithub.com/ollama/ollama/llama/llama.go:163 +0xf5",
            b"SIGSEGV: segmentation violation",
            b"PC=0x7f27a8e24c47 m=0 sigcode=1 addr=0x206a03fb4",
            b"OSError: exception: access violation reading 0x0000000000000000",
            b"HW Exception by GPU node-1 (Agent handle: 0x1) reason :GPU Hang",
            b"Device 0: NVIDIA GeForce RTX 4060 Ti, compute capability 8.9, VMM: yes",
            b"Exception 0xc0000005 0x8 0x7ffa191bcb12 0x7ffa191bcb12",
            b"amdgpu 0000:03:00.0: amdgpu: ring comp_1.1.0 timeout, signaled seq=7, emitted seq=9",
            b"drmn0: [drm] GPU HANG: ecode 9:1:85d7bfff, in MainThread [101714]",
            b"radv/amdgpu: The CS has been cancelled because the context is lost. This context is innocent.",
            b"[drm:amdgpu_job_timedout [amdgpu]] *ERROR* ring gfx_0.0.0 timeout, signaled seq=5000163, emitted seq=5",
            b"i915 0000:00:02.0: [drm] GPU HANG: ecode 12:1:0020fffe, in xdg-desktop-por [1676]",
            b"xe 0000:00:02.0: [drm] GT0: Timedout job: seqno=24496, lrc_seqno=24496, guc_id=0, flags=0x13 in no process [-1]",
            b"NVRM: Xid (PCI:0000:01:00): 31, pid=14292, name=python, Ch 00000030, intr 00000000.",
            b"goroutine 29 gp=0xc000585dc0 m=0 mp=0x64b1b235c780 [syscall]:",
            b"created by github.com/ollama/ollama/runner/llamarunner.Execute in goroutine 1",
            b"#3  0x00007ffff7c42476 in __GI_raise (sig=sig@entry=6) at ../sysdeps/posix/raise.c:26",
            b"/usr/lib/libggml-base.so.0(ggml_print_backtrace+0x204) [0x752379951c64]",
            b"frame #4: 0x0000000100b5c2e0 libggml-base.dylib`ggml_abort + 156",
            b"* frame #0: 0x000000018e2a1388 libsystem_kernel.dylib`__pthread_kill + 8",
            b"Host Frame:ggml_cuda_error [0x1234] in libggml-cuda.so",
            b"Program hit cudaErrorIllegalAddress (error 700) due to \"an illegal memory access was encountered\"",
            b"Exception 0xe06d7363 is a C++ exception thrown by MSVC code.",
        ];
        for line in lines {
            let marked = Marked::new(line);
            assert!(FIRST_BYTE_RULES[usize::from(line[0])], "{}", String::from_utf8_lossy(line));
            assert!(by_first_byte(line, line[0], &marked).is_some(), "{}", String::from_utf8_lossy(line));
        }
        let with_rules = (0..=255u8).filter(|&b| FIRST_BYTE_RULES[usize::from(b)]).count();
        assert_eq!(with_rules, 21, "one entry per byte the match names");
    }
}
