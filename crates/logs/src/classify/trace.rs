//! Go and native stack traces: goroutine dumps, their frames and registers, native backtrace frames in the forms
//! glibc, ggml, Windows, sanitizers and Python print.

use crate::event::{EventKind, NativeFrame};

use super::classified::{Classified, Context};
use super::text::{after, find, leading_u32, leading_u64, trim, trim_start};

/// Lines that only make sense inside a trace; ends the trace state on anything else.
#[inline]
pub(super) fn trace_line<'a>(msg: &'a [u8], ctx: &mut Context) -> Option<Classified<'a>> {
    if !(ctx.in_go_trace || ctx.in_native_trace) {
        return None;
    }
    in_trace(msg, ctx)
}

/// [`trace_line`] inside a trace.
fn in_trace<'a>(msg: &'a [u8], ctx: &mut Context) -> Option<Classified<'a>> {
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

pub(super) fn go_trace_line(msg: &[u8]) -> Option<EventKind<'_>> {
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
pub(super) fn headerless_go_line(msg: &[u8]) -> Option<EventKind<'_>> {
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
pub(super) fn markdown_link(s: &[u8]) -> Option<(&[u8], &[u8])> {
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
pub(super) fn goroutine(msg: &[u8]) -> Option<EventKind<'_>> {
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
pub(super) fn go_source(s: &[u8]) -> Option<EventKind<'_>> {
    let loc = match markdown_link(s) {
        Some((text, _)) => text,
        // A frame's file path runs for tens of bytes before its space: `memchr` jumps there.
        None => &s[..memchr::memchr(b' ', s).unwrap_or(s.len())],
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
pub(super) fn go_function(msg: &[u8]) -> Option<&[u8]> {
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
pub(super) fn call_paren(s: &[u8]) -> Option<usize> {
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
pub(super) fn is_register(msg: &[u8]) -> bool {
    let name_len = msg.iter().take_while(|b| b.is_ascii_alphanumeric()).count();
    if name_len == 0 || name_len > 6 {
        return false;
    }
    let rest = trim_start(&msg[name_len..]);
    rest.len() < msg.len() - name_len && rest.starts_with(b"0x") && !rest.contains(&b' ')
}

/// Registers the Go runtime prints after a fatal signal (`runtime/signal_amd64.go` `dumpregs`, and arm64's `r0`…
/// `r29`, `lr`, `sp`, `pc`, `fault`), arm64's numbered ones apart.
fn is_register_name(name: &[u8]) -> bool {
    matches!(
        name,
        b"rax"
            | b"rbx"
            | b"rcx"
            | b"rdx"
            | b"rdi"
            | b"rsi"
            | b"rbp"
            | b"rsp"
            | b"r8"
            | b"r9"
            | b"r10"
            | b"r11"
            | b"r12"
            | b"r13"
            | b"r14"
            | b"r15"
            | b"rip"
            | b"rflags"
            | b"cs"
            | b"fs"
            | b"gs"
            | b"lr"
            | b"sp"
            | b"pc"
            | b"fault"
    )
}

/// A register line of a Go crash dump read outside a goroutine dump: a register the runtime prints, spaces, and a
/// hexadecimal value that ends the line (`rax    0x0`).
#[inline]
pub(super) fn go_register(msg: &[u8]) -> bool {
    // The first two bytes of every register's name (arm64's numbered ones are `r` and digits) tell most lines apart
    // without a call: `llama_…`, `load_…`, `slot …`, `srv …` and `print_info` begin as no register does.
    let plausible = match msg {
        [b'r', second, ..] => matches!(second, b'a' | b'b' | b'c' | b'd' | b's' | b'i' | b'f' | b'0'..=b'9'),
        [b'c' | b'g', b's', ..] | [b'f', b's' | b'a', ..] | [b'l', b'r', ..] | [b's', b'p', ..] | [b'p', b'c', ..] => {
            true
        }
        _ => false,
    };
    plausible && register_line(msg)
}

/// [`go_register`] past its first two bytes: a name of up to six bytes, white space, and the value.
fn register_line(msg: &[u8]) -> bool {
    // The value is separated from the name by white space.
    let mut name_len = 1;
    while name_len < 7 && msg.get(name_len).is_some_and(u8::is_ascii_alphanumeric) {
        name_len += 1;
    }
    if name_len > 6 || !msg.get(name_len).is_some_and(u8::is_ascii_whitespace) {
        return false;
    }
    let name = &msg[..name_len];
    let arm = name.len() <= 3
        && name.first() == Some(&b'r')
        && name.len() > 1
        && name[1..].iter().all(u8::is_ascii_digit)
        && leading_u32(&name[1..]).is_some_and(|(n, _)| n <= 29);
    if !(is_register_name(name) || arm) {
        return false;
    }
    let value = trim_start(&msg[name_len..]);
    value.len() < msg.len() - name_len
        && value.strip_prefix(b"0x").is_some_and(|hex| !hex.is_empty() && hex.iter().all(u8::is_ascii_hexdigit))
}

/// A native backtrace frame in one of the forms `ggml_print_backtrace` produces.
pub(super) fn native_frame(msg: &[u8]) -> Option<NativeFrame<'_>> {
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

/// A frame of a Python traceback: `File "koboldcpp.py", line 351, in load_model` (the module is the `.py` file).
pub(super) fn python_frame(s: &[u8]) -> Option<NativeFrame<'_>> {
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

/// A compute-sanitizer host frame: `Host Frame: ggml_cuda_cpy(…) in cpy.cu:612 [0x59421a8] in koboldcpp_cublas.so`,
/// or the older `Host Frame:main [0x3c9ae]` (its module on the next line).
pub(super) fn sanitizer_frame(rest: &[u8]) -> Option<NativeFrame<'_>> {
    let rest = trim_start(rest);
    let addr = find(rest, b" [0x").unwrap_or(rest.len());
    let head = &rest[..addr];
    // The symbol ends at its argument list or at ` in FILE:LINE`.
    let paren = call_paren(head).unwrap_or(head.len());
    let symbol = trim(&head[..find(&head[..paren], b" in ").unwrap_or(paren)]);
    let module = rest[addr..].rsplit(|&b| b == b' ').next().filter(|_| find(&rest[addr..], b"] in ").is_some());
    (!symbol.is_empty()).then_some(NativeFrame { index: None, module, symbol: Some(symbol) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_register_passes_the_two_byte_test() {
        let names = [
            "rax", "rbx", "rcx", "rdx", "rdi", "rsi", "rbp", "rsp", "r8", "r9", "r10", "r11", "r12", "r13", "r14",
            "r15", "rip", "rflags", "cs", "fs", "gs", "lr", "sp", "pc", "fault",
        ];
        let arm = (0..=29).map(|n| format!("r{n}"));
        for name in names.iter().map(|n| n.to_string()).chain(arm) {
            assert!(is_register_name(name.as_bytes()) || name.len() <= 3, "{name}");
            assert!(go_register(format!("{name}    0x7f98b88abe4b").as_bytes()), "{name}");
            assert!(go_register(format!("{name}\t0x0").as_bytes()), "{name}");
        }
    }
}
