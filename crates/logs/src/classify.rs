//! What a log message says: the rules that turn one message (outer prefixes already removed) into an
//! [`EventKind`].
//!
//! The rules dispatch on the message's shape before they search it: a slog line starts with `time=`, a
//! llama.cpp line with its function name and `: `, a Go trace line has its own forms. Only a message no
//! dispatch claims is searched for the few markers that can appear anywhere (`GGML_ASSERT(`,
//! `ErrorDeviceLost`, `out of memory`…). Every rule is bounded by the message length, which the line cap
//! bounds, and nothing here allocates.
//!
//! Formats and their sources (llama.cpp build 11434 "L", Ollama "O", Ollama v0.24 "O24"):
//! `load_backend: loaded X backend from P` (L `ggml-backend-reg.cpp`); `ggml_cuda_init: found N ROCm
//! devices` and `  Device N: …` (L `ggml-cuda.cu`); `ggml_vulkan: N = NAME (DRIVER) | uma: …` (L
//! `ggml-vulkan.cpp`); `offloaded N/M layers to GPU`, `… model buffer size = X MiB` (L
//! `llama-model.cpp`); `flash_attn = …`, `graph: nodes = …, splits = …` (L `llama-context.cpp`);
//! `slot print_timing: … prompt eval time = …` (L `tools/server/server-context.cpp`); Ollama's slog
//! messages (O `llm/llama_server.go`, `discover/runner.go`; O24 `llm/server.go`); Go runtime crash
//! output (`SIGSEGV: segmentation violation`, `PC=… m=… sigcode=… addr=…`, goroutine dumps).

use std::sync::LazyLock;

use memchr::memchr_iter;

use crate::event::{
    BufferKind, EventKind, GpuDevice, GpuDriver, GpuDriverEvent, InferenceCompute, NativeFrame, TimingKind,
    VulkanDevice,
};
use crate::slog;
use crate::time::{parse_rfc3339, parse_slash_date, Timestamp};

/// State carried from line to line.
#[derive(Clone, Copy, Debug, Default)]
pub struct Context {
    /// Inside a Go goroutine dump (after a `goroutine N …:` header): frame lines are read as frames.
    pub in_go_trace: bool,
    /// Inside a native backtrace (after a first frame line).
    pub in_native_trace: bool,
}

/// A classified message.
#[derive(Clone, Copy, Debug)]
pub struct Classified<'a> {
    pub kind: EventKind<'a>,
    /// A timestamp inside the message (slog `time=`, Gin's date).
    pub time: Option<Timestamp>,
    /// The message had a timestamp field that could not be read.
    pub bad_timestamp: bool,
    /// A progress message the line began with, before the message `kind` describes (see [`Event::before`]).
    ///
    /// [`Event::before`]: crate::event::Event::before
    pub before: Option<crate::event::Before>,
}

impl<'a> Classified<'a> {
    fn plain(kind: EventKind<'a>) -> Self {
        Classified { kind, time: None, bad_timestamp: false, before: None }
    }
}

fn find(h: &[u8], needle: &[u8]) -> Option<usize> {
    crate::patterns::find_in(h, needle)
}

/// Every substring that a rule searches for (rather than matching at a fixed place), each by a slice of it (the
/// comment gives the whole). One pass of this searcher over a message tells whether any such rule can apply; most
/// lines of a log (model metadata, trace frames, progress) contain none, and then no rule searches them at all.
/// The searcher's fingerprint of a pattern is its first bytes, and a slice that begins where the bytes are rare in
/// logs (`ss has terminated`, not `process`) leaves it few false candidates to check: a line with the slice but not
/// the whole only lets the rules look, and they find nothing.
static MARKERS: LazyLock<crate::patterns::Patterns> = LazyLock::new(|| {
    crate::patterns::Patterns::new(&[
        "g device ", // using device
        "offloaded ",
        "r size",    // buffer size
        "ML_ASSERT", // GGML_ASSERT
        "iceLost",   // DeviceLost
        "ICE_LOST",  // DEVICE_LOST
        "ce lost",   // device lost
        "of memory", // out of memory
        "OutOfDeviceMemory",
        "o allocate",              // failed to allocate, unable to allocate
        "ss has terminated",       // process has terminated
        "th error",                // runner exited with error
        "r starting llama runner", // error starting llama runner
        "Assertion `",
        "tedly stopped", // unexpectedly stopped
        "ST predict",    // POST predict
        "st predict",    // post predict
        "segfault at",
        "ot supported", // not supported
        "unsupported",
        "quest: ",                // request:
        "leaning up before exit", // cleaning up before exit
        "couldn't bind",
        "ss already in use", // address already in use
        " abort:",
        "ut additional information", // crashed without additional information
        "Failed to load model",
        "ss exited, code=", // Main process exited, code=
        "umped core",       // dumped core
    ])
    .expect("the marker patterns are valid")
});

/// Whether a message holds any substring a searching rule looks for, computed on first use: lines that
/// a rule claims by position never pay for the scan.
struct Marked<'a> {
    msg: &'a [u8],
    value: std::cell::Cell<Option<bool>>,
}

impl<'a> Marked<'a> {
    fn new(msg: &'a [u8]) -> Self {
        Marked { msg, value: std::cell::Cell::new(None) }
    }

    fn get(&self) -> bool {
        match self.value.get() {
            Some(v) => v,
            None => {
                let v = MARKERS.find(self.msg).is_some();
                self.value.set(Some(v));
                v
            }
        }
    }
}

/// Position of the first `: ` (found with `memchr`, linear whatever the input).
fn colon_space(s: &[u8]) -> Option<usize> {
    memchr_iter(b':', s).find(|&i| s.get(i + 1) == Some(&b' '))
}

fn after<'a>(h: &'a [u8], needle: &[u8]) -> Option<&'a [u8]> {
    find(h, needle).map(|i| &h[i + needle.len()..])
}

fn trim(s: &[u8]) -> &[u8] {
    s.trim_ascii()
}

fn trim_start(s: &[u8]) -> &[u8] {
    s.trim_ascii_start()
}

/// Leading decimal digits as a number (saturating), and the rest.
fn leading_u64(s: &[u8]) -> Option<(u64, &[u8])> {
    let n = s.iter().take_while(|b| b.is_ascii_digit()).count();
    if n == 0 {
        return None;
    }
    let v = s[..n].iter().fold(0u64, |v, &b| v.saturating_mul(10).saturating_add(u64::from(b - b'0')));
    Some((v, &s[n..]))
}

fn leading_u32(s: &[u8]) -> Option<(u32, &[u8])> {
    leading_u64(s).map(|(v, rest)| (u32::try_from(v).unwrap_or(u32::MAX), rest))
}

/// A leading decimal number such as `12.34` or `-1`, and the rest.
fn leading_f64(s: &[u8]) -> Option<(f64, &[u8])> {
    let n =
        s.iter().enumerate().take_while(|&(i, &b)| b.is_ascii_digit() || b == b'.' || (i == 0 && b == b'-')).count();
    let v: f64 = std::str::from_utf8(&s[..n]).ok()?.parse().ok()?;
    Some((v, &s[n..]))
}

fn yes_no(s: &[u8]) -> Option<bool> {
    match trim(s) {
        b"yes" | b"1" | b"true" => Some(true),
        b"no" | b"0" | b"false" => Some(false),
        _ => None,
    }
}

/// A size such as `552.2 MiB` or `1.0 GiB` in MiB.
fn size_mib(s: &[u8]) -> Option<f64> {
    let (v, rest) = leading_f64(trim(s))?;
    let factor = match trim(rest) {
        b"B" => 1.0 / (1024.0 * 1024.0),
        b"KiB" | b"KB" => 1.0 / 1024.0,
        b"MiB" | b"MB" | b"" => 1.0,
        b"GiB" | b"GB" => 1024.0,
        b"TiB" => 1024.0 * 1024.0,
        _ => return None,
    };
    Some(v * factor)
}

/// Classify one message.
pub fn classify<'a>(msg: &'a [u8], ctx: &mut Context) -> Classified<'a> {
    if let Some(c) = trace_line(msg, ctx) {
        return c;
    }
    if msg.starts_with(b"time=") {
        let mut c = slog_line(msg);
        if matches!(c.kind, EventKind::Other) {
            c.kind = milestone(msg);
        }
        return c;
    }
    if let Some(rest) = msg.strip_prefix(b"[GIN] ") {
        return gin(rest);
    }
    if let Some((mut progress, mut rest)) = koboldcpp_progress(msg) {
        // Progress after progress (each without its newline): the last one is where it stopped.
        while let Some((next, tail)) = koboldcpp_progress(rest) {
            (progress, rest) = (next, tail);
        }
        if trim(rest).is_empty() {
            return Classified::plain(progress);
        }
        // The progress line had no newline: what follows it is the next message (an error that stopped it).
        let mut c = classify(rest, ctx);
        c.before = crate::event::Before::of(&progress);
        return c;
    }
    let kind = structured(msg).unwrap_or_else(|| milestone(msg));
    // A crash a person quoted inside a sentence with the progress it interrupted (`… fails with: "Processing Prompt
    // [BLAS] (1024 / 2380 tokens)ggml-vulkan.cpp:4367: GGML_ASSERT(…) failed`): the progress is read too.
    let before = if kind.is_fatal() {
        find(msg, b"Processing Prompt")
            .and_then(|at| koboldcpp_progress(&msg[at..]))
            .and_then(|(p, _)| crate::event::Before::of(&p))
    } else {
        None
    };
    // A goroutine header, or a frame's source line, `created by` line or Markdown-linked frame read outside a dump
    // (a paste that starts inside one): the lines after it are the dump's.
    if matches!(
        kind,
        EventKind::Goroutine { .. }
            | EventKind::GoFrameSource { .. }
            | EventKind::GoCreatedBy { .. }
            | EventKind::GoFrame { .. }
    ) {
        ctx.in_go_trace = true;
    }
    if matches!(kind, EventKind::NativeFrame(_)) {
        ctx.in_native_trace = true;
    }
    Classified { before, ..Classified::plain(kind) }
}

/// KoboldCpp's progress lines (`koboldcpp.py` prints them with `\r` and no newline): `Processing Prompt [BLAS] (512 /
/// 12710 tokens)` (also `[BATCH]`, or no bracket) while a request's prompt is processed, `Generating (20 / 512 tokens)`
/// while it generates. Returns the progress and what follows it on the line.
fn koboldcpp_progress(msg: &[u8]) -> Option<(EventKind<'_>, &[u8])> {
    let (decoding, rest) = match msg.strip_prefix(b"Processing Prompt") {
        Some(rest) => {
            let rest = trim_start(rest);
            let rest = match rest.strip_prefix(b"[") {
                Some(r) => &r[r.iter().position(|&b| b == b']')? + 1..],
                None => rest,
            };
            (false, trim_start(rest))
        }
        None => (true, msg.strip_prefix(b"Generating ")?),
    };
    let (done, rest) = leading_u64(rest.strip_prefix(b"(")?)?;
    let (_, rest) = leading_u64(trim_start(rest.strip_prefix(b" /")?))?;
    let rest = rest.strip_prefix(b" tokens)")?;
    Some((EventKind::Progress { task: None, decoding, tokens: Some(done) }, rest))
}

/// How far into a line a milestone is looked for: every era's milestone text starts within its first few hundred
/// bytes (after a slog `time=… level=… source=… msg=`, a Go log date, a 2024 server's `INFO [function]`), and the
/// long lines no rule claims (configuration dumps, command lines) need not be searched to their end.
const MILESTONE_WINDOW: usize = 384;

/// A line no typed rule claimed: a milestone of the era table, or `Other`.
fn milestone(msg: &[u8]) -> EventKind<'_> {
    match crate::milestones::table().find(&msg[..msg.len().min(MILESTONE_WINDOW)]) {
        Some((index, number)) => EventKind::Milestone { index, number },
        None => EventKind::Other,
    }
}

// ---------------------------------------------------------------------------------------------------------
// Go and native stack traces.

/// Lines that only make sense inside a trace; ends the trace state on anything else.
fn trace_line<'a>(msg: &'a [u8], ctx: &mut Context) -> Option<Classified<'a>> {
    if ctx.in_go_trace {
        if let Some(kind) = go_trace_line(msg) {
            return Some(Classified::plain(kind));
        }
        if trim(msg).is_empty() {
            // Blank lines separate goroutines.
            return Some(Classified::plain(EventKind::Other));
        }
        ctx.in_go_trace = false;
    }
    if ctx.in_native_trace {
        if let Some(frame) = native_frame(msg) {
            return Some(Classified::plain(EventKind::NativeFrame(frame)));
        }
        ctx.in_native_trace = false;
    }
    None
}

fn go_trace_line(msg: &[u8]) -> Option<EventKind<'_>> {
    if let Some(g) = goroutine(msg) {
        return Some(g);
    }
    let first = *msg.first()?;
    if first == b'\t' || first == b' ' {
        return go_source(trim_start(msg));
    }
    if let Some(f) = msg.strip_prefix(b"created by ") {
        let end = find(f, b" in goroutine ").unwrap_or(f.len());
        return Some(EventKind::GoCreatedBy { function: &f[..end] });
    }
    if msg.starts_with(b"...") {
        return Some(EventKind::GoTraceDetail);
    }
    // Docker Desktop drops the tab before a source line.
    if let Some(src) = go_source(msg) {
        return Some(src);
    }
    if is_register(msg) {
        return Some(EventKind::GoTraceDetail);
    }
    go_function(msg).map(|function| EventKind::GoFrame { function })
}

/// A Go trace line that is recognised outside a goroutine dump too, for a paste that starts inside one: a frame's
/// source line with its `+0x` offset, `created by F in goroutine N`, a frame pasted as a Markdown link.
fn headerless_go_line(msg: &[u8]) -> Option<EventKind<'_>> {
    let s = trim_start(msg);
    if s.len() < msg.len() {
        return go_source(s).filter(|_| find(s, b" +0x").is_some());
    }
    if let Some(f) = msg.strip_prefix(b"created by ") {
        let end = find(f, b" in goroutine ")?;
        let function = &f[..end];
        return (function.contains(&b'.') && !function.contains(&b' ')).then_some(EventKind::GoCreatedBy { function });
    }
    if msg.starts_with(b"[") {
        return go_function(msg).map(|function| EventKind::GoFrame { function });
    }
    None
}

/// A Markdown link as GitHub renders a pasted Go frame when the paste is not in a code block:
/// `[github.com/ollama/ollama/ml/backend/ggml._Cfunc_x](https://github.com/…)(0x7f…)`. Returns the link's text and
/// what follows the link.
fn markdown_link(s: &[u8]) -> Option<(&[u8], &[u8])> {
    let rest = s.strip_prefix(b"[")?;
    let close = find(rest, b"](")?;
    let text = &rest[..close];
    let after = &rest[close + 2..];
    let end = after.iter().position(|&b| b == b')')?;
    if !(after.starts_with(b"http://") || after.starts_with(b"https://")) || text.contains(&b' ') {
        return None;
    }
    Some((text, &after[end + 1..]))
}

/// `goroutine 29 gp=0x… m=0 mp=0x… [syscall]:` / `goroutine 5 [syscall, 6 minutes]:`.
fn goroutine(msg: &[u8]) -> Option<EventKind<'_>> {
    let rest = msg.strip_prefix(b"goroutine ")?;
    let (id, rest) = leading_u64(rest)?;
    let open = rest.iter().position(|&b| b == b'[')?;
    let close = rest.iter().rposition(|&b| b == b']')?;
    if close < open || !rest[close..].starts_with(b"]:") {
        return None;
    }
    Some(EventKind::Goroutine { id, state: &rest[open + 1..close] })
}

/// `path/file.go:123 +0x4b fp=… sp=… pc=…` (also `.s` for assembly frames).
fn go_source(s: &[u8]) -> Option<EventKind<'_>> {
    let loc = match markdown_link(s) {
        Some((text, _)) => text,
        None => &s[..s.iter().position(|&b| b == b' ').unwrap_or(s.len())],
    };
    let colon = loc.iter().rposition(|&b| b == b':')?;
    let (file, line) = (&loc[..colon], &loc[colon + 1..]);
    if !(file.ends_with(b".go") || file.ends_with(b".s")) {
        return None;
    }
    let (line, tail) = leading_u32(line)?;
    if !tail.is_empty() {
        return None;
    }
    Some(EventKind::GoFrameSource { file, line })
}

/// A Go frame's function line: a name without spaces followed by an argument list, e.g.
/// `github.com/ollama/ollama/llama.(*Context).Decode(0xc0002fe0e0?, 0x0?)` or `main.main()`.
fn go_function(msg: &[u8]) -> Option<&[u8]> {
    if !msg.ends_with(b")") {
        return None;
    }
    if let Some((text, rest)) = markdown_link(msg) {
        return (rest.starts_with(b"(") && text.contains(&b'.')).then_some(text);
    }
    let open = call_paren(msg)?;
    let name = &msg[..open];
    if name.is_empty() || name.contains(&b' ') || name.contains(&b'\t') {
        return None;
    }
    Some(name)
}

/// Index of the `(` that opens the final argument list of `s` (which ends with `)`).
fn call_paren(s: &[u8]) -> Option<usize> {
    let mut depth = 0usize;
    for (i, &b) in s.iter().enumerate().rev() {
        match b {
            b')' => depth += 1,
            b'(' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
    }
    None
}

/// `rax    0x0`, `rip    0x7f…`, `r10    0x2`, `fault   0x…`.
fn is_register(msg: &[u8]) -> bool {
    let name_len = msg.iter().take_while(|b| b.is_ascii_alphanumeric()).count();
    if name_len == 0 || name_len > 6 {
        return false;
    }
    let rest = trim_start(&msg[name_len..]);
    rest.len() < msg.len() - name_len && rest.starts_with(b"0x") && !rest.contains(&b' ')
}

/// Registers the Go runtime prints after a fatal signal (`runtime/signal_amd64.go` `dumpregs`, and arm64's `r0`…
/// `r29`, `lr`, `sp`, `pc`, `fault`).
const GO_REGISTERS: &[&[u8]] = &[
    b"rax", b"rbx", b"rcx", b"rdx", b"rdi", b"rsi", b"rbp", b"rsp", b"r8", b"r9", b"r10", b"r11", b"r12", b"r13",
    b"r14", b"r15", b"rip", b"rflags", b"cs", b"fs", b"gs", b"lr", b"sp", b"pc", b"fault",
];

/// A register line of a Go crash dump read outside a goroutine dump: a register the runtime prints, spaces, and a
/// hexadecimal value that ends the line (`rax    0x0`).
fn go_register(msg: &[u8]) -> bool {
    let name_len = msg.iter().take_while(|b| b.is_ascii_alphanumeric()).count();
    let name = &msg[..name_len];
    let arm = name.len() <= 3
        && name.first() == Some(&b'r')
        && name.len() > 1
        && name[1..].iter().all(u8::is_ascii_digit)
        && leading_u32(&name[1..]).is_some_and(|(n, _)| n <= 29);
    if !(GO_REGISTERS.contains(&name) || arm) {
        return false;
    }
    let value = trim_start(&msg[name_len..]);
    value.len() < msg.len() - name_len
        && value.strip_prefix(b"0x").is_some_and(|hex| !hex.is_empty() && hex.iter().all(u8::is_ascii_hexdigit))
}

/// A native backtrace frame in one of the forms `ggml_print_backtrace` produces.
fn native_frame(msg: &[u8]) -> Option<NativeFrame<'_>> {
    let s = trim_start(msg);
    // lldb: `frame #3: 0x00000001a1b2c3d4 libggml-base.dylib`ggml_abort + 364` (`* frame #0:` for the selected one).
    if let Some(rest) = s.strip_prefix(b"* ").unwrap_or(s).strip_prefix(b"frame #") {
        let (index, rest) = leading_u32(rest)?;
        let rest = trim_start(rest.strip_prefix(b":")?);
        let addr = rest.strip_prefix(b"0x")?;
        let after_addr = trim_start(&addr[addr.iter().position(|b| !b.is_ascii_hexdigit()).unwrap_or(addr.len())..]);
        let tick = after_addr.iter().position(|&b| b == b'`');
        let (module, symbol) = match tick {
            Some(t) => {
                let sym = &after_addr[t + 1..];
                let end = find(sym, b" + ").or_else(|| sym.iter().position(|&b| b == b' ')).unwrap_or(sym.len());
                (&after_addr[..t], Some(&sym[..end]).filter(|x| !x.is_empty()))
            }
            None => (&after_addr[..after_addr.iter().position(|&b| b == b' ').unwrap_or(after_addr.len())], None),
        };
        return Some(NativeFrame { index: Some(index), module: Some(module).filter(|m| !m.is_empty()), symbol });
    }
    // gdb: `#3  0x00007f… in sym (args) at file:line` / `#4  sym (args) at …`.
    if let Some(rest) = s.strip_prefix(b"#") {
        let (index, rest) = leading_u32(rest)?;
        let rest = trim_start(rest);
        let rest = match rest.strip_prefix(b"0x") {
            Some(addr) => {
                let after_addr = addr.iter().position(|b| !b.is_ascii_hexdigit()).unwrap_or(addr.len());
                trim_start(&addr[after_addr..]).strip_prefix(b"in ").unwrap_or(&addr[after_addr..])
            }
            None => rest,
        };
        let rest = trim_start(rest);
        let sym_end = rest.iter().position(|&b| b == b' ' || b == b'(').unwrap_or(rest.len());
        let module = after(rest, b" from ").map(trim);
        return Some(NativeFrame {
            index: Some(index),
            module,
            symbol: Some(&rest[..sym_end]).filter(|s| !s.is_empty()),
        });
    }
    // glibc backtrace_symbols: `/path/lib.so(sym+0x1e) [0x7f…]` (glibc puts a space before the address; some
    // pastes lose it) or `/path/lib.so(+0x1e) [0x7f…]`. The module is the last word before `(`: whatever a paste
    // put before it (a router's `[pid] `, a viewer's clock) is not part of it.
    if s.ends_with(b"]") {
        let bracket = s.iter().rposition(|&b| b == b'[')?;
        let hex = &s[bracket + 1..s.len() - 1];
        if !hex.strip_prefix(b"0x").is_some_and(|h| !h.is_empty() && h.iter().all(u8::is_ascii_hexdigit)) {
            return None;
        }
        let head = s[..bracket].trim_ascii_end();
        let call = head.strip_suffix(b")")?;
        let open = call.iter().rposition(|&b| b == b'(')?;
        let inside = &call[open + 1..];
        if inside.contains(&b' ') {
            return None;
        }
        let plus = inside.iter().rposition(|&b| b == b'+').unwrap_or(inside.len());
        let symbol = Some(&inside[..plus]).filter(|x| !x.is_empty());
        let before = &call[..open];
        let module = &before[before.iter().rposition(|&b| b == b' ').map_or(0, |i| i + 1)..];
        if module.is_empty() {
            return None;
        }
        return Some(NativeFrame { index: None, module: Some(module), symbol });
    }
    // ggml's unwind fallback: `3: 0x7f1234 symbol`.
    let (index, rest) = leading_u32(s)?;
    let rest = rest.strip_prefix(b": 0x")?;
    let hex = rest.iter().take_while(|b| b.is_ascii_hexdigit()).count();
    if hex == 0 {
        return None;
    }
    let symbol = trim(&rest[hex..]);
    Some(NativeFrame { index: Some(index), module: None, symbol: Some(symbol).filter(|x| !x.is_empty()) })
}

// ---------------------------------------------------------------------------------------------------------
// Ollama: slog and Gin.

fn slog_line(msg: &[u8]) -> Classified<'_> {
    let rec = slog::record(msg);
    let (time, bad_timestamp) = match rec.time.map(parse_rfc3339) {
        Some(Some((t, []))) => (Some(t), false),
        Some(_) => (None, true),
        None => (None, false),
    };
    let kind = rec.msg.and_then(|m| slog_message(msg, m, rec.level.unwrap_or_default())).unwrap_or(EventKind::Other);
    Classified { kind, time, bad_timestamp, before: None }
}

fn slog_message<'a>(line: &'a [u8], msg: &'a [u8], level: &'a [u8]) -> Option<EventKind<'a>> {
    let get = |key: &[u8]| slog::get(line, key);
    let kind = match msg {
        b"inference compute" => EventKind::InferenceCompute(InferenceCompute {
            id: get(b"id"),
            library: get(b"library"),
            compute: get(b"compute"),
            name: get(b"name"),
            description: get(b"description"),
            libdirs: get(b"libdirs"),
            driver: get(b"driver"),
            device_type: get(b"type"),
            total: get(b"total"),
            available: get(b"available"),
        }),
        b"starting runner" | b"starting llama server" | b"starting llama-server" => {
            let cmd = get(b"cmd").unwrap_or_default();
            EventKind::RunnerStarting { cmd, with_model: find(cmd, b"--model").is_some() }
        }
        b"loading model" | b"loading model via llama-server" => EventKind::ModelLoading { path: get(b"model") },
        b"failure during GPU discovery" | b"failure during llama-server GPU discovery" => {
            EventKind::DiscoveryFailure { error: get(b"error"), detail: get(b"detail") }
        }
        b"post predict" => EventKind::PostPredictError { error: get(b"error") },
        b"llama runner terminated" | b"llama-server terminated" => {
            EventKind::RunnerTerminated { error: get(b"error").unwrap_or_default() }
        }
        // O `llm/llama_server.go` (v0.30+): the runner died while loading.
        b"Load failed" | b"load failed" => EventKind::LoadError { error: get(b"error").unwrap_or(msg) },
        b"error loading llama server" | b"error loading llama-server" | b"error loading model" => {
            EventKind::LoadError { error: get(b"error").unwrap_or_default() }
        }
        b"llama-server completion error" | b"completion error" => {
            EventKind::CompletionError { message: get(b"error").unwrap_or(msg) }
        }
        // Devices current Ollama drops with its own checks (O `discover/amd.go:470`,
        // `discover/llama_server.go:299`, `discover/runner.go:190`).
        b"dropping ROCm device \xe2\x80\x94 no rocblas support for gfx target" => {
            EventKind::UnsupportedGpu { gpu: get(b"gfx_target"), supported: get(b"supported"), message: msg }
        }
        b"skipping CUDA device \xe2\x80\x94 compute capability not in compiled architectures" => {
            EventKind::UnsupportedGpu { gpu: get(b"cc"), supported: get(b"archs"), message: msg }
        }
        // O24 `discover/gpu.go` (v0.5.0 `discover/gpu.go:386`): no GPU left after discovery's checks.
        b"no compatible GPUs were discovered" => EventKind::UnsupportedGpu { gpu: None, supported: None, message: msg },
        b"removing unsupported or overlapping GPU combination" => {
            EventKind::UnsupportedGpu { gpu: get(b"compute"), supported: None, message: msg }
        }
        b"enabling flash attention" => EventKind::FlashAttention { setting: b"enabled" },
        b"compute graph" => {
            let nodes = get(b"nodes").and_then(|v| leading_u64(v)).map(|x| x.0);
            let splits = get(b"splits").and_then(|v| leading_u64(v)).map(|x| x.0);
            match (nodes, splits, get(b"size")) {
                (None, None, Some(size)) => EventKind::BufferSize {
                    device: get(b"backend").or(get(b"device")).unwrap_or_default(),
                    buffer: BufferKind::Compute,
                    mib: size_mib(size)?,
                },
                _ => EventKind::Graph { nodes, splits },
            }
        }
        b"model weights" => EventKind::BufferSize {
            device: get(b"buffer").or(get(b"device")).unwrap_or_default(),
            buffer: BufferKind::Model,
            mib: size_mib(get(b"size")?)?,
        },
        b"kv cache" => EventKind::BufferSize {
            device: get(b"device").or(get(b"buffer")).unwrap_or_default(),
            buffer: BufferKind::Kv,
            mib: size_mib(get(b"size")?)?,
        },
        _ => return slog_message_text(line, msg, level),
    };
    Some(kind)
}

/// slog messages recognised by their text rather than an exact value.
fn slog_message_text<'a>(line: &'a [u8], msg: &'a [u8], level: &'a [u8]) -> Option<EventKind<'a>> {
    let get = |key: &[u8]| slog::get(line, key);
    if let Some(rest) =
        msg.strip_prefix(b"llama runner started in ").or_else(|| msg.strip_prefix(b"llama-server started in "))
    {
        return Some(EventKind::RunnerStarted { seconds: leading_f64(rest)?.0 });
    }
    // The server's memory plan: `msg="offload to cpu" layers.model=25 layers.offload=0` (v0.5.0 `llm/memory.go:356-366`:
    // "offload to " + the library), `msg=offload library=cuda …` later; the runner's own offload line follows and wins.
    if msg == b"offload" || msg.starts_with(b"offload to ") {
        let model = get(b"layers.model").and_then(|v| leading_u32(v)).map(|x| x.0);
        let offload = get(b"layers.offload").and_then(|v| leading_u32(v)).map(|x| x.0);
        if let (Some(offloaded), Some(total)) = (offload, model) {
            return Some(EventKind::LayersOffloaded { offloaded, total });
        }
    }
    let marked = MARKERS.find(msg).is_some();
    if let Some((offloaded, total)) = if marked { offloaded(msg) } else { None } {
        return Some(EventKind::LayersOffloaded { offloaded, total });
    }
    if marked
        && (msg.starts_with(b"amdgpu") && find(msg, b"not supported").is_some() || find(msg, b"unsupported").is_some())
    {
        let supported = get(b"supported_types").or_else(|| {
            let start = find(msg, b"[")?;
            let end = msg.iter().rposition(|&b| b == b']')?;
            (end > start).then(|| &msg[start..=end])
        });
        let gpu = get(b"gpu_type").or_else(|| gfx_token(msg));
        return Some(EventKind::UnsupportedGpu { gpu, supported, message: msg });
    }
    // The Windows tray app supervising `ollama serve` (its app.log, `source=server.go:113`, ollama/ollama issue 3362):
    // `server crash 1 - exit code 1 - respawning`.
    if msg.starts_with(b"server crash ") && find(msg, b" exit code ").is_some() {
        return Some(EventKind::ProcessCrash { message: msg });
    }
    if level == b"ERROR" || level == b"WARN" {
        return Some(EventKind::Diagnostic { level, msg });
    }
    None
}

/// The first `gfx…` token of a text.
fn gfx_token(s: &[u8]) -> Option<&[u8]> {
    let start = find(s, b"gfx")?;
    let t = &s[start..];
    let end = t
        .iter()
        .position(|b| !(b.is_ascii_alphanumeric() || *b == b':' || *b == b'-' || *b == b'+'))
        .unwrap_or(t.len());
    Some(&t[..end])
}

/// `offloaded N/M layers to GPU` anywhere in a message.
fn offloaded(s: &[u8]) -> Option<(u32, u32)> {
    let rest = after(s, b"offloaded ")?;
    let (n, rest) = leading_u32(rest)?;
    let (m, rest) = leading_u32(rest.strip_prefix(b"/")?)?;
    rest.starts_with(b" layers").then_some((n, m))
}

/// `[GIN] 2025/08/28 - 10:25:21 | 200 | 17.696002893s |       127.0.0.1 | POST     "/api/generate"`.
fn gin(rest: &[u8]) -> Classified<'_> {
    let parsed = parse_slash_date(rest);
    let (time, bad_timestamp) = match parsed {
        Some((t, _)) => (Some(t), false),
        None => (None, true),
    };
    let mut fields = rest.split(|&b| b == b'|').map(trim);
    let _date = fields.next();
    let status = fields.next().and_then(|s| leading_u32(s)).and_then(|(v, tail)| tail.is_empty().then_some(v));
    let latency = fields.next();
    let _client = fields.next();
    let request = fields.next().unwrap_or_default();
    let kind = match status.and_then(|s| u16::try_from(s).ok()) {
        Some(status) => {
            let method_end = request.iter().position(|&b| b == b' ').unwrap_or(request.len());
            let path = trim(&request[method_end..]);
            let path = path.strip_prefix(b"\"").and_then(|p| p.strip_suffix(b"\"")).unwrap_or(path);
            EventKind::HttpRequest { status, method: &request[..method_end], path, latency }
        }
        None => EventKind::Other,
    };
    Classified { kind, time, bad_timestamp, before: None }
}

// ---------------------------------------------------------------------------------------------------------
// llama.cpp / ggml / Go runtime lines.

/// The rules a message's first byte selects. `Some(answer)` is the answer for the whole message (an indented line is
/// read by [`indented`] alone); `None` lets the other rules look.
fn by_first_byte<'a>(msg: &'a [u8], first: u8, marked: &Marked<'_>) -> Option<Option<EventKind<'a>>> {
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

fn structured(msg: &[u8]) -> Option<EventKind<'_>> {
    let first = *msg.first()?;
    let marked = &Marked::new(msg);
    if let Some(answer) = by_first_byte(msg, first, marked) {
        return answer;
    }
    if let Some(bytes) = msg.strip_prefix(b"instruction bytes:") {
        return Some(EventKind::InstructionBytes { bytes: trim(bytes) });
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
    if let Some(rest) = msg.strip_prefix(b"signal arrived during ") {
        if rest.starts_with(b"cgo execution") || rest.starts_with(b"external code execution") {
            return Some(EventKind::SignalInForeignCode);
        }
    }
    if let Some(rest) = msg.strip_prefix(b"GGML_ASSERT: ") {
        // The older form (llama.cpp before 2024-06): `GGML_ASSERT: path/file.cu:60: !"CUDA error"`.
        let split = find(rest, b": ")?;
        let loc = &rest[..split];
        let colon = loc.iter().rposition(|&b| b == b':')?;
        let line = leading_u32(&loc[colon + 1..]).map_or(0, |x| x.0);
        return Some(EventKind::GgmlAssert { file: &loc[..colon], line, condition: trim(&rest[split + 2..]) });
    }
    if let Some(message) = msg.strip_prefix(b"fatal error: ").or_else(|| msg.strip_prefix(b"panic: ")) {
        return Some(EventKind::GoFatal { message });
    }
    if let Some(rest) = msg.strip_prefix(b"terminate called after throwing an instance of ") {
        let exception = trim(rest).trim_ascii();
        let exception = exception.strip_prefix(b"'").and_then(|e| e.strip_suffix(b"'")).unwrap_or(exception);
        return Some(EventKind::CppTerminate { exception });
    }
    // The 2023 form: `CUDA error 3 at …/ggml-cuda.cu:5661: initialization error` (the code, the place, the text).
    if let Some(rest) = msg.strip_prefix(b"CUDA error ").filter(|r| r.first().is_some_and(u8::is_ascii_digit)) {
        if let Some(at) = find(rest, b" at ") {
            let place = &rest[at + 4..];
            let message = colon_space(place).map_or(place, |i| &place[i + 2..]);
            return Some(EventKind::GpuError { api: b"CUDA", message: trim(message) });
        }
    }
    // `CUDA error: …`, `rocBLAS error: …`: one word, then ` error: `.
    let first_space = memchr::memchr(b' ', &msg[..msg.len().min(12)]);
    if let Some(api_end) = first_space.filter(|&i| msg[i..].starts_with(b" error: ")) {
        let api = &msg[..api_end];
        let message = &msg[api_end + 8..];
        match api {
            b"CUDA" | b"ROCm" | b"MUSA" | b"HIP" => return Some(EventKind::GpuError { api, message }),
            b"rocBLAS" | b"rocblaslt" | b"hipBLASLt" | b"hipBLAS" | b"Tensile" => {
                return Some(EventKind::BlasError { library: api, message, arch: blas_arch(message) })
            }
            _ => {}
        }
    }
    if let Some(message) = msg.strip_prefix(b"Error: ") {
        if let Some(kind) = runner_failure(message) {
            return Some(kind);
        }
        // A wrapper that puts `Error: ` before each line of the runtime's stderr: the line after it is read as it
        // would be without (once: an `Error: Error: …` line is not unwrapped twice).
        if !message.is_empty() && !trim_start(message).starts_with(b"Error: ") {
            return structured(message);
        }
    }
    if let Some((module, text)) = module_tag(msg) {
        return match module {
            b"slot" => llama_server_slot(text),
            b"srv" => llama_server_srv(text),
            _ => tagged(text, marked).or_else(|| generic(text, marked)).or_else(|| anywhere(text, marked)),
        };
    }
    tagged(msg, marked).or_else(|| anywhere(msg, marked))
}

/// llama.cpp's newer `common_log` lines carry a module and a 12-column function name before the text:
/// `srv  llama_server: model loaded`, `slot launch_slot_: id  3 | task 0 | …`, `cmn  common_init_: …`.
/// Returns the module and the text after the function name.
fn module_tag(msg: &[u8]) -> Option<(&[u8], &[u8])> {
    let module_len = msg.iter().take_while(|b| b.is_ascii_lowercase()).count();
    if !(2..=5).contains(&module_len) || msg.get(module_len) != Some(&b' ') {
        return None;
    }
    let rest = trim_start(&msg[module_len..]);
    let function_len = rest.iter().position(|&b| b == b' ' || b == b':')?;
    let text = rest[function_len..].strip_prefix(b": ")?;
    (function_len > 0).then_some((&msg[..module_len], text))
}

/// Lines that begin with whitespace: CUDA/ROCm device lines and GPU error details.
fn indented<'a>(msg: &'a [u8], marked: &Marked<'_>) -> Option<EventKind<'a>> {
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

/// A frame of a Python traceback: `File "koboldcpp.py", line 351, in load_model` (the module is the `.py` file).
fn python_frame(s: &[u8]) -> Option<NativeFrame<'_>> {
    let rest = s.strip_prefix(b"File \"")?;
    let end = rest.iter().position(|&b| b == b'"')?;
    let module = &rest[..end];
    let symbol = trim(after(&rest[end..], b", in ")?);
    (module.ends_with(b".py") && !symbol.is_empty()).then_some(NativeFrame {
        index: None,
        module: Some(module),
        symbol: Some(symbol),
    })
}

/// `  Device 0: NAME, gfx900:xnack- (0x900), VMM: no, Wave Size: 64[, VRAM: N MiB][, ID: x]` (ROCm) or
/// `  Device 0: NAME, compute capability 8.6, VMM: yes[, VRAM: N MiB][, ID: x]` (CUDA).
fn gpu_device(rest: &[u8]) -> Option<GpuDevice<'_>> {
    let (index, rest) = leading_u32(rest)?;
    let rest = rest.strip_prefix(b": ")?;
    // The name may itself contain ", " (rare); the fields are found from their labels instead.
    let vmm_at = find(rest, b", VMM: ")?;
    let head = &rest[..vmm_at];
    let mut dev = GpuDevice { index, ..GpuDevice::default() };
    if let Some(cc_at) = find(head, b", compute capability ") {
        dev.name = &head[..cc_at];
        dev.compute_capability = Some(trim(&head[cc_at + 21..]));
    } else if let Some(comma) = head.iter().rposition(|&b| b == b',') {
        dev.name = &head[..comma];
        let arch = trim(&head[comma + 1..]);
        let arch_end = arch.iter().position(|&b| b == b' ').unwrap_or(arch.len());
        dev.arch = Some(&arch[..arch_end]);
    } else {
        dev.name = head;
    }
    for field in rest[vmm_at + 2..].split(|&b| b == b',').map(trim) {
        if let Some(v) = field.strip_prefix(b"VMM: ") {
            dev.vmm = yes_no(v);
        } else if let Some(v) = field.strip_prefix(b"Wave Size: ") {
            dev.wave_size = leading_u32(v).map(|x| x.0);
        } else if let Some(v) = field.strip_prefix(b"VRAM: ") {
            dev.vram_mib = leading_u64(v).map(|x| x.0);
        } else if let Some(v) = field.strip_prefix(b"ID: ") {
            dev.id = Some(v);
        }
    }
    Some(dev)
}

/// `SIGSEGV: segmentation violation`.
fn go_signal(msg: &[u8]) -> Option<EventKind<'_>> {
    let colon = msg.iter().position(|&b| b == b':')?;
    let name = &msg[..colon];
    if name.len() < 4 || !name.starts_with(b"SIG") || !name[3..].iter().all(u8::is_ascii_uppercase) {
        return None;
    }
    Some(EventKind::Signal { signal: name, description: trim(&msg[colon + 1..]) })
}

/// `PC=0x7f27a8e24c47 m=0 sigcode=1 addr=0x206a03fb4` (after `PC=`).
fn signal_context(rest: &[u8]) -> EventKind<'_> {
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
fn blas_arch(message: &[u8]) -> Option<&[u8]> {
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
fn python_os_error(msg: &[u8]) -> Option<EventKind<'_>> {
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
fn sanitizer_error(msg: &[u8]) -> Option<EventKind<'_>> {
    let rest = msg.strip_prefix(b"Program hit cuda")?;
    let message = after(rest, b"due to \"").and_then(|m| m.iter().position(|&b| b == b'"').map(|end| &m[..end]));
    Some(EventKind::GpuError { api: b"CUDA", message: message.unwrap_or(msg) })
}

/// A compute-sanitizer host frame: `Host Frame: ggml_cuda_cpy(…) in cpy.cu:612 [0x59421a8] in koboldcpp_cublas.so`,
/// or the older `Host Frame:main [0x3c9ae]` (its module on the next line).
fn sanitizer_frame(rest: &[u8]) -> Option<NativeFrame<'_>> {
    let rest = trim_start(rest);
    let addr = find(rest, b" [0x").unwrap_or(rest.len());
    let head = &rest[..addr];
    // The symbol ends at its argument list or at ` in FILE:LINE`.
    let paren = call_paren(head).unwrap_or(head.len());
    let symbol = trim(&head[..find(&head[..paren], b" in ").unwrap_or(paren)]);
    let module = rest[addr..].rsplit(|&b| b == b' ').next().filter(|_| find(&rest[addr..], b"] in ").is_some());
    (!symbol.is_empty()).then_some(NativeFrame { index: None, module, symbol: Some(symbol) })
}

/// Ollama's Windows Vulkan memory probe names the GPU it reads: `Discrete GPU (AMD Radeon RX 6650 XT) with LUID 0x…
/// detected. Dedicated Total: 8515719168.00 bytes (7.93 GB), …` (its DXGI + PDH reporting in ggml-vulkan).
fn dxgi_discrete_gpu(msg: &[u8]) -> Option<EventKind<'_>> {
    let rest = msg.strip_prefix(b"Discrete GPU (")?;
    let end = find(rest, b") with LUID ")?;
    let total_mib = after(rest, b"Dedicated Total: ").and_then(leading_u64).map(|(bytes, _)| bytes / (1024 * 1024));
    Some(EventKind::DeviceListed { device: b"Vulkan", description: &rest[..end], total_mib, free_mib: None })
}

fn runner_failure(message: &[u8]) -> Option<EventKind<'_>> {
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

/// The `id  0 | task 3 | ` part of a llama-server slot line, returning the task and the text after it.
fn slot_task(s: &[u8]) -> (Option<u64>, &[u8]) {
    let mut task = None;
    let mut rest = s;
    let after_bar = |h: &[u8], what: &[u8]| -> Option<usize> {
        memchr_iter(b'|', h).find(|&i| h[i + 1..].starts_with(what)).map(|i| i + 1 + what.len())
    };
    if let Some(t) = after_bar(s, b" task ").map(|i| &s[i..]) {
        if let Some((v, r)) = t.strip_prefix(b"-").map_or_else(|| leading_u64(t), |_| None) {
            task = Some(v);
            rest = r;
        } else {
            rest = t;
        }
        if let Some(i) = after_bar(rest, b" ") {
            rest = &rest[i..];
        }
    }
    (task, rest)
}

/// The text of a `slot <function>: id  0 | task 3 | <text>` line (llama-server `SLT_*` macros).
fn llama_server_slot(body: &[u8]) -> Option<EventKind<'_>> {
    let (task, text) = slot_task(body);
    if let Some(t) = timing(text) {
        return Some(t);
    }
    if text.starts_with(b"processing task") {
        return Some(EventKind::RequestStarted { task });
    }
    if text.starts_with(b"prompt done") || text.starts_with(b"prompt processing done") {
        return Some(EventKind::PromptDone { task });
    }
    if text.starts_with(b"stop processing") {
        return Some(EventKind::RequestDone { task });
    }
    if let Some(n) = text.strip_prefix(b"n_gen = ") {
        let tokens = leading_u64(trim_start(n)).map(|x| x.0);
        return Some(EventKind::Progress { task, decoding: true, tokens });
    }
    if let Some(n) = text.strip_prefix(b"prompt processing, n_tokens = ") {
        let tokens = leading_u64(trim_start(n)).map(|x| x.0);
        return Some(EventKind::Progress { task, decoding: false, tokens });
    }
    None
}

/// The text of a `srv  <function>: <text>` line (llama-server `SRV_*` macros).
fn llama_server_srv(text: &[u8]) -> Option<EventKind<'_>> {
    if let Some(model) = text.strip_prefix(b"loading model ") {
        let model = trim(model);
        let model = model.strip_prefix(b"'").and_then(|m| m.strip_suffix(b"'")).unwrap_or(model);
        return Some(EventKind::ModelLoading { path: Some(model) });
    }
    if text.starts_with(b"model loaded") || text.starts_with(b"listening on ") {
        return Some(EventKind::ServerReady);
    }
    if text.ends_with(b"cleaning up before exit...") {
        return Some(EventKind::Shutdown);
    }
    if text.starts_with(b"couldn't bind") {
        return Some(EventKind::BindFailed { message: trim(text) });
    }
    if let Some(req) = text.strip_prefix(b"done request: ").or_else(|| text.strip_prefix(b"request: ")) {
        return http_request_line(trim(req));
    }
    None
}

/// `POST /completion 127.0.0.1 200` (llama-server's request log).
fn http_request_line(req: &[u8]) -> Option<EventKind<'_>> {
    let mut words = req.split(|&b| b == b' ').filter(|w| !w.is_empty());
    let method = words.next()?;
    let path = words.next()?;
    let _client = words.next()?;
    let (status, tail) = leading_u32(words.next()?)?;
    if !tail.is_empty() || !method.iter().all(u8::is_ascii_uppercase) {
        return None;
    }
    Some(EventKind::HttpRequest { status: u16::try_from(status).ok()?, method, path, latency: None })
}

/// `prompt eval time =   12.34 ms /     5 tokens (…)`, `eval time = …`, `total time = …`.
fn timing(text: &[u8]) -> Option<EventKind<'_>> {
    let t = trim_start(text);
    let (which, rest) = if let Some(r) = t.strip_prefix(b"prompt eval time") {
        (TimingKind::PromptEval, r)
    } else if let Some(r) = t.strip_prefix(b"eval time") {
        (TimingKind::Eval, r)
    } else if let Some(r) = t.strip_prefix(b"total time") {
        (TimingKind::Total, r)
    } else {
        return None;
    };
    let rest = trim_start(trim_start(rest).strip_prefix(b"=")?);
    let (ms, rest) = leading_f64(rest)?;
    let tokens = after(rest, b"/").and_then(|r| leading_u64(trim_start(r))).map(|x| x.0);
    Some(EventKind::Timing { which, ms, tokens })
}

/// `function: text` lines of llama.cpp and ggml, and `file.c:123: message` aborts.
fn tagged<'a>(msg: &'a [u8], marked: &Marked<'_>) -> Option<EventKind<'a>> {
    let colon = colon_space(msg.get(..msg.len().min(256))?)?;
    let tag = &msg[..colon];
    let text = &msg[colon + 2..];
    if tag.contains(&b' ') {
        return None;
    }
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

/// Texts recognised whatever function printed them.
fn generic<'a>(text: &'a [u8], marked: &Marked<'_>) -> Option<EventKind<'a>> {
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

/// `Vulkan0 : llvmpipe (LLVM 15.0.6, 256 bits) (2048 MiB, 2048 MiB free)` (device_info) or
/// `CUDA0: NAME (T MiB, F MiB free)` (`--list-devices`).
fn device_listed(s: &[u8]) -> Option<EventKind<'_>> {
    let s = trim(s);
    if !s.ends_with(b" MiB free)") {
        return None;
    }
    let colon = s.iter().position(|&b| b == b':')?;
    let device = trim(&s[..colon]);
    if device.is_empty() || device.contains(&b' ') {
        return None;
    }
    let rest = trim(&s[colon + 1..]);
    let open = call_paren(rest)?;
    let sizes = &rest[open + 1..rest.len() - 1];
    let total_mib = leading_u64(trim(sizes)).map(|x| x.0);
    let free_mib = after(sizes, b", ").and_then(|f| leading_u64(trim(f))).map(|x| x.0);
    Some(EventKind::DeviceListed { device, description: trim(&rest[..open]), total_mib, free_mib })
}

/// A model path after ` from `: up to ` (version` when present.
fn model_path(s: &[u8]) -> &[u8] {
    let end = find(s, b" (version").unwrap_or(s.len());
    trim(&s[..end])
}

/// `ggml_vulkan: Found N Vulkan devices:`, `ggml_vulkan: N = NAME (DRIVER) | uma: 0 | …`, device loss.
fn vulkan_line(text: &[u8]) -> Option<EventKind<'_>> {
    if let Some(rest) = text.strip_prefix(b"Found ") {
        let (count, _) = leading_u32(rest)?;
        return Some(EventKind::DevicesFound { backend: b"Vulkan", count });
    }
    if text.starts_with(b"No devices found") {
        return Some(EventKind::DevicesFound { backend: b"Vulkan", count: 0 });
    }
    if let Some((index, rest)) = leading_u32(text) {
        if let Some(rest) = rest.strip_prefix(b" = ") {
            return Some(EventKind::VulkanDevice(vulkan_device(index, rest)));
        }
    }
    if find(text, b"device lost").is_some() || find(text, b"DeviceLost").is_some() {
        return Some(EventKind::DeviceLost { message: text });
    }
    if find(text, b"allocation").is_some() && find(text, b"failed").is_some() {
        return Some(EventKind::OutOfMemory { message: text });
    }
    None
}

fn vulkan_device(index: u32, rest: &[u8]) -> VulkanDevice<'_> {
    let mut fields = rest.split(|&b| b == b'|').map(trim);
    let head = fields.next().unwrap_or_default();
    let mut dev = VulkanDevice { index, ..VulkanDevice::default() };
    // `NAME (DRIVER)`: the driver is the last parenthesised group (names have their own parentheses).
    match (head.ends_with(b")"), call_paren(head)) {
        (true, Some(open)) if open > 0 => {
            dev.name = trim(&head[..open]);
            dev.driver = Some(&head[open + 1..head.len() - 1]);
        }
        _ => dev.name = head,
    }
    for field in fields {
        let Some(colon) = find(field, b": ") else { continue };
        let (key, value) = (&field[..colon], trim(&field[colon + 2..]));
        match key {
            b"uma" => dev.uma = yes_no(value),
            b"fp16" => dev.fp16 = yes_no(value),
            b"bf16" => dev.bf16 = yes_no(value),
            b"warp size" => dev.warp_size = leading_u32(value).map(|x| x.0),
            b"shared memory" => dev.shared_memory = leading_u64(value).map(|x| x.0),
            b"int dot" => dev.int_dot = yes_no(value),
            b"matrix cores" => dev.matrix_cores = Some(value),
            _ => {}
        }
    }
    dev
}

/// `CUDA0 (NVIDIA GeForce RTX 3090) (0000:01:00.0) - 23877 MiB free` after `using device `.
fn device_used(rest: &[u8]) -> Option<EventKind<'_>> {
    let end = rest.iter().position(|&b| b == b' ').unwrap_or(rest.len());
    let device = &rest[..end];
    let tail = &rest[end..];
    let (description, free_mib) = match find(tail, b" - ") {
        Some(dash) => (trim(&tail[..dash]), leading_u64(trim_start(&tail[dash + 3..])).map(|x| x.0)),
        None => (trim(tail), None),
    };
    Some(EventKind::DeviceUsed { device, description, free_mib })
}

/// `   CUDA0 model buffer size =  4403.50 MiB`, `CUDA0 KV buffer size`, `CUDA0 compute buffer size`,
/// `CUDA_Host  output buffer size`, older `CUDA0 buffer size` (model weights).
fn buffer_size(text: &[u8]) -> Option<EventKind<'_>> {
    let at = find(text, b"buffer size = ").or_else(|| find(text, b"buffer size ="))?;
    let head = trim(&text[..at]);
    let value = trim_start(&text[at + 13..]);
    let value = trim_start(value.strip_prefix(b"=").unwrap_or(value));
    let (mib, unit) = leading_f64(value)?;
    let mib = match trim(unit) {
        b"MiB" | b"MB" => mib,
        b"GiB" => mib * 1024.0,
        b"KiB" => mib / 1024.0,
        _ => return None,
    };
    let (device, buffer) = match head.iter().rposition(|&b| b == b' ') {
        Some(sp) => {
            let word = &head[sp + 1..];
            let buffer = match word {
                b"model" => BufferKind::Model,
                b"KV" | b"kv" => BufferKind::Kv,
                b"compute" => BufferKind::Compute,
                b"output" => BufferKind::Output,
                _ => return Some(EventKind::BufferSize { device: head, buffer: BufferKind::Model, mib }),
            };
            (trim(&head[..sp]), buffer)
        }
        None => (head, BufferKind::Model),
    };
    if device.is_empty() || device.contains(&b' ') {
        return None;
    }
    Some(EventKind::BufferSize { device, buffer, mib })
}

/// `flash_attn = auto`, `Flash Attention was auto, set to enabled`, `Flash Attention enabled`,
/// `Flash Attention not supported, set to disabled`.
fn flash_attention(text: &[u8]) -> Option<EventKind<'_>> {
    let t = trim_start(text);
    if let Some(rest) = t.strip_prefix(b"flash_attn") {
        let value = trim(trim_start(rest).strip_prefix(b"=")?);
        return Some(EventKind::FlashAttention { setting: value });
    }
    let rest = t.strip_prefix(b"Flash Attention ")?;
    let setting = match after(rest, b"set to ") {
        Some(v) => trim(v),
        None => trim(rest),
    };
    Some(EventKind::FlashAttention { setting })
}

/// `graph nodes  = 1030`, `graph splits = 2 (with bs=512), 1 (with bs=1)`, `graph: nodes = 1030,
/// splits = 2, …`, `graph (pp bs=512, tg bs=1): nodes = 1030 / 1030, splits = 2 / 2`.
fn graph(text: &[u8]) -> Option<EventKind<'_>> {
    let t = trim_start(text);
    let rest = t.strip_prefix(b"graph")?;
    let number_after = |key: &[u8]| -> Option<u64> {
        let r = after(rest, key)?;
        let r = trim_start(r);
        let r = trim_start(r.strip_prefix(b"=")?);
        leading_u64(r).map(|x| x.0)
    };
    let nodes = number_after(b"nodes");
    let splits = number_after(b"splits");
    (nodes.is_some() || splits.is_some()).then_some(EventKind::Graph { nodes, splits })
}

/// `path/file.c:123: GGML_ASSERT(cond) failed` or another `ggml_abort` message (`fatal error`).
fn abort_line<'a>(tag: &'a [u8], text: &'a [u8]) -> Option<EventKind<'a>> {
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
fn anywhere<'a>(msg: &'a [u8], marked: &Marked<'_>) -> Option<EventKind<'a>> {
    if msg.starts_with(b"Segmentation fault") || msg.starts_with(b"Aborted") {
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
    if msg.starts_with(b"[Inferior ") && msg.ends_with(b" detached]") {
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
    if HEAP_ABORTS.iter().any(|p| msg.starts_with(p)) {
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
fn assert_location(head: &[u8]) -> Option<(&[u8], u32)> {
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
fn supervisor_report(msg: &[u8]) -> Option<EventKind<'_>> {
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
fn named_abort(msg: &[u8]) -> Option<EventKind<'_>> {
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

fn driver<'a>(
    event: GpuDriverEvent,
    ring: Option<&'a [u8]>,
    (process, pid): (Option<&'a [u8]>, Option<u32>),
) -> Option<EventKind<'a>> {
    Some(EventKind::GpuDriver(GpuDriver { event, ring, process, pid, code: None }))
}

/// NVIDIA's kernel driver reports a GPU error by number (`nv_report_error` in the driver's `nvidia/` sources): `NVRM: Xid
/// (PCI:0000:01:00): 31, pid=14292, name=python, Ch 00000030, …`. Since the 470-era drivers the line names the process
/// (`pid='<unknown>', name=<unknown>` when the driver cannot tell); older ones give the number and the details only
/// (`NVRM: Xid (PCI:0000:01:00): 31, Ch 00000003, engmask 00000101, intr 10000000`).
fn nvidia_xid(msg: &[u8]) -> Option<EventKind<'_>> {
    let rest = msg.strip_prefix(b"NVRM: Xid (")?;
    let rest = after(rest, b"): ")?;
    let (code, rest) = leading_u32(rest)?;
    let pid = rest.strip_prefix(b", pid=").and_then(leading_u32).map(|x| x.0);
    let process = after(rest, b", name=")
        .map(|n| &n[..n.iter().position(|&b| b == b',').unwrap_or(n.len())])
        .filter(|n| !n.is_empty() && *n != b"<unknown>");
    Some(EventKind::GpuDriver(GpuDriver { event: GpuDriverEvent::Xid, ring: None, process, pid, code: Some(code) }))
}

/// `NAME [PID]` after Intel's `in ` (i915's `GPU HANG: …, in xdg-desktop-por [1676]`, xe's `Timedout job: … in
/// llama-bench [260404]`); xe writes `no process [-1]` for a job no process owns.
fn intel_process(s: &[u8]) -> (Option<&[u8]>, Option<u32>) {
    let Some(open) = find(s, b" [") else { return (None, None) };
    let name = &s[..open];
    let pid = leading_u32(&s[open + 2..]).filter(|(_, rest)| rest.starts_with(b"]")).map(|x| x.0);
    (Some(name).filter(|n| !n.is_empty() && *n != b"no process"), pid)
}

/// Intel's i915 and xe drivers (`i915 0000:00:02.0: [drm] …`, `xe 0000:03:00.0: [drm] Tile0: GT0: …`, FreeBSD's
/// `drmn0: [drm] …`): a hang and the process it names, an engine or chip reset.
fn intel_line(msg: &[u8]) -> Option<EventKind<'_>> {
    if let Some(rest) = after(msg, b"GPU HANG: ") {
        return driver(GpuDriverEvent::Hang, None, after(rest, b", in ").map_or((None, None), intel_process));
    }
    if let Some(rest) = after(msg, b"Timedout job: ") {
        return driver(GpuDriverEvent::Hang, None, after(rest, b" in ").map_or((None, None), intel_process));
    }
    if let Some(rest) = after(msg, b"Engine reset: engine_class=") {
        let end = rest.iter().position(|&b| b == b',' || b == b' ').unwrap_or(rest.len());
        return driver(GpuDriverEvent::ResetBegin, Some(&rest[..end]).filter(|r| !r.is_empty()), (None, None));
    }
    if let Some(rest) = after(msg, b"] Resetting ").or_else(|| after(msg, b": Resetting ")) {
        let end = rest.iter().position(|&b| b == b' ').unwrap_or(rest.len());
        let ring = Some(&rest[..end]).filter(|r| *r != b"chip" && !r.is_empty());
        return driver(GpuDriverEvent::ResetBegin, ring, (None, None));
    }
    None
}

/// A line of the kernel's amdgpu driver, or of RADV (Mesa's Vulkan driver) reporting what the kernel did to its
/// context. Shapes: `amdgpu 0000:03:00.0: amdgpu: ring comp_1.1.0 timeout, signaled seq=7, emitted seq=9` (kernel 6.x,
/// `amdgpu_job.c`), `[drm:amdgpu_job_timedout [amdgpu]] *ERROR* ring gfx_0.0.0 timeout, …` (older kernels), FreeBSD's
/// `[drm ERROR :amdgpu_job_timedout] …` and `drmn0: GPU reset begin!`.
fn gpu_driver_line(msg: &[u8]) -> Option<EventKind<'_>> {
    if msg.starts_with(b"radv/amdgpu: ") || msg.starts_with(b"amdgpu: The CS has been cancelled") {
        // RADV: the kernel reset the GPU under this process's context (`radv_amdgpu_cs.c`); the device is lost.
        return find(msg, b"context is lost").map(|_| EventKind::DeviceLost { message: trim(msg) });
    }
    let intel = msg.starts_with(b"i915 ") || msg.starts_with(b"xe ");
    if !(intel || msg.starts_with(b"amdgpu") || msg.starts_with(b"[drm") || msg.starts_with(b"drmn")) {
        return None;
    }
    if let Some(kind) = intel_line(msg) {
        return Some(kind);
    }
    if intel {
        return None;
    }
    let word_after = |needle: &[u8]| -> Option<&[u8]> {
        let rest = after(msg, needle)?;
        let end = rest.iter().position(|&b| b == b' ' || b == b',').unwrap_or(rest.len());
        Some(&rest[..end]).filter(|w| !w.is_empty())
    };
    // `process NAME pid N thread …`: NAME may be empty (`process  pid 540118`).
    let pid_after = |needle: &[u8]| -> (Option<&[u8]>, Option<u32>) {
        let Some(rest) = after(msg, needle).map(trim_start) else { return (None, None) };
        let (name, tail) = match rest.strip_prefix(b"pid ") {
            Some(tail) => (&rest[..0], tail),
            None => match find(rest, b" pid ") {
                Some(at) => (&rest[..at], &rest[at + 5..]),
                None => return (None, None),
            },
        };
        (Some(name).filter(|n| !n.is_empty()), leading_u32(tail).map(|x| x.0))
    };
    if find(msg, b" timeout, signaled seq=").is_some() {
        return driver(GpuDriverEvent::RingTimeout, word_after(b"ring "), (None, None));
    }
    if find(msg, b"Process information: process ").is_some() {
        return driver(GpuDriverEvent::Process, None, pid_after(b"Process information: process "));
    }
    if find(msg, b":  Process ").is_some() {
        return driver(GpuDriverEvent::Process, None, pid_after(b":  Process "));
    }
    if find(msg, b"page fault").is_some() {
        return driver(GpuDriverEvent::PageFault, None, pid_after(b"for process "));
    }
    if find(msg, b"PROTECTION_FAULT_STATUS").is_some() {
        return driver(GpuDriverEvent::PageFault, None, (None, None));
    }
    if find(msg, b"GPU reset begin").is_some() {
        return driver(GpuDriverEvent::ResetBegin, None, (None, None));
    }
    if let Some(ring) = after(msg, b"Starting ").filter(|r| find(r, b" ring reset").is_some()) {
        let end = ring.iter().position(|&b| b == b' ').unwrap_or(ring.len());
        return driver(GpuDriverEvent::ResetBegin, Some(&ring[..end]), (None, None));
    }
    if find(msg, b"reset").is_some() && find(msg, b"succeeded").is_some() {
        return driver(GpuDriverEvent::ResetSucceeded, word_after(b"Ring "), (None, None));
    }
    if find(msg, b"reset").is_some() && find(msg, b"failed").is_some() {
        return driver(GpuDriverEvent::ResetFailed, word_after(b"Ring "), (None, None));
    }
    if find(msg, b"coredump").is_some() {
        return driver(GpuDriverEvent::Coredump, None, (None, None));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(line: &str) -> EventKind<'_> {
        classify(line.as_bytes(), &mut Context::default()).kind
    }

    /// A whole line as the parser sees it: its outer prefixes (llama.cpp's time and level) stripped first.
    fn kind_of_line(line: &str) -> EventKind<'_> {
        classify(crate::prefix::strip(line.as_bytes()).message, &mut Context::default()).kind
    }

    #[test]
    fn a_port_in_use_is_a_bind_failure() {
        // llama-server 11434 started on a port another process listens on (run on this project's machine; the
        // line is printed at L tools/server/server-http.cpp:517).
        let line =
            "0.00.160.307 E srv         start: couldn't bind HTTP server socket, hostname: 127.0.0.1, port: 40503";
        assert_eq!(
            kind_of_line(line),
            EventKind::BindFailed { message: b"couldn't bind HTTP server socket, hostname: 127.0.0.1, port: 40503" }
        );
        assert!(!kind_of_line(line).is_fatal(), "the logs command's crash analysis is unchanged");
        assert_eq!(kind_of_line(line).name(), "bind_failed");
        // `ollama serve` while another server holds its port (ollama/ollama issue 707), and the message without
        // llama-server's module and function.
        let go = "Error: listen tcp 127.0.0.1:11434: bind: address already in use";
        assert!(matches!(kind_of_line(go), EventKind::BindFailed { .. }), "{:?}", kind_of_line(go));
        assert!(matches!(kind_of_line("couldn't bind HTTP server socket"), EventKind::BindFailed { .. }));
        // The older form, printed by llama-server's `main`.
        let main = "main: couldn't bind HTTP server socket, hostname: 127.0.0.1, port: 8080";
        assert!(matches!(kind_of_line(main), EventKind::BindFailed { .. }), "{:?}", kind_of_line(main));
    }

    #[test]
    fn a_skipped_duplicate_device_is_not_a_device_used() {
        // The line llama.cpp 11434 prints for a second device with the same id (L src/llama.cpp:248); the device it
        // names as used had its own `using device` line before.
        let skipped = "llama_model_load_from_file_impl: skipping device Vulkan1 (AMD Radeon RX 7900 XTX (RADV NAVI31)) \
                       with id 0000:03:00.0 - already using device Vulkan0 (AMD Radeon RX 7900 XTX (RADV NAVI31)) with the same id";
        assert!(!matches!(kind_of_line(skipped), EventKind::DeviceUsed { .. }), "{:?}", kind_of_line(skipped));
        let used = "0.00.020.000 I llama_model_load_from_file_impl: using device Vulkan0 (llvmpipe (LLVM 15.0.6, 256 bits)) (unknown id) - 7927 MiB free";
        assert!(matches!(kind_of_line(used), EventKind::DeviceUsed { device: b"Vulkan0", free_mib: Some(7927), .. }));
    }

    #[test]
    fn devices_from_issue_lines() {
        // ollama/ollama issue 9807.
        let EventKind::GpuDevice(d) = kind("  Device 0: Radeon RX 580 Series, gfx803 (0x803), VMM: no, Wave Size: 64")
        else {
            panic!()
        };
        assert_eq!(
            (d.name, d.arch, d.vmm, d.wave_size),
            (&b"Radeon RX 580 Series"[..], Some(&b"gfx803"[..]), Some(false), Some(64))
        );
        // ollama/ollama issue 8377.
        let EventKind::GpuDevice(d) = kind("  Device 1: NVIDIA GeForce RTX 4060 Ti, compute capability 8.9, VMM: yes")
        else {
            panic!()
        };
        assert_eq!((d.index, d.compute_capability, d.vmm), (1, Some(&b"8.9"[..]), Some(true)));
        // ggml-org/llama.cpp issue 17334.
        let EventKind::VulkanDevice(v) = kind("ggml_vulkan: 0 = Intel(R) Iris(R) Xe Graphics (ADL GT2) (Intel open-source Mesa driver) | uma: 1 | fp16: 1 | bf16: 0 | warp size: 32 | shared memory: 65536 | int dot: 1 | matrix cores: none") else {
            panic!()
        };
        assert_eq!(v.name, b"Intel(R) Iris(R) Xe Graphics (ADL GT2)");
        assert_eq!(v.driver, Some(&b"Intel open-source Mesa driver"[..]));
        assert_eq!((v.uma, v.fp16, v.warp_size, v.int_dot), (Some(true), Some(true), Some(32), Some(true)));
        assert_eq!(v.matrix_cores, Some(&b"none"[..]));
    }

    #[test]
    fn go_crash_lines() {
        // ollama/ollama issue 9352.
        assert_eq!(
            kind("SIGSEGV: segmentation violation"),
            EventKind::Signal { signal: b"SIGSEGV", description: b"segmentation violation" }
        );
        assert_eq!(
            kind("PC=0x7f27a8e24c47 m=0 sigcode=1 addr=0x206a03fb4"),
            EventKind::SignalContext { pc: Some(b"0x7f27a8e24c47"), addr: Some(b"0x206a03fb4"), sigcode: Some(b"1") }
        );
        assert_eq!(
            kind("//ml/backend/ggml/ggml/src/ggml-cpu/ggml-cpu.c:8456: GGML_ASSERT(i01 >= 0 && i01 < ne01) failed"),
            EventKind::GgmlAssert {
                file: b"//ml/backend/ggml/ggml/src/ggml-cpu/ggml-cpu.c",
                line: 8456,
                condition: b"i01 >= 0 && i01 < ne01"
            }
        );
        let mut ctx = Context::default();
        let g = classify(b"goroutine 29 gp=0xc000585dc0 m=0 mp=0x64b1b235c780 [syscall]:", &mut ctx).kind;
        assert_eq!(g, EventKind::Goroutine { id: 29, state: b"syscall" });
        assert!(ctx.in_go_trace);
        let f = classify(
            b"github.com/ollama/ollama/llama.(*Context).Decode.func1(0x64b1b0cd248b?, 0x7f2778ad5c10?)",
            &mut ctx,
        );
        assert_eq!(f.kind, EventKind::GoFrame { function: b"github.com/ollama/ollama/llama.(*Context).Decode.func1" });
        let s = classify(b"        github.com/ollama/ollama/llama/llama.go:163 +0xf5 fp=0xc0000bfc90 sp=0xc0000bfba0 pc=0x64b1b0cb6295", &mut ctx);
        assert_eq!(s.kind, EventKind::GoFrameSource { file: b"github.com/ollama/ollama/llama/llama.go", line: 163 });
        let r = classify(b"rax    0x0", &mut ctx);
        assert_eq!(r.kind, EventKind::GoTraceDetail);
        let out = classify(b"time=2025-02-26T00:25:18.930Z level=INFO source=server.go:596 msg=\"llama runner started in 1.26 seconds\"", &mut ctx);
        assert_eq!(out.kind, EventKind::RunnerStarted { seconds: 1.26 });
        assert!(!ctx.in_go_trace);
    }

    #[test]
    fn slog_and_gin_lines() {
        // ollama/ollama issue 15762.
        let c = classify(br#"time=2026-04-23T01:57:05.334Z level=INFO source=runner.go:464 msg="failure during GPU discovery" OLLAMA_LIBRARY_PATH="[/usr/local/lib/ollama /usr/local/lib/ollama/rocm]" extra_envs="map[GGML_CUDA_INIT:1 ROCR_VISIBLE_DEVICES:0]" error="runner crashed""#, &mut Context::default());
        assert_eq!(c.kind, EventKind::DiscoveryFailure { error: Some(b"runner crashed"), detail: None });
        assert!(c.time.is_some());
        // ollama/ollama issue 14983.
        let c = classify(
            br#"[GIN] 2026/03/20 - 16:36:39 | 500 |  3.428625625s |       127.0.0.1 | POST     "/api/chat""#,
            &mut Context::default(),
        );
        assert_eq!(
            c.kind,
            EventKind::HttpRequest { status: 500, method: b"POST", path: b"/api/chat", latency: Some(b"3.428625625s") }
        );
        let bad = classify(b"time=2026-99-20T16:36:39Z level=INFO msg=x", &mut Context::default());
        assert!(bad.bad_timestamp && bad.time.is_none());
    }

    #[test]
    fn ollama_runner_end_and_unsupported_gpu() {
        // The format Ollama v0.30+ logs when llama-server dies (llm/llama_server.go, quoted in the
        // project's dispatch notes): the error names the signal.
        let c = classify(br#"time=2026-08-29T08:50:00.000Z level=ERROR source=llama_server.go:1023 msg="llama-server terminated" error="signal: segmentation fault" exit=unknown"#, &mut Context::default());
        assert_eq!(c.kind, EventKind::RunnerTerminated { error: b"signal: segmentation fault" });
        // likelovewant/ollama-for-amd issue 40 (Ollama's amd_windows.go in a fork build).
        let c = classify(br#"time=2025-01-23T16:42:09.019+01:00 level=WARN source=amd_windows.go:140 msg="amdgpu is not supported (supported types:[gfx1103])" gpu_type=gfx1150 gpu=0 library=C:\llm\windows-amd64\lib\ollama"#, &mut Context::default());
        let EventKind::UnsupportedGpu { gpu, supported, .. } = c.kind else { panic!("{:?}", c.kind) };
        assert_eq!((gpu, supported), (Some(&b"gfx1150"[..]), Some(&b"[gfx1103]"[..])));
    }

    #[test]
    fn blas_and_gpu_errors() {
        // brknsoul/ROCmLibs issue 4 and ollama/ollama issue 11555.
        let k = kind(
            r"rocBLAS error: Cannot read C:\Program Files\AMD\ROCm\6.1\bin\/rocblas/library/TensileLibrary.dat: No such file or directory for GPU arch : gfx1103",
        );
        let EventKind::BlasError { library, arch, .. } = k else { panic!() };
        assert_eq!((library, arch), (&b"rocBLAS"[..], Some(&b"gfx1103"[..])));
        let k = kind("rocblaslt error: Cannot read /usr/local/lib/ollama/rocm/hipblaslt/library/TensileLibrary_lazy_gfx1201.dat: No such file or directory");
        let EventKind::BlasError { arch, .. } = k else { panic!() };
        assert_eq!(arch, Some(&b"gfx1201"[..]));
        assert_eq!(kind("CUDA error: out of memory"), EventKind::GpuError { api: b"CUDA", message: b"out of memory" });
        assert_eq!(
            kind("  current device: 0, in function ggml_backend_cuda_synchronize at ggml-cuda.cu:2508"),
            EventKind::GpuErrorLocation {
                device: Some(0),
                function: b"ggml_backend_cuda_synchronize",
                file: b"ggml-cuda.cu",
                line: 2508
            }
        );
        assert_eq!(
            kind("  what():  vk::Queue::submit: ErrorDeviceLost"),
            EventKind::DeviceLost { message: b"vk::Queue::submit: ErrorDeviceLost" }
        );
    }

    #[test]
    fn native_frames() {
        // ollama/ollama issue 9509 (glibc backtrace_symbols).
        let EventKind::NativeFrame(f) = kind("/usr/bin/ollama(+0x10e4c9e)[0x563e50bacc9e]") else { panic!() };
        assert_eq!((f.module, f.symbol), (Some(&b"/usr/bin/ollama"[..]), None));
        let EventKind::NativeFrame(f) = kind("/usr/lib/ollama/libggml-base.so(ggml_abort+0x15e)[0x7f30a0e0300b]")
        else {
            panic!()
        };
        assert_eq!(f.symbol, Some(&b"ggml_abort"[..]));
        let EventKind::NativeFrame(f) =
            kind("#3  0x00007ffff7c42476 in __GI_raise (sig=sig@entry=6) at ../sysdeps/posix/raise.c:26")
        else {
            panic!()
        };
        assert_eq!((f.index, f.symbol), (Some(3), Some(&b"__GI_raise"[..])));
    }

    #[test]
    fn llama_lines() {
        assert_eq!(
            kind("load_backend: loaded ROCm backend from /usr/lib/ollama/libggml-hip.so"),
            EventKind::BackendLoaded { backend: b"ROCm", path: b"/usr/lib/ollama/libggml-hip.so" }
        );
        assert_eq!(
            kind("load_tensors: offloaded 23/23 layers to GPU"),
            EventKind::LayersOffloaded { offloaded: 23, total: 23 }
        );
        assert_eq!(
            kind("load_tensors:   CPU_Mapped model buffer size =    35.16 MiB"),
            EventKind::BufferSize { device: b"CPU_Mapped", buffer: BufferKind::Model, mib: 35.16 }
        );
        assert_eq!(
            kind("llama_kv_cache_init:      CUDA0 KV buffer size = 10240.00 MiB"),
            EventKind::BufferSize { device: b"CUDA0", buffer: BufferKind::Kv, mib: 10240.0 }
        );
        assert_eq!(
            kind("llm_load_tensors:      CUDA0 buffer size =  4403.50 MiB"),
            EventKind::BufferSize { device: b"CUDA0", buffer: BufferKind::Model, mib: 4403.5 }
        );
        assert_eq!(
            kind("llama_new_context_with_model: graph splits = 2"),
            EventKind::Graph { nodes: None, splits: Some(2) }
        );
        assert_eq!(kind("llama_new_context_with_model: flash_attn = 0"), EventKind::FlashAttention { setting: b"0" });
        assert_eq!(
            kind("llama.cpp:11968: The current context does not support K-shift"),
            EventKind::Abort {
                file: b"llama.cpp",
                line: 11968,
                message: b"The current context does not support K-shift"
            }
        );
        assert_eq!(kind("print_info: n_vocab          = 32000"), EventKind::Other);
    }

    #[test]
    fn glibc_backtrace_symbols_frames_wherever_they_start() {
        // ggml-org/llama.cpp#21724 (comment by SteelPh0enix, 2026-05-08): ggml_print_backtrace in glibc's
        // backtrace_symbols form, a space before the address; the router's `[pid] ` is stripped as a prefix, a paste may
        // keep other words before the path.
        let lines = [
            ("/nix/store/s2jab8bjlxc1h503ylkjcs8y4b52p1m3-llama-cpp-mpi-vulkan-4.2.0/lib/libggml-base.so.0(ggml_print_backtrace+0x204) [0x752379951c64]",
             "/nix/store/s2jab8bjlxc1h503ylkjcs8y4b52p1m3-llama-cpp-mpi-vulkan-4.2.0/lib/libggml-base.so.0", Some("ggml_print_backtrace")),
            ("/nix/store/si4q3zks5mn5jhzzyri9hhd3cv789vlm-gcc-15.2.0-lib/lib/libstdc++.so.6(_ZSt10unexpectedv+0x0) [0x752378cb286e]",
             "/nix/store/si4q3zks5mn5jhzzyri9hhd3cv789vlm-gcc-15.2.0-lib/lib/libstdc++.so.6", Some("_ZSt10unexpectedv")),
            ("libggml-vulkan.so.0(+0xa12ca) [0x7f0c2a4a12ca]", "libggml-vulkan.so.0", None),
            ("pasted: libggml-base.so.0(ggml_backend_sched_graph_compute_async+0x92c)[0x7f0c2b1e492c]",
             "libggml-base.so.0", Some("ggml_backend_sched_graph_compute_async")),
        ];
        for (line, module, symbol) in lines {
            match kind(line) {
                EventKind::NativeFrame(f) => {
                    assert_eq!(f.module, Some(module.as_bytes()), "{line}");
                    assert_eq!(f.symbol, symbol.map(str::as_bytes), "{line}");
                }
                other => panic!("{line}: {other:?}"),
            }
        }
        // A bracket that is no address, a call without a module: not frames.
        assert!(!matches!(kind("see foo(bar) [0xzz]"), EventKind::NativeFrame(_)));
        assert!(!matches!(kind("(sym+0x1) [0x7f00]"), EventKind::NativeFrame(_)));
    }

    #[test]
    fn lldb_frames() {
        // The form lldb's `bt` prints on macOS (a Metal build of llama.cpp aborting through ggml_abort).
        let frame = |line: &str| match kind(line) {
            EventKind::NativeFrame(f) => (f.index, f.module.map(|m| m.to_vec()), f.symbol.map(|s| s.to_vec())),
            other => panic!("{line}: {other:?}"),
        };
        assert_eq!(
            frame("  * frame #0: 0x000000018e2a1388 libsystem_kernel.dylib`__pthread_kill + 8"),
            (Some(0), Some(b"libsystem_kernel.dylib".to_vec()), Some(b"__pthread_kill".to_vec()))
        );
        assert_eq!(
            frame("frame #4: 0x0000000100b5c2e0 libggml-base.dylib`ggml_abort + 156"),
            (Some(4), Some(b"libggml-base.dylib".to_vec()), Some(b"ggml_abort".to_vec()))
        );
        assert!(!matches!(kind("frame #x: not a frame"), EventKind::NativeFrame(_)));
    }

    #[test]
    fn go_dump_lines_outside_a_dump() {
        // ollama/ollama#11420 (a journal fragment that starts mid register dump) and ollama/ollama#12137 (one that starts
        // mid goroutine dump, without the signal header).
        assert_eq!(kind("rip    0x7f98b88abe4b"), EventKind::RegisterDump);
        assert_eq!(kind("rflags 0x246"), EventKind::RegisterDump);
        assert_eq!(kind("r15    0x7ffcd56fdc28"), EventKind::RegisterDump);
        assert_eq!(kind("r29    0x16d2e6f90"), EventKind::RegisterDump);
        for prose in ["id 0x1234", "rax is 0x0", "r30    0x1", "rax    0x12 0x34", "rip    0x"] {
            assert!(!matches!(kind(prose), EventKind::RegisterDump), "{prose}");
        }
        let mut ctx = Context::default();
        let source = "        github.com/ollama/ollama/runner/llamarunner/runner.go:880 +0x28 fp=0xc0001247e0 sp=0xc0001247b8 pc=0x55ed7980d108";
        assert!(matches!(classify(source.as_bytes(), &mut ctx).kind, EventKind::GoFrameSource { line: 880, .. }));
        assert!(ctx.in_go_trace, "the lines after it are the dump's");
        assert_eq!(
            classify(b"github.com/ollama/ollama/runner/llamarunner.Execute.gowrap1()", &mut ctx).kind,
            EventKind::GoFrame { function: b"github.com/ollama/ollama/runner/llamarunner.Execute.gowrap1" }
        );
        assert_eq!(
            kind("created by github.com/ollama/ollama/runner/llamarunner.Execute in goroutine 1"),
            EventKind::GoCreatedBy { function: b"github.com/ollama/ollama/runner/llamarunner.Execute" }
        );
        assert!(!matches!(kind("created by the team in goroutine 5"), EventKind::GoCreatedBy { .. }));
        // An indented line without a frame's `+0x` offset is not read as one outside a dump.
        assert!(!matches!(kind("    see runner.go:880 for details"), EventKind::GoFrameSource { .. }));
    }

    #[test]
    fn markdown_linked_go_frames() {
        // The shape GitHub gives a Go frame pasted outside a code block (issue 28's tester: `[github.com/…/ggml._Cfunc_…](https://…)`).
        let frame = "[github.com/ollama/ollama/ml/backend/ggml._Cfunc_ggml_backend_sched_graph_compute_async](https://github.com/ollama/ollama/ml/backend/ggml._Cfunc_ggml_backend_sched_graph_compute_async)(0x7f0c2c000b70, 0xc0004c6000)";
        assert_eq!(
            kind(frame),
            EventKind::GoFrame {
                function: b"github.com/ollama/ollama/ml/backend/ggml._Cfunc_ggml_backend_sched_graph_compute_async"
            }
        );
        let mut ctx = Context { in_go_trace: true, ..Context::default() };
        let source = "\t[github.com/ollama/ollama/ml/backend/ggml/ggml.go:655](https://github.com/ollama/ollama/ml/backend/ggml/ggml.go:655) +0x1a5 fp=0xc";
        assert!(matches!(classify(source.as_bytes(), &mut ctx).kind, EventKind::GoFrameSource { line: 655, .. }));
        assert!(!matches!(kind("[a link](https://example.com)(and text)"), EventKind::GoFrame { .. }));
    }

    #[test]
    fn windows_exceptions_and_prose() {
        // NawfalMotii79/PLFM_RADAR#72: Ollama's Go runtime on Windows.
        assert_eq!(
            kind("Exception 0xc0000005 0x8 0x7ffa191bcb12 0x7ffa191bcb12"),
            EventKind::Signal { signal: b"Exception 0xc0000005", description: b"0x8 0x7ffa191bcb12 0x7ffa191bcb12" }
        );
        // A reporter's sentence in the paste (issue 28's tester) is no runtime line.
        assert_eq!(kind("Exception 0xe06d7363 is a C++ exception thrown by MSVC code."), EventKind::Other);
    }

    #[test]
    fn amdgpu_kernel_lines() {
        fn driver(line: &str) -> GpuDriver<'_> {
            match kind(line) {
                EventKind::GpuDriver(d) => d,
                other => panic!("{line}: {other:?}"),
            }
        }
        // ROCm/legacy-rocm-build#6127 (kernel 6.x form).
        let d = driver("amdgpu 0000:03:00.0: amdgpu: ring comp_1.1.0 timeout, signaled seq=7, emitted seq=9");
        assert_eq!((d.event, d.ring), (GpuDriverEvent::RingTimeout, Some(&b"comp_1.1.0"[..])));
        let d = driver("amdgpu 0000:03:00.0: amdgpu:  Process gst-plugin-scan pid 4087 thread gst-plugin:cs0 pid 4213");
        assert_eq!((d.event, d.process, d.pid), (GpuDriverEvent::Process, Some(&b"gst-plugin-scan"[..]), Some(4087)));
        assert_eq!(
            driver("amdgpu 0000:03:00.0: amdgpu: Ring comp_1.1.0 reset succeeded").event,
            GpuDriverEvent::ResetSucceeded
        );
        let d = driver("amdgpu 0000:03:00.0: amdgpu: [gfxhub] page fault (src_id:0 ring:32 vmid:0 pasid:0)");
        assert_eq!((d.event, d.pid), (GpuDriverEvent::PageFault, None));
        assert_eq!(
            driver("amdgpu 0000:03:00.0: amdgpu: [drm] Check your /sys/class/drm/card1/device/devcoredump/data").event,
            GpuDriverEvent::Coredump
        );
        // pop-os/cosmic-comp#2626 (older kernels: the function tag and *ERROR*).
        let d = driver("[drm:amdgpu_job_timedout [amdgpu]] *ERROR* ring gfx_0.0.0 timeout, signaled seq=5000163, emitted seq=5000165");
        assert_eq!((d.event, d.ring), (GpuDriverEvent::RingTimeout, Some(&b"gfx_0.0.0"[..])));
        let d = driver("[drm:amdgpu_job_timedout [amdgpu]] *ERROR* Process information: process cosmic-comp pid 3503 thread cosmic-com:cs0 pid 3539");
        assert_eq!((d.process, d.pid), (Some(&b"cosmic-comp"[..]), Some(3503)));
        assert_eq!(driver("amdgpu 0000:08:00.0: amdgpu: GPU reset begin!").event, GpuDriverEvent::ResetBegin);
        assert_eq!(
            driver("amdgpu 0000:08:00.0: amdgpu: GPU reset succeeded, trying to resume").event,
            GpuDriverEvent::ResetSucceeded
        );
        // freebsd/drm-kmod#387: an unnamed process.
        let d = driver("[drm ERROR :amdgpu_job_timedout] Process information: process  pid 540118 thread  pid 540118");
        assert_eq!((d.process, d.pid), (None, Some(540118)));
        // GPUOpen-Drivers/AMDVLK#91: the faulting process in the page-fault line.
        let d = driver("amdgpu 0000:02:00.0: [gfxhub] no-retry page fault (src_id:0 ring:158 vmid:2 pasid:32774, for process vulkan-smoketes pid 28192 thread vulkan-smoketes pid 28192)");
        assert_eq!(
            (d.event, d.process, d.pid),
            (GpuDriverEvent::PageFault, Some(&b"vulkan-smoketes"[..]), Some(28192))
        );
        assert_eq!(
            driver("amdgpu 0000:02:00.0: VM_L2_PROTECTION_FAULT_STATUS:0x0020153C").event,
            GpuDriverEvent::PageFault
        );
        // Other amdgpu lines are not GPU failures.
        assert_eq!(kind("amdgpu 0000:c2:00.0: Dumping IP State"), EventKind::Other);
        // lemonade-sdk/lemonade#2180 and llama.cpp#21724: RADV's word that the kernel reset its context.
        assert!(matches!(
            kind("radv/amdgpu: The CS has been cancelled because the context is lost. This context is innocent."),
            EventKind::DeviceLost { .. }
        ));
    }

    #[test]
    fn nvidia_xid_and_intel_hang_lines() {
        fn driver(line: &str) -> GpuDriver<'_> {
            match kind(line) {
                EventKind::GpuDriver(d) => d,
                other => panic!("{line}: {other:?}"),
            }
        }
        let who =
            |d: GpuDriver<'_>| (d.event, d.code, d.process.map(|p| String::from_utf8_lossy(p).into_owned()), d.pid);
        // tinygrad/tinygrad#6947 (dmesg, driver 535): an MMU fault with the process named.
        let d = driver("NVRM: Xid (PCI:0000:01:00): 31, pid=14292, name=python, Ch 00000030, intr 00000000. MMU Fault: ENGINE HOST0 HUBCLIENT_ESC faulted @ 0x10_00200000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ");
        assert_eq!(who(d), (GpuDriverEvent::Xid, Some(31), Some("python".into()), Some(14292)));
        // leptonai/gpud#46: the driver could not tell the process; then a context-switch timeout that names it.
        let d = driver("NVRM: Xid (PCI:0000:cb:00): 13, pid='<unknown>', name=<unknown>, Graphics SM Warp Exception on (GPC 7, TPC 7, SM 0): Illegal Instruction Parameter");
        assert_eq!(who(d), (GpuDriverEvent::Xid, Some(13), None, None));
        let d = driver("NVRM: Xid (PCI:0000:cb:00): 109, pid=1797828, name=pt_main_thread, Ch 00000008, errorString CTX SWITCH TIMEOUT, Info 0x58005");
        assert_eq!(who(d), (GpuDriverEvent::Xid, Some(109), Some("pt_main_thread".into()), Some(1797828)));
        // NVIDIA/open-gpu-kernel-modules#1150.
        let d =
            driver("NVRM: Xid (PCI:0000:dc:00): 45, pid=1818990, name=python3, Ch 00000001 caused by previous Xid 149");
        assert_eq!(who(d), (GpuDriverEvent::Xid, Some(45), Some("python3".into()), Some(1818990)));
        // Bumblebee-Project/Bumblebee#677 (an old driver: no process).
        let d = driver("NVRM: Xid (PCI:0000:01:00): 31, Ch 00000003, engmask 00000101, intr 10000000");
        assert_eq!(who(d), (GpuDriverEvent::Xid, Some(31), None, None));
        // Other NVRM lines are not failures.
        assert_eq!(kind("NVRM: GPU at PCI:0000:01:00: GPU-af4f89ae-d08b-1b53-9938-c9ed209a3513"), EventKind::Other);

        // clearlinux/distribution#2907 (i915 with GuC) and freebsd/drm-kmod#509 (the same driver on FreeBSD).
        let d = driver("i915 0000:00:02.0: [drm] GPU HANG: ecode 12:1:0020fffe, in xdg-desktop-por [1676]");
        assert_eq!(who(d), (GpuDriverEvent::Hang, None, Some("xdg-desktop-por".into()), Some(1676)));
        let d = driver("drmn0: [drm] GPU HANG: ecode 9:1:85d7bfff, in MainThread [101714]");
        assert_eq!(who(d), (GpuDriverEvent::Hang, None, Some("MainThread".into()), Some(101714)));
        let d = driver("drmn0: [drm] Resetting rcs0 for preemption time out");
        assert_eq!((d.event, d.ring), (GpuDriverEvent::ResetBegin, Some(&b"rcs0"[..])));
        let d = driver("i915 0000:00:02.0: [drm] Resetting chip for GuC failed to reset engine mask=0x1");
        assert_eq!((d.event, d.ring), (GpuDriverEvent::ResetBegin, None));
        // intel/gvt-linux#137 (before the [drm] tag).
        let d = driver("i915 0000:00:02.0: Resetting rcs0 for hang on rcs0");
        assert_eq!((d.event, d.ring), (GpuDriverEvent::ResetBegin, Some(&b"rcs0"[..])));
        // FreeBSDDesktop/DEPRECATED-freebsd-base-graphics#2 (an old i915: no process).
        let d = driver("[drm] GPU HANG: ecode 7:0:0x87c3ffff, reason: Ring hung, action: reset");
        assert_eq!(who(d), (GpuDriverEvent::Hang, None, None, None));
        // xe: intel/compute-runtime#962 (an engine reset), and the lines drm/xe issue 4856 quotes (Matthew Auld's
        // xe_gpu_scheduler.h fix on stable@vger.kernel.org): a timed-out job no process owns.
        let d = driver("xe 0000:09:00.0: [drm] GT0: Engine reset: engine_class=ccs, logical_mask: 0x1, guc_id=2");
        assert_eq!((d.event, d.ring), (GpuDriverEvent::ResetBegin, Some(&b"ccs"[..])));
        let d = driver("xe 0000:00:02.0: [drm] GT0: Timedout job: seqno=24496, lrc_seqno=24496, guc_id=0, flags=0x13 in no process [-1]");
        assert_eq!(who(d), (GpuDriverEvent::Hang, None, None, None));
        // The process form of the same line (`xe_guc_submit.c`: `… flags=0x%lx in %s [%d]`).
        let d = driver("xe 0000:03:00.0: [drm] Tile0: GT0: Timedout job: seqno=7811, lrc_seqno=7811, guc_id=6, flags=0x20 in llama-server [318738]");
        assert_eq!(who(d), (GpuDriverEvent::Hang, None, Some("llama-server".into()), Some(318738)));
        // Other Intel lines are not failures.
        assert_eq!(kind("i915 0000:00:02.0: [drm] GT0: GUC: SLPC enabled"), EventKind::Other);
        assert_eq!(kind("xe 0000:00:02.0: [drm] fb0: xedrmfb frame buffer device"), EventKind::Other);
    }

    #[test]
    fn a_backend_without_devices_and_named_aborts() {
        // ggml-cuda.cu ggml_cuda_init prints this when cudaGetDeviceCount fails; the runtime goes on without CUDA.
        assert_eq!(
            kind("ggml_cuda_init: failed to initialize CUDA: no CUDA-capable device is detected"),
            EventKind::DevicesFound { backend: b"CUDA", count: 0 }
        );
        // LM Studio's engine log names a ggml_abort's file and line (the shape issue 28 names).
        assert_eq!(
            kind("[2025-05-01 10:00:00][ERROR] llama.cpp abort:97: GGML_ASSERT(n_tokens > 0) failed"),
            EventKind::GgmlAssert { file: b"llama.cpp", line: 97, condition: b"n_tokens > 0" }
        );
        assert!(matches!(kind("x llama.cpp abort:97: out of slots"), EventKind::Abort { line: 97, .. }));
        assert!(!matches!(kind("we abort: 3 times"), EventKind::Abort { .. }));
    }
}
