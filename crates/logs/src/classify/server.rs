//! llama-server's request lines: slot tasks, HTTP requests and timings.

use memchr::memchr_iter;

use crate::event::{EventKind, TimingKind};

use super::text::{after, leading_f64, leading_u32, leading_u64, trim, trim_start};

/// The `id  0 | task 3 | ` part of a llama-server slot line, returning the task and the text after it.
pub(super) fn slot_task(s: &[u8]) -> (Option<u64>, &[u8]) {
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
pub(super) fn llama_server_slot(body: &[u8]) -> Option<EventKind<'_>> {
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
pub(super) fn llama_server_srv(text: &[u8]) -> Option<EventKind<'_>> {
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
pub(super) fn http_request_line(req: &[u8]) -> Option<EventKind<'_>> {
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
pub(super) fn timing(text: &[u8]) -> Option<EventKind<'_>> {
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
